/*
 * test.h — the smallest test harness that does the job.
 *
 * Each tests/test_*.c is one program: CHECK() records a pass or a failure
 * (printing file:line and the condition when it fails), and TEST_END()
 * prints "name: N passed, N failed" and returns non-zero if anything
 * failed. No global state beyond the two counters of the one program.
 */
#ifndef HY_TEST_H
#define HY_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hy_test_passed, hy_test_failed;

/* Whether this program runs under a sanitizer ("address", "thread"), as
 * make test says in HY_SANITIZE when it runs the sanitizer builds: those
 * are there for memory errors and races, so a program may leave them the
 * repeats and the largest grids the normal build already checks. */
static inline int hy_test_under(const char *sanitizer) {
    const char *san = getenv("HY_SANITIZE");
    return san && strstr(san, sanitizer) != NULL;
}

#define CHECK(cond) do { \
    if (cond) hy_test_passed++; \
    else { hy_test_failed++; \
        fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } \
} while (0)

/* Like CHECK, with a printf-style explanation on failure. */
#define CHECKF(cond, ...) do { \
    if (cond) hy_test_passed++; \
    else { hy_test_failed++; \
        fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
        fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } \
} while (0)

#define CHECK_NEAR(a, b, tol) CHECKF(fabs((double)(a) - (double)(b)) <= (tol), \
    "%.12g vs %.12g (tol %g)", (double)(a), (double)(b), (double)(tol))

#define TEST_END(name) \
    (printf("%s: %d passed, %d failed\n", (name), hy_test_passed, hy_test_failed), \
     hy_test_failed != 0)

#endif
