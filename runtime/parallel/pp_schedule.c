/* pp_schedule.c — GPipe, 1F1B, interleaved 1F1B and ZB-H1 as action lists.
 *
 * All three are the same shape over a rank's "virtual microbatches" k = 0..m*v-1:
 * W warmup forwards, then (forward k+W, backward k) pairs, then the remaining
 * backwards. Only W differs: m for GPipe (everything forward first), p-rank-1 for
 * 1F1B (just enough to fill the pipe below this rank), 2*(p-rank-1) + (v-1)*p for
 * Megatron's interleaving (one full round of the other chunks first). ZB-H1 is
 * 1F1B whose backward is emitted as B, with the W's trailing rank-many behind.
 * Keeping one generator means the engine, the dry-run and the tests all exercise
 * the same code.
 *
 * Messages sit directly around the computation that needs or produces them: a
 * receive right before its consumer, a send right after its producer. With buffered
 * sends a rank then blocks only on the tensor it needs next, so the lists complete
 * whenever the computation order itself is consistent across ranks. */
#include "runtime/parallel/pp_schedule.h"

#include "lib/job/jobspec_layout.h"

#include <stdlib.h>
#include <string.h>

#include "lib/job/jobspec_layout.h"

/* Where the generator's actions go: into a list, or (list NULL) only into the
 * per-chunk count of micro-batches in flight and its peak — the sizing layer's
 * question, answered by the very same generator without the lists' memory. */
typedef struct {
    const pp_schedule *s;
    int rank;
    pp_action *list;
    int n;
    int *in_flight, *peak; /* [p*v], counting mode */
    int rank_in_flight, *rank_peak; /* the rank's sum over its chunks, and its peak (may be NULL) */
} list_builder;

static int last_chunk(const pp_schedule *s) { return s->p * s->v - 1; }

/* Does the tensor between chunk c and chunk c+1 cross ranks? */
static int crosses_rank(const pp_schedule *s, int c) {
    return pp_chunk_rank(c, s->p) != pp_chunk_rank(c + 1, s->p);
}

static void emit(list_builder *b, pp_op op, int chunk, int mb, int peer) {
    if (b->list) {
        b->list[b->n++] = (pp_action){op, chunk, mb, peer};
    } else if (op == PP_OP_FORWARD) {
        if (++b->in_flight[chunk] > b->peak[chunk]) b->peak[chunk] = b->in_flight[chunk];
        if (b->rank_peak && ++b->rank_in_flight > b->rank_peak[b->rank]) b->rank_peak[b->rank] = b->rank_in_flight;
    } else if (pp_op_ends_backward(op)) {
        b->in_flight[chunk]--;
        b->rank_in_flight--;
    }
}

static void emit_forward(list_builder *b, int chunk, int mb) {
    const pp_schedule *s = b->s;
    if (chunk > 0 && crosses_rank(s, chunk - 1))
        emit(b, PP_OP_RECV_ACT, chunk, mb, pp_chunk_rank(chunk - 1, s->p));
    emit(b, PP_OP_FORWARD, chunk, mb, -1);
    if (chunk < last_chunk(s) && crosses_rank(s, chunk))
        emit(b, PP_OP_SEND_ACT, chunk, mb, pp_chunk_rank(chunk + 1, s->p));
}

static void emit_backward(list_builder *b, int chunk, int mb) {
    const pp_schedule *s = b->s;
    if (chunk < last_chunk(s) && crosses_rank(s, chunk))
        emit(b, PP_OP_RECV_GRAD, chunk, mb, pp_chunk_rank(chunk + 1, s->p));
    emit(b, s->kind == PP_ZB_H1 ? PP_OP_BACKWARD_B : PP_OP_BACKWARD, chunk, mb, -1);
    if (chunk > 0 && crosses_rank(s, chunk - 1))
        emit(b, PP_OP_SEND_GRAD, chunk, mb, pp_chunk_rank(chunk - 1, s->p));
}

/* Megatron's mapping of virtual microbatch k to (chunk, microbatch): p microbatches
 * pass through local chunk 0, then the same p through chunk 1, ...; backward walks
 * the chunks in reverse. With v = 1 it is chunk = rank, mb = k. */
static int virtual_chunk(const pp_schedule *s, int rank, int k, int forward) {
    int local = (k % (s->p * s->v)) / s->p;
    if (!forward) local = s->v - 1 - local;
    return pp_chunk_id(rank, local, s->p);
}

static int virtual_mb(const pp_schedule *s, int k) {
    return (k / (s->p * s->v)) * s->p + k % s->p;
}

static int warmup_forwards(const pp_schedule *s, int rank) {
    int total = s->m * s->v, w;
    switch (s->kind) {
    case PP_GPIPE: w = total; break;
    case PP_1F1B:
    case PP_ZB_H1: w = s->p - rank - 1; break;
    default: w = 2 * (s->p - rank - 1) + (s->v - 1) * s->p; break;
    }
    return w < total ? w : total;
}

/* ZB-H1: how many micro-batches rank r's W's trail its B's. Rank r's 1F1B holds
 * p - r micro-batches at most; r W's late it holds p, rank 0's figure, so the
 * pipeline's peak stays 1F1B's while the later ranks, whose warmup and cooldown
 * wait longest, get the most W's to fill them with. */
static int deferred_ws(const pp_schedule *s, int rank) { return s->kind == PP_ZB_H1 ? rank : 0; }

/* After backward k (B under ZB-H1): the W that is due, if any; none otherwise. */
static void emit_due_w(list_builder *b, int k) {
    const pp_schedule *s = b->s;
    int w = k - deferred_ws(s, b->rank);
    if (s->kind == PP_ZB_H1 && w >= 0) emit(b, PP_OP_BACKWARD_W, virtual_chunk(s, b->rank, w, 0), virtual_mb(s, w), -1);
}

static void build_rank(list_builder *b) {
    const pp_schedule *s = b->s;
    int total = s->m * s->v, warmup = warmup_forwards(s, b->rank);
    for (int k = 0; k < warmup; k++)
        emit_forward(b, virtual_chunk(s, b->rank, k, 1), virtual_mb(s, k));
    for (int k = 0; k < total - warmup; k++) {
        int f = k + warmup;
        emit_forward(b, virtual_chunk(s, b->rank, f, 1), virtual_mb(s, f));
        emit_backward(b, virtual_chunk(s, b->rank, k, 0), virtual_mb(s, k));
        emit_due_w(b, k);
    }
    for (int k = total - warmup > 0 ? total - warmup : 0; k < total; k++) {
        emit_backward(b, virtual_chunk(s, b->rank, k, 0), virtual_mb(s, k));
        emit_due_w(b, k);
    }
    /* the W's still deferred: the cooldown's */
    if (s->kind == PP_ZB_H1)
        for (int w = total - deferred_ws(s, b->rank) > 0 ? total - deferred_ws(s, b->rank) : 0; w < total; w++)
            emit(b, PP_OP_BACKWARD_W, virtual_chunk(s, b->rank, w, 0), virtual_mb(s, w), -1);
}

/* The job checks apply the same rules (lib/job/jobspec_layout.h), so a job
 * that loaded never fails here; a direct caller (tests, the planner) still may. */
static int check_shape(pp_schedule_kind kind, int p, int m, int v, char *err, size_t errlen) {
    char why[256];
    if (job_layout_check_pipeline(kind, p, m, v, why, sizeof why) == 0) return 0;
    snprintf(err, errlen, "pipeline schedule: %s", why);
    return -1;
}

int pp_schedule_build(pp_schedule *s, pp_schedule_kind kind, int p, int m, int v,
                      char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->p = p, s->m = m, s->v = v;
    if (check_shape(kind, p, m, v, err, errlen)) return -1;
    s->n_actions = calloc((size_t)p, sizeof *s->n_actions);
    s->actions = calloc((size_t)p, sizeof *s->actions);
    if (!s->n_actions || !s->actions) goto oom;
    /* At most a receive, the computation and a send per forward and per backward,
     * and a W per backward under ZB-H1. */
    size_t cap = (size_t)7 * (size_t)m * (size_t)v;
    for (int r = 0; r < p; r++) {
        list_builder b = {s, r, malloc(cap * sizeof(pp_action)), 0, NULL, NULL, 0, NULL};
        if (!b.list) goto oom;
        build_rank(&b);
        s->actions[r] = b.list;
        s->n_actions[r] = b.n;
    }
    return 0;
oom:
    snprintf(err, errlen, "pipeline schedule: out of memory");
    return -1;
}

int pp_schedule_peak_in_flight_chunks(pp_schedule_kind kind, int p, int m, int v, int *peak, int *rank_peak,
                                      char *err, size_t errlen) {
    if (check_shape(kind, p, m, v, err, errlen)) return -1;
    int *in_flight = calloc((size_t)p * (size_t)v, sizeof *in_flight);
    if (!in_flight) {
        snprintf(err, errlen, "pipeline schedule: out of memory");
        return -1;
    }
    memset(peak, 0, (size_t)p * (size_t)v * sizeof *peak);
    if (rank_peak) memset(rank_peak, 0, (size_t)p * sizeof *rank_peak);
    pp_schedule shape = {kind, p, m, v, NULL, NULL};
    for (int r = 0; r < p; r++) {
        list_builder b = {&shape, r, NULL, 0, in_flight, peak, 0, rank_peak};
        build_rank(&b);
    }
    free(in_flight);
    return 0;
}

void pp_schedule_free(pp_schedule *s) {
    if (s->actions)
        for (int r = 0; r < s->p; r++) free(s->actions[r]);
    free(s->actions);
    free(s->n_actions);
    s->actions = NULL;
    s->n_actions = NULL;
}

/* ---- validation ---- */

typedef struct {
    const pp_schedule *s;
    unsigned char *done; /* [PP_OP_COUNT][chunks][m] */
} seen_set;

static unsigned char *seen(const seen_set *z, pp_op op, int chunk, int mb) {
    int chunks = z->s->p * z->s->v;
    return &z->done[((size_t)op * (size_t)chunks + (size_t)chunk) * (size_t)z->s->m + (size_t)mb];
}

/* The computation that makes a chunk's input gradient in this schedule. */
static pp_op dinput_op(const pp_schedule *s) { return s->kind == PP_ZB_H1 ? PP_OP_BACKWARD_B : PP_OP_BACKWARD; }

/* Is op a computation this kind of schedule runs (once per chunk and mb)? */
static int computes(const pp_schedule *s, pp_op op) {
    if (op == PP_OP_FORWARD) return 1;
    if (s->kind == PP_ZB_H1) return op == PP_OP_BACKWARD_B || op == PP_OP_BACKWARD_W;
    return op == PP_OP_BACKWARD;
}

/* Which peer a message must name, or -1 when the message must not exist. */
static int message_peer(const pp_schedule *s, pp_op op, int chunk) {
    int next_crosses = chunk < last_chunk(s) && crosses_rank(s, chunk);
    int prev_crosses = chunk > 0 && crosses_rank(s, chunk - 1);
    switch (op) {
    case PP_OP_SEND_ACT:
    case PP_OP_RECV_GRAD: return next_crosses ? pp_chunk_rank(chunk + 1, s->p) : -1;
    case PP_OP_RECV_ACT:
    case PP_OP_SEND_GRAD: return prev_crosses ? pp_chunk_rank(chunk - 1, s->p) : -1;
    default: return -1;
    }
}

/* What must already have happened on this rank before action a; NULL when all did. */
static const char *missing_input(const seen_set *z, const pp_action *a) {
    const pp_schedule *s = z->s;
    int c = a->chunk, mb = a->mb;
    switch (a->op) {
    case PP_OP_FORWARD:
        if (c == 0) return NULL;
        if (crosses_rank(s, c - 1)) return *seen(z, PP_OP_RECV_ACT, c, mb) ? NULL : "its RECV_ACT";
        return *seen(z, PP_OP_FORWARD, c - 1, mb) ? NULL : "the FORWARD of the previous chunk";
    case PP_OP_BACKWARD:
    case PP_OP_BACKWARD_B:
        if (!*seen(z, PP_OP_FORWARD, c, mb)) return "its FORWARD";
        if (c == last_chunk(s)) return NULL;
        if (crosses_rank(s, c)) return *seen(z, PP_OP_RECV_GRAD, c, mb) ? NULL : "its RECV_GRAD";
        return *seen(z, a->op, c + 1, mb) ? NULL : "the backward of the next chunk";
    case PP_OP_BACKWARD_W: return *seen(z, PP_OP_BACKWARD_B, c, mb) ? NULL : "its BACKWARD_B";
    case PP_OP_SEND_ACT: return *seen(z, PP_OP_FORWARD, c, mb) ? NULL : "its FORWARD";
    case PP_OP_SEND_GRAD: return *seen(z, dinput_op(s), c, mb) ? NULL : "its backward";
    default: return NULL;
    }
}

static int check_action(const seen_set *z, int r, int i, const pp_action *a, char *err, size_t errlen) {
    const pp_schedule *s = z->s;
    if ((int)a->op < 0 || a->op >= PP_OP_COUNT || a->chunk < 0 || a->chunk > last_chunk(s) ||
        a->mb < 0 || a->mb >= s->m) {
        snprintf(err, errlen, "rank %d action %d: op %d chunk %d mb %d out of range", r, i,
                 (int)a->op, a->chunk, a->mb);
        return -1;
    }
    const char *what = pp_op_name(a->op);
    if (pp_chunk_rank(a->chunk, s->p) != r) {
        snprintf(err, errlen, "rank %d action %d: %s of chunk %d, which runs on rank %d", r, i,
                 what, a->chunk, pp_chunk_rank(a->chunk, s->p));
        return -1;
    }
    if (*seen(z, a->op, a->chunk, a->mb)) {
        snprintf(err, errlen, "rank %d action %d: %s chunk %d mb %d appears twice", r, i, what,
                 a->chunk, a->mb);
        return -1;
    }
    if (pp_op_is_backward(a->op) && !computes(s, a->op)) {
        snprintf(err, errlen, "rank %d action %d: %s chunk %d mb %d in a %s schedule", r, i, what, a->chunk,
                 a->mb, pp_schedule_kind_name(s->kind));
        return -1;
    }
    if (a->op != PP_OP_FORWARD && !pp_op_is_backward(a->op)) {
        int peer = message_peer(s, a->op, a->chunk);
        if (peer < 0) {
            snprintf(err, errlen, "rank %d action %d: %s chunk %d mb %d has no other rank to talk to",
                     r, i, what, a->chunk, a->mb);
            return -1;
        }
        if (a->peer != peer) {
            snprintf(err, errlen, "rank %d action %d: %s chunk %d mb %d names peer %d, expected %d",
                     r, i, what, a->chunk, a->mb, a->peer, peer);
            return -1;
        }
    }
    const char *missing = missing_input(z, a);
    if (missing) {
        snprintf(err, errlen, "rank %d action %d: %s chunk %d mb %d comes before %s", r, i, what,
                 a->chunk, a->mb, missing);
        return -1;
    }
    return 0;
}

/* After all lists: every computation present, every needed message present. */
static int check_complete(const seen_set *z, char *err, size_t errlen) {
    const pp_schedule *s = z->s;
    for (int c = 0; c <= last_chunk(s); c++)
        for (int mb = 0; mb < s->m; mb++)
            for (int op = 0; op < PP_OP_COUNT; op++) {
                int needed = computes(s, (pp_op)op) || (!pp_op_is_backward((pp_op)op) && op != PP_OP_FORWARD &&
                                                         message_peer(s, (pp_op)op, c) >= 0);
                if (needed && !*seen(z, (pp_op)op, c, mb)) {
                    snprintf(err, errlen, "rank %d never runs %s chunk %d mb %d",
                             pp_chunk_rank(c, s->p), pp_op_name((pp_op)op), c, mb);
                    return -1;
                }
            }
    return 0;
}

int pp_schedule_validate(const pp_schedule *s, char *err, size_t errlen) {
    if (s->p < 1 || s->m < 1 || s->v < 1 || (long long)s->p * s->m * s->v > JOB_PP_MAX_WORK ||
        !s->actions || !s->n_actions) {
        snprintf(err, errlen, "schedule: p %d m %d v %d or lists missing", s->p, s->m, s->v);
        return -1;
    }
    size_t cells = (size_t)PP_OP_COUNT * (size_t)(s->p * s->v) * (size_t)s->m;
    seen_set z = {s, calloc(cells, 1)};
    if (!z.done) {
        snprintf(err, errlen, "schedule: out of memory");
        return -1;
    }
    int rc = 0;
    for (int r = 0; r < s->p && rc == 0; r++)
        for (int i = 0; i < s->n_actions[r] && rc == 0; i++) {
            const pp_action *a = &s->actions[r][i];
            rc = check_action(&z, r, i, a, err, errlen);
            if (rc == 0) *seen(&z, a->op, a->chunk, a->mb) = 1;
        }
    if (rc == 0) rc = check_complete(&z, err, errlen);
    free(z.done);
    return rc;
}

/* ---- activations in flight ---- */

double pp_schedule_peak_in_flight(const pp_schedule *s, int rank, const double *chunk_weight) {
    double now = 0.0, peak = 0.0;
    for (int i = 0; i < s->n_actions[rank]; i++) {
        const pp_action *a = &s->actions[rank][i];
        double w = chunk_weight ? chunk_weight[a->chunk] : 1.0;
        if (a->op == PP_OP_FORWARD) now += w;
        else if (pp_op_ends_backward(a->op)) now -= w;
        if (now > peak) peak = now;
    }
    return peak;
}

int pp_schedule_peak_in_flight_chunk(const pp_schedule *s, int chunk) {
    int rank = pp_chunk_rank(chunk, s->p), now = 0, peak = 0;
    for (int i = 0; i < s->n_actions[rank]; i++) {
        const pp_action *a = &s->actions[rank][i];
        if (a->chunk != chunk) continue;
        if (a->op == PP_OP_FORWARD) now++;
        else if (pp_op_ends_backward(a->op)) now--;
        if (now > peak) peak = now;
    }
    return peak;
}

size_t pp_stash_pool_bytes(int v, const int *slots, const size_t *stash, int rank_peak, int *shared) {
    size_t apart = 0, largest = 0;
    for (int l = 0; l < v; l++) {
        apart += (size_t)slots[l] * stash[l];
        if (stash[l] > largest) largest = stash[l];
    }
    size_t pooled = (size_t)rank_peak * largest;
    int share = v > 1 && pooled < apart;
    if (shared) *shared = share;
    return share ? pooled : apart;
}

double pp_schedule_ideal_bubble(pp_schedule_kind kind, int p, int m, int v) {
    int chunks_per_rank = kind == PP_INTERLEAVED ? v : 1;
    if (kind == PP_ZB_H1) return (double)(p - 1) / (3.0 * m + p - 1);
    return (double)(p - 1) / ((double)chunks_per_rank * m + p - 1);
}

const char *pp_schedule_kind_name(pp_schedule_kind kind) {
    switch (kind) {
    case PP_GPIPE: return "gpipe";
    case PP_1F1B: return "1f1b";
    case PP_INTERLEAVED: return "interleaved";
    case PP_ZB_H1: return "zb-h1";
    }
    return "unknown";
}

const char *pp_op_name(pp_op op) {
    static const char *const names[PP_OP_COUNT] = {"FORWARD",   "BACKWARD",  "SEND_ACT",   "RECV_ACT",
                                                   "SEND_GRAD", "RECV_GRAD", "BACKWARD_B", "BACKWARD_W"};
    return (int)op >= 0 && op < PP_OP_COUNT ? names[op] : "UNKNOWN";
}

void pp_schedule_print(FILE *f, const pp_schedule *s) {
    fprintf(f, "pipeline schedule %s: pp %d, microbatches %d, virtual_stages %d\n",
            pp_schedule_kind_name(s->kind), s->p, s->m, s->v);
    for (int r = 0; r < s->p; r++) {
        fprintf(f, "rank %d (%d actions)\n", r, s->n_actions[r]);
        for (int i = 0; i < s->n_actions[r]; i++) {
            const pp_action *a = &s->actions[r][i];
            fprintf(f, "  %-9s chunk %d mb %d", pp_op_name(a->op), a->chunk, a->mb);
            if (a->peer >= 0)
                fprintf(f, " %s rank %d", a->op == PP_OP_SEND_ACT || a->op == PP_OP_SEND_GRAD ? "to" : "from",
                        a->peer);
            fputc('\n', f);
        }
    }
}
