#!/usr/bin/env bash
# test_pipe.sh — an output of `hanayo train` that fails stops the run after
# the current step with a checkpoint, never kills it with its steps lost.
#
# hanayo train ignores SIGPIPE (tools/cmd_train.c), so a reader that went
# away makes the next write fail (EPIPE) instead of killing the process.
# Each case runs a long training run (100000 steps) whose output fails
# early, under `timeout` (a run that never notices must fail, not hang):
#   - `train | head -3`: exit 141 (128 + SIGPIPE, what a shell reports for
#     a process SIGPIPE ended), one line on stderr, "hanayo: stopped at
#     step N because standard output is a broken pipe (its reader is
#     gone); continue with --resume DIR/step_N"; DIR holds that checkpoint
#     alone (no .lock), `checkpoint verify` passes on it, and a run resumed
#     from it goes on to step N + 2;
#   - the same with checkpoint.dir null: exit 141, "no checkpoint written";
#   - `--log-json` to a pipe whose reader exits after two lines: exit 141,
#     the stderr line names the log, stdout ends with the checkpoint;
#   - stdout on a full disk (/dev/full): not a broken pipe but a failure,
#     exit 1, "hanayo: stopped at step N because standard output could not
#     be written: No space left on device; continue with --resume ...",
#     and the checkpoint is there.
# Runs under the ASan build too (make test). Prints "pipe: N passed, N
# failed".
set -u

HY_TEST_NAME=pipe
. "$(dirname "$0")/lib/cli.sh"

run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 3
expect_rc 0
small=(--set "data.train=$tmp/t.bin" --set data.val=null --set model.layers=4
       --set model.d_model=32 --set model.seq_len=16 --set schedule.micro_batch_size=2
       --set schedule.micro_batches=4 --set train.log_every=1 --set checkpoint.every=0)
long=(configs/tiny-gpt.json "${small[@]}" --set train.steps=100000)

# not_hung: the run ended by itself, not by the guard's timeout.
not_hung() {
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        bad "$last: never stopped (killed after 120 s)"
        return 1
    fi
    return 0
}

# one_err_line PATTERN: stderr is exactly one line, matching PATTERN.
one_err_line() {
    if [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q -e "$1" "$tmp/err"; then ok; else
        bad "$last: want one stderr line matching '$1', got: $(head -c 600 "$tmp/err")"
    fi
}

# saved_alone CK: the step N of $tmp/err's stop line, whose checkpoint
# CK/step_N is all CK holds; it verifies, and a run resumed from it goes
# on to step N + 2. Sets $n.
saved_alone() {
    local ck=$1 step_dir left
    n=$(sed -n 's/^hanayo: stopped at step \([0-9]*\) because .*; continue with --resume .*/\1/p' \
        "$tmp/err")
    if [ -z "$n" ]; then
        bad "$last: no 'stopped at step N ...; continue with --resume' line: $(head -c 400 "$tmp/err")"
        return
    fi
    ok
    step_dir=$(printf '%s/step_%06d' "$ck" "$n")
    if grep -q -e "continue with --resume $step_dir\$" "$tmp/err"; then ok; else
        bad "$last: the stop line does not name $step_dir: $(cat "$tmp/err")"
    fi
    left=$(ls -A "$ck" | tr '\n' ' ')
    if [ "$left" = "$(basename "$step_dir") " ]; then ok; else
        bad "$last: $ck holds '$left', want $(basename "$step_dir") alone (no .lock)"
    fi
    run checkpoint verify "$step_dir"
    expect_rc 0
    # Two steps more, not the stopped run's 100000: another learning-rate
    # schedule, said so.
    run train configs/tiny-gpt.json "${small[@]}" --set "train.steps=$((n + 2))" \
        --set "checkpoint.dir=$ck" --resume "$step_dir" --allow-schedule-change
    expect_rc 0
    expect_out "resumed from $step_dir after step $n"
    expect_out "step $((n + 2))/$((n + 2))"
}

# ---- train | head -3 ------------------------------------------------------------------
ck=$tmp/head-ck
timeout -k 5 120 "$HANAYO" train "${long[@]}" --set "checkpoint.dir=$ck" 2>"$tmp/err" </dev/null |
    head -3 >"$tmp/head"
rc=${PIPESTATUS[0]}
last="train | head -3"
if not_hung; then
    expect_rc 141
    if [ "$(wc -l <"$tmp/head")" -eq 3 ] && grep -q '^backend: ' "$tmp/head"; then ok; else
        bad "$last: head got: $(cat "$tmp/head")"
    fi
    one_err_line '^hanayo: stopped at step [0-9]* because standard output is a broken pipe (its reader is gone); continue with --resume '
    saved_alone "$ck"
fi

# ---- the same without a checkpoint.dir ---------------------------------------------------
timeout -k 5 120 "$HANAYO" train "${long[@]}" --set checkpoint.dir=null 2>"$tmp/err" </dev/null |
    head -3 >/dev/null
rc=${PIPESTATUS[0]}
last="train --set checkpoint.dir=null | head -3"
if not_hung; then
    expect_rc 141
    one_err_line '^hanayo: stopped at step [0-9]* because standard output is a broken pipe (its reader is gone); no checkpoint written: no checkpoint.dir is configured$'
fi

# ---- --log-json to a pipe whose reader exits -----------------------------------------------
ck=$tmp/log-ck
timeout -k 5 120 "$HANAYO" train "${long[@]}" --set "checkpoint.dir=$ck" \
    --log-json >(head -n 2 >"$tmp/log-head") >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
last="train --log-json >(head -n 2)"
if [ "$rc" -eq 2 ] && grep -q 'not a regular file' "$tmp/err"; then
    # A log that must be a regular file cannot be a pipe to begin with.
    echo "pipe: --log-json refuses a pipe; skipped the log's broken-pipe case" >&2
elif not_hung; then
    expect_rc 141
    one_err_line '^hanayo: stopped at step [0-9]* because --log-json /dev/fd/[0-9]* is a broken pipe (its reader is gone); continue with --resume '
    if tail -n 1 "$tmp/out" | grep -q "^checkpoint: $ck/step_"; then ok; else
        bad "$last: stdout does not end with the checkpoint: $(tail -n 2 "$tmp/out")"
    fi
    saved_alone "$ck"
fi

# ---- stdout on a full disk ------------------------------------------------------------------
if [ -w /dev/full ]; then
    ck=$tmp/full-ck
    timeout -k 5 120 "$HANAYO" train "${long[@]}" --set "checkpoint.dir=$ck" \
        >/dev/full 2>"$tmp/err" </dev/null
    rc=$?
    last="train >/dev/full"
    if not_hung; then
        expect_rc 1
        one_err_line '^hanayo: stopped at step [0-9]* because standard output could not be written: No space left on device; continue with --resume '
        saved_alone "$ck"
    fi
else
    echo "pipe: no /dev/full; skipped the full-disk case" >&2
fi

hy_finish
