/* sample.h — the next token from logits: greedy (temperature 0) or sampled
 * with temperature, top-k and top-p (nucleus), as transformers' generate and
 * nanoGPT's sample.py do (top-k first, then top-p over what is left).
 *
 * Deterministic: draw i of a run is Philox(key of (seed, "generate"), i), so
 * the same seed gives the same tokens on any layout; every tp rank holds the
 * same gathered logits and so picks the same token with no broadcast. Ties
 * go to the lower id (torch.argmax's choice for greedy). */
#ifndef DTRUN_INFER_SAMPLE_H
#define DTRUN_INFER_SAMPLE_H

#include <stdint.h>

typedef struct {
    double temperature; /* 0: greedy */
    int top_k;          /* 0: all */
    double top_p;       /* 1: all */
    uint64_t seed;
} sample_opts;

/* logits[V] (left as they are); prob[V] and order[V]: scratch. draw: the
 * draw's index (the k-th new token). */
int sample_next(const float *logits, int V, const sample_opts *o, uint64_t draw, double *prob, int *order);

#endif
