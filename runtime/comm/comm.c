/* comm.c — communicators: the world from the environment, groups, the choice of
 * backend (an entry of the backend table, comm_internal.h), errors, and the
 * public entry points in front of the backends: argument checks, staging of
 * device buffers for host backends, and every blocking call as start + wait. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "runtime/env.h"
#include "lib/util/beacon.h"
#include "runtime/comm/comm_internal.h"

/* How many times this process made a given member list from a given parent:
 * part of the group's store key, so making the same group twice gives two
 * communicators whose keys never collide. */
struct group_count {
    uint64_t hash;
    int count;
    struct group_count *next;
};

int comm_fail(comm *c, int code, const char *fmt, ...)
{
    pthread_mutex_lock(&c->err_mu);
    if (atomic_load(&c->status) == COMM_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        va_end(ap);
        atomic_store(&c->status, code);
    }
    pthread_mutex_unlock(&c->err_mu);
    return code;
}

/* A peer by its global rank (RANK), as every dtrun line names ranks; the
 * communicator's name beside it lists its members by the same numbers. */
const char *comm_peer_name(const comm *c, int r, char *buf)
{
    if (r < 0 || r >= c->size)
        snprintf(buf, 64, "rank ?");
    else
        snprintf(buf, 64, "rank %d", c->world_ranks[r]);
    return buf;
}

int comm_pid_alive(int pid)
{
    if (pid <= 0)
        return 1;  /* unknown: cannot tell, assume alive (the timeout still bounds) */
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    /* A killed child that its parent has not reaped yet is a zombie: kill()
     * still finds it, /proc tells the truth (state after the last ')'). */
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    if (p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'))
        return 0;
    return 1;
}

size_t comm_dtype_size(comm_dtype dt)
{
    return dt == COMM_BF16 ? 2 : 4;
}

void comm_chunk(size_t count, int size, int rank, size_t *offset, size_t *len)
{
    size_t chunk = size > 0 ? (count + (size_t)size - 1) / (size_t)size : 0;
    size_t off = chunk * (size_t)rank;
    if (off > count)
        off = count;
    size_t end = off + chunk < count ? off + chunk : count;
    *offset = off;
    *len = end - off;
}

/* ---- creation ---- */

static double timeout_from_env(void)
{
    return dt_env_get()->comm_timeout_s;
}

static comm *comm_alloc(int size)
{
    comm *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->world_ranks = calloc((size_t)size, sizeof(int));
    if (!c->world_ranks) {
        free(c);
        return NULL;
    }
    c->size = size;
    pthread_mutex_init(&c->err_mu, NULL);
    atomic_init(&c->status, COMM_OK);
    atomic_init(&c->bytes_sent, 0);
    c->timeout = timeout_from_env();
    /* once per process: where comm_coll_label notes each collective for the agent */
    beacon_attach(dt_env_get()->beacon_fd);
    return c;
}

static void comm_free(comm *c)
{
    if (!c)
        return;
    if (c->be)
        c->be->destroy(c);  /* stops its threads first */
    while (c->groups) {
        struct group_count *g = c->groups;
        c->groups = g->next;
        free(g);
    }
    free(c->info);
    free(c->world_ranks);
    free(c->stage);
    pthread_mutex_destroy(&c->err_mu);
    free(c);
}

/* Picks c's entry of the backend table (members, world and store set) and
 * builds it: the world's device backend when it chose one (for every group
 * when forced, else for groups of two or more), else self for a group of one,
 * shm within a node, tcp across nodes. */
static int comm_setup_transport(comm *c)
{
    const comm *w = c->world;
    const comm_backend *be;
    if (w->device_be && (w->device_be_forced || c->size > 1)) {
        if (c->size > 1 && !c->store)
            return comm_fail(c, COMM_EINVAL, "%s: a group of %d needs a bootstrap store",
                             c->name, c->size);
        be = w->device_be;
    } else if (c->size == 1) {
        be = &comm_backend_self;
    } else {
        if (!c->store)
            return comm_fail(c, COMM_EINVAL, "%s: a group of %d needs a bootstrap store",
                             c->name, c->size);
        const dt_env *env = dt_env_get();
        dt_env_transport force = env->comm_transport;
        if (force == DT_ENV_TRANSPORT_BAD)
            return comm_fail(c, COMM_EINVAL, "DTRUN_COMM_TRANSPORT=%s: expected auto, shm or tcp",
                             env->comm_transport_raw);
        const comm_peer_info *info = w->info;
        int one_node = 1;
        for (int i = 1; i < c->size; i++)
            if (strcmp(info[c->world_ranks[i]].node, info[c->world_ranks[0]].node) != 0)
                one_node = 0;
        if (force == DT_ENV_TRANSPORT_SHM && !one_node)
            return comm_fail(c, COMM_EINVAL,
                             "%s: DTRUN_COMM_TRANSPORT=shm but the members span nodes", c->name);
        be = one_node && force != DT_ENV_TRANSPORT_TCP ? &comm_backend_shm : &comm_backend_tcp;
    }
    c->be = be;
    return be->create(c);
}

static void read_info(comm_peer_info *dst, const char *text)
{
    /* "pid\nnode\nhost\ngpu" (gpu may be empty) */
    dst->pid = atoi(text);
    const char *a = strchr(text, '\n');
    const char *b = a ? strchr(a + 1, '\n') : NULL;
    if (!a || !b)
        return;
    snprintf(dst->node, sizeof dst->node, "%.*s", (int)(b - a - 1), a + 1);
    const char *g = strchr(b + 1, '\n');
    snprintf(dst->host, sizeof dst->host, "%.*s", g ? (int)(g - b - 1) : (int)strlen(b + 1), b + 1);
    if (g)
        snprintf(dst->gpu, sizeof dst->gpu, "%s", g + 1);
}

/* DTRUN_COMM_BACKEND's values: the device backend each lets the world take
 * (NULL: the CPU transports only), and whether it is forced (for every
 * communicator, an error when a rank cannot use it). */
typedef struct {
    const char *value;
    const comm_backend *device;
    int forced;
} backend_choice;

static const backend_choice backend_choices[] = {
    {"auto", &comm_backend_nccl, 0},
    {"nccl", &comm_backend_nccl, 1},
    {"cpu", NULL, 0},
};

/* The choice DTRUN_COMM_BACKEND names (auto when unset), or NULL for anything
 * else. Under auto, DTRUN_COMM_TRANSPORT=shm or tcp asks for a CPU transport: cpu. */
static const backend_choice *backend_from_env(void)
{
    const dt_env *env = dt_env_get();
    const char *s = env->comm_backend_raw;
    if (env->comm_backend == DT_ENV_BACKEND_AUTO) {
        dt_env_transport t = env->comm_transport;
        s = t == DT_ENV_TRANSPORT_SHM || t == DT_ENV_TRANSPORT_TCP ? "cpu" : "auto";
    }
    for (size_t i = 0; i < sizeof backend_choices / sizeof backend_choices[0]; i++)
        if (strcmp(s, backend_choices[i].value) == 0)
            return &backend_choices[i];
    return NULL;
}

/* The world's choice between the device backend and the CPU transports, the
 * same on every rank because the backend makes it from what every rank
 * published (its device, or "" when it cannot serve it). auto keeps the CPU
 * transports when the backend declines (and for a world of one); a forced
 * choice turns a refusal into an error naming the rank. */
static int choose_backend(comm *c, const backend_choice *want, const char *my_why, char *err,
                          size_t errlen)
{
    c->device_be = NULL;
    c->device_be_forced = 0;
    if (!want->device || (!want->forced && c->size == 1))
        return COMM_OK;
    int ok = want->device->world_accepts(c, want->forced, my_why, err, errlen);
    if (ok < 0)
        return COMM_EINVAL;
    if (ok > 0) {
        c->device_be = want->device;
        c->device_be_forced = want->forced;
    }
    return COMM_OK;
}

int comm_world_init(comm **out, comm_store *store, char *err, size_t errlen)
{
    *out = NULL;
    const dt_env *env = dt_env_get();
    if (env->rank_bad) {
        snprintf(err, errlen, "comm: bad RANK / WORLD_SIZE in the environment (expected integers "
                 "0 <= RANK < WORLD_SIZE)");
        return COMM_EINVAL;
    }
    char node[64];
    if (env->group_rank[0])
        snprintf(node, sizeof node, "node%s", env->group_rank);
    return comm_world_init_with(out, store, env->rank, env->world_size,
                                env->group_rank[0] ? node : NULL, err, errlen);
}

int comm_world_init_with(comm **out, comm_store *store, int rank, int world_size,
                         const char *node_id, char *err, size_t errlen)
{
    static _Atomic int generation;
    *out = NULL;
    if (world_size < 1 || rank < 0 || rank >= world_size) {
        snprintf(err, errlen, "comm: rank %d outside world of %d", rank, world_size);
        return COMM_EINVAL;
    }
    comm *c = comm_alloc(world_size);
    if (!c || !(c->info = calloc((size_t)world_size, sizeof *c->info))) {
        comm_free(c);
        snprintf(err, errlen, "comm: out of memory");
        return COMM_ESYS;
    }
    c->rank = rank;
    c->world = c;
    c->store = store;
    for (int i = 0; i < world_size; i++)
        c->world_ranks[i] = i;
    snprintf(c->name, sizeof c->name, "world");
    /* The key prefix changes with the agent's restart count and with every world
     * this process makes, so stale keys of an earlier attempt are never read. */
    snprintf(c->id, sizeof c->id, "dtrun-comm/w%d.%d", dt_env_get()->restart_count,
             atomic_fetch_add(&generation, 1));

    comm_peer_info *me = &c->info[rank];
    me->pid = (int)getpid();
    if (gethostname(me->host, sizeof me->host) != 0)
        snprintf(me->host, sizeof me->host, "unknown");
    me->host[sizeof me->host - 1] = '\0';
    snprintf(me->node, sizeof me->node, "%s", node_id ? node_id : me->host);
    const backend_choice *want = backend_from_env();
    if (!want) {
        snprintf(err, errlen, "comm: DTRUN_COMM_BACKEND=%s: expected auto, nccl or cpu",
                 dt_env_get()->comm_backend_raw);
        comm_free(c);
        return COMM_EINVAL;
    }
    /* asking may cost a library load (libnccl): only when the device backend may be used */
    char my_why[256] = "";
    if (want->device && (want->forced || world_size > 1))
        want->device->probe(me->gpu, sizeof me->gpu, my_why, sizeof my_why);

    int rc = COMM_OK;
    if (world_size > 1) {
        if (!store) {
            snprintf(err, errlen, "comm: a world of %d needs a bootstrap store", world_size);
            comm_free(c);
            return COMM_EINVAL;
        }
        char key[400], val[STORE_VALUE_MAX];
        int len = snprintf(val, sizeof val, "%d\n%s\n%s\n%s", me->pid, me->node, me->host,
                           me->gpu);
        snprintf(key, sizeof key, "%s/info/%d", c->id, rank);
        if (store_set(store, key, val, (size_t)len) != 0) {
            snprintf(err, errlen, "comm: world init: %s", store_last_error(store));
            comm_free(c);
            return COMM_ESTORE;
        }
        for (int r = 0; r < world_size; r++) {
            if (r == rank)
                continue;
            snprintf(key, sizeof key, "%s/info/%d", c->id, r);
            long n = store_get(store, key, val, sizeof val - 1, c->timeout);
            if (n < 0) {
                snprintf(err, errlen, "comm: world init: rank %d never showed up: %s", r,
                         store_last_error(store));
                comm_free(c);
                return COMM_ESTORE;
            }
            val[(size_t)n < sizeof val ? (size_t)n : sizeof val - 1] = '\0';
            read_info(&c->info[r], val);
        }
    }
    rc = choose_backend(c, want, my_why, err, errlen);
    if (rc != COMM_OK) {
        comm_free(c);
        return rc;
    }
    rc = comm_setup_transport(c);
    if (rc != COMM_OK) {
        snprintf(err, errlen, "%s", c->err);
        comm_free(c);
        return rc;
    }
    *out = c;
    return COMM_OK;
}

int comm_group(comm *parent, const int *ranks, int n, comm **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!parent || !ranks || n < 1 || n > parent->size) {
        snprintf(err, errlen, "comm_group: bad member list (n = %d)", n);
        return COMM_EINVAL;
    }
    if (atomic_load(&parent->status) != COMM_OK) {
        snprintf(err, errlen, "comm_group: parent %s is broken: %s", parent->name, parent->err);
        return COMM_EBROKEN;
    }
    int me = -1;
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= parent->size) {
            snprintf(err, errlen, "comm_group: rank %d outside %s of %d", ranks[i],
                     parent->name, parent->size);
            return COMM_EINVAL;
        }
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i]) {
                snprintf(err, errlen, "comm_group: rank %d listed twice", ranks[i]);
                return COMM_EINVAL;
            }
        if (ranks[i] == parent->rank)
            me = i;
    }
    if (me < 0) {
        snprintf(err, errlen, "comm_group: rank %d of %s is not a member", parent->rank,
                 parent->name);
        return COMM_EINVAL;
    }
    comm *c = comm_alloc(n);
    if (!c) {
        snprintf(err, errlen, "comm_group: out of memory");
        return COMM_ESYS;
    }
    c->rank = me;
    c->world = parent->world;
    c->store = parent->store;
    c->timeout = parent->timeout;
    for (int i = 0; i < n; i++)
        c->world_ranks[i] = parent->world_ranks[ranks[i]];

    uint64_t hash = XXH64(c->world_ranks, (size_t)n * sizeof(int), 0);
    struct group_count *g = parent->groups;
    while (g && g->hash != hash)
        g = g->next;
    if (!g) {
        g = calloc(1, sizeof *g);
        if (!g) {
            comm_free(c);
            snprintf(err, errlen, "comm_group: out of memory");
            return COMM_ESYS;
        }
        g->hash = hash;
        g->next = parent->groups;
        parent->groups = g;
    }
    int nth = g->count++;
    /* Nesting grows the id; past the buffer, hash the parent's id instead. */
    if (strlen(parent->id) < 180)
        snprintf(c->id, sizeof c->id, "%s/g%016llx.%d", parent->id, (unsigned long long)hash, nth);
    else
        snprintf(c->id, sizeof c->id, "dtrun-comm/h%016llx/g%016llx.%d",
                 (unsigned long long)XXH64(parent->id, strlen(parent->id), 0),
                 (unsigned long long)hash, nth);

    size_t len = (size_t)snprintf(c->name, sizeof c->name, "group[");
    for (int i = 0; i < n && len < sizeof c->name; i++) {
        if (len + 16 >= sizeof c->name) {
            snprintf(c->name + len, sizeof c->name - len, "...");
            len = sizeof c->name;
            break;
        }
        len += (size_t)snprintf(c->name + len, sizeof c->name - len, "%s%d", i ? "," : "",
                                c->world_ranks[i]);
    }
    if (len < sizeof c->name - 1)
        snprintf(c->name + len, sizeof c->name - len, "]");

    int rc = comm_setup_transport(c);
    if (rc != COMM_OK) {
        snprintf(err, errlen, "%s", c->err);
        comm_free(c);
        return rc;
    }
    *out = c;
    return COMM_OK;
}

void comm_destroy(comm *c)
{
    comm_free(c);
}

int comm_rank(const comm *c) { return c->rank; }
int comm_size(const comm *c) { return c->size; }
const char *comm_transport(const comm *c) { return c->be ? c->be->name : "none"; }
double comm_timeout(const comm *c) { return c->timeout; }

uint64_t comm_bytes_sent(const comm *c) { return atomic_load(&c->bytes_sent); }

void *comm_stream(const comm *c) { return c->be ? c->be->stream(c) : NULL; }

int comm_world_rank(const comm *c, int r)
{
    return (r >= 0 && r < c->size) ? c->world_ranks[r] : -1;
}

const char *comm_last_error(const comm *c)
{
    return atomic_load(&c->status) == COMM_OK ? "" : c->err;
}

void comm_set_timeout(comm *c, double seconds)
{
    if (seconds > 0)
        c->timeout = seconds;
}

/* ---- public entry points ---- */

static int check_args(comm *c, const coll_args *a)
{
    if (!c)
        return COMM_EINVAL;
    if (atomic_load(&c->status) != COMM_OK)
        return COMM_EBROKEN;
    if (a->dt != COMM_F32 && a->dt != COMM_BF16)
        return comm_fail(c, COMM_EINVAL, "%s: unknown dtype %d", comm_coll_name(a->kind), (int)a->dt);
    if (a->op != COMM_SUM && a->op != COMM_AVG && a->op != COMM_MAX)
        return comm_fail(c, COMM_EINVAL, "%s: unknown op %d", comm_coll_name(a->kind), (int)a->op);
    if (a->kind == COLL_BROADCAST && (a->root < 0 || a->root >= c->size))
        return comm_fail(c, COMM_EINVAL, "broadcast: root %d outside group of %d", a->root,
                         c->size);
    if (a->kind == COLL_ALL_TO_ALL) {
        if (!a->send_counts || !a->recv_counts)
            return comm_fail(c, COMM_EINVAL, "all_to_allv: NULL counts");
        size_t ns = 0, nr = 0;
        for (int r = 0; r < c->size; r++)
            ns += a->send_counts[r], nr += a->recv_counts[r];
        if ((ns > 0 && !a->send) || (nr > 0 && !a->recv))
            return comm_fail(c, COMM_EINVAL, "all_to_allv: NULL buffer");
        if (a->send_counts[c->rank] != a->recv_counts[c->rank])
            return comm_fail(c, COMM_EINVAL, "all_to_allv in %s: rank %d sends itself %zu elements but "
                             "expects %zu", c->name, c->rank, a->send_counts[c->rank],
                             a->recv_counts[c->rank]);
        return COMM_OK;
    }
    if (a->count > 0 && a->kind != COLL_BARRIER &&
        ((!a->send && a->kind != COLL_BROADCAST) || !a->recv))
        return comm_fail(c, COMM_EINVAL, "%s: NULL buffer", comm_coll_name(a->kind));
    return COMM_OK;
}

/* While the compute stream is recorded into a CUDA graph (comm.h): the
 * buffers must be device memory and the transport one that runs on the
 * device (NCCL), or a group of one (its device copy is recorded). */
static int check_recordable(comm *c, const char *what, const void *const *bufs, int nbuf)
{
    if (!comm_dev_capturing())
        return COMM_OK;
    for (int i = 0; i < nbuf; i++)
        if (bufs[i] && comm_dev_is_host(bufs[i]))
            return comm_fail(c, COMM_EINVAL, "%s in %s: a host buffer while the step is recorded into a CUDA graph "
                             "(train.cuda_graphs): a replay would not read or write it", what, c->name);
    if (c->be->memory == COMM_MEM_HOST && c->size > 1)
        return comm_fail(c, COMM_EINVAL, "%s in %s: the %s transport runs collectives on the host, which a CUDA "
                         "graph (train.cuda_graphs) cannot record; only NCCL can", what, c->name, c->be->name);
    return COMM_OK;
}

static int coll(comm *c, coll_args a, comm_req **req)
{
    if (req)
        *req = NULL;
    int rc = check_args(c, &a);
    if (rc != COMM_OK)
        return rc;
    size_t ns = a.count, nr = a.count;
    if (a.kind == COLL_ALL_TO_ALL)
        comm_coll_extent(c, &a, &ns, &nr);
    const void *bufs[2] = {ns > 0 ? a.send : NULL, nr > 0 ? a.recv : NULL};
    if ((rc = check_recordable(c, comm_coll_name(a.kind), bufs, 2)) != COMM_OK)
        return rc;
    comm_req *r = NULL;
    if (c->be->memory == COMM_MEM_HOST && (ns > 0 || nr > 0) && comm_dev_active() &&
        (comm_dev_is_device(a.send) || comm_dev_is_device(a.recv)))
        rc = comm_stage_coll(c, &a, !req, &r);
    else
        rc = c->be->coll_start(c, &a, !req, &r);
    if (rc != COMM_OK)
        return rc;
    if (req) {
        *req = r;
        return COMM_OK;
    }
    return comm_wait(r);
}

int comm_all_reduce(comm *c, const void *send, void *recv, size_t count, comm_dtype dt,
                    comm_op op)
{
    return coll(c, (coll_args){.kind = COLL_ALL_REDUCE, .send = send, .recv = recv, .count = count, .dt = dt, .op = op, .root = 0}, NULL);
}

int comm_reduce_scatter(comm *c, const void *send, void *recv, size_t count, comm_dtype dt,
                        comm_op op)
{
    return coll(c, (coll_args){.kind = COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = count, .dt = dt, .op = op, .root = 0}, NULL);
}

int comm_all_gather(comm *c, const void *send, void *recv, size_t count, comm_dtype dt)
{
    return coll(c, (coll_args){.kind = COLL_ALL_GATHER, .send = send, .recv = recv, .count = count, .dt = dt, .op = COMM_SUM, .root = 0}, NULL);
}

int comm_broadcast(comm *c, void *buf, size_t count, comm_dtype dt, int root)
{
    return coll(c, (coll_args){.kind = COLL_BROADCAST, .send = NULL, .recv = buf, .count = count, .dt = dt, .op = COMM_SUM, .root = root}, NULL);
}

int comm_barrier(comm *c)
{
    return coll(c, (coll_args){.kind = COLL_BARRIER, .send = NULL, .recv = NULL, .count = 0, .dt = COMM_F32, .op = COMM_SUM, .root = 0}, NULL);
}

static coll_args all_to_allv_args(comm *c, const void *send, const size_t *send_counts, void *recv,
                                  const size_t *recv_counts, comm_dtype dt)
{
    coll_args a = {.kind = COLL_ALL_TO_ALL, .send = send, .recv = recv, .dt = dt, .op = COMM_SUM,
                   .send_counts = send_counts, .recv_counts = recv_counts};
    for (int r = 0; c && send_counts && r < c->size; r++)
        a.count += send_counts[r];
    return a;
}

int comm_all_to_allv(comm *c, const void *send, const size_t *send_counts, void *recv,
                     const size_t *recv_counts, comm_dtype dt)
{
    return coll(c, all_to_allv_args(c, send, send_counts, recv, recv_counts, dt), NULL);
}

int comm_all_to_allv_async(comm *c, const void *send, const size_t *send_counts, void *recv,
                           const size_t *recv_counts, comm_dtype dt, comm_req **req)
{
    return coll(c, all_to_allv_args(c, send, send_counts, recv, recv_counts, dt), req);
}

int comm_all_to_all(comm *c, const void *send, void *recv, size_t count, comm_dtype dt)
{
    if (!c)
        return COMM_EINVAL;
    size_t *counts = malloc((size_t)c->size * sizeof *counts);
    if (!counts)
        return comm_fail(c, COMM_ESYS, "all_to_all: out of memory");
    for (int r = 0; r < c->size; r++)
        counts[r] = count;
    int rc = comm_all_to_allv(c, send, counts, recv, counts, dt);
    free(counts);
    return rc;
}

int comm_all_reduce_async(comm *c, const void *send, void *recv, size_t count, comm_dtype dt,
                          comm_op op, comm_req **req)
{
    return coll(c, (coll_args){.kind = COLL_ALL_REDUCE, .send = send, .recv = recv, .count = count, .dt = dt, .op = op, .root = 0}, req);
}

int comm_reduce_scatter_async(comm *c, const void *send, void *recv, size_t count,
                              comm_dtype dt, comm_op op, comm_req **req)
{
    return coll(c, (coll_args){.kind = COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = count, .dt = dt, .op = op, .root = 0}, req);
}

int comm_all_gather_async(comm *c, const void *send, void *recv, size_t count, comm_dtype dt,
                          comm_req **req)
{
    return coll(c, (coll_args){.kind = COLL_ALL_GATHER, .send = send, .recv = recv, .count = count, .dt = dt, .op = COMM_SUM, .root = 0}, req);
}

int comm_broadcast_async(comm *c, void *buf, size_t count, comm_dtype dt, int root,
                         comm_req **req)
{
    return coll(c, (coll_args){.kind = COLL_BROADCAST, .send = NULL, .recv = buf, .count = count, .dt = dt, .op = COMM_SUM, .root = root}, req);
}

int comm_barrier_async(comm *c, comm_req **req)
{
    return coll(c, (coll_args){.kind = COLL_BARRIER, .send = NULL, .recv = NULL, .count = 0, .dt = COMM_F32, .op = COMM_SUM, .root = 0}, req);
}

static int p2p(comm *c, int is_send, const void *buf, size_t count, comm_dtype dt, int peer,
               comm_req **req)
{
    if (req)
        *req = NULL;
    if (!c)
        return COMM_EINVAL;
    if (atomic_load(&c->status) != COMM_OK)
        return COMM_EBROKEN;
    const char *what = is_send ? "send" : "recv";
    if (dt != COMM_F32 && dt != COMM_BF16)
        return comm_fail(c, COMM_EINVAL, "%s: unknown dtype %d", what, (int)dt);
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return comm_fail(c, COMM_EINVAL, "%s: peer %d invalid in %s (rank %d of %d)", what,
                         peer, c->name, c->rank, c->size);
    if (count > 0 && !buf)
        return comm_fail(c, COMM_EINVAL, "%s: NULL buffer", what);
    const void *bufs[1] = {count > 0 ? buf : NULL};
    int rc = check_recordable(c, what, bufs, 1);
    if (rc != COMM_OK)
        return rc;
    comm_req *r = NULL;
    if (c->be->memory == COMM_MEM_HOST && count > 0 && comm_dev_is_device(buf))
        rc = comm_stage_p2p(c, is_send, (void *)buf, count, dt, peer, !req, &r);
    else
        rc = c->be->p2p_start(c, is_send, (void *)buf, count, dt, peer, !req, &r);
    if (rc != COMM_OK)
        return rc;
    if (req) {
        *req = r;
        return COMM_OK;
    }
    return comm_wait(r);
}

int comm_send(comm *c, const void *buf, size_t count, comm_dtype dt, int peer)
{
    return p2p(c, 1, buf, count, dt, peer, NULL);
}

int comm_recv(comm *c, void *buf, size_t count, comm_dtype dt, int peer)
{
    return p2p(c, 0, buf, count, dt, peer, NULL);
}

int comm_send_async(comm *c, const void *buf, size_t count, comm_dtype dt, int peer,
                    comm_req **req)
{
    return p2p(c, 1, buf, count, dt, peer, req);
}

int comm_recv_async(comm *c, void *buf, size_t count, comm_dtype dt, int peer, comm_req **req)
{
    return p2p(c, 0, buf, count, dt, peer, req);
}

int comm_wait_device(comm *c, const char *what)
{
    if (!c)
        return COMM_EINVAL;
    if (atomic_load(&c->status) != COMM_OK)
        return COMM_EBROKEN;
    return c->be->device_wait(c, what);
}

int comm_wait(comm_req *req)
{
    if (!req)
        return COMM_OK;
    struct comm_stage *st = req->stage;  /* the backend's wait frees req */
    int rc = req->c->be->wait(req);
    return st ? comm_stage_finish(st, rc) : rc;
}
