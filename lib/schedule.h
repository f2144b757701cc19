/*
 * schedule.h — the pipeline schedules as pure functions.
 *
 * A schedule is (kind, P ranks, W waves or v chunks, M micro-batches) →
 * for every rank, the ordered list of compute actions it runs in one
 * iteration: F(m, s), the forward of micro-batch m through stage s, and
 * B(m, s), its backward. With split backward, B(m, s) computes only the
 * gradient of the stage's input (what the previous stage waits for) and
 * W(m, s) the gradients of its weights, which nothing but the optimizer
 * waits for, so W fills the pipeline's bubbles. Stages are runs of
 * consecutive layers; the
 * placement says which rank holds each stage. Sends and receives are not
 * listed: a transfer exists exactly where two dependent actions sit on
 * different ranks, so they follow from the placement.
 *
 * The runtime executes these lists; the simulator (sim.h), `hanayo plan`
 * and the profiler read the same lists. See DESIGN §1 "The schedules" and
 * DESIGN §1.2 "The Hanayo wave order" for the orders and why they are what
 * they are.
 */
#ifndef HY_SCHEDULE_H
#define HY_SCHEDULE_H

#include <stddef.h>

#include "costs.h"
#include "error.h"

typedef enum {
    HY_SCHED_GPIPE,
    HY_SCHED_1F1B,
    HY_SCHED_INTERLEAVED,
    HY_SCHED_HANAYO,
    HY_SCHED_COUNT
} hy_sched_kind;

typedef enum { HY_FWD = 0, HY_BWD = 1, HY_WGRAD = 2 } hy_op;

typedef struct {
    int op;     /* HY_FWD, HY_BWD or (split backward) HY_WGRAD */
    int mb;     /* micro-batch, 0..M-1 */
    int stage;  /* stage, 0..S-1 */
} hy_action;

/* What a generator needs. `waves` is read by hanayo only, `chunks` by
 * interleaved only; the others ignore them. */
typedef struct {
    hy_sched_kind kind;
    int ranks;          /* P, 1..HY_MAX_RANKS */
    int micro_batches;  /* M >= 1 */
    int waves;          /* W >= 1 (hanayo) */
    int chunks;         /* v >= 1 (interleaved) */
    int split_backward; /* 1: each backward is B (input gradient) and W (weights) */
    int max_activations;/* the most activations a rank may hold (0: no cap), read by
                           the cost-aware choice (order.h); the canonical builders
                           below ignore it */
} hy_sched_params;

/* The smallest cap on a rank's activations that any order of p meets:
 * one activation of each stage the rank holds (hy_sched_chunks), what
 * one micro-batch needs on its way down and back. */
int hy_sched_min_activations(const hy_sched_params *p);

#define HY_MAX_RANKS 64

typedef struct {
    hy_sched_kind kind;
    int ranks;            /* P */
    int micro_batches;    /* M */
    int waves;            /* W for hanayo, 0 otherwise */
    int chunks;           /* stages per rank: 1, v, or 2W */
    int stages;           /* S = chunks * ranks */
    int split;            /* split backward: W actions beside F and B */
    int *placement;       /* [stages]: rank that holds stage s */
    int *n_actions;       /* [ranks]: always (split ? 3 : 2) * chunks * M */
    hy_action **actions;  /* [ranks][n_actions[r]], in execution order */
} hy_schedule;

/* "F", "B", "W": the names the plan's JSON gives the ops. */
const char *hy_op_name(int op);

/* "gpipe", "1f1b", "interleaved", "hanayo". */
const char *hy_sched_name(hy_sched_kind kind);
/* Returns HY_OK and sets *kind, or HY_ERR_INPUT naming the valid kinds. */
int hy_sched_parse(const char *name, hy_sched_kind *kind, hy_error *err);

/* Checks the parameters (ranges, interleaved needs M a multiple of P) and
 * builds the schedule in its canonical order (hy_sched_order_default), the one
 * the uniform costs call for. On failure *s is left empty (safe to free). */
int hy_schedule_build(hy_schedule *s, const hy_sched_params *p, hy_error *err);

/* p's schedule with its placement and room for each rank's actions, but
 * none yet (n_actions all 0): what an order made elsewhere is written
 * into (capped.h). The parameters checked as by hy_schedule_build; on
 * failure *s is left empty. */
int hy_schedule_empty(hy_schedule *s, const hy_sched_params *p, hy_error *err);

/* Stages per rank p's kind uses (2W for hanayo, v for interleaved, else
 * 1), known before anything is built: hy_schedule.chunks. */
int hy_sched_chunks(const hy_sched_params *p);
/* Stages S = chunks x ranks: hy_schedule.stages, known as early. */
int hy_sched_stages(const hy_sched_params *p);

/* Actions every rank runs in one iteration: (split ? 3 : 2) x chunks x M
 * (an F and a B, and with a split backward a W, per micro-batch per stage
 * it holds); hy_schedule.n_actions[r] of every r. The one statement of
 * that count: times P it is the schedule's. */
long hy_sched_rank_actions(int split_backward, int chunks, int micro_batches);

/* How an order is made: the knobs a cost-aware choice among orders tries
 * (order.h), each giving a valid order.
 *   hanayo's merge (see schedule.c): rank r holds at most 2WP + cap_extra
 *   activations (+ r with cap_rises), a forward may overtake `window`
 *   entries of its stream, a tie between a forward and a backward that
 *   can start at once goes to the forward (to the backward with
 *   backward_first), and the merge replays the pipeline under the costs
 *   it is given;
 *   split backward: rank r keeps up to defer_slope * r + defer_base weight
 *   passes back while it still has forwards to run, and runs one after
 *   each input-gradient pass afterwards (the rest at its end), so they
 *   fill the drain; with zbv (hanayo, W = 1) the ZB-V order instead; with
 *   w_in_merge (hanayo) the merge places them as it replays. */
typedef struct {
    int cap_extra, cap_rises, window;
    int backward_first;   /* the merge breaks a tie between a ready F and B for B */
    int defer_slope, defer_base;
    int zbv;
    int v_order;          /* hanayo split, W = 1: a published order of the V placement
                             instead, HY_V_DUALPIPE, HY_V_HALF or HY_V_MIN */
    int w_in_merge;       /* hanayo split, k > 0: the merge places the W's itself, one
                             filling any wait for the next F or B longer than
                             (k - 1)/2 of a W (instead of the deferral), and a rank
                             at its cap may still run forwards of the last
                             cap_tail stages (at least 1) */
    int cap_tail;
} hy_sched_order;

/* The published orders of the V placement (hanayo W = 1, split) beside
 * ZB-V (schedule.c has each one's description): DeepSeek's DualPipeV
 * (M >= 2P), and V-Half and V-Min of Qi et al., "Pipeline Parallelism
 * with Controllable Memory" (2024), about a half and a third of ZB-V's
 * memory. */
enum { HY_V_NONE, HY_V_DUALPIPE, HY_V_HALF, HY_V_MIN, HY_V_COUNT };

/* The canonical knobs for p. */
void hy_sched_order_default(const hy_sched_params *p, hy_sched_order *o);

/* Builds p's schedule in the order o, hanayo's merge replayed under costs
 * c (NULL: the uniform ones, hy_costs_uniform or, split, _uniform_split).
 * As hy_schedule_build otherwise. */
int hy_schedule_build_order(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                            const hy_sched_order *o, hy_error *err);

/* What hanayo's merge derives from a schedule's shape alone (its streams)
 * and the memory it replays in, kept from one build to the next: a search
 * (order.h) builds hundreds of orders of one shape. Start it as
 * { NULL }; it is remade when the shape changes; free it with
 * hy_sched_scratch_free. */
typedef struct {
    void *merge;   /* schedule.c's merge state */
} hy_sched_scratch;
void hy_sched_scratch_free(hy_sched_scratch *w);

/* hy_schedule_build_order keeping its scratch in w between calls. */
int hy_schedule_build_scratch(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                              const hy_sched_order *o, hy_sched_scratch *w, hy_error *err);
void hy_schedule_free(hy_schedule *s);
/* A deep copy of src into dst, for a result that outlives the schedule it
 * describes (a profile). On failure dst is left empty. */
int hy_schedule_copy(hy_schedule *dst, const hy_schedule *src, hy_error *err);

/* Index of stage s among the stages its rank holds (0..chunks-1), in the
 * order data first reaches them. */
int hy_schedule_local_chunk(const hy_schedule *s, int stage);

/* Cross-rank transfers in one iteration: activations forward plus
 * gradients backward, one per dependent pair of actions on two ranks. */
int hy_schedule_transfers(const hy_schedule *s);

/* For each stage k on rank r, the index in r's action list of the action
 * that completes k's gradients for the step (its last B; with a split
 * backward its last W): where data parallelism's sum of them can start
 * (the runtime, and scale.h pricing it). -1 for stages on other ranks.
 * last[] holds s->stages entries. */
void hy_schedule_grads_done(const hy_schedule *s, int rank, int *last);

/* The dependencies, the one statement of them that the validator, the
 * simulator (sim.h) and the runtime's mailboxes share: F(m, s) needs
 * F(m, s-1); B(m, S-1) needs F(m, S-1); B(m, s) needs F(m, s) and
 * B(m, s+1); W(m, s) needs B(m, s). Writes the actions whose outputs a
 * takes to in and returns how many (0 for F(m, 0)). */
#define HY_MAX_INPUTS 2
/* Inline, as hy_action_key below: the merge, the simulator and the
 * justification call them for every action of every candidate order. */
static inline int hy_action_inputs(const hy_schedule *s, const hy_action *a,
                                   hy_action in[HY_MAX_INPUTS]) {
    int n = 0;
    if (a->op == HY_FWD) {
        if (a->stage > 0) in[n++] = (hy_action){ HY_FWD, a->mb, a->stage - 1 };
        return n;
    }
    if (a->op == HY_WGRAD) {
        in[n++] = (hy_action){ HY_BWD, a->mb, a->stage };
        return n;
    }
    in[n++] = (hy_action){ HY_FWD, a->mb, a->stage };
    if (a->stage + 1 < s->stages) in[n++] = (hy_action){ HY_BWD, a->mb, a->stage + 1 };
    return n;
}

/* What action a costs under c: its stage's F, B or W. */
double hy_action_cost(const hy_costs *c, const hy_action *a);

/* A dense index of every (op, micro-batch, stage) of s, for tables with
 * one entry per action: 0 <= hy_action_key(s, a) < hy_action_keys(s). */
static inline size_t hy_action_key(const hy_schedule *s, const hy_action *a) {
    return ((size_t)a->op * (size_t)s->micro_batches + (size_t)a->mb) * (size_t)s->stages +
           (size_t)a->stage;
}
size_t hy_action_keys(const hy_schedule *s);

/* Checks that every F and B (and W, split) appears exactly once and that
 * the lists run to completion when each rank executes its list in order
 * and blocks until the inputs of its next action exist (so no dependency
 * is violated and nothing deadlocks). On failure, err names the rank and
 * the action. */
int hy_schedule_validate(const hy_schedule *s, hy_error *err);

/* The error of lists that stop short: HY_ERR_INPUT, "the schedule
 * deadlocks <why>: rank r waits at <its next action>; ..." for every rank
 * whose list is not done (next[r]: the index of its next action); with
 * err NULL, the status alone, the message never written. */
int hy_schedule_deadlock(const hy_schedule *s, const int *next, const char *why, hy_error *err);

/* Whether a and b are the same lists, rank for rank and action for
 * action. */
int hy_schedule_equal(const hy_schedule *a, const hy_schedule *b);

/* The most micro-batches each stage holds at once: whose F has run on
 * its rank and whose last reader (B, or W with a split backward) has not.
 * What the runtime gives each stage in stash slots and the memory plan
 * counts. peak holds s->stages entries. */
void hy_schedule_in_flight(const hy_schedule *s, int *peak);

/* "F m3 s5" style label ("B ...", "W ..."), for messages and traces. */
void hy_action_label(const hy_action *a, char *buf, int len);

#endif
