/* test_graphs.c — train.cuda_graphs on the GPU: the engine's step recorded
 * as CUDA graphs and replayed (runtime/worker/engine_graph.c) against the
 * same job without the key, on the CUDA backend, one process.
 *
 * For a 20-step GPT (2 micro-batches accumulated, clipping active, an
 * evaluation after step 10 between replays) in fp32 and in bf16, and a ViT:
 * every step's loss and gradient norm, the validation losses and the final
 * parameters must be equal BIT FOR BIT, graphs on and off. Why bitwise and
 * not within a tolerance: the replayed step runs the same kernels on the same
 * buffers in the same order as the step issued op by op; what moved to the
 * device is the host's own arithmetic, done with the same IEEE operations in
 * the same order — the loss summed serially in double (loss_dev.cu), the norm
 * by sumsq's kernels with the host's last add (reduce.cu, norm_dev.cu), the
 * clipping factor's sqrt and division correctly rounded, AdamW's per-element
 * expression as adamw.cu's host-scalar kernels (the same kernels) with the bias
 * corrections computed on the host as adamw.cu does. The one place equality
 * rests on the compiler is that last expression (FMA contraction of the same
 * source, the same flags): if the parameters differ while the losses of the
 * first step agree, look there first.
 *
 * The test also prints (not checked) the mean time of steps 3..20 with and
 * without graphs: a tiny model is launch-bound, so replay should be faster.
 * Prints "ok - ..." / "not ok - ..." lines (test/gpu/run.sh counts them);
 * "test-gpu: no CUDA device: skipped" without a GPU. Not run yet: no GPU has
 * been lent since it was written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "lib/job/jobspec.h"
#include "lib/util/clock.h"
#include "runtime/env.h"
#include "runtime/train/lr.h"
#include "runtime/worker/engine.h"
#include "test/unit/check.h"

#define STEPS 20

static const char *gpt_yaml =
    "model: {kind: gpt, n_layer: 2, n_head: 4, d_model: 64, vocab_size: 97, seq_len: 32}\n"
    "data: {kind: synthetic}\n"
    "train: {steps: 20, global_batch: 8, micro_batch: 4, lr: 3.0e-3, warmup: 2, weight_decay: 0.1,\n"
    "        grad_clip: 1.0, eval_batches: 1, seed: 7, device: cuda, precision: %s, cuda_graphs: %s}\n"
    "log: {progress: off}\n";

static const char *vit_yaml =
    "model: {kind: vit, image_size: 16, patch_size: 4, channels: 3, n_classes: 10, n_layer: 2, n_head: 4,\n"
    "        d_model: 64}\n"
    "data: {kind: synthetic, synthetic_size: 512}\n"
    "train: {steps: 20, global_batch: 16, micro_batch: 8, lr: 3.0e-3, warmup: 2, weight_decay: 0.1,\n"
    "        grad_clip: 1.0, eval_batches: 1, seed: 7, device: cuda, precision: %s, cuda_graphs: %s}\n"
    "log: {progress: off}\n";

typedef struct {
    double loss[STEPS], norm[STEPS], val[2];
    double step_s; /* mean wall time of steps 3..STEPS */
    float *params;
    size_t n;
} run_result;

static int run(const char *yaml, const char *prec, int graphs, run_result *r)
{
    char text[2048], err[512], dump[] = "/tmp/dtrun-test-graphs.XXXXXX";
    snprintf(text, sizeof text, yaml, prec, graphs ? "true" : "false");
    job_spec job;
    if (job_load_string(&job, text, strlen(text), "graphs.yaml", err, sizeof err) != 0) {
        printf("# job: %s\n", err);
        return -1;
    }
    int rc;
    engine *e = engine_create(&job, &rc, err, sizeof err);
    if (!e) {
        printf("# engine_create: %s (exit %d)\n", err, rc);
        return -1;
    }
    engine_begin_training(e);
    double t0 = 0;
    for (int step = 0; step < STEPS && rc == 0; step++) {
        if (step == 2) t0 = clock_now_s();
        rc = engine_grads(e, step, &r->loss[step], err, sizeof err);
        if (rc == 0) rc = engine_update(e, step, lr_at(&job.train, step), &r->norm[step], err, sizeof err);
        double acc;
        if (rc == 0 && step == STEPS / 2 - 1) rc = engine_evaluate(e, &r->val[0], &acc, err, sizeof err);
    }
    /* (the last update may still be queued: a rough figure, the same for both runs) */
    r->step_s = (clock_now_s() - t0) / (STEPS - 2);
    double acc;
    if (rc == 0) rc = engine_evaluate(e, &r->val[1], &acc, err, sizeof err);
    int fd = mkstemp(dump);
    close(fd);
    if (rc == 0) rc = engine_dump_params(e, dump, err, sizeof err);
    if (rc) printf("# engine: %s\n", err);
    engine_destroy(e);
    FILE *f = fopen(dump, "rb");
    r->params = NULL;
    r->n = 0;
    if (f && rc == 0) {
        fseek(f, 0, SEEK_END);
        long bytes = ftell(f);
        rewind(f);
        r->params = malloc(bytes > 0 ? (size_t)bytes : 1);
        r->n = fread(r->params, sizeof(float), (size_t)bytes / sizeof(float), f);
    }
    if (f) fclose(f);
    unlink(dump);
    return rc == 0 && r->params ? 0 : -1;
}

static void compare(const char *name, const char *yaml, const char *prec)
{
    run_result off, on;
    int a = run(yaml, prec, 0, &off), b = run(yaml, prec, 1, &on);
    CHECK(a == 0 && b == 0, "%s: 20 steps on cuda with train.cuda_graphs off and on", name);
    if (a || b) return;
    int first = -1;
    for (int s = 0; s < STEPS && first < 0; s++)
        if (memcmp(&off.loss[s], &on.loss[s], sizeof(double)) || memcmp(&off.norm[s], &on.norm[s], sizeof(double)))
            first = s;
    CHECK(first < 0, "%s: every step's loss and gradient norm bit for bit (%s%d: loss %.17g vs %.17g)", name,
          first < 0 ? "last step " : "first difference at step ", (first < 0 ? STEPS - 1 : first) + 1,
          on.loss[first < 0 ? STEPS - 1 : first], off.loss[first < 0 ? STEPS - 1 : first]);
    CHECK(!memcmp(off.val, on.val, sizeof off.val), "%s: validation losses (after step 10 and at the end) bit for bit "
          "(%.17g vs %.17g)", name, on.val[1], off.val[1]);
    double worst = 0;
    for (size_t i = 0; i < on.n && i < off.n; i++) worst = fmax(worst, fabs((double)on.params[i] - off.params[i]));
    CHECK(on.n == off.n && !memcmp(on.params, off.params, on.n * sizeof(float)),
          "%s: the final parameters bit for bit (%zu floats, largest difference %.3g)", name, on.n, worst);
    CHECK(on.loss[STEPS - 1] < on.loss[0], "%s: it learns (loss %.4f -> %.4f)", name, on.loss[0], on.loss[STEPS - 1]);
    printf("# %s: mean step (steps 3..%d): %.1f us with graphs, %.1f us without\n", name, STEPS, on.step_s * 1e6,
           off.step_s * 1e6);
    free(off.params), free(on.params);
}

int main(void)
{
    setenv("OPENBLAS_CORETYPE", "Haswell", 0);
    if (!dt_ops_cuda()) {
        printf("test-gpu: no CUDA device: skipped\n");
        return 0;
    }
    unsetenv("RANK"), unsetenv("WORLD_SIZE");
    dt_env_reload(); /* one process */
    compare("gpt fp32", gpt_yaml, "fp32");
    compare("gpt bf16", gpt_yaml, "bf16");
    compare("vit fp32", vit_yaml, "fp32");
    CHECK_DONE();
}
