/* calibrate.h — `dtrun --calibrate FILE`: measure this host's CPU backend and
 * write a cpu hardware profile (hardware.h) from what it measured, so the
 * dry-run's CPU step times are this machine's and not a guess.
 *
 * What is measured, with every core busy at once (one thread per core, each
 * single-threaded, as one worker per core runs; a worker with several threads
 * splits each GEMM the same way, kernels/cpu/gemm.c):
 *   peak_fp32_tflops, gemm_efficiency
 *       a linear layer's three products through the ops table (matmul_forward,
 *       matmul_backward: the output, the input gradient, the weight gradient)
 *       of [rows, d] x [d, 2d], for d = 16 .. 1024: the best rate is the peak,
 *       each d's rate over it the table's fraction at that smallest dimension;
 *   memory_bandwidth_gbs (memory_efficiency 1)
 *       the memory-bound ops of a GPT block (d 256, 2048 tokens: a small
 *       model's on a CPU), forward and backward: two layernorms, two residual
 *       adds, the heads' copies, GELU on the MLP's width, over the bytes the
 *       step-time model counts for them (sizes.c), so that rate is what the
 *       model divides those bytes by. On a CPU these ops are not all bound by
 *       DRAM (GELU's tanh, the norms' reductions): the rate says what they
 *       reach, which is what a step pays. The AdamW step is priced at the same
 *       rate.
 *   attention_efficiency
 *       the fused causal attention core (attention_block_forward and
 *       _backward, as local_layers.c runs them; heads of 64) at 64 .. 1024
 *       keys per call, over the FLOPs step_time.c charges it, as a fraction
 *       of the peak (without it the core is priced as a GEMM of the head
 *       size, which the blockwise kernel does not reach);
 * Each figure is the median of five trials (each thread cycling through
 * copies of its buffers that overflow the caches, as a step meets its
 * operands), each thread's rate over the CPU
 * time it got (another process taking a share of the cores lengthens the
 * wall time, not that; what it takes of the caches and memory bandwidth still
 * lowers a trial, never raises it). The links, latencies and overheads come
 * from the shipped cpu profile (hw_load("cpu")) when it is found. The file
 * says when and where it was measured (`calibrated:`) and the load average
 * then. */
#ifndef DTRUN_PLAN_CALIBRATE_H
#define DTRUN_PLAN_CALIBRATE_H

#include <stddef.h>
#include <stdio.h>

/* Measures and writes the profile to path ("-": stdout), atomically (a
 * temporary beside it, renamed); progress lines go to log. The profile's name
 * is the file's name without .yaml ("cpu-calibrated" on stdout). Returns 0,
 * DT_EXIT_USAGE (2) for a bad path, 1 when the file cannot be written or the
 * measurement failed (one line in err). */
int plan_calibrate(const char *path, FILE *log, char *err, size_t errlen);

#endif
