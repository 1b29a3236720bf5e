/* cmdline.h — what every subcommand's option parsing shares: -h / --help,
 * and the one line for an unknown option, with a did-you-mean drawn from the
 * command's own usage text (the options it names are the ones it takes: one
 * list, so the help, the suggestion and the parser cannot disagree), and the
 * same for a misspelt subcommand.
 *
 *   if (cmdline_is_help(a)) { fputs(USAGE, stdout); return 0; }
 *   if (a[0] == '-') return cmdline_unknown_option("generate", a, USAGE);
 */
#ifndef DTRUN_UTIL_CMDLINE_H
#define DTRUN_UTIL_CMDLINE_H

#include <stddef.h>

/* 1 for "-h" and "--help". */
int cmdline_is_help(const char *arg);

/* The option of `usage` closest to `arg` (its name up to any '='), into buf:
 * every word of usage that starts with '-' (brackets, '|' and ',' split
 * words; "-m/--module" is two), or NULL when none is a plausible typo. */
const char *cmdline_suggest_option(const char *usage, const char *arg, char *buf, size_t len);

/* Prints "dtrun CMD: unknown option 'ARG'; did you mean '--x'? (dtrun CMD
 * --help)" to stderr (the suggestion only when there is one) and returns the
 * usage exit status (2). */
int cmdline_unknown_option(const char *cmd, const char *arg, const char *usage);

/* The subcommand of the NULL-terminated `names` that `word` is a plausible
 * misspelling of ("genrate" -> "generate"), or NULL. */
const char *cmdline_suggest_command(const char *word, const char *const *names);

#endif
