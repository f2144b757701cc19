"""hf_cli.py — what the Hugging Face round-trip tests (test_llama_hf.py,
test_bert_hf.py) share: a tally of checks, running the hanayo binary under
test (HANAYO, default build/hanayo), an eval's loss, and a refusal that
must exit 2 with one line naming its cause. numpy-free; imported by path
(the tests put tests/lib on sys.path). It lives in tests/lib, not tests/,
because make runs every tests/*.py as a test."""
import json
import os
import subprocess
import sys

tally = {"passed": 0, "failed": 0}


def check(cond, what):
    """Counts one check; a failing one is printed with `what`."""
    if cond:
        tally["passed"] += 1
    else:
        tally["failed"] += 1
        print("FAIL: " + what, file=sys.stderr)
    return bool(cond)


def hanayo(*args):
    exe = os.environ.get("HANAYO", "build/hanayo")
    r = subprocess.run([exe] + list(args), capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


def eval_loss(config, *args):
    """`hanayo eval CONFIG --batches 1 ARGS`'s loss (NaN, and a failed
    check, when it does not run)."""
    rc, out, err = hanayo("eval", config, "--batches", "1", *args)
    if not check(rc == 0, "eval %s: exit %d: %s" % (" ".join(args), rc, err.strip())):
        return float("nan")
    return json.loads(out.splitlines()[0])["loss"]


def rel(a, b):
    return abs(a - b) / abs(b)


def expect_refused(what, needle, *args):
    rc, out, err = hanayo(*args)
    msg = err.strip()
    check(rc == 2, "%s: exit %d, want 2: %s" % (what, rc, msg))
    check(needle in msg and len(msg.splitlines()) == 1,
          "%s: want one line naming %r, got: %s" % (what, needle, msg))


def finish(name):
    """Prints "NAME: N passed, N failed"; the exit status."""
    print("%s: %d passed, %d failed" % (name, tally["passed"], tally["failed"]))
    return 1 if tally["failed"] else 0
