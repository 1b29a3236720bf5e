/* checkpoint.c — resume, save and stop-signal policy of the training loop
 * (checkpoint.h). */
#include "runtime/train/checkpoint.h"
#include "runtime/train/provenance.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/util/clock.h"
#include "runtime/ckpt/ckpt.h"
#include "runtime/env.h"
#include "runtime/worker/engine_ckpt.h"
#include "runtime/train/init_from.h"
#include "runtime/train/train.h"

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) { stop_signal = sig; }

void checkpoint_signals_install(const job_spec *job)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    /* Without a place to save, SIGTERM, SIGINT and SIGHUP stop the worker at
     * once, as before. With one, Ctrl-C and a closed terminal (the agent
     * forwards SIGINT / SIGHUP) mean what SIGTERM means: save, then stop. */
    if (job->checkpoint.dir[0]) {
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
    }
}

int checkpoint_signal_pending(void) { return stop_signal; }

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {}
}

void checkpoint_test_step_delay(void)
{
    int ms = dt_env_get()->test_step_delay_ms;
    if (ms > 0) sleep_ms(ms);
}

long checkpoint_test_stop_step(void) { return dt_env_get()->test_stop_step; }

void train_progress_add_loss(train_progress *p, double loss)
{
    if (p->n_tail == CKPT_LOSS_TAIL) {
        memmove(p->tail, p->tail + 1, (CKPT_LOSS_TAIL - 1) * sizeof(double));
        p->n_tail--;
    }
    p->tail[p->n_tail++] = loss;
}

/* ---- resume ---- */

/* The checkpoint's model is the job's, or one line saying where they differ. */
static int same_model(const ckpt *ck, const job_model *m, char *err, size_t errlen)
{
    const ckpt_info *in = ckpt_get_info(ck);
    if (!in->has_model) return 0;
    const job_model *c = &in->model;
    const struct {
        const char *name;
        int saved, now;
    } dims[] = {{"n_layer", c->n_layer, m->n_layer},          {"n_head", c->n_head, m->n_head},
                {"d_model", c->d_model, m->d_model},          {"d_ff", c->d_ff, m->d_ff},
                {"vocab_size", c->vocab_size, m->vocab_size}, {"seq_len", c->seq_len, m->seq_len},
                {"image_size", c->image_size, m->image_size}, {"patch_size", c->patch_size, m->patch_size},
                {"channels", c->channels, m->channels},       {"n_classes", c->n_classes, m->n_classes},
                {"n_kv_head", job_model_kv_heads(c), job_model_kv_heads(m)},
                {"tie_embeddings", c->tie_embeddings, m->tie_embeddings}};
    if (c->kind != m->kind) {
        snprintf(err, errlen, "%s: the checkpoint holds a %s model but the job trains a %s", ckpt_path(ck),
                 job_model_kind_name(c->kind), job_model_kind_name(m->kind));
        return -1;
    }
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        if (dims[i].saved == dims[i].now) continue;
        snprintf(err, errlen, "%s: the checkpoint's model has %s %d but the job's has %d (another model)",
                 ckpt_path(ck), dims[i].name, dims[i].saved, dims[i].now);
        return -1;
    }
    /* model.attention is not compared (nor recorded beside these): fused and
     * naive compute the same function of the same weights */
    if (m->kind == MODEL_LLAMA && job_model_rope_theta(c) != job_model_rope_theta(m)) {
        snprintf(err, errlen, "%s: the checkpoint's model turns its rotary embeddings with rope_theta %g but the "
                 "job's with %g (set model.rope_theta as it was trained)", ckpt_path(ck), job_model_rope_theta(c),
                 job_model_rope_theta(m));
        return -1;
    }
    if (c->activation != m->activation || job_model_norm_eps(c) != job_model_norm_eps(m)) {
        snprintf(err, errlen, "%s: the checkpoint's model computes activation %s, norm_eps %g but the job's %s, %g "
                 "(set model.activation and model.norm_eps as it was trained)", ckpt_path(ck),
                 job_activation_name(c->activation), job_model_norm_eps(c), job_activation_name(m->activation),
                 job_model_norm_eps(m));
        return -1;
    }
    return 0;
}

/* What checkpoint.resume names: 0 with *path (a checkpoint to load), 1 for a
 * fresh start, -1 with err. */
static int resume_source(const job_spec *job, const char **path, char *err, size_t errlen)
{
    const job_checkpoint *c = &job->checkpoint;
    if (!strcmp(c->resume, "never")) return 1;
    if (strcmp(c->resume, "auto") != 0) {
        *path = c->resume;
        return 0;
    }
    if (!c->dir[0]) return 1;
    long step;
    int rc = ckpt_latest_step(c->dir, &step, err, errlen);
    if (rc != 0) return rc;
    *path = c->dir;
    return 0;
}

int checkpoint_check_resume(const job_spec *job, char *err, size_t errlen)
{
    const char *path = NULL;
    char why[1024] = "";
    ckpt *ck = NULL;
    int rc = resume_source(job, &path, why, sizeof why);
    if (rc == 0 && ckpt_open_index(path, &ck, why, sizeof why) != 0) rc = -1;
    if (rc == 0 && same_model(ck, &job->model, why, sizeof why) != 0) rc = -1;
    ckpt_close(ck);
    if (rc >= 0) return DT_EXIT_OK;
    snprintf(err, errlen, "%s: cannot resume: %s; to start otherwise, set checkpoint.resume to never or to an "
                          "older step directory", job->path, why);
    return DT_EXIT_CKPT;
}

/* Training resumes (progress, provenance check, a hint to start otherwise);
 * inference only takes the weights (the data it reads is its own business). */
typedef enum { LOAD_TO_TRAIN = 0, LOAD_TO_INFER } load_purpose;

static int checkpoint_load(engine *e, const job_spec *job, train_progress *p, int *resumed,
                           load_purpose purpose, char *err, size_t errlen)
{
    const int train = purpose == LOAD_TO_TRAIN;
    memset(p, 0, sizeof *p);
    *resumed = 0;
    const char *path = NULL;
    char why[1024] = "";
    ckpt *ck = NULL;
    int rc = resume_source(job, &path, why, sizeof why);
    if (rc == 0 && ckpt_open(path, &ck, why, sizeof why) != 0) rc = -1;
    if (rc == 0 && same_model(ck, &job->model, why, sizeof why) != 0) rc = -1;
    /* every rank reads the same files, but a rank could still fail alone
     * (memory, a flaky mount): agree before anyone loads */
    int any = 0, arc = engine_any(e, rc < 0, &any, err, errlen);
    if (arc != DT_EXIT_OK || any) {
        ckpt_close(ck);
        if (arc != DT_EXIT_OK) return arc;
        if (rc < 0 && train) {
            snprintf(err, errlen, "rank %d: cannot resume: %s; to start otherwise, set checkpoint.resume to "
                                  "never or to an older step directory", engine_rank(e), why);
        } else if (rc < 0) {
            snprintf(err, errlen, "rank %d: cannot load the weights: %s", engine_rank(e), why);
        } else {
            snprintf(err, errlen, "rank %d: cannot %s: failed on another rank (see its message)", engine_rank(e),
                     train ? "resume" : "load the weights");
            sleep_ms(300); /* the rank with the reason exits first: the agent's root cause */
        }
        return DT_EXIT_CKPT;
    }
    if (rc == 1) /* a fresh start: from model.init_from's weights when it names a folder */
        return job->model.init_from[0] ? init_from_load(e, job, err, errlen) : DT_EXIT_OK;
    rc = engine_load_checkpoint(e, ck, err, errlen);
    /* provenance: the data the checkpoint was trained on, against the files
     * now (rank 0 compares; under DTRUN_STRICT_DATA all stop on its word) */
    if (rc == DT_EXIT_OK && train) {
        char lines[4096] = "";
        int changed = engine_rank(e) == 0 ? provenance_data_changes(ckpt_get_info(ck)->provenance, lines, sizeof lines) : 0;
        int strict = dt_env_get()->strict_data, stop = 0;
        for (char *l = changed ? strtok(lines, "\n") : NULL; l; l = strtok(NULL, "\n"))
            fprintf(stderr, "dtrun: %s: %s%s\n", strict ? "error" : "warning", l,
                    strict ? " (--strict-data)" : "; resuming anyway (--strict-data makes it an error)");
        if (strict) rc = engine_any(e, changed > 0, &stop, err, errlen);
        if (rc == DT_EXIT_OK && stop) {
            snprintf(err, errlen, "rank %d: %s: the data changed since the checkpoint (--strict-data)", engine_rank(e),
                     ckpt_path(ck));
            rc = DT_EXIT_DATA;
        }
    }
    if (rc == DT_EXIT_OK) {
        const ckpt_info *in = ckpt_get_info(ck);
        p->step = in->step;
        p->updates = in->optim_step;
        if (strcmp(job->checkpoint.resume, "auto") != 0) snprintf(p->pinned, sizeof p->pinned, "%s", ckpt_path(ck));
        for (int i = 0; i < in->n_loss; i++) train_progress_add_loss(p, in->loss_tail[i]);
        *resumed = 1;
        if (engine_rank(e) == 0) {
            char cp[24] = "";
            if (in->cp > 1) snprintf(cp, sizeof cp, " cp=%d", in->cp);
            fprintf(stderr, "dtrun: %s %s: step %ld (saved under dp=%d%s tp=%d pp=%d %s; now %s)\n",
                    train ? "resuming from" : "weights from", ckpt_path(ck), in->step, in->dp, cp, in->tp, in->pp,
                    in->mode, engine_layout(e));
            if (train && in->seed != job->train.seed)
                fprintf(stderr, "dtrun: note: the checkpoint was trained with seed %llu, this job uses %llu "
                                "(the data from here on follows the job's)\n", in->seed, job->train.seed);
        }
    }
    ckpt_close(ck);
    return rc;
}

int checkpoint_resume(engine *e, const job_spec *job, train_progress *p, int *resumed, char *err,
                      size_t errlen)
{
    return checkpoint_load(e, job, p, resumed, LOAD_TO_TRAIN, err, errlen);
}

int checkpoint_load_weights(engine *e, const job_spec *job, char *err, size_t errlen)
{
    train_progress p;
    int loaded = 0;
    return checkpoint_load(e, job, &p, &loaded, LOAD_TO_INFER, err, errlen);
}

/* ---- save ---- */

/* The resolved job as YAML, for the index (malloc'd; NULL when out of memory). */
static char *job_yaml(const job_spec *job)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    job_print(job, f);
    fclose(f);
    return text;
}

int checkpoint_save(engine *e, const job_spec *job, const train_progress *p, char *err, size_t errlen)
{
    const char *dir = job->checkpoint.dir;
    char *yaml = job_yaml(job);
    /* rank 0 writes the index: only it needs the provenance */
    char *prov = NULL;
    if (engine_rank(e) == 0) {
        char why[512];
        prov = provenance_json(job, engine_backend_name(e), engine_world_size(e), why, sizeof why);
        if (!prov) fprintf(stderr, "dtrun: warning: the checkpoint will have no provenance: %s\n", why);
    }
    ckpt_meta meta = {.step = p->step, .seed = job->train.seed, .job_yaml = yaml, .model = &job->model,
                      .loss_tail = p->tail, .n_loss = p->n_tail, .optim_step = p->updates,
                      .pinned = p->pinned[0] ? p->pinned : NULL, .provenance = prov};
    engine_ckpt_meta_layout(e, &meta);
    const dt_env *env = dt_env_get();
    long delay_step = env->test_ckpt_delay_step;
    int delay = delay_step < 0 || delay_step == p->step ? env->test_ckpt_delay_ms : 0;
    double t0 = clock_now_s();
    int already = 0;
    int rc = engine_save_checkpoint(e, dir, &meta, job->checkpoint.keep, delay, &already, err, errlen);
    free(yaml);
    free(prov);
    if (rc == DT_EXIT_CKPT) {
        /* say what a person needs to know next: is anything lost? */
        long prev;
        char e2[256];
        size_t used = strlen(err);
        if (ckpt_latest_step(dir, &prev, e2, sizeof e2) == 0)
            snprintf(err + used, errlen - used, "; the previous checkpoint (step %ld in %s) is intact", prev, dir);
        else
            snprintf(err + used, errlen - used, "; there is no earlier checkpoint in %s", dir);
        return rc;
    }
    if (rc != DT_EXIT_OK) return rc;
    if (engine_rank(e) == 0 && !already)
        fprintf(stderr, "dtrun: checkpoint step %ld saved to %s (%.2f s)\n", p->step, dir,
                clock_now_s() - t0);
    return DT_EXIT_OK;
}
