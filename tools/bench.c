/*
 * bench.c — `make bench` (build/hanayo-bench): what the CPU backend does on
 * this machine, measured side by side in one run.
 *
 * Performance is never asserted in the test suite (a timed assertion is
 * either loose enough to be useless or flaky); it is measured here, and
 * every figure is printed next to the one it should be judged against:
 *
 *   1. Throughput. A tiny and a small GPT, every schedule at P = 2 (one
 *      rank thread per core): the median step's ms and tokens/s after two
 *      warm-up steps (the eager one and the recorded one), the schedules'
 *      steps taken round-robin so that they share the machine's moods;
 *      the ratio to 1F1B, the plan's uniform-cost bubble, the share of
 *      rank time measured waiting on flags, and GFLOP/s by the model's own
 *      FLOP count (model.h: the formula the partition balances by).
 *      `--model small-llama` runs the small model as a Llama instead.
 *   2. GEMMs. Every dense-layer shape of one step of the small model,
 *      forward and backward, through the backend's own entry points
 *      (hy_backend_ops.matmul_* / lm_head_*: argument packing, dispatch,
 *      bias) against bare cblas_sgemm calls doing the same products on one
 *      thread, each with the width the model gives it (a Llama's fused
 *      Q|K|V and gate|up). Goal: the backend at >= 0.9x bare. Then attention, whole op
 *      against its per-head GEMMs alone, which says how much of it is GEMM.
 *      Then, in a separate pass, each schedule's bubble measured by the
 *      profiler (profile.h) beside the simulator's prediction from the
 *      measured per-stage costs.
 *   3. Step-time breakdown, from the backend's op timing (backend.h,
 *      op_stats) over extra steps: per rank, the share of its time in
 *      GEMMs, attention, the other ops, copies, flag waits, and what no
 *      command accounts for (the host's batch loading and the hand-off).
 *   4. Activation recomputation: for the larger model, 1F1B and Hanayo
 *      W = 1 with split backward, each with train.recompute none,
 *      selective and full, timed round-robin like the schedules: ms per
 *      step and its ratio to none beside the stash the memory plan counts
 *      on the hungriest rank and what the backend allocated there (the
 *      memory saved against the time it costs), and the share of the
 *      step's rank time in LayerNorm and GELU (what selective redoes).
 *   5. Checkpoints. A save of the small model (every file's CRC-32C
 *      summed as it is written, everything fsync'd) and a verify (state.json
 *      and every file read back and summed), in MB/s; and CRC-32C's own
 *      speed beside memcpy's over the same 64 MiB.
 *
 * Data is synthesized into a temporary directory and removed at the end;
 * configs are built in code through hy_config_load's `sets`. Tables go to
 * stdout, with a header naming the machine and the date; `--json FILE`
 * writes the same numbers as JSON. Exit status: 0, 1 on a runtime failure,
 * 2 on bad flags.
 */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>
#include <jansson.h>

#include "atomicfile.h"
#include "backend.h"
#include "checkpoint.h"
#include "checksum.h"
#include "config.h"
#include "costs.h"
#include "data.h"
#include "memplan.h"
#include "model.h"
#include "error.h"
#include "order.h"
#include "plan.h"
#include "profile.h"
#include "rng.h"
#include "runtime.h"
#include "train.h"
#include "run.h"
#include "schedule.h"
#include "sim.h"
#include "sim.h"

/* The pipeline width of every throughput run: one rank per core of the
 * 2-core machines this runs on in CI. */
#define BENCH_RANKS 2
/* Warm-up steps: the first runs eagerly, the second is recorded; only
 * replays are timed, as in a real run. */
#define BENCH_WARMUP 2
/* Steps with op timing on, after the timed ones, for the breakdown. */
#define BENCH_STATS_STEPS 2
/* Measured steps of each schedule's profile (bubble_check). */
#define BENCH_PROFILE_STEPS 3
/* Tokens in each synthetic shard; batches wrap around, so this only needs
 * to hold one step (the small model reads M*B*T+1 = 2049). */
#define BENCH_SHARD_TOKENS (1 << 18)
/* The GEMM check: each timing round lasts at least this long, and the
 * reported time is the median of this many rounds per side. */
#define BENCH_ROUND_S 0.02
#define BENCH_ROUNDS 7

static const char usage[] =
    "usage: hanayo-bench [--steps N] [--model tiny|small|small-llama] [--json FILE]\n"
    "\n"
    "Measures the CPU backend on this machine, in one run: tokens/s of a tiny\n"
    "and a small GPT for each schedule at P = 2, the backend's GEMMs against\n"
    "bare cblas_sgemm on the same shapes, and where each rank's step time goes.\n"
    "\n"
    "  --steps N    timed steps per schedule (default: 20 tiny, 8 small)\n"
    "  --model M    only this model (the GEMM check and the breakdown then\n"
    "               use its shapes; default: tiny and small, those from\n"
    "               small; small-llama: small as a Llama, only when asked)\n"
    "  --json FILE  also write every number as JSON to FILE\n";

// ----------------------------------------------------------------------------
// What is measured

typedef struct {
    const char *name;
    int layers, d_model, heads, seq_len, vocab;
    int micro_batches, micro_batch_size;
    int steps;   /* timed steps by default */
    hy_model_kind kind;
    int kv_heads, ffn_dim;   /* Llama's; 0: the kind's default */
    int only_asked;          /* run only when --model names it */
} bench_model;

/* tiny: configs/tiny-gpt.json's sizes. small: big enough that GEMMs are
 * most of a step, small enough that the whole bench takes about a minute
 * and a half on two cores. More timed steps for tiny, whose steps are
 * short enough for a scheduler hiccup to show. llama: small's sizes as a
 * Llama (grouped-query attention over 2 key/value heads, SwiGLU of
 * 8/3 d_model rounded to 16, an untied head), on --model small-llama. */
static const bench_model BENCH_MODELS[] = {
    { "tiny", 4, 64, 4, 64, 512, 8, 4, 20, HY_MODEL_GPT, 0, 0, 0 },
    { "small", 8, 256, 8, 128, 4096, 8, 2, 8, HY_MODEL_GPT, 0, 0, 0 },
    { "small-llama", 8, 256, 8, 128, 4096, 8, 2, 8, HY_MODEL_LLAMA, 2, 688, 1 },
};
#define BENCH_N_MODELS ((int)(sizeof BENCH_MODELS / sizeof BENCH_MODELS[0]))

/* What the tables call a model after its name: "small GPT", "small-llama
 * model". */
static const char *kind_label(const bench_model *m) {
    return m->kind == HY_MODEL_GPT ? "GPT" : "model";
}

typedef struct {
    hy_sched_kind kind;
    int waves, chunks;
    int split;             /* split backward (B and W passes) */
    hy_recompute recompute;   /* train.recompute */
} bench_sched;

static const bench_sched BENCH_SCHEDS[] = {
    { HY_SCHED_GPIPE, 1, 1, 0, HY_RECOMPUTE_NONE },
    { HY_SCHED_1F1B, 1, 1, 0, HY_RECOMPUTE_NONE },
    { HY_SCHED_INTERLEAVED, 1, 2, 0, HY_RECOMPUTE_NONE },
    { HY_SCHED_HANAYO, 1, 2, 0, HY_RECOMPUTE_NONE },
    { HY_SCHED_HANAYO, 2, 2, 0, HY_RECOMPUTE_NONE },
    { HY_SCHED_1F1B, 1, 1, 1, HY_RECOMPUTE_NONE },
    { HY_SCHED_HANAYO, 1, 2, 1, HY_RECOMPUTE_NONE },
    { HY_SCHED_HANAYO, 2, 2, 1, HY_RECOMPUTE_NONE },
};
#define BENCH_N_SCHEDS ((int)(sizeof BENCH_SCHEDS / sizeof BENCH_SCHEDS[0]))

/* One schedule's run on one model. */
typedef struct {
    const bench_model *model;
    bench_sched sched;
    char label[32];        /* "hanayo W=2" */
    hy_run run;            /* resolved, while the run is open (zero: none) */
    hy_runtime *rt;
    int stages, steps;
    double *step_s;        /* [steps]: wall time of each timed step */
    double ms, tokens_per_s, vs_1f1b, plan_bubble;
    double gflops;         /* the model's training FLOPs at tokens_per_s (model_flops) */
    double spread;         /* interquartile range of the timed steps / median */
    double act_bytes;      /* the stash the memory plan counts, on its peak rank */
    double alloc_bytes;    /* what the backend allocated on that rank */
    /* the op-timing window */
    double stats_wall_s;   /* wall time of the BENCH_STATS_STEPS steps */
    hy_op_stat stats[BENCH_RANKS][HY_OPK_COUNT];
} bench_run;

/* One row of the GEMM check. */
typedef struct {
    const char *layer;     /* "qkv", "attn proj", ... */
    const char *dir;       /* "fwd" or "bwd" */
    int N, C, OC;
    double flops;          /* per call */
    double op_s, bare_s;   /* median seconds per call */
} bench_gemm;

typedef struct {
    char cpu[256];
    int nproc;
    char date[64];
    char blas[256];
    double load[2];   /* 1-minute load average at the start and at the end */
} bench_machine;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *sched_label(const bench_sched *s, char *buf, size_t len) {
    if (s->kind == HY_SCHED_HANAYO)
        snprintf(buf, len, "hanayo W=%d", s->waves);
    else if (s->kind == HY_SCHED_INTERLEAVED)
        snprintf(buf, len, "interleaved v=%d", s->chunks);
    else
        snprintf(buf, len, "%s", hy_sched_name(s->kind));
    if (s->split) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, " +split");
    }
    return buf;
}

static int sched_stages(const bench_sched *s) {
    switch (s->kind) {
    case HY_SCHED_INTERLEAVED: return s->chunks * BENCH_RANKS;
    case HY_SCHED_HANAYO: return 2 * s->waves * BENCH_RANKS;
    default: return BENCH_RANKS;
    }
}

// ----------------------------------------------------------------------------
// The machine

/* The 1-minute load average: other work on the machine during the run
 * shows in every figure, so the report says how busy the machine was. */
static double load_average(void) {
    double load = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1) load = -1;
        fclose(f);
    }
    return load;
}

static void machine_describe(bench_machine *m) {
    m->load[0] = load_average();
    snprintf(m->cpu, sizeof m->cpu, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) != 0) continue;
            const char *v = strchr(line, ':');
            if (!v) continue;
            v++;
            while (*v == ' ' || *v == '\t') v++;
            snprintf(m->cpu, sizeof m->cpu, "%.*s", (int)strcspn(v, "\n"), v);
            break;
        }
        fclose(f);
    }
    /* What nproc prints: the CPUs this process may run on. */
    cpu_set_t set;
    m->nproc = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                            : (int)sysconf(_SC_NPROCESSORS_ONLN);
    time_t t = time(NULL);
    struct tm tm;
    if (!localtime_r(&t, &tm) || !strftime(m->date, sizeof m->date, "%Y-%m-%d %H:%M %Z", &tm))
        snprintf(m->date, sizeof m->date, "unknown date");
    snprintf(m->blas, sizeof m->blas, "%s, core %s", openblas_get_config(),
             openblas_get_corename());
}

// ----------------------------------------------------------------------------
// Data: one synthetic shard per vocabulary, in a temporary directory

typedef struct {
    char dir[PATH_MAX / 2];   /* room left in path for the file name */
    char path[BENCH_N_MODELS][PATH_MAX];
    int made[BENCH_N_MODELS];
} bench_data;

static int data_make(bench_data *d, hy_error *err) {
    memset(d, 0, sizeof *d);
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    if (snprintf(d->dir, sizeof d->dir, "%s/hanayo-bench-XXXXXX", tmp) >= (int)sizeof d->dir) {
        d->dir[0] = 0;
        return hy_fail(err, HY_ERR_INPUT, "TMPDIR is too long (%zu bytes): set a shorter one",
                       strlen(tmp));
    }
    if (!mkdtemp(d->dir)) {
        int e = errno;
        d->dir[0] = 0;
        return hy_fail(err, HY_ERR_RUNTIME, "could not make a temporary directory in %s: %s "
                       "(set TMPDIR to a writable directory)", tmp, strerror(e));
    }
    uint16_t *tokens = malloc(sizeof *tokens * BENCH_SHARD_TOKENS);
    if (!tokens) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    int rc = HY_OK;
    for (int i = 0; i < BENCH_N_MODELS && !rc; i++) {
        const bench_model *m = &BENCH_MODELS[i];
        snprintf(d->path[i], sizeof d->path[i], "%s/%s.bin", d->dir, m->name);
        rc = hy_synth_tokens(tokens, BENCH_SHARD_TOKENS, m->vocab, 1234, 0, err);
        if (!rc) rc = hy_shard_write(d->path[i], tokens, BENCH_SHARD_TOKENS, err);
        if (!rc) d->made[i] = 1;
    }
    free(tokens);
    return rc;
}

static void data_remove(bench_data *d) {
    for (int i = 0; i < BENCH_N_MODELS; i++)
        if (d->made[i] && unlink(d->path[i]) != 0)
            fprintf(stderr, "hanayo-bench: could not remove %s: %s\n", d->path[i], strerror(errno));
    if (d->dir[0] && rmdir(d->dir) != 0)
        fprintf(stderr, "hanayo-bench: could not remove %s: %s\n", d->dir, strerror(errno));
}

// ----------------------------------------------------------------------------
// Throughput and op timing of one schedule

static int run_make(hy_run *run, const bench_model *m, const bench_sched *s,
                    const char *shard, hy_error *err) {
    char sets[24][PATH_MAX + 32];
    int n = 0;
    snprintf(sets[n++], sizeof sets[0], "model.kind=%s", hy_model_name(m->kind));
    if (m->kv_heads > 0) snprintf(sets[n++], sizeof sets[0], "model.kv_heads=%d", m->kv_heads);
    if (m->ffn_dim > 0) snprintf(sets[n++], sizeof sets[0], "model.ffn_dim=%d", m->ffn_dim);
    snprintf(sets[n++], sizeof sets[0], "model.layers=%d", m->layers);
    snprintf(sets[n++], sizeof sets[0], "model.d_model=%d", m->d_model);
    snprintf(sets[n++], sizeof sets[0], "model.heads=%d", m->heads);
    snprintf(sets[n++], sizeof sets[0], "model.seq_len=%d", m->seq_len);
    snprintf(sets[n++], sizeof sets[0], "model.vocab=%d", m->vocab);
    snprintf(sets[n++], sizeof sets[0], "schedule.kind=%s", hy_sched_name(s->kind));
    snprintf(sets[n++], sizeof sets[0], "schedule.ranks=%d", BENCH_RANKS);
    snprintf(sets[n++], sizeof sets[0], "schedule.waves=%d", s->waves);
    snprintf(sets[n++], sizeof sets[0], "schedule.chunks=%d", s->chunks);
    snprintf(sets[n++], sizeof sets[0], "schedule.split_backward=%s", s->split ? "true" : "false");
    snprintf(sets[n++], sizeof sets[0], "schedule.micro_batches=%d", m->micro_batches);
    snprintf(sets[n++], sizeof sets[0], "schedule.micro_batch_size=%d", m->micro_batch_size);
    snprintf(sets[n++], sizeof sets[0], "data.train=%s", shard);
    snprintf(sets[n++], sizeof sets[0], "data.val=null");
    snprintf(sets[n++], sizeof sets[0], "checkpoint.dir=null");
    snprintf(sets[n++], sizeof sets[0], "backend=cpu");
    snprintf(sets[n++], sizeof sets[0], "train.recompute=%s", hy_recompute_name(s->recompute));
    const char *ptrs[24];
    for (int i = 0; i < n; i++) ptrs[i] = sets[i];
    hy_config c;
    hy_config_init(&c);
    memset(run, 0, sizeof *run);
    int rc = hy_config_load(&c, NULL, ptrs, n, err);
    if (!rc) rc = hy_run_resolve(run, &c, err);
    hy_config_free(&c);
    return rc;
}

/* The simulated bubble of the run's schedule under the uniform costs it
 * was ordered for (f = 1, b = 2, c = its comm_cost). */
static int plan_bubble(const hy_run *run, double *bubble, hy_error *err) {
    hy_costs costs = hy_costs_uniform_for(run->sched.split, run->comm_cost);
    hy_sim_result res;
    int rc = hy_simulate(&run->sched, &costs, NULL, &res, err);
    if (!rc) {
        *bubble = res.bubble;
        hy_sim_result_free(&res);
    }
    return rc;
}

static int steps_run(bench_run *r, int n, hy_error *err) {
    for (int i = 0; i < n; i++) {
        hy_step_stats stats;
        int rc = hy_train_step(r->rt, &stats, err);
        if (rc) return rc;
    }
    return HY_OK;
}

/* The stash the memory plan counts on the run's peak rank, and what the
 * backend allocated there (the plan equals it on the CPU:
 * tests/test_memplan.c). */
static int run_memory(bench_run *r, hy_error *err) {
    hy_backend_memory mem;
    hy_backend_cpu_memory(&mem);
    hy_memplan_in in = { .model = &r->run.model, .sched = &r->run.sched,
                         .micro_batch_size = r->run.micro_batch_size, .replicas = 1,
                         .mem = &mem, .recompute = r->run.train.recompute };
    hy_memplan mp;
    int rc = hy_memplan_build(&mp, &in, err);
    if (rc) return rc;
    hy_backend *be = hy_runtime_backend(r->rt);
    r->act_bytes = mp.rank[mp.peak_rank].bytes[HY_MEM_ACTIVATIONS];
    r->alloc_bytes = be->ops->allocated ? (double)be->ops->allocated(be, mp.peak_rank) : -1;
    hy_memplan_free(&mp);
    return HY_OK;
}

/* Builds the run's config and runtime and takes the warm-up steps. */
static int run_open(bench_run *r, const char *shard, hy_error *err) {
    int rc = run_make(&r->run, r->model, &r->sched, shard, err);
    if (!rc) rc = plan_bubble(&r->run, &r->plan_bubble, err);
    r->stages = r->run.sched.stages;
    if (!rc) rc = hy_runtime_create(&r->rt, &r->run, err);
    if (!rc && !hy_runtime_backend(r->rt)->ops->op_stats)
        rc = hy_fail(err, HY_ERR_RUNTIME, "the %s backend has no op timing",
                     hy_runtime_backend(r->rt)->ops->name);
    if (!rc) rc = run_memory(r, err);
    if (!rc) rc = steps_run(r, BENCH_WARMUP, err);
    return rc;
}

/* One timed step, its wall time kept. */
static int run_timed_step(bench_run *r, int i, hy_error *err) {
    double t0 = now_s();
    int rc = steps_run(r, 1, err);
    r->step_s[i] = now_s() - t0;
    return rc;
}

/* The op-timing window: timing is on only here, so the timed steps ran the
 * default, untimed path. */
static int run_stats(bench_run *r, hy_error *err) {
    hy_backend *be = hy_runtime_backend(r->rt);
    int rc = be->ops->op_stats(be, 1, NULL, err);
    double t0 = now_s();
    if (!rc) rc = steps_run(r, BENCH_STATS_STEPS, err);
    r->stats_wall_s = now_s() - t0;
    if (!rc) rc = be->ops->op_stats(be, 0, &r->stats[0][0], err);
    return rc;
}

static void run_close(bench_run *r) {
    hy_runtime_destroy(r->rt);
    r->rt = NULL;
    hy_run_free(&r->run);
}

/* Training FLOPs per token of model m: its forward, blocks and head
 * (model.h, hy_model_flops_per_token, the count the partition balances
 * by), and a backward of HY_COSTS_BWD_PER_FWD forwards; recomputation
 * not counted (model FLOPs, as MFU counts them). */
static double model_flops(const hy_model *m) {
    return (1 + HY_COSTS_BWD_PER_FWD) * hy_model_flops_per_token(m);
}

/* Every schedule of one model, side by side: all runtimes are built
 * first, then the timed steps go round-robin (one step of each schedule,
 * then again), so load from elsewhere on the machine, or a change of clock
 * speed, falls on every schedule alike; ms/step is the median step. An
 * idle runtime's threads sleep on a condition variable and cost nothing. */
static int model_run(bench_run *runs, int n, const char *shard, hy_error *err) {
    int rc = HY_OK, failed = -1;
    for (int j = 0; j < n && !rc; j++)
        if ((rc = run_open(&runs[j], shard, err))) failed = j;
    for (int i = 0; i < runs[0].steps && !rc; i++)
        for (int j = 0; j < n && !rc; j++)
            if ((rc = run_timed_step(&runs[j], i, err))) failed = j;
    for (int j = 0; j < n && !rc; j++)
        if ((rc = run_stats(&runs[j], err))) failed = j;
    for (int j = 0; j < n && !rc; j++) {
        bench_run *r = &runs[j];
        qsort(r->step_s, (size_t)r->steps, sizeof r->step_s[0], cmp_double);
        const double *t = r->step_s;
        int h = r->steps / 2;
        double median = r->steps % 2 ? t[h] : 0.5 * (t[h - 1] + t[h]);
        const bench_model *m = r->model;
        r->ms = median * 1e3;
        r->spread = (t[(3 * r->steps) / 4] - t[r->steps / 4]) / median;
        r->tokens_per_s = (double)m->micro_batches * m->micro_batch_size * m->seq_len / median;
        r->gflops = r->tokens_per_s * model_flops(&r->run.model) * 1e-9;
    }
    if (rc) hy_error_prefix(err, "%s %s, %s: ", runs[failed].model->name,
                               kind_label(runs[failed].model), runs[failed].label);
    for (int j = 0; j < n; j++) run_close(&runs[j]);
    return rc;
}

// ----------------------------------------------------------------------------
// Measured against predicted bubble: `hanayo profile` of each schedule

/* For every schedule of the model: the bubble measured from the clock
 * stamps around every action, beside the simulator's prediction from the
 * measured per-stage costs and the uniform-cost ideal (profile.h defines
 * all three). Printed only: a separate pass after the timed steps, so the
 * stamps never touch the throughput figures. */
static int bubble_check(const bench_run *runs, int n, const char *shard, hy_error *err) {
    printf("  measured vs predicted bubble (hanayo profile: %d warm-up + %d measured steps each)\n",
           HY_PROFILE_WARMUP, BENCH_PROFILE_STEPS);
    printf("  %-18s %10s %10s %10s %12s %12s\n", "schedule", "measured", "predicted", "ideal",
           "makespan ms", "predicted ms");
    int rc = HY_OK;
    for (int i = 0; i < n && !rc; i++) {
        hy_run c;
        rc = run_make(&c, runs[i].model, &runs[i].sched, shard, err);
        hy_profile p;
        hy_profile_opts o;
        hy_profile_opts_init(&o);
        o.steps = BENCH_PROFILE_STEPS;
        if (!rc) rc = hy_profile_run(&p, &c, &o, err);
        if (!rc) {
            printf("  %-18s %9.1f%% %9.1f%% %9.1f%% %12.1f %12.1f\n", runs[i].label,
                   100 * p.bubble, 100 * p.pred_bubble, 100 * p.ideal_bubble, p.makespan,
                   p.pred_makespan);
            hy_profile_free(&p);
        } else {
            hy_error_prefix(err, "profile of %s: ", runs[i].label);
        }
        hy_run_free(&c);
    }
    return rc;
}

// ----------------------------------------------------------------------------
// The GEMM check: the backend's dense layers against bare cblas_sgemm

typedef enum { G_MM_FWD, G_MM_BWD, G_HEAD_FWD, G_HEAD_BWD, G_ATT_FWD, G_ATT_BWD } gemm_kind;

typedef struct {
    gemm_kind kind;
    int N, C, OC;              /* dense layers; for attention C = d_model, OC = heads */
    int B, T, NKV;             /* attention (NKV: key/value heads) */
    hy_backend *be;
    hy_stream *s;
    float *inp, *w, *bias, *out, *dout, *dinp, *dw, *dbias;   /* dense layers */
    float *qkv, *att, *atty, *dqkv, *datty, *scratch;          /* attention (att: the bare
                                                                  products' T x T per head) */
    float *lse;                                                /* attention's saved rows */
} gemm_case;

/* One call of the backend's op for the case (bare = 0), or the same
 * products as bare cblas_sgemm calls (bare = 1). */
static int gemm_call(const gemm_case *g, int bare, hy_error *err) {
    const hy_backend_ops *o = g->be->ops;
    int N = g->N, C = g->C, OC = g->OC;
    switch (g->kind) {
    case G_MM_FWD:
        if (!bare) return o->matmul_fwd(g->s, g->out, g->inp, g->w, g->bias, N, C, OC, err);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OC, C, 1.0f, g->inp, C, g->w,
                    OC, 0.0f, g->out, OC);
        return HY_OK;
    case G_MM_BWD:
        if (!bare)
            return o->matmul_bwd(g->s, g->dinp, g->dw, g->dbias, g->dout, g->inp, g->w, N, C, OC,
                                 err);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, C, OC, 1.0f, g->dout, OC, g->w,
                    OC, 1.0f, g->dinp, C);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C, OC, N, 1.0f, g->inp, C, g->dout,
                    OC, 1.0f, g->dw, OC);
        return HY_OK;
    case G_HEAD_FWD:   /* w is wte [V = OC, C] */
        if (!bare) return o->lm_head_fwd(g->s, g->out, g->inp, g->w, NULL, N, C, OC, err);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, g->inp, C, g->w, C,
                    0.0f, g->out, OC);
        return HY_OK;
    case G_HEAD_BWD:
        if (!bare)
            return o->lm_head_bwd(g->s, g->dinp, g->dw, NULL, g->dout, g->inp, g->w, N, C, OC, err);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, g->dout, OC, g->w,
                    C, 1.0f, g->dinp, C);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, g->dout, OC, g->inp,
                    C, 1.0f, g->dw, C);
        return HY_OK;
    case G_ATT_FWD:
    case G_ATT_BWD:
        break;
    }
    /* Attention: the per-head GEMMs of kernels/cpu/attention.c, without
     * the softmax and its backward, to see how much of the op is GEMM. */
    /* Rows of Q | K | V (model.h, hy_model_qkv_width); query head h
     * reads key/value head h / (NH / NKV). */
    int B = g->B, T = g->T, NH = g->OC, NKV = g->NKV, hd = C / NH, ld = (NH + 2 * NKV) * hd;
    float scale = 1.0f / sqrtf((float)hd);
    if (!bare) {
        if (g->kind == G_ATT_FWD)
            return o->attention_fwd(g->s, g->atty, g->lse, g->qkv, B, T, NH, NKV, hd, 1, err);
        return o->attention_bwd(g->s, g->dqkv, g->scratch, g->datty, g->qkv, g->atty, g->lse, B, T,
                                NH, NKV, hd, 1, err);
    }
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            int kvh = h / (NH / NKV);
            size_t row = (size_t)b * T * ld, qoff = row + (size_t)h * hd;
            size_t koff = row + (size_t)(NH + kvh) * hd, voff = row + (size_t)(NH + NKV + kvh) * hd;
            const float *q = g->qkv + qoff, *k = g->qkv + koff, *v = g->qkv + voff;
            float *a = g->att + ((size_t)b * NH + h) * T * T;
            size_t ooff = (size_t)b * T * C + (size_t)h * hd;
            if (g->kind == G_ATT_FWD) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, q, ld, k,
                            ld, 0.0f, a, T);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, a, T, v,
                            ld, 0.0f, g->atty + ooff, C);
            } else {
                float *dq = g->dqkv + qoff, *dk = g->dqkv + koff, *dv = g->dqkv + voff;
                const float *dy = g->datty + ooff;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, a, T, dy, C,
                            1.0f, dv, ld);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, dy, C, v, ld,
                            0.0f, g->scratch, T);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, scale,
                            g->scratch, T, k, ld, 1.0f, dq, ld);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, scale,
                            g->scratch, T, q, ld, 1.0f, dk, ld);
            }
        }
    }
    return HY_OK;
}

static int gemm_alloc(gemm_case *g, float **p, size_t n, hy_rng *rng, hy_error *err) {
    int rc = g->be->ops->alloc(g->be, 0, n * sizeof(float), (void **)p, err);
    /* Small values: the backward accumulates over hundreds of calls and
     * must stay far from overflow. */
    if (!rc && rng)
        for (size_t i = 0; i < n; i++) (*p)[i] = (float)(hy_rng_uniform(rng) - 0.5) * 0.02f;
    return rc;
}

static int gemm_case_alloc(gemm_case *g, hy_error *err) {
    hy_rng rng = hy_rng_stream(42, (uint64_t)g->kind);
    size_t N = (size_t)g->N, C = (size_t)g->C, OC = (size_t)g->OC;
    int rc = HY_OK;
    if (g->kind == G_ATT_FWD || g->kind == G_ATT_BWD) {
        size_t T = (size_t)g->T, att = (size_t)g->B * OC * T * T;
        size_t qkv = N * (OC + 2 * (size_t)g->NKV) * (C / OC);
        rc = gemm_alloc(g, &g->qkv, qkv, &rng, err);
        if (!rc) rc = gemm_alloc(g, &g->att, att, NULL, err);
        if (!rc) rc = gemm_alloc(g, &g->atty, N * C, NULL, err);
        if (!rc) rc = gemm_alloc(g, &g->dqkv, qkv, NULL, err);
        if (!rc) rc = gemm_alloc(g, &g->datty, N * C, &rng, err);
        if (!rc) rc = gemm_alloc(g, &g->lse, (size_t)g->B * OC * T, NULL, err);
        if (!rc) rc = gemm_alloc(g, &g->scratch, 2 * T * T, NULL, err);
        /* A real output and its log-sum-exps for the backward to read. */
        if (!rc) rc = g->be->ops->attention_fwd(g->s, g->atty, g->lse, g->qkv, g->B, g->T, g->OC,
                                                g->NKV, g->C / g->OC, 1, err);
        return rc;
    }
    rc = gemm_alloc(g, &g->inp, N * C, &rng, err);
    if (!rc) rc = gemm_alloc(g, &g->w, C * OC, &rng, err);
    if (!rc) rc = gemm_alloc(g, &g->bias, OC, &rng, err);
    if (!rc) rc = gemm_alloc(g, &g->out, N * OC, NULL, err);
    if (!rc) rc = gemm_alloc(g, &g->dout, N * OC, &rng, err);
    if (!rc) rc = gemm_alloc(g, &g->dinp, N * C, NULL, err);
    if (!rc) rc = gemm_alloc(g, &g->dw, C * OC, NULL, err);
    if (!rc) rc = gemm_alloc(g, &g->dbias, OC, NULL, err);
    return rc;
}

static void gemm_case_free(gemm_case *g) {
    float **all[] = { &g->inp, &g->w, &g->bias, &g->out, &g->dout, &g->dinp, &g->dw, &g->dbias,
                      &g->qkv, &g->att, &g->atty, &g->dqkv, &g->datty, &g->scratch,
                      &g->lse };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        g->be->ops->free_mem(g->be, *all[i]);
        *all[i] = NULL;
    }
}

/* Seconds per call of `reps` calls. */
static int gemm_round(const gemm_case *g, int bare, int reps, double *per_call, hy_error *err) {
    double t0 = now_s();
    for (int i = 0; i < reps; i++) {
        int rc = gemm_call(g, bare, err);
        if (rc) return rc;
    }
    *per_call = (now_s() - t0) / reps;
    return HY_OK;
}

/* Median seconds per call of the op and of the bare GEMMs. The two sides
 * alternate round by round, so a change of clock speed or a neighbour's
 * load during the check falls on both. */
static int gemm_measure(const gemm_case *g, double *op_s, double *bare_s, hy_error *err) {
    double t = 0;
    int rc = gemm_round(g, 0, 1, &t, err);   /* warm: pages touched, caches filled */
    if (!rc) rc = gemm_round(g, 1, 1, &t, err);
    if (!rc) rc = gemm_round(g, 0, 3, &t, err);
    if (rc) return rc;
    int reps = t > 0 ? (int)(BENCH_ROUND_S / t) + 1 : 1000;
    if (reps > 100000) reps = 100000;
    double ops[BENCH_ROUNDS], bares[BENCH_ROUNDS];
    for (int i = 0; i < BENCH_ROUNDS && !rc; i++) {
        rc = gemm_round(g, 0, reps, &ops[i], err);
        if (!rc) rc = gemm_round(g, 1, reps, &bares[i], err);
    }
    if (rc) return rc;
    qsort(ops, BENCH_ROUNDS, sizeof ops[0], cmp_double);
    qsort(bares, BENCH_ROUNDS, sizeof bares[0], cmp_double);
    *op_s = ops[BENCH_ROUNDS / 2];
    *bare_s = bares[BENCH_ROUNDS / 2];
    return HY_OK;
}

#define BENCH_N_GEMMS 12   /* 5 dense layers and attention, forward and backward */

/* The GEMM shapes of one step of model m, measured: each product of a
 * block with its weights, the head's, and attention, with the widths the
 * model has (model.h: a Llama's fused Q|K|V of grouped-query attention
 * and gate|up). A dense product's FLOPs are its 2 N C OC (twice that
 * backward: two products of its size); attention's are the model's own
 * count (hy_model_block_flops beyond hy_model_block_weight_flops), a
 * backward HY_COSTS_BWD_PER_FWD of them. */
static int gemm_check(const bench_model *m, bench_gemm rows[BENCH_N_GEMMS], hy_error *err) {
    hy_run run;
    int rc = run_make(&run, m, &BENCH_SCHEDS[0], "unread.bin", err);
    if (rc) {
        hy_run_free(&run);
        return rc;
    }
    const hy_model *md = &run.model;
    int N = m->micro_batch_size * m->seq_len, d = md->d_model, H = md->heads * md->head_dim;
    const struct { const char *layer; gemm_kind fwd; int C, OC; } layers[] = {
        { "qkv", G_MM_FWD, d, hy_model_qkv_width(md) },
        { "attn proj", G_MM_FWD, H, d },
        { "mlp fc", G_MM_FWD, d, hy_model_fc_width(md) },
        { "mlp proj", G_MM_FWD, md->ffn_dim, d },
        { "lm head", G_HEAD_FWD, d, md->vocab_padded },
        { "attention", G_ATT_FWD, d, md->heads },
    };
    /* The four block products are the block's weight FLOPs, as the model
     * counts them. */
    double block = 0;
    for (int i = 0; i < 4; i++) block += 2.0 * layers[i].C * layers[i].OC;
    assert(block == hy_model_block_weight_flops(md));
    double attention = hy_model_block_flops(md) - hy_model_block_weight_flops(md);
    hy_backend *be = NULL;
    hy_stream *s = NULL;
    /* The backend sets OpenBLAS to one thread, so both sides run on one. */
    rc = hy_backend_cpu_create(&be, 1, 60.0, err);
    if (!rc) rc = be->ops->stream_create(be, 0, &s, err);
    int n = 0;
    for (size_t i = 0; i < sizeof layers / sizeof layers[0] && !rc; i++) {
        for (int dir = 0; dir < 2 && !rc; dir++) {
            gemm_case g = { .kind = (gemm_kind)(layers[i].fwd + dir), .N = N, .C = layers[i].C,
                            .OC = layers[i].OC, .B = m->micro_batch_size, .T = m->seq_len,
                            .NKV = md->kv_heads, .be = be, .s = s };
            bench_gemm *r = &rows[n++];
            r->layer = layers[i].layer;
            r->dir = dir ? "bwd" : "fwd";
            r->N = N;
            r->C = layers[i].C;
            r->OC = layers[i].OC;
            if (layers[i].fwd == G_ATT_FWD)
                r->flops = N * attention * (dir ? HY_COSTS_BWD_PER_FWD : 1);
            else
                r->flops = 2.0 * N * r->C * r->OC * (dir ? HY_COSTS_BWD_PER_FWD : 1);
            rc = gemm_case_alloc(&g, err);
            if (!rc) rc = gemm_measure(&g, &r->op_s, &r->bare_s, err);
            gemm_case_free(&g);
        }
    }
    if (s) be->ops->stream_destroy(s);
    if (be) be->ops->destroy(be);
    hy_run_free(&run);
    if (rc) hy_error_prefix(err, "GEMM check: ");
    return rc;
}

// ----------------------------------------------------------------------------
// Printing

static void print_header(const bench_machine *mc) {
    printf("hanayo bench — %s\n", mc->date);
    printf("machine: %s, nproc %d; %s\n", mc->cpu, mc->nproc, mc->blas);
    printf("P = %d ranks, one thread each (not pinned); %d warm-up steps, then the schedules'\n"
           "timed steps round-robin; the median step is reported (spread: interquartile\n"
           "range / median)\n",
           BENCH_RANKS, BENCH_WARMUP);
    printf("load average at the start: %.2f%s\n", mc->load[0],
           mc->load[0] > 0.5 ? " (the machine is busy: expect noisy, low figures)" : "");
}

static double wait_share(const bench_run *r) {
    double w = 0;
    for (int k = 0; k < BENCH_RANKS; k++) w += r->stats[k][HY_OPK_WAIT].seconds;
    return r->stats_wall_s > 0 ? w / (BENCH_RANKS * r->stats_wall_s) : 0;
}

static void print_throughput(const bench_run *runs, int n) {
    const bench_model *m = runs[0].model;
    printf("\n%s %s: %d layers, d %d, %d heads, T %d, V %d; M %d x B %d = %d tokens/step\n",
           m->name, kind_label(m), m->layers, m->d_model, m->heads, m->seq_len, m->vocab, m->micro_batches,
           m->micro_batch_size, m->micro_batches * m->micro_batch_size * m->seq_len);
    printf("  %-18s %6s %6s %10s %7s %10s %8s %8s %12s %12s\n", "schedule", "stages", "steps",
           "ms/step", "spread", "tokens/s", "GFLOP/s", "vs 1f1b", "plan bubble", "wait (meas)");
    for (int i = 0; i < n; i++) {
        const bench_run *r = &runs[i];
        printf("  %-18s %6d %6d %10.1f %6.0f%% %10.0f %8.1f %7.2fx %11.1f%% %11.1f%%\n",
               r->label, r->stages, r->steps, r->ms, 100 * r->spread, r->tokens_per_s, r->gflops,
               r->vs_1f1b, 100 * r->plan_bubble, 100 * wait_share(r));
    }
}

/* The recompute runs (recompute_runs): per schedule, each mode beside
 * none. */
static void print_recompute(const bench_run *runs, int n) {
    const bench_model *m = runs[0].model;
    printf("\nactivation recomputation, %s %s (train.recompute; the stash and allocation of "
           "the peak rank,\nthe plan's stash = the backend's count on the CPU; layernorm+gelu: "
           "their share of rank time)\n", m->name, kind_label(m));
    printf("  %-18s %-10s %10s %8s %12s %8s %14s %16s\n", "schedule", "recompute", "ms/step",
           "vs none", "stash MiB", "vs none", "allocated MiB", "layernorm+gelu");
    const bench_run *none = NULL;
    for (int i = 0; i < n; i++) {
        const bench_run *r = &runs[i];
        if (r->sched.recompute == HY_RECOMPUTE_NONE) none = r;
        double ln = 0, busy = 0;
        for (int k = 0; k < BENCH_RANKS; k++) {
            ln += r->stats[k][HY_OPK_LAYERNORM].seconds + r->stats[k][HY_OPK_GELU].seconds;
            for (int op = 0; op < HY_OPK_COUNT; op++)
                if (op != HY_OPK_WAIT) busy += r->stats[k][op].seconds;
        }
        printf("  %-18s %-10s %10.1f %7.2fx %12.2f %7.2fx %14.2f %15.1f%%\n", r->label,
               hy_recompute_name(r->sched.recompute), r->ms, none ? r->ms / none->ms : 0,
               r->act_bytes / 1048576.0, none ? r->act_bytes / none->act_bytes : 0,
               r->alloc_bytes / 1048576.0, busy > 0 ? 100 * ln / busy : 0);
    }
}

static void print_gemms(const bench_model *m, const bench_gemm *rows, int n) {
    printf("\nGEMMs of one %s %s step (N = B*T = %d), one thread: the backend's op vs bare "
           "cblas_sgemm\n", m->name, kind_label(m), rows[0].N);
    printf("  %-14s %3s %17s %9s %9s %8s\n", "layer", "", "N x C x OC", "op GF/s",
           "bare GF/s", "op/bare");
    for (int i = 0; i < n; i++) {
        const bench_gemm *r = &rows[i];
        if (strcmp(r->layer, "attention") == 0) continue;
        char shape[48];
        snprintf(shape, sizeof shape, "%dx%dx%d", r->N, r->C, r->OC);
        printf("  %-14s %3s %17s %9.1f %9.1f %7.2fx\n", r->layer, r->dir, shape,
               r->flops / r->op_s * 1e-9, r->flops / r->bare_s * 1e-9, r->bare_s / r->op_s);
    }
    printf("  attention: the whole op vs its per-head GEMMs alone (B %d, %d heads, T %d, hd %d)\n",
           m->micro_batch_size, m->heads, m->seq_len, m->d_model / m->heads);
    printf("  %-14s %3s %17s %9s %9s %8s\n", "", "", "ms per call", "op GF/s", "GEMM GF/s",
           "GEMM share");
    for (int i = 0; i < n; i++) {
        const bench_gemm *r = &rows[i];
        if (strcmp(r->layer, "attention") != 0) continue;
        char ms[48];
        snprintf(ms, sizeof ms, "%.2f vs %.2f", r->op_s * 1e3, r->bare_s * 1e3);
        printf("  %-14s %3s %17s %9.1f %9.1f %9.0f%%\n", r->layer, r->dir, ms,
               r->flops / r->op_s * 1e-9, r->flops / r->bare_s * 1e-9,
               100 * r->bare_s / r->op_s);
    }
}

/* Sums of a rank's op seconds by group. */
typedef struct { double gemm, attention, other, copy, wait, total; } bench_groups;

static bench_groups groups_of(const hy_op_stat *row) {
    bench_groups g = { 0 };
    for (int k = 0; k < HY_OPK_COUNT; k++) {
        double s = row[k].seconds;
        g.total += s;
        switch (k) {
        case HY_OPK_MATMUL_FWD: case HY_OPK_MATMUL_BWD:
        case HY_OPK_LM_HEAD_FWD: case HY_OPK_LM_HEAD_BWD: g.gemm += s; break;
        case HY_OPK_ATTENTION_FWD: case HY_OPK_ATTENTION_BWD: g.attention += s; break;
        case HY_OPK_COPY: g.copy += s; break;
        case HY_OPK_WAIT: g.wait += s; break;
        default: g.other += s; break;
        }
    }
    return g;
}

static void print_breakdown(const bench_run *runs, int n) {
    const bench_model *m = runs[0].model;
    printf("\nwhere each rank's step time goes, %s %s (%d steps with op timing on; %% of the "
           "rank's wall time)\n", m->name, kind_label(m), BENCH_STATS_STEPS);
    printf("  %-18s %4s %9s %7s %9s %9s %6s %6s %9s\n", "schedule", "rank", "ms/step", "GEMM",
           "attention", "other ops", "copy", "wait", "untracked");
    for (int i = 0; i < n; i++) {
        const bench_run *r = &runs[i];
        double wall = r->stats_wall_s;
        for (int k = 0; k < BENCH_RANKS; k++) {
            bench_groups g = groups_of(r->stats[k]);
            printf("  %-18s %4d %9.1f %6.1f%% %8.1f%% %8.1f%% %5.1f%% %5.1f%% %8.1f%%\n",
                   k ? "" : r->label, k, wall * 1e3 / BENCH_STATS_STEPS, 100 * g.gemm / wall,
                   100 * g.attention / wall, 100 * g.other / wall, 100 * g.copy / wall,
                   100 * g.wait / wall, 100 * (wall - g.total) / wall);
        }
    }
}

/* Every op kind of one run: calls and ms per step on each rank. */
static void print_ops(const bench_run *r) {
    printf("\nper op, %s %s, %s (per step)\n", r->model->name, kind_label(r->model), r->label);
    printf("  %-14s", "op");
    for (int k = 0; k < BENCH_RANKS; k++) printf("  %8s %9s %6s", "calls", "ms", "%");
    printf("\n  %-14s", "");
    for (int k = 0; k < BENCH_RANKS; k++) printf("  %25s", k == 0 ? "rank 0" : "rank 1");
    printf("\n");
    double wall = r->stats_wall_s;
    for (int op = 0; op < HY_OPK_COUNT; op++) {
        printf("  %-14s", hy_op_kind_name(op));
        for (int k = 0; k < BENCH_RANKS; k++) {
            const hy_op_stat *st = &r->stats[k][op];
            printf("  %8.0f %9.2f %5.1f%%", (double)st->calls / BENCH_STATS_STEPS,
                   st->seconds * 1e3 / BENCH_STATS_STEPS, 100 * st->seconds / wall);
        }
        printf("\n");
    }
}

// ----------------------------------------------------------------------------
// JSON

static json_t *json_machine(const bench_machine *mc) {
    return json_pack("{s:s, s:i, s:s, s:s, s:i, s:i, s:f, s:f}", "cpu", mc->cpu, "nproc",
                     mc->nproc, "date", mc->date, "blas", mc->blas, "ranks", BENCH_RANKS,
                     "warmup_steps", BENCH_WARMUP, "load_start", mc->load[0], "load_end",
                     mc->load[1]);
}

static json_t *json_run(const bench_run *r) {
    json_t *ranks = json_array();
    for (int k = 0; k < BENCH_RANKS && ranks; k++) {
        json_t *ops = json_object();
        for (int op = 0; op < HY_OPK_COUNT && ops; op++)
            json_object_set_new(ops, hy_op_kind_name(op),
                                json_pack("{s:f, s:f}", "calls_per_step",
                                          (double)r->stats[k][op].calls / BENCH_STATS_STEPS,
                                          "ms_per_step",
                                          r->stats[k][op].seconds * 1e3 / BENCH_STATS_STEPS));
        json_array_append_new(ranks, ops);
    }
    return json_pack("{s:s, s:s, s:s, s:f, s:f, s:s, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, "
                     "s:f, s:f, s:f, s:f, s:f, s:o}",
                     "model", r->model->name, "schedule", hy_sched_name(r->sched.kind),
                     "recompute", hy_recompute_name(r->sched.recompute), "act_bytes",
                     r->act_bytes, "alloc_bytes", r->alloc_bytes, "label",
                     r->label, "waves", r->sched.kind == HY_SCHED_HANAYO ? r->sched.waves : 0,
                     "chunks", r->sched.kind == HY_SCHED_INTERLEAVED ? r->sched.chunks : 0,
                     "ranks", BENCH_RANKS, "stages", r->stages, "steps", r->steps, "ms_per_step",
                     r->ms, "spread", r->spread, "tokens_per_s", r->tokens_per_s, "gflops", r->gflops, "vs_1f1b",
                     r->vs_1f1b, "plan_bubble", r->plan_bubble, "wait_share", wait_share(r),
                     "stats_ms_per_step", r->stats_wall_s * 1e3 / BENCH_STATS_STEPS,
                     "ops_per_rank", ranks);
}

static json_t *json_gemm(const bench_gemm *g) {
    return json_pack("{s:s, s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:f}", "layer", g->layer,
                     "dir", g->dir, "N", g->N, "C", g->C, "OC", g->OC, "flops", g->flops,
                     "op_gflops", g->flops / g->op_s * 1e-9, "bare_gflops",
                     g->flops / g->bare_s * 1e-9, "op_over_bare", g->bare_s / g->op_s);
}

// ----------------------------------------------------------------------------
// Checkpoints: what the checksums cost

typedef struct {
    double mib;                  /* the checkpoint on disk */
    double save_ms, verify_ms;   /* medians */
    double crc_gbs, copy_gbs;    /* best of BENCH_ROUNDS over BENCH_CRC_BYTES */
    int done;
} bench_ckpt;

#define BENCH_CKPT_REPS 3
#define BENCH_CRC_BYTES ((size_t)64 << 20)

static double median3(double *t) {
    qsort(t, BENCH_CKPT_REPS, sizeof t[0], cmp_double);
    return t[BENCH_CKPT_REPS / 2];
}

/* CRC-32C and memcpy over the same buffer, each the best of a few rounds. */
static int crc_speed(bench_ckpt *out, hy_error *err) {
    unsigned char *a = malloc(BENCH_CRC_BYTES), *b = malloc(BENCH_CRC_BYTES);
    if (!a || !b) {
        free(a);
        free(b);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    }
    for (size_t i = 0; i < BENCH_CRC_BYTES; i++) a[i] = (unsigned char)(i * 2654435761u >> 24);
    double crc_s = 1e30, copy_s = 1e30;
    volatile uint32_t sink = 0;
    for (int r = 0; r < BENCH_ROUNDS; r++) {
        double t0 = now_s();
        sink ^= hy_crc32c(0, a, BENCH_CRC_BYTES);
        double t1 = now_s();
        memcpy(b, a, BENCH_CRC_BYTES);
        sink ^= b[r];
        double t2 = now_s();
        if (t1 - t0 < crc_s) crc_s = t1 - t0;
        if (t2 - t1 < copy_s) copy_s = t2 - t1;
    }
    (void)sink;
    out->crc_gbs = (double)BENCH_CRC_BYTES / crc_s * 1e-9;
    out->copy_gbs = (double)BENCH_CRC_BYTES / copy_s * 1e-9;
    free(a);
    free(b);
    return HY_OK;
}

/* Saves the model's checkpoint (1F1B, after one step) into dir/ck a few
 * times, verifies it as often, and removes it. */
static int ckpt_check(const bench_model *m, const char *shard, const char *dir, bench_ckpt *out,
                      hy_error *err) {
    memset(out, 0, sizeof *out);
    bench_run r;
    memset(&r, 0, sizeof r);
    r.model = m;
    r.sched = (bench_sched){ HY_SCHED_1F1B, 1, 1, 0, HY_RECOMPUTE_NONE };
    char ckdir[PATH_MAX], saved[PATH_MAX] = "";
    snprintf(ckdir, sizeof ckdir, "%.*s/ck", PATH_MAX - 8, dir);
    int rc = run_make(&r.run, m, &r.sched, shard, err);
    if (!rc) rc = hy_runtime_create(&r.rt, &r.run, err);
    if (!rc) rc = steps_run(&r, 1, err);
    double save[BENCH_CKPT_REPS], verify[BENCH_CKPT_REPS];
    for (int i = 0; i < BENCH_CKPT_REPS && !rc; i++) {
        double t0 = now_s();
        rc = hy_checkpoint_save(r.rt, ckdir, saved, err);
        save[i] = now_s() - t0;
    }
    int unverified = 0;
    for (int i = 0; i < BENCH_CKPT_REPS && !rc; i++) {
        double t0 = now_s();
        rc = hy_checkpoint_verify(saved, &unverified, err);
        verify[i] = now_s() - t0;
    }
    hy_checkpoint_info *info = NULL;
    int n = 0;
    if (!rc) rc = hy_checkpoint_find(saved, &info, &n, err);
    if (!rc && n == 1) out->mib = (double)info[0].bytes / (1 << 20);
    free(info);
    if (*saved) {
        hy_error e;
        if (hy_atomic_dir_remove(saved, &e) != HY_OK || rmdir(ckdir) != 0)
            fprintf(stderr, "hanayo-bench: could not remove %s\n", ckdir);
    }
    run_close(&r);
    if (!rc) {
        out->save_ms = median3(save) * 1e3;
        out->verify_ms = median3(verify) * 1e3;
        rc = crc_speed(out, err);
    }
    out->done = !rc;
    if (rc) hy_error_prefix(err, "checkpoint of the %s %s: ", m->name, kind_label(m));
    return rc;
}

static void print_ckpt(const bench_model *m, const bench_ckpt *k) {
    printf("\ncheckpoint of the %s %s (%.1f MiB: weights, AdamW moments, config, state)\n",
           m->name, kind_label(m), k->mib);
    printf("  save    %8.1f ms  %7.0f MB/s  every file's CRC-32C summed as it is written, "
           "all fsync'd\n", k->save_ms, k->mib * 1.048576 / (k->save_ms * 1e-3));
    printf("  verify  %8.1f ms  %7.0f MB/s  state.json and every file read back and summed "
           "(page cache)\n", k->verify_ms, k->mib * 1.048576 / (k->verify_ms * 1e-3));
    printf("  CRC-32C %6.2f GB/s against memcpy %.2f GB/s over 64 MiB: %.2fx\n", k->crc_gbs,
           k->copy_gbs, k->crc_gbs / k->copy_gbs);
}

static json_t *json_ckpt(const bench_ckpt *k) {
    return json_pack("{s:f, s:f, s:f, s:f, s:f}", "mib", k->mib, "save_ms", k->save_ms,
                     "verify_ms", k->verify_ms, "crc32c_gbs", k->crc_gbs, "memcpy_gbs",
                     k->copy_gbs);
}

static int json_write(const char *path, const bench_machine *mc, bench_run *runs, int n_runs,
                      const bench_run *recompute, int n_recompute, const bench_gemm *gemms,
                      int n_gemms, const bench_ckpt *ck, hy_error *err) {
    json_t *root = json_object(), *jr = json_array(), *jg = json_array(), *jc = json_array();
    json_t *jm = json_machine(mc);
    int bad = !root || !jr || !jg || !jm || !jc;
    for (int i = 0; i < n_recompute && !bad; i++)
        bad = json_array_append_new(jc, json_run(&recompute[i])) != 0;
    if (!bad) bad = json_object_set_new(root, "recompute", jc) != 0;
    else json_decref(jc);
    if (!bad && ck->done) bad = json_object_set_new(root, "checkpoint", json_ckpt(ck)) != 0;
    for (int i = 0; i < n_runs && !bad; i++)
        bad = json_array_append_new(jr, json_run(&runs[i])) != 0;
    for (int i = 0; i < n_gemms && !bad; i++)
        bad = json_array_append_new(jg, json_gemm(&gemms[i])) != 0;
    if (!bad) bad = json_object_set(root, "machine", jm) || json_object_set(root, "runs", jr) ||
                    json_object_set(root, "gemms", jg);
    int rc = HY_OK;
    if (bad)
        rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory building the JSON");
    else if (json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0)
        rc = hy_fail(err, HY_ERR_RUNTIME, "%s: could not write the JSON (check the directory "
                     "exists and is writable)", path);
    json_decref(jm);
    json_decref(jr);
    json_decref(jg);
    json_decref(root);
    return rc;
}

// ----------------------------------------------------------------------------
// Activation recomputation

static const bench_sched BENCH_RECOMPUTE_SCHEDS[] = {
    { HY_SCHED_1F1B, 1, 1, 0, HY_RECOMPUTE_NONE },
    { HY_SCHED_HANAYO, 1, 2, 1, HY_RECOMPUTE_NONE },
};
#define BENCH_N_RECOMPUTE (2 * HY_RECOMPUTE_COUNT)

/* Each of BENCH_RECOMPUTE_SCHEDS with every train.recompute, on model m,
 * into runs[BENCH_N_RECOMPUTE], timed round-robin as the schedules are. */
static int recompute_runs(const bench_model *m, int steps, const char *shard, bench_run *runs,
                          hy_error *err) {
    int n = 0, rc = HY_OK;
    for (int j = 0; j < 2; j++)
        for (int k = 0; k < HY_RECOMPUTE_COUNT && !rc; k++) {
            bench_run *r = &runs[n++];
            memset(r, 0, sizeof *r);
            r->model = m;
            r->sched = BENCH_RECOMPUTE_SCHEDS[j];
            r->sched.recompute = (hy_recompute)k;
            r->steps = steps ? steps : m->steps;
            sched_label(&r->sched, r->label, sizeof r->label);
            r->step_s = calloc((size_t)r->steps, sizeof *r->step_s);
            if (!r->step_s) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        }
    assert(n == BENCH_N_RECOMPUTE);
    if (!rc) rc = model_run(runs, n, shard, err);
    return rc;
}

// ----------------------------------------------------------------------------
// main

typedef struct {
    int steps;           /* 0: each model's default */
    const char *json;    /* or NULL */
    int only;            /* index into BENCH_MODELS, or -1 for all */
} bench_args;

static int parse_args(int argc, char **argv, bench_args *a, hy_error *err) {
    a->steps = 0;
    a->json = NULL;
    a->only = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            exit(0);
        }
        if (i + 1 >= argc)
            return hy_fail(err, HY_ERR_INPUT, "%s: unknown flag or missing value", argv[i]);
        if (strcmp(argv[i], "--json") == 0) {
            a->json = argv[++i];
        } else if (strcmp(argv[i], "--model") == 0) {
            const char *name = argv[++i];
            for (int k = 0; k < BENCH_N_MODELS; k++)
                if (strcmp(name, BENCH_MODELS[k].name) == 0) a->only = k;
            if (a->only < 0)
                return hy_fail(err, HY_ERR_INPUT, "--model %s: want tiny, small or small-llama", name);
        } else if (strcmp(argv[i], "--steps") == 0) {
            char *end;
            errno = 0;
            long v = strtol(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || v < 1 || v > 100000)
                return hy_fail(err, HY_ERR_INPUT, "--steps %s: want a whole number in 1..100000",
                               argv[i]);
            a->steps = (int)v;
        } else {
            return hy_fail(err, HY_ERR_INPUT, "%s: unknown flag", argv[i]);
        }
    }
    return HY_OK;
}

int main(int argc, char **argv) {
    hy_error err = { 0 };
    bench_args args;
    int rc = parse_args(argc, argv, &args, &err);
    int steps = args.steps;
    const char *json = args.json;
    if (rc) {   /* a message is one line (error.h): the flags follow it */
        fprintf(stderr, "hanayo-bench: %s\n\n%s", err.msg, usage);
        return rc;
    }

    bench_machine mc;
    machine_describe(&mc);
    print_header(&mc);
    fflush(stdout);

    bench_run runs[BENCH_N_MODELS * BENCH_N_SCHEDS];
    bench_run rruns[BENCH_N_RECOMPUTE];
    memset(rruns, 0, sizeof rruns);
    int n_runs = 0;
    bench_gemm gemms[BENCH_N_GEMMS];
    bench_data data;
    bench_ckpt ckpt = { 0 };
    rc = data_make(&data, &err);
    int last = 0;   /* the last (largest) model run */
    for (int i = 0; i < BENCH_N_MODELS && !rc; i++) {
        if (args.only >= 0 ? i != args.only : BENCH_MODELS[i].only_asked) continue;
        last = i;
        const bench_model *m = &BENCH_MODELS[i];
        int first = n_runs, base = -1;
        for (int j = 0; j < BENCH_N_SCHEDS && !rc; j++) {
            const bench_sched *s = &BENCH_SCHEDS[j];
            /* Hanayo's extra waves only where every stage gets a layer. */
            if (s->kind == HY_SCHED_HANAYO && s->waves > 1 && sched_stages(s) > m->layers)
                continue;
            bench_run *r = &runs[n_runs];
            memset(r, 0, sizeof *r);
            r->model = m;
            r->sched = *s;
            r->steps = steps ? steps : m->steps;
            sched_label(s, r->label, sizeof r->label);
            r->step_s = calloc((size_t)r->steps, sizeof *r->step_s);
            if (!r->step_s) rc = hy_fail(&err, HY_ERR_RUNTIME, "out of memory");
            if (s->kind == HY_SCHED_1F1B && !s->split) base = n_runs;
            n_runs++;
        }
        if (!rc) rc = model_run(&runs[first], n_runs - first, data.path[i], &err);
        if (rc) break;
        for (int j = first; j < n_runs; j++)
            runs[j].vs_1f1b = base >= 0 ? runs[j].tokens_per_s / runs[base].tokens_per_s : 0;
        print_throughput(&runs[first], n_runs - first);
        fflush(stdout);
        rc = bubble_check(&runs[first], n_runs - first, data.path[i], &err);
        fflush(stdout);
    }
    const bench_model *big = &BENCH_MODELS[last];
    if (!rc) rc = recompute_runs(big, steps, data.path[last], rruns, &err);
    if (!rc) print_recompute(rruns, BENCH_N_RECOMPUTE);
    fflush(stdout);
    if (!rc) rc = ckpt_check(big, data.path[last], data.dir, &ckpt, &err);
    data_remove(&data);

    if (!rc) rc = gemm_check(big, gemms, &err);
    if (!rc) {
        print_gemms(big, gemms, BENCH_N_GEMMS);
        int first = 0;
        while (first < n_runs && runs[first].model != big) first++;
        print_breakdown(&runs[first], n_runs - first);
        for (int i = first; i < n_runs; i++)
            if (!runs[i].sched.split && (runs[i].sched.kind == HY_SCHED_1F1B ||
                (runs[i].sched.kind == HY_SCHED_HANAYO && runs[i].sched.waves == 1)))
                print_ops(&runs[i]);
        print_ckpt(big, &ckpt);
    }
    mc.load[1] = load_average();
    if (!rc) printf("\nload average at the end: %.2f\n", mc.load[1]);
    if (!rc && json)
        rc = json_write(json, &mc, runs, n_runs, rruns, BENCH_N_RECOMPUTE, gemms, BENCH_N_GEMMS,
                        &ckpt, &err);
    for (int i = 0; i < n_runs; i++) free(runs[i].step_s);
    for (int i = 0; i < BENCH_N_RECOMPUTE; i++) free(rruns[i].step_s);
    if (rc) {
        fprintf(stderr, "hanayo-bench: %s\n", err.msg);
        return rc;
    }
    if (json) printf("\nJSON: %s\n", json);
    return 0;
}
