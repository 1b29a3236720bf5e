/* unicode_class.h — the character classes of GPT-2's pre-tokenizer regex:
 * \p{L} (letter), \p{N} (number), \s (space), and everything else. The table
 * is generated from Python's unicodedata (scripts/data/gen-unicode-classes.py)
 * rather than taken from libc's iswalpha, which follows the C locale's own
 * idea of a letter and is not the regex's. */
#ifndef DTRUN_TEXT_UNICODE_CLASS_H
#define DTRUN_TEXT_UNICODE_CLASS_H

#include <stdint.h>

typedef enum { UC_OTHER = 0, UC_LETTER, UC_NUMBER, UC_SPACE } unicode_class;

/* The class of code point cp (any value; past U+10FFFF is UC_OTHER). */
unicode_class unicode_class_of(uint32_t cp);

/* The Unicode version the table was generated from, e.g. "14.0.0". */
const char *unicode_class_version(void);

#endif
