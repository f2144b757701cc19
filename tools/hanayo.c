/*
 * hanayo.c — the command line (DESIGN §7 "The command line").
 *
 * Finds the command, reads its flags with one table per command through
 * lib/args.h's parser, strictly (every number must be a whole number or a
 * finite real, fully consumed and in range), and hands the result to one
 * library entry point. Nothing below this file prints or
 * exits: errors come back as hy_error values and main() prints the one
 * message, "hanayo: <message>", and exits with its status — 0 success,
 * 1 runtime failure, 2 bad input; 130 or 143 when SIGINT or SIGTERM
 * stopped a training run (see catch_stop_signals).
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "backend.h"
#include "cli.h"
#include "config.h"
#include "dp.h"
#include "error.h"
#include "suggest.h"
#include "train.h"
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
    "  checkpoint verify DIR | list DIR\n"
    "          check checkpoints against their checksums, or list them\n"
    "  help [COMMAND | config]\n"
    "          this text, one command's, or every config key with its default\n"
    "          and allowed values\n"
    "\n"
    "  --version  print the version and the compiled backends\n"
    "\n"
    "Exit status: 0 success, 1 runtime failure, 2 bad input; train stopped\n"
    "by SIGINT or SIGTERM: 130 or 143.\n";

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
    "  --resume DIR      continue from a checkpoint (a step_NNNNNN directory,\n"
    "                    or a checkpoint.dir: its newest), checked first\n"
    "\n"
    "Checkpoints go to checkpoint.dir every checkpoint.every steps and after\n"
    "the last step; resuming continues bit for bit on the same rank layout.\n"
    "Each file's CRC-32C is in state.json and checked on every load; one run\n"
    "at a time may write a checkpoint.dir; checkpoint.keep: N keeps the\n"
    "newest N. `hanayo checkpoint verify|list DIR` checks and lists them.\n"
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

/* ------------------------------------------------------------------------
 * Commands and their flags
 *
 * Each command reads its arguments with lib/args.h's one parser into a
 * struct of its own (usually a library request and the --set list), from
 * a table of its flags; the usage text beside it says the same in prose,
 * and tests/test_args.c checks that the two name the same flags.
 * ------------------------------------------------------------------------ */

/* ---- hanayo train and hanayo eval ---------------------------------------------- */


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

typedef struct {
    hy_train_opts opts;
    hy_flag_list sets;
} train_args;

static const hy_flag train_flags[] = {
    CLI_SET_FLAG(train_args, "train.steps=50"),
    { .name = "--log-json", .kind = HY_FLAG_STRING, .off = offsetof(train_args, opts.log_json),
      .example = "train.jsonl" },
    { .name = "--resume", .kind = HY_FLAG_STRING, .off = offsetof(train_args, opts.resume),
      .example = "checkpoints/step_000100" },
    { .name = NULL },
};
static const hy_args_spec train_spec = {
    .command = "train", .flags = train_flags, .operand = "config file",
    .synopsis = "hanayo train CONFIG [--set key=value]... [--log-json FILE]" };

static int cmd_train(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    int stopped_by = 0;
    train_args a = { .opts = { .log_json = NULL, .resume = NULL, .stop = &stop_signal,
                               .stopped_by = &stopped_by },
                     .sets = { 0 } };
    hy_args_result got;
    int st = cli_read_args(cmd, argc, argv, &a, &got, err);
    hy_dp *dp = NULL;
    FILE *out = stdout;
    /* Under mpirun or srun, one of the data-parallel replicas: only
     * replica 0 prints progress and writes the log. */
    if (st == HY_OK && !got.help) st = hy_dp_start(&dp, NULL, NULL, err);
    if (st == HY_OK && hy_dp_rank(dp) != 0) {
        a.opts.log_json = NULL;
        if (!(out = fopen("/dev/null", "w")))
            st = hy_fail(err, HY_ERR_RUNTIME, "cannot open /dev/null: %s", strerror(errno));
    }
    a.opts.dp = dp;
    if (st == HY_OK && !got.help) {
        hy_config c;
        st = cli_load_config(&c, got.operand, &a.sets, err);
        /* A config that fails on one replica: the others learn it in
         * hy_train's first agreement, which this one meets here. */
        if (st != HY_OK && dp) st = hy_dp_agree(dp, st, err);
        if (st == HY_OK) catch_stop_signals();
        if (st == HY_OK) st = hy_train(&c, &a.opts, out, err);
        hy_config_free(&c);
        if (dp) st = st != HY_OK ? cli_replica_failed(dp, st, err) : HY_OK;
    }
    if (out != stdout && out) fclose(out);
    hy_dp_finish(dp);
    hy_flag_list_free(&a.sets);
    if (st == HY_OK && stopped_by) stop_signal = stopped_by;   /* main's exit status */
    return st;
}

const cli_command cli_train_command = {"train", cmd_train, usage_train, &train_spec, NULL, 0};

typedef struct {
    hy_flag_list sets;
    const char *init, *data;
    int batches;        /* 0: every whole batch */
} eval_args;

#define EVAL(field) offsetof(eval_args, field)
static const hy_flag eval_flags[] = {
    { .name = "--init", .kind = HY_FLAG_STRING, .off = EVAL(init),
      .example = "model.safetensors" },
    { .name = "--data", .kind = HY_FLAG_STRING, .off = EVAL(data),
      .example = "data/synth_val.bin" },
    { .name = "--batches", .kind = HY_FLAG_INT, .off = EVAL(batches), .example = "20",
      .lo = 1, .hi = 1000000 },
    CLI_SET_FLAG(eval_args, "model.layers=12"),
    { .name = NULL },
};
static const hy_args_spec eval_spec = {
    .command = "eval", .flags = eval_flags, .operand = "config file",
    .synopsis = "hanayo eval CONFIG [--init WEIGHTS] [--data SHARD] [--batches N]" };

static int cmd_eval(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    eval_args a = { .sets = { 0 }, .init = NULL, .data = NULL, .batches = 0 };
    char *init_set = NULL;
    hy_args_result got;
    int st = cli_read_args(cmd, argc, argv, &a, &got, err);
    /* --init becomes one more --set, the last, so the config's checks see
     * it and it wins over a --set init=... */
    if (st == HY_OK && !got.help && a.init) {
        init_set = malloc(strlen(a.init) + sizeof "init=");
        if (!init_set) st = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        else sprintf(init_set, "init=%s", a.init);
        if (st == HY_OK) st = hy_flag_list_add(&a.sets, init_set, err);
    }
    if (st == HY_OK && !got.help) {
        hy_config c;
        st = cli_load_config(&c, got.operand, &a.sets, err);
        if (st == HY_OK) st = hy_eval(&c, a.data, a.batches, stdout, stderr, err);
        hy_config_free(&c);
    }
    free(init_set);
    hy_flag_list_free(&a.sets);
    return st;
}

const cli_command cli_eval_command = {"eval", cmd_eval, usage_eval, &eval_spec, NULL, 0};

/* ---- help, --version and the command table ------------------------------------ */

static int cmd_help(const cli_command *cmd, int argc, char **argv, hy_error *err);

static int cmd_version(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    (void)cmd;
    (void)argc;
    (void)argv;
    (void)err;
    printf("hanayo %s (backends: %s; data parallel: %s)\n", HY_VERSION, hy_backends_compiled(),
           hy_dp_compiled());
    return HY_OK;
}

static const cli_command help_commands[] = {
    {"help", cmd_help, usage_main, NULL, NULL, 0},
    {"--help", cmd_help, usage_main, NULL, NULL, 0},
    {"-h", cmd_help, usage_main, NULL, NULL, 0},
    {"--version", cmd_version, usage_main, NULL, NULL, 0},
};

static const cli_command *const commands[] = {
    &cli_train_command, &cli_eval_command, &cli_plan_command, &cli_profile_command,
    &cli_tune_command, &cli_check_command, &cli_data_command, &cli_checkpoint_command,
    &help_commands[0], &help_commands[1], &help_commands[2], &help_commands[3],
};

/* What a mistyped command is matched against (not the spellings of help). */
static const char *const command_names[] = {
    "train", "eval", "plan", "profile", "tune", "check", "data", "checkpoint", "help",
    "--version",
    NULL};

static const cli_command *find_command(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i]->name)) return commands[i];
    return NULL;
}

/* hanayo help [TOPIC]: the main usage, a command's, or the config keys. */
static int cmd_help(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    const char *topic = argc > 0 ? argv[0] : NULL;
    const cli_command *about = topic ? find_command(topic) : cmd;
    if (topic && !strcmp(topic, "config")) {
        char *keys = hy_config_reference();
        if (!keys) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        fputs(keys, stdout);
        free(keys);
        return HY_OK;
    }
    if (!about)
        return hy_fail(err, HY_ERR_INPUT, "no help on '%s': it is not a "
                       "command; run 'hanayo help' for the list", topic);
    fputs(about->usage, stdout);
    return HY_OK;
}

static int dispatch(int argc, char **argv, hy_error *err) {
    if (argc < 2)
        return hy_fail(err, HY_ERR_INPUT, "no command given; run 'hanayo "
                       "help' for the list");
    const cli_command *cmd = find_command(argv[1]);
    /* Only train and profile run as replicas; N copies of any other
     * command would race on the same files (tune's output, a converted
     * checkpoint). */
    int job = hy_dp_launched_size();
    if (cmd && job > 1 && strcmp(cmd->name, "train") != 0 && strcmp(cmd->name, "profile") != 0)
        return hy_fail(err, HY_ERR_INPUT, "hanayo %s: launched as one of %d MPI processes, but only "
                       "'train' and 'profile' run as data-parallel replicas; run it once, without "
                       "mpirun/srun (it tunes, plans or checks one server's pipeline)", cmd->name,
                       job);
    if (cmd) return cmd->run(cmd, argc - 2, argv + 2, err);
    const char *near = hy_closest(argv[1], command_names);
    if (near)
        return hy_fail(err, HY_ERR_INPUT, "unknown command '%s'; did you "
                       "mean '%s'? (hanayo help lists them)", argv[1], near);
    return hy_fail(err, HY_ERR_INPUT, "unknown command '%s'; run 'hanayo "
                   "help' for the list", argv[1]);
}

int main(int argc, char **argv) {
    /* Hardware queues per GPU, read once when the CUDA driver starts, so
     * before any CUDA call: a rank stream waiting at a flag holds its
     * queue, and ranks sharing a GPU must not share queues (docs/cuda.md).
     * 32 is the most the driver takes; a value the user set stays. */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    hy_error err;
    hy_error_clear(&err);
    int status = dispatch(argc, argv, &err);
    /* A full disk or closed pipe must not pass for success. */
    if (status == HY_OK && (fflush(stdout) != 0 || ferror(stdout)))
        status = hy_fail(&err, HY_ERR_RUNTIME, "cannot write to standard "
                         "output: %s", strerror(errno ? errno : EIO));
    /* (An empty message: another data-parallel replica reports it.) */
    if (status != HY_OK && err.msg[0]) fprintf(stderr, "hanayo: %s\n", err.msg);
    /* train stopped early on a signal and said so on stdout. */
    else if (stop_signal) status = 128 + stop_signal;
    return status;
}
