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
 *   dtrun generate CKPT|HF_DIR ...     sample text (runtime/infer/generate.h)
 *   dtrun eval CKPT|HF_DIR --data F    loss and perplexity (runtime/infer/eval.h)
 *   dtrun classify CKPT|HF_DIR IMG...  a ViT's top classes (runtime/infer/classify.h)
 *   dtrun rdzv --listen HOST:PORT      a standalone rendezvous daemon
 *   dtrun tokenize FILE... -o PREFIX   text to GPT-2 token shards
 *   dtrun plot RUN.jsonl... -o F.svg   curves of runs
 *   dtrun inspect CKPT                 what produced a checkpoint (runtime/train/provenance.h)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/util/build_info.h"
#include "lib/util/cmdline.h"
#include "runtime/train/provenance.h"
#include "lib/launch/agent.h"
#include "lib/launch/launch_check.h"
#include "lib/job/jobspec.h"
#include "lib/launch/launch_opts.h"
#include "lib/rdzv/rdzv_cmd.h"
#include "lib/plot/plot_cmd.h"
#include "lib/text/tokenize_cmd.h"
#include "lib/launch/slurm.h"
#include "runtime/ckpt/ckpt.h"
#include "runtime/infer/classify.h"
#include "runtime/infer/eval.h"
#include "runtime/infer/generate.h"
#include "runtime/plan/calibrate.h"
#include "runtime/plan/plan.h"
#include "runtime/train/preflight.h"
#include "runtime/train/train.h"



static int usage(void)
{
    FILE *out = stdout;
    fprintf(out,
            "usage: dtrun [options] job.yaml\n"
            "       dtrun [options] -- PROGRAM [ARGS...]\n"
            "       dtrun [options] script.py [ARGS...]      (python3 -u script.py)\n"
            "       dtrun --print-config job.yaml\n"
            "       dtrun worker job.yaml\n"
            "       dtrun export [--dtype fp32|bf16] [--max-shard-size SIZE] CKPT out.safetensors|OUTDIR/\n"
            "                                         (CKPT: checkpoint dir or step dir;\n"
            "                                         OUTDIR/: a Hugging Face folder with config.json)\n"
            "       dtrun generate CKPT|HF_DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-new-tokens N]\n"
            "                      [--temperature T] [--top-k K] [--top-p P] [--seed S] [--tp N] [--pp N] [--ids]\n"
            "       dtrun eval CKPT|HF_DIR --data FILE [--dp N --tp N --pp N --mode M --batch B --seq-len T]\n"
            "       dtrun classify CKPT|HF_DIR (IMAGE... | --data IDX_IMAGES [--labels FILE]) [--top-k K] [--batch B]\n"
            "       dtrun rdzv --listen HOST:PORT [...]\n"
            "       dtrun tokenize [--tokenizer tokenizer.json] FILE... -o PREFIX   (text to token shards)\n"
            "       dtrun plot RUN.jsonl... -o curves.svg          (loss, throughput, memory as SVG)\n"
            "       dtrun inspect CKPT                          (what produced a checkpoint)\n"
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
            "  --no-python  -m/--module  --run-path  --print-config  --version  --help\n"
            "  --trace FILE                      merged Chrome trace of every rank (log.trace)\n"
            "  --no-fit-check                    start a job the dry-run says does not fit in memory\n"
            "  --strict-data                     resuming with data files changed since the checkpoint is an error\n"
            "  --allow-changes KEY,...|all       resume although the job changed these keys (e.g. train.lr)\n"
            "  --dry-run | --plan [--hardware NAME|PATH] [--format text|json] [--top K] [--headroom 5%%|4GiB]\n"
            "  --calibrate FILE.yaml             measure this host's CPU backend, write a cpu hardware profile\n"
            "see dtrun(1) and dtrun-job(5)\n");
    return 0;
}

/* dtrun export [--dtype fp32|bf16] [--max-shard-size SIZE] CKPT OUT: the
 * checkpoint (verified: checksums, placements) as one safetensors file under
 * Hugging Face GPT-2 / Llama / timm ViT names, or a Hugging Face folder (OUT/),
 * sharded above SIZE; F32 (default) or BF16 (the fp32 parameters rounded to
 * nearest even). */
static const char EXPORT_USAGE[] =
    "usage: dtrun export [--dtype fp32|bf16] CKPT out.safetensors\n"
    "       dtrun export [--dtype fp32|bf16] [--max-shard-size SIZE] CKPT OUTDIR/\n"
    "       dtrun export --lora merged|adapter [--dtype fp32|bf16] CKPT OUTDIR/\n"
    "  CKPT                   a checkpoint directory or one of its step directories\n"
    "  out.safetensors        one file, Hugging Face names (GPT-2's, Llama's, timm's ViT)\n"
    "  OUTDIR/                a Hugging Face folder (a name ending in '/' or an existing directory):\n"
    "                         config.json + model.safetensors, as model.init_from reads\n"
    "  --dtype fp32|bf16      the tensors' type (default fp32; bf16 rounds to nearest even)\n"
    "  --max-shard-size SIZE  OUTDIR/ in shards of at most SIZE (5GB, 200MB, 1000) with\n"
    "                         model.safetensors.index.json, as transformers' save_pretrained\n"
    "  --lora merged|adapter  a train.lora checkpoint to OUTDIR/: merged, the base (model.init_from)\n"
    "                         with alpha/r B A folded in, a Hugging Face folder; adapter, a PEFT\n"
    "                         folder (adapter_config.json + adapter_model.safetensors)\n"
    "  -h, --help             this text\n";

static int export_command(int argc, char **argv)
{
    const char *pos[2] = {NULL, NULL};
    int n_pos = 0, bf16 = 0, lora = -1; /* --lora: 0 merged, 1 adapter */
    uint64_t max_shard = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cmdline_is_help(a)) {
            fputs(EXPORT_USAGE, stdout);
            return 0;
        }
        /* --max-shard-size SIZE: transformers' save_pretrained(max_shard_size=): 5GB, 200MB, 1000 */
        if (!strcmp(a, "--max-shard-size") || !strncmp(a, "--max-shard-size=", 17)) {
            const char *sz = a[16] == '=' ? a + 17 : i + 1 < argc ? argv[++i] : NULL;
            char *end = NULL;
            double x = sz ? strtod(sz, &end) : 0;
            double unit = !end ? 0 : !*end ? 1 : !strcmp(end, "KB") ? 1e3 : !strcmp(end, "MB") ? 1e6
                        : !strcmp(end, "GB") ? 1e9 : !strcmp(end, "KiB") ? 1024.0 : !strcmp(end, "MiB") ? 1048576.0
                        : !strcmp(end, "GiB") ? 1073741824.0 : 0;
            if (!sz || end == sz || unit == 0 || !(x * unit >= 1) || x * unit > 1e18) {
                fprintf(stderr, "dtrun export: --max-shard-size '%s': want bytes, or a number with KB, MB, GB, KiB, "
                                "MiB or GiB\n", sz ? sz : "");
                return DT_EXIT_USAGE;
            }
            max_shard = (uint64_t)(x * unit);
            continue;
        }
        if (!strcmp(a, "--lora") || !strncmp(a, "--lora=", 7)) {
            const char *how = a[6] == '=' ? a + 7 : i + 1 < argc ? argv[++i] : "";
            if (strcmp(how, "merged") && strcmp(how, "adapter")) {
                fprintf(stderr, "dtrun export: --lora '%s': want merged or adapter\n", how);
                return DT_EXIT_USAGE;
            }
            lora = !strcmp(how, "adapter");
            continue;
        }
        if (!strcmp(a, "--dtype")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "dtrun export: --dtype needs a value: fp32 or bf16\n");
                return DT_EXIT_USAGE;
            }
            v = argv[++i];
        } else if (!strncmp(a, "--dtype=", 8)) {
            v = a + 8;
        } else if (a[0] == '-' && a[1]) {
            return cmdline_unknown_option("export", a, EXPORT_USAGE);
        } else if (n_pos < 2) {
            pos[n_pos++] = a;
            continue;
        } else {
            fprintf(stderr, "dtrun export: one checkpoint and one output, not '%s' too (dtrun export --help)\n", a);
            return DT_EXIT_USAGE;
        }
        if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16")) bf16 = 1;
        else if (!strcmp(v, "fp32") || !strcmp(v, "float32")) bf16 = 0;
        else {
            fprintf(stderr, "dtrun export: --dtype '%s': want fp32 or bf16\n", v);
            return DT_EXIT_USAGE;
        }
    }
    if (n_pos != 2) {
        fprintf(stderr, "dtrun export: give a checkpoint and an output (out.safetensors or OUTDIR/) (dtrun export --help)\n");
        return DT_EXIT_USAGE;
    }
    char err[2048];
    ckpt *ck;
    if (ckpt_open(pos[0], &ck, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun export: %s\n", err);
        return DT_EXIT_CKPT;
    }
    /* OUT a folder (ends with '/' or exists): a Hugging Face folder, config.json included */
    size_t n_out = strlen(pos[1]);
    struct stat st;
    int to_dir = (n_out && pos[1][n_out - 1] == '/') || (stat(pos[1], &st) == 0 && S_ISDIR(st.st_mode));
    if (lora >= 0 && (!to_dir || max_shard)) {
        fprintf(stderr, "dtrun export: --lora writes a folder, whole: give OUTDIR/%s\n",
                max_shard ? ", without --max-shard-size" : "");
        ckpt_close(ck);
        return DT_EXIT_USAGE;
    }
    if (max_shard && !to_dir) {
        fprintf(stderr, "dtrun export: --max-shard-size shards a Hugging Face folder: give OUTDIR/, not a file\n");
        ckpt_close(ck);
        return DT_EXIT_USAGE;
    }
    int rc = lora >= 0 ? ckpt_export_lora(ck, pos[1], lora, bf16, err, sizeof err)
             : to_dir  ? ckpt_export_hf_dir_sharded(ck, pos[1], bf16, max_shard, err, sizeof err)
                       : ckpt_export_as(ck, pos[1], CKPT_NAMES_AUTO, bf16, err, sizeof err);
    if (rc != 0) fprintf(stderr, "dtrun export: %s\n", err);
    else fprintf(stderr, "dtrun: exported %s (step %ld) to %s\n", ckpt_path(ck), ckpt_get_info(ck)->step, pos[1]);
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

static int launch(launch_opts *o)
{
    static job_spec job;
    char err[2048], note[512];
    unsigned cli_set = o->set; /* before the job's launch section fills the rest */
    if (o->calibrate[0]) { /* measures this host: no job, nothing launched */
        int rc = plan_calibrate(o->calibrate, stderr, err, sizeof err);
        if (rc != 0) fprintf(stderr, "dtrun: %s\n", err);
        return rc;
    }
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
        /* A launch's own numbers (--nproc-per-node N, --nnodes) must fit the job as
         * the launch would require: a dry-run of what cannot start says so. (The
         * plan chooses the layout for them instead.) */
        if (!o->plan && nproc > 0 && nodes > 0 && ((cli_set & (LAUNCH_SET_NPROC | LAUNCH_SET_NNODES)) ||
                                       job.launch.nproc_per_node[0] || job.launch.nnodes[0])) {
            launch_opts w = *o;
            w.nproc = nproc;
            w.nnodes_max = nodes;
            w.nnodes_min = colon ? atoi(job.launch.nnodes) : nodes;
            if (launch_check_world(&w, cli_set, &job, err, sizeof err) != 0) {
                fprintf(stderr, "dtrun: %s\n", err);
                return DT_EXIT_USAGE;
            }
        }
        dryrun_opts d = {.hardware = o->hardware[0] ? o->hardware : NULL,
                         .format = o->format_json ? DRYRUN_JSON : DRYRUN_TEXT,
                         .top = o->top, .headroom = o->headroom};
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
        fprintf(stderr, "dtrun: running %s with %s (%s)\n", o->python_target, o->python_path,
                o->python_from_env ? "PYTHON_EXEC" : "the first python3 on PATH");
    /* --hardware reaches the workers as DTRUN_HARDWARE: the peak their MFU is measured against */
    if (o->hardware[0] && setenv("DTRUN_HARDWARE", o->hardware, 1) != 0) {
        fprintf(stderr, "dtrun: --hardware: cannot set DTRUN_HARDWARE\n");
        return DT_EXIT_USAGE;
    }
    /* --trace reaches the workers as DTRUN_TRACE, over the job's log.trace */
    if (o->trace[0] && setenv("DTRUN_TRACE", o->trace, 1) != 0) {
        fprintf(stderr, "dtrun: --trace: cannot set DTRUN_TRACE\n");
        return DT_EXIT_USAGE;
    }
    if (o->job_path) {
        int rc;
        if (launch_check_world(o, cli_set, &job, err, sizeof err) != 0) {
            fprintf(stderr, "dtrun: %s\n", err);
            return DT_EXIT_USAGE;
        }
        preflight_opts po = {.nproc_per_node = o->nproc, .nnodes = o->nnodes_max,
                             .take_locks = o->nnodes_max == 1 || o->node_rank == 0,
                             .check_fit = !o->no_fit_check, .hardware = o->hardware[0] ? o->hardware : NULL,
                             .on_gpu = job.train.device == DEVICE_CUDA ||
                                       (job.train.device == DEVICE_AUTO && launch_count_gpus() > 0),
                             .allow_changes = o->allow_changes};
        preflight_locks locks;
        char finished[2048];
        rc = preflight_job(&job, &po, &locks, finished, sizeof finished, err, sizeof err);
        if (rc != 0) {
            fprintf(stderr, "dtrun: %s\n", err);
            return rc;
        }
        if (finished[0]) { /* what the run does: nothing (stdout), exit 0 */
            printf("dtrun: %s\n", finished);
            return 0;
        }
        /* the workers inherit them (runtime/env.h) */
        if (o->strict_data) setenv("DTRUN_STRICT_DATA", "1", 1);
        if (o->allow_changes[0]) setenv("DTRUN_ALLOW_CHANGES", o->allow_changes, 1);
        /* The built-in trainer: this very binary, even if it is replaced on disk. */
        char *worker_argv[] = {"dtrun", "worker", (char *)o->job_path, NULL};
        rc = agent_run(o, "/proc/self/exe", worker_argv);
        preflight_release(&locks);
        return rc;
    }
    return agent_run(o, o->program[0], o->program);
}

static const char WORKER_USAGE[] =
    "usage: dtrun worker job.yaml\n"
    "  one training worker of the job, as the agent starts it (RANK, WORLD_SIZE, ... in the\n"
    "  environment; alone it is a run of one process)\n"
    "  -h, --help             this text\n";
static const char INSPECT_USAGE[] =
    "usage: dtrun inspect CKPT\n"
    "  what produced a checkpoint (a checkpoint directory or one of its step directories): dtrun's\n"
    "  version and commit, the launch command, the environment, layout and hardware, data hashes\n"
    "  -h, --help             this text\n";

/* The subcommands, for a did-you-mean when the first word is none of them. */
static const char *const SUBCOMMANDS[] = {"worker", "export", "generate", "eval", "classify", "rdzv",
                                          "tokenize", "plot", "inspect", NULL};

/* A first word that names no file, looks like no job or script, and is a
 * plausible misspelling of a subcommand ("genrate", "tokenise"): the
 * did-you-mean, instead of a launch of a program that is not there. */
static int misspelt_subcommand(const char *a)
{
    struct stat st;
    size_t n = strlen(a);
    if (a[0] == '-' || stat(a, &st) == 0 || strchr(a, '/') ||
        (n > 5 && (!strcmp(a + n - 5, ".yaml") || !strcmp(a + n - 4, ".yml"))) || (n > 3 && !strcmp(a + n - 3, ".py")))
        return 0;
    const char *best = cmdline_suggest_command(a, SUBCOMMANDS);
    if (!best) return 0;
    fprintf(stderr, "dtrun: unknown command '%s'; did you mean 'dtrun %s'? (dtrun --help)\n", a, best);
    return 1;
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
    if (!strcmp(a, "worker")) {
        static job_spec job;
        if (argc == 3 && cmdline_is_help(argv[2])) return fputs(WORKER_USAGE, stdout), 0;
        if (argc == 3 && argv[2][0] == '-') return cmdline_unknown_option("worker", argv[2], WORKER_USAGE);
        if (argc != 3) {
            fprintf(stderr, "dtrun: usage: dtrun worker job.yaml (the agent starts workers this way)\n");
            return DT_EXIT_USAGE;
        }
        int rc = load_job(&job, argv[2]);
        return rc ? rc : train_run(&job);
    }
    if (!strcmp(a, "rdzv")) return rdzv_command(argc - 1, argv + 1);
    if (!strcmp(a, "export")) return export_command(argc, argv);
    if (!strcmp(a, "tokenize")) return tokenize_main(argc - 1, argv + 1);
    if (!strcmp(a, "plot")) return plot_main(argc - 1, argv + 1);
    if (!strcmp(a, "inspect")) {
        if (argc == 3 && cmdline_is_help(argv[2])) return fputs(INSPECT_USAGE, stdout), 0;
        if (argc == 3 && argv[2][0] == '-') return cmdline_unknown_option("inspect", argv[2], INSPECT_USAGE);
        if (argc != 3) {
            fprintf(stderr, "dtrun: usage: dtrun inspect CKPT (a checkpoint directory or one of its step directories)\n");
            return DT_EXIT_USAGE;
        }
        return provenance_inspect(argv[2], stdout);
    }
    if (!strcmp(a, "generate")) return generate_command(argc - 1, argv + 1);
    if (!strcmp(a, "eval")) return eval_command(argc - 1, argv + 1);
    if (!strcmp(a, "classify")) return classify_command(argc - 1, argv + 1);
    if (misspelt_subcommand(a)) return DT_EXIT_USAGE;

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
    else if (o.version) rc = (printf("dtrun %s (%s)\n", dtrun_version(), dtrun_commit()), 0);
    else rc = launch(&o);
    launch_opts_free(&o);
    return rc;
}
