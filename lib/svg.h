/*
 * svg.h — the drawings hanayo writes as SVG: a timeline of a schedule's
 * actions, stacked bars, and line charts.
 *
 * The timeline is what `hanayo plan --svg` draws from the simulator's times
 * (plan.h) and what `hanayo profile` writes as timeline.svg from a measured
 * step (profile.h): one piece of code for both, fed plain inputs (a
 * schedule and each action's start and end). The bars are profile's
 * bars.svg: per rank, where its step goes, from numbers and names the
 * caller gives. The line charts are `hanayo plot`'s panels of a training
 * log (loss, learning rate, ...) against steps, several runs overlaid,
 * from plain arrays. This module knows neither plans, profiles nor logs.
 *
 * Writers print to a FILE * and return -1 when it reports an error. The
 * savers write the file atomically (atomicfile.h: a temporary file beside
 * it, renamed into place; mode 0666 less the umask), printing straight
 * into the temporary file, so a large drawing is never held in memory and
 * an error never leaves a partial file. Their errors are HY_ERR_INPUT when
 * the path is at fault (a missing directory, a directory in the way, no
 * permission), else HY_ERR_RUNTIME; the message names the path and what to
 * check.
 */
#ifndef HY_SVG_H
#define HY_SVG_H

#include <stdio.h>

#include "error.h"
#include "schedule.h"

/* ---- The timeline ------------------------------------------------------
 * One row per rank, time left to right: one <rect> per action (class "F",
 * "B" or "W", a <title> naming it and its times, the micro-batch written
 * inside when it fits), F blue, B orange and W green shaded by micro-batch, rank
 * labels and a time axis. No other <rect> is drawn, so rects count
 * actions. */
typedef struct {
    const hy_schedule *sched;
    double *const *start, *const *end;  /* [ranks][n_actions] */
    double makespan;                    /* the axis runs from 0 to this */
    const char *title;                  /* the heading line (plain text, no markup) */
    const char *unit;                   /* the axis label: "time", "ms" */
} hy_svg_timeline;

int hy_svg_write_timeline(FILE *f, const hy_svg_timeline *t);
int hy_svg_save_timeline(const hy_svg_timeline *t, const char *path, hy_error *err);

/* ---- Stacked bars ------------------------------------------------------
 * One bar per rank ("rank r"), its parts left to right, each as wide as
 * its value at one scale for all bars (the longest bar fills the plot); a
 * legend of the parts above, each part's share written inside it when it
 * fits, and a note below. One <rect> per part of every bar and one per
 * legend entry, no others. */
typedef struct {
    int ranks;                  /* bars */
    int parts;                  /* parts per bar */
    const char *const *names;   /* [parts]: legend, class and tooltip of each */
    const char *const *colors;  /* [parts]: fills, "#rrggbb" */
    const double *values;       /* [ranks * parts]: rank r's part k at [r * parts + k] */
    const char *unit;           /* of the values, in the tooltips: "ms" */
    const char *title;          /* the heading line (plain text, no markup) */
    const char *note;           /* the line under the bars (plain text) */
} hy_svg_bars;

int hy_svg_write_bars(FILE *f, const hy_svg_bars *b);
int hy_svg_save_bars(const hy_svg_bars *b, const char *path, hy_error *err);

/* ---- Line charts -------------------------------------------------------
 * Panels in a grid, each with its own y axis, all on one x axis (the
 * range of every point of every panel), so the panels line up. A series
 * is one <polyline> of class `cls` (its points "x,y" in drawing order, as
 * given: the caller drops the points it cannot draw) with a <title> naming
 * its run and panel; a series of one point, and every point of a `marked`
 * series, also gets a <circle> of class "`cls` point". Series of the same
 * run share a colour; the legend names each run by its colour and, when
 * some series is marked, says what the marked style is. A panel with no
 * point says "no data". Text is escaped (and bytes that are not UTF-8
 * replaced), so any file name makes a well-formed document. */
typedef struct {
    const double *x, *y;    /* [n] finite */
    int n;
    int run;                /* its legend entry and colour: 0..n_runs-1 */
    const char *cls;        /* class of its polyline: "loss", "val_loss" */
    int marked;             /* a secondary series: dashed, a dot at each point */
} hy_svg_series;

typedef struct {
    const char *title;              /* above the panel: "loss" */
    const hy_svg_series *series;
    int n_series;
} hy_svg_panel;

typedef struct {
    const char *title;              /* the heading line */
    const char *x_label;            /* under the x axes: "step" */
    const char *const *runs;        /* [n_runs]: the legend's names */
    int n_runs;
    const char *marked_label;       /* the legend's entry for marked series: "val loss" */
    const hy_svg_panel *panels;
    int n_panels;
    int columns;                    /* panels per row (<= 0: 1) */
} hy_svg_lines;

int hy_svg_write_lines(FILE *f, const hy_svg_lines *c);
int hy_svg_save_lines(const hy_svg_lines *c, const char *path, hy_error *err);

/* 1, 2 or 5 times a power of ten, at least x: the tick step of a time
 * axis (the timeline's, and plan's ASCII ruler). */
double hy_svg_tick_step(double x);

#endif
