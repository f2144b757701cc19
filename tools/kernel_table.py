#!/usr/bin/env python3
"""kernel_table.py — kernel time per micro-batch by family, hanayo beside PyTorch.

Reads the kernels one side ran and sums their device time into the
families of issue 23's table, so that every kernel change is judged
against its peer:

    attention forward, attention backward, GEMMs,
    bias/add + GELU + LayerNorm + classifier, embedding, other,
    optimizer (AdamW, gradient norm, clip; once per step)

Every kernel lands in exactly one family: the first rule of RULES whose
pattern its name matches, else "other", which is printed like the rest and
whose kernels are listed by name below the table, so nothing is dropped
silently. tests/test_kernel_table.py checks that every __global__ of
kernels/cuda/ has a family.

Inputs (standard library only: the GPU machine's python3 has no pandas
promise, and this runs in `make test` too):

  hanayo   ncu's CSV of one eager step, as tools/gpu-check.sh makes it:
               ncu --clock-control none --cache-control none \
                   --metrics gpu__time_duration.sum --csv --page raw \
                   --print-units base --log-file K.csv hanayo train ...
           (--page raw: one row per kernel, the units in the second row;
           the details page, one row per metric, is read too)
  pytorch  torch.profiler's Chrome trace of one step
           (tools/bench_torch.py --profile T.json): events with cat
           "kernel", dur in microseconds; a .gz file is read as gzip

Memory copies and sets are not kernels and are counted on neither side
(ncu does not see them). The per-micro-batch rows are a step's time over
the micro-batches it ran (--hanayo-micro-batches, --torch-micro-batches);
the optimizer row is per step.

Usage:
  kernel_table.py [--title T] [--hanayo-ncu K.csv] [--hanayo-micro-batches M]
                  [--torch-trace T.json] [--torch-micro-batches M] [--json OUT]

Prints the table; exits 1 when neither input gave a kernel, 2 on bad usage.
"""
import argparse
import csv
import gzip
import io
import json
import re
import sys

# (key, label, per): the rows, in the order printed; "mb" rows are per
# micro-batch, "step" rows once per step.
FAMILIES = [
    ("attn_fwd", "attention forward", "mb"),
    ("attn_bwd", "attention backward", "mb"),
    ("gemm", "GEMMs", "mb"),
    ("pointwise", "bias/add + GELU + LayerNorm + classifier", "mb"),
    ("embedding", "embedding", "mb"),
    ("other", "other", "mb"),
    ("optimizer", "AdamW + grad norm + clip (per step)", "step"),
]
FAMILY_KEYS = [f[0] for f in FAMILIES]

# What names attention: hanayo's fa_* (attention.cu) and any fa3_* after
# it, PyTorch's flash (pytorch_flash::flash_fwd_kernel, flash_bwd_*),
# memory-efficient (fmha_cutlassF/B) and cuDNN's fused SDPA
# (cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_..., _bprop_).
# Only attention reaches cuDNN in either program (no convolutions), so a
# cudnn kernel is attention.
_ATTN = r"(?:flash|fmha|sdpa|attention|cudnn|\bfa\d*_)"
_BWD = r"(?:bwd|bprop|backward|dgrad|cutlassb|dot_do_o|convert_dq)"

# (family, pattern), searched case-insensitively in the full kernel name
# (ncu's demangled "void fa_fwd_kernel<64>(fa_args)" or a bare name);
# the first match wins, so the order matters:
#   - attention before GEMMs (fmha_cutlassF is not a GEMM of ours);
#   - hanayo's bias kernels (matmul.cu's mm_bias_*, mm_dbias_*) before
#     the GEMMs they sit beside: the issue counts bias with the
#     elementwise work that an epilogue could carry;
#   - the optimizer before the elementwise catch-alls (PyTorch's fused
#     AdamW and clip_grad_norm_ are multi_tensor_apply kernels);
#   - embedding before the Triton catch-all (a fused Triton kernel whose
#     name says "embedding" is counted as embedding even if a LayerNorm
#     rides in it).
RULES = [
    # RoPE (rope.cu) rides with the attention it prepares: its inverse,
    # on d(q) and d(k), with the backward.
    ("attn_bwd", r"\brope_bwd"),
    ("attn_fwd", r"\brope_"),
    # Generation's KV-cache write (kvcache.cu) likewise, with the cached
    # attention that reads it.
    ("attn_fwd", r"\bkv_append"),
    ("attn_bwd", r"\bfa\d*_(?:bwd|dot)"),
    ("attn_bwd", _ATTN + r".*" + _BWD),
    ("attn_bwd", _BWD + r".*" + _ATTN),
    ("attn_fwd", _ATTN),
    ("pointwise", r"\bmm_d?bias"),
    ("gemm", r"gemm|gemv|nvjet|cutlass|xmma|cublas|splitkreduce|\bmm_|triton_tem_fused_(?:mm|addmm|bmm)"),
    ("optimizer", r"adam|multi_tensor_apply|lpnorm|sumsq|grad_?norm|global_norm|\bclip_kernel"),
    # Embedding: ours (embedding.cu), PyTorch's gather and, uncompiled, its
    # sort-and-segment backward.
    ("embedding", r"embedding|\bemb_|indexselect|index_select|indexing_backward|radixsort"
                  r"|partial_segment|partials_per_segment|num_of_segments|compute_grad_weight"
                  r"|sum_and_scatter"),
    # The rest of a layer: ours (layernorm.cu with RMSNorm, gelu.cu,
    # swiglu.cu, classifier.cu, the adds), Triton's fusions, and
    # uncompiled PyTorch's own kernels (RowwiseMoments and
    # GammaBetaBackward are its LayerNorm).
    ("pointwise", r"\bln_|layer_?norm|rms_?norm|rowwisemoments|gammabeta|gelu|swiglu|silu"
                  r"|\bcls_|softmax|cross_?entropy"
                  r"|nll_loss|\badd|residual|triton_|elementwise|reduce_kernel|bias"),
]
_RULES = [(fam, re.compile(pat, re.I)) for fam, pat in RULES]


def family_of(name):
    """The family key of a kernel's name ("other" when no rule matches)."""
    for fam, rx in _RULES:
        if rx.search(name):
            return fam
    return "other"


def short_name(name):
    """A kernel's name without 'void ', anonymous namespaces, template
    arguments and parameters, for the "other" listing:
    'void a::(anonymous namespace)::b<1, 2>(int)' -> 'a::b'."""
    s = name.strip().replace("(anonymous namespace)::", "")
    if s.startswith("void "):
        s = s[5:]
    depth, out = 0, []
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif ch == "(" and depth == 0:
            break
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip() or name.strip()


# ---------------------------------------------------------------------------
# Readers: each returns [(kernel name, nanoseconds)] in launch order.

_UNITS_NS = {"ns": 1.0, "nsecond": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
             "second": 1e9, "s": 1e9}


def _number(text):
    """ncu's number: '1,234.5' (thousands separators in the details page)."""
    return float(text.strip().replace(",", ""))


def parse_ncu_csv(text):
    """ncu's --csv output (raw or details page) from a log that may hold
    other lines too (==PROF== notes, the program's own output): the table
    starts at the line whose first field is "ID"."""
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        if line.startswith('"ID"') or line.startswith("ID,"):
            start = i
            break
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    col = {h: i for i, h in enumerate(header)}
    if "Kernel Name" not in col:
        return []
    name_i = col["Kernel Name"]
    out = []
    if "Metric Name" in col and "Metric Value" in col:   # the details page
        unit_i = col.get("Metric Unit")
        for r in rows[1:]:
            if len(r) < len(header) or r[col["Metric Name"]] != "gpu__time_duration.sum":
                continue
            unit = r[unit_i].strip() if unit_i is not None else "nsecond"
            try:
                out.append((r[name_i], _number(r[col["Metric Value"]]) * _UNITS_NS.get(unit, 1.0)))
            except ValueError:
                continue
        return out
    # The raw page: one column per metric, the units in the row after the
    # header (its ID field is empty).
    t_i = col.get("gpu__time_duration.sum")
    if t_i is None:
        return []
    scale = 1.0
    body = rows[1:]
    if body and not body[0][0].strip():
        scale = _UNITS_NS.get(body[0][t_i].strip(), 1.0)
        body = body[1:]
    for r in body:
        if len(r) <= max(name_i, t_i) or not r[0].strip():
            continue
        try:
            out.append((r[name_i], _number(r[t_i]) * scale))
        except ValueError:
            continue
    return out


def parse_torch_trace(text):
    """torch.profiler's Chrome trace: the "kernel" events, dur in us."""
    doc = json.loads(text)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    out = []
    for e in events:
        if not isinstance(e, dict) or str(e.get("cat", "")).lower() != "kernel":
            continue
        if e.get("ph", "X") != "X":
            continue
        try:
            out.append((str(e["name"]), float(e["dur"]) * 1e3))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        return f.read()


# ---------------------------------------------------------------------------
# Summing and printing.

def summarize(kernels, micro_batches=1):
    """{"ms": {family: ms}, "count": {family: launches}, "other": [(name,
    launches, ms)], "kernels": n}: the per-micro-batch families divided by
    micro_batches, the optimizer per step, "other" listed by name (largest
    first), counts per step."""
    m = max(int(micro_batches), 1)
    ns = dict.fromkeys(FAMILY_KEYS, 0.0)
    count = dict.fromkeys(FAMILY_KEYS, 0)
    other = {}
    for name, t in kernels:
        fam = family_of(name)
        ns[fam] += t
        count[fam] += 1
        if fam == "other":
            k = short_name(name)
            n0, t0 = other.get(k, (0, 0.0))
            other[k] = (n0 + 1, t0 + t)
    per = {key: p for key, _, p in FAMILIES}
    ms = {k: ns[k] / 1e6 / (m if per[k] == "mb" else 1) for k in FAMILY_KEYS}
    listed = sorted(((k, n, t / 1e6 / m) for k, (n, t) in other.items()), key=lambda x: -x[2])
    return {"ms": ms, "count": count, "other": listed, "kernels": len(kernels),
            "micro_batches": m}


def _ratio(a, b):
    return "%.2fx" % (a / b) if a > 0 and b > 0 else ""


def format_table(title, hanayo=None, torch=None):
    """The side-by-side table (either side may be None), as text. The last
    column is hanayo's time over PyTorch's: above 1.00x hanayo is slower."""
    w = max(len(lbl) for _, lbl, _ in FAMILIES)
    w = max(w, len("total per micro-batch"))
    head = "%-*s %9s %9s %10s" % (w, "kernel time, ms", "hanayo", "pytorch", "ratio")
    lines = [title, head, "-" * len(head)]

    def cell(side, key):
        return "%9.2f" % side["ms"][key] if side else "%9s" % "-"

    def total(side):
        return sum(side["ms"][k] for k, _, p in FAMILIES if p == "mb") if side else 0.0

    for key, label, per in FAMILIES:
        if per == "step":
            h, t = total(hanayo), total(torch)
            lines.append("%-*s %9s %9s %10s" % (w, "total per micro-batch",
                                                 "%.2f" % h if hanayo else "-",
                                                 "%.2f" % t if torch else "-", _ratio(h, t)))
        h = hanayo["ms"][key] if hanayo else 0.0
        t = torch["ms"][key] if torch else 0.0
        lines.append("%-*s %s %s %10s" % (w, label, cell(hanayo, key), cell(torch, key), _ratio(h, t)))
    lines.append("ratio: hanayo's time over PyTorch's (above 1.00x hanayo is slower)")
    for side_name, side in (("hanayo", hanayo), ("pytorch", torch)):
        if side is None:
            continue
        lines.append("%s: %d kernels over %d micro-batch%s" % (
            side_name, side["kernels"], side["micro_batches"],
            "" if side["micro_batches"] == 1 else "es"))
        for name, n, ms in side["other"][:8]:
            lines.append("  other: %-60s %4d x %8.3f ms" % (name[:60], n, ms))
        if len(side["other"]) > 8:
            lines.append("  other: ... and %d more names" % (len(side["other"]) - 8))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--title", default="kernel time per micro-batch")
    ap.add_argument("--hanayo-ncu", help="ncu's CSV of hanayo's eager step")
    ap.add_argument("--hanayo-micro-batches", type=int, default=1)
    ap.add_argument("--torch-trace", help="torch.profiler's Chrome trace of one step")
    ap.add_argument("--torch-micro-batches", type=int, default=1)
    ap.add_argument("--json", help="also write both sides' sums here")
    a = ap.parse_args(argv)
    sides = {}
    notes = []
    for key, path, parse, m in (("hanayo", a.hanayo_ncu, parse_ncu_csv, a.hanayo_micro_batches),
                                ("pytorch", a.torch_trace, parse_torch_trace, a.torch_micro_batches)):
        if not path:
            continue
        try:
            kernels = parse(read_text(path))
        except FileNotFoundError:
            notes.append("%s: no %s (nothing made it in this run)" % (key, path))
            continue
        except (OSError, ValueError, EOFError) as e:
            notes.append("%s: cannot read %s (%s)" % (key, path, e))
            continue
        if not kernels:
            notes.append("%s: no kernels in %s" % (key, path))
            continue
        sides[key] = summarize(kernels, m)
    if sides:
        print(format_table(a.title, sides.get("hanayo"), sides.get("pytorch")))
    for n in notes:
        print(n)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"title": a.title, **sides}, f, indent=1)
    return 0 if sides else 1


if __name__ == "__main__":
    sys.exit(main())
