/*
 * order.c — see order.h.
 *
 * The candidates, in the order they are tried (the first of equals wins):
 *   1. the canonical order (hy_sched_order_default);
 *   2. hanayo: the merge under the costs with a rank holding 2WP + e
 *      activations, e = 0..P, flat or rising by r, looking 1, WP or 2WP
 *      stream entries ahead. More activations in flight are what hides a
 *      transfer's latency; the cap keeps the memory bounded;
 *   3. split backward: each of those F/B orders (the published one for
 *      the other schedules) with rank r keeping a*r + b weight passes
 *      back, a in 0..2, b in 0..2; for hanayo also the merge placing the
 *      weight passes itself (each activation counted until its W, a W
 *      filling a wait of more than 0, 1/2 or 1 W, forwards of the last
 *      stage or the last P/2 stages passing a rank's cap), which is what
 *      keeps memory within the bound while W's fill the latency of the
 *      hops.
 * Right after the canonical order come, for split W = 1, the V
 * placement's other published orders (DualPipeV, V-Half, V-Min:
 * schedule.h); with a cap on the activations (order.h) then the list
 * scheduler's orders (capped.h), then the above, each kept only within
 * the cap.
 * Each is simulated once. Hanayo's best, whole or split (with a cap, any
 * schedule's best), is then double-justified (justify.h): its actions
 * moved into the gaps the greedy replays left, within the same memory, which is what takes it ahead of
 * interleaved's order when a transfer takes time. The search is skipped,
 * the canonical order returned, when the costs are the uniform ones it is
 * made for, and narrowed to the canonical merge's neighbours when the
 * schedule is too large for many simulations to be cheap.
 *
 * What it costs: a candidate is a merge and a simulation, each a few
 * logarithms per action (schedule.c's merge_run). A candidate whose merge
 * never found a rank at its cap builds the same lists at every larger
 * cap, so those are not built again (below_caps): with M <= P most caps
 * are never reached. And the search stops, keeping the best so far, once
 * the next candidate would take the actions simulated past the budget
 * (order.h): the candidates are tried in the order above, so the
 * smallest caps are the ones tried in full. Helper threads build and
 * price candidates ahead of the caller, which decides on them in that
 * order as it would alone (run_candidates): the same choice and the same
 * work counted on any number of threads, in a fraction of the time.
 */
#include "order.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capped.h"
#include "justify.h"
#include "polish.h"
#include "sim.h"

/* Past this many actions over all ranks only a few candidates are tried
 * (each costs a merge and a simulation, about 60 ns per action at
 * P = 8 on a shared two-core machine). */
#define ORDER_SEARCH_ACTIONS 200000

/* The work a choice may do (order.h, HY_ORDER_WORK), or this many whole
 * simulations of the schedule when that is more: the narrowed search of
 * the largest schedules (the canonical order and four merges, unsplit)
 * fits in it. */
#define ORDER_SEARCH_ORDERS 6

/* Justification rounds at most (each two passes and a simulation), and
 * the work past which it is skipped (and hy_order_work says so): a pass
 * costs at worst (actions) x (actions per rank) steps, in practice far
 * less (justify.c skips the stretches of a timeline where no gap fits):
 * every plan up to P = 8, M = 1024, split or not (1.2 x 10^9 at split
 * W = 2), is justified, in about 0.1 s; P = 64, M = 1024 is not. */
#define JUSTIFY_ROUNDS 4
#define JUSTIFY_WORK 1e10

/* Up to this much of that work every candidate is justified before it is
 * priced, not only the winner: an order the merge left a little longer
 * often justifies shorter than the merge's best does (with small
 * transfer times, where the orders differ by a few hops). Each counts
 * as JUSTIFY_EACH_ACTIONS simulations more against the search's budget. */
#define JUSTIFY_EACH_WORK 1e7
#define JUSTIFY_EACH_ACTIONS 2

/* Whether c is what the canonical orders are made for. */
static int is_uniform(const hy_sched_params *p, const hy_costs *c) {
    hy_costs u = hy_costs_uniform_for(p->split_backward, 0);
    return !c->fwd_stage && !c->bwd_stage && !c->wgrad_stage && c->comm == 0 &&
           c->fwd == u.fwd && c->bwd == u.bwd && (!p->split_backward || c->wgrad == u.wgrad);
}

/* A candidate already priced, kept for the same knobs at the next
 * cap_extra: when no rank reached its cap (below_caps) a larger cap
 * builds the same lists, so the search judges them again without
 * building them. */
typedef struct {
    int same_above;     /* its lists are those of every larger cap_extra */
    double makespan;
    int peak, peak_sum;
} priced;

/* The peak limit before the canonical order has said what it is (no cap:
 * search sets it after pricing that order). */
#define NO_PEAK_LIMIT (1 << 30)

/* Candidates tried for one cap_extra, at most (list_candidates' loops). */
#define ORDER_PER_CAP 256

/* What a thread keeps between the candidates it builds and prices: the
 * merge's streams and memory, and the simulation's and justification's
 * buffers, so that a candidate allocates only its own order. */
typedef struct {
    hy_sched_scratch merge;
    hy_justify_scratch price;
} scratch;

static void scratch_free(scratch *w) {
    hy_sched_scratch_free(&w->merge);
    hy_justify_scratch_free(&w->price);
}

typedef struct {
    const hy_sched_params *p;
    const hy_costs *c;
    int peak_limit;         /* the most activations a candidate may hold on a rank */
    int cap;                /* the user's cap on them (p->max_activations), 0: none */
    hy_schedule best;
    double makespan;        /* of best; < 0: none yet */
    int peak, peak_sum;
    hy_order_work work;
    long long actions;      /* of one order of the schedule */
    long long budget;       /* the most work.actions may reach */
    int justify;            /* justify the winner (JUSTIFY_WORK) */
    int justify_each;       /* justify every candidate (JUSTIFY_EACH_WORK) */
    priced known[ORDER_PER_CAP];   /* by the candidate's place in one cap_extra's loops */
    scratch scratch;        /* the caller's */
} order_search;

static int peak_of(const hy_sim_result *r, int *sum) {
    *sum = 0;
    for (int k = 0; k < r->ranks; k++) *sum += r->peak_activations[k];
    return hy_sim_peak_max(r);
}

/* Whether an order of that makespan and peak beats the best so far:
 * shorter by more than rounding, else as short with less memory. */
static int beats(const order_search *g, double makespan, int peak, int sum) {
    double eps = hy_makespan_tolerance(g->makespan);
    return peak <= g->peak_limit &&
           (g->makespan < 0 || makespan < g->makespan - eps ||
            (makespan <= g->makespan + eps &&
             (peak < g->peak || (peak == g->peak && sum < g->peak_sum))));
}

/* The most activations rank r of s holds: each F adds one, each
 * `frees` (B, or W when that is what releases them) takes one away. What
 * the simulator counts (sim.h, peak_activations), read from the list. */
static int rank_peak(const hy_schedule *s, int r, int frees) {
    int live = 0, peak = 0;
    for (int i = 0; i < s->n_actions[r]; i++) {
        int op = s->actions[r][i].op;
        live += op == HY_FWD ? 1 : op == frees ? -1 : 0;
        if (live > peak) peak = live;
    }
    return peak;
}

/* The most activations any rank of s holds (sim.h's peak_activations,
 * read from the lists): what the user's cap bounds. */
static int schedule_peak(const hy_schedule *s) {
    int most = 0;
    for (int r = 0; r < s->ranks; r++) {
        int peak = rank_peak(s, r, s->split ? HY_WGRAD : HY_BWD);
        if (peak > most) most = peak;
    }
    return most;
}

/* Whether hanayo's merge, building s under o, never found a rank at its
 * cap (2WP + cap_extra, + r with cap_rises: schedule.h). The merge
 * counts a rank's activations from each F to its B (to its W when it
 * places the W's itself) as it appends to the rank's list, so the
 * largest of those counts is read back from the list. Then the cap never
 * changed a choice, and any larger one builds the same lists. */
static int below_caps(const order_search *g, const hy_sched_order *o, const hy_schedule *s) {
    if (g->p->kind != HY_SCHED_HANAYO || o->zbv || o->v_order) return 0;
    int group = hy_sched_chunks(g->p) * g->p->ranks;
    int frees = s->split && o->w_in_merge ? HY_WGRAD : HY_BWD;
    for (int r = 0; r < s->ranks; r++)
        if (rank_peak(s, r, frees) >= group + o->cap_extra + (o->cap_rises ? r : 0)) return 0;
    return 1;
}

/* Whether the next candidate's work would take the search past its
 * budget: a simulation, and with justify_each the justification too. */
static int over_budget(const order_search *g) {
    long long each = g->actions * (1 + (g->justify_each ? JUSTIFY_EACH_ACTIONS : 0));
    return g->work.actions + each > g->budget;
}

/* ------------------------------------------------------------------------ */
/* Building and pricing one candidate: what any thread may do */

/* One candidate after it is built and priced. */
typedef struct {
    int job;            /* its place in the candidate list */
    int state;          /* OUT_FREE, OUT_RUNNING, OUT_DONE, OUT_SKIPPED */
    int rc;             /* of building and pricing it; err says why */
    hy_error err;
    hy_schedule s;      /* when DONE with rc 0: owned here until decided */
    double makespan;
    int peak, peak_sum;
    int same_above;     /* below_caps of the lists as built */
    long long actions;  /* what it counts against the search's budget */
} outcome;

enum { OUT_FREE, OUT_RUNNING, OUT_DONE, OUT_SKIPPED };

/* Simulates s (built under knobs o, NULL for the canonical order or a
 * capped one) and, with justify_each, justifies it within the limit and
 * simulates it again; the figures go into *out, which takes s. Reads
 * only what stays fixed while candidates are built (g's p, c,
 * peak_limit, justify_each), so threads may call it at once. */
static int measure(const order_search *g, hy_schedule *s, const hy_sched_order *o,
                   outcome *out, hy_justify_scratch *w) {
    int rc = hy_simulate_reuse(s, g->c, NULL, &w->sim, &out->err);
    if (rc) {
        hy_schedule_free(s);
        return rc;
    }
    out->actions = (long long)hy_action_keys(s);
    out->same_above = o ? below_caps(g, o, s) : 0;   /* of the lists as built */
    /* Not the canonical order before the limit is known: a justification
     * without one could hold any memory. The winner is justified again
     * at the end, within the limit, whichever it is. */
    if (g->justify_each && g->peak_limit != NO_PEAK_LIMIT) {
        out->actions += JUSTIFY_EACH_ACTIONS * (long long)hy_action_keys(s);
        rc = hy_justify_simulated(s, g->c, g->peak_limit, JUSTIFY_ROUNDS, w, NULL, NULL,
                                  &out->err);
        if (!rc) rc = hy_simulate_reuse(s, g->c, NULL, &w->sim, &out->err);
        if (rc) {
            hy_schedule_free(s);
            return rc;
        }
    }
    out->peak = peak_of(&w->sim.result, &out->peak_sum);
    out->makespan = w->sim.result.makespan;
    out->s = *s;
    return HY_OK;
}

/* Counts out's work and keeps its order if it beats the best so far,
 * else frees it; known (its knobs' place, NULL for none) remembers it
 * for the next cap_extra. */
static void consider(order_search *g, outcome *out, priced *known) {
    g->work.orders++;
    g->work.actions += out->actions;
    if (known) *known = (priced){ out->same_above, out->makespan, out->peak, out->peak_sum };
    if (!beats(g, out->makespan, out->peak, out->peak_sum)) {
        hy_schedule_free(&out->s);
        return;
    }
    hy_schedule_free(&g->best);
    g->best = out->s;
    g->makespan = out->makespan;
    g->peak = out->peak;
    g->peak_sum = out->peak_sum;
}

/* The memory the canonical unsplit order of p needs at most on a rank:
 * the bound a candidate must keep to. Unsplit, that order is the first
 * candidate, g->best still. */
static int canonical_peak(order_search *g, hy_error *err) {
    const hy_sched_params *p = g->p;
    int peak = 0;
    if (p->split_backward) {
        hy_sched_params q = *p;
        q.split_backward = 0;
        hy_schedule s;
        if (hy_schedule_build(&s, &q, err)) return -1;
        for (int r = 0; r < s.ranks; r++) {
            int most = rank_peak(&s, r, HY_BWD);
            if (most > peak) peak = most;
        }
        hy_schedule_free(&s);
    } else {
        peak = g->peak;
    }
    if (p->kind == HY_SCHED_HANAYO) {
        /* Interleaved v = 2W's peak, which the canonical wave order meets
         * when M fills the pipeline and may undercut when it does not. */
        int bound = 2 * p->waves * p->ranks + p->ranks - 1;
        if (peak < bound) peak = bound;
    }
    return peak;
}

/* ------------------------------------------------------------------------ */
/* The candidates, listed before any is built */

/* One candidate: the merge's knobs (a V order among them), or the list
 * scheduler's. */
typedef struct {
    int capped;             /* the list scheduler's order co, else o's */
    hy_sched_order o;
    hy_capped_order co;
    int slot;               /* o's place in known[] (its knobs' in one cap_extra), -1: none */
    int prev;               /* the last candidate before it with that slot, -1: none */
    int always;             /* tried whatever the budget: the first capped order */
} candidate;

typedef struct {
    candidate *at;
    int n, room;
} cand_list;

static int cand_add(cand_list *l, candidate k) {
    if (l->n == l->room) {
        int room = l->room ? 2 * l->room : 256;
        candidate *at = realloc(l->at, (size_t)room * sizeof *at);
        if (!at) return -1;
        l->at = at;
        l->room = room;
    }
    l->at[l->n++] = k;
    return 0;
}

static int add_merge(cand_list *l, const hy_sched_order *o, int *slot) {
    assert(*slot < ORDER_PER_CAP);
    return cand_add(l, (candidate){ .o = *o, .slot = (*slot)++ });
}

/* Split hanayo with o's F/B knobs, the merge placing the W's itself: a W
 * filling waits of more than 0, 1/2 or 1 W, and the last stage or (from
 * P = 4) the last P/2 passing a full rank's cap. */
static int add_merged_wgrads(cand_list *l, const hy_sched_params *p, const hy_sched_order *o,
                             int *slot) {
    int P = p->ranks;
    for (int k = 1; k <= 3; k++)
        for (int t = 0; t < (P >= 4 ? 2 : 1); t++) {
            hy_sched_order m = *o;
            m.w_in_merge = k;
            m.cap_tail = t ? P / 2 : 1;
            if (add_merge(l, &m, slot)) return -1;
        }
    return 0;
}

/* The list scheduler's orders within the cap (capped.h): the cap split
 * among a rank's stages exactly, then with slack (a quarter, half, as
 * much again, any), ties going either way
 * and, split, other gaps a W may fill. None starves; the first is
 * always tried, the others while the budget lasts. */
static int add_capped(cand_list *l, const order_search *g) {
    static const double slack[] = { 0, 0.25, 0.5, 1, 1e9 };
    for (int k = 0; k < (int)(sizeof slack / sizeof slack[0]); k++)
        for (int deep = 1; deep >= 0; deep--)
            for (int bf = 0; bf <= 1; bf++)
                for (int gap = 0; gap <= (g->p->split_backward ? 2 : 0); gap++) {
                    candidate c = { .capped = 1, .slot = -1 };
                    c.co = (hy_capped_order){ .cap = g->cap, .slack = slack[k],
                                              .backward_first = bf, .deep_first = deep,
                                              .w_gap = gap };
                    c.always = k == 0 && deep == 1 && bf == 0 && gap == 0;
                    if (cand_add(l, c)) return -1;
                }
    return 0;
}

/* Every candidate after the canonical order, in the order tried (the
 * file comment's list); -1 when out of memory. */
static int list_candidates(const order_search *g, cand_list *l) {
    const hy_sched_params *p = g->p;
    int P = p->ranks, hanayo = p->kind == HY_SCHED_HANAYO, slot = 0;
    /* Split W = 1 is the V placement: its published orders beside ZB-V,
     * each the best of some budget (schedule.h). */
    if (p->split_backward && hanayo && p->waves == 1)
        for (int v = HY_V_DUALPIPE; v < HY_V_COUNT; v++) {
            hy_sched_order o = { .v_order = v };
            if ((v != HY_V_DUALPIPE || p->micro_batches >= 2 * P) && add_merge(l, &o, &slot))
                return -1;
        }
    if (g->cap > 0 && add_capped(l, g)) return -1;
    int wide = g->actions <= ORDER_SEARCH_ACTIONS;
    int group = hanayo ? 2 * p->waves * P : 0;
    int windows[3] = { group, 1, group / 2 };
    int max_extra = hanayo ? (wide ? P : 1) : 0;
    for (int extra = 0; extra <= max_extra; extra++) {
        slot = 0;   /* the same loops, in the same order, for every cap */
        for (int rises = 0; rises <= (hanayo ? 1 : 0); rises++)
            for (int w = 0; w < (hanayo && wide ? 3 : 1); w++)
              for (int bf = 0; bf <= (hanayo && wide ? 1 : 0); bf++)
                for (int slope = 0; slope <= (p->split_backward ? 2 : 0); slope++)
                    for (int b = 0; b <= (p->split_backward && wide ? 2 : 0); b++) {
                        hy_sched_order o = { .cap_extra = extra, .cap_rises = rises,
                                       .window = hanayo ? windows[w] : 0, .backward_first = bf,
                                       .defer_slope = slope, .defer_base = b };
                        if (add_merge(l, &o, &slot)) return -1;
                        /* once per F/B knob setting: no deferral to vary */
                        if (hanayo && p->split_backward && slope == 0 && b == 0 &&
                            add_merged_wgrads(l, p, &o, &slot))
                            return -1;
                    }
    }
    int last[ORDER_PER_CAP];
    for (int k = 0; k < ORDER_PER_CAP; k++) last[k] = -1;
    for (int i = 0; i < l->n; i++) {
        candidate *c = &l->at[i];
        c->prev = c->slot >= 0 ? last[c->slot] : -1;
        if (c->slot >= 0) last[c->slot] = i;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Threads building candidates ahead of the one deciding
 *
 * The choice is the serial one: one thread (the caller) decides on the
 * candidates in list order exactly as a single thread would, each one
 * skipped (its lists those of the last cap_extra, which did not win),
 * stopping the search (the budget), or weighed against the best so far.
 * Helper threads build and price the next candidates meanwhile, at most
 * twice their number past the last decided, so the outcome (the order chosen,
 * the work counted) is the same on any number of threads; what a helper
 * built that the decider skips or never reaches is dropped. */

/* Threads that build candidates at most, the caller among them. */
#define ORDER_THREADS_MAX 16

/* Outcomes held at once, at most: threads build at most twice their
 * number past the last decided candidate (pool.ahead). */
#define ORDER_AHEAD (2 * ORDER_THREADS_MAX)

/* Below this many actions in one order the caller builds every candidate
 * itself: such a search takes less than starting a thread. */
#define ORDER_THREAD_ACTIONS 2000

typedef struct {
    order_search *g;
    const candidate *list;
    int n;
    pthread_mutex_t lock;   /* over what follows, g's best, makespan, peaks and known */
    pthread_cond_t cv;      /* a candidate taken, built or decided, or the search ended */
    int next;               /* the first candidate no thread has taken */
    int decided;            /* candidates the decider is done with */
    int stop;               /* the search ended: take no more */
    int ahead;              /* how far past decided a thread may take: 2 x threads */
    outcome out[ORDER_AHEAD];   /* candidate i's at i % ORDER_AHEAD */
} pool;

typedef struct {
    pool *pl;
    pthread_t thread;
    scratch scratch;
} helper;

/* Whether candidate i's lists are those of its knobs at the last
 * cap_extra, which did not win: it is skipped unbuilt. Decided once
 * every candidate up to that last one is (k->prev < decided): the best
 * only gets better, so a candidate that would not beat it now will not
 * later (but for the tolerance in beats(), which decide allows for).
 * Under pl->lock. */
static int skipped(const pool *pl, int i) {
    const candidate *k = &pl->list[i];
    const priced *known = k->slot >= 0 ? &pl->g->known[k->slot] : NULL;
    return known && k->prev < pl->decided && known->same_above &&
           !beats(pl->g, known->makespan, known->peak, known->peak_sum);
}

/* Builds and prices candidate i (taken, its outcome's job) with scratch
 * w, the lock let go meanwhile. Under pl->lock. */
static void build(pool *pl, int i, scratch *w) {
    outcome *out = &pl->out[i % ORDER_AHEAD];
    assert(out->job == i);
    out->state = OUT_RUNNING;
    pthread_mutex_unlock(&pl->lock);
    const candidate *k = &pl->list[i];
    const order_search *g = pl->g;
    hy_schedule s;
    int rc = k->capped ? hy_capped_build(&s, g->p, g->c, &k->co, &out->err)
                       : hy_schedule_build_scratch(&s, g->p, g->c, &k->o, &w->merge, &out->err);
    if (!rc) rc = measure(g, &s, k->capped ? NULL : &k->o, out, &w->price);
    pthread_mutex_lock(&pl->lock);
    out->rc = rc;
    out->state = OUT_DONE;
    pthread_cond_broadcast(&pl->cv);
}

/* Takes the next candidate and builds it, unless it is to be skipped.
 * Under pl->lock. */
static void take_next(pool *pl, scratch *w) {
    int i = pl->next++;
    outcome *out = &pl->out[i % ORDER_AHEAD];
    assert(out->state == OUT_FREE);   /* its last candidate, i - ORDER_AHEAD or before, decided */
    out->job = i;
    if (skipped(pl, i)) out->state = OUT_SKIPPED;
    else build(pl, i, w);
}

/* Whether a thread may take the next candidate: there is one, and the
 * helpers are not more than `ahead` past the last decided. */
static int may_take(const pool *pl) {
    return pl->next < pl->n && pl->next < pl->decided + pl->ahead;
}

/* The decider: every candidate in list order, as the serial search
 * would (see above), building those no helper has taken, and others
 * ahead while a helper builds the one it waits for. Under pl->lock. */
static int decide(pool *pl, hy_error *err) {
    order_search *g = pl->g;
    for (int i = 0; i < pl->n; i++) {
        const candidate *k = &pl->list[i];
        outcome *out = &pl->out[i % ORDER_AHEAD];
        while (pl->next > i && out->state == OUT_RUNNING) {
            if (may_take(pl)) take_next(pl, &g->scratch);
            else pthread_cond_wait(&pl->cv, &pl->lock);
        }
        priced *known = k->slot >= 0 ? &g->known[k->slot] : NULL;
        if (known && known->same_above &&
            !beats(g, known->makespan, known->peak, known->peak_sum)) {
            if (pl->next == i) pl->next++;   /* never built */
            else if (out->state == OUT_DONE && out->rc == HY_OK) hy_schedule_free(&out->s);
        } else if (!k->always && over_budget(g)) {
            g->work.stopped = 1;   /* this one and every one after it */
            return HY_OK;
        } else {
            if (pl->next == i) {
                pl->next++;
                out->job = i;
            }
            /* Not taken yet, or skipped by a helper where the tolerance
             * in beats() let a better best admit it after all. */
            if (out->state != OUT_DONE) build(pl, i, &g->scratch);
            assert(out->job == i && out->state == OUT_DONE);
            if (out->rc) {
                if (err) *err = out->err;
                return out->rc;
            }
            consider(g, out, known);   /* takes its order or frees it */
        }
        out->state = OUT_FREE;
        pl->decided++;
        pthread_cond_broadcast(&pl->cv);
    }
    return HY_OK;
}

static void *helper_main(void *arg) {
    helper *h = arg;
    pool *pl = h->pl;
    pthread_mutex_lock(&pl->lock);
    while (!pl->stop) {
        if (may_take(pl)) take_next(pl, &h->scratch);
        else pthread_cond_wait(&pl->cv, &pl->lock);
    }
    pthread_mutex_unlock(&pl->lock);
    return NULL;
}

/* The threads the process may run on, at most ORDER_THREADS_MAX, or
 * `asked` when it is not 0. */
static int cpu_threads(int asked) {
    int n = asked;
    if (n <= 0) {
        cpu_set_t set;
        n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                        : (int)sysconf(_SC_NPROCESSORS_ONLN);
    }
    return n < 1 ? 1 : n > ORDER_THREADS_MAX ? ORDER_THREADS_MAX : n;
}

/* How many threads build candidates: `asked` (0: as many as this process
 * may run on, when the orders are large enough to be worth a thread),
 * at most ORDER_THREADS_MAX. */
static int order_threads(const order_search *g, int asked) {
    return asked <= 0 && g->actions < ORDER_THREAD_ACTIONS ? 1 : cpu_threads(asked);
}

/* Decides on the candidates of list, with up to threads - 1 helpers
 * building ahead (fewer if a thread cannot be started: the caller alone
 * makes the same choice). */
static int run_candidates(order_search *g, const cand_list *list, int threads, hy_error *err) {
    pool pl = { .g = g, .list = list->at, .n = list->n, .ahead = 2 * threads };
    helper h[ORDER_THREADS_MAX];
    int started = 0;
    pthread_mutex_init(&pl.lock, NULL);
    pthread_cond_init(&pl.cv, NULL);
    for (; started < threads - 1 && started < list->n; started++) {
        h[started] = (helper){ .pl = &pl };
        if (pthread_create(&h[started].thread, NULL, helper_main, &h[started]) != 0) break;
    }
    g->work.threads = started + 1;
    pthread_mutex_lock(&pl.lock);
    int rc = decide(&pl, err);
    pl.stop = 1;
    pthread_cond_broadcast(&pl.cv);
    pthread_mutex_unlock(&pl.lock);
    for (int t = 0; t < started; t++) {
        pthread_join(h[t].thread, NULL);
        scratch_free(&h[t].scratch);
    }
    /* What was built past the last candidate decided. */
    for (int k = 0; k < ORDER_AHEAD; k++)
        if (pl.out[k].state == OUT_DONE && pl.out[k].rc == HY_OK) hy_schedule_free(&pl.out[k].s);
    pthread_cond_destroy(&pl.cv);
    pthread_mutex_destroy(&pl.lock);
    return rc;
}

/* What the budget has left spent polishing the justified winner
 * (polish.h) on every CPU: its steps are much more work than a small
 * order's candidates. */
static int polish(order_search *g, int threads, hy_error *err) {
    if (g->work.actions >= g->budget) return HY_OK;
    hy_polish_stats st;
    int rc = hy_polish_schedule(&g->best, g->c, g->budget - g->work.actions,
                                cpu_threads(threads), &st, err);
    g->work.actions += st.actions;
    g->work.polish_steps = st.steps;
    if (st.threads > g->work.threads) g->work.threads = st.threads;
    return rc;
}

static int search(order_search *g, int threads, hy_error *err) {
    /* The canonical order first: always kept when there is no cap. */
    outcome first = { 0 };
    int rc = hy_schedule_build(&first.s, g->p, err);
    if (!rc) rc = measure(g, &first.s, NULL, &first, &g->scratch.price);
    if (rc) {
        if (err && first.err.status) *err = first.err;
        return rc;
    }
    consider(g, &first, NULL);
    if (g->cap == 0) {
        g->peak_limit = canonical_peak(g, err);
        if (g->peak_limit < 0) return err ? err->status : HY_ERR_RUNTIME;
    }
    cand_list list = { 0 };
    if (list_candidates(g, &list)) {
        free(list.at);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory listing the orders to try");
    }
    rc = run_candidates(g, &list, order_threads(g, threads), err);
    free(list.at);
    return rc;
}

int hy_order_schedule(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                          hy_error *err) {
    return hy_order_schedule_work(s, p, c, NULL, err);
}

int hy_order_schedule_work(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                           hy_order_work *work, hy_error *err) {
    return hy_order_schedule_threads(s, p, c, 0, work, err);
}

int hy_order_schedule_threads(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                              int threads, hy_order_work *work, hy_error *err) {
    if (work) *work = (hy_order_work){ 0 };
    int cap = p->max_activations, least = hy_sched_min_activations(p);
    memset(s, 0, sizeof *s);
    if (cap < 0 || (cap > 0 && cap < least))
        return hy_fail(err, HY_ERR_INPUT, "the activation cap (schedule.max_activations) of %d "
                       "per rank is below the smallest that runs, %d: one activation of each of "
                       "the %d stages a rank holds (0: no cap)", cap, least, least);
    hy_costs uniform = hy_costs_uniform_for(p->split_backward, 0);
    if (!c) c = &uniform;
    if (is_uniform(p, c)) {
        int rc = hy_schedule_build(s, p, err);
        if (rc || cap == 0 || schedule_peak(s) <= cap) return rc;
        hy_schedule_free(s);   /* the canonical order needs more: search within the cap */
    }
    int rc = hy_costs_check(c, 0, err);
    if (rc) return rc;
    order_search g = { .p = p, .c = c, .makespan = -1, .peak_limit = cap > 0 ? cap : NO_PEAK_LIMIT,
                       .cap = cap };
    g.actions = (long long)p->ranks *
                hy_sched_rank_actions(p->split_backward, hy_sched_chunks(p), p->micro_batches);
    g.budget = ORDER_SEARCH_ORDERS * g.actions > HY_ORDER_WORK ? ORDER_SEARCH_ORDERS * g.actions
                                                               : HY_ORDER_WORK;
    memset(&g.best, 0, sizeof g.best);
    double steps = (double)g.actions * ((double)g.actions / p->ranks);   /* a pass, at worst */
    int wants = p->kind == HY_SCHED_HANAYO || cap > 0;
    g.justify = wants && steps <= JUSTIFY_WORK;
    g.justify_each = g.justify && steps <= JUSTIFY_EACH_WORK;
    rc = search(&g, threads, err);
    scratch_free(&g.scratch);
    g.work.unjustified = wants && !g.justify;
    /* Hanayo, and any schedule within a cap: the justification closes
     * gaps the greedy replays left (justify.h), within the same memory,
     * and what the budget has left polishes the result (polish.h). */
    if (!rc && g.justify)
        rc = hy_justify_schedule(&g.best, c, g.peak_limit, JUSTIFY_ROUNDS, err);
    if (!rc && g.justify) rc = polish(&g, threads, err);
    if (work) *work = g.work;
    if (rc) {
        hy_schedule_free(&g.best);
        memset(s, 0, sizeof *s);
        return rc;
    }
    *s = g.best;
    return HY_OK;
}
