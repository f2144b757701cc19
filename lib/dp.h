/*
 * dp.h — data parallelism across processes: N replicas of one pipeline,
 * one process each, started by mpirun or srun, their gradients summed
 * with MPI (DESIGN §9 "Data parallelism across processes").
 *
 * Inside a process nothing changes: P rank threads run the pipeline
 * schedule. Across processes, replica r of a step reads micro-batches
 * r*M .. (r+1)*M - 1 of the step's N*M, so N replicas of M micro-batches
 * train exactly what one process of N*M would (up to the order of the
 * float sums). Each pipeline rank's gradients are summed over the N
 * replicas of that rank, on its own communicator, started as soon as a
 * stage's last backward is done and waited for before the norm, so the
 * sums overlap the remaining backwards; then norm, clip and AdamW run as
 * in one process and every replica holds the same weights.
 *
 * A process joins an MPI job only when its launcher says it is part of
 * one (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK in the environment);
 * otherwise hy_dp_start gives NULL and hanayo runs as one process, as in
 * a build without MPI. Everything here accepts NULL as "one replica".
 *
 * MPI's errors are fatal (its default handler: the whole job ends with
 * MPI's message), so the gradient sums, which run inside a rank's stream,
 * need no error path. The rest of the protocol (hy_dp_agree) turns one
 * replica's failure at start-up into one error on every replica instead
 * of a hang.
 */
#ifndef HY_DP_H
#define HY_DP_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "error.h"

typedef struct hy_dp hy_dp;

/* "mpi" when MPI is compiled in, else "none". */
const char *hy_dp_compiled(void);

/* The number of processes the launcher (mpirun, srun) started this one
 * among, read from its environment without joining the job: 0 when not
 * launched by one, or when it does not say. */
int hy_dp_launched_size(void);

/* Joins the MPI job this process was launched in (MPI_Init_thread with
 * MPI_THREAD_MULTIPLE: each rank thread sums its own gradients), or sets
 * *out = NULL when it was not launched in one. Launched by an MPI
 * launcher into a job of more than one process by a build without MPI:
 * HY_ERR_INPUT, since N copies would each train alone. */
int hy_dp_start(hy_dp **out, int *argc, char ***argv, hy_error *err);

/* Every wait for the other replicas (each collective below, and the
 * gradient sums) polls, and one longer than `seconds` (the config's
 * watchdog_s; 60 until set) reports the replica and the collective and
 * ends the whole job: a stalled or vanished replica never hangs the rest.
 * seconds <= 0: no limit. NULL: nothing. */
void hy_dp_set_watchdog(hy_dp *dp, double seconds);

/* Leaves the job (MPI_Finalize); NULL: nothing. */
void hy_dp_finish(hy_dp *dp);

/* Ends every process of the job at once with status (MPI_Abort): after a
 * replica's own error was reported, so the others do not wait forever
 * for it in a collective. */
void hy_dp_abort(hy_dp *dp, int status);

/* The number of replicas and this one's index (1 and 0 for NULL). */
int hy_dp_size(const hy_dp *dp);
int hy_dp_rank(const hy_dp *dp);

/* Collective. Every replica passes its status and error; when any failed,
 * every replica gets the first failing one's (the lowest index),
 * "replica K: <its message>" (without "replica K: " when all failed), and
 * the status; else HY_OK. Afterwards
 * hy_dp_agreed says whether the error in hand is such a shared one (to be
 * reported once, by replica 0) or the replica's own. */
int hy_dp_agree(hy_dp *dp, int status, hy_error *err);
int hy_dp_agreed(const hy_dp *dp);

/* Collective: sums x[0..n) over the replicas, in place. */
int hy_dp_sum(hy_dp *dp, double *x, int n, hy_error *err);

/* Collective: *v becomes the largest of the replicas' values. */
int hy_dp_max(hy_dp *dp, int *v, hy_error *err);

/* Collective: returns once every replica has called it. */
int hy_dp_barrier(hy_dp *dp, hy_error *err);

/* Collective: *same = 1 when every replica passed the same v. */
int hy_dp_same(hy_dp *dp, uint64_t v, int *same, hy_error *err);

/* Collective: makes one reducer per pipeline rank (ranks of them), each on
 * its own communicator, with room for `buckets` sums in flight. Again
 * with the same shape: nothing (the runtime calls it at its first step,
 * when every replica is past its checks). */
int hy_dp_open_ranks(hy_dp *dp, int ranks, int buckets, hy_error *err);

/* The reducer of pipeline rank r (backend.h's hy_reducer), or NULL for a
 * NULL dp or one of a single replica: nothing to sum. */
hy_reducer *hy_dp_reducer(hy_dp *dp, int rank);

#endif
