/*
 * profile.c — see profile.h.
 *
 * Sections: measuring (running the steps, turning each step's stamps into
 * action times, accumulating); the results (per stage, per rank, the
 * prediction, with and without the mailbox slots); the outputs
 * (trace.json, summary.json, the two SVGs' inputs, writing them into a
 * directory).
 */
#include "profile.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"
#include "dp.h"
#include "mailbox.h"
#include "memplan.h"
#include "model.h"
#include "order.h"
#include "runtime.h"
#include "sim.h"
#include "svg.h"
#include "train.h"

/* ------------------------------------------------------------------------
 * Measuring
 * ------------------------------------------------------------------------ */

void hy_profile_opts_init(hy_profile_opts *o) {
    o->steps = 5;
    o->slow_stage = -1;
    o->slow_seconds = 0;
    o->dp = NULL;
}

/* One measured step's times. */
typedef struct {
    hy_action_time **t;   /* [ranks][n_actions] */
    double *iter_start;   /* [ranks] */
    double *tail_at;      /* [ranks * 3] */
    double *sum_at;       /* [ranks * 2 (stages + 1)]: hy_profile's sum_at */
} step_times;

static void step_free(step_times *times, int ranks) {
    if (times->t)
        for (int r = 0; r < ranks; r++) free(times->t[r]);
    free(times->t);
    free(times->iter_start);
    free(times->tail_at);
    free(times->sum_at);
    memset(times, 0, sizeof *times);
}

static int step_alloc(step_times *times, const hy_schedule *s) {
    memset(times, 0, sizeof *times);
    times->t = calloc((size_t)s->ranks, sizeof *times->t);
    times->iter_start = calloc((size_t)s->ranks, sizeof(double));
    times->tail_at = calloc(3 * (size_t)s->ranks, sizeof(double));
    times->sum_at = calloc(2 * ((size_t)s->stages + 1) * (size_t)s->ranks, sizeof(double));
    if (!times->t || !times->iter_start || !times->tail_at || !times->sum_at) return -1;
    for (int r = 0; r < s->ranks; r++) {
        times->t[r] = calloc((size_t)s->n_actions[r] + 1, sizeof **times->t);
        if (!times->t[r]) return -1;
    }
    return 0;
}

void hy_profile_free(hy_profile *p) {
    if (!p) return;
    step_times last = { p->last, p->iter_start, p->tail_at, p->sum_at };
    step_free(&last, p->sched.ranks);
    free(p->n_sums);
    free(p->sum_stage);
    free(p->copy);
    free(p->stage);
    free(p->rank);
    free(p->n_layers);
    free(p->mem_planned);
    free(p->mem_allocated);
    hy_schedule_free(&p->sched);
    memset(p, 0, sizeof *p);
}

/* Where each action sits: at[hy_action_key] = its index in the list of
 * rank placement[s]. */
static int *action_index(const hy_schedule *s) {
    int *at = malloc(hy_action_keys(s) * sizeof *at);
    if (!at) return NULL;
    for (int r = 0; r < s->ranks; r++)
        for (int i = 0; i < s->n_actions[r]; i++) at[hy_action_key(s, &s->actions[r][i])] = i;
    return at;
}

/* The action whose output action a takes as input, when it is on another
 * rank: sets *pr, *pi and returns 1; 0 when the input is local or none. */
static int remote_producer(const hy_schedule *s, const int *at, const hy_action *a, int rank,
                           int *pr, int *pi) {
    if (a->op == HY_WGRAD) return 0;   /* its B ran on its own rank */
    hy_action in = { a->op, a->mb, a->op == HY_FWD ? a->stage - 1 : a->stage + 1 };
    if (in.stage < 0 || in.stage >= s->stages || s->placement[in.stage] == rank) return 0;
    *pr = s->placement[in.stage];
    *pi = at[hy_action_key(s, &in)];
    return 1;
}

/* When a remote input was there: the producer's "sent" or the consumer's
 * "received", whichever is first (the flag is set between the two), and
 * never before the producer computed it. */
static double arrival_of(const hy_action_time *q, const hy_action_time *t) {
    return fmax(fmin(q->sent, t->received), q->computed);
}

/* The stamps of one step (ns, per rank) → times in ms from its origin, the
 * earliest iteration start over the ranks. */
static int take_step(const hy_profile *p, uint64_t *const *raw, const int *at, step_times *step,
                     hy_error *err) {
    const hy_schedule *s = &p->sched;
    int P = s->ranks;
    uint64_t origin = raw[0][0];
    for (int r = 0; r < P; r++) {
        size_t n = hy_stamp_count(s->n_actions[r], p->n_sums[r]);
        for (size_t k = 0; k < n; k++)
            if (raw[r][k] == 0)
                return hy_fail(err, HY_ERR_RUNTIME, "profile: rank %d recorded no stamp %zu "
                               "in its iteration (the backend's timestamp did not run)", r, k);
        if (raw[r][0] < origin) origin = raw[r][0];
    }
#define MS(x) ((double)((int64_t)((x) - origin)) / 1e6)
    /* Each action's own stamps, kept in order (one clock, but the stamp
     * ending one op and the one starting the next may tie). */
    for (int r = 0; r < P; r++) {
        step->iter_start[r] = MS(raw[r][0]);
        for (int i = 0; i < s->n_actions[r]; i++) {
            const uint64_t *k = &raw[r][hy_stamp_action(i, HY_STAMP_START)];
            hy_action_time *t = &step->t[r][i];
            t->start = MS(k[HY_STAMP_START]);
            t->received = fmax(MS(k[HY_STAMP_RECEIVED]), t->start);
            t->computed = fmax(MS(k[HY_STAMP_COMPUTED]), t->received);
            t->sent = fmax(MS(k[HY_STAMP_SENT]), t->computed);
            t->ready = t->start;
            t->copied = t->sent;   /* until the copy times are known */
        }
        for (int j = 0; j < HY_STAMPS_TAIL; j++)
            step->tail_at[r * HY_STAMPS_TAIL + j] = MS(raw[r][hy_stamp_tail(s->n_actions[r], j)]);
        double *sum = &step->sum_at[(size_t)r * 2 * (s->stages + 1)];
        for (int j = 0; j < p->n_sums[r]; j++)
            for (int end = 0; end < 2; end++)
                sum[2 * j + end] = MS(raw[r][hy_stamp_sum(s->n_actions[r], j, end)]);
    }
#undef MS
    for (int r = 0; r < P; r++)
        for (int i = 0; i < s->n_actions[r]; i++) {
            hy_action_time *t = &step->t[r][i];
            int pr, pi;
            if (remote_producer(s, at, &s->actions[r][i], r, &pr, &pi))
                t->ready = fmin(fmax(t->start, arrival_of(&step->t[pr][pi], t)), t->computed);
        }
    return HY_OK;
}

/* The steps: warm-up, then measured, each one's stamps taken. */
static int run_steps(hy_profile *p, hy_runtime *rt, const hy_profile_opts *o,
                     step_times *steps, hy_error *err) {
    const hy_schedule *s = &p->sched;
    int P = s->ranks, rc = HY_OK;
    int *at = action_index(s);
    uint64_t **raw = calloc((size_t)P, sizeof *raw);
    if (!at || !raw) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory profiling");
    for (int r = 0; !rc && r < P; r++) {
        raw[r] = malloc(hy_runtime_stamp_count(rt, r) * sizeof **raw);
        if (!raw[r]) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory profiling");
    }
    double wall = 0, tokens = 0;
    for (int k = 0; !rc && k < HY_PROFILE_WARMUP + o->steps; k++) {
        hy_step_stats stats;
        rc = hy_train_step(rt, &stats, err);
        if (rc || k < HY_PROFILE_WARMUP) continue;
        for (int r = 0; !rc && r < P; r++)
            rc = hy_runtime_stamps(rt, r, raw[r], hy_runtime_stamp_count(rt, r), err);
        if (!rc) rc = take_step(p, raw, at, &steps[k - HY_PROFILE_WARMUP], err);
        wall += stats.ms;
        tokens = stats.tokens;
    }
    if (!rc) {
        p->wall_ms = wall / o->steps;
        p->tokens = tokens;
    }
    if (raw)
        for (int r = 0; r < P; r++) free(raw[r]);
    free(raw);
    free(at);
    return rc;
}

/* The copy time of each (op, stage)'s output: the least send of it over
 * every micro-batch and step. */
static void copy_times(hy_profile *p, step_times *steps) {
    const hy_schedule *s = &p->sched;
    int S = s->stages;
    for (int e = 0; e < 3 * S; e++) p->copy[e] = INFINITY;
    for (int k = 0; k < p->steps; k++)
        for (int r = 0; r < s->ranks; r++)
            for (int i = 0; i < s->n_actions[r]; i++) {
                const hy_action *a = &s->actions[r][i];
                const hy_action_time *t = &steps[k].t[r][i];
                double *c = &p->copy[a->op * S + a->stage];
                if (t->sent - t->computed < *c) *c = t->sent - t->computed;
            }
    for (int k = 0; k < p->steps; k++)
        for (int r = 0; r < s->ranks; r++)
            for (int i = 0; i < s->n_actions[r]; i++) {
                const hy_action *a = &s->actions[r][i];
                hy_action_time *t = &steps[k].t[r][i];
                t->copied = fmin(t->computed + p->copy[a->op * S + a->stage], t->sent);
            }
}

/* Where rank r's wait for its gradient sums ended (the last of them; tn,
 * its last action's end, when it has none). sum_at: a step's. */
static double sums_end(const hy_profile *p, const double *sum_at, int r, double tn) {
    const double *sum = &sum_at[(size_t)r * 2 * (p->sched.stages + 1)];
    double end = tn;
    for (int j = 0; j < p->n_sums[r]; j++) end = fmax(end, sum[2 * j + 1]);
    return end;
}

/* Per stage and per rank means, the transfers, and each step's makespan
 * and bubble. */
static int measure(hy_profile *p, step_times *steps, hy_error *err) {
    const hy_schedule *s = &p->sched;
    int P = s->ranks, S = s->stages, M = s->micro_batches, n = p->steps;
    double *xfer = calloc(2 * (size_t)S, sizeof(double));
    int *xfer_n = calloc(2 * (size_t)S, sizeof(int)), *at = action_index(s);
    if (!xfer || !xfer_n || !at) {
        free(xfer);
        free(xfer_n);
        free(at);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory profiling");
    }
    double comm = 0;
    long comm_n = 0;
    for (int si = 0; si < S; si++) {
        hy_stage_cost *c = &p->stage[si];
        memset(c, 0, sizeof *c);
        c->rank = s->placement[si];
        c->layers = p->n_layers[si];
        c->fwd_copy = p->copy[si];
        c->bwd_copy = p->copy[S + si];
    }
    for (int k = 0; k < n; k++) {
        const step_times *sk = &steps[k];
        double first = INFINITY, last = 0, busy = 0, step = 0;
        for (int r = 0; r < P; r++) {
            hy_rank_time *rt = &p->rank[r];
            int na = s->n_actions[r];
            for (int i = 0; i < na; i++) {
                const hy_action *a = &s->actions[r][i];
                const hy_action_time *t = &sk->t[r][i];
                hy_stage_cost *c = &p->stage[a->stage];
                double compute = t->computed - t->ready, blocked = t->sent - t->copied;
                if (a->op == HY_WGRAD) {
                    c->wgrad += (t->copied - t->ready) / (M * n);
                } else {
                    *(a->op == HY_FWD ? &c->fwd_compute : &c->bwd_compute) += compute / (M * n);
                    *(a->op == HY_FWD ? &c->fwd_blocked : &c->bwd_blocked) += blocked / (M * n);
                }
                rt->compute += compute / n;
                rt->copy += (t->copied - t->computed) / n;
                rt->wait += (t->ready - t->start) / n;
                rt->blocked += blocked / n;
                busy += t->copied - t->ready;
                if (t->start < first) first = t->start;
                if (t->copied > last) last = t->copied;
                int pr, pi;
                if (remote_producer(s, at, a, r, &pr, &pi)) {
                    const hy_action_time *q = &sk->t[pr][pi];
                    double arrival = arrival_of(q, t);
                    int e = a->op * S + (a->op == HY_FWD ? a->stage - 1 : a->stage + 1);
                    xfer[e] += arrival - q->computed;
                    xfer_n[e]++;
                    comm += fmax(0, arrival - q->sent);
                    comm_n++;
                }
            }
            double end = sk->tail_at[r * 3 + 2];
            double tn = na > 0 ? sk->t[r][na - 1].sent : sk->iter_start[r];
            double sums = sums_end(p, sk->sum_at, r, tn) - tn;
            rt->sums += sums / n;
            rt->tail += (end - tn - sums) / n;
            if (end > step) step = end;
        }
        double makespan = last > first ? last - first : 0;
        p->step_ms += step / n;
        p->makespan += makespan / n;
        p->bubble += (makespan > 0 ? 1.0 - busy / (P * makespan) : 0) / n;
    }
    for (int r = 0; r < P; r++) {
        hy_rank_time *t = &p->rank[r];
        t->idle = fmax(0, p->step_ms - t->compute - t->copy - t->wait - t->blocked - t->sums -
                          t->tail);
    }
    for (int si = 0; si < S; si++) {
        hy_stage_cost *c = &p->stage[si];
        c->fwd = c->fwd_compute + c->fwd_copy;
        c->bwd = c->bwd_compute + c->bwd_copy;
        c->fwd_transfer = xfer_n[si] ? xfer[si] / xfer_n[si] : -1;
        c->bwd_transfer = xfer_n[S + si] ? xfer[S + si] / xfer_n[S + si] : -1;
    }
    p->comm = comm_n ? comm / comm_n : 0;
    free(xfer);
    free(xfer_n);
    free(at);
    return HY_OK;
}

/* The cost model, and the simulator's prediction from the measured
 * per-stage costs. */
static int predict(hy_profile *p, hy_error *err) {
    const hy_schedule *s = &p->sched;
    int S = s->stages;
    p->transfers = hy_schedule_transfers(s);
    p->ideal_bubble = hy_ideal_bubble(s);
    double *fwd = malloc(4 * (size_t)S * sizeof(double));
    if (!fwd) return hy_fail(err, HY_ERR_RUNTIME, "out of memory profiling");
    double *bwd = fwd + S, *wgrad = fwd + 2 * S, *whole = fwd + 3 * S;
    for (int si = 0; si < S; si++) {
        fwd[si] = p->stage[si].fwd;
        bwd[si] = p->stage[si].bwd;
        wgrad[si] = p->stage[si].wgrad;
        whole[si] = bwd[si] + wgrad[si];
    }
    /* The model prices a whole backward, B and W together, split or not. */
    hy_cost_model_fit(&p->model, fwd, whole, p->n_layers, S, p->head_units, p->comm);
    for (int si = 0; si < S; si++) {
        hy_stage_cost *c = &p->stage[si];
        double ef, eb;   /* the stage's extras: its cost with no layers */
        hy_cost_model_stage(&p->model, si, S, 0, &ef, &eb);
        c->layer_fwd = c->layers > 0 ? fmax(0, c->fwd - ef) / c->layers : -1;
        c->layer_bwd = c->layers > 0 ? fmax(0, c->bwd + c->wgrad - eb) / c->layers : -1;
    }
    hy_costs costs = { .comm = p->comm, .fwd_stage = fwd, .bwd_stage = bwd,
                       .wgrad_stage = s->split ? wgrad : NULL };
    hy_sim_result sim;
    hy_sim_limits slots;
    int rc = hy_simulate(s, &costs, NULL, &sim, err);
    if (!rc) {
        p->pred_makespan = sim.makespan;
        p->pred_bubble = sim.bubble;
        hy_sim_result_free(&sim);
        rc = hy_mailbox_sim_limits(s, &slots, err);
    }
    if (!rc) {
        rc = hy_simulate(s, &costs, &slots, &sim, err);
        hy_sim_limits_free(&slots);
    }
    if (!rc) {
        p->slots_makespan = sim.makespan;
        p->slots_bubble = sim.bubble;
        hy_sim_result_free(&sim);
    }
    free(fwd);
    return rc;
}

/* p's tables for its schedule (p->sched, with p->n_sums set) and `steps`
 * measured steps' times; the split and the head's cost from model m. */
static int profile_alloc(hy_profile *p, const hy_model *m, int steps, step_times **out,
                         hy_error *err) {
    int S = p->sched.stages, P = p->sched.ranks;
    p->steps = steps;
    p->n_layers = malloc((size_t)S * sizeof(int));
    p->copy = malloc(3 * (size_t)S * sizeof(double));   /* F, B, W */
    p->stage = calloc((size_t)S, sizeof *p->stage);
    p->rank = calloc((size_t)P, sizeof *p->rank);
    step_times *times = *out = calloc((size_t)steps, sizeof *times);
    int bad = !p->n_layers || !p->copy || !p->stage || !p->rank || !times;
    for (int k = 0; !bad && k < steps; k++) bad = step_alloc(&times[k], &p->sched) != 0;
    if (bad) return hy_fail(err, HY_ERR_RUNTIME, "out of memory profiling");
    memcpy(p->n_layers, m->n_layers, (size_t)S * sizeof(int));
    p->head_units = hy_model_stage_cost(m, m->stages - 1) - m->n_layers[m->stages - 1];
    return HY_OK;
}

/* From the steps' times to the results (rc: how it went so far), keeping
 * the last step for the trace and the timeline; frees the steps. On
 * failure p is emptied. */
static int profile_finish(hy_profile *p, step_times *steps, int rc, hy_error *err) {
    if (!rc) {
        copy_times(p, steps);
        rc = measure(p, steps, err);
    }
    if (!rc) rc = predict(p, err);
    if (!rc) {
        step_times *last = &steps[p->steps - 1];
        p->last = last->t;
        p->iter_start = last->iter_start;
        p->tail_at = last->tail_at;
        p->sum_at = last->sum_at;
        memset(last, 0, sizeof *last);
    }
    for (int k = 0; steps && k < p->steps; k++) step_free(&steps[k], p->sched.ranks);
    free(steps);
    if (rc) hy_profile_free(p);
    return rc;
}

/* The memory plan of the run beside what the backend allocated. */
static int profile_memory(hy_profile *p, const hy_run *run, const hy_backend_memory *mem,
                          hy_runtime *rt, hy_error *err) {
    int P = p->sched.ranks;
    hy_memplan mp;
    hy_memplan_in in = { .model = &run->model, .sched = &run->sched,
                         .micro_batch_size = run->micro_batch_size, .replicas = p->replicas,
                         .mem = mem, .recompute = run->train.recompute };
    p->mem_planned = calloc((size_t)P, sizeof(double));
    p->mem_allocated = calloc((size_t)P, sizeof(double));
    if (!p->mem_planned || !p->mem_allocated)
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory profiling");
    int rc = hy_memplan_build(&mp, &in, err);
    hy_backend *be = hy_runtime_backend(rt);
    for (int r = 0; !rc && r < P; r++) {
        p->mem_planned[r] = mp.rank[r].total;
        p->mem_allocated[r] = be->ops->allocated ? (double)be->ops->allocated(be, r) : -1;
    }
    if (!rc) hy_memplan_free(&mp);
    return rc;
}

int hy_profile_run(hy_profile *p, const hy_run *run, const hy_profile_opts *o, hy_error *err) {
    memset(p, 0, sizeof *p);
    if (o->steps < 1)
        return hy_fail(err, HY_ERR_INPUT, "profile: the number of measured steps must be at "
                       "least 1, got %d", o->steps);
    hy_backend_choice chosen;
    int rc = hy_backend_describe(&run->backend, &chosen, err);
    if (!rc) snprintf(p->backend, sizeof p->backend, "%s", chosen.why);
    hy_runtime *rt = NULL;
    const hy_model *m = &run->model;
    step_times *steps = NULL;
    size_t batches = 0;
    /* The data before the memory: a missing shard is said as such. */
    if (!rc) rc = hy_train_data_batches(run, &batches, err);
    if (!rc) rc = hy_schedule_copy(&p->sched, &run->sched, err);
    if (!rc) rc = hy_train_runtime(&rt, run, &chosen, o->dp, NULL, err);
    if (!rc && o->slow_stage >= 0) rc = hy_runtime_slow_stage(rt, o->slow_stage, o->slow_seconds, err);
    if (!rc) rc = hy_runtime_profile(rt, err);
    if (!rc) {
        int S = p->sched.stages, P = p->sched.ranks;
        p->replicas = hy_dp_size(o->dp);
        p->replica = hy_dp_rank(o->dp);
        p->n_sums = calloc((size_t)P, sizeof(int));
        p->sum_stage = calloc((size_t)P * ((size_t)S + 1), sizeof(int));
        for (int r = 0; p->n_sums && p->sum_stage && r < P; r++)
            p->n_sums[r] = hy_runtime_sums(rt, r, &p->sum_stage[(size_t)r * (S + 1)]);
        if (!p->n_sums || !p->sum_stage) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory profiling");
        if (!rc) rc = profile_alloc(p, m, o->steps, &steps, err);
    }
    /* Every replica ready, or none steps: a failure here on one would
     * leave the others waiting in the first step's sums. (A step failing
     * on one replica ends the job: the profile command's caller, like
     * train's.) */
    if (hy_dp_size(o->dp) > 1) rc = hy_dp_agree(o->dp, rc, err);
    if (!rc) rc = run_steps(p, rt, o, steps, err);
    if (!rc) rc = profile_memory(p, run, &chosen.mem, rt, err);
    hy_runtime_destroy(rt);
    return profile_finish(p, steps, rc, err);
}

int hy_profile_from_stamps(hy_profile *p, const hy_run *run, int steps,
                           uint64_t *const *const *raw, hy_error *err) {
    memset(p, 0, sizeof *p);
    if (steps < 1)
        return hy_fail(err, HY_ERR_INPUT, "profile: the number of measured steps must be at "
                       "least 1, got %d", steps);
    snprintf(p->backend, sizeof p->backend, "given stamps");
    step_times *times = NULL;
    int *at = NULL;
    int rc = hy_schedule_copy(&p->sched, &run->sched, err);
    if (!rc) {
        p->replicas = 1;
        p->n_sums = calloc((size_t)p->sched.ranks, sizeof(int));
        p->sum_stage = calloc((size_t)p->sched.ranks * ((size_t)p->sched.stages + 1), sizeof(int));
        at = action_index(&p->sched);
        if (!p->n_sums || !p->sum_stage || !at) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory profiling");
    }
    if (!rc) rc = profile_alloc(p, &run->model, steps, &times, err);
    for (int k = 0; !rc && k < steps; k++) rc = take_step(p, raw[k], at, &times[k], err);
    free(at);
    return profile_finish(p, times, rc, err);
}

/* ------------------------------------------------------------------------
 * trace.json
 * ------------------------------------------------------------------------ */

/* Every json_* result is OR-ed into one flag, as in plan.c: ownership
 * passes even on failure, and one failure (out of memory) fails it all. */
static int add(json_t *array, json_t *event) { return json_array_append_new(array, event); }

static json_t *x_event(const char *name, const char *cat, int tid, double t0, double t1) {
    return json_pack("{s:s,s:s,s:s,s:i,s:i,s:f,s:f}", "name", name, "cat", cat, "ph", "X",
                     "pid", 0, "tid", tid, "ts", t0 * 1e3, "dur", fmax(0, t1 - t0) * 1e3);
}

/* Rank r's gradient sums over the replicas, on its sums track: each from
 * its start to the end of the rank's wait for it. They overlap in any
 * order (started as stages finish, waited for in stage order), so they
 * are async events ("b" to "e", one id each), which need not nest. */
static int sum_events(const hy_profile *p, json_t *ev, int r) {
    int S = p->sched.stages, bad = 0, tid = p->sched.ranks + r;
    const double *at = &p->sum_at[(size_t)r * 2 * (S + 1)];
    for (int j = 0; j < p->n_sums[r]; j++) {
        int stage = p->sum_stage[(size_t)r * (S + 1) + j];
        char name[48], id[32];
        if (stage == S) snprintf(name, sizeof name, "sum wte (tied embedding)");
        else snprintf(name, sizeof name, "sum s%d", stage);
        snprintf(id, sizeof id, "sum-%d-%d", r, stage);
        bad |= add(ev, json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:f,s:{s:i,s:i}}", "name", name,
                                 "cat", "gradient sum", "ph", "b", "id", id, "pid", 0, "tid", tid,
                                 "ts", at[2 * j] * 1e3, "args", "stage", stage,
                                 "replicas", p->replicas));
        bad |= add(ev, json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:f}", "name", name,
                                 "cat", "gradient sum", "ph", "e", "id", id, "pid", 0, "tid", tid,
                                 "ts", fmax(at[2 * j + 1], at[2 * j]) * 1e3));
    }
    return bad;
}

static json_t *trace_events(const hy_profile *p) {
    const hy_schedule *s = &p->sched;
    json_t *ev = json_array();
    if (!ev) return NULL;
    int bad = 0;
    char title[160];
    snprintf(title, sizeof title, "hanayo: %s P=%d M=%d (%d stages), the last of %d measured "
             "step%s", hy_sched_name(s->kind), s->ranks, s->micro_batches, s->stages, p->steps,
             p->steps == 1 ? "" : "s");
    bad |= add(ev, json_pack("{s:s,s:s,s:i,s:{s:s}}", "name", "process_name", "ph", "M",
                             "pid", 0, "args", "name", title));
    for (int r = 0; r < s->ranks; r++) {
        char name[32];
        snprintf(name, sizeof name, "rank %d", r);
        bad |= add(ev, json_pack("{s:s,s:s,s:i,s:i,s:{s:s}}", "name", "thread_name", "ph", "M",
                                 "pid", 0, "tid", r, "args", "name", name));
        bad |= add(ev, json_pack("{s:s,s:s,s:i,s:i,s:{s:i}}", "name", "thread_sort_index",
                                 "ph", "M", "pid", 0, "tid", r, "args", "sort_index", 2 * r));
        if (p->n_sums[r] == 0) continue;
        /* Its gradient sums overlap its later actions: a track of their
         * own, right below the rank's. */
        snprintf(name, sizeof name, "rank %d: gradient sums", r);
        bad |= add(ev, json_pack("{s:s,s:s,s:i,s:i,s:{s:s}}", "name", "thread_name", "ph", "M",
                                 "pid", 0, "tid", s->ranks + r, "args", "name", name));
        bad |= add(ev, json_pack("{s:s,s:s,s:i,s:i,s:{s:i}}", "name", "thread_sort_index",
                                 "ph", "M", "pid", 0, "tid", s->ranks + r, "args", "sort_index",
                                 2 * r + 1));
    }
    int *at = action_index(s);
    if (!at) bad = 1;
    int flow = 0;
    for (int r = 0; !bad && r < s->ranks; r++) {
        int n = s->n_actions[r];
        for (int i = 0; i < n; i++) {
            const hy_action *a = &s->actions[r][i];
            const hy_action_time *t = &p->last[r][i];
            char name[48];
            hy_action_label(a, name, sizeof name);
            const char *cat = a->op == HY_FWD ? "forward" : a->op == HY_BWD ? "backward" : "weights";
            json_t *e = x_event(name, cat, r, t->start, t->sent);
            if (e)
                bad |= json_object_set_new(e, "args", json_pack(
                    "{s:i,s:i,s:f,s:f,s:f,s:f}", "mb", a->mb, "stage", a->stage,
                    "wait_us", (t->ready - t->start) * 1e3,
                    "compute_us", (t->computed - t->ready) * 1e3,
                    "send_us", (t->copied - t->computed) * 1e3,
                    "blocked_us", (t->sent - t->copied) * 1e3));
            bad |= add(ev, e);
            /* Inside it, longer than a microsecond: the wait for the input,
             * and a send held up beyond its copy time. */
            if (t->ready - t->start > 1e-3)
                bad |= add(ev, x_event("wait", "wait", r, t->start, t->ready));
            if (t->sent - t->copied > 1e-3)
                bad |= add(ev, x_event("blocked send", "wait", r, t->copied, t->sent));
            /* The arrow of a remote input: from the producer's send (inside
             * its event) to this action's receive. */
            int pr, pi;
            if (remote_producer(s, at, a, r, &pr, &pi)) {
                const hy_action_time *q = &p->last[pr][pi];
                const char *what = a->op == HY_FWD ? "activation" : "gradient";
                flow++;
                bad |= add(ev, json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:f}", "name", what,
                                         "cat", "transfer", "ph", "s", "id", flow, "pid", 0,
                                         "tid", pr, "ts", q->computed * 1e3));
                bad |= add(ev, json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:f}", "name", what,
                                         "cat", "transfer", "ph", "f", "bp", "e", "id", flow,
                                         "pid", 0, "tid", r, "ts", t->ready * 1e3));
            }
        }
        double t0 = n > 0 ? p->last[r][0].start : p->iter_start[r];
        double tn = n > 0 ? p->last[r][n - 1].sent : p->iter_start[r];
        const double *tail = &p->tail_at[r * 3];
        if (t0 - p->iter_start[r] > 1e-3)
            bad |= add(ev, x_event("zero gradients", "step", r, p->iter_start[r], t0));
        bad |= sum_events(p, ev, r);
        double summed = sums_end(p, p->sum_at, r, tn);
        if (summed - tn > 1e-3) bad |= add(ev, x_event("wait for gradient sums", "wait", r, tn, summed));
        bad |= add(ev, x_event("tied-embedding exchange", "step", r, summed, tail[0]));
        bad |= add(ev, x_event("norm+clip", "step", r, tail[0], tail[1]));
        bad |= add(ev, x_event("optimizer", "step", r, tail[1], tail[2]));
    }
    free(at);
    if (bad) {
        json_decref(ev);
        return NULL;
    }
    return ev;
}

char *hy_profile_trace_json(const hy_profile *p) {
    json_t *ev = trace_events(p);
    if (!ev) return NULL;
    json_t *o = json_pack("{s:o,s:s}", "traceEvents", ev, "displayTimeUnit", "ms");
    if (!o) return NULL;
    /* Ten digits: ns in µs with room to spare, and no 0.1 printed as
     * 0.10000000000000001. */
    char *text = json_dumps(o, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(o);
    return text;
}

/* ------------------------------------------------------------------------
 * summary.json
 * ------------------------------------------------------------------------ */

/* -1 (no such transfer) as null. */
static json_t *ms_or_null(double v) { return v < 0 ? json_null() : json_real(v); }

static json_t *summary(const hy_profile *p) {
    const hy_schedule *s = &p->sched;
    json_t *o = json_object(), *ranks = json_array(), *stages = json_array(), *split = json_array();
    if (!o || !ranks || !stages || !split) {
        json_decref(o);
        json_decref(ranks);
        json_decref(stages);
        json_decref(split);
        return NULL;
    }
    int bad = 0;
    for (int r = 0; r < s->ranks; r++) {
        const hy_rank_time *t = &p->rank[r];
        bad |= add(ranks, json_pack("{s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "rank", r,
                                    "busy_ms", t->compute + t->copy, "compute_ms", t->compute,
                                    "copy_ms", t->copy, "wait_ms", t->wait,
                                    "blocked_ms", t->blocked, "sums_wait_ms", t->sums,
                                    "tail_ms", t->tail, "idle_ms", t->idle));
        if (p->mem_planned) {   /* a profile of given stamps has no memory */
            json_t *k = json_array_get(ranks, (size_t)r);
            bad |= !k || json_object_set_new(k, "mem_planned_bytes", json_real(p->mem_planned[r]));
            bad |= !k || json_object_set_new(k, "mem_allocated_bytes",
                                             ms_or_null(p->mem_allocated[r]));
        }
    }
    for (int si = 0; si < s->stages; si++) {
        const hy_stage_cost *c = &p->stage[si];
        bad |= add(split, json_integer(c->layers));
        json_t *e = json_pack("{s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "stage", si,
                              "rank", c->rank, "layers", c->layers, "fwd_ms", c->fwd,
                              "bwd_ms", c->bwd, "fwd_compute_ms", c->fwd_compute,
                              "bwd_compute_ms", c->bwd_compute, "fwd_copy_ms", c->fwd_copy,
                              "bwd_copy_ms", c->bwd_copy, "fwd_blocked_ms", c->fwd_blocked,
                              "bwd_blocked_ms", c->bwd_blocked);
        if (e) {
            bad |= json_object_set_new(e, "fwd_transfer_ms", ms_or_null(c->fwd_transfer));
            bad |= json_object_set_new(e, "bwd_transfer_ms", ms_or_null(c->bwd_transfer));
            bad |= json_object_set_new(e, "layer_fwd_ms", ms_or_null(c->layer_fwd));
            bad |= json_object_set_new(e, "layer_bwd_ms", ms_or_null(c->layer_bwd));
            if (s->split) bad |= json_object_set_new(e, "wgrad_ms", json_real(c->wgrad));
        }
        bad |= add(stages, e);
    }
    bad |= json_object_set_new(o, "units", json_string("ms"));
    bad |= json_object_set_new(o, "backend", json_string(p->backend));
    bad |= json_object_set_new(o, "schedule", json_pack(
        "{s:s,s:i,s:i,s:i,s:i,s:i,s:b}", "kind", hy_sched_name(s->kind), "ranks", s->ranks,
        "micro_batches", s->micro_batches, "waves", s->kind == HY_SCHED_HANAYO ? s->waves : 0,
        "chunks", s->chunks, "stages", s->stages, "split_backward", s->split));
    bad |= json_object_set_new(o, "split", split);
    bad |= json_object_set_new(o, "replicas", json_integer(p->replicas));
    bad |= json_object_set_new(o, "replica", json_integer(p->replica));
    bad |= json_object_set_new(o, "warmup_steps", json_integer(HY_PROFILE_WARMUP));
    bad |= json_object_set_new(o, "steps", json_integer(p->steps));
    bad |= json_object_set_new(o, "tokens_per_step", json_real(p->tokens));
    bad |= json_object_set_new(o, "step_ms", json_real(p->step_ms));
    bad |= json_object_set_new(o, "wall_ms", json_real(p->wall_ms));
    bad |= json_object_set_new(o, "tokens_per_s",
                               json_real(p->wall_ms > 0 ? p->tokens / (p->wall_ms / 1e3) : 0));
    bad |= json_object_set_new(o, "makespan_ms", json_pack(
        "{s:f,s:f,s:f}", "measured", p->makespan, "predicted", p->pred_makespan,
        "predicted_with_slots", p->slots_makespan));
    bad |= json_object_set_new(o, "bubble", json_pack(
        "{s:f,s:f,s:f,s:f}", "measured", p->bubble, "predicted", p->pred_bubble,
        "predicted_with_slots", p->slots_bubble, "ideal", p->ideal_bubble));
    bad |= json_object_set_new(o, "comm_ms", json_real(p->comm));
    bad |= json_object_set_new(o, "transfers", json_integer(p->transfers));
    bad |= json_object_set_new(o, "ranks", ranks);
    bad |= json_object_set_new(o, "stages", stages);
    const hy_cost_model *m = &p->model;
    bad |= json_object_set_new(o, "cost_model", json_pack(
        "{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "layer_fwd_ms", m->layer_fwd,
        "layer_bwd_ms", m->layer_bwd, "first_fwd_ms", m->first_fwd, "first_bwd_ms", m->first_bwd,
        "last_fwd_ms", m->last_fwd, "last_bwd_ms", m->last_bwd, "comm_ms", m->comm,
        "head_units", p->head_units));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *hy_profile_summary_json(const hy_profile *p) {
    json_t *o = summary(p);
    if (!o) return NULL;
    char *text = json_dumps(o, JSON_PRESERVE_ORDER | JSON_INDENT(2) | JSON_REAL_PRECISION(12));
    json_decref(o);
    return text;
}

/* ------------------------------------------------------------------------
 * bars.svg: per rank, one stacked bar of where its step goes (svg.h)
 * ------------------------------------------------------------------------ */

enum { BAR_PARTS = 7 };

/* The bars of p into the caller's buffers: title (256 bytes), values
 * (HY_MAX_RANKS * BAR_PARTS), names and colors (BAR_PARTS). The "sums"
 * part only with data-parallel replicas. */
static hy_svg_bars profile_bars(const hy_profile *p, char *title, size_t n, double *values,
                                const char **names, const char **colors) {
    static const char *const part[BAR_PARTS] = {"compute", "copy", "wait", "blocked", "sums",
                                                "tail", "idle"};
    static const char *const color[BAR_PARTS] = {"#3b7dd8", "#9b59b6", "#e0573a", "#f0a030",
                                                 "#d04090", "#3aa05a", "#c8c8c8"};
    int P = p->sched.ranks, dp = p->replicas > 1, parts = 0;
    for (int k = 0; k < BAR_PARTS; k++)
        if (dp || strcmp(part[k], "sums") != 0) {
            names[parts] = part[k];
            colors[parts++] = color[k];
        }
    for (int r = 0; r < P; r++) {
        const hy_rank_time *t = &p->rank[r];
        double *v = &values[r * parts];
        int k = 0;
        v[k++] = t->compute; v[k++] = t->copy; v[k++] = t->wait; v[k++] = t->blocked;
        if (dp) v[k++] = t->sums;
        v[k++] = t->tail; v[k] = t->idle;
    }
    snprintf(title, n, "%s P=%d M=%d: where each rank's step goes (mean of %d steps, %.2f ms)",
             hy_sched_name(p->sched.kind), P, p->sched.micro_batches, p->steps, p->step_ms);
    hy_svg_bars b = {
        .ranks = P, .parts = parts, .names = names, .colors = colors, .values = values,
        .unit = "ms", .title = title,
        .note = dp ? "the whole bar is the step; busy = compute + copy; blocked = a send held up "
                     "beyond its copy; sums = waiting for the gradient sums over the replicas; "
                     "tail = embedding exchange, norm and clip, optimizer"
                   : "the whole bar is the step; busy = compute + copy; blocked = a send held up "
                     "beyond its copy; tail = embedding exchange, norm and clip, optimizer",
    };
    return b;
}

int hy_profile_write_bars_svg(FILE *f, const hy_profile *p) {
    char title[256];
    double values[HY_MAX_RANKS * BAR_PARTS];
    const char *names[BAR_PARTS], *colors[BAR_PARTS];
    hy_svg_bars b = profile_bars(p, title, sizeof title, values, names, colors);
    return hy_svg_write_bars(f, &b);
}

/* ------------------------------------------------------------------------
 * Writing the directory
 * ------------------------------------------------------------------------ */

int hy_profile_check_dir(const char *dir, hy_error *err) {
    if (!dir || !*dir) return hy_fail(err, HY_ERR_INPUT, "profile: --out needs a directory name");
    size_t n = strlen(dir);
    char *buf = malloc(n + 1);
    if (!buf) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    memcpy(buf, dir, n + 1);
    /* Walk up to the deepest part that exists. */
    int rc = HY_OK;
    struct stat sb;
    for (;;) {
        if (stat(buf, &sb) == 0) {
            if (!S_ISDIR(sb.st_mode))
                rc = hy_fail(err, HY_ERR_INPUT, "--out %s: %s is not a directory", dir, buf);
            else if (access(buf, W_OK | X_OK) != 0)
                rc = hy_fail(err, hy_errno_status(errno, HY_ERR_INPUT),
                             "--out %s: cannot create files in %s: %s", dir, buf, strerror(errno));
            break;
        }
        if (errno != ENOENT && errno != ENOTDIR) {   /* ENOTDIR: a file above; found next */
            rc = hy_fail(err, hy_errno_status(errno, HY_ERR_INPUT), "--out %s: %s: %s", dir, buf,
                         strerror(errno));
            break;
        }
        char *slash = strrchr(buf, '/');
        while (slash && slash > buf && slash[1] == '\0') {   /* "a/b/" */
            *slash = '\0';
            slash = strrchr(buf, '/');
        }
        if (!slash) {
            memcpy(buf, ".", 2);
        } else if (slash == buf) {
            buf[1] = '\0';
        } else {
            *slash = '\0';
        }
    }
    free(buf);
    return rc;
}

static int make_dirs(const char *dir, hy_error *err) {
    size_t n = strlen(dir);
    char *buf = malloc(n + 1);
    if (!buf) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    memcpy(buf, dir, n + 1);
    int rc = HY_OK;
    for (char *p = buf + 1; !rc; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            rc = hy_fail(err, hy_errno_status(errno, HY_ERR_INPUT), "--out %s: cannot create %s: %s",
                         dir, buf, strerror(errno));
        *p = c;
        if (!c) break;
    }
    struct stat sb;
    if (!rc && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        rc = hy_fail(err, HY_ERR_INPUT, "--out %s is not a directory", dir);
    free(buf);
    return rc;
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s/%s", dir, name);
    return s;
}

static int save_text(const char *dir, const char *name, char *text, hy_error *err) {
    if (!text) return hy_fail(err, HY_ERR_RUNTIME, "out of memory writing %s", name);
    char *path = join(dir, name);
    int rc = HY_OK;
    if (!path) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    hy_atomic_file af;
    if (!rc) rc = hy_atomic_open(&af, path, HY_ERR_INPUT, err);
    if (!rc) rc = hy_atomic_write(&af, text, strlen(text), err);
    if (!rc) rc = hy_atomic_write(&af, "\n", 1, err);
    if (!rc) rc = hy_atomic_commit(&af, err);
    free(path);
    free(text);
    return rc;
}

static int save_bars(const hy_profile *p, const char *dir, hy_error *err) {
    char *path = join(dir, "bars.svg");
    if (!path) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    char title[256];
    double values[HY_MAX_RANKS * BAR_PARTS];
    const char *names[BAR_PARTS], *colors[BAR_PARTS];
    hy_svg_bars b = profile_bars(p, title, sizeof title, values, names, colors);
    int rc = hy_svg_save_bars(&b, path, err);
    free(path);
    return rc;
}

/* A [ranks][n_actions] table of doubles. */
static double **table_new(const hy_schedule *s) {
    double **t = calloc((size_t)s->ranks, sizeof *t);
    for (int r = 0; t && r < s->ranks; r++) {
        t[r] = calloc((size_t)s->n_actions[r] + 1, sizeof **t);
        if (!t[r]) {
            for (int q = 0; q < r; q++) free(t[q]);
            free(t);
            return NULL;
        }
    }
    return t;
}

static void table_free(double **t, int ranks) {
    if (!t) return;
    for (int r = 0; r < ranks; r++) free(t[r]);
    free(t);
}

/* The last measured step, drawn as plan draws a simulated one (svg.h):
 * each action from ready to copied (its busy time), so the gaps are what
 * the bubble counts. */
static int save_timeline(const hy_profile *p, const char *dir, hy_error *err) {
    const hy_schedule *s = &p->sched;
    double **start = table_new(s), **end = table_new(s);
    char *path = join(dir, "timeline.svg");
    int rc = HY_OK;
    if (!start || !end || !path) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    double first = INFINITY, last = 0;
    for (int r = 0; !rc && r < s->ranks; r++)
        for (int i = 0; i < s->n_actions[r]; i++)
            if (p->last[r][i].start < first) first = p->last[r][i].start;
    for (int r = 0; !rc && r < s->ranks; r++)
        for (int i = 0; i < s->n_actions[r]; i++) {
            start[r][i] = p->last[r][i].ready - first;
            end[r][i] = p->last[r][i].copied - first;
            if (end[r][i] > last) last = end[r][i];
        }
    if (!rc) {
        char title[256];
        int n = snprintf(title, sizeof title, "measured, last of %d steps: %s  P=%d  M=%d",
                         p->steps, hy_sched_name(s->kind), s->ranks, s->micro_batches);
        if (s->kind == HY_SCHED_HANAYO) n += snprintf(title + n, sizeof title - n, "  W=%d", s->waves);
        if (s->kind == HY_SCHED_INTERLEAVED) n += snprintf(title + n, sizeof title - n, "  v=%d", s->chunks);
        snprintf(title + n, sizeof title - n, "  stages=%d  makespan %.2f ms  bubble %.4f "
                 "(mean of all; predicted %.4f, ideal %.4f)  F blue, B orange", s->stages, last,
                 p->bubble, p->pred_bubble, p->ideal_bubble);
        hy_svg_timeline t = { s, start, end, last, title, "ms" };
        rc = hy_svg_save_timeline(&t, path, err);
    }
    table_free(start, s->ranks);
    table_free(end, s->ranks);
    free(path);
    return rc;
}

int hy_profile_save(const hy_profile *p, const char *dir, hy_error *err) {
    int rc = make_dirs(dir, err);
    if (!rc) rc = save_text(dir, "trace.json", hy_profile_trace_json(p), err);
    if (!rc) rc = save_text(dir, "summary.json", hy_profile_summary_json(p), err);
    if (!rc) rc = save_timeline(p, dir, err);
    if (!rc) rc = save_bars(p, dir, err);
    return rc;
}
