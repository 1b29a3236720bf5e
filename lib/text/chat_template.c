/* chat_template.c — see chat_template.h. */
#include "lib/text/chat_template.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/util/errline.h"

typedef enum { FAMILY_LLAMA3, FAMILY_CHATML } chat_family;

struct chat_template {
    const char *name, *what;
    chat_family family;
    const char *default_system; /* ChatML: the system turn put first when the conversation has none */
    int llama31_system;         /* Llama 3.1: the system turn with its dates, always */
};

static const chat_template templates[] = {
    {"llama3", "Llama 3 Instruct", FAMILY_LLAMA3, NULL, 0},
    {"llama3.1", "Llama 3.1 Instruct", FAMILY_LLAMA3, NULL, 1},
    {"chatml", "ChatML (SmolLM)", FAMILY_CHATML, NULL, 0},
    {"qwen2", "Qwen2 Instruct (ChatML)", FAMILY_CHATML, "You are a helpful assistant.", 0},
    {"qwen2.5", "Qwen2.5 Instruct (ChatML)", FAMILY_CHATML,
     "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", 0},
    {"smollm2", "SmolLM2 Instruct (ChatML)", FAMILY_CHATML,
     "You are a helpful AI assistant named SmolLM, trained by Hugging Face", 0},
};
enum { N_TEMPLATES = sizeof templates / sizeof templates[0] };

/* The Jinja texts dtrun recognises, by chat_template_hash: those of the npm
 * tokenizer packages (Meta-Llama-3-8B, -Instruct, Qwen2.5-Instruct) and of
 * test/helpers/chat_templates.json. test/integration/sft_tokenize.sh renders
 * each text with @huggingface/jinja and compares it with dtrun's. */
static const struct {
    uint64_t hash;
    const char *name; /* a template above */
    int always_generation_prompt;
    const char *whose;
} known[] = {
    {0x98db376b81142d86ULL, "llama3", 0, "Meta-Llama-3-8B-Instruct"},
    {0xbf730aa151d604beULL, "llama3", 1, "Meta-Llama-3-8B (base)"},
    {0x6a2468d9e916768aULL, "llama3.1", 0, "Llama-3.1-8B-Instruct"},
    {0x5d024df2da48de7eULL, "chatml", 0, "SmolLM-Instruct"},
    {0x5d6f19af3a5c2171ULL, "qwen2", 0, "Qwen2-Instruct"},
    {0x1aca4a1bc9bc868bULL, "qwen2.5", 0, "Qwen2.5-Instruct"},
    {0x20392e7c56123e98ULL, "smollm2", 0, "SmolLM2-Instruct"},
};

const chat_template *chat_template_named(const char *name)
{
    for (int i = 0; i < N_TEMPLATES; i++)
        if (!strcmp(templates[i].name, name)) return &templates[i];
    return NULL;
}

const char *const *chat_template_names(void)
{
    static const char *names[N_TEMPLATES + 1];
    for (int i = 0; i < N_TEMPLATES; i++) names[i] = templates[i].name;
    return names;
}

const char *chat_template_name(const chat_template *t) { return t->name; }
const char *chat_template_what(const chat_template *t) { return t->what; }

const char *const *chat_template_tokens(const chat_template *t)
{
    static const char *const llama3[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                         "<|eot_id|>", NULL};
    static const char *const chatml[] = {"<|im_start|>", "<|im_end|>", NULL};
    return t->family == FAMILY_LLAMA3 ? llama3 : chatml;
}

const char *chat_template_end_of_turn(const chat_template *t)
{
    return t->family == FAMILY_LLAMA3 ? "<|eot_id|>" : "<|im_end|>";
}

/* ---- recognising a folder's template ---- */

static int word_char(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

uint64_t chat_template_hash(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
#define EMIT(ch) (h = (h ^ (unsigned char)(ch)) * 0x100000001b3ULL)
    if (n && s[n - 1] == '\n') n--; /* Jinja drops a template's one trailing newline */
    char tag = 0, quote = 0;       /* inside {{ (tag '{'), {% ('%'), {# ('#'); inside a string literal */
    int space = 0, prev = 0;       /* white space seen since prev, the last byte emitted in a tag */
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!tag) {
            EMIT(c);
            if (c == '{' && i + 1 < n && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) {
                tag = s[++i];
                EMIT(tag);
                prev = tag;
                space = 0;
            }
            continue;
        }
        if (quote) { /* a string literal is output: kept exactly */
            EMIT(c);
            if (c == '\\' && i + 1 < n) EMIT(s[++i]);
            else if (c == quote) quote = 0;
            prev = c;
            continue;
        }
        char close = tag == '{' ? '}' : tag;
        if (c == close && i + 1 < n && s[i + 1] == '}') {
            EMIT(c);
            EMIT('}');
            i++;
            tag = 0;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            space = 1;
            continue;
        }
        if (space && word_char(prev) && word_char(c)) EMIT(' '); /* "in messages": the space parts two words */
        space = 0;
        if (tag != '#' && (c == '\'' || c == '"')) quote = c;
        EMIT(c);
        prev = c;
    }
#undef EMIT
    return h;
}

static void dir_of(const char *path, char *out, size_t cap)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(out, cap, "%s", path);
        return;
    }
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, cap, ".");
    else snprintf(out, cap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

static char *slurp(const char *path, size_t *len, int *missing)
{
    FILE *f = fopen(path, "rb");
    *missing = !f && errno == ENOENT;
    if (!f) return NULL;
    char *buf = NULL;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (buf = malloc((size_t)st.st_size + 1)) &&
        fread(buf, 1, (size_t)st.st_size, f) == (size_t)st.st_size) {
        buf[st.st_size] = 0;
        *len = (size_t)st.st_size;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* bos_token / eos_token: a string, or an added token's object {"content": ...}. */
static void token_field(const cJSON *root, const char *key, char *out, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    out[0] = 0;
    if (cJSON_IsString(v) && strlen(v->valuestring) < cap) snprintf(out, cap, "%s", v->valuestring);
}

int tokenizer_config_read(const char *tokenizer_path, tokenizer_config *c, char *err, size_t errlen)
{
    *c = (tokenizer_config){0};
    char dir[4096];
    dir_of(tokenizer_path, dir, sizeof dir);
    snprintf(c->config, sizeof c->config, "%s/tokenizer_config.json", dir);
    size_t len = 0;
    int missing;
    char *text = slurp(c->config, &len, &missing);
    if (!text && !missing) return errline(err, errlen, "%s: cannot read (%s)", c->config, strerror(errno));
    if (text) {
        cJSON *root = cJSON_ParseWithLength(text, len);
        free(text);
        if (!cJSON_IsObject(root)) {
            cJSON_Delete(root);
            return errline(err, errlen, "%s: not valid JSON (a tokenizer_config.json is one JSON object)", c->config);
        }
        token_field(root, "bos_token", c->bos, sizeof c->bos);
        token_field(root, "eos_token", c->eos, sizeof c->eos);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
        if (cJSON_IsArray(t)) { /* [{name, template}, ...]: Hugging Face takes "default" */
            const cJSON *it, *pick = NULL;
            cJSON_ArrayForEach(it, t) {
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
                if (cJSON_IsString(name) && !strcmp(name->valuestring, "default"))
                    pick = cJSON_GetObjectItemCaseSensitive(it, "template");
            }
            if (!cJSON_IsString(pick)) {
                cJSON_Delete(root);
                return errline(err, errlen, "%s: chat_template is a list of templates without one named \"default\" "
                                            "(give --chat-template NAME)", c->config);
            }
            t = pick;
        }
        if (cJSON_IsString(t)) {
            c->template = strdup(t->valuestring);
            snprintf(c->source, sizeof c->source, "%s", c->config);
        } else if (t && !cJSON_IsNull(t)) {
            cJSON_Delete(root);
            return errline(err, errlen, "%s: chat_template is not a string", c->config);
        }
        cJSON_Delete(root);
    }
    char jinja[4200];
    snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", dir);
    text = slurp(jinja, &len, &missing);
    if (!text && !missing) return errline(err, errlen, "%s: cannot read (%s)", jinja, strerror(errno));
    if (text) { /* transformers prefers it to tokenizer_config.json's */
        free(c->template);
        c->template = text;
        snprintf(c->source, sizeof c->source, "%s", jinja);
    }
    return 0;
}

void tokenizer_config_free(tokenizer_config *c)
{
    free(c->template);
    c->template = NULL;
}

int chat_template_recognise(const tokenizer_config *c, const chat_template **t, int *always_generation_prompt,
                            const char **whose, char *err, size_t errlen)
{
    *t = NULL;
    *always_generation_prompt = 0;
    *whose = NULL;
    if (!c->template) return 0;
    size_t n = strlen(c->template);
    uint64_t h = chat_template_hash(c->template, n);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (known[i].hash == h) {
            *t = chat_template_named(known[i].name);
            *always_generation_prompt = known[i].always_generation_prompt;
            *whose = known[i].whose;
            return 0;
        }
    /* what it looks like, to say which --chat-template may fit */
    const char *tmpl = c->template, *looks = "neither Llama 3's nor ChatML's markers";
    if (strstr(tmpl, "<|start_header_id|>")) looks = "Llama 3-like: <|start_header_id|>";
    else if (strstr(tmpl, "<|im_start|>")) looks = "ChatML-like: <|im_start|>";
    const char *date = strstr(tmpl, "strftime_now") ? "; it renders today's date (strftime_now), which dtrun "
                                                      "does not"
                                                    : "";
    return errline(err, errlen,
                   "%s: chat_template (%zu bytes, %s, hash %016llx%s) is not one dtrun knows (those of Llama 3, "
                   "Llama 3.1, Qwen2, Qwen2.5, SmolLM, SmolLM2); give --chat-template llama3, llama3.1, chatml, qwen2, "
                   "qwen2.5 or smollm2 if one renders it, or none for plain prompt + completion",
                   c->source, n, looks, (unsigned long long)h, date);
}

/* ---- rendering ---- */

void chat_text_free(chat_text *c)
{
    free(c->text);
    free(c->spans);
    *c = (chat_text){0};
}

int chat_text_put(chat_text *c, const char *s, size_t n, int masked)
{
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 1024;
        while (cap < c->len + n + 1) cap *= 2;
        char *t = realloc(c->text, cap);
        if (!t) return -1;
        c->text = t;
        c->cap = cap;
    }
    if (masked && n) {
        if (c->n_spans && c->spans[2 * c->n_spans - 1] == c->len) { /* extends the last span */
            c->spans[2 * c->n_spans - 1] += n;
        } else {
            if (c->n_spans == c->cap_spans) {
                size_t cap = c->cap_spans ? 2 * c->cap_spans : 16;
                size_t *sp = realloc(c->spans, 2 * cap * sizeof *sp);
                if (!sp) return -1;
                c->spans = sp;
                c->cap_spans = cap;
            }
            c->spans[2 * c->n_spans] = c->len;
            c->spans[2 * c->n_spans + 1] = c->len + n;
            c->n_spans++;
        }
    }
    memcpy(c->text + c->len, s, n);
    c->len += n;
    c->text[c->len] = 0;
    return 0;
}

static int put(chat_text *c, const char *s) { return chat_text_put(c, s, strlen(s), 0); }

/* Python's str.isspace, which Jinja's trim (str.strip) strips. */
static size_t space_at(const unsigned char *s, size_t n)
{
    if (n == 0) return 0;
    if (s[0] < 0x80) return (s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x20);
    if (n >= 2 && s[0] == 0xc2) return s[1] == 0x85 || s[1] == 0xa0 ? 2 : 0;
    if (n >= 3 && s[0] == 0xe1 && s[1] == 0x9a && s[2] == 0x80) return 3; /* U+1680 */
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x80 &&
        (s[2] <= 0x8a || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf)) /* U+2000..200A, 2028, 2029, 202F */
        return 3;
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) return 3; /* U+205F */
    if (n >= 3 && s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80) return 3; /* U+3000 */
    return 0;
}

/* The last code point of s[0..n) starts where. */
static size_t last_cp(const unsigned char *s, size_t n)
{
    size_t i = n - 1;
    while (i > 0 && (s[i] & 0xc0) == 0x80) i--;
    return i;
}

static void trim(const char **s, size_t *n)
{
    const unsigned char *u = (const unsigned char *)*s;
    size_t a = 0, b = *n, k;
    while (a < b && (k = space_at(u + a, b - a)) > 0) a += k;
    while (b > a) {
        size_t at = last_cp(u + a, b - a) + a;
        if (space_at(u + at, b - at) != b - at) break;
        b = at;
    }
    *s += a;
    *n = b - a;
}

static const char *role_name(chat_role r) { return r == CHAT_SYSTEM ? "system" : r == CHAT_USER ? "user" : "assistant"; }

/* One message: header, content, end of turn; a trained turn's content and
 * end of turn are masked in. */
static int turn(const chat_template *t, chat_text *out, const char *role, const char *content, size_t len, int trained)
{
    int llama = t->family == FAMILY_LLAMA3;
    if (llama) trim(&content, &len);
    if (put(out, llama ? "<|start_header_id|>" : "<|im_start|>") || put(out, role) ||
        put(out, llama ? "<|end_header_id|>\n\n" : "\n") || chat_text_put(out, content, len, trained) ||
        chat_text_put(out, chat_template_end_of_turn(t), strlen(chat_template_end_of_turn(t)), trained))
        return -1;
    return llama ? 0 : put(out, "\n");
}

int chat_template_render(const chat_template *t, int always_generation_prompt, const char *bos,
                         const chat_message *m, int n, chat_text *out)
{
    out->len = 0;
    out->n_spans = 0;
    if (chat_text_put(out, "", 0, 0) != 0) return -1;
    int i = 0;
    if (t->family == FAMILY_LLAMA3) {
        if (put(out, bos && bos[0] ? bos : "<|begin_of_text|>")) return -1;
        if (t->llama31_system) { /* the system message's place, dates first */
            const char *sys = "";
            size_t len = 0;
            if (n > 0 && m[0].role == CHAT_SYSTEM) sys = m[0].content, len = m[0].len, i = 1;
            trim(&sys, &len);
            if (put(out, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                         "Today Date: 26 Jul 2024\n\n") ||
                chat_text_put(out, sys, len, 0) || put(out, "<|eot_id|>"))
                return -1;
        }
    } else if (t->default_system && n > 0 && m[0].role != CHAT_SYSTEM) {
        if (turn(t, out, "system", t->default_system, strlen(t->default_system), 0)) return -1;
    }
    for (; i < n; i++)
        if (turn(t, out, role_name(m[i].role), m[i].content, m[i].len, m[i].trained && m[i].role == CHAT_ASSISTANT))
            return -1;
    if (always_generation_prompt && put(out, "<|start_header_id|>assistant<|end_header_id|>\n\n")) return -1;
    return 0;
}
