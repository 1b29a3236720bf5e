/* ckpt_io.h — durable file writes for checkpoints, and the hooks tests use to
 * make them fail.
 *
 * Durability recipe (what survives a crash or power loss): write NAME.tmp, fsync
 * it, close it (NFS reports write errors at close), rename to NAME, fsync the
 * directory so the rename itself is on disk. On any failure the .tmp is removed
 * and NAME is untouched. */
#ifndef DTRUN_CKPT_IO_H
#define DTRUN_CKPT_IO_H

#include <stddef.h>
#include <stdint.h>

/* Test hooks: replace the write and fsync system calls (NULL members keep the
 * real ones) to simulate ENOSPC, EIO, or a process killed mid-write. write_all
 * returns 0 or -1 with errno set; fsync likewise. */
typedef struct {
    int (*write_all)(int fd, const void *buf, size_t n);
    int (*fsync)(int fd);
} ckpt_io_hooks;
void ckpt_io_set_hooks(const ckpt_io_hooks *hooks); /* NULL: the real calls */

/* Writes every byte (through the hook); 0 or -1 with errno. */
int ckpt_io_write_all(int fd, const void *buf, size_t n);

/* Produces a file's content into fd; 0, or -1 with err set. */
typedef int (*ckpt_io_produce_fn)(int fd, void *ctx, char *err, size_t errlen);
/* PATH.tmp -> produce -> fsync -> rename to PATH -> fsync the directory. */
int ckpt_io_write_atomic(const char *path, ckpt_io_produce_fn produce, void *ctx, char *err,
                         size_t errlen);
/* A safetensors file (safetensors.h's writer) written the same way. */
struct st_writer;
int ckpt_io_write_st_atomic(const char *path, struct st_writer *w, char *err, size_t errlen);
int ckpt_io_write_bytes_atomic(const char *path, const void *buf, size_t n, char *err,
                               size_t errlen);
int ckpt_io_fsync_dir(const char *dir, char *err, size_t errlen);

/* Size and XXH3-64 of a file, read in chunks. */
int ckpt_io_hash_file(const char *path, uint64_t *size, uint64_t *hash, char *err, size_t errlen);
/* A whole small file, NUL-terminated (*len excludes the NUL); larger than max
 * bytes is an error. Returns 0, 1 when the file does not exist, -1 on error. */
int ckpt_io_read_small(const char *path, size_t max, char **buf, size_t *len, char *err,
                       size_t errlen);
/* Removes a step directory's plain files, then the directory. Best effort:
 * returns -1 when something stayed. */
int ckpt_io_remove_dir(const char *path);

#endif
