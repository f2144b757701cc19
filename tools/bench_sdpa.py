#!/usr/bin/env python3
"""bench_sdpa.py — PyTorch's fused attention alone, the peer hanayo's attention kernels are judged against.

tools/gpu-check.sh's sm90 section times hanayo's two attention kernels
(attention.cu and the Hopper attention_sm90.cu) per launch with ncu on two
shapes: one layer of GPT-2 124M at B = 16 ("124m": T = 1024, 12 heads of
64, causal) and of the head-size-128 model at B = 8 ("h128": 16 heads of
128). This script times torch.nn.functional.scaled_dot_product_attention
on the same shapes, once per SDPA backend that runs here (cuDNN's fused
SDPA, then flash): the median of --reps forward calls and of --reps
backward calls (torch.autograd.grad of one retained forward), each between
CUDA events, after --warmup calls of each. Inputs are random bf16 [B, NH,
T, hd] (zeros can run faster than real data).

It prints one JSON line per (shape, backend): {"shape", "backend",
"fwd_ms", "bwd_ms", "fwd_tflops", "bwd_tflops"}, or {"shape", "backend",
"error"} where that backend refuses the shape. FLOPs are counted as
docs/cuda.md counts them: forward 4·B·NH·T²·hd, halved when causal; the
backward 2.5 times the forward.

Usage: python3 tools/bench_sdpa.py [--shapes 124m,h128] [--reps 20] [--warmup 5]
"""
import argparse
import json
import statistics
import sys

SHAPES = {"124m": (16, 12, 1024, 64), "h128": (8, 16, 1024, 128)}   # B, NH, T, hd; causal


def flops_fwd(B, NH, T, hd, causal=True):
    f = 4.0 * B * NH * T * T * hd
    return f / 2 if causal else f


def timed(torch, fn, reps, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="124m,h128")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [("cudnn", getattr(SDPBackend, "CUDNN_ATTENTION", None)), ("flash", SDPBackend.FLASH_ATTENTION)]
    for name in a.shapes.split(","):
        if name not in SHAPES:
            print("bench_sdpa: unknown shape %r (known: %s)" % (name, ", ".join(SHAPES)), file=sys.stderr)
            return 2
        B, NH, T, hd = SHAPES[name]
        g = torch.Generator(device="cuda").manual_seed(1)
        q, k, v, dout = (torch.randn(B, NH, T, hd, device="cuda", dtype=torch.bfloat16, generator=g)
                         for _ in range(4))
        for t in (q, k, v):
            t.requires_grad_(True)
        fwd_f = flops_fwd(B, NH, T, hd)
        for bname, backend in backends:
            row = {"shape": name, "backend": bname}
            if backend is None:
                row["error"] = "this PyTorch has no such SDPA backend"
                print(json.dumps(row), flush=True)
                continue
            try:
                with sdpa_kernel(backend):
                    fwd = timed(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                a.reps, a.warmup)
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    bwd = timed(torch, lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                                a.reps, a.warmup)
            except RuntimeError as e:
                row["error"] = str(e).splitlines()[0][:200]
                print(json.dumps(row), flush=True)
                continue
            row.update(fwd_ms=round(fwd, 4), bwd_ms=round(bwd, 4),
                       fwd_tflops=round(fwd_f / fwd / 1e9, 1), bwd_tflops=round(2.5 * fwd_f / bwd / 1e9, 1))
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
