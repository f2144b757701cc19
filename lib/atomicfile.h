/*
 * atomicfile.h — files and directories that appear whole or not at all.
 *
 * Every file hanayo writes (token shards, safetensors, the plan's SVG, and
 * the checkpoint directories of DESIGN §5 "Model, numerics, data, files") is
 * written the same way: to a temporary name beside the target (same
 * directory, so the rename cannot cross file systems), fsync'd, renamed over
 * the target, and then the directory fsync'd so the rename itself survives a
 * crash. Until the rename, the target is untouched; on any failure the
 * temporary is removed. A reader therefore sees the old file or the new one,
 * never a partial one, and a crash leaves at worst a stray "NAME.tmp.XXXXXX"
 * (".NAME.tmp.XXXXXX" for a directory).
 *
 * A file:
 *
 *     hy_atomic_file af;
 *     int st = hy_atomic_open(&af, path, HY_ERR_INPUT, err);
 *     if (!st) st = hy_atomic_write(&af, buf, n, err);   (as often as needed)
 *     return st ? st : hy_atomic_commit(&af, err);
 *
 * Every call that fails has already closed and removed the temporary file
 * and released `af`, and hy_atomic_commit releases it whatever it returns;
 * a caller that gives up for reasons of its own calls hy_atomic_abort,
 * which is also harmless on a file already finished (so a cleanup path may
 * call it unconditionally). New files get mode 0666 less the umask, like
 * any other new file.
 *
 * Errors (error.h) start with the target's path and say which step failed
 * ("cannot create / write / sync / close / rename the temporary file ...").
 * A failure that is the path's fault (a missing directory, no permission,
 * a directory in the way: hy_errno_status in error.h) gets the caller's
 * `path_status`, HY_ERR_INPUT where the user named the file, HY_ERR_RUNTIME
 * where the caller prefers to call every write failure a runtime one;
 * anything else (EIO, ENOSPC, EFBIG, ENOMEM) is HY_ERR_RUNTIME. A failure
 * after the rename (the directory's fsync) is HY_ERR_RUNTIME and leaves
 * the complete new file in place.
 *
 * Nothing here prints, exits or keeps global state.
 */
#ifndef HY_ATOMICFILE_H
#define HY_ATOMICFILE_H

#include <stddef.h>
#include <stdio.h>

#include "checksum.h"
#include "error.h"

/* ---- A file ------------------------------------------------------------ */

typedef struct {
    char *path;          /* the target; NULL once finished */
    char *tmp;           /* the temporary file beside it */
    int fd;              /* the temporary's descriptor, -1 once closed */
    FILE *stream;        /* over fd, once hy_atomic_stream made one */
    int path_status;     /* the status of errors that are the path's fault */
    /* When the caller sets it (after open): every byte hy_atomic_write
     * writes is summed here as it goes (checksum.h), so a checkpoint's
     * files get their checksums with no second pass. */
    hy_file_sum *sum;
} hy_atomic_file;

/* Creates "PATH.tmp.XXXXXX" beside path (O_EXCL: never someone else's
 * file). Refuses an empty path, one ending in '/', and one naming an
 * existing directory, before anything is written. On failure `af` is left
 * finished (hy_atomic_abort is a no-op on it). */
int hy_atomic_open(hy_atomic_file *af, const char *path, int path_status,
                   hy_error *err);

/* Writes all n bytes (in pieces, retrying after EINTR), through the stream
 * when there is one. */
int hy_atomic_write(hy_atomic_file *af, const void *buf, size_t n,
                    hy_error *err);

/* A stdio stream over the temporary file, for writers that print (the SVG).
 * Its errors are caught by hy_atomic_commit (fflush, then ferror), so the
 * writer may print without checking each call. NULL (err set, file
 * finished) if stdio cannot make one. Owned by `af`: never fclose it. */
FILE *hy_atomic_stream(hy_atomic_file *af, hy_error *err);

/* Flushes, fsyncs and closes (each checked: close may report a deferred
 * write error) the temporary file, renames it over the target, and fsyncs
 * the directory. Releases `af` whatever happens. */
int hy_atomic_commit(hy_atomic_file *af, hy_error *err);

/* Closes and removes the temporary file and releases `af`. A no-op on a
 * file already finished: committed, or after any failure, open's included
 * (but `af` must have been through hy_atomic_open). */
void hy_atomic_abort(hy_atomic_file *af);

/* ---- A directory ---------------------------------------------------------
 * The same for a directory of files (a checkpoint): hy_atomic_dir_open
 * makes an empty ".NAME.tmp.XXXXXX" beside path (hidden: a crash's leftover
 * never passes for a checkpoint in a listing of step_*; a path that exists
 * and is not a directory is refused; a trailing '/' is ignored), the caller
 * writes whatever it likes under ad.tmp, and then either
 *   hy_atomic_dir_commit   fsyncs every file and directory in that tree,
 *                          renames it to path, fsyncs the parent; fails
 *                          (removing the tree) if path exists by then;
 *   hy_atomic_dir_replace  the same, but an existing directory at path is
 *                          swapped out in one step (renameat2's
 *                          RENAME_EXCHANGE: a reader sees the old tree or
 *                          the new, never neither) and then removed. A
 *                          file system without the exchange (NFS) gets two
 *                          renames: old aside, new in; a crash between
 *                          them leaves no tree at path, both whole under
 *                          temporary names, never a partial one at path.
 * The failure and release rules are those of a file; on failure before the
 * rename the whole temporary tree is removed. After the swap, failing to
 * remove the old tree is reported (HY_ERR_RUNTIME, naming where it is),
 * with the new tree in place. */

typedef struct {
    char *path;          /* the target; NULL once finished */
    char *tmp;           /* the temporary directory: write the files here */
    int path_status;
} hy_atomic_dir;

int hy_atomic_dir_open(hy_atomic_dir *ad, const char *path, int path_status,
                       hy_error *err);
/* Removes the directory at path and all below it: first renamed to a
 * hidden temporary beside it (the name disappears in one step), then the
 * files removed, so a crash never leaves part of the tree under its name
 * (an old checkpoint pruned: checkpoint.keep). */
int hy_atomic_dir_remove(const char *path, hy_error *err);
int hy_atomic_dir_commit(hy_atomic_dir *ad, hy_error *err);
int hy_atomic_dir_replace(hy_atomic_dir *ad, hy_error *err);
void hy_atomic_dir_abort(hy_atomic_dir *ad);

#endif
