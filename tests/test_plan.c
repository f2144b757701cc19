/*
 * test_plan.c — tests of lib/plan: the JSON contract of DESIGN §1 "The schedules", the
 * ASCII timeline, the SVG and its atomic save, the comparison table, and
 * the `hanayo plan` entry point (tools/cmd_plan.c) with config, --set and
 * flags.
 *
 * The JSON is parsed back with jansson and checked key by key against the
 * plan it came from; the renderings are checked for what a reader relies
 * on (one row per rank, every backward drawn, one rect per action, no
 * partial file after a failed save). tests/resim.py re-simulates the JSON
 * independently; this file checks the rendering itself.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd_plan.h"
#include "plan.h"
#include "test.h"

static hy_sched_params params(hy_sched_kind kind, int P, int M, int W, int v) {
    hy_sched_params p = { kind, P, M, W, v, 0, 0 };
    return p;
}

static int count_substr(const char *s, const char *needle) {
    int n = 0;
    size_t len = strlen(needle);
    for (const char *at = strstr(s, needle); at; at = strstr(at + len, needle))
        n++;
    return n;
}

static int total_actions(const hy_plan *pl) {
    int n = 0;
    for (int r = 0; r < pl->sched.ranks; r++) n += pl->sched.n_actions[r];
    return n;
}

/* ---- JSON ---------------------------------------------------------------- */

static const char *const json_keys[] = {
    "schedule", "ranks", "micro_batches", "waves", "chunks_per_rank",
    "stages", "fwd_cost", "bwd_cost", "comm_cost", "placement", "actions",
    "makespan", "bubble_ratio", "peak_activations", "transfers",
    "ideal_bubble", "split_backward", "wgrad_cost", "bound_makespan", "bound_bubble",
    "memory_bound_makespan", "memory_bound_bubble", "max_activations", "cap_bound_makespan"};
#define N_JSON_KEYS ((int)(sizeof json_keys / sizeof json_keys[0]))

static void check_json_keys_in_order(json_t *o) {
    CHECKF((int)json_object_size(o) == N_JSON_KEYS, "%d keys",
           (int)json_object_size(o));
    /* jansson keeps insertion order, so iteration shows the emitted order. */
    int i = 0;
    for (void *it = json_object_iter(o); it && i < N_JSON_KEYS;
         it = json_object_iter_next(o, it), i++)
        CHECKF(strcmp(json_object_iter_key(it), json_keys[i]) == 0,
               "key %d is '%s', want '%s'", i, json_object_iter_key(it),
               json_keys[i]);
}

static void check_json_actions(json_t *acts, const hy_plan *pl) {
    const hy_schedule *s = &pl->sched;
    CHECK(json_is_array(acts) && (int)json_array_size(acts) == s->ranks);
    for (int r = 0; r < s->ranks && r < (int)json_array_size(acts); r++) {
        json_t *row = json_array_get(acts, r);
        CHECKF((int)json_array_size(row) == 2 * s->chunks * s->micro_batches,
               "rank %d has %d actions", r, (int)json_array_size(row));
        int bad = 0;
        for (int i = 0; i < (int)json_array_size(row); i++) {
            json_t *a = json_array_get(row, i);
            const hy_action *want = &s->actions[r][i];
            const char *op = json_string_value(json_array_get(a, 0));
            json_t *m = json_array_get(a, 1), *st = json_array_get(a, 2);
            bad += !json_is_array(a) || json_array_size(a) != 3 || !op ||
                   strcmp(op, want->op == HY_FWD ? "F" : "B") != 0 ||
                   !json_is_integer(m) || json_integer_value(m) != want->mb ||
                   !json_is_integer(st) || json_integer_value(st) != want->stage;
        }
        CHECKF(bad == 0, "rank %d: %d actions differ from the schedule", r, bad);
    }
}

static void check_json_values(json_t *o, const hy_plan *pl) {
    const hy_schedule *s = &pl->sched;
    CHECK(strcmp(json_string_value(json_object_get(o, "schedule")),
                 hy_sched_name(s->kind)) == 0);
    CHECK(json_integer_value(json_object_get(o, "ranks")) == s->ranks);
    CHECK(json_integer_value(json_object_get(o, "micro_batches")) == s->micro_batches);
    json_t *w = json_object_get(o, "waves");
    CHECK(json_is_integer(w));
    CHECK(json_integer_value(w) == (s->kind == HY_SCHED_HANAYO ? s->waves : 0));
    CHECK(json_integer_value(json_object_get(o, "chunks_per_rank")) == s->chunks);
    CHECK(json_integer_value(json_object_get(o, "stages")) == s->chunks * s->ranks);
    CHECK(json_real_value(json_object_get(o, "fwd_cost")) == pl->costs.fwd);
    CHECK(json_real_value(json_object_get(o, "bwd_cost")) == pl->costs.bwd);
    CHECK(json_real_value(json_object_get(o, "comm_cost")) == pl->costs.comm);
    json_t *place = json_object_get(o, "placement");
    CHECK(json_is_array(place) && (int)json_array_size(place) == s->stages);
    for (int i = 0; i < (int)json_array_size(place); i++)
        CHECK(json_integer_value(json_array_get(place, i)) == s->placement[i]);
    check_json_actions(json_object_get(o, "actions"), pl);
    /* Reals print with 17 digits, so they read back exactly. */
    CHECK(json_is_real(json_object_get(o, "makespan")));
    CHECK(json_real_value(json_object_get(o, "makespan")) == pl->sim.makespan);
    CHECK(json_real_value(json_object_get(o, "bubble_ratio")) == pl->sim.bubble);
    CHECK(json_real_value(json_object_get(o, "ideal_bubble")) == pl->ideal_bubble);
    json_t *peak = json_object_get(o, "peak_activations");
    CHECK(json_is_array(peak) && (int)json_array_size(peak) == s->ranks);
    for (int r = 0; r < (int)json_array_size(peak); r++)
        CHECK(json_integer_value(json_array_get(peak, r)) ==
              pl->sim.peak_activations[r]);
    CHECK(json_is_integer(json_object_get(o, "transfers")));
    CHECK(json_integer_value(json_object_get(o, "transfers")) == pl->sim.transfers);
}

static void test_json(hy_sched_params p, hy_costs c) {
    hy_plan pl;
    hy_error err;
    int st = hy_plan_build(&pl, &p, &c, &err);
    CHECKF(st == HY_OK, "%s P=%d M=%d: %s", hy_sched_name(p.kind), p.ranks,
           p.micro_batches, err.msg);
    if (st != HY_OK) return;
    char *s = hy_plan_json(&pl);
    CHECK(s != NULL && strchr(s, '\n') == NULL);   /* one line */
    json_error_t je;
    json_t *o = s ? json_loads(s, 0, &je) : NULL;
    CHECKF(json_is_object(o), "not a JSON object: %s", s ? je.text : "NULL");
    if (o) {
        check_json_keys_in_order(o);
        check_json_values(o, &pl);
    }
    json_decref(o);
    free(s);
    hy_plan_free(&pl);
}

/* ---- ASCII timeline -------------------------------------------------------- */

/* Lines of the rank rows ("rank r |...|"): counts them, the '[' that open
 * backward runs, and the longest line. */
typedef struct { int rows, blocks, brackets, longest, escapes; } timeline_stats;

static timeline_stats scan_timeline(const char *t) {
    timeline_stats ts = {0, 0, 0, 0, 0};
    for (const char *line = t; *line;) {
        const char *nl = strchr(line, '\n');
        int len = nl ? (int)(nl - line) : (int)strlen(line);
        if (len > ts.longest) ts.longest = len;
        if (strncmp(line, "rank ", 5) == 0) {
            ts.rows++;
            for (int i = 0; i < len; i++) ts.brackets += line[i] == '[';
        }
        if (len >= 6 && strstr(line, "time |") && strstr(line, "time |") < line + len)
            ts.blocks++;
        for (int i = 0; i < len; i++) ts.escapes += line[i] == '\x1b';
        line += len + (nl != NULL);
    }
    return ts;
}

static void test_timeline(hy_sched_params p, hy_costs c, int width) {
    hy_plan pl;
    hy_error err;
    if (hy_plan_build(&pl, &p, &c, &err) != HY_OK) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    hy_timeline_opts o = {0, width};
    char *t = hy_plan_timeline(&pl, &o);
    CHECK(t != NULL);
    if (t) {
        timeline_stats ts = scan_timeline(t);
        CHECKF(ts.blocks >= 1 && ts.rows == ts.blocks * p.ranks,
               "%d rows in %d blocks for %d ranks", ts.rows, ts.blocks, p.ranks);
        /* Every backward is drawn, each opening one '['. */
        CHECKF(ts.brackets == total_actions(&pl) / 2, "%d of %d backwards",
               ts.brackets, total_actions(&pl) / 2);
        CHECKF(ts.longest <= width, "line of %d columns, width %d",
               ts.longest, width);
        CHECK(ts.escapes == 0);
        CHECKF(ts.blocks <= 64, "%d blocks", ts.blocks);
        /* Rows whose labels alone ("m " and "[m]") overflow the width
         * must wrap; a plan that fits at 2 columns per unit must not. */
        int prefix = 5 + (p.ranks > 10 ? 2 : 1) + 2 + 1;
        int labels = pl.sched.chunks * p.micro_batches *
                     (2 * (p.micro_batches > 10 ? 2 : 1) + 3);
        if (labels > width - prefix) CHECK(ts.blocks > 1);
        if (pl.sim.makespan * 2 <= width - prefix && c.fwd >= 1 && c.bwd >= 1.5)
            CHECK(ts.blocks == 1);
        CHECK(strstr(t, "\nrank 0 |") != NULL);
    }
    free(t);
    o.color = 1;
    t = hy_plan_timeline(&pl, &o);
    CHECK(t != NULL && strstr(t, "\x1b[") != NULL);
    free(t);
    hy_plan_free(&pl);
}

/* The exact drawing of a tiny plan: gpipe, P = 2, M = 2, f = 1, b = 2. */
static void test_timeline_exact(void) {
    hy_sched_params p = params(HY_SCHED_GPIPE, 2, 2, 1, 1);
    hy_costs c = hy_costs_uniform();
    hy_plan pl;
    hy_error err;
    if (hy_plan_build(&pl, &p, &c, &err) != HY_OK) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    hy_timeline_opts o = {0, 120};
    char *t = hy_plan_timeline(&pl, &o);
    /* makespan 9; 2 columns per unit fit the labels; 4 times that (the
     * most) still fits 120 columns: F is 8 columns, B 16. */
    const char *ruler =
        "  time |0       1       2       3       4       5       6       7       8\n";
    CHECK(t && strncmp(t, ruler, strlen(ruler)) == 0);
    CHECK(t && strstr(t, "\nrank 0 |0       1       ........................"
                         "[0             ][1             ]|\n"));
    CHECK(t && strstr(t, "\nrank 1 |........0       1       [0             ]"
                         "[1             ]................|\n"));
    CHECK(t && strstr(t, "1 column = 0.125 time") != NULL);
    free(t);
    hy_plan_free(&pl);
}

static void test_summary(void) {
    hy_sched_params p = params(HY_SCHED_HANAYO, 4, 8, 2, 1);
    hy_costs c = hy_costs_uniform();
    hy_plan pl;
    hy_error err;
    if (hy_plan_build(&pl, &p, &c, &err) != HY_OK) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(hy_plan_write_summary(f, &pl) == 0);
    fclose(f);
    CHECK(strstr(buf, "schedule          hanayo, W = 2 waves (4 chunks per rank)\n"));
    CHECK(strstr(buf, "ranks             P = 4\n"));
    CHECK(strstr(buf, "micro-batches     M = 8\n"));
    CHECK(strstr(buf, "stages            S = 16\n"));
    CHECK(strstr(buf, "bubble ratio"));
    CHECK(strstr(buf, "peak activations  ["));
    char want[64];
    snprintf(want, sizeof want, "transfers         %d per iteration", pl.sim.transfers);
    CHECK(strstr(buf, want));
    free(buf);
    hy_plan_free(&pl);
}

/* ---- SVG ------------------------------------------------------------------- */

static void test_svg(hy_sched_params p) {
    hy_plan pl;
    hy_costs c = hy_costs_uniform();
    hy_error err;
    if (hy_plan_build(&pl, &p, &c, &err) != HY_OK) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    char *s = hy_plan_svg(&pl);
    CHECK(s != NULL);
    if (s) {
        size_t n = strlen(s);
        while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ')) n--;
        CHECK(strncmp(s, "<svg", 4) == 0);
        CHECK(n >= 6 && strncmp(s + n - 6, "</svg>", 6) == 0);
        CHECKF(count_substr(s, "<rect") == total_actions(&pl), "%d rects, %d actions",
               count_substr(s, "<rect"), total_actions(&pl));
        CHECK(count_substr(s, "<rect class=\"F\"") == total_actions(&pl) / 2);
        CHECK(count_substr(s, "<rect class=\"B\"") == total_actions(&pl) / 2);
        CHECK(count_substr(s, "<title>") == total_actions(&pl));
        CHECK(count_substr(s, "</rect>") == total_actions(&pl));
        CHECK(count_substr(s, ">rank ") == p.ranks);
        CHECK(count_substr(s, "<text") == count_substr(s, "</text>"));
        CHECK(strstr(s, ">time</text>") != NULL);
    }
    free(s);
    hy_plan_free(&pl);
}

static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void test_svg_save(void) {
    const char *tmp = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/hy_test_plan_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        CHECKF(0, "mkdtemp %s", dir);
        return;
    }
    hy_sched_params p = params(HY_SCHED_1F1B, 3, 6, 1, 1);
    hy_costs c = hy_costs_uniform();
    hy_plan pl;
    hy_error err;
    CHECK(hy_plan_build(&pl, &p, &c, &err) == HY_OK);
    char path[600], bad[700];
    snprintf(path, sizeof path, "%s/plan.svg", dir);
    CHECK(hy_plan_save_svg(&pl, path, &err) == HY_OK);
    char *want = hy_plan_svg(&pl);
    FILE *f = fopen(path, "r");
    char got[1 << 16];
    size_t n = f ? fread(got, 1, sizeof got - 1, f) : 0;
    got[n] = '\0';
    if (f) fclose(f);
    CHECK(want && strcmp(got, want) == 0);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0444) == 0444);
    free(want);
    /* A missing directory: the user's path is wrong (exit 2, like every
     * other output path), the error names it, nothing is written. */
    snprintf(bad, sizeof bad, "%s/missing/plan.svg", dir);
    CHECK(hy_plan_save_svg(&pl, bad, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, bad) != NULL);
    /* A directory in the way: the rename fails, the temp file is removed. */
    snprintf(bad, sizeof bad, "%s/sub", dir);
    CHECK(mkdir(bad, 0755) == 0);
    CHECK(hy_plan_save_svg(&pl, bad, &err) == HY_ERR_INPUT);
    CHECKF(dir_entries(dir) == 2, "%d entries left in the directory", dir_entries(dir));
    CHECK(dir_entries(bad) == 0);
    rmdir(bad);
    unlink(path);
    rmdir(dir);
    hy_plan_free(&pl);
}

/* ---- comparison ------------------------------------------------------------ */

static void test_compare(void) {
    hy_sched_params p = params(HY_SCHED_HANAYO, 4, 8, 1, 2);
    hy_costs c = hy_costs_uniform();
    hy_compare_row rows[HY_COMPARE_ROWS];
    hy_error err;
    CHECK(hy_plan_compare(&p, &c, rows, &err) == HY_OK);
    static const int stages[] = {4, 4, 8, 8};
    for (int k = 0; k < HY_SCHED_COUNT; k++) {
        CHECK(rows[k].kind == (hy_sched_kind)k);
        CHECKF(rows[k].ok, "%s: %s", hy_sched_name(rows[k].kind), rows[k].note);
        CHECK(rows[k].stages == stages[k]);
        CHECK(rows[k].makespan > 0 && rows[k].peak_max > 0);
        CHECK(rows[k].transfers > 0);
    }
    /* The rows carry what a single plan of the same kind says when its
     * per-stage costs are one rank's share split over its chunks. */
    for (int k = 0; k < HY_SCHED_COUNT; k++) {
        hy_sched_params q = p;
        q.kind = (hy_sched_kind)k;
        hy_costs share = c;
        share.fwd /= rows[k].chunks;
        share.bwd /= rows[k].chunks;
        hy_plan pl;
        if (hy_plan_build(&pl, &q, &share, &err) != HY_OK) continue;
        CHECK(rows[k].makespan == pl.sim.makespan);
        CHECK(rows[k].bubble == pl.sim.bubble);
        CHECK(rows[k].ideal_bubble == pl.ideal_bubble);
        CHECK(rows[k].peak_max == hy_plan_peak_max(&pl));
        CHECK(rows[k].transfers == pl.sim.transfers);
        hy_plan_free(&pl);
    }
    /* gpipe's bubble is exactly (P-1)/(M+P-1) under uniform costs. */
    CHECK_NEAR(rows[HY_SCHED_GPIPE].bubble, 3.0 / 11.0, 1e-12);
    CHECK_NEAR(rows[HY_SCHED_HANAYO].ideal_bubble, 3.0 / 19.0, 1e-12);
    char *t = hy_compare_table(rows, HY_SCHED_COUNT);
    CHECK(t && strncmp(t, "schedule ", 9) == 0);
    CHECK(t && strstr(t, "\ngpipe ") && strstr(t, "\n1f1b ") &&
          strstr(t, "\ninterleaved v=2 ") && strstr(t, "\nhanayo W=1 "));
    CHECK(t && strstr(t, "0.2727") != NULL);
    /* Same model share per rank: interleaved's makespan is (P-1)/v + M
     * chunk-steps of f + b = 3, i.e. 3 * (8 + 3/2) = 28.5 against 1f1b's 33. */
    CHECK_NEAR(rows[HY_SCHED_INTERLEAVED].makespan, 28.5, 1e-9);
    CHECK_NEAR(rows[HY_SCHED_1F1B].makespan, 33, 1e-9);
    CHECK(t && strstr(t, "skipped") == NULL);
    free(t);
}

/* Recomputation priced into every row: each row is the plan of its
 * share's costs with every backward pass (B, and W when split) redoing
 * the recomputed share of the stage's forward; the caller's hook sees
 * each built plan, and its memory goes into the table and the JSON. */
static void count_rows(const hy_plan *pl, hy_compare_row *row, void *ctx) {
    ++*(int *)ctx;
    row->mem_bytes = 1073741824.0 * pl->sched.stages;   /* a figure of the plan it saw */
}

static void test_compare_recompute(void) {
    hy_sched_params p = params(HY_SCHED_HANAYO, 4, 8, 1, 2);
    hy_costs c = hy_costs_uniform();
    c.wgrad = -1;   /* the split rows: W half a backward, as `hanayo plan` asks */
    hy_compare_row rows[HY_COMPARE_ROWS];
    hy_error err;
    int seen = 0;
    double share = 0.25;
    CHECK(hy_plan_compare_each(&p, &c, share, count_rows, &seen, rows, &err) == HY_OK);
    CHECK(seen == HY_COMPARE_ROWS);
    for (int k = 0; k < HY_COMPARE_ROWS; k++) {
        hy_sched_params q = p;
        q.kind = (hy_sched_kind)(k % HY_SCHED_COUNT);
        q.split_backward = k >= HY_SCHED_COUNT;
        hy_costs x = c;
        x.wgrad = 0;
        if (q.split_backward) hy_costs_split(&x, -1);
        double v = rows[k].chunks;
        x.fwd /= v, x.bwd /= v, x.wgrad /= v;
        x.bwd += share * x.fwd;
        if (q.split_backward) x.wgrad += share * x.fwd;
        hy_plan pl;
        if (hy_plan_build(&pl, &q, &x, &err) != HY_OK) {
            CHECKF(0, "%s", err.msg);
            continue;
        }
        CHECKF(rows[k].makespan == pl.sim.makespan, "row %d: %g vs %g", k, rows[k].makespan,
               pl.sim.makespan);
        CHECK(rows[k].mem_bytes == 1073741824.0 * pl.sched.stages);
        hy_plan_free(&pl);
    }
    /* Dearer than without. */
    hy_compare_row plain[HY_COMPARE_ROWS];
    CHECK(hy_plan_compare(&p, &c, plain, &err) == HY_OK);
    for (int k = 0; k < HY_COMPARE_ROWS; k++) {
        CHECK(rows[k].makespan > plain[k].makespan);
        CHECK(plain[k].mem_bytes < 0);
    }
    char *t = hy_compare_table(rows, HY_COMPARE_ROWS), *u = hy_compare_table(plain, HY_COMPARE_ROWS);
    CHECK(t && strstr(t, "mem GiB") != NULL);
    CHECK(u && strstr(u, "mem GiB") == NULL);
    free(t);
    free(u);
    char *j = hy_compare_json(rows, HY_COMPARE_ROWS);
    json_t *a = j ? json_loads(j, 0, NULL) : NULL;
    CHECK(json_real_value(json_object_get(json_array_get(a, HY_SCHED_HANAYO), "memory_bytes")) ==
          rows[HY_SCHED_HANAYO].mem_bytes);
    json_decref(a);
    free(j);
}

static void test_compare_skip(void) {
    hy_sched_params p = params(HY_SCHED_HANAYO, 4, 6, 2, 4);
    hy_costs c = hy_costs_uniform();
    hy_compare_row rows[HY_COMPARE_ROWS];
    hy_error err;
    CHECK(hy_plan_compare(&p, &c, rows, &err) == HY_OK);
    CHECK(!rows[HY_SCHED_INTERLEAVED].ok);
    CHECK(rows[HY_SCHED_INTERLEAVED].note[0] != '\0');
    CHECK(rows[HY_SCHED_GPIPE].ok && rows[HY_SCHED_1F1B].ok && rows[HY_SCHED_HANAYO].ok);
    char *t = hy_compare_table(rows, HY_SCHED_COUNT);
    CHECK(t && count_substr(t, "skipped") == 1);
    CHECK(t && strstr(t, "\ninterleaved v=4        skipped: ") != NULL);
    CHECK(t && count_substr(t, "\n") == 5);   /* header and four rows */
    free(t);
    char *j = hy_compare_json(rows, HY_SCHED_COUNT);
    json_t *a = j ? json_loads(j, 0, NULL) : NULL;
    CHECK(json_is_array(a) && json_array_size(a) == HY_SCHED_COUNT);
    json_t *il = json_array_get(a, HY_SCHED_INTERLEAVED);
    CHECK(json_is_string(json_object_get(il, "skipped")));
    CHECK(json_object_get(il, "makespan") == NULL);
    json_t *hn = json_array_get(a, HY_SCHED_HANAYO);
    CHECK(json_integer_value(json_object_get(hn, "waves")) == 2);
    CHECK(json_integer_value(json_object_get(hn, "stages")) == 16);
    CHECK(json_real_value(json_object_get(hn, "bubble_ratio")) ==
          rows[HY_SCHED_HANAYO].bubble);
    json_decref(a);
    free(j);
    /* Nothing valid at all is an input error. */
    p.ranks = 0;
    CHECK(hy_plan_compare(&p, &c, rows, &err) == HY_ERR_INPUT);
    CHECK(err.msg[0] != '\0');
}

/* ---- the command entry point ------------------------------------------------ */

/* Runs a request into a string; returns the status. */
static int run(const cli_plan_request *rq, char **out, hy_error *err) {
    size_t len = 0;
    *out = NULL;
    FILE *f = open_memstream(out, &len);
    hy_error_clear(err);
    int st = cli_plan_run(rq, f, err);
    fclose(f);
    return st;
}

static json_t *run_json(const cli_plan_request *rq) {
    char *out;
    hy_error err;
    int st = run(rq, &out, &err);
    CHECKF(st == HY_OK, "%s", err.msg);
    json_t *o = st == HY_OK ? json_loads(out, 0, NULL) : NULL;
    free(out);
    return o;
}

static void test_run(void) {
    cli_plan_request rq;
    cli_plan_request_init(&rq);
    rq.json = 1;
    rq.has_kind = 1;
    rq.kind = HY_SCHED_INTERLEAVED;
    rq.ranks = 2;
    rq.micro_batches = 4;
    rq.chunks = 3;
    rq.comm_cost = 0.5;
    json_t *o = run_json(&rq);
    CHECK(o && strcmp(json_string_value(json_object_get(o, "schedule")), "interleaved") == 0);
    CHECK(json_integer_value(json_object_get(o, "chunks_per_rank")) == 3);
    CHECK(json_integer_value(json_object_get(o, "stages")) == 6);
    CHECK(json_real_value(json_object_get(o, "comm_cost")) == 0.5);
    CHECK(json_real_value(json_object_get(o, "fwd_cost")) == 1.0);
    json_decref(o);

    /* --set applies to the defaults; a flag beats a --set. */
    const char *sets[] = {"schedule.kind=gpipe", "schedule.ranks=3"};
    cli_plan_request_init(&rq);
    rq.json = 1;
    rq.sets = sets;
    rq.n_sets = 2;
    o = run_json(&rq);
    CHECK(o && strcmp(json_string_value(json_object_get(o, "schedule")), "gpipe") == 0);
    CHECK(json_integer_value(json_object_get(o, "ranks")) == 3);
    json_decref(o);
    rq.has_kind = 1;
    rq.kind = HY_SCHED_1F1B;
    rq.ranks = 4;
    o = run_json(&rq);
    CHECK(o && strcmp(json_string_value(json_object_get(o, "schedule")), "1f1b") == 0);
    CHECK(json_integer_value(json_object_get(o, "ranks")) == 4);
    json_decref(o);

    char *out;
    hy_error err;
    /* Invalid parameters are input errors, and nothing is printed. */
    cli_plan_request_init(&rq);
    rq.has_kind = 1;
    rq.kind = HY_SCHED_INTERLEAVED;
    rq.ranks = 4;
    rq.micro_batches = 6;
    CHECK(run(&rq, &out, &err) == HY_ERR_INPUT && err.msg[0] && out[0] == '\0');
    free(out);
    rq.compare = 1;
    rq.svg = "never-written.svg";
    CHECK(run(&rq, &out, &err) == HY_ERR_INPUT && strstr(err.msg, "--svg"));
    CHECK(access("never-written.svg", F_OK) != 0);
    free(out);
    /* An unknown --set key is the config's input error. */
    const char *bad_set[] = {"schedule.wavez=2"};
    cli_plan_request_init(&rq);
    rq.sets = bad_set;
    rq.n_sets = 1;
    CHECK(run(&rq, &out, &err) == HY_ERR_INPUT && strstr(err.msg, "wavez"));
    free(out);
    /* A missing config file is an error naming it. */
    cli_plan_request_init(&rq);
    rq.config = "no-such-config.json";
    CHECK(run(&rq, &out, &err) != HY_OK && strstr(err.msg, "no-such-config.json"));
    free(out);

    /* --compare: v follows 2W unless --chunks is given. */
    cli_plan_request_init(&rq);
    rq.compare = 1;
    rq.ranks = 2;
    rq.micro_batches = 4;
    rq.waves = 2;
    CHECK(run(&rq, &out, &err) == HY_OK);
    CHECK(strstr(out, "interleaved v=4 ") && strstr(out, "hanayo W=2 "));
    free(out);
    rq.chunks = 3;
    CHECK(run(&rq, &out, &err) == HY_OK && strstr(out, "interleaved v=3 "));
    free(out);

    /* The default output: the timeline, then the summary. */
    cli_plan_request_init(&rq);
    rq.ranks = 3;
    CHECK(run(&rq, &out, &err) == HY_OK);
    CHECK(strstr(out, "rank 2 |") && !strstr(out, "rank 3 |"));
    CHECK(strstr(out, "\nmakespan ") && strstr(out, "\nbubble ratio "));
    free(out);
}

int main(void) {
    hy_costs uni = hy_costs_uniform(), comm = uni, tiny = uni, zero = uni;
    comm.comm = 0.25;
    comm.fwd = 1.5;
    tiny.fwd = 1e-9;   /* uneven costs must neither hide actions nor blow up */
    zero.fwd = zero.bwd = 0;
    for (int k = 0; k < HY_SCHED_COUNT; k++) {
        test_json(params((hy_sched_kind)k, 4, 8, 2, 2), uni);
        test_json(params((hy_sched_kind)k, 3, 6, 1, 3), comm);
        test_json(params((hy_sched_kind)k, 1, 1, 1, 1), uni);
        test_timeline(params((hy_sched_kind)k, 4, 8, 2, 2), uni, 120);
        test_timeline(params((hy_sched_kind)k, 2, 12, 1, 2), uni, 60);
        test_timeline(params((hy_sched_kind)k, 1, 2, 1, 1), uni, 120);
        test_timeline(params((hy_sched_kind)k, 3, 6, 1, 3), comm, 120);
        test_timeline(params((hy_sched_kind)k, 4, 4, 1, 1), tiny, 120);
        test_timeline(params((hy_sched_kind)k, 2, 4, 2, 2), zero, 80);
        test_svg(params((hy_sched_kind)k, 4, 8, 2, 2));
    }
    test_timeline_exact();
    test_summary();
    test_svg_save();
    test_compare();
    test_compare_recompute();
    test_compare_skip();
    test_run();
    return TEST_END("plan");
}
