/* suggest.c — closest-name suggestions by edit distance. */
#include "lib/util/suggest.h"

#include <string.h>

static char fold(char c)
{
    if (c >= 'A' && c <= 'Z') return (char)(c - 'A' + 'a');
    if (c == '-') return '_';
    return c;
}

static int min3(int a, int b, int c)
{
    int m = a < b ? a : b;
    return m < c ? m : c;
}

int suggest_distance(const char *a, size_t alen, const char *b, size_t blen)
{
    if (alen > SUGGEST_WORD_MAX || blen > SUGGEST_WORD_MAX) return 1 << 20;
    /* Three rows suffice for the optimal-string-alignment recurrence. */
    int prev2[SUGGEST_WORD_MAX + 1], prev[SUGGEST_WORD_MAX + 1], cur[SUGGEST_WORD_MAX + 1];
    for (size_t j = 0; j <= blen; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= alen; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= blen; j++) {
            int cost = fold(a[i - 1]) == fold(b[j - 1]) ? 0 : 1;
            cur[j] = min3(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost);
            if (i > 1 && j > 1 && fold(a[i - 1]) == fold(b[j - 2]) &&
                fold(a[i - 2]) == fold(b[j - 1]) && prev2[j - 2] + 1 < cur[j])
                cur[j] = prev2[j - 2] + 1;
        }
        memcpy(prev2, prev, sizeof(int) * (blen + 1));
        memcpy(prev, cur, sizeof(int) * (blen + 1));
    }
    return prev[blen];
}

void suggest_init(suggest *s, const char *word, size_t len)
{
    memset(s, 0, sizeof *s);
    s->best_distance = 1 << 20;
    if (len == 0 || len > SUGGEST_WORD_MAX) return;
    for (size_t i = 0; i < len; i++) s->word[i] = fold(word[i]);
    s->len = len;
    s->usable = 1;
}

/* How many edits still read as a typo rather than a different word: one for
 * short names (tp/pp/dp are one edit apart; 'name' is two from 'save'), more
 * for long ones. */
static int max_edits(size_t len)
{
    if (len <= 4) return 1;
    if (len <= 8) return 2;
    return 3;
}

void suggest_offer(suggest *s, const char *candidate, const char *meaning)
{
    if (!s->usable) return;
    size_t clen = strlen(candidate);
    int d = suggest_distance(s->word, s->len, candidate, clen);
    /* Never suggest by replacing the whole word ('x' -> 'lr'). */
    if (d > max_edits(clen) || (size_t)d >= s->len || (size_t)d >= clen) return;
    if (d < s->best_distance) {
        s->best_distance = d;
        s->best = meaning;
    }
}

void suggest_offer_list(suggest *s, const char *comma_list, const char *meaning)
{
    if (!comma_list) return;
    char one[SUGGEST_WORD_MAX + 1];
    const char *p = comma_list;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > 0 && n <= SUGGEST_WORD_MAX) {
            memcpy(one, p, n);
            one[n] = 0;
            suggest_offer(s, one, meaning);
        }
        if (!end) break;
        p = end + 1;
    }
}

const char *suggest_best(const suggest *s)
{
    return s->best;
}
