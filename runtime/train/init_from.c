/* init_from.c — loading model.init_from's weights (init_from.h). */
#include "runtime/train/init_from.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lib/util/exit_codes.h"
#include "runtime/ckpt/hf_import.h"
#include "runtime/worker/engine_ckpt.h"

/* A model folder (model.init_from) or, with `adapter`, a PEFT adapter folder
 * (train.lora.init_from) into this rank's slices. */
static int load_folder(engine *e, const job_spec *job, int adapter, char *err, size_t errlen)
{
    const char *dir = adapter ? job->model.lora.init_from : job->model.init_from;
    const char *key = adapter ? "train.lora.init_from" : "model.init_from";
    int rank = engine_rank(e);
    hf_weights *hf = NULL;
    char why[4096] = "";
    int n_bad = 0;
    if ((adapter ? hf_weights_open_adapter : hf_weights_open)(dir, &hf, why, sizeof why) != 0) n_bad = -1;
    else n_bad = hf_weights_check(hf, &job->model, why, sizeof why);
    /* every rank reads the same headers; agree before anyone loads */
    int any = 0, rc = engine_any(e, n_bad != 0, &any, err, errlen);
    if (rc == DT_EXIT_OK && any) {
        if (n_bad > 0 && rank == 0) {
            for (char *line = strtok(why, "\n"); line; line = strtok(NULL, "\n")) fprintf(stderr, "dtrun: %s\n", line);
            snprintf(err, errlen, "%s: %s: %d mismatch%s with the job's model (above)", key, dir, n_bad,
                     n_bad == 1 ? "" : "es");
        } else if (n_bad < 0) {
            snprintf(err, errlen, "rank %d: %s: %s", rank, key, why);
        } else {
            snprintf(err, errlen, "rank %d: %s: %s does not fit the model (rank 0 says how)", rank, key, dir);
            struct timespec ts = {0, 300000000L}; /* rank 0, with the reason, exits first */
            nanosleep(&ts, NULL);
        }
        rc = DT_EXIT_CKPT;
    }
    if (rc == DT_EXIT_OK) rc = (adapter ? engine_load_adapter : engine_load_hf)(e, hf, err, errlen);
    if (rc == DT_EXIT_OK)
        fprintf(stderr, "dtrun: rank %d: %s %s: read %llu tensor bytes (the files hold %llu; %s)\n", rank,
                adapter ? "lora.init_from" : "init_from", dir, (unsigned long long)hf_weights_bytes_read(hf),
                (unsigned long long)hf_weights_bytes_total(hf), engine_layout(e));
    hf_weights_close(hf);
    return rc;
}

int init_from_load(engine *e, const job_spec *job, char *err, size_t errlen)
{
    int rc = job->model.init_from[0] ? load_folder(e, job, 0, err, errlen) : DT_EXIT_OK;
    if (rc == DT_EXIT_OK && job_lora_on(&job->model) && job->model.lora.init_from[0])
        rc = load_folder(e, job, 1, err, errlen);
    return rc;
}

int init_from_base(engine *e, const job_spec *job, char *err, size_t errlen)
{
    if (!job_lora_on(&job->model) || !job->model.init_from[0]) return DT_EXIT_OK;
    return load_folder(e, job, 0, err, errlen);
}
