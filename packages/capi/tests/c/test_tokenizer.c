/* libriftco's tokenizer from C: create/use/free of every handle and every error path.
 *
 * Fixtures come from packages/capi/tokenizer/tests/fixtures (make_fixtures.py writes them
 * with riftco-text; see find_fixtures). c_cases.txt holds riftco-text's ids for the hard
 * strings; everything else is checked against the library's own contract (round trips, the
 * buffer convention, typed refusals). Exit status 0 when every check passes; run it under AddressSanitizer or valgrind
 * to check for leaks and invalid accesses. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "riftco.h"

static int failures = 0;
static int checks = 0;

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        checks++;                                                                         \
        if (!(cond)) {                                                                    \
            failures++;                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, " (last error: %s)\n", riftco_last_error());                  \
        }                                                                                 \
    } while (0)

#define OK(call) CHECK((int)(call) == RIFTCO_STATUS_OK, "%s", #call)
#define FAILS(call, status) CHECK((int)(call) == (int)(status), "%s", #call)

static char fixtures[4096];

static const char *fixture(const char *name) {
    static char path[8192];
    snprintf(path, sizeof path, "%s/%s", fixtures, name);
    return path;
}

static int has_cases(const char *folder) {
    char path[8192];
    snprintf(path, sizeof path, "%s/c_cases.txt", folder);
    FILE *f = fopen(path, "r");
    if (f != NULL) fclose(f);
    return f != NULL;
}

/* argv[1] when it is the fixtures folder (a harness may pass other arguments), else
 * $RIFTCO_TOKENIZER_FIXTURES, else the folder found from this file's path. */
static void find_fixtures(int argc, char **argv) {
    const char *env = getenv("RIFTCO_TOKENIZER_FIXTURES");
    if (argc > 1 && has_cases(argv[1])) {
        snprintf(fixtures, sizeof fixtures, "%s", argv[1]);
    } else if (env != NULL) {
        snprintf(fixtures, sizeof fixtures, "%s", env);
    } else {
        const char *here = __FILE__; /* .../packages/capi/tests/c/test_tokenizer.c */
        const char *slash = strrchr(here, '/');
        int len = slash ? (int)(slash - here) : 0;
        snprintf(fixtures, sizeof fixtures, "%.*s%s../../tokenizer/tests/fixtures", len, here,
                 len ? "/" : "");
    }
}

/* Encode with the size query, then into a buffer of exactly that size. */
static uint32_t *encode(const RiftcoTokenizer *tok, const char *text, size_t len, uint32_t flags,
                        size_t *n) {
    OK(riftco_tokenizer_encode(tok, (const uint8_t *)text, len, flags, NULL, 0, n));
    uint32_t *ids = malloc((*n ? *n : 1) * sizeof *ids);
    size_t again = 0;
    OK(riftco_tokenizer_encode(tok, (const uint8_t *)text, len, flags, ids, *n, &again));
    CHECK(again == *n, "%zu != %zu", again, *n);
    return ids;
}

static uint8_t *decode(const RiftcoTokenizer *tok, const uint32_t *ids, size_t n_ids,
                       uint32_t flags, size_t *n) {
    OK(riftco_tokenizer_decode(tok, ids, n_ids, flags, NULL, 0, n));
    uint8_t *out = malloc(*n ? *n : 1);
    OK(riftco_tokenizer_decode(tok, ids, n_ids, flags, out, *n, n));
    return out;
}

static size_t unhex(const char *hex, uint8_t *out) {
    size_t n = 0;
    if (strcmp(hex, "-") == 0) return 0;
    for (; hex[0] && hex[1]; hex += 2) {
        unsigned v;
        sscanf(hex, "%2x", &v);
        out[n++] = (uint8_t)v;
    }
    return n;
}

/* riftco-text's ids for the hard strings (c_cases.txt), and decode gives the text back. */
static void test_cases(const RiftcoTokenizer *tok) {
    FILE *f = fopen(fixture("c_cases.txt"), "r");
    CHECK(f != NULL, "cannot open %s", fixture("c_cases.txt"));
    if (f == NULL) return;
    static char line[1 << 16];
    static char hex[1 << 15];
    static uint8_t text[1 << 14];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        unsigned flags;
        int used = 0;
        if (sscanf(line, "%u %32767s %n", &flags, hex, &used) != 2) continue;
        size_t len = unhex(hex, text);
        uint32_t want[4096];
        size_t n_want = 0;
        const char *p = line + used;
        unsigned id;
        int k;
        while (sscanf(p, "%u%n", &id, &k) == 1) {
            want[n_want++] = id;
            p += k;
        }
        size_t n = 0;
        uint32_t *ids = encode(tok, (const char *)text, len, flags, &n);
        CHECK(n == n_want && memcmp(ids, want, n * sizeof *ids) == 0, "ids of case %d", cases);
        size_t n_bytes = 0;
        uint8_t *back = decode(tok, ids, n, 0, &n_bytes);
        CHECK(n_bytes == len && memcmp(back, text, len) == 0, "decode of case %d", cases);
        free(back);
        free(ids);
        cases++;
    }
    fclose(f);
    CHECK(cases >= 20, "only %d cases", cases);
}

/* The streaming decoder gives back exactly the text, token by token, always whole UTF-8. */
static void test_decoder(const RiftcoTokenizer *tok) {
    const char *text = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 x\xc2\xb2 done";
    size_t n = 0;
    uint32_t *ids = encode(tok, text, strlen(text), RIFTCO_ENCODE_BYTES, &n);
    RiftcoTokenDecoder *dec = NULL;
    OK(riftco_tokenizer_decoder_new(tok, 0, &dec));
    char out[256] = {0};
    size_t used = 0;
    uint8_t small[2];
    for (size_t k = 0; k < n; k++) {
        size_t got = 0;
        uint8_t *buf = malloc(RIFTCO_TOKENIZER_MAX_PUSH_BYTES);
        int st = riftco_tokenizer_decoder_push(dec, ids[k], small, sizeof small, &got);
        if (st != RIFTCO_STATUS_OK) { /* too small: nothing taken; retry larger */
            CHECK(st == RIFTCO_STATUS_INVALID_ARGUMENT && got > sizeof small, "push %zu", k);
            OK(riftco_tokenizer_decoder_push(dec, ids[k], buf, RIFTCO_TOKENIZER_MAX_PUSH_BYTES,
                                             &got));
        } else {
            memcpy(buf, small, got);
        }
        memcpy(out + used, buf, got);
        used += got;
        free(buf);
    }
    size_t got = 0;
    uint8_t end[3];
    OK(riftco_tokenizer_decoder_flush(dec, end, sizeof end, &got));
    CHECK(got == 0, "nothing held back at the end, found %zu bytes", got);
    CHECK(used == strlen(text) && memcmp(out, text, used) == 0, "streamed text %.*s", (int)used,
          out);

    /* a lone lead byte is held back, then flushed as U+FFFD */
    uint32_t lead = 0xe2; /* id 0xe2 is the byte 0xe2 in a byte-level BPE */
    OK(riftco_tokenizer_decoder_push(dec, lead, end, sizeof end, &got));
    CHECK(got == 0, "an incomplete character is held back");
    FAILS(riftco_tokenizer_decoder_flush(dec, end, 2, &got), RIFTCO_STATUS_INVALID_ARGUMENT);
    CHECK(got == 3, "U+FFFD needs 3 bytes");
    OK(riftco_tokenizer_decoder_flush(dec, end, sizeof end, &got));
    CHECK(got == 3 && memcmp(end, "\xef\xbf\xbd", 3) == 0, "U+FFFD at the end");
    uint32_t size = 0;
    OK(riftco_tokenizer_vocab_size(tok, &size));
    FAILS(riftco_tokenizer_decoder_push(dec, size, end, sizeof end, &got),
          RIFTCO_STATUS_INVALID_ARGUMENT);
    OK(riftco_tokenizer_decoder_free(dec));
    free(ids);
}

static void test_special_and_chat(const RiftcoTokenizer *tok) {
    uint32_t eos = 0, end = 0, user = 0, assistant = 0, base = 0;
    OK(riftco_tokenizer_base_vocab_size(tok, &base));
    OK(riftco_tokenizer_eos_id(tok, &eos));
    OK(riftco_tokenizer_special_token(tok, "<|end|>", &end));
    OK(riftco_tokenizer_special_token(tok, "<|user|>", &user));
    OK(riftco_tokenizer_special_token(tok, "<|assistant|>", &assistant));
    CHECK(eos == base, "the first special id follows the ordinary ones");
    FAILS(riftco_tokenizer_special_token(tok, "<|nope|>", &end), RIFTCO_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(riftco_last_error(), "<|nope|>") != NULL, "the error names the token");

    uint32_t stops[16];
    size_t n = 0;
    OK(riftco_tokenizer_stop_ids(tok, false, stops, 16, &n));
    CHECK(n == 1 && stops[0] == eos, "plain stop ids: end of text");
    OK(riftco_tokenizer_stop_ids(tok, true, NULL, 0, &n));
    CHECK(n >= 3, "chat stop ids: %zu", n);
    OK(riftco_tokenizer_stop_ids(tok, true, stops, 16, &n));
    CHECK(stops[0] == eos && stops[1] == end, "end of text, then the assistant's end marker");

    const char *roles[] = {"system", "user"};
    const char *contents[] = {"Be brief.", "Hi <|end|> there"};
    OK(riftco_tokenizer_apply_chat_template(tok, roles, contents, NULL, 2, true, NULL, 0, &n));
    uint32_t *ids = malloc(n * sizeof *ids);
    size_t n2 = 0;
    FAILS(riftco_tokenizer_apply_chat_template(tok, roles, contents, NULL, 2, true, ids, n - 1,
                                               &n2),
          RIFTCO_STATUS_INVALID_ARGUMENT);
    CHECK(n2 == n, "a small buffer is told the size needed");
    OK(riftco_tokenizer_apply_chat_template(tok, roles, contents, NULL, 2, true, ids, n, &n2));
    CHECK(ids[n - 1] == assistant, "the generation prompt comes last");
    int ends = 0;
    for (size_t k = 0; k < n; k++) ends += ids[k] == end;
    CHECK(ends == 2, "content cannot forge <|end|>: %d end markers", ends);
    free(ids);

    const char *bad_roles[] = {"robot"};
    FAILS(riftco_tokenizer_apply_chat_template(tok, bad_roles, contents, NULL, 1, false, NULL, 0,
                                               &n),
          RIFTCO_STATUS_INVALID_ARGUMENT);
    const char *bad_utf8[] = {"\xff"};
    size_t lens[] = {1};
    FAILS(riftco_tokenizer_apply_chat_template(tok, roles, bad_utf8, lens, 1, false, NULL, 0, &n),
          RIFTCO_STATUS_INVALID_ARGUMENT);
    FAILS(riftco_tokenizer_apply_chat_template(tok, NULL, contents, NULL, 1, false, NULL, 0, &n),
          RIFTCO_STATUS_NULL_HANDLE);
}

static void test_errors(const RiftcoTokenizer *tok) {
    RiftcoTokenizer *none = (RiftcoTokenizer *)1;
    FAILS(riftco_tokenizer_load(NULL, &none), RIFTCO_STATUS_NULL_HANDLE);
    FAILS(riftco_tokenizer_load(fixture("missing.json"), &none), RIFTCO_STATUS_IO);
    CHECK(none == NULL, "a failed load gives NULL");
    FAILS(riftco_tokenizer_load(fixtures, &none), RIFTCO_STATUS_IO); /* a folder */
    FAILS(riftco_tokenizer_load("/dev/zero", &none), RIFTCO_STATUS_IO);
    FAILS(riftco_tokenizer_load(fixture("c_cases.txt"), &none), RIFTCO_STATUS_LIMIT);
    const char *bad = "{\"format\": \"riftco-text/tokenizer\", \"format_version\": 9}";
    FAILS(riftco_tokenizer_load_json((const uint8_t *)bad, strlen(bad), &none),
          RIFTCO_STATUS_UNSUPPORTED);
    CHECK(strstr(riftco_last_error(), "newer") != NULL, "names a newer version");
    FAILS(riftco_tokenizer_load_json((const uint8_t *)"[1,", 3, &none), RIFTCO_STATUS_FORMAT);
    FAILS(riftco_tokenizer_load_json(NULL, 5, &none), RIFTCO_STATUS_NULL_HANDLE);

    uint32_t v = 0;
    size_t n = 0;
    FAILS(riftco_tokenizer_vocab_size(NULL, &v), RIFTCO_STATUS_NULL_HANDLE);
    FAILS(riftco_tokenizer_vocab_size(tok, NULL), RIFTCO_STATUS_NULL_HANDLE);
    RiftcoTokenDecoder *dec = NULL;
    OK(riftco_tokenizer_decoder_new(tok, 0, &dec));
    FAILS(riftco_tokenizer_vocab_size((const RiftcoTokenizer *)dec, &v),
          RIFTCO_STATUS_WRONG_HANDLE);
    FAILS(riftco_tokenizer_decoder_push((RiftcoTokenDecoder *)tok, 0, NULL, 0, &n),
          RIFTCO_STATUS_WRONG_HANDLE);
    OK(riftco_tokenizer_decoder_free(dec));
    FAILS(riftco_tokenizer_decoder_new(tok, 4, &dec), RIFTCO_STATUS_INVALID_ARGUMENT);
    CHECK(dec == NULL, "a failed decoder_new gives NULL");
    OK(riftco_tokenizer_decoder_new(tok, RIFTCO_DECODE_SKIP_SPECIAL, &dec));
    OK(riftco_tokenizer_decoder_free(dec));
    OK(riftco_tokenizer_decoder_free(NULL));
    OK(riftco_tokenizer_free(NULL));

    FAILS(riftco_tokenizer_encode(tok, (const uint8_t *)"a\xff", 2, 0, NULL, 0, &n),
          RIFTCO_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(riftco_last_error(), "offset 1") != NULL, "names the offset");
    FAILS(riftco_tokenizer_encode(tok, (const uint8_t *)"a", 1, 3, NULL, 0, &n),
          RIFTCO_STATUS_INVALID_ARGUMENT);
    FAILS(riftco_tokenizer_encode(tok, (const uint8_t *)"a", 1, 64, NULL, 0, &n),
          RIFTCO_STATUS_INVALID_ARGUMENT);
    FAILS(riftco_tokenizer_encode(tok, NULL, 1, 0, NULL, 0, &n), RIFTCO_STATUS_NULL_HANDLE);
    FAILS(riftco_tokenizer_encode(tok, (const uint8_t *)"a", 1, 0, NULL, 0, NULL),
          RIFTCO_STATUS_NULL_HANDLE);
    OK(riftco_tokenizer_encode(tok, NULL, 0, 0, NULL, 0, &n));
    CHECK(n == 0, "empty text, no ids");
    uint32_t one = 0;
    FAILS(riftco_tokenizer_encode(tok, (const uint8_t *)"hello world", 11, 0, &one, 1, &n),
          RIFTCO_STATUS_INVALID_ARGUMENT);
    uint32_t size = 0;
    OK(riftco_tokenizer_vocab_size(tok, &size));
    uint32_t ids[2] = {0, size};
    FAILS(riftco_tokenizer_decode(tok, ids, 2, 0, NULL, 0, &n), RIFTCO_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(riftco_last_error(), "position 1") != NULL, "names the position");
    FAILS(riftco_tokenizer_token_bytes(tok, size, NULL, 0, &n), RIFTCO_STATUS_INVALID_ARGUMENT);
    OK(riftco_tokenizer_token_bytes(tok, 'a', NULL, 0, &n));
    CHECK(n == 1, "the byte a is one byte");
    CHECK(strcmp(riftco_status_name(RIFTCO_STATUS_FORMAT), "format") == 0, "status names");
}

int main(int argc, char **argv) {
    find_fixtures(argc, argv);
    RiftcoTokenizer *from_json = NULL, *from_rift = NULL;
    OK(riftco_tokenizer_load(fixture("bpe_gpt2.json"), &from_json));
    OK(riftco_tokenizer_load(fixture("bpe_gpt2.rift"), &from_rift));
    if (from_json == NULL || from_rift == NULL) {
        fprintf(stderr, "cannot load the fixtures from %s\n", fixtures);
        return 1;
    }
    uint32_t a = 0, b = 0;
    OK(riftco_tokenizer_vocab_size(from_json, &a));
    OK(riftco_tokenizer_vocab_size(from_rift, &b));
    CHECK(a == b && a > 256, "the bundle holds the same tokenizer (%u, %u)", a, b);
    test_cases(from_json);
    test_cases(from_rift);
    test_decoder(from_json);
    test_special_and_chat(from_rift);
    test_errors(from_json);
    OK(riftco_tokenizer_free(from_rift));
    OK(riftco_tokenizer_free(from_json));
    printf("test_tokenizer: %d checks, %d failed\n", checks, failures);
    return failures != 0;
}
