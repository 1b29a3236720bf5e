/* blas.cu — cuBLAS and cuBLASLt, loaded at run time with dlopen.
 *
 * Why not link them? Loading libcublasLt (540 MB) costs every process about
 * 0.6 s and 210 MB of resident memory before main() runs (measured on the
 * build machine: an empty program linked with -lcublasLt), and bin/dtrun is
 * also the launcher, the dry-run and every CLI call, which never touch a GPU.
 * So the backend resolves the few entry points it uses when it is set up —
 * after cudaGetDeviceCount found a device — and a CPU-only run never maps
 * the libraries. The soname's major version is the one of the headers we
 * compiled against (CUBLAS_VER_MAJOR), so the ABI matches; the search path is
 * the executable's rpath ($(CUDA_HOME)/lib64), then the loader's default. */
#include <dlfcn.h>
#include <cstdio>

#include "kernels/cuda/common.cuh"

dtc_blas_api dtc_blas;

#define DTC_STR_(x) #x
#define DTC_STR(x) DTC_STR_(x)

static void *open_lib(const char *base) {
    char name[64];
    snprintf(name, sizeof name, "%s.so.%s", base, DTC_STR(CUBLAS_VER_MAJOR));
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(name, sizeof name, "%s.so", base);
        h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    }
    return h;
}

/* Resolves `sym` into `field`; false when it is missing. */
template <typename F> static bool resolve(void *lib, const char *sym, F &field) {
    field = reinterpret_cast<F>(dlsym(lib, sym));
    return field != nullptr;
}

int dtc_blas_load(void) {
    if (dtc_blas.loaded) return 0;
    /* cuBLASLt first: libcublas itself depends on it */
    void *lt = open_lib("libcublasLt");
    void *bl = lt ? open_lib("libcublas") : nullptr;
    if (!lt || !bl) return -1;
    bool ok = resolve(bl, "cublasCreate_v2", dtc_blas.create) &&
              resolve(bl, "cublasDestroy_v2", dtc_blas.destroy) &&
              resolve(bl, "cublasSetStream_v2", dtc_blas.set_stream) &&
              resolve(bl, "cublasSetMathMode", dtc_blas.set_math_mode) &&
              resolve(bl, "cublasSetWorkspace_v2", dtc_blas.set_workspace) &&
              resolve(bl, "cublasGemmEx", dtc_blas.gemm_ex) &&
              resolve(bl, "cublasGemmStridedBatchedEx", dtc_blas.gemm_strided_batched_ex) &&
              resolve(bl, "cublasGetStatusString", dtc_blas.status_string) &&
              resolve(lt, "cublasLtCreate", dtc_blas.lt_create) &&
              resolve(lt, "cublasLtDestroy", dtc_blas.lt_destroy) &&
              resolve(lt, "cublasLtMatmulDescCreate", dtc_blas.lt_desc_create) &&
              resolve(lt, "cublasLtMatmulDescDestroy", dtc_blas.lt_desc_destroy) &&
              resolve(lt, "cublasLtMatmulDescSetAttribute", dtc_blas.lt_desc_set) &&
              resolve(lt, "cublasLtMatrixLayoutCreate", dtc_blas.lt_layout_create) &&
              resolve(lt, "cublasLtMatrixLayoutDestroy", dtc_blas.lt_layout_destroy) &&
              resolve(lt, "cublasLtMatmulPreferenceCreate", dtc_blas.lt_pref_create) &&
              resolve(lt, "cublasLtMatmulPreferenceDestroy", dtc_blas.lt_pref_destroy) &&
              resolve(lt, "cublasLtMatmulPreferenceSetAttribute", dtc_blas.lt_pref_set) &&
              resolve(lt, "cublasLtMatmulAlgoGetHeuristic", dtc_blas.lt_heuristic) &&
              resolve(lt, "cublasLtMatmul", dtc_blas.lt_matmul);
    if (!ok) {
        /* keep them mapped: unloading cuBLAS is known to be unsafe after
         * partial use, and this is a one-time failure path */
        return -1;
    }
    dtc_blas.loaded = 1;
    return 0;
}

const char *dtc_blas_status(cublasStatus_t st) {
    if (dtc_blas.status_string) return dtc_blas.status_string(st);
    return "cuBLAS error";
}
