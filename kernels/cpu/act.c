/* act.c — the CPU kernels' activation operands in either storage type
 * (ops.h: dt_dtype). The kernels compute in fp32 on fp32 arrays; a bf16
 * operand is widened into a buffer of this file before a kernel reads it
 * (exact), and a bf16 result is computed into one and rounded into its place
 * after (cpu_f32_to_bf16: to nearest, ties to even). fp32 operands are used
 * where they are. So a bf16 op gives the bits of the fp32 op followed by
 * round_bf16 of its results, which is what the CUDA kernels, reading and
 * writing bf16 directly, are checked against.
 *
 * The buffers are host memory this file keeps (one per operand slot, grown
 * as needed, per thread), not the ops table's allocations: they are the
 * twin's implementation, not part of what a device would hold. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu.h"

#define ACT_SLOTS 4

static _Thread_local float *slot_buf[ACT_SLOTS];
static _Thread_local size_t slot_cap[ACT_SLOTS];

static float *slot(int k, size_t n)
{
    if (k < 0 || k >= ACT_SLOTS) {
        fprintf(stderr, "dtrun: cpu kernels: activation slot %d of %d\n", k, ACT_SLOTS);
        abort();
    }
    if (n > slot_cap[k]) {
        float *p = realloc(slot_buf[k], n * sizeof(float));
        if (!p) {
            fprintf(stderr, "dtrun: cpu kernels: out of memory for %zu bytes of bf16 operand staging\n",
                    n * sizeof(float));
            abort();
        }
        slot_buf[k] = p;
        slot_cap[k] = n;
    }
    return slot_buf[k];
}

const float *cpu_act_in(int k, const void *p, size_t n, dt_dtype t)
{
    if (t == DT_F32 || !p) return p;
    float *f = slot(k, n ? n : 1);
    cpu_from_bf16(f, p, n);
    return f;
}

float *cpu_act_out(int k, void *p, size_t n, dt_dtype t)
{
    if (t == DT_F32 || !p) return p;
    return slot(k, n ? n : 1);
}

float *cpu_act_inout(int k, void *p, size_t n, dt_dtype t)
{
    if (t == DT_F32 || !p) return p;
    float *f = slot(k, n ? n : 1);
    cpu_from_bf16(f, p, n);
    return f;
}

void cpu_act_store(void *p, const float *f, size_t n, dt_dtype t)
{
    if (t == DT_F32 || !p) return;
    cpu_to_bf16(p, f, n);
}

void cpu_act_map(void (*f)(float *, const float *, size_t), void *out, const void *inp, size_t n, dt_dtype t)
{
    float *o = cpu_act_out(0, out, n, t);
    f(o, cpu_act_in(1, inp, n, t), n);
    cpu_act_store(out, o, n, t);
}

void cpu_act_map_backward(void (*f)(float *, const float *, const float *, size_t), float *dinp, const void *inp,
                          const float *dout, size_t n, dt_dtype t)
{
    f(dinp, cpu_act_in(0, inp, n, t), dout, n);
}
