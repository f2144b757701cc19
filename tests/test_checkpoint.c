/*
 * test_checkpoint.c — saving and resuming (DESIGN §5 "Model, numerics, data, files").
 *
 * Resuming after step k equals the uninterrupted run bit for bit (with a
 * tied-embedding replica, under 1F1B on 2 ranks, and under hanayo); a
 * checkpoint written by a process killed at random moments never leaves a
 * partial directory under a final name, and every checkpoint left behind
 * loads; a disk that fills up mid-save leaves the earlier checkpoints
 * whole and no partial one, with an error naming checkpoint and file; bad
 * checkpoints give clear errors.
 */
#include "checkpoint.h"
#include "config.h"
#include "data.h"
#include "model.h"
#include "runtime.h"
#include "train.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[64], shard[128];

static int load(hy_config *c, const char *ckdir, const char *const *extra, int n_extra) {
    char data_set[200], ck_set[200];
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    snprintf(ck_set, sizeof ck_set, "checkpoint.dir=%s", ckdir);
    const char *sets[16] = { "model.layers=2", "model.d_model=32", "model.heads=4",
                             "model.seq_len=16", "model.vocab=64", "schedule.micro_batch_size=2",
                             "schedule.micro_batches=4", "train.steps=6", "data.val=null",
                             "backend=cpu", data_set, ck_set };
    int n = 12;
    for (int i = 0; i < n_extra; i++) sets[n++] = extra[i];
    hy_error err;
    hy_config_init(c);
    int rc = hy_config_load(c, NULL, sets, n, &err);
    if (rc) fprintf(stderr, "config: %s\n", err.msg);
    return rc;
}

/* All weights and moments, concatenated. */
static float *snapshot(hy_runtime *rt, const hy_config *c, size_t *n_out) {
    hy_model m;
    hy_error err;
    if (hy_model_build(&m, c, 1, &err)) return NULL;
    size_t total = 0;
    for (int i = 0; i < m.n_params; i++)
        total += m.params[i].kind == HY_P_WTE ? (size_t)m.vocab * m.d_model : m.params[i].numel;
    float *buf = malloc(3 * total * sizeof(float)), *at = buf;
    for (int role = HY_T_PARAM; role <= HY_T_ADAM_V; role++) {
        if (role == HY_T_GRAD) continue;
        for (int i = 0; i < m.n_params; i++) {
            size_t k = m.params[i].kind == HY_P_WTE ? (size_t)m.vocab * m.d_model : m.params[i].numel;
            if (hy_runtime_read(rt, (hy_tensor_role)role, m.params[i].name, at, k, &err)) {
                free(buf);
                hy_model_free(&m);
                return NULL;
            }
            at += k;
        }
    }
    *n_out = (size_t)(at - buf);
    hy_model_free(&m);
    return buf;
}

static int run_steps(hy_runtime *rt, const hy_config *c, int n) {
    hy_error err;
    for (int i = 0; i < n; i++) {
        hy_step_stats st;
        if (hy_train_step(rt, c, &st, &err)) { fprintf(stderr, "%s\n", err.msg); return -1; }
    }
    return 0;
}

static void resume_is_exact(const char *const *extra, int n_extra) {
    char ckdir[128];
    snprintf(ckdir, sizeof ckdir, "%s/ck-%s", dir, extra[0] + 14);
    hy_config c;
    hy_error err;
    if (load(&c, ckdir, extra, n_extra)) { CHECK(0); return; }
    /* Uninterrupted: 6 steps. */
    hy_runtime *a = NULL;
    CHECK(hy_runtime_create(&a, &c, &err) == HY_OK);
    CHECK(run_steps(a, &c, 6) == 0);
    size_t na = 0, nb = 0;
    float *wa = snapshot(a, &c, &na);
    hy_runtime_destroy(a);
    /* Interrupted: 3 steps, save, a new runtime resumes for 3 more. */
    hy_runtime *b = NULL, *b2 = NULL;
    char saved[4096] = "";
    CHECK(hy_runtime_create(&b, &c, &err) == HY_OK);
    CHECK(run_steps(b, &c, 3) == 0);
    CHECKF(hy_checkpoint_save(b, &c, ckdir, saved, &err) == HY_OK, "%s", err.msg);
    hy_runtime_destroy(b);
    CHECK(strstr(saved, "step_000003") != NULL);
    CHECK(hy_runtime_create(&b2, &c, &err) == HY_OK);
    CHECKF(hy_checkpoint_load(b2, &c, saved, &err) == HY_OK, "%s", err.msg);
    CHECK(run_steps(b2, &c, 3) == 0);
    float *wb = snapshot(b2, &c, &nb);
    CHECKF(wa && wb && na == nb && memcmp(wa, wb, na * sizeof(float)) == 0,
           "%s: resumed run differs from the uninterrupted one", extra[0]);
    /* Saving the same step again replaces it. */
    hy_runtime_destroy(b2);
    b2 = NULL;
    CHECK(hy_runtime_create(&b2, &c, &err) == HY_OK);
    CHECK(run_steps(b2, &c, 3) == 0);
    CHECKF(hy_checkpoint_save(b2, &c, ckdir, saved, &err) == HY_OK, "%s", err.msg);
    hy_runtime_destroy(b2);
    free(wa);
    free(wb);

    /* A checkpoint of another model is refused, naming the key. */
    hy_config other;
    const char *bigger[8];
    for (int i = 0; i < n_extra; i++) bigger[i] = extra[i];
    bigger[n_extra] = "model.d_model=64";
    if (load(&other, ckdir, bigger, n_extra + 1) == 0) {
        hy_runtime *o = NULL;
        CHECK(hy_runtime_create(&o, &other, &err) == HY_OK);
        CHECK(hy_checkpoint_load(o, &other, saved, &err) == HY_ERR_INPUT);
        CHECK(strstr(err.msg, "model.d_model") != NULL);
        hy_runtime_destroy(o);
        hy_config_free(&other);
    }
    hy_config_free(&c);
}

static void bad_checkpoints(void) {
    hy_config c;
    hy_error err;
    const char *one[] = { "schedule.kind=gpipe", "schedule.ranks=1" };
    if (load(&c, dir, one, 2)) { CHECK(0); return; }
    hy_runtime *rt = NULL;
    CHECK(hy_runtime_create(&rt, &c, &err) == HY_OK);
    CHECK(hy_checkpoint_load(rt, &c, "/nonexistent/step_000001", &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "not a checkpoint") != NULL);
    char path[160];
    snprintf(path, sizeof path, "%s/fake", dir);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/fake/state.json", dir);
    FILE *f = fopen(path, "w");
    if (f) { fputs("{\"format\": 1, \"step\": -4, \"data_position\": 0}", f); fclose(f); }
    snprintf(path, sizeof path, "%s/fake", dir);
    CHECK(hy_checkpoint_load(rt, &c, path, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "step") != NULL);
    hy_runtime_destroy(rt);
    hy_config_free(&c);
}

/* A child saves checkpoints in a loop; it is killed at varying moments.
 * Every step_* directory left must load, and no temporary may carry a
 * final name. */
static void killed_writer(void) {
    char ckdir[128];
    snprintf(ckdir, sizeof ckdir, "%s/killed", dir);
    const char *sets[] = { "schedule.kind=1f1b", "schedule.ranks=2", "model.layers=4",
                           "model.d_model=64" };
    hy_config c;
    hy_error err;
    if (load(&c, ckdir, sets, 4)) { CHECK(0); return; }
    int survived = 0;
    for (int trial = 0; trial < 12; trial++) {
        int ready[2];
        if (pipe(ready) != 0) { CHECK(0); break; }
        pid_t pid = fork();
        if (pid == 0) {
            close(ready[0]);
            hy_runtime *rt = NULL;
            if (hy_runtime_create(&rt, &c, &err)) _exit(3);
            for (int s = 0; s < 1000; s++) {
                hy_step_stats st;
                if (hy_train_step(rt, &c, &st, &err)) _exit(4);
                if (hy_checkpoint_save(rt, &c, ckdir, NULL, &err)) _exit(5);
                if (s == 0 && write(ready[1], "k", 1) != 1) _exit(6);   /* one is whole */
            }
            _exit(0);
        }
        close(ready[1]);
        char k;
        CHECK(read(ready[0], &k, 1) == 1);   /* the first checkpoint is done */
        close(ready[0]);
        /* Then kill it somewhere in the next saves and steps. */
        struct timespec nap = { 0, 1000000L + trial * 3000000L };
        nanosleep(&nap, NULL);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status));
        /* What is left must be whole. */
        DIR *d = opendir(ckdir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            /* Final names are step_NNNNNN; anything with a dot is a
             * temporary or a replaced one being removed. */
            if (strncmp(e->d_name, "step_", 5) != 0 || strchr(e->d_name, '.')) continue;
            char path[400];
            snprintf(path, sizeof path, "%s/%s", ckdir, e->d_name);
            hy_runtime *rt = NULL;
            CHECK(hy_runtime_create(&rt, &c, &err) == HY_OK);
            CHECKF(hy_checkpoint_load(rt, &c, path, &err) == HY_OK, "%s: %s", path, err.msg);
            hy_runtime_destroy(rt);
            survived++;
        }
        if (d) closedir(d);
    }
    CHECK(survived >= 12);   /* at least the one finished before each kill */
    hy_config_free(&c);
}

/* The names in dir other than "." and "..", sorted, joined by spaces. */
static void listing(const char *d, char *out, size_t cap) {
    struct dirent **names = NULL;
    int n = scandir(d, &names, NULL, alphasort);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        const char *s = names[i]->d_name;
        if (strcmp(s, ".") != 0 && strcmp(s, "..") != 0) {
            size_t used = strlen(out);
            snprintf(out + used, cap - used, "%s%s", used ? " " : "", s);
        }
        free(names[i]);
    }
    free(names);
}

static size_t file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (size_t)sb.st_size : 0;
}

/* A disk that fills up while a checkpoint is written. RLIMIT_FSIZE is the
 * kernel's own limit on the size of any file this process writes: with
 * SIGXFSZ ignored, the write that would pass it fails with EFBIG, exactly
 * where a full disk fails with ENOSPC, with no root and no hook in the
 * code under test (tests/test_disk_full.sh does the real ENOSPC on a small
 * tmpfs where it may mount one). For limits that stop each file at a
 * different point: the save fails as a runtime error naming the
 * checkpoint, the file and the system's reason; the checkpoint directory
 * holds exactly what it held before (no partial step, no temporary); the
 * earlier checkpoint still loads and gives back the weights it saved; and
 * once there is room again the same runtime saves fine. */
static void disk_full(void) {
    char ckdir[128], first[200], before[256], after[256];
    snprintf(ckdir, sizeof ckdir, "%s/full", dir);
    const char *one[] = { "schedule.kind=gpipe", "schedule.ranks=1" };
    hy_config c;
    hy_error err;
    if (load(&c, ckdir, one, 2)) { CHECK(0); return; }
    hy_runtime *rt = NULL, *back = NULL;
    CHECK(hy_runtime_create(&rt, &c, &err) == HY_OK);
    CHECK(run_steps(rt, &c, 1) == 0);
    CHECKF(hy_checkpoint_save(rt, &c, ckdir, first, &err) == HY_OK, "%s", err.msg);
    size_t n_saved = 0, n_back = 0;
    float *saved = snapshot(rt, &c, &n_saved);
    char path[300];
    snprintf(path, sizeof path, "%s/model.safetensors", first);
    size_t model_bytes = file_size(path);
    CHECK(model_bytes > 8192);
    listing(ckdir, before, sizeof before);

    struct rlimit old_lim;
    struct sigaction ign = { .sa_handler = SIG_IGN }, old_act;
    CHECK(getrlimit(RLIMIT_FSIZE, &old_lim) == 0);
    CHECK(sigaction(SIGXFSZ, &ign, &old_act) == 0);
    /* Nothing fits; the header fits; half the weights; the weights but
     * half the moments. */
    const rlim_t limits[] = { 0, 4096, model_bytes / 2, model_bytes + model_bytes / 2 };
    const char *const fails_in[] = { "model.safetensors", "model.safetensors",
                                     "model.safetensors", "optimizer.safetensors" };
    for (int i = 0; i < 4; i++) {
        CHECK(run_steps(rt, &c, 1) == 0);
        struct rlimit lim = old_lim;
        lim.rlim_cur = limits[i];
        CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
        int rc = hy_checkpoint_save(rt, &c, ckdir, NULL, &err);
        CHECK(setrlimit(RLIMIT_FSIZE, &old_lim) == 0);
        char step_name[32];
        snprintf(step_name, sizeof step_name, "step_%06d", i + 2);
        CHECKF(rc == HY_ERR_RUNTIME, "limit %zu: save gave %d: %s", (size_t)limits[i], rc,
               err.msg);
        CHECKF(strstr(err.msg, step_name) && strstr(err.msg, fails_in[i]) &&
                   strstr(err.msg, strerror(EFBIG)) && strstr(err.msg, "not saved"),
               "limit %zu: the error should name %s, %s and say '%s': %s", (size_t)limits[i],
               step_name, fails_in[i], strerror(EFBIG), err.msg);
        listing(ckdir, after, sizeof after);
        CHECKF(strcmp(before, after) == 0, "limit %zu: the directory held '%s', now '%s'",
               (size_t)limits[i], before, after);
    }
    CHECK(sigaction(SIGXFSZ, &old_act, NULL) == 0);

    /* The earlier checkpoint is whole: it loads, with the weights of step 1. */
    CHECK(hy_runtime_create(&back, &c, &err) == HY_OK);
    CHECKF(hy_checkpoint_load(back, &c, first, &err) == HY_OK, "%s", err.msg);
    float *loaded = snapshot(back, &c, &n_back);
    CHECK(saved && loaded && n_saved == n_back &&
          memcmp(saved, loaded, n_saved * sizeof(float)) == 0);
    hy_runtime_destroy(back);
    /* With room again, the same run saves its current step. */
    CHECKF(hy_checkpoint_save(rt, &c, ckdir, path, &err) == HY_OK, "%s", err.msg);
    CHECK(strstr(path, "step_000005") != NULL);
    listing(ckdir, after, sizeof after);
    CHECKF(strcmp(after, "step_000001 step_000005") == 0, "after saving again: %s", after);
    free(saved);
    free(loaded);
    hy_runtime_destroy(rt);
    hy_config_free(&c);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/hy-ck-XXXXXX");
    if (!mkdtemp(dir)) { CHECK(0); return TEST_END("checkpoint"); }
    snprintf(shard, sizeof shard, "%s/train.bin", dir);
    uint16_t *tok = malloc(30000 * sizeof *tok);
    hy_error err;
    if (hy_synth_tokens(tok, 30000, 64, 5, 0, &err) || hy_shard_write(shard, tok, 30000, &err)) {
        CHECK(0);
        return TEST_END("checkpoint");
    }
    free(tok);
    const char *f1[] = { "schedule.kind=1f1b", "schedule.ranks=2" };   /* wte replica on rank 1 */
    const char *f2[] = { "schedule.kind=hanayo", "schedule.ranks=1", "schedule.waves=1" };
    resume_is_exact(f1, 2);
    resume_is_exact(f2, 3);
    bad_checkpoints();
    disk_full();
    killed_writer();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_END("checkpoint");
}
