/*
 * suggest.h — "did you mean ...?" for misspelt keys, values, flags and
 * commands.
 *
 * One edit distance and one notion of "close enough to be a typo" serve the
 * config loader and the CLI, so a user gets the same kind of hint wherever
 * they mistype.
 */
#ifndef HY_SUGGEST_H
#define HY_SUGGEST_H

/* Levenshtein distance; strings over 127 bytes are never close (INT_MAX). */
int hy_edit_distance(const char *a, const char *b);

/* Whether a word at edit distance `dist` from what was typed is likely
 * what was meant: up to a third of the typed length, and at least 2. */
int hy_is_typo(const char *typed, int dist);

/* The name in the NULL-terminated list `names` closest to `typed`, or NULL
 * when none is close enough (hy_is_typo). Ties keep the earlier name. */
const char *hy_closest(const char *typed, const char *const *names);

#endif
