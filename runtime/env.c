/* env.c — the worker's environment, read once (env.h). */
#include "runtime/env.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/job/jobspec.h"

/* The lines said so far: one per bad variable. */
typedef struct {
    char *err;
    size_t errlen, used;
    int bad;
} env_report;

static void env_bad(env_report *r, const char *name, const char *value, const char *expected)
{
    r->bad++;
    if (!r->err || !r->errlen || r->used >= r->errlen) return;
    /* a value past 200 bytes is cut: the line stays a line */
    int n = snprintf(r->err + r->used, r->errlen - r->used, "%senvironment: %s='%.200s%s': expected %s",
                     r->used ? "\n" : "", name, value, strlen(value) > 200 ? "..." : "", expected);
    if (n > 0) r->used += (size_t)n;
}

/* The variable's value, or NULL when it is unset or empty (both mean "the
 * default", as every reader did before). */
static const char *env_value(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* A decimal integer in [lo, hi], the whole string. */
static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno == ERANGE || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* An integer variable: *out keeps dflt when it is unset; a bad value is a line. */
static void env_long(env_report *r, const char *name, long lo, long hi, const char *expected, long dflt, long *out)
{
    *out = dflt;
    const char *v = env_value(name);
    long x;
    if (!v) return;
    if (parse_long(v, lo, hi, &x) != 0) env_bad(r, name, v, expected);
    else *out = x;
}

static void env_int(env_report *r, const char *name, int lo, const char *expected, int dflt, int *out)
{
    long x;
    env_long(r, name, lo, INT_MAX, expected, dflt, &x);
    *out = (int)x;
}

/* A byte or count size: N, or N with a k or m suffix (KiB, MiB); clamped to
 * [lo, hi] as the shared-memory transport always did. */
static void env_size(env_report *r, const char *name, size_t lo, size_t hi, size_t dflt, size_t *out)
{
    *out = dflt;
    const char *v = env_value(name);
    if (!v) return;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    int shift = *end == 'k' || *end == 'K' ? 10 : *end == 'm' || *end == 'M' ? 20 : 0;
    if (shift) end++;
    if (end == v || *end || v[0] == '-' || v[0] == '+') {
        env_bad(r, name, v, "a number, optionally with a k or m suffix");
        return;
    }
    /* too large is still a number: it clamps to hi */
    if (errno == ERANGE || x > (ULLONG_MAX >> shift)) x = ULLONG_MAX;
    else x <<= shift;
    *out = x < lo ? lo : x > hi ? hi : (size_t)x;
}

/* A string variable that fits cap bytes ("" when unset). */
static void env_string(env_report *r, const char *name, char *out, size_t cap)
{
    out[0] = '\0';
    const char *v = env_value(name);
    if (!v) return;
    if (strlen(v) >= cap) {
        char expected[64];
        snprintf(expected, sizeof expected, "at most %zu bytes", cap - 1);
        env_bad(r, name, v, expected);
        return;
    }
    snprintf(out, cap, "%s", v);
}

static void load_torchrun(env_report *r, dt_env *e)
{
    long x;
    int bad0 = r->bad;
    env_long(r, "RANK", 0, (1L << 30) - 1, "an integer >= 0", 0, &x);
    e->rank = (int)x;
    env_long(r, "WORLD_SIZE", 1, (1L << 30) - 1, "an integer >= 1", 1, &x);
    e->world_size = (int)x;
    e->rank_bad = r->bad > bad0;
    env_int(r, "LOCAL_RANK", 0, "an integer >= 0", 0, &e->local_rank);
    env_int(r, "LOCAL_WORLD_SIZE", 1, "an integer >= 1", 0, &e->local_world_size);
    const char *g = env_value("GROUP_RANK");
    e->group_rank[0] = '\0';
    if (g && (strlen(g) >= sizeof e->group_rank || parse_long(g, 0, INT_MAX, &x) != 0))
        env_bad(r, "GROUP_RANK", g, "an integer >= 0");
    else if (g)
        snprintf(e->group_rank, sizeof e->group_rank, "%s", g);
    env_string(r, "MASTER_ADDR", e->master_addr, sizeof e->master_addr);
    env_long(r, "MASTER_PORT", 1, 65535, "a port number 1-65535", 0, &x);
    e->master_port = (int)x;
    env_int(r, "TORCHELASTIC_RESTART_COUNT", 0, "an integer >= 0", 0, &e->restart_count);
    env_int(r, "DTRUN_ATTEMPT", 0, "an integer >= 0", 0, &e->attempt);
    env_string(r, "DTRUN_RESTART_REASON", e->restart_reason, sizeof e->restart_reason);
    env_string(r, "TORCHELASTIC_RUN_ID", e->run_id, sizeof e->run_id);
}

static void load_comm(env_report *r, dt_env *e)
{
    const char *v = env_value("DTRUN_COMM_BACKEND");
    e->comm_backend = DT_ENV_BACKEND_AUTO;
    snprintf(e->comm_backend_raw, sizeof e->comm_backend_raw, "%s", v ? v : "");
    if (v && strcmp(v, "cpu") == 0) e->comm_backend = DT_ENV_BACKEND_CPU;
    else if (v && strcmp(v, "nccl") == 0) e->comm_backend = DT_ENV_BACKEND_NCCL;
    else if (v && strcmp(v, "auto") != 0) {
        env_bad(r, "DTRUN_COMM_BACKEND", v, "auto, nccl or cpu");
        e->comm_backend = DT_ENV_BACKEND_BAD;
    }

    v = env_value("DTRUN_COMM_TRANSPORT");
    e->comm_transport = DT_ENV_TRANSPORT_AUTO;
    snprintf(e->comm_transport_raw, sizeof e->comm_transport_raw, "%s", v ? v : "");
    if (v && strcmp(v, "shm") == 0) e->comm_transport = DT_ENV_TRANSPORT_SHM;
    else if (v && strcmp(v, "tcp") == 0) e->comm_transport = DT_ENV_TRANSPORT_TCP;
    else if (v && strcmp(v, "auto") != 0) {
        env_bad(r, "DTRUN_COMM_TRANSPORT", v, "auto, shm or tcp");
        e->comm_transport = DT_ENV_TRANSPORT_BAD;
    }

    env_int(r, "DTRUN_BEACON_FD", 0, "a descriptor >= 0", -1, &e->beacon_fd);
    e->comm_timeout_s = 60.0;
    if ((v = env_value("DTRUN_COMM_TIMEOUT"))) {
        char *end;
        double t = strtod(v, &end);
        if (end == v || *end || !(t > 0)) env_bad(r, "DTRUN_COMM_TIMEOUT", v, "seconds > 0");
        else e->comm_timeout_s = t;
    }
    env_string(r, "DTRUN_COMM_ADDR", e->comm_addr, sizeof e->comm_addr);
    env_size(r, "DTRUN_COMM_SHM_CHUNK", 64 * 1024, 64 << 20, 256 * 1024, &e->comm_shm_chunk);
    env_size(r, "DTRUN_COMM_SHM_DEPTH", 2, 1024, 16, &e->comm_shm_depth);
    /* set, even empty, keeps the depth from shrinking to fit 128 MiB */
    e->comm_shm_depth_set = getenv("DTRUN_COMM_SHM_DEPTH") != NULL;
    size_t spin;
    env_size(r, "DTRUN_COMM_SPIN_US", 0, 1000000, (size_t)-1, &spin);
    e->comm_spin_us = spin == (size_t)-1 ? -1 : (long)spin;
    env_string(r, "DTRUN_NCCL_LIB", e->nccl_lib, sizeof e->nccl_lib);

    e->store = DT_ENV_STORE_KV;
    e->store_dir[0] = '\0';
    v = env_value("DTRUN_STORE");
    snprintf(e->store_raw, sizeof e->store_raw, "%s", v ? v : "");
    if (v && strcmp(v, "kv") != 0) {
        if (strncmp(v, "file:", 5) != 0 || !v[5] || strlen(v + 5) >= sizeof e->store_dir) {
            env_bad(r, "DTRUN_STORE", v, "'kv' or 'file:DIR'");
            e->store = DT_ENV_STORE_BAD;
        } else {
            e->store = DT_ENV_STORE_FILE;
            snprintf(e->store_dir, sizeof e->store_dir, "%s", v + 5);
        }
    }
}

static void load_trainer(env_report *r, dt_env *e)
{
    int dflt = e->local_world_size > 0 ? e->local_world_size : e->world_size;
    env_int(r, "DTRUN_HSDP_RANKS_PER_NODE", 0, "an integer >= 0", dflt, &e->hsdp_ranks_per_node);
    env_string(r, "DTRUN_TRACE", e->trace, sizeof e->trace);
    env_string(r, "DTRUN_HARDWARE_DIR", e->hardware_dir, sizeof e->hardware_dir);
    env_string(r, "DTRUN_HARDWARE", e->hardware, sizeof e->hardware);
    env_string(r, "DTRUN_DUMP_PARAMS", e->dump_params, sizeof e->dump_params);
    env_string(r, "DTRUN_DUMP_VAL", e->dump_val, sizeof e->dump_val);
    env_int(r, "DTRUN_STRICT_DATA", 0, "0 or 1", 0, &e->strict_data);
    env_string(r, "DTRUN_ALLOW_CHANGES", e->allow_changes, sizeof e->allow_changes);
    char why[256];
    if (e->allow_changes[0] && job_key_list_check(e->allow_changes, why, sizeof why) != 0) {
        env_bad(r, "DTRUN_ALLOW_CHANGES", e->allow_changes, why);
        e->allow_changes[0] = '\0';
    }
    long tty;
    env_long(r, "DTRUN_STDOUT_TTY", 0, 1, "0 or 1", -1, &tty);
    e->stdout_tty = (int)tty;
    const char *c = env_value("DTRUN_CACHE_DIR"), *x = env_value("XDG_CACHE_HOME"), *h = env_value("HOME");
    if (c) snprintf(e->cache_dir, sizeof e->cache_dir, "%s", c);
    else if (x) snprintf(e->cache_dir, sizeof e->cache_dir, "%s/dtrun", x);
    else if (h) snprintf(e->cache_dir, sizeof e->cache_dir, "%s/.cache/dtrun", h);
}

static void load_tests(env_report *r, dt_env *e)
{
    env_long(r, "DTRUN_TEST_STOP_STEP", 0, LONG_MAX, "a step >= 0", -1, &e->test_stop_step);
    env_int(r, "DTRUN_TEST_STEP_DELAY_MS", 0, "milliseconds >= 0", 0, &e->test_step_delay_ms);
    env_int(r, "DTRUN_TEST_CKPT_DELAY_MS", 0, "milliseconds >= 0", 0, &e->test_ckpt_delay_ms);
    env_long(r, "DTRUN_TEST_CKPT_DELAY_STEP", 0, LONG_MAX, "a step >= 0", -1, &e->test_ckpt_delay_step);
    env_long(r, "DTRUN_TEST_NAN_STEP", 0, LONG_MAX, "a step >= 0", -1, &e->test_nan_step);
}

int dt_env_load(dt_env *out, char *err, size_t errlen)
{
    env_report r = {.err = err, .errlen = errlen};
    if (err && errlen) err[0] = '\0';
    memset(out, 0, sizeof *out);
    load_torchrun(&r, out);
    load_comm(&r, out);
    load_trainer(&r, out);
    load_tests(&r, out);
    return r.bad ? -1 : 0;
}

static dt_env the_env;
static pthread_once_t the_env_once = PTHREAD_ONCE_INIT;

static void the_env_load(void) { dt_env_load(&the_env, NULL, 0); }

const dt_env *dt_env_get(void)
{
    pthread_once(&the_env_once, the_env_load);
    return &the_env;
}

extern char **environ;

void dt_env_each_knob(void (*fn)(void *ctx, const char *name, const char *value), void *ctx)
{
    /* not the agent's per-worker plumbing (ranks, ports, ids): only what can
     * change the numbers or the kernels that compute them */
    static const char *const exact[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE",
                                        "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "CUBLAS_WORKSPACE_CONFIG",
                                        "DTRUN_COMM_BACKEND", "DTRUN_COMM_TRANSPORT", "DTRUN_NCCL_LIB",
                                        "DTRUN_HSDP_RANKS_PER_NODE"};
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        char name[128];
        size_t n = (size_t)(eq - *e);
        if (n >= sizeof name) continue;
        memcpy(name, *e, n);
        name[n] = 0;
        int keep = !strncmp(name, "NCCL_", 5) || !strncmp(name, "DTRUN_TEST_", 11);
        for (size_t i = 0; !keep && i < sizeof exact / sizeof exact[0]; i++) keep = !strcmp(name, exact[i]);
        if (keep && (strstr(name, "TOKEN") || strstr(name, "SECRET") || strstr(name, "PASSWORD") ||
                     strstr(name, "KEY")))
            keep = 0;
        if (keep) fn(ctx, name, eq + 1);
    }
}

void dt_env_reload(void)
{
    pthread_once(&the_env_once, the_env_load);
    the_env_load();
}
