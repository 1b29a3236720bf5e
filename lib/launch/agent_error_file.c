/* agent_error_file.c — torchrun's TORCHELASTIC_ERROR_FILE for a program's workers.
 *
 * torchrun gives every worker a file of its own in TORCHELASTIC_ERROR_FILE, and
 * PyTorch's @record (torch.distributed.elastic.multiprocessing.errors) writes
 * an uncaught exception there as JSON:
 *   {"message": {"message": "ValueError: boom",
 *                "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "..."}}}
 * The agent reads the root-cause worker's file, and its report quotes the
 * traceback's last line, as torchrun's failure table does.
 *
 * The files live beside the worker's logs under --log-dir
 * (DIR/RUN_ID/attempt_N/RANK/error.json), else in a private directory under
 * $TMPDIR (attempt_N.rank_RANK.json) that the agent removes at its end. When dtrun itself
 * runs with TORCHELASTIC_ERROR_FILE set (under another elastic agent), the root
 * cause's file is copied there with its errorCode at the end of a failed job,
 * as torchrun's own @record does. The built-in trainer reports its errors in one
 * line of its own and gets no file. */
#include "lib/launch/agent_impl.h"

#include <cJSON.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ERROR_FILE_MAX (1 << 20) /* a traceback is a few KiB; read no more than this */

static int make_temp_root(agent *ag, char *err, size_t errlen)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(ag->error_root, sizeof ag->error_root, "%s/dtrun-errors-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(ag->error_root)) {
        snprintf(err, errlen, "cannot create a directory for the workers' error files (%s): %s",
                 ag->error_root, strerror(errno));
        ag->error_root[0] = 0;
        return -1;
    }
    ag->error_root_temp = 1;
    return 0;
}

int agent_error_file_prepare(agent *ag, agent_worker *w, char *err, size_t errlen)
{
    w->error_file[0] = 0;
    w->error_line[0] = 0;
    if (ag->o->job_path) return 0;
    if (!ag->error_root[0]) {
        if (ag->log_root[0]) snprintf(ag->error_root, sizeof ag->error_root, "%s", ag->log_root);
        else if (make_temp_root(ag, err, errlen) != 0) return -1;
    }
    if (ag->error_root_temp) {
        /* One fresh directory, flat: no directory per worker to make and remove
         * on every launch (a file system's metadata is slow on a busy machine). */
        snprintf(w->error_file, sizeof w->error_file, "%s/attempt_%d.rank_%d.json", ag->error_root, ag->attempt,
                 w->rank);
        return 0;
    }
    char dir[AGENT_LOG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/attempt_%d/%d", ag->error_root, ag->attempt, w->rank);
    if (agent_mkdirs(dir) != 0) {
        snprintf(err, errlen, "cannot create %s for a worker's error file: %s", dir, strerror(errno));
        return -1;
    }
    snprintf(w->error_file, sizeof w->error_file, "%s/error.json", dir);
    /* a file left by an earlier run with the same --log-dir and id is not this worker's */
    if (unlink(w->error_file) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "cannot remove the old error file %s: %s", w->error_file, strerror(errno));
        return -1;
    }
    return 0;
}

/* The whole file, NUL-terminated, or NULL (absent, unreadable, too large). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(ERROR_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, ERROR_FILE_MAX + 1, f) : 0;
    fclose(f);
    if (!buf || n > ERROR_FILE_MAX) { free(buf); return NULL; }
    buf[n] = 0;
    return buf;
}

/* The last non-blank line of text, cleaned for one line of a report. */
static void last_line(const char *text, char *out, size_t n)
{
    const char *end = text + strlen(text);
    while (end > text && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t')) end--;
    const char *start = end;
    while (start > text && start[-1] != '\n') start--;
    while (start < end && (*start == ' ' || *start == '\t')) start++;
    size_t k = 0;
    for (const char *p = start; p < end && k + 4 < n; p++)
        out[k++] = (unsigned char)*p < 0x20 ? ' ' : *p;
    if (k + 4 >= n && start + k < end) { out[k - 3] = '.'; out[k - 2] = '.'; out[k - 1] = '.'; }
    out[k] = 0;
}

void agent_error_file_read(agent_worker *w)
{
    w->error_line[0] = 0;
    if (!w->error_file[0]) return;
    char *text = slurp(w->error_file);
    if (!text) return;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(root, "message");
    const char *found = NULL;
    if (cJSON_IsString(msg)) {
        found = msg->valuestring; /* the older format: a plain message */
    } else if (cJSON_IsObject(msg)) {
        const cJSON *extra = cJSON_GetObjectItemCaseSensitive(msg, "extraInfo");
        const cJSON *stack = cJSON_GetObjectItemCaseSensitive(extra, "py_callstack");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(msg, "message");
        if (cJSON_IsString(stack) && stack->valuestring[strspn(stack->valuestring, " \t\r\n")]) found = stack->valuestring;
        else if (cJSON_IsString(m)) found = m->valuestring;
    }
    if (found) last_line(found, w->error_line, sizeof w->error_line);
    cJSON_Delete(root);
}

void agent_error_file_to_parent(const agent *ag, const agent_worker *w, int exit_status)
{
    const char *parent = getenv("TORCHELASTIC_ERROR_FILE");
    if (!parent || !*parent || !w->error_file[0]) return;
    char *text = slurp(w->error_file);
    if (!text) return; /* torchrun copies only a file the worker wrote */
    cJSON *root = cJSON_Parse(text);
    free(text);
    cJSON *msg = cJSON_GetObjectItemCaseSensitive(root, "message");
    /* the worker cannot know its own status when a signal ended it */
    if (cJSON_IsObject(msg) && exit_status) {
        cJSON_DeleteItemFromObjectCaseSensitive(msg, "errorCode");
        cJSON_AddNumberToObject(msg, "errorCode", exit_status);
    }
    char *out = root ? cJSON_PrintUnformatted(root) : NULL;
    FILE *f = out ? fopen(parent, "w") : NULL;
    if (f) {
        fputs(out, f);
        if (fclose(f) != 0) fprintf(stderr, "dtrun: cannot write TORCHELASTIC_ERROR_FILE %s: %s\n", parent, strerror(errno));
    } else if (out) {
        fprintf(stderr, "dtrun: cannot write TORCHELASTIC_ERROR_FILE %s: %s\n", parent, strerror(errno));
    }
    free(out);
    cJSON_Delete(root);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void agent_error_files_remove(agent *ag)
{
    if (!ag->error_root_temp || !ag->error_root[0]) return;
    nftw(ag->error_root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    ag->error_root[0] = 0;
    ag->error_root_temp = 0;
}
