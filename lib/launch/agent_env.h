/* agent_env.h — the environment a worker starts with.
 *
 * torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
 * GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME,
 * MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,
 * TORCHELASTIC_RUN_ID, TORCHELASTIC_USE_AGENT_STORE=False), a DTRUN_* twin of
 * each, and what reaches the rendezvous daemon's KV store (DTRUN_RDZV_HOST,
 * DTRUN_RDZV_PORT, DTRUN_RDZV_TOKEN, DTRUN_KV_ENDPOINT, DTRUN_KV_PREFIX, see
 * lib/rdzv/kv.h), DTRUN_AGENT_ID (this agent's id, unique on the host; its
 * watchdog kills every process that carries it when the agent ends),
 * DTRUN_BEACON_FD (the built-in trainer's beacon page, lib/util/beacon.h),
 * DTRUN_STDOUT_TTY (1 when the agent shows the worker's stdout on a terminal:
 * the trainer's log.progress auto draws its live line then),
 * TORCHELASTIC_ERROR_FILE (a program's worker: where PyTorch's @record writes
 * an uncaught exception). OMP_NUM_THREADS is set only when the agent's environment lacks it. */
#ifndef DTRUN_AGENT_ENV_H
#define DTRUN_AGENT_ENV_H

typedef struct {
    const char *role;
    int local_rank, local_world_size;
    int rank, world_size;
    int group_rank, group_world_size;
    int role_rank, role_world_size;
    const char *master_addr;
    int master_port;
    int restart_count, max_restarts;
    int attempt;               /* DTRUN_ATTEMPT: groups started before this one (restarts of any kind) */
    const char *restart_reason;/* DTRUN_RESTART_REASON when attempt > 0 */
    const char *run_id;
    const char *rdzv_host;     /* the daemon as this node reaches it */
    int rdzv_port;
    const char *token;
    const char *kv_prefix;
    int omp_threads;           /* OMP_NUM_THREADS unless the base environment has it */
    const char *agent_id;      /* DTRUN_AGENT_ID; NULL: not set */
    int beacon_fd;             /* DTRUN_BEACON_FD; 0: not set (0 is stdin, never a beacon) */
    int stdout_tty;            /* DTRUN_STDOUT_TTY: 0 or 1 */
    const char *error_file;    /* TORCHELASTIC_ERROR_FILE; NULL: not set (nor inherited) */
} agent_env_info;

/* A NULL-terminated array of "NAME=VALUE": `base` (e.g. environ) without the
 * names set here, then these. NULL when out of memory. */
char **agent_env_build(char *const *base, const agent_env_info *in);
void agent_env_free(char **env);

/* The value of name in env, or NULL (for tests and the agent's own checks). */
const char *agent_env_get(char *const *env, const char *name);

#endif
