/*
 * outfile.h — where hanayo may write: never over a file the run reads.
 *
 * Every file a command writes that the user names (train's --log-json,
 * tune --apply, plan --svg, profile --out's files, data synth's shards)
 * is checked here first against the run's inputs: the config file,
 * data.train, data.val, init, the checkpoint it resumes and every file in
 * checkpoint.dir (hy_outfile_inputs_of_run). Files are compared as the
 * file system knows them, by device and inode (stat, following symbolic
 * links), so another spelling of a path, a symbolic link or a hard link to
 * an input is caught as well as the same name. A match is refused before
 * anything is written:
 *   "--log-json t.bin: is the same file as t.bin, an input of this run
 *    (data.train, the training shard): writing it would destroy it; give
 *    another file"
 * (HY_ERR_INPUT). A target that does not exist yet is no input.
 *
 * Most outputs are written whole (atomicfile.h) and may replace whatever
 * non-directory is at their name; a log of lines (--log-json) is written
 * as it goes, so it must be a regular file: a FIFO (which would block the
 * open until a reader came), a device or a socket is refused, without
 * blocking, before anything is created. Its lines are written whole: a
 * line that fails (ENOSPC) is cut off again, so the file always ends with
 * the last complete line.
 *
 * Nothing here prints, exits or keeps global state.
 */
#ifndef HY_OUTFILE_H
#define HY_OUTFILE_H

#include <stddef.h>
#include <sys/types.h>

#include "error.h"
#include "run.h"

/* ---- The run's inputs ---------------------------------------------------- */

typedef struct {
    dev_t dev;
    ino_t ino;
    char *path;          /* as it was named, for messages */
    char *role;          /* what it is to the run: "the config", "data.train, ..." */
} hy_outfile_input;

typedef struct {
    hy_outfile_input *items;
    int n, cap;
} hy_outfile_inputs;

/* An empty list (also what hy_outfile_inputs_free leaves). */
void hy_outfile_inputs_init(hy_outfile_inputs *in);
void hy_outfile_inputs_free(hy_outfile_inputs *in);

/* Adds the file at path (NULL or missing: nothing is added; its reader
 * reports that) in its role. */
int hy_outfile_inputs_add(hy_outfile_inputs *in, const char *path, const char *role,
                          hy_error *err);

/* Adds every file below directory dir (a checkpoint, a checkpoint.dir),
 * a few levels deep, without following links to directories. A missing
 * dir adds nothing. */
int hy_outfile_inputs_add_tree(hy_outfile_inputs *in, const char *dir, const char *role,
                               hy_error *err);

/* The inputs of run: its config file, data.train's shards (its patterns
 * expanded: one that matches nothing is data.h's error), data.val, init,
 * every file in checkpoint.dir, and those of the checkpoint `resumed`
 * (NULL: none). */
int hy_outfile_inputs_of_run(hy_outfile_inputs *in, const hy_run *run, const char *resumed,
                             hy_error *err);

/* ---- The check ------------------------------------------------------------ */

/* May output `what` ("--log-json", "--apply") be written at path? Refused
 * (HY_ERR_INPUT, both paths and the input's role named) when path is one
 * of in's files (in may be NULL: no inputs); with `stream`, also when
 * path exists and is not a regular file. Nothing is created. */
int hy_outfile_check(const hy_outfile_inputs *in, const char *what, const char *path,
                     int stream, hy_error *err);

/* Whether two paths name the same output: the same existing file, or, for
 * one not there yet, the same name in the same directory. */
int hy_outfile_same(const char *a, const char *b);

/* ---- A log of lines ------------------------------------------------------- */

typedef struct {
    int fd;              /* -1: closed */
    int created;         /* the open made the file */
    off_t good;          /* bytes of whole lines written */
    char *path;
    const char *what;    /* the flag that named it, for messages */
} hy_outfile_log;

/* Opens path for a log of lines, empty: never blocking (O_NONBLOCK, so a
 * FIFO put there since the check fails the open or is refused), only a
 * regular file, and never one of in's files (checked again on the open
 * file). On failure nothing stays that the open created. */
int hy_outfile_log_open(hy_outfile_log *lg, const hy_outfile_inputs *in, const char *what,
                        const char *path, hy_error *err);

/* Appends text (one or more lines, each ending in '\n') whole: a write
 * that fails part-way is cut off again (HY_ERR_RUNTIME, saying how many
 * bytes of whole lines the file keeps). */
int hy_outfile_log_write(hy_outfile_log *lg, const char *text, hy_error *err);

/* Closes it (the close checked: NFS reports late write errors there). A
 * no-op on a log not open. */
int hy_outfile_log_close(hy_outfile_log *lg, hy_error *err);

/* Closes it and removes the file if the open made it: a run refused
 * after the open leaves no log behind. */
void hy_outfile_log_discard(hy_outfile_log *lg);

#endif
