/* engine_ckpt.h — the engine's side of checkpoints: what this rank holds, as
 * checkpoint pieces (runtime/ckpt/ckpt.h), and back; plus the small world-wide
 * agreements the training loop needs around them (a signal seen by one rank,
 * a non-finite loss).
 *
 * What a rank saves. The strategies tell each rank the slice of every held unit
 * it updates (strategy.h): its parameters and AdamW moments m, v are what the
 * rank writes, as "param/NAME", "adam_m/NAME", "adam_v/NAME" pieces, except
 * copies another rank also writes:
 *  - replicated data-parallel slices (DDP, HSDP's replicas): only the rank that
 *    counts them in the gradient norm (counts_norm: dp rank 0, replica 0);
 *  - tensors replicated over tp (layernorms, row-parallel biases, wpe): tp rank 0;
 *  - the GPT head's tied copy of wte: never (unit 0's wte is the same numbers).
 * That is exactly the set of elements the global gradient norm counts once,
 * so every global element is written by one rank. A rank with nothing left
 * still writes its (empty) file: a step has one file per rank.
 *
 * What a rank loads. Under the CURRENT layout each rank reads its own slices
 * (ckpt_read_unit_slice: any saved layout, any tp split), parameters and both
 * moments, tied copies included, then the strategy makes the parameters current
 * on every rank (after_update: ZeRO all-gathers, FSDP drops stale gathers).
 *
 * Every function here is a collective over the world: all ranks call it, and all
 * return the same status. Errors: a DT_EXIT_* with one line in err. */
#ifndef DTRUN_ENGINE_CKPT_H
#define DTRUN_ENGINE_CKPT_H

#include <stddef.h>

#include "runtime/ckpt/ckpt.h"
#include "runtime/ckpt/hf_import.h"
#include "runtime/worker/engine.h"

/* Layout facts for the index (ckpt_meta's dp, tp, pp, world, mode). */
void engine_ckpt_meta_layout(const engine *e, ckpt_meta *meta);

/* Writes step meta->step: every rank its file, a barrier over the world, rank 0
 * commits (index.json, `latest`, keep). The status is all-reduced: a failure on
 * any rank is DT_EXIT_CKPT on all, `latest` untouched; err says what and on
 * which rank (the failing rank has the reason, the others a pointer to it).
 * *already = 1 when the step was already the committed latest (a resumed run
 * reaching the step it started from): nothing written, not an error.
 * delay_ms > 0 (tests): each rank sleeps that long after writing its file and
 * before the barrier, widening the window in which a crash leaves a partial step. */
int engine_save_checkpoint(engine *e, const char *dir, const ckpt_meta *meta, int keep, int delay_ms,
                           int *already, char *err, size_t errlen);

/* Loads parameters and AdamW moments from an open checkpoint (any layout) into
 * this rank's slices. DT_EXIT_CKPT on a missing tensor or shape mismatch on
 * any rank. */
int engine_load_checkpoint(engine *e, const ckpt *ck, char *err, size_t errlen);

/* Loads the parameters of a Hugging Face folder (model.init_from; checked
 * with hf_weights_check first) into this rank's slices: each rank reads only
 * its own slices' elements; AdamW's moments stay as they are (a fresh run's
 * zeros). DT_EXIT_CKPT when a read fails on any rank. */
int engine_load_hf(engine *e, hf_weights *hf, char *err, size_t errlen);
/* train.lora: under LoRA engine_load_hf loads the folder into the frozen base
 * (the strategies' frozen_slice); this loads a PEFT adapter folder
 * (hf_weights_open_adapter) into the adapters' slices, the moments untouched. */
int engine_load_adapter(engine *e, hf_weights *peft, char *err, size_t errlen);

/* *any = 1 when `mine` is nonzero on some rank (all-reduce MAX over the world). */
int engine_any(engine *e, int mine, int *any, char *err, size_t errlen);

/* flags[r] = rank r's `mine` (0/1), for every world rank (all-gather). */
int engine_gather_flags(engine *e, int mine, int *flags, char *err, size_t errlen);

/* This rank's own share of the last step's loss sum (engine_grads): 0 on ranks
 * that compute no loss. Finite unless this rank's forward went wrong. */
double engine_local_loss(const engine *e);

#endif
