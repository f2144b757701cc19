#!/usr/bin/env bash
# test_bert_cli.sh — BERT from the command line: the masked-LM accuracy in
# `hanayo eval` and in periodic validation (console and JSON log), and
# model.mask_token reaching the masking.
#
# On a shard of one repeated token every masked position's target is that
# token, so a model that has learnt it predicts every one: the accuracy
# must end at exactly 1 (a wrong count of hits or of masked positions
# would not give 1), and starts far below at the random initialization.
# GPT output carries no accuracy. A pre-LN BERT checkpoint's config.json
# is the model block of a hanayo config: eval reads it back and scores the
# same; a post-LN one's is a BertForMaskedLM config.json, which model.from
# reads back to the same model and score.
# Training one step with another mask id gives another loss (the id
# reaches the inputs). Prints
# "bert-cli: N passed, N failed".
set -u

HY_TEST_NAME=bert-cli
. "$(dirname "$0")/lib/cli.sh"

python3 - "$tmp/same.bin" <<'EOF'
import struct, sys
n = 20000
with open(sys.argv[1], 'wb') as f:
    f.write(struct.pack('<256i', 20240520, 1, n, *[0] * 253))
    f.write(struct.pack('<%dH' % n, *[7] * n))
EOF
same=(--set "data.train=$tmp/same.bin" --set "data.val=$tmp/same.bin" --set checkpoint.dir=null)

# ---- eval: the accuracy beside the loss, BERT only ----------------------------
run eval configs/tiny-bert.json --data "$tmp/same.bin" --batches 2
expect_rc 0
acc=$(json_get "p['accuracy']")
if python3 -c "import sys; sys.exit(not 0 <= float(sys.argv[1]) < 0.5)" "$acc" 2>/dev/null; then ok; else
    bad "random init's masked-LM accuracy '$acc', want in [0, 0.5): $(cat "$tmp/out")"; fi
run eval configs/tiny-gpt.json --data "$tmp/same.bin" --batches 2
expect_rc 0
expect_no_out accuracy

# ---- periodic validation: console and log --------------------------------------
run train configs/tiny-bert.json --steps 30 "${same[@]}" --set "checkpoint.dir=$tmp/ck" --set train.eval_every=10 \
    --set train.eval_batches=2 --set train.warmup_steps=2 --set model.norm=pre --log-json "$tmp/log.jsonl"
expect_rc 0
expect_out '^step 10/30  val loss [0-9.]*  masked-LM accuracy [0-9.]*% (2 batches of '
got=$(python3 - "$tmp/log.jsonl" <<'EOF'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if 'val_loss' in r]
print(' '.join('%d:%s' % (r['step'], r.get('val_accuracy')) for r in rows))
EOF
)
case "$got" in
"10:"[0-9]*" 20:"[0-9]*" 30:1.0") ok ;;
*) bad "validation steps and accuracies '$got', want 10, 20, 30 ending at exactly 1.0" ;;
esac
run train configs/tiny-gpt.json --steps 2 "${same[@]}" --set train.eval_batches=2 --log-json "$tmp/gpt.jsonl"
expect_rc 0
if grep -q accuracy "$tmp/gpt.jsonl" "$tmp/out"; then bad "GPT validation has an accuracy"; else ok; fi

# ---- a pre-LN BERT checkpoint's config.json is a hanayo config it reads back ----
# (not a transformers one: no Hugging Face BERT computes hanayo's pre-LN
# blocks, docs/runtime.md)
ck=$tmp/ck/step_000030
run checkpoint verify "$ck"
expect_rc 0
if python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); sys.exit(not (set(c) == {"model"} and c["model"]["kind"] == "bert" and c["model"]["norm"] == "pre" and c["model"]["mask_token"] == 511))' "$ck/config.json"; then ok; else
    bad "$ck/config.json is not hanayo's model block: $(cat "$ck/config.json")"; fi
run eval configs/tiny-bert.json --init "$tmp/ck" --data "$tmp/same.bin" --batches 2 --set model.norm=pre
expect_rc 0
want=$(json_get "p['loss'], p['accuracy']")
run eval "$ck/config.json" --init "$tmp/ck" --data "$tmp/same.bin" --batches 2
expect_rc 0
got=$(json_get "p['loss'], p['accuracy']")
if [ -n "$want" ] && [ "$got" = "$want" ]; then ok; else
    bad "eval with the checkpoint's config.json: $got, with tiny-bert.json: $want"; fi

# ---- a post-LN BERT checkpoint's config.json is BertForMaskedLM's -------------
run train configs/tiny-bert.json --steps 2 "${same[@]}" --set "checkpoint.dir=$tmp/post"
expect_rc 0
pk=$tmp/post/step_000002
if python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); sys.exit(not (c["architectures"] == ["BertForMaskedLM"] and c["model_type"] == "bert" and c["hidden_size"] == 64 and c["max_position_embeddings"] == 64 and c["hidden_act"] == "gelu"))' "$pk/config.json"; then ok; else
    bad "$pk/config.json is not a BertForMaskedLM config: $(cat "$pk/config.json")"; fi
run eval configs/tiny-bert.json --init "$pk" --data "$tmp/same.bin" --batches 2
expect_rc 0
want=$(json_get "p['loss'], p['accuracy']")
printf '{"model": {"from": "%s", "mask_token": 511}, "data": {"train": "%s"}, "checkpoint": {"dir": null}}\n' \
    "$pk" "$tmp/same.bin" > "$tmp/from.json"
run eval "$tmp/from.json" --init "$pk" --data "$tmp/same.bin" --batches 2
expect_rc 0
got=$(json_get "p['loss'], p['accuracy']")
if [ -n "$want" ] && [ "$got" = "$want" ]; then ok; else
    bad "eval with model.from the checkpoint: $got, with tiny-bert.json: $want"; fi
expect_input_error eval configs/tiny-bert.json --init "$pk" --set model.norm=pre --data "$tmp/same.bin" --batches 1
expect_err 'model.norm'

# ---- model.mask_token reaches the masking --------------------------------------
first_loss() {
    python3 -c 'import json,sys; print(next(r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r))' "$1"
}
run train configs/tiny-bert.json --steps 1 "${same[@]}" --log-json "$tmp/m_last.jsonl"
expect_rc 0
run train configs/tiny-bert.json --steps 1 "${same[@]}" --set model.mask_token=5 --log-json "$tmp/m5.jsonl"
expect_rc 0
run train configs/tiny-bert.json --steps 1 "${same[@]}" --set model.mask_token=511 --log-json "$tmp/m511.jsonl"
expect_rc 0
a=$(first_loss "$tmp/m_last.jsonl") b=$(first_loss "$tmp/m5.jsonl") c=$(first_loss "$tmp/m511.jsonl")
if [ -n "$a" ] && [ "$a" = "$c" ] && [ "$a" != "$b" ]; then ok; else
    bad "first losses: default $a, mask_token 5 $b, 511 $c: want default = 511 (vocab - 1) != 5"; fi
expect_input_error train configs/tiny-bert.json --steps 1 --set model.mask_token=512
expect_err 'model.mask_token (512) must be below model.vocab (512)'

hy_finish
