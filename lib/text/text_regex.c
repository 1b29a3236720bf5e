/* text_regex.c — see text_regex.h. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "lib/text/text_regex.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/errline.h"

struct text_regex {
    pcre2_code *code;
    int jit; /* the JIT compiled it: pcre2_jit_match */
};

struct text_regex_scratch {
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *stack;
};

/* Oniguruma's \s as a PCRE2 class body (see text_regex.h). */
#define ONIG_SPACE "\\t-\\r\\x{85}\\p{Z}"

typedef struct {
    char *out;
    size_t n, cap;
} sbuf;

static int put(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->out, cap);
        if (!p) return -1;
        b->out = p;
        b->cap = cap;
    }
    memcpy(b->out + b->n, s, n);
    b->n += n;
    b->out[b->n] = 0;
    return 0;
}

static int puts_(sbuf *b, const char *s) { return put(b, s, strlen(s)); }

/* The Oniguruma pattern p as PCRE2 reads it the same way, into *out
 * (malloc'd). -1 with err naming what cannot be translated. */
static int translate(const char *p, char **out, char *err, size_t errlen)
{
    sbuf b = {0};
    int in_class = 0, oom = 0;
    size_t n = strlen(p);
    for (size_t i = 0; i < n && !oom;) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            if (e == 's') {
                oom = puts_(&b, in_class ? ONIG_SPACE : "[" ONIG_SPACE "]");
                i += 2;
                continue;
            }
            if (e == 'S') {
                if (in_class) {
                    free(b.out);
                    return errline(err, errlen, "\\S inside a character class (at offset %zu) is not implemented", i);
                }
                oom = puts_(&b, "[^" ONIG_SPACE "]");
                i += 2;
                continue;
            }
            if (strchr("hHwWbBXRKyYOGgkQ", e)) {
                free(b.out);
                return errline(err, errlen,
                               "\\%c (at offset %zu) is not implemented: Oniguruma (Hugging Face's regex library) "
                               "and PCRE2 read it differently", e, i);
            }
            if ((e == 'p' || e == 'P' || e == 'x') && i + 2 < n && p[i + 2] == '{') {
                const char *close = strchr(p + i + 2, '}');
                if (!close) {
                    free(b.out);
                    return errline(err, errlen, "\\%c{ without its } (at offset %zu)", e, i);
                }
                size_t len = (size_t)(close - (p + i)) + 1;
                /* the same sets, ASCII first: see text_regex.h */
                const char *fast = NULL;
                if (len == 5 && !strncmp(p + i, "\\p{L}", 5)) fast = "A-Za-z\\p{L}";
                else if (len == 5 && !strncmp(p + i, "\\p{N}", 5)) fast = "0-9\\p{N}";
                if (fast && !in_class) oom = puts_(&b, "[") || puts_(&b, fast) || puts_(&b, "]");
                else if (fast) oom = puts_(&b, fast);
                else oom = put(&b, p + i, len);
                i += len;
                continue;
            }
            oom = put(&b, p + i, 2);
            i += 2;
            continue;
        }
        if (in_class) {
            if (c == ']') {
                in_class = 0;
            } else if (c == '[') {
                if (i + 1 < n && p[i + 1] == ':') { /* [:alpha:] is the same in both */
                    const char *close = strstr(p + i, ":]");
                    if (close) {
                        size_t len = (size_t)(close - (p + i)) + 2;
                        oom = put(&b, p + i, len);
                        i += len;
                        continue;
                    }
                }
                free(b.out);
                return errline(err, errlen, "a character class inside a class (at offset %zu) is not implemented", i);
            } else if (c == '&' && i + 1 < n && p[i + 1] == '&') {
                free(b.out);
                return errline(err, errlen, "&& (class intersection, at offset %zu) is not implemented", i);
            }
            oom = put(&b, p + i, 1);
            i++;
            continue;
        }
        if (c == '[') {
            in_class = 1;
            size_t j = i + 1;
            if (j < n && p[j] == '^') j++;
            if (j < n && p[j] == ']') j++; /* a ] first is a literal */
            oom = put(&b, p + i, j - i);
            i = j;
            continue;
        }
        if (c == '^' || c == '$') {
            free(b.out);
            return errline(err, errlen,
                           "%c (at offset %zu) is not implemented: a line anchor in Oniguruma, a subject anchor in "
                           "PCRE2", c, i);
        }
        if (c == '(' && i + 1 < n && p[i + 1] == '?') {
            /* inline options: (?i) and (?i:...) only */
            size_t j = i + 2;
            while (j < n && strchr("imxsWDSPLya-", p[j]) && p[j]) j++;
            if (j > i + 2 && j < n && (p[j] == ':' || p[j] == ')')) {
                for (size_t k = i + 2; k < j; k++) {
                    if (p[k] != 'i' && p[k] != '-') {
                        free(b.out);
                        return errline(err, errlen, "the option (?%c) (at offset %zu) is not implemented", p[k], i);
                    }
                }
            } else if (i + 2 < n && p[i + 2] == '~') {
                free(b.out);
                return errline(err, errlen, "(?~ (the absent operator, at offset %zu) is not implemented", i);
            }
        }
        oom = put(&b, p + i, 1);
        i++;
    }
    if (oom || !b.out) {
        free(b.out);
        if (oom) return errline(err, errlen, "out of memory translating the pattern");
        b.out = strdup("");
        if (!b.out) return errline(err, errlen, "out of memory translating the pattern");
    }
    *out = b.out;
    return 0;
}

text_regex *text_regex_compile(const char *pattern, int literal, char *err, size_t errlen)
{
    char *pcre = NULL;
    if (literal) pcre = strdup(pattern);
    else if (translate(pattern, &pcre, err, errlen) != 0) return NULL;
    text_regex *r = calloc(1, sizeof *r);
    if (!pcre || !r) {
        free(pcre);
        free(r);
        errline(err, errlen, "out of memory compiling the pattern");
        return NULL;
    }
    int code;
    PCRE2_SIZE at;
    /* (PCRE2_LITERAL takes no PCRE2_UCP: a literal has no classes) */
    r->code = pcre2_compile((PCRE2_SPTR)pcre, PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP), &code, &at, NULL);
    free(pcre);
    if (!r->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        errline(err, errlen, "PCRE2 cannot compile it: %s%s", (const char *)msg, literal ? "" : " (in the translation)");
        free(r);
        return NULL;
    }
    /* without a JIT (another CPU, a build without it) PCRE2 interprets */
    r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
    return r;
}

void text_regex_free(text_regex *r)
{
    if (!r) return;
    pcre2_code_free(r->code);
    free(r);
}

text_regex_scratch *text_regex_scratch_new(void)
{
    text_regex_scratch *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    /* one pair: only the whole match is wanted (rc 0 says "more groups than
     * room", the match stands) */
    s->md = pcre2_match_data_create(1, NULL);
    s->mc = pcre2_match_context_create(NULL);
    /* the JIT's default 32 KiB of stack is too little for long runs that
     * backtrack (a megabyte of spaces before (?!\S)) */
    s->stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
    if (!s->md || !s->mc) {
        text_regex_scratch_free(s);
        return NULL;
    }
    if (s->stack) pcre2_jit_stack_assign(s->mc, NULL, s->stack);
    return s;
}

void text_regex_scratch_free(text_regex_scratch *s)
{
    if (!s) return;
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mc);
    pcre2_jit_stack_free(s->stack);
    free(s);
}

/* The first match in s[from..n): 1 with [*start, *end), 0 when none, -1
 * with err on a matching error (e.g. the JIT stack limit). */
static int text_regex_find(const text_regex *r, text_regex_scratch *sc, const char *s, size_t n, size_t from,
                           size_t *start, size_t *end, char *err, size_t errlen)
{
    int rc = r->jit ? pcre2_jit_match(r->code, (PCRE2_SPTR)s, n, from, 0, sc->md, sc->mc)
                    : pcre2_match(r->code, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, sc->md, sc->mc);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return errline(err, errlen, "the pre-tokenizer's regex failed at byte %zu: %s", from, (const char *)msg);
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->md);
    *start = ov[0];
    *end = ov[1];
    return 1;
}

/* The length of the UTF-8 character at s[i] (1 past the end). */
static size_t char_len(const char *s, size_t n, size_t i)
{
    unsigned char c = (unsigned char)s[i];
    size_t len = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    return i + len <= n ? len : 1;
}

int text_regex_each(const text_regex *r, text_regex_scratch *sc, const char *s, size_t n, text_regex_match_fn fn,
                    void *arg, char *err, size_t errlen)
{
    size_t at = 0, last_end = (size_t)-1;
    while (at <= n) {
        size_t ms, me;
        int rc = text_regex_find(r, sc, s, n, at, &ms, &me, err, errlen);
        if (rc <= 0) return rc;
        if (ms == me && me == last_end) { /* no empty match right after a match: move on */
            if (at >= n) break;
            at += char_len(s, n, at);
            continue;
        }
        at = me;
        last_end = me;
        if ((rc = fn(ms, me, arg)) != 0) return rc;
    }
    return 0;
}
