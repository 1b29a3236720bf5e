/* test_frame.c — the rendezvous wire codec: round trips, incremental decoding,
 * and every kind of bad input (garbage, truncation, oversize, wrong version). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/rdzv/frame.h"
#include "test/unit/check.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* Feeds buf in chunks of `chunk` bytes (0 = random sizes), collecting frames.
 * Returns the number of frames, -1 on a decode error (reason in err). */
static int decode_all(const uint8_t *buf, size_t len, size_t chunk, frame_msg *out, int maxout, char *err, size_t errlen)
{
    frame_decoder *d = frame_decoder_new();
    int n = 0;
    size_t off = 0;
    int rc = FRAME_DEC_NEED_MORE;
    while (off < len) {
        size_t c = chunk ? chunk : 1 + rnd() % 64;
        if (c > len - off) c = len - off;
        frame_decoder_feed(d, buf + off, c);
        off += c;
        for (;;) {
            frame_msg m;
            rc = frame_decoder_next(d, &m, err, errlen);
            if (rc != FRAME_DEC_READY) break;
            if (n < maxout) out[n] = m; else frame_msg_free(&m);
            n++;
        }
        if (rc == FRAME_DEC_ERROR) { frame_decoder_free(d); return -1; }
    }
    frame_decoder_free(d);
    return n;
}

static void test_round_trip(void)
{
    frame_buf b = { 0 };
    int64_t join_i[6] = { 2, 8, 12345, 1, 29500, 30000 };
    frame_str join_s[3] = { FRAME_STR("tok"), FRAME_STR("nodeA"), FRAME_STR("10.0.0.1") };
    CHECK(frame_encode(&b, FRAME_JOIN, join_i, join_s, NULL, 0) == 0, "encode JOIN");
    uint8_t bin[5] = { 0, 1, 0, 2, 0 };
    frame_str set_s[2] = { FRAME_STR("round0/nccl_id"), { (const char *)bin, 5 } };
    CHECK(frame_encode(&b, FRAME_KV_SET, NULL, set_s, NULL, 0) == 0, "encode KV_SET with a binary value");
    frame_str keys[3] = { FRAME_STR("a"), FRAME_STR(""), FRAME_STR("ccc") };
    int64_t wait_i[1] = { -7 };
    CHECK(frame_encode(&b, FRAME_KV_WAIT, wait_i, NULL, keys, 3) == 0, "encode KV_WAIT with a list");
    int64_t hb[1] = { INT64_MIN };
    CHECK(frame_encode(&b, FRAME_HEARTBEAT, hb, NULL, NULL, 0) == 0, "encode HEARTBEAT");

    for (size_t chunk = 0; chunk <= 1; chunk++) { /* random splits, then byte by byte */
        frame_msg m[8];
        char err[256] = "";
        int n = decode_all(b.data, b.len, chunk, m, 8, err, sizeof err);
        CHECK(n == 4, "4 frames decoded from one stream (chunk %zu): got %d %s", chunk, n, err);
        if (n != 4) continue;
        CHECK(m[0].type == FRAME_JOIN && m[0].i[JOIN_I_NODE_RANK] == 2 && m[0].i[JOIN_I_LOCAL_WORLD] == 8 &&
              m[0].i[JOIN_I_PID] == 12345 && m[0].i[JOIN_I_JOIN_TIMEOUT_MS] == 30000 &&
              !strcmp(m[0].s[JOIN_S_TOKEN].p, "tok") && !strcmp(m[0].s[JOIN_S_NAME].p, "nodeA") &&
              !strcmp(m[0].s[JOIN_S_ADDR].p, "10.0.0.1"), "JOIN fields survive");
        CHECK(m[1].type == FRAME_KV_SET && m[1].s[KV_SET_S_VALUE].len == 5 &&
              !memcmp(m[1].s[KV_SET_S_VALUE].p, bin, 5) && m[1].s[KV_SET_S_VALUE].p[5] == 0,
              "binary value with NULs survives, NUL-terminated");
        CHECK(m[2].type == FRAME_KV_WAIT && m[2].i[0] == -7 && m[2].nlist == 3 && !strcmp(m[2].list[2].p, "ccc") &&
              m[2].list[1].len == 0, "list and negative integer survive");
        CHECK(m[3].type == FRAME_HEARTBEAT && m[3].i[0] == INT64_MIN, "INT64_MIN survives");
        for (int k = 0; k < 4; k++) frame_msg_free(&m[k]);
    }
    frame_buf_free(&b);
}

static int decode_err(const uint8_t *buf, size_t len, char *err, size_t errlen)
{
    frame_msg m[2];
    int n = decode_all(buf, len, 0, m, 2, err, errlen);
    for (int k = 0; k < n && k < 2; k++) frame_msg_free(&m[k]);
    return n;
}

static void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }

static void test_bad_headers(void)
{
    char err[256];
    const char *http = "GET / HTTP/1.1\r\n\r\n";
    /* Byte by byte: refused on the very first byte, not after a bogus length. */
    frame_decoder *d = frame_decoder_new();
    frame_msg m;
    frame_decoder_feed(d, http, 1);
    int rc = frame_decoder_next(d, &m, err, sizeof err);
    CHECK(rc == FRAME_DEC_ERROR && strstr(err, "bad magic"), "HTTP request refused at its first byte: %s", err);
    CHECK(frame_decoder_feed(d, "DTR", 3) == -1 && frame_decoder_next(d, &m, err, sizeof err) == FRAME_DEC_ERROR,
          "the error is sticky");
    frame_decoder_free(d);

    uint8_t h[FRAME_HEADER + 8] = { 'D', 'T', 'R', 9, FRAME_HEARTBEAT, 0, 0, 0, 8 };
    CHECK(decode_err(h, sizeof h, err, sizeof err) < 0 && strstr(err, "protocol version 9"),
          "wrong version named: %s", err);
    h[3] = FRAME_VERSION;
    h[4] = 200;
    CHECK(decode_err(h, sizeof h, err, sizeof err) < 0 && strstr(err, "unknown frame type 200"),
          "unknown type named: %s", err);
    h[4] = 0;
    CHECK(decode_err(h, sizeof h, err, sizeof err) < 0 && strstr(err, "unknown frame type 0"), "type 0 refused");

    /* An oversized length is refused from the header alone. */
    d = frame_decoder_new();
    uint8_t big[FRAME_HEADER] = { 'D', 'T', 'R', FRAME_VERSION, FRAME_KV_SET };
    put32(big + 5, 0xFFFFFFFFu);
    frame_decoder_feed(d, big, sizeof big);
    rc = frame_decoder_next(d, &m, err, sizeof err);
    CHECK(rc == FRAME_DEC_ERROR && strstr(err, "exceeds") && frame_decoder_pending(d) == FRAME_HEADER,
          "4 GiB length refused before any payload: %s", err);
    frame_decoder_free(d);
    put32(big + 5, FRAME_MAX_PAYLOAD + 1);
    CHECK(decode_err(big, sizeof big, err, sizeof err) < 0 && strstr(err, "exceeds"), "max+1 refused");

    /* A lowered limit applies from the header too. */
    d = frame_decoder_new();
    frame_decoder_set_max(d, 100);
    put32(big + 5, 101);
    frame_decoder_feed(d, big, sizeof big);
    rc = frame_decoder_next(d, &m, err, sizeof err);
    CHECK(rc == FRAME_DEC_ERROR && strstr(err, "exceeds the 100-byte limit"), "lowered limit: %s", err);
    frame_decoder_free(d);

    /* A header alone is not an error: it needs more. */
    d = frame_decoder_new();
    put32(big + 5, 100);
    frame_decoder_feed(d, big, sizeof big);
    CHECK(frame_decoder_next(d, &m, err, sizeof err) == FRAME_DEC_NEED_MORE, "partial frame: NEED_MORE");
    frame_decoder_free(d);
}

static void test_bad_payloads(void)
{
    char err[256];
    uint8_t f[64] = { 'D', 'T', 'R', FRAME_VERSION, FRAME_KV_GET };
    /* KV_GET = int64 timeout + string key. Length 4: truncated integer. */
    put32(f + 5, 4);
    CHECK(decode_err(f, FRAME_HEADER + 4, err, sizeof err) < 0 && strstr(err, "truncated"), "truncated int: %s", err);
    /* String announced longer than what is left. */
    memset(f + 9, 0, 8);
    put32(f + 17, 30);
    memcpy(f + 21, "abc", 3);
    put32(f + 5, 15);
    CHECK(decode_err(f, FRAME_HEADER + 15, err, sizeof err) < 0 && strstr(err, "truncated"), "truncated string: %s", err);
    /* Key longer than the limit. */
    put32(f + 17, FRAME_MAX_KEY + 1);
    CHECK(decode_err(f, FRAME_HEADER + 15, err, sizeof err) < 0 && strstr(err, "max 1024"), "key over limit: %s", err);
    /* Trailing bytes. */
    put32(f + 17, 3);
    put32(f + 5, 16);
    CHECK(decode_err(f, FRAME_HEADER + 16, err, sizeof err) < 0 && strstr(err, "trailing"), "trailing byte: %s", err);
    /* A NUL inside a key. */
    f[22] = 0;
    put32(f + 5, 15);
    CHECK(decode_err(f, FRAME_HEADER + 15, err, sizeof err) < 0 && strstr(err, "NUL"), "NUL in a key: %s", err);
    /* A list count far beyond the payload. */
    uint8_t w[32] = { 'D', 'T', 'R', FRAME_VERSION, FRAME_KV_WAIT };
    put32(w + 5, 12);
    put32(w + 17, 0x7FFFFFFF);
    CHECK(decode_err(w, FRAME_HEADER + 12, err, sizeof err) < 0 && strstr(err, "list"), "huge list count: %s", err);
    /* The encoder refuses what the decoder would. */
    frame_buf b = { 0 };
    char *huge = calloc(1, FRAME_MAX_VALUE + 1);
    frame_str s2[2] = { FRAME_STR("k"), { huge, FRAME_MAX_VALUE + 1 } };
    CHECK(frame_encode(&b, FRAME_KV_SET, NULL, s2, NULL, 0) == -1 && b.len == 0, "encoder refuses a value over 1 MiB");
    s2[1].len = FRAME_MAX_VALUE;
    CHECK(frame_encode(&b, FRAME_KV_SET, NULL, s2, NULL, 0) == 0, "encoder takes a 1 MiB value");
    frame_msg m[1];
    int n = decode_all(b.data, b.len, 65536, m, 1, err, sizeof err);
    CHECK(n == 1 && m[0].s[KV_SET_S_VALUE].len == FRAME_MAX_VALUE, "1 MiB value decodes");
    if (n == 1) frame_msg_free(&m[0]);
    free(huge);
    frame_buf_free(&b);
}

static void test_garbage(void)
{
    /* Pure garbage and mutated valid frames: the decoder must end in NEED_MORE or
     * ERROR, never crash (the ASan twin checks memory). */
    int errors = 0, frames = 0;
    char err[256];
    for (int it = 0; it < 20000; it++) {
        uint8_t buf[512];
        size_t len = 1 + rnd() % sizeof buf;
        for (size_t k = 0; k < len; k++) buf[k] = (uint8_t)rnd();
        if (it % 2) { /* start from a valid frame, then flip bytes */
            frame_buf b = { 0 };
            int64_t ints[2] = { rnd(), rnd() };
            frame_str s[1] = { FRAME_STR("barrier-name") };
            frame_encode(&b, FRAME_KV_BARRIER, ints, s, NULL, 0);
            len = b.len;
            memcpy(buf, b.data, len);
            frame_buf_free(&b);
            int flips = 1 + rnd() % 3;
            for (int k = 0; k < flips; k++) buf[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
        }
        frame_msg m[4];
        int n = decode_all(buf, len, 0, m, 4, err, sizeof err);
        if (n < 0) errors++;
        else frames += n;
        for (int k = 0; k < n && k < 4; k++) frame_msg_free(&m[k]);
    }
    CHECK(errors > 10000, "20000 garbage / mutated inputs decoded without a crash (%d errors, %d frames)", errors, frames);
}

int main(void)
{
    test_round_trip();
    test_bad_headers();
    test_bad_payloads();
    test_garbage();
    CHECK(!strcmp(frame_type_name(FRAME_JOIN_OK), "JOIN_OK") && !strcmp(frame_type_name(99), "?"), "type names");
    CHECK_DONE();
}
