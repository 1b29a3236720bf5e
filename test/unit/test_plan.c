/* test_plan.c — the cost model: sizes per category, the dry-run report and the
 * planner.
 *
 * Golden figures (the issue's): 16 bytes per parameter for mixed-precision Adam;
 * 13B -> ~208 GB and 70B -> ~1.12 TB of model state; the 3.2B ViT over 64 FSDP ranks
 * -> ~0.6 GB per rank of fp32 master + Adam m, v (3.2e9 x 12 / 64); the bubble table
 * of 2/4/8 stages x 4..64 microbatches (8 x 32 -> 17.9 %). Then monotonicity, the
 * agreement of sizes with the model's own size functions and with comm_chunk, the
 * warnings, JSON that parses back to the same numbers, and the planner over 64
 * GPUs (its time is printed, not asserted). Needs configs/hardware (run from the
 * repository root, as test/run.sh does). */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm/comm.h"
#include "runtime/model/model.h"
#include "runtime/parallel/pp_sim.h"
#include "runtime/parallel/sizes.h"
#include "runtime/plan/estimate.h"
#include "runtime/plan/hardware.h"
#include "runtime/plan/machine.h"
#include "runtime/plan/plan.h"
#include "test/unit/check.h"

#define GB 1e9

/* ---- helpers ---- */

static int load_job(job_spec *job, const char *yaml)
{
    char err[512];
    int rc = job_load_string(job, yaml, strlen(yaml), "test.yaml", err, sizeof err);
    if (rc) CHECK(0, "test job loads: %s", err);
    return rc;
}

/* A job around a model preset; falls back to a hand-built model when the preset
 * is not there (the preset table is another file's). */
static int preset_job(job_spec *job, const char *preset, const char *extra, const job_model *fallback)
{
    char yaml[2048];
    if (job_preset_model(preset, &(job_model){0}) == 0) {
        snprintf(yaml, sizeof yaml, "model:\n  preset: %s\n%s", preset, extra);
        return load_job(job, yaml);
    }
    printf("# preset %s missing: using the hand-built shape\n", preset);
    snprintf(yaml, sizeof yaml, "%s", extra);
    if (load_job(job, yaml)) return -1;
    job->model = *fallback;
    return 0;
}

static size_t state_bytes(const sizes_memory *m)
{
    return m->bytes[SIZES_PARAMS] + m->bytes[SIZES_MASTER] + m->bytes[SIZES_GRADS] + m->bytes[SIZES_OPTIM];
}

static sizes *make_sizes(const job_spec *job, int gpu, int per_node)
{
    char err[512];
    sizes_env env = {.gpu = gpu, .ranks_per_node = per_node};
    sizes *s = sizes_create(job, &env, err, sizeof err);
    if (!s) printf("# sizes_create: %s\n", err);
    return s;
}

/* Model state of one whole-model rank (dp = tp = pp = 1). */
static size_t whole_state(const job_spec *job, int gpu)
{
    sizes *s = make_sizes(job, gpu, 1);
    if (!s) return 0;
    sizes_memory m;
    sizes_rank_memory(s, (sizes_at){0, 0, 0}, &m);
    sizes_destroy(s);
    return state_bytes(&m);
}

static const char *BF16_TRAIN = "train:\n  global_batch: 8\n  micro_batch: 1\n  precision: bf16\n";

/* ---- golden figures ---- */

static void test_bytes_per_param(void)
{
    job_spec job;
    if (load_job(&job, "model:\n  preset: gpt2-124m\ntrain:\n  global_batch: 8\n  micro_batch: 8\n  precision: bf16\n"))
        return;
    size_t held = sizes_model_numel(&job.model, NULL);
    sizes *s = make_sizes(&job, 1, 1);
    if (!s) return;
    sizes_memory m;
    sizes_rank_memory(s, (sizes_at){0, 0, 0}, &m);
    CHECK(m.bytes[SIZES_PARAMS] == 2 * held && m.bytes[SIZES_GRADS] == 2 * held && m.bytes[SIZES_MASTER] == 4 * held &&
              m.bytes[SIZES_OPTIM] == 8 * held && state_bytes(&m) == 16 * held,
          "mixed-precision Adam holds 16 bytes per parameter: bf16 param 2 + bf16 grad 2 + fp32 master 4 + m 4 + v 4 "
          "(%zu params: %zu + %zu + %zu + %zu bytes)",
          held, m.bytes[SIZES_PARAMS], m.bytes[SIZES_GRADS], m.bytes[SIZES_MASTER], m.bytes[SIZES_OPTIM]);
    sizes_destroy(s);
    /* the CPU backend (and fp32 anywhere): param 4 + grad 4 + m 4 + v 4, no master */
    size_t cpu = whole_state(&job, 0);
    job.train.precision = PREC_FP32;
    size_t gpu_fp32 = whole_state(&job, 1);
    CHECK(cpu == 16 * held && gpu_fp32 == 16 * held,
          "fp32 Adam holds 16 bytes per parameter too, no master copy (cpu %zu, gpu fp32 %zu = 16 x %zu)", cpu,
          gpu_fp32, held);
}

static void test_golden_13b_70b(void)
{
    job_spec job;
    job_model m13 = {.kind = MODEL_GPT, .n_layer = 40, .n_head = 40, .d_model = 5120, .d_ff = 20480,
                     .vocab_size = 50304, .seq_len = 2048};
    if (preset_job(&job, "gpt-13b", BF16_TRAIN, &m13) == 0) {
        size_t distinct, held = sizes_model_numel(&job.model, &distinct);
        double state = (double)whole_state(&job, 1);
        CHECK(state == 16.0 * held && fabs(state / 208e9 - 1) < 0.03,
              "13B GPT: %.2f B parameters held (%.2f B distinct; the head keeps its copy of wte) x 16 B = %.1f GB "
              "of model state (issue: ~208 GB)",
              held / 1e9, distinct / 1e9, state / GB);
    }
    /* "70B": Llama-2-70B's per-layer parameter count (GQA attention 2.25 C^2 +
     * SwiGLU 3 C x 28672) on our plain block: 4 C^2 + 2 C d_ff with d_ff 35840;
     * Llama's 32000-token vocabulary. The gpt-70b preset has the same blocks with
     * the padded vocabulary 50304; it is printed for reference. */
    job_model m70 = {.kind = MODEL_GPT, .n_layer = 80, .n_head = 64, .d_model = 8192, .d_ff = 35840,
                     .vocab_size = 32000, .seq_len = 4096};
    if (load_job(&job, BF16_TRAIN) == 0) {
        job.model = m70;
        size_t held = sizes_model_numel(&job.model, NULL);
        double state = (double)whole_state(&job, 1);
        CHECK(state == 16.0 * held && fabs(state / 1.12e12 - 1) < 0.03,
              "70B GPT (Llama-2-70B-sized: %.2f B parameters held) x 16 B = %.3f TB of model state (issue: ~1.12 TB)",
              held / 1e9, state / 1e12);
    }
    if (preset_job(&job, "gpt-70b", BF16_TRAIN, &m70) == 0)
        printf("# preset gpt-70b: %.2f B parameters held -> %.0f GB of model state\n",
               sizes_model_numel(&job.model, NULL) / 1e9, (double)whole_state(&job, 1) / GB);
}

static void test_golden_vit_64(void)
{
    job_spec job;
    job_model vit = {.kind = MODEL_VIT, .n_layer = 64, .n_head = 16, .d_model = 2048, .d_ff = 8192,
                     .image_size = 224, .patch_size = 16, .channels = 3, .n_classes = 1000};
    const char *extra = "data:\n  kind: synthetic\ntrain:\n  global_batch: 64\n  micro_batch: 1\n  precision: bf16\n"
                        "parallel:\n  dp: 64\n  mode: fsdp\n";
    if (preset_job(&job, "vit-3b", extra, &vit)) return;
    sizes *s = make_sizes(&job, 1, 8);
    if (!s) return;
    size_t N = sizes_model_numel(&job.model, NULL);
    sizes_memory m;
    sizes_rank_memory(s, (sizes_at){0, 0, 0}, &m);
    double master_adam = (double)(m.bytes[SIZES_MASTER] + m.bytes[SIZES_OPTIM]);
    double expect = (double)N * 12.0 / 64.0;
    CHECK(fabs(master_adam / expect - 1) < 0.01 && fabs(master_adam / 0.6e9 - 1) < 0.05,
          "ViT %.2f B over 64 FSDP ranks: fp32 master + Adam m, v = %.3f GB per rank (N x 12 / 64 = %.3f GB; issue: "
          "~0.6 GB); with the bf16 param and grad shards %.3f GB",
          N / 1e9, master_adam / GB, expect / GB, (double)state_bytes(&m) / GB);
    /* the last dp rank holds the short end of each unit: never more */
    sizes_memory last;
    sizes_rank_memory(s, (sizes_at){63, 0, 0}, &last);
    CHECK(state_bytes(&last) <= state_bytes(&m), "dp rank 63 holds no more than rank 0 (%zu <= %zu)",
          state_bytes(&last), state_bytes(&m));
    sizes_destroy(s);
}

static void test_golden_bubble_table(void)
{
    static const int P[] = {2, 4, 8}, M[] = {4, 8, 16, 32, 64};
    printf("# bubble (p-1)/(m+p-1), from the schedule sizes.h builds, equal chunks, free messages:\n#   p\\m ");
    for (int j = 0; j < 5; j++) printf("%7d", M[j]);
    printf("\n");
    int all_ok = 1;
    double b_8_32 = -1;
    for (int i = 0; i < 3; i++) {
        printf("#   %d   ", P[i]);
        for (int j = 0; j < 5; j++) {
            job_spec job;
            char yaml[512];
            snprintf(yaml, sizeof yaml,
                     "model:\n  preset: gpt-small\n  n_layer: 16\ntrain:\n  global_batch: %d\n  micro_batch: 1\n"
                     "parallel:\n  pp: %d\n  pp_schedule: 1f1b\n",
                     M[j], P[i]);
            if (load_job(&job, yaml)) {
                all_ok = 0;
                continue;
            }
            sizes *s = make_sizes(&job, 0, 0);
            if (!s) {
                all_ok = 0;
                continue;
            }
            double fwd[8], bwd[8];
            for (int c = 0; c < 8; c++) fwd[c] = 1, bwd[c] = 2;
            pp_sim_costs costs = {fwd, bwd, 0, NULL, NULL};
            pp_sim_result r;
            char err[256];
            int rc = pp_sim_run(sizes_schedule(s), &costs, &r, err, sizeof err);
            double want = (double)(P[i] - 1) / (M[j] + P[i] - 1);
            if (rc || fabs(r.bubble - want) > 1e-9) all_ok = 0;
            printf("%6.1f%%", rc ? -1.0 : 100 * r.bubble);
            if (P[i] == 8 && M[j] == 32) b_8_32 = r.bubble;
            pp_sim_free(&r);
            sizes_destroy(s);
        }
        printf("\n");
    }
    CHECK(all_ok && fabs(b_8_32 - 0.179) < 0.0005,
          "bubble table 2/4/8 stages x 4..64 microbatches = (p-1)/(m+p-1); 8 x 32 -> %.1f %%", 100 * b_8_32);
}

/* The dry-run's own bubble (real chunk costs, p2p) stays near the ideal when the
 * blocks dominate and a microbatch is large enough that messages are cheap (with
 * micro_batch 1 the 5 us NVLink latency is a fifth of a chunk's forward, and the
 * simulated 1F1B bubble rightly grows to ~26 %). */
static void test_estimate_bubble(void)
{
    hw_profile hw;
    char err[512];
    if (hw_load(&hw, "h100-sxm", err, sizeof err)) {
        CHECK(0, "h100-sxm profile: %s", err);
        return;
    }
    job_spec job;
    if (load_job(&job, "model:\n  preset: vit-l16\ndata:\n  kind: synthetic\ntrain:\n  global_batch: 256\n"
                       "  micro_batch: 8\n  precision: bf16\nparallel:\n  pp: 8\n  pp_schedule: 1f1b\n"))
        return;
    plan_estimate e;
    int rc = plan_estimate_memory(&e, &job, &hw, 1, 8, err, sizeof err);
    if (rc == 0) rc = plan_estimate_time(&e, err, sizeof err);
    double ideal = 7.0 / 39.0;
    CHECK(rc == 0 && e.has_sim && fabs(e.bubble - ideal) < 0.03,
          "dry-run bubble of vit-l16 on 8 stages x 32 microbatches: %.1f %% (ideal %.1f %%; embedding, head and "
          "p2p make the difference)",
          100 * e.bubble, 100 * ideal);
    plan_estimate_free(&e);
}

/* ---- agreement with the model and the comm layer ---- */

static void test_unit_flops_and_numel(void)
{
    job_spec gpt, vit, llama;
    if (load_job(&gpt, "model:\n  preset: gpt2-124m\n") ||
        load_job(&vit, "model:\n  preset: vit-b16\ndata:\n  kind: synthetic\n") ||
        load_job(&llama, "model:\n  preset: llama3-8b\n  seq_len: 1024\n"))
        return;
    job_model gn = gpt.model, vn = vit.model, ln = llama.model;
    gn.attention = vn.attention = ln.attention = ATTN_NAIVE;
    const job_model *models[6] = {&gpt.model, &vit.model, &gn, &vn, &llama.model, &ln};
    for (int k = 0; k < 6; k++) {
        const job_model *m = models[k];
        /* selective re-runs each block's QK^T and AV (2 x 2 x seq^2 x C) with
         * naive attention, nothing with fused; block the whole block up to its
         * MLP projection, which includes them */
        double none = model_flops_per_sample(m, RECOMPUTE_NONE), sel = model_flops_per_sample(m, RECOMPUTE_SELECTIVE),
               blk = model_flops_per_sample(m, RECOMPUTE_BLOCK), seq = model_seq_len(m);
        double adds = m->attention == ATTN_NAIVE ? 4.0 * m->n_layer * seq * seq * m->d_model : 0;
        CHECK(none <= sel && sel < blk && fabs(sel - none - adds) < 1,
              "%s, %s attention: FLOPs per sample: none %.6g, selective %.6g (%s), block %.6g",
              job_model_kind_name(m->kind), job_attention_name(m->attention), none, sel,
              adds > 0 ? "adds 4 L seq^2 C" : "the same", blk);
        for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_ELEMENTWISE; rc++) {
            double sum = 0;
            for (int u = 0; u < model_n_units(m); u++) sum += sizes_unit_flops(m, u, (recompute_kind)rc);
            double want = model_exec_flops_per_sample(m, (recompute_kind)rc);
            CHECK(fabs(sum / want - 1) < 1e-12, "%s, recompute %s: per-unit FLOPs add up to "
                  "model_exec_flops_per_sample (%.6g vs %.6g)", job_model_kind_name(m->kind),
                  job_recompute_name((recompute_kind)rc), sum, want);
        }
        /* what a step executes beyond the model FLOPs without recompute: the GPT
         * head's logits GEMM once more in backward (2 seq V C), nothing for ViT */
        /* the step-time model's GEMMs (sizes_unit_work_of) are the GPT's FLOPs,
         * unit by unit, on each of tp 2 ranks (the ViT's replicated classifier
         * runs whole on each); the GPT head's backward holds the recompute of
         * its logits: 3 forwards' worth instead of 2 */
        int works_add_up = 1;
        double head_fwd = 0, head_bwd = 0;
        for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_ELEMENTWISE; rc++)
            for (int u = 0; u < model_n_units(m); u++) {
                sizes_unit_work w;
                sizes_unit_work_of(m, u, (recompute_kind)rc, 4, 2, 0, 2.0, &w);
                double f = 0;
                for (int i = 0; i < w.n_gemm; i++) f += w.gemm[i].fwd_flops + w.gemm[i].bwd_flops;
                if (job_model_is_lm(m))
                    works_add_up &= fabs(2.0 * f - 4.0 * sizes_unit_flops(m, u, (recompute_kind)rc)) <=
                                    1e-9 * (f + 1.0);
                if (u == model_n_units(m) - 1 && rc == RECOMPUTE_NONE)
                    head_fwd = w.gemm[0].fwd_flops, head_bwd = w.gemm[0].bwd_flops;
            }
        CHECK(works_add_up && fabs(head_bwd - (job_model_is_lm(m) ? 3.0 : 2.0) * head_fwd) <= 1e-9 * head_bwd,
              "%s: the step time's GEMMs x tp = sizes_unit_flops x micro_batch, unit by unit (GPT); the head's "
              "backward GEMMs are %.0f x its forward's (%s)", job_model_kind_name(m->kind), head_bwd / head_fwd,
              job_model_is_lm(m) ? "the chunked LM head computes its logits again" : "no recompute");
        double extra = model_exec_flops_per_sample(m, RECOMPUTE_NONE) - none;
        double head = job_model_is_lm(m) ? 2.0 * seq * m->vocab_size * m->d_model : 0.0;
        CHECK(fabs(extra - head) < 1, "%s: executed - model FLOPs per sample = %.6g (the LM head's recompute: %.6g)",
              job_model_kind_name(m->kind), extra, head);
    }
    /* sizes' unit table (blocks assumed alike) against model_unit_numel, tp 4 */
    gpt.parallel.tp = 4;
    gpt.model.vocab_size = 50304;
    sizes *s = make_sizes(&gpt, 0, 0);
    int same = s != NULL;
    size_t total = 0;
    for (int r = 0; s && r < 4; r++)
        for (int u = 0; u < model_n_units(&gpt.model); u++) {
            same &= sizes_unit_numel(s, u, r) == model_unit_numel(&gpt.model, u, r, 4);
            total += sizes_unit_numel(s, u, r);
        }
    /* replicated on every tp rank: per block ln1, ln2 (w, b) and the two row-parallel
     * biases (6 C), wpe (seq x C), lnf (2 C) */
    size_t C = 768, replicated = (size_t)gpt.model.n_layer * 6 * C + (size_t)gpt.model.seq_len * C + 2 * C;
    CHECK(same && total == sizes_model_numel(&gpt.model, NULL) + 3 * replicated,
          "sizes_unit_numel = model_unit_numel for every unit and tp rank (tp 4; replicated layernorms and biases "
          "counted on each rank)");
    sizes_destroy(s);
}

static void test_shards_match_comm_chunk(void)
{
    job_spec job;
    if (load_job(&job, "model:\n  preset: gpt-small\ntrain:\n  global_batch: 6\n  micro_batch: 1\n"
                       "parallel:\n  dp: 6\n  mode: fsdp\n"))
        return;
    sizes *s = make_sizes(&job, 0, 0);
    if (!s) return;
    int ok = 1;
    for (int u = 0; u < model_n_units(&job.model); u++) {
        size_t n = sizes_unit_numel(s, u, 0), covered = 0, expect_lo = 0;
        for (int r = 0; r < 6; r++) {
            size_t lo, off, len, got = sizes_shard(s, SHARD_OF_PARAM, u, (sizes_at){r, 0, 0}, &lo);
            comm_chunk(n, 6, r, &off, &len);
            ok &= got == len && lo == off && lo == expect_lo;
            expect_lo += got;
            covered += got;
        }
        ok &= covered == n;
    }
    size_t largest = 0;
    for (int u = 0; u < model_n_units(&job.model); u++)
        if (sizes_unit_numel(s, u, 0) > largest) largest = sizes_unit_numel(s, u, 0);
    CHECK(ok, "FSDP shards of every unit are comm_chunk's slices and cover it exactly once (dp 6)");
    CHECK(sizes_gather_numel(s, (sizes_at){0, 0, 0}) == largest && sizes_gather_buffers(s) == 2,
          "FSDP gather buffer = the largest unit (%zu elements) x 2 (prefetch)", largest);
    sizes_memory m;
    sizes_rank_memory(s, (sizes_at){0, 0, 0}, &m);
    CHECK(m.bytes[SIZES_COMM] == 2 * largest * (4 + 4),
          "FSDP comm bytes = 2 gathered units of params and grads, fp32 (%zu)", m.bytes[SIZES_COMM]);
    sizes_destroy(s);
}

static void test_stage_params_and_acts(void)
{
    job_spec job;
    if (load_job(&job, "model:\n  preset: gpt-small\n  n_layer: 8\ntrain:\n  global_batch: 8\n  micro_batch: 1\n"
                       "parallel:\n  pp: 4\n  pp_schedule: 1f1b\n"))
        return;
    sizes *s = make_sizes(&job, 0, 0);
    if (!s) return;
    size_t sum = 0;
    int acts_ok = 1;
    for (int p = 0; p < 4; p++) {
        sizes_memory m;
        sizes_rank_memory(s, (sizes_at){0, p, 0}, &m);
        sum += m.bytes[SIZES_PARAMS];
        /* 1F1B keeps min(p - rank, m) microbatches of its chunk, and one working set */
        model_acts_size z = sizes_chunk_acts(s, p, 0);
        size_t want = (size_t)(4 - p) * z.stash + z.work;
        acts_ok &= m.bytes[SIZES_ACTS] + m.bytes[SIZES_LOGITS] == want && sizes_acts_slots(s, p) == 4 - p;
    }
    CHECK(sum == 4 * sizes_model_numel(&job.model, NULL),
          "the 4 pipeline stages' fp32 params add up to the whole model (%zu bytes)", sum);
    CHECK(acts_ok, "1F1B stage r holds (4 - r) micro-batch stashes of its chunk and one working set");
    sizes_destroy(s);

    job.parallel.pp = 1;
    s = make_sizes(&job, 0, 0);
    if (!s) return;
    sizes_memory m;
    sizes_rank_memory(s, (sizes_at){0, 0, 0}, &m);
    model_shard whole = {0, 1, 0, model_n_units(&job.model), 0, 0, 1, 0, 1};
    CHECK(m.bytes[SIZES_ACTS] + m.bytes[SIZES_LOGITS] == model_acts_bytes(&job.model, &whole, 1, RECOMPUTE_NONE),
          "pp 1: one model_acts of the whole model, whatever the microbatch count");
    sizes_destroy(s);
}

/* ---- monotonicity ---- */

static size_t rank0(const job_spec *job, sizes_category c, int want_state)
{
    sizes *s = make_sizes(job, 1, 8);
    if (!s) return 0;
    sizes_memory m;
    sizes_rank_memory(s, (sizes_at){0, 0, 0}, &m);
    sizes_destroy(s);
    return want_state ? state_bytes(&m) : m.bytes[c];
}

static void test_monotonic(void)
{
    job_spec job;
    if (load_job(&job, "model:\n  preset: gpt2-124m\ntrain:\n  global_batch: 8\n  micro_batch: 2\n  precision: bf16\n"
                       "parallel:\n  dp: 4\n"))
        return;
    size_t single;
    {
        job_spec one = job;
        one.parallel.dp = 1;
        one.train.micro_batch = 8;
        one.train.grad_accum = 1;
        one.parallel.microbatches = 1;
        single = rank0(&one, 0, 1);
    }
    size_t st[5];
    for (int mode = SHARD_NONE; mode <= SHARD_FSDP; mode++) {
        job.parallel.mode = (shard_mode)mode;
        st[mode] = rank0(&job, 0, 1);
    }
    CHECK(st[SHARD_FSDP] <= 0.30 * single,
          "FSDP over 4 ranks holds %.1f %% (<= 30 %%) of one rank's params + grads + master + optimizer",
          100.0 * st[SHARD_FSDP] / single);
    CHECK(st[SHARD_ZERO1] < st[SHARD_NONE] && st[SHARD_ZERO2] < st[SHARD_ZERO1] && st[SHARD_FSDP] < st[SHARD_ZERO2],
          "model state: DDP %.0f MB > ZeRO-1 %.0f MB > ZeRO-2 %.0f MB > FSDP %.0f MB", st[0] / 1e6, st[1] / 1e6,
          st[2] / 1e6, st[3] / 1e6);
    job.parallel.mode = SHARD_HSDP;
    job.parallel.dp = 8;
    job.train.micro_batch = 1;
    size_t hsdp;
    {
        sizes *s = make_sizes(&job, 1, 4); /* 4 ranks per node: shard over 4, replicate over 2 */
        sizes_memory m;
        sizes_rank_memory(s, (sizes_at){0, 0, 0}, &m);
        hsdp = state_bytes(&m);
        CHECK(sizes_shard_group(s, SHARD_OF_PARAM) == 4, "HSDP with 4 ranks per node shards over 4 (got %d)",
              sizes_shard_group(s, SHARD_OF_PARAM));
        sizes_destroy(s);
    }
    job.parallel.mode = SHARD_FSDP;
    size_t fsdp8 = rank0(&job, 0, 1);
    CHECK(fsdp8 < hsdp && fabs((double)hsdp / (single / 4.0) - 1) < 0.01,
          "HSDP (8 = 2 nodes x 4) holds what FSDP over 4 holds (%.0f MB), more than FSDP over 8 (%.0f MB)",
          hsdp / 1e6, fsdp8 / 1e6);

    job.parallel.mode = SHARD_NONE;
    job.parallel.dp = 1;
    job.train.micro_batch = 8;
    job.train.grad_accum = 1;
    job.parallel.microbatches = 1;
    size_t seq = (size_t)model_seq_len(&job.model), L = (size_t)job.model.n_layer, B = 8;
    size_t heads = (size_t)job.model.n_head, C = (size_t)job.model.d_model;
    size_t probs = B * heads * seq * seq * 2; /* a block's bf16 [B, heads, seq, seq] */
    size_t a_none[2];
    for (int naive = 1; naive >= 0; naive--) {
        const char *kind = naive ? "naive" : "fused";
        job.model.attention = naive ? ATTN_NAIVE : ATTN_FUSED;
        job.train.recompute = RECOMPUTE_NONE;
        a_none[naive] = rank0(&job, SIZES_ACTS, 0);
        job.train.recompute = RECOMPUTE_BLOCK;
        size_t a_rc = rank0(&job, SIZES_ACTS, 0);
        /* the probabilities make most of naive's activations */
        CHECK(a_rc < a_none[naive] / (naive ? 3 : 2), "%s attention: recompute lowers activations: %.0f MB -> %.0f MB",
              kind, a_none[naive] / 1e6, a_rc / 1e6);
        job.train.recompute = RECOMPUTE_SELECTIVE;
        size_t a_sel = rank0(&job, SIZES_ACTS, 0);
        if (naive) /* every block's stashed probabilities (bf16) are gone but one set, shared (the blocks
                      compute in the stash: no fp32 working set) */
            CHECK(a_rc < a_sel && a_sel < a_none[1] && a_none[1] - a_sel == (L - 1) * probs,
                  "naive attention, selective recompute: block %.0f MB < selective %.0f MB < none %.0f MB, %zu - 1 x "
                  "%.0f MB of bf16 probabilities fewer than none", a_rc / 1e6, a_sel / 1e6, a_none[1] / 1e6, L,
                  probs / 1e6);
        else /* no probabilities kept: selective is none */
            CHECK(a_sel == a_none[0], "fused attention, selective recompute keeps what none keeps (%.0f MB)",
                  a_sel / 1e6);
    }
    /* naive - fused: each block's bf16 probabilities for its fp32 [B, heads,
     * seq] log-sum-exp; in the working set the backward's fp32 [B, heads,
     * seq, seq] scratch for k, v and their gradient [B seq, 4 C] floats */
    size_t lse = B * heads * seq * 4, tt32 = 2 * probs, kv = B * seq * 4 * C * 4;
    CHECK(a_none[1] - a_none[0] == L * (probs - lse) + tt32 - kv,
          "gpt2-124m bf16, micro-batch 8: fused attention keeps %.0f MB of activations, naive %.0f MB: %zu x (%.1f MB "
          "of probabilities - %.2f MB of lse) + %.1f MB fp32 [T, T] - %.1f MB kv scratch",
          a_none[0] / 1e6, a_none[1] / 1e6, L, probs / 1e6, lse / 1e6, tt32 / 1e6, kv / 1e6);
    job.model.attention = ATTN_FUSED;
    job.train.recompute = RECOMPUTE_NONE;

    job_spec pj;
    if (load_job(&pj, "model:\n  preset: gpt-small\n  n_layer: 8\ntrain:\n  global_batch: 16\n  micro_batch: 1\n"
                      "parallel:\n  pp: 4\n  pp_schedule: gpipe\n"))
        return;
    size_t gpipe = rank0(&pj, SIZES_ACTS, 0);
    pj.parallel.pp_schedule = PP_1F1B;
    size_t ofob = rank0(&pj, SIZES_ACTS, 0);
    {
        sizes *ps = make_sizes(&pj, 1, 8);
        size_t work = ps ? sizes_chunk_acts(ps, 0, 0).work : 0;
        sizes_destroy(ps);
        CHECK((ofob - work) * 4 == gpipe - work,
              "stage 0 keeps 16 micro-batch stashes under GPipe, 4 under 1F1B, one working set in both (%zu vs %zu "
              "bytes)", gpipe, ofob);
    }
}

/* ---- communication and step time ---- */

static int estimate(plan_estimate *e, const job_spec *job, const char *hw_name, int nnodes, int per_node)
{
    hw_profile hw;
    char err[512];
    int rc = hw_load(&hw, hw_name, err, sizeof err);
    if (rc == 0) rc = plan_estimate_memory(e, job, &hw, nnodes, per_node, err, sizeof err);
    if (rc == 0) rc = plan_estimate_time(e, err, sizeof err);
    if (rc) printf("# estimate: %s\n", err);
    return rc;
}

static void test_comm_volume(void)
{
    job_spec job;
    if (load_job(&job, "model:\n  preset: gpt2-124m\n  vocab_size: 50304\ntrain:\n  global_batch: 64\n"
                       "  micro_batch: 2\n  precision: bf16\nparallel:\n  dp: 4\n  tp: 2\n  pp: 2\n"))
        return;
    plan_estimate e;
    /* 16 ranks, 8 per node: tp pairs inside a node, dp 4 x tp 2 = one node per stage */
    if (estimate(&e, &job, "h100-sxm", 2, 8)) return;
    const plan_stage *st = &e.stage[0];
    double grads = 0;
    const int *first = sizes_first_unit(e.sizes);
    for (int u = first[0]; u < first[1]; u++) grads += 2.0 * sizes_unit_numel(e.sizes, u, st->tp_rank);
    const plan_comm *dp = &st->comm[GROUP_DP], *tp = &st->comm[GROUP_TP], *pp = &st->comm[GROUP_PP];
    CHECK(fabs(dp->bytes - 2.0 * 3 / 4 * grads) < 1, "DDP: all-reduce 2(n-1)/n x grad bytes per step (%.0f)",
          dp->bytes);
    double act = 2.0 * 1024 * 768 * 2; /* B x T x C, bf16 */
    int blocks = 0;
    for (int u = first[0]; u < first[1]; u++) blocks += u >= 1 && u <= 12;
    double want_tp = 8.0 * 2 * 0.5 * ((4.0 * blocks + 1) * act); /* m x 2(t-1)/t x (4/block + embedding) */
    CHECK(fabs(tp->bytes - want_tp) < 1 && !tp->inter_node,
          "tp: 2 + 2 all-reduces of B.T.C per block and microbatch (+ the embedding's), inside the node (%.0f)",
          tp->bytes);
    CHECK(fabs(pp->bytes - 8.0 * act) < 1 && pp->inter_node && !dp->inter_node,
          "pp: one activation per microbatch out of stage 0, across nodes; dp stays inside the node");
    CHECK(e.mfu > 0 && e.mfu < e.hw.achievable && e.step_time > e.makespan,
          "MFU %.1f %% below the achievable %.0f %% (comm, bubble, optimizer)", 100 * e.mfu, 100 * e.hw.achievable);
    plan_estimate_free(&e);

    job.parallel.mode = SHARD_FSDP;
    job.parallel.tp = 1, job.parallel.pp = 1, job.parallel.dp = 16;
    job.train.micro_batch = 2, job.train.grad_accum = 2, job.parallel.microbatches = 2;
    if (estimate(&e, &job, "h100-sxm", 2, 8)) return;
    double params = 2.0 * sizes_model_numel(&job.model, NULL);
    dp = &e.stage[0].comm[GROUP_DP];
    CHECK(fabs(dp->bytes - 2 * 15.0 / 16 * (2 * params + params)) < 1 && dp->inter_node,
          "FSDP: per microbatch all-gather twice (forward, backward re-gather) + reduce-scatter, (n-1)/n each, "
          "across nodes (%.3g GB)",
          dp->bytes / GB);
    plan_estimate_free(&e);

    /* a single rank does nothing but compute and the optimizer */
    job_spec one;
    if (load_job(&one, "model:\n  preset: gpt2-124m\ntrain:\n  global_batch: 16\n  micro_batch: 4\n"
                       "  precision: bf16\n"))
        return;
    if (estimate(&e, &one, "h100-sxm", 1, 1)) return;
    /* MFU counts model FLOPs only: not the chunked LM head's second logits
     * GEMM, which the compute's efficiency (executed FLOPs) includes */
    double useful = e.model_flops / e.exec_flops;
    CHECK(useful < 1 && e.mfu <= e.compute_eff * useful && e.mfu > 0.9 * e.compute_eff * useful &&
              e.compute_eff < e.hw.achievable && e.bubble == 0,
          "one rank: MFU %.1f %% = the compute's efficiency %.1f %% (GEMMs by shape + memory-bound ops, below the "
          "largest GEMMs' %.0f %%) x model / executed FLOPs %.3f (the LM head's recompute) less the optimizer step",
          100 * e.mfu, 100 * e.compute_eff, 100 * e.hw.achievable, useful);
    plan_estimate_free(&e);
}

/* ---- the report ---- */

static char *capture_dryrun(const job_spec *job, const dryrun_opts *o, int *rc)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    char err[512] = "";
    *rc = dryrun_run(job, o, f, err, sizeof err);
    fclose(f);
    if (*rc) printf("# dryrun_run: %s\n", err);
    return buf;
}

static void test_report_text_and_json(void)
{
    job_spec job;
    /* the vocabulary padded to 50304 (llm.c's multiple of 128), as GPU jobs do; tp 2 would split 50257 too */
    if (load_job(&job, "model:\n  preset: gpt2-350m\n  vocab_size: 50304\ntrain:\n  global_batch: 64\n"
                       "  micro_batch: 2\n  precision: bf16\nparallel:\n  dp: 2\n  tp: 2\n  pp: 4\n  mode: zero1\n"
                       "  pp_schedule: interleaved\n"))
        return;
    dryrun_opts o = {.nnodes = 2, .nproc_per_node = 8, .hardware = "a100-80g"};
    int rc;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char *text = capture_dryrun(&job, &o, &rc);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("# one dry-run (profile load, estimate, text): %.1f ms wall (goal < 20 ms)\n",
           ((double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9) * 1e3);
    CHECK(rc == 0 && text && strstr(text, "mesh:") && strstr(text, "memory per rank") && strstr(text, "pp 3") &&
              strstr(text, "pipeline interleaved") && strstr(text, "MFU") && strstr(text, "tokens/s") &&
              strstr(text, "warnings"),
          "text report has the mesh, memory per stage, the pipeline picture, step time and MFU, warnings");
    free(text);

    o.format = DRYRUN_JSON;
    char *js = capture_dryrun(&job, &o, &rc);
    cJSON *root = js ? cJSON_Parse(js) : NULL;
    hw_profile hw;
    char err[512];
    plan_estimate e;
    int erc = hw_load(&hw, "a100-80g", err, sizeof err);
    if (erc == 0) erc = plan_estimate_memory(&e, &job, &hw, 2, 8, err, sizeof err);
    if (erc == 0) erc = plan_estimate_time(&e, err, sizeof err);
    int ok = rc == 0 && root && erc == 0;
    if (ok) {
        cJSON *stages = cJSON_GetObjectItem(root, "stages"), *mesh_a = cJSON_GetObjectItem(root, "mesh");
        cJSON *step = cJSON_GetObjectItem(root, "step");
        ok = cJSON_GetArraySize(stages) == 4 && cJSON_GetArraySize(mesh_a) == 16 && step;
        for (int p = 0; ok && p < 4; p++) {
            cJSON *mem = cJSON_GetObjectItem(cJSON_GetArrayItem(stages, p), "memory");
            ok = mem && cJSON_GetObjectItem(mem, "total")->valuedouble == e.stage[p].total &&
                 cJSON_GetObjectItem(mem, "activations")->valuedouble == (double)e.stage[p].mem.bytes[SIZES_ACTS];
        }
        ok = ok && cJSON_GetObjectItem(step, "time_s")->valuedouble == e.step_time &&
             cJSON_GetObjectItem(step, "mfu")->valuedouble > 0 && cJSON_GetObjectItem(root, "pipeline");
    }
    CHECK(ok, "--format json parses back with cJSON and carries the same numbers (4 stages, 16 ranks, step %.3g s)",
          erc == 0 ? e.step_time : -1.0);
    if (erc == 0) plan_estimate_free(&e);
    cJSON_Delete(root);
    free(js);
}

static int has_warning(const plan_estimate *e, const char *needle)
{
    for (int i = 0; i < e->n_warnings; i++)
        if (strstr(e->warnings[i], needle)) return 1;
    return 0;
}

static void test_warnings(void)
{
    hw_profile hw;
    char err[512];
    if (hw_load(&hw, "h100-sxm", err, sizeof err)) return;
    job_spec job;
    if (load_job(&job, "model:\n  preset: gpt2-124m\n  vocab_size: 50304\ntrain:\n  global_batch: 8\n"
                       "  micro_batch: 1\n  precision: bf16\nparallel:\n  tp: 4\n  pp: 4\n"))
        return;
    plan_estimate e;
    /* 4 ranks per node with tp 4 is fine; 2 per node splits every tp group */
    int rc = plan_estimate_memory(&e, &job, &hw, 8, 2, err, sizeof err);
    CHECK(rc == 0 && has_warning(&e, "crosses nodes") && has_warning(&e, "microbatches 8 < 4 x pp 4"),
          "warns: tp crossing nodes, m < 4p");
    plan_estimate_free(&e);
    rc = plan_estimate_memory(&e, &job, &hw, 3, 4, err, sizeof err);
    CHECK(rc == 0 && !has_warning(&e, "crosses nodes") && has_warning(&e, "!= nnodes 3 x nproc_per_node 4"),
          "warns: world != nnodes x nproc_per_node; tp inside nodes of 4 is fine");
    plan_estimate_free(&e);
    job_spec big;
    if (load_job(&big, "model:\n  preset: gpt2-1.5b\ntrain:\n  global_batch: 64\n  micro_batch: 64\n"
                       "  precision: bf16\n"))
        return;
    rc = plan_estimate_memory(&e, &big, &hw, 1, 1, err, sizeof err);
    CHECK(rc == 0 && !e.fits && e.stage[0].oom && has_warning(&e, "OOM"),
          "warns: OOM (gpt2-1.5b, 64 sequences at once, %.0f GB on an 85 GB device)", e.stage[0].total / GB);
    plan_estimate_free(&e);
}

/* ---- hardware profiles ---- */

static void test_hardware(void)
{
    static const char *const names[] = {"h100-sxm", "h200", "a100-40g", "a100-80g", "l40s", "cpu"};
    int ok = 1;
    char err[512];
    for (int i = 0; i < 6; i++) {
        hw_profile hw;
        if (hw_load(&hw, names[i], err, sizeof err)) {
            printf("# %s\n", err);
            ok = 0;
            continue;
        }
        ok &= strcmp(hw.name, names[i]) == 0 && hw.memory > 0 && hw.peak_fp32 > 0 && hw.gpus_per_node >= 1 &&
              hw.intra_bw > hw.inter_bw && hw.achievable > 0 && hw.achievable <= 1 && (!hw.gpu || hw.peak_bf16 > 0);
    }
    CHECK(ok, "the six hardware profiles load and are sane");
    hw_profile hw;
    const char *bad = "name: x\ndevice: gpu\npeak_bf16_tflop: 1\n";
    int rc = hw_load_string(&hw, bad, strlen(bad), "bad.yaml", err, sizeof err);
    CHECK(rc && strstr(err, "bad.yaml:3:1: unknown key 'peak_bf16_tflop'") && strstr(err, "did you mean 'peak_bf16_tflops'"),
          "unknown key: FILE:LINE:COL and a suggestion (%s)", err);
    const char *missing = "name: x\ndevice: gpu\n";
    rc = hw_load_string(&hw, missing, strlen(missing), "short.yaml", err, sizeof err);
    CHECK(rc && strstr(err, "short.yaml: missing key"), "missing key is an error (%s)", err);
    const char *word = "name: x\ndevice: gpu\npeak_bf16_tflops: lots\n";
    rc = hw_load_string(&hw, word, strlen(word), "w.yaml", err, sizeof err);
    CHECK(rc && strstr(err, "w.yaml:3:19:"), "a non-number is an error at its value (%s)", err);
    rc = hw_load(&hw, "h100-sx", err, sizeof err);
    CHECK(rc && strstr(err, "did you mean 'h100-sxm'"), "unknown profile name suggests one (%s)", err);
    /* the profile a run's MFU is measured against, by the device's name (cudaDeviceProp.name) */
    const struct { const char *device, *profile; } by_name[] = {
        {"cpu", "cpu"}, {"NVIDIA H100 80GB HBM3", "h100-sxm"}, {"NVIDIA H100 PCIe", NULL},
        {"NVIDIA H200", "h200"}, {"NVIDIA A100-SXM4-40GB", "a100-40g"}, {"NVIDIA A100-SXM4-80GB", "a100-80g"},
        {"NVIDIA L40S", "l40s"}, {"Tesla V100-SXM2-16GB", NULL}, {"", NULL}};
    for (size_t i = 0; i < sizeof by_name / sizeof by_name[0]; i++) {
        const char *got = hw_profile_for_device(by_name[i].device);
        int same = got && by_name[i].profile ? !strcmp(got, by_name[i].profile) : got == by_name[i].profile;
        CHECK(same, "device '%s': profile %s (want %s)", by_name[i].device, got ? got : "none",
              by_name[i].profile ? by_name[i].profile : "none");
        if (got) CHECK(hw_load(&hw, got, err, sizeof err) == 0, "the profile %s loads (%s)", got, err);
    }
    job_spec job;
    job_defaults(&job);
    dryrun_opts o = {.hardware = "no-such-gpu"};
    FILE *devnull = fopen("/dev/null", "w");
    CHECK(dryrun_run(&job, &o, devnull, err, sizeof err) == DT_EXIT_USAGE, "dry-run with an unknown profile exits 2");
    fclose(devnull);
    /* without --hardware: train.device first, then (auto) the precision */
    const struct { const char *train, *profile; } by_device[] = {
        {"{precision: fp32}", "cpu"}, {"{precision: bf16}", "h100-sxm"},
        {"{precision: fp32, device: cuda}", "h100-sxm"}, {"{precision: bf16, device: cpu}", "cpu"},
        {"{precision: bf16, device: cuda}", "h100-sxm"}};
    for (size_t i = 0; i < sizeof by_device / sizeof by_device[0]; i++) {
        char yaml[256];
        snprintf(yaml, sizeof yaml, "train: %s\n", by_device[i].train);
        plan_machine pm;
        dryrun_opts none = {0};
        int loaded = load_job(&job, yaml) == 0 && plan_machine_resolve(&pm, &job, &none, 0, err, sizeof err) == 0;
        CHECK(loaded && pm.hw_defaulted && !strcmp(pm.hw.name, by_device[i].profile),
              "train: %s: the dry-run's default profile is %s (got %s)", by_device[i].train, by_device[i].profile,
              loaded ? pm.hw.name : err);
    }
}

/* The headroom a plan keeps: the profile's headroom_percent (5 % when it sets
 * none), its range, and the dry-run's verdict and warning when a stage fits
 * but eats into it. */
static void test_headroom_profile(void)
{
    hw_profile hw;
    char err[512];
    int ok = 1;
    static const char *const names[] = {"h100-sxm", "h200", "a100-40g", "a100-80g", "l40s", "cpu"};
    for (int i = 0; i < 6; i++)
        ok &= hw_load(&hw, names[i], err, sizeof err) == 0 && hw.headroom_fraction == 0.05 &&
              hw.headroom_origin == HW_HEADROOM_PROFILE;
    CHECK(ok, "every shipped profile states headroom_percent: 5");
    const char *base = "name: x\ndevice: gpu\npeak_bf16_tflops: 100\npeak_fp32_tflops: 10\nmemory_mib: 1000\n"
                       "memory_bandwidth_gbs: 100\nintra_node_gbs: 10\ninter_node_gbs: 1\nintra_node_latency_us: 1\n"
                       "inter_node_latency_us: 1\ngpus_per_node: 8\ncuda_context_mib: 0\nnccl_mib: 0\n"
                       "cublas_workspace_mib: 0\nachievable_fraction: 0.5\n";
    CHECK(hw_load_string(&hw, base, strlen(base), "p.yaml", err, sizeof err) == 0 && hw.headroom_fraction == 0.05 &&
              hw.headroom_origin == HW_HEADROOM_DEFAULT && fabs(hw_headroom(&hw, 1e9) - 5e7) < 1,
          "a profile without headroom_percent keeps 5 %% (%s)", err);
    char yaml[1024];
    snprintf(yaml, sizeof yaml, "%sheadroom_percent: 60\n", base);
    int rc = hw_load_string(&hw, yaml, strlen(yaml), "p.yaml", err, sizeof err);
    CHECK(rc && strstr(err, "p.yaml:16:19: headroom_percent must be in 0 .. 50"), "headroom_percent above 50: %s", err);
    snprintf(yaml, sizeof yaml, "%sheadroom_percent: 12.5\n", base);
    CHECK(hw_load_string(&hw, yaml, strlen(yaml), "p.yaml", err, sizeof err) == 0 && hw.headroom_fraction == 0.125,
          "headroom_percent 12.5 is a fraction of 0.125");

    /* gpt-70b FSDP over 64 H100 (configs/gpt-70b-h100.yaml) needs ~53 of 85.5 GB:
     * it fits the 5 % headroom, not a 40 % one, and the dry-run says so */
    job_spec job;
    if (load_job(&job, "model: {preset: gpt-70b}\ntrain: {global_batch: 1024, micro_batch: 2, precision: bf16, "
                       "recompute: block}\nparallel: {dp: 64, mode: fsdp}\n"))
        return;
    CHECK(hw_load(&hw, "h100-sxm", err, sizeof err) == 0, "h100-sxm loads");
    for (int k = 0; k < 2; k++) {
        hw.headroom_fraction = k ? 0.40 : 0.05;
        plan_estimate e;
        rc = plan_estimate_memory(&e, &job, &hw, 8, 8, err, sizeof err);
        int warned = 0;
        for (int i = 0; i < e.n_warnings; i++) warned |= strstr(e.warnings[i], "less than the") != NULL;
        CHECK(rc == 0 && e.fits && e.fits_headroom == !k && warned == k && fabs(e.headroom - hw.headroom_fraction * hw.memory) < 1,
              "headroom %.0f %%: gpt-70b FSDP 64 needs %.1f of %.1f GB: fits, %s the headroom%s", 100 * hw.headroom_fraction,
              e.max_total / 1e9, hw.memory / 1e9, k ? "not within" : "within", k ? ", with a warning" : "");
        plan_estimate_free(&e);
    }
    /* --headroom reaches the machine */
    dt_headroom flag;
    char why[256];
    CHECK(headroom_parse("4GiB", &flag, why, sizeof why) == 0 && flag.bytes == 4294967296.0, "--headroom 4GiB");
    plan_machine pm;
    dryrun_opts o = {.hardware = "h100-sxm", .headroom = flag};
    CHECK(plan_machine_resolve(&pm, &job, &o, 1, err, sizeof err) == 0 && pm.hw.headroom_origin == HW_HEADROOM_FLAG &&
              hw_headroom(&pm.hw, pm.hw.memory) == 4294967296.0,
          "--headroom 4GiB overrides the profile: 4294967296 bytes kept");
}

/* --plan proposes only layouts that leave the headroom free: gpt-70b on 8 x 8
 * H100 with the profile's 5 %, against the same search with none kept. Without
 * a headroom its best layouts leave under 5 % of the device; with it each leaves
 * at least the 4.28 GB and more layouts are counted as not fitting. The text
 * says how much is kept and where it comes from, and names its columns as the
 * job file's keys. */
static void test_planner_headroom(void)
{
    job_spec job;
    if (load_job(&job, "model: {preset: gpt-70b}\ntrain: {global_batch: 1024, micro_batch: 2, precision: bf16}\n"))
        return;
    double oom[2] = {0, 0}, room[2] = {0, 0}, device = 0;
    int n[2] = {0, 0}, inside[2] = {1, 1}, tight_without = 0;
    for (int k = 0; k < 2; k++) { /* k = 0: the profile's 5 %; k = 1: --headroom 0% */
        char *buf = NULL, err[512] = "";
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        dryrun_opts o = {.nnodes = 8, .nproc_per_node = 8, .hardware = "h100-sxm", .format = DRYRUN_JSON, .top = 5,
                         .headroom = {k, 0, 0}};
        int rc = plan_run(&job, &o, f, err, sizeof err);
        fclose(f);
        cJSON *root = rc == 0 ? cJSON_Parse(buf) : NULL, *top = cJSON_GetObjectItem(root, "top");
        n[k] = top ? cJSON_GetArraySize(top) : 0;
        oom[k] = root ? cJSON_GetObjectItem(root, "oom")->valuedouble : -1;
        room[k] = root ? cJSON_GetObjectItem(root, "headroom_bytes")->valuedouble : -1;
        device = root ? cJSON_GetObjectItem(root, "device_bytes")->valuedouble : 0;
        for (int i = 0; i < n[k]; i++) {
            double mem = cJSON_GetObjectItem(cJSON_GetArrayItem(top, i), "memory_bytes")->valuedouble;
            inside[k] &= mem <= device - room[k];
            if (k == 1 && mem > device * 0.95) tight_without++;
        }
        cJSON_Delete(root);
        free(buf);
    }
    CHECK(n[0] == 5 && n[1] == 5 && fabs(room[0] - 0.05 * device) < 1 && room[1] == 0 && inside[0] && inside[1],
          "plan gpt-70b over 8 x 8 H100: 5 layouts each, every one leaving its headroom free (%.3g GB, then none)",
          room[0] / 1e9);
    CHECK(tight_without > 0 && oom[0] > oom[1],
          "without a headroom %d of the best 5 leave under 5 %% of the device; with it none, and %.0f layouts do not "
          "fit instead of %.0f", tight_without, oom[0], oom[1]);
    char *buf = NULL, err[512] = "";
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    dryrun_opts o = {.nnodes = 8, .nproc_per_node = 8, .hardware = "h100-sxm", .top = 3};
    int rc = plan_run(&job, &o, f, err, sizeof err);
    fclose(f);
    const char *head = buf ? strstr(buf, "sequence_parallel") : NULL; /* the table's head line */
    char header[512] = "";
    while (head && head > buf && head[-1] != '\n') head--;
    if (head) snprintf(header, sizeof header, "%.*s", (int)(strchr(head, '\n') - head), head);
    CHECK(rc == 0 && buf &&
              strstr(buf, "headroom: every layout below keeps 4.28 GB free on each rank, 5 % of its 85.5 GB "
                          "(headroom_percent of the h100-sxm profile; --headroom to change)") &&
              strstr(buf, "do not fit in 85.5 GB less the headroom"),
          "plan text: how much it keeps free and where that comes from");
    static const char *const words[] = {" dp ", " tp ", " pp ", " cp ", " sequence_parallel ", " mode ",
                                        " micro_batch ", " microbatches ", " pp_schedule ", " virtual_stages ",
                                        " recompute ", " offload ", " step ", " tokens/s ", " MFU ", " memory/rank ",
                                        " why"};
    int named = header[0] != 0;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) named &= strstr(header, words[i]) != NULL;
    CHECK(named && !strstr(header, " rc ") && !strstr(header, " m ") && !strstr(header, " mb ") &&
              !strstr(buf, "+off") && !strstr(buf, "+sp") && strstr(buf, "\nthe job's own layout ("),
          "plan text: columns named as the job's keys, no rc / m / mb / +off / +sp (%s)", header);
    free(buf);
}

/* The attention core priced as its kernels run it. Blockwise (fused, or the
 * cp ring) on a causal model: (seq + 1) / (2 seq) of the pairs the model
 * counts, the backward's scores again (3.5 forwards in all), at the profile's
 * attention_efficiency; naive: every pair, at the GEMM rate; a ViT (not
 * causal): every pair. Found from two profiles that differ only in that table:
 * the compute they give differs by exactly the executed FLOPs over the two
 * rates. */
static double attention_exec_flops(const job_spec *job, double *naive_delta)
{
    hw_profile hw;
    char err[512];
    if (hw_load(&hw, "h100-sxm", err, sizeof err)) return -1;
    double compute[2];
    const double eff[2] = {0.25, 0.5};
    for (int k = 0; k < 2; k++) {
        hw.n_attn = 2, hw.attn_keys[0] = 1, hw.attn_keys[1] = 1e6, hw.attn_eff[0] = hw.attn_eff[1] = eff[k];
        plan_estimate e;
        int rc = plan_estimate_memory(&e, job, &hw, 1, 1, err, sizeof err);
        if (rc == 0) rc = plan_estimate_time(&e, err, sizeof err);
        compute[k] = rc ? -1 : e.stage[0].compute;
        plan_estimate_free(&e);
        if (rc) return -1;
    }
    double peak = hw_peak(&hw, job->train.precision == PREC_BF16);
    *naive_delta = compute[0] - compute[1];
    return (compute[0] - compute[1]) / (1 / (peak * eff[0]) - 1 / (peak * eff[1]));
}

static void test_attention_time(void)
{
    job_spec job;
    if (load_job(&job, "model: {kind: gpt, n_layer: 2, n_head: 8, d_model: 1024, vocab_size: 1024, seq_len: 16384}\n"
                       "train: {global_batch: 1, micro_batch: 1, precision: bf16}\n"))
        return;
    double d, s = 16384, C = 1024, fwd = 4.0 * s * s * C; /* one block's score and value products */
    double got = attention_exec_flops(&job, &d), want = 2 * 3.5 * fwd * (s + 1) / (2 * s);
    CHECK(fabs(got / want - 1) < 1e-6,
          "fused attention, causal GPT at 16k: the core runs %.4g FLOPs a step (want 2 blocks x 3.5 x 4 s^2 C x "
          "(s + 1) / 2s = %.4g: causal tiles skipped, the scores again in backward), at attention_efficiency",
          got, want);
    job.model.attention = ATTN_NAIVE;
    got = attention_exec_flops(&job, &d);
    CHECK(got == 0 && d == 0, "naive attention: every pair at the GEMM rate, attention_efficiency unused");
    hw_profile hw;
    char err[512];
    CHECK(hw_load(&hw, "h100-sxm", err, sizeof err) == 0 && hw.n_attn == 6 &&
              fabs(hw_attention_efficiency(&hw, 8192) - 0.326) < 1e-9 &&
              fabs(hw_attention_efficiency(&hw, 1 << 20) - 0.329) < 1e-9 && hw_attention_efficiency(&hw, 4) == 0.209,
          "h100-sxm: FlashAttention-2's H100 table, read between and flat beyond its points");
    const char *bad = "name: x\ndevice: gpu\npeak_bf16_tflops: 1\nattention_efficiency: {512: 0.3, 256: 0.2}\n";
    int rc = hw_load_string(&hw, bad, strlen(bad), "a.yaml", err, sizeof err);
    CHECK(rc && strstr(err, "a.yaml:4:") && strstr(err, "attention_efficiency: dimensions must increase"),
          "attention_efficiency out of order: %s", err);
    CHECK(hw_load(&hw, "a100-80g", err, sizeof err) == 0 && hw.n_attn == 0 && hw_attention_efficiency(&hw, 8192) == 0,
          "a profile without attention_efficiency prices the core as a GEMM of the head size");
}

/* Context parallelism with GQA: the ring carries k and v of the rank's kv
 * heads in the activations' type and their gradient in fp32 (cp.c). */
static void test_cp_gqa_volume(void)
{
    job_spec job;
    if (load_job(&job, "model: {kind: llama, n_layer: 4, n_head: 8, n_kv_head: 2, d_model: 512, d_ff: 1024, "
                       "vocab_size: 1024, seq_len: 4096}\n"
                       "train: {global_batch: 4, micro_batch: 1, precision: bf16}\nparallel: {cp: 4, dp: 1}\n"))
        return;
    plan_estimate e;
    if (estimate(&e, &job, "h100-sxm", 1, 4)) return;
    double rows = 4096.0 / 4, kv = rows * 2 * 2 * 64; /* [tokens / cp, 2 kv heads x 64 x (k, v)] */
    double want = 4.0 * 4 * (2 * 3 * kv * 2 + 4 * kv * 4); /* m 4 x 4 blocks x (2(cp-1) bf16 sends + cp fp32 dkv) */
    const plan_comm *c = &e.stage[0].comm[GROUP_CP];
    CHECK(fabs(c->bytes - want) < 1, "cp 4, GQA 8 heads over 2 kv heads: the ring sends %.0f bytes a step (want %.0f: "
                                     "kv heads only, bf16; the gradients fp32)", c->bytes, want);
    plan_estimate_free(&e);
}

/* ---- the planner ---- */

static void test_planner(void)
{
    job_spec job;
    if (load_job(&job, "model:\n  preset: gpt-13b\ntrain:\n  global_batch: 256\n  micro_batch: 1\n"
                       "  precision: bf16\n"))
        return;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    char err[512] = "";
    dryrun_opts o = {.nnodes = 8, .nproc_per_node = 8, .hardware = "h100-sxm", .format = DRYRUN_JSON};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = plan_run(&job, &o, f, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fclose(f);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    cJSON *root = rc == 0 ? cJSON_Parse(buf) : NULL;
    cJSON *top = root ? cJSON_GetObjectItem(root, "top") : NULL;
    int n = top ? cJSON_GetArraySize(top) : 0, sorted = n > 0, fits = 1;
    for (int i = 0; i < n; i++) {
        cJSON *c = cJSON_GetArrayItem(top, i);
        double mem = cJSON_GetObjectItem(c, "memory_bytes")->valuedouble;
        double dev = cJSON_GetObjectItem(c, "device_bytes")->valuedouble;
        fits &= mem <= dev && strlen(cJSON_GetObjectItem(c, "reason")->valuestring) > 10;
        int world = (int)(cJSON_GetObjectItem(c, "dp")->valuedouble * cJSON_GetObjectItem(c, "tp")->valuedouble *
                          cJSON_GetObjectItem(c, "pp")->valuedouble);
        fits &= world == 64 && cJSON_GetObjectItem(c, "tp")->valuedouble <= 8;
        if (i > 0)
            sorted &= cJSON_GetObjectItem(c, "samples_per_s")->valuedouble <=
                      cJSON_GetObjectItem(cJSON_GetArrayItem(top, i - 1), "samples_per_s")->valuedouble;
    }
    CHECK(rc == 0 && n == 10 && sorted && fits,
          "plan over 8 x 8 H100 for gpt-13b: ten layouts of 64 ranks, fastest first, each fits and says why");
    printf("# plan over 64 GPUs: %.0f layouts searched in %.3f s wall (benchmark, not asserted; goal < 1 s)\n",
           root ? cJSON_GetObjectItem(root, "searched")->valuedouble : 0, secs);
    cJSON_Delete(root);
    free(buf);

    buf = NULL;
    f = open_memstream(&buf, &len);
    o.format = DRYRUN_TEXT;
    rc = plan_run(&job, &o, f, err, sizeof err);
    fclose(f);
    CHECK(rc == 0 && buf && strstr(buf, "fastest") && strstr(buf, "slower"),
          "plan text: the best says it is fastest, the others what they lose");
    /* the table's head, for the test log */
    char *line = buf ? strstr(buf, "  #") : NULL;
    for (int i = 0; line && i < 4; i++) {
        char *end = strchr(line, '\n');
        if (!end) break;
        printf("# %.*s\n", (int)(end - line), line);
        line = end + 1;
    }
    free(buf);
}

/* The planner simulates only the layouts whose lower bound could reach its top
 * list: that list must be the exhaustive search's, layout for layout. And the
 * bound never exceeds the simulated step. */
static char *plan_json(const job_spec *job, const char *hw, int nnodes, int per_node, int exhaustive)
{
    char *buf = NULL, err[512] = "";
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    dryrun_opts o = {.nnodes = nnodes, .nproc_per_node = per_node, .hardware = hw, .format = DRYRUN_JSON,
                     .exhaustive = exhaustive};
    int rc = plan_run(job, &o, f, err, sizeof err);
    fclose(f);
    if (rc) printf("# plan: %s\n", err);
    return buf;
}

/* --plan prices the job's own layout like its candidates and says how its
 * best compares; a layout of another size is not compared, and says why. */
static void test_planner_own_layout(void)
{
    job_spec job;
    if (load_job(&job, "model: {preset: gpt-13b}\ntrain: {global_batch: 256, micro_batch: 1, precision: bf16}\n"
                       "parallel: {dp: 64, mode: fsdp}\n"))
        return;
    char *buf = plan_json(&job, "h100-sxm", 8, 8, 0);
    cJSON *root = buf ? cJSON_Parse(buf) : NULL, *jo = cJSON_GetObjectItem(root, "job_layout");
    cJSON *best = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "top"), 0);
    plan_estimate e;
    int ok = jo && best && cJSON_IsTrue(cJSON_GetObjectItem(jo, "compared")) && estimate(&e, &job, "h100-sxm", 8, 8) == 0;
    if (ok) {
        double step = cJSON_GetNumberValue(cJSON_GetObjectItem(jo, "step_s"));
        double speedup = cJSON_GetNumberValue(cJSON_GetObjectItem(jo, "best_speedup"));
        double want = cJSON_GetNumberValue(cJSON_GetObjectItem(best, "samples_per_s")) / e.samples_per_s;
        CHECK(step == e.step_time && fabs(speedup / want - 1) < 1e-12 && speedup >= 1 &&
                  cJSON_IsTrue(cJSON_GetObjectItem(jo, "fits_headroom")) == e.fits_headroom,
              "plan gpt-13b: the job's own FSDP 64 layout priced as the dry-run prices it (%.3g s), the best %.2fx "
              "as fast", step, speedup);
        plan_estimate_free(&e);
    } else {
        CHECK(0, "plan gpt-13b: job_layout compared");
    }
    cJSON_Delete(root);
    free(buf);
    job.parallel.dp = 8;
    buf = plan_json(&job, "h100-sxm", 8, 8, 0);
    root = buf ? cJSON_Parse(buf) : NULL, jo = cJSON_GetObjectItem(root, "job_layout");
    const char *why = jo ? cJSON_GetStringValue(cJSON_GetObjectItem(jo, "why")) : NULL;
    CHECK(jo && cJSON_IsFalse(cJSON_GetObjectItem(jo, "compared")) && why && strstr(why, "its 8 ranks are not the plan's 64"),
          "a job layout of 8 ranks on a plan of 64: not compared (%s)", why ? why : "none");
    cJSON_Delete(root);
    free(buf);
}

static int same_top(const char *a, const char *b, int *n, double *sim_a, double *sim_b)
{
    cJSON *x = a ? cJSON_Parse(a) : NULL, *y = b ? cJSON_Parse(b) : NULL;
    cJSON *tx = cJSON_GetObjectItem(x, "top"), *ty = cJSON_GetObjectItem(y, "top");
    *n = tx ? cJSON_GetArraySize(tx) : 0;
    *sim_a = x ? cJSON_GetObjectItem(x, "simulated")->valuedouble : -1;
    *sim_b = y ? cJSON_GetObjectItem(y, "simulated")->valuedouble : -1;
    int same = tx && ty && *n > 0 && *n == cJSON_GetArraySize(ty);
    for (int i = 0; same && i < *n; i++) {
        char *p = cJSON_PrintUnformatted(cJSON_GetArrayItem(tx, i)), *q = cJSON_PrintUnformatted(cJSON_GetArrayItem(ty, i));
        same = p && q && strcmp(p, q) == 0;
        cJSON_free(p), cJSON_free(q);
    }
    cJSON_Delete(x), cJSON_Delete(y);
    return same;
}

/* The value whose name is `name` (job_*_name's inverse), -1 when none. */
static int mode_of(const char *name)
{
    for (int i = SHARD_NONE; i <= SHARD_HSDP; i++)
        if (!strcmp(job_shard_mode_name((shard_mode)i), name)) return i;
    return -1;
}
static int schedule_of(const char *name)
{
    for (int i = PP_GPIPE; i <= PP_ZB_H1; i++)
        if (!strcmp(job_pp_schedule_name((pp_schedule_kind)i), name)) return i;
    return -1;
}
static int recompute_of(const char *name)
{
    for (int i = RECOMPUTE_NONE; i <= RECOMPUTE_ELEMENTWISE; i++)
        if (!strcmp(job_recompute_name((recompute_kind)i), name)) return i;
    return -1;
}

/* The plan of `job` on nnodes x per_node of `hwname`: every proposal that
 * offloads must fit with exactly what it offloads and not with less (the
 * optimizer; with params, also not with the optimizer alone): offload only
 * costs time. Counts the proposals and those offloading the optimizer and the
 * parameters; -1 when a proposal breaks the rule. */
static int plan_offload_needed(const job_spec *job, const char *hwname, int nnodes, int per_node, int *n_opt,
                               int *n_params, int *n_act)
{
    char *buf = plan_json(job, hwname, nnodes, per_node, 0);
    cJSON *root = buf ? cJSON_Parse(buf) : NULL, *top = root ? cJSON_GetObjectItem(root, "top") : NULL;
    int n = top ? cJSON_GetArraySize(top) : 0, ok = n > 0;
    hw_profile hw;
    char err[512];
    ok &= hw_load(&hw, hwname, err, sizeof err) == 0;
    *n_opt = *n_params = *n_act = 0;
    for (int i = 0; i < n && ok; i++) {
        cJSON *c = cJSON_GetArrayItem(top, i);
        int opt = cJSON_IsTrue(cJSON_GetObjectItem(c, "offload_optimizer"));
        int par = cJSON_IsTrue(cJSON_GetObjectItem(c, "offload_params"));
        *n_opt += opt, *n_params += par;
        job_spec j = *job;
        j.parallel.dp = (int)cJSON_GetObjectItem(c, "dp")->valuedouble;
        j.parallel.tp = (int)cJSON_GetObjectItem(c, "tp")->valuedouble;
        j.parallel.pp = (int)cJSON_GetObjectItem(c, "pp")->valuedouble;
        j.parallel.sequence_parallel = cJSON_IsTrue(cJSON_GetObjectItem(c, "sequence_parallel"));
        j.parallel.mode = (shard_mode)mode_of(cJSON_GetObjectItem(c, "mode")->valuestring);
        j.parallel.pp_schedule = (pp_schedule_kind)schedule_of(cJSON_GetObjectItem(c, "pp_schedule")->valuestring);
        j.parallel.virtual_stages = (int)cJSON_GetObjectItem(c, "virtual_stages")->valuedouble;
        j.parallel.microbatches = (int)cJSON_GetObjectItem(c, "microbatches")->valuedouble;
        j.train.micro_batch = (int)cJSON_GetObjectItem(c, "micro_batch")->valuedouble;
        j.train.grad_accum = j.parallel.microbatches;
        j.train.recompute = (recompute_kind)recompute_of(cJSON_GetObjectItem(c, "recompute")->valuestring);
        /* the planner's chain: nothing, optimizer, + params (FSDP / HSDP), + activations (block recompute) */
        int act = cJSON_IsTrue(cJSON_GetObjectItem(c, "offload_activations")), levels[4], n_levels = 0, chosen = -1;
        levels[n_levels++] = 0;
        levels[n_levels++] = OFFLOAD_OPTIMIZER;
        if (j.parallel.mode == SHARD_FSDP || j.parallel.mode == SHARD_HSDP)
            levels[n_levels++] = OFFLOAD_OPTIMIZER | OFFLOAD_PARAMS;
        if (j.train.recompute == RECOMPUTE_BLOCK) levels[n_levels] = levels[n_levels - 1] | OFFLOAD_ACTIVATIONS, n_levels++;
        int want = (opt ? OFFLOAD_OPTIMIZER : 0) | (par ? OFFLOAD_PARAMS : 0) | (act ? OFFLOAD_ACTIVATIONS : 0);
        for (int l = 0; l < n_levels; l++)
            if (levels[l] == want) chosen = l;
        ok &= chosen >= 0;
        *n_act += act;
        double floor0 = 0;
        for (int l = 0; l <= chosen; l++) {
            j.train.offload = levels[l];
            plan_estimate e;
            int rc = plan_estimate_memory(&e, &j, &hw, nnodes, per_node, err, sizeof err);
            ok &= rc == 0 && e.fits_headroom == (l == chosen); /* the planner's rule: fits with the headroom free */
            /* the floor the planner skips retries by: offloading the optimizer and
             * the parameters never leaves a stage below it */
            if (rc == 0 && l == 0) floor0 = plan_offload_floor(&e);
            if (rc == 0 && l > 0 && !(levels[l] & OFFLOAD_ACTIVATIONS) && e.max_total < floor0) {
                printf("# %s: offload %d needs %.0f bytes, below the floor %.0f\n", hwname, levels[l], e.max_total,
                       floor0);
                ok = 0;
            }
            plan_estimate_free(&e);
        }
    }
    cJSON_Delete(root);
    free(buf);
    return ok ? n : -1;
}

/* Offload in the search: a 70B GPT on one 8 x H100 node fits only with the
 * optimizer in host memory; on one 8 x A100 40 GB node some FSDP layouts fit
 * only with the parameter shards there too; each proposal fits with what it
 * offloads, not with less, and its host pools fit the node's host memory. On
 * 64 GPUs the 13B job fits without: no offload. */
static void test_planner_offload(void)
{
    job_spec job;
    if (load_job(&job, "model:\n  preset: gpt-70b\ntrain:\n  global_batch: 1024\n  micro_batch: 1\n"
                       "  precision: bf16\n"))
        return;
    int opt, par, act, n = plan_offload_needed(&job, "h100-sxm", 1, 8, &opt, &par, &act);
    CHECK(n > 0 && opt == n && par == 0,
          "plan gpt-70b on 8 H100: %d layouts, each with the optimizer offloaded (%d), none with params (%d), none "
          "fitting with less, each fitting with it (device and the node's host memory)", n, opt, par);
    n = plan_offload_needed(&job, "a100-40g", 1, 8, &opt, &par, &act);
    CHECK(n > 0 && opt == n && par > 0 && act > 0,
          "plan gpt-70b on 8 A100 40 GB: %d layouts, all offload the optimizer, %d the FSDP parameter shards too, "
          "%d the block inputs too, each fitting with what it offloads and not with less (nor below the floor the "
          "search skips retries by)", n, par, act);
    /* the retries the floor skips change nothing: the exhaustive search (every
     * retry estimated) proposes the same layouts, offloads and all */
    char *pruned = plan_json(&job, "a100-40g", 1, 8, 0), *all = plan_json(&job, "a100-40g", 1, 8, 1);
    double sim_pruned, sim_all;
    CHECK(same_top(pruned, all, &n, &sim_pruned, &sim_all),
          "plan gpt-70b on 8 A100 40 GB: the top %d with the offload retries the floor rules out skipped is the "
          "search's top with every retry estimated", n);
    free(pruned), free(all);
    if (load_job(&job, "model:\n  preset: gpt-13b\ntrain:\n  global_batch: 256\n  micro_batch: 1\n"
                       "  precision: bf16\n"))
        return;
    n = plan_offload_needed(&job, "h100-sxm", 8, 8, &opt, &par, &act);
    CHECK(n > 0 && opt == 0 && par == 0 && act == 0, "plan gpt-13b on 64 H100: %d layouts, none offloads (they fit without)", n);
}

static void test_planner_bound(void)
{
    static const struct {
        const char *yaml, *hw;
        int nnodes, per_node;
    } cases[] = {
        {"model:\n  preset: gpt-13b\ntrain:\n  global_batch: 256\n  micro_batch: 1\n  precision: bf16\n", "h100-sxm", 8, 8},
        {"model:\n  preset: gpt2-350m\ntrain:\n  global_batch: 64\n  micro_batch: 1\n  precision: bf16\n", "a100-40g", 2, 4},
        {"model:\n  preset: vit-l16\ntrain:\n  global_batch: 512\n  micro_batch: 1\n  precision: bf16\n", "l40s", 2, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        job_spec job;
        if (load_job(&job, cases[i].yaml)) continue;
        char *pruned = plan_json(&job, cases[i].hw, cases[i].nnodes, cases[i].per_node, 0);
        char *all = plan_json(&job, cases[i].hw, cases[i].nnodes, cases[i].per_node, 1);
        int n;
        double sim_pruned, sim_all;
        if (i == 1) { /* GPT-2's vocabulary of 50257 rows splits unevenly over tp: no layout is refused for it */
            cJSON *r = pruned ? cJSON_Parse(pruned) : NULL;
            cJSON *ex = cJSON_GetObjectItem(r, "invalid_example"), *inv = cJSON_GetObjectItem(r, "invalid");
            CHECK(cJSON_IsNumber(inv) && !(cJSON_IsString(ex) && strstr(ex->valuestring, "vocab_size")),
                  "plan gpt2-350m: no layout invalid for its vocabulary of 50257 (%.0f invalid, commonest: %s)",
                  cJSON_IsNumber(inv) ? inv->valuedouble : -1, cJSON_IsString(ex) ? ex->valuestring : "none");
            cJSON_Delete(r);
            /* every layout that fits, listed: some split the vocabulary over tp */
            char *buf = NULL, err[512] = "";
            size_t len = 0;
            FILE *f = open_memstream(&buf, &len);
            dryrun_opts o = {.nnodes = cases[i].nnodes, .nproc_per_node = cases[i].per_node, .hardware = cases[i].hw,
                             .format = DRYRUN_JSON, .top = 100000};
            int rc = plan_run(&job, &o, f, err, sizeof err);
            fclose(f);
            r = rc == 0 && buf ? cJSON_Parse(buf) : NULL;
            int tp_fits = 0;
            cJSON *top = cJSON_GetObjectItem(r, "top"), *t;
            cJSON_ArrayForEach(t, top) {
                cJSON *tp = cJSON_GetObjectItem(t, "tp");
                if (cJSON_IsNumber(tp) && tp->valuedouble > 1) tp_fits++;
            }
            CHECK(tp_fits > 0, "plan gpt2-350m over 2 x 4 a100-40g: %d layouts with tp > 1 fit (of %d listed)%s%s",
                  tp_fits, cJSON_GetArraySize(top), rc ? ": " : "", rc ? err : "");
            cJSON_Delete(r);
            free(buf);
        }
        CHECK(same_top(pruned, all, &n, &sim_pruned, &sim_all) && sim_pruned < sim_all,
              "plan %s over %d x %d %s: the bounded search's top %d is the exhaustive one's, with %.0f of %.0f "
              "pipelines simulated",
              job.model.preset, cases[i].nnodes, cases[i].per_node, cases[i].hw, n, sim_pruned, sim_all);
        free(pruned), free(all);
    }

    /* the bound against the simulation, layout by layout */
    job_spec job;
    if (load_job(&job, "model:\n  preset: gpt2-350m\ntrain:\n  global_batch: 64\n  micro_batch: 2\n"
                       "  precision: bf16\n"))
        return;
    int ok = 1, tried = 0;
    double worst = 1;
    static const pp_schedule_kind kinds[] = {PP_GPIPE, PP_1F1B, PP_INTERLEAVED, PP_ZB_H1};
    for (int pp = 2; pp <= 8; pp *= 2)
        for (int k = 0; k < 4; k++)
            for (int mode = SHARD_NONE; mode <= SHARD_FSDP; mode++) {
                job_spec j = job;
                j.parallel.pp = pp, j.parallel.dp = 8 / pp, j.parallel.mode = (shard_mode)mode;
                j.parallel.pp_schedule = kinds[k];
                j.parallel.virtual_stages = kinds[k] == PP_INTERLEAVED ? 2 : 1;
                j.parallel.microbatches = j.train.grad_accum = 64 / 2 / j.parallel.dp;
                char err[512];
                if (job_validate(&j, err, sizeof err)) continue;
                hw_profile hw;
                if (hw_load(&hw, "a100-40g", err, sizeof err)) continue;
                plan_estimate b, x;
                int rc = plan_estimate_memory_reusing(&b, &j, &hw, 1, 8, NULL, 1, err, sizeof err);
                if (rc == 0) rc = plan_estimate_time_bound(&b, err, sizeof err);
                if (rc == 0) rc = plan_estimate_memory(&x, &j, &hw, 1, 8, err, sizeof err);
                if (rc == 0) rc = plan_estimate_time(&x, err, sizeof err);
                if (rc == 0) {
                    tried++;
                    int good = b.step_time <= x.step_time * (1 + 1e-12) && b.max_total == x.max_total;
                    if (!good)
                        printf("# pp %d %s mode %d: bound %.6g s vs simulated %.6g s, memory %.0f vs %.0f\n", pp,
                               pp_schedule_kind_name(kinds[k]), mode, b.step_time, x.step_time, b.max_total,
                               x.max_total);
                    ok &= good;
                    if (b.step_time / x.step_time < worst) worst = b.step_time / x.step_time;
                } else {
                    printf("# %s\n", err);
                    ok = 0;
                }
                plan_estimate_free(&b);
                plan_estimate_free(&x);
            }
    CHECK(ok && tried >= 18, "step-time bound <= simulated step and the same memory without the action lists, "
                             "%d pipeline layouts (the loosest bound %.3f of the simulated step)",
          tried, worst);
}

/* The fixed bytes beside the accounted ones on a GPU (memory.c): NCCL's
 * buffers only where there is a communicator (world > 1); under bf16 the
 * CUDA backend's GEMM operand buffer, the largest fp32 operand narrowed
 * (GPT-2 124M at micro_batch 16 x 1024: a chunk of dlogits [1024, 50257],
 * 102,926,336 bytes; wte and the activations are bf16 already). */
static void test_fixed_bytes(void)
{
    hw_profile hw;
    char err[512];
    if (hw_load(&hw, "h100-sxm", err, sizeof err)) {
        CHECK(0, "h100-sxm profile: %s", err);
        return;
    }
    double fixed[3];
    const char *jobs[3] = {
        "model:\n  preset: gpt2-124m\ndata:\n  kind: synthetic\ntrain:\n  global_batch: 16\n  micro_batch: 16\n",
        "model:\n  preset: gpt2-124m\ndata:\n  kind: synthetic\ntrain:\n  global_batch: 32\n  micro_batch: 16\n"
        "parallel:\n  dp: 2\n",
        "model:\n  preset: gpt2-124m\ndata:\n  kind: synthetic\ntrain:\n  global_batch: 16\n  micro_batch: 16\n"
        "  precision: bf16\n"};
    for (int i = 0; i < 3; i++) {
        job_spec job;
        plan_estimate e;
        fixed[i] = -1;
        if (load_job(&job, jobs[i])) return;
        if (plan_estimate_memory(&e, &job, &hw, 1, i == 1 ? 2 : 1, err, sizeof err) == 0) {
            fixed[i] = e.stage[0].fixed;
            plan_estimate_free(&e);
        }
    }
    double scratch = 4.0 * 16 * 12 * 1024; /* the fused attention's D, [B, heads, seq] fp32 */
    double one = hw.cuda_context + hw.cublas_workspace + scratch;
    CHECK(fabs(fixed[0] - one) < 1 && fabs(fixed[1] - one - hw.nccl) < 1,
          "fixed bytes on h100: one process %.0f (context + cuBLAS workspace + scratch, no NCCL), two %.0f (+ NCCL "
          "%.0f)", fixed[0], fixed[1], hw.nccl);
    CHECK(fabs(fixed[2] - fixed[0] - 102926336.0) < 1,
          "bf16 adds the GEMM operand buffer: %.0f bytes (want 102926336: a dlogits chunk [1024, 50257] in bf16, "
          "the largest fp32 operand narrowed; wte is bf16 already)",
          fixed[2] - fixed[0]);
}

int main(void)
{
    test_bytes_per_param();
    test_golden_13b_70b();
    test_golden_vit_64();
    test_golden_bubble_table();
    test_estimate_bubble();
    test_unit_flops_and_numel();
    test_shards_match_comm_chunk();
    test_stage_params_and_acts();
    test_monotonic();
    test_comm_volume();
    test_attention_time();
    test_cp_gqa_volume();
    test_report_text_and_json();
    test_warnings();
    test_hardware();
    test_headroom_profile();
    test_planner();
    test_planner_headroom();
    test_planner_own_layout();
    test_planner_bound();
    test_planner_offload();
    test_fixed_bytes();
    CHECK_DONE();
}
