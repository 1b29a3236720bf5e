/* fuzz_jobspec.c — libFuzzer target: job_load_string on arbitrary bytes.
 *
 * Besides "no crash, no leak, no hang", it checks the loader's promises:
 *  - an error is one line that starts with "fuzz.yaml:LINE:COL: ";
 *  - a job that loads is printed as YAML that loads back to the same struct,
 *    and passes job_validate.
 * Lines after a line "#--" are command-line overrides (SECTION.KEY=VALUE).
 * A broken promise aborts, which libFuzzer reports as a crash with the input.
 * Run with scripts/fuzz.sh jobspec [runs]. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/job/jobspec.h"

static int has_position(const char *err)
{
    const char *p = err + strlen("fuzz.yaml:");
    if (strncmp(err, "fuzz.yaml:", strlen("fuzz.yaml:"))) return 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') p++, digits++;
    if (!digits || *p++ != ':') return 0;
    digits = 0;
    while (*p >= '0' && *p <= '9') p++, digits++;
    return digits && p[0] == ':' && p[1] == ' ';
}

#define MAX_OVERRIDES 8

/* Split the part after "\n#--\n" into NUL-terminated override lines (in `copy`,
 * which the caller frees); returns the YAML length. */
static size_t split_overrides(const uint8_t *data, size_t size, char **copy, const char *ov[], int *n_ov)
{
    *n_ov = 0;
    *copy = NULL;
    const char *mark = memmem(data, size, "\n#--\n", 5);
    if (!mark) return size;
    size_t yaml_len = (size_t)(mark - (const char *)data) + 1, rest = size - yaml_len - 4;
    *copy = malloc(rest + 1);
    if (!*copy) abort();
    memcpy(*copy, mark + 5, rest);
    (*copy)[rest] = 0;
    for (char *line = *copy; line && *n_ov < MAX_OVERRIDES;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        ov[(*n_ov)++] = line;
        line = nl ? nl + 1 : NULL;
    }
    return yaml_len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static job_spec job, again;
    char err[1024], *copy;
    const char *ov[MAX_OVERRIDES];
    int n_ov;
    size_t yaml_len = split_overrides(data, size, &copy, ov, &n_ov);
    int rc = job_load_string_overrides(&job, (const char *)data, yaml_len, "fuzz.yaml", ov, n_ov, err, sizeof err);
    free(copy);
    if (rc != 0) {
        /* Errors about overrides name the override instead of a position. */
        static const char about_override[] = "fuzz.yaml: override '";
        if (strchr(err, '\n') || (!has_position(err) && strncmp(err, about_override, sizeof about_override - 1))) {
            fprintf(stderr, "bad error line: [%s]\n", err);
            abort();
        }
        return 0;
    }
    if (job_validate(&job, err, sizeof err) != 0) {
        fprintf(stderr, "loaded but does not validate: %s\n", err);
        abort();
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) abort();
    job_print(&job, f);
    fclose(f);
    if (job_load_string(&again, text, len, "fuzz.yaml", err, sizeof err) != 0) {
        fprintf(stderr, "printed job does not load: %s\n%s", err, text);
        abort();
    }
    if (memcmp(&job, &again, offsetof(job_spec, where)) != 0) { /* positions differ */
        fprintf(stderr, "printed job loads differently:\n%s", text);
        abort();
    }
    free(text);
    return 0;
}
