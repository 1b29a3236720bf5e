/* dryrun_report.h — the pieces of the dry-run report shared by the text printer,
 * the JSON printer and the planner. */
#ifndef DTRUN_PLAN_DRYRUN_REPORT_H
#define DTRUN_PLAN_DRYRUN_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "runtime/plan/estimate.h"
#include "runtime/plan/machine.h"

const char *plan_group_name(plan_group g); /* "dp", "dp-replica", "tp", "pp", "embed", "cp" */
/* "0-20", or with virtual stages "0-10,41-50": the units pp rank p holds. */
void plan_stage_units(const plan_estimate *e, int p, char *out, size_t n);
void plan_print_warnings(const plan_estimate *e, FILE *out);
/* "4.28 GB free on each rank, 5 % of its 85.5 GB (headroom_percent of the
 * h100-sxm profile; --headroom to change)": the headroom a plan keeps. */
void plan_headroom_text(const hw_profile *hw, double device, char *out, size_t n);
/* root as one JSON document on out, then freed (NULL: cJSON ran out of memory
 * building it). 0, or -1 with "WHO: out of memory building the JSON report". */
struct cJSON;
int plan_json_write(struct cJSON *root, const char *who, FILE *out, char *err, size_t errlen);
/* The whole report as one JSON document on out. 0, or -1 with err. */
int dryrun_print_json(const plan_estimate *e, const plan_machine *pm, FILE *out, char *err, size_t errlen);

#endif
