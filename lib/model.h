/*
 * model.h — the transformer's shapes, parameters, initialization and its
 * partition into pipeline stages.
 *
 * GPT-like is GPT-2 (DESIGN §5 "Model, numerics, data, files"): token and
 * learned position embeddings, pre-LN blocks (LN, attention, residual, LN,
 * MLP with tanh-GELU, residual), a final LN and an LM head tied to the token
 * embedding. BERT-like has bidirectional attention and a masked-LM loss,
 * and either Hugging Face's post-LN BertForMaskedLM (model.norm "post": an
 * embedding LayerNorm with a token-type row, LN(x + f(x)) blocks with the
 * erf GELU, a head of dense, GELU and LayerNorm before the tied decoder and
 * its bias) or GPT-2's pre-LN blocks (model.norm "pre"). Llama-like
 * (Llama 2/3, Mistral, Qwen, SmolLM): token embeddings only, pre-norm
 * blocks with RMSNorm, causal grouped-query
 * attention with rotary positions, a SwiGLU MLP of its own width, no
 * biases, a final RMSNorm and an LM head that is untied by default.
 *
 * GPT and pre-LN BERT parameters carry Hugging Face GPT-2 names and
 * layouts (Conv1D weights are [in, out]), so safetensors files map one to
 * one. Post-LN BERT's carry BertForMaskedLM's names (without "bert."),
 * with q|k|v fused and every matrix [in, out]; weights.h maps them.
 * Llama's carry names of their own: Q, K and V are one fused [in, out]
 * matrix and gate and up another, so the GPT's matmul op serves them;
 * weights.h maps them to and from Hugging Face's separate [out, in]
 * tensors. Each stage's parameters sit in one contiguous block of floats:
 * stage 0 owns the token embedding (and GPT's wpe), stage s its layers,
 * stage S-1 the final norm and, untied, the LM head. A tied head uses
 * stage 0's embedding: where stage 0 and stage S-1 live on different
 * ranks the runtime keeps a replica of it on the last rank and sums the
 * two gradients (as Megatron does); under hanayo both live on rank 0. An
 * untied head is as large as the embedding (Llama 3's: 128256 x 4096,
 * 525M values) and the last stage is the only one that reads it, so it
 * lives there, counted in that stage's cost (hy_model_stage_cost), which
 * gives that stage fewer blocks.
 */
#ifndef HY_MODEL_H
#define HY_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef enum { HY_MODEL_GPT, HY_MODEL_BERT, HY_MODEL_LLAMA, HY_MODEL_COUNT } hy_model_kind;

/* Where a block's norms sit (model.norm). Pre: before each branch, as
 * GPT-2 and Llama have them, and the BERT variant whose checkpoints
 * predate "post" (Megatron's rearranged LayerNorms). Post: after each
 * residual add, Hugging Face's BertForMaskedLM exactly: an embedding
 * LayerNorm, LN1(x + attn), LN2(h + mlp), no final norm, and a head of
 * dense, GELU, LayerNorm and the tied decoder with a bias. BERT only. */
typedef enum { HY_NORM_PRE, HY_NORM_POST, HY_NORM_COUNT } hy_model_norm;

/* BERT's token-type embedding rows (type_vocab_size): stored and saved
 * for Hugging Face, but hanayo has no segment pairs and reads row 0. */
#define HY_BERT_TYPE_VOCAB 2

/* Llama 3's RoPE frequency scaling (Hugging Face's rope_scaling with
 * rope_type "llama3"): frequencies whose wavelength exceeds
 * original_max_position_embeddings / low_freq_factor are divided by
 * factor, those below original / high_freq_factor are kept, and those in
 * between are blended smoothly. factor 0: no scaling. */
typedef struct {
    double factor;              /* Llama 3.1: 8; 0: none */
    double low_freq_factor;     /* 1 */
    double high_freq_factor;    /* 4; must exceed low_freq_factor */
    int original_max_position_embeddings;   /* 8192 */
} hy_rope_scaling;

/* The model's shape: what a config's "model" block says and a checkpoint
 * records, apart from how it is run (llm.c's GPT2Config). GPT and BERT
 * have kv_heads = heads, ffn_dim = 4 d_model and a tied head; norm_eps
 * and the rope fields are Llama's. */
typedef struct {
    hy_model_kind kind;
    int layers, d_model, heads, seq_len;
    int positions;      /* GPT, BERT: rows of the learned position table, >= seq_len (a
                           model trained longer than it is run, as BERT's phase 1 runs
                           its 512 positions at 128); Llama: unused */
    int vocab;          /* the real vocabulary */
    int kv_heads;       /* key/value heads, dividing heads (grouped-query attention) */
    int ffn_dim;        /* the MLP's hidden width F */
    int tie_embeddings; /* the LM head is the token embedding */
    double norm_eps;    /* RMSNorm's epsilon */
    double rope_theta;  /* RoPE's base */
    hy_rope_scaling rope_scaling;
    int mask_token;     /* BERT: the id masked positions read (< vocab); GPT: unused */
    int norm;           /* hy_model_norm: post only for BERT */
} hy_model_shape;

/* "gpt", "bert", "llama"; "?" when out of range. */
const char *hy_model_name(hy_model_kind kind);

/* "pre", "post"; "?" when out of range. */
const char *hy_model_norm_name(int norm);

/* A Llama block reuses the GPT kinds whose role it shares: LN1_W its
 * input RMSNorm, QKV_W the fused [C, (NH + 2 NKV) hd] Q|K|V, ATTN_PROJ_W
 * the O projection, LN2_W the post-attention RMSNorm, FC_W the fused
 * [C, 2F] gate|up, MLP_PROJ_W the down projection [F, C]; LNF_W is the
 * final RMSNorm. LM_HEAD is an untied head, [Vp, C] like wte. */
typedef enum {
    HY_P_WTE, HY_P_WPE,
    HY_P_LN1_W, HY_P_LN1_B, HY_P_QKV_W, HY_P_QKV_B, HY_P_ATTN_PROJ_W, HY_P_ATTN_PROJ_B,
    HY_P_LN2_W, HY_P_LN2_B, HY_P_FC_W, HY_P_FC_B, HY_P_MLP_PROJ_W, HY_P_MLP_PROJ_B,
    HY_P_LNF_W, HY_P_LNF_B, HY_P_LM_HEAD,
    /* Post-LN BERT's own: the token-type embedding [2, C] and the
     * embedding LayerNorm on stage 0; the MLM head's dense [C, C] and its
     * bias, and the decoder's bias [Vp], on the last (LNF_W/B are the
     * head's LayerNorm there). */
    HY_P_TTE, HY_P_LNE_W, HY_P_LNE_B, HY_P_HEAD_W, HY_P_HEAD_B, HY_P_HEAD_BIAS
} hy_param_kind;

typedef struct {
    char name[80];      /* "wte.weight", "h.3.attn.c_attn.weight", ... */
    hy_param_kind kind;
    int layer;          /* block index, -1 for embeddings and ln_f */
    int ndim;
    int shape[2];
    size_t numel;
    int stage;          /* the stage whose block holds it */
    size_t offset;      /* floats from the start of that stage's block */
    int decay;          /* AdamW weight decay applies (matrices, not biases or LN) */
    int vocab_rows;     /* its rows are the padded vocabulary (wte, lm_head, the decoder bias) */
} hy_param;

typedef struct {
    hy_model_kind kind;
    int layers, d_model, heads, seq_len;
    int positions;      /* wpe's rows (hy_model_shape); the runs read rows 0..seq_len-1 */
    int vocab;          /* V: the real vocabulary */
    int kv_heads, ffn_dim, tie_embeddings;   /* as in hy_model_shape */
    double norm_eps, rope_theta;
    hy_rope_scaling rope_scaling;
    int head_dim;       /* hd = d_model / heads */
    int per_block;      /* parameters of one block: 12 (GPT, BERT), 6 (Llama) */
    int vocab_padded;   /* Vp >= V, a multiple of HY_VOCAB_ALIGN: rows of wte and columns
                           of the logits; the extra rows stay zero, the extra logits are
                           masked out of the loss */
    int mask_token;     /* BERT's mask id (hy_model_shape) */
    int norm;           /* hy_model_norm */
    int stages;
    int *first_layer;   /* [stages] */
    int *n_layers;      /* [stages] */
    int n_params;
    hy_param *params;   /* in a fixed global order (stage 0 first) */
    size_t *stage_numel;/* [stages]: floats in each stage's block */
} hy_model;

/* Every model pads its vocabulary to a multiple of this (GPT-2: 50257 ->
 * 50304, as llm.c does): the LM head's GEMMs then have a leading dimension
 * that is a multiple of 16 bytes, which a GPU's fast matrix kernels need,
 * and the logits' rows stay aligned. The padding rows of wte are zero and
 * never trained (their logits are masked, so their gradient is 0);
 * checkpoints and weight files hold only the real vocabulary's rows
 * (hy_model_real_numel), so they open in Hugging Face's GPT-2 as they are. */
#define HY_VOCAB_ALIGN 128

/* Builds the model of `shape` over `stages` stages: the partition
 * (layers_per_stage[stages] if given, which must sum to the layers, else
 * balanced by estimated cost with the head counted on the last stage) and
 * the parameter table. The vocabulary is padded to a multiple of both
 * HY_VOCAB_ALIGN and vocab_multiple (1: no multiple beyond the first),
 * so every caller sees the same padded model. HY_ERR_INPUT when more
 * stages than layers are to be balanced. */
int hy_model_build(hy_model *m, const hy_model_shape *shape, const int *layers_per_stage,
                   int stages, int vocab_multiple, hy_error *err);
void hy_model_free(hy_model *m);

/* The shape m was built from. */
hy_model_shape hy_model_shape_of(const hy_model *m);

/* Total parameters, counting the tied wte once and without padding rows:
 * the number published for a model (GPT-2 small: 124,439,808). */
size_t hy_model_param_count(const hy_model *m);

/* Estimated cost of one stage's forward in units of one block, for the
 * partition and the simulator: blocks, plus the head on the last stage. */
double hy_model_stage_cost(const hy_model *m, int stage);

/* Forward FLOPs per token of one block: twice its matrices' values (its
 * products) plus attention's 4 d_model T. The one statement of a block's
 * work that the partition, the plan and the tuner share. */
double hy_model_block_flops(const hy_model *m);

/* The part of that of its products with weights (2 x its matrices'
 * values): what a backward's weight-gradient pass redoes, attention's
 * products having no weights. */
double hy_model_block_weight_flops(const hy_model *m);

/* Forward FLOPs per token of the LM head's product, 2 d_model Vp (the
 * final norm and the loss are too few to count): what the partition adds
 * to the last stage. */
double hy_model_head_flops(const hy_model *m);

/* Forward FLOPs per token of the whole model: its blocks and the head
 * (the embedding is a lookup). */
double hy_model_flops_per_token(const hy_model *m);

/* Post-LN BERT (HY_MODEL_BERT with HY_NORM_POST)? */
int hy_model_post_ln(const hy_model *m);

/* The epsilon of m's LayerNorms: GPT-2's 1e-5 (and pre-LN BERT's), the
 * model's norm_eps for post-LN BERT. */
float hy_model_ln_eps(const hy_model *m);

/* The GELU kind of m's MLP (backend.h's hy_gelu_kind): GPT-2's tanh
 * approximation, post-LN BERT's exact erf one. */
int hy_model_gelu(const hy_model *m);

/* Widths of a block's fused products: the attention input,
 * (heads + 2 kv_heads) x head_dim (GPT: 3 d_model), and the MLP's first
 * product, ffn_dim (GPT) or gate|up's 2 ffn_dim (Llama). */
int hy_model_qkv_width(const hy_model *m);
int hy_model_fc_width(const hy_model *m);

/* The widest row any op of a block or the final norm works on: what a
 * backend sizes its per-op scratch by (hy_backend_ops.reserve). */
size_t hy_model_widest(const hy_model *m);

/* The parameter named `name` (a "transformer." prefix is accepted), or NULL. */
const hy_param *hy_model_find(const hy_model *m, const char *name);

/* The parameter of `kind` of block `layer` (ignored for wte, wpe, ln_f
 * and lm_head): the one place that knows the table's fixed order. NULL
 * when the model has no such parameter (a Llama's biases, wpe; a tied
 * model's lm_head). */
const hy_param *hy_model_param(const hy_model *m, hy_param_kind kind, int layer);

/* The values of p a file holds and a caller reads or writes: wte's and
 * lm_head's real vocabulary's rows (vocab x d_model, without the padding
 * rows), every other parameter whole. */
size_t hy_model_real_numel(const hy_model *m, const hy_param *p);

/* The most values any one parameter has (padding rows counted): what one
 * host buffer for any parameter needs. */
size_t hy_model_max_numel(const hy_model *m);

/* GPT-2's initialization into a stage's block: matrices and embeddings
 * N(0, 0.02), the two residual projections N(0, 0.02 / sqrt(2 * layers)),
 * LN weights 1, biases 0, padding rows 0. Llama's is Hugging Face's: every
 * matrix N(0, 0.02) (no residual scaling), norms 1. Every tensor draws from its own
 * stream of (seed, global index), so the values do not depend on the
 * partition: a P = 1 run and a P = 8 run start from the same weights. */
void hy_model_init_stage(const hy_model *m, int stage, uint64_t seed, float *block);

/* The table the backend's rope op reads (backend.h), for positions
 * 0..T−1 of heads of size hd (even): cs[t·hd + i] = cos(t · f_i) and
 * cs[t·hd + hd/2 + i] = sin(t · f_i) for i < hd/2, with the inverse
 * frequencies f_i = theta^(−2i/hd), scaled as above when scaling is not
 * NULL and its factor is not 0. cs holds T·hd floats. */
void hy_rope_table(float *cs, int T, int hd, double theta, const hy_rope_scaling *scaling);

#endif
