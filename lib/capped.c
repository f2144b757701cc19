/*
 * capped.c — see capped.h.
 *
 * The replay is an event loop like hanayo's merge (schedule.c): every
 * rank keeps its next choice (the action of its own that can start
 * first, with the time it starts), the rank whose choice starts first
 * (the lower rank of equals) runs it, and a choice is made again only
 * where it can change: on the rank that ran, and on the rank that got an
 * input from it. A choice looks at the next F, B and W of each stage the
 * rank holds, so a step costs a few times the stages per rank.
 */
#include "capped.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int op, stage;
    double t;   /* when it starts; INFINITY: nothing can */
} capped_choice;

typedef struct {
    const hy_schedule *s;
    const hy_costs *c;
    const hy_capped_order *o;
    int P, S, M, chunks;
    int *rank_stage;            /* [P * chunks]: rank r's stage of local chunk k */
    double *fend, *bend;        /* [M * S]: when F / B of (m, s) ended, -1 before */
    int *nf, *nb;               /* [S]: each stage's next F and B, in micro-batch order */
    int *live, *empty;          /* [P]: activations held; stages holding none */
    int *stage_live, *share;    /* [S]: activations each stage holds; the most it may */
    double *free_at;            /* [P] */
    hy_action *wq;              /* [P * chunks * M]: each rank's B's whose W has not run */
    int *whead, *wtail;         /* [P] */
    capped_choice *choice;      /* [P] */
} capped_state;

/* When an input made on stage `from` is there for stage `to`. */
static double arrival(const capped_state *g, double end, int from, int to) {
    return g->s->placement[from] != g->s->placement[to] ? end + g->c->comm : end;
}

/* Whether rank r may run a forward of stage st now: within the stage's
 * share, and leaving one activation free for each other stage of the
 * rank that holds none (capped.h). */
static int forward_fits(const capped_state *g, int r, int st) {
    int others_empty = g->empty[r] - (g->stage_live[st] == 0);
    assert(g->live[r] + g->empty[r] <= g->o->cap);   /* the oldest can always move */
    return g->stage_live[st] < g->share[st] && g->live[r] + 1 + others_empty <= g->o->cap;
}

/* An activation taken (d = 1) or given back (d = -1) on stage st. */
static void hold(capped_state *g, int st, int d) {
    int r = g->s->placement[st];
    g->empty[r] += (g->stage_live[st] + d == 0) - (g->stage_live[st] == 0);
    g->stage_live[st] += d;
    g->live[r] += d;
    assert(g->stage_live[st] >= 0 && g->live[r] <= g->o->cap);
}

/* Whether (op, stage) starting at t goes before the choice *best. */
static int before(const capped_state *g, int op, int stage, double t, const capped_choice *best) {
    if (best->op < 0 || t < best->t) return 1;
    if (t > best->t) return 0;
    if (op != best->op) return (op == HY_BWD) == (g->o->backward_first != 0);
    if (op == HY_FWD) return g->o->deep_first ? stage > best->stage : stage < best->stage;
    /* two backwards: the older micro-batch, then the deeper stage */
    int m = g->nb[stage], bm = g->nb[best->stage];
    return m < bm || (m == bm && stage > best->stage);
}

static capped_choice choose(const capped_state *g, int r) {
    capped_choice best = { -1, 0, INFINITY };
    double t0 = g->free_at[r];
    int S = g->S;
    for (int k = 0; k < g->chunks; k++) {
        int st = g->rank_stage[r * g->chunks + k], m = g->nb[st];
        if (m < g->nf[st]) {   /* its F has run: B(m, st) waits for the B after it */
            double t = g->fend[m * S + st];
            if (st + 1 < S) {
                double b = g->bend[m * S + st + 1];
                t = b < 0 ? -1 : fmax(t, arrival(g, b, st + 1, st));
            }
            if (t >= 0 && before(g, HY_BWD, st, fmax(t, t0), &best))
                best = (capped_choice){ HY_BWD, st, fmax(t, t0) };
        }
        m = g->nf[st];
        if (m < g->M && forward_fits(g, r, st)) {
            double t = 0;
            if (st > 0) {
                double f = g->fend[m * S + st - 1];
                t = f < 0 ? -1 : arrival(g, f, st - 1, st);
            }
            if (t >= 0 && before(g, HY_FWD, st, fmax(t, t0), &best))
                best = (capped_choice){ HY_FWD, st, fmax(t, t0) };
        }
    }
    /* A weight pass, ready once its B has run, fills a wait longer than
     * w_gap halves of it, and frees an activation. */
    if (g->whead[r] < g->wtail[r]) {
        const hy_action *w = &g->wq[(size_t)r * g->chunks * g->M + g->whead[r]];
        if (best.op < 0 || best.t > t0 + 0.5 * g->o->w_gap * hy_costs_wgrad(g->c, w->stage))
            best = (capped_choice){ HY_WGRAD, w->stage, t0 };
    }
    return best;
}

static void push(hy_schedule *s, int r, int op, int mb, int stage) {
    s->actions[r][s->n_actions[r]++] = (hy_action){ op, mb, stage };
}

/* Runs rank r's choice; returns the other rank that got an input from
 * it, or -1. */
static int run_choice(capped_state *g, hy_schedule *s, int r) {
    capped_choice ch = g->choice[r];
    int st = ch.stage, S = g->S, fed = -1;
    if (ch.op == HY_FWD) {
        int m = g->nf[st]++;
        hold(g, st, 1);
        g->fend[m * S + st] = g->free_at[r] = ch.t + hy_costs_fwd(g->c, st);
        push(s, r, HY_FWD, m, st);
        if (st + 1 < S) fed = s->placement[st + 1];
    } else if (ch.op == HY_BWD) {
        int m = g->nb[st]++;
        g->bend[m * S + st] = g->free_at[r] = ch.t + hy_costs_bwd(g->c, st);
        push(s, r, HY_BWD, m, st);
        if (s->split) {
            g->wq[(size_t)r * g->chunks * g->M + g->wtail[r]++] = (hy_action){ HY_WGRAD, m, st };
        } else {
            hold(g, st, -1);
        }
        if (st > 0) fed = s->placement[st - 1];
    } else {
        hy_action w = g->wq[(size_t)r * g->chunks * g->M + g->whead[r]++];
        g->free_at[r] = ch.t + hy_costs_wgrad(g->c, w.stage);
        hold(g, w.stage, -1);
        push(s, r, HY_WGRAD, w.mb, w.stage);
    }
    return fed != r ? fed : -1;
}

/* How long one micro-batch on its own holds its activation of each stage:
 * from its F's start, through the forwards and hops after it and the
 * backwards and hops back, to its B's end (split: its W's). */
static void lifetimes(const capped_state *g, double *life) {
    const hy_costs *c = g->c;
    double t = 0;
    for (int st = 0; st < g->S; st++) {
        life[st] = -t;   /* its F starts here */
        t += hy_costs_fwd(c, st);
        if (st + 1 < g->S) t = arrival(g, t, st, st + 1);
    }
    for (int st = g->S - 1; st >= 0; st--) {
        t += hy_costs_bwd(c, st);
        life[st] += t + (g->s->split ? hy_costs_wgrad(c, st) : 0);
        if (st > 0) t = arrival(g, t, st, st - 1);
    }
}

/* Each stage's share of the cap (capped.h): in proportion to its
 * lifetime, at least one; with no slack by largest remainders, so that a
 * rank's shares add up to the cap exactly. */
static int shares(capped_state *g) {
    double *life = malloc((size_t)g->S * sizeof(double));
    if (!life) return -1;
    lifetimes(g, life);
    int cap = g->o->cap, n = g->chunks;
    for (int r = 0; r < g->P; r++) {
        const int *rs = &g->rank_stage[r * n];
        double sum = 0;
        for (int k = 0; k < n; k++) sum += life[rs[k]] > 0 ? life[rs[k]] : 0;
        int given = 0;
        for (int k = 0; k < n; k++) {
            double want = sum > 0 ? (cap - n) * fmax(life[rs[k]], 0) / sum : (double)(cap - n) / n;
            want = fmin(want * (1 + g->o->slack), cap);
            int got = 1 + (int)floor(want);
            g->share[rs[k]] = got < cap ? got : cap;
            given += got - 1;
        }
        /* No slack: what the floors left goes one each to the stages
         * whose lifetimes were cut most, the first of equals. */
        while (g->o->slack == 0 && given < cap - n) {
            int most = 0;
            double cut = -1;
            for (int k = 0; k < n; k++) {
                double want = sum > 0 ? (cap - n) * fmax(life[rs[k]], 0) / sum
                                      : (double)(cap - n) / n;
                double c = want - (g->share[rs[k]] - 1);
                if (c > cut) {
                    cut = c;
                    most = k;
                }
            }
            g->share[rs[most]]++;
            given++;
        }
    }
    free(life);
    return 0;
}

static void state_free(capped_state *g) {
    free(g->rank_stage);
    free(g->fend);
    free(g->bend);
    free(g->nf);
    free(g->nb);
    free(g->live);
    free(g->empty);
    free(g->stage_live);
    free(g->share);
    free(g->free_at);
    free(g->wq);
    free(g->whead);
    free(g->wtail);
    free(g->choice);
}

static int state_init(capped_state *g, const hy_schedule *s, const hy_costs *c,
                      const hy_capped_order *o) {
    memset(g, 0, sizeof *g);
    g->s = s;
    g->c = c;
    g->o = o;
    g->P = s->ranks;
    g->S = s->stages;
    g->M = s->micro_batches;
    g->chunks = s->chunks;
    size_t P = (size_t)g->P, S = (size_t)g->S, MS = (size_t)g->M * S;
    g->rank_stage = malloc(S * sizeof(int));
    g->fend = malloc(MS * sizeof(double));
    g->bend = malloc(MS * sizeof(double));
    g->nf = calloc(S, sizeof(int));
    g->nb = calloc(S, sizeof(int));
    g->live = calloc(P, sizeof(int));
    g->empty = calloc(P, sizeof(int));
    g->stage_live = calloc(S, sizeof(int));
    g->share = calloc(S, sizeof(int));
    g->free_at = calloc(P, sizeof(double));
    g->wq = s->split ? malloc(P * (size_t)g->chunks * (size_t)g->M * sizeof(hy_action)) : NULL;
    g->whead = calloc(P, sizeof(int));
    g->wtail = calloc(P, sizeof(int));
    g->choice = malloc(P * sizeof(capped_choice));
    if (!g->rank_stage || !g->fend || !g->bend || !g->nf || !g->nb || !g->live || !g->empty ||
        !g->stage_live || !g->share ||
        !g->free_at || (s->split && !g->wq) || !g->whead || !g->wtail || !g->choice)
        return -1;
    for (size_t i = 0; i < MS; i++) g->fend[i] = g->bend[i] = -1;
    for (int st = 0; st < g->S; st++)
        g->rank_stage[s->placement[st] * g->chunks + hy_schedule_local_chunk(s, st)] = st;
    for (int r = 0; r < g->P; r++) g->empty[r] = g->chunks;
    return shares(g) ? -1 : 0;
}

int hy_capped_build(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                    const hy_capped_order *o, hy_error *err) {
    memset(s, 0, sizeof *s);
    int least = hy_sched_min_activations(p);
    if (o->cap < least)
        return hy_fail(err, HY_ERR_INPUT, "a cap of %d activations per rank is below the "
                       "smallest that runs, %d: one activation of each of the %d stages a "
                       "rank holds", o->cap, least, least);
    int rc = hy_schedule_empty(s, p, err);   /* the placement, and room for the lists */
    if (rc) return rc;
    hy_costs uniform = hy_costs_uniform_for(p->split_backward, 0);
    capped_state g;
    if (state_init(&g, s, c ? c : &uniform, o) != 0) {
        state_free(&g);
        hy_schedule_free(s);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory building a capped order");
    }
    long total = g.P * hy_sched_rank_actions(s->split, s->chunks, s->micro_batches);
    for (int r = 0; r < g.P; r++) g.choice[r] = choose(&g, r);
    for (long done = 0; done < total && rc == HY_OK; done++) {
        int r = 0;
        for (int k = 1; k < g.P; k++)
            if (g.choice[k].t < g.choice[r].t) r = k;
        assert(g.choice[r].op >= 0);   /* the oldest micro-batch can always move */
        int fed = run_choice(&g, s, r);
        g.choice[r] = choose(&g, r);
        if (fed >= 0) g.choice[fed] = choose(&g, fed);
    }
    state_free(&g);
    if (rc) hy_schedule_free(s);
    return rc;
}
