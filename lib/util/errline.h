/* errline.h — the one way an error line is written into a caller's buffer.
 * dtrun's functions answer failure with a return value and one line in
 * (err, errlen) — what, why, where — that the caller prints or prefixes. */
#ifndef DTRUN_UTIL_ERRLINE_H
#define DTRUN_UTIL_ERRLINE_H

#include <stddef.h>

/* Formats into err (when err and errlen are non-zero) and returns -1, so a
 * failing path reads `return errline(err, errlen, "x: %s", why);`. */
int errline(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
