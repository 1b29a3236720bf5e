/* utf8_text.c — see utf8_text.h. ASCII runs are skipped eight bytes at a
 * time: most training text is mostly ASCII, and the check reads every byte. */
#include "lib/text/utf8_text.h"

#include <string.h>

/* Length of the valid sequence at s (n bytes left), or 0. */
static size_t valid_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) return n >= 2 && (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        if (n < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80) return 0;
        if (c == 0xe0 && s[1] < 0xa0) return 0;  /* overlong */
        if (c == 0xed && s[1] >= 0xa0) return 0; /* surrogate */
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (n < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80) return 0;
        if (c == 0xf0 && s[1] < 0x90) return 0;  /* overlong */
        if (c == 0xf4 && s[1] >= 0x90) return 0; /* past U+10FFFF */
        return 4;
    }
    return 0; /* continuation byte, 0xc0/0xc1, 0xf5.. */
}

size_t utf8_text_check(const char *text, size_t n)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ull)) { i += 8; continue; }
        }
        size_t len = valid_seq(s + i, n - i);
        if (!len) return i;
        i += len;
    }
    return n;
}
