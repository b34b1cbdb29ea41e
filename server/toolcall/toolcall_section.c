/*
 * toolcall_section.c — the call syntaxes whose calls sit in a marked section that is read whole
 * when its closing marker arrives (toolcall.c finds the markers in streamed text; this
 * file has the marker table and turns one complete section body into calls).
 *
 *   nemotron   <TOOLCALL>[{"name": …, "arguments": {…}}, …]</TOOLCALL>      (NVIDIA Nemotron)
 *   command_r  <|START_ACTION|>[{"tool_name": …, "parameters": {…}}]<|END_ACTION|>  (Cohere
 *              Command-A), or Action:\n```json\n[…]``` (Command-R+'s tool-use template)
 *   apertus    <|tools_prefix|>[{"NAME": {…}}, …]<|tools_suffix|>             (Swiss AI Apertus)
 *   seed_oss   <seed:tool_call><function=NAME><parameter=K>V</parameter>…</function>
 *              </seed:tool_call>                                              (ByteDance Seed-OSS)
 *   minicpm    <function name="NAME"><param name="K">V</param>…</function>   (OpenBMB MiniCPM;
 *              a value may be wrapped in <![CDATA[…]]>)
 *   gemma4     <|tool_call>call:NAME{k:<|"|>v<|"|>,n:3,…}<tool_call|>      (Google Gemma 4)
 *   lfm2       <|tool_call_start|>[NAME(k='v', n=3), …]<|tool_call_end|>  (Liquid LFM2: Python
 *              calls; True / False / None, lists, dicts and tuples as JSON)
 *   solar      <|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{…}
 *              <|tool_call:end|>…<|calls|>                                 (Upstage Solar Open)
 *   dsml       <｜DSML｜function_calls> (V3.2) or <｜DSML｜tool_calls> (V4), inside it
 *              <｜DSML｜invoke name="NAME"><｜DSML｜parameter name="K" string="true|false">V
 *              </｜DSML｜parameter>…</｜DSML｜invoke>                              (DeepSeek V3.2,
 * V4)
 *
 *   hy3        <tool_calls:opensource><tool_call:opensource>NAME<tool_sep:opensource>
 *              <arg_key:opensource>K</arg_key:opensource><arg_value:opensource>V…
 *              </tool_call:opensource>…</tool_calls:opensource>                (tencent Hy3)
 *   kimi_k3    <|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|><|open|>argument
 *              key="K" type="string"<|sep|>V<|close|>argument<|sep|>…<|close|>call<|sep|>…
 *              <|close|>tools<|sep|>                                           (Kimi-K3)
 *   gigachat3  function call<|role_sep|>{"name": …, "arguments": {…}}<|message_sep|>  (GigaChat3)
 *   atem       [<|start|>assistant] to=NAME<|message|><atem:function_calls><atem:invoke
 *              name="NAME"><atem:parameter name="K">V</atem:parameter>…</atem:invoke>
 *              </atem:function_calls>[<|eom|>]  (Muse Glimmer: the message headers and <|eom|>
 *              are dropped, so a message to user or self is content)
 *   (hermes)   MiniMax-M3 inside <tool_call>: <invoke name="NAME"><K>V</K>…</invoke>…, nested
 *              values as elements (a list as <item>s), with ]<]minimax[>[ before every tag
 *   granite    <|tool_call|>[{"name": …, "arguments": {…}}, …] to the end of the answer
 *              (IBM Granite 3.x) or to <|/tool_call|> (Microsoft Phi-4-mini)
 *
 * Values of the XML-parameter styles (seed_oss, minicpm, dsml): the parameter's text is taken
 * as JSON when it is strictly valid JSON (a number, true, an object …) and as a string
 * otherwise; a CDATA value and dsml's string="true" always give a string. toolcall.c then
 * makes the parameters the request's tool schema types as strings strings again
 * (toolcall_schema.c), so the schema's type wins where the request gives one.
 * A section that does not parse as calls as a whole gives no call at all: the caller keeps its
 * text as content.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/toolcall/internal.h"

/* ---- JSON lists of call objects ---------------------------------------------------------- */

/* [{"name"|"tool_name": …, "arguments"|"parameters": …}, …] or one such object. */
static int read_json_list(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    size_t i = tc__skip_ws(s, n, 0);
    int list = i < n && s[i] == '[', count = 0;
    if (list) i++;
    for (;;) {
        i = tc__skip_ws(s, n, i);
        if (i < n && s[i] == ',' && count) i = tc__skip_ws(s, n, i + 1);
        if (i >= n || s[i] == ']') break;
        if (s[i] != '{') return -1;
        jobj o;
        tc__scan_obj(s, n, i, &o);
        if (o.state != 1 || !o.name_done) return -1;
        size_t ln;
        char *name = tc__json_unescape(s + o.name_a, o.name_b - o.name_a, &ln);
        buf args = {0};
        if (o.has_args && s[o.args_a] == '"') {
            size_t la;
            char *a = tc__json_unescape(s + o.args_a + 1, o.args_b - o.args_a - 2, &la);
            if (a) buf_put(&args, a, la);
            free(a);
        } else if (o.has_args)
            buf_put(&args, s + o.args_a, o.args_b - o.args_a);
        else
            buf_put(&args, "{}", 2);
        count = name ? tc__give(fn, ud, name, ln, &args, count) : -1;
        free(name);
        free(args.s);
        if (count < 0) return -1;
        i = o.end;
        if (!list) break;
    }
    i = list && i < n && s[i] == ']' ? i + 1 : i;
    return tc__skip_ws(s, n, i) == n && count ? count : -1;
}

/* Apertus: [{"NAME": {args}}, …]. */
static int read_name_keyed(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    size_t i = tc__skip_ws(s, n, 0);
    int count = 0, done;
    if (i >= n || s[i] != '[') return -1;
    for (i++;;) {
        i = tc__skip_ws(s, n, i);
        if (i < n && s[i] == ',' && count) i = tc__skip_ws(s, n, i + 1);
        if (i >= n) return -1;
        if (s[i] == ']') break;
        if (s[i] != '{') return -1;
        size_t ka = tc__skip_ws(s, n, i + 1);
        if (ka >= n || s[ka] != '"') return -1;
        size_t ke = tc__skip_value(s, n, ka, &done);
        if (ke == (size_t)-1 || !done) return -1;
        size_t c = tc__skip_ws(s, n, ke);
        if (c >= n || s[c] != ':') return -1;
        size_t va = tc__skip_ws(s, n, c + 1);
        size_t ve = va < n ? tc__skip_value(s, n, va, &done) : (size_t)-1;
        if (ve == (size_t)-1 || !done) return -1;
        size_t close = tc__skip_ws(s, n, ve);
        if (close >= n || s[close] != '}') return -1;
        size_t ln;
        char *name = tc__json_unescape(s + ka + 1, ke - ka - 2, &ln);
        buf args = {0};
        buf_put(&args, s + va, ve - va);
        count = name ? tc__give(fn, ud, name, ln, &args, count) : -1;
        free(name);
        free(args.s);
        if (count < 0) return -1;
        i = close + 1;
    }
    return tc__skip_ws(s, n, i + 1) == n && count ? count : -1;
}

/* ---- XML-parameter styles ---------------------------------------------------------------- */

/* Appends a parameter's text as a JSON value (JSON when it is, else a string); a CDATA wrapper
 * is taken off first and always gives a string. */
static void xml_value(buf *b, const char *v, size_t n, int force_string)
{
    size_t a = 0;
    while (a < n && tc__is_ws(v[a]))
        a++;
    while (n > a && tc__is_ws(v[n - 1]))
        n--;
    if (n - a >= 12 && tc__at(v, n, a, "<![CDATA[") && !memcmp(v + n - 3, "]]>", 3)) {
        tc__json_str(b, v + a + 9, n - a - 12);
        return;
    }
    if (force_string)
        tc__json_str(b, v + a, n - a);
    else
        tc__json_value_of(b, v + a, n - a);
}

int tc__xml_params(const char *s, size_t n, buf *args)
{
    const char *e = s + n, *q = s;
    int first = 1;
    buf_put(args, "{", 1);
    for (;;) {
        const char *ko = tc__find(q, (size_t)(e - q), "<parameter=");
        if (!ko) break;
        const char *ka = ko + 11, *kb = tc__find(ka, (size_t)(e - ka), ">");
        if (!kb) return -1;
        const char *va = kb + 1, *vb = tc__find(va, (size_t)(e - va), "</parameter>");
        if (!vb) vb = e;
        if (!first) buf_put(args, ", ", 2);
        first = 0;
        tc__json_str(args, ka, (size_t)(kb - ka));
        buf_put(args, ": ", 2);
        xml_value(args, va, (size_t)(vb - va), 0);
        q = vb;
    }
    buf_put(args, "}", 1);
    return args->s && !args->oom ? 0 : -1;
}

/* Reads one call's text a[0..b) (between its opening and closing markers): its name
 * [*na, *nb) and its arguments appended to args. 0, or -1 when it is not a call. */
typedef int (*body_fn)(const void *ctx, const char *a, const char *b, const char **na,
                       const char **nb, buf *args);

/* The calls of s[0..n), each from open (after white space) to close (or the end; close NULL:
 * one call, to the end), nothing else between them but white space: the number of calls, or
 * -1. */
static int each_call(const char *s, size_t n, const char *open, const char *close, body_fn body,
                     const void *ctx, tc_call_fn fn, void *ud)
{
    const char *e = s + n, *q = s;
    size_t lo = strlen(open), lc = close ? strlen(close) : 0;
    int count = 0;
    for (;;) {
        size_t i = tc__skip_ws(q, (size_t)(e - q), 0);
        if (q + i >= e) break;
        if (!tc__at(q, (size_t)(e - q), i, open)) return -1;
        const char *a = q + i + lo, *na, *nb;
        const char *end = close ? tc__find(a, (size_t)(e - a), close) : NULL;
        buf args = {0};
        int r = body(ctx, a, end ? end : e, &na, &nb, &args);
        if (!r) /* the name without white space around it */
            for (; na < nb && (tc__is_ws(*na) || tc__is_ws(nb[-1]));)
                tc__is_ws(*na) ? na++ : nb--;
        count = r ? -1 : tc__give(fn, ud, na, (size_t)(nb - na), &args, count);
        free(args.s);
        if (count < 0) return -1;
        q = end ? end + lc : e;
    }
    return count ? count : -1;
}

/* Seed-OSS: after <function=, NAME> and <parameter=K>V</parameter>… */
static int body_function_eq(const void *ctx, const char *a, const char *b, const char **na,
                            const char **nb, buf *args)
{
    (void)ctx;
    const char *ne = memchr(a, '>', (size_t)(b - a));
    if (!ne || ne == a) return -1;
    for (const char *c = a; c < ne; c++)
        if (!tc__name_char(*c)) return -1;
    *na = a;
    *nb = ne;
    return tc__xml_params(ne + 1, (size_t)(b - ne - 1), args);
}

static int read_function_eq(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    return each_call(s, n, "<function=", "</function>", body_function_eq, NULL, fn, ud);
}

/* The quoted value of attribute attr="…" in s[0..n): [*a, *b). 1 when found. */
static int attr(const char *s, size_t n, const char *attr_eq, const char **a, const char **b)
{
    const char *k = tc__find(s, n, attr_eq);
    if (!k) return 0;
    *a = k + strlen(attr_eq);
    *b = memchr(*a, '"', (size_t)(s + n - *a));
    return *b != NULL;
}

/* The tags of an invoke-style syntax: <NS+INVOKE name="NAME"><NS+PARAM name="K"[
 * string="true|false"]>V</NS+PARAM>…</NS+INVOKE>. */
typedef struct invoke_tags {
    char io[64], ic[64], po[64], pc[64];
} invoke_tags;

static int body_invoke(const void *ctx, const char *a, const char *b, const char **na,
                       const char **nb, buf *args)
{
    const invoke_tags *t = ctx;
    const char *he = memchr(a, '>', (size_t)(b - a));
    if (!he || !attr(a, (size_t)(he - a), "name=\"", na, nb)) return -1;
    buf_put(args, "{", 1);
    for (const char *p = he + 1; (p = tc__find(p, (size_t)(b - p), t->po));) {
        const char *pe = memchr(p, '>', (size_t)(b - p)), *ka, *kb, *sa, *sb;
        if (!pe || !attr(p, (size_t)(pe - p), "name=\"", &ka, &kb)) break;
        int str = attr(p, (size_t)(pe - p), "string=\"", &sa, &sb) && sb - sa == 4 &&
                  !memcmp(sa, "true", 4);
        const char *ve = tc__find(pe + 1, (size_t)(b - pe - 1), t->pc);
        if (!ve) ve = b;
        if (args->len > 1) buf_put(args, ", ", 2);
        tc__json_str(args, ka, (size_t)(kb - ka));
        buf_put(args, ": ", 2);
        xml_value(args, pe + 1, (size_t)(ve - pe - 1), str);
        p = ve;
    }
    buf_put(args, "}", 1);
    return 0;
}

static int read_invoke(const char *s, size_t n, const char *ns, const char *invoke,
                       const char *param, tc_call_fn fn, void *ud)
{
    invoke_tags t;
    snprintf(t.io, sizeof t.io, "<%s%s ", ns, invoke);
    snprintf(t.ic, sizeof t.ic, "</%s%s>", ns, invoke);
    snprintf(t.po, sizeof t.po, "<%s%s ", ns, param);
    snprintf(t.pc, sizeof t.pc, "</%s%s>", ns, param);
    return each_call(s, n, t.io, t.ic, body_invoke, &t, fn, ud);
}

/* MiniCPM: the section is one <function name=…>…</function>, its markers taken off. */
static int read_minicpm(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    buf whole = {0};
    buf_put(&whole, "<function name=", 15);
    buf_put(&whole, s, n);
    buf_put(&whole, "</function>", 11);
    int r = whole.s && !whole.oom ? read_invoke(whole.s, whole.len, "", "function", "param", fn, ud)
                                   : -1;
    free(whole.s);
    return r == 1 ? 1 : -1;
}

static int read_dsml(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    return read_invoke(s, n, "｜DSML｜", "invoke", "parameter", fn, ud);
}

/* ---- Solar's, Hy3's and Kimi-K3's tagged calls ---------------------------------------------- */

/* Appends the JSON value that is all of a[0..b) (white space around it allowed). 0 or -1. */
static int whole_json(const char *a, const char *b, buf *args)
{
    int done;
    size_t n = (size_t)(b - a), v = tc__skip_ws(a, n, 0);
    size_t ve = v < n ? tc__skip_value(a, n, v, &done) : (size_t)-1;
    if (ve == (size_t)-1 || !done || tc__skip_ws(a, n, ve) != n) return -1;
    buf_put(args, a + v, ve - v);
    return args->oom ? -ENOMEM : 0;
}

/* Solar: after <|tool_call:begin|>, ID<|tool_call:name|>NAME<|tool_call:args|>{…} */
static int body_solar(const void *ctx, const char *a, const char *b, const char **na,
                      const char **nb, buf *args)
{
    static const char nm[] = "<|tool_call:name|>", ar[] = "<|tool_call:args|>";
    (void)ctx;
    const char *x = tc__find(a, (size_t)(b - a), nm);
    const char *y = x ? tc__find(x, (size_t)(b - x), ar) : NULL;
    if (!y) return -1;
    *na = x + sizeof nm - 1;
    *nb = y;
    return whole_json(y + sizeof ar - 1, b, args);
}

static int read_solar(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    return each_call(s, n, "<|tool_call:begin|>", "<|tool_call:end|>", body_solar, NULL, fn, ud);
}

/* Key-value tags: the name up to sep (NULL: up to the first key or the end), then
 * KO K KC VO V VC pairs. */
typedef struct kv_tags {
    const char *sep, *ko, *kc, *vo, *vc;
} kv_tags;

static const kv_tags glm_tags = {NULL, "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};
static const kv_tags hy3_tags = {"<tool_sep:opensource>", "<arg_key:opensource>",
                                 "</arg_key:opensource>", "<arg_value:opensource>",
                                 "</arg_value:opensource>"};

/* GLM: NAME<arg_key>K</arg_key><arg_value>V</arg_value>…; Hy3: after <tool_call:opensource>,
 * NAME<tool_sep:opensource> and the pairs with :opensource tags. */
static int body_kv(const void *ctx, const char *a, const char *b, const char **na, const char **nb,
                   buf *args)
{
    const kv_tags *t = ctx;
    const char *ne = tc__find(a, (size_t)(b - a), t->sep ? t->sep : t->ko), *k;
    if (!ne && t->sep) return -1;
    k = ne ? ne : b;
    const char *x = a, *y = k;
    while (x < y && tc__is_ws(*x))
        x++;
    while (y > x && tc__is_ws(y[-1]))
        y--;
    for (const char *c = x; c < y; c++) /* one word */
        if (!tc__name_char(*c)) return -1;
    *na = x;
    *nb = y;
    buf_put(args, "{", 1);
    size_t lko = strlen(t->ko), lvo = strlen(t->vo);
    for (; (k = tc__find(k, (size_t)(b - k), t->ko));) {
        const char *ka = k + lko, *kb = tc__find(ka, (size_t)(b - ka), t->kc);
        const char *va = kb ? tc__find(kb, (size_t)(b - kb), t->vo) : NULL;
        const char *vb = va ? tc__find(va, (size_t)(b - va), t->vc) : NULL;
        if (!vb) break;
        va += lvo;
        if (args->len > 1) buf_put(args, ", ", 2);
        tc__json_str(args, ka, (size_t)(kb - ka));
        buf_put(args, ": ", 2);
        xml_value(args, va, (size_t)(vb - va), 0);
        k = vb;
    }
    buf_put(args, "}", 1);
    return args->oom ? -ENOMEM : 0;
}

static int read_hy3(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    return each_call(s, n, "<tool_call:opensource>", "</tool_call:opensource>", body_kv, &hy3_tags,
                     fn, ud);
}

int tc__read_tool_call_body(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    if (tc__find(s, n, "<invoke ")) return tc__read_invoke_tree(s, n, fn, ud);
    if (tc__find(s, n, "<function=")) return read_function_eq(s, n, fn, ud);
    /* GLM: the body is the one call, without markers of its own */
    return each_call(s, n, "", NULL, body_kv, &glm_tags, fn, ud);
}

/* Kimi-K3: after <|open|>call, tool="NAME" index="1"<|sep|> then <|open|>argument key="K"
 * type="T"<|sep|>V<|close|>argument<|sep|>… (type string: a string; others: JSON) or one
 * <|open|>json type="object"<|sep|>{…}<|close|>json<|sep|> */
static int body_kimi3(const void *ctx, const char *a, const char *b, const char **na,
                      const char **nb, buf *args)
{
    static const char sep[] = "<|sep|>", ao[] = "<|open|>argument ",
                      ac[] = "<|close|>argument<|sep|>", jo[] = "<|open|>json",
                      jc[] = "<|close|>json<|sep|>";
    (void)ctx;
    const char *he = tc__find(a, (size_t)(b - a), sep);
    if (!he || !attr(a, (size_t)(he - a), "tool=\"", na, nb)) return -1;
    const char *j = tc__find(he, (size_t)(b - he), jo);
    if (j) { /* the arguments as one JSON object */
        const char *ja = tc__find(j, (size_t)(b - j), sep);
        const char *jb = ja ? tc__find(ja, (size_t)(b - ja), jc) : NULL;
        return jb ? whole_json(ja + sizeof sep - 1, jb, args) : -1;
    }
    buf_put(args, "{", 1);
    for (const char *p = he; (p = tc__find(p, (size_t)(b - p), ao));) {
        const char *pe = tc__find(p, (size_t)(b - p), sep), *ka, *kb, *ta, *tb;
        if (!pe || !attr(p, (size_t)(pe - p), "key=\"", &ka, &kb)) break;
        int str = attr(p, (size_t)(pe - p), "type=\"", &ta, &tb) && tb - ta == 6 &&
                  !memcmp(ta, "string", 6);
        const char *va = pe + sizeof sep - 1, *vb = tc__find(va, (size_t)(b - va), ac);
        if (!vb) vb = b;
        if (args->len > 1) buf_put(args, ", ", 2);
        tc__json_str(args, ka, (size_t)(kb - ka));
        buf_put(args, ": ", 2);
        if (str)
            tc__json_str(args, va, (size_t)(vb - va));
        else
            xml_value(args, va, (size_t)(vb - va), 0);
        p = vb;
    }
    buf_put(args, "}", 1);
    return args->oom ? -ENOMEM : 0;
}

static int read_kimi3(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    return each_call(s, n, "<|open|>call ", "<|close|>call<|sep|>", body_kimi3, NULL, fn, ud);
}

/* ---- MiniMax-M3's element tree ---------------------------------------------------------- */

enum { TREE_DEPTH = 64 };

/* The content of an element up to its closing tag </name[0..nl)>, from s[i], appended to b as
 * JSON: text is a scalar (JSON when strictly valid, else a string); child elements are an
 * object, or an array when all of them are <item>. Past the closing tag, or (size_t)-1. */
static size_t tree_value(const char *s, size_t n, size_t i, const char *name, size_t nl, buf *b,
                         int depth)
{
    const size_t bad = (size_t)-1;
    char close[80];
    if (nl + 3 >= sizeof close || depth > TREE_DEPTH) return bad;
    snprintf(close, sizeof close, "</%.*s>", (int)nl, name);
    size_t j = tc__skip_ws(s, n, i);
    if (j + 1 >= n || s[j] != '<' || s[j + 1] == '/') { /* text */
        const char *e = tc__find(s + i, n - i, close);
        if (!e) return bad;
        xml_value(b, s + i, (size_t)(e - s) - i, 0);
        return (size_t)(e - s) + strlen(close);
    }
    buf obj = {0}, arr = {0}; /* the children keyed by their names, and as a list */
    int items = 0, all_items = 1;
    for (;; items++) {
        j = tc__skip_ws(s, n, j);
        if (tc__at(s, n, j, close)) break;
        size_t ka = j + 1, kb = ka;
        while (kb < n && s[kb] != '>' && !tc__is_ws(s[kb]) && s[kb] != '/')
            kb++;
        buf v = {0};
        if (s[j] != '<' || kb >= n || s[kb] != '>' || kb == ka ||
            (j = tree_value(s, n, kb + 1, s + ka, kb - ka, &v, depth + 1)) == bad || !v.s ||
            v.oom) {
            free(obj.s), free(arr.s), free(v.s);
            return bad;
        }
        all_items &= kb - ka == 4 && !memcmp(s + ka, "item", 4);
        buf_put(&obj, items ? ", " : "{", items ? 2 : 1);
        tc__json_str(&obj, s + ka, kb - ka);
        buf_put(&obj, ": ", 2);
        buf_put(&obj, v.s, v.len);
        buf_put(&arr, items ? ", " : "[", items ? 2 : 1);
        buf_put(&arr, v.s, v.len);
        free(v.s);
    }
    buf_put(&obj, "}", 1);
    buf_put(&arr, "]", 1);
    buf *pick = all_items ? &arr : &obj;
    if (pick->oom)
        b->oom = 1; /* the value is incomplete: so is b */
    else if (pick->s)
        buf_put(b, pick->s, pick->len);
    free(obj.s);
    free(arr.s);
    return j + strlen(close);
}

/* After <invoke , name="NAME"> and the arguments as elements <K>V</K>… */
static int body_tree(const void *ctx, const char *a, const char *b, const char **na,
                     const char **nb, buf *args)
{
    (void)ctx;
    const char *he = memchr(a, '>', (size_t)(b - a));
    if (!he || !attr(a, (size_t)(he - a), "name=\"", na, nb)) return -1;
    /* the arguments are the content of an element closed by the end of the call */
    buf t = {0};
    buf_put(&t, he + 1, (size_t)(b - he - 1));
    buf_put(&t, "</invoke>", 9);
    int ok = t.s && !t.oom;
    size_t i = tc__skip_ws(ok ? t.s : "", ok ? t.len : 0, 0), e = (size_t)-1;
    if (ok && tc__at(t.s, t.len, i, "</invoke>")) {
        buf_put(args, "{}", 2); /* a failure shows in args->oom (tc__give) */
        e = 0;
    } else if (ok)
        e = tree_value(t.s, t.len, 0, "invoke", 6, args, 0);
    if (e != (size_t)-1 && args->s && args->s[0] == '[') e = (size_t)-1; /* not an object */
    free(t.s);
    return e == (size_t)-1 ? -1 : 0;
}

int tc__read_invoke_tree(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    static const char sep[] = "]<]minimax[>["; /* MiniMax-M3 writes it before every tag */
    buf t = {0};
    buf_put(&t, "", 0);
    for (const char *q = s, *e = s + n; q < e;) {
        const char *m = tc__find(q, (size_t)(e - q), sep);
        buf_put(&t, q, (size_t)((m ? m : e) - q));
        q = m ? m + sizeof sep - 1 : e;
    }
    int r = t.s && !t.oom ? each_call(t.s, t.len, "<invoke ", "</invoke>", body_tree, NULL, fn, ud)
                          : -1;
    free(t.s);
    return r;
}

/* ---- Muse Glimmer's messages --------------------------------------------------------------- */

static int read_atem(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    return read_invoke(s, n, "atem:", "invoke", "parameter", fn, ud);
}

/* A message header's recipient (between " to=" and <|message|>) or a bare header token: 0
 * (dropped) when it is one word or nothing, else -1 (content). */
static int read_header(const char *s, size_t n, tc_call_fn fn, void *ud)
{
    (void)fn, (void)ud;
    for (size_t i = 0; i < n; i++)
        if (!tc__name_char(s[i])) return -1;
    return 0;
}

/* ---- the table --------------------------------------------------------------------------- */

static const tc_section sections[] = {
    {TC_NEMOTRON, "<TOOLCALL>", {"<TOOLCALL>"}, {"</TOOLCALL>"}, read_json_list, NULL},
    /* Command-A; Command-R+'s tool-use template: Action: and the list in a ```json fence */
    {TC_COMMAND_R,
     "<|START_ACTION|>",
     {"<|START_ACTION|>", "Action:\n```json"},
     {"<|END_ACTION|>", "```"},
     read_json_list,
     NULL},
    /* detection only: that template writes the marker inside a string literal */
    {TC_COMMAND_R, "Action:\\n```json", {NULL}, {NULL}, NULL, NULL},
    {TC_APERTUS,
     "<|tools_prefix|>",
     {"<|tools_prefix|>"},
     {"<|tools_suffix|>"},
     read_name_keyed,
     NULL},
    {TC_SEED_OSS,
     "<seed:tool_call>",
     {"<seed:tool_call>"},
     {"</seed:tool_call>"},
     read_function_eq,
     NULL},
    {TC_MINICPM, "<param name=", {"<function name="}, {"</function>"}, read_minicpm, NULL},
    {TC_GEMMA4, "<|tool_call>", {"<|tool_call>"}, {"<tool_call|>"}, tc__read_gemma4, NULL},
    {TC_LFM2,
     "<|tool_call_start|>",
     {"<|tool_call_start|>"},
     {"<|tool_call_end|>"},
     tc__read_pythonic,
     NULL},
    {TC_SOLAR, "<|tool_call:begin|>", {"<|tool_calls|>"}, {"<|calls|>"}, read_solar, NULL},
    /* the templates build the markers from a variable holding the tag's prefix */
    {TC_DSML,
     "｜DSML｜",
     {"<｜DSML｜function_calls>", "<｜DSML｜tool_calls>"},
     {"</｜DSML｜function_calls>", "</｜DSML｜tool_calls>"},
     read_dsml,
     NULL},
    /* the templates build these markers from variables or macros: detected by a piece */
    {TC_HY3,
     "<tool_calls{}>",
     {"<tool_calls:opensource>"},
     {"</tool_calls:opensource>"},
     read_hy3,
     NULL},
    {TC_KIMI_K3,
     "'<|open|>' + tag",
     {"<|open|>tools<|sep|>"},
     {"<|close|>tools<|sep|>"},
     read_kimi3,
     NULL},
    /* GigaChat3's call is a message of its own: the text's message_sep before it goes too */
    {TC_GIGACHAT3,
     "<|role_sep|>",
     {"<|message_sep|>\n\nfunction call<|role_sep|>", "function call<|role_sep|>"},
     {"<|message_sep|>", "<|message_sep|>"},
     read_json_list,
     NULL},
    /* Muse Glimmer: messages <|start|>assistant to=RECIPIENT<|message|>…<|eom|>; the headers
     * go, a call's message holds an atem section */
    {TC_ATEM,
     "<atem:function_calls>",
     {"<atem:function_calls>", " to=", "<|start|>assistant", "<|message|>", "<|eom|>"},
     {"</atem:function_calls>", "<|message|>", "", "", ""},
     read_atem,
     read_header},
    /* Granite writes the calls to the end of its answer; Phi-4-mini closes them */
    {TC_GRANITE, "<|tool_call|>", {"<|tool_call|>"}, {"<|/tool_call|>"}, read_json_list, NULL},
};

const tc_section *tc__section(int syntax)
{
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) /* the first: markers */
        if (sections[i].syntax == syntax) return &sections[i];
    return NULL;
}

int tc__section_detect(const char *t)
{
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        if (strstr(t, sections[i].detect)) return sections[i].syntax;
    return -1;
}

int tc__section_read(const tc_section *x, int pair, const char *s, size_t n, tc_call_fn fn,
                     void *ud)
{
    tc_read_fn read = pair && x->read2 ? x->read2 : x->read;
    int r = read(s, n, NULL, NULL); /* all of it, or none */
    if (r > 0 && fn) read(s, n, fn, ud);
    return r;
}
