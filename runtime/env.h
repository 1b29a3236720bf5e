/* env.h — the worker's environment, read once.
 *
 * Every variable the worker side reads (torchrun's, the communication knobs,
 * the trainer's outputs and test hooks) is parsed here and nowhere else, so a
 * bad value is one line at start-up instead of a silent default deep inside a
 * step. An unset or empty variable takes the default written beside it (the
 * behaviour before this file existed). The launcher side (lib/) reads its own
 * variables (DTRUN_KV_*, DTRUN_RDZV_TOKEN, CUDA_VISIBLE_DEVICES, TMPDIR, SLURM_*):
 * lib/ never includes runtime/.
 *
 * torchrun (set by the agent for each worker):
 *   RANK                        world rank, integer >= 0 (0)
 *   WORLD_SIZE                  workers in the world, integer >= 1 (1)
 *   LOCAL_RANK                  rank within the node: picks the GPU, integer >= 0 (0)
 *   LOCAL_WORLD_SIZE            workers on this node, integer >= 1 (unset: 0, the caller's default)
 *   GROUP_RANK                  node rank, integer >= 0; names the node ("nodeN") (unset: "", the host)
 *   MASTER_ADDR                 host of rank 0's store; the TCP transport routes from it ("")
 *   MASTER_PORT                 its port, 1-65535 (unset: 0)
 *   TORCHELASTIC_RESTART_COUNT  restarts so far, integer >= 0; keys the world's store prefix (0)
 *   TORCHELASTIC_RUN_ID         the run (--rdzv-id), recorded in checkpoints: a restart
 *                               knows its own ("")
 *
 * communication (runtime/comm):
 *   DTRUN_COMM_BACKEND    auto | cpu | nccl (auto)
 *   DTRUN_COMM_TRANSPORT  auto | shm | tcp: the CPU transport of a group (auto)
 *   DTRUN_COMM_TIMEOUT    seconds each call may take, > 0 (60)
 *   DTRUN_COMM_ADDR       the address peers dial this worker at (unset: the route to MASTER_ADDR)
 *   DTRUN_COMM_SHM_CHUNK  bytes of a shared-memory slot, N[k|m], clamped to 64k-64m (256k)
 *   DTRUN_COMM_SHM_DEPTH  slots per rank, N, clamped to 2-1024 (16, fewer when they pass 128 MiB)
 *   DTRUN_COMM_SPIN_US    microseconds to poll before sleeping, N, clamped to 0-1000000
 *                         (unset: -1, the transport picks 1000 or 0 from cores per worker)
 *   DTRUN_NCCL_LIB        the NCCL library to dlopen (unset: libnccl.so.2, then libnccl.so)
 *   DTRUN_STORE           kv | file:DIR: the bootstrap store (kv, the daemon's)
 *   DTRUN_BEACON_FD       the agent's beacon page for this worker, a descriptor >= 0
 *                         (unset: -1, none; lib/util/beacon.h)
 *
 * trainer:
 *   DTRUN_HSDP_RANKS_PER_NODE  ranks an HSDP shard group spans, integer >= 0, 0 = the world
 *                              (unset: LOCAL_WORLD_SIZE, else WORLD_SIZE)
 *   DTRUN_TRACE                write the run's trace there, over the job's log.trace ("")
 *   DTRUN_HARDWARE_DIR         first directory the planner looks hardware profiles up in ("")
 *   DTRUN_HARDWARE             the profile (name or path) whose peak a run's MFU is
 *                              measured against (--hardware; unset: the one named
 *                              for the device, hw_profile_for_device)
 *   DTRUN_DUMP_PARAMS          rank 0 writes the final parameters there ("")
 *   DTRUN_DUMP_VAL             rank 0 writes the last evaluation's samples there ("")
 *   DTRUN_STRICT_DATA          1: resuming with data files that changed since the
 *                              checkpoint is an error, not a warning (--strict-data) (0)
 *   DTRUN_ALLOW_CHANGES        job keys a resume may change although they make another run,
 *                              "train.lr,train.seed" or "all" (--allow-changes; "")
 *   DTRUN_STDOUT_TTY           1: the agent shows this worker's stdout on a terminal, so
 *                              log.progress auto draws the live line; 0: it does not
 *                              (unset: -1, whether the worker's own stdout is a terminal)
 *   DTRUN_CACHE_DIR            where the data files' hashes are remembered (unset:
 *                              $XDG_CACHE_HOME/dtrun, else $HOME/.cache/dtrun, else none)
 *
 * tests (hooks of the trainer, man/dtrun.1):
 *   DTRUN_TEST_STOP_STEP        stop with a checkpoint after that step, integer >= 0 (-1: never)
 *   DTRUN_TEST_STEP_DELAY_MS    sleep after every step, integer >= 0 (0)
 *   DTRUN_TEST_CKPT_DELAY_MS    hold each checkpoint write open before its commit, integer >= 0 (0)
 *   DTRUN_TEST_CKPT_DELAY_STEP  only that step's write, integer >= 0 (-1: every write)
 *   DTRUN_TEST_NAN_STEP         the loss of that step reads as NaN, integer >= 0 (-1: never) */
#ifndef DTRUN_ENV_H
#define DTRUN_ENV_H

#include <stddef.h>

#define DT_ENV_PATH_MAX 4096
#define DT_ENV_ADDR_MAX 256

/* *_BAD: the variable holds something else (its text in the *_raw field), so
 * that the comm layer, which callers other than the worker use too, can still
 * answer with its own line when asked for a world, a group or a store. */
typedef enum { DT_ENV_BACKEND_AUTO, DT_ENV_BACKEND_CPU, DT_ENV_BACKEND_NCCL, DT_ENV_BACKEND_BAD } dt_env_backend;
typedef enum { DT_ENV_TRANSPORT_AUTO, DT_ENV_TRANSPORT_SHM, DT_ENV_TRANSPORT_TCP, DT_ENV_TRANSPORT_BAD } dt_env_transport;
typedef enum { DT_ENV_STORE_KV, DT_ENV_STORE_FILE, DT_ENV_STORE_BAD } dt_env_store;

typedef struct {
    /* torchrun */
    int rank, world_size, local_rank;
    int local_world_size;          /* 0 when unset */
    char group_rank[32];           /* "" when unset */
    char master_addr[DT_ENV_ADDR_MAX];
    int master_port;               /* 0 when unset */
    int restart_count;
    int attempt;                   /* DTRUN_ATTEMPT: groups the agent started before this one (0) */
    char restart_reason[256];      /* DTRUN_RESTART_REASON: why the agent started this one ("") */
    char run_id[256];              /* TORCHELASTIC_RUN_ID ("") */
    int rank_bad;                  /* RANK or WORLD_SIZE is not a number in range (rank/world_size hold the defaults) */
    /* communication */
    dt_env_backend comm_backend;
    char comm_backend_raw[64];     /* the variable's text, cut to fit */
    dt_env_transport comm_transport;
    char comm_transport_raw[64];
    double comm_timeout_s;
    char comm_addr[DT_ENV_ADDR_MAX];
    size_t comm_shm_chunk, comm_shm_depth;
    int comm_shm_depth_set;        /* DTRUN_COMM_SHM_DEPTH is in the environment (even empty) */
    long comm_spin_us;             /* -1 when unset */
    char nccl_lib[DT_ENV_PATH_MAX];
    dt_env_store store;
    char store_dir[DT_ENV_PATH_MAX]; /* file:DIR */
    char store_raw[DT_ENV_PATH_MAX]; /* the variable's text (DT_ENV_STORE_BAD) */
    /* trainer */
    int hsdp_ranks_per_node;       /* the default above already applied */
    char trace[DT_ENV_PATH_MAX];
    char hardware_dir[DT_ENV_PATH_MAX];
    char hardware[DT_ENV_PATH_MAX];
    char dump_params[DT_ENV_PATH_MAX];
    char dump_val[DT_ENV_PATH_MAX];
    int strict_data;
    char allow_changes[512];       /* "" when none */
    int stdout_tty;                /* -1 when unset */
    char cache_dir[DT_ENV_PATH_MAX]; /* "" when there is none */
    /* tests */
    int beacon_fd;
    long test_stop_step;
    int test_step_delay_ms, test_ckpt_delay_ms;
    long test_ckpt_delay_step, test_nan_step;
} dt_env;

/* Parses the process's environment into *out. Returns 0, or -1 with one line
 * per bad variable in err (lines joined by '\n', e.g. "environment:
 * DTRUN_COMM_TIMEOUT='abc': expected seconds > 0"); a bad variable's field then
 * holds its default, every other field its value. */
int dt_env_load(dt_env *out, char *err, size_t errlen);

/* The environment as the process started with it, parsed on first use (bad
 * variables read as their defaults: the worker start, train_run, refuses them
 * before anything reads this). */
const dt_env *dt_env_get(void);

/* Parses the environment again into what dt_env_get returns (tests that
 * setenv after the first use). Single-threaded callers only. */
void dt_env_reload(void);

/* The environment variables that can change what a run computes (thread
 * counts, CPU kernel choice, visible devices, NCCL's, the comm backend and
 * transport, the HSDP group, the test hooks; never one holding a secret),
 * each given to fn, for a checkpoint's provenance. */
void dt_env_each_knob(void (*fn)(void *ctx, const char *name, const char *value), void *ctx);

#endif
