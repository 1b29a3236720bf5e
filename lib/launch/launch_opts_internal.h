/* launch_opts_internal.h — the single-value parsers of launch_opts_values.c
 * that the option table (launch_opts.c) applies; private to lib/launch/launch_opts*.c.
 * Each returns 0, or -1 with a reason in err that does not name the option. */
#ifndef DTRUN_LAUNCH_OPTS_INTERNAL_H
#define DTRUN_LAUNCH_OPTS_INTERNAL_H

#include <stddef.h>

#include "lib/launch/launch_opts.h"

/* A finite number of seconds in [lo, 1e7]. */
int launch_parse_seconds(const char *s, double lo, double *out, char *err, size_t errlen);
/* An identifier that also becomes a directory name under --log-dir. */
int launch_parse_ident(const char *s, char *out, size_t outlen, char *err, size_t errlen);
/* A host name or address: no blanks, '/' or ','. */
int launch_parse_host(const char *s, char *out, size_t outlen, char *err, size_t errlen);
/* --local-ranks-filter "0,1": filter[r] = 1 for each listed local rank. */
int launch_parse_ranks_filter(const char *s, unsigned char *filter, char *err, size_t errlen);
/* --rdzv-conf k=v,...: torchrun's c10d keys (unknown ones get a "did you mean"). */
int launch_parse_rdzv_conf(const char *s, launch_rdzv_conf *c, char *err, size_t errlen);

#endif
