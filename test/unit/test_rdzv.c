/* test_rdzv.c — the rendezvous daemon (in-process, on its libuv thread) with
 * agents and KV clients on threads of this process: rounds, ranks, timeouts,
 * tokens, bad clients, heartbeats, re-rendezvous and every KV operation. */
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/rdzv/frame.h"
#include "lib/rdzv/frame_sock.h"
#include "lib/rdzv/kv.h"
#include "lib/rdzv/rdzv.h"
#include "test/unit/check.h"

#define TOKEN "job-42"

static rdzv_server *start(int min, int max, int last_call_ms, int join_ms, int hb_int, int hb_to, char *ep)
{
    rdzv_server_opts o = { .host = "127.0.0.1", .port = 0, .token = TOKEN, .min_nodes = min, .max_nodes = max,
                           .join_timeout_ms = join_ms, .last_call_ms = last_call_ms, .hb_interval_ms = hb_int,
                           .hb_timeout_ms = hb_to, .log = stderr };
    char err[512];
    rdzv_server *s = rdzv_server_start(&o, err, sizeof err);
    if (!s) { CHECK(0, "server starts: %s", err); exit(1); }
    sprintf(ep, "127.0.0.1:%d", rdzv_server_port(s));
    return s;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------ agents */

typedef struct {
    const char *ep, *token;
    char name[32];
    rdzv_node_info info;
    int timeout_ms, delay_ms;
    rdzv_result res;
    rdzv_session *s;
    char err[1024];
    int64_t elapsed_ms;
} agent;

static void *agent_main(void *arg)
{
    agent *a = arg;
    if (a->delay_ms) sleep_ms(a->delay_ms);
    a->info.name = a->name;
    int64_t t0 = clock_now_ms();
    a->s = rdzv_join(a->ep, a->token, &a->info, a->timeout_ms, &a->res, a->err, sizeof a->err);
    a->elapsed_ms = clock_now_ms() - t0;
    return NULL;
}

static void run_agents(agent *ag, int n)
{
    pthread_t th[16];
    for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, agent_main, &ag[i]);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

static void agent_init(agent *a, const char *ep, const char *name, int hint, int lw, int timeout_ms)
{
    memset(a, 0, sizeof *a);
    a->ep = ep;
    a->token = TOKEN;
    snprintf(a->name, sizeof a->name, "%s", name);
    a->info.node_rank = hint;
    a->info.local_world_size = lw;
    a->timeout_ms = timeout_ms;
}

/* Waits up to timeout_ms for an event on the session. */
static int wait_event(rdzv_session *s, rdzv_event *ev, int timeout_ms)
{
    struct pollfd p = { rdzv_session_fd(s), POLLIN, 0 };
    if (poll(&p, 1, timeout_ms) <= 0) return 0;
    return rdzv_session_next_event(s, ev);
}

static void test_three_nodes(void)
{
    char ep[64];
    rdzv_server *srv = start(3, 3, 0, 5000, 0, 0, ep);
    agent ag[3];
    agent_init(&ag[0], ep, "nodeA", -1, 2, 5000);
    agent_init(&ag[1], ep, "nodeB", -1, 3, 5000);
    agent_init(&ag[2], ep, "nodeC", -1, 4, 5000);
    ag[0].info.master_port = 31111;
    ag[1].info.master_port = 31112;
    ag[2].info.master_port = 31113;
    run_agents(ag, 3);
    int ok = 1, seen = 0;
    for (int i = 0; i < 3; i++) {
        if (!ag[i].s) { CHECK(0, "agent %d joined: %s", i, ag[i].err); ok = 0; continue; }
        seen |= 1 << ag[i].res.node_rank;
    }
    if (ok) {
        int expect_off[3];
        for (int i = 0; i < 3; i++) { /* offset = sum of lw of lower ranks */
            expect_off[i] = 0;
            for (int j = 0; j < 3; j++)
                if (ag[j].res.node_rank < ag[i].res.node_rank) expect_off[i] += ag[j].info.local_world_size;
        }
        int consistent = 1;
        for (int i = 0; i < 3; i++) {
            rdzv_result *r = &ag[i].res;
            consistent &= r->nnodes == 3 && r->world_size == 9 && r->rank_offset == expect_off[i] &&
                          r->round == ag[0].res.round && r->master_port == ag[0].res.master_port &&
                          !strcmp(r->kv_prefix, ag[0].res.kv_prefix) && !strcmp(r->master_addr, "127.0.0.1") &&
                          !strcmp(r->run_id, TOKEN);
        }
        CHECK(seen == 7 && consistent, "3 nodes: node ranks a permutation of 0-2, offsets, world 9, same round/master/prefix");
        int m0 = ag[0].res.node_rank == 0 ? 31111 : ag[1].res.node_rank == 0 ? 31112 : 31113;
        CHECK(ag[0].res.master_port == m0, "MASTER_PORT is the one node rank 0 offered (%d)", m0);
        CHECK(ag[0].res.round == 0 && !strcmp(ag[0].res.kv_prefix, "round0/"), "first round is 0, prefix round0/");
    }
    for (int i = 0; i < 3; i++) rdzv_session_close(ag[i].s, 1);
    rdzv_server_stop(srv);
}

static void test_node_rank_hints(void)
{
    char ep[64];
    rdzv_server *srv = start(3, 3, 0, 5000, 0, 0, ep);
    agent ag[3];
    agent_init(&ag[0], ep, "h2", 2, 1, 5000);
    agent_init(&ag[1], ep, "h0", 0, 5, 5000);
    agent_init(&ag[2], ep, "any", -1, 7, 5000);
    ag[1].delay_ms = 50;
    ag[2].delay_ms = 100;
    run_agents(ag, 3);
    CHECK(ag[0].s && ag[1].s && ag[2].s, "hinted round closes: %s %s %s", ag[0].err, ag[1].err, ag[2].err);
    if (ag[0].s && ag[1].s && ag[2].s)
        CHECK(ag[0].res.node_rank == 2 && ag[1].res.node_rank == 0 && ag[2].res.node_rank == 1 &&
              ag[1].res.rank_offset == 0 && ag[2].res.rank_offset == 5 && ag[0].res.rank_offset == 12,
              "--node-rank honoured, the unhinted node takes the free rank; offsets 0,5,12 (got %d %d %d)",
              ag[1].res.rank_offset, ag[2].res.rank_offset, ag[0].res.rank_offset);
    for (int i = 0; i < 3; i++) rdzv_session_close(ag[i].s, 1);
    rdzv_server_stop(srv);

    /* A conflict and an out-of-range rank are refused with a clear line. */
    srv = start(2, 2, 0, 3000, 0, 0, ep);
    agent_init(&ag[0], ep, "first", 1, 1, 3000);
    agent_init(&ag[1], ep, "second", 1, 1, 3000);
    agent_init(&ag[2], ep, "third", 5, 1, 3000);
    ag[1].delay_ms = 100;
    pthread_t th;
    pthread_create(&th, NULL, agent_main, &ag[0]);
    agent_main(&ag[1]);
    agent_main(&ag[2]);
    CHECK(!ag[1].s && strstr(ag[1].err, "node rank 1 already taken by first"), "conflict refused: %s", ag[1].err);
    CHECK(!ag[2].s && strstr(ag[2].err, "node rank 5") && strstr(ag[2].err, "2 nodes at most"),
          "out of range refused: %s", ag[2].err);
    agent late;
    agent_init(&late, ep, "late", -1, 1, 3000);
    agent_main(&late);
    pthread_join(th, NULL);
    CHECK(late.s && ag[0].s && ag[0].res.node_rank == 1 && late.res.node_rank == 0,
          "the daemon goes on: the next joiner completes the round (%s)", late.err);
    rdzv_session_close(late.s, 1);
    rdzv_session_close(ag[0].s, 1);
    rdzv_server_stop(srv);
}

static void test_last_call_and_timeout(void)
{
    char ep[64];
    rdzv_server *srv = start(2, 4, 300, 5000, 0, 0, ep);
    agent ag[3];
    agent_init(&ag[0], ep, "a", -1, 1, 5000);
    agent_init(&ag[1], ep, "b", -1, 1, 5000);
    run_agents(ag, 2);
    CHECK(ag[0].s && ag[1].s && ag[0].res.nnodes == 2, "2:4 closes with 2 nodes after the last call (%s)", ag[0].err);
    CHECK(ag[0].elapsed_ms >= 250 && ag[0].elapsed_ms < 2000, "… not before the last-call timeout (%lld ms)",
          (long long)ag[0].elapsed_ms);
    rdzv_session_close(ag[0].s, 1);
    rdzv_session_close(ag[1].s, 1);
    rdzv_server_stop(srv);

    srv = start(3, 3, 0, 0, 0, 0, ep);
    agent_init(&ag[0], ep, "nodeA", -1, 1, 600);
    agent_init(&ag[1], ep, "nodeB", -1, 1, 600);
    ag[1].delay_ms = 50;
    run_agents(ag, 2);
    CHECK(!ag[0].s && strstr(ag[0].err, ": timed out after 0.6 s: 2 of min 3 nodes joined (nodeA, nodeB); 1 missing"),
          "join timeout names who joined and how many are missing: %s", ag[0].err);
    CHECK(!ag[1].s && strstr(ag[1].err, "(nodeA, nodeB); 1 missing"), "every waiting node gets it: %s", ag[1].err);
    CHECK(ag[0].elapsed_ms < 1500, "the daemon's message comes at its timeout (%lld ms)", (long long)ag[0].elapsed_ms);
    rdzv_server_stop(srv);
}

/* Raw client: sends bytes, returns what the daemon answered (ERROR reason) or "". */
static void raw_exchange(const char *ep, const void *bytes, size_t len, char *out, size_t outlen)
{
    char err[512];
    int port = atoi(strchr(ep, ':') + 1);
    out[0] = '\0';
    int fd = frame_connect("127.0.0.1", port, clock_now_ms() + 2000, err, sizeof err);
    if (fd < 0) { snprintf(out, outlen, "connect: %s", err); return; }
    frame_sock *fs = frame_sock_new(fd);
    frame_buf b = { (uint8_t *)bytes, len, len };
    frame_sock_send(fs, &b, clock_now_ms() + 2000, err, sizeof err);
    frame_msg m;
    int rc = frame_sock_recv(fs, &m, clock_now_ms() + 2000, err, sizeof err);
    if (rc == 1) {
        snprintf(out, outlen, "%s: %s", frame_type_name(m.type), m.type == FRAME_ERROR ? m.s[0].p : "");
        frame_msg_free(&m);
        rc = frame_sock_recv(fs, &m, clock_now_ms() + 2000, err, sizeof err);
        if (rc == 1) frame_msg_free(&m);
        if (rc < 0) strncat(out, " (closed)", outlen - strlen(out) - 1);
    } else {
        snprintf(out, outlen, rc == 0 ? "timeout" : "closed: %s", err);
    }
    frame_sock_close(fs);
}

static void test_bad_clients(void)
{
    char ep[64], out[600], err[600];
    rdzv_server *srv = start(1, 1, 0, 5000, 0, 0, ep);
    agent a;
    agent_init(&a, ep, "intruder", -1, 1, 2000);
    a.token = "wrong";
    agent_main(&a);
    CHECK(!a.s && strstr(a.err, "wrong job token"), "JOIN with a wrong token refused: %s", a.err);
    char host[64];
    int port;
    rdzv_endpoint_parse(ep, 0, host, sizeof host, &port, err, sizeof err);
    kv_client *bad = kv_connect(host, port, "nope", 2000, err, sizeof err);
    CHECK(!bad && strstr(err, "refused the connection: wrong job token"), "KV hello with a wrong token refused: %s", err);

    raw_exchange(ep, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27, out, sizeof out);
    CHECK(strstr(out, "bad magic") && strstr(out, "(closed)"), "HTTP garbage: ERROR then closed: %s", out);
    uint8_t big[9] = { 'D', 'T', 'R', FRAME_VERSION, FRAME_KV_SET, 0x7f, 0xff, 0xff, 0xff };
    raw_exchange(ep, big, sizeof big, out, sizeof out);
    CHECK(strstr(out, "exceeds") && strstr(out, "(closed)"), "oversized frame: dropped: %s", out);
    uint8_t mid[9] = { 'D', 'T', 'R', FRAME_VERSION, FRAME_HELLO, 0, 1, 0x86, 0xa0 }; /* 100000 bytes */
    raw_exchange(ep, mid, sizeof mid, out, sizeof out);
    CHECK(strstr(out, "exceeds the 16384-byte limit") && strstr(out, "(closed)"),
          "a stranger cannot send a 100 kB frame before showing the token: %s", out);
    uint8_t ver[13] = { 'D', 'T', 'R', 7, FRAME_HEARTBEAT, 0, 0, 0, 4 };
    raw_exchange(ep, ver, sizeof ver, out, sizeof out);
    CHECK(strstr(out, "protocol version 7"), "wrong version: dropped: %s", out);
    frame_buf b = { 0 };
    frame_str k[2] = { FRAME_STR("k"), FRAME_STR("v") };
    frame_encode(&b, FRAME_KV_SET, NULL, k, NULL, 0);
    raw_exchange(ep, b.data, b.len, out, sizeof out);
    CHECK(strstr(out, "expected HELLO or JOIN first"), "KV request before hello: refused: %s", out);
    frame_buf_free(&b);
    frame_str h[2] = { FRAME_STR(TOKEN), FRAME_STR("x") };
    frame_encode(&b, FRAME_HELLO, NULL, h, NULL, 0);
    uint8_t trunc[6] = { 'D', 'T', 'R', FRAME_VERSION, FRAME_KV_GET, 0 }; /* then hang up mid-header */
    memcpy(b.data + b.len, trunc, 0);
    raw_exchange(ep, trunc, sizeof trunc, out, sizeof out);
    CHECK(strstr(out, "closed") || strstr(out, "timeout"), "truncated header then silence: no crash (%s)", out);
    frame_buf_free(&b);

    kv_client *good = kv_connect(host, port, TOKEN, 2000, err, sizeof err);
    CHECK(good != NULL, "a good client is still served after all that: %s", good ? "" : err);
    if (good) {
        char v[16];
        CHECK(kv_set_str(good, "k", "v") == 0 && kv_get_str(good, "k", v, sizeof v, 0) == 0 && !strcmp(v, "v"),
              "… and its set/get work");
        kv_close(good);
    }
    agent ok1;
    agent_init(&ok1, ep, "good", -1, 1, 2000);
    agent_main(&ok1);
    CHECK(ok1.s != NULL, "… and a good agent still joins: %s", ok1.err);
    rdzv_session_close(ok1.s, 1);
    rdzv_server_stop(srv);
}

/* A fake agent that joins and then never heartbeats (a hung node). */
static void *silent_agent(void *arg)
{
    const char *ep = arg;
    char err[512];
    int port = atoi(strchr(ep, ':') + 1);
    int fd = frame_connect("127.0.0.1", port, clock_now_ms() + 2000, err, sizeof err);
    if (fd < 0) return NULL;
    frame_sock *fs = frame_sock_new(fd);
    frame_buf b = { 0 };
    int64_t ints[6] = { -1, 1, 1, 0, 0, 5000 };
    frame_str strs[3] = { FRAME_STR(TOKEN), FRAME_STR("hung"), FRAME_STR("") };
    frame_encode(&b, FRAME_JOIN, ints, strs, NULL, 0);
    frame_sock_send(fs, &b, clock_now_ms() + 2000, err, sizeof err);
    frame_buf_free(&b);
    frame_msg m;
    if (frame_sock_recv(fs, &m, clock_now_ms() + 5000, err, sizeof err) == 1) frame_msg_free(&m);
    /* Stay silent until the daemon gives up on us and closes. */
    frame_sock_recv(fs, &m, clock_now_ms() + 5000, err, sizeof err);
    frame_sock_close(fs);
    return NULL;
}

static void test_liveness(void)
{
    char ep[64], err[600], host[64];
    int port;
    rdzv_event ev;
    rdzv_server *srv = start(2, 2, 0, 5000, 100, 500, ep);
    rdzv_endpoint_parse(ep, 0, host, sizeof host, &port, err, sizeof err);

    /* A node that stops heartbeating is declared dead; the other hears of it. */
    pthread_t th;
    pthread_create(&th, NULL, silent_agent, ep);
    agent a;
    agent_init(&a, ep, "alive", -1, 1, 3000);
    agent_main(&a);
    CHECK(a.s != NULL, "joined with a silent peer: %s", a.err);
    if (a.s) {
        int64_t t0 = clock_now_ms();
        int got = wait_event(a.s, &ev, 3000);
        int64_t dt = clock_now_ms() - t0;
        CHECK(got && ev.kind == RDZV_EV_NODE_DEAD && strstr(ev.message, "node hung (rank") &&
              strstr(ev.message, "dead: no heartbeat for"), "silent node declared dead: %s", got ? ev.message : "no event");
        CHECK(dt < 1500, "… within the heartbeat timeout (%lld ms after the round closed)", (long long)dt);
        CHECK(wait_event(a.s, &ev, 1500) == 0, "the live agent's own heartbeats keep it alive (no DAEMON_LOST)");
        rdzv_session_close(a.s, 0);
    }
    pthread_join(th, NULL);

    /* Re-rendezvous; an agent that drops its connection is dead at once. Keys of
     * the failed round are gone. */
    agent ag[2];
    agent_init(&ag[0], ep, "x", -1, 1, 3000);
    agent_init(&ag[1], ep, "y", -1, 1, 3000);
    ag[0].info.attempt = ag[1].info.attempt = 1;
    run_agents(ag, 2);
    CHECK(ag[0].s && ag[1].s && ag[0].res.round == 1 && !strcmp(ag[0].res.kv_prefix, "round1/"),
          "re-rendezvous forms round 1 with a new namespace (%s)", ag[0].err);
    if (ag[0].s && ag[1].s) {
        kv_client *kv = kv_connect(host, port, TOKEN, 2000, err, sizeof err);
        kv_set_prefix(kv, ag[0].res.kv_prefix);
        kv_set_str(kv, "endpoint", "10.0.0.1:5000");
        rdzv_session *x = ag[0].s, *y = ag[1].s;
        int yrank = ag[1].res.node_rank;
        rdzv_session_close(y, 0);
        int got = wait_event(x, &ev, 2000);
        char want[64];
        snprintf(want, sizeof want, "node y (rank %d) dead: connection lost", yrank);
        CHECK(got && ev.kind == RDZV_EV_NODE_DEAD && strstr(ev.message, want), "dropped agent reported: %s",
              got ? ev.message : "no event");
        char v[64];
        CHECK(kv_get_str(kv, "endpoint", v, sizeof v, 0) == KV_ENOTFOUND, "the failed round's keys are deleted");
        kv_close(kv);
        rdzv_session_close(x, 0);
    }

    /* A reported failure reaches the others with its reason; clean leaves are silent. */
    agent_init(&ag[0], ep, "p", -1, 1, 3000);
    agent_init(&ag[1], ep, "q", -1, 1, 3000);
    run_agents(ag, 2);
    if (ag[0].s && ag[1].s) {
        CHECK(ag[0].res.round == 2, "round 2 (%d)", ag[0].res.round);
        rdzv_session_report_failure(ag[0].s, "worker rank 0 exited with status 7");
        int got = wait_event(ag[1].s, &ev, 2000);
        CHECK(got && ev.kind == RDZV_EV_ROUND_FAILED && strstr(ev.message, "node p (rank") &&
              strstr(ev.message, "worker rank 0 exited with status 7"), "reported failure: %s", got ? ev.message : "none");
        rdzv_session_close(ag[0].s, 0);
        rdzv_session_close(ag[1].s, 0);
    } else {
        CHECK(0, "round 2 formed: %s %s", ag[0].err, ag[1].err);
    }
    run_agents(ag, 2);
    if (ag[0].s && ag[1].s) {
        rdzv_session_close(ag[0].s, 1);
        int got = wait_event(ag[1].s, &ev, 800);
        CHECK(!got, "a clean leave is not a death (%s)", got ? ev.message : "");
        rdzv_session_close(ag[1].s, 1);
    }

    /* The daemon going away is an event too. */
    run_agents(ag, 2);
    if (ag[0].s) {
        rdzv_server_stop(srv);
        srv = NULL;
        int got = wait_event(ag[0].s, &ev, 2000);
        CHECK(got && ev.kind == RDZV_EV_DAEMON_LOST && strstr(ev.message, "lost the rendezvous daemon at 127.0.0.1:"),
              "daemon stop seen by agents: %s", got ? ev.message : "none");
    }
    rdzv_session_close(ag[0].s, 0);
    rdzv_session_close(ag[1].s, 0);
    rdzv_server_stop(srv);
}

/* Elastic scale-up: a node that arrives while a round runs waits, the running
 * agents hear of it, restart, and the next round has everyone. */
static void test_elastic(void)
{
    char ep[64];
    rdzv_event ev;
    rdzv_server *srv = start(1, 2, 300, 5000, 0, 0, ep);
    agent a, b;
    agent_init(&a, ep, "first", -1, 1, 3000);
    agent_main(&a);
    CHECK(a.s && a.res.nnodes == 1, "1:2 with one node closes after the last call (%s)", a.err);
    if (!a.s) { rdzv_server_stop(srv); return; }
    agent_init(&b, ep, "newcomer", -1, 1, 3000);
    pthread_t th;
    pthread_create(&th, NULL, agent_main, &b);
    int got = wait_event(a.s, &ev, 2000);
    CHECK(got && ev.kind == RDZV_EV_NODE_WAITING && strstr(ev.message, "newcomer"), "running agent told: %s",
          got ? ev.message : "none");
    sleep_ms(400);              /* longer than the last call: the newcomer alone could close a round */
    rdzv_session_close(a.s, 0); /* restart to admit it */
    sleep_ms(100);              /* the rejoin comes a little later */
    agent_init(&a, ep, "first", -1, 1, 3000);
    a.info.attempt = 1;
    agent_main(&a);
    pthread_join(th, NULL);
    CHECK(a.s && b.s && a.res.nnodes == 2 && b.res.nnodes == 2 && a.res.round == b.res.round,
          "the next round has both nodes, not the newcomer alone (%s %s)", a.err, b.err);
    rdzv_session_close(a.s, 1);
    rdzv_session_close(b.s, 1);
    rdzv_server_stop(srv);
}

/* ------------------------------------------------------------------ KV */

typedef struct {
    const char *host;
    int port, id, n;
    int64_t results[200];
    int rc;
    char err[600];
} kv_worker;

static void *adder(void *arg)
{
    kv_worker *w = arg;
    kv_client *c = kv_connect(w->host, w->port, TOKEN, 2000, w->err, sizeof w->err);
    if (!c) { w->rc = -1; return NULL; }
    for (int i = 0; i < w->n && w->rc == 0; i++) w->rc = kv_add(c, "counter", 1, &w->results[i]);
    kv_close(c);
    return NULL;
}

static void *barrier_worker(void *arg)
{
    kv_worker *w = arg;
    kv_client *c = kv_connect(w->host, w->port, TOKEN, 2000, w->err, sizeof w->err);
    if (!c) { w->rc = -1; return NULL; }
    kv_set_prefix(c, "round9/");
    w->rc = kv_barrier(c, "init", w->n, 3000);
    if (w->rc == 0) w->rc = kv_barrier(c, "init", w->n, 3000); /* a name is reusable */
    if (w->rc) snprintf(w->err, sizeof w->err, "%s", kv_errmsg(c));
    kv_close(c);
    return NULL;
}

static void *late_setter(void *arg)
{
    kv_worker *w = arg;
    sleep_ms(150);
    kv_client *c = kv_connect(w->host, w->port, TOKEN, 2000, w->err, sizeof w->err);
    if (!c) return NULL;
    kv_set_str(c, "late", "here");
    kv_set_str(c, "w2", "x");
    kv_close(c);
    return NULL;
}

static void test_kv(void)
{
    char ep[64], err[600], host[64], v[64];
    int port;
    rdzv_server *srv = start(1, 1, 0, 5000, 0, 0, ep);
    rdzv_endpoint_parse(ep, 0, host, sizeof host, &port, err, sizeof err);
    kv_client *c = kv_connect(host, port, TOKEN, 2000, err, sizeof err);
    if (!c) { CHECK(0, "kv connects: %s", err); rdzv_server_stop(srv); return; }

    CHECK(kv_get_str(c, "nope", v, sizeof v, 0) == KV_ENOTFOUND, "get of an absent key, no wait: NOTFOUND");
    int64_t t0 = clock_now_ms();
    int rc = kv_get_str(c, "nope", v, sizeof v, 200);
    int64_t dt = clock_now_ms() - t0;
    CHECK(rc == KV_ETIMEDOUT && strstr(kv_errmsg(c), "kv get 'nope' at 127.0.0.1:") &&
          strstr(kv_errmsg(c), "timed out after 0.2 s") && dt >= 180 && dt < 1500,
          "get with timeout: ETIMEDOUT in %lld ms: %s", (long long)dt, kv_errmsg(c));
    CHECK(kv_set_str(c, "a", "1") == 0 && kv_get_str(c, "a", v, sizeof v, 100) == 0 && !strcmp(v, "1"),
          "the connection stays usable after a timeout");

    kv_worker lw = { host, port, 0, 0, { 0 }, 0, "" };
    pthread_t th;
    pthread_create(&th, NULL, late_setter, &lw);
    t0 = clock_now_ms();
    rc = kv_get_str(c, "late", v, sizeof v, 3000);
    CHECK(rc == 0 && !strcmp(v, "here") && clock_now_ms() - t0 >= 100, "blocking get wakes when another client sets");
    const char *keys[3] = { "a", "late", "w2" };
    CHECK(kv_wait(c, keys, 3, 2000) == 0, "wait for present keys");
    pthread_join(th, NULL);
    const char *missing[3] = { "a", "m1", "m2" };
    rc = kv_wait(c, missing, 3, 200);
    CHECK(rc == KV_ETIMEDOUT && strstr(kv_errmsg(c), "missing keys: 'm1' 'm2'"), "wait timeout names missing keys: %s",
          kv_errmsg(c));

    /* add from several clients at once: every value handed out exactly once. */
    kv_worker ws[4];
    pthread_t wt[4];
    for (int i = 0; i < 4; i++) {
        ws[i] = (kv_worker){ host, port, i, 200, { 0 }, 0, "" };
        pthread_create(&wt[i], NULL, adder, &ws[i]);
    }
    static char seen[801];
    memset(seen, 0, sizeof seen);
    int dup = 0, bad = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(wt[i], NULL);
        bad |= ws[i].rc;
        for (int k = 0; k < 200; k++) {
            int64_t r = ws[i].results[k];
            if (r < 1 || r > 800 || seen[r]++) dup++;
        }
    }
    CHECK(!bad && !dup && kv_get_str(c, "counter", v, sizeof v, 0) == 0 && !strcmp(v, "800"),
          "add is atomic: 4 x 200 adds give 1..800 once each, final %s", v);
    CHECK(kv_add(c, "a", -5, NULL) == 0 && kv_get_str(c, "a", v, sizeof v, 0) == 0 && !strcmp(v, "-4"), "add -5 to 1");
    kv_set_str(c, "text", "abc");
    CHECK(kv_add(c, "text", 1, NULL) == KV_EINVAL && strstr(kv_errmsg(c), "not an integer"), "add to text refused");

    int swapped = -1;
    char cur[32];
    size_t cl = sizeof cur;
    CHECK(kv_cas(c, "leader", NULL, 0, "r0", 2, &swapped, cur, &cl) == 0 && swapped == 1 && cl == 2,
          "cas on an absent key (expected NULL) swaps");
    cl = sizeof cur;
    CHECK(kv_cas(c, "leader", NULL, 0, "r1", 2, &swapped, cur, &cl) == 0 && swapped == 0 && cl == 2 &&
          !memcmp(cur, "r0", 2), "second cas loses and sees r0");
    cl = sizeof cur;
    CHECK(kv_cas(c, "leader", "r0", 2, "r5", 2, &swapped, cur, &cl) == 0 && swapped == 1 && !memcmp(cur, "r5", 2),
          "cas with the right expected value swaps");
    CHECK(kv_delete(c, "leader") == 0 && kv_delete(c, "leader") == KV_ENOTFOUND, "delete, then NOTFOUND");

    /* Binary and large values; limits. */
    size_t big = KV_MAX_VALUE;
    uint8_t *buf = malloc(big), *back = malloc(big);
    for (size_t i = 0; i < big; i++) buf[i] = (uint8_t)(i * 131 + 7);
    buf[0] = 0;
    size_t bl = big;
    CHECK(kv_set(c, "blob", buf, big) == 0 && kv_get(c, "blob", back, &bl, 0) == 0 && bl == big &&
          !memcmp(buf, back, big), "1 MiB binary value round-trips");
    CHECK(kv_set(c, "blob", buf, big + 1) == KV_EINVAL, "1 MiB + 1 refused by the client");
    bl = 10;
    CHECK(kv_get(c, "blob", back, &bl, 0) == KV_ETOOSMALL && bl == big, "small buffer: ETOOSMALL with the size");
    free(buf);
    free(back);
    char longkey[KV_MAX_KEY + 2];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = 0;
    CHECK(kv_set_str(c, longkey, "x") == KV_EINVAL, "key over 1024 bytes refused");
    CHECK(kv_set_str(c, "", "x") == KV_EINVAL, "empty key refused");

    /* Namespaces. */
    kv_set_prefix(c, "round1/");
    CHECK(kv_set_str(c, "id", "one") == 0, "set with prefix round1/");
    kv_set_prefix(c, "");
    CHECK(kv_get_str(c, "round1/id", v, sizeof v, 0) == 0 && !strcmp(v, "one"), "stored as round1/id");
    setenv("DTRUN_KV_ENDPOINT", ep, 1);
    setenv("DTRUN_RDZV_TOKEN", TOKEN, 1);
    setenv("DTRUN_KV_PREFIX", "round1/", 1);
    kv_client *ec = kv_connect_env(err, sizeof err);
    CHECK(ec && kv_get_str(ec, "id", v, sizeof v, 0) == 0 && !strcmp(v, "one"),
          "kv_connect_env uses DTRUN_KV_ENDPOINT, token and prefix: %s", ec ? kv_errmsg(ec) : err);
    kv_close(ec);
    unsetenv("DTRUN_KV_ENDPOINT");
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    setenv("MASTER_PORT", ps, 1);
    ec = kv_connect_env(err, sizeof err);
    CHECK(ec != NULL, "kv_connect_env falls back to MASTER_ADDR/MASTER_PORT: %s", ec ? "" : err);
    kv_close(ec);
    setenv("MASTER_PORT", "http", 1);
    ec = kv_connect_env(err, sizeof err);
    CHECK(!ec && strstr(err, "MASTER_PORT 'http'"), "bad MASTER_PORT: %s", err);
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    ec = kv_connect_env(err, sizeof err);
    CHECK(!ec && strstr(err, "is this process started by dtrun"), "no env: %s", err);

    /* Barrier: 5 participants twice; a short one times out and says how many came. */
    kv_worker bw[5];
    pthread_t bt[5];
    for (int i = 0; i < 5; i++) {
        bw[i] = (kv_worker){ host, port, i, 5, { 0 }, 0, "" };
        pthread_create(&bt[i], NULL, barrier_worker, &bw[i]);
    }
    int brc = 0;
    for (int i = 0; i < 5; i++) {
        pthread_join(bt[i], NULL);
        if (bw[i].rc) { brc = bw[i].rc; CHECK(0, "barrier participant %d: %s", i, bw[i].err); }
    }
    CHECK(brc == 0, "barrier of 5 released, twice with the same name");
    t0 = clock_now_ms();
    rc = kv_barrier(c, "lonely", 3, 300);
    CHECK(rc == KV_ETIMEDOUT && strstr(kv_errmsg(c), "timed out after 0.3 s: 1 of 3 arrived"),
          "barrier timeout says how many arrived: %s", kv_errmsg(c));
    CHECK(kv_barrier(c, "solo", 1, 100) == 0, "barrier of 1 returns at once");
    kv_close(c);
    rdzv_server_stop(srv);
}

static void test_connect_and_endpoints(void)
{
    char err[600], host[300];
    int port;
    /* Nothing listening: a clear error naming the endpoint, after retrying. */
    rdzv_server_opts o = { .host = "127.0.0.1", .port = 0, .token = TOKEN, .min_nodes = 1, .max_nodes = 1 };
    rdzv_server *s = rdzv_server_start(&o, err, sizeof err);
    int free_port = rdzv_server_port(s);
    rdzv_server_stop(s);
    int64_t t0 = clock_now_ms();
    kv_client *c = kv_connect("127.0.0.1", free_port, TOKEN, 300, err, sizeof err);
    int64_t dt = clock_now_ms() - t0;
    char want[64];
    snprintf(want, sizeof want, "at 127.0.0.1:%d: Connection refused (retried", free_port);
    CHECK(!c && strstr(err, want) && dt >= 250 && dt < 2000, "refused connect retried until the deadline: %s", err);
    c = kv_connect("no-such-host.invalid", 1234, TOKEN, 300, err, sizeof err);
    CHECK(!c && strstr(err, "cannot resolve host 'no-such-host.invalid'"), "unresolvable host: %s", err);

    /* A client that starts before the daemon: it connects once the daemon listens. */
    o.port = free_port;
    kv_worker w = { "127.0.0.1", free_port, 0, 1, { 0 }, 0, "" };
    pthread_t th;
    pthread_create(&th, NULL, adder, &w);
    sleep_ms(300);
    s = rdzv_server_start(&o, err, sizeof err);
    pthread_join(th, NULL);
    CHECK(s && w.rc == 0 && w.results[0] == 1, "a client started before the daemon gets through (%s)", w.err);
    rdzv_server *s2 = rdzv_server_start(&o, err, sizeof err);
    CHECK(!s2 && strstr(err, "cannot listen on 127.0.0.1:") && strstr(err, "address already in use"),
          "port clash: %s", err);
    rdzv_server_stop(s2);
    rdzv_server_stop(s);

    /* IPv6 in brackets, when the host has ::1. */
    o.host = "::1";
    o.port = 0;
    s = rdzv_server_start(&o, err, sizeof err);
    if (s) {
        char ep[64];
        snprintf(ep, sizeof ep, "[::1]:%d", rdzv_server_port(s));
        agent a;
        agent_init(&a, ep, "v6", -1, 1, 2000);
        agent_main(&a);
        CHECK(a.s && !strcmp(a.res.master_addr, "::1"), "IPv6 endpoint %s joins, master addr ::1 (%s)", ep, a.err);
        rdzv_session_close(a.s, 1);
        rdzv_server_stop(s);
    } else {
        printf("# IPv6 loopback unavailable, skipped: %s\n", err);
    }

    struct { const char *in; int ok; const char *host; int port; const char *err; } cases[] = {
        { "[::1]:29400", 1, "::1", 29400, NULL },
        { "[fe80::1%eth0]", 1, "fe80::1%eth0", 29400, NULL },
        { "node1", 1, "node1", 29400, NULL },
        { "10.0.0.1:80", 1, "10.0.0.1", 80, NULL },
        { "h:0", 1, "h", 0, NULL },
        { "::1", 0, NULL, 0, "needs brackets" },
        { "[::1", 0, NULL, 0, "without ']'" },
        { "[::1]x", 0, NULL, 0, "after ']'" },
        { "h:70000", 0, NULL, 0, "not a number 0-65535" },
        { "h:", 0, NULL, 0, "not a number" },
        { ":80", 0, NULL, 0, "empty host" },
        { "a b:1", 0, NULL, 0, "not allowed" },
        { "", 0, NULL, 0, "empty endpoint" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = rdzv_endpoint_parse(cases[i].in, 29400, host, sizeof host, &port, err, sizeof err);
        if (cases[i].ok)
            CHECK(rc == 0 && !strcmp(host, cases[i].host) && port == cases[i].port, "endpoint '%s' -> %s port %d",
                  cases[i].in, cases[i].host, cases[i].port);
        else
            CHECK(rc == -1 && strstr(err, cases[i].err), "endpoint '%s' refused: %s", cases[i].in, err);
    }
}

int main(void)
{
    test_connect_and_endpoints();
    test_three_nodes();
    test_node_rank_hints();
    test_last_call_and_timeout();
    test_bad_clients();
    test_liveness();
    test_elastic();
    test_kv();
    CHECK_DONE();
}
