#!/usr/bin/env python3
"""test_mutate.py — random damage to valid inputs: never a crash, a hang, a
lie or a lost file (docs/reliability.md, "The promise").

A property test over the binary in $HANAYO. Once, it makes a valid world in
a scratch directory: a tiny GPT config (4 layers, hanayo schedule on 2
ranks), a training and a validation shard, a checkpoint directory of two
steps trained from them, and a standalone copy of the weights. Then, for
each case, it copies that world, damages one input at random, runs one
command on it and checks what the command did. The inputs and what reads
them:

    config      (cfg.json, or one of configs/*.json)   check
    shard       (val.bin)                              eval --data
                (train.bin, with state.json's record   train --resume
                 of it updated or not)
    safetensors (init.safetensors, standalone)         eval --init
                (the checkpoint's model/optimizer;     eval --init, train
                 state.json's record updated or not)    --resume, checkpoint verify
    state.json  (the newest checkpoint's)              train --resume,
    config.json (the checkpoint's copy of the config)   checkpoint verify

The damage, one to three edits stacked: bytes flipped, set, inserted or
deleted; the file cut short or extended; in JSON, a number replaced (0, -1,
2^31, 2^63, 1e308, 1e-46, NaN, ...), a key deleted, duplicated, renamed or
added, a value's type changed; in a shard's header its magic, version and
count; in safetensors the header length and each tensor's dtype, shape and
data_offsets; in state.json its step, data_position, data record, files'
sizes and checksums, its format (1: no checksums), its own checksum. Where
state.json vouches for a damaged file, most cases write the damaged file's
size and CRC-32C into it and re-seal state.json's own checksum, so the
damage reaches the readers behind the checksums instead of stopping there
(a deliberate edit, not an accident, as a hostile user would make it).

Every case must:
  - exit 0 or 2: never 1 (a runtime failure is not how bad input ends),
    never a signal, never a sanitizer report (make test runs this under
    ASan+UBSan too). One exception, for train: exit 1 with its non-finite
    step message where every weight it loaded is finite (NONFINITE_STEP
    below says why);
  - on exit 2, print exactly one line on stderr, "hanayo: ...", and nothing
    on stdout (checkpoint verify prints its per-checkpoint lines there);
    on exit 0, print only "hanayo: " or "warning: " lines on stderr, and
    for check and eval valid JSON on stdout (no NaN);
  - change no file: every file and directory of the case's world is hashed
    before and after; after a train only new ck/step_NNNNNN/ directories
    and log.jsonl may have appeared (its lines valid JSON, every tensor of
    the new checkpoints finite), after exit 2 nothing at all;
  - end within MUTATE_TIMEOUT seconds (60; a case takes well under one):
    past it the case is a hang and fails.

Deterministic: case K of seed S is the same damage every run, whatever
machine, so a failure is reproduced by
    MUTATE_SEED=S MUTATE_CASE=K MUTATE_KEEP=DIR HANAYO=... python3 tests/test_mutate.py
(MUTATE_KEEP keeps the case's world in DIR/case_K to look at; MUTATE_VERBOSE=1
prints every case and its outcome). Bounded: a
fixed number of cases, MUTATE_CASES (default below: about a minute under
ASan on a 2-core machine); MUTATE_SECONDS=N instead runs cases until N
seconds have passed. Nothing is asserted about time but the hang guard.

KNOWN below lists failures found and routed elsewhere: a case matching one
is run and reported as "known", not counted as failed. Empty it as they are
fixed.

Prints "mutate: N passed, N failed" and exits non-zero on any failure.
"""
import hashlib
import json
import math
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

SEED = int(os.environ.get("MUTATE_SEED", "22"))
CASES = int(os.environ.get("MUTATE_CASES", "1500"))
SECONDS = float(os.environ.get("MUTATE_SECONDS", "0"))
ONLY = os.environ.get("MUTATE_CASE")
KEEP = os.environ.get("MUTATE_KEEP")
VERBOSE = os.environ.get("MUTATE_VERBOSE") == "1"
TIMEOUT = float(os.environ.get("MUTATE_TIMEOUT", "60"))
HANAYO = os.path.abspath(os.environ.get("HANAYO", "build/hanayo"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Failures this test found that are being fixed elsewhere, so that CI
# stays green meanwhile; empty this list as they are fixed (what it held
# when written, issue 22's items 5, 9, 11 and 14, is fixed). Each
# entry: the item, the file where the fix lives, and two regular
# expressions: "case" over the case's description (what was damaged, then
# "; hanayo" and the command) and "fail" over one of the problems found. A
# failing case is known when every one of its problems is matched by an
# entry whose "case" matches it too; it is then reported on one line, not
# counted as failed. Anything else such a case does wrong still fails it.
KNOWN = []

passed = 0
failed = 0
known = 0


def fail(what):
    global failed
    failed += 1
    print("FAIL: " + what, file=sys.stderr)


# ---- CRC-32C, as lib/checksum.c ----------------------------------------------
def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


CRC_TABLE = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


# ---- JSON that keeps what a damaged file may hold ------------------------------
# Objects are Obj (a list of [key, value] pairs: order kept, duplicates
# possible); Raw is text written as is (NaN, 1e999, a broken token).
class Obj(list):
    pass


class Raw(str):
    pass


INF = float("inf")


def jparse(text):
    """The parsed JSON, or None where an earlier edit left none to parse."""
    try:
        return json.loads(text, object_pairs_hook=lambda p: Obj([list(kv) for kv in p]))
    except (ValueError, RecursionError):
        return None


def jdump(v, indent=None, depth=0):
    if isinstance(v, Raw):
        return str(v)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):      # v * 1000 may have left the doubles
        return "NaN" if v != v else "1e999" if v == INF else "-1e999" if v == -INF else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, Obj):
        items = [json.dumps(k) + ": " + jdump(x, indent, depth + 1) for k, x in v]
        open_, close = "{", "}"
    else:
        items = [jdump(x, indent, depth + 1) for x in v]
        open_, close = "[", "]"
    if not items:
        return open_ + close
    if indent is None:
        return open_ + ", ".join(items) + close
    pad = " " * indent * (depth + 1)
    return (open_ + "\n" + ",\n".join(pad + i for i in items) + "\n" +
            " " * indent * depth + close)


def nodes(v, path=()):
    """Every (path, value) in v; a path is a tuple of pair / element indices."""
    yield path, v
    if isinstance(v, Obj):
        for i, (_, x) in enumerate(v):
            yield from nodes(x, path + (i,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from nodes(x, path + (i,))


def node_name(root, path):
    names, v = [], root
    for i in path:
        if isinstance(v, Obj):
            names.append(v[i][0])
            v = v[i][1]
        else:
            names.append("[%d]" % i)
            v = v[i]
    return ".".join(names) or "(top)"


def parent_of(root, path):
    v = root
    for i in path[:-1]:
        v = v[i][1] if isinstance(v, Obj) else v[i]
    return v


def get_at(root, path):
    if not path:
        return root
    p, i = parent_of(root, path), path[-1]
    return p[i][1] if isinstance(p, Obj) else p[i]


def set_at(root, path, value):
    if not path:
        return value
    p, i = parent_of(root, path), path[-1]
    if isinstance(p, Obj):
        p[i][1] = value
    else:
        p[i] = value
    return root


def find(root, dotted):
    """The path of the key path "a.b.c" in root, or None."""
    path, v = (), root
    for name in dotted.split("."):
        if not isinstance(v, Obj):
            return None
        for i, (k, x) in enumerate(v):
            if k == name:
                path, v = path + (i,), x
                break
        else:
            return None
    return path


INT_EDGES = [0, -1, 1, 2, 3, 7, 255, 65535, 65536, 2**31 - 1, 2**31, -2**31, -2**31 - 1,
             2**32, 2**32 + 1, 2**53 + 1, 2**63 - 1, -2**63, 10**30]
REAL_EDGES = [0.5, -0.0, 1.5, 1e-46, 1e-320, 3.4e38, 3.5e38, 1e300, 1e308, -1e308, 1e-8]
RAW_EDGES = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "0x10", "01", "1.", ".5",
             "+1", "1e", "--1", "9" * 400, "18446744073709551616"]
STRINGS = ["", "x", "gpt", "F32", "hanayo", "null", "0", "-1", "1e308", "NaN", "a" * 5000,
           "line\nbreak", "esc\x1b[31mred", "tab\there", "caf\u00e9", "/", ".", "..",
           "/dev/zero", "/proc/self/mem", "does/not/exist.bin", "cfg.json", "train.bin",
           "ck/step_000002/state.json", "0000000g", "DEADBEEF", "deadbeef0", "1234567"]


def number_edit(rng, v):
    """A replacement for the number v."""
    r = rng.random()
    if isinstance(v, (int, float)) and not isinstance(v, bool) and r < 0.35:
        half = v // 2 if isinstance(v, int) else v / 2
        return rng.choice([v + 1, v - 1, -v, v * 2, v * 1000, half, (v + 1) * 2**20])
    if r < 0.65:
        return rng.choice(INT_EDGES)
    if r < 0.85:
        return rng.choice(REAL_EDGES)
    return Raw(rng.choice(RAW_EDGES))


def any_value(rng, v):
    """A replacement of any type for v."""
    r = rng.random()
    if r < 0.3:
        return number_edit(rng, v)
    if r < 0.5:
        return rng.choice(STRINGS)
    if r < 0.6:
        return json.dumps(v) if not isinstance(v, (Obj, Raw)) else "{}"   # a string of it
    if r < 0.75:
        return rng.choice([None, True, False, [], Obj(), [1], Obj([["a", 1]]), [None, "x"],
                           Obj([["", Obj()]])])
    if r < 0.85:
        return [v]                     # wrapped
    if r < 0.9:
        return Obj([["v", v]])
    d = rng.choice([2, 64, 5000])
    return Raw("[" * d + "]" * d)


def rename(rng, key):
    return rng.choice([key + "_", key[:-1], key.upper(), "", " " + key, key + "\n",
                       key + "\u0000x", "__metadata__", "x" * 3000, key.replace("_", "-"),
                       key + "." + key, "step", "format"])


def json_edit(rng, root, path=None, dotted=None):
    """One structural edit of the parsed JSON root (returns the new root and
    what was done). path: the node to edit (default: one at random)."""
    if path is None:
        all_paths = [p for p, _ in nodes(root)]
        path = rng.choice(all_paths[1:] if len(all_paths) > 1 else all_paths)
    name = dotted or node_name(root, path)
    v = get_at(root, path)
    parent = parent_of(root, path) if path else None
    r = rng.random()
    if isinstance(v, (int, float)) and not isinstance(v, bool) and r < 0.6:
        nv = number_edit(rng, v)
        return set_at(root, path, nv), "%s = %s" % (name, jdump(nv)[:40])
    if parent is not None and r < 0.7:
        if isinstance(parent, Obj):
            what = rng.choice(["delete", "duplicate", "rename", "add"])
            i = path[-1]
            if what == "delete":
                del parent[i]
                return root, "%s deleted" % name
            if what == "duplicate":
                parent.insert(rng.randrange(len(parent) + 1), [parent[i][0], any_value(rng, v)])
                return root, "%s duplicated" % name
            if what == "rename":
                parent[i][0] = rename(rng, parent[i][0])
                return root, "%s renamed %s" % (name, json.dumps(parent[i][0])[:40])
            parent.insert(rng.randrange(len(parent) + 1), [rename(rng, parent[i][0]), v])
            return root, "a key beside %s" % name
        what = rng.choice(["delete", "append"])
        if what == "delete":
            del parent[path[-1]]
            return root, "%s deleted" % name
        parent.append(any_value(rng, v))
        return root, "an element after %s" % name
    if isinstance(v, list) and not isinstance(v, Obj) and r < 0.8:
        nv = rng.choice([[], v + v, v[::-1], v[:1]])
        return set_at(root, path, nv), "%s = %s" % (name, jdump(nv)[:40])
    nv = any_value(rng, v)
    return set_at(root, path, nv), "%s = %s" % (name, jdump(nv)[:40])


# ---- byte edits ----------------------------------------------------------------
def byte_edit(rng, data, lo=0, hi=None, what="file"):
    """One edit of bytes [lo, hi) of data (the whole file by default)."""
    data = bytearray(data)
    hi = len(data) if hi is None else min(hi, len(data))
    if hi <= lo:
        return bytes(data) + b"\x00", "%s: a NUL appended" % what
    at = rng.randrange(lo, hi)
    r = rng.random()
    if r < 0.3:
        bit = rng.randrange(8)
        data[at] ^= 1 << bit
        return bytes(data), "%s: bit %d of byte %d flipped" % (what, bit, at)
    if r < 0.45:
        b = rng.choice([0, 0xFF, 0x7F, 0x80, ord("{"), ord('"'), ord(","), ord("9"), ord("-")])
        data[at] = b
        return bytes(data), "%s: byte %d = 0x%02x" % (what, at, b)
    if r < 0.6:
        cut = rng.choice([0, 1, 7, 8, 9, 1023, 1024, 1025, at, len(data) - 1])
        cut = max(0, min(cut, len(data)))
        return bytes(data[:cut]), "%s: cut to %d bytes" % (what, cut)
    if r < 0.72:
        tail = rng.choice([b"\x00", b"\x00\x00", b"x", b"\n", b" " * 8, b"}", b"]}",
                           bytes(rng.randrange(256) for _ in range(rng.randrange(1, 600)))])
        return bytes(data) + tail, "%s: %d bytes appended" % (what, len(tail))
    if r < 0.82:
        n = rng.randrange(1, 17)
        del data[at:at + n]
        return bytes(data), "%s: %d bytes deleted at %d" % (what, n, at)
    if r < 0.92:
        ins = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        data[at:at] = ins
        return bytes(data), "%s: %d bytes inserted at %d" % (what, len(ins), at)
    n = rng.randrange(1, 64)
    data[at:at] = data[at:at + n]
    return bytes(data), "%s: %d bytes repeated at %d" % (what, n, at)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


# ---- the inputs' own formats -------------------------------------------------------
CK = "ck/step_000002"
STATE = CK + "/state.json"
CHECKSUM_LINE = b'\n  "checksum": "'


def reseal(text):
    """state.json with its own checksum made right for its text again, where
    the text still has a checksum line of 8 characters to write into."""
    at = text.rfind(CHECKSUM_LINE)
    hexat = at + len(CHECKSUM_LINE)
    if at < 0 or len(text) < hexat + 8:
        return text
    return text[:hexat] + b"%08x" % crc32c(text[:at + 1]) + text[hexat + 8:]


def state_text(obj):
    """state.json's text for obj (its last pair the checksum, as written),
    sealed."""
    return reseal(jdump(obj, indent=2).encode() + b"\n")


def record_file(world, name):
    """state.json's files.NAME made to describe the file as it now is."""
    path = os.path.join(world, CK, name)
    st = jparse(read(os.path.join(world, STATE)))
    rec = find_state(st, "files." + name) if st is not None else None
    if rec is None or not isinstance(get_at(st, rec), Obj):
        return
    data = read(path)
    get_at(st, rec)[:] = Obj([["bytes", len(data)], ["crc32c", "%08x" % crc32c(data)]])
    write(os.path.join(world, STATE), state_text(st))


def shard_edit(rng, data):
    """One edit of a token shard (256 x int32 header, then uint16 tokens)."""
    r = rng.random() if len(data) >= 1024 else 1.0
    if r < 0.45:
        field = rng.choice([0, 1, 2, 2, 3, 255])
        names = {0: "magic", 1: "version", 2: "count"}
        old = struct.unpack_from("<i", data, 4 * field)[0]
        new = rng.choice([0, -1, 1, 2, old + 1, old - 1, old * 2, 2**31 - 1, -2**31, 20240520,
                          (len(data) - 1024) // 2, (len(data) - 1024) // 2 + 1, 0x7fff0000])
        new = (new + 2**31) % 2**32 - 2**31          # as the int32 it is stored as
        out = bytearray(data)
        struct.pack_into("<i", out, 4 * field, new)
        return bytes(out), "shard header %s = %d" % (names.get(field, "[%d]" % field), new)
    if r < 0.55:                   # a valid shard of another length
        toks = data[1024:1024 + (len(data) - 1024) // 2 * 2]
        n = len(toks) // 2
        k = max(0, rng.choice([0, 1, 7, 8, 9, 16, 17, 33, n // 2, n - 1, n + 1, 2 * n]))
        toks = (toks * (k // max(n, 1) + 1))[:2 * k] if n else bytes(2 * k)
        out = bytearray(data[:1024])
        struct.pack_into("<i", out, 8, k)
        return bytes(out) + toks, "shard of %d tokens (count and size agree)" % k
    if r < 0.65:
        t = rng.randrange(max(1, (len(data) - 1024) // 2))
        v = rng.choice([16, 17, 255, 256, 32767, 65535])
        out = bytearray(data)
        if 1024 + 2 * t + 2 <= len(out):
            struct.pack_into("<H", out, 1024 + 2 * t, v)
        return bytes(out), "shard token %d = %d" % (t, v)
    if rng.random() < 0.5 or len(data) <= 1024:
        return byte_edit(rng, data, 0, 1024, "shard header")
    return byte_edit(rng, data, 1024, None, "shard tokens")


def st_split(data):
    n = struct.unpack_from("<Q", data)[0] if len(data) >= 8 else 0
    return n, data[8:8 + n], data[8 + n:]


DTYPES = ["F32", "F16", "BF16", "F64", "I32", "I64", "U8", "BOOL", "F8_E4M3", "f32", "", "F32 "]
CODECS = {"F32": ("<%df", 4), "F64": ("<%dd", 8), "F16": ("<%de", 2), "BF16": (None, 2)}


def st_tensors(root, body):
    """[(name, entry, values)] of a well-formed header and data, in the order
    of their data, or None."""
    try:
        out = []
        for name, e in root:
            if name == "__metadata__":
                continue
            e = dict(e)
            if "shape" not in e:       # kept as it is, whatever else it holds
                return None
            fmt, size = CODECS[e["dtype"]]
            a, b = e["data_offsets"]
            if not (0 <= a <= b <= len(body)) or (b - a) % size:
                return None
            raw = body[a:b]
            if fmt is None:
                vals = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0]
                        for i in range(0, len(raw), 2)]
            else:
                vals = list(struct.unpack(fmt % ((b - a) // size), raw))
            out.append((name, e, vals, a))
        return [t[:3] for t in sorted(out, key=lambda t: t[3])]
    except (TypeError, ValueError, KeyError, struct.error):
        return None


def st_reencode(rng, root, body):
    """A valid file of the same tensors, one of them stored in another float
    dtype (its values rounded to it), the others moved to make room."""
    ts = st_tensors(root, body)
    pick = rng.randrange(len(ts))
    dtype = rng.choice(["F16", "BF16", "F64"])
    hdr, data = Obj(), b""
    meta = [kv for kv in root if kv[0] == "__metadata__"]
    hdr.extend(meta)
    for i, (name, e, vals) in enumerate(ts):
        d = dtype if i == pick else e["dtype"]
        fmt, _ = CODECS[d]
        if fmt is None:
            raw = b"".join(struct.pack("<f", v)[2:] for v in vals)
        elif d == "F16":               # past 65504 a half is infinite, as in a real cast
            raw = b"".join(struct.pack("<e", v if abs(v) <= 65504 or v != v else
                                       math.copysign(INF, v)) for v in vals)
        else:
            raw = struct.pack(fmt % len(vals), *vals)
        hdr.append([name, Obj([["dtype", d], ["shape", e["shape"]],
                               ["data_offsets", [len(data), len(data) + len(raw)]]])])
        data += raw
    text = jdump(hdr).encode()
    return struct.pack("<Q", len(text)) + text + data, "%s stored as %s" % (ts[pick][0], dtype)


def st_edit(rng, data):
    """One edit of a safetensors file (u64 header length, JSON header, data)."""
    n, hdr, body = st_split(data)
    root = jparse(hdr) if 8 + n <= len(data) else None
    r = rng.random()
    if r < 0.7 and root is None:           # an earlier edit left no header to edit
        r = 0.7
    if r < 0.1 and 8 + n == len(data) - len(body) and st_tensors(root, body) is not None:
        return st_reencode(rng, root, body)
    if r < 0.2:
        new = rng.choice([0, 1, 2, 7, n - 1, n + 1, n + 8, len(data), len(data) - 8, 2**31,
                          2**32, 2**63 - 1, 2**63, 2**64 - 1])
        return struct.pack("<Q", new) + data[8:], "safetensors header length = %d" % new
    if r < 0.7:
        names = [k for k, _ in root if k != "__metadata__"] if isinstance(root, Obj) else []
        if names and rng.random() < 0.8:
            t = rng.choice(names)
            field = rng.choice(["dtype", "shape", "data_offsets", "data_offsets", None])
            path = find(root, t + "." + field) if field else find(root, t)
            if path is not None and field == "dtype" and rng.random() < 0.6:
                d = rng.choice(DTYPES)
                set_at(root, path, d)
                what = "%s.dtype = %s" % (t, json.dumps(d))
            elif path is not None and field in ("shape", "data_offsets") and rng.random() < 0.6:
                vals = list(get_at(root, path))
                if vals:
                    i = rng.randrange(len(vals))
                    vals[i] = number_edit(rng, vals[i])
                else:
                    vals = [number_edit(rng, 0)]
                set_at(root, path, vals)
                what = "%s.%s = %s" % (t, field, jdump(vals)[:60])
            elif path is not None:
                root, what = json_edit(rng, root, path, t + ("." + field if field else ""))
            else:
                root, what = json_edit(rng, root)
        else:
            root, what = json_edit(rng, root)
        text = jdump(root).encode()
        if rng.random() < 0.15:                     # the old length kept
            return struct.pack("<Q", n) + text + body, "header: %s, old length kept" % what
        return struct.pack("<Q", len(text)) + text + body, "header: " + what
    if r < 0.85 or 8 + n >= len(data):
        return byte_edit(rng, data, 0, 8 + n, "safetensors header")
    return byte_edit(rng, data, 8 + n, None, "safetensors data")


STATE_FIELDS = ["step", "step", "data_position", "data_position", "format", "loss", "time",
                "data.shard", "data.shard_bytes", "data.head_crc32c", "data.micro_batches",
                "data.replicas", "data.micro_batch_size", "data.seq_len",
                "files.model.safetensors.bytes", "files.model.safetensors.crc32c",
                "files.optimizer.safetensors.bytes", "files.optimizer.safetensors.crc32c",
                "files.config.json.bytes", "files.config.json.crc32c", "checksum",
                "config.train.steps", "config.schedule.micro_batches", "config.model.vocab"]


def find_state(root, dotted):
    """find(), knowing that the files' names hold a dot."""
    for f in ("model.safetensors", "optimizer.safetensors", "config.json"):
        if dotted.startswith("files." + f):
            p = find(root, "files")
            if p is None:
                return None
            files = get_at(root, p)
            for i, (k, _) in enumerate(files if isinstance(files, Obj) else []):
                if k == f:
                    rest = dotted[len("files." + f) + 1:]
                    sub = find(files[i][1], rest) if rest else ()
                    return None if sub is None else p + (i,) + sub
            return None
    return find(root, dotted)


def state_edit(rng, text):
    """One edit of state.json, re-sealed unless the edit is of the seal or
    left unsealed on purpose."""
    root = jparse(text)
    r = rng.random() if root is not None else 0.0
    if r < 0.2:
        out, what = byte_edit(rng, text, 0, None, "state.json")
        if rng.random() < 0.8:
            return reseal(out), what + ", re-sealed"
        return out, what
    if r < 0.3 and isinstance(root, Obj):       # format 1: no checksums at all
        root = Obj([kv for kv in root if kv[0] not in ("checksum", "files")])
        p = find(root, "format")
        if p is not None:
            set_at(root, p, 1)
        f = rng.choice(STATE_FIELDS[:14])
        p = find(root, f)
        what = "format 1"
        if p is not None:
            root, w = json_edit(rng, root, p, f)
            what += ", " + w
        return jdump(root, indent=2).encode() + b"\n", what
    if r < 0.75:
        f = rng.choice(STATE_FIELDS)
        p = find_state(root, f)
        if p is None:
            root, what = json_edit(rng, root)
        elif f.endswith("crc32c") or f == "checksum":
            v = rng.choice(STRINGS[-4:] + ["", "ffffffff", "00000000", 123, None])
            set_at(root, p, v)
            what = "%s = %s" % (f, jdump(v))
        else:
            root, what = json_edit(rng, root, p, f)
    else:
        root, what = json_edit(rng, root)
    sealed = "checksum" not in what and rng.random() < 0.9
    out = jdump(root, indent=2).encode() + b"\n"
    return (reseal(out) if sealed else out), what + (", re-sealed" if sealed else "")


def config_edit(rng, text):
    root = jparse(text)
    if root is None or rng.random() < 0.3:
        return byte_edit(rng, text, 0, None, "config")
    root, what = json_edit(rng, root)
    return (jdump(root, indent=rng.choice([None, 2])) + "\n").encode(), what


# ---- the world every case starts from ----------------------------------------------
CONFIG = {
    "model": {"kind": "gpt", "layers": 4, "d_model": 8, "heads": 2, "seq_len": 8,
              "vocab": 16},
    "schedule": {"kind": "hanayo", "ranks": 2, "waves": 1, "micro_batches": 2,
                 "micro_batch_size": 1},
    "train": {"steps": 3, "log_every": 1, "warmup_steps": 2},
    "data": {"train": "train.bin", "val": None},
    "checkpoint": {"dir": "ck", "every": 1},
    "backend": "cpu",      # the same cost on a machine with a GPU: inputs are under test
}


def shard(n, salt):
    h = [0] * 256
    h[0], h[1], h[2] = 20240520, 1, n
    return struct.pack("<256i", *h) + struct.pack(
        "<%dH" % n, *[(i * 7 + i // 5 + salt) % 16 for i in range(n)])


def make_world(base):
    os.makedirs(base)
    write(os.path.join(base, "cfg.json"), (json.dumps(CONFIG, indent=2) + "\n").encode())
    write(os.path.join(base, "train.bin"), shard(400, 3))
    write(os.path.join(base, "val.bin"), shard(120, 5))
    for name in ("tiny-gpt.json", "tiny-bert.json", "gpt2-124m.json", "bert-base.json"):
        shutil.copy(os.path.join(ROOT, "configs", name), os.path.join(base, name))
    p = subprocess.run([HANAYO, "train", "cfg.json", "--set", "train.steps=2"], cwd=base,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT)
    if p.returncode != 0:
        raise RuntimeError("training the base checkpoint failed: " +
                           p.stderr.decode(errors="replace")[:400])
    shutil.copy(os.path.join(base, CK, "model.safetensors"),
                os.path.join(base, "init.safetensors"))
    for a in (["checkpoint", "verify", "ck"], ["eval", "cfg.json", "--init", "init.safetensors"]):
        p = subprocess.run([HANAYO] + a, cwd=base, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=TIMEOUT)
        if p.returncode != 0:
            raise RuntimeError("hanayo %s on the base world: exit %d: %s" % (
                " ".join(a), p.returncode, p.stderr.decode(errors="replace")[:400]))


TRAIN = ["train", "cfg.json", "--log-json", "log.jsonl"]


def damage(rng, world):
    """Damages the world of one case; returns (what was done, the command)."""
    def at(rel):
        return os.path.join(world, rel)

    def edits(path, edit, n):
        data, whats = read(path), []
        for _ in range(n):
            data, w = edit(rng, data)
            whats.append(w)
        write(path, data)
        return "; ".join(whats)

    n = rng.choice([1, 1, 1, 2, 2, 3])
    kind = rng.choice(["config", "config", "shard-eval", "shard-train", "st-init", "st-ck",
                       "st-ck", "st-ck", "state", "state", "state", "state", "ck-config"])
    if kind == "config":
        name = rng.choice(["cfg.json", "cfg.json", "tiny-gpt.json", "tiny-bert.json",
                           "gpt2-124m.json", "bert-base.json"])
        return "%s: %s" % (name, edits(at(name), config_edit, n)), ["check", name]
    if kind == "shard-eval":
        return "val.bin: " + edits(at("val.bin"), shard_edit, n), \
            ["eval", "cfg.json", "--data", "val.bin"]
    if kind == "shard-train":
        what = "train.bin: " + edits(at("train.bin"), shard_edit, n)
        if rng.random() < 0.7:
            st = jparse(read(at(STATE)))
            data = read(at("train.bin"))
            for f, v in (("data.shard_bytes", len(data)),
                         ("data.head_crc32c", "%08x" % crc32c(data[:65536]))):
                p = find(st, f)
                if p is not None:
                    set_at(st, p, v)
            write(at(STATE), state_text(st))
            what += "; state.json's record of it updated"
        return what, TRAIN + ["--resume", CK]
    if kind == "st-init":
        return "init.safetensors: " + edits(at("init.safetensors"), st_edit, n), \
            ["eval", "cfg.json", "--init", "init.safetensors"]
    if kind == "st-ck" or kind == "ck-config":
        name = "config.json" if kind == "ck-config" else rng.choice(
            ["model.safetensors", "model.safetensors", "optimizer.safetensors"])
        what = "%s/%s: %s" % (CK, name, edits(at(CK + "/" + name),
                                              config_edit if kind == "ck-config" else st_edit, n))
        if rng.random() < 0.85:
            record_file(world, name)
            what += "; recorded in state.json"
        cmds = [TRAIN + ["--resume", CK], TRAIN + ["--resume", CK], ["checkpoint", "verify", "ck"]]
        if name == "model.safetensors":
            cmds.append(["eval", "cfg.json", "--init", CK + "/model.safetensors"])
        return what, rng.choice(cmds)
    what = STATE + ": " + edits(at(STATE), state_edit, n)
    return what, rng.choice([TRAIN + ["--resume", CK], TRAIN + ["--resume", CK],
                             TRAIN + ["--resume", "ck"], ["checkpoint", "verify", "ck"],
                             ["checkpoint", "verify", CK]])


# ---- what a case may and may not do --------------------------------------------------
FLOATS = {"F32": ("<f", 4), "F64": ("<d", 8), "F16": ("<e", 2), "BF16": (None, 2)}


def tensors_finite(path):
    """Whether every tensor of the safetensors file at path holds only
    finite numbers (and AdamW's second moments, v.*, none below 0), read as
    hanayo reads it (its header's length, each tensor's dtype and
    data_offsets): True, False, or None where it cannot be read so."""
    try:
        data = read(path)
        n = struct.unpack_from("<Q", data)[0]
        hdr = json.loads(data[8:8 + n])
        base = 8 + n
        for name, t in hdr.items():
            if name == "__metadata__":
                continue
            fmt, size = FLOATS[t["dtype"]]
            a, b = t["data_offsets"]
            chunk = data[base + a:base + b]
            if not 0 <= a <= b <= len(data) - base or len(chunk) % size:
                return None
            for i in range(0, len(chunk), size):
                if fmt is None:
                    x = struct.unpack("<f", b"\0\0" + chunk[i:i + 2])[0]
                else:
                    x = struct.unpack_from(fmt, chunk, i)[0]
                if x != x or x in (INF, -INF):
                    return False
                if name.startswith("v.") and x < 0:   # AdamW's second moment
                    return False
        return True
    except (ValueError, KeyError, TypeError, AttributeError, struct.error, OSError):
        return None


def finite_inputs(world, cmd):
    """Whether every weight the command loads is finite (None: unknown)."""
    if cmd[0] == "train":
        files = [CK + "/model.safetensors", CK + "/optimizer.safetensors"]
    elif "--init" in cmd:
        files = [cmd[cmd.index("--init") + 1]]
    else:
        return None
    got = [tensors_finite(os.path.join(world, f)) for f in files]
    return None if None in got else all(got)


def snapshot(world):
    """{relative path: what it is} for everything under world."""
    seen = {}
    for d, dirs, files in os.walk(world):
        for name in dirs + files:
            p = os.path.join(d, name)
            rel = os.path.relpath(p, world)
            st = os.lstat(p)
            if os.path.islink(p):
                seen[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                seen[rel] = ("dir", st.st_mode & 0o7777)
            else:
                seen[rel] = ("file", st.st_mode & 0o7777, hashlib.sha256(read(p)).hexdigest())
    return seen


NEW_STEP = re.compile(r"^ck/step_\d{6}(/[^/]+)?$")
SANITIZER = re.compile(r"Sanitizer|runtime error:|==\d+==ERROR")


def strict_json(text):
    def no(c):
        raise ValueError("non-JSON number " + c)
    json.loads(text, parse_constant=no)


# The one exit 1 damaged input may give, and why it is not bad input:
# weights that are all finite (second moments not below 0), valid numbers
# each, whose training step still overflows to a non-finite loss or
# gradient (a weight of 3e38 is a float). hanayo cannot tell them from good
# weights without running them; it stops as train.on_nonfinite "stop" says,
# exit 1, saving nothing of that step. Weights holding NaN or infinity are
# bad input and must be refused (exit 2) as they load.
NONFINITE_STEP = "non-finite loss/gradient"


def judge(world, cmd, rc, out, err, before, after):
    """What is wrong with the case's outcome (empty when nothing)."""
    wrong = []
    errlines = err.splitlines()
    if rc is None:
        return ["hung: killed after %g s" % TIMEOUT]
    m = SANITIZER.search(err)
    if m:
        line = err[err.rfind("\n", 0, m.start()) + 1:].split("\n", 1)[0]
        wrong.append("sanitizer report: " + line[:160])
    if rc < 0 or rc >= 128:
        wrong.append("killed by signal %d" % (-rc if rc < 0 else rc - 128))
    elif rc == 1 and cmd[0] == "train" and NONFINITE_STEP in err and \
            finite_inputs(world, cmd) is True:
        pass    # the one exception: finite weights whose step overflowed (above)
    elif rc not in (0, 2):
        wrong.append("exit %d (bad input must exit 2): %s" % (rc, (errlines or [""])[0][:160]))
    if rc == 2:
        if len(errlines) != 1 or not errlines[0].startswith("hanayo: "):
            wrong.append("stderr is not one 'hanayo: ' line")
        if out and cmd[0] != "checkpoint":
            wrong.append("printed on stdout as it failed")
    if rc == 0:
        # eval says on stderr which weights it scored (its stdout is JSON)
        said = ("hanayo: ", "warning: ") + (("weights: ",) if cmd[0] == "eval" else ())
        if any(not l.startswith(said) for l in errlines):
            wrong.append("stray lines on stderr")
        if cmd[0] in ("check", "eval"):
            try:
                strict_json(out)
            except ValueError as e:
                wrong.append("stdout is not JSON (%s)" % str(e)[:60])
    added = sorted(set(after) - set(before))
    gone = sorted(set(before) - set(after))
    changed = sorted(p for p in set(before) & set(after) if before[p] != after[p])
    may_add = rc != 2 and cmd[0] == "train"
    bad_add = [p for p in added if not (may_add and (p == "log.jsonl" or (
        NEW_STEP.match(p) and p.split("/")[0] + "/" + p.split("/")[1] not in before)))]
    for what, paths in (("changed", changed), ("removed", gone), ("created", bad_add)):
        if paths:
            wrong.append("%s %s" % (what, ", ".join(paths[:4]) +
                                    (" (+%d)" % (len(paths) - 4) if len(paths) > 4 else "")))
    return wrong


def run_case(k, base, scratch):
    global passed, known
    rng = random.Random("%d:%d" % (SEED, k))
    world = os.path.join(KEEP or scratch, "case_%d" % k)
    if os.path.exists(world):
        shutil.rmtree(world)
    shutil.copytree(base, world, symlinks=True)
    what, cmd = damage(rng, world)
    before = snapshot(world)
    p = subprocess.Popen([HANAYO] + cmd, cwd=world, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=TIMEOUT)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        rc = None
    out = out.decode(errors="replace")
    err = err.decode(errors="replace")
    after = snapshot(world)
    wrong = judge(world, cmd, rc, out, err, before, after)
    if not wrong and rc == 0 and cmd[0] == "train" and "log.jsonl" in after:
        try:
            for line in read(os.path.join(world, "log.jsonl")).decode().splitlines():
                strict_json(line)
        except ValueError as e:
            wrong.append("log.jsonl is not JSON lines (%s)" % str(e)[:60])
    if not wrong and rc == 0 and cmd[0] == "train":
        for p in sorted(set(after) - set(before)):
            if p.endswith(".safetensors") and tensors_finite(os.path.join(world, p)) is not True:
                wrong.append("saved %s holds a non-finite value" % p)
    case = "case %d (seed %d): %s; hanayo %s" % (k, SEED, what, " ".join(cmd))
    result = "%s: %s" % ("no exit" if rc is None else "exit %d" % rc, "; ".join(wrong))
    if VERBOSE:
        print("%s: exit %s: %s" % (case, "none (hung)" if rc is None else rc,
                                    (err.strip().splitlines() or [""])[-1][:200]))
    why = []
    for problem in wrong:
        e = next((e for e in KNOWN if re.search(e["case"], case) and
                  re.search(e["fail"], problem)), None)
        if e is None:
            why = None
            break
        if e["why"] not in why:
            why.append(e["why"])
    if KEEP is None:
        shutil.rmtree(world)
    if not wrong:
        passed += 1
        return rc
    if why:
        known += 1
        print("known (%s): %s: %s" % (", ".join(why), case, result))
        return rc
    first = (err.strip().splitlines() or [""])[0][:300]
    fail("%s: %s; stderr: %s\n  repro: MUTATE_SEED=%d MUTATE_CASE=%d MUTATE_KEEP=/tmp/m "
         "HANAYO=%s %s tests/test_mutate.py" % (case, result, first, SEED, k, HANAYO,
                                                  sys.executable))
    return rc


def main():
    if not os.access(HANAYO, os.X_OK):
        print("mutate: %s is not an executable; build it or set HANAYO" % HANAYO,
              file=sys.stderr)
        print("mutate: 0 passed, 1 failed")
        return 1
    # In memory where there is /dev/shm: every train case saves a checkpoint,
    # and its fsyncs on a busy disk would cost more than the case.
    shm = "/dev/shm" if "TMPDIR" not in os.environ and os.access("/dev/shm", os.W_OK) else None
    scratch = tempfile.mkdtemp(prefix="hy_test_mutate.", dir=shm)
    try:
        base = os.path.join(scratch, "base")
        try:
            make_world(base)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            fail(str(e))
            print("mutate: 0 passed, 1 failed")
            return 1
        t0 = time.monotonic()
        outcomes = {}
        k = int(ONLY) if ONLY is not None else 0
        while True:
            if ONLY is not None and k > int(ONLY):
                break
            if ONLY is None and (time.monotonic() - t0 > SECONDS if SECONDS > 0 else k >= CASES):
                break
            rc = run_case(k, base, scratch)
            outcomes[rc] = outcomes.get(rc, 0) + 1
            k += 1
        print("mutate: seed %d, %d cases in %.0f s; exit status: %s; known: %d" % (
            SEED, sum(outcomes.values()), time.monotonic() - t0,
            ", ".join("%s x%d" % ("hung" if r is None else r, n)
                      for r, n in sorted(outcomes.items(), key=str)), known))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("mutate: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
