/* cp.h — context parallelism (Megatron-Core's context_parallel_size,
 * torchtitan's CP) in ring mode: each sample's sequence is split over the cp
 * group, every rank computes its queries' attention against every rank's keys
 * and values, which travel around the ring while it computes (the online
 * softmax of ops.h's attention_block_* merges the pieces exactly); in
 * backward the keys and values travel again, each with the gradient the
 * ranks add to it, back to their owner.
 *
 * Causal load balancing: the sequence is cut into 2 cp chunks of Tc tokens and
 * cp rank r holds chunks r and 2cp-1-r (model_cp_chunk), so every rank has
 * the same amount of unmasked work at each step of the ring.
 *
 * The rest of the model runs on the rank's own tokens unchanged (the
 * embedding takes the positions of its chunks); gradients are summed over dp x
 * cp by the data-parallel strategy (Megatron folds cp into its gradient
 * reduction), and the loss is the sum over every rank's tokens. */
#ifndef DTRUN_CP_H
#define DTRUN_CP_H

#include "kernels/ops.h"
#include "runtime/model/model.h"

/* One block of work: this rank's query rows [q_row, q_row + q_rows) of its
 * local sequence against the key rows [k_row, k_row + k_rows) of another
 * rank's, with ops.h's mask (causal, shift). */
typedef struct {
    int q_row, q_rows, k_row, k_rows, causal, shift;
} cp_block;

/* The blocks cp rank r's queries compute against the keys of cp rank s, each
 * holding Tl local rows (two chunks of Tl / 2 when causal; the whole local
 * sequence against the whole otherwise). Fills out[0..n), n <= 4, returns n. */
int cp_blocks(int r, int s, int cp, int Tl, int causal, cp_block *out);

/* Packed samples (model_docs): 1 when block b of cp rank r's queries against
 * cp rank s's keys pairs a query and a key of one sample in some sample row
 * of the batch, else 0 and the ring computes the block not at all (every
 * pair is masked). seg_host: every rank's rows' segment ids, [cp][B][Tl]
 * (model_docs.seg_host); within a chunk they never decrease, so a row's two
 * id ranges meeting is the test. A block of both chunks (no causal mask)
 * always counts. */
int cp_block_spans(const cp_block *b, const int *seg_host, int r, int s, int B, int Tl);

#endif
