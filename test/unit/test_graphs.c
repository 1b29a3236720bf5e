/* test_graphs.c — what train.cuda_graphs accepts beyond one process, and
 * where it refuses (runtime/worker/engine_graph.c, lib/job/jobspec_layout.c).
 *
 * 1. The job checks: dp, tp and cp of 2 (and dp: auto) load with the key,
 *    pp 2 and train.offload are refused with one line naming the key and
 *    what to set instead (FILE:LINE:COL from job_load_string).
 * 2. The set-up check (engine_graph_check) on the facts a worker finds:
 *    several ranks on a backend that records (cuda) need the world on NCCL;
 *    the CPU transports (shm, tcp) are refused there with one line naming
 *    the transport, NCCL and the key to turn off; HSDP's cross-node
 *    all-reduce in another type than the gradients' is refused; on a
 *    backend that records nothing (cpu) nothing is refused, so the CPU runs
 *    of test/integration/cuda_graphs.sh stay possible.
 * 3. comm_wait_device on the CPU transports answers at once (nothing of
 *    theirs is left on the device).
 * What this cannot show (no GPU here): NCCL's collectives recorded into a
 * graph and replayed; test/gpu/graphs_ranks.sh does that on a GPU machine. */
#include <stdio.h>
#include <string.h>

#include "lib/job/jobspec.h"
#include "runtime/comm/comm.h"
#include "runtime/worker/engine_internal.h"
#include "test/unit/check.h"

static const char *base =
    "model: {kind: gpt, n_layer: 2, n_head: 4, d_model: 32, vocab_size: 64, seq_len: 16}\n"
    "data: {kind: synthetic}\n"
    "train: {steps: 2, global_batch: 8, micro_batch: 2, cuda_graphs: true%s}\n"
    "parallel: {%s}\n";

/* 0 when the job loads; else -1 with the line in err. */
static int load(const char *train_extra, const char *parallel, char *err, size_t errlen)
{
    char text[1024];
    snprintf(text, sizeof text, base, train_extra, parallel);
    job_spec job;
    return job_load_string(&job, text, strlen(text), "g.yaml", err, errlen) == 0 ? 0 : -1;
}

static void test_job_checks(void)
{
    const char *fine[] = {"dp: 2", "tp: 2", "cp: 2", "dp: 2, mode: zero1", "dp: 2, mode: zero2",
                          "dp: 2, mode: fsdp", "dp: 4, mode: hsdp", "dp: 2, tp: 2, sequence_parallel: true",
                          "dp: auto"};
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        char err[1024] = "";
        CHECK(load("", fine[i], err, sizeof err) == 0, "cuda_graphs with parallel {%s} loads%s%s", fine[i],
              *err ? ": " : "", err);
    }
    char err[1024] = "";
    int rc = load("", "pp: 2", err, sizeof err);
    CHECK(rc != 0 && strstr(err, "g.yaml:") && strstr(err, "parallel.pp 2") && strstr(err, "train.cuda_graphs") &&
              strstr(err, "set parallel.pp: 1") && strstr(err, "or train.cuda_graphs: false") && !strchr(err, '\n'),
          "cuda_graphs with pp 2 is refused in one line at the key: %s", err);
    err[0] = '\0';
    rc = load(", offload: [optimizer]", "dp: 1", err, sizeof err);
    CHECK(rc != 0 && strstr(err, "train.offload") && strstr(err, "train.cuda_graphs") && !strchr(err, '\n'),
          "cuda_graphs with train.offload is refused in one line: %s", err);
}

static void test_setup_check(void)
{
    char why[1024];
    engine_graph_facts cpu = {.world_size = 2, .records = 0, .transport = "shm", .hsdp_replicas = 2,
                              .hsdp_converts = 1};
    CHECK(engine_graph_check(&cpu, why, sizeof why) == 0,
          "the cpu backend records nothing: 2 ranks over shm, HSDP converting, all accepted");
    const char *cpu_transports[] = {"shm", "tcp"};
    for (int i = 0; i < 2; i++) {
        engine_graph_facts f = {.world_size = 2, .records = 1, .transport = cpu_transports[i], .hsdp_replicas = 1};
        why[0] = '\0';
        int rc = engine_graph_check(&f, why, sizeof why);
        char named[64];
        snprintf(named, sizeof named, "over %s", cpu_transports[i]);
        CHECK(rc != 0 && strstr(why, named) && strstr(why, "NCCL") && strstr(why, "train.cuda_graphs: false") &&
                  strstr(why, "DTRUN_COMM_BACKEND") && !strchr(why, '\n'),
              "cuda, 2 ranks on the %s transport: refused in one line: %s", cpu_transports[i], why);
    }
    engine_graph_facts nccl = {.world_size = 8, .records = 1, .transport = "nccl", .hsdp_replicas = 1};
    CHECK(engine_graph_check(&nccl, why, sizeof why) == 0, "cuda, 8 ranks on NCCL: accepted");
    engine_graph_facts one = {.world_size = 1, .records = 1, .transport = "self", .hsdp_replicas = 1};
    CHECK(engine_graph_check(&one, why, sizeof why) == 0, "cuda, one process: accepted");
    engine_graph_facts hsdp = {.world_size = 4, .records = 1, .transport = "nccl", .hsdp_replicas = 2,
                               .hsdp_converts = 1};
    why[0] = '\0';
    int rc = engine_graph_check(&hsdp, why, sizeof why);
    CHECK(rc != 0 && strstr(why, "HSDP") && strstr(why, "parallel.reduce_dtype") && !strchr(why, '\n'),
          "cuda, HSDP across nodes reducing in another type: refused in one line: %s", why);
    hsdp.hsdp_converts = 0;
    CHECK(engine_graph_check(&hsdp, why, sizeof why) == 0, "cuda, HSDP across nodes in the gradients' type: accepted");
    hsdp.hsdp_converts = 1, hsdp.hsdp_replicas = 1;
    CHECK(engine_graph_check(&hsdp, why, sizeof why) == 0,
          "cuda, HSDP within a node (no replicas) reducing in another type: accepted");
}

static void test_device_wait_cpu(void)
{
    comm *w = NULL;
    char err[256];
    int rc = comm_world_init_with(&w, NULL, 0, 1, NULL, err, sizeof err);
    CHECK(rc == COMM_OK && comm_wait_device(w, "a test") == COMM_OK,
          "comm_wait_device on a CPU world (%s) answers COMM_OK at once", w ? comm_transport(w) : "none");
    if (w) comm_destroy(w);
}

int main(void)
{
    test_job_checks();
    test_setup_check();
    test_device_wait_cpu();
    CHECK_DONE();
}
