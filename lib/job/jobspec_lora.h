/* jobspec_lora.h — train.lora's defaults, a PEFT adapter's
 * adapter_config.json and the rules of a LoRA job (jobspec_lora.c; private to
 * lib/job). */
#ifndef DTRUN_JOBSPEC_LORA_H
#define DTRUN_JOBSPEC_LORA_H

#include <stddef.h>

#include "lib/job/jobspec.h"
#include "lib/job/jobspec_loader.h"

/* After the model's keys (and model.init_from) are in: train.lora's defaults
 * when any of its keys was given, and train.lora.init_from's
 * adapter_config.json. 0, or -1 with the loader's one line. */
int loader_derive_lora(loader *L);

/* The combinations a LoRA job must keep: 0, or -1 with the keys to blame
 * (-1 terminated, at most JOB_BLAME_MAX) and the message. */
int job_check_lora(const job_spec *job, int *blame, char *msg, size_t n);

#endif
