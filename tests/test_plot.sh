#!/usr/bin/env bash
# test_plot.sh — `hanayo plot`, from the outside, on the logs of a real
# tiny training (train --log-json):
#   - the SVG is well-formed XML; its loss polyline has one point per step,
#     x in proportion to the step and y to the loss (higher loss higher
#     up), and the val loss, lr, tokens/s and grad norm series are there;
#   - two logs give two series of each, in two colours, the legend naming
#     both files; the default output is the first log's name with .svg;
#   - bad lines are reported with their line numbers and skipped, null
#     values counted; a log with nothing to draw is refused (exit 2);
#   - an output that is one of the logs (by name or by another link) is
#     refused, the log untouched; a missing directory leaves nothing.
# Prints "plot: N passed, N failed".
set -u

HY_TEST_NAME=plot
. "$(dirname "$0")/lib/cli.sh"

# ---- two real logs -------------------------------------------------------------
run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 3
expect_rc 0
small=(--set "data.train=$tmp/t.bin" --set "data.val=$tmp/t.bin" --set checkpoint.dir=null
       --set model.seq_len=16 --set schedule.micro_batch_size=2 --set schedule.micro_batches=4
       --set train.log_every=1)
run train configs/tiny-gpt.json "${small[@]}" --set train.steps=12 --log-json "$tmp/a.jsonl"
expect_rc 0
run train configs/tiny-gpt.json "${small[@]}" --set train.steps=8 --set train.lr=3e-3 \
    --log-json "$tmp/b.jsonl"
expect_rc 0

run plot "$tmp/a.jsonl"
expect_rc 0
expect_out "^$tmp/a.jsonl: 12 steps (1..12), 1 validation; loss [0-9.]* -> [0-9.]*"
expect_out "^wrote $tmp/a.svg\$"
if [ -s "$tmp/err" ]; then bad "plot of a good log warned: $(cat "$tmp/err")"; else ok; fi

# check_svg SVG LOG...: the drawing against the logs, in Python.
check_svg() {
    python3 - "$@" <<'EOF'
import json, sys, xml.dom.minidom
svg, logs = sys.argv[1], sys.argv[2:]
doc = xml.dom.minidom.parse(svg)                    # well-formed, or this raises
lines = doc.getElementsByTagName("polyline")
def series(cls):
    return [l for l in lines if l.getAttribute("class") == cls]
def points(l):
    return [tuple(map(float, p.split(","))) for p in l.getAttribute("points").split()]
def fit(pairs, what):
    # pixels = a * value + b, from the two points farthest apart
    lo, hi = min(pairs), max(pairs)
    assert hi[0] > lo[0], what + ": all values equal"
    a = (hi[1] - lo[1]) / (hi[0] - lo[0])
    return a, lo[1] - a * lo[0]
def check(pairs, ab, what):
    for v, px in pairs:
        assert abs(px - (ab[0] * v + ab[1])) < 0.02, (what, v, px, ab)
texts = [t.firstChild.data for t in doc.getElementsByTagName("text") if t.firstChild]
colours = set()
for i, path in enumerate(logs):
    rows = [json.loads(s) for s in open(path)]
    fx = fy = None
    for key in ("loss", "val_loss", "lr", "tokens_per_s", "grad_norm"):
        got = series(key)
        assert len(got) == len(logs), (key, len(got), len(logs))
        want = [(r["step"], r[key]) for r in rows if key in r]
        pts = points(got[i])
        assert len(pts) == len(want), (key, path, len(pts), len(want))
        xs = [(s, p[0]) for (s, _), p in zip(want, pts)]
        ys = [(v, p[1]) for (_, v), p in zip(want, pts)]
        if key != "val_loss":   # its own scales; val_loss is drawn on the loss's
            fx = fit(xs, key + " x")
            assert fx[0] > 0, key
            fy = fit(ys, key + " y") if len(set(v for v, _ in ys)) > 1 else None
            assert fy is None or fy[0] < 0, key   # y grows downwards
        check(xs, fx, key + " x")
        if fy: check(ys, fy, key + " y")
        if key == "loss":
            colours.add(got[i].getAttribute("stroke"))
            assert path in texts, ("legend", path, texts)
assert len(colours) == len(logs), colours
EOF
}
if check_svg "$tmp/a.svg" "$tmp/a.jsonl"; then ok; else bad "a.svg does not match a.jsonl"; fi

run plot "$tmp/a.jsonl" "$tmp/b.jsonl" --out "$tmp/both.svg"
expect_rc 0
expect_out "^$tmp/b.jsonl: 8 steps (1..8)"
expect_out "^wrote $tmp/both.svg\$"
if check_svg "$tmp/both.svg" "$tmp/a.jsonl" "$tmp/b.jsonl"; then ok; else
    bad "both.svg does not match a.jsonl and b.jsonl"
fi
# The SVG breaks if the loss changes: one value edited, the check fails.
sed '5s/"loss": [0-9.]*/"loss": 9.5/' "$tmp/a.jsonl" > "$tmp/edited.jsonl"
if check_svg "$tmp/a.svg" "$tmp/edited.jsonl" 2>"$tmp/why"; then
    bad "check_svg passed a log that is not the one drawn"
elif grep -q "AssertionError: ('loss y'" "$tmp/why"; then ok; else
    bad "check_svg failed on the edited log for another reason: $(cat "$tmp/why")"
fi

# ---- bad lines and null values -----------------------------------------------------
{
    head -n 3 "$tmp/a.jsonl"
    echo 'not json at all'
    echo '[1, 2]'
    echo '{"loss": 2.5}'
    echo '{"step": 7, "loss": "high"}'
    echo '{"step": 8, "loss": null, "lr": 1e-3, "grad_norm": null, "tokens_per_s": 5, "ms": 1}'
    echo ''
    echo '{"step": 9, "loss": 3.25, "lr": 1e-3, "grad_norm": 1, "tokens_per_s": 5, "ms": 1, "epoch": 1}'
} > "$tmp/mixed.jsonl"
run plot "$tmp/mixed.jsonl"
expect_rc 0
expect_err "^warning: $tmp/mixed.jsonl:4: not JSON"
expect_err "^warning: $tmp/mixed.jsonl:5: an array, not a JSON object"
expect_err "^warning: $tmp/mixed.jsonl:6: no \"step\""
expect_err "^warning: $tmp/mixed.jsonl:7: \"loss\" is a string, not a number"
expect_err "^warning: $tmp/mixed.jsonl: 2 values not finite (null) skipped, the first \"loss\" at line 8"
expect_out "^$tmp/mixed.jsonl: 5 steps (1..9), 0 validations; .*(4 bad lines, 2 null values skipped)"
if python3 -c 'import sys, xml.dom.minidom
doc = xml.dom.minidom.parse(sys.argv[1])
loss = [l for l in doc.getElementsByTagName("polyline") if l.getAttribute("class") == "loss"]
assert len(loss[0].getAttribute("points").split()) == 4   # steps 1, 2, 3, 9
' "$tmp/mixed.svg"; then ok; else bad "mixed.svg: the loss is not the 4 finite losses"; fi

# Many bad lines: the first ten named, the rest counted.
{ for i in $(seq 1 14); do echo "junk $i"; done; head -n 1 "$tmp/a.jsonl"; } > "$tmp/junk.jsonl"
run plot "$tmp/junk.jsonl"
expect_rc 0
expect_err "^warning: $tmp/junk.jsonl:10: not JSON"
expect_err "^warning: $tmp/junk.jsonl: 4 more bad lines skipped"

# Nothing to draw: refused, one line naming the file and its first bad line.
printf 'hello\n{"step": 1, "loss": null}\n' > "$tmp/none.jsonl"
expect_input_error plot "$tmp/none.jsonl"
expect_err "$tmp/none.jsonl: nothing to plot: 1 of its 2 lines are bad, the first at line 1: not JSON"
if [ -e "$tmp/none.svg" ]; then bad "a refused plot wrote none.svg"; else ok; fi
: > "$tmp/empty.jsonl"
expect_input_error plot "$tmp/empty.jsonl"
expect_err 'the file is empty'
printf '{"step": 1, "loss": null}\n' > "$tmp/nulls.jsonl"
expect_input_error plot "$tmp/nulls.jsonl"
expect_err 'no line has a finite loss'
# A second log that is bad refuses the whole drawing.
expect_input_error plot "$tmp/a.jsonl" "$tmp/none.jsonl" --out "$tmp/two.svg"
if [ -e "$tmp/two.svg" ]; then bad "a refused plot wrote two.svg"; else ok; fi
expect_input_error plot "$tmp/missing.jsonl"
expect_err "$tmp/missing.jsonl: cannot open training log"
expect_input_error plot "$tmp"
expect_err 'not a regular file'

# ---- where it writes ----------------------------------------------------------------
cp "$tmp/a.jsonl" "$tmp/keep.jsonl"
expect_input_error plot "$tmp/a.jsonl" --out "$tmp/a.jsonl"
expect_err "is the same file as $tmp/a.jsonl, an input of this run (a log plotted)"
expect_same "$tmp/a.jsonl" "$tmp/keep.jsonl"
ln -s a.jsonl "$tmp/link.svg"
expect_input_error plot "$tmp/b.jsonl" "$tmp/a.jsonl" --out "$tmp/link.svg"
expect_err 'is the same file as'
expect_same "$tmp/a.jsonl" "$tmp/keep.jsonl"
# The default name is a log too (a log named x.svg): refused the same way.
cp "$tmp/a.jsonl" "$tmp/x.svg"
expect_input_error plot "$tmp/x.svg"
expect_err "the drawing (default --out) $tmp/x.svg: is the same file as"
expect_input_error plot "$tmp/a.jsonl" --out "$tmp/no/such/dir/a.svg"
if [ -e "$tmp/no" ]; then bad "a failed plot made $tmp/no"; else ok; fi
# A name without extension gets .svg added.
cp "$tmp/a.jsonl" "$tmp/runlog"
run plot "$tmp/runlog"
expect_rc 0
expect_out "^wrote $tmp/runlog.svg\$"

# ---- arguments -------------------------------------------------------------------------
expect_input_error plot
expect_err 'plot needs a log'
expect_input_error plot "$tmp/a.jsonl" --out
expect_input_error plot "$tmp/a.jsonl" --outt x.svg
expect_err "did you mean --out?"
run plot --help
expect_rc 0
expect_out '^usage: hanayo plot LOG.jsonl'

hy_finish
