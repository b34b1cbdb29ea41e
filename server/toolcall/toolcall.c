/*
 * toolcall.c — the reasoning and tool-call parsers of toolcall.h.
 *
 * Both stages keep the text they cannot decide yet in a buffer and re-read it on every feed:
 * the reasoning stage holds a possible <think> / </think> prefix; the tool-call stage holds a
 * possible marker prefix in content, and in a call everything from the call's start, which it
 * re-scans with an incremental JSON object scanner (how far the name and the arguments value
 * got) and emits only what is new. A finished call, or content that cannot start a marker any
 * more, is committed and dropped from the buffer, so a long answer costs linear time. Call
 * bodies that are not JSON are read when complete: Qwen3-Coder's <function=NAME><parameter=K>…,
 * GLM's NAME<arg_key>K</arg_key><arg_value>V</arg_value> and MiniMax-M3's <invoke name=…>
 * elements inside <tool_call>. The section syntaxes are in toolcall_section.c. The JSON
 * scanning is in toolcall_scan.c. Callers: server/openai/oai_chat.c; tests/test_toolcall.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/toolcall/internal.h"

/* ---- names ------------------------------------------------------------------------------- */

static const char *const syntax_names[] = {
    "none",     "hermes",    "llama3_json", "mistral",  "json",   "deepseek_v3", "kimi_k2",
    "functionary", "nemotron", "command_r", "apertus", "seed_oss", "minicpm", "gemma4",
    "lfm2",     "solar",     "dsml",        "hy3",      "kimi_k3", "gigachat3",  "granite",
    "atem",     "args"};

int tc_syntax_by_name(const char *name)
{
    if (!name) return -1;
    if (!strcmp(name, "auto")) return -2;
    for (int i = 0; i < (int)(sizeof syntax_names / sizeof syntax_names[0]); i++)
        if (!strcmp(name, syntax_names[i]) && i != TC_ARGS) return i;
    if (!strcmp(name, "qwen") || !strcmp(name, "qwen3_coder") || !strcmp(name, "glm45"))
        return TC_HERMES;
    if (!strcmp(name, "llama3") || !strcmp(name, "llama")) return TC_LLAMA3_JSON;
    if (!strcmp(name, "deepseek") || !strcmp(name, "deepseek_v31")) return TC_DEEPSEEK;
    if (!strcmp(name, "kimi")) return TC_KIMI;
    if (!strcmp(name, "pythonic")) return TC_LFM2;
    if (!strcmp(name, "deepseek_v32") || !strcmp(name, "deepseek_v4")) return TC_DSML;
    return -1;
}

const char *tc_syntax_name(int s)
{
    return s >= 0 && s <= TC_ARGS ? syntax_names[s] : "?";
}

int tc_syntax_detect(const char *t)
{
    if (!t) return TC_JSON;
    if (strstr(t, tc__tags(TC_DEEPSEEK)->call_open)) return TC_DEEPSEEK;
    if (strstr(t, tc__tags(TC_KIMI)->call_open)) return TC_KIMI;
    int sec = tc__section_detect(t);
    if (sec >= 0) return sec;
    if (strstr(t, ">>>all")) return TC_FUNCTIONARY;
    if (strstr(t, "<tool_call>") || strstr(t, "<tool_calls>")) return TC_HERMES;
    if (strstr(t, "[TOOL_CALLS]")) return TC_MISTRAL;
    if (strstr(t, "<|python_tag|>") || strstr(t, "<|start_header_id|>")) return TC_LLAMA3_JSON;
    return TC_JSON;
}

int tc_reasoning_by_name(const char *name)
{
    if (!name || !strcmp(name, "none") || !*name) return TC_REASON_NONE;
    if (!strcmp(name, "deepseek_r1") || !strcmp(name, "deepseek")) return TC_REASON_DEEPSEEK_R1;
    if (!strcmp(name, "qwen3")) return TC_REASON_QWEN3;
    return -1;
}

enum { R_START, R_THINK, R_CONTENT };
enum {
    T_START,
    T_CONTENT,
    T_CALL,
    T_ARRAY,
    T_TAIL,
    T_ARGS_ONLY,
    T_AFTER,
    T_FUNCTION,
    T_RECIPIENT, /* functionary: [>>>]NAME\n */
    T_RECIPIENT_ARGS,
    T_RECIPIENT_TEXT
};

struct tc_parser {
    int syntax, reasoning;
    char *forced;
    uint64_t rng;
    int oom;
    tc_emit_fn emit;
    void *ud;
    /* reasoning stage */
    int rmode;
    buf r;
    /* tool-call stage */
    int tmode;
    buf t;           /* undecided text, from the last commit point */
    int after_call;  /* content right after a call: its leading white space is dropped */
    int cur;         /* the call being read, or -1 */
    int cur_named;   /* its TC_D_CALL went out */
    size_t cur_args; /* bytes of its arguments emitted */
    const char *close_tag; /* T_ARRAY inside hermes' <tool_calls>: "</tool_calls>" */
    int section;           /* a section syntax: which of its marker pairs opened */
    buf schemas;           /* the tools' string parameters (toolcall_schema.c) */
    /* what was read */
    buf content, reason;
    int has_reason;
    tc_call *calls;
    int n_calls;
};

/* ---- output ------------------------------------------------------------------------------- */

static void out_content(tc_parser *p, const char *s, size_t n)
{
    if (p->after_call) {
        while (n && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t'))
            s++, n--;
        if (!n) return;
        p->after_call = 0;
    }
    if (!n) return;
    buf_put(&p->content, s, n);
    if (p->content.oom) p->oom = 1;
    tc_delta d = {TC_D_CONTENT, 0, s, n, NULL, NULL};
    if (p->emit) p->emit(p->ud, &d);
}

static void out_reason(tc_parser *p, const char *s, size_t n)
{
    p->has_reason = 1;
    if (!n) return;
    buf_put(&p->reason, s, n);
    if (p->reason.oom) p->oom = 1;
    tc_delta d = {TC_D_REASONING, 0, s, n, NULL, NULL};
    if (p->emit) p->emit(p->ud, &d);
}

static void make_id(tc_parser *p, char *id)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    int mistral = p->syntax == TC_MISTRAL, n = mistral ? 9 : 24, o = 0;
    if (!mistral) o = snprintf(id, 8, "call_");
    for (int i = 0; i < n; i++) {
        p->rng += 0x9E3779B97F4A7C15ull;
        uint64_t z = p->rng;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        id[o++] = al[(z ^ (z >> 31)) % (sizeof al - 1)];
    }
    id[o] = 0;
}

static void call_begin(tc_parser *p)
{
    tc_call *nc = realloc(p->calls, sizeof *nc * (size_t)(p->n_calls + 1));
    if (!nc) {
        p->oom = 1;
        return;
    }
    p->calls = nc;
    tc_call *c = &nc[p->n_calls];
    memset(c, 0, sizeof *c);
    make_id(p, c->id);
    c->args = calloc(1, 1);
    if (!c->args) p->oom = 1;
    p->cur = p->n_calls++;
    p->cur_named = 0;
    p->cur_args = 0;
}

static void call_name(tc_parser *p, const char *name, size_t n)
{
    tc_call *c = &p->calls[p->cur];
    c->name = strndup(name, n);
    if (!c->name) {
        p->oom = 1;
        return;
    }
    p->cur_named = 1;
    tc_delta d = {TC_D_CALL, p->cur, NULL, 0, c->id, c->name};
    if (p->emit) p->emit(p->ud, &d);
}

static void call_args(tc_parser *p, const char *s, size_t n)
{
    if (!n) return;
    tc_call *c = &p->calls[p->cur];
    char *a = realloc(c->args, c->args_len + n + 1);
    if (!a) {
        p->oom = 1;
        return;
    }
    memcpy(a + c->args_len, s, n);
    c->args_len += n;
    a[c->args_len] = 0;
    c->args = a;
    p->cur_args += n;
    tc_delta d = {TC_D_ARGS, p->cur, s, n, NULL, NULL};
    if (p->emit) p->emit(p->ud, &d);
}

static void call_end(tc_parser *p)
{
    if (p->cur >= 0 && !p->calls[p->cur].args_len) call_args(p, "{}", 2);
    p->cur = -1;
    p->after_call = 1;
}

/* Drops the call being read (its body was not a call after all). */
static void call_abandon(tc_parser *p)
{
    if (p->cur < 0) return;
    if (p->cur_named) { /* already streamed: it stays, as far as it got */
        call_end(p);
        return;
    }
    free(p->calls[p->cur].name);
    free(p->calls[p->cur].args);
    p->n_calls--;
    p->cur = -1;
}

/* Emits what the scan of the current call object adds: its name once, then its arguments up to
 * where they are certain. Returns 1 when the object is complete and was a call, 0 when more
 * text is needed, -1 when it is not a call. */
static int feed_obj(tc_parser *p, const char *s, size_t n, size_t start, size_t *end, int final)
{
    jobj o;
    tc__scan_obj(s, n, start, &o);
    if (o.state < 0) return -1;
    if (o.state == 1 && !o.name_done && o.fn_done) { /* {"type": "function", "function": {...}} */
        jobj inner;
        tc__scan_obj(s, o.fn_b, o.fn_a, &inner);
        if (inner.state == 1) {
            size_t e;
            if (p->cur < 0) call_begin(p);
            int r = feed_obj(p, s, o.fn_b, o.fn_a, &e, 1);
            *end = o.end;
            return r;
        }
    }
    if (!o.name_done && (o.state == 1 || final)) return -1;
    if (p->cur < 0) call_begin(p);
    if (p->oom) return -1;
    if (o.name_done && !p->cur_named) {
        size_t ln;
        char *name = tc__json_unescape(s + o.name_a, o.name_b - o.name_a, &ln);
        if (!name) {
            p->oom = 1;
            return -1;
        }
        call_name(p, name, ln);
        free(name);
    }
    if (p->cur_named && o.has_args) {
        char k = s[o.args_a];
        if (k == '"') {
            if (o.args_done && !p->cur_args) {
                size_t ln;
                char *a = tc__json_unescape(s + o.args_a + 1, o.args_b - o.args_a - 2, &ln);
                if (!a)
                    p->oom = 1;
                else
                    call_args(p, a, ln ? ln : 0);
                if (a && !ln) call_args(p, "{}", 2);
                free(a);
            }
        } else {
            size_t b = o.args_b;
            if (!o.args_done)
                while (b > o.args_a && tc__is_ws(s[b - 1]))
                    b--;
            if ((k == '{' || k == '[' || o.args_done) && b > o.args_a + p->cur_args)
                call_args(p, s + o.args_a + p->cur_args, b - o.args_a - p->cur_args);
        }
    }
    if (o.state != 1) return 0;
    *end = o.end;
    return 1;
}

/* ---- non-JSON call bodies (complete) ------------------------------------------------------ */

/* The arguments of an XML-parameter call, its string-typed parameters made strings. */
static void typed_args(tc_parser *p, const char *name, size_t nn, const char *a, size_t n)
{
    buf t = {0};
    if (tc__schemas_retype(&p->schemas, name, nn, a, n, &t))
        call_args(p, t.s, t.len);
    else
        call_args(p, a, n);
    free(t.s);
}

static void section_call(void *ud, const char *name, size_t nn, const char *args, size_t na)
{
    tc_parser *p = ud;
    int xml = p->syntax == TC_SEED_OSS || p->syntax == TC_MINICPM || p->syntax == TC_DSML ||
              p->syntax == TC_HY3 || p->syntax == TC_HERMES;
    call_begin(p);
    if (!p->oom) call_name(p, name, nn);
    if (!p->oom && xml)
        typed_args(p, name, nn, args, na);
    else if (!p->oom)
        call_args(p, args, na);
    if (!p->oom) call_end(p);
}

/* A <tool_call> body that is not JSON (toolcall_section.c reads it): 1 when it was calls. */
static int xml_body(tc_parser *p, const char *s, size_t n)
{
    if (tc__read_tool_call_body(s, n, NULL, NULL) < 0) return 0;
    tc__read_tool_call_body(s, n, section_call, p);
    return !p->oom;
}

/* ---- the tool-call stage ------------------------------------------------------------------ */

/* The length of the longest suffix of s[0..n) that is a proper prefix of marker. */
static size_t partial_suffix(const char *s, size_t n, const char *marker)
{
    size_t m = strlen(marker);
    for (size_t k = m - 1 < n ? m - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, marker, k)) return k;
    return 0;
}

/* Content of a tagged syntax until a call opens (1); the section markers around the calls are
 * dropped (3: go on). */
static int stage_tagged_content(tc_parser *p, const tc_tags *t, size_t *pos, int final)
{
    const char *s = p->t.s + *pos;
    size_t n = p->t.len - *pos, hold = 0;
    const char *const marks[3] = {t->call_open, t->section_open, t->section_close};
    const char *first = NULL;
    int which = 0;
    for (int i = 0; i < 3; i++) {
        const char *m = tc__find(s, n, marks[i]);
        if (m && (!first || m < first)) first = m, which = i;
        size_t h = final ? 0 : partial_suffix(s, n, marks[i]);
        if (h > hold) hold = h;
    }
    if (first) {
        out_content(p, s, (size_t)(first - s));
        *pos += (size_t)(first - s) + strlen(marks[which]);
        return which ? 3 : 1;
    }
    out_content(p, s, n - hold);
    *pos += n - hold;
    return 0;
}

/* A tagged call's body up to its closing marker, read whole. 1 when done, 0 to wait. */
static int stage_tagged_call(tc_parser *p, const tc_tags *t, size_t *pos, int final)
{
    const char *s = p->t.s + *pos;
    size_t n = p->t.len - *pos, na, nb, aa, ab;
    const char *close = tc__find(s, n, t->call_close);
    if (!close && !final) return 0;
    size_t body = close ? (size_t)(close - s) : n, used = close ? body + strlen(t->call_close) : n;
    if (tc__tagged_body(s, body, t, &na, &nb, &aa, &ab)) {
        call_begin(p);
        if (!p->oom) call_name(p, s + na, nb - na);
        if (!p->oom) call_args(p, s + aa, ab - aa);
        call_end(p);
    } else { /* not a call: the text is content after all */
        out_content(p, t->call_open, strlen(t->call_open));
        out_content(p, s, used);
    }
    *pos += used;
    return 1;
}

/* Content of a section syntax until a section opens (1; which one in p->section). */
static int stage_section_content(tc_parser *p, const tc_section *x, size_t *pos, int final)
{
    const char *s = p->t.s + *pos, *first = NULL;
    size_t n = p->t.len - *pos, hold = 0;
    for (int i = 0; i < TC_SECTION_PAIRS && x->open[i]; i++) {
        const char *m = tc__find(s, n, x->open[i]);
        if (m && (!first || m < first)) first = m, p->section = i;
        size_t h = final ? 0 : partial_suffix(s, n, x->open[i]);
        if (h > hold) hold = h;
    }
    if (first) {
        out_content(p, s, (size_t)(first - s));
        *pos += (size_t)(first - s) + strlen(x->open[p->section]);
        return 1;
    }
    out_content(p, s, n - hold);
    *pos += n - hold;
    return 0;
}


/* A section's body up to its closing marker (or the end), read whole. 1 when done, 0 to wait. */
static int stage_section_body(tc_parser *p, const tc_section *x, size_t *pos, int final)
{
    const char *s = p->t.s + *pos, *close_mark = x->close[p->section];
    size_t n = p->t.len - *pos;
    const char *close = !close_mark ? NULL : !*close_mark ? s : tc__find(s, n, close_mark);
    if (!close && !final) return 0; /* no closing marker: the section runs to the end */
    size_t body = close ? (size_t)(close - s) : n, used = close ? body + strlen(close_mark) : n;
    if (tc__section_read(x, p->section, s, body, section_call, p) < 0) { /* content after all */
        out_content(p, x->open[p->section], strlen(x->open[p->section]));
        out_content(p, s, used);
    }
    *pos += used;
    return 1;
}

/* Content until the syntax's call marker; returns 1 when the marker was consumed, 2 when it
 * was hermes' list form <tool_calls> (then the calls end at </tool_calls>). */
static int stage_content(tc_parser *p, size_t *pos, int final)
{
    if (tc__tags(p->syntax)) return stage_tagged_content(p, tc__tags(p->syntax), pos, final);
    if (tc__section(p->syntax)) return stage_section_content(p, tc__section(p->syntax), pos, final);
    const char *marker = p->syntax == TC_HERMES    ? "<tool_call>"
                         : p->syntax == TC_MISTRAL ? "[TOOL_CALLS]"
                                                   : NULL;
    const char *list = p->syntax == TC_HERMES ? "<tool_calls>" : NULL;
    const char *s = p->t.s + *pos;
    size_t n = p->t.len - *pos;
    const char *m = marker ? tc__find(s, n, marker) : NULL;
    const char *l = list ? tc__find(s, m ? (size_t)(m - s) : n, list) : NULL;
    if (l) {
        out_content(p, s, (size_t)(l - s));
        *pos += (size_t)(l - s) + strlen(list);
        p->close_tag = "</tool_calls>";
        return 2;
    }
    if (m) {
        out_content(p, s, (size_t)(m - s));
        *pos += (size_t)(m - s) + strlen(marker);
        return 1;
    }
    size_t hold = marker && !final ? partial_suffix(s, n, marker) : 0;
    size_t hold2 = list && !final ? partial_suffix(s, n, list) : 0;
    if (hold2 > hold) hold = hold2;
    out_content(p, s, n - hold);
    *pos += n - hold;
    return 0;
}

/* A call's body inside <tool_call>…</tool_call>. Returns 1 when the call is done, 0 to wait. */
static int stage_hermes_call(tc_parser *p, size_t *pos, int final)
{
    const char *s = p->t.s + *pos;
    size_t n = p->t.len - *pos, i = tc__skip_ws(s, n, 0);
    const char *close = tc__find(s, n, "</tool_call>");
    size_t body = close ? (size_t)(close - s) : n;
    if (i < body && s[i] == '{') {
        size_t end;
        int r = feed_obj(p, s, body, i, &end, close || final);
        if (r >= 0 && !close && !final) return 0; /* the closing tag is still to come */
        if (r == 1 || p->cur_named) {
            call_end(p);
            *pos += close ? body + 12 : n;
            return 1;
        }
        call_abandon(p);
    } else if (!close && !final)
        return 0;
    else if (xml_body(p, s, body)) {
        call_end(p);
        *pos += close ? body + 12 : n;
        return 1;
    }
    /* not a call: the text is content after all */
    out_content(p, "<tool_call>", 11);
    out_content(p, s, close ? body + 12 : n);
    *pos += close ? body + 12 : n;
    return 1;
}

/* [ {call}, {call} ] — returns 1 when the array ended (or was abandoned), 0 to wait. Inside
 * hermes' <tool_calls> (close_tag set) the brackets are optional and the list ends at the tag. */
static int stage_array(tc_parser *p, size_t *pos, int final)
{
    for (;;) {
        const char *s = p->t.s + *pos;
        size_t n = p->t.len - *pos, i = tc__skip_ws(s, n, 0);
        while (i < n && (s[i] == ',' || (p->close_tag && (s[i] == '[' || s[i] == ']'))))
            i = tc__skip_ws(s, n, i + 1);
        if (i >= n) return final;
        if (p->close_tag) {
            size_t k = strlen(p->close_tag), m = n - i < k ? n - i : k;
            if (!memcmp(s + i, p->close_tag, m)) {
                if (m < k && !final) return 0;
                if (m == k) {
                    *pos += i + k;
                    p->close_tag = NULL;
                    return 1;
                }
            }
        }
        if (s[i] == ']') {
            *pos += i + 1;
            return 1;
        }
        if (s[i] != '{') {
            out_content(p, s + i, n - i);
            *pos += n;
            return 1;
        }
        size_t end;
        int r = feed_obj(p, s, n, i, &end, final);
        if (r == 0) {
            if (final && p->cur_named) { /* cut short: the call keeps what it got */
                call_end(p);
                *pos += n;
            }
            return final;
        }
        if (r < 0) {
            call_abandon(p);
            out_content(p, s + i, n - i);
            *pos += n;
            return 1;
        }
        call_end(p);
        *pos += end;
    }
}

/* Streams the JSON value after white space from s[a] as the current call's arguments (past what
 * went out already). Returns 1 with *end just past the value when it is complete, or when no
 * JSON value starts there (*end: where it would have; the call keeps "{}"); 0 to wait. */
static int args_value(tc_parser *p, const char *s, size_t n, size_t a, int final, size_t *end)
{
    size_t b = tc__skip_ws(s, n, a);
    int done = 0;
    size_t e = b < n ? tc__skip_value(s, n, b, &done) : n;
    if (e == (size_t)-1) {
        *end = b;
        return 1;
    }
    size_t vis = e;
    if (!done)
        while (vis > b && tc__is_ws(s[vis - 1]))
            vis--;
    if (b < n && vis > b + p->cur_args) call_args(p, s + b + p->cur_args, vis - b - p->cur_args);
    if (!done && !final) return 0;
    *end = e;
    return 1;
}

/* Mistral after [TOOL_CALLS]: a JSON array, or name[ARGS]{...} (with an optional [CALL_ID]). */
static int stage_mistral_call(tc_parser *p, size_t *pos, int final)
{
    const char *s = p->t.s + *pos;
    size_t n = p->t.len - *pos, i = tc__skip_ws(s, n, 0);
    if (i >= n) return final;
    if (s[i] == '[') {
        *pos += i + 1;
        p->tmode = T_ARRAY;
        return stage_array(p, pos, final);
    }
    const char *args = tc__find(s + i, n - i, "[ARGS]"), *cid = tc__find(s + i, n - i, "[CALL_ID]");
    const char *name_end = cid && (!args || cid < args) ? cid : args;
    if (!args) {
        if (final) {
            out_content(p, s, n);
            *pos += n;
            return 1;
        }
        return 0;
    }
    if (p->cur < 0) {
        call_begin(p);
        if (p->oom) return 1;
        call_name(p, s + i, (size_t)(name_end - s - i));
    }
    size_t e;
    if (!args_value(p, s, n, (size_t)(args - s) + 6, final, &e)) return 0;
    call_end(p);
    *pos += e;
    return 1;
}

/* Llama 3.1's custom-tool form <function=NAME>{…}</function>, after the name: the arguments,
 * then the closing tag. Returns 1 when the call is done, 0 to wait. */
static int stage_function_call(tc_parser *p, size_t *pos, int final)
{
    static const char close[] = "</function>";
    const char *s = p->t.s + *pos;
    size_t n = p->t.len - *pos, e;
    if (!args_value(p, s, n, 0, final, &e)) return 0;
    size_t i = tc__skip_ws(s, n, e), k = n - i < sizeof close - 1 ? n - i : sizeof close - 1;
    if (!memcmp(s + i, close, k)) {
        if (k < sizeof close - 1 && !final) return 0;
        if (k == sizeof close - 1) e = i + k;
    }
    call_end(p);
    *pos += e;
    p->tmode = T_AFTER;
    return 1;
}

/* Llama 3.1's <function=NAME> at s[i]: 1 when it was read (the call begun, pos past it), 0 to
 * wait for more text, -1 when s[i] does not start one. */
static int function_open(tc_parser *p, const char *s, size_t n, size_t i, size_t *pos, int final)
{
    static const char open[] = "<function=";
    size_t k = n - i < sizeof open - 1 ? n - i : sizeof open - 1;
    if (memcmp(s + i, open, k)) return -1;
    if (k < sizeof open - 1) return final ? -1 : 0;
    size_t a = i + k, b = a;
    while (b < n && b - a <= 256 && s[b] != '>' && !tc__is_ws(s[b]) && s[b] != '<' && s[b] != '{')
        b++;
    if (b == n && !final && b - a <= 256) return 0;
    if (b == n || b == a || s[b] != '>') return -1;
    call_begin(p);
    if (p->oom) return -1;
    call_name(p, s + a, b - a);
    *pos += b + 1;
    p->tmode = T_FUNCTION;
    return 1;
}

/* Functionary's recipient line [>>>]NAME\n: a call to NAME follows, or text when NAME is "all".
 * 1 when decided, 0 to wait. Anything else is content to the end. */
static int stage_recipient(tc_parser *p, size_t *pos, int final)
{
    const char *s = p->t.s + *pos;
    size_t n = p->t.len - *pos, i = 0, k = n < 3 ? n : 3;
    if (!memcmp(s, ">>>", k)) {
        if (k < 3 && !final) return 0;
        if (k == 3) i = 3;
    }
    size_t b = i;
    while (b < n && b - i <= 256 && s[b] != '\n' && !tc__is_ws(s[b]) && s[b] != '{' && s[b] != '<')
        b++;
    if (b == n && !final && b - i <= 256) return 0;
    if (b == n || b == i || s[b] != '\n') {
        p->tmode = T_TAIL;
        return 1;
    }
    if (b - i == 3 && !memcmp(s + i, "all", 3)) {
        p->tmode = T_RECIPIENT_TEXT;
    } else {
        call_begin(p);
        if (p->oom) return 1;
        call_name(p, s + i, b - i);
        p->tmode = T_RECIPIENT_ARGS;
    }
    *pos += b + 1;
    return 1;
}

/* Functionary after a recipient: a call's arguments, or text, up to the next >>>. */
static int stage_recipient_body(tc_parser *p, size_t *pos, int final)
{
    const char *s = p->t.s + *pos;
    size_t n = p->t.len - *pos, e;
    if (p->tmode == T_RECIPIENT_ARGS) {
        if (!args_value(p, s, n, 0, final, &e)) return 0;
        call_end(p);
        *pos += e;
        p->tmode = T_RECIPIENT_TEXT; /* up to the next >>> (white space after a call is dropped) */
        return 1;
    }
    const char *m = tc__find(s, n, ">>>");
    size_t text = m ? (size_t)(m - s) : n - (final ? 0 : partial_suffix(s, n, ">>>"));
    out_content(p, s, text);
    *pos += text;
    if (m) p->tmode = T_RECIPIENT;
    return m != NULL;
}

/* The start of a llama3_json / json output: a call object or array, or content. */
static int stage_start(tc_parser *p, size_t *pos, int final)
{
    const char *s = p->t.s + *pos;
    size_t n = p->t.len - *pos, i = tc__skip_ws(s, n, 0);
    static const char tag[] = "<|python_tag|>";
    if (p->syntax == TC_LLAMA3_JSON && n - i < sizeof tag - 1 && !memcmp(s + i, tag, n - i) &&
        !final)
        return 0;
    if (p->syntax == TC_LLAMA3_JSON && n - i >= sizeof tag - 1 &&
        !memcmp(s + i, tag, sizeof tag - 1))
        i = tc__skip_ws(s, n, i + sizeof tag - 1);
    if (p->syntax == TC_LLAMA3_JSON) {
        int r = function_open(p, s, n, i, pos, final);
        if (r >= 0) return r;
    }
    if (p->syntax == TC_JSON && n - i >= 3 && !memcmp(s + i, "```", 3)) {
        const char *nl = memchr(s + i, '\n', n - i);
        if (!nl && !final) return 0;
        if (nl) i = tc__skip_ws(s, n, (size_t)(nl - s) + 1);
    } else if (p->syntax == TC_JSON && n - i < 3 && !memcmp(s + i, "```", n - i) && !final)
        return 0;
    if (i >= n) {
        if (!final) return 0;
        out_content(p, s, n);
        *pos += n;
        p->tmode = T_TAIL;
        return 1;
    }
    if (s[i] == '[') {
        *pos += i + 1;
        p->tmode = T_ARRAY;
        return 1;
    }
    if (s[i] == '{') {
        jobj o;
        tc__scan_obj(s, n, i, &o);
        if (o.state == 1 && !o.name_done && !o.fn_done && o.tc_done) { /* {"tool_calls": [...]} */
            for (size_t k = o.tc_a + 1; k < o.tc_b - 1;) {
                k = tc__skip_ws(s, o.tc_b - 1, k);
                if (k < o.tc_b - 1 && s[k] == ',') k = tc__skip_ws(s, o.tc_b - 1, k + 1);
                if (k >= o.tc_b - 1 || s[k] != '{') break;
                size_t end;
                int r = feed_obj(p, s, o.tc_b - 1, k, &end, 1);
                if (r != 1) {
                    call_abandon(p);
                    break;
                }
                call_end(p);
                k = end;
            }
            call_abandon(p); /* the call begun while the object was incomplete, if unused */
            *pos += o.end;
            p->tmode = T_AFTER;
            return 1;
        }
        size_t end;
        int r = feed_obj(p, s, n, i, &end, final);
        if (r == 0) {
            if (final && p->cur_named) {
                call_end(p);
                *pos += n;
                p->tmode = T_TAIL;
                return 1;
            }
            return 0;
        }
        if (r == 1) {
            call_end(p);
            *pos += end;
            p->tmode = T_AFTER;
            return 1;
        }
        call_abandon(p);
    }
    out_content(p, s, n); /* not a call: all of it is content */
    *pos += n;
    p->tmode = T_TAIL;
    return 1;
}

/* After a llama3_json / json call: ';' and another call, a closing fence, or content. */
static int stage_after(tc_parser *p, size_t *pos, int final)
{
    const char *s = p->t.s + *pos;
    size_t n = p->t.len - *pos, i = tc__skip_ws(s, n, 0);
    if (i >= n) {
        if (final) *pos += n;
        return final;
    }
    if (s[i] == ';' || s[i] == ',') {
        *pos += i + 1;
        p->tmode = T_START;
        return 1;
    }
    if (p->syntax == TC_JSON && n - i < 3 && !memcmp(s + i, "```", n - i) && !final) return 0;
    if (p->syntax == TC_JSON && n - i >= 3 && !memcmp(s + i, "```", 3)) i += 3;
    *pos += i;
    p->tmode = T_TAIL;
    return 1;
}

static void stage_args_only(tc_parser *p, size_t *pos, int final)
{
    const char *s = p->t.s + *pos;
    size_t n = p->t.len - *pos, a = p->cur_args ? 0 : tc__skip_ws(s, n, 0), b = n;
    while (b > a && tc__is_ws(s[b - 1])) /* trailing white space waits for what follows it */
        b--;
    if (b > a) call_args(p, s + a, b - a);
    *pos += final ? n : b;
    if (final) call_end(p);
}

/* Runs the tool-call stage over the undecided text, committing what it decides: each step
 * returns 1 when it decided something and the next one may go on, 0 when it waits for text. A
 * call being read keeps its text from its start (the step does not move pos past it). */
static void stage_tools(tc_parser *p, int final)
{
    size_t pos = 0;
    if (!p->t.s) buf_put(&p->t, "", 0); /* the stages read p->t.s as text */
    if (p->t.oom) p->oom = 1;
    while (!p->oom) {
        size_t before = pos;
        int mode = p->tmode, go = 0;
        switch (p->tmode) {
        case T_START:
            go = stage_start(p, &pos, final);
            break;
        case T_CONTENT:
            go = stage_content(p, &pos, final);
            if (go) p->tmode = go == 2 ? T_ARRAY : go == 3 ? T_CONTENT : T_CALL;
            break;
        case T_CALL:
            go = tc__tags(p->syntax)      ? stage_tagged_call(p, tc__tags(p->syntax), &pos, final)
                 : tc__section(p->syntax) ? stage_section_body(p, tc__section(p->syntax), &pos, final)
                 : p->syntax == TC_MISTRAL ? stage_mistral_call(p, &pos, final)
                                           : stage_hermes_call(p, &pos, final);
            if (go && p->tmode == T_CALL) p->tmode = T_CONTENT;
            break;
        case T_ARRAY:
            go = stage_array(p, &pos, final);
            if (go) p->close_tag = NULL;
            if (go) p->tmode = p->syntax == TC_MISTRAL || p->syntax == TC_HERMES ? T_CONTENT : T_AFTER;
            break;
        case T_AFTER:
            go = stage_after(p, &pos, final);
            break;
        case T_ARGS_ONLY:
            stage_args_only(p, &pos, final);
            break;
        case T_FUNCTION:
            go = stage_function_call(p, &pos, final);
            break;
        case T_RECIPIENT:
            go = stage_recipient(p, &pos, final);
            break;
        case T_RECIPIENT_ARGS:
        case T_RECIPIENT_TEXT:
            go = stage_recipient_body(p, &pos, final);
            break;
        default:
            out_content(p, p->t.s + pos, p->t.len - pos);
            pos = p->t.len;
        }
        if (!go || (pos == before && p->tmode == mode)) break;
    }
    buf_drop(&p->t, pos);
}

/* ---- the reasoning stage ------------------------------------------------------------------ */

static void to_tools(tc_parser *p, const char *s, size_t n)
{
    buf_put(&p->t, s, n);
    if (p->t.oom) p->oom = 1;
}

static void stage_reasoning(tc_parser *p, int final)
{
    static const char open[] = "<think>", close[] = "</think>";
    for (;;) {
        const char *s = p->r.s ? p->r.s : "";
        size_t n = p->r.len;
        if (p->rmode == R_START) {
            size_t i = tc__skip_ws(s, n, 0);
            size_t k = n - i < sizeof open - 1 ? n - i : sizeof open - 1;
            if (!memcmp(s + i, open, k) && k < sizeof open - 1 && !final) return;
            if (k == sizeof open - 1 && !memcmp(s + i, open, k)) {
                buf_drop(&p->r, i + k);
                p->rmode = R_THINK;
                continue;
            }
            p->rmode = p->reasoning == TC_REASON_DEEPSEEK_R1 ? R_THINK : R_CONTENT;
            continue;
        }
        if (p->rmode == R_THINK) {
            const char *m = tc__find(s, n, close);
            if (m) {
                out_reason(p, s, (size_t)(m - s));
                buf_drop(&p->r, (size_t)(m - s) + sizeof close - 1);
                p->rmode = R_CONTENT;
                continue;
            }
            size_t hold = final ? 0 : partial_suffix(s, n, close);
            out_reason(p, s, n - hold);
            buf_drop(&p->r, n - hold);
            return;
        }
        to_tools(p, s, n);
        buf_drop(&p->r, n);
        return;
    }
}

/* ---- public ------------------------------------------------------------------------------- */

tc_parser *tc_parser_create(int syntax, int reasoning, const char *forced_name, uint64_t id_seed)
{
    tc_parser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->syntax = syntax;
    p->reasoning = reasoning;
    p->rng = id_seed;
    p->cur = -1;
    p->rmode = reasoning ? R_START : R_CONTENT;
    p->tmode = syntax == TC_LLAMA3_JSON || syntax == TC_JSON ? T_START
               : syntax == TC_ARGS                           ? T_ARGS_ONLY
               : syntax == TC_FUNCTIONARY                    ? T_RECIPIENT
               : syntax == TC_SYNTAX_NONE                    ? T_TAIL
                                                             : T_CONTENT;
    if (forced_name && !(p->forced = strdup(forced_name))) {
        free(p);
        return NULL;
    }
    return p;
}

int tc_parser_add_tool(tc_parser *p, const char *name, const char *schema)
{
    return tc__schemas_add(&p->schemas, name, schema);
}

void tc_parser_destroy(tc_parser *p)
{
    if (!p) return;
    free(p->schemas.s);
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].args);
    }
    free(p->calls);
    free(p->r.s);
    free(p->t.s);
    free(p->content.s);
    free(p->reason.s);
    free(p->forced);
    free(p);
}

int tc_parser_feed(tc_parser *p, const char *text, size_t n, int final, tc_emit_fn emit, void *ud)
{
    if (p->oom) return -ENOMEM;
    p->emit = emit;
    p->ud = ud;
    if (p->syntax == TC_ARGS && !p->n_calls) {
        call_begin(p);
        if (!p->oom) call_name(p, p->forced ? p->forced : "", p->forced ? strlen(p->forced) : 0);
    }
    buf_put(&p->r, text, n);
    if (p->r.oom) p->oom = 1;
    if (!p->oom) stage_reasoning(p, final);
    if (!p->oom) stage_tools(p, final);
    p->emit = NULL;
    p->ud = NULL;
    return p->oom ? -ENOMEM : 0;
}

const char *tc_parser_content(const tc_parser *p, size_t *len)
{
    if (len) *len = p->content.len;
    return p->content.s ? p->content.s : "";
}

const char *tc_parser_reasoning(const tc_parser *p, size_t *len)
{
    if (len) *len = p->reason.len;
    return p->has_reason ? (p->reason.s ? p->reason.s : "") : NULL;
}

int tc_parser_n_calls(const tc_parser *p)
{
    return p->n_calls;
}

const tc_call *tc_parser_call(const tc_parser *p, int i)
{
    return i >= 0 && i < p->n_calls ? &p->calls[i] : NULL;
}
