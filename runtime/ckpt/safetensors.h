/* safetensors.h — the Hugging Face safetensors format: a streaming writer and a
 * strict, mmap-based reader.
 *
 * File layout: an 8-byte little-endian header length N, N bytes of JSON
 *   {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * padded with spaces to a multiple of 8, then the data; offsets are relative to
 * the start of the data. The reader never trusts a file: every size, offset and
 * name is checked before anything points into the mapping, and a bad file is one
 * line "PATH: what (why)" in err and an error return.
 *
 * The host is little-endian (checked at compile time), so tensor bytes are
 * written and read as they lie in memory. Tensor data in a mapping may be
 * unaligned (a U8 tensor of odd length can precede an F32 one): read it with
 * memcpy, never through a cast pointer. */
#ifndef DTRUN_SAFETENSORS_H
#define DTRUN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8
/* The Hugging Face implementation's limit; anything larger is a hostile file. */
#define ST_MAX_HEADER (100u * 1000u * 1000u)

typedef enum {
    ST_BOOL = 0, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16,
    ST_I32, ST_U32, ST_F32, ST_F64, ST_I64, ST_U64, ST_DTYPE_COUNT
} st_dtype;

/* "F32" etc. and bytes per element; st_dtype_parse returns -1 for an unknown name. */
const char *st_dtype_name(st_dtype dt);
size_t st_dtype_size(st_dtype dt);
int st_dtype_parse(const char *s);

/* Messages quote names from files, which may hold any byte: this replaces
 * control characters with '?' so an error stays one line. */
void st_one_line(char *msg);
/* write(2) all n bytes, retrying short writes and EINTR: 0, or -1 with errno. */
int st_write_all(int fd, const void *buf, size_t n);
/* Formats one line into err (made printable by st_one_line) and returns -1:
 * the error return every ckpt / safetensors function shares. */
int st_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- writer ---- */

typedef struct st_writer st_writer;

/* Fills buf (nbytes, the whole tensor) at write time; returns 0, or -1 with a
 * message in err. Lets a caller produce one tensor at a time (export). */
typedef int (*st_fill_fn)(void *ctx, void *buf, size_t nbytes, char *err, size_t errlen);

st_writer *st_writer_new(void);
void st_writer_free(st_writer *w);
/* Add a tensor whose bytes are at data (kept by pointer until the write). The
 * name must be unique and not "__metadata__". Returns 0 or -1 (err set). */
int st_writer_add(st_writer *w, const char *name, st_dtype dt, int ndim, const int64_t *shape,
                  const void *data, char *err, size_t errlen);
/* Same, with the bytes produced by fill(ctx, ...) when the file is written. */
int st_writer_add_fill(st_writer *w, const char *name, st_dtype dt, int ndim,
                       const int64_t *shape, st_fill_fn fill, void *ctx, char *err,
                       size_t errlen);
/* String metadata ("__metadata__"); a key given twice keeps the last value. */
int st_writer_set_metadata(st_writer *w, const char *key, const char *value);
/* Tensors are written in the order added. write(fd, buf, n) semantics: the
 * writer calls `write_all` for every chunk; it returns 0 or -1 with errno set.
 * `path` only names the file in messages. */
typedef int (*st_write_all_fn)(int fd, const void *buf, size_t n);
int st_writer_write_fd(st_writer *w, int fd, const char *path, st_write_all_fn write_all,
                       char *err, size_t errlen);
/* Bytes the file will have (header included). */
uint64_t st_writer_file_size(st_writer *w);

/* ---- reader ---- */

typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t numel;
    const void *data; /* inside the mapping; may be unaligned */
    size_t nbytes;
} st_tensor;

typedef struct st_reader st_reader;

/* mmap and validate PATH. Returns 0, or -1 with "PATH: what (why)" in err. */
int st_reader_open(const char *path, st_reader **out, char *err, size_t errlen);
/* Validate a buffer that the caller keeps alive while the reader lives; `name`
 * stands for the file in messages. */
int st_reader_open_mem(const void *buf, size_t len, const char *name, st_reader **out,
                       char *err, size_t errlen);
void st_reader_close(st_reader *r);

int st_reader_count(const st_reader *r);
/* Tensors in data-offset order. */
const st_tensor *st_reader_tensor(const st_reader *r, int i);
const st_tensor *st_reader_find(const st_reader *r, const char *name);
int st_reader_metadata_count(const st_reader *r);
const char *st_reader_metadata_key(const st_reader *r, int i);
const char *st_reader_metadata_value(const st_reader *r, int i);
const char *st_reader_metadata(const st_reader *r, const char *key); /* NULL: absent */
const char *st_reader_path(const st_reader *r);

#endif
