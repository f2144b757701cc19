/*
 * test_mailbox.c — the cross-rank protocol under stress
 * (DESIGN §3 "Cross-rank movement").
 *
 * One thread per rank runs its schedule's action lists for many iterations
 * on the CPU backend, exactly as the runtime will: every cross-rank input
 * is received through its mailbox slot, every output sent through the
 * full/free handshake. Payloads are patterns of (edge, micro-batch,
 * iteration); every receive checks its slot, and every backward checks its
 * forward slot again (the slot is the stage-input stash, so an early reuse
 * would show there). Random delays sit before every send and before every
 * release. Run eagerly and with record/replay, for 2, 4 and 8 ranks and
 * each schedule; then the watchdog and abort paths. Where a GPU is
 * present the same stress runs on the CUDA backend too, 1 to 8 ranks all
 * on device 0, with the flags in host-mapped and in device memory (on a
 * machine without one those cases are not run, and say so). And the
 * slots as the simulator's limits (hy_mailbox_sim_limits): no change under
 * uniform costs, a sender held back under others.
 */
#include "backend.h"
#include "backend_test.h"
#include "mailbox.h"
#include "schedule.h"
#include "sim.h"
#include "test.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WORDS 64   /* payload per message: 256 bytes */

typedef struct {
    const hy_schedule *s;
    const hy_mailbox *mb;
    hy_backend *be;
    int rank, iterations, graph;
    uint32_t max_delay_ns;
    uint32_t *iter, *errors, *checks, *out;   /* in the rank's memory */
    hy_channel (*ch)[HY_MAX_RANKS];            /* ch[a][b]: rank a -> rank b */
    hy_record_gate *gate;
    int status;
    hy_error err;
} rank_ctx;

static uint32_t key_of(int edge, int m) { return (uint32_t)edge * 65536u + (uint32_t)m + 1u; }

/* The test's stand-in for computing an output and sending it. */
static int produce(rank_ctx *c, hy_stream *st, int edge, int m, const char *label) {
    const hy_backend_test_ops *t = hy_backend_test_ops_of(c->be);
    int rc = t->delay(st, key_of(edge, m) ^ 0x51u, c->iter, c->max_delay_ns, &c->err);
    if (!rc) rc = t->fill(st, c->out, WORDS, key_of(edge, m), c->iter, &c->err);
    if (!rc) rc = hy_mailbox_send(st, &c->mb->edges[edge], m, c->out, label, &c->err);
    return rc;
}

static int check_slot(rank_ctx *c, hy_stream *st, int edge, int m) {
    const hy_backend_test_ops *t = hy_backend_test_ops_of(c->be);
    const uint32_t *slot = hy_mailbox_slot(&c->mb->edges[edge], m);
    int rc = t->check(st, slot, WORDS, key_of(edge, m), c->iter, c->errors, &c->err);
    if (!rc) rc = t->add(st, c->checks, &c->err);
    return rc;
}

/* One iteration of rank c->rank's list, enqueued on st. */
static int enqueue_iteration(rank_ctx *c, hy_stream *st) {
    const hy_schedule *s = c->s;
    const hy_mailbox *mb = c->mb;
    int rc = HY_OK;
    for (int i = 0; i < s->n_actions[c->rank] && !rc; i++) {
        const hy_action *a = &s->actions[c->rank][i];
        char label[48];
        hy_action_label(a, label, sizeof label);
        int m = a->mb, st_ = a->stage;
        int fin = mb->into_fwd[st_], bin = mb->into_bwd[st_];
        if (a->op == HY_FWD) {
            if (fin >= 0) {
                rc = hy_mailbox_receive(st, &mb->edges[fin], m, label, &c->err);
                if (!rc) rc = check_slot(c, st, fin, m);
            }
            if (!rc && st_ + 1 < s->stages && mb->into_fwd[st_ + 1] >= 0)
                rc = produce(c, st, mb->into_fwd[st_ + 1], m, label);
        } else {
            if (bin >= 0) {
                rc = hy_mailbox_receive(st, &mb->edges[bin], m, label, &c->err);
                if (!rc) rc = check_slot(c, st, bin, m);
            }
            if (!rc && fin >= 0) rc = check_slot(c, st, fin, m);   /* the stash is intact */
            if (!rc && st_ > 0 && mb->into_bwd[st_ - 1] >= 0)
                rc = produce(c, st, mb->into_bwd[st_ - 1], m, label);
            if (!rc)
                rc = hy_backend_test_ops_of(c->be)->delay(st, key_of(st_, m) ^ 0xA7u, c->iter,
                                                          c->max_delay_ns, &c->err);
            if (!rc && fin >= 0) rc = hy_mailbox_release(st, &mb->edges[fin], m, &c->err);
            if (!rc && bin >= 0) rc = hy_mailbox_release(st, &mb->edges[bin], m, &c->err);
        }
    }
    /* The per-step exchange outside the schedule (gradient-norm partials
     * travel like this): every rank sends to every other over channels. */
    const hy_backend_test_ops *t = hy_backend_test_ops_of(c->be);
    int P = s->ranks;
    for (int b = 0; b < P && !rc; b++) {
        if (b == c->rank) continue;
        uint32_t key = 0x40000000u + (uint32_t)(c->rank * P + b);
        rc = t->fill(st, c->out, WORDS, key, c->iter, &c->err);
        if (!rc) rc = hy_channel_send(st, &c->ch[c->rank][b], c->out, "norm partial", &c->err);
    }
    for (int a = 0; a < P && !rc; a++) {
        if (a == c->rank) continue;
        const hy_channel *ch = &c->ch[a][c->rank];
        uint32_t key = 0x40000000u + (uint32_t)(a * P + c->rank);
        rc = hy_channel_receive(st, ch, "norm partial", &c->err);
        if (!rc) rc = t->check(st, ch->slot, WORDS, key, c->iter, c->errors, &c->err);
        if (!rc) rc = t->add(st, c->checks, &c->err);
        if (!rc) rc = hy_channel_release(st, ch, &c->err);
    }
    if (!rc) rc = t->add(st, c->iter, &c->err);
    return rc;
}

static void *rank_main(void *arg) {
    rank_ctx *c = arg;
    const hy_backend_ops *o = c->be->ops;
    hy_stream *st = NULL;
    hy_graph *g = NULL;
    int rc = o->stream_create(c->be, c->rank, &st, &c->err);
    if (!rc) rc = enqueue_iteration(c, st);            /* the eager warm-up iteration */
    if (c->graph) {
        /* As the runtime does (lib/runtime.c, rt_run_iteration): the
         * warm-up is synced, every rank records before any launches, and
         * each replay is synced before the next (graph_launch starts on an
         * idle stream). Eager iterations are not synced in between: the
         * thread running ahead of its stream is what they exercise. */
        if (!rc) rc = o->sync(st, &c->err);
        if (!rc && !(rc = o->capture_begin(st, &c->err))) {
            rc = enqueue_iteration(c, st);
            int end = o->capture_end(st, &g, rc ? NULL : &c->err);   /* ended even after a failure */
            if (!rc) rc = end;
        }
        if (hy_record_gate_pass(c->gate, rc) && !rc)
            rc = hy_fail(&c->err, HY_ERR_RUNTIME, "rank %d: another rank failed to record", c->rank);
    }
    for (int it = 1; it < c->iterations && !rc; it++) {
        if (!c->graph) {
            rc = enqueue_iteration(c, st);
            continue;
        }
        rc = o->graph_launch(g, st, &c->err);
        if (!rc) rc = o->sync(st, &c->err);
    }
    if (!rc) rc = o->sync(st, &c->err);
    if (rc) o->abort(c->be, c->err.msg);
    o->graph_destroy(g);
    o->stream_destroy(st);
    c->status = rc;
    return NULL;
}

/* Checks each rank makes per iteration: one per received message, plus
 * one per backward whose stage input came from another rank. */
static uint32_t checks_per_iteration(const hy_schedule *s, const hy_mailbox *mb, int rank) {
    uint32_t n = 0;
    for (int i = 0; i < s->n_actions[rank]; i++) {
        const hy_action *a = &s->actions[rank][i];
        int fin = mb->into_fwd[a->stage], bin = mb->into_bwd[a->stage];
        if (a->op == HY_FWD) n += fin >= 0;
        else n += (bin >= 0) + (fin >= 0);
    }
    return n + (uint32_t)(s->ranks - 1);   /* and one per channel into this rank */
}

/* Which backend a stress run uses: the CPU, or CUDA with every rank on
 * device 0 and the flags in host memory (1) or device memory (2). */
enum { ON_CPU, ON_CUDA_HOST_FLAGS, ON_CUDA_DEVICE_FLAGS };

static int open_backend(int on, int P, double watchdog_s, hy_backend **be, hy_error *err) {
    if (on == ON_CPU) return hy_backend_cpu_create(be, P, watchdog_s, err);
    int zeros[HY_MAX_RANKS] = { 0 };
    return hy_backend_cuda_create(be, P, zeros, P, on == ON_CUDA_DEVICE_FLAGS, watchdog_s, err);
}

static void stress(int on, hy_sched_kind kind, int P, int wv, int M, int graph, int iterations,
                   uint32_t max_delay_ns, double watchdog_s) {
    hy_sched_params p = { kind, P, M, wv, wv, 0, 0 };
    hy_schedule s;
    hy_mailbox mb;
    hy_backend *be = NULL;
    hy_error err;
    if (hy_schedule_build(&s, &p, &err) != HY_OK) { CHECKF(0, "%s", err.msg); return; }
    CHECKF(hy_mailbox_plan(&mb, &s, &err) == HY_OK, "%s", err.msg);
    if (open_backend(on, P, watchdog_s, &be, &err) != HY_OK) {
        CHECKF(0, "%s", err.msg);
        hy_mailbox_free(&mb);
        hy_schedule_free(&s);
        return;
    }
    CHECKF(hy_mailbox_alloc(&mb, be, WORDS * sizeof(uint32_t), &err) == HY_OK, "%s", err.msg);

    rank_ctx ctx[HY_MAX_RANKS];
    pthread_t th[HY_MAX_RANKS];
    hy_record_gate gate;
    hy_record_gate_init(&gate, P);
    hy_channel (*ch)[HY_MAX_RANKS] = calloc(HY_MAX_RANKS, sizeof *ch);
    for (int a = 0; a < P; a++)
        for (int b = 0; b < P; b++)
            if (a != b)
                CHECK(hy_channel_open(&ch[a][b], be, a, b, WORDS * sizeof(uint32_t), &err) == HY_OK);
    for (int r = 0; r < P; r++) {
        rank_ctx *c = &ctx[r];
        memset(c, 0, sizeof *c);
        c->s = &s;
        c->mb = &mb;
        c->be = be;
        c->rank = r;
        c->iterations = iterations;
        c->graph = graph;
        c->max_delay_ns = max_delay_ns;
        c->ch = ch;
        c->gate = &gate;
        void *mem;
        CHECK(be->ops->alloc(be, r, (3 + WORDS) * sizeof(uint32_t), &mem, &err) == HY_OK);
        c->iter = mem;
        c->errors = c->iter + 1;
        c->checks = c->iter + 2;
        c->out = c->iter + 3;
    }
    for (int r = 0; r < P; r++) CHECK(pthread_create(&th[r], NULL, rank_main, &ctx[r]) == 0);
    for (int r = 0; r < P; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < P; r++) {
        rank_ctx *c = &ctx[r];
        /* The counters live in the rank's memory: read them back. */
        uint32_t got[3] = { 0, 0, 0 };
        CHECK(be->ops->download(be, r, got, c->iter, sizeof got, &err) == HY_OK);
        CHECKF(c->status == HY_OK, "%s P=%d graph=%d on=%d rank %d: %s", hy_sched_name(kind), P,
               graph, on, r, c->err.msg);
        CHECKF(got[1] == 0, "%s P=%d graph=%d on=%d rank %d: %u words read wrong",
               hy_sched_name(kind), P, graph, on, r, got[1]);
        CHECK(got[0] == (uint32_t)iterations);
        CHECKF(got[2] == checks_per_iteration(&s, &mb, r) * (uint32_t)iterations,
               "rank %d ran %u checks", r, got[2]);
    }
    for (int a = 0; a < P; a++)
        for (int b = 0; b < P; b++)
            if (a != b) hy_channel_close(&ch[a][b], be);
    free(ch);
    hy_record_gate_destroy(&gate);
    hy_mailbox_free(&mb);
    be->ops->destroy(be);
    hy_schedule_free(&s);
}

/* Slot counts come from the witness replay: never more than the messages;
 * under 1F1B the forward edge into stage t holds the P - t micro-batches in
 * flight on rank t, plus the one its producer has already sent ahead. */
static void test_plan(void) {
    hy_sched_params p = { HY_SCHED_1F1B, 4, 8, 1, 1, 0, 0 };
    hy_schedule s;
    hy_mailbox mb;
    hy_error err;
    CHECK(hy_schedule_build(&s, &p, &err) == HY_OK);
    CHECK(hy_mailbox_plan(&mb, &s, &err) == HY_OK);
    CHECK(mb.n_edges == 6);
    for (int i = 0; i < mb.n_edges; i++) {
        const hy_edge *e = &mb.edges[i];
        CHECK(e->slots >= 1 && e->slots <= s.micro_batches);
        CHECK(e->from_rank != e->to_rank && !e->local);
        if (e->dir == HY_FWD) {
            CHECKF(e->slots == 4 - e->to_stage + 1, "edge into s%d has %d slots", e->to_stage, e->slots);
        }
    }
    CHECK(mb.into_fwd[0] == -1 && mb.into_bwd[3] == -1);
    hy_mailbox_free(&mb);
    hy_schedule_free(&s);

    /* Hanayo's turns are local edges: no flags across them. */
    p = (hy_sched_params){ HY_SCHED_HANAYO, 4, 8, 2, 1, 0, 0 };
    CHECK(hy_schedule_build(&s, &p, &err) == HY_OK);
    CHECK(hy_mailbox_plan(&mb, &s, &err) == HY_OK);
    CHECK(mb.n_edges == 2 * 15);
    int cross = 0;
    for (int i = 0; i < mb.n_edges; i++) cross += !mb.edges[i].local;
    CHECK(cross == 2 * 2 * 2 * 3);
    CHECK(mb.edges[mb.into_fwd[4]].local && mb.edges[mb.into_fwd[8]].local &&
          mb.edges[mb.into_fwd[12]].local && mb.edges[mb.into_bwd[3]].local);
    CHECK(!mb.edges[mb.into_fwd[5]].local);
    CHECK(mb.into_fwd[0] == -1 && mb.into_bwd[15] == -1);
    hy_mailbox_free(&mb);
    hy_schedule_free(&s);
}

typedef struct {
    hy_backend *be;
    uint32_t *flag;
    int status;
    hy_error err;
} waiter;

static void *wait_forever(void *arg) {
    waiter *w = arg;
    hy_stream *st;
    hy_wait_site site = { 1, "B m2 s3: test wait" };
    w->status = w->be->ops->stream_create(w->be, 1, &st, &w->err);
    if (w->status) return NULL;
    w->status = w->be->ops->wait_flag(st, w->flag, 1, 1, &site, &w->err);
    w->be->ops->stream_destroy(st);
    return NULL;
}

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A wait nobody satisfies fails after watchdog_s, naming rank and site. */
static void test_watchdog(void) {
    hy_backend *be;
    hy_error err;
    CHECK(hy_backend_cpu_create(&be, 2, 0.2, &err) == HY_OK);
    void *flag;
    CHECK(be->ops->alloc(be, 1, sizeof(uint32_t), &flag, &err) == HY_OK);
    waiter w = { be, flag, 0, { 0 } };
    double t0 = seconds();
    wait_forever(&w);
    double dt = seconds() - t0;
    CHECK(w.status == HY_ERR_RUNTIME);
    /* Not before watchdog_s (the clock guarantees it); how long after
     * depends on the machine's load, so is not asserted: the wait
     * returned, so it fired (a wait that never fires hangs the test until
     * make's TEST_TIMEOUT). */
    CHECKF(dt >= 0.19, "watchdog fired after %.3f s", dt);
    CHECK(strstr(w.err.msg, "watchdog") && strstr(w.err.msg, "rank 1") &&
          strstr(w.err.msg, "B m2 s3: test wait"));
    CHECK(w.err.cause == HY_CAUSE_NONE);   /* a stall of its own, not a stop */
    be->ops->destroy(be);
}

/* abort() releases a rank blocked in a wait, with the reason. */
static void test_abort(void) {
    hy_backend *be;
    hy_error err;
    CHECK(hy_backend_cpu_create(&be, 2, 60.0, &err) == HY_OK);
    void *flag;
    CHECK(be->ops->alloc(be, 1, sizeof(uint32_t), &flag, &err) == HY_OK);
    waiter w = { be, flag, 0, { 0 } };
    pthread_t th;
    double t0 = seconds();
    CHECK(pthread_create(&th, NULL, wait_forever, &w) == 0);
    struct timespec nap = { 0, 50000000L };
    nanosleep(&nap, NULL);
    be->ops->abort(be, "rank 0 failed: injected");
    pthread_join(th, NULL);
    CHECK(w.status == HY_ERR_RUNTIME);
    CHECK(seconds() - t0 < 5.0);
    CHECK(strstr(w.err.msg, "rank 1 stopped") && strstr(w.err.msg, "rank 0 failed: injected"));
    CHECK(w.err.cause == HY_CAUSE_STOPPED);   /* what the runtime tells a stopped rank by */
    be->ops->destroy(be);
}

/* A wait consumes its signal at once, also while its stream is still busy
 * with earlier work (a 300 ms sleep here): a second wait for the same flag
 * finds no signal and the watchdog ends it. A consuming store queued on
 * the stream instead would still be pending behind the sleep, and the
 * second wait would take the old signal for a new one: the race that lost
 * messages on a GPU whose rank threads ran ahead of their streams.
 * then == value leaves the flag as it is. */
static void test_consume(int on) {
    hy_backend *be = NULL;
    hy_stream *st = NULL;
    hy_error err;
    if (open_backend(on, 2, 0.3, &be, &err) != HY_OK) { CHECKF(0, "%s", err.msg); return; }
    const hy_backend_ops *o = be->ops;
    uint32_t *flags = NULL;
    const uint32_t init[2] = { 1, 7 };
    CHECK(o->alloc_shared(be, 0, 1, sizeof init, (void **)&flags, &err) == HY_OK);
    CHECK(o->upload(be, 1, flags, init, sizeof init, &err) == HY_OK);
    CHECK(o->stream_create(be, 0, &st, &err) == HY_OK);
    hy_wait_site site = { 0, "F m0 s1: consume test" };
    CHECK(o->sleep(st, 300000000ull, &err) == HY_OK);
    CHECKF(o->wait_flag(st, &flags[1], 7, 7, &site, &err) == HY_OK, "on=%d: %s", on, err.msg);
    CHECKF(o->wait_flag(st, &flags[0], 1, 0, &site, &err) == HY_OK, "on=%d: %s", on, err.msg);
    int rc = o->wait_flag(st, &flags[0], 1, 0, &site, &err);
    if (!rc) rc = o->sync(st, &err);
    CHECKF(rc != HY_OK && strstr(err.msg, "watchdog") && strstr(err.msg, "consume test"),
           "on=%d: the second wait took a consumed signal: %s", on, rc ? err.msg : "it passed");
    uint32_t got[2] = { 9, 9 };
    CHECK(o->download(be, 1, got, flags, sizeof got, &err) == HY_OK);
    CHECKF(got[0] == 0 && got[1] == 7, "on=%d: flags %u %u, want 0 7", on, got[0], got[1]);
    o->stream_destroy(st);
    o->free_mem(be, flags);
    o->destroy(be);
}

/* ------------------------------------------------------------------------ */

/* s simulated under c with its mailbox slots' limits. */
static int slots_simulate(const hy_schedule *s, const hy_costs *c, hy_sim_result *r, hy_error *err) {
    hy_sim_limits lim;
    int rc = hy_mailbox_sim_limits(s, &lim, err);
    if (rc) return rc;
    rc = hy_simulate(s, c, &lim, r, err);
    hy_sim_limits_free(&lim);
    return rc;
}

/* The simulator held back by the mailbox slots (hy_mailbox_sim_limits):
 * equal to the unlimited one under uniform costs (the slot plan's own replay), never shorter under
 * others, and longer where a sender must wait for its slot. */
static void test_slots(void) {
    hy_error err;
    int checked = 0, longer = 0;
    for (int kind = 0; kind < HY_SCHED_COUNT; kind++)
        for (int P = 2; P <= 4; P++)
            for (int M = P; M <= 3 * P; M += P) {
                hy_sched_params sp = { (hy_sched_kind)kind, P, M, 2, 2, 0, 0 };
                hy_schedule s;
                if (hy_schedule_build(&s, &sp, &err) != HY_OK) { CHECKF(0, "%s", err.msg); continue; }
                double *f = malloc(2 * (size_t)s.stages * sizeof(double)), *b = f + s.stages;
                for (int trial = 0; trial < 4; trial++) {
                    hy_costs c = hy_costs_uniform();
                    if (trial > 0) {   /* uneven stages, and a transfer cost */
                        for (int i = 0; i < s.stages; i++) {
                            f[i] = 0.5 + (double)((i * 7 + trial * 3) % 5);
                            b[i] = 2 * f[i] - 0.25 * ((i + trial) % 3);
                        }
                        c.fwd_stage = f;
                        c.bwd_stage = b;
                        c.comm = 0.1 * trial;
                    }
                    hy_sim_result x, y;
                    int rx = hy_simulate(&s, &c, NULL, &x, &err), ry = slots_simulate(&s, &c, &y, &err);
                    CHECKF(rx == HY_OK && ry == HY_OK, "%s", err.msg);
                    if (rx || ry) continue;
                    if (trial == 0) CHECK_NEAR(y.makespan, x.makespan, 1e-9);
                    CHECK(y.makespan >= x.makespan - 1e-9);
                    CHECK_NEAR(y.busy[0], x.busy[0], 1e-9);   /* waiting for a slot is not work */
                    longer += y.makespan > x.makespan + 1e-9;
                    checked++;
                    hy_sim_result_free(&x);
                    hy_sim_result_free(&y);
                }
                free(f);
                hy_schedule_free(&s);
            }
    CHECK(checked == 4 * HY_SCHED_COUNT * 3 * 3);
    CHECKF(longer > 0, "no case where a sender waited for its slot");
    /* gpipe, P = 2, M = 2: the backward edge has one slot (the uniform
     * replay frees it just as the second gradient is sent), so with a
     * transfer cost c the second gradient waits c for it. */
    hy_sched_params sp = { HY_SCHED_GPIPE, 2, 2, 1, 1, 0, 0 };
    hy_schedule s;
    if (hy_schedule_build(&s, &sp, &err) == HY_OK) {
        hy_costs c = hy_costs_uniform();
        c.comm = 0.5;
        hy_sim_result x, y;
        CHECK(hy_simulate(&s, &c, NULL, &x, &err) == HY_OK);
        CHECK(slots_simulate(&s, &c, &y, &err) == HY_OK);
        CHECK_NEAR(y.makespan, x.makespan + 0.5, 1e-9);
        hy_sim_result_free(&x);
        hy_sim_result_free(&y);
        hy_schedule_free(&s);
    }
}

int main(void) {
    test_plan();
    test_slots();
    test_watchdog();
    test_abort();
    test_consume(ON_CPU);
    static const struct { hy_sched_kind kind; int wv; } kinds[] = {
        { HY_SCHED_GPIPE, 1 }, { HY_SCHED_1F1B, 1 }, { HY_SCHED_INTERLEAVED, 2 },
        { HY_SCHED_HANAYO, 1 }, { HY_SCHED_HANAYO, 2 },
    };
    const int ranks[] = { 2, 4, 8 };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int i = 0; i < 3; i++)
            for (int graph = 0; graph <= 1; graph++)
                stress(ON_CPU, kinds[k].kind, ranks[i], kinds[k].wv, 2 * ranks[i], graph, 12, 20000, 30.0);

    /* The same on a GPU: the protocol through stream memory operations,
     * eager and as captured graphs, with delay kernels on the producers. */
    int gpus = 0;
    hy_error err;
    if (hy_device_count(&gpus, &err) != HY_OK) gpus = 0;
    if (gpus == 0) {
        printf("mailbox: no CUDA device; the CUDA stress cases are not run here\n");
        return TEST_END("mailbox");
    }
    /* Each case says when it starts and how long it took, on stderr
     * (unbuffered): a run cut short by its time limit still names the
     * case it was in. A 10 s watchdog turns a lost signal into a failure
     * well inside that limit. */
    const int cuda_ranks[] = { 1, 2, 4, 8 };
    static const char *const flags_in[] = { "", "host", "device" };
    for (int on = ON_CUDA_HOST_FLAGS; on <= ON_CUDA_DEVICE_FLAGS; on++) {
        fprintf(stderr, "mailbox: cuda, flags in %s memory: consume ...", flags_in[on]);
        double t0 = seconds();
        test_consume(on);
        fprintf(stderr, " %.2f s\n", seconds() - t0);
    }
    for (int on = ON_CUDA_HOST_FLAGS; on <= ON_CUDA_DEVICE_FLAGS; on++)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            for (int i = 0; i < 4; i++)
                for (int graph = 0; graph <= 1; graph++) {
                    int P = cuda_ranks[i];
                    if (P == 1 && kinds[k].kind != HY_SCHED_GPIPE) continue;
                    fprintf(stderr, "mailbox: cuda, flags in %s memory: %s W=%d P=%d %s ...",
                            flags_in[on], hy_sched_name(kinds[k].kind), kinds[k].wv, P,
                            graph ? "graph" : "eager");
                    double t0 = seconds();
                    stress(on, kinds[k].kind, P, kinds[k].wv, 2 * P, graph, 50, 20000, 10.0);
                    fprintf(stderr, " %.2f s\n", seconds() - t0);
                }
    return TEST_END("mailbox");
}
