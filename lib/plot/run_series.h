/* run_series.h — the curves of one training run, read from its metrics file
 * (log.metrics, JSONL: step records with loss and tokens_per_s or
 * images_per_s, evaluation records with val_loss) and, when they sit beside
 * it, its ranks' files STEM.rankN.jsonl (mem_peak.total: the bytes dtrun
 * accounts for; rss_peak: the OS's peak resident set, when recorded); with
 * model.moe, each step's worst block imbalance (moe[].imbalance) and balance
 * loss per MoE block (aux_loss over the blocks). */
#ifndef DTRUN_PLOT_RUN_SERIES_H
#define DTRUN_PLOT_RUN_SERIES_H

#include <stddef.h>

typedef struct {
    double *x, *y;
    int n, cap;
} series;

enum { RUN_MAX_RANKS = 64 };

typedef struct {
    char name[256];    /* the file's name without .jsonl */
    series loss, val_loss, throughput;
    series moe_imbalance, moe_aux;  /* model.moe: the worst block's, aux_loss per block; else empty */
    int images;        /* throughput is images/s (ViT), not tokens/s */
    series mem[RUN_MAX_RANKS]; /* accounted peak MiB of rank r (mem_peak.total) */
    series rss[RUN_MAX_RANKS]; /* the OS's peak resident set of rank r, MiB (rss_peak); may be empty */
    int n_ranks;
} run_series;

/* Whether path names a rank's own file (….rankN.jsonl), not a run. */
int run_is_rank_file(const char *path);

/* Reads path and its rank files. 0, or -1 with err ("PATH:LINE: why"). */
int run_series_read(run_series *r, const char *path, char *err, size_t errlen);
void run_series_free(run_series *r);

#endif
