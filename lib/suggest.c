/*
 * suggest.c — see suggest.h.
 */
#include "suggest.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

int hy_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 127 || lb > 127) return INT_MAX;
    int row[128];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

int hy_is_typo(const char *typed, int dist) {
    int len = (int)strlen(typed);
    int limit = len / 3 > 2 ? len / 3 : 2;
    return dist <= limit;
}

const char *hy_closest(const char *typed, const char *const *names) {
    const char *best = NULL;
    int best_d = INT_MAX;
    for (int i = 0; names[i]; i++) {
        int d = hy_edit_distance(typed, names[i]);
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    return best && hy_is_typo(typed, best_d) ? best : NULL;
}

/* Appends a formatted option to buf, keeping it NUL-terminated. */
#define APPEND(...) do { \
    size_t used_ = strlen(buf); \
    if (used_ < n) snprintf(buf + used_, n - used_, __VA_ARGS__); \
} while (0)

void hy_suggest_stages(const hy_sched_params *p, int layers, char *buf, size_t n) {
    assert(n > 0 && layers >= 1 && hy_sched_stages(p) > layers);
    buf[0] = '\0';
    const char *name = hy_sched_name(p->kind);
    int per_rank = hy_sched_chunks(p);
    /* The same ranks with fewer stages each. */
    if (p->kind == HY_SCHED_HANAYO && layers / (2 * p->ranks) >= 1) {
        int w = layers / (2 * p->ranks);
        APPEND("schedule.waves=%d (%d stages), ", w, 2 * w * p->ranks);
    } else if (p->kind == HY_SCHED_INTERLEAVED && layers / p->ranks >= 2) {
        int v = layers / p->ranks;
        APPEND("schedule.chunks=%d (%d stages), ", v, v * p->ranks);
    }
    /* Fewer ranks with the same stages each; interleaved also needs the
     * micro-batches to divide among them. */
    int most = layers / per_rank;
    if (p->kind == HY_SCHED_INTERLEAVED)
        while (most > 1 && p->micro_batches % most != 0) most--;
    if (most >= 1) {
        if (p->kind == HY_SCHED_HANAYO)
            APPEND("schedule.ranks=%d or fewer (%s, %d wave%s), ", most, name, p->waves,
                   p->waves == 1 ? "" : "s");
        else if (p->kind == HY_SCHED_INTERLEAVED)
            APPEND("schedule.ranks=%d (%s, %d chunks; a divisor of micro_batches %d), ", most,
                   name, p->chunks, p->micro_batches);
        else
            APPEND("schedule.ranks=%d or fewer (%s), ", most, name);
    }
    /* The same ranks, one stage each. */
    if (per_rank > 1 && p->ranks <= layers)
        APPEND("schedule.kind=1f1b (%d stages, one per rank), ", p->ranks);
    APPEND("model.layers=%d or more, or schedule.split with %d entries (0-layer stages "
           "allowed)", hy_sched_stages(p), hy_sched_stages(p));
}
