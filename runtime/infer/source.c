/* source.c — model sources to jobs, jobs to workers (source.h). */
#include "runtime/infer/source.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/launch/agent.h"
#include "lib/launch/launch_opts.h"
#include "lib/text/sft_shard.h"
#include "lib/text/token_shard.h"
#include "lib/util/exit_codes.h"
#include "runtime/ckpt/ckpt.h"
#include "runtime/data/data.h"

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A YAML double-quoted scalar of s. */
static void put_quoted(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* llm.c's token files start with one of their int32 magics (gpt-2's
 * 20240520, llama-3's 20240801: lib/text/token_shard.h). */
static int is_token_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char magic[4];
    int ok = fread(magic, sizeof magic, 1, f) == 1 && token_shard_magic_known(magic);
    fclose(f);
    return ok;
}

/* SFT shards (instruction data: lib/text/sft_shard.h) start with their own
 * int32 magic. */
static int is_sft_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char m[4];
    int ok = fread(m, sizeof m, 1, f) == 1 &&
             (int32_t)((uint32_t)m[0] | (uint32_t)m[1] << 8 | (uint32_t)m[2] << 16 | (uint32_t)m[3] << 24) ==
                 SFT_SHARD_MAGIC;
    fclose(f);
    return ok;
}

/* IDX images: the magic 0x00000803, or (gzip) the torchvision name. */
static int is_idx_images(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char h[4] = {0};
    int ok = fread(h, 1, 4, f) == 4 && h[0] == 0 && h[1] == 0 && h[2] == 8 && h[3] == 3;
    fclose(f);
    return ok || strstr(path, "images-idx3") != NULL;
}

int infer_job_yaml(const infer_source *s, char **yaml, job_model *model_out, char *err, size_t errlen)
{
    *yaml = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", s->src);
    int hf = is_file(path);
    job_model m;
    memset(&m, 0, sizeof m);
    if (!hf) {
        ckpt *ck;
        struct stat st;
        if (stat(s->src, &st) != 0) {
            snprintf(err, errlen, "%s: %s (want a dtrun checkpoint or a Hugging Face folder)", s->src, strerror(errno));
            return DT_EXIT_CKPT;
        }
        if (ckpt_open(s->src, &ck, err, errlen) != 0) {
            size_t n = strlen(err);
            snprintf(err + n, errlen - n, "; nor a Hugging Face folder (no config.json)");
            return DT_EXIT_CKPT;
        }
        const ckpt_info *in = ckpt_get_info(ck);
        int has = in->has_model;
        if (has) m = in->model;
        ckpt_close(ck);
        if (!has) {
            snprintf(err, errlen, "%s: the checkpoint records no model section", s->src);
            return DT_EXIT_CKPT;
        }
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        snprintf(err, errlen, "out of memory");
        return DT_EXIT_FAIL;
    }
    fprintf(f, "model:\n");
    if (hf) {
        fprintf(f, "  init_from: ");
        put_quoted(f, s->src);
        fprintf(f, "\n");
        if (s->seq_len > 0) fprintf(f, "  seq_len: %d\n", s->seq_len);
    } else {
        fprintf(f, "  kind: %s\n  n_layer: %d\n  n_head: %d\n  d_model: %d\n  d_ff: %d\n", job_model_kind_name(m.kind),
                m.n_layer, m.n_head, m.d_model, m.d_ff);
        if (job_model_is_lm(&m))
            fprintf(f, "  vocab_size: %d\n  seq_len: %d\n", m.vocab_size, s->seq_len > 0 ? s->seq_len : m.seq_len);
        else
            fprintf(f, "  image_size: %d\n  patch_size: %d\n  channels: %d\n  n_classes: %d\n", m.image_size,
                    m.patch_size, m.channels, m.n_classes);
        if (m.kind == MODEL_LLAMA) /* the positions beyond seq_len stay the model's (generation) */
            fprintf(f, "  n_kv_head: %d\n  rope_theta: %.17g\n  tie_embeddings: %s\n  max_positions: %d\n",
                    job_model_kv_heads(&m), job_model_rope_theta(&m), m.tie_embeddings ? "true" : "false",
                    job_model_max_positions(&m) > (s->seq_len > 0 ? s->seq_len : m.seq_len)
                        ? job_model_max_positions(&m) : (s->seq_len > 0 ? s->seq_len : m.seq_len));
        else
            fprintf(f, "  activation: %s\n", job_activation_name(m.activation));
        fprintf(f, "  norm_eps: %.17g\n", job_model_norm_eps(&m));
        /* train.lora: the checkpoint holds the adapters, the base is the folder it trained from */
        if (job_lora_on(&m) && m.init_from[0]) {
            fprintf(f, "  init_from: ");
            put_quoted(f, m.init_from);
            fprintf(f, "\n");
        }
    }
    if (s->data) {
        /* a ViT reads IDX images (an HF folder's kind is known once its config is read: the file says) */
        int idx = hf ? is_idx_images(s->data) : m.kind == MODEL_VIT;
        const char *kind = idx ? "idx" : is_token_file(s->data) ? "tokens" : is_sft_file(s->data) ? "sft" : "text";
        fprintf(f, "data:\n  kind: %s\n  train: ", kind);
        put_quoted(f, s->data);
        if (s->val_split) { /* the split training validates on: the file's last val_fraction */
            if (s->val_fraction > 0) fprintf(f, "\n  val_fraction: %.17g", s->val_fraction);
        } else { /* the whole file */
            fprintf(f, "\n  val: ");
            put_quoted(f, s->data);
        }
        fprintf(f, "\n");
        if (idx) {
            char labels[4096];
            if (data_idx_labels_for(s->data, labels, sizeof labels) != 0) {
                fclose(f);
                free(text);
                snprintf(err, errlen, "%s: IDX images need their labels file, named as the images with "
                         "'images-idx3' replaced by 'labels-idx1' (this name has no 'images-idx3')", s->data);
                return DT_EXIT_USAGE;
            }
            fprintf(f, "  train_labels: ");
            put_quoted(f, labels);
            if (!s->val_split) {
                fprintf(f, "\n  val_labels: ");
                put_quoted(f, labels);
            }
            fprintf(f, "\n");
        }
    }
    int gb = s->global_batch > 0 ? s->global_batch : 8;
    fprintf(f, "train:\n  steps: 1\n  global_batch: %d\n  eval_batches: 0\n", gb);
    if (!hf && job_lora_on(&m)) { /* the adapters the checkpoint holds (no dropout in inference) */
        fprintf(f, "  lora:\n    rank: %d\n    alpha: %.17g\n    targets: [", m.lora.rank, m.lora.alpha);
        for (int i = 0, first = 1; i < LORA_N_TARGETS; i++)
            if (m.lora.targets >> i & 1) fprintf(f, "%s%s", first ? "" : ", ", job_lora_target_name(i)), first = 0;
        fprintf(f, "]\n");
    }
    fprintf(f, "parallel:\n  dp: %d\n  tp: %d\n  pp: %d\n  mode: %s\n", s->dp, s->tp, s->pp, s->mode ? s->mode : "ddp");
    if (s->pp > 1) fprintf(f, "  microbatches: %d\n", s->pp);
    if (!hf) {
        fprintf(f, "checkpoint:\n  resume: ");
        put_quoted(f, s->src);
        fprintf(f, "\n");
    }
    fprintf(f, "log:\n  progress: off\n");
    fclose(f);
    /* the job's own checks, and the shape an HF folder's config gives */
    job_spec *job = malloc(sizeof *job);
    if (!job || job_load_string(job, text, len, s->src, err, errlen) != 0) {
        if (!job) snprintf(err, errlen, "out of memory");
        free(job);
        free(text);
        return DT_EXIT_USAGE;
    }
    *model_out = job->model;
    free(job);
    *yaml = text;
    return DT_EXIT_OK;
}

int infer_run(const char *subcommand, const char *yaml, int nproc, int argc, char **argv, infer_worker_fn worker)
{
    char job_path[] = "/tmp/dtrun-job.XXXXXX";
    int fd = mkstemp(job_path);
    if (fd < 0) {
        fprintf(stderr, "dtrun: %s: cannot write a job file in /tmp (%s)\n", subcommand, strerror(errno));
        return DT_EXIT_FAIL;
    }
    size_t n = strlen(yaml);
    int ok = write(fd, yaml, n) == (ssize_t)n;
    close(fd);
    int rc;
    if (!ok) {
        fprintf(stderr, "dtrun: %s: cannot write %s\n", subcommand, job_path);
        rc = DT_EXIT_FAIL;
    } else if (nproc <= 1) {
        rc = worker(job_path, argc, argv);
    } else {
        /* dtrun --nproc-per-node N -- /proc/self/exe SUBCOMMAND --worker JOB ARGS... */
        char nproc_opt[64];
        snprintf(nproc_opt, sizeof nproc_opt, "--nproc-per-node=%d", nproc);
        char **largv = calloc((size_t)argc + 8, sizeof *largv);
        int k = 0;
        if (!largv) {
            unlink(job_path);
            return DT_EXIT_FAIL;
        }
        largv[k++] = "dtrun";
        largv[k++] = nproc_opt;
        largv[k++] = "--";
        largv[k++] = "/proc/self/exe";
        largv[k++] = (char *)subcommand;
        largv[k++] = "--worker";
        largv[k++] = job_path;
        for (int i = 1; i < argc; i++) largv[k++] = argv[i];
        launch_opts o;
        char err[1024];
        launch_opts_defaults(&o);
        if (launch_opts_parse(&o, k, largv, err, sizeof err) != 0 || launch_opts_finish(&o, err, sizeof err) != 0) {
            fprintf(stderr, "dtrun: %s: %s\n", subcommand, err);
            rc = DT_EXIT_USAGE;
        } else {
            o.bare_rank0_stdout = 1; /* the results, as on one process; diagnostics keep their prefix */
            rc = agent_run(&o, o.program[0], o.program);
        }
        launch_opts_free(&o);
        free(largv);
    }
    unlink(job_path);
    return rc;
}

int infer_int_opt(const char *subcommand, const char *opt, const char *v, int lo, int hi, int *out)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (end == v || *end || n < lo || n > hi) {
        fprintf(stderr, "dtrun %s: %s '%s': want an integer in [%d, %d]\n", subcommand, opt, v, lo, hi);
        return -1;
    }
    *out = (int)n;
    return 0;
}
