/* engine_classify.c — the class logits of given images (engine.h), through
 * the model's own forward: the ViT head computes the logits of every image of
 * a micro-batch (labels -1: no loss) and hands them over on the host. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/exit_codes.h"
#include "runtime/worker/engine_internal.h"

int engine_classify(engine *e, const float *images, int B, float *logits, char *err, size_t errlen)
{
    engine_graph_outside(e); /* ops outside the step (train.cuda_graphs) */
    const job_spec *j = &e->job;
    if (j->model.kind != MODEL_VIT || e->world_size != 1 || e->ex) {
        snprintf(err, errlen, "cannot classify with this job: %s",
                 j->model.kind != MODEL_VIT ? "the model is a GPT (only a ViT classifies images)"
                                            : "it runs on more than one process");
        return DT_EXIT_USAGE;
    }
    const job_model *m = &j->model;
    int mb = j->train.micro_batch, K = m->n_classes;
    size_t img = (size_t)m->channels * m->image_size * m->image_size;
    int *labels = malloc((size_t)mb * sizeof *labels);
    if (!labels) {
        snprintf(err, errlen, "out of memory");
        return DT_EXIT_FAIL;
    }
    for (int b = 0; b < mb; b++) labels[b] = -1;
    e->x.training = 0;
    for (int b0 = 0; b0 < B; b0 += mb) {
        int n = B - b0 < mb ? B - b0 : mb, correct = 0;
        model_batch in = {.B = n, .images = images + (size_t)b0 * img, .labels = labels};
        model_forward(e->chunk[0], e->acts, &in, &correct);
        memcpy(logits + (size_t)b0 * K, model_acts_vit_logits(e->acts), (size_t)n * K * sizeof(float));
    }
    e->x.training = 1;
    free(labels);
    return DT_EXIT_OK;
}
