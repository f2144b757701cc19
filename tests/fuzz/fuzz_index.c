/*
 * fuzz_index.c — libFuzzer harness for the reader of a Hugging Face
 * checkpoint's model.safetensors.index.json (lib/weights.c, reached
 * through hy_weights_read: the reader is static, and reading into host
 * blocks needs no runtime; the three runtime functions weights.c calls
 * for hy_weights_load are stubs that abort, so the link takes no backend).
 *
 * Once per process it makes a checkpoint directory from the committed
 * tests/fixtures/llama-tiny (run from the repository root, as
 * tests/fuzz/run.sh does): its config.json, and its model.safetensors
 * under that name and as model-00001-of-00001.safetensors, so an index
 * may name either, both, or files that are not there. Each input becomes
 * the directory's index, and the model of config.json is read from the
 * directory. A failure must be an error with a message; a success must
 * have read the fixture's weights: the same blocks as reading
 * model.safetensors alone.
 */
#include <limits.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "hfconfig.h"
#include "model.h"
#include "runtime.h"
#include "weights.h"

/* weights.c's runtime door (hy_weights_load), never taken here: these
 * stand in for runtime.c, which would link every backend and kernel. */
const hy_model *hy_runtime_model(const hy_runtime *rt) {
    (void)rt;
    abort();
}
int hy_runtime_put(hy_runtime *rt, hy_tensor_role role, const hy_param *p, const float *src,
                   size_t n, hy_error *err) {
    (void)rt, (void)role, (void)p, (void)src, (void)n, (void)err;
    abort();
}
int hy_runtime_refresh(hy_runtime *rt, hy_error *err) {
    (void)rt, (void)err;
    abort();
}

#define FIXTURE "tests/fixtures/llama-tiny"

static char dir[256];
static hy_model model;
static float *want, *got;

static void copy(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    FUZZ_ASSERT(in && out, "copying %s to %s (run from the repository root)", from, to);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        FUZZ_ASSERT(fwrite(buf, 1, n, out) == n, "writing %s", to);
    FUZZ_ASSERT(!ferror(in) && fclose(in) == 0 && fclose(out) == 0, "copying %s", from);
}

static const char *const FILES[] = { "model.safetensors.index.json", "config.json",
                                     "model.safetensors", "model-00001-of-00001.safetensors" };

/* libFuzzer ends by exit(), which runs this: no directory left behind. */
static void remove_dir(void) {
    char path[512];
    for (size_t i = 0; i < sizeof FILES / sizeof FILES[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, FILES[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void setup(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/hy_fuzz_index.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    FUZZ_ASSERT(mkdtemp(dir), "mkdtemp %s failed", dir);
    atexit(remove_dir);
    char path[512];
    for (size_t i = 1; i < sizeof FILES / sizeof FILES[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, FILES[i]);
        copy(i == 1 ? FIXTURE "/config.json" : FIXTURE "/model.safetensors", path);
    }

    hy_model_shape s;
    hy_error err;
    FUZZ_ASSERT(hy_hfconfig_read(FIXTURE "/config.json", &s, &err) == HY_OK, "%s", err.msg);
    s.seq_len = 16;
    FUZZ_ASSERT(hy_model_build(&model, &s, NULL, 1, 1, &err) == HY_OK, "%s", err.msg);
    want = calloc(model.stage_numel[0], sizeof *want);
    got = calloc(model.stage_numel[0], sizeof *got);
    FUZZ_ASSERT(want && got, "out of memory");
    FUZZ_ASSERT(hy_weights_read(&model, FIXTURE "/model.safetensors", &want, &err) == HY_OK,
                "%s", err.msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) setup();
    char index[512];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(index, "wb");
    FUZZ_ASSERT(f && fwrite(data, 1, size, f) == size && fclose(f) == 0, "writing %s", index);
    memset(got, 0, model.stage_numel[0] * sizeof *got);
    hy_error err;
    int rc = hy_weights_read(&model, dir, &got, &err);
    if (rc != HY_OK) fuzz_check_error(rc, &err, NULL);
    else
        FUZZ_ASSERT(memcmp(got, want, model.stage_numel[0] * sizeof *got) == 0,
                    "an index that loads read other weights than the fixture's");
    return 0;
}
