#!/usr/bin/env python3
"""test_reference.py — hanayo's loss against an independent numpy GPT-2.

DESIGN §6.6 "Independent references": on the same weights and tokens, the CPU backend's loss equals a
small numpy GPT-2 written from the equations (tests/gpt2_ref.py) within 1e-4
relative. Two parts:

1. The reference on its own, so that it can be trusted:
   a. all weights zero but the LayerNorm gains: logits exactly 0, loss
      exactly ln V (causal and bidirectional);
   b. the causal mask: changing a later token leaves every earlier
      position's loss bit-identical and changes a later one; without the
      mask (BERT-like) an earlier one changes too;
   c. a second, deliberately different implementation (pure python, scalar
      loops over heads and positions, math.fsum) agrees to 1e-12 relative,
      1 and 2 layers, causal and bidirectional with ignored targets;
   d. safetensors: F32 and BF16 round trips, BF16 rounding ties, the
      fixture written by the real safetensors library read back, bad files
      rejected;
   e. token shards: round trip, header bytes, bad magic rejected, and
      `hanayo data info` / `hanayo data synth` agree with the reader;
   plus the batch layout of shard_loss, the CLI's JSON line, and that the
   1e-4 comparison can see the bugs it is meant to catch: each deliberate
   mutation (mask off, heads split wrongly, q/k swapped, wrong scale, a
   Conv1D matrix read transposed, a bias or LayerNorm parameter dropped,
   targets not shifted, batches not overlapping, unbiased variance) moves
   the loss of the cross-check's model by more than 1e-3 (the last by more
   than 1e-4). GELU by erf instead of tanh and LN eps 1e-6 move it by less
   than 1e-6: printed, not checked — the op tests must catch those.
   f. where the real `safetensors` and `torch` + `transformers` packages
      import (not in CI): the library reads our file and we read its file;
      GPT2LMHeadModel's loss equals ours to 1e-5. Skipped otherwise.
2. The cross-check: with $HANAYO's `eval` available, `hanayo eval` on random
   weights and a synthesized shard gives the reference's loss within 1e-4
   relative: 2 layers on 1f1b with 1 rank; 4 layers on 1f1b with 1 rank and
   on hanayo with 2 ranks and 1 wave (4 stages), which must also agree with
   each other (pipelining does not change the loss); and BF16 weights with a
   "transformer." prefix. While eval says "not available", these are
   counted as skipped.
3. A position table longer than the sequences (model.positions): weights
   with 16 wpe rows evaluated at seq_len 8 give the reference's loss on
   sequences of 8 (rows 0..7); a step trained so saves all 16 rows and a
   config.json with n_positions 16, and the checkpoint evaluated at
   seq_len 16 gives the reference's loss on its weights; a table of
   another row count is refused (exit 2) naming model.positions.

Run from the repository root with numpy (Debian's python3-numpy); HANAYO is
the binary under test. Prints "reference: N passed, N failed" last (skips on
a line before it) and exits non-zero on any failure.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_ref as ref  # noqa: E402

REL_TOL = 1e-4          # DESIGN §6.6 "Independent references"
PIPE_TOL = 1e-5         # DESIGN §6.2 "Pipelined = sequential": pipelined = sequential
HERE = os.path.dirname(os.path.abspath(__file__))


class Tally:
    def __init__(self):
        self.passed = self.failed = 0
        self.skipped = []           # (count, why)

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL: " + what, file=sys.stderr)
        return bool(cond)

    def skip(self, n, why):
        self.skipped.append((n, why))


def rel(a, b):
    return abs(a - b) / abs(b)


# ---------------------------------------------------------------------------
# A second GPT-2: pure python floats, scalar loops, correctly rounded sums.

def _loop_layer_norm(x, w, b):
    n = len(x)
    mu = math.fsum(x) / n
    var = math.fsum((v - mu) * (v - mu) for v in x) / n
    inv = 1.0 / math.sqrt(var + 1e-5)
    return [(x[i] - mu) * inv * w[i] + b[i] for i in range(n)]


def _loop_linear(x, W, b):
    """x [in], W [in][out] (Conv1D), b [out]."""
    return [math.fsum([x[i] * W[i][j] for i in range(len(x))] + [b[j]]) for j in range(len(b))]


def loop_token_losses(weights, seq, targets, n_heads, causal=True):
    """One sequence: list of losses (None where the target is -1)."""
    W = {(k[len("transformer."):] if k.startswith("transformer.") else k):
         np.asarray(v, dtype=np.float64).tolist() for k, v in weights.items()}
    wte, wpe = W["wte.weight"], W["wpe.weight"]
    d = len(wte[0])
    hd = d // n_heads
    T = len(seq)
    xs = [[wte[seq[t]][c] + wpe[t][c] for c in range(d)] for t in range(T)]
    layer = 0
    while "h.%d.ln_1.weight" % layer in W:
        g = lambda s: W["h.%d.%s" % (layer, s)]                     # noqa: E731
        qkv = [_loop_linear(_loop_layer_norm(x, g("ln_1.weight"), g("ln_1.bias")),
                            g("attn.c_attn.weight"), g("attn.c_attn.bias")) for x in xs]
        ys = [[0.0] * d for _ in range(T)]
        for h in range(n_heads):
            for t in range(T):
                q = [qkv[t][h * hd + e] for e in range(hd)]
                visible = range(t + 1) if causal else range(T)
                scores = {}
                for s in visible:
                    k = [qkv[s][d + h * hd + e] for e in range(hd)]
                    scores[s] = math.fsum(q[e] * k[e] for e in range(hd)) / math.sqrt(hd)
                top = max(scores.values())
                z = math.fsum(math.exp(v - top) for v in scores.values())
                for e in range(hd):
                    ys[t][h * hd + e] = math.fsum(
                        math.exp(scores[s] - top) / z * qkv[s][2 * d + h * hd + e] for s in visible)
        for t in range(T):
            a = _loop_linear(ys[t], g("attn.c_proj.weight"), g("attn.c_proj.bias"))
            xs[t] = [xs[t][c] + a[c] for c in range(d)]
            u = _loop_linear(_loop_layer_norm(xs[t], g("ln_2.weight"), g("ln_2.bias")),
                             g("mlp.c_fc.weight"), g("mlp.c_fc.bias"))
            u = [0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v * v * v)))
                 for v in u]
            m = _loop_linear(u, g("mlp.c_proj.weight"), g("mlp.c_proj.bias"))
            xs[t] = [xs[t][c] + m[c] for c in range(d)]
        layer += 1
    out = []
    for t in range(T):
        if targets[t] < 0:
            out.append(None)
            continue
        x = _loop_layer_norm(xs[t], W["ln_f.weight"], W["ln_f.bias"])
        logits = [math.fsum(x[c] * row[c] for c in range(d)) for row in wte]
        top = max(logits)
        lse = top + math.log(math.fsum(math.exp(v - top) for v in logits))
        out.append(lse - logits[targets[t]])
    return out


def loop_loss(weights, inputs, targets, n_heads, causal=True):
    losses = []
    for x, y in zip(inputs, targets):
        losses += [v for v in loop_token_losses(weights, list(x), list(y), n_heads, causal) if v is not None]
    return math.fsum(losses) / len(losses)


# ---------------------------------------------------------------------------
# 1. the reference on its own

def zero_model(weights):
    return {k: (np.ones_like(v) if k.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight"))
                else np.zeros_like(v)) for k, v in weights.items()}


def check_zero(t):
    for V in (97, 50257):
        w = ref.init_weights(2, 16, 4, 8, V, seed=5)
        z = zero_model(w)
        rng = np.random.default_rng(V)
        x, y = rng.integers(0, V, (2, 8)), rng.integers(0, V, (2, 8))
        t.check(not np.any(ref.gpt2_logits(z, x, 4)), "zero model, V=%d: logits all 0" % V)
        for causal in (True, False):
            loss = ref.gpt2_loss(z, x, y, 4, causal)
            t.check(loss == math.log(V), "zero model, V=%d causal=%s: loss %r == ln V %r"
                    % (V, causal, loss, math.log(V)))


def check_causal(t):
    L, d, nh, T, V = 2, 16, 4, 12, 31
    w = ref.init_weights(L, d, nh, T, V, seed=7, std=0.3)
    rng = np.random.default_rng(8)
    x = rng.integers(0, V, (2, T))
    y = rng.integers(0, V, (2, T))
    for j in (0, 5, T - 1):
        x2 = x.copy()
        x2[:, j] = (x2[:, j] + 1 + rng.integers(0, V - 1, 2)) % V
        a = ref.gpt2_token_losses(w, x, y, nh)
        b = ref.gpt2_token_losses(w, x2, y, nh)
        t.check(np.array_equal(a[:, :j], b[:, :j]),
                "causal: changing token %d leaves positions < %d unchanged (max diff %g)"
                % (j, j, np.abs(a[:, :j] - b[:, :j]).max() if j else 0.0))
        t.check(np.all(np.abs(a[:, j:] - b[:, j:]).max(axis=1) > 1e-6),
                "causal: changing token %d changes some position >= %d in each row" % (j, j))
        if j > 0:
            a = ref.gpt2_token_losses(w, x, y, nh, causal=False)
            b = ref.gpt2_token_losses(w, x2, y, nh, causal=False)
            t.check(np.all(np.abs(a[:, :j] - b[:, :j]).max(axis=1) > 1e-6),
                    "bidirectional: changing token %d changes an earlier position" % j)
    # rows are independent: a change in row 1 leaves row 0 alone
    x2 = x.copy()
    x2[1] = (x2[1] + 1) % V
    a, b = ref.gpt2_token_losses(w, x, y, nh), ref.gpt2_token_losses(w, x2, y, nh)
    t.check(np.array_equal(a[0], b[0]) and not np.array_equal(a[1], b[1]), "rows are independent")


def check_second_implementation(t):
    d, nh, T, V, B = 8, 2, 6, 13, 2
    rng = np.random.default_rng(11)
    for L in (1, 2):
        w = ref.init_weights(L, d, nh, T, V, seed=10 + L, std=0.5)
        x = rng.integers(0, V, (B, T))
        y = rng.integers(0, V, (B, T))
        a = ref.gpt2_loss(w, x, y, nh)
        b = loop_loss(w, x, y, nh)
        t.check(rel(a, b) <= 1e-12, "loops vs numpy, %d layer(s), causal: %.17g vs %.17g (rel %.3g)"
                % (L, a, b, rel(a, b)))
        per = ref.gpt2_token_losses(w, x, y, nh)
        loop_per = np.array([loop_token_losses(w, list(x[i]), list(y[i]), nh) for i in range(B)], dtype=float)
        t.check(np.abs(per - loop_per).max() <= 1e-12 * np.abs(loop_per).max(),
                "loops vs numpy, %d layer(s): every position" % L)
        ym = y.copy()
        ym[0, ::2] = -1
        ym[1, 1] = -1
        a = ref.gpt2_loss(w, x, ym, nh, causal=False)
        b = loop_loss(w, x, ym, nh, causal=False)
        t.check(rel(a, b) <= 1e-12, "loops vs numpy, %d layer(s), bidirectional, ignored targets: "
                "%.17g vs %.17g" % (L, a, b))
        t.check(abs(a - ref.gpt2_loss(w, x, y, nh, causal=False)) > 1e-6,
                "ignored targets change the bidirectional loss")


def check_safetensors(t, tmp):
    w = ref.init_weights(2, 8, 2, 4, 11, seed=3)
    w["scalar"] = np.array(2.5, dtype=np.float32)
    w["empty"] = np.zeros((0, 3), dtype=np.float32)
    p = os.path.join(tmp, "rt.safetensors")
    ref.write_safetensors(p, w, metadata={"who": "test"})
    back, meta = ref.read_safetensors(p, with_metadata=True)
    t.check(sorted(back) == sorted(w) and all(back[k].dtype == np.float32 and back[k].shape == w[k].shape
                                              and np.array_equal(back[k], w[k]) for k in w),
            "safetensors: F32 round trip is exact")
    t.check(meta == {"who": "test"}, "safetensors: metadata round trip")
    blob = open(p, "rb").read()
    n = int.from_bytes(blob[:8], "little")
    t.check(n % 8 == 0 and blob[8 + n - 1:8 + n] in (b" ", b"}") and blob[8:9] == b"{",
            "safetensors: header is JSON padded with spaces to a multiple of 8")
    # BF16: rounding to nearest even, ties, inf, NaN; the read widens exactly
    bits = np.array([0x3f808000, 0x3f818000, 0x3f808001, 0x3f80ffff, 0x7f7fffff,
                     0x7fc00000, 0xff800001, 0xc0200000, 0x000116c2, 0xff800000], dtype=np.uint32)
    want = [0x3f80, 0x3f82, 0x3f81, 0x3f81, 0x7f80, 0x7fc0, 0xffc0, 0xc020, 0x0001, 0xff80]
    got = ref.f32_to_bf16_bits(bits.view(np.float32))
    t.check(got.tolist() == want, "bf16 rounding: %s" % [hex(v) for v in got.tolist()])
    p16 = os.path.join(tmp, "rt16.safetensors")
    ref.write_safetensors(p16, {"a": bits.view(np.float32)}, dtype="BF16")
    t.check(ref.read_safetensors(p16)["a"].view(np.uint32).tolist() == [v << 16 for v in want],
            "safetensors: BF16 write then read gives the rounded values")
    # the fixture written by the real safetensors library (tests/fixtures/gen_safetensors.py)
    fx = os.path.join(HERE, "fixtures", "st_ref_read.safetensors")
    if os.path.exists(fx):
        r, meta = ref.read_safetensors(fx, with_metadata=True)
        t.check(np.array_equal(r["full"], np.arange(6, dtype=np.float32).reshape(3, 2) - 2.5)
                and r["full"].dtype == np.float32, "library's file: F32 tensor")
        t.check(r["brain"].dtype == np.float32 and r["brain"].tolist() == [1.0, -3.140625, math.inf],
                "library's file: BF16 tensor widened to f32: %s" % r["brain"].tolist())
        t.check(r["ints"].tolist() == [1, -2, 3] and r["half"].shape == (4, 4)
                and r["half"].view(np.uint16)[0].tolist() == [0x0000, 0x8000, 0x3c00, 0xc000],
                "library's file: I32 and F16 tensors")
        t.check(meta == {"source": "gen_safetensors.py"}, "library's file: metadata")
    else:
        t.skip(4, "tests/fixtures/st_ref_read.safetensors absent")
    # malformed files are refused, not misread
    bad = os.path.join(tmp, "bad.safetensors")
    for what, data in (("truncated data", blob[:-4]), ("header past the end", (10 ** 9).to_bytes(8, "little")),
                       ("short file", b"\x01\x00")):
        with open(bad, "wb") as f:
            f.write(data)
        try:
            ref.read_safetensors(bad)
            ok = False
        except ValueError:
            ok = True
        t.check(ok, "safetensors: %s refused" % what)


def run_hanayo(args, timeout=60):
    hanayo = os.environ.get("HANAYO", "build/hanayo")
    try:
        r = subprocess.run([hanayo] + args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    return r.returncode, r.stdout + r.stderr


def eval_line(out):
    """The JSON line of `hanayo eval`'s output, or None."""
    for s in reversed((out or "").strip().splitlines()):
        try:
            cand = json.loads(s)
        except ValueError:
            continue
        if isinstance(cand, dict) and "loss" in cand:
            return cand
    return None


def hanayo_path():
    h = os.environ.get("HANAYO")
    return h if h and os.access(h, os.X_OK) else None


def check_shards(t, tmp):
    rng = np.random.default_rng(4)
    toks = rng.integers(0, 65536, 1000)
    p = os.path.join(tmp, "rt.bin")
    ref.write_shard(p, toks)
    blob = open(p, "rb").read()
    hdr = np.frombuffer(blob[:1024], dtype="<i4")
    t.check(len(blob) == 1024 + 2000 and hdr[:3].tolist() == [20240520, 1, 1000] and not hdr[3:].any(),
            "shard: header bytes")
    t.check(np.array_equal(ref.read_shard(p), toks), "shard: round trip")
    for what, data in (("bad magic", b"\x00" + blob[1:]), ("truncated", blob[:-2])):
        bad = os.path.join(tmp, "bad.bin")
        with open(bad, "wb") as f:
            f.write(data)
        try:
            ref.read_shard(bad)
            ok = False
        except ValueError:
            ok = True
        t.check(ok, "shard: %s refused" % what)
    if hanayo_path() is None:
        t.skip(2, "shard checks against `hanayo data`: HANAYO is not set to a binary")
        return
    rc, out = run_hanayo(["data", "info", p, "--json"])
    try:
        info = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError, AttributeError):
        info = {}
    t.check(rc == 0 and info.get("tokens") == 1000 and info.get("max_token") == int(toks.max()),
            "`hanayo data info` reads our shard: %s" % out.strip()[-300:])
    synth = os.path.join(tmp, "synth.bin")
    rc, out = run_hanayo(["data", "synth", "--out", synth, "--tokens", "5000", "--vocab", "97"])
    ok = rc == 0
    if ok:
        s = ref.read_shard(synth)
        ok = s.size == 5000 and s.min() >= 0 and s.max() < 97
    t.check(ok, "we read `hanayo data synth`'s shard: %s" % (out or "").strip()[-300:])


def check_batches_and_cli(t, tmp):
    L, d, nh, T, V, B, N = 2, 16, 4, 8, 23, 3, 4
    w = ref.init_weights(L, d, nh, T, V, seed=21, std=0.2)
    toks = np.random.default_rng(22).integers(0, V, 200)
    loss, n, ntok = ref.shard_loss(w, toks, B, T, nh, N)
    want = np.mean([ref.gpt2_loss(w, toks[k * B * T:k * B * T + B * T].reshape(B, T),
                                  toks[k * B * T + 1:k * B * T + B * T + 1].reshape(B, T), nh)
                    for k in range(N)])
    t.check(loss == want and n == N and ntok == N * B * T,
            "shard_loss: batch k is tokens [k*B*T, k*B*T + B*T + 1), mean of batch means")
    # wrap-around as lib/data.h: 200 tokens hold 8 batches of 24+1, the 9th restarts at 0
    bs = ref.shard_batches(toks, B, T, 10)
    t.check(np.array_equal(bs[8][0], bs[0][0]) and np.array_equal(bs[9][1], bs[1][1]),
            "shard_batches: restarts at token 0 when a batch no longer fits")
    # the CLI: init writes what init_weights makes; loss prints eval's JSON line
    wp, sp = os.path.join(tmp, "cli.safetensors"), os.path.join(tmp, "cli.bin")
    ref.write_shard(sp, toks)
    me = os.path.join(HERE, "gpt2_ref.py")
    r = subprocess.run([sys.executable, me, "init", "--out", wp, "--layers", str(L), "--d-model", str(d),
                        "--heads", str(nh), "--seq-len", str(T), "--vocab", str(V), "--seed", "21",
                        "--std", "0.2"], capture_output=True, text=True)
    back = ref.read_safetensors(wp) if r.returncode == 0 else {}
    t.check(r.returncode == 0 and sorted(back) == sorted(w) and all(np.array_equal(back[k], w[k]) for k in w),
            "CLI init writes init_weights' tensors: %s" % r.stderr.strip())
    names = set(back)
    want_names = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"} | {
        "h.%d.%s" % (i, s) for i in range(L) for s in (
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
            "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
            "mlp.c_proj.weight", "mlp.c_proj.bias")}
    t.check(names == want_names and back["h.1.attn.c_attn.weight"].shape == (d, 3 * d)
            and back["h.0.mlp.c_proj.weight"].shape == (4 * d, d),
            "CLI init: Hugging Face GPT-2 names and Conv1D shapes")
    t.check(all(np.any(back[k] != 0) and np.any(back[k] != 1) for k in back),
            "CLI init: biases and LN parameters are non-trivial")
    r = subprocess.run([sys.executable, me, "loss", "--weights", wp, "--data", sp, "--batch-size", str(B),
                        "--seq-len", str(T), "--heads", str(nh), "--batches", str(N)],
                       capture_output=True, text=True)
    try:
        line = json.loads(r.stdout.strip())
    except ValueError:
        line = {}
    t.check(r.returncode == 0 and sorted(line) == ["batches", "loss", "tokens"] and line["loss"] == loss
            and line["batches"] == N and line["tokens"] == N * B * T,
            "CLI loss prints eval's JSON line: %r %s" % (r.stdout, r.stderr.strip()))
    # a prefixed BF16 file and a padded vocabulary
    wp2 = os.path.join(tmp, "cli16.safetensors")
    padded = dict(w)
    padded["wte.weight"] = np.concatenate([w["wte.weight"], np.zeros((9, d), np.float32)])
    ref.write_safetensors(wp2, {"transformer." + k: v for k, v in padded.items()}, dtype="BF16")
    w16 = {k: ref.bf16_bits_to_f32(ref.f32_to_bf16_bits(v)) for k, v in w.items()}
    got, _ = ref.normalize_weights(ref.read_safetensors(wp2), vocab=V)
    t.check(ref.shard_loss(got, toks, B, T, nh, N)[0] == ref.shard_loss(w16, toks, B, T, nh, N)[0],
            "transformer. prefix, BF16 and a padded vocabulary (--vocab) load as the plain weights")


def mutation_losses(w, toks, B, T, nh, N):
    """The loss under deliberate bugs an implementation might have."""
    d = w["wte.weight"].shape[1]
    hd = d // nh
    out = {}

    def with_blocks(fn):
        w2 = {k: v.copy() for k, v in w.items()}
        i = 0
        while "h.%d.ln_1.weight" % i in w2:
            fn(w2, "h.%d." % i)
            i += 1
        return ref.shard_loss(w2, toks, B, T, nh, N)[0]

    out["attention not causal"] = ref.shard_loss(w, toks, B, T, nh, N, causal=False)[0]
    out["no position embedding"] = ref.shard_loss(dict(w, **{"wpe.weight": 0 * w["wpe.weight"]}),
                                                  toks, B, T, nh, N)[0]
    # heads taken head-minor (columns h::nh) instead of h*hd:(h+1)*hd: the
    # same as the right model with those columns (and c_proj's rows) permuted
    perm = np.arange(d).reshape(hd, nh).T.reshape(-1)

    def head_minor(w2, h):
        cols = np.concatenate([perm, d + perm, 2 * d + perm])
        w2[h + "attn.c_attn.weight"] = w2[h + "attn.c_attn.weight"][:, cols]
        w2[h + "attn.c_attn.bias"] = w2[h + "attn.c_attn.bias"][cols]
        w2[h + "attn.c_proj.weight"] = w2[h + "attn.c_proj.weight"][np.argsort(perm)]
    out["heads split head-minor"] = with_blocks(head_minor)

    def k_q_v(w2, h):
        cols = np.concatenate([np.arange(d, 2 * d), np.arange(d), np.arange(2 * d, 3 * d)])
        w2[h + "attn.c_attn.weight"] = w2[h + "attn.c_attn.weight"][:, cols]
        w2[h + "attn.c_attn.bias"] = w2[h + "attn.c_attn.bias"][cols]
    out["q and k swapped"] = with_blocks(k_q_v)

    def scale_d(w2, h):   # 1/sqrt(d) instead of 1/sqrt(hd): scale q by sqrt(hd/d)
        s = math.sqrt(hd / d)
        w2[h + "attn.c_attn.weight"][:, :d] *= s
        w2[h + "attn.c_attn.bias"][:d] *= s
    out["scale 1/sqrt(d_model)"] = with_blocks(scale_d)

    def transposed(w2, h):  # a [out, in] reading of a square Conv1D matrix
        w2[h + "attn.c_proj.weight"] = w2[h + "attn.c_proj.weight"].T.copy()
    out["c_proj read transposed"] = with_blocks(transposed)

    for part in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
        def no_bias(w2, h, part=part):
            w2[h + part + ".bias"] = 0 * w2[h + part + ".bias"]
        out["%s.bias dropped" % part] = with_blocks(no_bias)
    for part in ("weight", "bias"):
        def ln_plain(w2, h, part=part):
            for s in ("ln_1", "ln_2"):
                w2[h + s + "." + part] = np.full_like(w2[h + s + "." + part], part == "weight")
        out["ln_1/ln_2 %s ignored" % part] = with_blocks(ln_plain)
        out["ln_f.%s ignored" % part] = ref.shard_loss(
            dict(w, **{"ln_f." + part: np.full_like(w["ln_f." + part], part == "weight")}), toks, B, T, nh, N)[0]
    # targets not shifted / batches not overlapping by one token
    out["targets = inputs"] = float(np.mean([ref.gpt2_loss(w, x, x, nh)
                                             for x, _ in ref.shard_batches(toks, B, T, N)]))
    out["batches B*T+1 apart"] = float(np.mean([
        ref.gpt2_loss(w, toks[k * (B * T + 1):k * (B * T + 1) + B * T].reshape(B, T),
                      toks[k * (B * T + 1) + 1:(k + 1) * (B * T + 1)].reshape(B, T), nh) for k in range(N)]))
    # subtler ones: "(small)" is checked against 1e-4 itself, "(info)" only printed
    saved_gelu, saved_ln = ref.gelu_tanh, ref.layer_norm
    erf = np.vectorize(math.erf)
    try:
        ref.gelu_tanh = lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
        out["GELU by erf (info)"] = ref.shard_loss(w, toks, B, T, nh, N)[0]
        ref.gelu_tanh = saved_gelu

        def ln_unbiased(x, wt, b, eps=ref.LN_EPS):
            return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps) * wt + b
        ref.layer_norm = ln_unbiased
        out["LN unbiased variance (small)"] = ref.shard_loss(w, toks, B, T, nh, N)[0]
        ref.layer_norm = lambda x, wt, b: saved_ln(x, wt, b, eps=1e-6)
        out["LN eps 1e-6 (info)"] = ref.shard_loss(w, toks, B, T, nh, N)[0]
    finally:
        ref.gelu_tanh, ref.layer_norm = saved_gelu, saved_ln
    return out


def check_sensitivity(t, w, toks, B, T, nh, N, label):
    base = ref.shard_loss(w, toks, B, T, nh, N)[0]
    worst = []
    for name, loss in mutation_losses(w, toks, B, T, nh, N).items():
        r = rel(loss, base)
        need = REL_TOL if "(small)" in name else 10 * REL_TOL
        worst.append("%s %.1e" % (name, r))
        if "(info)" in name:
            continue
        t.check(r > need, "%s: the bug '%s' moves the loss only %.2e (< %.0e): the comparison "
                "could not see it" % (label, name, r, need))
    return base, worst


# ---------------------------------------------------------------------------
# (f) the real libraries, where they import

def check_real_libraries(t, tmp):
    try:
        from safetensors.numpy import load_file, save_file
    except ImportError:
        t.skip(2, "the safetensors package is not importable")
    else:
        w = ref.init_weights(1, 8, 2, 4, 11, seed=31)
        p = os.path.join(tmp, "ours.safetensors")
        ref.write_safetensors(p, w)
        lib = load_file(p)
        t.check(sorted(lib) == sorted(w) and all(np.array_equal(lib[k], w[k]) for k in w),
                "safetensors library reads our file")
        q = os.path.join(tmp, "lib.safetensors")
        save_file({k: v * 3 for k, v in w.items()}, q)
        back = ref.read_safetensors(q)
        t.check(all(np.array_equal(back[k], w[k] * 3) for k in w), "we read the safetensors library's file")
    try:
        import torch
        import transformers
    except Exception:                          # ImportError, or a broken install
        t.skip(1, "torch/transformers are not importable")
        return
    L, d, nh, T, V = 2, 32, 4, 16, 97
    w = ref.init_weights(L, d, nh, T, V, seed=32, std=0.2)
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=d, n_layer=L, n_head=nh,
                                  layer_norm_epsilon=1e-5, activation_function="gelu_new",
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg).double().eval()
    sd = {"transformer." + k: torch.from_numpy(v.astype(np.float64)) for k, v in w.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" or m.endswith(".attn.bias")
                                          or m.endswith(".attn.masked_bias"))]
    rng = np.random.default_rng(33)
    x, y = rng.integers(0, V, (2, T)), rng.integers(0, V, (2, T))
    with torch.no_grad():
        logits = model(torch.from_numpy(x)).logits
        hf = float(torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.from_numpy(y).reshape(-1)))
    ours = ref.gpt2_loss(w, x, y, nh)
    t.check(not missing and not unexpected and rel(ours, hf) <= 1e-5,
            "transformers GPT2LMHeadModel: loss %.12g vs ours %.12g (missing %s, unexpected %s)"
            % (hf, ours, missing, unexpected))


# ---------------------------------------------------------------------------
# 2. the cross-check against hanayo eval

CROSS = [  # (label, layers, schedule, weight dtype, name prefix)
    ("2 layers, 1f1b, 1 rank", 2, {"kind": "1f1b", "ranks": 1}, "F32", ""),
    ("4 layers, 1f1b, 1 rank", 4, {"kind": "1f1b", "ranks": 1}, "F32", ""),
    ("4 layers, hanayo, 2 ranks, 1 wave", 4, {"kind": "hanayo", "ranks": 2, "waves": 1}, "F32", ""),
    ("2 layers, 1f1b, BF16 transformer.-prefixed weights", 2, {"kind": "1f1b", "ranks": 1}, "BF16",
     "transformer."),
]
D, NH, T, V, MBS, MB, NB = 32, 4, 16, 97, 2, 1, 3
# The cross-check's fixture. With GPT-2's std 0.02 the loss of a random model
# is ln V to within ~1e-3 and a 1e-4 comparison sees almost nothing, so the
# weights are larger, and the seeds were picked (from a scan of a few) so that
# every deliberate bug in mutation_losses moves the 2-layer loss by more than
# 10x the tolerance; check_sensitivity keeps that true.
STD, DATA_SEED, WEIGHT_SEED = 0.3, 42, {2: 48, 4: 49}


def cross_check(t, tmp):
    shard = os.path.join(tmp, "cross.bin")
    toks = np.random.default_rng(DATA_SEED).integers(0, V, 400)
    ref.write_shard(shard, toks)
    B = MBS * MB
    weights = {L: ref.init_weights(L, D, NH, T, V, seed=WEIGHT_SEED[L], std=STD) for L in (2, 4)}
    base, worst = check_sensitivity(t, weights[2], toks, B, T, NH, NB, "cross-check model")
    print("reference: loss %.6f on the cross-check model (ln V = %.6f); relative change under each "
          "deliberate bug: %s" % (base, math.log(V), "; ".join(worst)))

    hanayo = hanayo_path()
    n_cross = len(CROSS) + 1
    if hanayo is None:
        t.skip(n_cross + len(CROSS), "hanayo cross-check: HANAYO is not set to an executable")
        return
    configs = []
    for i, (label, L, sched, dtype, prefix) in enumerate(CROSS):
        cfg = {"model": {"kind": "gpt", "layers": L, "d_model": D, "heads": NH, "seq_len": T, "vocab": V},
               "schedule": dict(sched, micro_batches=MB, micro_batch_size=MBS),
               "data": {"train": shard, "val": shard}, "backend": "cpu"}
        cp = os.path.join(tmp, "cfg%d.json" % i)
        with open(cp, "w") as f:
            json.dump(cfg, f, indent=1)
        rc, out = run_hanayo(["check", cp])
        t.check(rc == 0, "hanayo check accepts the cross-check config (%s): %s" % (label, out.strip()[-400:]))
        configs.append(cp)

    rc, out = run_hanayo(["eval", "--help"])
    if rc != 0:
        if rc is not None and "not available" in out:
            t.skip(n_cross, "hanayo eval: %s" % out.strip().splitlines()[-1])
        else:
            t.check(False, "`hanayo eval --help` failed (status %s) without saying it is not available: %s"
                    % (rc, out.strip()[-400:]))
        return

    got = {}
    for i, (label, L, sched, dtype, prefix) in enumerate(CROSS):
        wp = os.path.join(tmp, "w%d.safetensors" % i)
        w = weights[L]
        ref.write_safetensors(wp, {prefix + k: v for k, v in w.items()}, dtype=dtype)
        want, nb, nt = ref.shard_loss(ref.read_safetensors(wp), toks, B, T, NH, NB)
        rc, out = run_hanayo(["eval", configs[i], "--init", wp, "--data", shard, "--batches", str(NB)],
                             timeout=120)
        line = eval_line(out)
        ok = rc == 0 and line is not None and isinstance(line.get("loss"), (int, float))
        if ok:
            got[i] = float(line["loss"])
            ok = (line.get("batches") == nb and line.get("tokens") == nt
                  and math.isfinite(got[i]) and rel(got[i], want) <= REL_TOL)
        t.check(ok, "hanayo eval (%s): %s vs reference {\"loss\": %.10g, \"batches\": %d, \"tokens\": %d}%s"
                % (label, json.dumps(line) if line else "no JSON line", want, nb, nt,
                   " (relative %.2e, tolerance %g)" % (rel(got[i], want), REL_TOL) if i in got else
                   " — status %s, output: %s" % (rc, (out or "").strip()[-400:])))
        if ok:
            print("reference: %s: hanayo %.8f, reference %.8f, relative %.2e"
                  % (label, got[i], want, rel(got[i], want)))
    if 1 in got and 2 in got:
        t.check(rel(got[2], got[1]) <= PIPE_TOL, "pipelining changes the loss: hanayo 2 ranks %.9g vs "
                "1 rank %.9g (rel %.2e > %g)" % (got[2], got[1], rel(got[2], got[1]), PIPE_TOL))
    else:
        t.check(False, "pipelined vs sequential: an eval above failed")


def positions_check(t, tmp):
    """3.: model.positions 16 at seq_len 8, against the reference."""
    if hanayo_path() is None:
        t.skip(8, "positions: HANAYO is not set to an executable")
        return
    short, rows = 8, T
    shard = os.path.join(tmp, "pos.bin")
    toks = np.random.default_rng(DATA_SEED).integers(0, V, 400)
    ref.write_shard(shard, toks)
    wp = os.path.join(tmp, "pos.safetensors")
    ref.write_safetensors(wp, ref.init_weights(2, D, NH, rows, V, seed=WEIGHT_SEED[2], std=STD))
    ck = os.path.join(tmp, "pos-ck")

    def config(name, seq_len, positions):
        cfg = {"model": {"kind": "gpt", "layers": 2, "d_model": D, "heads": NH,
                         "seq_len": seq_len, "positions": positions, "vocab": V},
               "schedule": {"kind": "1f1b", "ranks": 1, "micro_batches": MB,
                            "micro_batch_size": MBS},
               "train": {"steps": 1, "warmup_steps": 0, "lr_schedule": "constant"},
               "data": {"train": shard, "val": shard}, "checkpoint": {"dir": ck},
               "backend": "cpu"}
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path

    def eval_vs_ref(cp, weights, seq_len, what):
        rc, out = run_hanayo(["eval", cp, "--init", weights, "--batches", str(NB)], timeout=120)
        line = eval_line(out)
        want, _, nt = ref.shard_loss(ref.read_safetensors(weights if weights.endswith(
            ".safetensors") else weights + "/model.safetensors"), toks, MBS * MB, seq_len, NH, NB)
        ok = rc == 0 and line is not None and line.get("tokens") == nt
        t.check(ok and rel(float(line["loss"]), want) <= REL_TOL,
                "positions: %s: %s vs reference %.10g (status %s: %s)"
                % (what, json.dumps(line), want, rc, (out or "").strip()[-300:]))

    short_cfg = config("pos8.json", short, rows)
    eval_vs_ref(short_cfg, wp, short, "16 rows at seq_len 8")
    rc, out = run_hanayo(["train", short_cfg, "--set", "init=" + wp], timeout=120)
    step1 = os.path.join(ck, "step_000001")
    t.check(rc == 0, "positions: train at seq_len 8 of 16: status %s: %s"
            % (rc, (out or "").strip()[-300:]))
    saved = ref.read_safetensors(step1 + "/model.safetensors") if rc == 0 else {}
    t.check(saved.get("wpe.weight") is not None and saved["wpe.weight"].shape == (rows, D),
            "positions: the checkpoint's wpe.weight is not [%d, %d]" % (rows, D))
    hf = json.load(open(step1 + "/config.json")) if rc == 0 else {}
    t.check(hf.get("n_positions") == rows and hf.get("n_ctx") == rows,
            "positions: config.json n_positions %s, n_ctx %s, want %d"
            % (hf.get("n_positions"), hf.get("n_ctx"), rows))
    state = json.load(open(step1 + "/state.json")) if rc == 0 else {}
    model = state.get("config", {}).get("model", {})
    t.check(model.get("positions") == rows and model.get("seq_len") == short,
            "positions: state.json records positions %s, seq_len %s"
            % (model.get("positions"), model.get("seq_len")))
    eval_vs_ref(config("pos16.json", rows, rows), step1, rows,
                "the seq_len 8 checkpoint at seq_len 16")
    for cp, weights, want in ((config("pos8of8.json", short, short), wp,
                               "--set model.positions=16"),
                              (config("pos8of32.json", short, 32), step1,
                               "model.positions = 16")):
        rc, out = run_hanayo(["eval", cp, "--init", weights, "--batches", "1"])
        t.check(rc == 2 and "model.positions" in (out or "") and want in (out or ""),
                "positions: %s refused naming model.positions (%r): status %s: %s"
                % (weights, want, rc, (out or "").strip()[-300:]))


def main():
    t = Tally()
    check_zero(t)
    check_causal(t)
    check_second_implementation(t)
    with tempfile.TemporaryDirectory() as tmp:
        check_safetensors(t, tmp)
        check_shards(t, tmp)
        check_batches_and_cli(t, tmp)
        check_real_libraries(t, tmp)
        cross_check(t, tmp)
        positions_check(t, tmp)
    if t.skipped:
        print("reference skipped %d: %s" % (sum(n for n, _ in t.skipped),
                                            "; ".join("%d (%s)" % (n, why) for n, why in t.skipped)))
    print("reference: %d passed, %d failed" % (t.passed, t.failed))
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
