/*
 * transformer.h — the transformer's math for one pipeline stage and one
 * micro-batch, against the backend's ops (backend.h): a block's forward
 * and backward, the embedding on the first stage, and on the last the head
 * (ln_f, the logits, the fused loss and the head's backward; post-LN
 * BERT's embedding LayerNorm and MLM head transform too), the way
 * llm.c keeps gpt2_forward apart from its training loop. model.h gives
 * the shapes and the parameter table; the model is
 * DESIGN §5 "Model, numerics, data, files".
 *
 * The runtime (runtime.c) decides when each piece runs, on which rank's
 * stream, and where a stage's input comes from and its output goes (its
 * mailboxes, its send buffer); it fills a hy_transformer with the shapes,
 * the ops and where each stage's compute weights and gradients are. This
 * module decides what is computed and how a stash slot is laid out: the
 * activations a stage keeps from a micro-batch's forward for its
 * backward, and under activation recomputation (hy_recompute) what the
 * backward rebuilds instead (docs/runtime.md, "Activation
 * recomputation"). Everything is enqueued on the stream it is given and
 * allocates nothing; every backward accumulates into the gradients (+=),
 * which the caller zeroes once per step.
 *
 * With split backward (schedule.h) a stage's backward is two passes. B,
 * hy_stage_backward, computes only the gradient of the stage's input, the
 * one the previous stage waits for, and keeps in the slot the gradient of
 * every product's output it meets on the way; W, hy_stage_wgrad, later
 * turns those and the forward's activations into the weights' gradients.
 * The sums are the same; only the order micro-batches add into a weight's
 * gradient may differ.
 */
#ifndef HY_TRANSFORMER_H
#define HY_TRANSFORMER_H

#include <stddef.h>

#include "backend.h"
#include "error.h"
#include "model.h"

/* Activation recomputation (train.recompute), compute traded for stash
 * memory: what a slot keeps from a micro-batch's forward.
 *   none       every block's activations;
 *   selective  all but the wide, cheap ones (each norm's output, from its
 *              input: LayerNorm's, or a Llama's RMSNorm's; and the MLP
 *              activation's output, from its pre-activation: GELU's, or a
 *              Llama's SwiGLU's from gate|up), rebuilt in the backward
 *              into the rank's working buffers (hy_stage_work); post-LN
 *              BERT keeps its second norm's input (a residual sum) and
 *              its output (the block's), and rebuilds LN1's output and
 *              the GELU's;
 *   full       only the stage input (the embedding's output on stage 0)
 *              and the head's d(ln_f output) on the last stage; the
 *              backward first reruns the stage's blocks into one per-rank
 *              working slot (hy_stage_recompute).
 * The same ops run in the same order on the same inputs, so every mode
 * gives the same numbers on the CPU, bit for bit. */
typedef enum { HY_RECOMPUTE_NONE, HY_RECOMPUTE_SELECTIVE, HY_RECOMPUTE_FULL,
               HY_RECOMPUTE_COUNT } hy_recompute;

/* "none", "selective", "full"; "?" when out of range. */
const char *hy_recompute_name(hy_recompute r);

/* The share of a block's forward that r redoes before each backward pass
 * that reads the block (costs.h prices it): 0, HY_RECOMPUTE_SELECTIVE_SHARE,
 * 1. */
double hy_recompute_share(hy_recompute r);

/* Selective recompute's price, in block forwards: two LayerNorms and a
 * GELU over 6 B·T·d_model values (a Llama: two RMSNorms and a SwiGLU),
 * against the block's 12 B·T·d_model²
 * multiply-adds and its attention. Few flops, but elementwise work runs
 * at memory speed and the CPU's GELU (a tanh per value) is dear: `make
 * bench` measured LayerNorm and GELU at about a sixth of the small GPT's
 * rank time on the CPU, their forwards about a quarter of a block's
 * forward. A GPU, whose GEMMs are far faster relative to its memory,
 * differs; the estimate is the CPU's. */
#define HY_RECOMPUTE_SELECTIVE_SHARE 0.25

typedef struct {
    const hy_model *model;        /* shapes, each stage's layers, the parameter table */
    const hy_backend_ops *ops;
    size_t act_size;              /* bytes per activation element: ops->act_size */
    int B, T;                     /* sequences per micro-batch, tokens per sequence */
    int global_micro_batches;     /* the step's global batch in micro-batches, M x replicas:
                                     each one's loss and gradient count 1/that */
    int split;                    /* split backward: B and W passes (the slot keeps B's gradients) */
    hy_recompute recompute;       /* what a stash slot keeps (hy_recompute) */
    void **weights;               /* [stages]: stage s's compute copy of its parameter block */
    float **grads;                /* [stages]: stage s's gradient block */
} hy_transformer;

/* One rank's working buffers: the block backward's scratch (a rank runs
 * one action at a time, so one set serves all its stages), and on the
 * last stage's rank the head's. In the rank's memory. */
typedef struct {
    void *dln, *datty, *dqkv, *dfc, *dfcg, *attn_scratch;
    float *rope;                  /* Llama: the RoPE table (backend.h), built at alloc */
    /* Selective recompute: where a block's norm output ([B * T, d_model],
     * ln_1's and ln_2's in turn) and MLP activation output (GELU's, or a
     * Llama's SwiGLU's: [B * T, ffn_dim]) live, in its forward and when
     * its backward rebuilds them, and the statistics a rebuild computes
     * again (fp32: rstd [B * T], then LayerNorm's mean [B * T]). NULL in
     * other modes. */
    void *ln, *fchg;
    float *ln_stats;
    /* Full recompute: one slot with every activation of the rank's
     * largest stage, which its forward and the rerun before each backward
     * fill. NULL in other modes. */
    void *redo;
    void *logits;                 /* [N, Vp]: the head's, never stashed */
    float *loss;                  /* [2]: the loss the head adds to, then how many of the
                                     scored positions the model ranked first
                                     (hy_stage_forward); HY_HEAD_SUMS_BYTES */
    /* The tied embedding the head reads and adds its gradient to, when the
     * last stage's rank keeps a replica of it; NULL: stage 0's own wte
     * (both stages are on this rank). */
    const void *wte;
    float *dwte;
} hy_stage_work;

/* Bytes of hy_stage_work's loss: the loss and the argmax hits. */
#define HY_HEAD_SUMS_BYTES (2 * sizeof(float))

/* Bytes of what crosses a stage boundary: a micro-batch's activations,
 * or their gradient, [B * T, d_model] in the compute type. */
size_t hy_boundary_bytes(const hy_transformer *t);

/* Bytes of one stash slot of stage s: its blocks' activations, the
 * embedding's output on stage 0, the head's on the last stage; with split
 * backward also the gradients B leaves for W. */
size_t hy_stash_bytes(const hy_transformer *t, int stage);

/* Stage 0's input inside a stash slot: the embedding's output. */
void *hy_stash_embedding(const hy_transformer *t, void *slot);

/* The most blocks of any stage placement[] puts on rank: what full
 * recompute's working slot holds. */
int hy_stage_work_layers(const hy_transformer *t, const int *placement, int rank);

/* The sizes of w's buffers, in the order hy_stage_work_alloc takes them,
 * with attention_scratch the backend's attention scratch for t's shape;
 * head adds the logits and the loss; layers: hy_stage_work_layers of the
 * rank (full recompute's slot). Returns how many. The one statement of
 * them: the memory plan (memplan.h) counts by it. */
#define HY_STAGE_WORK_BUFFERS 12
int hy_stage_work_sizes(const hy_transformer *t, size_t attention_scratch, int head, int layers,
                        size_t sizes[HY_STAGE_WORK_BUFFERS]);

/* Bytes of the RoPE table of t->T positions (hy_stage_work's rope): 0
 * for a model without RoPE (GPT, BERT). */
size_t hy_rope_bytes(const hy_transformer *t);

/* Builds a Llama's RoPE table of t->T positions (model.h's hy_rope_table,
 * with the model's theta and scaling) and uploads it to dst, rank memory
 * of hy_rope_bytes(t). */
int hy_rope_upload(const hy_transformer *t, hy_backend *be, int rank, float *dst,
                   hy_error *err);

/* Allocates w's buffers in rank's memory of be; head: the rank holds the
 * last stage (the logits and the loss); layers as above. A Llama's RoPE
 * table is built and uploaded here. w->wte and w->dwte are the caller's
 * to set. */
int hy_stage_work_alloc(const hy_transformer *t, hy_backend *be, int rank, int head, int layers,
                        hy_stage_work *w, hy_error *err);

/* HY_ERR_INPUT naming the first op m's blocks need that o lacks (a NULL
 * op: a backend without Llama's ops yet), so a run is refused where it
 * opens rather than failing at its first step. */
int hy_transformer_check_ops(const hy_model *m, const hy_backend_ops *o, hy_error *err);

/* Stage 0, forward: the token and position embeddings of tokens [B * T]
 * into the slot (hy_stash_embedding). */
int hy_embed_forward(const hy_transformer *t, hy_stream *st, void *slot, const int *tokens,
                     hy_error *err);

/* The same for tokens at positions t0 .. t0+T−1, into out [B·T, d_model]
 * (generation: the tokens after a cache's t0): GPT's learned positions
 * from wpe's row t0; a Llama has none (RoPE turns q and k inside its
 * blocks). */
int hy_embed_forward_at(const hy_transformer *t, hy_stream *st, void *out, const int *tokens,
                        int t0, hy_error *err);

/* F of one micro-batch on `stage`: its blocks from `in` (the stage input)
 * to `out`, keeping in `slot` what the backward needs. The last stage
 * keeps its output in the slot (out is ignored, may be NULL) and runs the
 * head on it: ln_f, the logits, the loss against targets [B * T] (-1: no
 * target) added to w->loss[0], 1/M of it when training, whole when not,
 * and the positions whose target is the argmax added to w->loss[1];
 * training, also the head's backward down to d(ln_f output), kept in the
 * slot for hy_head_backward, so the logits need no stash. */
int hy_stage_forward(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int stage,
                     const void *in, void *slot, void *out, const int *targets, int train,
                     hy_error *err);

/* Before B, and with split backward before W, of one micro-batch on
 * `stage`: under full recompute reruns the stage's blocks from `in` (as
 * its forward had it) into w->redo, where the pass after it reads them;
 * nothing in other modes. Split backward reruns them for W too, rather
 * than keeping a full slot for every micro-batch between its B and its W
 * (schedules that delay W hold many): one slot per rank, at one more
 * forward per W. What B leaves for W (the gradient of each product's
 * output) cannot be rebuilt without B, so the stash keeps it. */
int hy_stage_recompute(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int stage,
                       const void *in, hy_error *err);

/* The last stage, backward, first: d(its output) from the head's d(ln_f
 * output), added into dres ([B * T, d_model], zeroed by the caller), with
 * ln_f's gradient (split: in W); post-LN BERT's head went down to d(its
 * output) in the forward, which this adds. in: the stage's input, as its
 * forward had it. */
int hy_head_backward(const hy_transformer *t, const hy_stage_work *w, hy_stream *st,
                     const void *in, void *slot, void *dres, hy_error *err);

/* B of one micro-batch on `stage`: its blocks' backward, last to first.
 * dres holds d(stage output) and becomes d(stage input). Unsplit it adds
 * the weights' gradients too; split it keeps what W needs in the slot,
 * d(stage input) as well on stage 0, for the embeddings'. */
int hy_stage_backward(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int stage,
                      const void *in, void *slot, void *dres, hy_error *err);

/* Stage 0, backward, last: the embeddings' gradients from dres = d(stage
 * 0 input) and the micro-batch's tokens (post-LN BERT: through its
 * embedding LayerNorm, from what the slot kept). Unsplit only: with split
 * backward W does it. */
int hy_embed_backward(const hy_transformer *t, hy_stream *st, void *slot, const void *dres,
                      const int *tokens, hy_error *err);

/* W of one micro-batch on `stage` (split backward, after its B): every
 * weight's gradient of the stage from the slot, ln_f's on the last stage,
 * and on stage 0 the embeddings' from the tokens. in: the stage's input,
 * as its forward had it. */
int hy_stage_wgrad(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int stage,
                   const void *in, void *slot, const int *tokens, hy_error *err);

/* ---- Generation (sample.h) -------------------------------------------
 *
 * The same block, run forward only, token by token over a KV cache. */

/* One layer's KV cache: k and v [B, Tmax, NKV·hd] in the rank's memory
 * (GPT-2: NKV = heads, hd = d_model / heads); t0 is the position of the
 * first of the tokens a call brings. */
typedef struct {
    void *k, *v;
    int t0, Tmax;
} hy_kv_layer;

/* Bytes of the activations one block's forward writes for t's B x T
 * tokens: what hy_block_forward's `work` holds. */
size_t hy_block_work_bytes(const hy_transformer *t);

/* The forward of global block l over t->B x t->T tokens, from `in` to
 * `out` ([B·T, d_model] each, apart), its activations in `work` and kept
 * for nothing after: the block of the model's kind, the one training
 * runs. kv NULL: attention as training has it, over the T tokens at
 * positions 0 .. T−1; else the tokens are at positions kv->t0 ..
 * t0+T−1: their keys and values go into kv's cache (kv_append) and they
 * attend to its rows up to their own (attention_cached). rope: a Llama's
 * RoPE table from position 0 (hy_rope_upload, at least t0+T positions;
 * the block reads its rows from t0), NULL for a GPT. */
int hy_block_forward(const hy_transformer *t, const float *rope, hy_stream *st, int l,
                     const void *in, void *work, void *out, const hy_kv_layer *kv, hy_error *err);

/* The head without a loss: the final norm of h's t->B x t->T rows (ln_f,
 * or a Llama's RMSNorm) into norm [B·T, d_model], with its statistics
 * (mean: LayerNorm's only, NULL for a Llama; rstd [B·T]), then the
 * logits [B·T, vocab_padded] through the untied lm_head or the tied
 * embedding. */
int hy_head_logits(const hy_transformer *t, hy_stream *st, const void *h, void *norm,
                   float *mean, float *rstd, void *logits, hy_error *err);

#endif
