/*
 * test_costs.c — the simulator's costs and the per-layer cost model.
 *
 *   - per-stage costs override the uniform ones, and every cost must be
 *     finite and >= 0, the error naming which;
 *   - the per-layer cost model recovers known costs, and prices a split
 *     (a lone stage's extras fitted and priced as the last's).
 */
#include "costs.h"
#include "test.h"

#include <math.h>
#include <string.h>

static void test_costs(void) {
    hy_costs c = hy_costs_uniform();
    CHECK(c.fwd == 1 && c.bwd == 2 && c.comm == 0 && !c.fwd_stage && !c.bwd_stage);
    CHECK(hy_costs_fwd(&c, 3) == 1 && hy_costs_bwd(&c, 3) == 2);
    const double fwd[] = { 0.5, 4 };
    c.fwd_stage = fwd;
    CHECK(hy_costs_fwd(&c, 1) == 4 && hy_costs_bwd(&c, 1) == 2);
    hy_error err;
    CHECK(hy_costs_check(&c, 2, &err) == HY_OK);
    c.bwd = INFINITY;
    CHECK(hy_costs_check(&c, 2, &err) == HY_ERR_INPUT && strstr(err.msg, "backward cost"));
    c.bwd = 2;
    const double bad[] = { 1, -0.5 };
    c.bwd_stage = bad;
    CHECK(hy_costs_check(&c, 2, &err) == HY_ERR_INPUT && strstr(err.msg, "backward cost of stage 1"));
    CHECK(hy_costs_check(&c, 1, &err) == HY_OK);   /* only `stages` entries are read */
}

static void test_cost_model(void) {
    /* layer F 1 B 2, first extra F 0.5 B 0.25, last extra F 3 B 1. */
    int n[4] = {1, 2, 2, 1};
    double fwd[4] = {1.5, 2, 2, 4}, bwd[4] = {2.25, 4, 4, 3};
    hy_cost_model m;
    hy_cost_model_fit(&m, fwd, bwd, n, 4, 0.5, 0.1);
    CHECK_NEAR(m.layer_fwd, 1, 1e-12);
    CHECK_NEAR(m.layer_bwd, 2, 1e-12);
    CHECK_NEAR(m.first_fwd, 0.5, 1e-12);
    CHECK_NEAR(m.first_bwd, 0.25, 1e-12);
    CHECK_NEAR(m.last_fwd, 3, 1e-12);
    CHECK_NEAR(m.last_bwd, 1, 1e-12);
    CHECK_NEAR(m.comm, 0.1, 1e-12);
    /* Another split of the same model, priced. */
    int n2[3] = {0, 3, 3};
    double f2[3], b2[3];
    hy_cost_model_stages(&m, n2, 3, f2, b2);
    CHECK_NEAR(f2[0], 0.5, 1e-12);
    CHECK_NEAR(f2[1], 3, 1e-12);
    CHECK_NEAR(f2[2], 6, 1e-12);
    CHECK_NEAR(b2[2], 7, 1e-12);
    /* Two stages: no inner stage, so the cheaper end per layer is the
     * layer's cost and the dearer end's excess its extra. */
    int n3[2] = {2, 2};
    double f3[2] = {12, 2 * 1 + 1.5}, b3[2] = {12, 5};
    hy_cost_model_fit(&m, f3, b3, n3, 2, 0.5, 0);
    CHECK_NEAR(m.layer_fwd, 3.5 / 2.5, 1e-12);
    CHECK_NEAR(m.first_fwd, 12 - 2 * 3.5 / 2.5, 1e-12);
    CHECK_NEAR(m.last_fwd, 3.5 - 2 * 3.5 / 2.5, 1e-12);
    CHECK_NEAR(m.first_bwd, 12 - 2 * 2.0, 1e-12);
}

/* One stage: its extras, fitted as the last's, priced the same way. */
static void test_one_stage(void) {
    int n[1] = { 4 };
    double fwd[1] = { 6 }, bwd[1] = { 9 };
    hy_cost_model m;
    hy_cost_model_fit(&m, fwd, bwd, n, 1, 1, 0);
    CHECK_NEAR(m.layer_fwd, 6.0 / 5, 1e-12);
    CHECK(m.first_fwd == 0 && m.first_bwd == 0);
    CHECK_NEAR(m.last_fwd, 6 - 4 * 6.0 / 5, 1e-12);
    double f, b;
    hy_cost_model_stage(&m, 0, 1, 4, &f, &b);
    CHECK_NEAR(f, 6, 1e-12);
    CHECK_NEAR(b, 9, 1e-12);
    hy_cost_model_stage(&m, 0, 1, 0, &f, &b);   /* no layers: the extras alone */
    CHECK_NEAR(f, m.last_fwd, 1e-12);
    CHECK_NEAR(b, m.last_bwd, 1e-12);
}

/* Recomputation adds the redone forward to each pass that reads the
 * activations: B, and W when the backward is split; never the forward. */
static void test_recompute(void) {
    hy_costs u = hy_costs_uniform(), sp = hy_costs_uniform_split();
    hy_costs_add_recompute(&u, 1.0);
    CHECK(u.fwd == 1 && u.bwd == 3 && u.wgrad == 0);
    hy_costs_add_recompute(&sp, 1.0);
    CHECK(sp.fwd == 1 && sp.bwd == 2 && sp.wgrad == 2);
    hy_costs none = hy_costs_uniform_split();
    hy_costs_add_recompute(&none, 0.0);
    CHECK(none.bwd == 1 && none.wgrad == 1);
    hy_cost_model m = { .layer_fwd = 0.5, .layer_bwd = 1, .first_fwd = 3, .last_fwd = 7 };
    CHECK(hy_cost_model_recompute(&m, 4, 1.0) == 2.0);   /* the layers', not the extras */
    CHECK(hy_cost_model_recompute(&m, 4, 0.25) == 0.5);
}

int main(void) {
    test_costs();
    test_recompute();
    test_cost_model();
    test_one_stage();
    return TEST_END("costs");
}
