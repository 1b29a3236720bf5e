/* test_plan_moe.c — the dry-run and the planner on mixtures of experts
 * (model.moe, parallel.ep; issue 28 item 6): active parameters, the experts'
 * memory per rank and its sharding over their own data-parallel group, the
 * MoE block's work in the step time, the all-to-all's volume and link, the
 * reports, --plan's search of ep, and multi-head latent attention's shapes
 * (model.mla). The published figures are test_published.c's. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/model/model.h"
#include "runtime/parallel/sizes.h"
#include "runtime/plan/estimate.h"
#include "runtime/plan/hardware.h"
#include "runtime/plan/plan.h"
#include "test/unit/check.h"

static int load_job(job_spec *job, const char *yaml)
{
    char err[512];
    int rc = job_load_string(job, yaml, strlen(yaml), "moe.yaml", err, sizeof err);
    if (rc) CHECK(0, "test job loads: %s", err);
    return rc;
}

/* A small Llama mixture: 4 blocks, the first dense, 8 experts top-2 of 48 and
 * one shared expert, dp x cp ranks as given. */
static int moe_job(job_spec *job, const char *parallel, const char *moe_extra)
{
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "model:\n  kind: llama\n  n_layer: 4\n  n_head: 4\n  n_kv_head: 2\n  d_model: 64\n  d_ff: 128\n"
             "  vocab_size: 256\n  seq_len: 32\n  moe:\n    experts: 8\n    top_k: 2\n    d_ff_expert: 48\n"
             "    shared_experts: 1\n    first_dense: 1\n%s"
             "train:\n  global_batch: 16\n  micro_batch: 1\n  precision: bf16\n"
             "parallel:\n%s",
             moe_extra, parallel);
    return load_job(job, yaml);
}

static sizes *make_sizes(const job_spec *job, int per_node)
{
    char err[512];
    sizes_env env = {.gpu = 1, .ranks_per_node = per_node};
    sizes *s = sizes_create(job, &env, err, sizeof err);
    if (!s) CHECK(0, "sizes_create: %s", err);
    return s;
}

/* Active parameters: a token's top_k experts of every MoE block, the router
 * and the shared experts always; the FLOPs count exactly these weights. */
static void test_active(void)
{
    job_spec job;
    if (moe_job(&job, "  dp: 1\n", "")) return;
    const job_model *m = &job.model;
    size_t distinct, held = sizes_model_numel(m, &distinct), active = sizes_model_active_numel(m);
    size_t C = 64, Fe = 48, per_expert = 3 * C * Fe; /* SwiGLU: gate, up, down */
    size_t exp = model_unit_expert_numel(m, 2, 0, 1);
    CHECK(model_unit_expert_numel(m, 1, 0, 1) == 0 && exp == 8 * per_expert,
          "the routed experts of an MoE block: 8 x 3 x d_model x d_ff_expert = %zu elements (%zu); the dense "
          "block has none", 8 * per_expert, exp);
    CHECK(held == distinct && active == distinct - 3 * 6 * per_expert,
          "active parameters: %zu of %zu (3 MoE blocks x 6 idle experts of %zu)", active, distinct, per_expert);
    /* model FLOPs: 6 x the matmul weights a token passes (the active ones but
     * the embedding lookup and the norms' gains) + attention 12 L seq^2 C */
    double seq = 32, gains = (2.0 * 4 + 1) * C, lookup = 256.0 * C;
    double want = 6.0 * ((double)active - lookup - gains) * seq + 12.0 * 4 * seq * seq * C;
    double got = model_flops_per_sample(m, RECOMPUTE_NONE);
    CHECK(fabs(got / want - 1) < 1e-12, "model FLOPs per sample %.6g = 6 x active x seq + attention (%.6g)", got, want);
    /* the step time's GEMMs add up to them, unit by unit, each recompute kind */
    int ok = 1;
    for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_ELEMENTWISE; rc++)
        for (int u = 0; u < model_n_units(m); u++) {
            sizes_unit_work w;
            sizes_unit_work_ep(m, u, (recompute_kind)rc, 2, 1, 0, 1, 4, 2.0, &w);
            double f = 0;
            for (int i = 0; i < w.n_gemm; i++) f += w.gemm[i].fwd_flops + w.gemm[i].bwd_flops;
            ok &= fabs(f - 2.0 * sizes_unit_flops(m, u, (recompute_kind)rc)) <= 1e-9 * f;
        }
    CHECK(ok, "the MoE block's GEMMs (router, grouped experts, shared experts) add up to sizes_unit_flops x "
              "micro_batch, every unit and recompute kind, ep 4");
    /* with ep a local expert's GEMM has ep times the rows (its ep group's) */
    sizes_unit_work w1, w4;
    sizes_unit_work_ep(m, 2, RECOMPUTE_NONE, 2, 1, 0, 1, 1, 2.0, &w1);
    sizes_unit_work_ep(m, 2, RECOMPUTE_NONE, 2, 1, 0, 1, 4, 2.0, &w4);
    CHECK(w1.gemm[2].dim == 2 * 32 * 2 / 8.0 && w4.gemm[2].dim == 4 * 2 * 32 * 2 / 8.0 &&
              w1.gemm[2].fwd_flops == w4.gemm[2].fwd_flops,
          "an expert's GEMM: %g rows (B seq top_k / E) without ep, %g with ep 4, the same FLOPs", w1.gemm[2].dim,
          w4.gemm[2].dim);
    /* every tp rank routes all the micro-batch's rows (gathered under
     * sequence parallelism) and computes 1/tp of each expert's columns */
    sizes_unit_work_ep(m, 2, RECOMPUTE_NONE, 2, 2, 1, 1, 1, 2.0, &w4);
    CHECK(sizes_moe_routed_rows(m, 2, 1, 0, 1) == 2 * 32 * 2 && sizes_moe_routed_rows(m, 2, 2, 1, 1) == 2 * 32 * 2 &&
              sizes_moe_routed_rows(m, 2, 2, 0, 1) == 2 * 32 * 2 &&
              fabs(w4.gemm[2].fwd_flops - w1.gemm[2].fwd_flops / 2) <= 1e-9 * w1.gemm[2].fwd_flops,
          "routed rows per micro-batch: B x seq x top_k on every tp rank, with or without sequence parallelism; "
          "an expert's GEMM half the FLOPs at tp 2");
}

/* With ep the experts split over ep ranks and shard over dp x cp / ep; the
 * rest as before. Each category's pieces cover their part exactly once per
 * group, and ep 1 is the single slice of every mode. */
static void test_ep_memory(void)
{
    static const char *const modes[] = {"ddp", "zero1", "zero2", "fsdp"};
    for (int mi = 0; mi < 4; mi++) {
        char par[256];
        job_spec j1, j4;
        snprintf(par, sizeof par, "  dp: 8\n  mode: %s\n", modes[mi]);
        if (moe_job(&j1, par, "")) return;
        snprintf(par, sizeof par, "  dp: 8\n  ep: 4\n  mode: %s\n", modes[mi]);
        if (moe_job(&j4, par, "")) return;
        sizes *s1 = make_sizes(&j1, 8), *s4 = make_sizes(&j4, 8);
        if (!s1 || !s4) return;
        size_t exp = model_unit_expert_numel(&j4.model, 2, 0, 1), whole = model_unit_numel(&j4.model, 2, 0, 1);
        CHECK(sizes_ep(s4) == 4 && sizes_expert_dp(s4) == 2 && sizes_unit_expert_numel(s4, 2, 0) == exp / 4 &&
                  sizes_unit_numel(s4, 2, 0) == whole - exp + exp / 4 && sizes_unit_numel(s1, 2, 0) == whole &&
                  sizes_unit_numel(s4, 1, 0) == sizes_unit_numel(s1, 1, 0),
              "%s, ep 4 of dp 8: an MoE block holds 2 of 8 experts (%zu of %zu elements), a dense block all its own; "
              "the experts' data-parallel group is 2",
              modes[mi], sizes_unit_numel(s4, 2, 0), whole);
        int covered = 1;
        for (int what = SHARD_OF_PARAM; what <= SHARD_OF_OPTIM; what++) {
            /* an expert unit shards over the experts' data-parallel group
             * (S / ep ranks, place j / ep), a dense unit over S (strategy.h) */
            int S = sizes_shard_group(s4, (sizes_shard_of)what);
            size_t moe_sum = 0, dense_sum = 0, moe4 = sizes_unit_numel(s4, 2, 0), dense = sizes_unit_numel(s4, 1, 0);
            for (int j = 0; j < 8; j++) {
                moe_sum += sizes_shard(s4, (sizes_shard_of)what, 2, (sizes_at){j, 0, 0}, NULL);
                dense_sum += sizes_shard(s4, (sizes_shard_of)what, 1, (sizes_at){j, 0, 0}, NULL);
            }
            covered &= moe_sum == moe4 * (size_t)(S > 1 ? 8 / (S / 4) : 8) && dense_sum == dense * (size_t)(8 / S);
            /* ep 1: the old single slice of comm_chunk */
            for (int j = 0; j < 8; j++) {
                size_t lo, off, len, n = sizes_shard(s1, (sizes_shard_of)what, 2, (sizes_at){j, 0, 0}, &lo);
                comm_chunk(whole, sizes_shard_group(s1, (sizes_shard_of)what),
                           sizes_shard_rank(s1, (sizes_shard_of)what, j), &off, &len);
                covered &= n == len && lo == off;
            }
        }
        CHECK(covered, "%s: a dense unit's shards cover it once per dp group, an expert unit's once per group of "
                       "dp x cp / ep; ep 1 keeps the single slice of comm_chunk", modes[mi]);
        /* the experts' state per rank: ep 4 holds a quarter of them, sharded over 2 instead of 8 */
        sizes_memory m1, m4;
        sizes_rank_memory(s1, (sizes_at){0, 0, 0}, &m1);
        sizes_rank_memory(s4, (sizes_at){0, 0, 0}, &m4);
        /* DDP: a quarter of the experts, nothing sharded; the sharded modes
         * also shard the expert units' dense part over 2 ranks instead of 8 */
        if (mi == 0)
            CHECK(m4.bytes[SIZES_PARAMS] < m1.bytes[SIZES_PARAMS] && m4.bytes[SIZES_OPTIM] < m1.bytes[SIZES_OPTIM],
                  "ddp: params %zu -> %zu bytes, optimizer %zu -> %zu bytes with ep 4", m1.bytes[SIZES_PARAMS],
                  m4.bytes[SIZES_PARAMS], m1.bytes[SIZES_OPTIM], m4.bytes[SIZES_OPTIM]);
        else
            printf("# %s: params %zu -> %zu bytes, optimizer %zu -> %zu bytes on dp rank 0 with ep 4\n", modes[mi],
                   m1.bytes[SIZES_PARAMS], m4.bytes[SIZES_PARAMS], m1.bytes[SIZES_OPTIM], m4.bytes[SIZES_OPTIM]);
        sizes_destroy(s1);
        sizes_destroy(s4);
    }
}

static int estimate(plan_estimate *e, const job_spec *job, const char *hw_name, int nnodes, int per_node)
{
    hw_profile hw;
    char err[512];
    if (hw_load(&hw, hw_name, err, sizeof err) ||
        plan_estimate_memory(e, job, &hw, nnodes, per_node, err, sizeof err) || plan_estimate_time(e, err, sizeof err)) {
        CHECK(0, "estimate: %s", err);
        return -1;
    }
    return 0;
}

/* The all-to-all: per MoE block and micro-batch a dispatch and a combine each
 * way, (ep - 1) / ep of the routed rows leaving the rank; its peers off the
 * node over the slower link; block recompute dispatches again. */
static void test_all_to_all(void)
{
    job_spec job;
    if (moe_job(&job, "  dp: 8\n  ep: 8\n  microbatches: 2\n", "")) return;
    plan_estimate e;
    if (estimate(&e, &job, "h100-sxm", 2, 4)) return;
    const plan_comm *c = &e.stage[0].comm[GROUP_EP];
    double a2a = 1.0 * 32 * 2 * 64 * 2 * 7 / 8; /* B seq top_k C bf16 x 7/8 */
    CHECK(fabs(plan_ep_a2a_bytes(&e) - a2a) < 1e-9 && c->op && c->size == 8 && fabs(c->bytes - 2 * 3 * 4 * a2a) < 1e-6 &&
              c->calls == 2 * 3 * 4 && c->peers_off_node == 4 && c->inter_node,
          "ep 8 over 2 nodes of 4: %.0f bytes an all-to-all, %.0f a step (2 micro-batches x 3 MoE blocks x 4), "
          "%d of 7 peers off the node",
          plan_ep_a2a_bytes(&e), c->bytes, c->peers_off_node);
    double t = plan_ep_a2a_time(&e, c), per = a2a / 7;
    double want = fmax(3 * per / e.hw.intra_bw, 4 * per / e.hw.inter_bw) + 7 * e.hw.inter_latency;
    CHECK(fabs(t - want) < 1e-15 && c->exposed > 0 && fabs(c->exposed - c->time) < 1e-12,
          "its time: the node's peers and the others' at once (%.3g s), all of it exposed in the step", t);
    const plan_comm *x = &e.stage[0].comm[GROUP_EDP];
    CHECK(x->op && x->size == 1 ? 0 : 1, "edp of 1: nothing to reduce");
    plan_estimate_free(&e);

    /* inside one node; recompute block: a third pair */
    job.train.recompute = RECOMPUTE_BLOCK;
    if (estimate(&e, &job, "h100-sxm", 1, 8)) return;
    c = &e.stage[0].comm[GROUP_EP];
    CHECK(c->peers_off_node == 0 && !c->inter_node && c->calls == 2 * 3 * 6,
          "one node: every peer on it; block recompute: 6 all-to-alls a block and micro-batch");
    plan_estimate_free(&e);

    /* ep 2 of dp 8: the experts' gradients go to edp, 4 ranks */
    if (moe_job(&job, "  dp: 8\n  ep: 2\n  microbatches: 2\n", "")) return;
    if (estimate(&e, &job, "h100-sxm", 1, 8)) return;
    const plan_comm *d = &e.stage[0].comm[GROUP_DP];
    x = &e.stage[0].comm[GROUP_EDP];
    double exp = (double)model_unit_expert_numel(&job.model, 2, 0, 1) / 2 * 3 * 2; /* 3 blocks, bf16 grads */
    CHECK(x->op && x->size == 4 && fabs(x->bytes - 2.0 * 3 / 4 * exp) < 1 && d->size == 8,
          "ddp, ep 2 of dp 8: the experts' gradients all-reduced over their 4 ranks (%.0f bytes), the rest over 8",
          x->bytes);
    plan_estimate_free(&e);
}

/* The reports: total and active parameters, the experts, the ep and edp
 * groups in the communication table. */
static void test_reports(void)
{
    job_spec job;
    if (moe_job(&job, "  dp: 4\n  ep: 2\n  microbatches: 4\n", "")) return;
    char err[512];
    dryrun_opts o = {.nnodes = 1, .nproc_per_node = 4, .hardware = "h100-sxm"};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int rc = dryrun_run(&job, &o, f, err, sizeof err);
    fclose(f);
    CHECK(rc == 0 && strstr(buf, " active per token (8 experts of d_ff 48, top-2, 1 shared, softmax router; 3 of 4 "
                                 "blocks MoE)") &&
              strstr(buf, "experts: 4 per MoE block on each rank (8 / ep 2)") &&
              strstr(buf, "with the even load of a balanced router") &&
              strstr(buf, "the memory above prices 71 a rank per MoE block and micro-batch: the even load x 1.10") &&
              strstr(buf, "a dropless router may bring up to 128 (2.0 x the even load)") &&
              strstr(buf, "(ep 2 folded into dp x cp)") &&
              strstr(buf, "  ep            2") && strstr(buf, "  edp           2"),
          "dry-run text: active parameters, the experts per rank, routed rows, ep and edp rows%s%s", rc ? ": " : "",
          rc ? err : "");
    free(buf);
    o.format = DRYRUN_JSON;
    buf = NULL;
    f = open_memstream(&buf, &len);
    rc = dryrun_run(&job, &o, f, err, sizeof err);
    fclose(f);
    cJSON *root = rc == 0 ? cJSON_Parse(buf) : NULL, *mj = cJSON_GetObjectItem(root, "model");
    cJSON *moe = cJSON_GetObjectItem(mj, "moe");
    double active = cJSON_GetNumberValue(cJSON_GetObjectItem(mj, "parameters_active"));
    CHECK(moe && active == (double)sizes_model_active_numel(&job.model) &&
              cJSON_GetNumberValue(cJSON_GetObjectItem(moe, "ep")) == 2 &&
              cJSON_GetNumberValue(cJSON_GetObjectItem(moe, "expert_dp")) == 2 &&
              cJSON_GetNumberValue(cJSON_GetObjectItem(moe, "routed_rows_per_microbatch")) == 64 &&
              cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "layout"), "ep")) == 2,
          "dry-run JSON: model.parameters_active, model.moe (ep, expert_dp, routed rows), layout.ep");
    cJSON_Delete(root);
    free(buf);
    /* capacity: its bound said */
    if (moe_job(&job, "  dp: 4\n  ep: 2\n  microbatches: 4\n", "    capacity_factor: 1.25\n")) return;
    o.format = DRYRUN_TEXT;
    buf = NULL;
    f = open_memstream(&buf, &len);
    rc = dryrun_run(&job, &o, f, err, sizeof err);
    fclose(f);
    CHECK(rc == 0 && strstr(buf, "capacity_factor 1.25: at most 10 rows per expert and sample"),
          "capacity: ceil(1.25 x 32 x 2 / 8) = 10 rows per expert and sample, said");
    free(buf);
}

/* --plan searches ep: every divisor of the experts that divides dp x cp
 * (all the layouts that fit listed), and its top list is the exhaustive
 * search's (branch and bound stays exact with ep). */
static cJSON *plan(const job_spec *job, int top, int exhaustive)
{
    char *buf = NULL, err[512] = "";
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    dryrun_opts o = {.nnodes = 1, .nproc_per_node = 8, .hardware = "h100-sxm", .format = DRYRUN_JSON, .top = top,
                     .exhaustive = exhaustive};
    int rc = plan_run(job, &o, f, err, sizeof err);
    fclose(f);
    if (rc) CHECK(0, "plan: %s", err);
    cJSON *root = rc == 0 ? cJSON_Parse(buf) : NULL;
    free(buf);
    return root;
}

static void test_planner_ep(void)
{
    job_spec job;
    if (moe_job(&job, "  dp: 1\n", "")) return;
    cJSON *all = plan(&job, 1 << 20, 0), *ta = cJSON_GetObjectItem(all, "top");
    int n = cJSON_GetArraySize(ta), seen[9] = {0}, legal = 1;
    for (int i = 0; i < n; i++) {
        cJSON *x = cJSON_GetArrayItem(ta, i);
        int ep = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(x, "ep"));
        int dp = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(x, "dp"));
        int cp = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(x, "cp"));
        if (ep >= 1 && ep <= 8) seen[ep] = 1;
        legal &= ep >= 1 && 8 % ep == 0 && (dp * cp) % ep == 0;
    }
    CHECK(n > 0 && legal && seen[1] && seen[2] && seen[4] && seen[8],
          "--plan on 8 ranks: %d layouts fit, with ep 1, 2, 4 and 8, each dividing dp x cp", n);
    cJSON_Delete(all);
    cJSON *a = plan(&job, 5, 0), *b = plan(&job, 5, 1);
    ta = cJSON_GetObjectItem(a, "top");
    cJSON *tb = cJSON_GetObjectItem(b, "top");
    n = cJSON_GetArraySize(ta);
    int same = n == 5 && n == cJSON_GetArraySize(tb);
    for (int i = 0; i < n && same; i++) {
        cJSON *x = cJSON_GetArrayItem(ta, i), *y = cJSON_GetArrayItem(tb, i);
        same = cJSON_GetNumberValue(cJSON_GetObjectItem(x, "ep")) == cJSON_GetNumberValue(cJSON_GetObjectItem(y, "ep")) &&
               cJSON_GetNumberValue(cJSON_GetObjectItem(x, "step_s")) ==
                   cJSON_GetNumberValue(cJSON_GetObjectItem(y, "step_s"));
    }
    CHECK(same, "--plan's top 5 with ep is the exhaustive search's");
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* model.mla: the tensors' shapes and FLOPs; a run refuses it, the dry-run
 * prices it. */
static void test_mla(void)
{
    job_spec job;
    const char *y = "model:\n  kind: llama\n  n_layer: 2\n  n_head: 4\n  d_model: 64\n  d_ff: 128\n  vocab_size: 256\n"
                    "  seq_len: 32\n  mla:\n    q_lora_rank: 24\n    kv_lora_rank: 16\n    qk_rope_head_dim: 8\n"
                    "    qk_nope_head_dim: 12\n    v_head_dim: 10\n";
    if (load_job(&job, y)) return;
    const job_model *m = &job.model;
    double C = 64, H = 4, attn = C * 24 + 24 + 24 * H * 20 + C * (16 + 8) + 16 + 16 * H * (12 + 10) + H * 10 * C;
    size_t block = model_unit_numel(m, 1, 0, 1), want = (size_t)attn + 2 * 64 + 3 * 64 * 128;
    CHECK(job_model_mla(m) && model_unit_param_count(m, 1) == 12 && block == want,
          "an MLA block: 12 tensors (q_a, its norm, q_b, kv_a, its norm, kv_b, o, the MLP's), %zu elements (%zu)",
          block, want);
    param_spec p;
    model_unit_param_spec(m, 1, 3, 1, 2, &p);
    CHECK(!strcmp(p.name, "h.0.attn.q_b.w") && p.shape[0] == 80 && p.local_shape[0] == 40 && p.shape[1] == 24,
          "q_b [n_head x (nope + rope), q_lora] splits by heads over tp: %s [%d, %d] -> %d rows", p.name, p.shape[0],
          p.shape[1], p.local_shape[0]);
    model_unit_param_spec(m, 1, 8, 0, 1, &p);
    CHECK(!strcmp(p.name, "h.0.mlp_norm.w"), "after the attention the Llama block's own tensors: %s", p.name);
    double width = H * (12 + 8 + 10) / 2.0, seq = 32, in, out;
    model_mla_weights(m, &in, &out);
    double f = model_unit_flops(m, 1, RECOMPUTE_NONE);
    CHECK(fabs(f - (6.0 * seq * (in + out + 3 * C * 128) + 12.0 * seq * seq * width)) < 1e-6 &&
              model_attention_width(m) == width,
          "its FLOPs: 6 seq x its matmul weights + 12 seq^2 x n_head (qk + v head dims) / 2");
    CHECK(model_unsupported(m) && strstr(model_unsupported(m), "attention mla: counted by --dry-run, not trained yet"),
          "the model says it does not compute it: '%s'", model_unsupported(m) ? model_unsupported(m) : "");
    char err[512];
    dryrun_opts o = {.nnodes = 1, .nproc_per_node = 1, .hardware = "h100-sxm"};
    char *buf = NULL;
    size_t len = 0;
    FILE *fo = open_memstream(&buf, &len);
    int rc = dryrun_run(&job, &o, fo, err, sizeof err);
    fclose(fo);
    CHECK(rc == 0, "the dry-run prices it%s%s", rc ? ": " : "", rc ? err : "");
    free(buf);
    /* without the query latent: q straight from the stream */
    job.model.mla.q_lora_rank = 0;
    CHECK(model_unit_param_count(&job.model, 1) == 10 &&
              model_unit_numel(&job.model, 1, 0, 1) == want - (size_t)(C * 24 + 24 + 24 * H * 20) + (size_t)(C * H * 20),
          "q_lora_rank 0: one q [n_head x (nope + rope), d_model]");
}

int main(void)
{
    test_active();
    test_ep_memory();
    test_all_to_all();
    test_reports();
    test_planner_ep();
    test_mla();
    CHECK_DONE();
}
