/*
 * rng.h — the project's one deterministic random number generator.
 *
 * Initialization, synthetic data and BERT's masking must give the same
 * numbers on every machine and for every rank layout, so nothing uses
 * rand(): a stream is a splitmix64 state, derived from a seed and a stream
 * id (a tensor's index, a micro-batch's index), so the numbers a tensor
 * gets do not depend on which rank generates them or in what order.
 */
#ifndef HY_RNG_H
#define HY_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t state;
} hy_rng;

/* A stream for (seed, id): independent streams for different ids. */
hy_rng hy_rng_stream(uint64_t seed, uint64_t id);

uint64_t hy_rng_u64(hy_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double hy_rng_uniform(hy_rng *r);
/* Standard normal (Box-Muller; both values of a pair are not cached, so a
 * stream's n-th draw depends only on n). */
double hy_rng_normal(hy_rng *r);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t hy_rng_below(hy_rng *r, uint64_t n);

#endif
