/*
 * tune.c — see tune.h.
 *
 * Sections: the memory estimate; splits (the greedy balance and the
 * one-layer moves); the search.
 */
#include "tune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fit.h"
#include "mailbox.h"
#include "memplan.h"
#include "model.h"
#include "runtime.h"
#include "sim.h"
#include "transformer.h"

#define TUNE_MAX_WAVES 4        /* W (hanayo) and v (interleaved) searched: 1..4 */
/* A split other than the runtime's default is proposed only when predicted
 * this much faster than the default at the same schedule and M. Predicted
 * steps came within about 4% of measured ones on the 2-core CPU machine,
 * and a tuned split predicted 4% faster ran slower there in three
 * alternating runs: a gain the model cannot tell from its own error is not
 * worth a change. */
#define TUNE_SPLIT_MARGIN 0.05

/* ------------------------------------------------------------------------
 * The memory estimate
 * ------------------------------------------------------------------------ */

void hy_tune_memory(const hy_run *run, const hy_schedule *s, const int *split, int B,
                    hy_recompute r, const hy_backend_memory *mem, double *act, double *all) {
    *act = *all = 0;
    hy_backend_memory cpu;
    if (!mem) {
        hy_backend_cpu_memory(&cpu);
        mem = &cpu;
    }
    hy_model_shape shape = hy_model_shape_of(&run->model);
    hy_model m;
    hy_memplan mp;
    hy_error err;
    if (hy_model_build(&m, &shape, split, s->stages, 1, &err) != HY_OK) {
        *act = *all = INFINITY;   /* no such model: nothing fits it */
        return;
    }
    hy_memplan_in in = { .model = &m, .sched = s, .micro_batch_size = B, .replicas = 1,
                         .mem = mem, .recompute = r };
    if (hy_memplan_build(&mp, &in, &err) == HY_OK) {
        for (int r = 0; r < mp.ranks; r++) {
            *act = fmax(*act, mp.rank[r].bytes[HY_MEM_ACTIVATIONS]);
            *all = fmax(*all, mp.rank[r].total);
        }
        hy_memplan_free(&mp);
    } else {
        *act = *all = INFINITY;
    }
    hy_model_free(&m);
}

/* ------------------------------------------------------------------------
 * Modelled costs
 * ------------------------------------------------------------------------ */

void hy_tune_model_costs(const hy_run *run, const hy_backend_memory *mem, double tflops,
                         double link_gbps, hy_cost_model *m, double *wgrad_share) {
    const hy_model *mdl = &run->model;
    hy_transformer tf = { .model = mdl, .act_size = mem->act_size, .B = run->micro_batch_size,
                          .T = mdl->seq_len };
    hy_cost_work w = { .tokens = (double)run->micro_batch_size * mdl->seq_len,
                       .layer_flops = hy_model_block_flops(mdl),
                       .first_flops = 0,   /* the embedding is a lookup */
                       .last_flops = hy_model_head_flops(mdl),
                       .transfer_bytes = (double)hy_boundary_bytes(&tf),
                       .tflops = tflops, .link_gbps = link_gbps };
    hy_cost_model_of_work(m, &w);
    *wgrad_share = hy_model_block_weight_flops(mdl) /
                   (HY_COSTS_BWD_PER_FWD * hy_model_block_flops(mdl));
}

/* ------------------------------------------------------------------------
 * Splits
 * ------------------------------------------------------------------------ */

/* Every stage holds at least one layer, as in the runtime's own balance.
 * A stage also costs something per action whatever it holds (its copies,
 * its mailbox), and a profile whose stages all hold as many layers cannot
 * tell that from the layers' cost; a split with empty stages would lean
 * on exactly what was not measured (measured on tiny-gpt: an empty last
 * stage, predicted 4% faster, ran 10% slower). */
#define TUNE_MIN_LAYERS 1

/* The cost of stage st of S holding n layers, F + B. */
static double stage_cost(const hy_cost_model *m, int rc, int S, int n) {
    double f, b;
    hy_cost_model_stage(m, rc, S, n, &f, &b);
    return f + b;
}

/* Greedy balance by the measured costs: every stage its minimum, then each
 * further layer to the stage where the result is cheapest (the lowest such
 * stage on a tie). With layers alike this minimizes the dearest stage. */
static void greedy_split(const hy_cost_model *m, int L, int S, int *n) {
    int left = L;
    for (int stage = 0; stage < S; stage++) {
        n[stage] = TUNE_MIN_LAYERS;
        left -= n[stage];
    }
    for (; left > 0; left--) {
        int best = 0;
        double best_c = INFINITY;
        for (int stage = 0; stage < S; stage++) {
            double c = stage_cost(m, stage, S, n[stage] + 1);
            if (c < best_c) {
                best_c = c;
                best = stage;
            }
        }
        n[best]++;
    }
}

/* The per-stage costs of split n (S stages) under m: fwd, bwd (B's, or a
 * whole backward's) and, split, wgrad (W's, a wgrad_share of the whole),
 * each backward pass that reads the activations redoing recompute_share
 * of its layers' forward (costs.h). */
static void stage_costs(const hy_cost_model *m, const int *n, int S, int split, double wgrad_share,
                        double recompute_share, double *fwd, double *bwd, double *wgrad) {
    hy_cost_model_stages(m, n, S, fwd, bwd);   /* bwd: a whole backward */
    for (int stage = 0; stage < S; stage++) {
        wgrad[stage] = split ? bwd[stage] * wgrad_share : 0;
        bwd[stage] -= wgrad[stage];
        double extra = recompute_share > 0 ? hy_cost_model_recompute(m, n[stage],
                                                                      recompute_share) : 0;
        bwd[stage] += extra;
        if (split) wgrad[stage] += extra;
    }
}

/* Schedule s with split n, simulated as the runtime runs it: with its
 * mailbox slots (lim: mailbox.h, hy_mailbox_sim_limits), since a split
 * that lets one rank run ahead makes it wait for slots there. fwd, bwd:
 * scratch of S entries each, bwd followed by S more. */
static int simulate_split(const hy_schedule *s, const hy_sim_limits *lim, const hy_cost_model *m,
                          const int *n, double wgrad_share, double *fwd, double *bwd,
                          hy_sim_result *res, hy_error *err) {
    double *wgrad = bwd + s->stages;
    stage_costs(m, n, s->stages, s->split, wgrad_share, 0, fwd, bwd, wgrad);
    hy_costs c = { .comm = m->comm, .fwd_stage = fwd, .bwd_stage = bwd,
                   .wgrad_stage = s->split ? wgrad : NULL };
    return hy_simulate(s, &c, lim, res, err);
}

static int makespan_of(const hy_schedule *s, const hy_sim_limits *lim, const hy_cost_model *m,
                       const int *n, double wgrad_share, double *fwd, double *bwd,
                       double *makespan, hy_error *err) {
    hy_sim_result res;
    int rc = simulate_split(s, lim, m, n, wgrad_share, fwd, bwd, &res, err);
    if (!rc) {
        *makespan = res.makespan;
        hy_sim_result_free(&res);
    }
    return rc;
}

/* From split n, moves one layer at a time from one stage to another while
 * some move shortens the simulated makespan (the best move each round;
 * the first found on a tie, so the result is deterministic). */
static int improve_split(const hy_schedule *s, const hy_cost_model *m, double wgrad_share, int *n,
                         hy_error *err) {
    int S = s->stages;
    hy_sim_limits lim;
    int rc = hy_mailbox_sim_limits(s, &lim, err);   /* the schedule's, whatever the split */
    if (rc) return rc;
    double *fwd = malloc(3 * (size_t)S * sizeof(double)), best;
    if (!fwd) {
        hy_sim_limits_free(&lim);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory tuning");
    }
    double *bwd = fwd + S;
    rc = makespan_of(s, &lim, m, n, wgrad_share, fwd, bwd, &best, err);
    for (int round = 0; !rc && round < 4 * S + 64; round++) {
        int from = -1, to = -1;
        double top = best;
        for (int i = 0; !rc && i < S; i++) {
            if (n[i] <= TUNE_MIN_LAYERS) continue;
            for (int j = 0; !rc && j < S; j++) {
                if (j == i) continue;
                double t;
                n[i]--;
                n[j]++;
                rc = makespan_of(s, &lim, m, n, wgrad_share, fwd, bwd, &t, err);
                n[i]++;
                n[j]--;
                if (!rc && t < top * (1 - 1e-9)) {
                    top = t;
                    from = i;
                    to = j;
                }
            }
        }
        if (rc || from < 0) break;
        n[from]--;
        n[to]++;
        best = top;
    }
    free(fwd);
    hy_sim_limits_free(&lim);
    return rc;
}

/* ------------------------------------------------------------------------
 * The search
 * ------------------------------------------------------------------------ */

typedef struct {
    hy_tune_candidate *v;
    int n, cap;
} cand_list;

static void candidate_free(hy_tune_candidate *c) {
    free(c->split);
    memset(c, 0, sizeof *c);
}

void hy_tune_result_free(hy_tune_result *r) {
    if (!r) return;
    for (int i = 0; i < r->n_best; i++) candidate_free(&r->best[i]);
    free(r->best);
    candidate_free(&r->current);
    memset(r, 0, sizeof *r);
}

static int same_candidate(const hy_tune_candidate *a, const hy_tune_candidate *b) {
    return a->kind == b->kind && a->chunks == b->chunks && a->micro_batches == b->micro_batches &&
           a->split_backward == b->split_backward &&
           memcmp(a->split, b->split, (size_t)a->stages * sizeof(int)) == 0;
}

/* The measured transfer time in the units schedule.comm_cost takes: one
 * stage's forward, here the mean of split n's measured stage forwards
 * (fwd, bwd: scratch of S entries each), rounded to the four decimals a
 * tuned config is written with (cmd_tune.c), so that the order priced is
 * the order the tuned run builds. The mean is every split's of S stages
 * (their layers and the ends' extras, summed), so the splits of one
 * schedule share their orders. */
static double comm_units(const hy_cost_model *m, const int *split, int S, double *fwd,
                         double *bwd) {
    double sum = 0;
    hy_cost_model_stages(m, split, S, fwd, bwd);
    for (int stage = 0; stage < S; stage++) sum += fwd[stage];
    return sum > 0 && m->comm > 0 ? round(m->comm / (sum / S) * 1e4) / 1e4 : 0;
}

/* The model measured at micro-batch size B0, at size B: every cost grows
 * with the tokens (a transfer's with its bytes). */
static hy_cost_model scaled_model(const hy_cost_model *m, int B, int B0) {
    double k = (double)B / B0;
    hy_cost_model x = *m;
    x.layer_fwd *= k, x.layer_bwd *= k, x.first_fwd *= k, x.first_bwd *= k;
    x.last_fwd *= k, x.last_bwd *= k, x.comm *= k;
    return x;
}

/* Prices one candidate into *out (which owns a copy of the split): the
 * fastest way it fits the budget (fit.h: recompute, an activation cap,
 * or both), its orders built as the runtime will build them once its
 * comm_cost is written: for the measured transfer time (order.h). m0:
 * the cost model without recomputation, at the run's micro-batch size;
 * B: the candidate's; r: its recomputation, or HY_RECOMPUTE_COUNT for
 * any; search_caps: whether caps are options (else p's own cap, as the
 * config has it); cache, beat: as fit.h's. A schedule that cannot be built for these parameters
 * (interleaved with an M it does not divide) leaves out->stages 0 and is
 * no error. */
static int evaluate(const hy_run *run, const hy_cost_model *m0, const hy_tune_opts *o,
                    const hy_sched_params *p, int B, hy_recompute r, int search_caps,
                    hy_fit_cache *cache, double beat, const int *split, hy_tune_candidate *out,
                    hy_error *err) {
    memset(out, 0, sizeof *out);
    int S = hy_sched_chunks(p) * p->ranks, rc = HY_OK;
    /* fwd, then each mode's bwd and wgrad */
    double *fwd = malloc((1 + 2 * HY_RECOMPUTE_COUNT) * (size_t)S * sizeof(double));
    out->split = malloc((size_t)S * sizeof(int));
    hy_cost_model m = scaled_model(m0, B, run->micro_batch_size);
    hy_model_shape shape = hy_model_shape_of(&run->model);
    hy_model mdl;
    hy_error why;
    if (!fwd || !out->split) {
        free(fwd);
        candidate_free(out);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory tuning");
    }
    if (hy_model_build(&mdl, &shape, split, S, 1, &why) != HY_OK) {   /* no such model */
        free(fwd);
        candidate_free(out);
        return why.status == HY_ERR_INPUT ? HY_OK : hy_fail(err, why.status, "%s", why.msg);
    }
    hy_costs costs[HY_RECOMPUTE_COUNT];
    hy_fit_in in = { .p = p, .mailbox_limits = 1, .model = &mdl, .micro_batch_size = B,
                     .budget = o->budget_bytes, .search_caps = search_caps, .beat = beat,
                     .cache = cache };
    hy_backend_memory cpu;
    if (!o->mem) hy_backend_cpu_memory(&cpu);
    in.mem = o->mem ? o->mem : &cpu;
    double units = comm_units(&m, split, S, fwd, fwd + S);
    hy_costs oc = hy_costs_uniform_for(p->split_backward, units);
    in.order_costs = &oc;
    for (int k = 0; k < HY_RECOMPUTE_COUNT; k++) {
        if (r != HY_RECOMPUTE_COUNT && k != (int)r) continue;
        double *bwd = fwd + (1 + 2 * (size_t)k) * S, *wgrad = bwd + S;
        stage_costs(&m, split, S, p->split_backward, o->wgrad_share,
                    hy_recompute_share((hy_recompute)k), fwd, bwd, wgrad);
        costs[k] = (hy_costs){ .comm = m.comm, .fwd_stage = fwd, .bwd_stage = bwd,
                               .wgrad_stage = p->split_backward ? wgrad : NULL };
        in.costs[k] = &costs[k];
    }
    hy_fit_option best;
    rc = hy_fit_search(&in, &best, &why);
    hy_model_free(&mdl);
    free(fwd);
    if (rc == HY_ERR_INPUT) {   /* no such schedule: nothing to compare */
        candidate_free(out);
        return HY_OK;
    }
    if (rc) {
        *err = why;
        candidate_free(out);
        return rc;
    }
    out->kind = p->kind;
    out->split_backward = p->split_backward;
    out->waves = p->kind == HY_SCHED_HANAYO ? p->waves : 0;
    out->chunks = hy_sched_chunks(p);
    out->micro_batches = p->micro_batches;
    out->micro_batch_size = B;
    out->stages = S;
    memcpy(out->split, split, (size_t)S * sizeof(int));
    out->comm_cost = units;
    out->recompute = best.recompute;
    out->max_activations = best.cap;
    out->peak = best.peak;
    out->makespan_ms = best.makespan;
    out->bubble = best.bubble;
    out->step_ms = best.makespan + o->overhead_ms;
    out->tokens = hy_run_tokens_per_step(p->micro_batches, B, run->model.seq_len, 1);
    out->us_per_token = out->step_ms * 1e3 / out->tokens;
    out->act_bytes = best.act_bytes;
    out->mem_bytes = best.mem_bytes;
    out->mem_rank = best.rank;
    out->mem_largest = best.largest;
    out->mem_largest_bytes = best.largest_bytes;
    out->outrun = best.outrun;
    return HY_OK;
}

/* Adds a simulated candidate unless it is there already. */
static int keep(cand_list *l, hy_tune_candidate *c, hy_error *err) {
    for (int i = 0; i < l->n; i++)
        if (same_candidate(&l->v[i], c)) {
            candidate_free(c);
            return HY_OK;
        }
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        hy_tune_candidate *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) {
            candidate_free(c);
            return hy_fail(err, HY_ERR_RUNTIME, "out of memory tuning");
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *c;
    return HY_OK;
}

/* The split the runtime makes by default for p (model.h), when it can. */
static int default_split(const hy_run *run, const hy_sched_params *p, int *n) {
    hy_model_shape shape = hy_model_shape_of(&run->model);
    hy_model mdl;
    hy_error e;
    if (hy_model_build(&mdl, &shape, NULL, hy_sched_stages(p), 1, &e) != HY_OK) return 0;
    memcpy(n, mdl.n_layers, (size_t)mdl.stages * sizeof(int));
    hy_model_free(&mdl);
    return 1;
}

/* Best first: time per token, then fewer stages, then the kind's order. */
static int by_time_per_token(const void *a, const void *b) {
    const hy_tune_candidate *x = a, *y = b;
    if (x->us_per_token != y->us_per_token) return x->us_per_token < y->us_per_token ? -1 : 1;
    if (x->stages != y->stages) return x->stages - y->stages;
    if (x->kind != y->kind) return (int)x->kind - (int)y->kind;
    return x->micro_batches - y->micro_batches;
}

/* The micro-batch counts tried at the config's global batch of G
 * sequences (M x B, B = G / M whole): P, 2P, ..., HY_TUNE_MAX_M_FACTOR x
 * P where they divide G, and the config's own M0. Returns how many. */
static int batch_splits(int P, int G, int M0, int *ms) {
    int n = 0, own = 0;
    for (int f = 1; f <= HY_TUNE_MAX_M_FACTOR; f++)
        if (G % (f * P) == 0) {
            ms[n++] = f * P;
            own |= f * P == M0;
        }
    if (!own) ms[n++] = M0;
    return n;
}

/* Every candidate of one kind and W or v: its splits found at M_ref,
 * then tried at every M (with the B that keeps the global batch). m0: the
 * cost model without recomputation, at the run's B. */
static int search_one(const hy_run *run, const hy_cost_model *m0, const hy_tune_opts *o,
                      hy_sched_params q, int m_ref, cand_list *all, hy_error *err) {
    int P = q.ranks, L = run->model.layers;
    int S = hy_sched_chunks(&q) * P;
    if (S * TUNE_MIN_LAYERS > L) return HY_OK;   /* not a layer for every stage */
    /* Up to four splits: the starts (the default one, when the runtime
     * can make it, and the greedy one), then each start improved. */
    int *splits = malloc(4 * (size_t)S * sizeof(int)), n_splits = 0, rc = HY_OK;
    if (!splits) return hy_fail(err, HY_ERR_RUNTIME, "out of memory tuning");
    int has_default = default_split(run, &q, splits);
    if (has_default) n_splits++;
    int *greedy = splits + (size_t)n_splits * S;
    if (S == 1) greedy[0] = L;
    else greedy_split(m0, L, S, greedy);
    n_splits++;
    q.micro_batches = m_ref;
    hy_schedule s;
    memset(&s, 0, sizeof s);
    hy_error why;
    int built = hy_schedule_build(&s, &q, &why);
    if (built && built != HY_ERR_INPUT) *err = why, rc = built;
    for (int i = 0, starts = n_splits; !rc && !built && i < starts; i++) {
        int *n = splits + (size_t)n_splits * S;
        memcpy(n, splits + (size_t)i * S, (size_t)S * sizeof(int));
        rc = improve_split(&s, m0, o->wgrad_share, n, err);
        if (!rc) n_splits++;
    }
    hy_schedule_free(&s);
    int G = run->sched_params.micro_batches * run->micro_batch_size;
    int ms[HY_TUNE_MAX_M_FACTOR + 1];
    int n_ms = batch_splits(P, G, run->sched_params.micro_batches, ms);
    /* The most micro-batches first: the smallest, so the likeliest to fit
     * without recompute or a cap and the shortest bubble, whose time then
     * spares the capped orders of the larger ones that could not beat it
     * (fit.h, beat). Every split of the schedule shares its orders (the
     * order does not depend on the split: comm_units). */
    for (int i = 1; i < n_ms; i++)
        for (int j = i; j > 0 && ms[j] > ms[j - 1]; j--) {
            int t = ms[j];
            ms[j] = ms[j - 1];
            ms[j - 1] = t;
        }
    hy_fit_cache cache = { 0 };
    double beat = 0;   /* the schedule's best makespan that fits so far */
    for (int k = 0; !rc && k < n_ms; k++) {
        q.micro_batches = ms[k];
        double dflt = INFINITY;   /* the default split's time per token at this M */
        for (int i = 0; !rc && i < n_splits; i++) {
            hy_tune_candidate cand;
            rc = evaluate(run, m0, o, &q, G / ms[k], HY_RECOMPUTE_COUNT, 1, &cache, beat,
                          splits + (size_t)i * S, &cand, err);
            if (rc || cand.stages == 0) continue;
            /* An outrun default: the others must beat the best so far. */
            if (has_default && i == 0)
                dflt = cand.outrun ? (beat + o->overhead_ms) * 1e3 / cand.tokens
                                   : cand.us_per_token;
            if (i > 0 && cand.us_per_token > (1 - TUNE_SPLIT_MARGIN) * dflt) {
                candidate_free(&cand);   /* not clearly better than the default */
                continue;
            }
            if (cand.mem_bytes <= o->budget_bytes && (beat == 0 || cand.makespan_ms < beat))
                beat = cand.makespan_ms;
            rc = keep(all, &cand, err);
        }
        hy_fit_cache_free(&cache);   /* the next M's orders are others */
    }
    free(splits);
    return rc;
}

int hy_tune_search(const hy_run *run, const hy_cost_model *m, const hy_tune_opts *o,
                   hy_tune_result *r, hy_error *err) {
    memset(r, 0, sizeof *r);
    hy_sched_params base = run->sched_params;
    int P = base.ranks;
    /* The M the splits are tuned at: the config's, as a multiple of P in
     * the searched range (interleaved needs the multiple). */
    int m_ref = (base.micro_batches + P - 1) / P * P;
    if (m_ref > HY_TUNE_MAX_M_FACTOR * P) m_ref = HY_TUNE_MAX_M_FACTOR * P;
    /* The model as if the measured run recomputed nothing: its backward
     * passes (B, and W when split) each held the recomputation. */
    hy_cost_model m0 = *m;
    m0.layer_bwd = fmax(0, m->layer_bwd - (run->sched.split ? 2 : 1) *
                                              hy_cost_model_recompute(m, 1, hy_recompute_share(
                                                                                 o->priced_recompute)));
    cand_list all = {0};
    int rc = HY_OK;
    for (int k = 0; !rc && k < HY_SCHED_COUNT; k++) {
        if (o->kinds && !(o->kinds & (1u << k))) continue;
        /* Interleaved from v = 2: with one chunk it is 1F1B with a deeper
         * warm-up, and 1f1b stands for it. */
        int w0 = k == HY_SCHED_INTERLEAVED ? 2 : 1;
        int ws = k == HY_SCHED_HANAYO || k == HY_SCHED_INTERLEAVED ? TUNE_MAX_WAVES : 1;
        for (int w = w0; !rc && w <= ws; w++)
            for (int split = 0; !rc && split <= (o->wgrad_share >= 0); split++) {
                hy_sched_params q = base;
                q.kind = (hy_sched_kind)k;
                q.waves = w;
                q.chunks = w;
                q.split_backward = split;
                q.max_activations = 0;   /* searched: fit.h */
                rc = search_one(run, &m0, o, q, m_ref, &all, err);
            }
    }
    /* The config as it is, for comparison. */
    if (!rc) rc = evaluate(run, &m0, o, &base, run->micro_batch_size, run->train.recompute, 0,
                           NULL, 0, run->model.n_layers, &r->current, err);
    r->searched = all.n;
    /* What the candidate that needs the least memory needs: what the
     * error says when none fits. */
    hy_tune_candidate least = { .mem_bytes = INFINITY };
    for (int i = 0; !rc && i < all.n; i++) {
        hy_tune_candidate *x = &all.v[i];
        if (x->mem_bytes > o->budget_bytes && x->outrun) {
            r->outrun++;
            candidate_free(x);
        } else if (x->mem_bytes > o->budget_bytes) {
            if (x->mem_bytes < least.mem_bytes) {
                least = *x;
                least.split = NULL;   /* freed below */
            }
            r->over_budget++;
            candidate_free(x);
        } else {
            all.v[r->n_best++] = *x;
        }
    }
    if (rc) {
        for (int i = 0; i < all.n; i++) candidate_free(&all.v[i]);
        free(all.v);
        hy_tune_result_free(r);
        return rc;
    }
    r->best = all.v;
    qsort(r->best, (size_t)r->n_best, sizeof *r->best, by_time_per_token);
    /* One row per schedule (kind with its W or v): its best M and split.
     * Its other Ms are the same schedule with a larger or smaller batch,
     * which tells less than the next schedule does. */
    int kept = 0;
    for (int i = 0; i < r->n_best; i++) {
        int seen = 0;
        for (int j = 0; j < kept && !seen; j++)
            seen = r->best[j].kind == r->best[i].kind && r->best[j].chunks == r->best[i].chunks &&
                   r->best[j].split_backward == r->best[i].split_backward;
        if (seen) candidate_free(&r->best[i]);
        else r->best[kept++] = r->best[i];
    }
    r->n_best = kept;
    if (r->n_best == 0) {
        /* Recompute and caps shrink the stash alone: past them, the term
         * that is left says what would help. */
        int state = least.mem_largest <= HY_MEM_OPTIMIZER;
        rc = hy_fail(err, HY_ERR_INPUT, "tune: none of the %d candidates fits the memory budget "
                     "of %.2f GiB per rank, even with full recompute and the smallest activation "
                     "cap; the smallest (%s%s, M = %d, B = %d) needs %.2f GiB on rank %d, the most "
                     "of it %s (%.2f GiB); %s", r->searched, o->budget_bytes / 1073741824.0,
                     hy_sched_name(least.kind), least.split_backward ? " +split" : "",
                     least.micro_batches, least.micro_batch_size, least.mem_bytes / 1073741824.0,
                     least.mem_rank, hy_mem_term_name(least.mem_largest),
                     least.mem_largest_bytes / 1073741824.0,
                     state ? "the model's state alone: give more ranks, a larger --memory-gb or "
                             "a smaller model"
                           : "give a larger --memory-gb, more ranks or a smaller global batch");
        hy_tune_result_free(r);
    }
    return rc;
}
