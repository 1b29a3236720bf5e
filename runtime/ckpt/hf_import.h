/* hf_import.h — a Hugging Face GPT-2 or ViT safetensors folder as a source of
 * parameter slices (`model.init_from`, `dtrun generate HF_DIR`, `dtrun eval
 * HF_DIR`, `dtrun classify HF_DIR`).
 *
 * A folder holds model.safetensors, or model.safetensors.index.json naming
 * the shard file of every tensor ({"weight_map": {NAME: FILE}}, transformers'
 * sharded save), plus config.json (read by lib/job, not here). Tensor names
 * are transformers' ("transformer.h.0.attn.c_attn.weight",
 * "vit.encoder.layer.0.attention.attention.query.weight"; GPT-2's also without
 * "transformer.", as the files published on the Hub); hf_names.h maps them to
 * dtrun's, Conv1D transposes and ViT's query/key/value fusion included.
 *
 * Each rank reads only the elements of its own slices (tp shard, pipeline
 * stage, FSDP/ZeRO flat range): files are mapped, never read whole, and only
 * the bytes of the slice are touched — the bytes copied are counted
 * (hf_weights_bytes_read) so a test can see that a rank reads its share.
 * F32 and BF16 tensors are read (BF16 widened exactly).
 *
 * Errors: -1 with one line "PATH: what" in err; hf_weights_check gives one line
 * per mismatch. */
#ifndef DTRUN_HF_IMPORT_H
#define DTRUN_HF_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#include "lib/job/jobspec.h"
#include "runtime/model/model.h"

typedef struct hf_weights hf_weights;

/* Opens and validates DIR's safetensors file(s) (headers only). */
int hf_weights_open(const char *dir, hf_weights **out, char *err, size_t errlen);
/* A PEFT adapter folder (train.lora.init_from): DIR/adapter_model.safetensors,
 * whose tensors are train.lora's adapters under PEFT's names (hf_names.h);
 * check and read it as a model folder (they then concern the adapters only,
 * a model folder's the base model only). */
int hf_weights_open_adapter(const char *dir, hf_weights **out, char *err, size_t errlen);
void hf_weights_close(hf_weights *w);
const char *hf_weights_dir(const hf_weights *w);

/* Every tensor model m needs is there (under GPT-2's or Hugging Face ViT's
 * names, by m's kind), F32 or BF16, in the shape hf_names.h gives (wpe may hold more positions than seq_len: the first seq_len are
 * used), and the files hold no tensor the model lacks (besides GPT-2's
 * attention-mask buffers and an lm_head.weight tied to wte). Returns the
 * number of mismatches (0: fine); err gets one line per mismatch, separated by
 * '\n' (as many as fit). */
int hf_weights_check(const hf_weights *w, const job_model *m, char *err, size_t errlen);

/* Elements [lo, hi) of a unit's flat parameter buffer of model m on tp rank
 * tp_rank of tp_size (specs: the unit's tensors with their offsets, as
 * ckpt_read_unit_slice), from the files, as fp32 into slice. */
int hf_weights_read_unit_slice(hf_weights *w, const job_model *m, const param_spec *specs, int n_specs, int tp_rank,
                               int tp_size, uint64_t lo, uint64_t hi, float *slice, char *err, size_t errlen);

/* Tensor bytes copied out of the files so far, and the bytes of every tensor
 * in them: what a rank read of the whole. */
uint64_t hf_weights_bytes_read(const hf_weights *w);
uint64_t hf_weights_bytes_total(const hf_weights *w);

#endif
