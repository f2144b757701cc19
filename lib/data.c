/*
 * data.c — see data.h.
 *
 * Sections: helpers (little-endian bytes, full reads) · opening a shard ·
 * datasets (paths and patterns, shards loaded on demand) · batches ·
 * writing a shard (through atomicfile.h) · entropy · the synthetic corpus
 * · a shard's figures.
 */
#include "data.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
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
    /* 20240520 and 20240801 read with the wrong byte order */
    if (magic == 0x8ef13701u || magic == 0xa1d73401u)
        return " (the bytes are in big-endian order; shards are little-endian)";
    return "";
}

const char *hy_shard_format_name(hy_shard_format format) {
    return format == HY_SHARD_U16 ? "u16" : format == HY_SHARD_U32 ? "u32" : "?";
}

/* Checks the 1024-byte header against the file's size; fills *count and
 * *format. */
static int check_header(const char *path, const unsigned char *hdr, long long size,
                        size_t *count, hy_shard_format *format, hy_error *err) {
    uint32_t magic = le32_get(hdr), version = le32_get(hdr + 4);
    int32_t n = (int32_t)le32_get(hdr + 8);
    if (magic != HY_SHARD_MAGIC && magic != HY_SHARD32_MAGIC)
        return hy_fail(err, HY_ERR_INPUT, "%s: not an llm.c token shard: header[0] (magic) is "
                       "%u, expected %d (uint16 ids) or %d (uint32 ids)%s", path, magic,
                       HY_SHARD_MAGIC, HY_SHARD32_MAGIC, magic_hint(magic));
    hy_shard_format f = magic == HY_SHARD_MAGIC ? HY_SHARD_U16 : HY_SHARD_U32;
    uint32_t want_version = f == HY_SHARD_U16 ? HY_SHARD_VERSION : HY_SHARD32_VERSION;
    if (version != want_version)
        return hy_fail(err, HY_ERR_INPUT, "%s: token shard version %u is not supported with "
                       "magic %u; expected version %u (%s ids). llm.c's formats: magic %d "
                       "version %d (uint16 ids), magic %d version %d (uint32 ids)", path,
                       version, magic, want_version, f == HY_SHARD_U16 ? "uint16" : "uint32",
                       HY_SHARD_MAGIC, HY_SHARD_VERSION, HY_SHARD32_MAGIC, HY_SHARD32_VERSION);
    if (n <= 0)
        return hy_fail(err, HY_ERR_INPUT, "%s: header[2] (token count) is %d; "
                       "a shard holds at least one token", path, (int)n);
    long long want = HY_SHARD_HEADER_BYTES + (long long)f * n;
    if (size != want)
        return hy_fail(err, HY_ERR_INPUT, "%s: header says %d tokens, which "
                       "take %d + %d x %d = %lld bytes, but the file has %lld "
                       "bytes (%s)", path, (int)n, HY_SHARD_HEADER_BYTES, (int)f, (int)n,
                       want, size, size < want ? "truncated?"
                       : "extra bytes after the tokens: a damaged or non-llm.c file");
    *count = (size_t)n;
    *format = f;
    return HY_OK;
}

/* Decodes the little-endian ids in place (char access may alias the
 * array) and returns the largest, or the index of the first above
 * HY_SHARD_MAX_ID in *bad (then the return is -1). */
static long long decode_ids(void *ids, hy_shard_format f, size_t n, size_t *bad) {
    const unsigned char *b = (const unsigned char *)ids;
    uint32_t max = 0;
    if (f == HY_SHARD_U16) {
        uint16_t *t = ids;
        for (size_t i = 0; i < n; i++) {
            uint32_t v = (uint32_t)b[2 * i] | (uint32_t)b[2 * i + 1] << 8;
            t[i] = (uint16_t)v;
            if (v > max) max = v;
        }
        return max;
    }
    uint32_t *t = ids;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = le32_get(b + 4 * i);
        t[i] = v;
        if (v > HY_SHARD_MAX_ID) {
            *bad = i;
            return -1;
        }
        if (v > max) max = v;
    }
    return max;
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

/* Opens path and checks its header: sh gets everything but the ids
 * (path a copy, max_token -1); with load, also the ids, decoded and
 * checked against vocab (> 0). On failure *sh is left empty. */
static int shard_read(hy_shard *sh, const char *path, int vocab, int load, hy_error *err) {
    memset(sh, 0, sizeof *sh);
    if (!path || !*path)
        return hy_fail(err, HY_ERR_INPUT, "no token shard given (an empty path)");
    long long size = 0;
    int fd = -1, st = open_regular(path, &fd, &size, err);
    if (st != HY_OK) return st;

    unsigned char hdr[HY_SHARD_HEADER_BYTES];
    size_t got = 0, n = 0;
    hy_shard_format f = HY_SHARD_U16;
    void *ids = NULL;
    int e = read_full(fd, hdr, sizeof hdr, &got);
    if (e || got != sizeof hdr)
        st = hy_fail(err, HY_ERR_RUNTIME, "%s: cannot read the shard header: %s",
                     path, e ? strerror(e) : "the file shrank while being read");
    if (st == HY_OK) st = check_header(path, hdr, size, &n, &f, err);
    size_t bytes = n * (size_t)f;
    if (st == HY_OK && load && !(ids = malloc(bytes)))
        st = hy_fail(err, HY_ERR_RUNTIME, "%s: out of memory for %zu tokens "
                     "(%zu bytes)", path, n, bytes);
    if (st == HY_OK && load) {
        e = read_full(fd, ids, bytes, &got);
        if (e || got != bytes)
            st = hy_fail(err, HY_ERR_RUNTIME, "%s: cannot read the tokens: %s",
                         path, e ? strerror(e) : "the file shrank while being read");
    }
    if (close(fd) != 0 && st == HY_OK)
        st = hy_fail(err, HY_ERR_RUNTIME, "%s: cannot close token shard: %s",
                     path, strerror(errno));
    long long max = -1;
    size_t bad = 0;
    if (st == HY_OK && load && (max = decode_ids(ids, f, n, &bad)) < 0)
        st = hy_fail(err, HY_ERR_INPUT, "%s: token %u at index %zu is above %u, the largest "
                     "id any vocabulary holds (model.vocab is an int); a damaged shard?",
                     path, ((const uint32_t *)ids)[bad], bad, HY_SHARD_MAX_ID);
    sh->ids = ids;
    sh->n = n;
    sh->format = f;
    if (st == HY_OK && vocab > 0 && max >= vocab) {
        while (hy_shard_id(sh, bad) < (uint32_t)vocab) bad++;
        st = hy_fail(err, HY_ERR_INPUT, "%s: token %u at index %zu is not below "
                     "the vocabulary size model.vocab = %d (the largest id in "
                     "the shard is %lld); set model.vocab to at least %lld, or use a "
                     "shard tokenized for this vocabulary", path,
                     hy_shard_id(sh, bad), bad, vocab, max, max + 1);
    }
    if (st == HY_OK && !(sh->path = strdup(path)))
        st = hy_fail(err, HY_ERR_RUNTIME, "%s: out of memory", path);
    if (st != HY_OK) {
        free(ids);
        memset(sh, 0, sizeof *sh);
        return st;
    }
    sh->file_bytes = (uint64_t)size;
    sh->max_token = (int)max;
    return HY_OK;
}

int hy_shard_open(hy_shard *sh, const char *path, int vocab, hy_error *err) {
    return shard_read(sh, path, vocab, 1, err);
}

void hy_shard_close(hy_shard *sh) {
    if (!sh) return;
    free(sh->path);
    free(sh->ids);
    memset(sh, 0, sizeof *sh);
}

/* ------------------------------------------------------------------------
 * Datasets
 * ------------------------------------------------------------------------ */

void hy_data_paths_free(char **paths, int n_paths) {
    for (int i = 0; paths && i < n_paths; i++) free(paths[i]);
    free(paths);
}

static int cmp_path(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends a copy of s to *paths (*n entries, room for *cap). */
static int add_path(char ***paths, int *n, int *cap, const char *s, hy_error *err) {
    if (*n == INT_MAX)
        return hy_fail(err, HY_ERR_INPUT, "more than %d shards", INT_MAX - 1);
    if (*n == *cap) {
        int grown = *cap ? (*cap > INT_MAX / 2 ? INT_MAX : 2 * *cap) : 8;
        char **p = realloc(*paths, (size_t)grown * sizeof *p);
        if (!p) return hy_fail(err, HY_ERR_RUNTIME, "out of memory for the shard list");
        *paths = p;
        *cap = grown;
    }
    if (!((*paths)[*n] = strdup(s)))
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory for the shard list");
    ++*n;
    return HY_OK;
}

/* A pattern whose expansion stopped at a directory it could not read
 * (GLOB_ERR): the system's reason when that is the directory the pattern
 * names before its last '/' (the usual case: it does not exist), else in
 * general words. */
static int glob_dir_error(const char *pattern, const char *what, hy_error *err) {
    const char *slash = strrchr(pattern, '/');
    size_t len = slash ? (size_t)(slash - pattern) : 0;
    char dir[PATH_MAX];
    if (slash && len < sizeof dir && !memchr(pattern, '*', len) && !memchr(pattern, '?', len) &&
        !memchr(pattern, '[', len) && !memchr(pattern, '\\', len)) {
        memcpy(dir, pattern, len);
        dir[len] = '\0';
        if (len == 0) snprintf(dir, sizeof dir, "/");
        DIR *d = opendir(dir);
        int e = errno;
        if (d) closedir(d);
        else
            return hy_fail(err, HY_ERR_INPUT, "%s: the pattern %s: cannot read its directory "
                           "%s: %s", what, pattern, dir, strerror(e));
    }
    return hy_fail(err, HY_ERR_INPUT, "%s: the pattern %s: a directory on its way cannot be "
                   "read (missing, or without permission)", what, pattern);
}

/* The files pattern matches, sorted by strcmp, appended to *paths. Our
 * own sort: glob's follows the locale's collation. */
static int add_matches(char ***paths, int *n, int *cap, const char *pattern, const char *what,
                       hy_error *err) {
    glob_t g;
    memset(&g, 0, sizeof g);
    int r = glob(pattern, GLOB_ERR | GLOB_NOSORT, NULL, &g);
    int rc = HY_OK;
    if (r == GLOB_NOMATCH || (r == 0 && g.gl_pathc == 0))
        rc = hy_fail(err, HY_ERR_INPUT, "%s: the pattern %s matches no file; check the "
                     "directory and the pattern (glob(3): * ? [...])", what, pattern);
    else if (r == GLOB_ABORTED)
        rc = glob_dir_error(pattern, what, err);
    else if (r != 0)
        rc = hy_fail(err, HY_ERR_RUNTIME, "%s: the pattern %s: out of memory expanding it",
                     what, pattern);
    if (rc == HY_OK) qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, cmp_path);
    for (size_t i = 0; rc == HY_OK && i < g.gl_pathc; i++)
        rc = add_path(paths, n, cap, g.gl_pathv[i], err);
    globfree(&g);
    return rc;
}

int hy_data_expand(const char *const *specs, int n_specs, const char *what, char ***paths,
                   int *n_paths, hy_error *err) {
    *paths = NULL;
    *n_paths = 0;
    int cap = 0, rc = HY_OK;
    if (n_specs < 1)
        rc = hy_fail(err, HY_ERR_INPUT, "%s names no shard", what);
    for (int i = 0; rc == HY_OK && i < n_specs; i++) {
        if (strpbrk(specs[i], "*?["))
            rc = add_matches(paths, n_paths, &cap, specs[i], what, err);
        else
            rc = add_path(paths, n_paths, &cap, specs[i], err);
    }
    if (rc) {
        hy_data_paths_free(*paths, *n_paths);
        *paths = NULL;
        *n_paths = 0;
    }
    return rc;
}

void hy_dataset_close(hy_dataset *ds) {
    if (!ds) return;
    for (int i = 0; ds->shards && i < ds->n_shards; i++) hy_shard_close(&ds->shards[i]);
    free(ds->shards);
    free(ds->start);
    memset(ds, 0, sizeof *ds);
    ds->resident[0] = ds->resident[1] = -1;
}

/* Loads shard i's ids into the slot not read last, dropping what it held:
 * the shard read last stays, for a batch that crosses into shard i. The
 * file is opened again, so it is checked again, its tokens against the
 * vocabulary, and it must still hold as many tokens of the same width as
 * the open found (else the positions would count into other tokens; a
 * rewrite of the same size is not seen here, but a resume's check of the
 * checkpoint's CRCs sees it). */
static int dataset_load(hy_dataset *ds, int i, hy_error *err) {
    for (int k = 0; k < 2; k++)
        if (ds->resident[k] == i) {
            ds->last = k;
            return HY_OK;
        }
    hy_shard *sh = &ds->shards[i], now;
    int rc = hy_shard_open(&now, sh->path, ds->vocab, err);
    if (rc) return rc;
    if (now.n != sh->n || now.format != sh->format) {
        rc = hy_fail(err, HY_ERR_INPUT, "%s: the shard changed since it was opened (%zu %s "
                     "tokens then, %zu %s tokens now): the data positions would count into "
                     "other tokens; leave a run's shards alone while it runs", sh->path, sh->n,
                     hy_shard_format_name(sh->format), now.n, hy_shard_format_name(now.format));
        hy_shard_close(&now);
        return rc;
    }
    int slot = ds->resident[0] < 0 ? 0 : ds->resident[1] < 0 ? 1 : 1 - ds->last;
    if (ds->resident[slot] >= 0) {
        hy_shard *old = &ds->shards[ds->resident[slot]];
        free(old->ids);
        old->ids = NULL;
    }
    free(now.path);
    sh->ids = now.ids;
    sh->max_token = now.max_token;
    ds->resident[slot] = i;
    ds->last = slot;
    return HY_OK;
}

int hy_dataset_open(hy_dataset *ds, const char *const *paths, int n_paths, int vocab,
                    hy_error *err) {
    memset(ds, 0, sizeof *ds);
    ds->resident[0] = ds->resident[1] = -1;
    if (n_paths < 1) return hy_fail(err, HY_ERR_INPUT, "no token shard given (an empty list)");
    ds->shards = calloc((size_t)n_paths, sizeof *ds->shards);
    ds->start = calloc((size_t)n_paths, sizeof *ds->start);
    if (!ds->shards || !ds->start) {
        hy_dataset_close(ds);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory for %d shards", n_paths);
    }
    ds->vocab = vocab;
    int rc = HY_OK;
    for (int i = 0; i < n_paths && !rc; i++) {
        rc = shard_read(&ds->shards[i], paths[i], vocab, 0, err);
        if (rc) break;
        ds->n_shards = i + 1;
        ds->start[i] = ds->n;
        ds->n += ds->shards[i].n;
    }
    if (!rc) rc = dataset_load(ds, 0, err);
    if (rc) hy_dataset_close(ds);
    return rc;
}

/* The shard holding stream index t < n: the last whose start is <= t. */
static int dataset_find(const hy_dataset *ds, size_t t) {
    int lo = 0, hi = ds->n_shards - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (ds->start[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Tokens from..from+len-1 of the stream (all < n) into dst, loading the
 * shards they lie in. */
static int dataset_copy(hy_dataset *ds, size_t from, size_t len, int *dst, hy_error *err) {
    int i = dataset_find(ds, from);
    while (len > 0) {
        int rc = dataset_load(ds, i, err);
        if (rc) return rc;
        const hy_shard *sh = &ds->shards[i];
        size_t off = from - ds->start[i], take = sh->n - off < len ? sh->n - off : len;
        for (size_t k = 0; k < take; k++) dst[k] = (int)hy_shard_id(sh, off + k);
        dst += take;
        from += take;
        len -= take;
        i++;
    }
    return HY_OK;
}

/* ------------------------------------------------------------------------
 * Batches
 * ------------------------------------------------------------------------ */

/* The dataset in a message: its one shard's path, or "N shards (first,
 * ...)". */
static void dataset_name(const hy_dataset *ds, char *buf, size_t n) {
    if (ds->n_shards == 1) snprintf(buf, n, "%s", ds->shards[0].path);
    else if (ds->n_shards > 1)
        snprintf(buf, n, "%d shards (%s, ...)", ds->n_shards, ds->shards[0].path);
    else snprintf(buf, n, "(unopened dataset)");
}

int hy_dataset_read(hy_dataset *ds, size_t *pos, int B, int T, int *inputs, int *targets,
                    hy_error *err) {
    char name[512];
    if (B < 1 || T < 1) {
        dataset_name(ds, name, sizeof name);
        return hy_fail(err, HY_ERR_INPUT, "%s: batch of %d x %d tokens: the batch size B and "
                       "sequence length T must both be at least 1", name, B, T);
    }
    size_t bt = (size_t)B * (size_t)T;   /* both < 2^31: no overflow */
    if (ds->n < bt + 1) {
        dataset_name(ds, name, sizeof name);
        return hy_fail(err, HY_ERR_INPUT, "%s: the %s %zu tokens, fewer than one batch needs: "
                       "B x T + 1 = %d x %d + 1 = %zu; use more data or a smaller batch "
                       "(schedule.micro_batch_size, model.seq_len)", name,
                       ds->n_shards == 1 ? "shard holds" : "shards hold", ds->n, B, T, bt + 1);
    }
    size_t p = *pos;
    if (p > ds->n - (bt + 1)) p = 0;   /* fewer than B*T+1 left: wrap */
    int rc = HY_OK;
    if (inputs) {
        rc = dataset_copy(ds, p, bt, inputs, err);
        if (!rc && targets) {   /* the same tokens shifted, and one more */
            memcpy(targets, inputs + 1, (bt - 1) * sizeof *targets);
            rc = dataset_copy(ds, p + bt, 1, targets + bt - 1, err);
        }
    } else if (targets) {
        rc = dataset_copy(ds, p + 1, bt, targets, err);
    }
    if (rc) return rc;
    *pos = p + bt;
    return HY_OK;
}

int hy_dataset_next(hy_dataset *ds, int B, int T, int *inputs, int *targets, hy_error *err) {
    return hy_dataset_read(ds, &ds->pos, B, T, inputs, targets, err);
}

size_t hy_dataset_batches(const hy_dataset *ds, int B, int T) {
    size_t bt = (size_t)B * (size_t)T;
    return B < 1 || T < 1 || ds->n < 1 ? 0 : (ds->n - 1) / bt;
}

uint64_t hy_data_epoch(uint64_t k, size_t batches) {
    return k / batches + 1;
}

size_t hy_dataset_pos(const hy_dataset *ds) {
    return ds->pos;
}

int hy_dataset_set_pos(hy_dataset *ds, size_t pos, hy_error *err) {
    if (pos >= ds->n) {
        if (ds->n_shards == 1)
            return hy_fail(err, HY_ERR_INPUT, "%s: data position %zu is past the end of the "
                           "shard (%zu tokens); was the position saved with a different "
                           "shard?", ds->shards[0].path, pos, ds->n);
        char name[512];
        dataset_name(ds, name, sizeof name);
        return hy_fail(err, HY_ERR_INPUT, "%s: data position %zu is past the end of the "
                       "shards (%zu tokens in all); was the position saved with different "
                       "shards?", name, pos, ds->n);
    }
    ds->pos = pos;
    return HY_OK;
}

/* ------------------------------------------------------------------------
 * Masked-LM inputs
 * ------------------------------------------------------------------------ */

void hy_mask_tokens(int *inputs, int *targets, int n, int vocab, int mask_token,
                    uint64_t seed, int step, int micro_batches, int m) {
    assert(mask_token >= 0 && mask_token < vocab);
    hy_rng r = hy_rng_stream(seed ^ 0x4D4C4DULL,
                             (uint64_t)step * (uint64_t)micro_batches + (uint64_t)m);
    for (int i = 0; i < n; i++) {
        targets[i] = -1;
        if (hy_rng_uniform(&r) >= 0.15) continue;
        targets[i] = inputs[i];
        double u = hy_rng_uniform(&r);
        if (u < 0.8) inputs[i] = mask_token;
        else if (u < 0.9) inputs[i] = (int)hy_rng_below(&r, (uint64_t)vocab);
    }
}

/* ------------------------------------------------------------------------
 * Writing a shard
 * ------------------------------------------------------------------------ */

/* Header then ids, little-endian, through one buffer. */
static int write_ids(hy_atomic_file *af, const void *ids, hy_shard_format f, size_t n,
                     hy_error *err) {
    unsigned char buf[1 << 16];
    memset(buf, 0, HY_SHARD_HEADER_BYTES);
    le32_put(buf, f == HY_SHARD_U16 ? HY_SHARD_MAGIC : HY_SHARD32_MAGIC);
    le32_put(buf + 4, f == HY_SHARD_U16 ? HY_SHARD_VERSION : HY_SHARD32_VERSION);
    le32_put(buf + 8, (uint32_t)n);
    size_t used = HY_SHARD_HEADER_BYTES;
    for (size_t i = 0; i < n; i++) {
        if (f == HY_SHARD_U16) {
            uint16_t v = ((const uint16_t *)ids)[i];
            buf[used++] = (unsigned char)v;
            buf[used++] = (unsigned char)(v >> 8);
        } else {
            le32_put(buf + used, ((const uint32_t *)ids)[i]);
            used += 4;
        }
        if (used == sizeof buf) {   /* 2 and 4 divide the buffer: never past it */
            int rc = hy_atomic_write(af, buf, used, err);
            if (rc) return rc;
            used = 0;
        }
    }
    return hy_atomic_write(af, buf, used, err);
}

int hy_shard_write_ids(const char *path, const void *ids, hy_shard_format format, size_t n,
                       hy_error *err) {
    if (!path || !*path)
        return hy_fail(err, HY_ERR_INPUT, "no output file given for the shard "
                       "(an empty path)");
    if (format != HY_SHARD_U16 && format != HY_SHARD_U32)
        return hy_fail(err, HY_ERR_INPUT, "%s: unknown shard format %d", path, (int)format);
    if (n < 1 || n > HY_SHARD_MAX_TOKENS)
        return hy_fail(err, HY_ERR_INPUT, "%s: cannot write a shard of %zu "
                       "tokens; a shard holds 1 to %u (llm.c's int32 count)",
                       path, n, HY_SHARD_MAX_TOKENS);
    for (size_t i = 0; format == HY_SHARD_U32 && i < n; i++)
        if (((const uint32_t *)ids)[i] > HY_SHARD_MAX_ID)
            return hy_fail(err, HY_ERR_INPUT, "%s: token %u at index %zu is above %u, the "
                           "largest id a shard may hold", path, ((const uint32_t *)ids)[i], i,
                           HY_SHARD_MAX_ID);
    /* The user named the file: a path that cannot be written is bad input. */
    hy_atomic_file af;
    int rc = hy_atomic_open(&af, path, HY_ERR_INPUT, err);
    if (!rc) rc = write_ids(&af, ids, format, n, err);   /* a failure removed the temp */
    return rc ? rc : hy_atomic_commit(&af, err);
}

int hy_shard_write(const char *path, const uint16_t *tokens, size_t n, hy_error *err) {
    return hy_shard_write_ids(path, tokens, HY_SHARD_U16, n, err);
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

/* Id i of n ids of format f. */
static uint32_t id_at(const void *ids, hy_shard_format f, size_t i) {
    return f == HY_SHARD_U16 ? ((const uint16_t *)ids)[i] : ((const uint32_t *)ids)[i];
}

int hy_tokens_entropy(const void *ids, hy_shard_format format, size_t n, double *unigram,
                      double *bigram, hy_error *err) {
    *unigram = 0;
    if (bigram) *bigram = NAN;
    if (n == 0) return HY_OK;
    uint32_t max = 0;
    for (size_t i = 0; i < n; i++)
        if (id_at(ids, format, i) > max) max = id_at(ids, format, i);
    size_t V = (size_t)max + 1, pairs = n - 1;
    if (V > HY_UNIGRAM_MAX_VOCAB) {   /* then V > HY_BIGRAM_MAX_VOCAB too */
        *unigram = NAN;
        return HY_OK;
    }
    uint64_t *uc = calloc(V, sizeof *uc);
    if (!uc) return hy_fail(err, HY_ERR_RUNTIME, "out of memory for token counts");
    for (size_t i = 0; i < n; i++) uc[id_at(ids, format, i)]++;
    /* H = log2 N - (1/N) Σ c log2 c */
    *unigram = log2((double)n) - sum_clogc_u64(uc, V) / (double)n;
    if (*unigram < 0) *unigram = 0;   /* rounding when one id is all there is */

    /* H(next|prev) = (Σ_a c(a) log2 c(a) - Σ_ab c(a,b) log2 c(a,b)) / pairs,
     * with c(a) the count of a as a prev (the first n-1 tokens). A dense
     * V x V table (V <= 4096: at most 64 MB, mostly untouched zero pages). */
    int rc = HY_OK;
    if (bigram && n >= 2 && V <= HY_BIGRAM_MAX_VOCAB && pairs <= UINT32_MAX) {
        uint32_t *pc = calloc(V * V, sizeof *pc);
        if (!pc) {
            rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory for pair counts");
        } else {
            memset(uc, 0, V * sizeof *uc);
            for (size_t i = 0; i + 1 < n; i++) {
                uint32_t a = id_at(ids, format, i), b = id_at(ids, format, i + 1);
                uc[a]++;
                pc[(size_t)a * V + b]++;
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
 * relative bias below k / 2^32, at most 2^-16 up to vocab 65536 — larger
 * vocabularies, for u32 shards, take it larger, which synthetic text can
 * afford — and no loop). Integer thresholds: the same tokens everywhere.
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

/* One fixed draw of the language, reduced to [0, k). a < 2^31 (a token:
 * bits 16..46 of the id, below the tag's), b < 2^16. */
static uint32_t lang_draw(uint64_t seed, uint64_t tag, uint32_t a, uint32_t b,
                          uint32_t k) {
    hy_rng r = hy_rng_stream(seed, tag << 48 | (uint64_t)a << 16 | b);
    return below((uint32_t)(hy_rng_u64(&r) >> 32), k);
}

int hy_synth_ids(void *out, hy_shard_format format, size_t n, int vocab, uint64_t seed,
                 uint32_t stream, hy_error *err) {
    if (format != HY_SHARD_U16 && format != HY_SHARD_U32)
        return hy_fail(err, HY_ERR_INPUT, "unknown shard format %d", (int)format);
    int most = format == HY_SHARD_U16 ? 65536 : INT_MAX;
    if (vocab < 2 || vocab > most)
        return hy_fail(err, HY_ERR_INPUT, "synthetic vocabulary %d is out of range; give 2 "
                       "to %d (%s shards hold %s ids)", vocab, most,
                       hy_shard_format_name(format), format == HY_SHARD_U16 ? "uint16" : "uint32");
    if (n < 1)
        return hy_fail(err, HY_ERR_INPUT, "synthetic corpus of 0 tokens; give "
                       "at least 1");
    uint32_t V = (uint32_t)vocab;
    uint16_t *o16 = format == HY_SHARD_U16 ? out : NULL;
    uint32_t *o32 = format == HY_SHARD_U32 ? out : NULL;
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
            for (uint32_t j = 0; j < len && i < n; j++, i++) {
                prev = lang_draw(seed, TAG_PHRASE_TOK, p, j, V);
                if (o16) o16[i] = (uint16_t)prev;
                else o32[i] = prev;
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
        if (o16) o16[i++] = (uint16_t)prev;
        else o32[i++] = prev;
    }
    return HY_OK;
}

int hy_synth_tokens(uint16_t *out, size_t n, int vocab, uint64_t seed, uint32_t stream,
                    hy_error *err) {
    return hy_synth_ids(out, HY_SHARD_U16, n, vocab, seed, stream, err);
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
    info->unigram_bits = info->bigram_bits = NAN;
    int rc = hy_shard_open(&sh, path, vocab, err);
    if (rc == HY_OK)
        rc = hy_tokens_entropy(sh.ids, sh.format, sh.n, &info->unigram_bits,
                               &info->bigram_bits, err);
    if (rc == HY_OK) {
        info->format = sh.format;
        info->tokens = sh.n;
        info->file_bytes = sh.file_bytes;
        info->max_token = sh.max_token;
    }
    hy_shard_close(&sh);
    return rc;
}
