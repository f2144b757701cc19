/*
 * data.h — token shards: reading, batching, BERT's masking, writing, and a
 * synthetic corpus.
 *
 * A shard is llm.c's format (DESIGN §5 "Model, numerics, data, files"), so
 * users' existing shards work:
 *
 *     bytes 0..1023   256 little-endian int32: [0] magic 20240520,
 *                     [1] version 1, [2] token count N (1 <= N < 2^31),
 *                     the rest zero
 *     bytes 1024..    N little-endian uint16 token ids
 *
 * The file is exactly 1024 + 2N bytes. hy_shard_open checks all of that
 * (and, given the model's vocabulary, every token) once, so the training
 * loop never meets a bad token. Batches follow llm.c's layout: a batch is
 * B*T+1 consecutive tokens; the inputs are B rows of T, the targets the same
 * tokens shifted left by one.
 *
 * hy_synth_tokens makes a deterministic corpus with learnable structure, so
 * a new user sees the loss fall at once (`hanayo data synth`).
 *
 * Errors are values (error.h): HY_ERR_INPUT for a wrong or malformed file,
 * a missing file or directory, bad sizes; HY_ERR_RUNTIME for I/O failures
 * and lack of memory. Every message starts with the file's path. Nothing
 * here prints: `hanayo data` (tools/cmd_data.c) reports what these
 * functions return.
 */
#ifndef HY_DATA_H
#define HY_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define HY_SHARD_MAGIC 20240520
#define HY_SHARD_VERSION 1
#define HY_SHARD_HEADER_INTS 256
#define HY_SHARD_HEADER_BYTES (HY_SHARD_HEADER_INTS * 4)
/* llm.c stores the count as an int32. */
#define HY_SHARD_MAX_TOKENS 2147483647u

/* An open shard. Plain data: read the fields, do not assign them (use
 * hy_shard_set_pos for the position). After hy_shard_open the tokens never
 * change, so several threads may read one shard through hy_batch_read,
 * each with its own position. */
typedef struct {
    char *path;               /* a copy, for messages */
    uint16_t *tokens;         /* n token ids, in host order */
    size_t n;                 /* token count (header[2]) */
    uint64_t file_bytes;      /* 1024 + 2n */
    int max_token;            /* the largest id in the shard */
    size_t pos;               /* where hy_batch_next reads next */
} hy_shard;

/* Opens and checks the shard at path and loads its tokens into memory.
 * vocab > 0 also checks every token is < vocab (the config's model.vocab);
 * vocab <= 0 skips that check. On failure *sh is left empty (safe to
 * close) and err names the file, what was found and what was expected. */
int hy_shard_open(hy_shard *sh, const char *path, int vocab, hy_error *err);

/* Frees the tokens; leaves *sh empty. Safe on an empty or failed shard. */
void hy_shard_close(hy_shard *sh);

/* ---- Batches --------------------------------------------------------------
 * One batch is the B*T+1 tokens starting at the position p:
 *     inputs[b*T + t]  = tokens[p + b*T + t]
 *     targets[b*T + t] = tokens[p + b*T + t + 1]
 * (both B*T ints, row-major; either may be NULL when a caller needs only
 * one of them, e.g. the first and last pipeline stages). Reading advances
 * the position by B*T, so consecutive batches share one boundary token
 * (the last target of one batch is the first input of the next), as in
 * llm.c.
 *
 * Wrap-around: when fewer than B*T+1 tokens remain from the position, the
 * batch is read from the start of the shard instead (position 0), and the
 * position continues from there. The tail that did not fit is skipped in
 * that pass; every pass starts at token 0, so the sequence of batches is a
 * pure function of (shard, start position, B, T): saving the position and
 * restoring it with hy_shard_set_pos resumes bit for bit.
 *
 * B, T >= 1. A shard with fewer than B*T+1 tokens cannot hold one batch:
 * HY_ERR_INPUT naming the file, B, T and both sizes. */
int hy_batch_read(const hy_shard *sh, size_t *pos, int B, int T,
                  int *inputs, int *targets, hy_error *err);

/* hy_batch_read with the shard's own position. */
int hy_batch_next(hy_shard *sh, int B, int T, int *inputs, int *targets,
                  hy_error *err);

/* The shard's own position (the first token of the next batch, before any
 * wrap), for checkpoints. */
size_t hy_shard_pos(const hy_shard *sh);

/* Restores a saved position; it must be < n (every position reading can
 * produce is), else HY_ERR_INPUT: the checkpoint belongs to another shard. */
int hy_shard_set_pos(hy_shard *sh, size_t pos, hy_error *err);

/* ---- Masked-LM inputs (BERT) ------------------------------------------------
 * Masks one micro-batch of n input tokens in place, as BERT's pre-training
 * does: each position is chosen with p = 0.15; a chosen one keeps its
 * token as its target and becomes the mask token (vocab - 1, the
 * vocabulary's last id) with p = 0.8, a uniformly random token with
 * p = 0.1, or stays with p = 0.1; every other position's target is -1 (no
 * loss). The draws come from rng.h's stream (seed ^ 0x4D4C4D,
 * step * micro_batches + m), so the masks are a pure function of (seed,
 * step, micro-batch m of the step's micro_batches): a resumed run masks
 * exactly as an uninterrupted one did. Like the synthetic corpus's, these
 * bytes are part of the contract (tests/test_data.c pins them). */
void hy_mask_tokens(int *inputs, int *targets, int n, int vocab, uint64_t seed, int step,
                    int micro_batches, int m);

/* ---- Writing ----------------------------------------------------------------
 * Writes n tokens (1 <= n <= HY_SHARD_MAX_TOKENS) as a shard at path,
 * atomically (atomicfile.h): a temporary file beside it (same directory,
 * so the rename cannot cross file systems), written, fsync'd, renamed over
 * path, then the directory fsync'd so the rename itself is durable. On
 * any error the temporary file is removed and path is untouched: never a
 * partial shard. The file gets mode 0666 less the umask, like any new file. */
int hy_shard_write(const char *path, const uint16_t *tokens, size_t n,
                   hy_error *err);

/* ---- Entropy ----------------------------------------------------------------
 * Plug-in (maximum-likelihood) estimates in bits per token over n tokens:
 * *unigram = H(token), *bigram = H(next | prev) over the n-1 pairs. The
 * bigram estimate needs a dense count table, so it is computed only when
 * every id is < HY_BIGRAM_MAX_VOCAB; otherwise *bigram = NAN. Plug-in
 * estimates read low when n is not much larger than the number of distinct
 * pairs. bigram may be NULL. HY_ERR_RUNTIME only when out of memory. */
#define HY_BIGRAM_MAX_VOCAB 4096
int hy_tokens_entropy(const uint16_t *tokens, size_t n, double *unigram,
                      double *bigram, hy_error *err);

/* ---- Synthetic corpus ---------------------------------------------------------
 * A "language" fixed by (vocab, seed), sampled as a stream fixed by
 * (seed, stream): the train and validation shards use one seed and streams
 * 0 and 1, so they are different text in the same language.
 *
 * The language: every token a has 4 successors succ(a, 0..3) (hashes of
 * seed and a, so no tables), and there are 16 phrases of 8..16 tokens
 * (hashes too). From the previous token, each next position is
 *   with p = 1/16  the start of a phrase (uniform among the 16), whose
 *                  tokens are then emitted in full;
 *   with p = 1/20  a uniformly random token (noise: every token reachable);
 *   otherwise      succ(prev, k) with k = 0..3 at 60%, 25%, 10%, 5%.
 * So the text has local structure a bigram model learns in a few hundred
 * steps (the successor table) and longer structure only attention can use
 * (a phrase is determined by its first tokens). hy_synth_entropy_bits gives
 * the source's entropy rate from these numbers: about 1.6 bits/token at
 * vocab 512 (1.1 nats, against ln 512 = 6.24 nats for a uniform guess), the
 * floor a model's loss can approach. The measured H(next|prev), what a
 * bigram model could reach, is about 2.0-2.1 bits at vocab 512 (1M tokens)
 * (unigram: 8.5 bits), far below log2 512 = 9.
 *
 * Every step is integer arithmetic on lib/rng.h's splitmix64 (no rand()),
 * so the tokens are the same on every platform and build: the bytes are
 * part of the contract (tests/test_data.c pins them), and changing this
 * generator or rng.h's changes every synthetic shard. vocab in 2..65536,
 * n >= 1. Output i depends only on (seed, stream, vocab) and i: a shorter
 * run is a prefix of a longer one. */
int hy_synth_tokens(uint16_t *out, size_t n, int vocab, uint64_t seed,
                    uint32_t stream, hy_error *err);

/* The entropy rate of the synthetic source at this vocab, in bits/token,
 * from the probabilities above, ignoring the collisions of hashed
 * successors (which only lower it; rare unless vocab is tiny), and capped
 * at log2(vocab). An estimate from above, for reports. */
double hy_synth_entropy_bits(int vocab);

/* ---- A shard's figures ------------------------------------------------------
 * What `hanayo data info` reports: opens the shard at path (checked as
 * hy_shard_open does, against vocab when > 0), measures it and closes it.
 * The estimates are hy_tokens_entropy's, bigram_bits NAN where it computes
 * none. Errors: hy_shard_open's, or HY_ERR_RUNTIME when out of memory. */
typedef struct {
    size_t tokens;            /* token count */
    uint64_t file_bytes;      /* 1024 + 2 * tokens */
    int max_token;            /* the largest id: ids seen 0..max_token */
    double unigram_bits;      /* bits/token */
    double bigram_bits;       /* next|prev, bits/token; NAN: not computed */
} hy_shard_stats;

int hy_shard_info(const char *path, int vocab, hy_shard_stats *info, hy_error *err);

#endif
