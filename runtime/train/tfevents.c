/* tfevents.c — see tfevents.h. */
#include "runtime/train/tfevents.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "lib/util/crc32c.h"
#include "lib/util/errline.h"

struct tfevents {
    FILE *f;
    int failed;
    char path[4096];
};

static double wall_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

/* ---- protobuf, the four wire shapes an Event needs ---- */

typedef struct {
    unsigned char b[512];
    size_t n;
} pbuf;

static void put_varint(pbuf *p, uint64_t v)
{
    while (v >= 0x80 && p->n < sizeof p->b) {
        p->b[p->n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    if (p->n < sizeof p->b) p->b[p->n++] = (unsigned char)v;
}

static void put_key(pbuf *p, int field, int wire_type) { put_varint(p, (uint64_t)field << 3 | (uint64_t)wire_type); }

static void put_bytes(pbuf *p, int field, const void *s, size_t n) /* wire type 2 */
{
    put_key(p, field, 2);
    put_varint(p, n);
    if (p->n + n <= sizeof p->b) {
        memcpy(p->b + p->n, s, n);
        p->n += n;
    }
}

static void put_double(pbuf *p, int field, double v) /* wire type 1, little-endian */
{
    put_key(p, field, 1);
    if (p->n + 8 <= sizeof p->b) memcpy(p->b + p->n, &v, 8), p->n += 8;
}

static void put_float(pbuf *p, int field, float v) /* wire type 5 */
{
    put_key(p, field, 5);
    if (p->n + 4 <= sizeof p->b) memcpy(p->b + p->n, &v, 4), p->n += 4;
}

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "protobuf fixed64/fixed32 and records are little-endian");

/* ---- records ---- */

static uint32_t masked_crc(const void *buf, size_t n)
{
    uint32_t c = crc32c(buf, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static int write_record(tfevents *t, const pbuf *data)
{
    if (t->failed) return -1;
    uint64_t len = data->n;
    uint32_t len_crc = masked_crc(&len, 8), data_crc = masked_crc(data->b, data->n);
    if (fwrite(&len, 8, 1, t->f) != 1 || fwrite(&len_crc, 4, 1, t->f) != 1 ||
        fwrite(data->b, 1, data->n, t->f) != data->n || fwrite(&data_crc, 4, 1, t->f) != 1) {
        fprintf(stderr, "dtrun: %s: cannot write TensorBoard events (%s); no more will be written\n", t->path,
                strerror(errno));
        t->failed = 1;
        return -1;
    }
    return 0;
}

static void make_dirs(const char *dir)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(buf, 0777);
        *p = '/';
    }
}

tfevents *tfevents_open(const char *dir, char *err, size_t errlen)
{
    tfevents *t = calloc(1, sizeof *t);
    if (!t) {
        errline(err, errlen, "out of memory");
        return NULL;
    }
    make_dirs(dir);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    snprintf(t->path, sizeof t->path, "%s/events.out.tfevents.%ld.%s.%ld.0", dir, (long)time(NULL), host,
             (long)getpid());
    t->f = fopen(t->path, "wb");
    if (!t->f) {
        errline(err, errlen, "log.tensorboard: %s: cannot write (%s)", t->path, strerror(errno));
        free(t);
        return NULL;
    }
    pbuf p = {.n = 0};
    put_double(&p, 1, wall_now());
    put_bytes(&p, 3, "brain.Event:2", 13);
    if (write_record(t, &p) != 0) {
        errline(err, errlen, "log.tensorboard: %s: cannot write", t->path);
        fclose(t->f);
        free(t);
        return NULL;
    }
    fflush(t->f);
    return t;
}

int tfevents_scalar(tfevents *t, const char *tag, long step, double value)
{
    pbuf value_msg = {.n = 0}, summary = {.n = 0}, event = {.n = 0};
    put_bytes(&value_msg, 1, tag, strlen(tag));
    put_float(&value_msg, 2, (float)value);
    put_bytes(&summary, 1, value_msg.b, value_msg.n);
    put_double(&event, 1, wall_now());
    put_key(&event, 2, 0);
    put_varint(&event, (uint64_t)(int64_t)step); /* int64: two's complement as varint */
    put_bytes(&event, 5, summary.b, summary.n);
    return write_record(t, &event);
}

void tfevents_flush(tfevents *t)
{
    if (t && !t->failed) fflush(t->f);
}

void tfevents_close(tfevents *t)
{
    if (!t) return;
    if (t->f) fclose(t->f);
    free(t);
}

const char *tfevents_path(const tfevents *t) { return t->path; }
