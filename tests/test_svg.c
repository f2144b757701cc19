/*
 * test_svg.c — the SVG drawings from plain inputs.
 *
 *   - the timeline from hand-made times (as a measured step gives them):
 *     one rect per action and no other, each placed in proportion to its
 *     time, the heading and the axis unit as given;
 *   - the bars: one rect per part of every bar plus one per legend entry,
 *     the longest bar filling the plot, parts in proportion, shares and
 *     values in the tooltips;
 *   - the line charts: one polyline per series with its class and its
 *     points in proportion on the panel's axes (x shared by the panels),
 *     dots on a marked series and on a series of one point, "no data" in
 *     an empty panel, file names escaped into well-formed text;
 *   - the tick step of the time axes;
 *   - saving writes exactly what the writer prints, and a missing
 *     directory is the path's fault and leaves nothing behind.
 *
 * (Plans drawn for every schedule, and their atomic save, are in
 * test_plan.c; the profile's two drawings in test_profile.c and
 * test_profile_cli.sh.) Files go to a mkdtemp directory under $TMPDIR (or
 * /tmp), removed at the end.
 */
#include "svg.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p++) n++;
    return n;
}

typedef int (*writer)(FILE *f, const void *drawing);

static char *render(writer w, const void *drawing) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    int bad = w(f, drawing) != 0;
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    return buf;
}

static int write_timeline(FILE *f, const void *t) { return hy_svg_write_timeline(f, t); }
static int write_bars(FILE *f, const void *b) { return hy_svg_write_bars(f, b); }

static void test_timeline(void) {
    hy_sched_params p = { HY_SCHED_1F1B, 2, 2, 1, 1, 0, 0 };
    hy_schedule s;
    hy_error err;
    if (hy_schedule_build(&s, &p, &err) != HY_OK) { CHECKF(0, "%s", err.msg); return; }
    /* rank 0: F0 F1 B0 B1; rank 1: F0 B0 F1 B1, in ms. */
    double s0[] = { 0, 1, 4, 7 }, e0[] = { 1, 2, 6, 9 };
    double s1[] = { 1, 2, 4, 5 }, e1[] = { 2, 4, 5, 7 };
    double *start[] = { s0, s1 }, *end[] = { e0, e1 };
    hy_svg_timeline t = { &s, start, end, 9, "a measured step", "ms" };
    char *text = render(write_timeline, &t);
    CHECK(text != NULL);
    if (text) {
        CHECK(strncmp(text, "<svg", 4) == 0);
        CHECK(count(text, "<rect") == 8);
        CHECK(count(text, "<rect class=\"F\"") == 4 && count(text, "<rect class=\"B\"") == 4);
        CHECK(strstr(text, ">a measured step</text>") != NULL);
        CHECK(strstr(text, ">ms</text>") != NULL);
        CHECK(strstr(text, "<title>B m1 s0: 7 to 9</title>") != NULL);
        /* 1100 px for 9 ms: rank 1's B0 (2 to 4) is 2 * 1100 / 9 wide. */
        char want[64];
        snprintf(want, sizeof want, "width=\"%.2f\"", 2 * 1100.0 / 9);
        CHECK(strstr(text, want) != NULL);
        CHECK(count(text, ">rank ") == 2);
    }
    free(text);
    hy_schedule_free(&s);
}

static const char *const names[3] = { "work", "wait", "rest" };
static const char *const colors[3] = { "#111111", "#222222", "#333333" };

static void test_bars(void) {
    const double values[] = { 6, 2, 0,     /* rank 0: 8 ms */
                              2, 1, 1 };   /* rank 1: 4 ms */
    hy_svg_bars b = { 2, 3, names, colors, values, "ms", "where it goes", "a note" };
    char *text = render(write_bars, &b);
    CHECK(text != NULL);
    if (!text) return;
    CHECK(strncmp(text, "<svg", 4) == 0);
    CHECK(count(text, "<rect") == 2 * 3 + 3);
    CHECK(count(text, "<rect class=\"wait\"") == 2);
    CHECK(strstr(text, ">where it goes</text>") != NULL && strstr(text, ">a note</text>") != NULL);
    /* The longest bar (8 ms) fills 720 px: 6 ms is 540, and rank 1's 2 ms 180. */
    CHECK(strstr(text, "width=\"540.00\"") != NULL);
    CHECK(strstr(text, "<title>rank 0 work: 6.000 ms (75.0%)</title>") != NULL);
    CHECK(strstr(text, "<title>rank 1 work: 2.000 ms (50.0%)</title>") != NULL);
    CHECK(count(text, "width=\"180.00\"") == 2);   /* rank 0's wait, rank 1's work */
    CHECK(strstr(text, ">75%</text>") != NULL);
    CHECK(count(text, "\">rank ") == 2);   /* the labels, not the tooltips */
    free(text);
}

static int write_lines(FILE *f, const void *c) { return hy_svg_write_lines(f, c); }

/* The numbers of the points="..." after the first occurrence of `cls`. */
static int points_of(const char *text, const char *cls, double *xy, int max) {
    const char *p = strstr(text, cls);
    p = p ? strstr(p, "points=\"") : NULL;
    if (!p) return -1;
    p += 8;
    int n = 0;
    char *end;
    while (n < max && *p != '"') {
        xy[n++] = strtod(p, &end);
        if (end == p) return -1;
        p = end + (*end == ',' || *end == ' ');
    }
    return n;
}

static void test_lines(void) {
    const double x0[] = { 1, 2, 3, 4 }, y0[] = { 4, 3, 3.5, 2 };
    const double x1[] = { 2, 6 }, y1[] = { 3, 1 };
    const double vx[] = { 4 }, vy[] = { 2.5 };
    hy_svg_series loss[] = {
        { x0, y0, 4, 0, "loss", 0 }, { vx, vy, 1, 0, "val_loss", 1 }, { x1, y1, 2, 1, "loss", 0 },
    };
    hy_svg_series lr[] = { { x0, y0, 0, 0, "lr", 0 } };
    hy_svg_panel panels[] = { { "loss", loss, 3 }, { "lr", lr, 1 } };
    const char *runs[] = { "a&b<c>.jsonl", "bad\xff\x01name" };
    hy_svg_lines c = { "a title", "step", runs, 2, "val loss", panels, 2, 2 };
    char *text = render(write_lines, &c);
    CHECK(text != NULL);
    if (!text) return;
    CHECK(strncmp(text, "<svg", 4) == 0);
    CHECK(count(text, "<polyline") == 3);
    CHECK(count(text, "<polyline class=\"loss\"") == 2);
    CHECK(count(text, "<polyline class=\"val_loss\"") == 1);
    CHECK(count(text, "<circle class=\"val_loss point\"") == 1);
    CHECK(count(text, "<circle") == 1);   /* none on the lines of several points */
    CHECK(strstr(text, ">a&amp;b&lt;c&gt;.jsonl</text>") != NULL);
    CHECK(strstr(text, ">bad??name</text>") != NULL);
    CHECK(strstr(text, ">val loss</text>") != NULL);
    CHECK(count(text, ">no data</text>") == 1);   /* the lr panel: a series of no point */
    CHECK(strstr(text, "stroke=\"#1f77b4\"") && strstr(text, "stroke=\"#ff7f0e\""));
    /* x from 1 to 6 (ticks of 1) over 480 px from 72; y from 1 to 4 over
     * 220 px down from 40 + 3 legend rows of 18 + 30. */
    double xy[16];
    CHECK(points_of(text, "class=\"loss\"", xy, 16) == 8);
    double top = 40 + 3 * 18 + 30;
    for (int i = 0; i < 4; i++) {
        CHECKF(fabs(xy[2 * i] - (72 + (x0[i] - 1) / 5 * 480)) < 0.01, "x[%d] %g", i, xy[2 * i]);
        CHECKF(fabs(xy[2 * i + 1] - (top + 220 - (y0[i] - 1) / 3 * 220)) < 0.01, "y[%d] %g", i,
               xy[2 * i + 1]);
    }
    /* The second panel shares the x axis: its tick "6" at the same place. */
    CHECK(count(text, ">6</text>") == 2);
    free(text);
}

static void test_tick_step(void) {
    CHECK(hy_svg_tick_step(0.3) == 0.5);
    CHECK(hy_svg_tick_step(1) == 1);
    CHECK(hy_svg_tick_step(7) == 10);
    CHECK(hy_svg_tick_step(12) == 20);
    CHECK(hy_svg_tick_step(0) == 1);
}

static void test_save(void) {
    const char *tmp = getenv("TMPDIR");
    char dir[512], path[600], bad[700];
    snprintf(dir, sizeof dir, "%s/hy_test_svg_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) { CHECKF(0, "mkdtemp %s", dir); return; }
    const double values[] = { 1, 2, 3 };
    hy_svg_bars b = { 1, 3, names, colors, values, "ms", "t", "n" };
    hy_error err;
    snprintf(path, sizeof path, "%s/bars.svg", dir);
    CHECK(hy_svg_save_bars(&b, path, &err) == HY_OK);
    char *want = render(write_bars, &b);
    FILE *f = fopen(path, "r");
    char got[1 << 14];
    size_t n = f ? fread(got, 1, sizeof got - 1, f) : 0;
    got[n] = '\0';
    if (f) fclose(f);
    CHECK(want && strcmp(got, want) == 0);
    free(want);
    snprintf(bad, sizeof bad, "%s/missing/bars.svg", dir);
    CHECK(hy_svg_save_bars(&b, bad, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, bad) != NULL);
    unlink(path);
    CHECK(rmdir(dir) == 0);   /* nothing else was left in it */
}

int main(void) {
    test_timeline();
    test_bars();
    test_lines();
    test_tick_step();
    test_save();
    return TEST_END("svg");
}
