/*
 * watchdog.h — how long a wait has lasted, counting only time the process
 * ran.
 *
 * Every watchdog of hanayo measures its wait with this one clock: a rank
 * waiting at a flag on the CPU backend (kernels/cpu/backend.c), the CUDA
 * backend's host waits and its monitor of running graphs
 * (graphs/signal.cu), and a replica waiting for the others (lib/dp.c).
 * A wait fails when it has lasted longer than watchdog_s.
 *
 * A process that was stopped (SIGSTOP, Ctrl-Z, then SIGCONT, `fg`) or
 * whose machine was paused did not run while it was stopped: its ranks
 * made no progress because none of its threads ran, not because one
 * stalled. So that time must not count. The waiter looks at the clock
 * often (every few milliseconds: each watchdog naps between looks far
 * less than HY_WATCHDOG_PAUSE_S); a gap between two of its own looks
 * longer than HY_WATCHDOG_PAUSE_S means it did not run in between, and
 * the gap is left out. A rank that really stalls leaves its waiter
 * looking at a steady pace, so the wait still fails after watchdog_s.
 * The cost of a gap left out by mistake (a waiter the machine starved of
 * CPU for more than HY_WATCHDOG_PAUSE_S) is a watchdog that fires later,
 * never one that fires early.
 *
 * No thread, no signal handler, no global state: each waiter keeps its
 * own hy_watchdog, in its own thread (or under the lock of what it
 * watches).
 */
#ifndef HY_WATCHDOG_H
#define HY_WATCHDOG_H

#ifdef __cplusplus
extern "C" {   /* graphs/signal.cu is compiled as C++ by nvcc */
#endif

/* A gap between two looks longer than this (seconds) was a pause of the
 * process, not waiting. */
#define HY_WATCHDOG_PAUSE_S 1.0

typedef struct {
    double limit_s;   /* the wait fails once it has lasted this long; <= 0: never */
    double last;      /* the clock at the previous look */
    double waited;    /* seconds counted so far */
} hy_watchdog;

/* CLOCK_MONOTONIC in seconds. */
double hy_watchdog_now(void);

/* Starts a wait now, of at most limit_s seconds. */
void hy_watchdog_start(hy_watchdog *w, double limit_s);

/* One look, now: counts the time since the previous look (unless it was
 * a pause) and returns 1 when the wait has lasted limit_s or more. */
int hy_watchdog_expired(hy_watchdog *w);

/* The same two with the clock given (seconds on any steady scale): the
 * tests drive them with made-up times. */
void hy_watchdog_start_at(hy_watchdog *w, double limit_s, double now);
int hy_watchdog_expired_at(hy_watchdog *w, double now);

/* Seconds counted so far (for the report), and left before the limit
 * (0 when past it; a large number when there is none). */
double hy_watchdog_waited(const hy_watchdog *w);
double hy_watchdog_left(const hy_watchdog *w);

#ifdef __cplusplus
}
#endif

#endif
