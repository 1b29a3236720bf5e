/* test_pp_schedule.c — pipeline partition, schedules and their simulation.
 *
 * The bubble law this suite pins down, for chunks of equal cost (F = 1, B = 2 per
 * chunk) and free messages, as simulated (idle / makespan, every rank alike):
 *   GPipe, 1F1B:   (p-1) / (m + p - 1)
 *   interleaved:   (p-1) / (v*m + p - 1)
 * i.e. every rank idles exactly (p-1) chunk-times of F+B. Megatron's paper states
 * the interleaved bubble relative to the ideal (busy) time, (p-1) / (v*m); that is
 * the same fact, checked below as idle / busy.
 * ZB-H1 (B = W = F, the backward split in halves), m >= p: (p-1) / (3m + p - 1),
 * each rank idling (p-1) F instead of 1F1B's (p-1)(F+B+W); with any B and W the
 * paper's (p-1)(F+B-W) when that is at least 0. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/parallel/pp_partition.h"
#include "runtime/parallel/pp_schedule.h"
#include "runtime/parallel/pp_sim.h"
#include "test/unit/check.h"

static const int P_LIST[] = {1, 2, 4, 8};
static const int M_LIST[] = {1, 2, 4, 8, 16, 32, 64};
#define N_P (int)(sizeof P_LIST / sizeof P_LIST[0])
#define N_M (int)(sizeof M_LIST / sizeof M_LIST[0])
#define MAX_CHUNKS 64

/* ---- an independent structural check, written without the validator ---- */

/* Returns NULL when the schedule is sound, else what is wrong (static text). */
static const char *structure_problem(const pp_schedule *s) {
    int chunks = s->p * s->v, m = s->m;
    size_t n = (size_t)chunks * (size_t)m;
    int *fwd_count = calloc(n, sizeof(int)), *bwd_count = calloc(n, sizeof(int));
    int *fwd_pos = calloc(n, sizeof(int)), *bwd_pos = calloc(n, sizeof(int));
    int *send_act = calloc(n, sizeof(int)), *recv_act = calloc(n, sizeof(int));
    int *send_grad = calloc(n, sizeof(int)), *recv_grad = calloc(n, sizeof(int));
    const char *problem = NULL;
    for (int r = 0; r < s->p && !problem; r++)
        for (int i = 0; i < s->n_actions[r] && !problem; i++) {
            const pp_action *a = &s->actions[r][i];
            size_t k = (size_t)a->chunk * (size_t)m + (size_t)a->mb;
            if (a->chunk % s->p != r) problem = "action on the wrong rank";
            else if (a->op == PP_OP_FORWARD) fwd_count[k]++, fwd_pos[k] = i;
            else if (a->op == PP_OP_BACKWARD) bwd_count[k]++, bwd_pos[k] = i;
            else if (a->op == PP_OP_SEND_ACT) send_act[k] += (a->peer == (a->chunk + 1) % s->p) ? 1 : 100;
            else if (a->op == PP_OP_RECV_ACT) recv_act[k] += (a->peer == (a->chunk - 1) % s->p) ? 1 : 100;
            else if (a->op == PP_OP_SEND_GRAD) send_grad[k] += (a->peer == (a->chunk - 1) % s->p) ? 1 : 100;
            else if (a->op == PP_OP_RECV_GRAD) recv_grad[k] += (a->peer == (a->chunk + 1) % s->p) ? 1 : 100;
        }
    for (int c = 0; c < chunks && !problem; c++)
        for (int mb = 0; mb < m && !problem; mb++) {
            size_t k = (size_t)c * (size_t)m + (size_t)mb;
            if (fwd_count[k] != 1 || bwd_count[k] != 1) problem = "forward/backward not exactly once";
            else if (bwd_pos[k] < fwd_pos[k]) problem = "backward before its forward";
            else if (c + 1 < chunks) {
                size_t up = k + (size_t)m; /* chunk c+1, same mb */
                int crosses = s->p > 1;
                if (send_act[k] != crosses || recv_act[up] != crosses) problem = "activation send/recv unpaired";
                else if (send_grad[up] != crosses || recv_grad[k] != crosses) problem = "gradient send/recv unpaired";
            }
        }
    free(fwd_count), free(bwd_count), free(fwd_pos), free(bwd_pos);
    free(send_act), free(recv_act), free(send_grad), free(recv_grad);
    return problem;
}

static void unit_costs(double *f, int n) {
    for (int i = 0; i < n; i++) f[i] = 1.0;
}

/* ---- every schedule, every size ---- */

static void check_one(pp_schedule_kind kind, int p, int m, int v) {
    pp_schedule s;
    char err[512] = "";
    int rc = pp_schedule_build(&s, kind, p, m, v, err, sizeof err);
    const char *name = pp_schedule_kind_name(kind);
    if (rc != 0) {
        CHECK(0, "%s p=%d m=%d v=%d builds: %s", name, p, m, v, err);
        pp_schedule_free(&s);
        return;
    }
    int valid = pp_schedule_validate(&s, err, sizeof err) == 0;
    const char *problem = structure_problem(&s);

    double f[MAX_CHUNKS];
    unit_costs(f, p * v);
    pp_sim_costs costs = {f, NULL, 0.0, NULL, NULL};
    pp_sim_result r;
    char sim_err[512] = "";
    int ran = pp_sim_run(&s, &costs, &r, sim_err, sizeof sim_err) == 0;
    double ideal = (double)(p - 1) / ((double)v * m + p - 1);
    double worst = 0.0;
    for (int k = 0; ran && k < p; k++) {
        double d = fabs(r.idle[k] / r.makespan - ideal);
        if (d > worst) worst = d;
    }
    int peaks_ok = 1;
    for (int k = 0; k < p; k++) {
        double peak = pp_schedule_peak_in_flight(&s, k, NULL), want;
        if (kind == PP_GPIPE) want = m;
        else if (kind == PP_1F1B) want = p - k < m ? p - k : m;
        else { /* Megatron: warmup forwards, then one more before the first backward */
            int w = 2 * (p - k - 1) + (v - 1) * p + 1;
            want = w < m * v ? w : m * v;
        }
        if (peak != want) peaks_ok = 0;
    }
    /* the counting generator (sizes' activation slots) against the built lists */
    int counted[MAX_CHUNKS], ranks[MAX_CHUNKS];
    int counts_ok = pp_schedule_peak_in_flight_chunks(kind, p, m, v, counted, ranks, err, sizeof err) == 0;
    for (int c = 0; counts_ok && c < p * v; c++) counts_ok = counted[c] == pp_schedule_peak_in_flight_chunk(&s, c);
    /* and each rank's peak of its chunks together (the executor's shared stash pool) */
    for (int k = 0; counts_ok && k < p; k++) counts_ok = ranks[k] == pp_schedule_peak_in_flight(&s, k, NULL);
    peaks_ok &= counts_ok;
    CHECK(valid && !problem && ran && worst < 1e-9 && fabs(r.bubble - ideal) < 1e-9 &&
              fabs(pp_schedule_ideal_bubble(kind, p, m, v) - ideal) < 1e-12 && peaks_ok,
          "%s p=%d m=%d v=%d: valid (%s), structure (%s), simulates (%s), bubble %.6f = "
          "(p-1)/(v*m+p-1) = %.6f on every rank, peak activations as expected (%d)",
          name, p, m, v, valid ? "ok" : err, problem ? problem : "ok", ran ? "ok" : sim_err,
          ran ? r.bubble : -1.0, ideal, peaks_ok);
    if (ran && kind == PP_INTERLEAVED && p > 1) {
        /* Megatron's statement: bubble time / ideal time = (p-1) / (v*m). */
        double worst_rel = 0.0;
        for (int k = 0; k < p; k++) {
            double d = fabs(r.idle[k] / r.busy[k] - (double)(p - 1) / ((double)v * m));
            if (d > worst_rel) worst_rel = d;
        }
        CHECK(worst_rel < 1e-9, "interleaved p=%d m=%d v=%d: idle / busy = (p-1)/(v*m) = %.6f",
              p, m, v, (double)(p - 1) / ((double)v * m));
    }
    pp_sim_free(&r);
    pp_schedule_free(&s);
}

static void test_all_schedules(void) {
    for (int i = 0; i < N_P; i++)
        for (int j = 0; j < N_M; j++) {
            int p = P_LIST[i], m = M_LIST[j];
            check_one(PP_GPIPE, p, m, 1);
            check_one(PP_1F1B, p, m, 1);
            if (m % p != 0) continue;
            check_one(PP_INTERLEAVED, p, m, 2);
            check_one(PP_INTERLEAVED, p, m, 4);
        }
}

/* ---- ZB-H1 ---- */

/* A rank's FORWARD / BACKWARD_B sequence with the W's left out must be exactly
 * 1F1B's FORWARD / BACKWARD sequence (and its messages): the same critical path,
 * so the same freedom from deadlock, with W's only added in. */
static int same_as_1f1b_without_w(const pp_schedule *zb, const pp_schedule *ob, int r) {
    int j = 0;
    for (int i = 0; i < zb->n_actions[r]; i++) {
        pp_action a = zb->actions[r][i];
        if (a.op == PP_OP_BACKWARD_W) continue;
        if (a.op == PP_OP_BACKWARD_B) a.op = PP_OP_BACKWARD;
        if (j >= ob->n_actions[r]) return 0;
        const pp_action *b = &ob->actions[r][j++];
        if (a.op != b->op || a.chunk != b->chunk || a.mb != b->mb || a.peer != b->peer) return 0;
    }
    return j == ob->n_actions[r];
}

static void check_zero_bubble(int p, int m) {
    pp_schedule s, o;
    char err[512] = "", sim_err[512] = "ok";
    int built = pp_schedule_build(&s, PP_ZB_H1, p, m, 1, err, sizeof err) == 0 &&
                pp_schedule_build(&o, PP_1F1B, p, m, 1, err, sizeof err) == 0;
    if (!built) {
        CHECK(0, "zb-h1 p=%d m=%d builds: %s", p, m, err);
        return;
    }
    int valid = pp_schedule_validate(&s, err, sizeof err) == 0, order = 1, ws = 1;
    for (int r = 0; r < p; r++) {
        order &= same_as_1f1b_without_w(&s, &o, r);
        int n_w = 0;
        for (int i = 0; i < s.n_actions[r]; i++) n_w += s.actions[r][i].op == PP_OP_BACKWARD_W;
        ws &= n_w == m;
    }
    /* peak in flight (F done, W not): every rank at most 1F1B's rank 0, min(p, m),
     * and the pipeline's peak equal to 1F1B's; the counting generator agrees */
    double peak_zb = 0, peak_1f1b = 0;
    int per_rank_ok = 1;
    for (int r = 0; r < p; r++) {
        double z = pp_schedule_peak_in_flight(&s, r, NULL), b = pp_schedule_peak_in_flight(&o, r, NULL);
        per_rank_ok &= z <= (p < m ? p : m);
        if (z > peak_zb) peak_zb = z;
        if (b > peak_1f1b) peak_1f1b = b;
    }
    int counted[MAX_CHUNKS], counts_ok = pp_schedule_peak_in_flight_chunks(PP_ZB_H1, p, m, 1, counted, NULL, err, sizeof err) == 0;
    for (int c = 0; counts_ok && c < p; c++) counts_ok = counted[c] == pp_schedule_peak_in_flight_chunk(&s, c);
    /* deadlock-free under several cost shapes; the bubble law with B = W = F */
    double f[MAX_CHUNKS], b[MAX_CHUNKS], bb[MAX_CHUNKS], bw[MAX_CHUNKS];
    static const double shapes[][3] = {{1, 1, 1}, {1, 1.5, 0.5}, {1, 0.5, 1.5}, {2, 1, 1}};
    int ran = 1;
    double bubble_uniform = -1, bubble_1f1b = -1, idle_formula = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0] && ran; k++) {
        for (int c = 0; c < p; c++) {
            /* uneven chunks too, for k > 0: the last chunk 30% longer */
            double scale = k > 0 && c == p - 1 ? 1.3 : 1.0;
            f[c] = shapes[k][0] * scale, bb[c] = shapes[k][1] * scale, bw[c] = shapes[k][2] * scale;
            b[c] = bb[c] + bw[c];
        }
        pp_sim_costs costs = {f, b, k == 3 ? 0.25 : 0.0, bb, bw};
        pp_sim_result r;
        ran = pp_sim_run(&s, &costs, &r, sim_err, sizeof sim_err) == 0;
        if (ran && k == 0) {
            bubble_uniform = r.bubble;
            idle_formula = 0;
            for (int q = 0; q < p; q++) idle_formula = fmax(idle_formula, fabs(r.idle[q] - (p - 1) * 1.0));
            pp_sim_result r1;
            if (pp_sim_run(&o, &costs, &r1, sim_err, sizeof sim_err) == 0) bubble_1f1b = r1.bubble;
            pp_sim_free(&r1);
        }
        pp_sim_free(&r);
    }
    int law = m < p || (fabs(bubble_uniform - pp_schedule_ideal_bubble(PP_ZB_H1, p, m, 1)) < 1e-9 && idle_formula < 1e-9);
    int better = p == 1 ? fabs(bubble_uniform) < 1e-12 : bubble_uniform < bubble_1f1b;
    CHECK(valid && order && ws && per_rank_ok && peak_zb == peak_1f1b && counts_ok && ran && law && better,
          "zb-h1 p=%d m=%d: valid (%s), F/B order is 1F1B's (%d), one W per mb (%d), peak in flight %g = "
          "1F1B's %g (ranks within: %d, counted: %d), simulates (%s), bubble %.4f (1F1B %.4f; m >= p: "
          "(p-1)/(3m+p-1) = %.4f, idle (p-1) F per rank: %d)",
          p, m, valid ? "ok" : err, order, ws, peak_zb, peak_1f1b, per_rank_ok, counts_ok, sim_err, bubble_uniform,
          bubble_1f1b, pp_schedule_ideal_bubble(PP_ZB_H1, p, m, 1), law);
    pp_schedule_free(&s);
    pp_schedule_free(&o);
}

static void test_zero_bubble(void) {
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 24; m++) check_zero_bubble(p, m);
    /* the paper's bubble with B != W: (p-1)(F+B-W) per rank (p = 4, m = 8, F = 1,
     * B = 1.5, W = 0.5: 6 of a makespan of 8 x 3 + 6 = 30) */
    pp_schedule s;
    char err[256];
    pp_schedule_build(&s, PP_ZB_H1, 4, 8, 1, err, sizeof err);
    double f[4] = {1, 1, 1, 1}, bb[4] = {1.5, 1.5, 1.5, 1.5}, bw[4] = {0.5, 0.5, 0.5, 0.5};
    pp_sim_costs costs = {f, NULL, 0, bb, bw};
    pp_sim_result r;
    int ran = pp_sim_run(&s, &costs, &r, err, sizeof err) == 0;
    CHECK(ran && fabs(r.makespan - 30) < 1e-9 && fabs(r.idle[0] - 6) < 1e-9 && fabs(r.idle[3] - 6) < 1e-9,
          "zb-h1 p=4 m=8 F=1 B=1.5 W=0.5: makespan %g (30), idle %g per rank ((p-1)(F+B-W) = 6)",
          ran ? r.makespan : -1, ran ? r.idle[0] : -1);
    pp_sim_free(&r);
    /* a W before its B is refused, as is a plain BACKWARD in a ZB-H1 list */
    for (int i = 0; i < s.n_actions[0]; i++)
        if (s.actions[0][i].op == PP_OP_BACKWARD_B) {
            int j = i;
            while (s.actions[0][j].op != PP_OP_BACKWARD_W || s.actions[0][j].mb != s.actions[0][i].mb) j++;
            pp_action t = s.actions[0][i];
            s.actions[0][i] = s.actions[0][j], s.actions[0][j] = t;
            CHECK(pp_schedule_validate(&s, err, sizeof err) != 0 && strstr(err, "before its BACKWARD_B"),
                  "a BACKWARD_W ahead of its BACKWARD_B is refused: %s", err);
            s.actions[0][j] = s.actions[0][i], s.actions[0][i] = t;
            s.actions[0][i].op = PP_OP_BACKWARD;
            CHECK(pp_schedule_validate(&s, err, sizeof err) != 0 && strstr(err, "BACKWARD chunk 0 mb 0 in a zb-h1"),
                  "a plain BACKWARD in a zb-h1 list is refused: %s", err);
            break;
        }
    pp_schedule_free(&s);
}

/* ---- golden bubbles, written out by hand ---- */

static void test_golden_bubble(void) {
    /* (p-1)/(m+p-1) as fractions, p in {2,4,8} x m in {4,8,16,32,64}. */
    static const struct { int p, m, num, den; } golden[] = {
        {2, 4, 1, 5},  {2, 8, 1, 9},  {2, 16, 1, 17}, {2, 32, 1, 33}, {2, 64, 1, 65},
        {4, 4, 3, 7},  {4, 8, 3, 11}, {4, 16, 3, 19}, {4, 32, 3, 35}, {4, 64, 3, 67},
        {8, 4, 7, 11}, {8, 8, 7, 15}, {8, 16, 7, 23}, {8, 32, 7, 39}, {8, 64, 7, 71},
    };
    for (size_t g = 0; g < sizeof golden / sizeof golden[0]; g++)
        for (int kind = PP_GPIPE; kind <= PP_1F1B; kind++) {
            int p = golden[g].p, m = golden[g].m;
            pp_schedule s;
            char err[256];
            double f[8];
            unit_costs(f, p);
            pp_sim_costs costs = {f, NULL, 0.0, NULL, NULL};
            pp_sim_result r;
            int ok = pp_schedule_build(&s, (pp_schedule_kind)kind, p, m, 1, err, sizeof err) == 0 &&
                     pp_sim_run(&s, &costs, &r, err, sizeof err) == 0;
            double want = (double)golden[g].num / golden[g].den;
            CHECK(ok && fabs(r.bubble - want) < 1e-9 && fabs(r.makespan - 3.0 * (m + p - 1)) < 1e-9,
                  "%s p=%d m=%d: bubble %.4f%% = %d/%d, step %g = 3(m+p-1)",
                  pp_schedule_kind_name((pp_schedule_kind)kind), p, m, ok ? 100 * r.bubble : -1,
                  golden[g].num, golden[g].den, ok ? r.makespan : -1);
            if (ok) pp_sim_free(&r);
            pp_schedule_free(&s);
        }
    CHECK(fabs(pp_schedule_ideal_bubble(PP_1F1B, 8, 32, 1) - 0.179487) < 1e-6, "p=8 m=32 -> 17.9%%");
}

/* ---- the simulator honours dependencies and message time ---- */

static int find_action(const pp_schedule *s, int r, pp_op op, int chunk, int mb) {
    for (int i = 0; i < s->n_actions[r]; i++) {
        const pp_action *a = &s->actions[r][i];
        if (a->op == op && a->chunk == chunk && a->mb == mb) return i;
    }
    return -1;
}

static void test_sim_dependencies(void) {
    /* Uneven chunk costs from a real partition, explicit backward, slow messages. */
    const int p = 4, v = 2, m = 8, n_units = 34;
    double unit[34];
    unit[0] = 0.3;
    for (int u = 1; u < n_units - 1; u++) unit[u] = 1.0 + 0.1 * (u % 3);
    unit[n_units - 1] = 4.0;
    int first[MAX_CHUNKS + 1];
    char err[512];
    CHECK(pp_partition(unit, n_units, p, v, first, err, sizeof err) == 0, "partition 32 blocks into 8 chunks");
    double fwd[8], bwd[8];
    for (int c = 0; c < p * v; c++) {
        fwd[c] = pp_partition_chunk_cost(unit, first, c);
        bwd[c] = 2.5 * fwd[c];
    }
    const double p2p = 0.75;
    for (int kind = PP_GPIPE; kind <= PP_INTERLEAVED; kind++) {
        int vv = kind == PP_INTERLEAVED ? v : 1;
        pp_schedule s;
        pp_sim_result r;
        double f1[4], b1[4];
        for (int k = 0; k < 4; k++) f1[k] = fwd[k], b1[k] = bwd[k];
        pp_sim_costs costs = {vv == 1 ? f1 : fwd, vv == 1 ? b1 : bwd, p2p, NULL, NULL};
        int ok = pp_schedule_build(&s, (pp_schedule_kind)kind, p, m, vv, err, sizeof err) == 0 &&
                 pp_sim_run(&s, &costs, &r, err, sizeof err) == 0;
        int deps_ok = ok, busy_ok = ok, order_ok = ok;
        int chunks = p * vv;
        for (int c = 0; ok && c < chunks; c++)
            for (int mb = 0; mb < m; mb++) {
                int rank = c % p, fi = find_action(&s, rank, PP_OP_FORWARD, c, mb);
                int bi = find_action(&s, rank, PP_OP_BACKWARD, c, mb);
                if (r.start[rank][bi] < r.end[rank][fi] - 1e-12) deps_ok = 0;
                if (c + 1 < chunks) { /* the next chunk needs this output, p2p later */
                    int nr = (c + 1) % p, nf = find_action(&s, nr, PP_OP_FORWARD, c + 1, mb);
                    int nb = find_action(&s, nr, PP_OP_BACKWARD, c + 1, mb);
                    if (r.start[nr][nf] < r.end[rank][fi] + p2p - 1e-9) deps_ok = 0;
                    if (r.start[rank][bi] < r.end[nr][nb] + p2p - 1e-9) deps_ok = 0;
                }
            }
        for (int k = 0; ok && k < p; k++) {
            double want = 0;
            for (int c = k; c < chunks; c += p) want += m * (costs.forward[c] + costs.backward[c]);
            if (fabs(r.busy[k] - want) > 1e-9 || fabs(r.busy[k] + r.idle[k] - r.makespan) > 1e-9)
                busy_ok = 0;
            for (int i = 1; i < s.n_actions[k]; i++)
                if (r.start[k][i] < r.end[k][i - 1] - 1e-12) order_ok = 0;
        }
        CHECK(ok && deps_ok && busy_ok && order_ok,
              "%s with uneven chunks and p2p %.2f: every receive after its send + p2p, "
              "in-order ranks, busy = sum of chunk costs (%s)",
              pp_schedule_kind_name((pp_schedule_kind)kind), p2p, ok ? "ok" : err);
        if (ok) pp_sim_free(&r);
        pp_schedule_free(&s);
    }

    /* GPipe with message time d: the fill and the drain each pay (p-1) hops. */
    const int gp[][2] = {{2, 4}, {4, 8}, {8, 3}};
    for (int g = 0; g < 3; g++) {
        int pp = gp[g][0], mm = gp[g][1];
        pp_schedule s;
        pp_sim_result r;
        double f[8];
        unit_costs(f, pp);
        pp_sim_costs costs = {f, NULL, 0.5, NULL, NULL};
        int ok = pp_schedule_build(&s, PP_GPIPE, pp, mm, 1, err, sizeof err) == 0 &&
                 pp_sim_run(&s, &costs, &r, err, sizeof err) == 0;
        double want = 3.0 * (mm + pp - 1) + 2 * (pp - 1) * 0.5;
        CHECK(ok && fabs(r.makespan - want) < 1e-9, "gpipe p=%d m=%d p2p 0.5: step %g = 3(m+p-1) + 2(p-1)*0.5 = %g",
              pp, mm, ok ? r.makespan : -1, want);
        if (ok) pp_sim_free(&r);
        pp_schedule_free(&s);
    }
}

/* ---- hand-made schedules: deadlock and validation errors ---- */

/* 1F1B, p=2, m=1, built and then edited. */
static pp_schedule small_schedule(void) {
    pp_schedule s;
    char err[256];
    pp_schedule_build(&s, PP_1F1B, 2, 1, 1, err, sizeof err);
    return s;
}

static void expect_invalid(pp_schedule *s, const char *what, const char *needle) {
    char err[512] = "";
    int rc = pp_schedule_validate(s, err, sizeof err);
    CHECK(rc != 0 && strstr(err, needle), "validate rejects %s: %s", what, err);
}

static void test_deadlock_and_validation(void) {
    pp_schedule s = small_schedule();
    char err[512] = "";
    /* Rank 0: FORWARD, SEND_ACT, RECV_GRAD, BACKWARD. Move RECV_GRAD first: the
     * structure stays valid but each rank then waits for the other. */
    CHECK(s.n_actions[0] == 4 && s.actions[0][2].op == PP_OP_RECV_GRAD, "rank 0 list as expected");
    pp_action recv = s.actions[0][2];
    s.actions[0][2] = s.actions[0][1];
    s.actions[0][1] = s.actions[0][0];
    s.actions[0][0] = recv;
    CHECK(pp_schedule_validate(&s, err, sizeof err) == 0, "reordered receive is structurally valid: %s", err);
    double f[2] = {1, 1};
    pp_sim_costs costs = {f, NULL, 0, NULL, NULL};
    pp_sim_result r;
    int rc = pp_sim_run(&s, &costs, &r, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "deadlock") && strstr(err, "rank 0") && strstr(err, "rank 1"),
          "simulator reports the deadlock: %s", err);
    pp_sim_free(&r);
    pp_schedule_free(&s);

    s = small_schedule();
    s.n_actions[1]--; /* drop rank 1's SEND_GRAD */
    expect_invalid(&s, "a missing send", "never runs SEND_GRAD");
    pp_schedule_free(&s);

    s = small_schedule();
    s.actions[0][3] = s.actions[0][0]; /* FORWARD twice, no BACKWARD */
    expect_invalid(&s, "a duplicate forward", "twice");
    pp_schedule_free(&s);

    s = small_schedule();
    s.actions[0][0].chunk = 1;
    expect_invalid(&s, "a chunk on the wrong rank", "runs on rank 1");
    pp_schedule_free(&s);

    s = small_schedule();
    s.actions[0][1].peer = 0;
    expect_invalid(&s, "a wrong peer", "expected 1");
    pp_schedule_free(&s);

    s = small_schedule();
    pp_action b = s.actions[0][3]; /* BACKWARD before FORWARD */
    s.actions[0][3] = s.actions[0][0];
    s.actions[0][0] = b;
    expect_invalid(&s, "a backward before its forward", "before its FORWARD");
    pp_schedule_free(&s);
}

static void test_build_errors(void) {
    pp_schedule s;
    char err[512] = "";
    int rc = pp_schedule_build(&s, PP_INTERLEAVED, 4, 6, 2, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "multiple of parallel.pp 4") && strstr(err, "try 8 or 4"),
          "interleaved with m %% p != 0: %s", err);
    pp_schedule_free(&s);
    rc = pp_schedule_build(&s, PP_1F1B, 4, 8, 2, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "virtual_stages"), "1f1b with v = 2: %s", err);
    pp_schedule_free(&s);
    rc = pp_schedule_build(&s, PP_GPIPE, 0, 8, 1, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "out of range"), "p = 0: %s", err);
    pp_schedule_free(&s);
    rc = pp_schedule_build(&s, PP_GPIPE, 2, 0, 1, err, sizeof err);
    CHECK(rc != 0, "m = 0 rejected: %s", err);
    pp_schedule_free(&s);
    double f[2] = {1, -1};
    pp_sim_costs costs = {f, NULL, 0, NULL, NULL};
    pp_sim_result r;
    pp_schedule_build(&s, PP_1F1B, 2, 2, 1, err, sizeof err);
    rc = pp_sim_run(&s, &costs, &r, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "chunk 1"), "negative cost rejected: %s", err);
    pp_sim_free(&r);
    pp_schedule_free(&s);
}

/* ---- activations in flight ---- */

static void test_in_flight(void) {
    pp_schedule s;
    char err[256];
    pp_schedule_build(&s, PP_INTERLEAVED, 4, 8, 2, err, sizeof err);
    /* Weighted by chunk: one per pair again when every weight is 1; a chunk weighted
     * 0 removes exactly that chunk's share. */
    double ones[8], only_local0[8];
    for (int c = 0; c < 8; c++) ones[c] = 1.0, only_local0[c] = c < 4 ? 1.0 : 0.0;
    int ok = 1, chunk_ok = 1;
    for (int r = 0; r < 4; r++) {
        if (pp_schedule_peak_in_flight(&s, r, ones) != pp_schedule_peak_in_flight(&s, r, NULL)) ok = 0;
        /* Local chunk 0 of rank r holds at most m microbatches, and its peak alone
         * matches the weighted count. */
        int c0 = pp_chunk_id(r, 0, 4);
        if (pp_schedule_peak_in_flight(&s, r, only_local0) != pp_schedule_peak_in_flight_chunk(&s, c0) ||
            pp_schedule_peak_in_flight_chunk(&s, c0) > 8)
            chunk_ok = 0;
    }
    CHECK(ok, "weighted peak with unit weights = counted peak");
    CHECK(chunk_ok, "per-chunk peak = peak weighted to that chunk alone");
    /* Interleaved rank 0 holds more than 1F1B's p: the price of a smaller bubble. */
    CHECK(pp_schedule_peak_in_flight(&s, 0, NULL) == 11, "interleaved p=4 m=8 v=2 rank 0 peak 11 chunk-microbatches (1f1b: 4)");
    pp_schedule_free(&s);
}

/* ---- the picture ---- */

static void test_print(void) {
    pp_schedule s;
    pp_sim_result r;
    char err[256];
    double f[8];
    unit_costs(f, 8);
    pp_sim_costs costs = {f, NULL, 0, NULL, NULL};
    pp_schedule_build(&s, PP_1F1B, 8, 32, 1, err, sizeof err);
    int ok = pp_sim_run(&s, &costs, &r, err, sizeof err) == 0;
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    pp_sim_print(mem, &s, &r, 100);
    fclose(mem);
    int rows = 0, widths_ok = 1, idle_ok = 1;
    for (const char *line = text; (line = strstr(line, "  rank ")); line++) {
        const char *bar = strchr(line, '|'), *bar2 = bar ? strchr(bar + 1, '|') : NULL;
        if (!bar2 || bar2 - bar - 1 != 100) { widths_ok = 0; break; }
        int dots = 0;
        for (const char *c = bar + 1; c < bar2; c++) dots += *c == '.';
        if (fabs(dots / 100.0 - r.idle[rows] / r.makespan) > 0.03) idle_ok = 0;
        rows++;
    }
    CHECK(ok && rows == 8 && widths_ok, "picture: 8 rows of 100 columns");
    CHECK(idle_ok, "picture: idle columns match each rank's idle share within 3%%");
    CHECK(strstr(text, "bubble 17.9%") != NULL, "picture ends with the bubble line (17.9%%)");
    free(text);
    pp_sim_free(&r);
    pp_schedule_free(&s);

    /* p=4 m=8 takes 33 time units: at 99 columns each unit is 3 columns exactly. */
    pp_schedule_build(&s, PP_1F1B, 4, 8, 1, err, sizeof err);
    ok = pp_sim_run(&s, &costs, &r, err, sizeof err) == 0;
    mem = open_memstream(&text, &len);
    pp_sim_print(mem, &s, &r, 99);
    fclose(mem);
    CHECK(ok && strstr(text, "rank 0   |000111222333..................aaaaaa444bbbbbb555cccccc666dddddd777eeeeee..."
                             "ffffff...gggggg...hhhhhh|"),
          "rank 0 of 1f1b p=4 m=8: 4 warmup forwards, wait 6, then B0 F4 B1 ... and the drain");
    CHECK(strstr(text, "rank 3   |.........000aaaaaa111bbbbbb"), "rank 3 waits 3 units, then F0 B0 F1 B1 ...");
    free(text);
    pp_sim_free(&r);
    pp_schedule_free(&s);
}

/* ---- partition ---- */

static double max_chunk(const double *cost, const int *first, int chunks) {
    double mx = 0;
    for (int c = 0; c < chunks; c++) {
        double x = pp_partition_chunk_cost(cost, first, c);
        if (x > mx) mx = x;
    }
    return mx;
}

/* Least possible maximum over every valid split, by enumeration (small cases). */
static double brute_force(const double *cost, int n_units, int chunks, int *cut, int k, double so_far) {
    int L = n_units - 2;
    if (k == chunks) {
        cut[chunks] = n_units;
        double last = 0;
        for (int u = cut[chunks - 1]; u < n_units; u++) last += cost[u];
        return so_far > last ? so_far : last;
    }
    double best = INFINITY;
    /* Cut k starts chunk k: chunk k-1 keeps a block, chunks k.. keep one each. */
    int prev_first_block = cut[k - 1] > 1 ? cut[k - 1] : 1;
    for (int b = prev_first_block + 1; b <= L + 1 - (chunks - k); b++) {
        double c = 0;
        for (int u = cut[k - 1]; u < b; u++) c += cost[u];
        cut[k] = b;
        double x = brute_force(cost, n_units, chunks, cut, k + 1, so_far > c ? so_far : c);
        if (x < best) best = x;
    }
    return best;
}

static int split_is_legal(const int *first, int n_units, int chunks) {
    if (first[0] != 0 || first[chunks] != n_units) return 0;
    for (int c = 0; c < chunks; c++) {
        int b0 = first[c] > 1 ? first[c] : 1, b1 = first[c + 1] < n_units - 1 ? first[c + 1] : n_units - 1;
        if (b1 - b0 < 1) return 0; /* at least one block */
    }
    return 1;
}

static void test_partition(void) {
    int first[MAX_CHUNKS + 1];
    char err[512] = "";

    double even[10] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 0}; /* L = 8 */
    int rc = pp_partition(even, 10, 4, 1, first, err, sizeof err);
    CHECK(rc == 0 && first[0] == 0 && first[1] == 3 && first[2] == 5 && first[3] == 7 && first[4] == 10,
          "8 equal blocks on 4 ranks: 2 blocks each, embedding with the first, head with the last");

    /* GPT-2-like: the LM head weighs ~5.45 blocks, embedding 0.1. */
    double heavy[14];
    heavy[0] = 0.1;
    for (int u = 1; u <= 12; u++) heavy[u] = 1.0;
    heavy[13] = 5.45;
    rc = pp_partition(heavy, 14, 4, 1, first, err, sizeof err);
    CHECK(rc == 0 && first[3] == 12 && first[4] == 14 && fabs(max_chunk(heavy, first, 4) - 6.45) < 1e-12,
          "heavy head: last rank gets one block + head (max 6.45)");
    CHECK(rc == 0 && first[1] == 4 && first[2] == 8,
          "heavy head: the other 11 blocks split 3/4/4 (embedding's chunk takes fewer), got %d %d %d",
          first[1], first[2], first[3]);

    /* Interleaved: 4 chunks on 2 ranks over 8 equal blocks -> 2 blocks each. */
    rc = pp_partition(even, 10, 2, 2, first, err, sizeof err);
    CHECK(rc == 0 && first[1] == 3 && first[2] == 5 && first[3] == 7 && pp_chunk_rank(3, 2) == 1 &&
              pp_chunk_local(3, 2) == 1 && pp_chunk_id(1, 1, 2) == 3,
          "pp=2 v=2: 4 chunks of 2 blocks, chunk 3 is rank 1's second chunk");

    /* Exactly optimal against enumeration, on pseudo-random costs. */
    unsigned state = 12345u;
    int optimal = 1, legal = 1, deterministic = 1, cases = 0;
    for (int L = 1; L <= 10; L++)
        for (int chunks = 1; chunks <= 4 && chunks <= L; chunks++)
            for (int trial = 0; trial < 4; trial++) {
                double cost[12];
                for (int u = 0; u < L + 2; u++) {
                    state = state * 1103515245u + 12345u;
                    cost[u] = (double)((state >> 16) % 1000) / 100.0;
                }
                int again[MAX_CHUNKS + 1], cut[8] = {0};
                if (pp_partition(cost, L + 2, chunks, 1, first, err, sizeof err) != 0 ||
                    pp_partition(cost, L + 2, chunks, 1, again, err, sizeof err) != 0) {
                    optimal = 0;
                    continue;
                }
                cases++;
                if (memcmp(first, again, sizeof(int) * (size_t)(chunks + 1)) != 0) deterministic = 0;
                if (!split_is_legal(first, L + 2, chunks)) legal = 0;
                double want = chunks == 1 ? max_chunk(cost, (int[]){0, L + 2}, 1)
                                          : brute_force(cost, L + 2, chunks, cut, 1, 0.0);
                if (fabs(max_chunk(cost, first, chunks) - want) > 1e-9) optimal = 0;
            }
    CHECK(optimal && cases > 100, "max chunk cost equals the enumerated optimum (%d cases)", cases);
    CHECK(legal, "embedding in chunk 0, head in the last, a block in every chunk");
    CHECK(deterministic, "same input, same split");

    rc = pp_partition(even, 10, 4, 3, first, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "12 chunks") && strstr(err, "has 8"), "too few blocks: %s", err);
    double bad[10] = {0, 1, 1, -1, 1, 1, 1, 1, 1, 0};
    rc = pp_partition(bad, 10, 2, 1, first, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "unit 3"), "negative cost: %s", err);
    bad[3] = NAN;
    rc = pp_partition(bad, 10, 2, 1, first, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "unit 3"), "NaN cost: %s", err);
    rc = pp_partition(even, 10, 0, 1, first, err, sizeof err);
    CHECK(rc != 0, "pp = 0: %s", err);
}

int main(void) {
    test_all_schedules();
    test_golden_bubble();
    test_zero_bubble();
    test_sim_dependencies();
    test_deadlock_and_validation();
    test_build_errors();
    test_in_flight();
    test_print();
    test_partition();
    CHECK_DONE();
}
