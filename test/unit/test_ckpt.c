/* test_ckpt.c — safetensors reader/writer, sharded checkpoints, resharding,
 * atomic commit, crash and disk-full safety, export.
 *
 * Tensors are filled with val(name, global index): any element that lands in
 * the wrong place after a save, a reshard or an export shows up as a mismatch.
 * Parameter specs come from the model's own pure functions (params.c), so the
 * names and splits are the real ones.
 *
 * `test_ckpt --enospc DIR` runs only the disk-full scenario in DIR (a tiny
 * tmpfs mounted by test/integration/ckpt_enospc.sh). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/ckpt/ckpt.h"
#include "runtime/ckpt/ckpt_internal.h"
#include "runtime/ckpt/ckpt_io.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/model/model.h"
#include "test/unit/check.h"

static char root[] = "/tmp/dtrun-ckpt-test.XXXXXX";
static char err[1024];

/* ---- small helpers ---- */

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void rm_rf(const char *p) { nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void write_file(const char *path, const void *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(buf, 1, n, f);
    fclose(f);
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int exists(const char *path) { return file_size(path) >= 0; }

static int count_tmp_files(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "find '%s' -name '*.tmp' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1) n = -1;
        pclose(p);
    }
    return n;
}

static float val(const char *name, uint64_t g, int kind)
{
    unsigned h = 0;
    for (const char *c = name; *c; c++) h = h * 31u + (unsigned char)*c;
    /* exact in float: < 2^15 integer part, 1/16 steps */
    return (float)(g % 4096) + (float)(h % 16) * 0.0625f + (float)kind * 8192.0f;
}

/* ---- safetensors ---- */

static void test_st_roundtrip(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/rt.safetensors", root);
    float a[6] = {1, 2, 3, 4, 5, 6.5f};
    uint16_t b[3] = {0x3f80, 0x4000, 0xc040}; /* bf16 1, 2, -3 */
    int64_t c[2] = {-5, (int64_t)1 << 40};
    uint8_t d[3] = {7, 8, 9};
    float s = 42.0f;
    int64_t sa[2] = {2, 3}, sb[1] = {3}, sc[1] = {2}, sd[1] = {3}, sz[2] = {0, 4};
    st_writer *w = st_writer_new();
    int ok = st_writer_add(w, "u8", ST_U8, 1, sd, d, err, sizeof err) == 0 && /* odd: F32 after it is unaligned */
             st_writer_add(w, "a", ST_F32, 2, sa, a, err, sizeof err) == 0 &&
             st_writer_add(w, "b.bf16", ST_BF16, 1, sb, b, err, sizeof err) == 0 &&
             st_writer_add(w, "c", ST_I64, 1, sc, c, err, sizeof err) == 0 &&
             st_writer_add(w, "scalar", ST_F32, 0, NULL, &s, err, sizeof err) == 0 &&
             st_writer_add(w, "empty", ST_F32, 2, sz, NULL, err, sizeof err) == 0;
    CHECK(ok, "writer accepts F32, BF16, I64, U8, scalar and empty tensors: %s", ok ? "" : err);
    CHECK(st_writer_add(w, "a", ST_F32, 2, sa, a, err, sizeof err) != 0 && strstr(err, "twice"),
          "writer refuses a duplicate name: %s", err);
    st_writer_set_metadata(w, "format", "pt");
    st_writer_set_metadata(w, "note", "héllo \"quoted\"");
    uint64_t want_size = st_writer_file_size(w);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = st_writer_write_fd(w, fd, path, NULL, err, sizeof err);
    close(fd);
    st_writer_free(w);
    CHECK(rc == 0 && (uint64_t)file_size(path) == want_size, "written file has the announced size %llu",
          (unsigned long long)want_size);

    FILE *f = fopen(path, "rb");
    unsigned char head[9] = {0};
    size_t got = f ? fread(head, 1, 9, f) : 0;
    if (f) fclose(f);
    uint64_t n;
    memcpy(&n, head, 8);
    CHECK(got == 9 && n % 8 == 0 && head[8] == '{', "header length %llu is 8-aligned and the JSON starts with '{'",
          (unsigned long long)n);

    st_reader *r;
    rc = st_reader_open(path, &r, err, sizeof err);
    CHECK(rc == 0, "reader opens the written file: %s", rc ? err : "");
    if (rc) return;
    CHECK(st_reader_count(r) == 6, "6 tensors read back");
    const st_tensor *t = st_reader_find(r, "a");
    float a2[6];
    if (t) memcpy(a2, t->data, sizeof a2);
    CHECK(t && t->dtype == ST_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
              memcmp(a2, a, sizeof a) == 0,
          "F32 [2,3] round-trips (stored unaligned after a 3-byte U8)");
    t = st_reader_find(r, "b.bf16");
    CHECK(t && t->dtype == ST_BF16 && t->nbytes == 6 && memcmp(t->data, b, 6) == 0, "BF16 round-trips");
    t = st_reader_find(r, "c");
    CHECK(t && t->dtype == ST_I64 && memcmp(t->data, c, 16) == 0, "I64 round-trips (2^40 exact)");
    t = st_reader_find(r, "u8");
    CHECK(t && t->dtype == ST_U8 && memcmp(t->data, d, 3) == 0, "U8 round-trips");
    t = st_reader_find(r, "scalar");
    CHECK(t && t->ndim == 0 && t->numel == 1 && memcmp(t->data, &s, 4) == 0, "0-dim scalar round-trips");
    t = st_reader_find(r, "empty");
    CHECK(t && t->numel == 0 && t->nbytes == 0, "empty [0,4] tensor round-trips");
    CHECK(st_reader_find(r, "nope") == NULL, "lookup of an absent name is NULL");
    const char *note = st_reader_metadata(r, "note");
    CHECK(note && strcmp(note, "héllo \"quoted\"") == 0 && st_reader_metadata(r, "format") &&
              st_reader_metadata(r, "absent") == NULL,
          "metadata round-trips (UTF-8, quotes)");
    st_reader_close(r);
}

/* A file from a header text and data bytes; header length n as given, or the
 * text's length padded to 8 when n == UINT64_MAX. */
static void craft(const char *path, uint64_t n, const char *header, const void *data, size_t dlen)
{
    size_t hl = strlen(header);
    size_t padded = (hl + 7) & ~(size_t)7;
    if (n == UINT64_MAX) n = padded;
    size_t total = 8 + padded + dlen;
    unsigned char *buf = calloc(total, 1);
    memcpy(buf, &n, 8);
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    if (dlen) memcpy(buf + 8 + padded, data, dlen);
    write_file(path, buf, total);
    free(buf);
}

static void expect_reject(const char *path, const char *what, const char *needle)
{
    st_reader *r = NULL;
    int rc = st_reader_open(path, &r, err, sizeof err);
    int named = strncmp(err, path, strlen(path)) == 0 && strchr(err, '\n') == NULL;
    CHECK(rc != 0 && r == NULL && named && strstr(err, needle), "rejects %s: %s", what, err);
    if (rc == 0) st_reader_close(r);
}

static void test_st_malformed(void)
{
    char p[512];
    snprintf(p, sizeof p, "%s/bad.safetensors", root);
    unsigned char data[64] = {0};
    const char *ok1 = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

    write_file(p, "", 0);
    expect_reject(p, "an empty file", "truncated");
    write_file(p, "\x10\0\0\0\0", 5);
    expect_reject(p, "a 5-byte file", "truncated");
    craft(p, UINT64_MAX - 1, ok1, data, 8);
    expect_reject(p, "a huge header length", "100 MB limit");
    craft(p, 4096, ok1, data, 8);
    expect_reject(p, "a header length beyond the file", "exceeds the file");
    craft(p, UINT64_MAX, "[1, 2]", data, 0);
    expect_reject(p, "a header that is not an object", "does not start with '{'");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],", data, 8);
    expect_reject(p, "truncated JSON", "not valid JSON");
    craft(p, UINT64_MAX, "{\"x\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    expect_reject(p, "invalid UTF-8 in a name", "invalid UTF-8");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    expect_reject(p, "an unknown dtype", "unknown dtype 'F33'");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", data, 8);
    expect_reject(p, "shape x dtype != byte range", "need 12 bytes");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 4);
    expect_reject(p, "offsets beyond the data (truncated file)", "out of range");
    craft(p, UINT64_MAX,
          "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
          data, 12);
    expect_reject(p, "overlapping tensors", "overlap");
    craft(p, UINT64_MAX,
          "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
          "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
          data, 12);
    expect_reject(p, "a hole between tensors", "belong to no tensor");
    craft(p, UINT64_MAX, ok1, data, 12);
    expect_reject(p, "trailing bytes after the last tensor", "after the last tensor");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", data, 8);
    expect_reject(p, "end before begin", "end before begin");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", data, 8);
    expect_reject(p, "a negative dimension", "shape[0]");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.5]}}", data, 8);
    expect_reject(p, "a fractional offset", "data_offsets");
    craft(p, UINT64_MAX,
          "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
          "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
          data, 8);
    expect_reject(p, "a duplicate tensor name", "appears twice");
    craft(p, UINT64_MAX, "{\"__metadata__\":{\"k\":5},\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
          data, 8);
    expect_reject(p, "a non-string metadata value", "__metadata__ 'k'");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"evil\":1}}", data, 8);
    expect_reject(p, "an unknown field", "unknown field 'evil'");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", data, 8);
    expect_reject(p, "a missing shape", "missing 'shape'");
    craft(p, UINT64_MAX,
          "{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}",
          data, 8);
    expect_reject(p, "a shape whose product overflows", "overflows");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", data, 8);
    expect_reject(p, "too many dims", "9 dims");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} {}", data, 8);
    expect_reject(p, "text after the JSON object", "text after");
    craft(p, UINT64_MAX, "{\"x\\u0000y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    expect_reject(p, "a NUL escape in a name", "\\u0000");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\x01\"data_offsets\":[0,8]}}", data, 8);
    expect_reject(p, "a raw control character", "control character");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"__metadata__\":[]}", data, 8);
    expect_reject(p, "__metadata__ that is not an object", "__metadata__ is not an object");
    craft(p, UINT64_MAX, "{\"x\\ny\":{\"dtype\":\"F3\\n\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    expect_reject(p, "an escaped newline in names (message stays one line)", "tensor 'x?y': unknown dtype 'F3?'");
    craft(p, UINT64_MAX, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"y\n\":1}", data, 8);
    expect_reject(p, "a raw newline inside a string", "control character");
    snprintf(p, sizeof p, "%s/no-such-file.safetensors", root);
    expect_reject(p, "a missing file", "cannot open");

    /* every single-byte corruption of a valid file: an error or a valid
     * file, never a crash (the ASan twin checks the reads) */
    snprintf(p, sizeof p, "%s/flip.safetensors", root);
    craft(p, UINT64_MAX,
          "{\"__metadata__\":{\"a\":\"b\"},\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"y\":{\"dtype\":\"U8\",\"shape\":[1,3],\"data_offsets\":[8,11]}}",
          data, 11);
    long len = file_size(p);
    if (len <= 0 || len > 4096) {
        CHECK(0, "crafted file for the bit flips");
        return;
    }
    unsigned char *orig = malloc((size_t)len), *buf = malloc((size_t)len);
    FILE *f = fopen(p, "rb");
    size_t got = f ? fread(orig, 1, (size_t)len, f) : 0;
    if (f) fclose(f);
    int crashes = 0, accepted = 0, rejected = 0;
    for (long i = 0; i < len && got == (size_t)len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(buf, orig, (size_t)len);
            buf[i] ^= (unsigned char)(1u << bit);
            st_reader *r;
            if (st_reader_open_mem(buf, (size_t)len, "mem", &r, err, sizeof err) == 0) {
                accepted++;
                for (int k = 0; k < st_reader_count(r); k++)
                    crashes += st_reader_tensor(r, k)->nbytes > (size_t)len;
                st_reader_close(r);
            } else {
                rejected++;
            }
        }
    }
    CHECK(crashes == 0 && rejected > accepted, "all %ld single-bit flips: %d rejected, %d accepted, all in bounds",
          len * 8, rejected, accepted);
    free(orig);
    free(buf);
}

/* ---- placement math against the model's own ---- */

static void test_place_matches_model(void)
{
    job_model jm;
    memset(&jm, 0, sizeof jm);
    jm.kind = MODEL_GPT;
    jm.n_layer = 1;
    jm.n_head = 4;
    jm.d_model = 8;
    jm.d_ff = 20;
    jm.vocab_size = 13;
    jm.seq_len = 5;
    int bad = 0, checked = 0;
    for (int tp = 1; tp <= 4; tp++)
        for (int r = 0; r < tp; r++)
            for (int u = 0; u < model_n_units(&jm); u++)
                for (int i = 0; i < model_unit_param_count(&jm, u); i++) {
                    param_spec s;
                    model_unit_param_spec(&jm, u, i, r, tp, &s);
                    ckpt_place p;
                    ckpt_place_of_param(&s, r, tp, 0, s.local_numel, &p);
                    char why[128];
                    bad += ckpt_place_check(&p, why, sizeof why) != 0;
                    bad += ckpt_place_local_numel(&p) != s.local_numel;
                    for (size_t k = 0; k < s.local_numel; k++, checked++)
                        bad += ckpt_place_global_index(&p, k) != param_global_index(&s, r, tp, k);
                }
    CHECK(bad == 0 && checked > 1000, "placement = param_global_index for rows (qkv groups), cols, none, tp 1..4, uneven vocab (%d elements)",
          checked);
}

/* A GPT whose blocks are MoE (4 experts of 6, top 2, a shared expert). */
static job_model tiny_moe(void)
{
    job_model jm;
    memset(&jm, 0, sizeof jm);
    jm.kind = MODEL_GPT;
    jm.n_layer = 2;
    jm.n_head = 2;
    jm.d_model = 8;
    jm.d_ff = 16;
    jm.vocab_size = 13;
    jm.seq_len = 6;
    jm.moe = (job_moe){.experts = 4, .top_k = 2, .d_ff_expert = 6, .shared_experts = 1, .every = 1};
    return jm;
}

/* Expert parallelism: an ep rank's experts are its block of rows, and the
 * placement says so (global expert ids whatever ep wrote them). */
static void test_place_matches_experts(void)
{
    job_model jm = tiny_moe();
    int bad = 0, checked = 0, experts = 0;
    for (int ep = 1; ep <= 4; ep *= 2)
        for (int r = 0; r < ep; r++)
            for (int i = 0; i < model_unit_param_count(&jm, 1); i++) {
                param_spec s;
                model_unit_param_spec_ep(&jm, 1, i, 0, 1, r, ep, &s);
                experts += param_is_expert(&s);
                ckpt_place p;
                ckpt_place_of_param(&s, 0, 1, 0, s.local_numel, &p);
                char why[128];
                bad += ckpt_place_check(&p, why, sizeof why) != 0;
                bad += ckpt_place_local_numel(&p) != s.local_numel;
                for (size_t k = 0; k < s.local_numel; k++, checked++) {
                    size_t g = param_global_index(&s, 0, 1, k);
                    bad += ckpt_place_global_index(&p, k) != g;
                    /* expert e of ep rank r is global expert r * 4 / ep + e: its rows */
                    if (param_is_expert(&s)) bad += g / ((size_t)s.shape[0] / 4 * (size_t)s.shape[1]) !=
                                                    (size_t)(r * 4 / ep) + k / (s.local_numel / (size_t)(4 / ep));
                }
            }
    CHECK(bad == 0 && experts == 2 * (2 + 4) && checked > 1000,
          "expert tensors under ep 2 and 4: the placement is param_global_index, expert e of ep rank r is global "
          "expert r E / ep + e (%d elements)", checked);
}

/* ---- a hand-made 2-rank checkpoint: rows split and flat slices ---- */

static ckpt_meta meta_of(long step, int dp, int tp, int world, const char *mode, const job_model *jm)
{
    static const double loss[3] = {3.5, 3.25, 3.0};
    ckpt_meta m = {0};
    m.step = step;
    m.seed = 18446744073709551557ull; /* > 2^53: must survive exactly */
    m.dp = dp;
    m.tp = tp;
    m.pp = 1;
    m.world = world;
    m.mode = mode;
    m.job_yaml = "model:\n  preset: gpt-tiny\n";
    m.model = jm;
    m.loss_tail = loss;
    m.n_loss = 3;
    return m;
}

/* Expert parallelism x tp (ckpt.h ep_rank, ep_size): a routed experts'
 * stacked matrix X [16, 3] of 4 experts, each a gate and an up of 2 rows (8
 * row groups), written by 4 ranks as ep 2 x tp 2 (each ep rank's block of 2
 * experts, each of their groups split over tp), rebuilt whole and resliced
 * for ep 4 x tp 1 and ep 1 x tp 2; a column-split expert matrix Y [8, 4]
 * likewise. */
static void test_expert_reshard(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/expert", root);
    float X[48], Y[32], local[4][2][16];
    for (int i = 0; i < 48; i++) X[i] = val("X", (uint64_t)i, 0);
    for (int i = 0; i < 32; i++) Y[i] = val("Y", (uint64_t)i, 1);
    int rc = 0;
    for (int rank = 0; rank < 4; rank++) {
        int ep = rank / 2, tp = rank % 2;
        ckpt_piece pc[2];
        memset(pc, 0, sizeof pc);
        snprintf(pc[0].name, CKPT_NAME_MAX, "param/X");
        pc[0].place = (ckpt_place){2, {16, 3}, CKPT_SPLIT_ROWS, 4, tp, 2, 0, 12, ep, 2};
        snprintf(pc[1].name, CKPT_NAME_MAX, "param/Y");
        pc[1].place = (ckpt_place){2, {8, 4}, CKPT_SPLIT_COLS, 1, tp, 2, 0, 8, ep, 2};
        for (int k = 0; k < 2; k++) {
            for (uint64_t i = 0; i < pc[k].place.hi; i++)
                local[rank][k][i] = (k ? Y : X)[ckpt_place_global_index(&pc[k].place, i)];
            pc[k].data = local[rank][k];
        }
        rc |= ckpt_write_rank(dir, 3, rank, pc, 2, err, sizeof err);
    }
    ckpt_meta m = meta_of(3, 2, 2, 4, "none", NULL);
    rc |= ckpt_commit(dir, &m, 4, err, sizeof err);
    ckpt *ck;
    rc |= ckpt_open(dir, &ck, err, sizeof err);
    CHECK(rc == 0, "ep 2 x tp 2 expert pieces written and opened: %s", rc ? err : "");
    if (rc) return;
    float g[48];
    rc = ckpt_read_global(ck, "param/X", g, err, sizeof err);
    CHECK(rc == 0 && memcmp(g, X, sizeof X) == 0, "rows-split experts (ep 2 x tp 2) rebuilt whole: %s", rc ? err : "");
    rc = ckpt_read_global(ck, "param/Y", g, err, sizeof err);
    CHECK(rc == 0 && memcmp(g, Y, sizeof Y) == 0, "cols-split experts (ep 2 x tp 2) rebuilt whole: %s", rc ? err : "");
    int bad = 0;
    for (int r = 0; r < 4; r++) { /* ep 4 x tp 1: one expert each; ep 1 x tp 2 */
        ckpt_place w = {2, {16, 3}, CKPT_SPLIT_ROWS, 2, 0, 1, 0, 0, r, 4};
        ckpt_place wt = {2, {8, 4}, CKPT_SPLIT_COLS, 1, r % 2, 2, 0, 0, 0, 1};
        ckpt_place *ws[2] = {&w, &wt};
        for (int k = 0; k < 2; k++) {
            ws[k]->hi = ckpt_place_local_numel(ws[k]);
            rc |= ckpt_read_slice(ck, k ? "param/Y" : "param/X", ws[k], g, err, sizeof err);
            for (uint64_t i = 0; i < ws[k]->hi; i++) bad += g[i] != (k ? Y : X)[ckpt_place_global_index(ws[k], i)];
        }
    }
    CHECK(rc == 0 && bad == 0 && ckpt_place_global_index(&(ckpt_place){2, {16, 3}, CKPT_SPLIT_ROWS, 4, 1, 2, 0, 12, 1, 2}, 0) == 27,
          "resliced for ep 4 x tp 1 and ep 1 x tp 2: %d wrong %s", bad, rc ? err : "");
    ckpt_close(ck);
}

static void test_handmade_reshard(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/hand", root);
    /* R: [12, 5] split by rows in 3 groups (like qkv) over tp 2; F: [7, 6]
     * replicated tensor whose elements are split as flat slices over 2 ranks;
     * C: [3, 9] split by columns. */
    float R[60], F[42], Cm[27];
    for (int i = 0; i < 60; i++) R[i] = val("R", (uint64_t)i, 0);
    for (int i = 0; i < 42; i++) F[i] = val("F", (uint64_t)i, 1);
    for (int i = 0; i < 27; i++) Cm[i] = val("C", (uint64_t)i, 2);
    float local[2][3][64];
    int rc = 0;
    for (int rank = 0; rank < 2; rank++) {
        ckpt_piece pc[3];
        memset(pc, 0, sizeof pc);
        snprintf(pc[0].name, CKPT_NAME_MAX, "param/R");
        pc[0].place = (ckpt_place){2, {12, 5}, CKPT_SPLIT_ROWS, 3, rank, 2, 0, 30, 0, 1};
        snprintf(pc[1].name, CKPT_NAME_MAX, "adam_m/F");
        pc[1].place = (ckpt_place){2, {7, 6}, CKPT_SPLIT_NONE, 1, 0, 1, rank ? 20 : 0, rank ? 42 : 20, 0, 1};
        snprintf(pc[2].name, CKPT_NAME_MAX, "param/C");
        pc[2].place = (ckpt_place){2, {3, 9}, CKPT_SPLIT_COLS, 1, rank, 2, 0, rank ? 15 : 12, 0, 1};
        for (int k = 0; k < 3; k++) {
            for (uint64_t i = pc[k].place.lo; i < pc[k].place.hi; i++) {
                uint64_t g = ckpt_place_global_index(&pc[k].place, i);
                local[rank][k][i - pc[k].place.lo] = k == 0 ? R[g] : k == 1 ? F[g] : Cm[g];
            }
            pc[k].data = local[rank][k];
        }
        rc |= ckpt_write_rank(dir, 7, rank, pc, 3, err, sizeof err);
    }
    ckpt_meta m = meta_of(7, 2, 2, 2, "zero1", NULL);
    rc |= ckpt_commit(dir, &m, 2, err, sizeof err);
    CHECK(rc == 0, "2-rank checkpoint written and committed: %s", rc ? err : "");

    ckpt *ck;
    rc = ckpt_open(dir, &ck, err, sizeof err);
    CHECK(rc == 0, "ckpt_open(DIR) follows latest: %s", rc ? err : "");
    if (rc) return;
    const ckpt_info *in = ckpt_get_info(ck);
    CHECK(in->step == 7 && in->seed == 18446744073709551557ull && in->dp == 2 && in->tp == 2 &&
              in->world == 2 && strcmp(in->mode, "zero1") == 0 && in->n_loss == 3 &&
              in->loss_tail[2] == 3.0 && strstr(in->job_yaml, "gpt-tiny") && !in->has_model,
          "index.json round-trips step, 64-bit seed, layout, loss tail, job");
    float g[64];
    rc = ckpt_read_global(ck, "param/R", g, err, sizeof err);
    CHECK(rc == 0 && memcmp(g, R, sizeof R) == 0, "rows-split [12,5] (3 groups, tp 2) rebuilt whole: %s", rc ? err : "");
    rc = ckpt_read_global(ck, "adam_m/F", g, err, sizeof err);
    CHECK(rc == 0 && memcmp(g, F, sizeof F) == 0, "flat-sliced [7,6] rebuilt whole: %s", rc ? err : "");
    rc = ckpt_read_global(ck, "param/C", g, err, sizeof err);
    CHECK(rc == 0 && memcmp(g, Cm, sizeof Cm) == 0, "cols-split [3,9] rebuilt whole: %s", rc ? err : "");

    /* reslice for 4 ranks: tp 4 of R (5 rows per group over 4: 1,1,1,2),
     * flat quarters of F, tp 4 of C */
    int bad = 0;
    for (int r = 0; r < 4; r++) {
        ckpt_place w = {2, {12, 5}, CKPT_SPLIT_ROWS, 3, r, 4, 0, 0, 0, 1};
        w.hi = ckpt_place_local_numel(&w);
        rc |= ckpt_read_slice(ck, "param/R", &w, g, err, sizeof err);
        for (uint64_t i = 0; i < w.hi; i++) bad += g[i] != R[ckpt_place_global_index(&w, i)];
        ckpt_place wf = {2, {7, 6}, CKPT_SPLIT_NONE, 1, 0, 1, 42u * (unsigned)r / 4, 42u * (unsigned)(r + 1) / 4, 0, 1};
        rc |= ckpt_read_slice(ck, "adam_m/F", &wf, g, err, sizeof err);
        for (uint64_t i = wf.lo; i < wf.hi; i++) bad += g[i - wf.lo] != F[i];
        ckpt_place wc = {2, {3, 9}, CKPT_SPLIT_COLS, 1, r, 4, 1, 0, 0, 1};
        wc.hi = ckpt_place_local_numel(&wc); /* and a partial range [1, numel) */
        rc |= ckpt_read_slice(ck, "param/C", &wc, g, err, sizeof err);
        for (uint64_t i = wc.lo; i < wc.hi; i++) bad += g[i - wc.lo] != Cm[ckpt_place_global_index(&wc, i)];
    }
    CHECK(rc == 0 && bad == 0, "resliced for a 4-rank layout (rows, flat, cols, partial ranges): %d wrong %s", bad,
          rc ? err : "");
    ckpt_place w = {2, {12, 6}, CKPT_SPLIT_NONE, 1, 0, 1, 0, 72, 0, 1};
    rc = ckpt_read_slice(ck, "param/R", &w, g, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "shape mismatch"), "a wrong global shape is refused: %s", err);
    rc = ckpt_read_global(ck, "param/nope", g, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "missing tensor") && strstr(err, "param/nope"), "an absent tensor is named: %s", err);
    ckpt_close(ck);

    /* a layout that lost a shard: only rank 0's half of R is in the files */
    snprintf(dir, sizeof dir, "%s/hand-missing", root);
    ckpt_piece pc = {.place = {2, {12, 5}, CKPT_SPLIT_ROWS, 3, 0, 2, 0, 30}, .data = local[0][0]};
    snprintf(pc.name, CKPT_NAME_MAX, "param/R");
    rc = ckpt_write_rank(dir, 1, 0, &pc, 1, err, sizeof err);
    rc |= ckpt_write_rank(dir, 1, 1, NULL, 0, err, sizeof err);
    m = meta_of(1, 1, 2, 2, "none", NULL);
    rc |= ckpt_commit(dir, &m, 2, err, sizeof err);
    rc |= ckpt_open(dir, &ck, err, sizeof err);
    if (rc == 0) {
        rc = ckpt_read_global(ck, "param/R", g, err, sizeof err);
        CHECK(rc != 0 && strstr(err, "30 of 60") && strstr(err, "missing shard"),
              "elements held by no rank file are an error: %s", err);
        ckpt_close(ck);
    } else {
        CHECK(0, "setup of the missing-shard case: %s", err);
    }
}

/* ---- a real model under a sharded layout ---- */

typedef struct {
    int tp, dp, zero; /* zero: the dp ranks hold flat slices; else replicas */
} layout;

/* Unit buffers of rank `tp_rank`, kind 0/1/2 = param/m/v, filled with val(). */
static float *unit_buffer(const job_model *jm, int unit, int tp_rank, int tp, int kind, param_spec *specs,
                          int *n_specs)
{
    int n = model_unit_param_count(jm, unit);
    size_t total = model_unit_numel(jm, unit, tp_rank, tp);
    float *buf = malloc((total + 1) * sizeof(float));
    for (int i = 0; i < n; i++) {
        model_unit_param_spec(jm, unit, i, tp_rank, tp, &specs[i]);
        for (size_t k = 0; k < specs[i].local_numel; k++)
            buf[specs[i].offset + k] = val(specs[i].name, param_global_index(&specs[i], tp_rank, tp, k), kind);
    }
    *n_specs = n;
    return buf;
}

static const char *const kinds[3] = {"param", "adam_m", "adam_v"};
#define UNIT_MAX_PARAMS_TEST 16

/* Every rank of layout L writes its file of step `step`. */
static int write_ranks(const char *dir, long step, const job_model *jm, layout L)
{
    int world = L.tp * L.dp, rc = 0;
    for (int rank = 0; rank < world; rank++) {
        int tr = rank % L.tp, dr = rank / L.tp;
        ckpt_piece pieces[512];
        float *bufs[64];
        int np = 0, nb = 0;
        for (int u = 0; u < model_n_units(jm); u++) {
            size_t N = model_unit_numel(jm, u, tr, L.tp);
            size_t lo = L.zero ? N * (size_t)dr / (size_t)L.dp : 0;
            size_t hi = L.zero ? N * (size_t)(dr + 1) / (size_t)L.dp : N;
            for (int k = 0; k < 3; k++) {
                param_spec specs[UNIT_MAX_PARAMS_TEST];
                int ns;
                float *b = unit_buffer(jm, u, tr, L.tp, k, specs, &ns);
                bufs[nb++] = b;
                int got = ckpt_unit_slice_pieces(kinds[k], specs, ns, tr, L.tp, lo, hi, b + lo, pieces + np,
                                                 512 - np);
                if (got < 0) rc = -1;
                else np += got;
            }
        }
        if (rc == 0) rc = ckpt_write_rank(dir, step, rank, pieces, np, err, sizeof err);
        for (int i = 0; i < nb; i++) free(bufs[i]);
    }
    return rc;
}

static int commit_model(const char *dir, long step, const job_model *jm, layout L, int keep)
{
    ckpt_meta m = meta_of(step, L.dp, L.tp, L.tp * L.dp, L.zero ? "zero1" : "none", jm);
    return ckpt_commit(dir, &m, keep, err, sizeof err);
}

static int save_model(const char *dir, long step, const job_model *jm, layout L, int keep)
{
    int rc = write_ranks(dir, step, jm, L);
    return rc == 0 ? commit_model(dir, step, jm, L, keep) : rc;
}

/* Every rank of layout L reads its slices of every unit and kind. */
static int verify_model(const ckpt *ck, const job_model *jm, layout L, int *bad)
{
    int world = L.tp * L.dp;
    for (int rank = 0; rank < world; rank++) {
        int tr = rank % L.tp, dr = rank / L.tp;
        for (int u = 0; u < model_n_units(jm); u++) {
            size_t N = model_unit_numel(jm, u, tr, L.tp);
            size_t lo = L.zero ? N * (size_t)dr / (size_t)L.dp : 0;
            size_t hi = L.zero ? N * (size_t)(dr + 1) / (size_t)L.dp : N;
            for (int k = 0; k < 3; k++) {
                param_spec specs[UNIT_MAX_PARAMS_TEST];
                int ns;
                float *want = unit_buffer(jm, u, tr, L.tp, k, specs, &ns);
                float *got = malloc((hi - lo + 1) * sizeof(float));
                int rc = ckpt_read_unit_slice(ck, kinds[k], specs, ns, tr, L.tp, lo, hi, got, err, sizeof err);
                if (rc == 0)
                    for (size_t i = lo; i < hi; i++) *bad += got[i - lo] != want[i];
                free(want);
                free(got);
                if (rc) return rc;
            }
        }
    }
    return 0;
}

static job_model tiny_gpt(void)
{
    job_model jm;
    memset(&jm, 0, sizeof jm);
    jm.kind = MODEL_GPT;
    jm.n_layer = 2;
    jm.n_head = 4;
    jm.d_model = 8;
    jm.d_ff = 32;
    jm.vocab_size = 13; /* not divisible by tp: the uneven vocab split */
    jm.seq_len = 6;
    return jm;
}

static job_model tiny_vit(void)
{
    job_model jm;
    memset(&jm, 0, sizeof jm);
    jm.kind = MODEL_VIT;
    jm.n_layer = 1;
    jm.n_head = 2;
    jm.d_model = 8;
    jm.d_ff = 16;
    jm.image_size = 8;
    jm.patch_size = 4;
    jm.channels = 3;
    jm.n_classes = 5;
    return jm;
}

static void test_model_reshard(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/gpt", root);
    job_model jm = tiny_gpt();
    layout saved = {2, 2, 1}; /* tp 2 x ZeRO over dp 2 */
    int rc = save_model(dir, 100, &jm, saved, 2);
    CHECK(rc == 0, "GPT saved under tp 2 x zero dp 2 (4 rank files): %s", rc ? err : "");
    ckpt *ck;
    rc = ckpt_open(dir, &ck, err, sizeof err);
    CHECK(rc == 0, "GPT checkpoint opens: %s", rc ? err : "");
    if (rc) return;
    const layout targets[] = {{1, 1, 0}, {1, 3, 1}, {4, 1, 0}, {2, 2, 1}, {4, 2, 1}};
    for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
        int bad = 0;
        rc = verify_model(ck, &jm, targets[t], &bad);
        CHECK(rc == 0 && bad == 0, "resumed as tp %d x dp %d (%s): every param, m, v slice right (%d wrong) %s",
              targets[t].tp, targets[t].dp, targets[t].zero ? "zero" : "replicas", bad, rc ? err : "");
    }
    int64_t shape[2];
    int nd = ckpt_tensor_shape(ck, "param/h.1.attn.qkv.w", shape);
    float *g = malloc(24 * 8 * sizeof(float));
    rc = ckpt_read_global(ck, "param/h.1.attn.qkv.w", g, err, sizeof err);
    int bad = 0;
    for (int i = 0; i < 24 * 8; i++) bad += g[i] != val("h.1.attn.qkv.w", (uint64_t)i, 0);
    CHECK(nd == 2 && shape[0] == 24 && shape[1] == 8 && rc == 0 && bad == 0,
          "ckpt_read_global(\"param/h.1.attn.qkv.w\") is the global [24, 8] tensor");
    free(g);
    ckpt_close(ck);

    /* replicas (DDP: every dp rank writes the same whole units) are fine too */
    snprintf(dir, sizeof dir, "%s/gpt-ddp", root);
    layout ddp = {1, 2, 0};
    rc = save_model(dir, 3, &jm, ddp, 2);
    if (rc == 0) rc = ckpt_open(dir, &ck, err, sizeof err);
    if (rc == 0) {
        bad = 0;
        layout tp2 = {2, 1, 0};
        rc = verify_model(ck, &jm, tp2, &bad);
        ckpt_close(ck);
    }
    CHECK(rc == 0 && bad == 0, "DDP replicas (duplicate pieces) resume as tp 2: %s", rc ? err : "");
}

/* An MoE model saved by ep 2 (every rank its experts, rank 0 the dense
 * tensors too, as the strategies' counts say) reads back under ep 4 and one
 * process, each rank its own experts. */
static void test_ep_reshard(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/moe-ep", root);
    job_model jm = tiny_moe();
    int rc = 0;
    for (int rank = 0; rank < 2 && rc == 0; rank++) {
        ckpt_piece pieces[256];
        float *bufs[64];
        int np = 0, nb = 0;
        for (int u = 0; u < model_n_units(&jm); u++) {
            int ep = u >= 1 && u <= jm.n_layer ? 2 : 1;
            if (ep == 1 && rank > 0) continue; /* dense units: rank 0 saves them */
            param_spec specs[UNIT_MAX_PARAMS_TEST], mine[UNIT_MAX_PARAMS_TEST];
            int n = model_unit_param_count(&jm, u), ns = 0;
            size_t N = model_unit_numel_ep(&jm, u, 0, 1, ep);
            for (int k = 0; k < 3; k++) {
                float *b = malloc((N + 1) * sizeof(float));
                bufs[nb++] = b;
                ns = 0;
                for (int i = 0; i < n; i++) {
                    model_unit_param_spec_ep(&jm, u, i, 0, 1, rank % ep, ep, &specs[i]);
                    for (size_t j = 0; j < specs[i].local_numel; j++)
                        b[specs[i].offset + j] = val(specs[i].name, param_global_index(&specs[i], 0, 1, j), k);
                    if (rank == 0 || param_is_expert(&specs[i])) mine[ns++] = specs[i];
                }
                int got = ckpt_unit_slice_pieces(kinds[k], mine, ns, 0, 1, 0, N, b, pieces + np, 256 - np);
                if (got < 0) rc = -1;
                else np += got;
            }
        }
        if (rc == 0) rc = ckpt_write_rank(dir, 5, rank, pieces, np, err, sizeof err);
        for (int i = 0; i < nb; i++) free(bufs[i]);
    }
    ckpt_meta m = meta_of(5, 2, 1, 2, "none", &jm);
    if (rc == 0) rc = ckpt_commit(dir, &m, 2, err, sizeof err);
    ckpt *ck = NULL;
    if (rc == 0) rc = ckpt_open(dir, &ck, err, sizeof err);
    CHECK(rc == 0, "an MoE model saved under ep 2: %s", rc ? err : "");
    if (rc) return;
    for (int ep = 1; ep <= 4; ep *= 2) {
        int bad = 0;
        for (int r = 0; r < ep && rc == 0; r++)
            for (int u = 0; u < model_n_units(&jm) && rc == 0; u++) {
                int n = model_unit_param_count(&jm, u);
                param_spec specs[UNIT_MAX_PARAMS_TEST];
                size_t N = model_unit_numel_ep(&jm, u, 0, 1, ep);
                float *got = malloc((N + 1) * sizeof(float));
                for (int k = 0; k < 3 && rc == 0; k++) {
                    for (int i = 0; i < n; i++) model_unit_param_spec_ep(&jm, u, i, 0, 1, r, ep, &specs[i]);
                    rc = ckpt_read_unit_slice(ck, kinds[k], specs, n, 0, 1, 0, N, got, err, sizeof err);
                    for (int i = 0; i < n && rc == 0; i++)
                        for (size_t j = 0; j < specs[i].local_numel; j++)
                            bad += got[specs[i].offset + j] !=
                                   val(specs[i].name, param_global_index(&specs[i], 0, 1, j), k);
                }
                free(got);
            }
        CHECK(rc == 0 && bad == 0, "saved under ep 2, every rank of ep %d reads its experts and the dense tensors "
              "(%d wrong) %s", ep, bad, rc ? err : "");
    }
    ckpt_close(ck);
}

/* ---- atomic commit, latest, keep-K ---- */

static void step_path(char *buf, size_t len, const char *dir, long step, const char *file)
{
    char name[64];
    ckpt_step_dirname(name, sizeof name, step);
    if (file) snprintf(buf, len, "%s/%s/%s", dir, name, file);
    else snprintf(buf, len, "%s/%s", dir, name);
}

static void test_commit_keep(void)
{
    char dir[512], p[700];
    snprintf(dir, sizeof dir, "%s/keep", root);
    job_model jm = tiny_gpt();
    jm.n_layer = 1;
    layout L = {1, 2, 1};
    int rc = 0;
    /* an abandoned attempt older than everything: removed by the first commit */
    step_path(p, sizeof p, dir, 5, NULL);
    mkdir(dir, 0755);
    mkdir(p, 0755);
    step_path(p, sizeof p, dir, 5, "rank_00000.safetensors.tmp");
    write_file(p, "junk", 4);
    for (long s = 10; s <= 40; s += 10) rc |= save_model(dir, s, &jm, L, 2);
    CHECK(rc == 0, "4 saves with keep 2: %s", rc ? err : "");
    long latest = -1;
    rc = ckpt_latest_step(dir, &latest, err, sizeof err);
    step_path(p, sizeof p, dir, 5, NULL);
    int gone5 = !exists(p);
    step_path(p, sizeof p, dir, 10, NULL);
    int gone10 = !exists(p);
    step_path(p, sizeof p, dir, 20, NULL);
    int gone20 = !exists(p);
    step_path(p, sizeof p, dir, 30, "index.json");
    int has30 = exists(p);
    step_path(p, sizeof p, dir, 40, "index.json");
    int has40 = exists(p);
    CHECK(rc == 0 && latest == 40 && gone5 && gone10 && gone20 && has30 && has40,
          "latest = 40, steps 30 and 40 kept, 10, 20 and the abandoned 5 removed");
    CHECK(count_tmp_files(dir) == 0, "no .tmp file is left behind");
    snprintf(p, sizeof p, "%s/latest", dir);
    char buf[64] = {0};
    FILE *f = fopen(p, "r");
    size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    CHECK(got > 0 && strcmp(buf, "step_000040\n") == 0, "latest holds \"step_000040\\n\"");

    ckpt *ck;
    step_path(p, sizeof p, dir, 30, NULL);
    rc = ckpt_open(p, &ck, err, sizeof err);
    CHECK(rc == 0 && ckpt_get_info(ck)->step == 30, "an older kept step opens by its path: %s", rc ? err : "");
    if (rc == 0) ckpt_close(ck);

    /* saving the step we resumed from again: nothing to do, nothing touched */
    ckpt_piece none[1];
    rc = ckpt_write_rank(dir, 40, 0, none, 0, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "already the latest"), "rewriting the latest step is refused with 1: %s", err);

    /* resume from 30 and save 35: latest moves back, 40 (a future of the
     * abandoned run) is left alone, 30 kept as the second newest */
    rc = save_model(dir, 35, &jm, L, 2);
    rc |= ckpt_latest_step(dir, &latest, err, sizeof err);
    step_path(p, sizeof p, dir, 40, "index.json");
    int still40 = exists(p);
    step_path(p, sizeof p, dir, 30, "index.json");
    CHECK(rc == 0 && latest == 35 && still40 && exists(p), "a save after resuming from an older step: latest 35, 30 and 40 kept");
    /* reaching 40 again rewrites it (it is not latest) */
    rc = save_model(dir, 40, &jm, L, 2);
    rc |= ckpt_latest_step(dir, &latest, err, sizeof err);
    step_path(p, sizeof p, dir, 30, NULL);
    CHECK(rc == 0 && latest == 40 && !exists(p), "the abandoned step 40 is rewritten and committed; keep 2 drops 30: %s",
          rc ? err : "");
    rc = ckpt_open(dir, &ck, err, sizeof err);
    CHECK(rc == 0, "the rewritten step opens with matching checksums: %s", rc ? err : "");
    if (rc == 0) ckpt_close(ck);
}

/* ---- corruption ---- */

static void flip_byte(const char *path, long at)
{
    int fd = open(path, O_RDWR);
    unsigned char c = 0;
    if (fd < 0) return;
    if (pread(fd, &c, 1, at) == 1) {
        c ^= 0x5a;
        if (pwrite(fd, &c, 1, at) != 1) c = 0;
    }
    close(fd);
}

static void copy_file(const char *from, const char *to)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    if (system(cmd) != 0) fprintf(stderr, "cp failed\n");
}

static void test_corruption(void)
{
    char dir[512], p[700], save[720];
    snprintf(dir, sizeof dir, "%s/corrupt", root);
    job_model jm = tiny_gpt();
    jm.n_layer = 1;
    layout L = {2, 1, 0};
    int rc = save_model(dir, 120, &jm, L, 2);
    CHECK(rc == 0, "checkpoint for the corruption tests: %s", rc ? err : "");
    step_path(p, sizeof p, dir, 120, "rank_00001.safetensors");
    snprintf(save, sizeof save, "%s.orig", p);
    copy_file(p, save);
    ckpt *ck;

    flip_byte(p, file_size(p) - 3);
    rc = ckpt_open(dir, &ck, err, sizeof err);
    char want[800];
    snprintf(want, sizeof want, "%s: checksum mismatch (corrupted shard)", p);
    CHECK(rc != 0 && strcmp(err, want) == 0, "a flipped data byte: \"%s\"", err);
    copy_file(save, p);
    flip_byte(p, 20);
    rc = ckpt_open(dir, &ck, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "rank_00001.safetensors: checksum mismatch"), "a flipped header byte: %s", err);
    copy_file(save, p);
    if (truncate(p, file_size(p) - 1) != 0) perror("truncate");
    rc = ckpt_open(dir, &ck, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "rank_00001.safetensors") && strstr(err, "truncated"), "a truncated shard: %s", err);
    unlink(p);
    rc = ckpt_open(dir, &ck, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "rank_00001.safetensors: missing"), "a deleted shard: %s", err);
    copy_file(save, p);
    unlink(save);
    rc = ckpt_open(dir, &ck, err, sizeof err);
    CHECK(rc == 0, "the restored shard opens again: %s", rc ? err : "");
    if (rc == 0) ckpt_close(ck);

    step_path(p, sizeof p, dir, 120, "index.json");
    snprintf(save, sizeof save, "%s.orig", p);
    copy_file(p, save);
    flip_byte(p, 0);
    rc = ckpt_open(dir, &ck, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "index.json: not a JSON object"), "a corrupt index.json: %s", err);
    write_file(p, "{\"format\":\"dtrun-checkpoint\",\"version\":1,\"step\":120}", 52);
    rc = ckpt_open(dir, &ck, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "index.json: bad or missing 'seed'"), "an index missing fields: %s", err);
    copy_file(save, p);
    unlink(save);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "sed -i 's/rank_00001.safetensors/..\\/..\\/etc\\/passwd/' '%s'", p);
    if (system(cmd) != 0) fprintf(stderr, "sed failed\n");
    rc = ckpt_open(dir, &ck, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "files[1] is not"), "an index pointing outside the step: %s", err);

    snprintf(p, sizeof p, "%s/latest", dir);
    write_file(p, "../../etc\n", 10);
    rc = ckpt_open(dir, &ck, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "latest: does not name a step directory"), "a bad latest: %s", err);
    snprintf(p, sizeof p, "%s/nothing", root);
    mkdir(p, 0755);
    rc = ckpt_open(p, &ck, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "no checkpoint here"), "a directory with no checkpoint: %s", err);

    /* a valid safetensors shard whose placement is nonsense */
    snprintf(dir, sizeof dir, "%s/badplace", root);
    float x[4] = {1, 2, 3, 4};
    ckpt_piece pc = {.place = {1, {4, 1}, CKPT_SPLIT_NONE, 1, 0, 1, 0, 4}, .data = x};
    snprintf(pc.name, CKPT_NAME_MAX, "param/x");
    rc = ckpt_write_rank(dir, 1, 0, &pc, 1, err, sizeof err);
    ckpt_meta m = meta_of(1, 1, 1, 1, "none", NULL);
    rc |= ckpt_commit(dir, &m, 2, err, sizeof err);
    step_path(p, sizeof p, dir, 1, "rank_00000.safetensors");
    /* same length edit keeps the header valid; the checksum is then fixed up by
     * a re-commit, as a buggy writer would have produced it */
    snprintf(cmd, sizeof cmd, "sed -i 's/\\\\\"hi\\\\\":4/\\\\\"hi\\\\\":9/' '%s'", p);
    rc |= system(cmd);
    snprintf(p, sizeof p, "%s/latest", dir);
    unlink(p);
    rc |= ckpt_commit(dir, &m, 2, err, sizeof err);
    rc |= ckpt_open(dir, &ck, err, sizeof err) == 0 ? 1 : 0;
    CHECK(rc == 0 && strstr(err, "rank_00000.safetensors: tensor 'param/x'") && strstr(err, "outside the local shard"),
          "a placement beyond its tensor is refused: %s", err);
}

/* ---- crashes and full disks ---- */

static int hook_calls;        /* write_all calls let through before the fault */
static long hook_partial;     /* bytes of the faulting call written first */
static int hook_errno;        /* fail with this; 0: SIGKILL the process instead */
static int hook_fsync_errno;  /* fail every fsync with this (0: real fsync) */

static int real_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int hooked_write(int fd, const void *buf, size_t n)
{
    if (hook_calls-- > 0) return real_write_all(fd, buf, n);
    size_t part = (size_t)hook_partial < n ? (size_t)hook_partial : n;
    if (part) real_write_all(fd, buf, part);
    if (!hook_errno) kill(getpid(), SIGKILL);
    errno = hook_errno;
    return -1;
}

static int hooked_fsync(int fd)
{
    struct stat st;
    /* files only: the directory fsyncs stay real, to reach the file's */
    if (hook_fsync_errno && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        errno = hook_fsync_errno;
        return -1;
    }
    return fsync(fd);
}

static void arm(int calls, long partial, int errnum, int fsync_errnum)
{
    static const ckpt_io_hooks h = {hooked_write, hooked_fsync};
    hook_calls = calls;
    hook_partial = partial;
    hook_errno = errnum;
    hook_fsync_errno = fsync_errnum;
    ckpt_io_set_hooks(&h);
}

static int previous_loads(const char *dir, long step, const job_model *jm, layout L)
{
    ckpt *ck;
    if (ckpt_open(dir, &ck, err, sizeof err) != 0) return 0;
    int bad = 0, ok = ckpt_get_info(ck)->step == step && verify_model(ck, jm, L, &bad) == 0 && bad == 0;
    ckpt_close(ck);
    return ok;
}

/* A child saves step 2 and is SIGKILLed: stage 0 inside a rank file, 1 after
 * every rank file and before the commit, 2 inside index.json, 3 inside the
 * write of latest. Returns 1 when it died by SIGKILL. */
static int killed_save(const char *dir, const job_model *jm, layout L, int stage)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (stage == 0) arm(2, 7, 0, 0); /* header, a tensor, then 7 bytes of the next */
        write_ranks(dir, 2, jm, L);
        if (stage == 1) kill(getpid(), SIGKILL);
        if (stage == 2) arm(0, 40, 0, 0);
        if (stage == 3) arm(1, 5, 0, 0);
        commit_model(dir, 2, jm, L, 2);
        _exit(3); /* not reached when the hook fired */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

static void test_killed_writer(void)
{
    char dir[512], p[700];
    snprintf(dir, sizeof dir, "%s/killed", root);
    job_model jm = tiny_gpt();
    jm.n_layer = 1;
    layout L = {2, 1, 0};
    int rc = save_model(dir, 1, &jm, L, 2);
    CHECK(rc == 0 && previous_loads(dir, 1, &jm, L), "step 1 committed: %s", rc ? err : "");
    static const char *const where[4] = {"inside a rank file", "between the rank files and the commit",
                                         "inside index.json", "inside the write of latest"};
    for (int stage = 0; stage < 4; stage++) {
        int died = killed_save(dir, &jm, L, stage);
        CHECK(died && previous_loads(dir, 1, &jm, L), "writer SIGKILLed %s: step 1 still loads and verifies",
              where[stage]);
    }
    step_path(p, sizeof p, dir, 2, "index.json");
    CHECK(exists(p), "(the last kill left a committed step 2 that latest does not name)");
    /* the resumed job saves step 2 again over the debris */
    rc = save_model(dir, 2, &jm, L, 2);
    CHECK(rc == 0 && previous_loads(dir, 2, &jm, L) && count_tmp_files(dir) == 0,
          "the next save of step 2 succeeds over the debris and leaves no .tmp: %s", rc ? err : "");
}

/* Disk full / I/O errors, simulated through the hook. */
static void test_write_errors(void)
{
    char dir[512], p[700];
    snprintf(dir, sizeof dir, "%s/enospc-sim", root);
    job_model jm = tiny_gpt();
    jm.n_layer = 1;
    layout L = {1, 2, 1};
    int rc = save_model(dir, 1, &jm, L, 2);
    CHECK(rc == 0, "step 1 committed: %s", rc ? err : "");

    arm(3, 100, ENOSPC, 0);
    rc = write_ranks(dir, 2, &jm, L);
    ckpt_io_set_hooks(NULL);
    step_path(p, sizeof p, dir, 2, "rank_00000.safetensors");
    CHECK(rc != 0 && strstr(err, "rank_00000.safetensors: write failed (No space left on device)") &&
              !exists(p) && count_tmp_files(dir) == 0 && previous_loads(dir, 1, &jm, L),
          "ENOSPC in a rank file: error, no .tmp, no file, step 1 intact: %s", err);

    arm(1000000, 0, 0, EIO);
    rc = write_ranks(dir, 2, &jm, L);
    ckpt_io_set_hooks(NULL);
    CHECK(rc != 0 && strstr(err, "fsync failed (Input/output error)") && count_tmp_files(dir) == 0 &&
              previous_loads(dir, 1, &jm, L),
          "EIO on fsync: error, no .tmp, step 1 intact: %s", err);

    rc = write_ranks(dir, 2, &jm, L);
    arm(0, 10, ENOSPC, 0);
    rc |= commit_model(dir, 2, &jm, L, 2) == 0 ? 1 : 0;
    ckpt_io_set_hooks(NULL);
    step_path(p, sizeof p, dir, 2, "index.json");
    long latest = 0;
    ckpt_latest_step(dir, &latest, NULL, 0);
    CHECK(rc == 0 && strstr(err, "index.json: write failed (No space left on device)") && !exists(p) &&
              latest == 1 && previous_loads(dir, 1, &jm, L) && count_tmp_files(dir) == 0,
          "ENOSPC writing index.json: commit fails, latest still 1, no index: %s", err);

    /* a rank whose write failed makes the commit fail, naming its file */
    step_path(p, sizeof p, dir, 2, "rank_00001.safetensors");
    unlink(p);
    rc = commit_model(dir, 2, &jm, L, 2);
    CHECK(rc != 0 && strstr(err, "rank_00001.safetensors: missing"), "commit without a rank's file: %s", err);
    rc = save_model(dir, 2, &jm, L, 2);
    CHECK(rc == 0 && previous_loads(dir, 2, &jm, L), "with space again, step 2 saves: %s", rc ? err : "");
}

/* The real thing on a tiny tmpfs (run by test/integration/ckpt_enospc.sh). */
static int enospc_main(const char *dir)
{
    job_model small = tiny_gpt(), big = tiny_gpt();
    small.n_layer = 1;
    big.n_layer = 8;
    big.d_model = 32;
    big.d_ff = 128;
    layout L = {1, 2, 1};
    int rc = save_model(dir, 1, &small, L, 2);
    CHECK(rc == 0, "a small step 1 fits: %s", rc ? err : "");
    rc = save_model(dir, 2, &big, L, 2);
    CHECK(rc != 0 && strstr(err, "No space left on device"), "a big step 2 hits the real ENOSPC: %s", err);
    CHECK(count_tmp_files(dir) == 0, "no .tmp left on the full disk");
    CHECK(previous_loads(dir, 1, &small, L), "step 1 is still the latest and verifies");
    char p[700];
    rc = save_model(dir, 3, &small, L, 2);
    step_path(p, sizeof p, dir, 2, NULL);
    CHECK(rc == 0 && previous_loads(dir, 3, &small, L) && !exists(p),
          "the next small step 3 saves, and its commit removes the failed step's directory: %s", rc ? err : "");
    CHECK_DONE();
}

/* ---- export ---- */

static void test_export_gpt(void)
{
    char dir[512], out[600];
    snprintf(dir, sizeof dir, "%s/export-gpt", root);
    snprintf(out, sizeof out, "%s/gpt2.safetensors", root);
    job_model jm = tiny_gpt();
    layout L = {2, 2, 1};
    ckpt *ck;
    int rc = save_model(dir, 5, &jm, L, 2);
    rc |= ckpt_open(dir, &ck, err, sizeof err);
    if (rc) {
        CHECK(0, "GPT checkpoint for export: %s", err);
        return;
    }
    rc = ckpt_export(ck, out, CKPT_NAMES_AUTO, err, sizeof err);
    ckpt_close(ck);
    CHECK(rc == 0, "GPT exported with Hugging Face names: %s", rc ? err : "");
    st_reader *r;
    if (rc || st_reader_open(out, &r, err, sizeof err) != 0) return;
    int C = jm.d_model, F = jm.d_ff;
    CHECK(st_reader_count(r) == 4 + 12 * jm.n_layer && !st_reader_find(r, "lm_head.weight") &&
              st_reader_metadata(r, "format") && strcmp(st_reader_metadata(r, "format"), "pt") == 0,
          "%d tensors (wte, wpe, 12 per block, ln_f; tied lm_head omitted), format pt", st_reader_count(r));
    struct {
        const char *hf, *ours;
        int64_t d0, d1;
        int transposed;
    } want[] = {
        {"transformer.wte.weight", "wte", 13, 8, 0},
        {"transformer.wpe.weight", "wpe", 6, 8, 0},
        {"transformer.h.1.ln_1.weight", "h.1.ln1.w", 8, 0, 0},
        {"transformer.h.0.attn.c_attn.weight", "h.0.attn.qkv.w", C, 3 * C, 1},
        {"transformer.h.0.attn.c_attn.bias", "h.0.attn.qkv.b", 3 * C, 0, 0},
        {"transformer.h.1.attn.c_proj.weight", "h.1.attn.proj.w", C, C, 1},
        {"transformer.h.0.ln_2.bias", "h.0.ln2.b", C, 0, 0},
        {"transformer.h.1.mlp.c_fc.weight", "h.1.mlp.fc.w", C, F, 1},
        {"transformer.h.1.mlp.c_fc.bias", "h.1.mlp.fc.b", F, 0, 0},
        {"transformer.h.0.mlp.c_proj.weight", "h.0.mlp.proj.w", F, C, 1},
        {"transformer.ln_f.weight", "lnf.w", C, 0, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const st_tensor *t = st_reader_find(r, want[i].hf);
        int shape_ok = t && t->dtype == ST_F32 && t->ndim == (want[i].d1 ? 2 : 1) && t->shape[0] == want[i].d0 &&
                       (!want[i].d1 || t->shape[1] == want[i].d1);
        int bad = 0;
        for (uint64_t k = 0; shape_ok && k < t->numel; k++) {
            float v;
            memcpy(&v, (const char *)t->data + 4 * k, 4);
            /* exported [in, out] element (a, b) is our [out, in] element (b, a) */
            uint64_t g = k;
            if (want[i].transposed) {
                uint64_t a = k / (uint64_t)want[i].d1, b = k % (uint64_t)want[i].d1;
                g = b * (uint64_t)want[i].d0 + a;
            }
            bad += v != val(want[i].ours, g, 0);
        }
        char shape[64];
        if (want[i].d1) snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)want[i].d0, (long long)want[i].d1);
        else snprintf(shape, sizeof shape, "[%lld]", (long long)want[i].d0);
        CHECK(shape_ok && bad == 0, "%s: shape %s%s, values from %s", want[i].hf, shape,
              want[i].transposed ? " (transposed)" : "", want[i].ours);
    }
    st_reader_close(r);
}

static void test_export_vit(void)
{
    char dir[512], out[600];
    snprintf(dir, sizeof dir, "%s/export-vit", root);
    snprintf(out, sizeof out, "%s/vit.safetensors", root);
    job_model jm = tiny_vit();
    layout L = {1, 2, 1};
    ckpt *ck;
    int rc = save_model(dir, 5, &jm, L, 2);
    rc |= ckpt_open(dir, &ck, err, sizeof err);
    if (rc) {
        CHECK(0, "ViT checkpoint for export: %s", err);
        return;
    }
    rc = ckpt_export(ck, out, CKPT_NAMES_AUTO, err, sizeof err);
    char gpt_out[700];
    snprintf(gpt_out, sizeof gpt_out, "%s.gpt2", out);
    int rc2 = ckpt_export(ck, gpt_out, CKPT_NAMES_HF_GPT2, err, sizeof err);
    CHECK(rc2 != 0 && strstr(err, "no GPT-2 name for") && !exists(gpt_out), "ViT params have no GPT-2 names: %s", err);
    ckpt_close(ck);
    CHECK(rc == 0, "ViT exported with timm names");
    st_reader *r;
    if (rc || st_reader_open(out, &r, err, sizeof err) != 0) return;
    struct {
        const char *hf, *ours;
        int ndim;
        int64_t shape[4];
    } want[] = {
        {"patch_embed.proj.weight", "patch.w", 4, {8, 3, 4, 4}},
        {"patch_embed.proj.bias", "patch.b", 1, {8}},
        {"cls_token", "cls", 3, {1, 1, 8}},
        {"pos_embed", "pos", 3, {1, 5, 8}},
        {"blocks.0.norm1.weight", "h.0.ln1.w", 1, {8}},
        {"blocks.0.attn.qkv.weight", "h.0.attn.qkv.w", 2, {24, 8}},
        {"blocks.0.attn.proj.bias", "h.0.attn.proj.b", 1, {8}},
        {"blocks.0.norm2.bias", "h.0.ln2.b", 1, {8}},
        {"blocks.0.mlp.fc1.weight", "h.0.mlp.fc.w", 2, {16, 8}},
        {"blocks.0.mlp.fc2.weight", "h.0.mlp.proj.w", 2, {8, 16}},
        {"norm.weight", "lnf.w", 1, {8}},
        {"head.weight", "head.w", 2, {5, 8}},
        {"head.bias", "head.b", 1, {5}},
    };
    CHECK(st_reader_count(r) == 8 + 12, "%d tensors (patch w/b, cls, pos, 12 per block, norm w/b, head w/b)",
          st_reader_count(r));
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const st_tensor *t = st_reader_find(r, want[i].hf);
        int ok = t && t->ndim == want[i].ndim;
        for (int d = 0; ok && d < want[i].ndim; d++) ok = t->shape[d] == want[i].shape[d];
        int bad = 0;
        for (uint64_t k = 0; ok && k < t->numel; k++) {
            float v;
            memcpy(&v, (const char *)t->data + 4 * k, 4);
            bad += v != val(want[i].ours, k, 0);
        }
        CHECK(ok && bad == 0, "%s: timm shape, values from %s in order", want[i].hf, want[i].ours);
    }
    st_reader_close(r);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--enospc") == 0) return enospc_main(argv[2]);
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    test_st_roundtrip();
    test_st_malformed();
    test_place_matches_model();
    test_place_matches_experts();
    test_handmade_reshard();
    test_expert_reshard();
    test_model_reshard();
    test_ep_reshard();
    test_commit_keep();
    test_corruption();
    test_killed_writer();
    test_write_errors();
    test_export_gpt();
    test_export_vit();
    rm_rf(root);
    CHECK_DONE();
}
