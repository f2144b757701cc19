/*
 * infile.c — see infile.h.
 */
#include "infile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *hy_infile_kind(mode_t m) {
    if (S_ISREG(m)) return "a regular file";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a regular file";
}

int hy_infile_open(const char *path, const char *what, int *fd, hy_error *err) {
    const char *sep = what ? " " : "";
    if (!what) what = "";
    do *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); while (*fd < 0 && errno == EINTR);
    if (*fd < 0) {
        int e = errno;
        return hy_fail(err, hy_errno_status(e, HY_ERR_INPUT), "%s: cannot open%s%s: %s", path,
                       sep, what, strerror(e));
    }
    struct stat st;
    int flags, rc = HY_OK;
    if (fstat(*fd, &st) != 0)
        rc = hy_fail(err, HY_ERR_RUNTIME, "%s: cannot stat%s%s: %s", path, sep, what,
                     strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = hy_fail(err, HY_ERR_INPUT, "%s: cannot open%s%s: it is %s, not a regular file",
                     path, sep, what, hy_infile_kind(st.st_mode));
    else if ((flags = fcntl(*fd, F_GETFL)) < 0 || fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
        rc = hy_fail(err, HY_ERR_RUNTIME, "%s: cannot open%s%s: fcntl: %s", path, sep, what,
                     strerror(errno));
    if (rc) {
        (void)close(*fd);   /* opened to read, nothing read: nothing to lose */
        *fd = -1;
    }
    return rc;
}

int hy_infile_fopen(const char *path, const char *what, FILE **f, hy_error *err) {
    int fd;
    *f = NULL;
    int rc = hy_infile_open(path, what, &fd, err);
    if (rc) return rc;
    *f = fdopen(fd, "rb");
    if (*f) return HY_OK;
    int e = errno;
    (void)close(fd);
    return hy_fail(err, HY_ERR_RUNTIME, "%s: cannot open%s%s: %s", path, what ? " " : "",
                   what ? what : "", strerror(e));
}

json_t *hy_infile_json(const char *path, size_t flags, json_error_t *je) {
    hy_error err;
    FILE *f;
    if (hy_infile_fopen(path, NULL, &f, &err)) {
        /* jansson's own shape for a file it cannot open: no line, the
         * reason in text (less our "<path>: cannot open: "). */
        const char *why = err.msg, *at = err.msg;
        while ((at = strstr(at, ": cannot open: "))) why = at += strlen(": cannot open: ");
        memset(je, 0, sizeof *je);
        je->line = je->column = -1;
        je->position = 0;
        snprintf(je->source, sizeof je->source, "%.*s", (int)sizeof je->source - 1, path);
        snprintf(je->text, sizeof je->text, "%.*s", (int)sizeof je->text - 1, why);
        return NULL;
    }
    json_t *root = json_loadf(f, flags, je);
    fclose(f);
    return root;
}
