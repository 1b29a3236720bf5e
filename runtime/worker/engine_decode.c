/* engine_decode.c — decoding on the engine's model (engine.h): the model's
 * KV-cache step (runtime/model/decode.c) computes this tp rank's vocabulary
 * rows; the whole distribution is gathered over the tp group here, where the
 * comm layer may be used. Rows are split unevenly (50257 over tp 2), so each
 * rank sends a chunk of the largest share and the gather is compacted.
 *
 * Under pipeline parallelism each stage steps its own blocks: the row comes
 * from the previous stage (model_kv_row) and goes to the next; the last
 * stage's logits go back to every stage (a broadcast over the pp group), so
 * every rank samples the same next token. */
#include <stdio.h>
#include <string.h>

#include "lib/util/exit_codes.h"
#include "runtime/parallel/sizes.h"
#include "runtime/worker/engine_internal.h"

int engine_vocab_size(const engine *e) { return e->job.model.vocab_size; }

void engine_decode_end(engine *e)
{
    model_kv_destroy(e->kv);
    e->kv = NULL;
    if (e->dec_logits) e->ops->free(e->dec_logits);
    if (e->dec_gather) e->ops->free(e->dec_gather);
    e->dec_logits = e->dec_gather = NULL;
}

int engine_decode_begin(engine *e, int T_max, char *err, size_t errlen)
{
    engine_graph_outside(e); /* ops outside the step (train.cuda_graphs) */
    const job_spec *j = &e->job;
    const char *why = !job_model_is_lm(&j->model)               ? "it is a ViT (only a gpt or llama generates text)"
                      : e->n_chunks > 1                         ? "an interleaved pipeline is not supported"
                      : j->parallel.mode != SHARD_NONE          ? "only parallel.mode ddp is supported"
                      : j->parallel.sequence_parallel && j->parallel.tp > 1 ? "sequence parallelism is not supported"
                      : j->parallel.cp > 1                      ? "context parallelism (cp > 1) is not supported"
                      : j->parallel.ep > 1                      ? "expert parallelism (ep > 1) is not supported"
                      : j->train.precision != PREC_FP32         ? "only fp32 is supported"
                                                                : NULL;
    if (why) {
        snprintf(err, errlen, "rank %d: cannot decode with this model: %s", e->rank, why);
        return DT_EXIT_USAGE;
    }
    engine_decode_end(e);
    int tp = j->parallel.tp, V = j->model.vocab_size;
    e->dec_vmax = (V + tp - 1) / tp; /* the largest floor split share */
    e->kv = model_kv_create(e->chunk[0], T_max);
    e->dec_logits = e->ops->alloc((size_t)e->dec_vmax * sizeof(float));
    /* the tp gather, and the whole distribution the last stage broadcasts */
    e->dec_gather = e->ops->alloc(((size_t)e->dec_vmax * (size_t)tp + (size_t)V) * sizeof(float));
    if (!e->kv || !e->dec_logits || !e->dec_gather) {
        engine_decode_end(e);
        snprintf(err, errlen, "rank %d: out of memory for a KV cache of %d positions", e->rank, T_max);
        return DT_EXIT_FAIL;
    }
    return DT_EXIT_OK;
}

/* pp: the row from the previous stage (before the step) or to the next (after). */
static int stage_row(engine *e, int send, char *err, size_t errlen)
{
    int pp = e->job.parallel.pp, me = e->mc.me.pp;
    if (pp == 1 || (send ? me == pp - 1 : me == 0)) return DT_EXIT_OK;
    size_t C = (size_t)e->job.model.d_model;
    float *row = model_kv_row(e->kv);
    int rc = send ? comm_send(e->mc.pp, row, C, COMM_F32, me + 1) : comm_recv(e->mc.pp, row, C, COMM_F32, me - 1);
    if (rc == COMM_OK) return DT_EXIT_OK;
    snprintf(err, errlen, "rank %d: %s of the decoded row between pipeline stages failed: %s", e->rank,
             send ? "send" : "receive", comm_last_error(e->mc.pp));
    return DT_EXIT_COMM;
}

/* pp: the last stage's whole distribution (host logits there) to every stage. */
static int logits_to_stages(engine *e, float *logits, char *err, size_t errlen)
{
    int pp = e->job.parallel.pp, V = e->job.model.vocab_size;
    if (pp == 1) return DT_EXIT_OK;
    float *all = e->dec_gather + (size_t)e->dec_vmax * (size_t)e->job.parallel.tp;
    if (e->mc.me.pp == pp - 1) e->ops->from_host(all, logits, (size_t)V * sizeof(float));
    int rc = comm_broadcast(e->mc.pp, all, (size_t)V, COMM_F32, pp - 1);
    if (rc != COMM_OK) {
        snprintf(err, errlen, "rank %d: broadcast of the logits over the pipeline failed: %s", e->rank,
                 comm_last_error(e->mc.pp));
        return DT_EXIT_COMM;
    }
    e->ops->to_host(logits, all, (size_t)V * sizeof(float));
    return DT_EXIT_OK;
}

static int vocab_logits(engine *e, float *logits, char *err, size_t errlen);

int engine_decode_step(engine *e, int token, float *logits, char *err, size_t errlen)
{
    engine_graph_outside(e);
    model *m = e->chunk[0];
    int rc = stage_row(e, 0, err, errlen);
    if (rc != DT_EXIT_OK) return rc;
    if (model_decode_step(m, e->kv, token, e->dec_logits) != 0) {
        snprintf(err, errlen, "rank %d: the KV cache is full (%d positions: the model's)", e->rank,
                 model_kv_capacity(e->kv));
        return DT_EXIT_FAIL;
    }
    if (e->x.failed) return engine_comm_failed(e, err, errlen);
    if ((rc = stage_row(e, 1, err, errlen)) != DT_EXIT_OK) return rc;
    if (e->mc.me.pp == e->job.parallel.pp - 1 && (rc = vocab_logits(e, logits, err, errlen)) != DT_EXIT_OK) return rc;
    return logits_to_stages(e, logits, err, errlen);
}

/* The head's stage: this tp rank's vocabulary rows gathered into the whole
 * distribution (host). */
static int vocab_logits(engine *e, float *logits, char *err, size_t errlen)
{
    model *m = e->chunk[0];
    int tp = e->job.parallel.tp, V = e->job.model.vocab_size, v0, V_l;
    model_vocab_rows(m, &v0, &V_l);
    if (tp == 1) {
        e->ops->to_host(logits, e->dec_logits, (size_t)V * sizeof(float));
        return DT_EXIT_OK;
    }
    int rc = comm_all_gather(e->mc.tp, e->dec_logits, e->dec_gather, (size_t)e->dec_vmax * (size_t)tp, COMM_F32);
    if (rc != COMM_OK) {
        snprintf(err, errlen, "rank %d: all_gather of the logits over tp failed: %s", e->rank, comm_last_error(e->mc.tp));
        return DT_EXIT_COMM;
    }
    /* rank r's rows [floor(V r / tp), floor(V (r+1) / tp)) sit at r * vmax */
    for (int r = 0; r < tp; r++) {
        int lo = (int)((long long)V * r / tp), hi = (int)((long long)V * (r + 1) / tp);
        e->ops->to_host(logits + lo, e->dec_gather + (size_t)r * (size_t)e->dec_vmax, (size_t)(hi - lo) * sizeof(float));
    }
    return DT_EXIT_OK;
}
