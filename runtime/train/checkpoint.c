/* checkpoint.c — resume, save and stop-signal policy of the training loop
 * (checkpoint.h). */
#include "runtime/train/checkpoint.h"
#include "runtime/train/provenance.h"
#include "runtime/train/resume_diff.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <time.h>

#include "lib/util/clock.h"
#include "runtime/ckpt/ckpt.h"
#include "runtime/env.h"
#include "runtime/worker/engine_ckpt.h"
#include "runtime/train/init_from.h"
#include "runtime/train/metrics.h"
#include "runtime/train/resume_hint.h"
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
    if (c->lora.rank != m->lora.rank || c->lora.targets != m->lora.targets) {
        snprintf(err, errlen, "%s: the checkpoint's model has LoRA rank %d over targets 0x%x but the job's rank %d "
                 "over 0x%x (train.lora: the adapters are what a LoRA checkpoint holds)", ckpt_path(ck), c->lora.rank,
                 c->lora.targets, m->lora.rank, m->lora.targets);
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

/* Where a resume reads from. */
typedef struct {
    const char *path;       /* what to open: a DIR (its latest) or a step directory */
    char pin[JOB_PATH_MAX]; /* the step directory checkpoint.resume: PATH names, "" under auto */
    long pin_step;
    int continued;          /* a restart goes on from its own latest in checkpoint.dir, past the pin */
} resume_from;

static int same_dir(const char *a, const char *b)
{
    char ra[4096], rb[4096];
    if (realpath(a, ra) && realpath(b, rb)) return !strcmp(ra, rb);
    return !strcmp(a, b);
}

/* A restart of a run pinned to src->pin: checkpoint.dir's latest is its own
 * when it is past the pin, saved by this run (TORCHELASTIC_RUN_ID) from the
 * same pin. What it saved since the pin is then what it continues from, so a
 * crash loses at most checkpoint.every steps, pinned or not. */
static int own_latest_past_pin(const job_spec *job, const resume_from *src)
{
    const dt_env *env = dt_env_get();
    const char *dir = job->checkpoint.dir;
    long latest;
    char why[512], id[256], from[JOB_PATH_MAX];
    if (!dir[0] || !env->run_id[0]) return 0;
    if (ckpt_latest_step(dir, &latest, why, sizeof why) != 0 || latest <= src->pin_step) return 0;
    ckpt *ck = NULL;
    if (ckpt_open_index(dir, &ck, why, sizeof why) != 0) return 0;
    int own = provenance_run(ckpt_get_info(ck)->provenance, id, sizeof id, from, sizeof from) == 0 &&
              !strcmp(id, env->run_id) && from[0] && same_dir(from, src->pin);
    ckpt_close(ck);
    return own;
}

/* What checkpoint.resume names: 0 with src->path (a checkpoint to load), 1
 * for a fresh start, -1 with err. restart: this is a restart of the run (the
 * agent's attempt > 0 on some rank: every rank must choose alike, and a node
 * admitted later has an agent of its own, whose count starts at 0). */
static int resume_source(const job_spec *job, int restart, resume_from *src, char *err, size_t errlen)
{
    const job_checkpoint *c = &job->checkpoint;
    memset(src, 0, sizeof *src);
    if (!strcmp(c->resume, "never")) return 1;
    if (strcmp(c->resume, "auto") != 0) {
        ckpt *pin = NULL;
        if (ckpt_open_index(c->resume, &pin, err, errlen) != 0) return -1;
        snprintf(src->pin, sizeof src->pin, "%s", ckpt_path(pin));
        src->pin_step = ckpt_get_info(pin)->step;
        ckpt_close(pin);
        src->continued = restart && own_latest_past_pin(job, src);
        src->path = src->continued ? c->dir : c->resume;
        return 0;
    }
    if (!c->dir[0]) return 1;
    long step;
    int rc = ckpt_latest_step(c->dir, &step, err, errlen);
    if (rc != 0) return rc;
    src->path = c->dir;
    return 0;
}

/* resume_hint's test: a step directory whose index opens and whose model is the job's. */
static int holds_job_model(const char *step_dir, void *job)
{
    ckpt *ck = NULL;
    char why[1024];
    int ok = ckpt_open_index(step_dir, &ck, why, sizeof why) == 0 &&
             same_model(ck, &((const job_spec *)job)->model, why, sizeof why) == 0;
    ckpt_close(ck);
    return ok;
}

/* The run is finished when the checkpoint holds its last step: a line
 * saying so (for stdout) in out, else "". */
static int finished_line(const job_spec *job, const ckpt *ck, char *out, size_t n)
{
    long step = ckpt_get_info(ck)->step;
    out[0] = 0;
    if (step < job->train.steps) return 0;
    snprintf(out, n, "%s: the run is finished: %s holds step %ld%s train.steps %d; nothing to do (raise train.steps "
                     "to train on; dtrun eval evaluates it)", job->path, ckpt_path(ck), step,
             step == job->train.steps ? ", the last of" : ", beyond", job->train.steps);
    return 1;
}

/* The checkpoint's job against this one (resume_diff.h): 0, or -1 with the
 * refusal in why. An index without a job, or whose job does not load, is
 * only a note: its model was compared already. */
static int job_changes(const ckpt *ck, const job_spec *job, const char *allow, resume_diff *d, char *why,
                       size_t whylen, int say_notes)
{
    char e[1100];
    if (resume_diff_jobs(ckpt_get_info(ck)->job_yaml, job, allow, d, e, sizeof e) != 0) {
        if (say_notes) fprintf(stderr, "dtrun: warning: %s: %s; only its model is compared\n", ckpt_path(ck), e);
        return 0;
    }
    if (!d->n_refused) return 0;
    resume_diff_refusal(d, ckpt_path(ck), why, whylen);
    return -1;
}

int checkpoint_check_resume(const job_spec *job, const char *allow, char *finished, size_t flen, char *err,
                            size_t errlen)
{
    resume_from src;
    char why[4096] = "";
    ckpt *ck = NULL;
    resume_diff d;
    finished[0] = 0;
    int rc = resume_source(job, 0, &src, why, sizeof why); /* a launch: no restart yet */
    if (rc == 0 && ckpt_open_index(src.path, &ck, why, sizeof why) != 0) rc = -1;
    if (rc == 0 && same_model(ck, &job->model, why, sizeof why) != 0) rc = -1;
    if (rc == 0 && finished_line(job, ck, finished, flen)) {
        ckpt_close(ck);
        return DT_EXIT_OK;
    }
    if (rc == 0 && job_changes(ck, job, allow, &d, why, sizeof why, 0) != 0) {
        ckpt_close(ck);
        snprintf(err, errlen, "%s: %s", job->path, why);
        return DT_EXIT_CKPT;
    }
    ckpt_close(ck);
    if (rc >= 0) return DT_EXIT_OK;
    char hint[JOB_PATH_MAX + 128];
    resume_hint(job, src.path ? src.path : job->checkpoint.resume, holds_job_model, (void *)job, hint, sizeof hint);
    snprintf(err, errlen, "%s: cannot resume: %s; %s", job->path, why, hint);
    return DT_EXIT_CKPT;
}

/* Training resumes (progress, provenance check, a hint to start otherwise);
 * inference only takes the weights (the data it reads is its own business). */
typedef enum { LOAD_TO_TRAIN = 0, LOAD_TO_INFER } load_purpose;

/* Rank 0's line before training: where it resumes, under which layout, and
 * what changed since the checkpoint (stdout: what the run does, not a warning). */
static void say_resuming(engine *e, const ckpt *ck, const resume_from *src, const resume_diff *d, int train)
{
    /* generate and eval print their results on stdout: the line is a note there */
    FILE *out = train ? stdout : stderr;
    const ckpt_info *in = ckpt_get_info(ck);
    char cp[24] = "", pinned[JOB_PATH_MAX + 96] = "";
    if (in->cp > 1) snprintf(cp, sizeof cp, " cp=%d", in->cp);
    if (src->continued)
        snprintf(pinned, sizeof pinned, "; this run's latest, past its pin %s (restart %d)", src->pin,
                 dt_env_get()->attempt);
    fprintf(out, "dtrun: %s %s: step %ld (saved under dp=%d%s tp=%d pp=%d %s; now %s)%s%s%s\n",
           train ? "resuming from" : "weights from", ckpt_path(ck), in->step, in->dp, cp, in->tp, in->pp, in->mode,
           engine_layout(e), pinned, d->n_changed ? "; changed since: " : "", d->changed);
    fflush(out);
}

static int checkpoint_load(engine *e, const job_spec *job, train_progress *p, int *resumed,
                           load_purpose purpose, char *err, size_t errlen)
{
    const int train = purpose == LOAD_TO_TRAIN;
    memset(p, 0, sizeof *p);
    *resumed = 0;
    resume_from src;
    resume_diff d;
    memset(&d, 0, sizeof d);
    char why[4096] = "";
    ckpt *ck = NULL;
    int restart = 0, arc = engine_any(e, dt_env_get()->attempt > 0, &restart, err, errlen);
    if (arc != DT_EXIT_OK) return arc;
    int rc = resume_source(job, restart, &src, why, sizeof why);
    if (rc == 0 && ckpt_open(src.path, &ck, why, sizeof why) != 0) rc = -1;
    if (rc == 0 && same_model(ck, &job->model, why, sizeof why) != 0) rc = -1;
    int refused = 0;
    if (rc == 0 && train && job_changes(ck, job, dt_env_get()->allow_changes, &d, why, sizeof why,
                                        engine_rank(e) == 0) != 0)
        rc = -1, refused = 1;
    /* every rank reads the same files, but a rank could still fail alone
     * (memory, a flaky mount): agree before anyone loads */
    int any = 0;
    arc = engine_any(e, rc < 0, &any, err, errlen);
    if (arc != DT_EXIT_OK || any) {
        ckpt_close(ck);
        if (arc != DT_EXIT_OK) return arc;
        if (refused) {
            snprintf(err, errlen, "rank %d: %s", engine_rank(e), why);
        } else if (rc < 0 && train) {
            char hint[JOB_PATH_MAX + 128];
            resume_hint(job, src.path ? src.path : job->checkpoint.resume, holds_job_model, (void *)job, hint,
                        sizeof hint);
            snprintf(err, errlen, "rank %d: cannot resume: %s; %s", engine_rank(e), why, hint);
        } else if (rc < 0) {
            snprintf(err, errlen, "rank %d: cannot load the weights: %s", engine_rank(e), why);
        } else {
            snprintf(err, errlen, "rank %d: cannot %s: failed on another rank (see its message)", engine_rank(e),
                     train ? "resume" : "load the weights");
            sleep_ms(300); /* the rank with the reason exits first: the agent's root cause */
        }
        return DT_EXIT_CKPT;
    }
    if (rc == 1) /* a fresh start: from model.init_from's weights (and train.lora.init_from's adapter) */
        return init_from_load(e, job, err, errlen);
    /* A new launch of a finished run trains nothing and writes nothing. A
     * restart (attempt > 0) of a run that died after its last save still
     * evaluates and sums up, as the run it belongs to would have. */
    char done[2048];
    if (train && !restart && finished_line(job, ck, done, sizeof done)) {
        if (engine_rank(e) == 0) printf("dtrun: %s\n", done), fflush(stdout);
        p->step = ckpt_get_info(ck)->step;
        p->finished = 1;
        ckpt_close(ck);
        return DT_EXIT_OK;
    }
    /* train.lora: the checkpoint holds the adapters; the frozen base is model.init_from's */
    rc = init_from_base(e, job, err, errlen);
    if (rc == DT_EXIT_OK) rc = engine_load_checkpoint(e, ck, err, errlen);
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
        /* the pin stays the pin when a restart goes on past it: retention
         * keeps it, and the next restart knows this run by it */
        snprintf(p->pinned, sizeof p->pinned, "%s", src.pin);
        for (int i = 0; i < in->n_loss; i++) train_progress_add_loss(p, in->loss_tail[i]);
        *resumed = 1;
        if (engine_rank(e) == 0) say_resuming(e, ck, &src, &d, train);
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
        prov = provenance_json(job, engine_backend_name(e), engine_world_size(e), p->pinned, why, sizeof why);
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
        metrics_say("dtrun: checkpoint step %ld saved to %s (%.2f s)", p->step, dir, clock_now_s() - t0);
    return DT_EXIT_OK;
}
