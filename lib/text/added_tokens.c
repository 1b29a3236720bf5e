/* added_tokens.c — see added_tokens.h. The tokens are indexed by their first
 * byte, longest first, so a position costs a table look-up unless a token can
 * start there; tokenizers hold tens to hundreds of them. */
#include "lib/text/added_tokens.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *content;
    size_t len;
    uint32_t id;
    int lstrip, rstrip;
} added_token;

struct added_tokens {
    added_token *tok;
    int n, cap;
    int *by_byte[256]; /* token indices starting with this byte, longest first */
    int n_by_byte[256];
};

added_tokens *added_tokens_new(void) { return calloc(1, sizeof(added_tokens)); }

void added_tokens_free(added_tokens *a)
{
    if (!a) return;
    for (int i = 0; i < a->n; i++) free(a->tok[i].content);
    for (int b = 0; b < 256; b++) free(a->by_byte[b]);
    free(a->tok);
    free(a);
}

int added_tokens_count(const added_tokens *a) { return a ? a->n : 0; }

int added_tokens_add(added_tokens *a, const char *content, size_t len, uint32_t id, int lstrip, int rstrip)
{
    int b = (unsigned char)content[0];
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 16;
        added_token *t = realloc(a->tok, (size_t)cap * sizeof *t);
        if (!t) return -1;
        a->tok = t;
        a->cap = cap;
    }
    int *list = realloc(a->by_byte[b], (size_t)(a->n_by_byte[b] + 1) * sizeof *list);
    char *c = malloc(len + 1);
    if (list) a->by_byte[b] = list;
    if (!list || !c) {
        free(c);
        return -1;
    }
    memcpy(c, content, len);
    c[len] = 0;
    a->tok[a->n] = (added_token){c, len, id, lstrip, rstrip};
    /* into its first byte's list, after the tokens at least as long */
    int k = a->n_by_byte[b]++;
    while (k > 0 && a->tok[list[k - 1]].len < len) {
        list[k] = list[k - 1];
        k--;
    }
    list[k] = a->n++;
    return 0;
}

/* Unicode's White_Space (what Rust's regex calls \s; lstrip and rstrip take it). */
static int white_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

/* The code point at s[i] (valid UTF-8) and its length. */
static uint32_t cp_at(const unsigned char *s, size_t i, size_t *len)
{
    unsigned char c = s[i];
    if (c < 0x80) return *len = 1, c;
    if (c < 0xe0) return *len = 2, (uint32_t)(c & 0x1f) << 6 | (s[i + 1] & 0x3f);
    if (c < 0xf0) return *len = 3, (uint32_t)(c & 0x0f) << 12 | (uint32_t)(s[i + 1] & 0x3f) << 6 | (s[i + 2] & 0x3f);
    return *len = 4, (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3f) << 12 | (uint32_t)(s[i + 2] & 0x3f) << 6 |
                         (s[i + 3] & 0x3f);
}

int added_tokens_split(const added_tokens *ac, const char *s, size_t n, added_piece_fn fn, void *arg)
{
    const added_tokens *a = ac;
    const unsigned char *u = (const unsigned char *)s;
    size_t done = 0; /* the text before this is given out */
    for (size_t i = 0; a->n && i < n; i++) {
        int nb = a->n_by_byte[u[i]], hit = -1;
        for (int k = 0; k < nb; k++) {
            const added_token *t = &a->tok[a->by_byte[u[i]][k]];
            if (t->len <= n - i && !memcmp(s + i, t->content, t->len)) {
                hit = a->by_byte[u[i]][k];
                break;
            }
        }
        if (hit < 0) continue;
        const added_token *t = &a->tok[hit];
        size_t start = i, stop = i + t->len;
        if (t->lstrip) { /* back over White_Space, not into what is given out */
            while (start > done) {
                size_t j = start - 1, len;
                while (j > done && (u[j] & 0xc0) == 0x80) j--;
                if (!white_space(cp_at(u, j, &len))) break;
                start = j;
            }
        }
        if (t->rstrip) {
            size_t len;
            while (stop < n && white_space(cp_at(u, stop, &len))) stop += len;
        }
        int rc;
        if (done < start && (rc = fn(done, start, -1, arg)) != 0) return rc;
        if ((rc = fn(start, stop, (long)t->id, arg)) != 0) return rc;
        done = stop;
        i = stop - 1;
    }
    if (done < n) return fn(done, n, -1, arg);
    return 0;
}
