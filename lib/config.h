/*
 * config.h — the run configuration: a JSON file plus `--set key=value`
 * overrides → one plain, fully checked struct.
 *
 * Every key has one entry in a table in config.c (its dotted name, type,
 * range, default and meaning); that table drives parsing, validation,
 * hy_config_to_json and the reference in docs/config.md
 * (hy_config_reference), so the four cannot drift apart. Loading is
 * strict: an unknown key, a wrong type, a value out of range or an
 * inconsistent combination is an error (HY_ERR_INPUT) that names the
 * file or the --set, the dotted key and the fix. Nothing here prints or
 * exits.
 *
 * Lifetime: hy_config_init and hy_config_load both (re)initialise the
 * struct without reading what was in it, and allocate nothing that
 * hy_config_free would miss, so `init; load; free` and `load; free` are
 * both right. Strings and arrays belong to the config: read them, do not
 * assign into them (to change a value, pass a --set to hy_config_load).
 */
#ifndef HY_CONFIG_H
#define HY_CONFIG_H

#include "backend.h"
#include "error.h"
#include "model.h"
#include "schedule.h"
#include "transformer.h"

/* What training does after a step whose loss or gradient is not finite
 * (that step's update is never applied): end the run, or go on. */
typedef enum { HY_NONFINITE_STOP, HY_NONFINITE_SKIP, HY_NONFINITE_COUNT } hy_nonfinite_policy;

/* The learning rate's shape after the warm-up (train.h's hy_train_lr):
 * cosine or linear decay to min_lr at the last step, constant at lr, or
 * warmup-stable-decay (constant, then linear decay over the last
 * decay_fraction of the steps). */
typedef enum { HY_LR_COSINE, HY_LR_LINEAR, HY_LR_CONSTANT, HY_LR_WSD, HY_LR_COUNT } hy_lr_schedule;

/* What a config is loaded for. Training, and every command that prices or
 * runs the schedule, partitions the model over the schedule's stages, so
 * the stages must fit the layers (schedule.split included). A command that
 * runs the whole model on one rank (`hanayo sample`) never uses that
 * partition: its config is checked in every other way, and a run resolved
 * from it (run.h) has one stage and no schedule. */
typedef enum { HY_CONFIG_FOR_STAGES, HY_CONFIG_FOR_ONE_RANK } hy_config_use;

typedef struct {
    char *path;                 /* file it came from, or NULL */
    hy_model_shape model;
    char *model_from;           /* model.from: a Hugging Face Llama's config.json or its
                                   directory, filling the model keys not given; or NULL */
    struct { hy_sched_kind kind; int ranks, waves, chunks, micro_batches, micro_batch_size;
             int *layers_per_stage;                    /* the key schedule.split */
             int n_layers_per_stage;                   /* 0: balance automatically */
             int split_backward;                       /* bool: B and W passes */
             double comm_cost;                         /* the transfer time the order is for */
             int max_activations; } schedule;          /* per rank, 0: no cap */
    struct { int steps; double lr, min_lr; int warmup_steps; hy_lr_schedule lr_schedule;
             double decay_fraction, weight_decay, beta1, beta2, eps, grad_clip;
             unsigned long long seed; int log_every; hy_nonfinite_policy on_nonfinite;
             int eval_every, eval_batches; hy_recompute recompute; } train;
    struct { char **train; int n_train;                /* paths and glob patterns, n_train >= 1 */
             char *val; } data;                        /* val may be NULL: no validation */
    char *init;                                        /* NULL: random init from train.seed */
    struct { char *dir; int every, keep; } checkpoint; /* dir NULL: never checkpoint; every 0: only at
                                                          the end; keep 0: keep all */
    hy_backend_kind backend;
    int *devices; int n_devices;   /* rank r -> devices[r]; empty = r mod device count */
    int graph;                     /* bool */
    double watchdog_s;
    hy_config_use use;             /* what it was loaded for (hy_config_load_for) */
} hy_config;

/* The defaults (see the table in config.c or docs/config.md); the defaults
 * derived from the file and other keys (data.val, checkpoint.dir,
 * train.min_lr) are filled by hy_config_load. */
void hy_config_init(hy_config *c);

/* Loads `path` (NULL: start from the defaults alone), applies `sets`
 * ("key=value" with dotted keys, in order, after the file) and checks the
 * result once. The file's keys and the sets go through the same checks.
 * A value in a set is read as JSON when it is a JSON scalar or array
 * (`train.lr=3e-4`, `graph=false`, `devices=[0,0,1]`, `init=null`); for
 * string keys anything else is taken as the string itself
 * (`schedule.kind=hanayo`, `data.train=my shard.bin`); a list of paths
 * takes a JSON array too (`data.train=["a.bin","b.bin"]`). Returns HY_OK, or
 * HY_ERR_INPUT with err naming the file/--set, the key and the fix; on
 * failure c holds the defaults. Always hy_config_free(c) afterwards. */
int hy_config_load(hy_config *c, const char *path, const char *const *sets, int n_sets,
                   hy_error *err);

/* hy_config_load for `use`: HY_CONFIG_FOR_STAGES is hy_config_load;
 * HY_CONFIG_FOR_ONE_RANK leaves out only the check that the schedule's
 * stages fit model.layers (and schedule.split's entries and sum). */
int hy_config_load_for(hy_config *c, hy_config_use use, const char *path,
                       const char *const *sets, int n_sets, hy_error *err);

/* The resolved config as pretty JSON (indent 2, keys in the table's fixed
 * order, every key present, derived defaults such as train.min_lr written
 * out), so it loads back into the same config. malloc'd; NULL on OOM. */
char *hy_config_to_json(const hy_config *c);

/* "top/NAME", NAME the config file's name without its directory and
 * extension ("configs/tiny-gpt.json" -> "top/tiny-gpt"; "config" when the
 * name is empty): where a config's checkpoints and profiles go by default.
 * malloc'd; NULL when out of memory. */
char *hy_config_derived_dir(const char *top, const char *config);

/* "auto"/"cpu"/"cuda", "stop"/"skip" and "cosine"/"linear"/"constant"/"wsd";
 * "?" when out of range. */
const char *hy_backend_name(hy_backend_kind kind);
const char *hy_nonfinite_name(hy_nonfinite_policy p);
const char *hy_lr_schedule_name(hy_lr_schedule s);

/* Every key with its type, default, allowed values and meaning, as a
 * Markdown table: docs/config.md's reference is this text (`hanayo help
 * config --markdown` prints it). malloc'd; NULL on OOM. */
char *hy_config_reference(void);

/* The same as plain text for a terminal, what `hanayo help config`
 * prints: under a heading per section, each key's name on a line of its
 * own, then its allowed values and default, then its meaning, indented
 * and wrapped to lines of at most width columns (at least 20). malloc'd;
 * NULL on OOM. */
char *hy_config_help_text(int width);

/* Frees what the config owns and leaves it holding the defaults, so a
 * second free is harmless. */
void hy_config_free(hy_config *c);

#endif
