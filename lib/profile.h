/*
 * profile.h — what `hanayo profile` measures: every action of every rank,
 * timed inside real training steps, turned into a trace, measured costs,
 * and the measured bubble beside the simulator's prediction from those
 * costs.
 *
 * hy_profile_run builds the runtime of a config, turns on its clock stamps
 * (runtime.h, hy_runtime_profile), runs two warm-up steps (the eager one
 * and the recorded one) and then `steps` measured steps, reading every
 * rank's stamps after each. From the stamps of an action (start, input
 * received, compute done, output sent) and those of the action that
 * produced its input on another rank, it derives:
 *
 *   arrival  when the input was there: the producer's "sent", or the
 *            consumer's "received" if that is earlier (the flag is set
 *            just before the producer stamps "sent"); for an input made on
 *            the same rank, or none (F of stage 0), the action's start;
 *   ready    max(start, arrival): the action could run from here on;
 *   wait     ready - start: blocked on another rank for the input;
 *   compute  computed - ready: the action's own work;
 *   send     handing the output over, sent - computed, in two parts:
 *     copy     the least time any send of this (F or B, stage) took over
 *              all micro-batches and steps: the copy itself, unhindered;
 *     blocked  the rest: the consumer had no free slot yet (its mailbox
 *              holds as many messages as the schedule keeps in flight,
 *              DESIGN §3 "Cross-rank movement", so a producer running
 *              ahead of a slow consumer waits there), or the thread was
 *              descheduled after waking the consumer (a CPU with fewer
 *              free cores than ranks);
 *              counted as waiting, not work;
 *   busy     compute + copy: the time the action holds its rank doing its
 *            own work, which is what the simulator calls its cost (a rank
 *            is free for its next action once its output is handed over);
 *   transfer arrival - the producer's "computed", for a cross-rank input.
 *
 * "ready" rather than "received": a rank that is held up before its
 * receive for a reason of its own (a slow device, the slow-stage test
 * hook) is busy, not waiting, until its input arrives, and the simulator
 * needs exactly that split to replay the step. Per stage, F and B cost is
 * the mean busy time over micro-batches and measured steps. The
 * simulator's transfer cost c, which delays a consumer beyond its
 * producer's end, is the mean of max(0, arrival - the producer's "sent")
 * over every cross-rank transfer: 0 where the producer copies the data
 * itself before its action ends, as on the CPU. The simulator (sim.h) then
 * runs the schedule with those costs, and its bubble is compared with the
 * measured one, defined the same way:
 *
 *   makespan = the last busy end (computed + copy) - the first action's start
 *   bubble   = 1 - (sum over ranks of busy) / (P x makespan)
 *
 * Times are in milliseconds from the step's origin (the earliest
 * iteration start over the ranks: one clock for all of them).
 *
 * The measured per-stage costs are fitted to the per-layer cost model of
 * costs.h (hy_cost_model), so they can price another split or schedule.
 *
 * Nothing here prints or exits except the writers, which write where
 * they are told; files are written atomically (atomicfile.h).
 */
#ifndef HY_PROFILE_H
#define HY_PROFILE_H

#include <stdint.h>
#include <stdio.h>

#include "run.h"
#include "costs.h"
#include "error.h"
#include "schedule.h"

/* Warm-up steps before measuring: the first runs eagerly, the second is
 * recorded; only replays are measured, as a real run spends its time. */
#define HY_PROFILE_WARMUP 2

struct hy_dp;

typedef struct {
    int steps;            /* measured steps, >= 1 (default 5) */
    /* Test hook (runtime.h, hy_runtime_slow_stage): every action of this
     * stage first holds its rank for slow_seconds. -1: none. */
    int slow_stage;
    double slow_seconds;
    /* The data-parallel replicas this process is one of (dp.h), each
     * profiling its own pipeline with the gradient sums over them in its
     * steps; NULL: one process. */
    struct hy_dp *dp;
} hy_profile_opts;

void hy_profile_opts_init(hy_profile_opts *o);

/* One action's times in one step, ms from the origin: its four stamps,
 * and ready and copied (= computed + copy) as defined above. */
typedef struct {
    double start, received, ready, computed, copied, sent;
} hy_action_time;

/* Per stage, means over micro-batches and measured steps (ms). */
typedef struct {
    int rank, layers;
    double fwd, bwd;             /* cost (busy: compute + copy) of F(m, s), B(m, s) */
    double fwd_compute, bwd_compute;
    double wgrad;                /* split backward: the cost of W(m, s) (compute alone: it
                                    sends nothing); 0 unsplit */
    double fwd_copy, bwd_copy;
    double fwd_blocked, bwd_blocked;   /* mean blocked send per action */
    /* Transfer of its output to the next stage's rank (forward) or the
     * previous one's (backward); -1 where that neighbour is local or
     * absent. */
    double fwd_transfer, bwd_transfer;
    double layer_fwd, layer_bwd; /* per layer, after the model's extras; -1 with no layers */
} hy_stage_cost;

/* Per rank, ms per step (means over measured steps). compute + copy +
 * wait + blocked + sums + tail + idle = the step; busy is compute + copy. */
typedef struct {
    double compute;   /* its actions' own work */
    double copy;      /* handing outputs over */
    double wait;      /* blocked on another rank for an input */
    double blocked;   /* blocked handing an output over */
    double sums;      /* with data-parallel replicas: after its last action, waiting
                         for its gradient sums over them (what the backwards did not
                         hide) */
    double tail;      /* after that: embedding exchange, norm and clip, optimizer
                         (and waiting for the other ranks in them) */
    double idle;      /* the rest: before its first action (zeroing gradients),
                         between actions, after its tail */
} hy_rank_time;

typedef struct {
    hy_schedule sched;          /* the schedule the runtime ran (a copy) */
    int *n_layers;              /* [stages]: the split */
    int steps;                  /* measured steps */
    char backend[128];          /* which backend, and why */
    double tokens;              /* per step */
    double head_units;          /* the head's estimated cost in layers (model.h) */

    hy_action_time **last;      /* [ranks][n_actions]: the last measured step */
    double *iter_start;         /* [ranks]: the last step's iteration starts */
    double *tail_at;            /* [ranks * 3]: the last step's tail stamps */
    double *copy;               /* [2 * stages]: the copy time of (op, stage)'s output */
    int replicas, replica;      /* data parallelism: how many, and which this is */
    int *n_sums;                /* [ranks]: the gradient sums over the replicas each rank
                                   starts per step (runtime.h, hy_runtime_sums; 0: one) */
    int *sum_stage;             /* [ranks * (stages + 1)]: the stage of each (stages: the
                                   tied embedding's replica) */
    double *sum_at;             /* [ranks * 2 (stages + 1)]: the last step's, each sum's
                                   start and the end of the rank's wait for it */

    hy_stage_cost *stage;       /* [stages] */
    hy_rank_time *rank;         /* [ranks] */
    double comm;                /* the simulator's c, as above */
    int transfers;              /* cross-rank transfers per step */

    double step_ms;             /* mean step: origin to the last optimizer end */
    double wall_ms;             /* mean step as hy_runtime_step timed it */
    double makespan;            /* mean pipeline makespan, as defined above */
    double bubble;              /* mean measured bubble */
    double pred_makespan;       /* the simulator's, from the measured costs */
    double pred_bubble;
    double slots_makespan;      /* the same with the runtime's mailbox slots */
    double slots_bubble;        /*   (mailbox.h, hy_mailbox_sim_limits) */
    double ideal_bubble;        /* hy_ideal_bubble: uniform costs, no transfer time */
    hy_cost_model model;
    /* Memory per rank, bytes: what the memory plan (memplan.h) said the
     * runtime would allocate, and what the backend counted it allocated
     * after the measured steps (hy_backend_ops.allocated). */
    double *mem_planned, *mem_allocated;   /* [ranks] */
} hy_profile;

/* Runs the profile of run `run` (p keeps copies of all it needs, the
 * schedule among them). On failure p is left empty (safe to free). */
int hy_profile_run(hy_profile *p, const hy_run *run, const hy_profile_opts *o, hy_error *err);

/* The same results from stamps given instead of measured, for one
 * process without replicas: raw[k][r] holds rank r's stamps of measured
 * step k laid out as runtime.h's hy_runtime_profile records them
 * (hy_stamp_count(n, 0) of them, n its action count; none 0). So a test can feed a timeline
 * whose every figure it knows, where a real run's times depend on the
 * machine. wall_ms and tokens stay 0. */
int hy_profile_from_stamps(hy_profile *p, const hy_run *run, int steps,
                           uint64_t *const *const *raw, hy_error *err);
void hy_profile_free(hy_profile *p);

/* ---- Outputs --------------------------------------------------------------
 * trace.json   Chrome trace (Perfetto, chrome://tracing) of the last
 *              measured step, in µs: one track per rank, an "X" event per
 *              action ("F m3 s5": start to sent, args mb, stage, wait_us,
 *              compute_us, send_us = the copy, blocked_us), "wait" and
 *              "blocked send" events inside them, the tail's phases, and
 *              a flow arrow from each cross-rank send to its receiver;
 *              with replicas, a track per rank of its gradient sums ("sum
 *              s3": started to waited for) and the rank's wait for them.
 *              Under mpirun each replica writes its own directory,
 *              replica-R inside the one asked for (tools/cmd_profile.c).
 * summary.json every measured figure, the per-stage costs and the cost
 *              model; `hanayo plan --costs` reads it back (measured.h).
 * timeline.svg the last measured step drawn as `hanayo plan --svg` draws
 *              a simulated one (each action from ready to copied: busy).
 * bars.svg     per rank, one bar: compute, copy, wait, blocked, tail, idle.
 * Both SVGs are drawn by svg.h. */
char *hy_profile_trace_json(const hy_profile *p);
char *hy_profile_summary_json(const hy_profile *p);
int hy_profile_write_bars_svg(FILE *f, const hy_profile *p);

/* Writes the four files into dir, creating it (and missing parents).
 * HY_ERR_INPUT when the path is at fault. */
int hy_profile_save(const hy_profile *p, const char *dir, hy_error *err);

/* Checks, before anything runs, that dir could be created or written:
 * every existing component a directory, the deepest existing one
 * writable. */
int hy_profile_check_dir(const char *dir, hy_error *err);

#endif
