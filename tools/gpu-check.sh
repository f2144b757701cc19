#!/usr/bin/env bash
# tools/gpu-check.sh — every check that needs a GPU, in one run of at most
# eight minutes.
#
# Run on a machine with a CUDA GPU, from the repository root, after
# tools/gpu-prepare.sh packed .gpu/ here and .gpu/ was carried there:
#
#     OUT=dir tools/gpu-check.sh [SECTION]...
#
# SECTIONs, in the order they run (default: all of them):
#   tests    test_backend; test_cuda (every op against the CPU backend,
#            the flash attention and the padded head included, training
#            CUDA vs CPU, replay = eager bit for bit, each rank's graph
#            as DOT); test_mailbox (the race stress test on 1, 2, 4 and
#            8 ranks of one GPU, graphs on and off, flags in host and in
#            device memory); test_backend, test_cuda or
#            test_mailbox as a section runs that test alone
#   sm90     the opt-in Hopper attention (kernels/cuda/attention_sm90.cu):
#            `test_cuda sm90` (the backend's ops with HY_CUDA_ATTENTION=sm90
#            against the CPU backend and the default kernel, GQA, odd T,
#            determinism, a replayed graph), then per-launch kernel times by
#            ncu of it and of the default attention.cu (`test_cuda
#            sm90-workload`, both through the backend's ops) beside
#            PyTorch's SDPA, cuDNN and flash (tools/bench_sdpa.py), on one
#            layer of GPT-2 124M at B = 16 and of the head-size-128 model at
#            B = 8: forward and backward ms and TFLOP/s
#   torch    GPT-2 124M, seq 1024, P = 1, 4 micro-batches of 8 and of
#            16: hanayo vs PyTorch (tools/bench_torch.py: torch.compile,
#            SDPA flash, bf16 autocast, fused AdamW, the same padded
#            vocabulary and micro-batches), tokens/s and MFU; PyTorch's
#            profiler keeps one step's kernels for the kernels section
#   h128     the same for head size 128: configs/gpt-1.3b-h128.json (GPT,
#            d_model 2048, 16 heads, 24 layers, 1.3B parameters), 4
#            micro-batches of 8
#   kernels  kernel time per micro-batch by family (attention forward and
#            backward, GEMMs, AdamW, bias/add + GELU + LayerNorm +
#            classifier, embedding, other), hanayo (ncu over one eager
#            micro-batch) beside PyTorch (the torch and h128 sections'
#            profiles), by tools/kernel_table.py: GPT-2 124M at B = 16
#            and the head-size-128 model at B = 8
#   profile  hanayo profile of GPT-2 124M at P = 2 on the one GPU (trace)
#   graphs   graphs vs eager on a launch-bound small model
#   ranks    8 ranks on the one GPU (1F1B, interleaved, hanayo W = 1) vs 1
#   copy     the mailbox path's bandwidth against a bare device copy, and
#            the flag round trip (hanayo-bench-copy)
#
# The budget: a lent GPU comes with 15 minutes in all, its start and the
# transfers included, so everything here ends by one global deadline
# (HY_GPU_BUDGET_S, default 480 s from the start): every program runs
# under `timeout` with its own cap, cut to what is left; what no longer
# fits is skipped and says so. Every hanayo run has watchdog_s = 10, so a
# stalled rank ends its run in seconds, not minutes.
#
# What comes back, in $OUT (default ./gpu-out), at most three files:
#   summary.txt     one line per check as it finishes (so a cut-short run
#                   still says what it saw), then the figures as ratios
#   gpu-check.log   everything printed
#   logs.tar.gz     every program's log, the JSON lines, the profile's
#                   files and the graphs' DOT
# Exit status: non-zero if a test failed or a program did not start.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1

start=$(date +%s)
deadline=$((start + ${HY_GPU_BUDGET_S:-480}))
reserve=15            # seconds kept for the summary and the packing
work=/tmp/hy-gpu
logs=$work/logs
rm -rf "$work"
mkdir -p "$work/bin" "$work/lib" "$work/data" "$logs"
summary=$OUT/summary.txt
: >"$summary"
status=0

sections=${*:-tests sm90 torch h128 kernels profile graphs ranks copy}
wanted() { [[ " $sections " == *" $1 "* ]]; }
step() { echo; echo "== $* ($(date +%T), $(left) s left) =="; }
note() { echo "$*" | tee -a "$summary"; }
left() { echo $((deadline - $(date +%s))); }

# pack: the logs into one file, whatever happens (also on a signal).
# shellcheck disable=SC2317  # (called by the trap)
pack() { tar -czf "$OUT/logs.tar.gz" -C "$work" logs 2>/dev/null || true; }
trap pack EXIT

# limited CAP CMD...: runs CMD under timeout, for CAP seconds or what is
# left before the deadline (less the reserve), whichever is less; returns
# 125 without running it when under 10 s are left.
limited() {
    local cap=$1; shift
    local t=$(($(left) - reserve))
    [ "$t" -gt "$cap" ] && t=$cap
    if [ "$t" -lt 10 ]; then
        echo "skipped (global deadline): $*"
        return 125
    fi
    # Line-buffered output: a program cut off by its cap still leaves what
    # it had printed in its log.
    local buf=()
    command -v stdbuf >/dev/null && buf=(stdbuf -oL -eL)
    timeout -k 5 "$t" ${buf[@]+"${buf[@]}"} "$@"
}

step environment
note "gpu-check $(date -u +%FT%TZ), sections: $sections, budget $((deadline - start)) s"
nvidia-smi -L || true
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv || true
command -v nvcc >/dev/null && nvcc --version | tail -2
python3 -c 'import torch; print("torch", torch.__version__)' || true
nproc

step "unpack the carried build"
python3 - "$work" <<'EOF'
import lzma, os, sys, glob
work = sys.argv[1]
for src in glob.glob(".gpu/bin/*.xz") + glob.glob(".gpu/lib/*.xz"):
    dst = os.path.join(work, os.path.basename(os.path.dirname(src)), os.path.basename(src)[:-3])
    with lzma.open(src) as f, open(dst, "wb") as g:
        g.write(f.read())
    os.chmod(dst, 0o755)
print("unpacked", len(os.listdir(work + "/bin")), "programs,", len(os.listdir(work + "/lib")), "libraries")
EOF
export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=$work/bin

# cuBLASLt is not carried (it is large): the binaries open it at their
# first GEMM (kernels/cuda/ltload.cuh), through the loader's path and
# where the build machine had it (/usr/local/cuda/lib64, their rpath).
# Where it is elsewhere here (another toolkit directory, the multiarch
# directory, the nvidia-cublas wheel beside PyTorch), that directory joins
# the path.
need=libcublasLt.so.13
if [ ! -e "/usr/local/cuda/lib64/$need" ] && ! ldconfig -p 2>/dev/null | grep -q "$need"; then
    found=""
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
             /usr/local/cuda-*/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
        [ -e "$d/$need" ] && { found=$d; break; }
    done
    if [ -z "$found" ]; then
        found=$(python3 - "$need" <<'EOF'
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
for r in roots:
    for p in glob.glob(os.path.join(r, "nvidia", "**", sys.argv[1]), recursive=True):
        print(os.path.dirname(p)); sys.exit(0)
EOF
)
    fi
    if [ -z "$found" ]; then
        found=$(timeout 20 find / -xdev -name "$need" -print -quit 2>/dev/null | xargs -r dirname)
    fi
    if [ -n "$found" ]; then
        echo "$need: found in $found"
        export LD_LIBRARY_PATH="$found:$LD_LIBRARY_PATH"
    else
        note "$need: not found on this machine"
    fi
fi

if ! "$bin/hanayo" --version; then
    step "the carried binaries do not start here: rebuilding from source"
    sys=$PWD/.gpu/sysroot
    jl=$(find "$sys" -name libjansson.a | head -1)
    limited 240 make -j"$(nproc)" BUILD=build-there JANSSON_LIB="$jl" \
        CPPFLAGS="-I$sys/usr/include -I$sys/include" \
        BLAS_LIBS="-L$work/lib -l:libopenblas.so.0" all tests >"$logs/rebuild.log" 2>&1 || status=1
    tail -20 "$logs/rebuild.log"
    bin=$work/rebuilt
    mkdir -p "$bin"
    cp build-there/hanayo build-there/hanayo-bench-copy build-there/tests/test_cuda \
        build-there/tests/test_mailbox build-there/tests/test_backend "$bin"/ || status=1
    if "$bin/hanayo" --version; then note "rebuilt from source here"; else
        note "FAILED: neither the carried nor a rebuilt hanayo starts here"; exit 1; fi
fi
H=$bin/hanayo

if wanted tests || wanted test_backend || wanted test_cuda || wanted test_mailbox; then
    step "CUDA tests"
    export HY_TEST_DOT_DIR=$logs/dot
    mkdir -p "$HY_TEST_DOT_DIR"
    for t in test_backend:30 test_cuda:150 test_mailbox:120; do
        name=${t%%:*}
        wanted tests || wanted "$name" || continue
        limited "${t##*:}" "$bin/$name" >"$logs/$name.log" 2>&1
        rc=$?
        tail -5 "$logs/$name.log"
        grep -E '^[a-z_]+: [0-9]+ passed, [0-9]+ failed' "$logs/$name.log" | tail -1 >"$work/tally"
        if [ $rc -eq 0 ]; then note "$name: ok ($(cat "$work/tally"))"; else
            note "$name: FAILED (exit $rc; $(cat "$work/tally"))"
            grep -m 5 -E 'FAIL|error' "$logs/$name.log" | tee -a "$summary"
            status=1
            # The first bad access, named by file and line: a failing CUDA
            # test is run once more under compute-sanitizer, briefly (not
            # one that ran out of time: a hang has no bad access to name).
            if [ $rc -ne 124 ] && command -v compute-sanitizer >/dev/null; then
                limited 30 compute-sanitizer --tool memcheck --print-limit 10 "$bin/$name" \
                    >"$logs/$name.memcheck.log" 2>&1
                grep -m 12 -E '^=========' "$logs/$name.memcheck.log" | tee -a "$summary"
            fi
        fi
    done
fi

# The Hopper attention, opt-in until this passes: correctness first, then
# each kernel's time per launch (ncu, the clocks and caches as they are)
# for it and the default kernel, beside PyTorch's SDPA on the same shapes
# (CUDA events). Cost, estimated: the test about 40 s (its CPU references
# at T = 1024 dominate), ncu about 20 s per shape (24 launches), the SDPA
# script about 30 s (importing torch): about 110 s.
if wanted sm90; then
    step "the Hopper attention (attention_sm90.cu): correctness, then its kernel times beside the default and SDPA"
    limited 120 "$bin/test_cuda" sm90 >"$logs/test_cuda-sm90.log" 2>&1
    rc=$?
    grep -E '^attention_sm90:' "$logs/test_cuda-sm90.log"
    tally=$(grep -E '^cuda: [0-9]+ passed' "$logs/test_cuda-sm90.log" | tail -1)
    shapes=$(grep -m1 -oE '[0-9]+ shapes compared, [0-9]+ skipped' "$logs/test_cuda-sm90.log")
    if [ $rc -eq 0 ]; then note "sm90 attention: ok ($tally; $shapes)"; else
        note "sm90 attention: FAILED (exit $rc; $tally)"
        grep -m 8 -E 'FAIL|error' "$logs/test_cuda-sm90.log" | tee -a "$summary"
        status=1
    fi
    NCU=$(command -v ncu)
    for f in /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
        [ -z "$NCU" ] && [ -x "$f" ] && NCU=$f
    done
    [ -n "$NCU" ] || note "sm90: ncu not found here; no hanayo kernel times"
    for shape in 124m h128; do
        [ -n "$NCU" ] || break
        limited 60 "$NCU" --clock-control none --cache-control none --kernel-name 'regex:fa3?_' \
            --metrics gpu__time_duration.sum --csv --page raw --print-units base \
            --log-file "$logs/ncu-sm90-$shape.csv" "$bin/test_cuda" sm90-workload "$shape" \
            >"$logs/ncu-sm90-$shape.log" 2>&1 ||
            note "sm90: ncu over the $shape workload: exit $? ($(tail -1 "$logs/ncu-sm90-$shape.log"))"
    done
    limited 90 python3 tools/bench_sdpa.py >"$logs/sdpa.json" 2>"$logs/sdpa.log" ||
        note "sm90: bench_sdpa.py failed: $(tail -2 "$logs/sdpa.log" | tr '\n' ' ')"
    python3 - "$logs" <<'EOF' | tee -a "$summary"
import json, os, statistics, sys
sys.path.insert(0, "tools")
from kernel_table import parse_ncu_csv
from bench_sdpa import SHAPES, flops_fwd
logs = sys.argv[1]
print("attention, one layer's call, causal, T = 1024: forward and backward ms (TFLOP/s;"
      " FLOPs 4*B*NH*T^2*hd/2 forward, 2.5x that backward)")
for shape in ("124m", "h128"):
    B, NH, T, hd = SHAPES[shape]
    ff = flops_fwd(B, NH, T, hd)
    rows = []
    try:
        kernels = parse_ncu_csv(open(os.path.join(logs, "ncu-sm90-%s.csv" % shape)).read())
    except (OSError, ValueError):
        kernels = []
    # D = rowsum(dO * O) is attention.cu's fa_dot_kernel in both backwards
    for label, pre in (("hanayo attention.cu (default)", ("fa_",)),
                       ("hanayo attention_sm90.cu", ("fa3_", "fa_dot_kernel"))):
        per = {}
        for name, ns in kernels:
            base = name.split("(")[0].split("<")[0].replace("void ", "").strip()
            if base.startswith(pre):
                per.setdefault(base, []).append(ns / 1e6)
        fwd = sum(statistics.median(v) for k, v in per.items() if "fwd" in k)
        bwd = sum(statistics.median(v) for k, v in per.items() if "fwd" not in k)
        rows.append((label, fwd, bwd))
    try:
        for line in open(os.path.join(logs, "sdpa.json")):
            r = json.loads(line)
            if r.get("shape") == shape and "error" in r:
                print("    pytorch sdpa %s: %s" % (r["backend"], r["error"]))
            elif r.get("shape") == shape:
                rows.append(("pytorch sdpa " + r["backend"], r.get("fwd_ms", 0.0), r.get("bwd_ms", 0.0)))
    except (OSError, ValueError):
        pass
    print("  %s: B=%d NH=%d hd=%d (%.1f GFLOP forward)" % (shape, B, NH, hd, ff / 1e9))
    for label, fwd, bwd in rows:
        def tf(f, ms):
            return "%6.0f" % (f / ms / 1e9) if ms > 0 else "   n/a"
        print("    %-32s fwd %8.3f ms %s TFLOP/s   bwd %8.3f ms %s TFLOP/s"
              % (label, fwd, tf(ff, fwd), bwd, tf(2.5 * ff, bwd)))
EOF
fi

"$H" data synth --out "$work/data/gpt2.bin" --tokens 3000000 --vocab 50257 --seed 1 >/dev/null

# train NAME CAP CONFIG ARGS...: one training run; notes the median
# tokens/s of the steps after the second (the eager warm-up and the
# capture are not steady state).
train() {
    local name=$1 cap=$2 config=$3; shift 3
    limited "$cap" "$H" train "$config" --set data.train="$work/data/gpt2.bin" \
        --set data.val=null --set checkpoint.dir=null --set checkpoint.every=0 --set train.log_every=1 \
        --set train.warmup_steps=2 --set watchdog_s=10 --log-json "$logs/run-$name.jsonl" \
        "$@" >"$logs/run-$name.log" 2>&1
    local rc=$?
    python3 - "$logs/run-$name.jsonl" "$name" "$rc" <<'EOF' | tee -a "$summary"
import json, sys, statistics
path, name, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
try:
    rows = [json.loads(l) for l in open(path) if '"tokens_per_s"' in l]
except (OSError, ValueError):
    pass
steady = [r["tokens_per_s"] for r in rows if r["step"] > 2]
tps = statistics.median(steady) if steady else 0.0
loss = " loss %.4f -> %.4f" % (rows[0]["loss"], rows[-1]["loss"]) if rows else ""
how = {0: "ok", 124: "timed out", 125: "skipped"}.get(rc, "exit %d" % rc)
print("%-16s %-9s %2d steps  %9.0f tok/s (median after warm-up)%s" % (name, how, len(rows), tps, loss))
with open(path + ".tps", "w") as f:
    f.write("%.1f\n" % tps)
EOF
    # A run the deadline left no time for is not a failure; any other is.
    [ $rc -eq 0 ] || [ $rc -eq 125 ] || { tail -3 "$logs/run-$name.log"; status=1; }
}

# bench_torch NAME CAP ARGS...: tools/bench_torch.py, its JSON line in
# torch-NAME.json and one profiled step's kernels in torch-NAME.trace.json.
bench_torch() {
    local name=$1 cap=$2; shift 2
    limited "$cap" python3 tools/bench_torch.py "$@" --profile "$logs/torch-$name.trace.json" \
        >"$logs/torch-$name.json" 2>"$logs/torch-$name.log"
    local rc=$?
    if [ $rc -ne 0 ] || ! grep -q tokens_per_s "$logs/torch-$name.json"; then
        note "pytorch $name failed (exit $rc): $(tail -2 "$logs/torch-$name.log" | tr '\n' ' ')"
    fi
    cat "$logs/torch-$name.json"
}

# What the two comparisons cost (estimates, not yet timed on the H200):
# hanayo's runs about 15 s each for GPT-2 124M, 35 s for the 1.3B model
# (20 s of it the weights' initialization on the host); bench_torch.py
# about 50 s for GPT-2 124M, most of it torch.compile, and 100 s for the
# 1.3B model. So torch about 130 s, h128 about 135 s.
if wanted torch; then
    step "GPT-2 124M, seq 1024, P = 1, 4 micro-batches of 8 and of 16: hanayo vs PyTorch"
    p1=(--set schedule.kind=gpipe --set schedule.ranks=1 --set schedule.micro_batches=4
        --set train.steps=10 --set graph=true)
    train 124m-b8 90 configs/gpt2-124m.json "${p1[@]}" --set schedule.micro_batch_size=8
    train 124m-b16 90 configs/gpt2-124m.json "${p1[@]}" --set schedule.micro_batch_size=16
    bench_torch 124m-b8 200 --micro-batch 8 --micro-batches 4 --steps 8 --warmup 3
    bench_torch 124m-b16 200 --micro-batch 16 --micro-batches 4 --steps 8 --warmup 3
fi

if wanted h128; then
    step "head size 128: configs/gpt-1.3b-h128.json, seq 1024, P = 1, 4 micro-batches of 8: hanayo vs PyTorch"
    train h128-b8 150 configs/gpt-1.3b-h128.json --set schedule.kind=1f1b --set schedule.ranks=1 \
        --set schedule.micro_batches=4 --set schedule.micro_batch_size=8 --set train.steps=8 \
        --set graph=true
    bench_torch h128-b8 300 --layers 24 --d-model 2048 --heads 16 --micro-batch 8 \
        --micro-batches 4 --steps 6 --warmup 3
fi

# The per-kernel breakdown. ncu times each kernel of hanayo's one eager
# step of one micro-batch (M = 1, graph off: ncu sees each launch) with
# the clocks and caches as they are (--clock-control none, as METHOD.md
# asks; --cache-control none, so that a kernel finds the L2 as it would in
# the run, as PyTorch's profiler sees its own kernels). One metric is one
# pass: no replay. The PyTorch side is the torch/h128 sections' profiled
# step of 4 micro-batches; kernel_table.py divides it by 4.
# Cost, estimated (ncu's overhead on this machine not yet timed): about
# 40 ms per kernel profiled plus the program's start; GPT-2 124M launches
# about 450 kernels a micro-batch and the 1.3B model about 900, so about
# 30 s and 60 s (20 s of it the host's initialization of the weights):
# 90 s for the two. Each run prints its seconds and kernels, to correct
# this. With the torch and h128 sections (265 s) that is about 290 s more
# than the 187 s all sections took before, about 480 s in all: the last
# sections may meet the deadline (they say so; name them to run them).
if wanted kernels; then
    step "kernel time per micro-batch by family: hanayo (ncu) beside PyTorch (torch.profiler)"
    NCU=$(command -v ncu)
    for f in /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
        [ -z "$NCU" ] && [ -x "$f" ] && NCU=$f
    done
    [ -n "$NCU" ] || note "kernels: ncu not found here; PyTorch's side only"
    for k in "124m-b16 configs/gpt2-124m.json 16 90 GPT-2 124M" \
             "h128-b8 configs/gpt-1.3b-h128.json 8 150 GPT d_model 2048, 16 heads of 128, 24 layers"; do
        read -r name config b cap title <<<"$k"
        csv=$logs/ncu-$name.csv
        if [ -n "$NCU" ]; then
            t0=$(date +%s)
            limited "$cap" "$NCU" --clock-control none --cache-control none \
                --metrics gpu__time_duration.sum --csv --page raw --print-units base --log-file "$csv" \
                "$H" train "$config" --set data.train="$work/data/gpt2.bin" --set data.val=null \
                --set checkpoint.dir=null --set checkpoint.every=0 --set train.log_every=1 \
                --set watchdog_s=60 --set schedule.kind=gpipe --set schedule.ranks=1 \
                --set schedule.micro_batches=1 --set schedule.micro_batch_size="$b" \
                --set train.steps=1 --set train.warmup_steps=0 --set graph=false \
                >"$logs/ncu-$name.log" 2>&1
            rc=$?
            [ $rc -eq 125 ] && { note "kernels $name: skipped (global deadline)"; continue; }
            n=$(grep -c '^"[0-9]' "$csv" 2>/dev/null)
            echo "ncu $name: exit $rc, $((${n:-0})) kernels in $(($(date +%s) - t0)) s"
            [ $rc -eq 0 ] || note "kernels $name: ncu exit $rc (the hanayo column may be partial or empty):" \
                "$(grep -m 2 -E 'ERR|rror' "$logs/ncu-$name.log" "$csv" 2>/dev/null | tr '\n' ' ')"
        fi
        python3 tools/kernel_table.py --title "$title, seq 1024, B = $b ($name): kernel time per micro-batch" \
            --hanayo-ncu "$csv" --hanayo-micro-batches 1 \
            --torch-trace "$logs/torch-$name.trace.json" --torch-micro-batches 4 \
            --json "$logs/kernels-$name.json" >"$logs/kernels-$name.txt" 2>&1
        echo | tee -a "$summary"
        tee -a "$summary" <"$logs/kernels-$name.txt"
    done
fi

if wanted profile; then
    step "hanayo profile: GPT-2 124M, hanayo P = 2 W = 1 on the one GPU, 8 micro-batches of 4"
    limited 90 "$H" profile configs/gpt2-124m.json --steps 3 --out "$logs/profile" \
        --set data.train="$work/data/gpt2.bin" --set data.val=null --set checkpoint.dir=null --set checkpoint.every=0 \
        --set watchdog_s=10 --set schedule.ranks=2 --set schedule.micro_batches=8 \
        --set schedule.micro_batch_size=4 --set 'devices=[0,0]' >"$logs/profile.log" 2>&1
    rc=$?
    sed -n '1,2p;/^bubble/,/ideal/p' "$logs/profile.log"
    if [ $rc -eq 0 ]; then note "profile: ok ($(grep -m1 'ms per step' "$logs/profile.log"))"; else
        note "profile: FAILED (exit $rc): $(tail -2 "$logs/profile.log" | tr '\n' ' ')"; status=1; fi
fi

if wanted graphs; then
    step "graphs vs eager, launch-bound (small model, 1 sequence of 128 per micro-batch)"
    small=(--set model.layers=8 --set model.d_model=256 --set model.heads=4 --set model.seq_len=128
           --set schedule.kind=hanayo --set schedule.ranks=2 --set schedule.waves=1
           --set schedule.micro_batches=8 --set schedule.micro_batch_size=1 --set 'devices=[0,0]'
           --set train.steps=30)
    train small-graph 60 configs/gpt2-124m.json "${small[@]}" --set graph=true
    train small-eager 60 configs/gpt2-124m.json "${small[@]}" --set graph=false
fi

if wanted ranks; then
    step "8 ranks on one GPU vs 1 (16-layer GPT-2 124M shape, 16 micro-batches of 4 x 1024)"
    # 16 layers: interleaved v = 2 and hanayo W = 1 at P = 8 have 16 stages.
    p8=(--set model.layers=16 --set schedule.ranks=8 --set schedule.micro_batches=16
        --set schedule.micro_batch_size=4 --set 'devices=[0,0,0,0,0,0,0,0]' --set train.steps=8)
    train p1-m16 60 configs/gpt2-124m.json --set model.layers=16 --set schedule.kind=gpipe --set schedule.ranks=1 \
        --set schedule.micro_batches=16 --set schedule.micro_batch_size=4 --set train.steps=8
    train p8-1f1b 60 configs/gpt2-124m.json "${p8[@]}" --set schedule.kind=1f1b
    train p8-interleaved 60 configs/gpt2-124m.json "${p8[@]}" --set schedule.kind=interleaved \
        --set schedule.chunks=2
    train p8-hanayo-w1 60 configs/gpt2-124m.json "${p8[@]}" --set schedule.kind=hanayo --set schedule.waves=1
fi

if wanted copy; then
    step "mailbox path vs bare copy (hanayo-bench-copy)"
    limited 60 "$bin/hanayo-bench-copy" --backend cuda --mib 12 --rounds 200 >"$logs/copy.txt" 2>&1 ||
        { note "bench-copy FAILED: $(tail -2 "$logs/copy.txt" | tr '\n' ' ')"; status=1; }
    cat "$logs/copy.txt"
fi

step "summary"
python3 - "$logs" <<'EOF' | tee -a "$summary"
import json, os, sys
logs = sys.argv[1]
def tps(name):
    try:
        return float(open(os.path.join(logs, "run-%s.jsonl.tps" % name)).read())
    except (OSError, ValueError):
        return 0.0
def ratio(a, b):
    return "%.2fx" % (a / b) if a > 0 and b > 0 else "n/a"
def torch_of(name):
    try:
        return json.loads(open(os.path.join(logs, "torch-%s.json" % name)).read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return {}
print()
for name, what, goal in (("124m-b8", "GPT-2 124M, 4 x 8 sequences per step", 1.1),
                         ("124m-b16", "GPT-2 124M, 4 x 16 sequences per step", 1.1),
                         ("h128-b8", "GPT d_model 2048, 16 heads of 128, 24 layers (1.3B), 4 x 8", 1.0)):
    h1, torch = tps(name), torch_of(name)
    t1 = torch.get("tokens_per_s", 0.0)
    if not (h1 or t1):
        continue
    print("%s, seq 1024, vocabulary padded to 50304, one GPU" % what)
    print("  hanayo   %10.0f tok/s" % h1)
    print("  pytorch  %10.0f tok/s  (compiled %s, SDPA, bf16 autocast, fused AdamW; MFU %.3f)"
          % (t1, torch.get("compiled", "?"), torch.get("mfu", 0.0)))
    print("  hanayo / pytorch: %s   (goal >= %.1fx)" % (ratio(h1, t1), goal))
    if h1 > 0 and torch.get("mfu") and t1 > 0:
        print("  hanayo MFU: %.3f" % (torch["mfu"] * h1 / t1))
g, e = tps("small-graph"), tps("small-eager")
if g or e:
    print("graphs vs eager, small model, P = 2 on one GPU: %.0f vs %.0f tok/s: %s   (goal >= 1.3x)"
          % (g, e, ratio(g, e)))
base = tps("p1-m16")
if base:
    print("8 ranks on one GPU vs 1 rank (same model and batch), machinery overhead (goal >= 0.9x):")
    for n in ("p8-1f1b", "p8-interleaved", "p8-hanayo-w1"):
        print("  %-16s %10.0f tok/s  %s of P = 1 (%.0f)" % (n, tps(n), ratio(tps(n), base), base))
try:
    lines = [l for l in open(os.path.join(logs, "copy.txt")) if l.startswith(("bare", "mailbox"))]
    if lines:
        print("mailbox path (12 MiB messages, two ranks on one GPU):")
        print("".join("  " + l for l in lines), end="")
except OSError:
    pass
EOF
note "gpu-check: exit $status after $(($(date +%s) - start)) s"
exit $status
