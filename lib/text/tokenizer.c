/* tokenizer.c — encoding and decoding (tokenizer.h); tokenizer_json.c loads. */
#include "lib/text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "lib/text/pretokenize.h"
#include "lib/text/tokenizer_internal.h"
#include "lib/util/errline.h"

tokenizer *tokenizer_gpt2(char *err, size_t errlen)
{
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return errline(err, errlen, "out of memory"), NULL;
    snprintf(t->name, sizeof t->name, "GPT-2 (built in)");
    t->bpe = bpe_vocab_gpt2(err, errlen);
    if (!t->bpe) {
        free(t);
        return NULL;
    }
    t->steps[t->n_steps++] = (pretok_step){.kind = STEP_GPT2};
    t->n_ids = bpe_vocab_size(t->bpe);
    t->byte_level_decoder = 1;
    t->eot[t->n_eot++] = (uint32_t)bpe_vocab_eot(t->bpe); /* 50256 */
    return t;
}

void tokenizer_free(tokenizer *t)
{
    if (!t) return;
    bpe_vocab_free(t->bpe);
    added_tokens_free(t->raw);
    added_tokens_free(t->normalized);
    for (int i = 0; i < t->n_steps; i++) text_regex_free(t->steps[i].re);
    if (t->added)
        for (long i = 0; i < t->added_cap; i++) {
            free(t->added[i].bytes);
            free(t->added[i].content);
        }
    free(t->added);
    free(t);
}

const char *tokenizer_name(const tokenizer *t) { return t->name; }
long tokenizer_n_ids(const tokenizer *t) { return t->n_ids; }

void tokenizer_template(const tokenizer *t, const uint32_t **before, int *n_before, const uint32_t **after,
                        int *n_after)
{
    *before = t->before;
    *n_before = t->n_before;
    *after = t->after;
    *n_after = t->n_after;
}

void tokenizer_frame(const tokenizer *t, const uint32_t **before, int *n_before, const uint32_t **after,
                     int *n_after)
{
    tokenizer_template(t, before, n_before, after, n_after);
    if (*n_before || *n_after) return;
    *before = t->eot; /* no template: <|endoftext|> before each document, as llm.c's GPT-2 shards */
    *n_before = t->n_eot;
}

const char *tokenizer_token_bytes(const tokenizer *t, uint32_t id, size_t *len)
{
    if ((long)id >= t->n_ids) return NULL;
    if (t->added && (long)id < t->added_cap && t->added[id].content) {
        *len = t->added[id].len;
        return t->added[id].bytes;
    }
    if ((int)id >= bpe_vocab_size(t->bpe)) return NULL;
    return bpe_token_bytes(t->bpe, (int)id, len);
}

int tokenizer_can_decode(const tokenizer *t, char *err, size_t errlen)
{
    if (t->byte_level_decoder) return 0;
    return errline(err, errlen, "%s: cannot decode: decoder %s is not implemented (dtrun decodes ByteLevel)", t->name,
                   t->decoder_what);
}

int tokenizer_normalize(const tokenizer *t, const char *s, size_t n, char **out, size_t *out_len)
{
    static const int options[] = {
        [NORM_NFC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE,
        [NORM_NFD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
        [NORM_NFKC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
        [NORM_NFKD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
    };
    char *norm = NULL;
    for (int i = 0; i < t->n_norm; i++) {
        utf8proc_uint8_t *next = NULL;
        utf8proc_ssize_t len = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &next,
                                            (utf8proc_option_t)options[t->norm[i]]);
        free(norm);
        if (len < 0) {
            free(next);
            return -1;
        }
        norm = (char *)next;
        s = norm;
        n = (size_t)len;
    }
    if (!norm && !(norm = malloc(n + 1))) return -1;
    if (!t->n_norm) memcpy(norm, s, n), norm[n] = 0;
    *out = norm;
    *out_len = n;
    return 0;
}

/* ---- encoding ---- */

/* What one depth of the pre-tokenizer holds while the deeper steps run. */
typedef struct {
    char *buf; /* the piece with the space ByteLevel's add_prefix_space puts before it */
    size_t cap;
    const char *from; /* spans: the piece buf is a copy of (NULL: none yet), used bytes of buf */
    size_t used;
    size_t *cuts; /* SPLIT: (start, end, is_match) triples of the pattern's matches and the text between */
    size_t n_cuts, cap_cuts;
} depth_scratch;

/* A line of the text between raw added tokens (it ends after a '\n'), for
 * spans: where it starts in the normalized text and in the source, and
 * whether the normalizer left it as it was. */
typedef struct {
    size_t norm_start, src_start, src_end;
    int same;
} seg_line;

struct tokenizer_encoder {
    const tokenizer *t;
    bpe_encoder *bpe;
    text_regex_scratch *re;
    depth_scratch depth[TOK_MAX_STEPS];
    token_buf *out;
    char *err;
    size_t errlen;
    /* tokenizer_encode_spans only (spans NULL otherwise) */
    token_spans *spans;
    const char *text;      /* the source */
    const char *seg;       /* the text being pre-tokenized: the source's bytes or their normalized copy */
    size_t seg_len;
    seg_line *lines;       /* seg's lines (one when the normalizer changed nothing) */
    size_t n_lines, cap_lines;
};

tokenizer_encoder *tokenizer_encoder_new(const tokenizer *t)
{
    tokenizer_encoder *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->t = t;
    e->bpe = bpe_encoder_new(t->bpe);
    e->re = text_regex_scratch_new();
    if (!e->bpe || !e->re) {
        tokenizer_encoder_free(e);
        return NULL;
    }
    return e;
}

void tokenizer_encoder_free(tokenizer_encoder *e)
{
    if (!e) return;
    bpe_encoder_free(e->bpe);
    text_regex_scratch_free(e->re);
    for (int i = 0; i < TOK_MAX_STEPS; i++) {
        free(e->depth[i].buf);
        free(e->depth[i].cuts);
    }
    free(e->lines);
    free(e);
}

static int oom(tokenizer_encoder *e) { return errline(e->err, e->errlen, "out of memory encoding"); }

static int pretokenize(tokenizer_encoder *e, int step, const char *s, size_t n);

/* ByteLevel: a space before a piece that does not start with one (when asked),
 * then GPT-2's regex (when use_regex), then on. */
static int step_byte_level(tokenizer_encoder *e, int step, const char *s, size_t n);

typedef struct {
    tokenizer_encoder *e;
    int step;
    const char *s;
    size_t done; /* Isolated: the text before this is passed on */
    int rc;
} isolated_ctx;

static int isolated_match(size_t start, size_t end, void *arg)
{
    isolated_ctx *c = arg;
    int rc;
    if (c->done < start && (rc = pretokenize(c->e, c->step + 1, c->s + c->done, start - c->done)) != 0) return rc;
    if (start < end && (rc = pretokenize(c->e, c->step + 1, c->s + start, end - start)) != 0) return rc;
    c->done = end;
    return 0;
}

typedef struct {
    depth_scratch *d;
    size_t done;
} cuts_ctx;

static int push_cut(depth_scratch *d, size_t start, size_t end, size_t is_match)
{
    if (d->n_cuts + 3 > d->cap_cuts) {
        size_t cap = d->cap_cuts ? 2 * d->cap_cuts : 96;
        size_t *c = realloc(d->cuts, cap * sizeof *c);
        if (!c) return -1;
        d->cuts = c;
        d->cap_cuts = cap;
    }
    d->cuts[d->n_cuts++] = start;
    d->cuts[d->n_cuts++] = end;
    d->cuts[d->n_cuts++] = is_match;
    return 0;
}

/* Hugging Face's find_matches: the text between matches (not a match) and
 * each match, in order, covering the text. */
static int cut_match(size_t start, size_t end, void *arg)
{
    cuts_ctx *c = arg;
    if (c->done != start && push_cut(c->d, c->done, start, 0) != 0) return 1;
    if (push_cut(c->d, start, end, 1) != 0) return 1;
    c->done = end;
    return 0;
}

/* Split: Hugging Face's NormalizedString::split, behaviour by behaviour. */
static int step_split(tokenizer_encoder *e, int step, const char *s, size_t n)
{
    const pretok_step *st = &e->t->steps[step];
    if (st->behavior == SPLIT_ISOLATED && !st->invert) { /* the common case, without the list */
        isolated_ctx c = {e, step, s, 0, 0};
        int rc = text_regex_each(st->re, e->re, s, n, isolated_match, &c, e->err, e->errlen);
        if (rc) return rc;
        return c.done < n ? pretokenize(e, step + 1, s + c.done, n - c.done) : 0;
    }
    depth_scratch *d = &e->depth[step];
    d->n_cuts = 0;
    cuts_ctx c = {d, 0};
    int rc = text_regex_each(st->re, e->re, s, n, cut_match, &c, e->err, e->errlen);
    if (rc > 0) return oom(e);
    if (rc < 0) return rc;
    if (c.done != n && push_cut(d, c.done, n, 0) != 0) return oom(e);
    size_t m = d->n_cuts / 3, *cut = d->cuts, k = 0; /* k: the pieces kept, in place */
    for (size_t i = 0; i < m; i++) cut[3 * i + 2] ^= (size_t)st->invert;
    int prev = 0;
    switch (st->behavior) {
    case SPLIT_ISOLATED: k = m; break;
    case SPLIT_REMOVED:
        for (size_t i = 0; i < m; i++)
            if (!cut[3 * i + 2]) cut[3 * k] = cut[3 * i], cut[3 * k + 1] = cut[3 * i + 1], k++;
        break;
    case SPLIT_CONTIGUOUS:
    case SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < m; i++) {
            int is_match = (int)cut[3 * i + 2];
            int extend = st->behavior == SPLIT_CONTIGUOUS ? is_match == prev : is_match && !prev;
            if (extend && k > 0) cut[3 * (k - 1) + 1] = cut[3 * i + 1];
            else cut[3 * k] = cut[3 * i], cut[3 * k + 1] = cut[3 * i + 1], k++;
            prev = is_match;
        }
        break;
    case SPLIT_MERGED_WITH_NEXT: /* from the end, then the kept ones in order again */
        for (size_t i = m; i-- > 0;) {
            int is_match = (int)cut[3 * i + 2];
            size_t at = m - 1 - k; /* kept pieces fill the list from its end */
            if (is_match && !prev && k > 0) cut[3 * (at + 1)] = cut[3 * i];
            else cut[3 * at] = cut[3 * i], cut[3 * at + 1] = cut[3 * i + 1], k++;
            prev = is_match;
        }
        memmove(cut, cut + 3 * (m - k), 3 * k * sizeof *cut);
        break;
    }
    for (size_t i = 0; i < k; i++) {
        size_t a = d->cuts[3 * i], b = d->cuts[3 * i + 1];
        if (a < b && (rc = pretokenize(e, step + 1, s + a, b - a)) != 0) return rc;
    }
    return 0;
}

static int step_byte_level(tokenizer_encoder *e, int step, const char *s, size_t n)
{
    const pretok_step *st = &e->t->steps[step];
    if (st->add_prefix_space && n > 0 && s[0] != ' ') {
        depth_scratch *d = &e->depth[step];
        if (n + 1 > d->cap) {
            char *b = realloc(d->buf, n + 1);
            if (!b) return oom(e);
            d->buf = b;
            d->cap = n + 1;
        }
        d->buf[0] = ' ';
        memcpy(d->buf + 1, s, n);
        d->from = s;
        d->used = n + 1;
        s = d->buf;
        n++;
    }
    if (!st->re) return pretokenize(e, step + 1, s, n);
    isolated_ctx c = {e, step, s, 0, 0};
    int rc = text_regex_each(st->re, e->re, s, n, isolated_match, &c, e->err, e->errlen);
    if (rc) return rc;
    return c.done < n ? pretokenize(e, step + 1, s + c.done, n - c.done) : 0;
}

/* ---- spans: where ids come from ---- */

void token_spans_free(token_spans *s)
{
    free(s->s);
    *s = (token_spans){0};
}

static int span_push(tokenizer_encoder *e, size_t start, size_t end, int exact)
{
    token_spans *sp = e->spans;
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? 2 * sp->cap : 256;
        token_span *n = realloc(sp->s, cap * sizeof *n);
        if (!n) return oom(e);
        sp->s = n;
        sp->cap = cap;
    }
    sp->s[sp->n++] = (token_span){start, end, exact};
    return 0;
}

/* Where byte p of a piece lies in seg: ByteLevel's copies undone (the space
 * add_prefix_space puts first stands for nothing: it maps where the piece
 * starts). Each copy is its own allocation, so p lies in one at most. */
static size_t seg_offset(const tokenizer_encoder *e, const char *p)
{
    for (int hops = 0; hops <= TOK_MAX_STEPS; hops++) {
        int moved = 0;
        for (int i = 0; i < e->t->n_steps && !moved; i++) {
            const depth_scratch *d = &e->depth[i];
            if (d->from && p >= d->buf && p <= d->buf + d->used) {
                p = d->from + (p > d->buf ? p - d->buf - 1 : 0);
                moved = 1;
            }
        }
        if (!moved) break;
    }
    return (size_t)(p - e->seg);
}

/* The line of seg holding byte `off` (off < seg_len). */
static const seg_line *line_of(const tokenizer_encoder *e, size_t off)
{
    size_t lo = 0, hi = e->n_lines; /* the last line starting at or before off */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (e->lines[mid].norm_start <= off) lo = mid;
        else hi = mid;
    }
    return &e->lines[lo];
}

/* The span in the source of seg[a..b). */
static int seg_span(tokenizer_encoder *e, size_t a, size_t b)
{
    if (b > e->seg_len) b = e->seg_len;
    if (a >= b) { /* nothing of the source (add_prefix_space's own space) */
        const seg_line *l = a < e->seg_len ? line_of(e, a) : &e->lines[e->n_lines - 1];
        size_t at = a < e->seg_len ? (l->same ? l->src_start + (a - l->norm_start) : l->src_start) : l->src_end;
        return span_push(e, at, at, a < e->seg_len ? l->same : 1);
    }
    const seg_line *first = line_of(e, a), *last = line_of(e, b - 1);
    size_t start = first->same ? first->src_start + (a - first->norm_start) : first->src_start;
    size_t end = last->same ? last->src_start + (b - last->norm_start) : last->src_end;
    return span_push(e, start, end, first->same && last->same);
}

/* seg: the source's bytes s[0..n) (offset from e->text), or their normalized
 * copy norm[0..len): its lines, each normalized alone to see which the
 * normalizer changed. The normal forms never join text across a '\n' (a
 * starter that composes with nothing), so the lines' normal forms put end to
 * end are the whole's; if not, the text is one changed line. */
static int seg_begin(tokenizer_encoder *e, const char *s, size_t n, const char *norm, size_t len)
{
    size_t src = (size_t)(s - e->text);
    e->seg = norm ? norm : s;
    e->seg_len = norm ? len : n;
    e->n_lines = 0;
    size_t want = 1;
    if (norm && (len != n || memcmp(norm, s, n) != 0))
        for (size_t i = 0; i < n; i++) want += s[i] == '\n';
    if (want > e->cap_lines) {
        seg_line *l = realloc(e->lines, want * sizeof *l);
        if (!l) return oom(e);
        e->lines = l;
        e->cap_lines = want;
    }
    if (want == 1) { /* unchanged, or changed without a line break */
        int same = !norm || (len == n && memcmp(norm, s, n) == 0);
        e->lines[e->n_lines++] = (seg_line){0, src, src + n, same};
        return 0;
    }
    size_t at = 0, norm_at = 0;
    int whole = 1;
    while (at < n) {
        const char *nl = memchr(s + at, '\n', n - at);
        size_t end = nl ? (size_t)(nl - s) + 1 : n;
        char *one;
        size_t one_len;
        if (tokenizer_normalize(e->t, s + at, end - at, &one, &one_len) != 0) return oom(e);
        whole &= norm_at + one_len <= len && memcmp(norm + norm_at, one, one_len) == 0;
        e->lines[e->n_lines++] =
            (seg_line){norm_at, src + at, src + end, one_len == end - at && memcmp(one, s + at, one_len) == 0};
        free(one);
        norm_at += one_len;
        at = end;
    }
    if (!whole || norm_at != len) {
        e->n_lines = 0;
        e->lines[e->n_lines++] = (seg_line){0, src, src + n, 0};
    }
    return 0;
}

/* The ids bpe_encode_piece appended from `first` on: each one's bytes in turn. */
static int piece_spans(tokenizer_encoder *e, const char *p, size_t n, size_t first)
{
    size_t at = 0;
    for (size_t i = first; i < e->out->n; i++) {
        size_t len = 0;
        if (!bpe_token_bytes(e->t->bpe, (int)e->out->ids[i], &len) || at + len > n) len = n - at;
        if (i + 1 == e->out->n) len = n - at; /* the last takes the rest (byte-level BPE: exactly the rest) */
        int rc = seg_span(e, seg_offset(e, p + at), seg_offset(e, p + at + len));
        if (rc) return rc;
        at += len;
    }
    return 0;
}

static int pretokenize(tokenizer_encoder *e, int step, const char *s, size_t n)
{
    if (n == 0) return 0;
    if (step == e->t->n_steps) {
        size_t first = e->out->n;
        if (bpe_encode_piece(e->bpe, s, n, e->out) != 0) return oom(e);
        return e->spans ? piece_spans(e, s, n, first) : 0;
    }
    switch (e->t->steps[step].kind) {
    case STEP_SPLIT: return step_split(e, step, s, n);
    case STEP_BYTE_LEVEL: return step_byte_level(e, step, s, n);
    case STEP_GPT2:
        for (size_t i = 0; i < n;) {
            size_t end = gpt2_piece_end(s, n, i);
            int rc = pretokenize(e, step + 1, s + i, end - i);
            if (rc) return rc;
            i = end;
        }
        return 0;
    }
    return 0;
}

typedef struct {
    tokenizer_encoder *e;
    const char *s;
    int pass; /* 1: the raw text's pieces; 2: a normalized text's */
} added_ctx;

static int encode_text(tokenizer_encoder *e, const char *s, size_t n);

static int added_piece(size_t start, size_t end, long id, void *arg)
{
    added_ctx *c = arg;
    if (id >= 0) {
        if (token_buf_push(c->e->out, (uint32_t)id) != 0) return oom(c->e);
        if (!c->e->spans) return 0;
        if (c->pass == 1) return span_push(c->e, start, end, 1); /* c->s is the source */
        return seg_span(c->e, start, end);
    }
    if (c->pass == 1) return encode_text(c->e, c->s + start, end - start);
    return pretokenize(c->e, 0, c->s + start, end - start);
}

/* Text between raw added tokens: normalized, then the normalized added
 * tokens cut out, then pre-tokenized. */
static int encode_text(tokenizer_encoder *e, const char *s, size_t n)
{
    const tokenizer *t = e->t;
    char *norm = NULL;
    size_t len = 0;
    if (t->n_norm && tokenizer_normalize(t, s, n, &norm, &len) != 0)
        return errline(e->err, e->errlen, "the normalizer failed (out of memory?)");
    int rc = e->spans ? seg_begin(e, s, n, norm, len) : 0;
    if (rc) {
        free(norm);
        return rc;
    }
    if (norm) {
        s = norm;
        n = len;
    }
    if (added_tokens_count(t->normalized)) {
        added_ctx c = {e, s, 2};
        rc = added_tokens_split(t->normalized, s, n, added_piece, &c);
    } else {
        rc = pretokenize(e, 0, s, n);
    }
    free(norm);
    return rc;
}

static int encode(tokenizer_encoder *e, const char *text, size_t n, token_buf *out, char *err, size_t errlen)
{
    e->out = out;
    e->err = err;
    e->errlen = errlen;
    e->text = text;
    for (int i = 0; i < TOK_MAX_STEPS; i++) e->depth[i].from = NULL;
    if (added_tokens_count(e->t->raw)) {
        added_ctx c = {e, text, 1};
        return added_tokens_split(e->t->raw, text, n, added_piece, &c);
    }
    return encode_text(e, text, n);
}

int tokenizer_encode(tokenizer_encoder *e, const char *text, size_t n, token_buf *out, char *err, size_t errlen)
{
    e->spans = NULL;
    return encode(e, text, n, out, err, errlen);
}

int tokenizer_encode_spans(tokenizer_encoder *e, const char *text, size_t n, token_buf *out, token_spans *spans,
                           char *err, size_t errlen)
{
    e->spans = spans;
    int rc = encode(e, text, n, out, err, errlen);
    e->spans = NULL;
    return rc;
}
