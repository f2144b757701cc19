/*
 * cli.c — what the hanayo commands share (cli.h).
 */
#include "cli.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "suggest.h"

int cli_read_args(const cli_command *cmd, int argc, char **argv, void *dest,
                  hy_args_result *got, hy_error *err) {
    int rc = hy_args_parse(cmd->spec, argc, argv, dest, got, err);
    if (rc == HY_OK && got->help) fputs(cmd->usage, stdout);
    return rc;
}

void cli_hand_config(const hy_args_result *got, const hy_flag_list *sets, const char **config,
                     const char *const **rq_sets, int *n_sets) {
    *config = got->operand;
    *rq_sets = sets->items;
    *n_sets = sets->n;
}

int cli_load_config(hy_config *c, const char *path, const hy_flag_list *sets, hy_error *err) {
    hy_config_init(c);
    return hy_config_load(c, path, sets->items, sets->n, err);
}

int cli_load_run(hy_run *run, const char *path, const hy_flag_list *sets, hy_config_use use,
                 hy_error *err) {
    memset(run, 0, sizeof *run);
    hy_config c;
    int rc = hy_config_load_for(&c, use, path, sets->items, sets->n, err);
    if (!rc) rc = hy_run_resolve(run, &c, err);
    hy_config_free(&c);
    return rc;
}

void cli_memory_budget(double memory_gb, int ranks, const hy_backend_choice *chosen,
                       double *bytes, char *why, size_t n) {
    if (memory_gb > 0) {
        *bytes = memory_gb * 1073741824.0;
        snprintf(why, n, "--memory-gb");
        return;
    }
    *bytes = chosen->rank_bytes;   /* backend.h: the GPU's over the ranks on it, or the host's */
    if (chosen->cuda)
        snprintf(why, n, "the GPU's memory over the ranks on it; --memory-gb sets it");
    else
        snprintf(why, n, "the host's memory over %d rank%s; --memory-gb sets it", ranks,
                 ranks == 1 ? "" : "s");
}

int cli_run_subcommand(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    const cli_command *subs = cmd->subs;
    size_t n = cmd->n_subs;
    const char *names[9] = { NULL };   /* NULL-terminated, as hy_closest takes them */
    assert(n < sizeof names / sizeof names[0]);
    for (size_t i = 0; i < n; i++) names[i] = subs[i].name;
    const char *sub = argc > 0 ? argv[0] : NULL;
    char choices[64] = "";
    for (int i = 0; names[i]; i++)
        snprintf(choices + strlen(choices), sizeof choices - strlen(choices), "%s%s",
                 i == 0 ? "" : names[i + 1] ? ", " : " or ", names[i]);
    if (!sub)
        return hy_fail(err, HY_ERR_INPUT, "%s needs a subcommand: %s (hanayo %s --help)",
                       cmd->name, choices, cmd->name);
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help"))
        return (fputs(cmd->usage, stdout), HY_OK);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(sub, subs[i].name)) return subs[i].run(&subs[i], argc - 1, argv + 1, err);
    const char *near = hy_closest(sub, names);
    if (near)
        return hy_fail(err, HY_ERR_INPUT, "unknown %s subcommand '%s'; did you mean '%s'? "
                       "(hanayo %s --help)", cmd->name, sub, near, cmd->name);
    return hy_fail(err, HY_ERR_INPUT, "unknown %s subcommand '%s'; give %s (hanayo %s --help)",
                   cmd->name, sub, choices, cmd->name);
}

/* The others wait for replica 0 to have printed a shared error: mpirun
 * ends the whole job as soon as one process exits with a failure, and
 * would take replica 0 down before its line. A replica's own error ends
 * the job, since the others may be waiting for this one in a
 * collective. */
int cli_replica_failed(hy_dp *dp, int rc, hy_error *err) {
    if (hy_dp_agreed(dp)) {
        if (hy_dp_rank(dp) == 0) {
            fprintf(stderr, "hanayo: %s\n", err->msg);
            fflush(stderr);
        }
        err->msg[0] = '\0';
        hy_error ignored;
        (void)hy_dp_barrier(dp, &ignored);   /* a failure here has nothing left to add */
        return rc;
    }
    fprintf(stderr, "hanayo: replica %d: %s\n", hy_dp_rank(dp), err->msg);
    fflush(stderr);
    hy_dp_abort(dp, rc);
    return rc;
}

int cli_weights_file(const char *flag, const char *path, char *file, hy_error *err) {
    struct stat sb;
    char probe[PATH_MAX + 32], state[PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s/config.json", path);
    snprintf(state, sizeof state, "%s/state.json", path);
    int hf = stat(probe, &sb) == 0 && stat(state, &sb) != 0;
    if (hf || stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(file, PATH_MAX, "%s", path);   /* the load says what is wrong with it */
        return HY_OK;
    }
    char ck[PATH_MAX];
    int rc = hy_checkpoint_resolve(flag, path, ck, err);
    if (!rc && snprintf(file, PATH_MAX, "%s/model.safetensors", ck) >= PATH_MAX)
        rc = hy_fail(err, HY_ERR_INPUT, "%s %s: the path is too long", flag, path);
    return rc;
}
