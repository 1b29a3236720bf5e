/* comm_data.h — the collectives' test data, shared by test/unit/test_comm.c and
 * test/helpers/comm_check.c (the network-namespace test): inputs whose reduction
 * over ranks has an exact closed form, and the test's own bf16 conversions,
 * independent of the library's. Header-only: each test is one translation unit. */
#ifndef DTRUN_TEST_COMM_DATA_H
#define DTRUN_TEST_COMM_DATA_H

#include <stdint.h>
#include <string.h>

#include "runtime/comm/comm.h"

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* The test's own bf16 conversions, independent of the library's. */
static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Element i of a rank's input in a world of p is a(i) + c(i) * ((rank + o(i)) mod p),
 * with a, c, o drawn from a hash of (i, salt). The ranks' terms are a rotation
 * of 0..p-1, so every rank holds a different value, the rank holding the
 * maximum moves with i, and the reduction over ranks has a closed form: the
 * reference costs O(1) per element whatever p (1Mi+3 elements on 8 ranks, each
 * checking everything, stays cheap on 2 cores). Every value and every partial
 * sum is exact in fp32 (f32: multiples of 1/64 below 2^8; bf16: integers of
 * magnitude <= 121, exact in bf16 too), so the order of summation cannot matter
 * and bf16's one final rounding is the only rounding. */
typedef struct {
    float a, c;
    uint32_t o;   /* in [0, p) */
} elem_terms;

/* Inline, with the salt's hash computed in the caller's loop once: the 1Mi+3
 * sweeps evaluate this ~10^8 times. */
static inline uint32_t salt_seed(comm_dtype dt, int salt)
{
    return mix((uint32_t)salt * 0x9e3779b9U + (uint32_t)dt);
}

static inline elem_terms terms(comm_dtype dt, int p, size_t i, uint32_t seed)
{
    uint32_t h = mix((uint32_t)i * 2654435761U ^ seed);
    uint32_t g = h * 0x9e3779b1U;   /* more bits for c and o: enough for a test */
    elem_terms t;
    if (dt == COMM_F32) {
        t.a = (float)((int)(h % 2001u) - 1000) / 64.0f;
        t.c = (float)((int)((g >> 27) % 17u) - 8) / 64.0f;
    } else {
        t.a = (float)((int)(h % 201u) - 100);
        t.c = (float)((int)((g >> 27) % 7u) - 3);
    }
    t.o = (uint32_t)(((uint64_t)(g & 0xffffffu) * (uint32_t)p) >> 24);
    return t;
}

/* rank in [0, p) */
static inline float value_of(elem_terms t, int p, int rank)
{
    uint32_t k = (uint32_t)rank + t.o;
    return t.a + t.c * (float)(k >= (uint32_t)p ? k - (uint32_t)p : k);
}

static inline float value_at(comm_dtype dt, int p, int rank, size_t i, uint32_t seed)
{
    return value_of(terms(dt, p, i, seed), p, rank);
}

/* Elements [off, off + n) of rank's input, as dt. */
static void fill_seeded(comm_dtype dt, void *buf, int p, int rank, size_t off, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        float v = value_of(terms(dt, p, off + i, seed), p, rank);
        if (dt == COMM_F32)
            ((float *)buf)[i] = v;
        else
            ((uint16_t *)buf)[i] = to_bf16(v);
    }
}

static float get(comm_dtype dt, const void *buf, size_t i)
{
    return dt == COMM_F32 ? ((const float *)buf)[i] : from_bf16(((const uint16_t *)buf)[i]);
}

/* The reduction of element i over ranks 0..p-1, rounded like the dtype:
 * sum = p a + c (0 + 1 + ... + p-1); max = a + c (p-1) when c > 0, else a
 * (the rank whose term is 0). */
static float reference(comm_dtype dt, comm_op op, int p, size_t i, uint32_t seed)
{
    elem_terms t = terms(dt, p, i, seed);
    float acc;
    if (op == COMM_MAX) {
        acc = t.a + (t.c > 0 ? t.c * (float)(p - 1) : 0.0f);
    } else {
        acc = (float)p * t.a + t.c * (float)(p * (p - 1) / 2);
        if (op == COMM_AVG)
            acc /= (float)p;
    }
    return dt == COMM_F32 ? acc : from_bf16(to_bf16(acc));
}

#endif
