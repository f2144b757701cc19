# tests/lib/cli.sh — the shell harness the command-line tests share.
#
# Sourced (not run: the Makefile runs tests/*.sh only) as
#     HY_TEST_NAME=cli . "$(dirname "$0")/lib/cli.sh"
# It sets HANAYO (default build/hanayo), pass/fail counters and a scratch
# directory $tmp removed on exit, and gives run, ok/bad and the expect_*
# checks. The test ends with hy_finish, which prints
# "NAME: N passed, N failed" and returns non-zero on any failure.

HANAYO=${HANAYO:-build/hanayo}
pass=0
fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hy_test_$HY_TEST_NAME.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if [ ! -x "$HANAYO" ]; then
    echo "$HY_TEST_NAME: $HANAYO is not an executable; build it or set HANAYO" >&2
    echo "$HY_TEST_NAME: 0 passed, 1 failed"
    exit 1
fi

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

# run ARGS...: runs hanayo; leaves $rc, $tmp/out, $tmp/err.
run() {
    "$HANAYO" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    last="hanayo $*"
}
expect_rc() {
    if [ "$rc" -eq "$1" ]; then ok; else
        bad "$last: exit $rc, want $1; stderr: $(head -c 400 "$tmp/err")"
    fi
}
expect_out() {
    if grep -q -e "$1" "$tmp/out"; then ok; else
        bad "$last: stdout lacks '$1': $(head -c 400 "$tmp/out")"
    fi
}
expect_no_out() {
    if grep -q -e "$1" "$tmp/out"; then bad "$last: stdout has '$1'"; else ok; fi
}
expect_err() {
    if grep -q -e "$1" "$tmp/err"; then ok; else
        bad "$last: stderr lacks '$1': $(head -c 400 "$tmp/err")"
    fi
}
# An error with exit status $1: one line "hanayo: ..." on stderr, stdout empty.
expect_error() {
    local want=$1
    shift
    run "$@"
    expect_rc "$want"
    if [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q '^hanayo: ' "$tmp/err"; then ok; else
        bad "$last: want one 'hanayo: ' line on stderr, got: $(cat "$tmp/err")"
    fi
    if [ -s "$tmp/out" ]; then bad "$last: printed to stdout on error"; else ok; fi
}
expect_input_error() { expect_error 2 "$@"; }
expect_same() {
    if cmp -s "$1" "$2"; then ok; else bad "$1 and $2 differ"; fi
}
expect_differ() {
    if cmp -s "$1" "$2"; then bad "$1 and $2 are identical"; else ok; fi
}
# json_get EXPR: a Python expression over the JSON on stdout as p.
json_get() {
    python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
        "$tmp/out" "$1" 2>/dev/null
}
expect_json() {
    local got
    got=$(json_get "$1")
    if [ "$got" = "$2" ]; then ok; else bad "$last: $1 is '$got', want '$2'"; fi
}

hy_finish() {
    echo "$HY_TEST_NAME: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
