/* cmdline.c — help, unknown options and misspelt subcommands (cmdline.h). */
#include "lib/util/cmdline.h"

#include <stdio.h>
#include <string.h>

#include "lib/util/exit_codes.h"
#include "lib/util/suggest.h"

int cmdline_is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

/* A word of a usage text can end an option name: letters, digits, '-', '_'. */
static int name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

const char *cmdline_suggest_option(const char *usage, const char *arg, char *buf, size_t len)
{
    const char *eq = strchr(arg, '=');
    size_t alen = eq ? (size_t)(eq - arg) : strlen(arg);
    suggest sg;
    suggest_init(&sg, arg, alen);
    /* every "-x" or "--name" that starts a word of the usage */
    char names[64][SUGGEST_WORD_MAX + 1];
    int n = 0;
    for (const char *p = usage; *p && n < 64; p++) {
        if (*p != '-' || (p > usage && name_char(p[-1])))
            continue;
        const char *q = p;
        while (*q == '-')
            q++;
        if (q - p > 2 || !name_char(*q) || *q == '-')
            continue;
        while (name_char(*q))
            q++;
        size_t k = (size_t)(q - p);
        if (k > SUGGEST_WORD_MAX)
            continue;
        memcpy(names[n], p, k);
        names[n][k] = '\0';
        suggest_offer(&sg, names[n], names[n]);
        n++;
        p = q - 1;
    }
    const char *best = suggest_best(&sg);
    if (!best || !strcmp(best, "-") || !strcmp(best, "--"))
        return NULL;
    snprintf(buf, len, "%s", best);
    return buf;
}

int cmdline_unknown_option(const char *cmd, const char *arg, const char *usage)
{
    char buf[SUGGEST_WORD_MAX + 1];
    const char *best = cmdline_suggest_option(usage, arg, buf, sizeof buf);
    const char *eq = strchr(arg, '=');
    int alen = eq ? (int)(eq - arg) : (int)strlen(arg);
    if (best)
        fprintf(stderr, "dtrun %s: unknown option '%.*s'; did you mean '%s'? (dtrun %s --help)\n", cmd, alen, arg,
                best, cmd);
    else
        fprintf(stderr, "dtrun %s: unknown option '%.*s' (dtrun %s --help)\n", cmd, alen, arg, cmd);
    return DT_EXIT_USAGE;
}

const char *cmdline_suggest_command(const char *word, const char *const *names)
{
    suggest sg;
    suggest_init(&sg, word, strlen(word));
    for (int i = 0; names[i]; i++)
        suggest_offer(&sg, names[i], names[i]);
    return suggest_best(&sg);
}
