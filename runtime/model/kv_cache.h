/* kv_cache.h — the KV cache object, shared by kv_cache.c and decode.c.
 * Private to runtime/model. */
#ifndef DTRUN_KV_CACHE_H
#define DTRUN_KV_CACHE_H

#include "runtime/model/model_internal.h"

struct model_kv {
    model *m;
    int cap, len;       /* positions: capacity (GPT: <= seq_len, wpe's rows; Llama: <= max_positions)
                           and cached */
    int n_blocks;
    void *mem;          /* one ops->alloc holding all below (device memory) */
    size_t bytes;
    float **cache;      /* [n_blocks]: [cap, K2] k, v rows of block b (ops.h attention_decode; K2 =
                           dt_kv_cols: 2 C_l, or the kv heads' 2 NKV_l hs under GQA) */
    float *rope_cs;     /* Llama: [cap, hs] RoPE's table of the positions */
    /* one position's rows */
    float *qkv;         /* [W_l] its q, k, v */
    float *x, *y, *ln, *r2, *lnf, *spare; /* [C] */
    float *atty;        /* [C_l] */
    float *fch;         /* [H_l] fc's output (a Llama's gate|up) */
    float *fchg;        /* [F_l] its activation */
    float *mean, *rstd; /* [1] */
    float *scratch;     /* [NH_l * cap] attention scores */
    int *tok;           /* [1] the token fed */
    int *pos;           /* [1] its position (a Llama's RoPE) */
    model_lora lora;    /* train.lora: the adapters' scratch for one row (lora.h; no dropout) */
    /* MoE blocks (model.moe): one row's router, route and experts (device, in
     * their own allocation), its counts on the host */
    moe_bufs moe;
    void *moe_mem;
    int *moe_host;
};

#endif
