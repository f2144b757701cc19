/*
 * scale.h — a pipeline at scale, on paper: where N data-parallel replicas
 * of one server's pipeline land once their gradient sums cost time
 * (DESIGN §9 "Data parallelism across processes"), before renting them.
 *
 * The model follows the runtime: each pipeline rank sums its stages'
 * gradients over the N replicas of that rank, one stage at a time, each
 * starting once the stage's last backward (split: W) has ended in the
 * simulated plan and the rank's previous sum is done, while the rank goes
 * on with its other stages' backwards. A sum of B bytes over N replicas is
 * a ring all-reduce on the rank's own link (one network link per GPU, as
 * on DGX-class servers): 2 (N-1)/N B / bandwidth + 2 (N-1) latency. A
 * rank's step ends at the later of its last action and its last sum; the
 * step at the latest rank. The optimizer and the loss's small sum are not
 * priced.
 */
#ifndef HY_SCALE_H
#define HY_SCALE_H

#include <stdio.h>

#include "error.h"
#include "sim.h"
#include "schedule.h"

/* At most this many replica counts in one table. */
#define HY_SCALE_MAX_ROWS 16

typedef struct {
    double gbps;           /* each rank's link, Gb/s (> 0) */
    double latency_us;     /* per ring step (>= 0) */
    double ms_per_unit;    /* the plan's time unit in ms */
    double tokens_per_replica;   /* tokens one replica trains per step */
} hy_scale_link;

typedef struct {
    int replicas;
    double step_ms;        /* one step, sums included */
    double exposed_ms;     /* what the sums add to the pipeline's own step */
    double tokens_per_s;   /* all replicas together */
    double efficiency;     /* tokens/s per replica over one replica's */
} hy_scale_row;

/* The time of one ring all-reduce of `bytes` over n replicas, in ms. */
double hy_scale_allreduce_ms(const hy_scale_link *l, int n, double bytes);

/* One row per replica count (replicas[0..n), each >= 1) for schedule s as
 * simulated in sim, whose stage k holds grad_bytes[k] bytes of gradients.
 * HY_ERR_INPUT for a bad count or link. */
int hy_scale_rows(const hy_schedule *s, const hy_sim_result *sim, const double *grad_bytes,
                  const hy_scale_link *l, const int *replicas, int n, hy_scale_row *rows,
                  hy_error *err);

/* Parses "1,4,16,64" into replicas (at most HY_SCALE_MAX_ROWS, each in
 * 1..1000000); errors name the flag and the piece. */
int hy_scale_parse_counts(const char *flag, const char *text, int *replicas, int *n,
                          hy_error *err);

/* The table: replicas, global tokens/s, step ms, exposed ms, efficiency. */
int hy_scale_write_table(FILE *f, const hy_scale_row *rows, int n);

/* The rows as a JSON array. NULL only when out of memory. */
char *hy_scale_json(const hy_scale_row *rows, int n);

#endif
