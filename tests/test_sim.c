/*
 * test_sim.c — the event simulator against timelines worked by hand.
 *
 * 1F1B with P = 2, M = 2 is small enough to write out every action's start
 * and end: with uniform costs, with a transfer cost, and with per-stage
 * costs, and held back by a slot limit. Plus the bubble and peak
 * definitions, the lower bound at a memory, deadlock reports and bad
 * costs.
 */
#include "schedule.h"
#include "sim.h"
#include "test.h"

#include <string.h>

static void expect_times(const hy_sim_result *r, int rank, const double *se, int n) {
    for (int i = 0; i < n; i++) {
        CHECK_NEAR(r->start[rank][i], se[2 * i], 1e-12);
        CHECK_NEAR(r->end[rank][i], se[2 * i + 1], 1e-12);
    }
}

static hy_schedule one_f_one_b(int P, int M) {
    hy_schedule s;
    hy_sched_params p = { HY_SCHED_1F1B, P, M, 1, 1, 0, 0 };
    hy_error err;
    if (hy_schedule_build(&s, &p, &err) != HY_OK) fprintf(stderr, "%s\n", err.msg);
    return s;
}

/* rank 0: F0 F1 B0 B1; rank 1: F0 B0 F1 B1. */
static void test_uniform(void) {
    hy_schedule s = one_f_one_b(2, 2);
    hy_costs c = hy_costs_uniform();
    hy_sim_result r;
    CHECK(hy_simulate(&s, &c, NULL, &r, NULL) == HY_OK);
    const double r0[] = { 0, 1, 1, 2, 4, 6, 7, 9 };
    const double r1[] = { 1, 2, 2, 4, 4, 5, 5, 7 };
    expect_times(&r, 0, r0, 4);
    expect_times(&r, 1, r1, 4);
    CHECK_NEAR(r.makespan, 9, 1e-12);
    CHECK_NEAR(r.bubble, 1.0 - 12.0 / 18.0, 1e-12);
    CHECK_NEAR(r.busy[0], 6, 1e-12);
    CHECK(r.peak_activations[0] == 2 && r.peak_activations[1] == 1);
    CHECK(r.transfers == 4);
    hy_sim_result_free(&r);
    hy_schedule_free(&s);
}

/* A transfer costs 0.5: every cross-rank input arrives half a unit late. */
static void test_comm(void) {
    hy_schedule s = one_f_one_b(2, 2);
    hy_costs c = hy_costs_uniform();
    c.comm = 0.5;
    hy_sim_result r;
    CHECK(hy_simulate(&s, &c, NULL, &r, NULL) == HY_OK);
    const double r0[] = { 0, 1, 1, 2, 5, 7, 8, 10 };
    const double r1[] = { 1.5, 2.5, 2.5, 4.5, 4.5, 5.5, 5.5, 7.5 };
    expect_times(&r, 0, r0, 4);
    expect_times(&r, 1, r1, 4);
    CHECK_NEAR(r.makespan, 10, 1e-12);
    hy_sim_result_free(&r);
    hy_schedule_free(&s);
}

/* Measured costs per stage: stage 1 has a slow forward and a fast backward. */
static void test_per_stage(void) {
    hy_schedule s = one_f_one_b(2, 2);
    const double fwd[] = { 1, 3 }, bwd[] = { 2, 1 };
    hy_costs c = hy_costs_uniform();
    c.fwd_stage = fwd;
    c.bwd_stage = bwd;
    hy_sim_result r;
    CHECK(hy_simulate(&s, &c, NULL, &r, NULL) == HY_OK);
    const double r0[] = { 0, 1, 1, 2, 5, 7, 9, 11 };
    const double r1[] = { 1, 4, 4, 5, 5, 8, 8, 9 };
    expect_times(&r, 0, r0, 4);
    expect_times(&r, 1, r1, 4);
    CHECK_NEAR(r.makespan, 11, 1e-12);
    CHECK_NEAR(r.bubble, 1.0 - 14.0 / 22.0, 1e-12);
    hy_sim_result_free(&r);
    hy_schedule_free(&s);
}

static void test_gpipe_peak(void) {
    hy_schedule s;
    hy_sched_params p = { HY_SCHED_GPIPE, 3, 5, 1, 1, 0, 0 };
    CHECK(hy_schedule_build(&s, &p, NULL) == HY_OK);
    hy_costs c = hy_costs_uniform();
    hy_sim_result r;
    CHECK(hy_simulate(&s, &c, NULL, &r, NULL) == HY_OK);
    for (int k = 0; k < 3; k++) CHECK(r.peak_activations[k] == 5);
    CHECK_NEAR(r.bubble, 2.0 / 7.0, 1e-12);
    hy_sim_result_free(&r);
    hy_schedule_free(&s);
}

static void test_deadlock_and_bad_costs(void) {
    hy_schedule s = one_f_one_b(2, 2);
    hy_error err;
    hy_sim_result r;
    /* rank 0 starts with B0, whose forward comes later on the same rank. */
    hy_action t = s.actions[0][0];
    s.actions[0][0] = s.actions[0][2];
    s.actions[0][2] = t;
    hy_costs c = hy_costs_uniform();
    CHECK(hy_simulate(&s, &c, NULL, &r, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "rank 0 waits at B m0 s0") != NULL);
    CHECK(strstr(err.msg, "rank 1 waits at F m0 s1") != NULL);
    s.actions[0][2] = s.actions[0][0];
    s.actions[0][0] = t;

    c.comm = -1;
    CHECK(hy_simulate(&s, &c, NULL, &r, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "transfer cost") != NULL);
    c = hy_costs_uniform();
    const double fwd[] = { 1, NAN };
    c.fwd_stage = fwd;
    CHECK(hy_simulate(&s, &c, NULL, &r, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "stage 1") != NULL);
    hy_schedule_free(&s);
}

/* Slot limits, as plain data: rank 0's F1 may not hand its output over
 * before B(m0, s1) has freed the slot (one slot on the edge). rank 0:
 * F0 [0,1], F1 [1,4] (computed at 2, handed over at 4), B0 [4,6], B1
 * [7,9]; rank 1: F0 [1,2], B0 [2,4], F1 [4,5], B1 [5,7]. The wait is not
 * busy time, and with uniform costs the makespan is unchanged. */
static void test_limits(void) {
    hy_schedule s = one_f_one_b(2, 2);
    hy_costs c = hy_costs_uniform();
    hy_error err;
    hy_sim_limits lim;
    CHECK(hy_sim_limits_init(&lim, &s, &err) == HY_OK);
    hy_sim_result r;
    CHECK(hy_simulate(&s, &c, &lim, &r, &err) == HY_OK);   /* nothing held back */
    const double u0[] = { 0, 1, 1, 2, 4, 6, 7, 9 };
    expect_times(&r, 0, u0, 4);
    hy_sim_result_free(&r);

    lim.freed_by[0][1] = (hy_action){ HY_BWD, 0, 1 };
    CHECK(hy_simulate(&s, &c, &lim, &r, &err) == HY_OK);
    const double r0[] = { 0, 1, 1, 4, 4, 6, 7, 9 };
    const double r1[] = { 1, 2, 2, 4, 4, 5, 5, 7 };
    expect_times(&r, 0, r0, 4);
    expect_times(&r, 1, r1, 4);
    CHECK_NEAR(r.makespan, 9, 1e-12);
    CHECK_NEAR(r.busy[0], 6, 1e-12);
    hy_sim_result_free(&r);

    /* With c = 0.5, rank 1's B0 ends at 4.5 (test_comm), so does rank 0's
     * F1, and rank 1's F1 gets its input c after that hand-over. */
    c.comm = 0.5;
    CHECK(hy_simulate(&s, &c, &lim, &r, &err) == HY_OK);
    CHECK_NEAR(r.end[0][1], 4.5, 1e-12);
    CHECK_NEAR(r.start[1][2], 5, 1e-12);
    hy_sim_result_free(&r);

    /* A slot freed only by an action that needs this one: a deadlock. */
    c = hy_costs_uniform();
    lim.freed_by[0][1] = (hy_action){ HY_FWD, 1, 1 };
    CHECK(hy_simulate(&s, &c, &lim, &r, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "slot limits") != NULL);
    CHECK(strstr(err.msg, "rank 0 waits at F m1 s0") != NULL);
    hy_sim_limits_free(&lim);
    hy_schedule_free(&s);
}

/* The bound at a memory, worked by hand for hanayo P = 8, W = 2 (32
 * stages; a rank share f = 1, b = 2, so 0.25 and 0.5 a stage), M = 32,
 * c = 0.05. Rank 7 holds stages 7, 8, 23, 24: its first input can come at
 * 7 x (0.25 + 0.05) = 2.1; its first backward, B(0, 24), after the 32
 * forwards and 28 hops to stage 31 (9.4) and seven backwards and hops
 * back (3.85): 13.25. Holding 39 activations it can fill 39 x 0.25 = 9.75
 * of the 11.15 between, so it waits 3.5 in all before that backward; then
 * its work, 96, and the seven backwards and hops to stage 0 after its
 * last one, 3.85: 103.35. Without a memory limit: 2.1 + 96 + 3.85. A
 * larger memory never raises the bound, and 1F1B (P = 2, M = 2) holding
 * its own peak is bound as without a limit. */
static void test_memory_bound(void) {
    hy_schedule s;
    hy_sched_params p = { HY_SCHED_HANAYO, 8, 32, 2, 1, 0, 0 };
    hy_error err;
    CHECK(hy_schedule_build(&s, &p, &err) == HY_OK);
    hy_costs c = hy_costs_uniform();
    c.fwd = 0.25;
    c.bwd = 0.5;
    c.comm = 0.05;
    CHECK_NEAR(hy_makespan_bound(&s, &c), 2.1 + 96 + 3.85, 1e-9);
    CHECK_NEAR(hy_makespan_bound_memory(&s, &c, 0), 2.1 + 96 + 3.85, 1e-9);
    CHECK_NEAR(hy_makespan_bound_memory(&s, &c, 39), 3.5 + 96 + 3.85, 1e-9);
    double prev = hy_makespan_bound_memory(&s, &c, 1);
    for (int L = 2; L <= 64; L++) {
        double b = hy_makespan_bound_memory(&s, &c, L);
        CHECKF(b <= prev + 1e-12 && b >= hy_makespan_bound(&s, &c) - 1e-12, "L = %d: %g", L, b);
        prev = b;
    }
    hy_schedule_free(&s);
    hy_schedule t = one_f_one_b(2, 2);
    hy_costs u = hy_costs_uniform();
    hy_sim_result r;
    CHECK(hy_simulate(&t, &u, NULL, &r, NULL) == HY_OK);
    CHECK_NEAR(r.bound_memory, r.bound, 1e-12);
    CHECK(r.makespan >= r.bound_memory - 1e-12);
    hy_sim_result_free(&r);
    hy_schedule_free(&t);
}

/* One scratch over several schedules (hy_simulate_reuse): each result
 * equals hy_simulate's to the last bit, a scratch sized for another shape
 * is sized again, and a deadlock with no error to write is HY_ERR_INPUT
 * all the same. */
static void test_reuse(void) {
    hy_sim_scratch w = { 0 };
    hy_costs c = hy_costs_uniform();
    c.comm = 0.25;
    const int shapes[][2] = { { 2, 2 }, { 4, 8 }, { 4, 8 }, { 2, 2 }, { 3, 5 } };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        hy_schedule s = one_f_one_b(shapes[k][0], shapes[k][1]);
        hy_sim_result r;
        hy_error err;
        CHECK(hy_simulate(&s, &c, NULL, &r, &err) == HY_OK);
        CHECK(hy_simulate_reuse(&s, &c, NULL, &w, &err) == HY_OK);
        const hy_sim_result *u = &w.result;
        int same = u->ranks == r.ranks && u->makespan == r.makespan && u->bubble == r.bubble &&
                   u->transfers == r.transfers && u->bound == r.bound &&
                   u->bound_memory == r.bound_memory;
        for (int q = 0; same && q < s.ranks; q++) {
            same = u->busy[q] == r.busy[q] && u->peak_activations[q] == r.peak_activations[q];
            for (int i = 0; same && i < s.n_actions[q]; i++)
                same = u->start[q][i] == r.start[q][i] && u->end[q][i] == r.end[q][i];
        }
        CHECKF(same, "P=%d M=%d: the reused simulation differs", shapes[k][0], shapes[k][1]);
        hy_sim_result_free(&r);
        if (k == 1) {   /* a deadlock in between: rank 0 starts with a backward */
            hy_action t = s.actions[0][0];
            s.actions[0][0] = s.actions[0][s.n_actions[0] - 1];
            s.actions[0][s.n_actions[0] - 1] = t;
            CHECK(hy_simulate_reuse(&s, &c, NULL, &w, NULL) == HY_ERR_INPUT);
            CHECK(hy_simulate_reuse(&s, &c, NULL, &w, &err) == HY_ERR_INPUT &&
                  strstr(err.msg, "deadlocks") != NULL);
        }
        hy_schedule_free(&s);
    }
    hy_sim_scratch_free(&w);
    hy_sim_scratch_free(&w);   /* freed twice: nothing left to free */
}

int main(void) {
    test_uniform();
    test_memory_bound();
    test_comm();
    test_per_stage();
    test_gpipe_peak();
    test_deadlock_and_bad_costs();
    test_limits();
    test_reuse();
    return TEST_END("sim");
}
