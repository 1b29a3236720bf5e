/* provenance.c — see provenance.h. */
#include "runtime/train/provenance.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/util/build_info.h"
#include "lib/util/exit_codes.h"
#include "runtime/ckpt/ckpt.h"
#include "runtime/data/data_hash.h"
#include "runtime/env.h"

/* argv of process `pid` (NUL-separated in /proc), as a JSON array. */
static cJSON *cmdline_of(pid_t pid)
{
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *a = cJSON_CreateArray();
    for (size_t at = 0; a && at < n; at += strlen(buf + at) + 1) cJSON_AddItemToArray(a, cJSON_CreateString(buf + at));
    return a;
}

/* The command the user ran: the launcher's (this worker's parent, when it is
 * dtrun), else this process's own (a worker started by hand). */
static cJSON *launch_command(void)
{
    cJSON *parent = cmdline_of(getppid());
    const cJSON *first = parent ? cJSON_GetArrayItem(parent, 0) : NULL;
    if (first && cJSON_IsString(first) && strstr(first->valuestring, "dtrun")) return parent;
    cJSON_Delete(parent);
    return cmdline_of(getpid());
}

static void add_knob(void *ctx, const char *name, const char *value) { cJSON_AddStringToObject(ctx, name, value); }

static void cpu_model(char *out, size_t n)
{
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            const char *v = strchr(line, ':') + 1;
            while (*v == ' ') v++;
            snprintf(out, n, "%.*s", (int)strcspn(v, "\n"), v);
            break;
        }
    fclose(f);
}

/* The data files' hashes, computed once per process. */
static data_file_hash *g_files;
static int g_n = -1;

char *provenance_json(const job_spec *job, const char *backend, int world, const char *resumed_from, char *err,
                      size_t errlen)
{
    if (g_n < 0) {
        int n = 0;
        if (data_hash_job(job, &g_files, &n, err, errlen) != 0) {
            free(g_files);
            g_files = NULL;
            return NULL;
        }
        g_n = n;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *d = cJSON_AddObjectToObject(o, "dtrun");
    cJSON_AddStringToObject(d, "version", dtrun_version());
    cJSON_AddStringToObject(d, "commit", dtrun_commit());
    cJSON *cmd = launch_command();
    if (cmd) cJSON_AddItemToObject(o, "command", cmd);
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd)) cJSON_AddStringToObject(o, "cwd", cwd);
    dt_env_each_knob(add_knob, cJSON_AddObjectToObject(o, "env"));
    const dt_env *env = dt_env_get();
    cJSON *hw = cJSON_AddObjectToObject(o, "hardware");
    char cpu[256], host[256] = "";
    cpu_model(cpu, sizeof cpu);
    gethostname(host, sizeof host - 1);
    cJSON_AddStringToObject(hw, "backend", backend);
    cJSON_AddStringToObject(hw, "cpu", cpu);
    cJSON_AddStringToObject(hw, "host", host);
    cJSON *run = cJSON_AddObjectToObject(o, "run");
    cJSON_AddStringToObject(run, "id", env->run_id);
    cJSON_AddNumberToObject(run, "attempt", env->attempt);
    cJSON_AddStringToObject(run, "resumed_from", resumed_from ? resumed_from : "");
    cJSON *w = cJSON_AddObjectToObject(o, "world");
    cJSON_AddNumberToObject(w, "ranks", world);
    cJSON_AddNumberToObject(w, "ranks_per_node", env->local_world_size > 0 ? env->local_world_size : world);
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < g_n; i++) {
        cJSON *f = cJSON_CreateObject();
        char h[32];
        snprintf(h, sizeof h, "%016" PRIx64, g_files[i].xxh3);
        cJSON_AddStringToObject(f, "path", g_files[i].path);
        cJSON_AddNumberToObject(f, "size", (double)g_files[i].size);
        cJSON_AddStringToObject(f, "xxh3", h);
        cJSON_AddItemToArray(data, f);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) snprintf(err, errlen, "out of memory writing the provenance");
    return s;
}

int provenance_data_changes(const char *provenance, char *lines, size_t n)
{
    lines[0] = 0;
    cJSON *o = provenance && *provenance ? cJSON_Parse(provenance) : NULL;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
    int changed = 0;
    size_t used = 0;
    for (const cJSON *f = cJSON_IsArray(data) ? data->child : NULL; f; f = f->next) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(f, "path"), *h = cJSON_GetObjectItemCaseSensitive(f, "xxh3");
        if (!cJSON_IsString(p) || !cJSON_IsString(h)) continue;
        data_file_hash now;
        char why[512], line[1536];
        if (data_hash_file(p->valuestring, &now, why, sizeof why) != 0) {
            snprintf(line, sizeof line, "data file %s is gone since the checkpoint was saved", p->valuestring);
        } else {
            char cur[32];
            snprintf(cur, sizeof cur, "%016" PRIx64, now.xxh3);
            if (!strcmp(cur, h->valuestring)) continue;
            snprintf(line, sizeof line, "data file %s changed since the checkpoint was saved (xxh3 %s then, %s now)",
                     p->valuestring, h->valuestring, cur);
        }
        changed++;
        int k = snprintf(lines + used, n - used, "%s%s", used ? "\n" : "", line);
        if (k > 0 && (size_t)k < n - used) used += (size_t)k;
    }
    cJSON_Delete(o);
    return changed;
}

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "?";
}

int provenance_run(const char *provenance, char *id, size_t idlen, char *resumed_from, size_t rlen)
{
    id[0] = resumed_from[0] = 0;
    cJSON *o = provenance && *provenance ? cJSON_Parse(provenance) : NULL;
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(o, "run");
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(run, "id"), *r = cJSON_GetObjectItemCaseSensitive(run, "resumed_from");
    int found = cJSON_IsString(i) && cJSON_IsString(r);
    if (found) {
        snprintf(id, idlen, "%s", i->valuestring);
        snprintf(resumed_from, rlen, "%s", r->valuestring);
    }
    cJSON_Delete(o);
    return found ? 0 : -1;
}

int provenance_inspect(const char *path, FILE *out)
{
    ckpt *ck = NULL;
    char err[1024];
    if (ckpt_open_index(path, &ck, err, sizeof err) != 0) {
        fprintf(stderr, "dtrun: inspect: %s\n", err);
        return DT_EXIT_CKPT;
    }
    const ckpt_info *in = ckpt_get_info(ck);
    fprintf(out, "checkpoint  %s\nstep        %ld (%ld optimizer updates), seed %llu\n", ckpt_path(ck), in->step,
            in->optim_step, in->seed);
    fprintf(out, "layout      dp %d x tp %d x pp %d = %d rank%s, mode %s\n", in->dp, in->tp, in->pp, in->world,
            in->world == 1 ? "" : "s", in->mode);
    if (in->has_model)
        fprintf(out, "model       %s: %d layers, d_model %d, %d heads\n", job_model_kind_name(in->model.kind),
                in->model.n_layer, in->model.d_model, in->model.n_head);
    cJSON *o = in->provenance[0] ? cJSON_Parse(in->provenance) : NULL;
    if (!o) {
        fprintf(out, "provenance  not recorded (a checkpoint from a dtrun before provenance)\n");
    } else {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "dtrun");
        fprintf(out, "dtrun       %s, commit %s\n", str_of(d, "version"), str_of(d, "commit"));
        fprintf(out, "command    ");
        const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(o, "command");
        for (const cJSON *a = cJSON_IsArray(cmd) ? cmd->child : NULL; a; a = a->next)
            fprintf(out, " %s", cJSON_IsString(a) ? a->valuestring : "?");
        fprintf(out, "\ncwd         %s\n", str_of(o, "cwd"));
        const cJSON *run = cJSON_GetObjectItemCaseSensitive(o, "run");
        if (run) {
            const cJSON *at = cJSON_GetObjectItemCaseSensitive(run, "attempt");
            const char *from = str_of(run, "resumed_from");
            fprintf(out, "run         %s, attempt %d%s%s\n", str_of(run, "id"), cJSON_IsNumber(at) ? at->valueint : 0,
                    from[0] ? ", pinned to " : "", from);
        }
        const cJSON *env = cJSON_GetObjectItemCaseSensitive(o, "env");
        fprintf(out, "env        ");
        int any = 0;
        for (const cJSON *e = cJSON_IsObject(env) ? env->child : NULL; e; e = e->next, any = 1)
            fprintf(out, " %s=%s", e->string, cJSON_IsString(e) ? e->valuestring : "?");
        fprintf(out, "%s\n", any ? "" : " (none that change results)");
        const cJSON *hw = cJSON_GetObjectItemCaseSensitive(o, "hardware"), *w = cJSON_GetObjectItemCaseSensitive(o, "world");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(w, "ranks"), *rn = cJSON_GetObjectItemCaseSensitive(w, "ranks_per_node");
        int nr = cJSON_IsNumber(r) ? r->valueint : 0;
        fprintf(out, "hardware    %s backend on %s (%s), %d rank%s, %d per node\n", str_of(hw, "backend"),
                str_of(hw, "host"), str_of(hw, "cpu"), nr, nr == 1 ? "" : "s", cJSON_IsNumber(rn) ? rn->valueint : 0);
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
        int nd = cJSON_IsArray(data) ? cJSON_GetArraySize(data) : 0;
        if (!nd) fprintf(out, "data        none read from files (synthetic)\n");
        for (const cJSON *f = nd ? data->child : NULL; f; f = f->next) {
            const cJSON *sz = cJSON_GetObjectItemCaseSensitive(f, "size");
            fprintf(out, "data        %s  %.0f bytes  xxh3 %s\n", str_of(f, "path"), cJSON_IsNumber(sz) ? sz->valuedouble : 0,
                    str_of(f, "xxh3"));
        }
        cJSON_Delete(o);
    }
    ckpt_close(ck);
    return DT_EXIT_OK;
}
