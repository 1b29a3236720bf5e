/* fuzz_rdzv.c — libFuzzer target for the rendezvous / KV wire decoder.
 *
 * The input is a byte stream as a client would send it. The first byte picks
 * how it is split into reads (the decoder must not care) and whether the
 * daemon's smaller limit for unauthenticated clients applies; every decoded frame
 * must re-encode to exactly the bytes it came from, and KV frames are applied
 * to a kv_store the way the daemon would (set, delete, add's integer parse).
 * Built by scripts/fuzz.sh rdzv. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/rdzv/frame.h"
#include "lib/rdzv/kv_store.h"

static void check_round_trip(const frame_msg *m, const uint8_t *orig, size_t len)
{
    int64_t ints[FRAME_MAX_INTS];
    memcpy(ints, m->i, sizeof ints);
    frame_buf b = { 0 };
    if (frame_encode(&b, m->type, ints, m->s, m->list, m->nlist) != 0) abort(); /* decoded ⇒ encodable */
    if (b.len != len || memcmp(b.data, orig, len) != 0) abort();                  /* and byte-identical */
    frame_buf_free(&b);
}

static void apply(kv_store *st, const frame_msg *m)
{
    const uint8_t *v;
    size_t len;
    switch (m->type) {
    case FRAME_KV_SET:
        kv_store_set(st, m->s[KV_SET_S_KEY].p, m->s[KV_SET_S_VALUE].p, m->s[KV_SET_S_VALUE].len);
        if (!kv_store_get(st, m->s[KV_SET_S_KEY].p, &v, &len) || len != m->s[KV_SET_S_VALUE].len) abort();
        break;
    case FRAME_KV_DELETE:
        kv_store_delete(st, m->s[KV_DELETE_S_KEY].p);
        if (kv_store_get(st, m->s[KV_DELETE_S_KEY].p, &v, &len)) abort();
        break;
    case FRAME_KV_WAIT:
        for (uint32_t k = 0; k < m->nlist; k++) kv_store_get(st, m->list[k].p, &v, &len);
        break;
    case FRAME_LEAVE:
        kv_store_delete_prefix(st, "round");
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t chunk = 1 + data[0] % 17; /* 1..17 byte reads */
    data++;
    size--;
    frame_decoder *d = frame_decoder_new();
    if (data[-1] & 0x80) frame_decoder_set_max(d, 16384); /* as the daemon does before the token */
    kv_store *st = kv_store_new();
    size_t off = 0, frame_start = 0;
    int done = 0;
    while (off < size && !done) {
        size_t c = chunk < size - off ? chunk : size - off;
        frame_decoder_feed(d, data + off, c);
        off += c;
        for (;;) {
            frame_msg m;
            char err[256];
            int rc = frame_decoder_next(d, &m, err, sizeof err);
            if (rc == FRAME_DEC_ERROR) {
                if (!err[0]) abort(); /* an error always has a reason */
                done = 1;
                break;
            }
            if (rc == FRAME_DEC_NEED_MORE) break;
            size_t flen = off - frame_start - frame_decoder_pending(d);
            check_round_trip(&m, data + frame_start, flen);
            frame_start += flen;
            apply(st, &m);
            frame_msg_free(&m);
        }
    }
    /* The same bytes as one payload of every type: parse must be total. */
    for (int t = 0; t <= FRAME_TYPE_END; t++) {
        frame_msg m;
        char err[256];
        if (frame_parse(t, data, size, &m, err, sizeof err) == 0) frame_msg_free(&m);
    }
    kv_store_free(st);
    frame_decoder_free(d);
    return 0;
}
