/* plot_cmd.c — see plot_cmd.h. Rank files (STEM.rankN.jsonl, which a shell
 * glob like runs/STAR.jsonl also matches) are not runs: they are read with
 * their run, for its memory curves. */
#include "lib/plot/plot_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/plot/run_series.h"
#include "lib/plot/svg_plot.h"
#include "lib/util/cmdline.h"
#include "lib/util/exit_codes.h"

static const char USAGE[] = "usage: dtrun plot RUN.jsonl... -o curves.svg\n"
                            "  RUN.jsonl      a run's metrics file (log.metrics); its STEM.rankN.jsonl give memory\n"
                            "  -o, --output   the SVG to write\n";

int plot_main(int argc, char **argv)
{
    const char *out = NULL;
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    int n = 0;
    if (!inputs) return DT_EXIT_FAIL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cmdline_is_help(a)) {
            fputs(USAGE, stdout);
            free(inputs);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "dtrun: plot: %s needs a value (dtrun plot --help)\n", a);
                free(inputs);
                return DT_EXIT_USAGE;
            }
            out = argv[++i];
        } else if (!strncmp(a, "--output=", 9)) {
            out = a + 9;
        } else if (a[0] == '-' && a[1]) {
            free(inputs);
            return cmdline_unknown_option("plot", a, USAGE);
        } else if (!run_is_rank_file(a)) {
            inputs[n++] = a;
        }
    }
    if (!out || n == 0) {
        fprintf(stderr, "dtrun: plot: %s (dtrun plot --help)\n",
                !out ? "no output: give -o curves.svg" : "no metrics files (RUN.jsonl) given");
        free(inputs);
        return DT_EXIT_USAGE;
    }
    run_series *runs = calloc((size_t)n, sizeof *runs);
    char err[1024];
    int rc = 0, read = 0;
    if (!runs) rc = DT_EXIT_FAIL;
    for (; !rc && read < n; read++) {
        if (run_series_read(&runs[read], inputs[read], err, sizeof err) != 0) {
            fprintf(stderr, "dtrun: plot: %s\n", err);
            rc = DT_EXIT_DATA;
        }
    }
    if (!rc) {
        /* written beside, then renamed: a failed plot never leaves half a file */
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp", out);
        FILE *f = fopen(tmp, "w");
        if (!f || svg_plot_write(f, runs, n) != 0 || fclose(f) != 0 || rename(tmp, out) != 0) {
            fprintf(stderr, "dtrun: plot: %s: cannot write (%s)\n", out, strerror(errno));
            if (f) remove(tmp);
            rc = DT_EXIT_FAIL;
        } else {
            printf("%s\n", out);
        }
    }
    for (int i = 0; i < read; i++) run_series_free(&runs[i]);
    free(runs);
    free(inputs);
    return rc;
}
