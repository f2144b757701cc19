#!/usr/bin/env bash
# test_nonfinite.sh — `hanayo train` from weights that overflow, from the
# outside (tests/test_train.c covers the policy step by step).
#
# Weights holding a NaN or an infinity are bad input, refused at the load
# naming the file and the tensor (exit 2; eval too). Finite weights can
# still overflow: the weights of a 1-step run, with one value of
# h.0.mlp.c_fc.weight made 3e38, are the `init` of a run with
# checkpoint.every = 1. Every step is then non-finite (its update is
# never applied, so the value stays):
#   - train.on_nonfinite "stop" (the default): exit 1 at step 1, one
#     "hanayo: step 1: non-finite loss/gradient (...)" line naming rank and
#     stage, no checkpoint, and the --log-json line is JSON (null);
#   - "skip": 10 steps are skipped, saying so, the 11th in a row stops the
#     run with exit 1; still no checkpoint (none is written after a
#     non-finite step).
# Prints "nonfinite: N passed, N failed".
set -u

HY_TEST_NAME=nonfinite
. "$(dirname "$0")/lib/cli.sh"

run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 3
expect_rc 0
small=(--set "data.train=$tmp/t.bin" --set data.val=null --set model.layers=4
       --set model.d_model=32 --set model.seq_len=16 --set schedule.micro_batch_size=2
       --set schedule.micro_batches=4 --set train.log_every=1 --set backend=cpu)
run train configs/tiny-gpt.json "${small[@]}" --set train.steps=1 --set "checkpoint.dir=$tmp/ref"
expect_rc 0

# poke VALUE OUT: the weights with VALUE in place of the first value of
# h.0.mlp.c_fc.weight (F32), into OUT.
poke() {
    python3 - "$tmp/ref/step_000001/model.safetensors" "$2" "$1" <<'EOF'
import json, struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
t = json.loads(data[8:8 + n])["h.0.mlp.c_fc.weight"]
assert t["dtype"] == "F32"
at = 8 + n + t["data_offsets"][0]
data[at:at + 4] = struct.pack("<f", float(sys.argv[3]))
open(sys.argv[2], "wb").write(data)
EOF
}
if poke nan "$tmp/nan.safetensors" && poke inf "$tmp/inf.safetensors" &&
    poke 3e38 "$tmp/big.safetensors"; then ok; else bad "could not write the weights"; fi

# Not finite: bad input, named, nothing left behind.
expect_input_error train configs/tiny-gpt.json "${small[@]}" --set train.steps=2 \
    --set "checkpoint.dir=$tmp/nan" --set "init=$tmp/nan.safetensors" --log-json "$tmp/nan.jsonl"
expect_err "$tmp/nan.safetensors: tensor 'h.0.mlp.c_fc.weight' holds NaN at index 0"
if [ ! -e "$tmp/nan" ] && [ ! -e "$tmp/nan.jsonl" ]; then ok; else bad "$last: left files"; fi
expect_input_error eval configs/tiny-gpt.json "${small[@]}" --init "$tmp/inf.safetensors"
expect_err "$tmp/inf.safetensors: tensor 'h.0.mlp.c_fc.weight' holds +Inf at index 0"

run train configs/tiny-gpt.json "${small[@]}" --set train.steps=20 --set checkpoint.every=1 \
    --set "checkpoint.dir=$tmp/stop" --set "init=$tmp/big.safetensors" --log-json "$tmp/stop.jsonl"
expect_rc 1
if [ "$(wc -l <"$tmp/err")" -eq 1 ]; then ok; else bad "$last: stderr: $(cat "$tmp/err")"; fi
expect_err '^hanayo: step 1: non-finite loss/gradient (.* on rank [0-9] (stage [0-9]).*); the update was not applied; stopping without a checkpoint of this step (train.on_nonfinite is "stop"'
expect_out '^step  *1/20  loss -\?nan'
expect_no_out '^step  *2/20'
if [ -z "$(ls -A "$tmp/stop" 2>/dev/null)" ]; then ok; else bad "stop: checkpoints: $(ls -A "$tmp/stop")"; fi
if python3 -c 'import json,sys
d = json.loads(open(sys.argv[1]).readline())
assert d["step"] == 1 and d["loss"] is None and d["nonfinite"] is True, d' "$tmp/stop.jsonl"; then ok; else
    bad "stop: the JSON log: $(cat "$tmp/stop.jsonl")"
fi

run train configs/tiny-gpt.json "${small[@]}" --set train.steps=20 --set checkpoint.every=1 \
    --set "checkpoint.dir=$tmp/skip" --set "init=$tmp/big.safetensors" --set train.on_nonfinite=skip
expect_rc 1
expect_err '^hanayo: step 11: non-finite loss/gradient (.*); the update was not applied; stopping: 11 steps in a row were not finite'
expect_out '^step 10: non-finite loss/gradient (.*); the update was not applied; skipped (10 so far)$'
expect_out '^checkpoint of step 10 not written: the step was not finite$'
expect_no_out '^step 12/20'
expect_no_out 'skipped (11 so far)'
if [ -z "$(ls -A "$tmp/skip" 2>/dev/null)" ]; then ok; else bad "skip: checkpoints: $(ls -A "$tmp/skip")"; fi

hy_finish
