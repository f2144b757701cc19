/*
 * error.c — see error.h.
 */
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int hy_vfail(hy_error *err, int status, int cause, const char *fmt, va_list ap) {
    if (err) {
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        err->status = status;
        err->cause = cause;
    }
    return status;
}

int hy_fail(hy_error *err, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    hy_vfail(err, status, HY_CAUSE_NONE, fmt, ap);
    va_end(ap);
    return status;
}

int hy_fail_cause(hy_error *err, int status, int cause, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    hy_vfail(err, status, cause, fmt, ap);
    va_end(ap);
    return status;
}

void hy_error_prefix(hy_error *err, const char *fmt, ...) {
    if (!err) return;
    char head[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* A message longer than msg is cut at its end, on purpose: the context
     * in front matters most. Using the result tells gcc the cut is meant
     * (-Wformat-truncation warns only when it is ignored). */
    if (snprintf(err->msg, sizeof err->msg, "%s%s", head, old) >= (int)sizeof err->msg)
        return;
}

void hy_error_clear(hy_error *err) {
    if (!err) return;
    err->status = HY_OK;
    err->msg[0] = '\0';
    err->cause = HY_CAUSE_NONE;
}

int hy_errno_status(int e, int path_status) {
    switch (e) {
    case ENOENT: case ENOTDIR: case EACCES: case EPERM: case EISDIR:
    case ELOOP: case ENAMETOOLONG: case EROFS:
        return path_status;
    default:
        return HY_ERR_RUNTIME;
    }
}
