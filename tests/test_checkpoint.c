/*
 * test_checkpoint.c — saving and resuming (DESIGN §5 "Model, numerics, data, files").
 *
 * Resuming after step k equals the uninterrupted run bit for bit (with a
 * tied-embedding replica, under 1F1B on 2 ranks, and under hanayo); a
 * checkpoint written by a process killed at random moments never leaves a
 * partial directory under a final name, and every checkpoint left behind
 * loads; a disk that fills up mid-save leaves the earlier checkpoints
 * whole and no partial one, with an error naming checkpoint and file; bad
 * checkpoints give clear errors, and a BERT resumes masking with its
 * checkpoint's mask id only.
 */
#include "checkpoint.h"
#include "cmd_checkpoint.h"
#include "cmd_train.h"
#include "config.h"
#include "data.h"
#include "model.h"
#include "runtime.h"
#include "train.h"
#include "test.h"
#include "lib/testrun.h"

#include <dirent.h>
#include <jansson.h>
#include <limits.h>
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

static int load(hy_run *c, const char *ckdir, const char *const *extra, int n_extra) {
    char data_set[200], ck_set[200];
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    snprintf(ck_set, sizeof ck_set, "checkpoint.dir=%s", ckdir);
    const char *sets[24] = { "model.layers=2", "model.d_model=32", "model.heads=4",
                             "model.seq_len=16", "model.vocab=64", "schedule.micro_batch_size=2",
                             "schedule.micro_batches=4", "train.steps=6", "data.val=null",
                             "backend=cpu", data_set, ck_set };
    int n = 12;
    for (int i = 0; i < n_extra; i++) sets[n++] = extra[i];
    hy_error err;
    int rc = hy_test_run_load(c, NULL, sets, n, &err);
    if (rc) fprintf(stderr, "config: %s\n", err.msg);
    return rc;
}

/* All weights and moments, concatenated. */
static float *snapshot(hy_runtime *rt, const hy_run *c, size_t *n_out) {
    hy_model m;
    hy_error err;
    if (hy_test_model_copy(&m, c, 1, &err)) return NULL;
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

static int run_steps(hy_runtime *rt, int n) {
    hy_error err;
    for (int i = 0; i < n; i++) {
        hy_step_stats st;
        if (hy_train_step(rt, &st, &err)) { fprintf(stderr, "%s\n", err.msg); return -1; }
    }
    return 0;
}

static void resume_is_exact(const char *const *extra, int n_extra) {
    char ckdir[128];
    snprintf(ckdir, sizeof ckdir, "%s/ck-%s", dir, extra[0] + 14);
    hy_run c;
    hy_error err;
    int unverified = 0;
    if (load(&c, ckdir, extra, n_extra)) { CHECK(0); return; }
    /* Uninterrupted: 6 steps. */
    hy_runtime *a = NULL;
    CHECK(hy_runtime_create(&a, &c, &err) == HY_OK);
    CHECK(run_steps(a, 6) == 0);
    size_t na = 0, nb = 0;
    float *wa = snapshot(a, &c, &na);
    hy_runtime_destroy(a);
    /* Interrupted: 3 steps, save, a new runtime resumes for 3 more. */
    hy_runtime *b = NULL, *b2 = NULL;
    char saved[4096] = "";
    CHECK(hy_runtime_create(&b, &c, &err) == HY_OK);
    CHECK(run_steps(b, 3) == 0);
    CHECKF(hy_checkpoint_save(b, ckdir, saved, &err) == HY_OK, "%s", err.msg);
    hy_runtime_destroy(b);
    CHECK(strstr(saved, "step_000003") != NULL);
    CHECK(hy_runtime_create(&b2, &c, &err) == HY_OK);
    CHECKF(hy_checkpoint_load(b2, saved, &unverified, &err) == HY_OK, "%s", err.msg);
    CHECK(run_steps(b2, 3) == 0);
    float *wb = snapshot(b2, &c, &nb);
    CHECKF(wa && wb && na == nb && memcmp(wa, wb, na * sizeof(float)) == 0,
           "%s: resumed run differs from the uninterrupted one", extra[0]);
    /* Saving the same step again replaces it. */
    hy_runtime_destroy(b2);
    b2 = NULL;
    CHECK(hy_runtime_create(&b2, &c, &err) == HY_OK);
    CHECK(run_steps(b2, 3) == 0);
    CHECKF(hy_checkpoint_save(b2, ckdir, saved, &err) == HY_OK, "%s", err.msg);
    hy_runtime_destroy(b2);
    free(wa);
    free(wb);

    /* A checkpoint of another model is refused, naming the key. */
    hy_run other;
    const char *bigger[8];
    for (int i = 0; i < n_extra; i++) bigger[i] = extra[i];
    bigger[n_extra] = "model.d_model=64";
    if (load(&other, ckdir, bigger, n_extra + 1) == 0) {
        hy_runtime *o = NULL;
        CHECK(hy_runtime_create(&o, &other, &err) == HY_OK);
        CHECK(hy_checkpoint_load(o, saved, &unverified, &err) == HY_ERR_INPUT);
        CHECK(strstr(err.msg, "model.d_model") != NULL);
        hy_runtime_destroy(o);
        hy_run_free(&other);
    }
    hy_run_free(&c);
}

static void bad_checkpoints(void) {
    hy_run c;
    hy_error err;
    int unverified = 0;
    const char *one[] = { "schedule.kind=gpipe", "schedule.ranks=1" };
    if (load(&c, dir, one, 2)) { CHECK(0); return; }
    hy_runtime *rt = NULL;
    CHECK(hy_runtime_create(&rt, &c, &err) == HY_OK);
    CHECK(hy_checkpoint_load(rt, "/nonexistent/step_000001", &unverified, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "cannot open a checkpoint's state") != NULL);
    char path[160];
    snprintf(path, sizeof path, "%s/fake", dir);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/fake/state.json", dir);
    FILE *f = fopen(path, "w");
    if (f) { fputs("{\"format\": 1, \"step\": -4, \"data_position\": 0}", f); fclose(f); }
    snprintf(path, sizeof path, "%s/fake", dir);
    CHECK(hy_checkpoint_load(rt, path, &unverified, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "step") != NULL);
    hy_runtime_destroy(rt);
    hy_run_free(&c);
}

/* A child saves checkpoints in a loop; it is killed at varying moments.
 * Every step_* directory left must load, and no temporary may carry a
 * final name. */
static void killed_writer(void) {
    char ckdir[128];
    snprintf(ckdir, sizeof ckdir, "%s/killed", dir);
    const char *sets[] = { "schedule.kind=1f1b", "schedule.ranks=2", "model.layers=4",
                           "model.d_model=64" };
    hy_run c;
    hy_error err;
    int unverified = 0;
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
                if (hy_train_step(rt, &st, &err)) _exit(4);
                if (hy_checkpoint_save(rt, ckdir, NULL, &err)) _exit(5);
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
            CHECKF(hy_checkpoint_load(rt, path, &unverified, &err) == HY_OK, "%s: %s", path, err.msg);
            hy_runtime_destroy(rt);
            survived++;
        }
        if (d) closedir(d);
    }
    CHECK(survived >= 12);   /* at least the one finished before each kill */
    hy_run_free(&c);
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
    hy_run c;
    hy_error err;
    int unverified = 0;
    if (load(&c, ckdir, one, 2)) { CHECK(0); return; }
    hy_runtime *rt = NULL, *back = NULL;
    CHECK(hy_runtime_create(&rt, &c, &err) == HY_OK);
    CHECK(run_steps(rt, 1) == 0);
    CHECKF(hy_checkpoint_save(rt, ckdir, first, &err) == HY_OK, "%s", err.msg);
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
        CHECK(run_steps(rt, 1) == 0);
        struct rlimit lim = old_lim;
        lim.rlim_cur = limits[i];
        CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
        int rc = hy_checkpoint_save(rt, ckdir, NULL, &err);
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
    CHECKF(hy_checkpoint_load(back, first, &unverified, &err) == HY_OK, "%s", err.msg);
    float *loaded = snapshot(back, &c, &n_back);
    CHECK(saved && loaded && n_saved == n_back &&
          memcmp(saved, loaded, n_saved * sizeof(float)) == 0);
    hy_runtime_destroy(back);
    /* With room again, the same run saves its current step. */
    CHECKF(hy_checkpoint_save(rt, ckdir, path, &err) == HY_OK, "%s", err.msg);
    CHECK(strstr(path, "step_000005") != NULL);
    listing(ckdir, after, sizeof after);
    CHECKF(strcmp(after, "step_000001 step_000005") == 0, "after saving again: %s", after);
    free(saved);
    free(loaded);
    hy_runtime_destroy(rt);
    hy_run_free(&c);
}

/* ---- Integrity, one writer, retention ------------------------------------ */

/* A fresh one-rank run of `steps` steps saving each into ckdir. */
static int save_steps(const hy_run *c, const char *ckdir, int steps) {
    hy_runtime *rt = NULL;
    hy_error err;
    int rc = hy_runtime_create(&rt, c, &err);
    for (int i = 0; i < steps && !rc; i++) {
        rc = run_steps(rt, 1);
        if (!rc) rc = hy_checkpoint_save(rt, ckdir, NULL, &err);
    }
    if (rc) fprintf(stderr, "save_steps: %s\n", err.msg);
    hy_runtime_destroy(rt);
    return rc;
}

/* Loads checkpoint path into a new runtime of c: its status, the error in
 * err, *unverified. */
static int try_load(const hy_run *c, const char *path, int *unverified, hy_error *err) {
    hy_runtime *rt = NULL;
    int rc = hy_runtime_create(&rt, c, err);
    if (!rc) rc = hy_checkpoint_load(rt, path, unverified, err);
    hy_runtime_destroy(rt);
    return rc;
}

static long file_bytes(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static void flip_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    int b = f && fseek(f, at, SEEK_SET) == 0 ? fgetc(f) : EOF;
    CHECKF(b != EOF, "%s: cannot read byte %ld", path, at);
    if (b != EOF && fseek(f, at, SEEK_SET) == 0) fputc(b ^ 0x10, f);
    if (f) fclose(f);
}

/* A flipped byte anywhere in any file of a checkpoint is refused, by load
 * and by verify, with the file named and the previous checkpoint offered;
 * flipped back, the checkpoint loads again. */
static void flipped_bytes(const hy_run *c, const char *ckdir) {
    static const char *const files[] = { "model.safetensors", "optimizer.safetensors",
                                         "config.json", "state.json" };
    char path[300];
    hy_error err;
    int unverified = -1;
    for (int f = 0; f < 4; f++) {
        snprintf(path, sizeof path, "%s/step_000002/%s", ckdir, files[f]);
        long n = file_bytes(path);
        CHECKF(n > 16, "%s: %ld bytes", path, n);
        /* The first byte, one inside (the tensor data of a safetensors
         * file: past its header), the last. */
        const long at[3] = { 0, n - n / 3, n - 1 };
        for (int k = 0; k < 3 && n > 16; k++) {
            flip_byte(path, at[k]);
            snprintf(path, sizeof path, "%s/step_000002", ckdir);
            int rc = try_load(c, path, &unverified, &err);
            CHECKF(rc == HY_ERR_INPUT && strstr(err.msg, files[f]) &&
                       strstr(err.msg, "step_000001"),
                   "%s byte %ld flipped: load gave %d: %s", files[f], at[k], rc, err.msg);
            CHECKF(strstr(err.msg, "checksum mismatch") || strstr(err.msg, "not a checkpoint"),
                   "%s byte %ld: %s", files[f], at[k], err.msg);
            CHECK(hy_checkpoint_verify(path, &unverified, &err) == HY_ERR_INPUT);
            snprintf(path, sizeof path, "%s/step_000002/%s", ckdir, files[f]);
            flip_byte(path, at[k]);
        }
    }
    snprintf(path, sizeof path, "%s/step_000002", ckdir);
    CHECKF(try_load(c, path, &unverified, &err) == HY_OK && unverified == 0, "%s", err.msg);
}

/* A file cut short, or missing, is refused naming it. */
static void truncated_files(const hy_run *c, const char *ckdir) {
    static const char *const files[] = { "model.safetensors", "optimizer.safetensors",
                                         "state.json" };
    char path[300], ck[200];
    snprintf(ck, sizeof ck, "%s/step_000002", ckdir);
    hy_error err;
    int unverified;
    for (int f = 0; f < 3; f++) {
        snprintf(path, sizeof path, "%s/%s", ck, files[f]);
        long n = file_bytes(path);
        char *keep = malloc((size_t)n);
        FILE *in = fopen(path, "rb");
        CHECK(keep && in && fread(keep, 1, (size_t)n, in) == (size_t)n);
        if (in) fclose(in);
        CHECK(truncate(path, n - 1) == 0);
        int rc = try_load(c, ck, &unverified, &err);
        CHECKF(rc == HY_ERR_INPUT && strstr(err.msg, files[f]), "%s cut: %d: %s", files[f], rc,
               err.msg);
        if (f < 2) CHECKF(strstr(err.msg, "cut short") != NULL, "%s", err.msg);
        if (f < 2) {
            CHECK(unlink(path) == 0);
            rc = try_load(c, ck, &unverified, &err);
            CHECKF(rc == HY_ERR_INPUT && strstr(err.msg, files[f]), "%s gone: %d: %s", files[f],
                   rc, err.msg);
        }
        FILE *out = fopen(path, "wb");
        CHECK(out && keep && fwrite(keep, 1, (size_t)n, out) == (size_t)n);
        if (out) fclose(out);
        free(keep);
    }
    CHECKF(try_load(c, ck, &unverified, &err) == HY_OK, "%s", err.msg);
}

/* Rewrites checkpoint ck's state.json as format 1 wrote it (before
 * checksums: no files, data or checksum), and without config.model's key
 * `model_key` (NULL: all of them), as before that key existed. */
static void make_legacy(const char *ck, const char *model_key) {
    char state[300];
    snprintf(state, sizeof state, "%s/state.json", ck);
    json_error_t je;
    json_t *o = json_load_file(state, 0, &je);
    CHECK(o != NULL);
    if (!o) return;
    const char *gone[] = { "files", "data", "checksum", "loss", "time" };
    for (int i = 0; i < 5; i++) json_object_del(o, gone[i]);
    json_object_set_new(o, "format", json_integer(1));
    if (model_key)
        CHECK(json_object_del(json_object_get(json_object_get(o, "config"), "model"),
                              model_key) == 0);
    CHECK(json_dump_file(o, state, JSON_INDENT(2)) == 0);
    json_decref(o);
}

/* A checkpoint of format 1 (before checksums: no files, data or checksum
 * in state.json) still loads, flagged unverified; verify says so. */
static void legacy_format(const hy_run *c, const char *ckdir) {
    char ck[200];
    snprintf(ck, sizeof ck, "%s/legacy", ckdir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cp -r %s/step_000002 %s", ckdir, ck);
    CHECK(system(cmd) == 0);
    make_legacy(ck, NULL);
    hy_error err;
    int unverified = 0;
    CHECKF(try_load(c, ck, &unverified, &err) == HY_OK && unverified == 1, "%s", err.msg);
    CHECK(hy_checkpoint_verify(ck, &unverified, &err) == HY_OK && unverified == 1);
    /* Its weights as init: checked (nothing to check) and flagged. */
    char model[320];
    snprintf(model, sizeof model, "%s/model.safetensors", ck);
    CHECK(hy_checkpoint_verify_file(model, NULL, &unverified, &err) == HY_OK && unverified == 1);
    /* A format-2 state.json without its checksum line is not taken for one. */
    snprintf(cmd, sizeof cmd, "rm -rf %s", ck);
    CHECK(system(cmd) == 0);
}

/* The weights file of a damaged checkpoint as init is refused; a weights
 * file outside any checkpoint passes the check. */
static void init_checked(const hy_run *c, const char *ckdir) {
    char model[300];
    snprintf(model, sizeof model, "%s/step_000002/model.safetensors", ckdir);
    hy_error err;
    int unverified = -1;
    CHECK(hy_checkpoint_verify_file(model, NULL, &unverified, &err) == HY_OK && unverified == 0);
    hy_run ci = *c;
    ci.init = model;
    flip_byte(model, file_bytes(model) / 2);
    hy_runtime *rt = NULL;
    int rc = hy_train_runtime(&rt, &ci, NULL, NULL, NULL, &err);
    CHECKF(rc == HY_ERR_INPUT && strstr(err.msg, "model.safetensors") &&
               strstr(err.msg, "checksum mismatch") && rt == NULL,
           "damaged init: %d: %s", rc, err.msg);
    flip_byte(model, file_bytes(model) / 2);
    CHECKF(hy_train_runtime(&rt, &ci, NULL, NULL, NULL, &err) == HY_OK, "%s", err.msg);
    hy_runtime_destroy(rt);
    CHECK(hy_checkpoint_verify_file(shard, NULL, &unverified, &err) == HY_OK && unverified == 0);
}

/* Another shard, or another micro-batch layout, would give the data
 * position other tokens: refused, naming what differs. */
static void other_data(const char *ckdir) {
    char other[200], set[260], ck[200];
    snprintf(other, sizeof other, "%s/other.bin", dir);
    snprintf(ck, sizeof ck, "%s/step_000002", ckdir);
    uint16_t *tok = malloc(30000 * sizeof *tok);
    hy_error err;
    CHECK(tok && hy_synth_tokens(tok, 30000, 64, 6, 0, &err) == HY_OK &&
          hy_shard_write(other, tok, 30000, &err) == HY_OK);   /* same size, another seed */
    free(tok);
    snprintf(set, sizeof set, "data.train=%s", other);
    const char *shard_sets[] = { "schedule.kind=gpipe", "schedule.ranks=1", set };
    const char *layout_sets[] = { "schedule.kind=gpipe", "schedule.ranks=1",
                                  "schedule.micro_batches=2" };
    const char *const *sets[2] = { shard_sets, layout_sets };
    const char *want[2] = { "other tokens", "schedule.micro_batches" };
    for (int i = 0; i < 2; i++) {
        hy_run c;
        int unverified;
        if (load(&c, ckdir, sets[i], 3)) { CHECK(0); continue; }
        int rc = try_load(&c, ck, &unverified, &err);
        CHECKF(rc == HY_ERR_INPUT && strstr(err.msg, want[i]) && strstr(err.msg, "init ="),
               "%s: %d: %s", want[i], rc, err.msg);
        hy_run_free(&c);
    }
}

/* BERT's mask id on resume: a checkpoint that records model.mask_token
 * resumes with that id only. One older than the key masked with
 * model.vocab - 1; under a run whose id differs (bert-base's 30522 ids
 * now default to 103) it is refused, naming the key and the id to set,
 * and with that id it resumes. */
static void bert_mask_token(void) {
    char ckdir[128], ck[200];
    snprintf(ckdir, sizeof ckdir, "%s/mask", dir);
    snprintf(ck, sizeof ck, "%s/step_000001", ckdir);
    const char *sets[][5] = {
        { "model.kind=bert", "model.vocab=30522", "schedule.kind=gpipe", "schedule.ranks=1" },
        { "model.kind=bert", "model.vocab=30522", "schedule.kind=gpipe", "schedule.ranks=1",
          "model.mask_token=30521" },
        { "model.kind=bert", "model.vocab=30522", "schedule.kind=gpipe", "schedule.ranks=1",
          "model.mask_token=7" },
    };
    hy_run c[3];
    for (int i = 0; i < 3; i++)
        if (load(&c[i], ckdir, sets[i], i ? 5 : 4)) {
            CHECK(0);
            while (i--) hy_run_free(&c[i]);
            return;
        }
    CHECK(c[0].model.mask_token == 103);
    CHECK(save_steps(&c[0], ckdir, 1) == 0);
    hy_error err;
    int unverified;
    CHECKF(try_load(&c[0], ck, &unverified, &err) == HY_OK, "%s", err.msg);
    int rc = try_load(&c[2], ck, &unverified, &err);
    CHECKF(rc == HY_ERR_INPUT && strstr(err.msg, "saved with model.mask_token = 103, the config "
                                        "has 7") && strstr(err.msg, "model.mask_token=103"),
           "%d: %s", rc, err.msg);
    make_legacy(ck, "mask_token");
    rc = try_load(&c[0], ck, &unverified, &err);
    CHECKF(rc == HY_ERR_INPUT && strstr(err.msg, "before model.mask_token existed") &&
               strstr(err.msg, "model.vocab - 1 = 30521; the config has model.mask_token = 103") &&
               strstr(err.msg, "--set model.mask_token=30521"),
           "%d: %s", rc, err.msg);
    CHECKF(try_load(&c[1], ck, &unverified, &err) == HY_OK && unverified == 1, "%s", err.msg);
    for (int i = 0; i < 3; i++) hy_run_free(&c[i]);
}

/* hanayo checkpoint verify and list, through cmd_checkpoint.h. */
static void verify_and_list(const char *ckdir) {
    char text[4096], path[300];
    hy_error err;
    FILE *f = tmpfile();
    CHECK(f && cli_checkpoint_verify(ckdir, f, &err) == HY_OK);
    size_t n = f && fseek(f, 0, SEEK_SET) == 0 ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    CHECKF(strstr(text, "ok ") && strstr(text, "step_000001") && strstr(text, "step_000002") &&
               !strstr(text, "BAD"), "%s", text);
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/step_000001/optimizer.safetensors", ckdir);
    flip_byte(path, 100);
    f = tmpfile();
    CHECK(f && cli_checkpoint_verify(ckdir, f, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "1 of 2") != NULL, "%s", err.msg);
    n = f && fseek(f, 0, SEEK_SET) == 0 ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    CHECKF(strstr(text, "BAD") && strstr(text, "optimizer.safetensors"), "%s", text);
    if (f) fclose(f);
    flip_byte(path, 100);
    f = tmpfile();
    CHECK(f && cli_checkpoint_list(ckdir, f, &err) == HY_OK);
    n = f && fseek(f, 0, SEEK_SET) == 0 ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    CHECKF(strstr(text, "step") && strstr(text, "loss") && strstr(text, "KiB") &&
               strstr(text, "Z "), "%s", text);
    if (f) fclose(f);
    char newest[PATH_MAX];
    CHECK(hy_checkpoint_resolve("--resume", ckdir, newest, &err) == HY_OK &&
          strstr(newest, "step_000002") != NULL);
}

static void integrity(void) {
    char ckdir[128];
    snprintf(ckdir, sizeof ckdir, "%s/integrity", dir);
    const char *one[] = { "schedule.kind=gpipe", "schedule.ranks=1" };
    hy_run c;
    if (load(&c, ckdir, one, 2)) { CHECK(0); return; }
    CHECK(save_steps(&c, ckdir, 2) == 0);
    flipped_bytes(&c, ckdir);
    truncated_files(&c, ckdir);
    legacy_format(&c, ckdir);
    init_checked(&c, ckdir);
    other_data(ckdir);
    verify_and_list(ckdir);
    hy_run_free(&c);
}

/* One writer per directory: a second lock is refused naming the directory
 * and the holder's pid; a holder killed outright leaves nothing stuck. */
static void one_writer(void) {
    char ckdir[128], pid_text[32];
    snprintf(ckdir, sizeof ckdir, "%s/locked", dir);
    hy_checkpoint_lock a, b;
    hy_error err;
    CHECKF(hy_checkpoint_lock_dir(ckdir, &a, &err) == HY_OK, "%s", err.msg);
    snprintf(pid_text, sizeof pid_text, "pid %ld", (long)getpid());
    CHECK(hy_checkpoint_lock_dir(ckdir, &b, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, ckdir) && strstr(err.msg, pid_text), "%s", err.msg);
    /* cli_train_run refuses at its start, before it trains or writes. */
    const char *one[] = { "schedule.kind=gpipe", "schedule.ranks=1" };
    hy_run c;
    if (load(&c, ckdir, one, 2) == 0) {
        FILE *out = tmpfile();
        CHECK(cli_train_run(&c, NULL, out, &err) == HY_ERR_INPUT && strstr(err.msg, "in use"));
        CHECK(out && ftell(out) == 0);
        if (out) fclose(out);
        hy_run_free(&c);
    }
    hy_checkpoint_unlock(&a);
    CHECKF(hy_checkpoint_lock_dir(ckdir, &b, &err) == HY_OK, "%s", err.msg);
    hy_checkpoint_unlock(&b);

    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]);
        hy_checkpoint_lock held;
        if (hy_checkpoint_lock_dir(ckdir, &held, &err)) _exit(3);
        if (write(ready[1], "k", 1) != 1) _exit(4);
        for (;;) pause();
    }
    close(ready[1]);
    char k;
    CHECK(read(ready[0], &k, 1) == 1);
    close(ready[0]);
    snprintf(pid_text, sizeof pid_text, "pid %ld", (long)pid);
    CHECK(hy_checkpoint_lock_dir(ckdir, &b, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, pid_text) != NULL, "%s", err.msg);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECKF(hy_checkpoint_lock_dir(ckdir, &b, &err) == HY_OK, "after the kill: %s", err.msg);
    hy_checkpoint_unlock(&b);
}

/* checkpoint.dir/.lock as a symbolic link is never followed: the file it
 * points at keeps its contents, the lock is refused naming the link; the
 * same for a .lock that is a FIFO or a directory. */
static void lock_not_followed(void) {
    char ckdir[128], target[160], link[160];
    snprintf(ckdir, sizeof ckdir, "%s/linked", dir);
    snprintf(target, sizeof target, "%s/precious.txt", dir);
    snprintf(link, sizeof link, "%s/.lock", ckdir);
    const char keep[] = "precious contents\n";
    FILE *f = fopen(target, "w");
    CHECK(f && fputs(keep, f) >= 0 && fclose(f) == 0);
    CHECK(mkdir(ckdir, 0777) == 0 && symlink(target, link) == 0);
    hy_checkpoint_lock lk;
    hy_error err;
    CHECK(hy_checkpoint_lock_dir(ckdir, &lk, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, link) && strstr(err.msg, "symbolic link"), "%s", err.msg);
    char got[64] = { 0 };
    f = fopen(target, "r");
    CHECK(f && fread(got, 1, sizeof got - 1, f) == strlen(keep));
    if (f) fclose(f);
    CHECKF(!strcmp(got, keep), "the link's target now holds '%s'", got);
    /* A dangling link would be created through: refused the same. */
    CHECK(unlink(target) == 0);
    CHECK(hy_checkpoint_lock_dir(ckdir, &lk, &err) == HY_ERR_INPUT);
    CHECK(access(target, F_OK) != 0);
    CHECK(unlink(link) == 0);
    /* A FIFO (opened without waiting for a writer) and a directory. */
    CHECK(mkfifo(link, 0666) == 0);
    CHECK(hy_checkpoint_lock_dir(ckdir, &lk, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, link) && strstr(err.msg, "is a FIFO, not a regular file"), "%s",
           err.msg);
    CHECK(unlink(link) == 0 && mkdir(link, 0777) == 0);
    CHECK(hy_checkpoint_lock_dir(ckdir, &lk, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, link), "%s", err.msg);
    CHECK(rmdir(link) == 0);
    /* Once it is gone, the lock is taken as usual. */
    CHECKF(hy_checkpoint_lock_dir(ckdir, &lk, &err) == HY_OK, "%s", err.msg);
    hy_checkpoint_unlock(&lk);
    rmdir(ckdir);
}

/* cli_train_run to `steps` with checkpoint.every = 1 and checkpoint.keep =
 * keep, resuming from ckdir's newest when it has one. */
static int train_keep(const char *ckdir, int steps, const char *keep) {
    char steps_set[32];
    snprintf(steps_set, sizeof steps_set, "train.steps=%d", steps);
    const char *sets[] = { "schedule.kind=gpipe", "schedule.ranks=1", "checkpoint.every=1",
                           keep, steps_set };
    hy_run c;
    if (load(&c, ckdir, sets, 5)) return -1;
    hy_error err;
    hy_checkpoint_info *found = NULL;
    int n_found = 0;
    /* Each call trains on past the last one's train.steps: another
     * learning-rate schedule, allowed. */
    cli_train_opts o = { .resume = NULL, .allow_schedule_change = 1 };
    if (hy_checkpoint_find(ckdir, &found, &n_found, &err) == HY_OK && n_found > 0)
        o.resume = ckdir;
    free(found);
    FILE *out = tmpfile();
    int rc = cli_train_run(&c, &o, out, &err);
    if (out) fclose(out);
    if (rc && rc != HY_ERR_RUNTIME) fprintf(stderr, "train_keep: %s\n", err.msg);
    hy_run_free(&c);
    return rc;
}

/* checkpoint.keep: the newest N stay, and any marked `keep`; a save that
 * fails removes nothing; the one just saved is never removed, even below
 * an older run's higher steps. */
static void retention(void) {
    char ckdir[128], mark[200], names[512];
    snprintf(ckdir, sizeof ckdir, "%s/keep", dir);
    CHECK(train_keep(ckdir, 3, "checkpoint.keep=0") == 0);
    listing(ckdir, names, sizeof names);
    CHECKF(strcmp(names, "step_000001 step_000002 step_000003") == 0, "%s", names);
    snprintf(mark, sizeof mark, "%s/step_000001/keep", ckdir);
    FILE *f = fopen(mark, "w");
    CHECK(f != NULL);
    if (f) fclose(f);
    CHECK(train_keep(ckdir, 6, "checkpoint.keep=2") == 0);
    listing(ckdir, names, sizeof names);
    CHECKF(strcmp(names, "step_000001 step_000005 step_000006") == 0, "%s", names);
    /* The next save fails (no room): nothing is removed. */
    struct rlimit old_lim, lim;
    struct sigaction ign = { .sa_handler = SIG_IGN }, old_act;
    CHECK(getrlimit(RLIMIT_FSIZE, &old_lim) == 0 && sigaction(SIGXFSZ, &ign, &old_act) == 0);
    lim = old_lim;
    lim.rlim_cur = 4096;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    CHECK(train_keep(ckdir, 7, "checkpoint.keep=1") == HY_ERR_RUNTIME);
    CHECK(setrlimit(RLIMIT_FSIZE, &old_lim) == 0 && sigaction(SIGXFSZ, &old_act, NULL) == 0);
    listing(ckdir, names, sizeof names);
    CHECKF(strcmp(names, "step_000001 step_000005 step_000006") == 0, "%s", names);
    CHECK(train_keep(ckdir, 7, "checkpoint.keep=1") == 0);
    listing(ckdir, names, sizeof names);
    CHECKF(strcmp(names, "step_000001 step_000007") == 0, "%s", names);
    /* An older run's step 100 outranks step 7, which still stays. */
    char cmd[400];
    snprintf(cmd, sizeof cmd, "cp -r %s/step_000007 %s/step_000100", ckdir, ckdir);
    CHECK(system(cmd) == 0);
    int removed = -1;
    hy_error err;
    CHECK(hy_checkpoint_prune(ckdir, 1, 7, &removed, &err) == HY_OK && removed == 0);
    CHECK(hy_checkpoint_prune(ckdir, 1, -1, &removed, &err) == HY_OK && removed == 1);
    listing(ckdir, names, sizeof names);
    CHECKF(strcmp(names, "step_000001 step_000100") == 0, "%s", names);
    /* What a save killed midway leaves (a hidden temporary) goes when the
     * next writer takes the lock. */
    snprintf(cmd, sizeof cmd, "cp -r %s/step_000100 %s/.step_000101.tmp.abc123", ckdir, ckdir);
    CHECK(system(cmd) == 0);
    hy_checkpoint_lock lk;
    CHECK(hy_checkpoint_lock_dir(ckdir, &lk, &err) == HY_OK && lk.leftovers == 1);
    hy_checkpoint_unlock(&lk);
    listing(ckdir, names, sizeof names);
    CHECKF(strcmp(names, "step_000001 step_000100") == 0, "%s", names);
}

/* A directory of checkpoint.dirs: hy_checkpoint_find_runs finds the runs
 * one level down, by name, each with its checkpoints (hidden directories,
 * files and directories without checkpoints left out), and checkpoint
 * list and verify go through them; a directory with none says so. Made
 * from retention()'s checkpoints. */
static void runs_under(void) {
    char parent[160], cmd[2048], text[4096];
    snprintf(parent, sizeof parent, "%s/runs", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/alpha %s/empty %s/.hidden && cp -r %s/keep %s/zeta && "
             "cp -r %s/keep/step_000001 %s/alpha/ && cp -r %s/keep/step_000001 %s/.hidden/ && "
             "touch %s/notes.txt", parent, parent, parent, dir, parent, dir, parent, dir, parent,
             parent);
    CHECK(system(cmd) == 0);
    hy_checkpoint_run *runs = NULL;
    int n = 0;
    hy_error err;
    char slash[210];
    snprintf(slash, sizeof slash, "%s/", parent);   /* the same, written with a '/' */
    for (int k = 0; k < 2; k++) {
        CHECKF(hy_checkpoint_find_runs(k ? slash : parent, &runs, &n, &err) == HY_OK, "%s",
               err.msg);
        CHECKF(n == 2, "%d runs", n);
        if (n == 2) {
            char want[300];
            snprintf(want, sizeof want, "%s/alpha", parent);
            CHECKF(!strcmp(runs[0].path, want) && runs[0].n == 1 && runs[0].found[0].step == 1,
                   "%s %d", runs[0].path, runs[0].n);
            snprintf(want, sizeof want, "%s/zeta", parent);
            /* (retention() made step_000100 a copy of step 7.) */
            CHECKF(!strcmp(runs[1].path, want) && runs[1].n == 2 &&
                       strstr(runs[1].found[1].path, "zeta/step_000100"),
                   "%s %d", runs[1].path, runs[1].n);
        }
        hy_checkpoint_runs_free(runs, n);
    }
    /* A checkpoint.dir's own checkpoints are not runs under it. */
    snprintf(cmd, sizeof cmd, "%s/zeta", parent);
    CHECK(hy_checkpoint_find_runs(cmd, &runs, &n, &err) == HY_OK && n == 0 && !runs);

    FILE *f = tmpfile();
    CHECK(f && cli_checkpoint_list(parent, f, &err) == HY_OK);
    size_t got = f && fseek(f, 0, SEEK_SET) == 0 ? fread(text, 1, sizeof text - 1, f) : 0;
    text[got] = '\0';
    if (f) fclose(f);
    char line[600];
    snprintf(line, sizeof line, "2 runs under %s\n\nrun %s/alpha: 1 checkpoint, newest step 1\n",
             parent, parent);
    CHECKF(strncmp(text, line, strlen(line)) == 0, "%s", text);
    snprintf(line, sizeof line, "run %s/zeta: 2 checkpoints, newest step 7\n", parent);
    CHECKF(strstr(text, line) != NULL, "%s", text);
    snprintf(line, sizeof line, "  %s/zeta/step_000100\n", parent);
    CHECKF(strstr(text, line) && !strstr(text, ".hidden") && !strstr(text, "empty"), "%s", text);
    f = tmpfile();
    CHECK(f && cli_checkpoint_verify(parent, f, &err) == HY_OK);
    got = f && fseek(f, 0, SEEK_SET) == 0 ? fread(text, 1, sizeof text - 1, f) : 0;
    text[got] = '\0';
    if (f) fclose(f);
    int oks = 0;
    for (const char *p = text; (p = strstr(p, "ok          ")); p++) oks++;
    CHECKF(oks == 3, "%s", text);
    /* Nothing one level down either: said, naming where it looked. */
    snprintf(cmd, sizeof cmd, "%s/empty", parent);
    f = tmpfile();
    CHECK(f && cli_checkpoint_list(cmd, f, &err) == HY_ERR_INPUT);
    if (f) fclose(f);
    CHECKF(strstr(err.msg, "no checkpoints") && strstr(err.msg, "one level down"), "%s", err.msg);
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
    integrity();
    bert_mask_token();
    one_writer();
    lock_not_followed();
    retention();
    runs_under();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_END("checkpoint");
}
