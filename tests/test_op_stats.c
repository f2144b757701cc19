/*
 * test_op_stats.c — the CPU backend's op timing (backend.h, op_stats).
 *
 * What is checked is bookkeeping, never speed: timing is off until asked
 * for; when on, each piece of work lands in its rank's row under its kind
 * (eager calls, waits, copies, flag writes, and the commands of a replayed
 * graph, but not the recording itself); a call hands back the counts and
 * zeroes them; off again, nothing is counted. Seconds are only checked to
 * lie between 0 and the wall time around the work, which holds on any
 * machine however loaded.
 */
#include <string.h>
#include <time.h>

#include "backend.h"
#include "test.h"

#define K HY_OPK_COUNT

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Every count in out is zero except the (rank, kind, calls) triples given.
 * Each kind's seconds are at most `wall`: not a bound on speed, since the
 * ops ran one after another inside the interval wall measured, on the
 * same clock, whatever the machine's load. */
typedef struct { int rank, kind; uint64_t calls; } expect;

static void check_counts(const hy_op_stat *out, int ranks, const expect *e, int n, double wall,
                         const char *what) {
    for (int r = 0; r < ranks; r++) {
        for (int k = 0; k < K; k++) {
            uint64_t want = 0;
            for (int i = 0; i < n; i++)
                if (e[i].rank == r && e[i].kind == k) want = e[i].calls;
            const hy_op_stat *st = &out[r * K + k];
            CHECKF(st->calls == want, "%s: rank %d %s: %llu calls, want %llu", what, r,
                   hy_op_kind_name(k), (unsigned long long)st->calls, (unsigned long long)want);
            CHECKF(st->seconds >= 0 && st->seconds <= wall, "%s: rank %d %s: %g s (wall %g s)",
                   what, r, hy_op_kind_name(k), st->seconds, wall);
            if (want == 0) CHECK(st->seconds == 0);
        }
    }
}

int main(void) {
    hy_error err;
    hy_backend *be = NULL;
    CHECK(hy_backend_cpu_create(&be, 2, 10.0, &err) == HY_OK);
    if (!be) return TEST_END("test_op_stats");
    const hy_backend_ops *o = be->ops;
    CHECK(o->op_stats != NULL);
    CHECK(strcmp(hy_op_kind_name(HY_OPK_WAIT), "wait") == 0);
    CHECK(strcmp(hy_op_kind_name(HY_OPK_COUNT), "?") == 0);

    hy_stream *s0 = NULL, *s1 = NULL;
    CHECK(o->stream_create(be, 0, &s0, &err) == HY_OK);
    CHECK(o->stream_create(be, 1, &s1, &err) == HY_OK);
    enum { N = 8, C = 16, OC = 24 };
    float *inp, *w, *out, *dout, *dinp, *dw, *a, *b;
    uint32_t *flag;
    CHECK(o->alloc(be, 0, sizeof(float) * N * C, (void **)&inp, &err) == HY_OK);
    CHECK(o->alloc(be, 0, sizeof(float) * C * OC, (void **)&w, &err) == HY_OK);
    CHECK(o->alloc(be, 0, sizeof(float) * N * OC, (void **)&out, &err) == HY_OK);
    CHECK(o->alloc(be, 0, sizeof(float) * N * OC, (void **)&dout, &err) == HY_OK);
    CHECK(o->alloc(be, 0, sizeof(float) * N * C, (void **)&dinp, &err) == HY_OK);
    CHECK(o->alloc(be, 0, sizeof(float) * C * OC, (void **)&dw, &err) == HY_OK);
    CHECK(o->alloc(be, 1, sizeof(float) * 64, (void **)&a, &err) == HY_OK);
    CHECK(o->alloc(be, 1, sizeof(float) * 64, (void **)&b, &err) == HY_OK);
    CHECK(o->alloc_shared(be, 0, 1, sizeof *flag, (void **)&flag, &err) == HY_OK);
    hy_op_stat stats[2 * K];
    hy_wait_site site = { 1, "test wait" };

    /* Off by default: work before the first call is not counted. */
    CHECK(o->matmul_fwd(s0, out, inp, w, NULL, N, C, OC, &err) == HY_OK);
    memset(stats, 0xff, sizeof stats);
    CHECK(o->op_stats(be, 1, stats, &err) == HY_OK);
    check_counts(stats, 2, NULL, 0, 0, "off by default");

    /* On: eager work lands in its rank's row, under its kind. */
    double t0 = now_s();
    CHECK(o->matmul_fwd(s0, out, inp, w, NULL, N, C, OC, &err) == HY_OK);
    CHECK(o->matmul_fwd(s0, out, inp, w, NULL, N, C, OC, &err) == HY_OK);
    CHECK(o->copy(s0, b, a, sizeof(float) * 64, &err) == HY_OK);
    CHECK(o->gelu_fwd(s1, b, a, 64, HY_GELU_TANH, &err) == HY_OK);
    CHECK(o->write_flag(s1, flag, 1, &err) == HY_OK);
    CHECK(o->wait_flag(s1, flag, 1, 1, &site, &err) == HY_OK);
    double wall = now_s() - t0;
    CHECK(o->op_stats(be, 1, stats, &err) == HY_OK);
    const expect eager[] = {
        { 0, HY_OPK_MATMUL_FWD, 2 }, { 0, HY_OPK_COPY, 1 },
        { 1, HY_OPK_GELU, 1 }, { 1, HY_OPK_OTHER, 1 }, { 1, HY_OPK_WAIT, 1 },
    };
    check_counts(stats, 2, eager, 5, wall, "eager");

    /* The call zeroed them; out may be NULL. */
    CHECK(o->op_stats(be, 1, NULL, &err) == HY_OK);
    CHECK(o->matmul_bwd(s0, dinp, dw, NULL, dout, inp, w, N, C, OC, &err) == HY_OK);
    CHECK(o->op_stats(be, 1, stats, &err) == HY_OK);
    const expect one_bwd[] = { { 0, HY_OPK_MATMUL_BWD, 1 } };
    check_counts(stats, 2, one_bwd, 1, 1e9, "after a reset");

    /* Recording runs nothing, so counts nothing; each replay counts. */
    hy_graph *g = NULL;
    CHECK(o->capture_begin(s0, &err) == HY_OK);
    CHECK(o->matmul_bwd(s0, dinp, dw, NULL, dout, inp, w, N, C, OC, &err) == HY_OK);
    CHECK(o->lm_head_fwd(s0, out, inp, w, NULL, N, C, OC, &err) == HY_OK);
    CHECK(o->capture_end(s0, &g, &err) == HY_OK);
    CHECK(o->op_stats(be, 1, stats, &err) == HY_OK);
    check_counts(stats, 2, NULL, 0, 0, "recording");
    t0 = now_s();
    for (int i = 0; i < 3 && g; i++) CHECK(o->graph_launch(g, s0, &err) == HY_OK);
    wall = now_s() - t0;
    CHECK(o->op_stats(be, 0, stats, &err) == HY_OK);
    const expect replay[] = { { 0, HY_OPK_MATMUL_BWD, 3 }, { 0, HY_OPK_LM_HEAD_FWD, 3 } };
    check_counts(stats, 2, replay, 2, wall, "replay");

    /* Off again: neither replays nor eager work count. */
    if (g) CHECK(o->graph_launch(g, s0, &err) == HY_OK);
    CHECK(o->gelu_fwd(s1, b, a, 64, HY_GELU_TANH, &err) == HY_OK);
    CHECK(o->op_stats(be, 0, stats, &err) == HY_OK);
    check_counts(stats, 2, NULL, 0, 0, "off again");

    o->graph_destroy(g);
    o->stream_destroy(s0);
    o->stream_destroy(s1);
    o->destroy(be);
    return TEST_END("test_op_stats");
}
