/* pretokenize.c — see pretokenize.h. Each step below names the regex
 * alternative it stands for. */
#include "lib/text/pretokenize.h"

#include "lib/text/unicode_class.h"
#include "lib/text/utf8_text.h"

static unicode_class class_at(const unsigned char *s, size_t *len)
{
    uint32_t cp;
    *len = utf8_text_decode(s, &cp);
    return unicode_class_of(cp);
}

/* The end of the run of characters of class c starting at s[i]. */
static size_t run_end(const unsigned char *s, size_t n, size_t i, unicode_class c)
{
    while (i < n) {
        size_t len;
        if (class_at(s + i, &len) != c) break;
        i += len;
    }
    return i;
}

size_t gpt2_piece_end(const char *text, size_t n, size_t i)
{
    const unsigned char *s = (const unsigned char *)text;
    /* 's|'t|'re|'ve|'m|'ll|'d — lower case only, as in GPT-2 */
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    size_t len0;
    unicode_class c0 = class_at(s + i, &len0);
    /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+' with their optional space */
    if (s[i] == ' ' && i + 1 < n) {
        size_t len1;
        unicode_class c1 = class_at(s + i + 1, &len1);
        if (c1 != UC_SPACE) return run_end(s, n, i + 1, c1);
    }
    /* the same three without the space */
    if (c0 != UC_SPACE) return run_end(s, n, i, c0);
    /* '\s+(?!\S)': the whole run of spaces when the text ends after it; when a
     * non-space follows, the run less its last character, if that leaves any */
    size_t end = i, last = i;
    while (end < n) {
        size_t len;
        if (class_at(s + end, &len) != UC_SPACE) break;
        last = end;
        end += len;
    }
    if (end == n) return end;
    if (last > i) return last;
    /* '\s+': a single space character before a non-space */
    return end;
}
