/* ckpt_internal.h — what the checkpoint files share: placement encoding and
 * checking, the piece copy at the heart of resharding, and the on-disk names.
 * Nothing outside runtime/ckpt (and its tests) includes it. */
#ifndef DTRUN_CKPT_INTERNAL_H
#define DTRUN_CKPT_INTERNAL_H

#include "runtime/ckpt/ckpt.h"
#include "runtime/ckpt/safetensors.h"

#define CKPT_FORMAT_INDEX "dtrun-checkpoint"
#define CKPT_FORMAT_SHARD "dtrun-shard"
#define CKPT_VERSION 1
#define CKPT_PLACE_PREFIX "place/"
#define CKPT_INDEX_MAX (64u << 20)
#define CKPT_MAX_WORLD (1 << 20)
#define CKPT_MAX_TP (1 << 16)
/* Paths are built in fixed buffers: a checkpoint directory longer than this is
 * refused up front rather than cut short. */
#define CKPT_DIR_MAX 3000

/* "rank_00003.safetensors" (step directories' names: ckpt.h) */
void ckpt_rank_filename(char *buf, size_t len, int rank);

/* Placement <-> its JSON text; the text names the logical tensor. Encode returns
 * a malloc'd string or NULL. Decode checks everything (ckpt_place_check) and
 * returns 0, or -1 with the reason (no path) in why. */
char *ckpt_place_encode(const char *name, const ckpt_place *p);
int ckpt_place_decode(const char *json, char *name, size_t name_len, ckpt_place *p, char *why,
                      size_t whylen);
int ckpt_place_check(const ckpt_place *p, char *why, size_t whylen);

/* Copies the elements that piece `src` (held in `data` of dtype F32 or BF16)
 * shares with `want` into out (indexed from want->lo) and marks them in
 * covered (one byte per element of want). Both placements must be checked
 * and have the same global shape. */
void ckpt_place_copy(const ckpt_place *src, const void *data, st_dtype dtype,
                     const ckpt_place *want, float *out, unsigned char *covered);

/* index.json. Encode returns malloc'd text or NULL; decode validates every
 * field (the file may be corrupt) and returns 0, or -1 with "PATH: what". */
typedef struct {
    uint64_t size, hash; /* XXH3-64 */
} ckpt_file_sum;

typedef struct {
    ckpt_info info;      /* job_yaml and loss_tail point into job and loss */
    char *job;
    char *provenance;
    double *loss;
    ckpt_file_sum *files; /* info.world of them, by rank */
} ckpt_index;

char *ckpt_index_encode(const ckpt_meta *meta, const ckpt_file_sum *files);
int ckpt_index_decode(const char *text, size_t len, const char *path, ckpt_index *out, char *err,
                      size_t errlen);
void ckpt_index_free(ckpt_index *ix);

/* export.c: DIR/name holds text and a newline, written atomically (text is
 * freed); the config.json of a model's Hugging Face folder (malloc'd, NULL
 * when out of memory). */
int ckpt_write_json(const char *dir, const char *name, char *text, char *err, size_t errlen);
char *ckpt_hf_config_json(const job_model *m);

#endif
