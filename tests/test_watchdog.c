/*
 * test_watchdog.c — lib/watchdog.h: a wait counts the time its waiter
 * ran, not the time the process was stopped.
 *
 * Driven with made-up clock readings (hy_watchdog_*_at), so nothing here
 * depends on the machine's speed: a waiter that looks every 20 ms fails
 * at the limit; one whose looks jump over a pause (SIGSTOP ... SIGCONT)
 * does not count the pause, and still fails once the time it ran reaches
 * the limit; no limit never fails. The real pause is tests/test_signals.sh's
 * (a run stopped longer than watchdog_s finishes).
 */
#include "test.h"
#include "watchdog.h"

/* Looks every `step` seconds from `from` until `to` (inclusive of the
 * last look at or before it); returns the clock of the first look that
 * found the wait expired, or -1. */
static double look_until(hy_watchdog *w, double from, double to, double step) {
    for (int i = 1; from + i * step <= to + 1e-9; i++)
        if (hy_watchdog_expired_at(w, from + i * step)) return from + i * step;
    return -1;
}

int main(void) {
    hy_watchdog w;

    /* Steady looks: fails once 2 s have passed, not before. */
    hy_watchdog_start_at(&w, 2.0, 100.0);
    CHECK(look_until(&w, 100.0, 101.98, 0.02) < 0);
    CHECK_NEAR(hy_watchdog_waited(&w), 1.98, 1e-6);
    CHECK_NEAR(hy_watchdog_left(&w), 0.02, 1e-6);
    CHECK(hy_watchdog_expired_at(&w, 102.0));
    CHECK_NEAR(hy_watchdog_left(&w), 0, 1e-12);

    /* 1.5 s of waiting, then the process is stopped for 5 s: the look
     * after it does not fail, and the wait goes on from 1.5 s. */
    hy_watchdog_start_at(&w, 2.0, 0.0);
    CHECK(look_until(&w, 0.0, 1.5, 0.02) < 0);
    CHECK(!hy_watchdog_expired_at(&w, 6.5));
    CHECK_NEAR(hy_watchdog_waited(&w), 1.5, 1e-6);
    double fired = look_until(&w, 6.5, 10.0, 0.02);
    CHECKF(fired > 6.99 && fired < 7.03, "fired at %g, want 7.0 (0.5 s after the pause)", fired);

    /* A pause twice in a row, longer than the limit each: never fails
     * while the waiter ran only a little in between. */
    hy_watchdog_start_at(&w, 1.0, 0.0);
    CHECK(!hy_watchdog_expired_at(&w, 0.5));
    CHECK(!hy_watchdog_expired_at(&w, 60.0));
    CHECK(!hy_watchdog_expired_at(&w, 60.3));
    CHECK(!hy_watchdog_expired_at(&w, 3600.0));
    CHECK_NEAR(hy_watchdog_waited(&w), 0.8, 1e-6);

    /* A gap of at most HY_WATCHDOG_PAUSE_S is waiting: a waiter that was
     * slow to look still fails. */
    hy_watchdog_start_at(&w, 0.5, 0.0);
    CHECK(hy_watchdog_expired_at(&w, HY_WATCHDOG_PAUSE_S));

    /* A clock read that goes backwards (it does not, on CLOCK_MONOTONIC)
     * counts nothing. */
    hy_watchdog_start_at(&w, 1.0, 10.0);
    CHECK(!hy_watchdog_expired_at(&w, 9.0));
    CHECK_NEAR(hy_watchdog_waited(&w), 0, 1e-12);

    /* No limit (dp.h: watchdog_s <= 0): never fails. */
    hy_watchdog_start_at(&w, 0, 0.0);
    CHECK(look_until(&w, 0.0, 100.0, 0.5) < 0);
    CHECK(hy_watchdog_left(&w) > 1e6);

    /* The real clock: starts at zero and moves forward. */
    hy_watchdog_start(&w, 1000.0);
    CHECK(!hy_watchdog_expired(&w));
    CHECK(hy_watchdog_waited(&w) >= 0 && hy_watchdog_waited(&w) < 1000.0);
    CHECK(hy_watchdog_now() > 0);

    return TEST_END("watchdog");
}
