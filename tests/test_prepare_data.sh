#!/usr/bin/env bash
# test_prepare_data.sh — text to shards to a trained tiny GPT to samples: the
# loop docs/data.md walks through and README shows (tools/prepare_data.py,
# then `hanayo data info`, `hanayo train` and `hanayo sample` on what it wrote).
#
# Trains its own small byte-level BPE tokenizer on a corpus it writes (no
# download), prepares shards from text and JSONL, reads them back with
# nothing from the tool (header, format, count) and decodes the ids to the
# documents it wrote, in order, each after the end-of-text token; checks the
# llm.c split (first shard val), a corpus smaller than one shard (1% of its
# documents, at least one, to val, said on stderr), --val-fraction (exact:
# 0.57 of 100 documents is 57), a uint32 vocabulary, the
# errors (exit 2: missing file, bad JSONL line as FILE:LINE, vocabulary too
# large for u16, a directory holding shards), that no temporary file is
# left and no progress bar is drawn off a terminal; then trains
# configs/tiny-gpt.json on the shards and checks its loss falls; samples
# from it with `hanayo sample --prompt TEXT --tokenizer` the tokenizer the
# test trained (the text hanayo prints is what the Python tokenizer decodes
# its ids to; greedy and a seeded draw repeat); and runs README's loop
# ("Your text, end to end") as written, only its sizes made small.
# Needs the Python package tokenizers (tools/deps.sh data, which `make test`
# runs); skips, saying so, only where it cannot be had.
# Prints "prepare-data: N passed, N failed".
set -u

HY_TEST_NAME=prepare-data
. "$(dirname "$0")/lib/cli.sh"

py=$(bash tools/deps.sh data-python 2>/dev/null || { bash tools/deps.sh data >&2 && bash tools/deps.sh data-python; })
if [ -z "$py" ]; then
    echo "SKIP: the Python package tokenizers cannot be installed here (bash tools/deps.sh data)" >&2
    hy_finish
    exit
fi

# prep ARGS...: runs the tool; leaves $rc, $tmp/out, $tmp/err.
prep() {
    "$py" tools/prepare_data.py "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    last="prepare_data.py $*"
}
expect_prep_error() {
    local want=$1
    shift
    prep "$@"
    expect_rc 2
    expect_err "$want"
}

# ---- a corpus and a tokenizer trained on it ----------------------------------
# 2400 short documents from a small grammar (seeded): corpus.jsonl, and the
# same documents as one text file each under docs/.
"$py" - "$tmp" <<'EOF'
import json, os, random, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
tmp = sys.argv[1]
rng = random.Random(5)
subj = ['the cat', 'a dog', 'the old man', 'my sister', 'the small bird', 'a teacher']
verb = ['sees', 'likes', 'follows', 'finds', 'draws', 'feeds']
obj = ['the river', 'a red ball', 'the garden', 'two apples', 'the moon', 'a long road']
end = ['.', ' today.', ' at night.', ' again!', ' slowly.']
docs = []
for i in range(2400):
    n = rng.randint(1, 4)
    docs.append(' '.join(rng.choice(subj).capitalize() + ' ' + rng.choice(verb) + ' ' +
                         rng.choice(obj) + rng.choice(end) for _ in range(n)) +
                ('\nÜber café — done.' if i % 97 == 0 else ''))
os.makedirs(tmp + '/docs')
with open(tmp + '/corpus.jsonl', 'w') as f:
    for d in docs:
        f.write(json.dumps({'id': len(docs), 'text': d}) + '\n')
for i, d in enumerate(docs):
    with open(tmp + '/docs/%04d.txt' % i, 'w') as f:
        f.write(d)
json.dump(docs, open(tmp + '/docs.json', 'w'))
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train([tmp + '/corpus.jsonl'], trainers.BpeTrainer(
    vocab_size=400, special_tokens=['<|endoftext|>'],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
tok.save(tmp + '/tokenizer.json')
# A word-level vocabulary past 65536 ids, for the uint32 format.
vocab = {'<|endoftext|>': 0, '[UNK]': 1}
vocab.update({'w%d' % i: i + 2 for i in range(70000)})
big = Tokenizer(models.WordLevel(vocab, unk_token='[UNK]'))
big.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
big.save(tmp + '/big.json')
with open(tmp + '/big.txt', 'w') as f:
    f.write('w1 w69999 w65536 w7\n')
EOF
vocab=$("$py" -c 'import sys; from tokenizers import Tokenizer; print(Tokenizer.from_file(sys.argv[1]).get_vocab_size())' "$tmp/tokenizer.json")
eot=$("$py" -c 'import sys; from tokenizers import Tokenizer; print(Tokenizer.from_file(sys.argv[1]).token_to_id("<|endoftext|>"))' "$tmp/tokenizer.json")
if [ "$vocab" -gt 256 ] && [ "$vocab" -le 400 ]; then ok; else bad "tokenizer vocabulary $vocab"; fi

# check_shards DIR NAME TOKENIZER [K]: reads every NAME_*.bin in DIR as
# llm.c does (header, exact size), concatenates val then train, splits the
# ids at the end-of-text token and decodes each document; prints "ok" when
# they are docs.json's documents in order (val first), else what differs.
# With K (--val-fraction 1/K): the val shard holds every K-th document
# (the K-th, the 2K-th, ...) and train the others, each in order.
check_shards() {
    "$py" - "$tmp/docs.json" "$eot" "$@" <<'EOF'
import glob, json, os, struct, sys
from tokenizers import Tokenizer
docs, eot, d, name, tokpath = json.load(open(sys.argv[1])), int(sys.argv[2]), *sys.argv[3:6]
every = int(sys.argv[6]) if len(sys.argv) > 6 else None
tok = Tokenizer.from_file(tokpath)
problems = []
def read(path):
    data = open(path, 'rb').read()
    hdr = struct.unpack('<256i', data[:1024])
    if hdr[:2] != (20240520, 1) or any(hdr[3:]):
        problems.append('%s: header %s' % (path, hdr[:4]))
    if len(data) != 1024 + 2 * hdr[2]:
        problems.append('%s: %d bytes for %d tokens' % (path, len(data), hdr[2]))
    return list(struct.unpack('<%dH' % hdr[2], data[1024:1024 + 2 * hdr[2]]))
def split(ids):
    out = []
    for i in ids:
        if i == eot: out.append([])
        else: out[-1].append(i)
    return [tok.decode(x) for x in out]
val = sorted(glob.glob(os.path.join(d, name + '_val_*.bin')))
train = sorted(glob.glob(os.path.join(d, name + '_train_*.bin')))
ids = [i for p in val + train for i in read(p)]
if not ids or ids[0] != eot: problems.append('the stream does not start with the eot')
got = split(ids)
if every is None:
    if got != docs:
        bad = next((k for k, (a, b) in enumerate(zip(got, docs)) if a != b), min(len(got), len(docs)))
        problems.append('%d documents decoded, want %d; first difference at %d: %r'
                        % (len(got), len(docs), bad, got[bad] if bad < len(got) else None))
else:
    gv = split([i for p in val for i in read(p)])
    gt = split([i for p in train for i in read(p)])
    if gv != docs[every - 1::every]: problems.append('val is not every %d-th document' % every)
    if gt != [x for k, x in enumerate(docs) if (k + 1) % every]:
        problems.append('train is not the other documents in order')
print('; '.join(problems) or 'ok')
EOF
}
expect_shards() {
    local got
    got=$(check_shards "$@")
    if [ "$got" = ok ]; then ok; else bad "shards in $1: $got"; fi
}

# ---- JSONL, llm.c's split ----------------------------------------------------
prep --tokenizer "$tmp/tokenizer.json" --out "$tmp/sh" --shard-tokens 8000 "$tmp/corpus.jsonl"
expect_rc 0
expect_out "^documents    2400 "
expect_out "^vocabulary   $vocab ids"
expect_out "^format       u16: llm.c magic 20240520, version 1, uint16 ids"
expect_out "^eot          <|endoftext|> = $eot"
expect_out "^wrote        $tmp/sh/sh_val_000000.bin: 8000 tokens"
expect_out "^wrote        $tmp/sh/sh_train_000001.bin: 8000 tokens"
if [ -s "$tmp/err" ]; then bad "stderr off a terminal: $(head -c 200 "$tmp/err")"; else ok; fi
total=$(sed -n 's/^tokens       \([0-9]*\) .*/\1/p' "$tmp/out")
nshards=$(ls "$tmp/sh" | wc -l)
want_shards=$(( (total + 7999) / 8000 ))
if [ "$nshards" -eq "$want_shards" ] && [ "$nshards" -ge 3 ]; then ok; else
    bad "$nshards files in $tmp/sh for $total tokens: $(ls -a "$tmp/sh")"; fi
if ls -a "$tmp/sh" | grep -q tmp; then bad "a temporary file was left: $(ls -a "$tmp/sh")"; else ok; fi
expect_shards "$tmp/sh" sh "$tmp/tokenizer.json"

run data info "$tmp/sh/sh_train_000001.bin" --vocab "$vocab"
expect_rc 0
expect_out "u16: llm.c magic 20240520, version 1, uint16 ids"
expect_out "^tokens  *8000$"
expect_out "all below the vocab given"

# The same documents as one text file each give the same shards.
prep --tokenizer "$tmp/tokenizer.json" --out "$tmp/txt" --name sh --shard-tokens 8000 "$tmp"/docs/*.txt
expect_rc 0
for f in "$tmp"/sh/*.bin; do expect_same "$f" "$tmp/txt/$(basename "$f")"; done

# ---- --val-fraction: a tenth of the documents, in one val shard ----------------
prep --tokenizer "$tmp/tokenizer.json" --out "$tmp/vf" --shard-tokens 8000 --val-fraction 0.1 "$tmp/corpus.jsonl"
expect_rc 0
expect_out "^documents    2400 (240 val, 2160 train)"
expect_out "shards       1 val, "
expect_shards "$tmp/vf" vf "$tmp/tokenizer.json" 10
# Exact fractions: 0.57 of 100 documents is 57 (100 x 0.57 in floating
# point is 56.99999999999999).
head -n 100 "$tmp/corpus.jsonl" >"$tmp/hundred.jsonl"
prep --tokenizer "$tmp/tokenizer.json" --out "$tmp/vf57" --val-fraction 0.57 "$tmp/hundred.jsonl"
expect_rc 0
expect_out "^documents    100 (57 val, 43 train)"

# ---- a corpus within one shard (the default 100M): 1% of it to val, spread -----
prep --tokenizer "$tmp/tokenizer.json" --out "$tmp/one" "$tmp/corpus.jsonl"
expect_rc 0
expect_out "^documents    2400 (24 val, 2376 train)"
expect_out "^shards       1 val, 1 train, at most 100000000 tokens each (val: one shard)"
expect_out "^wrote        $tmp/one/one_train_000001.bin: "
expect_err "^prepare_data: all [0-9]* tokens fit in the first shard (--shard-tokens 100000000).*24 of the 2400 documents"
expect_shards "$tmp/one" one "$tmp/tokenizer.json" 100
if ls -a "$tmp/one" | grep -q tmp; then bad "a temporary file was left: $(ls -a "$tmp/one")"; else ok; fi
# Fewer than 100 documents: one, the last.
head -n 50 "$tmp/corpus.jsonl" >"$tmp/fifty.jsonl"
prep --tokenizer "$tmp/tokenizer.json" --out "$tmp/fifty" "$tmp/fifty.jsonl"
expect_rc 0
expect_out "^documents    50 (1 val, 49 train)"
last_doc=$("$py" -c 'import json,sys; from tokenizers import Tokenizer
d = json.load(open(sys.argv[1]))[49]
print(len(Tokenizer.from_file(sys.argv[2]).encode(d).ids) + 1)' "$tmp/docs.json" "$tmp/tokenizer.json")
expect_out "^wrote        $tmp/fifty/fifty_val_000000.bin: $last_doc tokens$"

# ---- a vocabulary past 65536: uint32 -------------------------------------------
prep --tokenizer "$tmp/big.json" --out "$tmp/big" --doc-per line --val-fraction 0 "$tmp/big.txt"
expect_rc 0
expect_out "^format       u32: llm.c magic 20240801, version 7, uint32 ids"
run data info "$tmp/big/big_train_000000.bin" --vocab 70002
expect_rc 0
expect_out "^tokens  *5$"
expect_out "largest id 70001"
expect_prep_error "vocabulary of 70002 ids is too large for uint16 shards" \
    --tokenizer "$tmp/big.json" --out "$tmp/big16" --format u16 "$tmp/big.txt"

# ---- errors: exit 2, one line naming the input ---------------------------------
expect_prep_error "$tmp/none.txt: no such file" --tokenizer "$tmp/tokenizer.json" --out "$tmp/e" "$tmp/none.txt"
expect_prep_error "$tmp/none.json: no such tokenizer file" --tokenizer "$tmp/none.json" --out "$tmp/e" "$tmp/big.txt"
printf '{"text": "fine"}\n\n{"text": "broken\n' >"$tmp/bad.jsonl"
expect_prep_error "$tmp/bad.jsonl:3: not a JSON line" --tokenizer "$tmp/tokenizer.json" --out "$tmp/e" "$tmp/bad.jsonl"
printf '{"body": "no text key"}\n' >"$tmp/nokey.jsonl"
expect_prep_error "$tmp/nokey.jsonl:1: no \"text\" key" --tokenizer "$tmp/tokenizer.json" --out "$tmp/e" "$tmp/nokey.jsonl"
prep --tokenizer "$tmp/tokenizer.json" --out "$tmp/e" --text-key body "$tmp/nokey.jsonl" --val-fraction 0
expect_rc 0
# One document cannot be split: refused.
expect_prep_error "all .* tokens went to the val shard, none is left to train on (one document" --tokenizer "$tmp/tokenizer.json" --out "$tmp/small" "$tmp/nokey.jsonl" --text-key body
if ls "$tmp/small" | grep -q .; then bad "a refused run left shards: $(ls "$tmp/small")"; else ok; fi
expect_prep_error "already holds .* shard(s) named sh_\*" --tokenizer "$tmp/tokenizer.json" --out "$tmp/sh" "$tmp/corpus.jsonl"
expect_prep_error "--eot nope: the tokenizer has no such token" --tokenizer "$tmp/tokenizer.json" --out "$tmp/e2" --eot nope "$tmp/corpus.jsonl"
# --force replaces, and removes shards of the old run the new one did not write.
prep --tokenizer "$tmp/tokenizer.json" --out "$tmp/sh" --force --shard-tokens 1000000 --val-fraction 0.5 "$tmp/corpus.jsonl"
expect_rc 0
if [ "$(ls "$tmp/sh")" = "$(printf 'sh_train_000000.bin\nsh_val_000000.bin')" ]; then ok; else
    bad "--force left: $(ls "$tmp/sh")"; fi

# ---- train a tiny GPT on the shards: the loss falls ----------------------------
run train configs/tiny-gpt.json --steps 40 --set model.vocab="$vocab" \
    --set "data.train=$tmp/txt/sh_train_*.bin" --set "data.val=$tmp/txt/sh_val_000000.bin" \
    --set checkpoint.dir="$tmp/ck" --set train.warmup_steps=5 --set train.eval_every=0 \
    --log-json "$tmp/log.jsonl"
expect_rc 0
falls=$("$py" - "$tmp/log.jsonl" <<'EOF'
import json, sys
loss = [r['loss'] for r in map(json.loads, open(sys.argv[1])) if 'loss' in r and 'step' in r]
print('yes' if len(loss) >= 2 and loss[-1] < loss[0] - 1.0 else 'no: %s' % loss)
EOF
)
if [ "$falls" = yes ]; then ok; else bad "training loss did not fall by 1 nat: $falls"; fi

# ---- sample from it, through the tokenizer trained here ------------------------------
# hanayo encodes the prompt and decodes the sample in C (lib/tokenizer.c).
# The same sample as ids, from the ids the Python tokenizer gives the
# prompt, decodes in Python to the bytes hanayo printed: its prompt
# encoding and its decoding are the library's. Greedy and a seeded draw;
# each twice, the same.
encode() {
    "$py" -c 'import sys; from tokenizers import Tokenizer
print(",".join(map(str, Tokenizer.from_file(sys.argv[1]).encode(sys.argv[2]).ids)))' \
        "$tmp/tokenizer.json" "$1"
}
# expect_decodes IDS FILE: the Python tokenizer's text of the
# space-separated ids (special tokens kept: hanayo prints <|endoftext|> as
# its text), and the newline that ends hanayo's line, is FILE's. hanayo
# writes each token's bytes as they come, so a sample may hold a UTF-8
# character cut short (a byte-level vocabulary has tokens of part of one);
# the library's decode replaces such bytes with U+FFFD, so FILE is read
# that way too (text in whole characters is compared byte for byte).
expect_decodes() {
    local got
    got=$("$py" -c 'import sys; from tokenizers import Tokenizer
want = Tokenizer.from_file(sys.argv[1]).decode([int(i) for i in sys.argv[2].split()],
                                               skip_special_tokens=False) + "\n"
got = open(sys.argv[3], "rb").read().decode("utf-8", "replace")
print("ok" if got == want and len(want) > 1 else "%r, the Python tokenizer %r" % (got, want))' \
        "$tmp/tokenizer.json" "$1" "$2")
    if [ "$got" = ok ]; then ok; else bad "$last: hanayo printed $got"; fi
}
gpt=(configs/tiny-gpt.json --set model.vocab="$vocab" --set "data.train=$tmp/txt/sh_train_*.bin"
     --set "data.val=$tmp/txt/sh_val_000000.bin" --init "$tmp/ck")
prompt="The old man follows"
pids=$(encode "$prompt")
for how in "--temperature 0" "--temperature 0.8 --top-k 20 --seed 3"; do
    # shellcheck disable=SC2086
    run sample "${gpt[@]}" --prompt "$prompt" --tokenizer "$tmp/tokenizer.json" --max-new 24 $how
    expect_rc 0
    expect_err '^sample: 24 tokens$'
    cp "$tmp/out" "$tmp/text"
    # shellcheck disable=SC2086
    run sample "${gpt[@]}" --prompt "$prompt" --tokenizer "$tmp/tokenizer.json" --max-new 24 $how
    expect_same "$tmp/out" "$tmp/text"
    # shellcheck disable=SC2086
    run sample "${gpt[@]}" --prompt-tokens "$pids" --max-new 24 $how
    expect_rc 0
    ids=$(cat "$tmp/out")
    if [ "$(wc -w <<<"$ids")" -eq 24 ]; then ok; else bad "sample $how as ids: '$ids'"; fi
    expect_decodes "$ids" "$tmp/text"
done
if grep -q '[A-Za-z]' "$tmp/text"; then ok; else bad "the sample holds no letter: $(cat "$tmp/text")"; fi

# ---- README's loop, "Your text, end to end", as it is written ---------------------
# The block is read from README.md and run in a directory of its own, with
# the corpus and the tokenizer above and hanayo on PATH. Only the sizes
# change, each substitution found exactly once (else the README moved and
# this test must follow it): the tokenizer's vocabulary for model.vocab (as
# prepare_data.py reports it), 40 steps with validation every 20 instead
# of 1000 and 100; and the sample goes to a file, to be checked. The shards
# keep the default size: the corpus, far below one shard, is split 1% val.
loop=$tmp/loop
mkdir -p "$loop/bin"
ln -s "$(cd "$(dirname "$HANAYO")" && pwd)/$(basename "$HANAYO")" "$loop/bin/hanayo"
ln -s "$PWD/tools" "$loop/tools"
# tools/deps.sh looks for the tokenizers venv beside tools/
[ -e .venv-data ] && ln -s "$PWD/.venv-data" "$loop/.venv-data"
cp "$tmp/corpus.jsonl" "$tmp/tokenizer.json" "$loop/"
"$py" - README.md "$loop/readme.sh" "$vocab" <<'EOF'
import sys
readme, out, vocab = sys.argv[1], sys.argv[2], sys.argv[3]
lines = open(readme, encoding='utf-8').read().split('\n')
start = lines.index('## Your text, end to end')
i = lines.index('```', start) + 1
block = '\n'.join(lines[i:lines.index('```', i)]) + '\n'
subs = [('"vocab": 8192', '"vocab": %s' % vocab),
        ('"steps": 1000, "eval_every": 100', '"steps": 40, "eval_every": 20'),
        ('--tokenizer tokenizer.json\n', '--tokenizer tokenizer.json >sample.txt\n')]
for a, b in subs:
    if block.count(a) != 1:
        sys.exit("README's loop block holds %r %d times, not once" % (a, block.count(a)))
    block = block.replace(a, b)
open(out, 'w').write(block)
EOF
if [ $? -eq 0 ]; then ok; else bad "README's loop block could not be read"; fi
(cd "$loop" && PATH="$loop/bin:$PATH" bash -e -o pipefail readme.sh) >"$tmp/out" 2>"$tmp/err"
rc=$?
last="README's loop block"
expect_rc 0
expect_out "^vocabulary   $vocab ids"
expect_out "^documents    2400 (24 val, 2376 train)"
expect_err "^prepare_data: all [0-9]* tokens fit in the first shard"
expect_out "^config       --set model.vocab=$vocab "
for f in data/mine/mine_val_000000.bin data/mine/mine_train_000001.bin run.jsonl run.svg \
         checkpoints/mine/step_000040/model.safetensors; do
    if [ -s "$loop/$f" ]; then ok; else bad "README's loop block wrote no $f"; fi
done
vals=$("$py" -c 'import json, sys
print(" ".join(str(r["step"]) for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r))' \
    "$loop/run.jsonl" 2>&1)
if [ "$vals" = "20 40" ]; then ok; else bad "README's loop: val loss at steps '$vals', want '20 40'"; fi
if [ -s "$loop/sample.txt" ] && grep -q '[A-Za-z]' "$loop/sample.txt"; then ok; else
    bad "README's loop sampled no text: '$(cat "$loop/sample.txt" 2>/dev/null)'"
fi
# The README's sample (temperature 1, seed 1) as ids decodes to its text.
readme_sample=(sample "$loop/mine.json" --init "$loop/checkpoints/mine")
run "${readme_sample[@]}" --prompt-tokens "$(encode "Once upon")"
expect_rc 0
expect_decodes "$(cat "$tmp/out")" "$loop/sample.txt"

hy_finish
