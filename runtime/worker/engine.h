/* engine.h — one worker's training engine under the job's parallel layout.
 *
 * From the job and the torchrun environment (RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
 * GROUP_RANK, the store of store.h) the engine builds: the world communicator,
 * the mesh (world = dp x pp x tp, runtime/parallel/mesh.h) and its groups, this rank's
 * model chunks (its tp shard of the units its pipeline stage holds: one chunk,
 * or virtual_stages of them interleaved, split by sizes_first_unit and run by the
 * pipeline executor pp_exec.h), the data-parallel
 * strategy the job asks for (ddp, zero1, zero2, fsdp, hsdp: runtime/parallel/
 * strategy.h), tensor parallelism through the model's layers (tp.c), and an
 * AdamW over the slices this rank updates.
 *
 * Layout independence (DESIGN.md). The global batch of step k is split into dp
 * contiguous slices of micro_batch * grad_accum samples; dp rank d runs samples
 * [d * micro * accum + j * micro, + micro) as its micro-batch j. Every backward is
 * seeded with 1 / (tokens or images of the GLOBAL batch), gradients are SUMMED
 * over data-parallel ranks, the global gradient norm counts every element once
 * (tp-replicated parameters on tp rank 0 only, the tied wte copy never,
 * replicated gradients on one data-parallel rank, shards by their owner), so any
 * layout computes the single-process step up to float rounding.
 *
 * Errors are answers: a failed collective ends the step with DT_EXIT_COMM and
 * one line "rank R: step S: what: why" in err; a bad layout DT_EXIT_FAIL;
 * unreadable data DT_EXIT_DATA (lib/util/exit_codes.h).
 *
 * DTRUN_HSDP_RANKS_PER_NODE=N (tests): HSDP shards over the data-parallel ranks
 * of N-rank "nodes" instead of LOCAL_WORLD_SIZE's, so HSDP's two levels can be
 * exercised by one agent on one machine. */
#ifndef DTRUN_ENGINE_H
#define DTRUN_ENGINE_H

#include <stddef.h>

#include "lib/job/jobspec.h"
#include "runtime/parallel/account.h"

typedef struct engine engine;

/* Where the wall time of a rank went since the last engine_take_times:
 *   comm    blocked in communication (collectives, waits on asynchronous ones;
 *           transfers hidden behind compute are not counted)
 *   idle    blocked in pipeline receives (the bubble) and in the end-of-step
 *           loss / norm exchange, i.e. waiting for other ranks
 *   compute the rest (kernels, data loading, copies). */
typedef struct {
    double wall_s, compute_s, comm_s, idle_s;
    double bubble;       /* pp > 1: the last pipeline step's idle fraction (pp_exec), else 0 */
    double bubble_ideal; /* pp > 1: (p-1) / (v*m + p-1), pp_schedule_ideal_bubble, else 0 */
} engine_times;

/* NULL on failure, with *exit_code (a DT_EXIT_*) and one line in err. */
engine *engine_create(const job_spec *job, int *exit_code, char *err, size_t errlen);
void engine_destroy(engine *e);
int engine_rank(const engine *e);
int engine_world_size(const engine *e);
/* The compute backend's name ("cpu", "cuda"). */
const char *engine_backend_name(const engine *e);
/* The device this rank computes on, as its maker names it ("cpu" on the CPU
 * backend). */
const char *engine_device_name(const engine *e);
/* "dp=2 tp=2 pp=1 fsdp" */
const char *engine_layout(const engine *e);

/* Forward and backward of step `step` (0-based) over the global batch, gradients
 * synchronized. *loss: the mean loss over the global batch, the same on every
 * rank (packed instruction data: over its masked-in targets, sums and counts
 * over every micro-batch and rank; 0 when it has none). Returns DT_EXIT_OK or
 * DT_EXIT_COMM. */
int engine_grads(engine *e, int step, double *loss, char *err, size_t errlen);
/* Global gradient norm (before clipping, into *grad_norm), clipping, AdamW with
 * learning rate lr, parameters made current on every rank. */
int engine_update(engine *e, int step, double lr, double *grad_norm, char *err, size_t errlen);
/* Mean validation loss (and accuracy for ViT, else -1), split over the data-
 * parallel ranks; the same numbers as one process. DT_EXIT_DATA on every rank
 * when a data file changed under it on any rank (data_fault; err names it on
 * the rank that saw it). */
int engine_evaluate(engine *e, double *val_loss, double *acc, char *err, size_t errlen);
/* The same over the first `samples` samples of the validation stream
 * (sample g is window / image g mod engine_val_windows: the stream wraps), in
 * batches of global_batch (the last may be short): dtrun eval's. */
int engine_evaluate_n(engine *e, long samples, double *val_loss, double *acc, char *err, size_t errlen);
/* Distinct validation samples: GPT windows tiling the split (data_count),
 * ViT images. */
long engine_val_windows(const engine *e);
/* What the validation loss of `samples` samples divides by: the targets the
 * loss counts (packed instruction data: the masked-in ones; else every
 * token, or every image). */
double engine_val_targets(const engine *e, long samples);
long engine_val_span(const engine *e);      /* data_span of the validation split */

/* Collective over the world: rank 0 writes the whole model's parameters, every
 * tensor of every unit in parameter-spec order (units 0..L+1, each unit's
 * tensors in model_unit_param_spec order, the head's tied copy of wte included),
 * each tensor whole (tp = 1 layout), as raw little-endian float32. The file is
 * the same whatever the layout: what the equivalence tests compare. */
int engine_dump_params(engine *e, const char *path, char *err, size_t errlen);

/* Samples engine_evaluate runs over: validation batches 0, 1, ... of
 * global_batch samples each (the last may be short), `total` samples in all. */
long engine_val_samples(const engine *e);
/* Rank 0, no communication: writes those validation samples (GPT only) to PATH,
 * so another implementation can compute the same validation loss:
 *   "DTVAL001" (8 bytes), int32 N (samples), int32 T (tokens per sample),
 *   int32 tokens[N][T], int32 targets[N][T]   (little-endian) */
int engine_dump_val(engine *e, const char *path, char *err, size_t errlen);

/* ---- decoding (engine_decode.c): `dtrun generate` on this engine's model ----
 * For a GPT job with pp 1, parallel.mode none, no sequence parallelism and
 * fp32 (any tp, any dp: every dp replica decodes the same). Collective over
 * the tp group. begin: a KV cache of T_max positions (<= seq_len); step: feed
 * one token, get the logits of the next one over the WHOLE vocabulary on
 * every rank (gathered over tp), logits[engine_vocab_size]. DT_EXIT_USAGE for
 * a job that cannot decode, DT_EXIT_COMM, DT_EXIT_FAIL (memory, cache full),
 * with one line in err. */
int engine_decode_begin(engine *e, int T_max, char *err, size_t errlen);
int engine_decode_step(engine *e, int token, float *logits, char *err, size_t errlen);
int engine_vocab_size(const engine *e);

/* ---- classifying (engine_classify.c): `dtrun classify` on this engine's ViT ----
 * For a ViT job of one process (dp = tp = pp = 1). images [B, ch, S, S]
 * preprocessed host floats, any B (run in micro-batches); logits [B,
 * n_classes] host. DT_EXIT_USAGE for a job that cannot, with one line in err. */
int engine_classify(engine *e, const float *images, int B, float *logits, char *err, size_t errlen);

/* model.moe: the routing of the last engine_grads over the global batch (the
 * same numbers on every rank), or NULL without MoE blocks. Per MoE block j <
 * layers (block order): its index layer[j], the choices per expert
 * chosen[j * experts + e] (its load, before any capacity drop) and the
 * choices dropped[j]; aux_loss the mean over the global batch's samples of
 * the sum over the blocks of their Switch/GShard balance loss E sum_e f_e
 * P_e (1 per block when balanced; the loss trained on adds aux_loss_coef
 * times it to the language-model loss engine_grads reports). */
typedef struct {
    int layers, experts;
    int *layer;
    double *chosen, *dropped;
    double aux_loss;
} engine_moe;
const engine_moe *engine_moe_last(const engine *e);

void engine_take_times(engine *e, engine_times *t);
/* Memory this rank holds, by category (account.h); peaks restart at
 * engine_begin_training, so setup transients are not training peaks. */
const account *engine_account(const engine *e);
/* One micro-batch's kept attention and MLP inputs (model_acts_kept), bytes;
 * 0 and 0 in a pipeline (its slots hold several). */
void engine_acts_kept(const engine *e, size_t *attn_in, size_t *mlp_in);
/* model.moe: the fewest and most rows that arrived at one MoE block's
 * experts in one micro-batch on this rank so far (model_moe_rows, over its
 * chunks), and the rows the ep dispatcher's staging has grown to
 * (ep_staged_rows); all 0 without MoE blocks. */
void engine_moe_rows(const engine *e, int *fewest, int *most, size_t *staged);
/* Bytes this rank has sent so far on its tensor-, data- and pipeline-parallel
 * groups and its context-parallel ring (comm_bytes_sent; 0 for a group of
 * one). dp: the gradient-reduction group, dp x cp ranks under cp. ep, edp:
 * expert parallelism's groups (the MoE all-to-alls; the experts' gradients). */
typedef struct { unsigned long long tp, dp, pp, cp, ep, edp; } engine_comm_bytes;
engine_comm_bytes engine_bytes_sent(const engine *e);
/* Peaks restart; with a trace asked for (DTRUN_TRACE or log.trace: trace.h) the
 * rank starts recording its spans. */
void engine_begin_training(engine *e);
/* Collective over the world when a trace is being recorded (else returns at
 * once): every rank writes its part, rank 0 merges them into the trace file
 * (runtime/parallel/trace.h). DT_EXIT_OK, or DT_EXIT_FAIL (a part or the
 * file could not be written) / DT_EXIT_COMM with one line in err. */
int engine_trace_finish(engine *e, char *err, size_t errlen);

#endif
