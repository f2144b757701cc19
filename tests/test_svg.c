/*
 * test_svg.c — the SVG drawings from plain inputs.
 *
 *   - the timeline from hand-made times (as a measured step gives them):
 *     one rect per action and no other, each placed in proportion to its
 *     time, the heading and the axis unit as given;
 *   - the bars: one rect per part of every bar plus one per legend entry,
 *     the longest bar filling the plot, parts in proportion, shares and
 *     values in the tooltips;
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
    hy_sched_params p = { HY_SCHED_1F1B, 2, 2, 1, 1, 0 };
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
    test_tick_step();
    test_save();
    return TEST_END("svg");
}
