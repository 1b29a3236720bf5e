/* classify.h — `dtrun classify CKPT|HF_DIR (IMAGE... | --data FILE)
 * [--top-k K] [--labels FILE] [--batch B]`.
 *
 * A ViT's top-K classes and their probabilities for image files (PNG, PPM,
 * PGM: image.h), one line per image on stdout:
 *   IMAGE<TAB>PROB INDEX LABEL<TAB>PROB INDEX LABEL...
 * (probabilities to 6 decimals, best first; LABEL from config.json's id2label
 * for a Hugging Face folder, absent for a dtrun checkpoint, which knows its
 * classes by index). With --data FILE (IDX images, the format dtrun's ViT
 * trains on; labels from --labels or the torchvision name beside it) one line
 * instead:
 *   accuracy on FILE: top-1 81.25% (13/16) | top-5 100.00% (16/16)
 *
 * The images are preprocessed as image.h says: converted to the model's
 * channels, resized bilinearly to its image_size, x / 255, then normalised
 * as the model expects: a Hugging Face folder's preprocessor_config.json
 * (image_mean, image_std; ViTImageProcessor's 0.5 and 0.5 without one), a
 * dtrun checkpoint as dtrun's data loader does (data.h: 0.2860, 0.3530).
 * IDX images of --data go through the same steps. The model runs in this
 * process (engine_classify), B images at a time (default 16).
 *
 * Exit statuses (dtrun(1)): 2 bad flags, a GPT source (classify needs a ViT),
 * an HF config dtrun cannot run; 3 an image or data file missing, not an
 * image, of channels the model cannot take, labels out of range; 6 a source
 * that is neither a checkpoint nor an HF folder, or whose tensors do not fit. */
#ifndef DTRUN_INFER_CLASSIFY_H
#define DTRUN_INFER_CLASSIFY_H

/* argv[0] = "classify". Returns the exit status. */
int classify_command(int argc, char **argv);

#endif
