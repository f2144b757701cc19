/*
 * dp.c — see dp.h.
 *
 * Compiled with HY_HAVE_MPI (the Makefile adds mpicc's flags for this one
 * file) when MPI is found; otherwise the same functions answer "one
 * replica", so no caller needs an #ifdef.
 */
#include "dp.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "watchdog.h"

/* Whether the launcher put this process in a job of more than one
 * process (*size > 1), or in one at all (return 1). */
static int dp_launched(int *size) {
    static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE" };
    const char *rank_only = getenv("PMIX_RANK");
    *size = 0;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            *size = atoi(v);
            return 1;
        }
    }
    return rank_only && *rank_only;
}

int hy_dp_launched_size(void) {
    int size;
    dp_launched(&size);
    return size;
}

#ifdef HY_HAVE_MPI

#include <mpi.h>

typedef struct {
    hy_reducer base;       /* first: the backend hands back a hy_reducer * */
    MPI_Comm comm;
    MPI_Request *req;      /* [buckets] */
    int buckets;
    struct hy_dp *dp;      /* for the watchdog */
    int rank;              /* the pipeline rank that sums through it */
} dp_reducer;

struct hy_dp {
    int rank, size;
    MPI_Comm world;        /* the host's collectives, apart from the ranks' */
    dp_reducer *reducers;  /* [ranks] */
    int ranks;
    int agreed;
    double watchdog_s;     /* the longest wait for the other replicas */
};

/* Waits for req without blocking in MPI: polling, so that a wait for a
 * replica that stalled or vanished ends. Past dp->watchdog_s it reports
 * (what: the collective, for the message) and ends the whole job, since
 * the other replicas are waiting in the same collective and none of them
 * can go on (DESIGN §9 "Data parallelism across processes"). */
static void dp_wait(const struct hy_dp *dp, MPI_Request *req, const char *what, int rank) {
    hy_watchdog dog;   /* time this process was stopped does not count (watchdog.h) */
    hy_watchdog_start(&dog, dp->watchdog_s);
    long pause_ns = 1000;
    for (;;) {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (hy_watchdog_expired(&dog)) {
            char who[48] = "";
            if (rank >= 0) snprintf(who, sizeof who, " (pipeline rank %d)", rank);
            fprintf(stderr, "hanayo: replica %d: watchdog: waited %.1f s in %s%s for the other "
                    "replicas; one of them is stalled or gone (watchdog_s = %g)\n", dp->rank,
                    hy_watchdog_waited(&dog), what, who, dp->watchdog_s);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, HY_ERR_RUNTIME);
        }
        /* From a microsecond up to a millisecond: quick for the sums that
         * are nearly done, cheap for a long wait. A signal ends a nap
         * early (EINTR); the loop just looks again. */
        struct timespec ts = { 0, pause_ns };
        nanosleep(&ts, NULL);
        if (pause_ns < 1000000) pause_ns *= 2;
    }
}

/* A blocking-looking collective on the world communicator, watched. */
static int dp_allreduce(const struct hy_dp *dp, const void *in, void *out, int n, MPI_Datatype type,
                        MPI_Op op, const char *what) {
    MPI_Request req;
    int rc = MPI_Iallreduce(in, out, n, type, op, dp->world, &req);
    if (rc == MPI_SUCCESS) dp_wait(dp, &req, what, -1);
    return rc;
}

const char *hy_dp_compiled(void) { return "mpi"; }

static int dp_mpi_error(hy_error *err, const char *call, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", code);
    return hy_fail(err, HY_ERR_RUNTIME, "%s failed: %s", call, text);
}

int hy_dp_start(hy_dp **out, int *argc, char ***argv, hy_error *err) {
    *out = NULL;
    int size = 0;
    if (!dp_launched(&size)) return HY_OK;
    int provided = 0, rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) return dp_mpi_error(err, "MPI_Init_thread", rc);
    if (provided < MPI_THREAD_MULTIPLE) {
        MPI_Finalize();
        return hy_fail(err, HY_ERR_RUNTIME, "the MPI library offers thread level %d, hanayo "
                       "needs MPI_THREAD_MULTIPLE (%d): each pipeline rank's thread sums its "
                       "own gradients; use an MPI built with thread support", provided,
                       MPI_THREAD_MULTIPLE);
    }
    hy_dp *dp = calloc(1, sizeof *dp);
    if (!dp) {
        MPI_Finalize();
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &dp->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &dp->size);
    MPI_Comm_dup(MPI_COMM_WORLD, &dp->world);
    dp->watchdog_s = 60;   /* the config's default, until hy_dp_set_watchdog */
    *out = dp;
    return HY_OK;
}

void hy_dp_finish(hy_dp *dp) {
    if (!dp) return;
    for (int r = 0; r < dp->ranks; r++) {
        MPI_Comm_free(&dp->reducers[r].comm);
        free(dp->reducers[r].req);
    }
    free(dp->reducers);
    MPI_Comm_free(&dp->world);
    free(dp);
    MPI_Finalize();
}

void hy_dp_abort(hy_dp *dp, int status) {
    if (dp) MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
}

int hy_dp_size(const hy_dp *dp) { return dp ? dp->size : 1; }
int hy_dp_rank(const hy_dp *dp) { return dp ? dp->rank : 0; }
int hy_dp_agreed(const hy_dp *dp) { return dp && dp->agreed; }

int hy_dp_agree(hy_dp *dp, int status, hy_error *err) {
    if (!dp) return status;
    dp->agreed = 0;
    /* The first failing replica (the least index of those failing), and
     * how many failed. */
    int mine = status ? dp->rank : dp->size, first = dp->size, failing = status != 0, all = 0;
    int rc = dp_allreduce(dp, &mine, &first, 1, MPI_INT, MPI_MIN, "agreeing on the step's outcome");
    if (rc == MPI_SUCCESS)
        rc = dp_allreduce(dp, &failing, &all, 1, MPI_INT, MPI_SUM, "agreeing on the step's outcome");
    if (rc != MPI_SUCCESS) return dp_mpi_error(err, "MPI_Allreduce", rc);
    if (first == dp->size) return HY_OK;
    /* Its status and message, to everyone. */
    struct {
        int status;
        char msg[sizeof err->msg];
    } what = { status, "" };
    if (dp->rank == first) snprintf(what.msg, sizeof what.msg, "%s", err->msg);
    MPI_Request req;
    rc = MPI_Ibcast(&what, (int)sizeof what, MPI_BYTE, first, dp->world, &req);
    if (rc != MPI_SUCCESS) return dp_mpi_error(err, "MPI_Ibcast", rc);
    dp_wait(dp, &req, "passing on a replica's error", -1);
    dp->agreed = 1;
    hy_error_clear(err);
    /* Every replica failing alike (the same input, a step every replica
     * found non-finite) is one error, not one replica's. */
    if (all == dp->size) return hy_fail(err, what.status, "%s", what.msg);
    return hy_fail(err, what.status, "replica %d: %s", first, what.msg);
}

int hy_dp_max(hy_dp *dp, int *v, hy_error *err) {
    if (!dp) return HY_OK;
    int rc = dp_allreduce(dp, MPI_IN_PLACE, v, 1, MPI_INT, MPI_MAX, "a maximum over replicas");
    return rc == MPI_SUCCESS ? HY_OK : dp_mpi_error(err, "MPI_Allreduce", rc);
}

/* A reduction, not MPI_Barrier: the polled wait of dp_allreduce keeps it
 * under the watchdog. */
int hy_dp_barrier(hy_dp *dp, hy_error *err) {
    int v = 0;
    return hy_dp_max(dp, &v, err);
}

int hy_dp_sum(hy_dp *dp, double *x, int n, hy_error *err) {
    if (!dp) return HY_OK;
    int rc = dp_allreduce(dp, MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, "a sum over replicas");
    return rc == MPI_SUCCESS ? HY_OK : dp_mpi_error(err, "MPI_Allreduce", rc);
}

int hy_dp_same(hy_dp *dp, uint64_t v, int *same, hy_error *err) {
    *same = 1;
    if (!dp) return HY_OK;
    unsigned long long lo = v, hi = v, mine = v;
    int rc = dp_allreduce(dp, &mine, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN,
                          "comparing the replicas");
    if (rc == MPI_SUCCESS)
        rc = dp_allreduce(dp, &mine, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX,
                          "comparing the replicas");
    if (rc != MPI_SUCCESS) return dp_mpi_error(err, "MPI_Allreduce", rc);
    *same = lo == hi;
    return HY_OK;
}

/* The reducer's two calls, from rank threads (MPI_THREAD_MULTIPLE), each
 * on its rank's communicator. MPI_IN_PLACE: the gradients are summed where
 * they are. */
static void dp_start_sum(hy_reducer *r, int bucket, float *buf, size_t n) {
    dp_reducer *d = (dp_reducer *)r;
    MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, d->comm, &d->req[bucket]);
}

static void dp_wait_sum(hy_reducer *r, int bucket) {
    dp_reducer *d = (dp_reducer *)r;
    dp_wait(d->dp, &d->req[bucket], "the gradient sum", d->rank);
}

static int dp_broadcast(hy_reducer *r, void *buf, size_t bytes) {
    dp_reducer *d = (dp_reducer *)r;
    if (bytes > (size_t)INT_MAX) return -1;
    MPI_Request req;
    if (MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, d->comm, &req) != MPI_SUCCESS) return -1;
    dp_wait(d->dp, &req, "setting up the gradient sums", d->rank);
    return 0;
}

int hy_dp_open_ranks(hy_dp *dp, int ranks, int buckets, hy_error *err) {
    if (!dp || dp->size == 1) return HY_OK;
    /* A second runtime of the same shape reuses them (collectives must
     * match on every process, and every process builds the same). */
    if (dp->ranks == ranks && dp->reducers[0].buckets == buckets) return HY_OK;
    if (dp->ranks)
        return hy_fail(err, HY_ERR_RUNTIME, "data parallel: the ranks' reducers exist already, "
                       "for another pipeline");
    dp->reducers = calloc((size_t)ranks, sizeof *dp->reducers);
    if (!dp->reducers) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    for (int r = 0; r < ranks; r++) {
        dp_reducer *d = &dp->reducers[r];
        /* Every process dups in the same order: a collective. One
         * communicator per pipeline rank keeps the ranks' sums apart. */
        int rc = MPI_Comm_dup(dp->world, &d->comm);
        if (rc != MPI_SUCCESS) return dp_mpi_error(err, "MPI_Comm_dup", rc);
        MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_ARE_FATAL);
        d->req = malloc((size_t)buckets * sizeof *d->req);
        if (!d->req) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        for (int b = 0; b < buckets; b++) d->req[b] = MPI_REQUEST_NULL;
        d->buckets = buckets;
        d->dp = dp;
        d->rank = r;
        d->base.start = dp_start_sum;
        d->base.wait = dp_wait_sum;
        d->base.broadcast = dp_broadcast;
        d->base.replicas = dp->size;
        d->base.replica = dp->rank;
        d->base.buckets = buckets;
        dp->ranks = r + 1;
    }
    return HY_OK;
}

void hy_dp_set_watchdog(hy_dp *dp, double seconds) {
    if (dp) dp->watchdog_s = seconds;
}

hy_reducer *hy_dp_reducer(hy_dp *dp, int rank) {
    if (!dp || dp->size == 1 || rank < 0 || rank >= dp->ranks) return NULL;
    return &dp->reducers[rank].base;
}

#else /* !HY_HAVE_MPI */

struct hy_dp {
    int unused;
};

const char *hy_dp_compiled(void) { return "none"; }

int hy_dp_start(hy_dp **out, int *argc, char ***argv, hy_error *err) {
    (void)argc;
    (void)argv;
    *out = NULL;
    int size = 0;
    if (dp_launched(&size) && size > 1)
        return hy_fail(err, HY_ERR_INPUT, "started as one of %d MPI processes, but this hanayo "
                       "was built without MPI (hanayo --version): each would train alone; "
                       "install an MPI (Debian: libopenmpi-dev) and rebuild", size);
    return HY_OK;
}

void hy_dp_finish(hy_dp *dp) { (void)dp; }
void hy_dp_set_watchdog(hy_dp *dp, double seconds) { (void)dp; (void)seconds; }
void hy_dp_abort(hy_dp *dp, int status) { (void)dp; (void)status; }
int hy_dp_size(const hy_dp *dp) { (void)dp; return 1; }
int hy_dp_rank(const hy_dp *dp) { (void)dp; return 0; }
int hy_dp_agreed(const hy_dp *dp) { (void)dp; return 0; }
int hy_dp_agree(hy_dp *dp, int status, hy_error *err) { (void)dp; (void)err; return status; }

int hy_dp_barrier(hy_dp *dp, hy_error *err) {
    (void)dp; (void)err;
    return HY_OK;
}

int hy_dp_sum(hy_dp *dp, double *x, int n, hy_error *err) {
    (void)dp; (void)x; (void)n; (void)err;
    return HY_OK;
}

int hy_dp_max(hy_dp *dp, int *v, hy_error *err) {
    (void)dp; (void)v; (void)err;
    return HY_OK;
}

int hy_dp_same(hy_dp *dp, uint64_t v, int *same, hy_error *err) {
    (void)dp; (void)v; (void)err;
    *same = 1;
    return HY_OK;
}

int hy_dp_open_ranks(hy_dp *dp, int ranks, int buckets, hy_error *err) {
    (void)dp; (void)ranks; (void)buckets; (void)err;
    return HY_OK;
}

hy_reducer *hy_dp_reducer(hy_dp *dp, int rank) {
    (void)dp; (void)rank;
    return NULL;
}

#endif
