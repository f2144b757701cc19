/*
 * testops.c — the CPU backend's test ops (backend_test.h).
 *
 * Each packs its arguments and enqueues a call through hy_cpu_call, as the
 * math entries do (math.c), so it runs now or is recorded and replayed with
 * the rest of the rank's iteration. kernels/cuda/testops.cu runs the same
 * ops as kernels on a GPU.
 */
#include <errno.h>
#include <time.h>

#include "backend_test.h"
#include "cpu_backend.h"

typedef struct { uint32_t *buf; size_t n; uint32_t key; const uint32_t *iter; } fill_args;
static void run_fill(const void *p) {
    const fill_args *a = p;
    uint32_t it = *a->iter;
    for (size_t i = 0; i < a->n; i++) a->buf[i] = hy_pattern(a->key, it, (uint32_t)i);
}
static int cpu_test_fill(hy_stream *s, uint32_t *buf, size_t n, uint32_t key, const uint32_t *iter,
                         hy_error *err) {
    fill_args a = { buf, n, key, iter };
    return HY_CALL(s, HY_OPK_OTHER, run_fill, a, err);
}

typedef struct {
    const uint32_t *buf;
    size_t n;
    uint32_t key;
    const uint32_t *iter;
    uint32_t *errors;
} check_args;
static void run_check(const void *p) {
    const check_args *a = p;
    uint32_t it = *a->iter, bad = 0;
    for (size_t i = 0; i < a->n; i++) bad += a->buf[i] != hy_pattern(a->key, it, (uint32_t)i);
    *a->errors += bad;
}
static int cpu_test_check(hy_stream *s, const uint32_t *buf, size_t n, uint32_t key,
                          const uint32_t *iter, uint32_t *errors, hy_error *err) {
    check_args a = { buf, n, key, iter, errors };
    return HY_CALL(s, HY_OPK_OTHER, run_check, a, err);
}

typedef struct { uint32_t key; const uint32_t *iter; uint32_t max_ns; } delay_args;
static void run_delay(const void *p) {
    const delay_args *a = p;
    if (a->max_ns == 0) return;
    uint32_t ns = hy_pattern(a->key, *a->iter, 0) % a->max_ns;
    struct timespec ts = { 0, (long)ns };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}
static int cpu_test_delay(hy_stream *s, uint32_t key, const uint32_t *iter, uint32_t max_ns,
                          hy_error *err) {
    delay_args a = { key, iter, max_ns };
    return HY_CALL(s, HY_OPK_OTHER, run_delay, a, err);
}

typedef struct { uint32_t *counter; } add_args;
static void run_add(const void *p) { *((const add_args *)p)->counter += 1; }
static int cpu_test_add(hy_stream *s, uint32_t *counter, hy_error *err) {
    add_args a = { counter };
    return HY_CALL(s, HY_OPK_OTHER, run_add, a, err);
}

const hy_backend_test_ops *hy_cpu_test_ops(void) {
    static const hy_backend_test_ops ops = {
        .fill = cpu_test_fill,
        .check = cpu_test_check,
        .delay = cpu_test_delay,
        .add = cpu_test_add,
    };
    return &ops;
}
