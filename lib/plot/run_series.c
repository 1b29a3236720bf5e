/* run_series.c — see run_series.h. */
#include "lib/plot/run_series.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/errline.h"

static int push(series *s, double x, double y)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (!nx) return -1;
        s->x = nx;
        double *ny = realloc(s->y, (size_t)cap * sizeof *ny);
        if (!ny) return -1;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
    return 0;
}

int run_is_rank_file(const char *path)
{
    const char *dot = strstr(path, ".rank");
    if (!dot) return 0;
    const char *p = dot + 5;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    return !strcmp(p, ".jsonl") && !strstr(p, ".rank");
}

static double num(const cJSON *o, const char *key, int *found)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *found = cJSON_IsNumber(v);
    return *found ? v->valuedouble : 0;
}

/* Calls one line at a time: each must be a JSON object. */
static int read_lines(const char *path, int (*fn)(const cJSON *, void *), void *arg, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) return errline(err, errlen, "%s: cannot read (%s)", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long line_no = 0;
    int rc = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        line_no++;
        if (n == 0 || line[strspn(line, " \t\r\n")] == 0) continue;
        cJSON *j = cJSON_ParseWithLength(line, (size_t)n);
        if (!cJSON_IsObject(j)) {
            cJSON_Delete(j);
            rc = errline(err, errlen, "%s:%ld: not a JSON object (a dtrun metrics file holds one per line)", path,
                         line_no);
            break;
        }
        rc = fn(j, arg);
        cJSON_Delete(j);
        if (rc) {
            rc = errline(err, errlen, "%s:%ld: out of memory", path, line_no);
            break;
        }
    }
    free(line);
    fclose(f);
    return rc;
}

static int main_line(const cJSON *j, void *arg)
{
    run_series *r = arg;
    int has_step, has;
    double step = num(j, "step", &has_step);
    if (!has_step) return 0;
    double v = num(j, "loss", &has);
    if (has && push(&r->loss, step, v)) return -1;
    v = num(j, "val_loss", &has);
    if (has && push(&r->val_loss, step, v)) return -1;
    v = num(j, "tokens_per_s", &has);
    if (!has) {
        v = num(j, "images_per_s", &has);
        r->images |= has;
    }
    if (has && push(&r->throughput, step, v)) return -1;
    /* model.moe: the worst block's imbalance, the balance loss per block */
    const cJSON *moe = cJSON_GetObjectItemCaseSensitive(j, "moe"), *b;
    int blocks = cJSON_IsArray(moe) ? cJSON_GetArraySize(moe) : 0;
    const cJSON *list = blocks ? moe : NULL;
    double worst = 0;
    cJSON_ArrayForEach(b, list) {
        double im = num(b, "imbalance", &has);
        if (has && im > worst) worst = im;
    }
    if (blocks && push(&r->moe_imbalance, step, worst)) return -1;
    v = num(j, "aux_loss", &has);
    if (blocks && has && push(&r->moe_aux, step, v / blocks)) return -1;
    return 0;
}

typedef struct {
    run_series *r;
    int rank;
} rank_ctx;

static int rank_line(const cJSON *j, void *arg)
{
    rank_ctx *c = arg;
    int has_step, has;
    double step = num(j, "step", &has_step);
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(j, "mem_peak");
    double total = num(mem, "total", &has);
    if (has_step && has && push(&c->r->mem[c->rank], step, total / (1 << 20))) return -1;
    double rss = num(j, "rss_peak", &has);
    if (has_step && has && push(&c->r->rss[c->rank], step, rss / (1 << 20))) return -1;
    return 0;
}

int run_series_read(run_series *r, const char *path, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base), stem_len = strlen(path);
    if (n > 6 && !strcmp(base + n - 6, ".jsonl")) n -= 6, stem_len -= 6;
    snprintf(r->name, sizeof r->name, "%.*s", (int)n, base);
    if (read_lines(path, main_line, r, err, errlen) != 0) return -1;
    if (r->loss.n == 0 && r->val_loss.n == 0)
        return errline(err, errlen, "%s: no step with a loss (not a dtrun metrics file: log.metrics)", path);
    for (int rank = 0; rank < RUN_MAX_RANKS; rank++) {
        char rp[4200];
        snprintf(rp, sizeof rp, "%.*s.rank%d.jsonl", (int)stem_len, path, rank);
        FILE *f = fopen(rp, "r");
        if (!f) break;
        fclose(f);
        rank_ctx c = {r, rank};
        if (read_lines(rp, rank_line, &c, err, errlen) != 0) return -1;
        r->n_ranks = rank + 1;
    }
    return 0;
}

static void series_free(series *s)
{
    free(s->x);
    free(s->y);
}

void run_series_free(run_series *r)
{
    series_free(&r->loss);
    series_free(&r->val_loss);
    series_free(&r->moe_imbalance);
    series_free(&r->moe_aux);
    series_free(&r->throughput);
    for (int i = 0; i < RUN_MAX_RANKS; i++) series_free(&r->mem[i]), series_free(&r->rss[i]);
}
