#!/usr/bin/env python3
"""bench_torch.py — the PyTorch GPT-2 that hanayo's GPU benchmark runs beside it.

The strongest plain-PyTorch recipe for one GPU, doing the work hanayo's
step does: the GPT-2 architecture (pre-LN blocks, tanh GELU, LM head tied
to the token embedding), the vocabulary padded to a multiple of 128 as
hanayo pads it (50257 -> 50304) with the padding logits left out of the
loss as hanayo masks them, torch.compile, scaled_dot_product_attention
(flash) with a causal mask, bf16 autocast with fp32 master weights, the
loss of each micro-batch scaled by 1/M and accumulated over the same
micro-batches, gradient clipping at 1.0, fused AdamW with weight decay on
the matrices. It trains on random tokens (throughput does not depend on
the data) and prints one JSON line: {"tokens_per_s": ..., "ms_per_step":
..., "mfu": ..., ...}. If torch.compile fails there, it says so on
stderr and measures the model uncompiled ("compiled": false).

With --profile FILE, one more step after the timed ones runs under
torch.profiler (CUDA activity only) and its Chrome trace is written to
FILE: every kernel of one step of M micro-batches, with its device time,
for tools/kernel_table.py to set beside hanayo's (tools/gpu-check.sh's
kernels section). That step is not among the timed ones.

Usage: python3 tools/bench_torch.py [--layers 12] [--d-model 768] [--heads 12]
       [--seq 1024] [--micro-batch 8] [--micro-batches 4] [--steps 12] [--warmup 4]
       [--profile TRACE.json]
"""
import argparse
import json
import math
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--profile", metavar="TRACE", help="write one step's torch.profiler trace here")
    args = ap.parse_args()

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device"}))
        return 1
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = "cuda"
    C, NH, T, L = args.d_model, args.heads, args.seq, args.layers
    V = args.vocab
    Vp = (V + 127) // 128 * 128   # HY_VOCAB_ALIGN in lib/model.h

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C)
            self.c_fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            B_, T_, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q = q.view(B_, T_, NH, C // NH).transpose(1, 2)
            k = k.view(B_, T_, NH, C // NH).transpose(1, 2)
            v = v.view(B_, T_, NH, C // NH).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B_, T_, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(Vp, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)
            self.lm_head = nn.Linear(C, Vp, bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for b in self.h:
                x = b(x)
            logits = self.lm_head(self.ln_f(x))
            # The padding columns take no part in the loss (their gradient is 0).
            return F.cross_entropy(logits[..., :V].reshape(-1, V).float(), targets.reshape(-1))

    model = GPT().to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    compiled = not args.no_compile
    step_model = torch.compile(model) if compiled else model
    Bm, M = args.micro_batch, args.micro_batches
    data = torch.randint(0, V, (M, Bm, T + 1), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        for m in range(M):
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = step_model(data[m, :, :-1], data[m, :, 1:]) / M
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    try:
        step()
    except Exception as e:   # a compiler that fails here must not lose the baseline
        if not compiled:
            raise
        print("bench_torch: torch.compile failed (%s: %s); measuring uncompiled"
              % (type(e).__name__, e), file=sys.stderr)
        compiled, step_model = False, model
        step()
    for _ in range(args.warmup - 1):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    profiled = None
    if args.profile:
        # A failing profiler must not lose the timing above.
        try:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                step()
                torch.cuda.synchronize()
            prof.export_chrome_trace(args.profile)
            profiled = args.profile
        except Exception as e:
            print("bench_torch: profiling failed (%s: %s)" % (type(e).__name__, e), file=sys.stderr)
    tokens = M * Bm * T
    # Model FLOPs per token (PaLM appendix B): 6N + 12 L T C for attention,
    # N without the position embedding.
    n_flop = n_params - T * C
    flops = tokens * (6 * n_flop + 12 * L * T * C)
    peak = 989e12   # H100/H200 SXM dense bf16, the datasheet figure
    print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "compiled": compiled,
                      "layers": L, "d_model": C, "heads": NH, "seq": T,
                      "vocab": V, "vocab_padded": Vp, "micro_batches": M, "micro_batch_size": Bm,
                      "params": n_params, "tokens_per_step": tokens, "ms_per_step": med * 1e3,
                      "tokens_per_s": tokens / med, "mfu": flops / med / peak,
                      "device": torch.cuda.get_device_name(), "profile": profiled}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
