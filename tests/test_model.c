/*
 * test_model.c — shapes, parameter counts, partition and initialization.
 *
 * The published parameter counts of GPT-2 small and medium pin the
 * shapes; the partition is checked for balance and for honouring an
 * explicit split; the initialization is checked to be the same whatever
 * the partition (the precondition of "pipelined = sequential") and to have
 * GPT-2's scales. Parameters are found by kind and layer.
 */
#include "config.h"
#include "model.h"
#include "lib/testrun.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static int load(hy_config *c, const char *path, const char *const *sets, int n) {
    hy_error err;
    hy_config_init(c);
    int rc = hy_config_load(c, path, sets, n, &err);
    if (rc) fprintf(stderr, "config: %s\n", err.msg);
    return rc;
}

static void test_counts(void) {
    hy_config c;
    hy_model m;
    hy_error err;
    CHECK(load(&c, "configs/gpt2-124m.json", NULL, 0) == HY_OK);
    CHECK(hy_test_model_build(&m, &c, 1, &err) == HY_OK);
    CHECKF(hy_model_param_count(&m) == 124439808u, "%zu", hy_model_param_count(&m));
    hy_model_free(&m);
    /* Padding the vocabulary to 50304 adds rows but no parameters. */
    CHECK(hy_test_model_build(&m, &c, 128, &err) == HY_OK);
    CHECK(m.vocab_padded == 50304 && m.vocab == 50257);
    CHECK(hy_model_param_count(&m) == 124439808u);
    const hy_param *wte = hy_model_find(&m, "transformer.wte.weight");
    CHECK(wte && wte->shape[0] == 50304 && wte->shape[1] == 768 && wte->stage == 0);
    const hy_param *qkv = hy_model_find(&m, "h.11.attn.c_attn.weight");
    CHECK(qkv && qkv->shape[0] == 768 && qkv->shape[1] == 2304 && qkv->decay);
    CHECK(hy_model_find(&m, "h.11.attn.c_attn.bias")->decay == 0);
    CHECK(hy_model_find(&m, "h.12.ln_1.weight") == NULL);
    CHECK(hy_model_find(&m, "ln_f.bias")->stage == m.stages - 1);
    hy_model_free(&m);
    hy_config_free(&c);

    /* Trained shorter than its table (nanoGPT's block_size below
     * n_positions): the same model, the same count; a table of 256 rows
     * is 768 x 768 values fewer. */
    const char *short_seq[] = { "model.seq_len=256" };
    CHECK(load(&c, "configs/gpt2-124m.json", short_seq, 1) == HY_OK);
    CHECK(c.model.positions == 1024 && c.model.seq_len == 256);
    CHECK(hy_test_model_build(&m, &c, 1, &err) == HY_OK);
    CHECKF(hy_model_param_count(&m) == 124439808u, "%zu", hy_model_param_count(&m));
    const hy_param *wpe = hy_model_param(&m, HY_P_WPE, 0);
    CHECK(wpe == hy_model_find(&m, "wpe.weight") && wpe->shape[0] == 1024 && wpe->shape[1] == 768);
    CHECK(m.seq_len == 256 && m.positions == 1024);
    CHECK(hy_model_shape_of(&m).positions == 1024);
    hy_model_free(&m);
    hy_config_free(&c);
    const char *own[] = { "model.seq_len=256", "model.positions=256" };
    CHECK(load(&c, "configs/gpt2-124m.json", own, 2) == HY_OK);
    CHECK(hy_test_model_build(&m, &c, 1, &err) == HY_OK);
    CHECKF(hy_model_param_count(&m) == 124439808u - 768u * 768u, "%zu", hy_model_param_count(&m));
    hy_model_free(&m);
    hy_config_free(&c);

    CHECK(load(&c, "configs/gpt2-350m.json", NULL, 0) == HY_OK);
    CHECK(hy_test_model_build(&m, &c, 1, &err) == HY_OK);
    CHECKF(hy_model_param_count(&m) == 354823168u, "%zu", hy_model_param_count(&m));
    hy_model_free(&m);
    hy_config_free(&c);
}

/* bert-base-uncased as BertForMaskedLM (no pooler): 109,514,298 parameters
 * by transformers' count, the tied decoder once, its bias and the head's
 * dense and LayerNorm on the last stage, Hugging Face's names; the head's
 * dense adds 2 C^2 to the head's FLOPs. Pre-LN BERT keeps GPT-2's table. */
static void test_bert_counts(void) {
    hy_config c;
    hy_model m;
    hy_error err;
    CHECK(load(&c, "configs/bert-base.json", NULL, 0) == HY_OK);
    CHECK(c.model.norm == HY_NORM_POST && (float)c.model.norm_eps == 1e-12f);
    CHECK(hy_test_model_build(&m, &c, 1, &err) == HY_OK);
    CHECKF(hy_model_param_count(&m) == 109514298u, "%zu", hy_model_param_count(&m));
    const hy_param *bias = hy_model_param(&m, HY_P_HEAD_BIAS, 0);
    CHECK(bias && bias->vocab_rows && bias->ndim == 1 && bias->stage == m.stages - 1 &&
          !bias->decay && hy_model_real_numel(&m, bias) == 30522);
    CHECK(hy_model_find(&m, "encoder.layer.11.attention.self.qkv.weight") ==
          hy_model_param(&m, HY_P_QKV_W, 11));
    CHECK(hy_model_param(&m, HY_P_TTE, 0)->shape[0] == 2 && hy_model_param(&m, HY_P_TTE, 0)->stage == 0);
    CHECK(hy_model_param(&m, HY_P_HEAD_W, 0) == hy_model_find(&m, "cls.predictions.transform.dense.weight"));
    CHECK(hy_model_param(&m, HY_P_LNF_W, 0) ==
          hy_model_find(&m, "cls.predictions.transform.LayerNorm.weight"));
    double C = 768;
    CHECK(hy_model_head_flops(&m) == 2 * C * m.vocab_padded + 2 * C * C);
    CHECK(hy_model_ln_eps(&m) == 1e-12f && hy_model_gelu(&m) == HY_GELU_ERF);
    hy_model_free(&m);
    hy_config_free(&c);
    /* BERT's own phase 1: T = 128 over the 512-row table it keeps. */
    const char *phase1[] = { "model.seq_len=128" };
    CHECK(load(&c, "configs/bert-base.json", phase1, 1) == HY_OK);
    CHECK(hy_test_model_build(&m, &c, 1, &err) == HY_OK);
    CHECKF(hy_model_param_count(&m) == 109514298u, "%zu", hy_model_param_count(&m));
    CHECK(hy_model_param(&m, HY_P_WPE, 0)->shape[0] == 512 && m.seq_len == 128);
    hy_model_free(&m);
    hy_config_free(&c);
    const char *pre[] = { "model.norm=pre" };
    CHECK(load(&c, "configs/bert-base.json", pre, 1) == HY_OK);
    CHECK(hy_test_model_build(&m, &c, 1, &err) == HY_OK);
    CHECK(hy_model_param(&m, HY_P_TTE, 0) == NULL && hy_model_find(&m, "wte.weight") != NULL);
    CHECK(hy_model_ln_eps(&m) == 1e-5f && hy_model_gelu(&m) == HY_GELU_TANH);
    hy_model_free(&m);
    hy_config_free(&c);
}

/* The Llama shapes' published sizes (Llama 3.2 1B: 1,235,814,400 with the
 * tied head; Llama 3 8B: 8,030,261,248 untied), and the table: fused
 * Q|K|V narrower than 3 d_model under GQA, gate|up 2F wide, no biases, no
 * wpe, an untied head on the last stage only. */
static void test_llama_counts(void) {
    hy_config c;
    hy_model m;
    hy_error err;
    CHECK(load(&c, "configs/llama-1b.json", NULL, 0) == HY_OK);
    CHECK(hy_test_model_build(&m, &c, 1, &err) == HY_OK);
    CHECKF(hy_model_param_count(&m) == 1235814400u, "%zu", hy_model_param_count(&m));
    CHECK(hy_model_param(&m, HY_P_LM_HEAD, 0) == NULL && hy_model_param(&m, HY_P_WPE, 0) == NULL);
    const hy_param *qkv = hy_model_param(&m, HY_P_QKV_W, 15);
    CHECK(qkv && qkv->shape[0] == 2048 && qkv->shape[1] == (32 + 2 * 8) * 64 && qkv->layer == 15);
    CHECK(hy_model_param(&m, HY_P_QKV_B, 3) == NULL);
    hy_model_free(&m);
    hy_config_free(&c);

    CHECK(load(&c, "configs/llama-8b.json", NULL, 0) == HY_OK);
    CHECK(hy_test_model_build(&m, &c, 1, &err) == HY_OK);
    CHECKF(hy_model_param_count(&m) == 8030261248u, "%zu", hy_model_param_count(&m));
    const hy_param *head = hy_model_param(&m, HY_P_LM_HEAD, 0);
    CHECK(head && head->stage == m.stages - 1 && head->vocab_rows && head->decay);
    CHECK(head == hy_model_find(&m, "lm_head.weight"));
    const hy_param *gu = hy_model_param(&m, HY_P_FC_W, 31), *down = hy_model_param(&m, HY_P_MLP_PROJ_W, 31);
    CHECK(gu && gu->shape[0] == 4096 && gu->shape[1] == 2 * 14336);
    CHECK(down && down->shape[0] == 14336 && down->shape[1] == 4096);
    /* Every (kind, layer) the transformer asks for is the table's entry of
     * that layer. */
    static const hy_param_kind kinds[] = { HY_P_LN1_W, HY_P_QKV_W, HY_P_ATTN_PROJ_W, HY_P_LN2_W,
                                           HY_P_FC_W, HY_P_MLP_PROJ_W };
    for (int l = 0; l < m.layers; l++)
        for (int k = 0; k < 6; k++) {
            const hy_param *p = hy_model_param(&m, kinds[k], l);
            CHECK(p && p->kind == kinds[k] && p->layer == l);
        }
    /* The head is as large as the embedding: the last stage gets fewer
     * blocks for it. */
    CHECK(m.n_layers[m.stages - 1] < m.n_layers[0]);
    hy_model_free(&m);
    hy_config_free(&c);
}

/* Every layer in exactly one stage, in order, each stage's block holding
 * exactly its parameters. */
static void check_partition(const hy_model *m) {
    int next = 0;
    for (int s = 0; s < m->stages; s++) {
        CHECK(m->first_layer[s] == next);
        next += m->n_layers[s];
        size_t sum = 0;
        for (int i = 0; i < m->n_params; i++) {
            const hy_param *p = &m->params[i];
            if (p->stage != s) continue;
            CHECK(p->offset == sum);
            sum += p->numel;
            if (p->layer >= 0)
                CHECK(p->layer >= m->first_layer[s] && p->layer < m->first_layer[s] + m->n_layers[s]);
        }
        CHECK(sum == m->stage_numel[s]);
    }
    CHECK(next == m->layers);
}

static void test_partition(void) {
    hy_config c;
    hy_model m;
    hy_error err;
    /* GPT-2 small on 8 stages: the head (about 4.5 blocks of work) makes
     * the last stage the heaviest, so it gets one layer and the rest
     * share eleven. */
    CHECK(load(&c, "configs/gpt2-124m.json", NULL, 0) == HY_OK);
    CHECK(hy_test_model_build(&m, &c, 1, &err) == HY_OK);
    CHECK(m.stages == 8);
    check_partition(&m);
    const int want[8] = { 2, 2, 2, 2, 1, 1, 1, 1 };
    for (int s = 0; s < 8; s++) CHECKF(m.n_layers[s] == want[s], "stage %d: %d", s, m.n_layers[s]);
    CHECK(hy_model_stage_cost(&m, 7) > 5.0 && hy_model_stage_cost(&m, 7) < 6.0);
    hy_model_free(&m);
    hy_config_free(&c);

    /* Small vocabulary: the head is cheap and layers spread evenly. */
    const char *even[] = { "model.layers=12", "schedule.kind=1f1b", "schedule.ranks=4" };
    CHECK(load(&c, NULL, even, 3) == HY_OK);
    CHECK(hy_test_model_build(&m, &c, 1, &err) == HY_OK);
    check_partition(&m);
    for (int s = 0; s < 4; s++) CHECK(m.n_layers[s] == 3);
    hy_model_free(&m);
    hy_config_free(&c);

    /* An explicit split, empty stages included. */
    const char *split[] = { "model.layers=4", "schedule.kind=hanayo", "schedule.ranks=4",
                            "schedule.split=[0,1,1,0,0,1,1,0]" };
    CHECK(load(&c, NULL, split, 4) == HY_OK);
    CHECK(hy_test_model_build(&m, &c, 1, &err) == HY_OK);
    check_partition(&m);
    CHECK(m.n_layers[0] == 0 && m.n_layers[1] == 1 && m.n_layers[7] == 0);
    CHECK(hy_model_find(&m, "wte.weight")->stage == 0);
    CHECK(m.stage_numel[3] == 0);
    hy_model_free(&m);
    hy_config_free(&c);
}

/* The same tensor gets the same values whichever stage holds it. */
static void test_init(void) {
    hy_config c1, c4;
    hy_model m1, m4;
    hy_error err;
    const char *one[] = { "model.layers=8", "schedule.kind=gpipe", "schedule.ranks=1" };
    const char *four[] = { "model.layers=8", "schedule.kind=hanayo", "schedule.ranks=2",
                           "schedule.waves=1" };
    CHECK(load(&c1, NULL, one, 3) == HY_OK && load(&c4, NULL, four, 4) == HY_OK);
    CHECK(hy_test_model_build(&m1, &c1, 1, &err) == HY_OK && hy_test_model_build(&m4, &c4, 1, &err) == HY_OK);
    CHECK(m1.stages == 1 && m4.stages == 4);
    float *b1 = malloc(m1.stage_numel[0] * sizeof(float));
    float *b4[4];
    for (int s = 0; s < 4; s++) b4[s] = malloc((m4.stage_numel[s] + 1) * sizeof(float));
    hy_model_init_stage(&m1, 0, 1234, b1);
    for (int s = 0; s < 4; s++) hy_model_init_stage(&m4, s, 1234, b4[s]);
    int same = 1;
    for (int i = 0; i < m1.n_params; i++) {
        const hy_param *p = &m1.params[i], *q = hy_model_find(&m4, p->name);
        if (!q || memcmp(b1 + p->offset, b4[q->stage] + q->offset, p->numel * sizeof(float)) != 0)
            same = 0;
    }
    CHECK(same);

    /* Scales: N(0, 0.02) for matrices, 0.02/sqrt(2L) for the residual
     * projections, LN weights 1 and biases 0. With 32k+ samples the
     * sample std is within 2% of the true one. */
    const hy_param *wte = hy_model_find(&m1, "wte.weight");
    const hy_param *proj = hy_model_find(&m1, "h.3.mlp.c_proj.weight");
    double s2 = 0, p2 = 0;
    for (size_t j = 0; j < wte->numel; j++) s2 += (double)b1[wte->offset + j] * b1[wte->offset + j];
    for (size_t j = 0; j < proj->numel; j++) p2 += (double)b1[proj->offset + j] * b1[proj->offset + j];
    CHECK_NEAR(sqrt(s2 / wte->numel), 0.02, 0.0004);
    CHECK_NEAR(sqrt(p2 / proj->numel), 0.02 / sqrt(16.0), 0.0002);
    CHECK(b1[hy_model_find(&m1, "h.0.ln_1.weight")->offset] == 1.0f);
    CHECK(b1[hy_model_find(&m1, "h.0.attn.c_attn.bias")->offset] == 0.0f);

    /* Another seed, other values. */
    float *other = malloc(m1.stage_numel[0] * sizeof(float));
    hy_model_init_stage(&m1, 0, 1235, other);
    CHECK(memcmp(other + wte->offset, b1 + wte->offset, 64) != 0);
    free(other);
    free(b1);
    for (int s = 0; s < 4; s++) free(b4[s]);
    hy_model_free(&m1);
    hy_model_free(&m4);
    hy_config_free(&c1);
    hy_config_free(&c4);
}

/* Lookup by kind and layer finds the parameter of that name; the real
 * values leave out wte's padding rows; the largest parameter bounds all. */
static void test_lookup(void) {
    hy_config c;
    hy_model m;
    hy_error err;
    const char *sets[] = { "model.layers=3", "model.d_model=16", "model.heads=2",
                           "model.vocab=100", "schedule.kind=1f1b", "schedule.ranks=3" };
    CHECK(load(&c, NULL, sets, 6) == HY_OK);
    CHECK(hy_test_model_build(&m, &c, 64, &err) == HY_OK);
    static const char *const block[] = { "ln_1.weight", "ln_1.bias", "attn.c_attn.weight",
                                         "attn.c_attn.bias", "attn.c_proj.weight",
                                         "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                         "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
                                         "mlp.c_proj.bias" };
    CHECK(hy_model_param(&m, HY_P_WTE, 0) == hy_model_find(&m, "wte.weight"));
    CHECK(hy_model_param(&m, HY_P_WPE, 2) == hy_model_find(&m, "wpe.weight"));
    CHECK(hy_model_param(&m, HY_P_LNF_W, 0) == hy_model_find(&m, "ln_f.weight"));
    CHECK(hy_model_param(&m, HY_P_LNF_B, 0) == hy_model_find(&m, "ln_f.bias"));
    for (int l = 0; l < 3; l++)
        for (int k = HY_P_LN1_W; k <= HY_P_MLP_PROJ_B; k++) {
            char name[48];
            snprintf(name, sizeof name, "h.%d.%s", l, block[k - HY_P_LN1_W]);
            const hy_param *p = hy_model_param(&m, (hy_param_kind)k, l);
            CHECKF(p == hy_model_find(&m, name) && p->kind == (hy_param_kind)k && p->layer == l,
                   "%s", name);
        }
    const hy_param *wte = hy_model_param(&m, HY_P_WTE, 0);
    CHECK(m.vocab_padded == 128 && wte->numel == 128 * 16);
    CHECK(hy_model_real_numel(&m, wte) == 100 * 16);
    const hy_param *fc = hy_model_param(&m, HY_P_FC_W, 1);
    CHECK(hy_model_real_numel(&m, fc) == fc->numel && fc->numel == 16 * 64);
    CHECK(hy_model_max_numel(&m) == 128 * 16);   /* wte, padding rows counted */
    hy_model_free(&m);
    hy_config_free(&c);
}

int main(void) {
    test_counts();
    test_llama_counts();
    test_bert_counts();
    test_partition();
    test_init();
    test_lookup();
    return TEST_END("model");
}
