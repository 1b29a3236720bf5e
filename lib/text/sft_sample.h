/* sft_sample.h — one JSONL line of instruction data to one training sample:
 * its token ids and its loss mask (sft_shard.h). A line is
 *
 *   {"prompt": "...", "completion": "..."}          prompt/completion
 *   {"prompt": [messages], "completion": [messages]} the same as a chat
 *   {"messages": [{"role": R, "content": "..."}]}   a chat, R system, user
 *                                                   or assistant
 *   {"conversations": [{"from": F, "value": "..."}]} ShareGPT's: F system,
 *                                                   human or gpt
 *
 * With a chat template (chat_template.h) a prompt is the user's turn and
 * its completion the assistant's; the loss counts every assistant turn of
 * "messages" and "conversations", and the completion's turns only of a
 * prompt/completion chat: their content and end-of-turn token. Without one,
 * a prompt/completion is the post-processor's tokens before, prompt +
 * completion as one text, then the end of sequence (the post-processor's
 * tokens after, else eos_token, else <|endoftext|>); the loss counts the
 * completion and that end.
 *
 * The whole text is encoded at once, as Hugging Face encodes a rendered
 * conversation, and a token is in the loss when any byte of the text it
 * stands for is (what transformers' assistant mask does with offsets): a
 * token that joins template text and a reply's first characters counts.
 * A sample's first token never counts (nothing predicts it). */
#ifndef DTRUN_TEXT_SFT_SAMPLE_H
#define DTRUN_TEXT_SFT_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "lib/text/chat_template.h"
#include "lib/text/tokenizer.h"

struct cJSON;

/* What a line must hold: SFT_ANY of the shapes above, or one of them. */
typedef enum { SFT_ANY, SFT_PROMPT_COMPLETION, SFT_MESSAGES } sft_shape;

typedef struct {
    const tokenizer *tok;
    sft_shape shape;
    const chat_template *tmpl; /* NULL: prompt + completion as text; chats are refused */
    int always_generation_prompt;
    char bos[128]; /* the template's bos_token ("": the template's own) */
    /* without a template: the ids around prompt + completion */
    uint32_t before[8], after[8];
    int n_before, n_after;
    const char *no_template_why; /* for the refusal of a chat without a template */
} sft_recipe;

/* The recipe's template checked against the tokenizer (each of its special
 * tokens one added token), or without one the ids around a sample (an end
 * of sequence must exist). eos: tokenizer_config.json's eos_token ("" when
 * none). 0, or -1 with err (exit 2). */
int sft_recipe_check(sft_recipe *r, const char *eos, char *err, size_t errlen);

typedef struct {
    unsigned char *b;
    size_t n, cap;
} mask_buf;
void mask_buf_free(mask_buf *m);

typedef struct sft_encoder sft_encoder;
sft_encoder *sft_encoder_new(const sft_recipe *r);
void sft_encoder_free(sft_encoder *e);

/* Appends the sample of one line's JSON object (line `line` of `path`) to
 * ids and mask (as many bytes as ids). 0, or the exit status with one line
 * in err: DT_EXIT_DATA (3) "PATH:LINE: what" for a line without the fields,
 * an unknown role, content that is not a string, ...; DT_EXIT_USAGE (2) for a
 * chat when there is no template. */
int sft_encode(sft_encoder *e, const struct cJSON *obj, const char *path, long line, token_buf *ids, mask_buf *mask,
               char *err, size_t errlen);

/* What a file's first object looks like: "prompt/completion", "messages",
 * "conversations", or NULL (none of them: a text file's). */
const char *sft_shape_of(const struct cJSON *obj);

#endif
