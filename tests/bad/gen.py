#!/usr/bin/env python3
"""gen.py OUTDIR — writes the binary half of the bad-input corpus.

Run by tests/test_bad_inputs.sh (it is not a test itself). Everything is
deterministic: no randomness, no clock. Shards use llm.c's layouts (256 x
int32 header: magic 20240520, version 1, token count; uint16 tokens; or
magic 20240801, version 7 and uint32 tokens: shard32_*) and
the safetensors files are sized for tests/bad/tiny.json (GPT, 1 layer,
d_model 8, 2 heads, seq_len 8, vocab 16).

A few files are good on purpose (shard_ok.bin, shard32_ok.bin, st_ok.safetensors, the
checkpoints ck_ok and ck_v1_ok): the bad cases use them for the parts of a command line that are not under
test, and the runner checks once that they are accepted.
"""
import json
import os
import struct
import sys

OUT = sys.argv[1]
V, T, D = 16, 8, 8


def put(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


# ---- token shards -----------------------------------------------------------
def header(magic=20240520, version=1, count=0):
    h = [0] * 256
    h[0], h[1], h[2] = magic, version, count
    return struct.pack("<256i", *h)


def toks(n, vocab=V):
    return struct.pack("<%dH" % n, *[(i * 7 + 3) % vocab for i in range(n)])


put("shard_ok.bin", header(count=200) + toks(200))
put("shard_empty.bin", b"")
put("shard_short_header.bin", header(count=10)[:100])
put("shard_bad_magic.bin", header(magic=20240521, count=200) + toks(200))
put("shard_bad_version.bin", header(version=2, count=200) + toks(200))
put("shard_count_gt_size.bin", header(count=300) + toks(200))
put("shard_count_lt_size.bin", header(count=100) + toks(200))
put("shard_negative_count.bin", header(count=-1) + toks(200))
put("shard_zero_tokens.bin", header(count=0))
put("shard_odd_bytes.bin", header(count=200) + toks(200) + b"\x01")
put("shard_truncated.bin", (header(count=200) + toks(200))[:1024 + 2 * 150 + 1])
put("shard_token_ge_vocab.bin",
    header(count=200) + toks(150) + struct.pack("<H", V) + toks(49))
put("shard_token_max.bin", header(count=200) + toks(199) + struct.pack("<H", 65535))
put("shard_too_few_tokens.bin", header(count=5) + toks(5))   # < one batch of seq_len 8


# llm.c's uint32 format: magic 20240801, version 7.
def toks32(n, vocab=V):
    return struct.pack("<%dI" % n, *[(i * 5 + 1) % vocab for i in range(n)])


U32 = dict(magic=20240801, version=7)
put("shard32_ok.bin", header(count=200, **U32) + toks32(200))
put("shard32_bad_version.bin", header(magic=20240801, version=1, count=200) + toks32(200))
put("shard32_as_u16.bin", header(count=200, **U32) + toks(200))   # uint16 ids: too short
put("shard32_token_ge_vocab.bin",
    header(count=200, **U32) + toks32(150) + struct.pack("<I", 70000) + toks32(49))
put("shard32_id_2_31.bin",
    header(count=200, **U32) + toks32(10) + struct.pack("<I", 1 << 31) + toks32(189))


# ---- safetensors --------------------------------------------------------------
def tiny_shapes():
    s = {"wte.weight": [V, D], "wpe.weight": [T, D], "ln_f.weight": [D], "ln_f.bias": [D]}
    p = "h.0."
    s.update({p + "ln_1.weight": [D], p + "ln_1.bias": [D],
              p + "attn.c_attn.weight": [D, 3 * D], p + "attn.c_attn.bias": [3 * D],
              p + "attn.c_proj.weight": [D, D], p + "attn.c_proj.bias": [D],
              p + "ln_2.weight": [D], p + "ln_2.bias": [D],
              p + "mlp.c_fc.weight": [D, 4 * D], p + "mlp.c_fc.bias": [4 * D],
              p + "mlp.c_proj.weight": [4 * D, D], p + "mlp.c_proj.bias": [D]})
    return s


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def st_entries(shapes, dtype="F32", esize=4):
    """Header entries laid out back to back in name order, and the data size."""
    hdr, off = {}, 0
    for name in sorted(shapes):
        n = numel(shapes[name]) * esize
        hdr[name] = {"dtype": dtype, "shape": shapes[name], "data_offsets": [off, off + n]}
        off += n
    return hdr, off


def st_bytes(hdr, nbytes, header_len=None):
    text = hdr if isinstance(hdr, (bytes, bytearray)) else json.dumps(hdr).encode()
    n = len(text) if header_len is None else header_len
    data = bytes(nbytes)        # all-zero weights: finite in every float dtype
    return struct.pack("<Q", n) + text + data


def st(name, shapes=None, mutate=None, dtype="F32", esize=4, extra=0):
    hdr, n = st_entries(shapes or tiny_shapes(), dtype, esize)
    if mutate:
        mutate(hdr)
    put(name, st_bytes(hdr, n + extra))


st("st_ok.safetensors")
put("st_empty.safetensors", b"")
put("st_short.safetensors", b"\x10\x00\x00")
_h, _n = st_entries(tiny_shapes())
_good = st_bytes(_h, _n)
put("st_hdrlen_beyond_file.safetensors", struct.pack("<Q", len(_good) + 100) + _good[8:])
put("st_hdrlen_huge.safetensors", struct.pack("<Q", 1 << 62) + _good[8:])
put("st_hdr_not_json.safetensors", st_bytes(b"{\"wte.weight\": {\"dtype\": F32", 0))
put("st_hdr_array.safetensors", st_bytes(b"[1, 2, 3]", 0))
put("st_truncated_data.safetensors", _good[:-64])
put("st_trailing_bytes.safetensors", _good + bytes(16))   # appended to


def set_(name, key, value):
    def f(h):
        h[name][key] = value
    return f


st("st_dtype_unknown.safetensors", mutate=set_("wte.weight", "dtype", "F33"))
st("st_dtype_int.safetensors", mutate=set_("ln_f.bias", "dtype", "I32"))
st("st_dtype_not_string.safetensors", mutate=set_("ln_f.bias", "dtype", 32))
st("st_all_f64.safetensors", dtype="F64", esize=8)
st("st_shape_negative.safetensors", mutate=set_("ln_f.bias", "shape", [-8]))
st("st_shape_not_array.safetensors", mutate=set_("ln_f.bias", "shape", "8"))
st("st_shape_overflow.safetensors",
   mutate=set_("ln_f.bias", "shape", [4294967296, 4294967296, 4294967296]))
st("st_shape_vs_offsets.safetensors", mutate=set_("ln_f.bias", "shape", [9]))
st("st_offsets_beyond_data.safetensors", mutate=lambda h: h["wte.weight"].update(
    data_offsets=[h["wte.weight"]["data_offsets"][0] + 64, h["wte.weight"]["data_offsets"][1] + 64]))
st("st_offsets_reversed.safetensors", mutate=set_("ln_f.bias", "data_offsets", [32, 0]))
st("st_offsets_one_value.safetensors", mutate=set_("ln_f.bias", "data_offsets", [0]))
st("st_overlap.safetensors", mutate=lambda h: h["ln_f.weight"].update(
    data_offsets=list(h["ln_f.bias"]["data_offsets"])))
st("st_entry_not_object.safetensors", mutate=lambda h: h.__setitem__("ln_f.bias", [1, 2]))
st("st_missing_key.safetensors", mutate=lambda h: h["ln_f.bias"].pop("dtype"))
st("st_metadata_not_object.safetensors", mutate=lambda h: h.__setitem__("__metadata__", 5))
_s = tiny_shapes()
del _s["ln_f.bias"]
st("st_missing_tensor.safetensors", shapes=_s)
_s = tiny_shapes()
_s["h.1.ln_1.weight"] = [D]
st("st_extra_tensor.safetensors", shapes=_s)
_s = tiny_shapes()
_s["wte.weight"] = [V - 1, D]
st("st_wrong_shape_wte.safetensors", shapes=_s)
_s = tiny_shapes()
_s["h.0.attn.c_attn.weight"] = [3 * D, D]        # transposed
st("st_wrong_shape_transposed.safetensors", shapes=_s)
_s = tiny_shapes()
_s["ln_f.weight"] = [1, D]
st("st_wrong_rank.safetensors", shapes=_s)
# the same data with one name given twice in the header text
_dup = json.dumps(_h).encode()
_dup = _dup[:-1] + b', "wpe.weight": ' + json.dumps(_h["wpe.weight"]).encode() + b"}"
put("st_duplicate_name.safetensors", st_bytes(_dup, _n))


# Weights that are not finite: refused at the load, naming file and tensor.
def st_with(shapes, values, dtype="F32", esize=4):
    """Zero tensors of the shapes but for values: {(tensor, index): packed bytes}."""
    hdr, n = st_entries(shapes, dtype, esize)
    data = bytearray(n)
    for (tensor, index), packed in values.items():
        at = hdr[tensor]["data_offsets"][0] + index * esize
        data[at:at + esize] = packed
    return st_bytes(hdr, 0) + bytes(data)


put("st_nan.safetensors", st_with(tiny_shapes(), {
    ("h.0.attn.c_proj.weight", 5): struct.pack("<f", float("nan"))}))
put("st_inf_f16.safetensors", st_with(tiny_shapes(), {
    ("wpe.weight", 3): struct.pack("<H", 0xFC00)}, "F16", 2))
# Finite, but so large that the loss overflows: eval must not print NaN.
_big = {(t, i): struct.pack("<f", 1e30) for t, n in (("ln_f.weight", D), ("ln_f.bias", D),
                                                       ("wte.weight", V * D)) for i in range(n)}
put("st_huge.safetensors", st_with(tiny_shapes(), _big))


# ---- checkpoints ----------------------------------------------------------------
# Checkpoint directories for tiny.json (train.steps 1) whose state.json
# holds numbers out of bounds. Format 1 has no checksums, so anything in it
# is loaded unverified; format 2 ones carry correct checksums over bad
# values, as an edited file re-summed would.
def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


_shard = header(count=200) + toks(200)
_model = {"kind": "gpt", "layers": 1, "d_model": D, "heads": 2, "seq_len": T, "vocab": V}


def checkpoint(dirname, fmt=2, optimizer=None, **state):
    path = os.path.join(OUT, dirname)
    os.makedirs(path)
    files = {"model.safetensors": st_bytes(*st_entries(tiny_shapes()))}
    moments = {}
    for name, shape in tiny_shapes().items():
        moments["m." + name] = shape
        moments["v." + name] = shape
    files["optimizer.safetensors"] = st_with(moments, optimizer or {})
    for name, data in files.items():
        with open(os.path.join(path, name), "wb") as f:
            f.write(data)
    o = {"format": fmt, "step": 1, "loss": 1.0, "time": "2026-01-01T00:00:00Z",
         "data_position": 0,
         "data": {"shard": "shard_ok.bin", "shard_bytes": len(_shard),
                  "head_crc32c": "%08x" % crc32c(_shard), "micro_batches": 1, "replicas": 1,
                  "micro_batch_size": 1, "seq_len": T},
         "config": {"model": _model}}
    if fmt >= 2:
        o["files"] = {n: {"bytes": len(d), "crc32c": "%08x" % crc32c(d)} for n, d in files.items()}
    for key, value in state.items():   # data_replicas=-1 sets o["data"]["replicas"]
        if key.startswith("data_") and key != "data_position":
            o["data"][key[5:]] = value
        else:
            o[key] = value
    text = json.dumps(o, indent=2)
    if fmt >= 2:
        head = text[:-2] + ",\n"
        text = head + '  "checksum": "%08x"\n}\n' % crc32c(head.encode())
    with open(os.path.join(path, "state.json"), "w") as f:
        f.write(text)


checkpoint("ck_ok")                                   # a control: it resumes
checkpoint("ck_v1_ok", fmt=1)                         # so does this one, unverified
checkpoint("ck_step_int_max", fmt=1, step=2147483647)
checkpoint("ck_step_negative", fmt=1, step=-1)
checkpoint("ck_step_string", fmt=1, step="1")
checkpoint("ck_step_huge", step=1 << 40)
checkpoint("ck_pos_past_end", fmt=1, data_position=1000)
checkpoint("ck_pos_negative", fmt=1, data_position=-5)
checkpoint("ck_replicas_negative", data_replicas=-1)
checkpoint("ck_micro_batches_zero", data_micro_batches=0)
checkpoint("ck_shard_bytes_string", data_shard_bytes="1424")
checkpoint(os.path.join("ck_named", "step_000002"), step=5)
checkpoint("ck_lr_string", config={"model": _model, "train": {"lr": "0.001"}})
# A second moment below 0 (its square root would be NaN), summed as if
# written so.
_v = {("v.ln_f.bias", 1): struct.pack("<f", -1.0)}
checkpoint("ck_negative_moment", optimizer=_v)


# ---- configs too big or odd to keep as committed files ------------------------
def text(name, s):
    put(name, s.encode())


text("deep_array.json", '{"devices":' + "[" * 100000 + "]" * 100000 + "}")
text("deep_object.json", '{"model":' * 50000 + "{}" + "}" * 50000)
text("long_key.json", '{"' + "k" * 1000000 + '": 1}')
text("huge_split.json", '{"schedule":{"split":[' + ",".join(["0"] * 3000) + "]}}")
put("bom.json", b"\xef\xbb\xbf{}")
text("unreadable.json", "{}")
os.chmod(os.path.join(OUT, "unreadable.json"), 0)
os.mkfifo(os.path.join(OUT, "fifo.bin"))     # a shard or weights path that is a FIFO
