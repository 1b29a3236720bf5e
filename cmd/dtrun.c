/* dtrun — command-line entry. Thin: parse, call lib/ and runtime/, map errors to
 * exit statuses (documented in man/dtrun.1).
 *
 *   dtrun [options] job.yaml           launch workers that train the job
 *   dtrun --print-config job.yaml      print the resolved job
 *   dtrun worker job.yaml              one worker (what the agent starts)
 */
#include <stdio.h>
#include <string.h>

#include "lib/jobspec.h"
#include "runtime/train/train.h"

#define DTRUN_VERSION "0.1.0"

static int usage(FILE *out)
{
    fprintf(out,
            "usage: dtrun [options] job.yaml\n"
            "       dtrun --print-config job.yaml\n"
            "       dtrun worker job.yaml\n"
            "see dtrun(1) and dtrun-job(5)\n");
    return out == stderr ? JOB_EXIT_INVALID : 0;
}

static int load_job(job_spec *job, const char *path)
{
    char err[1024];
    if (job_load_file(job, path, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun: %s\n", err);
        return JOB_EXIT_INVALID;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage(stderr);
    const char *a = argv[1];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
    if (!strcmp(a, "--version")) { printf("dtrun %s\n", DTRUN_VERSION); return 0; }

    static job_spec job;
    if (!strcmp(a, "--print-config") || !strcmp(a, "--print_config")) {
        if (argc != 3) return usage(stderr);
        int rc = load_job(&job, argv[2]);
        if (rc) return rc;
        job_print(&job, stdout);
        return 0;
    }
    if (!strcmp(a, "worker")) {
        if (argc != 3) return usage(stderr);
        int rc = load_job(&job, argv[2]);
        return rc ? rc : train_run(&job);
    }
    /* Until the launcher lands: dtrun [--nproc-per-node=1] job.yaml trains in-process. */
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--nproc-per-node=", 17) || !strncmp(argv[i], "--nproc_per_node=", 17)) {
            if (strcmp(argv[i] + 17, "1")) {
                fprintf(stderr, "dtrun: %s: only 1 process per node for now\n", argv[i]);
                return JOB_EXIT_INVALID;
            }
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "dtrun: unknown option '%s'\n", argv[i]);
            return JOB_EXIT_INVALID;
        } else if (!path) {
            path = argv[i];
        } else {
            return usage(stderr);
        }
    }
    if (!path) return usage(stderr);
    int rc = load_job(&job, path);
    return rc ? rc : train_run(&job);
}
