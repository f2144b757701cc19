/*
 * testrun.h — a test's run: a config of sets (over an optional file) loaded
 * and resolved once (lib/run.h), as the commands do, for the test
 * programs that build models, runtimes and profiles.
 *
 * hy_test_run_load fills *run (safe to hy_run_free on failure too) and,
 * when it fails, err (NULL: a local one); hy_test_model_build builds a
 * model of its own as a config's run partitions it. Header-only: each
 * test is its own program.
 */
#ifndef HY_TEST_TESTRUN_H
#define HY_TEST_TESTRUN_H

#include <string.h>

#include "config.h"
#include "model.h"
#include "run.h"

static inline int hy_test_run_load(hy_run *run, const char *path, const char *const *sets, int n,
                            hy_error *err) {
    hy_error local;
    if (!err) err = &local;
    memset(run, 0, sizeof *run);
    hy_config c;
    hy_config_init(&c);
    int rc = hy_config_load(&c, path, sets, n, err);
    if (!rc) rc = hy_run_resolve(run, &c, err);
    hy_config_free(&c);
    return rc;
}

/* A model of the caller's own (hy_model_free) with run's shape and
 * partition, the vocabulary padded to a multiple of vocab_multiple. */
static inline int hy_test_model_copy(hy_model *m, const hy_run *run, int vocab_multiple,
                              hy_error *err) {
    hy_model_shape shape = hy_model_shape_of(&run->model);
    return hy_model_build(m, &shape, run->model.n_layers, run->model.stages, vocab_multiple,
                          err);
}

/* The same for config c, as its run resolves it (the partition the
 * runtime uses). */
static inline int hy_test_model_build(hy_model *m, const hy_config *c, int vocab_multiple,
                               hy_error *err) {
    hy_run run;
    int rc = hy_run_resolve(&run, c, err);
    if (!rc) rc = hy_test_model_copy(m, &run, vocab_multiple, err);
    hy_run_free(&run);
    return rc;
}

#endif
