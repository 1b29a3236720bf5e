/* corpus.h — the documents of `dtrun tokenize`'s input files. A file whose
 * name ends in .jsonl holds one document per non-blank line, a JSON object
 * whose field `text` (or another name) is the document; any other file is one
 * document, all of its bytes. Text must be UTF-8: a file that is not is
 * refused with the line and column of its first bad byte. */
#ifndef DTRUN_TEXT_CORPUS_H
#define DTRUN_TEXT_CORPUS_H

#include <stddef.h>

typedef struct {
    const char *path;
    int jsonl;
    char *bytes; /* the whole file, mapped read-only (NULL when empty) */
    size_t len;
} corpus_file;

/* Maps the file. 0, or -1 with err ("PATH: cannot read (why)"). */
int corpus_file_open(corpus_file *f, const char *path, char *err, size_t errlen);
void corpus_file_close(corpus_file *f);

/* How many documents the file holds (a .jsonl file's non-blank lines; 1 for
 * any other), without parsing them. */
long corpus_file_count(const corpus_file *f);

/* Calls fn(text, len, arg) for each document in order; fn's non-zero return
 * stops and is returned. -1 with err for a file that is not UTF-8, a line
 * that is not a JSON object with a string `field`. */
typedef int (*corpus_doc_fn)(const char *text, size_t len, void *arg);
int corpus_file_each(const corpus_file *f, const char *field, corpus_doc_fn fn, void *arg, char *err,
                     size_t errlen);

/* The same for each non-blank line's JSON object of a .jsonl file (1-based
 * line numbers); -1 with err ("PATH:LINE: not valid JSON") for a line that
 * is not a JSON object. */
struct cJSON;
typedef int (*corpus_object_fn)(const struct cJSON *obj, long line, void *arg);
int corpus_file_each_object(const corpus_file *f, corpus_object_fn fn, void *arg, char *err, size_t errlen);

/* The first non-blank line's JSON object of a .jsonl file (cJSON_Delete it),
 * NULL when there is none or it is not a JSON object. */
struct cJSON *corpus_file_first_object(const corpus_file *f);

/* Whether a line holds nothing but ASCII white space (it is skipped). */
int corpus_line_blank(const char *s, size_t n);

#endif
