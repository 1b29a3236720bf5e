/* pretokenize.h — GPT-2's pre-tokenizer: the text is cut into pieces by the
 * regex of OpenAI's encoder.py,
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * written out by hand (the alternatives in order, with the one backtrack the
 * regex does: a run of spaces before a non-space leaves its last space to the
 * next piece, so " world" keeps its space). BPE then runs on each piece alone. */
#ifndef DTRUN_TEXT_PRETOKENIZE_H
#define DTRUN_TEXT_PRETOKENIZE_H

#include <stddef.h>

/* The end of the piece that starts at s[i], i < n; s[0..n) must be valid
 * UTF-8 (utf8_text_check). Always > i. */
size_t gpt2_piece_end(const char *s, size_t n, size_t i);

#endif
