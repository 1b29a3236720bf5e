/* kv_cache.h — the KV cache object, shared by kv_cache.c and decode.c.
 * Private to runtime/model. */
#ifndef DTRUN_KV_CACHE_H
#define DTRUN_KV_CACHE_H

#include "runtime/model/model_internal.h"

struct model_kv {
    model *m;
    int cap, len;       /* positions: capacity (<= seq_len, wpe's rows) and cached */
    int n_blocks;
    void *mem;          /* one ops->alloc holding all below (device memory) */
    size_t bytes;
    float **cache;      /* [n_blocks]: [cap, 2 * C_l] k, v rows of block b (ops.h attention_decode) */
    /* one position's rows */
    float *qkv;         /* [3 * C_l] its q, k, v */
    float *x, *y, *ln, *r2, *lnf, *spare; /* [C] */
    float *atty;        /* [C_l] */
    float *fch, *fchg;  /* [F_l] */
    float *mean, *rstd; /* [1] */
    float *scratch;     /* [NH_l * cap] attention scores */
    int *tok;           /* [1] the token fed */
};

#endif
