/* optim.h — AdamW over a model's units, fp32 state.
 *
 * State lives per unit as flat buffers matching the unit's parameter buffer, so a
 * sharded strategy (ZeRO, FSDP) can keep state for a slice [lo, hi) of a unit
 * only: optim_step applies AdamW to that slice, with weight decay on the
 * elements of 2-D weights only (param_spec.decay).
 *
 * Mixed precision (model_precision.bf16): the optimizer also holds the fp32
 * master weights of its slices, drawn at creation from (seed, name, global
 * index) exactly as the fp32 model draws them (the model's bf16 parameters are
 * their rounding). A step is one ops->adamw_mixed_multi over every tensor of
 * the slices: each gradient element (bf16 or fp32, the model's gradient type)
 * widened and scaled in a register, AdamW on the master, and the parameter
 * written as the master rounded to bf16 — one pass, one launch on cuda, the
 * same bits as those four steps one op at a time. So 2 (bf16 param) + grad
 * (2 or 4) + 4 (master) + 8 (m, v) bytes per parameter. */
/* Offload (train.offload: optimizer, ZeRO-Offload): m, v and an fp32 master
 * (in fp32 training too: the host's copy of the parameters) live in host
 * memory and the host computes the step: each chunk of gradients is copied
 * to the host, widened and scaled there, AdamW updates the master, and the
 * parameters (rounded to bf16 when they are) are copied back. The same
 * arithmetic in the same order as on the device, so the same bits. */
#ifndef DTRUN_OPTIM_H
#define DTRUN_OPTIM_H

#include <stddef.h>
#include "lib/job/jobspec.h"
#include "runtime/model/model.h"

typedef struct optim optim;

/* Mixed precision with bf16 gradients: the gradient norm widens them this many
 * at a time, in a device scratch of min(this, the widest slice) floats
 * (sizes_mixed_work_bytes counts it); offload steps chunks of this size. */
#define OPTIM_SCRATCH_NUMEL ((size_t)1 << 16)

/* State for elements [lo[u], hi[u]) of each held unit u (NULL lo/hi: whole units). */
optim *optim_create(model *m, const dt_ops *ops, const job_train *t,
                    const size_t *lo, const size_t *hi);
/* The same with the state in host memory (ops->host_alloc: page-locked on
 * cuda), stepped by `host` (the CPU ops). */
optim *optim_create_offload(model *m, const dt_ops *ops, const dt_ops *host, const job_train *t,
                            const size_t *lo, const size_t *hi);
void optim_destroy(optim *o);
/* 1 when m, v and the master are host memory (offload), 0 when device memory. */
int optim_state_on_host(const optim *o);
/* One AdamW step (t = 1-based step count) on the slices, reading grads from
 * `grads[u]` (a buffer covering the slice, indexed from lo, the model's gradient
 * type) multiplied by grad_scale (clipping; 1: none), and updating `params[u]`
 * likewise (the model's parameter type); NULL arrays mean the model's own unit
 * buffers. fp32 scales the gradients in place first. */
void optim_step(optim *o, double lr, int t, void *const *params, void *const *grads, float grad_scale);
/* The same step with its scalars where the ops read them when they run
 * (ops.h, "the step without the host": device memory on cuda), so that it can
 * be recorded as a graph and replayed (train.cuda_graphs): *hyper holds lr and
 * t (optim_hyper fills one, to be copied there), *grad_scale the clipping
 * factor (ops->clip_scale). The same arithmetic as optim_step with those
 * values, so the same bits. -1 (nothing done) for offloaded state, which the
 * host steps. */
int optim_step_dev(optim *o, const dt_adamw_hyper *hyper, void *const *params, void *const *grads,
                   const float *grad_scale);
dt_adamw_hyper optim_hyper(const optim *o, double lr, int t);
/* Slice i (0 .. count-1, the held units in order) and its AdamW moments m and v
 * (hi - lo elements each, device memory): what a checkpoint saves and loads. */
int optim_slice_count(const optim *o);
void optim_slice_state(optim *o, int i, int *unit, size_t *lo, size_t *hi, float **m, float **v);
/* Mixed precision or offload: slice i's fp32 master (hi - lo floats, where
 * optim_state_on_host says), what a checkpoint saves as the parameters; NULL
 * in fp32 without offload (the parameters are fp32). */
float *optim_slice_master(optim *o, int i);
/* param (slice i's parameters, the model's type, device memory) = its master
 * (rounded to bf16 under mixed precision), after the master was loaded from a
 * checkpoint. No-op without a master. */
void optim_master_to_params(optim *o, int i, void *param);
/* Sum of squares (double) of n gradient elements of the model's type, for the
 * global norm: fp32 directly, bf16 widened through the optimizer's scratch. */
double optim_grad_sumsq(optim *o, const void *grad, size_t n);
/* The same sum added into *acc where the ops keep it (ops->sumsq_add; tmp: one
 * more double there, for bf16 gradients' chunks): *acc += optim_grad_sumsq's
 * value, the same bits, nothing read back. */
void optim_grad_sumsq_dev(optim *o, const void *grad, size_t n, double *acc, double *tmp);
/* Bytes of optimizer state held (AdamW m and v; for metrics and the dry-run check). */
size_t optim_state_bytes(const optim *o);
/* Bytes of fp32 master weights held (0 in fp32), and of the fp32 scratch that
 * widens bf16 gradients for the norm (0 unless the gradients are bf16). */
size_t optim_master_bytes(const optim *o);
size_t optim_scratch_bytes(const optim *o);
/* Offload: bytes of the step's host staging (0 without offload). */
size_t optim_host_scratch_bytes(const optim *o);

#endif
