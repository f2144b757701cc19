/*
 * cmd_plot.c — `hanayo plot LOG.jsonl [LOG2.jsonl ...] [--out FILE.svg]`:
 * train's --log-json logs drawn as one SVG of four panels against steps
 * (loss with the validation loss, learning rate, tokens/s, gradient
 * norm), the logs overlaid one colour each, through lib/svg.h's line
 * charts.
 *
 * A log is one JSON object a line: {"step", "loss", "lr", "grad_norm",
 * "tokens_per_s", "ms"} per step and {"step", "val_loss", "val_batches"}
 * per validation; other keys are ignored. It is read line by line and
 * tolerated: a line that is not a JSON object with an integer "step", or
 * holds one of those values as anything but a number or null, is reported
 * (FILE:LINE: why, on stderr) and skipped; a null value (train writes a
 * loss or norm that was not finite so) is skipped and counted. A log with
 * no value to draw is refused (exit 2), naming its first bad line. The
 * drawing is written atomically, never over one of the logs (outfile.h).
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "infile.h"
#include "outfile.h"
#include "svg.h"

static const char usage_plot[] =
    "usage: hanayo plot LOG.jsonl [LOG2.jsonl ...] [--out FILE.svg]\n"
    "\n"
    "Draws the logs of hanayo train --log-json as one SVG: loss (validation\n"
    "loss dashed, a dot per validation), learning rate, tokens/s and gradient\n"
    "norm against steps, each log in a colour of its own, named in the legend.\n"
    "Bad lines are reported with their line numbers and skipped, values the\n"
    "log wrote as null (not finite) skipped and counted; a log with nothing\n"
    "to draw is refused (exit 2).\n"
    "  --out FILE.svg    where to write it (default: the first log's name with\n"
    "                    .svg); written atomically, never over a log\n";

/* The values plotted: the log's keys, which are also the polylines'
 * classes. */
enum { F_LOSS, F_VAL_LOSS, F_LR, F_TPS, F_NORM, N_FIELDS };
static const char *const FIELD_KEY[N_FIELDS] = { "loss", "val_loss", "lr", "tokens_per_s",
                                                 "grad_norm" };

/* The panels: their titles and the fields each draws (-1: none). */
enum { N_PANELS = 4 };
static const struct {
    const char *title;
    int fields[2];
} PANELS[N_PANELS] = {
    { "loss", { F_LOSS, F_VAL_LOSS } },
    { "learning rate", { F_LR, -1 } },
    { "tokens/s", { F_TPS, -1 } },
    { "gradient norm", { F_NORM, -1 } },
};

enum { MAX_REPORTED = 10 };   /* bad lines named, per log; the rest counted */

typedef struct {
    double *x, *y;
    int n, cap;
} points;

typedef struct {
    const char *path;
    points f[N_FIELDS];
    long lines;                 /* lines read */
    long steps, vals;           /* lines with a "loss", with a "val_loss" */
    long drawn;                 /* lines that gave at least one point */
    long n_bad;
    long bad_line[MAX_REPORTED];
    char bad[MAX_REPORTED][320];    /* why each was bad */
    long nonfinite, nonfinite_line;
    const char *nonfinite_key;  /* the first one's */
    long step_lo, step_hi;
} plot_log;

static int add_point(points *p, double x, double y) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        double *nx = realloc(p->x, (size_t)cap * sizeof *nx);
        if (!nx) return -1;
        p->x = nx;
        double *ny = realloc(p->y, (size_t)cap * sizeof *ny);
        if (!ny) return -1;
        p->y = ny;
        p->cap = cap;
    }
    p->x[p->n] = x;
    p->y[p->n++] = y;
    return 0;
}

static void free_log(plot_log *lg) {
    for (int k = 0; k < N_FIELDS; k++) {
        free(lg->f[k].x);
        free(lg->f[k].y);
    }
}

static void report_bad(plot_log *lg, long line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void report_bad(plot_log *lg, long line, const char *fmt, ...) {
    if (lg->n_bad < MAX_REPORTED) {
        lg->bad_line[lg->n_bad] = line;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(lg->bad[lg->n_bad], sizeof lg->bad[0], fmt, ap);
        va_end(ap);
    }
    lg->n_bad++;
}

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "not a number";
    }
}

/* One line of the log (text[0..len), no newline). -1: out of memory. */
static int read_line(plot_log *lg, long line, const char *text, size_t len) {
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r')) i++;
    if (i == len) return 0;   /* a blank line says nothing */
    json_error_t je;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        report_bad(lg, line, "not JSON: %s (column %d)", je.text, je.column);
        return 0;
    }
    json_t *st = json_object_get(o, "step");
    double v[N_FIELDS];
    int has[N_FIELDS] = { 0 }, rc = 0, any = 0;
    if (!json_is_object(o)) {
        report_bad(lg, line, "%s, not a JSON object", json_kind(o));
        goto done;
    }
    if (!json_is_integer(st)) {
        report_bad(lg, line, st ? "\"step\" is %s, not an integer" : "no \"step\"%s",
                   st ? json_kind(st) : "");
        goto done;
    }
    for (int k = 0; k < N_FIELDS; k++) {
        json_t *x = json_object_get(o, FIELD_KEY[k]);
        if (!x || json_is_null(x) || json_is_number(x)) continue;
        report_bad(lg, line, "\"%s\" is %s, not a number", FIELD_KEY[k], json_kind(x));
        goto done;
    }
    double step = (double)json_integer_value(st);
    for (int k = 0; k < N_FIELDS; k++) {
        json_t *x = json_object_get(o, FIELD_KEY[k]);
        if (!x) continue;
        v[k] = json_is_number(x) ? json_number_value(x) : NAN;
        if (isfinite(v[k])) {
            has[k] = any = 1;
        } else if (lg->nonfinite++ == 0) {
            lg->nonfinite_line = line;
            lg->nonfinite_key = FIELD_KEY[k];
        }
    }
    lg->steps += json_object_get(o, "loss") != NULL;
    lg->vals += json_object_get(o, "val_loss") != NULL;
    for (int k = 0; k < N_FIELDS && !rc; k++)
        if (has[k]) rc = add_point(&lg->f[k], step, v[k]);
    if (any) {
        long s = (long)json_integer_value(st);
        if (lg->drawn == 0 || s < lg->step_lo) lg->step_lo = s;
        if (lg->drawn == 0 || s > lg->step_hi) lg->step_hi = s;
        lg->drawn++;
    }
done:
    json_decref(o);
    return rc;
}

static int read_log(plot_log *lg, hy_error *err) {
    FILE *f = NULL;
    int rc = hy_infile_fopen(lg->path, "training log", &f, err);
    if (rc) return rc;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t got;
    /* errno before each read: getline leaves it alone at the end. */
    while (!rc && (errno = 0, got = getline(&buf, &cap, f)) >= 0) {
        size_t len = (size_t)got;
        if (len && buf[len - 1] == '\n') len--;
        if (read_line(lg, ++lg->lines, buf, len))
            rc = hy_fail(err, HY_ERR_RUNTIME, "%s: out of memory at line %ld", lg->path,
                         lg->lines);
    }
    if (!rc && ferror(f))
        rc = hy_fail(err, hy_errno_status(errno, HY_ERR_INPUT), "%s: cannot read line %ld: %s",
                     lg->path, lg->lines + 1, strerror(errno ? errno : EIO));
    free(buf);
    fclose(f);
    if (rc || lg->drawn > 0) return rc;
    if (lg->lines == 0)
        return hy_fail(err, HY_ERR_INPUT, "%s: nothing to plot: the file is empty; give a log "
                       "that hanayo train --log-json wrote", lg->path);
    if (lg->n_bad > 0)
        return hy_fail(err, HY_ERR_INPUT, "%s: nothing to plot: %ld of its %ld lines are bad, "
                       "the first at line %ld: %s; is it a log of hanayo train --log-json?",
                       lg->path, lg->n_bad, lg->lines, lg->bad_line[0], lg->bad[0]);
    return hy_fail(err, HY_ERR_INPUT, "%s: nothing to plot: no line has a finite loss, "
                   "val_loss, lr, tokens_per_s or grad_norm (%ld lines, %ld null values)",
                   lg->path, lg->lines, lg->nonfinite);
}

/* What was skipped, on warn. */
static void warn_skipped(const plot_log *lg, FILE *warn) {
    for (long i = 0; i < lg->n_bad && i < MAX_REPORTED; i++)
        fprintf(warn, "warning: %s:%ld: %s; skipped\n", lg->path, lg->bad_line[i], lg->bad[i]);
    if (lg->n_bad > MAX_REPORTED)
        fprintf(warn, "warning: %s: %ld more bad lines skipped\n", lg->path,
                lg->n_bad - MAX_REPORTED);
    if (lg->nonfinite)
        fprintf(warn, "warning: %s: %ld value%s not finite (null) skipped, the first \"%s\" at "
                "line %ld\n", lg->path, lg->nonfinite, lg->nonfinite == 1 ? "" : "s",
                lg->nonfinite_key, lg->nonfinite_line);
}

/* One line on out: what the log holds. */
static void summarize(const plot_log *lg, FILE *out) {
    fprintf(out, "%s: %ld step%s (%ld..%ld), %ld validation%s", lg->path, lg->steps,
            lg->steps == 1 ? "" : "s", lg->step_lo, lg->step_hi, lg->vals,
            lg->vals == 1 ? "" : "s");
    const points *loss = &lg->f[F_LOSS], *val = &lg->f[F_VAL_LOSS];
    if (loss->n) fprintf(out, "; loss %.4f -> %.4f", loss->y[0], loss->y[loss->n - 1]);
    if (val->n) fprintf(out, ", val loss %.4f at step %.0f", val->y[val->n - 1],
                        val->x[val->n - 1]);
    if (lg->n_bad || lg->nonfinite)
        fprintf(out, " (%ld bad line%s, %ld null value%s skipped)", lg->n_bad,
                lg->n_bad == 1 ? "" : "s", lg->nonfinite, lg->nonfinite == 1 ? "" : "s");
    fputc('\n', out);
}

/* The first log's name with .svg in place of its extension, malloc'd. */
static char *default_out(const char *log) {
    const char *slash = strrchr(log, '/'), *base = slash ? slash + 1 : log;
    const char *dot = strrchr(base, '.');
    size_t keep = dot && dot != base ? (size_t)(dot - log) : strlen(log);
    char *out = malloc(keep + 5);
    if (out) {
        memcpy(out, log, keep);
        memcpy(out + keep, ".svg", 5);
    }
    return out;
}

/* The drawing of n logs, written to path. */
static int draw(const plot_log *logs, int n, const char *path, hy_error *err) {
    hy_svg_series *series = calloc((size_t)n * N_FIELDS, sizeof *series);
    const char **names = calloc((size_t)n, sizeof *names);
    if (!series || !names) {
        free(series);
        free(names);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    }
    hy_svg_panel panels[N_PANELS];
    int used = 0;
    for (int p = 0; p < N_PANELS; p++) {
        panels[p] = (hy_svg_panel){ .title = PANELS[p].title, .series = &series[used] };
        for (int i = 0; i < n; i++)
            for (int j = 0; j < 2 && PANELS[p].fields[j] >= 0; j++) {
                int k = PANELS[p].fields[j];
                series[used++] = (hy_svg_series){ .x = logs[i].f[k].x, .y = logs[i].f[k].y,
                                                  .n = logs[i].f[k].n, .run = i,
                                                  .cls = FIELD_KEY[k],
                                                  .marked = k == F_VAL_LOSS };
                panels[p].n_series++;
            }
    }
    for (int i = 0; i < n; i++) names[i] = logs[i].path;
    hy_svg_lines chart = { .title = "training: loss, learning rate, tokens/s and gradient norm "
                                    "by step",
                           .x_label = "step", .runs = names, .n_runs = n,
                           .marked_label = "val loss (a dot per validation)",
                           .panels = panels, .n_panels = N_PANELS, .columns = 2 };
    int rc = hy_svg_save_lines(&chart, path, err);
    free(series);
    free(names);
    return rc;
}

static int plot(const hy_flag_list *paths, const char *out_flag, FILE *out, FILE *warn,
                hy_error *err) {
    char *out_path = out_flag ? NULL : default_out(paths->items[0]);
    const char *target = out_flag ? out_flag : out_path;
    plot_log *logs = calloc((size_t)paths->n, sizeof *logs);
    hy_outfile_inputs inputs;
    hy_outfile_inputs_init(&inputs);
    int rc = target && logs ? HY_OK : hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    for (int i = 0; i < paths->n && !rc; i++)
        rc = hy_outfile_inputs_add(&inputs, paths->items[i], "a log plotted", err);
    /* Before anything is read: a default name can be a log too (a log
     * named run.svg). */
    if (!rc) rc = hy_outfile_check(&inputs, out_flag ? "--out" : "the drawing (default --out)",
                                   target, 0, err);
    for (int i = 0; i < paths->n && !rc; i++) {
        logs[i].path = paths->items[i];
        rc = read_log(&logs[i], err);
    }
    if (!rc) rc = draw(logs, paths->n, target, err);
    if (!rc) {
        for (int i = 0; i < paths->n; i++) warn_skipped(&logs[i], warn);
        for (int i = 0; i < paths->n; i++) summarize(&logs[i], out);
        fprintf(out, "wrote %s\n", target);
    }
    for (int i = 0; logs && i < paths->n; i++) free_log(&logs[i]);
    free(logs);
    hy_outfile_inputs_free(&inputs);
    free(out_path);
    return rc;
}

/* ---- The command ----------------------------------------------------------- */

typedef struct {
    hy_flag_list logs;
    const char *out;
} plot_args;

static const hy_flag plot_flags[] = {
    { .name = "--out", .kind = HY_FLAG_STRING, .off = offsetof(plot_args, out),
      .example = "run.svg" },
    { .name = NULL },
};
static const hy_args_spec plot_spec = {
    .command = "plot", .flags = plot_flags, .operand = "log",
    .synopsis = "hanayo plot LOG.jsonl [LOG2.jsonl ...] [--out FILE.svg], the logs of "
                "hanayo train --log-json",
    .many_operands = 1, .operands_off = offsetof(plot_args, logs) };

static int cmd_plot(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    plot_args a = { .out = NULL };
    hy_args_result got;
    int rc = cli_read_args(cmd, argc, argv, &a, &got, err);
    if (rc == HY_OK && !got.help) rc = plot(&a.logs, a.out, stdout, stderr, err);
    hy_flag_list_free(&a.logs);
    return rc;
}

const cli_command cli_plot_command = { "plot", cmd_plot, usage_plot, &plot_spec, NULL, 0 };
