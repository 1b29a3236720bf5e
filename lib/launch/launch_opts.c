/* launch_opts.c — dtrun's command line: the option table, reading argv, and
 * the job file's launch: section as a lower-precedence source. Single values:
 * launch_opts_values.c; resolving and checking the whole: launch_opts_finish.c;
 * --print-config: launch_opts_print.c. */
#include "lib/launch/launch_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/suggest.h"
#include "lib/launch/launch_opts_internal.h"
#include "lib/util/errline.h"
#include "lib/util/headroom.h"
#include "lib/util/range.h"

typedef enum {
    OPT_NPROC, OPT_NNODES, OPT_NODE_RANK, OPT_RDZV_ENDPOINT, OPT_RDZV_ID, OPT_RDZV_CONF,
    OPT_RDZV_BACKEND, OPT_STANDALONE, OPT_MASTER_ADDR, OPT_MASTER_PORT, OPT_MAX_RESTARTS,
    OPT_MONITOR_INTERVAL, OPT_TERM_TIMEOUT, OPT_LOG_DIR, OPT_REDIRECTS, OPT_TEE,
    OPT_RANKS_FILTER, OPT_ROLE, OPT_LOCAL_ADDR, OPT_NO_PYTHON, OPT_MODULE, OPT_RUN_PATH, OPT_DRY_RUN,
    OPT_PRINT_CONFIG, OPT_VERSION, OPT_HELP, OPT_PLAN, OPT_HARDWARE, OPT_FORMAT, OPT_TOP, OPT_TRACE,
    OPT_NO_FIT_CHECK, OPT_STRICT_DATA, OPT_ALLOW_CHANGES, OPT_HEADROOM, OPT_CALIBRATE
} opt_id;

typedef struct {
    const char *name;  /* dashed spelling, without the leading "--" */
    char short_name;   /* 0 when none */
    int takes_value;
    opt_id id;
} opt_def;

static const opt_def OPTIONS[] = {
    {"nproc-per-node", 0, 1, OPT_NPROC},
    {"nnodes", 0, 1, OPT_NNODES},
    {"node-rank", 0, 1, OPT_NODE_RANK},
    {"rdzv-endpoint", 0, 1, OPT_RDZV_ENDPOINT},
    {"rdzv-id", 0, 1, OPT_RDZV_ID},
    {"rdzv-conf", 0, 1, OPT_RDZV_CONF},
    {"rdzv-backend", 0, 1, OPT_RDZV_BACKEND},
    {"standalone", 0, 0, OPT_STANDALONE},
    {"master-addr", 0, 1, OPT_MASTER_ADDR},
    {"master-port", 0, 1, OPT_MASTER_PORT},
    {"max-restarts", 0, 1, OPT_MAX_RESTARTS},
    {"monitor-interval", 0, 1, OPT_MONITOR_INTERVAL},
    {"term-timeout", 0, 1, OPT_TERM_TIMEOUT},
    {"log-dir", 0, 1, OPT_LOG_DIR},
    {"redirects", 'r', 1, OPT_REDIRECTS},
    {"tee", 't', 1, OPT_TEE},
    {"local-ranks-filter", 0, 1, OPT_RANKS_FILTER},
    {"role", 0, 1, OPT_ROLE},
    {"local-addr", 0, 1, OPT_LOCAL_ADDR},
    {"no-python", 0, 0, OPT_NO_PYTHON},
    {"module", 'm', 0, OPT_MODULE},
    {"run-path", 0, 0, OPT_RUN_PATH},
    {"dry-run", 0, 0, OPT_DRY_RUN},
    {"plan", 0, 0, OPT_PLAN},
    {"hardware", 0, 1, OPT_HARDWARE},
    {"format", 0, 1, OPT_FORMAT},
    {"top", 0, 1, OPT_TOP},
    {"headroom", 0, 1, OPT_HEADROOM},
    {"calibrate", 0, 1, OPT_CALIBRATE},
    {"trace", 0, 1, OPT_TRACE},
    {"no-fit-check", 0, 0, OPT_NO_FIT_CHECK},
    {"strict-data", 0, 0, OPT_STRICT_DATA},
    {"allow-changes", 0, 1, OPT_ALLOW_CHANGES},
    {"print-config", 0, 0, OPT_PRINT_CONFIG},
    {"version", 0, 0, OPT_VERSION},
    {"help", 'h', 0, OPT_HELP},
};
#define N_OPTIONS (sizeof OPTIONS / sizeof OPTIONS[0])

void launch_opts_defaults(launch_opts *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->nproc_spec, sizeof o->nproc_spec, "auto");
    o->nnodes_min = o->nnodes_max = 1;
    o->node_rank = -1;
    snprintf(o->rdzv_backend, sizeof o->rdzv_backend, "c10d");
    o->rdzv_port = LAUNCH_DEFAULT_RDZV_PORT;
    /* torchrun's c10d defaults; a node is dead after 15 s of silence (torchrun:
     * 3 missed keep-alives of 5 s). A killed agent's closed connection is
     * noticed at once; the heartbeat is for hung or cut-off nodes. */
    o->rdzv_conf.join_timeout = 600;
    o->rdzv_conf.last_call_timeout = 30;
    o->rdzv_conf.close_timeout = 30;
    o->rdzv_conf.heartbeat_timeout = 15;
    o->rdzv_conf.keep_alive_interval = 1;
    o->rdzv_conf.read_timeout = 60;
    o->rdzv_conf.is_host = -1;
    o->max_restarts = 0;
    o->monitor_interval = 0.1;
    o->term_timeout = 10;
    snprintf(o->role, sizeof o->role, "default");
}

void launch_opts_free(launch_opts *o)
{
    free(o->program_storage);
    o->program_storage = NULL;
}

/* ---- the command line ---- */

static const opt_def *find_long(const char *name, size_t n)
{
    char norm[64];
    if (n >= sizeof norm) return NULL;
    for (size_t i = 0; i < n; i++) norm[i] = name[i] == '_' ? '-' : name[i];
    norm[n] = 0;
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (!strcmp(OPTIONS[i].name, norm)) return &OPTIONS[i];
    return NULL;
}

static const opt_def *find_short(char c)
{
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (OPTIONS[i].short_name == c) return &OPTIONS[i];
    return NULL;
}

static int unknown_option(const char *arg, size_t n, char *err, size_t errlen)
{
    /* Suggest in the user's own spelling: --nproc_per_nod -> --nproc_per_node. */
    int underscored = memchr(arg, '_', n) != NULL;
    const char *name = arg + 2;
    size_t name_len = n >= 2 ? n - 2 : 0;
    suggest sg;
    suggest_init(&sg, name, name_len);
    for (size_t i = 0; i < N_OPTIONS; i++) suggest_offer(&sg, OPTIONS[i].name, OPTIONS[i].name);
    const char *best = suggest_best(&sg);
    if (!best) return errline(err, errlen, "unknown option '%.*s' (see dtrun --help)", (int)n, arg);
    char spelled[64];
    snprintf(spelled, sizeof spelled, "%s", best);
    if (underscored)
        for (char *p = spelled; *p; p++)
            if (*p == '-') *p = '_';
    return errline(err, errlen, "unknown option '%.*s'; did you mean '--%s'?", (int)n, arg, spelled);
}

/* Apply one option's value. `shown` is the option as the user spelled it. */
static int apply(launch_opts *o, opt_id id, const char *v, const char *shown, char *err, size_t errlen)
{
    char why[256];
    long n;
    switch (id) {
    case OPT_NPROC:
        if (!strcmp(v, "cpu") || !strcmp(v, "gpu") || !strcmp(v, "auto")) {
            snprintf(o->nproc_spec, sizeof o->nproc_spec, "%s", v);
        } else {
            if (range_parse_long(v, 1, LAUNCH_MAX_LOCAL, &n, why, sizeof why))
                return errline(err, errlen, "%s: %s; expected a number of workers, 'cpu', 'gpu' or 'auto'",
                               shown, why);
            snprintf(o->nproc_spec, sizeof o->nproc_spec, "%ld", n);
        }
        o->set |= LAUNCH_SET_NPROC;
        return 0;
    case OPT_NNODES:
        if (launch_parse_nnodes(v, &o->nnodes_min, &o->nnodes_max, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->set |= LAUNCH_SET_NNODES;
        return 0;
    case OPT_NODE_RANK:
        if (range_parse_long(v, 0, LAUNCH_MAX_NODES - 1, &n, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->node_rank = (int)n;
        o->set |= LAUNCH_SET_NODE_RANK;
        return 0;
    case OPT_RDZV_ENDPOINT:
        if (launch_parse_endpoint(v, o->rdzv_host, sizeof o->rdzv_host, &o->rdzv_port,
                                  LAUNCH_DEFAULT_RDZV_PORT, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        snprintf(o->rdzv_endpoint, sizeof o->rdzv_endpoint, "%s", v);
        o->set |= LAUNCH_SET_ENDPOINT;
        return 0;
    case OPT_RDZV_ID:
        if (launch_parse_ident(v, o->rdzv_id, sizeof o->rdzv_id, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->set |= LAUNCH_SET_RDZV_ID;
        return 0;
    case OPT_RDZV_CONF:
        if (launch_parse_rdzv_conf(v, &o->rdzv_conf, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        return 0;
    case OPT_RDZV_BACKEND:
        if (strcmp(v, "c10d") && strcmp(v, "static") && strcmp(v, "dtrun"))
            return errline(err, errlen, "%s: '%s' is not supported; use c10d, static or dtrun "
                           "(all meet at dtrun's own rendezvous daemon)", shown, v);
        snprintf(o->rdzv_backend, sizeof o->rdzv_backend, "%s", v);
        o->set |= LAUNCH_SET_BACKEND;
        return 0;
    case OPT_STANDALONE: o->standalone = 1; return 0;
    case OPT_MASTER_ADDR:
        if (launch_parse_host(v, o->master_addr, sizeof o->master_addr, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->set |= LAUNCH_SET_MASTER_ADDR;
        return 0;
    case OPT_MASTER_PORT:
        if (range_parse_long(v, 1, 65535, &n, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->master_port = (int)n;
        o->set |= LAUNCH_SET_MASTER_PORT;
        return 0;
    case OPT_MAX_RESTARTS:
        if (range_parse_long(v, 0, 1000000, &n, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->max_restarts = (int)n;
        o->set |= LAUNCH_SET_MAX_RESTARTS;
        return 0;
    case OPT_MONITOR_INTERVAL:
        if (launch_parse_seconds(v, 0.001, &o->monitor_interval, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        return 0;
    case OPT_TERM_TIMEOUT:
        if (launch_parse_seconds(v, 0, &o->term_timeout, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        return 0;
    case OPT_LOG_DIR:
        if (!*v) return errline(err, errlen, "%s: empty directory name", shown);
        if (strlen(v) >= sizeof o->log_dir) return errline(err, errlen, "%s: path is too long", shown);
        snprintf(o->log_dir, sizeof o->log_dir, "%s", v);
        o->set |= LAUNCH_SET_LOG_DIR;
        return 0;
    case OPT_REDIRECTS:
    case OPT_TEE:
        if (launch_parse_std(v, id == OPT_TEE ? &o->tee : &o->redirects, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->set |= id == OPT_TEE ? LAUNCH_SET_TEE : LAUNCH_SET_REDIRECTS;
        return 0;
    case OPT_RANKS_FILTER:
        if (launch_parse_ranks_filter(v, o->ranks_filter, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->has_ranks_filter = 1;
        return 0;
    case OPT_ROLE:
        if (launch_parse_ident(v, o->role, sizeof o->role, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        return 0;
    case OPT_LOCAL_ADDR:
        if (launch_parse_host(v, o->local_addr, sizeof o->local_addr, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        return 0;
    case OPT_DRY_RUN: o->dry_run = 1; return 0;
    case OPT_PLAN: o->plan = 1; return 0;
    case OPT_NO_FIT_CHECK: o->no_fit_check = 1; return 0;
    case OPT_STRICT_DATA: o->strict_data = 1; return 0;
    case OPT_ALLOW_CHANGES:
        if (!*v) return errline(err, errlen, "%s: empty list (job keys such as train.lr, or all)", shown);
        if (strlen(v) >= sizeof o->allow_changes) return errline(err, errlen, "%s: too long", shown);
        if (job_key_list_check(v, why, sizeof why)) return errline(err, errlen, "%s: %s", shown, why);
        snprintf(o->allow_changes, sizeof o->allow_changes, "%s", v);
        return 0;
    case OPT_HARDWARE:
        if (!*v) return errline(err, errlen, "%s: empty profile name", shown);
        if (strlen(v) >= sizeof o->hardware) return errline(err, errlen, "%s: too long", shown);
        snprintf(o->hardware, sizeof o->hardware, "%s", v);
        return 0;
    case OPT_FORMAT:
        if (strcmp(v, "text") && strcmp(v, "json"))
            return errline(err, errlen, "%s: '%s' is not text or json", shown, v);
        o->format_json = !strcmp(v, "json");
        return 0;
    case OPT_TOP:
        if (range_parse_long(v, 1, 1000, &n, why, sizeof why)) return errline(err, errlen, "%s: %s", shown, why);
        o->top = (int)n;
        return 0;
    case OPT_CALIBRATE:
        if (!*v) return errline(err, errlen, "%s: give the profile to write (a .yaml path, or - for stdout)", shown);
        if (strlen(v) >= sizeof o->calibrate) return errline(err, errlen, "%s: path is too long", shown);
        snprintf(o->calibrate, sizeof o->calibrate, "%s", v);
        return 0;
    case OPT_HEADROOM:
        if (headroom_parse(v, &o->headroom, why, sizeof why)) return errline(err, errlen, "%s: %s", shown, why);
        return 0;
    case OPT_TRACE:
        if (!*v) return errline(err, errlen, "%s: empty file name", shown);
        if (strlen(v) >= sizeof o->trace) return errline(err, errlen, "%s: path is too long", shown);
        snprintf(o->trace, sizeof o->trace, "%s", v);
        o->set |= LAUNCH_SET_TRACE;
        return 0;
    case OPT_PRINT_CONFIG: o->print_config = 1; return 0;
    case OPT_VERSION: o->version = 1; return 0;
    case OPT_HELP: o->help = 1; return 0;
    case OPT_NO_PYTHON:
    case OPT_MODULE:
    case OPT_RUN_PATH: return 0; /* handled by the caller: they shape the program */
    }
    return errline(err, errlen, "%s: not handled", shown);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* --run-path: torchrun runs the script with runpy.run_path inside a process of
 * its own interpreter, its exceptions recorded in TORCHELASTIC_ERROR_FILE as
 * torch's @record writes them. The same, without torch: python3 -c THIS
 * SCRIPT ARGS (sys.argv becomes SCRIPT ARGS). */
static char RUN_PATH_BOOT[] =
    "import json, os, runpy, sys, time, traceback\n"
    "sys.argv = sys.argv[1:]\n"
    "try:\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "except Exception as e:\n"
    "    f = os.environ.get('TORCHELASTIC_ERROR_FILE')\n"
    "    if f:\n"
    "        with open(f, 'w') as fp:\n"
    "            json.dump({'message': {'message': f'{type(e).__name__}: {e}', 'extraInfo': {\n"
    "                'py_callstack': traceback.format_exc(), 'timestamp': str(int(time.time()))}}}, fp)\n"
    "    raise\n";

typedef enum { RUN_AS_IS, RUN_SCRIPT, RUN_MODULE, RUN_PATH } run_form;

/* The program is argv[from..argc-1], with torchrun's words in front for a
 * script.py (python3 -u script.py), --module (python3 -u -m module) or
 * --run-path (python3 -u -c RUN_PATH_BOOT script). */
static int set_program(launch_opts *o, int argc, char **argv, int from, run_form form, char *err, size_t errlen)
{
    int n = argc - from;
    if (n <= 0) return errline(err, errlen, "'--' must be followed by a program to run");
    if (form == RUN_AS_IS) {
        o->program = argv + from;
        o->program_argc = n;
        return 0;
    }
    static char python3[] = "python3", dash_u[] = "-u", dash_m[] = "-m", dash_c[] = "-c";
    char *words[4] = {python3, dash_u, NULL, NULL};
    int extra = 2;
    if (form == RUN_MODULE) words[extra++] = dash_m;
    if (form == RUN_PATH) { words[extra++] = dash_c; words[extra++] = RUN_PATH_BOOT; }
    o->program_storage = calloc((size_t)(n + extra + 1), sizeof(char *));
    if (!o->program_storage) return errline(err, errlen, "out of memory");
    for (int i = 0; i < extra; i++) o->program_storage[i] = words[i];
    for (int i = 0; i < n; i++) o->program_storage[extra + i] = argv[from + i];
    o->python_prepended = 1;
    o->python_target = argv[from];
    o->program = o->program_storage;
    o->program_argc = n + extra;
    return 0;
}

int launch_opts_parse(launch_opts *o, int argc, char **argv, char *err, size_t errlen)
{
    int no_python = 0, module = 0, run_path = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            if (o->job_path)
                return errline(err, errlen, "give a job file or a program after '--', not both ('%s')",
                               o->job_path);
            return set_program(o, argc, argv, i + 1, RUN_AS_IS, err, errlen);
        }
        if (a[0] != '-' || !a[1]) {
            /* A positional word: a job file, or (torchrun's way) a script to run. */
            if (module || no_python || run_path || ends_with(a, ".py")) {
                if (o->job_path)
                    return errline(err, errlen, "give a job file or a program, not both ('%s', '%s')",
                                   o->job_path, a);
                /* torchrun's rules: --run-path wins over --no-python; -m with either is refused */
                if (module && (no_python || run_path))
                    return errline(err, errlen, "-m/--module runs a module with python3: it cannot go with %s",
                                   run_path ? "--run-path (a script file)" : "--no-python");
                run_form form = run_path ? RUN_PATH : module ? RUN_MODULE : no_python ? RUN_AS_IS : RUN_SCRIPT;
                return set_program(o, argc, argv, i, form, err, errlen);
            }
            if (o->job_path)
                return errline(err, errlen, "unexpected argument '%s' after the job file '%s'", a,
                               o->job_path);
            o->job_path = a;
            continue;
        }
        const opt_def *def;
        const char *value = NULL;
        char shown[80];
        if (a[1] == '-') {
            const char *eq = strchr(a, '=');
            size_t n = eq ? (size_t)(eq - a) : strlen(a);
            def = find_long(a + 2, n - 2);
            if (!def) return unknown_option(a, n, err, errlen);
            snprintf(shown, sizeof shown, "%.*s", (int)n, a);
            if (eq) {
                if (!def->takes_value)
                    return errline(err, errlen, "%s takes no value (got '%s')", shown, eq + 1);
                value = eq + 1;
            }
        } else {
            def = find_short(a[1]);
            if (!def) return errline(err, errlen, "unknown option '%s' (see dtrun --help)", a);
            snprintf(shown, sizeof shown, "-%c", a[1]);
            if (a[2]) {
                if (!def->takes_value) return errline(err, errlen, "unknown option '%s' (see dtrun --help)", a);
                value = a[2] == '=' ? a + 3 : a + 2;
            }
        }
        if (def->takes_value && !value) {
            if (i + 1 >= argc) return errline(err, errlen, "%s needs a value", shown);
            value = argv[++i];
        }
        if (def->id == OPT_NO_PYTHON) no_python = 1;
        if (def->id == OPT_MODULE) module = 1;
        if (def->id == OPT_RUN_PATH) run_path = 1;
        if (apply(o, def->id, value ? value : "", shown, err, errlen)) return -1;
    }
    if (module) return errline(err, errlen, "-m/--module needs a module name after it");
    if (run_path) return errline(err, errlen, "--run-path needs a script after it");
    if (no_python) return errline(err, errlen, "--no-python needs a program after it");
    return 0;
}

int launch_opts_merge_job(launch_opts *o, const job_spec *job, char *err, size_t errlen)
{
    const job_launch *l = &job->launch;
    char why[256];
    const char *f = job->path[0] ? job->path : "job";
    if (!(o->set & LAUNCH_SET_NPROC) && l->nproc_per_node[0]) {
        if (apply(o, OPT_NPROC, l->nproc_per_node, "launch.nproc_per_node", why, sizeof why))
            return errline(err, errlen, "%s: %s", f, why);
    }
    if (!(o->set & LAUNCH_SET_NNODES) && l->nnodes[0]) {
        if (apply(o, OPT_NNODES, l->nnodes, "launch.nnodes", why, sizeof why))
            return errline(err, errlen, "%s: %s", f, why);
    }
    if (!(o->set & LAUNCH_SET_ENDPOINT) && l->rdzv_endpoint[0]) {
        if (apply(o, OPT_RDZV_ENDPOINT, l->rdzv_endpoint, "launch.rdzv_endpoint", why, sizeof why))
            return errline(err, errlen, "%s: %s", f, why);
    }
    if (!(o->set & LAUNCH_SET_RDZV_ID) && l->rdzv_id[0]) {
        if (apply(o, OPT_RDZV_ID, l->rdzv_id, "launch.rdzv_id", why, sizeof why))
            return errline(err, errlen, "%s: %s", f, why);
    }
    if (!(o->set & LAUNCH_SET_MAX_RESTARTS) && l->max_restarts >= 0) {
        if (l->max_restarts > 1000000)
            return errline(err, errlen, "%s: launch.max_restarts: %d is out of range (0..1000000)", f,
                           l->max_restarts);
        o->max_restarts = l->max_restarts;
        o->set |= LAUNCH_SET_MAX_RESTARTS;
    }
    if (!(o->set & LAUNCH_SET_LOG_DIR) && l->log_dir[0]) {
        if (apply(o, OPT_LOG_DIR, l->log_dir, "launch.log_dir", why, sizeof why))
            return errline(err, errlen, "%s: %s", f, why);
    }
    return 0;
}

void launch_opts_to_job(const launch_opts *o, job_spec *job)
{
    job_launch *l = &job->launch;
    if (o->set & LAUNCH_SET_NPROC) snprintf(l->nproc_per_node, sizeof l->nproc_per_node, "%s", o->nproc_spec);
    if (o->set & LAUNCH_SET_NNODES) {
        if (o->nnodes_min == o->nnodes_max) snprintf(l->nnodes, sizeof l->nnodes, "%d", o->nnodes_max);
        else snprintf(l->nnodes, sizeof l->nnodes, "%d:%d", o->nnodes_min, o->nnodes_max);
    }
    if (o->set & LAUNCH_SET_ENDPOINT) snprintf(l->rdzv_endpoint, sizeof l->rdzv_endpoint, "%s", o->rdzv_endpoint);
    if (o->set & LAUNCH_SET_RDZV_ID) snprintf(l->rdzv_id, sizeof l->rdzv_id, "%s", o->rdzv_id);
    if (o->set & LAUNCH_SET_MAX_RESTARTS) l->max_restarts = o->max_restarts;
    if (o->set & LAUNCH_SET_LOG_DIR) snprintf(l->log_dir, sizeof l->log_dir, "%s", o->log_dir);
    /* --trace is the job's log.trace given on the command line */
    if (o->set & LAUNCH_SET_TRACE) snprintf(job->log.trace, sizeof job->log.trace, "%s", o->trace);
}

