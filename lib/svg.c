/*
 * svg.c — see svg.h.
 *
 * Sections: saving atomically; the timeline (colours, scale, actions,
 * axis); the bars; the line charts (text escaping, ranges, axes, series).
 */
#include "svg.h"

#include <math.h>
#include <string.h>

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

/* ------------------------------------------------------------------------
 * The line charts
 * ------------------------------------------------------------------------ */

enum { LN_W = 480, LN_H = 220,                  /* one panel's plot area */
       LN_LEFT = 72, LN_RIGHT = 24, LN_TOP = 30, LN_BOTTOM = 44,
       LN_HEAD = 40, LN_LEGEND_ROW = 18 };

/* Tableau's ten: distinct side by side, readable on white. */
static const char *const LN_COLORS[] = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                         "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                         "#bcbd22", "#17becf" };
#define LN_N_COLORS (int)(sizeof LN_COLORS / sizeof LN_COLORS[0])

static const char *ln_color(int run) { return LN_COLORS[(run < 0 ? 0 : run) % LN_N_COLORS]; }

/* The length of the UTF-8 sequence at s (1..4), 0 when it is not one:
 * names are file names, which may hold any bytes. */
static int utf8_len(const unsigned char *s) {
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
                                : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 2 && s[0] < 0xc2) return 0;                      /* overlong */
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    return n;
}

/* Text as XML character data: markup escaped, control characters and
 * bytes that are not UTF-8 as '?' (XML 1.0 allows neither). */
static void put_text(FILE *f, const char *text) {
    const unsigned char *s = (const unsigned char *)(text ? text : "");
    while (*s) {
        int n = utf8_len(s);
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '"') fputs("&quot;", f);
        else if (n == 0 || (*s < 0x20 && *s != '\t')) fputc('?', f);
        else fwrite(s, 1, (size_t)n, f);
        s += n ? n : 1;
    }
}

/* A value of an axis, printed short: 0 for what rounding left of zero. */
static void put_tick(FILE *f, double v, double step) {
    if (fabs(v) < step * 1e-9) v = 0;
    fprintf(f, "%g", v);
}

typedef struct { double lo, hi, step; int empty; } ln_range;

/* The range of values that fits an axis: whole ticks (1, 2 or 5 times a
 * power of ten, about five of them) around [lo, hi]. */
static ln_range ln_axis(double lo, double hi) {
    ln_range r = { lo, hi, 1, 0 };
    if (!(lo <= hi)) {
        r.lo = 0, r.hi = 1, r.empty = 1;
        return r;
    }
    if (lo == hi) {   /* a flat line: a band around it */
        double pad = lo != 0 ? fabs(lo) * 0.1 : 1;
        lo -= pad, hi += pad;
    }
    r.step = hy_svg_tick_step((hi - lo) / 5);
    r.lo = floor(lo / r.step) * r.step;
    r.hi = ceil(hi / r.step) * r.step;
    if (r.hi <= r.lo) r.hi = r.lo + r.step;
    return r;
}

static void ln_extent(const hy_svg_panel *p, int use_y, double *lo, double *hi) {
    for (int s = 0; s < p->n_series; s++) {
        const double *v = use_y ? p->series[s].y : p->series[s].x;
        for (int i = 0; i < p->series[s].n; i++) {
            if (!isfinite(v[i])) continue;
            if (v[i] < *lo) *lo = v[i];
            if (v[i] > *hi) *hi = v[i];
        }
    }
}

/* Where a panel's plot area is: its top-left corner. */
static void ln_origin(const hy_svg_lines *c, int k, int head, double *x0, double *y0) {
    int cols = c->columns > 0 ? c->columns : 1;
    *x0 = (k % cols) * (LN_LEFT + LN_W + LN_RIGHT) + LN_LEFT;
    *y0 = head + (k / cols) * (LN_TOP + LN_H + LN_BOTTOM) + LN_TOP;
}

static void ln_axes(FILE *f, const hy_svg_panel *p, const char *x_label, double x0,
                    double y0, ln_range xr, ln_range yr) {
    fputs("<text class=\"panel\" font-size=\"13\"", f);
    fprintf(f, " x=\"%.1f\" y=\"%.1f\">", x0, y0 - 10);
    put_text(f, p->title);
    fputs("</text>\n", f);
    for (int i = 0; !yr.empty && yr.lo + i * yr.step <= yr.hi + yr.step * 1e-9; i++) {
        double v = yr.lo + i * yr.step, y = y0 + LN_H - (v - yr.lo) / (yr.hi - yr.lo) * LN_H;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#e4e4e4\"/>"
                   "<text x=\"%.1f\" y=\"%.2f\" text-anchor=\"end\" dominant-baseline=\"central\">",
                x0, y, x0 + LN_W, y, x0 - 6, y);
        put_tick(f, v, yr.step);
        fputs("</text>\n", f);
    }
    for (int i = 0; xr.lo + i * xr.step <= xr.hi + xr.step * 1e-9; i++) {
        double v = xr.lo + i * xr.step, x = x0 + (v - xr.lo) / (xr.hi - xr.lo) * LN_W;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333\"/>"
                   "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">",
                x, y0 + LN_H, x, y0 + LN_H + 5, x, y0 + LN_H + 17);
        put_tick(f, v, xr.step);
        fputs("</text>\n", f);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>"
               "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
            x0, y0, x0, y0 + LN_H, x0, y0 + LN_H, x0 + LN_W, y0 + LN_H);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", x0 + LN_W / 2.0,
            y0 + LN_H + 33);
    put_text(f, x_label);
    fputs("</text>\n", f);
    if (yr.empty)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#888\">"
                   "no data</text>\n", x0 + LN_W / 2.0, y0 + LN_H / 2.0);
}

static void ln_series(FILE *f, const hy_svg_lines *c, const hy_svg_panel *p,
                      const hy_svg_series *s, double x0, double y0, ln_range xr, ln_range yr) {
    const char *color = ln_color(s->run);
    fputs("<polyline class=\"", f);
    put_text(f, s->cls);
    fprintf(f, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"", color,
            s->marked ? " stroke-dasharray=\"5 3\"" : "");
    for (int i = 0; i < s->n; i++)
        fprintf(f, "%s%.2f,%.2f", i ? " " : "", x0 + (s->x[i] - xr.lo) / (xr.hi - xr.lo) * LN_W,
                y0 + LN_H - (s->y[i] - yr.lo) / (yr.hi - yr.lo) * LN_H);
    fputs("\"><title>", f);
    put_text(f, s->run >= 0 && s->run < c->n_runs ? c->runs[s->run] : "");
    fputs(": ", f);
    put_text(f, p->title);
    fputs("</title></polyline>\n", f);
    if (!s->marked && s->n != 1) return;
    for (int i = 0; i < s->n; i++) {
        fputs("<circle class=\"", f);
        put_text(f, s->cls);
        fprintf(f, " point\" cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"%s\"><title>%g: %g"
                   "</title></circle>\n", x0 + (s->x[i] - xr.lo) / (xr.hi - xr.lo) * LN_W,
                y0 + LN_H - (s->y[i] - yr.lo) / (yr.hi - yr.lo) * LN_H, color, s->x[i], s->y[i]);
    }
}

int hy_svg_write_lines(FILE *f, const hy_svg_lines *c) {
    int marked = 0;
    double xlo = INFINITY, xhi = -INFINITY;
    for (int k = 0; k < c->n_panels; k++) {
        ln_extent(&c->panels[k], 0, &xlo, &xhi);
        for (int s = 0; s < c->panels[k].n_series; s++) marked |= c->panels[k].series[s].marked;
    }
    ln_range xr = ln_axis(xlo, xhi);
    int cols = c->columns > 0 ? c->columns : 1, rows = (c->n_panels + cols - 1) / cols;
    int legend = c->n_runs + (marked && c->marked_label ? 1 : 0);
    int head = LN_HEAD + legend * LN_LEGEND_ROW;
    int w = cols * (LN_LEFT + LN_W + LN_RIGHT), h = head + rows * (LN_TOP + LN_H + LN_BOTTOM);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\" "
               "style=\"background:#fff\">\n", w, h, w, h);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"14\">", LN_LEFT);
    put_text(f, c->title);
    fputs("</text>\n", f);
    for (int r = 0; r < legend; r++) {
        double y = LN_HEAD + r * LN_LEGEND_ROW;
        int is_marked = r == c->n_runs;
        fprintf(f, "<line class=\"legend\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                   "stroke=\"%s\" stroke-width=\"2\"%s/><text x=\"%d\" y=\"%.1f\" "
                   "dominant-baseline=\"central\">", LN_LEFT, y, LN_LEFT + 24, y,
                is_marked ? "#555" : ln_color(r), is_marked ? " stroke-dasharray=\"5 3\"" : "",
                LN_LEFT + 30, y);
        put_text(f, is_marked ? c->marked_label : c->runs[r]);
        fputs("</text>\n", f);
    }
    for (int k = 0; k < c->n_panels; k++) {
        const hy_svg_panel *p = &c->panels[k];
        double ylo = INFINITY, yhi = -INFINITY, x0, y0;
        ln_extent(p, 1, &ylo, &yhi);
        ln_range yr = ln_axis(ylo, yhi);
        ln_origin(c, k, head, &x0, &y0);
        ln_axes(f, p, c->x_label, x0, y0, xr, yr);
        for (int s = 0; s < p->n_series; s++)
            if (p->series[s].n > 0) ln_series(f, c, p, &p->series[s], x0, y0, xr, yr);
    }
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

static int lines_writer(FILE *f, const void *c) { return hy_svg_write_lines(f, c); }

int hy_svg_save_lines(const hy_svg_lines *c, const char *path, hy_error *err) {
    return save(path, lines_writer, c, err);
}
