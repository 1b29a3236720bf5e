/* eval.c — `dtrun eval` (eval.h): options, the launcher side, the worker. */
#include "runtime/infer/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/exit_codes.h"
#include "runtime/env.h"
#include "runtime/infer/source.h"
#include "runtime/train/checkpoint.h"
#include "runtime/worker/engine.h"

typedef struct {
    infer_source s;
    const char *job;
} eval_opts;

static int parse_opts(int argc, char **argv, eval_opts *o)
{
    memset(o, 0, sizeof *o);
    o->s.dp = o->s.tp = o->s.pp = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '='), *v = NULL;
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        static const char *const with_value[] = {"--worker", "--data", "--dp", "--tp", "--pp", "--mode", "--batch",
                                                 "--seq-len", NULL};
        int known = 0;
        for (int k = 0; with_value[k]; k++) known |= strlen(with_value[k]) == n && !strncmp(a, with_value[k], n);
        if (a[0] == '-' && !known) {
            fprintf(stderr, "dtrun: eval: unknown option '%s' (see dtrun(1))\n", a);
            return DT_EXIT_USAGE;
        }
        if (a[0] != '-') {
            if (o->s.src) {
                fprintf(stderr, "dtrun: eval: one model source, not '%s' too\n", a);
                return DT_EXIT_USAGE;
            }
            o->s.src = a;
            continue;
        }
        if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        else {
            fprintf(stderr, "dtrun: eval: %s needs a value\n", a);
            return DT_EXIT_USAGE;
        }
        int bad = 0;
        if (!strncmp(a, "--worker", n)) o->job = v;
        else if (!strncmp(a, "--data", n)) o->s.data = v;
        else if (!strncmp(a, "--mode", n)) o->s.mode = v;
        else if (!strncmp(a, "--dp", n)) bad = infer_int_opt("eval", "--dp", v, 1, 256, &o->s.dp);
        else if (!strncmp(a, "--tp", n)) bad = infer_int_opt("eval", "--tp", v, 1, 256, &o->s.tp);
        else if (!strncmp(a, "--pp", n)) bad = infer_int_opt("eval", "--pp", v, 1, 256, &o->s.pp);
        else if (!strncmp(a, "--batch", n)) bad = infer_int_opt("eval", "--batch", v, 1, 1 << 20, &o->s.global_batch);
        else bad = infer_int_opt("eval", "--seq-len", v, 1, 1 << 24, &o->s.seq_len);
        if (bad) return DT_EXIT_USAGE;
    }
    if (!o->job && !o->s.src) {
        fprintf(stderr, "dtrun: eval: no model: give a checkpoint or a Hugging Face folder\n");
        return DT_EXIT_USAGE;
    }
    if (!o->job && !o->s.data) {
        fprintf(stderr, "dtrun: eval: --data FILE is needed (the file to evaluate on)\n");
        return DT_EXIT_USAGE;
    }
    return 0;
}

static int eval_worker(const char *job_path, int argc, char **argv)
{
    eval_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc;
    static job_spec job;
    char err[2048];
    if (job_load_file(&job, job_path, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun: eval: %s\n", err);
        return DT_EXIT_USAGE;
    }
    engine *e = engine_create(&job, &rc, err, sizeof err);
    double loss = NAN, acc = -1;
    if (e && (rc = checkpoint_load_weights(e, &job, err, sizeof err)) == DT_EXIT_OK &&
        (rc = engine_evaluate(e, &loss, &acc, err, sizeof err)) == DT_EXIT_OK && engine_rank(e) == 0) {
        long samples = engine_val_samples(e);
        printf("eval %s on %s: loss %.6f", o.s.src ? o.s.src : job_path, job.data.val_path, loss);
        if (acc >= 0) printf(" | accuracy %.2f%% | %ld images", 100 * acc, samples);
        else printf(" | perplexity %.4g | %ld tokens", exp(loss), samples * job.model.seq_len);
        printf(" | %s\n", engine_layout(e));
        fflush(stdout);
    }
    const dt_env *env = dt_env_get();
    if (e && rc == DT_EXIT_OK && env->dump_params[0]) rc = engine_dump_params(e, env->dump_params, err, sizeof err);
    if (rc != DT_EXIT_OK) fprintf(stderr, "dtrun: eval: %s\n", err);
    engine_destroy(e);
    return rc;
}

int eval_command(int argc, char **argv)
{
    eval_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc;
    if (o.job) return eval_worker(o.job, argc, argv); /* a worker the launcher started */
    char *yaml = NULL, err[2048];
    job_model m;
    if ((rc = infer_job_yaml(&o.s, &yaml, &m, err, sizeof err)) != DT_EXIT_OK) {
        fprintf(stderr, "dtrun: eval: %s\n", err);
        return rc;
    }
    rc = infer_run("eval", yaml, o.s.dp * o.s.tp * o.s.pp, argc, argv, eval_worker);
    free(yaml);
    return rc;
}
