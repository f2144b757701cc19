/*
 * watchdog.c — see watchdog.h.
 */
#include "watchdog.h"

#include <time.h>

double hy_watchdog_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void hy_watchdog_start_at(hy_watchdog *w, double limit_s, double now) {
    w->limit_s = limit_s;
    w->last = now;
    w->waited = 0;
}

void hy_watchdog_start(hy_watchdog *w, double limit_s) {
    hy_watchdog_start_at(w, limit_s, hy_watchdog_now());
}

int hy_watchdog_expired_at(hy_watchdog *w, double now) {
    double gap = now - w->last;
    if (gap > 0 && gap <= HY_WATCHDOG_PAUSE_S) w->waited += gap;
    w->last = now;
    return w->limit_s > 0 && w->waited >= w->limit_s;
}

int hy_watchdog_expired(hy_watchdog *w) {
    return hy_watchdog_expired_at(w, hy_watchdog_now());
}

double hy_watchdog_waited(const hy_watchdog *w) {
    return w->waited;
}

double hy_watchdog_left(const hy_watchdog *w) {
    if (w->limit_s <= 0) return 1e9;
    return w->waited < w->limit_s ? w->limit_s - w->waited : 0;
}
