/*
 * fuzz_hfconfig.c — libFuzzer harness for the reader of Hugging Face's
 * config.json (lib/hfconfig.c).
 *
 * Reads the input as a Llama's config.json (hy_hfconfig_read). A failure
 * must be an input error with a message naming the file. A success must
 * give the shape hfconfig.h describes: kind llama, whole non-negative
 * counts, at least one head (head_dim is checked against them), tied or
 * not, seq_len 0; and every field must read back as a finite number
 * (hy_hfconfig_value), as the checkpoint check compares them. (Whether
 * the shape makes a model is the config's check, not this reader's.)
 */
#include <math.h>

#include "fuzz.h"
#include "hfconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[256];
    fuzz_write_temp(data, size, path, sizeof path);
    hy_model_shape s;
    hy_error err;
    int rc = hy_hfconfig_read(path, &s, &err);
    unlink(path);
    if (rc != HY_OK) {
        FUZZ_ASSERT(rc == HY_ERR_INPUT, "hy_hfconfig_read gave %d", rc);
        fuzz_check_error(rc, &err, path);
        return 0;
    }
    FUZZ_ASSERT(s.kind == HY_MODEL_LLAMA, "kind %d", (int)s.kind);
    for (int f = 0; f < HY_HF_FIELDS; f++) {
        double v = hy_hfconfig_value(&s, f);
        FUZZ_ASSERT(isfinite(v), "%s is %g", hy_hfconfig_field(f), v);
        FUZZ_ASSERT(hy_hfconfig_key(f) && hy_hfconfig_key(f)[0], "field %d has no key", f);
    }
    FUZZ_ASSERT(s.layers >= 0 && s.d_model >= 0 && s.heads > 0 && s.kv_heads >= 0 &&
                    s.ffn_dim >= 0 && s.vocab >= 0,
                "layers %d, d_model %d, heads %d, kv_heads %d, ffn_dim %d, vocab %d", s.layers,
                s.d_model, s.heads, s.kv_heads, s.ffn_dim, s.vocab);
    FUZZ_ASSERT(s.tie_embeddings == 0 || s.tie_embeddings == 1, "tie %d", s.tie_embeddings);
    FUZZ_ASSERT(s.seq_len == 0, "seq_len %d", (int)s.seq_len);
    return 0;
}
