/* test_exit_codes.c — the exit codes of lib/util/exit_codes.h and the EXIT
 * STATUS section of man/dtrun.1 say the same thing: every DT_EXIT_* value has
 * its own entry in the man page, and every numbered entry there has a
 * DT_EXIT_* constant. The header is read as text too, so a constant added
 * there without a man entry (or without a row below) fails here. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/exit_codes.h"
#include "test/unit/check.h"

#define MAX_CODES 64

typedef struct {
    char name[64];
    int value;
} code;

/* The constants as the compiler sees them: must match the header's text. */
static const code compiled[] = {
    {"DT_EXIT_OK", DT_EXIT_OK},
    {"DT_EXIT_FAIL", DT_EXIT_FAIL},
    {"DT_EXIT_USAGE", DT_EXIT_USAGE},
    {"DT_EXIT_DATA", DT_EXIT_DATA},
    {"DT_EXIT_COMM", DT_EXIT_COMM},
    {"DT_EXIT_NONFINITE", DT_EXIT_NONFINITE},
    {"DT_EXIT_CKPT", DT_EXIT_CKPT},
    {"DT_EXIT_NOEXEC", DT_EXIT_NOEXEC},
    {"DT_EXIT_NOTFOUND", DT_EXIT_NOTFOUND},
    {"DT_EXIT_SIGNAL_BASE", DT_EXIT_SIGNAL_BASE},
};
#define N_COMPILED ((int)(sizeof compiled / sizeof compiled[0]))

/* "#define DT_EXIT_X  N  ..." lines of the header. */
static int read_header(const char *path, code *out, int max)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        char name[64];
        int value;
        if (sscanf(line, "#define %63s %d", name, &value) == 2 && !strncmp(name, "DT_EXIT_", 8)) {
            snprintf(out[n].name, sizeof out[n].name, "%s", name);
            out[n].value = value;
            n++;
        }
    }
    fclose(f);
    return n;
}

/* The numbered entries of EXIT STATUS: the ".B 3" / ".BI 128+ S" line after
 * each ".TP". An italic ".I N" entry names no code. "128+" counts as 128, the
 * base of the signal codes. Returns how many, -1 when the file or the section
 * is missing. */
static int read_man(const char *path, int *codes, int max)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    int in_section = 0, after_tp = 0, n = 0, seen = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, ".SH", 3)) {
            in_section = strstr(line, "EXIT STATUS") != NULL;
            seen |= in_section;
            after_tp = 0;
            continue;
        }
        if (!in_section) continue;
        if (!strncmp(line, ".TP", 3)) {
            after_tp = 1;
            continue;
        }
        if (after_tp) {
            after_tp = 0;
            const char *p = NULL;
            if (!strncmp(line, ".B ", 3)) p = line + 3;
            else if (!strncmp(line, ".BI ", 4)) p = line + 4;
            if (p && isdigit((unsigned char)*p) && n < max) codes[n++] = atoi(p);
        }
    }
    fclose(f);
    return seen ? n : -1;
}

static int man_has(const int *codes, int n, int value)
{
    for (int i = 0; i < n; i++)
        if (codes[i] == value) return 1;
    return 0;
}

int main(void)
{
    code header[MAX_CODES];
    int nh = read_header("lib/util/exit_codes.h", header, MAX_CODES);
    CHECK(nh > 0, "lib/util/exit_codes.h has DT_EXIT_* constants (found %d)", nh);

    int man[MAX_CODES];
    int nm = read_man("man/dtrun.1", man, MAX_CODES);
    CHECK(nm > 0, "man/dtrun.1 has an EXIT STATUS section with numbered entries (found %d)", nm);
    if (nh <= 0 || nm <= 0) CHECK_DONE();

    /* The header's text and the compiled values agree, name by name. */
    CHECK(nh == N_COMPILED, "the header defines %d DT_EXIT_* constants, this test knows %d", nh, N_COMPILED);
    for (int i = 0; i < nh; i++) {
        int found = -1;
        for (int k = 0; k < N_COMPILED; k++)
            if (!strcmp(compiled[k].name, header[i].name)) found = k;
        CHECK(found >= 0 && compiled[found].value == header[i].value, "%s = %d as compiled", header[i].name,
              header[i].value);
    }

    /* Every constant is documented. */
    for (int i = 0; i < nh; i++)
        CHECK(man_has(man, nm, header[i].value), "%s (%d) has an entry in man/dtrun.1 EXIT STATUS", header[i].name,
              header[i].value);

    /* Every documented code is a constant, and is documented once. */
    for (int i = 0; i < nm; i++) {
        const char *name = NULL;
        for (int k = 0; k < nh; k++)
            if (header[k].value == man[i]) name = header[k].name;
        int twice = 0;
        for (int k = 0; k < i; k++) twice |= man[k] == man[i];
        CHECK(name != NULL && !twice, "man/dtrun.1 EXIT STATUS entry %d%s is %s", man[i],
              man[i] == DT_EXIT_SIGNAL_BASE ? "+S" : "", name ? name : "no DT_EXIT_* constant");
    }
    CHECK_DONE();
}
