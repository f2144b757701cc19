/*
 * hanayo.c — the command line (DESIGN §7 "The command line").
 *
 * Finds the command in one table and runs it: each command is a file of
 * its own (tools/cmd_*.c, over tools/cli.h) that reads its flags with one
 * table through lib/args.h's parser, strictly (every number must be a
 * whole number or a finite real, fully consumed and in range), resolves
 * its config once (lib/run.h), calls the library and prints its output.
 * Errors come back as hy_error values and main() prints the one message,
 * "hanayo: <message>", and exits with its status — 0 success, 1 runtime
 * failure, 2 bad input; 130 or 143 when SIGINT or SIGTERM stopped a
 * training run, 141 when a broken pipe did (see tools/cmd_train.c).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "backend.h"
#include "cli.h"
#include "cmd_train.h"
#include "config.h"
#include "dp.h"
#include "error.h"
#include "suggest.h"
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
    "  sample  CONFIG --init DIR --prompt-tokens IDS | --prompt TEXT --tokenizer F\n"
    "          generate text from a trained GPT or Llama, on one rank\n"
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
    "  plot    LOG.jsonl [LOG2.jsonl ...] [--out FILE.svg]\n"
    "          draw train --log-json logs: loss, val loss, lr, tokens/s as SVG\n"
    "  help [COMMAND | config [--markdown]]\n"
    "          this text, one command's, or every config key with its default\n"
    "          and allowed values (--markdown: as docs/config.md's table)\n"
    "\n"
    "  --version  print the version and the compiled backends\n"
    "\n"
    "Exit status: 0 success, 1 runtime failure, 2 bad input; train stopped\n"
    "by SIGINT or SIGTERM: 130 or 143.\n";

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
    &cli_train_command, &cli_eval_command, &cli_sample_command, &cli_plan_command,
    &cli_profile_command, &cli_tune_command, &cli_check_command, &cli_data_command,
    &cli_checkpoint_command, &cli_plot_command, &help_commands[0], &help_commands[1],
    &help_commands[2], &help_commands[3],
};

/* What a mistyped command is matched against (not the spellings of help). */
static const char *const command_names[] = {
    "train", "eval", "sample", "plan", "profile", "tune", "check", "data", "checkpoint", "plot",
    "help", "--version",
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
        /* Wrapped for an 80-column terminal; --markdown: the table that
         * docs/config.md holds. */
        int markdown = argc > 1 && !strcmp(argv[1], "--markdown");
        if (argc > 2 || (argc > 1 && !markdown))
            return hy_fail(err, HY_ERR_INPUT, "help config takes no argument '%s'; "
                           "'--markdown' prints the keys as docs/config.md's table",
                           argv[argc > 2 && markdown ? 2 : 1]);
        char *keys = markdown ? hy_config_reference() : hy_config_help_text(80);
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

/* Command `name`, launched as one of `job` MPI processes, is refused.
 * Said once, not once a process: they join the job, agree on the error,
 * and replica 0 prints it while the others wait (cli_replica_failed); a
 * hanayo without MPI cannot join, and each says it. */
static int refuse_replicas(const char *name, int job, hy_error *err) {
    int rc = hy_fail(err, HY_ERR_INPUT, "hanayo %s: launched as one of %d MPI processes, but only "
                     "'train' and 'profile' run as data-parallel replicas; run 'hanayo %s' once, "
                     "without mpirun or srun", name, job, name);
    hy_dp *dp = NULL;
    hy_error ignored;
    if (hy_dp_start(&dp, NULL, NULL, &ignored) != HY_OK || !dp) return rc;
    rc = hy_dp_agree(dp, rc, err);
    rc = cli_replica_failed(dp, rc, err);
    hy_dp_finish(dp);
    return rc;
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
        return refuse_replicas(cmd->name, job, err);
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
    /* train stopped early on a signal (or on a broken pipe, as SIGPIPE)
     * and said so, on stdout or, when stdout was the broken pipe, on
     * stderr. */
    int stopped_by = cli_train_stop_signal();
    /* A full disk or closed pipe must not pass for success. */
    if (status == HY_OK && !stopped_by && (fflush(stdout) != 0 || ferror(stdout)))
        status = hy_fail(&err, HY_ERR_RUNTIME, "cannot write to standard "
                         "output: %s", strerror(errno ? errno : EIO));
    /* (An empty message: another data-parallel replica reports it.) */
    if (status != HY_OK && err.msg[0]) fprintf(stderr, "hanayo: %s\n", err.msg);
    else if (stopped_by) status = 128 + stopped_by;
    return status;
}
