#!/usr/bin/env bash
# test_outputs.sh — no output of hanayo's is written over an input of its
# run (lib/outfile.h, docs/reliability.md).
#
# A small run leaves a config, two shards, init weights and a
# checkpoint.dir with two checkpoints. Then each output a user names —
# train's --log-json, tune --apply, plan --svg, profile --out's files,
# data synth --val-out — is pointed at one of those inputs: by its own
# name, by another spelling, through a symbolic link and through a hard
# link. Each time the command must exit 2 at once with one "hanayo: "
# line naming the output, the input and what it is to the run, and the
# input must be byte for byte as it was; train must leave no .lock and no
# log behind. --log-json naming a FIFO, a character device or a directory
# is refused the same way, within 10 s (a FIFO must never block the open)
# and before anything is created: the checkpoint.dir the run would have
# made does not exist afterwards. Finally a good --log-json is written,
# one whole JSON object a line.
#
# Prints "outputs: N passed, N failed"; exits non-zero on any failure.
set -u

HY_TEST_NAME=outputs
. "$(dirname "$0")/lib/cli.sh"

run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 3 \
    --val-out "$tmp/v.bin" --val-tokens 4000
expect_rc 0
cp configs/tiny-gpt.json "$tmp/c.json"
small=(--set "data.train=$tmp/t.bin" --set "data.val=$tmp/v.bin" --set model.layers=4
       --set model.d_model=32 --set model.seq_len=16 --set schedule.micro_batch_size=2
       --set schedule.micro_batches=4 --set train.steps=2 --set checkpoint.every=1
       --set "checkpoint.dir=$tmp/ck")
run train "$tmp/c.json" "${small[@]}"
expect_rc 0
ck=$tmp/ck/step_000002
if [ ! -f "$ck/state.json" ]; then
    bad "no checkpoint to test with; stopping here"
    hy_finish
    exit 1
fi
cp "$ck/model.safetensors" "$tmp/init.safetensors"
# What every input holds now: compared after each refused command.
mkdir "$tmp/orig"
cp -r "$tmp/c.json" "$tmp/t.bin" "$tmp/v.bin" "$tmp/init.safetensors" "$tmp/ck" "$tmp/orig/"
rm -f "$tmp/orig/ck/.lock"
same_inputs() {
    local f
    for f in c.json t.bin v.bin init.safetensors; do
        cmp -s "$tmp/orig/$f" "$tmp/$f" || { bad "$last: changed $f"; return; }
    done
    if diff -r "$tmp/orig/ck" "$tmp/ck" >/dev/null; then ok; else
        bad "$last: changed the checkpoint.dir: $(diff -rq "$tmp/orig/ck" "$tmp/ck" | head -3)"
    fi
}

# refused WANT ARGS...: hanayo ARGS exits 2 at once with one line holding
# each of the fixed strings in WANT (separated by '|'), inputs unchanged.
refused() {
    local want=$1 w
    shift
    timeout -k 2 60 "$HANAYO" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    last="hanayo $*"
    expect_rc 2
    if [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q '^hanayo: ' "$tmp/err"; then ok; else
        bad "$last: want one 'hanayo: ' line on stderr, got: $(cat "$tmp/err")"
    fi
    IFS='|' read -ra parts <<<"$want"
    for w in "${parts[@]}"; do
        if grep -qF -- "$w" "$tmp/err"; then ok; else
            bad "$last: stderr lacks '$w': $(cat "$tmp/err")"
        fi
    done
    if [ -s "$tmp/out" ]; then bad "$last: printed to stdout: $(head -c 300 "$tmp/out")"; else ok; fi
    same_inputs
    if [ -e "$tmp/ck/.lock" ]; then bad "$last: left $tmp/ck/.lock"; else ok; fi
}

# ---- train --log-json over each input ------------------------------------------
# A new run into checkpoint.dir, which holds the first run's checkpoints:
# --fresh, so that what is refused is the log (a resume continues them).
t=(train "$tmp/c.json" "${small[@]}" --set train.steps=3 --fresh)
tr=(train "$tmp/c.json" "${small[@]}" --set train.steps=3)
refused "--log-json $tmp/c.json: is the same file as $tmp/c.json, an input of this run (the config)" \
    "${t[@]}" --log-json "$tmp/c.json"
refused "$tmp/t.bin, an input of this run (data.train, the training shard)" "${t[@]}" --log-json "$tmp/t.bin"
refused "$tmp/v.bin, an input of this run (data.val, the validation shard)" "${t[@]}" --log-json "$tmp/v.bin"
refused "(init, the weights it starts from)" \
    "${t[@]}" --set "init=$tmp/init.safetensors" --log-json "$tmp/init.safetensors"
refused "a file of the checkpoint it resumes|$ck/state.json" \
    "${tr[@]}" --resume "$ck" --log-json "$ck/state.json"
refused "a file of the checkpoint it resumes|$ck/model.safetensors" \
    "${tr[@]}" --resume "$ck" --log-json "$ck/model.safetensors"
refused "a file in checkpoint.dir|$tmp/ck/step_000001/optimizer.safetensors" \
    "${t[@]}" --log-json "$tmp/ck/step_000001/optimizer.safetensors"
# Other names for the same file.
refused "--log-json $tmp/./ck/../t.bin: is the same file as $tmp/t.bin, an input of this run (data.train" \
    "${t[@]}" --log-json "$tmp/./ck/../t.bin"
ln -s "$tmp/t.bin" "$tmp/link.jsonl"
refused "--log-json $tmp/link.jsonl: is the same file as $tmp/t.bin, an input of this run (data.train" \
    "${t[@]}" --log-json "$tmp/link.jsonl"
ln "$tmp/c.json" "$tmp/hard.jsonl"
refused "--log-json $tmp/hard.jsonl: is the same file as $tmp/c.json, an input of this run (the config)" \
    "${t[@]}" --log-json "$tmp/hard.jsonl"

# ---- --log-json that is not a regular file: refused before anything is made ------
mkfifo "$tmp/fifo"
nock=(train "$tmp/c.json" "${small[@]}" --set "checkpoint.dir=$tmp/new/ck")
refused "--log-json $tmp/fifo: is a FIFO, not a regular file" "${nock[@]}" --log-json "$tmp/fifo"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then bad "--log-json FIFO: hung"; fi
if [ -e "$tmp/new" ]; then bad "--log-json FIFO: created $tmp/new"; else ok; fi
refused "--log-json /dev/null: is a character device" "${nock[@]}" --log-json /dev/null
refused "--log-json $tmp: is a directory" "${nock[@]}" --log-json "$tmp"
refused "--log-json $tmp/no/log.jsonl: cannot open for writing: No such file or directory" \
    "${nock[@]}" --log-json "$tmp/no/log.jsonl"
if [ -e "$tmp/new" ]; then bad "refused --log-json: created $tmp/new"; else ok; fi

# ---- tune --apply, plan --svg, profile --out, data synth ------------------------------
fast=(--set "data.train=$tmp/t.bin" --set "data.val=$tmp/v.bin" --set model.layers=4
      --set model.d_model=32 --set model.seq_len=16 --set schedule.micro_batch_size=2
      --set schedule.micro_batches=4 --set "checkpoint.dir=$tmp/ck")
refused "--apply $tmp/c.json: is the same file as $tmp/c.json, an input of this run (the config)" \
    tune "$tmp/c.json" "${fast[@]}" --steps 1 --apply "$tmp/c.json"
refused "--apply $tmp/link.jsonl: is the same file as $tmp/t.bin, an input of this run (data.train" \
    tune "$tmp/c.json" "${fast[@]}" --steps 1 --apply "$tmp/link.jsonl"
refused "--svg $tmp/hard.jsonl: is the same file as $tmp/c.json, an input of this run (the config)" \
    plan "$tmp/c.json" "${fast[@]}" --svg "$tmp/hard.jsonl"
refused "--svg $ck/config.json: is the same file as $ck/config.json, an input of this run (a file in checkpoint.dir)" \
    plan "$tmp/c.json" "${fast[@]}" --svg "$ck/config.json"
# A profile's summary.json, then plan --costs on it drawing over it.
run profile "$tmp/c.json" "${fast[@]}" --steps 1 --out "$tmp/prof"
expect_rc 0
cp "$tmp/prof/summary.json" "$tmp/summary.orig"
refused "--svg $tmp/prof/summary.json: is the same file as $tmp/prof/summary.json, an input of this run (--costs, the profile's summary)" \
    plan "$tmp/c.json" "${fast[@]}" --costs "$tmp/prof/summary.json" --svg "$tmp/prof/summary.json"
expect_same "$tmp/summary.orig" "$tmp/prof/summary.json"
# profile --out into a directory whose summary.json is the config.
mkdir "$tmp/pd"
cp "$tmp/c.json" "$tmp/pd/summary.json"
cp "$tmp/c.json" "$tmp/pd.orig"
refused "--out $tmp/pd/summary.json: is the same file as $tmp/pd/summary.json, an input of this run (the config)" \
    profile "$tmp/pd/summary.json" "${fast[@]}" --steps 1 --out "$tmp/pd"
expect_same "$tmp/pd.orig" "$tmp/pd/summary.json"
if [ -e "$tmp/pd/trace.json" ]; then bad "profile --out refused: wrote trace.json"; else ok; fi
# data synth: --val-out the same file as --out under another name.
refused "--out $tmp/s.bin and --val-out $tmp/./s.bin are the same file" \
    data synth --out "$tmp/s.bin" --tokens 100 --vocab 16 --val-out "$tmp/./s.bin" --val-tokens 10
if [ -e "$tmp/s.bin" ]; then bad "data synth refused: wrote s.bin"; else ok; fi
refused "are the same file" \
    data synth --out "$tmp/t.bin" --tokens 100 --vocab 16 --val-out "$tmp/link.jsonl" --val-tokens 10

# ---- a good log: whole JSON lines --------------------------------------------------
run train "$tmp/c.json" "${small[@]}" --set "checkpoint.dir=$tmp/ck3" --log-json "$tmp/log.jsonl"
expect_rc 0
if python3 -c 'import json,sys
lines = open(sys.argv[1]).read().split("\n")
assert lines[-1] == "", "no newline at the end"
objs = [json.loads(l) for l in lines[:-1]]
assert [o["step"] for o in objs] == [1, 2, 2], objs
assert "val_loss" in objs[-1], objs[-1]' "$tmp/log.jsonl" 2>"$tmp/py.err"; then ok; else
    bad "the JSON log: $(tail -n 1 "$tmp/py.err")"
fi
# An existing log is emptied and written again.
run train "$tmp/c.json" "${small[@]}" --set "checkpoint.dir=$tmp/ck4" --log-json "$tmp/log.jsonl"
expect_rc 0
if [ "$(grep -c '"step"' "$tmp/log.jsonl")" -eq 3 ]; then ok; else
    bad "the rewritten log has $(grep -c '"step"' "$tmp/log.jsonl") lines, want 3"
fi

hy_finish
