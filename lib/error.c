/*
 * error.c — see error.h.
 */
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int hy_fail(hy_error *err, int status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
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
