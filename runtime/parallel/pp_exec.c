/* pp_exec.c — runs one rank's pipeline action list (see pp_exec.h).
 *
 * Slots. A microbatch of local chunk l takes a slot of l's pool at its RECV_ACT or
 * FORWARD (whichever comes first) and gives it back once nothing of it is needed:
 * after the SEND_GRAD that ships its input gradient, or after its BACKWARD when no
 * message follows (ZB-H1: after its BACKWARD_W). The schedule puts a receive right before its FORWARD and a send
 * right after its BACKWARD, so the slots held at once are exactly the forwards-
 * minus-backwards count the dry-run reads off the same list. The pool size is
 * computed by replaying these very rules over the list at create time, so the
 * executor can never run out, whatever list it is given.
 *
 * Sends are asynchronous and attached to the slot whose buffer they read: the slot
 * waits for them before its buffer is written again (a new microbatch, or a
 * BACKWARD that may rewrite activations under recompute) and at the end of the
 * step. A rank therefore only ever blocks on the tensor it needs next.
 *
 * ZB-H1 (BACKWARD_B, BACKWARD_W): B is model_backward_input, which keeps the
 * matmuls' output gradients in the micro-batch's activations (made by
 * model_acts_create_split); W is model_backward_weight. The slot is given back
 * after W, not after the SEND_GRAD, because W still reads it.
 *
 * Same-rank neighbours (p = 1, v > 1): chunk c+1's FORWARD copies chunk c's output
 * (still held: c's BACKWARD comes after c+1's), and chunk c+1's BACKWARD copies its
 * input gradient into chunk c's doutput right away, before its own slot goes. */
#include "runtime/parallel/pp_exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/clock.h"

typedef struct {
    model_acts *acts;
    int mb;         /* microbatch held, or -1 when free */
    int buf;        /* the rank's shared pool: the stash buffer it holds, or -1 */
    comm_req *send; /* an asynchronous send reading this slot's buffers, or NULL */
    int send_shared; /* that send reads the chunk's shared working set (the input
                        gradient, model_acts_dinput, or the output,
                        model_acts_output): the chunk's next FORWARD or BACKWARD
                        may overwrite it, so it waits for the send first */
} exec_slot;

typedef struct {
    model *m;
    int chunk;        /* global chunk id */
    int has_embed;    /* unit 0 */
    int has_head;     /* unit L+1 */
    int n_slots;
    exec_slot *slots;
    int *slot_of;     /* [m]: slot index of each microbatch, -1 when none */
    int last_bwd_mb;  /* microbatch of the chunk's last BACKWARD in the list */
    /* The chunk's output and output gradient live in its model's working set,
     * one for all microbatches (acts.c): whose they hold, -1 when nothing is
     * waiting to be read. A list that would overwrite one before it is read
     * is refused, never run into wrong numbers. */
    int out_mb, dout_mb;
} exec_chunk;

struct pp_exec {
    const pp_schedule *s;
    int rank, p, v, m;
    comm *pp;
    const dt_ops *ops;
    int capacity;
    exec_chunk *chunks; /* [v] */
    /* One stash pool for the rank's chunks (pp_stash_pool_bytes), or none
     * (n_bufs 0: each slot owns its stash): bufs[n_bufs] of buf_bytes each,
     * free[0 .. n_free) the ones no slot holds. */
    int n_bufs, n_free;
    void **bufs;
    int *free;
    size_t buf_bytes;
    int last_bwd_action; /* index of the list's last BACKWARD, -1 if none */
    pp_exec_hooks hooks;
};

/* The state of one step, so error paths can report where they were. */
typedef struct {
    pp_exec *ex;
    const pp_exec_step_args *args;
    pp_exec_result *res;
    char *err;
    size_t errlen;
} step_run;

static int last_chunk(const pp_exec *ex) { return ex->p * ex->v - 1; }

/* Is the tensor between chunk c and c+1 handed over in memory (same rank)? */
static int same_rank_next(const pp_exec *ex, int c)
{
    return c < last_chunk(ex) && pp_chunk_rank(c + 1, ex->p) == pp_chunk_rank(c, ex->p);
}

static exec_chunk *chunk_of(pp_exec *ex, int c) { return &ex->chunks[pp_chunk_local(c, ex->p)]; }

/* ---- slot accounting rules, shared by the sizing replay and the run ---- */

/* Does this action take a slot for (chunk, mb) if it has none yet? */
static int takes_slot(pp_op op) { return op == PP_OP_RECV_ACT || op == PP_OP_FORWARD; }

/* Does this action give the slot back (training)? BACKWARD does when no SEND_GRAD
 * follows for the chunk, i.e. chunk 0 or a same-rank previous chunk; under ZB-H1
 * BACKWARD_W always does, and nothing else. */
static int gives_slot_back(const pp_exec *ex, const pp_action *a)
{
    if (ex->s->kind == PP_ZB_H1) return a->op == PP_OP_BACKWARD_W;
    if (a->op == PP_OP_SEND_GRAD) return 1;
    if (a->op != PP_OP_BACKWARD) return 0;
    return a->chunk == 0 || same_rank_next(ex, a->chunk - 1);
}

/* Replays the list with the rules above: the most slots each local chunk holds,
 * and (*all) the most the rank's chunks hold together. */
static void size_pools(pp_exec *ex, const pp_action *list, int n, int *peak, int *all)
{
    int *held = calloc((size_t)ex->v, sizeof *held), now = 0;
    unsigned char *has = calloc((size_t)ex->v * (size_t)ex->m, 1);
    *all = 0;
    if (!held || !has) {
        free(held);
        free(has);
        for (int l = 0; l < ex->v; l++) peak[l] = ex->m; /* safe upper bound */
        *all = ex->m * ex->v;
        return;
    }
    for (int i = 0; i < n; i++) {
        const pp_action *a = &list[i];
        int l = pp_chunk_local(a->chunk, ex->p);
        unsigned char *h = &has[(size_t)l * (size_t)ex->m + (size_t)a->mb];
        if (takes_slot(a->op) && !*h) {
            *h = 1;
            if (++held[l] > peak[l]) peak[l] = held[l];
            if (++now > *all) *all = now;
        } else if (gives_slot_back(ex, a) && *h) {
            *h = 0;
            held[l]--;
            now--;
        }
    }
    free(held);
    free(has);
}

/* ---- create / destroy ---- */

static int check_config(const pp_exec_config *cfg, char *err, size_t errlen)
{
    const pp_schedule *s = cfg->sched;
    if (!s || !s->actions || !s->n_actions) {
        snprintf(err, errlen, "pipeline executor: no schedule");
        return -1;
    }
    if (cfg->rank < 0 || cfg->rank >= s->p) {
        snprintf(err, errlen, "pipeline executor: pp rank %d outside 0..%d", cfg->rank, s->p - 1);
        return -1;
    }
    if (s->p > 1 && (!cfg->pp || comm_size(cfg->pp) != s->p || comm_rank(cfg->pp) != cfg->rank)) {
        snprintf(err, errlen, "pipeline executor: pp communicator (rank %d of %d) does not match "
                 "pp rank %d of %d", cfg->pp ? comm_rank(cfg->pp) : -1,
                 cfg->pp ? comm_size(cfg->pp) : 0, cfg->rank, s->p);
        return -1;
    }
    if (cfg->micro_batch < 1 || !cfg->ops || !cfg->chunks) {
        snprintf(err, errlen, "pipeline executor: micro_batch %d, ops or chunks missing",
                 cfg->micro_batch);
        return -1;
    }
    size_t io = 0;
    for (int l = 0; l < s->v; l++) {
        model *m = cfg->chunks[l];
        int c = pp_chunk_id(cfg->rank, l, s->p);
        if (!m) {
            snprintf(err, errlen, "pipeline executor: pp rank %d: chunk %d has no model", cfg->rank, c);
            return -1;
        }
        const model_shard *sh = model_get_shard(m);
        int n_units = model_n_units(model_get_spec(m));
        int embed = sh->unit_begin == 0, head = sh->unit_end == n_units;
        if (embed != (c == 0) || head != (c == s->p * s->v - 1)) {
            snprintf(err, errlen, "pipeline executor: pp rank %d: chunk %d holds units [%d, %d), "
                     "but the embedding belongs to chunk 0 and the head to chunk %d only",
                     cfg->rank, c, sh->unit_begin, sh->unit_end, s->p * s->v - 1);
            return -1;
        }
        if (l > 0 && model_acts_io_numel(m, 1) != io) {
            snprintf(err, errlen, "pipeline executor: pp rank %d: chunks disagree on the size of "
                     "the residual stream", cfg->rank);
            return -1;
        }
        io = model_acts_io_numel(m, 1);
    }
    return 0;
}

pp_exec *pp_exec_create(const pp_exec_config *cfg, char *err, size_t errlen)
{
    if (check_config(cfg, err, errlen)) return NULL;
    const pp_schedule *s = cfg->sched;
    pp_exec *ex = calloc(1, sizeof *ex);
    if (!ex) goto oom;
    ex->s = s;
    ex->rank = cfg->rank;
    ex->p = s->p, ex->v = s->v, ex->m = s->m;
    ex->pp = cfg->pp;
    ex->ops = cfg->ops;
    ex->capacity = cfg->micro_batch;
    ex->chunks = calloc((size_t)s->v, sizeof *ex->chunks);
    int *peak = calloc((size_t)s->v, sizeof *peak);
    if (!ex->chunks || !peak) {
        free(peak);
        goto oom;
    }
    const pp_action *list = s->actions[cfg->rank];
    int n = s->n_actions[cfg->rank], all;
    size_pools(ex, list, n, peak, &all);
    /* one pool for the chunks' stashes when that is smaller (never under
     * ZB-H1: v = 1 there, and its slots keep their W-pending gradients) */
    size_t *stash = calloc((size_t)s->v, sizeof *stash);
    if (!stash) {
        free(peak);
        goto oom;
    }
    int shared = 0;
    for (int l = 0; l < s->v; l++) {
        stash[l] = model_acts_stash_bytes(cfg->chunks[l], cfg->micro_batch);
        if (stash[l] > ex->buf_bytes) ex->buf_bytes = stash[l];
    }
    pp_stash_pool_bytes(s->v, peak, stash, all, &shared);
    free(stash);
    if (shared && s->kind != PP_ZB_H1) {
        ex->bufs = calloc((size_t)all, sizeof *ex->bufs);
        ex->free = malloc((size_t)all * sizeof *ex->free);
        if (!ex->bufs || !ex->free) {
            free(peak);
            goto oom;
        }
        for (; ex->n_bufs < all; ex->n_bufs++) {
            if (!(ex->bufs[ex->n_bufs] = cfg->ops->alloc(ex->buf_bytes ? ex->buf_bytes : 1))) {
                free(peak);
                goto oom;
            }
        }
    }
    ex->last_bwd_action = -1;
    for (int l = 0; l < s->v; l++) ex->chunks[l].last_bwd_mb = -1;
    /* the pass that completes a micro-batch's gradients: BACKWARD, or ZB-H1's W */
    for (int i = 0; i < n; i++)
        if (pp_op_ends_backward(list[i].op)) {
            ex->last_bwd_action = i;
            chunk_of(ex, list[i].chunk)->last_bwd_mb = list[i].mb;
        }
    for (int l = 0; l < s->v; l++) {
        exec_chunk *ch = &ex->chunks[l];
        ch->m = cfg->chunks[l];
        ch->chunk = pp_chunk_id(cfg->rank, l, s->p);
        ch->has_embed = ch->chunk == 0;
        ch->has_head = ch->chunk == last_chunk(ex);
        ch->n_slots = peak[l];
        ch->slots = calloc((size_t)(peak[l] > 0 ? peak[l] : 1), sizeof *ch->slots);
        ch->slot_of = malloc((size_t)s->m * sizeof *ch->slot_of);
        if (!ch->slots || !ch->slot_of) {
            free(peak);
            goto oom;
        }
        for (int k = 0; k < ch->n_slots; k++) {
            ch->slots[k].mb = ch->slots[k].buf = -1;
            ch->slots[k].acts = s->kind == PP_ZB_H1 ? model_acts_create_split(ch->m, cfg->micro_batch)
                                : ex->n_bufs    ? model_acts_create_unbound(ch->m, cfg->micro_batch)
                                                : model_acts_create(ch->m, cfg->micro_batch);
            if (!ch->slots[k].acts) {
                free(peak);
                goto oom;
            }
        }
    }
    free(peak);
    return ex;
oom:
    snprintf(err, errlen, "pipeline executor: pp rank %d: out of memory for activation slots",
             cfg->rank);
    pp_exec_destroy(ex);
    return NULL;
}

void pp_exec_destroy(pp_exec *ex)
{
    if (!ex) return;
    for (int l = 0; ex->chunks && l < ex->v; l++) {
        exec_chunk *ch = &ex->chunks[l];
        for (int k = 0; ch->slots && k < ch->n_slots; k++) {
            comm_wait(ch->slots[k].send);
            model_acts_destroy(ch->slots[k].acts);
        }
        free(ch->slots);
        free(ch->slot_of);
    }
    for (int k = 0; k < ex->n_bufs; k++) ex->ops->free(ex->bufs[k]);
    free(ex->bufs);
    free(ex->free);
    free(ex->chunks);
    free(ex);
}

void pp_exec_set_hooks(pp_exec *ex, const pp_exec_hooks *hooks)
{
    if (hooks) ex->hooks = *hooks;
    else memset(&ex->hooks, 0, sizeof ex->hooks);
}

int pp_exec_slots(const pp_exec *ex, int local)
{
    return local >= 0 && local < ex->v ? ex->chunks[local].n_slots : 0;
}

size_t pp_exec_pool_bytes(const pp_exec *ex) { return (size_t)ex->n_bufs * ex->buf_bytes; }

/* ---- one step ---- */

/* One line for a failed action; returns -1. */
static int fail(step_run *r, const pp_action *a, const char *why)
{
    const char *dir = a->op == PP_OP_RECV_ACT || a->op == PP_OP_RECV_GRAD ? " from"
                      : a->op == PP_OP_SEND_ACT || a->op == PP_OP_SEND_GRAD ? " to" : "";
    char peer[32] = "";
    if (*dir) snprintf(peer, sizeof peer, "%s pp rank %d", dir, a->peer);
    snprintf(r->err, r->errlen, "pp rank %d: step %d: %s chunk %d mb %d%s: %s", r->ex->rank,
             r->args->step, pp_op_name(a->op), a->chunk, a->mb, peer, why);
    return -1;
}

static int comm_fail(step_run *r, const pp_action *a, int rc)
{
    const char *line = comm_last_error(r->ex->pp);
    char why[64];
    if (!line || !*line) {
        snprintf(why, sizeof why, "communication error %d", rc);
        line = why;
    }
    return fail(r, a, line);
}

/* Waits for the slot's pending send (time counted as idle). */
static int settle_slot(step_run *r, const pp_action *a, exec_slot *sl)
{
    if (!sl->send) return 0;
    double t0 = clock_now_s();
    int rc = comm_wait(sl->send);
    sl->send = NULL;
    double t1 = clock_now_s();
    r->res->idle_s += t1 - t0;
    if (r->ex->hooks.send_wait) r->ex->hooks.send_wait(r->ex->hooks.ctx, t0, t1);
    return rc == COMM_OK ? 0 : comm_fail(r, a, rc);
}

/* The slot (chunk, mb) holds, taking a free one if it holds none. */
static int slot_for(step_run *r, const pp_action *a, exec_slot **out)
{
    exec_chunk *ch = chunk_of(r->ex, a->chunk);
    int k = ch->slot_of[a->mb];
    if (k < 0) {
        for (k = 0; k < ch->n_slots && ch->slots[k].mb >= 0; k++) {}
        if (k == ch->n_slots) return fail(r, a, "no free activation slot (list breaks the pool sizing)");
        if (settle_slot(r, a, &ch->slots[k])) return -1;
        if (r->ex->n_bufs) {
            /* the rank's pool lends it a stash (sends read only the working
             * set, so a buffer given back is free at once) */
            if (r->ex->n_free == 0) return fail(r, a, "no free stash buffer (list breaks the pool sizing)");
            int buf = r->ex->free[--r->ex->n_free];
            ch->slots[k].buf = buf;
            model_acts_bind_stash(ch->slots[k].acts, r->ex->bufs[buf]);
        }
        ch->slots[k].mb = a->mb;
        ch->slot_of[a->mb] = k;
    }
    *out = &ch->slots[k];
    return 0;
}

/* The slot (chunk, mb) already holds; NULL when the list never filled it. */
static exec_slot *held_slot(pp_exec *ex, int c, int mb)
{
    exec_chunk *ch = chunk_of(ex, c);
    int k = ch->slot_of[mb];
    return k < 0 ? NULL : &ch->slots[k];
}

static void release_slot(pp_exec *ex, int c, int mb)
{
    exec_chunk *ch = chunk_of(ex, c);
    int k = ch->slot_of[mb];
    if (k < 0) return;
    ch->slots[k].mb = -1; /* a pending send stays attached until the slot is reused */
    ch->slot_of[mb] = -1;
    if (ch->slots[k].buf >= 0) ex->free[ex->n_free++] = ch->slots[k].buf;
    ch->slots[k].buf = -1;
}

static int batch_for(step_run *r, const pp_action *a, const exec_chunk *ch, model_batch *b)
{
    memset(b, 0, sizeof *b);
    b->B = r->args->B;
    if (!r->args->forward_only) b->step = r->args->step, b->sample0 = r->args->sample0 + (long)a->mb * b->B;
    long step = b->step, sample0 = b->sample0;
    /* a middle chunk takes nothing from the batch, unless its samples are
     * packed: then its blocks need their positions and segments */
    if (!ch->has_embed && !ch->has_head && !model_get_spec(ch->m)->packed) return 0;
    char why[256] = "";
    if (!r->args->batch || r->args->batch(r->args->batch_ctx, a->mb, b, why, sizeof why)) {
        char line[300];
        snprintf(line, sizeof line, "no batch: %s", *why ? why : "no batch provider");
        return fail(r, a, line);
    }
    if (b->B != r->args->B) {
        char line[96];
        snprintf(line, sizeof line, "batch of %d samples, step runs %d", b->B, r->args->B);
        return fail(r, a, line);
    }
    b->step = step, b->sample0 = sample0;
    return 0;
}

/* Stage boundaries travel at the activations' precision: fp32, or bf16 under
 * mixed precision (half the bytes). */
static size_t io_numel(step_run *r, const exec_chunk *ch) { return model_acts_io_numel(ch->m, r->args->B); }
static size_t io_bytes(step_run *r, const exec_chunk *ch) { return io_numel(r, ch) * model_acts_io_elem_size(ch->m); }
static comm_dtype io_dtype(const exec_chunk *ch) { return model_acts_io_elem_size(ch->m) == 2 ? COMM_BF16 : COMM_F32; }

/* Waits for the chunk's sends that read its shared working set. */
static int settle_shared(step_run *r, const pp_action *a, exec_chunk *ch)
{
    for (int k = 0; k < ch->n_slots; k++)
        if (ch->slots[k].send && ch->slots[k].send_shared && settle_slot(r, a, &ch->slots[k])) return -1;
    return 0;
}

/* Chunk `to`'s output gradient is about to be written for a->mb: refused while
 * it holds another microbatch's its BACKWARD has not read. */
static int take_dout(step_run *r, const pp_action *a, exec_chunk *to)
{
    if (to->dout_mb >= 0) {
        char line[160];
        snprintf(line, sizeof line, "would overwrite chunk %d's output gradient of mb %d before its BACKWARD reads it",
                 to->chunk, to->dout_mb);
        return fail(r, a, line);
    }
    to->dout_mb = a->mb;
    return 0;
}

/* Chunk `from`'s output is read (sent, or copied by the next chunk) for a->mb. */
static int read_out(step_run *r, const pp_action *a, exec_chunk *from)
{
    if (from->out_mb != a->mb) {
        char line[160];
        snprintf(line, sizeof line, "chunk %d's output holds mb %d, not this one", from->chunk, from->out_mb);
        return fail(r, a, line);
    }
    from->out_mb = -1;
    return 0;
}

static int run_recv(step_run *r, const pp_action *a)
{
    exec_chunk *ch = chunk_of(r->ex, a->chunk);
    exec_slot *sl;
    if (a->op == PP_OP_RECV_ACT) {
        if (slot_for(r, a, &sl)) return -1;
    } else if (!(sl = held_slot(r->ex, a->chunk, a->mb))) {
        return fail(r, a, "gradient for a microbatch whose FORWARD has not run");
    }
    if (settle_slot(r, a, sl)) return -1;
    void *buf = a->op == PP_OP_RECV_ACT ? model_acts_input(sl->acts) : model_acts_doutput(sl->acts);
    if (!buf) return fail(r, a, "the chunk has no buffer for it");
    if (a->op == PP_OP_RECV_GRAD && take_dout(r, a, ch)) return -1;
    double t0 = clock_now_s();
    int rc = comm_recv(r->ex->pp, buf, io_numel(r, ch), io_dtype(ch), a->peer);
    double t1 = clock_now_s();
    r->res->idle_s += t1 - t0;
    if (r->ex->hooks.span) r->ex->hooks.span(r->ex->hooks.ctx, a->op, a->chunk, a->mb, t0, t1);
    return rc == COMM_OK ? 0 : comm_fail(r, a, rc);
}

static int run_send(step_run *r, const pp_action *a)
{
    exec_chunk *ch = chunk_of(r->ex, a->chunk);
    exec_slot *sl = held_slot(r->ex, a->chunk, a->mb);
    if (!sl) return fail(r, a, "nothing computed to send");
    if (settle_slot(r, a, sl)) return -1;
    if (a->op == PP_OP_SEND_ACT && read_out(r, a, ch)) return -1;
    void *buf = a->op == PP_OP_SEND_ACT ? model_acts_output(sl->acts) : model_acts_dinput(sl->acts);
    double t0 = clock_now_s();
    int rc = comm_send_async(r->ex->pp, buf, io_numel(r, ch), io_dtype(ch), a->peer, &sl->send);
    sl->send_shared = 1; /* the output and the input gradient both live in the working set */
    if (r->ex->hooks.span) r->ex->hooks.span(r->ex->hooks.ctx, a->op, a->chunk, a->mb, t0, clock_now_s());
    if (rc != COMM_OK) {
        sl->send = NULL; /* a failed submission leaves nothing to wait for */
        return comm_fail(r, a, rc);
    }
    /* Its last use: in training the input gradient (unless a W still reads the
     * slot), in evaluation the output. */
    if (gives_slot_back(r->ex, a) || r->args->forward_only) release_slot(r->ex, a->chunk, a->mb);
    return 0;
}

static int run_forward(step_run *r, const pp_action *a)
{
    pp_exec *ex = r->ex;
    exec_chunk *ch = chunk_of(ex, a->chunk);
    exec_slot *sl;
    if (slot_for(r, a, &sl) || settle_slot(r, a, sl) || settle_shared(r, a, ch)) return -1;
    if (!ch->has_head && ch->out_mb >= 0) {
        char line[128];
        snprintf(line, sizeof line, "would overwrite the output of mb %d, which nothing has read yet", ch->out_mb);
        return fail(r, a, line);
    }
    model_batch b;
    if (batch_for(r, a, ch, &b)) return -1;
    double t0 = clock_now_s();
    if (a->chunk > 0 && same_rank_next(ex, a->chunk - 1)) {
        exec_slot *prev = held_slot(ex, a->chunk - 1, a->mb);
        if (!prev) return fail(r, a, "the previous chunk's FORWARD has not run");
        if (read_out(r, a, chunk_of(ex, a->chunk - 1))) return -1;
        ex->ops->copy(model_acts_input(sl->acts), model_acts_output(prev->acts), io_bytes(r, ch));
        if (r->args->forward_only) release_slot(ex, a->chunk - 1, a->mb);
    }
    int correct = 0;
    double loss = model_forward(ch->m, sl->acts, &b, ch->has_head ? &correct : NULL);
    if (!ch->has_head) ch->out_mb = a->mb;
    double t1 = clock_now_s();
    r->res->busy_s += t1 - t0;
    r->res->forwards++;
    if (ch->has_head) {
        r->res->loss += loss;
        r->res->correct += correct;
    }
    if (ex->hooks.span) ex->hooks.span(ex->hooks.ctx, a->op, a->chunk, a->mb, t0, t1);
    /* Evaluation keeps nothing for backward: the head's slot is done now. */
    if (r->args->forward_only && ch->has_head) release_slot(ex, a->chunk, a->mb);
    return 0;
}

static int run_backward(step_run *r, const pp_action *a, int index)
{
    pp_exec *ex = r->ex;
    exec_chunk *ch = chunk_of(ex, a->chunk);
    exec_slot *sl = held_slot(ex, a->chunk, a->mb);
    if (!sl) return fail(r, a, "its FORWARD has not run");
    if (settle_slot(r, a, sl)) return -1;
    model_batch b;
    if (batch_for(r, a, ch, &b)) return -1;
    /* ZB-H1's B completes no gradient: the last-of flags belong to its W */
    int ends = pp_op_ends_backward(a->op);
    int last_chunk_mb = ends && a->mb == ch->last_bwd_mb, last_rank = ends && index == ex->last_bwd_action;
    if (settle_shared(r, a, ch)) return -1;
    if (!ch->has_head) {
        if (ch->dout_mb != a->mb) return fail(r, a, "its output gradient has not arrived");
        ch->dout_mb = -1; /* read now: model_backward starts from it */
    }
    if (ex->hooks.before_backward)
        ex->hooks.before_backward(ex->hooks.ctx, a->chunk, a->mb, last_chunk_mb, last_rank);
    double t0 = clock_now_s();
    if (a->op == PP_OP_BACKWARD_B) model_backward_input(ch->m, sl->acts, &b, r->args->loss_scale);
    else model_backward(ch->m, sl->acts, &b, r->args->loss_scale);
    if (a->chunk > 0 && same_rank_next(ex, a->chunk - 1)) {
        /* Hand the input gradient over now: this slot is given back below. */
        exec_slot *prev = held_slot(ex, a->chunk - 1, a->mb);
        if (!prev) return fail(r, a, "the previous chunk holds no activations for it");
        if (take_dout(r, a, chunk_of(ex, a->chunk - 1))) return -1;
        ex->ops->copy(model_acts_doutput(prev->acts), model_acts_dinput(sl->acts), io_bytes(r, ch));
    }
    double t1 = clock_now_s();
    r->res->busy_s += t1 - t0;
    r->res->backwards++;
    if (ex->hooks.span) ex->hooks.span(ex->hooks.ctx, a->op, a->chunk, a->mb, t0, t1);
    if (ex->hooks.after_backward)
        ex->hooks.after_backward(ex->hooks.ctx, a->chunk, a->mb, last_chunk_mb, last_rank);
    if (gives_slot_back(ex, a)) release_slot(ex, a->chunk, a->mb);
    return 0;
}

/* ZB-H1's W: the weight gradients its B left to it. Reads only the slot (the
 * kept inputs and output gradients) and writes only gradients, so no send
 * needs to land first. */
static int run_backward_w(step_run *r, const pp_action *a, int index)
{
    pp_exec *ex = r->ex;
    exec_chunk *ch = chunk_of(ex, a->chunk);
    exec_slot *sl = held_slot(ex, a->chunk, a->mb);
    if (!sl) return fail(r, a, "its FORWARD has not run");
    model_batch b;
    if (batch_for(r, a, ch, &b)) return -1;
    int last_chunk_mb = a->mb == ch->last_bwd_mb, last_rank = index == ex->last_bwd_action;
    if (ex->hooks.before_backward)
        ex->hooks.before_backward(ex->hooks.ctx, a->chunk, a->mb, last_chunk_mb, last_rank);
    double t0 = clock_now_s();
    model_backward_weight(ch->m, sl->acts, &b);
    double t1 = clock_now_s();
    r->res->busy_s += t1 - t0;
    if (ex->hooks.span) ex->hooks.span(ex->hooks.ctx, a->op, a->chunk, a->mb, t0, t1);
    if (ex->hooks.after_backward)
        ex->hooks.after_backward(ex->hooks.ctx, a->chunk, a->mb, last_chunk_mb, last_rank);
    release_slot(ex, a->chunk, a->mb);
    return 0;
}

/* Every send of the step has arrived (or failed): the buffers are free again. */
static int settle_all(step_run *r, int failed)
{
    pp_exec *ex = r->ex;
    double t0 = clock_now_s();
    int rc_first = COMM_OK;
    for (int l = 0; l < ex->v; l++)
        for (int k = 0; k < ex->chunks[l].n_slots; k++) {
            exec_slot *sl = &ex->chunks[l].slots[k];
            if (!sl->send) continue;
            int rc = comm_wait(sl->send);
            sl->send = NULL;
            if (rc != COMM_OK && rc_first == COMM_OK) rc_first = rc;
        }
    double t1 = clock_now_s();
    r->res->idle_s += t1 - t0;
    if (ex->hooks.send_wait) ex->hooks.send_wait(ex->hooks.ctx, t0, t1);
    if (failed || rc_first == COMM_OK) return failed ? -1 : 0;
    const char *line = comm_last_error(ex->pp);
    snprintf(r->err, r->errlen, "pp rank %d: step %d: waiting for sends: %s", ex->rank,
             r->args->step, line && *line ? line : "communication error");
    return -1;
}

int pp_exec_step(pp_exec *ex, const pp_exec_step_args *args, pp_exec_result *out, char *err,
                 size_t errlen)
{
    memset(out, 0, sizeof *out);
    step_run r = {ex, args, out, err, errlen};
    if (args->B < 1 || args->B > ex->capacity) {
        snprintf(err, errlen, "pp rank %d: step %d: micro-batch of %d samples, slots hold %d",
                 ex->rank, args->step, args->B, ex->capacity);
        return -1;
    }
    for (int l = 0; l < ex->v; l++) {
        exec_chunk *ch = &ex->chunks[l];
        for (int k = 0; k < ch->n_slots; k++) ch->slots[k].mb = ch->slots[k].buf = -1;
        for (int mb = 0; mb < ex->m; mb++) ch->slot_of[mb] = -1;
        ch->out_mb = ch->dout_mb = -1;
    }
    for (ex->n_free = 0; ex->n_free < ex->n_bufs; ex->n_free++) ex->free[ex->n_free] = ex->n_free;
    double start = clock_now_s();
    const pp_action *list = ex->s->actions[ex->rank];
    int n = ex->s->n_actions[ex->rank], failed = 0;
    for (int i = 0; i < n && !failed; i++) {
        const pp_action *a = &list[i];
        int training_only = pp_op_is_backward(a->op) || a->op == PP_OP_RECV_GRAD ||
                            a->op == PP_OP_SEND_GRAD;
        if (args->forward_only && training_only) continue;
        switch (a->op) {
        case PP_OP_FORWARD: failed = run_forward(&r, a); break;
        case PP_OP_BACKWARD:
        case PP_OP_BACKWARD_B: failed = run_backward(&r, a, i); break;
        case PP_OP_BACKWARD_W: failed = run_backward_w(&r, a, i); break;
        case PP_OP_RECV_ACT:
        case PP_OP_RECV_GRAD: failed = run_recv(&r, a); break;
        case PP_OP_SEND_ACT:
        case PP_OP_SEND_GRAD: failed = run_send(&r, a); break;
        default: failed = fail(&r, a, "unknown action"); break;
        }
    }
    failed = settle_all(&r, failed != 0);
    out->step_s = clock_now_s() - start;
    out->bubble = out->step_s > 0 ? out->idle_s / out->step_s : 0;
    return failed ? -1 : 0;
}

/* ---- the tied embedding ---- */

int pp_exec_sum_tied(pp_exec *ex, float *first, float *last, float *scratch, size_t n, int step,
                     char *err, size_t errlen)
{
    int holds_first = ex->rank == pp_chunk_rank(0, ex->p);
    int holds_last = ex->rank == pp_chunk_rank(last_chunk(ex), ex->p);
    if (last_chunk(ex) == 0 || (!holds_first && !holds_last)) return 0;
    float *mine = holds_first ? first : last;
    if (!mine || (holds_first && holds_last && !last) || (holds_first != holds_last && !scratch)) {
        snprintf(err, errlen, "pp rank %d: step %d: tied wte: gradient or scratch buffer missing",
                 ex->rank, step);
        return -1;
    }
    if (holds_first && holds_last) {
        ex->ops->residual_forward(first, first, last, n, DT_F32);
        ex->ops->copy(last, first, n * sizeof(float));
        return 0;
    }
    /* Each end sends its part and adds the other's: the same two floats either way. */
    int peer = pp_chunk_rank(holds_first ? last_chunk(ex) : 0, ex->p);
    comm_req *req = NULL;
    int rc = comm_send_async(ex->pp, mine, n, COMM_F32, peer, &req);
    if (rc == COMM_OK) rc = comm_recv(ex->pp, scratch, n, COMM_F32, peer);
    int rc_send = comm_wait(req);
    if (rc == COMM_OK) rc = rc_send;
    if (rc != COMM_OK) {
        const char *line = comm_last_error(ex->pp);
        snprintf(err, errlen, "pp rank %d: step %d: tied wte with pp rank %d: %s", ex->rank, step,
                 peer, line && *line ? line : "communication error");
        return -1;
    }
    ex->ops->residual_forward(mine, mine, scratch, n, DT_F32);
    return 0;
}
