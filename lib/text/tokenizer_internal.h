/* tokenizer_internal.h — what tokenizer_json.c (loading) builds and
 * tokenizer.c (encoding, decoding) runs; nobody else sees it. */
#ifndef DTRUN_TEXT_TOKENIZER_INTERNAL_H
#define DTRUN_TEXT_TOKENIZER_INTERNAL_H

#include "lib/text/added_tokens.h"
#include "lib/text/bpe.h"
#include "lib/text/text_regex.h"
#include "lib/text/tokenizer.h"

enum { TOK_MAX_STEPS = 16, TOK_MAX_FRAME = 8, TOK_MAX_NORMALIZERS = 8 };

typedef enum {
    STEP_SPLIT,      /* Split (and Digits): a pattern and what to do with its matches */
    STEP_BYTE_LEVEL, /* ByteLevel: add_prefix_space, and GPT-2's regex when use_regex */
    STEP_GPT2,       /* the built-in GPT-2's pre-tokenizer (pretokenize.h) */
} step_kind;

/* Hugging Face's SplitDelimiterBehavior. */
typedef enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_WITH_PREVIOUS, SPLIT_MERGED_WITH_NEXT, SPLIT_CONTIGUOUS } split_behavior;

typedef struct {
    step_kind kind;
    text_regex *re; /* STEP_SPLIT, and STEP_BYTE_LEVEL with use_regex */
    split_behavior behavior;
    int invert;
    int add_prefix_space;
} pretok_step;

/* utf8proc's normal forms, applied in order. */
typedef enum { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD } norm_form;

/* An added token: its content as the file writes it, and the bytes
 * decoding gives back for it. */
typedef struct {
    char *bytes;
    size_t len;
    char *content;
} added_text;

struct tokenizer {
    char name[4096];
    bpe_vocab *bpe;
    added_tokens *raw;         /* added tokens matched in the text as it is */
    added_tokens *normalized;  /* ... and those matched after the normalizer */
    norm_form norm[TOK_MAX_NORMALIZERS];
    int n_norm;
    pretok_step steps[TOK_MAX_STEPS];
    int n_steps;
    uint32_t before[TOK_MAX_FRAME], after[TOK_MAX_FRAME]; /* the post-processor's, around one sequence */
    int n_before, n_after;
    uint32_t eot[1]; /* <|endoftext|>, when there is one (n_eot 1) */
    int n_eot;
    long n_ids;
    added_text *added; /* by id, added_cap of them (content NULL: not an added token) */
    long added_cap;
    int byte_level_decoder; /* the decoder is ByteLevel (else decoding is refused) */
    char decoder_what[128]; /* the decoder dtrun cannot run, for the refusal */
};

/* s[0..n) through the normalizers, into *out (malloc'd, *out_len bytes; a
 * copy when there are none). 0, or -1 (out of memory, not UTF-8). */
int tokenizer_normalize(const tokenizer *t, const char *s, size_t n, char **out, size_t *out_len);

#endif
