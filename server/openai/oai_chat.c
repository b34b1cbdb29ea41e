/*
 * oai_chat.c — tools, tool_choice, the template's inputs and the reading of the answer for
 * chat completions (see oai_chat.h).
 *
 * Parsing validates with cJSON (400s name the field) and keeps the body; the template's values are
 * read again from that copy with jinja/'s JSON reader, which keeps key order and int / float. The
 * answer of each choice goes through a toolcall/ parser (its chat state); the parser's totals
 * become the message of a non-streamed answer here, its deltas the stream's chunks in
 * oai_chat_stream.c.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai/oai_chat.h"
#include "server/openai/internal.h"
#include "server/openai/oai_schema.h"
#include "server/toolcall/toolcall.h"

#define ERR_INVALID "invalid_request_error"

/* ---- parsing ------------------------------------------------------------------------------ */

static int absent(const cJSON *v)
{
    return !v || cJSON_IsNull(v);
}

/* One function definition {name, description?, parameters?} into t; param names it. */
static int parse_function(const cJSON *f, const char *param, oai_tool *t, oai_error *e)
{
    char p[96];
    if (!cJSON_IsObject(f)) return oai__bad_type(e, param, "a function object");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
    snprintf(p, sizeof p, "%s.name", param);
    if (!cJSON_IsString(name) || !*name->valuestring)
        return oai__bad_type(e, p, "a non-empty string");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(f, "parameters");
    snprintf(p, sizeof p, "%s.parameters", param);
    if (!absent(params) && !cJSON_IsObject(params))
        return oai__bad_type(e, p, "a JSON Schema object");
    t->name = strdup(name->valuestring);
    t->parameters = absent(params) ? NULL : cJSON_PrintUnformatted(params);
    if (!t->name || (!absent(params) && !t->parameters)) return oai__oom(e);
    return 0;
}

static int parse_tools(const cJSON *root, oai_chat *ch, oai_error *e)
{
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *fns = cJSON_GetObjectItemCaseSensitive(root, "functions");
    if (!absent(tools) && !cJSON_IsArray(tools))
        return oai__bad_type(e, "tools", "an array of tools");
    if (!absent(fns) && !cJSON_IsArray(fns))
        return oai__bad_type(e, "functions", "an array of functions");
    int nt = absent(tools) ? 0 : cJSON_GetArraySize(tools),
        nf = absent(fns) ? 0 : cJSON_GetArraySize(fns);
    if (nt && nf) return oai__bad_value(e, "functions", "cannot be used together with 'tools'");
    ch->legacy = nf > 0 || !absent(cJSON_GetObjectItemCaseSensitive(root, "function_call"));
    int n = nt ? nt : nf;
    if (n > 4096)
        return oai__bad_value(e, nt ? "tools" : "functions", "has more than 4096 entries");
    if (!n) return 0;
    ch->tools = calloc((size_t)n, sizeof *ch->tools);
    if (!ch->tools) return oai__oom(e);
    const cJSON *it, *list = nt ? tools : fns;
    cJSON_ArrayForEach(it, list)
    {
        char p[64];
        int i = ch->n_tools;
        oai_tool *t = &ch->tools[ch->n_tools++];
        if (nf) {
            snprintf(p, sizeof p, "functions[%d]", i);
            int rc = parse_function(it, p, t, e);
            if (rc) return rc;
            continue;
        }
        snprintf(p, sizeof p, "tools[%d]", i);
        if (!cJSON_IsObject(it)) return oai__bad_type(e, p, "a tool object");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
        if (!absent(type) && (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))) {
            snprintf(p, sizeof p, "tools[%d].type", i);
            return oai__bad_value(e, p, "must be 'function' (the only tool type this server runs)");
        }
        snprintf(p, sizeof p, "tools[%d].function", i);
        int rc = parse_function(cJSON_GetObjectItemCaseSensitive(it, "function"), p, t, e);
        if (rc) return rc;
    }
    return 0;
}

static int tool_index(const oai_chat *ch, const char *name)
{
    for (int i = 0; i < ch->n_tools; i++)
        if (!strcmp(ch->tools[i].name, name)) return i;
    return -1;
}

/* tool_choice, or the legacy function_call: "none" | "auto" | "required" | a named function. */
static int parse_choice(const cJSON *root, oai_chat *ch, oai_error *e)
{
    const char *param = "tool_choice";
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, param);
    if (absent(tc)) {
        param = "function_call";
        tc = cJSON_GetObjectItemCaseSensitive(root, param);
    }
    ch->tool_choice = OAI_TOOLS_AUTO;
    if (absent(tc)) return 0;
    const char *name = NULL;
    if (cJSON_IsString(tc)) {
        const char *s = tc->valuestring;
        if (!strcmp(s, "none"))
            ch->tool_choice = OAI_TOOLS_NONE;
        else if (!strcmp(s, "auto"))
            ch->tool_choice = OAI_TOOLS_AUTO;
        else if (!strcmp(s, "required") && param[0] == 't')
            ch->tool_choice = OAI_TOOLS_REQUIRED;
        else
            return oai_fail(e, 400, ERR_INVALID, "invalid_value", param,
                            "'%s' must be 'none', 'auto'%s or a named function, not '%s'", param,
                            param[0] == 't' ? ", 'required'" : "", s);
    } else if (cJSON_IsObject(tc)) {
        const cJSON *f = param[0] == 't' ? cJSON_GetObjectItemCaseSensitive(tc, "function") : tc;
        const cJSON *nm = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "name") : NULL;
        if (!cJSON_IsString(nm))
            return oai__bad_type(e, param,
                                 param[0] == 't'
                                     ? "{\"type\": \"function\", \"function\": {\"name\": …}}"
                                     : "{\"name\": …}");
        name = nm->valuestring;
        ch->tool_choice = OAI_TOOLS_NAMED;
    } else
        return oai__bad_type(e, param, "a string or an object naming a function");
    if (ch->tool_choice >= OAI_TOOLS_REQUIRED && !ch->n_tools)
        return oai_fail(e, 400, ERR_INVALID, "invalid_value", param, "'%s' %s requires 'tools'",
                        param, name ? "naming a function" : "'required'");
    if (name && (ch->named = tool_index(ch, name)) < 0)
        return oai_fail(e, 400, ERR_INVALID, "invalid_value", param,
                        "'%s' names the function '%.200s', which is not among the tools", param,
                        name);
    return 0;
}

int oai__parse_chat(const cJSON *root, const char *body, size_t len, oai_chat **out, oai_error *e)
{
    *out = NULL;
    oai_chat *ch = calloc(1, sizeof *ch);
    if (!ch) return oai__oom(e);
    ch->parallel_tool_calls = 1;
    int rc = parse_tools(root, ch, e);
    if (!rc) rc = parse_choice(root, ch, e);
    if (!rc) rc = oai__get_bool(root, "parallel_tool_calls", &ch->parallel_tool_calls, e);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (!rc && !absent(t)) {
        if (!cJSON_IsString(t))
            rc = oai__bad_type(e, "chat_template", "a string (a Jinja template)");
        else if (*t->valuestring && !(ch->chat_template = strdup(t->valuestring)))
            rc = oai__oom(e);
    }
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs");
    if (!rc && !absent(kw) && !cJSON_IsObject(kw))
        rc = oai__bad_type(e, "chat_template_kwargs", "an object of template variables");
    if (!rc && !(ch->body = malloc(len + 1))) rc = oai__oom(e);
    if (rc) {
        oai_chat_free(ch);
        return rc;
    }
    memcpy(ch->body, body, len);
    ch->body[len] = 0;
    ch->body_len = len;
    *out = ch;
    return 0;
}

void oai_chat_free(oai_chat *ch)
{
    if (!ch) return;
    for (int i = 0; i < ch->n_tools; i++) {
        free(ch->tools[i].name);
        cJSON_free(ch->tools[i].parameters);
    }
    free(ch->tools);
    free(ch->body);
    free(ch->chat_template);
    free(ch);
}

/* ---- constrained tool choices -------------------------------------------------------------- */

/* Appends s to a growable text; -ENOMEM leaves it unchanged. */
static int text_add(char **t, size_t *n, const char *s)
{
    size_t l = strlen(s);
    char *p = realloc(*t, *n + l + 1);
    if (!p) return -ENOMEM;
    memcpy(p + *n, s, l + 1);
    *t = p;
    *n += l;
    return 0;
}

/* Tool i's parameters as GBNF rules named PREFIX…, PREFIX "root" the value. */
static int tool_rules(const oai_tool *t, int i, const char *prefix, char **g, size_t *n,
                      oai_error *e)
{
    cJSON *schema = cJSON_Parse(t->parameters ? t->parameters : "{\"type\": \"object\"}");
    if (!schema) return oai__oom(e);
    char err[384];
    char *rules = oai_schema_gbnf(schema, prefix, err, sizeof err);
    cJSON_Delete(schema);
    if (!rules) {
        char param[64];
        snprintf(param, sizeof param, "tools[%d].function.parameters", i);
        return oai_fail(e, 400, ERR_INVALID, "invalid_value", param,
                        "the parameters schema of '%.100s' cannot constrain a tool call: %s",
                        t->name, err);
    }
    int rc = text_add(g, n, rules);
    free(rules);
    return rc ? oai__oom(e) : 0;
}

/* One alternative of the call rule: {"name": "NAME", "parameters": tI-root}. */
static int call_alt(const oai_tool *t, int i, char **g, size_t *n)
{
    cJSON *nm = cJSON_CreateString(t->name);
    char *json = nm ? cJSON_PrintUnformatted(nm) : NULL;
    cJSON_Delete(nm);
    char *open = json ? malloc(strlen(json) + 32) : NULL, tail[64];
    if (open) sprintf(open, "{\"name\": %s, \"parameters\": ", json);
    char *lit = open ? gr_gbnf_literal(open, strlen(open)) : NULL;
    snprintf(tail, sizeof tail, " t%d-root \"}\"", i);
    int rc = !lit || (i && text_add(g, n, " | ")) || text_add(g, n, lit) || text_add(g, n, tail)
                 ? -ENOMEM
                 : 0;
    cJSON_free(json);
    free(open);
    free(lit);
    return rc;
}

/* The GBNF text of ch's constrained tool choice (malloc'd into *out). */
static int choice_gbnf(const oai_chat *ch, char **out, oai_error *e)
{
    char *g = NULL;
    size_t n = 0;
    int rc;
    if (ch->tool_choice == OAI_TOOLS_NAMED) {
        rc = text_add(&g, &n, "root ::= args-root\n") ? oai__oom(e) : 0;
        if (!rc) rc = tool_rules(&ch->tools[ch->named], ch->named, "args-", &g, &n, e);
    } else {
        int one = !ch->parallel_tool_calls || ch->legacy;
        char head[128];
        snprintf(head, sizeof head, one ? "root ::= \"[\" call \"]\"\ncall ::= "
                                        : "root ::= \"[\" call (\", \" call){0,%d} \"]\"\ncall ::= ",
                 OAI_MAX_TOOL_CALLS - 1);
        rc = text_add(&g, &n, head) ? oai__oom(e) : 0;
        for (int i = 0; !rc && i < ch->n_tools; i++)
            rc = call_alt(&ch->tools[i], i, &g, &n) ? oai__oom(e) : 0;
        if (!rc) rc = text_add(&g, &n, "\n") ? oai__oom(e) : 0;
        for (int i = 0; !rc && i < ch->n_tools; i++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "t%d-", i);
            rc = tool_rules(&ch->tools[i], i, prefix, &g, &n, e);
        }
    }
    if (rc) {
        free(g);
        return rc;
    }
    *out = g;
    return 0;
}

int oai__chat_grammar(const oai_limits *lim, oai_request *r, oai_error *e)
{
    oai_chat *ch = r->chat;
    if (!ch || (ch->tool_choice != OAI_TOOLS_REQUIRED && ch->tool_choice != OAI_TOOLS_NAMED))
        return 0;
    if (r->grammar)
        return oai_fail(e, 400, ERR_INVALID, "invalid_value", "tool_choice",
                        "'tool_choice' %s constrains the output itself: it cannot be combined with "
                        "response_format or another structured output",
                        ch->tool_choice == OAI_TOOLS_NAMED ? "naming a function" : "'required'");
    char *text;
    int rc = choice_gbnf(ch, &text, e);
    if (rc) return rc;
    gr_grammar *g = oai__grammar_gbnf(lim, text, "tools", e);
    free(text);
    if (!g) return -EINVAL;
    r->grammar = g;
    ch->constrained = 1;
    return 0;
}

/* ---- the template's values ---------------------------------------------------------------- */

/* Copies the entries of dict src into a new dict, except the key skip (NULL: none). */
static int dict_copy(jinja_ctx *c, jinja_value src, const char *skip, jinja_value *out)
{
    int rc = jinja_dict(c, out);
    for (size_t i = 0; !rc && i < jinja_len(src); i++) {
        const char *k = jinja_str_bytes(jinja_dict_key_at(src, i), NULL);
        if (k && (!skip || strcmp(k, skip)))
            rc = jinja_dict_set(c, *out, k, jinja_dict_value_at(src, i));
    }
    return rc;
}

/* Text parts joined into one string (openai.c checked that they are text). */
static int join_parts(jinja_ctx *c, jinja_value parts, jinja_value *out)
{
    size_t total = 0, n;
    for (size_t i = 0; i < jinja_len(parts); i++) {
        jinja_value p = jinja_list_at(parts, i), t = jinja_dict_get(p, "text");
        if (t.kind == JINJA_UNDEFINED) t = jinja_dict_get(p, "refusal");
        if (jinja_str_bytes(t, &n)) total += n;
    }
    char *buf = malloc(total + 1);
    if (!buf) return -ENOMEM;
    size_t o = 0;
    for (size_t i = 0; i < jinja_len(parts); i++) {
        jinja_value p = jinja_list_at(parts, i), t = jinja_dict_get(p, "text");
        if (t.kind == JINJA_UNDEFINED) t = jinja_dict_get(p, "refusal");
        const char *s = jinja_str_bytes(t, &n);
        if (s) memcpy(buf + o, s, n), o += n;
    }
    int rc = jinja_str(c, buf, o, out);
    free(buf);
    return rc;
}

/* A tool call for the template: its "arguments" parsed when they are a JSON string. */
static int template_call(jinja_ctx *c, jinja_value call, jinja_value *out)
{
    jinja_value fn = jinja_dict_get(call, "function"), args = jinja_dict_get(fn, "arguments"),
                parsed, nfn;
    size_t n;
    const char *s = jinja_str_bytes(args, &n);
    jinja_error je;
    if (fn.kind != JINJA_DICT || !s || jinja_json_parse(c, s, n, &parsed, &je))
        return dict_copy(c, call, NULL, out);
    int rc = dict_copy(c, call, "function", out);
    if (!rc) rc = dict_copy(c, fn, NULL, &nfn);
    if (!rc) rc = jinja_dict_set(c, nfn, "arguments", parsed);
    if (!rc) rc = jinja_dict_set(c, *out, "function", nfn);
    return rc;
}

/* A legacy function_call {name, arguments} as a one-call tool_calls list. */
static int legacy_calls(jinja_ctx *c, jinja_value fc, int idx, jinja_value *out)
{
    jinja_value call, v;
    char id[32];
    snprintf(id, sizeof id, "call_%d", idx);
    int rc = jinja_dict(c, &call);
    if (!rc) rc = jinja_str(c, id, strlen(id), &v);
    if (!rc) rc = jinja_dict_set(c, call, "id", v);
    if (!rc) rc = jinja_str(c, "function", 8, &v);
    if (!rc) rc = jinja_dict_set(c, call, "type", v);
    if (!rc) rc = jinja_dict_set(c, call, "function", fc);
    if (!rc) rc = jinja_list(c, out);
    if (!rc) rc = template_call(c, call, &v);
    if (!rc) rc = jinja_list_push(c, *out, v);
    return rc;
}

/* One message for the template: parts joined, tool-call arguments parsed, legacy roles and
 * function_call mapped. */
static int template_message(jinja_ctx *c, jinja_value m, int idx, jinja_value *out)
{
    jinja_value role = jinja_dict_get(m, "role");
    const char *r = jinja_str_bytes(role, NULL);
    int rc = jinja_dict(c, out);
    for (size_t i = 0; !rc && i < jinja_len(m); i++) {
        const char *k = jinja_str_bytes(jinja_dict_key_at(m, i), NULL);
        jinja_value v = jinja_dict_value_at(m, i);
        if (!k) continue;
        if (!strcmp(k, "content") && v.kind == JINJA_LIST)
            rc = join_parts(c, v, &v);
        else if (!strcmp(k, "role") && r && !strcmp(r, "function"))
            rc = jinja_str(c, "tool", 4, &v);
        else if (!strcmp(k, "tool_calls") && v.kind == JINJA_LIST) {
            jinja_value list;
            rc = jinja_list(c, &list);
            for (size_t j = 0; !rc && j < jinja_len(v); j++) {
                jinja_value call;
                rc = template_call(c, jinja_list_at(v, j), &call);
                if (!rc) rc = jinja_list_push(c, list, call);
            }
            v = list;
        } else if (!strcmp(k, "function_call") && v.kind == JINJA_DICT) {
            k = "tool_calls";
            rc = legacy_calls(c, v, idx, &v);
        }
        if (!rc) rc = jinja_dict_set(c, *out, k, v);
    }
    return rc;
}

/* tools as sent, or the legacy functions wrapped as {"type": "function", "function": f}. */
static int template_tools(jinja_ctx *c, jinja_value root, jinja_value *out)
{
    jinja_value tools = jinja_dict_get(root, "tools"), fns = jinja_dict_get(root, "functions");
    if (tools.kind == JINJA_LIST || fns.kind != JINJA_LIST) {
        *out = tools.kind == JINJA_LIST ? tools : jinja_none();
        return 0;
    }
    int rc = jinja_list(c, out);
    for (size_t i = 0; !rc && i < jinja_len(fns); i++) {
        jinja_value t, type;
        rc = jinja_dict(c, &t);
        if (!rc) rc = jinja_str(c, "function", 8, &type);
        if (!rc) rc = jinja_dict_set(c, t, "type", type);
        if (!rc) rc = jinja_dict_set(c, t, "function", jinja_list_at(fns, i));
        if (!rc) rc = jinja_list_push(c, *out, t);
    }
    return rc;
}

int oai_chat_vars(const oai_chat *ch, jinja_ctx *c, int add_generation_prompt, chat_vars *v,
                  oai_error *e)
{
    jinja_value root, msgs;
    jinja_error je;
    memset(v, 0, sizeof *v);
    int rc = jinja_json_parse(c, ch->body, ch->body_len, &root, &je);
    if (rc) {
        if (rc == -EINVAL)
            return oai_fail(e, 400, ERR_INVALID, "invalid_json", NULL,
                            "The request body is not valid JSON");
        return oai__oom(e);
    }
    jinja_value in = jinja_dict_get(root, "messages");
    rc = jinja_list(c, &msgs);
    for (size_t i = 0; !rc && i < jinja_len(in); i++) {
        jinja_value m;
        rc = template_message(c, jinja_list_at(in, i), (int)i, &m);
        if (!rc) rc = jinja_list_push(c, msgs, m);
    }
    v->ctx = c;
    v->messages = msgs;
    if (!rc) rc = template_tools(c, root, &v->tools);
    v->kwargs = jinja_dict_get(root, "chat_template_kwargs");
    v->add_generation_prompt = add_generation_prompt;
    v->tmpl_text = ch->chat_template;
    if (rc == -E2BIG)
        return oai_fail(e, 400, ERR_INVALID, "invalid_value", "messages",
                        "the request is too large for the chat template's memory limit");
    return rc ? oai__oom(e) : 0;
}

/* ---- the answer --------------------------------------------------------------------------- */

oai_chat_state *oai_chat_state_create(const oai_chat *ch, uint64_t seed)
{
    oai_chat_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    const char *forced = ch->tool_choice == OAI_TOOLS_NAMED ? ch->tools[ch->named].name : NULL;
    st->p = tc_parser_create(ch->syntax, ch->reasoning, forced, seed);
    for (int i = 0; st->p && i < ch->n_tools; i++)
        if (tc_parser_add_tool(st->p, ch->tools[i].name, ch->tools[i].parameters)) {
            tc_parser_destroy(st->p);
            st->p = NULL;
        }
    if (!st->p) {
        free(st);
        return NULL;
    }
    st->legacy = ch->legacy;
    st->parallel = ch->parallel_tool_calls && !ch->legacy;
    st->calls_only = ch->constrained && ch->tool_choice == OAI_TOOLS_REQUIRED;
    return st;
}

void oai_chat_state_free(oai_chat_state *st)
{
    if (!st) return;
    tc_parser_destroy(st->p);
    free(st);
}

/* The call objects closed in the JSON array text s (the list tool_choice "required" makes the
 * model write): a call cut short by max_tokens is not among them. */
static int closed_calls(const char *s)
{
    int depth = 0, in_str = 0, n = 0;
    for (; s && *s; s++) {
        if (in_str) {
            if (*s == '\\' && s[1]) s++;
            else if (*s == '"') in_str = 0;
        } else if (*s == '"') {
            in_str = 1;
        } else if (*s == '[' || *s == '{') {
            depth++;
        } else if (*s == ']' || *s == '}') {
            if (--depth == 1 && *s == '}') n++;
        }
    }
    return n;
}

/* The calls of the answer so far (text: the whole output for calls_only lists, or NULL). */
static int n_calls(const oai_chat_state *st, const char *text)
{
    int n = tc_parser_n_calls(st->p);
    if (!st->parallel && n > 1) n = 1;
    if (st->calls_only && text) { /* only whole calls: the grammar's list ends after one (a
                                   * stream keeps no text: it needs this only at STOP, whole) */
        int k = closed_calls(text);
        if (k < n) n = k;
    }
    return n;
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n", s[i])) return 0;
    return 1;
}

void oai__chat_message(cJSON *msg, const oai_choice *c)
{
    const oai_chat_state *st = c->chat;
    size_t len;
    const char *content = tc_parser_content(st->p, &len);
    int nc = n_calls(st, c->text);
    if ((nc && blank(content, len)) || st->calls_only) /* calls_only: nothing but calls */
        cJSON_AddNullToObject(msg, "content");
    else
        cJSON_AddStringToObject(msg, "content", content);
    const char *reasoning = tc_parser_reasoning(st->p, &len);
    if (reasoning) cJSON_AddStringToObject(msg, "reasoning_content", reasoning);
    if (!nc) return;
    if (st->legacy) {
        const tc_call *k = tc_parser_call(st->p, 0);
        cJSON *fc = cJSON_AddObjectToObject(msg, "function_call");
        cJSON_AddStringToObject(fc, "name", k->name ? k->name : "");
        cJSON_AddStringToObject(fc, "arguments", k->args);
        return;
    }
    cJSON *arr = cJSON_AddArrayToObject(msg, "tool_calls");
    for (int i = 0; i < nc; i++) {
        const tc_call *k = tc_parser_call(st->p, i);
        cJSON *call = cJSON_CreateObject(), *fn;
        cJSON_AddStringToObject(call, "id", k->id);
        cJSON_AddStringToObject(call, "type", "function");
        fn = cJSON_AddObjectToObject(call, "function");
        cJSON_AddStringToObject(fn, "name", k->name ? k->name : "");
        cJSON_AddStringToObject(fn, "arguments", k->args);
        cJSON_AddItemToArray(arr, call);
    }
}

const char *oai__chat_finish(const oai_choice *c, int finish)
{
    if (c->chat && finish == ENGINE_FINISH_STOP && n_calls(c->chat, c->text))
        return c->chat->legacy ? "function_call" : "tool_calls";
    return oai_finish_name(finish);
}
