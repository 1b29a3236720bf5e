/* rope_table.h — the RoPE table every backend reads (ops.h rope_table),
 * computed on the host by one function so that the CPU and CUDA backends
 * hold the same bits (private to kernels/). */
#ifndef DTRUN_KERNELS_ROPE_TABLE_H
#define DTRUN_KERNELS_ROPE_TABLE_H

#ifdef __cplusplus
extern "C" {
#endif

/* cs[max_pos, hs] in host memory (overwrites): row p = cos(p f_i) for i <
 * hs/2, then sin(p f_i), f_i = theta^(-2i/hs), each computed in double and
 * rounded to fp32 once. */
void dt_rope_table_host(float *cs, int max_pos, int hs, float theta);

#ifdef __cplusplus
}
#endif

#endif
