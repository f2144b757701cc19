/*
 * memplan.h — the bytes a run needs on each rank, known before anything
 * is allocated.
 *
 * The plan counts what the runtime allocates through its backend for a
 * model partitioned over a schedule (runtime.h), term by term, with the
 * same sizes the runtime asks for: each stage's weights (fp32 masters and,
 * where activations are narrower, the compute copy), gradients, AdamW's
 * two moments, the activation stash (a slot per micro-batch the schedule
 * keeps in flight on the stage: hy_schedule_in_flight), and the buffers
 * around them (mailbox slots and flags, the ranks' working buffers and the
 * head's logits, the batch's tokens, the tied embedding's replica and its
 * channels, the backend's scratch and workspaces). So a plan and the
 * backend's count of what it allocated (hy_backend_ops.allocated) agree,
 * which tests/test_memplan.c checks on the CPU for every schedule.
 *
 * The backend's part comes from hy_backend_memory (backend.h): its
 * activation type and the scratch its kernels take. Nothing here
 * allocates device memory or prints.
 */
#ifndef HY_MEMPLAN_H
#define HY_MEMPLAN_H

#include <stddef.h>

#include "backend.h"
#include "error.h"
#include "model.h"
#include "schedule.h"
#include "transformer.h"

typedef enum {
    HY_MEM_WEIGHTS,       /* fp32 master weights and their compute copy */
    HY_MEM_GRADS,         /* fp32 gradients */
    HY_MEM_OPTIMIZER,     /* AdamW's two fp32 moments */
    HY_MEM_ACTIVATIONS,   /* the stash: activations kept from F for B (and W) */
    HY_MEM_BUFFERS,       /* mailboxes, working buffers, logits, tokens, scratch */
    HY_MEM_TERMS
} hy_mem_term;

/* "weights", "grads", "optimizer", "activations", "buffers". */
const char *hy_mem_term_name(hy_mem_term t);

typedef struct {
    double bytes[HY_MEM_TERMS];
    double total;
} hy_mem_rank;

typedef struct {
    int ranks, stages;
    hy_mem_rank *rank;    /* [ranks] */
    int *in_flight;       /* [stages]: the stash slots each stage holds */
    int peak_rank;        /* the rank that needs the most */
    hy_recompute recompute;   /* the mode it was planned for */
} hy_memplan;

/* What a plan is made from. */
typedef struct {
    const hy_model *model;          /* shape, partition (padded vocabulary) */
    const hy_schedule *sched;       /* its stages and order */
    int micro_batch_size;           /* B */
    int replicas;                   /* data-parallel replicas (1: none): the gradient
                                       sums' profile stamps */
    const hy_backend_memory *mem;   /* the backend's types and scratch */
    hy_recompute recompute;         /* what the stash keeps (transformer.h) */
} hy_memplan_in;

/* Plans in. On failure *mp is left empty (safe to free). */
int hy_memplan_build(hy_memplan *mp, const hy_memplan_in *in, hy_error *err);
void hy_memplan_free(hy_memplan *mp);

/* The largest term of rank r. */
hy_mem_term hy_memplan_largest(const hy_memplan *mp, int r);

/* The plan as one JSON object: {"available": bytes or null, "fits": true,
 * false or null, "recompute": its mode, "fits_with_recompute": the least
 * mode that fits (`fits_with`) or null, "peak_rank": r, "ranks": [{"rank":
 * r, "weights": ..., "grads", "optimizer", "activations", "buffers",
 * "total"}]} (bytes, available < 0 or infinite: not known; fits_with
 * HY_RECOMPUTE_COUNT: none, or not known). malloc'd; NULL when out of
 * memory. */
char *hy_memplan_json(const hy_memplan *mp, double available, hy_recompute fits_with);

/* The plan against `available` bytes per rank (what the backend has
 * free, or --memory-gb): HY_OK when every rank fits, else HY_ERR_INPUT
 * naming the rank that overshoots most, its bytes against the available,
 * its largest term and what would make it fit. `what` says where the
 * available figure comes from ("the GPU's free memory over the ranks on
 * it", "--memory-gb"). */
int hy_memplan_check(const hy_memplan *mp, double available, const char *what, hy_error *err);

/* The plan against memory pools the ranks share (backend.h,
 * hy_backend_free_memory): rank r allocates from pool group[r], which has
 * available[g] bytes free and is called names[g] ("the host", "GPU 0").
 * HY_OK when every pool holds its ranks' totals, else HY_ERR_INPUT naming
 * the pool that overshoots most, its ranks' bytes against its free ones,
 * the largest term of its hungriest rank and what would make it fit. */
int hy_memplan_check_pools(const hy_memplan *mp, const int *group, const double *available,
                           int n_groups, const char *const *names, hy_error *err);

/* The least recomputation from `from` on (train.recompute, in the order
 * none, selective, full) under which the plan of `in`, with its recompute
 * replaced, fits: with group NULL each rank against available[0] on its
 * own (hy_memplan_check), else the pools (hy_memplan_check_pools).
 * HY_RECOMPUTE_COUNT when none does. What the refusals and `hanayo plan`
 * offer as a way to fit. */
hy_recompute hy_memplan_recompute_to_fit(const hy_memplan_in *in, hy_recompute from,
                                         const int *group, const double *available, int n_groups,
                                         const char *const *names);

#endif
