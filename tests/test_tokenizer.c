/*
 * test_tokenizer.c — lib/tokenizer.h against Hugging Face `tokenizers`.
 *
 * tests/fixtures/tokenizer-bpe.json is a tiny byte-level BPE tokenizer and
 * tokenizer-cases.json the ids the library gives a few texts with it
 * (both made once by tests/fixtures/gen_tokenizer.py). Checked: encoding
 * each text gives the library's ids exactly (prose, contractions, runs of
 * spaces, tabs and new lines, digits, accented letters, an added token in
 * the middle, bytes never merged); decoding them gives the text back byte
 * for byte; every one of the 256 bytes round-trips; and files that are
 * not byte-level BPE, or not readable, are refused with HY_ERR_INPUT
 * naming what is wrong, as is encoding with a tokenizer whose
 * normalizer or pre-tokenizer is not applied here.
 *
 * Run from the repository root (it reads tests/fixtures/).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "tokenizer.h"

static const char *const FIX = "tests/fixtures/tokenizer-bpe.json";
static const char *const CASES = "tests/fixtures/tokenizer-cases.json";

/* The text of ids, decoded token by token, into a malloc'd string. */
static char *decode_all(const hy_tokenizer *tk, const int *ids, int n) {
    size_t cap = 16, used = 0;
    char *out = malloc(cap);
    for (int i = 0; out && i < n; i++) {
        const char *b;
        size_t len;
        hy_error err;
        if (hy_tokenizer_decode(tk, ids[i], &b, &len, &err) != HY_OK) {
            free(out);
            return NULL;
        }
        while (used + len + 1 > cap) out = realloc(out, cap *= 2);
        memcpy(out + used, b, len);
        used += len;
    }
    if (out) out[used] = '\0';
    return out;
}

static void test_cases(const hy_tokenizer *tk) {
    json_error_t jerr;
    json_t *root = json_load_file(CASES, 0, &jerr);
    CHECKF(root != NULL, "%s: %s", CASES, jerr.text);
    if (!root) return;
    CHECK(hy_tokenizer_size(tk) == json_integer_value(json_object_get(root, "vocab_size")));
    json_t *cases = json_object_get(root, "cases"), *c;
    size_t i;
    CHECK(json_array_size(cases) >= 8);
    json_array_foreach(cases, i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        json_t *want = json_object_get(c, "ids");
        int *ids = NULL, n = 0;
        hy_error err;
        int rc = hy_tokenizer_encode(tk, text, &ids, &n, &err);
        CHECKF(rc == HY_OK, "encode case %zu: %s", i, err.msg);
        int same = rc == HY_OK && (size_t)n == json_array_size(want);
        for (int k = 0; same && k < n; k++)
            same = ids[k] == json_integer_value(json_array_get(want, (size_t)k));
        CHECKF(same, "case %zu ('%s'): %d ids, not the library's %zu", i, text, n,
               json_array_size(want));
        char *back = decode_all(tk, ids, n);
        CHECKF(back && !strcmp(back, text), "case %zu decodes to '%s'", i, back ? back : "(fail)");
        free(back);
        free(ids);
    }
    json_decref(root);
}

/* Every byte, alone and in a run, encodes to ids that decode to it. */
static void test_all_bytes(const hy_tokenizer *tk) {
    char text[257];
    for (int b = 1; b < 256; b++) text[b - 1] = (char)b;
    text[255] = '\0';
    int *ids = NULL, n = 0;
    hy_error err;
    CHECK(hy_tokenizer_encode(tk, text, &ids, &n, &err) == HY_OK);
    char *back = decode_all(tk, ids, n);
    CHECK(back && !strcmp(back, text));
    free(back);
    free(ids);
    /* The empty text has no ids. */
    CHECK(hy_tokenizer_encode(tk, "", &ids, &n, &err) == HY_OK && n == 0);
    free(ids);
    /* An id it does not have is refused, naming it. */
    const char *b;
    size_t len;
    CHECK(hy_tokenizer_decode(tk, hy_tokenizer_size(tk), &b, &len, &err) == HY_ERR_INPUT);
    CHECK(hy_tokenizer_decode(tk, -1, &b, &len, &err) == HY_ERR_INPUT);
}

/* Writes text to a scratch file and loads it; the status, and err. */
static int load_text(const char *text, hy_tokenizer **tk, hy_error *err) {
    char path[] = "/tmp/hy_test_tokenizer.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    int rc = hy_tokenizer_load(tk, path, err);
    unlink(path);
    return rc;
}

static void test_refused(void) {
    hy_tokenizer *tk = NULL;
    hy_error err;
    CHECK(hy_tokenizer_load(&tk, "/nonexistent/tokenizer.json", &err) == HY_ERR_INPUT && !tk);
    CHECK(strstr(err.msg, "/nonexistent/tokenizer.json") != NULL);
    CHECK(load_text("{ not json", &tk, &err) == HY_ERR_INPUT && !tk);
    CHECK(load_text("[1, 2]", &tk, &err) == HY_ERR_INPUT && strstr(err.msg, "not a JSON object"));
    CHECK(load_text("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", &tk, &err) ==
              HY_ERR_INPUT && strstr(err.msg, "WordPiece"));
    CHECK(load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                    " \"decoder\": {\"type\": \"Metaspace\"}}", &tk, &err) == HY_ERR_INPUT &&
          strstr(err.msg, "Metaspace"));
    CHECK(load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []},"
                    " \"decoder\": {\"type\": \"ByteLevel\"}}", &tk, &err) == HY_ERR_INPUT &&
          strstr(err.msg, "model.vocab"));
    CHECK(load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [7]},"
                    " \"decoder\": {\"type\": \"ByteLevel\"}}", &tk, &err) == HY_ERR_INPUT &&
          strstr(err.msg, "model.merges[0]"));
    /* Ids past 10^8 are refused, not allocated for. */
    CHECK(load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1099511627776}, \"merges\":"
                    " []}, \"decoder\": {\"type\": \"ByteLevel\"}}", &tk, &err) == HY_ERR_INPUT &&
          strstr(err.msg, "model.vocab"));
    CHECK(load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                    " \"decoder\": {\"type\": \"ByteLevel\"}, \"added_tokens\": [{\"id\":"
                    " 4000000000, \"content\": \"x\"}]}", &tk, &err) == HY_ERR_INPUT &&
          strstr(err.msg, "added_tokens[0]"));
    /* A character outside the byte alphabet: not a byte-level vocabulary. */
    CHECK(load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\\u2603\": 0}, \"merges\": []},"
                    " \"decoder\": {\"type\": \"ByteLevel\"}}", &tk, &err) == HY_ERR_INPUT &&
          strstr(err.msg, "byte alphabet"));
    /* Decodes, but will not encode: a normalizer is not applied here. */
    CHECK(load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a a\"]},"
                    " \"decoder\": {\"type\": \"ByteLevel\"}, \"normalizer\": {\"type\": \"NFC\"},"
                    " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", &tk, &err) == HY_OK);
    int *ids = NULL, n = 0;
    const char *b;
    size_t len;
    CHECK(tk && hy_tokenizer_decode(tk, 0, &b, &len, &err) == HY_OK && len == 1 && b[0] == 'a');
    CHECK(tk && hy_tokenizer_encode(tk, "a", &ids, &n, &err) == HY_ERR_INPUT &&
          strstr(err.msg, "normalizer") && !ids);
    hy_tokenizer_free(tk);
    tk = NULL;
    CHECK(load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                    " \"decoder\": {\"type\": \"ByteLevel\"}, \"pre_tokenizer\": {\"type\":"
                    " \"Whitespace\"}}", &tk, &err) == HY_OK);
    CHECK(tk && hy_tokenizer_encode(tk, "a", &ids, &n, &err) == HY_ERR_INPUT &&
          strstr(err.msg, "pre_tokenizer"));
    hy_tokenizer_free(tk);
}

int main(void) {
    hy_tokenizer *tk = NULL;
    hy_error err;
    int rc = hy_tokenizer_load(&tk, FIX, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (rc == HY_OK) {
        test_cases(tk);
        test_all_bytes(tk);
    }
    hy_tokenizer_free(tk);
    test_refused();
    return TEST_END("tokenizer");
}
