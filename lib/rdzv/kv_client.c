/* kv_client.c — the blocking KV client (see kv.h). One request in flight: send
 * a frame, wait for its REPLY. The daemon enforces each request's timeout and
 * answers; the client waits that long plus KV_SLACK_MS, so a reply is never
 * left in flight to be mistaken for the next request's (if the slack runs out
 * the connection is declared broken). */
#include "lib/rdzv/kv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/rdzv/frame.h"
#include "lib/rdzv/frame_sock.h"
#include "lib/rdzv/rdzv.h"

#define KV_SLACK_MS        5000    /* beyond a request's own timeout */
#define KV_IO_TIMEOUT_MS   30000   /* requests that never block on the daemon */
#define KV_DEFAULT_PORT    29400

struct kv_client {
    frame_sock *fs;
    char ep[300];
    char prefix[KV_MAX_KEY + 1];
    char err[1024];
    int broken;
};

static int kv_fail(kv_client *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    if (code == KV_EIO || code == KV_EREFUSED) c->broken = 1;
    return code;
}

const char *kv_errmsg(const kv_client *c) { return c ? c->err : "no client"; }
const char *kv_prefix(const kv_client *c) { return c->prefix; }

int kv_set_prefix(kv_client *c, const char *prefix)
{
    if (!prefix) prefix = "";
    if (strlen(prefix) >= KV_MAX_KEY)
        return kv_fail(c, KV_EINVAL, "kv prefix '%.40s…' is longer than %d bytes", prefix, KV_MAX_KEY - 1);
    strcpy(c->prefix, prefix);
    return KV_OK;
}

/* prefix + key into out; KV_EINVAL when too long or empty. */
static int full_key(kv_client *c, const char *op, const char *key, char *out)
{
    if (!key || !*key) return kv_fail(c, KV_EINVAL, "kv %s: empty key", op);
    size_t pl = strlen(c->prefix), kl = strlen(key);
    if (pl + kl > KV_MAX_KEY)
        return kv_fail(c, KV_EINVAL, "kv %s '%.40s…': key is %zu bytes with its prefix, max %d", op, key, pl + kl,
                       KV_MAX_KEY);
    memcpy(out, c->prefix, pl);
    memcpy(out + pl, key, kl + 1);
    return KV_OK;
}

/* Sends one request and waits up to wait_ms (+ slack) for its reply. Returns
 * the reply's status (with *rep filled on KV_OK / KV_ETOOSMALL paths; the
 * caller frees it) or an error code with c->err set, naming op and what. */
static int request(kv_client *c, const char *op, const char *what, int type, const int64_t *ints,
                   const frame_str *strs, const frame_str *list, uint32_t nlist, int64_t wait_ms, frame_msg *rep)
{
    memset(rep, 0, sizeof *rep);
    c->err[0] = '\0';
    if (c->broken) return kv_fail(c, KV_EIO, "kv %s '%s' at %s: the connection was lost earlier", op, what, c->ep);
    frame_buf b = { 0 };
    if (frame_encode(&b, type, ints, strs, list, nlist) != 0) {
        frame_buf_free(&b);
        return kv_fail(c, KV_EINVAL, "kv %s '%s': request too large (values up to %d bytes)", op, what, KV_MAX_VALUE);
    }
    char why[512];
    int64_t deadline = clock_now_ms() + wait_ms + KV_SLACK_MS;
    int rc = frame_sock_send(c->fs, &b, deadline, why, sizeof why);
    frame_buf_free(&b);
    if (rc != 0) return kv_fail(c, KV_EIO, "kv %s '%s' at %s: %s", op, what, c->ep, why);
    rc = frame_sock_recv(c->fs, rep, deadline, why, sizeof why);
    if (rc == 0)
        return kv_fail(c, KV_EIO, "kv %s '%s' at %s: no reply from the daemon within %.1f s", op, what, c->ep,
                       (double)(wait_ms + KV_SLACK_MS) / 1000.0);
    if (rc < 0) return kv_fail(c, KV_EIO, "kv %s '%s' at %s: %s", op, what, c->ep, why);
    if (rep->type == FRAME_ERROR) {
        rc = kv_fail(c, KV_EREFUSED, "kv %s '%s' at %s: refused: %s", op, what, c->ep, rep->s[ERROR_S_REASON].p);
        frame_msg_free(rep);
        return rc;
    }
    if (rep->type != FRAME_REPLY) {
        rc = kv_fail(c, KV_EIO, "kv %s '%s' at %s: unexpected %s frame", op, what, c->ep, frame_type_name(rep->type));
        frame_msg_free(rep);
        return rc;
    }
    int64_t st = rep->i[REPLY_I_STATUS];
    if (st == KV_OK) return KV_OK;
    const char *msg = rep->s[REPLY_S_MESSAGE].p;
    if (st < KV_ETOOSMALL || st > 0) st = KV_EIO;
    rc = kv_fail(c, (int)st, "kv %s '%s' at %s: %s", op, what, c->ep, *msg ? msg : "failed");
    frame_msg_free(rep);
    return rc;
}

static int check_timeout(kv_client *c, const char *op, const char *what, int timeout_ms)
{
    if (timeout_ms < 0) return kv_fail(c, KV_EINVAL, "kv %s '%s': negative timeout %d ms", op, what, timeout_ms);
    return KV_OK;
}

kv_client *kv_connect(const char *host, int port, const char *token, int timeout_ms, char *err, size_t errlen)
{
    kv_client *c = calloc(1, sizeof *c);
    if (!c) { snprintf(err, errlen, "kv: out of memory"); return NULL; }
    frame_format_endpoint(c->ep, sizeof c->ep, host ? host : "", port);
    if (!host || !*host) {
        snprintf(err, errlen, "kv: empty daemon host");
        free(c);
        return NULL;
    }
    if (timeout_ms < 0) timeout_ms = 0;
    int64_t deadline = clock_now_ms() + timeout_ms;
    char why[600];
    int fd = frame_connect(host, port, deadline, why, sizeof why);
    if (fd < 0) {
        snprintf(err, errlen, "kv: %s", why);
        free(c);
        return NULL;
    }
    if (!(c->fs = frame_sock_new(fd))) {
        snprintf(err, errlen, "kv: out of memory");
        free(c);
        return NULL;
    }
    char name[300], hn[256] = "?";
    gethostname(hn, sizeof hn - 1);
    snprintf(name, sizeof name, "%s:%d", hn, (int)getpid());
    frame_str strs[2] = { FRAME_STR(token ? token : ""), FRAME_STR(name) };
    frame_msg rep;
    /* The hello may take the connect's remaining time, but at least the slack. */
    int64_t left = deadline - clock_now_ms();
    int rc = request(c, "hello", "", FRAME_HELLO, NULL, strs, NULL, 0, left > 0 ? left : 0, &rep);
    if (rc != KV_OK) {
        if (rc == KV_EREFUSED && strstr(c->err, "refused: "))
            snprintf(err, errlen, "kv: rendezvous daemon at %s refused the connection: %s", c->ep,
                     strstr(c->err, "refused: ") + 9);
        else
            snprintf(err, errlen, "%s", c->err);
        kv_close(c);
        return NULL;
    }
    frame_msg_free(&rep);
    return c;
}

kv_client *kv_connect_env(char *err, size_t errlen)
{
    char host[RDZV_MAX_NAME], why[400];
    int port;
    const char *ep = getenv("DTRUN_KV_ENDPOINT");
    if (ep && *ep) {
        if (rdzv_endpoint_parse(ep, KV_DEFAULT_PORT, host, sizeof host, &port, why, sizeof why) != 0) {
            snprintf(err, errlen, "kv: DTRUN_KV_ENDPOINT: %s", why);
            return NULL;
        }
    } else {
        const char *a = getenv("MASTER_ADDR"), *p = getenv("MASTER_PORT");
        if (!a || !*a || !p || !*p) {
            snprintf(err, errlen, "kv: neither DTRUN_KV_ENDPOINT nor MASTER_ADDR and MASTER_PORT are set "
                                  "(is this process started by dtrun?)");
            return NULL;
        }
        char *end;
        long v = strtol(p, &end, 10);
        if (*end || v <= 0 || v > 65535) {
            snprintf(err, errlen, "kv: MASTER_PORT '%s' is not a port number 1-65535", p);
            return NULL;
        }
        if (strlen(a) >= sizeof host) {
            snprintf(err, errlen, "kv: MASTER_ADDR is longer than %zu bytes", sizeof host - 1);
            return NULL;
        }
        /* MASTER_ADDR may be an IPv6 address in brackets. */
        size_t al = strlen(a);
        if (a[0] == '[' && al > 2 && a[al - 1] == ']') snprintf(host, sizeof host, "%.*s", (int)(al - 2), a + 1);
        else snprintf(host, sizeof host, "%s", a);
        port = (int)v;
    }
    int timeout_ms = 60000;
    const char *t = getenv("DTRUN_KV_TIMEOUT");
    if (t && *t) {
        char *end;
        double secs = strtod(t, &end);
        if (*end || secs < 0 || secs > 86400) {
            snprintf(err, errlen, "kv: DTRUN_KV_TIMEOUT '%s' is not a number of seconds 0-86400", t);
            return NULL;
        }
        timeout_ms = (int)(secs * 1000);
    }
    const char *tok = getenv("DTRUN_RDZV_TOKEN");
    kv_client *c = kv_connect(host, port, tok ? tok : "", timeout_ms, err, errlen);
    if (!c) return NULL;
    const char *prefix = getenv("DTRUN_KV_PREFIX");
    if (kv_set_prefix(c, prefix) != KV_OK) {
        snprintf(err, errlen, "kv: DTRUN_KV_PREFIX: %s", c->err);
        kv_close(c);
        return NULL;
    }
    return c;
}

void kv_close(kv_client *c)
{
    if (!c) return;
    frame_sock_close(c->fs);
    free(c);
}

int kv_set(kv_client *c, const char *key, const void *value, size_t len)
{
    char k[KV_MAX_KEY + 1];
    int rc = full_key(c, "set", key, k);
    if (rc) return rc;
    if (len > KV_MAX_VALUE)
        return kv_fail(c, KV_EINVAL, "kv set '%s': value of %zu bytes exceeds %d", key, len, KV_MAX_VALUE);
    frame_str strs[2] = { FRAME_STR(k), { value ? value : "", (uint32_t)len } };
    frame_msg rep;
    rc = request(c, "set", key, FRAME_KV_SET, NULL, strs, NULL, 0, KV_IO_TIMEOUT_MS, &rep);
    if (rc == KV_OK) frame_msg_free(&rep);
    return rc;
}

int kv_set_str(kv_client *c, const char *key, const char *value)
{
    return kv_set(c, key, value, strlen(value));
}

static int copy_out(kv_client *c, const char *op, const char *key, const frame_str *v, void *buf, size_t *len)
{
    size_t cap = *len;
    *len = v->len;
    if (v->len > cap) {
        if (buf && cap) memcpy(buf, v->p, cap);
        return kv_fail(c, KV_ETOOSMALL, "kv %s '%s': value of %u bytes does not fit the %zu-byte buffer", op, key,
                       v->len, cap);
    }
    if (buf && v->len) memcpy(buf, v->p, v->len);
    return KV_OK;
}

int kv_get(kv_client *c, const char *key, void *buf, size_t *len, int timeout_ms)
{
    char k[KV_MAX_KEY + 1];
    int rc = full_key(c, "get", key, k);
    if (rc || (rc = check_timeout(c, "get", key, timeout_ms))) return rc;
    int64_t ints[1] = { timeout_ms };
    frame_str strs[1] = { FRAME_STR(k) };
    frame_msg rep;
    rc = request(c, "get", key, FRAME_KV_GET, ints, strs, NULL, 0, timeout_ms, &rep);
    if (rc != KV_OK) return rc;
    rc = copy_out(c, "get", key, &rep.s[REPLY_S_VALUE], buf, len);
    frame_msg_free(&rep);
    return rc;
}

int kv_get_str(kv_client *c, const char *key, char *buf, size_t buflen, int timeout_ms)
{
    if (!buflen) return kv_fail(c, KV_EINVAL, "kv get '%s': empty buffer", key);
    size_t len = buflen - 1;
    int rc = kv_get(c, key, buf, &len, timeout_ms);
    if (rc == KV_OK) buf[len] = '\0';
    else buf[0] = '\0';
    return rc;
}

int kv_wait(kv_client *c, const char *const *keys, int nkeys, int timeout_ms)
{
    if (nkeys < 0 || nkeys > FRAME_MAX_LIST)
        return kv_fail(c, KV_EINVAL, "kv wait: %d keys (0-%d allowed)", nkeys, FRAME_MAX_LIST);
    int rc = check_timeout(c, "wait", nkeys ? keys[0] : "", timeout_ms);
    if (rc) return rc;
    frame_str *list = calloc((size_t)(nkeys ? nkeys : 1), sizeof *list);
    char *store = malloc((size_t)(nkeys ? nkeys : 1) * (KV_MAX_KEY + 1));
    if (!list || !store) {
        free(list);
        free(store);
        return kv_fail(c, KV_EINVAL, "kv wait: out of memory");
    }
    for (int i = 0; i < nkeys && rc == KV_OK; i++) {
        char *k = store + (size_t)i * (KV_MAX_KEY + 1);
        rc = full_key(c, "wait", keys[i], k);
        list[i] = FRAME_STR(k);
    }
    if (rc == KV_OK) {
        int64_t ints[1] = { timeout_ms };
        frame_msg rep;
        char what[120];
        snprintf(what, sizeof what, "%s%s", nkeys ? keys[0] : "", nkeys > 1 ? ", …" : "");
        rc = request(c, "wait", what, FRAME_KV_WAIT, ints, NULL, list, (uint32_t)nkeys, timeout_ms, &rep);
        if (rc == KV_OK) frame_msg_free(&rep);
    }
    free(list);
    free(store);
    return rc;
}

int kv_add(kv_client *c, const char *key, int64_t delta, int64_t *result)
{
    char k[KV_MAX_KEY + 1];
    int rc = full_key(c, "add", key, k);
    if (rc) return rc;
    int64_t ints[1] = { delta };
    frame_str strs[1] = { FRAME_STR(k) };
    frame_msg rep;
    rc = request(c, "add", key, FRAME_KV_ADD, ints, strs, NULL, 0, KV_IO_TIMEOUT_MS, &rep);
    if (rc != KV_OK) return rc;
    if (result) *result = rep.i[REPLY_I_VALUE];
    frame_msg_free(&rep);
    return KV_OK;
}

int kv_cas(kv_client *c, const char *key, const void *expected, size_t expected_len, const void *desired,
           size_t desired_len, int *swapped, void *cur, size_t *cur_len)
{
    char k[KV_MAX_KEY + 1];
    int rc = full_key(c, "cas", key, k);
    if (rc) return rc;
    if ((expected && expected_len > KV_MAX_VALUE) || desired_len > KV_MAX_VALUE)
        return kv_fail(c, KV_EINVAL, "kv cas '%s': value larger than %d bytes", key, KV_MAX_VALUE);
    int64_t ints[1] = { expected == NULL };
    frame_str strs[3] = { FRAME_STR(k), { expected ? expected : "", expected ? (uint32_t)expected_len : 0 },
                          { desired ? desired : "", (uint32_t)desired_len } };
    frame_msg rep;
    rc = request(c, "cas", key, FRAME_KV_CAS, ints, strs, NULL, 0, KV_IO_TIMEOUT_MS, &rep);
    if (rc != KV_OK) return rc;
    if (swapped) *swapped = rep.i[REPLY_I_VALUE] != 0;
    if (cur_len) rc = copy_out(c, "cas", key, &rep.s[REPLY_S_VALUE], cur, cur_len);
    frame_msg_free(&rep);
    return rc;
}

int kv_delete(kv_client *c, const char *key)
{
    char k[KV_MAX_KEY + 1];
    int rc = full_key(c, "delete", key, k);
    if (rc) return rc;
    frame_str strs[1] = { FRAME_STR(k) };
    frame_msg rep;
    rc = request(c, "delete", key, FRAME_KV_DELETE, NULL, strs, NULL, 0, KV_IO_TIMEOUT_MS, &rep);
    if (rc == KV_OK) frame_msg_free(&rep);
    return rc;
}

int kv_barrier(kv_client *c, const char *name, int count, int timeout_ms)
{
    char k[KV_MAX_KEY + 1];
    int rc = full_key(c, "barrier", name, k);
    if (rc || (rc = check_timeout(c, "barrier", name, timeout_ms))) return rc;
    if (count < 1) return kv_fail(c, KV_EINVAL, "kv barrier '%s': count %d must be >= 1", name, count);
    int64_t ints[2] = { count, timeout_ms };
    frame_str strs[1] = { FRAME_STR(k) };
    frame_msg rep;
    rc = request(c, "barrier", name, FRAME_KV_BARRIER, ints, strs, NULL, 0, timeout_ms, &rep);
    if (rc == KV_OK) frame_msg_free(&rep);
    return rc;
}
