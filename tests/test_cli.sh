#!/usr/bin/env bash
# test_cli.sh — the command line contract of DESIGN §7 "The command line",
# from the outside.
#
# Runs the built binary ($HANAYO, default build/hanayo) from the repository
# root and checks exit statuses (0 ok, 1 runtime failure, 2 bad input), that
# every error is one line "hanayo: <message>" on stderr with nothing on
# stdout, and what `--version`, `help config`, `check`, `plan` (timeline,
# --json, --svg, --compare) print. Prints "cli: N passed, N failed"; exits
# non-zero on any failure.
set -u

HY_TEST_NAME=cli
. "$(dirname "$0")/lib/cli.sh"

# ---- version, help, commands ------------------------------------------------
run --version
expect_rc 0
if grep -qE '^hanayo [0-9][^ ]* \(backends: [a-z ]+; data parallel: (mpi|none)\)$' "$tmp/out"; then ok; else
    bad "--version printed: $(cat "$tmp/out")"
fi
for h in help --help -h; do
    run "$h"
    expect_rc 0
    expect_out '^usage: hanayo <command>'
    expect_out '^  plan '
done
run help plan
expect_rc 0
expect_out '--micro-batches M'
run plan --help
expect_rc 0
expect_out '--comm-cost C'
run help train
expect_rc 0
expect_out '^usage: hanayo train CONFIG'
run help
expect_out '^  help \[COMMAND | config \[--markdown\]\]'
# help config: every config key with its default and range, for an
# 80-column terminal (hy_config_help_text: no line wider); --markdown: the
# table hy_config_reference() makes, docs/config.md's.
run help config
expect_rc 0
expect_out '^schedule.waves$'
expect_out '^    an integer in 1..16; default 1$'
expect_out '^\[train\] '
if python3 -c 'import sys
wide = [l for l in open(sys.argv[1], encoding="utf-8").read().split("\n") if len(l) > 80]
print("\n".join(wide))
sys.exit(1 if wide else 0)' "$tmp/out" >"$tmp/wide"; then ok; else
    bad "help config has lines over 80 columns: $(cat "$tmp/wide")"
fi
run help config --markdown
expect_rc 0
expect_out '^| key | default | allowed | meaning |$'
expect_out '^| `schedule.waves` | `1` | an integer in 1..16 | '
expect_input_error help config --md
expect_err "'--markdown' prints the keys as docs/config.md's table"
expect_input_error help nosuch

expect_input_error
expect_err 'no command given'
expect_input_error trian
expect_err "unknown command 'trian'"
expect_err "did you mean 'train'"
expect_input_error --frobnicate
# profile and tune: tests/test_profile_cli.sh runs them; here only their help.
run profile --help
expect_rc 0
expect_out '^usage: hanayo profile CONFIG'
run help tune
expect_rc 0
expect_out '^usage: hanayo tune CONFIG'
expect_input_error profile
expect_err 'needs a config file'

# ---- train and eval ---------------------------------------------------------------
run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 3
expect_rc 0
small=(--set "data.train=$tmp/t.bin" --set "data.val=$tmp/t.bin" --set checkpoint.dir=null
       --set model.seq_len=16 --set schedule.micro_batch_size=2 --set schedule.micro_batches=4)
run train configs/tiny-gpt.json "${small[@]}" --set train.steps=3 --set train.log_every=1 \
    --log-json "$tmp/log.jsonl"
expect_rc 0
expect_out 'step 3/3  loss '
expect_out 'backend: cpu'
expect_out 'val loss '
if python3 -c 'import json,sys
rows = [json.loads(line) for line in open(sys.argv[1])]
steps = [d for d in rows if "loss" in d]
assert [d["step"] for d in steps] == [1, 2, 3], rows
for d in steps:
    assert set(d) >= {"step", "loss", "lr", "grad_norm", "tokens_per_s", "ms"}, d
assert len(rows) == 4 and rows[3]["val_loss"] > 0, rows
' "$tmp/log.jsonl"; then ok; else bad "train --log-json: $(cat "$tmp/log.jsonl")"; fi
run train configs/tiny-gpt.json "${small[@]}" --set train.steps=0
expect_rc 2
expect_err 'train.steps'
run train configs/tiny-gpt.json "${small[@]}" --log-json "$tmp/no/such/dir/log.jsonl"
expect_rc 2
expect_err 'cannot open for writing'
run train configs/tiny-gpt.json --set "data.train=$tmp/missing.bin" --set checkpoint.dir=null
expect_rc 2
expect_err "$tmp/missing.bin"
run train
expect_rc 2
# A config with only a model and its own training shard trains: no
# validation shard is assumed, the checkpoint goes to checkpoints/<name>
# under the working directory, and eval reads the training shard.
mkdir -p "$tmp/own"
printf '%s\n' '{"model": {"layers": 4, "d_model": 32, "heads": 2, "seq_len": 16, "vocab": 512},' \
    ' "data": {"train": "t.bin"}}' >"$tmp/own/mine.json"
cp "$tmp/t.bin" "$tmp/own/t.bin"
hanayo_abs=$(cd "$(dirname "$HANAYO")" && pwd)/$(basename "$HANAYO")
(cd "$tmp/own" && "$hanayo_abs" train mine.json --set train.steps=2 >"$tmp/out" 2>"$tmp/err")
rc=$?
last="hanayo train mine.json (model and data.train only)"
expect_rc 0
expect_out 'step 2/2  loss '
expect_out 'checkpoint: checkpoints/mine/step_000002'
expect_no_out 'val loss'
if [ -f "$tmp/own/checkpoints/mine/step_000002/model.safetensors" ]; then ok; else
    bad "$last: no checkpoints/mine/step_000002/model.safetensors"; fi
(cd "$tmp/own" && "$hanayo_abs" eval mine.json --batches 2 >"$tmp/out" 2>"$tmp/err")
rc=$?
last="hanayo eval mine.json"
expect_rc 0
expect_json "p['batches']" 2
run eval configs/tiny-gpt.json "${small[@]}" --batches 4
expect_rc 0
expect_json "p['batches']" 4
expect_json "p['tokens']" 128
run eval configs/tiny-gpt.json "${small[@]}" --batches 0
expect_rc 2
run eval configs/tiny-gpt.json "${small[@]}" --init "$tmp/none.safetensors"
expect_rc 2
expect_err "$tmp/none.safetensors"

# ---- checkpoint verify and list ---------------------------------------------------
ckd=$tmp/own/checkpoints/mine
run checkpoint verify "$ckd"
expect_rc 0
expect_out "^ok  *$ckd/step_000002 ("
run checkpoint list "$ckd"
expect_rc 0
expect_out '^    step       loss  time (UTC)'
expect_out "^       2  *[0-9.]*  20[0-9-]*T[0-9:]*Z  *[0-9.]* KiB  $ckd/step_000002\$"
# Their parent, a directory of checkpoint.dirs: each run under it, with its
# checkpoints (a parent two levels up has none: below).
run checkpoint list "$tmp/own/checkpoints/"
expect_rc 0
expect_out "^1 run under $tmp/own/checkpoints/\$"
expect_out "^run $ckd: 1 checkpoint, newest step 2\$"
expect_out "^       2  *[0-9.]*  20[0-9-]*T[0-9:]*Z  *[0-9.]* KiB  $ckd/step_000002\$"
run checkpoint verify "$tmp/own/checkpoints"
expect_rc 0
expect_out "^ok  *$ckd/step_000002 ("
run checkpoint verify "$ckd/step_000002"
expect_rc 0
# A flipped byte: verify says BAD naming the file, exit 2; resuming and
# evaluating its weights are refused the same way.
python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(-100, 2); b = f.read(1); f.seek(-100, 2)
f.write(bytes([b[0] ^ 1]))' "$ckd/step_000002/model.safetensors"
run checkpoint verify "$ckd"
expect_rc 2
expect_out "^BAD  *$ckd/step_000002: .*model.safetensors: checksum mismatch"
expect_err "1 of 1 checkpoint in $ckd failed the check"
expect_input_error train configs/tiny-gpt.json "${small[@]}" --resume "$ckd"
expect_err 'model.safetensors: checksum mismatch: state.json records crc32c [0-9a-f]*, the file has [0-9a-f]*'
expect_input_error eval configs/tiny-gpt.json "${small[@]}" --init "$ckd/step_000002/model.safetensors"
expect_err 'checksum mismatch'
expect_input_error checkpoint
expect_err 'checkpoint needs a subcommand: verify or list'
expect_input_error checkpoint lst "$ckd"
expect_err "did you mean 'list'"
expect_input_error checkpoint verify
expect_input_error checkpoint verify "$tmp/nothing"
expect_input_error checkpoint list "$tmp"
expect_err 'no checkpoints (neither a state.json nor step_NNNNNN directories, here or one level down)'
run checkpoint --help
expect_rc 0
expect_out '^usage: hanayo checkpoint verify DIR'

# ---- only train and profile run under an MPI launcher of several processes ------
# (the launcher's environment is all hanayo reads before joining a job; it
# joins one to say the refusal once, and OpenMPI's allocations outlive it:
# leak detection off there, as in test_dp.sh)
no_leaks=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
ASAN_OPTIONS=$no_leaks OMPI_COMM_WORLD_SIZE=2 expect_input_error tune configs/tiny-gpt.json \
    --out "$tmp/mpi-tune.json"
expect_err "only 'train' and 'profile' run as data-parallel replicas"
if [ -e "$tmp/mpi-tune.json" ]; then bad "tune under mpirun left $tmp/mpi-tune.json"; else ok; fi
ASAN_OPTIONS=$no_leaks PMI_SIZE=4 expect_input_error eval configs/tiny-gpt.json
expect_err 'one of 4 MPI processes'
OMPI_COMM_WORLD_SIZE=1 run plan configs/tiny-gpt.json --json
expect_rc 0

# ---- plan at scale: --replicas ------------------------------------------------------
run plan configs/gpt2-124m.json --replicas 1,4,16 --step-ms 500 --link-gbps 100
expect_rc 0
expect_out '^data parallel: the gradients (497.9 MB) summed over the replicas'
expect_out '^         1        1048576     500.00         0.00       1.000$'
expect_out '^         4 .* 525.76 .* 25.76 .* 0.951$'
run plan configs/gpt2-124m.json --replicas 1,4 --step-ms 500 --json
expect_rc 0
if tail -n 1 "$tmp/out" | python3 -c 'import json,sys
d = json.load(sys.stdin)
r = d["replicas"]
assert d["link_gbps"] == 400 and d["grad_bytes"] == 4 * (124439808 + (50304 - 50257) * 768), d  # padded vocabulary rows are summed too
assert [x["replicas"] for x in r] == [1, 4] and abs(r[0]["step_ms"] - 500) < 1e-9, r
assert r[1]["step_ms"] > 500 and r[1]["efficiency"] < 1, r'; then ok; else
    bad "plan --replicas --json: $(tail -n 1 "$tmp/out")"; fi
expect_input_error plan configs/gpt2-124m.json --replicas 1,4
expect_err 'needs the time of one step on one server (--step-ms MS'
expect_input_error plan configs/gpt2-124m.json --replicas 1,0 --step-ms 5
expect_err "replica counts like 1,4,16,64"
expect_input_error plan configs/gpt2-124m.json --link-gbps 10
expect_err 'add --replicas'
expect_input_error plan configs/gpt2-124m.json --replicas 4 --step-ms 5 --compare

# ---- check --------------------------------------------------------------------
if [ -f configs/tiny-gpt.json ]; then
    run check configs/tiny-gpt.json
    expect_rc 0
    expect_json "p['schedule']['kind']" hanayo
    run check configs/tiny-gpt.json --set schedule.micro_batches=6
    expect_rc 0
    expect_json "p['schedule']['micro_batches']" 6
    run check --set=schedule.micro_batches=5 configs/tiny-gpt.json
    expect_rc 0
    expect_json "p['schedule']['micro_batches']" 5
    expect_input_error check configs/tiny-gpt.json --set schedule.wavez=2
    expect_err 'wavez'
    expect_input_error check configs/tiny-gpt.json --set
    expect_input_error check configs/tiny-gpt.json --sett x=1
    expect_err 'did you mean --set'
    expect_input_error check configs/tiny-gpt.json configs/tiny-gpt.json
    # More stages than layers: check, train and tune refuse it alike, with
    # settings that fit (test_config.c checks that each one does).
    for cmd in check train tune; do
        expect_input_error $cmd configs/gpt2-124m.json --set schedule.ranks=8
        expect_err '16 stages but model.layers is 12.*settings that fit: schedule.ranks=6 or fewer (hanayo, 1 wave), schedule.kind=1f1b (8 stages'
    done
else
    echo "cli: configs/tiny-gpt.json missing; check tests on it skipped" >&2
fi
expect_input_error check
expect_err 'needs a config file'
run check "$tmp/no-such.json"
if [ "$rc" -eq 1 ] || [ "$rc" -eq 2 ]; then ok; else bad "$last: exit $rc"; fi
expect_err "no-such.json"
printf '{"schedule": {"ranks": 0}}\n' >"$tmp/bad.json"
expect_input_error check "$tmp/bad.json"
expect_err 'schedule.ranks'
# A path of about 4000 characters does not hide the reason: the message is
# cut in its middle, keeping the key in front and the reason at the end.
long=$tmp
while [ ${#long} -lt 3800 ]; do long=$long/$(printf 'd%.0s' $(seq 199)); done
if mkdir -p "$long"; then
    run checkpoint verify "$long/ck"
    if [ "$rc" -eq 1 ] || [ "$rc" -eq 2 ]; then ok; else bad "$last: exit $rc"; fi
    expect_err "^hanayo: $tmp/ddd"
    expect_err 'ddd\.\.\.ddd'
    expect_err 'ddd/ck: cannot list: No such file or directory$'
else
    bad "could not make a directory of ${#long} characters"
fi

# ---- plan ---------------------------------------------------------------------
run plan --schedule 1f1b --ranks 4 --micro-batches 8
expect_rc 0
for r in 0 1 2 3; do expect_out "^rank $r |"; done
expect_no_out '^rank 4 |'
expect_out '^bubble ratio      0.2727 (ideal 0.2727)$'
expect_out '^ranks             P = 4$'
if grep -q $'\x1b' "$tmp/out"; then bad "$last: colour into a file"; else ok; fi
# plan says what planning took: under the costs the order is made for,
# no search; with a transfer time, the orders the search built (never a
# time asserted, only the line's form).
expect_out '^planning          [0-9.]* s ([0-9.]* s of CPU): the order made for these costs, no search$'
run plan --schedule hanayo --ranks 4 --micro-batches 8 --comm-cost 0.2
expect_rc 0
expect_out '^planning          [0-9.]* s ([0-9.]* s of CPU\( on [2-9][0-9]* threads\)\?): [1-9][0-9]* orders built, [1-9][0-9]* actions simulated\( ([1-9][0-9]* steps of a local search among them)\)\?$'

# A cap on each rank's activations: the flag and the config key, the cap
# and the peak printed, the peak within it; below the smallest, exit 2
# naming it.
run plan --schedule hanayo --ranks 4 --micro-batches 16 --split-backward --max-activations 4 --json
expect_rc 0
expect_json "p['max_activations']" 4
expect_json "max(p['peak_activations']) <= 4" True
run plan --schedule hanayo --ranks 4 --micro-batches 16 --set schedule.max_activations=3
expect_rc 0
expect_out '^activation cap    3 per rank: peak 3; no order within it ends before '
run plan --schedule hanayo --ranks 4 --micro-batches 16 --waves 2 --max-activations 3
expect_rc 2
expect_err 'below the smallest that runs, 4'
# --memory-gb without a cap: a plan that does not fit is made again
# within the cap its memory plan allows, and then fits.
run plan configs/gpt2-124m.json --memory-gb 16 --json
expect_rc 0
expect_json "p['max_activations'] > 0 and p['memory']['fits']" True
expect_json "max(p['peak_activations']) <= p['max_activations']" True
run plan configs/gpt2-124m.json --memory-gb 80 --json
expect_json "p['max_activations']" 0

run plan --schedule=hanayo --ranks=3 --micro-batches=6 --waves=2 --color always
expect_rc 0
expect_out $'\x1b\\['
expect_out 'W = 2 waves'

run plan --schedule hanayo --ranks 4 --micro-batches 8 --waves 2 --json
expect_rc 0
keys="['schedule', 'ranks', 'micro_batches', 'waves', 'chunks_per_rank', 'stages',"
keys+=" 'fwd_cost', 'bwd_cost', 'comm_cost', 'placement', 'actions', 'makespan',"
keys+=" 'bubble_ratio', 'peak_activations', 'transfers']"
expect_json "list(p)[:15]" "$keys"
expect_json "(p['waves'], p['chunks_per_rank'], p['stages'])" "(2, 4, 16)"
expect_json "p['placement'][:8]" "[0, 1, 2, 3, 3, 2, 1, 0]"
expect_json "[len(a) for a in p['actions']]" "[64, 64, 64, 64]"
expect_json "p['actions'][0][0]" "['F', 0, 0]"

run plan --schedule gpipe --ranks 2 --micro-batches 3 \
    --fwd-cost 0.5 --bwd-cost 1.5 --comm-cost 0.25 --json
expect_rc 0
expect_json "(p['fwd_cost'], p['bwd_cost'], p['comm_cost'], p['waves'])" "(0.5, 1.5, 0.25, 0)"

if [ -f configs/tiny-gpt.json ]; then
    run plan configs/tiny-gpt.json --json
    expect_rc 0
    expect_json "(p['schedule'], p['ranks'])" "('hanayo', 2)"
    run plan configs/tiny-gpt.json --ranks 3 --schedule 1f1b --json
    expect_rc 0
    expect_json "(p['schedule'], p['ranks'])" "('1f1b', 3)"
    run plan configs/tiny-gpt.json --set schedule.micro_batches=5 --json
    expect_rc 0
    expect_json "p['micro_batches']" 5
fi

# Bad flags and values: exit 2 with a message that names the flag.
expect_input_error plan --ranks 0
expect_err '\-\-ranks'
expect_input_error plan --ranks 65
expect_input_error plan --ranks abc
expect_err 'not a whole number'
expect_input_error plan --ranks 4x
expect_input_error plan --ranks ''
expect_input_error plan --ranks ' 4'
expect_input_error plan --ranks 99999999999999999999
expect_input_error plan --ranks
expect_err 'needs a value'
expect_input_error plan --ranks --json
expect_input_error plan --micro-batches -1
expect_input_error plan --micro-batches 2.5
expect_input_error plan --waves 0
expect_input_error plan --chunks 65
expect_input_error plan --fwd-cost nan
expect_input_error plan --fwd-cost inf
expect_input_error plan --bwd-cost -1
expect_input_error plan --comm-cost 1e400
expect_input_error plan --comm-cost 1,5
expect_input_error plan --width 10
expect_input_error plan --schedule zigzag
expect_err 'gpipe'
expect_input_error plan --rank 4
expect_err 'did you mean --ranks'
expect_input_error plan --frobnicate
expect_err "hanayo plan --help"
expect_input_error plan --json=yes
expect_input_error plan --color sometimes
expect_input_error plan a.json b.json
expect_input_error plan --set schedule.wavez=2
expect_input_error plan --schedule interleaved --ranks 4 --micro-batches 6
expect_err 'multiple'
expect_input_error plan --svg ''

# --svg: a whole file, or none at all.
run plan --schedule 1f1b --ranks 3 --micro-batches 4 --svg "$tmp/plan.svg"
expect_rc 0
if head -c 4 "$tmp/plan.svg" | grep -q '^<svg' && tail -n 1 "$tmp/plan.svg" | grep -q '</svg>$'; then
    ok
else
    bad "$last: $tmp/plan.svg is not a whole SVG"
fi
# Well-formed XML with one rect per action (3 ranks x 2 x 4 micro-batches).
n=$(python3 -c 'import sys, xml.etree.ElementTree as E
t = E.parse(sys.argv[1]).getroot()
print(len(t.findall("{http://www.w3.org/2000/svg}rect")))' "$tmp/plan.svg" 2>&1)
if [ "$n" = 24 ]; then ok; else bad "$last: $n rects, want 24 (one per action)"; fi
run plan --schedule 1f1b --ranks 3 --micro-batches 4 --svg "$tmp/plan2.svg" --json
expect_rc 0
expect_json "p['ranks']" 3
if [ -s "$tmp/plan2.svg" ]; then ok; else bad "$last: no SVG"; fi

mkdir "$tmp/svgdir"
run plan --svg "$tmp/svgdir/missing/x.svg"
expect_rc 2
expect_err 'missing/x.svg'
if [ -s "$tmp/out" ]; then bad "$last: printed to stdout on error"; else ok; fi
mkdir "$tmp/svgdir/taken"
run plan --svg "$tmp/svgdir/taken"
expect_rc 2
left=$(find "$tmp/svgdir" -mindepth 1 | wc -l)
if [ "$left" -eq 1 ]; then ok; else bad "$last: left files behind: $(find "$tmp/svgdir")"; fi

# --compare
# With a config: each schedule's memory plan under train.recompute, and
# recomputation priced in: full holds less and takes longer than none.
run plan configs/tiny-gpt.json --compare --json
expect_rc 0
none_mem=$(json_get "p[0]['memory_bytes']")
none_ms=$(json_get "p[0]['makespan']")
run plan configs/tiny-gpt.json --compare --json --set train.recompute=full
expect_rc 0
expect_json "p[0]['memory_bytes'] < $none_mem and p[0]['makespan'] > $none_ms" True
run plan configs/tiny-gpt.json --compare --set train.recompute=full
expect_out 'also redoes 1 x its stage.s forward'
expect_out 'mem GiB'
run plan --compare --ranks 4 --micro-batches 8 --waves 1
expect_no_out 'mem GiB'
expect_rc 0
expect_out '^schedule .*stages .*makespan .*bubble .*ideal .*peak act .*transfers'
expect_out '^gpipe  *4  *33  *0.2727'
expect_out '^1f1b  *4 '
expect_out '^interleaved v=2  *8 '
expect_out '^hanayo W=1  *8 '
run plan --compare --ranks 4 --micro-batches 6 --waves 2
expect_rc 0
expect_out '^interleaved v=4  *skipped: '
expect_out '^interleaved v=4 +split  *skipped: '
expect_out '^hanayo W=2  *16 '
run plan --compare --ranks 2 --micro-batches 4 --chunks 3 --json
expect_rc 0
expect_json "[r['schedule'] for r in p]" "['gpipe', '1f1b', 'interleaved', 'hanayo', 'gpipe', '1f1b', 'interleaved', 'hanayo']"
expect_json "[r['split_backward'] for r in p]" "[False, False, False, False, True, True, True, True]"
expect_json "p[2]['chunks_per_rank']" 3
expect_input_error plan --compare --svg "$tmp/never.svg"
if [ -e "$tmp/never.svg" ]; then bad "$last: wrote the SVG"; else ok; fi

# A write error on stdout is a runtime failure, not success.
if [ -w /dev/full ]; then
    "$HANAYO" plan --ranks 2 >/dev/full 2>"$tmp/err"
    rc=$?
    last="hanayo plan >/dev/full"
    expect_rc 1
    expect_err '^hanayo: cannot write'
fi

hy_finish
