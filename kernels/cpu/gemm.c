/* gemm.c — cblas_sgemm split across the OpenMP threads.
 *
 * Why not let OpenBLAS thread its own GEMMs? The Debian OpenBLAS is the
 * pthreads build: it keeps its own pool of worker threads beside OpenMP's. A
 * training step alternates GEMMs with OpenMP loops (layernorm, GELU, softmax)
 * hundreds of times, and each pool's idle threads spin-wait while the other
 * pool works, so on 2 cores the two pools fight over the CPUs: a GPT step
 * measured 300-800 ms that way against ~150 ms with a single pool. So OpenBLAS
 * always runs single-threaded, and this file splits each product into one
 * slab per OpenMP thread (rows of C, or columns when C is wide and short).
 * The same pool then runs everything and its spinning threads are exactly
 * the ones the next loop needs. */
#include <cblas.h>
#include <omp.h>

#include "kernels/cpu/cpu.h"

/* Below this many multiply-adds one thread finishes before others wake. */
#define GEMM_PAR_MIN (64 * 64 * 64)
/* Slab boundaries on multiples of this, to keep OpenBLAS's micro-tiles full. */
#define GEMM_SLAB_ALIGN 16

void cpu_blas_single_threaded(void) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

/* Start of slab `part` of `nparts` over n, aligned; slab = [start(p), start(p+1)). */
static int slab_start(int n, int part, int nparts) {
    if (part >= nparts) return n;
    int units = (n + GEMM_SLAB_ALIGN - 1) / GEMM_SLAB_ALIGN;
    int s = (int)((long long)units * part / nparts) * GEMM_SLAB_ALIGN;
    return s < n ? s : n;
}

void cpu_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    if (K <= 0) { /* empty product: C = beta C (BLAS would reject lda = 0);
                     as in BLAS, beta = 0 ignores what C held (even NaN) */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    cpu_blas_single_threaded();
    int nthreads = (double)M * N * K >= GEMM_PAR_MIN ? omp_get_max_threads() : 1;
    if (nthreads == 1) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* Split the longer side of C: rows of C are rows of op(A), columns of C
     * are columns of op(B). */
    int split_rows = M >= N;
    #pragma omp parallel num_threads(nthreads)
    {
        int part = omp_get_thread_num(), nparts = omp_get_num_threads();
        int n = split_rows ? M : N;
        int s0 = slab_start(n, part, nparts), s1 = slab_start(n, part + 1, nparts);
        if (s1 > s0) {
            if (split_rows) {
                /* rows s0.. of op(A): row offset in A, or column offset when A is stored transposed */
                const float *a = trans_a ? A + s0 : A + (size_t)s0 * lda;
                cblas_sgemm(CblasRowMajor, ta, tb, s1 - s0, N, K, alpha, a, lda, B, ldb,
                            beta, C + (size_t)s0 * ldc, ldc);
            } else {
                const float *b = trans_b ? B + (size_t)s0 * ldb : B + s0;
                cblas_sgemm(CblasRowMajor, ta, tb, M, s1 - s0, K, alpha, A, lda, b, ldb,
                            beta, C + s0, ldc);
            }
        }
    }
}
