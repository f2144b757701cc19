#!/usr/bin/env bash
# test_signals.sh — SIGTERM and SIGINT stop `hanayo train` cleanly.
#
# A long run (a small model, 100000 steps) is started in the background;
# once its progress shows a step, it gets the signal. It must then:
#   - exit with 128 + the signal's number: 143 for SIGTERM, 130 for SIGINT
#     (a shell reports 143 for a process SIGTERM killed outright too, so
#     the checks below, not the status alone, show it stopped on purpose);
#   - print "stopped at step N because of SIGTERM; continue with --resume
#     DIR/step_00000N", after "checkpoint: DIR/step_00000N";
#   - leave exactly that checkpoint (nothing temporary), from which
#     `train --resume` runs on to step N + 2;
#   - with checkpoint.dir null, print that no checkpoint was written.
# A SIGTERM that finds the run blocked in a system call (a write to a pipe
# nobody reads) cuts it short: the checkpoint is written while the pipe is
# still full (with SA_RESTART the write went on waiting and the signal was
# swallowed). A run stopped (SIGSTOP) for longer than watchdog_s and then
# continued goes on training, with no watchdog report. And a second signal
# while the run winds down takes the default action (the last case says
# how it catches the run in that state for sure).
# A background job of a script starts with SIGINT ignored, which hanayo
# keeps (see catch_stop_signals in tools/cmd_train.c), so the runs start
# through `env --default-signal`, as from a terminal. Runs under the ASan
# build too (make test). Prints "signals: N passed, N failed".
set -u

HY_TEST_NAME=signals
. "$(dirname "$0")/lib/cli.sh"

run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 3
expect_rc 0
small=(--set "data.train=$tmp/t.bin" --set data.val=null --set model.layers=4
       --set model.d_model=32 --set model.seq_len=16 --set schedule.micro_batch_size=2
       --set schedule.micro_batches=4 --set train.log_every=1 --set checkpoint.every=0)

# start NAME ARGS...: hanayo train in the background, output in
# $tmp/NAME.out and .err; sets $pid once a step line shows (or fails).
start() {
    local name=$1
    shift
    env --default-signal=INT,TERM "$HANAYO" train configs/tiny-gpt.json "${small[@]}" \
        --set train.steps=100000 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null &
    pid=$!
    for _ in $(seq 600); do   # up to 60 s: the ASan build starts slowly
        grep -q '^step ' "$tmp/$name.out" && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    bad "$name: no step line: $(head -c 300 "$tmp/$name.err")"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid"
    return 1
}

# stop_with NAME SIG STATUS: sends SIG to the run, which must stop cleanly
# with STATUS and a checkpoint that resumes.
stop_with() {
    local name=$1 sig=$2 want=$3 ck=$tmp/$1-ck
    start "$name" --set "checkpoint.dir=$ck" || return
    kill -"$sig" "$pid"
    wait "$pid"
    rc=$?
    last="train ($name, $sig)"
    cp "$tmp/$name.out" "$tmp/out"
    cp "$tmp/$name.err" "$tmp/err"
    expect_rc "$want"
    if [ -s "$tmp/err" ]; then bad "$last: stderr: $(head -c 300 "$tmp/err")"; else ok; fi
    local n
    n=$(sed -n "s/^stopped at step \([0-9]*\) because of SIG$sig; continue with --resume .*/\1/p" \
        "$tmp/out")
    if [ -z "$n" ]; then
        bad "$last: no 'stopped at step N because of SIG$sig' line: $(tail -n 3 "$tmp/out")"
        return
    fi
    ok
    local step_dir
    step_dir=$(printf '%s/step_%06d' "$ck" "$n")
    expect_out "^checkpoint: $step_dir\$"
    expect_out "continue with --resume $step_dir\$"
    # The last line says it; nothing after it.
    if tail -n 1 "$tmp/out" | grep -q '^stopped at step'; then ok; else
        bad "$last: the stop line is not the last: $(tail -n 2 "$tmp/out")"
    fi
    local left
    left=$(ls -A "$ck" | tr '\n' ' ')
    if [ "$left" = "$(basename "$step_dir") " ]; then ok; else
        bad "$last: $ck holds '$left', want $(basename "$step_dir") alone"
    fi
    # Two steps more, not the stopped run's 100000: another learning-rate
    # schedule, said so.
    run train configs/tiny-gpt.json "${small[@]}" --set "train.steps=$((n + 2))" \
        --set "checkpoint.dir=$ck" --resume "$step_dir" --allow-schedule-change
    expect_rc 0
    expect_out "resumed from $step_dir after step $n"
    expect_out "step $((n + 2))/$((n + 2))"
}

stop_with term TERM 143
stop_with int INT 130

# ---- no checkpoint.dir --------------------------------------------------------------
if start nodir --set checkpoint.dir=null; then
    kill -TERM "$pid"
    wait "$pid"
    rc=$?
    last="train (no checkpoint.dir, TERM)"
    cp "$tmp/nodir.out" "$tmp/out"
    expect_rc 143
    expect_out '^stopped at step [0-9]* because of SIGTERM; no checkpoint written: no checkpoint.dir is configured$'
    expect_no_out '^checkpoint: '
fi

# ---- SIGTERM while blocked in a write ----------------------------------------------------
# Its stdout is a pipe of one page that nobody reads: once the pipe is full
# and the run's main thread sits in write(2) (/proc/PID/syscall), it gets
# SIGTERM; the checkpoint must appear while the pipe stays full. Then the
# pipe is drained, and the run exits 143 with its stop line.
if [ ! -r /proc/self/syscall ]; then
    echo "signals: no /proc/PID/syscall; skipped the blocked-write case" >&2
elif python3 - "$HANAYO" "$tmp" "${small[@]}" <<'EOF' 2>"$tmp/blocked.err"; then ok; else
import fcntl, glob, os, platform, re, struct, subprocess, sys, termios, time
hanayo, tmp, small = sys.argv[1], sys.argv[2], sys.argv[3:]
ck = tmp + "/blocked-ck"
WRITE = {"x86_64": 1, "aarch64": 64}.get(platform.machine())
def fail(why):
    sys.exit("blocked: " + why)
if WRITE is None:
    print("signals: no write(2) number for %s; skipped the blocked-write case"
          % platform.machine(), file=sys.stderr)
    sys.exit(0)
r, w = os.pipe()
fcntl.fcntl(w, 1031, 4096)   # F_SETPIPE_SZ: one page
p = subprocess.Popen(["env", "--default-signal=INT,TERM", hanayo, "train",
                      "configs/tiny-gpt.json"] + small +
                     ["--set", "train.steps=100000", "--set", "checkpoint.dir=" + ck],
                     stdout=w, stderr=open(tmp + "/blocked.hanayo.err", "w"),
                     stdin=subprocess.DEVNULL)
os.close(w)
def avail():
    return struct.unpack("i", fcntl.ioctl(r, termios.FIONREAD, b"\0" * 4))[0]
def in_write():   # the main thread (the process's own id) waits in write(2)
    try:
        return open("/proc/%d/syscall" % p.pid).read().split()[0] == str(WRITE)
    except (OSError, IndexError):
        return False
deadline = time.time() + 120
while not (avail() >= 4096 - 200 and in_write()):
    if p.poll() is not None:
        fail("hanayo exited (%d) before it blocked on the full pipe" % p.returncode)
    if time.time() > deadline:
        p.kill()
        fail("it never blocked in write on the full pipe")
    time.sleep(0.01)
p.send_signal(15)
while not glob.glob(ck + "/step_*/state.json"):
    if p.poll() is not None:
        fail("hanayo exited (%d) before the checkpoint showed" % p.returncode)
    if time.time() > deadline:
        p.kill()
        fail("no checkpoint while the pipe stayed full: SIGTERM did not cut the write short")
    time.sleep(0.01)
out = b""
while True:   # drain: the run prints its stop line and exits
    chunk = os.read(r, 65536)
    if not chunk:
        break
    out += chunk
try:
    rc = p.wait(60)
except subprocess.TimeoutExpired:
    p.kill()
    fail("it did not exit once its output was read")
if rc != 143:
    fail("exit %d, want 143; stderr: %s" % (rc, open(tmp + "/blocked.hanayo.err").read()[:300]))
m = re.search(rb"stopped at step (\d+) because of SIGTERM; continue with --resume (\S+)\n$", out)
if not m:
    fail("no stop line at the end: %r" % out[-300:])
if m.group(2).decode() != "%s/step_%06d" % (ck, int(m.group(1))):
    fail("the stop line names %s" % m.group(2).decode())
if sorted(os.listdir(ck)) != [os.path.basename(m.group(2).decode())]:
    fail("%s holds %s" % (ck, sorted(os.listdir(ck))))
EOF
    bad "$(cat "$tmp/blocked.err")"
fi

# ---- stopped for longer than watchdog_s ------------------------------------------------------
# SIGSTOP for 5 s, twice, with watchdog_s 2: the ranks were not stalled, the
# whole process was, so the run must go on (a new step line after each
# SIGCONT) and end only on the SIGTERM that follows, exit 143, with nothing
# on stderr. The sleeps make the pause; nothing is timed.
if start paused --set checkpoint.dir=null --set watchdog_s=2; then
    last="train (SIGSTOP 5 s, watchdog_s 2)"
    for round in 1 2; do
        kill -STOP "$pid"
        sleep 5
        seen=$(grep -c '^step ' "$tmp/paused.out")
        kill -CONT "$pid"
        for _ in $(seq 600); do   # up to 60 s for the next step line
            [ "$(grep -c '^step ' "$tmp/paused.out")" -gt "$seen" ] && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if [ "$(grep -c '^step ' "$tmp/paused.out")" -gt "$seen" ]; then ok; else
            bad "$last: no step after SIGCONT (round $round): $(head -c 400 "$tmp/paused.err")"
            break
        fi
    done
    kill -TERM "$pid"
    wait "$pid"
    rc=$?
    cp "$tmp/paused.out" "$tmp/out"
    cp "$tmp/paused.err" "$tmp/err"
    expect_rc 143
    if [ -s "$tmp/err" ]; then bad "$last: stderr: $(head -c 400 "$tmp/err")"; else ok; fi
    expect_out '^stopped at step [0-9]* because of SIGTERM; no checkpoint written'
fi

# ---- a second signal -------------------------------------------------------------------
# The run must be caught "while stopping" for sure, not by luck of timing:
# its stdout is a pipe of one page that nobody reads once it is nearly
# full, so the lines the stop prints (~170 bytes, written at once) cannot
# go out and the run hangs there, after its handler has run. Then SigCgt
# must show neither signal caught any more, and the second SIGTERM must
# kill it (Popen reports -15 for a process a signal ended, unlike an
# exit(143)) before it could print its "stopped at" line.
if [ ! -r /proc/self/status ]; then
    echo "signals: no /proc; skipped the second-signal case" >&2
elif python3 - "$HANAYO" "$tmp" "${small[@]}" <<'EOF' 2>"$tmp/twice.err"; then ok; else
import fcntl, os, struct, subprocess, sys, termios, time
hanayo, tmp, small = sys.argv[1], sys.argv[2], sys.argv[3:]
def fail(why):
    sys.exit("twice: " + why)
def caught(pid):   # how many of SIGINT (bit 1) and SIGTERM (bit 14) have a handler
    for line in open("/proc/%d/status" % pid):
        if line.startswith("SigCgt:"):
            m = int(line.split()[1], 16)
            return (m >> 1 & 1) + (m >> 14 & 1)
r, w = os.pipe()
fcntl.fcntl(w, 1031, 4096)   # F_SETPIPE_SZ: one page
p = subprocess.Popen(["env", "--default-signal=INT,TERM", hanayo, "train",
                      "configs/tiny-gpt.json"] + small +
                     ["--set", "train.steps=100000", "--set", "checkpoint.dir=%s/twice-ck" % tmp],
                     stdout=w, stderr=open(tmp + "/twice.hanayo.err", "w"),
                     stdin=subprocess.DEVNULL)
os.close(w)
def avail():
    return struct.unpack("i", fcntl.ioctl(r, termios.FIONREAD, b"\0" * 4))[0]
deadline = time.time() + 120
while avail() < 4096 - 150:
    if p.poll() is not None:
        fail("hanayo exited (%d) before its output filled the pipe" % p.returncode)
    if time.time() > deadline:
        p.kill()
        fail("the pipe never filled")
    time.sleep(0.01)
if caught(p.pid) != 2:
    p.kill()
    fail("SIGINT and SIGTERM are not both caught")
p.send_signal(15)
while caught(p.pid) != 0:
    if time.time() > deadline or p.poll() is not None:
        p.kill()
        fail("after the first SIGTERM the handlers stay installed (SigCgt)")
    time.sleep(0.01)
p.send_signal(15)
try:
    rc = p.wait(60)
except subprocess.TimeoutExpired:
    p.kill()
    fail("the second SIGTERM did not end it")
out = b""
while True:
    chunk = os.read(r, 65536)
    if not chunk:
        break
    out += chunk
if rc != -15:
    fail("the second SIGTERM: returncode %d, want -15 (killed by it)" % rc)
if b"stopped at step" in out:
    fail("it printed its stop line after all")
EOF
    bad "$(cat "$tmp/twice.err")"
fi

hy_finish
