/* jobspec_utf8.h — UTF-8 decoding for job strings. YAML text is UTF-8 (libyaml
 * checks it), but overrides come from the command line as raw bytes, and the
 * printer must know which characters it can write without escapes. */
#ifndef DTRUN_JOBSPEC_UTF8_H
#define DTRUN_JOBSPEC_UTF8_H

#include <stddef.h>

/* Decode one UTF-8 sequence at s (n bytes left): its code point in *cp and its
 * length, or 0 when the bytes are not valid UTF-8 (overlong forms, surrogates
 * and code points past U+10FFFF included). */
size_t utf8_decode(const unsigned char *s, size_t n, unsigned long *cp);

/* Whether s[0..len) is valid UTF-8 throughout. */
int utf8_valid(const char *s, size_t len);

#endif
