/* jobspec_print.c — the resolved job as YAML.
 *
 * Every key is written out explicitly (presets expanded, derived values filled
 * in), so the output is both a record of what ran and a job file that loads back
 * to the same struct: numbers use the shortest text that reads back to the same
 * double, strings are double-quoted with escapes. Keys that mean nothing for this
 * job (ViT keys on a GPT) and launch keys the file did not set are left out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/job/jobspec.h"
#include "lib/job/jobspec_fields.h"
#include "lib/job/jobspec_utf8.h"

static void print_double(FILE *out, double v)
{
    char buf[40];
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
    fputs(buf, out);
}

/* What libyaml reads back unchanged inside a double-quoted scalar: its
 * printable set minus line breaks (NEL, LS, PS would be folded to spaces). */
static int safe_in_quotes(unsigned long cp)
{
    if (cp >= 0x20 && cp <= 0x7e) return cp != '"' && cp != '\\';
    if (cp >= 0xa0 && cp <= 0xd7ff) return cp != 0x2028 && cp != 0x2029;
    if (cp >= 0xe000 && cp <= 0xfffd) return cp != 0xfeff;
    return cp >= 0x10000 && cp <= 0x10ffff;
}

static void print_string(FILE *out, const char *s, size_t size)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strnlen(s, size);
    fputc('"', out);
    for (size_t i = 0; i < n;) {
        unsigned long cp = 0;
        size_t len = utf8_decode(u + i, n - i, &cp);
        if (len == 0) { /* not UTF-8: cannot be written in YAML; will not load back */
            fputc(u[i++], out);
            continue;
        }
        if (cp == '"' || cp == '\\') fprintf(out, "\\%c", (int)cp);
        else if (safe_in_quotes(cp)) fwrite(u + i, 1, len, out);
        else if (cp <= 0xff) fprintf(out, "\\x%02lx", cp);
        else if (cp <= 0xffff) fprintf(out, "\\u%04lx", cp);
        else fprintf(out, "\\U%08lx", cp);
        i += len;
    }
    fputc('"', out);
}

void job_field_print(FILE *out, const job_spec *job, int fid)
{
    const field_def *f = &job_fields[fid];
    const void *p = job_field_cptr(job, fid);
    switch (f->type) {
    case FT_INT: fprintf(out, "%d", *(const int *)p); break;
    case FT_LONG: fprintf(out, "%ld", *(const long *)p); break;
    case FT_U64: fprintf(out, "%llu", *(const unsigned long long *)p); break;
    case FT_DOUBLE: print_double(out, *(const double *)p); break;
    case FT_BOOL: fputs(*(const int *)p ? "true" : "false", out); break;
    case FT_ENUM: {
        int v = *(const int *)p, count = 0;
        while (f->names[count]) count++;
        if (v >= 0 && v < count) fputs(f->names[v], out);
        else fprintf(out, "%d", v); /* not a name: will not load back, on purpose */
        break;
    }
    case FT_FLAGS: {
        int v = *(const int *)p, first = 1;
        fputc('[', out);
        for (int i = 0; f->names[i]; i++)
            if (v & (1 << i)) fprintf(out, "%s%s", first ? "" : ", ", f->names[i]), first = 0;
        fputc(']', out);
        break;
    }
    default: print_string(out, p, f->size); break;
    }
}

/* Whether a nested section is in use: model.moe while the model has experts,
 * train.lora while LoRA is on. */
static int nested_in_use(const job_spec *job, int sec)
{
    if (sec == SEC_MOE) return job->model.moe.experts >= 1;
    if (sec == SEC_MLA) return job_model_mla(&job->model);
    if (sec == SEC_LORA) return job_lora_on(&job->model);
    return 1;
}

/* A nested section's keys, indented under its parent. */
static int print_nested(const job_spec *job, FILE *out, int parent)
{
    int printed = 0;
    for (int sec = 0; sec < SEC_COUNT; sec++) {
        if (job_section_parent(sec) != parent) continue;
        if (!nested_in_use(job, sec)) continue;
        fprintf(out, "  %s:\n", job_section_key(sec));
        for (int fid = 0; fid < FID_COUNT; fid++) {
            if (job_fields[fid].section != (job_section)sec || !job_field_applies(job, fid)) continue;
            fprintf(out, "    %s: ", job_fields[fid].key);
            job_field_print(out, job, fid);
            fputc('\n', out);
        }
        printed = 1;
    }
    return printed;
}

void job_print(const job_spec *job, FILE *out)
{
    fputs("# dtrun job, resolved: presets expanded, defaults and derived values filled in\n", out);
    for (int sec = 0; sec < SEC_COUNT; sec++) {
        if (job_section_parent(sec) >= 0) continue; /* printed inside its parent */
        int printed = 0;
        for (int fid = 0; fid < FID_COUNT; fid++) {
            if (job_fields[fid].section != (job_section)sec) continue;
            if (!job_field_applies(job, fid) || job_field_unset(job, fid)) continue;
            if (fid == FID_MODEL_PRESET && !job->model.preset[0]) continue;
            if (fid == FID_CKPT_ALLOW_CHANGES && !job->checkpoint.allow_changes[0]) continue;
            /* derived from dp once it is known: printing it would pin it */
            if (fid == FID_MICROBATCHES && job->parallel.dp_auto) continue;
            if (!printed) fprintf(out, "%s:\n", job_section_names[sec]);
            printed = 1;
            fprintf(out, "  %s: ", job_fields[fid].key);
            if (fid == FID_DP && job->parallel.dp_auto) fputs("auto", out); /* world / (tp x pp) at launch */
            else job_field_print(out, job, fid);
            fputc('\n', out);
            if (fid == FID_MICRO_BATCH)
                fprintf(out, "  # grad_accum: %d (derived: global_batch / (micro_batch x dp))\n",
                        job->train.grad_accum);
        }
        if (!printed) {
            /* a nested section needs its parent's line */
            int any = 0;
            for (int sub = 0; sub < SEC_COUNT && !any; sub++)
                any = job_section_parent(sub) == sec && nested_in_use(job, sub);
            if (any) fprintf(out, "%s:\n", job_section_names[sec]);
            printed = any;
        }
        if (print_nested(job, out, sec)) printed = 1;
        if (!printed) fprintf(out, "%s: {}\n", job_section_names[sec]);
    }
}
