/* launch_opts.c — parse and resolve dtrun's command line. */
#include "lib/launch/launch_opts.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/job/jobspec_suggest.h"
#include "lib/util/errline.h"
#include "lib/util/range.h"

typedef enum {
    OPT_NPROC, OPT_NNODES, OPT_NODE_RANK, OPT_RDZV_ENDPOINT, OPT_RDZV_ID, OPT_RDZV_CONF,
    OPT_RDZV_BACKEND, OPT_STANDALONE, OPT_MASTER_ADDR, OPT_MASTER_PORT, OPT_MAX_RESTARTS,
    OPT_MONITOR_INTERVAL, OPT_TERM_TIMEOUT, OPT_LOG_DIR, OPT_REDIRECTS, OPT_TEE,
    OPT_RANKS_FILTER, OPT_ROLE, OPT_LOCAL_ADDR, OPT_NO_PYTHON, OPT_MODULE, OPT_DRY_RUN,
    OPT_PRINT_CONFIG, OPT_VERSION, OPT_HELP, OPT_PLAN, OPT_HARDWARE, OPT_FORMAT, OPT_TOP, OPT_TRACE
} opt_id;

typedef struct {
    const char *name;  /* dashed spelling, without the leading "--" */
    char short_name;   /* 0 when none */
    int takes_value;
    opt_id id;
} opt_def;

static const opt_def OPTIONS[] = {
    {"nproc-per-node", 0, 1, OPT_NPROC},
    {"nnodes", 0, 1, OPT_NNODES},
    {"node-rank", 0, 1, OPT_NODE_RANK},
    {"rdzv-endpoint", 0, 1, OPT_RDZV_ENDPOINT},
    {"rdzv-id", 0, 1, OPT_RDZV_ID},
    {"rdzv-conf", 0, 1, OPT_RDZV_CONF},
    {"rdzv-backend", 0, 1, OPT_RDZV_BACKEND},
    {"standalone", 0, 0, OPT_STANDALONE},
    {"master-addr", 0, 1, OPT_MASTER_ADDR},
    {"master-port", 0, 1, OPT_MASTER_PORT},
    {"max-restarts", 0, 1, OPT_MAX_RESTARTS},
    {"monitor-interval", 0, 1, OPT_MONITOR_INTERVAL},
    {"term-timeout", 0, 1, OPT_TERM_TIMEOUT},
    {"log-dir", 0, 1, OPT_LOG_DIR},
    {"redirects", 'r', 1, OPT_REDIRECTS},
    {"tee", 't', 1, OPT_TEE},
    {"local-ranks-filter", 0, 1, OPT_RANKS_FILTER},
    {"role", 0, 1, OPT_ROLE},
    {"local-addr", 0, 1, OPT_LOCAL_ADDR},
    {"no-python", 0, 0, OPT_NO_PYTHON},
    {"module", 'm', 0, OPT_MODULE},
    {"dry-run", 0, 0, OPT_DRY_RUN},
    {"plan", 0, 0, OPT_PLAN},
    {"hardware", 0, 1, OPT_HARDWARE},
    {"format", 0, 1, OPT_FORMAT},
    {"top", 0, 1, OPT_TOP},
    {"trace", 0, 1, OPT_TRACE},
    {"print-config", 0, 0, OPT_PRINT_CONFIG},
    {"version", 0, 0, OPT_VERSION},
    {"help", 'h', 0, OPT_HELP},
};
#define N_OPTIONS (sizeof OPTIONS / sizeof OPTIONS[0])

void launch_opts_defaults(launch_opts *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->nproc_spec, sizeof o->nproc_spec, "auto");
    o->nnodes_min = o->nnodes_max = 1;
    o->node_rank = -1;
    snprintf(o->rdzv_backend, sizeof o->rdzv_backend, "c10d");
    o->rdzv_port = LAUNCH_DEFAULT_RDZV_PORT;
    /* torchrun's c10d defaults; a node is dead after 15 s of silence (torchrun:
     * 3 missed keep-alives of 5 s). A killed agent's closed connection is
     * noticed at once; the heartbeat is for hung or cut-off nodes. */
    o->rdzv_conf.join_timeout = 600;
    o->rdzv_conf.last_call_timeout = 30;
    o->rdzv_conf.close_timeout = 30;
    o->rdzv_conf.heartbeat_timeout = 15;
    o->rdzv_conf.keep_alive_interval = 1;
    o->rdzv_conf.read_timeout = 60;
    o->rdzv_conf.is_host = -1;
    o->max_restarts = 0;
    o->monitor_interval = 0.1;
    o->term_timeout = 10;
    snprintf(o->role, sizeof o->role, "default");
}

void launch_opts_free(launch_opts *o)
{
    free(o->program_storage);
    o->program_storage = NULL;
}

/* ---- single values ---- */

static int parse_seconds(const char *s, double lo, double *out, char *err, size_t errlen)
{
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (!*s || *end || errno == ERANGE || isspace((unsigned char)*s) || !isfinite(v))
        return errline(err, errlen, "'%s' is not a number of seconds", s);
    if (v < lo || v > 1e7) return errline(err, errlen, "%s seconds is out of range (%g..1e7)", s, lo);
    *out = v;
    return 0;
}

/* An identifier that also becomes a directory name under --log-dir. */
static int parse_ident(const char *s, char *out, size_t outlen, char *err, size_t errlen)
{
    if (!*s) return errline(err, errlen, "empty value");
    size_t n = strlen(s);
    if (n >= outlen) return errline(err, errlen, "'%s' is longer than %zu characters", s, outlen - 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '-' && c != '_' && c != '.')
            return errline(err, errlen, "'%s' has '%c'; use letters, digits, '-', '_' and '.'", s, c);
    }
    if (!strcmp(s, ".") || !strcmp(s, ".."))
        return errline(err, errlen, "'%s' cannot name a directory", s);
    memcpy(out, s, n + 1);
    return 0;
}

static int parse_host(const char *s, char *out, size_t outlen, char *err, size_t errlen)
{
    size_t n = strlen(s);
    if (!n) return errline(err, errlen, "empty host");
    if (n >= outlen) return errline(err, errlen, "host '%s' is too long", s);
    for (size_t i = 0; i < n; i++)
        if (isspace((unsigned char)s[i]) || s[i] == '/' || s[i] == ',')
            return errline(err, errlen, "'%s' is not a host name or address", s);
    memcpy(out, s, n + 1);
    return 0;
}

int launch_parse_endpoint(const char *s, char *host, size_t hostlen, int *port, int default_port,
                          char *err, size_t errlen)
{
    const char *port_str = NULL;
    size_t hlen;
    const char *hstart = s;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close) return errline(err, errlen, "'%s' opens '[' without ']'", s);
        hstart = s + 1;
        hlen = (size_t)(close - hstart);
        if (close[1] == ':') port_str = close + 2;
        else if (close[1]) return errline(err, errlen, "'%s': expected ':PORT' after ']'", s);
        if (!memchr(hstart, ':', hlen))
            return errline(err, errlen, "'%s': brackets are for IPv6 addresses", s);
    } else {
        const char *colon = strchr(s, ':');
        if (colon && strchr(colon + 1, ':'))
            return errline(err, errlen,
                           "'%s' looks like an IPv6 address; write it in brackets: [ADDR]:PORT", s);
        hlen = colon ? (size_t)(colon - s) : strlen(s);
        if (colon) port_str = colon + 1;
    }
    if (hlen == 0) return errline(err, errlen, "'%s' has no host", s);
    if (hlen >= hostlen) return errline(err, errlen, "host in '%s' is too long", s);
    char tmp[LAUNCH_HOST_MAX];
    if (hlen >= sizeof tmp) return errline(err, errlen, "host in '%s' is too long", s);
    memcpy(tmp, hstart, hlen);
    tmp[hlen] = 0;
    char why[128];
    if (parse_host(tmp, host, hostlen, why, sizeof why)) return errline(err, errlen, "%s", why);
    *port = default_port;
    if (port_str) {
        long p;
        if (!*port_str) return errline(err, errlen, "'%s' has ':' but no port", s);
        if (range_parse_long(port_str, 1, 65535, &p, why, sizeof why))
            return errline(err, errlen, "port in '%s': %s", s, why);
        *port = (int)p;
    }
    return 0;
}

int launch_parse_nnodes(const char *s, int *min, int *max, char *err, size_t errlen)
{
    char why[128];
    int lo, hi;
    switch (range_parse(s, 1, LAUNCH_MAX_NODES, &lo, &hi, why, sizeof why)) {
    case RANGE_OK:
        *min = lo;
        *max = hi;
        return 0;
    case RANGE_BAD_FORM: return errline(err, errlen, "'%s' is not N or MIN:MAX", s);
    case RANGE_MIN_OVER_MAX: return errline(err, errlen, "'%s': MIN is larger than MAX", s);
    default:
        if (!strchr(s, ':')) return errline(err, errlen, "%s (expected N or MIN:MAX)", why);
        return errline(err, errlen, "'%s': %s (expected N or MIN:MAX)", s, why);
    }
}

static int parse_std_value(const char *s, size_t n, launch_std *out)
{
    if (n != 1 || s[0] < '0' || s[0] > '3') return -1;
    *out = (launch_std)(s[0] - '0');
    return 0;
}

int launch_parse_std(const char *s, launch_std_spec *spec, char *err, size_t errlen)
{
    memset(spec, 0, sizeof *spec);
    if (!strchr(s, ':')) {
        if (parse_std_value(s, strlen(s), &spec->all))
            return errline(err, errlen,
                           "'%s' is not 0-3 (0 none, 1 stdout, 2 stderr, 3 both) or a map like 0:1,1:2",
                           s);
        return 0;
    }
    const char *p = s;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        const char *colon = memchr(p, ':', n);
        char rank_str[16];
        size_t rn = colon ? (size_t)(colon - p) : 0;
        long rank;
        char why[96];
        launch_std v;
        if (!colon || rn == 0 || rn >= sizeof rank_str)
            return errline(err, errlen, "'%.*s' in '%s' is not LOCAL_RANK:0-3", (int)n, p, s);
        memcpy(rank_str, p, rn);
        rank_str[rn] = 0;
        if (range_parse_long(rank_str, 0, LAUNCH_MAX_LOCAL - 1, &rank, why, sizeof why))
            return errline(err, errlen, "local rank in '%s': %s", s, why);
        if (parse_std_value(colon + 1, n - rn - 1, &v))
            return errline(err, errlen, "'%.*s' in '%s': the value is not 0-3", (int)n, p, s);
        if (spec->in_map[rank])
            return errline(err, errlen, "'%s' names local rank %ld twice", s, rank);
        spec->in_map[rank] = 1;
        spec->by_rank[rank] = (unsigned char)v;
        if (!comma) break;
        p = comma + 1;
        if (!*p) return errline(err, errlen, "'%s' ends with ','", s);
    }
    return 0;
}

launch_std launch_std_for(const launch_std_spec *spec, int local_rank)
{
    if (local_rank >= 0 && local_rank < LAUNCH_MAX_LOCAL && spec->in_map[local_rank])
        return (launch_std)spec->by_rank[local_rank];
    return spec->all;
}

static int parse_ranks_filter(const char *s, unsigned char *filter, char *err, size_t errlen)
{
    memset(filter, 0, LAUNCH_MAX_LOCAL);
    if (!*s) return errline(err, errlen, "empty list (expected local ranks like 0,1)");
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char one[16], why[96];
        long r;
        if (n == 0 || n >= sizeof one) return errline(err, errlen, "'%s' is not a list like 0,1", s);
        memcpy(one, p, n);
        one[n] = 0;
        if (range_parse_long(one, 0, LAUNCH_MAX_LOCAL - 1, &r, why, sizeof why))
            return errline(err, errlen, "'%s': %s", s, why);
        filter[r] = 1;
        if (!comma) return 0;
        p = comma + 1;
    }
}

static int parse_bool(const char *s, int *out)
{
    static const char *yes[] = {"1", "true", "yes", "on", "True"};
    static const char *no[] = {"0", "false", "no", "off", "False"};
    for (size_t i = 0; i < 5; i++) {
        if (!strcmp(s, yes[i])) { *out = 1; return 0; }
        if (!strcmp(s, no[i])) { *out = 0; return 0; }
    }
    return -1;
}

static const char *const RDZV_CONF_KEYS[] = {
    "join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout",
    "keep_alive_interval", "read_timeout", "timeout", "is_host", "keep_alive_max_attempt",
    "use_agent_store"};
#define N_RDZV_CONF_KEYS (sizeof RDZV_CONF_KEYS / sizeof RDZV_CONF_KEYS[0])

static int parse_rdzv_conf(const char *s, launch_rdzv_conf *c, char *err, size_t errlen)
{
    char buf[1024];
    if (strlen(s) >= sizeof buf) return errline(err, errlen, "value is too long");
    memcpy(buf, s, strlen(s) + 1);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) return errline(err, errlen, "'%s' is not KEY=VALUE", kv);
        *eq = 0;
        const char *key = kv, *val = eq + 1;
        char why[128];
        double *slot = NULL;
        if (!strcmp(key, "join_timeout") || !strcmp(key, "timeout")) slot = &c->join_timeout;
        else if (!strcmp(key, "last_call_timeout")) slot = &c->last_call_timeout;
        else if (!strcmp(key, "close_timeout")) slot = &c->close_timeout;
        else if (!strcmp(key, "heartbeat_timeout")) slot = &c->heartbeat_timeout;
        else if (!strcmp(key, "keep_alive_interval")) slot = &c->keep_alive_interval;
        else if (!strcmp(key, "read_timeout")) slot = &c->read_timeout;
        if (slot) {
            if (parse_seconds(val, 0.001, slot, why, sizeof why))
                return errline(err, errlen, "%s: %s", key, why);
            continue;
        }
        if (!strcmp(key, "is_host")) {
            if (parse_bool(val, &c->is_host))
                return errline(err, errlen, "is_host: '%s' is not true or false", val);
            continue;
        }
        if (!strcmp(key, "keep_alive_max_attempt") || !strcmp(key, "use_agent_store")) {
            /* torchrun keys that mean nothing here: dtrun's heartbeat_timeout
             * covers the first, and workers never use the agent's store. */
            continue;
        }
        suggest sg;
        suggest_init(&sg, key, strlen(key));
        for (size_t i = 0; i < N_RDZV_CONF_KEYS; i++)
            suggest_offer(&sg, RDZV_CONF_KEYS[i], RDZV_CONF_KEYS[i]);
        if (suggest_best(&sg))
            return errline(err, errlen, "unknown key '%s'; did you mean '%s'?", key, suggest_best(&sg));
        return errline(err, errlen, "unknown key '%s' (known: join_timeout, last_call_timeout, "
                       "close_timeout, heartbeat_timeout, keep_alive_interval, read_timeout, is_host)",
                       key);
    }
    return 0;
}

/* ---- the command line ---- */

static const opt_def *find_long(const char *name, size_t n)
{
    char norm[64];
    if (n >= sizeof norm) return NULL;
    for (size_t i = 0; i < n; i++) norm[i] = name[i] == '_' ? '-' : name[i];
    norm[n] = 0;
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (!strcmp(OPTIONS[i].name, norm)) return &OPTIONS[i];
    return NULL;
}

static const opt_def *find_short(char c)
{
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (OPTIONS[i].short_name == c) return &OPTIONS[i];
    return NULL;
}

static int unknown_option(const char *arg, size_t n, char *err, size_t errlen)
{
    /* Suggest in the user's own spelling: --nproc_per_nod -> --nproc_per_node. */
    int underscored = memchr(arg, '_', n) != NULL;
    const char *name = arg + 2;
    size_t name_len = n >= 2 ? n - 2 : 0;
    suggest sg;
    suggest_init(&sg, name, name_len);
    for (size_t i = 0; i < N_OPTIONS; i++) suggest_offer(&sg, OPTIONS[i].name, OPTIONS[i].name);
    const char *best = suggest_best(&sg);
    if (!best) return errline(err, errlen, "unknown option '%.*s' (see dtrun --help)", (int)n, arg);
    char spelled[64];
    snprintf(spelled, sizeof spelled, "%s", best);
    if (underscored)
        for (char *p = spelled; *p; p++)
            if (*p == '-') *p = '_';
    return errline(err, errlen, "unknown option '%.*s'; did you mean '--%s'?", (int)n, arg, spelled);
}

/* Apply one option's value. `shown` is the option as the user spelled it. */
static int apply(launch_opts *o, opt_id id, const char *v, const char *shown, char *err, size_t errlen)
{
    char why[256];
    long n;
    switch (id) {
    case OPT_NPROC:
        if (!strcmp(v, "cpu") || !strcmp(v, "gpu") || !strcmp(v, "auto")) {
            snprintf(o->nproc_spec, sizeof o->nproc_spec, "%s", v);
        } else {
            if (range_parse_long(v, 1, LAUNCH_MAX_LOCAL, &n, why, sizeof why))
                return errline(err, errlen, "%s: %s; expected a number of workers, 'cpu', 'gpu' or 'auto'",
                               shown, why);
            snprintf(o->nproc_spec, sizeof o->nproc_spec, "%ld", n);
        }
        o->set |= LAUNCH_SET_NPROC;
        return 0;
    case OPT_NNODES:
        if (launch_parse_nnodes(v, &o->nnodes_min, &o->nnodes_max, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->set |= LAUNCH_SET_NNODES;
        return 0;
    case OPT_NODE_RANK:
        if (range_parse_long(v, 0, LAUNCH_MAX_NODES - 1, &n, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->node_rank = (int)n;
        o->set |= LAUNCH_SET_NODE_RANK;
        return 0;
    case OPT_RDZV_ENDPOINT:
        if (launch_parse_endpoint(v, o->rdzv_host, sizeof o->rdzv_host, &o->rdzv_port,
                                  LAUNCH_DEFAULT_RDZV_PORT, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        snprintf(o->rdzv_endpoint, sizeof o->rdzv_endpoint, "%s", v);
        o->set |= LAUNCH_SET_ENDPOINT;
        return 0;
    case OPT_RDZV_ID:
        if (parse_ident(v, o->rdzv_id, sizeof o->rdzv_id, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->set |= LAUNCH_SET_RDZV_ID;
        return 0;
    case OPT_RDZV_CONF:
        if (parse_rdzv_conf(v, &o->rdzv_conf, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        return 0;
    case OPT_RDZV_BACKEND:
        if (strcmp(v, "c10d") && strcmp(v, "static") && strcmp(v, "dtrun"))
            return errline(err, errlen, "%s: '%s' is not supported; use c10d, static or dtrun "
                           "(all meet at dtrun's own rendezvous daemon)", shown, v);
        snprintf(o->rdzv_backend, sizeof o->rdzv_backend, "%s", v);
        o->set |= LAUNCH_SET_BACKEND;
        return 0;
    case OPT_STANDALONE: o->standalone = 1; return 0;
    case OPT_MASTER_ADDR:
        if (parse_host(v, o->master_addr, sizeof o->master_addr, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->set |= LAUNCH_SET_MASTER_ADDR;
        return 0;
    case OPT_MASTER_PORT:
        if (range_parse_long(v, 1, 65535, &n, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->master_port = (int)n;
        o->set |= LAUNCH_SET_MASTER_PORT;
        return 0;
    case OPT_MAX_RESTARTS:
        if (range_parse_long(v, 0, 1000000, &n, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->max_restarts = (int)n;
        o->set |= LAUNCH_SET_MAX_RESTARTS;
        return 0;
    case OPT_MONITOR_INTERVAL:
        if (parse_seconds(v, 0.001, &o->monitor_interval, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        return 0;
    case OPT_TERM_TIMEOUT:
        if (parse_seconds(v, 0, &o->term_timeout, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        return 0;
    case OPT_LOG_DIR:
        if (!*v) return errline(err, errlen, "%s: empty directory name", shown);
        if (strlen(v) >= sizeof o->log_dir) return errline(err, errlen, "%s: path is too long", shown);
        snprintf(o->log_dir, sizeof o->log_dir, "%s", v);
        o->set |= LAUNCH_SET_LOG_DIR;
        return 0;
    case OPT_REDIRECTS:
    case OPT_TEE:
        if (launch_parse_std(v, id == OPT_TEE ? &o->tee : &o->redirects, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->set |= id == OPT_TEE ? LAUNCH_SET_TEE : LAUNCH_SET_REDIRECTS;
        return 0;
    case OPT_RANKS_FILTER:
        if (parse_ranks_filter(v, o->ranks_filter, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        o->has_ranks_filter = 1;
        return 0;
    case OPT_ROLE:
        if (parse_ident(v, o->role, sizeof o->role, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        return 0;
    case OPT_LOCAL_ADDR:
        if (parse_host(v, o->local_addr, sizeof o->local_addr, why, sizeof why))
            return errline(err, errlen, "%s: %s", shown, why);
        return 0;
    case OPT_DRY_RUN: o->dry_run = 1; return 0;
    case OPT_PLAN: o->plan = 1; return 0;
    case OPT_HARDWARE:
        if (!*v) return errline(err, errlen, "%s: empty profile name", shown);
        if (strlen(v) >= sizeof o->hardware) return errline(err, errlen, "%s: too long", shown);
        snprintf(o->hardware, sizeof o->hardware, "%s", v);
        return 0;
    case OPT_FORMAT:
        if (strcmp(v, "text") && strcmp(v, "json"))
            return errline(err, errlen, "%s: '%s' is not text or json", shown, v);
        o->format_json = !strcmp(v, "json");
        return 0;
    case OPT_TOP:
        if (range_parse_long(v, 1, 1000, &n, why, sizeof why)) return errline(err, errlen, "%s: %s", shown, why);
        o->top = (int)n;
        return 0;
    case OPT_TRACE:
        if (!*v) return errline(err, errlen, "%s: empty file name", shown);
        if (strlen(v) >= sizeof o->trace) return errline(err, errlen, "%s: path is too long", shown);
        snprintf(o->trace, sizeof o->trace, "%s", v);
        o->set |= LAUNCH_SET_TRACE;
        return 0;
    case OPT_PRINT_CONFIG: o->print_config = 1; return 0;
    case OPT_VERSION: o->version = 1; return 0;
    case OPT_HELP: o->help = 1; return 0;
    case OPT_NO_PYTHON:
    case OPT_MODULE: return 0; /* handled by the caller: they shape the program */
    }
    return errline(err, errlen, "%s: not handled", shown);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* The program is argv[from..argc-1], with "python3" (and "-m") in front for a
 * torchrun-style script.py or --module. */
static int set_program(launch_opts *o, int argc, char **argv, int from, int python, int module,
                       char *err, size_t errlen)
{
    int n = argc - from;
    if (n <= 0) return errline(err, errlen, "'--' must be followed by a program to run");
    if (!python && !module) {
        o->program = argv + from;
        o->program_argc = n;
        return 0;
    }
    int extra = module ? 2 : 1;
    o->program_storage = calloc((size_t)(n + extra + 1), sizeof(char *));
    if (!o->program_storage) return errline(err, errlen, "out of memory");
    static char python3[] = "python3", dash_m[] = "-m";
    o->program_storage[0] = python3;
    if (module) o->program_storage[1] = dash_m;
    for (int i = 0; i < n; i++) o->program_storage[extra + i] = argv[from + i];
    o->program = o->program_storage;
    o->program_argc = n + extra;
    return 0;
}

int launch_opts_parse(launch_opts *o, int argc, char **argv, char *err, size_t errlen)
{
    int no_python = 0, module = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            if (o->job_path)
                return errline(err, errlen, "give a job file or a program after '--', not both ('%s')",
                               o->job_path);
            return set_program(o, argc, argv, i + 1, 0, 0, err, errlen);
        }
        if (a[0] != '-' || !a[1]) {
            /* A positional word: a job file, or (torchrun's way) a script to run. */
            if (module || no_python || ends_with(a, ".py")) {
                if (o->job_path)
                    return errline(err, errlen, "give a job file or a program, not both ('%s', '%s')",
                                   o->job_path, a);
                return set_program(o, argc, argv, i, !no_python && !module ? 1 : 0, module, err,
                                   errlen);
            }
            if (o->job_path)
                return errline(err, errlen, "unexpected argument '%s' after the job file '%s'", a,
                               o->job_path);
            o->job_path = a;
            continue;
        }
        const opt_def *def;
        const char *value = NULL;
        char shown[80];
        if (a[1] == '-') {
            const char *eq = strchr(a, '=');
            size_t n = eq ? (size_t)(eq - a) : strlen(a);
            def = find_long(a + 2, n - 2);
            if (!def) return unknown_option(a, n, err, errlen);
            snprintf(shown, sizeof shown, "%.*s", (int)n, a);
            if (eq) {
                if (!def->takes_value)
                    return errline(err, errlen, "%s takes no value (got '%s')", shown, eq + 1);
                value = eq + 1;
            }
        } else {
            def = find_short(a[1]);
            if (!def) return errline(err, errlen, "unknown option '%s' (see dtrun --help)", a);
            snprintf(shown, sizeof shown, "-%c", a[1]);
            if (a[2]) {
                if (!def->takes_value) return errline(err, errlen, "unknown option '%s' (see dtrun --help)", a);
                value = a[2] == '=' ? a + 3 : a + 2;
            }
        }
        if (def->takes_value && !value) {
            if (i + 1 >= argc) return errline(err, errlen, "%s needs a value", shown);
            value = argv[++i];
        }
        if (def->id == OPT_NO_PYTHON) no_python = 1;
        if (def->id == OPT_MODULE) module = 1;
        if (apply(o, def->id, value ? value : "", shown, err, errlen)) return -1;
    }
    if (module) return errline(err, errlen, "-m/--module needs a module name after it");
    if (no_python) return errline(err, errlen, "--no-python needs a program after it");
    return 0;
}

int launch_opts_merge_job(launch_opts *o, const job_spec *job, char *err, size_t errlen)
{
    const job_launch *l = &job->launch;
    char why[256];
    const char *f = job->path[0] ? job->path : "job";
    if (!(o->set & LAUNCH_SET_NPROC) && l->nproc_per_node[0]) {
        if (apply(o, OPT_NPROC, l->nproc_per_node, "launch.nproc_per_node", why, sizeof why))
            return errline(err, errlen, "%s: %s", f, why);
    }
    if (!(o->set & LAUNCH_SET_NNODES) && l->nnodes[0]) {
        if (apply(o, OPT_NNODES, l->nnodes, "launch.nnodes", why, sizeof why))
            return errline(err, errlen, "%s: %s", f, why);
    }
    if (!(o->set & LAUNCH_SET_ENDPOINT) && l->rdzv_endpoint[0]) {
        if (apply(o, OPT_RDZV_ENDPOINT, l->rdzv_endpoint, "launch.rdzv_endpoint", why, sizeof why))
            return errline(err, errlen, "%s: %s", f, why);
    }
    if (!(o->set & LAUNCH_SET_RDZV_ID) && l->rdzv_id[0]) {
        if (apply(o, OPT_RDZV_ID, l->rdzv_id, "launch.rdzv_id", why, sizeof why))
            return errline(err, errlen, "%s: %s", f, why);
    }
    if (!(o->set & LAUNCH_SET_MAX_RESTARTS) && l->max_restarts >= 0) {
        if (l->max_restarts > 1000000)
            return errline(err, errlen, "%s: launch.max_restarts: %d is out of range (0..1000000)", f,
                           l->max_restarts);
        o->max_restarts = l->max_restarts;
        o->set |= LAUNCH_SET_MAX_RESTARTS;
    }
    if (!(o->set & LAUNCH_SET_LOG_DIR) && l->log_dir[0]) {
        if (apply(o, OPT_LOG_DIR, l->log_dir, "launch.log_dir", why, sizeof why))
            return errline(err, errlen, "%s: %s", f, why);
    }
    return 0;
}

void launch_opts_to_job(const launch_opts *o, job_spec *job)
{
    job_launch *l = &job->launch;
    if (o->set & LAUNCH_SET_NPROC) snprintf(l->nproc_per_node, sizeof l->nproc_per_node, "%s", o->nproc_spec);
    if (o->set & LAUNCH_SET_NNODES) {
        if (o->nnodes_min == o->nnodes_max) snprintf(l->nnodes, sizeof l->nnodes, "%d", o->nnodes_max);
        else snprintf(l->nnodes, sizeof l->nnodes, "%d:%d", o->nnodes_min, o->nnodes_max);
    }
    if (o->set & LAUNCH_SET_ENDPOINT) snprintf(l->rdzv_endpoint, sizeof l->rdzv_endpoint, "%s", o->rdzv_endpoint);
    if (o->set & LAUNCH_SET_RDZV_ID) snprintf(l->rdzv_id, sizeof l->rdzv_id, "%s", o->rdzv_id);
    if (o->set & LAUNCH_SET_MAX_RESTARTS) l->max_restarts = o->max_restarts;
    if (o->set & LAUNCH_SET_LOG_DIR) snprintf(l->log_dir, sizeof l->log_dir, "%s", o->log_dir);
    /* --trace is the job's log.trace given on the command line */
    if (o->set & LAUNCH_SET_TRACE) snprintf(job->log.trace, sizeof job->log.trace, "%s", o->trace);
}

/* ---- the machine ---- */

int launch_count_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int launch_count_gpus(void)
{
    /* No CUDA in lib/: CUDA_VISIBLE_DEVICES says what a process may use, the
     * driver's /proc entries say what exists. */
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis) {
        int n = 0;
        const char *p = vis;
        while (*p) {
            size_t len = strcspn(p, ",");
            /* CUDA stops at the first invalid entry, e.g. "-1" hides every GPU. */
            if (len == 0 || p[0] == '-') break;
            n++;
            p += len;
            if (*p == ',') p++;
        }
        return n;
    }
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* --trace FILE: absolute (the workers may not share the launcher's idea of the
 * current directory forever), in a directory that exists and is writable, so a
 * bad path is an error now and not after the training ran. */
static int finish_trace(launch_opts *o, char *err, size_t errlen)
{
    if (!(o->set & LAUNCH_SET_TRACE)) return 0;
    char abs[JOB_PATH_MAX], dir[JOB_PATH_MAX], cwd[JOB_PATH_MAX];
    if (o->trace[0] == '/') {
        snprintf(abs, sizeof abs, "%s", o->trace);
    } else {
        if (!getcwd(cwd, sizeof cwd)) return errline(err, errlen, "--trace %s: no current directory (%s)", o->trace,
                                                     strerror(errno));
        if ((size_t)snprintf(abs, sizeof abs, "%s/%s", cwd, o->trace) >= sizeof abs)
            return errline(err, errlen, "--trace %s: path is too long", o->trace);
    }
    snprintf(dir, sizeof dir, "%s", abs);
    char *slash = strrchr(dir, '/');
    if (slash == dir) dir[1] = 0;
    else if (slash) *slash = 0;
    if (slash && slash[1] == 0 && slash != dir) return errline(err, errlen, "--trace %s: names a directory", o->trace);
    if (access(dir, W_OK) != 0)
        return errline(err, errlen, "--trace %s: cannot write in %s (%s)", o->trace, dir, strerror(errno));
    snprintf(o->trace, sizeof o->trace, "%s", abs);
    return 0;
}

int launch_opts_finish(launch_opts *o, char *err, size_t errlen)
{
    if (finish_trace(o, err, errlen)) return -1;
    if (!strcmp(o->nproc_spec, "cpu")) {
        o->nproc = launch_count_cpus();
    } else if (!strcmp(o->nproc_spec, "gpu")) {
        o->nproc = launch_count_gpus();
        if (o->nproc == 0)
            return errline(err, errlen, "--nproc-per-node=gpu: this machine has no GPU that dtrun can "
                           "see (no /proc/driver/nvidia/gpus, or CUDA_VISIBLE_DEVICES hides them); "
                           "give a number or 'cpu'");
    } else if (!strcmp(o->nproc_spec, "auto")) {
        int g = launch_count_gpus();
        o->nproc = g > 0 ? g : 1;
    } else {
        o->nproc = atoi(o->nproc_spec);
    }
    if (o->nproc > LAUNCH_MAX_LOCAL) o->nproc = LAUNCH_MAX_LOCAL;

    if (o->standalone) {
        if (o->nnodes_max > 1)
            return errline(err, errlen, "--standalone runs one node, but --nnodes asks for %d%s%d",
                           o->nnodes_min, o->nnodes_min == o->nnodes_max ? "" : ":", o->nnodes_max);
        if (o->set & LAUNCH_SET_ENDPOINT)
            return errline(err, errlen, "--standalone starts its own rendezvous on a free port; "
                           "drop --rdzv-endpoint '%s' or --standalone", o->rdzv_endpoint);
    }
    if (!strcmp(o->rdzv_backend, "static")) {
        /* torchrun's static backend meets at MASTER_ADDR:MASTER_PORT and takes
         * the node rank from the command line. */
        if (!(o->set & LAUNCH_SET_ENDPOINT) && o->master_addr[0]) {
            snprintf(o->rdzv_host, sizeof o->rdzv_host, "%s", o->master_addr);
            o->rdzv_port = o->master_port ? o->master_port : LAUNCH_DEFAULT_RDZV_PORT;
            snprintf(o->rdzv_endpoint, sizeof o->rdzv_endpoint, "%s:%d", o->master_addr, o->rdzv_port);
            o->set |= LAUNCH_SET_ENDPOINT;
            /* the rendezvous owns that port now; workers get a free one */
            o->master_port = 0;
            o->set &= ~LAUNCH_SET_MASTER_PORT;
        }
        if (o->nnodes_max > 1 && o->node_rank < 0)
            return errline(err, errlen, "--rdzv-backend=static needs --node-rank when --nnodes is %d",
                           o->nnodes_max);
        if (o->nnodes_min != o->nnodes_max)
            return errline(err, errlen, "--rdzv-backend=static needs a fixed --nnodes, not %d:%d",
                           o->nnodes_min, o->nnodes_max);
    }
    if (o->node_rank >= 0 && o->node_rank >= o->nnodes_max)
        return errline(err, errlen, "--node-rank=%d is not below --nnodes=%d", o->node_rank,
                       o->nnodes_max);
    if (o->nnodes_max > 1 && !o->rdzv_host[0])
        return errline(err, errlen, "--nnodes=%d needs --rdzv-endpoint HOST[:PORT], where the "
                       "agents of all nodes meet", o->nnodes_max);
    if ((o->set & LAUNCH_SET_MASTER_ADDR) && !(o->set & LAUNCH_SET_MASTER_PORT) &&
        strcmp(o->rdzv_backend, "static"))
        return errline(err, errlen, "--master-addr needs --master-port as well (a port where the "
                       "workers' rank 0 listens)");
    if (!o->job_path && !o->program)
        return errline(err, errlen, "nothing to run: give a job file (dtrun job.yaml) or a program "
                       "(dtrun -- PROGRAM ARGS)");
    if (!o->rdzv_id[0]) {
        /* One node: any unique id. Several: they must agree, so the user (or
         * Slurm) names the run; "none" matches torchrun's default. */
        if (o->nnodes_max == 1) snprintf(o->rdzv_id, sizeof o->rdzv_id, "run-%ld", (long)getpid());
        else snprintf(o->rdzv_id, sizeof o->rdzv_id, "none");
    }
    return 0;
}

static void print_std(FILE *out, const char *name, const launch_std_spec *s)
{
    fprintf(out, "%s: ", name);
    int any = 0;
    for (int r = 0; r < LAUNCH_MAX_LOCAL; r++) {
        if (!s->in_map[r]) continue;
        fprintf(out, "%s%d:%d", any ? "," : "", r, s->by_rank[r]);
        any = 1;
    }
    if (!any) fprintf(out, "%d", (int)s->all);
    fputc('\n', out);
}

void launch_opts_print(const launch_opts *o, FILE *out)
{
    fprintf(out, "nproc_per_node: %d  # %s\n", o->nproc, o->nproc_spec);
    if (o->nnodes_min == o->nnodes_max) fprintf(out, "nnodes: %d\n", o->nnodes_max);
    else fprintf(out, "nnodes: %d:%d\n", o->nnodes_min, o->nnodes_max);
    fprintf(out, "node_rank: %d\n", o->node_rank);
    fprintf(out, "rdzv_backend: %s\n", o->rdzv_backend);
    if (o->rdzv_host[0])
        fprintf(out, "rdzv_endpoint: %s%s%s:%d\n", strchr(o->rdzv_host, ':') ? "[" : "", o->rdzv_host,
                strchr(o->rdzv_host, ':') ? "]" : "", o->rdzv_port);
    else fprintf(out, "rdzv_endpoint: \"\"  # this node, a free port\n");
    fprintf(out, "rdzv_id: %s\n", o->rdzv_id);
    fprintf(out, "rdzv_conf: join_timeout=%g,last_call_timeout=%g,close_timeout=%g,"
            "heartbeat_timeout=%g,keep_alive_interval=%g,read_timeout=%g\n",
            o->rdzv_conf.join_timeout, o->rdzv_conf.last_call_timeout, o->rdzv_conf.close_timeout,
            o->rdzv_conf.heartbeat_timeout, o->rdzv_conf.keep_alive_interval, o->rdzv_conf.read_timeout);
    fprintf(out, "standalone: %d\n", o->standalone);
    fprintf(out, "master_addr: \"%s\"\nmaster_port: %d\n", o->master_addr, o->master_port);
    fprintf(out, "max_restarts: %d\n", o->max_restarts);
    fprintf(out, "monitor_interval: %g\nterm_timeout: %g\n", o->monitor_interval, o->term_timeout);
    fprintf(out, "log_dir: \"%s\"\n", o->log_dir);
    print_std(out, "redirects", &o->redirects);
    print_std(out, "tee", &o->tee);
    fprintf(out, "role: %s\n", o->role);
}
