/*
 * fuzz_jinja.c — libFuzzer target for the chat-template interpreter and its JSON reader: the
 * input is a template, or (first byte '{' or '[') render-chat's JSON. Anything must render,
 * or fail with an error whose kind and message are set, within the render limits; a rendering
 * is a NUL-terminated string of the reported length. Small limits keep each run short.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/chat.h"
#include "jinja/jinja.h"

static const char fz_vars[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": [{\"type\": "
    "\"text\", \"text\": \"hi\"}]}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"function\": "
    "{\"name\": \"f\", \"arguments\": {\"a\": 1.5}}}]}], \"tools\": [{\"type\": \"function\", \"function\": "
    "{\"name\": \"f\"}}], \"bos_token\": \"<s>\", \"add_generation_prompt\": true}";

static void fz_check(int rc, const char *out, size_t n, const jinja_error *e)
{
    if (rc) {
        if (out || !e->kind[0]) __builtin_trap();
        return;
    }
    if (!out || strlen(out) > n || out[n]) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *out = NULL, err[600];
    size_t n = 0;
    if (size && (data[0] == '{' || data[0] == '[')) {
        int rc = chat_render_json((const char *)data, size, &out, &n, err, sizeof err);
        if (rc && (out || !err[0])) __builtin_trap();
        if (!rc && (!out || out[n])) __builtin_trap();
        free(out);
        return 0;
    }
    jinja_error e;
    jinja_tmpl *t = jinja_compile((const char *)data, size, &e);
    if (!t) {
        if (!e.kind[0]) __builtin_trap();
        return 0;
    }
    jinja_limits lim = {.max_output_bytes = 1 << 16, .max_memory_bytes = 16 << 20, .max_steps = 200000,
                        .max_depth = 50};
    jinja_ctx *c = jinja_ctx_create(&lim);
    jinja_value root;
    if (c && !jinja_json_parse(c, fz_vars, sizeof fz_vars - 1, &root, &e)) {
        for (size_t i = 0; i < jinja_len(root); i++)
            jinja_ctx_set(c, jinja_str_bytes(jinja_dict_key_at(root, i), NULL), jinja_dict_value_at(root, i));
        int rc = jinja_render(t, c, &out, &n, &e);
        fz_check(rc, out, n, &e);
        free(out);
    }
    jinja_ctx_destroy(c);
    jinja_tmpl_destroy(t);
    return 0;
}
