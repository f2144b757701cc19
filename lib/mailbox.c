/*
 * mailbox.c — see mailbox.h.
 */
#include "mailbox.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void edges_free(hy_mailbox *mb) {
    for (int i = 0; i < mb->n_edges; i++) {
        free(mb->edges[i].slot_of);
        free(mb->edges[i].slot);
    }
    free(mb->edges);
    free(mb->into_fwd);
    free(mb->into_bwd);
}

void hy_mailbox_free(hy_mailbox *mb) {
    if (!mb) return;
    if (mb->be) {
        for (int i = 0; i < mb->n_edges; i++) {
            hy_edge *e = &mb->edges[i];
            for (int k = 0; e->slot && k < e->slots; k++) mb->be->ops->free_mem(mb->be, e->slot[k]);
            mb->be->ops->free_mem(mb->be, e->full);   /* full and free share one block */
        }
    }
    edges_free(mb);
    memset(mb, 0, sizeof *mb);
}

/* One message's life on an edge, in the witness replay. */
typedef struct {
    double at;
    int release;    /* 1: the slot is freed; 0: a message claims a slot */
    int m;
} slot_event;

static int event_cmp(const void *a, const void *b) {
    const slot_event *x = a, *y = b;
    if (x->at != y->at) return x->at < y->at ? -1 : 1;
    if (x->release != y->release) return y->release - x->release;   /* releases first */
    return x->m - y->m;
}

/* Gives each message of edge e the lowest slot free at its send time in
 * the witness replay; sets e->slots to the most slots in use at once. */
static int assign_slots(hy_edge *e, int M, const double *send_at, const double *release_at) {
    slot_event *ev = malloc(sizeof *ev * 2 * (size_t)M);
    int *holder = malloc(sizeof *holder * (size_t)M);
    if (!ev || !holder) { free(ev); free(holder); return -1; }
    for (int m = 0; m < M; m++) {
        ev[2 * m] = (slot_event){ send_at[m], 0, m };
        ev[2 * m + 1] = (slot_event){ release_at[m], 1, m };
    }
    qsort(ev, 2 * (size_t)M, sizeof *ev, event_cmp);
    int used = 0;
    for (int k = 0; k < M; k++) holder[k] = -1;
    for (int i = 0; i < 2 * M; i++) {
        int m = ev[i].m;
        if (ev[i].release) {
            assert(holder[e->slot_of[m]] == m);   /* a message frees the slot it claimed */
            holder[e->slot_of[m]] = -1;
            continue;
        }
        int k = 0;
        while (holder[k] >= 0) k++;
        assert(k < M);   /* M messages never need more than M slots */
        holder[k] = m;
        e->slot_of[m] = k;
        if (k + 1 > used) used = k + 1;
    }
    e->slots = used;
    free(ev);
    free(holder);
    return 0;
}

/* The action whose end frees micro-batch m's slot on edge e: the
 * consumer's backward of its stage, for both directions (a forward slot is
 * also the consumer's stash of its stage input), except that with split
 * backward a forward slot is held until the weight pass, which reads the
 * stage's input too. (The backward copies an incoming gradient out at
 * once.) */
static hy_action slot_release(const hy_schedule *s, const hy_edge *e, int m) {
    int op = s->split && e->dir == HY_FWD ? HY_WGRAD : HY_BWD;
    return (hy_action){ op, m, e->to_stage };
}

static int add_edge(hy_mailbox *mb, const hy_schedule *s, int dir, int from, int to) {
    hy_edge *e = &mb->edges[mb->n_edges];
    memset(e, 0, sizeof *e);
    e->dir = dir;
    e->from_stage = from;
    e->to_stage = to;
    e->from_rank = s->placement[from];
    e->to_rank = s->placement[to];
    e->local = e->from_rank == e->to_rank;
    e->slot_of = calloc((size_t)s->micro_batches, sizeof(int));
    if (!e->slot_of) return -1;
    (dir == HY_FWD ? mb->into_fwd : mb->into_bwd)[to] = mb->n_edges++;
    return 0;
}

int hy_mailbox_plan(hy_mailbox *mb, const hy_schedule *s, hy_error *err) {
    memset(mb, 0, sizeof *mb);
    int S = s->stages, M = s->micro_batches;
    mb->stages = S;
    mb->micro_batches = M;
    mb->edges = calloc(2 * (size_t)S, sizeof(hy_edge));
    mb->into_fwd = malloc(sizeof(int) * (size_t)S);
    mb->into_bwd = malloc(sizeof(int) * (size_t)S);
    double *ends = malloc(sizeof(double) * hy_action_keys(s));   /* by hy_action_key */
    double *send_at = malloc(sizeof(double) * (size_t)M), *rel_at = malloc(sizeof(double) * (size_t)M);
    hy_sim_result r;
    memset(&r, 0, sizeof r);
    int rc = HY_OK;
    if (!mb->edges || !mb->into_fwd || !mb->into_bwd || !ends || !send_at || !rel_at) {
        rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory planning mailboxes");
        goto out;
    }
    for (int stage = 0; stage < S; stage++) mb->into_fwd[stage] = mb->into_bwd[stage] = -1;

    /* The witness: the schedule replayed under uniform costs. */
    hy_costs c = hy_costs_uniform_for(s->split, 0);
    rc = hy_simulate(s, &c, NULL, &r, err);
    if (rc) goto out;
    for (int rk = 0; rk < s->ranks; rk++)
        for (int i = 0; i < s->n_actions[rk]; i++)
            ends[hy_action_key(s, &s->actions[rk][i])] = r.end[rk][i];
    for (int stage = 0; stage + 1 < S; stage++) {
        for (int dir = HY_FWD; dir <= HY_BWD; dir++) {
            int from = dir == HY_FWD ? stage : stage + 1, to = dir == HY_FWD ? stage + 1 : stage;
            if (add_edge(mb, s, dir, from, to) != 0) {
                rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory planning mailboxes");
                goto out;
            }
            hy_edge *e = &mb->edges[mb->n_edges - 1];
            for (int m = 0; m < M; m++) {
                /* Sent when the producing action ends; held until its
                 * release has run. */
                hy_action made = { dir, m, from }, rel = slot_release(s, e, m);
                send_at[m] = ends[hy_action_key(s, &made)];
                rel_at[m] = ends[hy_action_key(s, &rel)];
            }
            if (assign_slots(e, M, send_at, rel_at) != 0) {
                rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory planning mailboxes");
                goto out;
            }
        }
    }
out:
    hy_sim_result_free(&r);
    free(ends); free(send_at); free(rel_at);
    if (rc) hy_mailbox_free(mb);
    return rc;
}

int hy_mailbox_sim_limits(const hy_schedule *s, hy_sim_limits *lim, hy_error *err) {
    memset(lim, 0, sizeof *lim);
    hy_mailbox mb;
    int rc = hy_mailbox_plan(&mb, s, err);
    if (rc) return rc;
    rc = hy_sim_limits_init(lim, s, err);
    /* last[k]: the micro-batch whose message slot k holds so far. */
    int *last = rc ? NULL : malloc((size_t)s->micro_batches * sizeof *last);
    if (!rc && !last) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory planning mailboxes");
    for (int k = 0; !rc && k < mb.n_edges; k++) {
        const hy_edge *e = &mb.edges[k];
        if (e->local) continue;   /* the rank's own order protects the slot */
        for (int j = 0; j < e->slots; j++) last[j] = -1;
        const hy_action *list = s->actions[e->from_rank];
        for (int i = 0; i < s->n_actions[e->from_rank]; i++) {
            if (list[i].op != e->dir || list[i].stage != e->from_stage) continue;
            int m = list[i].mb, slot = e->slot_of[m];
            if (last[slot] >= 0) lim->freed_by[e->from_rank][i] = slot_release(s, e, last[slot]);
            last[slot] = m;
        }
    }
    free(last);
    hy_mailbox_free(&mb);
    if (rc) hy_sim_limits_free(lim);
    return rc;
}

int hy_mailbox_alloc(hy_mailbox *mb, hy_backend *be, size_t slot_bytes, hy_error *err) {
    mb->be = be;
    for (int i = 0; i < mb->n_edges; i++) {
        hy_edge *e = &mb->edges[i];
        e->slot_bytes = slot_bytes;
        e->slot = calloc((size_t)e->slots, sizeof(void *));
        if (!e->slot) return hy_fail(err, HY_ERR_RUNTIME, "out of memory allocating mailboxes");
        for (int k = 0; k < e->slots; k++) {
            int rc = be->ops->alloc(be, e->to_rank, slot_bytes, &e->slot[k], err);
            if (rc) return rc;
        }
        if (e->local) continue;
        size_t n = (size_t)e->slots;
        void *flags;
        int rc = be->ops->alloc_shared(be, e->from_rank, e->to_rank, 2 * n * sizeof(uint32_t),
                                       &flags, err);
        if (rc) return rc;
        e->full = flags;
        e->free = e->full + n;
        uint32_t *init = malloc(2 * n * sizeof(uint32_t));
        if (!init) return hy_fail(err, HY_ERR_RUNTIME, "out of memory allocating mailboxes");
        for (size_t k = 0; k < n; k++) { init[k] = 0; init[n + k] = 1; }
        rc = be->ops->upload(be, e->to_rank, flags, init, 2 * n * sizeof(uint32_t), err);
        free(init);
        if (rc) return rc;
    }
    return HY_OK;
}

void *hy_mailbox_slot(const hy_edge *e, int m) {
    assert(e->slot_of[m] >= 0 && e->slot_of[m] < e->slots);
    return e->slot[e->slot_of[m]];
}

static void edge_site(hy_wait_site *site, const hy_edge *e, int m, int rank, const char *action,
                         const char *what) {
    site->rank = rank;
    snprintf(site->what, sizeof site->what, "%s: %s %s rank %d (edge s%d->s%d, slot %d)", action,
             what, e->dir == HY_FWD ? "activations" : "gradients",
             rank == e->to_rank ? e->from_rank : e->to_rank, e->from_stage, e->to_stage,
             e->slot_of[m]);
}

/* The handshake itself, shared by edges and channels. */
static int handshake_send(hy_stream *st, uint32_t *full, uint32_t *free_, void *dst,
                             const void *src, size_t bytes, const hy_wait_site *site,
                             hy_error *err) {
    const hy_backend_ops *o = st->be->ops;
    int rc = o->wait_flag(st, free_, 1, 0, site, err);
    if (!rc) rc = o->copy(st, dst, src, bytes, err);
    if (!rc) rc = o->write_flag(st, full, 1, err);
    return rc;
}

static int handshake_receive(hy_stream *st, uint32_t *full, const hy_wait_site *site,
                                hy_error *err) {
    const hy_backend_ops *o = st->be->ops;
    return o->wait_flag(st, full, 1, 0, site, err);
}

int hy_mailbox_send(hy_stream *st, const hy_edge *e, int m, const void *src, const char *action,
                    hy_error *err) {
    int k = e->slot_of[m];
    assert(k >= 0 && k < e->slots);
    if (e->local)   /* the rank's own order protects the slot */
        return src == e->slot[k] ? HY_OK : st->be->ops->copy(st, e->slot[k], src, e->slot_bytes, err);
    hy_wait_site site;
    edge_site(&site, e, m, st->rank, action, "free slot for");
    return handshake_send(st, &e->full[k], &e->free[k], e->slot[k], src, e->slot_bytes, &site,
                             err);
}

int hy_mailbox_receive(hy_stream *st, const hy_edge *e, int m, const char *action, hy_error *err) {
    if (e->local) return HY_OK;
    hy_wait_site site;
    edge_site(&site, e, m, st->rank, action, "waiting for");
    return handshake_receive(st, &e->full[e->slot_of[m]], &site, err);
}

int hy_mailbox_release(hy_stream *st, const hy_edge *e, int m, hy_error *err) {
    if (e->local) return HY_OK;
    return st->be->ops->write_flag(st, &e->free[e->slot_of[m]], 1, err);
}

/* ------------------------------------------------------------------------ */
/* Channels */

int hy_channel_open(hy_channel *ch, hy_backend *be, int a, int b, size_t bytes, hy_error *err) {
    memset(ch, 0, sizeof *ch);
    ch->from_rank = a;
    ch->to_rank = b;
    ch->bytes = bytes;
    int rc = be->ops->alloc(be, b, bytes, &ch->slot, err);
    void *flags = NULL;
    if (!rc) rc = be->ops->alloc_shared(be, a, b, 2 * sizeof(uint32_t), &flags, err);
    if (rc) { hy_channel_close(ch, be); return rc; }
    ch->full = flags;
    ch->free = ch->full + 1;
    const uint32_t init[2] = { 0, 1 };
    rc = be->ops->upload(be, b, flags, init, sizeof init, err);
    if (rc) hy_channel_close(ch, be);
    return rc;
}

void hy_channel_close(hy_channel *ch, hy_backend *be) {
    be->ops->free_mem(be, ch->slot);
    be->ops->free_mem(be, ch->full);
    memset(ch, 0, sizeof *ch);
}

static void channel_site(hy_wait_site *site, const hy_channel *ch, int rank, const char *what) {
    site->rank = rank;
    snprintf(site->what, sizeof site->what, "%s (channel rank %d -> rank %d)", what, ch->from_rank,
             ch->to_rank);
}

int hy_channel_send(hy_stream *st, const hy_channel *ch, const void *src, const char *what,
                    hy_error *err) {
    hy_wait_site site;
    channel_site(&site, ch, st->rank, what);
    return handshake_send(st, ch->full, ch->free, ch->slot, src, ch->bytes, &site, err);
}

int hy_channel_receive(hy_stream *st, const hy_channel *ch, const char *what, hy_error *err) {
    hy_wait_site site;
    channel_site(&site, ch, st->rank, what);
    return handshake_receive(st, ch->full, &site, err);
}

int hy_channel_release(hy_stream *st, const hy_channel *ch, hy_error *err) {
    return st->be->ops->write_flag(st, ch->free, 1, err);
}
