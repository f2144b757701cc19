/*
 * order_grid.h — what tests/test_order.c and tests/test_order_caps.c
 * share: a chosen order's figures, and the sampling of their grids
 * under AddressSanitizer.
 */
#ifndef HY_TEST_ORDER_GRID_H
#define HY_TEST_ORDER_GRID_H

#include "costs.h"

typedef struct {
    double makespan;
    int peak;
} priced;

/* A rank's share of the model costing f = 1 and b = 2 (split, B = W = 1),
 * over its v stages, and a transfer costing comm. */
static hy_costs share_costs(int v, int split, double comm) {
    hy_costs c = hy_costs_uniform();
    c.fwd = 1.0 / v;
    c.bwd = (split ? 1.0 : 2.0) / v;
    c.wgrad = split ? 1.0 / v : 0;
    c.comm = comm;
    return c;
}

/* Under AddressSanitizer, several times slower, the largest grids are
 * sampled, one point in three: the sanitizer is there for memory errors,
 * the normal build checks every point (and tests/resim.py re-checks the
 * transfer-time grid independently). */
#if defined(__SANITIZE_ADDRESS__)
#define GRID_STRIDE 3
#else
#define GRID_STRIDE 1
#endif

/* Whether the next point of a grid is checked (every GRID_STRIDE-th). */
static int grid_point(void) {
    static int n;
    return n++ % GRID_STRIDE == 0;
}

#endif
