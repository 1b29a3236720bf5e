/* prompt.c — prompts to ids and ids to text (prompt.h). */
#include "runtime/infer/prompt.h"

#include <stdlib.h>
#include <string.h>

#include "lib/text/bpe.h"
#include "lib/text/utf8_text.h"

#define GPT2_VOCAB 50257

int prompt_parse_ids(const char *text, int vocab, int **ids, int *n, char *err, size_t errlen)
{
    size_t cap = strlen(text) / 2 + 2;
    int *out = malloc(cap * sizeof(int)), k = 0;
    if (!out) return snprintf(err, errlen, "out of memory"), -1;
    const char *p = text;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= vocab || (*end && *end != ',')) {
            snprintf(err, errlen, "--prompt-ids '%.60s': want comma-separated token ids in [0, %d)", text, vocab);
            free(out);
            return -1;
        }
        out[k++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        snprintf(err, errlen, "--prompt-ids: no ids given");
        free(out);
        return -1;
    }
    *ids = out;
    *n = k;
    return 0;
}

int prompt_encode(const char *text, int vocab, int **ids, int *n, char *err, size_t errlen)
{
    if (vocab == 256) { /* byte-level: every byte is its token */
        size_t len = strlen(text);
        if (len == 0) return snprintf(err, errlen, "--prompt: empty (give at least one byte)"), -1;
        int *out = malloc(len * sizeof(int));
        if (!out) return snprintf(err, errlen, "out of memory"), -1;
        for (size_t i = 0; i < len; i++) out[i] = (unsigned char)text[i];
        *ids = out;
        *n = (int)len;
        return 0;
    }
    if (vocab >= GPT2_VOCAB) return prompt_bpe_encode(text, ids, n, err, errlen);
    snprintf(err, errlen, "--prompt: no tokenizer for a vocabulary of %d (text works for 256, bytes); give --prompt-ids",
             vocab);
    return -1;
}

void prompt_write_token(FILE *out, int id, int vocab)
{
    char buf[64];
    if (vocab == 256) fputc(id, out);
    else if (vocab >= GPT2_VOCAB && prompt_bpe_decode(id, buf, sizeof buf) >= 0) fputs(buf, out);
    else fprintf(out, "<%d>", id);
}

/* ---- GPT-2's BPE (lib/text), loaded on first use ---- */

static bpe_vocab *gpt2_vocab(void)
{
    static bpe_vocab *v;
    char err[256];
    if (!v) v = bpe_vocab_gpt2(err, sizeof err);
    return v;
}

int prompt_bpe_encode(const char *text, int **ids, int *n, char *err, size_t errlen)
{
    size_t len = strlen(text), bad_at = utf8_text_check(text, len);
    bpe_vocab *v = gpt2_vocab();
    if (!v) return snprintf(err, errlen, "--prompt: GPT-2's vocabulary could not be loaded"), -1;
    if (len == 0) return snprintf(err, errlen, "--prompt: empty (give at least one character)"), -1;
    if (bad_at < len)
        return snprintf(err, errlen, "--prompt: not valid UTF-8 at byte %zu", bad_at), -1;
    bpe_encoder *e = bpe_encoder_new(v);
    token_buf b = {0};
    int rc = e && bpe_encode(e, text, len, &b) == 0 && b.n > 0 ? 0 : -1;
    if (rc == 0 && (*ids = malloc(b.n * sizeof(int)))) {
        for (size_t i = 0; i < b.n; i++) (*ids)[i] = (int)b.ids[i];
        *n = (int)b.n;
    } else {
        rc = -1;
        snprintf(err, errlen, "--prompt: out of memory encoding it");
    }
    token_buf_free(&b);
    bpe_encoder_free(e);
    return rc;
}

int prompt_bpe_decode(int id, char *buf, size_t cap)
{
    bpe_vocab *v = gpt2_vocab();
    size_t len;
    const char *bytes = v && id >= 0 && id < bpe_vocab_size(v) ? bpe_token_bytes(v, id, &len) : NULL;
    if (!bytes || len + 1 > cap) return -1;
    memcpy(buf, bytes, len);
    buf[len] = 0;
    return (int)len;
}
