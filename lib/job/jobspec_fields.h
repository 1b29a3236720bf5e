/* jobspec_fields.h — the table of job-file keys.
 *
 * One row per YAML key: its section, name, type, where it lives in job_spec,
 * its range and, for enums, the value names. The loader, the validator and the
 * printer all walk this table, so a key is declared once. Aliases are other
 * tools' names for the same thing (Megatron, HF, torchrun, nanoGPT); they are
 * never accepted, only used to say "did you mean". */
#ifndef DTRUN_JOBSPEC_FIELDS_H
#define DTRUN_JOBSPEC_FIELDS_H

#include <stddef.h>
#include <stdio.h>
#include "lib/job/jobspec.h"

typedef enum {
    SEC_MODEL = 0, SEC_DATA, SEC_TRAIN, SEC_PARALLEL, SEC_CHECKPOINT, SEC_LOG, SEC_LAUNCH,
    SEC_MOE,  /* "model.moe": a mapping inside the model section (job_section_parent) */
    SEC_MLA,  /* "model.mla": likewise */
    SEC_LORA, /* "train.lora": a mapping inside the train section */
    SEC_COUNT
} job_section;

typedef enum {
    FID_MODEL_KIND = 0, FID_MODEL_PRESET, FID_N_LAYER, FID_N_HEAD, FID_D_MODEL, FID_D_FF,
    FID_VOCAB_SIZE, FID_SEQ_LEN, FID_IMAGE_SIZE, FID_PATCH_SIZE, FID_CHANNELS, FID_N_CLASSES,
    FID_ACTIVATION, FID_NORM_EPS, FID_ATTENTION, FID_INIT_FROM, FID_HEAD_CHUNK_ROWS,
    FID_N_KV_HEAD, FID_ROPE_THETA, FID_TIE_EMBEDDINGS, FID_MAX_POSITIONS,
    FID_DATA_KIND, FID_DATA_TRAIN, FID_DATA_TRAIN_LABELS, FID_DATA_VAL, FID_DATA_VAL_LABELS,
    FID_VAL_FRACTION, FID_SYNTHETIC_SIZE, FID_LONG_SAMPLES,
    FID_STEPS, FID_GLOBAL_BATCH, FID_MICRO_BATCH, FID_LR, FID_MIN_LR, FID_WARMUP, FID_SCHEDULE,
    FID_WEIGHT_DECAY, FID_BETA1, FID_BETA2, FID_EPS, FID_GRAD_CLIP, FID_PRECISION, FID_GRAD_DTYPE, FID_DEVICE, FID_SEED,
    FID_RECOMPUTE, FID_EVAL_EVERY, FID_EVAL_BATCHES, FID_THREADS, FID_SKIP_NONFINITE, FID_OFFLOAD,
    FID_CUDA_GRAPHS, FID_LORA_RANK, FID_LORA_ALPHA, FID_LORA_DROPOUT, FID_LORA_TARGETS, FID_LORA_INIT_FROM,
    FID_DP, FID_TP, FID_PP, FID_MODE, FID_PP_SCHEDULE, FID_MICROBATCHES, FID_VIRTUAL_STAGES,
    FID_SEQUENCE_PARALLEL, FID_TP_OVERLAP, FID_TP_SPLIT, FID_CP, FID_CP_MODE, FID_EP, FID_BUCKET_MB, FID_REDUCE_DTYPE,
    FID_CKPT_DIR, FID_CKPT_EVERY, FID_CKPT_KEEP, FID_CKPT_RESUME, FID_CKPT_ALLOW_CHANGES,
    FID_LOG_METRICS, FID_LOG_EVERY, FID_LOG_PROGRESS, FID_LOG_TRACE, FID_LOG_TENSORBOARD,
    FID_NPROC_PER_NODE, FID_NNODES, FID_RDZV_ENDPOINT, FID_RDZV_ID, FID_MAX_RESTARTS,
    FID_LOG_DIR,
    FID_MOE_EXPERTS, FID_MOE_TOP_K, FID_MOE_D_FF_EXPERT, FID_MOE_SHARED_EXPERTS, FID_MOE_EVERY,
    FID_MOE_FIRST_DENSE, FID_MOE_ROUTER, FID_MOE_NORM_TOP_K, FID_MOE_AUX_LOSS_COEF, FID_MOE_BIAS_UPDATE_RATE,
    FID_MOE_CAPACITY_FACTOR,
    FID_MLA_Q_LORA_RANK, FID_MLA_KV_LORA_RANK, FID_MLA_QK_ROPE_HEAD_DIM, FID_MLA_QK_NOPE_HEAD_DIM,
    FID_MLA_V_HEAD_DIM,
    FID_COUNT
} job_fid;

typedef enum {
    FT_INT,      /* int */
    FT_LONG,     /* long */
    FT_U64,      /* unsigned long long */
    FT_DOUBLE,   /* double, finite */
    FT_BOOL,     /* int 0/1, written true/false */
    FT_ENUM,     /* int-sized enum, written as names[value] */
    FT_FLAGS,    /* int bit set: a YAML sequence (or comma list) of names[bit] */
    FT_STR,      /* char[size]; null or empty = "" */
    FT_PRESET,   /* char[size], a preset name */
    FT_RESUME,   /* char[size]: auto | never | a path */
    FT_NPROC,    /* char[size]: N | cpu | gpu | auto */
    FT_NNODES,   /* char[size]: N | MIN:MAX */
    FT_ENDPOINT, /* char[size]: host[:port] */
    FT_KEYS      /* char[size]: job keys "section.key" joined by commas (a YAML sequence
                    arrives joined so), or "all" */
} field_type;

/* Which model kinds a key means something for: every kind, the language
 * models (gpt, llama), vit, llama, or the kinds with a GELU MLP (gpt, vit). */
typedef enum { ONLY_ANY = 0, ONLY_LM, ONLY_VIT, ONLY_LLAMA, ONLY_GELU } field_only;

typedef struct {
    job_section section;
    const char *key;           /* the YAML key */
    field_type type;
    size_t offset;             /* into job_spec */
    size_t size;               /* strings: buffer size */
    const char *const *names;  /* FT_ENUM: NULL-terminated, index = value; FT_FLAGS: index = bit */
    const char *const *value_aliases; /* FT_ENUM: per value, "a,b" suggesting it, or NULL */
    const char *const *value_former;  /* FT_ENUM: per value, "a,b" it was called before, taken as
                                       * it (old job files and checkpoints), or NULL */
    double lo, hi;             /* numeric range (inclusive unless *_open) */
    int lo_open, hi_open;
    const char *aliases;       /* comma-separated names suggesting this key */
} field_def;

extern const field_def job_fields[FID_COUNT];
extern const char *const job_section_names[SEC_COUNT];

/* The field of `section` called `key` (exact), or -1. */
int job_field_find(job_section section, const char *key, size_t len);

/* "section.key" of a field, e.g. "train.lr". */
void job_field_full_name(int fid, char *out, size_t n);

/* The section called `name` (exact), or -1. A nested section's name is its
 * full one ("model.moe"): what messages and overrides say. */
int job_section_find(const char *name, size_t len);
/* The section a nested one sits in as a key (SEC_MOE: SEC_MODEL, key "moe";
 * SEC_LORA: SEC_TRAIN, key "lora"),
 * or -1 for a top-level one. */
int job_section_parent(int sec);
/* The key a nested section has in its parent ("moe"). */
const char *job_section_key(int sec);

/* Pointer to the field's storage inside job. */
void *job_field_ptr(job_spec *job, int fid);
const void *job_field_cptr(const job_spec *job, int fid);

/* Whether the field means anything for this job: vocab_size, seq_len and
 * head_chunk_rows are for the language models (gpt, llama), image_size,
 * patch_size, channels and n_classes ViT-only, n_kv_head, rope_theta,
 * tie_embeddings and max_positions Llama-only, activation (the GELU) for gpt
 * and vit. */
int job_field_applies(const job_spec *job, int fid);
/* The kinds it applies to, as words: "gpt and llama", "vit", ... */
const char *job_field_kinds_text(int fid);

/* Whether the field holds its "not set" value: launch keys are -1 or "" until
 * the file sets them (the command line fills the rest). */
int job_field_unset(const job_spec *job, int fid);

/* The next name of a comma list [*s, end), spaces and tabs around it trimmed,
 * empty names skipped: 1 with the name in [*a, *b) and *s past it; 0 at the
 * end. (list-valued keys: FT_FLAGS, FT_KEYS) */
int job_list_next(const char **s, const char *end, const char **a, const char **b);

/* The field's value as the job file spells it (strings double-quoted), as
 * job_print writes it. */
void job_field_print(FILE *out, const job_spec *job, int fid);

/* Describe the range, e.g. "must be >= 1" or "must be in [0, 1)". */
void job_field_range_text(int fid, char *out, size_t n);

/* Check a numeric value against the range: 0 inside, -1 outside. */
int job_field_in_range(int fid, double v);

/* "a, b or c" for an enum's names. */
void job_field_enum_list(int fid, char *out, size_t n);

/* Checks of the string kinds with a format (resume, nproc, nnodes, endpoint);
 * 0 when fine, else -1 and why in `why`. Empty strings are fine ("not set")
 * except for resume. */
int job_field_check_string(int fid, const char *s, char *why, size_t n);

#endif
