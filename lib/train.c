/*
 * train.c — see train.h.
 */
#include "train.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "checkpoint.h"
#include "checksum.h"
#include "data.h"
#include "dp.h"
#include "model.h"
#include "order.h"
#include "plan.h"
#include "runtime.h"
#include "schedule.h"
#include "weights.h"

/* Says, on warn, that a checkpoint was loaded that could not be checked. */
static void hy_warn_unverified(FILE *warn, const char *what) {
    if (warn)
        fprintf(warn, "warning: %s was written without checksums (checkpoint format 1); loaded "
                "unverified\n", what);
}

int hy_train_runtime(hy_runtime **out, const hy_config *c, struct hy_dp *dp, FILE *warn,
                     hy_error *err) {
    int unverified = 0;
    int rc = hy_runtime_create_dp(out, c, dp, err);
    /* A checkpoint's weights are checked like a resume's (checkpoint.h). */
    if (!rc && c->init) rc = hy_checkpoint_verify_file(c->init, &unverified, err);
    if (!rc && c->init) rc = hy_weights_load(*out, c->init, err);
    if (!rc && unverified) hy_warn_unverified(warn, c->init);
    if (rc) {
        hy_runtime_destroy(*out);
        *out = NULL;
    }
    return rc;
}

double hy_train_lr(const hy_config *c, int step) {
    double lr = c->train.lr, min_lr = c->train.min_lr;
    int warm = c->train.warmup_steps, total = c->train.steps;
    if (step <= warm) return lr * step / (warm > 0 ? warm : 1);
    if (total <= warm) return lr;
    double progress = (double)(step - warm) / (double)(total - warm);
    if (progress > 1.0) progress = 1.0;
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(3.141592653589793 * progress));
}

int hy_train_step(hy_runtime *rt, const hy_config *c, hy_step_stats *st, hy_error *err) {
    int last = 0;
    size_t pos = 0;
    int rc = hy_runtime_get_progress(rt, &last, &pos, err);
    return rc ? rc : hy_runtime_step(rt, hy_train_lr(c, last + 1), st, err);
}

/* The backend a run uses (backend.h decides), said on `out` when not NULL.
 * `backend: "cuda"` without a usable GPU is an input error. */
static int hy_pick_backend(const hy_config *c, FILE *out, hy_error *err) {
    hy_backend_request rq;
    hy_backend_choice chosen;
    hy_backend_request_from_config(c, &rq);
    int rc = hy_backend_describe(&rq, &chosen, err);
    if (!rc && out) fprintf(out, "backend: %s\n", chosen.why);
    return rc;
}

static void hy_print_header(const hy_config *c, int replicas, FILE *out) {
    hy_model m;
    hy_error err;
    if (hy_model_build(&m, c, 1, &err) == HY_OK) {
        fprintf(out, "model: %s, %d layers, d_model %d, %d heads, seq_len %d, vocab %d: %.2fM parameters\n",
                c->model.kind == HY_MODEL_GPT ? "gpt" : "bert", m.layers, m.d_model, m.heads,
                m.seq_len, m.vocab, hy_model_param_count(&m) / 1e6);
        fprintf(out, "stages:");
        for (int s = 0; s < m.stages; s++) fprintf(out, " %d", m.n_layers[s]);
        fprintf(out, " layers\n");
        hy_model_free(&m);
    }
    hy_sched_params sp;
    hy_sched_params_from_config(c, &sp);
    hy_plan pl;
    /* The order the runtime runs: chosen for the config's transfer time. */
    hy_costs uc = hy_order_costs(&sp, c->schedule.comm_cost);
    if (hy_plan_build(&pl, &sp, &uc, &err) == HY_OK) {
        fprintf(out, "schedule: %s, P = %d, M = %d", hy_sched_name(sp.kind), sp.ranks,
                sp.micro_batches);
        if (sp.kind == HY_SCHED_HANAYO) fprintf(out, ", W = %d", sp.waves);
        if (sp.kind == HY_SCHED_INTERLEAVED) fprintf(out, ", v = %d", sp.chunks);
        if (sp.split_backward) fprintf(out, ", split backward");
        fprintf(out, ", %d stages, bubble %.4f (uniform costs", pl.sched.stages, pl.sim.bubble);
        if (uc.comm > 0) fprintf(out, ", c = %g", uc.comm);
        fprintf(out, "), peak activations %d\n", hy_plan_peak_max(&pl));
        hy_plan_free(&pl);
    }
    int per = c->schedule.micro_batches * c->schedule.micro_batch_size * c->model.seq_len;
    if (replicas > 1)
        fprintf(out, "data parallel: %d replicas (MPI), each %d micro-batches of the step's %d\n",
                replicas, c->schedule.micro_batches, replicas * c->schedule.micro_batches);
    fprintf(out, "batch: %d micro-batches x %d sequences x %d tokens = %d tokens per step\n",
            replicas * c->schedule.micro_batches, c->schedule.micro_batch_size, c->model.seq_len,
            replicas * per);
}

static void hy_print_eta(FILE *out, double seconds) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600) fprintf(out, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else fprintf(out, "%ld:%02ld", s / 60, s % 60);
}

/* Whole batches in a shard (0 if it cannot be opened: err says why). */
static int hy_shard_batches(const hy_config *c, const char *path, int *batches, hy_error *err) {
    hy_shard sh;
    int rc = hy_shard_open(&sh, path, c->model.vocab, err);
    if (rc) return rc;
    size_t per = (size_t)c->schedule.micro_batch_size * c->model.seq_len;
    size_t tokens = sh.n, n = (tokens - 1) / per;
    hy_shard_close(&sh);
    if (n == 0)
        return hy_fail(err, HY_ERR_INPUT, "%s: the shard holds %zu tokens, fewer than one batch "
                       "needs: B x T + 1 = %d x %d + 1 = %zu", path, tokens,
                       c->schedule.micro_batch_size, c->model.seq_len, per + 1);
    *batches = n > 1000000 ? 1000000 : (int)n;
    return HY_OK;
}

/* The validation loss after training: up to 20 batches of data.val. */
static int hy_validate(hy_runtime *rt, const hy_config *c, int step, FILE *out, FILE *log,
                       hy_error *err) {
    int batches = 0;
    int rc = hy_shard_batches(c, c->data.val, &batches, err);
    double loss = 0, tokens = 0;
    if (batches > 20) batches = 20;
    if (!rc) rc = hy_runtime_eval(rt, c->data.val, batches, &loss, &tokens, err);
    if (rc) return rc;
    fprintf(out, "val loss %.4f (%d batches of %s)\n", loss, batches, c->data.val);
    if (log) fprintf(log, "{\"step\": %d, \"val_loss\": %.6f, \"val_batches\": %d}\n", step, loss,
                     batches);
    return HY_OK;
}

/* The stop request's signal by name (train.h: the CLI stores its number). */
static const char *hy_stop_cause(int sig, char *buf, size_t n) {
    if (sig == SIGINT) return "SIGINT";
    if (sig == SIGTERM) return "SIGTERM";
    snprintf(buf, n, "signal %d", sig);
    return buf;
}

/* The CRC-32C of every weight of rt, in the model's parameter order. */
static int hy_weights_crc(hy_runtime *rt, uint32_t *crc, hy_error *err) {
    const hy_model *m = hy_runtime_model(rt);
    float *buf = malloc(hy_model_max_numel(m) * sizeof(float) + 1);
    if (!buf) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    int rc = HY_OK;
    *crc = 0;
    for (int i = 0; i < m->n_params && !rc; i++) {
        size_t n = hy_model_real_numel(m, &m->params[i]);
        rc = hy_runtime_get(rt, HY_T_PARAM, &m->params[i], buf, n, err);
        if (!rc) *crc = hy_crc32c(*crc, buf, n * sizeof(float));
    }
    free(buf);
    return rc;
}

/* Data parallelism: every replica must hold the same weights, since the
 * summed gradients are the same everywhere. Checked at each checkpoint
 * (a collective: every replica saves at the same steps), so a divergence
 * is caught before replica 0's checkpoint stands for all of them. */
static int hy_replicas_agree(hy_runtime *rt, hy_dp *dp, hy_error *err) {
    if (hy_dp_size(dp) == 1) return HY_OK;
    uint32_t crc = 0;
    int same = 0, rc = hy_weights_crc(rt, &crc, err);
    rc = hy_dp_agree(dp, rc, err);
    if (!rc) rc = hy_dp_same(dp, crc, &same, err);
    if (!rc && !same)
        rc = hy_dp_agree(dp, hy_fail(err, HY_ERR_RUNTIME, "the data-parallel replicas' weights "
                                     "differ (their gradient sums disagreed): the run cannot "
                                     "go on; resume from the last checkpoint"), err);
    return rc;
}

int hy_train_same_config(const hy_config *c, hy_dp *dp, hy_error *err) {
    if (hy_dp_size(dp) == 1) return HY_OK;
    char *text = hy_config_to_json(c);
    uint32_t crc = text ? hy_crc32c(0, text, strlen(text)) : 0;
    free(text);
    int same = 0, rc = hy_dp_same(dp, crc, &same, err);
    if (!rc && !same)
        rc = hy_dp_agree(dp, hy_fail(err, HY_ERR_INPUT, "the data-parallel replicas were given "
                                     "different configs (compare `hanayo check` of each): give "
                                     "every process the same config and --set flags"), err);
    return rc;
}

/* Saves rt's last step into checkpoint.dir, says so, then applies
 * checkpoint.keep: only now, with the new checkpoint complete and synced,
 * may older ones go. A failed removal is a warning, not the end of a run
 * whose newest state is safe. The path goes to path (PATH_MAX bytes). */
static int hy_save_here(hy_runtime *rt, const hy_config *c, char *path, FILE *out,
                        hy_error *err) {
    int rc = hy_checkpoint_save(rt, c, c->checkpoint.dir, path, err);
    if (rc) return rc;
    fprintf(out, "checkpoint: %s\n", path);
    int step = 0, removed = 0;
    size_t pos = 0;
    hy_error e;
    if (hy_runtime_get_progress(rt, &step, &pos, &e) ||
        hy_checkpoint_prune(c->checkpoint.dir, c->checkpoint.keep, step, &removed, &e))
        fprintf(out, "warning: checkpoint.keep: older checkpoints not all removed: %s\n", e.msg);
    return HY_OK;
}

/* Replica 0 writes; the others wait for it to finish, so that none waits
 * for it inside the next step, where the watchdog would take a long save
 * for a stalled replica. That one wait is not watched: replica 0 is busy
 * writing, and if it dies the launcher ends the job. */
static int hy_save(hy_runtime *rt, const hy_config *c, hy_dp *dp, char *path, FILE *out,
                   hy_error *err) {
    int rc = hy_replicas_agree(rt, dp, err);
    if (rc) return rc;
    if (hy_dp_rank(dp) == 0) rc = hy_save_here(rt, c, path, out, err);
    if (hy_dp_size(dp) > 1) {
        hy_dp_set_watchdog(dp, 0);
        rc = hy_dp_agree(dp, rc, err);
        hy_dp_set_watchdog(dp, c->watchdog_s);
    }
    return rc;
}

/* Whether a stop was asked (*sig: the signal, 0: none), agreed by the
 * replicas: the largest signal any of them got, so they stop together. */
static int hy_stop_asked(const hy_train_opts *o, hy_dp *dp, int *sig, hy_error *err) {
    *sig = 0;
    if (!o || !o->stop) return HY_OK;
    *sig = *o->stop;
    return hy_dp_max(dp, sig, err);
}

/* A run asked to stop after step `step`: save that step unless `saved`
 * (its checkpoint, just written) is given or the step was not finite
 * (`bad`), and say where the run stopped and how to go on. */
static int hy_stop(hy_runtime *rt, const hy_config *c, hy_dp *dp, int step, const char *saved,
                   int bad, int sig, FILE *out, hy_error *err) {
    char path[PATH_MAX] = "", cause[32];
    if (c->checkpoint.dir && !saved && !bad) {
        int rc = hy_save(rt, c, dp, path, out, err);
        if (rc) return rc;
        saved = path;
    }
    fprintf(out, "stopped at step %d because of %s; ", step, hy_stop_cause(sig, cause, sizeof cause));
    if (saved) fprintf(out, "continue with --resume %s\n", saved);
    else if (c->checkpoint.dir) fprintf(out, "no checkpoint written: the step was not finite\n");
    else fprintf(out, "no checkpoint written: no checkpoint.dir is configured\n");
    fflush(out);
    return HY_OK;
}

/* train.on_nonfinite: `skip` still stops after more than this many
 * non-finite steps in a row; a run that bad is not going to recover. */
#define HY_NONFINITE_MAX_IN_ROW 10

/* Step `step` had a NaN or infinity in its loss or gradient norm (the
 * runtime's one fused check; a non-finite norm made every rank skip the
 * update): say where, then per train.on_nonfinite end the run (an error,
 * before anything is saved) or count it and go on. */
static int hy_nonfinite(hy_runtime *rt, const hy_config *c, int step, const hy_step_stats *st,
                        int *total, int *in_row, FILE *out, hy_error *err) {
    char where[512];
    int rc = hy_runtime_nonfinite_where(rt, where, sizeof where, err);
    if (rc) return rc;
    const char *update = st->updated ? "the update was applied (the gradient norm was finite)"
                                     : "the update was not applied";
    ++*total;
    if (c->train.on_nonfinite == HY_NONFINITE_STOP)
        return hy_fail(err, HY_ERR_RUNTIME, "step %d: non-finite loss/gradient (%s); %s; stopping "
                       "without a checkpoint of this step (train.on_nonfinite is \"stop\"; "
                       "\"skip\" goes on)", step, where, update);
    if (++*in_row > HY_NONFINITE_MAX_IN_ROW)
        return hy_fail(err, HY_ERR_RUNTIME, "step %d: non-finite loss/gradient (%s); %s; stopping: "
                       "%d steps in a row were not finite, more than train.on_nonfinite "
                       "\"skip\" allows (%d)", step, where, update, *in_row,
                       HY_NONFINITE_MAX_IN_ROW);
    fprintf(out, "step %d: non-finite loss/gradient (%s); %s; skipped (%d so far)\n", step, where,
            update, *total);
    fflush(out);
    return HY_OK;
}

/* A number for the JSON log: JSON has no NaN or infinity. */
static void hy_json_real(FILE *f, const char *fmt, double x) {
    if (isfinite(x)) fprintf(f, fmt, x);
    else fputs("null", f);
}

int hy_train(const hy_config *c, const hy_train_opts *o, FILE *out, hy_error *err) {
    /* Everything that can be wrong with the input is found before anything
     * is printed or any file is opened for writing. */
    hy_dp *dp = o ? o->dp : NULL;
    hy_dp_set_watchdog(dp, c->watchdog_s);
    int writer = hy_dp_rank(dp) == 0;   /* replica 0 writes the checkpoints and the log */
    int rc = hy_pick_backend(c, NULL, err);
    hy_runtime *rt = NULL;
    int first = 1, steps = c->train.steps, done = 0, val_batches = 0, unverified = 0;
    size_t pos = 0;
    char resume[PATH_MAX] = "";
    hy_checkpoint_lock lock = { .fd = -1 };
    if (!rc) rc = hy_train_runtime(&rt, c, dp, out, err);
    if (!rc && o && o->resume) rc = hy_checkpoint_resolve(o->resume, resume, err);
    if (!rc && *resume) rc = hy_checkpoint_load(rt, c, resume, &unverified, err);
    /* Opens data.train and checks that one batch fits. */
    if (!rc) rc = hy_runtime_get_progress(rt, &done, &pos, err);
    if (!rc && c->data.val) rc = hy_shard_batches(c, c->data.val, &val_batches, err);
    /* Data parallelism: one replica's bad input ends them all, with its
     * error; and they must all run the same config. */
    rc = hy_dp_agree(dp, rc, err);
    if (!rc) rc = hy_train_same_config(c, dp, err);
    /* After the other checks, so a run refused for them leaves no
     * directory behind; before the log, so a refused one leaves no log:
     * one writer per checkpoint.dir (checkpoint.h). */
    if (!rc && writer && c->checkpoint.dir)
        rc = hy_checkpoint_lock_dir(c->checkpoint.dir, &lock, err);
    FILE *log = NULL;
    if (!rc && writer && o && o->log_json) {
        log = fopen(o->log_json, "w");
        if (!log)
            rc = hy_fail(err, hy_errno_status(errno, HY_ERR_INPUT),
                         "--log-json %s: cannot open for writing: %s", o->log_json, strerror(errno));
    }
    if (!hy_dp_agreed(dp)) rc = hy_dp_agree(dp, rc, err);
    if (rc) {
        if (log) {
            fclose(log);
            unlink(o->log_json);   /* it was made by this run, which never started */
        }
        hy_checkpoint_unlock(&lock);
        hy_runtime_destroy(rt);
        return rc;
    }
    hy_pick_backend(c, out, err);
    hy_print_header(c, hy_dp_size(dp), out);
    if (lock.leftovers)
        fprintf(out, "removed %d temporar%s an interrupted save left in %s\n", lock.leftovers,
                lock.leftovers == 1 ? "y" : "ies", c->checkpoint.dir);
    if (*resume) {
        if (unverified) hy_warn_unverified(out, resume);
        fprintf(out, "resumed from %s after step %d\n", resume, done);
        first = done + 1;
    }
    double total_ms = 0;
    int stopped = 0, saved = 0;   /* the step a stop request ended the run at; the last saved */
    int stop_sig = 0;             /* the signal that asked (the largest of the replicas') */
    int bad = 0, n_bad = 0, bad_in_row = 0;   /* this step, all steps, in a row: not finite */
    char saved_path[PATH_MAX] = "";
    for (int i = first; i <= steps && !rc; i++) {
        hy_step_stats st;
        if (o && o->before_step) rc = o->before_step(rt, i, o->before_step_ctx, err);
        if (!rc) rc = hy_train_step(rt, c, &st, err);
        if (rc) break;
        total_ms += st.ms;
        double tps = st.tokens / (st.ms / 1e3);
        if (i % c->train.log_every == 0 || i == steps || i == first) {
            fprintf(out, "step %*d/%d  loss %.4f  lr %.2e  norm %.3f  %.0f tok/s  %.1f ms  eta ",
                    (int)snprintf(NULL, 0, "%d", steps), i, steps, st.loss, st.lr, st.grad_norm,
                    tps, st.ms);
            hy_print_eta(out, total_ms / (i - first + 1) * (steps - i) / 1e3);
            fputc('\n', out);
            fflush(out);
        }
        if (log) {
            fprintf(log, "{\"step\": %d, \"loss\": ", i);
            hy_json_real(log, "%.6f", st.loss);
            fprintf(log, ", \"lr\": %.6e, \"grad_norm\": ", st.lr);
            hy_json_real(log, "%.6f", st.grad_norm);
            fprintf(log, ", \"tokens_per_s\": %.1f, \"ms\": %.3f%s}\n", tps, st.ms,
                    st.nonfinite ? ", \"nonfinite\": true" : "");
            if (fflush(log) != 0)
                rc = hy_fail(err, HY_ERR_RUNTIME, "--log-json %s: write failed: %s", o->log_json,
                             strerror(errno));
        }
        bad = st.nonfinite;
        if (!bad) bad_in_row = 0;
        else if (!rc) rc = hy_nonfinite(rt, c, i, &st, &n_bad, &bad_in_row, out, err);
        /* Every replica saw the same loss and norm, so they all stop here
         * alike: one error, reported once. */
        if (bad && hy_dp_size(dp) > 1) rc = hy_dp_agree(dp, rc, err);
        /* Never a checkpoint right after a step that was not finite: what
         * made it so may sit in the weights. The next good one is saved. */
        if (!rc && c->checkpoint.dir &&
            ((c->checkpoint.every > 0 && i % c->checkpoint.every == 0) || i == steps)) {
            if (bad) {
                fprintf(out, "checkpoint of step %d not written: the step was not finite\n", i);
            } else {
                rc = hy_save(rt, c, dp, saved_path, out, err);
                if (!rc) saved = i;
            }
        }
        /* Only between steps: a step is never cut in half. Replicas stop
         * together, at the first step after any of them was asked to. */
        if (!rc) rc = hy_stop_asked(o, dp, &stop_sig, err);
        if (!rc && stop_sig) stopped = i;
        if (stopped) break;
    }
    if (!rc && n_bad)
        fprintf(out, "%d non-finite step%s skipped (train.on_nonfinite is \"skip\")\n", n_bad,
                n_bad == 1 ? "" : "s");
    if (!rc && !stopped && c->data.val) rc = hy_validate(rt, c, steps, out, log, err);
    /* A request that came during the last step or the validation still
     * gets its answer (the last step was saved already, when there is a
     * checkpoint.dir, unless the run resumed at its end and took none). */
    int last = stopped ? stopped : first <= steps ? steps : done;
    if (!rc && !stopped) rc = hy_stop_asked(o, dp, &stop_sig, err);
    if (!rc && stop_sig)
        rc = hy_stop(rt, c, dp, last, saved == last ? saved_path : NULL, bad, stop_sig, out, err);
    if (o && o->stopped_by) *o->stopped_by = stop_sig;
    hy_runtime_destroy(rt);
    hy_checkpoint_unlock(&lock);
    if (log && fclose(log) != 0 && !rc)
        rc = hy_fail(err, HY_ERR_RUNTIME, "--log-json %s: write failed: %s", o->log_json,
                     strerror(errno));
    return rc;
}

int hy_eval(const hy_config *c, const char *shard, int batches, FILE *out, FILE *warn,
            hy_error *err) {
    if (!shard) shard = c->data.val ? c->data.val : c->data.train;
    int rc = hy_pick_backend(c, NULL, err);   /* stdout is one JSON line */
    if (rc) return rc;
    if (batches <= 0) {   /* every whole batch the shard holds, without wrapping */
        rc = hy_shard_batches(c, shard, &batches, err);
        if (rc) return rc;
    }
    hy_runtime *rt = NULL;
    double loss = 0, tokens = 0;
    rc = hy_train_runtime(&rt, c, NULL, warn, err);
    if (!rc) rc = hy_runtime_eval(rt, shard, batches, &loss, &tokens, err);
    hy_runtime_destroy(rt);
    if (!rc) fprintf(out, "{\"loss\": %.7f, \"batches\": %d, \"tokens\": %.0f}\n", loss, batches, tokens);
    return rc;
}
