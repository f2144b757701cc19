/*
 * fuzz_shard.c — libFuzzer harness for the token-shard reader (lib/data.c).
 *
 * Opens the input as a shard (hy_shard_open, no vocabulary check). A
 * failure must be an error naming the file. A shard that opens must be
 * exactly what the bytes say (data.h's formats: 1024-byte header whose
 * magic names the width, then n little-endian uint16 or uint32 ids,
 * nothing else), must pass the vocabulary check at max_token + 1 and fail
 * it at max_token, and hy_dataset_read over the shard as a dataset, for
 * a batch shape taken from the input, must give the documented batches:
 * B*T consecutive tokens and the same shifted by one, wrapping to token 0
 * when fewer than B*T + 1 remain.
 */
#include "data.h"
#include "fuzz.h"

static unsigned tok_at(const uint8_t *data, int width, size_t i) {
    const uint8_t *p = data + HY_SHARD_HEADER_BYTES + (size_t)width * i;
    unsigned v = (unsigned)p[0] | (unsigned)p[1] << 8;
    if (width == 4) v |= (unsigned)p[2] << 16 | (unsigned)p[3] << 24;
    return v;
}

static void read_batches(const hy_shard *sh, const uint8_t *data, int B, int T) {
    size_t bt = (size_t)B * (size_t)T;
    int *in = malloc(bt * sizeof *in), *tg = malloc(bt * sizeof *tg);
    FUZZ_ASSERT(in && tg, "out of memory");
    hy_dataset ds;
    hy_error err;
    const char *path = sh->path;
    int rc = hy_dataset_open(&ds, &path, 1, 0, &err);
    FUZZ_ASSERT(rc == HY_OK, "the shard opened, the dataset of it not: %s", err.msg);
    size_t pos = 0;
    /* Enough reads to pass the end once and wrap. */
    size_t reads = sh->n / bt + 2;
    for (size_t r = 0; r < reads; r++) {
        size_t before = pos;
        rc = hy_dataset_read(&ds, &pos, B, T, in, tg, &err);
        if (sh->n < bt + 1) {
            FUZZ_ASSERT(rc == HY_ERR_INPUT, "a shard of %zu tokens gave a %d x %d batch",
                        sh->n, B, T);
            fuzz_check_error(rc, &err, sh->path);
            break;
        }
        FUZZ_ASSERT(rc == HY_OK, "%s", err.msg);
        size_t start = before > sh->n - (bt + 1) ? 0 : before;
        FUZZ_ASSERT(pos == start + bt, "position %zu after a batch from %zu", pos, start);
        for (size_t i = 0; i < bt; i++) {
            FUZZ_ASSERT((unsigned)in[i] == tok_at(data, sh->format, start + i), "input %zu", i);
            FUZZ_ASSERT((unsigned)tg[i] == tok_at(data, sh->format, start + i + 1),
                        "target %zu", i);
        }
    }
    hy_dataset_close(&ds);
    free(in);
    free(tg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[256];
    fuzz_write_temp(data, size, path, sizeof path);
    hy_shard sh;
    hy_error err;
    int rc = hy_shard_open(&sh, path, 0, &err);
    if (rc != HY_OK) {
        fuzz_check_error(rc, &err, path);
        FUZZ_ASSERT(!sh.ids && !sh.path, "a failed open left memory behind");
        unlink(path);
        return 0;
    }
    size_t w = (size_t)sh.format;
    FUZZ_ASSERT(w == 2 || w == 4, "format %zu", w);
    FUZZ_ASSERT(size >= HY_SHARD_HEADER_BYTES + w && (size - HY_SHARD_HEADER_BYTES) % w == 0,
                "opened a %zu-byte file as %zu bytes a token", size, w);
    FUZZ_ASSERT(sh.n == (size - HY_SHARD_HEADER_BYTES) / w && sh.file_bytes == size,
                "n %zu, file_bytes %llu for %zu bytes", sh.n,
                (unsigned long long)sh.file_bytes, size);
    unsigned max = 0;
    for (size_t i = 0; i < sh.n; i++) {
        FUZZ_ASSERT(hy_shard_id(&sh, i) == tok_at(data, (int)w, i), "token %zu", i);
        FUZZ_ASSERT(tok_at(data, (int)w, i) <= HY_SHARD_MAX_ID, "id %u accepted",
                    tok_at(data, (int)w, i));
        if (tok_at(data, (int)w, i) > max) max = tok_at(data, (int)w, i);
    }
    FUZZ_ASSERT((unsigned)sh.max_token == max, "max_token %d, want %u", sh.max_token, max);

    /* The vocabulary check, on both sides of the largest id (a vocab is
     * an int: none above the largest id a shard may hold). */
    hy_shard again;
    if (sh.max_token < (int)HY_SHARD_MAX_ID) {
        rc = hy_shard_open(&again, path, sh.max_token + 1, &err);
        FUZZ_ASSERT(rc == HY_OK, "vocab max+1 refused: %s", err.msg);
        hy_shard_close(&again);
    }
    if (sh.max_token > 0) {
        rc = hy_shard_open(&again, path, sh.max_token, &err);
        FUZZ_ASSERT(rc == HY_ERR_INPUT, "vocab %d accepted a token %d", sh.max_token,
                    sh.max_token);
        fuzz_check_error(rc, &err, path);
        hy_shard_close(&again);
    }

    /* Batches: one token at a time, and a shape from the input's last
     * bytes (B 1..4, T 1..16). */
    read_batches(&sh, data, 1, 1);
    read_batches(&sh, data, 1 + data[size - 1] % 4, 1 + data[size - 2] % 16);
    hy_shard_close(&sh);
    unlink(path);
    return 0;
}
