/* jobspec_override.c — `--set SECTION.KEY=VALUE`: each override replaces (or
 * adds) one key's text after the file's keys were collected, so it is parsed
 * and checked exactly as if the file said it; its messages name the override. */
#include <string.h>

#include "lib/job/jobspec_loader.h"

int loader_collect_overrides(loader *L, const char *const *overrides, int n)
{
    for (int i = 0; i < n; i++) {
        const char *o = overrides[i];
        if (!o) continue;
        const char *eq = strchr(o, '=');
        /* the key follows the last dot: "model.moe.experts=8" is section model.moe */
        const char *dot = memrchr(o, '.', eq ? (size_t)(eq - o) : strlen(o));
        if (!eq || !dot)
            return loader_fail_where(L, (pos){0, 0}, o, "expected SECTION.KEY=VALUE (e.g. train.steps=100)");
        int sec = job_section_find(o, (size_t)(dot - o));
        if (sec < 0) return loader_unknown_section(L, (pos){0, 0}, o, o, (size_t)(dot - o));
        const char *key = dot + 1;
        size_t klen = (size_t)(eq - key);
        int fid = job_field_find((job_section)sec, key, klen);
        if (fid < 0) return loader_unknown_key(L, (pos){0, 0}, o, (job_section)sec, key, klen);
        entry *e = &L->e[fid];
        if (!e->given) L->order[L->n_order++] = fid;
        memset(e, 0, sizeof *e);
        e->given = 1;
        e->override = o;
        e->text = eq + 1;
        e->len = strlen(eq + 1);
        e->is_null = e->len == 0;
    }
    return 0;
}

