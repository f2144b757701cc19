/*
 * fuzz_config.c — libFuzzer harness for the config loader (lib/config.c).
 *
 * One input is used twice:
 *   1. as a config file: hy_config_load(path, no sets);
 *   2. as --set overrides: its first 8 lines, each one "key=value", loaded
 *      over the defaults (the same checks, through the other door).
 * A failure must be an error with a message (naming the file in case 1).
 * A success must round-trip: hy_config_to_json of the config, loaded
 * again, gives the same JSON (config.h promises it "loads back into the
 * same config"), so a value the loader accepts but the writer cannot
 * express is found too.
 */
#include "config.h"
#include "fuzz.h"

#define MAX_SETS 8

/* to_json(c) → file → load → to_json must be the same text. */
static void round_trip(const hy_config *c) {
    char *json = hy_config_to_json(c);
    FUZZ_ASSERT(json, "hy_config_to_json returned NULL");
    char path[256];
    fuzz_write_temp((const uint8_t *)json, strlen(json), path, sizeof path);
    hy_config again;
    hy_error err;
    int rc = hy_config_load(&again, path, NULL, 0, &err);
    unlink(path);
    FUZZ_ASSERT(rc == HY_OK, "the resolved config does not load back: %s\n%s", err.msg, json);
    char *json2 = hy_config_to_json(&again);
    FUZZ_ASSERT(json2 && strcmp(json, json2) == 0, "the reloaded config differs:\n%s\n---\n%s",
                json, json2 ? json2 : "(null)");
    free(json2);
    free(json);
    hy_config_free(&again);
}

static void load_file(const uint8_t *data, size_t size) {
    char path[256];
    fuzz_write_temp(data, size, path, sizeof path);
    hy_config c;
    hy_error err;
    int rc = hy_config_load(&c, path, NULL, 0, &err);
    unlink(path);
    if (rc == HY_OK) round_trip(&c);
    else fuzz_check_error(rc, &err, path);
    hy_config_free(&c);
}

static void load_sets(const uint8_t *data, size_t size) {
    /* A copy with each line ended by a NUL (a NUL inside a line ends that
     * set early, as it would on a command line). */
    char *text = malloc(size + 1);
    FUZZ_ASSERT(text, "out of memory");
    memcpy(text, data, size);
    text[size] = '\0';
    const char *sets[MAX_SETS];
    int n = 0;
    for (char *p = text; n < MAX_SETS && p < text + size;) {
        char *nl = memchr(p, '\n', (size_t)(text + size - p));
        sets[n++] = p;
        if (!nl) break;
        *nl = '\0';
        p = nl + 1;
    }
    hy_config c;
    hy_error err;
    int rc = hy_config_load(&c, NULL, sets, n, &err);
    if (rc == HY_OK) round_trip(&c);
    else fuzz_check_error(rc, &err, NULL);
    hy_config_free(&c);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load_file(data, size);
    load_sets(data, size);
    return 0;
}
