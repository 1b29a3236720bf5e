/* bpe.h — GPT-2's byte-level BPE: a vocabulary (encoder.json: token -> id) and
 * its ranked merges (vocab.bpe), and an encoder that turns UTF-8 text into ids
 * exactly as OpenAI's encoder.py does: pre-tokenize (pretokenize.h), map each
 * piece's bytes to their one-byte tokens, then merge the adjacent pair of
 * lowest rank, every occurrence of it left to right, until no pair has a rank.
 *
 * Token strings are held as raw bytes here: encoder.json spells each byte as a
 * printable character (GPT-2's bytes_to_unicode table) and the loader undoes
 * that spelling once. */
#ifndef DTRUN_TEXT_BPE_H
#define DTRUN_TEXT_BPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct bpe_vocab bpe_vocab;

/* GPT-2's vocabulary and merges as shipped in lib/text/gpt2/ (built into the
 * binary: nothing is read or downloaded at run time). NULL + err on failure. */
bpe_vocab *bpe_vocab_gpt2(char *err, size_t errlen);

/* A vocabulary from an encoder.json and a vocab.bpe held in memory. */
bpe_vocab *bpe_vocab_parse(const char *encoder_json, size_t json_len, const char *merges, size_t merges_len,
                           char *err, size_t errlen);
void bpe_vocab_free(bpe_vocab *v);

int bpe_vocab_size(const bpe_vocab *v);
int bpe_vocab_merges(const bpe_vocab *v);
/* The id of "<|endoftext|>", or -1 when the vocabulary has none. */
int bpe_vocab_eot(const bpe_vocab *v);
/* The raw bytes of token id (0 <= id < size), *len of them. */
const char *bpe_token_bytes(const bpe_vocab *v, int id, size_t *len);

/* Growing list of token ids. */
typedef struct {
    uint32_t *ids;
    size_t n, cap;
} token_buf;

int token_buf_push(token_buf *b, uint32_t id); /* 0, or -1 when out of memory */
void token_buf_free(token_buf *b);

/* An encoder: one per thread. It keeps a cache of the pieces it has seen
 * (most words come back often), bounded in memory. */
typedef struct bpe_encoder bpe_encoder;

bpe_encoder *bpe_encoder_new(const bpe_vocab *v);
void bpe_encoder_free(bpe_encoder *e);

/* Appends the ids of text[0..n) to out; the text must be valid UTF-8
 * (utf8_text_check). 0, or -1 when out of memory. */
int bpe_encode(bpe_encoder *e, const char *text, size_t n, token_buf *out);

#endif
