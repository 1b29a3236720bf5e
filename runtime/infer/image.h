/* image.h — image files for `dtrun classify`, and what a ViT sees of them.
 *
 * Reading: PNG through libpng (8- or 16-bit, gray, gray + alpha, RGB, RGBA,
 * paletted, interlaced: all come out as 8-bit samples), and binary PPM (P6)
 * and PGM (P5) with maxval 255 parsed by hand. The format is told by the
 * file's first bytes, not its name. An image is [h, w, ch] uint8, ch 1 to 4
 * (gray, gray + alpha, RGB, RGBA).
 *
 * Preprocessing (image_to_model), in this order:
 *  1. channels: alpha dropped; gray -> RGB by copying; RGB -> gray by
 *     luminance (ITU-R 601: (299 R + 587 G + 114 B) / 1000, PIL's "L");
 *     the model's channel count must be 1 or 3 unless the image has it;
 *  2. x / 255 in fp32;
 *  3. bilinear resize to the model's image_size, half-pixel centres and no
 *     antialiasing, torch.nn.functional.interpolate(mode="bilinear",
 *     align_corners=False)'s taps and weights in fp32 (Hugging Face's image
 *     processor resizes with PIL on 8-bit pixels instead: the same when no
 *     resize is needed, within a rounding otherwise);
 *  4. (x - mean[c]) / std[c] per channel.
 * Errors: -1 with one line "PATH: what" in err. */
#ifndef DTRUN_INFER_IMAGE_H
#define DTRUN_INFER_IMAGE_H

#include <stddef.h>

typedef struct {
    int w, h, ch;
    unsigned char *px; /* [h][w][ch] */
} image;

int image_read(const char *path, image *out, char *err, size_t errlen);
void image_free(image *im);

/* im -> out [ch, S, S] floats for a model of `ch` channels and image_size S;
 * mean and std have ch entries. -1 with err when the channels cannot be
 * converted (then what = the image's path, for the message). */
int image_to_model(const image *im, const char *what, int ch, int S, const float *mean, const float *std, float *out,
                   char *err, size_t errlen);

#endif
