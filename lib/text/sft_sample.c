/* sft_sample.c — see sft_sample.h. */
#include "lib/text/sft_sample.h"

#include <cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/errline.h"
#include "lib/util/exit_codes.h"

void mask_buf_free(mask_buf *m)
{
    free(m->b);
    *m = (mask_buf){0};
}

static int mask_put(mask_buf *m, unsigned char v, size_t n)
{
    if (m->n + n > m->cap) {
        size_t cap = m->cap ? m->cap : 4096;
        while (cap < m->n + n) cap *= 2;
        unsigned char *b = realloc(m->b, cap);
        if (!b) return -1;
        m->b = b;
        m->cap = cap;
    }
    if (n == 0) return 0; /* m->b may still be NULL */
    memset(m->b + m->n, v, n);
    m->n += n;
    return 0;
}

/* The single id `text` encodes to, or -1 (*n_ids: how many it gives). */
static long one_id(const tokenizer *tok, const char *text, int *n_ids)
{
    tokenizer_encoder *e = tokenizer_encoder_new(tok);
    token_buf b = {0};
    char why[256];
    long id = -1;
    *n_ids = 0;
    if (e && tokenizer_encode(e, text, strlen(text), &b, why, sizeof why) == 0) {
        *n_ids = (int)b.n;
        if (b.n == 1) id = b.ids[0];
    }
    token_buf_free(&b);
    tokenizer_encoder_free(e);
    return id;
}

int sft_recipe_check(sft_recipe *r, const char *eos, char *err, size_t errlen)
{
    const char *name = tokenizer_name(r->tok);
    int n;
    if (r->tmpl) {
        const char *const *tokens = chat_template_tokens(r->tmpl);
        for (int i = 0; tokens[i]; i++) {
            const char *t = i == 0 && r->bos[0] && !strcmp(tokens[i], "<|begin_of_text|>") ? r->bos : tokens[i];
            if (one_id(r->tok, t, &n) < 0)
                return errline(err, errlen,
                               "chat template %s: %s has no added token %s (its text encodes to %d ids): the "
                               "template does not fit this tokenizer",
                               chat_template_name(r->tmpl), name, t, n);
        }
        return 0;
    }
    const uint32_t *before, *after;
    tokenizer_template(r->tok, &before, &r->n_before, &after, &r->n_after);
    memcpy(r->before, before, (size_t)r->n_before * sizeof *before);
    memcpy(r->after, after, (size_t)r->n_after * sizeof *after);
    if (r->n_after) return 0;
    long id = eos && eos[0] ? one_id(r->tok, eos, &n) : -1;
    if (id < 0) id = tokenizer_token_id(r->tok, "<|endoftext|>");
    if (id < 0)
        return errline(err, errlen,
                       "%s: no end-of-sequence token to end a completion with (its post-processor adds none after a "
                       "sequence, tokenizer_config.json names no eos_token%s, and it has no <|endoftext|>)",
                       name, eos && eos[0] ? " that is one token" : "");
    r->after[r->n_after++] = (uint32_t)id;
    return 0;
}

struct sft_encoder {
    const sft_recipe *r;
    tokenizer_encoder *enc;
    chat_text text;
    chat_message *msgs;
    int cap_msgs;
    token_buf ids;
    token_spans spans;
};

sft_encoder *sft_encoder_new(const sft_recipe *r)
{
    sft_encoder *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->r = r;
    if (!(e->enc = tokenizer_encoder_new(r->tok))) {
        free(e);
        return NULL;
    }
    return e;
}

void sft_encoder_free(sft_encoder *e)
{
    if (!e) return;
    tokenizer_encoder_free(e->enc);
    chat_text_free(&e->text);
    free(e->msgs);
    token_buf_free(&e->ids);
    token_spans_free(&e->spans);
    free(e);
}

const char *sft_shape_of(const cJSON *obj)
{
    if (cJSON_GetObjectItemCaseSensitive(obj, "messages")) return "messages";
    if (cJSON_GetObjectItemCaseSensitive(obj, "conversations")) return "conversations";
    if (cJSON_GetObjectItemCaseSensitive(obj, "prompt") || cJSON_GetObjectItemCaseSensitive(obj, "completion"))
        return "prompt/completion";
    return NULL;
}

/* ---- the line's messages ---- */

typedef struct {
    const char *path;
    long line;
    char *err;
    size_t errlen;
} where;

__attribute__((format(printf, 3, 4))) static int bad(const where *w, int status, const char *fmt, ...)
{
    int n = snprintf(w->err, w->errlen, "%s:%ld: ", w->path, w->line);
    if (n > 0 && (size_t)n < w->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->err + n, w->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return status;
}

static const char *json_type(const cJSON *v)
{
    return cJSON_IsString(v) ? "a string" : cJSON_IsArray(v) ? "a list" : cJSON_IsObject(v) ? "an object"
         : cJSON_IsNumber(v) ? "a number" : cJSON_IsBool(v) ? "a boolean" : cJSON_IsNull(v) ? "null" : "?";
}

static int add_msg(sft_encoder *e, int *n, chat_message m)
{
    if (*n == e->cap_msgs) {
        int cap = e->cap_msgs ? 2 * e->cap_msgs : 16;
        chat_message *p = realloc(e->msgs, (size_t)cap * sizeof *p);
        if (!p) return -1;
        e->msgs = p;
        e->cap_msgs = cap;
    }
    e->msgs[(*n)++] = m;
    return 0;
}

/* A list of messages (field `field`: "messages", "prompt", ...) appended to
 * e->msgs; sharegpt: {from, value}. trained: its assistant turns count. */
static int read_messages(sft_encoder *e, const cJSON *list, const char *field, int sharegpt, int trained, int *n,
                         const where *w)
{
    if (!cJSON_IsArray(list))
        return bad(w, DT_EXIT_DATA, "%s is %s, not a list of messages", field, json_type(list));
    if (cJSON_GetArraySize(list) == 0) return bad(w, DT_EXIT_DATA, "%s is an empty list (no messages)", field);
    const char *role_key = sharegpt ? "from" : "role", *content_key = sharegpt ? "value" : "content";
    static const char *const roles[] = {"system", "user", "assistant"};
    static const char *const froms[] = {"system", "human", "gpt"};
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, list) {
        if (!cJSON_IsObject(m)) return bad(w, DT_EXIT_DATA, "%s[%d] is %s, not a message object", field, i, json_type(m));
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, role_key);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, content_key);
        if (!role) return bad(w, DT_EXIT_DATA, "%s[%d] has no '%s'", field, i, role_key);
        if (!cJSON_IsString(role)) return bad(w, DT_EXIT_DATA, "%s[%d].%s is %s, not a string", field, i, role_key, json_type(role));
        int r = -1;
        for (int k = 0; k < 3; k++)
            if (!strcmp(role->valuestring, (sharegpt ? froms : roles)[k])) r = k;
        if (r < 0 && sharegpt) /* some ShareGPT sets say user/assistant */
            for (int k = 1; k < 3; k++)
                if (!strcmp(role->valuestring, roles[k])) r = k;
        if (r < 0)
            return bad(w, DT_EXIT_DATA, "%s[%d].%s '%s' is not %s", field, i, role_key, role->valuestring,
                       sharegpt ? "system, human or gpt" : "system, user or assistant");
        if (cJSON_GetObjectItemCaseSensitive(m, "tool_calls"))
            return bad(w, DT_EXIT_DATA, "%s[%d] has tool_calls (dtrun's templates render text turns only)", field, i);
        if (!content) return bad(w, DT_EXIT_DATA, "%s[%d] has no '%s'", field, i, content_key);
        if (!cJSON_IsString(content))
            return bad(w, DT_EXIT_DATA, "%s[%d].%s is %s, not a string (dtrun takes text content)", field, i,
                       content_key, json_type(content));
        chat_message msg = {(chat_role)r, content->valuestring, strlen(content->valuestring), trained};
        if (add_msg(e, n, msg) != 0) return bad(w, DT_EXIT_FAIL, "out of memory");
        i++;
    }
    return 0;
}

/* ---- encoding ---- */

/* ids and mask of e->text (its spans the loss counts), appended. */
static int encode_text(sft_encoder *e, token_buf *ids, mask_buf *mask, const where *w)
{
    const chat_text *t = &e->text;
    e->ids.n = 0;
    e->spans.n = 0;
    char why[512];
    if (tokenizer_encode_spans(e->enc, t->text, t->len, &e->ids, &e->spans, why, sizeof why) != 0)
        return bad(w, DT_EXIT_DATA, "%s", why);
    size_t j = 0, n_spans = t->n_spans;
    for (size_t k = 0; k < e->ids.n; k++) {
        const token_span *s = &e->spans.s[k];
        while (j < n_spans && t->spans[2 * j + 1] <= s->start) j++; /* token starts ascend */
        size_t a = j < n_spans ? t->spans[2 * j] : 0, b = j < n_spans ? t->spans[2 * j + 1] : 0;
        int in = j < n_spans && (s->start == s->end ? a <= s->start && s->start < b : a < s->end && s->start < b);
        if (in && !s->exact && !(a <= s->start && s->end <= b))
            return bad(w, DT_EXIT_DATA,
                       "the tokenizer's normalizer changes the text where the loss mask starts or ends (bytes %zu..%zu "
                       "of the rendered sample), so dtrun cannot tell which tokens are the reply's",
                       s->start, s->end);
        if (token_buf_push(ids, e->ids.ids[k]) != 0 || mask_put(mask, (unsigned char)in, 1) != 0)
            return bad(w, DT_EXIT_FAIL, "out of memory");
    }
    return 0;
}

static int put_ids(token_buf *ids, mask_buf *mask, const uint32_t *v, int n, unsigned char m)
{
    for (int i = 0; i < n; i++)
        if (token_buf_push(ids, v[i]) != 0) return -1;
    return mask_put(mask, m, (size_t)n);
}

int sft_encode(sft_encoder *e, const cJSON *obj, const char *path, long line, token_buf *ids, mask_buf *mask,
               char *err, size_t errlen)
{
    const sft_recipe *r = e->r;
    where w = {path, line, err, errlen};
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(obj, "messages");
    const cJSON *conv = cJSON_GetObjectItemCaseSensitive(obj, "conversations");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(obj, "prompt");
    const cJSON *completion = cJSON_GetObjectItemCaseSensitive(obj, "completion");
    int chat = msgs || conv, pc = prompt || completion;
    if (r->shape == SFT_PROMPT_COMPLETION && !pc)
        return bad(&w, DT_EXIT_DATA, "no 'prompt'/'completion' fields (--format prompt-completion)");
    if (r->shape == SFT_MESSAGES && !chat)
        return bad(&w, DT_EXIT_DATA, "no 'messages' (or 'conversations') field (--format messages)");
    if (!chat && !pc)
        return bad(&w, DT_EXIT_DATA, "no 'prompt'/'completion', 'messages' or 'conversations' field (instruction data)");
    if (r->shape != SFT_MESSAGES && pc && !chat) {
        if (!prompt) return bad(&w, DT_EXIT_DATA, "a 'completion' without a 'prompt'");
        if (!completion) return bad(&w, DT_EXIT_DATA, "a 'prompt' without a 'completion'");
    }
    size_t first = ids->n;
    int n = 0, rc;
    if (!chat && cJSON_IsString(prompt) && cJSON_IsString(completion)) {
        if (r->tmpl) {
            if (add_msg(e, &n, (chat_message){CHAT_USER, prompt->valuestring, strlen(prompt->valuestring), 0}) ||
                add_msg(e, &n, (chat_message){CHAT_ASSISTANT, completion->valuestring,
                                              strlen(completion->valuestring), 1}))
                return bad(&w, DT_EXIT_FAIL, "out of memory");
        } else { /* prompt + completion as one text, between the post-processor's tokens and the end */
            e->text.len = e->text.n_spans = 0;
            if (chat_text_put(&e->text, prompt->valuestring, strlen(prompt->valuestring), 0) ||
                chat_text_put(&e->text, completion->valuestring, strlen(completion->valuestring), 1) ||
                put_ids(ids, mask, r->before, r->n_before, 0))
                return bad(&w, DT_EXIT_FAIL, "out of memory");
            if ((rc = encode_text(e, ids, mask, &w)) != 0) return rc;
            if (put_ids(ids, mask, r->after, r->n_after, 1)) return bad(&w, DT_EXIT_FAIL, "out of memory");
            mask->b[mask->n - (ids->n - first)] = 0;
            return 0;
        }
    } else if (!chat) { /* prompt/completion as chats: only the completion's turns count */
        if (!cJSON_IsArray(prompt) || !cJSON_IsArray(completion))
            return bad(&w, DT_EXIT_DATA, "%s is %s (want two strings, or two lists of messages)",
                       cJSON_IsString(prompt) || cJSON_IsArray(prompt) ? "completion" : "prompt",
                       json_type(cJSON_IsString(prompt) || cJSON_IsArray(prompt) ? completion : prompt));
        if ((rc = read_messages(e, prompt, "prompt", 0, 0, &n, &w)) != 0 ||
            (rc = read_messages(e, completion, "completion", 0, 1, &n, &w)) != 0)
            return rc;
    } else if ((rc = read_messages(e, msgs ? msgs : conv, msgs ? "messages" : "conversations", !msgs, 1, &n, &w)) !=
               0) {
        return rc;
    }
    if (!r->tmpl)
        return bad(&w, DT_EXIT_USAGE, "chat messages need a chat template, and %s (give --chat-template NAME)",
                   r->no_template_why ? r->no_template_why : "there is none");
    if (chat_template_render(r->tmpl, r->always_generation_prompt, r->bos, e->msgs, n, &e->text) != 0)
        return bad(&w, DT_EXIT_FAIL, "out of memory");
    if ((rc = encode_text(e, ids, mask, &w)) != 0) return rc;
    if (ids->n > first) mask->b[mask->n - (ids->n - first)] = 0;
    return 0;
}
