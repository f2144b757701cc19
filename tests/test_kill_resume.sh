#!/usr/bin/env bash
# test_kill_resume.sh — a run killed anywhere resumes to the weights it
# would have had (docs/reliability.md).
#
# One uninterrupted `hanayo train` to step N saves every step (the
# reference). Then the same training is run again and again, each run
# resuming from the newest checkpoint left (`--resume DIR`) and killed
# with SIGKILL after a random delay: in a step, in a save, in a removal of
# an old checkpoint (checkpoint.keep), in the start-up. After each kill,
# `hanayo checkpoint verify` passes on every checkpoint left. At least 20
# kills must land in a live run; then a last run goes on to step N, whose
# model.safetensors and optimizer.safetensors must equal the reference's
# byte for byte, with at most checkpoint.keep checkpoints left. The delays
# scale with the reference's own time (so the ASan build is killed as
# often), and their seed is printed: HY_KILL_SEED=S repeats a sequence.
#
# Also: a second run on a checkpoint.dir that a live run holds is refused
# with exit 2, naming the directory and the holder's pid; once the holder
# is killed, the next run takes the directory. Prints "kill_resume: N
# passed, N failed".
set -u

HY_TEST_NAME=kill_resume
. "$(dirname "$0")/lib/cli.sh"

N=200
KILLS=20
run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 3
expect_rc 0
small=(configs/tiny-gpt.json --set "data.train=$tmp/t.bin" --set data.val=null
       --set model.layers=4 --set model.d_model=32 --set model.seq_len=16
       --set schedule.micro_batch_size=2 --set schedule.micro_batches=4
       --set train.log_every=1000 --set checkpoint.every=1 --set checkpoint.keep=3
       --set train.steps=$N)

now_ms() { echo $(($(date +%s%N) / 1000000)); }

t0=$(now_ms)
run train "${small[@]}" --set "checkpoint.dir=$tmp/ref"
expect_rc 0
ref_ms=$(($(now_ms) - t0))
ref=$tmp/ref/$(printf 'step_%06d' $N)
[ -f "$ref/model.safetensors" ] && ok || bad "the reference run left no $ref"

# The delays: uniform in [0, ref_ms / 10): some kills land in the
# start-up, most a few steps in, so 20 kills use about half the steps.
seed=${HY_KILL_SEED:-$(($$ ^ t0 % 32768))}
RANDOM=$seed
echo "kill_resume: reference $N steps in $ref_ms ms; kill delays seeded with $seed"
max_ms=$((ref_ms / 10 > 5 ? ref_ms / 10 : 5))

ck=$tmp/ck
landed=0 attempts=0 mid_save=0 finished=0 in_steps=0
while [ $landed -lt $KILLS ] && [ $attempts -lt $((KILLS * 5)) ]; do
    attempts=$((attempts + 1))
    resume=()
    before=$(ls -d "$ck"/step_* 2>/dev/null | tail -1)
    [ -n "$before" ] && resume=(--resume "$ck")
    # What a kill in a save leaves: hidden temporaries (removed by the next run).
    ls -a "$ck" 2>/dev/null | grep -q '^\.step_' && mid_save=$((mid_save + 1))
    "$HANAYO" train "${small[@]}" --set "checkpoint.dir=$ck" "${resume[@]}" \
        >"$tmp/run.out" 2>"$tmp/run.err" </dev/null &
    pid=$!
    delay=$((RANDOM % max_ms))
    sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
    if kill -KILL "$pid" 2>/dev/null; then
        wait "$pid" 2>/dev/null
        status=$?
        # A run that ended just before the signal reached it is no kill.
        [ $status -eq 137 ] && landed=$((landed + 1))
    else
        wait "$pid"
        status=$?
        [ $status -eq 0 ] || bad "run $attempts exited $status: $(head -c 300 "$tmp/run.err")"
        finished=$((finished + 1))
    fi
    after=$(ls -d "$ck"/step_* 2>/dev/null | tail -1)
    [ "$after" != "$before" ] && in_steps=$((in_steps + 1))
    if [ -n "$after" ]; then
        if "$HANAYO" checkpoint verify "$ck" >"$tmp/verify.out" 2>&1; then ok; else
            bad "after kill $landed: $(cat "$tmp/verify.out")"
        fi
    fi
    # The delays were measured on the reference run: if the machine got
    # faster since (its load dropped), the kills may reach step N with
    # kills still to land, and every run after would finish at once. Then
    # the kills go on in a fresh directory, so how many land does not
    # depend on the machine's speed.
    [ "$after" = "$ck/$(printf 'step_%06d' $N)" ] && ck=$tmp/ck.$attempts
done
newest=$(ls -d "$ck"/step_* 2>/dev/null | tail -1)
echo "kill_resume: $landed kills landed in $attempts runs ($in_steps after a new checkpoint," \
     "$mid_save in a save, leaving its temporaries; $finished ran to the end); newest" \
     "checkpoint then: ${newest##*/}"
[ $landed -ge $KILLS ] && ok || bad "only $landed of $attempts runs were killed while running"

resume=()
[ -n "$(ls -d "$ck"/step_* 2>/dev/null)" ] && resume=(--resume "$ck")
run train "${small[@]}" --set "checkpoint.dir=$ck" "${resume[@]}"
expect_rc 0
last=$ck/$(printf 'step_%06d' $N)
expect_same "$ref/model.safetensors" "$last/model.safetensors"
expect_same "$ref/optimizer.safetensors" "$last/optimizer.safetensors"
kept=$(ls -d "$ck"/step_* | wc -l)
[ "$kept" -le 3 ] && ok || bad "checkpoint.keep=3 left $kept checkpoints"
ls -a "$ck" | grep -q '^\.step_' && bad "temporaries left in $ck: $(ls -a "$ck")" || ok

# ---- one writer per checkpoint.dir -------------------------------------------
"$HANAYO" train "${small[@]}" --set train.steps=1000000 --set checkpoint.every=0 \
    --set "checkpoint.dir=$tmp/held" >"$tmp/held.out" 2>"$tmp/held.err" </dev/null &
holder=$!
for _ in $(seq 600); do   # up to 60 s: the ASan build starts slowly
    grep -q '^step ' "$tmp/held.out" && break
    sleep 0.1
done
expect_input_error train "${small[@]}" --set "checkpoint.dir=$tmp/held"
expect_err "checkpoint.dir $tmp/held is in use by another run (pid $holder "
kill -KILL "$holder"
wait "$holder" 2>/dev/null
run train "${small[@]}" --set train.steps=2 --set "checkpoint.dir=$tmp/held"
expect_rc 0
expect_out "^checkpoint: $tmp/held/step_000002"

hy_finish
