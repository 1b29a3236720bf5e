/* text.c — byte-level text: any file, token id = byte value, mmapped. */
#include "runtime/data/source.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    token_source base;
    mapped_file file;
    char path[1024];
} text_source;

static void text_read(const token_source *s, long pos, int count, int *out)
{
    const text_source *t = (const text_source *)s;
    for (int i = 0; i < count; i++)
        out[i] = t->file.bytes[pos + i];
}

static const char *text_locate(const token_source *s, long pos, long *at)
{
    *at = pos; /* a byte is a token */
    return ((const text_source *)s)->path;
}

static void text_close(token_source *s)
{
    text_source *t = (text_source *)s;
    mapped_file_close(&t->file);
    free(t);
}

token_source *text_open(const char *path, int vocab, char *err, size_t errlen)
{
    mapped_file file;
    if (mapped_file_open(&file, path, err, errlen) != 0)
        return NULL;
    if (file.len == 0)
        return data_fail(err, errlen, "%s: empty file (no bytes to train on)", path);
    /* Only a vocabulary smaller than a byte can be exceeded. */
    for (size_t i = 0; vocab < 256 && i < file.len; i++) {
        if (file.bytes[i] >= vocab) {
            int byte = file.bytes[i];
            mapped_file_close(&file);
            return data_fail(err, errlen,
                             "%s: byte out of the model's vocabulary (byte %d at offset %zu >= "
                             "vocab_size %d; byte-level text needs vocab_size 256)",
                             path, byte, i, vocab);
        }
    }
    text_source *t = calloc(1, sizeof *t);
    if (!t) {
        mapped_file_close(&file);
        return data_fail(err, errlen, "%s: out of memory", path);
    }
    t->base.n = (long)file.len;
    t->base.read = text_read;
    t->base.locate = text_locate;
    snprintf(t->path, sizeof t->path, "%s", path);
    t->base.close = text_close;
    t->file = file;
    return &t->base;
}
