/* fuzz_safetensors.c — libFuzzer target for the safetensors reader and the
 * checkpoint placement decoder. Any input must either be rejected with one
 * line naming the file, or give tensors that lie inside the input, tile the
 * data region, are found by name, and whose placements (when a "place/NAME"
 * metadata key decodes) stay inside their tensor. Every tensor byte is read so
 * ASan sees an out-of-bounds pointer. Built by scripts/fuzz.sh safetensors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ckpt/ckpt_internal.h"
#include "runtime/ckpt/safetensors.h"

static volatile unsigned sink; /* keeps the reads of tensor bytes */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512] = "";
    st_reader *r = NULL;
    if (st_reader_open_mem(data, size, "fuzz", &r, err, sizeof err) != 0) {
        if (r || strncmp(err, "fuzz: ", 6) != 0 || strchr(err, '\n')) abort();
        return 0;
    }
    uint64_t header;
    memcpy(&header, data, 8);
    const uint8_t *base = data + 8 + header, *end = data + size;
    const uint8_t *at = base;
    unsigned sum = 0;
    for (int i = 0; i < st_reader_count(r); i++) {
        const st_tensor *t = st_reader_tensor(r, i);
        const uint8_t *p = t->data;
        /* in offset order the tensors tile [base, end) exactly */
        if (p != at || t->nbytes > (size_t)(end - p) || t->numel * st_dtype_size(t->dtype) != t->nbytes) abort();
        for (size_t k = 0; k < t->nbytes; k++) sum += p[k];
        at = p + t->nbytes;
        if (st_reader_find(r, t->name) != t) abort();
        char key[600], name[CKPT_NAME_MAX], why[200];
        snprintf(key, sizeof key, "%s%s", CKPT_PLACE_PREFIX, t->name);
        const char *json = st_reader_metadata(r, key);
        ckpt_place pl;
        if (json && ckpt_place_decode(json, name, sizeof name, &pl, why, sizeof why) == 0) {
            uint64_t n = ckpt_place_local_numel(&pl);
            if (pl.hi > n || pl.lo > pl.hi) abort();
            uint64_t total = (uint64_t)pl.shape[0] * (uint64_t)pl.shape[1];
            /* only small ones: the index walk is per element */
            for (uint64_t k = pl.lo; k < pl.hi && k < pl.lo + 4096; k++)
                if (ckpt_place_global_index(&pl, k) >= total) abort();
        }
    }
    if (at != end) abort();
    for (int i = 0; i < st_reader_metadata_count(r); i++) {
        const char *k = st_reader_metadata_key(r, i), *v = st_reader_metadata_value(r, i);
        if (!k || !v || st_reader_metadata(r, k) != v) abort();
    }
    sink = sum;
    st_reader_close(r);
    return 0;
}
