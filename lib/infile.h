/*
 * infile.h — opening a file the user named, to read it, without hanging.
 *
 * Every file hanayo reads that a user can point it at (the config, token
 * shards, safetensors weights, a checkpoint's state.json and files, a
 * profile's summary.json) is opened here. A plain open() of a FIFO blocks
 * until some writer opens it, which may be never; so the file is opened
 * O_NONBLOCK (which makes the open of a FIFO return at once), fstat'd, and
 * anything but a regular file (a FIFO, a directory, a socket, a device) is
 * refused before a read could block; then O_NONBLOCK is cleared, so reads
 * of the regular file behave as usual. Descriptors are O_CLOEXEC.
 *
 * Errors (error.h) name the path first:
 *   "<path>: cannot open <what>: <the system's reason>"    (open failed;
 *        HY_ERR_INPUT where the path is at fault, hy_errno_status)
 *   "<path>: cannot open <what>: it is a FIFO, not a regular file"
 *        (HY_ERR_INPUT)
 * where <what> says what the file was to be ("config", "token shard"); a
 * NULL what leaves it out ("<path>: cannot open: ...").
 *
 * Nothing here prints, exits or keeps global state.
 */
#ifndef HY_INFILE_H
#define HY_INFILE_H

#include <jansson.h>
#include <stdio.h>
#include <sys/types.h>

#include "error.h"

/* Opens path to read into *fd, as above. */
int hy_infile_open(const char *path, const char *what, int *fd, hy_error *err);

/* The same as a stdio stream ("rb") into *f. */
int hy_infile_fopen(const char *path, const char *what, FILE **f, hy_error *err);

/* json_load_file with the same guard: NULL for a file that cannot be
 * opened or is not a regular file, with je->text saying why (the message
 * above, less the path) and je->line -1, as jansson reports a file it
 * cannot open. */
json_t *hy_infile_json(const char *path, size_t flags, json_error_t *je);

/* What a file of mode m is, for messages: "a FIFO", "a directory", "a
 * socket", "a character device", "a block device", "a symbolic link", "a
 * regular file"; "not a regular file" for anything else. */
const char *hy_infile_kind(mode_t m);

#endif
