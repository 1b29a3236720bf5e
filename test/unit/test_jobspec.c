/* test_jobspec.c — the YAML job spec: defaults, presets, derived values, every
 * error class with its exact FILE:LINE:COL, "did you mean", overrides, and the
 * print -> load round trip. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/job/jobspec.h"
#include "test/unit/check.h"

static job_spec job, job2, ref;
static char err[1024];

static int load(const char *yaml)
{
    return job_load_string(&job, yaml, strlen(yaml), "t.yaml", err, sizeof err);
}

/* The load fails with one line that starts with `where` ("t.yaml:3:5: ")
 * and contains `what`. */
static void expect_error(const char *yaml, const char *where, const char *what)
{
    int rc = load(yaml);
    int ok = rc == -1 && !strncmp(err, where, strlen(where)) && strstr(err, what) && !strchr(err, '\n');
    CHECK(ok, "error %s%s  [got: %s]", where, what, rc ? err : "(loaded)");
}

static void expect_load(const char *yaml, const char *what)
{
    int rc = load(yaml);
    CHECK(rc == 0, "loads: %s%s%s", what, rc ? " -- " : "", rc ? err : "");
}

/* Print `j`, load the text back, compare byte for byte. */
static int round_trip(const job_spec *j, char **text_out)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    job_print(j, f);
    fclose(f);
    int rc = job_load_string(&job2, text, len, j->path, err, sizeof err);
    int same = rc == 0 && memcmp(j, &job2, offsetof(job_spec, where)) == 0; /* positions differ */
    if (text_out) *text_out = text;
    else free(text);
    return same;
}

static void test_defaults(void)
{
    job_defaults(&ref);
    CHECK(ref.model.kind == MODEL_GPT && ref.model.n_layer == 2 && ref.model.n_head == 2 &&
              ref.model.d_model == 32 && ref.model.d_ff == 128 && ref.model.vocab_size == 256 &&
              ref.model.seq_len == 32 && ref.model.preset[0] == 0,
          "default model is the tiny GPT");
    CHECK(ref.model.attention == ATTN_FUSED && !strcmp(job_attention_name(ref.model.attention), "fused"),
          "default attention is fused");
    CHECK(ref.data.kind == DATA_SYNTHETIC && ref.data.synthetic_size > 33, "default data is synthetic");
    CHECK(ref.train.steps == 20 && ref.train.global_batch == 8 && ref.train.micro_batch == 8 &&
              ref.train.grad_accum == 1,
          "default batch: 20 steps of 8, no accumulation");
    CHECK(ref.train.lr == 1e-3 && ref.train.min_lr == 1e-4 && ref.train.warmup == 0 &&
              ref.train.schedule == LR_COSINE,
          "default schedule: cosine from 1e-3 to 1e-4");
    CHECK(ref.train.weight_decay == 0.0 && ref.train.beta1 == 0.9 && ref.train.beta2 == 0.95 &&
              ref.train.eps == 1e-8 && ref.train.grad_clip == 1.0,
          "default AdamW settings");
    CHECK(ref.train.precision == PREC_FP32 && ref.train.seed == 1337 && ref.train.recompute == RECOMPUTE_NONE &&
              ref.train.eval_every == 0 && ref.train.eval_batches == 4 && ref.train.threads == 0 &&
              ref.train.skip_nonfinite == 0 && ref.train.device == DEVICE_AUTO,
          "default precision, device, seed, eval");
    CHECK(ref.parallel.dp == 1 && ref.parallel.tp == 1 && ref.parallel.pp == 1 && ref.parallel.mode == SHARD_NONE &&
              ref.parallel.pp_schedule == PP_1F1B && ref.parallel.microbatches == 1 &&
              ref.parallel.virtual_stages == 1 && ref.parallel.bucket_mb == 25 && !ref.parallel.sequence_parallel,
          "default layout: one process");
    CHECK(ref.checkpoint.dir[0] == 0 && ref.checkpoint.keep == 2 && !strcmp(ref.checkpoint.resume, "auto") &&
              ref.log.every == 1 && ref.log.progress == PROGRESS_AUTO,
          "default checkpoint and log");
    CHECK(ref.launch.max_restarts == -1 && ref.launch.nproc_per_node[0] == 0 && ref.launch.nnodes[0] == 0 &&
              ref.launch.rdzv_endpoint[0] == 0,
          "launch keys unset by default");

    /* A file with empty sections resolves to exactly the defaults. */
    expect_load("train: {}\nmodel:\n", "empty sections");
    memcpy(ref.path, "t.yaml", 7);
    CHECK(memcmp(&job, &ref, offsetof(job_spec, where)) == 0, "empty sections give job_defaults()");
    CHECK(job_validate(&ref, err, sizeof err) == 0, "the defaults validate: %s", err);
}

static void test_presets(void)
{
    expect_load("model: {preset: gpt2-124m}\n", "gpt2-124m");
    CHECK(job.model.kind == MODEL_GPT && job.model.n_layer == 12 && job.model.n_head == 12 &&
              job.model.d_model == 768 && job.model.d_ff == 3072 && job.model.vocab_size == 50257 &&
              job.model.seq_len == 1024 && !strcmp(job.model.preset, "gpt2-124m"),
          "gpt2-124m shape");
    expect_load("model: {preset: gpt2-1.5b}\n", "gpt2-1.5b");
    CHECK(job.model.n_layer == 48 && job.model.n_head == 25 && job.model.d_model == 1600, "gpt2-1.5b shape");
    expect_load("model: {preset: gpt-70b}\n", "gpt-70b");
    CHECK(job.model.n_layer == 80 && job.model.n_head == 64 && job.model.d_model == 8192 &&
              job.model.d_ff == 35840,
          "gpt-70b has its own d_ff");
    expect_load("model: {preset: vit-b16}\n", "vit-b16");
    CHECK(job.model.kind == MODEL_VIT && job.model.image_size == 224 && job.model.patch_size == 16 &&
              job.model.channels == 3 && job.model.n_classes == 1000 && job.model.n_layer == 12 &&
              job.model.d_model == 768 && job.model.vocab_size == 0,
          "vit-b16 shape");
    expect_load("model: {preset: vit-3b}\n", "vit-3b");
    double p = 12.0 * job.model.n_layer * (double)job.model.d_model * job.model.d_model;
    CHECK(p > 3.1e9 && p < 3.3e9, "vit-3b has ~3.2e9 block parameters (%.3g)", p);
    expect_load("model: {preset: vit-fmnist}\n", "vit-fmnist");
    CHECK(job.model.image_size == 28 && job.model.patch_size == 4 && job.model.channels == 1 &&
              job.model.n_layer == 4 && job.model.d_model == 64,
          "vit-fmnist shape");

    int n = 0;
    for (const char *name; (name = job_preset_name(n)); n++) {
        char yaml[128];
        snprintf(yaml, sizeof yaml, "model:\n  preset: %s\n", name);
        int rc = load(yaml);
        CHECK(rc == 0 && job_preset_model(name, &job2.model) == 0 && job2.model.n_layer == job.model.n_layer,
              "preset %s loads%s%s", name, rc ? ": " : "", rc ? err : "");
    }
    CHECK(n >= 14, "%d presets", n);
    CHECK(job_preset_model("nope", &job2.model) == -1, "job_preset_model rejects an unknown name");

    /* Explicit keys override the preset whatever their order in the file. */
    expect_load("model:\n  n_layer: 3\n  preset: gpt2-124m\n  d_model: 384\n", "override before and after");
    CHECK(job.model.n_layer == 3 && job.model.d_model == 384 && job.model.n_head == 12 && job.model.d_ff == 1536,
          "preset overridden, d_ff follows d_model (%d)", job.model.d_ff);
    expect_load("model: {preset: gpt2-124m, d_ff: 1000}\n", "explicit d_ff");
    CHECK(job.model.d_ff == 1000, "explicit d_ff wins");
    expect_load("model: {kind: vit}\n", "kind alone");
    CHECK(job.model.kind == MODEL_VIT && job.model.image_size == 28 && job.model.patch_size == 7 &&
              job.data.synthetic_size > 0 && job.model.preset[0] == 0,
          "model.kind vit alone starts from vit-tiny");
    expect_load("model: {kind: vit, preset: vit-l16}\n", "kind agrees with the preset");
}

/* model.kind llama: the presets (the Llama 3 paper's shapes, SmolLM-135M's,
 * a tiny one), its keys overridden, its defaults, its rules. */
static void test_llama(void)
{
    static const struct {
        const char *name;
        int L, H, kv, d, ff, vocab, tied;
        double theta;
    } want[] = {
        {"llama3-8b", 32, 32, 8, 4096, 14336, 128256, 0, 500000},
        {"llama3-70b", 80, 64, 8, 8192, 28672, 128256, 0, 500000},
        {"llama3-405b", 126, 128, 8, 16384, 53248, 128256, 0, 500000},
        {"smollm-135m", 30, 9, 3, 576, 1536, 49152, 1, 10000},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char yaml[128];
        snprintf(yaml, sizeof yaml, "model: {preset: %s}\n", want[i].name);
        expect_load(yaml, want[i].name);
        const job_model *m = &job.model;
        CHECK(m->kind == MODEL_LLAMA && m->n_layer == want[i].L && m->n_head == want[i].H &&
                  m->n_kv_head == want[i].kv && m->d_model == want[i].d && m->d_ff == want[i].ff &&
                  m->vocab_size == want[i].vocab && m->tie_embeddings == want[i].tied &&
                  m->rope_theta == want[i].theta && m->max_positions == m->seq_len && job_model_kv_heads(m) == want[i].kv,
              "%s shape", want[i].name);
    }
    expect_load("model: {kind: llama}\n", "kind llama alone");
    CHECK(!strcmp(job.model.preset, "") && job.model.n_kv_head == 2 && job.model.n_head == 4 && job.model.d_ff == 64 &&
              job.model.tie_embeddings == 0 && job_model_tied_head(&job.model) == 0,
          "model.kind llama alone starts from llama-tiny (GQA, untied)");
    expect_load("model: {preset: llama-tiny, n_kv_head: 1, tie_embeddings: true, rope_theta: 500000, "
                "max_positions: 128, d_ff: 80, seq_len: 16}\nparallel: {tp: 4}\n",
                "every llama key overridden, MQA replicated over tp 4");
    CHECK(job.model.n_kv_head == 1 && job.model.tie_embeddings == 1 && job.model.rope_theta == 500000 &&
              job.model.max_positions == 128 && job.model.d_ff == 80 && job.model.seq_len == 16,
          "the overrides win");
    expect_load("model: {preset: llama-tiny, seq_len: 64}\n", "seq_len alone");
    CHECK(job.model.max_positions == 64, "max_positions follows seq_len (%d)", job.model.max_positions);
    expect_load("model: {preset: llama3-8b}\nparallel: {tp: 16, sequence_parallel: true}\n", "tp 16 over 8 kv heads");
    expect_load("model: {preset: llama3-405b}\nparallel: {cp: 16}\ntrain: {global_batch: 16}\n", "cp on a llama");
    CHECK(job_model_is_lm(&job.model) && !job_model_is_lm(&(job_model){.kind = MODEL_VIT}), "llama is a language model");
    expect_error("model: {kind: llama, n_head: 8, n_kv_head: 3, d_model: 64}\n", "t.yaml:1:33: ",
                 "model.n_head 8 is not a multiple of model.n_kv_head 3");
    expect_error("model: {kind: llama, n_head: 12, d_model: 48, n_kv_head: 3}\nparallel: {tp: 4}\n", "t.yaml:2:12: ",
                 "parallel.tp 4 and model.n_kv_head 3");
    expect_load("model: {preset: smollm-135m}\nparallel: {tp: 3}\n", "smollm-135m over tp 3");
    expect_error("model: {preset: llama3-8b}\nparallel: {tp: 12}\n", "t.yaml:2:12: ", "model.n_head 32 is not divisible by parallel.tp 12");
    expect_error("model: {kind: llama, max_positions: 8}\n", "t.yaml:1:22: ", "model.max_positions 8 is less than");
    expect_error("model: {kind: llama, activation: gelu}\n", "t.yaml:1:22: ", "applies to gpt and vit models only");
    expect_error("model: {kind: vit, rope_theta: 10}\n", "t.yaml:1:20: ", "model.rope_theta applies to llama models only");
    expect_error("model: {kind: llama, rope_theta: 0}\n", "t.yaml:1:34: ", "model.rope_theta must be >= 1");
    expect_error("model: {kind: llama, num_key_value_heads: 2}\n", "t.yaml:1:22: ", "did you mean 'n_kv_head'?");
    expect_error("model: {kind: llama, tie_word_embeddings: true}\n", "t.yaml:1:22: ", "did you mean 'tie_embeddings'?");
    expect_error("model: {kind: llama, max_position_embeddings: 64}\n", "t.yaml:1:22: ",
                 "did you mean 'max_positions'?");
}

static void test_derived(void)
{
    expect_load("train: {global_batch: 32}\nparallel: {dp: 4}\n", "micro_batch derived from dp");
    CHECK(job.train.micro_batch == 8 && job.train.grad_accum == 1 && job.parallel.microbatches == 1,
          "micro_batch = global_batch / dp");
    expect_load("train: {global_batch: 32, micro_batch: 2}\nparallel: {dp: 4}\n", "grad accumulation");
    CHECK(job.train.grad_accum == 4 && job.parallel.microbatches == 4, "grad_accum = 32 / (2 x 4) = 4");
    expect_load("train: {global_batch: 32}\nparallel: {dp: 2, microbatches: 8}\n", "micro_batch from microbatches");
    CHECK(job.train.micro_batch == 2 && job.train.grad_accum == 8, "micro_batch = 32 / (2 x 8) = 2");
    expect_load("model: {n_layer: 4}\ntrain: {micro_batch: 4}\nparallel: {pp_schedule: interleaved, pp: 2}\n",
                "interleaved");
    CHECK(job.parallel.virtual_stages == 2, "interleaved defaults to 2 virtual stages");
    expect_load("train: {lr: 6e-4}\n", "lr");
    CHECK(job.train.min_lr == 6e-5, "min_lr = lr / 10 (%.17g)", job.train.min_lr);
    expect_load("model: {kind: vit}\n", "vit synthetic");
    long vit_size = job.data.synthetic_size;
    expect_load("data: {synthetic_size: 5000}\n", "synthetic_size");
    CHECK(job.data.synthetic_size == 5000 && vit_size > 0, "synthetic_size set");
    expect_load("train: {seed: 18446744073709551615, skip_nonfinite: true}\n", "u64 seed, bool");
    CHECK(job.train.seed == 18446744073709551615ULL && job.train.skip_nonfinite == 1, "seed 2^64-1 and true");
    expect_load("train: {lr: \"3e-4\", steps: '7'}\n", "quoted numbers");
    CHECK(job.train.lr == 3e-4 && job.train.steps == 7, "quoted numbers read as numbers");
    expect_load("checkpoint: {dir: null, resume: never}\nlog: {metrics: ~}\n", "null strings");
    CHECK(job.checkpoint.dir[0] == 0 && !strcmp(job.checkpoint.resume, "never"), "null string is empty");
    expect_load("data: {kind: idx, train: a, train_labels: b, val: c, val_labels: d}\nmodel: {kind: vit}\n",
                "idx data");
    CHECK(job.data.kind == DATA_IDX && !strcmp(job.data.val_labels, "d"), "idx paths");
    expect_load("launch: {nproc_per_node: 8, nnodes: '1:4', rdzv_endpoint: 'node0:29400', rdzv_id: j1, "
                "max_restarts: 3}\n",
                "launch");
    CHECK(!strcmp(job.launch.nproc_per_node, "8") && !strcmp(job.launch.nnodes, "1:4") &&
              job.launch.max_restarts == 3 && job.launch.log_dir[0] == 0,
          "launch keys");
    expect_load("---\ntrain: {steps: 3}\n...\n", "explicit document markers");
    expect_load("train: {steps: &n 5, eval_every: *n}\n", "an alias of a scalar");
    CHECK(job.train.eval_every == 5, "alias resolved");
    CHECK(!strcmp(job_shard_mode_name(SHARD_FSDP), "fsdp") && !strcmp(job_pp_schedule_name(PP_1F1B), "1f1b") &&
              !strcmp(job_model_kind_name(MODEL_VIT), "vit") && !strcmp(job_data_kind_name(DATA_TOKENS), "tokens") &&
              !strcmp(job_precision_name(PREC_BF16), "bf16") && !strcmp(job_shard_mode_name((shard_mode)9), "?"),
          "enum names");
}

/* parallel.dp: auto — dp from the world the launcher gives (elastic jobs). */
static void test_dp_auto(void)
{
    expect_load("train: {global_batch: 12, micro_batch: 2}\nparallel: {dp: auto, tp: 2}\n", "dp: auto");
    CHECK(job.parallel.dp_auto == 1 && job.parallel.dp == 1, "dp: auto loads with dp 1 until the world is known");
    CHECK(round_trip(&job, NULL), "dp: auto prints back as auto and reloads to the same job");
    int rc = job_resolve_world(&job, 6, err, sizeof err);
    CHECK(rc == 0 && job.parallel.dp == 3 && job.train.grad_accum == 2 && job.parallel.microbatches == 2,
          "6 workers, tp 2: dp 3, grad_accum 12 / (2 x 3) = 2 [%s]", rc ? err : "");
    rc = job_resolve_world(&job, 4, err, sizeof err);
    CHECK(rc == 0 && job.parallel.dp == 2 && job.train.grad_accum == 3,
          "4 workers: dp 2, grad_accum 3: the same global batch");
    rc = job_resolve_world(&job, 5, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "t.yaml:2:12: parallel.dp: auto: the world of 5 workers is not a multiple of tp x pp = 2"),
          "a world that tp x pp does not divide [%s]", err);
    rc = job_resolve_world(&job, 8, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "global_batch 12 is not divisible by micro_batch 2 x dp 4"),
          "a dp that does not divide the global batch [%s]", err);
    expect_load("parallel: {dp: 2}\n", "dp: 2");
    rc = job_resolve_world(&job, 7, err, sizeof err);
    CHECK(rc == 0 && job.parallel.dp == 2, "a fixed dp is left alone");
    expect_error("parallel: {dp: auto}\n", "t.yaml:1:", "parallel.dp: auto needs train.micro_batch");
    expect_error("train: {micro_batch: 2}\nparallel: {dp: auto, microbatches: 4}\n", "t.yaml:2:",
                 "parallel.microbatches cannot be set with dp: auto");
    expect_error("parallel: {dp: autox}\n", "t.yaml:1:", "parallel.dp: expected an integer or auto");
}

static void test_errors(void)
{
    /* syntax and structure */
    expect_error("", "t.yaml:1:1: ", "empty job file");
    expect_error("# nothing\n", "t.yaml:1:1: ", "empty job file");
    expect_error("train:\n  lr: [1\n", "t.yaml:3:1: ", "YAML syntax error");
    expect_error("train:\n  lr: 1\n steps: 2\n", "t.yaml:3:", "YAML syntax error");
    expect_error("train:\n\tlr: 1\n", "t.yaml:2:1: ", "tab character");
    expect_error("a: b\n---\nc: d\n", "t.yaml:2:1: ", "second YAML document");
    expect_error("train: {lr: *nope}\n", "t.yaml:1:13: ", "undefined alias");
    expect_error("\xff\n", "t.yaml:1:1: ", "invalid leading UTF-8 octet");
    expect_error("- a\n- b\n", "t.yaml:1:1: ", "must be a mapping of sections");
    expect_error("hello\n", "t.yaml:1:1: ", "must be a mapping of sections (model, data, train, ...), got 'hello'");
    expect_error("train: 5\n", "t.yaml:1:8: ", "section 'train' must be a mapping");
    expect_error("train:\n  - lr\n", "t.yaml:2:3: ", "section 'train' must be a mapping of keys, got a sequence");
    expect_error("trian:\n  lr: 1\n", "t.yaml:1:1: ", "unknown section 'trian'; did you mean 'train'?");
    expect_error("optimizer: {}\n", "t.yaml:1:1: ", "did you mean 'train'?");
    expect_error("steps: 5\n", "t.yaml:1:1: ", "did you mean 'train.steps'?");
    expect_error("zzz: 5\n", "t.yaml:1:1: ", "unknown section 'zzz' (the sections are");
    expect_error("train: {}\nlog: {}\ntrain: {}\n", "t.yaml:3:1: ", "duplicate section 'train' (first at line 1)");
    expect_error("train:\n  lr: 1\n  steps: 4\n  lr: 2\n", "t.yaml:4:3: ",
                 "duplicate key 'lr' in section 'train' (first at line 2)");
    expect_error("train: !foo {lr: 1}\n", "t.yaml:1:8: ", "unsupported YAML tag '!foo'");
    expect_error("train:\n  ? [a]\n  : 1\n", "t.yaml:2:5: ", "must be a name, got a sequence");
    expect_error("train:\n  <<: {lr: 1}\n", "t.yaml:2:3: ", "merge keys");

    /* unknown keys, with and without suggestions */
    expect_error("train:\n  steps: 5\n\n\n\n\n  lerning_rate: 3e-4\n", "t.yaml:7:3: ",
                 "unknown key 'lerning_rate' in section 'train'; did you mean 'lr'?");
    expect_error("train: {global-batch: 4}\n", "t.yaml:1:9: ", "did you mean 'global_batch'?");
    expect_error("train: {stpes: 4}\n", "t.yaml:1:9: ", "did you mean 'steps'?");
    expect_error("model: {num_layers: 4}\n", "t.yaml:1:9: ", "did you mean 'n_layer'?");
    expect_error("model: {nhead: 4}\n", "t.yaml:1:9: ", "did you mean 'n_head'?");
    expect_error("train: {dp: 2}\n", "t.yaml:1:9: ", "did you mean 'parallel.dp'?");
    expect_error("train: {every: 2}\n", "t.yaml:1:9: ", "did you mean 'checkpoint.every' or 'log.every'?");
    expect_error("train: {grad_accum: 2}\n", "t.yaml:1:9: ", "derived as global_batch / (micro_batch x dp)");
    expect_error("train: {qqqq: 2}\n", "t.yaml:1:9: ", "(its keys: steps global_batch");

    /* wrong types */
    expect_error("train:\n  steps: ten\n", "t.yaml:2:10: ", "train.steps: expected an integer, got 'ten'");
    expect_error("train: {steps: 1.5}\n", "t.yaml:1:16: ", "expected an integer");
    expect_error("train: {steps: }\n", "t.yaml:1:16: ", "expected an integer, got an empty value");
    expect_error("train: {steps: [1]}\n", "t.yaml:1:16: ", "expected an integer, got a sequence");
    expect_error("train: {lr: fast}\n", "t.yaml:1:13: ", "train.lr: expected a number, got 'fast'");
    expect_error("train: {lr: 0x10}\n", "t.yaml:1:13: ", "expected a number");
    expect_error("train: {lr: .nan}\n", "t.yaml:1:13: ", "must be a finite number");
    expect_error("train: {skip_nonfinite: 1}\n", "t.yaml:1:25: ",
                 "expected true or false, got '1'; did you mean 'true'?");
    expect_error("checkpoint: {dir: {a: 1}}\n", "t.yaml:1:19: ", "expected a string, got a mapping");

    /* ranges and overflow */
    expect_error("train:\n  lr: -1\n", "t.yaml:2:7: ", "train.lr must be > 0, got -1");
    expect_error("train: {steps: 0}\n", "t.yaml:1:16: ", "train.steps must be >= 1, got 0");
    expect_error("train: {beta2: 1}\n", "t.yaml:1:16: ", "train.beta2 must be >= 0 and < 1, got 1");
    expect_error("parallel: {bucket_mb: 5000}\n", "t.yaml:1:23: ", "must be >= 1 and <= 4096");
    expect_error("train: {steps: 99999999999}\n", "t.yaml:1:16: ", "integer overflow");
    expect_error("train: {steps: 99999999999999999999999999}\n", "t.yaml:1:16: ", "integer overflow");
    expect_error("train: {seed: 18446744073709551616}\n", "t.yaml:1:15: ", "integer overflow");
    expect_error("train: {seed: -3}\n", "t.yaml:1:15: ", "must be >= 0");
    expect_error("train: {lr: 1e999}\n", "t.yaml:1:13: ", "number out of range");
    char big[1200] = "checkpoint: {dir: ";
    memset(big + strlen(big), 'x', 1100);
    strcpy(big + strlen(big), "}\n");
    expect_error(big, "t.yaml:1:19: ", "checkpoint.dir is too long (1100 bytes, at most 1023)");
    expect_error("checkpoint: {dir: \"a\\0b\"}\n", "t.yaml:1:19: ", "NUL byte");

    /* enums and presets */
    expect_error("train: {schedule: cosin}\n", "t.yaml:1:19: ",
                 "unknown value 'cosin' (expected cosine, linear or constant); did you mean 'cosine'?");
    expect_error("parallel: {mode: zero3}\n", "t.yaml:1:18: ", "did you mean 'fsdp'?");
    expect_error("parallel: {mode: FSDP}\n", "t.yaml:1:18: ", "did you mean 'fsdp'?");
    /* plain data parallel is ddp; its former name none reads as it */
    CHECK(load("parallel: {mode: none}\n") == 0 && job.parallel.mode == SHARD_NONE &&
              !strcmp(job_shard_mode_name(job.parallel.mode), "ddp") && load("parallel: {mode: ddp}\n") == 0 &&
              job.parallel.mode == SHARD_NONE,
          "parallel.mode none (its former name) and ddp load as plain data parallel, printed ddp: %s", err);
    expect_error("parallel: {mode: nonee}\n", "t.yaml:1:18: ", "did you mean 'ddp'?");
    expect_error("train: {precision: bfloat16}\n", "t.yaml:1:20: ", "did you mean 'bf16'?");
    expect_error("train: {device: tpu}\n", "t.yaml:1:17: ", "auto, cpu or cuda");
    expect_error("train: {recompute: selectve}\n", "t.yaml:1:20: ",
                 "unknown value 'selectve' (expected none, block, selective or elementwise); did you mean 'selective'?");
    /* Megatron's "full" granularity is what dtrun calls block */
    expect_error("train: {recompute: full}\n", "t.yaml:1:20: ", "did you mean 'block'?");
    CHECK(load("train: {recompute: selective}\n") == 0 && job.train.recompute == RECOMPUTE_SELECTIVE &&
              !strcmp(job_recompute_name(job.train.recompute), "selective"),
          "recompute: selective loads as RECOMPUTE_SELECTIVE and prints as selective: %s", err);
    CHECK(load("train: {recompute: elementwise}\n") == 0 && job.train.recompute == RECOMPUTE_ELEMENTWISE &&
              !strcmp(job_recompute_name(job.train.recompute), "elementwise"),
          "recompute: elementwise loads as RECOMPUTE_ELEMENTWISE and prints as elementwise: %s", err);
    expect_error("log: {progress: maybe}\n", "t.yaml:1:17: ", "expected auto, on or off");
    expect_error("model: {preset: gpt2-125m}\n", "t.yaml:1:17: ",
                 "unknown preset 'gpt2-125m'; did you mean 'gpt2-124m'?");
    expect_error("model: {preset: llama}\n", "t.yaml:1:17: ", "(presets: gpt-tiny,");
    expect_error("model: {preset: llama3-7b}\n", "t.yaml:1:17: ", "did you mean 'llama3-8b'?");
    expect_error("model: {kind: gpt, preset: vit-b16}\n", "t.yaml:1:15: ", "preset 'vit-b16' is a vit model");
    expect_error("model: {image_size: 32}\n", "t.yaml:1:9: ", "model.image_size applies to vit models only");
    expect_error("model: {kind: vit, vocab_size: 32}\n", "t.yaml:1:20: ", "applies to gpt and llama models only");

    /* launch formats */
    expect_error("launch: {nproc_per_node: many}\n", "t.yaml:1:26: ", "cpu, gpu or auto");
    expect_error("launch: {nnodes: '4:2'}\n", "t.yaml:1:18: ", "MIN is larger than MAX");
    expect_error("launch: {rdzv_endpoint: 'h:0'}\n", "t.yaml:1:25: ", "port must be a number from 1 to 65535");
    expect_error("launch: {max_restarts: -1}\n", "t.yaml:1:24: ", "must be >= 0");
    expect_error("checkpoint: {resume: ''}\n", "t.yaml:1:22: ", "must be auto, never or a checkpoint path");

    /* combinations: the key to blame */
    expect_error("model:\n  d_model: 100\n  n_head: 3\n", "t.yaml:3:3: ",
                 "d_model 100 is not divisible by model.n_head 3");
    expect_error("model:\n  n_head: 3\n  d_model: 100\n", "t.yaml:2:3: ", "not divisible by model.n_head 3");
    expect_error("model: {preset: gpt2-124m, d_model: 700}\n", "t.yaml:1:28: ", "d_model 700 is not divisible");
    expect_error("train:\n  global_batch: 10\n  micro_batch: 4\n", "t.yaml:3:3: ",
                 "global_batch 10 is not divisible by micro_batch 4 x dp 1");
    expect_error("train: {global_batch: 10}\nparallel: {dp: 4}\n", "t.yaml:2:12: ",
                 "global_batch 10 is not divisible by parallel.dp 4");
    expect_error("parallel:\n  tp: 3\n", "t.yaml:2:3: ", "n_head 2 is not divisible by parallel.tp 3");
    expect_error("model: {n_head: 4, d_ff: 66}\nparallel: {tp: 4}\n", "t.yaml:2:12: ",
                 "d_ff 66 is not divisible by parallel.tp 4");
    /* the vocabulary splits unevenly (floor(V*r/tp)): GPT-2's 50257 needs no padding */
    expect_load("model: {preset: gpt2-124m}\nparallel: {tp: 2}\n", "tp 2 with vocab_size 50257");
    expect_load("model: {preset: gpt2-124m}\nparallel: {tp: 4}\n", "tp 4 with vocab_size 50257");
    expect_error("parallel: {pp: 3}\n", "t.yaml:1:12: ", "n_layer 2 is fewer than parallel.pp 3");
    expect_error("model: {n_layer: 3}\nparallel: {pp: 2, pp_schedule: interleaved}\n", "t.yaml:2:12: ",
                 "fewer than parallel.pp 2 x virtual_stages 2");
    expect_error("model: {kind: vit, image_size: 30}\n", "t.yaml:1:20: ",
                 "image_size 30 is not divisible by model.patch_size 7");
    expect_error("train: {global_batch: 8, micro_batch: 2}\nparallel:\n  microbatches: 3\n", "t.yaml:3:3: ",
                 "microbatches 3 does not match global_batch / (micro_batch x dp) = 8 / (2 x 1) = 4");
    expect_error("parallel: {pp: 2, pp_schedule: interleaved, virtual_stages: 1}\n", "t.yaml:1:45: ",
                 "interleaved needs virtual_stages >= 2");
    expect_error("parallel: {virtual_stages: 2}\n", "t.yaml:1:12: ", "needs pp_schedule: interleaved");
    /* the worker's schedule rule, answered by the job check (lib/job/jobspec_layout.h) */
    expect_error("model: {n_layer: 4}\ntrain: {global_batch: 6, micro_batch: 2}\nparallel: {pp: 2, pp_schedule: "
                 "interleaved}\n", "t.yaml:3:19: ", "microbatches 3 must be a multiple of parallel.pp 2");
    expect_error("parallel: {mode: hsdp}\n", "t.yaml:1:12: ", "hsdp needs parallel.dp > 1");
    expect_load("parallel: {mode: fsdp}\n", "fsdp with dp 1 is a no-op, not an error");
    expect_error("parallel: {sequence_parallel: true}\n", "t.yaml:1:12: ", "sequence_parallel needs parallel.tp > 1");
    expect_error("data:\n  kind: text\n", "t.yaml:2:3: ", "data.kind text needs data.train");
    expect_error("data:\n  kind: tokens\n", "t.yaml:2:3: ", "data.kind tokens needs data.train");
    expect_error("data: {kind: idx, train: a, train_labels: b}\n", "t.yaml:1:8: ", "a gpt model cannot read");
    expect_error("model: {preset: vit-tiny}\ndata: {kind: text, train: a}\n", "t.yaml:2:8: ",
                 "a vit model cannot read");
    expect_error("model: {kind: vit}\ndata: {kind: idx, train: a}\n", "t.yaml:2:19: ", "needs data.train_labels");
    expect_error("data: {train: a.txt}\n", "t.yaml:1:8: ", "data.kind is synthetic");
    expect_error("train: {min_lr: 0.5}\n", "t.yaml:1:9: ", "min_lr 0.5 is larger than train.lr 0.001");
    expect_error("checkpoint: {every: 10}\n", "t.yaml:1:14: ", "checkpoint.dir is not set");
    expect_error("data: {synthetic_size: 10}\n", "t.yaml:1:8: ", "less than one sample of seq_len + 1 = 33 tokens");
}

static void test_files(void)
{
    CHECK(job_load_file(&job, "/nonexistent/job.yaml", err, sizeof err) == -1 &&
              !strcmp(err, "/nonexistent/job.yaml: cannot open (No such file or directory)"),
          "missing file: %s", err);
    CHECK(job_load_file(&job, "/", err, sizeof err) == -1 && !strcmp(err, "/: cannot read (Is a directory)"),
          "a directory: %s", err);
    char path[] = "/tmp/test_jobspec.XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    fputs("train:\n  steps: 3\n  bad_key: 1\n", f);
    fclose(f);
    int rc = job_load_file(&job, path, err, sizeof err);
    char want[128];
    snprintf(want, sizeof want, "%s:3:3: unknown key 'bad_key'", path);
    CHECK(rc == -1 && !strncmp(err, want, strlen(want)), "file errors name the file: %s", err);
    const char *ov[] = {"train.bad_key=2"};
    f = fopen(path, "w");
    fputs("train:\n  steps: 3\n", f);
    fclose(f);
    const char *good[] = {"train.steps=9", "parallel.dp=4", "train.global_batch=16", "checkpoint.dir=/tmp/c"};
    rc = job_load_file_overrides(&job, path, good, 4, err, sizeof err);
    CHECK(rc == 0 && job.train.steps == 9 && job.parallel.dp == 4 && job.train.micro_batch == 4 &&
              !strcmp(job.checkpoint.dir, "/tmp/c"),
          "overrides win and derived values follow them: %s", rc ? err : "");
    rc = job_load_file_overrides(&job, path, ov, 1, err, sizeof err);
    snprintf(want, sizeof want, "%s: override 'train.bad_key=2': unknown key 'bad_key'", path);
    CHECK(rc == -1 && !strncmp(err, want, strlen(want)), "override error: %s", err);
    const char *bad[] = {"train.steps"};
    rc = job_load_file_overrides(&job, path, bad, 1, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "expected SECTION.KEY=VALUE"), "override without '=': %s", err);
    const char *latin1[] = {"checkpoint.dir=caf\xe9"};
    rc = job_load_file_overrides(&job, path, latin1, 1, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "checkpoint.dir: the value is not valid UTF-8"), "override not UTF-8: %s", err);
    const char *badv[] = {"parallel.tp=3"};
    rc = job_load_file_overrides(&job, path, badv, 1, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "override 'parallel.tp=3': model.n_head 2 is not divisible"),
          "a combination blamed on an override: %s", err);
    unlink(path);

    /* The error buffer is respected, however small. */
    char tiny[8];
    CHECK(job_load_string(&job, "x: 1\n", 5, "t.yaml", tiny, sizeof tiny) == -1 && strlen(tiny) == 7,
          "truncated error '%s'", tiny);
    CHECK(job_load_string(&job, "x: 1\n", 5, "t.yaml", NULL, 0) == -1, "no error buffer at all");
    CHECK(job_load_string(&job, "x: 1\n", 5, "a\nb.yaml", err, sizeof err) == -1 && !strchr(err, '\n') &&
              !strncmp(err, "a?b.yaml:1:1: ", 14),
          "a newline in the file name does not break the line: %s", err);
    CHECK(load("train: {steps: \"a\\nb\"}\n") == -1 && strstr(err, "got 'a\\x0ab'"),
          "a newline in a value is shown escaped: %s", err);
}

static void test_validate(void)
{
    expect_load("model: {preset: gpt2-124m, vocab_size: 50304}\n", "padded vocab");
    CHECK(job_validate(&job, err, sizeof err) == 0, "a loaded job validates");
    job.parallel.tp = 5;
    CHECK(job_validate(&job, err, sizeof err) == -1 &&
              !strcmp(err, "t.yaml:1:9: model.n_head 12 is not divisible by parallel.tp 5 (tensor parallelism "
                           "splits the heads)"),
          "validate after a change: %s", err);
    job.parallel.tp = 1;
    job.train.lr = -2;
    CHECK(job_validate(&job, err, sizeof err) == -1 && strstr(err, "train.lr must be > 0, got -2"), "%s", err);
    job.train.lr = 1e-3;
    job.train.micro_batch = 4; /* grad_accum now stale */
    CHECK(job_validate(&job, err, sizeof err) == -1 && strstr(err, "grad_accum 1 does not equal"), "%s", err);
    job.train.grad_accum = 2;
    job.parallel.microbatches = 2;
    CHECK(job_validate(&job, err, sizeof err) == 0, "consistent again: %s", err);
    job.parallel.mode = (shard_mode)7;
    CHECK(job_validate(&job, err, sizeof err) == -1 && strstr(err, "parallel.mode has no value number 7"), "%s", err);
}

static void test_round_trip(void)
{
    const char *jobs[] = {
        "train: {}\n",
        "model: {preset: gpt2-124m, n_layer: 6, vocab_size: 50304}\n"
        "train: {lr: 6e-4, min_lr: 1.234567890123e-5, warmup: 7, "
        "schedule: linear, weight_decay: 0.1, beta2: 0.999, eps: 1e-12, grad_clip: 0, precision: bf16, "
        "device: cuda, seed: 18446744073709551615, recompute: block, eval_every: 5, eval_batches: 0, threads: 3, "
        "skip_nonfinite: true, global_batch: 48, micro_batch: 2}\n"
        "parallel: {dp: 2, tp: 4, pp: 3, mode: zero2, pp_schedule: interleaved, sequence_parallel: true, "
        "bucket_mb: 1}\n",
        "model: {preset: vit-fmnist}\ndata: {kind: idx, train: \"/d/train \\\"x\\\".gz\", train_labels: "
        "'tab\tlab', val: v, val_labels: \"\\u00e9t\\u00e9\"}\ncheckpoint: {dir: ck, every: 3, keep: 5, "
        "resume: /a/b}\nlog: {metrics: m.jsonl, every: 10, progress: off, trace: t.json}\n",
        "launch: {nproc_per_node: auto, nnodes: 2, rdzv_endpoint: '[fe80::1]:29400', rdzv_id: x, "
        "max_restarts: 0, log_dir: /l}\ndata: {kind: text, train: /usr/share/dict/words, val_fraction: 0}\n",
        /* characters libyaml folds or refuses when written raw: LS, NEL, C1, BOM, DEL */
        "checkpoint: {dir: \"a\\u2028b\\x85c\\u0080d\\ufeffe\\x7f\\U0001F600\"}\n",
        "train: {recompute: selective}\nparallel: {tp: 2, sequence_parallel: true}\n",
        "model: {preset: gpt-tiny, attention: naive}\ntrain: {recompute: selective}\n",
        "model: {preset: smollm-135m, n_kv_head: 1, max_positions: 4096, rope_theta: 123456.789, norm_eps: 1e-6}\n"
        "parallel: {tp: 3}\n",
        "model: {preset: gpt-70b}\nparallel: {tp: 8, pp: 8, pp_schedule: gpipe, mode: fsdp}\n"
        "train: {global_batch: 64, micro_batch: 1, lr: 0.1}\n",
    };
    for (size_t i = 0; i < sizeof jobs / sizeof jobs[0]; i++) {
        int rc = load(jobs[i]);
        CHECK(rc == 0, "round-trip job %zu loads%s%s", i, rc ? ": " : "", rc ? err : "");
        if (rc) continue;
        char *text = NULL;
        int same = round_trip(&job, &text);
        CHECK(same, "job %zu: print then load gives the same struct%s%s", i, same ? "" : "; ", same ? "" : err);
        char *again = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&again, &len);
        job_print(&job2, f);
        fclose(f);
        CHECK(!strcmp(text, again), "job %zu: printing is stable", i);
        free(text);
        free(again);
    }
    CHECK(job.parallel.mode == SHARD_FSDP && job.model.d_ff == 35840, "last job has the expected values");
}

/* parallel.ep: default 1, the experts and dp x cp it must divide, model.moe
 * it needs; each error one line at the key; dp: auto checked once the world
 * is known. */
static void test_ep(void)
{
    expect_load("model: {preset: gpt-tiny}\n", "no ep");
    CHECK(job.parallel.ep == 1, "parallel.ep defaults to 1");
    expect_load("model: {moe: {experts: 8}}\nparallel: {dp: 4, ep: 4}\ntrain: {global_batch: 8, micro_batch: 1}\n",
                "ep 4 over dp 4");
    CHECK(job.parallel.ep == 4 && job.parallel.dp == 4, "parallel.ep 4 loads");
    CHECK(round_trip(&job, NULL), "ep: print then load gives the same struct");
    expect_error("model: {moe: {experts: 8}}\nparallel: {dp: 4, expert_model_parallel_size: 2}\n",
                 "t.yaml:2:19: ", "did you mean 'ep'?");
    expect_error("parallel: {dp: 2, ep: 2}\ntrain: {global_batch: 8, micro_batch: 1}\n", "t.yaml:1:19: ",
                 "parallel.ep 2 needs model.moe");
    expect_error("model: {moe: {experts: 6}}\nparallel: {dp: 4, ep: 4}\ntrain: {global_batch: 8, micro_batch: 1}\n",
                 "t.yaml:2:19: ", "parallel.ep 4 does not divide model.moe.experts 6");
    expect_error("model: {moe: {experts: 8}}\nparallel: {dp: 2, ep: 4}\ntrain: {global_batch: 8, micro_batch: 1}\n",
                 "t.yaml:2:19: ", "parallel.ep 4 does not divide dp 2 x cp 1 = 2");
    expect_error("model: {moe: {experts: 8}}\nparallel: {ep: 0}\n", "t.yaml:2:16: ", "parallel.ep must be >= 1");
    /* dp: auto: the world decides */
    expect_load("model: {moe: {experts: 8}}\nparallel: {dp: auto, ep: 4}\ntrain: {global_batch: 8, micro_batch: 1}\n",
                "ep with dp: auto");
    int rc = job_resolve_world(&job, 2, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "parallel.ep 4 does not divide dp 2"), "dp: auto 2 with ep 4: %s", err);
    expect_load("model: {moe: {experts: 8}}\nparallel: {dp: auto, ep: 4}\ntrain: {global_batch: 8, micro_batch: 1}\n",
                "ep with dp: auto");
    rc = job_resolve_world(&job, 8, err, sizeof err);
    CHECK(rc == 0 && job.parallel.dp == 8, "dp: auto 8 with ep 4: %s", rc ? err : "");
    expect_load("model: {moe: {experts: 8}}\nparallel: {dp: 2, cp: 2, ep: 4}\ntrain: {global_batch: 8, micro_batch: 2}\n",
                "ep 4 over dp 2 x cp 2");
    expect_load("model: {moe: {experts: 8}}\nparallel: {dp: 2, ep: 2, mode: hsdp}\n"
                "train: {global_batch: 8, micro_batch: 1}\n", "ep with hsdp");
}

/* model.moe: a mapping inside model, its defaults, which blocks, the
 * capacity rule, overrides by full name, errors at their key, round trip. */
static void test_moe(void)
{
    expect_load("model: {preset: gpt-tiny}\n", "no moe");
    CHECK(job.model.moe.experts == 0 && job_moe_layers(&job.model) == 0 && job.model.moe.d_ff_expert == 0,
          "no model.moe: no MoE block");
    expect_load("model:\n  n_layer: 4\n  moe:\n    experts: 8\n", "moe defaults");
    const job_moe *e = &job.model.moe;
    CHECK(e->experts == 8 && e->top_k == 2 && e->d_ff_expert == 128 && e->shared_experts == 0 && e->every == 1 &&
              e->first_dense == 0 && e->router == ROUTER_SOFTMAX && e->norm_top_k == 1 && e->aux_loss_coef == 0.01 &&
              e->bias_update_rate == 0 && e->capacity_factor == 0,
          "moe defaults: top_k 2, d_ff_expert = d_ff, softmax, normalised, aux 0.01, dropless");
    CHECK(job_moe_layers(&job.model) == 4 && job_moe_capacity(e, 32) == 0, "every block MoE; dropless");
    expect_load("model:\n  n_layer: 7\n  moe: {experts: 4, every: 2, first_dense: 1, router: sigmoid, "
                "d_ff_expert: 16, capacity_factor: 1.25, top_k: 1}\n",
                "moe with every and first_dense");
    int blocks[7], want[7] = {0, 1, 0, 1, 0, 1, 0};
    for (int i = 0; i < 7; i++) blocks[i] = job_moe_block(&job.model, i);
    CHECK(!memcmp(blocks, want, sizeof want) && job_moe_layers(&job.model) == 3,
          "first_dense 1, every 2: blocks 1, 3, 5 (Qwen2-MoE's decoder_sparse_step 2)");
    /* ceil(1.25 * 32 tokens * 1 / 4) = 10; ceil(1.25 * 30 / 4) = ceil(9.375) = 10; a huge factor: the sample */
    CHECK(job_moe_capacity(&job.model.moe, 32) == 10 && job_moe_capacity(&job.model.moe, 30) == 10,
          "capacity ceil(cf x tokens x top_k / experts)");
    job_moe big = job.model.moe;
    big.capacity_factor = 100;
    CHECK(job_moe_capacity(&big, 32) == 32, "capacity at most the sample's tokens");
    big.capacity_factor = 1e-9;
    CHECK(job_moe_capacity(&big, 32) == 1, "capacity at least 1");
    expect_load("model: {moe: null}\n", "moe: null is no moe");
    CHECK(job.model.moe.experts == 0, "moe: null leaves no MoE");

    expect_error("model:\n  moe:\n    experts: 2\n    top_k: 3\n", "t.yaml:4:5: ",
                 "model.moe.top_k 3 is more than model.moe.experts 2");
    expect_error("model:\n  moe:\n    top_k: 1\n", "t.yaml:2:3: ", "model.moe needs experts");
    expect_error("model:\n  moe:\n    experts: 0\n", "t.yaml:3:14: ", "model.moe.experts must be >= 1");
    expect_error("model:\n  moe:\n    experts: 1\n", "t.yaml:3:5: ", "model.moe.top_k 2 is more than");
    expect_error("model:\n  moe: {experts: 4}\n  moe: {experts: 2}\n", "t.yaml:3:3: ", "duplicate key 'moe'");
    expect_error("model:\n  moe: {experts: 4, num_experts_per_tok: 2}\n", "t.yaml:2:21: ",
                 "unknown key 'num_experts_per_tok' in section 'model.moe'; did you mean 'top_k'?");
    expect_error("model: {kind: vit, moe: {experts: 4}}\n", "t.yaml:1:26: ",
                 "model.moe.experts applies to gpt and llama models only");
    expect_load("model: {moe: {experts: 4}}\nparallel: {cp: 2}\n", "moe with cp");
    expect_load("model: {moe: {experts: 4}}\nparallel: {tp: 2, sequence_parallel: true}\n", "moe with tp and sp");
    expect_error("model: {moe: {experts: 4, d_ff_expert: 33}}\nparallel: {tp: 2}\n", "t.yaml:2:12: ",
                 "model.moe.d_ff_expert 33 is not divisible by parallel.tp 2");
    expect_error("model: {moe: {experts: 4}}\ntrain: {cuda_graphs: true}\n", "t.yaml:2:9: ",
                 "train.cuda_graphs with model.moe");
    expect_error("model: {moe: {experts: 4, aux_loss_coef: -1}}\n", "t.yaml:1:42: ",
                 "model.moe.aux_loss_coef must be >= 0");
    expect_error("\"model.moe\": {experts: 4}\n", "t.yaml:1:1: ", "unknown section 'moe'");

    /* overrides by full name; the section need not be in the file */
    char path[] = "/tmp/test_jobspec_moe.XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    fputs("model: {n_layer: 3}\n", f);
    fclose(f);
    const char *ov[] = {"model.moe.experts=16", "model.moe.top_k=4", "model.moe.router=sigmoid"};
    int rc = job_load_file_overrides(&job, path, ov, 3, err, sizeof err);
    CHECK(rc == 0 && job.model.moe.experts == 16 && job.model.moe.top_k == 4 && job.model.moe.router == ROUTER_SIGMOID,
          "model.moe.* overrides: %s", rc ? err : "");
    const char *bad[] = {"model.moe.expert=16"};
    rc = job_load_file_overrides(&job, path, bad, 1, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "unknown key 'expert' in section 'model.moe'; did you mean 'experts'?"),
          "a misspelt moe override: %s", err);
    unlink(path);

    /* round trip, with every key set */
    expect_load("model:\n  n_layer: 3\n  moe: {experts: 8, top_k: 3, d_ff_expert: 24, shared_experts: 2, every: 2, "
                "first_dense: 1, router: sigmoid, norm_top_k: false, aux_loss_coef: 1e-4, bias_update_rate: 0.001, "
                "capacity_factor: 1.5}\n",
                "moe, every key");
    CHECK(round_trip(&job, NULL), "moe: print then load gives the same struct");
    char why[256];
    CHECK(job_key_list_check("model.moe.experts, train.lr", why, sizeof why) == 0, "model.moe.experts is a job key");
}

/* Every key and preset is documented in dtrun-job(5). */
static void test_man_page(void)
{
    FILE *f = fopen("man/dtrun-job.5", "r");
    CHECK(f != NULL, "man/dtrun-job.5 exists");
    if (!f) return;
    static char page[1 << 17];
    size_t n = fread(page, 1, sizeof page - 1, f);
    page[n] = 0;
    fclose(f);
    const char *keys[] = {"kind", "preset", "n_layer", "activation", "norm_eps", "attention", "init_from", "n_head", "d_model", "d_ff", "vocab_size", "seq_len",
                          "image_size", "patch_size", "channels", "n_classes", "train", "train_labels", "val",
                          "val_labels", "val_fraction", "synthetic_size", "steps", "global_batch", "micro_batch",
                          "lr", "min_lr", "warmup", "schedule", "weight_decay", "beta1", "beta2", "eps",
                          "grad_clip", "precision", "device", "seed", "recompute", "eval_every", "eval_batches", "threads",
                          "skip_nonfinite", "cuda_graphs", "dp", "tp", "pp", "mode", "pp_schedule", "microbatches",
                          "virtual_stages", "sequence_parallel", "bucket_mb", "dir", "every", "keep", "resume",
                          "metrics", "progress", "trace", "nproc_per_node", "nnodes", "rdzv_endpoint", "rdzv_id",
                          "max_restarts", "log_dir", "head_chunk_rows", "experts", "top_k", "d_ff_expert",
                          "shared_experts", "first_dense", "router", "norm_top_k", "aux_loss_coef",
                          "bias_update_rate", "capacity_factor", "n_kv_head", "rope_theta",
                          "tie_embeddings", "max_positions"};
    int missing = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "\n.B %s\n", keys[i]);
        if (!strstr(page, needle)) {
            printf("# not documented: %s\n", keys[i]);
            missing++;
        }
    }
    CHECK(missing == 0, "every key has a .B entry in dtrun-job(5) (%d missing)", missing);
    missing = 0;
    for (int i = 0; job_preset_name(i); i++)
        if (!strstr(page, job_preset_name(i))) {
            printf("# preset not documented: %s\n", job_preset_name(i));
            missing++;
        }
    CHECK(missing == 0, "every preset is in dtrun-job(5)");
}

int main(void)
{
    test_defaults();
    test_presets();
    test_llama();
    test_derived();
    test_dp_auto();
    test_errors();
    test_files();
    test_validate();
    test_round_trip();
    test_moe();
    test_ep();
    test_man_page();
    CHECK_DONE();
}
