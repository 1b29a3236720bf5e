/* chat_template.h — the chat templates dtrun knows, written out in C (no
 * Jinja engine): a conversation rendered exactly as Hugging Face's
 * apply_chat_template renders it for training (no generation prompt), with
 * the bytes the loss counts marked (each trained assistant turn's content
 * and its end-of-turn token).
 *
 *   llama3    <|begin_of_text|> then per message
 *             <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>,
 *             CONTENT trimmed (Meta-Llama-3-8B-Instruct)
 *   llama3.1  the same after a system turn that is always there:
 *             "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul
 *             2024\n\n" then the system message, if any (Llama 3.1 Instruct)
 *   chatml    per message <|im_start|>ROLE\nCONTENT<|im_end|>\n (SmolLM)
 *   qwen2, qwen2.5, smollm2
 *             ChatML with a system turn of their own first when the
 *             conversation has none
 *
 * A tokenizer folder's template (tokenizer_config.json's chat_template, or
 * chat_template.jinja) is recognised by its text: a 64-bit FNV-1a hash of it
 * normalised only where Jinja's output cannot change (white space inside
 * {{ }}, {% %} and {# #} outside string literals, one trailing newline).
 * Any other template is refused with one line naming the file, what it
 * looks like and its hash: never a silently different format. */
#ifndef DTRUN_TEXT_CHAT_TEMPLATE_H
#define DTRUN_TEXT_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

typedef struct chat_template chat_template;

/* --chat-template NAME: NULL when unknown. */
const chat_template *chat_template_named(const char *name);
/* NULL-terminated names, for the usage text and did-you-mean. */
const char *const *chat_template_names(void);
/* Its name ("llama3") and what it is ("Llama 3 Instruct"). */
const char *chat_template_name(const chat_template *t);
const char *chat_template_what(const chat_template *t);
/* The special tokens its text holds, NULL-terminated: each must be one
 * added token of the tokenizer, else the text would be split into pieces. */
const char *const *chat_template_tokens(const chat_template *t);
/* Its end-of-turn token ("<|eot_id|>", "<|im_end|>"). */
const char *chat_template_end_of_turn(const chat_template *t);

/* What a tokenizer folder says about chat: the folder of `tokenizer_path`
 * (a tokenizer.json or a folder), its tokenizer_config.json (chat_template,
 * bos_token, eos_token) and chat_template.jinja (which Hugging Face prefers
 * when both are there). Missing files are no error: a bare tokenizer.json
 * has neither. */
typedef struct {
    char source[4200];  /* the file the template came from ("" when none) */
    char config[4200];  /* the tokenizer_config.json looked at */
    char *template;     /* the Jinja text, NULL when none */
    char bos[128], eos[128]; /* bos_token, eos_token ("" when not given) */
} tokenizer_config;

/* 0, or -1 with err ("PATH: not valid JSON ..."; exit 3). */
int tokenizer_config_read(const char *tokenizer_path, tokenizer_config *c, char *err, size_t errlen);
void tokenizer_config_free(tokenizer_config *c);

/* The hash a template text is recognised by. */
uint64_t chat_template_hash(const char *jinja, size_t n);

/* The folder's template: 0 with *t (NULL when the folder has none), or -1
 * with one line in err (exit 2): "FILE: chat_template (...) is not one dtrun
 * knows ...". *always_generation_prompt: 1 for Meta-Llama-3 (base)'s, whose
 * template ends every conversation with the assistant's header, training
 * or not; *whose: the model it is known from ("Qwen2.5-Instruct"). */
int chat_template_recognise(const tokenizer_config *c, const chat_template **t, int *always_generation_prompt,
                            const char **whose, char *err, size_t errlen);

typedef enum { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT } chat_role;

typedef struct {
    chat_role role;
    const char *content; /* UTF-8 */
    size_t len;
    int trained; /* an assistant turn the loss counts */
} chat_message;

/* A rendered conversation: its text, and the [start, end) byte ranges of it
 * that the loss counts (ascending, not overlapping). */
typedef struct {
    char *text;
    size_t len, cap;
    size_t *spans; /* start, end pairs */
    size_t n_spans, cap_spans;
} chat_text;

/* Renders m[0..n) (n >= 1) into out (emptied first). bos: the text of
 * bos_token for llama3 ("" or NULL: <|begin_of_text|>). 0, or -1 out of
 * memory. */
int chat_template_render(const chat_template *t, int always_generation_prompt, const char *bos,
                         const chat_message *m, int n, chat_text *out);
void chat_text_free(chat_text *c);

/* Appends s[0..n) to a chat_text, masked (a span) or not. 0, or -1. */
int chat_text_put(chat_text *c, const char *s, size_t n, int masked);

#endif
