/*
 * suggest.h — "did you mean ...?" for misspelt keys, values, flags and
 * commands, and the settings that fit when a schedule has more stages than
 * the model has layers.
 *
 * One edit distance and one notion of "close enough to be a typo" serve the
 * config loader and the CLI, so a user gets the same kind of hint wherever
 * they mistype.
 */
#ifndef HY_SUGGEST_H
#define HY_SUGGEST_H

#include <stddef.h>

#include "schedule.h"

/* Levenshtein distance; strings over 127 bytes are never close (INT_MAX). */
int hy_edit_distance(const char *a, const char *b);

/* Whether a word at edit distance `dist` from what was typed is likely
 * what was meant: up to a third of the typed length, and at least 2. */
int hy_is_typo(const char *typed, int dist);

/* The name in the NULL-terminated list `names` closest to `typed`, or NULL
 * when none is close enough (hy_is_typo). Ties keep the earlier name. */
const char *hy_closest(const char *typed, const char *const *names);

/* Schedule settings that fit `layers` layers when p has more stages than
 * that (hy_sched_stages(p) > layers), computed from p: fewer waves or
 * chunks on the same ranks, fewer ranks (for interleaved, a divisor of
 * p->micro_batches), a one-stage-per-rank kind, more layers, a
 * schedule.split. Writes "schedule.ranks=6 or fewer (hanayo, 1 wave), ..."
 * to buf (truncated to n). */
void hy_suggest_stages(const hy_sched_params *p, int layers, char *buf, size_t n);

#endif
