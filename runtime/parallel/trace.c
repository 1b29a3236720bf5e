/* trace.c — the per-process span recorder and the merge of the ranks' parts
 * (see trace.h). Parts are printed directly, one event per line (the names are
 * our own short labels, escaped all the same); the merge streams them and parses
 * only each part's last line, with cJSON. */
#include "runtime/parallel/trace.h"

#include <cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/util/clock.h"
#include "runtime/env.h"

typedef struct {
    double t0, t1;
    unsigned char lane;
    char name[47]; /* 64 bytes a span */
} span;

static const char *const LANE_NAMES[TRACE_LANES] = {"compute", "comm", "idle", "step"};

static struct {
    int on;
    char path[JOB_PATH_MAX];
    int rank;
    char label[128];
    span *spans;
    size_t n, cap;
    long dropped;
    int unit_open;       /* a unit's compute span is open */
    int unit, unit_bwd;
    double unit_t0;
    int step;            /* > 0 while a step span is open */
    double step_t0;
} T;

const char *trace_path_for(const job_spec *job)
{
    const char *env = dt_env_get()->trace;
    if (*env) return env;
    return job->log.trace;
}

int trace_open(const char *path, int rank, const char *label, char *err, size_t errlen)
{
    trace_close();
    if (strlen(path) >= sizeof T.path) {
        snprintf(err, errlen, "trace: %s: path is too long", path);
        return -1;
    }
    T.cap = 4096;
    if (!(T.spans = malloc(T.cap * sizeof *T.spans))) {
        snprintf(err, errlen, "trace: out of memory");
        return -1;
    }
    snprintf(T.path, sizeof T.path, "%s", path);
    snprintf(T.label, sizeof T.label, "%s", label ? label : "");
    T.rank = rank;
    T.on = 1;
    return 0;
}

int trace_on(void) { return T.on; }

void trace_close(void)
{
    free(T.spans);
    memset(&T, 0, sizeof T);
}

/* Room for one more span; 0 when the cap is reached (counted as dropped). */
static span *next_span(void)
{
    if (T.n == T.cap) {
        size_t cap = T.cap * 2 > TRACE_MAX_SPANS ? TRACE_MAX_SPANS : T.cap * 2;
        span *s = cap > T.cap ? realloc(T.spans, cap * sizeof *s) : NULL;
        if (!s) {
            T.dropped++;
            return NULL;
        }
        T.spans = s;
        T.cap = cap;
    }
    return &T.spans[T.n++];
}

static void vspan(trace_lane lane, double t0, double t1, const char *fmt, va_list ap)
{
    span *s = next_span();
    if (!s) return;
    s->t0 = t0;
    s->t1 = t1 > t0 ? t1 : t0;
    s->lane = (unsigned char)lane;
    vsnprintf(s->name, sizeof s->name, fmt, ap);
}

void trace_span(trace_lane lane, double t0, double t1, const char *fmt, ...)
{
    if (!T.on) return;
    va_list ap;
    va_start(ap, fmt);
    vspan(lane, t0, t1, fmt, ap);
    va_end(ap);
}

void trace_unit_close(void)
{
    if (!T.on || !T.unit_open) return;
    T.unit_open = 0;
    trace_span(TRACE_COMPUTE, T.unit_t0, clock_now_s(), "%s unit %d", T.unit_bwd ? "bwd" : "fwd", T.unit);
}

void trace_unit_open(int unit, int backward)
{
    if (!T.on) return;
    trace_unit_close();
    T.unit_open = 1;
    T.unit = unit;
    T.unit_bwd = backward;
    T.unit_t0 = clock_now_s();
}

void trace_step_begin(int step)
{
    if (!T.on) return;
    T.step = step;
    T.step_t0 = clock_now_s();
}

void trace_step_end(void)
{
    if (!T.on || T.step <= 0) return;
    trace_span(TRACE_STEP, T.step_t0, clock_now_s(), "step %d", T.step);
    T.step = 0;
}

void trace_part_path(const char *path, int rank, char *out, size_t n)
{
    size_t len = strlen(path);
    int stem = len > 5 && strcmp(path + len - 5, ".json") == 0 ? (int)(len - 5) : (int)len;
    snprintf(out, n, "%.*s.rank%d.json", stem, path, rank);
}

/* A JSON string body: quotes, backslashes and control characters escaped. */
static void put_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

int trace_write_part(double sync, char *err, size_t errlen)
{
    if (!T.on) return 0;
    char part[JOB_PATH_MAX + 32], host[256] = "";
    trace_part_path(T.path, T.rank, part, sizeof part);
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
    FILE *f = fopen(part, "w");
    if (!f) {
        snprintf(err, errlen, "trace: %s: cannot write (%s)", part, strerror(errno));
        return -1;
    }
    int R = T.rank;
    fprintf(f, "{\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"rank %d (",
            R, R);
    put_str(f, T.label);
    fprintf(f, ")\"}},\n{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}}", R, R);
    for (int l = 0; l < TRACE_LANES; l++)
        fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}}", R, l,
                LANE_NAMES[l]);
    for (size_t i = 0; i < T.n; i++) {
        const span *s = &T.spans[i];
        fprintf(f, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"cat\":\"%s\",\"name\":\"", R, s->lane, LANE_NAMES[s->lane]);
        put_str(f, s->name);
        fprintf(f, "\",\"ts\":%.3f,\"dur\":%.3f}", s->t0 * 1e6, (s->t1 - s->t0) * 1e6);
    }
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":%d,\"host\":\"", R);
    put_str(f, host);
    fprintf(f, "\",\"clock\":\"CLOCK_MONOTONIC\",\"sync_us\":%.3f,\"spans\":%zu,\"dropped\":%ld}}\n", sync * 1e6, T.n,
            T.dropped);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        snprintf(err, errlen, "trace: %s: write failed (%s)", part, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- the merge (rank 0) ----
 *
 * Streamed, line by line: a long run of many ranks makes parts of millions of
 * spans, more than a parsed tree of all of them would fit in rank 0's memory.
 * A part is what trace_write_part prints: the header line, one event per line
 * (a "," after all but the last), and a last line "],...,"otherData":{...}}"
 * that only a completely written part has. Only that last line is parsed
 * (cJSON); in event lines only the number after "ts": is rewritten. */

typedef struct {
    int ok;            /* a complete part */
    char host[256];
    double sync_us;
    long dropped;
    double min_ts;     /* smallest ts, -1 when none */
} part_info;

static double num_at(const cJSON *o, const char *key, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *str_at(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* An event line without the ',' between events (the writer ends lines with it)
 * and the newline, or NULL for the header, the tail or anything else. */
static char *event_of(char *line)
{
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ',')) line[--n] = 0;
    if (*line == ',') line++, n--;
    return n >= 2 && line[0] == '{' && line[n - 1] == '}' ? line : NULL;
}

/* Where the ts number starts in an event line, or NULL. */
static char *ts_of(char *ev)
{
    char *p = strstr(ev, "\"ts\":");
    return p ? p + 5 : NULL;
}

/* Pass 1 over a part: complete? its host, sync, dropped count, smallest ts. */
static void scan_part(const char *path, part_info *pi)
{
    memset(pi, 0, sizeof *pi);
    pi->min_ts = -1;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    int first = 1;
    while (getline(&line, &cap, f) > 0) {
        if (first) {
            first = 0;
            if (strncmp(line, "{\"traceEvents\":[", 16)) break;
            continue;
        }
        if (!strncmp(line, "],", 2)) { /* the tail, read as {"displayTimeUnit":..,"otherData":{..}} */
            line[1] = '{';
            cJSON *t = cJSON_Parse(line + 1);
            const cJSON *o = cJSON_GetObjectItemCaseSensitive(t, "otherData");
            if (cJSON_IsObject(o)) {
                snprintf(pi->host, sizeof pi->host, "%s", str_at(o, "host"));
                pi->sync_us = num_at(o, "sync_us", 0);
                pi->dropped = (long)num_at(o, "dropped", 0);
                pi->ok = 1;
            }
            cJSON_Delete(t);
            break;
        }
        char *ev = event_of(line), *ts = ev ? ts_of(ev) : NULL;
        if (!ev) break; /* not a line of ours: the part is not complete */
        if (ts) {
            double v = strtod(ts, NULL);
            if (pi->min_ts < 0 || v < pi->min_ts) pi->min_ts = v;
        }
    }
    free(line);
    fclose(f);
}

/* Pass 2: the part's events into out, each ts moved by shift. */
static int copy_part(const char *path, double shift, FILE *out, int *first_out)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        if (!strncmp(line, "],", 2)) break;
        char *ev = event_of(line), *ts = ev ? ts_of(ev) : NULL;
        if (!ev) continue; /* the header */
        fputs(*first_out ? "\n" : ",\n", out);
        *first_out = 0;
        if (!ts) {
            fputs(ev, out);
            continue;
        }
        char *end;
        double v = strtod(ts, &end);
        fprintf(out, "%.*s%.3f%s", (int)(ts - ev), ev, v + shift, end);
    }
    free(line);
    fclose(f);
    return 0;
}

/* Appends ", r" to the note. */
static void note_rank(char *note, size_t n, int r)
{
    size_t at = strlen(note);
    if (at < n) snprintf(note + at, n - at, "%s%d", at ? ", " : "", r);
}

int trace_merge(const char *path, int world, char *note, size_t notelen, char *err, size_t errlen)
{
    char part[JOB_PATH_MAX + 32], tmp[JOB_PATH_MAX + 16];
    if (note && notelen) note[0] = 0;
    part_info *pi = calloc((size_t)world, sizeof *pi);
    if (!pi) {
        snprintf(err, errlen, "trace: out of memory merging %s", path);
        return -1;
    }
    int n_ok = 0, same_host = 1, ref = -1;
    long dropped = 0;
    for (int r = 0; r < world; r++) {
        trace_part_path(path, r, part, sizeof part);
        scan_part(part, &pi[r]);
        if (!pi[r].ok) {
            if (note) note_rank(note, notelen, r);
            continue;
        }
        if (ref < 0) ref = r;
        else if (strcmp(pi[ref].host, pi[r].host)) same_host = 0;
        dropped += pi[r].dropped;
        n_ok++;
    }
    /* One host: one CLOCK_MONOTONIC, times as they are. Several: each part's
     * clock is moved so the barrier's release falls at the first part's. Then
     * the whole run is moved to start at 0. */
    double base = -1;
    for (int r = 0; r < world; r++) {
        if (!pi[r].ok || pi[r].min_ts < 0) continue;
        double shift = same_host ? 0 : pi[ref].sync_us - pi[r].sync_us;
        if (base < 0 || pi[r].min_ts + shift < base) base = pi[r].min_ts + shift;
    }
    if (base < 0) base = 0;
    /* Written aside and renamed: a reader never sees half a trace. */
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    int ok = out != NULL, first = 1;
    if (ok) fputs("{\"traceEvents\":[", out);
    for (int r = 0; ok && r < world; r++) {
        if (!pi[r].ok) continue;
        trace_part_path(path, r, part, sizeof part);
        double shift = same_host ? 0 : pi[ref].sync_us - pi[r].sync_us;
        if (copy_part(part, shift - base, out, &first) != 0) {
            pi[r].ok = 0;
            n_ok--;
            if (note) note_rank(note, notelen, r);
        }
    }
    if (ok) {
        fprintf(out, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"dtrun --trace\",\"world\":%d,"
                     "\"ranks_merged\":%d,\"clock\":\"%s\",\"t0_us\":%.3f,\"dropped_spans\":%ld}}\n",
                world, n_ok, same_host ? "CLOCK_MONOTONIC of one host" : "per-host CLOCK_MONOTONIC aligned at a barrier",
                base, dropped);
        ok = !ferror(out);
    }
    if (out && fclose(out) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, errlen, "trace: %s: cannot write (%s)", path, strerror(errno));
        unlink(tmp);
        free(pi);
        return -1;
    }
    for (int r = 0; r < world; r++) {
        if (!pi[r].ok) continue;
        trace_part_path(path, r, part, sizeof part);
        unlink(part);
    }
    free(pi);
    return 0;
}
