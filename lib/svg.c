/*
 * svg.c — see svg.h.
 *
 * Sections: saving atomically; the timeline (colours, scale, actions,
 * axis); the bars.
 */
#include "svg.h"

#include <math.h>

#include "atomicfile.h"

/* A drawing printed by one of the writers below. */
typedef int (*svg_writer)(FILE *f, const void *drawing);

/* Printed straight into the temporary file: a large drawing is never held
 * in memory, and a print that fails is caught by the commit. */
static int save(const char *path, svg_writer write, const void *drawing, hy_error *err) {
    hy_atomic_file af;
    int rc = hy_atomic_open(&af, path, HY_ERR_INPUT, err);   /* the user named the path */
    if (rc) return rc;
    FILE *f = hy_atomic_stream(&af, err);
    if (!f) return HY_ERR_RUNTIME;
    (void)write(f, drawing);
    return hy_atomic_commit(&af, err);
}

double hy_svg_tick_step(double x) {
    if (!(x > 0)) return 1;
    double base = pow(10, floor(log10(x)));
    static const double mult[] = {1, 2, 5, 10};
    for (int i = 0; i < 4; i++)
        if (base * mult[i] >= x * (1 - 1e-12)) return base * mult[i];
    return base * 10;
}

/* ------------------------------------------------------------------------
 * The timeline
 * ------------------------------------------------------------------------ */

enum { SVG_LEFT = 64, SVG_TOP = 40, SVG_ROW = 26, SVG_GAP = 6,
       SVG_AXIS = 40, SVG_RIGHT = 24 };
#define SVG_PLOT_W 1100.0
#define SVG_MAX_PLOT_W 100000.0

typedef struct { int r, g, b; } rgb;

static double hue_part(double p, double q, double t) {
    if (t < 0) t += 1;
    if (t > 1) t -= 1;
    if (t < 1.0 / 6) return p + (q - p) * 6 * t;
    if (t < 0.5) return q;
    if (t < 2.0 / 3) return p + (q - p) * (2.0 / 3 - t) * 6;
    return p;
}

static rgb hsl(double h, double s, double l) {
    double q = l < 0.5 ? l * (1 + s) : l + s - l * s, p = 2 * l - q;
    h /= 360;
    rgb c = {(int)lround(255 * hue_part(p, q, h + 1.0 / 3)),
             (int)lround(255 * hue_part(p, q, h)),
             (int)lround(255 * hue_part(p, q, h - 1.0 / 3))};
    return c;
}

/* Six shades cycling with the micro-batch, so neighbours differ. */
static double shade(int mb) { return 0.38 + 0.07 * (mb % 6); }

/* Pixels per time unit: the plot about SVG_PLOT_W wide, the shortest
 * action at least 3 px, the whole never past SVG_MAX_PLOT_W. */
static double svg_unit(const hy_svg_timeline *t) {
    double mk = t->makespan > 0 ? t->makespan : 1;
    double u = SVG_PLOT_W / mk, shortest = 0;
    for (int r = 0; r < t->sched->ranks; r++)
        for (int i = 0; i < t->sched->n_actions[r]; i++) {
            double d = t->end[r][i] - t->start[r][i];
            if (d > 0 && (shortest == 0 || d < shortest)) shortest = d;
        }
    if (shortest > 0 && shortest * u < 3) u = 3 / shortest;
    if (mk * u > SVG_MAX_PLOT_W) u = SVG_MAX_PLOT_W / mk;
    return u;
}

static void svg_action(FILE *f, const hy_svg_timeline *t, int r, int i, double u) {
    const hy_action *a = &t->sched->actions[r][i];
    double t0 = t->start[r][i], t1 = t->end[r][i];
    double x = SVG_LEFT + t0 * u, w = (t1 - t0) * u;
    double y = SVG_TOP + r * (SVG_ROW + SVG_GAP);
    double l = shade(a->mb);
    rgb c = a->op == HY_FWD ? hsl(212, 0.65, l) : a->op == HY_BWD ? hsl(28, 0.85, l)
                                                  : hsl(128, 0.55, l);
    char name[64];
    hy_action_label(a, name, sizeof name);
    fprintf(f, "<rect class=\"%s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
               "height=\"%d\" fill=\"#%02x%02x%02x\" stroke=\"#fff\" "
               "stroke-width=\"0.5\"><title>%s: %g to %g</title></rect>\n",
            hy_op_name(a->op), x, y, w, SVG_ROW, c.r, c.g, c.b,
            name, t0, t1);
    char lab[16];
    int n = snprintf(lab, sizeof lab, "%d", a->mb);
    if (w >= 7.0 * n + 4)
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" "
                   "dominant-baseline=\"central\" fill=\"%s\">%s</text>\n",
                x + w / 2, y + SVG_ROW / 2.0, l < 0.55 ? "#fff" : "#000", lab);
}

static void svg_axis(FILE *f, const hy_svg_timeline *t, double u) {
    double y = SVG_TOP + t->sched->ranks * (SVG_ROW + SVG_GAP) + 4;
    double mk = t->makespan;
    fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
               "stroke=\"#333\"/>\n", SVG_LEFT, y, SVG_LEFT + mk * u, y);
    double step = hy_svg_tick_step(60 / u);
    for (long i = 0; i * step <= mk * (1 + 1e-12); i++) {
        double x = SVG_LEFT + i * step * u;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
                   "stroke=\"#333\"/>\n<text x=\"%.2f\" y=\"%.2f\" "
                   "text-anchor=\"middle\">%g</text>\n",
                x, y, x, y + 5, x, y + 17, i * step);
    }
    fprintf(f, "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n",
            SVG_LEFT - 8, y + 17, t->unit ? t->unit : "time");
}

int hy_svg_write_timeline(FILE *f, const hy_svg_timeline *t) {
    const hy_schedule *s = t->sched;
    double u = svg_unit(t);
    double w = SVG_LEFT + t->makespan * u + SVG_RIGHT;
    int h = SVG_TOP + s->ranks * (SVG_ROW + SVG_GAP) + SVG_AXIS;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
               "height=\"%d\" viewBox=\"0 0 %.0f %d\" font-family=\"sans-serif\" "
               "font-size=\"11\" style=\"background:#fff\">\n", w, h, w, h);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"14\">%s</text>\n",
            SVG_LEFT, t->title ? t->title : "");
    for (int r = 0; r < s->ranks; r++) {
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" "
                   "dominant-baseline=\"central\">rank %d</text>\n",
                SVG_LEFT - 8, SVG_TOP + r * (SVG_ROW + SVG_GAP) + SVG_ROW / 2.0, r);
        for (int i = 0; i < s->n_actions[r]; i++) svg_action(f, t, r, i, u);
    }
    svg_axis(f, t, u);
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

static int timeline_writer(FILE *f, const void *t) { return hy_svg_write_timeline(f, t); }

int hy_svg_save_timeline(const hy_svg_timeline *t, const char *path, hy_error *err) {
    return save(path, timeline_writer, t, err);
}

/* ------------------------------------------------------------------------
 * The bars
 * ------------------------------------------------------------------------ */

enum { BAR_LEFT = 64, BAR_TOP = 64, BAR_ROW = 26, BAR_GAP = 10, BAR_W = 720, BAR_LEGEND = 90 };

static double bar_sum(const hy_svg_bars *b, int r) {
    double sum = 0;
    for (int k = 0; k < b->parts; k++) sum += b->values[r * b->parts + k];
    return sum;
}

int hy_svg_write_bars(FILE *f, const hy_svg_bars *b) {
    double total = 0;
    for (int r = 0; r < b->ranks; r++)
        if (bar_sum(b, r) > total) total = bar_sum(b, r);
    if (!(total > 0)) total = 1;
    int h = BAR_TOP + b->ranks * (BAR_ROW + BAR_GAP) + 40;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\" "
               "style=\"background:#fff\">\n", BAR_LEFT + BAR_W + 24, h, BAR_LEFT + BAR_W + 24, h);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"14\">%s</text>\n", BAR_LEFT,
            b->title ? b->title : "");
    for (int k = 0; k < b->parts; k++) {
        int x = BAR_LEFT + k * BAR_LEGEND;
        fprintf(f, "<rect x=\"%d\" y=\"34\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                   "<text x=\"%d\" y=\"44\">%s</text>\n", x, b->colors[k], x + 16, b->names[k]);
    }
    for (int r = 0; r < b->ranks; r++) {
        const double *v = &b->values[r * b->parts];
        double x = BAR_LEFT, y = BAR_TOP + r * (BAR_ROW + BAR_GAP), sum = bar_sum(b, r);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"central\">"
                   "rank %d</text>\n", BAR_LEFT - 8, y + BAR_ROW / 2.0, r);
        for (int k = 0; k < b->parts; k++) {
            double w = v[k] / total * BAR_W;
            fprintf(f, "<rect class=\"%s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%d\" "
                       "fill=\"%s\"><title>rank %d %s: %.3f %s (%.1f%%)</title></rect>\n",
                    b->names[k], x, y, w, BAR_ROW, b->colors[k], r, b->names[k], v[k],
                    b->unit ? b->unit : "", sum > 0 ? 100 * v[k] / sum : 0);
            if (w >= 40)
                fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" "
                           "dominant-baseline=\"central\" fill=\"#fff\">%.0f%%</text>\n",
                        x + w / 2, y + BAR_ROW / 2.0, sum > 0 ? 100 * v[k] / sum : 0);
            x += w;
        }
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", BAR_LEFT, h - 14, b->note ? b->note : "");
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

static int bars_writer(FILE *f, const void *b) { return hy_svg_write_bars(f, b); }

int hy_svg_save_bars(const hy_svg_bars *b, const char *path, hy_error *err) {
    return save(path, bars_writer, b, err);
}
