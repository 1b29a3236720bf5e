/* ops_cpu.c — the CPU backend's ops table (see kernels/ops.h). Host memory
 * is the "device" memory here, so to_host and from_host are plain copies. */
#include "kernels/ops.h"
#include "kernels/cpu/cpu.h"

/* Ops run on the caller's thread: no queue to order after. */
static void *cpu_stream(void) { return NULL; }
static const char *cpu_device_name(void) { return "cpu"; }
/* fp32 products of bf16 values are exact: nothing to switch (ops.h) */
static void cpu_set_bf16_products(int on) { (void)on; }

/* Graphs: nothing is recorded, the ops run as they are issued (ops.h), so a
 * step "replayed" on the CPU is the step issued again, through the same
 * device-scalar ops a CUDA graph replays. */
static void cpu_graph_begin(void) {}
static void *cpu_graph_end(void) { return NULL; }
static int cpu_graph_launch(void *graph) { return graph ? 0 : -1; }
static void cpu_graph_destroy(void *graph) { (void)graph; }

const dt_ops dt_ops_cpu = {
    .name = "cpu",
    .host_memory = 1,
    .stream = cpu_stream,
    .device_name = cpu_device_name,

    .alloc = cpu_alloc,
    .free = cpu_free,
    .alloc_ordered = cpu_alloc,
    .free_ordered = cpu_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .to_host = cpu_copy,
    .from_host = cpu_copy,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .copy_start = cpu_copy_start,
    .copy_finish = cpu_copy_finish,

    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .posadd_forward = cpu_posadd_forward,
    .posadd_backward = cpu_posadd_backward,
    .patch_forward = cpu_patch_forward,
    .patch_backward = cpu_patch_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .matmul_gelu_forward = cpu_matmul_gelu_forward,
    .matmul_dgelu_backward = cpu_matmul_dgelu_backward,
    .attention_forward = cpu_attention_forward,
    .attention_decode = cpu_attention_decode,
    .attention_backward = cpu_attention_backward,
    .attention_block_forward = cpu_attention_block_forward,
    .attention_block_merge = cpu_attention_block_merge,
    .attention_block_backward = cpu_attention_block_backward,
    .rope_table = cpu_rope_table,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .rows_copy = cpu_rows_copy,
    .dropout_forward = cpu_dropout_forward,
    .dropout_backward = cpu_dropout_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .gelu_erf_forward = cpu_gelu_erf_forward,
    .gelu_erf_backward = cpu_gelu_erf_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .moe_router_forward = cpu_moe_router_forward,
    .moe_router_backward = cpu_moe_router_backward,
    .moe_route = cpu_moe_route,
    .moe_permute = cpu_moe_permute,
    .moe_permute_backward = cpu_moe_permute_backward,
    .moe_unpermute = cpu_moe_unpermute,
    .moe_unpermute_backward = cpu_moe_unpermute_backward,
    .moe_grouped_forward = cpu_moe_grouped_forward,
    .moe_grouped_backward = cpu_moe_grouped_backward,
    .residual_forward = cpu_residual_forward,
    .residual_layernorm_forward = cpu_residual_layernorm_forward,
    .residual_rmsnorm_forward = cpu_residual_rmsnorm_forward,
    .residual_backward = cpu_residual_backward,

    .xent_stats = cpu_xent_stats,
    .xent_rescale = cpu_xent_rescale,
    .xent_loss = cpu_xent_loss,
    .xent_backward = cpu_xent_backward,

    .adamw = cpu_adamw,
    .adamw_multi = cpu_adamw_multi,
    .adamw_mixed_multi = cpu_adamw_mixed_multi,
    .scale = cpu_scale,
    .sumsq = cpu_sumsq,

    .loss_sum_add = cpu_loss_sum_add,
    .loss_seed = cpu_loss_seed,
    .sumsq_add = cpu_sumsq_add,
    .scalar_add = cpu_scalar_add,
    .clip_scale = cpu_clip_scale,
    .scale_dev = cpu_scale_dev,
    .adamw_multi_dev = cpu_adamw_multi_dev,
    .adamw_mixed_multi_dev = cpu_adamw_mixed_multi_dev,

    .graph_begin = cpu_graph_begin,
    .graph_end = cpu_graph_end,
    .graph_launch = cpu_graph_launch,
    .graph_destroy = cpu_graph_destroy,

    .to_bf16 = cpu_to_bf16,
    .from_bf16 = cpu_from_bf16,
    .round_bf16 = cpu_round_bf16,
    .acc_bf16 = cpu_acc_bf16,
    .set_bf16_products = cpu_set_bf16_products,
};
