/* bpe.c — see bpe.h. Three hash tables carry the work: merges keyed by the
 * pair of ids (rank and merged id), tokens keyed by their bytes (loading the
 * merges, ignore_merges, added tokens), and each encoder's cache of pieces. */
#include "lib/text/bpe.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "lib/text/gpt2_data.h"
#include "lib/util/errline.h"
#include "lib/util/grow.h"

enum { NO_RANK = -1 };

typedef struct {
    uint64_t key; /* first id << 32 | second id; EMPTY_PAIR when free */
    int32_t rank;
    uint32_t merged;
} pair_slot;

#define EMPTY_PAIR UINT64_MAX

/* Token raw bytes -> id (open addressing; id -1: free). */
typedef struct {
    uint64_t hash;
    int id;
} name_slot;

struct bpe_vocab {
    int n_tokens, n_merges, eot;
    int ignore_merges; /* a piece that is a token is that token, merges or not */
    char *bytes;       /* every token's raw bytes, back to back */
    size_t *offset;    /* token id -> its bytes: bytes + offset[id], offset[id+1] - offset[id] long */
    uint32_t byte_id[256];
    pair_slot *pairs;  /* open addressing, linear probing */
    uint64_t pair_mask;
    name_slot *names;  /* every token by its bytes */
    uint64_t name_mask;
};

static uint64_t pair_hash(uint64_t key)
{
    key ^= key >> 31;
    key *= 0x9e3779b97f4a7c15ull;
    return key ^ key >> 29;
}

static const pair_slot *find_pair(const bpe_vocab *v, uint32_t a, uint32_t b)
{
    uint64_t key = (uint64_t)a << 32 | b;
    for (uint64_t i = pair_hash(key) & v->pair_mask;; i = (i + 1) & v->pair_mask) {
        if (v->pairs[i].key == key) return &v->pairs[i];
        if (v->pairs[i].key == EMPTY_PAIR) return NULL;
    }
}

/* ---- loading ---- */

/* GPT-2's bytes_to_unicode: bytes that are printable Latin-1 ('!'..'~',
 * '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 bytes, in order,
 * for U+0100, U+0101, ... byte_of_cp is the inverse (-1: spells no byte). */
static void spelling(uint32_t cp_of[256], int byte_of_cp[324])
{
    int n = 0;
    for (int i = 0; i < 324; i++) byte_of_cp[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        cp_of[b] = printable ? (uint32_t)b : 256u + (uint32_t)n++;
        byte_of_cp[cp_of[b]] = b;
    }
}

/* A token spelled in byte-level characters -> its raw bytes, into out (at
 * least n bytes). Returns the byte count, or -1 when a character is not one
 * of the 256 that spell bytes. */
static long unspell(const char *s, size_t n, const int byte_of_cp[324], char *out)
{
    const unsigned char *u = (const unsigned char *)s;
    long len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        if (u[i] < 0x80) cp = u[i++];
        else if ((u[i] & 0xe0) == 0xc0 && i + 1 < n) { cp = (uint32_t)(u[i] & 0x1f) << 6 | (u[i + 1] & 0x3f); i += 2; }
        else return -1; /* every spelling character is below U+0144: one or two bytes */
        if (cp >= 324 || byte_of_cp[cp] < 0) return -1;
        out[len++] = (char)byte_of_cp[cp];
    }
    return len;
}

long bpe_unspell(const char *s, size_t n, char *out)
{
    uint32_t cp_of[256];
    int byte_of_cp[324];
    spelling(cp_of, byte_of_cp);
    return unspell(s, n, byte_of_cp, out);
}

int bpe_token_id(const bpe_vocab *v, const char *s, size_t n)
{
    uint64_t h = XXH3_64bits(s, n);
    for (uint64_t i = h & v->name_mask;; i = (i + 1) & v->name_mask) {
        const name_slot *sl = &v->names[i];
        if (sl->id < 0) return -1;
        size_t len;
        const char *b = bpe_token_bytes(v, sl->id, &len);
        if (sl->hash == h && len == n && !memcmp(b, s, n)) return sl->id;
    }
}

static void name_insert(bpe_vocab *v, int id)
{
    size_t n;
    const char *s = bpe_token_bytes(v, id, &n);
    uint64_t h = XXH3_64bits(s, n), i = h & v->name_mask;
    while (v->names[i].id >= 0) i = (i + 1) & v->name_mask;
    v->names[i] = (name_slot){h, id};
}

static uint64_t pow2_at_least(uint64_t n)
{
    uint64_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

/* A JSON object of spelled token -> id (encoder.json, or a tokenizer.json's
 * model.vocab) -> v->bytes / v->offset / v->names / v->byte_id. `where`
 * names the object in errors. The ids must be 0 .. n-1, each once. */
static int load_tokens(bpe_vocab *v, const cJSON *root, const char *where, char *err, size_t errlen)
{
    if (!cJSON_IsObject(root)) return errline(err, errlen, "%s: not a JSON object of token -> id", where);
    uint32_t cp_of[256];
    int byte_of_cp[324];
    spelling(cp_of, byte_of_cp);

    int n = cJSON_GetArraySize(root), rc = 0;
    size_t total = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) total += strlen(it->string);
    v->n_tokens = n;
    v->bytes = malloc(total + 1);
    v->offset = calloc((size_t)n + 1, sizeof *v->offset);
    v->name_mask = pow2_at_least(2 * (uint64_t)n) - 1;
    v->names = malloc((v->name_mask + 1) * sizeof *v->names);
    size_t *len_of = calloc((size_t)n, sizeof *len_of);
    char *scratch = malloc(total + 1);
    signed char *seen = calloc((size_t)n, 1);
    if (!v->bytes || !v->offset || !v->names || !len_of || !scratch || !seen) {
        rc = errline(err, errlen, "out of memory loading the vocabulary");
        goto out;
    }
    /* ids may come in any order: first the length of each id's bytes */
    cJSON_ArrayForEach(it, root) {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (d < 0 || d >= n || d != (int)d) {
            rc = errline(err, errlen, "%s: token '%s' has id %s, not an integer in [0, %d)", where, it->string,
                         cJSON_IsNumber(it) ? "out of range" : "of another type", n);
            goto out;
        }
        int id = (int)d;
        if (seen[id]) {
            rc = errline(err, errlen, "%s: id %d is given twice", where, id);
            goto out;
        }
        seen[id] = 1;
        long len = unspell(it->string, strlen(it->string), byte_of_cp, scratch);
        if (len < 0) {
            rc = errline(err, errlen, "%s: token '%s' uses a character that spells no byte (not a byte-level BPE "
                         "vocabulary)", where, it->string);
            goto out;
        }
        len_of[id] = (size_t)len;
    }
    for (int id = 0; id < n; id++) v->offset[id + 1] = v->offset[id] + len_of[id];
    cJSON_ArrayForEach(it, root) {
        int id = (int)it->valuedouble;
        unspell(it->string, strlen(it->string), byte_of_cp, v->bytes + v->offset[id]);
    }
    for (uint64_t i = 0; i <= v->name_mask; i++) v->names[i].id = -1;
    for (int id = 0; id < n; id++) name_insert(v, id);
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int id = bpe_token_id(v, &c, 1);
        if (id < 0) {
            rc = errline(err, errlen, "%s: byte 0x%02x has no token (a byte-level BPE has all 256)", where, b);
            goto out;
        }
        v->byte_id[b] = (uint32_t)id;
    }
    it = cJSON_GetObjectItemCaseSensitive(root, "<|endoftext|>");
    v->eot = it ? (int)it->valuedouble : -1;
out:
    free(len_of);
    free(scratch);
    free(seen);
    return rc;
}

/* The merges: first sized for at most n_max of them, then one by one, best
 * rank first. Each merge's two halves and their concatenation must be tokens. */
static int merges_begin(bpe_vocab *v, size_t n_max, char *err, size_t errlen)
{
    v->pair_mask = pow2_at_least(2 * (uint64_t)n_max) - 1;
    v->pairs = malloc((v->pair_mask + 1) * sizeof *v->pairs);
    if (!v->pairs) return errline(err, errlen, "out of memory loading the merges");
    for (uint64_t i = 0; i <= v->pair_mask; i++) v->pairs[i].key = EMPTY_PAIR;
    return 0;
}

/* The merge of the spelled tokens a[0..la) and b[0..lb); buf holds la + lb
 * bytes. "what" on failure: which half is unknown (or -1: a half spells no
 * byte). */
static int merge_add(bpe_vocab *v, const char *a, size_t la, const char *b, size_t lb, const int byte_of_cp[324],
                     char *buf, const char **what)
{
    long ra = unspell(a, la, byte_of_cp, buf), rb = ra > 0 ? unspell(b, lb, byte_of_cp, buf + ra) : -1;
    if (ra <= 0 || rb <= 0) return *what = "a token spells no byte", -1;
    int ia = bpe_token_id(v, buf, (size_t)ra), ib = bpe_token_id(v, buf + ra, (size_t)rb);
    int iab = bpe_token_id(v, buf, (size_t)(ra + rb));
    if (ia < 0 || ib < 0 || iab < 0)
        return *what = ia < 0 ? "the first token" : ib < 0 ? "the second token" : "the merged token", -1;
    /* A pair listed twice keeps its last rank, as Python's dict(zip(...)) in
     * encoder.py does. */
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib, i = pair_hash(key) & v->pair_mask;
    while (v->pairs[i].key != EMPTY_PAIR && v->pairs[i].key != key) i = (i + 1) & v->pair_mask;
    v->pairs[i] = (pair_slot){key, v->n_merges++, (uint32_t)iab};
    return 0;
}

/* vocab.bpe ("#version" line, then "first second" per line, best rank first). */
static int load_merges_text(bpe_vocab *v, const char *text, size_t len, char *err, size_t errlen)
{
    uint32_t cp_of[256];
    int byte_of_cp[324];
    spelling(cp_of, byte_of_cp);
    size_t n_lines = 1;
    for (size_t i = 0; i < len; i++) n_lines += text[i] == '\n';
    char *buf = malloc(len + 1);
    if (!buf || merges_begin(v, n_lines, err, errlen) != 0) {
        free(buf);
        return buf ? -1 : errline(err, errlen, "out of memory loading the merges");
    }
    int rc = 0;
    size_t line_no = 0;
    for (size_t at = 0; at < len;) {
        const char *line = text + at, *nl = memchr(line, '\n', len - at);
        size_t line_len = nl ? (size_t)(nl - line) : len - at;
        at += line_len + 1;
        line_no++;
        if (line_len == 0 || (line_no == 1 && line[0] == '#')) continue;
        const char *sp = memchr(line, ' ', line_len), *what = NULL;
        if (!sp || merge_add(v, line, (size_t)(sp - line), sp + 1, line_len - (size_t)(sp - line) - 1, byte_of_cp,
                             buf, &what) != 0) {
            if (!what || what[0] == 'a')
                rc = errline(err, errlen, "vocab.bpe:%zu: not two tokens separated by one space: '%.*s'", line_no,
                             (int)line_len, line);
            else
                rc = errline(err, errlen, "vocab.bpe:%zu: '%.*s': %s is not in encoder.json", line_no, (int)line_len,
                             line, what);
            break;
        }
    }
    free(buf);
    return rc;
}

/* A tokenizer.json's model.merges: "first second" strings (tokenizers before
 * 0.20) or [first, second] arrays (0.20 on). */
static int load_merges_json(bpe_vocab *v, const cJSON *merges, const char *where, char *err, size_t errlen)
{
    if (!cJSON_IsArray(merges)) return errline(err, errlen, "%s.merges: not a JSON array", where);
    uint32_t cp_of[256];
    int byte_of_cp[324];
    spelling(cp_of, byte_of_cp);
    int n = cJSON_GetArraySize(merges);
    size_t longest = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        size_t len = 0;
        if (cJSON_IsString(m)) len = strlen(m->valuestring);
        else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                 cJSON_IsString(m->child->next))
            len = strlen(m->child->valuestring) + strlen(m->child->next->valuestring);
        if (len > longest) longest = len;
    }
    char *buf = malloc(longest + 1);
    if (!buf || merges_begin(v, (size_t)n, err, errlen) != 0) {
        free(buf);
        return buf ? -1 : errline(err, errlen, "out of memory loading the merges");
    }
    int rc = 0, k = 0;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *b = NULL, *what = NULL;
        size_t la = 0, lb = 0;
        if (cJSON_IsString(m)) {
            const char *sp = strchr(m->valuestring, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                a = m->valuestring, la = (size_t)(sp - a);
                b = sp + 1, lb = strlen(b);
            }
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            a = m->child->valuestring, la = strlen(a);
            b = m->child->next->valuestring, lb = strlen(b);
        }
        if (!a) {
            rc = errline(err, errlen, "%s.merges[%d]: not \"first second\" nor [\"first\", \"second\"]", where, k);
            break;
        }
        if (merge_add(v, a, la, b, lb, byte_of_cp, buf, &what) != 0) {
            rc = errline(err, errlen, "%s.merges[%d]: '%.*s' + '%s': %s%s", where, k, (int)la, a, b, what,
                         what[0] == 'a' ? "" : " is not in model.vocab");
            break;
        }
        k++;
    }
    free(buf);
    return rc;
}

bpe_vocab *bpe_vocab_parse(const char *encoder_json, size_t json_len, const char *merges, size_t merges_len,
                           char *err, size_t errlen)
{
    bpe_vocab *v = calloc(1, sizeof *v);
    if (!v) {
        errline(err, errlen, "out of memory loading the vocabulary");
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(encoder_json, json_len);
    int rc = load_tokens(v, root, "encoder.json", err, errlen);
    cJSON_Delete(root);
    if (rc != 0 || load_merges_text(v, merges, merges_len, err, errlen) != 0) {
        bpe_vocab_free(v);
        return NULL;
    }
    return v;
}

bpe_vocab *bpe_vocab_from_json(const cJSON *vocab, const cJSON *merges, int ignore_merges, const char *where,
                               char *err, size_t errlen)
{
    bpe_vocab *v = calloc(1, sizeof *v);
    if (!v) {
        errline(err, errlen, "out of memory loading the vocabulary");
        return NULL;
    }
    char what[1024];
    snprintf(what, sizeof what, "%s.vocab", where);
    if (load_tokens(v, vocab, what, err, errlen) != 0 || load_merges_json(v, merges, where, err, errlen) != 0) {
        bpe_vocab_free(v);
        return NULL;
    }
    v->ignore_merges = ignore_merges;
    return v;
}

bpe_vocab *bpe_vocab_gpt2(char *err, size_t errlen)
{
    size_t jn, mn;
    const char *json = gpt2_encoder_json(&jn), *merges = gpt2_vocab_bpe(&mn);
    return bpe_vocab_parse(json, jn, merges, mn, err, errlen);
}

void bpe_vocab_free(bpe_vocab *v)
{
    if (!v) return;
    free(v->bytes);
    free(v->offset);
    free(v->pairs);
    free(v->names);
    free(v);
}

int bpe_vocab_size(const bpe_vocab *v) { return v->n_tokens; }
int bpe_vocab_merges(const bpe_vocab *v) { return v->n_merges; }
int bpe_vocab_eot(const bpe_vocab *v) { return v->eot; }

const char *bpe_token_bytes(const bpe_vocab *v, int id, size_t *len)
{
    *len = v->offset[id + 1] - v->offset[id];
    return v->bytes + v->offset[id];
}

int token_buf_push(token_buf *b, uint32_t id)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 1024;
        uint32_t *ids = realloc(b->ids, cap * sizeof *ids);
        if (!ids) return -1;
        b->ids = ids;
        b->cap = cap;
    }
    b->ids[b->n++] = id;
    return 0;
}

void token_buf_free(token_buf *b)
{
    free(b->ids);
    *b = (token_buf){0};
}

/* ---- encoding ---- */

/* Pieces longer than this are not cached (long runs of spaces, URLs, ...):
 * they rarely come back and would crowd the cache out. */
enum { CACHE_MAX_PIECE = 64 };
/* The cache is emptied when it holds this many pieces; about 100 bytes each. */
enum { CACHE_MAX_ENTRIES = 1 << 20 };

typedef struct {
    uint64_t hash;
    uint32_t key_at, ids_at; /* into key_bytes / ids */
    uint16_t key_len, n_ids; /* key_len 0: free slot */
} cache_slot;

struct bpe_encoder {
    const bpe_vocab *v;
    cache_slot *slots;
    uint64_t mask;
    size_t used;
    char *key_bytes;
    size_t key_len, key_cap;
    uint32_t *ids;
    size_t n_ids, ids_cap;
    uint32_t *word; /* the merge loop's working ids */
    size_t word_cap;
};

bpe_encoder *bpe_encoder_new(const bpe_vocab *v)
{
    bpe_encoder *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->v = v;
    e->mask = (1u << 16) - 1;
    e->slots = calloc(e->mask + 1, sizeof *e->slots);
    if (!e->slots) {
        free(e);
        return NULL;
    }
    return e;
}

void bpe_encoder_free(bpe_encoder *e)
{
    if (!e) return;
    free(e->slots);
    free(e->key_bytes);
    free(e->ids);
    free(e->word);
    free(e);
}

static void cache_clear(bpe_encoder *e)
{
    memset(e->slots, 0, (e->mask + 1) * sizeof *e->slots);
    e->used = e->key_len = e->n_ids = 0;
}

/* The cached ids of piece p[0..n), or NULL (*slot: where it would go). */
static const cache_slot *cache_find(const bpe_encoder *e, const char *p, size_t n, uint64_t h, uint64_t *slot)
{
    uint64_t i = h & e->mask;
    for (;; i = (i + 1) & e->mask) {
        const cache_slot *s = &e->slots[i];
        if (!s->key_len) break;
        if (s->hash == h && s->key_len == n && !memcmp(e->key_bytes + s->key_at, p, n)) return s;
    }
    *slot = i;
    return NULL;
}

static int cache_grow(bpe_encoder *e)
{
    uint64_t mask = e->mask * 2 + 1;
    cache_slot *slots = calloc(mask + 1, sizeof *slots);
    if (!slots) return -1;
    for (uint64_t i = 0; i <= e->mask; i++) {
        if (!e->slots[i].key_len) continue;
        uint64_t j = e->slots[i].hash & mask;
        while (slots[j].key_len) j = (j + 1) & mask;
        slots[j] = e->slots[i];
    }
    free(e->slots);
    e->slots = slots;
    e->mask = mask;
    return 0;
}

/* BPE on one piece: its bytes' ids merged pair by pair, appended to out. */
static int merge_piece(bpe_encoder *e, const unsigned char *p, size_t n, token_buf *out, size_t *first)
{
    const bpe_vocab *v = e->v;
    if (n > e->word_cap) {
        uint32_t *w = realloc(e->word, n * sizeof *w);
        if (!w) return -1;
        e->word = w;
        e->word_cap = n;
    }
    uint32_t *w = e->word;
    for (size_t i = 0; i < n; i++) w[i] = v->byte_id[p[i]];
    while (n > 1) {
        const pair_slot *best = NULL;
        for (size_t i = 0; i + 1 < n; i++) {
            const pair_slot *s = find_pair(v, w[i], w[i + 1]);
            if (s && (!best || s->rank < best->rank)) best = s;
        }
        if (!best) break;
        uint32_t a = (uint32_t)(best->key >> 32), b = (uint32_t)best->key;
        size_t j = 0;
        for (size_t i = 0; i < n;) {
            if (i + 1 < n && w[i] == a && w[i + 1] == b) {
                w[j++] = best->merged;
                i += 2;
            } else {
                w[j++] = w[i++];
            }
        }
        n = j;
    }
    *first = out->n;
    for (size_t i = 0; i < n; i++)
        if (token_buf_push(out, w[i]) != 0) return -1;
    return 0;
}

/* A piece's ids, uncached: the piece's own token with ignore_merges, else
 * the merges'. */
static int piece_ids(bpe_encoder *e, const unsigned char *u, size_t n, token_buf *out, size_t *first)
{
    if (e->v->ignore_merges) {
        int id = bpe_token_id(e->v, (const char *)u, n);
        if (id >= 0) return *first = out->n, token_buf_push(out, (uint32_t)id);
    }
    return merge_piece(e, u, n, out, first);
}

int bpe_encode_piece(bpe_encoder *e, const char *p, size_t n, token_buf *out)
{
    const unsigned char *u = (const unsigned char *)p;
    if (n == 0) return 0;
    if (n == 1) return token_buf_push(out, e->v->byte_id[u[0]]);
    size_t first;
    if (n > CACHE_MAX_PIECE) return piece_ids(e, u, n, out, &first);
    uint64_t h = XXH3_64bits(p, n), slot;
    const cache_slot *hit = cache_find(e, p, n, h, &slot);
    if (hit) {
        for (uint16_t i = 0; i < hit->n_ids; i++)
            if (token_buf_push(out, e->ids[hit->ids_at + i]) != 0) return -1;
        return 0;
    }
    if (piece_ids(e, u, n, out, &first) != 0) return -1;
    size_t n_ids = out->n - first;
    if (e->used >= CACHE_MAX_ENTRIES) {
        cache_clear(e);
        cache_find(e, p, n, h, &slot);
    }
    if (grow_bytes(&e->key_bytes, &e->key_cap, e->key_len, n, 1 << 16) != 0 ||
        grow_bytes(&e->ids, &e->ids_cap, e->n_ids * sizeof *e->ids, n_ids * sizeof *e->ids, 1 << 16) != 0)
        return 0; /* no room to cache: the ids are out all the same */
    memcpy(e->key_bytes + e->key_len, p, n);
    memcpy(e->ids + e->n_ids, out->ids + first, n_ids * sizeof *e->ids);
    e->slots[slot] = (cache_slot){h, (uint32_t)e->key_len, (uint32_t)e->n_ids, (uint16_t)n, (uint16_t)n_ids};
    e->key_len += n;
    e->n_ids += n_ids;
    if (++e->used * 2 > e->mask + 1 && cache_grow(e) != 0) cache_clear(e);
    return 0;
}
