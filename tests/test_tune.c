/*
 * test_tune.c — `hanayo tune` with modelled costs (tune.h,
 * hy_tune_model_costs): models no machine here could profile, searched
 * under a memory budget without running (or allocating) them.
 *
 * The FLOP counts (model.h) against the parameter table. The modelled
 * cost model is the model's own FLOPs: its layer and head
 * costs stand in the ratio the partition weighs them by (model.h), a
 * backward is twice a forward, a transfer is a boundary's bytes over the
 * link. Then configs/gpt-13b.json and configs/llama-8b.json on the CUDA
 * backend's memory at 80 GiB a rank: the chosen plan's memory plan,
 * rebuilt here as `hanayo plan` builds it (within its activation cap,
 * which its order keeps), fits; every candidate recomputes no more than
 * its order needs (one mode less would not fit); the 13B config as it is fits only with
 * recompute, and under a tighter budget the chosen plan recomputes and
 * would not fit without. Then caps against recompute on 1F1B alone
 * (test_cap_or_recompute). The search is a function of its inputs: two runs
 * agree to the last bit. (The same through the command, under `ulimit
 * -v`: tests/test_fits.sh.)
 */
#include "costs.h"
#include "memplan.h"
#include "model.h"
#include "plan.h"
#include "test.h"
#include "lib/testrun.h"
#include "transformer.h"
#include "tune.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define GIB 1073741824.0
#define TFLOPS 400.0
#define LINK_GBPS 3600.0

/* GPipe and 1F1B: the order searches of hanayo and interleaved (capped
 * ones above all) take most of a search's time at 13B's sizes, seconds
 * each, and the test runs under ASan too (the llama-8b case searches
 * every kind). */
#define FAST_KINDS ((1u << HY_SCHED_GPIPE) | (1u << HY_SCHED_1F1B))

static int load(hy_run *run, const char *config) {
    hy_error err;
    int rc = hy_test_run_load(run, config, NULL, 0, &err);
    CHECKF(rc == HY_OK, "%s: %s", config, err.msg);
    return rc;
}

/* The cost model against the model's formulas. */
static void test_model_costs(void) {
    hy_run run;
    if (load(&run, "configs/gpt-13b.json")) return;
    hy_backend_memory mem;
    hy_backend_cuda_memory(&mem);
    hy_cost_model m;
    double share = -1;
    hy_tune_model_costs(&run, &mem, TFLOPS, LINK_GBPS, &m, &share);
    const hy_model *mdl = &run.model;
    double tokens = (double)run.micro_batch_size * mdl->seq_len;
    CHECK_NEAR(m.layer_fwd, tokens * hy_model_block_flops(mdl) / (TFLOPS * 1e12) * 1e3,
               1e-9 * m.layer_fwd);
    /* The head weighs against a layer as the partition weighs it. */
    int S = mdl->stages;
    CHECK_NEAR(m.last_fwd / m.layer_fwd, hy_model_stage_cost(mdl, S - 1) - mdl->n_layers[S - 1],
               1e-9);
    CHECK(m.first_fwd == 0 && m.first_bwd == 0);
    CHECK_NEAR(m.layer_bwd, 2 * m.layer_fwd, 1e-12 * m.layer_bwd);
    CHECK_NEAR(m.last_bwd, 2 * m.last_fwd, 1e-12 * m.last_bwd);
    /* A transfer: B x T x d_model bf16 values over the link. */
    double bytes = tokens * mdl->d_model * 2;
    CHECK_NEAR(m.comm, bytes * 8 / (LINK_GBPS * 1e9) * 1e3, 1e-9 * m.comm);
    /* W redoes the weights' products, not attention's: under half. */
    CHECKF(share > 0.4 && share < 0.5, "W's share %g", share);
    CHECK_NEAR(share, hy_model_block_weight_flops(mdl) / (2 * hy_model_block_flops(mdl)), 1e-12);
    /* The CPU's fp32 activations: a transfer twice the bytes. */
    hy_backend_memory cpu;
    hy_backend_cpu_memory(&cpu);
    hy_cost_model mc;
    hy_tune_model_costs(&run, &cpu, TFLOPS, LINK_GBPS, &mc, &share);
    CHECK_NEAR(mc.comm, 2 * m.comm, 1e-9 * m.comm);
    CHECK(mc.layer_fwd == m.layer_fwd);
    hy_run_free(&run);
}

/* The FLOP counts against the parameter table: a block's products with
 * weights are twice its matrices' values (the decayed parameters of
 * layer 0), the whole forward its blocks and the head (what the bench's
 * GFLOP/s counts), for a GPT and a Llama (fused Q|K|V of grouped-query
 * attention, gate|up). */
static void test_flops_of(const char *config) {
    hy_run run;
    if (load(&run, config)) return;
    const hy_model *m = &run.model;
    double matrices = 0;
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].layer == 0 && m->params[i].decay) matrices += (double)m->params[i].numel;
    CHECKF(hy_model_block_weight_flops(m) == 2 * matrices, "%s: %g vs 2 x %g", config,
           hy_model_block_weight_flops(m), matrices);
    CHECK(hy_model_block_flops(m) == 2 * matrices + 4.0 * m->d_model * m->seq_len);
    CHECK(hy_model_flops_per_token(m) ==
          m->layers * hy_model_block_flops(m) + 2.0 * m->d_model * m->vocab_padded);
    hy_run_free(&run);
}

/* The search of run under modelled costs at `budget` bytes a rank. */
static int search(const hy_run *run, unsigned kinds, double budget, const hy_backend_memory *mem,
                  hy_tune_result *res) {
    hy_cost_model m;
    hy_tune_opts o = { .kinds = kinds, .budget_bytes = budget, .overhead_ms = 0, .mem = mem,
                       .priced_recompute = HY_RECOMPUTE_NONE };
    hy_tune_model_costs(run, mem, TFLOPS, LINK_GBPS, &m, &o.wgrad_share);
    hy_error err;
    int rc = hy_tune_search(run, &m, &o, res, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    return rc;
}

/* The memory plan of candidate x under recomputation r, its schedule
 * built as `hanayo plan` builds it (hy_plan_build, in the order chosen for
 * its transfer time, within its cap): the most any rank needs. The order
 * holds no more than the cap on any rank. */
static double memory_of(const hy_run *run, const hy_tune_candidate *x, hy_recompute r,
                        const hy_backend_memory *mem) {
    hy_sched_params p = run->sched_params;
    p.kind = x->kind;
    p.waves = x->kind == HY_SCHED_HANAYO ? x->waves : 1;
    p.chunks = x->kind == HY_SCHED_INTERLEAVED ? x->chunks : 1;
    p.micro_batches = x->micro_batches;
    p.split_backward = x->split_backward;
    p.max_activations = x->max_activations;
    hy_costs c = hy_costs_uniform_for(p.split_backward, x->comm_cost);
    hy_plan pl;
    hy_error err;
    if (hy_plan_build(&pl, &p, &c, &err) != HY_OK) {
        CHECKF(0, "%s", err.msg);
        return INFINITY;
    }
    CHECK(pl.sched.stages == x->stages);
    CHECKF(x->max_activations == 0 || hy_plan_peak_max(&pl) <= x->max_activations,
           "peak %d over the cap %d", hy_plan_peak_max(&pl), x->max_activations);
    double act, all;
    hy_tune_memory(run, &pl.sched, x->split, x->micro_batch_size, r, mem, &act, &all);
    hy_plan_free(&pl);
    return all;
}

/* The search's answers against their memory plans: the best fits, every
 * candidate with the least recomputation that does in its order, each
 * trains the config's global batch. */
static void check_fits(const char *config, const hy_run *run, const hy_tune_result *res,
                       double budget, const hy_backend_memory *mem) {
    CHECKF(res->n_best > 0, "%s: no candidate", config);
    int G = run->sched_params.micro_batches * run->micro_batch_size;
    for (int i = 0; i < res->n_best; i++) {
        const hy_tune_candidate *x = &res->best[i];
        double need = memory_of(run, x, x->recompute, mem);
        CHECKF(need <= budget && need == x->mem_bytes, "%s #%d: %.2f GiB (reported %.2f) "
               "against %.2f", config, i + 1, need / GIB, x->mem_bytes / GIB, budget / GIB);
        if (x->recompute > HY_RECOMPUTE_NONE) {
            double less = memory_of(run, x, (hy_recompute)(x->recompute - 1), mem);
            CHECKF(less > budget, "%s #%d recomputes %s but fits with less (%.2f GiB)", config,
                   i + 1, hy_recompute_name(x->recompute), less / GIB);
        }
        CHECK(x->micro_batches * x->micro_batch_size == G);
    }
    printf("%s at %.0f GiB: %s%s M = %d, B = %d, recompute %s, cap %d, %.2f GiB, %.0f tokens/s "
           "predicted\n", config, budget / GIB, hy_sched_name(res->best[0].kind),
           res->best[0].split_backward ? " +split" : "", res->best[0].micro_batches,
           res->best[0].micro_batch_size, hy_recompute_name(res->best[0].recompute),
           res->best[0].max_activations, res->best[0].mem_bytes / GIB,
           res->best[0].tokens / (res->best[0].step_ms / 1e3));
}

/* The cap against recompute (lib/fit.h), 1F1B alone on gpt-13b: at
 * 72 GiB the fastest plan is a capped order that recomputes nothing,
 * where its natural order would have to recompute; at 56 GiB the natural
 * order with selective recompute beats every cap; at 20 GiB nothing fits,
 * and the error names the term that keeps it from fitting (the model's
 * state: caps and recompute shrink the stash alone). */
static void test_cap_or_recompute(void) {
    hy_run run;
    if (load(&run, "configs/gpt-13b.json")) return;
    hy_backend_memory mem;
    hy_backend_cuda_memory(&mem);
    unsigned kinds = 1u << HY_SCHED_1F1B;
    hy_tune_result res;
    double budget = 72 * GIB;
    if (search(&run, kinds, budget, &mem, &res) == HY_OK) {
        check_fits("gpt-13b 1f1b", &run, &res, budget, &mem);
        hy_tune_candidate x = res.best[0];
        CHECKF(x.max_activations > 0 && x.recompute == HY_RECOMPUTE_NONE, "cap %d, %s",
               x.max_activations, hy_recompute_name(x.recompute));
        x.max_activations = 0;   /* its natural order would not fit without recompute */
        CHECK(memory_of(&run, &x, HY_RECOMPUTE_NONE, &mem) > budget);
        hy_tune_result_free(&res);
    }
    budget = 56 * GIB;
    if (search(&run, kinds, budget, &mem, &res) == HY_OK) {
        check_fits("gpt-13b 1f1b", &run, &res, budget, &mem);
        const hy_tune_candidate *x = &res.best[0];
        CHECKF(x->max_activations == 0 && x->recompute != HY_RECOMPUTE_NONE, "cap %d, %s",
               x->max_activations, hy_recompute_name(x->recompute));
        hy_tune_result_free(&res);
    }
    hy_cost_model m;
    hy_tune_opts o = { .kinds = kinds, .budget_bytes = 20 * GIB, .mem = &mem,
                       .priced_recompute = HY_RECOMPUTE_NONE };
    hy_tune_model_costs(&run, &mem, TFLOPS, LINK_GBPS, &m, &o.wgrad_share);
    hy_error err;
    CHECK(hy_tune_search(&run, &m, &o, &res, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "even with full recompute and the smallest activation cap") &&
           strstr(err.msg, "the most of it optimizer") && strstr(err.msg, "model's state alone"),
           "%s", err.msg);
    hy_run_free(&run);
}

/* Two searches agree to the bit. */
static void check_same(const hy_tune_result *res, const hy_tune_result *again) {
    CHECK(again->n_best == res->n_best && again->searched == res->searched &&
          again->over_budget == res->over_budget && again->outrun == res->outrun);
    for (int i = 0; i < res->n_best && i < again->n_best; i++) {
        const hy_tune_candidate *x = &res->best[i], *y = &again->best[i];
        CHECK(x->kind == y->kind && x->chunks == y->chunks &&
              x->micro_batches == y->micro_batches &&
              x->micro_batch_size == y->micro_batch_size && x->recompute == y->recompute &&
              x->max_activations == y->max_activations &&
              x->split_backward == y->split_backward &&
              memcmp(x->split, y->split, (size_t)x->stages * sizeof(int)) == 0 &&
              x->step_ms == y->step_ms && x->mem_bytes == y->mem_bytes);
    }
}

static void test_gpt_13b(void) {
    hy_run run;
    if (load(&run, "configs/gpt-13b.json")) return;
    hy_backend_memory mem;
    hy_backend_cuda_memory(&mem);
    double budget = 80 * GIB;
    hy_tune_result res;
    if (search(&run, FAST_KINDS, budget, &mem, &res) == HY_OK) {
        check_fits("gpt-13b", &run, &res, budget, &mem);
        /* The config as it is does not fit without recompute; with full,
         * it does. */
        CHECKF(res.current.mem_bytes > budget, "%.2f GiB", res.current.mem_bytes / GIB);
        CHECK(memory_of(&run, &res.current, HY_RECOMPUTE_FULL, &mem) <= budget);
        hy_tune_result_free(&res);
    }
    /* Tighter: no candidate fits without recomputing, and the chosen one
     * does not without; the same search again gives the same answer, to
     * the bit, caps and recompute included (in the normal build: under
     * AddressSanitizer, there for memory errors, the second search would
     * only repeat the first's accesses, at a quarter of the speed). */
    budget = 48 * GIB;
    unsigned kinds = FAST_KINDS;
    if (search(&run, kinds, budget, &mem, &res) == HY_OK) {
        check_fits("gpt-13b", &run, &res, budget, &mem);
        CHECK(res.best[0].recompute != HY_RECOMPUTE_NONE);
        CHECK(memory_of(&run, &res.best[0], HY_RECOMPUTE_NONE, &mem) > budget);
        hy_tune_result again;
        if (!hy_test_under("address") && search(&run, kinds, budget, &mem, &again) == HY_OK) {
            check_same(&res, &again);
            hy_tune_result_free(&again);
        }
        hy_tune_result_free(&res);
    }
    hy_run_free(&run);
}

static void test_llama_8b(void) {
    hy_run run;
    if (load(&run, "configs/llama-8b.json")) return;
    hy_backend_memory mem;
    hy_backend_cuda_memory(&mem);
    double budget = 80 * GIB;
    hy_tune_result res;
    if (search(&run, 0, budget, &mem, &res) == HY_OK) {
        check_fits("llama-8b", &run, &res, budget, &mem);
        hy_tune_result_free(&res);
    }
    hy_run_free(&run);
}

int main(void) {
    test_flops_of("configs/gpt-13b.json");
    test_flops_of("configs/llama-8b.json");
    test_model_costs();
    test_gpt_13b();
    test_cap_or_recompute();
    test_llama_8b();
    return TEST_END("tune");
}
