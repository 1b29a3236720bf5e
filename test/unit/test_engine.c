/* test_engine.c — the parallel engine against the plain training loop.
 *
 * 1. One process: the engine (runtime/worker/engine.h) must reproduce, bit for
 *    bit, the loop written out here by hand from the model, the data and AdamW —
 *    micro-batches with loss scale 1 / global tokens, the global norm counting
 *    the tied wte once, clipping, the learning-rate schedule — for GPT and ViT,
 *    with gradient accumulation. Every layout test compares against this
 *    single-process engine, so the engine itself is checked against first
 *    principles here.
 * 2. Several processes (forked, file store, shm): dp = 2 under every strategy,
 *    tp = 2 and pp = 2 give the single-process losses within 1e-5 relative and
 *    every rank the same loss; engine_dump_params writes the same parameters.
 *    Under the sanitizer build this also runs the strategies under ASan.
 * 3. The memory account: FSDP over 2 ranks holds half the parameter shards.
 * 4. train.cuda_graphs (engine_graph.c): the step on device scalars, which the
 *    CPU backend issues every step, reproduces the same plain loop bit for
 *    bit, GPT and ViT with accumulation and clipping. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "runtime/data/data.h"
#include "runtime/env.h"
#include "runtime/model/model.h"
#include "runtime/worker/engine.h"
#include "runtime/train/lr.h"
#include "runtime/optim/optim.h"
#include "runtime/train/train.h"
#include "test/unit/check.h"

#define STEPS 4

static const char *gpt_yaml =
    "model: {kind: gpt, n_layer: 2, n_head: 4, d_model: 32, vocab_size: 64, seq_len: 16}\n"
    "data: {kind: synthetic}\n"
    "train: {steps: 4, global_batch: 8, micro_batch: 4, lr: 3.0e-3, warmup: 1, weight_decay: 0.1,\n"
    "        grad_clip: 0.5, eval_batches: 1, seed: 11, threads: 1}\n"
    "log: {progress: off}\n";

static const char *vit_yaml =
    "model: {kind: vit, image_size: 8, patch_size: 4, channels: 1, n_classes: 10, n_layer: 2, n_head: 4,\n"
    "        d_model: 32}\n"
    "data: {kind: synthetic, synthetic_size: 256}\n"
    "train: {steps: 4, global_batch: 8, micro_batch: 2, lr: 3.0e-3, warmup: 1, weight_decay: 0.1,\n"
    "        grad_clip: 0.5, eval_batches: 1, seed: 11, threads: 1}\n"
    "log: {progress: off}\n";

static int load_job(job_spec *job, const char *yaml, const char *parallel)
{
    char text[2048], err[512];
    snprintf(text, sizeof text, "%s%s", yaml, parallel ? parallel : "");
    if (job_load_string(job, text, strlen(text), "t.yaml", err, sizeof err) != 0) {
        printf("# job: %s\n", err);
        return -1;
    }
    return 0;
}

/* The plain loop, one process: losses of each step and the final parameters
 * (every unit's flat buffer in unit order = the dump's layout with tp = 1). */
static size_t reference(const job_spec *job, double *loss, float **params_out)
{
    const dt_ops *ops = &dt_ops_cpu;
    char err[256];
    dt_ops_set_threads(job->train.threads); /* as the engine: float sums depend on the split */
    model_shard sh = {0, 1, 0, model_n_units(&job->model), 0, 0, 1, 0, 1};
    model *m = model_create(&job->model, &sh, ops, job->train.recompute);
    int mb = job->train.micro_batch, A = job->train.grad_accum;
    model_acts *a = model_acts_create(m, mb);
    optim *o = optim_create(m, ops, &job->train, NULL, NULL);
    data_loader *d = data_open(job, DATA_TRAIN, err, sizeof err);
    model_init_params(m, job->train.seed);
    const job_model *s = &job->model;
    int gpt = s->kind == MODEL_GPT, per = gpt ? s->seq_len : 1;
    size_t n_in = gpt ? (size_t)mb * s->seq_len : (size_t)mb * s->channels * s->image_size * s->image_size;
    int *tok = malloc(n_in * sizeof(int)), *tgt = malloc(n_in * sizeof(int)), *lab = malloc(mb * sizeof(int));
    float *img = malloc(n_in * sizeof(float));
    double count = (double)job->train.global_batch * per;
    for (int step = 0; step < STEPS; step++) {
        model_zero_grads(m);
        double sum = 0;
        for (int j = 0; j < A; j++) {
            data_batch(d, step, j * mb, mb, gpt ? tok : NULL, gpt ? tgt : NULL, gpt ? NULL : img, gpt ? NULL : lab);
            model_batch in = {.B = mb, .tokens = tok, .targets = tgt, .images = img, .labels = lab};
            sum += model_forward(m, a, &in, NULL);
            model_backward(m, a, &in, (float)(1.0 / count));
        }
        loss[step] = sum / count;
        double sq = 0;
        for (int i = 0; i < model_param_count(m); i++)
            if (!model_param(m, i)->tied) sq += ops->sumsq(model_param_grad(m, i), model_param(m, i)->local_numel);
        double norm = sqrt(sq);
        if (norm > job->train.grad_clip)
            for (int u = 0; u < sh.unit_end; u++)
                ops->scale(model_unit_grads(m, u), (float)(job->train.grad_clip / (norm + 1e-6)),
                           model_unit_local_numel(m, u));
        optim_step(o, lr_at(&job->train, step), step + 1, NULL, NULL, 1.0f);
    }
    size_t total = 0;
    for (int u = 0; u < sh.unit_end; u++) total += model_unit_local_numel(m, u);
    float *p = malloc(total * sizeof(float));
    size_t at = 0;
    for (int u = 0; u < sh.unit_end; u++) {
        memcpy(p + at, model_unit_params(m, u), model_unit_local_numel(m, u) * sizeof(float));
        at += model_unit_local_numel(m, u);
    }
    *params_out = p;
    free(tok), free(tgt), free(lab), free(img);
    data_close(d);
    optim_destroy(o);
    model_acts_destroy(a);
    model_destroy(m);
    return total;
}

/* The engine's steps in this process (RANK / WORLD_SIZE from the environment). */
static int engine_run(const job_spec *job, double *loss, const char *dump, size_t *params_peak)
{
    char err[512];
    int rc;
    engine *e = engine_create(job, &rc, err, sizeof err);
    if (!e) {
        printf("# engine_create: %s (exit %d)\n", err, rc);
        return rc ? rc : 1;
    }
    engine_begin_training(e);
    for (int step = 0; step < STEPS && rc == 0; step++) {
        double norm;
        rc = engine_grads(e, step, &loss[step], err, sizeof err);
        if (rc == 0) rc = engine_update(e, step, lr_at(&job->train, step), &norm, err, sizeof err);
    }
    double vl, acc;
    if (rc == 0) rc = engine_evaluate(e, &vl, &acc, err, sizeof err);
    if (rc == 0 && dump) rc = engine_dump_params(e, dump, err, sizeof err);
    if (rc) printf("# engine: %s\n", err);
    if (params_peak) *params_peak = acct_peak(engine_account(e), ACCT_PARAMS);
    engine_destroy(e);
    return rc;
}

static float *read_floats(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    rewind(f);
    float *p = malloc(bytes > 0 ? (size_t)bytes : 1);
    *n = fread(p, sizeof(float), (size_t)bytes / sizeof(float), f);
    fclose(f);
    return p;
}

static void test_single(const char *name, const char *yaml, int graphs)
{
    job_spec job;
    char text[2048];
    snprintf(text, sizeof text, "%s", yaml);
    char *at = strstr(text, "threads: 1}");
    if (graphs && at) snprintf(at, sizeof text - (size_t)(at - text), "threads: 1, cuda_graphs: true}%s",
                               strstr(yaml, "threads: 1}") + strlen("threads: 1}"));
    if (load_job(&job, text, NULL) != 0 || job.train.cuda_graphs != graphs) {
        CHECK(0, "%s: job loads", name);
        return;
    }
    double want[STEPS], got[STEPS];
    float *ref;
    size_t n = reference(&job, want, &ref);
    char dump[] = "/tmp/dtrun-test-engine.XXXXXX";
    int fd = mkstemp(dump);
    close(fd);
    unsetenv("RANK"), unsetenv("WORLD_SIZE");
    dt_env_reload(); /* the environment is read once (runtime/env.h) */
    int rc = engine_run(&job, got, dump, NULL);
    CHECK(rc == 0, "%s: the engine trains %d steps in one process", name, STEPS);
    int same = rc == 0;
    for (int s = 0; s < STEPS && same; s++) same = got[s] == want[s];
    CHECK(same, "%s: every step's loss equals the plain loop's bit for bit (%.9f vs %.9f at step %d)", name,
          got[STEPS - 1], want[STEPS - 1], STEPS);
    size_t m = 0;
    float *p = read_floats(dump, &m);
    CHECK(p && m == n && memcmp(p, ref, n * sizeof(float)) == 0,
          "%s: the dumped parameters equal the plain loop's bit for bit (%zu floats)", name, n);
    free(p), free(ref);
    unlink(dump);
}

/* world ranks forked over a file store; each writes "loss0 .. lossN" to DIR/rank.txt. */
static int run_forked(const char *yaml, const char *parallel, int world, const char *dir, size_t *peak0)
{
    job_spec job;
    if (load_job(&job, yaml, parallel) != 0) return -1;
    char store[600];
    snprintf(store, sizeof store, "%s/store", dir);
    mkdir(store, 0700);
    pid_t pid[8];
    for (int r = 0; r < world; r++) {
        if ((pid[r] = fork()) == 0) {
            char v[700];
            snprintf(v, sizeof v, "%d", r);
            setenv("RANK", v, 1), setenv("LOCAL_RANK", v, 1);
            snprintf(v, sizeof v, "%d", world);
            setenv("WORLD_SIZE", v, 1), setenv("LOCAL_WORLD_SIZE", v, 1);
            snprintf(v, sizeof v, "file:%s", store);
            setenv("DTRUN_STORE", v, 1);
            dt_env_reload();
            double loss[STEPS];
            char dump[700];
            snprintf(dump, sizeof dump, "%s/params.bin", dir);
            size_t peak = 0;
            int rc = engine_run(&job, loss, dump, &peak);
            snprintf(v, sizeof v, "%s/%d.txt", dir, r);
            FILE *f = fopen(v, "w");
            for (int s = 0; f && s < STEPS; s++) fprintf(f, "%.17g\n", loss[s]);
            if (f) fprintf(f, "%zu\n", peak);
            if (f) fclose(f);
            _exit(rc);
        }
    }
    int ok = 0;
    for (int r = 0; r < world; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = -1;
    }
    if (peak0) {
        char path[700];
        snprintf(path, sizeof path, "%s/0.txt", dir);
        FILE *f = fopen(path, "r");
        double x;
        for (int s = 0; f && s < STEPS; s++)
            if (fscanf(f, "%lf", &x) != 1) break;
        if (!f || fscanf(f, "%zu", peak0) != 1) *peak0 = 0;
        if (f) fclose(f);
    }
    return ok;
}

static void test_layout(const char *name, const char *yaml, const char *parallel, int world)
{
    job_spec job;
    load_job(&job, yaml, NULL);
    double want[STEPS];
    float *ref;
    size_t n = reference(&job, want, &ref);
    char dir[] = "/tmp/dtrun-test-engine.XXXXXX";
    if (!mkdtemp(dir)) return;
    int rc = run_forked(yaml, parallel, world, dir, NULL);
    CHECK(rc == 0, "%s: %d ranks train", name, world);
    double worst = 0;
    int agree = rc == 0;
    for (int r = 0; r < world && rc == 0; r++) {
        char path[700];
        snprintf(path, sizeof path, "%s/%d.txt", dir, r);
        FILE *f = fopen(path, "r");
        for (int s = 0; f && s < STEPS; s++) {
            double x = NAN;
            if (fscanf(f, "%lf", &x) != 1) agree = 0;
            double d = fabs(x - want[s]) / fabs(want[s]);
            if (!(d <= worst)) worst = d;
        }
        if (!f) agree = 0;
        else fclose(f);
    }
    CHECK(agree && worst <= 1e-5, "%s: every rank's loss equals one process's (worst relative %.2g)", name, worst);
    char path[700];
    snprintf(path, sizeof path, "%s/params.bin", dir);
    size_t m = 0;
    float *p = read_floats(path, &m);
    double pd = 0;
    for (size_t i = 0; p && m == n && i < n; i++)
        if (fabs(p[i] - ref[i]) > pd) pd = fabs(p[i] - ref[i]);
    CHECK(p && m == n && pd <= 1e-4, "%s: dumped parameters equal one process's (max diff %.2g)", name, pd);
    free(p), free(ref);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
}

static void test_fsdp_memory(void)
{
    char dir[] = "/tmp/dtrun-test-engine.XXXXXX";
    if (!mkdtemp(dir)) return;
    size_t one = 0, two = 0;
    char sub[700];
    snprintf(sub, sizeof sub, "%s/one", dir);
    mkdir(sub, 0700);
    int rc = run_forked(gpt_yaml, "parallel: {dp: 1}\n", 1, sub, &one);
    snprintf(sub, sizeof sub, "%s/two", dir);
    mkdir(sub, 0700);
    rc |= run_forked(gpt_yaml, "parallel: {dp: 2, mode: fsdp}\n", 2, sub, &two);
    CHECK(rc == 0 && one > 0 && two * 2 >= one && two * 2 <= one + 4 * 64 * sizeof(float),
          "fsdp dp=2: rank 0's parameter peak %zu is half of one process's %zu", two, one);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
}

int main(void)
{
    setenv("OPENBLAS_CORETYPE", "Haswell", 0);
    test_single("gpt", gpt_yaml, 0);
    test_single("vit", vit_yaml, 0);
    test_single("gpt cuda_graphs", gpt_yaml, 1);
    test_single("vit cuda_graphs", vit_yaml, 1);
    test_layout("gpt dp=2 ddp", gpt_yaml, "parallel: {dp: 2}\n", 2);
    test_layout("gpt dp=2 zero1", gpt_yaml, "parallel: {dp: 2, mode: zero1}\n", 2);
    test_layout("gpt dp=2 zero2", gpt_yaml, "parallel: {dp: 2, mode: zero2, bucket_mb: 1}\n", 2);
    test_layout("gpt dp=2 fsdp", gpt_yaml, "parallel: {dp: 2, mode: fsdp}\n", 2);
    test_layout("vit dp=2 fsdp", vit_yaml, "parallel: {dp: 2, mode: fsdp}\n", 2);
    test_layout("gpt tp=2", gpt_yaml, "parallel: {tp: 2}\n", 2);
    test_layout("gpt pp=2 1f1b", gpt_yaml, "parallel: {pp: 2, pp_schedule: 1f1b}\n", 2);
    test_layout("gpt dp=2 pp=2 zero2", gpt_yaml, "parallel: {dp: 2, pp: 2, mode: zero2}\n", 4);
    test_fsdp_memory();
    CHECK_DONE();
}
