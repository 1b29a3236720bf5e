/* test_data.c — data loaders: every kind yields the right shapes and values, the
 * global batch is a pure function of (seed, step, split) that slices agree on,
 * IDX training walks a permutation per epoch, synthetic data is learnable,
 * instruction data (SFT shards) packs into the windows a by-hand packing
 * gives, with its targets, positions and segments, and
 * every kind of bad input is one "PATH: what (why)" line and a NULL. Fixtures
 * live in a mkdtemp directory that the test removes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "runtime/data/data.h"
#include "runtime/data/perm.h"
#include "runtime/rng.h"
#include "test/unit/check.h"

enum { B = 8, TMAX = 64 }; /* global batch of most tests; longest seq_len */

/* ---- fixtures ---- */

static char tmpdir[64] = "/tmp/dtrun-test-data-XXXXXX";
static char made[64][256]; /* every file created, removed at the end */
static int n_made;

static const char *fixture(const char *name)
{
    snprintf(made[n_made], sizeof made[n_made], "%s/%s", tmpdir, name);
    return made[n_made++];
}

static const char *write_file(const char *name, const void *data, size_t len)
{
    const char *path = fixture(name);
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    return path;
}

static const char *write_gz(const char *name, const void *data, size_t len)
{
    const char *path = fixture(name);
    gzFile f = gzopen(path, "wb");
    if (!f || gzwrite(f, data, (unsigned)len) != (int)len || gzclose(f) != Z_OK) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    return path;
}

static void remove_fixtures(void)
{
    for (int i = 0; i < n_made; i++)
        unlink(made[i]);
    rmdir(tmpdir);
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* An llm.c shard holding tokens[0..count) (header count may lie: header_count). */
static const char *write_shard(const char *name, const uint16_t *tokens, int count,
                               int32_t magic, int32_t version, int32_t header_count)
{
    size_t len = 1024 + 2 * (size_t)count;
    unsigned char *buf = calloc(1, len);
    int32_t h[3] = {magic, version, header_count};
    memcpy(buf, h, sizeof h);
    memcpy(buf + 1024, tokens, 2 * (size_t)count);
    const char *path = write_file(name, buf, len);
    free(buf);
    return path;
}

/* IDX images whose pixel p of image i is (5 i + p) % 256, so pixel 0 names the
 * image (i < 51); labels i % n_classes. Returns the images' and labels' bytes. */
enum { IDX_N = 37, IDX_S = 4, IDX_CLASSES = 3 };
static size_t idx_images_bytes(unsigned char *out, uint32_t magic, int n, int rows, int cols)
{
    put_be32(out, magic);
    put_be32(out + 4, (uint32_t)n);
    put_be32(out + 8, (uint32_t)rows);
    put_be32(out + 12, (uint32_t)cols);
    for (int i = 0; i < n; i++)
        for (int p = 0; p < rows * cols; p++)
            out[16 + i * rows * cols + p] = (unsigned char)((5 * i + p) % 256);
    return 16 + (size_t)n * rows * cols;
}

static size_t idx_labels_bytes(unsigned char *out, int n, int n_classes)
{
    put_be32(out, 0x00000801);
    put_be32(out + 4, (uint32_t)n);
    for (int i = 0; i < n; i++)
        out[8 + i] = (unsigned char)(i % n_classes);
    return 8 + (size_t)n;
}

/* ---- jobs, filled by hand so the test needs no YAML parser ---- */

static job_spec gpt_job(data_kind kind, const char *train, int seq_len, int vocab)
{
    job_spec j;
    memset(&j, 0, sizeof j);
    snprintf(j.path, sizeof j.path, "test.yaml");
    j.model.kind = MODEL_GPT;
    j.model.seq_len = seq_len;
    j.model.vocab_size = vocab;
    j.data.kind = kind;
    snprintf(j.data.train_path, sizeof j.data.train_path, "%s", train);
    j.train.global_batch = B;
    j.train.seed = 1234;
    return j;
}

static job_spec vit_job(data_kind kind, const char *images, const char *labels, int size,
                        int n_classes)
{
    job_spec j;
    memset(&j, 0, sizeof j);
    snprintf(j.path, sizeof j.path, "test.yaml");
    j.model.kind = MODEL_VIT;
    j.model.image_size = size;
    j.model.channels = 1;
    j.model.n_classes = n_classes;
    j.data.kind = kind;
    snprintf(j.data.train_path, sizeof j.data.train_path, "%s", images);
    snprintf(j.data.train_labels, sizeof j.data.train_labels, "%s", labels);
    j.train.global_batch = B;
    j.train.seed = 1234;
    return j;
}

/* ---- shared properties ---- */

/* GPT: [0, B) of step equals [0, 3) + [3, B), and targets are tokens shifted. */
static int gpt_slices_agree(data_loader *d, int T, long step)
{
    static int full_x[B * TMAX], full_y[B * TMAX], part_x[B * TMAX], part_y[B * TMAX];
    data_batch(d, step, 0, B, full_x, full_y, NULL, NULL);
    data_batch(d, step, 0, 3, part_x, part_y, NULL, NULL);
    data_batch(d, step, 3, B - 3, part_x + 3 * T, part_y + 3 * T, NULL, NULL);
    if (memcmp(full_x, part_x, sizeof(int) * B * T) || memcmp(full_y, part_y, sizeof(int) * B * T))
        return 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t + 1 < T; t++)
            if (full_y[b * T + t] != full_x[b * T + t + 1])
                return 0;
    return 1;
}

static int vit_slices_agree(data_loader *d, int npix, long step)
{
    float *full = malloc(sizeof(float) * B * npix), *part = malloc(sizeof(float) * B * npix);
    int full_l[B], part_l[B];
    data_batch(d, step, 0, B, NULL, NULL, full, full_l);
    data_batch(d, step, 0, 3, NULL, NULL, part, part_l);
    data_batch(d, step, 3, B - 3, NULL, NULL, part + 3 * npix, part_l + 3);
    int same = !memcmp(full, part, sizeof(float) * B * npix) && !memcmp(full_l, part_l, sizeof full_l);
    free(full);
    free(part);
    return same;
}

/* Same (seed, step) from a second loader gives the same batch; another step
 * gives another. */
static void check_determinism(const job_spec *job, data_split split, const char *what)
{
    char err[512];
    data_loader *a = data_open(job, split, err, sizeof err), *b = data_open(job, split, err, sizeof err);
    if (!a || !b) {
        CHECK(0, "%s: determinism: open failed: %s", what, err);
        data_close(a);
        data_close(b);
        return;
    }
    int gpt = job->model.kind == MODEL_GPT;
    size_t n = gpt ? (size_t)B * job->model.seq_len
                   : (size_t)B * job->model.channels * job->model.image_size * job->model.image_size;
    float *fa = calloc(n, sizeof(float)), *fb = calloc(n, sizeof(float)), *fc = calloc(n, sizeof(float));
    int *ia = calloc(n, sizeof(int)), *ib = calloc(n, sizeof(int)), *ic = calloc(n, sizeof(int));
    if (gpt) {
        data_batch(a, 5, 0, B, ia, NULL, NULL, NULL);
        data_batch(b, 5, 0, B, ib, NULL, NULL, NULL);
        data_batch(b, 6, 0, B, ic, NULL, NULL, NULL);
    } else {
        data_batch(a, 5, 0, B, NULL, NULL, fa, ia);
        data_batch(b, 5, 0, B, NULL, NULL, fb, ib);
        data_batch(b, 6, 0, B, NULL, NULL, fc, ic);
    }
    int same = !memcmp(ia, ib, n * sizeof(int)) && !memcmp(fa, fb, n * sizeof(float));
    int differs = memcmp(ia, ic, n * sizeof(int)) || memcmp(fa, fc, n * sizeof(float));
    CHECK(same, "%s: same (seed, step) from two loaders gives the same batch", what);
    CHECK(differs, "%s: step 6 differs from step 5", what);
    free(fa); free(fb); free(fc); free(ia); free(ib); free(ic);
    data_close(a);
    data_close(b);
}

static void expect_error(const job_spec *job, data_split split, const char *path,
                         const char *reason, const char *what)
{
    char err[1024] = "";
    data_loader *d = data_open(job, split, err, sizeof err);
    CHECK(!d && strstr(err, path) && strstr(err, reason) && !strchr(err, '\n'),
          "error: %s -> \"%s\" (want '%s' and '%s')", what, err, path, reason);
    data_close(d);
}

/* ---- permutation ---- */

static void test_perm(void)
{
    const uint64_t sizes[] = {1, 2, 3, 5, 16, 17, 1000, 4097, 60000};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        uint64_t n = sizes[s];
        unsigned char *seen = calloc(n, 1);
        int ok = 1;
        long fixed = 0;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t x = perm_index(rng_key(7, "perm"), n, i);
            if (x >= n || seen[x]++) ok = 0;
            fixed += x == i;
        }
        CHECK(ok, "perm_index is a bijection of [0, %llu)", (unsigned long long)n);
        if (n >= 1000)
            CHECK(fixed < 10, "perm_index(n=%llu) shuffles (%ld fixed points)",
                  (unsigned long long)n, fixed);
        free(seen);
    }
    long differ = 0;
    for (uint64_t i = 0; i < 1000; i++)
        differ += perm_index(rng_key(7, "a"), 1000, i) != perm_index(rng_key(7, "b"), 1000, i);
    CHECK(differ > 900, "different keys give different permutations (%ld of 1000 differ)", differ);
}

/* ---- text ---- */

static void test_text(void)
{
    enum { N = 5000, T = 16 };
    unsigned char bytes[N];
    for (int i = 0; i < N; i++)
        bytes[i] = (unsigned char)rng_below(rng_key(1, "text fixture"), (uint64_t)i, 256);
    const char *path = write_file("corpus.txt", bytes, N);
    job_spec job = gpt_job(DATA_TEXT, path, T, 256);
    char err[512];
    data_loader *tr = data_open(&job, DATA_TRAIN, err, sizeof err);
    data_loader *va = data_open(&job, DATA_VAL, err, sizeof err);
    CHECK(tr && va, "text: opens both splits (%s)", tr && va ? "" : err);
    if (!tr || !va) {
        data_close(tr);
        data_close(va);
        return;
    }
    const long n_train = N - N / 10, n_val = N / 10;
    CHECK(data_count(tr) == n_train - T, "text: train count = train bytes - seq_len (%ld)",
          data_count(tr));
    CHECK(data_count(va) == (n_val - 1) / T, "text: val count = non-overlapping windows (%ld)",
          data_count(va));
    /* every train window is a window of the first 90 % of the file */
    int x[B * T], y[B * T], in_train = 1;
    for (long step = 0; step < 20; step++) {
        data_batch(tr, step, 0, B, x, y, NULL, NULL);
        for (int b = 0; b < B; b++) {
            int found = 0;
            for (long o = 0; o + T + 1 <= n_train && !found; o++) {
                found = 1;
                for (int t = 0; t < T && found; t++)
                    found = x[b * T + t] == bytes[o + t] && y[b * T + t] == bytes[o + t + 1];
            }
            in_train &= found;
        }
    }
    CHECK(in_train, "text: train samples are windows of the training bytes");
    /* validation batch k, sample j = window (k B + j) % count, stride T, in the last 10 % */
    int ok = 1;
    for (long step = 0; step < 3; step++) {
        data_batch(va, step, 0, B, x, y, NULL, NULL);
        for (int b = 0; b < B; b++) {
            long off = n_train + ((step * B + b) % data_count(va)) * T;
            for (int t = 0; t < T; t++)
                ok &= x[b * T + t] == bytes[off + t] && y[b * T + t] == bytes[off + t + 1];
        }
    }
    CHECK(ok, "text: validation walks non-overlapping windows in order, wrapping");
    CHECK(gpt_slices_agree(tr, T, 3) && gpt_slices_agree(va, T, 3),
          "text: [0,8) == [0,3) + [3,8) in both splits");
    data_close(tr);
    data_close(va);
    check_determinism(&job, DATA_TRAIN, "text");

    /* val_path given: each split reads its own file, whole */
    job_spec own = job;
    snprintf(own.data.val_path, sizeof own.data.val_path, "%s", path);
    tr = data_open(&own, DATA_TRAIN, err, sizeof err);
    va = data_open(&own, DATA_VAL, err, sizeof err);
    CHECK(tr && va && data_count(tr) == N - T && data_count(va) == (N - 1) / T,
          "text: with val_path both splits are whole files");
    data_close(tr);
    data_close(va);

    /* errors */
    job_spec bad = gpt_job(DATA_TEXT, fixture("missing.txt"), T, 256);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "No such file", "missing text file");
    bad = gpt_job(DATA_TEXT, write_file("empty.txt", "", 0), T, 256);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "empty", "empty text file");
    bad = gpt_job(DATA_TEXT, write_file("short.txt", bytes, 100), T, 256);
    expect_error(&bad, DATA_VAL, bad.data.train_path, "too short", "val split shorter than a sequence");
    bad = gpt_job(DATA_TEXT, write_file("tiny.txt", bytes, T), T, 256);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "too short", "file shorter than a sequence");
    bad = gpt_job(DATA_TEXT, path, T, 100);
    expect_error(&bad, DATA_TRAIN, path, "vocab", "byte >= vocab_size");
    bad = gpt_job(DATA_TEXT, tmpdir, T, 256);
    expect_error(&bad, DATA_TRAIN, tmpdir, "directory", "a directory as text");
    bad = gpt_job(DATA_TEXT, "", T, 256);
    expect_error(&bad, DATA_TRAIN, "test.yaml", "train_path", "no train_path");
    bad = gpt_job(DATA_TEXT, path, T, 256);
    bad.model.kind = MODEL_VIT;
    bad.model.image_size = bad.model.channels = bad.model.n_classes = 1;
    expect_error(&bad, DATA_TRAIN, "test.yaml", "GPT", "text data with a ViT model");
}

/* ---- token shards ---- */

static int shard_token(long p) { return (int)((p * 31 + 7) % 1000); }

static void test_tokens(void)
{
    enum { T = 16, N0 = 300, N1 = 200, V = 1000 };
    uint16_t tok[N0 + N1];
    for (int p = 0; p < N0 + N1; p++)
        tok[p] = (uint16_t)shard_token(p);
    write_shard("shard_001.bin", tok + N0, N1, 20240520, 1, N1); /* written first: glob sorts */
    write_shard("shard_000.bin", tok, N0, 20240520, 1, N0);
    char pattern[300];
    snprintf(pattern, sizeof pattern, "%s/shard_*.bin", tmpdir);
    job_spec job = gpt_job(DATA_TOKENS, pattern, T, V);
    char err[512];
    data_loader *tr = data_open(&job, DATA_TRAIN, err, sizeof err);
    data_loader *va = data_open(&job, DATA_VAL, err, sizeof err);
    CHECK(tr && va, "tokens: a glob of two shards opens (%s)", tr && va ? "" : err);
    if (!tr || !va) {
        data_close(tr);
        data_close(va);
        return;
    }
    long n_train = 500 - 50;
    CHECK(data_count(tr) == n_train - T && data_count(va) == (50 - 1) / T,
          "tokens: counts over the concatenated shards (%ld, %ld)", data_count(tr), data_count(va));
    int x[B * T], y[B * T], ok = 1;
    for (long step = 0; step < 20; step++) {
        data_batch(tr, step, 0, B, x, y, NULL, NULL);
        for (int b = 0; b < B; b++) {
            /* the stream is an arithmetic sequence mod 1000, so x[0] names the offset */
            long o = -1;
            for (long p = 0; p + T + 1 <= n_train; p++)
                if (shard_token(p) == x[b * T]) o = p;
            for (int t = 0; o >= 0 && t < T; t++)
                ok &= x[b * T + t] == shard_token(o + t) && y[b * T + t] == shard_token(o + t + 1);
            ok &= o >= 0;
        }
    }
    CHECK(ok, "tokens: train samples are windows of the stream (some straddle the shards)");
    CHECK(gpt_slices_agree(tr, T, 2) && gpt_slices_agree(va, T, 2),
          "tokens: [0,8) == [0,3) + [3,8) in both splits");
    data_close(tr);
    data_close(va);
    check_determinism(&job, DATA_TRAIN, "tokens");

    /* validation over both shards in order: window 18 (tokens 288..304) straddles */
    job_spec own = job;
    snprintf(own.data.val_path, sizeof own.data.val_path, "%s", pattern);
    va = data_open(&own, DATA_VAL, err, sizeof err);
    ok = va && data_count(va) == (N0 + N1 - 1) / T;
    for (long step = 0; va && step < 4; step++) {
        data_batch(va, step, 0, B, x, y, NULL, NULL);
        for (int b = 0; b < B; b++) {
            long off = ((step * B + b) % data_count(va)) * T;
            for (int t = 0; t < T; t++)
                ok &= x[b * T + t] == shard_token(off + t) && y[b * T + t] == shard_token(off + t + 1);
        }
    }
    CHECK(ok, "tokens: validation windows walk both shards in order, across the seam");
    data_close(va);

    /* errors */
    job_spec bad = gpt_job(DATA_TOKENS, write_shard("magic.bin", tok, 40, 20240521, 1, 40), T, V);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "wrong magic", "shard magic");
    bad = gpt_job(DATA_TOKENS, write_shard("version.bin", tok, 40, 20240520, 2, 40), T, V);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "version", "shard version");
    bad = gpt_job(DATA_TOKENS, write_shard("trunc.bin", tok, 40, 20240520, 1, 41), T, V);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "truncated", "shard shorter than its count");
    bad = gpt_job(DATA_TOKENS, write_shard("long.bin", tok, 40, 20240520, 1, 39), T, V);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "longer", "shard longer than its count");
    int32_t cut[25] = {20240520, 1, 40}; /* a header cut at 100 bytes */
    bad = gpt_job(DATA_TOKENS, write_file("header.bin", cut, sizeof cut), T, V);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "truncated", "shard shorter than the header");
    bad = gpt_job(DATA_TOKENS, write_file("notshard.bin", tok, 100), T, V);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "wrong magic", "a short file that is no shard");
    bad = gpt_job(DATA_TOKENS, write_file("empty.bin", "", 0), T, V);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "empty", "empty shard");
    bad = gpt_job(DATA_TOKENS, write_shard("zero.bin", tok, 0, 20240520, 1, 0), T, V);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "no tokens", "shard of 0 tokens");
    bad = gpt_job(DATA_TOKENS, write_shard("few.bin", tok, T, 20240520, 1, T), T, V);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "too short", "shard shorter than a sequence");
    bad = gpt_job(DATA_TOKENS, tmpdir, T, V);
    expect_error(&bad, DATA_TRAIN, tmpdir, "directory", "a directory as a shard");
    char none[300];
    snprintf(none, sizeof none, "%s/nothing_*.bin", tmpdir);
    bad = gpt_job(DATA_TOKENS, none, T, V);
    expect_error(&bad, DATA_TRAIN, none, "No such file", "glob that matches nothing");
}

/* ---- IDX ---- */

static int recover_index(float v) /* from pixel 0, normalised */
{
    return (int)lroundf((v * 0.3530f + 0.2860f) * 255.0f) / 5;
}

static void test_idx(void)
{
    enum { NPIX = IDX_S * IDX_S };
    static unsigned char img[16 + IDX_N * NPIX], lab[8 + IDX_N];
    size_t img_len = idx_images_bytes(img, 0x00000803, IDX_N, IDX_S, IDX_S);
    size_t lab_len = idx_labels_bytes(lab, IDX_N, IDX_CLASSES);
    const char *img_plain = write_file("plain-images-idx3-ubyte", img, img_len);
    const char *lab_plain = write_file("plain-labels-idx1-ubyte", lab, lab_len);
    const char *img_gz = write_gz("gz-images-idx3-ubyte.gz", img, img_len);
    const char *lab_gz = write_gz("gz-labels-idx1-ubyte.gz", lab, lab_len);
    char err[512];

    /* values: plain and gzip give the same, pixels normalised, labels i % 3 */
    job_spec plain = vit_job(DATA_IDX, img_plain, lab_plain, IDX_S, IDX_CLASSES);
    job_spec gz = vit_job(DATA_IDX, img_gz, "", IDX_S, IDX_CLASSES); /* labels derived */
    data_loader *dp = data_open(&plain, DATA_TRAIN, err, sizeof err);
    data_loader *dg = data_open(&gz, DATA_TRAIN, err, sizeof err);
    CHECK(dp && dg, "idx: plain and gzip open, gzip labels derived from the images' name (%s)",
          dp && dg ? "" : err);
    if (!dp || !dg) {
        data_close(dp);
        data_close(dg);
        return;
    }
    CHECK(data_count(dp) == IDX_N - IDX_N / 10, "idx: training holds out the last 10%% (%ld)",
          data_count(dp));
    float xp[B * NPIX], xg[B * NPIX];
    int lp[B], lg[B], ok = 1;
    data_batch(dp, 1, 0, B, NULL, NULL, xp, lp);
    data_batch(dg, 1, 0, B, NULL, NULL, xg, lg);
    CHECK(!memcmp(xp, xg, sizeof xp) && !memcmp(lp, lg, sizeof lp), "idx: gzip == plain");
    for (int b = 0; b < B; b++) {
        int i = recover_index(xp[b * NPIX]);
        ok &= i < data_count(dp) && lp[b] == i % IDX_CLASSES;
        for (int p = 0; p < NPIX; p++)
            ok &= fabsf(xp[b * NPIX + p] - (((5 * i + p) % 256) / 255.0f - 0.2860f) / 0.3530f) < 1e-5f;
    }
    CHECK(ok, "idx: pixels are (x/255 - 0.2860)/0.3530 of a training image, labels match");
    CHECK(vit_slices_agree(dp, NPIX, 4), "idx: [0,8) == [0,3) + [3,8)");
    data_close(dp);
    data_close(dg);
    check_determinism(&plain, DATA_TRAIN, "idx");

    /* held-out validation: the last images, in order, wrapping */
    data_loader *va = data_open(&plain, DATA_VAL, err, sizeof err);
    ok = va && data_count(va) == IDX_N / 10;
    for (long step = 0; va && step < 2; step++) {
        data_batch(va, step, 0, B, NULL, NULL, xp, lp);
        for (int b = 0; b < B; b++)
            ok &= recover_index(xp[b * NPIX]) ==
                  IDX_N - IDX_N / 10 + (int)((step * B + b) % (IDX_N / 10));
    }
    CHECK(ok, "idx: validation walks the held-out images in order, wrapping");
    CHECK(va && vit_slices_agree(va, NPIX, 1), "idx: validation [0,8) == [0,3) + [3,8)");
    data_close(va);

    /* epochs: with val_path the training file is whole; positions g of epoch e
     * are a permutation of the 37 images, and the next epoch reshuffles */
    job_spec whole = plain;
    snprintf(whole.data.val_path, sizeof whole.data.val_path, "%s", img_gz);
    snprintf(whole.data.val_labels, sizeof whole.data.val_labels, "%s", lab_gz);
    whole.train.global_batch = 5; /* does not divide 37: batches straddle epochs */
    data_loader *tr = data_open(&whole, DATA_TRAIN, err, sizeof err);
    int order[3 * IDX_N];
    ok = tr && data_count(tr) == IDX_N;
    for (long step = 0; tr && step * 5 < 3 * IDX_N; step++) {
        data_batch(tr, step, 0, 5, NULL, NULL, xp, lp);
        for (int b = 0; b < 5 && step * 5 + b < 3 * IDX_N; b++)
            order[step * 5 + b] = recover_index(xp[b * NPIX]);
    }
    int cover = ok, reshuffled = 0;
    for (int e = 0; ok && e < 3; e++) {
        int seen[IDX_N] = {0};
        for (int g = 0; g < IDX_N; g++)
            cover &= order[e * IDX_N + g] >= 0 && order[e * IDX_N + g] < IDX_N &&
                     seen[order[e * IDX_N + g]]++ == 0;
        if (e > 0)
            reshuffled |= memcmp(order, order + e * IDX_N, sizeof(int) * IDX_N) != 0;
    }
    CHECK(cover, "idx: every image exactly once in each of 3 epochs (batch 5, 37 images)");
    CHECK(reshuffled, "idx: each epoch has its own order");
    data_close(tr);

    /* errors */
    const char *mismatch = img_plain;
    job_spec bad = vit_job(DATA_IDX, fixture("none-images-idx3-ubyte"), lab_plain, IDX_S, IDX_CLASSES);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "No such file", "missing IDX images");
    bad = vit_job(DATA_IDX, img_plain, fixture("nolabels"), IDX_S, IDX_CLASSES);
    expect_error(&bad, DATA_TRAIN, bad.data.train_labels, "No such file", "missing IDX labels");
    bad = vit_job(DATA_IDX, tmpdir, lab_plain, IDX_S, IDX_CLASSES);
    expect_error(&bad, DATA_TRAIN, tmpdir, "directory", "a directory as IDX images");
    bad = vit_job(DATA_IDX, write_file("empty-images", "", 0), lab_plain, IDX_S, IDX_CLASSES);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "empty", "empty IDX file");
    bad = vit_job(DATA_IDX, lab_plain, lab_plain, IDX_S, IDX_CLASSES);
    expect_error(&bad, DATA_TRAIN, lab_plain, "wrong magic", "labels given as images");
    bad = vit_job(DATA_IDX, img_plain, img_plain, IDX_S, IDX_CLASSES);
    expect_error(&bad, DATA_TRAIN, img_plain, "wrong magic", "images given as labels");
    bad = vit_job(DATA_IDX, write_file("hdr-images", img, 10), lab_plain, IDX_S, IDX_CLASSES);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "truncated", "IDX header cut short");
    bad = vit_job(DATA_IDX, write_file("cut-images", img, img_len - 5), lab_plain, IDX_S, IDX_CLASSES);
    expect_error(&bad, DATA_TRAIN, bad.data.train_path, "truncated", "plain IDX pixels cut short");
    {
        /* a gzip stream cut in the middle */
        FILE *f = fopen(img_gz, "rb");
        unsigned char buf[4096];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        bad = vit_job(DATA_IDX, write_file("cut-images.gz", buf, n / 2), lab_plain, IDX_S, IDX_CLASSES);
        expect_error(&bad, DATA_TRAIN, bad.data.train_path, "truncated", "gzip IDX cut short");
        /* a gzip header followed by garbage */
        memset(buf + 10, 0xff, 64);
        bad = vit_job(DATA_IDX, write_file("bad-images.gz", buf, 74), lab_plain, IDX_S, IDX_CLASSES);
        expect_error(&bad, DATA_TRAIN, bad.data.train_path, "corrupt", "corrupt gzip IDX");
    }
    bad = vit_job(DATA_IDX, img_plain, lab_plain, IDX_S + 1, IDX_CLASSES);
    expect_error(&bad, DATA_TRAIN, img_plain, "image size", "image size != model.image_size");
    bad = vit_job(DATA_IDX, img_plain, lab_plain, IDX_S, IDX_CLASSES);
    bad.model.channels = 3;
    expect_error(&bad, DATA_TRAIN, img_plain, "channels", "3-channel model on IDX");
    bad = vit_job(DATA_IDX, img_plain, lab_plain, IDX_S, 2);
    expect_error(&bad, DATA_TRAIN, lab_plain, "label 2 at index 2", "label >= n_classes");
    {
        static unsigned char fewer[8 + IDX_N];
        size_t n = idx_labels_bytes(fewer, IDX_N - 1, IDX_CLASSES);
        bad = vit_job(DATA_IDX, mismatch, write_file("few-labels", fewer, n), IDX_S, IDX_CLASSES);
        expect_error(&bad, DATA_TRAIN, bad.data.train_labels, "count", "labels count != images");
    }
    bad = vit_job(DATA_IDX, img_plain, "", IDX_S, IDX_CLASSES);
    snprintf(bad.data.train_path, sizeof bad.data.train_path, "%s/cut-images", tmpdir);
    expect_error(&bad, DATA_TRAIN, "train_labels", "not set", "no labels and none derivable");
    {
        static unsigned char longer[16 + (IDX_N + 1) * NPIX];
        size_t n = idx_images_bytes(longer, 0x00000803, IDX_N + 1, IDX_S, IDX_S);
        put_be32(longer + 4, IDX_N); /* the header undercounts */
        bad = vit_job(DATA_IDX, write_file("long-images", longer, n), lab_plain, IDX_S, IDX_CLASSES);
        expect_error(&bad, DATA_TRAIN, bad.data.train_path, "longer", "IDX longer than its header");
    }
    bad = vit_job(DATA_IDX, img_plain, lab_plain, IDX_S, IDX_CLASSES);
    bad.model.kind = MODEL_GPT;
    bad.model.seq_len = bad.model.vocab_size = 8;
    expect_error(&bad, DATA_TRAIN, "test.yaml", "ViT", "IDX data with a GPT model");
}

/* ---- synthetic ---- */

static void test_synthetic_gpt(void)
{
    enum { T = 64, V = 64, STEPS = 8 };
    job_spec job = gpt_job(DATA_SYNTHETIC, "", T, V);
    job.data.synthetic_size = 100000;
    char err[512];
    data_loader *tr = data_open(&job, DATA_TRAIN, err, sizeof err);
    data_loader *va = data_open(&job, DATA_VAL, err, sizeof err);
    CHECK(tr && va, "synthetic GPT: opens (%s)", tr && va ? "" : err);
    if (!tr || !va) {
        data_close(tr);
        data_close(va);
        return;
    }
    CHECK(data_count(tr) == 90000 - T && data_count(va) == (10000 - 1) / T,
          "synthetic GPT: synthetic_size tokens split 90/10 (%ld, %ld)", data_count(tr),
          data_count(va));
    /* learnable: the next token is mostly a function of the previous one */
    static int next_count[V][V];
    int x[B * T], y[B * T], in_vocab = 1;
    long pairs = 0;
    for (long step = 0; step < STEPS; step++) {
        data_batch(tr, step, 0, B, x, y, NULL, NULL);
        for (int i = 0; i < B * T; i++) {
            in_vocab &= x[i] >= 0 && x[i] < V && y[i] >= 0 && y[i] < V;
            if (in_vocab) next_count[x[i]][y[i]]++, pairs++;
        }
    }
    long predicted = 0;
    for (int a = 0; a < V; a++) {
        int best = 0;
        for (int b = 0; b < V; b++)
            if (next_count[a][b] > best) best = next_count[a][b];
        predicted += best;
    }
    CHECK(in_vocab, "synthetic GPT: tokens in [0, vocab_size)");
    CHECK(predicted > 0.8 * pairs, "synthetic GPT: a bigram table predicts %.0f%% of next tokens",
          100.0 * predicted / pairs);
    CHECK(gpt_slices_agree(tr, T, 7) && gpt_slices_agree(va, T, 7),
          "synthetic GPT: [0,8) == [0,3) + [3,8) in both splits");
    data_close(tr);
    data_close(va);
    check_determinism(&job, DATA_TRAIN, "synthetic GPT");
    job_spec other = job;
    other.train.seed = 99;
    data_loader *a = data_open(&job, DATA_TRAIN, err, sizeof err);
    data_loader *b = data_open(&other, DATA_TRAIN, err, sizeof err);
    int xa[B * T], xb[B * T];
    data_batch(a, 0, 0, B, xa, NULL, NULL, NULL);
    data_batch(b, 0, 0, B, xb, NULL, NULL, NULL);
    CHECK(memcmp(xa, xb, sizeof xa) != 0, "synthetic GPT: another seed, another batch");
    data_close(a);
    data_close(b);
    job_spec bad = job;
    bad.data.synthetic_size = 100;
    expect_error(&bad, DATA_VAL, "synthetic", "too short", "synthetic_size smaller than a sequence");
}

static void test_synthetic_vit(void)
{
    enum { S = 8, C = 3, K = 4, NPIX = C * S * S };
    job_spec job = vit_job(DATA_SYNTHETIC, "", "", S, K);
    job.model.channels = C;
    job.data.synthetic_size = 500;
    char err[512];
    data_loader *tr = data_open(&job, DATA_TRAIN, err, sizeof err);
    data_loader *va = data_open(&job, DATA_VAL, err, sizeof err);
    CHECK(tr && va, "synthetic ViT: opens (%s)", tr && va ? "" : err);
    if (!tr || !va) {
        data_close(tr);
        data_close(va);
        return;
    }
    CHECK(data_count(tr) == 450 && data_count(va) == 50, "synthetic ViT: 500 images split 90/10");
    /* learnable: class centroids of 10 training batches classify validation */
    static float centroid[K][NPIX], x[B * NPIX];
    int n_class[K] = {0}, l[B], labels_ok = 1;
    for (long step = 0; step < 10; step++) {
        data_batch(tr, step, 0, B, NULL, NULL, x, l);
        for (int b = 0; b < B; b++) {
            labels_ok &= l[b] >= 0 && l[b] < K;
            if (!labels_ok) continue;
            n_class[l[b]]++;
            for (int p = 0; p < NPIX; p++) centroid[l[b]][p] += x[b * NPIX + p];
        }
    }
    CHECK(labels_ok, "synthetic ViT: labels in [0, n_classes)");
    int right = 0, total = 0;
    for (int k = 0; k < K; k++)
        for (int p = 0; p < NPIX && n_class[k]; p++) centroid[k][p] /= n_class[k];
    for (long step = 0; labels_ok && step < 5; step++) {
        data_batch(va, step, 0, B, NULL, NULL, x, l);
        for (int b = 0; b < B; b++, total++) {
            int best = 0;
            double best_d = INFINITY;
            for (int k = 0; k < K; k++) {
                double dist = 0;
                for (int p = 0; p < NPIX; p++) {
                    double diff = x[b * NPIX + p] - centroid[k][p];
                    dist += diff * diff;
                }
                if (dist < best_d) best_d = dist, best = k;
            }
            right += best == l[b];
        }
    }
    CHECK(right >= 0.9 * total, "synthetic ViT: nearest class centroid is right on %d/%d", right, total);
    CHECK(vit_slices_agree(tr, NPIX, 3) && vit_slices_agree(va, NPIX, 3),
          "synthetic ViT: [0,8) == [0,3) + [3,8) in both splits");
    data_close(tr);
    data_close(va);
    check_determinism(&job, DATA_TRAIN, "synthetic ViT");
    check_determinism(&job, DATA_VAL, "synthetic ViT validation");
}

/* ---- the real Fashion-MNIST, when Debian's dataset-fashion-mnist is there ---- */

static void test_fashion_mnist(void)
{
    const char *dir = "/usr/share/datasets/fashion-mnist";
    char images[256], labels[256];
    snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", dir);
    if (access(images, R_OK) != 0) {
        printf("ok - skipped Fashion-MNIST (%s not installed: apt-get install dataset-fashion-mnist)\n",
               dir);
        return;
    }
    snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte.gz", dir);
    job_spec job = vit_job(DATA_IDX, images, labels, 28, 10);
    snprintf(job.data.val_path, sizeof job.data.val_path, "%s/t10k-images-idx3-ubyte.gz", dir);
    job.train.global_batch = 512;
    char err[512];
    data_loader *tr = data_open(&job, DATA_TRAIN, err, sizeof err);
    data_loader *va = data_open(&job, DATA_VAL, err, sizeof err);
    CHECK(tr && va && data_count(tr) == 60000 && data_count(va) == 10000,
          "Fashion-MNIST: 60000 training and 10000 test images (%s)", tr && va ? "" : err);
    if (tr && va) {
        float *x = malloc(sizeof(float) * 512 * 784);
        int l[512], classes[10] = {0}, n_classes = 0;
        double sum = 0, sq = 0;
        data_batch(tr, 0, 0, 512, NULL, NULL, x, l);
        for (int i = 0; i < 512 * 784; i++) sum += x[i], sq += (double)x[i] * x[i];
        for (int i = 0; i < 512; i++) n_classes += classes[l[i]]++ == 0;
        double mean = sum / (512 * 784), sd = sqrt(sq / (512 * 784) - mean * mean);
        CHECK(fabs(mean) < 0.1 && sd > 0.85 && sd < 1.15,
              "Fashion-MNIST: normalised training pixels have mean %.3f, std %.3f", mean, sd);
        CHECK(n_classes == 10, "Fashion-MNIST: a batch of 512 has all 10 classes");
        free(x);
    }
    data_close(tr);
    data_close(va);
}

/* ---- data that changes under the run (data_fault: sticky per process, so
 * each case runs in a child of its own) ---- */

/* Runs fn in a child; its checks print there, its failures count here. */
static void in_child(void (*fn)(void), const char *what)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        check_failed_count = 0; /* the child's own */
        fn();
        fflush(stdout);
        _exit(check_failed_count ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: its child's checks passed", what);
}

enum { CT = 8, CN = 400, CV = 1000 };

/* A shard of CN tokens t_p = p % 997 (all < CV). */
static const char *changing_shard(const char *name)
{
    uint16_t tok[CN];
    for (int p = 0; p < CN; p++) tok[p] = (uint16_t)(p % 997);
    return write_shard(name, tok, CN, 20240520, 1, CN);
}

/* The first training step whose batch faults, or -1 in 200 steps. */
static long first_faulting_step(data_loader *d, int *x, int *y, char *msg, size_t n)
{
    for (long step = 0; step < 200; step++) {
        data_batch(d, step, 0, B, x, y, NULL, NULL);
        if (data_fault(msg, n)) return step;
    }
    return -1;
}

static void case_id_out_of_range(void)
{
    /* token 123 is out of the vocabulary: opening reads headers only, the batch
     * that reaches it says where, and its sample is one the loss ignores */
    uint16_t tok[CN];
    for (int p = 0; p < CN; p++) tok[p] = (uint16_t)(p % 997);
    tok[123] = 1500;
    const char *path = write_shard("bad_id.bin", tok, CN, 20240520, 1, CN);
    job_spec job = gpt_job(DATA_TOKENS, path, CT, CV);
    char err[512], msg[1200] = "";
    data_loader *d = data_open(&job, DATA_TRAIN, err, sizeof err);
    CHECK(d != NULL, "ids: a shard with an id past the vocabulary opens (headers only) (%s)", d ? "" : err);
    if (!d) return;
    int x[B * CT], y[B * CT];
    long step = first_faulting_step(d, x, y, msg, sizeof msg);
    char want[600];
    snprintf(want, sizeof want, "%s: token id 1500 at token 123 of the file is out of the model's vocabulary "
                                "(model.vocab_size 1000)", path);
    CHECK(step >= 0 && !strcmp(msg, want), "ids: the batch of step %ld reaching it faults: \"%s\"", step, msg);
    int in_vocab = 1, ignored = 0;
    for (int i = 0; i < B * CT; i++) in_vocab &= x[i] >= 0 && x[i] < CV && y[i] < CV, ignored += y[i] == -1;
    CHECK(in_vocab && ignored >= CT, "ids: the batch holds no id past the vocabulary (%d targets ignored)", ignored);
    data_close(d);
}

static void case_rewritten_in_place(void)
{
    const char *path = changing_shard("rewritten.bin");
    /* made long ago: the rewrite's mtime differs whatever the clock's granularity */
    struct timespec old[2] = {{0, UTIME_OMIT}, {946684800, 0}};
    utimensat(AT_FDCWD, path, old, 0);
    job_spec job = gpt_job(DATA_TOKENS, path, CT, CV);
    char err[512], msg[1200] = "";
    data_loader *d = data_open(&job, DATA_TRAIN, err, sizeof err);
    if (!d) { CHECK(0, "rewrite: open (%s)", err); return; }
    int x[B * CT], y[B * CT];
    data_batch(d, 0, 0, B, x, y, NULL, NULL);
    CHECK(!data_fault(msg, sizeof msg), "rewrite: no fault before the file changes");
    /* the same size, the same inode, other (valid) tokens */
    FILE *f = fopen(path, "r+b");
    uint16_t seven[CN];
    for (int p = 0; p < CN; p++) seven[p] = 7;
    int wrote = f && fseek(f, 1024, SEEK_SET) == 0 && fwrite(seven, 2, CN, f) == CN;
    if (f) fclose(f);
    CHECK(wrote && data_fault(msg, sizeof msg) && strstr(msg, path) && strstr(msg, "rewritten in place") &&
              !strchr(msg, '\n'),
          "rewrite: a same-size rewrite in place is seen at the next check: \"%s\"", msg);
    data_close(d);
}

static void case_truncated(void)
{
    const char *path = changing_shard("truncated.bin");
    job_spec job = gpt_job(DATA_TOKENS, path, CT, CV);
    char err[512], msg[1200] = "";
    data_loader *d = data_open(&job, DATA_TRAIN, err, sizeof err);
    if (!d) { CHECK(0, "truncate: open (%s)", err); return; }
    int trunc_ok = truncate(path, 1024 + 2 * 10) == 0;
    char want[600];
    snprintf(want, sizeof want, "%s: the data file changed while the run read it: %d bytes when opened, %d now", path,
             1024 + 2 * CN, 1024 + 2 * 10);
    CHECK(trunc_ok && data_fault(msg, sizeof msg) && !strncmp(msg, want, strlen(want)),
          "truncate: seen at the next check even before a read faults: \"%s\"", msg);
    data_close(d);
}

static void case_replaced(void)
{
    /* a new file renamed over the old name: the run keeps the file it opened */
    const char *path = changing_shard("replaced.bin");
    job_spec job = gpt_job(DATA_TOKENS, path, CT, CV);
    char err[512], msg[1200] = "";
    data_loader *d = data_open(&job, DATA_TRAIN, err, sizeof err);
    if (!d) { CHECK(0, "replace: open (%s)", err); return; }
    int x0[B * CT], y0[B * CT], x1[B * CT], y1[B * CT];
    data_batch(d, 3, 0, B, x0, y0, NULL, NULL);
    uint16_t other[CN];
    for (int p = 0; p < CN; p++) other[p] = 5;
    const char *tmp = write_shard("replaced.bin.new", other, CN, 20240520, 1, CN);
    int renamed = rename(tmp, path) == 0;
    data_batch(d, 3, 0, B, x1, y1, NULL, NULL);
    CHECK(renamed && !data_fault(msg, sizeof msg) && !memcmp(x0, x1, sizeof x0) && !memcmp(y0, y1, sizeof y0),
          "replace: a file renamed over it is no fault, and the run reads what it opened (%s)", msg);
    data_close(d);
}

static void test_changes(void)
{
    in_child(case_id_out_of_range, "ids");
    in_child(case_rewritten_in_place, "rewrite");
    in_child(case_truncated, "truncate");
    in_child(case_replaced, "replace");
}

/* ---- instruction data (data.kind sft): SFT shards packed into windows ---- */

enum { ST = 8, SV = 1000 };

/* Sample s's token t: unique over the fixtures' samples, below SV. */
static int sft_id(int s, int t) { return (s * 37 + t * 5 + 1) % SV; }
/* Whether the loss counts token t of sample s (never the first). */
static int sft_mask(int s, int t) { return t > 0 && (t >= 2 || s % 3 == 0); }

/* An SFT shard (man dtrun-job(5) SFT SHARDS) of the samples' lengths, ids
 * sft_id (bad_at >= 0: that token's id replaced by SV + 5) and masks
 * sft_mask. */
static const char *write_sft(const char *name, const int *lens, int S, int bad_at)
{
    long N = 0;
    for (int s = 0; s < S; s++) N += lens[s];
    size_t bytes = 1024 + (size_t)N * 3 + (size_t)(S + 1) * 8;
    unsigned char *f = calloc(bytes, 1);
    int32_t head[5] = {20261128, 1, (int32_t)N, S, 2};
    memcpy(f, head, sizeof head);
    uint16_t *ids = (uint16_t *)(void *)(f + 1024);
    unsigned char *mask = f + 1024 + 2 * N;
    int64_t at = 0;
    for (int s = 0; s < S; s++) {
        memcpy(mask + N + 8 * (size_t)s, &at, 8);
        for (int t = 0; t < lens[s]; t++, at++) {
            ids[at] = (uint16_t)(at == bad_at ? SV + 5 : sft_id(s, t));
            mask[at] = (unsigned char)sft_mask(s, t);
        }
    }
    memcpy(mask + N + 8 * (size_t)S, &at, 8);
    const char *path = write_file(name, f, bytes);
    free(f);
    return path;
}

/* Packed by hand (first fit into windows of ST): window w's rows. */
typedef struct {
    int tok[ST], tgt[ST], pos[ST], seg[ST];
} sft_window_want;

static int sft_pack_by_hand(const int *lens, int S, sft_window_want *out)
{
    int n = 0, used = ST, id = 0;
    for (int s = 0; s < S; s++) {
        int L = lens[s] < ST ? lens[s] : ST;
        if (used + L > ST) {
            if (n) /* close the last one: padding */
                for (int t = used; t < ST; t++)
                    out[n - 1].tok[t] = 0, out[n - 1].tgt[t] = -1, out[n - 1].pos[t] = t - used, out[n - 1].seg[t] = id;
            n++, used = 0, id = 0;
        }
        for (int t = 0; t < L; t++) {
            sft_window_want *w = &out[n - 1];
            w->tok[used + t] = sft_id(s, t);
            w->tgt[used + t] = t + 1 < L && sft_mask(s, t + 1) ? sft_id(s, t + 1) : -1;
            w->pos[used + t] = t;
            w->seg[used + t] = id;
        }
        used += L, id++;
    }
    for (int t = used; t < ST; t++)
        out[n - 1].tok[t] = 0, out[n - 1].tgt[t] = -1, out[n - 1].pos[t] = t - used, out[n - 1].seg[t] = id;
    return n;
}

static job_spec sft_job(const char *train, const char *val, int truncate)
{
    job_spec j = gpt_job(DATA_SFT, train, ST, SV);
    j.model.packed = 1;
    j.data.long_samples = truncate ? LONG_TRUNCATE : LONG_REFUSE;
    if (val) snprintf(j.data.val_path, sizeof j.data.val_path, "%s", val);
    return j;
}

static void test_sft(void)
{
    /* 3+4 | 2 | 8 | 1+5 | 9 (cut to 8) | 2+2+3 | 6 */
    static const int lens[] = {3, 4, 2, 8, 1, 5, 9, 2, 2, 3, 6};
    int S = (int)(sizeof lens / sizeof *lens);
    const char *path = write_sft("sft.bin", lens, S, -1);
    char err[1024] = "";

    job_spec refuse = sft_job(path, path, 0);
    expect_error(&refuse, DATA_TRAIN, path, "sample 6 has 9 tokens, more than model.seq_len 8",
                 "sft: a sample longer than seq_len (data.long_samples: refuse)");

    job_spec job = sft_job(path, path, 1);
    sft_window_want want_w[16];
    int nw = sft_pack_by_hand(lens, S, want_w);
    data_loader *v = data_open(&job, DATA_VAL, err, sizeof err);
    CHECK(v && data_packed(v) && data_count(v) == nw && data_span(v) == S,
          "sft: %d samples packed first fit into %d windows of %d (%s)", S, nw, ST, v ? "" : err);
    if (v) {
        /* validation walks the windows in order: batch 0 holds windows 0 .. B-1 (wrapping) */
        int x[B * ST], y[B * ST], pos[B * ST], seg[B * ST], ok = 1;
        long count = 0;
        data_batch(v, 0, 0, B, x, y, NULL, NULL);
        data_batch_docs(v, 0, 0, B, pos, seg);
        for (int b = 0; b < B; b++) {
            const sft_window_want *w = &want_w[b % nw];
            ok &= !memcmp(x + b * ST, w->tok, sizeof w->tok) && !memcmp(y + b * ST, w->tgt, sizeof w->tgt) &&
                  !memcmp(pos + b * ST, w->pos, sizeof w->pos) && !memcmp(seg + b * ST, w->seg, sizeof w->seg);
            for (int t = 0; t < ST; t++) count += w->tgt[t] >= 0;
        }
        CHECK(ok, "sft: each window's tokens, targets (next token of the same sample when its mask counts it, "
                  "else -1), positions (0 at each sample) and segments are the packing's");
        CHECK(data_batch_targets(v, 0, 0, B) == count,
              "sft: data_batch_targets counts the batch's masked-in targets (%ld, want %ld)",
              data_batch_targets(v, 0, 0, B), count);
    }
    data_close(v);

    /* training: a permutation of the windows per epoch; slices agree */
    data_loader *d = data_open(&job, DATA_TRAIN, err, sizeof err);
    CHECK(d != NULL, "sft: the training split opens (%s)", d ? "" : err);
    if (d) {
        long n = data_count(d);
        int seen[16] = {0}, ok = 1;
        for (long g = 0; g < n; g++) { /* epoch 0: positions 0 .. n-1, one sample a call */
            int x[ST], y[ST], pos[ST], seg[ST];
            data_batch(d, g / B, (int)(g % B), 1, x, y, NULL, NULL);
            data_batch_docs(d, g / B, (int)(g % B), 1, pos, seg);
            int hit = -1;
            for (int w = 0; w < nw; w++)
                if (!memcmp(x, want_w[w].tok, sizeof x) && !memcmp(pos, want_w[w].pos, sizeof pos)) hit = w;
            ok &= hit >= 0;
            if (hit >= 0) seen[hit]++;
        }
        for (int w = 0; w < n; w++) ok &= seen[w] == 1;
        CHECK(ok, "sft: an epoch of training visits each of the split's %ld windows once", n);
        int fx[B * ST], px[B * ST], fs[B * ST], ps[B * ST];
        data_batch_docs(d, 3, 0, B, fx, fs);
        data_batch_docs(d, 3, 0, 3, px, ps);
        data_batch_docs(d, 3, 3, B - 3, px + 3 * ST, ps + 3 * ST);
        CHECK(!memcmp(fx, px, sizeof fx) && !memcmp(fs, ps, sizeof fs),
              "sft: a rank's slice of the batch has the whole batch's positions and segments");
    }
    data_close(d);
    check_determinism(&job, DATA_TRAIN, "sft");

    /* the last val_fraction of the samples is validation */
    job_spec split = sft_job(path, NULL, 1);
    split.data.val_fraction = 0.3;
    data_loader *tr = data_open(&split, DATA_TRAIN, err, sizeof err), *va = data_open(&split, DATA_VAL, err, sizeof err);
    CHECK(tr && va && data_span(tr) == S - 3 && data_span(va) == 3,
          "sft: val_fraction 0.3 of %d samples: training the first %d, validation the last 3", S, S - 3);
    data_close(tr);
    data_close(va);

    /* bad shards: one line naming the file */
    static const unsigned char junk[1100] = {1, 2, 3, 4};
    const char *bad = write_file("sft_junk.bin", junk, sizeof junk);
    job_spec jb = sft_job(bad, bad, 1);
    expect_error(&jb, DATA_TRAIN, bad, "wrong magic", "sft: not an SFT shard");
}

static const char *sft_bad_id_path;

static void case_sft_bad_id(void)
{
    job_spec job = sft_job(sft_bad_id_path, sft_bad_id_path, 1);
    char err[512], msg[1200] = "";
    data_loader *d = data_open(&job, DATA_VAL, err, sizeof err);
    CHECK(d != NULL, "sft ids: a shard with an id past the vocabulary opens (%s)", d ? "" : err);
    if (!d) return;
    int x[B * ST], y[B * ST];
    data_batch(d, 0, 0, B, x, y, NULL, NULL);
    char want[600];
    snprintf(want, sizeof want, "%s: token id %d at token 5 of the file is out of the model's vocabulary "
                                "(model.vocab_size %d)", sft_bad_id_path, SV + 5, SV);
    CHECK(data_fault(msg, sizeof msg) && !strcmp(msg, want), "sft ids: the batch reaching it faults: \"%s\"", msg);
    int ignored = 0;
    for (int i = 0; i < ST; i++) ignored += y[i] == -1 && x[i] == 0;
    CHECK(ignored == ST, "sft ids: its window becomes one the loss ignores");
    data_close(d);
}

static void test_sft_bad_id(void)
{
    static const int lens[] = {3, 4, 2};
    sft_bad_id_path = write_sft("sft_bad_id.bin", lens, 3, 5);
    in_child(case_sft_bad_id, "sft: an id past the vocabulary");
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_perm();
    test_text();
    test_tokens();
    test_idx();
    test_synthetic_gpt();
    test_synthetic_vit();
    test_fashion_mnist();
    test_changes();
    test_sft();
    test_sft_bad_id();
    remove_fixtures();
    CHECK_DONE();
}
