#!/usr/bin/env python3
"""test_kernel_table.py — the GPU check's per-kernel table, checked without a GPU.

tools/kernel_table.py groups the kernels of one step into issue 23's
families (attention forward and backward, GEMMs, bias/add + GELU +
LayerNorm + classifier, embedding, other, the optimizer per step) for
hanayo (ncu's CSV) and PyTorch (torch.profiler's Chrome trace) and prints
them side by side. Checked here, on samples written by hand in
tests/fixtures/ (ncu-raw-sample.csv, ncu-details-sample.csv,
torch-trace-sample.json), with every figure worked out by hand:

1. names: each of a list of real kernel names, ours and PyTorch's
   (cuDNN's SDPA, flash, cuBLAS's nvjet and xmma, Triton's fusions, the
   fused AdamW), lands in its family; and every __global__ kernel of
   kernels/cuda/ and graphs/ has a family other than "other", except the
   test kernels and the one conversion made before the first step, so a
   new kernel without a rule is caught here, not on the GPU machine;
2. readers: ncu's raw page (units row, quoted names holding commas,
   thousands separators, ==PROF== lines before the table), ncu's details
   page (one row per metric, usecond and msecond), the Chrome trace (only
   "kernel" events: no CPU ops, copies, sets or flow events), and a
   gzipped trace;
3. sums: per micro-batch over the micro-batches, the optimizer per step,
   "other" listed by name;
4. the table: the figures and ratios, every row as wide as the header, a
   missing side printed as "-" with no ratio;
5. the command line: both files in, the table out, exit 0; no usable
   input, exit 1.

Standard library only. Run from the repository root; prints
"kernel_table: N passed, N failed".
"""
import glob
import gzip
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, "tools")
import kernel_table as kt  # noqa: E402

passed = 0
failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL: " + what, file=sys.stderr)


def near(a, b, tol=1e-9):
    return abs(a - b) <= tol * max(1.0, abs(b))


FIX = "tests/fixtures"


def test_names():
    cases = [
        # ours
        ("void fa_fwd_kernel<64>(fa_args)", "attn_fwd"),
        ("fa_fwd_kernel", "attn_fwd"),
        ("void fa_bwd_kv_kernel<128>(fa_args)", "attn_bwd"),
        ("void fa_bwd_q_kernel<64>(fa_args)", "attn_bwd"),
        ("void fa_dot_kernel(fa_args, unsigned long)", "attn_bwd"),
        ("fa3_fwd_wgmma_kernel", "attn_fwd"),
        ("fa3_bwd_wgmma_kernel", "attn_bwd"),
        ("void kv_append_kernel(__nv_bfloat16*, __nv_bfloat16*, int)", "attn_fwd"),
        ("void ln_fwd_kernel<1, 1>(__nv_bfloat16 *, float *)", "pointwise"),
        ("void ln_bwd_partial_kernel(float *, float *)", "pointwise"),
        ("void gelu_bwd_kernel<0>(__nv_bfloat16 *)", "pointwise"),
        ("void swiglu_bwd_kernel<1, 0>(__nv_bfloat16 *, const __nv_bfloat16 *)", "pointwise"),
        ("void ln_fwd_kernel<1, 1, 1>(__nv_bfloat16 *, float *)", "pointwise"),
        ("void rope_fwd_kernel(__nv_bfloat16 *, const float *, unsigned long, int, int, int, int)",
         "attn_fwd"),
        ("void rope_bwd_kernel(__nv_bfloat16 *, const float *, unsigned long, int, int, int, int)",
         "attn_bwd"),
        ("void cls_loss_kernel(float *, const double *, const int *, int, float)", "pointwise"),
        ("void mm_bias_broadcast_kernel(__nv_bfloat16 *, const __nv_bfloat16 *, int, int)", "pointwise"),
        ("void mm_dbias_finish_kernel(float *, const float *, int, int)", "pointwise"),
        ("void add_bf16_kernel(__nv_bfloat16 *, const __nv_bfloat16 *, unsigned long, unsigned long)",
         "pointwise"),
        ("void emb_sort_kernel(int *, const int *, int)", "embedding"),
        ("void adamw_kernel(hy_adamw_batch)", "optimizer"),
        ("void sumsq_finish_kernel(double *, const double *, int)", "optimizer"),
        ("void clip_kernel(float *, float *, const double *, int, float)", "optimizer"),
        ("void to_bf16_kernel(__nv_bfloat16 *, const float *, unsigned long, unsigned long)", "other"),
        # cuBLAS / cuBLASLt
        ("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNT", "gemm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
         "execute_segment_k_off_kernel__5x_cublas", "gemm"),
        ("void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>(cublasSplitKParams<float>)",
         "gemm"),
        ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8", "gemm"),
        # PyTorch's attention: cuDNN, flash, memory-efficient
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0",
         "attn_fwd"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_7_64x128x64_4x1x1_kernel0_0",
         "attn_bwd"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>, true>"
         "(pytorch_flash::Flash_fwd_params)", "attn_fwd"),
        ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64>>"
         "(pytorch_flash::Flash_bwd_params)", "attn_bwd"),
        ("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<64>>"
         "(pytorch_flash::Flash_bwd_params)", "attn_bwd"),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel::Params)",
         "attn_fwd"),
        ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel::Params)",
         "attn_bwd"),
        # Triton's fusions, PyTorch's optimizer and its uncompiled kernels
        ("triton_per_fused_add_native_layer_norm_3", "pointwise"),
        ("triton_poi_fused_gelu_gelu_backward_12", "pointwise"),
        ("triton_red_fused__log_softmax_nll_loss_forward_9", "pointwise"),
        ("triton_red_fused_sum_7", "pointwise"),
        ("triton_poi_fused_add_embedding_0", "embedding"),
        ("triton_poi_fused_embedding_dense_backward_1", "embedding"),
        ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
         "namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::"
         "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>>(...)", "optimizer"),
        ("void at::native::lpnorm_cleanup<float, (at::native::(anonymous namespace)::NormType)1, float, "
         "float>(float const*, at::native::(anonymous namespace)::TensorListAddresses, int)", "optimizer"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
         "std::array<char*, 3ul>>(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
         "pointwise"),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float)",
         "pointwise"),
        ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(long)",
         "pointwise"),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(float*)",
         "pointwise"),
        ("void at::native::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>(...)",
         "embedding"),
        ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>(...)",
         "other"),
    ]
    for name, want in cases:
        got = kt.family_of(name)
        check(got == want, "family_of(%r) = %s, want %s" % (name[:70], got, want))
    check(set(kt.FAMILY_KEYS) >= {f for f, _ in kt.RULES} | {"other"},
          "every rule names a family of the table")

    # Every kernel of ours has a family: a kernel added without a rule
    # would fall into "other" on the GPU machine.
    not_in_a_step = {
        "to_bf16_kernel",   # the weights' compute copy, once before the first step
    }
    lb = r"(?:__launch_bounds__\s*\([^)]*\)\s*)?"
    rx = re.compile(r"__global__\s+" + lb + r"void\s+" + lb + r"(\w+)\s*\(")
    found = 0
    for path in sorted(glob.glob("kernels/cuda/*.cu") + glob.glob("graphs/*.cu")):
        if os.path.basename(path) == "testops.cu":   # the tests' own kernels
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        names = rx.findall(text)
        # Each declaration read: one name per line declaring a kernel
        # (comments aside), so a form the pattern misses is caught too.
        decls = [l for l in text.splitlines()
                 if "__global__" in l and not l.lstrip().startswith(("//", "*", "/*"))]
        check(len(names) == len(decls), "%s: %d kernels declared, %d names read"
              % (path, len(decls), len(names)))
        for name in names:
            found += 1
            if name in not_in_a_step:
                continue
            fam = kt.family_of("void %s<64>(int)" % name)
            check(fam != "other", "%s: kernel %s has no family in tools/kernel_table.py's RULES"
                  % (path, name))
    check(found >= 20, "found the kernels of kernels/cuda (%d)" % found)

    check(kt.short_name("void at::native::(anonymous namespace)::CatArrayBatchedCopy<a::(anonymous "
                        "namespace)::T<4u>, 1>(int, float)") == "at::native::CatArrayBatchedCopy",
          "short_name drops void, anonymous namespaces, template arguments and parameters")
    check(kt.short_name("nvjet_hsh_256x128") == "nvjet_hsh_256x128", "short_name keeps a bare name")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_readers():
    raw = kt.parse_ncu_csv(read(os.path.join(FIX, "ncu-raw-sample.csv")))
    check(len(raw) == 17, "ncu raw page: 17 kernels (got %d)" % len(raw))
    if len(raw) == 17:
        check(raw[0][0].startswith("void to_bf16_kernel(") and near(raw[0][1], 50000.0),
              "ncu raw page: first kernel's name and nanoseconds")
        check(raw[2][0].startswith("void ln_fwd_kernel<0, 1>(") and near(raw[2][1], 200000.0),
              "ncu raw page: a quoted name holding commas stays one field")
        check(near(raw[16][1], 2e6), "ncu raw page: '2,000,000' read as 2e6 ns")
    # The same rows in microseconds: the units row scales them.
    text = read(os.path.join(FIX, "ncu-raw-sample.csv")).replace('"nsecond"', '"usecond"')
    us = kt.parse_ncu_csv(text)
    check(len(us) == 17 and near(us[1][1], 100000.0 * 1e3), "ncu raw page: usecond units row")
    check(kt.parse_ncu_csv("==PROF== no kernels were profiled\n") == [],
          "ncu: a log without a table gives no kernels")

    det = kt.parse_ncu_csv(read(os.path.join(FIX, "ncu-details-sample.csv")))
    check(len(det) == 2, "ncu details page: one entry per kernel's duration (got %d)" % len(det))
    if len(det) == 2:
        check(near(det[0][1], 1234.5e3), "ncu details page: '1,234.50' usecond = 1.2345e6 ns")
        check(near(det[1][1], 2.5e6) and det[1][0] == "adamw_kernel", "ncu details page: msecond")

    tr = kt.parse_torch_trace(read(os.path.join(FIX, "torch-trace-sample.json")))
    check(len(tr) == 22, "torch trace: 22 kernel events, nothing else (got %d)" % len(tr))
    check(all(not n.startswith(("Memcpy", "Memset", "aten::", "cuda", "ac2g")) for n, _ in tr),
          "torch trace: CPU ops, runtime calls, copies, sets and flows are left out")
    check(near(sum(t for _, t in tr), 2 * 2200e3 + 1016e3),
          "torch trace: durations in us read as ns")
    with tempfile.TemporaryDirectory() as d:
        gz = os.path.join(d, "t.json.gz")
        with gzip.open(gz, "wt", encoding="utf-8") as f:
            f.write(read(os.path.join(FIX, "torch-trace-sample.json")))
        check(len(kt.parse_torch_trace(kt.read_text(gz))) == 22, "torch trace: a .gz file is read")
    check(kt.parse_torch_trace('[{"cat": "Kernel", "name": "k", "dur": 2, "ph": "X"}]') == [("k", 2000.0)],
          "torch trace: a bare event list, 'Kernel' in any case")


# The samples' sums, worked out by hand (ms). hanayo: one micro-batch.
HANAYO = {"attn_fwd": 0.4, "attn_bwd": 1.0, "gemm": 2.05, "pointwise": 1.1, "embedding": 0.25,
          "other": 0.05, "optimizer": 2.024}
# PyTorch: two micro-batches of the same kernels, then one optimizer step.
TORCH = {"attn_fwd": 0.1, "attn_bwd": 0.25, "gemm": 1.2, "pointwise": 0.5, "embedding": 0.15,
         "other": 0.006, "optimizer": 1.004}


def sides():
    h = kt.summarize(kt.parse_ncu_csv(read(os.path.join(FIX, "ncu-raw-sample.csv"))), 1)
    t = kt.summarize(kt.parse_torch_trace(read(os.path.join(FIX, "torch-trace-sample.json"))), 2)
    return h, t


def test_sums():
    h, t = sides()
    for key in kt.FAMILY_KEYS:
        check(near(h["ms"][key], HANAYO[key]), "hanayo %s: %.6f ms, want %.6f" % (key, h["ms"][key], HANAYO[key]))
        check(near(t["ms"][key], TORCH[key]), "pytorch %s: %.6f ms, want %.6f" % (key, t["ms"][key], TORCH[key]))
    check(h["count"]["attn_bwd"] == 3 and t["count"]["gemm"] == 4, "launches counted per family")
    check(h["other"] == [("to_bf16_kernel", 1, 0.05)], "hanayo's other listed by name: %r" % (h["other"],))
    check(len(t["other"]) == 1 and t["other"][0][0] == "at::native::CatArrayBatchedCopy",
          "pytorch's other listed by name")
    check(h["kernels"] == 17 and t["kernels"] == 22 and t["micro_batches"] == 2, "kernel and micro-batch counts")
    z = kt.summarize([], 0)
    check(z["micro_batches"] == 1 and all(v == 0 for v in z["ms"].values()), "no kernels: zeros, M at least 1")


def test_table():
    h, t = sides()
    text = kt.format_table("GPT-2 124M, B = 16", h, t)
    lines = text.splitlines()
    check(lines[0] == "GPT-2 124M, B = 16", "the title first")
    width = len(lines[1])
    rows = lines[1:2] + lines[3:3 + len(kt.FAMILIES) + 1]
    check(all(len(r) == width for r in rows), "every row as wide as the header:\n" + text)
    check(lines[2] == "-" * width, "a rule under the header")

    def row(label):
        return next((l for l in lines if l.startswith(label + " ")), "")

    want = [
        ("attention forward", "0.40", "0.10", "4.00x"),
        ("attention backward", "1.00", "0.25", "4.00x"),
        ("GEMMs", "2.05", "1.20", "1.71x"),
        ("bias/add + GELU + LayerNorm + classifier", "1.10", "0.50", "2.20x"),
        ("embedding", "0.25", "0.15", "1.67x"),
        ("other", "0.05", "0.01", "8.33x"),
        ("total per micro-batch", "4.85", "2.21", "2.20x"),
        ("AdamW + grad norm + clip (per step)", "2.02", "1.00", "2.02x"),
    ]
    for label, hv, tv, ratio in want:
        cells = row(label)[len(label):].split()
        check(cells == [hv, tv, ratio], "row %r: %r, want %r" % (label, cells, [hv, tv, ratio]))
    order = [l.split("  ")[0] for l in lines[3:3 + len(kt.FAMILIES) + 1]]
    check(order == [w[0] for w in want], "rows in the issue's order, the total before the per-step row")
    check("hanayo: 17 kernels over 1 micro-batch" in text and "pytorch: 22 kernels over 2 micro-batches" in text,
          "each side's kernel count")
    check(re.search(r"other: to_bf16_kernel +1 x +0\.050 ms", text) is not None, "hanayo's other by name")

    only = kt.format_table("hanayo alone", h, None)
    cells = next(l for l in only.splitlines() if l.startswith("GEMMs ")).split()
    check(cells == ["GEMMs", "2.05", "-"], "a missing side is '-', with no ratio: %r" % cells)
    check("pytorch:" not in only, "no kernel count for a missing side")


def test_cli():
    tool = os.path.join("tools", "kernel_table.py")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "k.json")
        p = subprocess.run([sys.executable, tool, "--title", "sample",
                            "--hanayo-ncu", os.path.join(FIX, "ncu-raw-sample.csv"),
                            "--torch-trace", os.path.join(FIX, "torch-trace-sample.json"),
                            "--torch-micro-batches", "2", "--json", out],
                           capture_output=True, text=True)
        check(p.returncode == 0, "the tool exits 0 on the samples (%d: %s)" % (p.returncode, p.stderr))
        check(p.stdout.startswith("sample\n") and "4.00x" in p.stdout, "the tool prints the table")
        check(os.path.exists(out) and '"pytorch"' in read(out), "--json writes both sides")
        p = subprocess.run([sys.executable, tool, "--hanayo-ncu", os.path.join(d, "missing.csv")],
                           capture_output=True, text=True)
        check(p.returncode == 1 and "hanayo: no " in p.stdout, "a missing file: said, exit 1")
        bad = os.path.join(d, "bad.json")
        with open(bad, "w") as f:
            f.write("{not json")
        p = subprocess.run([sys.executable, tool, "--torch-trace", bad], capture_output=True, text=True)
        check(p.returncode == 1 and "pytorch: cannot read" in p.stdout, "a broken trace: said, exit 1")
        empty = os.path.join(d, "empty.csv")
        with open(empty, "w") as f:
            f.write("==PROF== Disconnected\n")
        p = subprocess.run([sys.executable, tool, "--hanayo-ncu", empty,
                            "--torch-trace", os.path.join(FIX, "torch-trace-sample.json")],
                           capture_output=True, text=True)
        check(p.returncode == 0 and "hanayo: no kernels" in p.stdout and "pytorch: 22 kernels" in p.stdout,
              "one side without kernels: the other still printed, the empty one said")


def main():
    for t in (test_names, test_readers, test_sums, test_table, test_cli):
        try:
            t()
        except Exception as e:   # a crash in one part must still count and report
            check(False, "%s raised %s: %s" % (t.__name__, type(e).__name__, e))
    print("kernel_table: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
