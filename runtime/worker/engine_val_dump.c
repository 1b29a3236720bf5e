/* engine_val_dump.c — the validation samples engine_evaluate runs over, to a
 * file (engine_dump_val, engine.h), so that a checkpoint exported to PyTorch can
 * be checked on exactly the tokens dtrun evaluated (scripts/export_check.py). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/worker/engine_internal.h"
#include "lib/util/exit_codes.h"

int engine_dump_val(engine *e, const char *path, char *err, size_t errlen)
{
    engine_graph_outside(e); /* ops outside the step (train.cuda_graphs) */
    const job_spec *job = &e->job;
    if (!job_model_is_lm(&job->model)) {
        snprintf(err, errlen, "%s: validation dumps are for language models (gpt, llama) only", path);
        return DT_EXIT_FAIL;
    }
    long total = engine_val_samples(e), gb = job->train.global_batch;
    int T = job->model.seq_len;
    size_t n = (size_t)total * (size_t)T;
    int32_t *tokens = malloc((n ? n : 1) * sizeof(int32_t)), *targets = malloc((n ? n : 1) * sizeof(int32_t));
    int *tok = malloc((size_t)gb * T * sizeof(int)), *tgt = malloc((size_t)gb * T * sizeof(int));
    int rc = DT_EXIT_FAIL;
    if (!tokens || !targets || !tok || !tgt) {
        snprintf(err, errlen, "%s: out of memory for %ld validation samples", path, total);
        goto out;
    }
    /* batch by batch, as engine_evaluate walks them */
    long seen = 0;
    for (long vstep = 0; seen < total; vstep++) {
        int nb = (int)(total - seen < gb ? total - seen : gb);
        data_batch(e->val, vstep, 0, nb, tok, tgt, NULL, NULL);
        for (size_t i = 0; i < (size_t)nb * T; i++) {
            tokens[(size_t)seen * T + i] = tok[i];
            targets[(size_t)seen * T + i] = tgt[i];
        }
        seen += nb;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot write the validation samples (%s)", path, strerror(errno));
        goto out;
    }
    int32_t head[2] = {(int32_t)total, (int32_t)T};
    int ok = fwrite("DTVAL001", 1, 8, f) == 8 && fwrite(head, sizeof head, 1, f) == 1 &&
             fwrite(tokens, sizeof(int32_t), n, f) == n && fwrite(targets, sizeof(int32_t), n, f) == n;
    if (fclose(f) != 0) ok = 0;
    if (!ok) snprintf(err, errlen, "%s: write failed (%s)", path, strerror(errno));
    else rc = DT_EXIT_OK;
out:
    free(tokens), free(targets), free(tok), free(tgt);
    return rc;
}
