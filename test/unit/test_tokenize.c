/* test_tokenize.c — GPT-2's BPE in C against the reference: every document of
 * test/tokenize/corpus gives the ids that the npm package gpt-3-encoder gave
 * (test/tokenize/reference_ids.txt, with the command that made it); plus the
 * pieces of the pre-tokenizer, the character classes, the UTF-8 check and the
 * vocabulary's shape. Run from the repository root (test/run.sh does). */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "read_all.h"
#include "lib/text/bpe.h"
#include "lib/text/pretokenize.h"
#include "lib/text/tokenizer.h"
#include "lib/text/unicode_class.h"
#include "lib/text/utf8_text.h"

/* The pieces of s joined by '|'. */
static void pieces(const char *s, char *out, size_t cap)
{
    size_t n = strlen(s), o = 0;
    for (size_t i = 0; i < n;) {
        size_t end = gpt2_piece_end(s, n, i);
        if (i && o + 1 < cap) out[o++] = '|';
        for (size_t k = i; k < end && o + 1 < cap; k++) out[o++] = s[k];
        i = end;
    }
    out[o] = 0;
}

static void check_pieces(const char *s, const char *want)
{
    char got[512];
    pieces(s, got, sizeof got);
    CHECK(!strcmp(got, want), "pieces of \"%s\": \"%s\" (want \"%s\")", s, got, want);
}

/* The text of document NAME (FILE or FILE:LINE) of the corpus. */
static char *document(const char *name, size_t *len)
{
    char path[512];
    const char *colon = strchr(name, ':');
    snprintf(path, sizeof path, "test/tokenize/corpus/%.*s", colon ? (int)(colon - name) : (int)strlen(name), name);
    char *all = read_all(path, len);
    if (!all || !colon) return all;
    int want = atoi(colon + 1), line = 1;
    char *p = all;
    while (line < want && (p = strchr(p, '\n'))) p++, line++;
    char *nl = p ? strchr(p, '\n') : NULL;
    if (nl) *nl = 0;
    cJSON *j = p ? cJSON_Parse(p) : NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "text");
    char *text = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
    *len = text ? strlen(text) : 0;
    cJSON_Delete(j);
    free(all);
    return text;
}

/* The ids of text by the built-in GPT-2 tokenizer (what `dtrun tokenize` runs). */
static void encode(const tokenizer *t, const char *text, size_t n, token_buf *out)
{
    tokenizer_encoder *e = tokenizer_encoder_new(t);
    char err[256];
    if (!e || tokenizer_encode(e, text, n, out, err, sizeof err) != 0) printf("# encode failed\n");
    tokenizer_encoder_free(e);
}

static void test_reference(const tokenizer *v)
{
    size_t len;
    char *ref = read_all("test/tokenize/reference_ids.txt", &len);
    CHECK(ref != NULL, "test/tokenize/reference_ids.txt is readable (run from the repository root)");
    if (!ref) return;
    int docs = 0, same = 0;
    size_t bytes = 0, ids = 0;
    for (char *line = strtok(ref, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char *sp = strchr(line, ' ');
        if (sp) *sp = 0;
        size_t n;
        char *text = document(line, &n);
        CHECK(text != NULL, "%s: document found", line);
        if (!text) continue;
        token_buf got = {0};
        encode(v, text, n, &got);
        size_t k = 0, first_diff = (size_t)-1;
        for (char *p = sp ? sp + 1 : line + strlen(line); *p;) {
            char *end;
            long id = strtol(p, &end, 10);
            if (end == p) break;
            if (first_diff == (size_t)-1 && (k >= got.n || got.ids[k] != (uint32_t)id)) first_diff = k;
            k++;
            p = end;
        }
        if (first_diff == (size_t)-1 && k != got.n) first_diff = k < got.n ? k : got.n;
        CHECK(first_diff == (size_t)-1, "%s: %zu bytes -> %zu ids equal the reference's %zu%s", line, n, got.n, k,
              first_diff == (size_t)-1 ? "" : " (they differ from this index on)");
        if (first_diff != (size_t)-1) printf("    first difference at id %zu\n", first_diff);
        docs++;
        same += first_diff == (size_t)-1;
        bytes += n;
        ids += got.n;
        token_buf_free(&got);
        free(text);
    }
    CHECK(docs >= 12 && same == docs, "%d of %d reference documents identical (%zu bytes, %zu ids)", same, docs,
          bytes, ids);
    free(ref);
}

static void test_vocab(const bpe_vocab *v)
{
    CHECK(bpe_vocab_size(v) == 50257, "GPT-2 vocabulary: %d tokens", bpe_vocab_size(v));
    CHECK(bpe_vocab_merges(v) == 50000, "GPT-2 merges: %d", bpe_vocab_merges(v));
    CHECK(bpe_vocab_eot(v) == 50256, "<|endoftext|> is id %d", bpe_vocab_eot(v));
    size_t n;
    const char *b = bpe_token_bytes(v, 220, &n);
    CHECK(n == 1 && b[0] == ' ', "id 220 is the space byte");
    b = bpe_token_bytes(v, 995, &n);
    CHECK(n == 6 && !memcmp(b, " world", 6), "id 995 is \" world\"");
}

/* Decoding the ids gives the text back, byte for byte. */
static void test_roundtrip(const tokenizer *tok)
{
    const char *text = "Round trip: naïve 😀 \t\n  x  ";
    token_buf t = {0};
    encode(tok, text, strlen(text), &t);
    char back[256];
    size_t o = 0;
    for (size_t k = 0; k < t.n; k++) {
        size_t n;
        const char *b = tokenizer_token_bytes(tok, t.ids[k], &n);
        if (b && o + n < sizeof back) memcpy(back + o, b, n), o += n;
    }
    back[o] = 0;
    CHECK(!strcmp(back, text), "decode(encode(text)) == text (%zu ids)", t.n);
    token_buf_free(&t);
}

static void test_classes(void)
{
    CHECK(unicode_class_of('a') == UC_LETTER && unicode_class_of('Z') == UC_LETTER, "ASCII letters");
    CHECK(unicode_class_of('7') == UC_NUMBER && unicode_class_of(0xbd) == UC_NUMBER, "7 and ½ are numbers");
    CHECK(unicode_class_of(0x2167) == UC_NUMBER, "Roman numeral eight (Nl) is a number");
    CHECK(unicode_class_of(0x4e2d) == UC_LETTER && unicode_class_of(0x1d518) == UC_LETTER,
          "CJK and mathematical Fraktur are letters");
    CHECK(unicode_class_of(0x0301) == UC_OTHER, "a combining accent (Mn) is neither letter nor number");
    CHECK(unicode_class_of(0x1f600) == UC_OTHER, "emoji are 'other'");
    CHECK(unicode_class_of(' ') == UC_SPACE && unicode_class_of(0x3000) == UC_SPACE &&
              unicode_class_of(0x85) == UC_SPACE && unicode_class_of(0x2028) == UC_SPACE,
          "space, U+3000, U+0085 (NEL) and U+2028 are White_Space");
    CHECK(unicode_class_of(0xfeff) == UC_OTHER && unicode_class_of(0x200b) == UC_OTHER &&
              unicode_class_of(0x1c) == UC_OTHER,
          "U+FEFF, U+200B and U+001C are not White_Space (Python's regex agrees; JavaScript's \\s takes U+FEFF)");
    CHECK(unicode_class_of(0x110000) == UC_OTHER, "past U+10FFFF: other");
    printf("# table: Unicode %s\n", unicode_class_version());
}

static void test_pieces(void)
{
    check_pieces("Hello world", "Hello| world");
    check_pieces("I'm don't you're we'll they've he'd it's", "I|'m| don|'t| you|'re| we|'ll| they|'ve| he|'d| it|'s");
    check_pieces("'S 's 'sa ''s", "'|S| '|s| '|sa| ''|s");
    check_pieces("a  b", "a| | b");
    check_pieces("a   b", "a|  | b");
    check_pieces("a \n b", "a| \n| b");
    check_pieces("x\ny", "x|\n|y");
    check_pieces("end   ", "end|   ");
    check_pieces("  !!x", " | !!|x");
    check_pieces("abc123 456!?", "abc|123| 456|!?");
    check_pieces("e\xcc\x81t\xc3\xa9", "e|\xcc\x81|t\xc3\xa9");
    check_pieces("\xc2\xa0word", "\xc2\xa0|word");
}

static void test_utf8(void)
{
    CHECK(utf8_text_check("plain ascii text!", 17) == 17, "ASCII is valid");
    CHECK(utf8_text_check("na\xc3\xafve \xf0\x9f\x98\x80", 11) == 11, "two- and four-byte sequences");
    CHECK(utf8_text_check("abcdefghij\xff", 11) == 10, "0xff found at its offset");
    CHECK(utf8_text_check("ab\xc3", 3) == 2, "a truncated sequence at the end");
    CHECK(utf8_text_check("\xc0\xaf", 2) == 0, "an overlong '/' is refused");
    CHECK(utf8_text_check("x\xed\xa0\x80", 4) == 1, "a surrogate is refused");
    CHECK(utf8_text_check("\xf4\x90\x80\x80", 4) == 0, "past U+10FFFF is refused");
    CHECK(utf8_text_check("Latin-1 caf\xe9 au lait", 20) == 11, "Latin-1 text is not UTF-8");
}

int main(void)
{
    test_utf8();
    test_classes();
    test_pieces();
    char err[512];
    bpe_vocab *v = bpe_vocab_gpt2(err, sizeof err);
    CHECK(v != NULL, "GPT-2 vocabulary loads from the binary: %s", v ? "yes" : err);
    if (v) test_vocab(v);
    bpe_vocab_free(v);
    tokenizer *t = tokenizer_gpt2(err, sizeof err);
    CHECK(t != NULL, "the built-in GPT-2 tokenizer: %s", t ? "yes" : err);
    if (t) {
        test_roundtrip(t);
        test_reference(t);
    }
    tokenizer_free(t);
    const char *bad_json = "{\"a\": 0, \"b\": 5}";
    bpe_vocab *w = bpe_vocab_parse(bad_json, strlen(bad_json), "#version\n", 9, err, sizeof err);
    CHECK(w == NULL && strstr(err, "not an integer in [0, 2)"), "an id out of range: %s", err);
    CHECK_DONE();
}
