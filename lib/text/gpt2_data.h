/* gpt2_data.h — GPT-2's encoder.json and vocab.bpe, built into the binary
 * from lib/text/gpt2/ (where they came from: lib/text/gpt2/SOURCE.md). */
#ifndef DTRUN_TEXT_GPT2_DATA_H
#define DTRUN_TEXT_GPT2_DATA_H

#include <stddef.h>

const char *gpt2_encoder_json(size_t *len);
const char *gpt2_vocab_bpe(size_t *len);

#endif
