#!/usr/bin/env bash
# test_bad_inputs.sh — the bad-input corpus of tests/bad/ against the binary.
#
# tests/bad/cases.tsv lists one malformed input per line: a name, the hanayo
# arguments, the exit status and a substring of the one error line. The
# configs are committed as tests/bad/*.json; the binary inputs (token
# shards, safetensors) and a few odd configs are written by tests/bad/gen.py
# into a scratch copy of tests/bad/ ({BAD}), deterministically, each run.
#
# For every case, run from {BAD} (so tiny.json finds shard_ok.bin):
#   - the exit status is the expected one (never >= 128: no crash), within
#     $BAD_TIMEOUT seconds (no hang);
#   - stderr is exactly one line, "hanayo: ...", holding the substring, and
#     no sanitizer report ("AddressSanitizer", "LeakSanitizer", "runtime
#     error") — make test runs this script under ASan+UBSan as well;
#   - stdout is empty (train checks its data, weights and --log-json file
#     before it prints anything);
#   - {TMP}, a directory only this case may write into (its --svg, --log-json,
#     data synth --out and checkpoint.dir all point there), is still empty:
#     no output file, partial or temporary, is left behind.
# A few good inputs (a shard, weights, two checkpoints) are checked to be
# accepted, so the corpus cannot pass by every file being broken in the
# same uninteresting way.
#
# Cases named unreadable_*: when running as root, file modes do not stop
# reads, so they run as uid 65534 through setpriv (skipped without it).
#
# Prints "bad-inputs: N passed, N failed"; exits non-zero on any failure.
set -u

HANAYO=${HANAYO:-build/hanayo}
BAD_TIMEOUT=${BAD_TIMEOUT:-60}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pass=0
fail=0
skipped=0

if [ ! -x "$HANAYO" ]; then
    echo "bad-inputs: $HANAYO is not an executable; build it or set HANAYO" >&2
    echo "bad-inputs: 0 passed, 1 failed"
    exit 1
fi
HANAYO=$(cd "$(dirname "$HANAYO")" && pwd)/$(basename "$HANAYO")

work=$(mktemp -d "${TMPDIR:-/tmp}/hy_test_bad.XXXXXX")
trap 'chmod -R u+rwx "$work" 2>/dev/null; rm -rf "$work"' EXIT
bad_dir=$work/bad
mkdir -p "$bad_dir" "$work/t"
cp "$HERE"/bad/*.json "$bad_dir"/
if ! python3 "$HERE/bad/gen.py" "$bad_dir"; then
    echo "bad-inputs: tests/bad/gen.py failed" >&2
    echo "bad-inputs: 0 passed, 1 failed"
    exit 1
fi
# Traversable by uid 65534 for the unreadable_* cases.
chmod 755 "$work" "$bad_dir" "$work/t"

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

as_nobody=()
if [ "$(id -u)" -eq 0 ]; then
    if command -v setpriv >/dev/null 2>&1; then
        as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    else
        as_nobody=(SKIP)
    fi
fi

out=$work/out
err=$work/err

# ---- the good inputs are good ------------------------------------------------
(cd "$bad_dir" && "$HANAYO" data info shard_ok.bin --vocab 16 >"$out" 2>"$err")
if [ $? -eq 0 ]; then ok; else bad "control: data info shard_ok.bin: $(head -c 300 "$err")"; fi
(cd "$bad_dir" && "$HANAYO" data info shard32_ok.bin --vocab 16 >"$out" 2>"$err")
if [ $? -eq 0 ] && grep -q '^format  *u32' "$out"; then ok; else
    bad "control: data info shard32_ok.bin: $(head -c 300 "$err")"
fi
# Both formats in one list train, as does a pattern matching both.
for data in '["shard_ok.bin","shard32_ok.bin"]' 'shard*_ok.bin'; do
    (cd "$bad_dir" && "$HANAYO" train tiny.json --set "data.train=$data" --set train.steps=30 \
        >"$out" 2>"$err")
    if [ $? -eq 0 ] && grep -q '^step 30/30' "$out"; then ok; else
        bad "control: train tiny.json --set data.train=$data: $(head -c 300 "$err")"
    fi
done
(cd "$bad_dir" && "$HANAYO" eval tiny.json --init st_ok.safetensors >"$out" 2>"$err")
if [ $? -eq 0 ] && grep -q '"loss"' "$out"; then ok; else
    bad "control: eval tiny.json --init st_ok.safetensors: $(head -c 300 "$err")"
fi
# The checkpoints gen.py writes resume when nothing in them is out of bounds.
for ck in ck_ok ck_v1_ok; do
    (cd "$bad_dir" && "$HANAYO" train tiny.json --resume "$ck" --set train.steps=2 >"$out" 2>"$err")
    if [ $? -eq 0 ] && grep -q "resumed from $ck after step 1" "$out"; then ok; else
        bad "control: train tiny.json --resume $ck: $(head -c 300 "$err")"
    fi
done

# ---- the corpus ----------------------------------------------------------------
n_cases=0
while IFS= read -r row; do
    case $row in ''|'#'*) continue ;; esac
    # Split on single tabs by hand: read with IFS=tab would merge the empty
    # argument field of "no command given" with its neighbours.
    name=${row%%$'\t'*}; rest=${row#*$'\t'}
    cmd=${rest%%$'\t'*}; rest=${rest#*$'\t'}
    want=${rest%%$'\t'*}; rest=${rest#*$'\t'}
    sub=${rest%%$'\t'*}
    n_cases=$((n_cases + 1))
    tmpc=$work/t/$name
    mkdir -p "$tmpc"
    chmod 777 "$tmpc"
    line=${cmd//\{BAD\}/$bad_dir}
    line=${line//\{TMP\}/$tmpc}
    read -r -a args <<<"$line"
    prefix=()
    case $name in
        unreadable_*)
            if [ "${as_nobody[0]:-}" = SKIP ]; then
                skipped=$((skipped + 1))
                echo "skip: $name (running as root without setpriv)" >&2
                continue
            fi
            prefix=("${as_nobody[@]}")
            ;;
    esac
    (cd "$bad_dir" && timeout "$BAD_TIMEOUT" "${prefix[@]}" "$HANAYO" "${args[@]}" \
        >"$out" 2>"$err" </dev/null)
    rc=$?
    what="$name (hanayo $cmd)"
    errtext=$(head -c 600 "$err")
    if [ "$rc" -eq 124 ]; then
        bad "$what: hung (killed after $BAD_TIMEOUT s)"
        continue
    fi
    if [ "$rc" -ge 128 ]; then
        bad "$what: crashed (exit $rc): $errtext"
        continue
    fi
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error' "$err"; then
        bad "$what: sanitizer report: $errtext"
        continue
    fi
    case_ok=1
    if [ "$rc" -ne "$want" ]; then
        bad "$what: exit $rc, want $want; stderr: $errtext"
        case_ok=0
    fi
    if [ "$(wc -l <"$err")" -ne 1 ] || ! grep -q '^hanayo: ' "$err"; then
        bad "$what: want one 'hanayo: ' line on stderr, got: $errtext"
        case_ok=0
    elif ! grep -qF -e "$sub" "$err"; then
        bad "$what: stderr lacks '$sub': $errtext"
        case_ok=0
    fi
    if [ -s "$out" ]; then
        bad "$what: printed to stdout on error: $(head -c 300 "$out")"
        case_ok=0
    fi
    left=$(cd "$tmpc" && find . -mindepth 1 | head -n 5 | tr '\n' ' ')
    if [ -n "$left" ]; then
        bad "$what: left files behind in {TMP}: $left"
        case_ok=0
    fi
    [ "$case_ok" -eq 1 ] && ok
done <"$HERE/bad/cases.tsv"

if [ "$n_cases" -lt 60 ]; then
    bad "tests/bad/cases.tsv has $n_cases cases; the corpus must hold at least 60"
fi
[ "$skipped" -gt 0 ] && echo "bad-inputs: $skipped case(s) skipped" >&2
echo "bad-inputs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
