/*
 * fuzz_grammar.c — libFuzzer target for the structured-output front ends: any bytes as GBNF text,
 * a regex (both modes) or a JSON Schema must compile or fail with a message, never crash, hang
 * past the compile budget or leak; a compiled grammar then takes the input's bytes through a
 * matcher and a mask on a small vocabulary, with gr_matcher_check after every step.
 */
#include <assert.h>
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "server/openai/oai_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static gr_vocab *vocab(void)
{
    static gr_vocab *v;
    if (!v) {
        static const char *const toks[] = {"a", "b", "{", "}", "\"", ":", ",", " ", "0", "1", "\xc3", "\xa9", "ab", "\"a", "\":", "},"};
        int lens[17];
        const char *bytes[17];
        for (int i = 0; i < 16; i++) bytes[i] = toks[i], lens[i] = (int)strlen(toks[i]);
        bytes[16] = NULL;
        lens[16] = 0;
        int32_t eog = 16;
        v = gr_vocab_create_raw(17, bytes, lens, &eog, 1);
    }
    return v;
}

static void exercise(gr_grammar *g, const uint8_t *data, size_t size)
{
    gr_matcher *m = gr_matcher_create(g, vocab());
    if (!m) return;
    uint32_t mask[1];
    for (size_t i = 0; i < size && i < 64; i++) {
        int n = gr_matcher_fill_mask(m, mask);
        assert(n >= 0);
        gr_matcher_accept(m, (int32_t)(data[i] % 17));
        gr_matcher_check(m);
    }
    gr_matcher_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    gr_error e;
    gr_grammar *g = NULL;
    switch (data[0] & 3) {
    case 0: g = gr_compile_gbnf(text, len, NULL, &e); break;
    case 1: g = gr_compile_regex(text, len, &e); break;
    case 2: {
        char *x = gr_regex_to_gbnf(text, len, GR_RE_JSON_SEARCH, &e);
        free(x);
        break;
    }
    default: {
        cJSON *s = cJSON_ParseWithLength(text, len);
        char err[256];
        char *gbnf = s ? oai_schema_gbnf(s, "", err, sizeof err) : NULL;
        cJSON_Delete(s);
        if (gbnf) g = gr_compile_gbnf(gbnf, strlen(gbnf), "root", &e);
        free(gbnf);
        break;
    }
    }
    if (!g) {
        assert(e.msg[0] || (data[0] & 3) >= 2);
        return 0;
    }
    exercise(g, data, size);
    gr_unref(g);
    return 0;
}
