/*
 * cmd_train.c — `hanayo train` and `hanayo eval`: their flags, the
 * training loop's orchestration and everything both print.
 *
 * train picks the backend (`backend: auto` → CUDA when a GPU is present
 * and the CUDA backend is built, else the CPU, and says which), builds
 * the runtime (lib/train.h), runs train.steps steps, and prints a
 * progress line every train.log_every steps (and at the last): step,
 * loss, learning rate, gradient norm, tokens/s, ms/step and the time
 * left. With a JSON log file it also writes one JSON object per step.
 * With a data.val it prints and logs the validation loss every
 * train.eval_every steps and after the last.
 * Checkpoints go to checkpoint.dir every checkpoint.every steps and after
 * the last step; `resume` continues a run from one (checkpoint.h),
 * checked first: a resume with nothing left to train, or with another
 * learning-rate schedule than the checkpoint's (unless
 * --allow-schedule-change), is refused, and so is a new run into a
 * checkpoint.dir holding another run's checkpoints (unless --fresh). A
 * run with a checkpoint.dir holds its lock (one writer per directory)
 * and, with checkpoint.keep, removes older checkpoints after each new one
 * is complete. SIGINT or SIGTERM ends the run cleanly after the current
 * step, and so does a write to stdout or the JSON log that fails (a
 * reader gone: SIGPIPE is ignored). eval prints a model's mean loss over
 * a shard as one JSON line, and on stderr which weights it scored (a
 * file, a checkpoint's, or the seeded initialization).
 */
#include "cmd_train.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "backend.h"
#include "checkpoint.h"
#include "costs.h"
#include "cli.h"
#include "dp.h"
#include "model.h"
#include "outfile.h"
#include "run.h"
#include "schedule.h"
#include "sim.h"
#include "train.h"

static const char usage_train[] =
    "usage: hanayo train CONFIG [--steps N] [--set key=value]... [--log-json FILE]\n"
    "                    [--resume DIR [--allow-schedule-change]] [--fresh]\n"
    "\n"
    "Trains the model of CONFIG with its pipeline schedule, one thread per\n"
    "rank, and prints a progress line every train.log_every steps: step,\n"
    "loss, learning rate, gradient norm, tokens/s, ms/step and time left.\n"
    "\n"
    "  --steps N         train N steps in all: --set train.steps=N, applied\n"
    "                    after every --set (as profile and tune take it)\n"
    "  --set key=value   override a config key, e.g. train.lr=3e-4\n"
    "  --log-json FILE   also write one JSON object per step to FILE\n"
    "                    (step, loss, lr, grad_norm, tokens_per_s, ms)\n"
    "  --resume DIR      continue from a checkpoint (a step_NNNNNN directory,\n"
    "                    or a checkpoint.dir: its newest), checked first\n"
    "  --allow-schedule-change\n"
    "                    with --resume: take this run's learning-rate schedule\n"
    "                    where it differs from the checkpoint's (train.lr,\n"
    "                    min_lr, warmup_steps, steps, lr_schedule,\n"
    "                    decay_fraction), e.g. a larger train.steps to extend a\n"
    "                    finished run; refused without it\n"
    "  --fresh           start a new run in a checkpoint.dir that holds another\n"
    "                    run's checkpoints, saving beside them; refused without it\n"
    "\n"
    "Checkpoints go to checkpoint.dir every checkpoint.every steps and after\n"
    "the last step; resuming continues bit for bit on the same rank layout.\n"
    "A checkpoint at or past train.steps has nothing left to train: refused.\n"
    "Each file's CRC-32C is in state.json and checked on every load; one run\n"
    "at a time may write a checkpoint.dir; checkpoint.keep: N keeps the\n"
    "newest N. `hanayo checkpoint verify|list DIR` checks and lists them.\n"
    "\n"
    "With data.val, the validation loss on train.eval_batches of its batches\n"
    "is printed and logged every train.eval_every steps and after the last.\n"
    "data.train's shards are read in order as one stream; when it starts over,\n"
    "\"data: epoch E begins at step N\" is printed and logged.\n"
    "\n"
    "SIGINT (Ctrl-C) or SIGTERM stops the run after the current step: it\n"
    "saves a checkpoint (with a checkpoint.dir), says where it stopped and\n"
    "exits with status 130 (SIGINT) or 143 (SIGTERM). A second signal ends\n"
    "it at once. Output that cannot be written stops it the same way: a\n"
    "reader gone (`hanayo train ... | head`) exits 141 with one line on\n"
    "stderr, any other write failure exits 1.\n";

static const char usage_eval[] =
    "usage: hanayo eval CONFIG [--init WEIGHTS|DIR] [--data SHARD] [--batches N]\n"
    "                   [--set key=value]...\n"
    "\n"
    "Prints the model's mean loss over N batches read in order from the start\n"
    "of SHARD as one JSON line: {\"loss\": x, \"batches\": n, \"tokens\": t,\n"
    "\"weights\": FILE or null}, and on stderr which weights it scored.\n"
    "\n"
    "  --init WEIGHTS|DIR  weights to evaluate: a safetensors file (Hugging Face\n"
    "                    GPT-2 names), a checkpoint (step_NNNNNN directory) or a\n"
    "                    checkpoint.dir (its newest checkpoint, as train --resume\n"
    "                    takes it); default: the config's init, else the seeded\n"
    "                    initialization (\"weights\": null)\n"
    "  --data SHARD      token shard (default: data.val, else data.train)\n"
    "  --batches N       batches of micro_batch_size x seq_len tokens\n"
    "                    (default: every whole batch in the shard)\n"
    "  --set key=value   override a config key\n"
    "\n"
    "Weights of another model are refused: a checkpoint's record (model.kind and\n"
    "shape) must be the config's model; a file of no checkpoint, by its shapes.\n";

/* ---- SIGINT, SIGTERM and SIGPIPE ------------------------------------------------ */

/* SIGINT and SIGTERM during `train`: the handler only records the signal;
 * cli_train_run sees it after the current step, saves a checkpoint and
 * returns, and main exits with 128 + the signal's number (130, 143), as a
 * shell reports a process the signal ended. The handler also puts both signals
 * back to their default action, so a second one while the run winds down
 * (a checkpoint of a large model takes a while) ends the process at once;
 * the checkpoint being written then is lost whole (atomicfile.h), never
 * half-written. The only global state in the program, as a handler
 * needs. */
static volatile sig_atomic_t stop_signal;
static int stop_caught[2];   /* whether SIGINT, SIGTERM got the handler; set before it runs */
static int exit_signal;      /* the signal a finished run was stopped by, for main */

static void on_stop_signal(int sig) {
    stop_signal = sig;
    struct sigaction dfl = { .sa_handler = SIG_DFL };   /* sigaction is async-signal-safe */
    if (stop_caught[0]) sigaction(SIGINT, &dfl, NULL);
    if (stop_caught[1]) sigaction(SIGTERM, &dfl, NULL);
}

/* A signal ignored when we start (a script's background job ignores
 * SIGINT; a supervisor may ignore both) stays ignored: whoever started us
 * chose that. Both are blocked while the handler runs, so the second
 * signal always meets the default action.
 *
 * No SA_RESTART: a system call the signal interrupts fails with EINTR
 * instead of carrying on, so a run blocked in one (a write to a pipe
 * nobody reads) is not deaf to it. The runtime's rank threads take no
 * stop signal (runtime.c), so it lands on this thread, the one that
 * opens files and prints; their own waits (futex, nanosleep, polls) look
 * again when cut short, and the stop is seen after the step. Every read
 * and write loop of the library retries EINTR: they read and write
 * regular files only (infile.h), which never block for long, and a stop
 * is answered with a checkpoint, which must not be cut short. What can
 * block for good is printing to a pipe or terminal: such a write cut
 * short loses its line, and the stop goes on (output_flush).
 *
 * SIGPIPE is ignored: a reader that went away (`hanayo train | head`)
 * makes the next write fail with EPIPE instead of killing the process
 * with its steps unsaved; the run stops after that step as if asked to
 * (output_flush). */
static void catch_stop_signals(void) {
    const int sigs[2] = { SIGINT, SIGTERM };
    for (int i = 0; i < 2; i++) {
        struct sigaction old, sa = { .sa_handler = on_stop_signal, .sa_flags = 0 };
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue;
        sigemptyset(&sa.sa_mask);
        sigaddset(&sa.sa_mask, SIGINT);
        sigaddset(&sa.sa_mask, SIGTERM);
        stop_caught[i] = 1;
        if (sigaction(sigs[i], &sa, NULL) != 0) stop_caught[i] = 0;
    }
    struct sigaction ign = { .sa_handler = SIG_IGN };
    sigemptyset(&ign.sa_mask);
    (void)sigaction(SIGPIPE, &ign, NULL);   /* failing leaves the default: killed, as before */
}

int cli_train_stop_signal(void) {
    return exit_signal;
}

/* ---- hanayo train ------------------------------------------------------------ */

/* What the run is, before its first step: model, stages, schedule, batch. */
static void print_header(const hy_run *run, int replicas, FILE *out) {
    const hy_model *m = &run->model;
    char llama[96] = "";   /* what a Llama's shape adds: GQA, the MLP, the head */
    if (m->kind == HY_MODEL_LLAMA)
        snprintf(llama, sizeof llama, " (%d kv), ffn %d, %s head", m->kv_heads, m->ffn_dim,
                 m->tie_embeddings ? "tied" : "untied");
    const char *norm = m->kind != HY_MODEL_BERT ? ""   /* which BERT: model.norm */
                     : m->norm == HY_NORM_POST ? " (post-LN)" : " (pre-LN)";
    char table[48] = "";   /* a position table longer than the sequences */
    if (m->kind != HY_MODEL_LLAMA && m->positions != m->seq_len)
        snprintf(table, sizeof table, " of %d positions", m->positions);
    fprintf(out, "model: %s%s, %d layers, d_model %d, %d heads%s, seq_len %d%s, vocab %d: %.2fM "
            "parameters\n", hy_model_name(m->kind), norm, m->layers, m->d_model, m->heads, llama,
            m->seq_len, table, m->vocab, hy_model_param_count(m) / 1e6);
    fprintf(out, "stages:");
    for (int s = 0; s < m->stages; s++) fprintf(out, " %d", m->n_layers[s]);
    fprintf(out, " layers\n");
    /* The order the runtime runs, chosen for the run's transfer time,
     * priced under the uniform costs it was chosen for. */
    const hy_schedule *sc = &run->sched;
    hy_costs uc = hy_costs_uniform_for(sc->split, run->comm_cost);
    hy_sim_result res;
    hy_error err;
    if (hy_simulate(sc, &uc, NULL, &res, &err) == HY_OK) {
        fprintf(out, "schedule: %s, P = %d, M = %d", hy_sched_name(sc->kind), sc->ranks,
                sc->micro_batches);
        if (sc->kind == HY_SCHED_HANAYO) fprintf(out, ", W = %d", sc->waves);
        if (sc->kind == HY_SCHED_INTERLEAVED) fprintf(out, ", v = %d", sc->chunks);
        if (sc->split) fprintf(out, ", split backward");
        if (run->train.recompute != HY_RECOMPUTE_NONE)
            fprintf(out, ", %s recompute", hy_recompute_name(run->train.recompute));
        fprintf(out, ", %d stages, bubble %.4f (uniform costs", sc->stages, res.bubble);
        if (uc.comm > 0) fprintf(out, ", c = %g", uc.comm);
        fprintf(out, "), peak activations %d\n", hy_sim_peak_max(&res));
        hy_sim_result_free(&res);
    }
    int M = sc->micro_batches;
    if (replicas > 1)
        fprintf(out, "data parallel: %d replicas (MPI), each %d micro-batches of the step's %d\n",
                replicas, M, replicas * M);
    fprintf(out, "batch: %d micro-batches x %d sequences x %d tokens = %.0f tokens per step\n",
            replicas * M, run->micro_batch_size, m->seq_len,
            hy_run_tokens_per_step(M, run->micro_batch_size, m->seq_len, replicas));
}

/* Says on warn (NULL: nowhere) that the checkpoint `what` was loaded
 * unverified: it was written without checksums. */
static void warn_unverified(FILE *warn, const char *what) {
    if (warn)
        fprintf(warn, "warning: %s was written without checksums (checkpoint format 1); loaded "
                "unverified\n", what);
}

static void print_eta(FILE *out, double seconds) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600) fprintf(out, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else fprintf(out, "%ld:%02ld", s / 60, s % 60);
}

/* The stop request's signal by name (cmd_train.h: the handler stores its number). */
static const char *stop_cause(int sig, char *buf, size_t n) {
    if (sig == SIGINT) return "SIGINT";
    if (sig == SIGTERM) return "SIGTERM";
    if (sig == SIGPIPE) return "SIGPIPE";   /* another replica's output failed */
    snprintf(buf, n, "signal %d", sig);
    return buf;
}

/* An output of the run: standard output, or the JSON log. */
typedef struct {
    FILE *f;            /* NULL: none */
    const char *name;   /* "standard output", or the log's path */
    int log;            /* whether it is the --log-json file */
    const volatile sig_atomic_t *stop;   /* the stop request (cli_train_opts), or NULL */
    int failed;         /* errno of its first failed write; 0: none */
} run_output;

/* Sends what was printed to o on its way, and notes a write that failed:
 * the run then stops after the current step, as if asked to (its reader
 * went away, EPIPE, or its disk is full), so the steps trained are saved,
 * not lost. A write a stop signal cut short (EINTR: nobody was reading,
 * and the signal asked for a stop anyway) loses what it held, and is not
 * a failure. Once a stop was asked nothing more is sent until the stop's
 * checkpoint is saved (stop_run flushes last): a reader that does not
 * read must not hold the save back. Every flush of the run's outputs in
 * the step loop goes through here. */
static void output_flush(run_output *o) {
    if (!o->f || o->failed || (o->stop && *o->stop)) return;
    if (fflush(o->f) == 0 && !ferror(o->f)) return;
    int e = errno ? errno : EIO;
    clearerr(o->f);
    if (e != EINTR) o->failed = e;
}

/* Notes that a write to o failed outside output_flush (the log's lines
 * are written whole by outfile.h, not through stdio): as there, the run
 * stops after the current step, saved. */
static void output_broke(run_output *o) {
    if (!o->failed) o->failed = errno ? errno : EIO;
}

/* The first of the run's outputs that failed, or NULL. */
static const run_output *output_failed(const run_output outs[2]) {
    for (int i = 0; i < 2; i++)
        if (outs[i].failed) return &outs[i];
    return NULL;
}

/* Why o failed, as the end of "stopped at step N because ...". */
static void output_why(const run_output *o, char *buf, size_t n) {
    const char *flag = o->log ? "--log-json " : "";
    if (o->failed == EPIPE)
        snprintf(buf, n, "%s%s is a broken pipe (its reader is gone)", flag, o->name);
    else
        snprintf(buf, n, "%s%s could not be written: %s", flag, o->name, strerror(o->failed));
}

/* Saves rt's last step into checkpoint.dir, says so, then applies
 * checkpoint.keep: only now, with the new checkpoint complete and synced,
 * may older ones go. A failed removal is a warning, not the end of a run
 * whose newest state is safe. The path goes to path (PATH_MAX bytes). */
static int save_here(hy_runtime *rt, const hy_run *run, char *path, FILE *out, hy_error *err) {
    int rc = hy_checkpoint_save(rt, run->checkpoint.dir, path, err);
    if (rc) return rc;
    fprintf(out, "checkpoint: %s\n", path);
    int step = 0, removed = 0;
    size_t pos = 0;
    hy_error e;
    if (hy_runtime_get_progress(rt, &step, &pos, &e) ||
        hy_checkpoint_prune(run->checkpoint.dir, run->checkpoint.keep, step, &removed, &e))
        fprintf(out, "warning: checkpoint.keep: older checkpoints not all removed: %s\n", e.msg);
    return HY_OK;
}

/* Replica 0 writes; the others wait for it to finish, so that none waits
 * for it inside the next step, where the watchdog would take a long save
 * for a stalled replica. That one wait is not watched: replica 0 is busy
 * writing, and if it dies the launcher ends the job. */
static int save(hy_runtime *rt, const hy_run *run, hy_dp *dp, char *path, FILE *out,
                hy_error *err) {
    int rc = hy_train_replicas_agree(rt, dp, err);
    if (rc) return rc;
    if (hy_dp_rank(dp) == 0) rc = save_here(rt, run, path, out, err);
    if (hy_dp_size(dp) > 1) {
        hy_dp_set_watchdog(dp, 0);
        rc = hy_dp_agree(dp, rc, err);
        hy_dp_set_watchdog(dp, run->watchdog_s);
    }
    return rc;
}

/* Whether a stop was asked (*sig: the signal, 0: none), agreed by the
 * replicas: the largest signal any of them got, so they stop together.
 * An output that failed (`broken`) asks as SIGPIPE. */
static int stop_asked(const cli_train_opts *o, const run_output *broken, hy_dp *dp, int *sig,
                      hy_error *err) {
    *sig = o && o->stop ? *o->stop : 0;
    if (broken && *sig < SIGPIPE) *sig = SIGPIPE;
    return hy_dp_max(dp, sig, err);
}

/* A run asked to stop after step `step`: save that step unless `saved`
 * (its checkpoint, just written) is given or the step was not finite
 * (`bad`), and say where the run stopped and how to go on: on out for a
 * signal; for an output that failed (`broken`), on stderr when its
 * reader is gone (the caller exits 128 + SIGPIPE), else as the run's
 * error (exit 1). */
static int stop_run(hy_runtime *rt, const hy_run *run, hy_dp *dp, int step, const char *saved,
                    int bad, int sig, const run_output *broken, FILE *out, hy_error *err) {
    char path[PATH_MAX] = "", cause[32], why[PATH_MAX + 160] = "";
    if (broken) output_why(broken, why, sizeof why);
    if (run->checkpoint.dir && !saved && !bad) {
        int rc = save(rt, run, dp, path, out, err);
        if (rc && broken) hy_error_prefix(err, "stopping at step %d because %s: ", step, why);
        if (rc) return rc;
        saved = path;
    }
    char then[PATH_MAX + 40];
    if (saved) snprintf(then, sizeof then, "continue with --resume %s", saved);
    else snprintf(then, sizeof then, "no checkpoint written: %s", run->checkpoint.dir
                  ? "the step was not finite" : "no checkpoint.dir is configured");
    if (broken && broken->failed != EPIPE)
        return hy_fail(err, HY_ERR_RUNTIME, "stopped at step %d because %s; %s", step, why, then);
    if (broken) {
        fprintf(stderr, "hanayo: stopped at step %d because %s; %s\n", step, why, then);
        fflush(stderr);
    } else {
        fprintf(out, "stopped at step %d because of %s; %s\n", step,
                stop_cause(sig, cause, sizeof cause), then);
        fflush(out);
    }
    return HY_OK;
}

/* train.on_nonfinite: `skip` still stops after more than this many
 * non-finite steps in a row; a run that bad is not going to recover. */
#define NONFINITE_MAX_IN_ROW 10

/* Step `step` had a NaN or infinity in its loss or gradient norm (the
 * runtime's one fused check; a non-finite norm made every rank skip the
 * update): say where, then per train.on_nonfinite end the run (an error,
 * before anything is saved) or count it and go on. */
static int nonfinite(hy_runtime *rt, const hy_run *run, int step, const hy_step_stats *stats,
                     int *total, int *in_row, FILE *out, hy_error *err) {
    char where[512];
    int rc = hy_runtime_nonfinite_where(rt, where, sizeof where, err);
    if (rc) return rc;
    const char *update = stats->updated ? "the update was applied (the gradient norm was finite)"
                                     : "the update was not applied";
    ++*total;
    if (run->train.on_nonfinite == HY_NONFINITE_STOP)
        return hy_fail(err, HY_ERR_RUNTIME, "step %d: non-finite loss/gradient (%s); %s; stopping "
                       "without a checkpoint of this step (train.on_nonfinite is \"stop\"; "
                       "\"skip\" goes on)", step, where, update);
    if (++*in_row > NONFINITE_MAX_IN_ROW)
        return hy_fail(err, HY_ERR_RUNTIME, "step %d: non-finite loss/gradient (%s); %s; stopping: "
                       "%d steps in a row were not finite, more than train.on_nonfinite "
                       "\"skip\" allows (%d)", step, where, update, *in_row,
                       NONFINITE_MAX_IN_ROW);
    fprintf(out, "step %d: non-finite loss/gradient (%s); %s; skipped (%d so far)\n", step, where,
            update, *total);
    return HY_OK;
}

/* A number for the JSON log, into buf (32 bytes): JSON has no NaN or
 * infinity. */
static const char *json_real(char *buf, double x) {
    if (isfinite(x)) snprintf(buf, 32, "%.6f", x);
    else snprintf(buf, 32, "null");
    return buf;
}

/* Step i's line of the JSON log, written whole (outfile.h). */
static int log_step(hy_outfile_log *log, int i, const hy_step_stats *stats, double tps,
                    hy_error *err) {
    char line[320], loss[32], norm[32];
    snprintf(line, sizeof line, "{\"step\": %d, \"loss\": %s, \"lr\": %.6e, \"grad_norm\": %s, "
             "\"tokens_per_s\": %.1f, \"ms\": %.3f%s}\n", i, json_real(loss, stats->loss),
             stats->lr, json_real(norm, stats->grad_norm), tps, stats->ms,
             stats->nonfinite ? ", \"nonfinite\": true" : "");
    return hy_outfile_log_write(log, line, err);
}

/* The passes over the training data (epochs) that began in step i: data.h
 * puts batch k of a run (counted from 0 over its steps, every replica's
 * micro-batches) in pass hy_data_epoch(k, per_pass), and step i reads
 * batches (i - 1) * per_step .. i * per_step - 1. A line on out for each
 * pass that began, and one in the log (as validate writes its lines). A
 * resumed run counts the same way: the data position restored is where
 * these batches left it. */
static void say_epochs(int i, int per_step, size_t per_pass, FILE *out, hy_outfile_log *log,
                       run_output *log_out) {
    uint64_t k = (uint64_t)i * (uint64_t)per_step;   /* batches read after step i */
    uint64_t was = i > 1 ? hy_data_epoch(k - (uint64_t)per_step - 1, per_pass) : 1;
    uint64_t now = hy_data_epoch(k - 1, per_pass);
    for (uint64_t e = was + 1; e <= now; e++) {
        fprintf(out, "data: epoch %llu begins at step %d\n", (unsigned long long)e, i);
        if (log->fd < 0 || log_out->failed) continue;
        char line[96];
        hy_error err;
        snprintf(line, sizeof line, "{\"step\": %d, \"epoch\": %llu}\n", i,
                 (unsigned long long)e);
        if (hy_outfile_log_write(log, line, &err) != HY_OK) output_broke(log_out);
    }
}

/* The validation loss after step `step`: the first train.eval_batches
 * batches of data.val (of `whole`, what it holds), the same every time,
 * so the losses of one run compare (BERT's masks are drawn per step, as
 * the runtime draws them in training). A line on out, step as the progress
 * lines show it, and one in the log (log_out: the log's output; none when
 * it has none or it failed before; a write that fails there makes the
 * run stop after this step, as any failed write does). Reads nothing the
 * training reads, and writes none of its state: weights, moments, step
 * and data position stay as they were (runtime.h: forward only, no
 * update). */
static int validate(hy_runtime *rt, const hy_run *run, int step, int whole, FILE *out,
                    hy_outfile_log *log, run_output *log_out, hy_error *err) {
    int batches = run->train.eval_batches < whole ? run->train.eval_batches : whole;
    double loss = 0, tokens = 0;
    int rc = hy_runtime_eval(rt, run->data.val, batches, &loss, &tokens, err);
    if (rc) return rc;
    int steps = run->train.steps;
    /* BERT: the masked-LM accuracy beside the loss (runtime.h). */
    double acc = run->model.kind == HY_MODEL_BERT ? hy_runtime_eval_accuracy(rt) : NAN;
    char acc_text[48] = "", acc_json[64] = "", num[32];
    if (isfinite(acc)) {
        snprintf(acc_text, sizeof acc_text, "  masked-LM accuracy %.2f%%", 100 * acc);
        snprintf(acc_json, sizeof acc_json, ", \"val_accuracy\": %s", json_real(num, acc));
    }
    fprintf(out, "step %*d/%d  val loss %.4f%s (%d batches of %s)\n",
            (int)snprintf(NULL, 0, "%d", steps), step, steps, loss, acc_text, batches,
            run->data.val);
    if (log->fd < 0 || log_out->failed) return HY_OK;
    char line[200], val[32];
    snprintf(line, sizeof line, "{\"step\": %d, \"val_loss\": %s%s, \"val_batches\": %d}\n",
             step, json_real(val, loss), acc_json, batches);
    hy_error lost;   /* said as the stop's cause (output_why) */
    if (hy_outfile_log_write(log, line, &lost) != HY_OK) output_broke(log_out);
    return HY_OK;
}

/* What a resume of checkpoint `resume` (after step `done`) must not do
 * silently: train nothing (it is at or past train.steps), or bend the
 * learning-rate curve mid-run (another schedule than the checkpoint's
 * run had: refused unless --allow-schedule-change). *was: the
 * checkpoint's schedule; changed: what differs ("" when nothing does),
 * which the run says once it starts (PATH_MAX bytes). */
static int check_resume(const hy_run *run, const cli_train_opts *o, const char *resume, int done,
                        hy_run_train *was, char *changed, hy_error *err) {
    int rc = hy_checkpoint_schedule(resume, run, was, changed, err);
    if (rc) return rc;
    int steps = run->train.steps;
    if (done >= steps) {
        char how[160];
        if (was->lr_schedule == HY_LR_CONSTANT)
            snprintf(how, sizeof how, "raise train.steps above %d (--steps N)", done);
        else
            snprintf(how, sizeof how, "raise train.steps above %d (--steps N) with "
                     "--allow-schedule-change: the learning rate's decay then runs to the new "
                     "last step", done);
        return hy_fail(err, HY_ERR_INPUT, "checkpoint %s is at step %d and train.steps is %d: "
                       "nothing is left to train. To train on, %s; or start a new run from its "
                       "weights (--set init=%s/model.safetensors, another checkpoint.dir)",
                       resume, done, steps, how, resume);
    }
    if (*changed && !(o && o->allow_schedule_change))
        return hy_fail(err, HY_ERR_INPUT, "--resume %s: this run's learning-rate schedule is not "
                       "the checkpoint's (%s): the rate would go from %.2e at step %d to %.2e at "
                       "step %d. Resume with the checkpoint's values, or pass "
                       "--allow-schedule-change to take this schedule from step %d on (a larger "
                       "train.steps to extend a run is such a change: the decay stretches to the "
                       "new last step)", resume, changed, hy_train_lr(was, done), done,
                       hy_train_lr(&run->train, done + 1), done + 1, done + 1);
    return HY_OK;
}

/* Before anything is created: the checks of checkpoint.dir and
 * --log-json. A resume into a checkpoint.dir holding newer checkpoints
 * would replace them, and a new run into one holding another run's would
 * save beside them, unless --fresh (checkpoint.h; *beside and *newest:
 * what --fresh starts beside); the log must be a regular file and none
 * of the run's inputs (outfile.h), which *inputs lists for the log's
 * open. */
static int check_outputs(const hy_run *run, const cli_train_opts *o, const char *resume,
                         int done, int *beside, int *newest, hy_outfile_inputs *inputs,
                         hy_error *err) {
    int rc = HY_OK;
    if (*resume && run->checkpoint.dir)
        rc = hy_checkpoint_check_newer(run->checkpoint.dir, resume, done, err);
    if (!*resume && run->checkpoint.dir)
        rc = hy_checkpoint_check_new_run(run->checkpoint.dir, o && o->fresh, beside, newest, err);
    if (!rc && o && o->log_json) {
        rc = hy_outfile_inputs_of_run(inputs, run, *resume ? resume : NULL, err);
        if (!rc) rc = hy_outfile_check(inputs, "--log-json", o->log_json, 1, err);
    }
    return rc;
}

/* Opens the log once the lock is held: the lock file is an input too. */
static int open_log(const hy_run *run, const cli_train_opts *o, hy_outfile_inputs *inputs,
                    hy_outfile_log *log, hy_error *err) {
    char lock[PATH_MAX + 8];
    int rc = HY_OK;
    if (run->checkpoint.dir) {
        snprintf(lock, sizeof lock, "%s/.lock", run->checkpoint.dir);
        rc = hy_outfile_inputs_add(inputs, lock, "the lock of checkpoint.dir", err);
    }
    return rc ? rc : hy_outfile_log_open(log, inputs, "--log-json", o->log_json, err);
}

int cli_train_run(const hy_run *run, const cli_train_opts *o, FILE *out, hy_error *err) {
    /* Everything that can be wrong with the input is found before anything
     * is printed or any file is opened for writing. */
    hy_dp *dp = o ? o->dp : NULL;
    hy_dp_set_watchdog(dp, run->watchdog_s);
    int writer = hy_dp_rank(dp) == 0;   /* replica 0 writes the checkpoints and the log */
    /* The backend a run uses (backend.h decides), once: said, planned
     * with and opened. `backend: "cuda"` without a usable GPU is an input
     * error. */
    hy_backend_choice chosen;
    int rc = hy_backend_describe(&run->backend, &chosen, err);
    hy_runtime *rt = NULL;
    int first = 1, steps = run->train.steps, done = 0, val_batches = 0, unverified = 0;
    size_t pos = 0;
    char resume[PATH_MAX] = "", changed[PATH_MAX] = "";
    hy_run_train was;            /* the resumed checkpoint's schedule */
    int beside = 0, newest = -1; /* another run's checkpoints a --fresh run starts beside */
    hy_checkpoint_lock lock = { .fd = -1 };
    int init_unverified = 0;
    size_t per_pass = 0;   /* batches in one pass over data.train */
    const hy_dataset *train_data = NULL;
    if (!rc && o && o->fresh && o->resume)
        rc = hy_fail(err, HY_ERR_INPUT, "--fresh starts a new run and --resume %s continues one: "
                     "give one of them", o->resume);
    /* The data first: a missing or short shard is said as such, before the
     * memory is planned and allocated (hy_train_runtime). */
    if (!rc) rc = hy_train_data_batches(run, &per_pass, err);
    if (!rc) rc = hy_train_runtime(&rt, run, &chosen, dp, &init_unverified, err);
    if (!rc && init_unverified) warn_unverified(out, run->init);
    if (!rc && o && o->resume) rc = hy_checkpoint_resolve("--resume", o->resume, resume, err);
    if (!rc && *resume) rc = hy_checkpoint_load(rt, resume, &unverified, err);
    /* Opens data.train and checks that one batch fits; a pass is counted
     * over the shards the runtime reads. */
    if (!rc) rc = hy_runtime_get_progress(rt, &done, &pos, err);
    if (!rc) rc = hy_runtime_data(rt, &train_data, err);
    if (!rc) per_pass = hy_dataset_batches(train_data, run->micro_batch_size, run->model.seq_len);
    if (!rc && run->data.val) rc = hy_train_shard_batches(run, run->data.val, &val_batches, err);
    hy_outfile_inputs inputs;
    hy_outfile_inputs_init(&inputs);
    if (!rc && writer)
        rc = check_outputs(run, o, resume, done, &beside, &newest, &inputs, err);
    if (!rc && *resume) rc = check_resume(run, o, resume, done, &was, changed, err);
    /* Data parallelism: one replica's bad input ends them all, with its
     * error; and they must all run the same config. */
    rc = hy_dp_agree(dp, rc, err);
    if (!rc) rc = hy_train_same_config(run, dp, err);
    /* After the other checks, so a run refused for them leaves no
     * directory behind; before the log, so a refused one leaves no log:
     * one writer per checkpoint.dir (checkpoint.h). */
    if (!rc && writer && run->checkpoint.dir)
        rc = hy_checkpoint_lock_dir(run->checkpoint.dir, &lock, err);
    hy_outfile_log log = { .fd = -1 };
    if (!rc && writer && o && o->log_json) rc = open_log(run, o, &inputs, &log, err);
    hy_outfile_inputs_free(&inputs);
    if (!hy_dp_agreed(dp)) rc = hy_dp_agree(dp, rc, err);
    if (rc) {
        hy_outfile_log_discard(&log);   /* a log this run made, which never started */
        hy_checkpoint_unlock(&lock);
        hy_runtime_destroy(rt);
        return rc;
    }
    fprintf(out, "backend: %s\n", chosen.why);
    print_header(run, hy_dp_size(dp), out);
    if (lock.leftovers)
        fprintf(out, "removed %d temporar%s an interrupted save left in %s\n", lock.leftovers,
                lock.leftovers == 1 ? "y" : "ies", run->checkpoint.dir);
    if (beside)
        fprintf(out, "checkpoint.dir %s holds %d checkpoint%s of another run (newest step %d); "
                "this run starts over beside them (--fresh): its saves replace theirs of the "
                "same step, and --resume %s continues the newest step, whichever run's\n", run->checkpoint.dir, beside, beside == 1 ? "" : "s",
                newest, run->checkpoint.dir);
    if (*resume) {
        if (unverified) warn_unverified(out, resume);
        fprintf(out, "resumed from %s after step %d\n", resume, done);
        if (*changed)
            fprintf(out, "learning-rate schedule changed (--allow-schedule-change): %s; the rate "
                    "goes from %.2e at step %d to %.2e at step %d\n", changed,
                    hy_train_lr(&was, done), done, hy_train_lr(&run->train, done + 1), done + 1);
        first = done + 1;
    }
    /* A write to either that fails stops the run after that step. */
    const volatile sig_atomic_t *stop = o ? o->stop : NULL;
    run_output outs[2] = { { out, "standard output", 0, stop, 0 },
                           { NULL, log.fd >= 0 ? o->log_json : NULL, 1, stop, 0 } };
    double total_ms = 0;
    int stopped = 0, saved = 0;   /* the step a stop request ended the run at; the last saved */
    int validated = 0;            /* the last step the validation loss was taken after */
    int stop_sig = 0;             /* the signal that asked (the largest of the replicas') */
    int bad = 0, n_bad = 0, bad_in_row = 0;   /* this step, all steps, in a row: not finite */
    char saved_path[PATH_MAX] = "";
    for (int i = first; i <= steps && !rc; i++) {
        hy_step_stats stats;
        if (o && o->before_step) rc = o->before_step(rt, i, o->before_step_ctx, err);
        if (!rc) rc = hy_train_step(rt, &stats, err);
        if (rc) break;
        total_ms += stats.ms;
        double tps = stats.tokens / (stats.ms / 1e3);
        if (i % run->train.log_every == 0 || i == steps || i == first) {
            fprintf(out, "step %*d/%d  loss %.4f  lr %.2e  norm %.3f  %.0f tok/s  %.1f ms  eta ",
                    (int)snprintf(NULL, 0, "%d", steps), i, steps, stats.loss, stats.lr, stats.grad_norm,
                    tps, stats.ms);
            print_eta(out, total_ms / (i - first + 1) * (steps - i) / 1e3);
            fputc('\n', out);
        }
        if (log.fd >= 0 && !outs[1].failed && log_step(&log, i, &stats, tps, err) != HY_OK)
            output_broke(&outs[1]);   /* the run stops after this step, saved */
        say_epochs(i, hy_dp_size(dp) * run->sched.micro_batches, per_pass, out, &log, &outs[1]);
        bad = stats.nonfinite;
        if (!bad) bad_in_row = 0;
        else if (!rc) rc = nonfinite(rt, run, i, &stats, &n_bad, &bad_in_row, out, err);
        output_flush(&outs[0]);   /* the step's lines, at once */
        /* Every replica saw the same loss and norm, so they all stop here
         * alike: one error, reported once. */
        if (bad && hy_dp_size(dp) > 1) rc = hy_dp_agree(dp, rc, err);
        /* Never a checkpoint right after a step that was not finite: what
         * made it so may sit in the weights. The next good one is saved. */
        if (!rc && run->checkpoint.dir &&
            ((run->checkpoint.every > 0 && i % run->checkpoint.every == 0) || i == steps)) {
            if (bad) {
                fprintf(out, "checkpoint of step %d not written: the step was not finite\n", i);
            } else {
                rc = save(rt, run, dp, saved_path, out, err);
                if (!rc) saved = i;
            }
        }
        /* train.eval_every: after the step's checkpoint, so a failing
         * evaluation loses no step. Every replica evaluates alike. */
        if (!rc && run->data.val && run->train.eval_every > 0 && i % run->train.eval_every == 0) {
            rc = validate(rt, run, i, val_batches, out, &log, &outs[1], err);
            if (!rc) validated = i;
            output_flush(&outs[0]);
        }
        /* Only between steps: a step is never cut in half. Replicas stop
         * together, at the first step after any of them was asked to. */
        if (!rc) rc = stop_asked(o, output_failed(outs), dp, &stop_sig, err);
        if (!rc && stop_sig) stopped = i;
        if (stopped) break;
    }
    if (!rc && n_bad)
        fprintf(out, "%d non-finite step%s skipped (train.on_nonfinite is \"skip\")\n", n_bad,
                n_bad == 1 ? "" : "s");
    /* The validation after the last step, unless train.eval_every took it. */
    if (!rc && !stopped && run->data.val && validated != steps)
        rc = validate(rt, run, steps, val_batches, out, &log, &outs[1], err);
    for (int k = 0; k < 2; k++) output_flush(&outs[k]);
    /* A request that came during the last step or the validation still
     * gets its answer (the last step was saved already, when there is a
     * checkpoint.dir, unless the run resumed at its end and took none);
     * so does an output that failed only now. */
    int last = stopped ? stopped : first <= steps ? steps : done;
    if (!rc && !stopped) rc = stop_asked(o, output_failed(outs), dp, &stop_sig, err);
    if (!rc && stop_sig)
        rc = stop_run(rt, run, dp, last, saved == last ? saved_path : NULL, bad, stop_sig,
                      output_failed(outs), out, err);
    /* The signal the run ended on, as main's status: not when it failed
     * (an output that could not be written, other than a broken pipe). */
    if (o && o->stopped_by) *o->stopped_by = rc ? 0 : stop_sig;
    hy_runtime_destroy(rt);
    hy_checkpoint_unlock(&lock);
    hy_error closing;
    if (hy_outfile_log_close(&log, &closing) && !rc && !outs[1].failed) {
        *err = closing;
        rc = err->status;
    }
    return rc;
}

typedef struct {
    cli_train_opts opts;
    hy_flag_list sets;
    int steps;          /* --steps; 0: not given */
} train_args;

static const hy_flag train_flags[] = {
    { .name = "--steps", .kind = HY_FLAG_INT, .off = offsetof(train_args, steps),
      .example = "50", .lo = 1, .hi = INT_MAX },
    CLI_SET_FLAG(train_args, "train.lr=3e-4"),
    { .name = "--log-json", .kind = HY_FLAG_STRING, .off = offsetof(train_args, opts.log_json),
      .example = "train.jsonl" },
    { .name = "--resume", .kind = HY_FLAG_STRING, .off = offsetof(train_args, opts.resume),
      .example = "checkpoints/step_000100" },
    { .name = "--allow-schedule-change", .kind = HY_FLAG_SWITCH,
      .off = offsetof(train_args, opts.allow_schedule_change) },
    { .name = "--fresh", .kind = HY_FLAG_SWITCH, .off = offsetof(train_args, opts.fresh) },
    { .name = NULL },
};
static const hy_args_spec train_spec = {
    .command = "train", .flags = train_flags, .operand = "config file",
    .synopsis = "hanayo train CONFIG [--steps N] [--set key=value]... [--log-json FILE]" };

static int cmd_train(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    int stopped_by = 0;
    train_args a = { .opts = { .log_json = NULL, .resume = NULL, .stop = &stop_signal,
                               .stopped_by = &stopped_by },
                     .sets = { 0 }, .steps = 0 };
    hy_args_result got;
    char steps_set[32];
    int rc = cli_read_args(cmd, argc, argv, &a, &got, err);
    /* --steps becomes one more --set, the last, so it wins over a --set
     * train.steps=... and meets the config's checks. */
    if (rc == HY_OK && a.steps > 0) {
        snprintf(steps_set, sizeof steps_set, "train.steps=%d", a.steps);
        rc = hy_flag_list_add(&a.sets, steps_set, err);
    }
    hy_dp *dp = NULL;
    FILE *out = stdout;
    /* Under mpirun or srun, one of the data-parallel replicas: only
     * replica 0 prints progress and writes the log. */
    if (rc == HY_OK && !got.help) rc = hy_dp_start(&dp, NULL, NULL, err);
    if (rc == HY_OK && hy_dp_rank(dp) != 0) {
        a.opts.log_json = NULL;
        if (!(out = fopen("/dev/null", "w")))
            rc = hy_fail(err, HY_ERR_RUNTIME, "cannot open /dev/null: %s", strerror(errno));
    }
    a.opts.dp = dp;
    if (rc == HY_OK && !got.help) {
        hy_run run;
        rc = cli_load_run(&run, got.operand, &a.sets, HY_CONFIG_FOR_STAGES, err);
        /* A config that fails on one replica: the others learn it in
         * cli_train_run's first agreement, which this one meets here. */
        if (rc != HY_OK && dp) rc = hy_dp_agree(dp, rc, err);
        if (rc == HY_OK) catch_stop_signals();
        if (rc == HY_OK) rc = cli_train_run(&run, &a.opts, out, err);
        hy_run_free(&run);
        if (dp) rc = rc != HY_OK ? cli_replica_failed(dp, rc, err) : HY_OK;
    }
    if (out != stdout && out) fclose(out);
    hy_dp_finish(dp);
    hy_flag_list_free(&a.sets);
    if (rc == HY_OK) exit_signal = stopped_by;   /* main's exit status */
    return rc;
}

const cli_command cli_train_command = {"train", cmd_train, usage_train, &train_spec, NULL, 0};

/* ---- hanayo eval ------------------------------------------------------------- */

/* The line that says which weights eval scores, on warn. */
static void say_weights(const hy_run *run, const char *init_flag, FILE *warn) {
    if (!warn) return;
    if (!run->init)
        fprintf(warn, "weights: the seeded initialization (train.seed %llu): no --init, no init "
                "key\n", run->train.seed);
    else if (!init_flag)
        fprintf(warn, "weights: %s (the config's init)\n", run->init);
    else if (strcmp(init_flag, run->init) != 0)
        fprintf(warn, "weights: %s (--init %s)\n", run->init, init_flag);
    else
        fprintf(warn, "weights: %s\n", run->init);
    fflush(warn);
}

/* s as a JSON string, quoted and escaped, into buf (n bytes; a path is
 * at most PATH_MAX, each byte at most 6 escaped). */
static const char *json_quote(const char *s, char *buf, size_t n) {
    size_t used = 0;
    buf[used++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p && used + 8 < n; p++) {
        if (*p == '"' || *p == '\\') {
            buf[used++] = '\\';
            buf[used++] = (char)*p;
        } else if (*p < 0x20) {
            used += (size_t)snprintf(buf + used, n - used, "\\u%04x", *p);
        } else {
            buf[used++] = (char)*p;
        }
    }
    buf[used++] = '"';
    buf[used] = '\0';
    return buf;
}

int cli_eval_run(const hy_run *run, const char *shard, int batches, const char *init_flag,
                 FILE *out, FILE *warn, hy_error *err) {
    if (!shard) shard = run->data.val ? run->data.val : run->data.train[0];
    hy_backend_choice chosen;   /* said nowhere: stdout is one JSON line */
    int rc = hy_backend_describe(&run->backend, &chosen, err);
    if (rc) return rc;
    /* Every whole batch the shard holds by default; never more: reading
     * on would wrap to the start and count batches twice. */
    int whole = 0;
    rc = hy_train_shard_batches(run, shard, &whole, err);
    if (rc) return rc;
    if (batches > whole)
        return hy_fail(err, HY_ERR_INPUT, "eval --batches %d: %s holds %d whole batch%s of "
                       "micro_batch_size x seq_len = %d x %d tokens; give at most %d (or leave "
                       "--batches out for all of them)", batches, shard, whole,
                       whole == 1 ? "" : "es", run->micro_batch_size, run->model.seq_len, whole);
    if (batches <= 0) batches = whole;
    hy_runtime *rt = NULL;
    double loss = 0, tokens = 0;
    int unverified = 0;
    rc = hy_train_runtime(&rt, run, &chosen, NULL, &unverified, err);
    if (!rc && unverified) warn_unverified(warn, run->init);
    if (!rc) rc = hy_runtime_eval(rt, shard, batches, &loss, &tokens, err);
    /* BERT: the masked-LM accuracy beside the loss (runtime.h). */
    double acc = !rc && run->model.kind == HY_MODEL_BERT ? hy_runtime_eval_accuracy(rt) : NAN;
    hy_runtime_destroy(rt);
    /* JSON has no NaN: a loss that is not finite (the weights were, so
     * the model's arithmetic overflowed) is a failure, not a line. */
    if (!rc && !isfinite(loss))
        rc = hy_fail(err, HY_ERR_RUNTIME, "eval: the mean loss over %d batches of %s is %s: the "
                     "model's arithmetic overflowed (its weights are finite but too large?)",
                     batches, shard, isnan(loss) ? "NaN" : "infinite");
    /* Only with the loss: a failure is said by its error line alone. */
    if (!rc) say_weights(run, init_flag, warn);
    char weights[6 * PATH_MAX + 8], acc_json[48] = "";
    if (isfinite(acc)) snprintf(acc_json, sizeof acc_json, ", \"accuracy\": %.7f", acc);
    if (!rc)
        fprintf(out, "{\"loss\": %.7f%s, \"batches\": %d, \"tokens\": %.0f, \"weights\": %s}\n",
                loss, acc_json, batches, tokens,
                run->init ? json_quote(run->init, weights, sizeof weights) : "null");
    return rc;
}

typedef struct {
    hy_flag_list sets;
    const char *init, *data;
    int batches;        /* 0: every whole batch */
} eval_args;

#define EVAL(field) offsetof(eval_args, field)
static const hy_flag eval_flags[] = {
    { .name = "--init", .kind = HY_FLAG_STRING, .off = EVAL(init),
      .example = "checkpoints/tiny-gpt" },
    { .name = "--data", .kind = HY_FLAG_STRING, .off = EVAL(data),
      .example = "data/synth_val.bin" },
    { .name = "--batches", .kind = HY_FLAG_INT, .off = EVAL(batches), .example = "20",
      .lo = 1, .hi = 1000000 },
    CLI_SET_FLAG(eval_args, "model.layers=12"),
    { .name = NULL },
};
static const hy_args_spec eval_spec = {
    .command = "eval", .flags = eval_flags, .operand = "config file",
    .synopsis = "hanayo eval CONFIG [--init WEIGHTS|DIR] [--data SHARD] [--batches N]" };

static int cmd_eval(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    eval_args a = { .sets = { 0 }, .init = NULL, .data = NULL, .batches = 0 };
    char *init_set = NULL, file[PATH_MAX];
    hy_args_result got;
    int rc = cli_read_args(cmd, argc, argv, &a, &got, err);
    if (rc == HY_OK && !got.help && a.init) rc = cli_weights_file("--init", a.init, file, err);
    /* --init becomes one more --set, the last, so the config's checks see
     * it and it wins over a --set init=... */
    if (rc == HY_OK && !got.help && a.init) {
        init_set = malloc(strlen(file) + sizeof "init=");
        if (!init_set) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        else sprintf(init_set, "init=%s", file);
        if (rc == HY_OK) rc = hy_flag_list_add(&a.sets, init_set, err);
    }
    if (rc == HY_OK && !got.help) {
        hy_run run;
        rc = cli_load_run(&run, got.operand, &a.sets, HY_CONFIG_FOR_STAGES, err);
        if (rc == HY_OK) rc = cli_eval_run(&run, a.data, a.batches, a.init, stdout, stderr, err);
        hy_run_free(&run);
    }
    free(init_set);
    hy_flag_list_free(&a.sets);
    return rc;
}

const cli_command cli_eval_command = {"eval", cmd_eval, usage_eval, &eval_spec, NULL, 0};
