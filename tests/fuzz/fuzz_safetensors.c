/*
 * fuzz_safetensors.c — libFuzzer harness for the safetensors reader
 * (lib/safetensors.c).
 *
 * Opens the input (hy_safetensors_open), and when it opens, reads every tensor as
 * stored and, where the dtype allows, as fp32. safetensors.h promises that
 * after a successful open no read can leave the file, whatever the header
 * said; the harness checks the promises directly: every tensor lies inside
 * the data buffer, no two overlap, the raw bytes read are the input's
 * bytes at the tensor's offset, F32 reads equal them, BF16/F16 reads
 * widen them, other dtypes are refused as input errors, hy_safetensors_find finds
 * every tensor by name, and every metadata key has its value.
 */
#include "fuzz.h"
#include "safetensors.h"

static void read_tensor(const hy_safetensors_file *f, const hy_safetensors_tensor *t, const uint8_t *data,
                        size_t size) {
    FUZZ_ASSERT(t->offset >= f->data_start && t->offset <= size &&
                t->nbytes <= size - t->offset,
                "tensor '%s' at %llu + %zu outside a %zu-byte file", t->name,
                (unsigned long long)t->offset, t->nbytes, size);
    FUZZ_ASSERT(hy_safetensors_find(f, t->name) == t, "hy_safetensors_find misses '%s'", t->name);
    hy_error err;
    unsigned char *raw = malloc(t->nbytes + 1);
    FUZZ_ASSERT(raw, "out of memory");
    int rc = hy_safetensors_read_raw(f, t, raw, t->nbytes, &err);
    FUZZ_ASSERT(rc == HY_OK, "read_raw: %s", err.msg);
    FUZZ_ASSERT(memcmp(raw, data + t->offset, t->nbytes) == 0, "raw bytes of '%s'", t->name);

    int convertible = t->dtype == HY_ST_F32 || t->dtype == HY_ST_BF16 || t->dtype == HY_ST_F16;
    /* F32 takes 4 bytes a value, BF16 and F16 two: so the fp32 copy is
     * at most twice the tensor's bytes, never more than the file allows. */
    FUZZ_ASSERT(!convertible || t->numel <= t->nbytes / 2, "'%s': %zu values in %zu bytes",
                t->name, t->numel, t->nbytes);
    float *x = malloc((convertible ? t->numel : 1) * sizeof *x + 1);
    FUZZ_ASSERT(x, "out of memory");
    rc = hy_safetensors_read_f32(f, t, x, convertible ? t->numel : 0, &err);
    if (!convertible) {
        FUZZ_ASSERT(rc == HY_ERR_INPUT, "read_f32 of %s gave %d", hy_safetensors_dtype_name(t->dtype), rc);
        fuzz_check_error(rc, &err, f->path);
    } else {
        FUZZ_ASSERT(rc == HY_OK, "read_f32: %s", err.msg);
        for (size_t i = 0; i < t->numel; i++) {
            float want;
            if (t->dtype == HY_ST_F32) {
                memcpy(&want, raw + 4 * i, 4);
            } else {
                uint16_t h = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
                want = t->dtype == HY_ST_BF16 ? hy_safetensors_bf16_to_f32(h) : hy_safetensors_f16_to_f32(h);
            }
            FUZZ_ASSERT(memcmp(&want, &x[i], 4) == 0, "'%s'[%zu]", t->name, i);
        }
        /* The wrong count is refused, not read. */
        rc = hy_safetensors_read_f32(f, t, x, t->numel + 1, &err);
        FUZZ_ASSERT(rc == HY_ERR_INPUT, "read_f32 with numel + 1 gave %d", rc);
    }
    free(x);
    free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[256];
    fuzz_write_temp(data, size, path, sizeof path);
    hy_safetensors_file f;
    hy_error err;
    int rc = hy_safetensors_open(&f, path, &err);
    if (rc != HY_OK) {
        fuzz_check_error(rc, &err, path);
        FUZZ_ASSERT(f.fd < 0, "a failed open left the file open");
        hy_safetensors_close(&f);
        unlink(path);
        return 0;
    }
    FUZZ_ASSERT(f.file_size == size && f.data_start >= 8 && f.data_start <= size,
                "file_size %llu, data_start %llu for %zu bytes",
                (unsigned long long)f.file_size, (unsigned long long)f.data_start, size);
    for (int i = 0; i < f.n_tensors; i++) {
        read_tensor(&f, &f.tensors[i], data, size);
        /* No two tensors with bytes share any (empty ones may sit
         * anywhere in the buffer). */
        for (int j = i + 1; j < f.n_tensors; j++) {
            const hy_safetensors_tensor *a = &f.tensors[i], *b = &f.tensors[j];
            FUZZ_ASSERT(!a->nbytes || !b->nbytes || a->offset + a->nbytes <= b->offset ||
                            b->offset + b->nbytes <= a->offset,
                        "'%s' and '%s' overlap", a->name, b->name);
        }
    }
    for (int i = 0; i < f.n_meta; i++) {
        const char *v = hy_safetensors_meta_get(&f, f.meta[i].key);
        FUZZ_ASSERT(v && strcmp(v, f.meta[i].value) == 0, "metadata '%s'", f.meta[i].key);
    }
    hy_safetensors_close(&f);
    unlink(path);
    return 0;
}
