/* test_env.c — the worker's environment, read once (runtime/env.h):
 *   - unset (or empty) variables give the defaults every reader used before;
 *   - good values land in their fields;
 *   - each bad value is one line naming the variable, the value and what was
 *     expected, the other variables still parsed;
 *   - dt_env_get parses once, dt_env_reload again;
 *   - train_run refuses a bad variable with exit 2 before it reads the job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/env.h"
#include "runtime/train/train.h"
#include "test/unit/check.h"

static const char *const all_names[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "DTRUN_COMM_BACKEND", "DTRUN_COMM_TRANSPORT", "DTRUN_COMM_TIMEOUT",
    "DTRUN_COMM_ADDR", "DTRUN_COMM_SHM_CHUNK", "DTRUN_COMM_SHM_DEPTH", "DTRUN_COMM_SPIN_US", "DTRUN_NCCL_LIB",
    "DTRUN_STORE", "DTRUN_HSDP_RANKS_PER_NODE", "DTRUN_TRACE", "DTRUN_HARDWARE_DIR", "DTRUN_DUMP_PARAMS",
    "DTRUN_DUMP_VAL", "DTRUN_TEST_STOP_STEP", "DTRUN_TEST_STEP_DELAY_MS", "DTRUN_TEST_CKPT_DELAY_MS",
    "DTRUN_TEST_CKPT_DELAY_STEP", "DTRUN_TEST_NAN_STEP"};
#define N_NAMES (sizeof all_names / sizeof all_names[0])

static void clear_all(void)
{
    for (size_t i = 0; i < N_NAMES; i++) unsetenv(all_names[i]);
}

static int count_lines(const char *s)
{
    int n = *s ? 1 : 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void test_defaults(void)
{
    clear_all();
    dt_env e;
    char err[512] = "x";
    int rc = dt_env_load(&e, err, sizeof err);
    CHECK(rc == 0 && !err[0], "an empty environment is good (%s)", err);
    CHECK(e.rank == 0 && e.world_size == 1 && e.local_rank == 0 && e.local_world_size == 0 && !e.group_rank[0] &&
              !e.master_addr[0] && e.master_port == 0 && e.restart_count == 0,
          "torchrun defaults: rank 0 of 1");
    CHECK(e.comm_backend == DT_ENV_BACKEND_AUTO && e.comm_transport == DT_ENV_TRANSPORT_AUTO &&
              e.comm_timeout_s == 60.0 && !e.comm_addr[0] && e.comm_shm_chunk == 256 * 1024 && e.comm_shm_depth == 16 &&
              !e.comm_shm_depth_set && e.comm_spin_us == -1 && !e.nccl_lib[0] && e.store == DT_ENV_STORE_KV,
          "comm defaults: auto, auto, 60 s, 256k x 16, spin chosen by the transport, kv store");
    CHECK(e.hsdp_ranks_per_node == 1 && !e.trace[0] && !e.hardware_dir[0] && !e.dump_params[0] && !e.dump_val[0],
          "trainer defaults: HSDP over the world of one, no outputs");
    CHECK(e.test_stop_step == -1 && e.test_step_delay_ms == 0 && e.test_ckpt_delay_ms == 0 &&
              e.test_ckpt_delay_step == -1 && e.test_nan_step == -1,
          "test hooks off");

    for (size_t i = 0; i < N_NAMES; i++) setenv(all_names[i], "", 1);
    rc = dt_env_load(&e, err, sizeof err);
    CHECK(rc == 0 && e.rank == 0 && e.world_size == 1 && e.comm_timeout_s == 60.0 && e.test_stop_step == -1 &&
              e.comm_shm_depth == 16 && e.comm_shm_depth_set,
          "empty variables read as unset (DTRUN_COMM_SHM_DEPTH='' still keeps the depth from shrinking) (%s)", err);
    clear_all();
}

static void test_good(void)
{
    clear_all();
    setenv("RANK", "3", 1), setenv("WORLD_SIZE", "8", 1), setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1), setenv("GROUP_RANK", "1", 1), setenv("MASTER_ADDR", "node0", 1);
    setenv("MASTER_PORT", "29500", 1), setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
    setenv("DTRUN_COMM_BACKEND", "cpu", 1), setenv("DTRUN_COMM_TRANSPORT", "tcp", 1);
    setenv("DTRUN_COMM_TIMEOUT", "2.5", 1), setenv("DTRUN_COMM_ADDR", "10.0.0.2", 1);
    setenv("DTRUN_COMM_SHM_CHUNK", "1m", 1), setenv("DTRUN_COMM_SHM_DEPTH", "4096", 1);
    setenv("DTRUN_COMM_SPIN_US", "0", 1), setenv("DTRUN_NCCL_LIB", "/opt/libnccl.so", 1);
    setenv("DTRUN_STORE", "file:/tmp/st", 1), setenv("DTRUN_TRACE", "t.json", 1);
    setenv("DTRUN_HARDWARE_DIR", "/hw", 1), setenv("DTRUN_DUMP_PARAMS", "p.bin", 1);
    setenv("DTRUN_DUMP_VAL", "v.bin", 1), setenv("DTRUN_TEST_STOP_STEP", "20", 1);
    setenv("DTRUN_TEST_STEP_DELAY_MS", "80", 1), setenv("DTRUN_TEST_CKPT_DELAY_MS", "3000", 1);
    setenv("DTRUN_TEST_CKPT_DELAY_STEP", "20", 1), setenv("DTRUN_TEST_NAN_STEP", "5", 1);
    dt_env e;
    char err[512];
    int rc = dt_env_load(&e, err, sizeof err);
    CHECK(rc == 0, "good values parse (%s)", err);
    CHECK(e.rank == 3 && e.world_size == 8 && e.local_rank == 1 && e.local_world_size == 2 &&
              !strcmp(e.group_rank, "1") && !strcmp(e.master_addr, "node0") && e.master_port == 29500 &&
              e.restart_count == 2,
          "torchrun values");
    CHECK(e.comm_backend == DT_ENV_BACKEND_CPU && e.comm_transport == DT_ENV_TRANSPORT_TCP &&
              e.comm_timeout_s == 2.5 && !strcmp(e.comm_addr, "10.0.0.2") && e.comm_shm_chunk == (1u << 20) &&
              e.comm_shm_depth == 1024 && e.comm_shm_depth_set && e.comm_spin_us == 0 &&
              !strcmp(e.nccl_lib, "/opt/libnccl.so") && e.store == DT_ENV_STORE_FILE && !strcmp(e.store_dir, "/tmp/st"),
          "comm values (a depth of 4096 clamps to 1024, 1m is 1 MiB)");
    CHECK(e.hsdp_ranks_per_node == 2 && !strcmp(e.trace, "t.json") && !strcmp(e.hardware_dir, "/hw") &&
              !strcmp(e.dump_params, "p.bin") && !strcmp(e.dump_val, "v.bin"),
          "trainer values (HSDP spans LOCAL_WORLD_SIZE)");
    CHECK(e.test_stop_step == 20 && e.test_step_delay_ms == 80 && e.test_ckpt_delay_ms == 3000 &&
              e.test_ckpt_delay_step == 20 && e.test_nan_step == 5,
          "test hooks");
    setenv("DTRUN_HSDP_RANKS_PER_NODE", "4", 1), setenv("DTRUN_COMM_SHM_CHUNK", "1", 1);
    setenv("DTRUN_COMM_BACKEND", "auto", 1), setenv("DTRUN_STORE", "kv", 1);
    setenv("DTRUN_COMM_SPIN_US", "99999999999999999999999", 1);
    rc = dt_env_load(&e, err, sizeof err);
    CHECK(rc == 0 && e.comm_spin_us == 1000000, "a spin past the largest number clamps to 1000000 (%s)", err);
    CHECK(rc == 0 && e.hsdp_ranks_per_node == 4 && e.comm_shm_chunk == 64 * 1024 &&
              e.comm_backend == DT_ENV_BACKEND_AUTO && e.store == DT_ENV_STORE_KV,
          "DTRUN_HSDP_RANKS_PER_NODE over LOCAL_WORLD_SIZE; a chunk of 1 clamps to 64k; auto; kv");
    clear_all();
}

static void test_bad(void)
{
    static const struct {
        const char *name, *value, *expected;
    } bad[] = {
        {"RANK", "abc", "an integer >= 0"},
        {"RANK", "-1", "an integer >= 0"},
        {"WORLD_SIZE", "0", "an integer >= 1"},
        {"WORLD_SIZE", "2x", "an integer >= 1"},
        {"LOCAL_RANK", "one", "an integer >= 0"},
        {"LOCAL_WORLD_SIZE", "0", "an integer >= 1"},
        {"GROUP_RANK", "n1", "an integer >= 0"},
        {"MASTER_PORT", "http", "a port number 1-65535"},
        {"MASTER_PORT", "70000", "a port number 1-65535"},
        {"TORCHELASTIC_RESTART_COUNT", "x", "an integer >= 0"},
        {"DTRUN_COMM_BACKEND", "gloo", "auto, nccl or cpu"},
        {"DTRUN_COMM_TRANSPORT", "ib", "auto, shm or tcp"},
        {"DTRUN_COMM_TIMEOUT", "abc", "seconds > 0"},
        {"DTRUN_COMM_TIMEOUT", "0", "seconds > 0"},
        {"DTRUN_COMM_TIMEOUT", "5s", "seconds > 0"},
        {"DTRUN_COMM_SHM_CHUNK", "big", "a number, optionally with a k or m suffix"},
        {"DTRUN_COMM_SHM_DEPTH", "-3", "a number, optionally with a k or m suffix"},
        {"DTRUN_COMM_SPIN_US", "10us", "a number, optionally with a k or m suffix"},
        {"DTRUN_STORE", "bogus", "'kv' or 'file:DIR'"},
        {"DTRUN_STORE", "file:", "'kv' or 'file:DIR'"},
        {"DTRUN_HSDP_RANKS_PER_NODE", "all", "an integer >= 0"},
        {"DTRUN_TEST_STOP_STEP", "soon", "a step >= 0"},
        {"DTRUN_TEST_STEP_DELAY_MS", "-5", "milliseconds >= 0"},
        {"DTRUN_TEST_CKPT_DELAY_MS", "1.5", "milliseconds >= 0"},
        {"DTRUN_TEST_CKPT_DELAY_STEP", "x", "a step >= 0"},
        {"DTRUN_TEST_NAN_STEP", "nan", "a step >= 0"},
    };
    dt_env e;
    char err[1024], want[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        clear_all();
        setenv("RANK", "1", 1), setenv("WORLD_SIZE", "2", 1);
        setenv(bad[i].name, bad[i].value, 1);
        int rc = dt_env_load(&e, err, sizeof err);
        snprintf(want, sizeof want, "environment: %s='%s': expected %s", bad[i].name, bad[i].value, bad[i].expected);
        CHECK(rc == -1 && !strcmp(err, want), "%s='%s' is one line: %s", bad[i].name, bad[i].value, err);
    }
    clear_all();
    setenv("RANK", "abc", 1), setenv("DTRUN_COMM_TIMEOUT", "abc", 1), setenv("DTRUN_TEST_NAN_STEP", "7", 1);
    int rc = dt_env_load(&e, err, sizeof err);
    CHECK(rc == -1 && count_lines(err) == 2 && strstr(err, "RANK='abc'") && strstr(err, "DTRUN_COMM_TIMEOUT='abc'"),
          "two bad variables are two lines");
    CHECK(e.rank == 0 && e.comm_timeout_s == 60.0 && e.test_nan_step == 7,
          "bad variables keep their defaults, good ones their values");
    char long_path[DT_ENV_PATH_MAX + 8];
    memset(long_path, 'a', sizeof long_path - 1);
    long_path[sizeof long_path - 1] = '\0';
    clear_all();
    setenv("DTRUN_TRACE", long_path, 1);
    rc = dt_env_load(&e, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "DTRUN_TRACE='aaa") && strstr(err, "aaa...': expected at most 4095 bytes") &&
              strlen(err) < 300 && !e.trace[0],
          "a path longer than the field is one short line");
    clear_all();
}

static void test_once(void)
{
    clear_all();
    setenv("DTRUN_TEST_NAN_STEP", "9", 1);
    const dt_env *e = dt_env_get();
    setenv("DTRUN_TEST_NAN_STEP", "11", 1);
    CHECK(dt_env_get() == e && e->test_nan_step == 9, "dt_env_get parses once (%ld)", e->test_nan_step);
    dt_env_reload();
    CHECK(dt_env_get()->test_nan_step == 11, "dt_env_reload parses again");
    setenv("DTRUN_COMM_TIMEOUT", "abc", 1);
    dt_env_reload();
    CHECK(dt_env_get()->comm_timeout_s == 60.0 && dt_env_get()->test_nan_step == 11,
          "dt_env_get reads a bad variable as its default");
    clear_all();
    dt_env_reload();
}

static void test_train_run(void)
{
    clear_all();
    setenv("DTRUN_COMM_BACKEND", "gloo", 1);
    job_spec job;
    memset(&job, 0, sizeof job);
    printf("# the next line on stderr is expected:\n");
    fflush(stdout);
    int rc = train_run(&job);
    CHECK(rc == DT_EXIT_USAGE, "train_run with a bad DTRUN_COMM_BACKEND exits %d before the job (%d)", DT_EXIT_USAGE,
          rc);
    clear_all();
}

int main(void)
{
    test_defaults();
    test_good();
    test_bad();
    test_once();
    test_train_run();
    CHECK_DONE();
}
