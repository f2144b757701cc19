/*
 * test_schedule.c — the schedule generators against DESIGN §1 "The schedules".
 *
 * Over a grid of (P, W|v, M): every schedule is complete, respects every
 * dependency and does not deadlock (hy_schedule_validate); gpipe, 1f1b and
 * interleaved reach their closed-form bubble and peak memory exactly;
 * hanayo's placement, transfers, bubble and peak memory are pinned at
 * every grid point, and it beats 1F1B everywhere. With split backward
 * (B and W passes) every schedule stays valid for any M, and the canonical
 * orders reach the split ideal with the memory the goals name:
 * 1F1B as ZB-H1 at 1F1B's P, hanayo W = 1 as ZB-V at 2P, W >= 2 within
 * unsplit hanayo's 2WP + P - 1. The validator itself is shown to catch
 * broken lists, and the dependencies it replays are pinned. A merge
 * scratch kept across builds changes no list.
 */
#include "schedule.h"
#include "sim.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static int build(hy_schedule *s, hy_sched_kind kind, int P, int wv, int M) {
    hy_sched_params p = { kind, P, M, wv, wv, 0, 0 };
    hy_error err;
    int rc = hy_schedule_build(s, &p, &err);
    if (rc) fprintf(stderr, "build %s P=%d W|v=%d M=%d: %s\n", hy_sched_name(kind), P, wv, M, err.msg);
    return rc;
}

static int max_peak(const hy_sim_result *r) {
    int pk = 0;
    for (int i = 0; i < r->ranks; i++)
        if (r->peak_activations[i] > pk) pk = r->peak_activations[i];
    return pk;
}

static int imin(int a, int b) { return a < b ? a : b; }

/* Validity and the exact closed forms of the three published schedules. */
static void test_published_closed_forms(void) {
    hy_costs c = hy_costs_uniform();
    for (int kind = HY_SCHED_GPIPE; kind <= HY_SCHED_INTERLEAVED; kind++)
    for (int P = 1; P <= 8; P++)
    for (int v = 1; v <= (kind == HY_SCHED_INTERLEAVED ? 4 : 1); v++)
    for (int M = 1; M <= 33; M++) {
        if (kind == HY_SCHED_INTERLEAVED && M % P) continue;
        hy_schedule s;
        if (build(&s, (hy_sched_kind)kind, P, v, M)) { CHECK(0); continue; }
        hy_error err;
        CHECKF(hy_schedule_validate(&s, &err) == HY_OK, "%s", err.msg);
        hy_sim_result r;
        if (hy_simulate(&s, &c, NULL, &r, &err) != HY_OK) { CHECK(0); hy_schedule_free(&s); continue; }
        double ideal = (P - 1.0) / ((double)v * M + P - 1.0);
        CHECKF(fabs(r.bubble - ideal) < 1e-12, "%s P=%d v=%d M=%d: bubble %.6f, closed form %.6f",
               hy_sched_name(kind), P, v, M, r.bubble, ideal);
        CHECK_NEAR(r.makespan, 3.0 * (v * M + P - 1), 1e-9);
        for (int rk = 0; rk < P; rk++) {
            int want = kind == HY_SCHED_GPIPE ? M
                     : kind == HY_SCHED_1F1B ? imin(P - rk, M)
                     : imin(2 * (P - 1 - rk) + (v - 1) * P + 1, v * M);
            CHECKF(r.peak_activations[rk] == want, "%s P=%d v=%d M=%d rank %d: peak %d, want %d",
                   hy_sched_name(kind), P, v, M, rk, r.peak_activations[rk], want);
        }
        int cross = P == 1 ? 0 : kind == HY_SCHED_INTERLEAVED ? v * P - 1 : P - 1;
        CHECK(r.transfers == 2 * M * cross);
        hy_sim_result_free(&r);
        hy_schedule_free(&s);
    }
}

/* DESIGN §1 "The schedules"'s wave placement, checked stage by stage. */
static void test_hanayo_placement(void) {
    for (int P = 1; P <= 8; P++)
    for (int W = 1; W <= 4; W++) {
        hy_schedule s;
        if (build(&s, HY_SCHED_HANAYO, P, W, P)) { CHECK(0); continue; }
        CHECK(s.stages == 2 * W * P && s.chunks == 2 * W);
        for (int st = 0; st < s.stages; st++) {
            int seg = st / P, j = st % P;
            CHECK(s.placement[st] == (seg % 2 == 0 ? j : P - 1 - j));
        }
        CHECK(s.placement[0] == 0 && s.placement[s.stages - 1] == 0);
        /* Turns are local: 2W-1 fewer cross-rank edges than interleaved. */
        int expect = P > 1 ? 2 * W * (P - 1) : 0;
        CHECK(hy_schedule_transfers(&s) == 2 * P * expect);
        hy_schedule_free(&s);
    }
}

/* M a multiple of P with M >= 2P, W = 1..4, P = 2..8: hanayo reaches the
 * ideal makespan (f+b)(2WM + P - 1) exactly (derived in
 * DESIGN §1.2 "The Hanayo wave order"), holds 2WP + r activations on rank
 * r (never more than interleaved v = 2W needs on its busiest rank,
 * 2WP + P - 1), and moves 2W(P-1) activations per micro-batch each way:
 * 2W - 1 fewer than interleaved's 2WP - 1. */
static void test_hanayo_grid(void) {
    hy_costs c = hy_costs_uniform();
    for (int P = 2; P <= 8; P++)
    for (int W = 1; W <= 4; W++)
    for (int k = 2; k <= 8; k++) {
        int M = k * P, v = 2 * W;
        hy_schedule s;
        if (build(&s, HY_SCHED_HANAYO, P, W, M)) { CHECK(0); continue; }
        hy_error err;
        CHECKF(hy_schedule_validate(&s, &err) == HY_OK, "%s", err.msg);
        hy_sim_result r;
        if (hy_simulate(&s, &c, NULL, &r, &err) != HY_OK) { CHECK(0); hy_schedule_free(&s); continue; }
        CHECKF(fabs(r.makespan - 3.0 * (v * M + P - 1)) < 1e-9,
               "hanayo P=%d W=%d M=%d: makespan %.0f, ideal %d", P, W, M, r.makespan,
               3 * (v * M + P - 1));
        CHECKF(fabs(r.bubble - hy_ideal_bubble(&s)) < 1e-12,
               "hanayo P=%d W=%d M=%d: bubble %.6f, ideal %.6f", P, W, M, r.bubble,
               hy_ideal_bubble(&s));
        CHECK(r.bubble < (P - 1.0) / (M + P - 1.0));
        for (int rk = 0; rk < P; rk++)
            CHECKF(r.peak_activations[rk] == v * P + rk, "hanayo P=%d W=%d M=%d rank %d: peak %d",
                   P, W, M, rk, r.peak_activations[rk]);
        CHECK(max_peak(&r) <= 2 * (P - 1) + (v - 1) * P + 1);
        CHECK(r.transfers == 2 * M * 2 * W * (P - 1));
        CHECK(2 * M * (v * P - 1) - r.transfers == 2 * M * (2 * W - 1));
        hy_sim_result_free(&r);
        hy_schedule_free(&s);
    }
}

static int build_split(hy_schedule *s, hy_sched_kind kind, int P, int wv, int M) {
    hy_sched_params p = { kind, P, M, wv, wv, 1, 0 };
    hy_error err;
    int rc = hy_schedule_build(s, &p, &err);
    if (rc) fprintf(stderr, "build split %s P=%d W|v=%d M=%d: %s\n", hy_sched_name(kind), P, wv,
                    M, err.msg);
    return rc;
}

/* Every schedule with split backward, any M up to 2P + 3 and some larger:
 * complete (every F, B and W once), each W after its B on the same rank,
 * no deadlock; the same work as unsplit, so under f = B = W = 1 never
 * slower than the unsplit order under f = 1, b = 2. */
static void test_split_valid(void) {
    hy_costs split = hy_costs_uniform_split(), whole = hy_costs_uniform();
    for (int kind = 0; kind < HY_SCHED_COUNT; kind++)
    for (int P = 1; P <= 8; P++)
    for (int wv = 1; wv <= 3; wv++)
    for (int M = 1; M <= 2 * P + 3 || M == 8 * P; M = M <= 2 * P + 3 ? M + 1 : 8 * P) {
        if (kind == HY_SCHED_INTERLEAVED && M % P) continue;
        if ((kind == HY_SCHED_GPIPE || kind == HY_SCHED_1F1B) && wv > 1) continue;
        hy_schedule s, u;
        if (build_split(&s, (hy_sched_kind)kind, P, wv, M)) { CHECK(0); continue; }
        if (build(&u, (hy_sched_kind)kind, P, wv, M)) { CHECK(0); hy_schedule_free(&s); continue; }
        hy_error err;
        CHECKF(s.split && hy_schedule_validate(&s, &err) == HY_OK, "%s P=%d W|v=%d M=%d: %s",
               hy_sched_name(kind), P, wv, M, err.msg);
        int counts = 1;
        for (int r = 0; r < P; r++) counts &= s.n_actions[r] == 3 * s.chunks * M;
        CHECK(counts);
        hy_sim_result r, q;
        if (hy_simulate(&s, &split, NULL, &r, &err) == HY_OK) {
            if (hy_simulate(&u, &whole, NULL, &q, &err) == HY_OK) {
                CHECKF(r.makespan <= q.makespan + 1e-9, "%s P=%d W|v=%d M=%d: split %.2f, "
                       "unsplit %.2f", hy_sched_name(kind), P, wv, M, r.makespan, q.makespan);
                hy_sim_result_free(&q);
            }
            CHECKF(r.makespan >= r.bound - 1e-9, "below its bound");
            hy_sim_result_free(&r);
        } else {
            CHECKF(0, "%s", err.msg);
        }
        hy_schedule_free(&s);
        hy_schedule_free(&u);
    }
}

/* The goals under f = B = W = 1, c = 0, M in {2P, 4P, 8P}, P in {2, 4, 8}:
 * the split ideal (P-1)/(3vM + P-1), reached by 1F1B (ZB-H1) holding P
 * activations on every rank, by hanayo W = 1 (ZB-V) holding 2P, and by
 * hanayo W = 2 within unsplit hanayo's 2WP + P - 1, below ZB-V's bubble.
 * E.g. 0.0680 at P = 8, M = 16 for ZB-V, where unsplit hanayo W = 1 has
 * 0.1795. */
static void test_split_goals(void) {
    hy_costs c = hy_costs_uniform_split();
    for (int P = 2; P <= 8; P *= 2)
    for (int k = 2; k <= 8; k *= 2) {
        int M = k * P;
        struct { hy_sched_kind kind; int wv, chunks, peak; } want[] = {
            { HY_SCHED_1F1B, 1, 1, P },
            { HY_SCHED_HANAYO, 1, 2, 2 * P },
            { HY_SCHED_HANAYO, 2, 4, 4 * P + P - 1 },
        };
        double zbv = 0;
        for (int i = 0; i < 3; i++) {
            hy_schedule s;
            if (build_split(&s, want[i].kind, P, want[i].wv, M)) { CHECK(0); continue; }
            hy_sim_result r;
            hy_error err;
            if (hy_simulate(&s, &c, NULL, &r, &err) != HY_OK) { CHECK(0); hy_schedule_free(&s); continue; }
            double ideal = (P - 1.0) / (3.0 * want[i].chunks * M + P - 1.0);
            CHECKF(fabs(r.bubble - ideal) < 1e-12 && fabs(r.bubble - hy_ideal_bubble(&s)) < 1e-12,
                   "%s W|v=%d P=%d M=%d split: bubble %.4f, ideal %.4f", hy_sched_name(want[i].kind),
                   want[i].wv, P, M, r.bubble, ideal);
            CHECKF(fabs(r.makespan - r.bound) < 1e-9, "at its bound");
            CHECKF(max_peak(&r) <= want[i].peak, "%s W|v=%d P=%d M=%d split: peak %d, goal %d",
                   hy_sched_name(want[i].kind), want[i].wv, P, M, max_peak(&r), want[i].peak);
            if (want[i].kind == HY_SCHED_HANAYO && want[i].wv == 1) {
                zbv = r.bubble;
                for (int rk = 0; rk < P; rk++) CHECK(r.peak_activations[rk] == 2 * P);
            }
            if (want[i].kind == HY_SCHED_HANAYO && want[i].wv == 2) CHECK(r.bubble < zbv);
            if (want[i].kind == HY_SCHED_1F1B)
                for (int rk = 0; rk < P; rk++) CHECK(r.peak_activations[rk] == P);
            hy_sim_result_free(&r);
            hy_schedule_free(&s);
        }
        if (P == 8 && M == 16) CHECK(fabs(zbv - 7.0 / 103.0) < 1e-12);
    }
}

/* Outside that regime (any M, P = 1) hanayo is still valid and never
 * worse than 1F1B. */
static void test_hanayo_any_m(void) {
    hy_costs c = hy_costs_uniform();
    for (int P = 1; P <= 8; P++)
    for (int W = 1; W <= 3; W++)
    for (int M = 1; M <= 2 * P + 3; M++) {
        hy_schedule s;
        if (build(&s, HY_SCHED_HANAYO, P, W, M)) { CHECK(0); continue; }
        hy_error err;
        CHECKF(hy_schedule_validate(&s, &err) == HY_OK, "P=%d W=%d M=%d: %s", P, W, M, err.msg);
        hy_sim_result r;
        if (hy_simulate(&s, &c, NULL, &r, &err) == HY_OK) {
            CHECKF(r.bubble <= (P - 1.0) / (M + P - 1.0) + 1e-12,
                   "hanayo P=%d W=%d M=%d: bubble %.4f above 1F1B's", P, W, M, r.bubble);
            if (P == 1) CHECK(r.bubble == 0.0);
            hy_sim_result_free(&r);
        }
        hy_schedule_free(&s);
    }
}

/* Pure function: two builds give the same lists. */
static void test_deterministic(void) {
    hy_schedule a, b;
    if (build(&a, HY_SCHED_HANAYO, 4, 2, 16) || build(&b, HY_SCHED_HANAYO, 4, 2, 16)) {
        CHECK(0);
        return;
    }
    CHECK(hy_schedule_equal(&a, &b));
    hy_schedule_free(&a);
    hy_schedule_free(&b);
}

/* A scratch kept across builds (what the order search does) gives the
 * lists a build without one gives, whatever came before it: other shapes,
 * the merge placing the W's or not, other costs and knobs. */
static void test_scratch_reuse(void) {
    static const struct { int P, W, M, split, w_in_merge, window, cap_extra; double comm; } seq[] = {
        { 4, 2, 16, 1, 2, 0, 0, 0.2 },  { 4, 2, 16, 0, 0, 1, 1, 0.05 }, { 4, 2, 16, 1, 0, 0, 2, 0.5 },
        { 8, 1, 64, 1, 3, 8, 0, 0.2 },  { 4, 2, 16, 1, 1, 4, 0, 0.2 },  { 2, 3, 7, 0, 0, 1, 0, 0.3 },
        { 8, 2, 40, 1, 2, 1, 3, 0.05 }, { 8, 2, 40, 1, 0, 16, 0, 0.2 }, { 8, 2, 40, 1, 2, 0, 1, 0.5 },
    };
    hy_sched_scratch w = { NULL };
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        hy_sched_params p = { HY_SCHED_HANAYO, seq[i].P, seq[i].M, seq[i].W, 1, seq[i].split, 0 };
        hy_costs c = hy_costs_uniform_for(seq[i].split, seq[i].comm);
        hy_sched_order o;
        hy_sched_order_default(&p, &o);
        o.zbv = 0;
        o.w_in_merge = seq[i].w_in_merge;
        o.window = seq[i].window;
        o.cap_extra = seq[i].cap_extra;
        hy_schedule a, b;
        hy_error err;
        if (hy_schedule_build_scratch(&a, &p, &c, &o, &w, &err)) { CHECK(0); continue; }
        if (hy_schedule_build_order(&b, &p, &c, &o, &err)) { CHECK(0); hy_schedule_free(&a); continue; }
        CHECKF(hy_schedule_equal(&a, &b), "build %zu (P=%d W=%d M=%d) with the scratch differs", i, seq[i].P, seq[i].W,
               seq[i].M);
        CHECK(hy_schedule_validate(&a, &err) == HY_OK);
        hy_schedule_free(&a);
        hy_schedule_free(&b);
    }
    hy_sched_scratch_free(&w);
    CHECK(w.merge == NULL);
}

/* The validator catches each kind of broken list. */
static void test_validator_catches(void) {
    hy_schedule s;
    hy_error err;
    if (build(&s, HY_SCHED_1F1B, 4, 1, 8)) { CHECK(0); return; }
    hy_action keep = s.actions[2][0];
    s.actions[2][0] = s.actions[2][1];            /* duplicate, and one missing */
    CHECK(hy_schedule_validate(&s, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "twice") != NULL);
    s.actions[2][0] = keep;
    CHECK(hy_schedule_validate(&s, &err) == HY_OK);

    s.actions[1][0].stage = 2;                     /* stage on the wrong rank */
    CHECK(hy_schedule_validate(&s, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "lives on rank 2") != NULL);
    s.actions[1][0].stage = 1;

    /* Backward before its forward on the same rank: a deadlock. */
    hy_action *l = s.actions[3];
    hy_action t = l[0]; l[0] = l[1]; l[1] = t;     /* rank 3: B m0 before F m0 */
    CHECK(hy_schedule_validate(&s, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "deadlock") != NULL);
    CHECK(strstr(err.msg, "rank 3 waits at B m0 s3") != NULL);
    hy_schedule_free(&s);
}

/* The dependencies as stated, and a dense, one-to-one action key. */
static void test_dependencies(void) {
    hy_schedule s;
    if (build(&s, HY_SCHED_HANAYO, 2, 1, 3)) { CHECK(0); return; }   /* S = 4 */
    hy_action in[HY_MAX_INPUTS];
    hy_action a = { HY_FWD, 2, 0 };
    CHECK(hy_action_inputs(&s, &a, in) == 0);
    a.stage = 3;
    CHECK(hy_action_inputs(&s, &a, in) == 1);
    CHECK(in[0].op == HY_FWD && in[0].mb == 2 && in[0].stage == 2);
    a.op = HY_BWD;
    CHECK(hy_action_inputs(&s, &a, in) == 1);
    CHECK(in[0].op == HY_FWD && in[0].mb == 2 && in[0].stage == 3);
    a.stage = 1;
    CHECK(hy_action_inputs(&s, &a, in) == 2);
    CHECK(in[0].op == HY_FWD && in[0].mb == 2 && in[0].stage == 1);
    CHECK(in[1].op == HY_BWD && in[1].mb == 2 && in[1].stage == 2);
    size_t n = hy_action_keys(&s);
    CHECK(n == 2 * 3 * 4);
    char *hit = calloc(n, 1);
    int dense = 1;
    for (int r = 0; r < s.ranks; r++)
        for (int i = 0; i < s.n_actions[r]; i++) {
            size_t k = hy_action_key(&s, &s.actions[r][i]);
            dense &= k < n && !hit[k];
            if (k < n) hit[k] = 1;
        }
    CHECK(dense);
    free(hit);
    hy_schedule_free(&s);
}

static void test_bad_params(void) {
    hy_schedule s;
    hy_error err;
    hy_sched_params p = { HY_SCHED_INTERLEAVED, 4, 6, 1, 2, 0, 0 };
    CHECK(hy_schedule_build(&s, &p, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "multiple of ranks") != NULL);
    p = (hy_sched_params){ HY_SCHED_HANAYO, 0, 8, 1, 1, 0, 0 };
    CHECK(hy_schedule_build(&s, &p, &err) == HY_ERR_INPUT);
    p = (hy_sched_params){ HY_SCHED_HANAYO, 4, 8, 0, 1, 0, 0 };
    CHECK(hy_schedule_build(&s, &p, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "waves") != NULL);
    hy_sched_kind k;
    CHECK(hy_sched_parse("hanayo", &k, &err) == HY_OK && k == HY_SCHED_HANAYO);
    CHECK(hy_sched_parse("zb-v", &k, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "gpipe, 1f1b, interleaved, hanayo") != NULL);
}

int main(void) {
    test_split_valid();
    test_split_goals();
    test_published_closed_forms();
    test_hanayo_placement();
    test_hanayo_grid();
    test_hanayo_any_m();
    test_deterministic();
    test_scratch_reuse();
    test_validator_catches();
    test_dependencies();
    test_bad_params();
    return TEST_END("schedule");
}
