/* test_sft.c — instruction data without a peer (test/integration/
 * sft_tokenize.sh compares with Hugging Face's libraries when node and npm are
 * there): the SFT shard layout written and checked (sft_shard.h,
 * shard_writer.h), each check's refusal; the chat templates' text and the
 * bytes they put in the loss (chat_template.h), the hash a folder's template is
 * recognised by, and what a folder says; one JSONL object to a sample with
 * GPT-2's built-in tokenizer (sft_sample.h) and the lines bad input gets.
 * Run from the repository root (test/run.sh does). */
#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "read_all.h"
#include "lib/text/chat_template.h"
#include "lib/text/sft_sample.h"
#include "lib/text/sft_shard.h"
#include "lib/text/shard_writer.h"
#include "lib/text/tokenizer.h"
#include "lib/util/exit_codes.h"

static char tmp[64];

/* ---- the shard layout ---- */

/* Shard `i` of PREFIX_train checked; its bytes (free them) and *info. */
static unsigned char *load_shard(const char *prefix, int i, sft_shard_info *info, int *ok)
{
    char path[256], err[512];
    snprintf(path, sizeof path, "%s_train_%06d.bin", prefix, i);
    size_t len = 0;
    unsigned char *d = (unsigned char *)read_all(path, &len);
    *ok = d && sft_shard_check(d, len, len, path, info, err, sizeof err) == 0 &&
          sft_shard_check_body(d, info, path, err, sizeof err) == 0;
    if (d && !*ok) printf("# %s\n", err);
    return d;
}

static void test_writer(void)
{
    char prefix[128], err[512];
    snprintf(prefix, sizeof prefix, "%s/s", tmp);
    /* samples of 3, 4, 12 (longer than a shard) and 2 tokens, 8 tokens a shard */
    const size_t len[] = {3, 4, 12, 2};
    for (int wide = 0; wide < 2; wide++) {
        long n_ids = wide ? 128256 : 50257;
        shard_writer w;
        int rc = shard_writer_open_sft(&w, prefix, "train", 8, n_ids, err, sizeof err);
        uint32_t id = wide ? 100000 : 1;
        for (int s = 0; s < 4 && rc == 0; s++) {
            uint32_t ids[16];
            unsigned char mask[16];
            for (size_t k = 0; k < len[s]; k++) ids[k] = id++, mask[k] = k >= 1 && (k + s) % 2;
            rc = shard_writer_put_sample(&w, ids, mask, len[s], err, sizeof err);
        }
        rc = rc || shard_writer_close(&w, err, sizeof err);
        CHECK(rc == 0 && w.n_shards == 3 && w.total == 21 && w.samples == 4,
              "%s ids: 4 samples of 3, 4, 12, 2 tokens in 8-token shards: %d shards, %ld tokens (%s)",
              wide ? "uint32" : "uint16", w.n_shards, w.total, rc ? err : "ok");
        /* shard 0: samples 0 and 1 (7 tokens); 1: sample 2 alone (12 > 8); 2: sample 3 */
        const long want_n[] = {7, 12, 2}, want_s[] = {2, 1, 1};
        uint32_t next = wide ? 100000 : 1;
        int s = 0;
        for (int i = 0; i < 3; i++) {
            sft_shard_info info;
            int ok;
            unsigned char *d = load_shard(prefix, i, &info, &ok);
            int32_t h[256];
            if (d) memcpy(h, d, sizeof h);
            int header = d && h[0] == 20261128 && h[1] == 1 && h[2] == want_n[i] && h[3] == want_s[i] &&
                         h[4] == (wide ? 4 : 2);
            for (int k = 5; d && k < 256; k++) header &= h[k] == 0;
            int body = ok;
            for (long t = 0; ok && t < info.tokens; t++) {
                uint32_t v = 0;
                memcpy(&v, d + info.ids_at + (size_t)t * (size_t)info.width, (size_t)info.width);
                body &= v == next++;
            }
            int64_t at = 0, start = -1;
            for (long k = 0; ok && k < info.samples && s < 4; k++, s++) {
                memcpy(&start, d + info.starts_at + 8 * (size_t)k, 8);
                body &= start == at;
                for (size_t q = 0; q < len[s]; q++)
                    body &= d[info.mask_at + (size_t)at + q] == (q >= 1 && (q + (size_t)s) % 2);
                at += (int64_t)len[s];
            }
            if (ok) memcpy(&start, d + info.starts_at + 8 * (size_t)info.samples, 8);
            body &= ok && start == at && at == info.tokens;
            CHECK(ok && header && body, "%s shard %d: header (magic 20261128, version 1, %ld tokens, %ld samples, "
                  "width %d), ids, masks and starts as written", wide ? "uint32" : "uint16", i, want_n[i], want_s[i],
                  wide ? 4 : 2);
            free(d);
        }
    }
}

static void expect_refused(const char *what, const unsigned char *d, size_t len, int body, const char *want)
{
    sft_shard_info info;
    char err[512] = "";
    int rc = sft_shard_check(d, len, len, "x.bin", &info, err, sizeof err);
    if (rc == 0 && body) rc = sft_shard_check_body(d, &info, "x.bin", err, sizeof err);
    CHECK(rc != 0 && strstr(err, want) && !strchr(err, '\n'), "%s: refused (\"%s\")", what, err);
}

/* starts[k] of the test shard below (1039 bytes in: not 8-aligned) */
static void set_start(unsigned char *c, int k, int64_t v) { memcpy(c + 1039 + 8 * k, &v, 8); }

static void test_checks(void)
{
    /* a good shard of 2 samples (2 and 3 tokens), uint16 ids */
    enum { N = 5, S = 2 };
    size_t size = (size_t)sft_shard_size(N, S, 2);
    CHECK(size == 1024 + 5 * 2 + 5 + 3 * 8, "sft_shard_size: header + N*width + N + (S+1)*8 = %zu", size);
    unsigned char *d = calloc(1, size + 8), *c = malloc(size + 8);
    int32_t h[5] = {20261128, 1, N, S, 2};
    memcpy(d, h, sizeof h);
    const unsigned char mask[N] = {0, 1, 0, 0, 1};
    const int64_t starts[S + 1] = {0, 2, 5};
    memcpy(d + 1024 + 2 * N, mask, N);
    memcpy(d + 1024 + 3 * N, starts, sizeof starts);
    sft_shard_info info;
    char err[512];
    CHECK(sft_shard_check(d, size, size, "x.bin", &info, err, sizeof err) == 0 &&
              sft_shard_check_body(d, &info, "x.bin", err, sizeof err) == 0 && info.tokens == N && info.samples == S &&
              info.mask_at == 1034 && info.starts_at == 1039,
          "a well-formed shard passes; its parts' offsets");
#define MUTATE(what, body, want, ...)                                                                                  \
    do {                                                                                                               \
        memcpy(c, d, size);                                                                                            \
        size_t len = size;                                                                                             \
        __VA_ARGS__;                                                                                                   \
        expect_refused(what, c, len, body, want);                                                                      \
    } while (0)
    MUTATE("llm.c's magic", 0, "wrong magic (20240520, expected 20261128", ((int32_t *)c)[0] = 20240520);
    MUTATE("version 2", 0, "unsupported version (2, only 1)", ((int32_t *)c)[1] = 2);
    MUTATE("id width 3", 0, "id width 3, want 2 or 4", ((int32_t *)c)[4] = 3);
    MUTATE("more samples than tokens", 0, "bad header (5 tokens in 6 samples)", ((int32_t *)c)[3] = 6);
    MUTATE("a byte short", 0, "truncated (header says 5 tokens, 2 samples = 1063 bytes, file has 1062", len--);
    MUTATE("a byte more", 0, "longer than its header says", len++);
    MUTATE("half a header", 0, "truncated (", len = 500);
    MUTATE("starts not from 0", 1, "sample start 0 is 1", set_start(c, 0, 1));
    MUTATE("starts not ending at N", 1, "sample start 2 is 4", set_start(c, 2, 4));
    MUTATE("starts decreasing", 1, "sample start 1 is 0", set_start(c, 1, 0));
    MUTATE("a sample's first token in the loss", 1, "sample 1: its first token (2) has mask 1", c[1034 + 2] = 1);
    MUTATE("mask byte 2", 1, "token 4: mask byte 2 (want 0 or 1)", c[1034 + 4] = 2);
#undef MUTATE
    free(d);
    free(c);
}

/* ---- templates ---- */

/* The rendered text with the loss's bytes in [brackets]. */
static void rendered(const char *name, int gen, const chat_message *m, int n, char *out, size_t cap)
{
    chat_text t = {0};
    out[0] = 0;
    if (chat_template_render(chat_template_named(name), gen, NULL, m, n, &t) != 0) return;
    size_t o = 0, j = 0;
    for (size_t i = 0; i <= t.len && o + 2 < cap; i++) {
        if (j < t.n_spans && i == t.spans[2 * j + 1]) out[o++] = ']', j++;
        if (j < t.n_spans && i == t.spans[2 * j]) out[o++] = '[';
        if (i < t.len) out[o++] = t.text[i];
    }
    out[o] = 0;
    chat_text_free(&t);
}

#define MSG(r, s, tr) {r, s, sizeof s - 1, tr}

static void test_render(void)
{
    const chat_message chat[] = {MSG(CHAT_SYSTEM, "Be brief.", 0), MSG(CHAT_USER, " Hi\n", 0),
                                 MSG(CHAT_ASSISTANT, "\n Hello. ", 1), MSG(CHAT_USER, "Bye", 0),
                                 MSG(CHAT_ASSISTANT, "Bye.", 1)};
    char got[2048];
    rendered("llama3", 0, chat, 5, got, sizeof got);
    CHECK(!strcmp(got, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                       "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n[Hello.<|eot_id|>]"
                       "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n[Bye.<|eot_id|>]"),
          "llama3: BOS, headers, trimmed content; the assistant turns' content and <|eot_id|> in the loss");
    rendered("llama3", 1, chat + 1, 2, got, sizeof got);
    CHECK(!strcmp(got, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n[Hello.<|eot_id|>]"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n"),
          "llama3 as Meta-Llama-3-8B's: the assistant's header after every conversation, not in the loss");
    rendered("llama3.1", 0, chat + 3, 2, got, sizeof got);
    CHECK(!strcmp(got, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
                       "December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
                       "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n[Bye.<|eot_id|>]"),
          "llama3.1: its system turn with the dates even without a system message");
    rendered("chatml", 0, chat + 1, 2, got, sizeof got);
    CHECK(!strcmp(got, "<|im_start|>user\n Hi\n<|im_end|>\n<|im_start|>assistant\n[\n Hello. <|im_end|>]\n"),
          "chatml: content as it is; the reply and <|im_end|> in the loss, not the newline after");
    rendered("qwen2.5", 0, chat + 3, 2, got, sizeof got);
    CHECK(!strcmp(got, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                       "<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n[Bye.<|im_end|>]\n"),
          "qwen2.5: its own system turn first when the conversation has none");
    rendered("qwen2", 0, chat, 3, got, sizeof got);
    CHECK(!strncmp(got, "<|im_start|>system\nBe brief.<|im_end|>\n", 38), "qwen2: the conversation's system turn "
          "instead of its own");
    const chat_message untrained[] = {MSG(CHAT_USER, "Q", 0), MSG(CHAT_ASSISTANT, "A", 0)};
    rendered("smollm2", 0, untrained, 2, got, sizeof got);
    CHECK(strstr(got, "named SmolLM, trained by Hugging Face<|im_end|>") && !strchr(got, '['),
          "smollm2: its system turn; an assistant turn of a prompt is not in the loss");
    CHECK(chat_template_named("chatlm") == NULL && chat_template_named("llama3.1") != NULL &&
              !strcmp(chat_template_end_of_turn(chat_template_named("qwen2")), "<|im_end|>"),
          "templates by name; their end of turn");
}

static void test_recognise(void)
{
    const char *a = "{% for m in messages %}{{ '<|im_start|>' + m['role'] }}{% endfor %}\n";
    const char *b = "{%for  m in messages%}{{'<|im_start|>'+m['role']}}\n{% endfor %}";
    uint64_t ha = chat_template_hash(a, strlen(a));
    CHECK(ha == chat_template_hash(a, strlen(a) - 1), "hash: one trailing newline does not count");
    const char *c = "{%for m in messages%}{{'<|im_start|>'+m['role']}}{%endfor%}";
    CHECK(ha == chat_template_hash(c, strlen(c)), "hash: white space inside tags does not count");
    CHECK(ha != chat_template_hash(b, strlen(b)), "hash: white space outside tags (output) counts");
    const char *d = "{% for m in messages %}{{ '<|im_start|> ' + m['role'] }}{% endfor %}";
    CHECK(ha != chat_template_hash(d, strlen(d)), "hash: white space inside a string literal counts");
    const char *e = "{% for m in messages %}{{ '<|im_start|>' + m['role'] }}{% endfor%}";
    CHECK(ha == chat_template_hash(e, strlen(e)), "hash: '%%}' after a word");
    const char *f = "{% form in messages %}{{ '<|im_start|>' + m['role'] }}{% endfor %}";
    CHECK(ha != chat_template_hash(f, strlen(f)), "hash: the space that parts two words counts");

    /* test/helpers/chat_templates.json's templates, in a folder each */
    size_t len;
    char *text = read_all("test/helpers/chat_templates.json", &len);
    cJSON *all = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(cJSON_IsObject(all), "test/helpers/chat_templates.json is readable (run from the repository root)");
    const cJSON *it;
    char dir[128], path[256], err[1024];
    snprintf(dir, sizeof dir, "%s/tok", tmp);
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    cJSON_ArrayForEach(it, all) {
        if (!cJSON_IsString(it)) continue;
        cJSON *cfg = cJSON_CreateObject();
        cJSON_AddStringToObject(cfg, "chat_template", it->valuestring);
        cJSON *bos = cJSON_AddObjectToObject(cfg, "bos_token");
        cJSON_AddStringToObject(bos, "content", "<|begin_of_text|>");
        cJSON_AddStringToObject(cfg, "eos_token", "<|eot_id|>");
        char *json = cJSON_Print(cfg);
        FILE *fp = fopen(path, "w");
        fputs(json, fp);
        fclose(fp);
        free(json);
        cJSON_Delete(cfg);
        tokenizer_config tc;
        const chat_template *t = NULL;
        int gen = -1;
        const char *whose = NULL;
        int rc = tokenizer_config_read(dir, &tc, err, sizeof err) ||
                 chat_template_recognise(&tc, &t, &gen, &whose, err, sizeof err);
        CHECK(rc == 0 && t && !strcmp(chat_template_name(t), it->string) && gen == 0 && whose &&
                  !strcmp(tc.bos, "<|begin_of_text|>") && !strcmp(tc.eos, "<|eot_id|>") && !strcmp(tc.source, path),
              "%s's template recognised as %s (%s); bos_token as an object, eos_token as a string", whose ? whose : "?",
              it->string, rc ? err : "ok");
        tokenizer_config_free(&tc);
    }
    cJSON_Delete(all);

    /* an unknown template: one line naming the file, what it looks like, the hash */
    FILE *fp = fopen(path, "w");
    fputs("{\"chat_template\": \"{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}\"}", fp);
    fclose(fp);
    tokenizer_config tc;
    const chat_template *t = NULL;
    int gen;
    const char *whose;
    int rc = tokenizer_config_read(dir, &tc, err, sizeof err);
    rc = rc || chat_template_recognise(&tc, &t, &gen, &whose, err, sizeof err) != -1;
    char want[400];
    snprintf(want, sizeof want, "%s: chat_template (62 bytes, ChatML-like: <|im_start|>, hash ", path);
    CHECK(rc == 0 && !t && !strncmp(err, want, strlen(want)) && strstr(err, "is not one dtrun knows") &&
              !strchr(err, '\n'),
          "an unknown template: one line (%s)", err);
    tokenizer_config_free(&tc);
    /* chat_template.jinja wins over tokenizer_config.json's, as in transformers */
    char jinja[256];
    snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", dir);
    fp = fopen(jinja, "w");
    fputs("{{ bos_token }}", fp);
    fclose(fp);
    rc = tokenizer_config_read(dir, &tc, err, sizeof err);
    CHECK(rc == 0 && tc.template && !strcmp(tc.template, "{{ bos_token }}") && !strcmp(tc.source, jinja),
          "chat_template.jinja is the folder's template when both are there");
    tokenizer_config_free(&tc);
    unlink(jinja);
    fp = fopen(path, "w");
    fputs("{\"chat_template\": 7", fp);
    fclose(fp);
    rc = tokenizer_config_read(dir, &tc, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "tokenizer_config.json: not valid JSON"), "a broken tokenizer_config.json: %s", err);
    unlink(path);
    rc = tokenizer_config_read(dir, &tc, err, sizeof err);
    CHECK(rc == 0 && !tc.template && !tc.bos[0], "a folder without tokenizer_config.json: no template, no error");
    tokenizer_config_free(&tc);
    rmdir(dir);
}

/* ---- samples ---- */

static void encode(const tokenizer *tok, const char *s, token_buf *out)
{
    tokenizer_encoder *e = tokenizer_encoder_new(tok);
    char err[256];
    if (!e || tokenizer_encode(e, s, strlen(s), out, err, sizeof err) != 0) printf("# encode failed\n");
    tokenizer_encoder_free(e);
}

/* One JSON line through sft_encode: the status and err. */
static int line(sft_encoder *e, const char *json, token_buf *ids, mask_buf *mask, char *err, size_t cap)
{
    cJSON *o = cJSON_Parse(json);
    err[0] = 0;
    int rc = sft_encode(e, o, "d.jsonl", 7, ids, mask, err, cap);
    cJSON_Delete(o);
    return rc;
}

static void test_samples(void)
{
    char err[1024];
    tokenizer *tok = tokenizer_gpt2(err, sizeof err);
    CHECK(tok != NULL, "GPT-2's built-in tokenizer");
    if (!tok) return;
    sft_recipe r = {.tok = tok, .shape = SFT_ANY, .no_template_why = "GPT-2's built-in tokenizer has none"};
    CHECK(sft_recipe_check(&r, "", err, sizeof err) == 0 && r.n_before == 0 && r.n_after == 1 && r.after[0] == 50256,
          "no template with GPT-2: nothing before, <|endoftext|> (50256) after");
    sft_encoder *e = sft_encoder_new(&r);
    token_buf ids = {0}, p = {0}, c = {0};
    mask_buf mask = {0};
    int rc = line(e, "{\"prompt\": \"Q: what is two and two?\\nA:\", \"completion\": \" Four, said the fox.\"}", &ids,
                  &mask, err, sizeof err);
    encode(tok, "Q: what is two and two?\nA:", &p);
    encode(tok, " Four, said the fox.", &c);
    int same = rc == 0 && ids.n == p.n + c.n + 1 && mask.n == ids.n && ids.ids[ids.n - 1] == 50256;
    for (size_t k = 0; same && k < p.n; k++) same = ids.ids[k] == p.ids[k] && mask.b[k] == 0;
    for (size_t k = 0; same && k <= c.n; k++)
        same = (k == c.n || ids.ids[p.n + k] == c.ids[k]) && mask.b[p.n + k] == 1;
    CHECK(same, "prompt/completion: the prompt's ids out of the loss, the completion's and <|endoftext|> in (%zu ids, "
          "%s)", ids.n, rc ? err : "ok");
    size_t before = ids.n;
    rc = line(e, "{\"prompt\": \"\", \"completion\": \"Only a completion\"}", &ids, &mask, err, sizeof err);
    CHECK(rc == 0 && ids.n > before + 1 && mask.b[before] == 0 && mask.b[before + 1] == 1 && mask.b[ids.n - 1] == 1,
          "a sample's first token is never in the loss (an empty prompt); appended after the last sample");
    struct {
        const char *json, *want;
        int status;
    } bad[] = {
        {"{\"text\": \"plain\"}", "d.jsonl:7: no 'prompt'/'completion', 'messages' or 'conversations' field", 3},
        {"{\"prompt\": \"a\"}", "d.jsonl:7: a 'prompt' without a 'completion'", 3},
        {"{\"completion\": \"a\"}", "d.jsonl:7: a 'completion' without a 'prompt'", 3},
        {"{\"prompt\": \"a\", \"completion\": 5}", "d.jsonl:7: completion is a number (want two strings", 3},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"tool\", \"content\": \"b\"}]}",
         "d.jsonl:7: messages[1].role 'tool' is not system, user or assistant", 3},
        {"{\"messages\": [{\"role\": \"user\"}]}", "d.jsonl:7: messages[0] has no 'content'", 3},
        {"{\"messages\": [{\"content\": \"a\"}]}", "d.jsonl:7: messages[0] has no 'role'", 3},
        {"{\"messages\": [{\"role\": \"user\", \"content\": null}]}", "messages[0].content is null, not a string", 3},
        {"{\"messages\": {}}", "d.jsonl:7: messages is an object, not a list of messages", 3},
        {"{\"messages\": []}", "d.jsonl:7: messages is an empty list", 3},
        {"{\"messages\": [\"hi\"]}", "d.jsonl:7: messages[0] is a string, not a message object", 3},
        {"{\"conversations\": [{\"from\": \"bot\", \"value\": \"b\"}]}",
         "d.jsonl:7: conversations[0].from 'bot' is not system, human or gpt", 3},
        {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": []}]}",
         "messages[0] has tool_calls", 3},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}",
         "d.jsonl:7: chat messages need a chat template, and GPT-2's built-in tokenizer has none", 2},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        before = ids.n;
        rc = line(e, bad[k].json, &ids, &mask, err, sizeof err);
        CHECK(rc == bad[k].status && strstr(err, bad[k].want) && !strchr(err, '\n'), "%s: exit %d: %s", bad[k].json,
              rc, err);
        ids.n = mask.n = before;
    }
    sft_encoder_free(e);
    sft_recipe m = {.tok = tok, .shape = SFT_MESSAGES};
    CHECK(sft_recipe_check(&m, "", err, sizeof err) == 0, "--format messages");
    e = sft_encoder_new(&m);
    rc = line(e, "{\"prompt\": \"a\", \"completion\": \"b\"}", &ids, &mask, err, sizeof err);
    CHECK(rc == 3 && strstr(err, "d.jsonl:7: no 'messages' (or 'conversations') field (--format messages)"),
          "--format messages refuses a prompt/completion line: %s", err);
    sft_encoder_free(e);
    sft_recipe t = {.tok = tok, .tmpl = chat_template_named("chatml")};
    rc = sft_recipe_check(&t, "", err, sizeof err);
    CHECK(rc == -1 && strstr(err, "chat template chatml: GPT-2 (built in) has no added token <|im_start|>"),
          "a template whose markers are not tokens of the tokenizer is refused: %s", err);
    token_buf_free(&ids);
    token_buf_free(&p);
    token_buf_free(&c);
    mask_buf_free(&mask);
    tokenizer_free(tok);
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/test_sft.XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    test_writer();
    test_checks();
    test_render();
    test_recognise();
    test_samples();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) printf("# could not remove %s\n", tmp);
    CHECK_DONE();
}
