#!/usr/bin/env bash
# test_dataset_cli.sh — training on a dataset of several shards
# (data.train a list or a glob; docs/data.md), from the outside.
#
# Two shards, one uint16 and one uint32, trained as a list, as a glob and
# as one shard holding both one after the other give the same
# checkpoint byte for byte (one stream, read in order); in another order,
# another one. Each pass over the data is announced at the step the
# arithmetic of data.h's wrap rule gives ("data: epoch E begins at step
# N", and {"step": N, "epoch": E} in the log right after that step's
# line). A run resumed from a mid-run checkpoint on the same dataset says
# the epochs still to come and ends with the uninterrupted run's
# checkpoint, byte for byte; resuming on other data (another order, a
# shard missing, a shard rewritten, a glob that matches one more file) is
# refused with exit 2, naming the difference. A uint32 shard with ids
# above 65535 trains under a vocabulary that holds them and is refused
# under one that does not; a token past model.vocab in a later shard
# stops the run when it is reached, naming that shard. Prints
# "dataset_cli: N passed, N failed".
set -u

HY_TEST_NAME=dataset_cli
. "$(dirname "$0")/lib/cli.sh"

run data synth --out "$tmp/a.bin" --tokens 3000 --vocab 512 --seed 3
expect_rc 0
run data synth --out "$tmp/b.bin" --tokens 2000 --vocab 512 --seed 4 --format u32
expect_rc 0
# The same tokens as one uint32 shard: a's, then b's.
python3 - "$tmp/a.bin" "$tmp/b.bin" "$tmp/ab.bin" <<'EOF'
import struct, sys
a = open(sys.argv[1], 'rb').read()[1024:]
b = open(sys.argv[2], 'rb').read()[1024:]
ids = struct.unpack('<%dH' % (len(a) // 2), a) + struct.unpack('<%dI' % (len(b) // 4), b)
hdr = [0] * 256
hdr[:3] = [20240801, 7, len(ids)]
open(sys.argv[3], 'wb').write(struct.pack('<256i', *hdr) + struct.pack('<%dI' % len(ids), *ids))
EOF
mkdir -p "$tmp/g"
cp "$tmp/a.bin" "$tmp/g/shard_000.bin"
cp "$tmp/b.bin" "$tmp/g/shard_001.bin"

# 8 micro-batches of 2 x 16 tokens a step; 5000 tokens hold (5000 - 1) / 32
# = 156 batches a pass, so pass E begins with batch 156 (E - 1), in step
# 156 (E - 1) / 8 + 1: epoch 2 at step 20, epoch 3 at step 40.
small=(configs/tiny-gpt.json --set data.val=null --set model.layers=2 --set model.d_model=32
       --set model.seq_len=16 --set schedule.kind=1f1b --set schedule.micro_batch_size=2
       --set schedule.micro_batches=8 --set backend=cpu --set train.log_every=10
       --set train.steps=45 --set checkpoint.every=5)
list="data.train=[\"$tmp/a.bin\",\"$tmp/b.bin\"]"

# ---- a list: the epochs, on the console and in the log ----------------------------
run train "${small[@]}" --set "$list" --set "checkpoint.dir=$tmp/list" --log-json "$tmp/list.jsonl"
expect_rc 0
expect_out '^data: epoch 2 begins at step 20$'
expect_out '^data: epoch 3 begins at step 40$'
if [ "$(grep -c '^data: epoch' "$tmp/out")" -eq 2 ]; then ok; else
    bad "want 2 epoch lines: $(grep '^data' "$tmp/out")"; fi
# The notice follows its step's progress line.
if grep -A1 '^step 20/45' "$tmp/out" | tail -1 | grep -q '^data: epoch 2'; then ok; else
    bad "the epoch 2 line does not follow step 20's: $(grep -A1 '^step 20/45' "$tmp/out")"; fi
if python3 - "$tmp/list.jsonl" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
epochs = [(i, l) for i, l in enumerate(lines) if 'epoch' in l]
assert [(l['step'], l['epoch']) for _, l in epochs] == [(20, 2), (40, 3)], epochs
for i, l in epochs:   # right after its step's line
    assert lines[i - 1]['step'] == l['step'] and 'loss' in lines[i - 1], lines[i - 1]
    assert set(l) == {'step', 'epoch'}, l
assert len([l for l in lines if 'loss' in l]) == 45
EOF
then ok; else bad "the log's epoch lines are wrong: $(grep epoch "$tmp/list.jsonl")"; fi
run plot "$tmp/list.jsonl" --out "$tmp/list.svg"   # the epoch lines draw nothing, break nothing
expect_rc 0
# The checkpoint names the dataset, shard by shard.
if python3 - "$tmp/list/step_000045/state.json" "$tmp/a.bin" "$tmp/b.bin" <<'EOF'
import json, os, sys
d = json.load(open(sys.argv[1]))['data']
shards = d['shards']
assert [s['path'] for s in shards] == sys.argv[2:4], shards
assert [s['bytes'] for s in shards] == [os.path.getsize(p) for p in sys.argv[2:4]], shards
assert all(len(s['head_crc32c']) == 8 for s in shards) and 'shard' not in d, d
EOF
then ok; else bad "state.json's data: $(head -c 600 "$tmp/list/step_000045/state.json")"; fi

# ---- one stream: a glob and one joined shard read the same tokens ------------------
run train "${small[@]}" --set "data.train=$tmp/g/shard_*.bin" --set "checkpoint.dir=$tmp/glob"
expect_rc 0
expect_out '^data: epoch 3 begins at step 40$'
expect_same "$tmp/list/step_000045/model.safetensors" "$tmp/glob/step_000045/model.safetensors"
expect_same "$tmp/list/step_000045/optimizer.safetensors" \
    "$tmp/glob/step_000045/optimizer.safetensors"
run train "${small[@]}" --set "data.train=$tmp/ab.bin" --set "checkpoint.dir=$tmp/joined"
expect_rc 0
expect_out '^data: epoch 2 begins at step 20$'
expect_same "$tmp/list/step_000045/model.safetensors" "$tmp/joined/step_000045/model.safetensors"
run train "${small[@]}" --set "data.train=[\"$tmp/b.bin\",\"$tmp/a.bin\"]" \
    --set "checkpoint.dir=$tmp/reversed"
expect_rc 0
expect_differ "$tmp/list/step_000045/model.safetensors" \
    "$tmp/reversed/step_000045/model.safetensors"

# ---- resume on the same dataset: the same checkpoint -----------------------------
mkdir -p "$tmp/r"
cp -r "$tmp/list/step_000015" "$tmp/r/"
run train "${small[@]}" --set "$list" --set "checkpoint.dir=$tmp/r" --resume "$tmp/r"
expect_rc 0
expect_out "^resumed from $tmp/r/step_000015 after step 15$"
expect_out '^data: epoch 2 begins at step 20$'
expect_out '^data: epoch 3 begins at step 40$'
expect_same "$tmp/list/step_000045/model.safetensors" "$tmp/r/step_000045/model.safetensors"
expect_same "$tmp/list/step_000045/optimizer.safetensors" "$tmp/r/step_000045/optimizer.safetensors"
# From past the first wrap, through the glob: only the epoch still to come.
mkdir -p "$tmp/r2"
cp -r "$tmp/list/step_000025" "$tmp/r2/"
run train "${small[@]}" --set "data.train=$tmp/g/shard_*.bin" --set "checkpoint.dir=$tmp/r2" \
    --resume "$tmp/r2"
expect_rc 0
expect_no_out 'epoch 2'
expect_out '^data: epoch 3 begins at step 40$'
expect_same "$tmp/list/step_000045/model.safetensors" "$tmp/r2/step_000045/model.safetensors"

# ---- resume on other data: refused ---------------------------------------------------
mkdir -p "$tmp/r3"
cp -r "$tmp/list/step_000025" "$tmp/r3/"
other=("${small[@]}" --set "checkpoint.dir=$tmp/r3" --resume "$tmp/r3")
expect_input_error train "${other[@]}" --set "data.train=[\"$tmp/b.bin\",\"$tmp/a.bin\"]"
expect_err "step_000025 was saved reading $tmp/a.bin as shard 1 of 2 (7024 bytes, first 64 KiB"
expect_err "data.train has $tmp/b.bin there (9024 bytes"
expect_err 'count into other tokens'
expect_input_error train "${other[@]}" --set "data.train=$tmp/a.bin"
expect_err "was saved reading 2 shards (the first $tmp/a.bin), data.train reads 1 now"
cp "$tmp/b.bin" "$tmp/g/shard_002.bin"
expect_input_error train "${other[@]}" --set "data.train=$tmp/g/shard_*.bin"
expect_err 'was saved reading 2 shards'
expect_err 'reads 3 now'
rm "$tmp/g/shard_002.bin"
cp "$tmp/b.bin" "$tmp/b.orig"
run data synth --out "$tmp/b.bin" --tokens 2000 --vocab 512 --seed 5 --format u32
expect_rc 0
expect_input_error train "${other[@]}" --set "$list"
expect_err "was saved reading $tmp/b.bin as shard 2 of 2 (9024 bytes"
mv "$tmp/b.orig" "$tmp/b.bin"
# Back to the same data, the same resume goes on.
run train "${other[@]}" --set "$list"
expect_rc 0
expect_same "$tmp/list/step_000045/model.safetensors" "$tmp/r3/step_000045/model.safetensors"

# ---- uint32 ids past 65535 -----------------------------------------------------------
run data synth --out "$tmp/big.bin" --tokens 4000 --vocab 70000
expect_rc 0
expect_out '(17024 bytes, u32), vocab 70000'
run train "${small[@]}" --set "data.train=$tmp/big.bin" --set model.vocab=70000 \
    --set train.steps=3 --set checkpoint.dir=null --set checkpoint.every=0
expect_rc 0
expect_out '^step 3/3  loss [0-9]'
expect_input_error train "${small[@]}" --set "data.train=$tmp/big.bin" --set model.vocab=65536 \
    --set checkpoint.dir=null --set checkpoint.every=0
expect_err "$tmp/big.bin: token [0-9]* at index [0-9]* is not below the vocabulary size model.vocab = 65536"

# ---- a bad token in a later shard stops the run when it is reached -------------------
run data synth --out "$tmp/wide.bin" --tokens 2000 --vocab 1000
expect_rc 0
run train "${small[@]}" --set "data.train=[\"$tmp/a.bin\",\"$tmp/wide.bin\"]" \
    --set checkpoint.dir=null --set checkpoint.every=0
expect_rc 2
expect_out '^step 10/45'
expect_err "^hanayo: $tmp/wide.bin: token [0-9]* at index [0-9]* is not below the vocabulary size model.vocab = 512"

hy_finish
