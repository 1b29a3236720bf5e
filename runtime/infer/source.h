/* source.h — what `dtrun generate`, `dtrun eval` and `dtrun classify` run on:
 * a model source (a dtrun checkpoint, or a Hugging Face GPT-2 or ViT folder;
 * IDX images as eval's data get their labels file by the torchvision name)
 * turned into a job the
 * engine runs, and that job run on one process or launched on several.
 *
 * The job is written as YAML and loaded by lib/job like any job file, so the
 * same checks apply: an HF folder becomes model.init_from (its config.json
 * gives the shape; a disagreeing or missing config is exit 2), a checkpoint
 * becomes checkpoint.resume with the model section its index.json recorded
 * (exit 6 when it cannot be opened). The workers load the weights through
 * the training loop's own path (checkpoint_resume: each rank reads its
 * slices). */
#ifndef DTRUN_INFER_SOURCE_H
#define DTRUN_INFER_SOURCE_H

#include <stddef.h>

#include "lib/job/jobspec.h"

typedef struct {
    const char *src;        /* CKPT dir / step dir, or HF folder */
    int dp, tp, pp;         /* the layout (default 1) */
    const char *mode;       /* parallel.mode, NULL: none */
    const char *data;       /* eval: the file evaluated on (NULL: synthetic) */
    int global_batch;       /* eval: samples per validation batch (0: 8) */
    int seq_len;            /* GPT: tokens per window (0: the model's) */
    int val_split;          /* eval: the validation split of data (its last val_fraction), not all of it */
    double val_fraction;    /* with val_split: its share (0: data.val_fraction's default) */
} infer_source;

/* The job YAML text (malloc'd into *yaml) for src; model_out gets the
 * model's kind and shape (from the checkpoint's index or the folder's
 * config). Returns 0, or a DT_EXIT_* with one line in err. */
int infer_job_yaml(const infer_source *s, char **yaml, job_model *model_out, char *err, size_t errlen);

/* Runs `dtrun SUBCOMMAND --worker JOB ARGS...` on nproc local workers through
 * the launcher (nproc > 1), with JOB a temporary file holding yaml (removed
 * afterwards), or calls worker(job) in this process (nproc 1). argv: the
 * subcommand's own (argv[0] = SUBCOMMAND), passed on unchanged. Returns the
 * exit status. */
typedef int (*infer_worker_fn)(const char *job_path, int argc, char **argv);
int infer_run(const char *subcommand, const char *yaml, int nproc, int argc, char **argv, infer_worker_fn worker);

/* A subcommand's integer option: 0 with *out, or -1 after one line
 * "dtrun SUBCOMMAND: OPT 'V': want an integer in [LO, HI]". */
int infer_int_opt(const char *subcommand, const char *opt, const char *v, int lo, int hi, int *out);

#endif
