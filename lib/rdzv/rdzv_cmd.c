/* rdzv_cmd.c — `dtrun rdzv`: the standalone rendezvous daemon (see rdzv_cmd.h).
 * The daemon runs on its own thread (rdzv_server_start); this thread only
 * waits for a terminating signal, so no handler ever races the server. */
#include "lib/rdzv/rdzv_cmd.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/rdzv/rdzv.h"
#include "lib/util/cmdline.h"
#include "lib/util/errline.h"
#include "lib/util/range.h"

static const char USAGE[] =
    "usage: dtrun rdzv --listen HOST:PORT [--token-file FILE | --token T] [--nnodes MIN[:MAX]] [--min-nodes N]\n"
    "       [--max-nodes M] [--join-timeout S] [--last-call S] [--heartbeat-timeout S] [--run-id ID]\n"
    "       [--rdzv-id ID] [--port-file FILE] [--quiet]\n"
    "Runs the rendezvous daemon and KV store until SIGINT/SIGTERM/SIGHUP. PORT 0 picks a free port;\n"
    "the first line on stdout says which. The token defaults to $DTRUN_RDZV_TOKEN; --token-file\n"
    "reads it from the first line of FILE. --token shows it to every user in ps: prefer the others.\n";

/* One line: "dtrun rdzv: WHAT (dtrun rdzv --help)". */
static int usage_error(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "dtrun rdzv: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (dtrun rdzv --help)\n");
    return DT_EXIT_USAGE;
}

/* "--join_timeout" and "--join-timeout" are the same option, as in torchrun. */
static int opt_is(const char *arg, const char *name, size_t *vlen)
{
    size_t n = strlen(name);
    if (strncmp(arg, "--", 2) != 0) return 0;
    for (size_t i = 0; i < n; i++) {
        char a = arg[2 + i], b = name[i];
        if (a == '_') a = '-';
        if (a != b) return 0;
    }
    char end = arg[2 + n];
    if (end != '\0' && end != '=') return 0;
    *vlen = end == '=' ? 1 : 0;
    return 1;
}

static int parse_secs(const char *s, int *ms)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || v <= 0 || v > 7 * 86400) return -1;
    *ms = (int)(v * 1000 + 0.5);
    if (*ms < 1) *ms = 1;
    return 0;
}

/* The token from the first line of path (a secret kept out of ps and
 * /proc/PID/cmdline): 0, or -1 with one line in err. */
static int read_token_file(const char *path, char *out, size_t n, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) return errline(err, errlen, "cannot read '%s': %s", path, strerror(errno));
    char line[RDZV_MAX_NAME + 2];
    int ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (ok) line[strcspn(line, "\r\n")] = 0;
    if (!ok || !line[0]) return errline(err, errlen, "'%s': the first line is empty (it holds the token)", path);
    if (strlen(line) >= n) return errline(err, errlen, "'%s': the token is longer than %zu bytes", path, n - 1);
    snprintf(out, n, "%s", line);
    return 0;
}

int rdzv_command(int argc, char **argv)
{
    const char *listen = NULL, *token = getenv("DTRUN_RDZV_TOKEN"), *run_id = NULL, *port_file = NULL;
    long min_nodes = 1, max_nodes = 1;
    int have_min = 0, have_max = 0, quiet = 0;
    rdzv_server_opts o = { 0 };
    static char file_token[RDZV_MAX_NAME];
    char err_tok[600];
    static const char *const names[] = { "listen", "token", "rdzv-id", "run-id", "nnodes", "min-nodes", "max-nodes",
                                         "join-timeout", "last-call", "heartbeat-timeout", "port-file",
                                         "token-file" };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cmdline_is_help(a)) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) { quiet = 1; continue; }
        int which = -1;
        size_t eq = 0;
        for (size_t k = 0; k < sizeof names / sizeof *names; k++)
            if (opt_is(a, names[k], &eq)) { which = (int)k; break; }
        if (which < 0) return cmdline_unknown_option("rdzv", a, USAGE);
        const char *v;
        if (eq) v = strchr(a, '=') + 1;
        else if (i + 1 < argc) v = argv[++i];
        else return usage_error("option '%s' needs a value%s", a, "");
        long n;
        switch (which) {
        case 0: listen = v; break;
        case 1: case 2: token = v; break;
        case 3: run_id = v; break;
        case 4: {
            /* MIN > MAX parses here: the check below names both numbers. */
            int lo, hi, rc = range_parse(v, 1, RDZV_MAX_NODES, &lo, &hi, NULL, 0);
            if (rc != RANGE_OK && rc != RANGE_MIN_OVER_MAX)
                return usage_error("--nnodes '%s': expected N or MIN:MAX with 1 <= MIN <= MAX <= 4096%s", v, "");
            min_nodes = lo;
            max_nodes = hi;
            have_min = have_max = 1;
            break;
        }
        case 5: if (range_parse_long(v, 1, RDZV_MAX_NODES, &n, NULL, 0) != 0) return usage_error("--min-nodes '%s': expected 1-4096%s", v, "");
                min_nodes = n; have_min = 1; break;
        case 6: if (range_parse_long(v, 1, RDZV_MAX_NODES, &n, NULL, 0) != 0) return usage_error("--max-nodes '%s': expected 1-4096%s", v, "");
                max_nodes = n; have_max = 1; break;
        case 7: if (parse_secs(v, &o.join_timeout_ms)) return usage_error("--join-timeout '%s': expected seconds > 0%s", v, ""); break;
        case 8: if (parse_secs(v, &o.last_call_ms)) return usage_error("--last-call '%s': expected seconds > 0%s", v, ""); break;
        case 9: if (parse_secs(v, &o.hb_timeout_ms)) return usage_error("--heartbeat-timeout '%s': expected seconds > 0%s", v, ""); break;
        case 10: port_file = v; break;
        case 11:
            if (read_token_file(v, file_token, sizeof file_token, err_tok, sizeof err_tok) != 0)
                return usage_error("--token-file: %s%s", err_tok, "");
            token = file_token;
            break;
        }
    }
    if (!listen) return usage_error("--listen HOST:PORT is required%s%s", "", "");
    if (have_min && !have_max) max_nodes = min_nodes;
    if (have_max && !have_min) min_nodes = max_nodes;
    if (min_nodes > max_nodes) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%ld", min_nodes);
        snprintf(b, sizeof b, "%ld", max_nodes);
        return usage_error("min nodes %s exceeds max nodes %s", a, b);
    }
    char host[RDZV_MAX_NAME], err[600];
    int port;
    if (rdzv_endpoint_parse(listen, -1, host, sizeof host, &port, err, sizeof err) != 0)
        return usage_error("--listen: %s%s", err, "");
    if (port < 0) return usage_error("--listen '%s': a port is required (0 = any free port)%s", listen, "");
    if (o.hb_timeout_ms) {
        o.hb_interval_ms = o.hb_timeout_ms / 5;
        if (o.hb_interval_ms < 1) o.hb_interval_ms = 1;
    }
    o.host = host;
    o.port = port;
    o.token = token ? token : "";
    o.run_id = run_id;
    o.min_nodes = (int)min_nodes;
    o.max_nodes = (int)max_nodes;
    o.log = quiet ? NULL : stderr;

    /* Block the terminating signals before the server thread exists, so only
     * sigwait below receives them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    rdzv_server *s = rdzv_server_start(&o, err, sizeof err);
    if (!s) {
        fprintf(stderr, "dtrun rdzv: %s\n", err);
        return DT_EXIT_FAIL;
    }
    if (port_file) {
        FILE *f = fopen(port_file, "w");
        int bad = !f || fprintf(f, "%d\n", rdzv_server_port(s)) < 0;
        if (f && fclose(f) != 0) bad = 1;
        if (bad) {
            fprintf(stderr, "dtrun rdzv: cannot write --port-file %s\n", port_file);
            rdzv_server_stop(s);
            return DT_EXIT_USAGE;
        }
    }
    printf(strchr(host, ':') ? "dtrun rdzv: listening on [%s]:%d\n" : "dtrun rdzv: listening on %s:%d\n", host,
           rdzv_server_port(s));
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    if (!quiet) fprintf(stderr, "dtrun rdzv: %s, stopping\n", strsignal(sig));
    rdzv_server_stop(s);
    return 0;
}
