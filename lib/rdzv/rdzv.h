/* rdzv.h — the rendezvous daemon (server) and its agent-side client.
 *
 * One daemon per job. It runs inside the agent of the endpoint host
 * (rdzv_server_start: its own thread and libuv loop) or standalone
 * (`dtrun rdzv --listen HOST:PORT`, lib/rdzv/rdzv_cmd.h). It serves two kinds of
 * clients on one port: agents that join rendezvous rounds (this header) and
 * workers that use the KV store (lib/rdzv/kv.h). Frames are lib/rdzv/frame.h.
 *
 * Rounds. Agents JOIN with the job token, their node name, an optional node rank
 * and their local world size. A round closes when max_nodes joined, or when at
 * least min_nodes joined and last_call_ms passed since the latest join. Then
 * every agent learns its node rank (the --node-rank it gave, else join order),
 * its rank offset (sum of the local world sizes of lower node ranks), the world
 * size, MASTER_ADDR/PORT and the round's KV namespace. If the join timeout
 * (counted from the first join of the round; see rdzv_join) passes first, every waiting agent
 * gets "rendezvous timed out after 30.0 s: 2 of min 3 nodes joined (nodeA,
 * nodeB); 1 missing" and the round starts over empty.
 *
 * Liveness. Agents in a closed round heartbeat (the session does it). A node
 * silent for the heartbeat timeout, or whose connection drops without a clean
 * leave, is declared dead; a node can also report a failure (its worker died).
 * Either way the round fails and every other agent of it gets an event: "node
 * nodeB (rank 1) dead: no heartbeat for 5.0 s". Agents then stop their workers
 * and either exit non-zero or JOIN again with attempt + 1; the rejoining agents
 * form the next round (a new round number and a new KV namespace; the failed
 * round's keys are deleted).
 *
 * Trust. The daemon never trusts a frame: bounded sizes, version and token
 * checked. A wrong token gets ERROR "wrong job token" and the connection is
 * closed; a malformed or oversized frame drops that client with one log line;
 * the daemon goes on serving everyone else.
 */
#ifndef DTRUN_RDZV_H
#define DTRUN_RDZV_H

#include <stddef.h>
#include <stdio.h>

#define RDZV_MAX_NAME   256   /* node names, hosts, tokens, run ids: bytes incl. NUL */
#define RDZV_MAX_NODES  4096

/* Defaults (the agent's --rdzv-conf may override; torchrun's names in brackets). */
#define RDZV_DEFAULT_JOIN_TIMEOUT_MS   600000  /* [join_timeout] 600 s */
#define RDZV_DEFAULT_LAST_CALL_MS       30000  /* [last_call_timeout] 30 s */
#define RDZV_DEFAULT_HB_INTERVAL_MS      1000
#define RDZV_DEFAULT_HB_TIMEOUT_MS       5000  /* silent this long = dead */

/* ---------------------------------------------------------------- server */

typedef struct {
    const char *host;      /* listen address: "127.0.0.1", "0.0.0.0", "::", a name; NULL = "0.0.0.0" */
    int port;              /* 0 = any free port (read it back with rdzv_server_port) */
    const char *token;     /* job token every JOIN / KV hello must carry; NULL = "" */
    const char *run_id;    /* TORCHELASTIC_RUN_ID handed to agents; NULL = token, or "none" */
    int min_nodes;         /* >= 1 */
    int max_nodes;         /* >= min_nodes; <= RDZV_MAX_NODES */
    int join_timeout_ms;   /* 0 = default */
    int last_call_ms;      /* 0 = default; -1 = close as soon as min_nodes joined */
    int hb_interval_ms;    /* told to agents; 0 = default */
    int hb_timeout_ms;     /* 0 = default */
    FILE *log;             /* one line per event ("dtrun rdzv: …"); NULL = silent */
} rdzv_server_opts;

typedef struct rdzv_server rdzv_server;

/* Binds and listens synchronously (so errors and the port are known on return),
 * then serves on its own thread. NULL on failure with one line in err
 * ("cannot listen on 127.0.0.1:29400: address already in use"). */
rdzv_server *rdzv_server_start(const rdzv_server_opts *opts, char *err, size_t errlen);

/* The bound port (the chosen one when opts.port was 0). */
int rdzv_server_port(const rdzv_server *s);

/* Stops serving, closes every connection (clients see the connection lost),
 * joins the thread and frees everything. Safe with NULL. */
void rdzv_server_stop(rdzv_server *s);

/* ---------------------------------------------------------------- client */

/* What an agent says about its node when it joins. */
typedef struct {
    const char *name;       /* node name for messages; NULL = gethostname() */
    const char *addr;       /* address other nodes reach this node at; NULL/"" = as the daemon sees it */
    int node_rank;          /* --node-rank, or -1 to be assigned in join order */
    int local_world_size;   /* workers on this node, >= 1 */
    int master_port;        /* the port this node offers for MASTER_PORT if it becomes node 0
                             * (a free port the agent picked); 0 = the daemon's own port */
    int attempt;            /* restart count: 0 first, +1 per re-rendezvous */
    FILE *log;              /* where a slow join says why (silence from a port that may hold
                             * no daemon, see rdzv_probe.h); NULL = say nothing */
} rdzv_node_info;

/* What the round decided. */
typedef struct {
    int round;              /* round number, increases with every (re-)rendezvous */
    int node_rank;          /* GROUP_RANK */
    int nnodes;             /* GROUP_WORLD_SIZE */
    int rank_offset;        /* RANK of this node's LOCAL_RANK 0 */
    int world_size;         /* WORLD_SIZE: sum of every node's local_world_size */
    int master_port;        /* MASTER_PORT (offered by node rank 0) */
    int hb_interval_ms;     /* the session heartbeats this often */
    int hb_timeout_ms;
    char master_addr[RDZV_MAX_NAME]; /* MASTER_ADDR: node rank 0's addr */
    char run_id[RDZV_MAX_NAME];      /* TORCHELASTIC_RUN_ID */
    char kv_prefix[RDZV_MAX_NAME];   /* DTRUN_KV_PREFIX for this round's workers */
} rdzv_result;

typedef struct rdzv_session rdzv_session;

/* Parses "HOST[:PORT]" ("[::1]:29400", "node1", "10.0.0.1:29400"); the port is
 * default_port when absent. 0, or -1 with the line in err. */
int rdzv_endpoint_parse(const char *endpoint, int default_port, char *host, size_t hostlen,
                        int *port, char *err, size_t errlen);

/* Joins a round at endpoint ("HOST:PORT"): connects (retrying refused connects
 * until the deadline — the daemon may start later), sends JOIN, waits for the
 * round to close. timeout_ms bounds the whole call (plus 2 s of slack for the
 * daemon's answer). It is also sent along: a round times out after the smaller
 * of the daemon's join_timeout_ms and its first joiner's timeout_ms, so the
 * daemon's message, which names who joined and who is missing, arrives before
 * the client gives up on its own. On success
 * returns a session (heartbeats start) and fills *res; NULL with one line in
 * err otherwise ("rendezvous at 10.0.0.1:29400: node rank 1 already taken by
 * nodeA"). */
rdzv_session *rdzv_join(const char *endpoint, const char *token, const rdzv_node_info *info,
                        int timeout_ms, rdzv_result *res, char *err, size_t errlen);

/* Events while the round runs. A background thread of the session sends the
 * heartbeats and reads the daemon's pushes; when something happens it queues an
 * event and makes rdzv_session_fd() readable. Agents watch that fd (uv_poll_t
 * in their loop, or poll()) and then drain rdzv_session_next_event. The fd is
 * close-on-exec, like the session's socket, so workers never inherit them. */
typedef enum {
    RDZV_EV_NODE_DEAD = 1,   /* another node died (heartbeat / connection): round failed */
    RDZV_EV_ROUND_FAILED,    /* another node reported a failure: round failed */
    RDZV_EV_NODE_WAITING,    /* a node wants to join (elastic scale-up); informational */
    RDZV_EV_DAEMON_LOST      /* the daemon closed or went silent for hb_timeout: round unusable */
} rdzv_event_kind;

typedef struct {
    rdzv_event_kind kind;
    int round;
    int node_rank;                   /* the node concerned, -1 when none */
    char message[512];               /* the one line to print */
} rdzv_event;

int rdzv_session_fd(const rdzv_session *s);

/* 1 and fills *ev when an event was queued, 0 when none. Events stay readable
 * (the fd stays readable) until drained. */
int rdzv_session_next_event(rdzv_session *s, rdzv_event *ev);

/* Tells the daemon this node failed (e.g. "worker rank 3 exited with status 1");
 * the round fails and the other nodes get RDZV_EV_ROUND_FAILED with this reason.
 * 0, or -1 if the daemon is unreachable (then the others see this node die). */
int rdzv_session_report_failure(rdzv_session *s, const char *reason);

/* Ends the session. clean = 1: the node finished (a LEAVE is sent, nobody is
 * told it died); clean = 0: just drop the connection (after a failure, before
 * joining again). Stops the heartbeat thread. Safe with NULL. */
void rdzv_session_close(rdzv_session *s, int clean);

#endif
