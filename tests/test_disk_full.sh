#!/usr/bin/env bash
# test_disk_full.sh — `hanayo train` when the disk fills up while it writes
# a checkpoint.
#
# A run trains 2 steps and saves step_000002; a second run resumes from it
# for 2 more steps, and its save of step_000004 runs out of room. Checked,
# twice:
#   - with a file-size limit (ulimit -f, SIGXFSZ ignored): the kernel fails
#     the write that would pass it with EFBIG ("File too large"), just
#     where a full disk fails; needs nothing special, so it always runs;
#   - on a real full file system: a tmpfs just big enough for step_000002
#     and a bit, mounted in a private mount namespace (unshare -m, so the
#     mount vanishes with the test whatever happens), giving ENOSPC ("No
#     space left on device"). Needs root (CI runs as root); skipped, saying
#     so, where the mount is refused.
# Each time: exit status 1; one "hanayo: " line on stderr naming the
# checkpoint that was not saved, the file that failed and the system's
# reason; the checkpoint directory holds step_000002 and nothing else (no
# partial step, no temporary); and step_000002 still resumes.
# Then, on a tmpfs already full: taking the lock, profile --out and
# --log-json (see that section below) each fail leaving nothing made and
# no partial line.
#
# Prints "disk-full: N passed, N failed"; exits non-zero on any failure.
set -u

HY_TEST_NAME=disk-full
. "$(dirname "$0")/lib/cli.sh"

run data synth --out "$tmp/t.bin" --tokens 20000 --vocab 512 --seed 3
expect_rc 0
small=(--set "data.train=$tmp/t.bin" --set data.val=null --set model.layers=4
       --set model.d_model=32 --set model.seq_len=16 --set schedule.micro_batch_size=2
       --set schedule.micro_batches=4 --set train.log_every=1 --set checkpoint.every=0)

# The checkpoint to fall back on.
run train configs/tiny-gpt.json "${small[@]}" --set train.steps=2 --set "checkpoint.dir=$tmp/ref"
expect_rc 0
expect_out "checkpoint: $tmp/ref/step_000002"
if [ ! -d "$tmp/ref/step_000002" ]; then
    bad "no checkpoint to start from; stopping here"
    hy_finish
    exit 1
fi
ck_bytes=$(du -sb "$tmp/ref/step_000002" | cut -f1)

# check_full DIR REASON: the resumed run has failed in DIR for REASON.
check_full() {
    local dir=$1 reason=$2
    expect_rc 1
    if [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q '^hanayo: ' "$tmp/err"; then ok; else
        bad "$last: want one 'hanayo: ' line on stderr, got: $(cat "$tmp/err")"
    fi
    expect_err "checkpoint $dir/step_000004 not saved"
    expect_err "\.safetensors"
    expect_err "$reason"
    expect_out 'step 4/4'            # every step ran; only the save failed
    expect_no_out 'checkpoint: '
    local left
    left=$(ls -A "$dir" | tr '\n' ' ')
    if [ "$left" = "step_000002 " ]; then ok; else
        bad "$last: $dir holds '$left', want only step_000002"
    fi
}

# ---- a file-size limit: EFBIG ----------------------------------------------------
cp -r "$tmp/ref" "$tmp/fsize"
# The resumes below train on past the first run's train.steps, another
# learning-rate schedule: --allow-schedule-change.
# ulimit -f counts 1024-byte blocks: half a checkpoint, so some file of
# step_000004 passes it. The limit and the ignored SIGXFSZ hold in the
# subshell only.
(
    ulimit -f $((ck_bytes / 2048))
    trap '' XFSZ
    exec "$HANAYO" train configs/tiny-gpt.json "${small[@]}" --set train.steps=4 \
        --set "checkpoint.dir=$tmp/fsize" --resume "$tmp/fsize/step_000002" --allow-schedule-change
) >"$tmp/out" 2>"$tmp/err"
rc=$?
last="hanayo train --resume (ulimit -f)"
check_full "$tmp/fsize" 'File too large'
run train configs/tiny-gpt.json "${small[@]}" --set train.steps=3 --set checkpoint.dir=null \
    --resume "$tmp/fsize/step_000002" --allow-schedule-change
expect_rc 0
expect_out 'resumed from .* after step 2'

# ---- a full file system: ENOSPC ------------------------------------------------------
# Inside the namespace: mount, copy step_000002 in, resume. What it saw is
# left in $tmp (outside the mount) for the checks below.
cat >"$tmp/enospc.sh" <<'EOF'
set -u
mnt=$tmp/mnt
mkdir -p "$mnt"
if ! mount -t tmpfs -o "size=$size" hy-test-full "$mnt" 2>"$tmp/mount.err"; then
    echo skip >"$tmp/enospc.status"
    exit 0
fi
mkdir "$mnt/ck"
cp -r "$tmp/ref/step_000002" "$mnt/ck/"
"$HANAYO" train configs/tiny-gpt.json "${small[@]}" --set train.steps=4 \
    --set "checkpoint.dir=$mnt/ck" --resume "$mnt/ck/step_000002" --allow-schedule-change \
    >"$tmp/out" 2>"$tmp/err"
echo $? >"$tmp/enospc.status"
ls -A "$mnt/ck" >"$tmp/enospc.left"
"$HANAYO" train configs/tiny-gpt.json "${small[@]}" --set train.steps=3 \
    --set checkpoint.dir=null --resume "$mnt/ck/step_000002" --allow-schedule-change \
    >"$tmp/resume.out" 2>&1
echo $? >"$tmp/resume.status"
EOF
# Room for step_000002 and half of another (tmpfs counts whole pages).
size=$((ck_bytes + ck_bytes / 2 + 65536))
if command -v unshare >/dev/null 2>&1 &&
    tmp=$tmp size=$size HANAYO=$HANAYO unshare -m --propagation private \
        bash -c "small=($(printf '%q ' "${small[@]}")); . '$tmp/enospc.sh'" 2>"$tmp/unshare.err" &&
    [ "$(cat "$tmp/enospc.status" 2>/dev/null)" != skip ]; then
    rc=$(cat "$tmp/enospc.status")
    last="hanayo train --resume (full tmpfs)"
    expect_rc 1
    if [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q '^hanayo: ' "$tmp/err"; then ok; else
        bad "$last: want one 'hanayo: ' line on stderr, got: $(cat "$tmp/err")"
    fi
    expect_err "checkpoint $tmp/mnt/ck/step_000004 not saved"
    expect_err "\.safetensors"
    expect_err 'No space left on device'
    if [ "$(tr '\n' ' ' <"$tmp/enospc.left")" = "step_000002 " ]; then ok; else
        bad "$last: the full checkpoint directory holds '$(tr '\n' ' ' <"$tmp/enospc.left")'"
    fi
    if [ "$(cat "$tmp/resume.status")" = 0 ] && grep -q 'resumed from' "$tmp/resume.out"; then ok; else
        bad "resuming from step_000002 on the full tmpfs: $(tail -n 3 "$tmp/resume.out")"
    fi
else
    echo "disk-full: skipped the full-tmpfs case (cannot mount here: $(cat "$tmp/unshare.err" "$tmp/mount.err" 2>/dev/null | head -n 1))" >&2
fi

# ---- a disk already full: the lock, profile --out, --log-json ----------------------
# A 1 MiB tmpfs filled to the last page by a file (a directory, an empty
# file take no pages of a tmpfs, so names can still be made). Then:
#   - train with a new checkpoint.dir: the lock's name is made, its pid
#     cannot be written; exit 1 naming the lock, and neither the lock nor
#     the directories taking it made are left;
#   - profile --out a new directory two levels deep: exit 1, and neither
#     directory is left;
#   - with one page freed, train --log-json for 100 steps: the log fills
#     the page mid-line; exit 1 saying how many bytes of whole lines it
#     keeps, and the file is exactly those lines, each one JSON.
cat >"$tmp/full.sh" <<'EOF'
set -u
mnt=$tmp/full
mkdir -p "$mnt"
if ! mount -t tmpfs -o size=1m hy-test-full "$mnt" 2>"$tmp/mount.err"; then
    echo skip >"$tmp/full.status"
    exit 0
fi
dd if=/dev/zero of="$mnt/fill" bs=4096 2>/dev/null
"$HANAYO" train configs/tiny-gpt.json "${small[@]}" --set train.steps=1 \
    --set "checkpoint.dir=$mnt/new/ck" >"$tmp/lock.out" 2>"$tmp/lock.err"
echo $? >"$tmp/lock.status"
ls -A "$mnt" >"$tmp/lock.left"
"$HANAYO" profile configs/tiny-gpt.json "${small[@]}" --steps 1 --out "$mnt/prof/one" \
    >"$tmp/prof.out" 2>"$tmp/prof.err"
echo $? >"$tmp/prof.status"
ls -A "$mnt" >"$tmp/prof.left"
truncate -s -4096 "$mnt/fill"
"$HANAYO" train configs/tiny-gpt.json "${small[@]}" --set train.steps=100 \
    --set checkpoint.dir=null --log-json "$mnt/log.jsonl" >"$tmp/log.out" 2>"$tmp/log.err"
echo $? >"$tmp/log.status"
cp "$mnt/log.jsonl" "$tmp/log.jsonl"
echo done >"$tmp/full.status"
EOF
# one_error STATUS_FILE ERR_FILE WHAT: exit 1 and one "hanayo: " line.
one_error() {
    if [ "$(cat "$1")" = 1 ] && [ "$(wc -l <"$2")" -eq 1 ] && grep -q '^hanayo: ' "$2"; then ok; else
        bad "$3: exit $(cat "$1"), stderr: $(cat "$2")"
    fi
}
if command -v unshare >/dev/null 2>&1 &&
    tmp=$tmp HANAYO=$HANAYO unshare -m --propagation private \
        bash -c "small=($(printf '%q ' "${small[@]}")); . '$tmp/full.sh'" 2>"$tmp/unshare.err" &&
    [ "$(cat "$tmp/full.status" 2>/dev/null)" = done ]; then
    one_error "$tmp/lock.status" "$tmp/lock.err" "the lock on a full disk"
    if grep -qF "cannot write $tmp/full/new/ck/.lock: No space left on device" "$tmp/lock.err"; then
        ok; else bad "the lock on a full disk: $(cat "$tmp/lock.err")"; fi
    if [ "$(tr '\n' ' ' <"$tmp/lock.left")" = "fill " ]; then ok; else
        bad "the lock on a full disk left: $(tr '\n' ' ' <"$tmp/lock.left")"
    fi
    one_error "$tmp/prof.status" "$tmp/prof.err" "profile --out on a full disk"
    if grep -qF 'No space left on device' "$tmp/prof.err"; then ok; else
        bad "profile --out on a full disk: $(cat "$tmp/prof.err")"; fi
    if [ "$(tr '\n' ' ' <"$tmp/prof.left")" = "fill " ]; then ok; else
        bad "profile --out on a full disk left: $(tr '\n' ' ' <"$tmp/prof.left")"
    fi
    one_error "$tmp/log.status" "$tmp/log.err" "--log-json on a full disk"
    # The run stops after the step whose line did not fit, as a failed
    # output stops it (saving a checkpoint where it has a checkpoint.dir),
    # and says why; the log keeps whole lines only (below).
    if grep -q "stopped at step [0-9]* because --log-json .* could not be written: No space left on device" \
        "$tmp/log.err"; then ok; else
        bad "--log-json on a full disk: $(cat "$tmp/log.err")"
    fi
    if python3 -c 'import json,sys
text = open(sys.argv[1]).read()
assert text.endswith("\n"), "a partial last line"
steps = [json.loads(l)["step"] for l in text.splitlines()]
assert steps == list(range(1, len(steps) + 1)) and len(steps) > 10, steps' "$tmp/log.jsonl" \
        2>"$tmp/py.err"; then ok; else
        bad "--log-json on a full disk: $(tail -n 1 "$tmp/py.err")"
    fi
else
    echo "disk-full: skipped the full-disk cases of the lock, profile --out and --log-json (cannot mount here: $(cat "$tmp/unshare.err" "$tmp/mount.err" 2>/dev/null | head -n 1))" >&2
fi

hy_finish
