/*
 * cli.h — what the hanayo commands share (DESIGN §7 "The command line").
 *
 * The command line is tools/: tools/hanayo.c finds the command and prints
 * the one error; each command (its flags, what it does with the library,
 * what it prints) lives in a file of its own, tools/cmd_*.c, on top of
 * lib/, which returns values and writes files but never prints a
 * command's output. This header is the table entry every command has and
 * the few steps several of them take: reading their flags (from a table
 * beside the command's usage text; tests/test_args.c checks that the two
 * name the same flags), loading the config with its --set list and
 * resolving its run, running a subcommand, and ending a data-parallel
 * replica that failed.
 */
#ifndef HY_CLI_H
#define HY_CLI_H

#include <stddef.h>

#include "args.h"
#include "config.h"
#include "dp.h"
#include "error.h"
#include "run.h"

typedef struct cli_command cli_command;
struct cli_command {
    const char *name;
    /* argv: the arguments after the command's name. */
    int (*run)(const cli_command *cmd, int argc, char **argv, hy_error *err);
    const char *usage;          /* hanayo help NAME, hanayo NAME --help */
    const hy_args_spec *spec;   /* its flags; NULL: it reads its arguments itself */
    const cli_command *subs;    /* a command made of subcommands (data, checkpoint): them */
    size_t n_subs;
};

/* The commands, each defined in the file that runs it (tools/cmd_*.c);
 * tools/hanayo.c's table lists them. */
extern const cli_command cli_train_command, cli_eval_command, cli_plan_command,
    cli_profile_command, cli_tune_command, cli_check_command, cli_data_command,
    cli_checkpoint_command, cli_plot_command, cli_sample_command;

/* Reads cmd's arguments into dest; with --help it prints cmd's usage
 * instead, and got->help tells the caller there is nothing more to do. */
int cli_read_args(const cli_command *cmd, int argc, char **argv, void *dest,
                  hy_args_result *got, hy_error *err);

/* --set key=value, repeatable, into field `sets` (an hy_flag_list) of T;
 * the config loader checks key and value. */
#define CLI_SET_FLAG(T, example_) \
    { .name = "--set", .kind = HY_FLAG_LIST, .off = offsetof(T, sets), .example = (example_) }

/* The config file and the --set list into a library request's three
 * fields for them (plan, profile and tune requests have the same). */
void cli_hand_config(const hy_args_result *got, const hy_flag_list *sets, const char **config,
                     const char *const **rq_sets, int *n_sets);

/* Loads the config of `path` with the --set list into c (initialised
 * either way, so the caller frees it). */
int cli_load_config(hy_config *c, const char *path, const hy_flag_list *sets, hy_error *err);

/* Loads the config of `path` with the --set list for `use` (config.h:
 * train and eval partition the model over the schedule's stages; sample
 * runs it whole on one rank) and resolves it into *run (run.h), once. The
 * config is freed; *run is safe to free on failure too. */
int cli_load_run(hy_run *run, const char *path, const hy_flag_list *sets, hy_config_use use,
                 hy_error *err);

/* A weights flag's PATH (eval --init, sample --init) as the weights file
 * it means: PATH itself, or for a directory the model.safetensors of the
 * checkpoint it is or of its newest one (hy_checkpoint_resolve, as train
 * --resume takes it; the load verifies it), into file (PATH_MAX bytes).
 * A directory with a config.json and no state.json is a Hugging Face
 * checkpoint, which the load reads as a directory (weights.h). flag names
 * it in messages. */
int cli_weights_file(const char *flag, const char *path, char *file, hy_error *err);

/* Memory per rank for a run on backend `chosen`: memory_gb GiB when > 0,
 * else the GPU's (shared by the ranks on it), else the host's over the
 * ranks; *why says which, for a message ("--memory-gb", "the host's memory
 * over 2 ranks; --memory-gb sets it"). */
void cli_memory_budget(double memory_gb, int ranks, const hy_backend_choice *chosen,
                       double *bytes, char *why, size_t n);

/* A command made of subcommands (data, checkpoint): runs the one of
 * cmd->subs that argv[0] names. */
int cli_run_subcommand(const cli_command *cmd, int argc, char **argv, hy_error *err);

/* One data-parallel replica's end (dp.h), when it failed with status st:
 * an error all replicas share is printed once, by replica 0, and every
 * replica returns st with an empty message, which main does not print; a
 * replica's own error is printed with its index and the whole job is
 * ended. */
int cli_replica_failed(hy_dp *dp, int st, hy_error *err);

#endif
