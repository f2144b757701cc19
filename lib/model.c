/*
 * model.c — see model.h.
 */
#include "model.h"
#include "backend.h"
#include "rng.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hy_model_free(hy_model *m) {
    if (!m) return;
    free(m->first_layer);
    free(m->n_layers);
    free(m->params);
    free(m->stage_numel);
    memset(m, 0, sizeof *m);
}

int hy_model_qkv_width(const hy_model *m) {
    return (m->heads + 2 * m->kv_heads) * m->head_dim;
}

int hy_model_fc_width(const hy_model *m) {
    return m->kind == HY_MODEL_LLAMA ? 2 * m->ffn_dim : m->ffn_dim;
}

size_t hy_model_widest(const hy_model *m) {
    size_t w = (size_t)m->d_model;
    if ((size_t)hy_model_qkv_width(m) > w) w = (size_t)hy_model_qkv_width(m);
    if ((size_t)hy_model_fc_width(m) > w) w = (size_t)hy_model_fc_width(m);
    return w;
}

/* The values of a block's matrices: QKV, the attention's output
 * projection, the MLP's first product and its projection back (GPT:
 * 3 C^2 + C^2 + 4 C^2 + 4 C^2 = 12 C^2). */
static double block_matrix_numel(const hy_model *m) {
    double C = m->d_model, F = m->ffn_dim, H = (double)m->heads * m->head_dim;
    return C * hy_model_qkv_width(m) + H * C + C * hy_model_fc_width(m) + F * C;
}

double hy_model_block_weight_flops(const hy_model *m) { return 2.0 * block_matrix_numel(m); }

double hy_model_block_flops(const hy_model *m) {
    return hy_model_block_weight_flops(m) + 4.0 * m->d_model * m->seq_len;
}

/* The logits' product, and post-LN BERT's dense transform before it. */
double hy_model_head_flops(const hy_model *m) {
    double C = m->d_model;
    return 2.0 * C * m->vocab_padded + (hy_model_post_ln(m) ? 2.0 * C * C : 0.0);
}

int hy_model_post_ln(const hy_model *m) {
    return m->kind == HY_MODEL_BERT && m->norm == HY_NORM_POST;
}

float hy_model_ln_eps(const hy_model *m) {
    return hy_model_post_ln(m) ? (float)m->norm_eps : 1e-5f;
}

int hy_model_gelu(const hy_model *m) { return hy_model_post_ln(m) ? HY_GELU_ERF : HY_GELU_TANH; }

double hy_model_flops_per_token(const hy_model *m) {
    return m->layers * hy_model_block_flops(m) + hy_model_head_flops(m);
}

/* The head's forward FLOPs in units of one block's. */
static double head_cost(const hy_model *m) {
    return hy_model_head_flops(m) / hy_model_block_flops(m);
}

double hy_model_stage_cost(const hy_model *m, int stage) {
    return m->n_layers[stage] + (stage == m->stages - 1 ? head_cost(m) : 0.0);
}

/* Every stage at least one layer, the head counted on the last: choose
 * the last stage's layer count n, spread the rest evenly over the others
 * (earlier stages take the remainder), and keep the n that minimises the
 * largest stage. */
static void balance(hy_model *m) {
    int S = m->stages, L = m->layers;
    if (S == 1) { m->n_layers[0] = L; return; }
    double head = head_cost(m), best = INFINITY;
    int best_n = 1;
    for (int n = 1; n <= L - (S - 1); n++) {
        int rest = L - n;
        double worst = fmax((double)((rest + S - 2) / (S - 1)), n + head);
        if (worst < best - 1e-12) { best = worst; best_n = n; }
    }
    int rest = L - best_n;
    for (int s = 0; s < S - 1; s++) m->n_layers[s] = rest / (S - 1) + (s < rest % (S - 1));
    m->n_layers[S - 1] = best_n;
}

static void add_param(hy_model *m, hy_param_kind kind, int layer, const char *suffix, int d0,
                         int d1, int stage, int decay) {
    hy_param *p = &m->params[m->n_params++];
    memset(p, 0, sizeof *p);
    const char *block = m->kind == HY_MODEL_LLAMA ? "layers"
                      : hy_model_post_ln(m) ? "encoder.layer" : "h";
    if (layer >= 0) snprintf(p->name, sizeof p->name, "%s.%d.%s", block, layer, suffix);
    else snprintf(p->name, sizeof p->name, "%s", suffix);
    p->vocab_rows = kind == HY_P_WTE || kind == HY_P_LM_HEAD || kind == HY_P_HEAD_BIAS;
    p->kind = kind;
    p->layer = layer;
    p->ndim = d1 > 0 ? 2 : 1;
    p->shape[0] = d0;
    p->shape[1] = d1 > 0 ? d1 : 0;
    p->numel = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    p->stage = stage;
    p->offset = m->stage_numel[stage];
    p->decay = decay;
    m->stage_numel[stage] += p->numel;
}

static void add_block(hy_model *m, int l, int stage) {
    int C = m->d_model, QKV = hy_model_qkv_width(m), FC = hy_model_fc_width(m), F = m->ffn_dim;
    int H = m->heads * m->head_dim;
    if (m->kind == HY_MODEL_LLAMA) {   /* in llama_slot's order */
        add_param(m, HY_P_LN1_W, l, "attn_norm.weight", C, 0, stage, 0);
        add_param(m, HY_P_QKV_W, l, "attn.qkv.weight", C, QKV, stage, 1);
        add_param(m, HY_P_ATTN_PROJ_W, l, "attn.o.weight", H, C, stage, 1);
        add_param(m, HY_P_LN2_W, l, "mlp_norm.weight", C, 0, stage, 0);
        add_param(m, HY_P_FC_W, l, "mlp.gate_up.weight", C, FC, stage, 1);
        add_param(m, HY_P_MLP_PROJ_W, l, "mlp.down.weight", F, C, stage, 1);
        return;
    }
    /* GPT-2's names, or post-LN BERT's (Hugging Face's, q|k|v fused), in
     * hy_param_kind's order from HY_P_LN1_W */
    static const char *const gpt[12] = {
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias",
    };
    static const char *const bert[12] = {
        "attention.output.LayerNorm.weight", "attention.output.LayerNorm.bias",
        "attention.self.qkv.weight", "attention.self.qkv.bias",
        "attention.output.dense.weight", "attention.output.dense.bias",
        "output.LayerNorm.weight", "output.LayerNorm.bias",
        "intermediate.dense.weight", "intermediate.dense.bias",
        "output.dense.weight", "output.dense.bias",
    };
    const char *const *names = hy_model_post_ln(m) ? bert : gpt;
    /* Six weights (two of them norms' [C]), each followed by its bias, as
     * wide as its output; decay on the matrices alone. */
    const int rows[6] = { C, C, C, C, C, F }, cols[6] = { 0, QKV, C, 0, FC, C };
    for (int k = 0; k < 12; k++) {
        int w = k / 2, bias = k % 2, norm = cols[w] == 0;
        int d0 = bias && !norm ? cols[w] : rows[w], d1 = bias || norm ? 0 : cols[w];
        add_param(m, (hy_param_kind)(HY_P_LN1_W + k), l, names[k], d0, d1, stage, !bias && !norm);
    }
}

/* A Llama block's parameter of `kind` as its place in the block (add_block's
 * order), -1 when it has none. */
static int llama_slot(hy_param_kind kind) {
    switch (kind) {
    case HY_P_LN1_W: return 0;
    case HY_P_QKV_W: return 1;
    case HY_P_ATTN_PROJ_W: return 2;
    case HY_P_LN2_W: return 3;
    case HY_P_FC_W: return 4;
    case HY_P_MLP_PROJ_W: return 5;
    default: return -1;
    }
}

/* The least common multiple of HY_VOCAB_ALIGN and k >= 1. */
static long vocab_lcm(int k) {
    long a = HY_VOCAB_ALIGN, b = k;
    while (b) {
        long t = a % b;
        a = b;
        b = t;
    }
    return (long)HY_VOCAB_ALIGN / a * k;
}

static const char *const MODEL_NAMES[HY_MODEL_COUNT] = { "gpt", "bert", "llama" };

const char *hy_model_norm_name(int norm) {
    static const char *const names[HY_NORM_COUNT] = { "pre", "post" };
    return (unsigned)norm < HY_NORM_COUNT ? names[norm] : "?";
}

const char *hy_model_name(hy_model_kind kind) {
    return (unsigned)kind < HY_MODEL_COUNT ? MODEL_NAMES[kind] : "?";
}

/* The most parameters before the first block (post-LN BERT: wte, wpe,
 * tte and the embedding LayerNorm's two) and after the last (its head's
 * five; an untied head's one more). */
#define MD_EMBED_MAX 5
#define MD_TAIL_MAX 6

int hy_model_build(hy_model *m, const hy_model_shape *shape, const int *layers_per_stage,
                   int stages, int vocab_multiple, hy_error *err) {
    memset(m, 0, sizeof *m);
    assert(stages >= 1);
    long multiple = vocab_lcm(vocab_multiple < 1 ? 1 : vocab_multiple);
    m->kind = shape->kind;
    m->layers = shape->layers;
    m->d_model = shape->d_model;
    m->heads = shape->heads;
    m->seq_len = shape->seq_len;
    m->positions = shape->positions;
    m->vocab = shape->vocab;
    m->kv_heads = shape->kv_heads;
    m->ffn_dim = shape->ffn_dim;
    m->tie_embeddings = shape->tie_embeddings;
    m->norm_eps = shape->norm_eps;
    m->rope_theta = shape->rope_theta;
    m->rope_scaling = shape->rope_scaling;
    m->head_dim = shape->d_model / shape->heads;
    m->per_block = shape->kind == HY_MODEL_LLAMA ? 6 : 12;
    /* The config loader checks these; a model built by hand states them. */
    assert(m->kv_heads >= 1 && m->heads % m->kv_heads == 0 && m->ffn_dim >= 1);
    assert(m->kind == HY_MODEL_LLAMA || (m->tie_embeddings && m->kv_heads == m->heads));
    m->mask_token = shape->mask_token;
    m->norm = shape->norm;
    assert(m->norm == HY_NORM_PRE || m->kind == HY_MODEL_BERT);
    assert(m->kind == HY_MODEL_LLAMA || m->positions >= m->seq_len);
    m->vocab_padded = (int)((shape->vocab + multiple - 1) / multiple * multiple);
    m->stages = stages;
    int S = m->stages, L = m->layers;
    m->first_layer = calloc((size_t)S, sizeof(int));
    m->n_layers = calloc((size_t)S, sizeof(int));
    m->stage_numel = calloc((size_t)S, sizeof(size_t));
    m->params = calloc(MD_EMBED_MAX + (size_t)m->per_block * (size_t)L + MD_TAIL_MAX,
                       sizeof(hy_param));
    if (!m->first_layer || !m->n_layers || !m->stage_numel || !m->params) {
        hy_model_free(m);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory building the model");
    }
    if (layers_per_stage) {
        int sum = 0;
        for (int s = 0; s < S; s++) sum += m->n_layers[s] = layers_per_stage[s];
        assert(sum == L);   /* the config loader and the tuner check it */
        (void)sum;
    } else if (S > L) {
        hy_model_free(m);
        return hy_fail(err, HY_ERR_INPUT,
                       "%d stages but only %d layers: lower schedule.ranks/waves/chunks or give "
                       "schedule.split", S, L);
    } else {
        balance(m);
    }
    for (int s = 1; s < S; s++) m->first_layer[s] = m->first_layer[s - 1] + m->n_layers[s - 1];

    int C = m->d_model, llama = m->kind == HY_MODEL_LLAMA, post = hy_model_post_ln(m);
    if (post) {
        add_param(m, HY_P_WTE, -1, "embeddings.word_embeddings.weight", m->vocab_padded, C, 0, 1);
        add_param(m, HY_P_WPE, -1, "embeddings.position_embeddings.weight", m->positions, C,
                  0, 1);
        add_param(m, HY_P_TTE, -1, "embeddings.token_type_embeddings.weight", HY_BERT_TYPE_VOCAB,
                  C, 0, 1);
        add_param(m, HY_P_LNE_W, -1, "embeddings.LayerNorm.weight", C, 0, 0, 0);
        add_param(m, HY_P_LNE_B, -1, "embeddings.LayerNorm.bias", C, 0, 0, 0);
    } else {
        add_param(m, HY_P_WTE, -1, llama ? "embed.weight" : "wte.weight", m->vocab_padded, C, 0, 1);
        if (!llama) add_param(m, HY_P_WPE, -1, "wpe.weight", m->positions, C, 0, 1);
    }
    for (int s = 0; s < S; s++)
        for (int l = m->first_layer[s]; l < m->first_layer[s] + m->n_layers[s]; l++)
            add_block(m, l, s);
    if (post) {
        add_param(m, HY_P_LNF_W, -1, "cls.predictions.transform.LayerNorm.weight", C, 0, S - 1, 0);
        add_param(m, HY_P_LNF_B, -1, "cls.predictions.transform.LayerNorm.bias", C, 0, S - 1, 0);
        add_param(m, HY_P_HEAD_W, -1, "cls.predictions.transform.dense.weight", C, C, S - 1, 1);
        add_param(m, HY_P_HEAD_B, -1, "cls.predictions.transform.dense.bias", C, 0, S - 1, 0);
        add_param(m, HY_P_HEAD_BIAS, -1, "cls.predictions.bias", m->vocab_padded, 0, S - 1, 0);
        return HY_OK;
    }
    add_param(m, HY_P_LNF_W, -1, llama ? "norm.weight" : "ln_f.weight", C, 0, S - 1, 0);
    if (!llama) add_param(m, HY_P_LNF_B, -1, "ln_f.bias", C, 0, S - 1, 0);
    if (!m->tie_embeddings)
        add_param(m, HY_P_LM_HEAD, -1, "lm_head.weight", m->vocab_padded, C, S - 1, 1);
    return HY_OK;
}

hy_model_shape hy_model_shape_of(const hy_model *m) {
    return (hy_model_shape){ .kind = m->kind, .layers = m->layers, .d_model = m->d_model,
                             .heads = m->heads, .seq_len = m->seq_len,
                             .positions = m->positions, .vocab = m->vocab,
                             .kv_heads = m->kv_heads, .ffn_dim = m->ffn_dim,
                             .tie_embeddings = m->tie_embeddings, .norm_eps = m->norm_eps,
                             .rope_theta = m->rope_theta, .rope_scaling = m->rope_scaling,
                             .mask_token = m->mask_token, .norm = m->norm };
}

size_t hy_model_param_count(const hy_model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++) n += hy_model_real_numel(m, &m->params[i]);
    return n;
}

const hy_param *hy_model_find(const hy_model *m, const char *name) {
    if (strncmp(name, "transformer.", 12) == 0) name += 12;
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
    return NULL;
}

/* The table is built in this order (hy_model_build): wte, wpe (GPT,
 * BERT), post-LN BERT's tte and embedding LayerNorm, each block's
 * parameters (GPT, BERT: the 12 in hy_param_kind's order; Llama:
 * llama_slot's 6), ln_f's weight and bias (GPT, BERT; post-LN BERT: the
 * head's LayerNorm, then its dense weight and bias and the decoder bias)
 * or the final norm's weight (Llama), then lm_head when untied. */
const hy_param *hy_model_param(const hy_model *m, hy_param_kind kind, int layer) {
    int llama = m->kind == HY_MODEL_LLAMA, post = hy_model_post_ln(m);
    int first = llama ? 1 : post ? 5 : 2;
    int tail = first + m->per_block * m->layers, slot;
    switch (kind) {
    case HY_P_WTE: return &m->params[0];
    case HY_P_WPE: return llama ? NULL : &m->params[1];
    case HY_P_TTE: return post ? &m->params[2] : NULL;
    case HY_P_LNE_W: return post ? &m->params[3] : NULL;
    case HY_P_LNE_B: return post ? &m->params[4] : NULL;
    case HY_P_LNF_W: return &m->params[tail];
    case HY_P_LNF_B: return llama ? NULL : &m->params[tail + 1];
    case HY_P_HEAD_W: return post ? &m->params[tail + 2] : NULL;
    case HY_P_HEAD_B: return post ? &m->params[tail + 3] : NULL;
    case HY_P_HEAD_BIAS: return post ? &m->params[tail + 4] : NULL;
    case HY_P_LM_HEAD: return m->tie_embeddings ? NULL : &m->params[m->n_params - 1];
    default:
        assert(layer >= 0 && layer < m->layers);
        slot = llama ? llama_slot(kind) : (int)(kind - HY_P_LN1_W);
        return slot < 0 ? NULL : &m->params[first + m->per_block * layer + slot];
    }
}

size_t hy_model_real_numel(const hy_model *m, const hy_param *p) {
    return p->vocab_rows ? (size_t)m->vocab * (p->ndim == 2 ? (size_t)m->d_model : 1) : p->numel;
}

size_t hy_model_max_numel(const hy_model *m) {
    size_t most = 0;
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].numel > most) most = m->params[i].numel;
    return most;
}

static int is_residual_proj(hy_param_kind k) {
    return k == HY_P_ATTN_PROJ_W || k == HY_P_MLP_PROJ_W;
}

void hy_model_init_stage(const hy_model *m, int stage, uint64_t seed, float *block) {
    int hf = m->kind == HY_MODEL_LLAMA || hy_model_post_ln(m);   /* Hugging Face's: no scaling */
    double resid = hf ? 0.02 : 0.02 / sqrt(2.0 * m->layers);
    for (int i = 0; i < m->n_params; i++) {
        const hy_param *p = &m->params[i];
        if (p->stage != stage) continue;
        float *w = block + p->offset;
        size_t n = p->numel;
        if (p->kind == HY_P_LN1_W || p->kind == HY_P_LN2_W || p->kind == HY_P_LNF_W ||
            p->kind == HY_P_LNE_W) {
            for (size_t j = 0; j < n; j++) w[j] = 1.0f;
        } else if (p->ndim == 1) {
            memset(w, 0, n * sizeof *w);
        } else {
            hy_rng r = hy_rng_stream(seed, (uint64_t)i);
            double sd = is_residual_proj(p->kind) ? resid : 0.02;
            size_t real = hy_model_real_numel(m, p);
            for (size_t j = 0; j < real; j++) w[j] = (float)(sd * hy_rng_normal(&r));
            memset(w + real, 0, (n - real) * sizeof *w);
        }
    }
}

/* The inverse frequencies and angles follow Hugging Face's Llama in fp32
 * (inv_freq is an fp32 tensor, and the angle t · f_i is one fp32 product),
 * so that a model trained here and evaluated there sees the same rotations
 * to the last bit of the angle; only cos and sin are taken in double. The
 * scaling is _compute_llama3_parameters' formula. */
void hy_rope_table(float *cs, int T, int hd, double theta, const hy_rope_scaling *scaling) {
    assert(hd >= 2 && hd % 2 == 0 && T >= 0 && theta > 0);
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float f = (float)(1.0 / pow(theta, (double)(2 * i) / hd));
        if (scaling != NULL && scaling->factor != 0) {
            const hy_rope_scaling *sc = scaling;
            assert(sc->high_freq_factor > sc->low_freq_factor);
            double old = sc->original_max_position_embeddings;
            double wavelen = 2.0 * M_PI / f;
            double low_wavelen = old / sc->low_freq_factor, high_wavelen = old / sc->high_freq_factor;
            if (wavelen > low_wavelen) {
                f = (float)(f / sc->factor);
            } else if (wavelen >= high_wavelen) {
                double smooth = (old / wavelen - sc->low_freq_factor) /
                                (sc->high_freq_factor - sc->low_freq_factor);
                f = (float)((1.0 - smooth) * f / sc->factor + smooth * f);
            }
        }
        for (int t = 0; t < T; t++) {
            float angle = (float)t * f;
            cs[(size_t)t * hd + i] = (float)cos((double)angle);
            cs[(size_t)t * hd + half + i] = (float)sin((double)angle);
        }
    }
}
