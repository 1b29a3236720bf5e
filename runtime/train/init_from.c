/* init_from.c — loading model.init_from's weights (init_from.h). */
#include "runtime/train/init_from.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lib/util/exit_codes.h"
#include "runtime/ckpt/hf_import.h"
#include "runtime/worker/engine_ckpt.h"

int init_from_load(engine *e, const job_spec *job, char *err, size_t errlen)
{
    const char *dir = job->model.init_from;
    int rank = engine_rank(e);
    hf_weights *hf = NULL;
    char why[4096] = "";
    int n_bad = 0;
    if (hf_weights_open(dir, &hf, why, sizeof why) != 0) n_bad = -1;
    else n_bad = hf_weights_check(hf, &job->model, why, sizeof why);
    /* every rank reads the same headers; agree before anyone loads */
    int any = 0, rc = engine_any(e, n_bad != 0, &any, err, errlen);
    if (rc == DT_EXIT_OK && any) {
        if (n_bad > 0 && rank == 0) {
            for (char *line = strtok(why, "\n"); line; line = strtok(NULL, "\n")) fprintf(stderr, "dtrun: %s\n", line);
            snprintf(err, errlen, "model.init_from: %s: %d mismatch%s with the job's model (above)", dir, n_bad,
                     n_bad == 1 ? "" : "es");
        } else if (n_bad < 0) {
            snprintf(err, errlen, "rank %d: model.init_from: %s", rank, why);
        } else {
            snprintf(err, errlen, "rank %d: model.init_from: %s does not fit the model (rank 0 says how)", rank, dir);
            struct timespec ts = {0, 300000000L}; /* rank 0, with the reason, exits first */
            nanosleep(&ts, NULL);
        }
        rc = DT_EXIT_CKPT;
    }
    if (rc == DT_EXIT_OK) rc = engine_load_hf(e, hf, err, errlen);
    if (rc == DT_EXIT_OK)
        fprintf(stderr, "dtrun: rank %d: init_from %s: read %llu tensor bytes (the files hold %llu; %s)\n", rank, dir,
                (unsigned long long)hf_weights_bytes_read(hf), (unsigned long long)hf_weights_bytes_total(hf),
                engine_layout(e));
    hf_weights_close(hf);
    return rc;
}
