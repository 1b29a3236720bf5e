/* hardware.c — load a hardware profile (configs/hardware/NAME.yaml), strictly.
 *
 * A flat mapping of known keys; anything else is an error at its line and column,
 * like the job spec, because a misspelt bandwidth silently left at a default would
 * make every estimate wrong without a word. */
#include "runtime/plan/hardware.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <yaml.h>

#include "lib/util/suggest.h"
#include "runtime/env.h"

#define MIB (1024.0 * 1024.0)

typedef enum { K_TEXT, K_DEVICE, K_NUMBER, K_INT, K_TABLE, K_ATTN_TABLE } key_type;

typedef struct {
    const char *key;
    key_type type;
    int required;
    double min, max;  /* numbers: allowed range */
    double scale;     /* file unit -> struct unit */
    size_t offset;    /* into hw_profile */
} key_def;

#define OFF(f) offsetof(hw_profile, f)
static const key_def KEYS[] = {
    {"name", K_TEXT, 1, 0, 0, 0, OFF(name)},
    {"description", K_TEXT, 0, 0, 0, 0, OFF(description)},
    {"device", K_DEVICE, 1, 0, 0, 0, OFF(gpu)},
    {"peak_bf16_tflops", K_NUMBER, 1, 0, 1e6, 1e12, OFF(peak_bf16)},
    {"peak_fp32_tflops", K_NUMBER, 1, 1e-6, 1e6, 1e12, OFF(peak_fp32)},
    {"gemm_efficiency", K_TABLE, 0, 1e-3, 1, 1, OFF(gemm_eff)},
    {"achievable_fraction", K_NUMBER, 0, 1e-3, 1, 1, OFF(achievable)},
    {"attention_efficiency", K_ATTN_TABLE, 0, 1e-3, 1, 1, OFF(attn_eff)},
    {"memory_efficiency", K_NUMBER, 0, 1e-3, 1, 1, OFF(memory_eff)},
    {"memory_mib", K_NUMBER, 1, 0, 1e9, MIB, OFF(memory)},
    {"memory_bandwidth_gbs", K_NUMBER, 1, 1e-3, 1e6, 1e9, OFF(memory_bw)},
    {"intra_node_gbs", K_NUMBER, 1, 1e-3, 1e6, 1e9, OFF(intra_bw)},
    {"inter_node_gbs", K_NUMBER, 1, 1e-3, 1e6, 1e9, OFF(inter_bw)},
    {"intra_node_latency_us", K_NUMBER, 1, 0, 1e6, 1e-6, OFF(intra_latency)},
    {"inter_node_latency_us", K_NUMBER, 1, 0, 1e6, 1e-6, OFF(inter_latency)},
    {"host_link_gbs", K_NUMBER, 0, 1e-3, 1e6, 1e9, OFF(host_link_bw)},
    {"host_memory_gbs", K_NUMBER, 0, 1e-3, 1e6, 1e9, OFF(host_memory_bw)},
    {"host_memory_mib", K_NUMBER, 0, 0, 1e12, MIB, OFF(host_memory)},
    {"gpus_per_node", K_INT, 1, 0, 4096, 1, OFF(gpus_per_node)},
    {"cuda_context_mib", K_NUMBER, 1, 0, 1e6, MIB, OFF(cuda_context)},
    {"nccl_mib", K_NUMBER, 1, 0, 1e6, MIB, OFF(nccl)},
    {"cublas_workspace_mib", K_NUMBER, 1, 0, 1e6, MIB, OFF(cublas_workspace)},
    {"headroom_percent", K_NUMBER, 0, 0, 50, 0.01, OFF(headroom_fraction)},
    {"calibrated", K_TEXT, 0, 0, 0, 0, OFF(calibrated)},
};
#define N_KEYS (int)(sizeof KEYS / sizeof KEYS[0])

static void key_list(char *out, size_t n)
{
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < N_KEYS && at < n; i++)
        at += (size_t)snprintf(out + at, n - at, "%s%s", i ? ", " : "", KEYS[i].key);
}

static int fail_node(char *err, size_t errlen, const char *file, const yaml_node_t *n, const char *fmt,
                     const char *a, const char *b)
{
    char msg[1200];
    snprintf(msg, sizeof msg, fmt, a, b);
    snprintf(err, errlen, "%s:%d:%d: %s", file, (int)n->start_mark.line + 1, (int)n->start_mark.column + 1,
             msg);
    return -1;
}

static int set_value(hw_profile *hw, const key_def *k, const char *v, const yaml_node_t *vn,
                     const char *file, char *err, size_t errlen)
{
    char *dst = (char *)hw + k->offset;
    if (k->type == K_TEXT) {
        size_t cap = k->offset == OFF(name) ? HW_NAME_MAX : HW_TEXT_MAX;
        if (strlen(v) >= cap) return fail_node(err, errlen, file, vn, "%s is too long ('%s')", k->key, v);
        memcpy(dst, v, strlen(v) + 1);
        return 0;
    }
    if (k->type == K_DEVICE) {
        if (strcmp(v, "gpu") && strcmp(v, "cpu"))
            return fail_node(err, errlen, file, vn, "%s must be gpu or cpu, got '%s'", k->key, v);
        *(int *)dst = strcmp(v, "gpu") == 0;
        return 0;
    }
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(x))
        return fail_node(err, errlen, file, vn, "%s needs a number, got '%s'", k->key, v);
    if (x < k->min || x > k->max) {
        char range[96];
        snprintf(range, sizeof range, "%g .. %g, got %s", k->min, k->max, v);
        return fail_node(err, errlen, file, vn, "%s must be in %s", k->key, range);
    }
    if (k->type == K_INT) {
        if (x != floor(x)) return fail_node(err, errlen, file, vn, "%s needs a whole number, got '%s'", k->key, v);
        *(int *)dst = (int)x;
    } else {
        *(double *)dst = x * k->scale;
    }
    return 0;
}

/* gemm_efficiency (DIM: FRACTION) or attention_efficiency (KEYS: FRACTION): a
 * mapping, its dimension increasing; into dims / effs, *n points. */
static int set_table(const key_def *k, yaml_document_t *doc, const yaml_node_t *vn, const char *file, double *dims,
                     double *effs, int *n, char *err, size_t errlen)
{
    const char *what = k->type == K_ATTN_TABLE ? "keys per attention call" : "GEMM dimension";
    if (vn->type != YAML_MAPPING_NODE)
        return fail_node(err, errlen, file, vn, "%s is a mapping of %s: fraction of peak", k->key, what);
    *n = 0;
    for (yaml_node_pair_t *p = vn->data.mapping.pairs.start; p < vn->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(doc, p->key), *fn = yaml_document_get_node(doc, p->value);
        if (!kn || !fn || kn->type != YAML_SCALAR_NODE || fn->type != YAML_SCALAR_NODE)
            return fail_node(err, errlen, file, kn ? kn : vn, "%s: each entry is %s", k->key,
                             k->type == K_ATTN_TABLE ? "KEYS: FRACTION" : "DIM: FRACTION");
        if (*n == HW_GEMM_MAX) return fail_node(err, errlen, file, kn, "%s: at most 16 points%s", k->key, "");
        const char *ks = (const char *)kn->data.scalar.value, *fs = (const char *)fn->data.scalar.value;
        char *end;
        errno = 0;
        double dim = strtod(ks, &end);
        if (!*ks || *end || errno || !(dim >= 1 && dim <= 1e9))
            return fail_node(err, errlen, file, kn, "%s: a dimension is a number >= 1, got '%s'", k->key, ks);
        double f = strtod(fs, &end);
        if (!*fs || *end || errno || !(f >= k->min && f <= k->max))
            return fail_node(err, errlen, file, fn, "%s: a fraction of peak is in (0, 1], got '%s'", k->key, fs);
        if (*n > 0 && dim <= dims[*n - 1])
            return fail_node(err, errlen, file, kn, "%s: dimensions must increase ('%s')", k->key, ks);
        dims[*n] = dim;
        effs[(*n)++] = f;
    }
    if (*n < 2) return fail_node(err, errlen, file, vn, "%s needs at least 2 points%s", k->key, "");
    return 0;
}

static int host_defaults(hw_profile *hw)
{
    if (hw->gpu) return 0;
    if (hw->memory == 0) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) hw->memory = (double)pages * (double)page;
    }
    if (hw->gpus_per_node == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        hw->gpus_per_node = cores > 0 ? (int)cores : 1;
    }
    return 0;
}

static int load_mapping(hw_profile *hw, yaml_document_t *doc, const char *file, char *err, size_t errlen)
{
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root) {
        snprintf(err, errlen, "%s: empty hardware profile", file);
        return -1;
    }
    if (root->type != YAML_MAPPING_NODE)
        return fail_node(err, errlen, file, root, "a hardware profile is a mapping of keys%s%s", "", "");
    int seen[N_KEYS] = {0};
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(doc, p->key), *vn = yaml_document_get_node(doc, p->value);
        if (!kn || !vn || kn->type != YAML_SCALAR_NODE)
            return fail_node(err, errlen, file, kn ? kn : root, "keys must be plain names%s%s", "", "");
        const char *key = (const char *)kn->data.scalar.value;
        int i = 0;
        while (i < N_KEYS && strcmp(KEYS[i].key, key)) i++;
        if (i == N_KEYS) {
            char keys[600], msg[800];
            key_list(keys, sizeof keys);
            suggest sg;
            suggest_init(&sg, key, strlen(key));
            for (int j = 0; j < N_KEYS; j++) suggest_offer(&sg, KEYS[j].key, KEYS[j].key);
            snprintf(msg, sizeof msg, "unknown key '%s' (a hardware profile takes %s)", key, keys);
            if (suggest_best(&sg)) return fail_node(err, errlen, file, kn, "%s; did you mean '%s'?", msg, suggest_best(&sg));
            return fail_node(err, errlen, file, kn, "%s%s", msg, "");
        }
        if (seen[i]) return fail_node(err, errlen, file, kn, "key '%s' appears twice%s", key, "");
        seen[i] = 1;
        if (KEYS[i].type == K_TABLE || KEYS[i].type == K_ATTN_TABLE) {
            int attn = KEYS[i].type == K_ATTN_TABLE;
            if (set_table(&KEYS[i], doc, vn, file, attn ? hw->attn_keys : hw->gemm_dim, attn ? hw->attn_eff : hw->gemm_eff,
                          attn ? &hw->n_attn : &hw->n_gemm, err, errlen))
                return -1;
            continue;
        }
        if (vn->type != YAML_SCALAR_NODE)
            return fail_node(err, errlen, file, vn, "%s needs a single value%s", key, "");
        if (set_value(hw, &KEYS[i], (const char *)vn->data.scalar.value, vn, file, err, errlen)) return -1;
    }
    for (int i = 0; i < N_KEYS; i++)
        if (KEYS[i].required && !seen[i]) {
            snprintf(err, errlen, "%s: missing key '%s' (every hardware profile sets it)", file, KEYS[i].key);
            return -1;
        }
    int table = 0, flat = 0, mem_eff = 0;
    for (int i = 0; i < N_KEYS; i++) {
        if (KEYS[i].offset == OFF(gemm_eff)) table = seen[i];
        if (KEYS[i].offset == OFF(achievable)) flat = seen[i];
        if (KEYS[i].offset == OFF(memory_eff)) mem_eff = seen[i];
    }
    if (table == flat) {
        snprintf(err, errlen, "%s: %s (the achieved fraction of peak against the GEMM's smallest dimension)", file,
                 table ? "gemm_efficiency and achievable_fraction both given: keep gemm_efficiency"
                       : "missing key 'gemm_efficiency'");
        return -1;
    }
    if (flat) { /* one fraction for every GEMM */
        hw->n_gemm = 1;
        hw->gemm_dim[0] = 1;
        hw->gemm_eff[0] = hw->achievable;
    }
    hw->achievable = hw->gemm_eff[hw->n_gemm - 1];
    for (int i = 0; i < hw->n_gemm; i++)
        if (hw->gemm_eff[i] > hw->achievable) hw->achievable = hw->gemm_eff[i];
    if (!mem_eff) hw->memory_eff = 0.8;
    int headroom = 0;
    for (int i = 0; i < N_KEYS; i++)
        if (KEYS[i].offset == OFF(headroom_fraction)) headroom = seen[i];
    if (!headroom) hw->headroom_fraction = 0.05;
    hw->headroom_origin = headroom ? HW_HEADROOM_PROFILE : HW_HEADROOM_DEFAULT;
    /* on the CPU backend "host" memory is the device's own */
    if (!hw->gpu && hw->host_link_bw <= 0) hw->host_link_bw = hw->memory_bw;
    if (!hw->gpu && hw->host_memory_bw <= 0) hw->host_memory_bw = hw->memory_bw;
    if (hw->gpu && hw->peak_bf16 <= 0) {
        snprintf(err, errlen, "%s: a gpu profile needs peak_bf16_tflops > 0", file);
        return -1;
    }
    if (hw->gpu && (hw->memory <= 0 || hw->gpus_per_node < 1)) {
        snprintf(err, errlen, "%s: a gpu profile needs memory_mib > 0 and gpus_per_node >= 1", file);
        return -1;
    }
    return host_defaults(hw);
}

int hw_load_string(hw_profile *hw, const char *text, size_t len, const char *name, char *err,
                   size_t errlen)
{
    memset(hw, 0, sizeof *hw);
    snprintf(hw->source, sizeof hw->source, "%s", name);
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: cannot start the YAML parser", name);
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc;
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "%s:%d:%d: %s", name, (int)parser.problem_mark.line + 1,
                 (int)parser.problem_mark.column + 1, parser.problem ? parser.problem : "bad YAML");
        rc = -1;
    } else {
        rc = load_mapping(hw, &doc, name, err, errlen);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    return rc;
}

int hw_load_file(hw_profile *hw, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return -1;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            char *nb = cap <= (1u << 20) ? realloc(buf, cap) : NULL;
            if (!nb) {
                free(buf);
                fclose(f);
                snprintf(err, errlen, "%s: too large for a hardware profile", path);
                return -1;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    fclose(f);
    int rc = hw_load_string(hw, buf, len, path, err, errlen);
    free(buf);
    return rc;
}

/* The directories a profile name is looked up in, in order; returns how many. */
static int search_dirs(char dirs[4][PATH_MAX])
{
    int n = 0;
    const char *env = dt_env_get()->hardware_dir;
    if (*env) snprintf(dirs[n++], PATH_MAX, "%s", env);
    snprintf(dirs[n++], PATH_MAX, "configs/hardware");
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(dirs[n++], PATH_MAX, "%.3800s/../configs/hardware", exe);
            snprintf(dirs[n++], PATH_MAX, "%.3800s/../share/dtrun/configs/hardware", exe);
        }
    }
    return n;
}

static int is_path(const char *what)
{
    size_t n = strlen(what);
    return strchr(what, '/') || (n > 5 && strcmp(what + n - 5, ".yaml") == 0);
}

/* "a, b, c" of the profiles in the first directory that has any; suggestion too. */
static void known_names(char dirs[4][PATH_MAX], int nd, const char *what, char *out, size_t n,
                        char *best, size_t bn)
{
    out[0] = best[0] = 0;
    suggest sg;
    suggest_init(&sg, what, strlen(what));
    char names[64][HW_NAME_MAX];
    int count = 0;
    for (int d = 0; d < nd && count == 0; d++) {
        DIR *dir = opendir(dirs[d]);
        if (!dir) continue;
        struct dirent *e;
        while ((e = readdir(dir)) && count < 64) {
            size_t len = strlen(e->d_name);
            if (len <= 5 || len - 5 >= HW_NAME_MAX || strcmp(e->d_name + len - 5, ".yaml")) continue;
            memcpy(names[count], e->d_name, len - 5);
            names[count][len - 5] = 0;
            count++;
        }
        closedir(dir);
    }
    qsort(names, (size_t)count, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    size_t at = 0, wl = strlen(what), bat = 0;
    for (int i = 0; i < count && at < n; i++) {
        at += (size_t)snprintf(out + at, n - at, "%s%s", i ? ", " : "", names[i]);
        suggest_offer(&sg, names[i], names[i]);
        /* A family name ("h100") means its variants ("h100-sxm", "h100-pcie"),
         * however far they are by edit distance ("h200" is closer to "h100"). */
        if (wl > 0 && !strncasecmp(names[i], what, wl) && bat < bn)
            bat += (size_t)snprintf(best + bat, bn - bat, "%s'%s'", bat ? " or " : "", names[i]);
    }
    if (!bat && suggest_best(&sg)) snprintf(best, bn, "'%s'", suggest_best(&sg));
}

int hw_load(hw_profile *hw, const char *what, char *err, size_t errlen)
{
    if (is_path(what)) return hw_load_file(hw, what, err, errlen);
    if (strlen(what) >= HW_NAME_MAX) {
        snprintf(err, errlen, "hardware '%.64s...': a profile name has at most %d characters", what, HW_NAME_MAX - 1);
        return -1;
    }
    for (const char *c = what; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '-' && *c != '_' && *c != '.') {
            snprintf(err, errlen, "hardware '%s': a profile name has letters, digits, '-', '_' and '.' only", what);
            return -1;
        }
    char dirs[4][PATH_MAX];
    int nd = search_dirs(dirs);
    for (int d = 0; d < nd; d++) {
        char path[PATH_MAX + HW_NAME_MAX + 8];
        snprintf(path, sizeof path, "%.4095s/%.63s.yaml", dirs[d], what);
        if (access(path, R_OK) == 0) return hw_load_file(hw, path, err, errlen);
    }
    char known[1024], best[4 * HW_NAME_MAX + 32];
    known_names(dirs, nd, what, known, sizeof known, best, sizeof best);
    if (!known[0])
        snprintf(err, errlen, "unknown hardware '%s' (no profiles found in configs/hardware or $DTRUN_HARDWARE_DIR)", what);
    else if (best[0])
        snprintf(err, errlen, "unknown hardware '%s' (known: %s); did you mean %s?", what, known, best);
    else
        snprintf(err, errlen, "unknown hardware '%s' (known: %s)", what, known);
    return -1;
}

double hw_fixed_overhead(const hw_profile *hw, int world)
{
    /* one process makes no communicator: no NCCL buffers */
    return hw->cuda_context + (world > 1 ? hw->nccl : 0) + hw->cublas_workspace;
}

double hw_headroom(const hw_profile *hw, double rank_memory)
{
    return hw->headroom_bytes > 0 ? hw->headroom_bytes : hw->headroom_fraction * rank_memory;
}

void hw_headroom_origin(const hw_profile *hw, char *out, size_t n)
{
    if (hw->headroom_origin == HW_HEADROOM_FLAG)
        snprintf(out, n, "--headroom");
    else if (hw->headroom_origin == HW_HEADROOM_PROFILE)
        snprintf(out, n, "headroom_percent of the %s profile; --headroom to change", hw->name);
    else
        snprintf(out, n, "the default, the %s profile sets no headroom_percent; --headroom to change", hw->name);
}

/* A table read linearly in log2(dim) between its points, flat beyond its ends. */
static double table_at(const double *dims, const double *effs, int n, double dim)
{
    if (n == 1 || dim <= dims[0]) return effs[0];
    if (dim >= dims[n - 1]) return effs[n - 1];
    int i = 1;
    while (dims[i] < dim) i++;
    double x0 = log2(dims[i - 1]), x1 = log2(dims[i]), x = log2(dim);
    return effs[i - 1] + (effs[i] - effs[i - 1]) * (x - x0) / (x1 - x0);
}

double hw_gemm_efficiency(const hw_profile *hw, double dim)
{
    if (hw->n_gemm < 1) return hw->achievable;
    return table_at(hw->gemm_dim, hw->gemm_eff, hw->n_gemm, dim);
}

double hw_attention_efficiency(const hw_profile *hw, double keys)
{
    return hw->n_attn > 0 ? table_at(hw->attn_keys, hw->attn_eff, hw->n_attn, keys) : 0;
}

double hw_peak(const hw_profile *hw, int mixed_bf16)
{
    return mixed_bf16 && hw->peak_bf16 > 0 ? hw->peak_bf16 : hw->peak_fp32;
}

const char *hw_profile_for_device(const char *device_name)
{
    if (!device_name || !device_name[0]) return NULL;
    if (!strcmp(device_name, "cpu")) return "cpu";
    /* a PCIe H100 has less than the SXM part's peak: no profile says it */
    if (strstr(device_name, "H100") && !strcasestr(device_name, "PCIe")) return "h100-sxm";
    if (strstr(device_name, "H200")) return "h200";
    if (strstr(device_name, "A100")) return strstr(device_name, "40GB") ? "a100-40g" : "a100-80g";
    if (strstr(device_name, "L40S")) return "l40s";
    return NULL;
}
