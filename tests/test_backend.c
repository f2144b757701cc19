/*
 * test_backend.c — the device-query piece of backend.h.
 *
 * Runs on any machine: with no GPU (CI, or a CPU-only build) the count
 * must be 0 without an error and every per-device call must fail with a
 * message that says why; with GPUs, every visible device must describe
 * itself sensibly and out-of-range indices must be refused.
 */
#include <string.h>

#include "backend.h"
#include "test.h"

/* Whether the space-separated list `list` holds the word `word`. */
static int has_word(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n) {
        int starts = p == list || p[-1] == ' ';
        int ends = p[n] == '\0' || p[n] == ' ';
        if (starts && ends) return 1;
    }
    return 0;
}

static void test_backends_compiled(void) {
    const char *b = hy_backends_compiled();
    CHECK(b != NULL);
    CHECK(has_word(b, "cpu"));
#if HY_HAVE_CUDA
    CHECKF(has_word(b, "cuda"), "a CUDA build reports \"%s\"", b);
#else
    CHECKF(!has_word(b, "cuda"), "a CPU-only build reports \"%s\"", b);
#endif
}

/* No device visible: per-device calls fail with a clear message. */
static void test_no_device(void) {
    hy_error err;
    hy_device_info info;
    hy_error_clear(&err);
    int rc = hy_device_query(0, &info, &err);
    CHECK(rc == HY_ERR_RUNTIME);
    CHECK(err.status == rc);
#if HY_HAVE_CUDA
    CHECKF(strstr(err.msg, "no CUDA device is visible") != NULL, "message: %s", err.msg);
#else
    CHECKF(strstr(err.msg, "no CUDA backend in this build") != NULL, "message: %s", err.msg);
#endif

    int yes = -1;
    hy_error_clear(&err);
    CHECK(hy_device_can_access_peer(0, 0, &yes, &err) == HY_ERR_RUNTIME);
    CHECK(yes == 0);
    CHECK(err.msg[0] != '\0');

    /* A NULL err is allowed everywhere (error.h); the status still comes back. */
    CHECK(hy_device_query(0, &info, NULL) == HY_ERR_RUNTIME);
}

/* Devices visible: each describes itself, and bad indices are refused. */
static void test_devices(int n) {
    hy_error err;
    for (int i = 0; i < n; i++) {
        hy_device_info info;
        memset(&info, 0, sizeof info);
        hy_error_clear(&err);
        CHECKF(hy_device_query(i, &info, &err) == HY_OK, "device %d: %s", i, err.msg);
        CHECK(info.name[0] != '\0');
        CHECK(info.total_mem > 0);
        CHECK(info.cc_major >= 1);
        CHECK(info.sm_count > 0);
        printf("device %d: %s, cc %d.%d, %d SMs, %.1f GiB\n", i, info.name,
               info.cc_major, info.cc_minor, info.sm_count,
               (double)info.total_mem / (1024.0 * 1024.0 * 1024.0));

        int yes = 0;
        CHECKF(hy_device_can_access_peer(i, i, &yes, &err) == HY_OK, "%s", err.msg);
        CHECK(yes == 1);
        for (int j = 0; j < n; j++) {
            CHECKF(hy_device_can_access_peer(i, j, &yes, &err) == HY_OK, "%s", err.msg);
            CHECK(yes == 0 || yes == 1);
        }
    }

    hy_device_info info;
    hy_error_clear(&err);
    CHECK(hy_device_query(n, &info, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "does not exist") != NULL, "message: %s", err.msg);
    hy_error_clear(&err);
    CHECK(hy_device_query(-1, &info, &err) == HY_ERR_INPUT);
    int yes = -1;
    CHECK(hy_device_can_access_peer(0, n, &yes, &err) == HY_ERR_INPUT);
    CHECK(yes == 0);
}

int main(void) {
    test_backends_compiled();

    hy_error err;
    hy_error_clear(&err);
    int n = -1;
    CHECKF(hy_device_count(&n, &err) == HY_OK, "%s", err.msg);
    CHECK(n >= 0);
#if !HY_HAVE_CUDA
    CHECK(n == 0);
#endif
    /* Counting twice gives the same answer (no state kept between calls). */
    int again = -1;
    CHECK(hy_device_count(&again, &err) == HY_OK && again == n);

    if (n == 0) test_no_device();
    else test_devices(n);

    return TEST_END("test_backend");
}
