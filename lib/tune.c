/*
 * tune.c — see tune.h.
 *
 * Sections: the memory estimate; splits (the greedy balance and the
 * one-layer moves); the search; writing the tuned config; the command.
 */
#include "tune.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atomicfile.h"
#include "infile.h"
#include "backend.h"
#include "mailbox.h"
#include "model.h"
#include "order.h"
#include "runtime.h"
#include "sim.h"

#define TUNE_MAX_WAVES 4        /* W (hanayo) and v (interleaved) searched: 1..4 */
#define TUNE_MAX_M_FACTOR 8     /* M = P .. 8P */
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

/* The most micro-batches whose F has run and whose B (split: W) has not,
 * per stage: how many stash slots the runtime gives it. */
static void peak_in_flight(const hy_schedule *s, int *peak) {
    int *live = calloc((size_t)s->stages, sizeof *live);
    memset(peak, 0, (size_t)s->stages * sizeof *peak);
    if (!live) {   /* an estimate only: then every micro-batch, the most there can be */
        for (int st = 0; st < s->stages; st++) peak[st] = s->micro_batches;
        return;
    }
    for (int r = 0; r < s->ranks; r++)
        for (int i = 0; i < s->n_actions[r]; i++) {
            const hy_action *a = &s->actions[r][i];
            live[a->stage] += a->op == HY_FWD ? 1 : a->op == (s->split ? HY_WGRAD : HY_BWD) ? -1 : 0;
            if (live[a->stage] > peak[a->stage]) peak[a->stage] = live[a->stage];
        }
    free(live);
}

void hy_tune_memory(const hy_config *c, const hy_schedule *s, const int *split, int act_size,
                    double *act, double *mem) {
    double B = c->schedule.micro_batch_size, T = c->model.seq_len, C = c->model.d_model;
    double NH = c->model.heads, V = c->model.vocab, N = B * T, A = act_size;
    /* The runtime's stash of one layer for one micro-batch: four LayerNorm
     * statistics of N floats, 16 arrays of N x C (ln1, qkv x3, attention
     * output, residual, ln2, fc x4, gelu x4, residual) and the attention
     * weights, B x heads x T x T. */
    double layer = 4 * N * 4 + 16 * N * C * A + B * NH * T * T * A;
    /* Split backward: what B keeps for W (transformer.c), 11 arrays of
     * N x C per layer, and d(stage input) on stage 0. */
    if (s->split) layer += 11 * N * C * A;
    double per_layer_params = 12 * C * C + 13 * C;
    /* Parameters, gradients and AdamW's two moments in fp32, and a compute
     * copy when activations are narrower. */
    double per_param = 16 + (act_size != 4 ? act_size : 0);
    int *peak = malloc((size_t)s->stages * sizeof *peak);
    double *ra = calloc(2 * (size_t)s->ranks, sizeof *ra);
    *act = *mem = 0;
    if (!peak || !ra) {
        free(peak);
        free(ra);
        return;
    }
    double *rm = ra + s->ranks;
    peak_in_flight(s, peak);
    int S = s->stages;
    for (int st = 0; st < S; st++) {
        int r = s->placement[st];
        double stash = split[st] * layer, params = split[st] * per_layer_params;
        if (st == 0) {
            stash += (s->split ? 2 : 1) * N * C * A;
            params += V * C + T * C;
        }
        if (st == S - 1) {
            stash += 2 * N * C * A + 2 * N * 4;
            params += 2 * C;
            rm[r] += N * V * A;   /* the head's logits */
            if (s->placement[0] != r) params += V * C;   /* the tied embedding's replica */
        }
        ra[r] += peak[st] * stash;
        rm[r] += params * per_param;
    }
    for (int r = 0; r < s->ranks; r++) {
        if (ra[r] > *act) *act = ra[r];
        if (ra[r] + rm[r] > *mem) *mem = ra[r] + rm[r];
    }
    free(peak);
    free(ra);
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
static double stage_cost(const hy_cost_model *m, int st, int S, int n) {
    double f, b;
    hy_cost_model_stage(m, st, S, n, &f, &b);
    return f + b;
}

/* Greedy balance by the measured costs: every stage its minimum, then each
 * further layer to the stage where the result is cheapest (the lowest such
 * stage on a tie). With layers alike this minimizes the dearest stage. */
static void greedy_split(const hy_cost_model *m, int L, int S, int *n) {
    int left = L;
    for (int st = 0; st < S; st++) {
        n[st] = TUNE_MIN_LAYERS;
        left -= n[st];
    }
    for (; left > 0; left--) {
        int best = 0;
        double best_c = INFINITY;
        for (int st = 0; st < S; st++) {
            double c = stage_cost(m, st, S, n[st] + 1);
            if (c < best_c) {
                best_c = c;
                best = st;
            }
        }
        n[best]++;
    }
}

/* Schedule s with split n, simulated as the runtime runs it: with its
 * mailbox slots (lim: mailbox.h, hy_mailbox_sim_limits), since a split
 * that lets one rank run ahead makes it wait for slots there. */
static int simulate_split(const hy_schedule *s, const hy_sim_limits *lim, const hy_cost_model *m,
                          const int *n, double wgrad_share, double *fwd, double *bwd,
                          hy_sim_result *res, hy_error *err) {
    hy_cost_model_stages(m, n, s->stages, fwd, bwd);   /* bwd: a whole backward */
    double *wgrad = bwd + s->stages;
    for (int st = 0; s->split && st < s->stages; st++) {
        wgrad[st] = bwd[st] * wgrad_share;
        bwd[st] -= wgrad[st];
    }
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
 * (fwd, bwd: scratch of S entries each). */
static double comm_units(const hy_cost_model *m, const int *split, int S, double *fwd,
                         double *bwd) {
    double sum = 0;
    hy_cost_model_stages(m, split, S, fwd, bwd);
    for (int st = 0; st < S; st++) sum += fwd[st];
    return sum > 0 && m->comm > 0 ? m->comm / (sum / S) : 0;
}

/* Simulates one candidate into *out (which owns a copy of the split), in
 * the order the runtime will run once its comm_cost is written: the one
 * chosen for the measured transfer time (order.h). */
static int evaluate(const hy_config *c, const hy_cost_model *m, const hy_tune_opts *o,
                    const hy_sched_params *p, const int *split, hy_tune_candidate *out,
                    hy_error *err) {
    memset(out, 0, sizeof *out);
    int S = hy_sched_chunks(p) * p->ranks, rc = HY_OK;
    double *fwd = malloc(3 * (size_t)S * sizeof(double)), units = 0;
    out->split = malloc((size_t)S * sizeof(int));
    hy_schedule s;
    memset(&s, 0, sizeof s);
    hy_sim_result res;
    hy_sim_limits lim;
    memset(&lim, 0, sizeof lim);
    if (!fwd || !out->split) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory tuning");
    if (!rc) {
        units = comm_units(m, split, S, fwd, fwd + S);
        hy_costs oc = hy_order_costs(p, units);
        rc = hy_schedule_for_costs(&s, p, &oc, err);
    }
    if (!rc) rc = hy_mailbox_sim_limits(&s, &lim, err);
    if (!rc) rc = simulate_split(&s, &lim, m, split, o->wgrad_share, fwd, fwd + S, &res, err);
    if (!rc) {
        out->kind = p->kind;
        out->split_backward = s.split;
        out->waves = p->kind == HY_SCHED_HANAYO ? p->waves : 0;
        out->chunks = s.chunks;
        out->micro_batches = p->micro_batches;
        out->stages = S;
        memcpy(out->split, split, (size_t)S * sizeof(int));
        out->comm_cost = units;
        out->makespan_ms = res.makespan;
        out->bubble = res.bubble;
        out->step_ms = res.makespan + o->overhead_ms;
        out->tokens = (double)p->micro_batches * c->schedule.micro_batch_size * c->model.seq_len;
        out->us_per_token = out->step_ms * 1e3 / out->tokens;
        hy_tune_memory(c, &s, split, o->act_size, &out->act_bytes, &out->mem_bytes);
        hy_sim_result_free(&res);
    }
    free(fwd);
    hy_sim_limits_free(&lim);
    hy_schedule_free(&s);
    if (rc) candidate_free(out);
    return rc;
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
static int default_split(const hy_config *c, const hy_sched_params *p, int *n) {
    hy_config k = *c;   /* a shallow copy, only read: never freed */
    k.schedule.kind = p->kind;
    k.schedule.waves = p->waves;
    k.schedule.chunks = p->chunks;
    k.schedule.split = NULL;
    k.schedule.n_split = 0;
    hy_model mdl;
    hy_error e;
    if (hy_model_build(&mdl, &k, 1, &e) != HY_OK) return 0;
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

/* Every candidate of one kind and W or v: its splits found at M_ref,
 * then tried at every M. */
static int search_one(const hy_config *c, const hy_cost_model *m, const hy_tune_opts *o,
                      hy_sched_params q, int m_ref, cand_list *all, hy_error *err) {
    int P = q.ranks, L = c->model.layers;
    int S = hy_sched_chunks(&q) * P;
    if (S * TUNE_MIN_LAYERS > L) return HY_OK;   /* not a layer for every stage */
    /* Up to four splits: the starts (the default one, when the runtime
     * can make it, and the greedy one), then each start improved. */
    int *splits = malloc(4 * (size_t)S * sizeof(int)), n_splits = 0, rc = HY_OK;
    if (!splits) return hy_fail(err, HY_ERR_RUNTIME, "out of memory tuning");
    int has_default = default_split(c, &q, splits);
    if (has_default) n_splits++;
    int *greedy = splits + (size_t)n_splits * S;
    if (S == 1) greedy[0] = L;
    else greedy_split(m, L, S, greedy);
    n_splits++;
    q.micro_batches = m_ref;
    hy_schedule s;
    rc = hy_schedule_build(&s, &q, err);
    for (int i = 0, starts = n_splits; !rc && i < starts; i++) {
        int *n = splits + (size_t)n_splits * S;
        memcpy(n, splits + (size_t)i * S, (size_t)S * sizeof(int));
        rc = improve_split(&s, m, o->wgrad_share, n, err);
        if (!rc) n_splits++;
    }
    hy_schedule_free(&s);
    for (int f = 1; !rc && f <= TUNE_MAX_M_FACTOR; f++) {
        q.micro_batches = f * P;
        double dflt = INFINITY;   /* the default split's time per token at this M */
        for (int i = 0; !rc && i < n_splits; i++) {
            hy_tune_candidate cand;
            rc = evaluate(c, m, o, &q, splits + (size_t)i * S, &cand, err);
            if (rc) break;
            if (has_default && i == 0) dflt = cand.us_per_token;
            if (i > 0 && cand.us_per_token > (1 - TUNE_SPLIT_MARGIN) * dflt) {
                candidate_free(&cand);   /* not clearly better than the default */
                continue;
            }
            rc = keep(all, &cand, err);
        }
    }
    free(splits);
    return rc;
}

int hy_tune_search(const hy_config *c, const hy_cost_model *m, const hy_tune_opts *o,
                   hy_tune_result *r, hy_error *err) {
    memset(r, 0, sizeof *r);
    hy_sched_params base;
    hy_sched_params_from_config(c, &base);
    int P = base.ranks;
    /* The M the splits are tuned at: the config's, as a multiple of P in
     * the searched range (interleaved needs the multiple). */
    int m_ref = (base.micro_batches + P - 1) / P * P;
    if (m_ref > TUNE_MAX_M_FACTOR * P) m_ref = TUNE_MAX_M_FACTOR * P;
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
                rc = search_one(c, m, o, q, m_ref, &all, err);
            }
    }
    /* The config as it is, for comparison. */
    if (!rc) {
        hy_model mdl;
        rc = hy_model_build(&mdl, c, 1, err);
        if (!rc) {
            rc = evaluate(c, m, o, &base, mdl.n_layers, &r->current, err);
            hy_model_free(&mdl);
        }
    }
    r->searched = all.n;
    double least = INFINITY;
    for (int i = 0; !rc && i < all.n; i++) {
        hy_tune_candidate *x = &all.v[i];
        if (x->mem_bytes > o->budget_bytes) {
            if (x->mem_bytes < least) least = x->mem_bytes;
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
        rc = hy_fail(err, HY_ERR_INPUT, "tune: none of the %d candidates fits the memory budget "
                     "of %.2f GiB per rank (the smallest needs %.2f GiB); give a larger "
                     "--memory-gb or a smaller model or micro_batch_size", r->searched,
                     o->budget_bytes / 1073741824.0, least / 1073741824.0);
        hy_tune_result_free(r);
    }
    return rc;
}

/* ------------------------------------------------------------------------
 * Writing the tuned config
 * ------------------------------------------------------------------------ */

int hy_tune_apply(const char *config, const char *const *sets, int n_sets,
                  const hy_tune_candidate *cand, const char *out_path, hy_error *err) {
    json_error_t je;
    json_t *root = hy_infile_json(config, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return hy_fail(err, HY_ERR_INPUT, "%s: cannot read it back to write the tuned config: %s",
                       config, je.text);
    int bad = !json_is_object(root);
    json_t *sc = bad ? NULL : json_object_get(root, "schedule");
    if (!bad && !sc) {
        sc = json_object();
        bad |= json_object_set_new(root, "schedule", sc);
    }
    bad |= !json_is_object(sc);
    if (bad) {
        json_decref(root);
        return hy_fail(err, HY_ERR_INPUT, "%s: the top level and \"schedule\" must be objects "
                       "to write a tuned config", config);
    }
    json_t *split = json_array();
    for (int i = 0; split && i < cand->stages; i++)
        bad |= json_array_append_new(split, json_integer(cand->split[i]));
    bad |= json_object_set_new(sc, "kind", json_string(hy_sched_name(cand->kind)));
    if (cand->kind == HY_SCHED_HANAYO) bad |= json_object_set_new(sc, "waves", json_integer(cand->waves));
    if (cand->kind == HY_SCHED_INTERLEAVED)
        bad |= json_object_set_new(sc, "chunks", json_integer(cand->chunks));
    bad |= json_object_set_new(sc, "micro_batches", json_integer(cand->micro_batches));
    bad |= json_object_set_new(sc, "split", split);
    bad |= json_object_set_new(sc, "split_backward", json_boolean(cand->split_backward));
    /* Rounded, so the file reads well; the order barely moves with the
     * fourth digit. */
    bad |= json_object_set_new(sc, "comm_cost", json_real(round(cand->comm_cost * 1e4) / 1e4));
    char *text = bad ? NULL : json_dumps(root, JSON_PRESERVE_ORDER | JSON_INDENT(2));
    json_decref(root);
    if (!text) return hy_fail(err, HY_ERR_RUNTIME, "out of memory writing the tuned config");
    hy_atomic_file af;
    int rc = hy_atomic_open(&af, out_path, HY_ERR_INPUT, err);
    if (!rc) rc = hy_atomic_write(&af, text, strlen(text), err);
    if (!rc) rc = hy_atomic_write(&af, "\n", 1, err);
    free(text);
    /* The written file must load as it was measured before it takes the
     * name (the temporary holds it all: no stream, nothing buffered). */
    if (!rc) {
        hy_config k;
        hy_config_init(&k);
        hy_error e;
        if (hy_config_load(&k, af.tmp, sets, n_sets, &e) != HY_OK) {
            hy_atomic_abort(&af);
            rc = hy_fail(err, HY_ERR_RUNTIME, "the tuned config does not load (a bug): %s", e.msg);
        }
        hy_config_free(&k);
    }
    if (!rc) rc = hy_atomic_commit(&af, err);
    return rc;
}

/* ------------------------------------------------------------------------
 * The command
 * ------------------------------------------------------------------------ */

void hy_tune_request_init(hy_tune_request *rq) {
    memset(rq, 0, sizeof *rq);
    hy_profile_opts_init(&rq->profile);   /* 5 steps: fewer let one hiccup of the
                                             machine decide the split */
    rq->top = 5;
}

/* Memory per rank: --memory-gb, else the GPU's (shared by the ranks on
 * it), else the host's over the ranks. */
static void budget(const hy_tune_request *rq, const hy_config *c, const hy_backend_choice *chosen,
                   double *bytes, char *why, size_t n) {
    int P = c->schedule.ranks;
    if (rq->memory_gb > 0) {
        *bytes = rq->memory_gb * 1073741824.0;
        snprintf(why, n, "--memory-gb");
        return;
    }
    *bytes = chosen->rank_bytes;   /* backend.h: the GPU's over the ranks on it, or the host's */
    if (chosen->cuda)
        snprintf(why, n, "the GPU's memory over the ranks on it; --memory-gb sets it");
    else
        snprintf(why, n, "the host's memory over %d rank%s; --memory-gb sets it", P, P == 1 ? "" : "s");
}

/* W's share of a whole backward in profile p, as measured. */
static double profile_wgrad_share(const hy_profile *p) {
    double w = 0, whole = 0;
    for (int s = 0; s < p->sched.stages; s++) {
        w += p->stage[s].wgrad;
        whole += p->stage[s].bwd + p->stage[s].wgrad;
    }
    return whole > 0 ? w / whole : 0;
}

/* What W costs of a backward: from the profile when the config splits it,
 * else from a second, equally long profile of the same run with split
 * backward, so that split candidates are priced from a measurement. */
static int wgrad_share(const hy_config *c, const hy_tune_request *rq, const hy_profile *p,
                       double *share, hy_error *err) {
    if (p->sched.split) {
        *share = profile_wgrad_share(p);
        return HY_OK;
    }
    hy_config k = *c;   /* a shallow copy, only read: never freed */
    k.schedule.split_backward = 1;
    hy_profile q;
    int rc = hy_profile_run(&q, &k, &rq->profile, err);
    if (!rc) *share = profile_wgrad_share(&q);
    hy_profile_free(&q);
    return rc;
}

static void write_candidate(FILE *f, const char *tag, const hy_tune_candidate *x) {
    char name[40], split[160];
    if (x->kind == HY_SCHED_HANAYO) snprintf(name, sizeof name, "hanayo W=%d", x->waves);
    else if (x->kind == HY_SCHED_INTERLEAVED) snprintf(name, sizeof name, "interleaved v=%d", x->chunks);
    else snprintf(name, sizeof name, "%s", hy_sched_name(x->kind));
    if (x->split_backward) {
        size_t n = strlen(name);
        snprintf(name + n, sizeof name - n, " +split");
    }
    size_t used = 0;
    split[0] = '\0';
    for (int i = 0; i < x->stages && used + 8 < sizeof split; i++)
        used += (size_t)snprintf(split + used, sizeof split - used, "%s%d", i ? " " : "", x->split[i]);
    if (used + 8 >= sizeof split) snprintf(split + used, sizeof split - used, " ...");
    fprintf(f, "  %4s  %-22s %4d  %-24s %9.2f %9.0f %8.4f %8.2f %8.2f\n", tag, name,
            x->micro_batches, split, x->step_ms, x->tokens / (x->step_ms / 1e3), x->bubble,
            x->act_bytes / 1048576.0, x->mem_bytes / 1048576.0);
}

int hy_tune_cmd(const hy_tune_request *rq, FILE *out, hy_error *err) {
    hy_config c;
    hy_config_init(&c);
    int rc = hy_config_load(&c, rq->config, rq->sets, rq->n_sets, err);
    hy_backend_request brq;
    hy_backend_choice chosen = { 0 };
    char why[128];
    double bytes = 0;
    hy_backend_request_from_config(&c, &brq);
    if (!rc) rc = hy_backend_describe(&brq, &chosen, err);
    if (!rc) budget(rq, &c, &chosen, &bytes, why, sizeof why);
    /* The output's directory is checked before the measurement: opening
     * (and dropping) the temporary file proves it can be written. */
    if (!rc && rq->apply) {
        hy_atomic_file af;
        rc = hy_atomic_open(&af, rq->apply, HY_ERR_INPUT, err);
        if (!rc) hy_atomic_abort(&af);
    }
    hy_profile p;
    memset(&p, 0, sizeof p);
    hy_tune_result res;
    memset(&res, 0, sizeof res);
    if (!rc) rc = hy_profile_run(&p, &c, &rq->profile, err);
    hy_tune_opts o = { rq->kinds, bytes, 0, chosen.cuda ? 2 : 4, -1 };
    if (!rc) rc = wgrad_share(&c, rq, &p, &o.wgrad_share, err);
    if (!rc) {
        o.overhead_ms = fmax(0, p.wall_ms - p.makespan);
        rc = hy_tune_search(&c, &p.model, &o, &res, err);
    }
    if (!rc) {
        const hy_schedule *s = &p.sched;
        fprintf(out, "tune: %s, measured %s P = %d, M = %d", rq->config, hy_sched_name(s->kind),
                s->ranks, s->micro_batches);
        if (s->kind == HY_SCHED_HANAYO) fprintf(out, ", W = %d", s->waves);
        if (s->kind == HY_SCHED_INTERLEAVED) fprintf(out, ", v = %d", s->chunks);
        fprintf(out, ", split");
        for (int i = 0; i < s->stages; i++) fprintf(out, " %d", p.n_layers[i]);
        fprintf(out, ": %.2f ms per step, %.0f tokens/s (%d steps after %d warm-up; %s)\n",
                p.wall_ms, p.tokens / (p.wall_ms / 1e3), p.steps, HY_PROFILE_WARMUP, chosen.why);
        const hy_cost_model *m = &p.model;
        fprintf(out, "cost model, ms: a layer F %.3f B %.3f; the first stage's extra F %.3f B %.3f; "
                "the last stage's extra F %.3f B %.3f; a transfer %.3f\n", m->layer_fwd,
                m->layer_bwd, m->first_fwd, m->first_bwd, m->last_fwd, m->last_bwd, m->comm);
        fprintf(out, "the rest of the step (exchange, clip, optimizer, batch loading): %.2f ms, "
                "taken as fixed\n", o.overhead_ms);
        fprintf(out, "split backward: W measured at %.0f%% of a backward%s\n",
                100 * o.wgrad_share, s->split ? "" : " (a second profile, with split backward)");
        fprintf(out, "memory budget: %.2f GiB per rank (%s)\n", bytes / 1073741824.0, why);
        fprintf(out, "searched %d candidates (schedule, W 1..4 or v 2..4, whole or split backward, "
                "M = %d..%d, layer splits); "
                "%d over the memory budget\n", res.searched, s->ranks, TUNE_MAX_M_FACTOR * s->ranks,
                res.over_budget);
        fprintf(out, "ranked by predicted time per token (M changes the tokens per step); each "
                "schedule by its best M and split\n\n");
        fprintf(out, "  %4s  %-22s %4s  %-24s %9s %9s %8s %8s %8s\n", "#", "schedule", "M",
                "split", "step ms", "tokens/s", "bubble", "act MiB", "mem MiB");
        int top = rq->top < res.n_best ? rq->top : res.n_best;
        for (int i = 0; i < top; i++) {
            char tag[16];
            snprintf(tag, sizeof tag, "%d", i + 1);
            write_candidate(out, tag, &res.best[i]);
        }
        write_candidate(out, "now", &res.current);
        fprintf(out, "  (now: the config as it is, predicted the same way; measured %.2f ms)\n",
                p.wall_ms);
        if (rq->apply) {
            rc = hy_tune_apply(rq->config, rq->sets, rq->n_sets, &res.best[0], rq->apply, err);
            if (!rc) fprintf(out, "\nwrote %s: candidate 1\n", rq->apply);
        }
    }
    hy_tune_result_free(&res);
    hy_profile_free(&p);
    hy_config_free(&c);
    return rc;
}
