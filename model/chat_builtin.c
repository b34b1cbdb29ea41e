/*
 * chat_builtin.c — built-in chat templates: a list of messages → the prompt text a model was
 * tuned on, for GGUFs that carry no tokenizer.chat_template (chat.c executes the ones that do).
 *
 * Each template is a small renderer written out by hand from the model family's published
 * format; chat_template_detect recognises a family from a template's markers. Special tokens
 * are written as text, so the result must be tokenized with parse_special = 1. The BOS text is written only when the caller asks (add_bos_text), so a
 * tokenizer that adds BOS itself never gets two. Turn separators that contain BOS/EOS inside the
 * history (Llama-2's "</s><s>") use the tokenizer's own pieces, so they tokenize to its ids.
 * Callers: chat.c (the fallback of a chat_tmpl), cli info, tests.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "model/chat.h"

static const char *const tmpl_names[CHAT_TMPL_COUNT] = {
    "chatml", "llama2", "llama3", "mistral", "zephyr", "phi3", "gemma", "plain",
};

int chat_template_by_name(const char *name)
{
    static const struct {
        const char *alias;
        int tmpl;
    } aliases[] = {{"llama-2", CHAT_TMPL_LLAMA2},
                   {"llama-3", CHAT_TMPL_LLAMA3},
                   {"phi-3", CHAT_TMPL_PHI3},
                   {"mistral-v1", CHAT_TMPL_MISTRAL}};
    if (!name) return -1;
    for (int i = 0; i < CHAT_TMPL_COUNT; i++)
        if (!strcmp(name, tmpl_names[i])) return i;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(name, aliases[i].alias)) return aliases[i].tmpl;
    return -1;
}

const char *chat_template_name(int tmpl)
{
    return tmpl >= 0 && tmpl < CHAT_TMPL_COUNT ? tmpl_names[tmpl] : "unknown";
}

int chat_template_detect(const char *jinja, const tokenizer *tok)
{
    if (jinja) {
        if (strstr(jinja, "<|im_start|>")) return CHAT_TMPL_CHATML;
        if (strstr(jinja, "<|start_header_id|>")) return CHAT_TMPL_LLAMA3;
        if (strstr(jinja, "<start_of_turn>")) return CHAT_TMPL_GEMMA;
        if (strstr(jinja, "[INST]"))
            return strstr(jinja, "<<SYS>>") ? CHAT_TMPL_LLAMA2 : CHAT_TMPL_MISTRAL;
        if (strstr(jinja, "<|user|>"))
            return strstr(jinja, "<|end|>") ? CHAT_TMPL_PHI3 : CHAT_TMPL_ZEPHYR;
    }
    if (tok && tok_find(tok, "<|im_start|>") >= 0) return CHAT_TMPL_CHATML;
    return CHAT_TMPL_PLAIN;
}

/* ---- string building ------------------------------------------------------------------------ */

/* Appends s without its leading and trailing whitespace (Jinja's trim / Python's strip). */
static void put_trimmed(buf *b, const char *s)
{
    const char *e = s + strlen(s);
    while (s < e && strchr(" \t\n\r\v\f", *s))
        s++;
    while (e > s && strchr(" \t\n\r\v\f", e[-1]))
        e--;
    buf_put(b, s, (size_t)(e - s));
}

/* ---- roles ---------------------------------------------------------------------------------- */

enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL, ROLE_BAD };

static int role_of(const char *r)
{
    if (!r) return ROLE_BAD;
    if (!strcmp(r, "system") || !strcmp(r, "developer")) return ROLE_SYSTEM;
    if (!strcmp(r, "user")) return ROLE_USER;
    if (!strcmp(r, "assistant")) return ROLE_ASSISTANT;
    if (!strcmp(r, "tool")) return ROLE_TOOL;
    return ROLE_BAD;
}

static const char *const role_names[] = {"system", "user", "assistant", "tool"};

/* The tokenizer's BOS/EOS piece when it has one, else the family's usual spelling. */
static const char *bos_text(const tokenizer *tok, const char *dflt)
{
    return tok && tok_bos(tok) >= 0 ? tok_piece(tok, tok_bos(tok)) : dflt;
}

static const char *eos_text(const tokenizer *tok, const char *dflt)
{
    return tok && tok_eos(tok) >= 0 ? tok_piece(tok, tok_eos(tok)) : dflt;
}

/* ---- renderers ------------------------------------------------------------------------------ */

typedef struct render_ctx {
    const chat_msg *msgs;
    int n;
    int gen;     /* add_generation_prompt */
    int add_bos; /* write the BOS text first */
    const tokenizer *tok;
    buf *b;
} render_ctx;

/* <|im_start|>role\ncontent<|im_end|>\n … <|im_start|>assistant\n */
static void render_chatml(const render_ctx *c)
{
    for (int i = 0; i < c->n; i++) {
        buf_puts(c->b, "<|im_start|>");
        buf_puts(c->b, role_names[role_of(c->msgs[i].role)]);
        buf_puts(c->b, "\n");
        buf_puts(c->b, c->msgs[i].content);
        buf_puts(c->b, "<|im_end|>\n");
    }
    if (c->gen) buf_puts(c->b, "<|im_start|>assistant\n");
}

/* Llama-2: <s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] user [/INST]
 * Mistral: <s>[INST] sys\n\nuser [/INST] answer</s>[INST] user [/INST]
 * A system message is held and opens the next user turn (Mistral has no system slot). */
static void render_inst(const render_ctx *c, int llama2)
{
    const char *bos = bos_text(c->tok, "<s>"), *eos = eos_text(c->tok, "</s>");
    const char *sys = NULL;
    int turns = 0;
    for (int i = 0; i <= c->n; i++) {
        int role = i < c->n ? role_of(c->msgs[i].role) : -1;
        if (role == ROLE_SYSTEM) {
            sys = c->msgs[i].content;
            continue;
        }
        if (role == ROLE_USER || (role < 0 && sys)) {
            if (turns ? llama2 : c->add_bos) buf_puts(c->b, bos);
            buf_puts(c->b, "[INST] ");
            if (sys) {
                buf_puts(c->b, llama2 ? "<<SYS>>\n" : "");
                put_trimmed(c->b, sys);
                buf_puts(c->b, llama2 ? "\n<</SYS>>\n\n" : "\n\n");
                sys = NULL;
            }
            if (role == ROLE_USER) put_trimmed(c->b, c->msgs[i].content);
            buf_puts(c->b, " [/INST]");
            turns++;
        } else if (role == ROLE_ASSISTANT) {
            if (!turns && c->add_bos) buf_puts(c->b, bos);
            buf_puts(c->b, " ");
            put_trimmed(c->b, c->msgs[i].content);
            if (llama2) buf_puts(c->b, " ");
            buf_puts(c->b, eos);
            turns++;
        }
    }
}

/* <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> … */
static void render_llama3(const render_ctx *c)
{
    if (c->add_bos) buf_puts(c->b, bos_text(c->tok, "<|begin_of_text|>"));
    for (int i = 0; i < c->n; i++) {
        int role = role_of(c->msgs[i].role);
        buf_puts(c->b, "<|start_header_id|>");
        buf_puts(c->b, role == ROLE_TOOL ? "ipython" : role_names[role]);
        buf_puts(c->b, "<|end_header_id|>\n\n");
        put_trimmed(c->b, c->msgs[i].content);
        buf_puts(c->b, "<|eot_id|>");
    }
    if (c->gen) buf_puts(c->b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Zephyr: <|role|>\ncontent</s>\n     Phi-3: <|role|>\ncontent<|end|>\n     … <|assistant|>\n */
static void render_tagged(const render_ctx *c, const char *end)
{
    for (int i = 0; i < c->n; i++) {
        buf_puts(c->b, "<|");
        buf_puts(c->b, role_names[role_of(c->msgs[i].role)]);
        buf_puts(c->b, "|>\n");
        buf_puts(c->b, c->msgs[i].content);
        buf_puts(c->b, end);
        buf_puts(c->b, "\n");
    }
    if (c->gen) buf_puts(c->b, "<|assistant|>\n");
}

/* <bos><start_of_turn>user\nsys\n\nuser<end_of_turn>\n<start_of_turn>model\n…<end_of_turn>\n */
static void render_gemma(const render_ctx *c)
{
    const char *sys = NULL;
    if (c->add_bos) buf_puts(c->b, bos_text(c->tok, "<bos>"));
    for (int i = 0; i < c->n; i++) {
        int role = role_of(c->msgs[i].role);
        if (role == ROLE_SYSTEM) {
            sys = c->msgs[i].content;
            continue;
        }
        buf_puts(c->b, role == ROLE_ASSISTANT ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
        if (sys && role == ROLE_USER) {
            put_trimmed(c->b, sys);
            buf_puts(c->b, "\n\n");
            sys = NULL;
        }
        put_trimmed(c->b, c->msgs[i].content);
        buf_puts(c->b, "<end_of_turn>\n");
    }
    if (c->gen) buf_puts(c->b, "<start_of_turn>model\n");
}

/* role: content\n … assistant: */
static void render_plain(const render_ctx *c)
{
    for (int i = 0; i < c->n; i++) {
        buf_puts(c->b, role_names[role_of(c->msgs[i].role)]);
        buf_puts(c->b, ": ");
        buf_puts(c->b, c->msgs[i].content);
        buf_puts(c->b, "\n");
    }
    if (c->gen) buf_puts(c->b, "assistant:");
}

static void set_err(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    if (!err || !err_len) return;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

char *chat_render(int tmpl, const chat_msg *msgs, int n_msgs, int add_generation_prompt,
                  const tokenizer *tok, int add_bos_text, char *err, size_t err_len)
{
    if (tmpl < 0 || tmpl >= CHAT_TMPL_COUNT) {
        set_err(err, err_len, "unknown chat template %d", tmpl);
        return NULL;
    }
    int tool_ok = tmpl == CHAT_TMPL_CHATML || tmpl == CHAT_TMPL_LLAMA3 || tmpl == CHAT_TMPL_PLAIN;
    for (int i = 0; i < n_msgs; i++) {
        int role = role_of(msgs[i].role);
        if (role == ROLE_BAD || (role == ROLE_TOOL && !tool_ok)) {
            set_err(err, err_len, "the %s chat template cannot express role '%s'", tmpl_names[tmpl],
                    msgs[i].role ? msgs[i].role : "(null)");
            return NULL;
        }
        if (!msgs[i].content) {
            set_err(err, err_len, "message %d has no content", i);
            return NULL;
        }
    }
    buf b = {0};
    render_ctx c = {msgs, n_msgs, add_generation_prompt, add_bos_text, tok, &b};
    buf_put(&b, "", 0);
    switch (tmpl) {
    case CHAT_TMPL_CHATML:
        render_chatml(&c);
        break;
    case CHAT_TMPL_LLAMA2:
        render_inst(&c, 1);
        break;
    case CHAT_TMPL_MISTRAL:
        render_inst(&c, 0);
        break;
    case CHAT_TMPL_LLAMA3:
        render_llama3(&c);
        break;
    case CHAT_TMPL_ZEPHYR:
        render_tagged(&c, eos_text(tok, "</s>"));
        break;
    case CHAT_TMPL_PHI3:
        render_tagged(&c, "<|end|>");
        break;
    case CHAT_TMPL_GEMMA:
        render_gemma(&c);
        break;
    default:
        render_plain(&c);
        break;
    }
    if (b.oom) {
        free(b.s);
        set_err(err, err_len, "out of memory");
        return NULL;
    }
    return b.s;
}
