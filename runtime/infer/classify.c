/* classify.c — `dtrun classify` (classify.h): options, the model's
 * preprocessing and labels, the images, the engine's logits, the answer. */
#include "runtime/infer/classify.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/util/cmdline.h"
#include "lib/util/exit_codes.h"
#include "runtime/ckpt/ckpt_io.h"
#include "runtime/data/data.h"
#include "runtime/infer/image.h"
#include "runtime/infer/source.h"
#include "runtime/train/checkpoint.h"
#include "runtime/worker/engine.h"

#define CLASSIFY_JSON_MAX (16u << 20) /* an id2label of 21k classes is ~1 MiB */

typedef struct {
    const char *src, *data, *labels;
    const char **files;
    int n_files, top_k, batch;
} classify_opts;

/* What the model expects of its input and calls its classes. */
typedef struct {
    float mean[4], std[4];
    char **names; /* [n_classes] or NULL: indices only */
    int n_names;
} model_io;

static const char USAGE[] =
    "usage: dtrun classify CKPT|HF_DIR (IMAGE... | --data IDX_IMAGES [--labels FILE]) [options]\n"
    "  IMAGE...               PNG, PPM or PGM files: each one's top classes and probabilities\n"
    "  --data IDX_IMAGES      an IDX image file: top-1 / top-5 accuracy over it\n"
    "  --labels FILE          its IDX labels (default: the torchvision name beside it)\n"
    "  --top-k K              classes to print per image (default 5)\n"
    "  --batch B              images per forward (default 16)\n"
    "  -h, --help             this text\n";

static int usage_error(const char *fmt, const char *a)
{
    fprintf(stderr, "dtrun classify: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    return DT_EXIT_USAGE;
}

static int parse_opts(int argc, char **argv, classify_opts *o)
{
    memset(o, 0, sizeof *o);
    o->top_k = 5;
    o->batch = 16;
    o->files = calloc((size_t)argc + 1, sizeof *o->files);
    if (!o->files) return DT_EXIT_FAIL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '='), *v = NULL;
        if (cmdline_is_help(a)) {
            fputs(USAGE, stdout);
            return -1;
        }
        if (a[0] != '-' || !a[1]) {
            if (!o->src) o->src = a;
            else o->files[o->n_files++] = a;
            continue;
        }
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        static const char *const with_value[] = {"--data", "--labels", "--top-k", "--batch", NULL};
        int known = 0;
        for (int k = 0; with_value[k]; k++) known |= strlen(with_value[k]) == n && !strncmp(a, with_value[k], n);
        if (!known) return cmdline_unknown_option("classify", a, USAGE);
        if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        else return usage_error("%s needs a value", a);
        if (!strncmp(a, "--data", n)) o->data = v;
        else if (!strncmp(a, "--labels", n)) o->labels = v;
        else if (!strncmp(a, "--top-k", n) ? infer_int_opt("classify", "--top-k", v, 1, 1 << 24, &o->top_k)
                                            : infer_int_opt("classify", "--batch", v, 1, 4096, &o->batch))
            return DT_EXIT_USAGE;
    }
    if (!o->src) return usage_error("%s", "no model: give a checkpoint or a Hugging Face folder");
    if (!o->n_files == !o->data)
        return usage_error("%s", "give image files or --data FILE (IDX images), one of them");
    if (o->labels && !o->data) return usage_error("%s", "--labels goes with --data");
    return 0;
}

/* DIR/name parsed, or NULL: *absent = 1 when there is no such file, else
 * why in err. */
static cJSON *read_json(const char *dir, const char *name, int *absent, char *err, size_t errlen)
{
    char path[4096], why[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    *absent = stat(path, &st) != 0;
    if (*absent) return NULL;
    char *text = NULL;
    size_t len = 0;
    if (ckpt_io_read_small(path, CLASSIFY_JSON_MAX, &text, &len, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: cannot read (%s)", path, why[0] ? why : "too large");
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        snprintf(err, errlen, "%s: not a JSON object", path);
        return NULL;
    }
    return root;
}

/* image_mean / image_std: a list of ch numbers, or of 1, or one number. */
static int read_stats(const cJSON *pre, const char *key, int ch, float *out, const char *dir, char *err, size_t errlen)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(pre, key);
    if (!it) return 0; /* the default stays */
    int n = cJSON_IsArray(it) ? cJSON_GetArraySize(it) : cJSON_IsNumber(it) ? 1 : -1;
    for (int c = 0; n >= 1 && c < ch; c++) {
        const cJSON *v = cJSON_IsArray(it) ? cJSON_GetArrayItem(it, n == 1 ? 0 : c) : it;
        if (!cJSON_IsNumber(v) || (n != 1 && n != ch)) n = -1;
        else out[c] = (float)v->valuedouble;
    }
    if (n < 1) {
        snprintf(err, errlen, "%s/preprocessor_config.json: %s is not %d number%s", dir, key, ch, ch == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

/* The normalisation and the class names of the source (model m). */
static int model_io_of(const char *src, const job_model *m, model_io *io, char *err, size_t errlen)
{
    memset(io, 0, sizeof *io);
    int absent = 0;
    cJSON *cfg = read_json(src, "config.json", &absent, err, errlen);
    if (absent) { /* a dtrun checkpoint: as its data loader normalised */
        for (int c = 0; c < 4; c++) io->mean[c] = DATA_PIXEL_MEAN, io->std[c] = DATA_PIXEL_STD;
        return 0;
    }
    if (!cfg) return DT_EXIT_USAGE;
    for (int c = 0; c < 4; c++) io->mean[c] = 0.5f, io->std[c] = 0.5f; /* ViTImageProcessor's defaults */
    int rc = 0;
    cJSON *pre = read_json(src, "preprocessor_config.json", &absent, err, errlen);
    if (!pre && !absent) rc = DT_EXIT_USAGE;
    if (pre) {
        const cJSON *norm = cJSON_GetObjectItemCaseSensitive(pre, "do_normalize");
        const cJSON *resc = cJSON_GetObjectItemCaseSensitive(pre, "do_rescale");
        const cJSON *factor = cJSON_GetObjectItemCaseSensitive(pre, "rescale_factor");
        if (cJSON_IsFalse(resc) || (cJSON_IsNumber(factor) && fabs(factor->valuedouble * 255 - 1) > 1e-6)) {
            snprintf(err, errlen, "%s/preprocessor_config.json: pixels are not rescaled by 1/255, the only way "
                     "dtrun classify reads them", src);
            rc = DT_EXIT_USAGE;
        } else if (cJSON_IsFalse(norm)) {
            for (int c = 0; c < 4; c++) io->mean[c] = 0.0f, io->std[c] = 1.0f;
        } else if (read_stats(pre, "image_mean", m->channels, io->mean, src, err, errlen) ||
                   read_stats(pre, "image_std", m->channels, io->std, src, err, errlen)) {
            rc = DT_EXIT_USAGE;
        }
    }
    const cJSON *id2label = cJSON_GetObjectItemCaseSensitive(cfg, "id2label");
    if (rc == 0 && cJSON_IsObject(id2label)) {
        io->names = calloc((size_t)m->n_classes, sizeof *io->names);
        io->n_names = io->names ? m->n_classes : 0;
        for (const cJSON *it = id2label->child; it && io->names; it = it->next) {
            char *end;
            long k = strtol(it->string, &end, 10);
            if (*end || k < 0 || k >= m->n_classes || !cJSON_IsString(it) || io->names[k]) continue;
            io->names[k] = strdup(it->valuestring);
        }
    }
    cJSON_Delete(pre);
    cJSON_Delete(cfg);
    return rc;
}

static void model_io_free(model_io *io)
{
    for (int k = 0; k < io->n_names; k++) free(io->names[k]);
    free(io->names);
}

/* The images, preprocessed, into *x [n][ch][S][S]; --data's labels into *y. */
static int load_inputs(const classify_opts *o, const job_model *m, const model_io *io, float **x, int **y, int *n,
                       char *err, size_t errlen)
{
    size_t per = (size_t)m->channels * m->image_size * m->image_size;
    *x = NULL, *y = NULL, *n = 0;
    if (!o->data) {
        *x = malloc((size_t)o->n_files * per * sizeof(float));
        if (!*x) return snprintf(err, errlen, "out of memory"), DT_EXIT_FAIL;
        for (int i = 0; i < o->n_files; i++) {
            image im;
            if (image_read(o->files[i], &im, err, errlen) != 0) return DT_EXIT_DATA;
            int rc = image_to_model(&im, o->files[i], m->channels, m->image_size, io->mean, io->std, *x + i * per,
                                    err, errlen);
            image_free(&im);
            if (rc != 0) return DT_EXIT_DATA;
        }
        *n = o->n_files;
        return DT_EXIT_OK;
    }
    char labels[4096];
    if (o->labels) snprintf(labels, sizeof labels, "%s", o->labels);
    else if (data_idx_labels_for(o->data, labels, sizeof labels) != 0) {
        snprintf(err, errlen, "%s: IDX images need their labels: give --labels FILE (the name has no 'images-idx3' "
                 "to derive it from)", o->data);
        return DT_EXIT_USAGE;
    }
    data_idx d;
    if (data_idx_read(o->data, labels, &d, err, errlen) != 0) return DT_EXIT_DATA;
    *x = malloc((size_t)d.n * per * sizeof(float));
    *y = malloc((size_t)d.n * sizeof(int));
    int rc = *x && *y ? DT_EXIT_OK : (snprintf(err, errlen, "out of memory"), DT_EXIT_FAIL);
    for (long i = 0; rc == DT_EXIT_OK && i < d.n; i++) {
        (*y)[i] = d.labels[i];
        if (d.labels[i] >= m->n_classes) {
            snprintf(err, errlen, "%s: label %d of image %ld is not a class of the model (%d classes)", labels,
                     d.labels[i], i, m->n_classes);
            rc = DT_EXIT_DATA;
            break;
        }
        image im = {.w = d.cols, .h = d.rows, .ch = 1, .px = d.pixels + (size_t)i * d.rows * d.cols};
        if (image_to_model(&im, o->data, m->channels, m->image_size, io->mean, io->std, *x + (size_t)i * per, err,
                           errlen) != 0)
            rc = DT_EXIT_DATA;
    }
    *n = (int)d.n;
    data_idx_free(&d);
    return rc;
}

/* Indices of the k largest of row[K] into top (ties: the lower index first). */
static void top_of(const double *row, int K, int k, int *top)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int c = 0; c < K; c++) {
            int taken = 0;
            for (int t = 0; t < j && !taken; t++) taken = top[t] == c;
            if (!taken && (best < 0 || row[c] > row[best])) best = c;
        }
        top[j] = best;
    }
}

static void softmax(const float *logits, int K, double *p)
{
    double mx = logits[0], s = 0;
    for (int c = 1; c < K; c++) mx = logits[c] > mx ? logits[c] : mx;
    for (int c = 0; c < K; c++) s += p[c] = exp((double)logits[c] - mx);
    for (int c = 0; c < K; c++) p[c] /= s;
}

static void report(const classify_opts *o, const job_model *m, const model_io *io, const float *logits, const int *y,
                   int n)
{
    int K = m->n_classes, k = o->top_k < K ? o->top_k : K, k5 = K < 5 ? K : 5;
    double *p = malloc((size_t)K * sizeof *p);
    int *top = malloc((size_t)(k > k5 ? k : k5) * sizeof *top);
    if (!p || !top) {
        free(p), free(top);
        fprintf(stderr, "dtrun: classify: out of memory\n");
        return;
    }
    long right1 = 0, right5 = 0;
    for (int i = 0; i < n; i++) {
        softmax(logits + (size_t)i * K, K, p);
        if (y) {
            top_of(p, K, k5, top);
            right1 += top[0] == y[i];
            for (int j = 0; j < k5; j++) right5 += top[j] == y[i];
            continue;
        }
        top_of(p, K, k, top);
        printf("%s", o->files[i]);
        for (int j = 0; j < k; j++) {
            const char *name = io->names && io->names[top[j]] ? io->names[top[j]] : NULL;
            printf("\t%.6f %d%s%s", p[top[j]], top[j], name ? " " : "", name ? name : "");
        }
        printf("\n");
    }
    if (y)
        printf("accuracy on %s: top-1 %.2f%% (%ld/%d) | top-%d %.2f%% (%ld/%d)\n", o->data, 100.0 * right1 / n, right1,
               n, k5, 100.0 * right5 / n, right5, n);
    fflush(stdout);
    free(p), free(top);
}

int classify_command(int argc, char **argv)
{
    classify_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) {
        free(o.files);
        return rc < 0 ? 0 : rc; /* -1: --help printed */
    }
    char err[8192] = "", *yaml = NULL;
    job_model m;
    infer_source s = {.src = o.src, .dp = 1, .tp = 1, .pp = 1, .global_batch = o.batch};
    model_io io = {0};
    float *x = NULL, *logits = NULL;
    int *y = NULL, n = 0;
    static job_spec job;
    engine *e = NULL;
    if ((rc = infer_job_yaml(&s, &yaml, &m, err, sizeof err)) != DT_EXIT_OK) goto out;
    if (m.kind != MODEL_VIT) {
        snprintf(err, sizeof err, "%s holds a GPT; classify needs a ViT (dtrun generate writes text with a GPT)", o.src);
        rc = DT_EXIT_USAGE;
        goto out;
    }
    if ((rc = model_io_of(o.src, &m, &io, err, sizeof err)) != DT_EXIT_OK) goto out;
    /* every input is read before the model is: a bad one costs nothing */
    if ((rc = load_inputs(&o, &m, &io, &x, &y, &n, err, sizeof err)) != DT_EXIT_OK) goto out;
    if (job_load_string(&job, yaml, strlen(yaml), o.src, err, sizeof err) != 0) {
        rc = DT_EXIT_USAGE;
        goto out;
    }
    logits = malloc((size_t)n * (size_t)m.n_classes * sizeof(float));
    if (!logits) {
        snprintf(err, sizeof err, "out of memory");
        rc = DT_EXIT_FAIL;
        goto out;
    }
    e = engine_create(&job, &rc, err, sizeof err);
    /* the weights only, as eval and generate: not a resume of the training */
    if (e && (rc = checkpoint_load_weights(e, &job, err, sizeof err)) == DT_EXIT_OK &&
        (rc = engine_classify(e, x, n, logits, err, sizeof err)) == DT_EXIT_OK)
        report(&o, &m, &io, logits, y, n);
out:
    if (rc != DT_EXIT_OK) fprintf(stderr, "dtrun: classify: %s\n", err);
    engine_destroy(e);
    model_io_free(&io);
    free(x), free(y), free(logits), free(yaml), free(o.files);
    return rc;
}
