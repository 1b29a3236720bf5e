/* optim.h — AdamW over a model's units, fp32 state.
 *
 * State lives per unit as flat buffers matching the unit's parameter buffer, so a
 * sharded strategy (ZeRO, FSDP) can keep state for a slice [lo, hi) of a unit
 * only: optim_step_unit applies AdamW to that slice, with weight decay on the
 * elements of 2-D weights only (param_spec.decay). */
#ifndef DTRUN_OPTIM_H
#define DTRUN_OPTIM_H

#include <stddef.h>
#include "lib/job/jobspec.h"
#include "runtime/model/model.h"

typedef struct optim optim;

/* State for elements [lo[u], hi[u]) of each held unit u (NULL lo/hi: whole units). */
optim *optim_create(model *m, const dt_ops *ops, const job_train *t,
                    const size_t *lo, const size_t *hi);
void optim_destroy(optim *o);
/* One AdamW step (t = 1-based step count) on the slices, reading grads from
 * `grads[u]` (a buffer covering the slice, indexed from lo) and updating
 * `params[u]` likewise; NULL arrays mean the model's own unit buffers. */
void optim_step(optim *o, double lr, int t, float *const *params, float *const *grads);
/* Slice i (0 .. count-1, the held units in order) and its AdamW moments m and v
 * (hi - lo elements each, device memory): what a checkpoint saves and loads. */
int optim_slice_count(const optim *o);
void optim_slice_state(optim *o, int i, int *unit, size_t *lo, size_t *hi, float **m, float **v);
/* Bytes of optimizer state held (for metrics and the dry-run check). */
size_t optim_state_bytes(const optim *o);

#endif
