/* text_regex.h — the pre-tokenizer's regular expressions, run by PCRE2 (with
 * its JIT where the machine has one). Patterns come from tokenizer.json files,
 * written for Oniguruma (what Hugging Face's tokenizers compiles them with),
 * so a pattern is first translated where the two libraries read the same
 * escape differently, and refused where dtrun cannot make them agree:
 *
 *   \s, \S   Oniguruma: U+0009-000D, U+0085 and the separators (Zs, Zl, Zp);
 *            PCRE2 adds U+180E: written out as [\t-\r\x{85}\p{Z}].
 *   \h \w \b \X \R \K \Q ... differ (\h is a hex digit in Oniguruma):
 *            refused, as are ^ and $ (line anchors in Oniguruma) and the
 *            (?m) option (dot-all in Oniguruma).
 *
 * \p{L} and \p{N} are also written [A-Za-z\p{L}] and [0-9\p{N}] (the same
 * sets): PCRE2's JIT then tests the ASCII ranges before the property table,
 * which makes ASCII text about a third faster. */
#ifndef DTRUN_TEXT_TEXT_REGEX_H
#define DTRUN_TEXT_TEXT_REGEX_H

#include <stddef.h>

typedef struct text_regex text_regex;

/* Compiles `pattern`: Oniguruma syntax, or a literal string (literal != 0).
 * NULL with err: the construct and why ("\\w: ... not implemented"), or
 * PCRE2's message and offset. */
text_regex *text_regex_compile(const char *pattern, int literal, char *err, size_t errlen);
void text_regex_free(text_regex *r);

/* What one thread needs to match (PCRE2 match data and JIT stack). */
typedef struct text_regex_scratch text_regex_scratch;
text_regex_scratch *text_regex_scratch_new(void);
void text_regex_scratch_free(text_regex_scratch *s);

/* Every match of r in s[0..n), as Oniguruma's find_iter gives them (which is
 * what Hugging Face's Split sees): left to right, not overlapping; an empty
 * match is taken unless it sits right where the previous match ended, and
 * the search then moves one character on. fn(start, end, arg) for each;
 * fn's non-zero return stops and is returned. -1 with err on a matching error. */
typedef int (*text_regex_match_fn)(size_t start, size_t end, void *arg);
int text_regex_each(const text_regex *r, text_regex_scratch *sc, const char *s, size_t n, text_regex_match_fn fn,
                    void *arg, char *err, size_t errlen);

#endif
