/*
 * order_grid.h — what tests/test_order.c and tests/test_order_caps.c
 * share: a chosen order's figures, and the sampling of their grids
 * under AddressSanitizer.
 */
#ifndef HY_TEST_ORDER_GRID_H
#define HY_TEST_ORDER_GRID_H

#include "costs.h"
#include "test.h"

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

/* Whether the next point of a grid is checked: under AddressSanitizer,
 * several times slower, the largest grids are sampled, one point in
 * three (test.h, hy_test_under); the normal build checks every point (and
 * tests/resim.py re-checks the transfer-time grid independently). */
static int grid_point(void) {
    static int n;
    return n++ % (hy_test_under("address") ? 3 : 1) == 0;
}

#endif
