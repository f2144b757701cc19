/*
 * suggest.c — see suggest.h.
 */
#include "suggest.h"

#include <limits.h>
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
