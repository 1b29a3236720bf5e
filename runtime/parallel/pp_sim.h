/* pp_sim.h — run a pipeline schedule in simulated time.
 *
 * The dry-run's bubble is not a formula: it is this simulation of the very action
 * lists the engine executes (pp_schedule.h), with the caller's cost per chunk. Each
 * rank runs its list in order. FORWARD / BACKWARD take their chunk's cost. A send is
 * buffered and takes no time on the sender; the matching receive completes at the
 * later of "the rank reaches it" and "send start + p2p". Time spent waiting in a
 * receive, and after a rank's last action until the makespan, is idle.
 *
 * A schedule that cannot finish (every unfinished rank waits in a receive whose
 * send will never come) is reported as an error naming the waiting ranks, never a
 * hang. Pure: no I/O except pp_sim_print.
 */
#ifndef DTRUN_PP_SIM_H
#define DTRUN_PP_SIM_H

#include <stddef.h>
#include <stdio.h>
#include "runtime/parallel/pp_schedule.h"

typedef struct {
    const double *forward;  /* [p*v] time of one microbatch's forward through chunk c */
    const double *backward; /* [p*v], or NULL: twice the forward */
    double p2p;             /* send start to receive completion (latency + bytes / bandwidth) */
    /* ZB_H1's two halves of the backward: [p*v] each, or NULL: half of backward */
    const double *backward_b; /* BACKWARD_B, the input-gradient pass */
    const double *backward_w; /* BACKWARD_W, the weight-gradient pass */
} pp_sim_costs;

typedef struct {
    int p;
    double makespan;  /* from 0 to the end of the last action on any rank */
    double bubble;    /* mean over ranks of idle / makespan; 0 when makespan is 0 */
    double *busy;     /* [p] time in FORWARD and the backward passes */
    double *idle;     /* [p] makespan - busy */
    double **start;   /* [p][n_actions of the rank]: when each action began */
    double **end;     /*   and ended (a receive: when its tensor arrived) */
} pp_sim_result;

/* Validates the schedule (pp_schedule_validate), then simulates it. Returns 0, or -1
 * with one line in err (invalid schedule, bad cost, deadlock). Free the result with
 * pp_sim_free, also after a failure. */
int pp_sim_run(const pp_schedule *s, const pp_sim_costs *costs, pp_sim_result *out,
               char *err, size_t errlen);
/* The same for a schedule that already passed pp_schedule_validate (the sizing
 * layer validates each schedule it builds once and simulates it many times). A
 * schedule that would deadlock is still reported, not hung on. */
int pp_sim_run_validated(const pp_schedule *s, const pp_sim_costs *costs, pp_sim_result *out,
                         char *err, size_t errlen);
void pp_sim_free(pp_sim_result *r);

/* The picture of the timeline, about `width` columns of time (0: 100), one row per
 * rank: a forward shows its microbatch's last digit, a backward (or ZB-H1's B) the
 * letter a..j for the digit 0..9 (so "3" then "d" is microbatch 3 going down and
 * back up), ZB-H1's W the capital A..J, '.' idle; then a legend, per-rank busy and
 * idle, and the bubble line. */
void pp_sim_print(FILE *f, const pp_schedule *s, const pp_sim_result *r, int width);

#endif
