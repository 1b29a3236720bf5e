/* jobspec_presets.h — named model shapes (`model.preset`).
 *
 * A preset fills every field of job_model; keys the job file gives explicitly
 * then override it. The table is listed in man/dtrun-job.5. */
#ifndef DTRUN_JOBSPEC_PRESETS_H
#define DTRUN_JOBSPEC_PRESETS_H

#include "lib/job/jobspec.h"

typedef struct {
    const char *name;
    model_kind kind;
    int n_layer, n_head, d_model;
    int d_ff;          /* 0: 4 * d_model */
    int vocab_size, seq_len;                         /* GPT, else 0 */
    int image_size, patch_size, channels, n_classes; /* ViT, else 0 */
    int n_kv_head;     /* llama: key/value heads; else 0 */
    double rope_theta; /* llama, else 0 */
    int tie_embeddings; /* llama: the LM head is wte */
} job_preset;

/* The preset called `name`, or NULL. */
const job_preset *job_preset_find(const char *name);

/* The i-th preset (0-based), or NULL past the end. */
const job_preset *job_preset_at(int i);

/* The smallest preset of a kind: what `model: {kind: vit}` alone starts from. */
const job_preset *job_preset_tiny(model_kind kind);

/* Overwrite every shape field of *m (kind included) with the preset's; d_ff
 * becomes 4 * d_model unless the preset names its own; max_positions becomes
 * 0 (seq_len, until the job says more); a mixture-of-experts preset sets
 * all of model.moe (the file's model.moe keys then override single ones).
 * m->preset is left alone. */
void job_preset_apply(const job_preset *p, job_model *m);

#endif
