/* ops_cuda.cu — the CUDA backend's ops table and its one-time set-up.
 *
 * dt_ops_cuda_probe() (called by kernels/backend.c's dt_ops_cuda()) answers
 * NULL when there is no usable device — cudaGetDeviceCount fails (no driver,
 * as on the CPU build machines and CI) or finds none — so a CUDA build runs
 * everywhere and the runtime falls back to the CPU table. Otherwise it creates
 * the backend's stream, cuBLAS and cuBLASLt handles and the cuBLASLt workspace
 * once, and returns the table.
 *
 * What the table computes: the fp32 twin of kernels/cpu (see common.cuh);
 * with set_bf16_products(1) the GEMMs and the blockwise attention run on
 * bf16 tensor cores (matmul.cu, attention_block_bf16.cu), the rest in fp32. */
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.h"

dtc_state dtc;

static dt_ops table;
static int probed;          /* the probe ran (its answer is cached) */
static int want_device = -1;
static char device_name[256];

/* cuBLASLt's recommended workspace on Hopper is 32 MiB (llm.c uses the same):
 * some of its fastest kernels (split-K, stream-K) need it. */
#define DTC_LT_WORKSPACE (32u << 20)

void dtc_fatal(const char *file, int line, const char *call, const char *why) {
    /* The one place kernels/ writes anything: the process is about to stop
     * and this line is all the user gets (see common.cuh, Errors). */
    fprintf(stderr, "dtrun: cuda: %s:%d: %s: %s\n", file, line, call, why);
    abort();
}

void *dtc_scratch(size_t bytes) {
    if (bytes <= dtc.scratch_bytes) return dtc.scratch;
    if (dtc.capturing) {
        /* cudaFree and cudaMalloc cannot be recorded (graph.cu) */
        char why[192];
        snprintf(why, sizeof why, "an op recorded into a CUDA graph wants %zu bytes of scratch, more than the %zu it "
                                  "had (record ops only after they ran once as issued)", bytes, dtc.scratch_bytes);
        dtc_fatal(__FILE__, __LINE__, "dtc_scratch", why);
    }
    if (dtc.scratch) DTC_CHECK(cudaFree(dtc.scratch));
    dtc.scratch = nullptr;
    dtc.scratch_bytes = 0;
    /* round up to 1 MiB so that slowly growing requests do not reallocate
     * every call */
    size_t want = (bytes + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1);
    DTC_CHECK(cudaMalloc(&dtc.scratch, want));
    dtc.scratch_bytes = want;
    return dtc.scratch;
}

cublasComputeType_t dtc_compute_type(void) {
    return dtc.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

static void fill_table(void) {
    memset(&table, 0, sizeof table);
    table.name = "cuda";
    table.host_memory = 0;          /* alloc gives device memory */
    table.stream = dt_ops_cuda_stream;
    table.device_name = dt_ops_cuda_device_name;
    table.alloc = cuda_alloc;
    table.free = cuda_free;
    table.alloc_ordered = cuda_alloc_ordered;
    table.free_ordered = cuda_free_ordered;
    table.zero = cuda_zero;
    table.copy = cuda_copy;
    table.to_host = cuda_to_host;
    table.from_host = cuda_from_host;
    table.host_alloc = cuda_host_alloc;
    table.host_free = cuda_host_free;
    table.copy_start = cuda_copy_start;
    table.copy_finish = cuda_copy_finish;
    table.embedding_forward = cuda_embedding_forward;
    table.embedding_backward = cuda_embedding_backward;
    table.posadd_forward = cuda_posadd_forward;
    table.posadd_backward = cuda_posadd_backward;
    table.patch_forward = cuda_patch_forward;
    table.patch_backward = cuda_patch_backward;
    table.layernorm_forward = cuda_layernorm_forward;
    table.layernorm_backward = cuda_layernorm_backward;
    table.rmsnorm_forward = cuda_rmsnorm_forward;
    table.rmsnorm_backward = cuda_rmsnorm_backward;
    table.matmul_forward = cuda_matmul_forward;
    table.matmul_backward = cuda_matmul_backward;
    table.matmul_gelu_forward = cuda_matmul_gelu_forward;
    table.matmul_dgelu_backward = cuda_matmul_dgelu_backward;
    table.attention_forward = cuda_attention_forward;
    table.attention_decode = cuda_attention_decode;
    table.attention_backward = cuda_attention_backward;
    table.attention_block_forward = cuda_attention_block_forward;
    table.attention_block_merge = cuda_attention_block_merge;
    table.attention_block_backward = cuda_attention_block_backward;
    table.rope_table = cuda_rope_table;
    table.rope_forward = cuda_rope_forward;
    table.rope_backward = cuda_rope_backward;
    table.rows_copy = cuda_rows_copy;
    table.dropout_forward = cuda_dropout_forward;
    table.dropout_backward = cuda_dropout_backward;
    table.gelu_forward = cuda_gelu_forward;
    table.gelu_backward = cuda_gelu_backward;
    table.gelu_erf_forward = cuda_gelu_erf_forward;
    table.gelu_erf_backward = cuda_gelu_erf_backward;
    table.residual_forward = cuda_residual_forward;
    table.swiglu_forward = cuda_swiglu_forward;
    table.swiglu_backward = cuda_swiglu_backward;
    table.moe_router_forward = cuda_moe_router_forward;
    table.moe_router_backward = cuda_moe_router_backward;
    table.moe_route = cuda_moe_route;
    table.moe_permute = cuda_moe_permute;
    table.moe_permute_backward = cuda_moe_permute_backward;
    table.moe_unpermute = cuda_moe_unpermute;
    table.moe_unpermute_backward = cuda_moe_unpermute_backward;
    table.moe_grouped_forward = cuda_moe_grouped_forward;
    table.moe_grouped_backward = cuda_moe_grouped_backward;
    table.residual_layernorm_forward = cuda_residual_layernorm_forward;
    table.residual_rmsnorm_forward = cuda_residual_rmsnorm_forward;
    table.residual_backward = cuda_residual_backward;
    table.xent_stats = cuda_xent_stats;
    table.xent_rescale = cuda_xent_rescale;
    table.xent_loss = cuda_xent_loss;
    table.xent_backward = cuda_xent_backward;
    table.adamw = cuda_adamw;
    table.adamw_multi = cuda_adamw_multi;
    table.adamw_mixed_multi = cuda_adamw_mixed_multi;
    table.scale = cuda_scale;
    table.sumsq = cuda_sumsq;
    table.loss_sum_add = cuda_loss_sum_add;
    table.loss_seed = cuda_loss_seed;
    table.sumsq_add = cuda_sumsq_add;
    table.scalar_add = cuda_scalar_add;
    table.clip_scale = cuda_clip_scale;
    table.scale_dev = cuda_scale_dev;
    table.adamw_multi_dev = cuda_adamw_multi_dev;
    table.adamw_mixed_multi_dev = cuda_adamw_mixed_multi_dev;
    table.graph_begin = cuda_graph_begin;
    table.graph_end = cuda_graph_end;
    table.graph_launch = cuda_graph_launch;
    table.graph_destroy = cuda_graph_destroy;
    table.to_bf16 = cuda_to_bf16;
    table.from_bf16 = cuda_from_bf16;
    table.round_bf16 = cuda_round_bf16;
    table.acc_bf16 = cuda_acc_bf16;
    table.set_bf16_products = dt_ops_cuda_set_bf16;
}

/* Undo a partial set-up so that the probe can answer NULL cleanly. */
static void teardown(void) {
    if (dtc.lt_workspace) cudaFree(dtc.lt_workspace);
    if (dtc.lt) dtc_blas.lt_destroy(dtc.lt);
    if (dtc.blas) dtc_blas.destroy(dtc.blas);
    if (dtc.copy_stream) cudaStreamDestroy(dtc.copy_stream);
    if (dtc.stream) cudaStreamDestroy(dtc.stream);
    if (dtc.operands16) cudaFree(dtc.operands16);
    int tf32 = dtc.tf32, bf16 = dtc.bf16;
    memset(&dtc, 0, sizeof dtc);
    dtc.tf32 = tf32;
    dtc.bf16 = bf16;
    cudaGetLastError(); /* clear the sticky error of the failed call */
}

static int setup(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
        cudaGetLastError();
        return -1;
    }
    int dev = want_device;
    if (dev < 0 && cudaGetDevice(&dev) != cudaSuccess) dev = 0;
    if (dev >= count || cudaSetDevice(dev) != cudaSuccess) { teardown(); return -1; }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) { teardown(); return -1; }
    snprintf(device_name, sizeof device_name, "%s", prop.name);
    dtc.device = dev;
    dtc.num_sms = prop.multiProcessorCount;
    if (cudaStreamCreate(&dtc.stream) != cudaSuccess) { teardown(); return -1; }
    if (cudaStreamCreateWithFlags(&dtc.copy_stream, cudaStreamNonBlocking) != cudaSuccess) {
        teardown();
        return -1;
    }
    /* only now, with a device in hand, map cuBLAS (blas.cu) */
    if (dtc_blas_load() != 0) { teardown(); return -1; }
    if (dtc_blas.create(&dtc.blas) != CUBLAS_STATUS_SUCCESS) { teardown(); return -1; }
    if (dtc_blas.set_stream(dtc.blas, dtc.stream) != CUBLAS_STATUS_SUCCESS) {
        teardown();
        return -1;
    }
    /* default math: each call's compute type (32F, or 32F_FAST_TF32 when
     * TF32 is on) decides whether tensor cores may round inputs to TF32 */
    if (dtc_blas.set_math_mode(dtc.blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
        teardown();
        return -1;
    }
    if (dtc_blas.lt_create(&dtc.lt) != CUBLAS_STATUS_SUCCESS) { teardown(); return -1; }
    if (cudaMalloc(&dtc.lt_workspace, DTC_LT_WORKSPACE) != cudaSuccess) { teardown(); return -1; }
    dtc.lt_workspace_bytes = DTC_LT_WORKSPACE;
    /* cuBLAS gets the same workspace (after set_stream, which resets it):
     * its calls and cuBLASLt's run one after another on the one stream, and
     * with a workspace of its own cuBLAS allocates nothing while a graph is
     * recorded (graph.cu); 32 MiB is also its own default size on Hopper */
    if (dtc_blas.set_workspace(dtc.blas, dtc.lt_workspace, DTC_LT_WORKSPACE) != CUBLAS_STATUS_SUCCESS) {
        teardown();
        return -1;
    }
    fill_table();
    dtc.ready = 1;
    return 0;
}

extern "C" const dt_ops *dt_ops_cuda_probe(void) {
    if (!probed) {
        probed = 1;
        setup();
    }
    return dtc.ready ? &table : nullptr;
}

extern "C" int dt_ops_cuda_use_device(int device) {
    if (device < 0) return -1;
    if (dtc.ready) return device == dtc.device ? 0 : -1;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || device >= count) {
        cudaGetLastError();
        return -1;
    }
    want_device = device;
    probed = 0; /* a NULL answer given before may change now */
    return 0;
}

extern "C" void dt_ops_cuda_set_tf32(int on) { dtc.tf32 = on ? 1 : 0; }

extern "C" void dt_ops_cuda_set_bf16(int on) { dtc.bf16 = on ? 1 : 0; }

extern "C" void *dt_ops_cuda_stream(void) { return dtc.ready ? (void *)dtc.stream : nullptr; }

extern "C" void dt_ops_cuda_synchronize(void) {
    if (dtc.ready) DTC_CHECK(cudaStreamSynchronize(dtc.stream));
}

extern "C" const char *dt_ops_cuda_device_name(void) { return dtc.ready ? device_name : ""; }
