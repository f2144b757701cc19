#!/usr/bin/env bash
# test_profile_cli.sh — `hanayo profile`, `hanayo plan --costs` and `hanayo
# tune` from the outside.
#
# Runs the built binary ($HANAYO, default build/hanayo) from the repository
# root on tiny-gpt shrunk by --set (CPU backend pinned): profile writes
# trace.json, summary.json, timeline.svg and bars.svg, which python3 checks
# independently (Chrome-trace structure, one track per rank, one event per
# action, the summary's keys, whole SVG files); plan reads the summary back
# with --costs, alone and with --compare; a bad summary, a bad --out and bad
# flags exit 2 with one "hanayo: " line and leave no file; tune --apply
# writes a config that `hanayo check` accepts. Prints "profile-cli: N
# passed, N failed"; exits non-zero on any failure.
set -u

HY_TEST_NAME=profile-cli
. "$(dirname "$0")/lib/cli.sh"

hanayo_abs=$(cd "$(dirname "$HANAYO")" && pwd)/$(basename "$HANAYO")
cfg=configs/tiny-gpt.json
run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 5
expect_rc 0
small=(--set "data.train=$tmp/t.bin" --set data.val=null --set checkpoint.dir=null
       --set backend=cpu --set model.seq_len=16 --set schedule.micro_batch_size=2
       --set schedule.micro_batches=4)

# ---- profile ------------------------------------------------------------------
run profile "$cfg" "${small[@]}" --steps 2 --out "$tmp/prof"
expect_rc 0
expect_out '^  measured   0\.'
expect_out '^  predicted  0\.'
expect_out '^  ideal      0\.1111'
expect_out 'trace.json'
for f in trace.json summary.json timeline.svg bars.svg; do
    if [ -s "$tmp/prof/$f" ]; then ok; else bad "profile wrote no $f"; fi
done
if python3 - "$tmp/prof" <<'EOF'
import json, sys
d = sys.argv[1]
t = json.load(open(d + '/trace.json'))
ev = t['traceEvents']
assert isinstance(ev, list) and t['displayTimeUnit'] in ('ms', 'ns'), t.keys()
names = [e for e in ev if e['ph'] == 'M' and e['name'] == 'thread_name']
assert sorted(e['args']['name'] for e in names) == ['rank 0', 'rank 1'], names
acts = [e for e in ev if e['ph'] == 'X' and e['cat'] in ('forward', 'backward')]
# hanayo W = 1, P = 2, M = 4: 2 x 2W x M = 16 actions per rank
for r in (0, 1):
    mine = [e for e in acts if e['tid'] == r]
    assert len(mine) == 16, (r, len(mine))
    assert len({e['name'] for e in mine}) == 16
    for e in mine:
        assert e['ts'] >= 0 and e['dur'] >= 0, e
        assert e['name'][0] in 'FB' and set(e['args']) >= {'mb', 'stage', 'wait_us', 'compute_us', 'send_us'}
s = [e for e in ev if e['ph'] == 's']
f = [e for e in ev if e['ph'] == 'f']
assert len(s) == len(f) > 0 and sorted(e['id'] for e in s) == sorted(e['id'] for e in f)
tails = {e['name'] for e in ev if e['ph'] == 'X' and e['cat'] == 'step'}
assert {'tied-embedding exchange', 'norm+clip', 'optimizer'} <= tails, tails
m = json.load(open(d + '/summary.json'))
assert m['schedule']['kind'] == 'hanayo' and m['schedule']['stages'] == 4
assert len(m['stages']) == 4 and len(m['ranks']) == 2 and m['split'] == [1, 1, 1, 1]
assert 0 <= m['bubble']['measured'] < 1 and 0 <= m['bubble']['predicted'] < 1
assert abs(m['bubble']['ideal'] - 1 / 9) < 1e-9
for k in ('layer_fwd_ms', 'layer_bwd_ms', 'first_fwd_ms', 'last_fwd_ms'):
    assert m['cost_model'][k] >= 0
for st in m['stages']:
    assert st['fwd_ms'] > 0 and st['bwd_ms'] > 0, st
for name in ('timeline.svg', 'bars.svg'):
    text = open(d + '/' + name).read()
    assert text.startswith('<svg') and text.rstrip().endswith('</svg>'), name
# one rect per action in the timeline, as hanayo plan --svg draws
assert open(d + '/timeline.svg').read().count('<rect') == 32
EOF
then ok; else bad "profile files: see the python error above"; fi
if ls "$tmp/prof" | grep -q tmp; then bad "profile left a temporary file"; else ok; fi

# The default directory: profile/<config name>, under the working directory.
cfg_abs=$(pwd)/$cfg
(cd "$tmp" && "$hanayo_abs" profile "$cfg_abs" "${small[@]}" --steps 1 >"$tmp/out" 2>"$tmp/err")
rc=$?
last="profile (default --out)"
expect_rc 0
if [ -s "$tmp/profile/tiny-gpt/summary.json" ]; then ok; else bad "no $tmp/profile/tiny-gpt/summary.json"; fi

# The slow-stage hook shows in the measured costs: stage 0's forward has
# no input from another rank, so its cost runs from its start and holds
# the whole delay, at least 10 ms however loaded the machine (how far the
# others stay below it depends on the machine, so is not asserted).
run profile "$cfg" "${small[@]}" --steps 2 --out "$tmp/slow" --slow-stage 0:0.01
expect_rc 0
if python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))
s = m["stages"]
assert s[0]["fwd_ms"] >= 10 * (1 - 1e-6), s
' "$tmp/slow/summary.json"; then ok; else bad "--slow-stage did not show in summary.json"; fi

# Bad input: exit 2, one line, nothing written.
expect_input_error profile "$cfg" "${small[@]}" --steps 0
expect_err '\-\-steps'
expect_input_error profile "$cfg" "${small[@]}" --slow-stage 0
expect_err 'STAGE:SECONDS'
expect_input_error profile "$cfg" "${small[@]}" --slow-stage 9:0.01 --out "$tmp/none1"
expect_err 'slow stage 9'
expect_input_error profile "$cfg" "${small[@]}" --outt x
expect_err 'did you mean --out'
expect_input_error profile "$cfg" "${small[@]}" --out "$tmp/t.bin/x"
expect_err 'not a directory'
expect_input_error profile "$cfg" "${small[@]}" --set schedule.wavez=2
expect_input_error profile "$cfg" --set "data.train=$tmp/missing.bin" --set backend=cpu --out "$tmp/none2"
expect_err 'missing.bin'
for d in none1 none2; do
    if [ -e "$tmp/$d" ]; then bad "a failed profile created $tmp/$d"; else ok; fi
done

# ---- plan --costs -------------------------------------------------------------
run plan "$cfg" "${small[@]}" --costs "$tmp/prof/summary.json"
expect_rc 0
expect_out '^measured costs    .*as profiled'
expect_out '^costs             per stage, F:'
run plan "$cfg" "${small[@]}" --costs "$tmp/prof/summary.json" --json
expect_rc 0
expect_json "(len(p['fwd_costs']), len(p['bwd_costs']), p['stages'])" "(4, 4, 4)"
if python3 -c 'import json, sys
p = json.load(open(sys.argv[1])); m = json.load(open(sys.argv[2]))
assert all(abs(a - s["fwd_ms"]) < 1e-9 for a, s in zip(p["fwd_costs"], m["stages"]))
' "$tmp/out" "$tmp/prof/summary.json"; then ok; else bad "plan --costs --json: costs differ from summary.json"; fi
# At scale with the measured ms: one replica's step is the measured
# makespan, no --step-ms needed.
run plan "$cfg" "${small[@]}" --costs "$tmp/prof/summary.json" --replicas 1,2
expect_rc 0
expect_out '(measured costs)$'
if python3 -c 'import re, sys
t = open(sys.argv[1]).read()
span = float(re.search(r"^makespan +([0-9.]+)", t, re.M).group(1))
one = float(re.search(r"^ +1 +[0-9]+ +([0-9.]+) ", t, re.M).group(1))
two = float(re.search(r"^ +2 +[0-9]+ +([0-9.]+) ", t, re.M).group(1))
assert abs(span - one) < 0.01 and two >= one, (span, one, two)
' "$tmp/out"; then ok; else bad "plan --costs --replicas: $(tail -n 4 "$tmp/out")"; fi
# The same stage count with another split: priced by the per-layer model.
run plan "$cfg" "${small[@]}" --set 'schedule.split=[0,2,1,1]' --costs "$tmp/prof/summary.json"
expect_rc 0
expect_out 'per-layer model'
run plan "$cfg" "${small[@]}" --costs "$tmp/prof/summary.json" --compare
expect_rc 0
expect_out '^measured costs\|^P = 2, M = 4; measured costs'
for k in gpipe 1f1b 'interleaved v=2' 'hanayo W=1'; do expect_out "^$k "; done

# Bad summaries and combinations: exit 2 naming the file and the place.
expect_input_error plan "$cfg" --costs "$tmp/nosuch.json"
expect_err 'nosuch.json'
printf '{"schedule": ' >"$tmp/broken.json"
expect_input_error plan "$cfg" --costs "$tmp/broken.json"
expect_err 'broken.json: line 1'
python3 -c 'import json, sys
m = json.load(open(sys.argv[1])); m["stages"][1]["fwd_ms"] = -2
json.dump(m, open(sys.argv[2], "w"))' "$tmp/prof/summary.json" "$tmp/negative.json"
expect_input_error plan "$cfg" --costs "$tmp/negative.json"
expect_err 'negative.json: stages\[1\].fwd_ms'
python3 -c 'import json, sys
m = json.load(open(sys.argv[1])); del m["cost_model"]
json.dump(m, open(sys.argv[2], "w"))' "$tmp/prof/summary.json" "$tmp/nomodel.json"
expect_input_error plan "$cfg" --costs "$tmp/nomodel.json"
expect_err 'cost_model is missing'
expect_input_error plan "$cfg" --schedule 1f1b --costs "$tmp/prof/summary.json"
expect_err 'schedule.stages'
expect_err '\-\-compare'
expect_input_error plan "$cfg" --costs "$tmp/prof/summary.json" --fwd-cost 2
expect_input_error plan "$cfg" --costs ''

# ---- tune ---------------------------------------------------------------------
run tune "$cfg" "${small[@]}" --steps 1 --top 3 --apply "$tmp/tuned.json"
expect_rc 0
expect_out 'ranked by predicted time per token'
expect_out '^     1  '
expect_out '^   now  '
expect_out "wrote $tmp/tuned.json"
run check "$tmp/tuned.json"
expect_rc 0
expect_json "len(p['schedule']['split']) > 0" True
run tune "$cfg" "${small[@]}" --steps 1 --schedule 1f1b --top 1
expect_rc 0
expect_out '^     1  1f1b '
expect_input_error tune "$cfg" "${small[@]}" --apply "$tmp/no/such/dir/tuned.json"
expect_err 'tuned.json'
expect_input_error tune "$cfg" "${small[@]}" --memory-gb 0
expect_input_error tune "$cfg" "${small[@]}" --top 0
expect_input_error tune "$cfg" "${small[@]}" --schedule zigzag
expect_input_error tune "$cfg" "${small[@]}" --steps 1 --memory-gb 1e-9
expect_err 'memory budget'
expect_input_error tune
expect_err 'needs a config file'

# Modelled costs: nothing runs (no shard is read), the report says so,
# the same flags give the same report, and --apply writes a config that
# loads. A CPU run has no assumed rate; a GPU run (the CUDA backend's
# memory) has, and its own budget.
nodata=(--set "data.train=$tmp/no-such-shard.bin" --set data.val=null --set checkpoint.dir=null
        --set model.seq_len=16 --set schedule.micro_batch_size=2 --set schedule.micro_batches=4)
run tune "$cfg" "${nodata[@]}" --set backend=cpu --costs model --tflops 0.05 --top 2 \
    --apply "$tmp/tuned-model.json"
expect_rc 0
expect_out "costs modelled, not measured: the model's FLOPs at 0.05 TFLOP/s a rank (--tflops)"
expect_out 'taken as 0'
expect_out '^     1  '
expect_out "wrote $tmp/tuned-model.json"
cp "$tmp/out" "$tmp/model1.out"
run check "$tmp/tuned-model.json" --set "data.train=$tmp/t.bin"
expect_rc 0
run tune "$cfg" "${nodata[@]}" --set backend=cpu --costs model --tflops 0.05 --top 2
expect_rc 0
grep -v '^wrote' "$tmp/model1.out" | sed '$d' >"$tmp/model1.cut"
expect_same "$tmp/model1.cut" "$tmp/out"
run tune "$cfg" "${nodata[@]}" --set backend=cuda --costs model --memory-gb 1 --link-gbps 100
expect_rc 0
expect_out '395.6 TFLOP/s a rank (assumed: an H200'
expect_out 'over 100 Gb/s (--link-gbps), on cuda (modelled)'
expect_out 'memory budget: 1.00 GiB per rank (--memory-gb)'
# --json: the ranking with each candidate's cap; under a budget the
# uncapped orders of some schedules overshoot, a capped order stands in
# (within its cap, within the budget), and --apply writes candidate 1's
# cap as schedule.max_activations.
run tune "$cfg" "${nodata[@]}" --set backend=cpu --costs model --tflops 0.05 --memory-gb 0.0025 \
    --json --apply "$tmp/tuned-json.json"
expect_rc 0
expect_json "all(b['mem_bytes'] <= p['budget_bytes'] for b in p['best'])" True
expect_json "any(b['max_activations'] > 0 for b in p['best'])" True
expect_json "all(b['peak_activations'] <= b['max_activations'] for b in p['best'] if b['max_activations'])" True
expect_json "all(b['micro_batches'] * b['micro_batch_size'] == 8 for b in p['best'])" True
expect_json "p['now']['mem_bytes'] > p['budget_bytes']" True
cap=$(json_get "p['best'][0]['max_activations']")
if python3 -c "import json,sys; sys.exit(json.load(open('$tmp/tuned-json.json'))['schedule']['max_activations'] != $cap)"
then ok; else bad "tune --json --apply: schedule.max_activations is not candidate 1's ($cap)"; fi
run tune "$cfg" "${nodata[@]}" --set backend=cuda --costs model
expect_rc 0
expect_out "memory budget: 131.32 GiB per rank (assumed: an H200's 141 GB"
expect_input_error tune "$cfg" "${nodata[@]}" --set backend=cpu --costs model
expect_err 'modelled costs on the CPU backend need its rate: give --tflops'
expect_input_error tune "$cfg" "${small[@]}" --costs measured --tflops 100
expect_err '\-\-tflops and \-\-link-gbps price modelled costs'
expect_input_error tune "$cfg" "${small[@]}" --costs guessed
expect_input_error tune "$cfg" "${small[@]}" --costs model --tflops 0
# A CPU run that does not fit here is refused, not modelled
# (tests/test_fits.sh); a missing shard is said as such.
expect_input_error tune "$cfg" "${nodata[@]}" --set backend=cpu
expect_err 'no-such-shard.bin'

hy_finish
