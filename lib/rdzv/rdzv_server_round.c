/* rdzv_server_round.c — the daemon's rounds: agents JOIN a joining round,
 * which closes at max_nodes, or at min_nodes once the last call passed, and
 * becomes the active round; its members heartbeat, leave cleanly or report a
 * failure; a silent or lost member fails the round for all. The rank rules and
 * the timeout message are pure functions in rdzv_round.c. */
#include <stdlib.h>
#include <string.h>

#include "lib/rdzv/rdzv_round.h"
#include "lib/rdzv/rdzv_server_internal.h"
#include "lib/util/clock.h"

void srv_round_free(round *r)
{
    if (!r) return;
    for (int i = 0; i < r->n; i++) {
        if (r->m[i]->c) r->m[i]->c->member = NULL;
        free(r->m[i]);
    }
    free(r->m);
    free(r);
}

static void purge_round_keys(rdzv_server *s, int number)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "round%d/", number);
    size_t n = kv_store_delete_prefix(s->kv, prefix);
    if (n) srv_log(s, "deleted %zu key%s of round %d", n, n == 1 ? "" : "s", number);
}

static void round_try_close(rdzv_server *s);

/* The running round ended: nodes that waited meanwhile start their wait now,
 * and the last call restarts, so the nodes of the ended round have time to
 * rejoin instead of being left out by a round of only the waiting ones. */
static void reopen_joining(rdzv_server *s)
{
    if (!s->joining) return;
    s->joining->first_join = s->joining->last_join = clock_now_ms();
    round_try_close(s);
}

/* The active round is over (failed or done): its keys go, and the nodes that
 * wait for the next round get their chance. */
static void round_end(rdzv_server *s)
{
    round *r = s->active;
    purge_round_keys(s, r->number);
    s->active = NULL;
    srv_round_free(r);
    reopen_joining(s);
}

/* The active round failed: tell every other live member, forget the round. */
static void round_fail(rdzv_server *s, member *culprit, int kind, const char *msg)
{
    round *r = s->active;
    /* A reported failure's text already names the round (agents print it as is). */
    if (!strncmp(msg, "round ", 6)) srv_log(s, "%s", msg);
    else srv_log(s, "round %d failed: %s", r->number, msg);
    for (int i = 0; i < r->n; i++) {
        member *m = r->m[i];
        if (m != culprit && m->c && !m->left)
            srv_conn_event(m->c, kind, r->number, culprit ? culprit->node_rank : -1, msg);
    }
    round_end(s);
}

static void round_check_done(rdzv_server *s)
{
    round *r = s->active;
    if (!r) return;
    for (int i = 0; i < r->n; i++)
        if (!r->m[i]->left) return;
    srv_log(s, "round %d finished: every node left cleanly", r->number);
    round_end(s);
}

static void round_close(rdzv_server *s)
{
    round *r = s->joining;
    int n = r->n;
    rdzv_round_node *nodes = calloc((size_t)n, sizeof *nodes);
    int *rank = calloc((size_t)n, sizeof *rank), *offset = calloc((size_t)n, sizeof *offset);
    frame_str *names = calloc((size_t)n, sizeof *names);
    if (!nodes || !rank || !offset || !names) goto out; /* retried on the next tick */
    for (int i = 0; i < n; i++)
        nodes[i] = (rdzv_round_node){ r->m[i]->name, r->m[i]->hint, r->m[i]->local_world };
    int world = 0;
    char err[300];
    if (rdzv_round_assign(nodes, n, rank, offset, &world, err, sizeof err) != 0) goto out; /* join checks prevent it */

    r->number = s->next_round++;
    r->state = ROUND_ACTIVE;
    s->active = r;
    s->joining = NULL;
    member *m0 = NULL;
    for (int i = 0; i < n; i++) {
        r->m[i]->node_rank = rank[i];
        r->m[i]->last_hb = clock_now_ms();
        names[rank[i]] = FRAME_STR(r->m[i]->name);
        if (rank[i] == 0) m0 = r->m[i];
    }
    const char *maddr = m0->addr[0] ? m0->addr : m0->c ? m0->c->peer_ip : "127.0.0.1";
    int mport = m0->master_port ? m0->master_port : s->port;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "round%d/", r->number);
    srv_log(s, "round %d closed: %d node%s, world size %d, master %s:%d", r->number, n, n == 1 ? "" : "s", world,
            maddr, mport);
    for (int i = 0; i < n; i++) {
        int64_t ints[8] = { r->number, rank[i], n, offset[i], world, mport, s->hb_interval_ms, s->hb_timeout_ms };
        frame_str strs[3] = { FRAME_STR(maddr), FRAME_STR(s->run_id), FRAME_STR(prefix) };
        if (r->m[i]->c) srv_conn_send(r->m[i]->c, FRAME_JOIN_OK, ints, strs, names, (uint32_t)n);
    }
out:
    free(nodes); free(rank); free(offset); free(names);
}

/* Closes the joining round if it may, else times it out if its deadline passed. */
static void round_try_close(rdzv_server *s)
{
    round *r = s->joining;
    if (!r || r->n == 0) return;
    int64_t now = clock_now_ms();
    rdzv_round_node *nodes = calloc((size_t)r->n, sizeof *nodes);
    if (!nodes) return;
    for (int i = 0; i < r->n; i++)
        nodes[i] = (rdzv_round_node){ r->m[i]->name, r->m[i]->hint, r->m[i]->local_world };
    int need = rdzv_round_min_for_hints(nodes, r->n);
    if (need < s->min_nodes) need = s->min_nodes;
    if (!s->active && r->n >= need &&
        (r->n >= s->max_nodes || s->last_call_ms < 0 || now - r->last_join >= s->last_call_ms)) {
        free(nodes);
        round_close(s);
        return;
    }
    if (now - r->first_join < r->join_timeout_ms) { free(nodes); return; }

    char msg[700];
    rdzv_round_timeout_message(msg, sizeof msg, r->join_timeout_ms / 1000.0, nodes, r->n, s->min_nodes, need);
    if (s->active && r->n >= need)
        snprintf(msg, sizeof msg, "rendezvous timed out after %.1f s: %d node%s waited while round %d kept running "
                 "with %d of max %d nodes (its agents did not restart to admit them)", r->join_timeout_ms / 1000.0,
                 r->n, r->n == 1 ? "" : "s", s->active->number, s->active->n, s->max_nodes);
    free(nodes);
    srv_log(s, "%s", msg);
    /* Detach first: refusing a connection must not touch the round again. */
    s->joining = NULL;
    int n = r->n;
    conn **cs = calloc((size_t)n, sizeof *cs);
    for (int i = 0; cs && i < n; i++) cs[i] = r->m[i]->c;
    srv_round_free(r);
    for (int i = 0; cs && i < n; i++) {
        if (!cs[i] || cs[i]->closing) continue;
        frame_str strs[1] = { FRAME_STR(msg) };
        srv_conn_send(cs[i], FRAME_ERROR, NULL, strs, NULL, 0);
    }
    free(cs);
}

/* A member's connection is gone (EOF, error, dropped). */
void srv_round_member_lost(rdzv_server *s, member *m, const char *why)
{
    conn *c = m->c;
    m->c = NULL;
    if (c) c->member = NULL;
    if (s->joining) {
        round *r = s->joining;
        for (int i = 0; i < r->n; i++) {
            if (r->m[i] != m) continue;
            srv_log(s, "node %s left before the round closed (%s)", m->name, why);
            memmove(&r->m[i], &r->m[i + 1], (size_t)(r->n - i - 1) * sizeof *r->m);
            r->n--;
            free(m);
            if (r->n == 0) { srv_round_free(r); s->joining = NULL; }
            return;
        }
    }
    if (s->active && !m->left) {
        char msg[600];
        snprintf(msg, sizeof msg, "node %s (rank %d) dead: %s", m->name, m->node_rank, why);
        round_fail(s, m, RDZV_EV_NODE_DEAD, msg);
    }
}

void srv_round_join(rdzv_server *s, conn *c, const frame_msg *m)
{
    char msg[600];
    if (c->member) { srv_conn_refuse(c, "JOIN sent twice on one connection"); return; }
    int64_t hint = m->i[JOIN_I_NODE_RANK], lw = m->i[JOIN_I_LOCAL_WORLD], mp = m->i[JOIN_I_MASTER_PORT];
    int64_t jt = m->i[JOIN_I_JOIN_TIMEOUT_MS];
    const char *name = m->s[JOIN_S_NAME].len ? m->s[JOIN_S_NAME].p : c->peer_ip;
    if (lw < 1 || lw > RDZV_MAX_LOCAL) {
        snprintf(msg, sizeof msg, "local world size %lld of node %s is out of range 1-%d", (long long)lw, name, RDZV_MAX_LOCAL);
        srv_conn_refuse(c, msg);
        return;
    }
    if (hint < -1 || hint >= s->max_nodes) {
        snprintf(msg, sizeof msg, "node rank %lld of node %s is out of range: the job has %d node%s at most",
                 (long long)hint, name, s->max_nodes, s->max_nodes == 1 ? "" : "s");
        srv_conn_refuse(c, msg);
        return;
    }
    if (mp < 0 || mp > 65535 || jt < 0 || jt > RDZV_MAX_WAIT_MS || m->s[JOIN_S_NAME].len >= RDZV_MAX_NAME ||
        m->s[JOIN_S_ADDR].len >= RDZV_MAX_NAME) {
        srv_conn_refuse(c, "JOIN with a bad master port, join timeout, name or address");
        return;
    }
    if (!s->joining) {
        s->joining = calloc(1, sizeof *s->joining);
        if (!s->joining) { srv_conn_refuse(c, "daemon out of memory"); return; }
    }
    round *r = s->joining;
    if (r->n >= s->max_nodes) {
        snprintf(msg, sizeof msg, "rendezvous is full: %d of max %d nodes already wait for the next round", r->n, s->max_nodes);
        srv_conn_refuse(c, msg);
        return;
    }
    for (int i = 0; hint >= 0 && i < r->n; i++) {
        if (r->m[i]->hint == hint) {
            snprintf(msg, sizeof msg, "node rank %lld already taken by %s (%s)", (long long)hint, r->m[i]->name,
                     r->m[i]->c ? r->m[i]->c->peer_ip : "?");
            srv_conn_refuse(c, msg);
            return;
        }
    }
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 8;
        member **p = realloc(r->m, (size_t)cap * sizeof *p);
        if (!p) { srv_conn_refuse(c, "daemon out of memory"); return; }
        r->m = p;
        r->cap = cap;
    }
    member *mb = calloc(1, sizeof *mb);
    if (!mb) { srv_conn_refuse(c, "daemon out of memory"); return; }
    mb->c = c;
    snprintf(mb->name, sizeof mb->name, "%s", name);
    snprintf(mb->addr, sizeof mb->addr, "%s", m->s[JOIN_S_ADDR].p);
    mb->hint = (int)hint;
    mb->local_world = (int)lw;
    mb->pid = (int)m->i[JOIN_I_PID];
    mb->attempt = (int)m->i[JOIN_I_ATTEMPT];
    mb->master_port = (int)mp;
    mb->node_rank = -1;
    c->member = mb;
    r->m[r->n++] = mb;
    int64_t now = clock_now_ms();
    if (r->n == 1) {
        r->first_join = now;
        /* The smaller of the daemon's and the first joiner's: an agent that
         * waits a little longer than its configured timeout still gets the
         * daemon's message (who joined, how many are missing) first. */
        r->join_timeout_ms = jt > 0 && jt < s->join_timeout_ms ? (int)jt : s->join_timeout_ms;
    }
    r->last_join = now;
    srv_log(s, "node %s (%s, pid %d, attempt %d, node rank %s) joined: %d of min %d, max %d", mb->name, c->peer,
            mb->pid, mb->attempt, hint >= 0 ? (snprintf(msg, sizeof msg, "%lld", (long long)hint), msg) : "any",
            r->n, s->min_nodes, s->max_nodes);
    if (s->active) {
        snprintf(msg, sizeof msg, "node %s is waiting to join the next round", mb->name);
        for (int i = 0; i < s->active->n; i++) {
            member *am = s->active->m[i];
            if (am->c && !am->left) srv_conn_event(am->c, RDZV_EV_NODE_WAITING, s->active->number, -1, msg);
        }
    }
    round_try_close(s);
}

/* HEARTBEAT: a member of the active round is alive. The answer names the
 * round (-1 when the sender is in none), so an agent notices a lost round. */
void srv_round_heartbeat(rdzv_server *s, conn *c)
{
    int64_t ints[1] = { -1 };
    if (c->member && s->active && c->member->node_rank >= 0) {
        c->member->last_hb = clock_now_ms();
        ints[0] = s->active->number;
    }
    srv_conn_send(c, FRAME_HEARTBEAT, ints, NULL, NULL, 0);
}

/* LEAVE: the node finished; the round ends when every node has left. */
void srv_round_leave(rdzv_server *s, conn *c)
{
    if (c->member && s->active && c->member->node_rank >= 0) {
        c->member->left = 1;
        srv_log(s, "node %s (rank %d) left round %d cleanly", c->member->name, c->member->node_rank, s->active->number);
        round_check_done(s);
    }
}

/* FAIL: the node's worker failed; the round fails for every other node. */
void srv_round_report_failure(rdzv_server *s, conn *c, const char *reason)
{
    if (c->member && s->active && c->member->node_rank >= 0) {
        char fm[FRAME_MAX_TEXT + 600];
        snprintf(fm, sizeof fm, "round %d failed: node %s (rank %d) reported: %s", s->active->number,
                 c->member->name, c->member->node_rank, reason);
        round_fail(s, c->member, RDZV_EV_ROUND_FAILED, fm);
    }
}

/* Silent members of the active round fail it; the joining round closes or
 * times out. */
void srv_round_tick(rdzv_server *s, int64_t now)
{
    if (s->active) {
        round *r = s->active;
        for (int i = 0; i < r->n; i++) {
            member *m = r->m[i];
            if (m->left || !m->c || now - m->last_hb <= s->hb_timeout_ms) continue;
            char msg[600];
            snprintf(msg, sizeof msg, "node %s (rank %d) dead: no heartbeat for %.1f s", m->name, m->node_rank,
                     (double)(now - m->last_hb) / 1000.0);
            conn *dead = m->c;
            round_fail(s, m, RDZV_EV_NODE_DEAD, msg);
            srv_conn_drop(dead, "no heartbeat");
            break; /* the round is gone */
        }
    }
    round_try_close(s);
}
