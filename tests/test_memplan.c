/*
 * test_memplan.c — the memory plan against what the runtime allocates.
 *
 * For every schedule, whole and split backward, GPT, BERT (post- and pre-LN)
 * and Llama, each
 * activation-recomputation mode, on 1, 2 and 4 ranks, the plan of a run (memplan.h, with the CPU backend's memory)
 * must equal, rank by rank and byte for byte, what the CPU backend counted
 * (hy_backend_ops.allocated) after the runtime was built and had taken a
 * step (the step can only add scratch), a position table longer than
 * seq_len too. Then the parts the plan is made
 * of: the stash slots are the schedule's in-flight counts, terms add up,
 * an explicit case computed by hand, and the check's message.
 */
#include "cmd_plan.h"
#include "memplan.h"
#include "runtime.h"
#include "test.h"
#include "lib/shard.h"
#include "lib/testrun.h"
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char shard[256];

/* The run of `sets` over a small model, on the CPU backend. */
static int load(hy_run *run, const char *kind, const char *const *extra, int n_extra) {
    char kind_set[64], data_set[300];
    /* "bert-pre": BERT with GPT-2's pre-LN blocks, beside the post-LN default */
    int pre = strcmp(kind, "bert-pre") == 0;
    snprintf(kind_set, sizeof kind_set, "model.kind=%s", pre ? "bert" : kind);
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    const char *sets[24] = { "model.layers=4", "model.d_model=32", "model.heads=4",
                             "model.seq_len=16", "model.vocab=64",
                             "schedule.micro_batch_size=2", "schedule.micro_batches=4",
                             "data.val=null", "checkpoint.dir=null", "backend=cpu",
                             kind_set, data_set };
    int n = 12;
    if (pre) sets[n++] = "model.norm=pre";
    for (int i = 0; i < n_extra; i++) sets[n++] = extra[i];
    hy_error err;
    int rc = hy_test_run_load(run, NULL, sets, n, &err);
    if (rc) fprintf(stderr, "config: %s\n", err.msg);
    return rc;
}

static int plan_of(const hy_run *run, hy_memplan *mp) {
    hy_backend_memory mem;
    hy_backend_cpu_memory(&mem);
    hy_memplan_in in = { .model = &run->model, .sched = &run->sched,
                         .micro_batch_size = run->micro_batch_size, .replicas = 1, .mem = &mem,
                         .recompute = run->train.recompute };
    hy_error err;
    int rc = hy_memplan_build(mp, &in, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    return rc;
}

/* Plan = allocation, rank by rank, for one run. */
static void plan_equals_allocation(const char *kind, const char *const *sched, int n_sched) {
    hy_run run;
    if (load(&run, kind, sched, n_sched)) { CHECK(0); hy_run_free(&run); return; }
    hy_memplan mp;
    hy_runtime *rt = NULL;
    hy_error err;
    if (plan_of(&run, &mp) == HY_OK) {
        CHECKF(hy_runtime_create(&rt, &run, &err) == HY_OK, "%s", err.msg);
        hy_step_stats st;
        if (rt) CHECKF(hy_train_step(rt, &st, &err) == HY_OK, "%s", err.msg);
        hy_backend *be = rt ? hy_runtime_backend(rt) : NULL;
        for (int r = 0; be && r < mp.ranks; r++) {
            double got = (double)be->ops->allocated(be, r);
            CHECKF(got == mp.rank[r].total, "%s %s %s %s %s rank %d: planned %.0f bytes, "
                   "allocated %.0f", kind, sched[0], n_sched > 1 ? sched[1] : "",
                   n_sched > 3 ? sched[n_sched - 2] : "", sched[n_sched - 1], r, mp.rank[r].total,
                   got);
        }
        double sum = 0;
        for (int t = 0; t < HY_MEM_TERMS; t++) sum += mp.rank[mp.peak_rank].bytes[t];
        CHECK(sum == mp.rank[mp.peak_rank].total);
        hy_memplan_free(&mp);
    }
    hy_runtime_destroy(rt);
    hy_run_free(&run);
}

static void test_every_schedule(void) {
    static const char *const scheds[][5] = {
        { "schedule.kind=gpipe", "schedule.ranks=1" },
        { "schedule.kind=gpipe", "schedule.ranks=4" },
        { "schedule.kind=1f1b", "schedule.ranks=2" },
        { "schedule.kind=1f1b", "schedule.ranks=4" },
        { "schedule.kind=interleaved", "schedule.ranks=2", "schedule.chunks=2" },
        { "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=1" },
        { "schedule.kind=hanayo", "schedule.ranks=1", "schedule.waves=2" },
        { "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=1", "schedule.comm_cost=0.2" },
    };
    const char *kinds[] = { "gpt", "bert", "bert-pre", "llama" };
    const char *modes[] = { "train.recompute=none", "train.recompute=selective",
                            "train.recompute=full" };
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < sizeof scheds / sizeof scheds[0]; i++)
            for (int split = 0; split <= 1; split++)
                for (int mode = 0; mode < 3; mode++) {
                    const char *sets[7];
                    int n = 0;
                    while (n < 5 && scheds[i][n]) { sets[n] = scheds[i][n]; n++; }
                    sets[n++] = split ? "schedule.split_backward=true"
                                      : "schedule.split_backward=false";
                    sets[n++] = modes[mode];
                    plan_equals_allocation(kinds[k], sets, n);
                }
}

/* Recompute trades stash for working buffers: selective keeps less than
 * none, full less again, on every rank; full's one working slot is the
 * price in buffers, and it is smaller than what it saves under GPipe. */
static void test_recompute_saves(const char *kind) {
    const char *modes[] = { "train.recompute=none", "train.recompute=selective",
                            "train.recompute=full" };
    hy_memplan mp[3];
    hy_run run[3];
    int ok = 1;
    for (int k = 0; k < 3; k++) {
        const char *sets[] = { "schedule.kind=gpipe", "schedule.ranks=2", modes[k] };
        ok &= !load(&run[k], kind, sets, 3) && !plan_of(&run[k], &mp[k]);
    }
    for (int r = 0; ok && r < 2; r++) {
        const hy_mem_rank *none = &mp[0].rank[r], *sel = &mp[1].rank[r], *full = &mp[2].rank[r];
        CHECKF(sel->bytes[HY_MEM_ACTIVATIONS] < none->bytes[HY_MEM_ACTIVATIONS] &&
               full->bytes[HY_MEM_ACTIVATIONS] < sel->bytes[HY_MEM_ACTIVATIONS],
               "%s rank %d stash: none %.0f, selective %.0f, full %.0f", kind, r,
               none->bytes[HY_MEM_ACTIVATIONS], sel->bytes[HY_MEM_ACTIVATIONS],
               full->bytes[HY_MEM_ACTIVATIONS]);
        CHECK(full->bytes[HY_MEM_BUFFERS] > none->bytes[HY_MEM_BUFFERS]);
        CHECK(full->total < none->total);
        CHECK(sel->bytes[HY_MEM_WEIGHTS] == none->bytes[HY_MEM_WEIGHTS]);
    }
    /* The least mode that fits a budget: exactly at a mode's peak, that
     * mode; below full's, none. */
    hy_backend_memory mem;
    hy_backend_cpu_memory(&mem);
    hy_memplan_in in = { .model = &run[0].model, .sched = &run[0].sched,
                         .micro_batch_size = run[0].micro_batch_size, .replicas = 1,
                         .mem = &mem, .recompute = HY_RECOMPUTE_NONE };
    for (int k = 0; ok && k < 3; k++) {
        double at = mp[k].rank[mp[k].peak_rank].total;
        CHECK(hy_memplan_recompute_to_fit(&in, HY_RECOMPUTE_NONE, NULL, &at, 1, NULL) ==
              (hy_recompute)k);
        at -= 1;
        CHECK(hy_memplan_recompute_to_fit(&in, HY_RECOMPUTE_NONE, NULL, &at, 1, NULL) ==
              (hy_recompute)(k + 1));
    }
    if (ok) {
        char *j = hy_memplan_json(&mp[0], 1.0, HY_RECOMPUTE_FULL);
        CHECK(j && strstr(j, "\"recompute\":\"none\"") &&
              strstr(j, "\"fits_with_recompute\":\"full\""));
        free(j);
    }
    for (int k = 0; k < 3; k++) {
        if (ok) hy_memplan_free(&mp[k]);
        hy_run_free(&run[k]);
    }
}

/* A tied Llama across ranks: the embedding's replica on the last
 * stage's rank is counted as for GPT, in every recompute mode. */
static void test_tied_llama(void) {
    const char *modes[] = { "train.recompute=none", "train.recompute=selective",
                            "train.recompute=full" };
    for (int k = 0; k < 3; k++) {
        const char *sets[] = { "schedule.kind=1f1b", "schedule.ranks=2",
                               "model.tie_embeddings=true", modes[k] };
        plan_equals_allocation("llama", sets, 4);
    }
}

/* A position table longer than seq_len (model.positions): the plan
 * counts its rows where the runtime allocates them, and the weights,
 * gradients and moments grow by exactly them on the first stage's rank. */
static void test_positions(void) {
    static const char *const kinds[] = { "gpt", "bert", "bert-pre" };
    for (int k = 0; k < 3; k++) {
        const char *sets[] = { "schedule.kind=1f1b", "schedule.ranks=2", "model.positions=48" };
        plan_equals_allocation(kinds[k], sets, 3);
        hy_run a, b;
        hy_memplan pa, pb;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        if (load(&a, kinds[k], sets, 2) || load(&b, kinds[k], sets, 3) || plan_of(&a, &pa) ||
            plan_of(&b, &pb)) {
            CHECK(0);
        } else {
            /* 32 more rows of d_model 32 floats, fp32 on the CPU */
            double rows = 32.0 * 32 * sizeof(float);
            CHECK(pb.rank[0].bytes[HY_MEM_WEIGHTS] - pa.rank[0].bytes[HY_MEM_WEIGHTS] == rows);
            CHECK(pb.rank[0].bytes[HY_MEM_GRADS] - pa.rank[0].bytes[HY_MEM_GRADS] == rows);
            CHECK(pb.rank[0].bytes[HY_MEM_OPTIMIZER] - pa.rank[0].bytes[HY_MEM_OPTIMIZER] ==
                  2 * rows);
            CHECK(pb.rank[0].total - pa.rank[0].total == 4 * rows);
            CHECK(pb.rank[1].total == pa.rank[1].total);
            hy_memplan_free(&pa);
            hy_memplan_free(&pb);
        }
        hy_run_free(&a);
        hy_run_free(&b);
    }
}

/* The stash is what the schedule keeps in flight: GPipe every
 * micro-batch on every stage, 1F1B P - s on stage s. */
static void test_in_flight(void) {
    const char *gp[] = { "schedule.kind=gpipe", "schedule.ranks=4" };
    const char *ob[] = { "schedule.kind=1f1b", "schedule.ranks=4" };
    hy_run run;
    hy_memplan mp;
    if (!load(&run, "gpt", gp, 2) && !plan_of(&run, &mp)) {
        for (int s = 0; s < 4; s++) CHECK(mp.in_flight[s] == 4);
        hy_memplan_free(&mp);
    }
    hy_run_free(&run);
    if (!load(&run, "gpt", ob, 2) && !plan_of(&run, &mp)) {
        for (int s = 0; s < 4; s++) CHECKF(mp.in_flight[s] == 4 - s, "stage %d: %d", s, mp.in_flight[s]);
        /* and the stash term is those slots times hy_stash_bytes */
        CHECK(mp.rank[0].bytes[HY_MEM_ACTIVATIONS] > mp.rank[3].bytes[HY_MEM_ACTIVATIONS]);
        hy_memplan_free(&mp);
    }
    hy_run_free(&run);
}

/* One rank by hand: weights, grads and moments are the parameters' fp32
 * bytes, 1, 1 and 2 times; a bf16 backend adds the compute copy. */
static void test_terms_by_hand(void) {
    const char *one[] = { "schedule.kind=gpipe", "schedule.ranks=1" };
    hy_run run;
    if (load(&run, "gpt", one, 1)) { hy_run_free(&run); return; }
    double params = (double)run.model.stage_numel[0] * 4;
    hy_backend_memory mem;
    hy_backend_cpu_memory(&mem);
    hy_memplan_in in = { .model = &run.model, .sched = &run.sched,
                         .micro_batch_size = run.micro_batch_size, .replicas = 1, .mem = &mem };
    hy_memplan mp;
    hy_error err;
    if (hy_memplan_build(&mp, &in, &err) == HY_OK) {
        CHECK(mp.rank[0].bytes[HY_MEM_WEIGHTS] == params);
        CHECK(mp.rank[0].bytes[HY_MEM_GRADS] == params);
        CHECK(mp.rank[0].bytes[HY_MEM_OPTIMIZER] == 2 * params);
        hy_memplan_free(&mp);
    }
    mem.act_size = 2;   /* as the CUDA backend's bf16 */
    if (hy_memplan_build(&mp, &in, &err) == HY_OK) {
        CHECK(mp.rank[0].bytes[HY_MEM_WEIGHTS] == params + params / 2);
        hy_memplan_free(&mp);
    }
    hy_run_free(&run);
}

/* The check names the rank, both figures, the largest term and a way. */
static void test_check(void) {
    const char *two[] = { "schedule.kind=gpipe", "schedule.ranks=2" };
    hy_run run;
    hy_memplan mp;
    if (load(&run, "gpt", two, 2) || plan_of(&run, &mp)) { hy_run_free(&run); return; }
    hy_error err;
    double most = fmax(mp.rank[0].total, mp.rank[1].total);
    CHECK(hy_memplan_check(&mp, most, "the test", &err) == HY_OK);
    CHECK(hy_memplan_check(&mp, most / 2, "the test", &err) == HY_ERR_INPUT);
    char rank[32];
    snprintf(rank, sizeof rank, "rank %d needs", mp.peak_rank);
    CHECKF(strstr(err.msg, rank) && strstr(err.msg, "the test has") && strstr(err.msg, "the most is") &&
               strstr(err.msg, "try "), "%s", err.msg);
    hy_memplan_free(&mp);
    hy_run_free(&run);
}

/* `hanayo plan CONFIG` prints the plan under the summary, as a table and
 * in --json, and says whether it fits --memory-gb. */
static void test_plan_command(void) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    const char *sets[] = { "backend=cpu" };
    cli_plan_request rq;
    cli_plan_request_init(&rq);
    rq.config = "configs/tiny-gpt.json";
    rq.sets = sets;
    rq.n_sets = 1;
    rq.json = 1;
    hy_error err;
    CHECKF(out && cli_plan_run(&rq, out, &err) == HY_OK, "%s", err.msg);
    if (out) fclose(out);
    /* The JSON's memory equals the plan of the same run. */
    hy_run run;
    hy_memplan mp;
    const char *cpu[] = { "backend=cpu" };
    if (text && hy_test_run_load(&run, "configs/tiny-gpt.json", cpu, 1, &err) == HY_OK &&
        plan_of(&run, &mp) == HY_OK) {
        char want[96];
        snprintf(want, sizeof want, "\"total\":%.17g", mp.rank[0].total);
        const char *m = strstr(text, "\"memory\": {");
        CHECKF(m && strstr(m, "\"ranks\":[{\"rank\":0") && strstr(m, want), "%s", text);
        hy_memplan_free(&mp);
    }
    hy_run_free(&run);
    free(text);
    /* The table, and a budget it does not fit. */
    text = NULL;
    out = open_memstream(&text, &len);
    rq.json = 0;
    rq.memory_gb = 0.001;
    CHECKF(out && cli_plan_run(&rq, out, &err) == HY_OK, "%s", err.msg);
    if (out) fclose(out);
    CHECKF(text && strstr(text, "memory per rank, what the runtime allocates (--memory-gb; cpu") &&
               strstr(text, "activations") && strstr(text, "does not fit in 1.0 MiB per rank: "
                                                           "the run does not fit: rank"),
           "%s", text ? text : "");
    free(text);
}

int main(void) {
    if (hy_test_shard_make(shard, sizeof shard, "memplan", 64, 20000) != 0) {
        fprintf(stderr, "cannot make a shard\n");
        return 1;
    }
    test_every_schedule();
    test_tied_llama();
    test_recompute_saves("gpt");
    test_recompute_saves("bert");
    test_recompute_saves("llama");
    test_in_flight();
    test_positions();
    test_terms_by_hand();
    test_check();
    test_plan_command();
    hy_test_shard_remove(shard);
    return TEST_END("memplan");
}
