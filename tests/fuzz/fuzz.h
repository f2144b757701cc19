/*
 * fuzz.h — what the libFuzzer harnesses in tests/fuzz/ share.
 *
 * Each harness (fuzz_*.c) defines LLVMFuzzerTestOneInput: it feeds one
 * input to a reader of the library and checks, beyond "no crash, no leak,
 * no undefined behaviour" (the sanitizers see to those), the reader's own
 * promises: a failure is an error with a status and a message naming the
 * file; a success yields a value whose invariants hold. A broken promise
 * aborts, which libFuzzer reports as a crash with the input saved.
 *
 * The readers take a path, so an input is written to a temporary file
 * (mkstemp under $TMPDIR or /tmp) and removed after each run. `make fuzz`
 * builds and runs these (Makefile, "Fuzzing").
 */
#ifndef HY_FUZZ_H
#define HY_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"

/* Aborts with a message when a promise of the reader is broken. */
#define FUZZ_ASSERT(cond, ...)                                                 \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: broken promise: %s: ", __FILE__, __LINE__, \
                    #cond);                                                    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* Writes the input to a new temporary file; its name goes to path (at
 * least 256 bytes). Failing to do so is the machine's problem, not the
 * input's, so it aborts with the reason rather than hide it. */
static inline void fuzz_write_temp(const uint8_t *data, size_t size, char *path,
                                   size_t cap) {
    const char *dir = getenv("TMPDIR");
    snprintf(path, cap, "%s/hy_fuzz.XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    FUZZ_ASSERT(fd >= 0, "mkstemp %s failed", path);
    for (size_t done = 0; done < size;) {
        ssize_t put = write(fd, data + done, size - done);
        FUZZ_ASSERT(put > 0, "writing %s failed", path);
        done += (size_t)put;
    }
    FUZZ_ASSERT(close(fd) == 0, "closing %s failed", path);
}

/* What every error must be: an input error or a runtime one (an I/O
 * failure, out of memory), with a message. `name` must appear in it when
 * not NULL (the reader names the file it could not read). */
static inline void fuzz_check_error(int rc, const hy_error *err, const char *name) {
    FUZZ_ASSERT(rc == HY_ERR_INPUT || rc == HY_ERR_RUNTIME, "status %d", rc);
    FUZZ_ASSERT(err->status == rc, "err.status %d, returned %d", err->status, rc);
    FUZZ_ASSERT(err->msg[0] != '\0', "an error without a message");
    FUZZ_ASSERT(!name || strstr(err->msg, name), "the message does not name %s: %s",
                name, err->msg);
}

#endif
