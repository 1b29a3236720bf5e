/* added_tokens.h — a tokenizer.json's added tokens (<|begin_of_text|>,
 * <|endoftext|>, ...), found in text the way Hugging Face's tokenizers finds
 * them before any pre-tokenization: leftmost-longest (at the first position
 * where some token starts, the longest one that does), not overlapping; a
 * token with lstrip/rstrip also takes the White_Space before/after it. The
 * text between the tokens goes on to the pre-tokenizer. */
#ifndef DTRUN_TEXT_ADDED_TOKENS_H
#define DTRUN_TEXT_ADDED_TOKENS_H

#include <stddef.h>
#include <stdint.h>

typedef struct added_tokens added_tokens;

added_tokens *added_tokens_new(void);
void added_tokens_free(added_tokens *a);
/* Adds a token to match (content: UTF-8, not empty). 0, or -1 out of memory. */
int added_tokens_add(added_tokens *a, const char *content, size_t len, uint32_t id, int lstrip, int rstrip);
int added_tokens_count(const added_tokens *a);

/* Cuts s[0..n) into pieces, in order: fn(start, end, id, arg) with id the
 * matched token's, or -1 for the text between tokens (never empty). fn's
 * non-zero return stops and is returned. */
typedef int (*added_piece_fn)(size_t start, size_t end, long id, void *arg);
int added_tokens_split(const added_tokens *a, const char *s, size_t n, added_piece_fn fn, void *arg);

#endif
