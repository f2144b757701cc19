/*
 * shard.h — a synthetic token shard in a fresh temporary directory, for
 * the test programs that train (test_runtime, test_cuda, test_profile).
 *
 * hy_test_shard_make fills path (size n) with DIR/train.bin, DIR made by
 * mkdtemp from `tag`, holding `tokens` tokens of hy_synth_tokens over
 * `vocab` ids; hy_test_shard_remove deletes both. Header-only: each test
 * is its own program.
 */
#ifndef HY_TEST_SHARD_H
#define HY_TEST_SHARD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"

static int hy_test_shard_make(char *path, size_t n, const char *tag, int vocab, size_t tokens) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/hy-%s-XXXXXX", tag);
    if (!mkdtemp(dir)) return -1;
    snprintf(path, n, "%s/train.bin", dir);
    uint16_t *tok = malloc(tokens * sizeof *tok);
    hy_error err;
    int rc = tok ? hy_synth_tokens(tok, tokens, vocab, 7, 0, &err) : -1;
    if (!rc) rc = hy_shard_write(path, tok, tokens, &err);
    if (rc > 0) fprintf(stderr, "%s\n", err.msg);
    free(tok);
    return rc;
}

static void hy_test_shard_remove(char *path) {
    unlink(path);
    char *slash = strrchr(path, '/');
    if (slash) {
        *slash = '\0';
        rmdir(path);
    }
}

#endif
