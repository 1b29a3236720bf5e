/* frame.h — the rendezvous / KV wire codec (daemon and clients share it).
 *
 * A frame is a 9-byte header and a payload:
 *     'D' 'T' 'R' VERSION | TYPE (1 byte) | LENGTH (4 bytes, big-endian) | PAYLOAD
 * LENGTH is at most FRAME_MAX_PAYLOAD. The payload of each type is a fixed
 * schema: its integers (8 bytes, big-endian, signed), then its strings (4-byte
 * big-endian length + bytes), then, for types that have one, a list (4-byte
 * count + strings). Nothing else, and no trailing bytes.
 *
 * Decoding is incremental (feed any split of the byte stream) and total: any
 * input gives NEED_MORE, a message, or an error with a reason; an error is
 * sticky, the connection is then dropped. A decoded message owns a copy of its
 * strings, each NUL-terminated; key, name and token strings may not contain
 * NULs (values may: they are binary).
 *
 * The index enums below name each type's integers and strings, e.g.
 * m.i[JOIN_I_NODE_RANK], m.s[JOIN_S_TOKEN].p. */
#ifndef DTRUN_FRAME_H
#define DTRUN_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define FRAME_VERSION      1
#define FRAME_HEADER       9
#define FRAME_MAX_VALUE    (1024 * 1024)                   /* one KV value */
#define FRAME_MAX_KEY      1024                            /* key, name, token, addr */
#define FRAME_MAX_TEXT     4096                            /* reasons, messages */
#define FRAME_MAX_LIST     4096                            /* keys in a WAIT, nodes in a JOIN_OK */
#define FRAME_MAX_PAYLOAD  (2 * FRAME_MAX_VALUE + 65536)   /* a CAS carries two values */
#define FRAME_MAX_INTS     8
#define FRAME_MAX_STRS     4

typedef enum {
    FRAME_HELLO = 1,   /* client → daemon, a KV client's first frame */
    FRAME_JOIN,        /* agent → daemon */
    FRAME_JOIN_OK,     /* daemon → agent: the round closed */
    FRAME_HEARTBEAT,   /* agent → daemon, echoed back */
    FRAME_LEAVE,       /* agent → daemon: finished cleanly */
    FRAME_FAIL,        /* agent → daemon: this node failed, fail the round */
    FRAME_EVENT,       /* daemon → agent, pushed: node dead, round failed … */
    FRAME_KV_SET,
    FRAME_KV_GET,
    FRAME_KV_WAIT,
    FRAME_KV_ADD,
    FRAME_KV_CAS,
    FRAME_KV_DELETE,
    FRAME_KV_BARRIER,
    FRAME_REPLY,       /* daemon → client: the answer to HELLO and every KV_* */
    FRAME_ERROR,       /* daemon → client: refused (wrong token, bad request); then closed */
    FRAME_TYPE_END
} frame_type;

/* Integers and strings of each type (ints first on the wire, then strings). */
enum { HELLO_S_TOKEN, HELLO_S_NAME };
enum { JOIN_I_NODE_RANK, JOIN_I_LOCAL_WORLD, JOIN_I_PID, JOIN_I_ATTEMPT, JOIN_I_MASTER_PORT,
       JOIN_I_JOIN_TIMEOUT_MS };
enum { JOIN_S_TOKEN, JOIN_S_NAME, JOIN_S_ADDR };
enum { JOIN_OK_I_ROUND, JOIN_OK_I_NODE_RANK, JOIN_OK_I_NNODES, JOIN_OK_I_RANK_OFFSET,
       JOIN_OK_I_WORLD_SIZE, JOIN_OK_I_MASTER_PORT, JOIN_OK_I_HB_INTERVAL, JOIN_OK_I_HB_TIMEOUT };
enum { JOIN_OK_S_MASTER_ADDR, JOIN_OK_S_RUN_ID, JOIN_OK_S_KV_PREFIX }; /* list: node names by rank */
enum { HEARTBEAT_I_ROUND };
enum { LEAVE_I_ROUND };
enum { FAIL_I_ROUND };
enum { FAIL_S_REASON };
enum { EVENT_I_KIND, EVENT_I_ROUND, EVENT_I_NODE_RANK };  /* kind: rdzv_event_kind */
enum { EVENT_S_MESSAGE };
enum { KV_SET_S_KEY, KV_SET_S_VALUE };
enum { KV_GET_I_TIMEOUT_MS };
enum { KV_GET_S_KEY };
enum { KV_WAIT_I_TIMEOUT_MS };                             /* list: keys */
enum { KV_ADD_I_DELTA };
enum { KV_ADD_S_KEY };
enum { KV_CAS_I_EXPECT_ABSENT };
enum { KV_CAS_S_KEY, KV_CAS_S_EXPECTED, KV_CAS_S_DESIRED };
enum { KV_DELETE_S_KEY };
enum { KV_BARRIER_I_COUNT, KV_BARRIER_I_TIMEOUT_MS };
enum { KV_BARRIER_S_NAME };
enum { REPLY_I_STATUS, REPLY_I_VALUE };                     /* status: a KV_* code of lib/rdzv/kv.h */
enum { REPLY_S_VALUE, REPLY_S_MESSAGE };
enum { ERROR_S_REASON };

typedef struct {
    const char *p;   /* NUL-terminated in decoded messages */
    uint32_t len;    /* without the NUL */
} frame_str;

#define FRAME_STR(cstr) ((frame_str){ (cstr), (uint32_t)strlen(cstr) })

typedef struct {
    int type;
    int64_t i[FRAME_MAX_INTS];
    frame_str s[FRAME_MAX_STRS];
    frame_str *list;
    uint32_t nlist;
    void *owned_;    /* the copy the strings point into; frame_msg_free releases it */
} frame_msg;

/* Growable output buffer. */
typedef struct {
    uint8_t *data;
    size_t len, cap;
} frame_buf;

void frame_buf_free(frame_buf *b);

/* Appends one frame of `type` to b: its schema's integers from ints, strings from
 * strs, and (for JOIN_OK, KV_WAIT) nlist strings from list. 0, or -1 when a
 * string or the payload exceeds its bound (nothing appended). */
int frame_encode(frame_buf *b, int type, const int64_t *ints, const frame_str *strs,
                 const frame_str *list, uint32_t nlist);

/* Parses one payload of `type` into m (m owns copies; frame_msg_free it).
 * 0, or -1 with the reason in err ("KV_GET: string 1 is 70000 bytes, max 1024"). */
int frame_parse(int type, const uint8_t *payload, size_t len, frame_msg *m, char *err, size_t errlen);
void frame_msg_free(frame_msg *m);

const char *frame_type_name(int type); /* "JOIN", …; "?" if unknown */

/* Incremental decoder. */
typedef struct frame_decoder frame_decoder;

enum { FRAME_DEC_ERROR = -1, FRAME_DEC_NEED_MORE = 0, FRAME_DEC_READY = 1 };

frame_decoder *frame_decoder_new(void);
void frame_decoder_free(frame_decoder *d);

/* Lowers (or restores) the largest payload accepted, at most FRAME_MAX_PAYLOAD.
 * The daemon accepts only small frames until a client has shown the job token,
 * so strangers cannot make it buffer megabytes per connection. */
void frame_decoder_set_max(frame_decoder *d, uint32_t max_payload);

/* Appends received bytes. -1 when out of memory or already in error. The
 * decoder never holds more than one incomplete frame plus what was fed. */
int frame_decoder_feed(frame_decoder *d, const void *data, size_t len);

/* The next complete frame: FRAME_DEC_READY and *m filled (frame_msg_free it),
 * FRAME_DEC_NEED_MORE, or FRAME_DEC_ERROR with the reason in err ("bad magic", "protocol
 * version 7, this build speaks 1", "frame of 9000000 bytes exceeds the 2162688
 * limit", …) and the decoder then stays in error. Errors in the header are seen
 * as soon as its bytes arrive, before any payload is buffered. */
int frame_decoder_next(frame_decoder *d, frame_msg *m, char *err, size_t errlen);

/* Bytes buffered and not yet returned as a frame. */
size_t frame_decoder_pending(const frame_decoder *d);

#endif
