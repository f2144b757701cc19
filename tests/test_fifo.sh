#!/usr/bin/env bash
# test_fifo.sh — a FIFO where hanayo expects a file never hangs it
# (docs/reliability.md).
#
# A plain open() of a FIFO waits for a writer, possibly forever; every file
# hanayo reads is opened through lib/infile.h, which refuses anything but a
# regular file without waiting. Each case below puts a FIFO where a command
# reads a file (a checkpoint's state.json, model.safetensors and
# config.json; the config; the training shard; the init weights; a
# profile's summary.json) and runs the command under `timeout 10`: it must
# exit 2 at once with one "hanayo: " line on stderr, the FIFO named (on
# that line, or for checkpoint verify on its BAD line) and, except for a
# checkpoint's safetensors and config.json (refused first because their
# size is not the one state.json records), said to be a FIFO; never time
# out.
# Prints "fifo: N passed, N failed".
set -u

HY_TEST_NAME=fifo
. "$(dirname "$0")/lib/cli.sh"

# fifo_case FIFO ARGS...: hanayo ARGS refuses FIFO within 10 s (a hung run
# ignores the first SIGTERM while it blocks, hence -k).
fifo_case() {
    local fifo=$1
    shift
    timeout -k 2 10 "$HANAYO" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    last="hanayo $*"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        bad "$last: hung on the FIFO $fifo (killed after 10 s)"
        return
    fi
    expect_rc 2
    if [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q '^hanayo: ' "$tmp/err"; then ok; else
        bad "$last: want one 'hanayo: ' line on stderr, got: $(cat "$tmp/err")"
    fi
    if grep -qF "$fifo" "$tmp/err" "$tmp/out"; then ok; else
        bad "$last: the message does not name the FIFO $fifo: $(cat "$tmp/err" "$tmp/out")"
    fi
}
# Where the FIFO is refused for what it is (not, as a checkpoint's files
# are, first for a size that differs from the one state.json records).
said_fifo() {
    if grep -qF "it is a FIFO, not a regular file" "$tmp/err" "$tmp/out"; then ok; else
        bad "$last: the message does not say it is a FIFO: $(cat "$tmp/err" "$tmp/out")"
    fi
}

run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 3
expect_rc 0
small=(--set "data.train=$tmp/t.bin" --set data.val=null --set model.seq_len=16
       --set schedule.micro_batch_size=2 --set schedule.micro_batches=4 --set train.steps=2
       --set checkpoint.every=1)
run train configs/tiny-gpt.json "${small[@]}" --set "checkpoint.dir=$tmp/ck"
expect_rc 0
step=$tmp/ck/step_000002

# A checkpoint with one of its files a FIFO: verify and resume refuse it.
for f in state.json model.safetensors config.json; do
    rm -rf "$tmp/bad"
    cp -r "$tmp/ck" "$tmp/bad"
    rm "$tmp/bad/step_000002/$f"
    mkfifo "$tmp/bad/step_000002/$f"
    fifo_case "$tmp/bad/step_000002/$f" checkpoint verify "$tmp/bad/step_000002"
    [ $f = state.json ] && said_fifo
    fifo_case "$tmp/bad/step_000002/$f" train configs/tiny-gpt.json "${small[@]}" \
        --set "checkpoint.dir=$tmp/ck2" --resume "$tmp/bad/step_000002"
    [ $f = state.json ] && said_fifo
done
# state.json a FIFO in the newest checkpoint: resuming from the directory.
rm -rf "$tmp/bad"
cp -r "$tmp/ck" "$tmp/bad"
rm "$tmp/bad/step_000002/state.json"
mkfifo "$tmp/bad/step_000002/state.json"
fifo_case "$tmp/bad/step_000002/state.json" checkpoint verify "$tmp/bad"
said_fifo
fifo_case "$tmp/bad/step_000002/state.json" train configs/tiny-gpt.json "${small[@]}" \
    --set "checkpoint.dir=$tmp/bad" --resume "$tmp/bad"
said_fifo

mkfifo "$tmp/fifo"
# The config.
fifo_case "$tmp/fifo" check "$tmp/fifo"
said_fifo
# The training shard.
fifo_case "$tmp/fifo" train configs/tiny-gpt.json "${small[@]}" --set "data.train=$tmp/fifo" \
    --set "checkpoint.dir=$tmp/ck3"
said_fifo
fifo_case "$tmp/fifo" eval configs/tiny-gpt.json "${small[@]}" --data "$tmp/fifo"
said_fifo
# The init weights.
fifo_case "$tmp/fifo" eval configs/tiny-gpt.json "${small[@]}" --init "$tmp/fifo"
said_fifo
# A profile's summary.
fifo_case "$tmp/fifo" plan configs/tiny-gpt.json "${small[@]}" --costs "$tmp/fifo"
said_fifo
# Nothing above wrote where it had no business to.
for d in ck2 ck3; do
    if [ -e "$tmp/$d/step_000001" ]; then bad "a refused run saved into $tmp/$d"; else ok; fi
done

hy_finish
