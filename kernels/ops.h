/* ops.h — the one table of compute operations the runtime calls.
 *
 * The runtime never calls a backend directly: it holds a `const dt_ops *` and
 * calls ops->matmul_forward(...). Each backend (kernels/cpu, kernels/cuda) fills
 * one table; every CUDA kernel has a CPU twin with the same contract, and a test
 * compares them on random inputs.
 *
 * Conventions (all ops):
 * - Row-major, fp32, except the activations: the tensors a model keeps from
 *   its forward for its backward (layernorm outputs, qkv, attention output,
 *   fc output and GELU, the residual stream) are stored in the run's
 *   activation type (dt_dtype: fp32, or bf16 under mixed precision). Ops
 *   that read or write them take `void *` there and say the type with a
 *   dt_dtype argument; every other pointer (gradients, statistics, weights,
 *   logits) is fp32. An op computes in fp32 either way: it widens a bf16
 *   operand when it reads it (exact) and rounds a bf16 result once, when it
 *   stores it (to nearest, ties to even, as to_bf16), so a bf16 run rounds
 *   where an fp32 run with round_bf16 after each such op would. A matmul's
 *   weight matrix is of that type too (a mixed-precision model's parameters
 *   are bf16: the GEMMs read them as stored); biases are fp32.
 * - N = number of rows (tokens or patches), C = channels.
 * - Backward functions ACCUMULATE (+=) into every gradient they write (dinp, dw,
 *   db, ...), so gradient accumulation over micro-steps and the sum of a residual
 *   stream's two branches need no extra pass. Callers zero gradients when needed.
 *   One exception, said at its declaration: rope_backward transforms its
 *   gradient in place.
 * - Pointers never alias unless a comment says so.
 * - No op communicates or does I/O. Tensor-parallel reductions happen between
 *   ops, in the strategy, through hooks (see runtime/model/model.h).
 */
#ifndef DTRUN_OPS_H
#define DTRUN_OPS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* How a tensor's elements are stored (the activations' type, above). */
typedef enum { DT_F32 = 0, DT_BF16 = 1 } dt_dtype;

/* Bytes of one element. */
static inline size_t dt_dtype_size(dt_dtype t) { return t == DT_BF16 ? 2 : 4; }

/* p advanced by n elements of type t (NULL stays NULL). */
static inline void *dt_at(const void *p, size_t n, dt_dtype t)
{
    return p ? (char *)p + n * dt_dtype_size(t) : NULL;
}

/* Attention's widths (attention_* below): NH query heads of hs = C / NH
 * columns, NKV key/value heads (grouped-query attention; NKV == NH: plain
 * multi-head). dt_kv_cols: a row of k then v, 2 NKV hs (a KV cache's values
 * per position and layer, kv_pack's row); dt_qkv_cols: a row of q, k, v, C +
 * 2 NKV hs (3C when NKV == NH). */
static inline int dt_kv_cols(int C, int NH, int NKV) { return NH > 0 ? 2 * NKV * (C / NH) : 0; }
static inline int dt_qkv_cols(int C, int NH, int NKV) { return C + dt_kv_cols(C, NH, NKV); }

/* AdamW's per-step scalars where ops read them at run time (adamw_multi_dev,
 * adamw_mixed_multi_dev: device memory on cuda, host memory on cpu), so that a
 * step replayed as a graph takes a new learning rate without being recorded
 * again. lr and t as adamw takes them; corr1 = 1 - beta1^t and corr2 = 1 -
 * beta2^t in double, rounded to float, the bias corrections adamw computes
 * from t (dt_adamw_hyper_of fills them the same way; cuda's kernels read
 * them, cpu's recompute them from t: the same bits). */
typedef struct {
    float lr;
    int t;
    float corr1, corr2;
} dt_adamw_hyper;

static inline dt_adamw_hyper dt_adamw_hyper_of(float lr, float beta1, float beta2, int t)
{
    dt_adamw_hyper h = {lr, t, (float)(1.0 - pow((double)beta1, t)), (float)(1.0 - pow((double)beta2, t))};
    return h;
}

/* One tensor of a multi-tensor AdamW step (dt_ops.adamw_multi). */
typedef struct {
    float *p;
    const float *g;
    float *m, *v;
    size_t n;
    float weight_decay;
} dt_adamw_tensor;

/* One tensor of a mixed-precision multi-tensor AdamW step
 * (dt_ops.adamw_mixed_multi): the fp32 master and its moments, the gradient
 * (bf16 as uint16_t, or fp32: the call says which) and the bf16 parameters
 * the step writes, all n elements. */
typedef struct {
    float *master;
    const void *g;
    float *m, *v;
    uint16_t *p;
    size_t n;
    float weight_decay;
} dt_adamw_mixed_tensor;

typedef struct dt_ops {
    const char *name; /* "cpu", "cuda" */

    /* ---- where work and memory live (so nobody compares table pointers) ----
     * host_memory: 1 when alloc gives memory the host may touch (cpu), 0 when
     * it gives device memory (cuda). stream: the queue every op is issued on
     * (a cudaStream_t for cuda), for code that orders itself after compute
     * (communication: events on it); NULL on cpu, where ops run on the
     * caller's thread and are finished when they return. */
    int host_memory;
    void *(*stream)(void);
    /* The device ops run on, as its maker names it ("NVIDIA H100 80GB HBM3"
     * on cuda, "cpu"): for the peak a run's MFU is measured against. */
    const char *(*device_name)(void);

    /* ---- memory (device memory for cuda; plain malloc for cpu) ---- */
    void *(*alloc)(size_t bytes);                 /* zeroed; NULL on failure */
    void (*free)(void *p);
    /* Memory sized while a step runs (an MoE block's expert rows: as many as
     * arrived), in the order of the queue: alloc_ordered's memory may be used
     * by the ops issued after it, free_ordered gives it back once the ops
     * issued before have run (cuda: cudaMallocAsync / cudaFreeAsync on the
     * backend stream, from a pool that keeps what it got, as PyTorch's
     * caching allocator: no device-wide synchronisation as cudaFree's).
     * Not zeroed (cpu: alloc's, zeroed, and free); NULL on failure. */
    void *(*alloc_ordered)(size_t bytes);
    void (*free_ordered)(void *p);
    void (*zero)(void *p, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes); /* within the device */
    void (*to_host)(void *dst_host, const void *src, size_t bytes);
    void (*from_host)(void *dst, const void *src_host, size_t bytes);
    /* Host memory the device copies to and from at full speed (page-locked on
     * cuda; plain memory on cpu), zeroed; NULL on failure. For what lives on
     * the host on purpose (train.offload). */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    /* Copies that overlap compute (train.offload). copy_start: bytes from src
     * to dst, one of them host_alloc's memory, queued behind every op issued
     * so far on a copy queue of its own (cuda: a second stream, ordered by an
     * event), so the ops issued next run beside it; returns a handle, or NULL
     * when the copy is done already (cpu: a plain copy). copy_finish(h): the
     * ops issued after it wait for the copy, and so does the host (before it
     * reads what came down or reuses what went up). NULL: nothing to do. */
    void *(*copy_start)(void *dst, const void *src, size_t bytes);
    void (*copy_finish)(void *handle);

    /* ---- token embedding (vocab-parallel ready) ----
     * Rows [v0, v0+vn) of the global table live here as wte[vn, C].
     * out[i,:] = wte[tok[i]-v0,:] when v0 <= tok[i] < v0+vn, else 0 (overwrites). */
    void (*embedding_forward)(float *out, const int *tok, const float *wte,
                              int v0, int vn, int N, int C);
    /* dwte[tok[i]-v0,:] += dout[i,:] for the rows that live here. */
    void (*embedding_backward)(float *dwte, const float *dout, const int *tok,
                               int v0, int vn, int N, int C);

    /* ---- learned position embedding, added in place ----
     * pos NULL: x[b,t,:] += wpe[t,:]. pos (int, [B*T], backend memory): each
     * row at its own position, x[n,:] += wpe[pos[n],:] for n < B*T, pos[n] a
     * row of wpe (packed samples: positions restart at each sample; context
     * parallelism's chunks: positions in the whole sequence). */
    void (*posadd_forward)(float *x, const float *wpe, const int *pos, int B, int T, int C);
    /* pos NULL: dwpe[t,:] += sum_b dx[b,t,:], b in order. pos: dwpe[pos[n],:]
     * += dx[n,:], each row of dwpe summing its rows n in increasing order
     * (deterministic; the same order as the NULL case's for pos[n] = n % T). */
    void (*posadd_backward)(float *dwpe, const float *dx, const int *pos, int B, int T, int C);

    /* ---- patch embedding (ViT) ----
     * img[B, ch, H, W] (H = W = S), P = patch size, NP = (S/P)^2 patches in
     * row-major patch order; w[C, ch*P*P] with the inner index (c, py, px);
     * out[B, NP, C] = patches @ w^T + b (overwrites). */
    void (*patch_forward)(float *out, const float *img, const float *w, const float *b,
                          int B, int ch, int S, int P, int C);
    /* dw += ..., db += ... (no gradient flows to the image). */
    void (*patch_backward)(float *dw, float *db, const float *dout, const float *img,
                           int B, int ch, int S, int P, int C);

    /* ---- layernorm over the last dim: rstd = 1 / sqrt(var + eps) ----
     * out[N,C]; mean[N], rstd[N] saved for backward (overwrites). eps is the
     * model's (model.norm_eps: GPT-2's 1e-5, Hugging Face ViT's 1e-12); the
     * backward needs only the saved rstd. inp and out: activations of type t. */
    void (*layernorm_forward)(void *out, float *mean, float *rstd, const void *inp,
                              const float *w, const float *b, int N, int C, float eps, dt_dtype t);
    /* dinp += , dw += , db += ; inp of type t */
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const void *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C, dt_dtype t);

    /* ---- RMSNorm over the last dim (Llama's): rstd = 1 / sqrt(mean(x^2) + eps),
     * out = (x rstd) w, no mean subtracted and no bias (layernorm's arithmetic
     * with mean 0: one piece of code serves both). out[N,C]; rstd[N] saved
     * for backward (overwrites). inp and out: activations of type t, w fp32.
     * bf16: computed in fp32 from the widened input, out rounded once (HF
     * rounds x rstd before the weight multiplies it; this rounds only the
     * product). */
    void (*rmsnorm_forward)(void *out, float *rstd, const void *inp, const float *w, int N, int C, float eps,
                            dt_dtype t);
    /* With n = x rstd, g = dout w: dinp += rstd (g - n mean(g n)), dw +=
     * sum_rows dout n (deterministic: fixed-order sums). inp of type t. */
    void (*rmsnorm_backward)(float *dinp, float *dw, const float *dout, const void *inp, const float *w,
                             const float *rstd, int N, int C, dt_dtype t);

    /* ---- matmul: out[N,OC] = inp[N,IC] @ w[OC,IC]^T + bias[OC] (bias may be NULL) ----
     * inp (an activation) and w of type t, bias fp32; out of type out_t: t
     * where the product is an activation too (a column-parallel layer's),
     * fp32 where it is summed on before it is kept (a row-parallel layer's
     * partial sums, logits). */
    void (*matmul_forward)(void *out, const void *inp, const void *w, const float *bias,
                           int N, int IC, int OC, dt_dtype t, dt_dtype out_t);
    /* dinp += dout @ w; dw += dout^T @ inp; dbias += colsum(dout). Any of dinp,
     * dw, dbias may be NULL (not needed; w is not read without dinp, inp not
     * without dw). Each is computed on its own, so a call for some of them
     * writes the same bits as the call for all (a zero-bubble pipeline computes
     * dinp in its B pass and dw, dbias in its W pass). inp and w of type t;
     * the gradients fp32. */
    void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                            const void *inp, const void *w, int N, int IC, int OC, dt_dtype t);

    /* ---- the MLP's first layer and its activation, fused ----
     * pre = inp @ w^T + bias (matmul_forward's) and out = GELU, tanh
     * approximation, of pre (gelu_forward's); both overwritten, backward
     * needs pre. cuda: one GEMM whose epilogue writes both; cpu: the two ops,
     * the same bits as calling them. out, pre, inp, w of type t; bf16: the GELU
     * reads the fp32 pre-activation, and both are rounded when stored (as an
     * epilogue does). */
    void (*matmul_gelu_forward)(void *out, void *pre, const void *inp, const void *w,
                                const float *bias, int N, int IC, int OC, dt_dtype t);
    /* Its mirror in backward, for the layer after the GELU: dpre[N, IC] =
     * (dout[N, OC] @ w[OC, IC]) * gelu_tanh'(pre[N, IC]), OVERWRITTEN (the
     * GELU's input gradient; the layer's dw, dbias come from matmul_backward
     * with dinp NULL). cuda: one GEMM whose DGELU epilogue reads pre; cpu:
     * the GEMM then gelu_backward, the same bits as matmul_backward into a
     * zeroed buffer followed by gelu_backward into another. scratch: N * IC
     * floats for the GEMM's result (overwritten; the cpu uses it). w and pre
     * of type t. */
    void (*matmul_dgelu_backward)(float *dpre, float *scratch, const float *dout, const void *w,
                                  const void *pre, int N, int IC, int OC, dt_dtype t);

    /* ---- multi-head attention, grouped-query (GQA) ----
     * NH query heads of hs = C / NH columns, NKV key/value heads (NH a
     * multiple of NKV; NKV == NH: plain multi-head, NKV == 1: multi-query).
     * Ckv = NKV * hs (dt_kv_cols). qkv[B,T,W] with W = C + 2 Ckv (dt_qkv_cols):
     * q = [0, C), k = [C, C + Ckv), v = [C + Ckv, C + 2 Ckv); query head h
     * uses columns h*hs..h*hs+hs of q and kv head g = h / (NH / NKV) those of
     * k and v (g*hs..g*hs+hs): a group of NH / NKV query heads reads one k
     * and one v, never repeated in memory. With NKV == NH, W = 3C: GPT's
     * qkv, and the results are the same bits as before GQA existed.
     * out[B,T,C] = softmax(q k^T / sqrt(hs) [+ causal mask]) v, heads concatenated.
     * att[B,NH,T,T] keeps the softmax probabilities for backward. out, att
     * and qkv of type t. */
    void (*attention_forward)(void *out, void *att, const void *qkv,
                              int B, int T, int C, int NH, int NKV, int causal, dt_dtype t);
    /* One new query over a KV cache (decoding): q[C] the new token's q (heads
     * as above), kv[T, 2 Ckv] the cache of its sequence, row t = k then v of
     * position t (kv_pack's layout below: k in columns [0, Ckv), v in [Ckv,
     * 2 Ckv)), the last row the new token's own (the query sees all T keys);
     * out[C] = the causal attention_forward's row T-1. A cache holds kv heads
     * only: dt_kv_cols(C, NH, NKV) values a position (2C for GPT, 2C NKV/NH
     * under GQA). q, kv and out of type t; scratch: NH * T floats
     * (overwritten). */
    void (*attention_decode)(void *out, float *scratch, const void *q, const void *kv, int T, int C, int NH, int NKV,
                             dt_dtype t);
    /* dqkv += ; scratch holds at least B*NH*T*T floats (overwritten); qkv
     * and att of type t. A kv head's dk, dv sum its group's query heads in
     * head order (deterministic). */
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout,
                               const void *qkv, const void *att,
                               int B, int T, int C, int NH, int NKV, int causal, dt_dtype t);

    /* ---- blockwise attention: context parallelism's ring (flash-attention-2
     * style). A block of queries against one block of keys and values; the
     * softmax is kept as each row's log-sum-exp, so partial results over
     * disjoint key blocks merge exactly and backward recomputes the
     * probabilities block by block: no [T, T] matrix is kept.
     * Layout (samples of Ts rows; heads as attention_forward's: NH query
     * heads of hs = C / NH, NKV kv heads, Ckv = NKV hs, W = C + 2 Ckv):
     *   q    the q columns of a qkv buffer: row stride W, sample stride Ts*W,
     *        rows [0, Tq) of each sample from the pointer on;
     *   kv   k in columns [0, Ckv), v in [Ckv, 2 Ckv): row stride 2 Ckv,
     *        sample stride Ts*2Ckv, rows [0, Tk) (kv_pack makes one from a
     *        qkv buffer: rows_copy of its W-wide rows' 2 Ckv columns from C);
     *   out  row stride C, sample stride Ts*C, rows [0, Tq);
     *   lse  [B, NH, Ts] (sample b, head h at (b*NH + h)*Ts), rows [0, Tq).
     * Query head h reads kv head h / (NH / NKV) (GQA: no copy of k, v per
     * query head). NKV == NH: W = 3C, 2 Ckv = 2C, the layout before GQA.
     * Mask: query row i sees key row j when !causal or j <= i + shift (shift:
     * the query block's first position minus the key block's), and, with
     * segment ids (qseg and kseg not NULL: document masking of packed
     * samples), when qseg[i] == kseg[j]. qseg and kseg: int, backend memory,
     * one id a row, sample stride Ts, rows [0, Tq) and [0, Tk) from the
     * pointer (lse's layout without the heads). Within a call the ids never
     * decrease along a sample's rows [0, Tq) of q, nor [0, Tk) of kv (samples
     * are packed one after the other): a query's keys are then one run, and
     * the ops skip the key tiles outside every run of a query tile; no
     * [Tq, Tk] mask exists anywhere. NULL, NULL: no document mask (the ops
     * compute what they did before segments). A
     * row that sees no key gets out 0 and lse -inf. q and kv are of type t, out of
     * type out_t (t when it is the final result, fp32 for a partial that
     * merges follow; attention_block_merge is fp32).
     * Forward overwrites out and lse with this block's partial result; the
     * rows of out it does not compute (Tq..Ts of a sample) stay as they are. */
    void (*attention_block_forward)(void *out, float *lse, const void *q, const void *kv, const int *qseg,
                                    const int *kseg, int B, int Ts, int Tq, int Tk, int C, int NH, int NKV,
                                    int causal, int shift, dt_dtype t, dt_dtype out_t);
    /* (out, lse) <- the softmax over the union of their keys and the
     * partial's (pout, plse; same layout): lse' = log(e^lse + e^plse),
     * out' = out e^(lse - lse') + pout e^(plse - lse'). Rows with plse -inf
     * are left alone. (Per query head: GQA changes nothing here.) */
    void (*attention_block_merge)(float *out, float *lse, const float *pout, const float *plse,
                                  int B, int Ts, int Tq, int C, int NH);
    /* Backward of one block, from the FINAL out and lse of its query rows
     * (merged over every key block) and their gradient dout (layout of out):
     * dq += (layout of q: the q columns of a dqkv buffer), dkv += (layout of
     * kv). The probabilities are recomputed as exp(q k^T / sqrt(hs) - lse).
     * A kv head's dk, dv sum its group's query heads in a fixed order
     * (deterministic, no atomics). out, q and kv of type t. */
    void (*attention_block_backward)(float *dq, float *dkv, const float *dout, const void *out,
                                     const float *lse, const void *q, const void *kv, const int *qseg,
                                     const int *kseg, int B, int Ts, int Tq, int Tk, int C, int NH, int NKV,
                                     int causal, int shift, dt_dtype t);
    /* ---- rotary position embedding (RoPE) of q and k ----
     * Layout: Hugging Face's "rotate half" (LlamaForCausalLM as stored in HF
     * folders, torchtitan after its permute): within a head of hs columns,
     * column i pairs with column i + hs/2 (i < hs/2), and the pair turns by
     * the angle p f_i, p the token's position, f_i = theta^(-2i/hs):
     *     x[i]        <- x[i] c - x[i + hs/2] s
     *     x[i + hs/2] <- x[i + hs/2] c + x[i] s,     c = cos(p f_i), s = sin(p f_i)
     * (NOT Meta's original interleaved pairs (2i, 2i+1): a checkpoint in
     * that layout has its q and k projection rows permuted into this one on
     * import, as HF's convert script does.)
     * rope_table: cs[max_pos, hs] (overwrites) — row p holds cos(p f_i) for
     * i < hs/2, then sin(p f_i): computed in double (p f_i, cos, sin) and
     * rounded to fp32 once, on the host on every backend (cuda copies it
     * up), so every backend reads the same table bits. hs even; theta the
     * model's rope_theta (10000 GPT-NeoX/Llama 2, 500000 Llama 3). Build it
     * once per model for every position it will use. */
    void (*rope_table)(float *cs, int max_pos, int hs, float theta);
    /* In place on rows n < N of x (row stride ld elements), heads j <
     * nheads (columns j hs .. j hs + hs): each row at ITS position pos[n]
     * (int, [N], memory of the backend; 0 <= pos[n] < max_pos): the global
     * position in its sequence, so that context parallelism's load-balanced
     * chunks and packed samples (positions restarting per sample) rotate as
     * the whole sequence would. q and k of a qkv buffer are one call: x =
     * qkv, ld = dt_qkv_cols(C, NH, NKV), nheads = NH + NKV (the k heads
     * follow the q heads). x of type t; each element computed in fp32 from
     * the widened input as written above, no fused multiply-add (two
     * products, rounded, then their sum), rounded once to t: the same bits
     * on cpu and cuda. */
    void (*rope_forward)(void *x, int ld, int nheads, int hs, const int *pos, const float *cs, int N, dt_dtype t);
    /* Its backward, IN PLACE on the fp32 gradient dx (same layout): the
     * gradient with respect to the rotated values becomes the gradient with
     * respect to the values before rotation (the inverse rotation):
     *     g[i] <- g[i] c + g[i + hs/2] s,   g[i + hs/2] <- g[i + hs/2] c - g[i] s.
     * Unlike other backward ops it does not accumulate: call it on dqkv
     * once attention_backward has summed into it, before the qkv matmul's
     * backward reads it. */
    void (*rope_backward)(float *dx, int ld, int nheads, int hs, const int *pos, const float *cs, int N);

    /* Strided rows: dst[n, 0:W] = src[n, 0:W] (accumulate: +=), rows n < N of
     * row strides ldd and lds (elements), both of type t (accumulate: fp32
     * only). Packs k and v out of a qkv buffer for the ring and adds their
     * gradient back into dqkv. */
    void (*rows_copy)(void *dst, int ldd, const void *src, int lds, int N, int W, int accumulate, dt_dtype t);

    /* ---- dropout from counter-based draws (LoRA's input dropout) ----
     * x[N, W] holds columns [col0, col0 + W) of a tensor `cols` wide, its row
     * n being row rows[n] of the whole (device int64, one per row). Element
     * (n, j) is kept when the uniform draw u of Philox4x32-10 (key, counter
     * rows[n] * cols + col0 + j) is >= p, where u is the first word's top 24
     * bits times 2^-24 (runtime/rng.h rng_uniform's draw), and dropped (0)
     * otherwise; kept values are scaled by 1 / (1 - p) (computed in fp32).
     * A mask is so a pure function of (key, the element's place in the
     * whole): every layout, shard and backend drops the same elements.
     * out, x of type t (out rounded once). */
    void (*dropout_forward)(void *out, const void *x, const long long *rows, int N, int W, long long cols,
                            long long col0, uint64_t key, float p, dt_dtype t);
    /* dx[N, W] += dout * the same mask / (1 - p); fp32 */
    void (*dropout_backward)(float *dx, const float *dout, const long long *rows, int N, int W, long long cols,
                             long long col0, uint64_t key, float p);

    /* ---- GELU, tanh approximation (GPT-2's); out and inp of type t ---- */
    void (*gelu_forward)(void *out, const void *inp, size_t n, dt_dtype t);
    void (*gelu_backward)(float *dinp, const void *inp, const float *dout, size_t n, dt_dtype t);
    /* ---- GELU, exact: 0.5 x (1 + erf(x / sqrt(2))) (BERT's, HF ViT's "gelu") ---- */
    void (*gelu_erf_forward)(void *out, const void *inp, size_t n, dt_dtype t);
    void (*gelu_erf_backward)(float *dinp, const void *inp, const float *dout, size_t n, dt_dtype t);

    /* ---- SwiGLU (Llama's MLP): out = SiLU(gate) * up, SiLU(g) = g / (1 + e^-g) ----
     * inp[N, 2F] is ONE matmul's output, packed: gate = inp[:, 0:F), up =
     * inp[:, F:2F) (the gate and up projections as one [2F, C] weight, gate
     * rows first: one GEMM, one read of the layer's input; under tensor
     * parallelism each rank's local weight holds its gate rows then its up
     * rows, so its local [N, 2F_l] output has the same layout). out[N, F]
     * overwritten; one pass reads both halves. inp and out of type t (the
     * model keeps inp for backward), computed in fp32, out rounded once. */
    void (*swiglu_forward)(void *out, const void *inp, int N, int F, dt_dtype t);
    /* dinp[N, 2F] += the gradients of gate (columns [0, F)) and up ([F, 2F)):
     *   dgate += dout up s (1 + g (1 - s)),  dup += dout g s,  s = sigmoid(g).
     * inp of type t; dinp and dout fp32. */
    void (*swiglu_backward)(float *dinp, const void *inp, const float *dout, int N, int F, dt_dtype t);

    /* ---- mixture of experts (runtime/model/moe.c): router, dispatch, experts ----
     * N token rows, E experts, k = top_k choices per row. Rows belong to
     * groups (the samples: capacity and the load-balancing loss count per
     * sample): row i is in group (row0 + i) / T, so groups 0 .. G-1 with
     * G = (row0 + N - 1) / T + 1 (row0 > 0: the rows start inside a sample,
     * as a rank's share of one may). Router scores, weights and their
     * gradients are fp32 whatever the run's type.
     *
     * moe_router_forward: scores[N, E] of the router's logits[N, E]
     * (overwritten; scores may BE logits, turned into scores in place):
     * sigmoid 0, the softmax of each row; 1, the sigmoid of each logit. idx[N, k]: the row's k experts with the largest score +
     * bias[e] (bias NULL: 0), in descending order of that, a tie to the lower
     * expert; w[N, k]: their scores, divided by the k scores' sum when norm.
     * psum[G, E] (NULL: not wanted; overwritten): per group, the sum over
     * its rows of the balance probabilities q, the scores themselves
     * (softmax) or each row's scores divided by their sum (sigmoid), summed
     * in row order. */
    void (*moe_router_forward)(float *scores, int *idx, float *w, float *psum, const float *logits,
                               const float *bias, int N, int E, int k, int sigmoid, int norm, int T, int row0);
    /* dlogits[N, E] += the gradient through the scores of dw[N, k] (dL/dw)
     * and of daux[G, E] (dL/dq for every row of the group: the
     * load-balancing loss's; NULL: none), from the forward's scores, idx, w. */
    void (*moe_router_backward)(float *dlogits, const float *scores, const int *idx, const float *w,
                                const float *dw, const float *daux, int N, int E, int k, int sigmoid, int norm,
                                int T, int row0);
    /* The dispatch plan of idx[N, k]: the permuted order holds each kept
     * choice once, expert by expert (ascending), each expert's rows in row
     * order (then by choice: a row never picks an expert twice).
     * chosen[G, E]: choices of each group for each expert (overwritten);
     * counts[E]: the rows each expert keeps (overwritten); dst[N, k]: each
     * choice's row in the permuted order, or -1 when dropped; src[M]: the
     * token row of each permuted row (M = the sum of counts). cap 0: keep
     * every choice (dropless); cap > 0: a choice is kept when fewer than
     * cap earlier rows of its group (before[g, e] of them before row 0 of
     * this call: a group started on another rank; before NULL: 0) chose the
     * same expert: per sample, by position, so the same choices drop
     * wherever the rows are computed. */
    void (*moe_route)(int *dst, int *src, int *counts, int *chosen, const int *idx, const int *before, int N,
                      int E, int k, int cap, int T, int row0);
    /* out[i, :] = x[src[i], :] for i < M (rows of C; type t). */
    void (*moe_permute)(void *out, const void *x, const int *src, int M, int C, dt_dtype t);
    /* dx[n, :] += sum over j < k of dout[dst[n, j], :] (kept choices, j
     * ascending): deterministic, no atomics. */
    void (*moe_permute_backward)(float *dx, const float *dout, const int *dst, int N, int k, int C);
    /* out[n, :] = (accumulate: out[n, :] +) sum over kept j < k, ascending,
     * of w[n, j] y[dst[n, j], :]; y of type t, out fp32. */
    void (*moe_unpermute)(float *out, const void *y, const int *dst, const float *w, int N, int k, int C, dt_dtype t,
                          int accumulate);
    /* For each kept choice (n, j): dy[dst[n, j], :] += w[n, j] dout[n, :] and
     * dw[n, j] += dot(dout[n, :], y[dst[n, j], :]) (fp32, in column order);
     * dy or dw may be NULL. y of type t. */
    void (*moe_unpermute_backward)(float *dy, float *dw, const float *dout, const void *y, const int *dst,
                                   const float *w, int N, int k, int C, dt_dtype t);
    /* The experts' grouped GEMM: for group g < G (an expert) its rows
     * [o_g, o_g + counts[g]) (o_g the counts before g) compute out = inp
     * w_g^T, w_g = w + g OC IC elements ([OC, IC], no bias), as
     * matmul_forward would (the same rounding points). counts in HOST
     * memory (the host launches one GEMM per group: cpu a loop of BLAS
     * calls, cuda per-group cuBLASLt GEMMs on the stream). */
    void (*moe_grouped_forward)(void *out, const void *inp, const void *w, const int *counts, int G, int IC, int OC,
                                dt_dtype t, dt_dtype out_t);
    /* matmul_backward per group: dinp += dout w_g, dw_g += dout^T inp (its
     * rows); either may be NULL. */
    void (*moe_grouped_backward)(float *dinp, float *dw, const float *dout, const void *inp, const void *w,
                                 const int *counts, int G, int IC, int OC, dt_dtype t);

    /* ---- residual: out = a + b, a fp32 (a branch's output), b and out of
     * type t (the stream); out may alias a when t is fp32 (then it is also
     * the plain fp32 sum of two tensors) ---- */
    void (*residual_forward)(void *out, const float *a, const void *b, size_t n, dt_dtype t);
    /* The residual add and the layernorm that reads its sum, fused (llm.c's
     * fused residual forward): res[N,C] = a + b as residual_forward writes
     * it, then out, mean, rstd = layernorm_forward of res as stored (in bf16
     * the rounded sum). cuda: one pass over the rows; cpu: the two ops, the
     * same bits as calling them. res may alias a when t is fp32. */
    void (*residual_layernorm_forward)(void *res, void *out, float *mean, float *rstd, const float *a,
                                       const void *b, const float *w, const float *bias, int N, int C, float eps,
                                       dt_dtype t);
    /* The same with RMSNorm (Llama's pre-norm blocks): res = a + b as
     * residual_forward writes it, then out, rstd = rmsnorm_forward of res
     * as stored. cuda: one pass over the rows (the layernorm row's code);
     * cpu: the two ops, the same bits as calling them. res may alias a
     * when t is fp32. */
    void (*residual_rmsnorm_forward)(void *res, void *out, float *rstd, const float *a, const void *b,
                                     const float *w, int N, int C, float eps, dt_dtype t);
    /* da += dout; db += dout */
    void (*residual_backward)(float *da, float *db, const float *dout, size_t n);

    /* ---- softmax cross-entropy, vocab-parallel ready ----
     * logits[N,Vl] hold columns [v0, v0+Vl) of the global vocab. targets < 0
     * are ignored (loss 0).
     * xent_stats reads each row once: its max, the sum of exp(l - max) over
     * the row (online: a running max, the sum rescaled by exp(old - new)
     * whenever the max grows) and target[i] = logits[i, targets[i]-v0] when
     * that column lives here, else 0. Vl = 0 gives (-inf, 0, 0). It agrees
     * with the two-pass sum (max first, then the exps) within fp32 rounding,
     * not bit for bit: each rescale rounds once more.
     * With tensor parallelism every rank has its columns' (max_r, sum_r); the
     * row's pair is max = max_r max_r, sum = sum_r sum_r exp(max_r - max): the
     * caller all-reduces rowmax (max), rescales its sums to the global max
     * (xent_rescale), then all-reduces sumexp and target (sum). With one rank
     * the stats are the row's already. */
    void (*xent_stats)(float *rowmax, float *sumexp, float *target, const float *logits,
                       const int *targets, int v0, int N, int Vl);
    /* sumexp[i] *= exp(from_max[i] - to_max[i]): sums of exps relative to
     * from_max, made relative to to_max (>= from_max). Exactly sumexp[i]
     * where the two maxima are equal (-inf included), 0 where from_max is -inf
     * and to_max is not. sumexp may not alias the maxima. */
    void (*xent_rescale)(float *sumexp, const float *from_max, const float *to_max, int N);
    /* loss[i] = log(sumexp[i]) + rowmax[i] - target[i]  (0 for ignored rows) */
    void (*xent_loss)(float *loss, const float *rowmax, const float *sumexp,
                      const float *target, const int *targets, int N);
    /* dlogits = (softmax(logits) - onehot(targets)) * dloss[i]  (overwrites, Vl columns).
     * dlogits may be logits itself (in place: each element is read before it
     * is written, by the same thread): the chunked LM head keeps one buffer. */
    void (*xent_backward)(float *dlogits, const float *logits, const float *rowmax,
                          const float *sumexp, const int *targets, const float *dloss,
                          int v0, int N, int Vl);

    /* ---- AdamW on one flat tensor (or shard), fp32 state ----
     * step t >= 1 (bias correction); weight_decay applied decoupled: p -= lr*wd*p. */
    void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t);
    /* adamw on each tensor of the list, with its own weight decay: the same
     * arithmetic per element, so the same bits as calling adamw on each.
     * cuda: one launch for the whole list, whose device copy is kept and
     * sent again only when the list changes (a step sends nothing). */
    void (*adamw_multi)(const dt_adamw_tensor *list, int count, float lr, float beta1, float beta2,
                        float eps, int t);
    /* bf16 mixed precision's step, one pass per element of every tensor of
     * the list: g = the gradient widened to fp32 (grad_bf16: 1 when the list's
     * gradients are bf16, 0 when fp32), times grad_scale when grad_scale != 1;
     * adamw's arithmetic on the master with that g; then p = bf16(master),
     * rounded as to_bf16. So the same bits as from_bf16 (or a copy), scale,
     * adamw and to_bf16 one after the other, on the same backend; tensors are
     * disjoint. cuda: one launch, the list's device copy kept as adamw_multi's. */
    void (*adamw_mixed_multi)(const dt_adamw_mixed_tensor *list, int count, int grad_bf16,
                              float grad_scale, float lr, float beta1, float beta2, float eps, int t);
    /* p *= s (for gradient clipping and averaging) */
    void (*scale)(float *p, float s, size_t n);
    /* sum of squares in double (for the global gradient norm) */
    double (*sumsq)(const float *p, size_t n);

    /* ---- the step without the host: device scalars (train.cuda_graphs) ----
     * A step recorded as a graph (graph_begin) can neither read a value back
     * in the middle nor take one from the host: the loss, the squared
     * gradient norm, the clipping factor and AdamW's lr and t stay where the
     * ops read and write them, "device scalars" (device memory on cuda, host
     * memory on cpu). Each op below is the host code it replaces, run where
     * the data is: cpu's are that code, so a run with them gives the same
     * bits as one without; cuda's compute the same IEEE operations in the
     * same order (loss_sum_add sums serially for that reason). */
    /* *acc += the sum of loss[0..N) in double, in index order from 0 (one
     * chain of adds: the host loop's order, so the host loop's bits). */
    void (*loss_sum_add)(double *acc, const float *loss, int N);
    /* The backward's seed of the loss: dloss[i] = targets[i] >= 0 ? scale :
     * 0 (overwrites; targets < 0 are ignored samples, as in xent_loss). */
    void (*loss_seed)(float *dloss, const int *targets, float scale, int N);
    /* *acc += sumsq(p, n): the value sumsq returns, added once */
    void (*sumsq_add)(double *acc, const float *p, size_t n);
    /* *acc += *x */
    void (*scalar_add)(double *acc, const double *x);
    /* Gradient clipping's factor from the squared global norm: with norm =
     * sqrt(*sumsq), *s = (float)(clip / (norm + 1e-6)) when clip > 0 and
     * norm > clip, else 1. */
    void (*clip_scale)(float *s, const double *sumsq, double clip);
    /* p *= *s; nothing when *s is 1 (scale's arithmetic) */
    void (*scale_dev)(float *p, const float *s, size_t n);
    /* adamw_multi and adamw_mixed_multi with lr and t (and the bias
     * corrections) read from *h, and the mixed step's gradient scale from
     * *grad_scale (NULL: 1), when the op runs, not when it is issued. cuda
     * keeps the lists as adamw_multi does; a graph records the step only
     * after one step ran as issued (graph_begin), so recording sends
     * nothing. */
    void (*adamw_multi_dev)(const dt_adamw_tensor *list, int count, const dt_adamw_hyper *h, float beta1,
                            float beta2, float eps);
    void (*adamw_mixed_multi_dev)(const dt_adamw_mixed_tensor *list, int count, int grad_bf16,
                                  const float *grad_scale, const dt_adamw_hyper *h, float beta1, float beta2,
                                  float eps);

    /* ---- graphs: ops recorded once and replayed (train.cuda_graphs) ----
     * graph_begin: the ops issued from now until graph_end are recorded,
     * not run (cuda: stream capture of the backend's stream). Nothing issued
     * in between may synchronise with the host (to_host, from_host, sumsq,
     * free) or allocate, and every op must find its scratch already as large
     * as it needs: record a sequence of ops only after it ran once as issued.
     * graph_end: the recorded ops ready to launch, or NULL when the backend
     * records nothing: cpu, where begin and end are no-ops and the ops ran
     * as they were issued. A capture that fails stops the process with one
     * line naming the call (common.cuh, Errors), as a failed op does.
     * graph_launch: queues the recorded ops once, as one op; returns 0, or
     * -1 without launching when a buffer the backend lent the recorded ops
     * (its scratch) has moved since: the caller destroys the graph and
     * records it again. graph_destroy: frees one (NULL: nothing). */
    void (*graph_begin)(void);
    void *(*graph_end)(void);
    int (*graph_launch)(void *graph);
    void (*graph_destroy)(void *graph);

    /* ---- bfloat16, the rounding points of mixed precision ----
     * A bf16 is the top 16 bits of an fp32, held as uint16_t. Narrowing rounds
     * to nearest, ties to even; NaN stays NaN, overflow gives Inf (IEEE). */
    void (*to_bf16)(uint16_t *dst, const float *src, size_t n);
    void (*from_bf16)(float *dst, const uint16_t *src, size_t n); /* exact */
    /* p[i] = the fp32 value of bf16(p[i]): a tensor rounded where it is stored */
    void (*round_bf16)(float *p, size_t n);
    /* acc[i] = bf16(acc[i] + add[i]), the sum formed in fp32: bf16 gradient
     * accumulation (train.grad_dtype: bf16) */
    void (*acc_bf16)(uint16_t *acc, const float *add, size_t n);

    /* ---- the arithmetic of the products (matmul, attention) ----
     * on 1: the run is bf16 mixed precision, whose weights and activations
     * are bf16 values. A backend with bf16 tensor cores (cuda) then multiplies
     * in bf16 with fp32 accumulation: bf16 activations as they are stored,
     * fp32 operands (the unit's widened weights, the gradients flowing back)
     * narrowed first — exact for the weights, a rounding for the gradients,
     * as torch's autocast does. A product with a bf16 activation operand is
     * a bf16 one either way. The CPU multiplies the same values in fp32 (the
     * products of two bf16 values are exact in fp32), so it ignores the
     * switch. 0 (the default): fp32. Call before the first op of a run. */
    void (*set_bf16_products)(int on);
} dt_ops;

/* The CPU backend (always present). */
extern const dt_ops dt_ops_cpu;

/* The CUDA backend, or NULL when not built / no device. */
const dt_ops *dt_ops_cuda(void);

/* Where a worker computes (the job's train.device, same numbering). */
typedef enum { DT_DEVICE_AUTO = 0, DT_DEVICE_CPU, DT_DEVICE_CUDA } dt_device;

/* The ops table for `want`: cpu gives dt_ops_cpu; cuda the CUDA table on
 * device local_rank % (number of devices), or NULL with one line in err when
 * there is none to use (no GPU, no CUDA backend in this build, set-up failed);
 * auto is cuda when that works, else cpu. Call once, before any op. */
const dt_ops *dt_ops_select(dt_device want, int local_rank, char *err, size_t errlen);

/* Threads the CPU kernels use (OpenMP and OpenBLAS); n <= 0 keeps the default. */
void dt_ops_set_threads(int n);

#endif
