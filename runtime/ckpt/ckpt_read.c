/* ckpt_read.c — opening a checkpoint step and reading tensors back under any
 * layout.
 *
 * ckpt_open trusts nothing: index.json is validated field by field, each rank
 * file must have the recorded size and XXH3-64 (checked before its header is
 * even parsed, so a flipped byte reads as "checksum mismatch", the real cause),
 * then each file is validated as safetensors and each tensor's placement as
 * JSON. After that, reads are pure copies between validated placements. */
#include "runtime/ckpt/ckpt_internal.h"
#include "runtime/ckpt/ckpt_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

typedef struct {
    char name[CKPT_NAME_MAX];
    ckpt_place place;
    const void *data;
    st_dtype dtype;
} piece_ref;

typedef struct {
    const char *name; /* points into the first piece */
    int first, count; /* pieces[first .. first + count) */
} logical;

typedef struct {
    void *map;
    size_t len;
    st_reader *r;
} mapped;

struct ckpt {
    char *dir; /* the step directory */
    ckpt_index ix;
    mapped *files;
    int n_files;
    piece_ref *pieces;
    int n_pieces;
    logical *names;
    int n_names;
};


static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* DIR or DIR/step_x -> the step directory (malloc'd). */
static char *resolve(const char *path, char *err, size_t errlen)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/index.json", path);
    if (is_file(buf)) return strdup(path);
    long step;
    int rc = ckpt_latest_step(path, &step, err, errlen);
    if (rc == 1) {
        st_fail(err, errlen, "%s: no checkpoint here (no index.json and no latest)", path);
        return NULL;
    }
    if (rc != 0) return NULL;
    char name[64];
    ckpt_step_dirname(name, sizeof name, step);
    snprintf(buf, sizeof buf, "%s/%s/index.json", path, name);
    if (!is_file(buf)) {
        st_fail(err, errlen, "%s/latest: names %s, which has no index.json (deleted or never committed)",
             path, name);
        return NULL;
    }
    snprintf(buf, sizeof buf, "%s/%s", path, name);
    return strdup(buf);
}

/* Map rank file r, check size and checksum, validate it as safetensors. */
static int open_rank_file(ckpt *ck, int r, char *err, size_t errlen)
{
    char name[64], path[4400];
    ckpt_rank_filename(name, sizeof name, r);
    snprintf(path, sizeof path, "%s/%s", ck->dir, name);
    const ckpt_file_sum *want = &ck->ix.files[r];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return st_fail(err, errlen, "%s: missing (index.json lists it)", path);
        return st_fail(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return st_fail(err, errlen, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size != want->size) {
        close(fd);
        return st_fail(err, errlen, "%s: %lld bytes but index.json says %llu (truncated or replaced shard)",
                    path, (long long)st.st_size, (unsigned long long)want->size);
    }
    mapped *m = &ck->files[r];
    m->len = (size_t)st.st_size;
    m->map = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        return st_fail(err, errlen, "%s: cannot map (%s)", path, strerror(errno));
    }
    if (XXH3_64bits(m->map, m->len) != want->hash)
        return st_fail(err, errlen, "%s: checksum mismatch (corrupted shard)", path);
    return st_reader_open_mem(m->map, m->len, path, &m->r, err, errlen);
}

static int cmp_piece(const void *a, const void *b)
{
    return strcmp(((const piece_ref *)a)->name, ((const piece_ref *)b)->name);
}

/* Every tensor of every file -> a piece with its checked placement. */
static int collect_pieces(ckpt *ck, char *err, size_t errlen)
{
    size_t total = 0;
    for (int r = 0; r < ck->n_files; r++) total += (size_t)st_reader_count(ck->files[r].r);
    ck->pieces = calloc(total + 1, sizeof *ck->pieces);
    ck->names = calloc(total + 1, sizeof *ck->names);
    if (!ck->pieces || !ck->names) return st_fail(err, errlen, "%s: out of memory", ck->dir);
    char key[CKPT_NAME_MAX + 512], why[200];
    for (int r = 0; r < ck->n_files; r++) {
        const st_reader *rd = ck->files[r].r;
        const char *path = st_reader_path(rd);
        for (int i = 0; i < st_reader_count(rd); i++) {
            const st_tensor *t = st_reader_tensor(rd, i);
            piece_ref *pc = &ck->pieces[ck->n_pieces];
            snprintf(key, sizeof key, "%s%s", CKPT_PLACE_PREFIX, t->name);
            const char *json = st_reader_metadata(rd, key);
            if (!json)
                return st_fail(err, errlen, "%s: tensor '%.80s' has no placement metadata (not a dtrun shard)",
                            path, t->name);
            if (ckpt_place_decode(json, pc->name, sizeof pc->name, &pc->place, why, sizeof why) != 0)
                return st_fail(err, errlen, "%s: tensor '%.80s': %s", path, t->name, why);
            if (t->dtype != ST_F32 && t->dtype != ST_BF16)
                return st_fail(err, errlen, "%s: tensor '%.80s' is %s (F32 or BF16 expected)", path, t->name,
                            st_dtype_name(t->dtype));
            if (t->numel != pc->place.hi - pc->place.lo)
                return st_fail(err, errlen, "%s: tensor '%.80s' has %llu elements but its placement says %llu (shape mismatch)",
                            path, t->name, (unsigned long long)t->numel,
                            (unsigned long long)(pc->place.hi - pc->place.lo));
            pc->data = t->data;
            pc->dtype = t->dtype;
            ck->n_pieces++;
        }
    }
    qsort(ck->pieces, (size_t)ck->n_pieces, sizeof *ck->pieces, cmp_piece);
    for (int i = 0; i < ck->n_pieces; i++) {
        const piece_ref *pc = &ck->pieces[i];
        logical *lg = ck->n_names ? &ck->names[ck->n_names - 1] : NULL;
        if (lg && strcmp(lg->name, pc->name) == 0) {
            const ckpt_place *a = &ck->pieces[lg->first].place, *b = &pc->place;
            if (a->ndim != b->ndim || a->shape[0] != b->shape[0] || a->shape[1] != b->shape[1])
                return st_fail(err, errlen, "%s: '%s': rank files disagree on the global shape ([%lld, %lld] vs [%lld, %lld])",
                            ck->dir, pc->name, (long long)a->shape[0], (long long)a->shape[1],
                            (long long)b->shape[0], (long long)b->shape[1]);
            lg->count++;
            continue;
        }
        ck->names[ck->n_names].name = pc->name;
        ck->names[ck->n_names].first = i;
        ck->names[ck->n_names].count = 1;
        ck->n_names++;
    }
    return 0;
}

static int open_ckpt(const char *path, int with_files, ckpt **out, char *err, size_t errlen);

int ckpt_open(const char *path, ckpt **out, char *err, size_t errlen)
{
    return open_ckpt(path, 1, out, err, errlen);
}

int ckpt_open_index(const char *path, ckpt **out, char *err, size_t errlen)
{
    return open_ckpt(path, 0, out, err, errlen);
}

static int open_ckpt(const char *path, int with_files, ckpt **out, char *err, size_t errlen)
{
    *out = NULL;
    ckpt *ck = calloc(1, sizeof *ck);
    if (!ck) return st_fail(err, errlen, "%s: out of memory", path);
    if (strlen(path) > CKPT_DIR_MAX) {
        free(ck);
        return st_fail(err, errlen, "%.100s...: path too long", path);
    }
    ck->dir = resolve(path, err, errlen);
    if (!ck->dir) goto bad;
    char ipath[4096];
    snprintf(ipath, sizeof ipath, "%s/index.json", ck->dir);
    char *text;
    size_t len;
    int rc = ckpt_io_read_small(ipath, CKPT_INDEX_MAX, &text, &len, err, errlen);
    if (rc == 1) st_fail(err, errlen, "%s: missing", ipath);
    if (rc != 0) goto bad;
    rc = ckpt_index_decode(text, len, ipath, &ck->ix, err, errlen);
    free(text);
    if (rc != 0) goto bad;
    if (!with_files) {
        *out = ck;
        return 0;
    }
    ck->files = calloc((size_t)ck->ix.info.world, sizeof *ck->files);
    if (!ck->files) {
        st_fail(err, errlen, "%s: out of memory", ck->dir);
        goto bad;
    }
    ck->n_files = ck->ix.info.world;
    for (int r = 0; r < ck->n_files; r++)
        if (open_rank_file(ck, r, err, errlen) != 0) goto bad;
    if (collect_pieces(ck, err, errlen) != 0) goto bad;
    *out = ck;
    return 0;
bad:
    ckpt_close(ck);
    return -1;
}

void ckpt_close(ckpt *ck)
{
    if (!ck) return;
    for (int r = 0; r < ck->n_files; r++) {
        st_reader_close(ck->files[r].r);
        if (ck->files[r].map) munmap(ck->files[r].map, ck->files[r].len);
    }
    free(ck->files);
    free(ck->pieces);
    free(ck->names);
    ckpt_index_free(&ck->ix);
    free(ck->dir);
    free(ck);
}

const char *ckpt_path(const ckpt *ck) { return ck->dir; }
const ckpt_info *ckpt_get_info(const ckpt *ck) { return &ck->ix.info; }
int ckpt_tensor_count(const ckpt *ck) { return ck->n_names; }

const char *ckpt_tensor_name(const ckpt *ck, int i)
{
    return i >= 0 && i < ck->n_names ? ck->names[i].name : NULL;
}

static const logical *find(const ckpt *ck, const char *name)
{
    int lo = 0, hi = ck->n_names;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(ck->names[mid].name, name);
        if (c == 0) return &ck->names[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int ckpt_tensor_shape(const ckpt *ck, const char *name, int64_t shape[2])
{
    const logical *lg = find(ck, name);
    if (!lg) return -1;
    const ckpt_place *p = &ck->pieces[lg->first].place;
    shape[0] = p->shape[0];
    shape[1] = p->shape[1];
    return p->ndim;
}

int ckpt_read_slice(const ckpt *ck, const char *name, const ckpt_place *want, float *out,
                    char *err, size_t errlen)
{
    const logical *lg = find(ck, name);
    if (!lg) return st_fail(err, errlen, "%s: no tensor '%s' in the checkpoint (missing tensor)", ck->dir, name);
    const ckpt_place *g = &ck->pieces[lg->first].place;
    char why[200];
    if (ckpt_place_check(want, why, sizeof why) != 0)
        return st_fail(err, errlen, "%s: '%s': requested %s", ck->dir, name, why);
    if (want->ndim != g->ndim || want->shape[0] != g->shape[0] || want->shape[1] != g->shape[1])
        return st_fail(err, errlen, "%s: '%s' is [%lld, %lld] in the checkpoint but [%lld, %lld] is wanted (shape mismatch)",
                    ck->dir, name, (long long)g->shape[0], (long long)g->shape[1],
                    (long long)want->shape[0], (long long)want->shape[1]);
    uint64_t n = want->hi - want->lo;
    unsigned char *covered = calloc(n + 1, 1);
    if (!covered) return st_fail(err, errlen, "%s: out of memory reading '%s'", ck->dir, name);
    for (int i = 0; i < lg->count; i++) {
        const piece_ref *pc = &ck->pieces[lg->first + i];
        ckpt_place_copy(&pc->place, pc->data, pc->dtype, want, out, covered);
    }
    uint64_t missing = 0;
    for (uint64_t k = 0; k < n; k++) missing += !covered[k];
    free(covered);
    if (missing)
        return st_fail(err, errlen, "%s: '%s': %llu of %llu wanted elements are in no rank file (missing shard)",
                    ck->dir, name, (unsigned long long)missing, (unsigned long long)n);
    return 0;
}

int ckpt_read_global(const ckpt *ck, const char *name, float *out, char *err, size_t errlen)
{
    const logical *lg = find(ck, name);
    if (!lg) return st_fail(err, errlen, "%s: no tensor '%s' in the checkpoint (missing tensor)", ck->dir, name);
    ckpt_place want = ck->pieces[lg->first].place;
    want.split = CKPT_SPLIT_NONE;
    want.groups = 1;
    want.tp_rank = 0;
    want.tp_size = 1;
    want.ep_rank = 0;
    want.ep_size = 1;
    want.lo = 0;
    want.hi = (uint64_t)want.shape[0] * (uint64_t)want.shape[1];
    return ckpt_read_slice(ck, name, &want, out, err, errlen);
}

int ckpt_read_unit_slice(const ckpt *ck, const char *prefix, const param_spec *specs, int n_specs,
                         int tp_rank, int tp_size, uint64_t lo, uint64_t hi, float *slice,
                         char *err, size_t errlen)
{
    for (int i = 0; i < n_specs; i++) {
        ckpt_piece pc;
        /* the pieces this slice would have been saved as are what it needs */
        int k = ckpt_unit_slice_pieces(prefix, &specs[i], 1, tp_rank, tp_size, lo, hi, slice, &pc, 1);
        if (k < 0) return st_fail(err, errlen, "%s: name '%s/%s' too long", ck->dir, prefix, specs[i].name);
        if (k == 0) continue;
        if (ckpt_read_slice(ck, pc.name, &pc.place, (float *)pc.data, err, errlen) != 0) return -1;
    }
    return 0;
}
