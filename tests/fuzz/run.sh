#!/usr/bin/env bash
# run.sh — the fuzzing run of `make fuzz` (Makefile, "Fuzzing"); not a test
# of `make test` itself (the Makefile runs only tests/*.sh there).
#
#     bash tests/fuzz/run.sh BUILD_DIR SECONDS NAME...
#
# For each NAME (config, shard, safetensors, tokenizer, hfconfig): makes
# the seed corpus BUILD_DIR/seeds/NAME from the project's own inputs, good
# and bad —
#   config       tests/bad/*.json, configs/*.json, gen.py's configs
#   shard        gen.py's token shards (tests/bad/gen.py)
#   safetensors  gen.py's safetensors files, tests/fixtures/*.safetensors
#   tokenizer    tests/fixtures/*tokenizer*.json
#   hfconfig     tests/fixtures/llama-tiny/config.json
#   index        model.safetensors.index.json files naming
#                tests/fixtures/llama-tiny's tensors (fuzz_index.c's files)
# (files over 64 KiB are left out: gen.py's megabyte-long key and deep
# nesting are in the bad corpus already, and inputs that size only slow
# every mutation down) — then runs BUILD_DIR/fuzz_NAME for SECONDS seconds
# from those seeds plus BUILD_DIR/corpus/NAME, where libFuzzer keeps the
# inputs that found new code (kept between runs), and prints
#     fuzz_NAME: N executions in S s, corpus C inputs, no crash
# parsed from libFuzzer's -print_final_stats. A crash, leak, sanitizer
# report, broken harness check or input that takes over 10 s stops that
# harness: its report is printed and the input saved as
# BUILD_DIR/crash-NAME-* (or leak-/timeout-); every harness still runs, and
# the script exits 1 at the end. Such an input belongs in tests/bad/ with
# its expected error (tests/bad/cases.tsv), next to the fix.
set -u

build=$1
seconds=$2
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$here" || exit 1

seeds=$build/seeds
rm -rf "$seeds"
mkdir -p "$seeds/gen" "$seeds/config" "$seeds/shard" "$seeds/safetensors" "$seeds/tokenizer" \
    "$seeds/hfconfig" "$seeds/index"
if ! python3 tests/bad/gen.py "$seeds/gen"; then
    echo "fuzz: tests/bad/gen.py failed; cannot make the seed corpus" >&2
    exit 1
fi
# Regular, readable files only (gen.py also makes a FIFO and an unreadable
# file for the corpus; copying the FIFO would block).
seed() {
    local dest=$1
    shift
    find "$@" -maxdepth 1 -type f -readable -size -65537c -exec cp {} "$seeds/$dest/" \;
}
seed config tests/bad configs "$seeds/gen" -name '*.json'
seed shard "$seeds/gen" -name 'shard*.bin'
seed safetensors "$seeds/gen" tests/fixtures -name '*.safetensors'
seed tokenizer tests/fixtures -name '*tokenizer*.json'
seed hfconfig tests/fixtures/llama-tiny -name config.json
# Indexes as Hugging Face writes them: every tensor of the fixture mapped
# to one of the two files fuzz_index.c puts beside it.
python3 - "$seeds/index" tests/fixtures/llama-tiny/model.safetensors <<'PY' || exit 1
import json, struct, sys
with open(sys.argv[2], "rb") as f:
    names = [k for k in json.loads(f.read(struct.unpack("<Q", f.read(8))[0])) if k != "__metadata__"]
for i, shard in enumerate(["model-00001-of-00001.safetensors", "model.safetensors"]):
    with open(f"{sys.argv[1]}/index{i}.json", "w") as out:
        json.dump({"metadata": {"total_size": 0}, "weight_map": {n: shard for n in names}}, out, indent=2)
PY
rm -rf "$seeds/gen"

total=0
failed=0
for name in "$@"; do
    bin=$build/fuzz_$name
    log=$build/fuzz_$name.log
    mkdir -p "$build/corpus/$name"
    # -timeout: one input over 10 s is a hang. -rss_limit_mb: over 2 GiB
    # is a runaway allocation (the readers bound theirs by the file size).
    "$bin" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
        -rss_limit_mb=2048 -artifact_prefix="$build/crash-$name-" \
        "$build/corpus/$name" "$seeds/$name" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
    corpus=$(find "$build/corpus/$name" -type f | wc -l)
    if [ "$rc" -eq 0 ] && [ -n "$execs" ]; then
        echo "fuzz_$name: $execs executions in ${secs:-$seconds} s, corpus $corpus inputs, no crash"
        total=$((total + execs))
    else
        failed=$((failed + 1))
        echo "fuzz_$name: FAILED (exit $rc) after ${execs:-?} executions; its report ($log):"
        grep -E -A40 '^==[0-9]+==ERROR|runtime error|broken promise|^SUMMARY|deadly signal|Test unit written' \
            "$log" | head -n 80
        echo "fuzz_$name: add the saved input to tests/bad/ with its expected error, and fix the reader"
    fi
done
echo "fuzz: $total executions in total, $failed harness(es) failed"
[ "$failed" -eq 0 ]
