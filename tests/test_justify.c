/*
 * test_justify.c — lib/justify: double justification of an order.
 *
 *   - Over every schedule kind, P = 2 and 4, several M, uneven stage costs
 *     and transfer times 0, 0.3 and 1, whole and split backward (there an
 *     activation is held to its W): the justified order is valid (every
 *     action once, on its rank, runs without deadlock), never longer than
 *     the order it starts from, and never holds more activations on a
 *     rank than the limit it was given; on some of them it is shorter,
 *     whole and split alike.
 *   - The case it is there for: hanayo W = 2's canonical order at P = 4,
 *     M = 8 with a transfer taking 0.2 of a rank share runs 34.65;
 *     justified within interleaved's memory (19) it comes in below
 *     interleaved v = 4's 32.25.
 *   - Uniform costs and free transfers: the canonical hanayo order is at
 *     its ideal already, and stays there.
 *   - rounds = 0 leaves the lists as they are, whole or split.
 *   - Skipping the stretches of a timeline with no gap that fits, and
 *     those where the rank's memory is full (what makes a pass fast),
 *     changes nothing: over random schedules, costs
 *     (zero costs, large times among them) and limits, the justified
 *     lists equal those of the plain pass that tries every position;
 *     and starting from the caller's simulation (hy_justify_simulated),
 *     in one scratch kept over schedules of every shape, gives the same
 *     lists, with the makespan and peak of what it left.
 */
#include "justify.h"
#include "schedule.h"
#include "sim.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static int peak_of(const hy_sim_result *r) {
    int most = 0;
    for (int k = 0; k < r->ranks; k++)
        if (r->peak_activations[k] > most) most = r->peak_activations[k];
    return most;
}

static void test_valid_never_longer(void) {
    static const struct { hy_sched_kind kind; int wv; } kinds[] = {
        { HY_SCHED_GPIPE, 1 }, { HY_SCHED_1F1B, 1 }, { HY_SCHED_INTERLEAVED, 2 },
        { HY_SCHED_HANAYO, 1 }, { HY_SCHED_HANAYO, 2 },
    };
    static const double comms[] = { 0, 0.3, 1.0 };
    int shorter[2] = { 0, 0 }, cases = 0;
    for (int split = 0; split <= 1; split++)
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int P = 2; P <= 4; P += 2)
            for (int M = P; M <= 3 * P; M += P)
                for (int ci = 0; ci < 3; ci++) {
                    hy_sched_params p = { kinds[k].kind, P, M, kinds[k].wv, kinds[k].wv, split, 0 };
                    hy_schedule s;
                    hy_error err;
                    if (hy_schedule_build(&s, &p, &err)) { CHECKF(0, "%s", err.msg); continue; }
                    double *f = malloc(3 * (size_t)s.stages * sizeof(double)), *b = f + s.stages;
                    double *w = b + s.stages;
                    for (int i = 0; i < s.stages; i++) {
                        f[i] = 0.5 + (double)((i * 7 + M) % 4) * 0.25;
                        b[i] = (split ? 1 : 2) * f[i] + (double)((i + ci) % 3) * 0.25;
                        w[i] = 0.25 + (double)((i * 3 + ci) % 3) * 0.25;
                    }
                    hy_costs c = split ? hy_costs_uniform_split() : hy_costs_uniform();
                    c.fwd_stage = f;
                    c.bwd_stage = b;
                    if (split) c.wgrad_stage = w;
                    c.comm = comms[ci];
                    hy_sim_result before, after;
                    CHECK(hy_simulate(&s, &c, NULL, &before, &err) == HY_OK);
                    int limit = peak_of(&before);
                    int rc = hy_justify_schedule(&s, &c, limit, 4, &err);
                    CHECKF(rc == HY_OK, "%s", err.msg);
                    int valid = hy_schedule_validate(&s, &err) == HY_OK;
                    CHECKF(valid, "%s P=%d M=%d c=%g: %s", hy_sched_name(p.kind), P, M, c.comm, err.msg);
                    if (valid && hy_simulate(&s, &c, NULL, &after, &err) == HY_OK) {
                        CHECKF(after.makespan <= before.makespan + 1e-9, "%s P=%d M=%d c=%g: %g after %g",
                               hy_sched_name(p.kind), P, M, c.comm, after.makespan, before.makespan);
                        CHECKF(peak_of(&after) <= limit, "%s P=%d M=%d c=%g: peak %d above %d",
                               hy_sched_name(p.kind), P, M, c.comm, peak_of(&after), limit);
                        shorter[split] += after.makespan < before.makespan - 1e-9;
                        cases++;
                        hy_sim_result_free(&after);
                    }
                    hy_sim_result_free(&before);
                    free(f);
                    hy_schedule_free(&s);
                }
    CHECK(cases == 2 * 5 * 2 * 3 * 3);
    CHECKF(shorter[0] > 0 && shorter[1] > 0, "justification shortened %d whole and %d split orders",
           shorter[0], shorter[1]);
}

/* hanayo W = 2, P = 4, M = 8, f = 0.25 and b = 0.5 a stage, c = 0.2. */
static void test_wave_beats_interleaved(void) {
    hy_sched_params ph = { HY_SCHED_HANAYO, 4, 8, 2, 2, 0, 0 }, pi = { HY_SCHED_INTERLEAVED, 4, 8, 4, 4, 0, 0 };
    hy_costs c = hy_costs_uniform();
    c.fwd = 0.25;
    c.bwd = 0.5;
    c.comm = 0.2;
    hy_schedule h, in;
    hy_error err;
    hy_sim_result r;
    if (hy_schedule_build(&h, &ph, &err) || hy_schedule_build(&in, &pi, &err)) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    CHECK(hy_simulate(&in, &c, NULL, &r, &err) == HY_OK);
    double inter = r.makespan;
    hy_sim_result_free(&r);
    CHECK_NEAR(inter, 32.25, 1e-9);
    CHECK(hy_simulate(&h, &c, NULL, &r, &err) == HY_OK);
    CHECK_NEAR(r.makespan, 34.65, 1e-9);
    hy_sim_result_free(&r);
    CHECK(hy_justify_schedule(&h, &c, 19, 4, &err) == HY_OK);
    CHECK(hy_schedule_validate(&h, &err) == HY_OK);
    CHECK(hy_simulate(&h, &c, NULL, &r, &err) == HY_OK);
    CHECKF(r.makespan < inter - 1e-9 && peak_of(&r) <= 19, "justified %g at %d, interleaved %g",
           r.makespan, peak_of(&r), inter);
    hy_sim_result_free(&r);
    hy_schedule_free(&h);
    hy_schedule_free(&in);
}

static void test_left_alone(void) {
    hy_error err;
    hy_sim_result r;
    /* At its ideal under uniform costs: nothing to gain. */
    hy_sched_params p = { HY_SCHED_HANAYO, 4, 16, 2, 2, 0, 0 };
    hy_schedule s, t;
    hy_costs u = hy_costs_uniform();
    if (hy_schedule_build(&s, &p, &err) == HY_OK) {
        CHECK(hy_justify_schedule(&s, &u, 19, 4, &err) == HY_OK);
        CHECK(hy_simulate(&s, &u, NULL, &r, &err) == HY_OK);
        CHECK_NEAR(r.makespan, 3.0 * (2 * 2 * 16 + 4 - 1), 1e-9);   /* (f+b)(2WM + P - 1) */
        hy_sim_result_free(&r);
        hy_schedule_free(&s);
    } else {
        CHECKF(0, "%s", err.msg);
    }
    /* No rounds: the lists as they were. */
    hy_costs c = hy_costs_uniform_split();
    c.comm = 0.5;
    for (int split = 0; split <= 1; split++) {
        hy_sched_params q = { HY_SCHED_HANAYO, 4, 8, 2, 2, split, 0 };
        if (hy_schedule_build(&s, &q, &err) || hy_schedule_build(&t, &q, &err)) {
            CHECKF(0, "%s", err.msg);
            continue;
        }
        CHECK(hy_justify_schedule(&s, split ? &c : &u, 2 * 19, 0, &err) == HY_OK);
        CHECK(hy_schedule_equal(&s, &t));
        hy_schedule_free(&s);
        hy_schedule_free(&t);
    }
}

/* A small deterministic generator for the random cases. */
static unsigned next_rand(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8;
}

static void test_skip_changes_nothing(void) {
    static const hy_sched_kind kinds[] = { HY_SCHED_GPIPE, HY_SCHED_1F1B, HY_SCHED_INTERLEAVED,
                                           HY_SCHED_HANAYO };
    static const double comms[] = { 0, 0.05, 0.2, 0.5, 1.3 };
    unsigned seed = 12345;
    int cases = 0, changed = 0;
    hy_justify_scratch scratch = { 0 };
    for (int round = 0; round < 400; round++) {
        int P = 2 + (int)(next_rand(&seed) % 7), wv = 1 + (int)(next_rand(&seed) % 3);
        int M = P * (1 + (int)(next_rand(&seed) % 4)) + (int)(next_rand(&seed) % 2);
        hy_sched_params p = { kinds[next_rand(&seed) % 4], P, M, wv, wv,
                              (int)(next_rand(&seed) % 2), 0 };
        hy_schedule a, b;
        hy_error err;
        if (hy_schedule_build(&a, &p, &err)) continue;   /* interleaved: M not a multiple of P */
        if (hy_schedule_build(&b, &p, &err)) {
            hy_schedule_free(&a);
            CHECKF(0, "%s", err.msg);
            continue;
        }
        /* Stage costs in quarters, a few of them zero; now and then
         * times in the thousands, where rounding reaches further. */
        double scale = next_rand(&seed) % 4 == 0 ? 1000 : 1;
        double *f = malloc(3 * (size_t)a.stages * sizeof(double)), *bw = f + a.stages;
        double *w = bw + a.stages;
        for (int i = 0; i < a.stages; i++) {
            f[i] = scale * 0.25 * (double)(next_rand(&seed) % 6);
            bw[i] = scale * 0.25 * (double)(next_rand(&seed) % 9);
            w[i] = scale * 0.25 * (double)(next_rand(&seed) % 5);
        }
        hy_costs c = p.split_backward ? hy_costs_uniform_split() : hy_costs_uniform();
        c.fwd_stage = f;
        c.bwd_stage = bw;
        if (p.split_backward) c.wgrad_stage = w;
        c.comm = scale * comms[next_rand(&seed) % 5];
        hy_sim_result r;
        if (hy_simulate(&a, &c, NULL, &r, &err) == HY_OK) {
            int least = hy_sched_min_activations(&p), peak = peak_of(&r);
            int limit = peak + (int)(next_rand(&seed) % 3) - 1;
            if (limit < least) limit = least;
            hy_schedule d;
            CHECK(hy_schedule_copy(&d, &a, &err) == HY_OK);
            int ra = hy_justify_schedule(&a, &c, limit, 4, &err);
            int rb = hy_justify_schedule_plain(&b, &c, limit, 4, &err);
            CHECKF(ra == rb && hy_schedule_equal(&a, &b), "%s P=%d W|v=%d M=%d split=%d c=%g limit %d: "
                   "the skipping pass differs from the plain one", hy_sched_name(p.kind), P, wv,
                   M, p.split_backward, c.comm, limit);
            /* From the caller's simulation, in a scratch kept from
             * case to case (resized when the shape changes): the same
             * lists, and the makespan and peak of what it left. */
            double made;
            int made_peak;
            hy_sim_result rd;
            int rd_ok = hy_simulate_reuse(&d, &c, NULL, &scratch.sim, &err) == HY_OK &&
                        hy_justify_simulated(&d, &c, limit, 4, &scratch, &made, &made_peak,
                                             &err) == ra &&
                        hy_simulate(&d, &c, NULL, &rd, &err) == HY_OK;
            CHECKF(rd_ok && hy_schedule_equal(&a, &d) && made == rd.makespan &&
                   made_peak == peak_of(&rd), "%s P=%d M=%d: justified from the caller's "
                   "simulation differs", hy_sched_name(p.kind), P, M);
            if (rd_ok) hy_sim_result_free(&rd);
            hy_schedule_free(&d);
            hy_schedule u;
            if (hy_schedule_build(&u, &p, &err) == HY_OK) {
                changed += !hy_schedule_equal(&a, &u);
                hy_schedule_free(&u);
            }
            cases++;
            hy_sim_result_free(&r);
        } else {
            CHECKF(0, "%s", err.msg);
        }
        free(f);
        hy_schedule_free(&a);
        hy_schedule_free(&b);
    }
    hy_justify_scratch_free(&scratch);
    /* Enough cases, and enough of them moved by the justification, for
     * the comparison to say something. */
    CHECKF(cases >= 300 && changed >= 50, "%d cases, %d changed", cases, changed);
}

int main(void) {
    test_valid_never_longer();
    test_skip_changes_nothing();
    test_wave_beats_interleaved();
    test_left_alone();
    return TEST_END("justify");
}
