/*
 * test_scale.c — data parallelism priced on paper (scale.h) against
 * timelines worked by hand.
 *
 * 1F1B with P = 2, M = 2 under uniform costs (test_sim.c's timeline: rank
 * 0 ends its last backward at 9, rank 1 at 7): each rank's one stage sums
 * its gradients after that, so the step is the later rank's end plus its
 * ring all-reduce. Then hanayo, where rank 0 holds two stages whose sums
 * run one after the other; the all-reduce formula itself; parsing of the
 * replica counts; bad links.
 */
#include "scale.h"
#include "schedule.h"
#include "sim.h"
#include "test.h"

#include <string.h>

static int build(hy_schedule *s, hy_sim_result *r, hy_sched_kind kind) {
    hy_sched_params p = { kind, 2, 2, 1, 1, 0, 0 };
    hy_costs c = hy_costs_uniform();
    hy_error err;
    if (hy_schedule_build(s, &p, &err) != HY_OK || hy_simulate(s, &c, NULL, r, &err) != HY_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 0;
}

/* 8 Gb/s: a byte takes 1 ns on the wire, so N = 2 sums B bytes in B us. */
static const hy_scale_link LINK = { .gbps = 8, .latency_us = 0, .ms_per_unit = 1,
                                    .tokens_per_replica = 100 };

static void test_formula(void) {
    CHECK_NEAR(hy_scale_allreduce_ms(&LINK, 1, 1e9), 0, 0);
    CHECK_NEAR(hy_scale_allreduce_ms(&LINK, 2, 1e6), 1.0, 1e-12);          /* 2 (1/2) 1 ms */
    CHECK_NEAR(hy_scale_allreduce_ms(&LINK, 4, 1e6), 1.5, 1e-12);          /* 2 (3/4) */
    hy_scale_link slow = LINK;
    slow.latency_us = 10;
    CHECK_NEAR(hy_scale_allreduce_ms(&slow, 4, 1e6), 1.5 + 6 * 0.010, 1e-12);   /* 2 (N-1) steps */
}

static void test_1f1b(void) {
    hy_schedule s;
    hy_sim_result r;
    if (build(&s, &r, HY_SCHED_1F1B)) { CHECK(0); return; }
    CHECK_NEAR(r.makespan, 9, 1e-12);
    const double bytes[2] = { 3e6, 1e6 };   /* stage 0 on rank 0, stage 1 on rank 1 */
    const int counts[3] = { 1, 2, 4 };
    hy_scale_row rows[3];
    hy_error err;
    CHECK(hy_scale_rows(&s, &r, bytes, &LINK, counts, 3, rows, &err) == HY_OK);
    /* N = 1: nothing to sum. */
    CHECK(rows[0].replicas == 1);
    CHECK_NEAR(rows[0].step_ms, 9, 1e-12);
    CHECK_NEAR(rows[0].exposed_ms, 0, 1e-12);
    CHECK_NEAR(rows[0].efficiency, 1, 1e-12);
    CHECK_NEAR(rows[0].tokens_per_s, 100 / 9e-3, 1e-6);
    /* N = 2: rank 0's 3 ms after 9, rank 1's 1 ms after 7. */
    CHECK_NEAR(rows[1].step_ms, 12, 1e-12);
    CHECK_NEAR(rows[1].exposed_ms, 3, 1e-12);
    CHECK_NEAR(rows[1].efficiency, 0.75, 1e-12);
    CHECK_NEAR(rows[1].tokens_per_s, 2 * 100 / 12e-3, 1e-6);
    /* N = 4: 4.5 ms after 9. */
    CHECK_NEAR(rows[2].step_ms, 13.5, 1e-12);
    /* A heavy rank 1 is the one that ends last: 7 + 3 = 10 > 9 + 0.1. */
    const double heavy[2] = { 1e5, 3e6 };
    CHECK(hy_scale_rows(&s, &r, heavy, &LINK, counts + 1, 1, rows, &err) == HY_OK);
    CHECK_NEAR(rows[0].step_ms, 10, 1e-12);
    hy_sim_result_free(&r);
    hy_schedule_free(&s);
}

/* Hanayo W = 1, P = 2: rank 0 holds stages 0 and 3, rank 1 stages 1 and
 * 2. A rank's sums start at their stage's last backward's end, one after
 * the other, in the order those ends come. */
static void test_hanayo(void) {
    hy_schedule s;
    hy_sim_result r;
    if (build(&s, &r, HY_SCHED_HANAYO)) { CHECK(0); return; }
    CHECK(s.stages == 4 && s.placement[0] == 0 && s.placement[3] == 0);
    const double bytes[4] = { 2e6, 1e6, 1e6, 4e6 };
    double done[4] = { 0 };
    for (int rk = 0; rk < 2; rk++)
        for (int i = 0; i < s.n_actions[rk]; i++)
            if (s.actions[rk][i].op == HY_BWD) done[s.actions[rk][i].stage] = r.end[rk][i];
    CHECK(done[3] < done[0] && done[2] < done[1]);   /* the deeper stage completes first */
    double rank0 = done[3] + 4;                      /* N = 2: B bytes take B/1e6 ms */
    rank0 = (rank0 > done[0] ? rank0 : done[0]) + 2;
    double rank1 = done[2] + 1;
    rank1 = (rank1 > done[1] ? rank1 : done[1]) + 1;
    double want = rank0 > rank1 ? rank0 : rank1;
    const int two = 2;
    hy_scale_row row;
    hy_error err;
    CHECK(hy_scale_rows(&s, &r, bytes, &LINK, &two, 1, &row, &err) == HY_OK);
    CHECK_NEAR(row.step_ms, want, 1e-12);
    CHECK(want > r.makespan);
    hy_sim_result_free(&r);
    hy_schedule_free(&s);
}

static void test_parse_and_refusals(void) {
    int counts[HY_SCALE_MAX_ROWS], n = 0;
    hy_error err;
    CHECK(hy_scale_parse_counts("--replicas", "1,4,16,64", counts, &n, &err) == HY_OK);
    CHECK(n == 4 && counts[0] == 1 && counts[3] == 64);
    CHECK(hy_scale_parse_counts("--replicas", "8", counts, &n, &err) == HY_OK && n == 1);
    const char *bad[] = { "", "0", "1,,2", "4,x", "1,2,", "-3", "2000000",
                          "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECKF(hy_scale_parse_counts("--replicas", bad[i], counts, &n, &err) == HY_ERR_INPUT,
               "'%s' was accepted", bad[i]);
        CHECK(strstr(err.msg, "--replicas") != NULL);
    }
    hy_schedule s;
    hy_sim_result r;
    if (build(&s, &r, HY_SCHED_1F1B)) { CHECK(0); return; }
    const double bytes[2] = { 1, 1 };
    const int two = 2;
    hy_scale_row row;
    hy_scale_link l = LINK;
    l.gbps = 0;
    CHECK(hy_scale_rows(&s, &r, bytes, &l, &two, 1, &row, &err) == HY_ERR_INPUT);
    l = LINK;
    l.latency_us = -1;
    CHECK(hy_scale_rows(&s, &r, bytes, &l, &two, 1, &row, &err) == HY_ERR_INPUT);
    const int zero = 0;
    CHECK(hy_scale_rows(&s, &r, bytes, &LINK, &zero, 1, &row, &err) == HY_ERR_INPUT);
    hy_sim_result_free(&r);
    hy_schedule_free(&s);
}

int main(void) {
    test_formula();
    test_1f1b();
    test_hanayo();
    test_parse_and_refusals();
    return TEST_END("scale");
}
