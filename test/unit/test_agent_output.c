/* test_agent_output.c — worker output: prefixes, partial and long lines, log
 * files verbatim, the tail kept for the failure report; the worker environment. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/launch/agent_env.h"
#include "lib/launch/agent_output.h"
#include "test/unit/check.h"

static size_t slurp(FILE *f, char *buf, size_t cap)
{
    fflush(f);
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    return n;
}

static size_t slurp_path(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) { buf[0] = 0; return 0; }
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
    return n;
}

static void test_lines(void)
{
    char dir[] = "/tmp/dtrun-test-out-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "temp dir");
    char out_path[256], err_path[256];
    snprintf(out_path, sizeof out_path, "%s/run/attempt_0/3/stdout.log", dir);
    snprintf(err_path, sizeof err_path, "%s/run/attempt_0/3/stderr.log", dir);
    FILE *con_out = tmpfile(), *con_err = tmpfile();
    agent_output_cfg cfg = {.console = {con_out, NULL}, .file = {out_path, err_path}};
    snprintf(cfg.prefix, sizeof cfg.prefix, "[default/3]:");
    char err[512] = "";
    agent_output *o = agent_output_open(&cfg, err, sizeof err);
    CHECK(o != NULL, "open with nested log directories: %s", err);
    if (!o) return;
    agent_output_write(o, AGENT_STDOUT, "hel", 3);
    agent_output_write(o, AGENT_STDOUT, "lo\nwor", 6);
    agent_output_write(o, AGENT_STDERR, "oops\r\n", 6);
    agent_output_write(o, AGENT_STDOUT, "ld\n\nlast", 8);
    char buf[8192];
    slurp(con_out, buf, sizeof buf);
    CHECK(!strcmp(buf, "[default/3]:hello\n[default/3]:world\n[default/3]:\n"),
          "complete lines only, each prefixed");
    agent_output_flush(o);
    slurp(con_out, buf, sizeof buf);
    CHECK(strstr(buf, "[default/3]:last\n") != NULL, "flush emits the partial line");
    slurp(con_err, buf, sizeof buf);
    CHECK(buf[0] == 0, "stderr not shown when its console is NULL");
    FILE *rep = tmpfile();
    int n = agent_output_print_tail(o, rep, "  ");
    slurp(rep, buf, sizeof buf);
    CHECK(n == 5 && !strcmp(buf, "  [default/3]:hello\n  [default/3]:oops\n  [default/3]:world\n"
                                 "  [default/3]:\n  [default/3]:last\n"),
          "tail keeps both streams in order (%d lines)", n);
    agent_output_close(o);
    slurp_path(out_path, buf, sizeof buf);
    CHECK(!strcmp(buf, "hello\nworld\n\nlast"), "stdout.log is verbatim");
    slurp_path(err_path, buf, sizeof buf);
    CHECK(!strcmp(buf, "oops\r\n"), "stderr.log is verbatim");
    fclose(con_out);
    fclose(con_err);
    fclose(rep);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

static void test_tail_and_long_lines(void)
{
    FILE *con = tmpfile();
    agent_output_cfg cfg = {.console = {con, con}};
    snprintf(cfg.prefix, sizeof cfg.prefix, "[r/0]:");
    char err[256];
    agent_output *o = agent_output_open(&cfg, err, sizeof err);
    for (int i = 0; i < 100; i++) {
        char line[32];
        int n = snprintf(line, sizeof line, "line %d\n", i);
        agent_output_write(o, i % 2, line, (size_t)n);
    }
    FILE *rep = tmpfile();
    char buf[8192];
    int n = agent_output_print_tail(o, rep, "");
    slurp(rep, buf, sizeof buf);
    CHECK(n == AGENT_OUTPUT_TAIL_LINES && strstr(buf, "[r/0]:line 80\n") == buf && strstr(buf, "line 99\n"),
          "only the last %d lines are kept", AGENT_OUTPUT_TAIL_LINES);
    size_t big = AGENT_OUTPUT_LINE_MAX * 2 + 10;
    char *long_line = malloc(big);
    memset(long_line, 'x', big);
    rewind(con);
    CHECK(ftruncate(fileno(con), 0) == 0, "truncate");
    agent_output_write(o, AGENT_STDOUT, long_line, big);
    agent_output_flush(o);
    fflush(con);
    long size = ftell(con);
    CHECK(size == (long)(big + 3 * (6 + 1)), "an endless line is cut into pieces, nothing lost (%ld)", size);
    free(long_line);
    agent_output_close(o);
    fclose(rep);
    fclose(con);
    agent_output_cfg bad = {.file = {"/proc/nonexistent/x/stdout.log", NULL}};
    CHECK(agent_output_open(&bad, err, sizeof err) == NULL && strstr(err, "/proc/nonexistent/x"),
          "an uncreatable log says where: %s", err);
}

/* A worker's live progress line (log.progress): a carriage return starts the
 * line over, the line so far is redrawn behind the prefix, and any complete
 * line on either console erases it first; CRLF stays a line end; the tail keeps
 * only what was finally on the line. */
static void test_live_lines(void)
{
    FILE *out = tmpfile(), *err = tmpfile();
    agent_output_cfg cfg = {.console = {out, err}};
    snprintf(cfg.prefix, sizeof cfg.prefix, "[r/0]:");
    char e[256];
    agent_output *o = agent_output_open(&cfg, e, sizeof e);
    CHECK(o != NULL, "open: %s", e);
    if (!o) return;
    agent_output_write(o, AGENT_STDOUT, "\r\033[Kstep 1", 10);
    agent_output_write(o, AGENT_STDOUT, "\r\033[Kstep 2", 10);
    char buf[4096];
    slurp(out, buf, sizeof buf);
    CHECK(!strcmp(buf, "\r\033[K[r/0]:step 1\r\033[K[r/0]:step 2"), "each redraw replaces the line [%s]", buf);
    agent_output_write(o, AGENT_STDERR, "warning: x\n", 11);
    slurp(out, buf, sizeof buf);
    CHECK(strlen(buf) > 4 && !strcmp(buf + strlen(buf) - 4, "\r\033[K"), "a line on stderr erases the live line on stdout first [%s]", buf);
    slurp(err, buf, sizeof buf);
    CHECK(!strcmp(buf, "[r/0]:warning: x\n"), "the stderr line itself [%s]", buf);
    agent_output_write(o, AGENT_STDOUT, "\r\033[Kstep 3\r", 11); /* a CR at the end of a piece ... */
    agent_output_write(o, AGENT_STDOUT, "\033[Kstep 4\n", 10);    /* ... starts the line over */
    agent_output_write(o, AGENT_STDOUT, "crlf\r\n", 6);
    slurp(out, buf, sizeof buf);
    CHECK(strstr(buf, "\r\033[K[r/0]:step 4\n[r/0]:crlf\n") != NULL && !strstr(buf, "step 3step") &&
              !strstr(buf, "[r/0]:\033"),
          "a final line erases the live one and is printed once, clean [%s]", buf);
    FILE *rep = tmpfile();
    int n = agent_output_print_tail(o, rep, "");
    slurp(rep, buf, sizeof buf);
    CHECK(n == 3 && !strcmp(buf, "[r/0]:warning: x\n[r/0]:step 4\n[r/0]:crlf\n"), "the tail holds final lines only [%s]", buf);
    agent_output_close(o);
    fclose(out);
    fclose(err);
    fclose(rep);
}

static void test_env(void)
{
    char *base[] = {"PATH=/bin", "RANK=99", "HOME=/root", "OMP_NUM_THREADS=5", NULL};
    agent_env_info in = {
        .role = "default", .local_rank = 2, .local_world_size = 4, .rank = 6, .world_size = 8,
        .group_rank = 1, .group_world_size = 2, .role_rank = 6, .role_world_size = 8,
        .master_addr = "10.0.0.1", .master_port = 1234, .restart_count = 1, .max_restarts = 3,
        .run_id = "job7", .rdzv_host = "::1", .rdzv_port = 29400, .token = "tok",
        .kv_prefix = "round2/", .omp_threads = 4,
    };
    char **env = agent_env_build(base, &in);
    CHECK(env != NULL, "built");
    if (!env) return;
    struct { const char *name, *want; } want[] = {
        {"RANK", "6"}, {"DTRUN_RANK", "6"}, {"LOCAL_RANK", "2"}, {"WORLD_SIZE", "8"},
        {"LOCAL_WORLD_SIZE", "4"}, {"GROUP_RANK", "1"}, {"GROUP_WORLD_SIZE", "2"},
        {"ROLE_RANK", "6"}, {"ROLE_WORLD_SIZE", "8"}, {"ROLE_NAME", "default"},
        {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "1234"}, {"DTRUN_MASTER_PORT", "1234"},
        {"TORCHELASTIC_RESTART_COUNT", "1"}, {"TORCHELASTIC_MAX_RESTARTS", "3"},
        {"TORCHELASTIC_RUN_ID", "job7"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"},
        {"DTRUN_RDZV_HOST", "::1"}, {"DTRUN_RDZV_PORT", "29400"}, {"DTRUN_RDZV_TOKEN", "tok"},
        {"DTRUN_KV_ENDPOINT", "[::1]:29400"}, {"DTRUN_KV_PREFIX", "round2/"},
        {"OMP_NUM_THREADS", "5"}, {"PATH", "/bin"}, {"HOME", "/root"}, {"DTRUN_STDOUT_TTY", "0"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *v = agent_env_get(env, want[i].name);
        CHECK(v && !strcmp(v, want[i].want), "%s=%s (got %s)", want[i].name, want[i].want, v ? v : "unset");
    }
    int ranks = 0;
    for (char **e = env; *e; e++) ranks += !strncmp(*e, "RANK=", 5);
    CHECK(ranks == 1, "the agent's own RANK is replaced, not repeated");
    agent_env_free(env);
    char *bare[] = {NULL};
    env = agent_env_build(bare, &in);
    CHECK(env && !strcmp(agent_env_get(env, "OMP_NUM_THREADS"), "4"), "OMP_NUM_THREADS when unset");
    agent_env_free(env);
}

int main(void)
{
    test_lines();
    test_tail_and_long_lines();
    test_live_lines();
    test_env();
    CHECK_DONE();
}
