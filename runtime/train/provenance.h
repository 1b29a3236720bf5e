/* provenance.h — what produced a checkpoint, written into its index: dtrun's
 * version and the commit it was built from, the launch command, the run, the
 * environment knobs that change results (runtime/env.h), the backend, machine
 * and world, and the content hash of every data file the job reads
 * (runtime/data/data_hash.h). `dtrun inspect CKPT` prints it; a resume
 * compares the data hashes with the files as they are now. */
#ifndef DTRUN_PROVENANCE_H
#define DTRUN_PROVENANCE_H

#include <stddef.h>
#include <stdio.h>

#include "lib/job/jobspec.h"

/* The provenance as JSON text (malloc'd), or NULL with one line in err. The
 * data files are hashed on the first call and remembered for later ones.
 * It names the run too: {"run": {"id": TORCHELASTIC_RUN_ID, "attempt": A,
 * "resumed_from": the step directory checkpoint.resume pinned, or ""}}, so a
 * restart knows which checkpoints are its own (checkpoint.h). */
char *provenance_json(const job_spec *job, const char *backend, int world, const char *resumed_from, char *err,
                      size_t errlen);

/* The run a checkpoint's provenance names: 0 with its id and resumed_from
 * ("" when none), or -1 when it names none (a dtrun before it did). */
int provenance_run(const char *provenance, char *id, size_t idlen, char *resumed_from, size_t rlen);

/* Compares the data hashes of a checkpoint's provenance (JSON text; "" or
 * none: nothing to compare) with the files now: writes one line per changed
 * or missing file into lines ("" when all are the same) and returns how many. */
int provenance_data_changes(const char *provenance, char *lines, size_t n);

/* `dtrun inspect PATH`: a checkpoint (DIR or a step directory) described on
 * out. Returns an exit status (0, or 6 with one line on stderr). */
int provenance_inspect(const char *path, FILE *out);

#endif
