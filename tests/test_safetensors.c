/*
 * test_safetensors.c — the safetensors reader and writer: fp16/bf16
 * conversions (known values and exhaustive sweeps), files made by the
 * reference Python library (tests/fixtures/, see gen_safetensors.py there)
 * read correctly and re-written byte for byte, round trips, every
 * malformed header refused with HY_ERR_INPUT and a message naming the
 * file, the atomic writer leaving nothing behind on failure, and a
 * deterministic mutation loop (bit flips, byte overwrites, truncations)
 * in which every open must succeed or fail cleanly; ASan/UBSan (make test)
 * catch anything worse.
 *
 * Run from the repository root (it reads tests/fixtures/). Files are made
 * in a mkdtemp directory that is removed at the end.
 */
#include "safetensors.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const FIX_WRITE = "tests/fixtures/st_ref_write.safetensors";
static const char *const FIX_READ = "tests/fixtures/st_ref_read.safetensors";

static uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float float_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

/* A deterministic generator (no global state: the caller holds it). */
static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* ------------------------------------------------------------------------
 * Scratch files
 */

typedef struct { char dir[256]; } scratch;

static void scratch_init(scratch *s) {
    const char *t = getenv("TMPDIR");
    snprintf(s->dir, sizeof s->dir, "%s/hy_safetensors_XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(s->dir)) { perror(s->dir); exit(1); }
}

static const char *scratch_path(const scratch *s, const char *name, char *buf, size_t size) {
    snprintf(buf, size, "%s/%s", s->dir, name);
    return buf;
}

/* Removes the directory and what is in it (files and empty subdirectories). */
static void scratch_clean(scratch *s) {
    DIR *d = opendir(s->dir);
    if (!d) { perror(s->dir); return; }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", s->dir, e->d_name);
        if (remove(p) != 0) perror(p);
    }
    closedir(d);
    if (rmdir(s->dir) != 0) perror(s->dir);
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) { perror(path); exit(1); }
}

/* The whole file, malloc'd; *n its size. */
static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    unsigned char *buf = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n == cap && !(buf = realloc(buf, cap = cap * 2 + 4096))) exit(1);
        size_t got = fread(buf + *n, 1, cap - *n, f);
        if (!got) break;
        *n += got;
    }
    fclose(f);
    return buf;
}

/* A safetensors file of `header` (padding not added) and `data_len` bytes
 * of buffer (byte i = i). */
static void write_st(const char *path, const char *header, size_t data_len) {
    size_t h = strlen(header), n = 8 + h + data_len;
    unsigned char *b = malloc(n);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < data_len; i++) b[8 + h + i] = (unsigned char)i;
    write_bytes(path, b, n);
    free(b);
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* ------------------------------------------------------------------------
 * Conversions
 */

/* bf16 by a different route: the two neighbours in double, nearest wins,
 * a tie goes to the even one. */
static uint16_t bf16_reference(float x) {
    uint32_t u = bits_of(x);
    if (x != x) return (uint16_t)((u >> 16 & 0x8000) | 0x7fc0);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;   /* away from zero */
    double dx = x, dl = float_of(lo);
    double dh = (hi & 0x7f800000u) == 0x7f800000u ? (x < 0 ? -1 : 1) * 0x1p128
                                                  : (double)float_of(hi);
    if ((u & 0x7f800000u) == 0x7f800000u) return (uint16_t)(u >> 16);   /* inf */
    double el = fabs(dx - dl), eh = fabs(dh - dx);
    if (el < eh || (el == eh && !(lo >> 16 & 1))) return (uint16_t)(lo >> 16);
    return (uint16_t)(hi >> 16);
}

static void test_bf16(void) {
    static const struct { uint32_t in; uint16_t out; } known[] = {
        { 0x3f808000, 0x3f80 }, { 0x3f818000, 0x3f82 }, { 0x3f808001, 0x3f81 },
        { 0x3f80ffff, 0x3f81 }, { 0x7f7fffff, 0x7f80 }, { 0x7fc00000, 0x7fc0 },
        { 0xff800001, 0xffc0 }, { 0x7f800001, 0x7fc0 }, { 0xc0200000, 0xc020 },
        { 0x000116c2, 0x0001 }, { 0xff800000, 0xff80 }, { 0x7f800000, 0x7f80 },
        { 0x80000000, 0x8000 }, { 0x00000000, 0x0000 }, { 0x3f7f8000, 0x3f80 },
        { 0x3f7e8000, 0x3f7e }, { 0xbf808000, 0xbf80 }, { 0x00008000, 0x0000 },
        { 0x00018000, 0x0002 }, { 0x7f7f7fff, 0x7f7f }, { 0x7f7f8000, 0x7f80 },
    };
    for (int i = 0; i < NELEM(known); i++)
        CHECKF(hy_safetensors_bf16_from_f32(float_of(known[i].in)) == known[i].out,
               "0x%08x -> 0x%04x, want 0x%04x", known[i].in,
               hy_safetensors_bf16_from_f32(float_of(known[i].in)), known[i].out);
    /* Every bf16 widens exactly and narrows back to itself. */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float x = hy_safetensors_bf16_to_f32((uint16_t)h);
        bad += bits_of(x) != h << 16;
        if (x == x) bad += hy_safetensors_bf16_from_f32(x) != h;
        else bad += hy_safetensors_bf16_from_f32(x) != ((h & 0x8000) | 0x7fc0);
    }
    CHECKF(bad == 0, "%d bf16 patterns do not round-trip", bad);
    /* Rounding agrees with the reference on a million patterns (plus all
     * the ties around each exponent's first and last mantissas). */
    uint64_t seed = 12345;
    bad = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)lcg(&seed) << 1 ^ (uint32_t)lcg(&seed);
        if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;   /* exact ties */
        float x = float_of(u);
        bad += hy_safetensors_bf16_from_f32(x) != bf16_reference(x);
    }
    CHECKF(bad == 0, "%d patterns round differently from the reference", bad);
}

/* f16 by a different route: the value formula in double. */
static float f16_reference(uint16_t h) {
    int sign = h >> 15, exp = h >> 10 & 0x1f, man = h & 0x3ff;
    double v = exp == 0 ? ldexp(man, -24) : exp == 31 ? (man ? NAN : INFINITY)
             : ldexp(1024 + man, exp - 25);
    return (float)(sign ? -v : v);
}

static void test_f16(void) {
    static const uint16_t in[] = { 0x0000, 0x8000, 0x3c00, 0xc000, 0x7bff, 0x0400, 0x0001,
        0x03ff, 0x8001, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x3555, 0xfbff, 0x0200 };
    /* numpy's float16 -> float32 of the same patterns (gen_safetensors.py). */
    static const uint32_t want[] = { 0x00000000, 0x80000000, 0x3f800000, 0xc0000000,
        0x477fe000, 0x38800000, 0x33800000, 0x387fc000, 0xb3800000, 0x7f800000,
        0xff800000, 0x7fc00000, 0x7f802000, 0x3eaaa000, 0xc77fe000, 0x38000000 };
    for (int i = 0; i < NELEM(in); i++)
        CHECKF(bits_of(hy_safetensors_f16_to_f32(in[i])) == want[i], "0x%04x -> 0x%08x, want 0x%08x",
               in[i], bits_of(hy_safetensors_f16_to_f32(in[i])), want[i]);
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float x = hy_safetensors_f16_to_f32((uint16_t)h), r = f16_reference((uint16_t)h);
        int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        /* A NaN keeps its sign and payload (shifted into the top bits). */
        bad += nan ? !(x != x) || bits_of(x) != ((h & 0x8000u) << 16 | 0x7f800000u |
                                                 (h & 0x3ffu) << 13)
                   : bits_of(x) != bits_of(r);
    }
    CHECKF(bad == 0, "%d f16 patterns convert wrongly", bad);
}

/* ------------------------------------------------------------------------
 * Files from the reference library
 */

static void test_reference_read(void) {
    hy_safetensors_file f;
    hy_error err = { 0 };
    int rc = hy_safetensors_open(&f, FIX_READ, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (rc) return;
    CHECK(f.n_tensors == 4 && f.unused_bytes == 0 && f.data_start % 8 == 0);
    /* In file order (the reference's layout: F32, I32, BF16, F16). */
    const char *order[] = { "full", "ints", "brain", "half" };
    for (int i = 0; i < 4 && i < f.n_tensors; i++) CHECK(!strcmp(f.tensors[i].name, order[i]));
    CHECK(f.n_meta == 1 && hy_safetensors_meta_get(&f, "source") &&
          !strcmp(hy_safetensors_meta_get(&f, "source"), "gen_safetensors.py"));
    CHECK(hy_safetensors_meta_get(&f, "nope") == NULL && hy_safetensors_find(&f, "nope") == NULL);

    const hy_safetensors_tensor *full = hy_safetensors_find(&f, "full"), *half = hy_safetensors_find(&f, "half");
    const hy_safetensors_tensor *brain = hy_safetensors_find(&f, "brain"), *ints = hy_safetensors_find(&f, "ints");
    CHECK(full && half && brain && ints);
    if (!full || !half || !brain || !ints) { hy_safetensors_close(&f); return; }
    CHECK(full->dtype == HY_ST_F32 && full->ndim == 2 && full->shape[0] == 3 &&
          full->shape[1] == 2 && full->numel == 6 && full->nbytes == 24);
    CHECK(half->dtype == HY_ST_F16 && half->ndim == 2 && half->numel == 16);
    CHECK(brain->dtype == HY_ST_BF16 && ints->dtype == HY_ST_I32);
    CHECK(!strcmp(hy_safetensors_dtype_name(half->dtype), "F16"));

    float v[16];
    CHECK(hy_safetensors_read_f32(&f, full, v, 6, &err) == HY_OK);
    for (int i = 0; i < 6; i++) CHECK(v[i] == (float)i - 2.5f);
    CHECK(hy_safetensors_read_f32(&f, brain, v, 3, &err) == HY_OK);
    CHECK(v[0] == 1.0f && v[1] == -3.140625f && isinf(v[2]) && v[2] > 0);
    CHECK(hy_safetensors_read_f32(&f, half, v, 16, &err) == HY_OK);
    static const uint32_t want[] = { 0x00000000, 0x80000000, 0x3f800000, 0xc0000000,
        0x477fe000, 0x38800000, 0x33800000, 0x387fc000, 0xb3800000, 0x7f800000,
        0xff800000, 0x7fc00000, 0x7f802000, 0x3eaaa000, 0xc77fe000, 0x38000000 };
    for (int i = 0; i < 16; i++)
        CHECKF(bits_of(v[i]) == want[i], "half[%d] = 0x%08x, want 0x%08x", i, bits_of(v[i]),
               want[i]);

    /* Refusals that name the file and the tensor. */
    rc = hy_safetensors_read_f32(&f, ints, v, 3, &err);
    CHECK(rc == HY_ERR_INPUT && strstr(err.msg, "'ints' is I32") && strstr(err.msg, FIX_READ));
    rc = hy_safetensors_read_f32(&f, full, v, 5, &err);
    CHECK(rc == HY_ERR_INPUT && strstr(err.msg, "'full' has shape [3, 2] (6 elements)"));
    int32_t iv[3];
    CHECK(hy_safetensors_read_raw(&f, ints, iv, sizeof iv, &err) == HY_OK);
    CHECK(iv[0] == 1 && iv[1] == -2 && iv[2] == 3);
    CHECK(hy_safetensors_read_raw(&f, ints, iv, 8, &err) == HY_ERR_INPUT);
    hy_safetensors_close(&f);
    CHECK(f.fd == -1 && f.tensors == NULL && f.path == NULL);
    hy_safetensors_close(&f);   /* twice is harmless */
}

/* The writer's input for the fixture st_ref_write (gen_safetensors.py). */
static const uint32_t WRITE_F32[] = { 0x00000000, 0xbfc00000, 0x40500000, 0x000116c2,
                                      0x7f800000, 0x80000000 };
static const uint32_t WRITE_BF16[] = { 0x3f808000, 0x3f818000, 0x3f808001, 0x3f80ffff,
    0x7f7fffff, 0x7fc00000, 0xff800001, 0xc0200000, 0x000116c2, 0xff800000 };

static void test_reference_write(const scratch *s) {
    float f32[6], bf[10], seven = 7.0f;
    for (int i = 0; i < 6; i++) f32[i] = float_of(WRITE_F32[i]);
    for (int i = 0; i < 10; i++) bf[i] = float_of(WRITE_BF16[i]);
    hy_safetensors_writer w;
    hy_error err = { 0 };
    hy_safetensors_writer_init(&w);
    /* Added in an order unlike the file's, which must not matter. */
    size_t s23[] = { 2, 3 }, s10[] = { 10 }, s04[] = { 0, 4 };
    CHECK(hy_safetensors_writer_add(&w, "empty", HY_ST_BF16, 2, s04, NULL, &err) == HY_OK);
    CHECK(hy_safetensors_writer_add(&w, "scalar", HY_ST_F32, 0, NULL, &seven, &err) == HY_OK);
    CHECK(hy_safetensors_writer_add(&w, "a.bias", HY_ST_BF16, 1, s10, bf, &err) == HY_OK);
    CHECK(hy_safetensors_writer_add(&w, "b.weight", HY_ST_F32, 2, s23, f32, &err) == HY_OK);
    CHECK(hy_safetensors_writer_set_meta(&w, "format", "np", &err) == HY_OK);
    CHECK(hy_safetensors_writer_set_meta(&w, "format", "pt", &err) == HY_OK);   /* replaces */
    char path[512];
    scratch_path(s, "ours.safetensors", path, sizeof path);
    int rc = hy_safetensors_write(&w, path, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    hy_safetensors_writer_free(&w);
    size_t n_ours, n_ref;
    unsigned char *ours = slurp(path, &n_ours), *ref = slurp(FIX_WRITE, &n_ref);
    CHECKF(n_ours == n_ref && !memcmp(ours, ref, n_ref),
           "%zu bytes vs the reference's %zu, or different bytes", n_ours, n_ref);
    free(ours);
    free(ref);
    remove(path);
}

/* ------------------------------------------------------------------------
 * Round trips
 */

static void test_round_trip(const scratch *s) {
    enum { N = 3 * 5 * 7 };
    float a[N], b[N], back[N];
    uint64_t seed = 99;
    for (int i = 0; i < N; i++) {
        a[i] = (float)((double)lcg(&seed) / 0x7fffffff - 1.0) * 1e3f;
        b[i] = float_of((uint32_t)lcg(&seed) << 1 ^ (uint32_t)lcg(&seed));   /* any bits */
    }
    b[0] = NAN; b[1] = -INFINITY; b[2] = 1e-45f;
    size_t s3[] = { 3, 5, 7 }, s8[] = { 1, 1, 1, 1, 1, 1, 3, 35 };
    hy_safetensors_writer w;
    hy_error err = { 0 };
    hy_safetensors_writer_init(&w);
    CHECK(hy_safetensors_writer_add(&w, "h.0.attn.c_attn.weight", HY_ST_F32, 3, s3, a, &err) == HY_OK);
    CHECK(hy_safetensors_writer_add(&w, "h.0.mlp.c_fc.weight", HY_ST_BF16, 8, s8, b, &err) == HY_OK);
    CHECK(hy_safetensors_writer_add(&w, "odd", HY_ST_BF16, 1, (size_t[]){ 1 }, a, &err) == HY_OK);
    CHECK(hy_safetensors_writer_set_meta(&w, "zeta", "1", &err) == HY_OK);
    CHECK(hy_safetensors_writer_set_meta(&w, "alpha", "ünïcode \"quoted\"\n", &err) == HY_OK);
    char path[512];
    scratch_path(s, "round.safetensors", path, sizeof path);
    CHECKF(hy_safetensors_write(&w, path, &err) == HY_OK, "%s", err.msg);
    hy_safetensors_writer_free(&w);

    hy_safetensors_file f;
    int rc = hy_safetensors_open(&f, path, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (rc) return;
    CHECK(f.n_tensors == 3 && f.n_meta == 2 && f.unused_bytes == 0);
    CHECK(f.data_start % 8 == 0 && f.file_size == f.data_start + N * 4 + N * 2 + 2);
    CHECK(!strcmp(f.meta[0].key, "alpha") && !strcmp(f.meta[0].value, "ünïcode \"quoted\"\n"));
    CHECK(!strcmp(hy_safetensors_meta_get(&f, "zeta"), "1"));
    const hy_safetensors_tensor *ta = hy_safetensors_find(&f, "h.0.attn.c_attn.weight");
    const hy_safetensors_tensor *tb = hy_safetensors_find(&f, "h.0.mlp.c_fc.weight");
    const hy_safetensors_tensor *to = hy_safetensors_find(&f, "odd");
    CHECK(ta && tb && to);
    if (ta && tb && to) {
        CHECK(ta->ndim == 3 && ta->shape[2] == 7 && tb->ndim == 8 && tb->shape[7] == 35);
        CHECK(hy_safetensors_read_f32(&f, ta, back, N, &err) == HY_OK);
        CHECK(memcmp(back, a, sizeof a) == 0);
        CHECK(hy_safetensors_read_f32(&f, tb, back, N, &err) == HY_OK);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float want = hy_safetensors_bf16_to_f32(hy_safetensors_bf16_from_f32(b[i]));
            bad += want == want ? bits_of(back[i]) != bits_of(want) : back[i] == back[i];
        }
        CHECKF(bad == 0, "%d bf16 values differ after the round trip", bad);
        CHECK(hy_safetensors_read_f32(&f, to, back, 1, &err) == HY_OK);
        CHECK(back[0] == hy_safetensors_bf16_to_f32(hy_safetensors_bf16_from_f32(a[0])));
    }
    hy_safetensors_close(&f);
    remove(path);

    /* No tensors at all: the reference's "{}" and six spaces. */
    hy_safetensors_writer_init(&w);
    CHECK(hy_safetensors_write(&w, path, &err) == HY_OK);
    size_t n;
    unsigned char *bytes = slurp(path, &n);
    CHECK(n == 16 && !memcmp(bytes, "\x08\0\0\0\0\0\0\0{}      ", 16));
    free(bytes);
    CHECK(hy_safetensors_open(&f, path, &err) == HY_OK && f.n_tensors == 0);
    hy_safetensors_close(&f);
    hy_safetensors_writer_free(&w);
    remove(path);
}

/* ------------------------------------------------------------------------
 * Writer failures
 */

static void test_writer_errors(const scratch *s) {
    hy_safetensors_writer w;
    hy_error err = { 0 };
    float x[4] = { 1, 2, 3, 4 };
    size_t s4[] = { 4 }, s9[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 4 };
    size_t huge[] = { SIZE_MAX / 2, 4 };
    hy_safetensors_writer_init(&w);
    CHECK(hy_safetensors_writer_add(&w, "t", HY_ST_F16, 1, s4, x, &err) == HY_ERR_RUNTIME &&
          strstr(err.msg, "only F32 and BF16"));
    CHECK(hy_safetensors_writer_add(&w, "t", HY_ST_F32, 9, s9, x, &err) == HY_ERR_RUNTIME);
    CHECK(hy_safetensors_writer_add(&w, "t", HY_ST_F32, 2, huge, x, &err) == HY_ERR_RUNTIME &&
          strstr(err.msg, "overflows"));
    CHECK(hy_safetensors_writer_add(&w, "t", HY_ST_F32, 1, s4, NULL, &err) == HY_ERR_RUNTIME);
    CHECK(hy_safetensors_writer_add(&w, "__metadata__", HY_ST_F32, 1, s4, x, &err) == HY_ERR_RUNTIME);
    CHECK(hy_safetensors_writer_add(&w, "bad\xff", HY_ST_F32, 1, s4, x, &err) == HY_ERR_RUNTIME);
    CHECK(hy_safetensors_writer_set_meta(&w, "k", "bad\xc3", &err) == HY_ERR_RUNTIME);
    CHECK(w.n == 0 && w.n_meta == 0);

    /* A missing directory: an error naming the path, and no file. */
    CHECK(hy_safetensors_writer_add(&w, "t", HY_ST_F32, 1, s4, x, &err) == HY_OK);
    char path[512], missing[512];
    scratch_path(s, "no/such/dir", missing, sizeof missing);
    scratch_path(s, "no/such/dir/w.safetensors", path, sizeof path);
    int rc = hy_safetensors_write(&w, path, &err);
    CHECK(rc == HY_ERR_RUNTIME && strstr(err.msg, missing) &&
          strstr(err.msg, "No such file or directory"));
    CHECK(access(path, F_OK) != 0);
    int before = count_entries(s->dir);

    /* The target is a directory: rename fails after the data was written,
     * and the temporary file must be gone. */
    scratch_path(s, "a_dir", path, sizeof path);
    CHECK(mkdir(path, 0700) == 0);
    rc = hy_safetensors_write(&w, path, &err);
    CHECK(rc == HY_ERR_RUNTIME && strstr(err.msg, "cannot rename"));
    CHECK(count_entries(s->dir) == before + 1);   /* only a_dir itself */
    CHECK(count_entries(path) == 0);
    rmdir(path);

    /* A duplicate name: refused before anything is created. */
    CHECK(hy_safetensors_writer_add(&w, "t", HY_ST_BF16, 1, s4, x, &err) == HY_OK);
    scratch_path(s, "dup.safetensors", path, sizeof path);
    rc = hy_safetensors_write(&w, path, &err);
    CHECK(rc == HY_ERR_RUNTIME && strstr(err.msg, "'t' was added twice"));
    CHECK(access(path, F_OK) != 0 && count_entries(s->dir) == before);
    hy_safetensors_writer_free(&w);

    /* Rewriting an existing file replaces it whole. */
    scratch_path(s, "again.safetensors", path, sizeof path);
    write_bytes(path, "old junk", 8);
    hy_safetensors_writer_init(&w);
    CHECK(hy_safetensors_writer_add(&w, "t", HY_ST_F32, 1, s4, x, &err) == HY_OK);
    CHECK(hy_safetensors_write(&w, path, &err) == HY_OK);
    hy_safetensors_file f;
    CHECK(hy_safetensors_open(&f, path, &err) == HY_OK && f.n_tensors == 1);
    hy_safetensors_close(&f);
    hy_safetensors_writer_free(&w);
    remove(path);
    CHECK(count_entries(s->dir) == before);
}

/* ------------------------------------------------------------------------
 * Malformed files
 */

/* Opening `path` must fail with HY_ERR_INPUT, a message holding `want`
 * and the path, and leave f closed. */
static void expect_bad_file(const char *path, const char *want, int line) {
    hy_safetensors_file f;
    hy_error err = { 0 };
    int rc = hy_safetensors_open(&f, path, &err);
    CHECKF(rc == HY_ERR_INPUT && strstr(err.msg, want) && strstr(err.msg, path),
           "line %d: rc %d, message \"%s\", wanted \"%s\"", line, rc, err.msg, want);
    CHECK(f.fd == -1 && f.tensors == NULL && f.n_tensors == 0);
    hy_safetensors_close(&f);
}

static void expect_bad(const scratch *s, const char *header, size_t data_len, const char *want,
                       int line) {
    char path[512];
    scratch_path(s, "bad.safetensors", path, sizeof path);
    write_st(path, header, data_len);
    expect_bad_file(path, want, line);
    remove(path);
}
#define BAD(header, len, want) expect_bad(s, header, len, want, __LINE__)

/* A well-formed one-tensor entry, for brevity. */
#define T(name, dtype, shape, b, e) \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_malformed(const scratch *s) {
    char path[512];
    scratch_path(s, "short.safetensors", path, sizeof path);
    write_bytes(path, "\x02\0\0\0\0", 5);
    expect_bad_file(path, "too short", __LINE__);
    write_bytes(path, "\x10\0\0\0\0\0\0\0{}", 10);
    expect_bad_file(path, "goes beyond the end of the file", __LINE__);
    write_bytes(path, "\x01\xe1\xf5\x05\0\0\0\0{}      ", 16);   /* 100000001 */
    expect_bad_file(path, "over the 100000000-byte limit", __LINE__);
    write_bytes(path, "\xff\xff\xff\xff\xff\xff\xff\xff{}      ", 16);
    expect_bad_file(path, "limit", __LINE__);
    write_bytes(path, "\0\0\0\0\0\0\0\0", 8);
    expect_bad_file(path, "not valid JSON (line 1, column 0)", __LINE__);
    remove(path);
    scratch_path(s, "does-not-exist.safetensors", path, sizeof path);
    expect_bad_file(path, "cannot open", __LINE__);
    expect_bad_file(s->dir, "not a regular file", __LINE__);

    BAD("{\"a\": {\"dtype\": \"F32\",", 0, "not valid JSON (line 1, column 22)");
    BAD("{\n\"a\": nope}", 0, "not valid JSON (line 2, column");
    BAD("{} trailing", 0, "not valid JSON");
    BAD("[]", 0, "must be a JSON object {...}, got an array");
    BAD("\"x\"", 0, "not valid JSON");   /* jansson wants an object or array */
    BAD("{\"a\": 5}", 0, "tensor 'a': entry must be an object");
    BAD("{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "tensor 'a': missing \"dtype\"");
    BAD("{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4, "missing \"shape\"");
    BAD("{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "missing \"data_offsets\"");
    BAD("{\"a\": {\"dtype\": 32, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
        "\"dtype\" must be a string, got an integer");
    BAD("{" T("a", "F33", "[1]", 0, 4) "}", 4, "tensor 'a': unknown dtype \"F33\"");
    BAD("{" T("a", "f32", "[1]", 0, 4) "}", 4, "unknown dtype \"f32\"");
    BAD("{" T("a", "F32", "{}", 0, 4) "}", 4, "\"shape\" must be an array of integers, got an "
        "object");
    BAD("{" T("a", "F32", "[2,-1]", 0, 4) "}", 4, "shape[1] must be a non-negative integer, "
        "got a negative one");
    BAD("{" T("a", "F32", "[2.0]", 0, 8) "}", 8, "shape[0] must be a non-negative integer, got "
        "a real number");
    BAD("{" T("a", "F32", "[\"2\"]", 0, 8) "}", 8, "got a string");
    BAD("{" T("a", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 4, "shape has 9 dims; at most 8");
    BAD("{" T("a", "F32", "[4611686018427387904,4611686018427387904]", 0, 4) "}", 4,
        "overflow at shape[1]");
    BAD("{" T("a", "F32", "[9223372036854775807,9223372036854775807,0]", 0, 4) "}", 4,
        "overflow at shape[1]");
    BAD("{" T("a", "F32", "[2305843009213693952]", 0, 4) "}", 4, "more bytes than fit");
    BAD("{" T("a", "F32", "[99999999999999999999]", 0, 4) "}", 4, "not valid JSON");
    BAD("{" T("a", "F4", "[3]", 0, 2) "}", 2, "shape [3] of F4 does not end on a byte boundary");
    BAD("{" T("a", "F32", "[2,3]", 0, 20) "}", 24, "tensor 'a': shape [2, 3] of F32 is 24 bytes, "
        "but data_offsets [0, 20] span 20");
    BAD("{" T("a", "BF16", "[3]", 0, 8) "}", 8, "is 6 bytes");
    BAD("{" T("a", "F32", "[2]", 0, 8) "}", 7, "outside the data buffer, which has 7 bytes");
    BAD("{" T("a", "F32", "[0]", 9, 9) "}", 8, "outside the data buffer");
    BAD("{" T("a", "F32", "[1]", 18446744073709551615, 4) "}", 4, "not valid JSON");
    BAD("{" T("a", "F32", "[1]", 8, 4) "}", 8, "data_offsets [8, 4] has begin > end");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
        "\"data_offsets\" must be [begin, end]");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, "must be [begin");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, "must be [begin");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":\"0,4\"}}", 4, "must be [begin");
    BAD("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 4, 12) "}", 12,
        "tensors 'a' [0, 8) and 'b' [4, 12) overlap");
    BAD("{" T("a", "F32", "[4]", 0, 16) "," T("b", "F32", "[1]", 4, 8) "}", 16, "overlap");
    BAD("{" T("b", "F32", "[1]", 0, 4) "," T("a", "F32", "[1]", 0, 4) "}", 4, "overlap");
    BAD("{" T("a", "F32", "[1]", 0, 4) "," T("a", "F32", "[1]", 4, 8) "}", 8,
        "duplicate object key");
    BAD("{\"__metadata__\": {\"k\": 1}}", 0, "\"__metadata__\" value of 'k' must be a string, "
        "got an integer");
    BAD("{\"__metadata__\": [\"k\"]}", 0, "\"__metadata__\" must be an object of strings, got "
        "an array");
    BAD("{\"__metadata__\": {}, \"__metadata__\": {}}", 0, "duplicate");
    BAD("{\"a\\u0000b\": 1}", 0, "not valid JSON");
    /* Bytes after the last tensor (the reference refuses them too). */
    BAD("{}", 5, "5 bytes after the last tensor (the tensors end at byte 0 of the 5-byte data "
        "buffer)");
    BAD("{" T("a", "F32", "[1]", 0, 4) "}", 9, "5 bytes after the last tensor (the tensors end at "
        "byte 4 of the 9-byte");
    BAD("{" T("a", "F32", "[1]", 0, 4) "," T("e", "F32", "[0]", 9, 9) "}", 9, "5 bytes after");
    BAD("{\"\xff\": 1}", 0, "not valid JSON");
    /* A hostile name is shown tamed: control bytes as '?', cut at 80. */
    BAD("{\"\\u001b[31mred\": 1}", 0, "tensor '?[31mred'");
    BAD("{\"\\u009b2Jx\": 1}", 0, "tensor '??2Jx'");   /* C1 CSI, 2 bytes in UTF-8 */
    BAD("{\"" "0123456789012345678901234567890123456789012345678901234567890123456789"
        "0123456789XYZ\": 1}", 0, "0123456789...'");
}

/* What the reference refuses but we accept (see safetensors.h), and
 * corner cases that are valid. */
static void test_accepted(const scratch *s) {
    static const struct { const char *header; size_t data; int n; uint64_t unused; } ok[] = {
        { "{}", 0, 0, 0 },
        { "  {}  ", 0, 0, 0 },
        { "{" T("a", "F32", "[1]", 4, 8) "}", 8, 1, 4 },                /* a gap first */
        { "{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 8, 12) "}", 12, 2, 4 },
        { "{" T("a", "F32", "[]", 0, 4) "}", 4, 1, 0 },                 /* a scalar */
        { "{" T("a", "F32", "[0,3]", 4, 4) "," T("b", "F32", "[2]", 0, 8) "}", 8, 2, 0 },
        { "{" T("e", "U8", "[0]", 0, 0) "," T("f", "I64", "[0]", 0, 0) "}", 0, 2, 0 },
        { "{" T("a", "F4", "[4]", 0, 2) "," T("b", "F6_E2M3", "[4]", 2, 5) "}", 5, 2, 0 },
        { "{\"__metadata__\": null," T("a", "C64", "[1]", 0, 8) "}", 8, 1, 0 },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":[]}}", 4, 1, 0 },
    };
    char path[512];
    scratch_path(s, "ok.safetensors", path, sizeof path);
    for (int i = 0; i < NELEM(ok); i++) {
        write_st(path, ok[i].header, ok[i].data);
        hy_safetensors_file f;
        hy_error err = { 0 };
        int rc = hy_safetensors_open(&f, path, &err);
        CHECKF(rc == HY_OK && f.n_tensors == ok[i].n && f.unused_bytes == ok[i].unused,
               "case %d: rc %d (%s), %d tensors, %llu unused", i, rc, err.msg, f.n_tensors,
               (unsigned long long)f.unused_bytes);
        hy_safetensors_close(&f);
    }
    remove(path);
}

/* ------------------------------------------------------------------------
 * Mutations
 */

typedef struct { int opened, refused, wrong; } fuzz_tally;

/* Opens the bytes as a file; on success reads every tensor (so that any
 * bound the open let through is exercised). Anything but HY_OK or a clean
 * HY_ERR_INPUT naming the file is wrong. */
static void fuzz_one(const char *path, const unsigned char *b, size_t n, fuzz_tally *t) {
    write_bytes(path, b, n);
    hy_safetensors_file f;
    hy_error err = { 0 };
    int rc = hy_safetensors_open(&f, path, &err);
    if (rc != HY_OK) {
        if (rc == HY_ERR_INPUT && strstr(err.msg, path) && f.fd == -1) t->refused++;
        else { t->wrong++; fprintf(stderr, "fuzz: rc %d: %s\n", rc, err.msg); }
        return;
    }
    t->opened++;
    for (int i = 0; i < f.n_tensors; i++) {
        const hy_safetensors_tensor *x = &f.tensors[i];
        int fl = x->dtype == HY_ST_F32 || x->dtype == HY_ST_BF16 || x->dtype == HY_ST_F16;
        size_t size = fl ? x->numel * sizeof(float) : x->nbytes;
        void *buf = malloc(size ? size : 1);
        rc = fl ? hy_safetensors_read_f32(&f, x, buf, x->numel, &err)
                : hy_safetensors_read_raw(&f, x, buf, x->nbytes, &err);
        if (rc) { t->wrong++; fprintf(stderr, "fuzz: read: %s\n", err.msg); }
        if (x->offset + x->nbytes > f.file_size) t->wrong++;
        free(buf);
    }
    hy_safetensors_close(&f);
}

static void test_mutations(const scratch *s) {
    size_t n;
    unsigned char *orig = slurp(FIX_READ, &n);
    unsigned char *b = malloc(n);
    char path[512];
    scratch_path(s, "fuzz.safetensors", path, sizeof path);
    fuzz_tally t = { 0 };
    static const unsigned char pokes[] = { 0x00, 0xff, '"', '{', '}', '[', ']', ',', ':',
                                           '-', '9', '0', ' ', '\\', 0x80 };
    for (size_t p = 0; p < n; p++) {
        for (int bit = 0; bit < 8; bit += 3) {   /* bits 0, 3, 6 of every byte */
            memcpy(b, orig, n);
            b[p] ^= (unsigned char)(1u << bit);
            fuzz_one(path, b, n, &t);
        }
        for (int k = 0; k < NELEM(pokes); k += 2) {
            memcpy(b, orig, n);
            b[p] = pokes[(k + p) % NELEM(pokes)];
            fuzz_one(path, b, n, &t);
        }
        fuzz_one(path, orig, p, &t);   /* truncated to p bytes */
    }
    /* Several changes at once, at random places. */
    uint64_t seed = 2024;
    for (int i = 0; i < 1500; i++) {
        memcpy(b, orig, n);
        int k = 2 + (int)(lcg(&seed) % 6);
        for (int j = 0; j < k; j++) {
            size_t p = lcg(&seed) % n;
            b[p] = j % 2 ? pokes[lcg(&seed) % NELEM(pokes)] : (unsigned char)lcg(&seed);
        }
        fuzz_one(path, b, n - (i % 5 == 0 ? lcg(&seed) % 16 : 0), &t);
    }
    int total = t.opened + t.refused + t.wrong;
    printf("mutations: %d (opened %d, refused %d, wrong %d)\n", total, t.opened, t.refused,
           t.wrong);
    CHECK(t.wrong == 0);
    CHECK(total > 5000 && t.opened > 100 && t.refused > 1000);
    remove(path);
    free(b);
    free(orig);
}

int main(void) {
    scratch s;
    scratch_init(&s);
    test_bf16();
    test_f16();
    test_reference_read();
    test_reference_write(&s);
    test_round_trip(&s);
    test_writer_errors(&s);
    test_malformed(&s);
    test_accepted(&s);
    test_mutations(&s);
    CHECK(count_entries(s.dir) == 0);
    scratch_clean(&s);
    return TEST_END("safetensors");
}
