#!/usr/bin/env python3
"""tools/prepare_data.py — text to token shards that `hanayo train` reads.

Tokenizes text files or JSONL files with a Hugging Face `tokenizers` file
(tokenizer.json: any the user brings or trains; nothing is downloaded) and
writes llm.c token shards (docs/data.md "Shards"): a 1024-byte header of 256
little-endian int32 (magic, version, token count, zeros), then the ids,
uint16 (magic 20240520, version 1) when the vocabulary fits in 65536 ids,
else uint32 (magic 20240801, version 7). lib/data.c reads them.

    python3 tools/prepare_data.py --tokenizer tokenizer.json --out data/mine \\
        corpus/*.txt more.jsonl

Documents: a text file is one document (--doc-per line: each non-empty line
is one); a .jsonl file holds one JSON object a line with the text under
--text-key (default "text"). Each document is preceded by the end-of-text
token (--eot; default the tokenizer's <|endoftext|> when it has one), as
llm.c's scripts do, so a model sees where one document ends.

Split: as llm.c, the first shard (OUT/NAME_val_000000.bin) is validation
and the rest (NAME_train_000001.bin, ...) training; or with --val-fraction
F, that fraction of the documents, spread evenly, goes to the one val shard
(hanayo's data.val is one shard) and the rest to the train shards. A corpus
that fits in the first shard would leave nothing to train on: then 1% of
its documents (at least one), spread evenly, go to the val shard and the
rest to NAME_train_000001.bin, ..., said on stderr.

Every shard is written to a temporary file beside it and renamed into place
once complete, so an interrupted run leaves no partial shard. Exit 2 for bad
input (a missing file, a bad JSONL line as FILE:LINE, a vocabulary too large
for the format), 1 for a failed write. Needs only `tokenizers`:
`bash tools/deps.sh data` installs it (docs/data.md).
"""

import argparse
import array
from fractions import Fraction
import glob
import json
import os
import sys
import time

SHARD_U16 = (20240520, 1, 'H', 2)   # magic, version, array code, bytes/id
SHARD_U32 = (20240801, 7, 'I', 4)
HEADER_INTS = 256
MAX_SHARD_TOKENS = 2**31 - 1        # header[2] is an int32
ENCODE_BATCH_CHARS = 1 << 20        # text handed to encode_batch at a time
SMALL_VAL_SHARE = Fraction(1, 100)  # a corpus within one shard: its val documents


class InputError(Exception):
    """Bad input from the user: reported as one line, exit 2."""


def die(msg, code):
    print('prepare_data: ' + msg, file=sys.stderr)
    sys.exit(code)


# ---------------------------------------------------------------------------
# Shards

class ShardWriter:
    """Writes shards OUT/NAME_SPLIT_NNNNNN.bin of at most `limit` tokens each
    (None: one shard, however large), streaming ids to a temporary file and
    renaming it into place when the shard is complete."""

    def __init__(self, out_dir, name, split, first_index, fmt, limit):
        self.out_dir, self.name, self.split = out_dir, name, split
        self.index, self.fmt, self.limit = first_index, fmt, limit
        self.file = None
        self.count = 0
        self.written = []           # (path, tokens) of complete shards
        self.tokens = 0

    def path(self):
        return os.path.join(self.out_dir, '%s_%s_%06d.bin' % (self.name, self.split, self.index))

    def _open(self):
        final = self.path()
        self.tmp = os.path.join(self.out_dir, '.%s.tmp%d' % (os.path.basename(final), os.getpid()))
        self.file = open(self.tmp, 'wb')
        self.file.write(bytes(4 * HEADER_INTS))   # the header is written on close
        self.count = 0

    def add(self, ids):
        """Appends ids (a list of ints), starting new shards as each fills."""
        start = 0
        while start < len(ids):
            if self.file is None:
                self._open()
            room = (self.limit or MAX_SHARD_TOKENS) - self.count
            if room <= 0:
                if self.limit is None:
                    raise InputError('the %s shard would exceed %d tokens (an llm.c header '
                                     'counts in int32); use a smaller --val-fraction'
                                     % (self.split, MAX_SHARD_TOKENS))
                self.close()
                continue
            part = ids[start:start + room]
            arr = array.array(self.fmt[2], part)
            if sys.byteorder != 'little':
                arr.byteswap()
            self.file.write(arr.tobytes())
            self.count += len(part)
            start += len(part)

    def full(self):
        return self.limit is not None and self.count >= self.limit

    def close(self):
        """Completes the open shard, if any: header, flush to disk, rename."""
        if self.file is None:
            return
        header = array.array('i', [0] * HEADER_INTS)
        header[0], header[1], header[2] = self.fmt[0], self.fmt[1], self.count
        if sys.byteorder != 'little':
            header.byteswap()
        self.file.seek(0)
        self.file.write(header.tobytes())
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        self.file = None
        os.replace(self.tmp, self.path())
        self.written.append((self.path(), self.count))
        self.tokens += self.count
        self.count = 0
        self.index += 1

    def abandon(self):
        if self.file is not None:
            self.file.close()
            self.file = None
            try:
                os.unlink(self.tmp)
            except OSError:
                pass


def to_val(d, share):
    """Whether document d (from 0) goes to val when `share` (a Fraction) of
    the documents does: when the running count of val documents, d x share,
    steps up, so that exactly that share is val, spread evenly (0.1: the
    10th, the 20th, ...). Exact, so 0.3 of 10 documents is 3."""
    return int((d + 1) * share) > int(d * share)


def resplit(val, lens, out_dir, name, fmt, shard_tokens):
    """A corpus that fits in the first shard, all of it in `val`: reads its
    documents (their lengths `lens`) back and writes them again, 1% of them
    (at least one) spread evenly to a new val shard in its place and the
    rest to train shards from 000001, as llm.c's names. Returns the two
    writers, closed, and how many documents went to val."""
    n = len(lens)
    n_val = max(1, int(n * SMALL_VAL_SHARE))
    share = Fraction(n_val, n)
    new_val = ShardWriter(out_dir, name, 'val', 0, fmt, None)
    new_train = ShardWriter(out_dir, name, 'train', 1, fmt, shard_tokens)
    # The old val shard stays open for reading while the new one replaces
    # its name (POSIX keeps the open file).
    with open(val.written[0][0], 'rb') as f:
        f.seek(4 * HEADER_INTS)
        try:
            for d, length in enumerate(lens):
                ids = array.array(fmt[2])
                ids.fromfile(f, length)
                if sys.byteorder != 'little':
                    ids.byteswap()
                (new_val if to_val(d, share) else new_train).add(ids.tolist())
            new_val.close()
            new_train.close()
        except BaseException:
            new_val.abandon()
            new_train.abandon()
            raise
    return new_val, new_train, n_val


# ---------------------------------------------------------------------------
# Documents

def read_documents(paths, doc_per, text_key):
    """Yields (text, bytes_read_so_far) for each document of each input."""
    done = 0
    for path in paths:
        jsonl = path.endswith('.jsonl')
        if not jsonl and doc_per == 'file':
            with open(path, 'rb') as f:
                raw = f.read()
            yield decode(raw, path, None), done + len(raw)
            done += len(raw)
            continue
        with open(path, 'rb') as f:
            for lineno, raw in enumerate(f, 1):
                done += len(raw)
                line = decode(raw, path, lineno)
                if not jsonl:
                    line = line.rstrip('\r\n')
                    if line.strip():
                        yield line, done
                    continue
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError('%s:%d: not a JSON line: %s' % (path, lineno, e.msg))
                if not isinstance(obj, dict) or text_key not in obj:
                    raise InputError('%s:%d: no "%s" key in this line (--text-key names the '
                                     'key holding the text)' % (path, lineno, text_key))
                if not isinstance(obj[text_key], str):
                    raise InputError('%s:%d: "%s" is a %s, not a string'
                                     % (path, lineno, text_key, type(obj[text_key]).__name__))
                yield obj[text_key], done


def decode(raw, path, lineno):
    try:
        return raw.decode('utf-8')
    except UnicodeDecodeError as e:
        where = '%s:%d' % (path, lineno) if lineno else path
        raise InputError('%s: not UTF-8 text (byte %d)' % (where, e.start))


def batches(docs):
    """Groups documents so each encode_batch call gets about a megabyte."""
    batch, chars, progress = [], 0, 0
    for text, progress in docs:
        batch.append(text)
        chars += len(text)
        if chars >= ENCODE_BATCH_CHARS:
            yield batch, progress
            batch, chars = [], 0
    if batch:
        yield batch, progress


# ---------------------------------------------------------------------------
# Progress on a terminal

class Progress:
    def __init__(self, total_bytes):
        self.total = max(total_bytes, 1)
        self.on = sys.stderr.isatty()
        self.last = 0.0
        self.start = time.monotonic()

    def show(self, done, tokens, final=False):
        now = time.monotonic()
        if not self.on or (not final and now - self.last < 0.1):
            return
        self.last = now
        frac = min(done / self.total, 1.0)
        width = 30
        bar = '#' * int(frac * width) + '-' * (width - int(frac * width))
        rate = tokens / max(now - self.start, 1e-9)
        sys.stderr.write('\r[%s] %3d%%  %d tokens  %.0f tok/s' % (bar, frac * 100, tokens, rate))
        if final:
            sys.stderr.write('\n')
        sys.stderr.flush()


# ---------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(
        prog='prepare_data.py',
        description='Tokenize text or JSONL files into llm.c token shards for hanayo '
                    '(docs/data.md).')
    p.add_argument('inputs', nargs='+', metavar='INPUT',
                   help='text files (one document each, or one a line with --doc-per line) '
                        'or .jsonl files (one document a line)')
    p.add_argument('--tokenizer', required=True, metavar='FILE',
                   help='a Hugging Face tokenizers file (tokenizer.json)')
    p.add_argument('--out', required=True, metavar='DIR', help='directory for the shards')
    p.add_argument('--name', metavar='NAME',
                   help="shard file prefix (default: OUT's last component)")
    p.add_argument('--shard-tokens', type=int, default=100_000_000, metavar='N',
                   help='tokens per shard (default 100000000, as llm.c)')
    p.add_argument('--val-fraction', type=Fraction, metavar='F',
                   help='put this fraction of the documents in the one val shard '
                        '(default: the first shard is val, as llm.c; when the corpus '
                        'fits in it, 1%% of the documents)')
    p.add_argument('--eot', metavar='NAME|ID',
                   help='token before each document: a token name, an id, or "none" '
                        '(default: <|endoftext|> when the tokenizer has it)')
    p.add_argument('--doc-per', choices=('file', 'line'), default='file',
                   help='a text file is one document (file, default) or one a line (line)')
    p.add_argument('--text-key', default='text', metavar='KEY',
                   help='JSONL: the key holding the text (default "text")')
    p.add_argument('--format', choices=('auto', 'u16', 'u32'), default='auto',
                   help='ids as uint16 or uint32 (default: u16 when the vocabulary fits)')
    p.add_argument('--special-tokens', action='store_true',
                   help="apply the tokenizer's post-processor (e.g. BERT's [CLS] ... [SEP]) "
                        'to each document')
    p.add_argument('--force', action='store_true',
                   help='replace shards named NAME_* already in OUT')
    a = p.parse_args(argv)
    if a.shard_tokens < 1 or a.shard_tokens > MAX_SHARD_TOKENS:
        raise InputError('--shard-tokens is %d; it must be 1 .. %d'
                         % (a.shard_tokens, MAX_SHARD_TOKENS))
    if a.val_fraction is not None and not 0 <= a.val_fraction < 1:
        raise InputError('--val-fraction is %g; it must be at least 0 and below 1'
                         % a.val_fraction)
    return a


def load_tokenizer(path):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        die('needs the Python package "tokenizers": run `bash tools/deps.sh data` '
            '(or pip install tokenizers)', 1)
    if not os.path.isfile(path):
        raise InputError('%s: no such tokenizer file' % path)
    try:
        return Tokenizer.from_file(path)
    except Exception as e:   # tokenizers raises plain Exception on a bad file
        raise InputError('%s: not a Hugging Face tokenizer.json: %s' % (path, e))


def choose_eot(tok, spec, vocab):
    """(id, name) of the separator, or (None, why) for none."""
    if spec is None:
        i = tok.token_to_id('<|endoftext|>')
        if i is None:
            return None, 'none (the tokenizer has no <|endoftext|>; --eot NAME to choose one)'
        return i, '<|endoftext|>'
    if spec == 'none':
        return None, 'none'
    if spec.isdigit():
        i = int(spec)
        if i >= vocab:
            raise InputError('--eot %d is not below the vocabulary size %d' % (i, vocab))
        return i, tok.id_to_token(i) or spec
    i = tok.token_to_id(spec)
    if i is None:
        raise InputError('--eot %s: the tokenizer has no such token' % spec)
    return i, spec


def choose_format(name, vocab):
    if vocab > MAX_SHARD_TOKENS:
        raise InputError('vocabulary of %d ids is too large for llm.c shards (ids below 2^31)'
                         % vocab)
    if name == 'u16' and vocab > 65536:
        raise InputError('vocabulary of %d ids is too large for uint16 shards (at most 65536); '
                         'use --format u32 or auto' % vocab)
    if name == 'u16' or (name == 'auto' and vocab <= 65536):
        return 'u16', SHARD_U16
    return 'u32', SHARD_U32


def old_shards(out_dir, name):
    pattern = os.path.join(glob.escape(out_dir), glob.escape(name) + '_*_[0-9]*.bin')
    return sorted(glob.glob(pattern))


def prepare(a):
    for path in a.inputs:
        if not os.path.isfile(path):
            raise InputError('%s: no such file' % path)
    tok = load_tokenizer(a.tokenizer)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    fmt_name, fmt = choose_format(a.format, vocab)
    eot, eot_name = choose_eot(tok, a.eot, vocab)
    name = a.name or os.path.basename(os.path.normpath(a.out))
    try:
        os.makedirs(a.out, exist_ok=True)
    except OSError as e:
        raise InputError('%s: cannot create the output directory: %s' % (a.out, e.strerror))
    stale = old_shards(a.out, name)
    if stale and not a.force:
        raise InputError('%s already holds %d shard(s) named %s_* (%s); --force replaces '
                         'them, or choose another --out or --name'
                         % (a.out, len(stale), name, os.path.basename(stale[0])))

    if a.val_fraction is None:
        val = ShardWriter(a.out, name, 'val', 0, fmt, a.shard_tokens)
        train = ShardWriter(a.out, name, 'train', 1, fmt, a.shard_tokens)
    else:
        val = ShardWriter(a.out, name, 'val', 0, fmt, None)
        train = ShardWriter(a.out, name, 'train', 0, fmt, a.shard_tokens)

    progress = Progress(sum(os.path.getsize(p) for p in a.inputs))
    docs = val_docs = 0
    val_lens = array.array('I')     # llm.c's split: the tokens of each document in val
    try:
        for batch, done in batches(read_documents(a.inputs, a.doc_per, a.text_key)):
            for enc in tok.encode_batch(batch, add_special_tokens=a.special_tokens):
                ids = ([eot] if eot is not None else []) + enc.ids
                if a.val_fraction is None:
                    # llm.c: the first shard is val; once full, the rest is train.
                    is_val = not val.written
                else:
                    is_val = to_val(docs, a.val_fraction)
                if is_val and a.val_fraction is None:
                    n = min(len(ids), a.shard_tokens - val.count)
                    val.add(ids[:n])
                    val_lens.append(n)
                    if val.full():
                        val.close()
                    if n < len(ids):
                        val_lens = None     # train has begun: llm.c's split stands
                    train.add(ids[n:])
                else:
                    (val if is_val else train).add(ids)
                val_docs += is_val
                docs += 1
            progress.show(done, val.tokens + val.count + train.tokens + train.count)
        val.close()
        train.close()
    except BaseException:
        val.abandon()
        train.abandon()
        raise
    progress.show(progress.total, val.tokens + train.tokens, final=True)

    if docs == 0:
        raise InputError('no documents in the input (empty files or lines)')
    if a.val_fraction is None and not train.written and docs > 1:
        # Every document fit in the first shard, which llm.c makes val.
        assert val_lens is not None and len(val_lens) == docs
        val, train, val_docs = resplit(val, val_lens, a.out, name, fmt, a.shard_tokens)
        print('prepare_data: all %d tokens fit in the first shard (--shard-tokens %d), '
              'which would leave none to train on: %d of the %d documents (1%%, at least '
              'one), spread evenly, went to the val shard and the rest to train; '
              '--val-fraction F or a smaller --shard-tokens choose otherwise'
              % (val.tokens + train.tokens, a.shard_tokens, val_docs, docs), file=sys.stderr)
    if not train.written:
        for path, _ in val.written:
            os.unlink(path)
        raise InputError('all %d tokens went to the val shard, none is left to train on%s: '
                         'choose a --shard-tokens below %d, or a --val-fraction'
                         % (val.tokens, ' (one document: --doc-per line splits a text file '
                            'by lines)' if docs == 1 else '', val.tokens))
    written = {p for p, _ in val.written + train.written}
    for path in stale:
        if path not in written:
            os.unlink(path)

    first_train = train.written[0][0]
    pattern = first_train[:-len('000000.bin')] + '*.bin'
    print('documents    %d (%d val, %d train) from %d file(s)'
          % (docs, val_docs, docs - val_docs, len(a.inputs)))
    print('tokens       %d (%d val, %d train)' % (val.tokens + train.tokens, val.tokens,
                                                 train.tokens))
    print('shards       %d val, %d train, at most %d tokens each%s'
          % (len(val.written), len(train.written), a.shard_tokens,
             ' (val: one shard)' if val.limit is None else ''))
    print('vocabulary   %d ids (%s)' % (vocab, a.tokenizer))
    print('format       %s: llm.c magic %d, version %d, uint%d ids'
          % (fmt_name, fmt[0], fmt[1], 8 * fmt[3]))
    print('eot          %s' % (eot_name if eot is None else '%s = %d' % (eot_name, eot)))
    for path, n in val.written + train.written:
        print('wrote        %s: %d tokens' % (path, n))
    print('config       --set model.vocab=%d --set \'data.train=%s\' --set data.val=%s'
          % (vocab, pattern, val.written[0][0] if val.written else '(none)'))


def main(argv):
    try:
        prepare(parse_args(argv))
    except InputError as e:
        die(str(e), 2)
    except OSError as e:
        die('%s: %s' % (e.filename or 'write', e.strerror), 1)
    except KeyboardInterrupt:
        die('interrupted; no partial shard was left', 130)


if __name__ == '__main__':
    main(sys.argv[1:])
