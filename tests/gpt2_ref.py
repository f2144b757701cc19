#!/usr/bin/env python3
"""gpt2_ref.py — an independent GPT-2 reference in numpy (DESIGN §6.6 "Independent references").

Written from the equations alone, sharing no code with hanayo, so that
tests/test_reference.py can check that hanayo's loss on the same weights and
tokens equals this one's (within 1e-4 relative). Python 3 standard library
and numpy only: no safetensors, torch or transformers packages.

What is here (all usable as a module: `import gpt2_ref`):

  read_safetensors / write_safetensors
      The safetensors format by hand: 8-byte little-endian header length N,
      N bytes of JSON ({name: {"dtype", "shape", "data_offsets": [b, e]}},
      optional "__metadata__"), then the data buffer. Reads F32, BF16 (to
      f32 by shifting the 16 bits up), F16, F64 and the integer types;
      writes F32 (or BF16, rounded to nearest even); the header is padded
      with spaces to a multiple of 8.
  read_shard / write_shard
      llm.c token shards: 256 little-endian int32 (magic 20240520, version 1,
      token count, rest zero), then the tokens as little-endian uint16.
  gpt2_greedy
      Greedy decoding as transformers' generate(do_sample=False) does it.
  gpt2_logits / gpt2_token_losses / gpt2_loss
      GPT-2's forward in float64 from Hugging Face GPT-2 names and layouts
      (a "transformer." prefix is accepted): token + learned position
      embedding; pre-LN blocks (LayerNorm eps 1e-5, biased variance; self-
      attention with q|k|v split from c_attn's [d, 3d] output, head h using
      columns h*hd:(h+1)*hd of each part, scale 1/sqrt(hd), causal unless
      causal=False; c_proj; residual; LayerNorm; MLP c_fc [d, 4d], tanh-GELU,
      c_proj [4d, d]; residual); final LayerNorm; logits = x . wte^T over the
      real vocabulary; cross-entropy per position. causal=False is the
      BERT-like variant; targets equal to -1 are ignored by the loss.
  shard_loss
      The loss `hanayo eval` reports: n batches read in order from the start
      of a shard, llm.c's layout (batch k is tokens [k*B*T, k*B*T + B*T + 1):
      inputs are B rows of T, targets the same shifted by one; when fewer
      than B*T+1 tokens remain the read restarts at token 0, as lib/data.h
      does), the mean over batches of each batch's mean token loss.
  init_weights
      Random GPT-2-shaped weights with non-trivial biases and LayerNorm
      parameters, so a comparison exercises every parameter.

Command line (run from anywhere):

  gpt2_ref.py loss --weights W.safetensors --data SHARD --batch-size B
                   --seq-len T --heads NH --batches N [--vocab V] [--bidirectional]
      prints {"loss": x, "batches": n, "tokens": t}, the line `hanayo eval`
      prints.
  gpt2_ref.py greedy --weights W.safetensors --heads NH --prompt 1,2,3 --max-len T
                     [--vocab V]
      prints the ids greedy decoding adds to the prompt until it holds T
      tokens, space-separated: the line `hanayo sample --temperature 0` prints.
  gpt2_ref.py init --out W.safetensors --layers L --d-model C --heads NH
                   --seq-len T --vocab V --seed S [--std STD] [--dtype F32|BF16]
                   [--prefix transformer.]
  gpt2_ref.py selftest   (also what a run with no arguments does)
      a few quick checks; prints "gpt2_ref: N passed, N failed". The Makefile
      runs every tests/*.py as a test, this file included, so a bare run
      must be a test; tests/test_reference.py holds the full set.
"""
import argparse
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np

LN_EPS = 1e-5
SHARD_MAGIC = 20240520
SHARD_VERSION = 1
SHARD_HEADER_INTS = 256

# ---------------------------------------------------------------------------
# safetensors

_ST_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"), "U64": np.dtype("<u8"), "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
    "BF16": np.dtype("<u2"),  # stored as raw bits; widened to f32 on read
}


def bf16_bits_to_f32(bits):
    """uint16 bfloat16 bit patterns -> float32 (exact: the top half of f32)."""
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> uint16 bfloat16 bits, rounded to nearest even; NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    out = np.where(nan, (u >> 16) | 0x40, rounded)
    return out.astype(np.uint16)


def read_safetensors(path, with_metadata=False):
    """{name: ndarray}; F32 and BF16 come back as float32, other dtypes as
    themselves. with_metadata=True returns (tensors, metadata dict)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("%s: %d bytes, too short for a safetensors header" % (path, len(blob)))
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise ValueError("%s: header length %d past the end of the file" % (path, n))
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", None) or {}
    out = {}
    for name, info in header.items():
        dt = info["dtype"]
        if dt not in _ST_DTYPES:
            raise ValueError("%s: tensor %r has unsupported dtype %s" % (path, name, dt))
        shape = tuple(int(s) for s in info["shape"])
        b, e = (int(v) for v in info["data_offsets"])
        np_dt = _ST_DTYPES[dt]
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (0 <= b <= e <= len(data)) or e - b != count * np_dt.itemsize:
            raise ValueError("%s: tensor %r: data_offsets [%d, %d] do not fit %s %s in a %d-byte buffer"
                             % (path, name, b, e, dt, list(shape), len(data)))
        arr = np.frombuffer(data, dtype=np_dt, count=count, offset=b).reshape(shape)
        if dt == "BF16":
            arr = bf16_bits_to_f32(arr)
        out[name] = arr.astype(arr.dtype.newbyteorder("="), copy=True)
    return (out, meta) if with_metadata else out


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    """Writes {name: array} as F32 (or BF16, round to nearest even), in
    name order. metadata defaults to {"format": "pt"} (what transformers
    wants to see)."""
    if dtype not in ("F32", "BF16"):
        raise ValueError("write_safetensors writes F32 or BF16, not %s" % dtype)
    header = {"__metadata__": dict(metadata) if metadata is not None else {"format": "pt"}}
    chunks, off = [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name], dtype=np.float32)
        raw = (f32_to_bf16_bits(a).astype("<u2") if dtype == "BF16" else a.astype("<f4")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    hdr = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hdr += b" " * (-len(hdr) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)))
        f.write(hdr)
        for c in chunks:
            f.write(c)


# ---------------------------------------------------------------------------
# llm.c token shards

def write_shard(path, tokens):
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or tokens.size < 1:
        raise ValueError("a shard holds a non-empty 1-D token sequence")
    if tokens.min() < 0 or tokens.max() > 65535:
        raise ValueError("shard tokens must fit uint16")
    header = np.zeros(SHARD_HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, tokens.size
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())


def read_shard(path):
    """The tokens of an llm.c shard, as an int64 array (header checked)."""
    with open(path, "rb") as f:
        blob = f.read()
    hb = SHARD_HEADER_INTS * 4
    if len(blob) < hb:
        raise ValueError("%s: %d bytes, shorter than the 1024-byte header" % (path, len(blob)))
    header = np.frombuffer(blob, dtype="<i4", count=SHARD_HEADER_INTS)
    if header[0] != SHARD_MAGIC:
        raise ValueError("%s: magic %d, expected %d" % (path, header[0], SHARD_MAGIC))
    if header[1] != SHARD_VERSION:
        raise ValueError("%s: version %d, expected %d" % (path, header[1], SHARD_VERSION))
    n = int(header[2])
    if n < 1 or len(blob) != hb + 2 * n:
        raise ValueError("%s: header says %d tokens, file has %d bytes (expected %d)"
                         % (path, n, len(blob), hb + 2 * n))
    return np.frombuffer(blob, dtype="<u2", count=n, offset=hb).astype(np.int64)


# ---------------------------------------------------------------------------
# the model

def normalize_weights(weights, vocab=None):
    """Strips a "transformer." prefix, converts to float64, checks shapes.
    Returns (params, dims) with dims = dict(L, d, V, T). Unknown names (HF's
    attn.bias mask buffers, lm_head.weight) are ignored; the head is wte.
    vocab < wte rows uses only the first vocab rows (a padded vocabulary)."""
    p = {}
    for k, v in weights.items():
        name = k[len("transformer."):] if k.startswith("transformer.") else k
        p[name] = np.asarray(v, dtype=np.float64)
    for need in ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"):
        if need not in p:
            raise ValueError("weights lack %s" % need)
    V, d = p["wte.weight"].shape
    if vocab is not None:
        if not 0 < vocab <= V:
            raise ValueError("vocab %d but wte has %d rows" % (vocab, V))
        V = vocab
        p["wte.weight"] = p["wte.weight"][:V]
    T = p["wpe.weight"].shape[0]
    L = 0
    while "h.%d.ln_1.weight" % L in p:
        L += 1
    shapes = {"ln_1.weight": (d,), "ln_1.bias": (d,),
              "attn.c_attn.weight": (d, 3 * d), "attn.c_attn.bias": (3 * d,),
              "attn.c_proj.weight": (d, d), "attn.c_proj.bias": (d,),
              "ln_2.weight": (d,), "ln_2.bias": (d,),
              "mlp.c_fc.weight": (d, 4 * d), "mlp.c_fc.bias": (4 * d,),
              "mlp.c_proj.weight": (4 * d, d), "mlp.c_proj.bias": (d,)}
    for i in range(L):
        for suffix, shape in shapes.items():
            name = "h.%d.%s" % (i, suffix)
            if name not in p:
                raise ValueError("weights lack %s" % name)
            if p[name].shape != shape:
                raise ValueError("%s has shape %s, expected %s" % (name, p[name].shape, shape))
    for name, shape in (("wpe.weight", (T, d)), ("ln_f.weight", (d,)), ("ln_f.bias", (d,))):
        if p[name].shape != shape:
            raise ValueError("%s has shape %s, expected %s" % (name, p[name].shape, shape))
    return p, {"L": L, "d": d, "V": V, "T": T}


def layer_norm(x, w, b, eps=LN_EPS):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)   # biased
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(x, w, b, wo, bo, n_heads, causal=True):
    """x [B, T, d] -> [B, T, d]: c_attn, per-head softmax(q k^T / sqrt(hd)) v,
    heads concatenated, c_proj."""
    B, T, d = x.shape
    hd = d // n_heads
    qkv = x @ w + b                                            # [B, T, 3d]
    q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]

    def heads(t):                                              # [B, nh, T, hd]
        return t.reshape(B, T, n_heads, hd).transpose(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    s = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(hd)         # [B, nh, T, T]
    if causal:
        s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    a = np.exp(s)
    a = a / a.sum(axis=-1, keepdims=True)
    y = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, d)
    return y @ wo + bo


def gpt2_logits(params, idx, n_heads, causal=True):
    """params: raw weights or normalize_weights' output (converted to float64
    here either way); idx [B, T] ints -> logits [B, T, V] float64."""
    params, _ = normalize_weights(params)      # float64, prefix stripped
    idx = np.asarray(idx, dtype=np.int64)
    if idx.ndim == 1:
        idx = idx[None, :]
    B, T = idx.shape
    wte, wpe = params["wte.weight"], params["wpe.weight"]
    V, d = wte.shape
    if d % n_heads:
        raise ValueError("d_model %d is not a multiple of heads %d" % (d, n_heads))
    if T > wpe.shape[0]:
        raise ValueError("sequence of %d tokens but wpe has %d rows" % (T, wpe.shape[0]))
    if idx.min() < 0 or idx.max() >= V:
        raise ValueError("token ids must lie in [0, %d)" % V)
    x = wte[idx] + wpe[:T][None, :, :]
    i = 0
    while "h.%d.ln_1.weight" % i in params:
        g = lambda s: params["h.%d.%s" % (i, s)]               # noqa: E731
        h = layer_norm(x, g("ln_1.weight"), g("ln_1.bias"))
        x = x + attention(h, g("attn.c_attn.weight"), g("attn.c_attn.bias"),
                          g("attn.c_proj.weight"), g("attn.c_proj.bias"), n_heads, causal)
        h = layer_norm(x, g("ln_2.weight"), g("ln_2.bias"))
        h = gelu_tanh(h @ g("mlp.c_fc.weight") + g("mlp.c_fc.bias"))
        x = x + h @ g("mlp.c_proj.weight") + g("mlp.c_proj.bias")
        i += 1
    x = layer_norm(x, params["ln_f.weight"], params["ln_f.bias"])
    return x @ wte.T


def cross_entropy(logits, targets):
    """Per-position -log softmax(logits)[target]; NaN where target == -1."""
    targets = np.asarray(targets, dtype=np.int64)
    m = logits.max(axis=-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(axis=-1, keepdims=True)))[..., 0]
    safe = np.where(targets < 0, 0, targets)
    picked = np.take_along_axis(logits, safe[..., None], axis=-1)[..., 0]
    return np.where(targets < 0, np.nan, lse - picked)


def gpt2_token_losses(params, inputs, targets, n_heads, causal=True):
    """[B, T] losses (NaN at ignored positions, targets == -1)."""
    return cross_entropy(gpt2_logits(params, inputs, n_heads, causal), targets)


def gpt2_loss(params, inputs, targets, n_heads, causal=True):
    """Mean cross-entropy over the positions whose target is not -1."""
    losses = gpt2_token_losses(params, inputs, targets, n_heads, causal)
    keep = ~np.isnan(losses)
    if not keep.any():
        raise ValueError("no position has a target")
    return float(losses[keep].mean())


def shard_batches(tokens, B, T, n):
    """The n batches `hanayo eval` reads: [(inputs [B,T], targets [B,T])]."""
    tokens = np.asarray(tokens, dtype=np.int64)
    need = B * T + 1
    if tokens.size < need:
        raise ValueError("a batch needs %d tokens, the shard has %d" % (need, tokens.size))
    out, pos = [], 0
    for _ in range(n):
        if pos + need > tokens.size:
            pos = 0                      # lib/data.h: restart from the start
        chunk = tokens[pos:pos + need]
        out.append((chunk[:-1].reshape(B, T), chunk[1:].reshape(B, T)))
        pos += B * T
    return out


def shard_loss(params, tokens, B, T, n_heads, n_batches, causal=True):
    """(mean over batches of each batch's mean loss, batches, tokens)."""
    losses = [gpt2_loss(params, x, y, n_heads, causal) for x, y in shard_batches(tokens, B, T, n_batches)]
    return float(np.mean(losses)), n_batches, n_batches * B * T


def gpt2_greedy(params, prompt, n_heads, max_len, vocab=None):
    """Greedy decoding, as transformers' generate(do_sample=False,
    max_length=max_len) does it: append the argmax of the last position's
    logits (the first of equal maxima) until the sequence holds max_len
    tokens. Returns the new tokens only."""
    params, dims = normalize_weights(params, vocab)
    seq = [int(t) for t in prompt]
    new = []
    while len(seq) < max_len:
        nxt = int(np.argmax(gpt2_logits(params, np.array(seq)[None, :], n_heads)[0, -1]))
        seq.append(nxt)
        new.append(nxt)
    return new


def init_weights(layers, d_model, heads, seq_len, vocab, seed, std=0.02):
    """GPT-2-shaped random weights (float32): matrices and embeddings
    N(0, std), biases and LN biases N(0, std), LN weights 1 + N(0, 0.1) —
    non-trivial everywhere, so a comparison exercises every
    parameter. Names without prefix."""
    if d_model % heads:
        raise ValueError("d_model %d is not a multiple of heads %d" % (d_model, heads))
    rng = np.random.default_rng(seed)
    d = d_model
    w = {}

    def mat(*shape):
        return rng.normal(0.0, std, size=shape)

    def bias(n):
        return rng.normal(0.0, std, size=n)

    def ln(prefix):
        w[prefix + ".weight"] = 1.0 + rng.normal(0.0, 0.1, size=d)
        w[prefix + ".bias"] = bias(d)

    w["wte.weight"] = mat(vocab, d)
    w["wpe.weight"] = mat(seq_len, d)
    for i in range(layers):
        h = "h.%d." % i
        ln(h + "ln_1")
        w[h + "attn.c_attn.weight"] = mat(d, 3 * d)
        w[h + "attn.c_attn.bias"] = bias(3 * d)
        w[h + "attn.c_proj.weight"] = mat(d, d)
        w[h + "attn.c_proj.bias"] = bias(d)
        ln(h + "ln_2")
        w[h + "mlp.c_fc.weight"] = mat(d, 4 * d)
        w[h + "mlp.c_fc.bias"] = bias(4 * d)
        w[h + "mlp.c_proj.weight"] = mat(4 * d, d)
        w[h + "mlp.c_proj.bias"] = bias(d)
    ln("ln_f")
    return {k: v.astype(np.float32) for k, v in w.items()}


# ---------------------------------------------------------------------------
# BERT's masking: lib/rng's streams and lib/data's hy_mask_tokens, bit for bit

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


class Rng:
    """hy_rng: SplitMix64 streams keyed by (seed, id)."""

    def __init__(self, seed, stream_id):
        self.state = _mix64((seed ^ _mix64((stream_id + _GOLDEN) & _M64)) & _M64)

    def u64(self):
        self.state = (self.state + _GOLDEN) & _M64
        return _mix64(self.state)

    def uniform(self):
        return (self.u64() >> 11) * (1.0 / 9007199254740992.0)

    def below(self, n):
        limit = _M64 - _M64 % n
        while True:
            x = self.u64()
            if x < limit:
                return x % n


def mask_tokens(inputs, vocab, mask_token, seed, step, micro_batches, m):
    """hy_mask_tokens: (masked inputs, targets with -1 where unscored) of
    micro-batch m of step `step`: 15% of the positions scored, of them 80%
    read mask_token, 10% a random id, 10% themselves."""
    inputs = [int(t) for t in inputs]
    targets = [-1] * len(inputs)
    r = Rng(seed ^ 0x4D4C4D, step * micro_batches + m)
    for i in range(len(inputs)):
        if r.uniform() >= 0.15:
            continue
        targets[i] = inputs[i]
        u = r.uniform()
        if u < 0.8:
            inputs[i] = mask_token
        elif u < 0.9:
            inputs[i] = r.below(vocab)
    return inputs, targets


def mask_hash(inputs, targets):
    """FNV-1a over the (input, target) pairs as uint32: tests/test_data.c's
    mask_hash, which pins hy_mask_tokens' bytes."""
    h = 1469598103934665603
    for a, b in zip(inputs, targets):
        h = ((h ^ (a & 0xFFFFFFFF)) * 1099511628211) & _M64
        h = ((h ^ (b & 0xFFFFFFFF)) * 1099511628211) & _M64
    return h


# The bytes tests/test_data.c pins: inputs (i * 7) % 61 of 256, vocab 64,
# mask 63, seed 1234, step 3, 4 micro-batches, micro-batch 2.
MASK_PIN = 0x7ed1501e045931f2


def mask_pin_holds():
    inputs, targets = mask_tokens([(i * 7) % 61 for i in range(256)], 64, 63, 1234, 3, 4, 2)
    return mask_hash(inputs, targets) == MASK_PIN


# ---------------------------------------------------------------------------
# command line

def _selftest():
    passed = failed = 0

    def check(cond, what):
        nonlocal passed, failed
        if cond:
            passed += 1
        else:
            failed += 1
            print("FAIL: " + what, file=sys.stderr)

    check(mask_pin_holds(), "mask_tokens differs from hy_mask_tokens' pinned bytes")
    L, d, nh, T, V = 2, 16, 4, 8, 29
    w = init_weights(L, d, nh, T, V, seed=1)
    zero = {k: (np.ones_like(v) if k.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight"))
                else np.zeros_like(v)) for k, v in w.items()}
    rng = np.random.default_rng(2)
    x = rng.integers(0, V, size=(2, T))
    y = rng.integers(0, V, size=(2, T))
    check(not np.any(gpt2_logits(zero, x, nh)), "zero weights give zero logits")
    # Every token's loss is ln V exactly; their mean may round by an ulp or
    # two, depending on how this CPU's numpy sums (SIMD width).
    check(abs(gpt2_loss(zero, x, y, nh) - math.log(V)) <= 4 * np.finfo(np.float64).eps * math.log(V),
          "zero weights give loss ln V (to rounding)")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "w.safetensors")
        write_safetensors(path, w)
        back = read_safetensors(path)
        check(sorted(back) == sorted(w) and all(np.array_equal(back[k], w[k]) for k in w),
              "safetensors F32 round trip")
        shard = os.path.join(tmp, "s.bin")
        toks = rng.integers(0, V, size=100)
        write_shard(shard, toks)
        check(np.array_equal(read_shard(shard), toks), "shard round trip")
        loss, n, t = shard_loss(normalize_weights(back)[0], read_shard(shard), 2, T, nh, 3)
        check(n == 3 and t == 48 and math.isfinite(loss) and loss > 0, "shard_loss runs")
    print("gpt2_ref: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] == "selftest":
        return _selftest()
    ap = argparse.ArgumentParser(prog="gpt2_ref.py", description="numpy GPT-2 reference")
    sub = ap.add_subparsers(dest="cmd", required=True)
    lo = sub.add_parser("loss", help="mean loss over N batches of a shard, as `hanayo eval` prints it")
    lo.add_argument("--weights", required=True)
    lo.add_argument("--data", required=True)
    lo.add_argument("--batch-size", type=int, required=True)
    lo.add_argument("--seq-len", type=int, required=True)
    lo.add_argument("--heads", type=int, required=True)
    lo.add_argument("--batches", type=int, required=True)
    lo.add_argument("--vocab", type=int, default=None, help="real vocabulary (default: wte's rows)")
    lo.add_argument("--bidirectional", action="store_true", help="attention not causal")
    gr = sub.add_parser("greedy", help="greedy decoding: the new ids, as `hanayo sample "
                        "--temperature 0` prints them")
    gr.add_argument("--weights", required=True)
    gr.add_argument("--heads", type=int, required=True)
    gr.add_argument("--prompt", required=True, help="ids, comma-separated")
    gr.add_argument("--max-len", type=int, required=True, help="prompt and new tokens")
    gr.add_argument("--vocab", type=int, default=None, help="real vocabulary (default: wte's rows)")
    it = sub.add_parser("init", help="write random GPT-2-style weights")
    it.add_argument("--out", required=True)
    it.add_argument("--layers", type=int, required=True)
    it.add_argument("--d-model", type=int, required=True)
    it.add_argument("--heads", type=int, required=True)
    it.add_argument("--seq-len", type=int, required=True)
    it.add_argument("--vocab", type=int, required=True)
    it.add_argument("--seed", type=int, default=0)
    it.add_argument("--std", type=float, default=0.02, help="std of matrices and embeddings")
    it.add_argument("--dtype", choices=("F32", "BF16"), default="F32")
    it.add_argument("--prefix", default="", help='name prefix, e.g. "transformer."')
    a = ap.parse_args(argv)
    try:
        if a.cmd == "loss":
            params, _ = normalize_weights(read_safetensors(a.weights), a.vocab)
            loss, n, t = shard_loss(params, read_shard(a.data), a.batch_size, a.seq_len,
                                    a.heads, a.batches, causal=not a.bidirectional)
            print(json.dumps({"loss": loss, "batches": n, "tokens": t}))
        elif a.cmd == "greedy":
            prompt = [int(x) for x in a.prompt.split(",")]
            new = gpt2_greedy(read_safetensors(a.weights), prompt, a.heads, a.max_len, a.vocab)
            print(" ".join(str(t) for t in new))
        else:
            w = init_weights(a.layers, a.d_model, a.heads, a.seq_len, a.vocab, a.seed, a.std)
            write_safetensors(a.out, {a.prefix + k: v for k, v in w.items()}, dtype=a.dtype)
    except (OSError, ValueError) as e:
        print("gpt2_ref.py: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
