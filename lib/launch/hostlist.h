/* hostlist.h — Slurm host lists ("n[1-3,5],gpu[001-002]-ib,x").
 *
 * Syntax, as Slurm writes SLURM_JOB_NODELIST:
 *   - commas outside brackets separate entries;
 *   - a bracket group holds a comma list of numbers and ranges "lo-hi";
 *     a number written with leading zeros pads the whole range to its width
 *     ("[08-10]" → 08 09 10, "[001-002]" → 001 002);
 *   - a name may have several groups, expanded left-major
 *     ("r[1-2]n[1-2]" → r1n1 r1n2 r2n1 r2n2), and text after a group
 *     ("gpu[1-2]-ib" → gpu1-ib gpu2-ib).
 * Host characters: letters, digits, '-', '.', '_'. Bad input (unbalanced
 * brackets, reversed range, empty entry, bad character, more than
 * HOSTLIST_MAX_HOSTS hosts or a name over HOSTLIST_MAX_NAME) is an error that
 * names the position: "hostlist 'n[3-1]' at column 3: reversed range 3-1". */
#ifndef DTRUN_HOSTLIST_H
#define DTRUN_HOSTLIST_H

#include <stddef.h>

#define HOSTLIST_MAX_HOSTS 65536
#define HOSTLIST_MAX_NAME  255

typedef struct hostlist hostlist;

/* Expands spec. NULL on error, with the line in err. */
hostlist *hostlist_parse(const char *spec, char *err, size_t errlen);
int hostlist_count(const hostlist *hl);
const char *hostlist_get(const hostlist *hl, int i); /* NULL when out of range */
void hostlist_free(hostlist *hl);

/* How many hosts spec names, without expanding it (the spec is validated).
 * -1 with the line in err on bad input. */
long hostlist_size(const char *spec, char *err, size_t errlen);

/* Copies the first host of spec into out without expanding the rest (the whole
 * spec is still validated). 0, or -1 with the line in err. This is how dtrun
 * derives the rendezvous endpoint from SLURM_JOB_NODELIST. */
int hostlist_first(const char *spec, char *out, size_t outlen, char *err, size_t errlen);

#endif
