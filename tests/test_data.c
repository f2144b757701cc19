/*
 * test_data.c — token shards (lib/data.h): the write/read round trip and
 * the exact bytes of both formats (uint16 and uint32 ids, read back
 * equal; ids above 65535), llm.c's batch layout with its wrap-around and
 * position save/restore, datasets of several shards read as one stream
 * (batches across shard boundaries equal to one shard holding them all,
 * at most two shards in memory, later shards checked when reached), the
 * expansion of paths and glob patterns, every malformed shard refused
 * with HY_ERR_INPUT and a message naming the file (magic and version
 * named), atomic writes that leave nothing behind on failure, the
 * entropy estimates, and the synthetic corpus: deterministic to the
 * byte, different per seed and stream, and learnable (its measured
 * H(next|prev) far below log2 vocab); BERT's masked-LM inputs, pinned to
 * the byte.
 *
 * Files go to a mkdtemp directory under $TMPDIR (or /tmp), removed at the
 * end.
 */
#include "cmd_data.h"
#include "data.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static char scratch[256];

/* scratch/name, in a static rotation of buffers (tests hold a few). */
static const char *in_scratch(const char *name) {
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", scratch, name);
    return b;
}

static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Writes a raw file: a header with these three fields (the rest zero),
 * then ntok little-endian uint32 ids from tok, then `extra` zero bytes. */
static const char *raw_shard32(const char *name, uint32_t magic, uint32_t version,
                               uint32_t count, size_t ntok, const uint32_t *tok,
                               size_t extra) {
    const char *path = in_scratch(name);
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    unsigned char hdr[1024] = {0}, b[4];
    put_le32(hdr, magic);
    put_le32(hdr + 4, version);
    put_le32(hdr + 8, count);
    fwrite(hdr, 1, sizeof hdr, f);
    for (size_t i = 0; i < ntok; i++) {
        put_le32(b, tok[i]);
        fwrite(b, 1, 4, f);
    }
    for (size_t i = 0; i < extra; i++) fputc(0, f);
    if (fclose(f) != 0) { perror(path); exit(1); }
    return path;
}

/* Writes a raw file: a header with these three fields (the rest zero),
 * then ntok little-endian uint16 tokens from tok (NULL: 0, 1, 2, ...),
 * then `extra` zero bytes. hdr_bytes < 1024 cuts the header short. */
static const char *raw_shard(const char *name, uint32_t magic, uint32_t version,
                             uint32_t count, int hdr_bytes, size_t ntok,
                             const uint16_t *tok, size_t extra) {
    const char *path = in_scratch(name);
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    unsigned char hdr[1024] = {0};
    put_le32(hdr, magic);
    put_le32(hdr + 4, version);
    put_le32(hdr + 8, count);
    fwrite(hdr, 1, (size_t)hdr_bytes, f);
    for (size_t i = 0; i < ntok; i++) {
        unsigned v = tok ? tok[i] : (unsigned)(i & 0xffff);
        fputc((int)(v & 0xff), f);
        fputc((int)(v >> 8), f);
    }
    for (size_t i = 0; i < extra; i++) fputc(0, f);
    if (fclose(f) != 0) { perror(path); exit(1); }
    return path;
}

/* Whether raw begins with llm.c's header of these three fields, zeros
 * after them. */
static int is_header(const unsigned char *raw, uint32_t magic, uint32_t version,
                     uint32_t count) {
    unsigned char want[12];
    put_le32(want, magic);
    put_le32(want + 4, version);
    put_le32(want + 8, count);
    int ok = memcmp(raw, want, 12) == 0;
    for (int i = 12; i < 1024; i++) ok &= raw[i] == 0;
    return ok;
}

static long long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Number of entries in dir whose name contains ".tmp." (leftover temps). */
static int count_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
        else if (unlink(p) != 0) perror(p);
    }
    closedir(d);
    if (rmdir(dir) != 0) perror(dir);
}

/* Opening path must fail with HY_ERR_INPUT, a message naming the file and
 * containing want (and want2 when not NULL), and leave the shard empty. */
static void expect_bad(const char *path, int vocab, const char *want,
                       const char *want2, int line) {
    hy_shard sh;
    hy_error err = {0};
    int st = hy_shard_open(&sh, path, vocab, &err);
    CHECKF(st == HY_ERR_INPUT && err.status == HY_ERR_INPUT,
           "line %d: %s: status %d (%s)", line, path, st, err.msg);
    CHECKF(strstr(err.msg, path) != NULL, "line %d: message lacks the path: %s",
           line, err.msg);
    CHECKF(strstr(err.msg, want) != NULL, "line %d: message lacks '%s': %s",
           line, want, err.msg);
    if (want2)
        CHECKF(strstr(err.msg, want2) != NULL, "line %d: message lacks '%s': %s",
               line, want2, err.msg);
    CHECK(sh.ids == NULL && sh.n == 0 && sh.path == NULL);
    hy_shard_close(&sh);   /* safe on a failed open */
}
#define EXPECT_BAD(path, vocab, want, want2) expect_bad(path, vocab, want, want2, __LINE__)

/* 64-bit FNV-1a over the tokens' little-endian bytes. */
static uint64_t fnv1a(const uint16_t *t, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ (t[i] & 0xff)) * 0x100000001b3ull;
        h = (h ^ (t[i] >> 8)) * 0x100000001b3ull;
    }
    return h;
}

/* ------------------------------------------------------------------------ */

static void test_round_trip(void) {
    enum { N = 70000 };   /* more than write_tokens' 64 KiB buffer holds */
    uint16_t *tok = malloc(N * sizeof *tok);
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(i * 7919u);
    tok[0] = 0;
    tok[1] = 65535;
    const char *path = in_scratch("rt.bin");
    hy_error err = {0};
    CHECKF(hy_shard_write(path, tok, N, &err) == HY_OK, "%s", err.msg);
    CHECK(file_size(path) == 1024 + 2LL * N);
    CHECK(count_temps(scratch) == 0);

    /* The exact bytes: llm.c's header, little-endian, zeros after [2]. */
    FILE *f = fopen(path, "rb");
    unsigned char *raw = malloc(1024 + 2 * N);
    CHECK(f && fread(raw, 1, 1024 + 2 * N, f) == 1024 + 2 * N);
    if (f) fclose(f);
    CHECK(is_header(raw, 20240520, 1, N));
    CHECK(raw[1024 + 2] == 0xff && raw[1024 + 3] == 0xff);
    CHECK(raw[1024 + 4] == (unsigned char)tok[2] && raw[1024 + 5] == tok[2] >> 8);
    free(raw);

    hy_shard sh;
    CHECKF(hy_shard_open(&sh, path, 0, &err) == HY_OK, "%s", err.msg);
    CHECK(sh.n == N && sh.file_bytes == 1024 + 2ull * N && sh.max_token == 65535);
    CHECK(sh.format == HY_SHARD_U16 && strcmp(sh.path, path) == 0);
    CHECK(sh.ids && memcmp(sh.ids, tok, N * sizeof *tok) == 0);   /* 2 bytes a token */
    CHECK(hy_shard_id(&sh, 1) == 65535 && hy_shard_id(&sh, 2) == tok[2]);
    hy_shard_close(&sh);
    CHECK(sh.ids == NULL && sh.path == NULL && sh.n == 0);
    hy_shard_close(&sh);   /* twice is fine */
    CHECKF(hy_shard_open(&sh, path, 65536, &err) == HY_OK, "%s", err.msg);
    hy_shard_close(&sh);

    /* Overwriting replaces the whole file. */
    CHECKF(hy_shard_write(path, tok + 10, 5, &err) == HY_OK, "%s", err.msg);
    CHECK(file_size(path) == 1024 + 10);
    CHECKF(hy_shard_open(&sh, path, 0, &err) == HY_OK, "%s", err.msg);
    CHECK(sh.n == 5 && memcmp(sh.ids, tok + 10, 5 * sizeof *tok) == 0);
    hy_shard_close(&sh);

    /* A new file gets 0666 less the umask, like any other. */
    mode_t old = umask(022);
    const char *m = in_scratch("mode.bin");
    CHECK(hy_shard_write(m, tok, 3, &err) == HY_OK);
    struct stat st;
    CHECK(stat(m, &st) == 0 && (st.st_mode & 0777) == 0644);
    umask(old);
    free(tok);
}

/* Both formats written and read back: the exact bytes of the uint32 one,
 * ids above 65535, and the same ids through either format alike. */
static void test_u32(void) {
    enum { N = 20000 };   /* 80 KB of ids: more than the writer's 64 KiB buffer */
    uint32_t *ids = malloc(N * sizeof *ids);
    uint16_t *small = malloc(N * sizeof *small);
    for (int i = 0; i < N; i++) {
        ids[i] = (uint32_t)i * 104729u % 128256u;
        small[i] = (uint16_t)(ids[i] % 65536u);
    }
    ids[0] = 65536;
    ids[1] = 2147483647u;   /* the largest id a shard may hold */
    hy_error err = {0};
    const char *p32 = in_scratch("u32.bin");
    CHECKF(hy_shard_write_ids(p32, ids, HY_SHARD_U32, N, &err) == HY_OK, "%s", err.msg);
    CHECK(file_size(p32) == 1024 + 4LL * N && count_temps(scratch) == 0);
    FILE *f = fopen(p32, "rb");
    unsigned char raw[1024 + 12], want[12];
    CHECK(f && fread(raw, 1, sizeof raw, f) == sizeof raw);
    if (f) fclose(f);
    CHECK(is_header(raw, 20240801, 7, N));
    put_le32(want, 65536);
    put_le32(want + 4, 2147483647u);
    put_le32(want + 8, ids[2]);
    CHECK(memcmp(raw + 1024, want, 12) == 0);

    hy_shard sh;
    CHECKF(hy_shard_open(&sh, p32, 0, &err) == HY_OK, "%s", err.msg);
    CHECK(sh.format == HY_SHARD_U32 && sh.n == N && sh.file_bytes == 1024 + 4ull * N);
    CHECK(sh.max_token == 2147483647 && memcmp(sh.ids, ids, N * sizeof *ids) == 0);
    CHECK(hy_shard_id(&sh, 0) == 65536 && hy_shard_id(&sh, 2) == ids[2]);
    hy_shard_close(&sh);
    /* Against a vocabulary: the first id at or above it is named. */
    CHECK(hy_shard_open(&sh, p32, 128256, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "token 2147483647 at index 1") && strstr(err.msg, p32), "%s", err.msg);
    ids[1] = 128255;
    CHECK(hy_shard_write_ids(p32, ids, HY_SHARD_U32, N, &err) == HY_OK);
    CHECKF(hy_shard_open(&sh, p32, 128256, &err) == HY_OK, "%s", err.msg);
    CHECK(sh.max_token == 128255);
    hy_shard_close(&sh);

    /* The same ids in both formats read back equal, and the uint16 one
     * keeps 2 bytes a token; a uint16 shard under a vocabulary above
     * 65536 is fine. */
    uint32_t *wide = malloc(N * sizeof *wide);
    for (int i = 0; i < N; i++) wide[i] = small[i];
    const char *p16 = in_scratch("same16.bin"), *q32 = in_scratch("same32.bin");
    CHECK(hy_shard_write_ids(p16, small, HY_SHARD_U16, N, &err) == HY_OK);
    CHECK(hy_shard_write_ids(q32, wide, HY_SHARD_U32, N, &err) == HY_OK);
    hy_shard a, b;
    CHECKF(hy_shard_open(&a, p16, 128256, &err) == HY_OK, "%s", err.msg);
    CHECKF(hy_shard_open(&b, q32, 128256, &err) == HY_OK, "%s", err.msg);
    CHECK(a.format == HY_SHARD_U16 && b.format == HY_SHARD_U32 && a.n == b.n);
    CHECK(a.max_token == b.max_token && file_size(p16) == 1024 + 2LL * N);
    int same = 1;
    for (size_t i = 0; i < a.n; i++) same &= hy_shard_id(&a, i) == hy_shard_id(&b, i);
    CHECK(same);
    /* ... and batch alike. */
    int ia[64], ib[64], ta[64], tb[64];
    hy_dataset da, db;
    CHECK(hy_dataset_open(&da, &p16, 1, 0, &err) == HY_OK);
    CHECK(hy_dataset_open(&db, &q32, 1, 0, &err) == HY_OK);
    for (int k = 0; k < 5; k++) {
        CHECK(hy_dataset_next(&da, 4, 16, ia, ta, &err) == HY_OK);
        CHECK(hy_dataset_next(&db, 4, 16, ib, tb, &err) == HY_OK);
        CHECK(memcmp(ia, ib, sizeof ia) == 0 && memcmp(ta, tb, sizeof ta) == 0);
    }
    hy_dataset_close(&da);
    hy_dataset_close(&db);
    hy_shard_close(&a);
    hy_shard_close(&b);

    /* The writer refuses what no reader takes; nothing is left behind. */
    const char *no = in_scratch("no32.bin");
    wide[3] = 2147483648u;
    CHECK(hy_shard_write_ids(no, wide, HY_SHARD_U32, N, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "token 2147483648 at index 3") && strstr(err.msg, no), "%s", err.msg);
    CHECK(file_size(no) == -1 && count_temps(scratch) == 0);
    CHECK(hy_shard_write_ids(no, wide, (hy_shard_format)3, N, &err) == HY_ERR_INPUT);
    CHECK(strcmp(hy_shard_format_name(HY_SHARD_U16), "u16") == 0);
    CHECK(strcmp(hy_shard_format_name(HY_SHARD_U32), "u32") == 0);
    free(wide);
    free(ids);
    free(small);
}

static void test_batches(void) {
    enum { B = 2, T = 3, BT = B * T, N = 2 * BT + 5 };   /* 17 tokens */
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(100 + i);
    const char *path = in_scratch("batch.bin");
    hy_error err = {0};
    hy_dataset sh;
    CHECK(hy_shard_write(path, tok, N, &err) == HY_OK);
    CHECKF(hy_dataset_open(&sh, &path, 1, 200, &err) == HY_OK, "%s", err.msg);
    CHECK(sh.n == N && sh.n_shards == 1 && hy_dataset_batches(&sh, B, T) == 2);

    /* Batches start at 0, 6, then 12 would need tokens 12..18 > 16: wrap. */
    int in[BT], tg[BT];
    size_t starts[] = {0, 6, 0, 6, 0};
    for (int k = 0; k < NELEM(starts); k++) {
        CHECK(hy_dataset_next(&sh, B, T, in, tg, &err) == HY_OK);
        int ok = 1;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                int want = 100 + (int)starts[k] + b * T + t;
                ok &= in[b * T + t] == want && tg[b * T + t] == want + 1;
            }
        CHECKF(ok, "batch %d (start %zu): inputs %d.., targets %d..", k,
               starts[k], in[0], tg[0]);
        CHECK(hy_dataset_pos(&sh) == starts[k] + BT);
        /* The pass hy_data_epoch says batch k is in starts at 0. */
        CHECK(hy_data_epoch((uint64_t)k, 2) == (uint64_t)k / 2 + 1 && (starts[k] == 0) == (k % 2 == 0));
    }

    /* Position save/restore resumes bit for bit. */
    CHECK(hy_dataset_set_pos(&sh, 4, &err) == HY_OK && hy_dataset_pos(&sh) == 4);
    int first[4][BT], again[4][BT];
    for (int k = 0; k < 4; k++) CHECK(hy_dataset_next(&sh, B, T, first[k], NULL, &err) == HY_OK);
    CHECK(first[0][0] == 104 && first[1][0] == 110 && first[2][0] == 100);
    CHECK(hy_dataset_set_pos(&sh, 4, &err) == HY_OK);
    for (int k = 0; k < 4; k++) CHECK(hy_dataset_next(&sh, B, T, again[k], NULL, &err) == HY_OK);
    CHECK(memcmp(first, again, sizeof first) == 0);
    CHECK(first[3][0] == 106 && hy_dataset_pos(&sh) == 12);
    CHECK(hy_dataset_next(&sh, B, T, NULL, tg, &err) == HY_OK);   /* 12+7 > 17: wraps */
    CHECK(tg[0] == 101 && tg[BT - 1] == 106 && hy_dataset_pos(&sh) == 6);
    CHECK(hy_dataset_set_pos(&sh, N - 1, &err) == HY_OK);
    CHECK(hy_dataset_next(&sh, B, T, in, NULL, &err) == HY_OK && in[0] == 100);
    hy_error_clear(&err);
    CHECK(hy_dataset_set_pos(&sh, N, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, path) && strstr(err.msg, "17 tokens"));
    CHECK(hy_dataset_pos(&sh) == 6);   /* unchanged by the refused set */

    /* Independent positions over one dataset. */
    size_t p1 = 0, p2 = 6;
    int a[BT], b2[BT];
    CHECK(hy_dataset_read(&sh, &p1, B, T, a, NULL, &err) == HY_OK && p1 == 6);
    CHECK(hy_dataset_read(&sh, &p2, B, T, b2, NULL, &err) == HY_OK && p2 == 12);
    CHECK(a[0] == 100 && b2[0] == 106);

    /* Exactly B*T+1 tokens: one batch, the same one every time. */
    CHECK(hy_dataset_next(&sh, 4, 4, NULL, NULL, &err) == HY_OK);   /* 17 = 16+1 */
    CHECK(hy_dataset_pos(&sh) == 16 && hy_dataset_batches(&sh, 4, 4) == 1);
    int in16[16], tg16[16];
    CHECK(hy_dataset_next(&sh, 4, 4, in16, tg16, &err) == HY_OK);
    CHECK(in16[0] == 100 && in16[15] == 115 && tg16[15] == 116);

    /* Too short for one batch, and nonsense sizes. */
    hy_error_clear(&err);
    CHECK(hy_dataset_next(&sh, 3, 8, in16, NULL, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, path) && strstr(err.msg, "17 tokens") &&
           strstr(err.msg, "3 x 8 + 1 = 25"), "%s", err.msg);
    CHECK(hy_dataset_pos(&sh) == 16 && hy_dataset_batches(&sh, 3, 8) == 0);
    CHECK(hy_dataset_next(&sh, 0, 4, NULL, NULL, &err) == HY_ERR_INPUT);
    CHECK(hy_dataset_next(&sh, 4, -1, NULL, NULL, &err) == HY_ERR_INPUT);
    hy_dataset_close(&sh);
    hy_dataset_close(&sh);   /* twice is fine */
}

/* How many of ds's shards hold their ids in memory now. */
static int resident(const hy_dataset *ds) {
    int n = 0;
    for (int i = 0; i < ds->n_shards; i++) n += ds->shards[i].ids != NULL;
    return n;
}

/* Several shards are one stream: split a token sequence into shards of
 * uneven sizes (some shorter than a batch, both formats), and every
 * batch read from them (wrapping, restored positions, inputs or targets
 * alone) equals the same batch read from one shard of all the tokens;
 * at most two shards are ever in memory. */
static void test_datasets(void) {
    enum { N = 3001 };
    static const size_t cut[] = { 700, 3, 1, 2, 900, 5, 1390 };   /* sums to N */
    enum { K = (int)(sizeof cut / sizeof cut[0]) };
    uint32_t *all = malloc(N * sizeof *all);
    for (int i = 0; i < N; i++) all[i] = (uint32_t)(i * 7919u % 60000u);
    hy_error err = {0};
    const char *whole = in_scratch("whole.bin");
    CHECK(hy_shard_write_ids(whole, all, HY_SHARD_U32, N, &err) == HY_OK);
    const char *paths[K];
    char names[K][32];
    size_t at = 0;
    for (int k = 0; k < K; k++) {
        snprintf(names[k], sizeof names[k], "part%d.bin", k);
        paths[k] = strdup(in_scratch(names[k]));
        hy_shard_format f = k % 2 ? HY_SHARD_U32 : HY_SHARD_U16;
        uint16_t part16[1400];
        for (size_t i = 0; i < cut[k]; i++) part16[i] = (uint16_t)all[at + i];
        CHECK(hy_shard_write_ids(paths[k], f == HY_SHARD_U16 ? (void *)part16 : (void *)(all + at),
                                 f, cut[k], &err) == HY_OK);
        at += cut[k];
    }
    CHECK(at == N);
    hy_dataset one, many;
    CHECKF(hy_dataset_open(&one, &whole, 1, 60000, &err) == HY_OK, "%s", err.msg);
    CHECKF(hy_dataset_open(&many, paths, K, 60000, &err) == HY_OK, "%s", err.msg);
    CHECK(many.n == N && many.n_shards == K && many.start[4] == 706 && resident(&many) == 1);
    int shapes[][2] = { {4, 16}, {1, 1}, {3, 7}, {2, 500} };
    for (int s = 0; s < NELEM(shapes); s++) {
        int B = shapes[s][0], T = shapes[s][1], bt = B * T;
        CHECK(hy_dataset_batches(&many, B, T) == hy_dataset_batches(&one, B, T));
        int *i1 = malloc(4 * (size_t)bt * sizeof(int)), *t1 = i1 + bt, *i2 = t1 + bt, *t2 = i2 + bt;
        size_t p1 = 0, p2 = 0;
        int ok = 1, most = 0;
        for (int k = 0; k < 300 && ok; k++) {
            int mode = k % 3;   /* both, inputs only, targets only */
            ok &= hy_dataset_read(&one, &p1, B, T, mode == 2 ? NULL : i1, mode == 1 ? NULL : t1,
                                  &err) == HY_OK;
            ok &= hy_dataset_read(&many, &p2, B, T, mode == 2 ? NULL : i2, mode == 1 ? NULL : t2,
                                  &err) == HY_OK;
            ok &= p1 == p2;
            if (mode != 2) ok &= memcmp(i1, i2, (size_t)bt * sizeof(int)) == 0;
            if (mode != 1) ok &= memcmp(t1, t2, (size_t)bt * sizeof(int)) == 0;
            most = resident(&many) > most ? resident(&many) : most;
        }
        CHECKF(ok && most <= 2, "B %d T %d: batches differ (%s), %d shards resident", B, T,
               err.msg, most);
        /* A restored position continues the same way. */
        p2 = 1234;
        p1 = 1234;
        CHECK(hy_dataset_read(&one, &p1, B, T, i1, t1, &err) == HY_OK);
        CHECK(hy_dataset_read(&many, &p2, B, T, i2, t2, &err) == HY_OK);
        CHECK(memcmp(i1, i2, (size_t)bt * sizeof(int)) == 0 && p1 == p2);
        free(i1);
    }
    /* Skipping batches (a replica passing over the others') loads nothing. */
    hy_dataset_close(&many);
    CHECK(hy_dataset_open(&many, paths, K, 60000, &err) == HY_OK);
    for (int k = 0; k < 100; k++) CHECK(hy_dataset_next(&many, 2, 8, NULL, NULL, &err) == HY_OK);
    CHECK(resident(&many) == 1 && many.resident[0] == 0);
    CHECK(hy_dataset_set_pos(&many, N, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "7 shards") && strstr(err.msg, "3001 tokens in all"), "%s", err.msg);
    hy_dataset_close(&many);
    hy_dataset_close(&one);

    /* Headers are checked at the open, every shard's. */
    const char *badh[3] = { paths[0], raw_shard("hdr_bad.bin", 1, 1, 3, 1024, 3, NULL, 0),
                            paths[1] };
    CHECK(hy_dataset_open(&many, badh, 3, 0, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "hdr_bad.bin: not an llm.c token shard"), "%s", err.msg);
    CHECK(many.shards == NULL && many.n_shards == 0);
    const char *missing[2] = { paths[0], in_scratch("no_part.bin") };
    CHECK(hy_dataset_open(&many, missing, 2, 0, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "no_part.bin") && strstr(err.msg, "No such file"));

    /* A later shard's tokens are checked when reading reaches it: its
     * error names it, and the position does not move. */
    uint16_t t3[3] = { 1, 2, 9 };
    const char *later[2] = { in_scratch("low.bin"), in_scratch("high.bin") };   /* 1, then 3 */
    CHECK(hy_shard_write(later[0], t3, 1, &err) == HY_OK);
    CHECK(hy_shard_write(later[1], t3, 3, &err) == HY_OK);
    CHECKF(hy_dataset_open(&many, later, 2, 9, &err) == HY_OK, "%s", err.msg);
    size_t p = 0;
    hy_error_clear(&err);
    CHECK(hy_dataset_read(&many, &p, 1, 2, NULL, NULL, &err) == HY_OK && p == 2);   /* no load */
    p = 0;
    CHECK(hy_dataset_read(&many, &p, 1, 2, NULL, (int[2]){0}, &err) == HY_ERR_INPUT && p == 0);
    CHECKF(strstr(err.msg, "high.bin: token 9 at index 2") &&
           strstr(err.msg, "model.vocab = 9"), "%s", err.msg);
    hy_dataset_close(&many);

    /* A shard that changes under a running dataset is refused, not read. */
    const char *grow[2] = { paths[0], in_scratch("grow.bin") };
    CHECK(hy_shard_write(grow[1], t3, 3, &err) == HY_OK);
    CHECK(hy_dataset_open(&many, grow, 2, 0, &err) == HY_OK);
    CHECK(hy_shard_write(grow[1], t3, 2, &err) == HY_OK);
    p = 698;
    int two[2];
    CHECK(hy_dataset_read(&many, &p, 1, 2, two, NULL, &err) == HY_OK && two[1] == (int)all[699]);
    CHECK(hy_dataset_read(&many, &p, 1, 2, two, NULL, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "grow.bin: the shard changed since it was opened (3 u16 tokens then, "
                           "2 u16 tokens now)"), "%s", err.msg);
    hy_dataset_close(&many);
    CHECK(hy_dataset_open(&many, paths, 0, 0, &err) == HY_ERR_INPUT);
    for (int k = 0; k < K; k++) free((char *)paths[k]);
    free(all);
}

/* Paths stay as they are; patterns become their matches, sorted by name
 * in byte order; a pattern that matches nothing is refused. */
static void test_expand(void) {
    const char *dir = in_scratch("g");
    CHECK(mkdir(dir, 0755) == 0);
    const char *names[] = { "g/shard_2.bin", "g/shard_10.bin", "g/shard_1.bin", "g/other.txt",
                            "g/x[1].bin" };
    for (int i = 0; i < NELEM(names); i++) raw_shard(names[i], 20240520, 1, 1, 1024, 1, NULL, 0);
    char pat[600], lit[600], esc[600], none[600];
    snprintf(pat, sizeof pat, "%s/shard_*.bin", dir);
    snprintf(lit, sizeof lit, "%s/not_yet.bin", dir);
    snprintf(esc, sizeof esc, "%s/x\\[1].bin", dir);
    snprintf(none, sizeof none, "%s/train_*.bin", dir);
    const char *specs[] = { lit, pat, esc };
    char **paths = NULL;
    int n = -1;
    hy_error err = {0};
    CHECKF(hy_data_expand(specs, 3, "data.train", &paths, &n, &err) == HY_OK, "%s", err.msg);
    CHECK(n == 5);
    const char *want[] = { "not_yet.bin", "shard_1.bin", "shard_10.bin", "shard_2.bin",
                           "x[1].bin" };
    for (int i = 0; i < n && i < 5; i++) {
        const char *base = strrchr(paths[i], '/');
        CHECKF(base && strcmp(base + 1, want[i]) == 0, "entry %d: %s, want %s", i, paths[i],
               want[i]);
    }
    hy_data_paths_free(paths, n);
    const char *bad[] = { pat, none };
    CHECK(hy_data_expand(bad, 2, "data.train", &paths, &n, &err) == HY_ERR_INPUT);
    CHECK(paths == NULL && n == 0);
    CHECKF(strstr(err.msg, "data.train: the pattern") && strstr(err.msg, none) &&
           strstr(err.msg, "matches no file"), "%s", err.msg);
    snprintf(none, sizeof none, "%s/no-dir/*.bin", dir);
    CHECK(hy_data_expand(bad, 2, "data.train", &paths, &n, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, none) && strstr(err.msg, "cannot read its directory") &&
           strstr(err.msg, "No such file or directory"), "%s", err.msg);
    CHECK(hy_data_expand(bad, 0, "data.train", &paths, &n, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "data.train names no shard") != NULL);
    /* A directory that cannot be read (not as root, who reads anyway). */
    if (geteuid() != 0) {
        CHECK(chmod(dir, 0) == 0);
        CHECK(hy_data_expand(specs + 1, 1, "data.train", &paths, &n, &err) == HY_ERR_INPUT);
        CHECK(strstr(err.msg, pat) && strstr(err.msg, "Permission denied"));
        CHECK(chmod(dir, 0755) == 0);
    }
}

static void test_bad_shards(void) {
    uint16_t tok[20];
    for (int i = 0; i < 20; i++) tok[i] = (uint16_t)(i * 10);   /* 0..190 */

    EXPECT_BAD(raw_shard("magic.bin", 12345, 1, 20, 1024, 20, tok, 0),
               0, "12345", "20240520");
    EXPECT_BAD(raw_shard("model.bin", 20240326, 1, 20, 1024, 20, tok, 0),
               0, "model checkpoint", NULL);
    EXPECT_BAD(raw_shard("bigend.bin", 0x8ef13701u, 1, 20, 1024, 20, tok, 0),
               0, "big-endian", NULL);
    EXPECT_BAD(raw_shard("version.bin", 20240520, 2, 20, 1024, 20, tok, 0),
               0, "version 2", "uint32");
    EXPECT_BAD(raw_shard("version0.bin", 20240520, 0, 20, 1024, 20, tok, 0),
               0, "version 0", NULL);
    /* Count vs size, both ways; both numbers named. */
    EXPECT_BAD(raw_shard("trunc.bin", 20240520, 1, 20, 1024, 10, tok, 0),
               0, "1064 bytes", "1044 bytes");
    EXPECT_BAD(raw_shard("trunc1.bin", 20240520, 1, 20, 1024, 19, tok, 1),
               0, "1063 bytes", "truncated");
    EXPECT_BAD(raw_shard("long.bin", 20240520, 1, 10, 1024, 20, tok, 0),
               0, "1044 bytes", "1064 bytes");
    EXPECT_BAD(raw_shard("odd.bin", 20240520, 1, 20, 1024, 20, tok, 1),
               0, "1065 bytes", "extra bytes");
    EXPECT_BAD(raw_shard("empty.bin", 0, 0, 0, 0, 0, NULL, 0), 0, "empty", "0 bytes");
    EXPECT_BAD(raw_shard("short.bin", 20240520, 1, 0, 100, 0, NULL, 0),
               0, "100 bytes", "1024-byte header");
    EXPECT_BAD(raw_shard("hdronly.bin", 20240520, 1, 0, 1024, 0, NULL, 0),
               0, "token count) is 0", NULL);
    EXPECT_BAD(raw_shard("hdronly5.bin", 20240520, 1, 5, 1024, 0, NULL, 0),
               0, "1034 bytes", "1024 bytes");
    EXPECT_BAD(raw_shard("negative.bin", 20240520, 1, 0xffffffffu, 1024, 0, NULL, 0),
               0, "is -1", NULL);

    const char *dir = in_scratch("adir");
    CHECK(mkdir(dir, 0755) == 0);
    EXPECT_BAD(dir, 0, "is a directory", NULL);
    EXPECT_BAD(in_scratch("no-such.bin"), 0, "No such file", NULL);
    const char *fifo = in_scratch("fifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    EXPECT_BAD(fifo, 0, "not a regular file", NULL);

    /* The uint32 format: its own magic and version, each named when wrong,
     * and 4 bytes a token in the size check. */
    uint32_t tok32[20];
    for (int i = 0; i < 20; i++) tok32[i] = 70000u + (uint32_t)i;
    EXPECT_BAD(raw_shard32("v32.bin", 20240801, 1, 20, 20, tok32, 0), 0, "version 1 is not "
               "supported with magic 20240801", "expected version 7 (uint32 ids)");
    EXPECT_BAD(raw_shard("v7of16.bin", 20240520, 7, 20, 1024, 20, tok, 0), 0,
               "version 7 is not supported with magic 20240520", "magic 20240801 version 7");
    EXPECT_BAD(raw_shard32("trunc32.bin", 20240801, 7, 20, 19, tok32, 0), 0,
               "1024 + 4 x 20 = 1104 bytes", "1100 bytes (truncated?)");
    EXPECT_BAD(raw_shard32("odd32.bin", 20240801, 7, 20, 20, tok32, 2), 0, "1106 bytes",
               "extra bytes");
    EXPECT_BAD(raw_shard("be32.bin", 0xa1d73401u, 7, 20, 1024, 20, tok, 0), 0, "big-endian",
               NULL);
    EXPECT_BAD(raw_shard32("magic32.bin", 20240802, 7, 20, 20, tok32, 0), 0, "20240802",
               "expected 20240520 (uint16 ids) or 20240801 (uint32 ids)");
    tok32[5] = 2147483648u;   /* no vocabulary holds it, checked or not */
    EXPECT_BAD(raw_shard32("id31.bin", 20240801, 7, 20, 20, tok32, 0), 0,
               "token 2147483648 at index 5", "above 2147483647");
    tok32[5] = 70005;
    const char *ok32 = raw_shard32("ok32.bin", 20240801, 7, 20, 20, tok32, 0);
    EXPECT_BAD(ok32, 70010, "token 70010 at index 10", "model.vocab = 70010");

    /* Token >= vocab: the first bad index and value, and the config key. */
    const char *ok = raw_shard("vocab.bin", 20240520, 1, 20, 1024, 20, tok, 0);
    EXPECT_BAD(ok, 100, "token 100 at index 10", "model.vocab = 100");
    EXPECT_BAD(ok, 100, "largest id in the shard is 190", "at least 191");
    EXPECT_BAD(ok, 190, "token 190 at index 19", NULL);
    hy_shard sh;
    hy_error err = {0};
    CHECK(hy_shard_open(&sh, ok, 191, &err) == HY_OK && sh.max_token == 190);
    hy_shard_close(&sh);
    CHECK(hy_shard_open(&sh, ok, -1, &err) == HY_OK);   /* no vocab check */
    hy_shard_close(&sh);

    hy_error_clear(&err);
    CHECK(hy_shard_open(&sh, "", 0, &err) == HY_ERR_INPUT && err.msg[0]);
    CHECK(hy_shard_open(&sh, NULL, 0, &err) == HY_ERR_INPUT);
}

static void test_write_errors(void) {
    uint16_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    hy_error err = {0};

    /* A missing directory: input error naming the path; nothing created. */
    const char *missing = in_scratch("no-dir/train.bin");
    CHECK(hy_shard_write(missing, tok, 8, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, missing) && strstr(err.msg, "does the directory exist"),
           "%s", err.msg);
    CHECK(file_size(missing) == -1 && file_size(in_scratch("no-dir")) == -1);
    CHECK(count_temps(scratch) == 0);

    /* Onto a directory: refused before writing anything. */
    const char *dir = in_scratch("wdir");
    CHECK(mkdir(dir, 0755) == 0);
    CHECK(hy_shard_write(dir, tok, 8, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "is a directory") != NULL);
    CHECK(hy_shard_write(in_scratch("wdir/"), tok, 8, &err) == HY_ERR_INPUT);
    CHECK(count_temps(scratch) == 0 && count_temps(dir) == 0);

    /* Sizes a shard cannot have. */
    const char *zero = in_scratch("zero.bin");
    CHECK(hy_shard_write(zero, tok, 0, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, zero) != NULL && file_size(zero) == -1);
    CHECK(hy_shard_write("", tok, 8, &err) == HY_ERR_INPUT);

    /* A failure in the middle of the write (the file-size limit makes
     * write() fail with EFBIG after 4 KiB): runtime error, no temp left,
     * and the existing file untouched. */
    const char *keep = in_scratch("keep.bin");
    CHECK(hy_shard_write(keep, tok, 8, &err) == HY_OK);
    enum { BIG = 100000 };
    uint16_t *big = calloc(BIG, sizeof *big);
    struct rlimit old, lim;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = 4096;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    hy_error_clear(&err);
    int st = hy_shard_write(keep, big, BIG, &err);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, was);
    CHECKF(st == HY_ERR_RUNTIME, "status %d: %s", st, err.msg);
    CHECKF(strstr(err.msg, keep) && strstr(err.msg, "cannot write"), "%s", err.msg);
    CHECK(count_temps(scratch) == 0);
    CHECK(file_size(keep) == 1024 + 16);
    hy_shard sh;
    CHECK(hy_shard_open(&sh, keep, 0, &err) == HY_OK && sh.n == 8 && hy_shard_id(&sh, 7) == 8);
    hy_shard_close(&sh);
    free(big);

    /* A read-only directory (meaningless as root, who may write anyway). */
    if (geteuid() != 0) {
        const char *ro = in_scratch("ro");
        CHECK(mkdir(ro, 0555) == 0);
        const char *p = in_scratch("ro/x.bin");
        CHECK(hy_shard_write(p, tok, 8, &err) == HY_ERR_INPUT);
        CHECK(strstr(err.msg, "Permission denied") != NULL && count_temps(ro) == 0);
        CHECK(chmod(ro, 0755) == 0);
    }
}

static void test_entropy(void) {
    hy_error err = {0};
    double u = -1, b = -1;
    uint16_t same[100], alt[100], four[400];
    for (int i = 0; i < 100; i++) same[i] = 7, alt[i] = (uint16_t)(i % 2);
    for (int i = 0; i < 400; i++) four[i] = (uint16_t)(i % 4);
    CHECK(hy_tokens_entropy(same, HY_SHARD_U16, 100, &u, &b, &err) == HY_OK);
    CHECK_NEAR(u, 0, 1e-12);
    CHECK_NEAR(b, 0, 1e-12);
    CHECK(hy_tokens_entropy(alt, HY_SHARD_U16, 100, &u, &b, &err) == HY_OK);
    CHECK_NEAR(u, 1, 1e-12);
    CHECK_NEAR(b, 0, 1e-12);
    CHECK(hy_tokens_entropy(four, HY_SHARD_U16, 400, &u, &b, &err) == HY_OK);
    CHECK_NEAR(u, 2, 1e-12);
    CHECK_NEAR(b, 0, 1e-12);
    /* All 16 pairs over {0..3} once each (a de Bruijn sequence plus its
     * wrap): next|prev is uniform, 2 bits. */
    uint16_t db[17] = {0, 0, 1, 0, 2, 0, 3, 1, 1, 2, 1, 3, 2, 2, 3, 3, 0};
    CHECK(hy_tokens_entropy(db, HY_SHARD_U16, 17, &u, &b, &err) == HY_OK);
    CHECK_NEAR(b, 2, 1e-12);
    /* The same ids as uint32: the same figures. */
    uint32_t db32[17];
    for (int i = 0; i < 17; i++) db32[i] = db[i];
    double u32 = -1, b32 = -1;
    CHECK(hy_tokens_entropy(db32, HY_SHARD_U32, 17, &u32, &b32, &err) == HY_OK);
    CHECK(u32 == u && b32 == b);
    /* One token: no pairs. Large ids: no bigram table; past 2^22 no
     * unigram table either. */
    CHECK(hy_tokens_entropy(same, HY_SHARD_U16, 1, &u, &b, &err) == HY_OK && u == 0 && isnan(b));
    uint16_t wide[3] = {1, 5000, 1};
    CHECK(hy_tokens_entropy(wide, HY_SHARD_U16, 3, &u, &b, &err) == HY_OK && isnan(b));
    CHECK_NEAR(u, log2(3) - 2.0 / 3, 1e-12);
    CHECK(hy_tokens_entropy(wide, HY_SHARD_U16, 3, &u, NULL, &err) == HY_OK);
    uint32_t wide32[3] = {70000, 128255, 70000}, huge[3] = {1, 1u << 22, 1};
    CHECK(hy_tokens_entropy(wide32, HY_SHARD_U32, 3, &u, &b, &err) == HY_OK && isnan(b));
    CHECK_NEAR(u, log2(3) - 2.0 / 3, 1e-12);
    CHECK(hy_tokens_entropy(huge, HY_SHARD_U32, 3, &u, &b, &err) == HY_OK && isnan(u) && isnan(b));
}

static void test_synth(void) {
    enum { N = 1000000, V = 512 };
    hy_error err = {0};
    uint16_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);

    /* Deterministic, and seed and stream both matter. */
    CHECK(hy_synth_tokens(a, N, V, 1, 0, &err) == HY_OK);
    CHECK(hy_synth_tokens(b, N, V, 1, 0, &err) == HY_OK);
    CHECK(memcmp(a, b, N * sizeof *a) == 0);
    /* The bytes are a contract: pinned, so a change to the generator shows
     * up here (update these only on purpose; it changes every shard). */
    uint64_t h = fnv1a(a, N);
    CHECKF(h == UINT64_C(0xf1d583a9449f5669) && a[0] == 502 && a[1] == 251 &&
           a[2] == 183 && a[3] == 221, "seed 1 vocab 512: fnv1a %#llx; first "
           "tokens %u %u %u %u", (unsigned long long)h, a[0], a[1], a[2], a[3]);
    CHECK(hy_synth_tokens(b, N, V, 2, 0, &err) == HY_OK);
    CHECK(memcmp(a, b, N * sizeof *a) != 0);
    CHECK(hy_synth_tokens(b, N, V, 1, 1, &err) == HY_OK);
    CHECK(memcmp(a, b, N * sizeof *a) != 0);
    /* A prefix is the same as a shorter run. */
    CHECK(hy_synth_tokens(b, 1000, V, 1, 0, &err) == HY_OK);
    CHECK(memcmp(a, b, 1000 * sizeof *a) == 0);

    /* Two files from one seed: identical bytes. */
    const char *f1 = in_scratch("s1.bin"), *f2 = in_scratch("s2.bin");
    CHECK(hy_shard_write(f1, a, N, &err) == HY_OK);
    CHECK(hy_synth_tokens(b, N, V, 1, 0, &err) == HY_OK);
    CHECK(hy_shard_write(f2, b, N, &err) == HY_OK);
    hy_shard s1, s2;
    CHECK(hy_shard_open(&s1, f1, V, &err) == HY_OK);
    CHECK(hy_shard_open(&s2, f2, V, &err) == HY_OK);
    CHECK(s1.n == N && s2.n == N && memcmp(s1.ids, s2.ids, N * 2) == 0);
    CHECK(s1.max_token == V - 1);
    hy_shard_close(&s1);
    hy_shard_close(&s2);

    /* Learnable: measured H(next|prev) far below log2 V, and close to the
     * documented numbers; the source's rate estimate lower still. */
    double u, bi;
    CHECK(hy_tokens_entropy(a, HY_SHARD_U16, N, &u, &bi, &err) == HY_OK);
    double uniform = log2(V), rate = hy_synth_entropy_bits(V);
    printf("synth vocab %d, 1M tokens: unigram %.3f, next|prev %.3f, source "
           "rate %.3f, uniform %.3f bits/token\n", V, u, bi, rate, uniform);
    CHECKF(bi < 0.5 * uniform, "H(next|prev) %.3f vs log2 V %.3f", bi, uniform);
    CHECKF(bi > 1.5 && bi < 2.6, "H(next|prev) %.3f (documented: about 2.0-2.1)", bi);
    CHECKF(u > 8 && u < uniform, "unigram %.3f", u);
    CHECKF(rate > 1.4 && rate < 1.7 && rate < bi, "rate %.3f", rate);

    /* Validation text (stream 1) is the same language: for nearly every
     * token, its most frequent successor agrees with the training text's. */
    enum { NV = 200000 };
    CHECK(hy_synth_tokens(b, NV, V, 1, 1, &err) == HY_OK);
    uint32_t *ca = calloc((size_t)V * V, sizeof *ca), *cb = calloc((size_t)V * V, sizeof *cb);
    for (size_t i = 0; i + 1 < N; i++) ca[a[i] * V + a[i + 1]]++;
    for (size_t i = 0; i + 1 < NV; i++) cb[b[i] * V + b[i + 1]]++;
    int agree = 0, seen = 0;
    for (int t = 0; t < V; t++) {
        int ma = 0, mb = 0, rows = 0;
        for (int s = 0; s < V; s++) {
            if (ca[t * V + s] > ca[t * V + ma]) ma = s;
            if (cb[t * V + s] > cb[t * V + mb]) mb = s;
            rows += (int)cb[t * V + s];
        }
        if (rows < 50) continue;
        seen++;
        agree += ma == mb;
    }
    CHECKF(seen > V / 2 && agree > 0.9 * seen, "argmax successors agree for "
           "%d of %d tokens", agree, seen);
    free(ca);
    free(cb);

    /* Every vocab: ids in range, and all of a small vocab used. */
    int vocabs[] = {2, 3, 17, 50257, 65536};
    for (int k = 0; k < NELEM(vocabs); k++) {
        CHECK(hy_synth_tokens(b, 200000, vocabs[k], 7, 0, &err) == HY_OK);
        int max = 0, bad = 0;
        for (int i = 0; i < 200000; i++) {
            max = b[i] > max ? b[i] : max;
            bad += b[i] >= vocabs[k];
        }
        CHECKF(bad == 0, "vocab %d: %d ids out of range", vocabs[k], bad);
        if (vocabs[k] < 100) CHECK(max == vocabs[k] - 1);
        CHECK(hy_synth_entropy_bits(vocabs[k]) <= log2(vocabs[k]) + 1e-12);
    }
    CHECK(hy_synth_tokens(b, 10, 1, 1, 0, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "65536") != NULL);
    CHECK(hy_synth_tokens(b, 10, 65537, 1, 0, &err) == HY_ERR_INPUT);
    CHECK(hy_synth_tokens(b, 0, 512, 1, 0, &err) == HY_ERR_INPUT);

    /* uint32 ids: the same ids as uint16 at a vocabulary both hold; past
     * 65536, ids above 65535 and below the vocabulary. */
    enum { N32 = 200000 };
    uint32_t *w = malloc(N32 * sizeof *w);
    CHECK(hy_synth_ids(w, HY_SHARD_U32, N32, V, 1, 0, &err) == HY_OK);
    int same = 1;
    for (int i = 0; i < N32; i++) same &= w[i] == a[i];
    CHECK(same);
    CHECK(hy_synth_ids(w, HY_SHARD_U32, N32, 128256, 3, 0, &err) == HY_OK);
    int above = 0, out = 0;
    for (int i = 0; i < N32; i++) {
        above += w[i] > 65535;
        out += w[i] >= 128256;
    }
    CHECKF(above > N32 / 4 && out == 0, "%d ids above 65535, %d out of range", above, out);
    CHECK(hy_synth_ids(w, HY_SHARD_U32, 10, 2147483647, 3, 0, &err) == HY_OK);
    CHECK(hy_synth_ids(w, HY_SHARD_U32, 10, 1, 3, 0, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "2147483647") != NULL);
    CHECK(hy_synth_ids(w, HY_SHARD_U16, 10, 65537, 3, 0, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "u16") != NULL);
    free(w);
    free(a);
    free(b);
}

/* The CLI entry points as a library (the shell test drives the binary). */
/* BERT masking: deterministic in (seed, step, micro-batch), these exact
 * bytes (a hash pinned from the runtime's masking before it moved here),
 * and the 15% / 80-10-10 proportions over many tokens. */
static uint64_t mask_hash(const int *in, const int *tg, int n) {
    uint64_t h = 1469598103934665603ull;   /* FNV-1a over the (input, target) pairs */
    for (int i = 0; i < n; i++) {
        h = (h ^ (uint32_t)in[i]) * 1099511628211ull;
        h = (h ^ (uint32_t)tg[i]) * 1099511628211ull;
    }
    return h;
}

static void test_mask(void) {
    int in[256], tg[256], again[256], tg2[256];
    for (int i = 0; i < 256; i++) in[i] = again[i] = (i * 7) % 61;
    hy_mask_tokens(in, tg, 256, 64, 63, 1234, 3, 4, 2);
    CHECKF(mask_hash(in, tg, 256) == 0x7ed1501e045931f2ull, "mask hash %llx",
           (unsigned long long)mask_hash(in, tg, 256));
    int chosen = 0, masked = 0, kept = 0;
    for (int i = 0; i < 256; i++) {
        chosen += tg[i] != -1;
        masked += in[i] == 63;
        kept += tg[i] != -1 && in[i] == tg[i];
        if (tg[i] != -1) CHECK(tg[i] == (i * 7) % 61);   /* the target is the original */
        else CHECK(in[i] == (i * 7) % 61);               /* unchosen stay as they were */
    }
    CHECK(chosen == 34 && masked == 27 && kept >= 1);
    /* Another micro-batch, step or seed masks differently. */
    hy_mask_tokens(again, tg2, 256, 64, 63, 1234, 3, 4, 3);
    CHECK(memcmp(tg, tg2, sizeof tg) != 0);
    /* The proportions, over 200 000 tokens of one micro-batch. */
    int n = 200000;
    int *big = malloc(2 * (size_t)n * sizeof(int)), *btg = big + n;
    if (!big) { CHECK(0); return; }
    for (int i = 0; i < n; i++) big[i] = i % 500;
    /* A mask id other than the last (model.mask_token): no input token is 505. */
    hy_mask_tokens(big, btg, n, 512, 505, 9, 1, 8, 0);
    int c = 0, mk = 0, same = 0;
    for (int i = 0; i < n; i++) {
        if (btg[i] == -1) continue;
        c++;
        mk += big[i] == 505;
        same += big[i] == btg[i];
    }
    CHECKF(fabs(c / (double)n - 0.15) < 0.005, "%d of %d chosen", c, n);
    CHECKF(fabs(mk / (double)c - 0.8) < 0.01, "%d of %d chosen masked", mk, c);
    /* kept: the 10% that stay, plus the random draws that hit their own token */
    CHECKF(fabs(same / (double)c - 0.1) < 0.01, "%d of %d chosen kept", same, c);
    free(big);
}

static void test_commands(void) {
    hy_error err = {0};
    const char *tr = in_scratch("cmd_train.bin"), *va = in_scratch("cmd_val.bin");
    cli_data_synth_request rq = {tr, 5000, va, 700, 64, 3, 0};
    char buf[4096] = {0};
    FILE *out = fmemopen(buf, sizeof buf - 1, "w");
    CHECK(cli_data_synth(&rq, out, &err) == HY_OK);
    fclose(out);
    CHECK(strstr(buf, "5000 tokens") && strstr(buf, "700 tokens") && strstr(buf, "bits/token"));
    CHECK(file_size(tr) == 1024 + 10000 && file_size(va) == 1024 + 1400);
    rq.val_out = tr;
    CHECK(cli_data_synth(&rq, stdout, &err) == HY_ERR_INPUT);
    rq.val_out = NULL;
    rq.tokens = 0;
    CHECK(cli_data_synth(&rq, stdout, &err) == HY_ERR_INPUT);

    memset(buf, 0, sizeof buf);
    out = fmemopen(buf, sizeof buf - 1, "w");
    CHECK(cli_data_info(va, 64, 1, out, &err) == HY_OK);
    fclose(out);
    CHECKF(strstr(buf, "\"tokens\":700") && strstr(buf, "\"bytes\":2424") &&
           strstr(buf, "\"vocab\":64") && strstr(buf, "\"bigram_bits\":"), "%s", buf);
    CHECK(cli_data_info(va, 10, 0, stdout, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "model.vocab = 10") != NULL);
    CHECK(cli_data_info(in_scratch("nope.bin"), 0, 0, stdout, &err) == HY_ERR_INPUT);

    /* The format: u32 when asked, or when the vocabulary needs it; u16
     * refused for a vocabulary it cannot hold. */
    const char *w = in_scratch("cmd_u32.bin");
    cli_data_synth_request r32 = {w, 3000, NULL, 0, 64, 3, HY_SHARD_U32};
    out = fmemopen(buf, sizeof buf - 1, "w");
    CHECK(cli_data_synth(&r32, out, &err) == HY_OK);
    fclose(out);
    CHECKF(strstr(buf, "3000 tokens (13024 bytes, u32)"), "%s", buf);
    CHECK(file_size(w) == 1024 + 4 * 3000);
    memset(buf, 0, sizeof buf);
    out = fmemopen(buf, sizeof buf - 1, "w");
    CHECK(cli_data_info(w, 0, 1, out, &err) == HY_OK);
    fclose(out);
    CHECKF(strstr(buf, "\"format\":\"u32\"") && strstr(buf, "\"tokens\":3000"), "%s", buf);
    r32.format = 0;
    r32.vocab = 200000;
    CHECK(cli_data_synth(&r32, stdout, &err) == HY_OK && file_size(w) == 1024 + 4 * 3000);
    r32.format = HY_SHARD_U16;
    CHECK(cli_data_synth(&r32, stdout, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "--format u32") != NULL);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/hy_test_data.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(scratch)) {
        perror(scratch);
        return 1;
    }
    test_round_trip();
    test_u32();
    test_batches();
    test_datasets();
    test_expand();
    test_bad_shards();
    test_write_errors();
    test_entropy();
    test_synth();
    test_mask();
    test_commands();
    remove_tree(scratch);
    return TEST_END("test_data");
}
