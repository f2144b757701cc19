/*
 * error.c — see error.h.
 */
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies text (len bytes) into msg (n bytes), cut in the middle when it
 * is too long: its start (the context) and its end (the reason, which a
 * long path in between would otherwise push off) both stay, joined by
 * "...". The cuts fall between UTF-8 characters. */
static void fit(char *msg, size_t n, const char *text, size_t len) {
    if (len < n) {
        memcpy(msg, text, len + 1);
        return;
    }
    size_t head = (n - 4) / 2, tail = len - (n - 4 - head);
    while (head > 0 && (text[head] & 0xc0) == 0x80) head--;
    while (tail < len && (text[tail] & 0xc0) == 0x80) tail++;
    memcpy(msg, text, head);
    memcpy(msg + head, "...", 3);
    memcpy(msg + head + 3, text + tail, len - tail + 1);
}

/* Control characters in msg become '?': C0 (newline, escape, ...), DEL,
 * and C1 (CSI among them) in its UTF-8 form, both of its bytes. A message
 * is one line of plain text, whatever a file name, a key or a JSON token
 * quoted in it holds. */
static void tame(char *msg) {
    for (unsigned char *p = (unsigned char *)msg; *p; p++) {
        if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            p[0] = p[1] = '?';
            p++;
        } else if (*p < 0x20 || *p == 0x7f) {
            *p = '?';
        }
    }
}

/* fmt with ap into msg (n bytes), through fit, tamed. */
static void vformat(char *msg, size_t n, const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    int len = vsnprintf(msg, n, fmt, ap);
    char *whole = len >= (int)n ? malloc((size_t)len + 1) : NULL;
    if (whole) {   /* without memory, the message stays cut at its end */
        vsnprintf(whole, (size_t)len + 1, fmt, again);
        fit(msg, n, whole, (size_t)len);
        free(whole);
    }
    va_end(again);
    tame(msg);
}

static int vfail(hy_error *err, int status, int cause, const char *fmt, va_list ap) {
    if (err) {
        vformat(err->msg, sizeof err->msg, fmt, ap);
        err->status = status;
        err->cause = cause;
    }
    return status;
}

int hy_fail(hy_error *err, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(err, status, HY_CAUSE_NONE, fmt, ap);
    va_end(ap);
    return status;
}

int hy_fail_cause(hy_error *err, int status, int cause, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(err, status, cause, fmt, ap);
    va_end(ap);
    return status;
}

void hy_error_prefix(hy_error *err, const char *fmt, ...) {
    if (!err) return;
    char head[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vformat(head, sizeof head, fmt, ap);
    va_end(ap);
    size_t h = strlen(head), m = strlen(err->msg);
    char *both = malloc(h + m + 1);
    if (!both) return;   /* without memory, the message stays without its context */
    memcpy(both, head, h);
    memcpy(both + h, err->msg, m + 1);
    fit(err->msg, sizeof err->msg, both, h + m);
    free(both);
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
