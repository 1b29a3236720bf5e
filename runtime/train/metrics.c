/* metrics.c — see metrics.h. */
#include "runtime/train/metrics.h"

#include <cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/env.h"
#include "runtime/train/tfevents.h"

struct metrics {
    FILE *jsonl;      /* NULL when no metrics file */
    int rank;
    int live;         /* rewrite one terminal line with \r */
    int every;        /* console lines: every N steps (0: none) */
    int jsonl_every;  /* JSONL step records: every N steps, log.every as on the console */
    int attempt;      /* DTRUN_ATTEMPT, in every record: a restart's repeated steps stay apart */
    int steps;
    int first_step;   /* the first step this process logged (resumed runs start late) */
    const char *unit; /* "tok/s" or "img/s" */
    tfevents *tb;     /* NULL when no log.tensorboard */
};

/* A live progress line is on stdout without its newline: the next line
 * written there erases it first, or it would run on behind it. One per
 * process: only rank 0 prints. */
static int live_pending;

static void end_live_line(void)
{
    if (live_pending) fputs("\r\033[K", stdout);
    live_pending = 0;
}

void metrics_say(const char *fmt, ...)
{
    end_live_line();
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

/* Create the directories leading to `path` (like mkdir -p of its dirname). */
static void make_parents(const char *path)
{
    char buf[JOB_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(buf, 0777);
        *p = '/';
    }
}

metrics *metrics_open(const job_spec *job, int rank, int append, char *err, size_t errlen)
{
    metrics *m = calloc(1, sizeof *m);
    if (!m) { snprintf(err, errlen, "out of memory"); return NULL; }
    m->rank = rank;
    m->every = job->log.every > 0 ? job->log.every : 1;
    m->jsonl_every = m->every;
    m->attempt = dt_env_get()->attempt;
    m->steps = job->train.steps;
    m->unit = job_model_is_lm(&job->model) ? "tok/s" : "img/s";
    /* auto: live where the lines are read on a terminal. Through the agent
     * this worker's stdout is a pipe; the agent says whether it shows it on a
     * terminal (DTRUN_STDOUT_TTY), and redraws the line there. */
    int tty = dt_env_get()->stdout_tty;
    m->live = job->log.progress == PROGRESS_ON ||
              (job->log.progress == PROGRESS_AUTO && (tty >= 0 ? tty : isatty(STDOUT_FILENO)));
    if (job->log.progress == PROGRESS_OFF) m->every = 0;
    if (rank == 0 && job->log.metrics[0]) {
        make_parents(job->log.metrics);
        /* a restart keeps what earlier attempts wrote: their records carry their attempt */
        m->jsonl = fopen(job->log.metrics, append || m->attempt > 0 ? "a" : "w");
        if (!m->jsonl) {
            snprintf(err, errlen, "%s: cannot write metrics (%s)", job->log.metrics, strerror(errno));
            free(m);
            return NULL;
        }
    }
    if (job->log.tensorboard[0]) {
        char dir[JOB_PATH_MAX + 32];
        if (rank == 0) snprintf(dir, sizeof dir, "%s", job->log.tensorboard);
        else snprintf(dir, sizeof dir, "%s/rank%d", job->log.tensorboard, rank);
        m->tb = tfevents_open(dir, err, errlen);
        if (!m->tb) {
            if (m->jsonl) fclose(m->jsonl);
            free(m);
            return NULL;
        }
    }
    return m;
}

void metrics_log_attempt(metrics *m, long from_step)
{
    if (m->rank != 0 || !m->jsonl) return;
    const dt_env *env = dt_env_get();
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddStringToObject(o, "event", "attempt_start");
    cJSON_AddNumberToObject(o, "attempt", m->attempt);
    cJSON_AddNumberToObject(o, "restart_count", env->restart_count);
    if (env->restart_reason[0]) cJSON_AddStringToObject(o, "restart_reason", env->restart_reason);
    cJSON_AddNumberToObject(o, "from_step", (double)from_step);
    cJSON_AddNumberToObject(o, "time", (double)time(NULL));
    char *text = cJSON_PrintUnformatted(o);
    if (text) fprintf(m->jsonl, "%s\n", text);
    fflush(m->jsonl);
    free(text);
    cJSON_Delete(o);
}

void metrics_close(metrics *m)
{
    if (!m) return;
    tfevents_close(m->tb);
    if (m->jsonl) fclose(m->jsonl);
    free(m);
}

static void fmt_eta(char *buf, size_t n, double secs)
{
    int s = secs < 0 ? 0 : (int)(secs + 0.5);
    if (s >= 3600) snprintf(buf, n, "%dh%02dm", s / 3600, s / 60 % 60);
    else snprintf(buf, n, "%dm%02ds", s / 60, s % 60);
}

void metrics_log_memory(metrics *m, int step, double accounted_peak_bytes, double rss_peak_bytes)
{
    if (!m->tb) return;
    tfevents_scalar(m->tb, "memory/accounted_peak_MiB", step, accounted_peak_bytes / (1 << 20));
    tfevents_scalar(m->tb, "memory/rss_peak_MiB", step, rss_peak_bytes / (1 << 20));
    tfevents_flush(m->tb);
}

double metrics_moe_imbalance(const metrics_moe *m, int j)
{
    const double *c = m->chosen + (size_t)j * (size_t)m->experts;
    double sum = 0, max = 0;
    for (int e = 0; e < m->experts; e++) {
        sum += c[e];
        if (c[e] > max) max = c[e];
    }
    return sum > 0 ? max / (sum / m->experts) : 0;
}

/* The worst MoE block's imbalance and the share of choices dropped, over
 * every block. */
static void moe_summary(const metrics_moe *m, double *worst, double *dropped)
{
    double all = 0, drop = 0;
    *worst = 0;
    for (int j = 0; j < m->layers; j++) {
        double r = metrics_moe_imbalance(m, j);
        if (r > *worst) *worst = r;
        for (int e = 0; e < m->experts; e++) all += m->chosen[(size_t)j * (size_t)m->experts + e];
        drop += m->dropped[j];
    }
    *dropped = all > 0 ? drop / all : 0;
}

/* The step record's MoE fields: "aux_loss":A,"moe":[{"layer":L,"tokens":[...],
 * "imbalance":R,"dropped":D},...], (a trailing comma: "attempt" follows). */
static void moe_jsonl(FILE *f, const metrics_moe *m)
{
    fprintf(f, "\"aux_loss\":%.6f,\"moe\":[", m->aux_loss);
    for (int j = 0; j < m->layers; j++) {
        fprintf(f, "%s{\"layer\":%d,\"tokens\":[", j ? "," : "", m->layer[j]);
        for (int e = 0; e < m->experts; e++)
            fprintf(f, "%s%.0f", e ? "," : "", m->chosen[(size_t)j * (size_t)m->experts + e]);
        fprintf(f, "],\"imbalance\":%.6g,\"dropped\":%.0f}", metrics_moe_imbalance(m, j), m->dropped[j]);
    }
    fprintf(f, "],");
}

static void moe_tensorboard(tfevents *tb, int step, const metrics_moe *m)
{
    double worst, dropped;
    moe_summary(m, &worst, &dropped);
    tfevents_scalar(tb, "train/aux_loss", step, m->aux_loss);
    tfevents_scalar(tb, "moe/imbalance", step, worst);
    for (int j = 0; j < m->layers; j++) {
        char tag[64];
        snprintf(tag, sizeof tag, "moe/layer_%d/imbalance", m->layer[j]);
        tfevents_scalar(tb, tag, step, metrics_moe_imbalance(m, j));
        snprintf(tag, sizeof tag, "moe/layer_%d/dropped", m->layer[j]);
        tfevents_scalar(tb, tag, step, m->dropped[j]);
    }
}

void metrics_log_step(metrics *m, const metrics_step *s)
{
    if (m->rank != 0) return;
    if (m->tb) {
        if (s->moe) moe_tensorboard(m->tb, s->step, s->moe);
        tfevents_scalar(m->tb, "train/loss", s->step, s->loss);
        tfevents_scalar(m->tb, "train/lr", s->step, s->lr);
        tfevents_scalar(m->tb, "train/grad_norm", s->step, s->grad_norm);
        tfevents_scalar(m->tb, m->unit[0] == 't' ? "perf/tokens_per_s" : "perf/images_per_s", s->step,
                        s->samples_per_s);
        if (s->mfu >= 0) tfevents_scalar(m->tb, "perf/mfu_percent", s->step, 100 * s->mfu);
        tfevents_flush(m->tb);
    }
    if (m->jsonl && (s->step % m->jsonl_every == 0 || s->step == m->steps)) {
        fprintf(m->jsonl,
                "{\"step\":%d,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6f,\"%s\":%.1f,\"elapsed\":%.3f,",
                s->step, s->loss, s->lr, s->grad_norm,
                m->unit[0] == 't' ? "tokens_per_s" : "images_per_s", s->samples_per_s, s->elapsed);
        if (s->mfu >= 0) fprintf(m->jsonl, "\"mfu_percent\":%.6g,", 100 * s->mfu);
        if (s->moe) moe_jsonl(m->jsonl, s->moe);
        fprintf(m->jsonl, "\"attempt\":%d}\n", m->attempt);
        fflush(m->jsonl);
    }
    if (!m->every) return;
    if (!m->first_step) m->first_step = s->step;
    int last = s->step == m->steps;
    if (!last && s->step % m->every) return;
    char eta[32];
    fmt_eta(eta, sizeof eta, s->elapsed / (s->step - m->first_step + 1) * (m->steps - s->step));
    /* model.moe: the worst block's load imbalance (and what a capacity dropped) */
    char moe[64] = "";
    if (s->moe) {
        double worst, dropped;
        moe_summary(s->moe, &worst, &dropped);
        int n = snprintf(moe, sizeof moe, " | moe imb %.2f", worst);
        if (dropped > 0) snprintf(moe + n, sizeof moe - (size_t)n, " drop %.1f%%", 100 * dropped);
    }
    printf("%sstep %d/%d | loss %.4f | lr %.2e | norm %.3f%s | %.0f %s | ETA %s%s", m->live ? "\r\033[K" : "", s->step,
           m->steps, s->loss, s->lr, s->grad_norm, moe, s->samples_per_s, m->unit, eta, m->live && !last ? "" : "\n");
    live_pending = m->live && !last;
    fflush(stdout);
}

void metrics_log_eval(metrics *m, int step, double val_loss, double acc)
{
    if (m->rank != 0) return;
    if (m->tb) {
        tfevents_scalar(m->tb, "val/loss", step, val_loss);
        if (acc >= 0) tfevents_scalar(m->tb, "val/acc", step, acc);
        tfevents_flush(m->tb);
    }
    if (m->jsonl) {
        if (acc >= 0)
            fprintf(m->jsonl, "{\"step\":%d,\"val_loss\":%.6f,\"val_acc\":%.6f,\"attempt\":%d}\n", step, val_loss,
                    acc, m->attempt);
        else
            fprintf(m->jsonl, "{\"step\":%d,\"val_loss\":%.6f,\"attempt\":%d}\n", step, val_loss, m->attempt);
        fflush(m->jsonl);
    }
    end_live_line();
    if (acc >= 0) printf("eval step %d | val_loss %.4f | val_acc %.2f%%\n", step, val_loss, 100 * acc);
    else printf("eval step %d | val_loss %.4f\n", step, val_loss);
    fflush(stdout);
}

void metrics_summary(metrics *m, int steps, double loss, double val_loss, double acc,
                     double elapsed, double samples)
{
    if (m->rank != 0) return;
    end_live_line();
    printf("done: %d steps in %.1f s | loss %.4f | val_loss %.4f", steps, elapsed, loss, val_loss);
    if (acc >= 0) printf(" | val_acc %.2f%%", 100 * acc);
    printf(" | %.0f %s\n", elapsed > 0 ? samples / elapsed : 0.0, m->unit);
    fflush(stdout);
}
