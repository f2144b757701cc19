/*
 * rng.c — see rng.h. splitmix64 (Steele, Lea, Flood 2014) passes BigCrush
 * and needs one 64-bit word of state, which makes deriving a stream from
 * (seed, id) a matter of mixing the two.
 */
#include "rng.h"

#include <math.h>

static uint64_t hy_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

hy_rng hy_rng_stream(uint64_t seed, uint64_t id) {
    hy_rng r = { hy_mix64(seed ^ hy_mix64(id + 0x9E3779B97F4A7C15ULL)) };
    return r;
}

uint64_t hy_rng_u64(hy_rng *r) {
    r->state += 0x9E3779B97F4A7C15ULL;
    return hy_mix64(r->state);
}

double hy_rng_uniform(hy_rng *r) {
    return (double)(hy_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

double hy_rng_normal(hy_rng *r) {
    double u1 = hy_rng_uniform(r), u2 = hy_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;   /* log(0) */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t hy_rng_below(hy_rng *r, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
        uint64_t x = hy_rng_u64(r);
        if (x < limit) return x % n;
    }
}
