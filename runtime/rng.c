/* rng.c — see rng.h. Philox4x32-10 comes from Debian's librandom123-dev
 * (header-only), the name hash from libxxhash. */
#include "runtime/rng.h"

#include <math.h>
#include <string.h>
#include <Random123/philox.h>
#include <xxhash.h>

uint64_t rng_key(uint64_t seed, const char *name)
{
    return XXH64(name, strlen(name), seed);
}

uint64_t rng_key3(uint64_t seed, const char *name, uint64_t a, uint64_t b)
{
    uint64_t k = rng_key(seed, name);
    uint64_t buf[3] = {k, a, b};
    return XXH64(buf, sizeof buf, seed);
}

void rng_u32x4(uint64_t key, uint64_t index, uint32_t out[4])
{
    philox4x32_ctr_t c = {{(uint32_t)index, (uint32_t)(index >> 32), 0, 0}};
    philox4x32_key_t k = {{(uint32_t)key, (uint32_t)(key >> 32)}};
    philox4x32_ctr_t r = philox4x32(c, k);
    memcpy(out, r.v, sizeof r.v);
}

/* 24 random bits -> [0, 1): exact in float. */
static float u01(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

float rng_uniform(uint64_t key, uint64_t index)
{
    uint32_t w[4];
    rng_u32x4(key, index, w);
    return u01(w[0]);
}

float rng_normal(uint64_t key, uint64_t index)
{
    uint32_t w[4];
    rng_u32x4(key, index, w);
    /* u1 in (0, 1] so the log is finite */
    double u1 = ((double)(w[0] >> 8) + 1.0) / 16777216.0;
    double u2 = (double)(w[1] >> 8) / 16777216.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint64_t rng_below(uint64_t key, uint64_t index, uint64_t n)
{
    uint32_t w[4];
    rng_u32x4(key, index, w);
    uint64_t x = ((uint64_t)w[0] << 32) | w[1];
    return (uint64_t)(((unsigned __int128)x * n) >> 64);
}
