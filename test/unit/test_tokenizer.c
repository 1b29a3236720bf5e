/* test_tokenizer.c — Hugging Face tokenizer.json support (lib/text/tokenizer.h)
 * on tokenizer.json files made here from GPT-2's built-in vocabulary: the same
 * ids as the built-in GPT-2 where they must agree, added tokens matched before
 * pre-tokenization, ignore_merges, both forms of merges, every Split
 * behaviour against the pieces Hugging Face documents, the post-processor's
 * frame, decoding, the refusals (exit 2, the field named) and the errors
 * (exit 3); and llm.c's two shard kinds written and read back through
 * data.kind tokens. (Hugging Face's own ids on the real Llama 3 and GPT-2
 * files: test/integration/tokenizer_json.sh.)
 *
 *   test_tokenizer --decode TOKENIZER DOCS.jsonl OUT
 * writes the decoding of each document's ids (one JSON string a line) for
 * that integration test to compare with Hugging Face's decode. */
#include <cJSON.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "read_all.h"
#include "lib/text/gpt2_data.h"
#include "lib/text/token_shard.h"
#include "lib/text/shard_writer.h"
#include "lib/text/tokenizer.h"
#include "lib/text/utf8_text.h"
#include "lib/util/exit_codes.h"
#include "runtime/data/data.h"

static char tmpdir[] = "/tmp/dtrun-test-tokenizer.XXXXXX";

/* GPT-2's tokenizer.json, as Hugging Face publishes it, from the built-in
 * encoder.json and vocab.bpe ("first second" merges). */
static cJSON *gpt2_json(void)
{
    size_t jn, mn;
    const char *enc = gpt2_encoder_json(&jn), *bpe = gpt2_vocab_bpe(&mn);
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddItemToObject(model, "vocab", cJSON_ParseWithLength(enc, jn));
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (size_t at = 0, line = 0; at < mn; line++) {
        const char *nl = memchr(bpe + at, '\n', mn - at);
        size_t len = nl ? (size_t)(nl - (bpe + at)) : mn - at;
        if (line > 0 && len > 0) {
            char *s = strndup(bpe + at, len);
            cJSON_AddItemToArray(merges, cJSON_CreateString(s));
            free(s);
        }
        at += len + 1;
    }
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON *eot = cJSON_Parse("{\"id\": 50256, \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false, "
                             "\"rstrip\": false, \"normalized\": false, \"special\": true}");
    cJSON_AddItemToArray(added, eot);
    cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddItemToObject(root, "pre_tokenizer", cJSON_Parse("{\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                                                             "\"trim_offsets\": true, \"use_regex\": true}"));
    cJSON_AddItemToObject(root, "post_processor", cJSON_Parse("{\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                                                              "\"trim_offsets\": false, \"use_regex\": true}"));
    cJSON_AddItemToObject(root, "decoder", cJSON_Parse("{\"type\": \"ByteLevel\"}"));
    return root;
}

static void set(cJSON *obj, const char *key, const char *json)
{
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddItemToObject(obj, key, cJSON_Parse(json));
}

static const char *save(const char *name, const cJSON *j)
{
    static char path[8][512];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    char *text = cJSON_PrintUnformatted(j);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    return p;
}

static tokenizer *load_json(const char *name, const cJSON *j)
{
    int status;
    char err[1024];
    tokenizer *t = tokenizer_load(save(name, j), &status, err, sizeof err);
    CHECK(t != NULL, "%s loads%s%s", name, t ? "" : ": ", t ? "" : err);
    return t;
}

/* The ids of s (no frame) as "1 2 3". */
static char *ids_of(const tokenizer *t, const char *s)
{
    tokenizer_encoder *e = tokenizer_encoder_new(t);
    token_buf b = {0};
    char err[256];
    if (tokenizer_encode(e, s, strlen(s), &b, err, sizeof err) != 0) printf("# encode: %s\n", err);
    size_t cap = 12 * b.n + 2, o = 0;
    char *out = malloc(cap);
    out[0] = 0;
    for (size_t i = 0; i < b.n; i++) o += (size_t)snprintf(out + o, cap - o, "%s%u", i ? " " : "", b.ids[i]);
    token_buf_free(&b);
    tokenizer_encoder_free(e);
    return out;
}

static void expect_ids(const tokenizer *t, const char *s, const char *want, const char *what)
{
    char *got = ids_of(t, s);
    CHECK(!strcmp(got, want), "%s: \"%s\" -> [%s] (want [%s])", what, s, got, want);
    free(got);
}

/* ---- the same ids as the built-in GPT-2 ---- */

static void test_gpt2_agrees(const tokenizer *json)
{
    char err[256];
    tokenizer *builtin = tokenizer_gpt2(err, sizeof err);
    glob_t g;
    int same = 0, files = glob("test/tokenize/corpus/*", 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    size_t bytes = 0;
    for (int i = 0; i < files; i++) {
        size_t n;
        char *text = read_all(g.gl_pathv[i], &n);
        if (!text) continue;
        char *a = ids_of(builtin, text), *b = ids_of(json, text);
        same += !strcmp(a, b);
        bytes += n;
        free(a);
        free(b);
        free(text);
    }
    if (files) globfree(&g);
    CHECK(files >= 8 && same == files,
          "GPT-2's tokenizer.json gives the built-in GPT-2's ids on test/tokenize/corpus (%d of %d files, %zu bytes)",
          same, files, bytes);
    /* text that spells a special token: tokenizer.json matches it first, as
     * Hugging Face does; the built-in (OpenAI's encoder.py) does not */
    expect_ids(json, "a<|endoftext|>b", "64 50256 65", "tokenizer.json: <|endoftext|> is one token");
    expect_ids(builtin, "a<|endoftext|>b", "64 27 91 437 1659 5239 91 29 65", "built in: <|endoftext|> is text");
    const uint32_t *before, *after;
    int nb, na;
    tokenizer_frame(json, &before, &nb, &after, &na);
    CHECK(nb == 1 && before[0] == 50256 && na == 0, "no template: <|endoftext|> before each document");
    tokenizer_template(json, &before, &nb, &after, &na);
    CHECK(nb == 0 && na == 0, "... but a prompt gets nothing (GPT-2's post-processor adds nothing)");
    CHECK(tokenizer_n_ids(json) == 50257, "50257 ids");
    size_t len;
    const char *b = tokenizer_token_bytes(json, 50256, &len);
    CHECK(b && len == 13 && !memcmp(b, "<|endoftext|>", 13), "50256 decodes to <|endoftext|>");
    b = tokenizer_token_bytes(json, 995, &len);
    CHECK(b && len == 6 && !memcmp(b, " world", 6), "995 decodes to \" world\"");
    CHECK(!tokenizer_token_bytes(json, 50257, &len), "past the vocabulary: no text");
    tokenizer_free(builtin);
}

/* ---- the model's options ---- */

static void test_model(cJSON *root)
{
    cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    /* [first, second] merges (tokenizers >= 0.20) read as "first second" */
    cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges"), *arr = cJSON_CreateArray(), *m;
    cJSON_ArrayForEach(m, merges) {
        char *s = strdup(m->valuestring), *sp = strchr(s, ' ');
        *sp = 0;
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(s));
        cJSON_AddItemToArray(pair, cJSON_CreateString(sp + 1));
        cJSON_AddItemToArray(arr, pair);
        free(s);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(model, "merges", arr);
    tokenizer *t = load_json("array-merges.json", root);
    char err[256];
    tokenizer *builtin = tokenizer_gpt2(err, sizeof err);
    const char *text = "Hello world, it's 2026! Ünïcödé 日本語 😀";
    char *want = ids_of(builtin, text);
    if (t) expect_ids(t, text, want, "[a, b] merges give GPT-2's ids");
    free(want);
    tokenizer_free(builtin);
    tokenizer_free(t);

    /* ignore_merges: a piece that is a token is that token. A vocabulary of
     * the 256 bytes and "abc", with no merge to make it. */
    cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab"), *small = cJSON_CreateObject(), *v;
    cJSON_ArrayForEach(v, vocab)
        if (v->valuedouble < 256) cJSON_AddNumberToObject(small, v->string, v->valuedouble);
    cJSON_AddNumberToObject(small, "abc", 256);
    cJSON *tiny = cJSON_CreateObject(), *tm = cJSON_AddObjectToObject(tiny, "model");
    cJSON_AddStringToObject(tm, "type", "BPE");
    cJSON_AddItemToObject(tm, "vocab", small);
    cJSON_AddArrayToObject(tm, "merges");
    cJSON_AddItemToObject(tiny, "pre_tokenizer", cJSON_Parse("{\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                                                             "\"use_regex\": true}"));
    t = load_json("tiny.json", tiny);
    if (t) expect_ids(t, "abc abc", "64 65 66 220 64 65 66", "no merges: bytes");
    tokenizer_free(t);
    cJSON_AddTrueToObject(tm, "ignore_merges");
    t = load_json("tiny-ignore.json", tiny);
    if (t) expect_ids(t, "abc abc", "256 220 64 65 66", "ignore_merges: the piece \"abc\" is its token");
    tokenizer_free(t);
    cJSON_Delete(tiny);
    cJSON_Delete(root);
}

/* ---- Split's behaviours: Hugging Face's own example ---- */

/* The ids of each piece encoded alone, joined: what a pre-tokenizer that
 * cuts s into these pieces must give. */
static char *pieces_ids(cJSON *root, const char *const *pieces)
{
    set(root, "pre_tokenizer", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}");
    tokenizer *whole = load_json("whole.json", root);
    char *all = calloc(1, 4096);
    for (int i = 0; whole && pieces[i]; i++) {
        char *ids = ids_of(whole, pieces[i]);
        if (ids[0]) strcat(strcat(all, all[0] ? " " : ""), ids);
        free(ids);
    }
    tokenizer_free(whole);
    return all;
}

static void test_split(cJSON *root)
{
    /* tokenizers/src/tokenizer/normalizer.rs: "the-final--countdown" split on '-' */
    static const char *const removed[] = {"the", "final", "countdown", NULL};
    static const char *const isolated[] = {"the", "-", "final", "-", "-", "countdown", NULL};
    static const char *const previous[] = {"the-", "final-", "-", "countdown", NULL};
    static const char *const next[] = {"the", "-final", "-", "-countdown", NULL};
    static const char *const contiguous[] = {"the", "-", "final", "--", "countdown", NULL};
    static const struct {
        const char *behavior;
        const char *const *pieces;
    } cases[] = {{"Removed", removed},     {"Isolated", isolated},     {"MergedWithPrevious", previous},
                 {"MergedWithNext", next}, {"Contiguous", contiguous}};
    for (int k = 0; k < 5; k++) {
        for (int regex = 0; regex < 2; regex++) {
            char *want = pieces_ids(root, cases[k].pieces), pre[512];
            snprintf(pre, sizeof pre,
                     "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"%s\": \"%s\"}, "
                     "\"behavior\": \"%s\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                     "\"use_regex\": false}]}",
                     regex ? "Regex" : "String", regex ? "-" : "-", cases[k].behavior);
            set(root, "pre_tokenizer", pre);
            tokenizer *t = load_json("split.json", root);
            char what[128];
            snprintf(what, sizeof what, "Split %s on %s '-'", cases[k].behavior, regex ? "the regex" : "the string");
            if (t) expect_ids(t, "the-final--countdown", want, what);
            tokenizer_free(t);
            free(want);
        }
    }
    /* invert: the matches are the pieces kept apart from the rest */
    static const char *const words[] = {"the", "-", "final", "--", "countdown", NULL};
    char *want = pieces_ids(root, words);
    set(root, "pre_tokenizer", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                               "{\"Regex\": \"\\\\p{L}+\"}, \"behavior\": \"Isolated\", \"invert\": true}, {\"type\": "
                               "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}");
    tokenizer *t = load_json("invert.json", root);
    if (t) expect_ids(t, "the-final--countdown", want, "Split Isolated, invert");
    tokenizer_free(t);
    free(want);
    /* ByteLevel's add_prefix_space: a space before each piece that lacks one */
    static const char *const spaced[] = {" the", " -", " final", " -", " -", " countdown", NULL};
    want = pieces_ids(root, spaced);
    set(root, "pre_tokenizer", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                               "{\"String\": \"-\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
                               "\"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": false}]}");
    t = load_json("prefix.json", root);
    if (t) expect_ids(t, "the-final--countdown", want, "ByteLevel add_prefix_space");
    tokenizer_free(t);
    free(want);
    /* Digits, one a piece */
    static const char *const digits[] = {"Hey ", "1", "2", "3", " friend!", NULL};
    want = pieces_ids(root, digits);
    set(root, "pre_tokenizer", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
                               "\"individual_digits\": true}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                               "\"use_regex\": false}]}");
    t = load_json("digits.json", root);
    if (t) expect_ids(t, "Hey 123 friend!", want, "Digits individual_digits");
    tokenizer_free(t);
    free(want);
    set(root, "pre_tokenizer", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}");
}

/* ---- the post-processor's frame, decoding ---- */

static void test_frame(cJSON *root)
{
    set(root, "post_processor",
        "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, {\"type\": \"TemplateProcessing\", "
        "\"single\": [{\"SpecialToken\": {\"id\": \"<|endoftext|>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
        "\"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"!\", \"type_id\": 0}}], \"pair\": [], \"special_tokens\": "
        "{\"<|endoftext|>\": {\"id\": \"<|endoftext|>\", \"ids\": [50256], \"tokens\": [\"<|endoftext|>\"]}}}]}");
    tokenizer *t = load_json("template.json", root);
    const uint32_t *before, *after;
    int nb, na;
    if (t) {
        tokenizer_frame(t, &before, &nb, &after, &na);
        CHECK(nb == 1 && before[0] == 50256 && na == 1 && after[0] == 0,
              "TemplateProcessing: 50256 before, '!' (0, from the vocabulary) after");
    }
    tokenizer_free(t);
    set(root, "post_processor", "{\"type\": \"RobertaProcessing\", \"sep\": [\"</s>\", 2], \"cls\": [\"<s>\", 0]}");
    t = load_json("roberta.json", root);
    if (t) {
        tokenizer_frame(t, &before, &nb, &after, &na);
        CHECK(nb == 1 && before[0] == 0 && na == 1 && after[0] == 2, "RobertaProcessing: cls before, sep after");
    }
    tokenizer_free(t);
    set(root, "post_processor", "null");
    set(root, "decoder", "null");
    t = load_json("nodecoder.json", root);
    char err[512];
    CHECK(t && tokenizer_can_decode(t, err, sizeof err) != 0 && strstr(err, "decoder"),
          "without a ByteLevel decoder, decoding is refused: %s", t ? err : "");
    tokenizer_free(t);
    set(root, "decoder", "{\"type\": \"ByteLevel\"}");
}

/* ---- refusals and errors ---- */

static void expect_refused(cJSON *root, const char *key, const char *json, int want_status, const char *want_msg)
{
    cJSON *copy = cJSON_Duplicate(root, 1);
    if (json) set(copy, key, json);
    else cJSON_DeleteItemFromObjectCaseSensitive(copy, key);
    int status = 0;
    char err[1024] = "";
    tokenizer *t = tokenizer_load(save("bad.json", copy), &status, err, sizeof err);
    CHECK(!t && status == want_status && strstr(err, want_msg) && strstr(err, "bad.json: ") && !strchr(err, '\n'),
          "%s: exit %d, one line: %s", want_msg, status, err);
    tokenizer_free(t);
    cJSON_Delete(copy);
}

static void test_refusals(cJSON *root)
{
    cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    cJSON *saved = cJSON_Duplicate(model, 1);
    /* other models: only the type is read before the refusal */
    expect_refused(root, "model", "{\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"a\", -1.0]]}", DT_EXIT_USAGE,
                   "model.type 'Unigram' is not implemented");
    expect_refused(root, "model", "{\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}", DT_EXIT_USAGE,
                   "model.type 'WordPiece' is not implemented");
    expect_refused(root, "model", NULL, DT_EXIT_DATA, "model: missing");
    expect_refused(root, "normalizer", "{\"type\": \"Lowercase\"}", DT_EXIT_USAGE,
                   "normalizer.type 'Lowercase' is not implemented");
    cJSON *fb = cJSON_Duplicate(root, 1);
    cJSON_AddTrueToObject(cJSON_GetObjectItemCaseSensitive(fb, "model"), "byte_fallback");
    int status;
    char err[1024];
    tokenizer *t = tokenizer_load(save("fallback.json", fb), &status, err, sizeof err);
    CHECK(!t && status == DT_EXIT_USAGE && strstr(err, "model.byte_fallback true is not implemented"),
          "byte_fallback (Llama 2's SentencePiece BPE): exit %d: %s", status, err);
    cJSON_Delete(fb);
    expect_refused(root, "pre_tokenizer", "{\"type\": \"Metaspace\", \"replacement\": \"_\"}", DT_EXIT_USAGE,
                   "pre_tokenizer.type 'Metaspace' is not implemented");
    expect_refused(root, "pre_tokenizer", "null", DT_EXIT_USAGE, "pre_tokenizer without a ByteLevel step");
    expect_refused(root, "pre_tokenizer",
                   "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                   "\"\\\\w+\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\"}]}",
                   DT_EXIT_USAGE, "pre_tokenizer.pretokenizers[0].pattern.Regex '\\w+': \\w (at offset 0)");
    expect_refused(root, "pre_tokenizer",
                   "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                   "\"(\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\"}]}",
                   DT_EXIT_USAGE, "PCRE2 cannot compile it");
    expect_refused(root, "post_processor", "{\"type\": \"Sparkle\"}", DT_EXIT_USAGE,
                   "post_processor.type 'Sparkle' is not implemented");
    expect_refused(root, "added_tokens",
                   "[{\"id\": 50256, \"content\": \"<|endoftext|>\", \"single_word\": true, \"special\": true}]",
                   DT_EXIT_USAGE, "added_tokens[0].single_word true is not implemented");
    cJSON_ReplaceItemInObjectCaseSensitive(model, "merges", cJSON_Parse("[\"Ġ zzzzzz\"]"));
    expect_refused(root, "decoder", "{\"type\": \"ByteLevel\"}", DT_EXIT_DATA,
                   "model.merges[0]: 'Ġ' + 'zzzzzz': the second token is not in model.vocab");
    cJSON_ReplaceItemInObject(root, "model", saved);

    /* files */
    snprintf(err, sizeof err, "%s/nothing.json", tmpdir);
    t = tokenizer_load(err, &status, err, sizeof err);
    CHECK(!t && status == DT_EXIT_DATA && strstr(err, "nothing.json: cannot read (No such file or directory)"),
          "a missing file: exit %d: %s", status, err);
    char path[512];
    snprintf(path, sizeof path, "%s/broken.json", tmpdir);
    FILE *f = fopen(path, "w");
    fputs("{\"model\": {\"type\": \"BPE\",", f);
    fclose(f);
    t = tokenizer_load(path, &status, err, sizeof err);
    CHECK(!t && status == DT_EXIT_DATA && strstr(err, "broken.json: not valid JSON"), "broken JSON: exit %d: %s",
          status, err);
    /* a folder: its tokenizer.json */
    snprintf(path, sizeof path, "%s/model", tmpdir);
    mkdir(path, 0777);
    save("model/tokenizer.json", root);
    t = tokenizer_load(path, &status, err, sizeof err);
    CHECK(t && strstr(tokenizer_name(t), "model/tokenizer.json"), "a folder: its tokenizer.json (%s)",
          t ? tokenizer_name(t) : err);
    tokenizer_free(t);
}

/* ---- llm.c's two shard kinds, written and read back ---- */

static void test_shards(void)
{
    char prefix[300], err[512];
    snprintf(prefix, sizeof prefix, "%s/wide", tmpdir);
    shard_writer w;
    uint32_t ids[400];
    for (int i = 0; i < 400; i++) ids[i] = (uint32_t)(i * 331 % 128256);
    int ok = shard_writer_open(&w, prefix, "train", 300, 128256, err, sizeof err) == 0 &&
             shard_writer_put(&w, ids, 400, err, sizeof err) == 0 && shard_writer_close(&w, err, sizeof err) == 0;
    CHECK(ok && w.n_shards == 2, "128256 ids: written in 2 shards of <= 300 (%s)", ok ? "" : err);
    char path[400];
    snprintf(path, sizeof path, "%s_train_000000.bin", prefix);
    size_t len;
    unsigned char *bytes = (unsigned char *)read_all(path, &len);
    token_shard_info info;
    ok = bytes && token_shard_check(bytes, len, len, path, &info, err, sizeof err) == 0;
    int32_t h3[3];
    if (bytes) memcpy(h3, bytes, sizeof h3);
    CHECK(ok && h3[0] == 20240801 && h3[1] == 7 && h3[2] == 300 && info.width == 4 && len == 1024 + 4 * 300,
          "llama-3 shard: magic 20240801, version 7, uint32 ids (%s)", ok ? "" : err);
    CHECK(ok && token_shard_id(bytes + 1024, 4, 299) == ids[299], "ids stored as they are");
    free(bytes);
    /* the one header check refuses what it must */
    unsigned char hdr[1024] = {0};
    int32_t gpt2[3] = {20240520, 1, 10};
    memcpy(hdr, gpt2, sizeof gpt2);
    CHECK(token_shard_check(hdr, 1024, 1024 + 20, "g.bin", &info, err, sizeof err) == 0 && info.width == 2,
          "gpt-2 shard: uint16 ids");
    CHECK(token_shard_check(hdr, 1024, 1024 + 40, "g.bin", &info, err, sizeof err) != 0 && strstr(err, "longer"),
          "a gpt-2 header over uint32's bytes: %s", err);
    gpt2[0] = 20240801;
    memcpy(hdr, gpt2, sizeof gpt2);
    CHECK(token_shard_check(hdr, 1024, 1024 + 40, "l.bin", &info, err, sizeof err) != 0 &&
              strstr(err, "unsupported version (1, only version 7 has uint32 tokens)"),
          "llama-3 magic with gpt-2's version: %s", err);
    CHECK(token_shard_magic_known(hdr) && !token_shard_magic_known((const unsigned char *)"\x89PNG"),
          "both magics known, PNG's not");

    /* data.kind tokens reads both kinds in one glob; ids past 65535 stay */
    snprintf(prefix, sizeof prefix, "%s/mixed", tmpdir);
    uint32_t small[100];
    for (int i = 0; i < 100; i++) small[i] = (uint32_t)(i * 7 % 50257);
    ok = shard_writer_open(&w, prefix, "a", 1000, 50257, err, sizeof err) == 0 &&
         shard_writer_put(&w, small, 100, err, sizeof err) == 0 && shard_writer_close(&w, err, sizeof err) == 0;
    ok = ok && shard_writer_open(&w, prefix, "b", 1000, 128256, err, sizeof err) == 0 &&
         shard_writer_put(&w, ids, 100, err, sizeof err) == 0 && shard_writer_close(&w, err, sizeof err) == 0;
    job_spec job;
    memset(&job, 0, sizeof job);
    job.model.kind = MODEL_GPT;
    job.model.seq_len = 199;
    job.model.vocab_size = 128256;
    job.data.kind = DATA_TOKENS;
    job.train.global_batch = 1;
    snprintf(job.data.train_path, sizeof job.data.train_path, "%s_*_000000.bin", prefix);
    snprintf(job.data.val_path, sizeof job.data.val_path, "%s", job.data.train_path);
    data_loader *d = ok ? data_open(&job, DATA_VAL, err, sizeof err) : NULL;
    int x[199], y[199], same = d != NULL;
    if (d) data_batch(d, 0, 0, 1, x, y, NULL, NULL);
    for (int i = 0; d && i < 199; i++) same &= (uint32_t)x[i] == (i < 100 ? small[i] : ids[i - 100]);
    CHECK(same, "data.kind tokens: a gpt-2 and a llama-3 shard read as one stream, ids past 65535 intact (%s)",
          d ? "" : err);
    data_close(d);
    /* ids are checked batch by batch against the model's vocabulary (data.c):
     * the file and the position within it are named, whatever the width */
    job.model.vocab_size = 30000;
    d = data_open(&job, DATA_VAL, err, sizeof err);
    if (d) data_batch(d, 0, 0, 1, x, y, NULL, NULL);
    char msg[1024] = "";
    int faulted = d && data_fault(msg, sizeof msg);
    CHECK(faulted && strstr(msg, "mixed_b_000000.bin: token id 30121 at token 91 of the file is out of the model's "
                                 "vocabulary (model.vocab_size 30000)"),
          "a uint32 id past the vocabulary is refused at its position in its shard: %s", d ? msg : err);
    data_close(d);
}

/* ---- --decode: what the integration test compares with Hugging Face's ---- */

static int decode_tool(const char *tok_path, const char *docs, const char *out_path)
{
    int status;
    char err[2048];
    tokenizer *t = tokenizer_load(tok_path, &status, err, sizeof err);
    if (!t || tokenizer_can_decode(t, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    size_t len;
    char *all = read_all(docs, &len);
    FILE *out = fopen(out_path, "w");
    if (!all || !out) return fprintf(stderr, "cannot read %s or write %s\n", docs, out_path), 1;
    tokenizer_encoder *e = tokenizer_encoder_new(t);
    long n = 0, same = 0;
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text");
        if (!cJSON_IsString(text)) return fprintf(stderr, "%s: a line without text\n", docs), 1;
        token_buf b = {0};
        if (tokenizer_encode(e, text->valuestring, strlen(text->valuestring), &b, err, sizeof err) != 0)
            return fprintf(stderr, "%s\n", err), 1;
        size_t cap = 64, o = 0;
        char *s = malloc(cap);
        for (size_t i = 0; i < b.n; i++) {
            size_t k;
            const char *bytes = tokenizer_token_bytes(t, b.ids[i], &k);
            if (!bytes) continue;
            if (o + k + 1 > cap) s = realloc(s, cap = 2 * (o + k + 1));
            memcpy(s + o, bytes, k);
            o += k;
        }
        s[o] = 0;
        same += o == strlen(text->valuestring) && !memcmp(s, text->valuestring, o);
        cJSON *str = cJSON_CreateString(utf8_text_check(s, o) == o ? s : "(not UTF-8)");
        char *js = cJSON_PrintUnformatted(str);
        fprintf(out, "%s\n", js);
        free(js);
        cJSON_Delete(str);
        free(s);
        token_buf_free(&b);
        cJSON_Delete(j);
        n++;
    }
    fclose(out);
    printf("decode: %ld documents, %ld decode to their own text\n", n, same);
    tokenizer_encoder_free(e);
    tokenizer_free(t);
    free(all);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--decode")) return decode_tool(argv[2], argv[3], argv[4]);
    if (!mkdtemp(tmpdir)) return fprintf(stderr, "cannot make %s\n", tmpdir), 1;
    cJSON *root = gpt2_json();
    tokenizer *t = load_json("gpt2.json", root);
    if (t) test_gpt2_agrees(t);
    tokenizer_free(t);
    test_model(cJSON_Duplicate(root, 1));
    test_split(root);
    test_frame(root);
    test_refusals(root);
    test_shards();
    cJSON_Delete(root);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("# could not remove %s\n", tmpdir);
    CHECK_DONE();
}
