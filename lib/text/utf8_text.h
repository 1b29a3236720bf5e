/* utf8_text.h — UTF-8 for the tokenizer: a bulk check that says where a text
 * stops being UTF-8, and a decoder for text already checked. (lib/job has its
 * own strict decoder for job strings; the two folders stay apart.) */
#ifndef DTRUN_TEXT_UTF8_TEXT_H
#define DTRUN_TEXT_UTF8_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* The offset of the first byte of s[0..n) that does not start a valid UTF-8
 * sequence (RFC 3629: no overlong forms, surrogates or code points past
 * U+10FFFF), or n when all of it is valid. */
size_t utf8_text_check(const char *s, size_t n);

/* Decodes the sequence at s, which utf8_text_check has passed: its code point
 * in *cp, its length returned. */
static inline size_t utf8_text_decode(const unsigned char *s, uint32_t *cp)
{
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    if (s[0] < 0xe0) { *cp = (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f); return 2; }
    if (s[0] < 0xf0) {
        *cp = (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
        return 3;
    }
    *cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 | (uint32_t)(s[2] & 0x3f) << 6 |
          (s[3] & 0x3f);
    return 4;
}

#endif
