/*
 * chat.h — chat templates: a conversation → the prompt text the model was trained on.
 *
 * A chat_tmpl executes the model's own Jinja template (tokenizer.chat_template from the GGUF,
 * its named variants such as tokenizer.chat_template.tool_use, a --chat-template text or @FILE)
 * with jinja/jinja.h, in the variables Hugging Face transformers passes: messages, tools,
 * documents, add_generation_prompt, bos_token / eos_token (the vocabulary's texts) and any
 * extra keyword arguments (chat_template_kwargs). GGUFs without a template fall back to a
 * built-in renderer: ChatML, Llama-2, Llama-3, Mistral, Zephyr, Phi-3, Gemma, or a plain
 * "role: content" transcript (ChatML when the vocabulary has <|im_start|>). The rendered text
 * holds special tokens as text, so it must be tokenized with parse_special = 1; a Jinja
 * template writes its own BOS (tokenize without adding one), a built-in one only when the
 * tokenizer would not add it (never a double BOS). A chat_tmpl is immutable once created:
 * render from any thread.
 */
#ifndef KVSERVE_CHAT_H
#define KVSERVE_CHAT_H

#include <stddef.h>

#include "model/gguf.h"
#include "jinja/jinja.h"
#include "model/tokenizer.h"

enum chat_template {
    CHAT_TMPL_CHATML = 0,
    CHAT_TMPL_LLAMA2,
    CHAT_TMPL_LLAMA3,
    CHAT_TMPL_MISTRAL,
    CHAT_TMPL_ZEPHYR,
    CHAT_TMPL_PHI3,
    CHAT_TMPL_GEMMA,
    CHAT_TMPL_PLAIN, /* fallback: "system: …\nuser: …\nassistant:" */
    CHAT_TMPL_COUNT
};

typedef struct chat_msg {
    const char *role;    /* "system", "developer", "user", "assistant", "tool" */
    const char *content; /* UTF-8, NUL-terminated */
} chat_msg;

/* Template by name ("chatml", "llama2", "llama3", "mistral", "zephyr", "phi3", "gemma", "plain"),
 * or -1. */
int chat_template_by_name(const char *name);
const char *chat_template_name(int tmpl);

/* Recognises a Jinja template string (may be NULL) by its markers; falls back as described above
 * using the tokenizer's vocabulary (may be NULL). */
int chat_template_detect(const char *jinja, const tokenizer *tok);

/* Renders msgs with the template. add_generation_prompt appends the assistant header.
 * add_bos_text: 1 to write the BOS token's text at the start when the template has one (use 0
 * when the tokenizer adds BOS itself). Returns a malloc'd NUL-terminated string (caller frees),
 * or NULL with a message in err (e.g. a role the template cannot express). */
char *chat_render(int tmpl, const chat_msg *msgs, int n_msgs, int add_generation_prompt,
                  const tokenizer *tok, int add_bos_text, char *err, size_t err_len);

/* ---- chat_tmpl: the Jinja template, or a built-in --------------------------------------- */

typedef struct chat_tmpl chat_tmpl;

typedef struct chat_config {
    const char *spec;      /* --chat-template: NULL or "" (the GGUF's), a built-in name, "@FILE"
                              (or an existing file's path), or the Jinja text itself */
    const gguf_file *gguf; /* tokenizer.chat_template[.NAME] (NULL: none) */
    const tokenizer *tok;  /* bos / eos texts and the built-in fallback (NULL: none); borrowed:
                              it must outlive the chat_tmpl */
} chat_config;

/* Compiles the template cfg names. Returns it, or NULL with err saying why (an unknown name, an
 * unreadable file, or the TemplateSyntaxError with its line). */
chat_tmpl *chat_tmpl_create(const chat_config *cfg, char *err, size_t err_len);
void chat_tmpl_destroy(chat_tmpl *t);

/* One line for logs: "jinja (GGUF tokenizer.chat_template, +tool_use)", "jinja (FILE)",
 * "built-in chatml". Owned by t. */
const char *chat_tmpl_describe(const chat_tmpl *t);
/* The Jinja source a request renders with (tools: it has tools, so a tool_use variant is
 * preferred), or NULL for a built-in. Owned by t. */
const char *chat_tmpl_source(const chat_tmpl *t, int tools);

/* What one render gets; every value lives in ctx. */
typedef struct chat_vars {
    jinja_ctx *ctx;
    jinja_value messages; /* list of message dicts (content a string, null, or text parts) */
    jinja_value tools;    /* list of tool definitions, or undefined / none */
    jinja_value kwargs;   /* dict of extra variables (chat_template_kwargs), or undefined */
    int add_generation_prompt;
    const char *tmpl_text; /* a request's own template: Jinja text or a variant name (NULL: none) */
} chat_vars;

/* Renders v with t. On success *out is malloc'd (caller frees), *out_len its length, and
 * *tokenizer_bos says whether the tokenizer should add its BOS (built-ins only; a Jinja template
 * writes its own). Returns 0, or -EINVAL with err a line naming the failure (the template raised,
 * a render error "KIND: message (template line N)", or what a built-in cannot express), -E2BIG
 * past the render limits, -ENOMEM. Thread-safe for a shared t. */
int chat_tmpl_render(const chat_tmpl *t, const chat_vars *v, char **out, size_t *out_len,
                     int *tokenizer_bos, char *err, size_t err_len);

/* render-chat: one JSON object — template (text), messages, tools, add_generation_prompt,
 * bos_token, eos_token, date (YYYY-MM-DD for strftime_now; default today) and any other keys as
 * template variables — rendered as transformers does (messages verbatim; tools and documents
 * none when absent). 0 with *out malloc'd; -EINVAL with err "KIND: message" for bad input or a
 * failing template; -E2BIG / -ENOMEM. */
int chat_render_json(const char *json, size_t len, char **out, size_t *out_len, char *err,
                     size_t err_len);

#endif
