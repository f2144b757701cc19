/*
 * atomicfile.c — see atomicfile.h.
 *
 * Sections: helpers (the message of a failed step, the temporary name,
 * the directory's fsync) · a file · a directory (walking a tree to fsync or
 * remove it).
 */
#include "atomicfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rng.h"

/* One write moves at most this much: Linux caps a single transfer a little
 * under 2 GiB anyway, and smaller calls keep EINTR retries cheap. */
#define IO_CHUNK ((size_t)1 << 30)

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

/* The one message of a failed step on the temporary `kind` ("file",
 * "directory"): what failed and why, and whether removing it failed too
 * (ue, an errno, or 0). */
static int step_failed(hy_error *err, int path_status, const char *path,
                       const char *what, const char *kind, const char *tmp,
                       int e, int ue) {
    return hy_fail(err, hy_errno_status(e, path_status), "%s: cannot %s the "
                   "temporary %s %s: %s%s%s", path, what, kind, tmp,
                   strerror(e), ue ? "; could not remove it either: " : "",
                   ue ? strerror(ue) : "");
}

static int not_open(hy_error *err) {
    return hy_fail(err, HY_ERR_RUNTIME, "an atomic file used after it was "
                   "committed or failed (a bug in the caller)");
}

/* Creates "PATH.tmp.XXXXXX", a file with O_EXCL and mode 0666 (the umask
 * applies, as for any new file — mkstemp's fixed 0600 would not, and
 * reading the umask means setting it, process-wide), or "DIR/.NAME.tmp.
 * XXXXXX", a directory with mode 0777, hidden so that what a crash leaves
 * never passes for a checkpoint in a listing of step_*. The suffix is drawn from a stream seeded by the pid, the
 * clock and a stack address, a new draw per attempt; O_EXCL (or mkdir),
 * not the suffix, is what guarantees that nothing existing is touched.
 * Sets *tmp (the caller frees it) and, for a file, *fd. */
static int make_temp(const char *path, int is_dir, int path_status,
                     char **tmp, int *fd, hy_error *err) {
    size_t cap = strlen(path) + sizeof "..tmp.XXXXXX";
    const char *slash = strrchr(path, '/');
    int head = slash ? (int)(slash + 1 - path) : 0;
    if (!(*tmp = malloc(cap)))
        return hy_fail(err, HY_ERR_RUNTIME, "%s: out of memory", path);
    struct timespec ts = {0, 0};
    /* Without the clock the names are merely more likely to collide, and a
     * collision only costs another attempt. */
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) ts.tv_nsec = 0;
    hy_rng r = hy_rng_stream((uint64_t)getpid() << 32 ^ (uint64_t)ts.tv_sec,
                             (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)&ts);
    int e = EEXIST;
    for (int attempt = 0; attempt < 100; attempt++) {
        snprintf(*tmp, cap, "%.*s%s%s.tmp.%06llx", head, path, is_dir ? "." : "",
                 path + head, (unsigned long long)(hy_rng_u64(&r) & 0xffffff));
        int ok = is_dir ? mkdir(*tmp, 0777) == 0
                        : (*fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                                      0666)) >= 0;
        if (ok) return HY_OK;
        if ((e = errno) != EEXIST && e != EINTR) break;
    }
    return hy_fail(err, hy_errno_status(e, path_status), "%s: cannot create the "
                   "temporary %s %s beside it: %s%s", path,
                   is_dir ? "directory" : "file", *tmp, strerror(e),
                   e == ENOENT ? " (does the directory exist?)"
                   : e == EACCES ? " (is the directory writable?)" : "");
}

/* fsyncs the directory holding path, so the rename survives a crash. */
static int sync_parent(const char *path, hy_error *err) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path))
                      : strdup(".");
    if (!dir) return hy_fail(err, HY_ERR_RUNTIME, "%s: out of memory", path);
    int rc = HY_OK, fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        rc = hy_fail(err, HY_ERR_RUNTIME, "%s: written, but cannot open its "
                     "directory %s to make the rename durable: %s", path, dir,
                     strerror(errno));
    /* EINVAL: this file system cannot sync a directory (it has nothing to
     * make durable that way); the file itself was already synced. */
    else if (fsync(fd) != 0 && errno != EINVAL)
        rc = hy_fail(err, HY_ERR_RUNTIME, "%s: written, but cannot sync its "
                     "directory %s: %s", path, dir, strerror(errno));
    /* Nothing was written through this descriptor, so closing it has no
     * deferred error to report. */
    if (fd >= 0) close(fd);
    free(dir);
    return rc;
}

/* ------------------------------------------------------------------------
 * A file
 * ------------------------------------------------------------------------ */

/* Closes the temporary file, if open, without looking at the result (the
 * caller is already failing, or has checked the close itself). */
static void close_temp(hy_atomic_file *af) {
    if (af->stream) fclose(af->stream);
    else if (af->fd >= 0) close(af->fd);
    af->stream = NULL;
    af->fd = -1;
}

static void release(hy_atomic_file *af) {
    close_temp(af);
    free(af->path);
    free(af->tmp);
    *af = (hy_atomic_file){.fd = -1, .path_status = af->path_status};
}

/* Step `what` failed with errno e: remove the temporary file, report,
 * release. */
static int fail(hy_atomic_file *af, const char *what, int e, hy_error *err) {
    close_temp(af);
    int ue = unlink(af->tmp) != 0 && errno != ENOENT ? errno : 0;
    int rc = step_failed(err, af->path_status, af->path, what, "file", af->tmp,
                         e, ue);
    release(af);
    return rc;
}

int hy_atomic_open(hy_atomic_file *af, const char *path, int path_status,
                   hy_error *err) {
    *af = (hy_atomic_file){.fd = -1, .path_status = path_status};
    if (!path || !*path)
        return hy_fail(err, path_status, "no file name given (an empty path)");
    /* Caught here, not by the rename, so a directory costs no write of the
     * whole file first. (A failing stat is no error yet: a new file does
     * not exist, and any other problem shows when the temp is created.) */
    struct stat sb;
    if (path[strlen(path) - 1] == '/')
        return hy_fail(err, path_status, "%s: ends in '/', a directory name; "
                       "give a file name", path);
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return hy_fail(err, path_status, "%s: is a directory; cannot rename "
                       "the new file over it (give a file name)", path);
    if (!(af->path = strdup(path)))
        return hy_fail(err, HY_ERR_RUNTIME, "%s: out of memory", path);
    int rc = make_temp(path, 0, path_status, &af->tmp, &af->fd, err);
    if (rc) release(af);
    return rc;
}

int hy_atomic_write(hy_atomic_file *af, const void *buf, size_t n,
                    hy_error *err) {
    if (!af->path) return not_open(err);
    if (af->sum) hy_file_sum_add(af->sum, buf, n);
    if (af->stream) {
        errno = 0;
        return fwrite(buf, 1, n, af->stream) == n
            ? HY_OK : fail(af, "write", errno ? errno : EIO, err);
    }
    const unsigned char *p = buf;
    while (n) {
        ssize_t put = write(af->fd, p, n < IO_CHUNK ? n : IO_CHUNK);
        if (put < 0 && errno == EINTR) continue;
        /* 0 is not expected from a regular file; call it EIO, not a loop. */
        if (put <= 0) return fail(af, "write", put < 0 ? errno : EIO, err);
        p += put;
        n -= (size_t)put;
    }
    return HY_OK;
}

FILE *hy_atomic_stream(hy_atomic_file *af, hy_error *err) {
    if (!af->path) {
        not_open(err);
        return NULL;
    }
    if (!af->stream) {
        errno = 0;
        af->stream = fdopen(af->fd, "w");
        if (!af->stream) {
            fail(af, "open a stream on", errno ? errno : ENOMEM, err);
            return NULL;
        }
    }
    return af->stream;
}

int hy_atomic_commit(hy_atomic_file *af, hy_error *err) {
    if (!af->path) return not_open(err);
    /* A printing writer's errors wait on the stream: the flush retries
     * what is buffered (and sets errno), ferror remembers what was lost. */
    errno = 0;
    if (af->stream && (fflush(af->stream) != 0 || ferror(af->stream)))
        return fail(af, "write", errno ? errno : EIO, err);
    if (fsync(af->fd) != 0) return fail(af, "sync", errno, err);
    /* close can report a deferred write error (NFS), so it is checked. */
    int closed = af->stream ? fclose(af->stream) : close(af->fd);
    af->stream = NULL;
    af->fd = -1;
    if (closed != 0) return fail(af, "close", errno, err);
    if (rename(af->tmp, af->path) != 0)
        return fail(af, "rename into place", errno, err);
    /* After the rename the complete file is in place: a failing directory
     * sync is reported, but removing the file would lose good data. */
    int rc = sync_parent(af->path, err);
    release(af);
    return rc;
}

void hy_atomic_abort(hy_atomic_file *af) {
    if (!af->path) return;
    close_temp(af);
    unlink(af->tmp);
    release(af);
}

/* ------------------------------------------------------------------------
 * A directory
 * ------------------------------------------------------------------------ */

/* fsyncs `name` inside directory `at` and, for a directory, everything
 * below it first. Links and special files are skipped: only what the
 * caller wrote needs to be durable. Returns 0 or an errno. */
static int sync_tree(int at, const char *name) {
    int fd = openat(at, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return errno == ELOOP ? 0 : errno;   /* ELOOP: a link */
    struct stat sb;
    int e = fstat(fd, &sb) != 0 ? errno : 0;
    if (!e && S_ISDIR(sb.st_mode)) {
        DIR *d = fdopendir(fd);
        if (!d) {
            e = errno;
            close(fd);
            return e;
        }
        for (struct dirent *de; !e && (de = readdir(d));)
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                e = sync_tree(dirfd(d), de->d_name);
        if (!e && fsync(dirfd(d)) != 0 && errno != EINVAL) e = errno;
        closedir(d);
        return e;
    }
    if (!e && S_ISREG(sb.st_mode) && fsync(fd) != 0 && errno != EINVAL) e = errno;
    close(fd);
    return e;
}

/* Removes `name` inside directory `at`: a file, or a directory with all
 * below it. Returns 0 or the first errno. */
static int remove_tree(int at, const char *name) {
    if (unlinkat(at, name, 0) == 0 || errno == ENOENT) return 0;
    /* Linux refuses to unlink a directory with EISDIR, POSIX with EPERM. */
    if (errno != EISDIR && errno != EPERM) return errno;
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return e;
    }
    int e = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            int e2 = remove_tree(dirfd(d), de->d_name);
            if (!e) e = e2;
        }
    closedir(d);
    if (unlinkat(at, name, AT_REMOVEDIR) != 0 && !e) e = errno;
    return e;
}

static void dir_release(hy_atomic_dir *ad) {
    free(ad->path);
    free(ad->tmp);
    *ad = (hy_atomic_dir){.path_status = ad->path_status};
}

int hy_atomic_dir_open(hy_atomic_dir *ad, const char *path, int path_status,
                       hy_error *err) {
    *ad = (hy_atomic_dir){.path_status = path_status};
    size_t len = path ? strlen(path) : 0;
    while (len > 1 && path[len - 1] == '/') len--;
    if (!len)
        return hy_fail(err, path_status, "no directory name given (an empty path)");
    if (!(ad->path = strndup(path, len)))
        return hy_fail(err, HY_ERR_RUNTIME, "%s: out of memory", path);
    /* An existing directory is for hy_atomic_dir_replace to decide on; a
     * file in the way can only fail, so it fails before any writing. */
    struct stat sb;
    int rc = HY_OK, fd = -1;
    if (lstat(ad->path, &sb) == 0 && !S_ISDIR(sb.st_mode))
        rc = hy_fail(err, path_status, "%s: exists and is not a directory; "
                     "remove it first or choose another name", ad->path);
    if (!rc) rc = make_temp(ad->path, 1, path_status, &ad->tmp, &fd, err);
    if (rc) dir_release(ad);
    return rc;
}

/* rename(2) that refuses an existing target, where the file system can
 * say so; without RENAME_NOREPLACE a plain rename still refuses a
 * non-empty directory. Returns 0 or an errno. */
static int rename_new(const char *from, const char *to) {
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) return errno;
    return rename(from, to) == 0 ? 0 : errno;
}

/* Puts the tree at ad->tmp in place of the directory at ad->path; the old
 * tree ends up at *old (ad->tmp, or `aside`). One atomic exchange where
 * the file system has RENAME_EXCHANGE; else (NFS) two renames, between
 * which a crash leaves path missing but both trees whole under temporary
 * names. Returns 0 or an errno. */
static int swap_in(const hy_atomic_dir *ad, const char *aside, const char **old) {
    *old = ad->tmp;
    if (renameat2(AT_FDCWD, ad->tmp, AT_FDCWD, ad->path, RENAME_EXCHANGE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) return errno;
    *old = aside;
    if (rename(ad->path, aside) != 0) return errno;
    if (rename(ad->tmp, ad->path) == 0) return 0;
    int e = errno;
    rename(aside, ad->path);   /* the old tree back where it was */
    return e;
}

/* Syncs the tree and moves it to ad->path (swapping out a directory there
 * when `replace`), then fsyncs the parent. On failure before the move the
 * temporary tree is removed; after a swap, the old tree is. */
static int dir_finish(hy_atomic_dir *ad, int replace, hy_error *err) {
    if (!ad->path) return not_open(err);
    size_t n = strlen(ad->tmp) + sizeof ".old";
    char *aside = malloc(n);
    const char *old = NULL, *what = "sync the files in";
    int e = aside ? sync_tree(AT_FDCWD, ad->tmp) : ENOMEM;
    if (!e) {
        snprintf(aside, n, "%s.old", ad->tmp);
        what = "rename into place";
        e = rename_new(ad->tmp, ad->path);
        if (replace && (e == EEXIST || e == ENOTEMPTY)) e = swap_in(ad, aside, &old);
    }
    int rc = HY_OK;
    if (e) {
        int ue = remove_tree(AT_FDCWD, ad->tmp);
        rc = step_failed(err, ad->path_status, ad->path, what, "directory",
                         ad->tmp, e, ue);
    } else {
        rc = sync_parent(ad->path, err);
        if (old && (e = remove_tree(AT_FDCWD, old)) != 0 && !rc)
            rc = hy_fail(err, HY_ERR_RUNTIME, "%s: replaced, but cannot remove "
                         "the old directory, now at %s: %s", ad->path, old,
                         strerror(e));
    }
    free(aside);
    dir_release(ad);
    return rc;
}

int hy_atomic_dir_commit(hy_atomic_dir *ad, hy_error *err) {
    return dir_finish(ad, 0, err);
}

int hy_atomic_dir_replace(hy_atomic_dir *ad, hy_error *err) {
    return dir_finish(ad, 1, err);
}

void hy_atomic_dir_abort(hy_atomic_dir *ad) {
    if (!ad->path) return;
    remove_tree(AT_FDCWD, ad->tmp);
    dir_release(ad);
}

int hy_atomic_dir_remove(const char *path, hy_error *err) {
    char *tmp = NULL;
    int fd = -1;
    /* An empty hidden directory beside it, which the rename replaces: the
     * name goes in one step, and a crash while the files go leaves only a
     * hidden temporary behind, never a part of the tree under its name. */
    int rc = make_temp(path, 1, HY_ERR_RUNTIME, &tmp, &fd, err);
    if (rc) return rc;
    if (rename(path, tmp) != 0) {
        int e = errno;
        rmdir(tmp);
        free(tmp);
        return hy_fail(err, hy_errno_status(e, HY_ERR_RUNTIME), "%s: cannot remove (rename "
                       "aside): %s", path, strerror(e));
    }
    rc = sync_parent(path, err);
    int e = remove_tree(AT_FDCWD, tmp);
    if (e && !rc)
        rc = hy_fail(err, HY_ERR_RUNTIME, "%s: taken away, but its files at %s could not be "
                     "removed: %s", path, tmp, strerror(e));
    free(tmp);
    return rc;
}
