/* agent_env.c — build a worker's environment. */
#include "lib/launch/agent_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OURS 48

typedef struct {
    char *vars[MAX_OURS];
    int n;
    int failed;
} var_list;

static void add(var_list *l, const char *name, const char *value)
{
    if (l->n >= MAX_OURS) { l->failed = 1; return; }
    size_t len = strlen(name) + strlen(value) + 2;
    char *v = malloc(len);
    if (!v) { l->failed = 1; return; }
    snprintf(v, len, "%s=%s", name, value);
    l->vars[l->n++] = v;
}

static void add_int(var_list *l, const char *name, int value)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%d", value);
    add(l, name, buf);
}

/* torchrun's name and dtrun's twin with the same value. */
static void add_both(var_list *l, const char *torch_name, const char *dtrun_name, const char *value)
{
    add(l, torch_name, value);
    add(l, dtrun_name, value);
}

static void add_both_int(var_list *l, const char *torch_name, const char *dtrun_name, int value)
{
    add_int(l, torch_name, value);
    add_int(l, dtrun_name, value);
}

static int has_name(char *const *vars, int n, const char *entry)
{
    size_t len = strcspn(entry, "=");
    for (int i = 0; i < n; i++)
        if (!strncmp(vars[i], entry, len) && vars[i][len] == '=') return 1;
    return 0;
}

const char *agent_env_get(char *const *env, const char *name)
{
    size_t len = strlen(name);
    for (; env && *env; env++)
        if (!strncmp(*env, name, len) && (*env)[len] == '=') return *env + len + 1;
    return NULL;
}

char **agent_env_build(char *const *base, const agent_env_info *in)
{
    var_list l = {0};
    add_both_int(&l, "RANK", "DTRUN_RANK", in->rank);
    add_both_int(&l, "LOCAL_RANK", "DTRUN_LOCAL_RANK", in->local_rank);
    add_both_int(&l, "WORLD_SIZE", "DTRUN_WORLD_SIZE", in->world_size);
    add_both_int(&l, "LOCAL_WORLD_SIZE", "DTRUN_LOCAL_WORLD_SIZE", in->local_world_size);
    add_both_int(&l, "GROUP_RANK", "DTRUN_GROUP_RANK", in->group_rank);
    add_both_int(&l, "GROUP_WORLD_SIZE", "DTRUN_GROUP_WORLD_SIZE", in->group_world_size);
    add_both_int(&l, "ROLE_RANK", "DTRUN_ROLE_RANK", in->role_rank);
    add_both_int(&l, "ROLE_WORLD_SIZE", "DTRUN_ROLE_WORLD_SIZE", in->role_world_size);
    add_both(&l, "ROLE_NAME", "DTRUN_ROLE_NAME", in->role);
    add_both(&l, "MASTER_ADDR", "DTRUN_MASTER_ADDR", in->master_addr);
    add_both_int(&l, "MASTER_PORT", "DTRUN_MASTER_PORT", in->master_port);
    add_both_int(&l, "TORCHELASTIC_RESTART_COUNT", "DTRUN_RESTART_COUNT", in->restart_count);
    add_both_int(&l, "TORCHELASTIC_MAX_RESTARTS", "DTRUN_MAX_RESTARTS", in->max_restarts);
    add_int(&l, "DTRUN_ATTEMPT", in->attempt);
    if (in->attempt > 0 && in->restart_reason) add(&l, "DTRUN_RESTART_REASON", in->restart_reason);
    add_both(&l, "TORCHELASTIC_RUN_ID", "DTRUN_RUN_ID", in->run_id);
    /* Workers never use an agent-side TCPStore: PyTorch's rank 0 creates its own. */
    add(&l, "TORCHELASTIC_USE_AGENT_STORE", "False");
    add(&l, "DTRUN_RDZV_HOST", in->rdzv_host);
    add_int(&l, "DTRUN_RDZV_PORT", in->rdzv_port);
    add(&l, "DTRUN_RDZV_TOKEN", in->token);
    char kv[300];
    int v6 = strchr(in->rdzv_host, ':') != NULL;
    snprintf(kv, sizeof kv, "%s%s%s:%d", v6 ? "[" : "", in->rdzv_host, v6 ? "]" : "", in->rdzv_port);
    add(&l, "DTRUN_KV_ENDPOINT", kv);
    add(&l, "DTRUN_KV_PREFIX", in->kv_prefix);
    if (in->agent_id) add(&l, "DTRUN_AGENT_ID", in->agent_id);
    if (in->beacon_fd > 0) add_int(&l, "DTRUN_BEACON_FD", in->beacon_fd);
    add_int(&l, "DTRUN_STDOUT_TTY", in->stdout_tty != 0);
    if (in->error_file) add(&l, "TORCHELASTIC_ERROR_FILE", in->error_file);
    if (!agent_env_get(base, "OMP_NUM_THREADS"))
        add_int(&l, "OMP_NUM_THREADS", in->omp_threads > 0 ? in->omp_threads : 1);
    /* Several workers share this node's cores: OpenMP's default spin-wait makes
     * their idle threads steal each other's cores (a CPU step measured 2-4x
     * slower), so let idle threads sleep unless the user chose otherwise. */
    if (in->local_world_size > 1 && !agent_env_get(base, "OMP_WAIT_POLICY"))
        add(&l, "OMP_WAIT_POLICY", "PASSIVE");

    size_t nbase = 0;
    for (char *const *e = base; e && *e; e++) nbase++;
    char **env = l.failed ? NULL : calloc(nbase + (size_t)l.n + 1, sizeof(char *));
    if (!env) {
        for (int i = 0; i < l.n; i++) free(l.vars[i]);
        return NULL;
    }
    size_t k = 0;
    for (char *const *e = base; e && *e; e++) {
        if (has_name(l.vars, l.n, *e)) continue;
        /* the agent's own error file (dtrun run by another elastic agent) is not a worker's */
        if (!strncmp(*e, "TORCHELASTIC_ERROR_FILE=", 24)) continue;
        env[k] = strdup(*e);
        if (!env[k]) { agent_env_free(env); for (int i = 0; i < l.n; i++) free(l.vars[i]); return NULL; }
        k++;
    }
    for (int i = 0; i < l.n; i++) env[k++] = l.vars[i];
    env[k] = NULL;
    return env;
}

void agent_env_free(char **env)
{
    if (!env) return;
    for (char **e = env; *e; e++) free(*e);
    free(env);
}
