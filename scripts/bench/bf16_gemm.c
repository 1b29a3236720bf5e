/* bf16_gemm.c — which CPU GEMM should the bf16 twin use? (issue 13)
 *
 * bf16 mixed precision rounds a matmul's inputs to bf16 and accumulates in
 * fp32. On the CPU that can be done two ways, and this program times them
 * side by side with the fp32 baseline, on the GEMMs of a GPT linear layer:
 *   fp32     cblas_sgemm on the fp32 inputs (today's CPU path)
 *   convert  the inputs rounded to bf16 values held in fp32 (ops->round_bf16,
 *            in place), then cblas_sgemm: same memory, same kernel
 *   sbgemm   the inputs narrowed to uint16 bf16 (ops->to_bf16), then
 *            OpenBLAS's cblas_sbgemm (bf16 x bf16 -> fp32), when the library
 *            has it: looked up at run time, since Debian's OpenBLAS declares it
 *            in cblas.h but is built without BUILD_BFLOAT16. DTRUN_SBGEMM_LIB
 *            names another libopenblas.so to take it (and that library's own
 *            sgemm, timed too) from, loaded with RTLD_DEEPBIND so it keeps its
 *            own symbols beside Debian's.
 * Every way is timed as dtrun's CPU backend runs a GEMM (kernels/cpu/gemm.c):
 * OpenBLAS single-threaded, the product split into one slab of rows (or
 * columns) per OpenMP thread. Each way is timed without the conversion
 * (inputs already rounded: weights are rounded once per step and activations
 * where they are stored) and with it (both operands converted in the call:
 * the worst case). Times are the best of --reps, the ways interleaved within
 * each rep so load on this shared machine hits them alike.
 *
 * Agreement: the two bf16 ways multiply the same rounded values (a product of
 * two bf16 is exact in fp32), so they may differ only by the order of the fp32
 * accumulation. The difference is reported relative to the scale of that
 * rounding, sum_k |a_ik b_kj| (err = |c1 - c2| / sum_k |a_ik b_kj|, which
 * fp32 summation keeps below ~K * 2^-24 and typically ~sqrt(K) * 2^-24), and
 * as max |c1 - c2| / max |c|. The convert way is also checked against a
 * double-precision product of the same rounded inputs on sampled rows, and
 * fp32 against bf16 shows the size of the bf16 rounding itself.
 *
 *   bf16_gemm [--rows N] [--widths 256,512,768] [--reps R] [--threads T]
 * Exit 0, or 1 when the two bf16 ways disagree beyond K * 2^-24. */
#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/ops.h"

typedef void (*sgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint,
                         blasint, float, const float *, blasint, const float *, blasint, float, float *,
                         blasint);
typedef void (*sbgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint,
                          blasint, float, const uint16_t *, blasint, const uint16_t *, blasint, float,
                          float *, blasint);
typedef void (*set_threads_fn)(int);

static const dt_ops *ops = &dt_ops_cpu;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (float)(((rng * 0x2545F4914F6CDD1Dull) >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

/* One GEMM, C[M,N] = op(A)[M,K] op(B)[K,N], row-major, beta 0. */
typedef struct {
    const char *name;
    int ta, tb, M, N, K;
} shape;

/* Slab boundaries on multiples of 16, as gemm.c. */
static int slab(int n, int part, int nparts) {
    if (part >= nparts) return n;
    int units = (n + 15) / 16, s = (int)((long long)units * part / nparts) * 16;
    return s < n ? s : n;
}

/* The product through `sg` (fp32 inputs) or `sb` (bf16 inputs), split over
 * the OpenMP threads like kernels/cpu/gemm.c: rows of C when M >= N, else
 * columns. a/b point at float or uint16_t elements; es is their size. */
static void gemm_split(sgemm_fn sg, sbgemm_fn sb, const shape *s, const void *a, const void *b, float *c) {
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N, ldc = s->N;
    size_t es = sb ? 2 : 4;
    enum CBLAS_TRANSPOSE ta = s->ta ? CblasTrans : CblasNoTrans, tb = s->tb ? CblasTrans : CblasNoTrans;
    int split_rows = s->M >= s->N;
    #pragma omp parallel
    {
        int part = omp_get_thread_num(), nparts = omp_get_num_threads();
        int n = split_rows ? s->M : s->N, lo = slab(n, part, nparts), hi = slab(n, part + 1, nparts);
        if (hi > lo) {
            const char *pa = a, *pb = b;
            float *pc = c;
            int m = s->M, nn = s->N;
            if (split_rows) { /* rows lo..hi of op(A) and of C */
                pa += (size_t)lo * (s->ta ? 1 : (size_t)lda) * es;
                pc += (size_t)lo * ldc;
                m = hi - lo;
            } else { /* columns lo..hi of op(B) and of C */
                pb += (size_t)lo * (s->tb ? (size_t)ldb : 1) * es;
                pc += lo;
                nn = hi - lo;
            }
            if (sb)
                sb(CblasRowMajor, ta, tb, m, nn, s->K, 1.0f, (const uint16_t *)pa, lda, (const uint16_t *)pb,
                   ldb, 0.0f, pc, ldc);
            else
                sg(CblasRowMajor, ta, tb, m, nn, s->K, 1.0f, (const float *)pa, lda, (const float *)pb, ldb,
                   0.0f, pc, ldc);
        }
    }
}

/* op(A)[i,k] and op(B)[k,j] of a row-major operand. */
static double at_a(const shape *s, const float *a, int i, int k) {
    return s->ta ? a[(size_t)k * s->M + i] : a[(size_t)i * s->K + k];
}
static double at_b(const shape *s, const float *b, int k, int j) {
    return s->tb ? b[(size_t)j * s->K + k] : b[(size_t)k * s->N + j];
}

int main(int argc, char **argv) {
    int rows = 1024, reps = 5, threads = 0;
    const char *widths = "256,512,768";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--widths") && i + 1 < argc) widths = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bf16_gemm [--rows N] [--widths 256,512,768] [--reps R] [--threads T]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (threads > 0) omp_set_num_threads(threads);
    openblas_set_num_threads(1); /* as dtrun: one pool, OpenMP's */

    /* sbgemm: in the linked OpenBLAS, or in DTRUN_SBGEMM_LIB */
    sgemm_fn sg = cblas_sgemm, sg_alt = NULL;
    sbgemm_fn sb = (sbgemm_fn)dlsym(RTLD_DEFAULT, "cblas_sbgemm");
    const char *alt = getenv("DTRUN_SBGEMM_LIB"), *sb_from = "the linked OpenBLAS";
    if (alt && *alt) {
        void *h = dlopen(alt, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        if (!h) {
            fprintf(stderr, "bf16_gemm: DTRUN_SBGEMM_LIB: %s\n", dlerror());
            return 2;
        }
        sb = (sbgemm_fn)dlsym(h, "cblas_sbgemm");
        sg_alt = (sgemm_fn)dlsym(h, "cblas_sgemm");
        set_threads_fn st = (set_threads_fn)dlsym(h, "openblas_set_num_threads");
        char *(*cfg)(void) = (char *(*)(void))dlsym(h, "openblas_get_config");
        if (st) st(1);
        sb_from = alt;
        printf("# DTRUN_SBGEMM_LIB %s: %s\n", alt, cfg ? cfg() : "?");
    }
    printf("# linked OpenBLAS: %s; OpenMP threads %d, OpenBLAS single-threaded inside (as kernels/cpu/gemm.c)\n",
           openblas_get_config(), omp_get_max_threads());
    printf("# cblas_sbgemm: %s\n", sb ? sb_from : "absent (Debian's libopenblas is built without BUILD_BFLOAT16; "
                                                   "set DTRUN_SBGEMM_LIB to time another build's)");
    printf("# GFLOP/s = 2MNK / time, best of %d; 'conv' times include rounding both operands to bf16 in the call\n",
           reps);
    printf("%-22s %5s %5s %5s | %8s | %8s %8s %6s %6s | %8s %8s %6s %6s | %9s %9s %9s%s\n", "gemm", "M", "N", "K",
           "fp32", "convert", "+conv", "ratio", "+conv", "sbgemm", "+conv", "ratio", "+conv", "sb-cv err", "sb-cv max",
           "cv-ref", sg_alt ? " | alt fp32" : "");

    int fail = 0;
    double worst_err = 0, worst_max = 0, worst_ref = 0, worst_bf = 0;
    char *list = strdup(widths);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int C = atoi(tok), N = rows;
        /* the fc layer [C -> 4C] as dtrun's matmul runs it (forward, then the
         * two backward GEMMs), and the forward of the projection [4C -> C] */
        shape shapes[4] = {
            {"fc fwd   x W^T", 0, 1, N, 4 * C, C},
            {"fc dinp  dy W", 0, 0, N, C, 4 * C},
            {"fc dW    dy^T x", 1, 0, 4 * C, C, N},
            {"proj fwd x W^T", 0, 1, N, C, 4 * C},
        };
        for (int si = 0; si < 4; si++) {
            const shape *s = &shapes[si];
            size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
            float *a = malloc(na * 4), *b = malloc(nb * 4), *ar = malloc(na * 4), *br = malloc(nb * 4);
            uint16_t *a16 = malloc(na * 2), *b16 = malloc(nb * 2);
            float *c32 = malloc(nc * 4), *ccv = malloc(nc * 4), *csb = malloc(nc * 4), *calt = malloc(nc * 4);
            for (size_t i = 0; i < na; i++) a[i] = frand();
            for (size_t i = 0; i < nb; i++) b[i] = frand() * 0.05f;
            double t32 = 1e9, tcv = 1e9, tcv_c = 1e9, tsb = 1e9, tsb_c = 1e9, talt = 1e9;
            for (int r = 0; r < reps; r++) {
                double t0 = now_s();
                gemm_split(sg, NULL, s, a, b, c32);
                t32 = fmin(t32, now_s() - t0);

                memcpy(ar, a, na * 4), memcpy(br, b, nb * 4); /* fresh fp32 copies, untimed */
                t0 = now_s();
                ops->round_bf16(ar, na);
                ops->round_bf16(br, nb);
                double t1 = now_s();
                gemm_split(sg, NULL, s, ar, br, ccv);
                double t2 = now_s();
                tcv = fmin(tcv, t2 - t1), tcv_c = fmin(tcv_c, t2 - t0);

                if (sb) {
                    t0 = now_s();
                    ops->to_bf16(a16, a, na);
                    ops->to_bf16(b16, b, nb);
                    t1 = now_s();
                    gemm_split(NULL, sb, s, a16, b16, csb);
                    t2 = now_s();
                    tsb = fmin(tsb, t2 - t1), tsb_c = fmin(tsb_c, t2 - t0);
                }
                if (sg_alt) {
                    t0 = now_s();
                    gemm_split(sg_alt, NULL, s, a, b, calt);
                    talt = fmin(talt, now_s() - t0);
                }
            }
            double fl = 2.0 * s->M * s->N * s->K * 1e-9;

            /* agreement: |c_cv - c_sb| against sum_k |a_ik b_kj| (a GEMM of
             * the absolute values), and against max |c| */
            double err = 0, mx = 0, cmax = 0;
            if (sb) {
                float *aa = malloc(na * 4), *bb = malloc(nb * 4), *cabs = malloc(nc * 4);
                for (size_t i = 0; i < na; i++) aa[i] = fabsf(ar[i]);
                for (size_t i = 0; i < nb; i++) bb[i] = fabsf(br[i]);
                gemm_split(sg, NULL, s, aa, bb, cabs);
                for (size_t i = 0; i < nc; i++) {
                    double d = fabs((double)ccv[i] - csb[i]);
                    err = fmax(err, cabs[i] > 0 ? d / cabs[i] : d);
                    mx = fmax(mx, d);
                    cmax = fmax(cmax, fabs(ccv[i]));
                }
                mx /= cmax > 0 ? cmax : 1;
                free(aa), free(bb), free(cabs);
                if (!(err <= s->K * 0x1p-24)) fail = 1;
                worst_err = fmax(worst_err, err), worst_max = fmax(worst_max, mx);
            }
            /* convert against double on 16 sampled rows (same rounded inputs),
             * and the bf16 rounding's own effect (fp32 vs convert) */
            double ref_err = 0, bf_err = 0;
            for (int q = 0; q < 16; q++) {
                int i = (int)((long long)q * (s->M - 1) / 15);
                for (int j = 0; j < s->N; j++) {
                    double sum = 0, sabs = 0;
                    for (int k = 0; k < s->K; k++) {
                        double p = at_a(s, ar, i, k) * at_b(s, br, k, j);
                        sum += p, sabs += fabs(p);
                    }
                    size_t ij = (size_t)i * s->N + j;
                    ref_err = fmax(ref_err, fabs(ccv[ij] - sum) / sabs);
                    bf_err = fmax(bf_err, fabs((double)c32[ij] - ccv[ij]) / sabs);
                }
            }
            worst_ref = fmax(worst_ref, ref_err), worst_bf = fmax(worst_bf, bf_err);

            char alt_col[48] = "";
            if (sg_alt) snprintf(alt_col, sizeof alt_col, " | %8.1f", fl / talt);
            if (sb)
                printf("C=%-4d %-15s %5d %5d %5d | %8.1f | %8.1f %8.1f %6.2f %6.2f | %8.1f %8.1f %6.2f %6.2f | %9.1e %9.1e %9.1e%s\n",
                       C, s->name, s->M, s->N, s->K, fl / t32, fl / tcv, fl / tcv_c, t32 / tcv, t32 / tcv_c, fl / tsb,
                       fl / tsb_c, t32 / tsb, t32 / tsb_c, err, mx, ref_err, alt_col);
            else
                printf("C=%-4d %-15s %5d %5d %5d | %8.1f | %8.1f %8.1f %6.2f %6.2f | %8s %8s %6s %6s | %9s %9s %9.1e%s\n",
                       C, s->name, s->M, s->N, s->K, fl / t32, fl / tcv, fl / tcv_c, t32 / tcv, t32 / tcv_c, "-", "-",
                       "-", "-", "-", "-", ref_err, alt_col);
            fflush(stdout);
            free(a), free(b), free(ar), free(br), free(a16), free(b16), free(c32), free(ccv), free(csb), free(calt);
        }
    }
    free(list);
    printf("# ratio = fp32 time / that way's time (> 1: faster than fp32)\n");
    printf("# convert vs double product of the same rounded inputs: max %.1e of sum|a b| (fp32 accumulation)\n",
           worst_ref);
    printf("# fp32 vs bf16 inputs: max %.1e of sum|a b| (the bf16 rounding itself; bound 2^-8)\n", worst_bf);
    if (sb) {
        printf("# sbgemm vs convert: max %.1e of sum|a b|, max |diff| / max|C| %.1e: %s (bound K * 2^-24)\n",
               worst_err, worst_max, fail ? "DISAGREE" : "equal up to fp32 accumulation order");
        /* bf16 denormal inputs: x86's BF16 dot products (VDPBF16PS, AMX
         * TDPBF16PS) read them as zero whatever MXCSR says; round_bf16 keeps
         * them, as the reference must */
        enum { D = 64 };
        uint16_t da[D * D], db[D * D];
        float fa[D * D], fb[D * D], c1[D * D], c2[D * D];
        for (int i = 0; i < D * D; i++) da[i] = 0x0010, db[i] = 0x3f80; /* 2^-129 (denormal) and 1 */
        ops->from_bf16(fa, da, D * D);
        ops->from_bf16(fb, db, D * D);
        sb(CblasRowMajor, CblasNoTrans, CblasNoTrans, D, D, D, 1.0f, da, D, db, D, 0.0f, c1, D);
        sg(CblasRowMajor, CblasNoTrans, CblasNoTrans, D, D, D, 1.0f, fa, D, fb, D, 0.0f, c2, D);
        printf("# denormal bf16 inputs (%d x 2^-129 * 1): sbgemm %g, convert %g, exact %g%s\n", D, c1[0], c2[0],
               D * 0x1p-129, c1[0] == c2[0] ? "" : ": sbgemm flushes denormal inputs to zero");
    }
    return fail;
}
