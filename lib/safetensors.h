/*
 * safetensors.h — read and write safetensors files (weights, checkpoints).
 *
 * The format (Hugging Face): an 8-byte little-endian u64 N, then N bytes of
 * JSON header, then the data buffer. The header is an object mapping each
 * tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}
 * (offsets relative to the buffer's start, e exclusive), plus an optional
 * "__metadata__" object of string values.
 *
 * Reading is fuzz-facing: hy_safetensors_open checks the whole header before anyone
 * touches a byte of data (sizes with checked arithmetic, every range inside
 * the buffer, no two tensors overlapping), so later reads cannot go out of
 * bounds whatever the file holds. A bad file is HY_ERR_INPUT with a
 * message that names the file and, where there is one, the tensor. Bytes
 * after the last tensor are refused, as the reference refuses them: they
 * belong to no tensor and mean the file was appended to or damaged. One
 * thing the reference refuses is accepted here, and counted in
 * hy_safetensors_file.unused_bytes so a caller can warn: gaps between
 * tensors, harmless to a reader that goes by offsets. Keys in a tensor
 * entry other than the three are ignored, as the reference does.
 *
 * Writing produces what the reference `serialize` produces for the same
 * tensors, byte for byte: tensors laid out by descending dtype in the
 * reference's enum order (so F32 before BF16), then by name, bytewise; the
 * compact JSON header in that order after "__metadata__", padded with
 * spaces to a multiple of 8 bytes. Two differences, both in the header
 * text only: the reference writes metadata keys in hash order, which
 * changes from run to run, where we sort them (so byte equality holds for
 * at most one key); and it escapes control characters other than \b \f
 * \n \r \t as \u001b where jansson writes \u001B.
 *
 * The file appears atomically: it is written to a temporary name in the
 * same directory, fsync'd, renamed over `path`, and the directory fsync'd;
 * on failure before the rename the temporary file is removed and `path` is
 * untouched (a failure of the last fsync is reported, the file stays).
 *
 * Nothing here prints, exits or keeps global state. Once open, a
 * hy_safetensors_file is only read: several threads may read tensors from one file
 * at once (pread shares no file position); open and close are the owner's.
 */
#ifndef HY_SAFETENSORS_H
#define HY_SAFETENSORS_H

#include "checksum.h"
#include "error.h"

#include <stddef.h>
#include <stdint.h>

#define HY_ST_MAX_DIMS 8
#define HY_ST_MAX_HEADER ((uint64_t)100000000)  /* the reference's limit, 100 MB */

/* Every dtype the reference (safetensors 0.8) knows, in its order: the
 * writer's layout sorts by this order, descending, as the reference does. */
typedef enum {
    HY_ST_BOOL, HY_ST_F4, HY_ST_F6_E2M3, HY_ST_F6_E3M2, HY_ST_U8, HY_ST_I8,
    HY_ST_F8_E5M2, HY_ST_F8_E4M3, HY_ST_F8_E8M0, HY_ST_F8_E4M3FNUZ, HY_ST_F8_E5M2FNUZ,
    HY_ST_I16, HY_ST_U16, HY_ST_F16, HY_ST_BF16, HY_ST_I32, HY_ST_U32, HY_ST_F32,
    HY_ST_C64, HY_ST_F64, HY_ST_I64, HY_ST_U64,
    HY_ST_DTYPE_COUNT
} hy_safetensors_dtype;

/* "F32", "BF16", ...; "?" for a value out of range. */
const char *hy_safetensors_dtype_name(hy_safetensors_dtype d);

/* ------------------------------------------------------------------------
 * Reading
 */

typedef struct {
    char *name;
    hy_safetensors_dtype dtype;
    int ndim;                        /* 0 (a scalar) .. HY_ST_MAX_DIMS */
    size_t shape[HY_ST_MAX_DIMS];
    size_t numel;                    /* product of shape (1 for a scalar) */
    uint64_t offset;                 /* absolute byte offset in the file */
    size_t nbytes;
} hy_safetensors_tensor;

typedef struct {
    char *key, *value;
} hy_safetensors_meta;

typedef struct {
    char *path;
    int fd;                          /* -1 when closed */
    uint64_t file_size;
    uint64_t data_start;             /* 8 + N: where offsets count from */
    hy_safetensors_tensor *tensors;           /* by data offset, then name */
    int n_tensors;
    hy_safetensors_meta *meta;                /* "__metadata__", sorted by key */
    int n_meta;
    uint64_t unused_bytes;           /* buffer bytes no tensor covers (gaps) */
    hy_safetensors_tensor **by_name;          /* into tensors, sorted by name */
} hy_safetensors_file;

/* Opens and checks `path`. On failure (HY_ERR_INPUT for a bad or missing
 * file) f is left closed, and hy_safetensors_close(f) is a harmless no-op. */
int hy_safetensors_open(hy_safetensors_file *f, const char *path, hy_error *err);

/* The tensor called `name`, or NULL. */
const hy_safetensors_tensor *hy_safetensors_find(const hy_safetensors_file *f, const char *name);

/* The "__metadata__" value of `key`, or NULL. */
const char *hy_safetensors_meta_get(const hy_safetensors_file *f, const char *key);

/* Reads tensor t (one of f's) as n = t->numel floats into dst, converting
 * F32, BF16 or F16 exactly. Another dtype, or n != numel, is HY_ERR_INPUT
 * naming the file and the tensor; a file that shrank since it was opened
 * is HY_ERR_INPUT, an I/O error HY_ERR_RUNTIME. */
int hy_safetensors_read_f32(const hy_safetensors_file *f, const hy_safetensors_tensor *t, float *dst, size_t n,
                   hy_error *err);

/* Reads tensor t's bytes as stored (little-endian) into dst, whose size
 * must be t->nbytes. For dtypes hy_safetensors_read_f32 does not convert. */
int hy_safetensors_read_raw(const hy_safetensors_file *f, const hy_safetensors_tensor *t, void *dst, size_t size,
                   hy_error *err);

/* Frees everything and closes the descriptor; f is then closed (and may be
 * closed again). Also safe on a zero-initialised struct. */
void hy_safetensors_close(hy_safetensors_file *f);

/* A name from a file as it may appear in a message: a hostile header must
 * not flood the message or drive the terminal, so at most 80 bytes are
 * shown ("..." after a longer one) and control characters become '?' (C0,
 * DEL, and C1 in its UTF-8 form, each byte). A value, so two may appear in
 * one message: hy_safetensors_show(a).s, hy_safetensors_show(b).s. */
typedef struct { char s[96]; } hy_safetensors_shown;
hy_safetensors_shown hy_safetensors_show(const char *name);

/* ------------------------------------------------------------------------
 * Writing
 */

typedef struct {
    char *name;
    hy_safetensors_dtype dtype;               /* HY_ST_F32 or HY_ST_BF16 */
    int ndim;
    size_t shape[HY_ST_MAX_DIMS];
    size_t numel;
    const float *data;               /* borrowed: must live until hy_safetensors_write */
} hy_safetensors_entry;

typedef struct {
    hy_safetensors_entry *entries;
    int n, cap;
    hy_safetensors_meta *meta;
    int n_meta, cap_meta;
} hy_safetensors_writer;

void hy_safetensors_writer_init(hy_safetensors_writer *w);

/* Adds a tensor of fp32 values stored as `dtype` (HY_ST_F32, or HY_ST_BF16:
 * rounded to nearest even). The name is copied; `data` (numel floats, may
 * be NULL when numel is 0) is only borrowed. A bad argument is
 * HY_ERR_RUNTIME (a caller's bug, not the user's input). Duplicate names
 * are found by hy_safetensors_write. */
int hy_safetensors_writer_add(hy_safetensors_writer *w, const char *name, hy_safetensors_dtype dtype, int ndim,
                     const size_t *shape, const float *data, hy_error *err);

/* Sets a "__metadata__" entry (replacing an earlier value of the key). */
int hy_safetensors_writer_set_meta(hy_safetensors_writer *w, const char *key, const char *value,
                          hy_error *err);

/* Writes the file atomically (see the top). Errors are HY_ERR_RUNTIME
 * naming the path and the system call. */
int hy_safetensors_write(const hy_safetensors_writer *w, const char *path, hy_error *err);
/* The same, summing the bytes written into *sum (checksum.h). */
int hy_safetensors_write_sum(const hy_safetensors_writer *w, const char *path, hy_file_sum *sum, hy_error *err);

void hy_safetensors_writer_free(hy_safetensors_writer *w);

/* ------------------------------------------------------------------------
 * Conversions (exact where the target holds the value)
 */

/* Round to nearest, ties to even; overflow goes to ±inf; a NaN becomes the
 * quiet NaN 0x7fc0 with its sign (as ml_dtypes/Eigen do). */
uint16_t hy_safetensors_bf16_from_f32(float x);
float hy_safetensors_bf16_to_f32(uint16_t h);
/* Exact, including subnormals, ±inf and NaN (payload kept). */
float hy_safetensors_f16_to_f32(uint16_t h);

#endif
