/* init_from.h — `model.init_from: DIR`: a fresh run starts from a Hugging
 * Face folder's weights instead of the seeded initialisation.
 *
 * Every rank opens the folder (headers only) and checks it against the job's
 * model (hf_weights_check: one line per mismatching name or shape, printed by
 * rank 0); then each rank reads only its own slices (engine_load_hf) and says
 * how many of the files' tensor bytes it read. A resumed run (checkpoint.resume
 * found a checkpoint) loads the checkpoint instead: it is the same fine-tune,
 * further on. Collective over the world; DT_EXIT_CKPT (6) with one line in
 * err when the folder cannot be read or does not fit the model. */
#ifndef DTRUN_TRAIN_INIT_FROM_H
#define DTRUN_TRAIN_INIT_FROM_H

#include <stddef.h>

#include "lib/job/jobspec.h"
#include "runtime/worker/engine.h"

int init_from_load(engine *e, const job_spec *job, char *err, size_t errlen);

/* train.lora. A fresh run: init_from_load reads model.init_from into the
 * frozen base, then train.lora.init_from's PEFT adapter (if any) into the
 * adapters. A resumed one: the checkpoint holds the adapters and their
 * optimizer state only, so the base comes from model.init_from again
 * (init_from_base, before the checkpoint loads; without model.init_from the
 * base is the seed's draw, which every start makes the same). */
int init_from_base(engine *e, const job_spec *job, char *err, size_t errlen);

#endif
