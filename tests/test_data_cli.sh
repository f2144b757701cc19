#!/usr/bin/env bash
# test_data_cli.sh — `hanayo data synth` and `hanayo data info` from the
# outside (DESIGN §7 "The command line").
#
# Runs the built binary ($HANAYO, default build/hanayo): synth writes shards
# whose bytes python3 re-reads independently (llm.c's header, little-endian
# uint16 tokens; magic 20240801, version 7 and uint32 tokens for --format
# u32), the same seed gives the same bytes, ids above 65535 when the
# vocabulary needs them, info reports what was written and its format
# (text and --json), and every bad flag or file exits 2 with one
# "hanayo: " line on stderr and nothing on stdout; an I/O failure exits 1
# and leaves no file. Prints "data-cli: N passed, N failed"; exits non-zero
# on any failure.
set -u

HY_TEST_NAME=data-cli
. "$(dirname "$0")/lib/cli.sh"
# shard_check FILE COUNT VOCAB [u16|u32 [MIN_MAX]]: re-reads the file as
# llm.c does, with nothing from hanayo: header (magic, version, count,
# zeros), exact size, every token < VOCAB (and the largest at least
# MIN_MAX). Prints "ok" or what is wrong.
shard_check() {
    python3 - "$@" <<'EOF'
import struct, sys
path, count, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fmt = sys.argv[4] if len(sys.argv) > 4 else 'u16'
least = int(sys.argv[5]) if len(sys.argv) > 5 else 0
magic, version, width, code = {'u16': (20240520, 1, 2, 'H'), 'u32': (20240801, 7, 4, 'I')}[fmt]
data = open(path, 'rb').read()
hdr = struct.unpack('<256i', data[:1024])
toks = struct.unpack('<%d%s' % ((len(data) - 1024) // width, code), data[1024:])
problems = []
if hdr[0] != magic: problems.append('magic %d' % hdr[0])
if hdr[1] != version: problems.append('version %d' % hdr[1])
if hdr[2] != count: problems.append('count %d' % hdr[2])
if any(hdr[3:]): problems.append('header not zero after [2]')
if len(data) != 1024 + width * count: problems.append('size %d' % len(data))
if toks and max(toks) >= vocab: problems.append('token %d >= %d' % (max(toks), vocab))
if toks and max(toks) < least: problems.append('largest token %d < %d' % (max(toks), least))
print('; '.join(problems) or 'ok')
EOF
}
expect_shard() {
    local got
    got=$(shard_check "$@")
    if [ "$got" = ok ]; then ok; else bad "shard $1: $got"; fi
}

# ---- synth ----------------------------------------------------------------
run data synth --out "$tmp/train.bin" --tokens 100000 --vocab 512 --seed 7 \
    --val-out "$tmp/val.bin" --val-tokens 20000
expect_rc 0
expect_out "wrote $tmp/train.bin: 100000 tokens (201024 bytes, u16), vocab 512, seed 7"
expect_out "wrote $tmp/val.bin: 20000 tokens"
expect_out 'entropy rate'
expect_shard "$tmp/train.bin" 100000 512
expect_shard "$tmp/val.bin" 20000 512
expect_differ "$tmp/train.bin" "$tmp/val.bin"

# Same seed, same bytes; another seed, other bytes; flags in any order and
# with inline values.
run data synth --vocab=512 --seed=7 --tokens=100000 --out="$tmp/again.bin"
expect_rc 0
expect_same "$tmp/train.bin" "$tmp/again.bin"
run data synth --out "$tmp/seed8.bin" --tokens 100000 --vocab 512 --seed 8
expect_rc 0
expect_differ "$tmp/train.bin" "$tmp/seed8.bin"
# The default --val-tokens is a tenth; the default seed is 1.
run data synth --out "$tmp/d.bin" --tokens 5000 --vocab 100 --val-out "$tmp/dv.bin"
expect_rc 0
expect_shard "$tmp/dv.bin" 500 100
expect_out 'seed 1,'
# Overwriting an existing shard replaces it whole.
run data synth --out "$tmp/d.bin" --tokens 3 --vocab 2
expect_rc 0
expect_shard "$tmp/d.bin" 3 2
if ls "$tmp" | grep -q '\.tmp\.'; then bad "temporary files left: $(ls "$tmp")"; else ok; fi

# The uint32 format: asked for, or the default past 65536 ids; the same
# ids as uint16 where both hold them; ids above 65535 for a large vocab.
run data synth --out "$tmp/t32.bin" --tokens 100000 --vocab 512 --seed 7 --format u32
expect_rc 0
expect_out "wrote $tmp/t32.bin: 100000 tokens (401024 bytes, u32), vocab 512, seed 7"
expect_shard "$tmp/t32.bin" 100000 512 u32
same=$(python3 -c 'import struct,sys
a = open(sys.argv[1], "rb").read()[1024:]; b = open(sys.argv[2], "rb").read()[1024:]
print(struct.unpack("<%dH" % (len(a) // 2), a) == struct.unpack("<%dI" % (len(b) // 4), b))' \
    "$tmp/train.bin" "$tmp/t32.bin")
[ "$same" = True ] && ok || bad "u16 and u32 shards of one seed hold other ids"
run data synth --out "$tmp/llama.bin" --tokens 50000 --vocab 128256 --val-out "$tmp/llama_val.bin"
expect_rc 0
expect_out "wrote $tmp/llama.bin: 50000 tokens (201024 bytes, u32), vocab 128256"
expect_out "wrote $tmp/llama_val.bin: 5000 tokens (21024 bytes, u32)"
expect_shard "$tmp/llama.bin" 50000 128256 u32 100000
run data synth --out "$tmp/u16.bin" --tokens 1000 --vocab 65536 --format u16
expect_rc 0
expect_shard "$tmp/u16.bin" 1000 65536 u16

# ---- info -------------------------------------------------------------------
run data info "$tmp/train.bin"
expect_rc 0
expect_out "^shard  *$tmp/train.bin$"
expect_out '^format  *u16: llm.c magic 20240520, version 1, uint16 ids$'
expect_out '^tokens  *100000$'
expect_out '^file size  *201024 bytes$'
expect_out '^vocab seen  *512 (largest id 511)'
expect_out 'bits/token unigram, [0-9.]* next|prev'
run data info "$tmp/train.bin" --json --vocab 512
expect_rc 0
expect_json "p['tokens']" 100000
expect_json "p['bytes']" 201024
expect_json "p['vocab_seen']" 512
expect_json "p['vocab']" 512
expect_json "p['bigram_bits'] < 0.5 * 9 < p['unigram_bits']" True
run data info --json "$tmp/d.bin"
expect_rc 0
expect_json "p['vocab']" None
expect_json "p['tokens']" 3
expect_json "p['format']" u16
run data info "$tmp/llama.bin" --vocab 128256
expect_rc 0
expect_out '^format  *u32: llm.c magic 20240801, version 7, uint32 ids$'
expect_out '^tokens  *50000$'
expect_out '^file size  *201024 bytes$'
expect_out '^vocab seen  *12[0-9]* (largest id 12[0-9]*); all below the vocab given'
expect_out 'bits/token unigram (uniform over 128256 ids: 16.969)'
run data info "$tmp/llama.bin" --json
expect_rc 0
expect_json "p['format']" u32
expect_json "p['bytes']" 201024
expect_json "p['bigram_bits']" None
expect_json "100000 < p['max_token'] < 128256" True
expect_input_error data info "$tmp/llama.bin" --vocab 65536
expect_err "$tmp/llama.bin: token [0-9]* at index [0-9]* is not below the vocabulary size model.vocab = 65536"

# ---- bad input: exit 2, one line, nothing on stdout ---------------------------
expect_input_error data
expect_err 'needs a subcommand'
expect_input_error data synt --out "$tmp/x.bin"
expect_err "did you mean 'synth'"
expect_input_error data frobnicate
expect_input_error data synth
expect_err 'needs --out'
expect_input_error data synth --out "$tmp/x.bin" --vocab 512
expect_err 'needs --tokens'
expect_input_error data synth --out "$tmp/x.bin" --tokens 10
expect_err 'needs --vocab'
expect_input_error data synth --out "$tmp/x.bin" --tokens 0 --vocab 512
expect_err -- '--tokens'
expect_input_error data synth --out "$tmp/x.bin" --tokens 1e3 --vocab 512
expect_err 'not a whole number'
expect_input_error data synth --out "$tmp/x.bin" --tokens 2147483648 --vocab 512
expect_err 'out of range'
expect_input_error data synth --out "$tmp/x.bin" --tokens 10 --vocab 1
expect_input_error data synth --out "$tmp/x.bin" --tokens 10 --vocab 65537 --format u16
expect_err 'does not fit --format u16'
expect_input_error data synth --out "$tmp/x.bin" --tokens 10 --vocab 2147483648
expect_err '2147483647'
expect_input_error data synth --out "$tmp/x.bin" --tokens 10 --vocab 512 --format u8
expect_err "'u8' is not u16 or u32"
expect_input_error data synth --out "$tmp/x.bin" --tokens 10 --vocab 512 --seed -1
expect_input_error data synth --outt "$tmp/x.bin" --tokens 10 --vocab 512
expect_err 'did you mean --out'
expect_input_error data synth "$tmp/x.bin" --tokens 10 --vocab 512
expect_err 'give it as --out'
expect_input_error data synth --out --tokens 10 --vocab 512
expect_err 'needs a value'
expect_input_error data synth --out "$tmp/x.bin" --tokens 10 --vocab 512 --val-tokens 5
expect_err -- '--val-out'
expect_input_error data synth --out "$tmp/x.bin" --tokens 10 --vocab 512 --val-out "$tmp/x.bin"
expect_err 'two files'
expect_input_error data synth --out "$tmp/no-dir/x.bin" --tokens 10 --vocab 512
expect_err "$tmp/no-dir/x.bin"
expect_err 'does the directory exist'
if [ -e "$tmp/no-dir" ]; then bad "created $tmp/no-dir"; else ok; fi
mkdir "$tmp/adir"
expect_input_error data synth --out "$tmp/adir" --tokens 10 --vocab 512
expect_err 'is a directory'
if [ -e "$tmp/x.bin" ]; then bad "an input error wrote $tmp/x.bin"; else ok; fi

expect_input_error data info
expect_err 'needs a shard'
expect_input_error data info "$tmp/train.bin" "$tmp/val.bin"
expect_input_error data info "$tmp/train.bin" --json=yes
expect_err 'takes no value'
expect_input_error data info "$tmp/train.bin" --vocab 0
expect_input_error data info "$tmp/train.bin" --vocabb 512
expect_err 'did you mean --vocab'
expect_input_error data info "$tmp/train.bin" --vocab 500
expect_err "$tmp/train.bin"
expect_err 'model.vocab = 500'
expect_input_error data info "$tmp/no-such.bin"
expect_err "$tmp/no-such.bin"
expect_input_error data info "$tmp/adir"
expect_err 'is a directory'
head -c 2000 /dev/zero >"$tmp/zeros.bin"
expect_input_error data info "$tmp/zeros.bin"
expect_err 'not an llm.c token shard'
head -c 1500 "$tmp/train.bin" >"$tmp/cut.bin"
expect_input_error data info "$tmp/cut.bin"
expect_err '201024 bytes'
expect_err '1500 bytes'

# ---- I/O failure: exit 1, no file -------------------------------------------------
# A file-size limit of 8 KiB makes the write fail part way (EFBIG; SIGXFSZ
# ignored so the process sees the error instead of being killed).
( trap '' XFSZ; ulimit -f 8; exec "$HANAYO" data synth --out "$tmp/big.bin" \
    --tokens 100000 --vocab 512 ) >"$tmp/out" 2>"$tmp/err"
rc=$?
last="data synth past ulimit -f"
expect_rc 1
expect_err "$tmp/big.bin"
if [ -e "$tmp/big.bin" ] || ls "$tmp" | grep -q '\.tmp\.'; then
    bad "$last left a file: $(ls "$tmp")"
else ok; fi

# ---- help -------------------------------------------------------------------------
for h in "data --help" "data -h" "help data" "data synth --help" "data info --help"; do
    # shellcheck disable=SC2086
    run $h
    expect_rc 0
    expect_out 'hanayo data synth --out FILE'
done
run help
expect_out 'data    synth'

hy_finish
