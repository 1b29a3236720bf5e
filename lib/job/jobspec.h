/* jobspec.h — the YAML job spec, parsed strictly and resolved.
 *
 * A job file has the sections model, data, train, parallel, checkpoint, log and
 * launch. Parsing is strict: an unknown key, a wrong type, a value out of range or
 * an inconsistent combination is one line `FILE:LINE:COL: what (why)` with a
 * "did you mean" where it fits. man/dtrun-job.5 documents every key.
 *
 * The struct below is the resolved job: presets expanded, defaults filled in,
 * derived values (d_ff, grad accumulation) computed. Everything downstream reads
 * only this struct, never the YAML. */
#ifndef DTRUN_JOBSPEC_H
#define DTRUN_JOBSPEC_H

#include <stddef.h>
#include <stdio.h>

#define JOB_PATH_MAX 1024
#define JOB_NAME_MAX 64

/* gpt: GPT-2's block (layernorm, learned positions, GELU MLP, LM head tied to
 * wte); vit: the ViT classifier; llama: the Llama-family decoder (RMSNorm,
 * rotary positions, SwiGLU MLP, grouped-query attention, untied head by
 * default). gpt and llama are the language models (job_model_is_lm). */
typedef enum { MODEL_GPT = 0, MODEL_VIT = 1, MODEL_LLAMA = 2 } model_kind;
#define JOB_ROPE_THETA_DEFAULT 10000.0 /* Llama 1/2, GPT-NeoX; Llama 3's presets say 500000 */
/* The MLP's GELU (model.activation): GPT-2's tanh approximation (gelu_new),
 * or the exact erf one (Hugging Face's "gelu": BERT, ViT). */
typedef enum { ACT_GELU_TANH = 0, ACT_GELU = 1 } activation_kind;
#define JOB_NORM_EPS_DEFAULT 1e-5 /* GPT-2's layernorm eps */
/* How a block computes its attention core (model.attention). fused: flash-
 * attention style, the online softmax over blocks of keys, keeping each row's
 * log-sum-exp for backward (no [seq, seq] matrix in memory); naive: the
 * softmax probabilities [heads, seq, seq] materialised and kept, as Megatron
 * before flash attention (Korthikanti et al.'s activation counts model it).
 * The same function: a checkpoint of either loads under the other. fused is
 * 0, so a job_model not made by the loader computes fused. */
typedef enum { ATTN_FUSED = 0, ATTN_NAIVE = 1 } attention_kind;

/* train.lora: LoRA (Hu et al. 2021) as PEFT computes it, y = W x +
 * (alpha / rank) B A dropout(x), on the linear layers `targets` names; the
 * base weights are frozen (no gradients, no optimizer state), the adapters
 * A [rank, in] and B [out, rank] are what trains (runtime/model/lora.c). On
 * when rank > 0 (any train.lora key given turns it on with PEFT's defaults
 * for the rest: rank 8, alpha 8, dropout 0, targets [q, v]). init_from: a
 * PEFT adapter folder (adapter_config.json + adapter_model.safetensors)
 * whose adapters the run starts from; "" = none. */
enum {
    LORA_Q = 1 << 0, LORA_K = 1 << 1, LORA_V = 1 << 2, LORA_O = 1 << 3,
    LORA_GATE = 1 << 4, LORA_UP = 1 << 5, LORA_DOWN = 1 << 6
};
#define LORA_N_TARGETS 7
typedef struct {
    int rank;
    double alpha;
    double dropout; /* [0, 1) */
    int targets;    /* LORA_* bits */
    char init_from[JOB_PATH_MAX];
} job_lora;


/* model.moe: a mixture of experts in place of the MLP of some blocks
 * (runtime/model/moe.c; dtrun-job(5) MIXTURE OF EXPERTS). experts 0: none
 * (the section absent), and every other field is then unused.
 *
 * Which blocks: block i (0-based) is MoE when i >= first_dense and
 * (i - first_dense) % every == 0 (job_moe_block): every block (every 1,
 * first_dense 0), every other one from the first (every 2: Megatron's
 * moe_layer_freq 2) or from the second (first_dense 1, every 2: Qwen2-MoE's
 * decoder_sparse_step 2), all but the first K (first_dense K: DeepSeek-V3's
 * first_k_dense_replace).
 *
 * The router scores each token's experts in fp32 (its logits come out of the
 * GEMM in fp32 under bf16 too): softmax over the experts (Mixtral, Switch) or
 * sigmoid of each (DeepSeek-V3); it keeps the top_k experts by score (+ the
 * load-balancing bias), ties to the lower expert; their weights are the
 * scores, divided by their sum with norm_top_k (Mixtral, DeepSeek-V3).
 *
 * capacity_factor 0: dropless (every choice is computed). > 0: each expert
 * computes at most ceil(capacity_factor * seq_len * top_k / experts) tokens of
 * each sample, the sample's first ones by position (job_moe_capacity); the
 * rest of its choices are dropped (the token keeps its residual and its other
 * experts). Per sample, so the same tokens drop whatever the layout. */
typedef enum { ROUTER_SOFTMAX = 0, ROUTER_SIGMOID = 1 } router_kind;
typedef struct {
    int experts;             /* E routed experts; 0 = no MoE */
    int top_k;               /* experts per token (default 2) */
    int d_ff_expert;         /* each expert's hidden width (default model.d_ff) */
    int shared_experts;      /* always-on experts of d_ff_expert each, one MLP of
                                shared_experts x d_ff_expert (DeepSeek's); default 0 */
    int every, first_dense;  /* which blocks (above; default 1 and 0) */
    router_kind router;      /* softmax (default) or sigmoid */
    int norm_top_k;          /* 1 (default): the top_k weights divided by their sum */
    double aux_loss_coef;    /* Switch / GShard load-balancing loss per sample (default 0.01) */
    double bias_update_rate; /* DeepSeek-V3's auxiliary-loss-free bias step (default 0: off) */
    double capacity_factor;  /* 0 (default): dropless */
} job_moe;

/* model.mla: DeepSeek-V2/V3's multi-head latent attention in place of a
 * Llama block's q, k, v and o (kv_lora_rank 0: none, the section absent).
 * Queries come through a low-rank q_lora_rank latent (0: straight from the
 * stream), keys and values through one kv_lora_rank latent shared by the
 * heads plus a qk_rope_head_dim rotary key; each head's query and key are
 * qk_nope_head_dim + qk_rope_head_dim wide, its value v_head_dim. Counted
 * by --dry-run and --plan (parameters, FLOPs, memory, time); the model does
 * not compute it yet (model.h model_unsupported). */
typedef struct {
    int q_lora_rank, kv_lora_rank;
    int qk_rope_head_dim, qk_nope_head_dim, v_head_dim; /* defaults 64, 128, 128 (DeepSeek-V3's) */
} job_mla;

typedef struct {
    model_kind kind;
    char preset[JOB_NAME_MAX]; /* "" when none; e.g. gpt2-124m, vit-b16, gpt-tiny */
    int n_layer;
    int n_head;
    int d_model;
    int d_ff;          /* default 4 * d_model (llama: the SwiGLU's hidden size) */
    /* GPT and Llama (the language models) */
    int vocab_size;    /* 256 for byte-level text, 50257 for GPT-2 tokens */
    int seq_len;       /* tokens per sequence (block size) */
    /* Llama: key/value heads of grouped-query attention (n_head a multiple of
     * it; n_head: multi-head, 1: multi-query), the rotary embedding's base,
     * the LM head tied to wte or its own matrix (default: its own), and the
     * positions the model takes (>= seq_len; default seq_len: generation's
     * longest sequence, config.json's max_position_embeddings). 0 / 0.0 in a
     * struct not made by the loader: n_head, JOB_ROPE_THETA_DEFAULT, seq_len
     * (read them through job_model_kv_heads, job_model_rope_theta,
     * job_model_max_positions). */
    int n_kv_head;
    double rope_theta;
    int tie_embeddings;
    int max_positions;
    /* ViT */
    int image_size;    /* square images */
    int patch_size;
    int channels;
    int n_classes;
    /* Both kinds: the MLP's GELU and the layernorms' eps (model.activation,
     * model.norm_eps). Defaults: GPT-2's tanh GELU and 1e-5; Hugging Face's ViT
     * uses the exact GELU and 1e-12 (model.init_from takes them from
     * config.json). norm_eps 0 (a struct not made by the loader) means the
     * default: read it through job_model_norm_eps. */
    activation_kind activation;
    double norm_eps;
    /* GPT: rows of logits the LM head computes at a time (model.head_chunk_rows;
     * 0 = auto, model_head_chunk_rows). Memory and time only: the loss is the
     * same within fp32 rounding whatever it is. */
    int head_chunk_rows;
    attention_kind attention; /* model.attention: fused (default) or naive */
    /* model.init_from: a Hugging Face folder (config.json + model.safetensors or
     * a sharded index) whose weights the run starts from; "" = none. Its
     * config.json fills the shape keys (jobspec_init_from.c). */
    char init_from[JOB_PATH_MAX];
    /* train.lora (the keys live in the train section; the adapters are
     * parameters of the model, so the model's layout reads them here). */
    job_lora lora;
    /* Derived, not a key: 1 when the job's data is packed instruction samples
     * (data.kind sft). The model then takes each token's position in its
     * sample and its sample's segment with every batch (model_batch) and
     * keeps them per micro-batch (model_acts_sizes counts them). */
    int packed;
    job_moe moe;             /* model.moe (experts 0: none) */
    job_mla mla;             /* model.mla (kv_lora_rank 0: none) */
} job_model;

/* Whether the blocks' attention is multi-head latent attention (model.mla). */
static inline int job_model_mla(const job_model *m) { return m->mla.kv_lora_rank > 0; }

/* Whether block `layer` (0-based) is an MoE block (job_moe above). */
static inline int job_moe_block(const job_model *m, int layer)
{
    const job_moe *e = &m->moe;
    int every = e->every > 0 ? e->every : 1;
    return e->experts > 0 && layer >= e->first_dense && (layer - e->first_dense) % every == 0;
}
/* How many blocks are. */
static inline int job_moe_layers(const job_model *m)
{
    int n = 0;
    for (int i = 0; i < m->n_layer; i++) n += job_moe_block(m, i);
    return n;
}
/* Tokens an expert computes at most from one sample of `tokens` tokens:
 * ceil(capacity_factor * tokens * top_k / experts), at least 1; 0 when
 * dropless (capacity_factor 0). */
static inline int job_moe_capacity(const job_moe *e, int tokens)
{
    if (!(e->capacity_factor > 0) || e->experts < 1) return 0;
    double c = e->capacity_factor * (double)tokens * (double)e->top_k / (double)e->experts;
    long n = (long)c;
    if ((double)n < c) n++;
    if (n > (long)tokens) n = tokens; /* one sample holds no more */
    return n < 1 ? 1 : (int)n;
}

typedef enum {
    DATA_SYNTHETIC = 0, /* deterministic random tokens / images */
    DATA_TEXT,          /* any file, byte-level tokens */
    DATA_TOKENS,        /* llm.c token shards: 1024-byte header, uint16 or uint32 ids (lib/text/token_shard.h) */
    DATA_IDX,           /* IDX images + labels (MNIST / Fashion-MNIST), optionally .gz */
    DATA_SFT            /* instruction data: SFT shards (loss mask, sample starts), packed into windows */
} data_kind;
/* data.long_samples: an SFT sample longer than seq_len stops the run at open,
 * or is cut to its first seq_len tokens. */
typedef enum { LONG_REFUSE = 0, LONG_TRUNCATE } long_samples_kind;

typedef struct {
    data_kind kind;
    char train_path[JOB_PATH_MAX];        /* text / tokens / IDX images */
    char train_labels[JOB_PATH_MAX];      /* IDX labels */
    char val_path[JOB_PATH_MAX];          /* "" = split val_fraction off the train file */
    char val_labels[JOB_PATH_MAX];
    double val_fraction;                  /* used when val_path is "" (text, tokens) */
    long synthetic_size;                  /* samples (ViT) or tokens (GPT) for synthetic;
                                             default 4096 images / 1048576 tokens */
    long_samples_kind long_samples;       /* sft: a sample longer than seq_len */
} job_data;

typedef enum { LR_COSINE = 0, LR_LINEAR, LR_CONSTANT } lr_schedule;
typedef enum { PREC_FP32 = 0, PREC_BF16 } precision_kind;
/* The element type of gradients (train.grad_dtype) and of the gradient
 * collectives (parallel.reduce_dtype). auto resolves when the job loads: the
 * gradients follow train.precision (bf16 under bf16: 16 bytes per parameter with
 * AdamW; fp32 is Megatron's fp32 accumulation, 18), the reduction follows the
 * gradients. Never auto after job_load_*. */
typedef enum { DTYPE_AUTO = 0, DTYPE_FP32, DTYPE_BF16 } dtype_kind;
/* block: keep each block's input, recompute the whole block in backward.
 * selective (Megatron's): keep everything but the attention probabilities,
 * recompute those from the kept qkv in backward. elementwise (Megatron-Core's
 * recompute_modules "layernorm" and the MLP activation's): keep everything
 * but the norms' outputs and (Llama) the SwiGLU product, recompute those in
 * backward from the kept norm inputs and gate|up (elementwise, no GEMM). */
typedef enum { RECOMPUTE_NONE = 0, RECOMPUTE_BLOCK, RECOMPUTE_SELECTIVE, RECOMPUTE_ELEMENTWISE } recompute_kind;
/* auto: cuda when the CUDA backend finds a device, else cpu. */
typedef enum { DEVICE_AUTO = 0, DEVICE_CPU, DEVICE_CUDA } device_kind;

typedef struct {
    int steps;
    int global_batch;      /* sequences (GPT) or images (ViT) per optimizer step */
    int micro_batch;       /* per data-parallel rank per micro-step */
    int grad_accum;        /* derived: global_batch / (micro_batch * dp) */
    double lr;
    double min_lr;         /* floor of the decay, default lr / 10 */
    int warmup;            /* steps of linear warmup */
    lr_schedule schedule;
    double weight_decay;
    double beta1, beta2, eps;
    double grad_clip;      /* 0 = off; clip by the global L2 norm */
    precision_kind precision;
    dtype_kind grad_dtype; /* fp32 or bf16 (bf16 only with precision bf16) */
    device_kind device;    /* where the worker computes (kernels' ops table) */
    unsigned long long seed;
    recompute_kind recompute;
    int eval_every;        /* 0 = only at the end */
    int eval_batches;      /* batches of global_batch size per evaluation */
    int threads;           /* 0 = OMP_NUM_THREADS or all cores */
    int skip_nonfinite;    /* 1: skip a step whose loss is not finite instead of stopping */
    int offload;           /* OFFLOAD_* bits: what lives in host memory (train.offload) */
    int cuda_graphs;       /* 1: the step runs on device scalars and, on CUDA, is replayed as graphs */
} job_train;

/* train.offload: a list of what moves from the device to host memory.
 * optimizer: AdamW's m and v and the fp32 master (a host copy of the
 * parameters in fp32), updated on the host (ZeRO-Offload). */
enum { OFFLOAD_OPTIMIZER = 1 << 0, OFFLOAD_PARAMS = 1 << 1, OFFLOAD_ACTIVATIONS = 1 << 2 };

typedef enum { SHARD_NONE = 0, SHARD_ZERO1, SHARD_ZERO2, SHARD_FSDP, SHARD_HSDP } shard_mode;
typedef enum { PP_GPIPE = 0, PP_1F1B, PP_INTERLEAVED, PP_ZB_H1 } pp_schedule_kind;
/* parallel.cp_mode: how context parallelism's attention sees the other ranks'
 * keys and values. ring: passed around the cp group block by block while each
 * rank computes (Megatron-Core's p2p ring, torchtitan's ring attention). */
typedef enum { CP_RING = 0 } cp_mode_kind;

typedef struct {
    int dp, tp, pp;
    int dp_auto;           /* `dp: auto`: dp = world / (tp * pp), known when the workers
                              start (elastic MIN:MAX jobs); dp is 1 until
                              job_resolve_world sets it */
    shard_mode mode;
    pp_schedule_kind pp_schedule;
    int microbatches;      /* pipeline microbatches per step; default grad_accum */
    int virtual_stages;    /* chunks per pp rank for interleaved, default 2 there, else 1 */
    int sequence_parallel; /* 0/1, with tp > 1 */
    int tp_overlap;        /* 0/1: the column layers' backward collectives beside their GEMMs (default 1) */
    int tp_split;          /* >= 1: under SP the forward's GEMMs in this many pieces of rows, their
                              collectives beside the next piece (1, the default: whole GEMMs) */
    int cp;                /* context parallel: each sample's sequence split over cp ranks
                              (GPT, fp32); world = dp x cp x pp x tp */
    cp_mode_kind cp_mode;
    int ep;                /* expert parallel (model.moe): the routed experts split over ep ranks
                              folded into dp x cp (MoE Parallel Folding): each ep group is ep
                              ranks of one dp x cp group, the experts' data-parallel group the
                              dp x cp / ep ranks holding the same experts (mesh.h MESH_EP,
                              MESH_EDP); default 1 */
    int bucket_mb;         /* DDP bucket size in MiB, default 25 */
    dtype_kind reduce_dtype; /* the gradient collectives' type: fp32, or bf16 (half the bytes) */
} job_parallel;

typedef struct {
    char dir[JOB_PATH_MAX]; /* "" = no checkpoints */
    int every;              /* steps; 0 = only at the end (when dir is set) */
    int keep;               /* last K kept, default 2 */
    char resume[JOB_PATH_MAX]; /* "auto", "never" or a path */
    char allow_changes[512];   /* job keys a resume may change although they make another
                                  run ("train.lr,train.seed"), or "all"; "" = none
                                  (runtime/train/resume_diff.h) */
} job_checkpoint;

typedef enum { PROGRESS_AUTO = 0, PROGRESS_ON, PROGRESS_OFF } progress_mode;

typedef struct {
    char metrics[JOB_PATH_MAX]; /* JSONL file, "" = none */
    int every;                  /* print / record every N steps, default 1 */
    progress_mode progress;
    char trace[JOB_PATH_MAX];   /* Chrome-trace JSON, "" = none */
    char tensorboard[JOB_PATH_MAX]; /* directory of TensorBoard event files, "" = none */
} job_log;

/* launch: options the command line may also give; the command line wins.
 * Strings are "" and numbers are -1 when the file does not set them. */
typedef struct {
    char nproc_per_node[JOB_NAME_MAX]; /* N | cpu | gpu | auto */
    char nnodes[JOB_NAME_MAX];         /* N | MIN:MAX */
    char rdzv_endpoint[JOB_PATH_MAX];
    char rdzv_id[JOB_NAME_MAX];
    int max_restarts;
    char log_dir[JOB_PATH_MAX];
} job_launch;

/* Where the file gave each key, so that checks made after loading (the
 * launcher's, with the number of processes it starts; the worker's) still answer
 * FILE:LINE:COL. Line 0: not in the file (a default, or a command-line
 * override). Slots are field ids (lib/job/jobspec_fields.h). */
#define JOB_KEY_SLOTS 128
#define JOB_SECTION_SLOTS 12
typedef struct {
    int line, col;
} job_pos;
typedef struct {
    job_pos key[JOB_KEY_SLOTS];
    job_pos section[JOB_SECTION_SLOTS];
} job_where;

typedef struct {
    char path[JOB_PATH_MAX]; /* the file it came from */
    job_model model;
    job_data data;
    job_train train;
    job_parallel parallel;
    job_checkpoint checkpoint;
    job_log log;
    job_launch launch;
    job_where where;         /* last: two loads of the same job compare equal up to here */
} job_spec;

/* Exit status for a bad job file (and bad flags): documented in dtrun(1). */
#include "lib/util/exit_codes.h"

/* Fill *job with the defaults (a tiny GPT on synthetic data); dtrun-job(5)
 * lists them. The loader starts from these, then derives what the file leaves
 * out: micro_batch = global_batch / dp, grad_accum, microbatches = grad_accum,
 * min_lr = lr / 10, d_ff = 4 * d_model, virtual_stages = 2 when interleaved. */
void job_defaults(job_spec *job);

/* Parse and validate. On failure returns -1 and writes one line, without a
 * trailing newline, to err: "FILE:LINE:COL: what (why)[; did you mean 'x'?]".
 * LINE and COL are 1-based. A file that cannot be read gives
 * "FILE: cannot open (strerror)". *job is only meaningful on success. */
int job_load_file(job_spec *job, const char *path, char *err, size_t errlen);

/* Same, with overrides "SECTION.KEY=VALUE" (e.g. "train.steps=5") applied as
 * if the file had said so: they win over the file's keys, and derived values
 * (micro_batch, grad_accum, microbatches, min_lr, d_ff, ...) follow them. An
 * error about an override reads "FILE: override 'train.steps=x': what". */
int job_load_file_overrides(job_spec *job, const char *path, const char *const *overrides,
                            int n_overrides, char *err, size_t errlen);

/* Same, from memory; `name` stands for the file name in messages. */
int job_load_string(job_spec *job, const char *text, size_t len, const char *name,
                    char *err, size_t errlen);

/* Checks the combination (divisibility, ranges) of an already filled job — also
 * used after the command line overrides a field. world = dp * tp * pp. Messages
 * start with "FILE:LINE:COL: " at the key to blame when the file gave it (or
 * its section), else "FILE: ". */
int job_validate(const job_spec *job, char *err, size_t errlen);

/* Same as job_load_string, with overrides as in job_load_file_overrides. */
int job_load_string_overrides(job_spec *job, const char *text, size_t len, const char *name,
                              const char *const *overrides, int n_overrides, char *err,
                              size_t errlen);

/* `parallel.dp: auto`: with the world size the launcher gave (WORLD_SIZE), sets
 * dp = world / (tp * pp) and re-derives grad_accum = global_batch / (micro_batch
 * x dp) and microbatches, so the global batch stays the same on any number of
 * nodes. A job without dp: auto is left alone. Returns 0, or -1 with "FILE: what"
 * (world not a multiple of tp x pp, global_batch not divisible). */
int job_resolve_world(job_spec *job, int world, char *err, size_t errlen);

/* The job's paths, before any worker starts: data files exist and are
 * readable (exit status 3 otherwise), checkpoint.resume's path exists and
 * checkpoint.dir is or can be made a writable directory (6), log.metrics and
 * log.trace can be written (2). Relative paths are the launcher's working
 * directory's, which the workers inherit; the line says so. 0, or -1 with
 * *exit_code and "FILE:LINE:COL: data.train 'x.bin': No such file or
 * directory (relative to /dir, the directory dtrun runs in)". */
int job_check_paths(const job_spec *job, int *exit_code, char *err, size_t errlen);

/* A list of job keys as checkpoint.allow_changes and --allow-changes take
 * them: "section.key" names separated by commas (spaces around them are
 * fine), or "all". 0, or -1 with why: "'train.lrr' is not a job key; did you
 * mean 'train.lr'?". */
int job_key_list_check(const char *list, char *why, size_t n);
/* Whether such a list names `full` ("train.lr"); "all" names every key. */
int job_key_list_has(const char *list, const char *full);

/* Print the resolved job as YAML that job_load_string reads back to the same struct. */
void job_print(const job_spec *job, FILE *out);

/* Names of enum values as the job file spells them ("?" when out of range). */
const char *job_model_kind_name(model_kind k);
/* "gelu_tanh" or "gelu". */
const char *job_activation_name(activation_kind a);
/* "fused" or "naive". */
const char *job_attention_name(attention_kind a);
/* "softmax" or "sigmoid". */
const char *job_router_name(router_kind r);
/* m->norm_eps, or JOB_NORM_EPS_DEFAULT when it is 0 (not set). */
double job_model_norm_eps(const job_model *m);
/* A language model (gpt or llama: tokens in, next-token logits out). */
static inline int job_model_is_lm(const job_model *m) { return m->kind != MODEL_VIT; }
/* Llama's values with their defaults when 0 (see job_model): the key/value
 * heads (n_head for gpt and vit), the rotary base, the positions the model
 * takes (seq_len unless a llama says more). */
int job_model_kv_heads(const job_model *m);
double job_model_rope_theta(const job_model *m);
int job_model_max_positions(const job_model *m);
/* 1 when the LM head is wte itself: always for gpt, tie_embeddings for llama. */
int job_model_tied_head(const job_model *m);
/* train.lora is on (rank > 0), and the name of target bit i ("q", "k", "v",
 * "o", "gate", "up", "down"; NULL past the end). */
static inline int job_lora_on(const job_model *m) { return m->lora.rank > 0; }
const char *job_lora_target_name(int i);
/* The name PEFT gives target bit i's modules on model m (Llama: "q_proj" ...
 * "down_proj"; GPT: dtrun's own "q" ... "down", its q, k and v being one
 * c_attn). NULL past the end (jobspec_lora.c). */
const char *job_lora_module_name(const job_model *m, int i);
const char *job_data_kind_name(data_kind k);
const char *job_long_samples_name(long_samples_kind k);
const char *job_lr_schedule_name(lr_schedule s);
const char *job_device_name(device_kind d);
const char *job_precision_name(precision_kind p);
const char *job_dtype_name(dtype_kind d);
const char *job_recompute_name(recompute_kind r);
const char *job_shard_mode_name(shard_mode m);
const char *job_cp_mode_name(cp_mode_kind m);
const char *job_pp_schedule_name(pp_schedule_kind s);
const char *job_progress_name(progress_mode p);

/* Model presets: the i-th name (NULL past the end), and the shape one names
 * (0, or -1 when there is no such preset). See the table in dtrun-job(5). */
const char *job_preset_name(int i);
int job_preset_model(const char *name, job_model *out);

#endif
