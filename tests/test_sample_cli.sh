#!/usr/bin/env bash
# test_sample_cli.sh — `hanayo sample` (tools/cmd_sample.c, lib/sample.h,
# lib/tokenizer.h; docs/cli.md "Generating text").
#
# Greedy equals the references token for token:
#   - on a tiny GPT trained here for a few steps (`hanayo train`, its
#     checkpoint.dir given as --init): tests/gpt2_ref.py's greedy decoding
#     in float64 numpy, from the prompt to model.seq_len, where sample
#     stops and says so on stderr;
#   - on weights gpt2_ref.py writes deterministically: the tokens
#     transformers' GPT2LMHeadModel.generate(do_sample=False) gave
#     (tests/fixtures/sample-greedy.json, made once by
#     tests/fixtures/gen_sample_greedy.py), three prompts.
# Sampling: the same seed gives the same sample, another seed another;
# --top-k 1 is greedy; --stop-token ends the sample with that token;
# --max-new counts. The config's schedule does not matter (2 ranks or 1:
# the same sample), nor whether its stages fit model.layers (more stages
# than layers, a split of the wrong length: train refuses, sample runs). With --tokenizer the sample is text, and --prompt
# TEXT gives the ids --prompt-tokens would.
# Bad input exits 2 with one line: a prompt longer than seq_len, an id
# outside the vocabulary, a malformed id list, no prompt or two, --prompt
# without --tokenizer, a tokenizer file that is unreadable or not
# byte-level BPE or has fewer ids than model.vocab, a BERT config,
# weights of another shape, no weights.
#
# Prints "sample-cli: N passed, N failed"; exits non-zero on any failure.
set -u

HY_TEST_NAME=sample-cli
. "$(dirname "$0")/lib/cli.sh"

py=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import numpy' >/dev/null 2>&1; then py=$p; break; fi
done
ref=$(dirname "$0")/gpt2_ref.py
fix=$(dirname "$0")/fixtures
tok=$fix/tokenizer-bpe.json

run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 400 --seed 3
expect_rc 0
# vocab 400: the fixture tokenizer's, so the sample can be printed as text
shape=(--set model.d_model=32 --set model.seq_len=24 --set model.vocab=400)
gpt=(configs/tiny-gpt.json "${shape[@]}" --set "data.train=$tmp/t.bin" --set data.val=null)
run train "${gpt[@]}" --steps 8 --set "checkpoint.dir=$tmp/ck" --set train.warmup_steps=2
expect_rc 0
w=$tmp/ck/step_000008/model.safetensors
if [ ! -f "$w" ]; then
    bad "no checkpoint to sample from; stopping here"
    hy_finish
    exit 1
fi

# ---- greedy = the numpy reference, to the sequence-length limit -----------------------
run sample "${gpt[@]}" --init "$tmp/ck" --prompt-tokens 7,300,12,99 --temperature 0 --max-new 100
expect_rc 0
expect_err '^weights: .*step_000008/model.safetensors$'
expect_err '^sample: stopped at model.seq_len 24: the prompt.s 4 tokens and 20 new ones fill'
cp "$tmp/out" "$tmp/greedy"
if [ -z "$py" ]; then
    bad "no python3 with numpy: the reference cannot run (bash tools/deps.sh test)"
else
    "$py" "$ref" greedy --weights "$w" --heads 4 --prompt 7,300,12,99 --max-len 24 \
        --vocab 400 >"$tmp/want"
    if [ "$(wc -w <"$tmp/want")" -eq 20 ] && cmp -s "$tmp/want" "$tmp/greedy"; then ok; else
        bad "greedy sample '$(cat "$tmp/greedy")' is not the reference's '$(cat "$tmp/want")'"
    fi
fi
# The schedule does not matter: the whole model runs on one rank.
run sample "${gpt[@]}" --set schedule.ranks=1 --set schedule.kind=gpipe --init "$w" \
    --prompt-tokens "7 300 12 99" --temperature 0 --max-new 100
expect_rc 0
expect_same "$tmp/out" "$tmp/greedy"
# Nor whether its stages fit the model: hanayo on 4 ranks has 8 stages for
# 4 layers, and a split of the wrong length, which train refuses; sample
# never builds the stages. The config's other checks still hold.
run sample "${gpt[@]}" --set schedule.ranks=4 --set schedule.split=[1,1] --init "$w" \
    --prompt-tokens 7,300,12,99 --temperature 0 --max-new 100
expect_rc 0
expect_same "$tmp/out" "$tmp/greedy"
expect_input_error train "${gpt[@]}" --set schedule.ranks=4 --steps 1
expect_err '8 stages but model.layers is 4'
expect_input_error sample "${gpt[@]}" --set schedule.ranks=4 --set 'devices=[0,0,0,0,0]' \
    --init "$w" --prompt-tokens 7
expect_err 'devices has 5 entries but schedule.ranks is 4'

# ---- greedy = transformers' generate (the fixture) ---------------------------------
if [ -n "$py" ]; then
    init=$("$py" -c 'import json,sys; i=json.load(open(sys.argv[1]))["init"]; print(" ".join(
        "--%s %s" % (k.replace("_", "-"), v) for k, v in i.items()))' "$fix/sample-greedy.json")
    # shellcheck disable=SC2086
    "$py" "$ref" init --out "$tmp/hf.safetensors" $init
    "$py" -c 'import json,sys
d = json.load(open(sys.argv[1]))
for c in d["cases"]:
    print(",".join(map(str, c["prompt"])), " ".join(map(str, c["greedy"])), sep="|")' \
        "$fix/sample-greedy.json" >"$tmp/cases"
    # 2 layers under tiny-gpt's schedule (hanayo, 2 ranks: 4 stages)
    hf=(configs/tiny-gpt.json
        --set model.layers=2 --set model.d_model=32 --set model.heads=4
        --set model.seq_len=24 --set model.vocab=96)
    n=0
    while IFS='|' read -r prompt want; do
        n=$((n + 1))
        run sample "${hf[@]}" --init "$tmp/hf.safetensors" --prompt-tokens "$prompt" \
            --temperature 0 --max-new 1000
        expect_rc 0
        if [ "$(cat "$tmp/out")" = "$want" ]; then ok; else
            bad "prompt $prompt: '$(cat "$tmp/out")', transformers' greedy generate: '$want'"
        fi
    done <"$tmp/cases"
    if [ "$n" -eq 3 ]; then ok; else bad "the fixture holds $n cases, not 3"; fi
fi

# ---- sampling ---------------------------------------------------------------------
s=(sample "${gpt[@]}" --init "$w" --prompt-tokens 7,300 --max-new 12)
run "${s[@]}" --seed 5
expect_rc 0
cp "$tmp/out" "$tmp/s5"
if [ "$(wc -w <"$tmp/s5")" -eq 12 ]; then ok; else bad "--max-new 12 gave: $(cat "$tmp/s5")"; fi
expect_err '^sample: 12 tokens$'
run "${s[@]}" --seed 5
expect_same "$tmp/out" "$tmp/s5"
run "${s[@]}" --seed 6
expect_differ "$tmp/out" "$tmp/s5"
# top-k 1 is greedy, whatever the seed and temperature.
run "${s[@]}" --seed 9 --top-k 1 --temperature 3
cp "$tmp/out" "$tmp/k1"
run "${s[@]}" --temperature 0
expect_same "$tmp/out" "$tmp/k1"
# --stop-token: the greedy sample's third token ends it, printed.
third=$(awk '{print $3}' "$tmp/greedy")
run sample "${gpt[@]}" --init "$w" --prompt-tokens 7,300,12,99 --temperature 0 \
    --stop-token "$third"
expect_rc 0
expect_err '^sample: [0-9]* tokens, the last the stop token$'
last=$(awk '{print $NF}' "$tmp/out")
if [ "$last" = "$third" ] && [ "$(wc -w <"$tmp/out")" -le 3 ]; then ok; else
    bad "--stop-token $third: '$(cat "$tmp/out")'"
fi

# ---- text ---------------------------------------------------------------------------
run sample "${gpt[@]}" --init "$w" --prompt "Once upon a time" --tokenizer "$tok" \
    --temperature 0 --max-new 5
expect_rc 0
cp "$tmp/out" "$tmp/text"
ids=$("$HANAYO" sample "${gpt[@]}" --init "$w" --prompt "Once upon a time" --tokenizer "$tok" \
    --temperature 0 --max-new 5 2>/dev/null >/dev/null; echo $?)
[ "$ids" = 0 ] && ok || bad "sample --prompt failed the second time"
# The same prompt as ids (the fixture tokenizer's, from its cases file's
# encoding by the library) gives the same tokens, printed as text.
"$py" -c 'import json,sys
for c in json.load(open(sys.argv[1]))["cases"]:
    if c["text"] == "hello world": print(",".join(map(str, c["ids"])))' \
    "$fix/tokenizer-cases.json" >"$tmp/hello"
run sample "${gpt[@]}" --init "$w" --prompt "hello world" --tokenizer "$tok" --temperature 0 \
    --max-new 6
cp "$tmp/out" "$tmp/hello_text"
run sample "${gpt[@]}" --init "$w" --prompt-tokens "$(cat "$tmp/hello")" --tokenizer "$tok" \
    --temperature 0 --max-new 6
expect_same "$tmp/out" "$tmp/hello_text"
if [ -s "$tmp/hello_text" ] && ! grep -q '^[0-9 ]*$' "$tmp/hello_text"; then ok; else
    bad "with --tokenizer the sample is not text: '$(cat "$tmp/hello_text")'"
fi

# ---- bad input: exit 2, one line ------------------------------------------------------
long=$(seq -s, 1 25)
expect_input_error sample "${gpt[@]}" --init "$w" --prompt-tokens "$long"
expect_err 'prompt is 25 tokens, longer than model.seq_len 24'
expect_input_error sample "${gpt[@]}" --init "$w" --prompt-tokens 1,400
expect_err 'token 400 .* vocabulary'
expect_input_error sample "${gpt[@]}" --init "$w" --prompt-tokens 1,x
expect_err "'x' is not a token id"
expect_input_error sample "${gpt[@]}" --init "$w" --prompt-tokens ,
expect_input_error sample "${gpt[@]}" --init "$w"
expect_err 'needs a prompt'
expect_input_error sample "${gpt[@]}" --init "$w" --prompt-tokens 1 --prompt hi --tokenizer "$tok"
expect_input_error sample "${gpt[@]}" --init "$w" --prompt hi
expect_err 'needs --tokenizer'
expect_input_error sample "${gpt[@]}" --init "$w" --prompt hi --tokenizer "$tmp/none.json"
expect_err "none.json"
printf '{"model": {"type": "WordPiece", "vocab": {}}}' >"$tmp/wp.json"
expect_input_error sample "${gpt[@]}" --init "$w" --prompt hi --tokenizer "$tmp/wp.json"
expect_err 'WordPiece.*byte-level BPE'
expect_input_error sample "${gpt[@]}" --init "$w" --prompt-tokens 1 --tokenizer "$tmp/wp.json"
# A tokenizer with fewer ids than the model's vocabulary: ids without text.
expect_input_error sample "${gpt[@]}" --set model.vocab=512 --init "$w" --prompt-tokens 1 \
    --tokenizer "$tok"
expect_err 'has 400 ids, but model.vocab is 512'
expect_input_error sample configs/tiny-bert.json "${shape[@]}" --init "$w" --prompt-tokens 1
expect_err 'bert'
expect_input_error sample "${gpt[@]}" --set model.d_model=64 --init "$w" --prompt-tokens 1
expect_input_error sample "${gpt[@]}" --prompt-tokens 1
expect_err 'needs weights'
expect_input_error sample "${gpt[@]}" --init "$tmp/nothing" --prompt-tokens 1
expect_input_error sample "${gpt[@]}" --init "$w" --prompt-tokens 1 --temperature -1

hy_finish
