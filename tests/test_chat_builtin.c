/*
 * test_chat_builtin.c — the built-in chat templates (model/chat_builtin.c): exact rendering,
 * exact token sequences, detection, no double BOS.
 *
 * Each template renders the same system + two-turn conversation. The text must equal the
 * family's published format (written out below by hand), and its tokenization (parse_special)
 * on an mkmodel vocabulary that holds the template's special tokens must be: BOS once, then
 * every special token as its single id and the text between them tokenized on its own, which
 * the test computes with a naive scanner of its own.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/mkmodel.h"
#include "model/chat.h"
#include "model/dtype.h"
#include "model/tokenizer.h"

static const chat_msg tchat_conv[] = {
    {"system", "You are terse."},
    {"user", "Hi there"},
    {"assistant", "Hello!"},
    {"user", "Bye now"},
};

typedef struct tchat_model {
    char dir[64], path[128];
    gguf_file *gf;
    tokenizer *tok;
} tchat_model;

/* Writes a small mkmodel GGUF whose vocabulary holds the given control tokens and opens it. */
static void tchat_open(tchat_model *m, const char *flavour, const char *const *extra, int n_extra)
{
    strcpy(m->dir, "/tmp/tchat_XXXXXX");
    cr_assert_not_null(mkdtemp(m->dir));
    snprintf(m->path, sizeof m->path, "%s/m.gguf", m->dir);
    mkm_params p;
    mkm_params_default(&p);
    p.layers = 1;
    p.dim = 32;
    p.heads = 2;
    p.vocab = 400;
    p.context = 64;
    p.type = DT_F32;
    p.tokenizer = flavour;
    p.extra_tokens = (const char **)extra;
    p.n_extra = n_extra;
    char err[256];
    cr_assert_eq(mkm_write(m->path, &p, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_open(m->path, &m->gf, err, sizeof err), 0, "%s", err);
    m->tok = tok_create(m->gf, err, sizeof err);
    cr_assert_not_null(m->tok, "%s", err);
}

static void tchat_close(tchat_model *m)
{
    tok_destroy(m->tok);
    gguf_close(m->gf);
    unlink(m->path);
    rmdir(m->dir);
}

/* The expected ids of text: BOS when the tokenizer adds it, then the text cut at every
 * occurrence of the given special pieces (leftmost, longest), specials as their ids and the
 * pieces between them encoded alone. */
static int tchat_expected(const tokenizer *t, const char *text, const char *const *specials,
                          int n_specials, int32_t *out, int cap)
{
    int n = 0;
    if (tok_add_bos(t)) out[n++] = tok_bos(t);
    const char *p = text, *seg = text;
    while (1) {
        int best = -1;
        size_t best_len = 0;
        if (*p)
            for (int k = 0; k < n_specials; k++) {
                size_t l = strlen(specials[k]);
                if (!strncmp(p, specials[k], l) && l > best_len) best = k, best_len = l;
            }
        if (best >= 0 || !*p) {
            if (p > seg) n += tok_encode(t, seg, (size_t)(p - seg), 0, 0, out + n, cap - n);
            if (!*p) break;
            out[n++] = tok_find(t, specials[best]);
            p += best_len;
            seg = p;
        } else {
            p++;
        }
    }
    return n;
}

static void tchat_check(const char *flavour, int tmpl, const char *const *extra, int n_extra,
                        const char *want)
{
    tchat_model m;
    tchat_open(&m, flavour, extra, n_extra);
    char err[256];
    int add_bos_text = !tok_add_bos(m.tok);
    char *s = chat_render(tmpl, tchat_conv, 4, 1, m.tok, add_bos_text, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    cr_assert_str_eq(s, want, "%s: rendering", chat_template_name(tmpl));

    int32_t got[1024], exp[1024];
    int ng = tok_encode(m.tok, s, strlen(s), 1, 1, got, 1024);
    const char *specials[16];
    int ns = 0;
    for (int i = 0; i < n_extra; i++)
        specials[ns++] = extra[i];
    specials[ns++] = tok_piece(m.tok, tok_eos(m.tok));
    if (tok_bos(m.tok) >= 0) specials[ns++] = tok_piece(m.tok, tok_bos(m.tok));
    int ne = tchat_expected(m.tok, s, specials, ns, exp, 1024);
    cr_assert_eq(ng, ne, "%s: %d tokens, want %d", chat_template_name(tmpl), ng, ne);
    for (int i = 0; i < ng; i++)
        cr_assert_eq(got[i], exp[i], "%s: token %d is %d, want %d", chat_template_name(tmpl), i,
                     got[i], exp[i]);
    int n_bos = 0;
    for (int i = 0; i < ng && got[i] == tok_bos(m.tok); i++)
        n_bos++;
    cr_assert_leq(n_bos, 1, "%s: double BOS", chat_template_name(tmpl));
    for (int i = 0; i < n_extra; i++) {
        int32_t id = tok_find(m.tok, extra[i]);
        int want_n = 0, got_n = 0;
        for (const char *q = s; (q = strstr(q, extra[i])); q += strlen(extra[i]))
            want_n++;
        for (int k = 0; k < ng; k++)
            got_n += got[k] == id;
        cr_assert_eq(got_n, want_n, "%s: %s appears %d times as a token, %d in the text",
                     chat_template_name(tmpl), extra[i], got_n, want_n);
    }
    /* The BOS text written by the template tokenizes to what the tokenizer would have added. */
    char *s2 = chat_render(tmpl, tchat_conv, 4, 1, m.tok, 1, err, sizeof err);
    int32_t got2[1024];
    int ng2 = tok_encode(m.tok, s2, strlen(s2), 0, 1, got2, 1024);
    if (tok_add_bos(m.tok) && strcmp(s, s2)) {
        cr_assert_eq(ng2, ng);
        cr_assert_arr_eq(got2, got, (size_t)ng * sizeof got[0]);
    }
    free(s2);
    free(s);
    tchat_close(&m);
}

Test(chat_builtin, chatml)
{
    static const char *const x[] = {"<|im_start|>", "<|im_end|>"};
    tchat_check(
        "spm", CHAT_TMPL_CHATML, x, 2,
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye now<|im_end|>\n"
        "<|im_start|>assistant\n");
    /* Byte-level BPE flavour: no BOS is added by this tokenizer. */
    tchat_check(
        "gpt2", CHAT_TMPL_CHATML, x, 2,
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye now<|im_end|>\n"
        "<|im_start|>assistant\n");
}

Test(chat_builtin, llama2)
{
    tchat_check("spm", CHAT_TMPL_LLAMA2, NULL, 0,
                "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST] Hello! </s><s>[INST] "
                "Bye now [/INST]");
}

Test(chat_builtin, llama3)
{
    static const char *const x[] = {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    tchat_check("spm", CHAT_TMPL_LLAMA3, x, 3,
                "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nBye now<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

Test(chat_builtin, mistral)
{
    tchat_check("spm", CHAT_TMPL_MISTRAL, NULL, 0,
                "[INST] You are terse.\n\nHi there [/INST] Hello!</s>[INST] Bye now [/INST]");
}

Test(chat_builtin, zephyr)
{
    static const char *const x[] = {"<|system|>", "<|user|>", "<|assistant|>"};
    tchat_check(
        "spm", CHAT_TMPL_ZEPHYR, x, 3,
        "<|system|>\nYou are terse.</s>\n<|user|>\nHi there</s>\n<|assistant|>\nHello!</s>\n"
        "<|user|>\nBye now</s>\n<|assistant|>\n");
}

Test(chat_builtin, phi3)
{
    static const char *const x[] = {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>"};
    tchat_check("spm", CHAT_TMPL_PHI3, x, 4,
                "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\n"
                "Hello!<|end|>\n<|user|>\nBye now<|end|>\n<|assistant|>\n");
}

Test(chat_builtin, gemma)
{
    static const char *const x[] = {"<start_of_turn>", "<end_of_turn>"};
    tchat_check(
        "spm", CHAT_TMPL_GEMMA, x, 2,
        "<start_of_turn>user\nYou are terse.\n\nHi there<end_of_turn>\n<start_of_turn>model\n"
        "Hello!<end_of_turn>\n<start_of_turn>user\nBye now<end_of_turn>\n"
        "<start_of_turn>model\n");
}

Test(chat_builtin, plain)
{
    tchat_check("spm", CHAT_TMPL_PLAIN, NULL, 0,
                "system: You are terse.\nuser: Hi there\nassistant: Hello!\nuser: Bye now\n"
                "assistant:");
}

Test(chat_builtin, bos_text_only_when_asked)
{
    static const chat_msg one[] = {{"user", "Hi"}};
    char err[128];
    char *s = chat_render(CHAT_TMPL_LLAMA3, one, 1, 0, NULL, 1, err, sizeof err);
    cr_assert_str_eq(s,
                     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
    free(s);
    s = chat_render(CHAT_TMPL_LLAMA3, one, 1, 0, NULL, 0, err, sizeof err);
    cr_assert_str_eq(s, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
    free(s);
    s = chat_render(CHAT_TMPL_GEMMA, one, 1, 1, NULL, 1, err, sizeof err);
    cr_assert_str_eq(s, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    free(s);
    s = chat_render(CHAT_TMPL_LLAMA2, one, 1, 1, NULL, 1, err, sizeof err);
    cr_assert_str_eq(s, "<s>[INST] Hi [/INST]");
    free(s);
}

Test(chat_builtin, detect)
{
    static const struct {
        const char *jinja;
        int want;
    } cases[] = {
        {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}",
         CHAT_TMPL_CHATML},
        {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}",
         CHAT_TMPL_LLAMA3},
        {"{{ bos_token + '[INST] ' + '<<SYS>>\\n' + content + ' [/INST]' }}", CHAT_TMPL_LLAMA2},
        {"{{ bos_token }}{% if message['role'] == 'user' %}{{ '[INST] ' + c + ' [/INST]' }}",
         CHAT_TMPL_MISTRAL},
        {"{{ '<|user|>\\n' + message['content'] + '<|end|>\\n' }}", CHAT_TMPL_PHI3},
        {"{{ '<|user|>\\n' + message['content'] + eos_token }}", CHAT_TMPL_ZEPHYR},
        {"{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}",
         CHAT_TMPL_GEMMA},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_eq(chat_template_detect(cases[i].jinja, NULL), cases[i].want, "case %zu", i);
    cr_assert_eq(chat_template_detect(NULL, NULL), CHAT_TMPL_PLAIN);
    cr_assert_eq(chat_template_detect("{{ messages }}", NULL), CHAT_TMPL_PLAIN);
    /* Fallback: ChatML when the vocabulary has <|im_start|>, else plain. */
    static const char *const x[] = {"<|im_start|>", "<|im_end|>"};
    tchat_model m;
    tchat_open(&m, "gpt2", x, 2);
    cr_assert_eq(chat_template_detect(NULL, m.tok), CHAT_TMPL_CHATML);
    cr_assert_eq(chat_template_detect("{{ messages }}", m.tok), CHAT_TMPL_CHATML);
    tchat_close(&m);
    for (int i = 0; i < CHAT_TMPL_COUNT; i++)
        cr_assert_eq(chat_template_by_name(chat_template_name(i)), i);
    cr_assert_eq(chat_template_by_name("nope"), -1);
}

Test(chat_builtin, roles)
{
    static const chat_msg tool[] = {{"user", "x"}, {"tool", "42"}};
    static const chat_msg bad[] = {{"wizard", "x"}};
    static const chat_msg dev[] = {{"developer", "Be brief."}, {"user", "x"}};
    char err[128];
    cr_assert_null(chat_render(CHAT_TMPL_GEMMA, tool, 2, 1, NULL, 0, err, sizeof err));
    cr_assert(strstr(err, "tool") != NULL, "%s", err);
    cr_assert_null(chat_render(CHAT_TMPL_CHATML, bad, 1, 1, NULL, 0, err, sizeof err));
    char *s = chat_render(CHAT_TMPL_CHATML, tool, 2, 0, NULL, 0, err, sizeof err);
    cr_assert_str_eq(s, "<|im_start|>user\nx<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n");
    free(s);
    s = chat_render(CHAT_TMPL_CHATML, dev, 2, 0, NULL, 0, err, sizeof err);
    cr_assert_str_eq(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nx<|im_end|>\n");
    free(s);
}
