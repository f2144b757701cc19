/*
 * safetensors.c — see safetensors.h.
 *
 * Reading: fstat → the 8-byte length N → the N-byte header (pread) →
 * jansson → each entry checked on its own (dtype, shape, offsets, size,
 * inside the buffer) → the layout checked as a whole (sorted by offset, no
 * two non-empty tensors overlapping, nothing after the last) → a by-name
 * index for hy_safetensors_find.
 * Data is read later, on demand, with pread at offsets that were all
 * proven to lie inside the file, so a reader never maps or trusts bytes it
 * has not checked.
 *
 * Writing: entries sorted the reference's way → offsets → the header built
 * with jansson in that order and padded → written through atomicfile.h (a
 * temporary file in the target's directory → fsync → rename → fsync of the
 * directory).
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"
#include "infile.h"

/* The format is little-endian; F32 data goes between disk and memory
 * without conversion, which is only right on a little-endian host. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "little-endian host required");
_Static_assert(sizeof(float) == 4, "32-bit float required");

/* One pread moves at most this much: Linux caps a single transfer
 * a little under 2 GiB anyway, and smaller calls keep EINTR retries cheap. */
#define IO_CHUNK ((size_t)1 << 30)

/* ------------------------------------------------------------------------
 * Dtypes
 */

static const struct { const char *name; unsigned bits; } DTYPES[HY_ST_DTYPE_COUNT] = {
    [HY_ST_BOOL] = { "BOOL", 8 },           [HY_ST_F4] = { "F4", 4 },
    [HY_ST_F6_E2M3] = { "F6_E2M3", 6 },     [HY_ST_F6_E3M2] = { "F6_E3M2", 6 },
    [HY_ST_U8] = { "U8", 8 },               [HY_ST_I8] = { "I8", 8 },
    [HY_ST_F8_E5M2] = { "F8_E5M2", 8 },     [HY_ST_F8_E4M3] = { "F8_E4M3", 8 },
    [HY_ST_F8_E8M0] = { "F8_E8M0", 8 },     [HY_ST_F8_E4M3FNUZ] = { "F8_E4M3FNUZ", 8 },
    [HY_ST_F8_E5M2FNUZ] = { "F8_E5M2FNUZ", 8 },
    [HY_ST_I16] = { "I16", 16 },            [HY_ST_U16] = { "U16", 16 },
    [HY_ST_F16] = { "F16", 16 },            [HY_ST_BF16] = { "BF16", 16 },
    [HY_ST_I32] = { "I32", 32 },            [HY_ST_U32] = { "U32", 32 },
    [HY_ST_F32] = { "F32", 32 },            [HY_ST_C64] = { "C64", 64 },
    [HY_ST_F64] = { "F64", 64 },            [HY_ST_I64] = { "I64", 64 },
    [HY_ST_U64] = { "U64", 64 },
};

const char *hy_safetensors_dtype_name(hy_safetensors_dtype d) {
    return (unsigned)d < HY_ST_DTYPE_COUNT ? DTYPES[d].name : "?";
}

static int dtype_from_name(const char *s, hy_safetensors_dtype *d) {
    for (int i = 0; i < HY_ST_DTYPE_COUNT; i++)
        if (strcmp(s, DTYPES[i].name) == 0) { *d = (hy_safetensors_dtype)i; return 1; }
    return 0;
}

/* ------------------------------------------------------------------------
 * Conversions
 */

static uint32_t f32_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float f32_from_bits(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

uint16_t hy_safetensors_bf16_from_f32(float x) {
    uint32_t u = f32_bits(x);
    /* A NaN must stay a NaN: plain rounding could carry a low-bit payload
     * into the exponent (→ inf) or drop it (→ inf). */
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16 & 0x8000u) | 0x7fc0u);
    /* Adding 0x7fff plus the kept part's lowest bit rounds half to even;
     * a carry into the exponent is the right answer, up to inf. */
    u += 0x7fffu + (u >> 16 & 1u);
    return (uint16_t)(u >> 16);
}

float hy_safetensors_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

float hy_safetensors_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = h >> 10 & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | man << 13);   /* inf, NaN */
    if (exp) return f32_from_bits(sign | (exp + 112) << 23 | man << 13);      /* rebias 15 → 127 */
    if (!man) return f32_from_bits(sign);
    /* Subnormal, man·2^-24: shift the leading 1 up to the implicit bit;
     * every f16 subnormal is a normal f32. */
    uint32_t e = 113;   /* f32 biased exponent of 2^-14, the f16 subnormal scale */
    while (!(man & 0x400u)) { man <<= 1; e--; }
    return f32_from_bits(sign | e << 23 | (man & 0x3ffu) << 13);
}

/* ------------------------------------------------------------------------
 * Small helpers
 */

hy_safetensors_shown hy_safetensors_show(const char *name) {
    hy_safetensors_shown r;
    size_t n = strlen(name), k = n > 80 ? 80 : n;
    for (size_t i = 0; i < k; i++) {
        unsigned char c = (unsigned char)name[i];
        /* A C1 control (U+0080..U+009F, CSI among them) in its UTF-8 form:
         * both bytes become one '?'. */
        if (c == 0xc2 && i + 1 < k && (unsigned char)name[i + 1] >= 0x80 &&
            (unsigned char)name[i + 1] <= 0x9f) {
            r.s[i] = '?';
            r.s[++i] = '?';
            continue;
        }
        r.s[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    strcpy(r.s + k, n > k ? "..." : "");
    return r;
}

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static void format_shape(const size_t *shape, int ndim, char *buf, size_t size) {
    size_t at = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%zu", i ? ", " : "", shape[i]);
    if (at < size) snprintf(buf + at, size - at, "]");
}

static int oom(hy_error *err) { return hy_fail(err, HY_ERR_RUNTIME, "out of memory"); }

/* Reads exactly `size` bytes at `off`. Running out of file is the input's
 * fault (it shrank after we checked it); an I/O error is not. */
static int read_at(int fd, void *buf, size_t size, uint64_t off, const char *path,
                   hy_error *err) {
    unsigned char *p = buf;
    while (size) {
        ssize_t got = pread(fd, p, size < IO_CHUNK ? size : IO_CHUNK, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return hy_fail(err, HY_ERR_RUNTIME, "cannot read %s at byte %llu: %s", path,
                           (unsigned long long)off, strerror(errno));
        if (got == 0)
            return hy_fail(err, HY_ERR_INPUT, "%s ends at byte %llu, before the data its "
                           "header promises: the file was truncated or changed while open",
                           path, (unsigned long long)off);
        p += got;
        off += (uint64_t)got;
        size -= (size_t)got;
    }
    return HY_OK;
}

/* ------------------------------------------------------------------------
 * Reading: one tensor entry
 */

/* What parsing an entry needs to know and to name in its errors. */
typedef struct {
    const char *path;
    uint64_t data_start, buf_size;
} open_ctx;

static int entry_fail(const open_ctx *c, const char *name, hy_error *err, const char *what,
                      const char *detail) {
    return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s': %s%s", c->path, hy_safetensors_show(name).s, what,
                   detail);
}

static int parse_dtype(const open_ctx *c, const char *name, json_t *e, hy_safetensors_tensor *t,
                       hy_error *err) {
    json_t *v = json_object_get(e, "dtype");
    if (!v) return entry_fail(c, name, err, "missing \"dtype\"", "");
    if (!json_is_string(v))
        return entry_fail(c, name, err, "\"dtype\" must be a string, got ", json_kind(v));
    if (!dtype_from_name(json_string_value(v), &t->dtype))
        return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s': unknown dtype \"%s\" (known: BOOL, "
                       "U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, C64, F4, "
                       "F6_E2M3, F6_E3M2, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ)",
                       c->path, hy_safetensors_show(name).s, hy_safetensors_show(json_string_value(v)).s);
    return HY_OK;
}

static int parse_shape(const open_ctx *c, const char *name, json_t *e, hy_safetensors_tensor *t,
                       hy_error *err) {
    json_t *v = json_object_get(e, "shape");
    if (!v) return entry_fail(c, name, err, "missing \"shape\"", "");
    if (!json_is_array(v))
        return entry_fail(c, name, err, "\"shape\" must be an array of integers, got ",
                          json_kind(v));
    size_t nd = json_array_size(v);
    if (nd > HY_ST_MAX_DIMS)
        return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s': shape has %zu dims; at most %d "
                       "are supported", c->path, hy_safetensors_show(name).s, nd, HY_ST_MAX_DIMS);
    t->ndim = (int)nd;
    t->numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(v, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s': shape[%zu] must be a "
                           "non-negative integer, got %s", c->path, hy_safetensors_show(name).s, i,
                           json_is_integer(d) ? "a negative one" : json_kind(d));
        unsigned long long x = (unsigned long long)json_integer_value(d);
        if (x > SIZE_MAX || __builtin_mul_overflow(t->numel, (size_t)x, &t->numel))
            return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s': shape has more elements than "
                           "fit in memory (overflow at shape[%zu] = %llu)", c->path,
                           hy_safetensors_show(name).s, i, x);
        t->shape[i] = (size_t)x;
    }
    return HY_OK;
}

/* t->nbytes from numel and the dtype, refusing what cannot be addressed. */
static int tensor_bytes(const open_ctx *c, const char *name, hy_safetensors_tensor *t,
                        hy_error *err) {
    size_t bits;
    char sh[160];
    format_shape(t->shape, t->ndim, sh, sizeof sh);
    if (__builtin_mul_overflow(t->numel, (size_t)DTYPES[t->dtype].bits, &bits))
        return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s': shape %s of %s is more bytes than "
                       "fit in memory", c->path, hy_safetensors_show(name).s, sh, DTYPES[t->dtype].name);
    if (bits % 8)
        return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s': shape %s of %s does not end on a "
                       "byte boundary", c->path, hy_safetensors_show(name).s, sh, DTYPES[t->dtype].name);
    t->nbytes = bits / 8;
    return HY_OK;
}

static int parse_offset(json_t *a, size_t i, uint64_t *out) {
    json_t *v = json_array_get(a, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

static int parse_offsets(const open_ctx *c, const char *name, json_t *e, hy_safetensors_tensor *t,
                         hy_error *err) {
    json_t *v = json_object_get(e, "data_offsets");
    uint64_t b, end;
    if (!v) return entry_fail(c, name, err, "missing \"data_offsets\"", "");
    if (!json_is_array(v) || json_array_size(v) != 2 || !parse_offset(v, 0, &b) ||
        !parse_offset(v, 1, &end))
        return entry_fail(c, name, err, "\"data_offsets\" must be [begin, end], two "
                          "non-negative integers", "");
    if (b > end)
        return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s': data_offsets [%llu, %llu] has "
                       "begin > end", c->path, hy_safetensors_show(name).s, (unsigned long long)b,
                       (unsigned long long)end);
    if (end > c->buf_size)
        return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s': data_offsets [%llu, %llu] are "
                       "outside the data buffer, which has %llu bytes (truncated file?)",
                       c->path, hy_safetensors_show(name).s, (unsigned long long)b, (unsigned long long)end,
                       (unsigned long long)c->buf_size);
    if (end - b != t->nbytes) {
        char sh[160];
        format_shape(t->shape, t->ndim, sh, sizeof sh);
        return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s': shape %s of %s is %zu bytes, but "
                       "data_offsets [%llu, %llu] span %llu", c->path, hy_safetensors_show(name).s, sh,
                       DTYPES[t->dtype].name, t->nbytes, (unsigned long long)b,
                       (unsigned long long)end, (unsigned long long)(end - b));
    }
    t->offset = c->data_start + b;
    return HY_OK;
}

static int parse_tensor(const open_ctx *c, const char *name, json_t *e, hy_safetensors_tensor *t,
                        hy_error *err) {
    if (!json_is_object(e))
        return entry_fail(c, name, err, "entry must be an object {\"dtype\", \"shape\", "
                          "\"data_offsets\"}, got ", json_kind(e));
    int rc;
    if ((rc = parse_dtype(c, name, e, t, err)) || (rc = parse_shape(c, name, e, t, err)) ||
        (rc = tensor_bytes(c, name, t, err)) || (rc = parse_offsets(c, name, e, t, err)))
        return rc;
    t->name = strdup(name);
    return t->name ? HY_OK : oom(err);
}

/* ------------------------------------------------------------------------
 * Reading: the header as a whole
 */

static int meta_cmp(const void *a, const void *b) {
    return strcmp(((const hy_safetensors_meta *)a)->key, ((const hy_safetensors_meta *)b)->key);
}

static int parse_meta(hy_safetensors_file *f, json_t *m, hy_error *err) {
    if (json_is_null(m)) return HY_OK;   /* the reference reads null as "none" */
    if (!json_is_object(m))
        return hy_fail(err, HY_ERR_INPUT, "%s: \"__metadata__\" must be an object of strings, "
                       "got %s", f->path, json_kind(m));
    f->meta = calloc(json_object_size(m) + 1, sizeof *f->meta);
    if (!f->meta) return oom(err);
    const char *key;
    json_t *v;
    json_object_foreach(m, key, v) {
        if (!json_is_string(v))
            return hy_fail(err, HY_ERR_INPUT, "%s: \"__metadata__\" value of '%s' must be a "
                           "string, got %s", f->path, hy_safetensors_show(key).s, json_kind(v));
        hy_safetensors_meta *e = &f->meta[f->n_meta++];
        e->key = strdup(key);
        e->value = strdup(json_string_value(v));
        if (!e->key || !e->value) return oom(err);
    }
    qsort(f->meta, (size_t)f->n_meta, sizeof *f->meta, meta_cmp);
    return HY_OK;
}

static int parse_entries(hy_safetensors_file *f, const open_ctx *c, json_t *root, hy_error *err) {
    f->tensors = calloc(json_object_size(root) + 1, sizeof *f->tensors);
    if (!f->tensors) return oom(err);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        int rc = strcmp(key, "__metadata__") == 0
            ? parse_meta(f, v, err)
            : parse_tensor(c, key, v, &f->tensors[f->n_tensors++], err);
        if (rc) return rc;
    }
    return HY_OK;
}

/* By data offset; empty tensors (which may share an offset with anything)
 * first among equals; names make the order total. */
static int offset_cmp(const void *pa, const void *pb) {
    const hy_safetensors_tensor *a = pa, *b = pb;
    if (a->offset != b->offset) return a->offset < b->offset ? -1 : 1;
    if (a->nbytes != b->nbytes) return a->nbytes < b->nbytes ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* Sorted by offset, each non-empty tensor must start at or after the end
 * of the one before (which, with no overlap so far, ends last). */
static int check_layout(hy_safetensors_file *f, const open_ctx *c, hy_error *err) {
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, offset_cmp);
    const hy_safetensors_tensor *prev = NULL;
    uint64_t covered = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        const hy_safetensors_tensor *t = &f->tensors[i];
        if (!t->nbytes) continue;
        if (prev && t->offset < prev->offset + prev->nbytes) {
            unsigned long long pb = prev->offset - c->data_start, tb = t->offset - c->data_start;
            return hy_fail(err, HY_ERR_INPUT, "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, "
                           "%llu) overlap", c->path, hy_safetensors_show(prev->name).s, pb,
                           pb + prev->nbytes, hy_safetensors_show(t->name).s, tb, tb + t->nbytes);
        }
        prev = t;
        covered += t->nbytes;
    }
    /* Bytes after the last tensor belong to none: the file was appended
     * to, or cut from a longer one (the format has no room for a tail). */
    uint64_t end = prev ? prev->offset + prev->nbytes - c->data_start : 0;
    if (c->buf_size > end)
        return hy_fail(err, HY_ERR_INPUT, "%s: %llu bytes after the last tensor (the tensors end "
                       "at byte %llu of the %llu-byte data buffer): trailing bytes are not "
                       "valid safetensors; the file was appended to or damaged", c->path,
                       (unsigned long long)(c->buf_size - end), (unsigned long long)end,
                       (unsigned long long)c->buf_size);
    f->unused_bytes = c->buf_size - covered;
    return HY_OK;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp((*(const hy_safetensors_tensor *const *)a)->name,
                  (*(const hy_safetensors_tensor *const *)b)->name);
}

static int build_index(hy_safetensors_file *f, hy_error *err) {
    f->by_name = malloc(((size_t)f->n_tensors + 1) * sizeof *f->by_name);
    if (!f->by_name) return oom(err);
    for (int i = 0; i < f->n_tensors; i++) f->by_name[i] = &f->tensors[i];
    qsort(f->by_name, (size_t)f->n_tensors, sizeof *f->by_name, name_cmp);
    return HY_OK;
}

/* The 8-byte length, checked against the file before anything is
 * allocated for it. */
static int read_header_len(const hy_safetensors_file *f, uint64_t *n, hy_error *err) {
    unsigned char b[8];
    if (f->file_size < 8)
        return hy_fail(err, HY_ERR_INPUT, "%s is %llu bytes, too short for a safetensors "
                       "file (it starts with an 8-byte header length)", f->path,
                       (unsigned long long)f->file_size);
    int rc = read_at(f->fd, b, 8, 0, f->path, err);
    if (rc) return rc;
    *n = 0;
    for (int i = 7; i >= 0; i--) *n = *n << 8 | b[i];
    if (*n > HY_ST_MAX_HEADER)
        return hy_fail(err, HY_ERR_INPUT, "%s: header length %llu is over the %llu-byte limit; "
                       "not a safetensors file?", f->path, (unsigned long long)*n,
                       (unsigned long long)HY_ST_MAX_HEADER);
    if (*n > f->file_size - 8)
        return hy_fail(err, HY_ERR_INPUT, "%s: header length %llu goes beyond the end of the "
                       "file (%llu bytes); truncated, or not a safetensors file?", f->path,
                       (unsigned long long)*n, (unsigned long long)f->file_size);
    return HY_OK;
}

static int load_header(const hy_safetensors_file *f, uint64_t n, json_t **root, hy_error *err) {
    char *text = malloc((size_t)n + 1);
    if (!text) return oom(err);
    int rc = read_at(f->fd, text, (size_t)n, 8, f->path, err);
    if (rc) { free(text); return rc; }
    json_error_t je;
    /* Duplicate names would make "which tensor is 'x'" an accident of the
     * parser, so they are refused. */
    *root = json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!*root)
        return hy_fail(err, HY_ERR_INPUT, "%s: header is not valid JSON (line %d, column %d): "
                       "%s", f->path, je.line, je.column, je.text);
    if (!json_is_object(*root)) {
        rc = hy_fail(err, HY_ERR_INPUT, "%s: header must be a JSON object {...}, got %s",
                     f->path, json_kind(*root));
        json_decref(*root);
        *root = NULL;
    }
    return rc;
}

/* A regular file (infile.h: a FIFO is refused, never waited on). */
static int open_fd(hy_safetensors_file *f, hy_error *err) {
    struct stat sb;
    int rc = hy_infile_open(f->path, "safetensors file", &f->fd, err);
    if (rc) return rc;
    if (fstat(f->fd, &sb) != 0)
        return hy_fail(err, HY_ERR_RUNTIME, "cannot stat %s: %s", f->path, strerror(errno));
    f->file_size = (uint64_t)sb.st_size;
    return HY_OK;
}

static int open_steps(hy_safetensors_file *f, hy_error *err) {
    uint64_t n = 0;
    json_t *root = NULL;
    int rc;
    if ((rc = open_fd(f, err)) || (rc = read_header_len(f, &n, err)) ||
        (rc = load_header(f, n, &root, err)))
        return rc;
    f->data_start = 8 + n;
    open_ctx c = { f->path, f->data_start, f->file_size - f->data_start };
    if (!(rc = parse_entries(f, &c, root, err)) && !(rc = check_layout(f, &c, err)))
        rc = build_index(f, err);
    json_decref(root);
    return rc;
}

int hy_safetensors_open(hy_safetensors_file *f, const char *path, hy_error *err) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = strdup(path);
    if (!f->path) return oom(err);
    int rc = open_steps(f, err);
    if (rc) hy_safetensors_close(f);
    return rc;
}

void hy_safetensors_close(hy_safetensors_file *f) {
    /* A zeroed struct has fd 0, which is not ours: only a struct that went
     * through hy_safetensors_open has a path, and only then is fd meaningful. */
    if (f->path && f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    for (int i = 0; i < f->n_meta; i++) { free(f->meta[i].key); free(f->meta[i].value); }
    free(f->tensors);
    free(f->meta);
    free(f->by_name);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

/* ------------------------------------------------------------------------
 * Reading: lookups and data
 */

static int find_cmp(const void *key, const void *elem) {
    return strcmp(key, (*(const hy_safetensors_tensor *const *)elem)->name);
}

const hy_safetensors_tensor *hy_safetensors_find(const hy_safetensors_file *f, const char *name) {
    if (!f->by_name) return NULL;
    hy_safetensors_tensor *const *hit =
        bsearch(name, f->by_name, (size_t)f->n_tensors, sizeof *f->by_name, find_cmp);
    return hit ? *hit : NULL;
}

const char *hy_safetensors_meta_get(const hy_safetensors_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

int hy_safetensors_read_raw(const hy_safetensors_file *f, const hy_safetensors_tensor *t, void *dst, size_t size,
                   hy_error *err) {
    if (size != t->nbytes)
        return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' has %zu bytes, not the %zu asked for",
                       f->path, hy_safetensors_show(t->name).s, t->nbytes, size);
    return read_at(f->fd, dst, size, t->offset, f->path, err);
}

/* The 16-bit values are read into the upper half of dst and widened in
 * place, front to back, so no buffer is needed: writing float i (bytes
 * 4i..4i+3) only overwrites halves j <= 2i - n + 1 <= i, all already read. */
static int read_16(const hy_safetensors_file *f, const hy_safetensors_tensor *t, float *dst, size_t n,
                   hy_error *err) {
    unsigned char *bytes = (unsigned char *)dst, *half = bytes + 2 * n;
    int rc = read_at(f->fd, half, 2 * n, t->offset, f->path, err);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(half[2 * i] | half[2 * i + 1] << 8);
        float x = t->dtype == HY_ST_BF16 ? hy_safetensors_bf16_to_f32(h) : hy_safetensors_f16_to_f32(h);
        memcpy(bytes + 4 * i, &x, 4);
    }
    return HY_OK;
}

int hy_safetensors_read_f32(const hy_safetensors_file *f, const hy_safetensors_tensor *t, float *dst, size_t n,
                   hy_error *err) {
    if (t->dtype != HY_ST_F32 && t->dtype != HY_ST_BF16 && t->dtype != HY_ST_F16)
        return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' is %s; only F32, BF16 and F16 "
                       "tensors can be read as fp32", f->path, hy_safetensors_show(t->name).s,
                       DTYPES[t->dtype].name);
    if (n != t->numel) {
        char sh[160];
        format_shape(t->shape, t->ndim, sh, sizeof sh);
        return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' has shape %s (%zu elements), "
                       "expected %zu elements", f->path, hy_safetensors_show(t->name).s, sh, t->numel, n);
    }
    if (t->dtype == HY_ST_F32) return read_at(f->fd, dst, t->nbytes, t->offset, f->path, err);
    return read_16(f, t, dst, n, err);
}

/* ------------------------------------------------------------------------
 * Writer: collecting entries
 */

void hy_safetensors_writer_init(hy_safetensors_writer *w) { memset(w, 0, sizeof *w); }

void hy_safetensors_writer_free(hy_safetensors_writer *w) {
    for (int i = 0; i < w->n; i++) free(w->entries[i].name);
    for (int i = 0; i < w->n_meta; i++) { free(w->meta[i].key); free(w->meta[i].value); }
    free(w->entries);
    free(w->meta);
    memset(w, 0, sizeof *w);
}

/* `arr` (room for *cap elements of `size` bytes) with room for n + 1: the
 * same pointer, a larger block (and *cap updated), or NULL when out of
 * memory (arr is then still valid and unchanged). */
static void *grow(void *arr, int *cap, int n, size_t size) {
    if (n < *cap) return arr;
    if (*cap > INT_MAX / 2) return NULL;
    int nc = *cap ? *cap * 2 : 16;
    void *p = realloc(arr, (size_t)nc * size);
    if (p) *cap = nc;
    return p;
}

/* jansson refuses strings that are not UTF-8; asking it up front turns a
 * failure deep inside hy_safetensors_write into one at the call that caused it. */
static int valid_utf8(const char *s) {
    json_t *j = json_string(s);
    json_decref(j);
    return j != NULL;
}

static int check_add(const char *name, hy_safetensors_dtype dtype, int ndim, const size_t *shape,
                     hy_error *err) {
    if (!name || !valid_utf8(name) || strcmp(name, "__metadata__") == 0)
        return hy_fail(err, HY_ERR_RUNTIME, "safetensors writer: tensor name '%s' is not "
                       "allowed (NULL, not UTF-8, or \"__metadata__\")",
                       name ? hy_safetensors_show(name).s : "(null)");
    if (dtype != HY_ST_F32 && dtype != HY_ST_BF16)
        return hy_fail(err, HY_ERR_RUNTIME, "safetensors writer: tensor '%s': dtype %s cannot "
                       "be written (only F32 and BF16)", hy_safetensors_show(name).s,
                       hy_safetensors_dtype_name(dtype));
    if (ndim < 0 || ndim > HY_ST_MAX_DIMS || (ndim > 0 && !shape))
        return hy_fail(err, HY_ERR_RUNTIME, "safetensors writer: tensor '%s': %d dims "
                       "(0..%d, with a shape)", hy_safetensors_show(name).s, ndim, HY_ST_MAX_DIMS);
    return HY_OK;
}

int hy_safetensors_writer_add(hy_safetensors_writer *w, const char *name, hy_safetensors_dtype dtype, int ndim,
                     const size_t *shape, const float *data, hy_error *err) {
    int rc = check_add(name, dtype, ndim, shape, err);
    if (rc) return rc;
    hy_safetensors_entry e = { .dtype = dtype, .ndim = ndim, .numel = 1, .data = data };
    for (int i = 0; i < ndim; i++) {
        e.shape[i] = shape[i];
        if (__builtin_mul_overflow(e.numel, shape[i], &e.numel) || e.numel > SIZE_MAX / 4)
            return hy_fail(err, HY_ERR_RUNTIME, "safetensors writer: tensor '%s': shape "
                           "overflows", hy_safetensors_show(name).s);
    }
    if (e.numel && !data)
        return hy_fail(err, HY_ERR_RUNTIME, "safetensors writer: tensor '%s': no data",
                       hy_safetensors_show(name).s);
    hy_safetensors_entry *grown = grow(w->entries, &w->cap, w->n, sizeof *grown);
    if (!grown) return oom(err);
    w->entries = grown;
    if (!(e.name = strdup(name))) return oom(err);
    w->entries[w->n++] = e;
    return HY_OK;
}

int hy_safetensors_writer_set_meta(hy_safetensors_writer *w, const char *key, const char *value,
                          hy_error *err) {
    if (!key || !value || !valid_utf8(key) || !valid_utf8(value))
        return hy_fail(err, HY_ERR_RUNTIME, "safetensors writer: metadata key and value must "
                       "be UTF-8 strings");
    char *v = strdup(value);
    if (!v) return oom(err);
    for (int i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta[i].key, key) == 0) {
            free(w->meta[i].value);
            w->meta[i].value = v;
            return HY_OK;
        }
    char *k = strdup(key);
    hy_safetensors_meta *grown = k ? grow(w->meta, &w->cap_meta, w->n_meta, sizeof *grown) : NULL;
    if (!grown) {
        free(k);
        free(v);
        return oom(err);
    }
    w->meta = grown;
    w->meta[w->n_meta++] = (hy_safetensors_meta){ k, v };
    return HY_OK;
}

/* ------------------------------------------------------------------------
 * Writer: layout and header
 */

static size_t entry_bytes(const hy_safetensors_entry *e) {
    return e->numel * (e->dtype == HY_ST_F32 ? 4 : 2);
}

static int entry_name_cmp(const void *a, const void *b) {
    return strcmp((*(const hy_safetensors_entry *const *)a)->name, (*(const hy_safetensors_entry *const *)b)->name);
}

/* The reference's order (safetensors `prepare`): dtype descending in its
 * enum order, which puts wider types first and so keeps every tensor
 * aligned to its element size; then name, bytewise. */
static int entry_layout_cmp(const void *pa, const void *pb) {
    const hy_safetensors_entry *a = *(const hy_safetensors_entry *const *)pa, *b = *(const hy_safetensors_entry *const *)pb;
    if (a->dtype != b->dtype) return a->dtype > b->dtype ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* The entries in file order; duplicate names refused. */
static int layout_order(const hy_safetensors_writer *w, const char *path, const hy_safetensors_entry ***out,
                        hy_error *err) {
    const hy_safetensors_entry **order = malloc(((size_t)w->n + 1) * sizeof *order);
    if (!order) return oom(err);
    for (int i = 0; i < w->n; i++) order[i] = &w->entries[i];
    qsort(order, (size_t)w->n, sizeof *order, entry_name_cmp);
    for (int i = 1; i < w->n; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
            hy_fail(err, HY_ERR_RUNTIME, "cannot write %s: tensor '%s' was added twice", path,
                    hy_safetensors_show(order[i]->name).s);
            free(order);
            return HY_ERR_RUNTIME;
        }
    qsort(order, (size_t)w->n, sizeof *order, entry_layout_cmp);
    *out = order;
    return HY_OK;
}

static json_t *entry_json(const hy_safetensors_entry *e, uint64_t begin) {
    json_t *shape = json_array();
    for (int i = 0; shape && i < e->ndim; i++)
        if (json_array_append_new(shape, json_integer((json_int_t)e->shape[i]))) {
            json_decref(shape);
            return NULL;
        }
    /* "o" takes the shape's reference, and drops it if packing fails. */
    return json_pack("{s:s, s:o, s:[I, I]}", "dtype", DTYPES[e->dtype].name, "shape", shape,
                     "data_offsets", (json_int_t)begin,
                     (json_int_t)(begin + entry_bytes(e)));
}

static json_t *meta_json(const hy_safetensors_writer *w) {
    hy_safetensors_meta *sorted = malloc(((size_t)w->n_meta + 1) * sizeof *sorted);
    json_t *m = sorted ? json_object() : NULL;
    if (m) {
        memcpy(sorted, w->meta, (size_t)w->n_meta * sizeof *sorted);
        /* The reference writes these in hash order (it varies run to run);
         * sorted keys make ours reproducible. */
        qsort(sorted, (size_t)w->n_meta, sizeof *sorted, meta_cmp);
        for (int i = 0; i < w->n_meta; i++)
            if (json_object_set_new(m, sorted[i].key, json_string(sorted[i].value))) {
                json_decref(m);
                m = NULL;
                break;
            }
    }
    free(sorted);
    return m;
}

/* The header text, padded with spaces to a multiple of 8 (the reference's
 * alignment, so the data buffer starts 8-aligned in the file). */
static int build_header(const hy_safetensors_writer *w, const hy_safetensors_entry **order, char **text,
                        size_t *len, hy_error *err) {
    json_t *root = json_object();
    int ok = root != NULL;
    if (ok && w->n_meta) ok = json_object_set_new(root, "__metadata__", meta_json(w)) == 0;
    uint64_t at = 0;
    for (int i = 0; ok && i < w->n; i++) {
        /* Entries may share one array, so only the sum can overflow. */
        if (__builtin_add_overflow(at, entry_bytes(order[i]), &at) || at > INT64_MAX) {
            json_decref(root);
            return hy_fail(err, HY_ERR_RUNTIME, "safetensors writer: tensors total more than "
                           "2^63 bytes");
        }
        ok = json_object_set_new(root, order[i]->name,
                                 entry_json(order[i], at - entry_bytes(order[i]))) == 0;
    }
    /* jansson (>= 2.8) dumps keys in insertion order, i.e. the layout's. */
    char *s = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!s) return oom(err);
    size_t n = strlen(s), padded = (n + 7) / 8 * 8;
    char *p = realloc(s, padded + 1);
    if (!p) { free(s); return oom(err); }
    memset(p + n, ' ', padded - n);
    p[padded] = '\0';
    *text = p;
    *len = padded;
    return HY_OK;
}

/* ------------------------------------------------------------------------
 * Writer: the file
 */

static int write_bf16(hy_atomic_file *af, const float *x, size_t n, hy_error *err) {
    unsigned char buf[1 << 14];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; i < n && k < sizeof buf; i++, k += 2) {
            uint16_t h = hy_safetensors_bf16_from_f32(x[i]);
            buf[k] = (unsigned char)h;
            buf[k + 1] = (unsigned char)(h >> 8);
        }
        int rc = hy_atomic_write(af, buf, k, err);
        if (rc) return rc;
    }
    return HY_OK;
}

/* Fails only as hy_atomic_write does, which has then removed the file. */
static int write_body(hy_atomic_file *af, const char *header, size_t hlen,
                      const hy_safetensors_entry **order, int n, hy_error *err) {
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int rc = hy_atomic_write(af, len8, 8, err);
    if (!rc) rc = hy_atomic_write(af, header, hlen, err);
    for (int i = 0; i < n && !rc; i++) {
        const hy_safetensors_entry *e = order[i];
        rc = e->dtype == HY_ST_F32 ? hy_atomic_write(af, e->data, entry_bytes(e), err)
                                   : write_bf16(af, e->data, e->numel, err);
    }
    return rc;
}

int hy_safetensors_write(const hy_safetensors_writer *w, const char *path, hy_error *err) {
    return hy_safetensors_write_sum(w, path, NULL, err);
}

int hy_safetensors_write_sum(const hy_safetensors_writer *w, const char *path, hy_file_sum *sum, hy_error *err) {
    const hy_safetensors_entry **order = NULL;
    char *header = NULL;
    size_t hlen = 0;
    hy_atomic_file af;
    if (sum) *sum = (hy_file_sum){ 0, 0 };
    int rc = layout_order(w, path, &order, err);
    if (!rc) rc = build_header(w, order, &header, &hlen, err);
    if (!rc) rc = hy_atomic_open(&af, path, HY_ERR_RUNTIME, err);
    if (!rc) af.sum = sum;
    if (!rc) rc = write_body(&af, header, hlen, order, w->n, err);
    if (!rc) rc = hy_atomic_commit(&af, err);
    free(header);
    free(order);
    return rc;
}
