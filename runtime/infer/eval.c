/* eval.c — `dtrun eval` (eval.h): options, the launcher side, the worker. */
#include "runtime/infer/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/cmdline.h"
#include "lib/util/exit_codes.h"
#include "runtime/env.h"
#include "runtime/infer/source.h"
#include "runtime/train/checkpoint.h"
#include "runtime/worker/engine.h"

static const char USAGE[] =
    "usage: dtrun eval CKPT|HF_DIR --data FILE [options]\n"
    "  --data FILE            what to evaluate on: llm.c token shards, any file as bytes (a byte-level\n"
    "                         GPT), IDX images (a ViT), SFT shards (instruction data: the mean over the\n"
    "                         masked-in targets of its samples packed as data.kind sft packs them);\n"
    "                         by default every window of it, once\n"
    "  --split whole|val      the whole file (default) or its validation split as training cuts it:\n"
    "                         the last --val-fraction of it\n"
    "  --val-fraction F       the validation split's share (default 0.1, data.val_fraction's default)\n"
    "  --batch B              windows per batch (default 8): the loss does not depend on it\n"
    "  --batches N            N batches of B windows only, as training's validation takes\n"
    "                         train.eval_batches of train.global_batch (the windows wrap past the end)\n"
    "  --seq-len T            tokens per window (default the model's)\n"
    "  --dp N  --tp N  --pp N  --mode M   the layout (default one process)\n"
    "  -h, --help             this text\n";

typedef struct {
    infer_source s;
    const char *job;
    int batches;
} eval_opts;

/* 0; 1 after --help (printed); or DT_EXIT_USAGE with the line printed. */
static int parse_opts(int argc, char **argv, eval_opts *o)
{
    memset(o, 0, sizeof *o);
    o->s.dp = o->s.tp = o->s.pp = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '='), *v = NULL;
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        if (cmdline_is_help(a)) {
            fputs(USAGE, stdout);
            return 1;
        }
        static const char *const with_value[] = {"--worker", "--data", "--dp", "--tp", "--pp", "--mode", "--batch",
                                                 "--batches", "--seq-len", "--split", "--val-fraction", NULL};
        int known = 0;
        for (int k = 0; with_value[k]; k++) known |= strlen(with_value[k]) == n && !strncmp(a, with_value[k], n);
        if (a[0] == '-' && !known) return cmdline_unknown_option("eval", a, USAGE);
        if (a[0] != '-') {
            if (o->s.src) {
                fprintf(stderr, "dtrun eval: one model source, not '%s' too\n", a);
                return DT_EXIT_USAGE;
            }
            o->s.src = a;
            continue;
        }
        if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        else {
            fprintf(stderr, "dtrun eval: %s needs a value (dtrun eval --help)\n", a);
            return DT_EXIT_USAGE;
        }
        int bad = 0;
#define IS(name) (strlen(name) == n && !strncmp(a, name, n))
        if (IS("--worker")) o->job = v;
        else if (IS("--data")) o->s.data = v;
        else if (IS("--mode")) o->s.mode = v;
        else if (IS("--dp")) bad = infer_int_opt("eval", "--dp", v, 1, 256, &o->s.dp);
        else if (IS("--tp")) bad = infer_int_opt("eval", "--tp", v, 1, 256, &o->s.tp);
        else if (IS("--pp")) bad = infer_int_opt("eval", "--pp", v, 1, 256, &o->s.pp);
        else if (IS("--batch")) bad = infer_int_opt("eval", "--batch", v, 1, 1 << 20, &o->s.global_batch);
        else if (IS("--batches")) bad = infer_int_opt("eval", "--batches", v, 1, 1 << 30, &o->batches);
        else if (IS("--seq-len")) bad = infer_int_opt("eval", "--seq-len", v, 1, 1 << 24, &o->s.seq_len);
        else if (IS("--split")) {
            if (!strcmp(v, "val")) o->s.val_split = 1;
            else if (strcmp(v, "whole") != 0) {
                fprintf(stderr, "dtrun eval: --split '%s': want whole or val\n", v);
                return DT_EXIT_USAGE;
            }
        } else {
            char *end;
            double f = strtod(v, &end);
            if (end == v || *end || !(f > 0 && f < 1)) {
                fprintf(stderr, "dtrun eval: --val-fraction '%s': want a number in (0, 1)\n", v);
                return DT_EXIT_USAGE;
            }
            o->s.val_fraction = f;
        }
#undef IS
        if (bad) return DT_EXIT_USAGE;
    }
    if (!o->job && !o->s.src) {
        fprintf(stderr, "dtrun eval: no model: give a checkpoint or a Hugging Face folder (dtrun eval --help)\n");
        return DT_EXIT_USAGE;
    }
    if (!o->job && !o->s.data) {
        fprintf(stderr, "dtrun eval: --data FILE is needed (the file to evaluate on)\n");
        return DT_EXIT_USAGE;
    }
    if (o->s.val_fraction > 0 && !o->s.val_split) {
        fprintf(stderr, "dtrun eval: --val-fraction goes with --split val\n");
        return DT_EXIT_USAGE;
    }
    return 0;
}

static int eval_worker(const char *job_path, int argc, char **argv)
{
    eval_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    static job_spec job;
    char err[2048];
    if (job_load_file(&job, job_path, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun eval: %s\n", err);
        return DT_EXIT_USAGE;
    }
    engine *e = engine_create(&job, &rc, err, sizeof err);
    double loss = NAN, acc = -1;
    long windows = e ? engine_val_windows(e) : 0;
    long samples = o.batches > 0 ? (long)o.batches * job.train.global_batch : windows;
    if (e && (rc = checkpoint_load_weights(e, &job, err, sizeof err)) == DT_EXIT_OK &&
        (rc = engine_evaluate_n(e, samples, &loss, &acc, err, sizeof err)) == DT_EXIT_OK && engine_rank(e) == 0) {
        const char *file = job.data.val_path[0] ? job.data.val_path : job.data.train_path;
        printf("eval %s on %s", o.s.src ? o.s.src : job_path, file);
        if (!job.data.val_path[0]) printf(" (validation split, the last %g%%)", 100 * job.data.val_fraction);
        printf(": loss %.6f", loss);
        if (acc >= 0) {
            printf(" | accuracy %.2f%% | %ld images", 100 * acc, samples);
        } else if (job.data.kind == DATA_SFT) { /* the loss is the mean over the masked-in targets */
            printf(" | perplexity %.4g | %.0f masked-in targets in %ld windows of %d tokens (packed samples)",
                   exp(loss), engine_val_targets(e, samples), samples, job.model.seq_len);
        } else {
            int T = job.model.seq_len;
            printf(" | perplexity %.4g | %ld windows of %d tokens", exp(loss), samples, T);
            if (samples > windows) printf(" (the %ld windows wrap, as training's validation does)", windows);
            long tail = engine_val_span(e) - (windows * T + 1);
            if (samples >= windows && tail > 0)
                printf("; the last %ld token%s (less than a window) not evaluated", tail, tail == 1 ? "" : "s");
            else if (samples < windows)
                printf(" of %ld", windows);
        }
        printf(" | %s\n", engine_layout(e));
        fflush(stdout);
    }
    const dt_env *env = dt_env_get();
    if (e && rc == DT_EXIT_OK && env->dump_params[0]) rc = engine_dump_params(e, env->dump_params, err, sizeof err);
    if (rc != DT_EXIT_OK) fprintf(stderr, "dtrun eval: %s\n", err);
    engine_destroy(e);
    return rc;
}

int eval_command(int argc, char **argv)
{
    eval_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    if (o.job) return eval_worker(o.job, argc, argv); /* a worker the launcher started */
    char *yaml = NULL, err[2048];
    job_model m;
    if ((rc = infer_job_yaml(&o.s, &yaml, &m, err, sizeof err)) != DT_EXIT_OK) {
        fprintf(stderr, "dtrun eval: %s\n", err);
        return rc;
    }
    rc = infer_run("eval", yaml, o.s.dp * o.s.tp * o.s.pp, argc, argv, eval_worker);
    free(yaml);
    return rc;
}
