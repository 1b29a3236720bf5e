/* perm.h — stateless pseudo-random bijections of [0, n).
 *
 * perm_index(key, n, i) is a permutation of [0, n) for every key: each epoch
 * keys its own shuffle, and any rank can find where position i of the epoch
 * lands without building (or agreeing on) a shuffled array. A 4-round Feistel
 * network on the smallest even-bit power of two >= n, with cycle-walking to stay
 * inside [0, n) (fewer than 4 walks on average). */
#ifndef DTRUN_DATA_PERM_H
#define DTRUN_DATA_PERM_H

#include <stdint.h>

/* The image of i (< n) under the permutation of [0, n) selected by key. n > 0. */
uint64_t perm_index(uint64_t key, uint64_t n, uint64_t i);

#endif
