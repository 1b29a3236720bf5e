/* corpus.c — see corpus.h. */
#include "lib/text/corpus.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/text/utf8_text.h"
#include "lib/util/errline.h"

int corpus_file_open(corpus_file *f, const char *path, char *err, size_t errlen)
{
    *f = (corpus_file){.path = path};
    size_t n = strlen(path);
    f->jsonl = n >= 6 && !strcmp(path + n - 6, ".jsonl");
    int fd = open(path, O_RDONLY);
    if (fd < 0) return errline(err, errlen, "%s: cannot read (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return errline(err, errlen, "%s: cannot read (%s)", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return errline(err, errlen, "%s: cannot read (%s)", path,
                       S_ISDIR(st.st_mode) ? "a directory, not a text file" : "not a regular file");
    }
    f->len = (size_t)st.st_size;
    if (f->len) {
        void *p = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return errline(err, errlen, "%s: cannot read (%s)", path, strerror(e));
        }
        f->bytes = p;
        madvise(p, f->len, MADV_SEQUENTIAL);
    }
    close(fd);
    return 0;
}

void corpus_file_close(corpus_file *f)
{
    if (f->bytes) munmap(f->bytes, f->len);
    f->bytes = NULL;
}

int corpus_line_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n\v\f", s[i]) || !s[i]) return 0;
    return 1;
}

long corpus_file_count(const corpus_file *f)
{
    if (!f->jsonl) return 1;
    long docs = 0;
    for (size_t at = 0; at < f->len;) {
        const char *line = f->bytes + at, *nl = memchr(line, '\n', f->len - at);
        size_t n = nl ? (size_t)(nl - line) : f->len - at;
        docs += !corpus_line_blank(line, n);
        at += n + 1;
    }
    return docs;
}

/* "PATH:LINE:COL: not UTF-8 ..." for the bad byte at offset `at`. */
static int not_utf8(const corpus_file *f, size_t at, char *err, size_t errlen)
{
    long line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < at; i++)
        if (f->bytes[i] == '\n') line++, line_start = i + 1;
    return errline(err, errlen,
                   "%s:%ld:%zu: not UTF-8 (byte 0x%02x at offset %zu); dtrun tokenize reads UTF-8 text only "
                   "(convert it first, e.g. iconv -f latin1 -t utf-8)",
                   f->path, line, at - line_start + 1, (unsigned char)f->bytes[at], at);
}

int corpus_file_each_object(const corpus_file *f, corpus_object_fn fn, void *arg, char *err, size_t errlen)
{
    size_t bad = utf8_text_check(f->bytes, f->len);
    if (bad != f->len) return not_utf8(f, bad, err, errlen);
    long line_no = 0;
    for (size_t at = 0; at < f->len;) {
        const char *line = f->bytes + at, *nl = memchr(line, '\n', f->len - at);
        size_t n = nl ? (size_t)(nl - line) : f->len - at;
        at += n + 1;
        line_no++;
        if (corpus_line_blank(line, n)) continue;
        /* \u escapes decode to UTF-8 (cJSON refuses lone surrogates) */
        cJSON *j = cJSON_ParseWithLength(line, n);
        if (!cJSON_IsObject(j)) {
            cJSON_Delete(j);
            return errline(err, errlen, "%s:%ld: %s", f->path, line_no, !j ? "not valid JSON" : "not a JSON object");
        }
        int rc = fn(j, line_no, arg);
        cJSON_Delete(j);
        if (rc) return rc;
    }
    return 0;
}

cJSON *corpus_file_first_object(const corpus_file *f)
{
    for (size_t at = 0; f->jsonl && at < f->len;) {
        const char *line = f->bytes + at, *nl = memchr(line, '\n', f->len - at);
        size_t n = nl ? (size_t)(nl - line) : f->len - at;
        at += n + 1;
        if (corpus_line_blank(line, n)) continue;
        cJSON *j = cJSON_ParseWithLength(line, n);
        if (cJSON_IsObject(j)) return j;
        cJSON_Delete(j);
        return NULL;
    }
    return NULL;
}

typedef struct {
    const corpus_file *f;
    const char *field;
    corpus_doc_fn fn;
    void *arg;
    char *err;
    size_t errlen;
} text_ctx;

static int text_of(const cJSON *j, long line, void *arg)
{
    text_ctx *c = arg;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, c->field);
    if (!cJSON_IsString(t))
        return errline(c->err, c->errlen, "%s:%ld: %s ('%s'; --field names another)", c->f->path, line,
                       t ? "the document field is not a string" : "no document field", c->field);
    return c->fn(t->valuestring, strlen(t->valuestring), c->arg);
}

int corpus_file_each(const corpus_file *f, const char *field, corpus_doc_fn fn, void *arg, char *err,
                     size_t errlen)
{
    if (!f->jsonl) {
        size_t bad = utf8_text_check(f->bytes, f->len);
        if (bad != f->len) return not_utf8(f, bad, err, errlen);
        return fn(f->bytes ? f->bytes : "", f->len, arg);
    }
    text_ctx c = {f, field, fn, arg, err, errlen};
    return corpus_file_each_object(f, text_of, &c, err, errlen);
}
