/*
 * schedule.c — the four pipeline schedules as pure functions.
 *
 * gpipe, 1f1b and interleaved are the published orders, written out
 * directly. hanayo's wave order has no published closed form that reaches
 * the ideal bubble, so it is derived here in two steps
 * (DESIGN §1.2 "The Hanayo wave order" has the derivation):
 *
 *  1. Streams. Each rank's forwards are ordered by the key
 *         key_F(m, s) = 2PW * (m div P) + 2 * (m mod P) + s
 *     and its backwards by the same key with s replaced by S-1-s. Within a
 *     group of P micro-batches, micro-batch i enters two forward slots after
 *     micro-batch i-1, and groups follow each other every 2PW slots. With
 *     the wave placement these keys tile every rank's slots exactly (each
 *     rank sees every integer once, after its fill), so a forward that
 *     leaves stage s at slot k finds stage s+1 free at slot k+1: in a
 *     forward-only pipeline no micro-batch ever waits.
 *  2. Interleaving. The streams are merged by replaying the pipeline in
 *     time with the uniform costs (f = 1, b = 2): a rank that is free
 *     starts the earliest-ready of its next backward and its next forward
 *     (the forward on a tie; a forward may overtake stream entries that
 *     are not ready yet, looking one group of 2WP entries ahead), while
 *     rank r holds at most 2WP + r activations. The replay only decides
 *     the order: the result is a fixed per-rank list, a pure function of
 *     (P, W, M). For M a multiple of P with M >= 2P it reaches the ideal
 *     makespan (f+b)(2WM + P - 1) exactly (tests/test_schedule.c pins the
 *     grid), with peak memory 2WP + r on rank r: at most interleaved
 *     v = 2W's 2WP + P - 1.
 */
#include "schedule.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const hy_sched_names[HY_SCHED_COUNT] = {
    "gpipe", "1f1b", "interleaved", "hanayo"
};

const char *hy_sched_name(hy_sched_kind kind) {
    return (kind >= 0 && kind < HY_SCHED_COUNT) ? hy_sched_names[kind] : "?";
}

int hy_sched_parse(const char *name, hy_sched_kind *kind, hy_error *err) {
    for (int k = 0; k < HY_SCHED_COUNT; k++) {
        if (strcmp(name, hy_sched_names[k]) == 0) {
            *kind = (hy_sched_kind)k;
            return HY_OK;
        }
    }
    return hy_fail(err, HY_ERR_INPUT,
                   "unknown schedule '%s'; use one of gpipe, 1f1b, interleaved, hanayo",
                   name);
}

const char *hy_op_name(int op) {
    return op == HY_FWD ? "F" : op == HY_BWD ? "B" : op == HY_WGRAD ? "W" : "?";
}

void hy_action_label(const hy_action *a, char *buf, int len) {
    snprintf(buf, (size_t)len, "%s m%d s%d", hy_op_name(a->op), a->mb, a->stage);
}

void hy_schedule_free(hy_schedule *s) {
    if (!s) return;
    if (s->actions)
        for (int r = 0; r < s->ranks; r++) free(s->actions[r]);
    free(s->actions);
    free(s->n_actions);
    free(s->placement);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------------------ */
/* Placement and shape */

static int place_of(hy_sched_kind kind, int P, int s) {
    if (kind == HY_SCHED_HANAYO) {
        int seg = s / P, j = s % P;
        return (seg % 2 == 0) ? j : P - 1 - j;
    }
    return s % P;
}

int hy_schedule_local_chunk(const hy_schedule *s, int stage) {
    /* Every placement puts exactly one stage of each segment of P stages
     * on each rank, so the segment index is the local chunk. */
    return stage / s->ranks;
}

/* Stage that rank r holds as its local chunk c. */
static int stage_of(const hy_schedule *s, int r, int c) {
    if (s->kind == HY_SCHED_HANAYO && c % 2 == 1) return c * s->ranks + (s->ranks - 1 - r);
    return c * s->ranks + r;
}

static int check_params(const hy_sched_params *p, hy_error *err) {
    if (p->kind < 0 || p->kind >= HY_SCHED_COUNT)
        return hy_fail(err, HY_ERR_INPUT, "unknown schedule kind %d", (int)p->kind);
    if (p->ranks < 1 || p->ranks > HY_MAX_RANKS)
        return hy_fail(err, HY_ERR_INPUT, "ranks must be in 1..%d, got %d", HY_MAX_RANKS, p->ranks);
    if (p->micro_batches < 1 || p->micro_batches > 1 << 16)
        return hy_fail(err, HY_ERR_INPUT, "micro_batches must be in 1..65536, got %d",
                       p->micro_batches);
    if (p->kind == HY_SCHED_HANAYO && (p->waves < 1 || p->waves > 16))
        return hy_fail(err, HY_ERR_INPUT, "waves must be in 1..16, got %d", p->waves);
    if (p->kind == HY_SCHED_INTERLEAVED) {
        if (p->chunks < 1 || p->chunks > 64)
            return hy_fail(err, HY_ERR_INPUT, "chunks must be in 1..64, got %d", p->chunks);
        if (p->micro_batches % p->ranks != 0)
            return hy_fail(err, HY_ERR_INPUT,
                           "interleaved needs micro_batches (%d) to be a multiple of ranks (%d); "
                           "use %d or %d",
                           p->micro_batches, p->ranks,
                           p->micro_batches / p->ranks * p->ranks > 0
                               ? p->micro_batches / p->ranks * p->ranks : p->ranks,
                           (p->micro_batches / p->ranks + 1) * p->ranks);
    }
    return HY_OK;
}

int hy_sched_chunks(const hy_sched_params *p) {
    if (p->kind == HY_SCHED_HANAYO) return 2 * p->waves;
    if (p->kind == HY_SCHED_INTERLEAVED) return p->chunks;
    return 1;
}

int hy_sched_stages(const hy_sched_params *p) { return hy_sched_chunks(p) * p->ranks; }

int hy_sched_min_activations(const hy_sched_params *p) { return hy_sched_chunks(p); }

long hy_sched_rank_actions(int split_backward, int chunks, int micro_batches) {
    return (split_backward ? 3L : 2L) * chunks * micro_batches;
}

static int schedule_alloc(hy_schedule *s, const hy_sched_params *p, hy_error *err) {
    memset(s, 0, sizeof *s);
    s->kind = p->kind;
    s->ranks = p->ranks;
    s->micro_batches = p->micro_batches;
    s->waves = p->kind == HY_SCHED_HANAYO ? p->waves : 0;
    s->chunks = hy_sched_chunks(p);
    s->stages = s->chunks * s->ranks;
    s->split = p->split_backward != 0;
    s->placement = malloc(sizeof(int) * (size_t)s->stages);
    s->n_actions = calloc((size_t)s->ranks, sizeof(int));
    s->actions = calloc((size_t)s->ranks, sizeof(hy_action *));
    if (!s->placement || !s->n_actions || !s->actions) goto oom;
    for (int stage = 0; stage < s->stages; stage++) s->placement[stage] = place_of(s->kind, s->ranks, stage);
    size_t per_rank = (size_t)hy_sched_rank_actions(s->split, s->chunks, s->micro_batches);
    for (int r = 0; r < s->ranks; r++) {
        s->actions[r] = malloc(sizeof(hy_action) * per_rank);
        if (!s->actions[r]) goto oom;
    }
    return HY_OK;
oom:
    hy_schedule_free(s);
    return hy_fail(err, HY_ERR_RUNTIME, "out of memory building a schedule");
}

int hy_schedule_copy(hy_schedule *dst, const hy_schedule *src, hy_error *err) {
    hy_sched_params p = { .kind = src->kind, .ranks = src->ranks,
                          .micro_batches = src->micro_batches, .waves = src->waves,
                          .chunks = src->chunks, .split_backward = src->split };
    int rc = schedule_alloc(dst, &p, err);
    if (rc) return rc;
    memcpy(dst->placement, src->placement, sizeof(int) * (size_t)src->stages);
    memcpy(dst->n_actions, src->n_actions, sizeof(int) * (size_t)src->ranks);
    for (int r = 0; r < src->ranks; r++)
        memcpy(dst->actions[r], src->actions[r], sizeof(hy_action) * (size_t)src->n_actions[r]);
    return HY_OK;
}

static void push(hy_schedule *s, int r, int op, int mb, int stage) {
    hy_action *a = &s->actions[r][s->n_actions[r]++];
    a->op = op;
    a->mb = mb;
    a->stage = stage;
}

/* ------------------------------------------------------------------------ */
/* GPipe, 1F1B, interleaved: the published orders */

static void build_gpipe(hy_schedule *s) {
    for (int r = 0; r < s->ranks; r++) {
        for (int m = 0; m < s->micro_batches; m++) push(s, r, HY_FWD, m, r);
        for (int m = 0; m < s->micro_batches; m++) push(s, r, HY_BWD, m, r);
    }
}

/* DAPPLE / PipeDream-flush: P-1-r warm-up forwards, then one forward and
 * one backward in turn, then the remaining backwards. */
static void build_1f1b(hy_schedule *s) {
    int P = s->ranks, M = s->micro_batches;
    for (int r = 0; r < P; r++) {
        int warm = P - 1 - r < M ? P - 1 - r : M;
        for (int m = 0; m < warm; m++) push(s, r, HY_FWD, m, r);
        for (int i = 0; i < M - warm; i++) {
            push(s, r, HY_FWD, warm + i, r);
            push(s, r, HY_BWD, i, r);
        }
        for (int m = M - warm; m < M; m++) push(s, r, HY_BWD, m, r);
    }
}

/* Megatron-LM's interleaved order. Virtual micro-batch k of a rank is
 * micro-batch (k div Pv)P + k mod P on local chunk (k div P) mod v, run
 * forward in chunk order and backward in reverse chunk order; rank r warms
 * up with 2(P-1-r) + (v-1)P forwards. */
static void interleaved_virtual(const hy_schedule *s, int k, int backward,
                                   int *mb, int *chunk) {
    int P = s->ranks, v = s->chunks;
    *mb = (k / (P * v)) * P + k % P;
    *chunk = (k / P) % v;
    if (backward) *chunk = v - 1 - *chunk;
}

static void push_virtual(hy_schedule *s, int r, int op, int k) {
    int mb, chunk;
    interleaved_virtual(s, k, op == HY_BWD, &mb, &chunk);
    push(s, r, op, mb, chunk * s->ranks + r);
}

static void build_interleaved(hy_schedule *s) {
    int P = s->ranks, total = s->chunks * s->micro_batches;
    for (int r = 0; r < P; r++) {
        int warm = 2 * (P - 1 - r) + (s->chunks - 1) * P;
        if (warm > total) warm = total;
        for (int k = 0; k < warm; k++) push_virtual(s, r, HY_FWD, k);
        for (int i = 0; i < total - warm; i++) {
            push_virtual(s, r, HY_FWD, warm + i);
            push_virtual(s, r, HY_BWD, i);
        }
        for (int k = total - warm; k < total; k++) push_virtual(s, r, HY_BWD, k);
    }
}

/* ------------------------------------------------------------------------ */
/* Hanayo: streams and the merge (see the file comment) */

typedef struct {
    int mb, stage;
} stream_item;

/* A stream entry's key (see the file comment): rank r's stage `stage` at
 * `depth` in the wave, of micro-batch m. */
static long stream_key(const hy_schedule *s, int m, long depth) {
    return 2L * s->ranks * s->waves * (m / s->ranks) + 2L * (m % s->ranks) + depth;
}

/* One more than the largest key of s's streams. */
static long stream_keys(const hy_schedule *s) {
    return stream_key(s, s->micro_batches - 1, 0) + s->stages;
}

/* The wave streams of one rank: forward (backward = 0) or backward, in
 * the order of their keys, micro-batch order between equal keys (no two
 * entries of one micro-batch share a key). A counting sort: the keys are
 * dense, about one per entry, and count (stream_keys + 1 of them) is the
 * scratch it counts in. */
static void wave_stream(const hy_schedule *s, int r, int backward, int *count, stream_item *out) {
    long keys = stream_keys(s);
    memset(count, 0, (size_t)(keys + 1) * sizeof *count);
    for (int pass = 0; pass < 2; pass++) {
        for (int m = 0; m < s->micro_batches; m++)
            for (int c = 0; c < s->chunks; c++) {
                int rc = stage_of(s, r, c);
                long key = stream_key(s, m, backward ? s->stages - 1 - rc : rc);
                if (pass == 0) count[key + 1]++;
                else out[count[key]++] = (stream_item){ m, rc };
            }
        if (pass == 0)
            for (long k = 1; k <= keys; k++) count[k] += count[k - 1];
    }
}

/* The forwards of one rank's stream that the merge may pick, as a
 * tournament over a stretch of the stream's entries: leaf j holds the
 * time entry base + j's input arrives, +inf while that input has not
 * run, the entry is taken or lies beyond the window; each node the least
 * of its two children. The stretch starts at the first untaken entry
 * when it is placed (window_place) and is twice as long as the window
 * then reaches, so the tree is about as deep as the window is wide, not
 * as the stream is long, and is placed again only after the window has
 * moved by half its length. */
typedef struct {
    int base;         /* the stream index of leaf 0 */
    int size;         /* leaves, a power of two */
    double *t;        /* [2 * size, up to twice the most leaves], t[1] the root */
} ready_tree;

static void tree_set(ready_tree *q, int i, double t) {
    assert(i >= q->base && i < q->base + q->size);
    int k = q->size + i - q->base;
    q->t[k] = t;
    for (k /= 2; k >= 1; k /= 2) {
        double a = q->t[2 * k], b = q->t[2 * k + 1], least = a <= b ? a : b;
        if (q->t[k] == least) break;   /* and so is every node above */
        q->t[k] = least;
    }
}

/* An empty tree of `size` leaves from entry 0. */
static void tree_clear(ready_tree *q, int size) {
    q->base = 0;
    q->size = size;
    for (int k = 0; k < 2 * size; k++) q->t[k] = INFINITY;
}

/* q over `size` leaves from entry `base` (every entry below both bases
 * being taken, so +inf), its leaves moved through spare ([size]). */
static void tree_move(ready_tree *q, int base, int size, double *spare) {
    for (int j = 0; j < size; j++) {
        int i = base + j;
        spare[j] = i >= q->base && i < q->base + q->size ? q->t[q->size + i - q->base] : INFINITY;
    }
    q->base = base;
    q->size = size;
    memcpy(q->t + size, spare, (size_t)size * sizeof *spare);
    for (int k = size - 1; k >= 1; k--) {
        double a = q->t[2 * k], b = q->t[2 * k + 1];
        q->t[k] = a <= b ? a : b;
    }
}

/* The first entry in stream order whose input arrives by `at` (the
 * tree's least is known to be <= at); `first` is the first untaken
 * entry, most often the answer. */
static int tree_first_by(const ready_tree *q, double at, int first) {
    if (first < q->base + q->size && q->t[q->size + first - q->base] <= at) return first;
    int k = 1;
    /* The branch taken is as good as random: computed, not predicted. */
    while (k < q->size) k = 2 * k + !(q->t[2 * k] <= at);
    return k - q->size + q->base;
}

/* The entry whose input arrives first, the first in stream order of
 * equals (`first` as above). */
static int tree_first_least(const ready_tree *q, int first) {
    if (first < q->base + q->size && q->t[q->size + first - q->base] == q->t[1]) return first;
    int k = 1;
    while (k < q->size) k = 2 * k + !(q->t[2 * k] <= q->t[2 * k + 1]);
    return k - q->size + q->base;
}

/* What a rank would run next, and from when: op < 0 if nothing can. */
typedef struct {
    int op, pick;     /* pick: the forward's index in the rank's stream */
    double t;
} merge_choice;

typedef struct {
    const hy_schedule *sched;    /* the one being ordered: its shape and dependencies */
    int P, S, n;                 /* ranks, stages, items per stream */
    int waves, micro_batches;    /* with P, the shape the streams are of */
    const int *placement;
    const hy_costs *c;           /* what the replay takes each action to cost */
    double *cost;                /* [3 * S]: hy_action_cost of (op, stage) under c, op * S + stage */
    stream_item **fs, **bs;      /* [P][n] forward and backward streams */
    int *fpos;                   /* [M*S]: (m, s)'s index in its rank's forward stream */
    double *fend, *bend;         /* [M*S]: end time, or -1 while not run */
    int window;                  /* how many untaken stream entries a forward may overtake */
    ready_tree *ready;           /* [P]: the forwards within the window, their inputs' arrival */
    ready_tree *ready_tail;      /* [P], with split_w: the same for the last cap_tail stages */
    int leaves;                  /* the most leaves a tree has: a power of two >= n */
    double *spare;               /* [leaves]: where tree_move moves them through */
    char **taken;                /* [P][n]: whether the rank has run that forward */
    int *first;                  /* [P]: each rank's first untaken forward (n: none) */
    int *ftaken, *bhead, *live;  /* [P]: forwards taken, next backward, activations held */
    double *free_at;             /* [P] */
    const int *cap;              /* [P] or NULL */
    int b_first;
    merge_choice *choice;        /* [P]: each rank's next action, kept current */
    double *start;               /* [P2]: when it starts, +inf for none (and past P) */
    int *best;                   /* [2 * P2]: tournament of the ranks' choices, best[1] the winner */
    int P2;                      /* leaves of that tournament, a power of two >= P */
    int split_w;                 /* > 0: the merge places the W's too (hy_sched_order.w_in_merge) */
    int cap_tail;                /* then, forwards of the last cap_tail stages pass a cap */
    stream_item **wq;            /* [P][n]: each rank's B's whose W has not run, in order */
    int *whead, *wtail;          /* [P] */
} merge_state;

/* When an input made on rank `from` is there for rank r. */
static double arrival(const merge_state *g, double end, int from, int r) {
    return g->placement[from] != r ? end + g->c->comm : end;
}

/* When action a could start on rank r as far as its inputs go: the last
 * of their arrivals, by hy_action_inputs (the one statement of the
 * dependencies); -1 while one of them has not run. */
static inline double inputs_ready(const merge_state *g, int op, int m, int rc, int r) {
    hy_action a = { op, m, rc }, in[HY_MAX_INPUTS];
    int n = hy_action_inputs(g->sched, &a, in);
    double t = 0;
    for (int i = 0; i < n; i++) {
        assert(in[i].op == HY_FWD || in[i].op == HY_BWD);   /* the merge's F and B need no W */
        double end = (in[i].op == HY_FWD ? g->fend : g->bend)[in[i].mb * g->S + in[i].stage];
        if (end < 0) return -1;
        end = arrival(g, end, in[i].stage, r);
        if (end > t) t = end;
    }
    return t;
}

/* Entry i of rank r's forward stream, within the window: in the trees
 * with its input's arrival once that has run. */
static void forward_in_window(merge_state *g, int r, int i) {
    const stream_item *f = &g->fs[r][i];
    double t = inputs_ready(g, HY_FWD, f->mb, f->stage, r);
    if (t < 0) return;
    ready_tree *q = &g->ready[r];
    if (i >= q->base + q->size) {
        /* Past the trees' stretch: a new one from the first untaken
         * entry, twice as long as what the window spans now (the whole
         * stream once that is as long). */
        int size = q->size;
        while (size < 2 * (i + 1 - g->first[r]) && size < g->leaves) size *= 2;
        int base = size == g->leaves ? 0 : g->first[r];
        tree_move(q, base, size, g->spare);
        if (g->split_w) tree_move(&g->ready_tail[r], base, size, g->spare);
    }
    tree_set(&g->ready[r], i, t);
    if (g->split_w && f->stage >= g->S - g->cap_tail) tree_set(&g->ready_tail[r], i, t);
}

/* Rank r takes entry i of its forward stream: out of the trees, and the
 * window, the first `window` untaken entries, reaches one further. */
static void forward_taken(merge_state *g, int r, int i) {
    tree_set(&g->ready[r], i, INFINITY);
    if (g->split_w) tree_set(&g->ready_tail[r], i, INFINITY);
    g->taken[r][i] = 1;
    while (g->first[r] < g->n && g->taken[r][g->first[r]]) g->first[r]++;
    int edge = g->ftaken[r]++ + g->window;   /* every entry past the window is untaken */
    if (edge < g->n) forward_in_window(g, r, edge);
}

/* Earliest start of a forward in tree q of rank r: the first in stream
 * order of those ready when the rank is free, else the first of those
 * ready earliest. Returns -1 if none is ready. */
static double next_forward(const merge_state *g, const ready_tree *q, int r, int *pick) {
    double least = q->t[1], free_at = g->free_at[r];
    if (least == INFINITY) return -1;
    if (least <= free_at) {
        *pick = tree_first_by(q, free_at, g->first[r]);
        return free_at;
    }
    *pick = tree_first_least(q, g->first[r]);
    return least;
}

/* What rank r runs next: the earlier of its next backward and the
 * forward that starts first within the window (the forward on a tie,
 * unless b_first), and with split_w a W instead when that would wait. */
static merge_choice choose(const merge_state *g, int r) {
    double tb = -1, tf = -1;
    int fi = 0;
    if (g->bhead[r] < g->n) {
        const stream_item *b = &g->bs[r][g->bhead[r]];
        tb = inputs_ready(g, HY_BWD, b->mb, b->stage, r);
        if (tb >= 0 && tb < g->free_at[r]) tb = g->free_at[r];
    }
    /* At its cap a rank may still run a forward of the last cap_tail
     * stages when the merge places the W's: such a forward leads to the
     * backward that frees memory, and with activations held until their
     * W the rank holding the last stage could otherwise starve. */
    if (!g->cap || g->live[r] < g->cap[r]) tf = next_forward(g, &g->ready[r], r, &fi);
    else if (g->split_w) tf = next_forward(g, &g->ready_tail[r], r, &fi);
    merge_choice ch = { -1, fi, 0 };
    if (tf >= 0 && (tb < 0 || tf < tb || (tf == tb && !g->b_first))) { ch.op = HY_FWD; ch.t = tf; }
    else if (tb >= 0) { ch.op = HY_BWD; ch.t = tb; }
    /* A weight pass, always ready once its B has run, fills a wait for
     * the next F or B longer than (split_w - 1) halves of it
     * (hy_sched_order.w_in_merge), and frees an activation. */
    double gap = (g->split_w - 1) * 0.5;
    if (g->split_w && g->wtail[r] > g->whead[r] &&
        (ch.op < 0 ||
         ch.t > g->free_at[r] + gap * g->cost[HY_WGRAD * g->S + g->wq[r][g->whead[r]].stage])) {
        ch.op = HY_WGRAD;
        ch.t = g->free_at[r];
    }
    return ch;
}

/* Up to this many ranks the merge finds the rank whose choice starts
 * first by reading every rank's (first_to_start): a few independent
 * loads cost less than a tournament's chain of dependent ones. */
#define MERGE_SCAN_RANKS 8

/* Rank r's choice made again, after its state or its inputs changed,
 * and played up the tournament: a node holds the rank of its two
 * children's whose choice starts first, the left one (the lower ranks)
 * of equals. */
static void rechoose(merge_state *g, int r) {
    g->choice[r] = choose(g, r);
    g->start[r] = g->choice[r].op < 0 ? INFINITY : g->choice[r].t;
    if (g->P <= MERGE_SCAN_RANKS) return;   /* first_to_start scans them */
    for (int k = (g->P2 + r) / 2; k >= 1; k /= 2) {
        int a = g->best[2 * k], b = g->best[2 * k + 1], was = g->best[k];
        g->best[k] = g->start[b] < g->start[a] ? b : a;
        if (g->best[k] == was && was != r) break;   /* nothing above changes */
    }
}

/* The rank whose choice starts first, the lowest of equals: the
 * tournament's winner, or up to MERGE_SCAN_RANKS the same read off. */
static int first_to_start(const merge_state *g) {
    if (g->P > MERGE_SCAN_RANKS) return g->best[1];
    int best = 0;
    double least = g->start[0];
    for (int r = 1; r < g->P; r++) {
        double t = g->start[r];
        int earlier = t < least;
        best = earlier ? r : best;
        least = earlier ? t : least;
    }
    return best;
}

/* Replays the merge and writes the F and B order into s (and with
 * split_w the W's: an activation is then held until its W). Rank r holds
 * at most cap[r] activations (no limit when cap is NULL); `window` is how
 * far a forward may overtake in its stream.
 *
 * At every step the rank whose next action starts first (the lower rank
 * of equals) runs it. Each rank's choice is kept (choose) and made again
 * only when it can change: after the rank runs an action, or when an
 * action it may run next gets an input. A rank's forwards within the
 * window are kept ordered by their inputs' arrival (ready_tree), and the
 * ranks' choices in a tournament (read off directly up to
 * MERGE_SCAN_RANKS ranks), so a step costs a few logarithms rather than
 * a scan of every rank and of its whole window.
 *
 * Returns 0 if it ran to completion, -1 if a cap starved it. */
static int merge_run(merge_state *g, hy_schedule *s, const int *cap, int window, int b_first) {
    int P = g->P, S = g->S;
    int total = (int)hy_sched_rank_actions(g->split_w, s->chunks, s->micro_batches) * P;
    g->cap = cap;
    g->window = window;
    g->b_first = b_first;
    for (int i = 0; i < s->micro_batches * S; i++) g->fend[i] = g->bend[i] = -1;
    /* Twice the window to start with: it moves by half a tree before
     * the tree is placed again. */
    int size = 1;
    while (size < 2 * window && size < g->leaves) size *= 2;
    for (int r = 0; r < P; r++) {
        tree_clear(&g->ready[r], size);
        if (g->split_w) tree_clear(&g->ready_tail[r], size);
        memset(g->taken[r], 0, (size_t)g->n);
        g->first[r] = 0;
        g->ftaken[r] = g->bhead[r] = g->live[r] = 0;
        g->free_at[r] = 0;
        s->n_actions[r] = 0;
        if (g->split_w) g->whead[r] = g->wtail[r] = 0;
        for (int i = 0; i < window && i < g->n; i++) forward_in_window(g, r, i);
    }
    for (int r = 0; r < g->P2; r++) {
        g->best[g->P2 + r] = r;
        g->start[r] = INFINITY;
    }
    for (int k = g->P2 - 1; k >= 1; k--) g->best[k] = g->best[2 * k];
    for (int r = 0; r < P; r++) rechoose(g, r);
    for (int done = 0; done < total; done++) {
        int r = first_to_start(g);
        if (g->start[r] == INFINITY) return -1;
        merge_choice ch = g->choice[r];
        int fed = -1;   /* another rank whose next action may have got its input */
        if (ch.op == HY_FWD) {
            const stream_item *f = &g->fs[r][ch.pick];
            double end = ch.t + g->cost[HY_FWD * S + f->stage];
            g->fend[f->mb * S + f->stage] = end;
            g->free_at[r] = end;
            g->live[r]++;
            push(s, r, HY_FWD, f->mb, f->stage);
            forward_taken(g, r, ch.pick);
            if (f->stage + 1 < S) {
                int to = g->placement[f->stage + 1], i = g->fpos[f->mb * S + f->stage + 1];
                if (i < g->ftaken[to] + window) forward_in_window(g, to, i);
                fed = to;
            }
        } else if (ch.op == HY_BWD) {
            const stream_item *b = &g->bs[r][g->bhead[r]++];
            double end = ch.t + g->cost[HY_BWD * S + b->stage];
            g->bend[b->mb * S + b->stage] = end;
            g->free_at[r] = end;
            if (g->split_w) g->wq[r][g->wtail[r]++] = *b;
            else g->live[r]--;
            push(s, r, HY_BWD, b->mb, b->stage);
            if (b->stage > 0) fed = g->placement[b->stage - 1];
        } else {
            const stream_item *w = &g->wq[r][g->whead[r]++];
            g->free_at[r] = ch.t + g->cost[HY_WGRAD * S + w->stage];
            g->live[r]--;
            push(s, r, HY_WGRAD, w->mb, w->stage);
        }
        rechoose(g, r);
        if (fed >= 0 && fed != r) rechoose(g, fed);
    }
    return 0;
}

static void merge_free(merge_state *g) {
    for (int r = 0; r < g->P; r++) {
        if (g->fs) free(g->fs[r]);
        if (g->bs) free(g->bs[r]);
        if (g->ready) free(g->ready[r].t);
        if (g->ready_tail) free(g->ready_tail[r].t);
        if (g->wq) free(g->wq[r]);
        if (g->taken) free(g->taken[r]);
    }
    free(g->taken); free(g->first); free(g->spare);
    free(g->fs); free(g->bs); free(g->fpos); free(g->cost);
    free(g->fend); free(g->bend);
    free(g->ready); free(g->ready_tail);
    free(g->ftaken); free(g->bhead); free(g->live); free(g->free_at);
    free(g->choice); free(g->start); free(g->best);
    free(g->wq); free(g->whead); free(g->wtail);
    memset(g, 0, sizeof *g);
}

/* The memory of a merge of s's shape and its streams, which depend on
 * that shape alone (ranks, waves, micro-batches). -1 when out of memory
 * (merge_free takes the part-built state). */
static int merge_alloc(merge_state *g, const hy_schedule *s) {
    memset(g, 0, sizeof *g);
    g->P = s->ranks;
    g->S = s->stages;
    g->n = s->chunks * s->micro_batches;
    g->waves = s->waves;
    g->micro_batches = s->micro_batches;
    for (g->P2 = 1; g->P2 < g->P; g->P2 *= 2) {}
    int leaves = 1;
    while (leaves < g->n) leaves *= 2;
    size_t P = (size_t)g->P, n = (size_t)g->n, MS = (size_t)s->micro_batches * (size_t)g->S;
    g->fs = calloc(P, sizeof *g->fs);
    g->bs = calloc(P, sizeof *g->bs);
    g->ready = calloc(P, sizeof *g->ready);
    g->ready_tail = calloc(P, sizeof *g->ready_tail);
    g->wq = calloc(P, sizeof *g->wq);
    g->taken = calloc(P, sizeof *g->taken);
    g->first = malloc(P * sizeof(int));
    g->spare = malloc((size_t)leaves * sizeof(double));
    g->leaves = leaves;
    g->fpos = malloc(MS * sizeof(int));
    g->cost = malloc(3 * (size_t)g->S * sizeof(double));
    g->fend = malloc(MS * sizeof(double));
    g->bend = malloc(MS * sizeof(double));
    g->ftaken = malloc(P * sizeof(int));
    g->bhead = malloc(P * sizeof(int));
    g->live = malloc(P * sizeof(int));
    g->free_at = malloc(P * sizeof(double));
    g->choice = malloc(P * sizeof *g->choice);
    g->start = malloc((size_t)g->P2 * sizeof(double));
    g->best = malloc(2 * (size_t)g->P2 * sizeof(int));
    g->whead = malloc(P * sizeof(int));
    g->wtail = malloc(P * sizeof(int));
    if (!g->fs || !g->bs || !g->ready || !g->ready_tail || !g->wq || !g->taken || !g->first ||
        !g->spare || !g->fpos || !g->cost ||
        !g->fend || !g->bend || !g->ftaken || !g->bhead || !g->live || !g->free_at ||
        !g->choice || !g->start || !g->best || !g->whead || !g->wtail)
        return -1;
    int *count = malloc((size_t)(stream_keys(s) + 1) * sizeof *count);
    if (!count) return -1;
    for (int r = 0; r < g->P; r++) {
        g->fs[r] = malloc(n * sizeof(stream_item));
        g->bs[r] = malloc(n * sizeof(stream_item));
        g->wq[r] = malloc(n * sizeof(stream_item));
        g->taken[r] = malloc(n);
        g->ready[r].t = malloc(2 * (size_t)leaves * sizeof(double));
        g->ready_tail[r].t = malloc(2 * (size_t)leaves * sizeof(double));
        if (!g->fs[r] || !g->bs[r] || !g->wq[r] || !g->taken[r] || !g->ready[r].t ||
            !g->ready_tail[r].t) {
            free(count);
            return -1;
        }
        wave_stream(s, r, 0, count, g->fs[r]);
        wave_stream(s, r, 1, count, g->bs[r]);
        for (int i = 0; i < g->n; i++) g->fpos[g->fs[r][i].mb * g->S + g->fs[r][i].stage] = i;
    }
    free(count);
    return 0;
}

/* g ready to order s under costs c: its memory and streams kept from the
 * last order if that was of the same shape, else made anew. */
static int merge_init(merge_state *g, const hy_schedule *s, const hy_costs *c, int split_w,
                      int cap_tail) {
    if (!g->fs || g->P != s->ranks || g->waves != s->waves ||
        g->micro_batches != s->micro_batches) {
        merge_free(g);
        if (merge_alloc(g, s) != 0) return -1;
    }
    g->split_w = split_w;
    g->cap_tail = cap_tail > 1 ? cap_tail : 1;
    g->sched = s;
    g->placement = s->placement;
    g->c = c;
    for (int op = HY_FWD; op <= HY_WGRAD; op++)
        for (int st = 0; st < g->S; st++) {
            hy_action a = { op, 0, st };
            g->cost[op * g->S + st] = hy_action_cost(c, &a);
        }
    return 0;
}

void hy_sched_scratch_free(hy_sched_scratch *w) {
    if (!w) return;
    if (w->merge) merge_free(w->merge);
    free(w->merge);
    w->merge = NULL;
}

/* The F and B order of the waves: the merge under costs c with rank r
 * holding at most 2WP + cap_extra (+ r) activations. The default caps
 * (2WP + r, unsplit) are what the uniform costs need: 2WP is what one
 * group of P micro-batches in flight needs on every rank (P micro-batches
 * x 2W chunks), and the extra r pays for rank r's first backward arriving
 * r backward hops later than rank 0's. Overtaking looks one group (2WP
 * stream entries) ahead by default. Too few micro-batches to fill the
 * pipeline starve a cap: then the merge runs uncapped. */
static int build_hanayo(hy_schedule *s, const hy_costs *c, const hy_sched_order *o,
                        hy_sched_scratch *w, hy_error *err) {
    if (!w->merge) w->merge = calloc(1, sizeof(merge_state));
    merge_state *g = w->merge;
    int P = s->ranks, group = s->chunks * P, cap[HY_MAX_RANKS];
    if (!g || merge_init(g, s, c, s->split ? o->w_in_merge : 0, o->cap_tail) != 0) {
        hy_sched_scratch_free(w);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory building the hanayo order");
    }
    for (int r = 0; r < P; r++) cap[r] = group + o->cap_extra + (o->cap_rises ? r : 0);
    int window = o->window > 0 ? o->window : group;
    int rc = merge_run(g, s, cap, window, o->backward_first);
    if (rc != 0) rc = merge_run(g, s, NULL, window, o->backward_first);
    if (rc != 0)
        return hy_fail(err, HY_ERR_RUNTIME, "internal error: no hanayo order for P=%d W=%d M=%d",
                       P, s->waves, s->micro_batches);
    return HY_OK;
}

/* ------------------------------------------------------------------------ */
/* Split backward: where the weight passes go
 *
 * Under a split, B(m, s) is the only backward work another rank waits
 * for; W(m, s) can run any time after it. The orders below take an
 * unsplit F/B order (with B costing only the input-gradient pass) and
 * place the W's: a rank keeps back up to d of them while it still has
 * forwards to run, then, in its drain, runs one after each B and the rest
 * at its very end, where it would otherwise wait for the B's still
 * travelling back through the other ranks. With d = r on rank r this is
 * the ZB-H1 order of Qi et al. (Zero Bubble Pipeline Parallelism, ICLR
 * 2024) for 1F1B: rank r's memory rises by r from 1F1B's P - r to P, and
 * the drain, 3(P-1) units long for 1F1B under f = B = W = 1, shrinks to
 * (P-1): one forward per hop is all that is left of the bubble. */

static int defer_wgrad(hy_schedule *s, const hy_sched_order *o, hy_error *err) {
    size_t cap = (size_t)s->n_actions[0];
    for (int r = 1; r < s->ranks; r++)
        if ((size_t)s->n_actions[r] > cap) cap = (size_t)s->n_actions[r];
    hy_action *in = malloc((cap + 1) * sizeof *in);
    hy_action *held = malloc((cap + 1) * sizeof *held);   /* B's whose W waits, oldest first */
    if (!in || !held) {
        free(in);
        free(held);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory building a split schedule");
    }
    for (int r = 0; r < s->ranks; r++) {
        int n = s->n_actions[r], last_f = -1, head = 0, tail = 0;
        int keep = o->defer_slope * r + o->defer_base;
        memcpy(in, s->actions[r], (size_t)n * sizeof *in);
        for (int i = 0; i < n; i++)
            if (in[i].op == HY_FWD) last_f = i;
        s->n_actions[r] = 0;
        for (int i = 0; i < n; i++) {
            push(s, r, in[i].op, in[i].mb, in[i].stage);
            if (in[i].op != HY_BWD) continue;
            held[tail++] = in[i];
            int limit = i < last_f ? keep : 0, ran = 0;
            while (tail - head > limit && !(i > last_f && ran)) {
                push(s, r, HY_WGRAD, held[head].mb, held[head].stage);
                head++;
                ran = 1;
            }
        }
        for (; head < tail; head++) push(s, r, HY_WGRAD, held[head].mb, held[head].stage);
    }
    free(in);
    free(held);
    return HY_OK;
}

/* ZB-V (Qi et al., section 6): hanayo's W = 1 placement, two chunks per
 * rank, stage r (chunk 0, going down) and 2P-1-r (chunk 1, coming back).
 * Counting in micro-batches of one chunk, rank r
 *   1. runs 2(P-r)-1 forwards of chunk 0: what reaches it before the
 *      first micro-batch comes back up;
 *   2. r times: a forward of chunk 1 and one of chunk 0;
 *   3. P-r times: a forward of chunk 1 at once followed by its B and W,
 *      since the gradient of the last stage is local to the rank below;
 *   4. the steady state, F B W on chunk 0 then F B W on chunk 1, one
 *      micro-batch each, while forwards remain;
 *   5. the drain: r times B on chunk 0 and B on chunk 1 (the weights
 *      wait), P-r times B then W on chunk 0, then every W held back.
 * Each rank holds at most 2P activations (1F1B's memory for two chunks)
 * and under f = B = W = 1 only the fill is left of the bubble:
 * (P-1) / (6M + P - 1). With M < 2P-1 the counts are those of 2P-1
 * micro-batches and the actions of the missing ones are left out. */
typedef struct {
    hy_schedule *s;
    int r, stage[2], f[2], b[2], w[2];
} zbv_state;

static void zbv_push(zbv_state *z, int op, int chunk) {
    int *count = op == HY_FWD ? z->f : op == HY_BWD ? z->b : z->w;
    int m = count[chunk]++;
    if (m < z->s->micro_batches) push(z->s, z->r, op, m, z->stage[chunk]);
}

static void build_zbv(hy_schedule *s) {
    int P = s->ranks, M = s->micro_batches, n = M > 2 * P - 1 ? M : 2 * P - 1;
    for (int r = 0; r < P; r++) {
        zbv_state z = { s, r, { r, 2 * P - 1 - r }, { 0, 0 }, { 0, 0 }, { 0, 0 } };
        s->n_actions[r] = 0;
        for (int i = 0; i < 2 * (P - r) - 1; i++) zbv_push(&z, HY_FWD, 0);
        for (int i = 0; i < r; i++) {
            zbv_push(&z, HY_FWD, 1);
            zbv_push(&z, HY_FWD, 0);
        }
        for (int i = 0; i < P - r; i++) {
            zbv_push(&z, HY_FWD, 1);
            zbv_push(&z, HY_BWD, 1);
            zbv_push(&z, HY_WGRAD, 1);
        }
        while (z.f[1] < z.f[0] || z.f[0] < n) {
            if (z.f[0] < n) zbv_push(&z, HY_FWD, 0);
            zbv_push(&z, HY_BWD, 0);
            zbv_push(&z, HY_WGRAD, 0);
            zbv_push(&z, HY_FWD, 1);
            zbv_push(&z, HY_BWD, 1);
            zbv_push(&z, HY_WGRAD, 1);
        }
        for (int i = 0; i < r; i++) {
            zbv_push(&z, HY_BWD, 0);
            zbv_push(&z, HY_BWD, 1);
        }
        for (int i = 0; i < P - r; i++) {
            zbv_push(&z, HY_BWD, 0);
            zbv_push(&z, HY_WGRAD, 0);
        }
        while (z.w[1] < z.b[1]) zbv_push(&z, HY_WGRAD, 1);
        while (z.w[0] < z.b[0]) zbv_push(&z, HY_WGRAD, 0);
    }
}

/* DualPipeV (DeepSeek's DualPipe cut in half: the V placement, one
 * pipeline of micro-batches), in its eight steps on rank r, counting
 * micro-batches per chunk (0 going down, 1 coming back):
 *   1. 2(P-1-r) forwards of chunk 0;  2. r+1 times F0, F1;
 *   3. P-1-r times B1, its W, F1;
 *   4. M-2P+r+1 times F0, B1, F1, B0 (DualPipe overlaps each F with the
 *      B after it; here they run one after the other), each B with its W;
 *   5. P-1-r times B1, F1, B0, each B with its W;
 *   6. r+1 times B1, B0: from the middle one on (at its B1 on odd
 *      ranks, its B0 on even ones) the W's wait in a queue;
 *   7. P-1-r times a queued W then B0, its W queued;  8. r+1 queued W's.
 * Each rank holds at most 2P + 1 activations; the queue is what fills
 * the drain. Needs M >= 2P. */
typedef struct {
    hy_schedule *s;
    int r, stage[2], f[2], b[2];
    hy_action *wq;        /* the W's waiting, oldest first */
    int whead, wtail;
} dpv_state;

static void dpv_forward(dpv_state *d, int chunk) {
    push(d->s, d->r, HY_FWD, d->f[chunk]++, d->stage[chunk]);
}

static void dpv_backward(dpv_state *d, int chunk, int queue) {
    int m = d->b[chunk]++;
    push(d->s, d->r, HY_BWD, m, d->stage[chunk]);
    if (queue) d->wq[d->wtail++] = (hy_action){ HY_WGRAD, m, d->stage[chunk] };
    else push(d->s, d->r, HY_WGRAD, m, d->stage[chunk]);
}

static void dpv_weight(dpv_state *d) {
    assert(d->whead < d->wtail);
    hy_action w = d->wq[d->whead++];
    push(d->s, d->r, HY_WGRAD, w.mb, w.stage);
}

static int build_dualpipev(hy_schedule *s, hy_error *err) {
    int P = s->ranks, M = s->micro_batches;
    if (M < 2 * P)
        return hy_fail(err, HY_ERR_INPUT, "DualPipeV needs micro_batches >= 2 x ranks (%d), got %d",
                       2 * P, M);
    hy_action *wq = malloc(2 * (size_t)M * sizeof *wq);
    if (!wq) return hy_fail(err, HY_ERR_RUNTIME, "out of memory building DualPipeV");
    for (int r = 0; r < P; r++) {
        dpv_state d = { s, r, { r, 2 * P - 1 - r }, { 0, 0 }, { 0, 0 }, wq, 0, 0 };
        s->n_actions[r] = 0;
        for (int i = 0; i < 2 * (P - 1 - r); i++) dpv_forward(&d, 0);
        for (int i = 0; i < r + 1; i++) {
            dpv_forward(&d, 0);
            dpv_forward(&d, 1);
        }
        for (int i = 0; i < P - 1 - r; i++) {
            dpv_backward(&d, 1, 1);
            dpv_weight(&d);
            dpv_forward(&d, 1);
        }
        for (int i = 0; i < M - 2 * P + r + 1; i++) {
            dpv_forward(&d, 0);
            dpv_backward(&d, 1, 0);
            dpv_forward(&d, 1);
            dpv_backward(&d, 0, 0);
        }
        for (int i = 0; i < P - 1 - r; i++) {
            dpv_backward(&d, 1, 0);
            dpv_forward(&d, 1);
            dpv_backward(&d, 0, 0);
        }
        int queue = 0, half = (r + 1) / 2;
        for (int i = 0; i < r + 1; i++) {
            if (i == half && r % 2 == 1) queue = 1;
            dpv_backward(&d, 1, queue);
            if (i == half && r % 2 == 0) queue = 1;
            dpv_backward(&d, 0, queue);
        }
        for (int i = 0; i < P - 1 - r; i++) {
            dpv_weight(&d);
            dpv_backward(&d, 0, 1);
        }
        while (d.whead < d.wtail) dpv_weight(&d);
        assert(d.f[0] == M && d.f[1] == M && d.b[0] == M && d.b[1] == M);
    }
    free(wq);
    return HY_OK;
}

/* V-Half and V-Min (Qi et al., "Pipeline Parallelism with Controllable
 * Memory", 2024): one building block repeated every 6 slots (f = B = W =
 * 1 a stage), rank i running F of chunk 0, F of chunk 1, B of chunk 1 and
 * B of chunk 0 of micro-batch m at o_k + 6m, with
 *   V-Min:  o = i, 2P-1-i, 2P+g+i, 4P+g-1-i        (g = 2 if 3 | P, else 0)
 *   V-Half: o = 2i, 3P-2-i, 3P+g+2i-1, 6P+g-2-i    (g = 3 if 2 | P, else 0)
 * and the W's in the free slots, oldest first (the rest at the end).
 * The offsets of a rank are distinct mod 6, so the slots never collide.
 * A shorter lifespan of each activation than ZB-V's is what halves (and
 * thirds) the memory; the order of each rank's slots is the list. */
static int build_vpattern(hy_schedule *s, int kind, hy_error *err) {
    int P = s->ranks, M = s->micro_batches;
    hy_action *wq = malloc(2 * (size_t)M * sizeof *wq);
    if (!wq) return hy_fail(err, HY_ERR_RUNTIME, "out of memory building a V order");
    for (int i = 0; i < P; i++) {
        static const int op[4] = { HY_FWD, HY_FWD, HY_BWD, HY_BWD }, chunk[4] = { 0, 1, 1, 0 };
        int stage[2] = { i, 2 * P - 1 - i }, o[4], g, whead = 0, wtail = 0;
        if (kind == HY_V_MIN) {
            g = P % 3 == 0 ? 2 : 0;
            o[0] = i, o[1] = 2 * P - 1 - i, o[2] = 2 * P + g + i, o[3] = 4 * P + g - 1 - i;
        } else {
            g = P % 2 == 0 ? 3 : 0;
            o[0] = 2 * i, o[1] = 3 * P - 2 - i, o[2] = 3 * P + g + 2 * i - 1,
            o[3] = 6 * P + g - 2 - i;
        }
        s->n_actions[i] = 0;
        long last = 0;
        for (int k = 0; k < 4; k++)
            if (o[k] + 6L * (M - 1) > last) last = o[k] + 6L * (M - 1);
        for (long t = 0; t <= last; t++) {
            int k = 0;
            while (k < 4 && !(t >= o[k] && (t - o[k]) % 6 == 0 && (t - o[k]) / 6 < M)) k++;
            if (k == 4) {
                if (whead < wtail) push(s, i, HY_WGRAD, wq[whead].mb, wq[whead].stage), whead++;
                continue;
            }
            int m = (int)((t - o[k]) / 6);
            push(s, i, op[k], m, stage[chunk[k]]);
            if (op[k] == HY_BWD) wq[wtail++] = (hy_action){ HY_WGRAD, m, stage[chunk[k]] };
        }
        for (; whead < wtail; whead++) push(s, i, HY_WGRAD, wq[whead].mb, wq[whead].stage);
    }
    free(wq);
    return HY_OK;
}

/* ------------------------------------------------------------------------ */

void hy_sched_order_default(const hy_sched_params *p, hy_sched_order *o) {
    memset(o, 0, sizeof *o);
    if (p->kind == HY_SCHED_HANAYO) {
        /* Unsplit: 2WP + r, as build_hanayo explains. Split: B costs
         * half a backward, so a rank's first B comes back sooner and a
         * flat 2WP suffices, the W's being held by the deferral. */
        o->cap_rises = !p->split_backward;
        o->zbv = p->split_backward && p->waves == 1;
    }
    o->defer_slope = 1;   /* ZB-H1's deferral, d = r */
}

int hy_schedule_build_order(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                            const hy_sched_order *o, hy_error *err) {
    hy_sched_scratch w = { NULL };
    int rc = hy_schedule_build_scratch(s, p, c, o, &w, err);
    hy_sched_scratch_free(&w);
    return rc;
}

int hy_schedule_build_scratch(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                              const hy_sched_order *o, hy_sched_scratch *w, hy_error *err) {
    memset(s, 0, sizeof *s);
    int rc = check_params(p, err);
    if (rc) return rc;
    rc = schedule_alloc(s, p, err);
    if (rc) return rc;
    hy_costs uniform = hy_costs_uniform_for(p->split_backward, 0);
    if (!c) c = &uniform;
    switch (p->kind) {
    case HY_SCHED_GPIPE: build_gpipe(s); break;
    case HY_SCHED_1F1B: build_1f1b(s); break;
    case HY_SCHED_INTERLEAVED: build_interleaved(s); break;
    case HY_SCHED_HANAYO:
        if (s->split && o->v_order && p->waves != 1)
            rc = hy_fail(err, HY_ERR_INPUT, "the published V orders are for one wave");
        else if (s->split && o->v_order == HY_V_DUALPIPE) rc = build_dualpipev(s, err);
        else if (s->split && o->v_order) rc = build_vpattern(s, o->v_order, err);
        else if (s->split && o->zbv) build_zbv(s);
        else rc = build_hanayo(s, c, o, w, err);
        break;
    default: break;
    }
    if (!rc && s->split &&
        !(p->kind == HY_SCHED_HANAYO && (o->zbv || o->v_order || o->w_in_merge)))
        rc = defer_wgrad(s, o, err);
    if (rc) hy_schedule_free(s);
    return rc;
}

int hy_schedule_empty(hy_schedule *s, const hy_sched_params *p, hy_error *err) {
    memset(s, 0, sizeof *s);
    int rc = check_params(p, err);
    return rc ? rc : schedule_alloc(s, p, err);
}

int hy_schedule_build(hy_schedule *s, const hy_sched_params *p, hy_error *err) {
    hy_sched_order o;
    hy_sched_order_default(p, &o);
    return hy_schedule_build_order(s, p, NULL, &o, err);
}

int hy_schedule_transfers(const hy_schedule *s) {
    int cross = 0;
    for (int stage = 0; stage + 1 < s->stages; stage++)
        if (s->placement[stage] != s->placement[stage + 1]) cross++;
    return 2 * cross * s->micro_batches;
}

void hy_schedule_grads_done(const hy_schedule *s, int rank, int *last) {
    int done = s->split ? HY_WGRAD : HY_BWD;
    for (int k = 0; k < s->stages; k++) last[k] = -1;
    for (int i = 0; i < s->n_actions[rank]; i++)
        if (s->actions[rank][i].op == done) last[s->actions[rank][i].stage] = i;
}

double hy_action_cost(const hy_costs *c, const hy_action *a) {
    return a->op == HY_FWD ? hy_costs_fwd(c, a->stage)
         : a->op == HY_BWD ? hy_costs_bwd(c, a->stage)
                           : hy_costs_wgrad(c, a->stage);
}

size_t hy_action_keys(const hy_schedule *s) {
    return (size_t)hy_sched_rank_actions(s->split, s->chunks, s->micro_batches) * (size_t)s->ranks;
}

int hy_schedule_deadlock(const hy_schedule *s, const int *next, const char *why, hy_error *err) {
    if (!err) return HY_ERR_INPUT;   /* nobody reads the message: leave it unwritten */
    char msg[768] = "", label[48];
    size_t used = 0;
    for (int r = 0; r < s->ranks && used + 64 < sizeof msg; r++) {
        if (next[r] >= s->n_actions[r]) continue;
        hy_action_label(&s->actions[r][next[r]], label, sizeof label);
        used += (size_t)snprintf(msg + used, sizeof msg - used, "%srank %d waits at %s",
                                 used ? "; " : "", r, label);
    }
    return hy_fail(err, HY_ERR_INPUT, "the schedule deadlocks %s: %s", why, msg);
}

/* Every action exactly once, each on the rank that holds its stage. */
static int check_complete(const hy_schedule *s, hy_error *err) {
    char *seen = calloc(hy_action_keys(s), 1);
    if (!seen) return hy_fail(err, HY_ERR_RUNTIME, "out of memory validating a schedule");
    int rc = HY_OK;
    char label[48];
    for (int r = 0; r < s->ranks && rc == HY_OK; r++) {
        for (int i = 0; i < s->n_actions[r]; i++) {
            const hy_action *a = &s->actions[r][i];
            hy_action_label(a, label, sizeof label);
            if (a->mb < 0 || a->mb >= s->micro_batches || a->stage < 0 || a->stage >= s->stages ||
                a->op < HY_FWD || a->op > (s->split ? HY_WGRAD : HY_BWD)) {
                rc = hy_fail(err, HY_ERR_INPUT, "rank %d action %d (%s) is out of range", r, i, label);
                break;
            }
            if (s->placement[a->stage] != r) {
                rc = hy_fail(err, HY_ERR_INPUT, "rank %d runs %s but stage %d lives on rank %d",
                             r, label, a->stage, s->placement[a->stage]);
                break;
            }
            char *mark = &seen[hy_action_key(s, a)];
            if (*mark) {
                rc = hy_fail(err, HY_ERR_INPUT, "rank %d runs %s twice", r, label);
                break;
            }
            *mark = 1;
        }
    }
    for (int m = 0; rc == HY_OK && m < s->micro_batches; m++)
        for (int si = 0; rc == HY_OK && si < s->stages; si++)
            for (int op = HY_FWD; rc == HY_OK && op <= (s->split ? HY_WGRAD : HY_BWD); op++) {
                hy_action a = { op, m, si };
                if (seen[hy_action_key(s, &a)]) continue;
                hy_action_label(&a, label, sizeof label);
                rc = hy_fail(err, HY_ERR_INPUT, "%s is missing from rank %d's list", label,
                             s->placement[si]);
            }
    free(seen);
    return rc;
}

/* Blocking execution in list order, without costs: each rank runs on
 * while the inputs of its next action have been made, until all are done
 * or no rank can move. */
static int check_runs(const hy_schedule *s, hy_error *err) {
    char *done = calloc(hy_action_keys(s), 1);
    int *next = calloc((size_t)s->ranks, sizeof *next);
    int rc = HY_OK, remaining = 0;
    if (!done || !next) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory validating a schedule");
    for (int r = 0; r < s->ranks; r++) remaining += s->n_actions[r];
    while (rc == HY_OK && remaining > 0) {
        int progressed = 0;
        for (int r = 0; r < s->ranks; r++) {
            while (next[r] < s->n_actions[r]) {
                const hy_action *a = &s->actions[r][next[r]];
                hy_action in[HY_MAX_INPUTS];
                int n = hy_action_inputs(s, a, in), ready = 1;
                for (int i = 0; i < n; i++) ready &= done[hy_action_key(s, &in[i])];
                if (!ready) break;
                done[hy_action_key(s, a)] = 1;
                next[r]++;
                remaining--;
                progressed = 1;
            }
        }
        if (!progressed) rc = hy_schedule_deadlock(s, next, "under blocking receives", err);
    }
    free(done);
    free(next);
    return rc;
}

int hy_schedule_validate(const hy_schedule *s, hy_error *err) {
    int rc = check_complete(s, err);
    return rc ? rc : check_runs(s, err);
}

int hy_schedule_equal(const hy_schedule *a, const hy_schedule *b) {
    if (a->ranks != b->ranks) return 0;
    for (int r = 0; r < a->ranks; r++)
        if (a->n_actions[r] != b->n_actions[r] ||
            memcmp(a->actions[r], b->actions[r], sizeof(hy_action) * (size_t)a->n_actions[r]))
            return 0;
    return 1;
}

void hy_schedule_in_flight(const hy_schedule *s, int *peak) {
    /* Each rank's list once: a stage lives on one rank, so its count only
     * ever changes along that rank's list, where it is the rank's local
     * chunk stage / P (hy_schedule_local_chunk). */
    enum { MOST_CHUNKS = 64 };   /* check_params: 2W <= 32, v <= 64 */
    int live[MOST_CHUNKS];
    assert(s->chunks <= MOST_CHUNKS);
    int frees = s->split ? HY_WGRAD : HY_BWD;
    for (int st = 0; st < s->stages; st++) peak[st] = 0;
    for (int r = 0; r < s->ranks; r++) {
        for (int k = 0; k < s->chunks; k++) live[k] = 0;
        for (int i = 0; i < s->n_actions[r]; i++) {
            const hy_action *a = &s->actions[r][i];
            int *n = &live[hy_schedule_local_chunk(s, a->stage)];
            *n += a->op == HY_FWD ? 1 : a->op == frees ? -1 : 0;
            assert(*n >= 0);   /* a valid list reads a stage's input after its F */
            if (*n > peak[a->stage]) peak[a->stage] = *n;
        }
    }
}
