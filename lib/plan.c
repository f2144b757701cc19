/*
 * plan.c — a schedule and its simulation, rendered (see plan.h).
 *
 * Sections: building a plan; the JSON contract; the ASCII timeline and the
 * summary; the SVG; the comparison of the schedules. (The `hanayo plan`
 * command, which ties them to the config and, with --costs, to a
 * profile's measured costs, is tools/cmd_plan.c.) Every renderer takes the
 * timings from the simulator's start/end arrays, so what is drawn is
 * exactly what was simulated, per-stage costs included; the SVG is drawn
 * (and saved atomically) by svg.c from a hy_svg_timeline, so a measured
 * step (profile.c) is drawn by the same code.
 */
#include "plan.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "order.h"
#include "svg.h"

#define DEFAULT_WIDTH 120

/* ------------------------------------------------------------------------
 * Building a plan
 * ------------------------------------------------------------------------ */

int hy_plan_build(hy_plan *pl, const hy_sched_params *p, const hy_costs *c,
                  hy_error *err) {
    memset(pl, 0, sizeof *pl);
    /* Refuse absurd sizes before the generator tries to allocate them. */
    double n = (double)p->ranks *
               hy_sched_rank_actions(p->split_backward, hy_sched_chunks(p), p->micro_batches);
    if (n > HY_PLAN_MAX_ACTIONS)
        return hy_fail(err, HY_ERR_INPUT,
                       "%s with %d ranks, %d micro-batches and %d stages per "
                       "rank is %.0f actions, more than the %d a plan may "
                       "hold; use fewer micro-batches, waves or chunks",
                       hy_sched_name(p->kind), p->ranks, p->micro_batches,
                       hy_sched_chunks(p), n, HY_PLAN_MAX_ACTIONS);
    int rc = hy_order_schedule_work(&pl->sched, p, c, &pl->work, err);
    if (rc != HY_OK) {
        memset(pl, 0, sizeof *pl);
        return rc;
    }
    rc = hy_simulate(&pl->sched, c, NULL, &pl->sim, err);
    if (rc != HY_OK) {
        hy_schedule_free(&pl->sched);
        memset(pl, 0, sizeof *pl);
        return rc;
    }
    pl->costs = *c;
    pl->costs.fwd_stage = pl->costs.bwd_stage = pl->costs.wgrad_stage = NULL;  /* copied below */
    pl->ideal_bubble = hy_ideal_bubble(&pl->sched);
    pl->max_activations = p->max_activations;
    pl->cap_bound = hy_makespan_bound_memory(&pl->sched, c, p->max_activations);
    if (c->fwd_stage || c->bwd_stage || c->wgrad_stage) {
        int S = pl->sched.stages;
        pl->fwd_stage = malloc((size_t)S * sizeof(double));
        pl->bwd_stage = malloc((size_t)S * sizeof(double));
        pl->wgrad_stage = malloc((size_t)S * sizeof(double));
        if (!pl->fwd_stage || !pl->bwd_stage || !pl->wgrad_stage) {
            hy_plan_free(pl);
            return hy_fail(err, HY_ERR_RUNTIME, "out of memory building a plan");
        }
        for (int i = 0; i < S; i++) {
            pl->fwd_stage[i] = hy_costs_fwd(c, i);
            pl->bwd_stage[i] = hy_costs_bwd(c, i);
            pl->wgrad_stage[i] = hy_costs_wgrad(c, i);
        }
    }
    return HY_OK;
}

void hy_plan_free(hy_plan *pl) {
    if (!pl) return;
    hy_sim_result_free(&pl->sim);      /* both safe on an empty struct */
    hy_schedule_free(&pl->sched);
    free(pl->fwd_stage);
    free(pl->bwd_stage);
    free(pl->wgrad_stage);
    memset(pl, 0, sizeof *pl);
}

int hy_plan_peak_max(const hy_plan *pl) { return hy_sim_peak_max(&pl->sim); }

static double bubble_at(const hy_plan *pl, double makespan) {
    double busy = 0;
    for (int r = 0; r < pl->sched.ranks; r++) busy += pl->sim.busy[r];
    return makespan > 0 ? 1.0 - busy / (pl->sched.ranks * makespan) : 0.0;
}

double hy_plan_bound_bubble(const hy_plan *pl) { return bubble_at(pl, pl->sim.bound); }

double hy_plan_memory_bound_bubble(const hy_plan *pl) { return bubble_at(pl, pl->sim.bound_memory); }

static double duration(const hy_plan *pl, int r, int i) {
    return pl->sim.end[r][i] - pl->sim.start[r][i];
}

/* Renders through a FILE * into a malloc'd string, so every renderer has
 * one implementation for both forms. */
typedef int (*render_fn)(FILE *f, const void *a, const void *b);

static char *render_to_string(render_fn fn, const void *a, const void *b) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    int bad = fn(f, a, b) != 0;
    if (fclose(f) != 0) bad = 1;
    if (bad) {
        free(buf);
        return NULL;
    }
    return buf;
}

static int digits(long x) {
    int d = 1;
    while (x >= 10) {
        x /= 10;
        d++;
    }
    return d;
}

/* ------------------------------------------------------------------------
 * JSON
 * ------------------------------------------------------------------------ */

static json_t *int_array(const int *v, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *real_array(const double *v, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_real(v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *actions_json(const hy_schedule *s) {
    json_t *all = json_array();
    for (int r = 0; all && r < s->ranks; r++) {
        json_t *row = json_array();
        for (int i = 0; row && i < s->n_actions[r]; i++) {
            const hy_action *a = &s->actions[r][i];
            json_t *t = json_pack("[sii]", hy_op_name(a->op), a->mb, a->stage);
            if (json_array_append_new(row, t) != 0) {
                json_decref(row);
                row = NULL;
            }
        }
        if (json_array_append_new(all, row) != 0) {
            json_decref(all);
            all = NULL;
        }
    }
    return all;
}

/* json_object_set_new takes ownership even on failure, so the results can
 * simply be OR-ed: one failure (out of memory) fails the whole document. */
static json_t *plan_json(const hy_plan *pl) {
    const hy_schedule *s = &pl->sched;
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = 0;
    bad |= json_object_set_new(o, "schedule", json_string(hy_sched_name(s->kind)));
    bad |= json_object_set_new(o, "ranks", json_integer(s->ranks));
    bad |= json_object_set_new(o, "micro_batches", json_integer(s->micro_batches));
    bad |= json_object_set_new(o, "waves",
                               json_integer(s->kind == HY_SCHED_HANAYO ? s->waves : 0));
    bad |= json_object_set_new(o, "chunks_per_rank", json_integer(s->chunks));
    bad |= json_object_set_new(o, "stages", json_integer(s->stages));
    bad |= json_object_set_new(o, "fwd_cost", json_real(pl->costs.fwd));
    bad |= json_object_set_new(o, "bwd_cost", json_real(pl->costs.bwd));
    bad |= json_object_set_new(o, "comm_cost", json_real(pl->costs.comm));
    bad |= json_object_set_new(o, "placement", int_array(s->placement, s->stages));
    bad |= json_object_set_new(o, "actions", actions_json(s));
    bad |= json_object_set_new(o, "makespan", json_real(pl->sim.makespan));
    bad |= json_object_set_new(o, "bubble_ratio", json_real(pl->sim.bubble));
    bad |= json_object_set_new(o, "peak_activations",
                               int_array(pl->sim.peak_activations, s->ranks));
    bad |= json_object_set_new(o, "transfers", json_integer(pl->sim.transfers));
    bad |= json_object_set_new(o, "ideal_bubble", json_real(pl->ideal_bubble));
    /* Added after the contract's first keys: split backward and the bound. */
    bad |= json_object_set_new(o, "split_backward", json_boolean(s->split));
    bad |= json_object_set_new(o, "wgrad_cost", json_real(s->split ? pl->costs.wgrad : 0));
    bad |= json_object_set_new(o, "bound_makespan", json_real(pl->sim.bound));
    bad |= json_object_set_new(o, "bound_bubble", json_real(hy_plan_bound_bubble(pl)));
    bad |= json_object_set_new(o, "memory_bound_makespan", json_real(pl->sim.bound_memory));
    bad |= json_object_set_new(o, "memory_bound_bubble", json_real(hy_plan_memory_bound_bubble(pl)));
    bad |= json_object_set_new(o, "max_activations", json_integer(pl->max_activations));
    bad |= json_object_set_new(o, "cap_bound_makespan", json_real(pl->cap_bound));
    /* Per-stage costs (measured ones: --costs). */
    if (pl->fwd_stage) {
        bad |= json_object_set_new(o, "fwd_costs", real_array(pl->fwd_stage, s->stages));
        bad |= json_object_set_new(o, "bwd_costs", real_array(pl->bwd_stage, s->stages));
        if (s->split)
            bad |= json_object_set_new(o, "wgrad_costs", real_array(pl->wgrad_stage, s->stages));
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static char *dump_json(json_t *o) {
    if (!o) return NULL;
    char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_COMPACT);
    json_decref(o);
    return s;
}

char *hy_plan_json(const hy_plan *pl) { return dump_json(plan_json(pl)); }

/* ------------------------------------------------------------------------
 * ASCII timeline
 * ------------------------------------------------------------------------ */

/* The timeline laid out on a grid of character cells: cell[r][col] is the
 * character drawn, owner[r][col] the action (index + 1) it belongs to, 0
 * for idle, which is what the colouring needs. */
typedef struct {
    int ranks, ncols;
    double scale;     /* columns per unit of simulated time */
    int label_w;      /* digits of the largest micro-batch */
    int labels;       /* columns the labels of the longest row need */
    char *cell;       /* [ranks * ncols] */
    int *owner;       /* [ranks * ncols] */
    int **col0;       /* [ranks][n_actions]: first column of each action */
    int **col1;       /* [ranks][n_actions]: one past its last column */
} grid;

/* Columns an action needs for its label: "m " for F, "[m]" for B, "(m)"
 * for W. */
static int label_need(const grid *g, const hy_action *a) {
    return g->label_w + (a->op == HY_FWD ? 1 : 2);
}

/* The smallest scale at which every action with a duration fits its
 * label; also sets g->labels, the columns the longest row's labels need. */
static double label_scale(const hy_plan *pl, grid *g) {
    double s = 0;
    g->labels = 0;
    for (int r = 0; r < pl->sched.ranks; r++) {
        int row = 0;
        for (int i = 0; i < pl->sched.n_actions[r]; i++) {
            double d = duration(pl, r, i);
            int need = label_need(g, &pl->sched.actions[r][i]);
            if (d > 0 && need / d > s) s = need / d;
            row += need;
        }
        if (row > g->labels) g->labels = row;
    }
    return s > 0 ? s : 1;
}

/* Places every action at the scale: a run from its rounded start to its
 * rounded end, pushed right where rounding (or a zero-cost action) would
 * make it overlap the previous run or be too narrow for its label. Returns
 * the number of columns used. */
static int place_runs(const hy_plan *pl, grid *g) {
    int ncols = 0;
    for (int r = 0; r < pl->sched.ranks; r++) {
        int prev = 0;
        for (int i = 0; i < pl->sched.n_actions[r]; i++) {
            long a = lround(pl->sim.start[r][i] * g->scale);
            long b = lround(pl->sim.end[r][i] * g->scale);
            if (a < prev) a = prev;
            if (b < a + label_need(g, &pl->sched.actions[r][i]))
                b = a + label_need(g, &pl->sched.actions[r][i]);
            g->col0[r][i] = (int)a;
            g->col1[r][i] = (int)b;
            prev = (int)b;
        }
        if (prev > ncols) ncols = prev;
    }
    return ncols;
}

static void fill_run(grid *g, int r, int i, const hy_action *a) {
    char *row = g->cell + (size_t)r * g->ncols;
    int *own = g->owner + (size_t)r * g->ncols;
    int c0 = g->col0[r][i], c1 = g->col1[r][i];
    for (int c = c0; c < c1; c++) {
        row[c] = ' ';
        own[c] = i + 1;
    }
    char label[16];
    int n = snprintf(label, sizeof label, "%d", a->mb);
    int at = c0;
    if (a->op != HY_FWD) {
        row[c0] = a->op == HY_BWD ? '[' : '(';
        row[c1 - 1] = a->op == HY_BWD ? ']' : ')';
        at++;
    }
    memcpy(row + at, label, (size_t)n);
}

static void grid_free(grid *g) {
    if (g->col0)
        for (int r = 0; r < g->ranks; r++) free(g->col0[r]);
    if (g->col1)
        for (int r = 0; r < g->ranks; r++) free(g->col1[r]);
    free(g->col0);
    free(g->col1);
    free(g->cell);
    free(g->owner);
    memset(g, 0, sizeof *g);
}

static int try_scale(grid *g, const hy_plan *pl, double scale) {
    g->scale = scale;
    g->ncols = place_runs(pl, g);
    return g->ncols;
}

/* The scale, in order of preference:
 *  1. proportional, every label fitting its run, widened by a whole factor
 *     up to 4, within `avail` columns;
 *  2. squeezed until it fits `avail`, as long as widening the short actions
 *     to their labels adds at most a quarter of the columns (so the picture
 *     stays close to proportional);
 *  3. proportional and wrapped into blocks — but never longer than 4 times
 *     what the labels alone need: very uneven costs (1e-9 beside 1) would
 *     otherwise ask for billions of columns. */
static void choose_scale(grid *g, const hy_plan *pl, int avail) {
    double s0 = label_scale(pl, g), mk = pl->sim.makespan;
    for (int k = 4; k >= 1; k--)
        if (mk * s0 * k <= avail && try_scale(g, pl, s0 * k) <= avail) return;
    /* From here on no scale exceeds the cap, so columns stay bounded. */
    double cap = 4.0 * (g->labels > avail ? g->labels : avail);
    double top = mk * s0 > cap ? cap / mk : s0;
    if (g->labels <= avail && mk > 0) {
        double lo = 0, hi = top;
        for (int i = 0; i < 40; i++) {
            double mid = (lo + hi) / 2;
            if (try_scale(g, pl, mid) <= avail) lo = mid;
            else hi = mid;
        }
        if (lo > 0) {
            int n = try_scale(g, pl, lo);
            if (n - mk * lo <= n / 4.0) return;
        }
    }
    try_scale(g, pl, top);
}

/* Lays the plan out on the grid at the chosen scale. Returns -1 when out
 * of memory. */
static int grid_build(grid *g, const hy_plan *pl, int avail) {
    const hy_schedule *s = &pl->sched;
    memset(g, 0, sizeof *g);
    g->ranks = s->ranks;
    g->label_w = digits(s->micro_batches - 1);
    g->col0 = calloc((size_t)s->ranks, sizeof *g->col0);
    g->col1 = calloc((size_t)s->ranks, sizeof *g->col1);
    if (!g->col0 || !g->col1) return -1;
    for (int r = 0; r < s->ranks; r++) {
        g->col0[r] = malloc(sizeof(int) * (size_t)(s->n_actions[r] + 1));
        g->col1[r] = malloc(sizeof(int) * (size_t)(s->n_actions[r] + 1));
        if (!g->col0[r] || !g->col1[r]) return -1;
    }
    choose_scale(g, pl, avail);
    size_t cells = (size_t)s->ranks * (size_t)(g->ncols > 0 ? g->ncols : 1);
    g->cell = malloc(cells);
    g->owner = calloc(cells, sizeof *g->owner);
    if (!g->cell || !g->owner) return -1;
    memset(g->cell, '.', cells);
    for (int r = 0; r < s->ranks; r++)
        for (int i = 0; i < s->n_actions[r]; i++)
            fill_run(g, r, i, &s->actions[r][i]);
    return 0;
}

/* The time ruler over columns [c0, c1): tick labels at their columns,
 * skipped where they would run into the previous one. */
static void write_ruler(FILE *f, const grid *g, double makespan, int c0,
                        int c1, int prefix_w) {
    double step = hy_svg_tick_step(8.0 / g->scale);
    char *line = malloc((size_t)(c1 - c0) + 1);
    if (!line) return;
    memset(line, ' ', (size_t)(c1 - c0));
    int free_from = 0;
    for (long i = (long)floor(c0 / g->scale / step); ; i++) {
        double t = i * step;
        long col = lround(t * g->scale) - c0;
        if (col >= c1 - c0 || t > makespan * (1 + 1e-12)) break;
        if (col < 0) continue;
        char lab[32];
        int n = snprintf(lab, sizeof lab, "%g", t);
        if (col < free_from || col + n > c1 - c0) continue;
        memcpy(line + col, lab, (size_t)n);
        free_from = (int)col + n + 1;
    }
    line[c1 - c0] = '\0';
    /* Trailing blanks would only be noise. */
    for (int e = c1 - c0; e > 0 && line[e - 1] == ' '; e--) line[e - 1] = '\0';
    fprintf(f, "%*s%s\n", prefix_w, "time |", line);
    free(line);
}

/* ANSI styles: F cyan and B yellow backgrounds, alternate micro-batches in
 * the bright variant so neighbouring runs stay apart; idle dimmed. */
static const char *cell_style(const hy_plan *pl, int r, int owner) {
    if (owner == 0) return "\x1b[0;2m";
    const hy_action *a = &pl->sched.actions[r][owner - 1];
    if (a->op == HY_FWD) return a->mb % 2 ? "\x1b[0;30;106m" : "\x1b[0;30;46m";
    if (a->op == HY_WGRAD) return a->mb % 2 ? "\x1b[0;30;102m" : "\x1b[0;30;42m";
    return a->mb % 2 ? "\x1b[0;30;103m" : "\x1b[0;30;43m";
}

static void write_row(FILE *f, const hy_plan *pl, const grid *g, int r,
                      int c0, int c1, int color) {
    const char *row = g->cell + (size_t)r * g->ncols;
    const int *own = g->owner + (size_t)r * g->ncols;
    fprintf(f, "rank %*d |", digits(g->ranks - 1), r);
    int last = -1;
    for (int c = c0; c < c1; c++) {
        if (color && own[c] != last) {
            fputs(cell_style(pl, r, own[c]), f);
            last = own[c];
        }
        fputc(row[c], f);
    }
    if (color) fputs("\x1b[0m", f);
    fputs("|\n", f);
}

/* Where a block of rows that starts at c0 should end: at most `per`
 * columns on (blocks of equal width, not full ones and a stub), and, among
 * the last fifth of those, at the column that cuts through the fewest runs,
 * so that labels are rarely split across blocks. */
static int block_end(const grid *g, int c0, int avail, int per) {
    if (c0 + avail >= g->ncols) return g->ncols;
    int best = c0 + per, best_cuts = g->ranks + 1;
    for (int c = c0 + per; c > c0 + per - per / 5; c--) {
        int cuts = 0;
        for (int r = 0; r < g->ranks; r++) {
            const int *own = g->owner + (size_t)r * g->ncols;
            cuts += own[c] != 0 && own[c] == own[c - 1];
        }
        if (cuts < best_cuts) {
            best = c;
            best_cuts = cuts;
        }
        if (cuts == 0) break;
    }
    return best;
}

int hy_plan_write_timeline(FILE *f, const hy_plan *pl,
                           const hy_timeline_opts *o) {
    int width = o && o->width > 0 ? o->width : DEFAULT_WIDTH;
    int color = o ? o->color : 0;
    int prefix_w = 5 + digits(pl->sched.ranks - 1) + 2;  /* "rank N |" */
    int avail = width - prefix_w - 1;
    if (avail < 16) avail = 16;
    grid g;
    if (grid_build(&g, pl, avail) != 0) {
        grid_free(&g);
        return -1;
    }
    int blocks = (g.ncols + avail - 1) / avail;
    int per = blocks > 1 ? (g.ncols + blocks - 1) / blocks : avail;
    for (int c0 = 0, c1; c0 < g.ncols || c0 == 0; c0 = c1) {
        c1 = block_end(&g, c0, avail, per);
        if (c0 > 0) fputc('\n', f);
        write_ruler(f, &g, pl->sim.makespan, c0, c1, prefix_w);
        for (int r = 0; r < g.ranks; r++) write_row(f, pl, &g, r, c0, c1, color);
        if (g.ncols == 0) break;
    }
    fprintf(f, "\nlegend: F(m) \"m \", B(m) \"[m]\", %sidle \".\"\n"
               "scale:  1 column = %.3g time\n",
            pl->sched.split ? "W(m) \"(m)\", " : "", 1.0 / g.scale);
    grid_free(&g);
    return ferror(f) ? -1 : 0;
}

static int timeline_thunk(FILE *f, const void *pl, const void *o) {
    return hy_plan_write_timeline(f, pl, o);
}

char *hy_plan_timeline(const hy_plan *pl, const hy_timeline_opts *o) {
    return render_to_string(timeline_thunk, pl, o);
}

static void write_kind_line(FILE *f, const hy_schedule *s) {
    fprintf(f, "%-18s%s", "schedule", hy_sched_name(s->kind));
    if (s->kind == HY_SCHED_HANAYO)
        fprintf(f, ", W = %d wave%s (%d chunks per rank)", s->waves,
                s->waves == 1 ? "" : "s", s->chunks);
    else if (s->kind == HY_SCHED_INTERLEAVED)
        fprintf(f, ", v = %d chunks per rank", s->chunks);
    fputc('\n', f);
}

int hy_plan_write_summary(FILE *f, const hy_plan *pl) {
    const hy_schedule *s = &pl->sched;
    write_kind_line(f, s);
    fprintf(f, "%-18sP = %d\n", "ranks", s->ranks);
    fprintf(f, "%-18sM = %d\n", "micro-batches", s->micro_batches);
    fprintf(f, "%-18sS = %d\n", "stages", s->stages);
    if (s->split) fprintf(f, "%-18sB (input gradient) and W (weights)\n", "split backward");
    if (pl->fwd_stage) {
        fprintf(f, "%-18sper stage, F:", "costs");
        for (int i = 0; i < s->stages; i++) fprintf(f, " %.4g", pl->fwd_stage[i]);
        fprintf(f, "\n%-18sB:", "");
        for (int i = 0; i < s->stages; i++) fprintf(f, " %.4g", pl->bwd_stage[i]);
        if (s->split) {
            fprintf(f, "\n%-18sW:", "");
            for (int i = 0; i < s->stages; i++) fprintf(f, " %.4g", pl->wgrad_stage[i]);
        }
        fprintf(f, "\n%-18sc = %.4g\n", "", pl->costs.comm);
    } else if (s->split) {
        fprintf(f, "%-18sf = %g, b = %g (B), w = %g (W), c = %g\n", "costs", pl->costs.fwd,
                pl->costs.bwd, pl->costs.wgrad, pl->costs.comm);
    } else {
        fprintf(f, "%-18sf = %g, b = %g, c = %g\n", "costs", pl->costs.fwd,
                pl->costs.bwd, pl->costs.comm);
    }
    fprintf(f, "%-18s%g\n", "makespan", pl->sim.makespan);
    fprintf(f, "%-18s%.4f (ideal %.4f)\n", "bubble ratio", pl->sim.bubble,
            pl->ideal_bubble);
    fprintf(f, "%-18s%g, bubble %.4f: no order of these costs does better\n", "lower bound",
            pl->sim.bound, hy_plan_bound_bubble(pl));
    fprintf(f, "%-18s%g, bubble %.4f: nor any holding at most %d activations on a rank\n",
            "at its memory", pl->sim.bound_memory, hy_plan_memory_bound_bubble(pl),
            hy_plan_peak_max(pl));
    fprintf(f, "%-18s[", "peak activations");
    for (int r = 0; r < s->ranks; r++)
        fprintf(f, "%s%d", r ? ", " : "", pl->sim.peak_activations[r]);
    fprintf(f, "] (max %d)\n", hy_plan_peak_max(pl));
    if (pl->max_activations > 0)
        fprintf(f, "%-18s%d per rank: peak %d; no order within it ends before %g (bubble "
                "%.4f), without it %g\n", "activation cap", pl->max_activations,
                hy_plan_peak_max(pl), pl->cap_bound, bubble_at(pl, pl->cap_bound), pl->sim.bound);
    fprintf(f, "%-18s%d per iteration\n", "transfers", pl->sim.transfers);
    return ferror(f) ? -1 : 0;
}

/* ------------------------------------------------------------------------
 * SVG
 * ------------------------------------------------------------------------ */

/* The plan as a timeline: its simulated times, and a heading with the
 * schedule and its figures. title must hold 256 bytes. */
static hy_svg_timeline plan_timeline(const hy_plan *pl, char *title, size_t n) {
    const hy_schedule *s = &pl->sched;
    size_t used = (size_t)snprintf(title, n, "%s  P=%d  M=%d", hy_sched_name(s->kind),
                                   s->ranks, s->micro_batches);
    if (used < n && s->kind == HY_SCHED_HANAYO)
        used += (size_t)snprintf(title + used, n - used, "  W=%d", s->waves);
    if (used < n && s->kind == HY_SCHED_INTERLEAVED)
        used += (size_t)snprintf(title + used, n - used, "  v=%d", s->chunks);
    if (used < n)
        snprintf(title + used, n - used, "  stages=%d  makespan %g  bubble %.4f (ideal %.4f)  "
                 "F blue, B orange%s", s->stages, pl->sim.makespan, pl->sim.bubble,
                 pl->ideal_bubble, s->split ? ", W green" : "");
    hy_svg_timeline t = { s, pl->sim.start, pl->sim.end, pl->sim.makespan, title, "time" };
    return t;
}

int hy_plan_write_svg(FILE *f, const hy_plan *pl) {
    char title[256];
    hy_svg_timeline t = plan_timeline(pl, title, sizeof title);
    return hy_svg_write_timeline(f, &t);
}

static int svg_thunk(FILE *f, const void *pl, const void *unused) {
    (void)unused;
    return hy_plan_write_svg(f, pl);
}

char *hy_plan_svg(const hy_plan *pl) {
    return render_to_string(svg_thunk, pl, NULL);
}

int hy_plan_save_svg(const hy_plan *pl, const char *path, hy_error *err) {
    char title[256];
    hy_svg_timeline t = plan_timeline(pl, title, sizeof title);
    return hy_svg_save_timeline(&t, path, err);
}

/* ------------------------------------------------------------------------
 * Comparison
 * ------------------------------------------------------------------------ */

static void compare_row(hy_compare_row *row, const hy_plan *pl) {
    row->ok = 1;
    row->stages = pl->sched.stages;
    row->chunks = pl->sched.chunks;
    row->makespan = pl->sim.makespan;
    row->bubble = pl->sim.bubble;
    row->ideal_bubble = pl->ideal_bubble;
    row->bound_bubble = hy_plan_bound_bubble(pl);
    row->memory_bound_bubble = hy_plan_memory_bound_bubble(pl);
    row->peak_max = hy_plan_peak_max(pl);
    row->transfers = pl->sim.transfers;
}

int hy_plan_compare_costs(const hy_sched_params *p, const hy_costs costs[HY_COMPARE_ROWS],
                          const char *const skip[HY_COMPARE_ROWS],
                          hy_compare_row rows[HY_COMPARE_ROWS], hy_error *err) {
    return hy_plan_compare_costs_each(p, costs, skip, NULL, NULL, rows, err);
}

int hy_plan_compare_costs_each(const hy_sched_params *p, const hy_costs costs[HY_COMPARE_ROWS],
                               const char *const skip[HY_COMPARE_ROWS], hy_compare_each each,
                               void *ctx, hy_compare_row rows[HY_COMPARE_ROWS], hy_error *err) {
    hy_error first;
    hy_error_clear(&first);
    int any = 0;
    for (int k = 0; k < HY_COMPARE_ROWS; k++) {
        hy_sched_params q = *p;
        q.kind = (hy_sched_kind)(k % HY_SCHED_COUNT);
        q.split_backward = k >= HY_SCHED_COUNT;
        hy_compare_row *row = &rows[k];
        memset(row, 0, sizeof *row);
        row->kind = q.kind;
        row->split = q.split_backward;
        row->waves = q.kind == HY_SCHED_HANAYO ? q.waves : 0;
        row->chunks = hy_sched_chunks(&q);
        row->mem_bytes = -1;
        hy_plan pl;
        hy_error e;
        hy_error_clear(&e);
        int rc = skip && skip[k] ? hy_fail(&e, HY_ERR_INPUT, "%s", skip[k])
                                 : hy_plan_build(&pl, &q, &costs[k], &e);
        if (rc == HY_ERR_RUNTIME) return hy_fail(err, rc, "%s", e.msg);
        if (rc != HY_OK) {
            snprintf(row->note, sizeof row->note, "%s", e.msg);
            if (first.status == HY_OK) first = e;
            continue;
        }
        compare_row(row, &pl);
        if (each) each(&pl, row, ctx);
        hy_plan_free(&pl);
        any = 1;
    }
    if (!any) return hy_fail(err, first.status, "%s", first.msg);
    return HY_OK;
}

int hy_plan_compare(const hy_sched_params *p, const hy_costs *c,
                    hy_compare_row rows[HY_COMPARE_ROWS], hy_error *err) {
    return hy_plan_compare_each(p, c, 0, NULL, NULL, rows, err);
}

int hy_plan_compare_each(const hy_sched_params *p, const hy_costs *c, double recompute_share,
                         hy_compare_each each, void *ctx, hy_compare_row rows[HY_COMPARE_ROWS],
                         hy_error *err) {
    /* f and b are the cost of one rank's share of the model, split over
     * its chunks, so makespans compare across stage counts; a transfer
     * moves the same activation whatever the chunking. A split row does
     * the same work, its backward cut in two. */
    hy_costs share[HY_COMPARE_ROWS];
    for (int k = 0; k < HY_COMPARE_ROWS; k++) {
        hy_sched_params q = *p;
        q.kind = (hy_sched_kind)(k % HY_SCHED_COUNT);
        share[k] = *c;
        share[k].wgrad = 0;
        if (k >= HY_SCHED_COUNT) hy_costs_split(&share[k], c->wgrad);
        share[k].fwd /= hy_sched_chunks(&q);
        share[k].bwd /= hy_sched_chunks(&q);
        share[k].wgrad /= hy_sched_chunks(&q);
        hy_costs_add_recompute(&share[k], recompute_share);
    }
    return hy_plan_compare_costs_each(p, share, NULL, each, ctx, rows, err);
}

static void row_name(const hy_compare_row *row, char *buf, size_t n) {
    if (row->kind == HY_SCHED_HANAYO)
        snprintf(buf, n, "%s W=%d", hy_sched_name(row->kind), row->waves);
    else if (row->kind == HY_SCHED_INTERLEAVED)
        snprintf(buf, n, "%s v=%d", hy_sched_name(row->kind), row->chunks);
    else
        snprintf(buf, n, "%s", hy_sched_name(row->kind));
    if (row->split) {
        size_t used = strlen(buf);
        snprintf(buf + used, n - used, " +split");
    }
}

int hy_compare_write_table(FILE *f, const hy_compare_row *rows, int n) {
    /* "peak act" counts stage activations; "act mem" divides by the chunks
     * per rank, giving memory in units of one micro-batch's activations
     * through a whole rank share, comparable across schedules. */
    int mem = 0;
    for (int i = 0; i < n; i++) mem |= rows[i].ok && rows[i].mem_bytes >= 0;
    fprintf(f, "%-22s %6s %10s %8s %8s %8s %9s %9s %8s %10s%s\n", "schedule", "stages",
            "makespan", "bubble", "ideal", "bound", "mem bound", "peak act", "act mem",
            "transfers", mem ? "    mem GiB" : "");
    for (int i = 0; i < n; i++) {
        char name[64];
        row_name(&rows[i], name, sizeof name);
        if (!rows[i].ok) {
            fprintf(f, "%-22s skipped: %s\n", name, rows[i].note);
            continue;
        }
        fprintf(f, "%-22s %6d %10g %8.4f %8.4f %8.4f %9.4f %9d %8.2f %10d", name,
                rows[i].stages, rows[i].makespan, rows[i].bubble,
                rows[i].ideal_bubble, rows[i].bound_bubble, rows[i].memory_bound_bubble,
                rows[i].peak_max,
                (double)rows[i].peak_max / rows[i].chunks, rows[i].transfers);
        if (rows[i].mem_bytes >= 0) fprintf(f, " %10.3g", rows[i].mem_bytes / 1073741824.0);
        else if (mem) fprintf(f, " %10s", "-");
        fputc('\n', f);
    }
    return ferror(f) ? -1 : 0;
}

static int table_thunk(FILE *f, const void *rows, const void *n) {
    return hy_compare_write_table(f, rows, *(const int *)n);
}

char *hy_compare_table(const hy_compare_row *rows, int n) {
    return render_to_string(table_thunk, rows, &n);
}

static json_t *compare_row_json(const hy_compare_row *row) {
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = 0;
    bad |= json_object_set_new(o, "schedule", json_string(hy_sched_name(row->kind)));
    bad |= json_object_set_new(o, "waves", json_integer(row->waves));
    bad |= json_object_set_new(o, "chunks_per_rank", json_integer(row->chunks));
    bad |= json_object_set_new(o, "split_backward", json_boolean(row->split));
    if (!row->ok) {
        bad |= json_object_set_new(o, "skipped", json_string(row->note));
    } else {
        bad |= json_object_set_new(o, "stages", json_integer(row->stages));
        bad |= json_object_set_new(o, "makespan", json_real(row->makespan));
        bad |= json_object_set_new(o, "bubble_ratio", json_real(row->bubble));
        bad |= json_object_set_new(o, "ideal_bubble", json_real(row->ideal_bubble));
        bad |= json_object_set_new(o, "bound_bubble", json_real(row->bound_bubble));
        bad |= json_object_set_new(o, "memory_bound_bubble", json_real(row->memory_bound_bubble));
        bad |= json_object_set_new(o, "peak_activations_max", json_integer(row->peak_max));
        bad |= json_object_set_new(o, "transfers", json_integer(row->transfers));
        if (row->mem_bytes >= 0)
            bad |= json_object_set_new(o, "memory_bytes", json_real(row->mem_bytes));
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *hy_compare_json(const hy_compare_row *rows, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, compare_row_json(&rows[i])) != 0) {
            json_decref(a);
            a = NULL;
        }
    return dump_json(a);
}
