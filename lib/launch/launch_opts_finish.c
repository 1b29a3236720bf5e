/* launch_opts_finish.c — after every source was merged: what the machine has
 * (CPUs, GPUs) decides nproc cpu/gpu/auto, and the combination of options is
 * checked as a whole (--standalone, the static backend, node rank, endpoint). */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/launch/launch_opts.h"
#include "lib/util/errline.h"

int launch_count_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int launch_count_gpus(void)
{
    /* No CUDA in lib/: CUDA_VISIBLE_DEVICES says what a process may use, the
     * driver's /proc entries say what exists. */
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis) {
        int n = 0;
        const char *p = vis;
        while (*p) {
            size_t len = strcspn(p, ",");
            /* CUDA stops at the first invalid entry, e.g. "-1" hides every GPU. */
            if (len == 0 || p[0] == '-') break;
            n++;
            p += len;
            if (*p == ',') p++;
        }
        return n;
    }
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* --trace FILE: absolute (the workers may not share the launcher's idea of the
 * current directory forever), in a directory that exists and is writable, so a
 * bad path is an error now and not after the training ran. */
static int finish_trace(launch_opts *o, char *err, size_t errlen)
{
    if (!(o->set & LAUNCH_SET_TRACE)) return 0;
    char abs[JOB_PATH_MAX], dir[JOB_PATH_MAX], cwd[JOB_PATH_MAX];
    if (o->trace[0] == '/') {
        snprintf(abs, sizeof abs, "%s", o->trace);
    } else {
        if (!getcwd(cwd, sizeof cwd)) return errline(err, errlen, "--trace %s: no current directory (%s)", o->trace,
                                                     strerror(errno));
        if ((size_t)snprintf(abs, sizeof abs, "%s/%s", cwd, o->trace) >= sizeof abs)
            return errline(err, errlen, "--trace %s: path is too long", o->trace);
    }
    snprintf(dir, sizeof dir, "%s", abs);
    char *slash = strrchr(dir, '/');
    if (slash == dir) dir[1] = 0;
    else if (slash) *slash = 0;
    if (slash && slash[1] == 0 && slash != dir) return errline(err, errlen, "--trace %s: names a directory", o->trace);
    if (access(dir, W_OK) != 0)
        return errline(err, errlen, "--trace %s: cannot write in %s (%s)", o->trace, dir, strerror(errno));
    snprintf(o->trace, sizeof o->trace, "%s", abs);
    return 0;
}

/* The first executable NAME in $PATH, as execvp would pick it, into out. */
static int find_on_path(const char *name, char *out, size_t n)
{
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path;;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        /* an empty entry means the current directory, as for execvp */
        if ((size_t)snprintf(out, n, "%.*s%s%s", (int)len, len ? p : ".", "/", name) < n &&
            access(out, X_OK) == 0) {
            struct stat st;
            if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) return 0;
        }
        if (!end) break;
        p = end + 1;
    }
    out[0] = 0;
    return -1;
}

/* `dtrun script.py` runs $PYTHON_EXEC when set, else the first python3 on
 * PATH, as torchrun runs PYTHON_EXEC or its own interpreter: pin it (every
 * worker runs the same file) so the agent can say which it is. */
static int finish_python(launch_opts *o, char *err, size_t errlen)
{
    if (!o->python_prepended) return 0;
    const char *exec = getenv("PYTHON_EXEC");
    if (exec && *exec) {
        if (strchr(exec, '/')) snprintf(o->python_path, sizeof o->python_path, "%s", exec);
        else if (find_on_path(exec, o->python_path, sizeof o->python_path) != 0)
            return errline(err, errlen, "PYTHON_EXEC=%s: not found on PATH", exec);
        o->python_from_env = 1;
    } else if (find_on_path("python3", o->python_path, sizeof o->python_path) != 0) {
        return errline(err, errlen, "'%s' runs with python3, but there is no python3 on PATH; install it, or "
                       "name the interpreter: dtrun -- /path/to/python %s", o->python_target, o->python_target);
    }
    o->program[0] = o->python_path;
    return 0;
}

int launch_opts_finish(launch_opts *o, char *err, size_t errlen)
{
    if (finish_trace(o, err, errlen)) return -1;
    if (finish_python(o, err, errlen)) return -1;
    if (!strcmp(o->nproc_spec, "cpu")) {
        o->nproc = launch_count_cpus();
    } else if (!strcmp(o->nproc_spec, "gpu")) {
        o->nproc = launch_count_gpus();
        if (o->nproc == 0)
            return errline(err, errlen, "--nproc-per-node=gpu: this machine has no GPU that dtrun can "
                           "see (no /proc/driver/nvidia/gpus, or CUDA_VISIBLE_DEVICES hides them); "
                           "give a number or 'cpu'");
    } else if (!strcmp(o->nproc_spec, "auto")) {
        int g = launch_count_gpus();
        o->nproc = g > 0 ? g : 1;
    } else {
        o->nproc = atoi(o->nproc_spec);
    }
    if (o->nproc > LAUNCH_MAX_LOCAL) o->nproc = LAUNCH_MAX_LOCAL;

    if (o->standalone) {
        if (o->nnodes_max > 1)
        {
            char nodes[32];
            if (o->nnodes_min == o->nnodes_max) snprintf(nodes, sizeof nodes, "%d nodes", o->nnodes_max);
            else snprintf(nodes, sizeof nodes, "%d to %d nodes", o->nnodes_min, o->nnodes_max);
            return errline(err, errlen, "--standalone runs one node, but --nnodes asks for %s; drop "
                           "--standalone and give --rdzv-endpoint HOST[:PORT], or drop --nnodes", nodes);
        }
        if (o->set & LAUNCH_SET_ENDPOINT)
            return errline(err, errlen, "--standalone starts its own rendezvous on a free port; "
                           "drop --rdzv-endpoint '%s' or --standalone", o->rdzv_endpoint);
    }
    if (!strcmp(o->rdzv_backend, "static")) {
        /* torchrun's static backend meets at MASTER_ADDR:MASTER_PORT and takes
         * the node rank from the command line. */
        if (!(o->set & LAUNCH_SET_ENDPOINT) && o->master_addr[0]) {
            snprintf(o->rdzv_host, sizeof o->rdzv_host, "%s", o->master_addr);
            o->rdzv_port = o->master_port ? o->master_port : LAUNCH_DEFAULT_RDZV_PORT;
            snprintf(o->rdzv_endpoint, sizeof o->rdzv_endpoint, "%s:%d", o->master_addr, o->rdzv_port);
            o->set |= LAUNCH_SET_ENDPOINT;
            /* the rendezvous owns that port now; workers get a free one */
            o->master_port = 0;
            o->set &= ~LAUNCH_SET_MASTER_PORT;
        }
        if (o->nnodes_max > 1 && o->node_rank < 0)
            return errline(err, errlen, "--rdzv-backend=static needs --node-rank when --nnodes is %d",
                           o->nnodes_max);
        if (o->nnodes_min != o->nnodes_max)
            return errline(err, errlen, "--rdzv-backend=static needs a fixed --nnodes, not %d:%d",
                           o->nnodes_min, o->nnodes_max);
    }
    if (o->node_rank >= 0 && o->node_rank >= o->nnodes_max)
        return errline(err, errlen, "--node-rank=%d is not below --nnodes=%d", o->node_rank,
                       o->nnodes_max);
    if (o->nnodes_max > 1 && !o->rdzv_host[0])
        return errline(err, errlen, "--nnodes=%d needs --rdzv-endpoint HOST[:PORT], where the "
                       "agents of all nodes meet", o->nnodes_max);
    if ((o->set & LAUNCH_SET_MASTER_ADDR) && !(o->set & LAUNCH_SET_MASTER_PORT) &&
        strcmp(o->rdzv_backend, "static"))
        return errline(err, errlen, "--master-addr needs --master-port as well (a port where the "
                       "workers' rank 0 listens)");
    if (!o->job_path && !o->program)
        return errline(err, errlen, "nothing to run: give a job file (dtrun job.yaml) or a program "
                       "(dtrun -- PROGRAM ARGS)");
    if (!o->rdzv_id[0]) {
        /* One node: any unique id. Several: they must agree, so the user (or
         * Slurm) names the run; "none" matches torchrun's default. */
        if (o->nnodes_max == 1) snprintf(o->rdzv_id, sizeof o->rdzv_id, "run-%ld", (long)getpid());
        else snprintf(o->rdzv_id, sizeof o->rdzv_id, "none");
    }
    return 0;
}

