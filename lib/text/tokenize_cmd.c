/* tokenize_cmd.c — `dtrun tokenize`: text files to token shards, with GPT-2's
 * BPE built in or a Hugging Face tokenizer.json (--tokenizer; tokenizer.h).
 *
 * Worker threads take whole files in turn and encode their documents; the
 * calling thread writes the files' tokens in the order of the command line,
 * so the output does not depend on the thread count. Workers stay at most a
 * few files ahead of the writer, which bounds the memory held in between.
 *
 * Like llm.c's fineweb.py, every document is preceded by <|endoftext|>
 * (50256), which thus separates documents; with a tokenizer.json, by what its
 * post-processor puts around one sequence (Llama 3.1's <|begin_of_text|>), or
 * its <|endoftext|> when that is nothing (tokenizer_frame). Vocabularies above
 * 65536 ids get llm.c's llama-3 shards (uint32 ids). The validation split takes whole
 * documents, evenly spaced through the corpus (document g of N goes to val
 * when floor((g+1)k/N) > floor(gk/N), k = round(fraction * N), at least 1);
 * a corpus of one document gives val its last tokens instead, as nanoGPT's
 * prepare scripts cut a single text.
 *
 * Instruction data (JSONL of prompt/completion, messages or conversations:
 * sft_sample.h), told from text by each file's first object or --format,
 * becomes SFT shards (sft_shard.h): each line one sample with its loss mask,
 * rendered with the tokenizer folder's chat template when dtrun knows it
 * (chat_template.h) or --chat-template's; the split takes whole samples by
 * the same rule. */
#include "lib/text/tokenize_cmd.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "lib/text/chat_template.h"
#include "lib/text/corpus.h"
#include "lib/text/sft_sample.h"
#include "lib/text/shard_writer.h"
#include "lib/text/tokenizer.h"
#include "lib/util/clock.h"
#include "lib/util/cmdline.h"
#include "lib/util/errline.h"
#include "lib/util/exit_codes.h"

typedef struct {
    const char **inputs;
    int n_inputs;
    const char *output;
    const char *field;
    const char *tokenizer; /* --tokenizer: a tokenizer.json or its folder; NULL: GPT-2's */
    const char *format;    /* --format: auto, text, prompt-completion, messages */
    const char *chat_template; /* --chat-template NAME or none; NULL: the tokenizer folder's */
    double val_fraction;
    long shard_tokens;
    int threads;
    int progress; /* -1 auto (a terminal), 0 off, 1 on */
} tokenize_opts;

/* One input file's tokens, from its worker to the writer. */
typedef struct {
    int done, failed; /* failed: the exit status */
    char err[1024];
    token_buf ids;   /* every document's ids, back to back */
    mask_buf mask;   /* instruction data: a loss mask byte per id */
    size_t *doc_end; /* document d is ids[doc_end[d-1] .. doc_end[d]) */
    long n_docs, cap_docs;
    size_t counted; /* text bytes added to the progress so far */
} file_tokens;

typedef struct {
    const tokenize_opts *o;
    const tokenizer *tok;
    const sft_recipe *sft; /* instruction data; NULL: text */
    corpus_file *files;
    file_tokens *out;
    int next, written, window, stop;
    size_t bytes_encoded; /* progress: text bytes encoded so far (atomic) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} tokenize_run;

typedef struct {
    tokenize_run *run;
    tokenizer_encoder *enc;
    sft_encoder *sft;
    file_tokens *ft;
    const char *path;
} doc_ctx;

/* A document (or sample) is complete: ids up to ft->ids.n. */
static int doc_done(doc_ctx *c, size_t len)
{
    file_tokens *ft = c->ft;
    if (ft->n_docs == ft->cap_docs) {
        long cap = ft->cap_docs ? 2 * ft->cap_docs : 16;
        size_t *d = realloc(ft->doc_end, (size_t)cap * sizeof *d);
        if (!d) return -1;
        ft->doc_end = d;
        ft->cap_docs = cap;
    }
    ft->doc_end[ft->n_docs++] = ft->ids.n;
    /* a JSONL document's text is shorter than its line: the rest of the
     * file's bytes are counted when the file is done */
    __atomic_add_fetch(&c->run->bytes_encoded, len, __ATOMIC_RELAXED);
    ft->counted += len;
    return 0;
}

static int encode_doc(const char *text, size_t len, void *arg)
{
    doc_ctx *c = arg;
    file_tokens *ft = c->ft;
    char why[512];
    if (tokenizer_encode(c->enc, text, len, &ft->ids, why, sizeof why) != 0) {
        snprintf(ft->err, sizeof ft->err, "%s: document %ld: %s", c->path, ft->n_docs + 1, why);
        return -1;
    }
    return doc_done(c, len);
}

static int encode_sample(const cJSON *obj, long line, void *arg)
{
    doc_ctx *c = arg;
    file_tokens *ft = c->ft;
    int rc = sft_encode(c->sft, obj, c->path, line, &ft->ids, &ft->mask, ft->err, sizeof ft->err);
    if (rc) {
        ft->failed = rc;
        return -1;
    }
    return doc_done(c, 0);
}

static void *worker(void *arg)
{
    tokenize_run *r = arg;
    doc_ctx c = {.run = r, .enc = tokenizer_encoder_new(r->tok), .sft = r->sft ? sft_encoder_new(r->sft) : NULL};
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stop && r->next < r->o->n_inputs && r->next >= r->written + r->window)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop || r->next >= r->o->n_inputs) break;
        int i = r->next++;
        pthread_mutex_unlock(&r->mu);
        c.ft = &r->out[i];
        c.path = r->files[i].path;
        int rc;
        if (!c.enc || (r->sft && !c.sft)) {
            snprintf(c.ft->err, sizeof c.ft->err, "out of memory");
            c.ft->failed = DT_EXIT_FAIL;
        } else if ((rc = r->sft ? corpus_file_each_object(&r->files[i], encode_sample, &c, c.ft->err, sizeof c.ft->err)
                                : corpus_file_each(&r->files[i], r->o->field, encode_doc, &c, c.ft->err,
                                                   sizeof c.ft->err)) != 0) {
            if (!c.ft->err[0]) snprintf(c.ft->err, sizeof c.ft->err, "%s: out of memory", r->files[i].path);
            if (!c.ft->failed) c.ft->failed = DT_EXIT_DATA;
        }
        if (c.ft->counted < r->files[i].len)
            __atomic_add_fetch(&r->bytes_encoded, r->files[i].len - c.ft->counted, __ATOMIC_RELAXED);
        pthread_mutex_lock(&r->mu);
        c.ft->done = 1;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    tokenizer_encoder_free(c.enc);
    sft_encoder_free(c.sft);
    return NULL;
}

/* ---- the progress line ---- */

static void show_progress(const tokenize_run *r, size_t total, double t0, long docs, int final)
{
    size_t done = __atomic_load_n(&r->bytes_encoded, __ATOMIC_RELAXED);
    double frac = total ? (double)done / (double)total : 1.0, secs = clock_now_s() - t0;
    double rate = secs > 0 ? (double)done / secs : 0;
    char bar[21];
    int fill = (int)(frac * 20 + 0.5);
    for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '-';
    bar[20] = 0;
    int eta = rate > 0 ? (int)((double)(total - done) / rate + 0.5) : 0;
    fprintf(stderr, "\r\033[Ktokenize [%s] %3.0f%% %.1f/%.1f MB | %.1f MB/s | %ld doc%s | ETA %dm%02ds%s", bar,
            100 * frac, done / 1e6, total / 1e6, rate / 1e6, docs, docs == 1 ? "" : "s", eta / 60, eta % 60,
            final ? "\n" : "");
    fflush(stderr);
}

/* ---- the command line ---- */

static const char USAGE[] =
    "usage: dtrun tokenize [options] FILE... -o PREFIX\n"
    "  FILE                  a UTF-8 text file (one document), or FILE.jsonl (one JSON object a line: text, or\n"
    "                        instruction data: prompt/completion, messages or conversations -> SFT shards)\n"
    "  -o, --output PREFIX   write PREFIX_train_000000.bin ... and PREFIX_val_000000.bin (llm.c or SFT shards)\n"
    "  --tokenizer PATH      a Hugging Face tokenizer.json (byte-level BPE: Llama 3, Qwen2, SmolLM, GPT-2)\n"
    "                        or a model folder holding one (default: GPT-2's BPE, built in)\n"
    "  --val-fraction F      share of documents for validation, evenly spaced (default 0.01; 0: none)\n"
    "  --shard-tokens N      tokens per shard at most (default 100000000, as llm.c)\n"
    "  --threads N           files encoded at once (default: the CPUs)\n"
    "  --field NAME          the JSONL field that holds the text (default text)\n"
    "  --format F            auto (a .jsonl file's kind by its first object; default), text,\n"
    "                        prompt-completion or messages\n"
    "  --chat-template NAME  instruction data's chat format: llama3, llama3.1, chatml, qwen2, qwen2.5,\n"
    "                        smollm2, or none (prompt + completion as text); default: the tokenizer folder's\n"
    "                        chat_template when dtrun knows it\n"
    "  --progress auto|on|off  the progress bar (auto: when stderr is a terminal)\n"
    "  -h, --help            this text; see dtrun(1)\n";

static int bad_usage(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "dtrun: tokenize: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (dtrun tokenize --help)\n");
    return DT_EXIT_USAGE;
}

static int parse_opts(int argc, char **argv, tokenize_opts *o)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (tokenize_opts){.field = "text", .format = "auto", .val_fraction = 0.01, .shard_tokens = 100000000L,
                         .threads = cpus > 0 ? (int)cpus : 1, .progress = -1};
    o->inputs = calloc((size_t)argc, sizeof *o->inputs);
    if (!o->inputs) return DT_EXIT_FAIL;
    static const char *const with_value[] = {"-o",       "--output",   "--val-fraction", "--shard-tokens",
                                              "--threads", "--field",   "--progress",     "--tokenizer",
                                              "--format",  "--chat-template"};
    int only_files = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (only_files || a[0] != '-' || !a[1]) {
            o->inputs[o->n_inputs++] = a;
            continue;
        }
        if (!strcmp(a, "--")) { only_files = 1; continue; }
        if (cmdline_is_help(a)) { fputs(USAGE, stdout); return -1; }
        char name[64];
        const char *eq = strchr(a, '=');
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++) known |= !strcmp(name, with_value[k]);
        if (!known) return cmdline_unknown_option("tokenize", a, USAGE);
        if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        else return bad_usage("%s needs a value%s", name, "");
        char *end;
        if (!strcmp(name, "-o") || !strcmp(name, "--output")) {
            o->output = v;
        } else if (!strcmp(name, "--field")) {
            o->field = v;
        } else if (!strcmp(name, "--tokenizer")) {
            o->tokenizer = v;
        } else if (!strcmp(name, "--format")) {
            static const char *const formats[] = {"auto", "text", "prompt-completion", "messages", NULL};
            int ok = 0;
            for (int k = 0; formats[k]; k++) ok |= !strcmp(v, formats[k]);
            const char *near = ok ? NULL : cmdline_suggest_command(v, formats);
            char hint[96] = "";
            if (near) snprintf(hint, sizeof hint, "; did you mean '%s'?", near);
            if (!ok) return bad_usage("--format '%s': want auto, text, prompt-completion or messages%s", v, hint);
            o->format = v;
        } else if (!strcmp(name, "--chat-template")) {
            if (strcmp(v, "none") != 0 && !chat_template_named(v)) {
                const char *names[16];
                int k = 0;
                for (const char *const *n = chat_template_names(); *n && k < 14; n++) names[k++] = *n;
                names[k++] = "none";
                names[k] = NULL;
                const char *near = cmdline_suggest_command(v, names);
                char hint[96] = "";
                if (near) snprintf(hint, sizeof hint, "did you mean '%s'? ", near);
                return bad_usage("--chat-template '%s': not a template dtrun knows; %s(llama3, llama3.1, chatml, "
                                 "qwen2, qwen2.5, smollm2, none)", v, hint);
            }
            o->chat_template = v;
        } else if (!strcmp(name, "--val-fraction")) {
            o->val_fraction = strtod(v, &end);
            if (end == v || *end || !(o->val_fraction >= 0 && o->val_fraction < 1))
                return bad_usage("--val-fraction '%s': want a number in [0, 1)%s", v, "");
        } else if (!strcmp(name, "--shard-tokens")) {
            errno = 0;
            o->shard_tokens = strtol(v, &end, 10);
            if (end == v || *end || errno || o->shard_tokens < 1 || o->shard_tokens > INT32_MAX)
                return bad_usage("--shard-tokens '%s': want an integer from 1 to 2147483647 (the header's int32)%s", v,
                                 "");
        } else if (!strcmp(name, "--threads")) {
            long t = strtol(v, &end, 10);
            if (end == v || *end || t < 1 || t > 1024)
                return bad_usage("--threads '%s': want an integer from 1 to 1024%s", v, "");
            o->threads = (int)t;
        } else if (!strcmp(name, "--progress")) {
            if (!strcmp(v, "auto")) o->progress = -1;
            else if (!strcmp(v, "on")) o->progress = 1;
            else if (!strcmp(v, "off")) o->progress = 0;
            else return bad_usage("--progress '%s': want auto, on or off%s", v, "");
        }
    }
    if (!o->output) return bad_usage("no output: give -o PREFIX%s%s", "", "");
    if (o->n_inputs == 0) return bad_usage("no input files%s%s", "", "");
    if (strlen(o->output) >= SHARD_PREFIX_MAX) return bad_usage("-o: the prefix is too long%s%s", "", "");
    struct stat st;
    size_t n = strlen(o->output);
    if (n == 0 || o->output[n - 1] == '/' || (stat(o->output, &st) == 0 && S_ISDIR(st.st_mode)))
        return bad_usage("-o '%s' is a directory; give a file prefix such as %s/corpus", o->output,
                         n && o->output[n - 1] == '/' ? "DIR" : o->output);
    return 0;
}

/* The directories a run made for its output, removed again when it fails
 * (a failed run leaves nothing behind). */
typedef struct {
    char path[SHARD_PATH_MAX];
    size_t ends[64]; /* each made directory is path[0..ends[i]) */
    int n;
} made_dirs;

/* mkdir -p of the directory part of the output prefix. */
static void make_parents(const char *path, made_dirs *made)
{
    snprintf(made->path, sizeof made->path, "%s", path);
    made->n = 0;
    for (char *p = made->path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(made->path, 0777) == 0 && made->n < 64) made->ends[made->n++] = (size_t)(p - made->path);
        *p = '/';
    }
}

static void remove_made(made_dirs *made)
{
    while (made->n > 0) {
        made->path[made->ends[--made->n]] = 0;
        rmdir(made->path); /* empty once the writers aborted */
    }
}

/* ---- the run ---- */

typedef struct {
    shard_writer train, val;
    int has_val;
    long n_docs, docs_done, val_k, val_docs; /* val_k: documents for val (k of the rule above) */
    int split_tokens;                        /* one document: val takes its tail */
    double val_fraction;
    const uint32_t *before, *after; /* the ids around each document (tokenizer_frame) */
    int n_before, n_after;
    /* instruction data: SFT shards, one sample a document */
    int sft;
    long masked, longest, untrained; /* tokens in the loss; the longest sample; samples with none */
} split_writer;

static int is_val_doc(const split_writer *s, long g)
{
    if (s->val_k <= 0) return 0;
    return (long long)(g + 1) * s->val_k / s->n_docs > (long long)g * s->val_k / s->n_docs;
}

static int write_doc(split_writer *s, const uint32_t *ids, const unsigned char *mask, size_t n, char *err,
                     size_t errlen)
{
    long g = s->docs_done++;
    shard_writer *w = &s->train, *last = &s->train; /* the document's start and end */
    size_t tail = 0;
    if (s->split_tokens) { /* one document: val takes its last ids */
        tail = n >= 2 ? (size_t)llround(s->val_fraction * (double)n) : 0;
        if (n >= 2 && tail < 1) tail = 1;
        if (tail) s->val_docs = 1, last = &s->val;
    } else if (is_val_doc(s, g)) {
        w = last = &s->val;
        s->val_docs++;
    }
    if (s->sft) {
        long in = 0;
        for (size_t i = 0; i < n; i++) in += mask[i];
        s->masked += in;
        s->untrained += in == 0;
        if ((long)n > s->longest) s->longest = (long)n;
        return shard_writer_put_sample(w, ids, mask, n, err, errlen);
    }
    if (shard_writer_put(w, s->before, (size_t)s->n_before, err, errlen) != 0 ||
        shard_writer_put(w, ids, n - tail, err, errlen) != 0 ||
        shard_writer_put(last, ids + n - tail, tail, err, errlen) != 0)
        return -1;
    return shard_writer_put(last, s->after, (size_t)s->n_after, err, errlen);
}

/* The instruction data's kinds and chat format, for the summary. */
typedef struct {
    int n_pc, n_messages, n_conversations; /* files by their first object */
    char format[4600];                     /* "chat template chatml (...)" or "no chat template: ..." */
} sft_about;

static void summary(const tokenize_opts *o, const split_writer *s, const tokenizer *tok, const sft_about *about,
                    size_t bytes, double secs)
{
    char first[SHARD_PATH_MAX], last[SHARD_PATH_MAX];
    shard_writer_path(&s->train, 0, first, sizeof first);
    shard_writer_path(&s->train, s->train.n_shards - 1, last, sizeof last);
    const char *unit = s->sft ? "sample" : "document";
    fprintf(stderr, "dtrun: tokenize: %d file%s", o->n_inputs, o->n_inputs == 1 ? "" : "s");
    if (s->sft) {
        const char *sep = " (";
        if (about->n_pc) fprintf(stderr, "%s%d prompt/completion", sep, about->n_pc), sep = ", ";
        if (about->n_messages) fprintf(stderr, "%s%d messages", sep, about->n_messages), sep = ", ";
        if (about->n_conversations) fprintf(stderr, "%s%d conversations", sep, about->n_conversations);
        fprintf(stderr, ")");
    }
    fprintf(stderr, ", %ld %s%s (%ld val) -> %ld train token%s in %s%s%s", s->n_docs, unit, s->n_docs == 1 ? "" : "s",
            s->val_docs, s->train.total, s->train.total == 1 ? "" : "s", first, s->train.n_shards > 1 ? " .. " : "",
            s->train.n_shards > 1 ? last : "");
    if (s->has_val) {
        shard_writer_path(&s->val, 0, first, sizeof first);
        fprintf(stderr, ", %ld val token%s in %s%s", s->val.total, s->val.total == 1 ? "" : "s", first,
                s->val.n_shards > 1 ? " .." : "");
    }
    if (s->sft) {
        long total = s->train.total + s->val.total;
        fprintf(stderr, "; SFT shards (%s ids); %s; %ld token%s in the loss (%.1f%%), longest sample %ld tokens",
                s->train.width == 4 ? "uint32" : "uint16", about->format, s->masked, s->masked == 1 ? "" : "s",
                total ? 100.0 * (double)s->masked / (double)total : 0.0, s->longest);
        if (s->untrained)
            fprintf(stderr, ", %ld sample%s with none (no assistant turn)", s->untrained, s->untrained == 1 ? "" : "s");
        fprintf(stderr, "; %s, %ld ids", tokenizer_name(tok), tokenizer_n_ids(tok));
    } else {
        fprintf(stderr, "; %s, %ld ids, %s shards%s", tokenizer_name(tok), tokenizer_n_ids(tok),
                s->train.width == 4 ? "llama-3 (uint32)" : "gpt-2 (uint16)",
                s->n_before || s->n_after ? "" : ", documents not separated (no template, no <|endoftext|>)");
    }
    fprintf(stderr, "; %.2f MB in %.2f s (%.1f MB/s, %d thread%s)\n", bytes / 1e6, secs,
            secs > 0 ? bytes / 1e6 / secs : 0.0, o->threads, o->threads == 1 ? "" : "s");
}

/* Which inputs are instruction data: by --format, else each .jsonl file by
 * its first object. 1 (instruction data), 0 (text), or -1 with err (exit 2):
 * text and instruction data mixed, or instruction data that is not JSONL. */
static int inputs_kind(const tokenize_opts *o, const corpus_file *files, sft_about *about, char *err, size_t errlen)
{
    int forced = strcmp(o->format, "auto") != 0, want_sft = forced && strcmp(o->format, "text") != 0;
    const char *sft_file = NULL, *text_file = NULL, *first_shape = NULL;
    for (int i = 0; i < o->n_inputs; i++) {
        const char *shape = NULL;
        if (files[i].jsonl) {
            cJSON *first = corpus_file_first_object(&files[i]);
            shape = sft_shape_of(first);
            cJSON_Delete(first);
        }
        if (forced) {
            if (want_sft && !files[i].jsonl)
                return errline(err, errlen, "%s: --format %s reads JSONL (a .jsonl file, one JSON object a line)",
                               files[i].path, o->format);
            if (want_sft && !shape) shape = !strcmp(o->format, "messages") ? "messages" : "prompt/completion";
            if (!want_sft) shape = NULL;
        }
        if (shape) {
            sft_file = files[i].path, first_shape = shape;
            about->n_pc += !strcmp(shape, "prompt/completion");
            about->n_messages += !strcmp(shape, "messages");
            about->n_conversations += !strcmp(shape, "conversations");
        } else {
            text_file = files[i].path;
        }
    }
    if (sft_file && text_file)
        return errline(err, errlen,
                       "%s holds instruction data (its first object has %s) and %s text: one run writes one kind of "
                       "shard; tokenize them separately (or say which with --format)",
                       sft_file, first_shape, text_file);
    return sft_file != NULL;
}

/* The chat format of instruction data: --chat-template, else the tokenizer
 * folder's template when dtrun knows it; the recipe checked against the
 * tokenizer. 0, or the exit status with the line printed. */
static int sft_setup(const tokenize_opts *o, const tokenizer *tok, sft_recipe *r, sft_about *about)
{
    char err[2048];
    tokenizer_config cfg = {0};
    *r = (sft_recipe){.tok = tok, .shape = !strcmp(o->format, "prompt-completion") ? SFT_PROMPT_COMPLETION
                                           : !strcmp(o->format, "messages")        ? SFT_MESSAGES
                                                                                   : SFT_ANY};
    if (o->tokenizer && tokenizer_config_read(o->tokenizer, &cfg, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun: tokenize: %s\n", err);
        return DT_EXIT_DATA;
    }
    static char why[4400];
    const char *whose = NULL;
    if (o->chat_template) {
        r->tmpl = strcmp(o->chat_template, "none") ? chat_template_named(o->chat_template) : NULL;
        r->no_template_why = "--chat-template none says there is none";
    } else if (cfg.template) {
        if (chat_template_recognise(&cfg, &r->tmpl, &r->always_generation_prompt, &whose, err, sizeof err) != 0) {
            fprintf(stderr, "dtrun: tokenize: %s\n", err);
            tokenizer_config_free(&cfg);
            return DT_EXIT_USAGE;
        }
    } else {
        snprintf(why, sizeof why, "%s has none (no chat_template in %s)", tokenizer_name(tok),
                 o->tokenizer ? cfg.config : "dtrun's built-in GPT-2");
        if (!o->tokenizer) snprintf(why, sizeof why, "GPT-2's built-in tokenizer has none");
        r->no_template_why = why;
    }
    snprintf(r->bos, sizeof r->bos, "%s", cfg.bos);
    int rc = sft_recipe_check(r, cfg.eos, err, sizeof err);
    if (rc == 0 && !r->tmpl && (about->n_messages || about->n_conversations)) {
        snprintf(err, sizeof err, "chat messages need a chat template, and %s; give --chat-template NAME",
                 r->no_template_why);
        rc = -1;
    }
    if (rc != 0) {
        fprintf(stderr, "dtrun: tokenize: %s\n", err);
        tokenizer_config_free(&cfg);
        return DT_EXIT_USAGE;
    }
    if (r->tmpl && whose)
        snprintf(about->format, sizeof about->format, "chat template %s (%s's, recognised in %s%s)",
                 chat_template_name(r->tmpl), whose, cfg.source,
                 r->always_generation_prompt ? "; it ends each sample with the assistant's header" : "");
    else if (r->tmpl)
        snprintf(about->format, sizeof about->format, "chat template %s (--chat-template)", chat_template_name(r->tmpl));
    else {
        size_t n = (size_t)snprintf(about->format, sizeof about->format, "no chat template: %s",
                                    r->n_before ? "the post-processor's tokens, " : "");
        size_t len;
        const char *eos = tokenizer_token_bytes(tok, r->after[0], &len);
        snprintf(about->format + n, sizeof about->format - n, "prompt + completion, then %.*s%s", eos ? (int)len : 2,
                 eos ? eos : "id", r->n_after > 1 ? " ..." : "");
    }
    tokenizer_config_free(&cfg);
    return 0;
}

int tokenize_main(int argc, char **argv)
{
    tokenize_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) {
        free(o.inputs);
        return rc < 0 ? 0 : rc;
    }
    char err[2048];
    corpus_file *files = calloc((size_t)o.n_inputs, sizeof *files);
    file_tokens *out = calloc((size_t)o.n_inputs, sizeof *out);
    split_writer s = {.val_fraction = o.val_fraction};
    made_dirs made = {.n = 0};
    sft_about about = {0};
    sft_recipe recipe;
    tokenizer *tok = NULL;
    int opened = 0, writers = 0;
    rc = DT_EXIT_FAIL;
    if (!files || !out) goto done;

    /* Every input is opened and its documents counted first: a missing file is
     * an answer before any work, and the split needs the document count. */
    size_t total_bytes = 0;
    for (; opened < o.n_inputs; opened++) {
        if (corpus_file_open(&files[opened], o.inputs[opened], err, sizeof err) != 0) {
            fprintf(stderr, "dtrun: tokenize: %s\n", err);
            rc = DT_EXIT_DATA;
            goto done;
        }
        s.n_docs += corpus_file_count(&files[opened]);
        total_bytes += files[opened].len;
    }
    if (s.n_docs == 0) {
        fprintf(stderr, "dtrun: tokenize: no documents in the input (every .jsonl line is blank)\n");
        rc = DT_EXIT_DATA;
        goto done;
    }
    if ((s.sft = inputs_kind(&o, files, &about, err, sizeof err)) < 0) {
        fprintf(stderr, "dtrun: tokenize: %s\n", err);
        rc = DT_EXIT_USAGE;
        goto done;
    }
    if (o.val_fraction > 0 && s.n_docs >= 2) {
        s.val_k = llround(o.val_fraction * (double)s.n_docs);
        if (s.val_k < 1) s.val_k = 1;
        if (s.val_k > s.n_docs - 1) s.val_k = s.n_docs - 1;
    }
    s.split_tokens = o.val_fraction > 0 && s.n_docs == 1 && !s.sft; /* a sample is never cut */
    s.has_val = s.val_k > 0 || s.split_tokens;

    if (o.tokenizer) {
        int status;
        tok = tokenizer_load(o.tokenizer, &status, err, sizeof err);
        if (!tok) {
            fprintf(stderr, "dtrun: tokenize: %s\n", err);
            rc = status;
            goto done;
        }
    } else if (!(tok = tokenizer_gpt2(err, sizeof err))) {
        fprintf(stderr, "dtrun: tokenize: GPT-2 vocabulary: %s\n", err);
        goto done;
    }
    if (s.sft && (rc = sft_setup(&o, tok, &recipe, &about)) != 0) goto done;
    rc = DT_EXIT_FAIL;
    tokenizer_frame(tok, &s.before, &s.n_before, &s.after, &s.n_after);
    make_parents(o.output, &made);
    long n_ids = tokenizer_n_ids(tok);
    int (*open_writer)(shard_writer *, const char *, const char *, long, long, char *, size_t) =
        s.sft ? shard_writer_open_sft : shard_writer_open;
    if (open_writer(&s.train, o.output, "train", o.shard_tokens, n_ids, err, sizeof err) != 0 ||
        (++writers, s.has_val && open_writer(&s.val, o.output, "val", o.shard_tokens, n_ids, err, sizeof err) != 0)) {
        fprintf(stderr, "dtrun: tokenize: %s\n", err);
        goto done;
    }
    writers += s.has_val;

    tokenize_run r = {.o = &o, .tok = tok, .sft = s.sft ? &recipe : NULL, .files = files, .out = out,
                      .window = 2 * o.threads + 2};
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    int n_threads = o.threads < o.n_inputs ? o.threads : o.n_inputs, started = 0;
    pthread_t *tid = calloc((size_t)n_threads, sizeof *tid);
    for (; tid && started < n_threads; started++)
        if (pthread_create(&tid[started], NULL, worker, &r) != 0) break;
    int live = o.progress == 1 || (o.progress == -1 && isatty(STDERR_FILENO));
    double t0 = clock_now_s(), shown = 0;
    int failed = started == 0;
    if (failed) snprintf(err, sizeof err, "cannot start a thread");
    for (int i = 0; i < o.n_inputs && !failed; i++) {
        pthread_mutex_lock(&r.mu);
        while (!out[i].done) {
            if (live) { /* wake up now and then to move the bar */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 100000000;
                if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
                pthread_cond_timedwait(&r.cv, &r.mu, &ts);
                if (clock_now_s() - shown >= 0.1) {
                    show_progress(&r, total_bytes, t0, s.docs_done, 0);
                    shown = clock_now_s();
                }
            } else {
                pthread_cond_wait(&r.cv, &r.mu);
            }
        }
        pthread_mutex_unlock(&r.mu);
        file_tokens *ft = &out[i];
        if (ft->failed) {
            snprintf(err, sizeof err, "%s", ft->err);
            failed = ft->failed;
        }
        for (long d = 0; d < ft->n_docs && !failed; d++) {
            size_t from = d ? ft->doc_end[d - 1] : 0;
            if (write_doc(&s, ft->ids.ids + from, s.sft ? ft->mask.b + from : NULL, ft->doc_end[d] - from, err,
                          sizeof err) != 0)
                failed = DT_EXIT_FAIL;
        }
        token_buf_free(&ft->ids);
        mask_buf_free(&ft->mask);
        free(ft->doc_end);
        ft->doc_end = NULL;
        corpus_file_close(&files[i]);
        pthread_mutex_lock(&r.mu);
        r.written++;
        pthread_cond_broadcast(&r.cv);
        pthread_mutex_unlock(&r.mu);
    }
    pthread_mutex_lock(&r.mu);
    r.stop = 1;
    pthread_cond_broadcast(&r.cv);
    pthread_mutex_unlock(&r.mu);
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
    free(tid);
    for (int i = 0; i < o.n_inputs; i++) {
        token_buf_free(&out[i].ids);
        mask_buf_free(&out[i].mask);
        free(out[i].doc_end);
    }
    if (live && !failed) show_progress(&r, total_bytes, t0, s.docs_done, 1);
    else if (live) fprintf(stderr, "\r\033[K");
    if (!failed && (shard_writer_close(&s.train, err, sizeof err) != 0 ||
                    (s.has_val && shard_writer_close(&s.val, err, sizeof err) != 0)))
        failed = DT_EXIT_FAIL;
    if (failed) {
        fprintf(stderr, "dtrun: tokenize: %s\n", err);
        rc = failed;
        goto done;
    }
    summary(&o, &s, tok, &about, total_bytes, clock_now_s() - t0);
    writers = 0; /* kept */
    rc = 0;
done:
    if (writers >= 1) shard_writer_abort(&s.train);
    if (writers >= 2) shard_writer_abort(&s.val);
    if (rc != 0) remove_made(&made);
    for (int i = 0; i < opened; i++) corpus_file_close(&files[i]);
    tokenizer_free(tok);
    free(files);
    free(out);
    free(o.inputs);
    return rc;
}
