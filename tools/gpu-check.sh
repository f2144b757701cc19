#!/usr/bin/env bash
# tools/gpu-check.sh — every check that needs a GPU, in one run (< 6 min).
#
# Run on a machine with a CUDA GPU, from the repository root, after
# tools/gpu-prepare.sh packed .gpu/ here and .gpu/ was carried there. It
#   1. unpacks the carried binaries (or, if they do not start there,
#      rebuilds from source with the carried jansson and BLAS);
#   2. runs the CUDA tests: test_cuda (every op against the CPU backend,
#      training CUDA vs CPU, replay = eager bit for bit), test_mailbox (the
#      race stress test on 1, 2, 4 and 8 ranks of one GPU, graphs on and
#      off, flags in host and device memory), test_backend;
#   3. runs the benchmarks, each side by side in this one run:
#      - GPT-2 124M, seq 1024, P = 1: hanayo vs PyTorch (tools/bench_torch.py:
#        torch.compile, SDPA flash, bf16 autocast, fused AdamW), tokens/s, MFU;
#      - graphs vs eager on a launch-bound small model;
#      - 8 ranks on the one GPU (hanayo W = 1; 1F1B; interleaved) vs 1;
#      - the mailbox path's bandwidth against a bare device copy, and the
#        flag round trip, with flags in host-mapped and in device memory;
# and writes logs and summary.txt (the figures, as ratios) into $OUT
# (default ./gpu-out). Exit status: non-zero if a test failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1
work=/tmp/hy-gpu
rm -rf "$work"
mkdir -p "$work/bin" "$work/lib" "$work/data"
status=0
step() { echo; echo "== $* ($(date +%T)) =="; }

step environment
nvidia-smi -L || true
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv || true
command -v nvcc >/dev/null && nvcc --version | tail -2
python3 -c 'import torch; print("torch", torch.__version__)' || true
nproc

step "unpack the carried build"
python3 - "$work" <<'EOF'
import lzma, os, sys, glob, stat
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
if ! "$bin/hanayo" --version; then
    step "the carried binaries do not start here: rebuilding from source"
    sys=$PWD/.gpu/sysroot
    jl=$(find "$sys" -name libjansson.a | head -1)
    make -j"$(nproc)" BUILD=build-there JANSSON_LIB="$jl" \
        CPPFLAGS="-I$sys/usr/include -I$sys/include" \
        BLAS_LIBS="-L$work/lib -l:libopenblas.so.0" all tests || status=1
    bin=$work/rebuilt
    mkdir -p "$bin"
    cp build-there/hanayo build-there/hanayo-bench-copy build-there/tests/test_cuda \
        build-there/tests/test_mailbox build-there/tests/test_backend "$bin"/ || status=1
    "$bin/hanayo" --version || status=1
fi
H=$bin/hanayo

step "CUDA tests"
for t in test_backend test_cuda test_mailbox; do
    echo "-- $t"
    timeout 240 "$bin/$t" >"$OUT/$t.log" 2>&1
    rc=$?
    tail -5 "$OUT/$t.log"
    [ $rc -eq 0 ] || { echo "$t FAILED (exit $rc)"; status=1; }
done

step "benchmark data"
"$H" data synth --out "$work/data/gpt2.bin" --tokens 3000000 --vocab 50257 --seed 1

# One training run: prints the median tokens/s of the steps after the
# second (the eager warm-up and the capture are not steady state).
run() {
    local name=$1; shift
    timeout 150 "$H" train configs/gpt2-124m.json --set data.train="$work/data/gpt2.bin" \
        --set data.val=null --set checkpoint.dir=null --set train.log_every=1 \
        --set train.warmup_steps=2 --log-json "$OUT/run-$name.jsonl" "$@" >"$OUT/run-$name.log" 2>&1
    local rc=$?
    python3 - "$OUT/run-$name.jsonl" "$name" "$rc" <<'EOF'
import json, sys, statistics
path, name, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
try:
    rows = [json.loads(l) for l in open(path) if '"tokens_per_s"' in l]
except OSError:
    pass
steady = [r["tokens_per_s"] for r in rows if r["step"] > 2]
tps = statistics.median(steady) if steady else 0.0
print("%-24s exit %d  %d steps  %.0f tok/s (median after warm-up)" % (name, rc, len(rows), tps))
with open(path + ".tps", "w") as f:
    f.write("%.1f\n" % tps)
EOF
}
tps() { cat "$OUT/run-$1.jsonl.tps" 2>/dev/null || echo 0; }

step "GPT-2 124M, seq 1024, P = 1: hanayo vs PyTorch"
one=(--set schedule.kind=gpipe --set schedule.ranks=1 --set schedule.micro_batches=4
     --set schedule.micro_batch_size=8 --set train.steps=10)
run p1-graph "${one[@]}" --set graph=true
timeout 240 python3 tools/bench_torch.py --micro-batch 8 --micro-batches 4 --steps 8 \
    >"$OUT/torch.json" 2>"$OUT/torch.log" || echo "pytorch baseline failed: $(tail -3 "$OUT/torch.log")"
cat "$OUT/torch.json"

step "graphs vs eager, launch-bound (small model, 1 sequence of 128 per micro-batch)"
small=(--set model.layers=8 --set model.d_model=256 --set model.heads=4 --set model.seq_len=128
       --set schedule.kind=hanayo --set schedule.ranks=2 --set schedule.waves=1
       --set schedule.micro_batches=8 --set schedule.micro_batch_size=1 --set devices=[0,0]
       --set train.steps=30)
run small-graph "${small[@]}" --set graph=true
run small-eager "${small[@]}" --set graph=false

step "8 ranks on one GPU vs 1 (16-layer GPT-2 124M shape, 16 micro-batches of 4 x 1024)"
# 16 layers: interleaved v = 2 and hanayo W = 1 at P = 8 have 16 stages.
zeros='[0,0,0,0,0,0,0,0]'
p8=(--set model.layers=16 --set schedule.ranks=8 --set schedule.micro_batches=16
    --set schedule.micro_batch_size=4 --set devices=$zeros --set train.steps=8)
run p1-m16 --set model.layers=16 --set schedule.kind=gpipe --set schedule.ranks=1 \
    --set schedule.micro_batches=16 --set schedule.micro_batch_size=4 --set train.steps=8
run p8-1f1b "${p8[@]}" --set schedule.kind=1f1b
run p8-interleaved "${p8[@]}" --set schedule.kind=interleaved --set schedule.chunks=2
run p8-hanayo-w1 "${p8[@]}" --set schedule.kind=hanayo --set schedule.waves=1

step "mailbox path vs bare copy (hanayo-bench-copy)"
timeout 120 "$bin/hanayo-bench-copy" --backend cuda --mib 12 --rounds 200 | tee "$OUT/copy.txt"

step "summary"
python3 - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
def tps(name):
    try:
        return float(open(os.path.join(out, "run-%s.jsonl.tps" % name)).read())
    except (OSError, ValueError):
        return 0.0
def ratio(a, b):
    return "%.2fx" % (a / b) if a > 0 and b > 0 else "n/a"
try:
    torch = json.load(open(os.path.join(out, "torch.json")))
except (OSError, ValueError):
    torch = {}
h1, t1 = tps("p1-graph"), torch.get("tokens_per_s", 0.0)
print("GPT-2 124M, seq 1024, 4 x 8 sequences per step, one GPU")
print("  hanayo   %10.0f tok/s" % h1)
print("  pytorch  %10.0f tok/s  (torch.compile, SDPA, bf16 autocast, fused AdamW; MFU %.3f)"
      % (t1, torch.get("mfu", 0.0)))
print("  hanayo / pytorch: %s   (goal >= 1.1x)" % ratio(h1, t1))
if h1 > 0 and torch.get("mfu") and t1 > 0:
    print("  hanayo MFU: %.3f" % (torch["mfu"] * h1 / t1))
g, e = tps("small-graph"), tps("small-eager")
print("graphs vs eager, small model, P = 2 on one GPU: %.0f vs %.0f tok/s: %s   (goal >= 1.3x)"
      % (g, e, ratio(g, e)))
base = tps("p1-m16")
print("8 ranks on one GPU vs 1 rank (same model and batch), machinery overhead (goal >= 0.9x):")
for n in ("p8-1f1b", "p8-interleaved", "p8-hanayo-w1"):
    print("  %-16s %10.0f tok/s  %s of P = 1 (%.0f)" % (n, tps(n), ratio(tps(n), base), base))
try:
    print("mailbox path (12 MiB messages, two ranks on one GPU):")
    print("".join("  " + l for l in open(os.path.join(out, "copy.txt")) if l.startswith(("bare", "mailbox"))), end="")
except OSError:
    pass
EOF
echo "gpu-check: exit $status"
exit $status
