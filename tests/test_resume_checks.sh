#!/usr/bin/env bash
# test_resume_checks.sh — what `hanayo train` checks about the runs before
# it writes anything, with and without --resume (lib/checkpoint.h,
# docs/reliability.md, docs/cli.md).
#
# Newer checkpoints: a run that resumes an older step into a
# checkpoint.dir holding later ones would replace them one by one; it is
# refused at its start (exit 2, one line naming them, the newest to resume
# from and the other ways on), and they are left exactly as they were.
# Resuming the newest, or the old step into another checkpoint.dir, goes.
#
# Another run's checkpoints: a new run (no --resume) into a checkpoint.dir
# that holds checkpoints is refused naming them and the ways on (--resume,
# another checkpoint.dir, removing them, --fresh); --fresh starts over
# beside them, saying so, and leaves the others' steps as they were;
# --fresh with --resume is refused.
#
# Nothing to train: resuming a checkpoint at or past train.steps is
# refused (exit 2) saying so and how to train on (a larger train.steps,
# with --allow-schedule-change under a decaying schedule).
#
# The learning-rate schedule: resuming with another train.lr, min_lr,
# warmup_steps, steps, lr_schedule or (wsd) decay_fraction than the
# checkpoint's run had is refused, showing each difference and the rate
# before and after; --allow-schedule-change takes it and says so; under
# `constant` a longer train.steps changes no rate and needs no flag.
#
# Names: only a directory named exactly as a save names it (step_%06d)
# is a checkpoint; step_7 and step_0000009 are neither listed, verified
# nor resumed. A newest step directory without a state.json is refused
# when resuming from the directory, naming it and the newest whole
# checkpoint before it.
#
# Prints "resume-checks: N passed, N failed"; exits non-zero on any failure.
set -u

HY_TEST_NAME=resume-checks
. "$(dirname "$0")/lib/cli.sh"

run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 3
expect_rc 0
small=(configs/tiny-gpt.json --set "data.train=$tmp/t.bin" --set data.val=null
       --set model.d_model=32 --set model.seq_len=16 --set schedule.micro_batch_size=2
       --set schedule.micro_batches=4 --set checkpoint.every=2)
ck=$tmp/ck
run train "${small[@]}" --set train.steps=4 --set "checkpoint.dir=$ck"
expect_rc 0
if [ ! -f "$ck/step_000004/state.json" ]; then
    bad "no checkpoints to test with; stopping here"
    hy_finish
    exit 1
fi
cp -r "$ck" "$tmp/ck.orig"
unchanged() {
    if diff -r "$tmp/ck.orig" "$1" >/dev/null; then ok; else
        bad "$last: changed $1: $(diff -rq "$tmp/ck.orig" "$1" | head -3)"
    fi
}

# ---- resuming an older step among newer ones --------------------------------------
# The issue's repro, as written.
expect_input_error train "${small[@]}" --set train.steps=4 --set "checkpoint.dir=$ck" \
    --resume "$ck/step_000002"
expect_err "checkpoint.dir $ck holds 1 checkpoint newer than step 2"
expect_err "continues from: $ck/step_000004;"
expect_err "resume from the newest (--resume $ck/step_000004)"
expect_err "another checkpoint.dir"
unchanged "$ck"
# Going further than the newer one changes nothing.
expect_input_error train "${small[@]}" --set train.steps=8 --set "checkpoint.dir=$ck" \
    --resume "$ck/step_000002"
unchanged "$ck"
# The old step into another directory goes, and so does the newest here.
run train "${small[@]}" --set train.steps=4 --set "checkpoint.dir=$tmp/other" \
    --resume "$ck/step_000002"
expect_rc 0
expect_out "resumed from $ck/step_000002 after step 2"
unchanged "$ck"
cp -r "$tmp/ck.orig" "$tmp/ck6"
run train "${small[@]}" --set train.steps=6 --set "checkpoint.dir=$tmp/ck6" --resume "$tmp/ck6" \
    --allow-schedule-change
expect_rc 0
expect_out "resumed from $tmp/ck6/step_000004 after step 4"
# Several newer ones: counted, named.
expect_input_error train "${small[@]}" --set train.steps=6 --set "checkpoint.dir=$tmp/ck6" \
    --resume "$tmp/ck6/step_000002"
expect_err "holds 2 checkpoints newer than step 2"
expect_err "$tmp/ck6/step_000004, $tmp/ck6/step_000006;"
expect_err "(--resume $tmp/ck6/step_000006)"
# A newer directory that is no whole checkpoint is still not replaced
# unasked.
mkdir -p "$tmp/ck9"
cp -r "$ck/step_000002" "$tmp/ck9/"
mkdir "$tmp/ck9/step_000009"
expect_input_error train "${small[@]}" --set train.steps=10 --set "checkpoint.dir=$tmp/ck9" \
    --resume "$tmp/ck9/step_000002"
expect_err "none of them holds a state.json"
if [ -d "$tmp/ck9/step_000009" ] && [ ! -e "$tmp/ck9/.lock" ]; then ok; else
    bad "$last: step_000009 gone or the lock left"
fi

# ---- only exact step_NNNNNN names are checkpoints -------------------------------
# step_7 and step_0000009 would pass for steps 7 and 9 (and be listed under
# names that do not exist); they are no checkpoints, whatever they hold.
cp -r "$tmp/ck.orig" "$tmp/odd"
cp -r "$tmp/odd/step_000002" "$tmp/odd/step_7"
cp -r "$tmp/odd/step_000002" "$tmp/odd/step_0000009"
run checkpoint list "$tmp/odd"
expect_rc 0
expect_out "$tmp/odd/step_000002$"
expect_out "$tmp/odd/step_000004$"
expect_no_out 'step_7\|step_0000009\|step_000007\|step_000009'
run checkpoint verify "$tmp/odd"
expect_rc 0
if [ "$(grep -c '^ok ' "$tmp/out")" -eq 2 ]; then ok; else bad "$last: $(cat "$tmp/out")"; fi
expect_no_out 'step_7\|step_0000009\|step_000007\|step_000009'
run train "${small[@]}" --set train.steps=6 --set "checkpoint.dir=$tmp/odd" --resume "$tmp/odd" \
    --allow-schedule-change
expect_rc 0
expect_out "resumed from $tmp/odd/step_000004 after step 4"

# ---- a newest step directory that is no checkpoint ---------------------------------
# Resuming from the directory names it and the newest whole one before it.
cp -r "$tmp/ck.orig" "$tmp/stray"
mkdir "$tmp/stray/step_000006"
expect_input_error train "${small[@]}" --set train.steps=8 --set "checkpoint.dir=$tmp/stray" \
    --resume "$tmp/stray"
expect_err "its newest step directory $tmp/stray/step_000006 holds no state.json"
expect_err "the newest checkpoint before it is $tmp/stray/step_000004"
if [ -d "$tmp/stray/step_000006" ] && [ ! -e "$tmp/stray/.lock" ]; then ok; else
    bad "$last: step_000006 gone or the lock left"
fi
mkdir "$tmp/stray0"
mkdir "$tmp/stray0/step_000001"
expect_input_error train "${small[@]}" --set "checkpoint.dir=$tmp/other0" --resume "$tmp/stray0"
expect_err "no step_NNNNNN directory in $tmp/stray0 holds one"
# Moved aside, as the message says: the run goes on from step 4.
mv "$tmp/stray/step_000006" "$tmp/stray/aside_000006"
run train "${small[@]}" --set train.steps=6 --set "checkpoint.dir=$tmp/stray" --resume "$tmp/stray" \
    --allow-schedule-change
expect_rc 0
expect_out "resumed from $tmp/stray/step_000004 after step 4"


# ---- a new run into another run's checkpoints -------------------------------------
# The issue's repro: a second train with train.steps 5 wrote step_000005
# beside the first run's step_000004.
cp -r "$tmp/ck.orig" "$tmp/used"
expect_input_error train "${small[@]}" --set train.steps=5 --set "checkpoint.dir=$tmp/used"
expect_err "checkpoint.dir $tmp/used already holds 2 checkpoints of another run: $tmp/used/step_000002, $tmp/used/step_000004;"
expect_err "continue that run with --resume $tmp/used"
expect_err "another checkpoint.dir (--set checkpoint.dir=DIR)"
expect_err "remove them first"
expect_err "pass --fresh to start over beside them"
unchanged "$tmp/used"
if [ -e "$tmp/used/.lock" ]; then bad "$last: left the lock"; else ok; fi
# A directory holding nothing yet, or no directory, is a new run's.
mkdir "$tmp/empty"
run train "${small[@]}" --set train.steps=2 --set "checkpoint.dir=$tmp/empty"
expect_rc 0
expect_out "checkpoint: $tmp/empty/step_000002"
# --fresh starts over beside them, saying so; their newest is untouched
# (a save of the same step, step_000002 here, replaces theirs).
run train "${small[@]}" --set train.steps=2 --set "checkpoint.dir=$tmp/used" --fresh
expect_rc 0
expect_out "checkpoint.dir $tmp/used holds 2 checkpoints of another run (newest step 4); this run starts over beside them (--fresh)"
expect_out "checkpoint: $tmp/used/step_000002"
if diff -r "$tmp/ck.orig/step_000004" "$tmp/used/step_000004" >/dev/null; then ok; else
    bad "$last: changed the other run's step_000004"
fi
expect_input_error train "${small[@]}" --set "checkpoint.dir=$tmp/used" --fresh --resume "$tmp/used"
expect_err "--fresh starts a new run and --resume $tmp/used continues one"

# ---- nothing left to train ----------------------------------------------------------
# At its last step, and past it (the issue: --set train.steps=8 against a
# step-200 checkpoint trained nothing and exited 0).
cp -r "$tmp/ck.orig" "$tmp/done"
expect_input_error train "${small[@]}" --set train.steps=4 --set "checkpoint.dir=$tmp/done" \
    --resume "$tmp/done"
expect_err "checkpoint $tmp/done/step_000004 is at step 4 and train.steps is 4: nothing is left to train"
expect_err "raise train.steps above 4 (--steps N) with --allow-schedule-change"
expect_err "init=$tmp/done/step_000004/model.safetensors"
unchanged "$tmp/done"
expect_input_error train "${small[@]}" --steps 3 --set "checkpoint.dir=$tmp/done" --resume "$tmp/done"
expect_err "is at step 4 and train.steps is 3: nothing is left to train"
# Even when allowed another schedule: there is still nothing to train.
expect_input_error train "${small[@]}" --steps 4 --set "checkpoint.dir=$tmp/done" \
    --resume "$tmp/done" --allow-schedule-change
expect_err "nothing is left to train"
unchanged "$tmp/done"

# ---- the learning-rate schedule -------------------------------------------------------
# Extending a run changes the cosine's curve mid-run: refused with the
# difference and the rate before and after, then taken when asked.
expect_input_error train "${small[@]}" --steps 6 --set "checkpoint.dir=$tmp/done" --resume "$tmp/done"
expect_err "this run's learning-rate schedule is not the checkpoint's (train.steps 4 -> 6)"
expect_err "the rate would go from 2.00e-04 at step 4 to 2.50e-04 at step 5"
expect_err "pass --allow-schedule-change to take this schedule from step 5 on"
unchanged "$tmp/done"
# Each key of the schedule, one at a time, from the middle of the run
# (step 2 of 4), into a directory of its own.
changed() {
    local want=$1
    shift
    expect_input_error train "${small[@]}" --set train.steps=4 --set "checkpoint.dir=$tmp/sched" \
        --resume "$tmp/ck.orig/step_000002" "$@"
    expect_err "this run's learning-rate schedule is not the checkpoint's ($want)"
    if [ -e "$tmp/sched" ]; then bad "$last: made $tmp/sched"; else ok; fi
}
changed "train.lr 0.001 -> 0.0005" --set train.lr=5e-4
changed "train.min_lr 0.0001 -> 0" --set train.min_lr=0
changed "train.warmup_steps 20 -> 2" --set train.warmup_steps=2
changed "train.lr_schedule cosine -> linear" --set train.lr_schedule=linear
changed "train.lr 0.001 -> 0.002, train.steps 4 -> 5" --set train.lr=2e-3 --steps 5
# The same schedule resumes unasked; keys that shape no rate are free.
run train "${small[@]}" --set train.steps=4 --set "checkpoint.dir=$tmp/same" \
    --resume "$tmp/ck.orig/step_000002" --set train.weight_decay=0 --set train.log_every=1
expect_rc 0
expect_out "resumed from $tmp/ck.orig/step_000002 after step 2"
expect_no_out "learning-rate schedule changed"
# Asked: taken, said, and the rates are the new schedule's.
run train "${small[@]}" --steps 6 --set "checkpoint.dir=$tmp/done" --resume "$tmp/done" \
    --allow-schedule-change --set train.log_every=1
expect_rc 0
expect_out "^learning-rate schedule changed (--allow-schedule-change): train.steps 4 -> 6; the rate goes from 2.00e-04 at step 4 to 2.50e-04 at step 5$"
expect_out "^step 5/6  loss [0-9.]*  lr 2.50e-04 "
expect_out "checkpoint: $tmp/done/step_000006"
# wsd's decay_fraction is compared under wsd only; under constant a longer
# run changes no rate, so it needs no flag, and neither does its end.
run train "${small[@]}" --set train.steps=4 --set train.lr_schedule=wsd \
    --set "checkpoint.dir=$tmp/wsd"
expect_rc 0
changed_wsd() {
    expect_input_error train "${small[@]}" --set train.steps=4 --set train.lr_schedule=wsd \
        --set "checkpoint.dir=$tmp/wsd2" --resume "$tmp/wsd/step_000002" "$@"
}
changed_wsd --set train.decay_fraction=0.5
expect_err "(train.decay_fraction 0.2 -> 0.5)"
run train "${small[@]}" --set train.steps=2 --set train.lr_schedule=constant \
    --set "checkpoint.dir=$tmp/const"
expect_rc 0
run train "${small[@]}" --steps 4 --set train.lr_schedule=constant --set "checkpoint.dir=$tmp/const" \
    --resume "$tmp/const" --set train.decay_fraction=0.5 --set train.min_lr=0
expect_rc 0
expect_out "resumed from $tmp/const/step_000002 after step 2"
expect_no_out "learning-rate schedule changed"
expect_input_error train "${small[@]}" --steps 4 --set train.lr_schedule=constant \
    --set "checkpoint.dir=$tmp/const" --resume "$tmp/const"
expect_err "raise train.steps above 4 (--steps N);"

hy_finish
