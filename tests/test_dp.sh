#!/usr/bin/env bash
# test_dp.sh — data parallelism across processes (docs/design.md §9):
# `mpirun -np 2 hanayo train` against one process.
#
#   - 2 processes x P = 2 ranks x M = 4 micro-batches leave the weights of
#     one process with M = 8 after 3 steps (within 1e-5 of the largest
#     weight: only the order of the float sums differs), for 1f1b, hanayo,
#     hanayo with split backward, and BERT; the logged losses agree too,
#     and only replica 0 prints;
#   - a 2-process checkpoint resumes in one process with M = 8 (the same
#     global batch) and goes on as the one-process run does; with another
#     global batch it is refused;
#   - one replica given a missing shard ends both with one error line, and
#     leaves no checkpoint directory or log behind;
#   - SIGTERM to one replica stops both at the same step, with one
#     checkpoint and exit 143;
#   - a stalled replica (SIGSTOP) ends the job past watchdog_s;
#   - `mpirun -np 2 hanayo profile`: each replica's trace shows its ranks'
#     gradient sums where they run, replica 0 alone prints, and one
#     replica's bad --out ends both with one error and nothing written;
#   - `mpirun -np 3 hanayo eval` is refused with one line, not three;
#   - on the CUDA backend (NCCL), where the machine has two GPUs: the same
#     equality within 1e-3 (bf16); said to be skipped otherwise.
# Needs an MPI build (hanayo --version: "data parallel: mpi") and mpirun
# (Debian: libopenmpi-dev, openmpi-bin; tools/deps.sh test installs them);
# without them it says so and fails, so a machine meant to test it cannot
# pass quietly. OpenMPI's own allocations are not freed at exit and its
# plugins are unloaded before LeakSanitizer could name them, so the ASan
# build runs these processes with leak detection off (every other ASan and
# UBSan check stays on). Prints "dp: N passed, N failed".
set -u

HY_TEST_NAME=dp
. "$(dirname "$0")/lib/cli.sh"

if ! "$HANAYO" --version | grep -q 'data parallel: mpi' || ! command -v mpirun >/dev/null; then
    bad "no MPI: hanayo --version says '$("$HANAYO" --version)', mpirun: $(command -v mpirun || echo missing)"
    hy_finish
    exit 1
fi

# mpirun as root needs these; processes on one machine over shared memory
# only, without the cross-memory attach that containers often forbid.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
mpi=(mpirun --oversubscribe -x ASAN_OPTIONS -x UBSAN_OPTIONS)

run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 3
expect_rc 0
small=(configs/tiny-gpt.json --set "data.train=$tmp/t.bin" --set data.val=null
       --set model.layers=4 --set model.d_model=32 --set model.seq_len=16
       --set schedule.micro_batch_size=2 --set train.log_every=1 --set schedule.ranks=2)

# mpirun_train NAME N ARGS...: N processes of hanayo train; output in
# $tmp/NAME.out and .err, status in $rc.
mpirun_train() {
    local name=$1 n=$2
    shift 2
    "${mpi[@]}" -np "$n" "$HANAYO" train "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
    rc=$?
    last="mpirun -np $n hanayo train ($name); stderr $(head -c 300 "$tmp/$name.err")"
}

# close A B: the largest difference of two safetensors files' tensors, over
# the largest magnitude, is at most $TOL (default 1e-5; plain Python: no
# numpy needed).
close() {
    local tol=${TOL:-1e-5}
    if python3 - "$1" "$2" "$tol" <<'EOF'; then ok; else bad "$1 and $2 differ by more than $tol"; fi
import json, struct, sys
def load(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    head = json.loads(b[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == '__metadata__':
            continue
        s, e = v['data_offsets']
        out[k] = struct.unpack('<%df' % ((e - s) // 4), b[8 + n + s:8 + n + e])
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
diff = max(abs(x - y) for k in a for x, y in zip(a[k], b[k]))
big = max(abs(y) for k in b for y in b[k])
print('max difference %.3g of %.3g' % (diff, big), file=sys.stderr)
sys.exit(0 if diff <= float(sys.argv[3]) * big else 1)
EOF
}

# ---- 2 x 4 micro-batches = 1 x 8 ---------------------------------------------
for kind in 1f1b hanayo hanayo-split bert; do
    cfg=("${small[@]}")
    extra=(--set "schedule.kind=${kind%-split}")
    [ "$kind" = hanayo-split ] && extra+=(--set schedule.split_backward=true)
    [ "$kind" = bert ] && cfg=(configs/tiny-bert.json "${small[@]:1}") extra=(--set schedule.kind=1f1b)
    mpirun_train "dp-$kind" 2 "${cfg[@]}" "${extra[@]}" --set train.steps=3 \
        --set schedule.micro_batches=4 --set "checkpoint.dir=$tmp/dp-$kind"
    expect_rc 0
    run train "${cfg[@]}" "${extra[@]}" --set train.steps=3 --set schedule.micro_batches=8 \
        --set "checkpoint.dir=$tmp/one-$kind"
    expect_rc 0
    close "$tmp/dp-$kind/step_000003/model.safetensors" "$tmp/one-$kind/step_000003/model.safetensors"
    # The losses printed agree to the printed digits; one replica printed.
    if [ "$(grep -c '^step 3/3' "$tmp/dp-$kind.out")" = 1 ] &&
        [ "$(grep -o 'loss [0-9.]*' "$tmp/dp-$kind.out")" = "$(grep -o 'loss [0-9.]*' "$tmp/out")" ]; then
        ok
    else
        bad "$kind: the losses differ or more than one replica printed: $(grep '^step' "$tmp/dp-$kind.out") against $(grep '^step' "$tmp/out")"
    fi
done
if grep -q '^data parallel: 2 replicas (MPI), each 4 micro-batches of the step.s 8$' "$tmp/dp-1f1b.out"; then ok; else
    bad "no data-parallel line: $(head -8 "$tmp/dp-1f1b.out")"
fi

# ---- resume with another number of replicas ------------------------------------
# (two steps past the runs' train.steps: another learning-rate schedule)
run train "${small[@]}" --set train.steps=5 --set schedule.micro_batches=8 \
    --set "checkpoint.dir=$tmp/dp-1f1b" --set schedule.kind=1f1b --resume "$tmp/dp-1f1b" \
    --allow-schedule-change
expect_rc 0
expect_out "resumed from $tmp/dp-1f1b/step_000003 after step 3"
run train "${small[@]}" --set train.steps=5 --set schedule.micro_batches=8 \
    --set "checkpoint.dir=$tmp/one-1f1b" --set schedule.kind=1f1b --resume "$tmp/one-1f1b" \
    --allow-schedule-change
expect_rc 0
close "$tmp/dp-1f1b/step_000005/model.safetensors" "$tmp/one-1f1b/step_000005/model.safetensors"
expect_input_error train "${small[@]}" --set train.steps=5 --set schedule.micro_batches=4 \
    --set "checkpoint.dir=$tmp/x" --set schedule.kind=1f1b --resume "$tmp/dp-1f1b/step_000003"
expect_err '8 micro-batches a step (2 replicas x schedule.micro_batches 4), the run has 4 (1 x 4)'

# ---- one replica's bad input ends both --------------------------------------------
"${mpi[@]}" -np 1 "$HANAYO" train "${small[@]}" --set train.steps=3 --set schedule.micro_batches=4 \
    --set "checkpoint.dir=$tmp/bad" --log-json "$tmp/bad.jsonl" : \
    -np 1 "$HANAYO" train "${small[@]}" --set train.steps=3 --set schedule.micro_batches=4 \
    --set "checkpoint.dir=$tmp/bad" --set "data.train=$tmp/missing.bin" \
    >"$tmp/bad.out" 2>"$tmp/bad.err" </dev/null
rc=$?
last="mpirun: replica 1 with a missing shard"
if [ "$rc" -ne 0 ]; then ok; else bad "$last: exit 0"; fi
if [ "$(grep -c '^hanayo: ' "$tmp/bad.err")" = 1 ] &&
    grep -q "^hanayo: replica 1: $tmp/missing.bin: cannot open token shard" "$tmp/bad.err"; then ok; else
    bad "$last: want one 'hanayo: replica 1: ...' line, got: $(grep '^hanayo' "$tmp/bad.err")"
fi
if [ ! -e "$tmp/bad" ] && [ ! -e "$tmp/bad.jsonl" ]; then ok; else bad "$last: left $(ls -d "$tmp"/bad*)"; fi
if grep -q '^step ' "$tmp/bad.out"; then bad "$last: trained: $(head -3 "$tmp/bad.out")"; else ok; fi

# start_pair NAME ARGS...: two replicas training (near) forever in the
# background, output in $tmp/NAME.out and .err; returns once they print a
# step, with mpirun's pid in $pid and replica 1's in $replica1.
start_pair() {
    local name=$1
    shift
    "${mpi[@]}" -np 2 "$HANAYO" train "${small[@]}" --set train.steps=1000000 \
        --set schedule.micro_batches=4 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null &
    pid=$!
    for _ in $(seq 600); do   # up to 60 s: the ASan build starts slowly
        grep -q '^step ' "$tmp/$name.out" && break
        sleep 0.1
    done
    # The newest child of mpirun, from /proc (no procps needed): replica 1.
    replica1=$(for st in /proc/[0-9]*/stat; do
        read -r child _ _ parent _ <"$st" 2>/dev/null && [ "$parent" = "$pid" ] && echo "$child"
    done | sort -n | tail -n 1)
}

# ---- SIGTERM to one replica stops both at one step -----------------------------------
# Sent to replica 1 alone (mpirun forwards its own SIGTERM but follows it
# with SIGKILL within a second, which a slow wind-down may not beat); the
# replicas agree after every step, so both stop at the same one and
# replica 0 saves it.
start_pair sig --set checkpoint.every=0 --set "checkpoint.dir=$tmp/sig"
[ -n "$replica1" ] && kill -TERM "$replica1"
wait "$pid"
rc=$?
last="SIGTERM to replica 1"
expect_rc 143
step=$(sed -n 's/^stopped at step \([0-9]*\) because of SIGTERM.*/\1/p' "$tmp/sig.out")
if [ -n "$step" ] && [ "$(ls "$tmp/sig")" = "$(printf 'step_%06d' "$step")" ]; then ok; else
    bad "$last: want one stop line and its checkpoint: $(tail -2 "$tmp/sig.out"); $(ls "$tmp/sig" 2>&1)"
fi

# ---- a stalled replica ends the job, not hangs it ---------------------------------
# SIGSTOP on replica 1: replica 0 waits for it in a gradient sum or an
# agreement, polls, and past watchdog_s reports and ends the job.
start_pair stall --set checkpoint.dir=null --set watchdog_s=2
[ -n "$replica1" ] && kill -STOP "$replica1"
# A hang would outlast this by far: the test kills the job at 60 s.
( sleep 60; kill -KILL "$pid" 2>/dev/null; [ -n "$replica1" ] && kill -KILL "$replica1" 2>/dev/null ) &
guard=$!
wait "$pid"
rc=$?
kill "$guard" 2>/dev/null
wait "$guard" 2>/dev/null
[ -n "$replica1" ] && kill -KILL "$replica1" 2>/dev/null
last="SIGSTOP to replica 1 (watchdog_s 2): exit $rc; stderr $(head -c 400 "$tmp/stall.err")"
if [ "$rc" -ne 0 ] && [ "$rc" -ne 137 ]; then ok; else bad "$last: want a failed job, not killed by the guard"; fi
expect_file_has() { if grep -q -e "$2" "$1"; then ok; else bad "$last: lacks '$2'"; fi; }
expect_file_has "$tmp/stall.err" '^hanayo: replica 0: watchdog: waited [0-9.]* s in .* for the other replicas'

# ---- profile: each replica its own, the gradient sums in its trace -----------------
# Both replicas profile the same steps and write replica-R/; only replica 0
# prints. In each trace, every stage of a rank has one gradient sum on the
# rank's sums track (and the tied embedding's on the last stage's rank,
# when that is not rank 0), starting no earlier than that stage's last
# backward ended and ending no later than the rank's tail begins; the
# summary says which replica it is.
for kind in hanayo 1f1b; do
    prof=$tmp/prof-$kind
    "${mpi[@]}" -np 2 "$HANAYO" profile "${small[@]}" --set schedule.micro_batches=4 \
        --set schedule.kind=$kind --steps 2 --out "$prof" >"$prof.out" 2>"$prof.err" </dev/null
    rc=$?
    last="mpirun -np 2 hanayo profile ($kind); stderr $(head -c 300 "$prof.err")"
    expect_rc 0
    if [ "$(grep -c '^profile: ' "$prof.out")" = 1 ] &&
        grep -q '^replica 0 of 2 data-parallel replicas' "$prof.out" &&
        grep -q "^each replica's profile is in $prof/replica-R (R = 0 .. 1)" "$prof.out"; then ok; else
        bad "$last: want replica 0's table once: $(head -3 "$prof.out")"
    fi
    for r in 0 1; do
        if python3 - "$prof/replica-$r" "$r" <<'EOF'; then ok; else bad "$last: replica $r's trace or summary"; fi
import json, sys
d, replica = sys.argv[1], int(sys.argv[2])
s = json.load(open(d + '/summary.json'))
assert (s['replicas'], s['replica']) == (2, replica), (s['replicas'], s['replica'])
P, S = s['schedule']['ranks'], s['schedule']['stages']
assert all(r['sums_wait_ms'] >= 0 for r in s['ranks'])
assert 'sums' in open(d + '/bars.svg').read()
place = {st['stage']: st['rank'] for st in s['stages']}
ev = json.load(open(d + '/trace.json'))['traceEvents']
begin = {e['id']: e for e in ev if e.get('cat') == 'gradient sum' and e['ph'] == 'b'}
end = {e['id']: e for e in ev if e.get('cat') == 'gradient sum' and e['ph'] == 'e'}
assert begin.keys() == end.keys() and begin, (sorted(begin), sorted(end))
want = {(place[k], k) for k in range(S)}
if place[S - 1] != place[0]:
    want.add((place[S - 1], S))            # the tied embedding's replica
got = {(e['tid'] - P, e['args']['stage']) for e in begin.values()}
assert got == want, (sorted(got), sorted(want))
for i, b in begin.items():
    r, st = b['tid'] - P, b['args']['stage']
    k = min(st, S - 1)
    acts = [e for e in ev if e['ph'] == 'X' and e['tid'] == r and e.get('cat') in ('backward', 'weights')
            and e['args']['stage'] == k]
    done = max(e['ts'] + e['dur'] for e in acts)
    assert b['ts'] >= done - 1e-3, (i, b['ts'], done)
    assert end[i]['ts'] >= b['ts'], i
    tail = [e for e in ev if e['ph'] == 'X' and e['tid'] == r and e['name'] == 'tied-embedding exchange']
    assert len(tail) == 1 and end[i]['ts'] <= tail[0]['ts'] + 1e-3, (i, end[i]['ts'], tail)
EOF
    done
done
# One replica's bad --out: both end with its one error, nothing measured.
: >"$tmp/file"
"${mpi[@]}" -np 1 "$HANAYO" profile "${small[@]}" --out "$tmp/prof-bad" : \
    -np 1 "$HANAYO" profile "${small[@]}" --out "$tmp/file/x" >"$tmp/prof-bad.out" 2>"$tmp/prof-bad.err" </dev/null
rc=$?
last="mpirun: profile, replica 1 with a bad --out"
if [ "$rc" -ne 0 ]; then ok; else bad "$last: exit 0"; fi
if [ "$(grep -c '^hanayo: ' "$tmp/prof-bad.err")" = 1 ] && grep -q '^hanayo: replica 1: ' "$tmp/prof-bad.err"; then ok; else
    bad "$last: want one 'hanayo: replica 1: ...' line, got: $(grep '^hanayo' "$tmp/prof-bad.err")"
fi
if [ ! -e "$tmp/prof-bad" ]; then ok; else bad "$last: left $tmp/prof-bad"; fi

# ---- a command that does not run as replicas: refused once ----------------------------
"${mpi[@]}" -np 3 "$HANAYO" eval "${small[@]}" >"$tmp/eval-dp.out" 2>"$tmp/eval-dp.err" </dev/null
rc=$?
last="mpirun -np 3 hanayo eval"
expect_rc 2
if [ "$(grep -c '^hanayo: ' "$tmp/eval-dp.err")" -eq 1 ] &&
    grep -qF "hanayo: hanayo eval: launched as one of 3 MPI processes, but only 'train' and 'profile' run as data-parallel replicas; run 'hanayo eval' once, without mpirun or srun" "$tmp/eval-dp.err"; then
    ok
else
    bad "$last: want one 'hanayo: hanayo eval: ...' line, got: $(grep '^hanayo' "$tmp/eval-dp.err")"
fi

# ---- the CUDA backend, through NCCL: only with two GPUs or more -------------------
# NCCL puts one replica on each GPU (it refuses two on one), so each
# process sees its own through CUDA_VISIBLE_DEVICES; the config is the
# same for both. bf16 activations: the sums' order moves results further
# than in fp32, hence 1e-3.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if "$HANAYO" --version | grep -q 'backends: cpu cuda' && [ "${gpus:-0}" -ge 2 ]; then
    gpu=(--set backend=cuda --set schedule.kind=1f1b --set schedule.ranks=1 --set train.steps=3)
    "${mpi[@]}" -np 1 -x CUDA_VISIBLE_DEVICES=0 "$HANAYO" train "${small[@]}" "${gpu[@]}" \
        --set schedule.micro_batches=4 --set "checkpoint.dir=$tmp/dp-cuda" : \
        -np 1 -x CUDA_VISIBLE_DEVICES=1 "$HANAYO" train "${small[@]}" "${gpu[@]}" \
        --set schedule.micro_batches=4 --set "checkpoint.dir=$tmp/dp-cuda" \
        >"$tmp/dp-cuda.out" 2>"$tmp/dp-cuda.err" </dev/null
    rc=$?
    last="mpirun -np 2 on the CUDA backend: $(head -c 400 "$tmp/dp-cuda.err")"
    expect_rc 0
    CUDA_VISIBLE_DEVICES=0 "$HANAYO" train "${small[@]}" "${gpu[@]}" --set schedule.micro_batches=8 \
        --set "checkpoint.dir=$tmp/one-cuda" >"$tmp/one-cuda.out" 2>&1
    close_within() { TOL=$1 close "$2" "$3"; }
    close_within 1e-3 "$tmp/dp-cuda/step_000003/model.safetensors" \
        "$tmp/one-cuda/step_000003/model.safetensors"
else
    echo "dp: the CUDA case skipped: it needs the CUDA backend and two GPUs (this machine: ${gpus:-0})"
fi

hy_finish
