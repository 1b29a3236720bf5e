/* jobspec_utf8.c — strict UTF-8 decoding (RFC 3629). */
#include "lib/job/jobspec_utf8.h"

size_t utf8_decode(const unsigned char *s, size_t n, unsigned long *cp)
{
    if (n == 0) return 0;
    size_t len = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
               : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    unsigned long v = len == 1 ? s[0] : s[0] & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3fu);
    }
    static const unsigned long min_of_len[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_of_len[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

int utf8_valid(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    unsigned long cp;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_decode(u + i, len - i, &cp);
        if (n == 0) return 0;
        i += n;
    }
    return 1;
}
