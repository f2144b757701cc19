#!/usr/bin/env bash
# test_train_cli.sh — `hanayo train`'s --steps and validation during
# training (train.eval_every), from the outside.
#
# --steps N trains N steps whatever the --set list says, wherever it stands
# among them; its bad values are refused naming the flag. With
# train.eval_every the validation loss is printed after steps 2, 4 and 6
# of 6 (once at 6) and logged as {"step", "val_loss", "val_batches"} right
# after that step's line; the checkpoint's weights and moments are those
# of a run that does not evaluate, byte for byte. eval_every without a
# data.val is refused. train.recompute is said in the header, recorded in
# the checkpoint's config, and changes nothing trained: a run resumed with
# another mode ends with the same weights and moments, byte for byte.
# Prints "train_cli: N passed, N failed".
set -u

HY_TEST_NAME=train_cli
. "$(dirname "$0")/lib/cli.sh"

run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 3 \
    --val-out "$tmp/v.bin" --val-tokens 4000
expect_rc 0
small=(--set "data.train=$tmp/t.bin" --set "data.val=$tmp/v.bin" --set model.layers=2
       --set model.d_model=32 --set model.seq_len=16 --set schedule.kind=1f1b
       --set schedule.micro_batch_size=2 --set schedule.micro_batches=4 --set backend=cpu
       --set train.log_every=1 --set train.eval_batches=3)

# ---- --steps ---------------------------------------------------------------------
run help train
expect_out '^  --steps N '
run train configs/tiny-gpt.json "${small[@]}" --set checkpoint.dir=null --steps 2 \
    --set train.steps=9
expect_rc 0
expect_out '^step 2/2  loss '
expect_no_out '/9 '
run train configs/tiny-gpt.json --steps=3 "${small[@]}" --set checkpoint.dir=null
expect_rc 0
expect_out '^step 3/3  loss '
expect_out '^step 3/3  val loss '
expect_input_error train configs/tiny-gpt.json "${small[@]}" --steps 0
expect_err '\-\-steps: 0 is out of range'
expect_input_error train configs/tiny-gpt.json "${small[@]}" --steps many
expect_err '\-\-steps'
expect_input_error train configs/tiny-gpt.json --step 3
expect_err 'did you mean --steps?'

# ---- train.eval_every --------------------------------------------------------------
run train configs/tiny-gpt.json "${small[@]}" --steps 6 --set train.eval_every=2 \
    --set "checkpoint.dir=$tmp/every" --log-json "$tmp/every.jsonl"
expect_rc 0
if [ "$(grep -c 'val loss' "$tmp/out")" -eq 3 ]; then ok; else
    bad "eval_every 2: want 3 val lines: $(cat "$tmp/out")"; fi
expect_out '^step 2/6  val loss [0-9.]* (3 batches of '
expect_out '^step 4/6  val loss '
expect_out '^step 6/6  val loss '
run train configs/tiny-gpt.json "${small[@]}" --steps 6 --set "checkpoint.dir=$tmp/none" \
    --log-json "$tmp/none.jsonl"
expect_rc 0
if [ "$(grep -c 'val loss' "$tmp/out")" -eq 1 ]; then ok; else
    bad "eval_every 0: want 1 val line: $(cat "$tmp/out")"; fi
expect_out '^step 6/6  val loss '
if python3 -c 'import json, sys
every = [json.loads(line) for line in open(sys.argv[1])]
none = [json.loads(line) for line in open(sys.argv[2])]
# Each validation right after its step, once; and nothing else changed.
want = []
for s in range(1, 7):
    want.append(("loss", s))
    if s % 2 == 0:
        want.append(("val_loss", s))
got = [("val_loss" if "val_loss" in d else "loss", d["step"]) for d in every]
assert got == want, got
for d in every:
    if "val_loss" in d:
        assert set(d) == {"step", "val_loss", "val_batches"} and d["val_batches"] == 3, d
assert [d["loss"] for d in every if "loss" in d] == [d["loss"] for d in none if "loss" in d]
assert [d for d in none if "val_loss" in d] == [every[-1]], (none, every[-1])
' "$tmp/every.jsonl" "$tmp/none.jsonl"; then ok; else
    bad "eval_every logs: $(cat "$tmp/every.jsonl")"; fi
for f in model.safetensors optimizer.safetensors; do
    expect_same "$tmp/every/step_000006/$f" "$tmp/none/step_000006/$f"
done
expect_input_error train configs/tiny-gpt.json "${small[@]}" --set data.val=null \
    --set train.eval_every=2
expect_err 'train.eval_every is 2 but data.val is null'

# ---- train.recompute -----------------------------------------------------------------
# Steps 1..3 without it, 4..6 resumed from step 3 with full recompute: the
# step-6 checkpoint equals the run above that never recomputed.
run train configs/tiny-gpt.json "${small[@]}" --steps 6 --set "checkpoint.dir=$tmp/rc" \
    --set checkpoint.every=3
expect_rc 0
run train configs/tiny-gpt.json "${small[@]}" --steps 6 --set train.recompute=full \
    --set "checkpoint.dir=$tmp/rc2" --resume "$tmp/rc/step_000003"
expect_rc 0
expect_out '^schedule: 1f1b, .*, full recompute, '
expect_out '^resumed from .*step_000003 after step 3'
for f in model.safetensors optimizer.safetensors; do
    expect_same "$tmp/rc2/step_000006/$f" "$tmp/none/step_000006/$f"
done
if python3 -c 'import json, sys
assert json.load(open(sys.argv[1]))["config"]["train"]["recompute"] == "full"
' "$tmp/rc2/step_000006/state.json"; then ok; else bad "state.json does not record train.recompute"; fi

hy_finish
