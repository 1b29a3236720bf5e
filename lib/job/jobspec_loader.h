/* jobspec_loader.h — the job-file loader's working state, shared by its files
 * (private to lib/job/jobspec*.c):
 *   jobspec.c           the public entry points (jobspec.h), defaults, reading the file;
 *   jobspec_yaml.c      libyaml: parse, positions, collect sections and keys;
 *   jobspec_override.c  `--set SECTION.KEY=VALUE` overrides;
 *   jobspec_values.c    one key's text -> its field, strictly typed;
 *   jobspec_resolve.c   presets, derived values, the whole-job check;
 *   jobspec_errors.c    the one-line messages ("FILE:LINE:COL: what") and the
 *                       "did you mean" for unknown names. */
#ifndef DTRUN_JOBSPEC_LOADER_H
#define DTRUN_JOBSPEC_LOADER_H

#include <stddef.h>

#include "lib/job/jobspec.h"
#include "lib/job/jobspec_fields.h"

/* Default synthetic data sizes: GPT in tokens, ViT in images. */
#define SYNTHETIC_GPT_TOKENS (1L << 20)
#define SYNTHETIC_VIT_IMAGES 4096L

typedef struct {
    int line, col; /* 1-based; line 0 = no position */
} pos;

/* One key's value as found in the file (or in an override). */
typedef struct {
    int given;
    pos key_at, val_at;
    const char *text;     /* scalar text, `len` bytes (may hold NULs) */
    size_t len;
    int is_null;          /* plain empty, ~ or null */
    const char *shape;    /* NULL for a scalar, else "a mapping" / "a sequence" */
    const char *override; /* the "section.key=value" it came from, or NULL */
    char joined[320];     /* FT_FLAGS / FT_KEYS given as a sequence: its items joined by ',' (text) */
} entry;

typedef struct {
    job_spec *job;
    const char *name;
    char *err;
    size_t errlen;
    entry e[FID_COUNT];
    int order[FID_COUNT]; /* given keys in file order, then overrides */
    int n_order;
    pos section_at[SEC_COUNT];
    int section_given[SEC_COUNT];
} loader;

/* jobspec_errors.c. Each fail_* writes "WHERE: what" into L->err and returns -1. */
int loader_fail_at(loader *L, pos at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* At a file position, or about a command-line override when `override` is set. */
int loader_fail_where(loader *L, pos at, const char *override, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* About a key's value: points at the value (or names the override). */
int loader_fail_value(loader *L, int fid, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* About a key itself (a key that does not belong): points at the key. */
int loader_fail_key(loader *L, int fid, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* About a combination: the first of blame[0..n) (-1 ends it) that the file gave. */
int loader_fail_blame(loader *L, const int *blame, int n, const char *msg);
int loader_unknown_key(loader *L, pos at, const char *override, job_section sec, const char *key, size_t len);
int loader_unknown_section(loader *L, pos at, const char *override, const char *name, size_t len);
/* User text made safe for a one-line message: control bytes escaped, cut at 48. */
const char *job_text_show(char *buf, size_t n, const char *s, size_t len);

/* jobspec_values.c */
int job_text_is_null(const char *s, size_t len);      /* plain empty, ~ or null */
const char *job_entry_got(const entry *e, char *buf, size_t n); /* "'x'", "a mapping", "an empty value" */
int loader_store_value(loader *L, int fid);          /* parses e[fid] into the job's field */

/* jobspec_yaml.c: parse text, collect the file's keys, then the overrides, then resolve. */
int loader_load(loader *L, const char *text, size_t len, const char *const *overrides, int n_overrides);

/* jobspec_override.c */
int loader_collect_overrides(loader *L, const char *const *overrides, int n);

/* jobspec_where.c: copy the given keys' and sections' positions into job->where. */
void loader_record_where(loader *L);

/* jobspec_resolve.c */
int loader_resolve(loader *L);
/* jobspec_init_from.c: model.init_from's config.json into the model section
 * (or one line where they disagree); *preset_d_ff gets its MLP width. */
int loader_apply_init_from(loader *L, int *preset_d_ff);
/* A small JSON file (config.json, adapter_config.json: at most 1 MiB) as
 * malloc'd text, or NULL with why. */
char *loader_read_json_file(const char *path, char *why, size_t n);
/* lr / 10 as a person would write it: the default min_lr. */
double job_lr_tenth(double lr);

#endif
