/*
 * costs.c — see costs.h.
 */
#include "costs.h"

#include <assert.h>
#include <math.h>
#include <string.h>

hy_costs hy_costs_uniform(void) {
    hy_costs c = { .fwd = 1.0, .bwd = 2.0, .comm = 0.0 };
    return c;
}

hy_costs hy_costs_uniform_split(void) {
    hy_costs c = hy_costs_uniform();
    hy_costs_split(&c, -1);
    return c;
}

hy_costs hy_costs_uniform_for(int split_backward, double comm) {
    hy_costs c = split_backward ? hy_costs_uniform_split() : hy_costs_uniform();
    c.comm = comm;
    return c;
}

double hy_costs_recompute(double fwd, double share) { return share * fwd; }

void hy_costs_add_recompute(hy_costs *c, double share) {
    double extra = hy_costs_recompute(c->fwd, share);
    c->bwd += extra;
    if (c->wgrad > 0) c->wgrad += extra;
}

double hy_costs_wgrad_share(const double *bwd, const double *wgrad, int stages) {
    double w = 0, whole = 0;
    for (int s = 0; s < stages; s++) {
        w += wgrad[s];
        whole += bwd[s] + wgrad[s];
    }
    return whole > 0 ? w / whole : HY_WGRAD_SHARE_DEFAULT;
}

void hy_costs_split(hy_costs *c, double w) {
    if (w < 0) w = c->bwd / 2;
    c->wgrad = w;
    c->bwd = c->bwd > w ? c->bwd - w : 0;
}

double hy_costs_fwd(const hy_costs *c, int stage) {
    return c->fwd_stage ? c->fwd_stage[stage] : c->fwd;
}

double hy_costs_bwd(const hy_costs *c, int stage) {
    return c->bwd_stage ? c->bwd_stage[stage] : c->bwd;
}

double hy_costs_wgrad(const hy_costs *c, int stage) {
    return c->wgrad_stage ? c->wgrad_stage[stage] : c->wgrad;
}

/* stage -1: a uniform cost. */
static int check_cost(double v, const char *what, int stage, hy_error *err) {
    if (isfinite(v) && v >= 0) return HY_OK;
    if (stage >= 0)
        return hy_fail(err, HY_ERR_INPUT, "%s cost of stage %d must be a finite number >= 0, got %g",
                       what, stage, v);
    return hy_fail(err, HY_ERR_INPUT, "%s cost must be a finite number >= 0, got %g", what, v);
}

int hy_costs_check(const hy_costs *c, int stages, hy_error *err) {
    int rc = check_cost(c->fwd, "forward", -1, err);
    if (!rc) rc = check_cost(c->bwd, "backward", -1, err);
    if (!rc) rc = check_cost(c->wgrad, "weight-gradient", -1, err);
    if (!rc) rc = check_cost(c->comm, "transfer", -1, err);
    for (int stage = 0; !rc && stage < stages; stage++) {
        if (c->fwd_stage) rc = check_cost(c->fwd_stage[stage], "forward", stage, err);
        if (!rc && c->bwd_stage) rc = check_cost(c->bwd_stage[stage], "backward", stage, err);
        if (!rc && c->wgrad_stage) rc = check_cost(c->wgrad_stage[stage], "weight-gradient", stage, err);
    }
    return rc;
}

/* ------------------------------------------------------------------------
 * The per-layer cost model
 * ------------------------------------------------------------------------ */

/* The per-layer cost of one direction (see hy_cost_model_fit in
 * costs.h). */
static double fit_layer(const double *c, const int *n, int S, double head_units) {
    double sum = 0;
    int layers = 0;
    for (int s = 1; s < S - 1; s++) {
        sum += c[s];
        layers += n[s];
    }
    if (layers > 0) return sum / layers;
    /* No inner stage with layers: the cheaper of the two ends, per layer,
     * is taken as the one carrying nothing extra. */
    double best = -1;
    if (S > 1 && n[0] > 0) best = c[0] / n[0];
    double last_units = n[S - 1] + head_units;
    if (last_units > 0) {
        double v = c[S - 1] / last_units;
        if (best < 0 || v < best) best = v;
    }
    return best > 0 ? best : 0;
}

static void fit_direction(const double *c, const int *n, int S, double head_units,
                          double *layer, double *first, double *last) {
    *layer = fit_layer(c, n, S, head_units);
    *first = S > 1 ? fmax(0, c[0] - *layer * n[0]) : 0;
    *last = fmax(0, c[S - 1] - *layer * n[S - 1]);
}

void hy_cost_model_fit(hy_cost_model *m, const double *fwd, const double *bwd,
                       const int *n_layers, int S, double head_units, double comm) {
    memset(m, 0, sizeof *m);
    fit_direction(fwd, n_layers, S, head_units, &m->layer_fwd, &m->first_fwd, &m->last_fwd);
    fit_direction(bwd, n_layers, S, head_units, &m->layer_bwd, &m->first_bwd, &m->last_bwd);
    m->comm = comm;
}

double hy_cost_model_recompute(const hy_cost_model *m, int n, double share) {
    return hy_costs_recompute(m->layer_fwd * n, share);
}

void hy_cost_model_stage(const hy_cost_model *m, int stage, int S, int n, double *fwd,
                         double *bwd) {
    *fwd = m->layer_fwd * n;
    *bwd = m->layer_bwd * n;
    if (stage == 0 && S > 1) {   /* a lone stage's extras are all fitted as the last's */
        *fwd += m->first_fwd;
        *bwd += m->first_bwd;
    }
    if (stage == S - 1) {
        *fwd += m->last_fwd;
        *bwd += m->last_bwd;
    }
}

void hy_cost_model_stages(const hy_cost_model *m, const int *n_layers, int S,
                          double *fwd, double *bwd) {
    for (int s = 0; s < S; s++) hy_cost_model_stage(m, s, S, n_layers[s], &fwd[s], &bwd[s]);
}

/* ------------------------------------------------------------------------
 * Modelled costs
 * ------------------------------------------------------------------------ */

double hy_costs_flops_ms(double flops, double tflops) { return flops / (tflops * 1e12) * 1e3; }

double hy_costs_bytes_ms(double bytes, double gbps) { return 8 * bytes / (gbps * 1e9) * 1e3; }

void hy_cost_model_of_work(hy_cost_model *m, const hy_cost_work *w) {
    assert(w->tflops > 0 && w->link_gbps > 0);
    memset(m, 0, sizeof *m);
    m->layer_fwd = hy_costs_flops_ms(w->tokens * w->layer_flops, w->tflops);
    m->first_fwd = hy_costs_flops_ms(w->tokens * w->first_flops, w->tflops);
    m->last_fwd = hy_costs_flops_ms(w->tokens * w->last_flops, w->tflops);
    m->layer_bwd = HY_COSTS_BWD_PER_FWD * m->layer_fwd;
    m->first_bwd = HY_COSTS_BWD_PER_FWD * m->first_fwd;
    m->last_bwd = HY_COSTS_BWD_PER_FWD * m->last_fwd;
    m->comm = hy_costs_bytes_ms(w->transfer_bytes, w->link_gbps);
}
