/* tokenizer_json.c — loading a Hugging Face tokenizer.json (tokenizer.h).
 * Every field that changes the ids is read and either honoured or refused:
 * a tokenizer dtrun would encode differently from Hugging Face is one line
 * naming the field, never a silently different tokenization. Fields that
 * change only offsets (trim_offsets, the post-processor's add_prefix_space)
 * or the encoding of batches (truncation, padding: dtrun encodes whole
 * documents) are not read. */
#include "lib/text/tokenizer.h"

#include <cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/text/tokenizer_internal.h"
#include "lib/text/utf8_text.h"
#include "lib/util/errline.h"
#include "lib/util/exit_codes.h"

/* The pattern of GPT-2's regex, as ByteLevel's use_regex runs it
 * (tokenizers/src/pre_tokenizers/byte_level.rs). */
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct {
    tokenizer *t;
    const char *path;
    int status; /* DT_EXIT_USAGE or DT_EXIT_DATA once failed */
    char *err;
    size_t errlen;
    int byte_level; /* a ByteLevel pre-tokenizer step was seen */
} loader;

/* "PATH: FIELD: ..." refusals (exit 2) and errors (exit 3). */
__attribute__((format(printf, 3, 4))) static int fail(loader *l, int status, const char *fmt, ...)
{
    size_t n = (size_t)snprintf(l->err, l->errlen, "%s: ", l->path);
    if (n < l->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(l->err + n, l->errlen - n, fmt, ap);
        va_end(ap);
    }
    l->status = status;
    return -1;
}

static int unsupported(loader *l, const char *field, const char *what, const char *why)
{
    return fail(l, DT_EXIT_USAGE, "%s %s is not implemented (%s)", field, what, why);
}

static const char *type_of(const cJSON *o)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static int flag(const cJSON *o, const char *name, int dflt)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsBool(f) ? cJSON_IsTrue(f) : dflt;
}

/* ---- model ---- */

static int load_model(loader *l, const cJSON *model)
{
    if (!cJSON_IsObject(model)) return fail(l, DT_EXIT_DATA, "model: missing or not a JSON object");
    const char *type = type_of(model);
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (type ? strcmp(type, "BPE") != 0 : !merges) {
        char what[160];
        snprintf(what, sizeof what, "'%s'", type ? type : "(none, and no merges)");
        return unsupported(l, "model.type", what, "dtrun implements byte-level BPE tokenizers, not SentencePiece "
                                                  "Unigram, WordPiece or WordLevel");
    }
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (f && !cJSON_IsNull(f) && !(cJSON_IsNumber(f) && f->valuedouble == 0))
        return unsupported(l, "model.dropout", "above 0", "BPE dropout samples tokenizations; dtrun's is exact");
    if (flag(model, "byte_fallback", 0))
        return unsupported(l, "model.byte_fallback", "true",
                           "a SentencePiece-style BPE with <0xNN> byte tokens, as Llama 2's");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        f = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
        if (f && !cJSON_IsNull(f) && !(cJSON_IsString(f) && !f->valuestring[0])) {
            char field[64];
            snprintf(field, sizeof field, "model.%s", affixes[i]);
            return unsupported(l, field, cJSON_IsString(f) ? f->valuestring : "(not a string)",
                               "a byte-level BPE has none");
        }
    }
    char why[2048];
    l->t->bpe = bpe_vocab_from_json(cJSON_GetObjectItemCaseSensitive(model, "vocab"), merges,
                                    flag(model, "ignore_merges", 0), "model", why, sizeof why);
    if (!l->t->bpe) return fail(l, DT_EXIT_DATA, "%s", why);
    l->t->n_ids = bpe_vocab_size(l->t->bpe);
    return 0;
}

/* ---- normalizer ---- */

static int load_normalizer(loader *l, const cJSON *n, const char *field)
{
    if (!n || cJSON_IsNull(n)) return 0;
    const char *type = type_of(n);
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers"), *it;
        if (!cJSON_IsArray(list)) return fail(l, DT_EXIT_DATA, "%s.normalizers: not a JSON array", field);
        int i = 0;
        cJSON_ArrayForEach(it, list) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.normalizers[%d]", field, i++);
            if (load_normalizer(l, it, sub) != 0) return -1;
        }
        return 0;
    }
    static const char *const forms[] = {[NORM_NFC] = "NFC", [NORM_NFD] = "NFD", [NORM_NFKC] = "NFKC",
                                        [NORM_NFKD] = "NFKD"};
    for (int k = 0; type && k < 4; k++) {
        if (strcmp(type, forms[k]) != 0) continue;
        if (l->t->n_norm == TOK_MAX_NORMALIZERS) return unsupported(l, field, "(one too many)", "at most 8");
        l->t->norm[l->t->n_norm++] = (norm_form)k;
        return 0;
    }
    char what[160], ftype[300];
    snprintf(what, sizeof what, "'%s'", type ? type : "(no type)");
    snprintf(ftype, sizeof ftype, "%s.type", field);
    return unsupported(l, ftype, what, "dtrun implements the NFC, NFD, NFKC and NFKD normalizers");
}

/* ---- pre-tokenizer ---- */

static int add_step(loader *l, pretok_step st, const char *field)
{
    if (l->t->n_steps == TOK_MAX_STEPS) {
        text_regex_free(st.re);
        return unsupported(l, field, "(one step too many)", "at most 16 steps");
    }
    l->t->steps[l->t->n_steps++] = st;
    return 0;
}

static int compile(loader *l, const char *pattern, int literal, const char *field, text_regex **re)
{
    char why[512];
    *re = text_regex_compile(pattern, literal, why, sizeof why);
    if (*re) return 0;
    return fail(l, DT_EXIT_USAGE, "%s '%s': %s", field, pattern, why);
}

static int load_pre_tokenizer(loader *l, const cJSON *p, const char *field)
{
    if (!p || cJSON_IsNull(p)) return 0;
    const char *type = type_of(p);
    char sub[256];
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers"), *it;
        if (!cJSON_IsArray(list)) return fail(l, DT_EXIT_DATA, "%s.pretokenizers: not a JSON array", field);
        int i = 0;
        cJSON_ArrayForEach(it, list) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", field, i++);
            if (load_pre_tokenizer(l, it, sub) != 0) return -1;
        }
        return 0;
    }
    if (type && !strcmp(type, "ByteLevel")) {
        pretok_step st = {.kind = STEP_BYTE_LEVEL, .add_prefix_space = flag(p, "add_prefix_space", 1)};
        snprintf(sub, sizeof sub, "%s (ByteLevel's GPT-2 regex)", field);
        if (flag(p, "use_regex", 1) && compile(l, GPT2_PATTERN, 0, sub, &st.re) != 0) return -1;
        l->byte_level = 1;
        return add_step(l, st, field);
    }
    if (type && !strcmp(type, "Digits")) {
        pretok_step st = {.kind = STEP_SPLIT, .behavior = SPLIT_ISOLATED};
        /* char::is_numeric (Nd, Nl, No), one digit a piece or runs of them */
        if (compile(l, flag(p, "individual_digits", 0) ? "\\p{N}" : "\\p{N}+", 0, field, &st.re) != 0) return -1;
        return add_step(l, st, field);
    }
    if (type && !strcmp(type, "Split")) {
        pretok_step st = {.kind = STEP_SPLIT, .invert = flag(p, "invert", 0)};
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
        static const char *const names[] = {[SPLIT_REMOVED] = "Removed", [SPLIT_ISOLATED] = "Isolated",
                                            [SPLIT_MERGED_WITH_PREVIOUS] = "MergedWithPrevious",
                                            [SPLIT_MERGED_WITH_NEXT] = "MergedWithNext",
                                            [SPLIT_CONTIGUOUS] = "Contiguous"};
        int b = -1;
        for (int k = 0; cJSON_IsString(beh) && k < 5; k++)
            if (!strcmp(beh->valuestring, names[k])) b = k;
        snprintf(sub, sizeof sub, "%s.behavior", field);
        if (b < 0)
            return fail(l, DT_EXIT_DATA, "%s: want Removed, Isolated, MergedWithPrevious, MergedWithNext or "
                                         "Contiguous", sub);
        st.behavior = (split_behavior)b;
        snprintf(sub, sizeof sub, "%s.pattern.%s", field, cJSON_IsString(re) ? "Regex" : "String");
        if (!cJSON_IsString(re) && !cJSON_IsString(str))
            return fail(l, DT_EXIT_DATA, "%s.pattern: want {\"Regex\": ...} or {\"String\": ...}", field);
        if (cJSON_IsString(str) && !str->valuestring[0])
            return unsupported(l, sub, "\"\"", "an empty string splits nothing");
        if (compile(l, cJSON_IsString(re) ? re->valuestring : str->valuestring, !cJSON_IsString(re), sub, &st.re) != 0)
            return -1;
        return add_step(l, st, field);
    }
    char what[160];
    snprintf(what, sizeof what, "'%s'", type ? type : "(no type)");
    snprintf(sub, sizeof sub, "%s.type", field);
    return unsupported(l, sub, what, "dtrun implements Sequence, Split, ByteLevel and Digits");
}

/* What decoding gives back for a token written `s` (an added token's
 * content, a template's token name): ByteLevel reads it as byte-level
 * spelling when every character spells a byte, else as it is. *len bytes,
 * malloc'd. */
static char *decoded(const char *s, size_t n, size_t *len)
{
    char *b = malloc(n + 1);
    if (!b) return NULL;
    long raw = bpe_unspell(s, n, b);
    if (raw < 0) memcpy(b, s, n), raw = (long)n;
    *len = (size_t)raw;
    return b;
}

/* Hugging Face's token_to_id: the added token whose content is `name`, else
 * the model's token spelled `name`; -1 when neither. */
long tokenizer_token_id(const tokenizer *t, const char *name)
{
    for (long i = 0; t->added && i < t->added_cap; i++)
        if (t->added[i].content && !strcmp(t->added[i].content, name)) return i;
    size_t len = strlen(name);
    char *raw = malloc(len + 1);
    long n = raw ? bpe_unspell(name, len, raw) : -1;
    long id = n >= 0 ? bpe_token_id(t->bpe, raw, (size_t)n) : -1;
    free(raw);
    return id;
}

/* ---- added tokens ---- */

/* The id Hugging Face gives an added token (tokenizers/src/tokenizer/
 * added_vocabulary.rs, add_tokens, run over the file's list in order; the
 * file's own "id" is only compared with it, and a warning logged): a content
 * already added keeps its id; a token of the model (as model.vocab spells
 * it) takes the model's id; any other the next id past the model's and the
 * added ones. Real files agree with their "id"s; an edited one may not. */
static long added_id(const tokenizer *t, const char *content, long model_n, long max_added)
{
    long id = tokenizer_token_id(t, content);
    if (id >= 0) return id;
    return max_added >= model_n ? max_added + 1 : model_n;
}

static int load_added(loader *l, const cJSON *list)
{
    tokenizer *t = l->t;
    if (!list || cJSON_IsNull(list)) return 0;
    if (!cJSON_IsArray(list)) return fail(l, DT_EXIT_DATA, "added_tokens: not a JSON array");
    long model_n = t->n_ids, max_added = -1;
    t->added_cap = model_n + cJSON_GetArraySize(list);
    t->added = calloc((size_t)t->added_cap, sizeof *t->added);
    t->raw = added_tokens_new();
    t->normalized = added_tokens_new();
    if (!t->added || !t->raw || !t->normalized) return fail(l, DT_EXIT_FAIL, "out of memory");
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, list) {
        char field[64];
        snprintf(field, sizeof field, "added_tokens[%d]", i++);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsString(content)) return fail(l, DT_EXIT_DATA, "%s.content: want a string", field);
        const char *c = content->valuestring;
        size_t len = strlen(c);
        if (!len) continue; /* Hugging Face skips an empty token */
        if (utf8_text_check(c, len) != len) return fail(l, DT_EXIT_DATA, "%s.content: not UTF-8", field);
        if (flag(it, "single_word", 0)) {
            char f[96];
            snprintf(f, sizeof f, "%s.single_word", field);
            return unsupported(l, f, "true", "a token matched only as a whole word");
        }
        long id = added_id(t, c, model_n, max_added);
        if (id > max_added) max_added = id;
        if (t->added[id].content) continue; /* the same content again: the first one's options */
        size_t blen;
        char *bytes = decoded(c, len, &blen), *copy = strdup(c);
        if (!bytes || !copy) return free(bytes), free(copy), fail(l, DT_EXIT_FAIL, "out of memory");
        t->added[id] = (added_text){bytes, blen, copy};
        /* Hugging Face matches the tokens marked "normalized" in a second pass,
         * over the text the first pass left, after the normalizer (which may
         * be none): two passes even then, since they can differ from one
         * (an unnormalized "ab" cuts "abc" before a normalized "abc" looks).
         * Special tokens are not normalized unless they say so. */
        int normalized = flag(it, "normalized", !flag(it, "special", 0));
        int lstrip = flag(it, "lstrip", 0), rstrip = flag(it, "rstrip", 0), rc;
        if (normalized && !t->n_norm) {
            rc = added_tokens_add(t->normalized, c, len, (uint32_t)id, lstrip, rstrip);
        } else if (normalized) { /* its content normalized the same way */
            char *norm;
            size_t nlen;
            if (tokenizer_normalize(t, c, len, &norm, &nlen) != 0)
                return fail(l, DT_EXIT_DATA, "%s.content: cannot be normalized", field);
            rc = nlen ? added_tokens_add(t->normalized, norm, nlen, (uint32_t)id, lstrip, rstrip) : 0;
            free(norm);
        } else {
            rc = added_tokens_add(t->raw, c, len, (uint32_t)id, lstrip, rstrip);
        }
        if (rc != 0) return fail(l, DT_EXIT_FAIL, "out of memory");
    }
    if (max_added + 1 > t->n_ids) t->n_ids = max_added + 1;
    return 0;
}

/* ---- post-processor: the ids before and after a single sequence ---- */

static int frame_push(loader *l, int after, long id, const char *field)
{
    tokenizer *t = l->t;
    if (id < 0 || id >= t->n_ids) return fail(l, DT_EXIT_DATA, "%s: id %ld is not in the vocabulary", field, id);
    int *n = after ? &t->n_after : &t->n_before;
    if (*n == TOK_MAX_FRAME) return unsupported(l, field, "(more than 8 special tokens)", "at most 8");
    (after ? t->after : t->before)[(*n)++] = (uint32_t)id;
    return 0;
}

static int load_post_processor(loader *l, const cJSON *p, const char *field)
{
    if (!p || cJSON_IsNull(p)) return 0;
    const char *type = type_of(p);
    char sub[256];
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "processors"), *it;
        if (!cJSON_IsArray(list)) return fail(l, DT_EXIT_DATA, "%s.processors: not a JSON array", field);
        int i = 0;
        cJSON_ArrayForEach(it, list) {
            snprintf(sub, sizeof sub, "%s.processors[%d]", field, i++);
            if (load_post_processor(l, it, sub) != 0) return -1;
        }
        return 0;
    }
    if (type && !strcmp(type, "ByteLevel")) return 0; /* offsets only */
    if (type && (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing"))) {
        /* single: cls A sep */
        static const char *const keys[] = {"cls", "sep"};
        for (int k = 0; k < 2; k++) {
            const cJSON *pair = cJSON_GetObjectItemCaseSensitive(p, keys[k]);
            snprintf(sub, sizeof sub, "%s.%s", field, keys[k]);
            if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 || !cJSON_IsNumber(pair->child->next))
                return fail(l, DT_EXIT_DATA, "%s: want [token, id]", sub);
            if (frame_push(l, k, (long)pair->child->next->valuedouble, sub) != 0) return -1;
        }
        return 0;
    }
    if (type && !strcmp(type, "TemplateProcessing")) {
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single"), *it;
        const cJSON *special = cJSON_GetObjectItemCaseSensitive(p, "special_tokens");
        if (!cJSON_IsArray(single)) return fail(l, DT_EXIT_DATA, "%s.single: not a JSON array", field);
        int i = 0, seen_a = 0;
        cJSON_ArrayForEach(it, single) {
            snprintf(sub, sizeof sub, "%s.single[%d]", field, i++);
            const cJSON *seq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
            const cJSON *tok = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
            if (seq) {
                const cJSON *sid = cJSON_GetObjectItemCaseSensitive(seq, "id");
                if (!cJSON_IsString(sid) || strcmp(sid->valuestring, "A") != 0 || seen_a)
                    return unsupported(l, sub, "(a sequence other than one A)", "one document is sequence A");
                seen_a = 1;
                continue;
            }
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(tok, "id");
            if (!cJSON_IsString(name)) return fail(l, DT_EXIT_DATA, "%s: want Sequence or SpecialToken", sub);
            /* the special token's ids come from special_tokens, else the vocabulary */
            const cJSON *entry = cJSON_GetObjectItemCaseSensitive(special, name->valuestring);
            const cJSON *ids = cJSON_GetObjectItemCaseSensitive(entry, "ids"), *id;
            if (cJSON_IsArray(ids)) {
                cJSON_ArrayForEach(id, ids) {
                    if (!cJSON_IsNumber(id)) return fail(l, DT_EXIT_DATA, "%s: special_tokens ids not numbers", sub);
                    if (frame_push(l, seen_a, (long)id->valuedouble, sub) != 0) return -1;
                }
            } else if (frame_push(l, seen_a, tokenizer_token_id(l->t, name->valuestring), sub) != 0) {
                return -1;
            }
        }
        if (!seen_a) return fail(l, DT_EXIT_DATA, "%s.single: no sequence A", field);
        return 0;
    }
    char what[160];
    snprintf(what, sizeof what, "'%s'", type ? type : "(no type)");
    snprintf(sub, sizeof sub, "%s.type", field);
    return unsupported(l, sub, what,
                       "dtrun implements TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel, Sequence");
}

static void load_decoder(loader *l, const cJSON *d)
{
    const char *type = d && !cJSON_IsNull(d) ? type_of(d) : "null";
    l->t->byte_level_decoder = type && !strcmp(type, "ByteLevel");
    snprintf(l->t->decoder_what, sizeof l->t->decoder_what, "'%s'", type ? type : "(no type)");
}

/* ---- the file ---- */

static char *read_file(const char *path, size_t *len, char *why, size_t whylen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, whylen, "cannot read (%s)", strerror(errno));
        return NULL;
    }
    struct stat st;
    char *buf = NULL;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (buf = malloc((size_t)st.st_size + 1)) &&
        fread(buf, 1, (size_t)st.st_size, f) == (size_t)st.st_size) {
        buf[st.st_size] = 0;
        *len = (size_t)st.st_size;
    } else {
        snprintf(why, whylen, "cannot read (%s)", S_ISREG(st.st_mode) ? strerror(errno) : "not a regular file");
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

tokenizer *tokenizer_load(const char *path, int *status, char *err, size_t errlen)
{
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        *status = DT_EXIT_FAIL;
        errline(err, errlen, "out of memory");
        return NULL;
    }
    struct stat st;
    int dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    size_t n = strlen(path);
    snprintf(t->name, sizeof t->name, "%s%s%s", path, dir && n && path[n - 1] != '/' ? "/" : "",
             dir ? "tokenizer.json" : "");
    loader l = {.t = t, .path = t->name, .err = err, .errlen = errlen};
    size_t len = 0;
    char why[256];
    char *text = read_file(t->name, &len, why, sizeof why);
    cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
    int rc = -1;
    if (!text) {
        fail(&l, DT_EXIT_DATA, "%s", why);
    } else if (!root) {
        const char *at = cJSON_GetErrorPtr();
        fail(&l, DT_EXIT_DATA, "not valid JSON (near byte %ld)", at >= text && at <= text + len ? (long)(at - text) : 0L);
    } else if (!cJSON_IsObject(root)) {
        fail(&l, DT_EXIT_DATA, "not a tokenizer.json (not a JSON object)");
    } else if (load_model(&l, cJSON_GetObjectItemCaseSensitive(root, "model")) == 0 &&
               load_normalizer(&l, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), "normalizer") == 0 &&
               load_pre_tokenizer(&l, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), "pre_tokenizer") == 0 &&
               load_added(&l, cJSON_GetObjectItemCaseSensitive(root, "added_tokens")) == 0 &&
               load_post_processor(&l, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), "post_processor") ==
                   0) {
        load_decoder(&l, cJSON_GetObjectItemCaseSensitive(root, "decoder"));
        if (!l.byte_level)
            unsupported(&l, "pre_tokenizer", "without a ByteLevel step",
                        "dtrun implements byte-level BPE; this is not one (Metaspace, SentencePiece)");
        else
            rc = 0;
    }
    cJSON_Delete(root);
    free(text);
    long eot = rc == 0 ? tokenizer_token_id(t, "<|endoftext|>") : -1;
    if (eot >= 0) t->eot[t->n_eot++] = (uint32_t)eot;
    if (rc != 0) {
        *status = l.status ? l.status : DT_EXIT_DATA;
        tokenizer_free(t);
        return NULL;
    }
    return t;
}
