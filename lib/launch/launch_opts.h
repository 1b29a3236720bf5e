/* launch_opts.h — dtrun's command line: torchrun's option names and meanings.
 *
 * Every option is accepted dashed or underscored (--nproc-per-node,
 * --nproc_per_node), as --opt=VALUE or --opt VALUE. Values come, in order of
 * precedence, from the command line, the job file's `launch:` section, the Slurm
 * allocation (lib/launch/slurm.h) and the defaults; launch_opts_finish() then resolves
 * what depends on the machine (nproc "cpu"/"gpu"/"auto") and checks the whole.
 *
 * Errors are one line without a trailing newline and without the "dtrun: "
 * prefix (the caller adds it): what, why, and which option or file. */
#ifndef DTRUN_LAUNCH_OPTS_H
#define DTRUN_LAUNCH_OPTS_H

#include <stddef.h>
#include <stdio.h>

#include "lib/job/jobspec.h"
#include "lib/util/headroom.h"

#define LAUNCH_MAX_LOCAL 256          /* workers per node */
#define LAUNCH_MAX_NODES 65536
#define LAUNCH_HOST_MAX 256
#define LAUNCH_ID_MAX 64
#define LAUNCH_DEFAULT_RDZV_PORT 29400  /* torchrun's c10d default */

/* Which of a worker's streams a --redirects / --tee value names (torchrun's Std). */
typedef enum {
    LAUNCH_STD_NONE = 0,
    LAUNCH_STD_OUT = 1,
    LAUNCH_STD_ERR = 2,
    LAUNCH_STD_ALL = 3
} launch_std;

/* "3" (every local rank) or "0:1,1:2" (per local rank; unlisted ranks: none). */
typedef struct {
    launch_std all;                      /* value for ranks the map does not name */
    unsigned char by_rank[LAUNCH_MAX_LOCAL]; /* launch_std per local rank */
    unsigned char in_map[LAUNCH_MAX_LOCAL];  /* 1 where by_rank applies */
} launch_std_spec;

/* --rdzv-conf k=v,...: rendezvous timeouts in seconds (torchrun's c10d keys). */
typedef struct {
    double join_timeout;       /* wait this long for the minimum number of nodes */
    double last_call_timeout;  /* after the minimum is reached, wait for more (MIN<MAX) */
    double close_timeout;      /* how long a closing round waits for stragglers */
    double heartbeat_timeout;  /* a node silent this long is dead */
    double keep_alive_interval;/* how often an agent says it is alive */
    double read_timeout;       /* one request to the daemon */
    int is_host;               /* -1 auto (try to bind the endpoint), 0 never, 1 must */
} launch_rdzv_conf;

/* Bits of launch_opts.set: which options the command line (or a later source)
 * gave explicitly, so a lower-precedence source leaves them alone. */
enum {
    LAUNCH_SET_NPROC = 1u << 0,
    LAUNCH_SET_NNODES = 1u << 1,
    LAUNCH_SET_NODE_RANK = 1u << 2,
    LAUNCH_SET_ENDPOINT = 1u << 3,
    LAUNCH_SET_RDZV_ID = 1u << 4,
    LAUNCH_SET_MAX_RESTARTS = 1u << 5,
    LAUNCH_SET_LOG_DIR = 1u << 6,
    LAUNCH_SET_MASTER_ADDR = 1u << 7,
    LAUNCH_SET_MASTER_PORT = 1u << 8,
    LAUNCH_SET_REDIRECTS = 1u << 9,
    LAUNCH_SET_TEE = 1u << 10,
    LAUNCH_SET_BACKEND = 1u << 11,
    LAUNCH_SET_TRACE = 1u << 12,
};

typedef struct {
    /* What to run: a job file for the built-in trainer, or a program. */
    const char *job_path;      /* points into argv; NULL when running a program */
    char **program;            /* NULL-terminated argv of the program (points into argv,
                                  except the python3 words added for a script.py) */
    int program_argc;
    char **program_storage;    /* heap copy when "python3" words were prepended */
    int python_prepended;      /* program_storage[0] is "python3" (script.py, -m, --run-path),
                                  then -u (as torchrun: unbuffered output) */
    const char *python_target; /* the script or module those words run (for messages) */
    char python_path[4096];    /* launch_opts_finish: $PYTHON_EXEC, else the python3 PATH gives */
    int python_from_env;       /* python_path came from PYTHON_EXEC */

    char nproc_spec[16];       /* "N" as given, "cpu", "gpu" or "auto" */
    int nproc;                 /* local workers; resolved by launch_opts_finish */
    int nnodes_min, nnodes_max;
    int node_rank;             /* -1: the rendezvous assigns one */
    char rdzv_backend[16];     /* c10d, static or dtrun: all mean dtrun's rendezvous */
    char rdzv_endpoint[LAUNCH_HOST_MAX + 16]; /* as given, "" = none */
    char rdzv_host[LAUNCH_HOST_MAX];          /* parsed, no brackets */
    int rdzv_port;
    char rdzv_id[LAUNCH_ID_MAX];
    launch_rdzv_conf rdzv_conf;
    int standalone;
    char master_addr[LAUNCH_HOST_MAX];        /* "" = the address of node rank 0 */
    int master_port;                          /* 0 = a free port found at each round */
    int max_restarts;
    double monitor_interval;
    double term_timeout;       /* SIGTERM to SIGKILL grace when stopping workers */
    char log_dir[JOB_PATH_MAX];
    launch_std_spec redirects;
    launch_std_spec tee;
    int has_ranks_filter;
    unsigned char ranks_filter[LAUNCH_MAX_LOCAL]; /* local ranks shown on the console */
    char role[LAUNCH_ID_MAX];
    char local_addr[LAUNCH_HOST_MAX];
    int dry_run, print_config, version, help;
    int plan;                  /* --plan: search layouts (runtime/plan/plan.h) */
    char hardware[JOB_PATH_MAX]; /* --hardware NAME|PATH for --dry-run / --plan; "" default */
    int format_json;           /* --format json */
    int top;                   /* --top K for --plan; 0 default */
    dt_headroom headroom;      /* --headroom 5%|4GiB for --plan / --dry-run; unset: the profile's */
    char calibrate[JOB_PATH_MAX]; /* --calibrate FILE: measure this host, write a cpu profile; "" none */
    char trace[JOB_PATH_MAX];  /* --trace FILE: the workers' merged Chrome trace (log.trace); "" none */
    int no_fit_check;          /* --no-fit-check: start a job the dry-run says does not fit */
    int strict_data;           /* --strict-data: resuming from a checkpoint whose data files
                                  changed is an error (DTRUN_STRICT_DATA=1 for the workers) */
    char allow_changes[512];   /* --allow-changes KEYS: what a resume may change although it
                                  makes another run ("train.lr,train.seed", all; "" none;
                                  DTRUN_ALLOW_CHANGES for the workers) */
    int bare_rank0_stdout;     /* not a flag: `dtrun eval/generate --tp N` set it so that rank
                                  0's results read as on one process (no "[role/0]:") */
    unsigned set;              /* LAUNCH_SET_* */
} launch_opts;

void launch_opts_defaults(launch_opts *o);

/* Parse argv[1..argc-1] (argv[0] is the program name). Returns 0, or -1 with one
 * line in err. A job file may be followed by more options; a program after "--"
 * or a script.py takes every word after it as its own arguments. */
int launch_opts_parse(launch_opts *o, int argc, char **argv, char *err, size_t errlen);

/* Take the job file's launch: values for options the command line did not set.
 * Messages name the file and key: "job.yaml: launch.nnodes: ...". */
int launch_opts_merge_job(launch_opts *o, const job_spec *job, char *err, size_t errlen);

/* The reverse: write the launch values the command line set into the job's
 * launch section (for --print-config, and for --dry-run, which reads them there). */
void launch_opts_to_job(const launch_opts *o, job_spec *job);

/* Resolve and check the combination: nproc from cpu/gpu/auto, --standalone,
 * the static backend's endpoint, node rank in range, an endpoint when several
 * nodes meet, a default rdzv id. Call after every source was merged. */
int launch_opts_finish(launch_opts *o, char *err, size_t errlen);

/* Free what parsing allocated (the argv copy for script.py). */
void launch_opts_free(launch_opts *o);

/* The --redirects / --tee value for one local rank. */
launch_std launch_std_for(const launch_std_spec *spec, int local_rank);

/* Parsers for single values, shared with lib/launch/slurm.c and the unit tests. Each
 * returns 0 or -1 with a reason in err (not naming the option). */
int launch_parse_endpoint(const char *s, char *host, size_t hostlen, int *port, int default_port,
                          char *err, size_t errlen);
int launch_parse_nnodes(const char *s, int *min, int *max, char *err, size_t errlen);
int launch_parse_std(const char *s, launch_std_spec *spec, char *err, size_t errlen);

/* GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else the driver's list. */
int launch_count_gpus(void);
/* CPU cores this process may run on (its affinity mask). */
int launch_count_cpus(void);

/* One "name: value" line per option, for --print-config. */
void launch_opts_print(const launch_opts *o, FILE *out);

#endif
