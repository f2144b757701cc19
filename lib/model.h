/*
 * model.h — the transformer's shapes, parameters, initialization and its
 * partition into pipeline stages.
 *
 * GPT-like is GPT-2 (DESIGN §5 "Model, numerics, data, files"): token and
 * learned position embeddings, pre-LN blocks (LN, attention, residual, LN,
 * MLP with tanh-GELU, residual), a final LN and an LM head tied to the token
 * embedding. BERT-like is the same with bidirectional attention and a
 * masked-LM loss.
 *
 * Parameters carry Hugging Face GPT-2 names and layouts (Conv1D weights are
 * [in, out]), so safetensors files map one to one. Each stage's parameters
 * sit in one contiguous block of floats: stage 0 owns wte and wpe, stage
 * s its layers, stage S-1 the final LN (and uses stage 0's wte for the
 * tied head). Where stage 0 and stage S-1 live on different ranks the
 * runtime keeps a replica of wte on the last rank and sums the two
 * gradients (as Megatron does); under hanayo both live on rank 0.
 */
#ifndef HY_MODEL_H
#define HY_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef enum { HY_MODEL_GPT, HY_MODEL_BERT, HY_MODEL_COUNT } hy_model_kind;

/* The model's shape: what a config's "model" block says and a checkpoint
 * records, apart from how it is run (llm.c's GPT2Config). */
typedef struct {
    hy_model_kind kind;
    int layers, d_model, heads, seq_len;
    int vocab;          /* the real vocabulary */
} hy_model_shape;

/* "gpt", "bert"; "?" when out of range. */
const char *hy_model_name(hy_model_kind kind);

typedef enum {
    HY_P_WTE, HY_P_WPE,
    HY_P_LN1_W, HY_P_LN1_B, HY_P_QKV_W, HY_P_QKV_B, HY_P_ATTN_PROJ_W, HY_P_ATTN_PROJ_B,
    HY_P_LN2_W, HY_P_LN2_B, HY_P_FC_W, HY_P_FC_B, HY_P_MLP_PROJ_W, HY_P_MLP_PROJ_B,
    HY_P_LNF_W, HY_P_LNF_B
} hy_param_kind;

typedef struct {
    char name[48];      /* "wte.weight", "h.3.attn.c_attn.weight", ... */
    hy_param_kind kind;
    int layer;          /* block index, -1 for embeddings and ln_f */
    int ndim;
    int shape[2];
    size_t numel;
    int stage;          /* the stage whose block holds it */
    size_t offset;      /* floats from the start of that stage's block */
    int decay;          /* AdamW weight decay applies (matrices, not biases or LN) */
} hy_param;

typedef struct {
    hy_model_kind kind;
    int layers, d_model, heads, seq_len;
    int vocab;          /* V: the real vocabulary */
    int vocab_padded;   /* Vp >= V, a multiple of HY_VOCAB_ALIGN: rows of wte and columns
                           of the logits; the extra rows stay zero, the extra logits are
                           masked out of the loss */
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

/* The parameter named `name` (a "transformer." prefix is accepted), or NULL. */
const hy_param *hy_model_find(const hy_model *m, const char *name);

/* The parameter of `kind` of block `layer` (ignored for wte, wpe and
 * ln_f): the one place that knows the table's fixed order. */
const hy_param *hy_model_param(const hy_model *m, hy_param_kind kind, int layer);

/* The values of p a file holds and a caller reads or writes: wte's real
 * vocabulary's rows (vocab x d_model, without the padding rows), every
 * other parameter whole. */
size_t hy_model_real_numel(const hy_model *m, const hy_param *p);

/* The most values any one parameter has (padding rows counted): what one
 * host buffer for any parameter needs. */
size_t hy_model_max_numel(const hy_model *m);

/* GPT-2's initialization into a stage's block: matrices and embeddings
 * N(0, 0.02), the two residual projections N(0, 0.02 / sqrt(2 * layers)),
 * LN weights 1, biases 0, padding rows 0. Every tensor draws from its own
 * stream of (seed, global index), so the values do not depend on the
 * partition: a P = 1 run and a P = 8 run start from the same weights. */
void hy_model_init_stage(const hy_model *m, int stage, uint64_t seed, float *block);

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

/* The table the backend's rope op reads (backend.h), for positions
 * 0..T−1 of heads of size hd (even): cs[t·hd + i] = cos(t · f_i) and
 * cs[t·hd + hd/2 + i] = sin(t · f_i) for i < hd/2, with the inverse
 * frequencies f_i = theta^(−2i/hd), scaled as above when scaling is not
 * NULL and its factor is not 0. cs holds T·hd floats. */
void hy_rope_table(float *cs, int T, int hd, double theta, const hy_rope_scaling *scaling);

#endif
