/* bpe.h — byte-level BPE (GPT-2's, and the BPE model of a Hugging Face
 * tokenizer.json): a vocabulary (token -> id) and its ranked merges, and an
 * encoder that turns a piece of UTF-8 text into ids exactly as OpenAI's
 * encoder.py and Hugging Face's BPE do: map the piece's bytes to their
 * one-byte tokens, then merge the adjacent pair of lowest rank, every
 * occurrence of it left to right, until no pair has a rank. With
 * ignore_merges (Llama 3), a piece that is itself a token is that token.
 *
 * Token strings are held as raw bytes here: the files spell each byte as a
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

/* A vocabulary from a tokenizer.json's model: vocab (an object of spelled
 * token -> id, ids 0..n-1) and merges (an array of "first second" strings or
 * of [first, second] arrays, best rank first). `where` names the model in
 * error lines ("PATH: model"). */
struct cJSON;
bpe_vocab *bpe_vocab_from_json(const struct cJSON *vocab, const struct cJSON *merges, int ignore_merges,
                               const char *where, char *err, size_t errlen);
void bpe_vocab_free(bpe_vocab *v);

int bpe_vocab_size(const bpe_vocab *v);
int bpe_vocab_merges(const bpe_vocab *v);
/* The id of "<|endoftext|>", or -1 when the vocabulary has none. */
int bpe_vocab_eot(const bpe_vocab *v);
/* The raw bytes of token id (0 <= id < size), *len of them. */
const char *bpe_token_bytes(const bpe_vocab *v, int id, size_t *len);
/* The id of the token whose raw bytes are s[0..n), or -1. */
int bpe_token_id(const bpe_vocab *v, const char *s, size_t n);

/* Byte-level spelling (GPT-2's bytes_to_unicode) -> raw bytes, into out (at
 * least n bytes): the byte count, or -1 when a character spells no byte. */
long bpe_unspell(const char *s, size_t n, char *out);

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

/* Appends the ids of one pre-tokenized piece p[0..n) to out. 0, or -1 when
 * out of memory. */
int bpe_encode_piece(bpe_encoder *e, const char *p, size_t n, token_buf *out);

#endif
