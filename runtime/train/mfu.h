/* mfu.h — model FLOPs utilisation (PaLM's MFU, as llm.c and Megatron print it):
 * the FLOPs the model needs per step (forward and backward, recompute not
 * counted, nor the chunked LM head's second logits GEMM: model_flops_per_sample,
 * not model_exec_flops_per_sample) per second, over the peak of every device
 * of the run in the job's precision.
 *
 * The peak comes from a hardware profile (configs/hardware): the one
 * DTRUN_HARDWARE (--hardware) names, else the one that describes the device
 * by its name (hw_profile_for_device). A GPU profile's peak is per device; a
 * cpu profile's is the host's, shared by the ranks on it. */
#ifndef DTRUN_MFU_H
#define DTRUN_MFU_H

#include <stddef.h>
#include "lib/job/jobspec.h"

typedef struct {
    double step_flops; /* model FLOPs of one step, whole job */
    double peak;       /* FLOP/s of every device together */
    char profile[64];  /* the profile's name */
    int devices;       /* GPUs, or hosts for a cpu profile */
} mfu_basis;

/* 0 with *b filled; -1 with one line in why when no profile gives a peak
 * (an unknown device, a profile that does not load, a peak of 0). */
int mfu_basis_for(mfu_basis *b, const job_spec *job, const char *device_name, int world,
                  int ranks_per_node, char *why, size_t whylen);

/* The fraction of the peak a step of that many seconds reached. */
double mfu_of(const mfu_basis *b, double step_seconds);

#endif
