/*
 * data.c — see data.h.
 *
 * Sections: helpers (little-endian bytes, full reads) · opening a shard ·
 * batches · writing a shard (through atomicfile.h) · entropy · the
 * synthetic corpus · a shard's figures.
 */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"
#include "infile.h"
#include "rng.h"

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

/* The format is little-endian whatever the host; decoding byte by byte
 * makes that true without a byte-order #if. */
static uint32_t le32_get(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static void le32_put(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* read() until len bytes, end of file or an error. Returns 0 or errno;
 * *got says how many bytes arrived. Chunks of 1 GiB: Linux moves at most
 * about 2 GiB per call. */
static int read_full(int fd, void *buf, size_t len, size_t *got) {
    size_t done = 0;
    while (done < len) {
        size_t chunk = len - done < (1u << 30) ? len - done : (1u << 30);
        ssize_t r = read(fd, (char *)buf + done, chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            *got = done;
            return errno;
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    *got = done;
    return 0;
}

static const char *shard_name(const hy_shard *sh) {
    return sh && sh->path ? sh->path : "(unopened shard)";
}

/* ------------------------------------------------------------------------
 * Opening a shard
 *
 * read() into a malloc'd array rather than mmap: (1) checking every token
 * against the vocabulary touches every page anyway, so mmap's lazy loading
 * saves nothing; (2) a mapped file that another program truncates or
 * rewrites in place (llm.c's own scripts write shards with a plain open)
 * turns into SIGBUS in the middle of training — a crash with no message —
 * while a private copy, checked once, cannot change under us; (3) the
 * cost, private memory equal to the file (a few hundred MB at most for the
 * shards llm.c writes), is small next to a model's activations.
 * ------------------------------------------------------------------------ */

/* What a wrong magic number probably is, to make the message useful. */
static const char *magic_hint(uint32_t magic) {
    if (magic == 20240326u)
        return " (20240326 is an llm.c model checkpoint, not a token shard)";
    if (magic == 20240327u)
        return " (20240327 is an llm.c optimizer state file, not a token shard)";
    if (magic == 0x8ef13701u)   /* 20240520 read with the wrong byte order */
        return " (the bytes are in big-endian order; shards are little-endian)";
    return "";
}

/* Checks the 1024-byte header against the file's size; fills *count. */
static int check_header(const char *path, const unsigned char *hdr,
                        long long size, size_t *count, hy_error *err) {
    uint32_t magic = le32_get(hdr), version = le32_get(hdr + 4);
    int32_t n = (int32_t)le32_get(hdr + 8);
    if (magic != HY_SHARD_MAGIC)
        return hy_fail(err, HY_ERR_INPUT, "%s: not an llm.c token shard: "
                       "header[0] (magic) is %u, expected %d%s", path, magic,
                       HY_SHARD_MAGIC, magic_hint(magic));
    if (version != HY_SHARD_VERSION)
        return hy_fail(err, HY_ERR_INPUT, "%s: token shard version %u is not "
                       "supported; expected version %d (uint16 tokens)%s", path,
                       version, HY_SHARD_VERSION, version == 2 ? "; version 2 "
                       "holds uint32 tokens (llm.c's Llama 3 shards)" : "");
    if (n <= 0)
        return hy_fail(err, HY_ERR_INPUT, "%s: header[2] (token count) is %d; "
                       "a shard holds at least one token", path, (int)n);
    long long want = HY_SHARD_HEADER_BYTES + 2LL * n;
    if (size != want)
        return hy_fail(err, HY_ERR_INPUT, "%s: header says %d tokens, which "
                       "take %d + 2 x %d = %lld bytes, but the file has %lld "
                       "bytes (%s)", path, (int)n, HY_SHARD_HEADER_BYTES, (int)n,
                       want, size, size < want ? "truncated?"
                       : "extra bytes after the tokens: a damaged or non-llm.c file");
    *count = (size_t)n;
    return HY_OK;
}

/* Decodes the little-endian uint16s in place (char access may alias the
 * array) and returns the largest id. */
static int decode_tokens(uint16_t *t, size_t n) {
    const unsigned char *b = (const unsigned char *)t;
    unsigned max = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned v = (unsigned)b[2 * i] | (unsigned)b[2 * i + 1] << 8;
        t[i] = (uint16_t)v;
        if (v > max) max = v;
    }
    return (int)max;
}

/* Opens path as a regular file of at least the header's size: *fd and
 * *size, or a status and err. */
static int open_regular(const char *path, int *fd, long long *size,
                        hy_error *err) {
    int status = hy_infile_open(path, "token shard", fd, err);   /* a regular file */
    if (status) return status;
    struct stat sb;
    if (fstat(*fd, &sb) != 0)
        status = hy_fail(err, HY_ERR_RUNTIME, "%s: cannot stat token shard: %s",
                         path, strerror(errno));
    else if (sb.st_size < HY_SHARD_HEADER_BYTES)
        status = hy_fail(err, HY_ERR_INPUT, "%s: is %lld bytes, shorter than the "
                         "%d-byte header of an llm.c token shard%s", path,
                         (long long)sb.st_size, HY_SHARD_HEADER_BYTES,
                         sb.st_size == 0 ? " (the file is empty)" : "");
    if (status == HY_OK) {
        *size = (long long)sb.st_size;
        return HY_OK;
    }
    /* Opened read-only and nothing read: a failing close loses nothing,
     * and the error above is the one to report. */
    (void)close(*fd);
    *fd = -1;
    return status;
}

int hy_shard_open(hy_shard *sh, const char *path, int vocab, hy_error *err) {
    memset(sh, 0, sizeof *sh);
    if (!path || !*path)
        return hy_fail(err, HY_ERR_INPUT, "no token shard given (an empty path)");
    long long size = 0;
    int fd = -1, st = open_regular(path, &fd, &size, err);
    if (st != HY_OK) return st;

    unsigned char hdr[HY_SHARD_HEADER_BYTES];
    size_t got = 0, n = 0;
    uint16_t *tokens = NULL;
    int e = read_full(fd, hdr, sizeof hdr, &got);
    if (e || got != sizeof hdr)
        st = hy_fail(err, HY_ERR_RUNTIME, "%s: cannot read the shard header: %s",
                     path, e ? strerror(e) : "the file shrank while being read");
    if (st == HY_OK) st = check_header(path, hdr, size, &n, err);
    if (st == HY_OK && !(tokens = malloc(n * sizeof *tokens)))
        st = hy_fail(err, HY_ERR_RUNTIME, "%s: out of memory for %zu tokens "
                     "(%zu bytes)", path, n, n * sizeof *tokens);
    if (st == HY_OK) {
        e = read_full(fd, tokens, n * sizeof *tokens, &got);
        if (e || got != n * sizeof *tokens)
            st = hy_fail(err, HY_ERR_RUNTIME, "%s: cannot read the tokens: %s",
                         path, e ? strerror(e) : "the file shrank while being read");
    }
    if (close(fd) != 0 && st == HY_OK)
        st = hy_fail(err, HY_ERR_RUNTIME, "%s: cannot close token shard: %s",
                     path, strerror(errno));
    if (st != HY_OK) {
        free(tokens);
        return st;
    }

    int max = decode_tokens(tokens, n);
    if (vocab > 0 && max >= vocab) {
        size_t bad = 0;
        while (tokens[bad] < vocab) bad++;
        st = hy_fail(err, HY_ERR_INPUT, "%s: token %u at index %zu is not below "
                     "the vocabulary size model.vocab = %d (the largest id in "
                     "the shard is %d); set model.vocab to at least %d, or use a "
                     "shard tokenized for this vocabulary", path,
                     (unsigned)tokens[bad], bad, vocab, max, max + 1);
        free(tokens);
        return st;
    }
    if (!(sh->path = strdup(path))) {
        free(tokens);
        return hy_fail(err, HY_ERR_RUNTIME, "%s: out of memory", path);
    }
    sh->tokens = tokens;
    sh->n = n;
    sh->file_bytes = (uint64_t)size;
    sh->max_token = max;
    sh->pos = 0;
    return HY_OK;
}

void hy_shard_close(hy_shard *sh) {
    if (!sh) return;
    free(sh->path);
    free(sh->tokens);
    memset(sh, 0, sizeof *sh);
}

/* ------------------------------------------------------------------------
 * Batches
 * ------------------------------------------------------------------------ */

int hy_batch_read(const hy_shard *sh, size_t *pos, int B, int T,
                  int *inputs, int *targets, hy_error *err) {
    if (B < 1 || T < 1)
        return hy_fail(err, HY_ERR_INPUT, "%s: batch of %d x %d tokens: the "
                       "batch size B and sequence length T must both be at "
                       "least 1", shard_name(sh), B, T);
    size_t bt = (size_t)B * (size_t)T;   /* both < 2^31: no overflow */
    if (sh->n < bt + 1)
        return hy_fail(err, HY_ERR_INPUT, "%s: the shard holds %zu tokens, "
                       "fewer than one batch needs: B x T + 1 = %d x %d + 1 = "
                       "%zu; use a longer shard or a smaller batch "
                       "(schedule.micro_batch_size, model.seq_len)",
                       shard_name(sh), sh->n, B, T, bt + 1);
    size_t p = *pos;
    if (p > sh->n - (bt + 1)) p = 0;   /* fewer than B*T+1 left: wrap */
    const uint16_t *src = sh->tokens + p;
    if (inputs)
        for (size_t i = 0; i < bt; i++) inputs[i] = src[i];
    if (targets)
        for (size_t i = 0; i < bt; i++) targets[i] = src[i + 1];
    *pos = p + bt;
    return HY_OK;
}

int hy_batch_next(hy_shard *sh, int B, int T, int *inputs, int *targets,
                  hy_error *err) {
    return hy_batch_read(sh, &sh->pos, B, T, inputs, targets, err);
}

size_t hy_shard_pos(const hy_shard *sh) {
    return sh->pos;
}

int hy_shard_set_pos(hy_shard *sh, size_t pos, hy_error *err) {
    if (pos >= sh->n)
        return hy_fail(err, HY_ERR_INPUT, "%s: data position %zu is past the "
                       "end of the shard (%zu tokens); was the position saved "
                       "with a different shard?", shard_name(sh), pos, sh->n);
    sh->pos = pos;
    return HY_OK;
}

/* ------------------------------------------------------------------------
 * Masked-LM inputs
 * ------------------------------------------------------------------------ */

void hy_mask_tokens(int *inputs, int *targets, int n, int vocab, uint64_t seed, int step,
                    int micro_batches, int m) {
    hy_rng r = hy_rng_stream(seed ^ 0x4D4C4DULL,
                             (uint64_t)step * (uint64_t)micro_batches + (uint64_t)m);
    for (int i = 0; i < n; i++) {
        targets[i] = -1;
        if (hy_rng_uniform(&r) >= 0.15) continue;
        targets[i] = inputs[i];
        double u = hy_rng_uniform(&r);
        if (u < 0.8) inputs[i] = vocab - 1;
        else if (u < 0.9) inputs[i] = (int)hy_rng_below(&r, (uint64_t)vocab);
    }
}

/* ------------------------------------------------------------------------
 * Writing a shard
 * ------------------------------------------------------------------------ */

/* Header then tokens, little-endian, through one buffer. */
static int write_tokens(hy_atomic_file *af, const uint16_t *tokens, size_t n,
                        hy_error *err) {
    unsigned char buf[1 << 16];
    memset(buf, 0, HY_SHARD_HEADER_BYTES);
    le32_put(buf, HY_SHARD_MAGIC);
    le32_put(buf + 4, HY_SHARD_VERSION);
    le32_put(buf + 8, (uint32_t)n);
    size_t used = HY_SHARD_HEADER_BYTES;
    for (size_t i = 0; i < n; i++) {
        buf[used++] = (unsigned char)tokens[i];
        buf[used++] = (unsigned char)(tokens[i] >> 8);
        if (used == sizeof buf) {
            int rc = hy_atomic_write(af, buf, used, err);
            if (rc) return rc;
            used = 0;
        }
    }
    return hy_atomic_write(af, buf, used, err);
}

int hy_shard_write(const char *path, const uint16_t *tokens, size_t n,
                   hy_error *err) {
    if (!path || !*path)
        return hy_fail(err, HY_ERR_INPUT, "no output file given for the shard "
                       "(an empty path)");
    if (n < 1 || n > HY_SHARD_MAX_TOKENS)
        return hy_fail(err, HY_ERR_INPUT, "%s: cannot write a shard of %zu "
                       "tokens; a shard holds 1 to %u (llm.c's int32 count)",
                       path, n, HY_SHARD_MAX_TOKENS);
    /* The user named the file: a path that cannot be written is bad input. */
    hy_atomic_file af;
    int rc = hy_atomic_open(&af, path, HY_ERR_INPUT, err);
    if (!rc) rc = write_tokens(&af, tokens, n, err);   /* a failure removed the temp */
    return rc ? rc : hy_atomic_commit(&af, err);
}

/* ------------------------------------------------------------------------
 * Entropy
 * ------------------------------------------------------------------------ */

/* Σ c·log2(c) over counts, the piece every plug-in entropy needs. */
static double sum_clogc_u64(const uint64_t *c, size_t k) {
    double s = 0;
    for (size_t i = 0; i < k; i++)
        if (c[i] > 1) s += (double)c[i] * log2((double)c[i]);
    return s;
}

int hy_tokens_entropy(const uint16_t *tokens, size_t n, double *unigram,
                      double *bigram, hy_error *err) {
    *unigram = 0;
    if (bigram) *bigram = NAN;
    if (n == 0) return HY_OK;
    uint64_t *uc = calloc(65536, sizeof *uc);
    if (!uc) return hy_fail(err, HY_ERR_RUNTIME, "out of memory for token counts");
    unsigned max = 0;
    for (size_t i = 0; i < n; i++) {
        uc[tokens[i]]++;
        if (tokens[i] > max) max = tokens[i];
    }
    /* H = log2 N - (1/N) Σ c log2 c */
    *unigram = log2((double)n) - sum_clogc_u64(uc, 65536) / (double)n;
    if (*unigram < 0) *unigram = 0;   /* rounding when one id is all there is */

    /* H(next|prev) = (Σ_a c(a) log2 c(a) - Σ_ab c(a,b) log2 c(a,b)) / pairs,
     * with c(a) the count of a as a prev (the first n-1 tokens). A dense
     * V x V table (V <= 4096: at most 64 MB, mostly untouched zero pages). */
    int rc = HY_OK;
    size_t V = (size_t)max + 1, pairs = n - 1;
    if (bigram && n >= 2 && V <= HY_BIGRAM_MAX_VOCAB && pairs <= UINT32_MAX) {
        uint32_t *pc = calloc(V * V, sizeof *pc);
        if (!pc) {
            rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory for pair counts");
        } else {
            memset(uc, 0, V * sizeof *uc);
            for (size_t i = 0; i + 1 < n; i++) {
                uc[tokens[i]]++;
                pc[(size_t)tokens[i] * V + tokens[i + 1]]++;
            }
            double s = 0;
            for (size_t i = 0; i < V * V; i++)
                if (pc[i] > 1) s += (double)pc[i] * log2((double)pc[i]);
            *bigram = (sum_clogc_u64(uc, V) - s) / (double)pairs;
            if (*bigram < 0) *bigram = 0;   /* rounding of equal sums */
            free(pc);
        }
    }
    free(uc);
    return rc;
}

/* ------------------------------------------------------------------------
 * The synthetic corpus
 *
 * All randomness is lib/rng.h's splitmix64, the project's one generator.
 * The language is a set of fixed draws, each the first output of the
 * stream hy_rng_stream(seed, id) with id = tag << 48 | a << 16 | b, so no
 * tables; the text is the stream hy_rng_stream(seed, stream) (stream ids
 * < 2^32 never meet the language's, whose tags start at 1 << 48). One
 * 64-bit draw per decision: the high 32 bits decide what comes next, the
 * low 32 bits pick among the choices, by multiply-shift ((x * k) >> 32:
 * bias below k / 2^32, at most 2^-16 here, and no loop). Integer
 * thresholds: the same tokens everywhere.
 * ------------------------------------------------------------------------ */

#define SYN_SUCC 4            /* successors per token */
#define SYN_PHRASES 16
#define SYN_PHRASE_MIN 8      /* phrase lengths 8..16 */
#define SYN_PHRASE_SPAN 9
#define SYN_PCT(p) ((uint32_t)(((uint64_t)(p) << 32) / 100))
#define SYN_P_PHRASE (UINT32_C(1) << 28)          /* 1/16 of 2^32 */
#define SYN_P_NOISE SYN_PCT(5)                     /* 1/20 */
/* Cumulative successor probabilities: 60, 85, 95 (100) percent. */
static const uint32_t syn_succ_cum[SYN_SUCC - 1] = {SYN_PCT(60), SYN_PCT(85), SYN_PCT(95)};
static const double syn_succ_p[SYN_SUCC] = {0.60, 0.25, 0.10, 0.05};

enum { TAG_SUCC = 1, TAG_PHRASE_LEN, TAG_PHRASE_TOK };

static uint32_t below(uint32_t x, uint32_t k) {
    return (uint32_t)(((uint64_t)x * k) >> 32);
}

/* One fixed draw of the language, reduced to [0, k). a, b < 2^16. */
static uint32_t lang_draw(uint64_t seed, uint64_t tag, uint32_t a, uint32_t b,
                          uint32_t k) {
    hy_rng r = hy_rng_stream(seed, tag << 48 | (uint64_t)a << 16 | b);
    return below((uint32_t)(hy_rng_u64(&r) >> 32), k);
}

int hy_synth_tokens(uint16_t *out, size_t n, int vocab, uint64_t seed,
                    uint32_t stream, hy_error *err) {
    if (vocab < 2 || vocab > 65536)
        return hy_fail(err, HY_ERR_INPUT, "synthetic vocabulary %d is out of "
                       "range; give 2 to 65536 (shards hold uint16 ids)", vocab);
    if (n < 1)
        return hy_fail(err, HY_ERR_INPUT, "synthetic corpus of 0 tokens; give "
                       "at least 1");
    uint32_t V = (uint32_t)vocab;
    hy_rng rng = hy_rng_stream(seed, stream);
    /* The context before the first token: drawn, not emitted. */
    uint32_t prev = below((uint32_t)(hy_rng_u64(&rng) >> 32), V);
    size_t i = 0;
    while (i < n) {
        uint64_t r = hy_rng_u64(&rng);
        uint32_t u = (uint32_t)(r >> 32), low = (uint32_t)r;
        if (u < SYN_P_PHRASE) {
            uint32_t p = below(low, SYN_PHRASES);
            uint32_t len = SYN_PHRASE_MIN + lang_draw(seed, TAG_PHRASE_LEN, p, 0, SYN_PHRASE_SPAN);
            for (uint32_t j = 0; j < len && i < n; j++) {
                prev = lang_draw(seed, TAG_PHRASE_TOK, p, j, V);
                out[i++] = (uint16_t)prev;
            }
            continue;
        }
        if (u < SYN_P_PHRASE + SYN_P_NOISE) {
            prev = below(low, V);
        } else {
            uint32_t k = 0;
            while (k < SYN_SUCC - 1 && low >= syn_succ_cum[k]) k++;
            prev = lang_draw(seed, TAG_SUCC, prev, k, V);
        }
        out[i++] = (uint16_t)prev;
    }
    return HY_OK;
}

static double plogp(double p) {
    return p > 0 ? -p * log2(p) : 0;
}

double hy_synth_entropy_bits(int vocab) {
    double pp = SYN_P_PHRASE / 4294967296.0, pn = SYN_P_NOISE / 4294967296.0;
    double ps = 1 - pp - pn, h_succ = 0;
    for (int k = 0; k < SYN_SUCC; k++) h_succ += plogp(syn_succ_p[k]);
    /* Bits per decision: which branch, then which phrase / token /
     * successor. A decision emits one token, or a whole phrase (mean
     * length 12), whose later tokens cost nothing: they follow from the
     * first. */
    double bits = plogp(pp) + plogp(pn) + plogp(ps) + pp * log2(SYN_PHRASES) +
                  pn * log2(vocab) + ps * h_succ;
    double mean_len = SYN_PHRASE_MIN + (SYN_PHRASE_SPAN - 1) / 2.0;
    double rate = bits / (1 + pp * (mean_len - 1));
    /* At a tiny vocab the collisions are no longer rare: cap at uniform. */
    return rate < log2(vocab) ? rate : log2(vocab);
}

/* ------------------------------------------------------------------------
 * A shard's figures
 * ------------------------------------------------------------------------ */

int hy_shard_info(const char *path, int vocab, hy_shard_stats *info, hy_error *err) {
    hy_shard sh;
    memset(info, 0, sizeof *info);
    info->bigram_bits = NAN;
    int rc = hy_shard_open(&sh, path, vocab, err);
    if (rc == HY_OK)
        rc = hy_tokens_entropy(sh.tokens, sh.n, &info->unigram_bits, &info->bigram_bits, err);
    if (rc == HY_OK) {
        info->tokens = sh.n;
        info->file_bytes = sh.file_bytes;
        info->max_token = sh.max_token;
    }
    hy_shard_close(&sh);
    return rc;
}
