/*
 * ops.h — the CPU backend's math: every fp32 op a GPT-2 / BERT / Llama
 * transformer needs, forward and backward, as plain functions over raw
 * float arrays.
 *
 * One family per file in kernels/cpu/ (matmul.c, layernorm.c, gelu.c,
 * swiglu.c, attention.c, kvcache.c, rope.c, embedding.c, classifier.c,
 * adamw.c); kernels/cuda/ holds the
 * same families under the same names, so the two are read side by side.
 *
 * Conventions, for every op below:
 *   - Arrays are row-major and dense unless a stride is named. Shapes are
 *     written [rows, cols]; N is the number of rows (tokens, B*T).
 *   - No op allocates, keeps state between calls or starts threads: the
 *     runtime runs one thread per pipeline rank, and any scratch an op needs
 *     is passed in with its size documented here.
 *   - Every backward ACCUMULATES (+=) into every gradient it writes, both
 *     parameter gradients (which sum over micro-batches) and input
 *     gradients (so a residual stream's two paths add up with no extra
 *     pass). The caller zeroes a gradient buffer before the first op that
 *     adds into it. The one exception is the classifier, which writes its
 *     gradient in place over the logits (documented there).
 *   - A gradient pointer may be NULL where documented, and that gradient is
 *     then not computed (a first stage needs no dinp of its embedding; a
 *     zero-bubble schedule may split input and weight gradients).
 *   - Inputs and outputs of one call do not overlap unless stated.
 *   - Shapes are ints (cblas takes ints); flat lengths are size_t. Offsets
 *     are computed in size_t, so N*V past 2^31 is fine.
 *   - Sizes are the caller's to validate (lib/model checks the config);
 *     the ops trust them. Token ids and targets are likewise validated where
 *     they enter (lib/data), except that the classifier reports a bad target
 *     because it is cheap to and costly to get wrong.
 *
 * GEMMs go through cblas (OpenBLAS, BLAS_LIBS=-lopenblas in the Makefile).
 * OpenBLAS keeps its own thread pool; the runtime already runs one thread per
 * rank, so it should pin BLAS to one thread at start-up (OPENBLAS_NUM_THREADS=1
 * or openblas_set_num_threads(1)) — that is process state, not an op's.
 */
#ifndef HY_CPU_OPS_H
#define HY_CPU_OPS_H

#include <stddef.h>

/* ---------------------------------------------------------------------- */
/* matmul.c — dense layers (GEMMs by cblas_sgemm)
 *
 * Conv1D layout, as in Hugging Face GPT-2 (c_attn, c_proj, c_fc): the
 * weight is [in, out] = [C, OC], so safetensors load without a transpose.
 *   forward   out[N,OC] = inp[N,C] · W[C,OC] + bias[OC]     (bias may be NULL)
 *   backward  dinp[N,C]  += dout[N,OC] · Wᵀ
 *             dW[C,OC]   += inpᵀ · dout
 *             dbias[OC]  += Σ_n dout[n,:]
 *             (dinp, dW, dbias may each be NULL: not computed)
 *
 * Tied LM head: the weight is the token embedding wte[V,C] (nn.Linear /
 * embedding layout [out, in]), so the product takes its transpose.
 *   forward   logits[N,V] = inp[N,C] · wteᵀ + bias[V]      (bias may be NULL:
 *                                                          BERT's decoder bias)
 *   backward  dinp[N,C]  += dlogits[N,V] · wte
 *             dwte[V,C]  += dlogitsᵀ · inp
 *             dbias[V]   += Σ_n dlogits[n,:]               (each may be NULL)
 * V here is the row count of wte, i.e. the padded vocabulary when one is
 * used; the classifier then ignores the padding columns.
 */
void hy_cpu_matmul_forward(float *out, const float *inp, const float *weight,
                           const float *bias, int N, int C, int OC);
void hy_cpu_matmul_backward(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            int N, int C, int OC);

void hy_cpu_lm_head_forward(float *logits, const float *inp, const float *wte,
                            const float *bias, int N, int C, int V);
void hy_cpu_lm_head_backward(float *dinp, float *dwte, float *dbias, const float *dlogits,
                             const float *inp, const float *wte, int N, int C, int V);

/* ---------------------------------------------------------------------- */
/* layernorm.c — LayerNorm, the residual add, and the two fused
 *
 * LayerNorm over the last dimension, eps given (GPT-2's 1e-5, HY_LAYERNORM_EPS,
 * which the fused residual form uses; post-LN BERT's the model's):
 *   mean[n] = (1/C) Σ_i x[n,i]
 *   rstd[n] = 1 / sqrt((1/C) Σ_i (x[n,i] − mean[n])² + eps)
 *   out[n,i] = (x[n,i] − mean[n]) · rstd[n] · weight[i] + bias[i]
 * mean and rstd ([N] each) are saved for the backward. With
 * xhat = (x − mean)·rstd and g = dout ⊙ weight, the backward is
 *   dinp[n,i] += rstd[n] · (g[n,i] − mean_i(g[n,:]) − xhat[n,i] · mean_i(g ⊙ xhat)[n])
 *   dweight[i] += Σ_n dout[n,i] · xhat[n,i]
 *   dbias[i]   += Σ_n dout[n,i]                       (each may be NULL)
 *
 * Residual add (the pre-LN block's two skip connections), length n:
 *   forward   out = a + b                              (out may alias a or b)
 *   backward  da += dout; db += dout                   (either may be NULL)
 * Fused: residual = a + b, then out = LayerNorm(residual) in one pass over
 * the row (the next block's LN reads the residual stream it just wrote).
 * Its backward is layernorm_backward into dresidual, then residual_backward.
 */
#define HY_LAYERNORM_EPS 1e-5f

void hy_cpu_layernorm_forward(float *out, float *mean, float *rstd,
                              const float *inp, const float *weight, const float *bias,
                              int N, int C, float eps);
void hy_cpu_layernorm_backward(float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C);

void hy_cpu_residual_forward(float *out, const float *a, const float *b, size_t n);
void hy_cpu_residual_backward(float *da, float *db, const float *dout, size_t n);

void hy_cpu_residual_layernorm_forward(float *residual, float *out, float *mean, float *rstd,
                                       const float *a, const float *b,
                                       const float *weight, const float *bias,
                                       int N, int C);

/* RMSNorm (Llama) over the last dimension, eps given (the model's):
 *   rstd[n] = 1 / sqrt((1/C) Σ_i x[n,i]² + eps)             (saved, [N])
 *   out[n,i] = x[n,i] · rstd[n] · weight[i]
 * backward, with xhat = x · rstd and g = dout ⊙ weight:
 *   dinp[n,i]  += rstd[n] · (g[n,i] − xhat[n,i] · mean_i(g ⊙ xhat)[n])
 *   dweight[i] += Σ_n dout[n,i] · xhat[n,i]                 (either may be NULL)
 */
void hy_cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                            int N, int C, float eps);
void hy_cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C);

/* ---------------------------------------------------------------------- */
/* gelu.c — GELU, elementwise, of a kind (backend.h's hy_gelu_kind):
 * HY_GELU_TANH, the tanh approximation (GPT-2's "gelu_new"):
 *   u = sqrt(2/π) · (x + 0.044715 x³)
 *   forward   out = ½ x (1 + tanh u)                     (out may alias inp)
 *   backward  dinp += dout · (½(1 + tanh u) + ½ x (1 − tanh² u) · sqrt(2/π)(1 + 3·0.044715 x²))
 * HY_GELU_ERF, the exact one (BERT's "gelu"), Φ the normal CDF:
 *   forward   out = x Φ(x) = ½ x (1 + erf(x/√2))
 *   backward  dinp += dout · (Φ(x) + x φ(x)),  φ(x) = e^(−x²/2) / √(2π)
 */
void hy_cpu_gelu_forward(float *out, const float *inp, size_t n, int kind);
void hy_cpu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int kind);

/* ---------------------------------------------------------------------- */
/* swiglu.c — SwiGLU (Llama's MLP activation) on one fused up-projection
 *   inp[N, 2F]: per row the gate (columns 0..F−1) then the up values (F..2F−1)
 *   forward   out[n,i] = silu(gate[n,i]) · up[n,i],   silu(x) = x σ(x), σ(x) = 1/(1+e^−x)
 *   backward  dinp[n,i]   += dout[n,i] · up[n,i] · σ · (1 + gate · (1 − σ))   (σ of gate[n,i])
 *             dinp[n,F+i] += dout[n,i] · silu(gate[n,i])
 */
void hy_cpu_swiglu_forward(float *out, const float *inp, int N, int F);
void hy_cpu_swiglu_backward(float *dinp, const float *dout, const float *inp, int N, int F);

/* ---------------------------------------------------------------------- */
/* attention.c — self-attention core (after the qkv projection, before
 * the output projection), with grouped-query attention
 *
 * qkv[B,T,(NH+2·NKV)·hd] packs per token the NH query heads, then the NKV
 * key heads, then the NKV value heads, each hd wide (NKV = NH: GPT-2's
 * c_attn output [q | k | v]). NKV divides NH; query head h reads kv head
 * j = h / (NH/NKV). For each b and query head h, with keys s ≤ t when
 * causal (GPT, Llama) and all s when not (BERT):
 *   S[t,s] = (q_t · k_s) / sqrt(hd),   P = softmax_s(S)
 *   out[b,t,h·hd+d] = Σ_s P[t,s] · v_s[d]                   (out [B,T,NH·hd])
 *   lse[b,h,t] = ln Σ_s e^(S[t,s])                          (saved, [B,NH,T])
 * Backward, from lse and the forward's out (nothing T×T is saved), with
 * P = e^(S − lse), D_t = dout_t · out_t, dP = dout_h · Vᵀ, dS = P ⊙ (dP − D):
 *   dv_j += Pᵀ · dout_h;  dq_h += dS · K_j / sqrt(hd);  dk_j += dSᵀ · Q_h / sqrt(hd)
 * into dqkv (qkv's layout), a kv head's summing over its group's query
 * heads. dqkv ACCUMULATES like every other backward. scratch holds 2·T·T
 * floats (one head's P and dP at a time); its contents on return are
 * undefined.
 */
void hy_cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int NH,
                              int NKV, int hd, int causal);
void hy_cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *out, const float *lse, int B, int T, int NH, int NKV,
                               int hd, int causal);

/* ---------------------------------------------------------------------- */
/* rope.c — rotary position embedding (Llama), in place on q and k
 *
 * qkv[B,T,(NH+2·NKV)·hd]: NH query heads, NKV key heads, NKV value heads,
 * each hd wide (hd even). For every query and key head of token (b,t) and
 * i < hd/2, with c = cs[t·hd + i] and s = cs[t·hd + hd/2 + i] (the table of
 * lib/model.h's hy_rope_table: per position hd/2 cosines then hd/2 sines):
 *   x'[i]        = x[i] · c − x[i + hd/2] · s
 *   x'[i + hd/2] = x[i + hd/2] · c + x[i] · s
 * inverse != 0 rotates by −angle (s negated): the backward, applied in
 * place to d(q), d(k). Value heads are left as they are.
 */
void hy_cpu_rope(float *qkv, const float *cs, int B, int T, int NH, int NKV, int hd,
                 int inverse);

/* ---------------------------------------------------------------------- */
/* kvcache.c — attention over a KV cache (generation, lib/sample.h)
 *
 * The cache of one layer: kc, vc [B, Tmax, NKV·hd], row t the keys (values)
 * of position t, kv head g at columns g·hd .. g·hd+hd−1. qkv [B, Tq, W],
 * W = (NH + 2·NKV)·hd, holds Tq new tokens at positions t0 .. t0+Tq−1:
 * per row NH query heads, then NKV key heads, then NKV value heads (GPT-2:
 * NKV = NH, c_attn's q | k | v).
 *   kv_append          kc[b,t0+i,:] = k of qkv[b,i];  vc[b,t0+i,:] = v of it
 *   attention_cached   for query i (position p = t0+i), head h, its kv head
 *                      g = h / (NH/NKV) (grouped-query attention):
 *     out[b,i,h·hd+d] = Σ_{s ≤ p} softmax_s(q·kc[b,s,g] / sqrt(hd)) · vc[b,s,g·hd+d]
 * so the new tokens attend to every cached position and, among themselves,
 * causally: the forward of attention.c (causal) on the whole sequence,
 * row for row, once kv_append has put the new keys in. out [B, Tq, NH·hd].
 * Requires t0 + Tq ≤ Tmax and NH a multiple of NKV. No scratch.
 */
void hy_cpu_kv_append(float *kc, float *vc, const float *qkv, int B, int Tq, int t0, int Tmax,
                      int NH, int NKV, int hd);
void hy_cpu_attention_cached(float *out, const float *qkv, const float *kc, const float *vc,
                             int B, int Tq, int t0, int Tmax, int NH, int NKV, int hd);

/* ---------------------------------------------------------------------- */
/* embedding.c — token + learned position (+ token-type) embedding
 *   forward   out[b,t,:] = wte[tokens[b,t],:] + type[:] + wpe[t,:]
 *             (type: one row added to every token, BERT's token-type row
 *             0, or NULL; its gradient is the column sum of dout)
 *   backward  dwte[tokens[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]
 *             (either may be NULL)
 * tokens are [B,T] ints in [0, V) (checked where they are read, lib/data);
 * wpe has at least T rows, or is NULL: no learned positions (Llama), and
 * out is the token embedding alone.
 */
void hy_cpu_embedding_forward(float *out, const int *tokens, const float *wte,
                              const float *wpe, const float *type, int B, int T, int C);
void hy_cpu_embedding_backward(float *dwte, float *dwpe, const float *dout,
                               const int *tokens, int B, int T, int C);

/* ---------------------------------------------------------------------- */
/* classifier.c — fused softmax + cross-entropy + its gradient
 *
 * logits is [N, Vp] with row stride Vp ≥ V; columns V..Vp−1 are vocabulary
 * padding and take no part. targets[n] is in [0, V), or HY_IGNORE_INDEX
 * (−1) for a row that does not count (BERT: positions not chosen for the
 * masked-LM loss). With count = the number of counted rows:
 *   losses[n] = logsumexp(logits[n,:V]) − logits[n,targets[n]]  (0 if ignored)
 *   *mean_loss = (Σ_n losses[n]) / count              (0 when count = 0)
 *   logits[n,i] ← grad_scale · (softmax(logits[n,:V])_i − [i = targets[n]]) / count
 * i.e. logits is overwritten with d(grad_scale · mean_loss)/dlogits; ignored
 * rows and padding columns become 0. The probabilities are formed once, in
 * place. grad_scale is e.g. 1/M for a mean over M equal micro-batches, or
 * count/total_count when counts differ (BERT). Also
 *   *hits = #{counted n : argmax_i logits[n,:V] = targets[n]}
 * (argmax: the first of equal maxima, as torch.argmax), the predictions a
 * masked-LM accuracy counts. Returns count (≥ 0), or −1 if some target is
 * neither −1 nor in [0, V): then nothing is written. losses [N],
 * mean_loss and hits may be NULL.
 */
#define HY_IGNORE_INDEX (-1)

int hy_cpu_classifier_forward_backward(float *logits, float *losses, float *mean_loss, int *hits,
                                       const int *targets, int N, int V, int Vp,
                                       float grad_scale);

/* ---------------------------------------------------------------------- */
/* adamw.c — AdamW (decoupled weight decay) and global-norm helpers
 *
 * Step-varying values are read through a pointer to this struct, never
 * passed by value: the CUDA backend's replayed graph reads them from memory
 * the host rewrites each step, and the CPU backend mirrors that. step is
 * t ≥ 1, counted after the update it belongs to (the first update is t = 1).
 */
typedef struct {
    float lr;            /* this step's learning rate (schedule applied by the caller) */
    float beta1, beta2;  /* e.g. 0.9, 0.95 */
    float eps;           /* e.g. 1e-8 */
    float weight_decay;  /* decoupled; used only by calls with decay = 1 */
    int step;            /* t, for the bias corrections 1 − β^t */
} hy_cpu_adamw_params;

/* For i < n, with g = scale · grad[i] (scale: the clip factor) and the
 * FP32 master param p = param[i]:
 *   m ← β1 m + (1−β1) g;   v ← β2 v + (1−β2) g²
 *   m̂ = m / (1 − β1^t);    v̂ = v / (1 − β2^t)
 *   p ← p − lr · (m̂ / (sqrt(v̂) + eps) + λ p),   λ = decay ? weight_decay : 0
 * (PyTorch's torch.optim.AdamW). decay is per call, i.e. per tensor or per
 * contiguous range: GPT-2 decays the 2-D weights (matmul weights and
 * embeddings) and passes decay = 0 for biases and LayerNorm parameters. */
void hy_cpu_adamw_update(float *param, const float *grad, float *m, float *v,
                         size_t n, const hy_cpu_adamw_params *hp, float scale, int decay);

/* *acc += Σ_i x[i]², accumulated in double. Accumulating lets a rank add up
 * its tensors (and the runtime add up ranks) before the one sqrt. */
void hy_cpu_sumsq(double *acc, const float *x, size_t n);

/* The gradient-clipping factor for a global L2 norm sqrt(sumsq):
 * min(1, max_norm / (norm + 1e-6)); 1 when max_norm ≤ 0 (clipping off);
 * NaN when sumsq is not finite (some gradient overflowed or is NaN), which
 * tells the AdamW step to leave everything as it is. */
float hy_cpu_clip_factor(double sumsq, float max_norm);

#endif
