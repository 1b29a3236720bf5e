/* memory.c — host memory for the CPU backend.
 *
 * "Device" memory is plain host memory here, so to_host/from_host are copies.
 * Buffers are 64-byte aligned (one cache line, one AVX-512 vector) so the SIMD
 * loops and OpenBLAS see aligned rows. Zero-byte requests still return a valid
 * pointer, because the ops table promises NULL only on failure. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

#define CPU_ALIGN 64

void *cpu_alloc(size_t bytes) {
    /* aligned_alloc wants a multiple of the alignment; guard the round-up. */
    if (bytes > (size_t)-1 - CPU_ALIGN) return NULL;
    size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (rounded == 0) rounded = CPU_ALIGN;
    void *p = aligned_alloc(CPU_ALIGN, rounded);
    if (p) memset(p, 0, rounded);
    return p;
}

void cpu_free(void *p) { free(p); }

/* Zeroing is how a backward pass starts each accumulated gradient (megabytes
 * per block): large buffers are split across the threads in 64-byte-aligned
 * pieces, as one thread's stores do not saturate the memory bus.
 * memset/memcpy with a NULL pointer are undefined even for 0 bytes. */
#define CPU_ZERO_PAR_MIN ((size_t)1 << 20)

void cpu_zero(void *p, size_t bytes) {
    if (bytes < CPU_ZERO_PAR_MIN) {
        if (bytes) memset(p, 0, bytes);
        return;
    }
    #pragma omp parallel
    {
        int n = omp_get_num_threads(), t = omp_get_thread_num();
        size_t piece = (bytes / (size_t)n + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
        size_t lo = piece * (size_t)t, hi = lo + piece < bytes ? lo + piece : bytes;
        if (lo < hi) memset((char *)p + lo, 0, hi - lo);
    }
}

void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memcpy(dst, src, bytes);
}

/* The host is the device here: the copy is done when it returns. */
void *cpu_copy_start(void *dst, const void *src, size_t bytes) {
    cpu_copy(dst, src, bytes);
    return NULL;
}

void cpu_copy_finish(void *handle) { (void)handle; }
