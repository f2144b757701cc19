/*
 * test_config.c — the config loader: defaults, the shipped configs, the
 * to_json round trip, --set overrides, a config loaded for one rank (no
 * stage check), and the bad inputs it must refuse with status 2 and a
 * message that points at the problem.
 *
 * Run from the repository root (it reads configs/). Bad inputs are written
 * to files in a mkdtemp directory that is removed at the end.
 */
#include "config.h"
#include "run.h"
#include "test.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The temp directory and the files made in it, for cleanup. */
typedef struct {
    char dir[64];
    char made[32][128];
    int n_made;
} scratch;

static const char *scratch_file(scratch *s, const char *name, const char *text) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    int known = 0;
    for (int i = 0; i < s->n_made; i++) known |= strcmp(s->made[i], path) == 0;
    if (!known && s->n_made < NELEM(s->made)) snprintf(s->made[s->n_made++], 128, "%s", path);
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    fwrite(text, 1, strlen(text), f);
    fclose(f);
    for (int i = 0; i < s->n_made; i++)
        if (strcmp(s->made[i], path) == 0) return s->made[i];
    return NULL;
}

static void scratch_clean(scratch *s) {
    for (int i = s->n_made - 1; i >= 0; i--) {
        chmod(s->made[i], 0600);
        if (remove(s->made[i]) != 0) perror(s->made[i]);
    }
    if (rmdir(s->dir) != 0) perror(s->dir);
}

/* ------------------------------------------------------------------------ */

/* Stages S of config c's schedule (schedule.h's one definition). */
static int stages_of(const hy_config *c) {
    hy_sched_params p = { .kind = c->schedule.kind, .ranks = c->schedule.ranks,
                          .waves = c->schedule.waves, .chunks = c->schedule.chunks };
    return hy_sched_stages(&p);
}

static void test_defaults(void) {
    hy_config c;
    hy_error err = { 0 };
    CHECK(hy_config_load(&c, NULL, NULL, 0, &err) == HY_OK);
    CHECK(c.path == NULL);
    CHECK(c.model.kind == HY_MODEL_GPT && c.model.layers == 4 && c.model.d_model == 64);
    CHECK(c.model.heads == 4 && c.model.seq_len == 64 && c.model.vocab == 512);
    CHECK(c.schedule.kind == HY_SCHED_HANAYO && c.schedule.ranks == 2 && c.schedule.waves == 1);
    CHECK(c.schedule.chunks == 2 && c.schedule.micro_batches == 8);
    CHECK(c.schedule.micro_batch_size == 4 && c.schedule.n_layers_per_stage == 0 && !c.schedule.layers_per_stage);
    CHECK(c.train.steps == 200 && c.train.lr == 1e-3 && c.train.min_lr == 1e-3 / 10);
    CHECK(c.train.warmup_steps == 20 && c.train.weight_decay == 0.1);
    CHECK(c.train.beta1 == 0.9 && c.train.beta2 == 0.95 && c.train.eps == 1e-8);
    CHECK(c.train.grad_clip == 1.0 && c.train.seed == 1234 && c.train.log_every == 10);
    CHECK(c.data.n_train == 1 && strcmp(c.data.train[0], "data/synth_train.bin") == 0);
    CHECK(strcmp(c.data.val, "data/synth_val.bin") == 0);
    CHECK(c.init == NULL);
    CHECK(strcmp(c.checkpoint.dir, "checkpoints") == 0 && c.checkpoint.every == 0);
    CHECK(c.backend == HY_BACKEND_AUTO && c.n_devices == 0 && !c.devices);
    CHECK(c.graph == 1 && c.watchdog_s == 60);
    CHECK(stages_of(&c) == 4);

    /* The run it resolves to (run.h) carries the same. */
    hy_run run;
    CHECK(hy_run_resolve(&run, &c, &err) == HY_OK);
    const hy_sched_params *p = &run.sched_params;
    CHECK(p->kind == HY_SCHED_HANAYO && p->ranks == 2 && p->micro_batches == 8);
    CHECK(p->waves == 1 && p->chunks == 2);
    CHECK(run.micro_batch_size == c.schedule.micro_batch_size && run.train.lr == c.train.lr);
    CHECK(run.sched.stages == 4 && run.model.stages == 4 && run.model.layers == c.model.layers);
    CHECK(run.data.n_train == 1 && strcmp(run.data.train[0], c.data.train[0]) == 0);
    CHECK(run.data.train[0] != c.data.train[0] && run.backend.watchdog_s == 60);   /* a copy */
    hy_run_free(&run);

    /* init alone gives the same config as loading nothing. */
    hy_config d;
    hy_config_init(&d);
    char *a = hy_config_to_json(&c), *b = hy_config_to_json(&d);
    CHECK(a && b && strcmp(a, b) == 0);
    free(a);
    free(b);
    hy_config_free(&d);

    /* init then load (the natural pattern) must not leak; free twice is harmless. */
    hy_config_init(&d);
    CHECK(hy_config_load(&d, NULL, NULL, 0, &err) == HY_OK);
    hy_config_free(&d);
    hy_config_free(&d);
    CHECK(d.model.layers == 4);
    hy_config_free(&c);
}

/* The defaults that follow the user: a config naming its own training
 * shard has no validation shard unless it names one, and a config file's
 * checkpoints go to checkpoints/<its name>; what the user writes, null
 * included, stands. */
static void test_derived_defaults(scratch *s) {
    hy_config c;
    hy_error err = { 0 };
    const char *p = scratch_file(s, "mine.json", "{\"data\": {\"train\": \"my.bin\"}}");
    CHECK(hy_config_load(&c, p, NULL, 0, &err) == HY_OK);
    CHECK(c.data.n_train == 1 && strcmp(c.data.train[0], "my.bin") == 0 && c.data.val == NULL);
    CHECKF(c.checkpoint.dir && strcmp(c.checkpoint.dir, "checkpoints/mine") == 0, "%s",
           c.checkpoint.dir ? c.checkpoint.dir : "(null)");
    hy_config_free(&c);

    /* The default shard brings its validation shard; --set counts as given. */
    p = scratch_file(s, "synth.v2.json", "{\"model\": {\"layers\": 8}}");
    CHECK(hy_config_load(&c, p, NULL, 0, &err) == HY_OK);
    CHECK(c.data.val && strcmp(c.data.val, "data/synth_val.bin") == 0);
    CHECK(c.checkpoint.dir && strcmp(c.checkpoint.dir, "checkpoints/synth.v2") == 0);
    hy_config_free(&c);
    const char *sets[] = { "data.train=t.bin", "data.val=v.bin", "checkpoint.dir=null" };
    CHECK(hy_config_load(&c, p, sets, 3, &err) == HY_OK);
    CHECK(c.data.val && strcmp(c.data.val, "v.bin") == 0 && c.checkpoint.dir == NULL);
    hy_config_free(&c);
    p = scratch_file(s, "given.json", "{\"data\": {\"train\": \"t.bin\", \"val\": null}, "
                                      "\"checkpoint\": {\"dir\": \"ck\"}}");
    CHECK(hy_config_load(&c, p, NULL, 0, &err) == HY_OK);
    CHECK(c.data.val == NULL && c.checkpoint.dir && strcmp(c.checkpoint.dir, "ck") == 0);
    hy_config_free(&c);

    /* The derived names, as the profile's default directory uses them too. */
    static const char *const cases[][2] = {
        { "configs/tiny-gpt.json", "top/tiny-gpt" }, { "x", "top/x" }, { "a/b.c/d", "top/d" },
        { ".hidden", "top/.hidden" }, { "dir/", "top/config" }, { "", "top/config" },
    };
    for (int i = 0; i < NELEM(cases); i++) {
        char *d = hy_config_derived_dir("top", cases[i][0]);
        CHECKF(d && strcmp(d, cases[i][1]) == 0, "%s -> %s", cases[i][0], d ? d : "(null)");
        free(d);
    }
}

static void test_names(void) {
    CHECK(strcmp(hy_model_name(HY_MODEL_BERT), "bert") == 0);
    CHECK(strcmp(hy_backend_name(HY_BACKEND_CUDA), "cuda") == 0);
    CHECK(strcmp(hy_model_name((hy_model_kind)7), "?") == 0);
}

/* to_json → file → load → to_json gives the same text. */
static void check_round_trip(scratch *s, const hy_config *c, const char *what) {
    char *first = hy_config_to_json(c);
    CHECK(first != NULL);
    if (!first) return;
    json_error_t je;
    json_t *j = json_loads(first, JSON_REJECT_DUPLICATES, &je);
    CHECKF(j != NULL, "%s: to_json is not JSON: %s", what, je.text);
    if (j) {
        /* every section and top-level key present */
        CHECK(json_object_size(j) == 10);
        CHECK(json_object_size(json_object_get(j, "model")) == 16);
        CHECK(json_object_size(json_object_get(j, "schedule")) == 10);
        CHECK(json_object_size(json_object_get(j, "train")) == 17);
        json_decref(j);
    }
    const char *path = scratch_file(s, "roundtrip.json", first);
    hy_config back;
    hy_error err = { 0 };
    int rc = hy_config_load(&back, path, NULL, 0, &err);
    CHECKF(rc == HY_OK, "%s: reloading to_json failed: %s", what, err.msg);
    char *second = hy_config_to_json(&back);
    CHECKF(second && strcmp(first, second) == 0, "%s: round trip differs:\n%s\nvs\n%s", what,
           first, second ? second : "(null)");
    CHECK(back.train.lr == c->train.lr && back.train.min_lr == c->train.min_lr);
    CHECK(back.train.seed == c->train.seed && back.watchdog_s == c->watchdog_s);
    free(first);
    free(second);
    hy_config_free(&back);
}

/* model.positions: the learned position table's rows, seq_len unless
 * given, at least seq_len (BAD holds the refusals); ignored by a Llama;
 * model.from takes it from a BERT's max_position_embeddings, and seq_len
 * with it unless the config gives one. */
static void test_positions(scratch *s) {
    hy_config c;
    hy_error err = { 0 };
    CHECK(hy_config_load(&c, "configs/tiny-gpt.json", NULL, 0, &err) == HY_OK);
    CHECK(c.model.seq_len == 64 && c.model.positions == 64);
    char *j = hy_config_to_json(&c);
    CHECK(j && strstr(j, "\"positions\": 64,"));
    free(j);
    hy_config_free(&c);
    const char *shorter[] = { "model.seq_len=32" };
    CHECK(hy_config_load(&c, "configs/tiny-gpt.json", shorter, 1, &err) == HY_OK);
    CHECK(c.model.seq_len == 32 && c.model.positions == 32);
    hy_config_free(&c);
    const char *longer[] = { "model.seq_len=32", "model.positions=128" };
    CHECK(hy_config_load(&c, "configs/tiny-gpt.json", longer, 2, &err) == HY_OK);
    CHECK(c.model.seq_len == 32 && c.model.positions == 128);
    check_round_trip(s, &c, "a table longer than seq_len");
    hy_config_free(&c);
    const char *llama[] = { "model.positions=8" };
    CHECKF(hy_config_load(&c, "configs/tiny-llama.json", llama, 1, &err) == HY_OK, "%s", err.msg);
    hy_config_free(&c);

    /* bert-tiny's config.json: max_position_embeddings 16 */
    static const struct { const char *sets[2]; int seq_len, positions; } from[] = {
        { { NULL, NULL }, 16, 16 },
        { { "model.seq_len=8", NULL }, 8, 16 },
        { { "model.positions=32", NULL }, 32, 32 },
        { { "model.positions=32", "model.seq_len=8" }, 8, 32 },
    };
    const char *p = scratch_file(s, "from.json", "{\"model\": {\"from\": "
                                 "\"tests/fixtures/bert-tiny\"}, \"schedule\": {\"ranks\": 1}}");
    for (int i = 0; i < NELEM(from); i++) {
        int n = from[i].sets[0] ? from[i].sets[1] ? 2 : 1 : 0;
        int rc = hy_config_load(&c, p, from[i].sets, n, &err);
        CHECKF(rc == HY_OK, "model.from case %d: %s", i, err.msg);
        CHECKF(rc || (c.model.seq_len == from[i].seq_len && c.model.positions == from[i].positions),
               "model.from case %d: seq_len %d, positions %d", i, c.model.seq_len,
               c.model.positions);
        hy_config_free(&c);
    }
    const char *too_long[] = { "model.seq_len=17" };
    CHECK(hy_config_load(&c, p, too_long, 1, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "model.positions (16) is below model.seq_len (17)"), "%s", err.msg);
    hy_config_free(&c);
}

static void test_shipped_configs(scratch *s) {
    static const char *const expected[] = {
        "configs/tiny-gpt.json", "configs/tiny-bert.json", "configs/gpt2-124m.json",
        "configs/gpt2-350m.json", "configs/bert-base.json",
    };
    for (int i = 0; i < NELEM(expected); i++) CHECKF(access(expected[i], R_OK) == 0, "%s", expected[i]);

    /* Every *.json in configs/ loads and round-trips. */
    DIR *d = opendir("configs");
    CHECKF(d != NULL, "run the tests from the repository root");
    if (!d) return;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        char path[300];
        snprintf(path, sizeof path, "configs/%s", e->d_name);
        hy_config c;
        hy_error err = { 0 };
        int rc = hy_config_load(&c, path, NULL, 0, &err);
        CHECKF(rc == HY_OK, "%s: %s", path, err.msg);
        if (rc == HY_OK) {
            CHECK(strcmp(c.path, path) == 0);
            check_round_trip(s, &c, path);
        }
        hy_config_free(&c);
        n++;
    }
    closedir(d);
    CHECK(n >= NELEM(expected));

    hy_config c;
    hy_error err = { 0 };
    CHECK(hy_config_load(&c, "configs/tiny-gpt.json", NULL, 0, &err) == HY_OK);
    CHECK(c.model.kind == HY_MODEL_GPT && c.schedule.kind == HY_SCHED_HANAYO);
    CHECK(c.schedule.ranks == 2 && c.schedule.waves == 1 && stages_of(&c) == 4);
    hy_config_free(&c);
    CHECK(hy_config_load(&c, "configs/tiny-bert.json", NULL, 0, &err) == HY_OK);
    CHECK(c.model.kind == HY_MODEL_BERT);
    hy_config_free(&c);
    CHECK(hy_config_load(&c, "configs/gpt2-124m.json", NULL, 0, &err) == HY_OK);
    CHECK(c.model.vocab == 50257 && c.model.layers == 12 && stages_of(&c) <= 12);
    hy_config_free(&c);
    CHECK(hy_config_load(&c, "configs/gpt2-350m.json", NULL, 0, &err) == HY_OK);
    CHECK(c.model.layers == 24 && c.model.d_model == 1024 && stages_of(&c) == 16);
    hy_config_free(&c);

    /* model.mask_token: bert-base-uncased's [MASK] (103) for its 30522 ids,
     * the last id for any other vocabulary, derived after every --set. */
    CHECK(hy_config_load(&c, "configs/bert-base.json", NULL, 0, &err) == HY_OK);
    CHECK(c.model.vocab == 30522 && c.model.mask_token == 103);
    hy_config_free(&c);
    const char *v1000[] = { "model.vocab=1000" };
    CHECK(hy_config_load(&c, "configs/bert-base.json", v1000, 1, &err) == HY_OK);
    CHECK(c.model.mask_token == 999);
    hy_config_free(&c);
    const char *m5[] = { "model.mask_token=5" };
    CHECK(hy_config_load(&c, "configs/tiny-bert.json", m5, 1, &err) == HY_OK);
    CHECK(c.model.mask_token == 5);
    check_round_trip(s, &c, "tiny-bert with mask_token 5");
    hy_config_free(&c);
    CHECK(hy_config_load(&c, "configs/tiny-bert.json", NULL, 0, &err) == HY_OK);
    CHECK(c.model.mask_token == c.model.vocab - 1);
    hy_config_free(&c);

    /* BERT-base at P = 8 hanayo: 16 stages for 12 layers needs a split. */
    const char *p8[] = { "schedule.ranks=8" };
    CHECK(hy_config_load(&c, "configs/bert-base.json", p8, 1, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "16 stages but model.layers is 12"), "%s", err.msg);
    const char *p8split[] = { "schedule.ranks=8",
                              "schedule.split=[0,1,1,1,1,1,1,1,1,1,1,1,1,0,0,0]" };
    CHECKF(hy_config_load(&c, "configs/bert-base.json", p8split, 2, &err) == HY_OK, "%s", err.msg);
    CHECK(c.schedule.n_layers_per_stage == 16 && c.schedule.layers_per_stage[1] == 1 && c.schedule.layers_per_stage[15] == 0);
    check_round_trip(s, &c, "bert-base P=8 with split");
    hy_config_free(&c);
}

static void test_sets(scratch *s) {
    hy_config c;
    hy_error err = { 0 };
    const char *sets[] = {
        "schedule.kind=gpipe", "train.lr=3e-4", "graph=false", "devices=[0,0]",
        "init=w.safetensors", "data.val=null", "schedule.kind=1f1b", "data.train=123",
        "train.seed=42", "backend=\"cpu\"", "watchdog_s=5",
    };
    int rc = hy_config_load(&c, "configs/tiny-gpt.json", sets, NELEM(sets), &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    CHECK(c.schedule.kind == HY_SCHED_1F1B);          /* later sets win */
    CHECK(c.train.lr == 3e-4 && c.graph == 0);
    CHECK(c.n_devices == 2 && c.devices[0] == 0 && c.devices[1] == 0);
    CHECK(c.init && strcmp(c.init, "w.safetensors") == 0);
    CHECK(c.data.val == NULL);
    CHECK(c.data.n_train == 1 && strcmp(c.data.train[0], "123") == 0);   /* the text */
    CHECK(c.train.seed == 42 && c.backend == HY_BACKEND_CPU && c.watchdog_s == 5.0);
    CHECK(c.train.min_lr == 1e-4);                    /* tiny-gpt gives min_lr itself */
    char *j = hy_config_to_json(&c);
    CHECK(j && strstr(j, "\"lr\": 0.0003,"));          /* shortest exact form */
    CHECK(j && strstr(j, "\"val\": null"));
    CHECK(j && strstr(j, "\"devices\": [0, 0]"));
    CHECK(j && strstr(j, "\"watchdog_s\": 5.0"));
    free(j);
    check_round_trip(s, &c, "tiny-gpt with sets");
    hy_config_free(&c);

    /* min_lr follows lr when nobody gives it. */
    const char *lr[] = { "train.lr=0.02" };
    CHECK(hy_config_load(&c, NULL, lr, 1, &err) == HY_OK);
    CHECK(c.train.min_lr == 0.02 / 10);
    hy_config_free(&c);
    const char *lrnull[] = { "train.lr=0.02", "train.min_lr=null" };
    CHECK(hy_config_load(&c, NULL, lrnull, 2, &err) == HY_OK);
    CHECK(c.train.min_lr == 0.02 / 10);
    hy_config_free(&c);

    /* data.train: a list of paths, from a file or a --set, round-trips as a
     * list; one path (or a list of one) as a string; a list of one is
     * the default only when it is the default path, for data.val. */
    const char *path = scratch_file(s, "list.json", "{\"data\": {\"train\": [\"a.bin\", "
                                    "\"d/*.bin\", \"c.bin\"]}}");
    CHECKF(hy_config_load(&c, path, NULL, 0, &err) == HY_OK, "%s", err.msg);
    CHECK(c.data.n_train == 3 && strcmp(c.data.train[1], "d/*.bin") == 0 && !c.data.val);
    j = hy_config_to_json(&c);
    CHECKF(j && strstr(j, "\"train\": [\"a.bin\", \"d/*.bin\", \"c.bin\"]"), "%s", j);
    free(j);
    check_round_trip(s, &c, "data.train a list");
    hy_run run;
    CHECK(hy_run_resolve(&run, &c, &err) == HY_OK);
    CHECK(run.data.n_train == 3 && strcmp(run.data.train[2], "c.bin") == 0);
    hy_run_free(&run);
    hy_config_free(&c);
    const char *list[] = { "data.train=[\"x.bin\",\"y.bin\"]", "data.train=[\"z.bin\"]" };
    CHECKF(hy_config_load(&c, path, list, 1, &err) == HY_OK, "%s", err.msg);
    CHECK(c.data.n_train == 2 && strcmp(c.data.train[1], "y.bin") == 0);
    hy_config_free(&c);
    CHECKF(hy_config_load(&c, NULL, list + 1, 1, &err) == HY_OK, "%s", err.msg);
    CHECK(c.data.n_train == 1 && strcmp(c.data.train[0], "z.bin") == 0 && !c.data.val);
    j = hy_config_to_json(&c);
    CHECKF(j && strstr(j, "\"train\": \"z.bin\""), "%s", j);
    free(j);
    hy_config_free(&c);
    const char *same[] = { "data.train=[\"data/synth_train.bin\"]" };
    CHECK(hy_config_load(&c, NULL, same, 1, &err) == HY_OK && c.data.val);
    hy_config_free(&c);

    /* model.vocab past uint16 (u32 shards), up to what the LM head's
     * padded rows allow. */
    const char *big[] = { "model.vocab=128256" }, *most[] = { "model.vocab=2147483520" };
    CHECKF(hy_config_load(&c, NULL, big, 1, &err) == HY_OK, "%s", err.msg);
    CHECK(c.model.vocab == 128256);
    hy_config_free(&c);
    CHECKF(hy_config_load(&c, NULL, most, 1, &err) == HY_OK, "%s", err.msg);
    hy_config_free(&c);

    /* A set can repair a file: checks run once, on the merged result. */
    path = scratch_file(s, "fixable.json", "{\"schedule\": {\"waves\": 0}}");
    const char *fix[] = { "schedule.waves=1" };
    CHECKF(hy_config_load(&c, path, fix, 1, &err) == HY_OK, "%s", err.msg);
    hy_config_free(&c);

    /* Sets create sections the file lacks. */
    path = scratch_file(s, "nosched.json", "{\"model\": {\"layers\": 8}}");
    const char *mk[] = { "schedule.waves=2", "schedule.split=[1,1,1,1,1,1,1,1]" };
    CHECKF(hy_config_load(&c, path, mk, 2, &err) == HY_OK, "%s", err.msg);
    CHECK(c.model.layers == 8 && c.schedule.waves == 2 && c.schedule.n_layers_per_stage == 8);
    hy_config_free(&c);

    /* Interleaved with M a multiple of P, and split with empty stages. */
    const char *il[] = { "schedule.kind=interleaved", "schedule.ranks=2", "schedule.chunks=2",
                         "schedule.micro_batches=6" };
    CHECKF(hy_config_load(&c, NULL, il, NELEM(il), &err) == HY_OK, "%s", err.msg);
    CHECK(stages_of(&c) == 4);
    hy_config_free(&c);
    const char *sp[] = { "schedule.split=[0,4,0,0]" };
    CHECKF(hy_config_load(&c, NULL, sp, 1, &err) == HY_OK, "%s", err.msg);
    hy_config_free(&c);
    /* 1f1b with 4 ranks on 4 layers: S = P = layers is fine. */
    const char *f4[] = { "schedule.kind=1f1b", "schedule.ranks=4" };
    CHECKF(hy_config_load(&c, NULL, f4, 2, &err) == HY_OK, "%s", err.msg);
    hy_config_free(&c);
}

/* ------------------------------------------------------------------------
 * Bad input: each must give HY_ERR_INPUT and a message with `needle`
 */

typedef struct {
    const char *text;    /* file contents, or NULL for no file */
    const char *set;     /* one --set, or NULL */
    const char *needle;  /* must appear in the message */
    const char *needle2; /* and this too, when not NULL */
} bad_case;

static const bad_case BAD[] = {
    /* syntax */
    { "{\n  \"model\": {\n    \"layers\": 4,\n  }\n}\n", NULL, "x.json:4:", "invalid JSON" },
    { "{\"graph\": true} x", NULL, "invalid JSON", "end of file expected" },
    { "", NULL, "is empty", "{}" },
    { "  \n\t\n", NULL, "is empty", NULL },
    { "[1, 2]", NULL, "JSON object", "got an array" },
    { "5", NULL, "invalid JSON", NULL },
    { "{\"graph\": true, \"graph\": false}", NULL, "duplicate object key", "x.json:1:" },
    { "{\"data\": {\"train\": \"a\\u0000b\"}}", NULL, "invalid JSON", NULL },
    { "{\"data\": {\"train\": \"\xff\xfe\"}}", NULL, "invalid JSON", NULL },
    /* unknown keys, with a suggestion */
    { "{\"grpah\": true}", NULL, "unknown key 'grpah' in ", "did you mean 'graph'?" },
    { "{\"model\": {\"layer\": 4}}", NULL, "unknown key 'model.layer'",
      "did you mean 'model.layers'?" },
    { "{\"schedule\": {\"wave\": 2}}", NULL, "unknown key 'schedule.wave' in ",
      ".json; did you mean 'schedule.waves'?" },
    { "{\"train\": {\"learnig_rate\": 1}}", NULL, "unknown key 'train.learnig_rate'",
      "valid keys in 'train': steps, lr," },
    { "{\"model\": {\"waves\": 2}}", NULL, "unknown key 'model.waves'",
      "did you mean 'schedule.waves'?" },
    { "{\"data\": {\"tain\": \"x\"}}", NULL, "unknown key 'data.tain'", "'data.train'" },
    { "{\"checkpoint\": {\"evry\": 3}}", NULL, "unknown key 'checkpoint.evry'",
      "'checkpoint.every'" },
    { "{\"schedule.waves\": 2}", NULL, "unknown key 'schedule.waves'", "nested objects" },
    { "{\"foo\": 1}", NULL, "unknown key 'foo'", "valid top-level keys: model, schedule" },
    /* types */
    { "{\"model\": 4}", NULL, "model in ", "must be an object" },
    { "{\"model\": {\"layers\": \"4\"}}", NULL,
      "model.layers in ", "must be an integer in 1..1024, got \"4\"" },
    { "{\"model\": {\"layers\": 3.5}}", NULL, "model.layers", "got 3.5" },
    { "{\"model\": {\"layers\": 4.0}}", NULL, "model.layers", "(a real; write 4)" },
    { "{\"model\": {\"layers\": null}}", NULL, "model.layers", "got null" },
    { "{\"graph\": 1}", NULL, "graph in ", "must be true or false, got 1" },
    { "{\"graph\": \"true\"}", NULL, "graph in ", "got \"true\"" },
    { "{\"schedule\": {\"kind\": \"hanyo\"}}", NULL, "schedule.kind",
      "did you mean \"hanayo\"?" },
    { "{\"model\": {\"kind\": \"mamba\"}}", NULL, "one of \"gpt\", \"bert\", \"llama\"", "got \"mamba\"" },
    { "{\"backend\": \"gpu\"}", NULL, "backend in ", "one of \"auto\", \"cpu\", \"cuda\"" },
    { "{\"data\": {\"train\": \"\"}}", NULL, "data.train", "non-empty string" },
    { "{\"data\": {\"train\": null}}", NULL, "data.train", "got null" },
    { "{\"schedule\": {\"split\": 4}}", NULL, "schedule.split in", "an array of at most" },
    { "{\"devices\": [0, \"1\"]}", NULL, "devices[1] in", "got \"1\"" },
    { "{\"model\": {\"kind\": {\"a\": {\"b\": {\"c\": [[[1]]]}}}}}", NULL, "model.kind",
      "got an object" },
    /* ranges */
    { "{\"schedule\": {\"ranks\": 0}}", NULL, "schedule.ranks in ",
      "must be an integer in 1..64, got 0" },
    { "{\"schedule\": {\"ranks\": 65}}", NULL, "schedule.ranks", "got 65" },
    { "{\"schedule\": {\"waves\": 17}}", NULL, "schedule.waves", "1..16" },
    { "{\"schedule\": {\"chunks\": 0}}", NULL, "schedule.chunks", "1..64" },
    { "{\"schedule\": {\"micro_batches\": 0}}", NULL, "schedule.micro_batches", "got 0" },
    { "{\"model\": {\"d_model\": -64}}", NULL, "model.d_model", "got -64" },
    { "{\"model\": {\"vocab\": 2147483521}}", NULL, "model.vocab (2147483521) padded to a "
      "multiple of 128", "give at most 2147483520" },
    { "{\"model\": {\"vocab\": 2147483648}}", NULL, "model.vocab", "an integer >= 2" },
    { "{\"data\": {\"train\": []}}", NULL, "data.train in ",
      "a non-empty string, or a non-empty array of them, got an array" },
    { "{\"data\": {\"train\": [\"a.bin\", 3]}}", NULL, "data.train[1] in ",
      "must be a non-empty string, got 3" },
    { "{\"data\": {\"train\": [\"a.bin\", \"\"]}}", NULL, "data.train[1]", "got \"\"" },
    { "{\"data\": {\"train\": {\"a\": 1}}}", NULL, "data.train", "got an object" },
    { NULL, "data.train=[]", "data.train in --set data.train=[]", "got an array" },
    { NULL, "data.train=[\"a\",null]", "data.train[1] in --set", "got null" },
    { "{\"model\": {\"layers\": 99999999999999999999}}", NULL, "invalid JSON", "too big" },
    { "{\"train\": {\"steps\": 3000000000}}", NULL, "train.steps",
      "must be an integer >= 1, got 3000000000" },
    { "{\"train\": {\"lr\": 1e999}}", NULL, "invalid JSON", "overflow" },
    { "{\"train\": {\"lr\": -0.1}}", NULL, "train.lr",
      "a number in [0, 1000] as a 32-bit float (if not 0, at least 1.2e-38), got -0.1" },
    { "{\"train\": {\"beta1\": 1}}", NULL, "train.beta1",
      "a number in [0, 1) as a 32-bit float (if not 0, at least 1.2e-38), got 1" },
    { "{\"train\": {\"beta2\": 1.5}}", NULL, "train.beta2", "[0, 1)" },
    { "{\"train\": {\"eps\": 0}}", NULL, "train.eps",
      "a number in (0, 1000] as a 32-bit float (if not 0, at least 1.2e-38), got 0" },
    /* Valid as a double, not as the float AdamW computes with. */
    { "{\"train\": {\"eps\": 1e-46}}", NULL, "train.eps", "got 1e-46 (0 as a 32-bit float)" },
    { "{\"train\": {\"lr\": 1e308}}", NULL, "train.lr", "[0, 1000]" },
    { "{\"train\": {\"weight_decay\": 1e300}}", NULL, "train.weight_decay", "got 1e300" },
    { "{\"train\": {\"beta2\": 0.99999999}}", NULL, "train.beta2",
      "(1 as a 32-bit float)" },
    { "{\"train\": {\"grad_clip\": 1e39}}", NULL, "train.grad_clip", "[0, 1e30]" },
    { "{\"train\": {\"grad_clip\": -1}}", NULL, "train.grad_clip", "[0, 1e30]" },
    { "{\"train\": {\"seed\": -1}}", NULL, "train.seed", "got -1" },
    { "{\"train\": {\"decay_fraction\": 0}}", NULL, "train.decay_fraction",
      "a number in (0, 1], got 0" },
    { "{\"train\": {\"eval_batches\": 0}}", NULL, "train.eval_batches", "1..1000000, got 0" },
    { "{\"watchdog_s\": 0}", NULL, "watchdog_s in", "a number in (0, 1000000], got 0" },
    { "{\"devices\": [-1]}", NULL, "devices[0] in", "0..1023, got -1" },
    /* cross-field */
    { "{\"model\": {\"mask_token\": 512}}", NULL,
      "model.mask_token (512) must be below model.vocab (512)", "[MASK] = 103" },
    { "{\"model\": {\"d_model\": 66}}", NULL, "model.heads (4) must divide model.d_model (66)",
      ".json" },
    { "{\"model\": {\"layers\": 3}}", NULL,
      "hanayo has 2 x waves x ranks = 2 x 1 x 2 = 4 stages but model.layers is 3",
      "schedule.split with 4 entries" },
    { "{\"schedule\": {\"kind\": \"interleaved\", \"ranks\": 2, \"chunks\": 4}}", NULL,
      "chunks x ranks = 4 x 2 = 8 stages", NULL },
    { "{\"schedule\": {\"split\": [1, 1, 2]}}", NULL,
      "schedule.split has 3 entries but hanayo has", "4 stages" },
    { "{\"schedule\": {\"split\": [1, 1, 1, 2]}}", NULL,
      "schedule.split sums to 5 layers but model.layers is 4", NULL },
    { "{\"schedule\": {\"split\": [1, -1, 2, 2]}}", NULL, "schedule.split[1] in",
      "0..1024, got -1" },
    { "{\"schedule\": {\"kind\": \"interleaved\", \"ranks\": 3, \"chunks\": 1, "
      "\"micro_batches\": 8}}", NULL, "multiple of schedule.ranks (3)", "e.g. 9" },
    { "{\"devices\": [0, 0, 0]}", NULL, "devices has 3 entries but schedule.ranks is 2", NULL },
    { "{\"train\": {\"lr\": 1e-3, \"min_lr\": 1e-2}}", NULL,
      "train.min_lr (0.01) must be <= train.lr (0.001)", NULL },
    { "{\"checkpoint\": {\"dir\": null, \"every\": 10}}", NULL, "checkpoint.dir is null", NULL },
    { "{\"model\": {\"positions\": 32}}", NULL,
      "model.positions (32) is below model.seq_len (64)", "model.positions >= 64" },
    { "{\"model\": {\"kind\": \"bert\", \"positions\": 512}}", "model.seq_len=1024",
      "model.positions (512) is below model.seq_len (1024) in ",
      "x.json and --set model.seq_len=1024: bert's position table" },
    { NULL, "model.positions=-1", "model.positions in --set", "0..65536, got -1" },
    /* --set */
    { NULL, "schedule.waves", "--set schedule.waves: expected key=value", NULL },
    { NULL, "=3", "key before '=' is missing", NULL },
    { NULL, "schedule.wave=2", "unknown key 'schedule.wave' in --set schedule.wave=2",
      "did you mean 'schedule.waves'?" },
    { NULL, "waves=2", "unknown key 'waves'", "did you mean 'schedule.waves'?" },
    { NULL, "schedule.waves=0", "schedule.waves in --set schedule.waves=0",
      "must be an integer in 1..16, got 0" },
    { NULL, "train.lr=fast", "--set train.lr=fast: the value is not a JSON value",
      "train.lr must be a number in [0, 1000]" },
    { NULL, "train.lr=", "--set train.lr=: the value is not a JSON value (empty)", NULL },
    { NULL, "graph=yes", "--set graph=yes", "true or false" },
    { NULL, "model=3", "'model' is a section", "--set model.kind" },
    { NULL, "model.layers=4.5", "model.layers in --set model.layers=4.5", "got 4.5" },
    { NULL, "schedule.kind=Hanayo", "schedule.kind in --set schedule.kind=Hanayo",
      "did you mean \"hanayo\"?" },
    { NULL, "train.lr_schedule=cosin", "train.lr_schedule in --set train.lr_schedule=cosin",
      "did you mean \"cosine\"?" },
    { NULL, "train.recompute=ful", "train.recompute in --set train.recompute=ful",
      "did you mean \"full\"?" },
    { NULL, "model.heads=5", "model.heads (5) must divide model.d_model (64)",
      "in --set model.heads=5" },
    { NULL, "devices=[0,", "--set devices=[0,", "not a JSON value" },
    { "{\"model\": {\"layers\": 4}}", "model.layers=2", "model.layers is 2",
      "x.json and --set model.layers=2" },
};

static void test_bad_inputs(scratch *s) {
    for (int i = 0; i < NELEM(BAD); i++) {
        const bad_case *b = &BAD[i];
        const char *path = b->text ? scratch_file(s, "x.json", b->text) : NULL;
        const char *sets[1] = { b->set };
        hy_config c;
        hy_error err = { 0 };
        int rc = hy_config_load(&c, path, sets, b->set ? 1 : 0, &err);
        CHECKF(rc == HY_ERR_INPUT && err.status == HY_ERR_INPUT, "case %d: rc %d (%s)", i, rc,
               err.msg);
        CHECKF(strstr(err.msg, b->needle), "case %d: want '%s' in: %s", i, b->needle, err.msg);
        if (b->needle2)
            CHECKF(strstr(err.msg, b->needle2), "case %d: want '%s' in: %s", i, b->needle2,
                   err.msg);
        /* A file's error names the file. */
        if (path && !b->set) CHECKF(strstr(err.msg, path), "case %d: no path in: %s", i, err.msg);
        /* A failed load leaves the defaults, safe to free. */
        CHECK(c.model.layers == 4 && c.path == NULL);
        hy_config_free(&c);
        if (getenv("HY_TEST_VERBOSE")) printf("  %s\n", err.msg);
    }
    CHECK(NELEM(BAD) >= 30);
}

static void test_bad_files(scratch *s) {
    hy_config c;
    hy_error err = { 0 };
    char path[200];
    const char *p;

    snprintf(path, sizeof path, "%s/missing.json", s->dir);
    CHECK(hy_config_load(&c, path, NULL, 0, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "cannot open config") && strstr(err.msg, path) &&
           strstr(err.msg, "No such file or directory"), "%s", err.msg);
    hy_config_free(&c);

    CHECK(hy_config_load(&c, s->dir, NULL, 0, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "is a directory"), "%s", err.msg);
    hy_config_free(&c);

    /* Unreadable: only meaningful when not root (root reads anything). */
    const char *locked = scratch_file(s, "locked.json", "{}");
    chmod(locked, 0);
    if (geteuid() != 0) {
        CHECK(hy_config_load(&c, locked, NULL, 0, &err) == HY_ERR_INPUT);
        CHECKF(strstr(err.msg, "Permission denied"), "%s", err.msg);
        hy_config_free(&c);
    }

    /* Nesting deeper than the parser allows. */
    size_t depth = 5000;
    char *deep = malloc(2 * depth + 32);
    if (deep) {
        size_t n = (size_t)sprintf(deep, "{\"init\": ");
        for (size_t i = 0; i < depth; i++) deep[n++] = '[';
        for (size_t i = 0; i < depth; i++) deep[n++] = ']';
        strcpy(deep + n, "}");
        p = scratch_file(s, "deep.json", deep);
        CHECK(hy_config_load(&c, p, NULL, 0, &err) == HY_ERR_INPUT);
        CHECKF(strstr(err.msg, "invalid JSON") && strstr(err.msg, "depth"), "%s", err.msg);
        hy_config_free(&c);
        free(deep);
    }

    /* A 300-character key and a 200-character value: clipped, not overrun. */
    char fill[301], big[400];
    memset(fill, 'a', 300);
    fill[300] = '\0';
    snprintf(big, sizeof big, "{\"%s\": 1}", fill);
    p = scratch_file(s, "x.json", big);
    CHECK(hy_config_load(&c, p, NULL, 0, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "unknown key 'aaaa") && strstr(err.msg, "valid top-level keys"),
           "%s", err.msg);
    hy_config_free(&c);
    memset(fill, 'k', 200);
    fill[200] = '\0';
    snprintf(big, sizeof big, "{\"schedule\": {\"kind\": \"%s\"}}", fill);
    p = scratch_file(s, "x.json", big);
    CHECK(hy_config_load(&c, p, NULL, 0, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "got a string \"kkkk") && strstr(err.msg, "...\""), "%s", err.msg);
    hy_config_free(&c);

    /* A --set string that is not UTF-8. */
    const char *latin1[] = { "data.train=caf\xe9.bin" };
    CHECK(hy_config_load(&c, NULL, latin1, 1, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "not valid UTF-8"), "%s", err.msg);
    hy_config_free(&c);

    /* A load that fails after allocating strings and arrays frees them. */
    const char *bad[] = { "init=w.bin", "devices=[0]", "data.val=v.bin", "model.heads=3" };
    CHECK(hy_config_load(&c, NULL, bad, 4, &err) == HY_ERR_INPUT);
    CHECK(c.init == NULL && c.devices == NULL && strcmp(c.data.val, "data/synth_val.bin") == 0);
    hy_config_free(&c);
}

static void test_reference(void) {
    char *ref = hy_config_reference();
    CHECK(ref != NULL);
    if (!ref) return;
    static const char *const keys[] = {
        "`model.kind`", "`model.vocab`", "`schedule.split`", "`train.min_lr` | train.lr / 10",
        "`train.seed` | `1234`", "`data.val`", "`init` | `null`", "`checkpoint.every`",
        "`backend`", "`devices` | `[]`", "`graph` | `true`", "`watchdog_s` | `60.0`",
    };
    for (int i = 0; i < NELEM(keys); i++) CHECKF(strstr(ref, keys[i]), "%s", keys[i]);
    /* docs/config.md's table of keys is this text: every row must be
     * there as it is (the tests run from the repository root). */
    FILE *f = fopen("docs/config.md", "r");
    CHECKF(f != NULL, "docs/config.md not found (run from the repository root)");
    char *readme = NULL;
    size_t len = 0;
    if (f) {
        fseek(f, 0, SEEK_END);
        len = (size_t)ftell(f);
        rewind(f);
        readme = calloc(len + 1, 1);
        if (readme && fread(readme, 1, len, f) != len) readme[0] = '\0';
        fclose(f);
    }
    for (char *row = ref, *nl; readme && *row; row = nl + 1) {
        nl = strchr(row, '\n');
        if (!nl) break;
        *nl = '\0';
        CHECKF(strstr(readme, row), "docs/config.md lacks this row of the config reference "
               "(hy_config_reference): %s", row);
    }
    free(readme);
    free(ref);
}

/* help config's text: every key on a line of its own, every line within
 * the width asked for, the code marks of the Markdown gone. */
static void test_help_text(void) {
    static const int widths[] = { 80, 40 };
    for (int w = 0; w < NELEM(widths); w++) {
        char *text = hy_config_help_text(widths[w]);
        CHECK(text != NULL);
        if (!text) continue;
        CHECKF(strstr(text, "\nschedule.waves\n    an integer in 1..16; default 1\n"),
               "width %d", widths[w]);
        CHECK(strstr(text, "\ntrain.min_lr\n") && strstr(text, "\n[model] the network\n"));
        CHECK(strchr(text, '`') == NULL);
        int longest = 0;
        for (const char *line = text; *line; ) {
            size_t n = strcspn(line, "\n");
            int cols = 0;
            for (size_t i = 0; i < n; i++) cols += ((unsigned char)line[i] & 0xc0) != 0x80;
            if (cols > longest) longest = cols;
            line += n + (line[n] == '\n');
        }
        CHECKF(longest <= widths[w], "a line of %d columns at width %d", longest, widths[w]);
        CHECKF(longest > widths[w] - 10, "lines of at most %d columns at width %d: not filled",
               longest, widths[w]);
        free(text);
    }
}

/* A schedule with more stages than layers is refused with settings that
 * fit: each one offered, applied to the refused config, loads; and each
 * "N or fewer" is the most that does (N + 1 is refused again). */
/* A config loaded for one rank (sample) skips only the stage check: more
 * stages than layers and a split of the wrong length load, and resolve to
 * the whole model as one stage on one rank with no schedule; the other
 * checks still refuse. */
static void test_one_rank(void) {
    const char *sets[] = { "model.layers=2", "schedule.split=[1,1,1]" };
    hy_config c;
    hy_error err = { 0 };
    CHECK(hy_config_load(&c, NULL, sets, 2, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "schedule.split has 3 entries"), "%s", err.msg);
    CHECK(hy_config_load(&c, NULL, sets, 1, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "4 stages but model.layers is 2"), "%s", err.msg);
    for (int n = 1; n <= 2; n++) {
        CHECKF(hy_config_load_for(&c, HY_CONFIG_FOR_ONE_RANK, NULL, sets, n, &err) == HY_OK,
               "%s", err.msg);
        CHECK(c.use == HY_CONFIG_FOR_ONE_RANK && c.schedule.ranks == 2);
        hy_run run;
        CHECKF(hy_run_resolve(&run, &c, &err) == HY_OK, "%s", err.msg);
        CHECK(run.model.stages == 1 && run.model.n_layers && run.model.n_layers[0] == 2);
        CHECK(run.backend.ranks == 1 && run.sched.stages == 0 && !run.sched.actions);
        CHECK(run.model.layers == 2 && run.model.vocab == c.model.vocab);
        hy_run_free(&run);
        hy_config_free(&c);
        CHECK(c.use == HY_CONFIG_FOR_STAGES);   /* freed: the defaults */
    }
    const char *bad[] = { "model.layers=2", "model.heads=3" };
    CHECK(hy_config_load_for(&c, HY_CONFIG_FOR_ONE_RANK, NULL, bad, 2, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "model.heads (3) must divide"), "%s", err.msg);
    const char *devs[] = { "model.layers=2", "devices=[0,0,0]" };
    CHECK(hy_config_load_for(&c, HY_CONFIG_FOR_ONE_RANK, NULL, devs, 2, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "devices has 3 entries"), "%s", err.msg);
}

static void test_stage_suggestions(void) {
    static const char *const cases[][4] = {
        { "schedule.ranks=8", NULL },
        { "schedule.ranks=4", "schedule.waves=2", NULL },
        { "schedule.kind=interleaved", "schedule.ranks=4", "schedule.chunks=4", NULL },
        { "schedule.kind=interleaved", "schedule.ranks=8", "schedule.chunks=2", NULL },
        { "schedule.kind=1f1b", "schedule.ranks=13", NULL },
        { "schedule.kind=gpipe", "schedule.ranks=20", NULL },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *sets[6];
        int n = 0;
        while (cases[k][n]) { sets[n] = cases[k][n]; n++; }
        hy_config c;
        hy_error err;
        CHECK(hy_config_load(&c, "configs/gpt2-124m.json", sets, n, &err) == HY_ERR_INPUT);
        char msg[sizeof err.msg];
        memcpy(msg, err.msg, sizeof msg);
        const char *fits = strstr(msg, "settings that fit: ");
        CHECKF(fits, "%s", msg);
        if (!fits) continue;
        int offered = 0;
        for (const char *q = fits; (q = strpbrk(q, "sm")) != NULL; q++) {
            char key[64], value[32], more[96];
            if (sscanf(q, "%63[a-z_.]=%31[a-z0-9]", key, value) != 2 ||
                (strncmp(key, "schedule.", 9) != 0 && strcmp(key, "model.layers") != 0))
                continue;
            char set[96];
            snprintf(set, sizeof set, "%s=%s", key, value);
            sets[n] = set;
            int st = hy_config_load(&c, "configs/gpt2-124m.json", sets, n + 1, &err);
            CHECKF(st == HY_OK, "case %zu, offered %s: %s", k, set, err.msg);
            if (st == HY_OK) hy_config_free(&c);
            if (strncmp(q + strlen(set), " or fewer", 9) == 0) {
                snprintf(more, sizeof more, "%s=%d", key, atoi(value) + 1);
                sets[n] = more;
                CHECKF(hy_config_load(&c, "configs/gpt2-124m.json", sets, n + 1, &err)
                       == HY_ERR_INPUT, "case %zu: %s is not the most that fits", k, set);
            }
            offered++;
        }
        CHECKF(offered >= 2, "case %zu offered %d settings: %s", k, offered, msg);
    }
}

int main(void) {
    scratch s = { .dir = "/tmp/hy-test-config-XXXXXX" };
    if (!mkdtemp(s.dir)) { perror("mkdtemp"); return 1; }
    test_defaults();
    test_help_text();
    test_names();
    test_shipped_configs(&s);
    test_derived_defaults(&s);
    test_positions(&s);
    test_sets(&s);
    test_stage_suggestions();
    test_one_rank();
    test_bad_inputs(&s);
    test_bad_files(&s);
    test_reference();
    scratch_clean(&s);
    return TEST_END("test_config");
}
