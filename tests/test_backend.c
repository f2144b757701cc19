/*
 * test_backend.c — the device-query piece of backend.h, and choosing and
 * opening a backend (lib/backend.c).
 *
 * Runs on any machine: with no GPU (CI, or a CPU-only build) the count
 * must be 0 without an error and every per-device call must fail with a
 * message that says why; with GPUs, every visible device must describe
 * itself sensibly and out-of-range indices must be refused. A config's
 * backend request gets the CPU or CUDA as `auto`, `cpu` and `cuda`
 * promise, says why, budgets the memory per rank, and opens what it says.
 */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "config.h"
#include "test.h"
#include "lib/testrun.h"

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

/* The request a config makes, from `sets` on top of the defaults. */
static int request_of(hy_run *c, const char *const *sets, int n, hy_backend_request *rq) {
    hy_error err;
    int rc = hy_test_run_load(c, NULL, sets, n, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (!rc) *rq = c->backend;
    return rc;
}

/* `cpu`, and `auto` or `cuda` on a machine without a usable GPU. */
static void test_choice_without_gpu(void) {
    hy_run c;
    hy_backend_request rq;
    hy_backend_choice ch;
    hy_error err;
    const char *cpu[] = { "backend=cpu", "schedule.ranks=4", "schedule.kind=1f1b",
                          "watchdog_s=7", "model.layers=4" };
    if (request_of(&c, cpu, 5, &rq)) return;
    CHECK(rq.kind == HY_BACKEND_CPU && rq.ranks == 4 && rq.watchdog_s == 7 && rq.n_devices == 0);
    CHECK(hy_backend_describe(&rq, &ch, &err) == HY_OK);
    CHECK(ch.cuda == 0 && strcmp(ch.why, "cpu") == 0);
    double host = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
    CHECKF(fabs(ch.rank_bytes - host / 4) <= 1e-9 * host, "%.0f bytes per rank, host %.0f",
           ch.rank_bytes, host);
    hy_backend *be = (hy_backend *)&c;   /* open sets it, to NULL on failure */
    CHECKF(hy_backend_open(&rq, &be, &ch, &err) == HY_OK, "%s", err.msg);
    CHECK(be && strcmp(be->ops->name, "cpu") == 0 && be->ranks == 4 && be->watchdog_s == 7);
    CHECK(be && be->test_ops != NULL);
    if (be) be->ops->destroy(be);
    /* The backend's own input errors come back as they are. */
    rq.ranks = 0;
    be = (hy_backend *)&c;
    CHECK(hy_backend_open(&rq, &be, NULL, &err) == HY_ERR_INPUT && be == NULL);
    CHECKF(strstr(err.msg, "ranks must be in 1..1024") != NULL, "%s", err.msg);
    hy_run_free(&c);

    const char *autob[] = { "backend=auto" };
    if (request_of(&c, autob, 1, &rq)) return;
    CHECK(hy_backend_describe(&rq, &ch, &err) == HY_OK && ch.cuda == 0);
#if HY_HAVE_CUDA
    CHECKF(strcmp(ch.why, "cpu (auto: no CUDA device found)") == 0, "%s", ch.why);
#else
    CHECKF(strcmp(ch.why, "cpu (auto: built without the CUDA backend)") == 0, "%s", ch.why);
#endif
    CHECKF(hy_backend_open(&rq, &be, NULL, &err) == HY_OK, "%s", err.msg);
    CHECK(be && strcmp(be->ops->name, "cpu") == 0);
    if (be) be->ops->destroy(be);
    hy_run_free(&c);

    const char *cuda[] = { "backend=cuda" };
    if (request_of(&c, cuda, 1, &rq)) return;
    CHECK(hy_backend_describe(&rq, &ch, &err) == HY_ERR_INPUT);
#if HY_HAVE_CUDA
    CHECKF(strstr(err.msg, "backend \"cuda\": no CUDA device is visible") != NULL, "%s", err.msg);
#else
    CHECKF(strstr(err.msg, "backend \"cuda\": this hanayo was built without") != NULL, "%s",
           err.msg);
#endif
    be = (hy_backend *)&c;
    CHECK(hy_backend_open(&rq, &be, NULL, &err) == HY_ERR_INPUT && be == NULL);
    hy_run_free(&c);
}

/* `auto` takes the GPUs; two ranks on device 0 share its memory. */
static void test_choice_with_gpus(int n) {
    hy_run c;
    hy_backend_request rq;
    hy_backend_choice ch;
    hy_error err;
    hy_device_info info;
    const char *autob[] = { "backend=auto", "schedule.ranks=2", "schedule.kind=1f1b",
                            "devices=[0,0]" };
    if (request_of(&c, autob, 4, &rq)) return;
    CHECKF(hy_backend_describe(&rq, &ch, &err) == HY_OK, "%s", err.msg);
    char want[64];
    snprintf(want, sizeof want, "cuda (auto: %d CUDA device%s)", n, n == 1 ? "" : "s");
    CHECKF(ch.cuda == 1 && strcmp(ch.why, want) == 0, "%s", ch.why);
    CHECK(hy_device_query(0, &info, &err) == HY_OK);
    CHECK(ch.rank_bytes == (double)info.total_mem / 2);
    hy_run_free(&c);
    const char *bad[] = { "backend=cuda", "schedule.ranks=2", "schedule.kind=1f1b",
                          "devices=[0,99]" };
    if (request_of(&c, bad, 4, &rq)) return;
    CHECK(hy_backend_describe(&rq, &ch, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "rank 1: CUDA device 99 does not exist") != NULL, "%s", err.msg);
    hy_run_free(&c);
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
    if (n == 0) test_choice_without_gpu();
    else test_choice_with_gpus(n);

    return TEST_END("test_backend");
}
