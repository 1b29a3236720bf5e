/* gpt2_data.c — see gpt2_data.h. The files are assembled in with .incbin, so
 * the binary carries its vocabulary wherever it is installed. The paths are
 * relative to the repository root, where make compiles; the Makefile makes
 * this object depend on the two files. */
#include "lib/text/gpt2_data.h"

__asm__(".section .rodata\n"
        ".globl dtrun_gpt2_encoder_json_start, dtrun_gpt2_encoder_json_end\n"
        ".globl dtrun_gpt2_vocab_bpe_start, dtrun_gpt2_vocab_bpe_end\n"
        ".hidden dtrun_gpt2_encoder_json_start, dtrun_gpt2_encoder_json_end\n"
        ".hidden dtrun_gpt2_vocab_bpe_start, dtrun_gpt2_vocab_bpe_end\n"
        ".balign 16\n"
        "dtrun_gpt2_encoder_json_start:\n"
        ".incbin \"lib/text/gpt2/encoder.json\"\n"
        "dtrun_gpt2_encoder_json_end:\n"
        ".balign 16\n"
        "dtrun_gpt2_vocab_bpe_start:\n"
        ".incbin \"lib/text/gpt2/vocab.bpe\"\n"
        "dtrun_gpt2_vocab_bpe_end:\n"
        ".previous\n");

extern const char dtrun_gpt2_encoder_json_start[], dtrun_gpt2_encoder_json_end[];
extern const char dtrun_gpt2_vocab_bpe_start[], dtrun_gpt2_vocab_bpe_end[];

const char *gpt2_encoder_json(size_t *len)
{
    *len = (size_t)(dtrun_gpt2_encoder_json_end - dtrun_gpt2_encoder_json_start);
    return dtrun_gpt2_encoder_json_start;
}

const char *gpt2_vocab_bpe(size_t *len)
{
    *len = (size_t)(dtrun_gpt2_vocab_bpe_end - dtrun_gpt2_vocab_bpe_start);
    return dtrun_gpt2_vocab_bpe_start;
}
