/*
 * test_measured.c — reading a profile's summary.json back.
 *
 * A good summary loads to its values; a summary that is right but for one
 * thing is refused as an input error naming the file and the JSON path.
 * (That what `hanayo profile` writes reads back to the same costs is in
 * test_profile.c, which has a profile to write.) Files go to a mkdtemp
 * directory under $TMPDIR (or /tmp), removed at the end.
 */
#include "measured.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static void remove_path(const char *name) {
    char path[320];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

/* A summary.json that is right but for one thing; the error must name the
 * file and `where`. */
static void bad_summary(const char *text, const char *where) {
    char path[320];
    snprintf(path, sizeof path, "%s/bad.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) { CHECK(0); return; }
    fputs(text, f);
    fclose(f);
    hy_measured_costs mc;
    hy_error err;
    hy_error_clear(&err);
    int rc = hy_measured_costs_load(&mc, path, &err);
    CHECKF(rc == HY_ERR_INPUT && strstr(err.msg, path) && strstr(err.msg, where),
           "want an input error naming %s and %s, got %d: %s", path, where, rc, err.msg);
    remove_path("bad.json");
}

#define SCHED "\"schedule\": {\"kind\": \"1f1b\", \"ranks\": 2, \"micro_batches\": 4, " \
              "\"waves\": 0, \"chunks\": 1, \"stages\": 2}"
#define MODEL "\"cost_model\": {\"layer_fwd_ms\": 1, \"layer_bwd_ms\": 2, \"first_fwd_ms\": 0, " \
              "\"first_bwd_ms\": 0, \"last_fwd_ms\": 1, \"last_bwd_ms\": 1}"

static void test_bad_summaries(void) {
    bad_summary("{", "line 1");
    bad_summary("[1, 2]", "top level");
    bad_summary("{" SCHED ", \"comm_ms\": 0, \"split\": [2, 2], \"stages\": [{\"fwd_ms\": 1, "
                "\"bwd_ms\": 2}, {\"fwd_ms\": -1, \"bwd_ms\": 2}], " MODEL "}", "stages[1].fwd_ms");
    bad_summary("{" SCHED ", \"comm_ms\": 0, \"split\": [2, 2], \"stages\": [{\"fwd_ms\": 1, "
                "\"bwd_ms\": 2}], " MODEL "}", "stages must be an array of 2");
    bad_summary("{" SCHED ", \"comm_ms\": 0, \"split\": [2, 2], \"stages\": [{\"fwd_ms\": 1, "
                "\"bwd_ms\": 2}, {\"fwd_ms\": 1}], " MODEL "}", "stages[1].bwd_ms");
    bad_summary("{" SCHED ", \"split\": [2, 2], \"stages\": [], " MODEL "}", "comm_ms");
    bad_summary("{\"schedule\": {\"kind\": \"zigzag\"}}", "schedule.kind");
    bad_summary("{" SCHED ", \"comm_ms\": \"fast\"}", "comm_ms");
    bad_summary("{" SCHED ", \"comm_ms\": 0, \"split\": [2, 2], \"stages\": [{\"fwd_ms\": 1, "
                "\"bwd_ms\": 2}, {\"fwd_ms\": 1, \"bwd_ms\": 2}], \"cost_model\": "
                "{\"layer_fwd_ms\": -1}}", "cost_model.layer_fwd_ms");
    /* A good one loads. */
    char path[320];
    snprintf(path, sizeof path, "%s/good.json", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("{" SCHED ", \"comm_ms\": 0.5, \"split\": [2, 2], \"stages\": [{\"fwd_ms\": 1, "
              "\"bwd_ms\": 2}, {\"fwd_ms\": 3, \"bwd_ms\": 4}], " MODEL "}", f);
        fclose(f);
    }
    hy_measured_costs mc;
    hy_error err;
    CHECK(hy_measured_costs_load(&mc, path, &err) == HY_OK);
    CHECK(mc.comm == 0.5 && mc.fwd[1] == 3 && mc.bwd[1] == 4 && mc.model.layer_bwd == 2);
    hy_measured_costs_free(&mc);
    remove_path("good.json");
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/hy_test_measured.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror(dir);
        return 1;
    }
    test_bad_summaries();
    rmdir(dir);
    return TEST_END("measured");
}
