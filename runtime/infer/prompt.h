/* prompt.h — text <-> token ids for `dtrun generate`.
 *
 * dtrun's GPTs read bytes (vocab_size 256: a token is a byte) or GPT-2 BPE
 * tokens (vocab 50257). Bytes are handled here. GPT-2's byte-level BPE is
 * being written in lib/text (issue 16, item 1); it plugs in at ONE place,
 * prompt_bpe_encode / prompt_bpe_decode below, which until then say so and
 * ask for --prompt-ids. */
#ifndef DTRUN_INFER_PROMPT_H
#define DTRUN_INFER_PROMPT_H

#include <stddef.h>
#include <stdio.h>

/* "1,2,3" -> ids (malloc'd), each in [0, vocab). 0, or -1 with one line. */
int prompt_parse_ids(const char *text, int vocab, int **ids, int *n, char *err, size_t errlen);
/* TEXT -> ids for a model of `vocab` tokens. 0, or -1 with one line (no
 * tokenizer for this vocabulary yet). */
int prompt_encode(const char *text, int vocab, int **ids, int *n, char *err, size_t errlen);
/* Writes token `id` as text to out (a byte for vocab 256). */
void prompt_write_token(FILE *out, int id, int vocab);

/* THE hook for GPT-2's BPE (lib/text): text -> ids / id -> its bytes. */
int prompt_bpe_encode(const char *text, int **ids, int *n, char *err, size_t errlen);
int prompt_bpe_decode(int id, char *buf, size_t cap);

#endif
