/* test_trace.c — the span recorder and the merge of `--trace` (trace.h) without
 * processes: part names, what a part holds, unit spans that never overlap, the
 * merge of ranks on one host (clock kept) and on two hosts (aligned on the
 * barrier's instant), a missing rank named and left out, parts deleted. cJSON
 * reads the results back. Real runs: test/integration/parallel_trace.sh. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/env.h"
#include "runtime/parallel/trace.h"
#include "test/unit/check.h"

static cJSON *load(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return cJSON_Parse(buf);
}

/* The "X" events of pid whose name starts with prefix: count, and the first's ts. */
static int spans(const cJSON *root, int pid, const char *prefix, double *ts)
{
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents"))
    {
        const cJSON *ph = cJSON_GetObjectItem(e, "ph"), *name = cJSON_GetObjectItem(e, "name");
        if (strcmp(ph->valuestring, "X") || cJSON_GetObjectItem(e, "pid")->valueint != pid ||
            strncmp(name->valuestring, prefix, strlen(prefix)))
            continue;
        if (n++ == 0 && ts) *ts = cJSON_GetObjectItem(e, "ts")->valuedouble;
    }
    return n;
}

/* One rank's recording: a step with two units forward, a collective and a wait. */
static void record(const char *path, int rank, double base, double sync)
{
    char err[256] = "";
    CHECK(trace_open(path, rank, "dp=2 tp=1 pp=1 ddp", err, sizeof err) == 0 && trace_on(), "rank %d opens", rank);
    trace_span(TRACE_STEP, base, base + 0.010, "step %d", 1);
    trace_span(TRACE_COMPUTE, base + 0.001, base + 0.002, "fwd unit %d", 0);
    trace_span(TRACE_COMM, base + 0.002, base + 0.003, "%s", "ddp all_reduce \"quoted\"");
    trace_span(TRACE_IDLE, base + 0.004, base + 0.005, "wait: RECV_ACT chunk %d mb %d", 1, 0);
    CHECK(trace_write_part(sync, err, sizeof err) == 0, "rank %d writes its part: %s", rank, err[0] ? err : "ok");
    trace_close();
    CHECK(!trace_on(), "closed");
}

int main(void)
{
    char dir[] = "/tmp/dtrun-test-trace.XXXXXX", path[512], part[600], err[256] = "", note[64];
    if (!mkdtemp(dir)) return 1;

    trace_part_path("/x/run.json", 3, part, sizeof part);
    CHECK(!strcmp(part, "/x/run.rank3.json"), "part of run.json: %s", part);
    trace_part_path("/x/run", 0, part, sizeof part);
    CHECK(!strcmp(part, "/x/run.rank0.json"), "part of a name without .json: %s", part);

    job_spec job;
    memset(&job, 0, sizeof job);
    snprintf(job.log.trace, sizeof job.log.trace, "from-job.json");
    unsetenv("DTRUN_TRACE");
    dt_env_reload();
    CHECK(!strcmp(trace_path_for(&job), "from-job.json"), "log.trace without DTRUN_TRACE");
    setenv("DTRUN_TRACE", "/abs/flag.json", 1);
    dt_env_reload(); /* the environment is read once (runtime/env.h) */
    CHECK(!strcmp(trace_path_for(&job), "/abs/flag.json"), "DTRUN_TRACE (--trace) over log.trace");
    unsetenv("DTRUN_TRACE");
    dt_env_reload();

    /* Off: every call is a no-op. */
    trace_span(TRACE_COMM, 1, 2, "nothing");
    trace_unit_open(1, 0);
    CHECK(!trace_on() && trace_write_part(0, err, sizeof err) == 0, "no trace open: nothing recorded or written");

    /* Unit spans: the next unit's open closes the previous one. */
    snprintf(path, sizeof path, "%s/units.json", dir);
    CHECK(trace_open(path, 0, "one", err, sizeof err) == 0, "open");
    trace_unit_open(1, 0);
    trace_unit_open(2, 0);
    trace_unit_close();
    trace_unit_close(); /* nothing open: no span */
    trace_unit_open(2, 1);
    trace_step_begin(1);
    trace_step_end();
    CHECK(trace_write_part(0, err, sizeof err) == 0, "unit spans written");
    trace_close();
    CHECK(trace_merge(path, 1, note, sizeof note, err, sizeof err) == 0 && !note[0], "one rank merged");
    cJSON *u = load(path);
    double t1 = -1, t2 = -1;
    CHECK(u && spans(u, 0, "fwd unit 1", &t1) == 1 && spans(u, 0, "fwd unit 2", &t2) == 1 && t2 >= t1,
          "fwd unit 1, then fwd unit 2");
    CHECK(u && spans(u, 0, "bwd unit 2", NULL) == 0 && spans(u, 0, "step 1", NULL) == 1,
          "a span still open at the write is not written; the step span is");
    cJSON_Delete(u);

    /* Two ranks on this host: times kept, shifted so the run starts at 0. */
    snprintf(path, sizeof path, "%s/two.json", dir);
    record(path, 0, 1000.0, 2000.0);
    record(path, 1, 1000.5, 2000.0);
    CHECK(trace_merge(path, 2, note, sizeof note, err, sizeof err) == 0 && !note[0], "two ranks merged: %s", err[0] ? err : "ok");
    cJSON *m = load(path);
    double a = -1, b = -1;
    CHECK(m != NULL, "the merged file is JSON");
    CHECK(m && spans(m, 0, "step", &a) == 1 && spans(m, 1, "step", &b) == 1 && a == 0 && b > 499999 && b < 500001,
          "one host: rank 1 starts 0.5 s after rank 0 (%g, %g us)", a, b);
    CHECK(m && spans(m, 1, "ddp all_reduce \"quoted\"", NULL) == 1, "names are escaped and read back");
    trace_part_path(path, 0, part, sizeof part);
    CHECK(access(part, F_OK) != 0, "parts deleted after the merge");
    cJSON_Delete(m);

    /* Two hosts: rank 1's part says another host, whose clock reads 100 s more
     * at the barrier's instant; a missing rank 2 is named. */
    snprintf(path, sizeof path, "%s/hosts.json", dir);
    record(path, 0, 1000.0, 2000.0);
    trace_part_path(path, 1, part, sizeof part);
    FILE *f = fopen(part, "w");
    fprintf(f, "{\"traceEvents\":[\n{\"ph\":\"X\",\"pid\":1,\"tid\":3,\"cat\":\"step\",\"name\":\"step 1\","
               "\"ts\":%.3f,\"dur\":10000}\n],\"otherData\":{\"rank\":1,\"host\":\"elsewhere\",\"sync_us\":%.3f}}\n",
            1100.25e6, 2100e6);
    fclose(f);
    /* rank 3's part was cut short (no last line): incomplete, left out */
    trace_part_path(path, 3, part, sizeof part);
    f = fopen(part, "w");
    fprintf(f, "{\"traceEvents\":[\n{\"ph\":\"X\",\"pid\":3,\"tid\":3,\"name\":\"step 1\",\"ts\":1,\"dur\":1},\n{\"ph\":");
    fclose(f);
    CHECK(trace_merge(path, 4, note, sizeof note, err, sizeof err) == 0 && !strcmp(note, "2, 3"),
          "merged without rank 2 (missing) and 3 (cut short), named in the note (\"%s\")", note);
    CHECK(access(part, F_OK) == 0, "a part not merged is kept");
    m = load(path);
    CHECK(m && spans(m, 3, "step", NULL) == 0, "nothing of the cut part merged");
    CHECK(m && spans(m, 0, "step", &a) == 1 && spans(m, 1, "step", &b) == 1 && a == 0 && b > 249999 && b < 250001,
          "two hosts: aligned at the barrier, rank 1 starts 0.25 s after rank 0 (%g us)", b);
    cJSON_Delete(m);

    CHECK(trace_merge("/nonexistent-dir/t.json", 1, note, sizeof note, err, sizeof err) == -1 && strstr(err, "cannot write"),
          "an unwritable merge target is an error: %s", err);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    CHECK_DONE();
}
