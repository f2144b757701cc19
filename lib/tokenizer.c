/*
 * tokenizer.c — see tokenizer.h.
 *
 * GPT-2's byte ↔ unicode map: the bytes that are printable characters
 * ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68
 * (control characters, space, ...) take the code points 256, 257, ... in
 * byte order. A vocabulary string is a sequence of those characters, so
 * a token's bytes are its characters mapped back; a merge key is "a b"
 * (no mapped character is an ASCII space, so the space separates).
 *
 * Lookups (string → id, pair → rank) are one open-addressing hash table
 * each, FNV-1a over the key's bytes.
 */
#include "tokenizer.h"

#include <assert.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* A string → int table */

typedef struct {
    char *key;     /* NUL-terminated, owned; NULL: an empty slot */
    int value;
} tk_slot;

typedef struct {
    tk_slot *slots;
    size_t cap;    /* a power of two, at least twice the entries */
} tk_table;

static uint64_t tk_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int tk_table_init(tk_table *t, size_t entries) {
    t->cap = 16;
    while (t->cap < 2 * entries) t->cap *= 2;
    t->slots = calloc(t->cap, sizeof *t->slots);
    return t->slots ? 0 : -1;
}

static void tk_table_free(tk_table *t) {
    for (size_t i = 0; t->slots && i < t->cap; i++) free(t->slots[i].key);
    free(t->slots);
    t->slots = NULL;
}

/* The slot of key s[0..n): its entry, or the empty slot it would take. */
static tk_slot *tk_find(const tk_table *t, const char *s, size_t n) {
    size_t i = tk_hash(s, n) & (t->cap - 1);
    while (t->slots[i].key && (strlen(t->slots[i].key) != n || memcmp(t->slots[i].key, s, n)))
        i = (i + 1) & (t->cap - 1);
    return &t->slots[i];
}

/* Adds key → value; a key already there keeps its first value. */
static int tk_put(tk_table *t, const char *key, int value) {
    tk_slot *sl = tk_find(t, key, strlen(key));
    if (sl->key) return 0;
    sl->key = strdup(key);
    sl->value = value;
    return sl->key ? 0 : -1;
}

/* The value of s[0..n), or -1. */
static int tk_get(const tk_table *t, const char *s, size_t n) {
    const tk_slot *sl = tk_find(t, s, n);
    return sl->key ? sl->value : -1;
}

/* ------------------------------------------------------------------------ */
/* The tokenizer */

typedef struct {
    char *bytes;   /* NULL: no token has this id */
    size_t len;
} tk_token;

struct hy_tokenizer {
    int size;               /* ids 0 .. size-1 */
    tk_token *tokens;       /* [size] */
    tk_table vocab;         /* model.vocab: mapped string → id */
    tk_table merges;        /* "a b" → rank */
    char **added;           /* added tokens' texts, matched before pre-tokenization */
    int *added_id, n_added;
    const char *no_encode;  /* why encoding is refused; NULL: it is not */
    int prefix_space;       /* ByteLevel's add_prefix_space */
    char path[512];
};

/* byte → code point, and code point (< 512) → byte + 1 (0: none). */
static int tk_b2u[256];
static int tk_u2b[512];

static void tk_maps(void) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        tk_b2u[b] = printable ? b : 256 + n++;
        tk_u2b[tk_b2u[b]] = b + 1;
    }
    assert(n == 68);
}

/* The next UTF-8 character of s at *i (advanced), or -1 when malformed. */
static int tk_utf8(const char *s, size_t *i) {
    const unsigned char *p = (const unsigned char *)s + *i;
    int cp, more;
    if (p[0] < 0x80) { cp = p[0]; more = 0; }
    else if ((p[0] & 0xE0) == 0xC0) { cp = p[0] & 0x1F; more = 1; }
    else if ((p[0] & 0xF0) == 0xE0) { cp = p[0] & 0x0F; more = 2; }
    else if ((p[0] & 0xF8) == 0xF0) { cp = p[0] & 0x07; more = 3; }
    else return -1;
    for (int k = 1; k <= more; k++) {
        if ((p[k] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (p[k] & 0x3F);
    }
    *i += (size_t)more + 1;
    return cp;
}

/* A vocabulary string's bytes (each character through the map back), or
 * -1 when a character is not one of the 256. */
static int tk_unmap(const char *s, char *out, size_t *len) {
    size_t i = 0, n = 0;
    while (s[i]) {
        int cp = tk_utf8(s, &i);
        if (cp < 0 || cp >= 512 || !tk_u2b[cp]) return -1;
        out[n++] = (char)(tk_u2b[cp] - 1);
    }
    *len = n;
    return 0;
}

static int tk_set(hy_tokenizer *tk, int id, const char *bytes, size_t len) {
    free(tk->tokens[id].bytes);
    tk->tokens[id].bytes = malloc(len + 1);
    if (!tk->tokens[id].bytes) return -1;
    memcpy(tk->tokens[id].bytes, bytes, len);
    tk->tokens[id].len = len;
    return 0;
}

static const char *tk_type(json_t *obj) {
    const char *t = json_string_value(json_object_get(obj, "type"));
    return t ? t : "(none)";
}

/* What must hold for decoding: a BPE model with a vocabulary and a
 * byte-level decoder; and what decides whether encoding can be done. */
static int tk_check(hy_tokenizer *tk, json_t *root, hy_error *err) {
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        return hy_fail(err, HY_ERR_INPUT, "%s: no \"model\" object: not a tokenizer.json",
                       tk->path);
    if (strcmp(tk_type(model), "BPE") != 0)
        return hy_fail(err, HY_ERR_INPUT, "%s: model.type is %s, not \"BPE\": only byte-level "
                       "BPE tokenizers (GPT-2's kind) are read", tk->path, tk_type(model));
    if (!json_is_object(json_object_get(model, "vocab")))
        return hy_fail(err, HY_ERR_INPUT, "%s: model.vocab is not an object of token → id",
                       tk->path);
    if (!json_is_array(json_object_get(model, "merges")))
        return hy_fail(err, HY_ERR_INPUT, "%s: model.merges is not an array", tk->path);
    json_t *dec = json_object_get(root, "decoder");
    if (!json_is_object(dec) || strcmp(tk_type(dec), "ByteLevel") != 0)
        return hy_fail(err, HY_ERR_INPUT, "%s: decoder.type is %s, not \"ByteLevel\": only "
                       "byte-level BPE tokenizers (GPT-2's kind) are read", tk->path,
                       json_is_object(dec) ? tk_type(dec) : "(none)");
    json_t *norm = json_object_get(root, "normalizer");
    json_t *pre = json_object_get(root, "pre_tokenizer");
    if (norm && !json_is_null(norm))
        tk->no_encode = "it has a normalizer (normalizer.type), which is not applied here";
    else if (!json_is_object(pre) || strcmp(tk_type(pre), "ByteLevel") != 0)
        tk->no_encode = "its pre_tokenizer is not ByteLevel (GPT-2's pattern is the one applied "
                        "here)";
    else if (json_is_false(json_object_get(pre, "use_regex")))
        tk->no_encode = "its ByteLevel pre_tokenizer has use_regex false";
    if (json_is_object(pre))
        tk->prefix_space = json_is_true(json_object_get(pre, "add_prefix_space"));
    return HY_OK;
}

/* The most ids a tokenizer may have: 10^8, 2000 times GPT-2's. */
#define TK_MAX_ID 100000000

/* One past the largest of size - 1 and id (an id in 0 .. TK_MAX_ID:
 * else size, and the readers below refuse it). */
static int tk_past(int size, json_t *id) {
    if (!json_is_integer(id) || json_integer_value(id) < size || json_integer_value(id) > TK_MAX_ID)
        return size;
    return (int)json_integer_value(id) + 1;
}

/* The largest id of the vocabulary and the added tokens, + 1. */
static int tk_size(json_t *vocab, json_t *added) {
    int size = 0;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) size = tk_past(size, v);
    size_t i;
    json_array_foreach(added, i, v) size = tk_past(size, json_object_get(v, "id"));
    return size;
}

static int tk_read_vocab(hy_tokenizer *tk, json_t *vocab, hy_error *err) {
    const char *key;
    json_t *v;
    char *bytes = NULL;
    size_t cap = 0, len;
    if (tk_table_init(&tk->vocab, json_object_size(vocab)))
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory reading %s", tk->path);
    json_object_foreach(vocab, key, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id > TK_MAX_ID) {
            free(bytes);
            return hy_fail(err, HY_ERR_INPUT, "%s: model.vocab[\"%.40s\"] is not a token id "
                           "(a whole number >= 0)", tk->path, key);
        }
        if (strlen(key) + 1 > cap) {
            cap = 2 * strlen(key) + 16;
            free(bytes);
            bytes = malloc(cap);
            if (!bytes) return hy_fail(err, HY_ERR_RUNTIME, "out of memory reading %s", tk->path);
        }
        if (tk_unmap(key, bytes, &len)) {
            free(bytes);
            return hy_fail(err, HY_ERR_INPUT, "%s: model.vocab[\"%.40s\"] has a character "
                           "outside GPT-2's byte alphabet: not a byte-level vocabulary",
                           tk->path, key);
        }
        if (tk_set(tk, (int)id, bytes, len) || tk_put(&tk->vocab, key, (int)id)) {
            free(bytes);
            return hy_fail(err, HY_ERR_RUNTIME, "out of memory reading %s", tk->path);
        }
    }
    free(bytes);
    return HY_OK;
}

static int tk_read_merges(hy_tokenizer *tk, json_t *merges, hy_error *err) {
    size_t i;
    json_t *m;
    char key[1024];
    if (tk_table_init(&tk->merges, json_array_size(merges)))
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory reading %s", tk->path);
    json_array_foreach(merges, i, m) {
        /* "a b", or (tokenizers 0.20 and later) ["a", "b"] */
        const char *a = json_string_value(json_array_get(m, 0));
        const char *b = json_string_value(json_array_get(m, 1));
        int n = -1;
        if (json_is_string(m) && strchr(json_string_value(m), ' '))
            n = snprintf(key, sizeof key, "%s", json_string_value(m));
        else if (json_is_array(m) && json_array_size(m) == 2 && a && b)
            n = snprintf(key, sizeof key, "%s %s", a, b);
        if (n < 0 || (size_t)n >= sizeof key)
            return hy_fail(err, HY_ERR_INPUT, "%s: model.merges[%zu] is not a pair (\"a b\" or "
                           "[\"a\", \"b\"] of at most %zu bytes)", tk->path, i, sizeof key - 2);
        if (tk_put(&tk->merges, key, (int)i))
            return hy_fail(err, HY_ERR_RUNTIME, "out of memory reading %s", tk->path);
    }
    return HY_OK;
}

/* Added tokens decode as their text and are matched in a prompt as it. */
static int tk_read_added(hy_tokenizer *tk, json_t *added, hy_error *err) {
    size_t i, n = json_array_size(added);
    json_t *a;
    tk->added = calloc(n + 1, sizeof *tk->added);
    tk->added_id = calloc(n + 1, sizeof *tk->added_id);
    if (!tk->added || !tk->added_id)
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory reading %s", tk->path);
    json_array_foreach(added, i, a) {
        json_t *id = json_object_get(a, "id");
        const char *text = json_string_value(json_object_get(a, "content"));
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) > TK_MAX_ID || !text || !*text)
            return hy_fail(err, HY_ERR_INPUT, "%s: added_tokens[%zu] lacks an id in 0 .. %d or "
                           "a non-empty content", tk->path, i, TK_MAX_ID);
        int k = tk->n_added++;
        tk->added[k] = strdup(text);
        tk->added_id[k] = (int)json_integer_value(id);
        if (!tk->added[k] || tk_set(tk, tk->added_id[k], text, strlen(text)))
            return hy_fail(err, HY_ERR_RUNTIME, "out of memory reading %s", tk->path);
    }
    return HY_OK;
}

int hy_tokenizer_load(hy_tokenizer **out, const char *path, hy_error *err) {
    *out = NULL;
    static pthread_once_t maps_once = PTHREAD_ONCE_INIT;
    pthread_once(&maps_once, tk_maps);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        return hy_fail(err, HY_ERR_INPUT, "--tokenizer %s: %s (line %d)", path, jerr.text,
                       jerr.line);
    hy_tokenizer *tk = calloc(1, sizeof *tk);
    int rc = tk ? HY_OK : hy_fail(err, HY_ERR_RUNTIME, "out of memory reading %s", path);
    if (!rc) {
        snprintf(tk->path, sizeof tk->path, "%s", path);
        rc = json_is_object(root) ? tk_check(tk, root, err)
                                  : hy_fail(err, HY_ERR_INPUT, "%s: not a JSON object: not a "
                                            "tokenizer.json", path);
    }
    json_t *model = json_object_get(root, "model"), *added = json_object_get(root, "added_tokens");
    json_t *vocab = json_object_get(model, "vocab");
    if (!rc && added && !json_is_array(added))
        rc = hy_fail(err, HY_ERR_INPUT, "%s: added_tokens is not an array", path);
    if (!rc) {
        tk->size = tk_size(vocab, added);
        tk->tokens = calloc(tk->size ? (size_t)tk->size : 1, sizeof *tk->tokens);
        if (!tk->tokens) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory reading %s", path);
    }
    if (!rc) rc = tk_read_vocab(tk, vocab, err);
    if (!rc) rc = tk_read_merges(tk, json_object_get(model, "merges"), err);
    if (!rc) rc = tk_read_added(tk, added, err);
    json_decref(root);
    if (rc) hy_tokenizer_free(tk);
    else *out = tk;
    return rc;
}

void hy_tokenizer_free(hy_tokenizer *tk) {
    if (!tk) return;
    for (int i = 0; tk->tokens && i < tk->size; i++) free(tk->tokens[i].bytes);
    free(tk->tokens);
    for (int i = 0; i < tk->n_added; i++) free(tk->added[i]);
    free(tk->added);
    free(tk->added_id);
    tk_table_free(&tk->vocab);
    tk_table_free(&tk->merges);
    free(tk);
}

int hy_tokenizer_size(const hy_tokenizer *tk) { return tk->size; }

int hy_tokenizer_decode(const hy_tokenizer *tk, int id, const char **bytes, size_t *len,
                        hy_error *err) {
    if (id < 0 || id >= tk->size || !tk->tokens[id].bytes)
        return hy_fail(err, HY_ERR_INPUT, "token %d is not in the tokenizer %s (%d ids); is it "
                       "the model's tokenizer?", id, tk->path, tk->size);
    *bytes = tk->tokens[id].bytes;
    *len = tk->tokens[id].len;
    return HY_OK;
}

/* ------------------------------------------------------------------------ */
/* Encoding */

typedef struct {
    int *ids;
    int n, cap;
} tk_ids;

static int tk_push(tk_ids *o, int id) {
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 64;
        int *ids = realloc(o->ids, (size_t)cap * sizeof *ids);
        if (!ids) return -1;
        o->ids = ids;
        o->cap = cap;
    }
    o->ids[o->n++] = id;
    return 0;
}

enum { TK_LETTER, TK_DIGIT, TK_SPACE, TK_OTHER };

/* tokenizer.h's classes: non-ASCII bytes (every byte of a multi-byte
 * character) are letters, so a character is never split. */
static int tk_class(unsigned char c) {
    if (c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return TK_LETTER;
    if (c >= '0' && c <= '9') return TK_DIGIT;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return TK_SPACE;
    return TK_OTHER;
}

/* The length of GPT-2's pattern's match at s[i..n). */
static size_t tk_piece(const char *s, size_t i, size_t n) {
    static const char *const contractions[] = { "'s", "'t", "'re", "'ve", "'m", "'ll", "'d" };
    for (size_t k = 0; k < sizeof contractions / sizeof *contractions; k++) {
        size_t len = strlen(contractions[k]);
        if (i + len <= n && !memcmp(s + i, contractions[k], len)) return len;
    }
    size_t j = i;
    if (s[j] == ' ' && j + 1 < n && tk_class((unsigned char)s[j + 1]) != TK_SPACE) j++;
    int cls = tk_class((unsigned char)s[j]);
    if (cls != TK_SPACE) {   /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+' */
        while (j < n && tk_class((unsigned char)s[j]) == cls) j++;
        return j - i;
    }
    while (j < n && tk_class((unsigned char)s[j]) == TK_SPACE) j++;
    /* '\s+(?!\S)': a run of spaces leaves its last to the word after it */
    if (j == n || j - i == 1) return j - i;
    return j - i - 1;
}

/* One pre-token's bytes → its characters → merges → ids. */
static int tk_bpe(const hy_tokenizer *tk, const char *piece, size_t len, tk_ids *o,
                  hy_error *err) {
    /* Each symbol: a run of the mapped string, at most 2 bytes a byte. */
    char *str = malloc(2 * len + 1), *key = malloc(2 * len + 2);
    size_t *start = malloc((len + 1) * sizeof *start);
    int rc = str && key && start ? HY_OK : hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    size_t used = 0, n = 0;
    for (size_t i = 0; !rc && i < len; i++) {
        int cp = tk_b2u[(unsigned char)piece[i]];
        start[n++] = used;
        if (cp < 0x80) str[used++] = (char)cp;
        else {
            str[used++] = (char)(0xC0 | (cp >> 6));
            str[used++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    if (!rc) start[n] = used;
    /* The pair of lowest rank merges first (the leftmost of equals),
     * until no adjacent pair is a merge. */
    while (!rc && n > 1) {
        int best = -1;
        size_t at = 0;
        for (size_t k = 0; k + 1 < n; k++) {
            size_t la = start[k + 1] - start[k], lb = start[k + 2] - start[k + 1];
            memcpy(key, str + start[k], la);
            key[la] = ' ';
            memcpy(key + la + 1, str + start[k + 1], lb);
            int r = tk_get(&tk->merges, key, la + lb + 1);
            if (r >= 0 && (best < 0 || r < best)) {
                best = r;
                at = k;
            }
        }
        if (best < 0) break;
        memmove(start + at + 1, start + at + 2, (n - at - 1) * sizeof *start);
        n--;
    }
    for (size_t k = 0; !rc && k < n; k++) {
        int id = tk_get(&tk->vocab, str + start[k], start[k + 1] - start[k]);
        if (id < 0)
            rc = hy_fail(err, HY_ERR_INPUT, "%s: '%.*s' (of the prompt) is in no token of the "
                         "vocabulary", tk->path, (int)len, piece);
        else if (tk_push(o, id))
            rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    }
    free(str);
    free(key);
    free(start);
    return rc;
}

/* Text between added tokens: pre-tokenized, each piece through BPE. */
static int tk_segment(const hy_tokenizer *tk, const char *s, size_t n, tk_ids *o, hy_error *err) {
    char *spaced = NULL;
    if (tk->prefix_space && n > 0 && s[0] != ' ') {
        spaced = malloc(n + 2);
        if (!spaced) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        spaced[0] = ' ';
        memcpy(spaced + 1, s, n);
        s = spaced;
        n++;
    }
    int rc = HY_OK;
    for (size_t i = 0; i < n && !rc;) {
        size_t len = tk_piece(s, i, n);
        assert(len > 0);
        rc = tk_bpe(tk, s + i, len, o, err);
        i += len;
    }
    free(spaced);
    return rc;
}

int hy_tokenizer_encode(const hy_tokenizer *tk, const char *text, int **ids, int *n,
                        hy_error *err) {
    *ids = NULL;
    *n = 0;
    if (tk->no_encode)
        return hy_fail(err, HY_ERR_INPUT, "%s cannot encode --prompt here: %s; give the prompt "
                       "as --prompt-tokens IDS", tk->path, tk->no_encode);
    tk_ids o = { 0 };
    size_t len = strlen(text), from = 0;
    int rc = HY_OK;
    for (size_t i = 0; i <= len && !rc;) {
        /* The longest added token's text that starts here. */
        int hit = -1;
        size_t hit_len = 0;
        for (int k = 0; k < tk->n_added && i < len; k++) {
            size_t l = strlen(tk->added[k]);
            if (l > hit_len && !strncmp(text + i, tk->added[k], l)) {
                hit = k;
                hit_len = l;
            }
        }
        if (hit < 0 && i < len) {
            i++;
            continue;
        }
        rc = tk_segment(tk, text + from, i - from, &o, err);
        if (!rc && hit >= 0 && tk_push(&o, tk->added_id[hit]))
            rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        if (hit < 0) break;
        i += hit_len;
        from = i;
    }
    if (rc) {
        free(o.ids);
        return rc;
    }
    *ids = o.ids;
    *n = o.n;
    return HY_OK;
}
