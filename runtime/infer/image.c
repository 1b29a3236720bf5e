/* image.c — PNG (libpng), PPM and PGM files, and the preprocessing a ViT
 * wants (image.h). */
#include "runtime/infer/image.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMAGE_MAX_SIDE 65536
#define IMAGE_MAX_PIXELS (1u << 28)

static int fail(char *err, size_t errlen, const char *fmt, const char *path, const char *why)
{
    snprintf(err, errlen, fmt, path, why);
    return -1;
}

/* ---- PNG ---- */

typedef struct {
    char msg[160];
} png_errctx;

static void png_on_error(png_structp p, png_const_charp msg)
{
    png_errctx *c = png_get_error_ptr(p);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    png_longjmp(p, 1);
}

static void png_on_warning(png_structp p, png_const_charp msg) { (void)p, (void)msg; }

static int read_png(FILE *f, const char *path, image *out, char *err, size_t errlen)
{
    png_errctx ec = {""};
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ec, png_on_error, png_on_warning);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    /* volatile: set between setjmp and a longjmp back to it */
    unsigned char *volatile px = NULL;
    png_bytep *volatile rows = NULL;
    if (!info) {
        png_destroy_read_struct(&p, NULL, NULL);
        return fail(err, errlen, "%s: %s", path, "out of memory reading a PNG");
    }
    if (setjmp(png_jmpbuf(p))) {
        free(px);
        free(rows);
        png_destroy_read_struct(&p, &info, NULL);
        return fail(err, errlen, "%s: not a readable PNG (%s)", path, ec.msg);
    }
    png_init_io(p, f);
    png_read_info(p, info);
    png_uint_32 w = png_get_image_width(p, info), h = png_get_image_height(p, info);
    int type = png_get_color_type(p, info), depth = png_get_bit_depth(p, info);
    /* everything to 8-bit gray, gray + alpha, RGB or RGBA */
    if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(p);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(p);
    if (png_get_valid(p, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(p);
    if (depth == 16) png_set_strip_16(p);
    png_set_interlace_handling(p);
    png_read_update_info(p, info);
    int ch = png_get_channels(p, info);
    if (w < 1 || h < 1 || w > IMAGE_MAX_SIDE || h > IMAGE_MAX_SIDE || (size_t)w * h > IMAGE_MAX_PIXELS || ch < 1 ||
        ch > 4) {
        png_destroy_read_struct(&p, &info, NULL);
        return fail(err, errlen, "%s: %s", path, "a PNG of an unsupported size or layout");
    }
    px = malloc((size_t)w * h * (size_t)ch);
    rows = malloc(h * sizeof *rows);
    if (!px || !rows) png_error(p, "out of memory");
    for (png_uint_32 y = 0; y < h; y++) rows[y] = px + (size_t)y * w * (size_t)ch;
    png_read_image(p, rows);
    png_read_end(p, NULL);
    png_destroy_read_struct(&p, &info, NULL);
    free(rows);
    out->w = (int)w, out->h = (int)h, out->ch = ch, out->px = px;
    return 0;
}

/* ---- PPM (P6) and PGM (P5) ---- */

/* The next header number, skipping whitespace and # comments; -1 when none. */
static long pnm_number(FILE *f)
{
    int c = fgetc(f);
    for (;;) {
        while (c == ' ' || c == '\t' || c == '\n' || c == '\r') c = fgetc(f);
        if (c != '#') break;
        while (c != '\n' && c != EOF) c = fgetc(f);
    }
    if (c < '0' || c > '9') return -1;
    long v = 0;
    while (c >= '0' && c <= '9' && v < 100000000) v = v * 10 + (c - '0'), c = fgetc(f);
    /* exactly one whitespace byte ends the header's last number */
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return -1;
    return v;
}

static int read_pnm(FILE *f, const char *path, int ch, image *out, char *err, size_t errlen)
{
    long w = pnm_number(f), h = pnm_number(f), maxval = pnm_number(f);
    if (w < 1 || h < 1 || maxval < 1)
        return fail(err, errlen, "%s: %s", path, ch == 3 ? "a bad PPM header" : "a bad PGM header");
    if (maxval != 255)
        return fail(err, errlen, "%s: %s", path, "maxval is not 255 (8-bit samples only)");
    if (w > IMAGE_MAX_SIDE || h > IMAGE_MAX_SIDE || (size_t)w * (size_t)h > IMAGE_MAX_PIXELS)
        return fail(err, errlen, "%s: %s", path, "an image too large");
    size_t n = (size_t)w * (size_t)h * (size_t)ch;
    unsigned char *px = malloc(n);
    if (!px) return fail(err, errlen, "%s: %s", path, "out of memory");
    if (fread(px, 1, n, f) != n) {
        free(px);
        return fail(err, errlen, "%s: %s", path, "truncated (fewer pixels than the header says)");
    }
    out->w = (int)w, out->h = (int)h, out->ch = ch, out->px = px;
    return 0;
}

int image_read(const char *path, image *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
    unsigned char magic[8] = {0};
    size_t got = fread(magic, 1, sizeof magic, f);
    int rc;
    if (got == 8 && !png_sig_cmp(magic, 0, 8)) {
        rewind(f);
        rc = read_png(f, path, out, err, errlen);
    } else if (got >= 3 && magic[0] == 'P' && (magic[1] == '6' || magic[1] == '5') &&
               (magic[2] == ' ' || magic[2] == '\n' || magic[2] == '\r' || magic[2] == '\t')) {
        fseek(f, 2, SEEK_SET);
        rc = read_pnm(f, path, magic[1] == '6' ? 3 : 1, out, err, errlen);
    } else {
        rc = fail(err, errlen, "%s: %s", path, "not an image dtrun reads (PNG, binary PPM P6 or PGM P5)");
    }
    fclose(f);
    return rc;
}

void image_free(image *im)
{
    free(im->px);
    im->px = NULL;
}

/* ---- preprocessing ---- */

/* torch's area_pixel_compute_source_index (align_corners=False, linear):
 * src = scale (dst + 0.5) - 0.5, clamped at 0; then the two taps and the weight */
static void taps(int dst, float scale, int in, int *i0, int *i1, float *l1)
{
    float src = scale * ((float)dst + 0.5f) - 0.5f;
    if (src < 0) src = 0;
    int i = (int)src;
    if (i > in - 1) i = in - 1;
    *i0 = i;
    *i1 = i + (i < in - 1 ? 1 : 0);
    *l1 = src - (float)i;
}

int image_to_model(const image *im, const char *what, int ch, int S, const float *mean, const float *std, float *out,
                   char *err, size_t errlen)
{
    int color = im->ch >= 3 ? 3 : 1; /* alpha dropped */
    if (color != ch && !(ch == 1 || ch == 3)) {
        snprintf(err, errlen, "%s: %d channel%s, and the model takes %d (dtrun converts between gray and RGB only)",
                 what, color, color == 1 ? "" : "s", ch);
        return -1;
    }
    size_t hw = (size_t)im->h * (size_t)im->w;
    float *plane = malloc(hw * (size_t)ch * sizeof(float));
    if (!plane) {
        snprintf(err, errlen, "%s: out of memory", what);
        return -1;
    }
    /* 1, 2: the model's channels, x / 255, planes [ch][h][w] */
    for (size_t i = 0; i < hw; i++) {
        const unsigned char *p = im->px + i * (size_t)im->ch;
        for (int c = 0; c < ch; c++) {
            float v;
            if (color == ch) v = p[c];
            else if (ch == 3) v = p[0]; /* gray -> RGB */
            else v = (float)(p[0] * 299 + p[1] * 587 + p[2] * 114) / 1000.0f; /* RGB -> gray */
            plane[(size_t)c * hw + i] = v / 255.0f;
        }
    }
    /* 3: bilinear to S x S as torch computes it: h-lerp of two w-lerps */
    float sh = (float)im->h / (float)S, sw = (float)im->w / (float)S;
    for (int c = 0; c < ch; c++) {
        const float *src = plane + (size_t)c * hw;
        for (int y = 0; y < S; y++) {
            int y0, y1, x0, x1;
            float ly, lx;
            taps(y, sh, im->h, &y0, &y1, &ly);
            for (int x = 0; x < S; x++) {
                taps(x, sw, im->w, &x0, &x1, &lx);
                float v;
                if (im->h == S && im->w == S) {
                    v = src[(size_t)y * im->w + x];
                } else {
                    const float *r0 = src + (size_t)y0 * im->w, *r1 = src + (size_t)y1 * im->w;
                    float h0 = 1.0f - ly, w0 = 1.0f - lx;
                    v = h0 * (w0 * r0[x0] + lx * r0[x1]) + ly * (w0 * r1[x0] + lx * r1[x1]);
                }
                /* 4: normalise */
                out[((size_t)c * S + y) * S + x] = (v - mean[c]) / std[c];
            }
        }
    }
    free(plane);
    return 0;
}
