/* agent_rdzv.c — the agent's side of the rendezvous: whether this node hosts the
 * daemon, joining a round (on the thread pool), the session's events, and the
 * exit barrier that keeps the hosting agent alive until every node is done.
 *
 * Who hosts. One node, no endpoint (or --standalone): a daemon on 127.0.0.1 and a
 * free port, with a random token. Otherwise every agent whose endpoint host is an
 * address of its own machine tries to listen on the endpoint port; the one that
 * gets it hosts, the others (other machines, or a second agent on the same one)
 * only join. rdzv_conf is_host=true/false forces the choice. */
#include "lib/launch/agent_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/launch/port_holder.h"
#include "lib/rdzv/kv.h"
#include "lib/rdzv/rdzv_probe.h"
#include "lib/util/errline.h"

#define EXIT_BARRIER "dtrun-agent-exit"
#define EXIT_BARRIER_MS 300000   /* torchrun's exit_barrier_timeout */
#define LEFT_KEY "dtrun-agent-left/"
#define HOST_TRIES 20            /* binds of the endpoint port a local agent tries */
#define LOCAL_PROBE_MS 2000      /* a daemon answers HELLO at once; anything else gets this long */

static int ms(double seconds)
{
    double v = seconds * 1000.0;
    return v > 2e9 ? 2000000000 : (int)v;
}

static int is_loopback_literal(const char *host)
{
    return !strcmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1");
}

/* Can this machine bind an address of host? Then the endpoint is one of ours.
 * *v6 says whether that address was IPv6 (to pick the wildcard to listen on). */
static int host_is_local(const char *host, int *v6)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) != 0) return 0;
    int local = 0;
    for (struct addrinfo *a = res; a && !local; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0) {
            local = 1;
            *v6 = a->ai_family == AF_INET6;
        }
        close(fd);
    }
    freeaddrinfo(res);
    return local;
}

/* Whether something listens on host:port now (a connection that is closed at
 * once: the daemon drops it without a line). Only asked of a host of this
 * machine, where a refusal comes at once. */
static int someone_listens(const char *host, int port)
{
    struct addrinfo hints, *res = NULL;
    char portstr[16];
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    snprintf(portstr, sizeof portstr, "%d", port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0) return 0;
    int up = 0;
    for (struct addrinfo *a = res; a && !up; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        up = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
        close(fd);
    }
    freeaddrinfo(res);
    return up;
}

/* A port nobody listens on now, for MASTER_PORT: PyTorch's rank 0 creates its
 * TCPStore there, so it must not be the daemon's port. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof a;
    int port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void random_token(char *out, size_t n)
{
    unsigned char raw[16];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        for (size_t i = 0; i < sizeof raw; i++) raw[i] = (unsigned char)(rand() ^ getpid() ^ (int)i);
    for (size_t i = 0; i < sizeof raw && 2 * i + 2 < n; i++) snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

static rdzv_server *start_server(agent *ag, const char *listen_host, int port, char *err, size_t errlen)
{
    const launch_opts *o = ag->o;
    rdzv_server_opts so;
    memset(&so, 0, sizeof so);
    so.host = listen_host;
    so.port = port;
    so.token = ag->token;
    so.run_id = o->rdzv_id;
    so.min_nodes = o->nnodes_min;
    so.max_nodes = o->nnodes_max;
    so.join_timeout_ms = ms(o->rdzv_conf.join_timeout);
    so.last_call_ms = o->nnodes_min == o->nnodes_max ? -1 : ms(o->rdzv_conf.last_call_timeout);
    so.hb_interval_ms = ms(o->rdzv_conf.keep_alive_interval);
    so.hb_timeout_ms = ms(o->rdzv_conf.heartbeat_timeout);
    /* Several nodes: the daemon's lines (joins, dead nodes) help whoever debugs. */
    so.log = o->nnodes_max > 1 ? stderr : NULL;
    return rdzv_server_start(&so, err, errlen);
}

/* The endpoint is on this machine and another process listens on its port:
 * a dtrun daemon (another agent of the job hosts it, or `dtrun rdzv`) answers
 * HELLO at once. Anything else holds the port for good, and no agent of this
 * job can ever meet there: say who, now, instead of waiting for the join
 * timeout. A dtrun that does not answer (stopped, or overloaded) is waited
 * for, as a remote endpoint is (rdzv_join names the silence). */
static int check_local_endpoint(agent *ag, char *err, size_t errlen)
{
    const launch_opts *o = ag->o;
    if (!someone_listens(o->rdzv_host, o->rdzv_port)) return 0; /* a daemon may still come (is_host=false) */
    char who[512];
    int p = rdzv_probe(o->rdzv_host, o->rdzv_port, ag->token, LOCAL_PROBE_MS, who, sizeof who);
    if (p == 1) return 0;
    port_holder h;
    char holder[160];
    port_holder_find(o->rdzv_port, &h);
    if (p < 0 && port_holder_is_dtrun(&h)) return 0;
    port_holder_describe(&h, holder, sizeof holder);
    if (p < 0)
        snprintf(who, sizeof who, "nothing answered a dtrun HELLO in %.1f s", LOCAL_PROBE_MS / 1000.0);
    return errline(err, errlen, "rendezvous at %s: %s; port %d of this machine is held by %s, not by a dtrun "
                   "daemon: the agents cannot meet there: give --rdzv-endpoint a port that nothing else uses, "
                   "or stop %s", ag->endpoint, who, o->rdzv_port, holder, holder);
}

int agent_rdzv_setup(agent *ag, char *err, size_t errlen)
{
    const launch_opts *o = ag->o;
    const char *env_token = getenv("DTRUN_RDZV_TOKEN");
    char why[512];
    int local_endpoint = 0;
    if (!o->rdzv_host[0]) {
        /* One node on its own: nobody else must find or join this daemon. */
        if (env_token && *env_token) snprintf(ag->token, sizeof ag->token, "%s", env_token);
        else random_token(ag->token, sizeof ag->token);
        ag->server = start_server(ag, "127.0.0.1", 0, why, sizeof why);
        if (!ag->server) {
            snprintf(err, errlen, "cannot start the rendezvous daemon: %s", why);
            return -1;
        }
        snprintf(ag->rdzv_host, sizeof ag->rdzv_host, "127.0.0.1");
        ag->rdzv_port = rdzv_server_port(ag->server);
    } else {
        /* Every node must present the same token: the user's, or the run id. */
        snprintf(ag->token, sizeof ag->token, "%s", env_token && *env_token ? env_token : o->rdzv_id);
        snprintf(ag->rdzv_host, sizeof ag->rdzv_host, "%s", o->rdzv_host);
        ag->rdzv_port = o->rdzv_port;
        int v6 = 0;
        int want = o->rdzv_conf.is_host;
        local_endpoint = host_is_local(o->rdzv_host, &v6);
        if (want != 0 && (want == 1 || local_endpoint)) {
            /* A loopback endpoint stays on loopback; a real address gets the
             * wildcard, because the host's own name may resolve to 127.0.1.1
             * here while the other nodes reach it on its network address. */
            const char *listen = is_loopback_literal(o->rdzv_host) ? o->rdzv_host : v6 ? "::" : "0.0.0.0";
            /* Two agents of one machine may both bind the port before either
             * listens, and then neither may listen: libuv binds with
             * SO_REUSEADDR, and Linux refuses listen() while another socket
             * holds the port that way (seen as both agents joining a daemon
             * nobody ran). So on "in use" with nobody listening yet, try again
             * after a random pause, which one of the two wins. */
            for (int tries = 0;; tries++) {
                ag->server = start_server(ag, listen, o->rdzv_port, why, sizeof why);
                if (ag->server || !strstr(why, "in use") || tries == HOST_TRIES - 1 ||
                    someone_listens(o->rdzv_host, o->rdzv_port))
                    break;
                uint32_t r = 0;
                if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r = (uint32_t)getpid() * 2654435761u;
                usleep(20000 + r % 100000); /* 20-120 ms */
            }
            if (!ag->server && want == 1) {
                snprintf(err, errlen, "--rdzv-conf is_host=true: %s", why);
                return -1;
            }
            if (!ag->server && !strstr(why, "in use"))
                fprintf(stderr, "dtrun: not hosting the rendezvous here (%s); joining %s:%d\n", why,
                        o->rdzv_host, o->rdzv_port);
        }
    }
    int v6 = strchr(ag->rdzv_host, ':') != NULL;
    snprintf(ag->endpoint, sizeof ag->endpoint, "%s%s%s:%d", v6 ? "[" : "", ag->rdzv_host,
             v6 ? "]" : "", ag->rdzv_port);
    if (!ag->server && local_endpoint && check_local_endpoint(ag, err, errlen) != 0) return -1;
    if (o->local_addr[0]) ag->node_addr = o->local_addr;
    else if (ag->server && o->rdzv_host[0] && !is_loopback_literal(o->rdzv_host))
        /* The daemon would see us on a loopback address; the others reach this
         * machine by the endpoint's name. */
        ag->node_addr = o->rdzv_host;
    else ag->node_addr = NULL;
    return 0;
}

/* Whether port can be bound on every address, IPv4 and IPv6, with SO_REUSEADDR:
 * false when some socket listens on it. */
static int port_bindable(int port)
{
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    a4.sin_family = AF_INET;
    a4.sin_port = htons((uint16_t)port);
    a6.sin6_family = AF_INET6;
    a6.sin6_port = htons((uint16_t)port);
    a6.sin6_addr = in6addr_any;
    const struct sockaddr *addrs[2] = {(const struct sockaddr *)&a4, (const struct sockaddr *)&a6};
    socklen_t lens[2] = {sizeof a4, sizeof a6};
    for (int i = 0; i < 2; i++) {
        int fd = socket(addrs[i]->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue; /* no IPv6 here */
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (i == 1) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        int busy = bind(fd, addrs[i], lens[i]) != 0 && errno == EADDRINUSE;
        close(fd);
        if (busy) return 0;
    }
    return 1;
}

int agent_check_master_port(agent *ag, char *err, size_t errlen)
{
    const launch_opts *o = ag->o;
    int v6 = 0;
    /* Rank 0 (on node 0, at MASTER_ADDR) creates the store: only its agent can look. */
    if (o->job_path || ag->res.node_rank != 0 || (o->master_addr[0] && !host_is_local(o->master_addr, &v6)))
        return 0;
    int port = o->master_port ? o->master_port : ag->res.master_port;
    /* Cheap first (a program launch's latency counts): a bind that a listener
     * refuses even with SO_REUSEADDR, as PyTorch's store binds; /proc only then. */
    if (port_bindable(port)) return 0;
    port_holder h;
    if (!port_holder_find(port, &h)) return 0;
    char holder[160];
    port_holder_describe(&h, holder, sizeof holder);
    if (o->master_port)
        return errline(err, errlen, "--master-port %d: %s listens on that port of this node, where rank 0 of the "
                       "program must create its store (MASTER_PORT; PyTorch's TCPStore for env://): give "
                       "--master-port a free port, or leave it out and dtrun picks one", port, holder);
    return errline(err, errlen, "MASTER_PORT %d, free when the rendezvous chose it, is now taken by %s on this "
                   "node, where rank 0 of the program must create its store; start again (a new free port is "
                   "chosen) or give --master-port a free port", port, holder);
}

static void join_work(uv_work_t *req)
{
    agent *ag = req->data;
    const launch_opts *o = ag->o;
    rdzv_node_info info;
    memset(&info, 0, sizeof info);
    info.name = NULL;
    info.addr = ag->node_addr;
    info.node_rank = o->node_rank;
    info.local_world_size = o->nproc;
    info.master_port = o->master_port ? o->master_port : free_port();
    info.attempt = ag->attempt;
    info.log = stderr;
    int timeout = ms(o->rdzv_conf.join_timeout + 10.0);
    ag->work_err[0] = 0;
    ag->session = rdzv_join(ag->endpoint, ag->token, &info, timeout, &ag->res, ag->work_err,
                            sizeof ag->work_err);
}

static void join_done(uv_work_t *req, int status)
{
    agent *ag = req->data;
    (void)status;
    ag->work_busy = 0;
    agent_rdzv_joined(ag);
}

void agent_rdzv_join_async(agent *ag)
{
    ag->work.data = ag;
    ag->work_busy = 1;
    uv_queue_work(&ag->loop, &ag->work, join_work, join_done);
}

static void on_session_event(uv_poll_t *p, int status, int events)
{
    agent *ag = p->data;
    (void)status;
    (void)events;
    rdzv_event ev;
    while (ag->session && rdzv_session_next_event(ag->session, &ev)) {
        if (ev.kind == RDZV_EV_NODE_WAITING) {
            if (ag->state == AGENT_RUNNING && ag->res.nnodes < ag->o->nnodes_max) {
                fprintf(stderr, "dtrun: %s; restarting the workers to admit it\n", ev.message);
                agent_stop_workers(ag, STOP_MEMBERSHIP, SIGTERM);
            }
            continue;
        }
        if (ag->state == AGENT_FINISHING) {
            /* Our workers are done; the failure is someone else's to handle. */
            fprintf(stderr, "dtrun: workers on this node finished; then: %s\n", ev.message);
            fflush(NULL);
            agent_rdzv_teardown(ag);
            agent_error_files_remove(ag);
            _exit(DT_EXIT_OK);
        }
        if (ag->state == AGENT_RUNNING) {
            fprintf(stderr, "dtrun: %s; stopping the workers on this node\n", ev.message);
            snprintf(ag->remote_reason, sizeof ag->remote_reason, "%s", ev.message);
            agent_stop_workers(ag, STOP_REMOTE, SIGTERM);
        }
    }
}

void agent_rdzv_watch(agent *ag)
{
    if (!ag->session || ag->rdzv_poll) return;
    ag->rdzv_poll = malloc(sizeof *ag->rdzv_poll);
    if (!ag->rdzv_poll) return;
    uv_poll_init(&ag->loop, ag->rdzv_poll, rdzv_session_fd(ag->session));
    ag->rdzv_poll->data = ag;
    uv_poll_start(ag->rdzv_poll, UV_READABLE, on_session_event);
}

static void free_handle(uv_handle_t *h) { free(h); }

void agent_rdzv_unwatch(agent *ag)
{
    if (!ag->rdzv_poll) return;
    uv_poll_stop(ag->rdzv_poll);
    uv_close((uv_handle_t *)ag->rdzv_poll, free_handle);
    ag->rdzv_poll = NULL;
}

/* Every agent waits at a KV barrier once its workers succeeded, so that the
 * hosting agent keeps the daemon (and the workers' KV store) up until the last
 * node is done; then each non-hosting agent says it left, and the host waits
 * for those words before it stops the daemon. */
static void exit_barrier_work(uv_work_t *req)
{
    agent *ag = req->data;
    char err[512];
    ag->work_rc = -1;
    ag->work_err[0] = 0;
    kv_client *kv = kv_connect(ag->rdzv_host, ag->rdzv_port, ag->token, 10000, err, sizeof err);
    if (!kv) { snprintf(ag->work_err, sizeof ag->work_err, "%s", err); return; }
    kv_set_prefix(kv, ag->res.kv_prefix);
    int rc = kv_barrier(kv, EXIT_BARRIER, ag->res.nnodes, EXIT_BARRIER_MS);
    if (rc != KV_OK) {
        snprintf(ag->work_err, sizeof ag->work_err, "%s", kv_errmsg(kv));
    } else if (!ag->server) {
        char key[64];
        snprintf(key, sizeof key, LEFT_KEY "%d", ag->res.node_rank);
        kv_set_str(kv, key, "1");
        ag->work_rc = 0;
    } else {
        int n = 0;
        char (*names)[32] = calloc((size_t)ag->res.nnodes, sizeof *names);
        const char **keys = calloc((size_t)ag->res.nnodes, sizeof *keys);
        if (names && keys) {
            for (int r = 0; r < ag->res.nnodes; r++) {
                if (r == ag->res.node_rank) continue;
                snprintf(names[n], sizeof names[n], LEFT_KEY "%d", r);
                keys[n] = names[n];
                n++;
            }
            rc = kv_wait(kv, keys, n, 10000);
            if (rc != KV_OK) snprintf(ag->work_err, sizeof ag->work_err, "%s", kv_errmsg(kv));
            else ag->work_rc = 0;
        }
        free(names);
        free(keys);
    }
    kv_close(kv);
}

static void exit_barrier_done(uv_work_t *req, int status)
{
    agent *ag = req->data;
    (void)status;
    ag->work_busy = 0;
    if (ag->work_rc != 0)
        fprintf(stderr, "dtrun: workers on this node finished, but not every node confirmed: %s\n",
                ag->work_err);
    agent_finish(ag, DT_EXIT_OK);
}

void agent_rdzv_exit_barrier_async(agent *ag)
{
    ag->work.data = ag;
    ag->work_busy = 1;
    uv_queue_work(&ag->loop, &ag->work, exit_barrier_work, exit_barrier_done);
}

void agent_rdzv_teardown(agent *ag)
{
    agent_rdzv_unwatch(ag);
    if (ag->session) {
        rdzv_session_close(ag->session, ag->exit_code == 0 && ag->state == AGENT_DONE);
        ag->session = NULL;
    }
    if (ag->server) {
        rdzv_server_stop(ag->server);
        ag->server = NULL;
    }
}
