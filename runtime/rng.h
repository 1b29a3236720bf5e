/* rng.h — counter-based random numbers (Philox4x32-10 from Random123).
 *
 * A draw is a pure function of (key, index): no state, so any shard, rank or
 * backend draws exactly its slice of a tensor or a batch, and every layout sees
 * the same numbers. Keys come from a seed and a name (a parameter's name, "data",
 * ...), hashed with XXH64. */
#ifndef DTRUN_RNG_H
#define DTRUN_RNG_H

#include <stdint.h>

/* Key for (seed, name). */
uint64_t rng_key(uint64_t seed, const char *name);
/* Key for (seed, name, a, b): e.g. ("batch", step, split). */
uint64_t rng_key3(uint64_t seed, const char *name, uint64_t a, uint64_t b);
/* Four independent 32-bit words for counter `index`. */
void rng_u32x4(uint64_t key, uint64_t index, uint32_t out[4]);
/* Uniform in [0, 1). */
float rng_uniform(uint64_t key, uint64_t index);
/* Standard normal (Box-Muller on the first two words). */
float rng_normal(uint64_t key, uint64_t index);
/* Uniform integer in [0, n), n > 0 (64-bit multiply-shift, negligible bias). */
uint64_t rng_below(uint64_t key, uint64_t index, uint64_t n);

#endif
