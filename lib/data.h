/*
 * data.h — token shards: reading (one shard, or several as one stream),
 * batching, BERT's masking, writing, and a synthetic corpus.
 *
 * A shard is one of llm.c's two formats, so users' existing shards work
 * (DESIGN §5 "Model, numerics, data, files"):
 *
 *     bytes 0..1023   256 little-endian int32: [0] magic, [1] version,
 *                     [2] token count N (1 <= N < 2^31), the rest zero
 *     bytes 1024..    N little-endian token ids, whose width the first
 *                     two fields name:
 *                       magic 20240520, version 1: uint16 ids (GPT-2's)
 *                       magic 20240801, version 7: uint32 ids (Llama 3's)
 *
 * The file is exactly 1024 + wN bytes (w = 2 or 4). hy_shard_open checks
 * all of that (and, given the model's vocabulary, every token) once, so
 * the training loop never meets a bad token. A shard keeps its own width
 * in memory: a uint16 shard takes 2 bytes a token, read through
 * hy_shard_id. Batches follow llm.c's layout: a batch is B*T+1
 * consecutive tokens; the inputs are B rows of T, the targets the same
 * tokens shifted left by one.
 *
 * A dataset (hy_dataset) is a list of shards read in order as one
 * stream: its positions count tokens from the first shard's first, and a
 * batch may start in one shard and end in the next. hy_data_expand turns
 * the config's data.train (paths and glob patterns) into that list.
 *
 * hy_synth_ids makes a deterministic corpus with learnable structure, so
 * a new user sees the loss fall at once (`hanayo data synth`).
 *
 * Errors are values (error.h): HY_ERR_INPUT for a wrong or malformed file,
 * a missing file or directory, a pattern that matches nothing, bad sizes;
 * HY_ERR_RUNTIME for I/O failures and lack of memory. Every message
 * starts with the file's path (or the pattern). Nothing here prints:
 * `hanayo data` (tools/cmd_data.c) reports what these functions return.
 */
#ifndef HY_DATA_H
#define HY_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* The two formats; the value is the bytes per id. */
typedef enum { HY_SHARD_U16 = 2, HY_SHARD_U32 = 4 } hy_shard_format;

#define HY_SHARD_MAGIC 20240520      /* uint16 ids */
#define HY_SHARD_VERSION 1
#define HY_SHARD32_MAGIC 20240801    /* uint32 ids */
#define HY_SHARD32_VERSION 7
#define HY_SHARD_HEADER_INTS 256
#define HY_SHARD_HEADER_BYTES (HY_SHARD_HEADER_INTS * 4)
/* llm.c stores the count as an int32. */
#define HY_SHARD_MAX_TOKENS 2147483647u
/* The largest id any shard may hold: model.vocab is an int, so no
 * vocabulary holds an id of 2^31 or more (a uint32 shard could). */
#define HY_SHARD_MAX_ID 2147483647u

/* "u16" or "u32"; "?" for anything else. */
const char *hy_shard_format_name(hy_shard_format format);

/* An open shard. Plain data: read the fields, do not assign them. After
 * hy_shard_open the ids never change, so several threads may read one. */
typedef struct {
    char *path;               /* a copy, for messages */
    void *ids;                /* n token ids of `format` bytes each, host order
                                 (hy_shard_id); NULL in a dataset's shards not loaded */
    size_t n;                 /* token count (header[2]) */
    hy_shard_format format;   /* the width of the ids, from the header */
    uint64_t file_bytes;      /* 1024 + format * n */
    int max_token;            /* the largest id in the shard; -1: not read yet */
} hy_shard;

/* Id i < n of a loaded shard. */
static inline uint32_t hy_shard_id(const hy_shard *sh, size_t i) {
    return sh->format == HY_SHARD_U16 ? ((const uint16_t *)sh->ids)[i]
                                      : ((const uint32_t *)sh->ids)[i];
}

/* Opens and checks the shard at path and loads its ids into memory.
 * vocab > 0 also checks every token is < vocab (the config's model.vocab);
 * vocab <= 0 skips that check (an id above HY_SHARD_MAX_ID is refused
 * all the same). On failure *sh is left empty (safe to close) and err
 * names the file, what was found and what was expected. */
int hy_shard_open(hy_shard *sh, const char *path, int vocab, hy_error *err);

/* Frees the ids; leaves *sh empty. Safe on an empty or failed shard. */
void hy_shard_close(hy_shard *sh);

/* ---- Datasets: several shards as one stream ---------------------------------
 * hy_data_expand turns specs (data.train: each a path, or a glob(3)
 * pattern when it holds one of * ? [) into the paths read, in order: a
 * path as it is (opening it says whether it exists), a pattern as the
 * files it matches sorted by name in byte order (strcmp: shard_000010
 * after shard_000009 when the numbers are zero-padded, as llm.c's are;
 * escape a literal * ? [ with a backslash). A pattern that matches
 * nothing, or whose directory cannot be read, is HY_ERR_INPUT naming it
 * and `what` (the config key). *paths and its strings are malloc'd: free
 * with hy_data_paths_free. */
int hy_data_expand(const char *const *specs, int n_specs, const char *what, char ***paths,
                   int *n_paths, hy_error *err);
void hy_data_paths_free(char **paths, int n_paths);

/* A dataset holds every shard's header (path, count, format, size) from
 * the start, and the ids of at most two shards at a time, loaded when
 * reading reaches them and checked then against the vocabulary, as
 * hy_shard_open checks: memory for two shards, whatever the dataset's
 * size (a batch that crosses from one shard into the next needs both).
 * Reading is therefore not const: one thread reads a dataset. */
typedef struct {
    hy_shard *shards;         /* [n_shards] in reading order; ids NULL unless resident */
    size_t *start;            /* [n_shards]: the stream index of each one's first token */
    int n_shards;
    size_t n;                 /* tokens in all */
    int vocab;                /* what loaded shards are checked against (<= 0: nothing) */
    int resident[2];          /* the shards whose ids are loaded; -1: none */
    int last;                 /* the slot of resident[] read last */
    size_t pos;               /* where hy_dataset_next reads next */
} hy_dataset;

/* Opens the shards at paths (n_paths >= 1; the same file may appear more
 * than once) as one dataset: every header checked now (hy_shard_open's
 * errors), the first shard loaded and checked whole. On failure *ds is
 * left empty (safe to close). */
int hy_dataset_open(hy_dataset *ds, const char *const *paths, int n_paths, int vocab,
                    hy_error *err);

/* Frees everything; leaves *ds empty. Safe on an empty or failed one. */
void hy_dataset_close(hy_dataset *ds);

/* ---- Batches --------------------------------------------------------------
 * One batch is the B*T+1 tokens of the stream starting at the position p:
 *     inputs[b*T + t]  = tokens[p + b*T + t]
 *     targets[b*T + t] = tokens[p + b*T + t + 1]
 * (both B*T ints, row-major; either may be NULL when a caller needs only
 * one of them, e.g. the first and last pipeline stages; with both NULL
 * only the position moves and nothing is loaded). Reading advances the
 * position by B*T, so consecutive batches share one boundary token (the
 * last target of one batch is the first input of the next), as in llm.c.
 *
 * Wrap-around: when fewer than B*T+1 tokens remain from the position, the
 * batch is read from the start of the stream instead (position 0), and
 * the position continues from there. The tail that did not fit is
 * skipped in that pass; every pass starts at token 0 and reads
 * hy_dataset_batches batches, so the sequence of batches is a pure
 * function of (shards, start position, B, T): saving the position and
 * restoring it with hy_dataset_set_pos resumes bit for bit, and batch k
 * of a run that starts at position 0 is in pass k / batches + 1
 * (hy_data_epoch).
 *
 * B, T >= 1. A dataset with fewer than B*T+1 tokens cannot hold one
 * batch: HY_ERR_INPUT naming the file (or the shard count), B, T and both
 * sizes. A shard that reading reaches and that fails to load (changed on
 * disk since the open, a token >= vocab) is hy_shard_open's error. */
int hy_dataset_read(hy_dataset *ds, size_t *pos, int B, int T, int *inputs, int *targets,
                    hy_error *err);

/* hy_dataset_read with the dataset's own position. */
int hy_dataset_next(hy_dataset *ds, int B, int T, int *inputs, int *targets, hy_error *err);

/* Whole batches of B*T+1 tokens one pass reads: (n - 1) / (B*T); 0 when
 * the dataset cannot hold one. */
size_t hy_dataset_batches(const hy_dataset *ds, int B, int T);

/* The pass over the data (1, 2, ...) that batch k (counted from 0 at the
 * start of a run, over every replica's micro-batches) reads in, with
 * `batches` (>= 1) per pass. */
uint64_t hy_data_epoch(uint64_t k, size_t batches);

/* The dataset's own position (the first token of the next batch, before
 * any wrap), for checkpoints. */
size_t hy_dataset_pos(const hy_dataset *ds);

/* Restores a saved position; it must be < n (every position reading can
 * produce is), else HY_ERR_INPUT: the checkpoint belongs to other data. */
int hy_dataset_set_pos(hy_dataset *ds, size_t pos, hy_error *err);

/* ---- Masked-LM inputs (BERT) ------------------------------------------------
 * Masks one micro-batch of n input tokens in place, as BERT's pre-training
 * does: each position is chosen with p = 0.15; a chosen one keeps its
 * token as its target and becomes mask_token (model.mask_token, below
 * vocab) with p = 0.8, a uniformly random token with
 * p = 0.1, or stays with p = 0.1; every other position's target is -1 (no
 * loss). The draws come from rng.h's stream (seed ^ 0x4D4C4D,
 * step * micro_batches + m), so the masks are a pure function of (seed,
 * step, micro-batch m of the step's micro_batches): a resumed run masks
 * exactly as an uninterrupted one did. Like the synthetic corpus's, these
 * bytes are part of the contract (tests/test_data.c pins them). */
void hy_mask_tokens(int *inputs, int *targets, int n, int vocab, int mask_token,
                    uint64_t seed, int step, int micro_batches, int m);

/* ---- Writing ----------------------------------------------------------------
 * Writes n ids (1 <= n <= HY_SHARD_MAX_TOKENS) of `format` bytes each
 * (host order, as a hy_shard holds them) as a shard of that format at
 * path, atomically (atomicfile.h): a temporary file beside it (same
 * directory, so the rename cannot cross file systems), written, fsync'd,
 * renamed over path, then the directory fsync'd so the rename itself is
 * durable. On any error the temporary file is removed and path is
 * untouched: never a partial shard. An id above HY_SHARD_MAX_ID is
 * HY_ERR_INPUT (no reader would take it). The file gets mode 0666 less
 * the umask, like any new file. */
int hy_shard_write_ids(const char *path, const void *ids, hy_shard_format format, size_t n,
                       hy_error *err);

/* hy_shard_write_ids of uint16 tokens (the u16 format). */
int hy_shard_write(const char *path, const uint16_t *tokens, size_t n, hy_error *err);

/* ---- Entropy ----------------------------------------------------------------
 * Plug-in (maximum-likelihood) estimates in bits per token over n ids of
 * `format` bytes each: *unigram = H(token), *bigram = H(next | prev) over
 * the n-1 pairs. Each needs a dense count table, so the unigram estimate
 * is computed only when every id is < HY_UNIGRAM_MAX_VOCAB and the bigram
 * one only when every id is < HY_BIGRAM_MAX_VOCAB; otherwise NAN.
 * Plug-in estimates read low when n is not much larger than the number of
 * distinct pairs. bigram may be NULL. HY_ERR_RUNTIME only when out of
 * memory. */
#define HY_UNIGRAM_MAX_VOCAB (1 << 22)
#define HY_BIGRAM_MAX_VOCAB 4096
int hy_tokens_entropy(const void *ids, hy_shard_format format, size_t n, double *unigram,
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
 * generator or rng.h's changes every synthetic shard. n >= 1; vocab in
 * 2..65536 for the u16 format, 2..2147483647 for u32; the ids do not
 * depend on the format. Output i depends only on (seed, stream, vocab)
 * and i: a shorter run is a prefix of a longer one. */
int hy_synth_ids(void *out, hy_shard_format format, size_t n, int vocab, uint64_t seed,
                 uint32_t stream, hy_error *err);

/* hy_synth_ids into uint16 tokens (vocab 2..65536). */
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
 * The estimates are hy_tokens_entropy's, NAN where it computes none.
 * Errors: hy_shard_open's, or HY_ERR_RUNTIME when out of memory. */
typedef struct {
    hy_shard_format format;   /* the width of its ids */
    size_t tokens;            /* token count */
    uint64_t file_bytes;      /* 1024 + format * tokens */
    int max_token;            /* the largest id: ids seen 0..max_token */
    double unigram_bits;      /* bits/token; NAN: not computed */
    double bigram_bits;       /* next|prev, bits/token; NAN: not computed */
} hy_shard_stats;

int hy_shard_info(const char *path, int vocab, hy_shard_stats *info, hy_error *err);

#endif
