/* generate.c — `dtrun generate` (generate.h): options, the launcher side, and
 * the worker's decoding loop. */
#include "runtime/infer/generate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/clock.h"
#include "lib/util/exit_codes.h"
#include "runtime/infer/prompt.h"
#include "runtime/infer/sample.h"
#include "runtime/infer/source.h"
#include "runtime/train/checkpoint.h"
#include "runtime/worker/engine.h"

typedef struct {
    const char *src, *job;      /* the source (launcher) or the job file (--worker) */
    const char *prompt, *prompt_ids;
    int max_new, tp, pp, print_ids;
    sample_opts s;
} gen_opts;

/* Errors are one line; the usage is dtrun --help's and dtrun(1)'s. */

/* argv[i]'s value: "--opt=V" or "--opt V". NULL when it is not option `name`. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return NULL;
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (argv[*i][n] != 0) return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

static int parse_num(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !(d >= lo && d <= hi)) {
        fprintf(stderr, "dtrun: generate: %s '%s': want a number in [%g, %g]\n", opt, v, lo, hi);
        return -1;
    }
    *out = d;
    return 0;
}

/* 0, or DT_EXIT_USAGE with the line printed. */
static int parse_opts(int argc, char **argv, gen_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_new = 64;
    o->tp = o->pp = 1;
    o->s.temperature = 1.0;
    o->s.top_p = 1.0;
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        const char *v;
        double d;
        if ((v = opt_value(argc, argv, &i, "--worker", &missing))) o->job = v;
        else if ((v = opt_value(argc, argv, &i, "--prompt", &missing))) o->prompt = v;
        else if ((v = opt_value(argc, argv, &i, "--prompt-ids", &missing))) o->prompt_ids = v;
        else if ((v = opt_value(argc, argv, &i, "--max-new-tokens", &missing))) {
            if (parse_num("--max-new-tokens", v, 1, 1 << 24, &d)) return DT_EXIT_USAGE;
            o->max_new = (int)d;
        } else if ((v = opt_value(argc, argv, &i, "--temperature", &missing))) {
            if (parse_num("--temperature", v, 0, 1e6, &o->s.temperature)) return DT_EXIT_USAGE;
        } else if ((v = opt_value(argc, argv, &i, "--top-k", &missing))) {
            if (parse_num("--top-k", v, 0, 1 << 24, &d)) return DT_EXIT_USAGE;
            o->s.top_k = (int)d;
        } else if ((v = opt_value(argc, argv, &i, "--top-p", &missing))) {
            if (parse_num("--top-p", v, 1e-9, 1, &o->s.top_p)) return DT_EXIT_USAGE;
        } else if ((v = opt_value(argc, argv, &i, "--seed", &missing))) {
            if (parse_num("--seed", v, 0, 9007199254740992.0, &d)) return DT_EXIT_USAGE;
            o->s.seed = (uint64_t)d;
        } else if ((v = opt_value(argc, argv, &i, "--tp", &missing))) {
            if (parse_num("--tp", v, 1, 256, &d)) return DT_EXIT_USAGE;
            o->tp = (int)d;
        } else if ((v = opt_value(argc, argv, &i, "--pp", &missing))) {
            if (parse_num("--pp", v, 1, 256, &d)) return DT_EXIT_USAGE;
            o->pp = (int)d;
        } else if (!strcmp(argv[i], "--ids")) {
            o->print_ids = 1;
        } else if (missing) {
            fprintf(stderr, "dtrun: generate: %s needs a value\n", argv[i]);
            return DT_EXIT_USAGE;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "dtrun: generate: unknown option '%s'\n", argv[i]);
            return DT_EXIT_USAGE;
        } else if (!o->src) {
            o->src = argv[i];
        } else {
            fprintf(stderr, "dtrun: generate: one model source, not '%s' too\n", argv[i]);
            return DT_EXIT_USAGE;
        }
        if (missing) {
            fprintf(stderr, "dtrun: generate: %s needs a value\n", argv[i]);
            return DT_EXIT_USAGE;
        }
    }
    if (!o->job && !o->src) {
        fprintf(stderr, "dtrun: generate: no model: give a checkpoint or a Hugging Face folder\n");
        return DT_EXIT_USAGE;
    }
    if (!o->prompt == !o->prompt_ids) {
        fprintf(stderr, "dtrun: generate: give --prompt TEXT or --prompt-ids 1,2,3 (one of them)\n");
        return DT_EXIT_USAGE;
    }
    return 0;
}

/* The prompt's ids for a model of `vocab` tokens and `positions` positions. */
static int prompt_ids(const gen_opts *o, int vocab, int positions, int **ids, int *n)
{
    char err[512];
    int rc = o->prompt_ids ? prompt_parse_ids(o->prompt_ids, vocab, ids, n, err, sizeof err)
                           : prompt_encode(o->prompt, vocab, ids, n, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "dtrun: generate: %s\n", err);
        return DT_EXIT_USAGE;
    }
    if (*n + o->max_new > positions) {
        fprintf(stderr, "dtrun: generate: the prompt's %d tokens + --max-new-tokens %d exceed the model's %d positions\n",
                *n, o->max_new, positions);
        free(*ids);
        return DT_EXIT_USAGE;
    }
    return 0;
}

static int generate_worker(const char *job_path, int argc, char **argv)
{
    gen_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc;
    static job_spec job;
    char err[2048];
    if (job_load_file(&job, job_path, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun: generate: %s\n", err);
        return DT_EXIT_USAGE;
    }
    int *ids = NULL, n_prompt = 0, V = job.model.vocab_size;
    if ((rc = prompt_ids(&o, V, job_model_max_positions(&job.model), &ids, &n_prompt))) return rc;
    engine *e = engine_create(&job, &rc, err, sizeof err);
    float *logits = malloc((size_t)V * sizeof(float));
    double *prob = malloc((size_t)V * sizeof(double));
    int *order = malloc((size_t)V * sizeof(int));
    int rank = e ? engine_rank(e) : 0, made = 0;
    if (!e) goto out;
    if (!logits || !prob || !order) {
        snprintf(err, sizeof err, "out of memory");
        rc = DT_EXIT_FAIL;
        goto out;
    }
    if ((rc = checkpoint_load_weights(e, &job, err, sizeof err)) != DT_EXIT_OK) goto out;
    if ((rc = engine_decode_begin(e, n_prompt + o.max_new, err, sizeof err)) != DT_EXIT_OK) goto out;
    double t0 = clock_now_s(), t_first = 0;
    for (int i = 0; i < n_prompt && rc == DT_EXIT_OK; i++) rc = engine_decode_step(e, ids[i], logits, err, sizeof err);
    for (int k = 0; k < o.max_new && rc == DT_EXIT_OK; k++) {
        int next = sample_next(logits, V, &o.s, (uint64_t)k, prob, order);
        if (k == 0) t_first = clock_now_s() - t0;
        if (rank == 0) { /* streamed as it comes */
            if (o.print_ids) printf("%s%d", k ? "," : "", next);
            else prompt_write_token(stdout, next, V);
            fflush(stdout);
        }
        made++;
        if (k + 1 < o.max_new) rc = engine_decode_step(e, next, logits, err, sizeof err);
    }
    if (rc == DT_EXIT_OK && rank == 0) {
        double dt = clock_now_s() - t0;
        printf("\n");
        fprintf(stderr, "dtrun: generated %d tokens after a %d-token prompt in %.3f s (first after %.3f s; %.1f tokens/s "
                        "after it; %s)\n", made, n_prompt, dt, t_first, made > 1 ? (made - 1) / (dt - t_first) : 0.0,
                engine_layout(e));
    }
out:
    if (rc != DT_EXIT_OK) fprintf(stderr, "dtrun: generate: %s\n", err);
    engine_destroy(e);
    free(ids);
    free(logits);
    free(prob);
    free(order);
    return rc;
}

int generate_command(int argc, char **argv)
{
    gen_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc;
    if (o.job) return generate_worker(o.job, argc, argv); /* a worker the launcher started */
    infer_source s = {.src = o.src, .dp = 1, .tp = o.tp, .pp = o.pp};
    char *yaml = NULL, err[2048];
    job_model m;
    if ((rc = infer_job_yaml(&s, &yaml, &m, err, sizeof err)) != DT_EXIT_OK) {
        fprintf(stderr, "dtrun: generate: %s\n", err);
        return rc;
    }
    if (!job_model_is_lm(&m)) {
        fprintf(stderr, "dtrun: generate: %s holds a ViT; generate writes text with a GPT (dtrun eval gives a ViT's "
                        "accuracy)\n", o.src);
        free(yaml);
        return DT_EXIT_USAGE;
    }
    /* the prompt is checked before any worker starts */
    int *ids = NULL, n = 0;
    if ((rc = prompt_ids(&o, m.vocab_size, job_model_max_positions(&m), &ids, &n))) {
        free(yaml);
        return rc;
    }
    free(ids);
    /* the workers get the same options (they read the model from the job) */
    rc = infer_run("generate", yaml, o.tp * o.pp, argc, argv, generate_worker);
    free(yaml);
    return rc;
}
