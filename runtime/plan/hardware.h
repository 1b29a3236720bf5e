/* hardware.h — hardware profiles for the dry-run and the planner.
 *
 * A profile is a small YAML mapping (configs/hardware/NAME.yaml), parsed as
 * strictly as a job file: an unknown key is "FILE:LINE:COL: unknown key 'x' ...;
 * did you mean 'y'?", a missing or malformed value is one line too. Keys:
 *
 *   name                   what reports call it
 *   description            free text (optional)
 *   device                 gpu | cpu
 *   peak_bf16_tflops       dense bf16 tensor-core peak per device (0 on a CPU)
 *   peak_fp32_tflops       fp32 peak per device (non-tensor-core on a GPU)
 *   gemm_efficiency        achieved fraction of peak of a GEMM against its smallest
 *                          dimension: a mapping `DIM: FRACTION` (2 to 16 points,
 *                          DIM increasing, fractions in (0, 1]); read between points
 *                          linearly in log2(DIM), flat beyond the ends. Each profile
 *                          says beside it which published figures it reads
 *   achievable_fraction    the older flat form: one fraction for every GEMM (a
 *                          profile gives this or gemm_efficiency, not both)
 *   attention_efficiency   achieved fraction of peak of the fused (flash-style)
 *                          attention kernels, forward and backward together,
 *                          against the keys one kernel call sees (the sequence,
 *                          or a context-parallel ring's block of it): a mapping
 *                          `KEYS: FRACTION` read like gemm_efficiency, in the
 *                          FLOPs such kernels are benchmarked in (score and value
 *                          products, the backward's recomputed scores, causal
 *                          tiles past the diagonal skipped). Optional: without it
 *                          the attention core is priced as a GEMM whose smallest
 *                          dimension is the head size
 *   memory_efficiency      of memory_bandwidth_gbs that the memory-bound ops (layer
 *                          norms, softmax, GELU, residual adds) reach; optional,
 *                          default 0.8
 *   memory_mib             device memory as nvidia-smi reports it; 0 on a CPU
 *                          profile = this host's physical memory
 *   memory_bandwidth_gbs   HBM (or DRAM) bandwidth, GB/s
 *   intra_node_gbs         per device, one direction, inside a node (NVLink, PCIe, shm)
 *   inter_node_gbs         per device, one direction, across nodes (InfiniBand, Ethernet)
 *   intra_node_latency_us, inter_node_latency_us   per message / collective step
 *   gpus_per_node          devices in one node; 0 on a CPU profile = this host's cores
 *   cuda_context_mib, nccl_mib, cublas_workspace_mib
 *                          fixed overheads every GPU worker pays (0 on a CPU)
 *   headroom_percent       of the memory a rank has, what --plan keeps free for
 *                          what no estimate counts (allocator fragmentation, a
 *                          library's own buffers); optional, default 5
 *   calibrated             free text: how and when `dtrun --calibrate` measured the
 *                          rates of this profile (optional; such a profile says it)
 *
 * All rates are converted to SI units in the struct (FLOP/s, bytes/s, bytes, s). */
#ifndef DTRUN_HARDWARE_H
#define DTRUN_HARDWARE_H

#include <stddef.h>

#define HW_NAME_MAX 64
#define HW_TEXT_MAX 256
#define HW_GEMM_MAX 16

enum { HW_HEADROOM_DEFAULT = 0, HW_HEADROOM_PROFILE, HW_HEADROOM_FLAG };

typedef struct {
    char name[HW_NAME_MAX];
    char description[HW_TEXT_MAX];
    char source[HW_TEXT_MAX]; /* the file it came from */
    int gpu;
    double peak_bf16;     /* FLOP/s */
    double peak_fp32;     /* FLOP/s */
    double achievable;    /* the table's largest fraction (the largest GEMMs), for reports */
    int n_gemm;           /* points of the GEMM efficiency table, >= 1 */
    double gemm_dim[HW_GEMM_MAX], gemm_eff[HW_GEMM_MAX]; /* dim increasing */
    int n_attn;           /* points of attention_efficiency; 0: none given */
    double attn_keys[HW_GEMM_MAX], attn_eff[HW_GEMM_MAX]; /* keys increasing */
    double memory_eff;    /* fraction of memory_bw the memory-bound ops reach */
    double memory;        /* bytes */
    double memory_bw;     /* bytes/s */
    double intra_bw, inter_bw;           /* bytes/s per device, one direction */
    double intra_latency, inter_latency; /* s */
    /* train.offload: bytes/s per device between it and host memory (PCIe,
     * one direction), and of host memory itself per device (the node's DRAM
     * bandwidth shared by its GPUs). A cpu profile: both memory_bw (the host
     * is the device); 0 on a GPU profile that does not say (no estimate). */
    double host_link_bw, host_memory_bw;
    double host_memory;   /* bytes of host memory per node (cpu: = memory, the same) */
    int gpus_per_node;
    double cuda_context, nccl, cublas_workspace; /* bytes */
    double headroom_fraction; /* of the memory a rank has, kept free by --plan */
    double headroom_bytes;    /* an amount instead (--headroom 4GiB); 0: the fraction */
    int headroom_origin;      /* HW_HEADROOM_*: where the headroom comes from */
    char calibrated[HW_TEXT_MAX];      /* "" unless `dtrun --calibrate` wrote it */
} hw_profile;

/* Parse a profile from memory; `name` stands for the file in messages. 0, or -1
 * with one line in err. */
int hw_load_string(hw_profile *hw, const char *text, size_t len, const char *name, char *err,
                   size_t errlen);
int hw_load_file(hw_profile *hw, const char *path, char *err, size_t errlen);

/* `what` is a path (it has a '/' or ends in .yaml) or a profile name looked up as
 * NAME.yaml in, in order: $DTRUN_HARDWARE_DIR, ./configs/hardware, and next to the
 * executable ../configs/hardware and ../share/dtrun/configs/hardware. An unknown
 * name lists the known ones and suggests the closest. */
int hw_load(hw_profile *hw, const char *what, char *err, size_t errlen);

/* The profile that describes a device by its name (ops->device_name: "cpu",
 * "NVIDIA H100 80GB HBM3", ...), or NULL when none here does (llm.c's mfu.h
 * table, by name). */
const char *hw_profile_for_device(const char *device_name);

/* Fixed bytes every worker pays besides what sizes.h counts. */
double hw_fixed_overhead(const hw_profile *hw, int world);

/* Achieved fraction of peak of a GEMM whose smallest dimension is dim. */
double hw_gemm_efficiency(const hw_profile *hw, double dim);

/* Achieved fraction of peak of the fused attention kernels at `keys` keys per
 * call (attention_efficiency); 0 when the profile gives no table. */
double hw_attention_efficiency(const hw_profile *hw, double keys);

/* Bytes --plan keeps free on a rank that has `rank_memory` bytes. */
double hw_headroom(const hw_profile *hw, double rank_memory);
/* "5 % of it (headroom_percent of h100-sxm's profile; --headroom to change)":
 * what the headroom is and where it comes from, for reports. */
void hw_headroom_origin(const hw_profile *hw, char *out, size_t n);

/* Peak FLOP/s of the precision a job computes in. */
double hw_peak(const hw_profile *hw, int mixed_bf16);

#endif
