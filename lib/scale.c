/*
 * scale.c — see scale.h.
 */
#include "scale.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

double hy_scale_allreduce_ms(const hy_scale_link *l, int n, double bytes) {
    if (n <= 1) return 0;
    double steps = 2.0 * (n - 1);
    double wire_s = steps / n * bytes * 8.0 / (l->gbps * 1e9);
    return wire_s * 1e3 + steps * l->latency_us * 1e-3;
}

/* The step of n replicas: every rank's sums, one after another from the
 * end of each stage's last backward, then the latest rank's end. */
static double scale_step_ms(const hy_schedule *s, const hy_sim_result *sim,
                            const double *grad_bytes, const hy_scale_link *l, int n, int *last) {
    double step = 0;
    for (int r = 0; r < s->ranks; r++) {
        int count = s->n_actions[r];
        double end = count ? sim->end[r][count - 1] * l->ms_per_unit : 0, free_at = 0;
        hy_schedule_grads_done(s, r, last);
        /* The stages' sums in the order their gradients complete. */
        for (;;) {
            int next = -1;
            for (int k = 0; k < s->stages; k++)
                if (last[k] >= 0 && (next < 0 || last[k] < last[next])) next = k;
            if (next < 0) break;
            double ready = sim->end[r][last[next]] * l->ms_per_unit;
            free_at = fmax(free_at, ready) + hy_scale_allreduce_ms(l, n, grad_bytes[next]);
            last[next] = -1;
        }
        step = fmax(step, fmax(end, free_at));
    }
    return step;
}

int hy_scale_rows(const hy_schedule *s, const hy_sim_result *sim, const double *grad_bytes,
                  const hy_scale_link *l, const int *replicas, int n, hy_scale_row *rows,
                  hy_error *err) {
    if (!(l->gbps > 0) || !isfinite(l->gbps) || !(l->latency_us >= 0) ||
        !isfinite(l->latency_us) || !(l->ms_per_unit > 0) || !isfinite(l->ms_per_unit))
        return hy_fail(err, HY_ERR_INPUT, "scale: the link needs a bandwidth > 0, a latency >= 0 "
                       "and a time unit > 0 (got %g Gb/s, %g us, %g ms)", l->gbps, l->latency_us,
                       l->ms_per_unit);
    int *last = malloc(sizeof(int) * (size_t)s->stages);
    if (!last) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    double one = scale_step_ms(s, sim, grad_bytes, l, 1, last);
    int rc = HY_OK;
    for (int i = 0; i < n && !rc; i++) {
        if (replicas[i] < 1) {
            rc = hy_fail(err, HY_ERR_INPUT, "scale: %d replicas; give at least 1", replicas[i]);
            break;
        }
        hy_scale_row *row = &rows[i];
        row->replicas = replicas[i];
        row->step_ms = scale_step_ms(s, sim, grad_bytes, l, replicas[i], last);
        row->exposed_ms = row->step_ms - one;
        row->tokens_per_s = replicas[i] * l->tokens_per_replica / (row->step_ms * 1e-3);
        row->efficiency = one / row->step_ms;
    }
    free(last);
    return rc;
}

int hy_scale_parse_counts(const char *flag, const char *text, int *replicas, int *n,
                          hy_error *err) {
    *n = 0;
    const char *p = text;
    for (;;) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > 1000000 || (*end && *end != ','))
            return hy_fail(err, HY_ERR_INPUT, "%s '%s': want replica counts like 1,4,16,64 "
                           "(each 1..1000000)", flag, text);
        if (*n == HY_SCALE_MAX_ROWS)
            return hy_fail(err, HY_ERR_INPUT, "%s '%s': at most %d counts", flag, text,
                           HY_SCALE_MAX_ROWS);
        replicas[(*n)++] = (int)v;
        if (!*end) return HY_OK;
        p = end + 1;
    }
}

int hy_scale_write_table(FILE *f, const hy_scale_row *rows, int n) {
    fprintf(f, "%10s %14s %10s %12s %11s\n", "replicas", "tokens/s", "step ms", "exposed ms",
            "efficiency");
    for (int i = 0; i < n; i++)
        fprintf(f, "%10d %14.0f %10.2f %12.2f %11.3f\n", rows[i].replicas, rows[i].tokens_per_s,
                rows[i].step_ms, rows[i].exposed_ms, rows[i].efficiency);
    return ferror(f) ? -1 : 0;
}

char *hy_scale_json(const hy_scale_row *rows, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) {
        json_t *o = json_pack("{s:i, s:f, s:f, s:f, s:f}", "replicas", rows[i].replicas,
                              "tokens_per_s", rows[i].tokens_per_s, "step_ms", rows[i].step_ms,
                              "exposed_ms", rows[i].exposed_ms, "efficiency", rows[i].efficiency);
        if (!o || json_array_append_new(a, o) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return text;
}
