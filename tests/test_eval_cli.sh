#!/usr/bin/env bash
# test_eval_cli.sh — `hanayo eval` says which weights it scores, takes a
# checkpoint directory as --init, and refuses another model's weights
# (tools/cmd_train.c, lib/checkpoint.h, lib/weights.h; docs/cli.md).
#
# Which weights: stderr says "weights: ..." (the seeded initialization
# and its seed, the config's init, or --init's file and the directory it
# was found in) and the JSON line on stdout carries "weights" (the file,
# or null), still one line.
#
# --init DIR: a step_NNNNNN checkpoint, or a checkpoint.dir whose newest
# checkpoint it scores (as train --resume takes it: a newest step
# directory without a state.json is named with the one before it, a
# damaged one is refused naming the previous); the loss equals that of
# its model.safetensors given as a file.
#
# Another model: a checkpoint records its model (state.json's
# config.model) and its weights do too (metadata hanayo_model and
# hanayo_heads), so GPT weights under a BERT config, BERT weights under a
# GPT one (their tensors share names and shapes), and another
# model.heads or d_model are refused (exit 2) naming what differs,
# whether the file lies in its checkpoint or was copied out of it.
#
# Prints "eval-cli: N passed, N failed"; exits non-zero on any failure.
set -u

HY_TEST_NAME=eval-cli
. "$(dirname "$0")/lib/cli.sh"

run data synth --out "$tmp/t.bin" --tokens 4000 --vocab 512 --seed 3
expect_rc 0
shape=(--set "data.train=$tmp/t.bin" --set data.val=null --set model.d_model=32
       --set model.seq_len=16 --set schedule.micro_batch_size=2 --set schedule.micro_batches=4
       --set checkpoint.every=2 --set schedule.kind=1f1b)
gpt=(configs/tiny-gpt.json "${shape[@]}")
bert=(configs/tiny-bert.json "${shape[@]}")
ck=$tmp/ck
run train "${gpt[@]}" --steps 4 --set "checkpoint.dir=$ck"
expect_rc 0
run train "${bert[@]}" --steps 2 --set "checkpoint.dir=$tmp/bert"
expect_rc 0
if [ ! -f "$ck/step_000004/state.json" ] || [ ! -f "$tmp/bert/step_000002/state.json" ]; then
    bad "no checkpoints to test with; stopping here"
    hy_finish
    exit 1
fi

# one_line: stdout is exactly one line of JSON.
one_line() {
    if [ "$(wc -l <"$tmp/out")" -eq 1 ] && json_get 'p["loss"]' >/dev/null; then ok; else
        bad "$last: stdout is not one JSON line: $(head -c 300 "$tmp/out")"
    fi
}

# ---- which weights ----------------------------------------------------------------
run eval "${gpt[@]}" --batches 4
expect_rc 0
one_line
expect_err '^weights: the seeded initialization (train.seed 1234): no --init, no init key$'
expect_json 'p["weights"]' None
seeded=$(json_get 'p["loss"]')
run eval "${gpt[@]}" --batches 4 --init "$ck/step_000004/model.safetensors"
expect_rc 0
one_line
expect_err "^weights: $ck/step_000004/model.safetensors\$"
expect_json 'p["weights"]' "$ck/step_000004/model.safetensors"
trained=$(json_get 'p["loss"]')
if [ -n "$trained" ] && [ "$trained" != "$seeded" ]; then ok; else
    bad "$last: the trained weights score $trained, the seeded ones $seeded"
fi
run eval "${gpt[@]}" --batches 4 --set "init=$ck/step_000002/model.safetensors"
expect_rc 0
expect_err "^weights: $ck/step_000002/model.safetensors (the config's init)\$"
expect_json 'p["weights"]' "$ck/step_000002/model.safetensors"

# ---- --init DIR ---------------------------------------------------------------------
# A checkpoint.dir: its newest, the same loss as the file.
run eval "${gpt[@]}" --batches 4 --init "$ck"
expect_rc 0
one_line
expect_err "^weights: $ck/step_000004/model.safetensors (--init $ck)\$"
expect_json 'p["weights"]' "$ck/step_000004/model.safetensors"
expect_json 'p["loss"]' "$trained"
# A checkpoint.
run eval "${gpt[@]}" --batches 4 --init "$ck/step_000002"
expect_rc 0
expect_err "^weights: $ck/step_000002/model.safetensors (--init $ck/step_000002)\$"
expect_json 'p["weights"]' "$ck/step_000002/model.safetensors"
# No checkpoint there; a newest step directory that is none; a damaged
# newest: each refused, naming it.
mkdir "$tmp/nothing"
expect_input_error eval "${gpt[@]}" --init "$tmp/nothing"
expect_err "--init $tmp/nothing: not a checkpoint (no state.json) and holds no step_NNNNNN checkpoints"
cp -r "$ck" "$tmp/stray"
mkdir "$tmp/stray/step_000009"
expect_input_error eval "${gpt[@]}" --init "$tmp/stray"
expect_err "its newest step directory $tmp/stray/step_000009 holds no state.json"
expect_err "the newest checkpoint before it is $tmp/stray/step_000004: give --init $tmp/stray/step_000004"
cp -r "$ck" "$tmp/flip"
python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(-100, 2); b = f.read(1); f.seek(-100, 2)
f.write(bytes([b[0] ^ 1]))' "$tmp/flip/step_000004/model.safetensors"
expect_input_error eval "${gpt[@]}" --init "$tmp/flip"
expect_err "$tmp/flip/step_000004/model.safetensors: checksum mismatch"
expect_err "resume from the previous checkpoint, --resume $tmp/flip/step_000002"

# ---- another model's weights ------------------------------------------------------
# refused WANT ARGS...: eval ARGS is refused (exit 2, one line) saying WANT.
refused() {
    local want=$1
    shift
    expect_input_error eval "$@"
    expect_err "$want"
}
# BERT weights under a GPT config (the issue: accepted, a loss printed),
# and GPT weights under a BERT config: by the checkpoint's record...
refused "$tmp/bert/step_000002/model.safetensors (checkpoint $tmp/bert/step_000002) was saved with model.kind = bert, the config has gpt; these are another model's weights" \
    "${gpt[@]}" --init "$tmp/bert"
refused "was saved with model.kind = gpt, the config has bert" \
    "${bert[@]}" --init "$ck/step_000004/model.safetensors"
refused "was saved with model.heads = 4, the config has 2" "${gpt[@]}" --init "$ck" --set model.heads=2
refused "was saved with model.d_model = 32, the config has 64" \
    "${gpt[@]}" --init "$ck" --set model.d_model=64
# ... and by the weights' own metadata, copied out of their checkpoint.
cp "$tmp/bert/step_000002/model.safetensors" "$tmp/bert.safetensors"
cp "$ck/step_000004/model.safetensors" "$tmp/gpt.safetensors"
refused "$tmp/bert.safetensors holds the weights of a bert model (its metadata hanayo_model), the config's model.kind is gpt" \
    "${gpt[@]}" --init "$tmp/bert.safetensors"
refused "holds the weights of a gpt model (its metadata hanayo_model), the config's model.kind is bert" \
    "${bert[@]}" --init "$tmp/gpt.safetensors"
refused "holds the weights of a model with 4 heads (its metadata hanayo_heads), the config's model.heads is 2" \
    "${gpt[@]}" --init "$tmp/gpt.safetensors" --set model.heads=2
# A shape is refused by the tensors themselves.
refused "has shape \[512, 32\], the config's model needs \[512, 64\]" \
    "${gpt[@]}" --init "$tmp/gpt.safetensors" --set model.d_model=64
# The same weights under their own model score.
run eval "${bert[@]}" --batches 2 --init "$tmp/bert.safetensors"
expect_rc 0
expect_json 'p["weights"]' "$tmp/bert.safetensors"
# train's init is checked the same way.
expect_input_error train "${gpt[@]}" --steps 1 --set "checkpoint.dir=$tmp/init-ck" \
    --set "init=$tmp/bert/step_000002/model.safetensors"
expect_err "was saved with model.kind = bert, the config has gpt"
if [ -e "$tmp/init-ck" ]; then bad "$last: made $tmp/init-ck"; else ok; fi

hy_finish
