/*
 * test_polish.c — lib/polish: the local search after the order search.
 *
 * Unsplit W = 2 at P = 8, M = 16, a transfer of c = 0.025 of a rank
 * share, within interleaved v = 4's 39 activations: Megatron's
 * interleaved order takes 54.80, the order search alone 54.95
 * (docs/schedules.md). From the canonical wave order, double-justified
 * (55.15), the polish must end below 54.80, the same on one thread and
 * on three; never hold more activations on a rank, nor more stash slots
 * in a stage, than the order it was given; and count no more work than
 * it was given, doing nothing when that pays for too few steps. The
 * order the search chooses, polished within it, is below 54.80 too.
 */
#include "justify.h"
#include "order.h"
#include "polish.h"
#include "schedule.h"
#include "sim.h"
#include "test.h"

#include <string.h>

#define INTERLEAVED 54.80   /* interleaved v = 4 at these costs (resim.py) */

static double makespan_of(const hy_schedule *s, const hy_costs *c, int *peak) {
    hy_sim_result r;
    hy_error err;
    if (hy_simulate(s, c, NULL, &r, &err) != HY_OK) return -1;
    double m = r.makespan;
    *peak = hy_sim_peak_max(&r);
    hy_sim_result_free(&r);
    return m;
}

int main(void) {
    hy_sched_params p = { HY_SCHED_HANAYO, 8, 16, 2, 2, 0, 0 };
    hy_costs c = hy_costs_uniform();
    c.fwd = 0.25;
    c.bwd = 0.5;
    c.comm = 0.025;
    hy_schedule start, one, three, chosen;
    hy_error err;
    CHECK(hy_schedule_build(&start, &p, &err) == HY_OK);
    CHECK(hy_justify_schedule(&start, &c, 39, 4, &err) == HY_OK);
    int peak0, slots0[32];
    double m0 = makespan_of(&start, &c, &peak0);
    CHECK_NEAR(m0, 55.15, 1e-9);
    hy_schedule_in_flight(&start, slots0);

    /* Too little work for a walk: nothing done, nothing counted. */
    hy_polish_stats st;
    CHECK(hy_schedule_copy(&one, &start, &err) == HY_OK);
    CHECK(hy_polish_schedule(&one, &c, 1000, 2, &st, &err) == HY_OK);
    CHECKF(st.steps == 0 && st.actions == 0 && hy_schedule_equal(&one, &start),
           "%lld steps on 1000 actions of work", st.steps);
    hy_schedule_free(&one);

    long long work = 1LL << 24;
    CHECK(hy_schedule_copy(&one, &start, &err) == HY_OK);
    CHECK(hy_schedule_copy(&three, &start, &err) == HY_OK);
    CHECK(hy_polish_schedule(&one, &c, work, 1, &st, &err) == HY_OK);
    CHECKF(st.steps > 0 && st.actions <= work && st.before == m0,
           "%lld steps, %lld actions counted of %lld", st.steps, st.actions, work);
    CHECK(hy_polish_schedule(&three, &c, work, 3, &st, &err) == HY_OK);
    CHECK(hy_schedule_validate(&one, &err) == HY_OK);
    CHECKF(hy_schedule_equal(&one, &three), "another order on three threads than on one");
    int peak;
    double m = makespan_of(&one, &c, &peak);
    CHECKF(m > 0 && m < INTERLEAVED - 1e-9 && m == st.after,
           "polished %.4f (said %.4f), from %.4f; interleaved %.2f", m, st.after, m0,
           INTERLEAVED);
    CHECKF(peak <= peak0, "peak %d above the %d it was given", peak, peak0);
    int slots[32], within = 1;
    hy_schedule_in_flight(&one, slots);
    for (int k = 0; k < one.stages; k++) within = within && slots[k] <= slots0[k];
    CHECKF(within, "a stage holds more stash slots than before");

    /* The search's choice, polished within it. */
    CHECK(hy_order_schedule(&chosen, &p, &c, &err) == HY_OK);
    m = makespan_of(&chosen, &c, &peak);
    CHECKF(m > 0 && m < INTERLEAVED - 1e-9 && peak <= 39, "chosen %.4f at %d", m, peak);

    hy_schedule_free(&one);
    hy_schedule_free(&three);
    hy_schedule_free(&start);
    hy_schedule_free(&chosen);
    return TEST_END("polish");
}
