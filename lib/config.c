/*
 * config.c — see config.h.
 *
 * One table, KEYS, lists every config key once: dotted name, type, field,
 * range, default and meaning. Everything else walks that table:
 *
 *   load:   file → jansson object → check its structure (unknown keys,
 *           sections are objects) → merge each --set into the same object
 *           → read every key from the merged object (type and range) →
 *           fill derived defaults → cross-field checks.
 *   init, to_json, reference: one loop over KEYS each.
 *
 * Because the --set values are merged into the object before anything is
 * read, a value from a file and a value from a --set meet exactly the same
 * checks; the only thing the merge remembers is where each key came from
 * (`origin`), so that an error can name the file or the --set at fault.
 */
#include "config.h"
#include "hfconfig.h"
#include "infile.h"
#include "suggest.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Enums are stored and read through an int. */
_Static_assert(sizeof(hy_model_kind) == sizeof(int), "enum size");
_Static_assert(sizeof(hy_sched_kind) == sizeof(int), "enum size");
_Static_assert(sizeof(hy_backend_kind) == sizeof(int), "enum size");
_Static_assert(sizeof(hy_nonfinite_policy) == sizeof(int), "enum size");
_Static_assert(sizeof(hy_lr_schedule) == sizeof(int), "enum size");
_Static_assert(sizeof(hy_recompute) == sizeof(int), "enum size");

/* A config is a few hundred bytes; anything near this is not a config. */
#define MAX_CONFIG_BYTES (16u << 20)

/* ------------------------------------------------------------------------
 * Names of the enum values
 */

static const char *const BACKEND_NAMES[HY_BACKEND_COUNT] = { "auto", "cpu", "cuda" };
static const char *const NONFINITE_NAMES[HY_NONFINITE_COUNT] = { "stop", "skip" };
static const char *const LR_SCHEDULE_NAMES[HY_LR_COUNT] = { "cosine", "linear", "constant",
                                                            "wsd" };

const char *hy_backend_name(hy_backend_kind kind) {
    return (unsigned)kind < HY_BACKEND_COUNT ? BACKEND_NAMES[kind] : "?";
}

const char *hy_nonfinite_name(hy_nonfinite_policy p) {
    return (unsigned)p < HY_NONFINITE_COUNT ? NONFINITE_NAMES[p] : "?";
}

const char *hy_lr_schedule_name(hy_lr_schedule s) {
    return (unsigned)s < HY_LR_COUNT ? LR_SCHEDULE_NAMES[s] : "?";
}

static const char *model_name(int k) { return hy_model_name((hy_model_kind)k); }
static const char *norm_name(int k) { return hy_model_norm_name(k); }
static const char *backend_name(int k) { return hy_backend_name((hy_backend_kind)k); }
static const char *nonfinite_name(int k) { return hy_nonfinite_name((hy_nonfinite_policy)k); }
static const char *lr_schedule_name(int k) { return hy_lr_schedule_name((hy_lr_schedule)k); }
static const char *recompute_name(int k) { return hy_recompute_name((hy_recompute)k); }
static const char *sched_name(int k) { return hy_sched_name((hy_sched_kind)k); }

/* ------------------------------------------------------------------------
 * The key table
 */

typedef enum {
    K_SECTION,  /* a JSON object holding keys */
    K_INT,      /* int, integral JSON number in [lo, hi] */
    K_SEED,     /* unsigned long long, JSON integer >= 0 */
    K_REAL,     /* double, any JSON number in the range given by lo, hi, flags */
    K_BOOL,     /* int 0/1, JSON true/false */
    K_STRING,   /* char *, non-empty JSON string */
    K_ENUM,     /* enum stored as int, JSON string naming one value */
    K_INTS,     /* int * plus count, JSON array of integers in [lo, hi] */
    K_PATHS     /* char ** plus count, a non-empty JSON string or a non-empty array
                   of them (a string reads as an array of one) */
} key_type;

enum {
    F_NULLABLE = 1,  /* JSON null is allowed (strings: NULL; reals: derived; bools: -1,
                        derived) */
    F_LO_OPEN = 2,   /* reals: lo itself is excluded */
    F_HI_OPEN = 4,   /* reals: hi itself is excluded */
    /* Reals the optimizer uses as a 32-bit float: the value as a float
     * must be in range too (0.99999999 is 1 as a float), and finite and
     * normal unless 0 (1e-46 is 0 as a float, 1e-40 loses its digits). */
    F_FLOAT = 8
};

typedef struct {
    const char *name;                 /* dotted path */
    key_type type;
    size_t off;                       /* the field in hy_config */
    size_t n_off;                     /* K_INTS, K_PATHS: the count field */
    double lo, hi;                    /* range of the value, or of each entry */
    int max_len;                      /* K_INTS: most entries */
    unsigned flags;
    const char *(*enum_name)(int);    /* K_ENUM: value → name */
    int n_enum;
    double def;                       /* default of numbers, bools, enums */
    const char *def_str;              /* default of strings (NULL: null) */
    char *const *def_list;            /* K_PATHS: default, one entry, def_str */
    const char *def_doc;              /* default as the reference shows it, when derived */
    const char *doc;
} key_spec;

#define OFF(field) offsetof(hy_config, field)
#define INT_ANY ((double)INT_MAX)

/* data.train's default as a list of one: the table's own storage, which
 * hy_config_free knows by address and does not free. */
static char DEF_TRAIN[] = "data/synth_train.bin";
static char *const DEF_TRAIN_LIST[] = { DEF_TRAIN };

static const key_spec KEYS[] = {
    { .name = "model", .type = K_SECTION, .doc = "the network" },
    { .name = "model.kind", .type = K_ENUM, .off = OFF(model.kind),
      .enum_name = model_name, .n_enum = HY_MODEL_COUNT, .def = HY_MODEL_GPT,
      .doc = "`gpt`: GPT-2 (causal attention, next-token loss, LM head tied to the "
             "token embedding); `bert`: BERT, bidirectional attention and a masked-LM "
             "loss (`model.norm` says which); `llama`: Llama 2/3 (RMSNorm, rotary positions, "
             "grouped-query attention, SwiGLU MLP, no biases, next-token loss)" },
    { .name = "model.from", .type = K_STRING, .off = OFF(model_from), .flags = F_NULLABLE,
      .doc = "a Hugging Face Llama or BERT checkpoint's directory (or its config.json): every "
             "model key below that the config does not give is read from it (kind `llama` or "
             "`bert`, layers, heads, kv_heads, ffn_dim, vocab, norm_eps, rope_theta, "
             "rope_scaling, tie_embeddings; BERT's positions from max_position_embeddings and "
             "its seq_len, unless given, as many; norm `post`); null: none" },
    { .name = "model.layers", .type = K_INT, .off = OFF(model.layers),
      .lo = 1, .hi = 1024, .def = 4, .doc = "transformer blocks" },
    { .name = "model.d_model", .type = K_INT, .off = OFF(model.d_model),
      .lo = 1, .hi = 65536, .def = 64,
      .doc = "width of the residual stream; a multiple of `model.heads`" },
    { .name = "model.heads", .type = K_INT, .off = OFF(model.heads),
      .lo = 1, .hi = 1024, .def = 4,
      .doc = "attention (query) heads; head size is d_model / heads" },
    { .name = "model.seq_len", .type = K_INT, .off = OFF(model.seq_len),
      .lo = 1, .hi = 65536, .def = 64,
      .doc = "tokens per sequence (T): every batch, and the longest a sample may grow" },
    { .name = "model.positions", .type = K_INT, .off = OFF(model.positions),
      .lo = 0, .hi = 65536, .def = 0, .def_doc = "`model.seq_len`",
      .doc = "rows of the learned position table (`gpt`, `bert`; GPT-2's n_positions, BERT's "
             "max_position_embeddings), at least `model.seq_len`: a run reads rows 0 to "
             "seq_len - 1, and the rows past them get no gradient (AdamW's decoupled decay "
             "still shrinks them, as in PyTorch), so bert-base (512) trains at 128 and "
             "GPT-2 (1024) at 256 and the checkpoint keeps the whole table; 0 means "
             "`model.seq_len`; read by `gpt` and `bert` only" },
    { .name = "model.vocab", .type = K_INT, .off = OFF(model.vocab),
      .lo = 2, .hi = INT_ANY, .def = 512,
      .doc = "vocabulary size (GPT-2: 50257, Llama 3: 128256); above 65536 the shards must "
             "be llm.c's uint32 format (`hanayo data synth --format u32`); padded to a "
             "multiple of 128 for the LM head, which must stay below 2^31" },
    { .name = "model.kv_heads", .type = K_INT, .off = OFF(model.kv_heads),
      .lo = 0, .hi = 1024, .def = 0, .def_doc = "`model.heads`",
      .doc = "key/value heads, dividing `model.heads`: fewer is grouped-query attention "
             "(query head h reads K/V head h / (heads / kv_heads)); 0 means `model.heads`; "
             "`gpt` and `bert` need `model.heads`" },
    { .name = "model.ffn_dim", .type = K_INT, .off = OFF(model.ffn_dim),
      .lo = 0, .hi = 1048576, .def = 0, .def_doc = "4 x `model.d_model`",
      .doc = "the MLP's hidden width (Llama's intermediate_size); 0 means 4 x d_model, "
             "which `gpt` and `bert` need" },
    { .name = "model.tie_embeddings", .type = K_BOOL, .off = OFF(model.tie_embeddings),
      .flags = F_NULLABLE, .def = -1, .def_doc = "true for `gpt` and `bert`, false for `llama`",
      .doc = "the LM head is the token embedding; untied (`llama` only), the head is a "
             "weight of its own on the last stage; null: the kind's default" },
    { .name = "model.norm", .type = K_ENUM, .off = OFF(model.norm),
      .enum_name = norm_name, .n_enum = HY_NORM_COUNT, .def = HY_NORM_PRE,
      .def_doc = "`post` for `bert`, else `pre`",
      .doc = "`bert` only: `post` is Hugging Face's BertForMaskedLM (LayerNorm after each "
             "residual add, an embedding LayerNorm, exact-erf GELU, the MLM head's dense and "
             "LayerNorm; checkpoints open in transformers); `pre` is GPT-2's pre-LN blocks "
             "made bidirectional (Megatron's rearranged LayerNorm; tanh GELU; GPT-2 tensor "
             "names). `gpt` and `llama` are `pre`" },
    { .name = "model.norm_eps", .type = K_REAL, .off = OFF(model.norm_eps),
      .lo = 0, .hi = 1, .flags = F_LO_OPEN | F_FLOAT, .def = 1e-5,
      .def_doc = "1e-12 for `bert` with `post` norm, else 1e-5",
      .doc = "the norms' epsilon: RMSNorm's (`llama`; Llama 3: 1e-5, Llama 2: 1e-6) and "
             "post-LN BERT's LayerNorm's (bert-base: 1e-12); GPT-2 and pre-LN BERT keep 1e-5" },
    { .name = "model.rope_theta", .type = K_REAL, .off = OFF(model.rope_theta),
      .lo = 0, .hi = 1e12, .flags = F_LO_OPEN, .def = 10000,
      .doc = "the base of the rotary position embedding's frequencies (`llama`; "
             "Llama 3: 500000)" },
    { .name = "model.rope_scaling", .type = K_SECTION,
      .doc = "Llama 3's RoPE frequency scaling (`llama`; Hugging Face's rope_type "
             "\"llama3\"); absent or factor 0: none" },
    { .name = "model.rope_scaling.factor", .type = K_REAL,
      .off = OFF(model.rope_scaling.factor), .lo = 0, .hi = 1e6, .def = 0,
      .doc = "long wavelengths are stretched by this (Llama 3.1/3.2: 8 or 32); 0: no scaling" },
    { .name = "model.rope_scaling.low_freq_factor", .type = K_REAL,
      .off = OFF(model.rope_scaling.low_freq_factor), .lo = 0, .hi = 1e6, .flags = F_LO_OPEN,
      .def = 1, .doc = "wavelengths above original / this are scaled whole" },
    { .name = "model.rope_scaling.high_freq_factor", .type = K_REAL,
      .off = OFF(model.rope_scaling.high_freq_factor), .lo = 0, .hi = 1e6, .flags = F_LO_OPEN,
      .def = 4, .doc = "wavelengths below original / this are kept; between, blended" },
    { .name = "model.rope_scaling.original_max_position_embeddings", .type = K_INT,
      .off = OFF(model.rope_scaling.original_max_position_embeddings), .lo = 1,
      .hi = INT_ANY, .def = 8192,
      .doc = "the context length the model was trained at before scaling" },
    { .name = "model.mask_token", .type = K_INT, .off = OFF(model.mask_token),
      .lo = 0, .hi = INT_ANY, .def_doc = "103 when `model.vocab` is 30522, else `model.vocab` - 1",
      .doc = "BERT: the token id a masked position reads (bert-base-uncased's [MASK] is 103); "
             "below `model.vocab`; read by `bert` only" },

    { .name = "schedule", .type = K_SECTION, .doc = "the pipeline" },
    { .name = "schedule.kind", .type = K_ENUM, .off = OFF(schedule.kind),
      .enum_name = sched_name, .n_enum = HY_SCHED_COUNT, .def = HY_SCHED_HANAYO,
      .doc = "pipeline schedule; stages S = ranks (`gpipe`, `1f1b`), chunks x ranks "
             "(`interleaved`), 2 x waves x ranks (`hanayo`)" },
    { .name = "schedule.ranks", .type = K_INT, .off = OFF(schedule.ranks),
      .lo = 1, .hi = HY_MAX_RANKS, .def = 2,
      .doc = "pipeline ranks P: one thread each, on `devices[r]`" },
    { .name = "schedule.waves", .type = K_INT, .off = OFF(schedule.waves),
      .lo = 1, .hi = 16, .def = 1,
      .doc = "Hanayo waves W: data runs down the ranks and back up W times, so each "
             "rank holds 2W stages; read by `hanayo` only" },
    { .name = "schedule.chunks", .type = K_INT, .off = OFF(schedule.chunks),
      .lo = 1, .hi = 64, .def = 2,
      .doc = "virtual stages per rank v of `interleaved`; read by `interleaved` only" },
    { .name = "schedule.micro_batches", .type = K_INT, .off = OFF(schedule.micro_batches),
      .lo = 1, .hi = 65536, .def = 8,
      .doc = "micro-batches M per optimizer step; `interleaved` needs a multiple of "
             "`schedule.ranks`" },
    { .name = "schedule.micro_batch_size", .type = K_INT,
      .off = OFF(schedule.micro_batch_size), .lo = 1, .hi = 4096, .def = 4,
      .doc = "sequences per micro-batch (B); one step sees M x B sequences" },
    { .name = "schedule.split_backward", .type = K_BOOL, .off = OFF(schedule.split_backward),
      .def = 0,
      .doc = "split every backward in two passes: B, the input gradient the previous stage "
             "waits for, and W, the weight gradient nothing waits for, which the schedule "
             "places in its bubbles (zero-bubble pipelining; hanayo with W = 1 is ZB-V)" },
    { .name = "schedule.comm_cost", .type = K_REAL, .off = OFF(schedule.comm_cost),
      .lo = 0, .hi = 1e6, .def = 0,
      .doc = "the time of one cross-rank transfer that the order is chosen for, in units "
             "of one stage's forward (its backward counting 2): with transfers that take "
             "time, hanayo's order keeps more micro-batches in flight to hide them; 0 "
             "(free transfers) is the canonical order. `hanayo plan CONFIG` plans with it "
             "unless `--comm-cost` says otherwise" },
    { .name = "schedule.max_activations", .type = K_INT, .off = OFF(schedule.max_activations),
      .lo = 0, .hi = 1 << 20, .def = 0,
      .doc = "the most activations a rank may hold at once, in stage activations (one "
             "micro-batch's input to one stage); the order is the best found within it, "
             "down to one per stage a rank holds; 0: no cap" },
    { .name = "schedule.split", .type = K_INTS, .off = OFF(schedule.layers_per_stage),
      .n_off = OFF(schedule.n_layers_per_stage), .lo = 0, .hi = 1024, .max_len = 2 * 16 * HY_MAX_RANKS,
      .doc = "layers per stage, S entries summing to `model.layers` (0 allowed: the "
             "first stage also holds the embedding, the last the head); `[]` balances "
             "estimated cost automatically and needs S <= `model.layers`" },

    { .name = "train", .type = K_SECTION, .doc = "the optimizer and the loop" },
    { .name = "train.steps", .type = K_INT, .off = OFF(train.steps),
      .lo = 1, .hi = INT_ANY, .def = 200, .doc = "optimizer steps" },
    { .name = "train.lr", .type = K_REAL, .off = OFF(train.lr),
      .lo = 0, .hi = 1e3, .flags = F_FLOAT, .def = 1e-3,
      .doc = "peak learning rate (AdamW): linear warm-up to it, then `train.lr_schedule` "
             "(default: cosine decay to `train.min_lr` at the last step). At most 1000: "
             "AdamW moves each weight by about the rate a step, so a larger one only "
             "wrecks the weights" },
    { .name = "train.min_lr", .type = K_REAL, .off = OFF(train.min_lr),
      .lo = 0, .hi = 1e3, .flags = F_NULLABLE | F_FLOAT, .def_doc = "train.lr / 10",
      .doc = "learning rate at the last step (`constant` never reaches it), <= `train.lr`; "
             "absent or null means train.lr / 10 (the resolved value is what `hanayo "
             "check` prints)" },
    { .name = "train.warmup_steps", .type = K_INT, .off = OFF(train.warmup_steps),
      .lo = 0, .hi = INT_ANY, .def = 20,
      .doc = "steps of linear warm-up from 0 to `train.lr`; may exceed train.steps "
             "(the run then ends still warming up)" },
    { .name = "train.lr_schedule", .type = K_ENUM, .off = OFF(train.lr_schedule),
      .enum_name = lr_schedule_name, .n_enum = HY_LR_COUNT, .def = HY_LR_COSINE,
      .doc = "the learning rate after the warm-up: `cosine` decays from `train.lr` to "
             "`train.min_lr` at the last step along half a cosine; `linear` along a "
             "straight line; `constant` stays at `train.lr`; `wsd` "
             "(warmup-stable-decay) stays at `train.lr`, then decays linearly to "
             "`train.min_lr` over the last `train.decay_fraction` of the steps" },
    { .name = "train.decay_fraction", .type = K_REAL, .off = OFF(train.decay_fraction),
      .lo = 0, .hi = 1, .flags = F_LO_OPEN, .def = 0.2,
      .doc = "`wsd`: the decay's share of `train.steps` (0.2: the last fifth; 1: linear "
             "decay from the end of the warm-up); read by `wsd` only" },
    { .name = "train.weight_decay", .type = K_REAL, .off = OFF(train.weight_decay),
      .lo = 0, .hi = 1e3, .flags = F_FLOAT, .def = 0.1,
      .doc = "AdamW decoupled weight decay: each step takes lr x weight_decay of every "
             "weight off it (at most 1000, where that is the whole weight even at "
             "lr = 0.001)" },
    { .name = "train.beta1", .type = K_REAL, .off = OFF(train.beta1),
      .lo = 0, .hi = 1, .flags = F_HI_OPEN | F_FLOAT, .def = 0.9,
      .doc = "AdamW first-moment decay (0 is allowed: no momentum)" },
    { .name = "train.beta2", .type = K_REAL, .off = OFF(train.beta2),
      .lo = 0, .hi = 1, .flags = F_HI_OPEN | F_FLOAT, .def = 0.95,
      .doc = "AdamW second-moment decay" },
    { .name = "train.eps", .type = K_REAL, .off = OFF(train.eps),
      .lo = 0, .hi = 1e3, .flags = F_LO_OPEN | F_FLOAT, .def = 1e-8,
      .doc = "AdamW epsilon, added to the root of the second moment below each update "
             "(at most 1000: far above the gradients' size every update is about 0)" },
    { .name = "train.grad_clip", .type = K_REAL, .off = OFF(train.grad_clip),
      .lo = 0, .hi = 1e30, .flags = F_FLOAT, .def = 1.0,
      .doc = "clip the global gradient norm to this; 0 turns clipping off (at most "
             "1e30, inside a 32-bit float's range)" },
    { .name = "train.seed", .type = K_SEED, .off = OFF(train.seed),
      .lo = 0, .hi = 9223372036854775807.0, .def = 1234,
      .doc = "seeds initialization, data order and BERT masking" },
    { .name = "train.log_every", .type = K_INT, .off = OFF(train.log_every),
      .lo = 1, .hi = INT_ANY, .def = 10,
      .doc = "log the loss every this many steps (and at the last step)" },
    { .name = "train.eval_every", .type = K_INT, .off = OFF(train.eval_every),
      .lo = 0, .hi = INT_ANY, .def = 0,
      .doc = "print and log the validation loss on `data.val` every this many steps "
             "(and after the last step); 0: after the last step only. Needs a "
             "`data.val`; evaluating changes nothing the training goes on from" },
    { .name = "train.eval_batches", .type = K_INT, .off = OFF(train.eval_batches),
      .lo = 1, .hi = 1000000, .def = 20,
      .doc = "batches of `data.val` each validation reads from the shard's start, the same "
             "ones each time (BERT masks them anew for each step); fewer when the shard "
             "holds fewer" },
    { .name = "train.on_nonfinite", .type = K_ENUM, .off = OFF(train.on_nonfinite),
      .enum_name = nonfinite_name, .n_enum = HY_NONFINITE_COUNT, .def = HY_NONFINITE_STOP,
      .doc = "a step whose loss or gradient is NaN or infinite is reported (where: loss, "
             "parameter, rank, stage) and its update never applied; `stop` then ends the run "
             "(exit 1, no checkpoint of that step); `skip` goes on, counts them, and still "
             "stops after more than 10 in a row" },
    { .name = "train.recompute", .type = K_ENUM, .off = OFF(train.recompute),
      .enum_name = recompute_name, .n_enum = HY_RECOMPUTE_COUNT, .def = HY_RECOMPUTE_NONE,
      .doc = "activation recomputation, memory for compute: `none` keeps every "
             "activation from the forward for the backward; `selective` drops each norm's "
             "output (LayerNorm's, a Llama's RMSNorm's) and the MLP activation's (GELU's, "
             "a Llama's SwiGLU's) and rebuilds them in the backward (a little more "
             "compute); `full` keeps only each stage's input and reruns the "
             "stage's forward before its backward (about one more forward). The numbers "
             "are the same in every mode (bit for bit on the CPU), so a resume may change it" },

    { .name = "data", .type = K_SECTION, .doc = "token shards" },
    { .name = "data.train", .type = K_PATHS, .off = OFF(data.train), .n_off = OFF(data.n_train),
      .def_str = DEF_TRAIN, .def_list = DEF_TRAIN_LIST,
      .doc = "training shards (llm.c's uint16 or uint32 format), relative to the working "
             "directory, read in order as one stream that starts over at its end (each new "
             "pass is said on the console and in the log): a path, a glob pattern "
             "(`data/train_*.bin`, matches sorted by name), or a list of paths and patterns; "
             "`hanayo data synth` writes the default" },
    { .name = "data.val", .type = K_STRING, .off = OFF(data.val), .flags = F_NULLABLE,
      .def_str = "data/synth_val.bin",
      .def_doc = "`data/synth_val.bin` with the default `data.train`, else null",
      .doc = "validation shard: the validation loss after training (and every "
             "`train.eval_every` steps), and what `hanayo eval` reads by default; null: none" },

    { .name = "init", .type = K_STRING, .off = OFF(init), .flags = F_NULLABLE,
      .doc = "safetensors weights to start from (Hugging Face GPT-2 names; post-LN `bert`: "
             "BertForMaskedLM's), or for `llama` and post-LN `bert` a Hugging Face "
             "checkpoint's directory (config.json and one or sharded safetensors); null: "
             "random init from `train.seed`" },

    { .name = "checkpoint", .type = K_SECTION, .doc = "saving the run" },
    { .name = "checkpoint.dir", .type = K_STRING, .off = OFF(checkpoint.dir),
      .flags = F_NULLABLE, .def_str = "checkpoints",
      .def_doc = "`checkpoints/` and the config's file name without "
      "its extension (`checkpoints` with no file)",
      .doc = "directory that receives one sub-directory per saved step; one run at a "
             "time may write it (a lock on its .lock file); null: never save" },
    { .name = "checkpoint.every", .type = K_INT, .off = OFF(checkpoint.every),
      .lo = 0, .hi = INT_ANY, .def = 0,
      .doc = "save every this many steps; 0: no periodic saves. With a dir set, the "
             "last step is always saved" },
    { .name = "checkpoint.keep", .type = K_INT, .off = OFF(checkpoint.keep),
      .lo = 0, .hi = INT_ANY, .def = 0,
      .doc = "keep the newest this many checkpoints in the dir, and any whose directory "
             "holds a file named `keep`; older ones are removed only after a new one is "
             "complete and synced. 0: keep all" },

    { .name = "backend", .type = K_ENUM, .off = OFF(backend),
      .enum_name = backend_name, .n_enum = HY_BACKEND_COUNT, .def = HY_BACKEND_AUTO,
      .doc = "`auto`: CUDA when a GPU is present, else CPU (and it says so); "
             "`cuda` without a GPU is an error" },
    { .name = "devices", .type = K_INTS, .off = OFF(devices), .n_off = OFF(n_devices),
      .lo = 0, .hi = 1023, .max_len = HY_MAX_RANKS,
      .doc = "GPU of each rank, at most `schedule.ranks` entries; ranks past the end, "
             "or all with `[]`, use rank mod device count; repeats share a GPU" },
    { .name = "graph", .type = K_BOOL, .off = OFF(graph), .def = 1,
      .doc = "capture each rank's iteration once and replay it; false runs the same "
             "work eagerly" },
    { .name = "watchdog_s", .type = K_REAL, .off = OFF(watchdog_s),
      .lo = 0, .hi = 1e6, .flags = F_LO_OPEN, .def = 60,
      .doc = "a rank blocked this long on a transfer stops the run with an error "
             "naming rank, action, edge and slot; only time the process ran counts (a "
             "Ctrl-Z and `fg` is no stall)" },
};

#define N_KEYS ((int)(sizeof KEYS / sizeof KEYS[0]))

static const key_spec *find_key(const char *name) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0) return &KEYS[i];
    return NULL;
}

static int key_index(const key_spec *k) { return (int)(k - KEYS); }

/* "schedule.waves" → "waves"; "graph" → "graph". */
static const char *leaf_of(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot ? dot + 1 : name;
}

/* Length of the section part of a name ("schedule.waves" → 8, "graph" → 0). */
static size_t section_len(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot ? (size_t)(dot - name) : 0;
}

/* Is k directly inside the section `sec` (NULL: the top level)? */
static int key_in_section(const key_spec *k, const char *sec) {
    size_t n = section_len(k->name);
    if (!sec) return n == 0;
    return n == strlen(sec) && strncmp(k->name, sec, n) == 0;
}

/* Field access. */
static void *field(hy_config *c, size_t off) { return (char *)c + off; }
static const void *cfield(const hy_config *c, size_t off) { return (const char *)c + off; }

/* ------------------------------------------------------------------------
 * Text helpers: a growable buffer, number and string formatting
 */

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_vadd(strbuf *b, const char *fmt, va_list ap) {
    if (b->oom) return;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) { b->oom = 1; return; }
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    b->len += (size_t)n;
}

static void sb_add(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sb_vadd(b, fmt, ap);
    va_end(ap);
}

/* Hands the text over (NULL on OOM). */
static char *sb_take(strbuf *b) {
    if (b->oom || !b->p) { free(b->p); return NULL; }
    return b->p;
}

/* The shortest "%g" text that reads back as exactly x, so that to_json
 * round-trips and 3e-4 prints as 0.0003, not 0.00029999999999999997. */
static void fmt_real(double x, char *buf, size_t n) {
    /* Whole numbers in full (1000000, not 1e+06). */
    if (x == floor(x) && fabs(x) < 1e16) { snprintf(buf, n, "%.0f", x); return; }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) break;
    }
    /* 1e-08 → 1e-8, 1e+20 → 1e20: the same number, as people write it. */
    char *e = strchr(buf, 'e');
    if (!e) return;
    char *from = e + 1, *to = e + 1;
    if (*from == '+') from++;
    else if (*from == '-') *to++ = *from++;
    while (*from == '0' && from[1]) from++;
    memmove(to, from, strlen(from) + 1);
}

/* As fmt_real, but always reads as a JSON real (60 → 60.0). */
static void fmt_json_real(double x, char *buf, size_t n) {
    fmt_real(x, buf, n);
    if (!strpbrk(buf, ".eEni")) strncat(buf, ".0", n - strlen(buf) - 1);
}

/* s as a JSON string literal. */
static void sb_add_json_string(strbuf *b, const char *s) {
    sb_add(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':  sb_add(b, "\\\""); break;
        case '\\': sb_add(b, "\\\\"); break;
        case '\n': sb_add(b, "\\n"); break;
        case '\t': sb_add(b, "\\t"); break;
        case '\r': sb_add(b, "\\r"); break;
        default:
            if (*p < 0x20) sb_add(b, "\\u%04x", *p);
            else sb_add(b, "%c", *p);
        }
    }
    sb_add(b, "\"");
}

/* A short description of a JSON value for messages: 0, 3.5, "abc", an array. */
static void describe_json(const json_t *v, char *buf, size_t n) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: snprintf(buf, n, "an object"); break;
    case JSON_ARRAY:  snprintf(buf, n, "an array"); break;
    case JSON_TRUE:   snprintf(buf, n, "true"); break;
    case JSON_FALSE:  snprintf(buf, n, "false"); break;
    case JSON_NULL:   snprintf(buf, n, "null"); break;
    case JSON_INTEGER: snprintf(buf, n, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL: fmt_json_real(json_real_value(v), buf, n); break;
    case JSON_STRING: {
        strbuf b = { 0 };
        sb_add_json_string(&b, json_string_value(v));
        char *s = sb_take(&b);
        if (!s) { snprintf(buf, n, "a string"); break; }
        if (strlen(s) > 48) snprintf(buf, n, "a string %.40s...\"", s);
        else snprintf(buf, n, "%s", s);
        free(s);
        break;
    }
    }
}

/* What a key accepts, in words: "an integer in 1..64", "a number in [0, 1)". */
static void describe_range(const key_spec *k, char *buf, size_t n) {
    char lo[32], hi[32];
    fmt_real(k->lo, lo, sizeof lo);
    fmt_real(k->hi, hi, sizeof hi);
    switch (k->type) {
    case K_INT:
        if (k->hi >= INT_ANY) snprintf(buf, n, "an integer >= %s", lo);
        else snprintf(buf, n, "an integer in %s..%s", lo, hi);
        break;
    case K_SEED:
        snprintf(buf, n, "an integer in 0..9223372036854775807");
        break;
    case K_REAL:
        if (isinf(k->hi))
            snprintf(buf, n, "a number %s %s", (k->flags & F_LO_OPEN) ? ">" : ">=", lo);
        else
            snprintf(buf, n, "a number in %c%s, %s%c", (k->flags & F_LO_OPEN) ? '(' : '[',
                     lo, hi, (k->flags & F_HI_OPEN) ? ')' : ']');
        if (k->flags & F_FLOAT) {
            size_t used = strlen(buf);
            snprintf(buf + used, n - used, " as a 32-bit float (if not 0, at least 1.2e-38)");
        }
        break;
    case K_BOOL:
        snprintf(buf, n, (k->flags & F_NULLABLE) ? "true, false or null" : "true or false");
        break;
    case K_STRING:
        snprintf(buf, n, "a non-empty string");
        break;
    case K_ENUM: {
        size_t used = (size_t)snprintf(buf, n, "one of");
        for (int i = 0; i < k->n_enum && used < n; i++)
            used += (size_t)snprintf(buf + used, n - used, "%s \"%s\"", i ? "," : "",
                                     k->enum_name(i));
        break;
    }
    case K_INTS:
        snprintf(buf, n, "an array of at most %d integers in %s..%s", k->max_len, lo, hi);
        break;
    case K_PATHS:
        snprintf(buf, n, "a non-empty string, or a non-empty array of them");
        break;
    case K_SECTION:
        snprintf(buf, n, "an object");
        break;
    }
    if (k->flags & F_NULLABLE) {
        size_t used = strlen(buf);
        snprintf(buf + used, n - used, ", or null");
    }
}

/* ------------------------------------------------------------------------
 * Suggestions for misspelt keys and values
 */

/* The valid key nearest to an unknown one: first the same leaf name in
 * another section ('model.waves' → 'schedule.waves'), else the smallest
 * edit distance over whole dotted names. NULL when nothing is close. */
static const key_spec *suggest_key(const char *full) {
    const char *leaf = leaf_of(full);
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(leaf_of(KEYS[i].name), leaf) == 0) return &KEYS[i];
    const key_spec *best = NULL;
    int best_d = INT_MAX;
    for (int i = 0; i < N_KEYS; i++) {
        int d = hy_edit_distance(full, KEYS[i].name);
        if (d < best_d) { best_d = d; best = &KEYS[i]; }
    }
    return best && hy_is_typo(full, best_d) ? best : NULL;
}

/* "; did you mean 'schedule.waves'?" or "; valid keys in 'schedule': kind, ..." */
static void key_hint(const char *full, char *buf, size_t n) {
    const key_spec *s = suggest_key(full);
    if (s) { snprintf(buf, n, "; did you mean '%s'?", s->name); return; }
    size_t sl = section_len(full);
    char sec[64] = "";
    if (sl && sl < sizeof sec) { memcpy(sec, full, sl); sec[sl] = '\0'; }
    int known_sec = sec[0] && find_key(sec);
    size_t used = known_sec ? (size_t)snprintf(buf, n, "; valid keys in '%s':", sec)
                            : (size_t)snprintf(buf, n, "; valid top-level keys:");
    int first = 1;
    for (int i = 0; i < N_KEYS && used < n; i++) {
        if (!key_in_section(&KEYS[i], known_sec ? sec : NULL)) continue;
        used += (size_t)snprintf(buf + used, n - used, "%s %s", first ? "" : ",",
                                 leaf_of(KEYS[i].name));
        first = 0;
    }
}

/* "; did you mean \"hanayo\"?" for an enum value, or "". */
static void enum_hint(const key_spec *k, const char *typed, char *buf, size_t n) {
    int best = -1, best_d = INT_MAX;
    for (int i = 0; i < k->n_enum; i++) {
        int d = hy_edit_distance(typed, k->enum_name(i));
        if (d < best_d) { best_d = d; best = i; }
    }
    if (best >= 0 && hy_is_typo(typed, best_d))
        snprintf(buf, n, "; did you mean \"%s\"?", k->enum_name(best));
    else
        buf[0] = '\0';
}

/* ------------------------------------------------------------------------
 * Where a value came from
 */

enum { ORIGIN_DEFAULT = -2, ORIGIN_FILE = -1 };   /* else: index of the --set */

typedef struct {
    const char *path;              /* the file, or NULL */
    const char *const *sets;
    int n_sets;
    int origin[N_KEYS];            /* per key: ORIGIN_* or the last --set that gave it */
} load_ctx;

/* One origin in words: "configs/x.json", "--set schedule.waves=0". */
static void origin_text(const load_ctx *ctx, int origin, char *buf, size_t n) {
    if (origin >= 0) snprintf(buf, n, "--set %s", ctx->sets[origin]);
    else if (ctx->path) snprintf(buf, n, "%s", ctx->path);
    else snprintf(buf, n, "the defaults");
}

/* Where a single key's value came from. */
static void where_key(const load_ctx *ctx, const key_spec *k, char *buf, size_t n) {
    origin_text(ctx, ctx->origin[key_index(k)], buf, n);
}

/* Where a combination of keys came from: each distinct origin once, joined
 * by " and " ("configs/x.json and --set model.heads=5"). A default counts
 * as the file when there is one, since the file chose to leave it. */
static void where_keys(const load_ctx *ctx, const char *const *names, int n_names,
                       char *buf, size_t n) {
    int seen_file = 0, used_sets[N_KEYS], n_used = 0;
    for (int i = 0; i < n_names; i++) {
        const key_spec *k = find_key(names[i]);
        int o = k ? ctx->origin[key_index(k)] : ORIGIN_DEFAULT;
        if (o < 0) { seen_file |= (o == ORIGIN_FILE || ctx->path); continue; }
        int dup = 0;
        for (int j = 0; j < n_used; j++) dup |= used_sets[j] == o;
        if (!dup) used_sets[n_used++] = o;
    }
    buf[0] = '\0';
    size_t used = 0;
    if (seen_file) used += (size_t)snprintf(buf, n, "%s", ctx->path);
    for (int j = 0; j < n_used && used < n; j++)
        used += (size_t)snprintf(buf + used, n - used, "%s--set %s", used ? " and " : "",
                                 ctx->sets[used_sets[j]]);
    if (!buf[0]) snprintf(buf, n, "the defaults");
}

/* ------------------------------------------------------------------------
 * Defaults and freeing
 */

/* BERT's [MASK] in bert-base-uncased's 30522-id vocabulary is 103; any
 * other vocabulary gets its last id, which no tokenizer's text produces
 * when the vocabulary was sized with one id to spare. */
static int default_mask_token(int vocab) { return vocab == 30522 ? 103 : vocab - 1; }

/* The model keys whose default follows from others: kv_heads (0: heads),
 * ffn_dim (0: 4 d_model), tie_embeddings (null: tied except Llama) and
 * mask_token (-1: default_mask_token). */
static void derive_model(hy_model_shape *m) {
    if (m->kv_heads == 0) m->kv_heads = m->heads;
    if (m->ffn_dim == 0) m->ffn_dim = 4 * m->d_model;
    if (m->positions == 0) m->positions = m->seq_len;
    if (m->tie_embeddings < 0) m->tie_embeddings = m->kind != HY_MODEL_LLAMA;
    if (m->mask_token < 0) m->mask_token = default_mask_token(m->vocab);
}

void hy_config_init(hy_config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < N_KEYS; i++) {
        const key_spec *k = &KEYS[i];
        void *f = field(c, k->off);
        switch (k->type) {
        case K_INT: case K_BOOL: case K_ENUM: *(int *)f = (int)k->def; break;
        case K_SEED: *(unsigned long long *)f = (unsigned long long)k->def; break;
        case K_REAL: *(double *)f = k->def; break;
        /* The default strings are the table's own: hy_config_free knows
         * them by address and does not free them, so init allocates nothing. */
        case K_STRING: *(char **)f = (char *)k->def_str; break;
        case K_PATHS:
            *(char ***)f = (char **)k->def_list;
            *(int *)field(c, k->n_off) = 1;
            break;
        case K_INTS: case K_SECTION: break;   /* memset: empty arrays */
        }
    }
    c->train.min_lr = c->train.lr / 10;       /* the derived default */
    c->model.mask_token = -1;
    derive_model(&c->model);
}

static void free_string(const key_spec *k, char **s) {
    if (*s != k->def_str) free(*s);
    *s = NULL;
}

static void free_paths(const key_spec *k, char ***list, int *n) {
    if (*list != (char **)k->def_list) {
        for (int i = 0; *list && i < *n; i++) free((*list)[i]);
        free(*list);
    }
    *list = NULL;
    *n = 0;
}

void hy_config_free(hy_config *c) {
    if (!c) return;
    for (int i = 0; i < N_KEYS; i++) {
        const key_spec *k = &KEYS[i];
        if (k->type == K_STRING) free_string(k, field(c, k->off));
        if (k->type == K_INTS) free(*(int **)field(c, k->off));
        if (k->type == K_PATHS) free_paths(k, field(c, k->off), field(c, k->n_off));
    }
    free(c->path);
    hy_config_init(c);
}

/* ------------------------------------------------------------------------
 * Reading the file
 */

static int oom(hy_error *err) {
    return hy_fail(err, HY_ERR_RUNTIME, "out of memory while loading the config");
}

/* The whole file into memory, with the OS's reason when that fails. */
static int read_text(const char *path, char **text, size_t *len, hy_error *err) {
    *text = NULL;
    *len = 0;
    int fd, rc = hy_infile_open(path, "config", &fd, err);   /* a regular file, or refused */
    if (rc) return rc;
    size_t cap = 4096;
    char *buf = malloc(cap);
    if (!buf) { close(fd); return oom(err); }
    for (;;) {
        if (*len == cap) {
            if (cap >= MAX_CONFIG_BYTES) {
                free(buf);
                close(fd);
                return hy_fail(err, HY_ERR_INPUT, "config %s is larger than %u bytes; "
                               "is it really a config?", path, MAX_CONFIG_BYTES);
            }
            char *p = realloc(buf, cap * 2);
            if (!p) { free(buf); close(fd); return oom(err); }
            buf = p;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + *len, cap - *len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return hy_fail(err, HY_ERR_INPUT, "cannot read config %s: %s", path, strerror(e));
        }
        if (got == 0) break;
        *len += (size_t)got;
    }
    close(fd);
    *text = buf;
    return HY_OK;
}

static int only_whitespace(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

/* The file as a JSON object. Duplicate keys are errors: with them, which
 * value wins would be an accident of the parser. */
static int parse_file(const char *path, json_t **root, hy_error *err) {
    char *text;
    size_t len;
    int rc = read_text(path, &text, &len, err);
    if (rc) return rc;
    if (only_whitespace(text, len)) {
        free(text);
        return hy_fail(err, HY_ERR_INPUT, "config %s is empty; write a JSON object, "
                       "e.g. {} for all the defaults", path);
    }
    json_error_t je;
    *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!*root)
        return hy_fail(err, HY_ERR_INPUT, "%s:%d:%d: invalid JSON: %s", path, je.line,
                       je.column, je.text);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return hy_fail(err, HY_ERR_INPUT, "config %s must hold a JSON object {...} at the "
                       "top level, got an array", path);
    }
    return HY_OK;
}

/* ------------------------------------------------------------------------
 * Structure: every key known, every section an object
 */

static int unknown_key(const char *full, const char *where, hy_error *err) {
    char hint[512];
    key_hint(full, hint, sizeof hint);
    return hy_fail(err, HY_ERR_INPUT, "unknown key '%s' in %s%s", full, where, hint);
}

/* Checks one object of the file: its keys must be the keys of section
 * `sec` (NULL: the top level); nested sections are checked in turn. */
static int check_object(json_t *obj, const char *sec, const load_ctx *ctx, hy_error *err) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        char full[256];
        snprintf(full, sizeof full, "%s%s%s", sec ? sec : "", sec ? "." : "", key);
        if (strchr(key, '.') && find_key(key) && !sec)
            return hy_fail(err, HY_ERR_INPUT, "unknown key '%s' in %s; in a file, write "
                           "sections as nested objects ({\"%.*s\": {\"%s\": ...}}); "
                           "dotted names are for --set", key, ctx->path,
                           (int)section_len(key), key, leaf_of(key));
        const key_spec *k = strchr(key, '.') ? NULL : find_key(full);
        if (!k || !key_in_section(k, sec)) return unknown_key(full, ctx->path, err);
        if (k->type != K_SECTION) continue;
        if (!json_is_object(v)) {
            char got[96];
            describe_json(v, got, sizeof got);
            return hy_fail(err, HY_ERR_INPUT, "%s in %s must be an object {...} of keys, "
                           "got %s", full, ctx->path, got);
        }
        int rc = check_object(v, full, ctx, err);
        if (rc) return rc;
    }
    return HY_OK;
}

/* The value of a key in the merged object, or NULL when absent; a dotted
 * name walks nested sections ("model.rope_scaling.factor"). */
static json_t *lookup(json_t *root, const char *name) {
    json_t *obj = root;
    const char *p = name;
    for (const char *dot; (dot = strchr(p, '.')); p = dot + 1) {
        char sec[64];
        snprintf(sec, sizeof sec, "%.*s", (int)(dot - p), p);
        obj = json_object_get(obj, sec);
        if (!json_is_object(obj)) return NULL;
    }
    return json_object_get(obj, p);
}

/* ------------------------------------------------------------------------
 * --set key=value, merged into the same object
 */

/* A set's value: JSON when it parses as JSON; for string keys, the text
 * itself otherwise (so `schedule.kind=hanayo` needs no quotes). A list of
 * paths takes a JSON array too (`data.train=["a.bin","b.bin"]`). */
static json_t *set_value(const key_spec *k, const char *text, const char *set, hy_error *err) {
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    int stringy = k->type == K_STRING || k->type == K_ENUM || k->type == K_PATHS;
    if (stringy && v && (json_is_string(v) || json_is_null(v))) return v;
    if (k->type == K_PATHS && v && json_is_array(v)) return v;
    if (stringy) {
        json_decref(v);
        v = json_string(text);
        if (!v) hy_fail(err, HY_ERR_INPUT, "--set %s: the value is not valid UTF-8", set);
        return v;
    }
    if (!v) {
        char want[256];
        describe_range(k, want, sizeof want);
        hy_fail(err, HY_ERR_INPUT, "--set %s: the value is not a JSON value (%s); %s must "
                "be %s", set, text[0] ? je.text : "empty", k->name, want);
    }
    return v;
}

/* Puts v at k's place in root, creating its section when the file has
 * none. Steals v. */
static int put_value(json_t *root, const key_spec *k, json_t *v, hy_error *err) {
    json_t *obj = root;
    const char *p = k->name;
    for (const char *dot; (dot = strchr(p, '.')); p = dot + 1) {
        char sec[64];
        snprintf(sec, sizeof sec, "%.*s", (int)(dot - p), p);
        json_t *next = json_object_get(obj, sec);
        if (!next) {
            next = json_object();
            if (!next || json_object_set_new(obj, sec, next)) { json_decref(v); return oom(err); }
        }
        obj = next;
    }
    if (json_object_set_new(obj, p, v)) return oom(err);
    return HY_OK;
}

static int apply_set(json_t *root, load_ctx *ctx, int i, hy_error *err) {
    const char *set = ctx->sets[i];
    const char *eq = strchr(set, '=');
    if (!eq)
        return hy_fail(err, HY_ERR_INPUT, "--set %s: expected key=value, e.g. --set "
                       "schedule.waves=2", set);
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(eq - set), set);
    if (!name[0])
        return hy_fail(err, HY_ERR_INPUT, "--set %s: the key before '=' is missing", set);
    char where[320];
    snprintf(where, sizeof where, "--set %s", set);
    const key_spec *k = find_key(name);
    if (!k) return unknown_key(name, where, err);
    if (k->type == K_SECTION)
        return hy_fail(err, HY_ERR_INPUT, "--set %s: '%s' is a section; set its keys one "
                       "at a time, e.g. --set %s=...", set, name, KEYS[key_index(k) + 1].name);
    json_t *v = set_value(k, eq + 1, set, err);
    if (!v) return err ? err->status : HY_ERR_INPUT;
    int rc = put_value(root, k, v, err);
    if (!rc) ctx->origin[key_index(k)] = i;
    return rc;
}

/* ------------------------------------------------------------------------
 * Reading each key: type and range
 */

static int in_real_range(const key_spec *k, double x) {
    if ((k->flags & F_LO_OPEN) ? !(x > k->lo) : !(x >= k->lo)) return 0;
    if ((k->flags & F_HI_OPEN) ? !(x < k->hi) : !(x <= k->hi)) return 0;
    return 1;
}

/* F_FLOAT: x as the float it becomes is finite, normal unless 0 (and 0
 * only when x is), and in range. */
static int in_float_range(const key_spec *k, double x) {
    float f = (float)x;
    if (!isfinite(f) || (f == 0) != (x == 0) || (f != 0 && fabsf(f) < FLT_MIN)) return 0;
    return in_real_range(k, (double)f);
}

static int bad_value(const key_spec *k, const char *index, const json_t *v,
                     const load_ctx *ctx, hy_error *err) {
    char want[256], got[96], where[320];
    describe_range(k, want, sizeof want);
    if (k->type == K_PATHS && index[0]) {
        snprintf(want, sizeof want, "a non-empty string");
    } else if (k->type == K_INTS && index[0]) {
        char lo[32], hi[32];
        fmt_real(k->lo, lo, sizeof lo);
        fmt_real(k->hi, hi, sizeof hi);
        snprintf(want, sizeof want, "an integer in %s..%s", lo, hi);
    }
    describe_json(v, got, sizeof got);
    /* In range as a double but not as a float: say what the float is. */
    if (k->type == K_REAL && (k->flags & F_FLOAT) && json_is_number(v) &&
        in_real_range(k, json_number_value(v))) {
        char as[32];
        fmt_real((double)(float)json_number_value(v), as, sizeof as);
        size_t used = strlen(got);
        snprintf(got + used, sizeof got - used, " (%s as a 32-bit float)", as);
    }
    /* 4.0 is a JSON real, not an integer: say what to write instead. */
    int integral = k->type == K_INT || k->type == K_SEED || k->type == K_INTS;
    double x = json_is_real(v) ? json_real_value(v) : 0.5;
    if (integral && x == floor(x) && fabs(x) < 1e15) {
        size_t used = strlen(got);
        snprintf(got + used, sizeof got - used, " (a real; write %.0f)", x);
    }
    where_key(ctx, k, where, sizeof where);
    return hy_fail(err, HY_ERR_INPUT, "%s%s in %s must be %s, got %s", k->name, index, where,
                   want, got);
}

static int int_in_range(const key_spec *k, const json_t *v) {
    if (!json_is_integer(v)) return 0;
    json_int_t x = json_integer_value(v);
    return (double)x >= k->lo && (double)x <= k->hi;
}

static int read_ints(hy_config *c, const key_spec *k, const json_t *v, const load_ctx *ctx,
                     hy_error *err) {
    if (!json_is_array(v) || json_array_size(v) > (size_t)k->max_len)
        return bad_value(k, "", v, ctx, err);
    size_t n = json_array_size(v);
    int *a = n ? malloc(n * sizeof *a) : NULL;
    if (n && !a) return oom(err);
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(v, i);
        if (!int_in_range(k, e)) {
            free(a);
            char index[32];
            snprintf(index, sizeof index, "[%zu]", i);
            return bad_value(k, index, e, ctx, err);
        }
        a[i] = (int)json_integer_value(e);
    }
    int **slot = field(c, k->off);
    free(*slot);
    *slot = a;
    *(int *)field(c, k->n_off) = (int)n;
    return HY_OK;
}

static int read_string(hy_config *c, const key_spec *k, const json_t *v, const load_ctx *ctx,
                       hy_error *err) {
    char **slot = field(c, k->off);
    if (json_is_null(v) && (k->flags & F_NULLABLE)) { free_string(k, slot); return HY_OK; }
    /* An embedded NUL would silently cut the path short. */
    if (!json_is_string(v) || json_string_length(v) == 0 ||
        strlen(json_string_value(v)) != json_string_length(v))
        return bad_value(k, "", v, ctx, err);
    char *s = strdup(json_string_value(v));
    if (!s) return oom(err);
    free_string(k, slot);
    *slot = s;
    return HY_OK;
}

/* A non-empty string without a NUL inside (which would cut a path short). */
static int path_string(const json_t *v) {
    return json_is_string(v) && json_string_length(v) > 0 &&
           strlen(json_string_value(v)) == json_string_length(v);
}

static int read_paths(hy_config *c, const key_spec *k, const json_t *v, const load_ctx *ctx,
                      hy_error *err) {
    int single = json_is_string(v);
    if (!single && (!json_is_array(v) || json_array_size(v) == 0 ||
                    json_array_size(v) > (size_t)INT_MAX))
        return bad_value(k, "", v, ctx, err);
    if (single && !path_string(v)) return bad_value(k, "", v, ctx, err);
    size_t n = single ? 1 : json_array_size(v);
    char **list = calloc(n, sizeof *list);
    if (!list) return oom(err);
    int rc = HY_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        const json_t *e = single ? v : json_array_get(v, i);
        if (!path_string(e)) {
            char index[32];
            snprintf(index, sizeof index, "[%zu]", i);
            rc = bad_value(k, index, e, ctx, err);
        } else if (!(list[i] = strdup(json_string_value(e)))) {
            rc = oom(err);
        }
    }
    if (rc) {
        for (size_t i = 0; i < n; i++) free(list[i]);
        free(list);
        return rc;
    }
    free_paths(k, field(c, k->off), field(c, k->n_off));
    *(char ***)field(c, k->off) = list;
    *(int *)field(c, k->n_off) = (int)n;
    return HY_OK;
}

static int read_enum(hy_config *c, const key_spec *k, const json_t *v, const load_ctx *ctx,
                     hy_error *err) {
    if (json_is_string(v))
        for (int i = 0; i < k->n_enum; i++)
            if (strcmp(json_string_value(v), k->enum_name(i)) == 0) {
                *(int *)field(c, k->off) = i;
                return HY_OK;
            }
    int rc = bad_value(k, "", v, ctx, err);
    if (json_is_string(v) && err) {
        char hint[128];
        enum_hint(k, json_string_value(v), hint, sizeof hint);
        size_t used = strlen(err->msg);
        snprintf(err->msg + used, sizeof err->msg - used, "%s", hint);
    }
    return rc;
}

/* One key's value from the merged object into c, checked. */
static int read_key(hy_config *c, const key_spec *k, const json_t *v, const load_ctx *ctx,
                    hy_error *err) {
    void *f = field(c, k->off);
    switch (k->type) {
    case K_INT:
        if (!int_in_range(k, v)) return bad_value(k, "", v, ctx, err);
        *(int *)f = (int)json_integer_value(v);
        return HY_OK;
    case K_SEED:
        if (!json_is_integer(v) || json_integer_value(v) < 0) return bad_value(k, "", v, ctx, err);
        *(unsigned long long *)f = (unsigned long long)json_integer_value(v);
        return HY_OK;
    case K_REAL:
        if (json_is_null(v) && (k->flags & F_NULLABLE)) { *(double *)f = NAN; return HY_OK; }
        if (!json_is_number(v) || !in_real_range(k, json_number_value(v)) ||
            ((k->flags & F_FLOAT) && !in_float_range(k, json_number_value(v))))
            return bad_value(k, "", v, ctx, err);
        *(double *)f = json_number_value(v);
        return HY_OK;
    case K_BOOL:
        if (json_is_null(v) && (k->flags & F_NULLABLE)) { *(int *)f = -1; return HY_OK; }
        if (!json_is_boolean(v)) return bad_value(k, "", v, ctx, err);
        *(int *)f = json_is_true(v);
        return HY_OK;
    case K_STRING: return read_string(c, k, v, ctx, err);
    case K_ENUM:   return read_enum(c, k, v, ctx, err);
    case K_INTS:   return read_ints(c, k, v, ctx, err);
    case K_PATHS:  return read_paths(c, k, v, ctx, err);
    case K_SECTION: return HY_OK;
    }
    return HY_OK;
}

/* ------------------------------------------------------------------------
 * Cross-field checks
 */

/* The schedule parameters that decide the stages. */
static hy_sched_params config_sched(const hy_config *c) {
    hy_sched_params p = { .kind = c->schedule.kind, .ranks = c->schedule.ranks,
                          .waves = c->schedule.waves, .chunks = c->schedule.chunks,
                          .micro_batches = c->schedule.micro_batches };
    return p;
}

/* Stages S of the config's schedule (schedule.h's one definition). */
static int config_stages(const hy_config *c) {
    hy_sched_params p = config_sched(c);
    return hy_sched_stages(&p);
}

/* "hanayo with 2 x waves x ranks = 2 x 1 x 8 = 16 stages" */
static void stages_text(const hy_config *c, char *buf, size_t n) {
    const char *name = hy_sched_name(c->schedule.kind);
    int S = config_stages(c);
    switch (c->schedule.kind) {
    case HY_SCHED_INTERLEAVED:
        snprintf(buf, n, "%s has chunks x ranks = %d x %d = %d stages", name,
                 c->schedule.chunks, c->schedule.ranks, S);
        break;
    case HY_SCHED_HANAYO:
        snprintf(buf, n, "%s has 2 x waves x ranks = 2 x %d x %d = %d stages", name,
                 c->schedule.waves, c->schedule.ranks, S);
        break;
    default:
        snprintf(buf, n, "%s has one stage per rank: %d stages", name, S);
    }
}

#define WHERE(...) do { \
    static const char *const names_[] = { __VA_ARGS__ }; \
    where_keys(ctx, names_, (int)(sizeof names_ / sizeof names_[0]), where, sizeof where); \
} while (0)

static int check_model(const hy_config *c, const load_ctx *ctx, hy_error *err) {
    char where[512];
    /* The LM head holds the vocabulary padded to HY_VOCAB_ALIGN rows
     * (model.h), an int like every dimension the kernels take. */
    int most = INT_MAX / HY_VOCAB_ALIGN * HY_VOCAB_ALIGN;
    if (c->model.vocab > most) {
        WHERE("model.vocab");
        return hy_fail(err, HY_ERR_INPUT, "model.vocab (%d) padded to a multiple of %d rows of "
                       "the LM head passes 2^31 - 1, in %s; give at most %d", c->model.vocab,
                       HY_VOCAB_ALIGN, where, most);
    }
    if (c->model.mask_token >= c->model.vocab) {
        WHERE("model.mask_token", "model.vocab");
        return hy_fail(err, HY_ERR_INPUT, "model.mask_token (%d) must be below model.vocab "
                       "(%d), in %s; give the tokenizer's mask id (bert-base-uncased: [MASK] = "
                       "103)", c->model.mask_token, c->model.vocab, where);
    }
    if (c->model.d_model % c->model.heads != 0) {
        WHERE("model.d_model", "model.heads");
        return hy_fail(err, HY_ERR_INPUT, "model.heads (%d) must divide model.d_model (%d) "
                       "in %s; pick heads so that d_model / heads is a whole head size",
                       c->model.heads, c->model.d_model, where);
    }
    const hy_model_shape *m = &c->model;
    if (m->heads % m->kv_heads != 0) {
        WHERE("model.kv_heads", "model.heads");
        return hy_fail(err, HY_ERR_INPUT, "model.kv_heads (%d) must divide model.heads (%d) in "
                       "%s: each K/V head serves heads / kv_heads query heads; pick a divisor "
                       "of %d", m->kv_heads, m->heads, where, m->heads);
    }
    if (m->kind != HY_MODEL_BERT && m->norm != HY_NORM_PRE) {
        WHERE("model.norm", "model.kind");
        return hy_fail(err, HY_ERR_INPUT, "model.norm is \"%s\" in %s, but %s's norms come "
                       "before each branch (\"pre\"); drop model.norm or use model.kind "
                       "\"bert\"", hy_model_norm_name(m->norm), where,
                       hy_model_name(m->kind));
    }
    if (m->kind == HY_MODEL_LLAMA) {
        const hy_rope_scaling *rs = &m->rope_scaling;
        if (rs->factor != 0 && !(rs->high_freq_factor > rs->low_freq_factor)) {
            WHERE("model.rope_scaling.high_freq_factor", "model.rope_scaling.low_freq_factor");
            return hy_fail(err, HY_ERR_INPUT, "model.rope_scaling.high_freq_factor (%g) must "
                           "exceed low_freq_factor (%g) in %s: the blend runs between them",
                           rs->high_freq_factor, rs->low_freq_factor, where);
        }
        if ((m->d_model / m->heads) % 2 != 0) {
            WHERE("model.d_model", "model.heads");
            return hy_fail(err, HY_ERR_INPUT, "the head size d_model / heads = %d / %d = %d "
                           "must be even in %s: rotary embeddings turn pairs of values",
                           m->d_model, m->heads, m->d_model / m->heads, where);
        }
        return HY_OK;
    }
    /* GPT and BERT have fixed answers to what Llama makes keys of. */
    const char *kind = hy_model_name(m->kind);

    if (m->positions < m->seq_len) {
        WHERE("model.positions", "model.seq_len");
        return hy_fail(err, HY_ERR_INPUT, "model.positions (%d) is below model.seq_len (%d) in "
                       "%s: %s's position table needs a row for each of a sequence's tokens; "
                       "give model.positions >= %d or a model.seq_len <= %d", m->positions,
                       m->seq_len, where, kind, m->seq_len, m->positions);
    }

    if (m->kv_heads != m->heads) {
        WHERE("model.kv_heads", "model.kind");
        return hy_fail(err, HY_ERR_INPUT, "model.kv_heads (%d) differs from model.heads (%d) "
                       "in %s, but %s has no grouped-query attention; drop model.kv_heads or "
                       "use model.kind \"llama\"", m->kv_heads, m->heads, where, kind);
    }
    if (m->ffn_dim != 4 * m->d_model) {
        WHERE("model.ffn_dim", "model.kind");
        return hy_fail(err, HY_ERR_INPUT, "model.ffn_dim (%d) is not 4 x model.d_model (%d) in "
                       "%s, which %s's MLP is; drop model.ffn_dim or use model.kind \"llama\"",
                       m->ffn_dim, 4 * m->d_model, where, kind);
    }
    if (!m->tie_embeddings) {
        WHERE("model.tie_embeddings", "model.kind");
        return hy_fail(err, HY_ERR_INPUT, "model.tie_embeddings is false in %s, but %s's LM "
                       "head is its token embedding; drop the key or use model.kind \"llama\"",
                       where, kind);
    }
    return HY_OK;
}

static int check_stages(const hy_config *c, const load_ctx *ctx, hy_error *err) {
    char where[512], st[128], fits[512];
    int S = config_stages(c);
    stages_text(c, st, sizeof st);
    if (c->schedule.n_layers_per_stage == 0) {
        if (S <= c->model.layers) return HY_OK;
        WHERE("schedule.kind", "schedule.ranks", "schedule.waves", "schedule.chunks",
              "model.layers");
        hy_sched_params p = config_sched(c);
        hy_suggest_stages(&p, c->model.layers, fits, sizeof fits);
        return hy_fail(err, HY_ERR_INPUT, "%s but model.layers is %d, in %s; settings that "
                       "fit: %s", st, c->model.layers, where, fits);
    }
    if (c->schedule.n_layers_per_stage != S) {
        WHERE("schedule.split", "schedule.kind", "schedule.ranks", "schedule.waves",
              "schedule.chunks");
        return hy_fail(err, HY_ERR_INPUT, "schedule.split has %d entries but %s, in %s; "
                       "give one layer count per stage", c->schedule.n_layers_per_stage, st, where);
    }
    int sum = 0;
    for (int i = 0; i < c->schedule.n_layers_per_stage; i++) sum += c->schedule.layers_per_stage[i];
    if (sum != c->model.layers) {
        WHERE("schedule.split", "model.layers");
        return hy_fail(err, HY_ERR_INPUT, "schedule.split sums to %d layers but model.layers "
                       "is %d, in %s; the stages must hold every layer exactly once",
                       sum, c->model.layers, where);
    }
    return HY_OK;
}

static int check_schedule(const hy_config *c, const load_ctx *ctx, hy_error *err) {
    char where[512];
    if (c->schedule.kind == HY_SCHED_INTERLEAVED &&
        c->schedule.micro_batches % c->schedule.ranks != 0) {
        WHERE("schedule.kind", "schedule.micro_batches", "schedule.ranks");
        return hy_fail(err, HY_ERR_INPUT, "interleaved needs schedule.micro_batches (%d) to "
                       "be a multiple of schedule.ranks (%d), in %s; e.g. %d",
                       c->schedule.micro_batches, c->schedule.ranks, where,
                       (c->schedule.micro_batches / c->schedule.ranks + 1) * c->schedule.ranks);
    }
    hy_sched_params sp = { .kind = c->schedule.kind, .ranks = c->schedule.ranks,
                           .waves = c->schedule.waves, .chunks = c->schedule.chunks };
    int least = hy_sched_min_activations(&sp);
    if (c->schedule.max_activations > 0 && c->schedule.max_activations < least) {
        WHERE("schedule.max_activations", "schedule.kind", "schedule.waves", "schedule.chunks");
        return hy_fail(err, HY_ERR_INPUT, "schedule.max_activations (%d) is below the smallest "
                       "cap that runs, %d: one activation of each of the %d stages a %s rank "
                       "holds, in %s; give at least %d, or 0 for no cap",
                       c->schedule.max_activations, least, least,
                       hy_sched_name(c->schedule.kind), where, least);
    }
    if (c->n_devices > c->schedule.ranks) {
        WHERE("devices", "schedule.ranks");
        return hy_fail(err, HY_ERR_INPUT, "devices has %d entries but schedule.ranks is %d, "
                       "in %s; give at most one device per rank", c->n_devices,
                       c->schedule.ranks, where);
    }
    /* One rank runs the whole model: the stages are never built. */
    return c->use == HY_CONFIG_FOR_ONE_RANK ? HY_OK : check_stages(c, ctx, err);
}

static int check_train(const hy_config *c, const load_ctx *ctx, hy_error *err) {
    char where[512], lo[32], hi[32];
    if (c->train.min_lr > c->train.lr) {
        WHERE("train.min_lr", "train.lr");
        fmt_real(c->train.min_lr, lo, sizeof lo);
        fmt_real(c->train.lr, hi, sizeof hi);
        return hy_fail(err, HY_ERR_INPUT, "train.min_lr (%s) must be <= train.lr (%s), in %s",
                       lo, hi, where);
    }
    if (c->train.eval_every > 0 && !c->data.val) {
        WHERE("train.eval_every", "data.val");
        return hy_fail(err, HY_ERR_INPUT, "train.eval_every is %d but data.val is null, in %s; "
                       "name a validation shard or set eval_every to 0", c->train.eval_every,
                       where);
    }
    if (c->checkpoint.every > 0 && !c->checkpoint.dir) {
        WHERE("checkpoint.every", "checkpoint.dir");
        return hy_fail(err, HY_ERR_INPUT, "checkpoint.every is %d but checkpoint.dir is null, "
                       "in %s; set a directory or set every to 0", c->checkpoint.every, where);
    }
    return HY_OK;
}

/* ------------------------------------------------------------------------
 * Loading
 */

/* The defaults that follow the user's own choices (hy_config_init's are
 * those of no file and the default data): no validation shard unless one
 * is named or the training shard is the default synthetic one (`make
 * data` writes both); a config file's checkpoints in a directory named
 * after it (hy_config_derived_dir). */
static int derive_paths(hy_config *c, const load_ctx *ctx, hy_error *err) {
    const key_spec *val = find_key("data.val"), *dir = find_key("checkpoint.dir");
    const key_spec *train = find_key("data.train");
    int default_train = c->data.n_train == 1 && strcmp(c->data.train[0], train->def_str) == 0;
    if (ctx->origin[key_index(val)] == ORIGIN_DEFAULT && !default_train)
        free_string(val, &c->data.val);
    if (ctx->origin[key_index(dir)] == ORIGIN_DEFAULT && ctx->path) {
        char *derived = hy_config_derived_dir(dir->def_str, ctx->path);
        if (!derived) return oom(err);
        free_string(dir, &c->checkpoint.dir);
        c->checkpoint.dir = derived;
    }
    return HY_OK;
}

char *hy_config_derived_dir(const char *top, const char *config) {
    const char *base = strrchr(config, '/');
    base = base ? base + 1 : config;
    size_t n = strlen(base);
    const char *dot = strrchr(base, '.');
    if (dot && dot != base) n = (size_t)(dot - base);
    if (n == 0) {   /* "dir/" or "": a name all the same */
        base = "config";
        n = strlen(base);
    }
    size_t len = strlen(top) + 1 + n + 1;
    char *dir = malloc(len);
    if (dir) snprintf(dir, len, "%s/%.*s", top, (int)n, base);
    return dir;
}

/* Key k set to v read from field `name` of the config.json at path, held
 * to the key's own range as a value the config gave would be (a file's
 * num_hidden_layers 0 is refused, not built). */
static int from_value(hy_config *c, const key_spec *k, double v, const char *path,
                      const char *name, const load_ctx *ctx, hy_error *err) {
    json_t *j = k->type == K_REAL ? json_real(v) : k->type == K_BOOL ? json_boolean(v != 0)
                                                 : json_integer((json_int_t)v);
    if (!j) return hy_fail(err, HY_ERR_RUNTIME, "out of memory reading %s", path);
    int rc = read_key(c, k, j, ctx, err);
    json_decref(j);
    if (rc) {
        char where[PATH_MAX + 128];
        snprintf(where, sizeof where, "model.from: %s: \"%s\" gives ", path, name);
        hy_error_prefix(err, "%s", where);
    }
    return rc;
}

/* model.from: the model keys the config leaves to their defaults, from a
 * Hugging Face Llama's or BERT's config.json (hfconfig.h), the kind with
 * them (BERT: post-LN, derive_norm). */
static int model_from(hy_config *c, const load_ctx *ctx, hy_error *err) {
    char path[PATH_MAX + 32];
    struct stat sb;
    int dir = stat(c->model_from, &sb) == 0 && S_ISDIR(sb.st_mode);
    snprintf(path, sizeof path, "%s%s", c->model_from, dir ? "/config.json" : "");
    hy_model_shape hf;
    int rc = hy_hfconfig_read(path, &hf, err);
    if (rc) {
        hy_error_prefix(err, "model.from: ");
        return rc;
    }
    const key_spec *kind = find_key("model.kind");
    const char *name = hy_model_name(hf.kind);
    if (ctx->origin[key_index(kind)] != ORIGIN_DEFAULT && c->model.kind != hf.kind) {
        char where[512];
        WHERE("model.kind", "model.from");
        return hy_fail(err, HY_ERR_INPUT, "model.from names a %s's config.json but model.kind "
                       "is %s in %s; drop model.kind or make it \"%s\"", name,
                       hy_model_name(c->model.kind), where, name);
    }
    c->model.kind = hf.kind;
    /* BERT's positions are weights: the table's rows, and the sequence
     * length unless the config gives one (shorter: BERT's phase 1) */
    const key_spec *seq = find_key("model.seq_len"), *pos = find_key("model.positions");
    if (hf.kind == HY_MODEL_BERT) {
        if (ctx->origin[key_index(pos)] == ORIGIN_DEFAULT)
            rc = from_value(c, pos, hf.positions, path, "max_position_embeddings", ctx, err);
        if (!rc && ctx->origin[key_index(seq)] == ORIGIN_DEFAULT)
            c->model.seq_len = c->model.positions;
    }
    for (int f = 0; f < HY_HF_FIELDS && !rc; f++) {
        const key_spec *k = find_key(hy_hfconfig_key(f));
        assert(k);
        if (ctx->origin[key_index(k)] != ORIGIN_DEFAULT) continue;   /* given: it wins */
        const char *name = hy_hfconfig_field_of(hf.kind, f);
        rc = from_value(c, k, hy_hfconfig_value(&hf, f), path, name ? name : hy_hfconfig_field(f),
                        ctx, err);
    }
    return rc;
}

/* BERT's defaults, which the kind decides: post-LN (Hugging Face's) and
 * its LayerNorm epsilon 1e-12, unless the config (or model.from's
 * layer_norm_eps) says. */
static void derive_norm(hy_config *c, const load_ctx *ctx) {
    if (c->model.kind != HY_MODEL_BERT) return;
    if (ctx->origin[key_index(find_key("model.norm"))] == ORIGIN_DEFAULT)
        c->model.norm = HY_NORM_POST;
    if (c->model.norm == HY_NORM_POST && !c->model_from &&
        ctx->origin[key_index(find_key("model.norm_eps"))] == ORIGIN_DEFAULT)
        c->model.norm_eps = 1e-12;
}

/* Each key of the merged object into c; then derived defaults and the
 * checks that involve several keys. */
static int resolve(hy_config *c, json_t *root, const load_ctx *ctx, hy_error *err) {
    c->train.min_lr = NAN;                    /* "not given" until read */
    c->model.kv_heads = c->model.ffn_dim = c->model.positions = 0;   /* likewise (derive_model) */
    c->model.tie_embeddings = c->model.mask_token = -1;
    for (int i = 0; i < N_KEYS; i++) {
        const json_t *v = KEYS[i].type == K_SECTION ? NULL : lookup(root, KEYS[i].name);
        int rc = v ? read_key(c, &KEYS[i], v, ctx, err) : HY_OK;
        if (rc) return rc;
    }
    if (isnan(c->train.min_lr)) c->train.min_lr = c->train.lr / 10;
    int rc = c->model_from ? model_from(c, ctx, err) : HY_OK;
    derive_norm(c, ctx);
    derive_model(&c->model);
    if (!rc) rc = derive_paths(c, ctx, err);
    if (!rc) rc = check_model(c, ctx, err);
    if (!rc) rc = check_schedule(c, ctx, err);
    if (!rc) rc = check_train(c, ctx, err);
    return rc;
}

/* Marks the keys the file gives. */
static void mark_file_keys(json_t *root, load_ctx *ctx) {
    for (int i = 0; i < N_KEYS; i++) {
        ctx->origin[i] = ORIGIN_DEFAULT;
        if (KEYS[i].type != K_SECTION && lookup(root, KEYS[i].name)) ctx->origin[i] = ORIGIN_FILE;
    }
}

static int load_into(hy_config *c, const char *path, const char *const *sets, int n_sets,
                     hy_error *err) {
    load_ctx ctx = { .path = path, .sets = sets, .n_sets = n_sets };
    json_t *root = NULL;
    int rc = HY_OK;
    if (path) {
        rc = parse_file(path, &root, err);
        if (!rc) rc = check_object(root, NULL, &ctx, err);
    } else if (!(root = json_object())) {
        rc = oom(err);
    }
    if (!rc) mark_file_keys(root, &ctx);
    for (int i = 0; !rc && i < n_sets; i++) rc = apply_set(root, &ctx, i, err);
    if (!rc) rc = resolve(c, root, &ctx, err);
    if (!rc && path && !(c->path = strdup(path))) rc = oom(err);
    json_decref(root);
    return rc;
}

int hy_config_load_for(hy_config *c, hy_config_use use, const char *path,
                       const char *const *sets, int n_sets, hy_error *err) {
    hy_config_init(c);
    if (n_sets < 0 || (n_sets > 0 && !sets))
        return hy_fail(err, HY_ERR_INPUT, "hy_config_load: bad set list");
    c->use = use;
    int rc = load_into(c, path, sets, n_sets, err);
    if (rc) hy_config_free(c);
    return rc;
}

int hy_config_load(hy_config *c, const char *path, const char *const *sets, int n_sets,
                   hy_error *err) {
    return hy_config_load_for(c, HY_CONFIG_FOR_STAGES, path, sets, n_sets, err);
}

/* ------------------------------------------------------------------------
 * Writing: the resolved config as JSON, and the reference
 */

static void sb_add_value(strbuf *b, const hy_config *c, const key_spec *k) {
    const void *f = cfield(c, k->off);
    char num[64];
    switch (k->type) {
    case K_INT:  sb_add(b, "%d", *(const int *)f); break;
    case K_SEED: sb_add(b, "%llu", *(const unsigned long long *)f); break;
    case K_BOOL:   /* -1: a nullable bool not given */
        sb_add(b, "%s", *(const int *)f < 0 ? "null" : *(const int *)f ? "true" : "false");
        break;
    case K_ENUM: sb_add(b, "\"%s\"", k->enum_name(*(const int *)f)); break;
    case K_REAL:
        if (isnan(*(const double *)f)) { sb_add(b, "null"); break; }
        fmt_json_real(*(const double *)f, num, sizeof num);
        sb_add(b, "%s", num);
        break;
    case K_STRING: {
        const char *s = *(char *const *)f;
        if (s) sb_add_json_string(b, s);
        else sb_add(b, "null");
        break;
    }
    case K_INTS: {
        const int *a = *(int *const *)f;
        int n = *(const int *)cfield(c, k->n_off);
        sb_add(b, "[");
        for (int i = 0; i < n; i++) sb_add(b, "%s%d", i ? ", " : "", a[i]);
        sb_add(b, "]");
        break;
    }
    case K_PATHS: {   /* one entry as the string it may have been written as */
        char *const *a = *(char **const *)f;
        int n = *(const int *)cfield(c, k->n_off);
        if (n != 1) sb_add(b, "[");
        for (int i = 0; i < n; i++) {
            if (i) sb_add(b, ", ");
            sb_add_json_string(b, a[i]);
        }
        if (n != 1) sb_add(b, "]");
        break;
    }
    case K_SECTION: break;
    }
}

/* The members of section `sec` (NULL: top level), at the given indent. */
static void sb_add_members(strbuf *b, const hy_config *c, const char *sec, int indent) {
    int first = 1;
    for (int i = 0; i < N_KEYS; i++) {
        const key_spec *k = &KEYS[i];
        if (!key_in_section(k, sec)) continue;
        sb_add(b, "%s%*s\"%s\": ", first ? "" : ",\n", indent, "", leaf_of(k->name));
        first = 0;
        if (k->type == K_SECTION) {
            sb_add(b, "{\n");
            sb_add_members(b, c, k->name, indent + 2);
            sb_add(b, "\n%*s}", indent, "");
        } else {
            sb_add_value(b, c, k);
        }
    }
}

char *hy_config_to_json(const hy_config *c) {
    strbuf b = { 0 };
    sb_add(&b, "{\n");
    sb_add_members(&b, c, NULL, 2);
    sb_add(&b, "\n}\n");
    return sb_take(&b);
}

/* The columns a UTF-8 text takes: its code points (continuation bytes
 * take none). */
static int text_cols(const char *s, size_t n) {
    int cols = 0;
    for (size_t i = 0; i < n; i++) cols += ((unsigned char)s[i] & 0xc0) != 0x80;
    return cols;
}

/* text as lines of at most width columns, each indented by indent, words
 * kept whole unless one alone is wider than a line; Markdown's code
 * marks (`) dropped: a terminal shows them as they are. */
static void sb_add_wrapped(strbuf *b, const char *text, int indent, int width) {
    int col = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ') p++;
        size_t n = strcspn(p, " ");
        if (!n) break;
        /* The word without its code marks, cut where a line cannot hold it. */
        char word[512];
        size_t w = 0;
        for (size_t i = 0; i < n && w < sizeof word - 1; i++)
            if (p[i] != '`') word[w++] = p[i];
        word[w] = '\0';
        p += n;
        for (const char *q = word; *q; ) {
            int room = width - indent, cols = text_cols(q, strlen(q));
            size_t take = strlen(q);
            if (cols > room) {   /* cut at room columns, on a character's start */
                int c = 0;
                for (take = 0; q[take] && (c < room || ((unsigned char)q[take] & 0xc0) == 0x80);
                     take++)
                    c += ((unsigned char)q[take] & 0xc0) != 0x80;
                cols = room;
            }
            if (col > 0 && col + 1 + cols > width) {
                sb_add(b, "\n");
                col = 0;
            }
            if (col == 0) {
                sb_add(b, "%*s", indent, "");
                col = indent;
            } else {
                sb_add(b, " ");
                col++;
            }
            sb_add(b, "%.*s", (int)take, q);
            col += cols;
            q += take;
        }
    }
    if (col > 0) sb_add(b, "\n");
}

char *hy_config_help_text(int width) {
    if (width < 20) width = 20;
    hy_config d;
    hy_config_init(&d);
    strbuf b = { 0 };
    sb_add_wrapped(&b, "The config keys: each one's allowed values, its default and what it "
                   "does. Give them in the config file (sections as JSON objects) or as "
                   "--set key=value; docs/config.md has them as a table.", 0, width);
    for (int i = 0; i < N_KEYS; i++) {
        const key_spec *k = &KEYS[i];
        if (k->type == K_SECTION) {
            sb_add(&b, "\n");
            strbuf head = { 0 };
            sb_add(&head, "[%s] %s", k->name, k->doc);
            char *h = sb_take(&head);
            if (h) sb_add_wrapped(&b, h, 0, width);
            else b.oom = 1;
            free(h);
            continue;
        }
        char want[256];
        describe_range(k, want, sizeof want);
        strbuf line = { 0 };
        sb_add(&line, "%s; default ", want);
        if (k->def_doc) sb_add(&line, "%s", k->def_doc);
        else sb_add_value(&line, &d, k);
        char *l = sb_take(&line);
        sb_add(&b, "\n");
        sb_add_wrapped(&b, k->name, 0, width);
        if (l) sb_add_wrapped(&b, l, 4, width);
        else b.oom = 1;
        free(l);
        sb_add_wrapped(&b, k->doc, 4, width);
    }
    hy_config_free(&d);
    return sb_take(&b);
}

char *hy_config_reference(void) {
    hy_config d;
    hy_config_init(&d);
    strbuf b = { 0 };
    sb_add(&b, "| key | default | allowed | meaning |\n|---|---|---|---|\n");
    for (int i = 0; i < N_KEYS; i++) {
        const key_spec *k = &KEYS[i];
        if (k->type == K_SECTION) continue;
        char want[256];
        describe_range(k, want, sizeof want);
        sb_add(&b, "| `%s` | ", k->name);
        if (k->def_doc) {
            sb_add(&b, "%s", k->def_doc);
        } else {
            sb_add(&b, "`");
            sb_add_value(&b, &d, k);
            sb_add(&b, "`");
        }
        sb_add(&b, " | %s | %s |\n", want, k->doc);
    }
    hy_config_free(&d);
    return sb_take(&b);
}
