/* pp_sim.c — discrete-event evaluation of pipeline action lists.
 *
 * Sends never block, so every action's times depend only on the action before it on
 * the same rank and, for a receive, on the matching send's start. That makes the
 * simulation a sweep: advance each rank as far as its receives allow, repeat until
 * all lists are done. The sweep order cannot change any time, and a sweep in which
 * no rank moves while some are unfinished is exactly a deadlock. */
#include "runtime/parallel/pp_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NOT_SENT (-1.0)

typedef struct {
    const pp_schedule *s;
    const pp_sim_costs *costs;
    double *act_sent;  /* [chunks * m]: start of SEND_ACT(chunk, mb), NOT_SENT before */
    double *grad_sent; /* [chunks * m]: start of SEND_GRAD(chunk, mb) */
    int *pos;          /* [p] next action of each rank */
    double *clock;     /* [p] when that action can start */
} sim_state;

static double backward_cost(const pp_sim_costs *c, int chunk) {
    return c->backward ? c->backward[chunk] : 2.0 * c->forward[chunk];
}

static double backward_b_cost(const pp_sim_costs *c, int chunk) {
    return c->backward_b ? c->backward_b[chunk] : 0.5 * backward_cost(c, chunk);
}

static double backward_w_cost(const pp_sim_costs *c, int chunk) {
    return c->backward_w ? c->backward_w[chunk] : 0.5 * backward_cost(c, chunk);
}

static size_t slot(const pp_schedule *s, int chunk, int mb) {
    return (size_t)chunk * (size_t)s->m + (size_t)mb;
}

/* Time the matching send started, or NOT_SENT. */
static double matching_send(const sim_state *st, const pp_action *a) {
    if (a->op == PP_OP_RECV_ACT) return st->act_sent[slot(st->s, a->chunk - 1, a->mb)];
    return st->grad_sent[slot(st->s, a->chunk + 1, a->mb)];
}

/* Run rank r until it finishes or blocks in a receive. Returns actions advanced. */
static int advance_rank(sim_state *st, pp_sim_result *out, int r) {
    const pp_schedule *s = st->s;
    int moved = 0;
    while (st->pos[r] < s->n_actions[r]) {
        int i = st->pos[r];
        const pp_action *a = &s->actions[r][i];
        double t = st->clock[r], done = t;
        switch (a->op) {
        case PP_OP_FORWARD:
            done = t + st->costs->forward[a->chunk];
            out->busy[r] += done - t;
            break;
        case PP_OP_BACKWARD:
        case PP_OP_BACKWARD_B:
        case PP_OP_BACKWARD_W:
            done = t + (a->op == PP_OP_BACKWARD     ? backward_cost(st->costs, a->chunk)
                        : a->op == PP_OP_BACKWARD_B ? backward_b_cost(st->costs, a->chunk)
                                                    : backward_w_cost(st->costs, a->chunk));
            out->busy[r] += done - t;
            break;
        case PP_OP_SEND_ACT: st->act_sent[slot(s, a->chunk, a->mb)] = t; break;
        case PP_OP_SEND_GRAD: st->grad_sent[slot(s, a->chunk, a->mb)] = t; break;
        case PP_OP_RECV_ACT:
        case PP_OP_RECV_GRAD: {
            double sent = matching_send(st, a);
            if (sent == NOT_SENT) return moved;
            double arrives = sent + st->costs->p2p;
            done = arrives > t ? arrives : t;
            break;
        }
        default: break;
        }
        out->start[r][i] = t;
        out->end[r][i] = done;
        st->clock[r] = done;
        st->pos[r]++;
        moved++;
    }
    return moved;
}

static void report_deadlock(const sim_state *st, char *err, size_t errlen) {
    const pp_schedule *s = st->s;
    size_t used = (size_t)snprintf(err, errlen, "pipeline schedule deadlocks:");
    int listed = 0;
    for (int r = 0; r < s->p && used < errlen; r++) {
        if (st->pos[r] >= s->n_actions[r]) continue;
        if (listed == 4) {
            snprintf(err + used, errlen - used, " ...");
            return;
        }
        const pp_action *a = &s->actions[r][st->pos[r]];
        used += (size_t)snprintf(err + used, errlen - used,
                                 "%s rank %d waits at action %d (%s chunk %d mb %d from rank %d)",
                                 listed ? ";" : "", r, st->pos[r], pp_op_name(a->op), a->chunk,
                                 a->mb, a->peer);
        listed++;
    }
}

static int check_costs(const pp_schedule *s, const pp_sim_costs *c, char *err, size_t errlen) {
    if (!c || !c->forward) {
        snprintf(err, errlen, "pipeline simulation: no forward costs given");
        return -1;
    }
    for (int k = 0; k < s->p * s->v; k++) {
        double f = c->forward[k], b = backward_cost(c, k), bb = backward_b_cost(c, k), bw = backward_w_cost(c, k);
        if (!isfinite(f) || f < 0 || !isfinite(b) || b < 0 || !isfinite(bb) || bb < 0 || !isfinite(bw) || bw < 0) {
            snprintf(err, errlen, "pipeline simulation: chunk %d costs forward %g backward %g (B %g, W %g) "
                     "(must be finite and >= 0)", k, f, b, bb, bw);
            return -1;
        }
    }
    if (!isfinite(c->p2p) || c->p2p < 0) {
        snprintf(err, errlen, "pipeline simulation: p2p time %g must be finite and >= 0", c->p2p);
        return -1;
    }
    return 0;
}

static int alloc_result(const pp_schedule *s, pp_sim_result *out) {
    out->p = s->p;
    out->busy = calloc((size_t)s->p, sizeof *out->busy);
    out->idle = calloc((size_t)s->p, sizeof *out->idle);
    out->start = calloc((size_t)s->p, sizeof *out->start);
    out->end = calloc((size_t)s->p, sizeof *out->end);
    if (!out->busy || !out->idle || !out->start || !out->end) return -1;
    for (int r = 0; r < s->p; r++) {
        size_t n = (size_t)s->n_actions[r] + 1; /* +1: an empty list still allocates */
        out->start[r] = calloc(n, sizeof(double));
        out->end[r] = calloc(n, sizeof(double));
        if (!out->start[r] || !out->end[r]) return -1;
    }
    return 0;
}

int pp_sim_run(const pp_schedule *s, const pp_sim_costs *costs, pp_sim_result *out,
               char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (pp_schedule_validate(s, err, errlen) != 0) return -1;
    return pp_sim_run_validated(s, costs, out, err, errlen);
}

int pp_sim_run_validated(const pp_schedule *s, const pp_sim_costs *costs, pp_sim_result *out,
                         char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (check_costs(s, costs, err, errlen) != 0) return -1;
    size_t slots = (size_t)(s->p * s->v) * (size_t)s->m;
    sim_state st = {s, costs, malloc(slots * sizeof(double)), malloc(slots * sizeof(double)),
                    calloc((size_t)s->p, sizeof(int)), calloc((size_t)s->p, sizeof(double))};
    int rc = -1;
    if (!st.act_sent || !st.grad_sent || !st.pos || !st.clock || alloc_result(s, out) != 0) {
        snprintf(err, errlen, "pipeline simulation: out of memory");
        goto done;
    }
    for (size_t k = 0; k < slots; k++) st.act_sent[k] = st.grad_sent[k] = NOT_SENT;

    for (;;) {
        int moved = 0, unfinished = 0;
        for (int r = 0; r < s->p; r++) {
            moved += advance_rank(&st, out, r);
            unfinished += st.pos[r] < s->n_actions[r];
        }
        if (!unfinished) break;
        if (!moved) {
            report_deadlock(&st, err, errlen);
            goto done;
        }
    }
    out->makespan = 0.0;
    for (int r = 0; r < s->p; r++)
        if (st.clock[r] > out->makespan) out->makespan = st.clock[r];
    out->bubble = 0.0;
    for (int r = 0; r < s->p; r++) {
        out->idle[r] = out->makespan - out->busy[r];
        if (out->makespan > 0) out->bubble += out->idle[r] / out->makespan / s->p;
    }
    rc = 0;
done:
    free(st.act_sent), free(st.grad_sent), free(st.pos), free(st.clock);
    return rc;
}

void pp_sim_free(pp_sim_result *r) {
    for (int i = 0; i < r->p; i++) {
        if (r->start) free(r->start[i]);
        if (r->end) free(r->end[i]);
    }
    free(r->start), free(r->end), free(r->busy), free(r->idle);
    memset(r, 0, sizeof *r);
}

/* ---- the picture ---- */

static char action_glyph(const pp_action *a) {
    return (char)((a->op == PP_OP_FORWARD ? '0' : a->op == PP_OP_BACKWARD_W ? 'A' : 'a') + a->mb % 10);
}

/* One rank's row: a column is idle when idle covers most of its time span, else it
 * shows the action covering the most of it. Judging busy time as a whole keeps a
 * column of several short actions from reading as idle when actions are narrower
 * than a column (large m). */
static void draw_row(const pp_schedule *s, const pp_sim_result *res, int r, int width,
                     char *row, double *best, double *busy) {
    double col_time = res->makespan / width;
    for (int c = 0; c < width; c++) row[c] = '.', best[c] = 0.0, busy[c] = 0.0;
    for (int i = 0; i < s->n_actions[r]; i++) {
        const pp_action *a = &s->actions[r][i];
        if (a->op != PP_OP_FORWARD && !pp_op_is_backward(a->op)) continue;
        double t0 = res->start[r][i], t1 = res->end[r][i];
        if (t1 <= t0) continue;
        int c0 = (int)(t0 / col_time), c1 = (int)(t1 / col_time);
        if (c1 >= width) c1 = width - 1;
        for (int c = c0 < 0 ? 0 : c0; c <= c1; c++) {
            double lo = c * col_time, hi = lo + col_time;
            double overlap = (t1 < hi ? t1 : hi) - (t0 > lo ? t0 : lo);
            if (overlap <= 0) continue;
            busy[c] += overlap;
            if (overlap > best[c]) best[c] = overlap, row[c] = action_glyph(a);
        }
    }
    for (int c = 0; c < width; c++)
        if (busy[c] < col_time - busy[c]) row[c] = '.';
    row[width] = '\0';
}

void pp_sim_print(FILE *f, const pp_schedule *s, const pp_sim_result *r, int width) {
    if (width <= 0) width = 100;
    fprintf(f, "pipeline %s: pp %d, microbatches %d, virtual_stages %d\n",
            pp_schedule_kind_name(s->kind), s->p, s->m, s->v);
    char *row = malloc((size_t)width + 1);
    double *best = malloc((size_t)width * sizeof *best);
    double *busy = malloc((size_t)width * sizeof *busy);
    if (row && best && busy && r->makespan > 0) {
        for (int k = 0; k < s->p; k++) {
            draw_row(s, r, k, width, row, best, busy);
            fprintf(f, "  rank %-3d |%s|  busy %.4g  idle %.4g (%.1f%%)\n", k, row, r->busy[k],
                    r->idle[k], 100.0 * r->idle[k] / r->makespan);
        }
        fprintf(f, "  legend: 0-9 forward of a microbatch (last digit), a-j its backward%s "
                   "(a = 0 ... j = 9), '.' idle; one column = %.3g time units\n",
                s->kind == PP_ZB_H1 ? " (its B; A-J its W)" : "", r->makespan / width);
    }
    free(row), free(best), free(busy);
    fprintf(f, "  bubble %.1f%% (idle / step, mean over ranks), step %.4g; uniform chunks "
               "would give %s = %.1f%%\n",
            100.0 * r->bubble, r->makespan, s->kind == PP_ZB_H1 ? "(p-1)/(3m+p-1) with B = W = F" : "(p-1)/(v*m+p-1)",
            100.0 * pp_schedule_ideal_bubble(s->kind, s->p, s->m, s->v));
}
