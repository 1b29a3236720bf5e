/* perm.c — see perm.h. */
#include "runtime/data/perm.h"

#include "runtime/rng.h"

enum { PERM_ROUNDS = 4 };

/* Round function: Philox of (round, half-block), so every round is keyed. */
static uint64_t feistel_round(uint64_t key, unsigned round, uint64_t half)
{
    uint32_t w[4];
    rng_u32x4(key, ((uint64_t)round << 32) | half, w);
    return ((uint64_t)w[1] << 32) | w[0];
}

uint64_t perm_index(uint64_t key, uint64_t n, uint64_t i)
{
    if (n <= 1)
        return 0;
    /* bits to write n - 1; both halves get ceil(bits / 2) so the Feistel is
     * balanced, and the domain 2^(2 * half) stays below 4n. */
    int bits = 64 - __builtin_clzll(n - 1);
    int half = (bits + 1) / 2;
    uint64_t mask = (1ull << half) - 1; /* half <= 32 */
    uint64_t x = i;
    do { /* cycle-walk: the orbit of i returns into [0, n) */
        uint64_t l = x >> half, r = x & mask;
        for (unsigned round = 0; round < PERM_ROUNDS; round++) {
            uint64_t t = l ^ (feistel_round(key, round, r) & mask);
            l = r;
            r = t;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}
