/*
 * test_atomicfile.c — files and directories written atomically
 * (lib/atomicfile.h): the content and mode of a committed file, by writes
 * and through a stream; every failure (a missing directory, a directory in
 * the way, no permission, a write that fails half-way, a rename that
 * fails) reported with the path and the right status, leaving the old file
 * untouched and no temporary behind; abort, and calls after the end, as
 * harmless; and the directory variant end to end, commit and replace.
 *
 * Each case works in its own directory under a mkdtemp directory in
 * $TMPDIR (or /tmp), so "nothing left behind" is a count of its entries.
 */
#include "atomicfile.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char scratch[256];

/* A path held by value, so a case can keep as many as it likes. */
typedef struct { char s[768]; } pathbuf;

static pathbuf join(const char *dir, const char *name) {
    pathbuf p;
    snprintf(p.s, sizeof p.s, "%s/%s", dir, name);
    return p;
}

/* A fresh directory scratch/name for one case. */
static pathbuf case_dir(const char *name) {
    pathbuf p = join(scratch, name);
    if (mkdir(p.s, 0755) != 0) { perror(p.s); exit(1); }
    return p;
}

/* Entries in dir other than . and .. (-1 if it cannot be read). */
static int entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* Whether the file at path holds exactly `want`. */
static int holds(const char *path, const char *want) {
    static char buf[1 << 16];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return n == strlen(want) && memcmp(buf, want, n) == 0;
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) { perror(path); exit(1); }
}

static int mode_of(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (int)(sb.st_mode & 0777) : -1;
}

static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *at) {
    (void)sb, (void)flag, (void)at;
    if (remove(p) != 0) perror(p);
    return 0;
}

/* ---- A file: success ------------------------------------------------------ */

static void test_commit(void) {
    pathbuf dir = case_dir("commit"), path = join(dir.s, "out.txt");
    hy_atomic_file af;
    hy_error err = {0};
    mode_t old = umask(022);
    CHECKF(hy_atomic_open(&af, path.s, HY_ERR_INPUT, &err) == HY_OK, "%s", err.msg);
    CHECK(access(path.s, F_OK) != 0);          /* nothing at the target yet */
    CHECK(entries(dir.s) == 1);                /* only the temporary */
    CHECK(hy_atomic_write(&af, "hello, ", 7, &err) == HY_OK);
    CHECK(hy_atomic_write(&af, "", 0, &err) == HY_OK);
    CHECK(hy_atomic_write(&af, "world\n", 6, &err) == HY_OK);
    CHECKF(hy_atomic_commit(&af, &err) == HY_OK, "%s", err.msg);
    CHECK(holds(path.s, "hello, world\n"));
    CHECKF(mode_of(path.s) == 0644, "mode %o", mode_of(path.s));
    CHECK(entries(dir.s) == 1);
    hy_atomic_abort(&af);                      /* after commit: a no-op */
    CHECK(holds(path.s, "hello, world\n"));

    /* Over an existing file: replaced whole, mode from the umask. */
    umask(077);
    CHECK(hy_atomic_open(&af, path.s, HY_ERR_INPUT, &err) == HY_OK);
    CHECK(hy_atomic_write(&af, "new", 3, &err) == HY_OK);
    CHECK(holds(path.s, "hello, world\n"));    /* untouched until commit */
    CHECK(hy_atomic_commit(&af, &err) == HY_OK);
    CHECK(holds(path.s, "new") && mode_of(path.s) == 0600);
    CHECK(entries(dir.s) == 1);
    umask(old);

    /* A path without a directory part: the current directory. */
    char cwd[512];
    CHECK(getcwd(cwd, sizeof cwd) != NULL && chdir(dir.s) == 0);
    CHECK(hy_atomic_open(&af, "plain.txt", HY_ERR_INPUT, &err) == HY_OK &&
          hy_atomic_write(&af, "x", 1, &err) == HY_OK &&
          hy_atomic_commit(&af, &err) == HY_OK);
    CHECK(chdir(cwd) == 0);
    CHECK(holds(join(dir.s, "plain.txt").s, "x") && entries(dir.s) == 2);
}

static void test_stream(void) {
    pathbuf dir = case_dir("stream"), path = join(dir.s, "out.svg");
    hy_atomic_file af;
    hy_error err = {0};
    CHECK(hy_atomic_open(&af, path.s, HY_ERR_RUNTIME, &err) == HY_OK);
    FILE *f = hy_atomic_stream(&af, &err);
    CHECK(f != NULL && hy_atomic_stream(&af, &err) == f);
    if (!f) return;
    fprintf(f, "<svg n=\"%d\">", 3);
    CHECK(hy_atomic_write(&af, "<g/>", 4, &err) == HY_OK);   /* in order */
    fputs("</svg>\n", f);
    CHECKF(hy_atomic_commit(&af, &err) == HY_OK, "%s", err.msg);
    CHECK(holds(path.s, "<svg n=\"3\"><g/></svg>\n"));
    CHECK(entries(dir.s) == 1);
}

/* ---- A file: failures ------------------------------------------------------ */

static void test_open_errors(void) {
    pathbuf dir = case_dir("open");
    hy_atomic_file af;
    hy_error err = {0};

    /* A missing directory: the caller's path status, the path, a hint. */
    pathbuf missing = join(dir.s, "no-dir/out.bin");
    CHECK(hy_atomic_open(&af, missing.s, HY_ERR_INPUT, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, missing.s) && strstr(err.msg, "does the directory exist") &&
           strstr(err.msg, "No such file or directory"), "%s", err.msg);
    CHECK(hy_atomic_open(&af, missing.s, HY_ERR_RUNTIME, &err) == HY_ERR_RUNTIME);
    CHECK(entries(dir.s) == 0);
    hy_atomic_abort(&af);                      /* after a failed open: a no-op */
    CHECK(hy_atomic_write(&af, "x", 1, &err) == HY_ERR_RUNTIME);
    CHECK(hy_atomic_commit(&af, &err) == HY_ERR_RUNTIME);

    /* A directory in the way: refused before anything is created. */
    pathbuf sub = join(dir.s, "sub");
    CHECK(mkdir(sub.s, 0755) == 0);
    CHECK(hy_atomic_open(&af, sub.s, HY_ERR_INPUT, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, sub.s) && strstr(err.msg, "is a directory") &&
           strstr(err.msg, "cannot rename"), "%s", err.msg);
    CHECK(hy_atomic_open(&af, sub.s, HY_ERR_RUNTIME, &err) == HY_ERR_RUNTIME);
    CHECK(hy_atomic_open(&af, join(dir.s, "sub/").s, HY_ERR_INPUT, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "ends in '/'") != NULL);
    CHECK(hy_atomic_open(&af, join(dir.s, "new/").s, HY_ERR_INPUT, &err) == HY_ERR_INPUT);
    CHECK(entries(dir.s) == 1 && entries(sub.s) == 0);

    CHECK(hy_atomic_open(&af, "", HY_ERR_INPUT, &err) == HY_ERR_INPUT);
    CHECK(hy_atomic_open(&af, NULL, HY_ERR_RUNTIME, &err) == HY_ERR_RUNTIME);
    CHECK(strstr(err.msg, "empty path") != NULL);

    /* A read-only directory (meaningless as root, who may write anyway). */
    if (geteuid() != 0) {
        pathbuf ro = join(dir.s, "ro"), p = join(ro.s, "x.bin");
        CHECK(mkdir(ro.s, 0555) == 0);
        CHECK(hy_atomic_open(&af, p.s, HY_ERR_INPUT, &err) == HY_ERR_INPUT);
        CHECKF(strstr(err.msg, p.s) && strstr(err.msg, "Permission denied"), "%s", err.msg);
        CHECK(entries(ro.s) == 0 && chmod(ro.s, 0755) == 0);
    }
}

/* Runs fill(af) over an existing file with writes limited to 4 KiB
 * (write() then fails with EFBIG; SIGXFSZ is ignored so that is an error,
 * not a death), and checks that the failure is reported and changes
 * nothing. */
static void under_fsize_limit(const char *name, int (*fill)(hy_atomic_file *, hy_error *)) {
    pathbuf dir = case_dir(name), path = join(dir.s, "keep.bin");
    put(path.s, "old contents");
    hy_atomic_file af;
    hy_error err = {0};
    /* HY_ERR_INPUT for path faults, yet EFBIG is the system's: runtime. */
    CHECK(hy_atomic_open(&af, path.s, HY_ERR_INPUT, &err) == HY_OK);
    struct rlimit was;
    CHECK(getrlimit(RLIMIT_FSIZE, &was) == 0);
    void (*handler)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &(struct rlimit){4096, was.rlim_max}) == 0);
    int st = fill(&af, &err);
    CHECK(setrlimit(RLIMIT_FSIZE, &was) == 0);
    signal(SIGXFSZ, handler);

    CHECKF(st == HY_ERR_RUNTIME, "%s: status %d: %s", name, st, err.msg);
    CHECKF(strstr(err.msg, path.s) && strstr(err.msg, "cannot write") &&
           strstr(err.msg, strerror(EFBIG)), "%s: %s", name, err.msg);
    CHECK(holds(path.s, "old contents"));
    CHECKF(entries(dir.s) == 1, "%s: %d entries", name, entries(dir.s));
    /* The file is finished: more calls fail harmlessly. */
    CHECK(hy_atomic_write(&af, "x", 1, &err) == HY_ERR_RUNTIME);
    CHECK(hy_atomic_commit(&af, &err) == HY_ERR_RUNTIME);
    hy_atomic_abort(&af);
    CHECK(holds(path.s, "old contents") && entries(dir.s) == 1);
}

enum { BIG = 100000 };

static int fill_by_write(hy_atomic_file *af, hy_error *err) {
    static char big[BIG];
    int st = hy_atomic_write(af, big, 1000, err);   /* fits */
    if (!st) st = hy_atomic_write(af, big, BIG, err);
    return st ? st : hy_atomic_commit(af, err);
}

static int fill_by_stream(hy_atomic_file *af, hy_error *err) {
    FILE *f = hy_atomic_stream(af, err);
    if (!f) return HY_ERR_RUNTIME;
    for (int i = 0; i < BIG / 10; i++) fprintf(f, "line %04d\n", i % 10000);
    return hy_atomic_commit(af, err);   /* the stream's errors surface here */
}

static void test_rename_error(void) {
    pathbuf dir = case_dir("rename"), path = join(dir.s, "x");
    pathbuf inside = join(path.s, "inside");
    hy_atomic_file af;
    hy_error err = {0};
    CHECK(hy_atomic_open(&af, path.s, HY_ERR_INPUT, &err) == HY_OK);
    CHECK(hy_atomic_write(&af, "data", 4, &err) == HY_OK);
    /* Someone puts a directory there between open and commit. */
    CHECK(mkdir(path.s, 0755) == 0);
    put(inside.s, "theirs");
    CHECK(hy_atomic_commit(&af, &err) == HY_ERR_INPUT);   /* EISDIR */
    CHECKF(strstr(err.msg, path.s) && strstr(err.msg, "cannot rename"), "%s", err.msg);
    CHECK(entries(dir.s) == 1 && holds(inside.s, "theirs"));
}

static void test_abort(void) {
    pathbuf dir = case_dir("abort");
    hy_atomic_file af;
    hy_error err = {0};
    CHECK(hy_atomic_open(&af, join(dir.s, "a").s, HY_ERR_INPUT, &err) == HY_OK);
    CHECK(hy_atomic_write(&af, "partial", 7, &err) == HY_OK);
    hy_atomic_abort(&af);
    CHECK(entries(dir.s) == 0);
    hy_atomic_abort(&af);                      /* twice: a no-op */
    /* With a stream holding unflushed data: the temporary still goes. */
    CHECK(hy_atomic_open(&af, join(dir.s, "b").s, HY_ERR_INPUT, &err) == HY_OK);
    FILE *f = hy_atomic_stream(&af, &err);
    CHECK(f != NULL);
    if (f) fputs("partial", f);
    hy_atomic_abort(&af);
    CHECK(entries(dir.s) == 0);
}

/* ---- A directory ------------------------------------------------------------ */

static void test_dir(void) {
    pathbuf dir = case_dir("dirs"), path = join(dir.s, "step_000100");
    hy_atomic_dir ad;
    hy_error err = {0};

    /* Success: the tree appears whole under the target name. */
    CHECKF(hy_atomic_dir_open(&ad, join(dir.s, "step_000100/").s, HY_ERR_INPUT, &err) == HY_OK,
           "%s", err.msg);
    CHECK(access(path.s, F_OK) != 0 && entries(dir.s) == 1);
    CHECKF(strstr(ad.tmp, "/.step_000100.tmp.") != NULL, "%s", ad.tmp);   /* hidden */
    put(join(ad.tmp, "model.safetensors").s, "weights");
    CHECK(mkdir(join(ad.tmp, "sub").s, 0755) == 0);
    put(join(ad.tmp, "sub/state.json").s, "{}");
    CHECK(symlink("model.safetensors", join(ad.tmp, "link").s) == 0);   /* skipped */
    CHECKF(hy_atomic_dir_commit(&ad, &err) == HY_OK, "%s", err.msg);
    CHECK(holds(join(path.s, "model.safetensors").s, "weights"));
    CHECK(holds(join(path.s, "sub/state.json").s, "{}"));
    CHECK(entries(dir.s) == 1 && entries(path.s) == 3);
    hy_atomic_dir_abort(&ad);                  /* after commit: a no-op */
    CHECK(entries(path.s) == 3);

    /* The target exists: commit refuses it and removes its own tree... */
    CHECK(hy_atomic_dir_open(&ad, path.s, HY_ERR_INPUT, &err) == HY_OK);
    put(join(ad.tmp, "model.safetensors").s, "second");
    CHECK(hy_atomic_dir_commit(&ad, &err) == HY_ERR_RUNTIME);
    CHECKF(strstr(err.msg, path.s) && strstr(err.msg, "cannot rename") &&
           strstr(err.msg, strerror(EEXIST)), "%s", err.msg);
    CHECK(entries(dir.s) == 1 && holds(join(path.s, "model.safetensors").s, "weights"));
    /* ...replace swaps it out whole, and removes the old tree. */
    CHECK(hy_atomic_dir_open(&ad, path.s, HY_ERR_INPUT, &err) == HY_OK);
    put(join(ad.tmp, "model.safetensors").s, "third");
    CHECKF(hy_atomic_dir_replace(&ad, &err) == HY_OK, "%s", err.msg);
    CHECK(entries(dir.s) == 1 && entries(path.s) == 1);
    CHECK(holds(join(path.s, "model.safetensors").s, "third"));
    /* Replace with nothing there is a commit. */
    pathbuf fresh = join(dir.s, "step_000150");
    CHECK(hy_atomic_dir_open(&ad, fresh.s, HY_ERR_INPUT, &err) == HY_OK);
    CHECK(hy_atomic_dir_replace(&ad, &err) == HY_OK);
    CHECK(entries(dir.s) == 2 && entries(fresh.s) == 0);

    /* A file in the way, or no name: refused before anything is created. */
    pathbuf file = join(dir.s, "a_file");
    put(file.s, "x");
    CHECK(hy_atomic_dir_open(&ad, file.s, HY_ERR_INPUT, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, file.s) && strstr(err.msg, "not a directory"), "%s", err.msg);
    CHECK(entries(dir.s) == 3);
    CHECK(hy_atomic_dir_open(&ad, "", HY_ERR_INPUT, &err) == HY_ERR_INPUT);

    /* A missing parent. */
    pathbuf orphan = join(dir.s, "no/step");
    CHECK(hy_atomic_dir_open(&ad, orphan.s, HY_ERR_RUNTIME, &err) == HY_ERR_RUNTIME);
    CHECKF(strstr(err.msg, orphan.s) && strstr(err.msg, "does the directory exist"),
           "%s", err.msg);
    hy_atomic_dir_abort(&ad);                  /* after a failed open */
    CHECK(hy_atomic_dir_commit(&ad, &err) == HY_ERR_RUNTIME);

    /* Abort removes the whole tree. */
    CHECK(hy_atomic_dir_open(&ad, join(dir.s, "step_000200").s, HY_ERR_INPUT, &err) == HY_OK);
    put(join(ad.tmp, "model.safetensors").s, "half");
    CHECK(mkdir(join(ad.tmp, "sub").s, 0755) == 0 &&
          mkdir(join(ad.tmp, "sub/deeper").s, 0755) == 0);
    put(join(ad.tmp, "sub/deeper/f").s, "x");
    hy_atomic_dir_abort(&ad);
    CHECK(entries(dir.s) == 3);

    /* A failing rename (a file took the name meanwhile): the temporary
     * tree is removed, the file is left alone. */
    pathbuf taken = join(dir.s, "step_000300");
    CHECK(hy_atomic_dir_open(&ad, taken.s, HY_ERR_INPUT, &err) == HY_OK);
    put(join(ad.tmp, "model.safetensors").s, "mine");
    put(taken.s, "theirs");
    CHECK(hy_atomic_dir_commit(&ad, &err) == HY_ERR_RUNTIME);   /* EEXIST */
    CHECKF(strstr(err.msg, taken.s) && strstr(err.msg, "cannot rename"), "%s", err.msg);
    CHECK(holds(taken.s, "theirs") && entries(dir.s) == 4);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/hy_test_atomicfile.XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(scratch)) {
        perror(scratch);
        return 1;
    }
    test_commit();
    test_stream();
    test_open_errors();
    under_fsize_limit("fsize_write", fill_by_write);
    under_fsize_limit("fsize_stream", fill_by_stream);
    test_rename_error();
    test_abort();
    test_dir();
    nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return TEST_END("test_atomicfile");
}
