/* dtrun — command-line entry. Thin: parse, call lib/ and runtime/, map errors to
 * exit statuses (documented in man/dtrun.1).
 *
 *   dtrun [options] job.yaml           launch workers that train the job
 *   dtrun [options] -- PROGRAM ARGS    launch any program, like torchrun
 *   dtrun [options] script.py ARGS     torchrun's way: python3 script.py ARGS
 *   dtrun --print-config job.yaml      print the resolved job
 *   dtrun --dry-run | --plan job.yaml  what the run will cost / the best layouts
 *   dtrun worker job.yaml              one worker (what the agent starts)
 *   dtrun export CKPT out.safetensors  one consolidated file, Hugging Face names
 *   dtrun rdzv --listen HOST:PORT      a standalone rendezvous daemon
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/launch/agent.h"
#include "lib/job/jobspec.h"
#include "lib/launch/launch_opts.h"
#include "lib/rdzv/rdzv_cmd.h"
#include "lib/launch/slurm.h"
#include "runtime/ckpt/ckpt.h"
#include "runtime/plan/plan.h"
#include "runtime/train/train.h"

#define DTRUN_VERSION "0.1.0"

static int usage(void)
{
    FILE *out = stdout;
    fprintf(out,
            "usage: dtrun [options] job.yaml\n"
            "       dtrun [options] -- PROGRAM [ARGS...]\n"
            "       dtrun [options] script.py [ARGS...]      (python3 script.py)\n"
            "       dtrun --print-config job.yaml\n"
            "       dtrun worker job.yaml\n"
            "       dtrun export CKPT out.safetensors   (CKPT: checkpoint dir or step dir)\n"
            "       dtrun rdzv --listen HOST:PORT [...]\n"
            "options (torchrun's names; '-' or '_', --opt=V or --opt V):\n"
            "  --nproc-per-node N|cpu|gpu|auto   workers on this node (auto: GPUs, else 1)\n"
            "  --nnodes N|MIN:MAX                nodes (default 1)\n"
            "  --node-rank R                     this node's rank (default: join order)\n"
            "  --rdzv-endpoint HOST[:PORT]       where the agents meet (port 29400)\n"
            "  --rdzv-id ID  --rdzv-backend c10d|static|dtrun  --rdzv-conf K=V,...\n"
            "  --standalone                      one node, rendezvous on a free local port\n"
            "  --master-addr A --master-port P   MASTER_ADDR/PORT for the workers\n"
            "  --max-restarts N                  restart the group N times on failure\n"
            "  --monitor-interval S --term-timeout S --role NAME --local-addr A\n"
            "  --log-dir DIR  -r/--redirects STD  -t/--tee STD  --local-ranks-filter R,...\n"
            "  --no-python  -m/--module  --print-config  --version  --help\n"
            "  --trace FILE                      merged Chrome trace of every rank (log.trace)\n"
            "  --dry-run | --plan [--hardware NAME|PATH] [--format text|json] [--top K]\n"
            "see dtrun(1) and dtrun-job(5)\n");
    return 0;
}

/* dtrun export CKPT OUT: the checkpoint (verified: checksums, placements) as
 * one safetensors file under Hugging Face GPT-2 / timm ViT names. */
static int export_command(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "dtrun: usage: dtrun export CKPT out.safetensors (CKPT: a checkpoint directory or "
                        "one of its step directories)\n");
        return DT_EXIT_USAGE;
    }
    char err[2048];
    ckpt *ck;
    if (ckpt_open(argv[2], &ck, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun: export: %s\n", err);
        return DT_EXIT_CKPT;
    }
    int rc = ckpt_export(ck, argv[3], CKPT_NAMES_AUTO, err, sizeof err);
    if (rc != 0) fprintf(stderr, "dtrun: export: %s\n", err);
    else fprintf(stderr, "dtrun: exported %s (step %ld) to %s\n", ckpt_path(ck), ckpt_get_info(ck)->step, argv[3]);
    ckpt_close(ck);
    return rc != 0 ? DT_EXIT_CKPT : 0;
}

static int load_job(job_spec *job, const char *path)
{
    char err[1024];
    if (job_load_file(job, path, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun: %s\n", err);
        return DT_EXIT_USAGE;
    }
    return 0;
}

/* What the dry-run and the planner model but the trainer cannot run yet: bf16
 * mixed precision (issue 7; the kernels are fp32 twins). Refused before any
 * worker starts, rather than silently training in fp32 against the memory and
 * speed the dry-run promised. */
static int refuse_untrainable(const job_spec *job)
{
    if (job->train.precision != PREC_BF16) return 0;
    fprintf(stderr, "dtrun: %s: train.precision bf16 cannot train yet: every kernel computes in fp32 "
                    "(use precision: fp32; --dry-run and --plan do model bf16 mixed precision)\n",
            job->path);
    return DT_EXIT_USAGE;
}

static int launch(launch_opts *o)
{
    static job_spec job;
    char err[2048], note[512];
    if (o->job_path) {
        int rc = load_job(&job, o->job_path);
        if (rc) return rc;
        if (launch_opts_merge_job(o, &job, err, sizeof err) != 0) {
            fprintf(stderr, "dtrun: %s\n", err);
            return DT_EXIT_USAGE;
        }
    }
    if (o->print_config) {
        if (!o->job_path) {
            fprintf(stderr, "dtrun: --print-config needs a job file\n");
            return DT_EXIT_USAGE;
        }
        launch_opts_to_job(o, &job);
        job_print(&job, stdout);
        return 0;
    }
    if (o->dry_run || o->plan) {
        if (!o->job_path) {
            fprintf(stderr, "dtrun: %s needs a job file\n", o->plan ? "--plan" : "--dry-run");
            return DT_EXIT_USAGE;
        }
        /* The planner reads nnodes / nproc_per_node from the launch section, so
         * the command line's values go there; nothing is started. */
        launch_opts_to_job(o, &job);
        /* dp: auto plans the full-size round: MAX nodes x the numeric nproc */
        int nproc = atoi(job.launch.nproc_per_node), nodes = 1;
        const char *colon = strchr(job.launch.nnodes, ':');
        if (job.launch.nnodes[0]) nodes = atoi(colon ? colon + 1 : job.launch.nnodes);
        if (job.parallel.dp_auto && nproc > 0 && nodes > 0 &&
            job_resolve_world(&job, nproc * nodes, err, sizeof err) != 0) {
            fprintf(stderr, "dtrun: %s\n", err);
            return DT_EXIT_USAGE;
        }
        dryrun_opts d = {.hardware = o->hardware[0] ? o->hardware : NULL,
                         .format = o->format_json ? DRYRUN_JSON : DRYRUN_TEXT,
                         .top = o->top};
        int rc = o->plan ? plan_run(&job, &d, stdout, err, sizeof err)
                         : dryrun_run(&job, &d, stdout, err, sizeof err);
        if (rc != 0) fprintf(stderr, "dtrun: %s\n", err);
        return rc;
    }
    int in_slurm = slurm_apply(o, slurm_getenv, NULL, note, sizeof note, err, sizeof err);
    if (in_slurm < 0) {
        fprintf(stderr, "dtrun: %s\n", err);
        return DT_EXIT_USAGE;
    }
    if (launch_opts_finish(o, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun: %s\n", err);
        return DT_EXIT_USAGE;
    }
    if (in_slurm && o->nnodes_max > 1) fprintf(stderr, "dtrun: %s\n", note);
    if (o->python_path[0])
        fprintf(stderr, "dtrun: running %s with %s (the first python3 on PATH)\n",
                o->program[1], o->python_path);
    /* --trace reaches the workers as DTRUN_TRACE, over the job's log.trace */
    if (o->trace[0] && setenv("DTRUN_TRACE", o->trace, 1) != 0) {
        fprintf(stderr, "dtrun: --trace: cannot set DTRUN_TRACE\n");
        return DT_EXIT_USAGE;
    }
    if (o->job_path) {
        int rc = refuse_untrainable(&job);
        if (rc) return rc;
        /* The built-in trainer: this very binary, even if it is replaced on disk. */
        char *worker_argv[] = {"dtrun", "worker", (char *)o->job_path, NULL};
        return agent_run(o, "/proc/self/exe", worker_argv);
    }
    return agent_run(o, o->program[0], o->program);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "dtrun: nothing to run: give a job file (dtrun job.yaml) or a program "
                        "(dtrun -- PROGRAM ARGS); see dtrun --help\n");
        return DT_EXIT_USAGE;
    }
    const char *a = argv[1];
    if (!strcmp(a, AGENT_CHILD_GUARD_FLAG)) return agent_child_guard_main(argc, argv);
    if (!strcmp(a, AGENT_WATCHDOG_FLAG)) return agent_watchdog_main(argc, argv);
    if (!strcmp(a, "worker")) {
        static job_spec job;
        if (argc != 3) {
            fprintf(stderr, "dtrun: usage: dtrun worker job.yaml (the agent starts workers this way)\n");
            return DT_EXIT_USAGE;
        }
        int rc = load_job(&job, argv[2]);
        if (!rc) rc = refuse_untrainable(&job);
        return rc ? rc : train_run(&job);
    }
    if (!strcmp(a, "rdzv")) return rdzv_command(argc - 1, argv + 1);
    if (!strcmp(a, "export")) return export_command(argc, argv);

    static launch_opts o;
    char err[1024];
    launch_opts_defaults(&o);
    if (launch_opts_parse(&o, argc, argv, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun: %s\n", err);
        launch_opts_free(&o);
        return DT_EXIT_USAGE;
    }
    int rc;
    if (o.help) rc = usage();
    else if (o.version) rc = (printf("dtrun %s\n", DTRUN_VERSION), 0);
    else rc = launch(&o);
    launch_opts_free(&o);
    return rc;
}
