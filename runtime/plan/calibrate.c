/* calibrate.c — see calibrate.h. */
#include "runtime/plan/calibrate.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "lib/util/clock.h"
#include "lib/util/errline.h"
#include "lib/util/exit_codes.h"
#include "runtime/plan/hardware.h"

#define N_DIMS 7
static const int DIMS[N_DIMS] = {16, 32, 64, 128, 256, 512, 1024};
#define N_KEYS 5
static const int KEYS[N_KEYS] = {64, 128, 256, 512, 1024};
enum { GEMM_ROWS = 1024, MEM_ROWS = 2048, MEM_COLS = 256, TRIALS = 5 };
enum { ATTN_HEAD = 64, ATTN_HEADS = 4, ATTN_TOKENS = 2048 };
#define TRIAL_SECONDS 0.1
#define COLD_BYTES (64.0 * 1024 * 1024)
enum { MAX_SETS = 256 };

/* One measurement: a linear layer's three products of [rows, ic] x [ic, oc]
 * (B_GEMM); the memory-bound ops of a GPT block of width oc on rows tokens
 * (B_MEM); the fused causal attention core, forward and backward, over rows
 * keys (B_ATTN: heads oc of size ic, ATTN_TOKENS / rows samples). */
typedef enum { B_GEMM, B_MEM, B_ATTN } bench_kind;
typedef struct {
    bench_kind kind;
    int rows, ic, oc;
} bench;

typedef struct {
    float *in, *w, *out, *dout, *din, *dw; /* gemm; memory ops: [rows, C]; attention: qkv, kv, out, dout, dqkv, dkv */
    float *wide, *dwide, *wide_out;        /* memory ops: [rows, 4C] (the MLP's hidden width) */
    float *mean, *rstd, *gamma, *beta, *dgamma, *dbeta; /* attention: mean holds the log-sum-exp */
} bufs;

static void bufs_free(bufs *x)
{
    free(x->in), free(x->w), free(x->out), free(x->dout), free(x->din), free(x->dw);
    free(x->wide), free(x->dwide), free(x->wide_out);
    free(x->mean), free(x->rstd), free(x->gamma), free(x->beta), free(x->dgamma), free(x->dbeta);
    memset(x, 0, sizeof *x);
}

static int attn_samples(const bench *b)
{
    return b->rows < ATTN_TOKENS ? ATTN_TOKENS / b->rows : 1;
}

static float *filled(size_t n, float v)
{
    float *p = malloc(n * sizeof *p);
    if (p)
        for (size_t i = 0; i < n; i++) p[i] = v * (float)((i * 2654435761u) % 1000) / 1000.0f;
    return p;
}

static int bufs_alloc(const bench *b, bufs *x)
{
    memset(x, 0, sizeof *x);
    size_t r = (size_t)b->rows, ic = (size_t)b->ic, oc = (size_t)b->oc;
    if (b->kind == B_ATTN) {
        size_t n = (size_t)attn_samples(b) * r, C = ic * oc;
        x->in = filled(n * 3 * C, 1), x->w = filled(n * 2 * C, 1), x->out = filled(n * C, 0);
        x->dout = filled(n * C, 0.1f), x->din = filled(n * 3 * C, 0), x->dw = filled(n * 2 * C, 0);
        x->mean = filled(n * oc, 0);
        return x->in && x->w && x->out && x->dout && x->din && x->dw && x->mean ? 0 : -1;
    }
    if (b->kind == B_GEMM) {
        x->in = filled(r * ic, 1), x->w = filled(oc * ic, 0.01f), x->out = filled(r * oc, 0);
        x->dout = filled(r * oc, 0.1f), x->din = filled(r * ic, 0), x->dw = filled(oc * ic, 0);
        return x->in && x->w && x->out && x->dout && x->din && x->dw ? 0 : -1;
    }
    x->in = filled(r * oc, 1), x->out = filled(r * oc, 0), x->dout = filled(r * oc, 0.5f), x->din = filled(r * oc, 0);
    x->wide = filled(4 * r * oc, 1), x->dwide = filled(4 * r * oc, 0), x->wide_out = filled(4 * r * oc, 0);
    x->mean = filled(r, 0), x->rstd = filled(r, 0), x->gamma = filled(oc, 1), x->beta = filled(oc, 0);
    x->dgamma = filled(oc, 0), x->dbeta = filled(oc, 0);
    return x->in && x->out && x->dout && x->din && x->wide && x->dwide && x->wide_out && x->mean && x->rstd &&
                   x->gamma && x->beta && x->dgamma && x->dbeta
               ? 0
               : -1;
}

/* FLOPs (gemm, attention) or the bytes the step-time model counts (memory
 * ops) of once. Memory ops: sizes.c's count for a block's forward, 10 [rows,
 * C] (two norms, two residual adds) + 8 [rows, C] (the heads' split and merge)
 * + 2 [rows, 4C] (GELU), and its backward, twice that. Attention: what
 * step_time.c charges the fused causal core at attention_efficiency, the
 * model's forward count 4 B T^2 C (QK^T and AV) and backward twice that, plus
 * the backward's recomputed scores (half a forward), all times the causal
 * share (T + 1) / 2T of score-value pairs the tiles compute. */
static double bench_units(const bench *b)
{
    if (b->kind == B_GEMM) return 6.0 * b->rows * b->ic * b->oc;
    if (b->kind == B_ATTN) {
        double T = b->rows, fwd = 4.0 * attn_samples(b) * T * T * b->ic * b->oc;
        return (T + 1.0) / (2.0 * T) * 3.5 * fwd;
    }
    return 3.0 * (10.0 + 8.0 + 2.0 * 4.0) * 4.0 * b->rows * b->oc;
}

/* Bytes of one set of a bench's buffers. */
static double bench_bytes(const bench *b)
{
    double r = b->rows, ic = b->ic, oc = b->oc;
    if (b->kind == B_ATTN) return 4.0 * attn_samples(b) * r * ic * oc * 11.0;
    if (b->kind == B_GEMM) return 4.0 * (2.0 * r * ic + 2.0 * r * oc + 2.0 * ic * oc);
    return 4.0 * (4.0 * r * oc + 12.0 * r * oc);
}

/* A training step meets its operands cold: between a layer's forward and its
 * backward every other layer's activations and weights passed through the
 * caches. So each thread cycles through enough copies of the buffers to
 * overflow them (COLD_BYTES), not one copy that stays in L2. */
static int bench_sets(const bench *b)
{
    int n = (int)ceil(COLD_BYTES / bench_bytes(b));
    return n < 1 ? 1 : n > MAX_SETS ? MAX_SETS : n;
}

static void bench_once(const dt_ops *ops, const bench *b, bufs *x)
{
    if (b->kind == B_ATTN) { /* the model's fused path: local_layers.c's fused_forward / fused_backward */
        int B = attn_samples(b), T = b->rows, NH = b->oc, C = b->ic * b->oc;
        ops->attention_block_forward(x->out, x->mean, x->in, x->w, NULL, NULL, B, T, T, T, C, NH, NH, 1, 0, DT_F32, DT_F32);
        ops->attention_block_backward(x->din, x->dw, x->dout, x->out, x->mean, x->in, x->w, NULL, NULL, B, T, T, T, C,
                                      NH, NH, 1, 0, DT_F32);
        return;
    }
    if (b->kind == B_GEMM) {
        ops->matmul_forward(x->out, x->in, x->w, NULL, b->rows, b->ic, b->oc, DT_F32, DT_F32);
        ops->matmul_backward(x->din, x->dw, NULL, x->dout, x->in, x->w, b->rows, b->ic, b->oc, DT_F32);
        return;
    }
    /* one block's memory-bound ops, forward then backward */
    size_t n = (size_t)b->rows * b->oc, bytes = n * sizeof(float);
    for (int i = 0; i < 2; i++) {
        ops->layernorm_forward(x->out, x->mean, x->rstd, x->in, x->gamma, x->beta, b->rows, b->oc, 1e-5f, DT_F32);
        ops->residual_forward(x->din, x->in, x->out, n, DT_F32);
    }
    for (int i = 0; i < 4; i++) ops->copy(i % 2 ? x->out : x->din, i % 2 ? x->din : x->out, bytes);
    ops->gelu_forward(x->wide_out, x->wide, 4 * n, DT_F32);
    for (int i = 0; i < 2; i++) {
        ops->layernorm_backward(x->din, x->dgamma, x->dbeta, x->dout, x->in, x->gamma, x->mean, x->rstd, b->rows,
                                b->oc, DT_F32);
        ops->residual_backward(x->out, x->din, x->dout, n);
    }
    for (int i = 0; i < 4; i++) ops->copy(i % 2 ? x->out : x->din, i % 2 ? x->din : x->out, bytes);
    ops->gelu_backward(x->dwide, x->wide, x->wide_out, 4 * n, DT_F32);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Units per second over all cores at once (each thread single-threaded, its
 * own buffers cycling through cold copies), the median of TRIALS: what a
 * typical step pays, as the run's median step is what it is compared with
 * (the best trial is this VM's lucky moment, 10-20 % above it); 0 when
 * buffers could not be had. Each
 * thread's rate is over the CPU time it got, not the wall clock: another
 * process taking a share of the cores lengthens the wall time, not the CPU
 * time the work needs (what it takes of the caches and the memory bandwidth
 * still lowers the figure). *wall_rate: the same by the wall clock. */
static double measure(const bench *b, int cores, double *wall_rate)
{
    const dt_ops *ops = &dt_ops_cpu;
    double rates[TRIALS] = {0}, walls[TRIALS] = {0}, t0 = 0;
    long iters = 1;
    int failed = 0;
    *wall_rate = 0;
#pragma omp parallel num_threads(cores) shared(t0, iters, failed, rates, walls)
    {
        omp_set_num_threads(1); /* this thread's own ops run single-threaded */
        bufs x[MAX_SETS];
        int nx = bench_sets(b), got = 0;
        for (; got < nx; got++)
            if (bufs_alloc(b, &x[got])) break;
        if (got < nx) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp barrier
        if (!failed) {
            for (int k = 0; k < nx; k++) bench_once(ops, b, &x[k]); /* pages touched */
            double w0 = thread_cpu_s();
            for (int k = 0; k < nx; k++) bench_once(ops, b, &x[k]);
            double dt = (thread_cpu_s() - w0) / nx;
#pragma omp master
            {
                iters = dt > 0 ? (long)ceil(TRIAL_SECONDS / dt) : 1000;
                if (iters < 1) iters = 1;
            }
            for (int trial = 0; trial < TRIALS; trial++) {
#pragma omp barrier
#pragma omp master
                t0 = clock_now_s();
#pragma omp barrier
                double c0 = thread_cpu_s();
                for (long i = 0; i < iters; i++) bench_once(ops, b, &x[i % nx]);
                double mine = thread_cpu_s() - c0;
#pragma omp atomic update
                rates[trial] += mine > 0 ? (double)iters * bench_units(b) / mine : 0;
#pragma omp barrier
#pragma omp master
                {
                    double t1 = clock_now_s();
                    walls[trial] = t1 > t0 ? cores * (double)iters * bench_units(b) / (t1 - t0) : 0;
                }
            }
        }
        for (int k = 0; k < got; k++) bufs_free(&x[k]);
    }
    if (failed) return 0;
    *wall_rate = median_of(walls, TRIALS);
    return median_of(rates, TRIALS);
}

/* The profile's name: the file's name without its folder and .yaml. */
static void name_of(const char *path, char *out, size_t n)
{
    if (!strcmp(path, "-")) {
        snprintf(out, n, "cpu-calibrated");
        return;
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strlen(base);
    if (len > 5 && !strcmp(base + len - 5, ".yaml")) len -= 5;
    snprintf(out, n, "%.*s", (int)len, base);
}

static int write_profile(FILE *f, const char *name, const hw_profile *base, const char *base_path, int cores,
                         double peak, const double *rate, const double *attn, double mem_rate, const char *when, const char *host,
                         double load)
{
    fprintf(f,
            "# %s.yaml, written by `dtrun --calibrate` (runtime/plan/calibrate.h): the CPU backend of\n"
            "# %s measured on %s with its %d cores busy at once, load average %.2f (rates per\n"
            "# CPU second of each thread: other processes' share of the cores does not lower\n"
            "# them, what they take of the caches and memory bandwidth does).\n"
            "# peak_fp32_tflops: the best d's rate of a linear layer's three fp32 products\n"
            "# ([%d, d] x [d, 2d]: output, input gradient, weight gradient; OpenBLAS\n"
            "# through the ops table, one single-threaded worker per core); gemm_efficiency:\n"
            "# each d's rate over it. attention_efficiency: the fused causal attention\n"
            "# core (heads of %d, forward and backward) by the keys a call sees, over the\n"
            "# FLOPs the step-time model charges it, as a fraction of the peak.\n"
            "# memory_bandwidth_gbs: the memory-bound ops of a GPT block\n"
            "# (d %d, %d tokens: layernorms, residual adds, the heads' copies, GELU; forward\n"
            "# and backward), by the bytes the step-time model counts for them.\n"
            "# Links, latencies and overheads: %s.\n",
            name, host, when, cores, load, GEMM_ROWS, ATTN_HEAD, MEM_COLS, MEM_ROWS,
            base_path ? base_path : "dtrun's defaults (no cpu profile found)");
    fprintf(f, "name: %s\n", name);
    fprintf(f, "description: the CPU backend on %s as dtrun --calibrate measured it\n", host);
    fprintf(f, "calibrated: \"%s, %s, %d cores, load %.2f\"\n", host, when, cores, load);
    fprintf(f, "device: cpu\n");
    fprintf(f, "peak_bf16_tflops: 0\n");
    fprintf(f, "peak_fp32_tflops: %.6f\n", peak / 1e12);
    fprintf(f, "memory_mib: 0                  # 0 = this host's physical memory\n");
    fprintf(f, "memory_bandwidth_gbs: %.4g\n", mem_rate / 1e9);
    fprintf(f, "memory_efficiency: 1\n");
    fprintf(f, "intra_node_gbs: %.6g\n", base->intra_bw / 1e9);
    fprintf(f, "inter_node_gbs: %.6g\n", base->inter_bw / 1e9);
    fprintf(f, "intra_node_latency_us: %.6g\n", base->intra_latency * 1e6);
    fprintf(f, "inter_node_latency_us: %.6g\n", base->inter_latency * 1e6);
    fprintf(f, "gpus_per_node: 0               # 0 = this host's cores\n");
    fprintf(f, "cuda_context_mib: 0\nnccl_mib: 0\ncublas_workspace_mib: 0\n");
    fprintf(f, "headroom_percent: %.6g\n", 100 * base->headroom_fraction);
    fprintf(f, "gemm_efficiency:               # smallest GEMM dimension: fraction of peak_fp32_tflops\n");
    for (int i = 0; i < N_DIMS; i++) {
        double frac = rate[i] / peak;
        if (frac < 1e-3) frac = 1e-3;
        fprintf(f, "  %d: %.4f\n", DIMS[i], frac > 1 ? 1.0 : frac);
    }
    fprintf(f, "attention_efficiency:          # keys per call: fraction of peak_fp32_tflops\n");
    for (int i = 0; i < N_KEYS; i++) {
        double frac = attn[i] / peak;
        if (frac < 1e-3) frac = 1e-3;
        fprintf(f, "  %d: %.4f\n", KEYS[i], frac > 1 ? 1.0 : frac);
    }
    return ferror(f) ? -1 : 0;
}

int plan_calibrate(const char *path, FILE *log, char *err, size_t errlen)
{
    if (!path || !*path) {
        errline(err, errlen, "--calibrate needs the profile to write (a .yaml path, or - for stdout)");
        return DT_EXIT_USAGE;
    }
    char name[HW_NAME_MAX];
    name_of(path, name, sizeof name);
    if (!*name) {
        errline(err, errlen, "--calibrate %s: no file name to call the profile by", path);
        return DT_EXIT_USAGE;
    }
    /* the file first: a path that cannot be written fails before a minute of measuring */
    int to_stdout = !strcmp(path, "-");
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = to_stdout ? stdout : fopen(tmp, "w");
    if (!f) {
        errline(err, errlen, "--calibrate: %s: cannot write (%s)", path, strerror(errno));
        return 1;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    int cores = n > 0 ? (int)n : 1;
    hw_profile base;
    char base_err[512];
    int have_base = hw_load(&base, "cpu", base_err, sizeof base_err) == 0;
    if (!have_base) { /* the shipped cpu profile's links, had it been found */
        memset(&base, 0, sizeof base);
        base.intra_bw = 5e9, base.inter_bw = 1.25e9, base.intra_latency = 2e-6, base.inter_latency = 50e-6;
        base.headroom_fraction = 0.05;
    }
    double rate[N_DIMS], peak = 0;
    for (int i = 0; i < N_DIMS; i++) {
        bench b = {B_GEMM, GEMM_ROWS, DIMS[i], 2 * DIMS[i]};
        double wall;
        rate[i] = measure(&b, cores, &wall);
        if (!(rate[i] > 0)) {
            errline(err, errlen, "--calibrate: no memory for the GEMM buffers of d %d", DIMS[i]);
            if (!to_stdout) fclose(f), remove(tmp);
            return 1;
        }
        if (rate[i] > peak) peak = rate[i];
        if (log)
            fprintf(log, "dtrun: calibrate: GEMM [%d, %d] x [%d, %d] x 3: %.1f GFLOP/s on %d cores (%.1f by the wall "
                         "clock)\n", GEMM_ROWS, DIMS[i], DIMS[i], 2 * DIMS[i], rate[i] / 1e9, cores, wall / 1e9);
    }
    bench mb = {B_MEM, MEM_ROWS, 0, MEM_COLS};
    double mem_wall, mem_rate = measure(&mb, cores, &mem_wall);
    if (!(mem_rate > 0)) {
        errline(err, errlen, "--calibrate: no memory for the memory-bound ops' buffers");
        if (!to_stdout) fclose(f), remove(tmp);
        return 1;
    }
    if (log)
        fprintf(log, "dtrun: calibrate: a block's memory-bound ops (d %d, %d tokens): %.1f GB/s on %d cores (%.1f by "
                     "the wall clock)\n", MEM_COLS, MEM_ROWS, mem_rate / 1e9, cores, mem_wall / 1e9);
    double attn[N_KEYS];
    for (int i = 0; i < N_KEYS; i++) {
        bench ab = {B_ATTN, KEYS[i], ATTN_HEAD, ATTN_HEADS};
        double wall;
        attn[i] = measure(&ab, cores, &wall);
        if (!(attn[i] > 0)) {
            errline(err, errlen, "--calibrate: no memory for the attention buffers of %d keys", KEYS[i]);
            if (!to_stdout) fclose(f), remove(tmp);
            return 1;
        }
        if (log)
            fprintf(log, "dtrun: calibrate: fused causal attention, %d keys (heads of %d), forward and backward: %.1f "
                         "GFLOP/s on %d cores (%.1f by the wall clock)\n", KEYS[i], ATTN_HEAD, attn[i] / 1e9, cores,
                    wall / 1e9);
    }
    char host[256] = "this host", when[64] = "";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "this host");
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (*c == '"' || *c == '\\' || *c == '\n') *c = '_';
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    double load = 0;
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf", &load) != 1) load = 0;
        fclose(la);
    }
    const char *base_path = have_base ? base.source : NULL;
    int bad = write_profile(f, name, &base, base_path, cores, peak, rate, attn, mem_rate, when, host, load);
    if (to_stdout) return bad || fflush(stdout) != 0 ? 1 : 0;
    if (fclose(f) != 0) bad = 1;
    hw_profile check;
    char why[1024];
    if (bad) errline(err, errlen, "--calibrate: %s: cannot write (%s)", path, strerror(errno));
    else if (hw_load_file(&check, tmp, why, sizeof why) != 0)
        bad = errline(err, errlen, "--calibrate: %s: the profile written does not load back (%s)", path, why);
    else if (rename(tmp, path) != 0)
        bad = errline(err, errlen, "--calibrate: %s: cannot write (%s)", path, strerror(errno));
    if (bad) {
        remove(tmp);
        return 1;
    }
    if (log)
        fprintf(log, "dtrun: calibrate: wrote %s (peak %.1f GFLOP/s, memory-bound ops %.1f GB/s); use it with "
                     "--hardware %s\n",
                path, peak / 1e9, mem_rate / 1e9, path);
    return 0;
}
