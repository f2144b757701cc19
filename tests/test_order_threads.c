/*
 * test_order_threads.c — lib/order's search on several threads makes the
 * same choice as on one (order.h, hy_order_schedule_threads).
 *
 * One thread decides on the candidates in their order while helpers build
 * ahead of it, so the order chosen, action for action, and the work
 * counted (orders built, actions simulated, whether the bound stopped
 * the search) must not depend on how many threads built them. The cases
 * cover what the decider does besides weighing a candidate: skipping one
 * whose lists are the last cap's (few micro-batches: most caps never
 * reached), the V orders and the list scheduler's orders within a cap,
 * every candidate justified, and (outside sanitizer builds, where it
 * takes ten times longer) a search stopped by its bound. make test runs
 * this program under ThreadSanitizer too.
 */
#include "order.h"
#include "schedule.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    hy_sched_kind kind;
    int P, wv, M, split;
    double comm;
    int cap;
} order_case;

/* The case chosen on one thread and on each of `threads`: the same
 * order and the same work, and the threads asked for used (starting them
 * cannot fail here). */
static void check_case(const order_case *k, const int *threads, int n_threads) {
    hy_sched_params p = { k->kind, k->P, k->M, k->wv, k->wv, k->split, k->cap };
    hy_costs c = hy_costs_uniform_for(k->split, k->comm);
    hy_schedule one;
    hy_order_work w1;
    hy_error err;
    int rc = hy_order_schedule_threads(&one, &p, &c, 1, &w1, &err);
    CHECKF(rc == HY_OK, "%s P=%d M=%d: %s", hy_sched_name(k->kind), k->P, k->M, err.msg);
    if (rc) return;
    CHECKF(w1.threads == 1, "threads %d, asked 1", w1.threads);
    for (int t = 0; t < n_threads; t++) {
        hy_schedule many;
        hy_order_work wn;
        rc = hy_order_schedule_threads(&many, &p, &c, threads[t], &wn, &err);
        CHECKF(rc == HY_OK, "%s P=%d M=%d on %d threads: %s", hy_sched_name(k->kind), k->P, k->M,
               threads[t], err.msg);
        if (rc) continue;
        CHECKF(hy_schedule_equal(&one, &many), "%s P=%d W|v=%d M=%d split=%d c=%g cap=%d: another "
               "order on %d threads", hy_sched_name(k->kind), k->P, k->wv, k->M, k->split, k->comm,
               k->cap, threads[t]);
        CHECKF(w1.orders == wn.orders && w1.actions == wn.actions && w1.stopped == wn.stopped &&
               w1.unjustified == wn.unjustified,
               "P=%d M=%d: %d orders, %lld actions, stopped %d on one thread; %d, %lld, %d on %d",
               k->P, k->M, w1.orders, w1.actions, w1.stopped, wn.orders, wn.actions, wn.stopped,
               threads[t]);
        CHECKF(wn.threads == threads[t], "threads %d, asked %d", wn.threads, threads[t]);
        hy_schedule_free(&many);
    }
    hy_schedule_free(&one);
}

int main(void) {
    static const order_case cases[] = {
        /* M = P: most caps never reached, their candidates skipped */
        { HY_SCHED_HANAYO, 4, 2, 4, 0, 0.2, 0 },
        { HY_SCHED_HANAYO, 4, 2, 8, 1, 0.05, 0 },
        /* the V orders and the list scheduler's, within ZB-V's budget */
        { HY_SCHED_HANAYO, 4, 1, 16, 1, 0.2, 8 },
        { HY_SCHED_1F1B, 4, 1, 16, 0, 0.2, 2 },
        { HY_SCHED_INTERLEAVED, 4, 2, 16, 0, 0.5, 5 },
        /* every candidate justified, many caps reached */
        { HY_SCHED_HANAYO, 8, 2, 16, 0, 0.025, 0 },
        { HY_SCHED_HANAYO, 8, 1, 32, 1, 0.2, 0 },
    };
    static const int threads[] = { 2, 5 };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], threads, 2);
    /* Stopped by its bound (16.7M actions a search): the decider stops
     * with helpers still building past it. */
    if (!hy_test_under("address") && !hy_test_under("thread")) {
        order_case stop = { HY_SCHED_HANAYO, 8, 2, 256, 1, 0.2, 0 };
        check_case(&stop, (const int[]){ 3 }, 1);
    }
    return TEST_END("order_threads");
}
