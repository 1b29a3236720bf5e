/* account.h — what one worker holds in memory, by category, as it allocates.
 *
 * The engine and the strategies add every buffer they allocate (or make the model
 * allocate) and subtract what they free, so the per-rank metrics report what this
 * rank really held, not what a formula predicts: the dry-run's numbers
 * (runtime/parallel/sizes.h) are checked against these.
 *
 * Categories (the issue's): params (working parameters the rank holds: the model's
 * units, or FSDP's shards), grads (the model's gradient buffers, or the ZeRO-2 /
 * FSDP shards), optimizer (AdamW m and v), activations (model_acts; on the CPU
 * backend, where host memory is the device's, also their host loss buffers and
 * the host batch buffers), buffers (DDP buckets, ZeRO-2 reduce buffers, FSDP
 * gather buffers, the tied wte's scratch: memory needed only to communicate),
 * master (the fp32 master weights of mixed precision, held by the optimizer).
 * Mixed precision's fp32 working copies (the model's widened unit and its
 * micro-batch gradient, the optimizer's scratch) count as activations, with
 * the other scratch the dry-run calls workspace. host: what train.offload keeps
 * in host memory instead (AdamW m and v, the fp32 master, the step's host
 * staging): not device memory, so not in the total.
 * test/integration/plan_vs_measured.sh holds these against the dry-run. */
#ifndef DTRUN_ACCOUNT_H
#define DTRUN_ACCOUNT_H

#include <stddef.h>

typedef enum {
    ACCT_PARAMS = 0,
    ACCT_GRADS,
    ACCT_OPTIM,
    ACCT_ACTS,
    ACCT_BUFFERS,
    ACCT_MASTER,
    ACCT_HOST,
    ACCT_COUNT
} acct_category;

typedef struct account account;

account *acct_create(void);
void acct_destroy(account *a);
/* Bytes allocated (> 0) or freed (< 0) in a category. */
void acct_add(account *a, acct_category c, long long bytes);
size_t acct_current(const account *a, acct_category c);
/* Largest value each category reached, and the largest sum of all of them but
 * host at one moment (the device's), since creation or the last acct_reset_peaks. */
size_t acct_peak(const account *a, acct_category c);
size_t acct_peak_total(const account *a);
/* Peaks restart from what is held now: setup transients (model_create holds
 * every full unit before FSDP releases them) do not count as training peaks. */
void acct_reset_peaks(account *a);
const char *acct_category_name(acct_category c); /* "params", "grads", ... */

#endif
