/* generate.c — `dtrun generate` (generate.h): options, the launcher side, and
 * the worker's decoding loop. */
#include "runtime/infer/generate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/clock.h"
#include "lib/util/cmdline.h"
#include "lib/util/exit_codes.h"
#include "runtime/infer/prompt.h"
#include "runtime/infer/sample.h"
#include "runtime/infer/source.h"
#include "runtime/train/checkpoint.h"
#include "runtime/worker/engine.h"

static const char USAGE[] =
    "usage: dtrun generate CKPT|HF_DIR (--prompt TEXT | --prompt-ids 1,2,3 | --prompts FILE) [options]\n"
    "  --prompt TEXT          the prompt, encoded with the model's tokenizer\n"
    "  --prompt-ids 1,2,3     the prompt as token ids\n"
    "  --prompts FILE         one prompt per line (blank lines skipped), each completed in turn\n"
    "                         on the model loaded once, each as it would be alone\n"
    "  --max-new-tokens N     tokens to add (default 64; fewer, with a note, when the model's\n"
    "                         positions run out)\n"
    "  --temperature T        sampling temperature (default 1; 0 = greedy)\n"
    "  --top-k K              keep the K likeliest tokens (default 0: all)\n"
    "  --top-p P              keep the likeliest tokens up to probability P (default 1)\n"
    "  --seed S               sampling seed (default 0): the same tokens on any --tp\n"
    "  --tp N                 tensor-parallel over N local processes\n"
    "  --pp N                 pipeline-parallel over N local processes (times --tp)\n"
    "  --ids                  write token ids (comma-separated) instead of text\n"
    "  --no-echo              write only the new tokens, not the prompt before them\n"
    "  -h, --help             this text\n";

typedef struct {
    const char *src, *job;      /* the source (launcher) or the job file (--worker) */
    const char *prompt, *prompt_ids, *prompts;
    int max_new, tp, pp, print_ids, echo;
    sample_opts s;
} gen_opts;

/* Errors are one line: "dtrun generate: ...". */

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
        fprintf(stderr, "dtrun generate: %s '%s': want a number in [%g, %g]\n", opt, v, lo, hi);
        return -1;
    }
    *out = d;
    return 0;
}

/* 0; 1 after --help (printed); or DT_EXIT_USAGE with the line printed. */
static int parse_opts(int argc, char **argv, gen_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_new = 64;
    o->tp = o->pp = 1;
    o->echo = 1;
    o->s.temperature = 1.0;
    o->s.top_p = 1.0;
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        const char *v;
        double d;
        if (cmdline_is_help(argv[i])) {
            fputs(USAGE, stdout);
            return 1;
        }
        if ((v = opt_value(argc, argv, &i, "--worker", &missing))) o->job = v;
        else if ((v = opt_value(argc, argv, &i, "--prompt", &missing))) o->prompt = v;
        else if ((v = opt_value(argc, argv, &i, "--prompt-ids", &missing))) o->prompt_ids = v;
        else if ((v = opt_value(argc, argv, &i, "--prompts", &missing))) o->prompts = v;
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
        } else if (!strcmp(argv[i], "--no-echo")) {
            o->echo = 0;
        } else if (missing) {
            fprintf(stderr, "dtrun generate: %s needs a value (dtrun generate --help)\n", argv[i]);
            return DT_EXIT_USAGE;
        } else if (argv[i][0] == '-') {
            return cmdline_unknown_option("generate", argv[i], USAGE);
        } else if (!o->src) {
            o->src = argv[i];
        } else {
            fprintf(stderr, "dtrun generate: one model source, not '%s' too\n", argv[i]);
            return DT_EXIT_USAGE;
        }
        if (missing) {
            fprintf(stderr, "dtrun generate: %s needs a value (dtrun generate --help)\n", argv[i]);
            return DT_EXIT_USAGE;
        }
    }
    if (!o->job && !o->src) {
        fprintf(stderr, "dtrun generate: no model: give a checkpoint or a Hugging Face folder (dtrun generate --help)\n");
        return DT_EXIT_USAGE;
    }
    if (!!o->prompt + !!o->prompt_ids + !!o->prompts != 1) {
        fprintf(stderr, "dtrun generate: give one of --prompt TEXT, --prompt-ids 1,2,3 or --prompts FILE\n");
        return DT_EXIT_USAGE;
    }
    return 0;
}

/* The prompts, as ids: one, or one per non-blank line of --prompts FILE. */
typedef struct {
    int **ids;
    int *n;
    int count;
} prompt_set;

static void prompts_free(prompt_set *p)
{
    for (int i = 0; i < p->count; i++) free(p->ids[i]);
    free(p->ids);
    free(p->n);
    memset(p, 0, sizeof *p);
}

static int prompts_add(prompt_set *p, const gen_opts *o, const char *text, int vocab, const char *where)
{
    char err[512];
    int **ids = realloc(p->ids, (size_t)(p->count + 1) * sizeof *ids);
    int *n = ids ? realloc(p->n, (size_t)(p->count + 1) * sizeof *n) : NULL;
    if (ids) p->ids = ids;
    if (n) p->n = n;
    if (!ids || !n) {
        fprintf(stderr, "dtrun generate: out of memory\n");
        return DT_EXIT_FAIL;
    }
    int rc = o->prompt_ids ? prompt_parse_ids(text, vocab, &p->ids[p->count], &p->n[p->count], err, sizeof err)
                           : prompt_encode(text, vocab, &p->ids[p->count], &p->n[p->count], err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "dtrun generate: %s%s\n", where, err);
        return DT_EXIT_USAGE;
    }
    p->count++;
    return 0;
}

/* Every prompt's ids for a model of `vocab` tokens and `positions`
 * positions; a prompt that fills the positions is an error (nothing could
 * be generated), --max-new-tokens is clamped for each later (note there). */
static int prompts_load(const gen_opts *o, int vocab, int positions, prompt_set *p)
{
    memset(p, 0, sizeof *p);
    int rc = 0;
    if (!o->prompts) {
        rc = prompts_add(p, o, o->prompt ? o->prompt : o->prompt_ids, vocab, "");
    } else {
        FILE *f = fopen(o->prompts, "r");
        if (!f) {
            fprintf(stderr, "dtrun generate: --prompts %s: %s\n", o->prompts, strerror(errno));
            return DT_EXIT_USAGE;
        }
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        for (long no = 1; rc == 0 && (len = getline(&line, &cap, f)) >= 0; no++) {
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
            if (strspn(line, " \t") == (size_t)len) continue;
            char where[4200];
            snprintf(where, sizeof where, "%s:%ld: ", o->prompts, no);
            rc = prompts_add(p, o, line, vocab, where);
        }
        free(line);
        fclose(f);
        if (rc == 0 && p->count == 0) {
            fprintf(stderr, "dtrun generate: --prompts %s: no prompt in it (every line is blank)\n", o->prompts);
            rc = DT_EXIT_USAGE;
        }
    }
    for (int i = 0; rc == 0 && i < p->count; i++)
        if (p->n[i] >= positions) {
            fprintf(stderr, "dtrun generate: %s%sthe prompt's %d tokens fill the model's %d positions: nothing is "
                    "left to generate\n", o->prompts ? o->prompts : "", o->prompts ? ": " : "", p->n[i], positions);
            rc = DT_EXIT_USAGE;
        }
    if (rc) prompts_free(p);
    return rc;
}

/* --max-new-tokens for a prompt of n tokens: at most the positions left. */
static int new_tokens_for(const gen_opts *o, int n, int positions) { return n + o->max_new > positions ? positions - n : o->max_new; }

/* One prompt through the decode loop: the prompt (echoed unless --no-echo),
 * then up to max_new tokens, streamed by rank 0; returns the exit status. */
static int generate_one(engine *e, const gen_opts *o, const int *ids, int n_prompt, int max_new, int V, float *logits,
                        double *prob, int *order, char *err, size_t errlen)
{
    int rank = engine_rank(e), made = 0, rc;
    if ((rc = engine_decode_begin(e, n_prompt + max_new, err, errlen)) != DT_EXIT_OK) return rc;
    if (rank == 0 && o->echo) {
        for (int i = 0; i < n_prompt; i++) {
            if (o->print_ids) printf("%s%d", i ? "," : "", ids[i]);
            else prompt_write_token(stdout, ids[i], V);
        }
        fflush(stdout);
    }
    double t0 = clock_now_s(), t_first = 0;
    for (int i = 0; i < n_prompt && rc == DT_EXIT_OK; i++) rc = engine_decode_step(e, ids[i], logits, err, errlen);
    for (int k = 0; k < max_new && rc == DT_EXIT_OK; k++) {
        int next = sample_next(logits, V, &o->s, (uint64_t)k, prob, order);
        if (k == 0) t_first = clock_now_s() - t0;
        if (rank == 0) { /* streamed as it comes */
            if (o->print_ids) printf("%s%d", k || (o->echo && n_prompt) ? "," : "", next);
            else prompt_write_token(stdout, next, V);
            fflush(stdout);
        }
        made++;
        if (k + 1 < max_new) rc = engine_decode_step(e, next, logits, err, errlen);
    }
    if (rc == DT_EXIT_OK && rank == 0) {
        double dt = clock_now_s() - t0;
        printf("\n");
        fflush(stdout);
        fprintf(stderr, "dtrun generate: %d new token%s after a %d-token prompt in %.3f s (first after %.3f s; %.1f "
                        "tokens/s after it; %s)\n", made, made == 1 ? "" : "s", n_prompt, dt, t_first,
                made > 1 ? (made - 1) / (dt - t_first) : 0.0, engine_layout(e));
    }
    return rc;
}

static int generate_worker(const char *job_path, int argc, char **argv)
{
    gen_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    static job_spec job;
    char err[2048];
    if (job_load_file(&job, job_path, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun generate: %s\n", err);
        return DT_EXIT_USAGE;
    }
    /* an HF folder's tokenizer.json reads the prompt and writes the tokens */
    if ((rc = prompt_use_tokenizer(job.model.init_from, job.model.vocab_size, err, sizeof err))) {
        fprintf(stderr, "dtrun generate: %s\n", err);
        return rc;
    }
    int V = job.model.vocab_size, T = job_model_max_positions(&job.model);
    prompt_set ps;
    if ((rc = prompts_load(&o, V, T, &ps))) return rc;
    engine *e = engine_create(&job, &rc, err, sizeof err);
    float *logits = malloc((size_t)V * sizeof(float));
    double *prob = malloc((size_t)V * sizeof(double));
    int *order = malloc((size_t)V * sizeof(int));
    if (!e) goto out;
    if (!logits || !prob || !order) {
        snprintf(err, sizeof err, "out of memory");
        rc = DT_EXIT_FAIL;
        goto out;
    }
    if ((rc = checkpoint_load_weights(e, &job, err, sizeof err)) != DT_EXIT_OK) goto out;
    for (int i = 0; i < ps.count && rc == DT_EXIT_OK; i++)
        rc = generate_one(e, &o, ps.ids[i], ps.n[i], new_tokens_for(&o, ps.n[i], T), V, logits, prob, order, err,
                          sizeof err);
out:
    if (rc != DT_EXIT_OK) fprintf(stderr, "dtrun generate: %s\n", err);
    engine_destroy(e);
    prompts_free(&ps);
    free(logits);
    free(prob);
    free(order);
    return rc;
}

int generate_command(int argc, char **argv)
{
    gen_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    if (o.job) return generate_worker(o.job, argc, argv); /* a worker the launcher started */
    infer_source s = {.src = o.src, .dp = 1, .tp = o.tp, .pp = o.pp};
    char *yaml = NULL, err[2048];
    job_model m;
    if ((rc = infer_job_yaml(&s, &yaml, &m, err, sizeof err)) != DT_EXIT_OK) {
        fprintf(stderr, "dtrun generate: %s\n", err);
        return rc;
    }
    if (!job_model_is_lm(&m)) {
        fprintf(stderr, "dtrun generate: %s holds a ViT; generate writes text with a GPT or Llama (dtrun eval gives a ViT's "
                        "accuracy)\n", o.src);
        free(yaml);
        return DT_EXIT_USAGE;
    }
    if ((rc = prompt_use_tokenizer(m.init_from, m.vocab_size, err, sizeof err))) { /* an HF folder's tokenizer.json */
        fprintf(stderr, "dtrun generate: %s\n", err);
        free(yaml);
        return rc;
    }
    /* the prompts are checked before any worker starts; a --max-new-tokens
     * the positions cannot hold is clamped, said once here */
    prompt_set ps;
    int positions = job_model_max_positions(&m);
    if ((rc = prompts_load(&o, m.vocab_size, positions, &ps))) {
        free(yaml);
        return rc;
    }
    for (int i = 0; i < ps.count; i++) {
        int k = new_tokens_for(&o, ps.n[i], positions);
        if (k < o.max_new)
            fprintf(stderr, "dtrun generate: %s--max-new-tokens %d clamped to %d: the prompt's %d tokens + %d fill the "
                    "model's %d positions\n", ps.count > 1 ? "a prompt: " : "", o.max_new, k, ps.n[i], k, positions);
    }
    prompts_free(&ps);
    /* the workers get the same options (they read the model from the job) */
    rc = infer_run("generate", yaml, o.tp * o.pp, argc, argv, generate_worker);
    free(yaml);
    return rc;
}
