/* prompt.h — text <-> token ids for `dtrun generate`.
 *
 * A model whose Hugging Face folder holds a tokenizer.json reads and writes
 * text with it (lib/text/tokenizer.h: Llama 3, Qwen2, SmolLM, GPT-2; the
 * prompt gets what the tokenizer's post-processor puts before a sequence,
 * Llama 3.1's <|begin_of_text|>, as Hugging Face's tokenizer(prompt) does).
 * Otherwise the vocabulary says: 256 is bytes (a token is a byte), 50257 and
 * up GPT-2's BPE, built into the binary; any other takes --prompt-ids. */
#ifndef DTRUN_INFER_PROMPT_H
#define DTRUN_INFER_PROMPT_H

#include <stddef.h>
#include <stdio.h>

/* Uses DIR/tokenizer.json from now on when DIR (an HF folder; NULL or "": a
 * checkpoint) holds one. 0 when it loaded or there is none; else a DT_EXIT_*
 * status with one line in err: the tokenizer.json is malformed (3) or of a
 * kind dtrun does not implement (2), or it gives ids the model's `vocab`
 * does not have (2). */
int prompt_use_tokenizer(const char *dir, int vocab, char *err, size_t errlen);

/* "1,2,3" -> ids (malloc'd), each in [0, vocab). 0, or -1 with one line. */
int prompt_parse_ids(const char *text, int vocab, int **ids, int *n, char *err, size_t errlen);
/* TEXT -> ids for a model of `vocab` tokens. 0, or -1 with one line (no
 * tokenizer for this vocabulary, not UTF-8). */
int prompt_encode(const char *text, int vocab, int **ids, int *n, char *err, size_t errlen);
/* Writes token `id` as text to out (a byte for vocab 256; "<ID>" for an id
 * the tokenizer has no text for). */
void prompt_write_token(FILE *out, int id, int vocab);

#endif
