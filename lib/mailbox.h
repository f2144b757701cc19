/*
 * mailbox.h — cross-rank edges, their receive slots, and the full/free
 * handshake that moves activations and gradients between ranks.
 *
 * The protocol, and why it can neither take a stale signal nor deadlock,
 * is DESIGN §3 "Cross-rank movement"; this module is its code. Every
 * stage boundary is two edges, activations forward (F(m,s) → F(m,s+1)) and
 * gradients backward (B(m,s+1) → B(m,s)), each a mailbox of K slots owned
 * by its consumer. hy_mailbox_plan finds the edges and gives each
 * micro-batch's message its slot, from the action lists alone;
 * hy_mailbox_alloc puts the slots and flags where the backend's ranks see
 * them; send, receive and release enqueue the handshake's steps on a
 * rank's stream, so they are recorded and replayed like any other work.
 * An edge whose two stages share a rank is `local`: no flags. A channel
 * (hy_channel) is a one-slot edge for the exchanges outside the schedule.
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
