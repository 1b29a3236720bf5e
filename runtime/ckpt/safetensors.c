/* safetensors.c — the dtype table the reader and the writer share. Names and
 * sizes are the Hugging Face format's ("F32", "BF16", ...). */
#include <stdarg.h>
#include <unistd.h>
#include <errno.h>
#include <stdio.h>
#include "runtime/ckpt/safetensors.h"

#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this code writes and reads memory as is"
#endif

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},     [ST_I8] = {"I8", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1},
    [ST_I16] = {"I16", 2},         [ST_U16] = {"U16", 2},   [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},       [ST_I32] = {"I32", 4},   [ST_U32] = {"U32", 4},
    [ST_F32] = {"F32", 4},         [ST_F64] = {"F64", 8},   [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},
};

const char *st_dtype_name(st_dtype dt)
{
    return (unsigned)dt < ST_DTYPE_COUNT ? dtypes[dt].name : "?";
}

size_t st_dtype_size(st_dtype dt)
{
    return (unsigned)dt < ST_DTYPE_COUNT ? dtypes[dt].size : 0;
}

int st_dtype_parse(const char *s)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (strcmp(s, dtypes[i].name) == 0) return i;
    return -1;
}

void st_one_line(char *msg)
{
    for (unsigned char *p = (unsigned char *)msg; p && *p; p++)
        if (*p < 0x20 || *p == 0x7f) *p = '?';
}

int st_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (k == 0) {
            errno = EIO;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int st_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        st_one_line(err);
    }
    return -1;
}
