/* test_resume_diff.c — what a resume compares (runtime/train/resume_diff.h):
 * the job a checkpoint saved (job_print's YAML) against the job now, each key
 * of its kind: the recipe refused unless allowed, steps, layout and the way it
 * computes allowed and named, bookkeeping keys ignored; and the lists of keys
 * checkpoint.allow_changes and --allow-changes take. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/job/jobspec.h"
#include "runtime/train/resume_diff.h"
#include "test/unit/check.h"

static const char *BASE = "model: {kind: gpt, n_layer: 2, n_head: 2, d_model: 16, vocab_size: 32, seq_len: 8}\n"
                          "train: {steps: 4, global_batch: 4, lr: 0.01}\n"
                          "checkpoint: {dir: ck}\n";

/* The YAML a checkpoint of `yaml`'s job would hold. */
static char *saved_of(const char *yaml)
{
    static job_spec j;
    char err[512], *text = NULL;
    size_t len = 0;
    if (job_load_string(&j, yaml, strlen(yaml), "then.yaml", err, sizeof err) != 0) {
        printf("not ok - load: %s\n", err);
        exit(1);
    }
    FILE *f = open_memstream(&text, &len);
    job_print(&j, f);
    fclose(f);
    return text;
}

/* Diff of BASE (saved) against `now_yaml`, allow = --allow-changes. */
static int diff(const char *now_yaml, const char *allow, resume_diff *d)
{
    static job_spec now;
    char err[512];
    if (job_load_string(&now, now_yaml, strlen(now_yaml), "now.yaml", err, sizeof err) != 0) {
        printf("not ok - load now: %s\n", err);
        exit(1);
    }
    char *saved = saved_of(BASE);
    int rc = resume_diff_jobs(saved, &now, allow, d, err, sizeof err);
    free(saved);
    return rc;
}

/* BASE with `from` replaced by `to` (once). */
static const char *edit(const char *from, const char *to)
{
    static char out[2048];
    const char *at = strstr(BASE, from);
    if (!at) {
        printf("not ok - '%s' not in the base job\n", from);
        exit(1);
    }
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - BASE), BASE, to, at + strlen(from));
    return out;
}

static void test_kinds(void)
{
    resume_diff d;
    CHECK(diff(BASE, "", &d) == 0 && d.n_changed == 0 && d.n_refused == 0, "the same job: no change");

    diff(edit("steps: 4", "steps: 40"), "", &d);
    CHECK(d.n_refused == 0 && !strcmp(d.changed, "train.steps 4 -> 40"), "more steps: named, allowed [%s]", d.changed);

    diff(edit("lr: 0.01", "lr: 0.02"), "", &d);
    CHECK(d.n_refused == 1 && !strcmp(d.refused, "train.lr 0.01 -> 0.02") && !strcmp(d.refused_keys, "train.lr") &&
              strstr(d.changed, "train.min_lr 0.001 -> 0.002 (follows train.lr)"),
          "a new lr: refused, min_lr follows it [%s]", d.changed);
    diff(edit("lr: 0.01", "lr: 0.02, min_lr: 0.0005"), "", &d);
    CHECK(d.n_refused == 2 && !strcmp(d.refused_keys, "train.lr,train.min_lr"), "a min_lr the file sets is its own [%s]",
          d.refused);

    diff(edit("lr: 0.01", "lr: 0.02"), "train.lr", &d);
    CHECK(d.n_refused == 0 && strstr(d.changed, "train.lr 0.01 -> 0.02 (allowed)"), "--allow-changes=train.lr [%s]",
          d.changed);
}

static void test_groups(void)
{
    resume_diff d;
    /* the recipe: data, the optimizer, the batch */
    const char *refused[][3] = {
        {"checkpoint: {dir: ck}", "checkpoint: {dir: ck}\ndata: {kind: synthetic, synthetic_size: 5000}",
         "data.synthetic_size"},
        {"global_batch: 4", "global_batch: 8", "train.global_batch"},
        {"lr: 0.01", "lr: 0.01, warmup: 2", "train.warmup"},
        {"lr: 0.01", "lr: 0.01, weight_decay: 0.5", "train.weight_decay"},
        {"lr: 0.01", "lr: 0.01, beta2: 0.9", "train.beta2"},
        {"lr: 0.01", "lr: 0.01, schedule: constant", "train.schedule"},
        {"lr: 0.01", "lr: 0.01, grad_clip: 0.5", "train.grad_clip"},
        {"lr: 0.01", "lr: 0.01, seed: 5", "train.seed"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        diff(edit(refused[i][0], refused[i][1]), "", &d);
        CHECK(d.n_refused == 1 && !strcmp(d.refused_keys, refused[i][2]), "%s: refused [%s]", refused[i][2], d.refused);
    }
    /* the layout and how the same run computes: allowed, named */
    const char *allowed[][3] = {
        {"checkpoint: {dir: ck}", "checkpoint: {dir: ck}\nparallel: {dp: 2}", "parallel.dp 1 -> 2"},
        {"lr: 0.01", "lr: 0.01, micro_batch: 2", "train.micro_batch 4 -> 2"},
        {"lr: 0.01", "lr: 0.01, precision: bf16", "train.precision fp32 -> bf16"},
        {"lr: 0.01", "lr: 0.01, recompute: block", "train.recompute none -> block"},
        {"lr: 0.01", "lr: 0.01, eval_every: 2", "train.eval_every 0 -> 2"},
        {"seq_len: 8}", "seq_len: 8, attention: naive}", "model.attention fused -> naive"},
    };
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        diff(edit(allowed[i][0], allowed[i][1]), "", &d);
        CHECK(d.n_refused == 0 && strstr(d.changed, allowed[i][2]), "%s: allowed and named [%s]", allowed[i][2],
              d.changed);
    }
    /* where things go: not compared */
    diff(edit("checkpoint: {dir: ck}", "checkpoint: {dir: other, every: 3, keep: 5}\nlog: {metrics: m.jsonl}"), "", &d);
    CHECK(d.n_changed == 0, "checkpoint and log keys are not compared [%s]", d.changed);
    /* all */
    diff(edit("lr: 0.01", "lr: 0.02, seed: 9"), "all", &d);
    CHECK(d.n_refused == 0 && d.n_changed == 3, "--allow-changes=all [%s]", d.changed);
    /* the job key and the flag add up */
    diff(edit("lr: 0.01}\ncheckpoint: {dir: ck}", "lr: 0.02, seed: 9}\ncheckpoint: {dir: ck, allow_changes: [train.seed]}"),
         "train.lr", &d);
    CHECK(d.n_refused == 0, "checkpoint.allow_changes and --allow-changes add up [%s]", d.refused);
    diff(edit("lr: 0.01}\ncheckpoint: {dir: ck}", "lr: 0.02, seed: 9}\ncheckpoint: {dir: ck, allow_changes: train.seed}"),
         "", &d);
    CHECK(d.n_refused == 1 && !strcmp(d.refused_keys, "train.lr"), "a comma list in the file too [%s]", d.refused);
    /* a checkpoint without a job (an older dtrun): nothing compared */
    static job_spec now;
    char err[256];
    job_load_string(&now, BASE, strlen(BASE), "now.yaml", err, sizeof err);
    CHECK(resume_diff_jobs("", &now, "", &d, err, sizeof err) == 0 && d.n_changed == 0, "no job saved: nothing compared");
    CHECK(resume_diff_jobs("model: {kind: gpt, n_lair: 2}\n", &now, "", &d, err, sizeof err) == -1 &&
              strstr(err, "does not load"),
          "a saved job that does not load is said so: %s", err);
    /* the refusal line */
    diff(edit("lr: 0.01", "lr: 0.02, seed: 5"), "", &d);
    char line[2048];
    resume_diff_refusal(&d, "ck/step_000004", line, sizeof line);
    CHECK(!strcmp(line, "cannot resume from ck/step_000004: train.lr 0.01 -> 0.02, train.seed 1337 -> 5 make another "
                        "run than the checkpoint's (--allow-changes=train.lr,train.seed or checkpoint.allow_changes: "
                        "[train.lr, train.seed] resumes with them; checkpoint.resume: never starts afresh)"),
          "the refusal: %s", line);
}

static void test_key_lists(void)
{
    char why[256];
    CHECK(job_key_list_check("train.lr, train.seed ,data.train", why, sizeof why) == 0, "keys with spaces");
    CHECK(job_key_list_check("all", why, sizeof why) == 0, "all");
    CHECK(job_key_list_check("train.lr,trian.seed", why, sizeof why) == -1 &&
              !strcmp(why, "'trian.seed' is not a job key (section.key, or all); did you mean 'train.seed'?"),
          "a misspelt key: %s", why);
    CHECK(job_key_list_check("lr", why, sizeof why) == -1 && strstr(why, "'lr' is not a job key"), "a bare key: %s", why);
    /* the key loads a sequence, and prints as a list that loads back */
    const char *yaml = edit("checkpoint: {dir: ck}", "checkpoint: {dir: ck, allow_changes: [train.lr, data.train]}");
    static job_spec a, b;
    char *text = NULL;
    size_t len = 0;
    int rc = job_load_string(&a, yaml, strlen(yaml), "a.yaml", why, sizeof why);
    FILE *f = open_memstream(&text, &len);
    job_print(&a, f);
    fclose(f);
    rc = rc || job_load_string(&b, text, len, "b.yaml", why, sizeof why);
    CHECK(rc == 0 && !strcmp(a.checkpoint.allow_changes, "train.lr,data.train") &&
              !strcmp(b.checkpoint.allow_changes, a.checkpoint.allow_changes),
          "checkpoint.allow_changes: a sequence, printed and loaded back [%s]", a.checkpoint.allow_changes);
    free(text);
    CHECK(job_key_list_has("train.lr,train.seed", "train.seed") && !job_key_list_has("train.lr", "train.l") &&
              job_key_list_has("all", "data.train") && !job_key_list_has("", "train.lr"),
          "membership");
}

int main(void)
{
    test_kinds();
    test_groups();
    test_key_lists();
    CHECK_DONE();
}
