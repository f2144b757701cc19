/*
 * mailbox.h — cross-rank edges, their receive slots, and the full/free
 * handshake that moves activations and gradients between ranks
 * (DESIGN §3 "Cross-rank movement").
 *
 * Every stage boundary is two edges: activations forward (F(m,s) →
 * F(m,s+1)) and gradients backward (B(m,s+1) → B(m,s)). An edge is a
 * mailbox owned by its consumer: K slots in the consumer's memory. When the
 * two stages live on different ranks each slot also has a `full` and a
 * `free` flag both ranks can see; when they share a rank (hanayo's turns,
 * or P = 1) the rank's own order already serializes producer and consumer
 * and the handshake is only the copy (none at all when the producer wrote
 * straight into the slot).
 *
 *   producer (send):    wait free == 1, write free = 0, copy, write full = 1
 *   consumer (receive): wait full == 1, write full = 0
 *   consumer (release): write free = 1          (when the data is no longer needed)
 *
 * A forward slot doubles as the consumer's stash of its stage input, so it
 * is released after B(m, s+1) (W(m, s+1) with split backward), not after
 * F(m, s+1): no extra copy. Which slot each micro-batch uses is decided
 * once, from the action lists, by
 * replaying the schedule and giving each message the lowest slot whose
 * last occupant has been released (hy_mailbox_plan). That replay is a
 * witness that the slot constraints add no cycle to the schedule's
 * dependencies, so the blocking handshake cannot deadlock; and K is the
 * most messages the edge ever holds at once. All flag values are
 * constants, so the same recorded handshake is right on every replay.
 */
#ifndef HY_MAILBOX_H
#define HY_MAILBOX_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "error.h"
#include "schedule.h"
#include "sim.h"

typedef struct {
    int local;          /* both stages on one rank: no flags */
    int dir;            /* HY_FWD: activations from_stage -> from_stage+1;
                           HY_BWD: gradients from_stage -> from_stage-1 */
    int from_stage, to_stage;
    int from_rank, to_rank;
    int slots;          /* K */
    int *slot_of;       /* [M]: the slot micro-batch m's message uses */
    size_t slot_bytes;
    void **slot;        /* [K] buffers in to_rank's memory (after alloc) */
    uint32_t *full;     /* [K] flags, shared by the two ranks (after alloc; */
    uint32_t *free;     /* [K]  NULL for a local edge) */
} hy_edge;

/* A one-slot channel from one rank to another, for the few per-step
 * exchanges outside the schedule (gradient-norm partials, the tied
 * embedding's gradient). Same handshake as an edge. */
typedef struct {
    int from_rank, to_rank;
    size_t bytes;
    void *slot;         /* in to_rank's memory */
    uint32_t *full, *free;
} hy_channel;

typedef struct {
    int stages, micro_batches;
    int n_edges;
    hy_edge *edges;
    int *into_fwd;      /* [stages]: edge carrying stage s's forward input, or -1 */
    int *into_bwd;      /* [stages]: edge carrying stage s's backward input, or -1 */
    hy_backend *be;     /* set by alloc */
} hy_mailbox;

/* Finds the edges of schedule s and assigns slots (pure; no memory of any
 * device yet). */
int hy_mailbox_plan(hy_mailbox *mb, const hy_schedule *s, hy_error *err);

/* The runtime's flow control for the simulator (sim.h): with the slots
 * hy_mailbox_plan gives s, each action whose output goes over a cross-rank
 * edge is held until the consumer frees the slot's previous message (in
 * the producer's list order, the order the flags enforce). Under uniform
 * costs the limits change nothing; under others they make a producer that
 * runs ahead wait as the runtime's does. */
int hy_mailbox_sim_limits(const hy_schedule *s, hy_sim_limits *lim, hy_error *err);

/* Allocates every edge's slots (slot_bytes each) in its consumer's memory
 * and its flags where both ranks see them, and sets every free flag to 1
 * and every full flag to 0. */
int hy_mailbox_alloc(hy_mailbox *mb, hy_backend *be, size_t slot_bytes, hy_error *err);

void hy_mailbox_free(hy_mailbox *mb);

/* The handshake, enqueued on the stream of the producer (send) or the
 * consumer (receive, release). `site` names the action for the watchdog;
 * the edge and slot are added to it. */
int hy_mailbox_send(hy_stream *st, const hy_edge *e, int m, const void *src,
                    const char *action, hy_error *err);
int hy_mailbox_receive(hy_stream *st, const hy_edge *e, int m, const char *action,
                       hy_error *err);
int hy_mailbox_release(hy_stream *st, const hy_edge *e, int m, hy_error *err);

/* The slot buffer micro-batch m's message lands in. */
void *hy_mailbox_slot(const hy_edge *e, int m);

/* A channel of `bytes` from rank a to rank b on backend be. */
int hy_channel_open(hy_channel *ch, hy_backend *be, int a, int b, size_t bytes, hy_error *err);
void hy_channel_close(hy_channel *ch, hy_backend *be);
int hy_channel_send(hy_stream *st, const hy_channel *ch, const void *src, const char *what,
                    hy_error *err);
int hy_channel_receive(hy_stream *st, const hy_channel *ch, const char *what, hy_error *err);
int hy_channel_release(hy_stream *st, const hy_channel *ch, hy_error *err);

#endif
