/* tokenizer.h — text to token ids and back, for `dtrun tokenize` and
 * `dtrun generate`: GPT-2's byte-level BPE built into the binary, or a
 * Hugging Face tokenizer.json of a byte-level BPE (Llama 3, Qwen2, SmolLM,
 * GPT-2's own), encoded exactly as Hugging Face's tokenizers library does:
 *
 *   1. added tokens (added_tokens.h) are cut out of the text first;
 *   2. the normalizer (none, or NFC/NFD/NFKC/NFKD by utf8proc) runs on the
 *      text between them, then added tokens marked "normalized" are cut out;
 *   3. the pre-tokenizer's steps (Sequence of Split with a regex or a string,
 *      ByteLevel with or without its GPT-2 regex, Digits) cut the rest into
 *      pieces, regexes run by PCRE2 (text_regex.h);
 *   4. the BPE model (bpe.h) encodes each piece;
 *   5. the post-processor (TemplateProcessing, RobertaProcessing,
 *      BertProcessing, ByteLevel, Sequence of them) gives the special tokens
 *      around a document: tokenizer_frame.
 *
 * Anything else in a tokenizer.json (a Unigram or WordPiece model, a
 * Metaspace pre-tokenizer, byte_fallback, a Lowercase normalizer, ...) is
 * refused at load with one line naming the file and the field. */
#ifndef DTRUN_TEXT_TOKENIZER_H
#define DTRUN_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "lib/text/bpe.h"

typedef struct tokenizer tokenizer;

/* GPT-2's, built into the binary (encoder.json and vocab.bpe as OpenAI
 * published them; pre-tokenized as encoder.py does; no added tokens are
 * matched in text, as in encoder.py). NULL + err on failure. */
tokenizer *tokenizer_gpt2(char *err, size_t errlen);

/* A tokenizer.json, or the tokenizer.json of a folder (a Hugging Face model
 * folder). NULL with err ("PATH: ...") and *status: DT_EXIT_USAGE (2) for a
 * tokenizer dtrun does not implement (the line names the field), DT_EXIT_DATA
 * (3) for a file that is missing, not JSON, or inconsistent (a merge of
 * tokens not in the vocabulary, ...). */
tokenizer *tokenizer_load(const char *path, int *status, char *err, size_t errlen);
void tokenizer_free(tokenizer *t);

/* "GPT-2 (built in)" or the tokenizer.json's path. */
const char *tokenizer_name(const tokenizer *t);
/* One past the largest id it gives (the vocabulary a model needs). */
long tokenizer_n_ids(const tokenizer *t);

/* The ids the post-processor puts around one sequence (Hugging Face's
 * add_special_tokens; Llama 3.1: <|begin_of_text|> before, nothing after;
 * GPT-2, Llama 3.0, Qwen2: nothing). What a prompt gets. */
void tokenizer_template(const tokenizer *t, const uint32_t **before, int *n_before, const uint32_t **after,
                        int *n_after);
/* The ids around each document of a corpus: the template's; when it adds
 * nothing and the tokenizer has <|endoftext|>, that token before the
 * document, as llm.c's GPT-2 shards have it (50256 for GPT-2). */
void tokenizer_frame(const tokenizer *t, const uint32_t **before, int *n_before, const uint32_t **after,
                     int *n_after);

/* An encoder: one per thread. */
typedef struct tokenizer_encoder tokenizer_encoder;
tokenizer_encoder *tokenizer_encoder_new(const tokenizer *t);
void tokenizer_encoder_free(tokenizer_encoder *e);

/* Appends the ids of text[0..n) (valid UTF-8; no template) to out. 0, or -1
 * with err (out of memory, a regex that failed to match). */
int tokenizer_encode(tokenizer_encoder *e, const char *text, size_t n, token_buf *out, char *err, size_t errlen);

/* Where each id of an encoding comes from: text[start..end) is what it
 * stands for (an added token with lstrip/rstrip: the white space it took
 * too; a piece's tokens share its bytes in order). exact 0: the normalizer
 * changed the line of text the token lies in, and [start, end) is that whole
 * line (lines end at '\n': the places where the normal forms cannot join
 * text), not the token's own bytes. What Hugging Face's offsets give, in
 * bytes; what a loss mask needs to know which ids a span of text became. */
typedef struct {
    size_t start, end;
    int exact;
} token_span;
typedef struct {
    token_span *s;
    size_t n, cap;
} token_spans;
void token_spans_free(token_spans *s);

/* tokenizer_encode, and one span per id appended to out into spans. */
int tokenizer_encode_spans(tokenizer_encoder *e, const char *text, size_t n, token_buf *out, token_spans *spans,
                           char *err, size_t errlen);

/* The id of the token `name` as Hugging Face's token_to_id finds it (an
 * added token's content, else the vocabulary's token spelled so), or -1. */
long tokenizer_token_id(const tokenizer *t, const char *name);

/* The bytes token `id` decodes to (the ByteLevel decoder: a token's bytes, an
 * added token's text), *len of them; NULL for an id with no token. Joined,
 * the tokens of a text give the text back. */
const char *tokenizer_token_bytes(const tokenizer *t, uint32_t id, size_t *len);
/* 0 when the tokenizer can decode; -1 with err naming its decoder when not. */
int tokenizer_can_decode(const tokenizer *t, char *err, size_t errlen);

#endif
