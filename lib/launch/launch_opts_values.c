/* launch_opts_values.c — dtrun's option values one at a time: counts, seconds,
 * hosts and endpoints, identifiers, --redirects/--tee maps, rank filters and
 * --rdzv-conf. Each parser answers with a reason that does not name the option;
 * the caller (launch_opts.c) prefixes it. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/suggest.h"
#include "lib/launch/launch_opts_internal.h"
#include "lib/util/errline.h"
#include "lib/util/range.h"

int launch_parse_seconds(const char *s, double lo, double *out, char *err, size_t errlen)
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
int launch_parse_ident(const char *s, char *out, size_t outlen, char *err, size_t errlen)
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

int launch_parse_host(const char *s, char *out, size_t outlen, char *err, size_t errlen)
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
    if (launch_parse_host(tmp, host, hostlen, why, sizeof why)) return errline(err, errlen, "%s", why);
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

int launch_parse_ranks_filter(const char *s, unsigned char *filter, char *err, size_t errlen)
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

int launch_parse_rdzv_conf(const char *s, launch_rdzv_conf *c, char *err, size_t errlen)
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
            if (launch_parse_seconds(val, 0.001, slot, why, sizeof why))
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

