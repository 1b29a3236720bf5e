/* idx.c — IDX images + labels (MNIST, Fashion-MNIST), gzip or plain.
 *
 * zlib's gzread reads both: it checks the gzip magic (1f 8b) and passes any
 * other file through unchanged. The whole set is kept decoded as uint8 (60000
 * 28x28 images are 47 MB) and turned into floats only for the samples a batch
 * asks for. Pixels are normalised with the Fashion-MNIST mean and std, so the
 * model sees inputs of mean ~0 and std ~1. */
#include "runtime/data/data.h"
#include "runtime/data/source.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>


enum { IDX_IMAGES_MAGIC = 0x00000803, IDX_LABELS_MAGIC = 0x00000801 };

typedef struct {
    image_source base;
    unsigned char *pixels; /* n * size * size */
    unsigned char *labels; /* n */
    float lut[256];        /* byte -> normalised float */
} idx_source;

static void idx_read(const image_source *s, long i, float *pixels, int *label)
{
    const idx_source *x = (const idx_source *)s;
    size_t npix = (size_t)s->size * s->size;
    if (pixels) {
        const unsigned char *src = x->pixels + (size_t)i * npix;
        for (size_t p = 0; p < npix; p++)
            pixels[p] = x->lut[src[p]];
    }
    if (label)
        *label = x->labels[i];
}

static void idx_close(image_source *s)
{
    idx_source *x = (idx_source *)s;
    free(x->pixels);
    free(x->labels);
    free(x);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Read up to len bytes (gzread takes an unsigned int, so in chunks). Returns the
 * bytes read, or -1 with err written when zlib reports corrupt data. */
static long read_all(gzFile f, const char *path, unsigned char *buf, size_t len, char *err,
                     size_t errlen)
{
    size_t got = 0;
    while (got < len) {
        size_t want = len - got < (1u << 30) ? len - got : (1u << 30);
        int n = gzread(f, buf + got, (unsigned)want);
        if (n < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            if (zerr == Z_ERRNO)
                data_fail(err, errlen, "%s: cannot read (%s)", path, strerror(errno));
            else /* zlib's message starts with "PATH: " already */
                data_fail(err, errlen, "%s: corrupt gzip data (%s)", path,
                          strncmp(msg, path, strlen(path)) == 0 && msg[strlen(path)] == ':'
                              ? msg + strlen(path) + 2
                              : msg);
            return -1;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (long)got;
}

/* True when the stream has bytes past what its header announced. */
static int has_trailing_bytes(gzFile f)
{
    unsigned char extra;
    return gzread(f, &extra, 1) == 1;
}

static gzFile open_gz(const char *path, char *err, size_t errlen)
{
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f)
        data_fail(err, errlen, "%s: cannot open (%s)", path,
                  errno ? strerror(errno) : "out of memory");
    return f;
}

/* Reads an IDX header of `hlen` bytes; checks its magic. Returns 0 or -1. */
static int read_header(gzFile f, const char *path, unsigned char *h, size_t hlen,
                       uint32_t magic, const char *what, char *err, size_t errlen)
{
    long got = read_all(f, path, h, hlen, err, errlen);
    if (got < 0)
        return -1;
    if (got == 0) {
        data_fail(err, errlen, "%s: empty file (expected IDX %s)", path, what);
        return -1;
    }
    if (got >= 4 && be32(h) != magic) {
        data_fail(err, errlen, "%s: wrong magic (0x%08x, expected 0x%08x for IDX %s)", path,
                  be32(h), magic, what);
        return -1;
    }
    if ((size_t)got < hlen) {
        data_fail(err, errlen, "%s: truncated (%ld bytes, shorter than the %zu-byte IDX header)",
                  path, got, hlen);
        return -1;
    }
    return 0;
}

/* The images' header: magic, and a size the model takes (model NULL: any
 * sane size). 0 with n, rows, cols, or -1 with err written. */
static int images_header(gzFile f, const char *path, const job_model *model, uint32_t *n_out, uint32_t *rows_out,
                         uint32_t *cols_out, char *err, size_t errlen)
{
    unsigned char h[16];
    if (read_header(f, path, h, sizeof h, IDX_IMAGES_MAGIC, "images", err, errlen) != 0)
        return -1;
    uint32_t n = be32(h + 4), rows = be32(h + 8), cols = be32(h + 12);
    if (!model && (rows < 1 || cols < 1 || rows > 65536 || cols > 65536 || (uint64_t)rows * cols > (1u << 28))) {
        data_fail(err, errlen, "%s: unsupported image size %ux%u", path, rows, cols);
        return -1;
    }
    if (model && (rows != (uint32_t)model->image_size || cols != (uint32_t)model->image_size)) {
        data_fail(err, errlen,
                  "%s: image size does not match the model (images are %ux%u, "
                  "model.image_size is %d)",
                  path, rows, cols, model->image_size);
        return -1;
    }
    if (model && model->channels != 1) {
        data_fail(err, errlen,
                  "%s: channels do not match the model (IDX images have 1 channel, "
                  "model.channels is %d)",
                  path, model->channels);
        return -1;
    }
    if (n == 0) {
        data_fail(err, errlen, "%s: no images (the header says 0)", path);
        return -1;
    }
    *n_out = n, *rows_out = rows, *cols_out = cols;
    return 0;
}

/* The labels' header: magic, and as many labels as images. */
static int labels_header(gzFile f, const char *path, const char *images_path, long n_images, char *err,
                         size_t errlen)
{
    unsigned char h[8];
    if (read_header(f, path, h, sizeof h, IDX_LABELS_MAGIC, "labels", err, errlen) != 0)
        return -1;
    uint32_t n = be32(h + 4);
    if ((long)n != n_images) {
        data_fail(err, errlen, "%s: label count does not match the images (%u labels, %ld images in %s)",
                  path, n, n_images, images_path);
        return -1;
    }
    return 0;
}

/* model NULL: any size (rows, cols into *rows_out, *cols_out when given). */
static unsigned char *load_images(const char *path, const job_model *model, long *n_out,
                                  uint32_t *rows_out, uint32_t *cols_out, char *err, size_t errlen)
{
    gzFile f = open_gz(path, err, errlen);
    if (!f)
        return NULL;
    unsigned char *pixels = NULL;
    uint32_t n, rows, cols;
    if (images_header(f, path, model, &n, &rows, &cols, err, errlen) != 0)
        goto fail;
    size_t want = (size_t)n * rows * cols;
    pixels = malloc(want);
    if (!pixels) {
        data_fail(err, errlen, "%s: out of memory (%zu bytes for %u images of %ux%u)", path,
                  want, n, rows, cols);
        goto fail;
    }
    long got = read_all(f, path, pixels, want, err, errlen);
    if (got < 0)
        goto fail;
    if ((size_t)got < want) {
        data_fail(err, errlen,
                  "%s: truncated (header says %u images of %ux%u = %zu bytes, file has %ld)",
                  path, n, rows, cols, want, got);
        goto fail;
    }
    if (has_trailing_bytes(f)) {
        data_fail(err, errlen, "%s: longer than its header says (%u images of %ux%u)", path, n,
                  rows, cols);
        goto fail;
    }
    gzclose(f);
    *n_out = n;
    if (rows_out) *rows_out = rows;
    if (cols_out) *cols_out = cols;
    return pixels;
fail:
    free(pixels);
    gzclose(f);
    return NULL;
}

static unsigned char *load_labels(const char *path, const char *images_path, long n_images,
                                  int n_classes, char *err, size_t errlen)
{
    gzFile f = open_gz(path, err, errlen);
    if (!f)
        return NULL;
    unsigned char *labels = NULL;
    if (labels_header(f, path, images_path, n_images, err, errlen) != 0)
        goto fail;
    uint32_t n = (uint32_t)n_images;
    labels = malloc(n);
    if (!labels) {
        data_fail(err, errlen, "%s: out of memory (%u labels)", path, n);
        goto fail;
    }
    long got = read_all(f, path, labels, n, err, errlen);
    if (got < 0)
        goto fail;
    if (got < (long)n) {
        data_fail(err, errlen, "%s: truncated (header says %u labels, file has %ld)", path, n, got);
        goto fail;
    }
    if (has_trailing_bytes(f)) {
        data_fail(err, errlen, "%s: longer than its header says (%u labels)", path, n);
        goto fail;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (labels[i] >= n_classes) {
            data_fail(err, errlen,
                      "%s: label out of range (label %d at index %u >= model.n_classes %d)", path,
                      labels[i], i, n_classes);
            goto fail;
        }
    }
    gzclose(f);
    return labels;
fail:
    free(labels);
    gzclose(f);
    return NULL;
}

image_source *idx_open(const char *images_path, const char *labels_path,
                       const job_model *model, char *err, size_t errlen)
{
    long n = 0;
    unsigned char *pixels = load_images(images_path, model, &n, NULL, NULL, err, errlen);
    if (!pixels)
        return NULL;
    unsigned char *labels = load_labels(labels_path, images_path, n, model->n_classes, err, errlen);
    idx_source *x = labels ? calloc(1, sizeof *x) : NULL;
    if (!x) {
        if (labels)
            data_fail(err, errlen, "%s: out of memory", images_path);
        free(pixels);
        free(labels);
        return NULL;
    }
    x->base.n = n;
    x->base.channels = 1;
    x->base.size = model->image_size;
    x->base.read = idx_read;
    x->base.close = idx_close;
    x->pixels = pixels;
    x->labels = labels;
    for (int v = 0; v < 256; v++)
        x->lut[v] = ((float)v / 255.0f - DATA_PIXEL_MEAN) / DATA_PIXEL_STD;
    return &x->base;
}

int data_idx_read(const char *images_path, const char *labels_path, data_idx *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    uint32_t rows = 0, cols = 0;
    out->pixels = load_images(images_path, NULL, &out->n, &rows, &cols, err, errlen);
    if (!out->pixels) return -1;
    out->rows = (int)rows, out->cols = (int)cols;
    out->labels = load_labels(labels_path, images_path, out->n, 256, err, errlen);
    if (!out->labels) {
        data_idx_free(out);
        return -1;
    }
    return 0;
}

void data_idx_free(data_idx *d)
{
    free(d->pixels);
    free(d->labels);
    d->pixels = d->labels = NULL;
}

int idx_check_headers(const char *images_path, const char *labels_path, const job_model *model, char *err,
                      size_t errlen)
{
    gzFile f = open_gz(images_path, err, errlen);
    if (!f) return -1;
    uint32_t n, rows, cols;
    int rc = images_header(f, images_path, model, &n, &rows, &cols, err, errlen);
    gzclose(f);
    if (rc != 0) return -1;
    if (!(f = open_gz(labels_path, err, errlen))) return -1;
    rc = labels_header(f, labels_path, images_path, n, err, errlen);
    gzclose(f);
    return rc;
}
