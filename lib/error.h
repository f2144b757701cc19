/*
 * error.h — errors as values.
 *
 * Every hanayo function that can fail takes a `hy_error *` and, on failure,
 * fills it with one message that carries its context (file, JSON path,
 * line:column, rank, action) and the exit status the CLI should use. Errors
 * travel up unchanged to the one place that prints them (tools/hanayo.c);
 * nothing below the CLI prints or exits.
 */
#ifndef HY_ERROR_H
#define HY_ERROR_H

#include <stddef.h>

/* Exit statuses of the CLI (DESIGN §7 "The command line"). */
enum {
    HY_OK = 0,
    HY_ERR_RUNTIME = 1,   /* a failure while running: I/O, device, stall */
    HY_ERR_INPUT = 2      /* the user's input is wrong: config, flags, files */
};

/* Why an error happened, where a caller must tell one cause from another
 * without reading the message. */
enum {
    HY_CAUSE_NONE = 0,
    HY_CAUSE_STOPPED = 1   /* a wait ended because the backend was aborted
                              (backend.h, abort): another rank failed first */
};

/* A message is one line of text: control characters (a newline or an
 * escape sequence in a file name, a key or a JSON token it quotes) become
 * '?'. A message longer than msg is cut in the middle ("..."), not at its
 * end: the context in front and the reason at the end both stay, however
 * long a path between them. */
typedef struct {
    int status;           /* HY_OK, HY_ERR_RUNTIME or HY_ERR_INPUT */
    char msg[1024];
    int cause;            /* HY_CAUSE_*; HY_CAUSE_NONE unless the code that
                             failed says otherwise */
} hy_error;

/* Sets err (when not NULL, with cause HY_CAUSE_NONE) and returns status,
 * so callers can write `return hy_fail(err, HY_ERR_INPUT, "...", ...);`. */
int hy_fail(hy_error *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* hy_fail with a cause other than HY_CAUSE_NONE. */
int hy_fail_cause(hy_error *err, int status, int cause, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prepends context ("while loading x: ") to an error already set; its
 * status and cause stay. */
void hy_error_prefix(hy_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void hy_error_clear(hy_error *err);

/* The status of a system call that failed with errno e on a path: the
 * path's fault (missing, not permitted, a directory, read-only: ENOENT
 * ENOTDIR EACCES EPERM EISDIR ELOOP ENAMETOOLONG EROFS) → path_status,
 * HY_ERR_INPUT where the user named the file; the system's (EIO, ENOSPC,
 * EFBIG, ENOMEM, ...) → HY_ERR_RUNTIME. */
int hy_errno_status(int e, int path_status);

#endif
