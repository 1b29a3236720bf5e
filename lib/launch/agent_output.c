/* agent_output.c — line splitting, prefixes, log files and the tail ring. */
#include "lib/launch/agent_output.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAIL_LINE_MAX 512  /* bytes of each line kept for the report */

typedef struct {
    char *buf;             /* the partial line */
    size_t len;
    int fd;                /* log file or -1 */
    int rewritten;         /* a carriage return started the partial line over: a live line */
} stream_state;

struct agent_output {
    agent_output_cfg cfg;
    stream_state s[2];
    char tail[AGENT_OUTPUT_TAIL_LINES][TAIL_LINE_MAX];
    int tail_next;         /* ring index of the next line */
    int tail_count;
};

int agent_mkdirs(const char *path)
{
    char tmp[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp) { errno = ENAMETOOLONG; return -1; }
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] != '/' && tmp[i] != 0) continue;
        char c = tmp[i];
        tmp[i] = 0;
        if (mkdir(tmp, 0775) != 0 && errno != EEXIST) return -1;
        tmp[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
}

static int open_log(const char *path, char *err, size_t errlen)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        if (agent_mkdirs(dir) != 0) {
            snprintf(err, errlen, "cannot create log directory %s: %s", dir, strerror(errno));
            return -1;
        }
    }
    /* O_CLOEXEC: the next worker spawned must not inherit this one's log. */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0664);
    if (fd < 0) snprintf(err, errlen, "cannot create log file %s: %s", path, strerror(errno));
    return fd;
}

agent_output *agent_output_open(const agent_output_cfg *cfg, char *err, size_t errlen)
{
    agent_output *o = calloc(1, sizeof *o);
    if (!o) { snprintf(err, errlen, "out of memory"); return NULL; }
    o->cfg = *cfg;
    for (int i = 0; i < 2; i++) {
        o->s[i].fd = -1;
        o->cfg.file[i] = NULL; /* the caller's strings need not outlive this call */
        if (cfg->file[i]) {
            o->s[i].fd = open_log(cfg->file[i], err, errlen);
            if (o->s[i].fd < 0) { agent_output_close(o); return NULL; }
        }
        o->s[i].buf = malloc(AGENT_OUTPUT_LINE_MAX);
        if (!o->s[i].buf) { snprintf(err, errlen, "out of memory"); agent_output_close(o); return NULL; }
    }
    return o;
}

static void write_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return; /* a full disk must not stop the job; the console still has it */
        }
        buf += w;
        n -= (size_t)w;
    }
}

/* The console a worker's live line is drawn on (no newline yet), or NULL.
 * One for the agent: any line printed to either console clears it first, so
 * lines never land behind the progress text. */
static FILE *live_console;

static void clear_live_line(void)
{
    if (!live_console) return;
    fputs("\r\033[K", live_console);
    fflush(live_console);
    live_console = NULL;
}

/* The text after the terminal's erase-line code a live line starts with. */
static const char *after_erase(const char *line, size_t *n)
{
    if (*n >= 3 && !memcmp(line, "\033[K", 3)) {
        *n -= 3;
        return line + 3;
    }
    return line;
}

/* A live line (log.progress): rewritten in place on the console, as the
 * worker would on its own terminal, behind the prefix. */
static void draw_live_line(agent_output *o, int stream)
{
    FILE *con = o->cfg.console[stream];
    stream_state *s = &o->s[stream];
    if (!con || !s->rewritten || s->len == 0) return;
    if (live_console && live_console != con) clear_live_line();
    size_t n = s->len;
    const char *text = after_erase(s->buf, &n);
    fputs("\r\033[K", con);
    if (!o->cfg.bare[stream]) fputs(o->cfg.prefix, con);
    fwrite(text, 1, n, con);
    live_console = con;
}

static void emit_line(agent_output *o, int stream, const char *line, size_t n)
{
    FILE *con = o->cfg.console[stream];
    line = after_erase(line, &n);
    o->s[stream].rewritten = 0;
    if (con) {
        clear_live_line();
        if (!o->cfg.bare[stream]) fputs(o->cfg.prefix, con);
        fwrite(line, 1, n, con);
        fputc('\n', con);
    }
    char *slot = o->tail[o->tail_next];
    size_t keep = n < TAIL_LINE_MAX - 1 ? n : TAIL_LINE_MAX - 1;
    memcpy(slot, line, keep);
    slot[keep] = 0;
    o->tail_next = (o->tail_next + 1) % AGENT_OUTPUT_TAIL_LINES;
    if (o->tail_count < AGENT_OUTPUT_TAIL_LINES) o->tail_count++;
}

void agent_output_write(agent_output *o, int stream, const char *buf, size_t n)
{
    if (!o || (stream != AGENT_STDOUT && stream != AGENT_STDERR) || n == 0) return;
    stream_state *s = &o->s[stream];
    if (s->fd >= 0) write_all(s->fd, buf, n);
    /* a carriage return that ended the last piece and is not a CRLF's */
    if (s->len > 0 && s->buf[s->len - 1] == '\r' && buf[0] != '\n') {
        s->len = 0;
        s->rewritten = 1;
    }
    size_t i = 0;
    while (i < n) {
        /* the next newline, or carriage return not followed by one: a worker
         * redrawing its line (log.progress) starts it over */
        size_t end = i;
        while (end < n && buf[end] != '\n' && !(buf[end] == '\r' && end + 1 < n && buf[end + 1] != '\n')) end++;
        size_t chunk = end - i;
        size_t room = AGENT_OUTPUT_LINE_MAX - s->len;
        if (chunk > room) {
            /* An endless line: emit what fits as a line of its own. */
            memcpy(s->buf + s->len, buf + i, room);
            emit_line(o, stream, s->buf, AGENT_OUTPUT_LINE_MAX);
            s->len = 0;
            i += room;
            continue;
        }
        memcpy(s->buf + s->len, buf + i, chunk);
        s->len += chunk;
        i += chunk;
        if (end == n) break;
        if (buf[end] == '\r') { /* the line so far is drawn over */
            s->len = 0;
            s->rewritten = 1;
            i++;
            continue;
        }
        size_t len = s->len;
        if (len > 0 && s->buf[len - 1] == '\r') len--;
        emit_line(o, stream, s->buf, len);
        s->len = 0;
        i++;
    }
    draw_live_line(o, stream);
    if (o->cfg.console[stream]) fflush(o->cfg.console[stream]);
}

int agent_output_console_is_terminal(const agent_output *o, int stream)
{
    FILE *con = o && (stream == AGENT_STDOUT || stream == AGENT_STDERR) ? o->cfg.console[stream] : NULL;
    return con && isatty(fileno(con));
}

void agent_output_flush(agent_output *o)
{
    if (!o) return;
    for (int i = 0; i < 2; i++) {
        if (o->s[i].len == 0) continue;
        emit_line(o, i, o->s[i].buf, o->s[i].len);
        o->s[i].len = 0;
        if (o->cfg.console[i]) fflush(o->cfg.console[i]);
    }
}

int agent_output_print_tail(const agent_output *o, FILE *out, const char *indent)
{
    if (!o) return 0;
    int first = (o->tail_next - o->tail_count + AGENT_OUTPUT_TAIL_LINES) % AGENT_OUTPUT_TAIL_LINES;
    for (int i = 0; i < o->tail_count; i++)
        fprintf(out, "%s%s%s\n", indent, o->cfg.prefix, o->tail[(first + i) % AGENT_OUTPUT_TAIL_LINES]);
    return o->tail_count;
}

void agent_output_close(agent_output *o)
{
    if (!o) return;
    agent_output_flush(o);
    for (int i = 0; i < 2; i++) {
        if (o->s[i].fd >= 0) close(o->s[i].fd);
        free(o->s[i].buf);
    }
    free(o);
}
