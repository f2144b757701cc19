/*
 * cmd_data.h — `hanayo data synth` and `hanayo data info`, the two
 * subcommands' work without their argument handling, for tests.
 *
 * lib/data.h makes, writes and measures token shards; these report it.
 */
#ifndef HY_CMD_DATA_H
#define HY_CMD_DATA_H

#include <stdint.h>
#include <stdio.h>

#include "error.h"

typedef struct {
    const char *out;          /* the training shard */
    long long tokens;
    const char *val_out;      /* NULL: none */
    long long val_tokens;
    int vocab;
    uint64_t seed;
    int format;               /* hy_shard_format; 0: u16 when the vocab fits, else u32 */
} cli_data_synth_request;

/* `hanayo data synth`: writes the shard(s) (train: stream 0, val: stream
 * 1) in the format asked for and a short report to out. */
int cli_data_synth(const cli_data_synth_request *rq, FILE *out, hy_error *err);

/* `hanayo data info`: opens path (checking tokens against vocab when > 0)
 * and writes its format, token count, file size, vocab range seen and
 * entropy estimates to out, as text or as one JSON line. */
int cli_data_info(const char *path, int vocab, int json, FILE *out, hy_error *err);

#endif
