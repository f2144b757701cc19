/*
 * outfile.c — see outfile.h.
 *
 * Sections: the run's inputs · the check · a log of lines.
 */
#include "outfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "infile.h"

/* How deep below a directory its files count: a checkpoint.dir holds
 * step_NNNNNN/FILE; one more level is slack. */
#define TREE_DEPTH 3

/* ------------------------------------------------------------------------
 * The run's inputs
 * ------------------------------------------------------------------------ */

void hy_outfile_inputs_init(hy_outfile_inputs *in) {
    *in = (hy_outfile_inputs){ NULL, 0, 0 };
}

void hy_outfile_inputs_free(hy_outfile_inputs *in) {
    for (int i = 0; i < in->n; i++) {
        free(in->items[i].path);
        free(in->items[i].role);
    }
    free(in->items);
    hy_outfile_inputs_init(in);
}

static int push(hy_outfile_inputs *in, const struct stat *sb, const char *path, const char *role,
                hy_error *err) {
    for (int i = 0; i < in->n; i++)   /* once is enough: the first role named stays */
        if (in->items[i].dev == sb->st_dev && in->items[i].ino == sb->st_ino) return HY_OK;
    if (in->n == in->cap) {
        int cap = in->cap ? 2 * in->cap : 16;
        hy_outfile_input *grown = realloc(in->items, (size_t)cap * sizeof *grown);
        if (!grown) return hy_fail(err, HY_ERR_RUNTIME, "out of memory listing the run's inputs");
        in->items = grown;
        in->cap = cap;
    }
    hy_outfile_input *e = &in->items[in->n];
    *e = (hy_outfile_input){ sb->st_dev, sb->st_ino, strdup(path), strdup(role) };
    if (!e->path || !e->role) {
        free(e->path);
        free(e->role);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory listing the run's inputs");
    }
    in->n++;
    return HY_OK;
}

int hy_outfile_inputs_add(hy_outfile_inputs *in, const char *path, const char *role,
                          hy_error *err) {
    struct stat sb;
    if (!path || !*path || stat(path, &sb) != 0) return HY_OK;
    return push(in, &sb, path, role, err);
}

static int add_tree(hy_outfile_inputs *in, const char *dir, const char *role, int depth,
                    hy_error *err) {
    DIR *d = opendir(dir);
    if (!d) return HY_OK;   /* missing or unreadable: nothing of it can be read either */
    int rc = HY_OK;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *path = malloc(n);
        if (!path) {
            rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory listing %s", dir);
            break;
        }
        snprintf(path, n, "%s/%s", dir, e->d_name);
        struct stat ls, sb;
        if (lstat(path, &ls) == 0 && S_ISDIR(ls.st_mode)) {
            if (depth > 1) rc = add_tree(in, path, role, depth - 1, err);
        } else if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
            rc = push(in, &sb, path, role, err);
        }
        free(path);
    }
    closedir(d);
    return rc;
}

int hy_outfile_inputs_add_tree(hy_outfile_inputs *in, const char *dir, const char *role,
                               hy_error *err) {
    return dir && *dir ? add_tree(in, dir, role, TREE_DEPTH, err) : HY_OK;
}

int hy_outfile_inputs_of_run(hy_outfile_inputs *in, const hy_run *run, const char *resumed,
                             hy_error *err) {
    int rc = hy_outfile_inputs_add(in, run->config_path, "the config", err);
    /* data.train's shards as its patterns match them now. */
    char **train = NULL;
    int n_train = 0;
    if (!rc) rc = hy_data_expand((const char *const *)run->data.train, run->data.n_train,
                                 "data.train", &train, &n_train, err);
    for (int i = 0; !rc && i < n_train; i++)
        rc = hy_outfile_inputs_add(in, train[i], "data.train, the training shard", err);
    hy_data_paths_free(train, n_train);
    if (!rc) rc = hy_outfile_inputs_add(in, run->data.val, "data.val, the validation shard", err);
    if (!rc) rc = hy_outfile_inputs_add(in, run->init, "init, the weights it starts from",
                                        err);
    if (!rc && resumed)
        rc = hy_outfile_inputs_add_tree(in, resumed, "a file of the checkpoint it resumes", err);
    if (!rc)
        rc = hy_outfile_inputs_add_tree(in, run->checkpoint.dir, "a file in checkpoint.dir", err);
    return rc;
}

/* ------------------------------------------------------------------------
 * The check
 * ------------------------------------------------------------------------ */

/* The input that file sb is, or NULL. */
static const hy_outfile_input *input_of(const hy_outfile_inputs *in, const struct stat *sb) {
    for (int i = 0; in && i < in->n; i++)
        if (in->items[i].dev == sb->st_dev && in->items[i].ino == sb->st_ino) return &in->items[i];
    return NULL;
}

static int refuse_input(const hy_outfile_input *hit, const char *what, const char *path,
                        hy_error *err) {
    return hy_fail(err, HY_ERR_INPUT, "%s %s: is the same file as %s, an input of this run "
                   "(%s): writing it would destroy it; give another file", what, path, hit->path,
                   hit->role);
}

static int refuse_kind(mode_t m, const char *what, const char *path, hy_error *err) {
    return hy_fail(err, HY_ERR_INPUT, "%s %s: is %s, not a regular file; the log is written "
                   "line by line into a regular file: give one", what, path, hy_infile_kind(m));
}

/* The directory part of path ("." for a bare name) into a malloc'd
 * string; *base points at the last component. */
static char *dir_of(const char *path, const char **base) {
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    if (!slash) return strdup(".");
    return strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

/* A stream's file that is not there yet: its directory must be, so that
 * nothing is created before a run that cannot write its log is refused. */
static int check_new(const char *what, const char *path, hy_error *err) {
    const char *base;
    char *dir = dir_of(path, &base);
    if (!dir) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    struct stat sb;
    int e = stat(dir, &sb) != 0 ? errno : !S_ISDIR(sb.st_mode) ? ENOTDIR : !*base ? EISDIR : 0;
    free(dir);
    return e ? hy_fail(err, hy_errno_status(e, HY_ERR_INPUT), "%s %s: cannot open for writing: "
                       "%s", what, path, strerror(e)) : HY_OK;
}

int hy_outfile_check(const hy_outfile_inputs *in, const char *what, const char *path,
                     int stream, hy_error *err) {
    struct stat sb;
    if (!path || !*path) return hy_fail(err, HY_ERR_INPUT, "%s: no file name given", what);
    /* Not there: no input; an atomic writer says itself why it cannot
     * create it. */
    if (stat(path, &sb) != 0) return stream ? check_new(what, path, err) : HY_OK;
    const hy_outfile_input *hit = input_of(in, &sb);
    if (hit) return refuse_input(hit, what, path, err);
    if (stream && !S_ISREG(sb.st_mode)) return refuse_kind(sb.st_mode, what, path, err);
    return HY_OK;
}

int hy_outfile_same(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    const char *ba, *bb;
    char *da = dir_of(a, &ba), *db = dir_of(b, &bb);
    int same = da && db && strcmp(ba, bb) == 0 && stat(da, &sa) == 0 && stat(db, &sb) == 0 &&
               sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    free(da);
    free(db);
    return same;
}

/* ------------------------------------------------------------------------
 * A log of lines
 * ------------------------------------------------------------------------ */

static void log_release(hy_outfile_log *lg) {
    free(lg->path);
    *lg = (hy_outfile_log){ .fd = -1 };
}

int hy_outfile_log_open(hy_outfile_log *lg, const hy_outfile_inputs *in, const char *what,
                        const char *path, hy_error *err) {
    *lg = (hy_outfile_log){ .fd = -1, .what = what };
    int rc = hy_outfile_check(in, what, path, 1, err);
    if (rc) return rc;
    if (!(lg->path = strdup(path))) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    /* O_EXCL first, to know whether this open made the file; O_NONBLOCK:
     * a FIFO put there since the check fails (ENXIO, no reader) or opens,
     * and is refused below, instead of blocking. No O_TRUNC before the
     * file is known to be a regular file that is no input. */
    const int flags = O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
    int fd = -1, e;
    for (int tries = 0; tries < 16; tries++) {
        if ((fd = open(path, flags | O_CREAT | O_EXCL, 0666)) >= 0) {
            lg->created = 1;
            break;
        }
        if (errno == EINTR) continue;
        if (errno != EEXIST) break;
        /* ENOENT here: it went away in between (or is a dangling link). */
        if ((fd = open(path, flags)) >= 0 || (errno != ENOENT && errno != EINTR)) break;
    }
    if (fd < 0) {
        e = errno;
        rc = hy_fail(err, hy_errno_status(e, HY_ERR_INPUT), "%s %s: cannot open for writing: "
                     "%s", what, path, e == ENXIO ? "it is a FIFO (no reader), not a regular "
                     "file" : strerror(e));
        log_release(lg);
        return rc;
    }
    lg->fd = fd;
    struct stat sb;
    const hy_outfile_input *hit;
    int flags_now;
    if (fstat(fd, &sb) != 0)
        rc = hy_fail(err, HY_ERR_RUNTIME, "%s %s: cannot stat: %s", what, path, strerror(errno));
    else if ((hit = input_of(in, &sb)))
        rc = refuse_input(hit, what, path, err);
    else if (!S_ISREG(sb.st_mode))
        rc = refuse_kind(sb.st_mode, what, path, err);
    else if (ftruncate(fd, 0) != 0)
        rc = hy_fail(err, hy_errno_status(errno, HY_ERR_INPUT), "%s %s: cannot empty it: %s",
                     what, path, strerror(errno));
    else if ((flags_now = fcntl(fd, F_GETFL)) < 0 ||
             fcntl(fd, F_SETFL, flags_now & ~O_NONBLOCK) < 0)
        rc = hy_fail(err, HY_ERR_RUNTIME, "%s %s: fcntl: %s", what, path, strerror(errno));
    if (rc) hy_outfile_log_discard(lg);
    return rc;
}

int hy_outfile_log_write(hy_outfile_log *lg, const char *text, hy_error *err) {
    if (lg->fd < 0) return hy_fail(err, HY_ERR_RUNTIME, "a log written after it was closed "
                                   "(a bug in the caller)");
    size_t n = strlen(text), done = 0;
    while (done < n) {
        ssize_t put = pwrite(lg->fd, text + done, n - done, lg->good + (off_t)done);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) {
            int e = put < 0 ? errno : EIO;
            /* Cut the partial line off again: the file ends with the last
             * whole line (best effort: the truncation frees space, it
             * does not need any). */
            int cut = ftruncate(lg->fd, lg->good) == 0;
            return hy_fail(err, HY_ERR_RUNTIME, "%s %s: cannot write: %s (%s %lld bytes of "
                           "whole lines)", lg->what, lg->path, strerror(e),
                           cut ? "it keeps its" : "could not cut it back to its",
                           (long long)lg->good);
        }
        done += (size_t)put;
    }
    lg->good += (off_t)n;
    return HY_OK;
}

int hy_outfile_log_close(hy_outfile_log *lg, hy_error *err) {
    if (lg->fd < 0) return HY_OK;
    int rc = HY_OK;
    if (close(lg->fd) != 0)
        rc = hy_fail(err, HY_ERR_RUNTIME, "%s %s: write failed: %s", lg->what, lg->path,
                     strerror(errno));
    log_release(lg);
    return rc;
}

void hy_outfile_log_discard(hy_outfile_log *lg) {
    if (lg->fd < 0) {
        log_release(lg);
        return;
    }
    (void)close(lg->fd);   /* discarded: nothing in it is kept */
    if (lg->created) unlink(lg->path);
    log_release(lg);
}
