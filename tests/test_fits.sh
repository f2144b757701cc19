#!/usr/bin/env bash
# test_fits.sh — a run that cannot be trained is refused before anything
# is allocated or written (docs/runtime.md, "Memory").
#
# train, profile and tune check their inputs first (a missing shard is
# said as such), then hold the memory plan (lib/memplan.h) against what
# the machine has free; a plan too large is refused with exit 2 and one
# line naming the pool, the bytes needed and free, the largest term and
# what would make it fit, leaving no checkpoint directory, profile or
# tuned config behind. One case runs under `ulimit -v` (an address-space
# limit the plan is held against); it is skipped, saying so, under a
# sanitizer, which reserves more address space than any such limit.
# Prints "fits: N passed, N failed".
set -u

HY_TEST_NAME=fits
. "$(dirname "$0")/lib/cli.sh"

run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 3
expect_rc 0
run data synth --out "$tmp/big.bin" --tokens 300000 --vocab 512 --seed 4   # a huge batch's worth
expect_rc 0
small=(--set "data.train=$tmp/t.bin" --set data.val=null --set model.seq_len=16
       --set schedule.micro_batch_size=2 --set schedule.micro_batches=4 --set train.steps=2)
# A model no machine holds on the CPU: 48 layers of width 4096 over
# sequences of 4096 tokens, 64 to a micro-batch (its stash alone is
# petabytes).
huge=(--set model.layers=48 --set model.d_model=4096 --set model.heads=32
      --set model.seq_len=4096 --set schedule.micro_batch_size=64 --set backend=cpu
      --set "data.train=$tmp/big.bin")

# The shard is checked before the memory: named, even for a huge model.
for cmd in train profile; do
    expect_input_error $cmd configs/tiny-gpt.json "${small[@]}" "${huge[@]}" \
        --set "data.train=$tmp/missing.bin" --set "checkpoint.dir=$tmp/ck0"
    expect_err "missing.bin: cannot open token shard"
    if [ -e "$tmp/ck0" ]; then bad "$last: left $tmp/ck0"; else ok; fi
done

# Too large: refused with the figures and a way out, nothing written.
expect_input_error train configs/tiny-gpt.json "${small[@]}" "${huge[@]}" \
    --set "checkpoint.dir=$tmp/ck1" --log-json "$tmp/log1.jsonl"
expect_err "the run does not fit: the host (ranks 0, 1) would need [0-9.]* GiB and has [0-9.]* GiB free"
expect_err "the most is rank [01]'s activations"
expect_err "try activation recomputation (train.recompute), a smaller schedule.micro_batch_size"
for f in "$tmp/ck1" "$tmp/log1.jsonl"; do
    if [ -e "$f" ]; then bad "$last: left $f"; else ok; fi
done
expect_input_error profile configs/tiny-gpt.json "${small[@]}" "${huge[@]}" --out "$tmp/prof"
expect_err "the run does not fit"
if [ -e "$tmp/prof" ]; then bad "$last: left $tmp/prof"; else ok; fi
expect_input_error tune configs/tiny-gpt.json "${small[@]}" "${huge[@]}" --apply "$tmp/tuned.json"
expect_err "the run does not fit"
if [ -e "$tmp/tuned.json" ]; then bad "$last: left $tmp/tuned.json"; else ok; fi

# The same model that fits trains (the check does not refuse what fits).
run train configs/tiny-gpt.json "${small[@]}" --set "checkpoint.dir=$tmp/ck2"
expect_rc 0
expect_out "step 2/2"

# Under an address-space limit: the plan is held against what it leaves.
case "$HANAYO" in
*build-asan/* | *build-tsan/*)
    echo "fits: skipped the ulimit -v case: a sanitizer's shadow memory exceeds any such limit" ;;
*)
    # gpt2-124m's plan on the CPU is tens of GiB; 3 GiB of address space
    # holds the binary and its libraries but not that.
    (ulimit -v 3000000; "$HANAYO" train configs/gpt2-124m.json --set "data.train=$tmp/t.bin" \
        --set data.val=null --set model.vocab=512 --set backend=cpu \
        --set "checkpoint.dir=$tmp/ck3" >"$tmp/out" 2>"$tmp/err")
    rc=$?
    last="ulimit -v 3000000; hanayo train configs/gpt2-124m.json"
    expect_rc 2
    expect_err "the run does not fit: the host"
    if [ -e "$tmp/ck3" ]; then bad "$last: left $tmp/ck3"; else ok; fi
    # At 256 tokens a sequence its stash is about 19 GiB over the ranks,
    # 4.6 GiB with full recompute: the refusal names the mode that fits
    # (and only that run is refused: nothing is trained here).
    (ulimit -v 8000000; "$HANAYO" train configs/gpt2-124m.json --set "data.train=$tmp/t.bin" \
        --set data.val=null --set model.vocab=512 --set model.seq_len=256 --set backend=cpu \
        --set "checkpoint.dir=$tmp/ck4" >"$tmp/out" 2>"$tmp/err")
    rc=$?
    last="ulimit -v 8000000; hanayo train configs/gpt2-124m.json (seq_len 256)"
    expect_rc 2
    expect_err "the run does not fit: the host"
    avail=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
    hint=0
    if [ "${avail:-0}" -ge 8000000 ]; then hint=1; expect_err 'it fits with train.recompute = "full"'
    else echo "fits: skipped the recompute hint: under 8 GB available, full recompute fits no better"; fi
    if [ -e "$tmp/ck4" ]; then bad "$last: left $tmp/ck4"; else ok; fi
    # profile and tune measure the run as configured: refused alike.
    for cmd in profile tune; do
        (ulimit -v 8000000; "$HANAYO" $cmd configs/gpt2-124m.json --set "data.train=$tmp/t.bin" \
            --set data.val=null --set model.vocab=512 --set model.seq_len=256 --set backend=cpu \
            >"$tmp/out" 2>"$tmp/err")
        rc=$?
        last="ulimit -v 8000000; hanayo $cmd configs/gpt2-124m.json (seq_len 256)"
        expect_rc 2
        if [ $hint = 1 ]; then expect_err 'it fits with train.recompute = "full"'; fi
    done
    # A run that fits no machine here and names no backend is tuned for
    # GPUs from its modelled costs (nothing is allocated: 3 GB of address
    # space would not hold one layer of the 13B model's optimizer state),
    # saying so; the plan it writes fits 80 GiB a rank by the memory
    # plan, as `hanayo plan` prints it. GPT 13B fits there as it is only
    # with recompute; Llama 8B as it is, already.
    for model in gpt-13b llama-8b; do
        (ulimit -v 3000000; "$HANAYO" tune configs/$model.json --memory-gb 80 \
            --apply "$tmp/$model-tuned.json" >"$tmp/out" 2>"$tmp/err")
        rc=$?
        last="ulimit -v 3000000; hanayo tune configs/$model.json --memory-gb 80"
        expect_rc 0
        expect_out '^costs modelled, not measured: the run cannot be profiled here (the run does not fit'
        expect_out "FLOPs at 395.6 TFLOP/s a rank"
        expect_out '^     1  '
        if [ $model = gpt-13b ]; then expect_out 'as it is, predicted the same way; over the memory budget'
        else expect_no_out 'same way; over the memory budget'; fi
        run plan "$tmp/$model-tuned.json" --memory-gb 80 --set backend=cuda
        expect_rc 0
        expect_out '^  fits: each rank within 80.00 GiB'
    done
    # At 80 GB an activation cap fits it, with recompute or without,
    # whichever is faster (lib/fit.h); the plan is made within that cap
    # and says what it recomputes. At 8 GB nothing does.
    run plan configs/gpt-13b.json --memory-gb 80 --set backend=cuda
    expect_out '^activation cap    [0-9][0-9]* per rank'
    expect_out '^  fastest way to fit (recompute or an activation cap, weighed as tune weighs them): cap [1-9][0-9]* with train.recompute = "[a-z]*", makespan '
    run plan configs/gpt-13b.json --memory-gb 8 --set backend=cuda
    expect_out '^  does not fit in 8.00 GiB per rank'
    expect_no_out 'fastest way to fit' ;;
esac

hy_finish
