/*
 * backend.c — choosing and opening a backend (backend.h, "Choosing and
 * opening a backend").
 *
 * The one place that turns a run's request (auto, cpu or cuda, the
 * devices, the ranks) into the CPU or the CUDA backend and says why, so
 * that the runtime, the training loop, the profiler and the tuner agree on
 * what a run gets and none of them asks the devices itself. It only asks
 * the backends (kernels/cpu/, kernels/cuda/ or its stand-in stub.c)
 * through the entry points backend.h declares.
 */
#include "backend.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Which backend rq gets, and why, in words (out->cuda and out->why). */
static int be_pick(const hy_backend_request *rq, hy_backend_choice *out, hy_error *err) {
    int gpus = 0;
    out->cuda = 0;
    int rc = hy_device_count(&gpus, err);
    if (rc) return rc;
    int built = strstr(hy_backends_compiled(), "cuda") != NULL;
    size_t n = sizeof out->why;
    if (rq->kind == HY_BACKEND_CUDA) {
        if (!built)
            return hy_fail(err, HY_ERR_INPUT, "backend \"cuda\": this hanayo was built without "
                           "the CUDA backend (no nvcc, or NO_CUDA=1); use backend \"cpu\" or \"auto\"");
        if (gpus == 0)
            return hy_fail(err, HY_ERR_INPUT, "backend \"cuda\": no CUDA device is visible on this "
                           "machine; use backend \"cpu\" or \"auto\"");
        out->cuda = 1;
        snprintf(out->why, n, "cuda");
    } else if (rq->kind == HY_BACKEND_AUTO && built && gpus > 0) {
        out->cuda = 1;
        snprintf(out->why, n, "cuda (auto: %d CUDA device%s)", gpus, gpus == 1 ? "" : "s");
    } else if (rq->kind == HY_BACKEND_AUTO) {
        snprintf(out->why, n, "cpu (auto: %s)", built ? "no CUDA device found"
                                                       : "built without the CUDA backend");
    } else {
        snprintf(out->why, n, "cpu");
    }
    return HY_OK;
}

/* The device rank r runs on, of `count`: as the CUDA backend maps them. */
static int be_device_of(const hy_backend_request *rq, int r, int count) {
    return r < rq->n_devices ? rq->devices[r] : r % count;
}

/* Memory per rank (out->rank_bytes) on the backend out->cuda says. A GPU
 * is shared by the ranks on it; the host by all of them. */
static int be_rank_bytes(const hy_backend_request *rq, hy_backend_choice *out, hy_error *err) {
    int P = rq->ranks;
    out->rank_bytes = INFINITY;
    if (!out->cuda) {
        long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
        if (pages > 0 && size > 0) out->rank_bytes = (double)pages * (double)size / P;
        return HY_OK;
    }
    int count = 0, rc = hy_device_count(&count, err);
    for (int r = 0; !rc && r < P && count > 0; r++) {
        int dev = be_device_of(rq, r, count), sharing = 0;
        for (int q = 0; q < P; q++) sharing += be_device_of(rq, q, count) == dev;
        hy_device_info info;
        rc = hy_device_query(dev, &info, err);
        if (rc) hy_error_prefix(err, "rank %d: ", r);
        else if ((double)info.total_mem / sharing < out->rank_bytes)
            out->rank_bytes = (double)info.total_mem / sharing;
    }
    return rc;
}

/* On CUDA, the opt-in attention kernel when HY_CUDA_ATTENTION asks for
 * it (hy_backend_cuda_attention), appended to out->why. */
static int be_attention(hy_backend_choice *out, hy_error *err) {
    int sm90 = 0, rc = hy_backend_cuda_attention(&sm90, err);
    size_t n = strlen(out->why);
    if (!rc && sm90)
        snprintf(out->why + n, sizeof out->why - n, ", attention sm90 where it applies "
                 "(HY_CUDA_ATTENTION)");
    return rc;
}

int hy_backend_describe(const hy_backend_request *rq, hy_backend_choice *out, hy_error *err) {
    memset(out, 0, sizeof *out);
    int rc = be_pick(rq, out, err);
    if (!rc && out->cuda) rc = be_attention(out, err);
    if (!rc && out->cuda) hy_backend_cuda_memory(&out->mem);
    else if (!rc) hy_backend_cpu_memory(&out->mem);
    return rc ? rc : be_rank_bytes(rq, out, err);
}

/* The kB a /proc file gives on its line "<key>: N kB" (0: not there). */
static unsigned long long be_proc_kb(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    char line[256];
    size_t n = strlen(key);
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':' &&
            sscanf(line + n + 1, "%llu kB", &kb) == 1)
            break;
    if (f) fclose(f);
    return kb;
}

/* The host's available memory: MemAvailable (free plus what the kernel
 * can reclaim), else the free pages. */
static double be_host_available(void) {
    unsigned long long kb = be_proc_kb("/proc/meminfo", "MemAvailable");
    if (kb > 0) return (double)kb * 1024.0;
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (double)pages * (double)size : INFINITY;
}

/* What RLIMIT_AS still allows this process to map: the limit less what
 * it maps now (VmSize); INFINITY without a limit. */
static double be_address_space_left(void) {
    struct rlimit lim;
    if (getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return INFINITY;
    double left = (double)lim.rlim_cur - (double)be_proc_kb("/proc/self/status", "VmSize") * 1024.0;
    return left > 0 ? left : 0;
}

int hy_backend_free_memory(const hy_backend_request *rq, const hy_backend_choice *chosen,
                           int *group, double *available, int *device, int *n_groups,
                           hy_error *err) {
    *n_groups = 0;
    if (!chosen->cuda) {
        for (int r = 0; r < rq->ranks; r++) group[r] = 0;
        available[0] = fmin(be_host_available(), be_address_space_left());
        device[0] = -1;
        *n_groups = 1;
        return HY_OK;
    }
    int count = 0, rc = hy_device_count(&count, err);
    for (int r = 0; !rc && r < rq->ranks && count > 0; r++) {
        int d = be_device_of(rq, r, count), g = 0;
        while (g < *n_groups && device[g] != d) g++;
        if (g == *n_groups) {
            size_t free_b = 0;
            rc = hy_device_free(d, &free_b, err);
            if (rc) {
                hy_error_prefix(err, "rank %d: ", r);
                break;
            }
            device[g] = d;
            available[g] = (double)free_b;
            (*n_groups)++;
        }
        group[r] = g;
    }
    return rc;
}

int hy_backend_open(const hy_backend_request *rq, hy_backend **out, hy_backend_choice *chosen,
                    hy_error *err) {
    *out = NULL;
    hy_backend_choice mine;
    if (!chosen) chosen = &mine;
    int rc = hy_backend_describe(rq, chosen, err);
    return rc ? rc : hy_backend_open_chosen(rq, chosen, out, err);
}

int hy_backend_open_chosen(const hy_backend_request *rq, const hy_backend_choice *chosen,
                           hy_backend **out, hy_error *err) {
    *out = NULL;
    if (chosen->cuda)
        return hy_backend_cuda_create(out, rq->ranks, rq->devices, rq->n_devices, 0, rq->watchdog_s,
                                      err);
    return hy_backend_cpu_create(out, rq->ranks, rq->watchdog_s, err);
}

void hy_record_gate_init(hy_record_gate *g, int ranks) {
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->ranks = ranks;
    g->arrived = g->failed = 0;
}

void hy_record_gate_destroy(hy_record_gate *g) {
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cv);
}

int hy_record_gate_pass(hy_record_gate *g, int rc) {
    pthread_mutex_lock(&g->lock);
    g->arrived++;
    if (rc) g->failed = 1;
    pthread_cond_broadcast(&g->cv);
    while (g->arrived < g->ranks && !g->failed) pthread_cond_wait(&g->cv, &g->lock);
    int failed = g->failed;
    pthread_mutex_unlock(&g->lock);
    return failed;
}
