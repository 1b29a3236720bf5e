/* hf_import.c — reading a Hugging Face GPT-2, ViT or Llama folder's tensors
 * into a rank's slices (hf_import.h).
 *
 * Element mapping. Our tensor is [rows, cols] row-major; local element i of a
 * tp shard is global element g = param_global_index(i) = (r, c). The file
 * holds the same tensor ([rows', cols] with rows' >= rows for a cropped wpe:
 * the same index g), or, for a Conv1D weight, its transpose [cols, rows]:
 * element c * rows + r, or (ViT's query, key, value) our rows in n parts of
 * rows / n: part r / (rows / n), element (r % (rows / n)) * cols + c there.
 * Copies go run by run (consecutive source elements to
 * consecutive slice elements), so an untransposed slice is a few memcpys and
 * only the pages of the slice's bytes are ever touched in the mapping. */
#include "runtime/ckpt/hf_import.h"

#include <cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/ckpt/ckpt_io.h"
#include "runtime/ckpt/hf_names.h"
#include "runtime/ckpt/safetensors.h"

#define HF_INDEX_MAX (64u << 20)
#define HF_MAX_FILES 4096

struct hf_weights {
    int peft;           /* a PEFT adapter folder: holds train.lora's adapters only */
    char *dir;
    st_reader **files;
    int n_files;
    uint64_t bytes_read, bytes_total;
};

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int add_file(hf_weights *w, const char *name, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", w->dir, name);
    for (int i = 0; i < w->n_files; i++)
        if (!strcmp(st_reader_path(w->files[i]), path)) return 0;
    if (w->n_files >= HF_MAX_FILES) return st_fail(err, errlen, "%s: more than %d shard files", w->dir, HF_MAX_FILES);
    if (strchr(name, '/') || !strcmp(name, "..") || !strcmp(name, "."))
        return st_fail(err, errlen, "%s/model.safetensors.index.json: shard file '%s' is not a file name in the folder",
                       w->dir, name);
    if (st_reader_open(path, &w->files[w->n_files], err, errlen) != 0) return -1;
    const st_reader *r = w->files[w->n_files++];
    for (int i = 0; i < st_reader_count(r); i++) w->bytes_total += st_reader_tensor(r, i)->nbytes;
    return 0;
}

/* The shard files model.safetensors.index.json names (each once). */
static int open_index(hf_weights *w, const char *index_path, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    int rc = ckpt_io_read_small(index_path, HF_INDEX_MAX, &text, &len, err, errlen);
    if (rc != 0) return rc > 0 ? st_fail(err, errlen, "%s: cannot open", index_path) : -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    rc = 0;
    if (!cJSON_IsObject(map)) rc = st_fail(err, errlen, "%s: no \"weight_map\" object (not a safetensors index)", index_path);
    for (const cJSON *it = rc ? NULL : map->child; it && rc == 0; it = it->next) {
        if (!cJSON_IsString(it)) rc = st_fail(err, errlen, "%s: weight_map[\"%.80s\"] is not a file name", index_path, it->string);
        else rc = add_file(w, it->valuestring, err, errlen);
    }
    if (rc == 0 && w->n_files == 0) rc = st_fail(err, errlen, "%s: the weight_map names no file", index_path);
    cJSON_Delete(root);
    return rc;
}

int hf_weights_open(const char *dir, hf_weights **out, char *err, size_t errlen)
{
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return st_fail(err, errlen, "%s: not a directory (want a Hugging Face model folder)", dir);
    hf_weights *w = calloc(1, sizeof *w);
    if (!w || !(w->dir = strdup(dir)) || !(w->files = calloc(HF_MAX_FILES, sizeof *w->files))) {
        hf_weights_close(w);
        return st_fail(err, errlen, "%s: out of memory", dir);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    int rc;
    if (is_file(path)) {
        rc = open_index(w, path, err, errlen);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = is_file(path) ? add_file(w, "model.safetensors", err, errlen)
                           : st_fail(err, errlen, "%s: no model.safetensors and no model.safetensors.index.json", dir);
    }
    if (rc != 0) {
        hf_weights_close(w);
        return -1;
    }
    *out = w;
    return 0;
}

int hf_weights_open_adapter(const char *dir, hf_weights **out, char *err, size_t errlen)
{
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (!is_file(path)) return st_fail(err, errlen, "%s: no adapter_model.safetensors (want a PEFT adapter folder)", dir);
    hf_weights *w = calloc(1, sizeof *w);
    if (!w || !(w->dir = strdup(dir)) || !(w->files = calloc(1, sizeof *w->files))) {
        hf_weights_close(w);
        return st_fail(err, errlen, "%s: out of memory", dir);
    }
    w->peft = 1;
    if (add_file(w, "adapter_model.safetensors", err, errlen) != 0) {
        hf_weights_close(w);
        return -1;
    }
    *out = w;
    return 0;
}

void hf_weights_close(hf_weights *w)
{
    if (!w) return;
    for (int i = 0; i < w->n_files; i++) st_reader_close(w->files[i]);
    free(w->files);
    free(w->dir);
    free(w);
}

const char *hf_weights_dir(const hf_weights *w) { return w->dir; }
uint64_t hf_weights_bytes_read(const hf_weights *w) { return w->bytes_read; }
uint64_t hf_weights_bytes_total(const hf_weights *w) { return w->bytes_total; }

/* The naming a model's folder uses. */
static ckpt_naming naming_of(const job_model *m) { return hf_naming_of(m); }

/* The stored tensors of one of ours (hf_name_of), in a malloc'd array
 * (*out; NULL when none): how many, or -1 (no name, or out of memory: *out
 * NULL). */
static int parts_of(const char *ours, int ndim, const int64_t shape[2], ckpt_naming naming, const job_model *m,
                    hf_tensor **out)
{
    *out = NULL;
    int n = hf_name_of(ours, ndim, shape, naming, m, NULL, 0);
    if (n < 1 || !(*out = calloc((size_t)n, sizeof **out))) return -1;
    return hf_name_of(ours, ndim, shape, naming, m, *out, n);
}
static const char *naming_label(ckpt_naming n) { return hf_naming_label(n); }

/* The stored tensor called `name`, or the same without "transformer." (the
 * Hub's GPT-2 files); *file gets its reader. NULL when absent. */
static const st_tensor *find(const hf_weights *w, const char *name, const st_reader **file)
{
    const char *bare = strncmp(name, "transformer.", 12) == 0 ? name + 12 : NULL;
    for (int pass = 0; pass < 2; pass++) {
        const char *n = pass ? bare : name;
        if (!n) continue;
        for (int i = 0; i < w->n_files; i++) {
            const st_tensor *t = st_reader_find(w->files[i], n);
            if (t) {
                if (file) *file = w->files[i];
                return t;
            }
        }
    }
    return NULL;
}

/* Buffers transformers saves beside the weights, which dtrun has no use for:
 * GPT-2's causal mask ("h.N.attn.bias", "h.N.attn.masked_bias"), an older
 * Llama's RoPE frequencies ("self_attn.rotary_emb.inv_freq"), and the LM head
 * of a model that ties it to wte (GPT-2; a Llama with tie_word_embeddings),
 * which some files carry anyway. */
static int ignorable(const char *name, const job_model *m)
{
    size_t n = strlen(name);
    if (!strcmp(name, "lm_head.weight")) return job_model_tied_head(m);
    if (m->kind == MODEL_LLAMA) return n > 26 && !strcmp(name + n - 26, ".self_attn.rotary_emb.inv_freq");
    return (n > 10 && !strcmp(name + n - 10, ".attn.bias")) || (n > 17 && !strcmp(name + n - 17, ".attn.masked_bias"));
}

static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && o < n; d++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* One mismatch line appended to err (while it fits). */
static void add_line(char *err, size_t errlen, int *count, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void add_line(char *err, size_t errlen, int *count, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    st_one_line(line);
    size_t used = strlen(err);
    if (used + strlen(line) + 2 < errlen) snprintf(err + used, errlen - used, "%s%s", used ? "\n" : "", line);
    (*count)++;
}

int hf_weights_check(const hf_weights *w, const job_model *m, char *err, size_t errlen)
{
    err[0] = 0;
    int bad = 0;
    ckpt_naming naming = naming_of(m);
    /* every tensor of the model, each name once (the tied head copy shares wte's) */
    size_t total = 0;
    for (int u = 0; u < model_n_units(m); u++)
        for (int i = 0; i < model_unit_param_count(m, u); i++) {
            param_spec p;
            model_unit_param_spec(m, u, i, 0, 1, &p);
            int64_t shape[2] = {p.shape[0], p.shape[1]};
            int n = hf_name_of(p.name, p.ndim, shape, naming, m, NULL, 0);
            total += n > 0 ? (size_t)n : 1;
        }
    char (*want)[160] = calloc(total + 1, sizeof *want);
    if (!want) {
        add_line(err, errlen, &bad, "%s: out of memory", w->dir);
        return bad;
    }
    int n_want = 0;
    for (int u = 0; u < model_n_units(m); u++) {
        for (int i = 0; i < model_unit_param_count(m, u); i++) {
            param_spec p;
            model_unit_param_spec(m, u, i, 0, 1, &p);
            /* a model folder holds the base, a PEFT folder train.lora's adapters */
            if (p.tied || p.lora != w->peft) continue;
            int64_t shape[2] = {p.shape[0], p.shape[1]};
            hf_tensor *parts;
            int n_parts = parts_of(p.name, p.ndim, shape, naming, m, &parts);
            if (n_parts < 1) {
                add_line(err, errlen, &bad, "%s: dtrun's '%s' has no %s name", w->dir, p.name, naming_label(naming));
                continue;
            }
            for (int k = 0; k < n_parts; k++) {
            const hf_tensor t = parts[k];
            const st_reader *file = NULL;
            const st_tensor *s = find(w, t.name, &file);
            char need[96], have[96];
            shape_text(need, sizeof need, t.ndim, t.shape);
            if (!s) {
                add_line(err, errlen, &bad, "%s: no tensor %s %s (dtrun's %s)", w->dir, t.name, need, p.name);
                continue;
            }
            snprintf(want[n_want++], sizeof want[0], "%s", s->name);
            shape_text(have, sizeof have, s->ndim, s->shape);
            /* wpe may hold more positions than the model's seq_len uses */
            int is_wpe = !strcmp(p.name, "wpe");
            int same = s->ndim == t.ndim;
            for (int d = 0; same && d < t.ndim; d++)
                same = s->shape[d] == t.shape[d] || (is_wpe && d == 0 && s->shape[0] >= t.shape[0]);
            if (!same)
                add_line(err, errlen, &bad, "%s: %s is %s, the model needs %s%s (dtrun's %s)", st_reader_path(file),
                         s->name, have, need, is_wpe ? " or more rows" : "", p.name);
            else if (s->dtype != ST_F32 && s->dtype != ST_BF16)
                add_line(err, errlen, &bad, "%s: %s is %s; dtrun reads F32 or BF16", st_reader_path(file), s->name,
                         st_dtype_name(s->dtype));
            }
            free(parts);
        }
    }
    /* what the files hold that the model does not */
    for (int f = 0; f < w->n_files; f++) {
        const st_reader *r = w->files[f];
        for (int i = 0; i < st_reader_count(r); i++) {
            const char *name = st_reader_tensor(r, i)->name;
            int used = ignorable(name, m);
            for (int k = 0; k < n_want && !used; k++) used = !strcmp(want[k], name);
            if (!used)
                add_line(err, errlen, &bad, "%s: %s is not a tensor of this %s model (%d layers, d_model %d)",
                         st_reader_path(r), name, naming_label(naming), m->n_layer, m->d_model);
        }
    }
    free(want);
    return bad;
}

/* n elements of the file's tensor, from element `from`, as fp32 into out. */
static void copy_run(hf_weights *w, const st_tensor *t, uint64_t from, size_t n, float *out)
{
    const unsigned char *src = (const unsigned char *)t->data;
    if (t->dtype == ST_F32) {
        memcpy(out, src + from * 4, n * 4);
    } else { /* BF16: the high half of an fp32, exactly */
        for (size_t k = 0; k < n; k++) {
            uint16_t h;
            memcpy(&h, src + (from + k) * 2, 2);
            uint32_t u = (uint32_t)h << 16;
            memcpy(&out[k], &u, 4);
        }
    }
    w->bytes_read += n * st_dtype_size(t->dtype);
}

/* Local elements [a, b) of tensor p's tp shard into out. */
static int read_tensor(hf_weights *w, const param_spec *p, const job_model *m, int tp_rank, int tp_size, size_t a,
                       size_t b, float *out, char *err, size_t errlen)
{
    int64_t shape[2] = {p->shape[0], p->shape[1]};
    hf_tensor *ht;
    ckpt_naming naming = naming_of(m);
    int n_parts = parts_of(p->name, p->ndim, shape, naming, m, &ht);
    if (n_parts < 1) return st_fail(err, errlen, "%s: dtrun's '%s' has no %s name", w->dir, p->name, naming_label(naming));
    const st_tensor **t = calloc((size_t)n_parts, sizeof *t);
    if (!t) {
        free(ht);
        return st_fail(err, errlen, "%s: out of memory", w->dir);
    }
    uint64_t rows = (uint64_t)p->shape[0], cols = (uint64_t)p->shape[1], part_rows = rows / (uint64_t)n_parts;
    int rc = 0;
    for (int k = 0; k < n_parts && rc == 0; k++) {
        t[k] = find(w, ht[k].name, NULL);
        if (!t[k] || (t[k]->dtype != ST_F32 && t[k]->dtype != ST_BF16) || t[k]->ndim != ht[k].ndim)
            rc = st_fail(err, errlen, "%s: no usable tensor %s (run hf_weights_check first)", w->dir, ht[k].name);
        else if (part_rows * cols > t[k]->numel)
            rc = st_fail(err, errlen, "%s: %s holds %llu elements, fewer than the model's %llu", w->dir, ht[k].name,
                         (unsigned long long)t[k]->numel, (unsigned long long)(part_rows * cols));
    }
    int transpose = ht[0].transpose;
    free(ht);
    if (rc != 0) {
        free(t);
        return rc;
    }
    size_t i = a;
    while (i < b) {
        /* the longest run from i whose source elements are consecutive (in one part) */
        size_t g = param_global_index(p, tp_rank, tp_size, i);
        uint64_t r = g / cols, part = r / part_rows;
        uint64_t src = transpose ? (g % cols) * rows + r : (r - part * part_rows) * cols + g % cols;
        uint64_t part_end = (part + 1) * part_rows * cols; /* global index where the part ends */
        size_t n = 1;
        if (!transpose)
            while (i + n < b && g + n < part_end && param_global_index(p, tp_rank, tp_size, i + n) == g + n) n++;
        copy_run(w, t[part], src, n, out + (i - a));
        i += n;
    }
    free(t);
    return 0;
}

int hf_weights_read_unit_slice(hf_weights *w, const job_model *m, const param_spec *specs, int n_specs, int tp_rank,
                               int tp_size, uint64_t lo, uint64_t hi, float *slice, char *err, size_t errlen)
{
    for (int k = 0; k < n_specs; k++) {
        const param_spec *p = &specs[k];
        uint64_t b0 = p->offset, b1 = p->offset + p->local_numel;
        uint64_t s0 = lo > b0 ? lo : b0, s1 = hi < b1 ? hi : b1;
        if (s0 >= s1) continue;
        if (read_tensor(w, p, m, tp_rank, tp_size, s0 - b0, s1 - b0, slice + (s0 - lo), err, errlen) != 0) return -1;
    }
    return 0;
}
