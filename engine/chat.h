/*
 * chat.h — chat templates: a conversation → the prompt text the model was trained on.
 *
 * Built-in templates: ChatML, Llama-2, Llama-3, Mistral, Zephyr, Phi-3, Gemma. The template is
 * chosen by name, or recognised from tokenizer.chat_template by its distinctive markers; models
 * without a template fall back to ChatML when the vocabulary has <|im_start|>, else to a plain
 * "role: content" transcript (documented in the README). The rendered text contains special
 * tokens as text, so it must be tokenized with parse_special = 1; the template's own BOS is
 * emitted as text only when the tokenizer would not add it (never a double BOS).
 */
#ifndef KVSERVE_CHAT_H
#define KVSERVE_CHAT_H

#include <stddef.h>

#include "engine/tokenizer.h"

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

#endif
