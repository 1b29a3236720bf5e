/* frame.c — the rendezvous / KV wire codec. See frame.h for the format. */
#include "lib/rdzv/frame.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/errline.h"
#include "lib/util/grow.h"

static const uint8_t frame_magic[3] = { 'D', 'T', 'R' };

/* Each type's payload schema: how many integers, one letter per string
 * ('k' key/name/token: text ≤ FRAME_MAX_KEY; 't' text ≤ FRAME_MAX_TEXT; 'v'
 * binary value ≤ FRAME_MAX_VALUE), and whether a list of 'k' strings follows. */
typedef struct {
    const char *name;
    int nint;
    const char *strs;
    int has_list;
} frame_schema;

static const frame_schema schemas[FRAME_TYPE_END] = {
    [FRAME_HELLO]      = { "HELLO", 0, "kk", 0 },
    [FRAME_JOIN]       = { "JOIN", 6, "kkk", 0 },
    [FRAME_JOIN_OK]    = { "JOIN_OK", 8, "kkk", 1 },
    [FRAME_HEARTBEAT]  = { "HEARTBEAT", 1, "", 0 },
    [FRAME_LEAVE]      = { "LEAVE", 1, "", 0 },
    [FRAME_FAIL]       = { "FAIL", 1, "t", 0 },
    [FRAME_EVENT]      = { "EVENT", 3, "t", 0 },
    [FRAME_KV_SET]     = { "KV_SET", 0, "kv", 0 },
    [FRAME_KV_GET]     = { "KV_GET", 1, "k", 0 },
    [FRAME_KV_WAIT]    = { "KV_WAIT", 1, "", 1 },
    [FRAME_KV_ADD]     = { "KV_ADD", 1, "k", 0 },
    [FRAME_KV_CAS]     = { "KV_CAS", 1, "kvv", 0 },
    [FRAME_KV_DELETE]  = { "KV_DELETE", 0, "k", 0 },
    [FRAME_KV_BARRIER] = { "KV_BARRIER", 2, "k", 0 },
    [FRAME_REPLY]      = { "REPLY", 2, "vt", 0 },
    [FRAME_ERROR]      = { "ERROR", 0, "t", 0 },
};

static const frame_schema *schema_of(int type)
{
    if (type <= 0 || type >= FRAME_TYPE_END) return NULL;
    return &schemas[type];
}

const char *frame_type_name(int type)
{
    const frame_schema *sc = schema_of(type);
    return sc ? sc->name : "?";
}

static uint32_t str_limit(char kind)
{
    return kind == 'v' ? FRAME_MAX_VALUE : kind == 't' ? FRAME_MAX_TEXT : FRAME_MAX_KEY;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* ------------------------------------------------------------------ encoding */

void frame_buf_free(frame_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static int buf_reserve(frame_buf *b, size_t extra)
{
    return grow_bytes(&b->data, &b->cap, b->len, extra, 256);
}

int frame_encode(frame_buf *b, int type, const int64_t *ints, const frame_str *strs,
                 const frame_str *list, uint32_t nlist)
{
    const frame_schema *sc = schema_of(type);
    if (!sc) return -1;
    int nstr = (int)strlen(sc->strs);
    /* Size and bounds first so a refused frame appends nothing. */
    size_t payload = (size_t)sc->nint * 8;
    for (int k = 0; k < nstr; k++) {
        if (strs[k].len > str_limit(sc->strs[k])) return -1;
        payload += 4 + strs[k].len;
    }
    if (sc->has_list) {
        if (nlist > FRAME_MAX_LIST) return -1;
        payload += 4;
        for (uint32_t k = 0; k < nlist; k++) {
            if (list[k].len > FRAME_MAX_KEY) return -1;
            payload += 4 + list[k].len;
        }
    }
    if (payload > FRAME_MAX_PAYLOAD) return -1;
    if (buf_reserve(b, FRAME_HEADER + payload) != 0) return -1;

    uint8_t *p = b->data + b->len;
    memcpy(p, frame_magic, 3);
    p[3] = FRAME_VERSION;
    p[4] = (uint8_t)type;
    put_u32(p + 5, (uint32_t)payload);
    p += FRAME_HEADER;
    for (int k = 0; k < sc->nint; k++) {
        uint64_t v = (uint64_t)ints[k];
        for (int j = 0; j < 8; j++) *p++ = (uint8_t)(v >> (56 - 8 * j));
    }
    for (int k = 0; k < nstr; k++) {
        put_u32(p, strs[k].len);
        if (strs[k].len) memcpy(p + 4, strs[k].p, strs[k].len);
        p += 4 + strs[k].len;
    }
    if (sc->has_list) {
        put_u32(p, nlist);
        p += 4;
        for (uint32_t k = 0; k < nlist; k++) {
            put_u32(p, list[k].len);
            if (list[k].len) memcpy(p + 4, list[k].p, list[k].len);
            p += 4 + list[k].len;
        }
    }
    b->len += FRAME_HEADER + payload;
    return 0;
}

/* ------------------------------------------------------------------ parsing */

void frame_msg_free(frame_msg *m)
{
    if (!m) return;
    free(m->owned_);
    free(m->list);
    memset(m, 0, sizeof *m);
}

/* Reads one length-prefixed string at *pos into the arena (NUL-terminated). */
static int parse_str(const char *tname, int idx, char kind, const uint8_t *pl, size_t len,
                     size_t *pos, char **arena, frame_str *out, char *err, size_t errlen)
{
    if (len - *pos < 4) {
        errline(err, errlen, "%s: payload truncated in string %d's length", tname, idx);
        return -1;
    }
    uint32_t n = get_u32(pl + *pos);
    *pos += 4;
    if (n > str_limit(kind)) {
        errline(err, errlen, "%s: string %d is %u bytes, max %u", tname, idx, n, str_limit(kind));
        return -1;
    }
    if (len - *pos < n) {
        errline(err, errlen, "%s: payload truncated in string %d (%u bytes announced, %zu left)",
                tname, idx, n, len - *pos);
        return -1;
    }
    if (kind != 'v' && memchr(pl + *pos, 0, n)) {
        errline(err, errlen, "%s: string %d contains a NUL byte", tname, idx);
        return -1;
    }
    memcpy(*arena, pl + *pos, n);
    (*arena)[n] = '\0';
    out->p = *arena;
    out->len = n;
    *arena += n + 1;
    *pos += n;
    return 0;
}

int frame_parse(int type, const uint8_t *payload, size_t len, frame_msg *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    const frame_schema *sc = schema_of(type);
    if (!sc) {
        errline(err, errlen, "unknown frame type %d", type);
        return -1;
    }
    if (len > FRAME_MAX_PAYLOAD) {
        errline(err, errlen, "%s: payload of %zu bytes exceeds the %d limit", sc->name, len, FRAME_MAX_PAYLOAD);
        return -1;
    }
    m->type = type;
    size_t pos = 0;
    for (int k = 0; k < sc->nint; k++) {
        if (len - pos < 8) {
            errline(err, errlen, "%s: payload truncated in integer %d", sc->name, k);
            return -1;
        }
        uint64_t v = 0;
        for (int j = 0; j < 8; j++) v = v << 8 | payload[pos + j];
        m->i[k] = (int64_t)v;
        pos += 8;
    }
    /* Every string takes >= 4 payload bytes, so len / 4 bounds their number;
     * the arena holds them all plus one NUL each. */
    size_t maxstrs = len / 4 + 1;
    char *arena = malloc(len + maxstrs + 1);
    if (!arena) {
        errline(err, errlen, "%s: out of memory", sc->name);
        return -1;
    }
    m->owned_ = arena;
    int nstr = (int)strlen(sc->strs);
    for (int k = 0; k < nstr; k++)
        if (parse_str(sc->name, k, sc->strs[k], payload, len, &pos, &arena, &m->s[k], err, errlen) != 0)
            goto fail;
    if (sc->has_list) {
        if (len - pos < 4) {
            errline(err, errlen, "%s: payload truncated in the list count", sc->name);
            goto fail;
        }
        uint32_t n = get_u32(payload + pos);
        pos += 4;
        if (n > FRAME_MAX_LIST || n > (len - pos) / 4) {
            errline(err, errlen, "%s: list of %u entries does not fit (max %d)", sc->name, n, FRAME_MAX_LIST);
            goto fail;
        }
        if (n) {
            m->list = calloc(n, sizeof *m->list);
            if (!m->list) {
                errline(err, errlen, "%s: out of memory", sc->name);
                goto fail;
            }
        }
        m->nlist = n;
        for (uint32_t k = 0; k < n; k++)
            if (parse_str(sc->name, nstr + (int)k, 'k', payload, len, &pos, &arena, &m->list[k], err, errlen) != 0)
                goto fail;
    }
    if (pos != len) {
        errline(err, errlen, "%s: %zu trailing bytes after the payload", sc->name, len - pos);
        goto fail;
    }
    return 0;
fail:
    frame_msg_free(m);
    return -1;
}

/* ------------------------------------------------------------------ decoder */

struct frame_decoder {
    uint32_t max;         /* largest payload accepted */
    uint8_t *buf;
    size_t len, cap, off; /* unread bytes are buf[off..len) */
    int failed;
    char reason[256];
};

frame_decoder *frame_decoder_new(void)
{
    frame_decoder *d = calloc(1, sizeof *d);
    if (d) d->max = FRAME_MAX_PAYLOAD;
    return d;
}

void frame_decoder_set_max(frame_decoder *d, uint32_t max_payload)
{
    d->max = max_payload < FRAME_MAX_PAYLOAD ? max_payload : FRAME_MAX_PAYLOAD;
}

void frame_decoder_free(frame_decoder *d)
{
    if (!d) return;
    free(d->buf);
    free(d);
}

size_t frame_decoder_pending(const frame_decoder *d)
{
    return d->len - d->off;
}

int frame_decoder_feed(frame_decoder *d, const void *data, size_t n)
{
    if (d->failed) return -1;
    if (n == 0) return 0;
    if (d->off > 0 && (d->off == d->len || d->cap - d->len < n)) {
        /* Drop consumed bytes before growing. */
        memmove(d->buf, d->buf + d->off, d->len - d->off);
        d->len -= d->off;
        d->off = 0;
    }
    if (grow_bytes(&d->buf, &d->cap, d->len, n, 4096)) return -1;
    memcpy(d->buf + d->len, data, n);
    d->len += n;
    return 0;
}

static int decoder_fail(frame_decoder *d, char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->reason, sizeof d->reason, fmt, ap);
    va_end(ap);
    d->failed = 1;
    errline(err, errlen, "%s", d->reason);
    return FRAME_DEC_ERROR;
}

int frame_decoder_next(frame_decoder *d, frame_msg *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    if (d->failed) {
        errline(err, errlen, "%s", d->reason);
        return FRAME_DEC_ERROR;
    }
    const uint8_t *p = d->buf + d->off;
    size_t avail = d->len - d->off;
    /* Check the header byte by byte as it arrives, so garbage (an HTTP request,
     * a port scanner) is refused at once, not after buffering a bogus length. */
    for (size_t k = 0; k < 3 && k < avail; k++) {
        if (p[k] == frame_magic[k]) continue;
        char hex[16] = "";
        for (size_t j = 0; j <= k; j++) snprintf(hex + 3 * j, sizeof hex - 3 * j, "%s%02x", j ? " " : "", p[j]);
        return decoder_fail(d, err, errlen, "bad magic (bytes %s; not a dtrun rendezvous peer?)", hex);
    }
    if (avail >= 4 && p[3] != FRAME_VERSION)
        return decoder_fail(d, err, errlen, "protocol version %u, this build speaks %d", p[3], FRAME_VERSION);
    if (avail >= 5 && !schema_of(p[4]))
        return decoder_fail(d, err, errlen, "unknown frame type %u", p[4]);
    if (avail < FRAME_HEADER) return FRAME_DEC_NEED_MORE;
    uint32_t n = get_u32(p + 5);
    if (n > d->max)
        return decoder_fail(d, err, errlen, "%s frame of %u bytes exceeds the %u-byte limit",
                            frame_type_name(p[4]), n, d->max);
    if (avail - FRAME_HEADER < n) return FRAME_DEC_NEED_MORE;
    char why[256];
    if (frame_parse(p[4], p + FRAME_HEADER, n, m, why, sizeof why) != 0)
        return decoder_fail(d, err, errlen, "%s", why);
    d->off += FRAME_HEADER + n;
    if (d->off == d->len) d->off = d->len = 0;
    return FRAME_DEC_READY;
}
