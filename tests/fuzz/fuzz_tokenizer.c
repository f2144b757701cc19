/*
 * fuzz_tokenizer.c — libFuzzer harness for the tokenizer.json reader and
 * its encoder (lib/tokenizer.c).
 *
 * Loads the input as a tokenizer.json (hy_tokenizer_load). A failure must
 * be an error with a message naming the file. A tokenizer that loads must
 * keep tokenizer.h's promises: its size is positive; decoding any id
 * below the size either gives bytes or refuses it as an input error (ids
 * between the vocabulary's may be missing), and ids outside are refused;
 * encoding a text made from the input's last bytes (so the mutations
 * reach the encoder too: added tokens' texts, multi-byte characters)
 * either fails as an input error or gives ids that all decode.
 */
#include "fuzz.h"
#include "tokenizer.h"

/* Decoding every id of a vocabulary of millions would only slow each run. */
#define MAX_DECODE 4096
#define TEXT_BYTES 64

static void check_decode_refused(const hy_tokenizer *tk, int id) {
    const char *bytes;
    size_t len;
    hy_error err;
    int rc = hy_tokenizer_decode(tk, id, &bytes, &len, &err);
    FUZZ_ASSERT(rc == HY_ERR_INPUT, "decode(%d) of a %d-token vocabulary gave %d", id,
                hy_tokenizer_size(tk), rc);
    fuzz_check_error(rc, &err, NULL);
}

static void encode(const hy_tokenizer *tk, const uint8_t *data, size_t size) {
    size_t take = size < TEXT_BYTES ? size : TEXT_BYTES;
    char text[TEXT_BYTES + 1];
    memcpy(text, data + size - take, take);
    for (size_t i = 0; i < take; i++)
        if (!text[i]) text[i] = ' ';   /* encode takes a C string */
    text[take] = '\0';
    int *ids = NULL, n = -1;
    hy_error err;
    int rc = hy_tokenizer_encode(tk, text, &ids, &n, &err);
    if (rc != HY_OK) {
        FUZZ_ASSERT(rc == HY_ERR_INPUT, "encode gave %d", rc);
        fuzz_check_error(rc, &err, NULL);
        free(ids);
        return;
    }
    FUZZ_ASSERT(n >= 0 && (n == 0 || ids), "encode gave %d ids at %p", n, (void *)ids);
    for (int i = 0; i < n; i++) {
        const char *bytes;
        size_t len;
        FUZZ_ASSERT(ids[i] >= 0 && ids[i] < hy_tokenizer_size(tk), "id %d of %d", ids[i],
                    hy_tokenizer_size(tk));
        rc = hy_tokenizer_decode(tk, ids[i], &bytes, &len, &err);
        FUZZ_ASSERT(rc == HY_OK, "encode gave id %d, which does not decode: %s", ids[i], err.msg);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[256];
    fuzz_write_temp(data, size, path, sizeof path);
    hy_tokenizer *tk = NULL;
    hy_error err;
    int rc = hy_tokenizer_load(&tk, path, &err);
    unlink(path);
    if (rc != HY_OK) {
        fuzz_check_error(rc, &err, path);
        return 0;
    }
    int n = hy_tokenizer_size(tk);
    FUZZ_ASSERT(n > 0, "a loaded tokenizer of size %d", n);
    for (int id = 0; id < n && id < MAX_DECODE; id++) {
        const char *bytes;
        size_t len;
        rc = hy_tokenizer_decode(tk, id, &bytes, &len, &err);
        if (rc != HY_OK) {
            FUZZ_ASSERT(rc == HY_ERR_INPUT, "decode(%d) gave %d", id, rc);
            fuzz_check_error(rc, &err, NULL);
        } else {
            FUZZ_ASSERT(bytes || len == 0, "decode(%d): NULL bytes of length %zu", id, len);
            /* The bytes must be readable (ASan checks the read). */
            volatile unsigned sum = 0;
            for (size_t i = 0; i < len; i++) sum += (unsigned char)bytes[i];
            (void)sum;
        }
    }
    check_decode_refused(tk, -1);
    check_decode_refused(tk, n);
    encode(tk, data, size);
    hy_tokenizer_free(tk);
    return 0;
}
