/* ckpt_place.c — where a piece's elements sit in the global tensor.
 *
 * The split rule is the format's own definition (ckpt.h), written down here and
 * not borrowed from the model: a checkpoint must stay readable when the model's
 * code changes. It agrees with param_global_index (a test checks it).
 *
 * A tp-local shard is seen as rows: local row lr has local_cols elements, and
 * maps to one global row with a contiguous run of columns. Resharding copies
 * those runs, so the work is per row, not per element. */
#include "runtime/ckpt/ckpt_internal.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows [lo, hi) of n that part r of tp holds: floor(n*r/tp), as the model does. */
static uint64_t part_lo(uint64_t n, int r, int tp) { return n * (uint64_t)r / (uint64_t)tp; }
static uint64_t part_len(uint64_t n, int r, int tp) { return part_lo(n, r + 1, tp) - part_lo(n, r, tp); }

void ckpt_step_dirname(char *buf, size_t len, long step) { snprintf(buf, len, "step_%06ld", step); }
void ckpt_rank_filename(char *buf, size_t len, int rank)
{
    snprintf(buf, len, "rank_%05d.safetensors", rank);
}

long ckpt_parse_step_dirname(const char *name)
{
    if (strncmp(name, "step_", 5) != 0 || !name[5]) return -1;
    long v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > 100000000000L) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

/* Expert parallelism's block of rows (ckpt.h): its rows, and the first. */
static int ep_blocks(const ckpt_place *p) { return p->ep_size > 1 ? p->ep_size : 1; }
static uint64_t block_rows(const ckpt_place *p) { return (uint64_t)p->shape[0] / (uint64_t)ep_blocks(p); }
static uint64_t block_first(const ckpt_place *p) { return ep_blocks(p) > 1 ? (uint64_t)p->ep_rank * block_rows(p) : 0; }

static uint64_t local_rows(const ckpt_place *p)
{
    uint64_t R = block_rows(p);
    if (p->split != CKPT_SPLIT_ROWS) return R;
    uint64_t g = (uint64_t)p->groups;
    return g * part_len(R / g, p->tp_rank, p->tp_size);
}

static uint64_t local_cols(const ckpt_place *p)
{
    uint64_t K = (uint64_t)p->shape[1];
    return p->split == CKPT_SPLIT_COLS ? part_len(K, p->tp_rank, p->tp_size) : K;
}

static uint64_t col_offset(const ckpt_place *p)
{
    return p->split == CKPT_SPLIT_COLS ? part_lo((uint64_t)p->shape[1], p->tp_rank, p->tp_size) : 0;
}

static uint64_t global_row(const ckpt_place *p, uint64_t lr)
{
    if (p->split != CKPT_SPLIT_ROWS) return block_first(p) + lr;
    uint64_t rows_g = block_rows(p) / (uint64_t)p->groups;
    uint64_t lrows_g = part_len(rows_g, p->tp_rank, p->tp_size);
    uint64_t g = lr / lrows_g, r = lr % lrows_g;
    return block_first(p) + g * rows_g + part_lo(rows_g, p->tp_rank, p->tp_size) + r;
}

/* Local row of global row R, or UINT64_MAX when this shard does not hold it. */
static uint64_t local_row(const ckpt_place *p, uint64_t R)
{
    if (R < block_first(p) || R >= block_first(p) + block_rows(p)) return UINT64_MAX;
    R -= block_first(p);
    if (p->split != CKPT_SPLIT_ROWS) return R;
    uint64_t rows_g = block_rows(p) / (uint64_t)p->groups;
    uint64_t g = R / rows_g, r = R % rows_g;
    uint64_t lo = part_lo(rows_g, p->tp_rank, p->tp_size), n = part_len(rows_g, p->tp_rank, p->tp_size);
    if (r < lo || r >= lo + n) return UINT64_MAX;
    return g * n + (r - lo);
}

uint64_t ckpt_place_local_numel(const ckpt_place *p) { return local_rows(p) * local_cols(p); }

uint64_t ckpt_place_global_index(const ckpt_place *p, uint64_t i)
{
    uint64_t lc = local_cols(p);
    return global_row(p, i / lc) * (uint64_t)p->shape[1] + col_offset(p) + i % lc;
}

void ckpt_place_of_param(const param_spec *p, int tp_rank, int tp_size, uint64_t lo, uint64_t hi,
                         ckpt_place *out)
{
    memset(out, 0, sizeof *out);
    out->ndim = p->ndim == 2 ? 2 : 1;
    out->shape[0] = p->shape[0];
    out->shape[1] = p->ndim == 2 ? p->shape[1] : 1;
    out->split = p->split == SPLIT_ROWS ? CKPT_SPLIT_ROWS
                 : p->split == SPLIT_COLS ? CKPT_SPLIT_COLS
                                          : CKPT_SPLIT_NONE;
    out->groups = p->split_groups > 0 ? p->split_groups : 1;
    /* a Llama's replicated kv rows are a split over their parts (model.h) */
    int part, parts;
    param_tp_part(p, tp_rank, tp_size, &part, &parts);
    out->tp_rank = out->split == CKPT_SPLIT_NONE ? 0 : part;
    out->tp_size = out->split == CKPT_SPLIT_NONE ? 1 : parts;
    /* an ep rank's experts: its block of rows, split over tp within it
     * (the block's row groups), so every expert keeps its global id whatever
     * ep and tp wrote it */
    if (param_is_expert(p)) {
        out->ep_rank = p->ep_rank;
        out->ep_size = p->ep_size;
        if (out->split == CKPT_SPLIT_ROWS) out->groups /= p->ep_size;
    }
    out->lo = lo;
    out->hi = hi;
}

int ckpt_unit_slice_pieces(const char *prefix, const param_spec *specs, int n_specs, int tp_rank,
                           int tp_size, uint64_t lo, uint64_t hi, const float *slice,
                           ckpt_piece *out, int cap)
{
    int n = 0;
    for (int i = 0; i < n_specs; i++) {
        const param_spec *s = &specs[i];
        uint64_t a = s->offset, b = s->offset + s->local_numel;
        if (b <= lo || a >= hi || a == b) continue;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (n == cap) return -1;
        ckpt_piece *pc = &out[n];
        int k = snprintf(pc->name, sizeof pc->name, "%s/%s", prefix, s->name);
        if (k < 0 || (size_t)k >= sizeof pc->name) return -1;
        ckpt_place_of_param(s, tp_rank, tp_size, a - s->offset, b - s->offset, &pc->place);
        pc->data = slice ? slice + (a - lo) : NULL;
        n++;
    }
    return n;
}

static const char *split_name(ckpt_split s)
{
    return s == CKPT_SPLIT_ROWS ? "rows" : s == CKPT_SPLIT_COLS ? "cols" : "none";
}

int ckpt_place_check(const ckpt_place *p, char *why, size_t whylen)
{
    const uint64_t max_numel = (uint64_t)1 << 48;
    if (p->ndim != 1 && p->ndim != 2)
        return snprintf(why, whylen, "global_shape has %d dims (1 or 2 expected)", p->ndim), -1;
    if (p->shape[0] < 1 || p->shape[1] < 1 || (p->ndim == 1 && p->shape[1] != 1) ||
        (uint64_t)p->shape[0] > max_numel || (uint64_t)p->shape[1] > max_numel / (uint64_t)p->shape[0])
        return snprintf(why, whylen, "bad global_shape"), -1;
    if (p->split != CKPT_SPLIT_NONE && p->split != CKPT_SPLIT_ROWS && p->split != CKPT_SPLIT_COLS)
        return snprintf(why, whylen, "unknown split"), -1;
    if (p->tp_size < 1 || p->tp_size > CKPT_MAX_TP || p->tp_rank < 0 || p->tp_rank >= p->tp_size)
        return snprintf(why, whylen, "tp_rank %d of tp_size %d", p->tp_rank, p->tp_size), -1;
    if (p->ep_size < 0 || p->ep_size > CKPT_MAX_TP || (p->ep_size > 1 && (p->ep_rank < 0 || p->ep_rank >= p->ep_size ||
                                                                            p->shape[0] % p->ep_size != 0)))
        return snprintf(why, whylen, "ep_rank %d of ep_size %d (of %lld rows)", p->ep_rank, p->ep_size,
                        (long long)p->shape[0]), -1;
    if (p->groups < 1 || (p->split == CKPT_SPLIT_ROWS && block_rows(p) % (uint64_t)p->groups != 0))
        return snprintf(why, whylen, "%d row groups do not divide %llu rows", p->groups,
                        (unsigned long long)block_rows(p)), -1;
    if (p->split == CKPT_SPLIT_COLS && p->ndim != 2)
        return snprintf(why, whylen, "a column split of a 1-D tensor"), -1;
    uint64_t n = ckpt_place_local_numel(p);
    if (p->lo > p->hi || p->hi > n)
        return snprintf(why, whylen, "elements [%llu, %llu) outside the local shard of %llu",
                        (unsigned long long)p->lo, (unsigned long long)p->hi,
                        (unsigned long long)n), -1;
    return 0;
}

char *ckpt_place_encode(const char *name, const ckpt_place *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *shape = o ? cJSON_AddArrayToObject(o, "global_shape") : NULL;
    int ok = shape && cJSON_AddStringToObject(o, "name", name);
    for (int d = 0; ok && d < p->ndim; d++)
        ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)p->shape[d]));
    ok = ok && cJSON_AddStringToObject(o, "split", split_name(p->split)) &&
         cJSON_AddNumberToObject(o, "groups", p->groups) &&
         cJSON_AddNumberToObject(o, "tp_rank", p->tp_rank) &&
         cJSON_AddNumberToObject(o, "tp_size", p->tp_size) &&
         (ep_blocks(p) == 1 || (cJSON_AddNumberToObject(o, "ep_rank", p->ep_rank) &&
                                cJSON_AddNumberToObject(o, "ep_size", p->ep_size))) &&
         cJSON_AddNumberToObject(o, "lo", (double)p->lo) &&
         cJSON_AddNumberToObject(o, "hi", (double)p->hi);
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* An exact non-negative integer up to 2^53 (JSON numbers are doubles). */
static int get_uint(const cJSON *o, const char *key, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d) return 0;
    *out = (uint64_t)d;
    return 1;
}

int ckpt_place_decode(const char *json, char *name, size_t name_len, ckpt_place *p, char *why,
                      size_t whylen)
{
    memset(p, 0, sizeof *p);
    cJSON *o = cJSON_Parse(json);
    int rc = -1;
    if (!cJSON_IsObject(o)) {
        snprintf(why, whylen, "placement is not a JSON object");
        goto out;
    }
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "global_shape");
    const cJSON *split = cJSON_GetObjectItemCaseSensitive(o, "split");
    uint64_t groups, tr, ts;
    if (!cJSON_IsString(nm) || !*nm->valuestring || strlen(nm->valuestring) >= name_len ||
        strlen(nm->valuestring) >= CKPT_NAME_MAX) {
        snprintf(why, whylen, "placement has no usable 'name'");
        goto out;
    }
    snprintf(name, name_len, "%s", nm->valuestring);
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) < 1 || cJSON_GetArraySize(shape) > 2) {
        snprintf(why, whylen, "placement 'global_shape' is not a 1- or 2-element array");
        goto out;
    }
    p->ndim = cJSON_GetArraySize(shape);
    p->shape[1] = 1;
    int d = 0;
    for (const cJSON *c = shape->child; c; c = c->next, d++) {
        double v = cJSON_IsNumber(c) ? c->valuedouble : -1;
        if (!(v >= 1) || v > 281474976710656.0 || v != (double)(int64_t)v) {
            snprintf(why, whylen, "placement 'global_shape' has a bad dimension");
            goto out;
        }
        p->shape[d] = (int64_t)v;
    }
    if (!cJSON_IsString(split)) {
        snprintf(why, whylen, "placement has no 'split'");
        goto out;
    }
    if (strcmp(split->valuestring, "none") == 0) p->split = CKPT_SPLIT_NONE;
    else if (strcmp(split->valuestring, "rows") == 0) p->split = CKPT_SPLIT_ROWS;
    else if (strcmp(split->valuestring, "cols") == 0) p->split = CKPT_SPLIT_COLS;
    else {
        snprintf(why, whylen, "placement 'split' is '%.20s' (none, rows or cols)", split->valuestring);
        goto out;
    }
    if (!get_uint(o, "groups", &groups) || !get_uint(o, "tp_rank", &tr) || !get_uint(o, "tp_size", &ts) ||
        !get_uint(o, "lo", &p->lo) || !get_uint(o, "hi", &p->hi) || groups > 1024 ||
        tr > CKPT_MAX_TP || ts > CKPT_MAX_TP) {
        snprintf(why, whylen, "placement lacks a valid groups, tp_rank, tp_size, lo or hi");
        goto out;
    }
    p->groups = (int)groups;
    p->tp_rank = (int)tr;
    p->tp_size = (int)ts;
    /* optional (expert parallelism): both or neither */
    uint64_t er = 0, es = 1;
    int has_er = cJSON_GetObjectItemCaseSensitive(o, "ep_rank") != NULL;
    int has_es = cJSON_GetObjectItemCaseSensitive(o, "ep_size") != NULL;
    if (has_er != has_es || (has_es && (!get_uint(o, "ep_rank", &er) || !get_uint(o, "ep_size", &es) ||
                                        er > CKPT_MAX_TP || es < 1 || es > CKPT_MAX_TP))) {
        snprintf(why, whylen, "placement has a bad ep_rank or ep_size");
        goto out;
    }
    p->ep_rank = (int)er;
    p->ep_size = (int)es;
    rc = ckpt_place_check(p, why, whylen);
out:
    cJSON_Delete(o);
    return rc;
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* n elements starting at element `at` of data, into out (data may be unaligned) */
static void load(const void *data, st_dtype dt, uint64_t at, uint64_t n, float *out)
{
    if (dt == ST_F32) {
        memcpy(out, (const char *)data + at * 4, n * 4);
        return;
    }
    const char *src = (const char *)data + at * 2;
    for (uint64_t k = 0; k < n; k++) {
        uint16_t h;
        memcpy(&h, src + 2 * k, 2);
        out[k] = bf16_to_f32(h);
    }
}

void ckpt_place_copy(const ckpt_place *src, const void *data, st_dtype dtype,
                     const ckpt_place *want, float *out, unsigned char *covered)
{
    uint64_t lc_s = local_cols(src), c0_s = col_offset(src);
    uint64_t lc_w = local_cols(want), c0_w = col_offset(want);
    uint64_t i = src->lo;
    while (i < src->hi) {
        /* one run: local row lr of src, local columns [a, b) */
        uint64_t lr = i / lc_s, a = i % lc_s;
        uint64_t b = lc_s;
        if (b - a > src->hi - i) b = a + (src->hi - i);
        uint64_t wr = local_row(want, global_row(src, lr));
        if (wr != UINT64_MAX) {
            uint64_t ga = a + c0_s, gb = b + c0_s; /* global columns of the run */
            uint64_t wa = ga > c0_w ? ga : c0_w, wb = gb < c0_w + lc_w ? gb : c0_w + lc_w;
            if (wa < wb) {
                uint64_t j0 = wr * lc_w + (wa - c0_w), j1 = j0 + (wb - wa);
                uint64_t ja = j0 > want->lo ? j0 : want->lo, jb = j1 < want->hi ? j1 : want->hi;
                if (ja < jb) {
                    uint64_t s = i + (wa - ga) + (ja - j0) - src->lo;
                    load(data, dtype, s, jb - ja, out + (ja - want->lo));
                    memset(covered + (ja - want->lo), 1, jb - ja);
                }
            }
        }
        i += b - a;
    }
}
