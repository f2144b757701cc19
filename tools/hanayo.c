/*
 * hanayo.c — the command line (DESIGN §7).
 *
 * Parses the command and its flags, strictly (every number must be a whole
 * number or a finite real, fully consumed and in range), and hands the
 * result to one library entry point. Nothing below this file prints or
 * exits: errors come back as hy_error values and main() prints the one
 * message, "hanayo: <message>", and exits with its status — 0 success,
 * 1 runtime failure, 2 bad input; 130 or 143 when SIGINT or SIGTERM
 * stopped a training run (see catch_stop_signals).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "config.h"
#include "data.h"
#include "error.h"
#include "plan.h"
#include "profile.h"
#include "schedule.h"
#include "suggest.h"
#include "train.h"
#include "tune.h"
#include "version.h"

static const char usage_main[] =
    "usage: hanayo <command> [arguments]\n"
    "\n"
    "Trains GPT- and BERT-like transformers with pipeline parallelism, built\n"
    "around the Hanayo wave-like schedule.\n"
    "\n"
    "commands:\n"
    "  train   CONFIG [--set key=value]... [--log-json FILE] [--resume DIR]\n"
    "          train a model\n"
    "  eval    CONFIG [--init WEIGHTS.safetensors] [--data SHARD] [--batches N]\n"
    "          print the loss as one JSON line\n"
    "  plan    CONFIG | --schedule K --ranks P --micro-batches M [...]\n"
    "          show a schedule: timeline, bubble, memory, transfers\n"
    "  profile CONFIG [--steps N] [--out DIR]\n"
    "          time every action of every rank: trace, measured vs predicted bubble\n"
    "  tune    CONFIG [--steps N] [--apply OUT.json]\n"
    "          measure, then search schedule, W, M and layer split by simulation\n"
    "  check   CONFIG [--set key=value]...\n"
    "          validate a config and print it resolved, as JSON\n"
    "  data    synth --out F --tokens N --vocab V [--seed S] | info SHARD\n"
    "          write a synthetic token shard, or inspect one\n"
    "  help [COMMAND]\n"
    "          this text, or one command's\n"
    "\n"
    "  --version  print the version and the compiled backends\n"
    "\n"
    "Exit status: 0 success, 1 runtime failure, 2 bad input; train stopped\n"
    "by SIGINT or SIGTERM: 130 or 143.\n";

static const char usage_plan[] =
    "usage: hanayo plan [CONFIG] [options]\n"
    "\n"
    "Builds a pipeline schedule, simulates it (each rank runs its actions in\n"
    "order; an action starts when its rank is free and its inputs arrived)\n"
    "and shows a timeline per rank with a summary, the plan as JSON, an SVG,\n"
    "or the four schedules side by side. Values come from CONFIG (or the\n"
    "defaults), then --set, then the flags.\n"
    "\n"
    "  --schedule K        gpipe, 1f1b, interleaved or hanayo\n"
    "  --ranks P           pipeline ranks, 1..64\n"
    "  --micro-batches M   micro-batches per iteration, 1..65536\n"
    "  --waves W           hanayo: waves (2W stages per rank), 1..16\n"
    "  --chunks V          interleaved: stages per rank, 1..64\n"
    "  --fwd-cost F        time of one stage's forward (default 1)\n"
    "  --bwd-cost B        time of one stage's backward (default 2)\n"
    "  --comm-cost C       time of one cross-rank transfer (default 0)\n"
    "  --costs FILE        measured costs (ms) from hanayo profile's summary.json:\n"
    "                      its per-stage F and B and transfer cost; with\n"
    "                      --compare every schedule priced from its per-layer\n"
    "                      costs, each with the split the runtime would use\n"
    "  --json              print the plan as JSON instead of the timeline\n"
    "  --svg FILE          also draw the timeline as an SVG into FILE\n"
    "  --compare           one table of all four schedules at this P and M\n"
    "                      (interleaved with v = 2W unless --chunks is given)\n"
    "  --set key=value     override a config key, e.g. schedule.waves=2\n"
    "  --width N           timeline width in columns, 40..100000 (default 120)\n"
    "  --color WHEN        auto (colour on a terminal), always or never\n";

static const char usage_train[] =
    "usage: hanayo train CONFIG [--set key=value]... [--log-json FILE] [--resume DIR]\n"
    "\n"
    "Trains the model of CONFIG with its pipeline schedule, one thread per\n"
    "rank, and prints a progress line every train.log_every steps: step,\n"
    "loss, learning rate, gradient norm, tokens/s, ms/step and time left.\n"
    "\n"
    "  --set key=value   override a config key, e.g. train.steps=50\n"
    "  --log-json FILE   also write one JSON object per step to FILE\n"
    "                    (step, loss, lr, grad_norm, tokens_per_s, ms)\n"
    "  --resume DIR      continue from a checkpoint directory (step_NNNNNN)\n"
    "\n"
    "Checkpoints go to checkpoint.dir every checkpoint.every steps and after\n"
    "the last step; resuming continues bit for bit on the same rank layout.\n"
    "\n"
    "SIGINT (Ctrl-C) or SIGTERM stops the run after the current step: it\n"
    "saves a checkpoint (with a checkpoint.dir), says where it stopped and\n"
    "exits with status 130 (SIGINT) or 143 (SIGTERM). A second signal ends\n"
    "it at once.\n";

static const char usage_eval[] =
    "usage: hanayo eval CONFIG [--init WEIGHTS.safetensors] [--data SHARD]\n"
    "                   [--batches N] [--set key=value]...\n"
    "\n"
    "Prints the model's mean loss over N batches read in order from the start\n"
    "of SHARD as one JSON line: {\"loss\": x, \"batches\": n, \"tokens\": t}.\n"
    "\n"
    "  --init FILE       weights to evaluate (Hugging Face GPT-2 names);\n"
    "                    default: the config's init, else its seeded init\n"
    "  --data SHARD      token shard (default: data.val, else data.train)\n"
    "  --batches N       batches of micro_batch_size x seq_len tokens\n"
    "                    (default: every whole batch in the shard)\n"
    "  --set key=value   override a config key\n";

static const char usage_check[] =
    "usage: hanayo check CONFIG [--set key=value]...\n"
    "\n"
    "Loads CONFIG, applies the --set overrides, validates everything and\n"
    "prints the resolved configuration as JSON. Exit status 2 names the\n"
    "file, the key and the fix when something is wrong.\n";

static const char usage_data[] =
    "usage: hanayo data synth --out FILE --tokens N --vocab V [--seed S]\n"
    "                         [--val-out FILE [--val-tokens N]]\n"
    "       hanayo data info SHARD [--vocab V] [--json]\n"
    "\n"
    "Token shards are llm.c's format: a 1024-byte header (magic 20240520,\n"
    "version 1, token count), then the token ids as uint16.\n"
    "\n"
    "synth writes a deterministic synthetic corpus with learnable structure\n"
    "(a sparse random Markov chain mixed with repeated phrases: about 1.6\n"
    "bits per token at vocab 512, against 9 for random ids), so a new model's\n"
    "loss falls at once. The same seed gives the same bytes.\n"
    "  --out FILE          the shard to write (atomically; the directory must exist)\n"
    "  --tokens N          its token count, 1..2147483647\n"
    "  --vocab V           ids 0..V-1, 2..65536: the config's model.vocab\n"
    "  --seed S            0..2147483647 (default 1)\n"
    "  --val-out FILE      also write a validation shard: the same language,\n"
    "                      different text\n"
    "  --val-tokens N      its token count (default: a tenth of --tokens)\n"
    "\n"
    "info checks a shard and prints its token count, file size, the ids seen\n"
    "and entropy estimates in bits/token (unigram; next|prev when every id\n"
    "is below 4096).\n"
    "  --vocab V           also check every id is below V (exit 2 if not)\n"
    "  --json              print one JSON line instead\n";

static const char usage_profile[] =
    "usage: hanayo profile CONFIG [--steps N] [--out DIR] [--set key=value]...\n"
    "\n"
    "Trains 2 warm-up steps (the eager one and the recorded one), then N\n"
    "measured steps with a clock stamp around every action of every rank:\n"
    "its start, its input received, its compute done, its output sent. Prints\n"
    "per rank compute / copy / wait / blocked / tail / idle time, per stage\n"
    "the measured F and B cost, and the measured bubble beside the simulator's\n"
    "prediction from those costs and the uniform-cost ideal.\n"
    "Writes into DIR (default profile/<config name>; created):\n"
    "  trace.json     Chrome trace: one track per rank, an event per action,\n"
    "                 waits, transfers as arrows (Perfetto, chrome://tracing)\n"
    "  summary.json   every figure, per-stage and per-layer costs; feed it to\n"
    "                 hanayo plan --costs\n"
    "  timeline.svg   the last measured step, drawn like hanayo plan --svg\n"
    "  bars.svg       per rank, where the step goes\n"
    "\n"
    "  --steps N           measured steps, 1..1000 (default 5)\n"
    "  --out DIR           where the files go\n"
    "  --set key=value     override a config key, e.g. schedule.micro_batches=16\n"
    "  --slow-stage S:SEC  test hook: every action of stage S first holds its\n"
    "                      rank for SEC seconds (0..60), as a slower stage would\n";

static const char usage_tune[] =
    "usage: hanayo tune CONFIG [--steps N] [--top K] [--apply OUT.json]\n"
    "                   [--memory-gb G] [--schedule K] [--set key=value]...\n"
    "\n"
    "Profiles CONFIG briefly (as hanayo profile, writing no files), fits a\n"
    "per-layer cost model to the measured stage costs (a layer's F and B, what\n"
    "the first and the last stage cost beyond their layers, a transfer), and\n"
    "searches with the simulator: schedule (gpipe, 1f1b, interleaved v = 2..4,\n"
    "hanayo W = 1..4), micro-batches M = P, 2P, .. 8P, and the layer split.\n"
    "Candidates over the memory budget are dropped. M changes the tokens per\n"
    "step, so candidates are ranked by predicted time per token; each schedule\n"
    "is shown by its best M and split, beside the config as it is.\n"
    "\n"
    "  --steps N           measured steps, 1..1000 (default 5)\n"
    "  --top K             print the best K schedules, 1..100 (default 5)\n"
    "  --apply OUT.json    write CONFIG with the best candidate's schedule.kind,\n"
    "                      waves or chunks, micro_batches and split (--set\n"
    "                      values are measured with but not written)\n"
    "  --memory-gb G       memory per rank in GiB (default: the GPU's memory,\n"
    "                      or on the CPU the host's memory over the ranks)\n"
    "  --schedule K        search only this schedule\n"
    "  --set key=value     override a config key for the measurement\n"
    "  --slow-stage S:SEC  test hook, as in hanayo profile\n";

/* ------------------------------------------------------------------------
 * Argument reading
 * ------------------------------------------------------------------------ */

/* A cursor over one command's arguments. A flag is "--name" or
 * "--name=value"; `flag` and `inline_val` describe the current one. */
typedef struct {
    int argc;
    char **argv;
    int i;
    const char *cmd;
    char flag[64];
    const char *inline_val;   /* the part after '=', or NULL */
} args;

/* Splits argv[a->i] into flag and inline value. 0 when it is not a flag. */
static int read_flag(args *a) {
    const char *s = a->argv[a->i];
    if (s[0] != '-' || s[1] == '\0') return 0;
    const char *eq = strchr(s, '=');
    size_t n = eq ? (size_t)(eq - s) : strlen(s);
    if (n >= sizeof a->flag) n = sizeof a->flag - 1;
    memcpy(a->flag, s, n);
    a->flag[n] = '\0';
    a->inline_val = eq ? eq + 1 : NULL;
    return 1;
}

/* The value of the current flag: inline, or the next argument (which must
 * not itself be a flag, so "--ranks --json" reports the missing value). */
static int flag_value(args *a, const char *example, const char **val,
                      hy_error *err) {
    if (a->inline_val) {
        *val = a->inline_val;
        return HY_OK;
    }
    if (a->i + 1 >= a->argc || strncmp(a->argv[a->i + 1], "--", 2) == 0)
        return hy_fail(err, HY_ERR_INPUT, "%s needs a value, e.g. %s %s",
                       a->flag, a->flag, example);
    *val = a->argv[++a->i];
    return HY_OK;
}

static int no_value(const args *a, hy_error *err) {
    if (!a->inline_val) return HY_OK;
    return hy_fail(err, HY_ERR_INPUT, "%s takes no value; write just %s",
                   a->flag, a->flag);
}

/* A whole number in [lo, hi], all of s and nothing else. */
static int parse_int(const char *flag, const char *s, long lo, long hi,
                     int *out, hy_error *err) {
    char *end = NULL;
    errno = 0;
    long v = (s[0] == '\0' || s[0] == ' ' || s[0] == '\t') ? 0 : strtol(s, &end, 10);
    if (!end || end == s || *end != '\0')
        return hy_fail(err, HY_ERR_INPUT, "%s: '%s' is not a whole number; "
                       "give one from %ld to %ld", flag, s, lo, hi);
    if (errno == ERANGE || v < lo || v > hi)
        return hy_fail(err, HY_ERR_INPUT, "%s: %s is out of range; give a "
                       "number from %ld to %ld", flag, s, lo, hi);
    *out = (int)v;
    return HY_OK;
}

/* A finite cost in [0, 1e12], all of s and nothing else. */
static int parse_cost(const char *flag, const char *s, double *out,
                      hy_error *err) {
    char *end = NULL;
    errno = 0;
    double v = (s[0] == '\0' || s[0] == ' ' || s[0] == '\t') ? 0 : strtod(s, &end);
    if (!end || end == s || *end != '\0' || !isfinite(v))
        return hy_fail(err, HY_ERR_INPUT, "%s: '%s' is not a number; give a "
                       "time such as 1 or 0.5", flag, s);
    if (errno == ERANGE || v < 0 || v > 1e12)
        return hy_fail(err, HY_ERR_INPUT, "%s: %s is out of range; give a "
                       "time from 0 to 1e12", flag, s);
    *out = v;
    return HY_OK;
}

static int member(const char *s, const char *const *names) {
    for (int i = 0; names[i]; i++)
        if (!strcmp(s, names[i])) return 1;
    return 0;
}

static int unknown_flag(const args *a, const char *const *flags,
                        hy_error *err) {
    const char *near = hy_closest(a->flag, flags);
    if (near)
        return hy_fail(err, HY_ERR_INPUT, "unknown flag '%s' for '%s'; did "
                       "you mean %s? (hanayo %s --help lists them)",
                       a->flag, a->cmd, near, a->cmd);
    return hy_fail(err, HY_ERR_INPUT, "unknown flag '%s' for '%s'; run "
                   "'hanayo %s --help' for the list", a->flag, a->cmd, a->cmd);
}

/* CONFIG: at most one positional argument. */
static int take_config(const args *a, const char **config, hy_error *err) {
    if (*config)
        return hy_fail(err, HY_ERR_INPUT, "'%s' takes one config file, got "
                       "'%s' and '%s' (flags start with --)",
                       a->cmd, *config, a->argv[a->i]);
    *config = a->argv[a->i];
    return HY_OK;
}

/* ------------------------------------------------------------------------
 * hanayo plan
 * ------------------------------------------------------------------------ */

static const char *const plan_flags[] = {
    "--schedule", "--ranks", "--micro-batches", "--waves", "--chunks",
    "--fwd-cost", "--bwd-cost", "--comm-cost", "--json", "--svg",
    "--compare", "--set", "--width", "--color", "--costs", "--help", NULL};

static int plan_color(const char *when, int *color, hy_error *err) {
    if (strcmp(when, "always") == 0) *color = 1;
    else if (strcmp(when, "never") == 0) *color = 0;
    else if (strcmp(when, "auto") == 0) {
        /* Colour only for a person at a terminal that can show it. */
        const char *term = getenv("TERM");
        *color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR") &&
                 !(term && strcmp(term, "dumb") == 0);
    } else
        return hy_fail(err, HY_ERR_INPUT, "--color: '%s' is not auto, "
                       "always or never", when);
    return HY_OK;
}

/* One flag of `hanayo plan` into rq. */
static int plan_flag(args *a, hy_plan_request *rq, const char **sets,
                     const char **color, int *help, hy_error *err) {
    const char *f = a->flag, *v = NULL;
    int st;
    if (!strcmp(f, "--json")) return (rq->json = 1, no_value(a, err));
    if (!strcmp(f, "--compare")) return (rq->compare = 1, no_value(a, err));
    if (!strcmp(f, "--help") || !strcmp(f, "-h")) return (*help = 1, HY_OK);
    if (!member(f, plan_flags)) return unknown_flag(a, plan_flags, err);
    if ((st = flag_value(a, !strcmp(f, "--set") ? "schedule.waves=2"
                           : !strcmp(f, "--schedule") ? "hanayo"
                           : !strcmp(f, "--svg") ? "plan.svg"
                           : !strcmp(f, "--costs") ? "profile/tiny-gpt/summary.json"
                           : !strcmp(f, "--color") ? "never" : "4",
                         &v, err)) != HY_OK)
        return st;
    if (!strcmp(f, "--schedule")) {
        rq->has_kind = 1;
        return hy_sched_parse(v, &rq->kind, err);
    }
    if (!strcmp(f, "--ranks")) return parse_int(f, v, 1, HY_MAX_RANKS, &rq->ranks, err);
    if (!strcmp(f, "--micro-batches"))
        return parse_int(f, v, 1, 65536, &rq->micro_batches, err);
    if (!strcmp(f, "--waves")) return parse_int(f, v, 1, 16, &rq->waves, err);
    if (!strcmp(f, "--chunks")) return parse_int(f, v, 1, 64, &rq->chunks, err);
    if (!strcmp(f, "--fwd-cost")) return parse_cost(f, v, &rq->fwd_cost, err);
    if (!strcmp(f, "--bwd-cost")) return parse_cost(f, v, &rq->bwd_cost, err);
    if (!strcmp(f, "--comm-cost")) return parse_cost(f, v, &rq->comm_cost, err);
    if (!strcmp(f, "--width")) return parse_int(f, v, 40, 100000, &rq->timeline.width, err);
    if (!strcmp(f, "--svg")) {
        if (!*v) return hy_fail(err, HY_ERR_INPUT, "--svg needs a file name");
        rq->svg = v;
        return HY_OK;
    }
    if (!strcmp(f, "--color")) return (*color = v, HY_OK);
    if (!strcmp(f, "--costs")) {
        if (!*v) return hy_fail(err, HY_ERR_INPUT, "--costs needs a file: a profile's summary.json");
        rq->costs = v;
        return HY_OK;
    }
    sets[rq->n_sets++] = v;   /* --set; the config checks key and value */
    return HY_OK;
}

static int cmd_plan(args *a, hy_error *err) {
    hy_plan_request rq;
    hy_plan_request_init(&rq);
    /* At most one --set per argument, so argc bounds them. */
    const char **sets = malloc(sizeof *sets * (size_t)a->argc);
    if (!sets) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    const char *color = "auto";
    int help = 0, st = HY_OK;
    for (; st == HY_OK && a->i < a->argc; a->i++) {
        if (read_flag(a)) st = plan_flag(a, &rq, sets, &color, &help, err);
        else st = take_config(a, &rq.config, err);
    }
    rq.sets = sets;
    if (st == HY_OK && help) fputs(usage_plan, stdout);
    else if (st == HY_OK) st = plan_color(color, &rq.timeline.color, err);
    if (st == HY_OK && !help) st = hy_plan_run(&rq, stdout, err);
    free(sets);
    return st;
}

/* ------------------------------------------------------------------------
 * hanayo check
 * ------------------------------------------------------------------------ */

static const char *const check_flags[] = {"--set", "--help", NULL};

static int check_config(const char *path, const char *const *sets,
                        int n_sets, hy_error *err) {
    hy_config cfg;
    hy_config_init(&cfg);
    int st = hy_config_load(&cfg, path, sets, n_sets, err);
    if (st == HY_OK) {
        char *json = hy_config_to_json(&cfg);
        if (json) printf("%s\n", json);
        else st = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        free(json);
    }
    hy_config_free(&cfg);
    return st;
}

static int cmd_check(args *a, hy_error *err) {
    const char **sets = malloc(sizeof *sets * (size_t)a->argc);
    if (!sets) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    const char *config = NULL, *v = NULL;
    int n_sets = 0, help = 0, st = HY_OK;
    for (; st == HY_OK && a->i < a->argc; a->i++) {
        if (!read_flag(a)) st = take_config(a, &config, err);
        else if (!strcmp(a->flag, "--help") || !strcmp(a->flag, "-h")) help = 1;
        else if (strcmp(a->flag, "--set") != 0) st = unknown_flag(a, check_flags, err);
        else if ((st = flag_value(a, "schedule.waves=2", &v, err)) == HY_OK)
            sets[n_sets++] = v;
    }
    if (st == HY_OK && help) fputs(usage_check, stdout);
    else if (st == HY_OK && !config)
        st = hy_fail(err, HY_ERR_INPUT, "check needs a config file: hanayo "
                     "check CONFIG [--set key=value]...");
    else if (st == HY_OK) st = check_config(config, sets, n_sets, err);
    free(sets);
    return st;
}

/* ------------------------------------------------------------------------
 * hanayo data
 * ------------------------------------------------------------------------ */

static const char *const data_subcommands[] = {"synth", "info", NULL};
static const char *const synth_flags[] = {
    "--out", "--tokens", "--vocab", "--seed", "--val-out", "--val-tokens",
    "--help", NULL};
static const char *const info_flags[] = {"--vocab", "--json", "--help", NULL};

/* One flag of `hanayo data synth` (not --help) into rq. */
static int synth_flag(args *a, hy_synth_request *rq, hy_error *err) {
    const char *f = a->flag, *v = NULL;
    int st, n = 0;
    if (!member(f, synth_flags)) return unknown_flag(a, synth_flags, err);
    int is_file = !strcmp(f, "--out") || !strcmp(f, "--val-out");
    if ((st = flag_value(a, is_file ? "data/train.bin" : "512", &v, err)) != HY_OK)
        return st;
    if (!strcmp(f, "--out")) return (rq->out = v, HY_OK);
    if (!strcmp(f, "--val-out")) return (rq->val_out = v, HY_OK);
    if (!strcmp(f, "--vocab")) return parse_int(f, v, 2, 65536, &rq->vocab, err);
    st = parse_int(f, v, !strcmp(f, "--seed") ? 0 : 1, INT_MAX, &n, err);
    if (!strcmp(f, "--tokens")) rq->tokens = n;
    else if (!strcmp(f, "--val-tokens")) rq->val_tokens = n;
    else rq->seed = (uint64_t)n;
    return st;
}

static int data_synth(args *a, hy_error *err) {
    hy_synth_request rq = {NULL, 0, NULL, 0, 0, 1};
    int help = 0, st = HY_OK;
    for (; st == HY_OK && a->i < a->argc; a->i++) {
        if (!read_flag(a))
            st = hy_fail(err, HY_ERR_INPUT, "data synth takes no file name "
                         "'%s' on its own; give it as --out FILE", a->argv[a->i]);
        else if (!strcmp(a->flag, "--help") || !strcmp(a->flag, "-h")) help = 1;
        else st = synth_flag(a, &rq, err);
    }
    if (st != HY_OK) return st;
    if (help) return (fputs(usage_data, stdout), HY_OK);
    if (!rq.out || !rq.tokens || !rq.vocab)
        return hy_fail(err, HY_ERR_INPUT, "data synth needs %s; e.g. hanayo "
                       "data synth --out data/train.bin --tokens 1000000 --vocab 512",
                       !rq.out ? "--out FILE" : !rq.tokens ? "--tokens N" : "--vocab V");
    if (rq.val_tokens && !rq.val_out)
        return hy_fail(err, HY_ERR_INPUT, "data synth: --val-tokens needs "
                       "--val-out FILE for the validation shard");
    if (rq.val_out && !rq.val_tokens)
        rq.val_tokens = rq.tokens / 10 > 0 ? rq.tokens / 10 : 1;
    return hy_data_synth(&rq, stdout, err);
}

static int data_info(args *a, hy_error *err) {
    const char *shard = NULL, *v = NULL;
    int vocab = 0, json = 0, help = 0, st = HY_OK;
    for (; st == HY_OK && a->i < a->argc; a->i++) {
        int is_flag = read_flag(a);
        if (!is_flag && shard)
            st = hy_fail(err, HY_ERR_INPUT, "data info takes one shard, got "
                         "'%s' and '%s' (flags start with --)", shard, a->argv[a->i]);
        else if (!is_flag) shard = a->argv[a->i];
        else if (!strcmp(a->flag, "--help") || !strcmp(a->flag, "-h")) help = 1;
        else if (!strcmp(a->flag, "--json")) st = (json = 1, no_value(a, err));
        else if (strcmp(a->flag, "--vocab") != 0) st = unknown_flag(a, info_flags, err);
        else if ((st = flag_value(a, "512", &v, err)) == HY_OK)
            st = parse_int(a->flag, v, 1, INT_MAX, &vocab, err);
    }
    if (st != HY_OK) return st;
    if (help) return (fputs(usage_data, stdout), HY_OK);
    if (!shard)
        return hy_fail(err, HY_ERR_INPUT, "data info needs a shard: hanayo "
                       "data info SHARD [--vocab V] [--json]");
    return hy_data_info(shard, vocab, json, stdout, err);
}

static int cmd_data(args *a, hy_error *err) {
    const char *sub = a->i < a->argc ? a->argv[a->i++] : NULL;
    if (!sub)
        return hy_fail(err, HY_ERR_INPUT, "data needs a subcommand: synth or "
                       "info (hanayo data --help)");
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help"))
        return (fputs(usage_data, stdout), HY_OK);
    /* The subcommand names itself in flag errors ("unknown flag '--x' for
     * 'data synth'; run 'hanayo data synth --help'"). */
    if (!strcmp(sub, "synth")) return (a->cmd = "data synth", data_synth(a, err));
    if (!strcmp(sub, "info")) return (a->cmd = "data info", data_info(a, err));
    const char *near = hy_closest(sub, data_subcommands);
    if (near)
        return hy_fail(err, HY_ERR_INPUT, "unknown data subcommand '%s'; did "
                       "you mean '%s'? (hanayo data --help)", sub, near);
    return hy_fail(err, HY_ERR_INPUT, "unknown data subcommand '%s'; give "
                   "synth or info (hanayo data --help)", sub);
}

/* ------------------------------------------------------------------------
 * hanayo profile and hanayo tune
 * ------------------------------------------------------------------------ */

static const char *const profile_flags[] = {
    "--steps", "--out", "--set", "--slow-stage", "--help", NULL};
static const char *const tune_flags[] = {
    "--steps", "--top", "--apply", "--memory-gb", "--schedule", "--set", "--slow-stage",
    "--help", NULL};

/* --slow-stage S:SECONDS, the test hook (runtime.h, hy_runtime_slow_stage). */
static int parse_slow_stage(const char *v, hy_profile_opts *o, hy_error *err) {
    const char *colon = strchr(v, ':');
    char stage[32];
    if (!colon || (size_t)(colon - v) >= sizeof stage)
        return hy_fail(err, HY_ERR_INPUT, "--slow-stage: '%s' is not STAGE:SECONDS, e.g. 0:0.02", v);
    memcpy(stage, v, (size_t)(colon - v));
    stage[colon - v] = '\0';
    int st = parse_int("--slow-stage", stage, 0, 64 * HY_MAX_RANKS, &o->slow_stage, err);
    if (st == HY_OK) st = parse_cost("--slow-stage", colon + 1, &o->slow_seconds, err);
    if (st == HY_OK && o->slow_seconds >= 60)
        st = hy_fail(err, HY_ERR_INPUT, "--slow-stage: %s seconds is out of range; give less "
                     "than 60", colon + 1);
    return st;
}

/* The flags profile and tune share (not --help). 1 in *taken when f was
 * one of them. */
static int measure_flag(args *a, const char **sets, int *n_sets, hy_profile_opts *o,
                        int *taken, hy_error *err) {
    const char *f = a->flag, *v = NULL;
    int st;
    *taken = 1;
    if (!strcmp(f, "--steps")) {
        if ((st = flag_value(a, "5", &v, err)) != HY_OK) return st;
        return parse_int(f, v, 1, 1000, &o->steps, err);
    }
    if (!strcmp(f, "--slow-stage")) {
        if ((st = flag_value(a, "0:0.02", &v, err)) != HY_OK) return st;
        return parse_slow_stage(v, o, err);
    }
    if (!strcmp(f, "--set")) {
        if ((st = flag_value(a, "schedule.micro_batches=16", &v, err)) != HY_OK) return st;
        sets[(*n_sets)++] = v;
        return HY_OK;
    }
    *taken = 0;
    return HY_OK;
}

static int cmd_profile(args *a, hy_error *err) {
    const char **sets = malloc(sizeof *sets * (size_t)a->argc);
    if (!sets) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    hy_profile_request rq = { .config = NULL, .sets = sets, .n_sets = 0, .out = NULL };
    hy_profile_opts_init(&rq.opts);
    int help = 0, st = HY_OK, taken = 0;
    for (; st == HY_OK && a->i < a->argc; a->i++) {
        if (!read_flag(a)) st = take_config(a, &rq.config, err);
        else if (!strcmp(a->flag, "--help") || !strcmp(a->flag, "-h")) help = 1;
        else if ((st = measure_flag(a, sets, &rq.n_sets, &rq.opts, &taken, err)) != HY_OK || taken) continue;
        else if (strcmp(a->flag, "--out") != 0) st = unknown_flag(a, profile_flags, err);
        else if ((st = flag_value(a, "profile/tiny-gpt", &rq.out, err)) == HY_OK && !*rq.out)
            st = hy_fail(err, HY_ERR_INPUT, "--out needs a directory name");
    }
    if (st == HY_OK && help) fputs(usage_profile, stdout);
    else if (st == HY_OK && !rq.config)
        st = hy_fail(err, HY_ERR_INPUT, "profile needs a config file: hanayo profile CONFIG "
                     "[--steps N] [--out DIR]");
    else if (st == HY_OK) st = hy_profile_cmd(&rq, stdout, err);
    free(sets);
    return st;
}

/* One flag of tune's own (not the shared ones, not --help). */
static int tune_flag(args *a, hy_tune_request *rq, hy_error *err) {
    const char *f = a->flag, *v = NULL;
    int st;
    if (!member(f, tune_flags)) return unknown_flag(a, tune_flags, err);
    if ((st = flag_value(a, !strcmp(f, "--apply") ? "tuned.json"
                          : !strcmp(f, "--schedule") ? "hanayo" : "4", &v, err)) != HY_OK)
        return st;
    if (!strcmp(f, "--top")) return parse_int(f, v, 1, 100, &rq->top, err);
    if (!strcmp(f, "--memory-gb")) {
        st = parse_cost(f, v, &rq->memory_gb, err);
        if (st == HY_OK && !(rq->memory_gb > 0))
            st = hy_fail(err, HY_ERR_INPUT, "--memory-gb: give a size above 0, e.g. 80");
        return st;
    }
    if (!strcmp(f, "--schedule")) {
        hy_sched_kind k;
        st = hy_sched_parse(v, &k, err);
        if (st == HY_OK) rq->kinds = 1u << k;
        return st;
    }
    if (!*v) return hy_fail(err, HY_ERR_INPUT, "--apply needs a file name");
    rq->apply = v;
    return HY_OK;
}

static int cmd_tune(args *a, hy_error *err) {
    const char **sets = malloc(sizeof *sets * (size_t)a->argc);
    if (!sets) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    hy_tune_request rq;
    hy_tune_request_init(&rq);
    rq.sets = sets;
    int help = 0, st = HY_OK, taken = 0;
    for (; st == HY_OK && a->i < a->argc; a->i++) {
        if (!read_flag(a)) st = take_config(a, &rq.config, err);
        else if (!strcmp(a->flag, "--help") || !strcmp(a->flag, "-h")) help = 1;
        else if ((st = measure_flag(a, sets, &rq.n_sets, &rq.profile, &taken, err)) != HY_OK || taken) continue;
        else st = tune_flag(a, &rq, err);
    }
    if (st == HY_OK && help) fputs(usage_tune, stdout);
    else if (st == HY_OK && !rq.config)
        st = hy_fail(err, HY_ERR_INPUT, "tune needs a config file: hanayo tune CONFIG "
                     "[--steps N] [--apply OUT.json]");
    else if (st == HY_OK) st = hy_tune_cmd(&rq, stdout, err);
    free(sets);
    return st;
}

/* ------------------------------------------------------------------------
 * The command table
 * ------------------------------------------------------------------------ */

static int cmd_help(args *a, hy_error *err);

static const char *const train_flags[] = {"--set", "--log-json", "--resume", "--help", NULL};

/* SIGINT and SIGTERM during `train`: the handler only records the signal;
 * hy_train sees it after the current step, saves a checkpoint and returns,
 * and main exits with 128 + the signal's number (130, 143), as a shell
 * reports a process the signal ended. The handler also puts both signals
 * back to their default action, so a second one while the run winds down
 * (a checkpoint of a large model takes a while) ends the process at once;
 * the checkpoint being written then is lost whole (atomicfile.h), never
 * half-written. The only global state in the program, as a handler
 * needs. */
static volatile sig_atomic_t stop_signal;
static int stop_caught[2];   /* whether SIGINT, SIGTERM got the handler; set before it runs */

static void on_stop_signal(int sig) {
    stop_signal = sig;
    struct sigaction dfl = { .sa_handler = SIG_DFL };   /* sigaction is async-signal-safe */
    if (stop_caught[0]) sigaction(SIGINT, &dfl, NULL);
    if (stop_caught[1]) sigaction(SIGTERM, &dfl, NULL);
}

/* A signal ignored when we start (a script's background job ignores
 * SIGINT; a supervisor may ignore both) stays ignored: whoever started us
 * chose that. Both are blocked while the handler runs, so the second
 * signal always meets the default action. SA_RESTART: the rank threads'
 * waits and the file writes carry on as if nothing happened. */
static void catch_stop_signals(void) {
    const int sigs[2] = { SIGINT, SIGTERM };
    for (int i = 0; i < 2; i++) {
        struct sigaction old, sa = { .sa_handler = on_stop_signal, .sa_flags = SA_RESTART };
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue;
        sigemptyset(&sa.sa_mask);
        sigaddset(&sa.sa_mask, SIGINT);
        sigaddset(&sa.sa_mask, SIGTERM);
        stop_caught[i] = 1;
        if (sigaction(sigs[i], &sa, NULL) != 0) stop_caught[i] = 0;
    }
}

static int cmd_train(args *a, hy_error *err) {
    const char **sets = malloc(sizeof *sets * (size_t)a->argc);
    if (!sets) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    const char *config = NULL, *v = NULL;
    hy_train_opts opts = { .log_json = NULL, .resume = NULL, .stop = &stop_signal };
    int n_sets = 0, help = 0, st = HY_OK;
    for (; st == HY_OK && a->i < a->argc; a->i++) {
        if (!read_flag(a)) st = take_config(a, &config, err);
        else if (!strcmp(a->flag, "--help") || !strcmp(a->flag, "-h")) help = 1;
        else if (!strcmp(a->flag, "--log-json")) st = flag_value(a, "train.jsonl", &opts.log_json, err);
        else if (!strcmp(a->flag, "--resume")) st = flag_value(a, "checkpoints/step_000100", &opts.resume, err);
        else if (strcmp(a->flag, "--set") != 0) st = unknown_flag(a, train_flags, err);
        else if ((st = flag_value(a, "train.steps=50", &v, err)) == HY_OK)
            sets[n_sets++] = v;
    }
    if (st == HY_OK && help) {
        fputs(usage_train, stdout);
    } else if (st == HY_OK && !config) {
        st = hy_fail(err, HY_ERR_INPUT, "train needs a config file: hanayo train CONFIG "
                     "[--set key=value]... [--log-json FILE]");
    } else if (st == HY_OK) {
        hy_config c;
        hy_config_init(&c);
        st = hy_config_load(&c, config, sets, n_sets, err);
        if (st == HY_OK) catch_stop_signals();
        if (st == HY_OK) st = hy_train(&c, &opts, stdout, err);
        hy_config_free(&c);
    }
    free(sets);
    return st;
}

static const char *const eval_flags[] = {"--init", "--data", "--batches", "--set", "--help", NULL};

static int cmd_eval(args *a, hy_error *err) {
    /* --init becomes one more --set, so the config's checks see it. */
    const char **sets = malloc(sizeof *sets * (size_t)(a->argc + 1));
    char *init_set = NULL;
    if (!sets) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    const char *config = NULL, *v = NULL, *data = NULL;
    int n_sets = 0, help = 0, st = HY_OK, batches = 0;
    for (; st == HY_OK && a->i < a->argc; a->i++) {
        if (!read_flag(a)) st = take_config(a, &config, err);
        else if (!strcmp(a->flag, "--help") || !strcmp(a->flag, "-h")) help = 1;
        else if (!strcmp(a->flag, "--data")) st = flag_value(a, "data/synth_val.bin", &data, err);
        else if (!strcmp(a->flag, "--batches")) {
            st = flag_value(a, "20", &v, err);
            if (st == HY_OK) st = parse_int("--batches", v, 1, 1000000, &batches, err);
        } else if (!strcmp(a->flag, "--init")) {
            st = flag_value(a, "model.safetensors", &v, err);
            if (st == HY_OK) {
                free(init_set);
                init_set = malloc(strlen(v) + 6);
                if (!init_set) st = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
                else sprintf(init_set, "init=%s", v);
            }
        } else if (strcmp(a->flag, "--set") != 0) st = unknown_flag(a, eval_flags, err);
        else if ((st = flag_value(a, "model.layers=12", &v, err)) == HY_OK)
            sets[n_sets++] = v;
    }
    if (init_set) sets[n_sets++] = init_set;
    if (st == HY_OK && help) {
        fputs(usage_eval, stdout);
    } else if (st == HY_OK && !config) {
        st = hy_fail(err, HY_ERR_INPUT, "eval needs a config file: hanayo eval CONFIG "
                     "[--init WEIGHTS] [--data SHARD] [--batches N]");
    } else if (st == HY_OK) {
        hy_config c;
        hy_config_init(&c);
        st = hy_config_load(&c, config, sets, n_sets, err);
        if (st == HY_OK) st = hy_eval(&c, data, batches, stdout, err);
        hy_config_free(&c);
    }
    free(init_set);
    free(sets);
    return st;
}

static int cmd_version(args *a, hy_error *err) {
    (void)a;
    (void)err;
    printf("hanayo %s (backends: %s)\n", HY_VERSION, hy_backends_compiled());
    return HY_OK;
}

typedef struct {
    const char *name;
    int (*run)(args *a, hy_error *err);
} command;

static const command commands[] = {
    {"train", cmd_train},   {"eval", cmd_eval},  {"plan", cmd_plan},
    {"profile", cmd_profile}, {"tune", cmd_tune},     {"check", cmd_check},
    {"data", cmd_data},
    {"help", cmd_help},       {"--help", cmd_help},   {"-h", cmd_help},
    {"--version", cmd_version},
};

static const char *const command_names[] = {
    "train", "eval", "plan", "profile", "tune", "check", "data", "help", "--version",
    NULL};

static int cmd_help(args *a, hy_error *err) {
    const char *topic = NULL;
    if (!strcmp(a->cmd, "help") && a->i < a->argc) topic = a->argv[a->i];
    if (!topic) fputs(usage_main, stdout);
    else if (!strcmp(topic, "plan")) fputs(usage_plan, stdout);
    else if (!strcmp(topic, "profile")) fputs(usage_profile, stdout);
    else if (!strcmp(topic, "tune")) fputs(usage_tune, stdout);
    else if (!strcmp(topic, "check")) fputs(usage_check, stdout);
    else if (!strcmp(topic, "data")) fputs(usage_data, stdout);
    else if (member(topic, command_names)) fputs(usage_main, stdout);
    else
        return hy_fail(err, HY_ERR_INPUT, "no help on '%s': it is not a "
                       "command; run 'hanayo help' for the list", topic);
    return HY_OK;
}

static int dispatch(int argc, char **argv, hy_error *err) {
    if (argc < 2)
        return hy_fail(err, HY_ERR_INPUT, "no command given; run 'hanayo "
                       "help' for the list");
    args a = {argc, argv, 2, argv[1], "", NULL};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(&a, err);
    const char *near = hy_closest(argv[1], command_names);
    if (near)
        return hy_fail(err, HY_ERR_INPUT, "unknown command '%s'; did you "
                       "mean '%s'? (hanayo help lists them)", argv[1], near);
    return hy_fail(err, HY_ERR_INPUT, "unknown command '%s'; run 'hanayo "
                   "help' for the list", argv[1]);
}

int main(int argc, char **argv) {
    hy_error err;
    hy_error_clear(&err);
    int status = dispatch(argc, argv, &err);
    /* A full disk or closed pipe must not pass for success. */
    if (status == HY_OK && (fflush(stdout) != 0 || ferror(stdout)))
        status = hy_fail(&err, HY_ERR_RUNTIME, "cannot write to standard "
                         "output: %s", strerror(errno ? errno : EIO));
    if (status != HY_OK) fprintf(stderr, "hanayo: %s\n", err.msg);
    /* train stopped early on a signal and said so on stdout. */
    else if (stop_signal) status = 128 + stop_signal;
    return status;
}
