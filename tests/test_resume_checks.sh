#!/usr/bin/env bash
# test_resume_checks.sh — what `hanayo train --resume` checks before it
# writes anything (lib/checkpoint.h, docs/reliability.md).
#
# Newer checkpoints: a run that resumes an older step into a
# checkpoint.dir holding later ones would replace them one by one; it is
# refused at its start (exit 2, one line naming them, the newest to resume
# from and the other ways on), and they are left exactly as they were.
# Resuming the newest, or the old step into another checkpoint.dir, goes.
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
run train "${small[@]}" --set train.steps=6 --set "checkpoint.dir=$tmp/odd" --resume "$tmp/odd"
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
run train "${small[@]}" --set train.steps=6 --set "checkpoint.dir=$tmp/stray" --resume "$tmp/stray"
expect_rc 0
expect_out "resumed from $tmp/stray/step_000004 after step 4"

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
run train "${small[@]}" --set train.steps=6 --set "checkpoint.dir=$tmp/ck6" --resume "$tmp/ck6"
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
run train "${small[@]}" --set train.steps=6 --set "checkpoint.dir=$tmp/odd" --resume "$tmp/odd"
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
run train "${small[@]}" --set train.steps=6 --set "checkpoint.dir=$tmp/stray" --resume "$tmp/stray"
expect_rc 0
expect_out "resumed from $tmp/stray/step_000004 after step 4"

hy_finish
