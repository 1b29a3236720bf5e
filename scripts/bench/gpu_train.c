/* gpu_train.c — dtrun's side of scripts/bench/gpu.sh: GPT training steps
 * (forward, backward, AdamW) on the CUDA backend, one GPU, synthetic tokens.
 *
 * It drives the model through runtime/model/model.h with ops = dt_ops_cuda(),
 * because the trainer (runtime/worker/engine.c) still always picks the CPU
 * table; once `dtrun` selects the CUDA backend itself, gpu.sh should time the
 * real binary instead.
 *
 *   gpu_train --model 124m|350m [--batch B] [--seq T] [--steps N] [--warmup W] [--tf32]
 *
 * Prints one JSON line: tokens/s (median over the timed steps), step time,
 * model FLOPs per token (model_flops_per_sample / T, the formula the dry-run
 * uses), and the precision actually used: "fp32" (the backend has no bf16
 * path yet) or "tf32". Exit 2: no CUDA device; 3: out of device memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/ops_cuda.h"
#include "kernels/ops.h"
#include "runtime/model/model.h"
#include "runtime/rng.h"
#include "runtime/optim/optim.h"

#ifdef DTRUN_CUDA
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(void) {
    fprintf(stderr, "usage: gpu_train --model 124m|350m [--batch B] [--seq T] [--steps N] "
                    "[--warmup W] [--tf32]\n");
    exit(1);
}

int main(int argc, char **argv) {
    const char *name = "124m";
    int B = 0, T = 1024, steps = 10, warmup = 3, tf32 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) name = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seq") && i + 1 < argc) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tf32")) tf32 = 1;
        else usage();
    }
    job_model s;
    memset(&s, 0, sizeof s);
    s.kind = MODEL_GPT;
    s.vocab_size = 50257;
    s.seq_len = T;
    if (!strcmp(name, "124m")) {
        s.n_layer = 12; s.n_head = 12; s.d_model = 768;
        if (!B) B = 16;
    } else if (!strcmp(name, "350m")) {
        s.n_layer = 24; s.n_head = 16; s.d_model = 1024;
        if (!B) B = 8;
    } else {
        usage();
    }
    s.d_ff = 4 * s.d_model;
    if (B <= 0 || T <= 0 || steps <= 0 || warmup < 0) usage();

    const dt_ops *ops = dt_ops_cuda();
    if (!ops) {
        fprintf(stderr, "gpu_train: no CUDA device (or the CUDA backend is not built)\n");
        return 2;
    }
    dt_ops_cuda_set_tf32(tf32);
    model_shard sh = {.tp_rank = 0, .tp_size = 1, .unit_begin = 0, .unit_end = s.n_layer + 2};
    model *m = model_create(&s, &sh, ops, RECOMPUTE_NONE);
    model_acts *a = m ? model_acts_create(m, B) : NULL;
    job_train t;
    memset(&t, 0, sizeof t);
    t.beta1 = 0.9; t.beta2 = 0.95; t.eps = 1e-8; t.weight_decay = 0.1;
    optim *o = a ? optim_create(m, ops, &t, NULL, NULL) : NULL;
    if (!o) {
        fprintf(stderr, "gpu_train: out of device memory for GPT-2 %s at B=%d T=%d (activations "
                        "%.1f GiB); try a smaller --batch\n", name, B, T,
                model_acts_bytes(&s, &sh, B, RECOMPUTE_NONE) / 1073741824.0);
        return 3;
    }
    model_init_params(m, 42);

    size_t N = (size_t)B * T;
    int *tok = malloc(N * sizeof(int)), *tgt = malloc(N * sizeof(int));
    uint64_t key = rng_key(7, "gpu-bench-tokens");
    for (size_t i = 0; i < N; i++) {
        tok[i] = (int)rng_below(key, i, (uint64_t)s.vocab_size);
        tgt[i] = (int)rng_below(key, N + i, (uint64_t)s.vocab_size);
    }
    model_batch mb = {.B = B, .tokens = tok, .targets = tgt};
    double *dt = malloc((size_t)steps * sizeof(double));
    double loss = 0;
    for (int k = 0; k < warmup + steps; k++) {
        dt_ops_cuda_synchronize();
        double t0 = now_s();
        model_zero_grads(m);
        loss = model_forward(m, a, &mb, NULL) / (double)N;
        model_backward(m, a, &mb, 1.0f / (float)N);
        optim_step(o, 3e-4, k + 1, NULL, NULL, 1.0f);
        dt_ops_cuda_synchronize();
        if (k >= warmup) dt[k - warmup] = now_s() - t0;
    }
    qsort(dt, (size_t)steps, sizeof(double), cmp_double);
    double med = dt[steps / 2];
    double flops_tok = model_flops_per_sample(&s, RECOMPUTE_NONE) / T;
    printf("{\"impl\":\"dtrun\",\"model\":\"gpt2-%s\",\"B\":%d,\"T\":%d,\"precision\":\"%s\","
           "\"device\":\"%s\",\"step_ms\":%.3f,\"tokens_per_s\":%.1f,\"flops_per_token\":%.6e,"
           "\"loss\":%.4f,\"acts_gib\":%.2f}\n",
           name, B, T, tf32 ? "tf32" : "fp32", dt_ops_cuda_device_name(), med * 1e3,
           (double)N / med, flops_tok, loss,
           model_acts_bytes(&s, &sh, B, RECOMPUTE_NONE) / 1073741824.0);
    free(dt); free(tok); free(tgt);
    optim_destroy(o);
    model_acts_destroy(a);
    model_destroy(m);
    return 0;
}
#else
int main(void) {
    fprintf(stderr, "gpu_train: built without the CUDA backend (needs nvcc and NCCL, CUDA != 0)\n");
    return 2;
}
#endif
