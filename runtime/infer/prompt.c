/* prompt.c — prompts to ids and ids to text (prompt.h). */
#include "runtime/infer/prompt.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/text/tokenizer.h"
#include "lib/text/utf8_text.h"
#include "lib/util/exit_codes.h"

#define GPT2_VOCAB 50257

/* The folder's tokenizer.json (prompt_use_tokenizer), else GPT-2's once a
 * GPT-2-sized vocabulary asks for it. One process, one model: kept. */
static tokenizer *folder_tok, *gpt2_tok;

int prompt_use_tokenizer(const char *dir, int vocab, char *err, size_t errlen)
{
    char path[4200];
    struct stat st;
    if (!dir || !dir[0]) return 0;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (stat(path, &st) != 0) return 0; /* none: the vocabulary decides, as before */
    int status;
    tokenizer *t = tokenizer_load(path, &status, err, errlen);
    if (!t) return status;
    if (tokenizer_n_ids(t) > vocab) {
        snprintf(err, errlen, "%s: its ids go up to %ld, past the model's vocab_size %d", path, tokenizer_n_ids(t) - 1,
                 vocab);
        tokenizer_free(t);
        return DT_EXIT_USAGE;
    }
    if (tokenizer_can_decode(t, err, errlen) != 0) {
        tokenizer_free(t);
        return DT_EXIT_USAGE;
    }
    tokenizer_free(folder_tok);
    folder_tok = t;
    return 0;
}

static const tokenizer *tokenizer_for(int vocab)
{
    if (folder_tok) return folder_tok;
    if (vocab < GPT2_VOCAB) return NULL;
    if (!gpt2_tok) {
        char err[256];
        gpt2_tok = tokenizer_gpt2(err, sizeof err);
    }
    return gpt2_tok;
}

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

/* The tokenizer's ids of text, after the post-processor's leading tokens. */
static int encode_with(const tokenizer *t, const char *text, int **ids, int *n, char *err, size_t errlen)
{
    size_t len = strlen(text), bad_at = utf8_text_check(text, len);
    if (len == 0) return snprintf(err, errlen, "--prompt: empty (give at least one character)"), -1;
    if (bad_at < len) return snprintf(err, errlen, "--prompt: not valid UTF-8 at byte %zu", bad_at), -1;
    const uint32_t *before, *after;
    int n_before, n_after;
    tokenizer_template(t, &before, &n_before, &after, &n_after);
    tokenizer_encoder *e = tokenizer_encoder_new(t);
    token_buf b = {0};
    int rc = e ? 0 : -1;
    for (int i = 0; i < n_before && rc == 0; i++) rc = token_buf_push(&b, before[i]);
    char why[512] = "out of memory";
    if (rc == 0) rc = tokenizer_encode(e, text, len, &b, why, sizeof why);
    if (rc == 0 && (*ids = malloc(b.n * sizeof(int)))) {
        for (size_t i = 0; i < b.n; i++) (*ids)[i] = (int)b.ids[i];
        *n = (int)b.n;
    } else {
        rc = -1;
        snprintf(err, errlen, "--prompt: %s", why);
    }
    token_buf_free(&b);
    tokenizer_encoder_free(e);
    return rc;
}

int prompt_encode(const char *text, int vocab, int **ids, int *n, char *err, size_t errlen)
{
    const tokenizer *t = tokenizer_for(vocab);
    if (t) return encode_with(t, text, ids, n, err, errlen);
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
    snprintf(err, errlen,
             "--prompt: no tokenizer for a vocabulary of %d (text works for 256, bytes; GPT-2's BPE from 50257; a "
             "Hugging Face folder's tokenizer.json); give --prompt-ids", vocab);
    return -1;
}

void prompt_write_token(FILE *out, int id, int vocab)
{
    const tokenizer *t = tokenizer_for(vocab);
    size_t len;
    const char *bytes = t && id >= 0 ? tokenizer_token_bytes(t, (uint32_t)id, &len) : NULL;
    if (bytes) fwrite(bytes, 1, len, out);
    else if (!t && vocab == 256) fputc(id, out);
    else fprintf(out, "<%d>", id);
}
