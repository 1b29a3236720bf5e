/* ckpt.h — sharded, atomic checkpoints that resume under any layout.
 *
 * On disk (DIR = job.checkpoint.dir, shared by every node):
 *   DIR/latest                            "step_000120\n", replaced atomically
 *   DIR/step_000120/rank_00003.safetensors  what rank 3 holds
 *   DIR/step_000120/index.json            written last: job, layout, step, seed,
 *                                         loss tail, AdamW step count, size +
 *                                         XXH3-64 of each rank file
 * A step directory counts only once its index.json exists, and `latest` only ever
 * names such a directory, so a crash at any moment leaves the previous checkpoint
 * loadable. Every file is written as NAME.tmp, fsynced, renamed, and the
 * directory fsynced.
 *
 * Self-describing pieces. A rank file holds F32 tensors named like "param/wte",
 * "adam_m/h.0.attn.qkv.w", "adam_v/..." (a second piece of the same name in one
 * file, e.g. the tied head's copy of wte, is stored as "NAME#1"). For each
 * tensor the file's __metadata__ has a key "place/TENSOR" whose value is JSON:
 *   {"name": "param/wte", "global_shape": [V, C], "split": "rows",
 *    "groups": 1, "tp_rank": 1, "tp_size": 2, "lo": 0, "hi": 4096}
 * i.e. the tensor is elements [lo, hi) (row-major) of tp rank tp_rank's local
 * shard of the global tensor, where
 *   rows: each of `groups` equal row groups is split in tp_size contiguous parts,
 *         part r = rows [floor(n*r/tp), floor(n*(r+1)/tp)) of the group (Megatron's
 *         column parallel; qkv has 3 groups: q, k, v split by heads);
 *   cols: dim 1 split the same way (row parallel);
 *   none: the whole tensor (tp_rank 0, tp_size 1).
 * Expert parallelism adds "ep_rank" and "ep_size" (absent: 0 and 1): the
 * global rows are cut into ep_size equal blocks first (an ep rank's experts)
 * and the piece lies in block ep_rank, which the split above then divides as
 * if it were the whole tensor (groups counting the block's row groups).
 * A tensor-parallel shard is [0, local numel); a ZeRO/FSDP rank's flat slice of
 * a unit becomes one piece per tensor it overlaps, with a partial [lo, hi). So
 * any set of rank files tells which global elements each piece holds, and a
 * reader rebuilds any global tensor, or any new rank's slice of it, from
 * whichever files hold its elements; a piece held twice (replicas) is fine,
 * an element held by none is an error.
 *
 * Writing, on every rank: ckpt_write_rank(); then a barrier; then rank 0 calls
 * ckpt_commit(), which hashes every rank file, writes index.json, moves
 * `latest` and removes old steps (keep K). ckpt_save() does the three.
 *
 * Errors: -1 with one line "PATH: what (why)" in err. */
#ifndef DTRUN_CKPT_H
#define DTRUN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "lib/job/jobspec.h"
#include "runtime/model/model.h"

#define CKPT_NAME_MAX 128

typedef enum { CKPT_SPLIT_NONE = 0, CKPT_SPLIT_ROWS, CKPT_SPLIT_COLS } ckpt_split;

/* Which global elements a piece holds (see above). */
typedef struct {
    int ndim;          /* 1 or 2 */
    int64_t shape[2];  /* global; shape[1] = 1 when ndim = 1 */
    ckpt_split split;
    int groups;        /* >= 1; rows split per group */
    int tp_rank, tp_size;
    uint64_t lo, hi;   /* elements [lo, hi) of the tp-local tensor */
    int ep_rank, ep_size; /* ep_size > 1: the rows' block ep_rank of ep_size equal blocks
                             first, the split applying within it (0 or 1: none) */
} ckpt_place;

typedef struct {
    char name[CKPT_NAME_MAX]; /* "param/NAME", "adam_m/NAME", "adam_v/NAME" */
    ckpt_place place;
    const float *data;        /* hi - lo floats */
} ckpt_piece;

/* Placement of elements [lo, hi) of a model parameter's local shard. */
void ckpt_place_of_param(const param_spec *p, int tp_rank, int tp_size, uint64_t lo, uint64_t hi,
                         ckpt_place *out);
/* Local numel of a placement's tp shard; global index of its local element i. */
uint64_t ckpt_place_local_numel(const ckpt_place *p);
uint64_t ckpt_place_global_index(const ckpt_place *p, uint64_t i);

/* The pieces of a flat slice [lo, hi) of a unit's buffer: one per tensor of the
 * unit (specs with their offsets, e.g. model_param() of that unit) that overlaps
 * it, named "PREFIX/NAME", data pointing into `slice` (which starts at element
 * lo). Whole units (DDP, TP, PP) are lo = 0, hi = unit numel. Appends at most
 * cap pieces to out; returns how many, or -1 when cap is too small. */
int ckpt_unit_slice_pieces(const char *prefix, const param_spec *specs, int n_specs, int tp_rank,
                           int tp_size, uint64_t lo, uint64_t hi, const float *slice,
                           ckpt_piece *out, int cap);

/* ---- writing ---- */

typedef struct {
    long step;
    unsigned long long seed;
    int dp, tp, pp, world;     /* world rank files are expected */
    int cp;                    /* context parallel ranks (0 or 1: none) */
    const char *mode;          /* "none", "zero1", "zero2", "fsdp", "hsdp" */
    const char *job_yaml;      /* the resolved job as YAML text (may be NULL) */
    const job_model *model;    /* model dims, needed by export (may be NULL) */
    const double *loss_tail;   /* the last losses, oldest first */
    int n_loss;
    long optim_step;           /* AdamW updates applied (steps minus skipped ones) */
    const char *pinned;        /* a step directory retention never deletes (the one
                                  checkpoint.resume: PATH names), or NULL; not stored */
    const char *provenance;    /* a JSON object's text, stored as it is (may be NULL) */
} ckpt_meta;

/* Rank `rank` writes DIR/step_S/rank_R.safetensors. Returns 0; 1 when step S is
 * already the committed `latest` (nothing written: a resumed job saving the step
 * it resumed from has nothing new); -1 on error (no file of this rank left). */
int ckpt_write_rank(const char *dir, long step, int rank, const ckpt_piece *pieces, int n,
                    char *err, size_t errlen);
/* Rank 0, after every rank's ckpt_write_rank returned: verifies and hashes the
 * meta->world rank files, writes index.json, points `latest` at the step and
 * keeps the newest `keep` committed steps at or before it (keep <= 0: all),
 * never deleting meta->pinned. Returns 0, 1 (already latest, as above) or -1. */
int ckpt_commit(const char *dir, const ckpt_meta *meta, int keep, char *err, size_t errlen);

/* All ranks: write, barrier, commit on rank 0. The barrier is called even after
 * a failed write, so no rank hangs; a rank whose write failed makes rank 0's
 * commit fail (its file is missing). barrier returns 0 on success. */
typedef int (*ckpt_barrier_fn)(void *ctx);
int ckpt_save(const char *dir, int rank, const ckpt_meta *meta, const ckpt_piece *pieces, int n,
              int keep, ckpt_barrier_fn barrier, void *ctx, char *err, size_t errlen);

/* Removes DIR's step directories without an index.json: saves cut short (a
 * full disk, a crash) that can never load. Only while no run writes DIR (the
 * launcher holds its lock). Returns how many, their names in removed. */
int ckpt_remove_incomplete(const char *dir, char *removed, size_t n);
/* The step `latest` names: 0 and *step set; 1 when DIR has no checkpoint; -1 on
 * a bad `latest` file (err set). For resume "auto". */
int ckpt_latest_step(const char *dir, long *step, char *err, size_t errlen);
/* A step directory's name, "step_000120"; and back: the step, or -1 when the
 * name is not one. A step directory is committed once it holds index.json. */
void ckpt_step_dirname(char *buf, size_t len, long step);
long ckpt_parse_step_dirname(const char *name);

/* ---- reading ---- */

typedef struct ckpt ckpt;

typedef struct {
    long step;                 /* data position too: batches are f(seed, step) */
    unsigned long long seed;
    int dp, tp, pp, world;
    int cp;                    /* 1 when the index does not say (before context parallelism) */
    char mode[16];
    const char *job_yaml;      /* "" when not recorded */
    int has_model;
    job_model model;
    const double *loss_tail;
    int n_loss;
    long optim_step;           /* AdamW updates applied; = step when not recorded */
    const char *provenance;    /* its JSON object's text; "" when not recorded */
} ckpt_info;

/* PATH is DIR (follows `latest`) or a step directory. Verifies index.json and
 * the size and checksum of every rank file ("…/rank_00001.safetensors: checksum
 * mismatch (corrupted shard)"), validates every file and every placement. */
int ckpt_open(const char *path, ckpt **out, char *err, size_t errlen);
/* Only index.json (step, layout, model, provenance), for checks before a run
 * starts: no rank file is read, and ckpt_read_* must not be called. */
int ckpt_open_index(const char *path, ckpt **out, char *err, size_t errlen);
void ckpt_close(ckpt *ck);
const char *ckpt_path(const ckpt *ck); /* the step directory */
const ckpt_info *ckpt_get_info(const ckpt *ck);

/* Logical tensor names ("param/wte", ...) in sorted order, and global shapes. */
int ckpt_tensor_count(const ckpt *ck);
const char *ckpt_tensor_name(const ckpt *ck, int i);
/* Global ndim (1 or 2), shape in shape[2]; -1 when absent. */
int ckpt_tensor_shape(const ckpt *ck, const char *name, int64_t shape[2]);

/* Elements want->[lo, hi) of want's tp-local shard of tensor `name`, into out
 * (hi - lo floats). want's global shape must match the stored one. */
int ckpt_read_slice(const ckpt *ck, const char *name, const ckpt_place *want, float *out,
                    char *err, size_t errlen);
/* The whole global tensor (numel floats). */
int ckpt_read_global(const ckpt *ck, const char *name, float *out, char *err, size_t errlen);
/* The inverse of ckpt_unit_slice_pieces: fill a new layout's flat slice. */
int ckpt_read_unit_slice(const ckpt *ck, const char *prefix, const param_spec *specs, int n_specs,
                         int tp_rank, int tp_size, uint64_t lo, uint64_t hi, float *slice,
                         char *err, size_t errlen);

/* ---- export (export.c) ---- */

typedef enum {
    CKPT_NAMES_AUTO = 0, /* by the model kind recorded in index.json */
    CKPT_NAMES_HF_GPT2,  /* transformers GPT2LMHeadModel: transformer.h.N.attn.c_attn.weight, ... */
    CKPT_NAMES_TIMM_VIT, /* timm VisionTransformer: blocks.N.attn.qkv.weight, ... */
    CKPT_NAMES_HF_VIT,   /* transformers ViTForImageClassification: vit.encoder.layer.N.attention.attention.query.weight, ... */
    CKPT_NAMES_HF_LLAMA, /* transformers LlamaForCausalLM: model.layers.N.self_attn.q_proj.weight, ... */
    CKPT_NAMES_HF_MIXTRAL /* transformers MixtralForCausalLM: ...block_sparse_moe.experts.E.w1.weight, ... */
} ckpt_naming;

/* One consolidated F32 safetensors file of the parameters under Hugging Face /
 * timm names and shapes (GPT-2 Conv1D weights transposed to [in, out]; the tied
 * LM head omitted, as save_pretrained does), metadata {"format": "pt"}; written
 * atomically. */
int ckpt_export(const ckpt *ck, const char *out_path, ckpt_naming naming, char *err,
                size_t errlen);
/* The same, in BF16 when bf16 (each fp32 value rounded to nearest even: a bf16
 * run's checkpoint holds its fp32 master, whose rounding its parameters are). */
int ckpt_export_as(const ckpt *ck, const char *out_path, ckpt_naming naming, int bf16, char *err,
                   size_t errlen);

/* A Hugging Face folder of the checkpoint's model: DIR/model.safetensors (as
 * ckpt_export_as) and DIR/config.json (GPT2Config's, ViTConfig's or
 * LlamaConfig's keys, from the model), DIR created when missing — what
 * model.init_from, `dtrun generate` and `dtrun eval` read back. Parameters of
 * more than max_shard_bytes (0: transformers' default, 5 GB) go to shard
 * files model-0000K-of-0000N.safetensors, whole tensors each, in the model's
 * order, with model.safetensors.index.json (metadata.total_size, weight_map),
 * as save_pretrained writes them. */
#define CKPT_HF_SHARD_DEFAULT 5000000000ull
int ckpt_export_hf_dir(const ckpt *ck, const char *dir, int bf16, char *err, size_t errlen);
/* A train.lora checkpoint (it holds the adapters; the base is its job's
 * model.init_from folder, or the seed's draw without one), export_lora.c:
 *  merged   DIR as ckpt_export_hf_dir writes it, each adapted weight W + (alpha
 *           / r) B A (in fp32, then the dtype), the rest the base's;
 *  adapter  DIR as PEFT's save_pretrained: adapter_config.json (r, lora_alpha,
 *           lora_dropout, target_modules, base_model_name_or_path) and
 *           adapter_model.safetensors under PEFT's names (hf_names.h), which
 *           train.lora.init_from reads back. A GPT's q, k, v adapters have no
 *           PEFT form (GPT-2's c_attn is one module): refused.
 * A checkpoint without LoRA is refused (plain export is the way). */
int ckpt_export_lora(const ckpt *ck, const char *dir, int adapter, int bf16, char *err, size_t errlen);
int ckpt_export_hf_dir_sharded(const ckpt *ck, const char *dir, int bf16, uint64_t max_shard_bytes, char *err,
                               size_t errlen);

#endif
