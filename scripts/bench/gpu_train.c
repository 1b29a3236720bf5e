/* gpu_train.c — dtrun's side of scripts/bench/gpu.sh: training steps of the
 * real trainer (the worker engine, runtime/worker/engine.h, as `dtrun job.yaml`
 * runs it in one process) on one GPU with synthetic data, and what the dry-run
 * predicts for the same job next to what the run measured.
 *
 *   gpu_train --model PRESET [--batch B] [--steps N] [--warmup W]
 *             [--precision fp32|bf16] [--tf32] [--recompute none|block|selective]
 *             [--cuda-graphs] [--device cuda|cpu] [--hardware NAME|PATH] [--job OUT.yaml]
 *
 * PRESET: any model preset (dtrun-job(5)): gpt2-124m, gpt2-350m, vit-b16 (224 x
 * 224, patch 16, 1000 classes), ...; 124m and 350m stand for the GPT-2 ones.
 * Default batch: 16 (gpt2-124m), 8 (gpt2-350m), 64 (vit-*), else 8.
 *
 * The job is built in memory (model.preset, data synthetic, global_batch =
 * micro_batch = B, dp 1, constant lr) and loaded by the job loader, so it is
 * exactly a job file's; --job writes it (job_print) so that `dtrun --dry-run
 * OUT.yaml` and `dtrun OUT.yaml` reproduce both sides. --cuda-graphs sets
 * train.cuda_graphs (the step replayed as CUDA graphs from the second step
 * on; the row's impl is then "dtrun+graphs").
 *
 * Prints one JSON line on stdout (everything else goes to stderr):
 *   throughput  items_per_s (tokens for a GPT, images for a ViT; "unit"),
 *               median over the N timed steps after W warm-up steps; step_ms;
 *               flops_per_item = model_flops_per_sample / items per sample
 *               (the dry-run's formula, recompute not counted: MFU's model FLOPs);
 *               data_ms: the synthetic loader alone for one batch (the engine
 *               reads it on the step's critical path, so it is inside step_ms);
 *   memory      in bytes. mem_measured_b: the largest (total - free)
 *               cudaMemGetInfo saw after set-up and after every step: the whole
 *               GPU as the driver sees it, the CUDA context included (dtrun
 *               allocates at set-up and only grows its scratch, so a sample
 *               after each step sees its peak); mem_context_b: the same right
 *               after the context was made, before dtrun allocated anything;
 *               mem_accounted_b: the trainer's own peak (account.h);
 *               mem_predicted_b: the dry-run's total for the job on that
 *               hardware profile (plan_estimate_memory, the number `dtrun
 *               --dry-run` prints: sizes.h's bytes plus the profile's fixed
 *               overheads, mem_predicted_fixed_b); mem_ratio = measured /
 *               predicted; pred_items_per_s: the dry-run's throughput.
 * With --device cpu (to check this program on a machine without a GPU) no
 * driver measures anything: mem_measured_b and mem_ratio are null.
 *
 * Exit status: 0; 1 bad arguments or a failed step; 2 no CUDA device (or no
 * CUDA backend in this build); 3 out of device memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/job/jobspec.h"
#include "runtime/data/data.h"
#include "runtime/model/model.h"
#include "runtime/parallel/account.h"
#include "runtime/plan/estimate.h"
#include "runtime/plan/hardware.h"
#include "runtime/worker/engine.h"

#ifdef DTRUN_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/ops_cuda.h"
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void usage(void)
{
    fprintf(stderr, "usage: gpu_train --model PRESET [--batch B] [--steps N] [--warmup W] "
                    "[--precision fp32|bf16] [--tf32] [--recompute none|block|selective] [--cuda-graphs] "
                    "[--device cuda|cpu] [--hardware NAME|PATH] [--job OUT.yaml]\n");
    exit(1);
}

/* ---- the driver's view of the GPU (CUDA builds; NULL-safe elsewhere) ---- */

/* 0 with the bytes in use on the current device (total - free), -1 when
 * there is no driver to ask (CPU build or device). */
static int driver_used(int on_gpu, double *used)
{
#ifdef DTRUN_CUDA
    size_t free_b = 0, total_b = 0;
    if (on_gpu && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        *used = (double)(total_b - free_b);
        return 0;
    }
#else
    (void)on_gpu;
#endif
    *used = 0;
    return -1;
}

/* Make the context on device 0 (the one a single worker takes), so that what
 * it costs is measured before dtrun allocates. -1: no usable device. */
static int make_context(void)
{
#ifdef DTRUN_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) return -1;
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess) return -1;
    return 0;
#else
    return -1;
#endif
}

static void device_sync(int on_gpu)
{
#ifdef DTRUN_CUDA
    if (on_gpu) dt_ops_cuda_synchronize();
#else
    (void)on_gpu;
#endif
}

/* ---- the dry-run's view of the same job ---- */

typedef struct {
    int ok;
    char profile[HW_NAME_MAX];
    double total, fixed, items_per_s;
    char why[512];
} prediction;

static prediction predict(const job_spec *job, const char *hardware, const char *device_name)
{
    prediction p;
    memset(&p, 0, sizeof p);
    const char *what = hardware ? hardware : hw_profile_for_device(device_name);
    if (!what) {
        snprintf(p.why, sizeof p.why, "no hardware profile describes '%s' (pass --hardware)", device_name);
        return p;
    }
    hw_profile hw;
    if (hw_load(&hw, what, p.why, sizeof p.why) != 0) return p;
    plan_estimate e;
    if (plan_estimate_memory(&e, job, &hw, 1, 1, p.why, sizeof p.why) != 0) {
        plan_estimate_free(&e);
        return p;
    }
    p.total = e.stage[0].total;
    p.fixed = e.stage[0].fixed;
    if (plan_estimate_time(&e, p.why, sizeof p.why) == 0)
        p.items_per_s = job_model_is_lm(&job->model) ? e.tokens_per_s : e.samples_per_s;
    snprintf(p.profile, sizeof p.profile, "%s", hw.name);
    plan_estimate_free(&e);
    p.ok = 1;
    return p;
}

/* ---- the synthetic loader alone: ms for one batch of B samples (median of reps) ---- */
static double data_ms(const job_spec *job, int B, int reps)
{
    char why[512];
    data_loader *d = data_open(job, DATA_TRAIN, why, sizeof why);
    if (!d) return -1;
    const job_model *m = &job->model;
    int *tok = NULL, *tgt = NULL, *lab = NULL;
    float *img = NULL;
    if (job_model_is_lm(m)) {
        tok = malloc((size_t)B * m->seq_len * sizeof(int));
        tgt = malloc((size_t)B * m->seq_len * sizeof(int));
    } else {
        img = malloc((size_t)B * m->channels * m->image_size * m->image_size * sizeof(float));
        lab = malloc((size_t)B * sizeof(int));
    }
    double *t = malloc((size_t)reps * sizeof *t), ms = -1;
    if (t && ((tok && tgt) || (img && lab))) {
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            data_batch(d, r, 0, B, tok, tgt, img, lab);
            t[r] = now_s() - t0;
        }
        ms = median(t, reps) * 1e3;
    }
    free(t);
    free(tok);
    free(tgt);
    free(img);
    free(lab);
    data_close(d);
    return ms;
}

int main(int argc, char **argv)
{
    const char *name = "gpt2-124m", *prec = "fp32", *recompute = "none", *device = "cuda";
    const char *hardware = NULL, *job_out = NULL;
    int B = 0, steps = 10, warmup = 3, tf32 = 0, graphs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--tf32")) { tf32 = 1; continue; }
        if (!strcmp(a, "--cuda-graphs")) { graphs = 1; continue; }
        if (!v) usage();
        if (!strcmp(a, "--model")) name = v;
        else if (!strcmp(a, "--batch")) B = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--warmup")) warmup = atoi(v);
        else if (!strcmp(a, "--precision")) prec = v;
        else if (!strcmp(a, "--recompute")) recompute = v;
        else if (!strcmp(a, "--device")) device = v;
        else if (!strcmp(a, "--hardware")) hardware = v;
        else if (!strcmp(a, "--job")) job_out = v;
        else usage();
        i++;
    }
    if (!strcmp(name, "124m")) name = "gpt2-124m";
    if (!strcmp(name, "350m")) name = "gpt2-350m";
    if (!B) B = !strcmp(name, "gpt2-124m") ? 16 : !strncmp(name, "vit", 3) ? 64 : 8;
    if (B <= 0 || steps <= 0 || warmup < 0) usage();
    if (strcmp(prec, "fp32") && strcmp(prec, "bf16")) usage();
    if (strcmp(device, "cuda") && strcmp(device, "cpu")) usage();
    if (tf32 && strcmp(prec, "fp32")) {
        fprintf(stderr, "gpu_train: --tf32 is for fp32 runs (bf16 has its own GEMM path)\n");
        return 1;
    }
    int on_gpu = !strcmp(device, "cuda");

    /* the job, as a file would give it */
    char text[1024];
    snprintf(text, sizeof text,
             "model: {preset: %s}\n"
             "data: {kind: synthetic}\n"
             "train: {steps: %d, global_batch: %d, micro_batch: %d, lr: 3.0e-4, schedule: constant,\n"
             "        warmup: 0, weight_decay: 0.1, grad_clip: 1.0, precision: %s, recompute: %s,\n"
             "        device: %s, seed: 42, cuda_graphs: %s}\n"
             "parallel: {dp: 1}\n"
             "log: {progress: off}\n",
             name, warmup + steps, B, B, prec, recompute, device, graphs ? "true" : "false");
    job_spec job;
    char err[1024];
    if (job_load_string(&job, text, strlen(text), "gpu_train", err, sizeof err) != 0) {
        fprintf(stderr, "gpu_train: %s\n", err);
        return 1;
    }
    if (job_out) {
        FILE *f = fopen(job_out, "w");
        if (!f) {
            fprintf(stderr, "gpu_train: --job %s: cannot write it\n", job_out);
            return 1;
        }
        job_print(&job, f);
        fclose(f);
    }
    const job_model *spec = &job.model;
    int gpt = job_model_is_lm(spec), seq = model_seq_len(spec);
    double per_sample = gpt ? seq : 1;

    double ctx_used = 0;
    if (on_gpu) {
        if (make_context() != 0) {
            fprintf(stderr, "gpu_train: no CUDA device (or the CUDA backend is not built)\n");
            return 2;
        }
        driver_used(on_gpu, &ctx_used);
#ifdef DTRUN_CUDA
        dt_ops_cuda_set_tf32(tf32);
#endif
    }

    int code = 0;
    engine *e = engine_create(&job, &code, err, sizeof err);
    if (!e) {
        fprintf(stderr, "gpu_train: %s\n", err);
        if (strstr(err, "out of memory")) {
            fprintf(stderr, "gpu_train: %s at B=%d does not fit: try a smaller --batch\n", name, B);
            return 3;
        }
        return strstr(err, "CUDA") || strstr(err, "cuda") ? 2 : 1;
    }
    double peak_used = 0, used = 0;
    if (driver_used(on_gpu, &used) == 0 && used > peak_used) peak_used = used;
    engine_begin_training(e);
    double *dt = malloc((size_t)steps * sizeof *dt), loss = 0, norm = 0;
    for (int k = 0; k < warmup + steps; k++) {
        device_sync(on_gpu);
        double t0 = now_s();
        int rc = engine_grads(e, k, &loss, err, sizeof err);
        if (rc == 0) rc = engine_update(e, k, 3e-4, &norm, err, sizeof err);
        device_sync(on_gpu);
        double t1 = now_s();
        if (rc != 0) {
            fprintf(stderr, "gpu_train: step %d: %s\n", k, err);
            return 1;
        }
        if (k >= warmup) dt[k - warmup] = t1 - t0;
        if (driver_used(on_gpu, &used) == 0 && used > peak_used) peak_used = used;
    }
    double med = median(dt, steps);
    double accounted = (double)acct_peak_total(engine_account(e));
    char dev_name[256];
    snprintf(dev_name, sizeof dev_name, "%s", engine_device_name(e));
    engine_destroy(e);

    prediction p = predict(&job, hardware, dev_name);
    if (!p.ok) fprintf(stderr, "gpu_train: no dry-run prediction: %s\n", p.why);
    double dms = data_ms(&job, B, 3);
    const char *prec_used = tf32 ? "tf32" : prec;

    printf("{\"impl\":\"%s\",\"model\":\"%s\",\"kind\":\"%s\",\"B\":%d,\"T\":%d,\"precision\":\"%s\","
           "\"device\":\"%s\",\"step_ms\":%.3f,\"items_per_s\":%.1f,\"unit\":\"%s\",\"flops_per_item\":%.6e,"
           "\"loss\":%.4f,\"data_ms\":%.2f,",
           graphs ? "dtrun+graphs" : "dtrun", name, gpt ? "gpt" : "vit", B, seq, prec_used, dev_name, med * 1e3, B * per_sample / med,
           gpt ? "tok" : "img", model_flops_per_sample(spec, RECOMPUTE_NONE) / per_sample, loss, dms);
    /* memory in bytes: the table turns them into GiB */
    if (on_gpu && peak_used > 0)
        printf("\"mem_measured_b\":%.0f,\"mem_context_b\":%.0f,", peak_used, ctx_used);
    else
        printf("\"mem_measured_b\":null,\"mem_context_b\":null,");
    printf("\"mem_accounted_b\":%.0f,", accounted);
    if (p.ok) {
        printf("\"hardware\":\"%s\",\"mem_predicted_b\":%.0f,\"mem_predicted_fixed_b\":%.0f,"
               "\"pred_items_per_s\":%.1f,",
               p.profile, p.total, p.fixed, p.items_per_s);
        if (on_gpu && peak_used > 0) printf("\"mem_ratio\":%.3f,", peak_used / p.total);
        else printf("\"mem_ratio\":null,");
    } else {
        printf("\"hardware\":null,\"mem_predicted_b\":null,\"mem_predicted_fixed_b\":null,"
               "\"pred_items_per_s\":null,\"mem_ratio\":null,");
    }
    printf("\"job\":\"%s\"}\n", job_out ? job_out : "");
    free(dt);
    return 0;
}
