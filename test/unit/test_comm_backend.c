/* test_comm_backend.c — how the comm layer and the engine pick their backends
 * (runtime/comm/comm_nccl.h, kernels/backend.c dt_ops_select, train.device),
 * on a machine without a usable GPU (make test hides GPUs: test/run.sh):
 *   - DTRUN_COMM_BACKEND: auto and cpu keep the CPU transports, a bad value
 *     and nccl without a GPU fail at once with one line naming the reason,
 *     on every rank of a two-process world too (no hang, no partial world);
 *   - dt_ops_select: auto and cpu give the CPU table, cuda is one line;
 *   - the engine: train.device cuda without a GPU fails with that line. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "lib/job/jobspec.h"
#include "runtime/env.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/store.h"
#include "runtime/worker/engine.h"
#include "test/unit/check.h"

static void test_env_choice(void)
{
    char err[600];
    comm *w = NULL;
    setenv("DTRUN_COMM_BACKEND", "gloo", 1);
    dt_env_reload();
    int rc = comm_world_init_with(&w, NULL, 0, 1, NULL, err, sizeof err);
    CHECK(rc == COMM_EINVAL && !w && strstr(err, "DTRUN_COMM_BACKEND=gloo") &&
              strstr(err, "auto, nccl or cpu") && !strchr(err, '\n'),
          "a bad DTRUN_COMM_BACKEND is one line: %s", err);

    setenv("DTRUN_COMM_BACKEND", "nccl", 1);
    dt_env_reload();
    rc = comm_world_init_with(&w, NULL, 0, 1, NULL, err, sizeof err);
    CHECK(rc == COMM_EINVAL && !w && strstr(err, "cannot use NCCL") &&
              (strstr(err, "no CUDA device in use") || strstr(err, "built without CUDA")) &&
              !strchr(err, '\n'),
          "DTRUN_COMM_BACKEND=nccl without a GPU in use says why: %s", err);

    const char *keep[] = {"cpu", "auto", ""};
    for (int i = 0; i < 3; i++) {
        setenv("DTRUN_COMM_BACKEND", keep[i], 1);
        dt_env_reload();
        rc = comm_world_init_with(&w, NULL, 0, 1, NULL, err, sizeof err);
        CHECK(rc == COMM_OK && !strcmp(comm_transport(w), "self"),
              "DTRUN_COMM_BACKEND='%s': a world of one is self (%s)", keep[i], rc ? err : "");
        if (w) comm_destroy(w);
        w = NULL;
    }
    unsetenv("DTRUN_COMM_BACKEND");
    dt_env_reload();
}

/* Two processes through a file store: each rank's world init answers rc and
 * transport through its exit status (0 = as expected). */
static int two_ranks(const char *backend, int want_rc, const char *want_transport, const char *want_text)
{
    char dir[] = "/tmp/dtrun-test-comm-backend.XXXXXX";
    if (!mkdtemp(dir)) return -1;
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        if ((pid[r] = fork()) == 0) {
            char err[600];
            comm_store *st = store_file_open(dir, err, sizeof err);
            if (!st) _exit(3);
            setenv("DTRUN_COMM_BACKEND", backend, 1);
            setenv("DTRUN_COMM_TIMEOUT", "20", 1);
            dt_env_reload();
            comm *w = NULL;
            int rc = comm_world_init_with(&w, st, r, 2, "node0", err, sizeof err);
            int ok = rc == want_rc;
            if (ok && w) ok = !strcmp(comm_transport(w), want_transport) && comm_barrier(w) == COMM_OK;
            if (ok && !w) ok = strstr(err, want_text) && !strchr(err, '\n');
            if (!ok) printf("# rank %d: rc %d: %s\n", r, rc, rc ? err : comm_transport(w));
            fflush(stdout);
            if (w) comm_destroy(w);
            store_close(st);
            _exit(ok ? 0 : 1);
        }
    }
    int bad = 0;
    for (int r = 0; r < 2; r++) {
        int status = 0;
        /* the timeout of 20 s bounds each rank; the alarm catches a hang */
        alarm(60);
        if (waitpid(pid[r], &status, 0) != pid[r] || !WIFEXITED(status) || WEXITSTATUS(status)) bad++;
        alarm(0);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    return bad;
}

static void test_two_ranks(void)
{
    int bad = two_ranks("auto", COMM_OK, "shm", NULL);
    CHECK(bad == 0, "auto on two CPU ranks of a node keeps shm (%d ranks wrong)", bad);
    bad = two_ranks("nccl", COMM_EINVAL, NULL, "cannot use NCCL");
    CHECK(bad == 0, "nccl forced on two ranks without GPUs: both fail with one line (%d ranks wrong)", bad);
}

static void test_ops_select(void)
{
    char err[300] = "";
    CHECK(dt_ops_select(DT_DEVICE_CPU, 3, err, sizeof err) == &dt_ops_cpu, "device cpu: the CPU table");
    if (dt_ops_cuda()) {
        printf("# a CUDA device is visible: the no-GPU checks below are skipped\n");
        return;
    }
    CHECK(dt_ops_select(DT_DEVICE_AUTO, 0, err, sizeof err) == &dt_ops_cpu, "device auto without a GPU: cpu");
    const dt_ops *o = dt_ops_select(DT_DEVICE_CUDA, 0, err, sizeof err);
    CHECK(!o && strstr(err, "train.device is cuda") && !strchr(err, '\n'), "device cuda without a GPU: %s", err);

    job_spec job;
    const char *yaml = "model: {kind: gpt, n_layer: 1, n_head: 2, d_model: 16, vocab_size: 32, seq_len: 8}\n"
                       "data: {kind: synthetic, synthetic_size: 64}\n"
                       "train: {steps: 1, global_batch: 2, micro_batch: 2, device: cuda, threads: 1}\n"
                       "log: {progress: off}\n";
    if (job_load_string(&job, yaml, strlen(yaml), "t.yaml", err, sizeof err) != 0) {
        CHECK(0, "job loads: %s", err);
        return;
    }
    CHECK(job.train.device == DEVICE_CUDA && !strcmp(job_device_name(job.train.device), "cuda"),
          "train.device: cuda parses");
    int code = 0;
    engine *e = engine_create(&job, &code, err, sizeof err);
    CHECK(!e && strstr(err, "t.yaml") && strstr(err, "train.device is cuda") && !strchr(err, '\n'),
          "engine with train.device cuda and no GPU: one line (exit %d): %s", code, err);
    if (e) engine_destroy(e);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    unsetenv("RANK"), unsetenv("WORLD_SIZE");
    dt_env_reload();
    test_env_choice();
    test_two_ranks();  /* forks: before anything could touch a GPU */
    test_ops_select();
    CHECK_DONE();
}
