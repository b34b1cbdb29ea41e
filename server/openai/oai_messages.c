/*
 * oai_messages.c — Anthropic's Messages API (POST /v1/messages and /v1/messages/count_tokens;
 * see oai_dialect.h).
 *
 * Request: system (a string or text blocks) becomes a system message; each message's content
 * blocks become chat messages: text joined, an assistant's tool_use blocks its tool_calls (input
 * as JSON arguments) and thinking blocks its reasoning_content, a user's tool_result blocks tool
 * messages (before the rest of its text); tools ({name, description, input_schema}) become
 * function tools; tool_choice auto / any / tool / none with disable_parallel_tool_use; thinking
 * enabled / disabled reaches the template as enable_thinking; max_tokens (required),
 * stop_sequences, temperature (0..1), top_p and top_k map one to one. Images, documents and
 * server tools are refused with a 400 naming the block or tool.
 *
 * Answer: a message whose content is a thinking block (with a reasoning parser), a text block
 * and tool_use blocks; stop_reason end_turn, max_tokens, stop_sequence (with the string) or
 * tool_use; usage counts input tokens apart from those read from the prefix cache
 * (cache_read_input_tokens), as Anthropic's does. Streamed as message_start, ping,
 * content_block_start / content_block_delta (text_delta, thinking_delta, input_json_delta) /
 * content_block_stop per block, message_delta (stop_reason, usage) and message_stop.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/openai/internal.h"
#include "server/openai/oai_dialect.h"
#include "server/toolcall/toolcall.h"

#define ERR_INVALID "invalid_request_error"

static const char *const messages_fields[] = {
    "model", "messages", "system", "max_tokens", "stop_sequences", "temperature", "top_p", "top_k", "tools",
    "tool_choice", "thinking", "metadata", "stream", "service_tier", "container", "mcp_servers",
    /* vLLM's sampling extensions, passed to the chat request as they are */
    "seed", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "min_tokens",
    "ignore_eos", "chat_template", "chat_template_kwargs", "skip_special_tokens", "request_id",
};

static const char *const passed_fields[] = {
    "model", "top_p", "top_k", "stream", "seed", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "logit_bias", "min_tokens", "ignore_eos", "chat_template", "chat_template_kwargs",
    "skip_special_tokens", "request_id",
};

const char *const *oai__messages_fields(size_t *n)
{
    *n = sizeof messages_fields / sizeof messages_fields[0];
    return messages_fields;
}

static int absent(const cJSON *v)
{
    return !v || cJSON_IsNull(v);
}

/* ---- content blocks → chat messages ---------------------------------------------------------- */

/* Appends s to a growing text. */
static int am_cat(char **t, size_t *n, const char *s, oai_error *e)
{
    size_t l = strlen(s);
    char *p = realloc(*t, *n + l + 1);
    if (!p) return oai__oom(e);
    memcpy(p + *n, s, l + 1);
    *t = p;
    *n += l;
    return 0;
}

/* A tool_result's content: a string or text blocks. */
static int am_result_text(const cJSON *c, const char *param, char **out, oai_error *e)
{
    size_t n = 0;
    *out = strdup("");
    if (!*out) return oai__oom(e);
    if (absent(c)) return 0;
    if (cJSON_IsString(c)) return am_cat(out, &n, c->valuestring, e);
    if (!cJSON_IsArray(c)) return oai__bad_type(e, param, "a string or an array of text blocks");
    const cJSON *b;
    int j = 0;
    cJSON_ArrayForEach(b, c)
    {
        char p[160];
        snprintf(p, sizeof p, "%s[%d]", param, j++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type"), *t = cJSON_GetObjectItemCaseSensitive(b, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text"))
            return oai_fail(e, 400, ERR_INVALID, "invalid_value", p,
                            "'%s' must be a text block: this server is text-only", p);
        if (!cJSON_IsString(t)) return oai__bad_type(e, p, "a text block with a string 'text'");
        int rc = am_cat(out, &n, t->valuestring, e);
        if (rc) return rc;
    }
    return 0;
}

/* One tool_use block into the assistant's tool_calls. */
static int am_tool_use(const cJSON *b, const char *param, cJSON *calls, oai_error *e)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id"), *name = cJSON_GetObjectItemCaseSensitive(b, "name"),
                *input = cJSON_GetObjectItemCaseSensitive(b, "input");
    char p[128];
    snprintf(p, sizeof p, "%s.id", param);
    if (!cJSON_IsString(id)) return oai__bad_type(e, p, "a string");
    snprintf(p, sizeof p, "%s.name", param);
    if (!cJSON_IsString(name)) return oai__bad_type(e, p, "a string");
    snprintf(p, sizeof p, "%s.input", param);
    if (!cJSON_IsObject(input)) return oai__bad_type(e, p, "an object");
    char *args = cJSON_PrintUnformatted(input);
    if (!args) return oai__oom(e);
    cJSON *c = cJSON_CreateObject(), *f;
    cJSON_AddStringToObject(c, "id", id->valuestring);
    cJSON_AddStringToObject(c, "type", "function");
    f = cJSON_AddObjectToObject(c, "function");
    cJSON_AddStringToObject(f, "name", name->valuestring);
    cJSON_AddStringToObject(f, "arguments", args);
    cJSON_free(args);
    cJSON_AddItemToArray(calls, c);
    return 0;
}

/* A message's blocks: text joined into *text; an assistant's tool_use into calls, thinking into
 * *reasoning; a user's tool_result blocks into tool messages appended to msgs. */
static int am_blocks(const cJSON *content, const char *param, int assistant, cJSON *msgs, cJSON *calls,
                     char **text, char **reasoning, oai_error *e)
{
    size_t n = 0, rn = 0;
    const cJSON *b;
    int j = 0, rc = 0;
    cJSON_ArrayForEach(b, content)
    {
        char p[96];
        snprintf(p, sizeof p, "%s[%d]", param, j++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        if (!cJSON_IsObject(b) || !cJSON_IsString(type)) return oai__bad_type(e, p, "a content block with a 'type'");
        const char *t = type->valuestring;
        if (!strcmp(t, "text")) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(b, "text");
            if (!cJSON_IsString(s)) return oai__bad_type(e, p, "a text block with a string 'text'");
            rc = am_cat(text, &n, s->valuestring, e);
        } else if (!strcmp(t, "tool_use") && assistant) {
            rc = am_tool_use(b, p, calls, e);
        } else if (!strcmp(t, "thinking") && assistant) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(b, "thinking");
            if (!cJSON_IsString(s)) return oai__bad_type(e, p, "a thinking block with a string 'thinking'");
            rc = am_cat(reasoning, &rn, s->valuestring, e);
        } else if (!strcmp(t, "redacted_thinking") && assistant) {
            continue; /* encrypted by another server: nothing to show the template */
        } else if (!strcmp(t, "tool_result") && !assistant) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
            char pp[128], *out = NULL;
            snprintf(pp, sizeof pp, "%s.tool_use_id", p);
            if (!cJSON_IsString(id)) return oai__bad_type(e, pp, "a string");
            snprintf(pp, sizeof pp, "%s.content", p);
            rc = am_result_text(cJSON_GetObjectItemCaseSensitive(b, "content"), pp, &out, e);
            if (!rc) {
                cJSON *m = cJSON_CreateObject();
                cJSON_AddStringToObject(m, "role", "tool");
                cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
                cJSON_AddStringToObject(m, "content", out);
                cJSON_AddItemToArray(msgs, m);
            }
            free(out);
        } else {
            char pt[128];
            snprintf(pt, sizeof pt, "%s.type", p);
            return oai_fail(e, 400, ERR_INVALID, "invalid_value", pt,
                            "content block type '%.64s' is not supported in %s messages here (this server is "
                            "text-only and runs no server tools)", t, assistant ? "assistant" : "user");
        }
        if (rc) return rc;
    }
    return 0;
}

static int am_message(const cJSON *m, int i, cJSON *msgs, oai_error *e)
{
    char param[48], p[64];
    snprintf(param, sizeof param, "messages[%d]", i);
    if (!cJSON_IsObject(m)) return oai__bad_type(e, param, "an object");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    snprintf(p, sizeof p, "%s.role", param);
    if (!cJSON_IsString(role)) return oai__bad_type(e, p, "a string");
    int assistant = !strcmp(role->valuestring, "assistant");
    if (!assistant && strcmp(role->valuestring, "user"))
        return oai_fail(e, 400, ERR_INVALID, "invalid_value", p, "'%s' must be user or assistant, not '%.32s'", p,
                        role->valuestring);
    snprintf(p, sizeof p, "%s.content", param);
    if (absent(c)) return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", p, "'%s' is required", p);
    if (cJSON_IsString(c)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "role", role->valuestring);
        cJSON_AddStringToObject(o, "content", c->valuestring);
        cJSON_AddItemToArray(msgs, o);
        return 0;
    }
    if (!cJSON_IsArray(c)) return oai__bad_type(e, p, "a string or an array of content blocks");
    char *text = NULL, *reasoning = NULL;
    cJSON *calls = cJSON_CreateArray();
    int rc = calls ? am_blocks(c, p, assistant, msgs, calls, &text, &reasoning, e) : oai__oom(e);
    int has_calls = cJSON_GetArraySize(calls) > 0;
    if (!rc && (text || has_calls || reasoning || !cJSON_GetArraySize(c))) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "role", role->valuestring);
        if (text || !has_calls) cJSON_AddStringToObject(o, "content", text ? text : "");
        else cJSON_AddNullToObject(o, "content");
        if (reasoning) cJSON_AddStringToObject(o, "reasoning_content", reasoning);
        if (has_calls) {
            cJSON_AddItemToObject(o, "tool_calls", calls);
            calls = NULL;
        }
        cJSON_AddItemToArray(msgs, o);
    }
    cJSON_Delete(calls);
    free(text);
    free(reasoning);
    return rc;
}

/* ---- the other fields ------------------------------------------------------------------------- */

static int am_system(const cJSON *root, cJSON *msgs, oai_error *e)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "system");
    if (absent(s)) return 0;
    char *text = NULL;
    int rc;
    if (cJSON_IsString(s)) {
        text = strdup(s->valuestring);
        rc = text ? 0 : oai__oom(e);
    } else if (cJSON_IsArray(s)) {
        size_t n = 0;
        rc = am_cat(&text, &n, "", e);
        const cJSON *b;
        int j = 0;
        cJSON_ArrayForEach(b, s)
        {
            char p[48];
            snprintf(p, sizeof p, "system[%d]", j++);
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type"), *t = cJSON_GetObjectItemCaseSensitive(b, "text");
            if (!rc && (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(t)))
                rc = oai__bad_type(e, p, "a text block");
            if (!rc && n) rc = am_cat(&text, &n, "\n", e);
            if (!rc) rc = am_cat(&text, &n, t->valuestring, e);
        }
    } else {
        rc = oai__bad_type(e, "system", "a string or an array of text blocks");
    }
    if (!rc) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", text);
        cJSON_AddItemToArray(msgs, m);
    }
    free(text);
    return rc;
}

static int am_tools(const cJSON *root, cJSON *chat, oai_error *e)
{
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools"), *t;
    if (absent(tools)) return 0;
    if (!cJSON_IsArray(tools)) return oai__bad_type(e, "tools", "an array of tools");
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    int i = 0;
    cJSON_ArrayForEach(t, tools)
    {
        char p[64];
        snprintf(p, sizeof p, "tools[%d]", i);
        if (!cJSON_IsObject(t)) return oai__bad_type(e, p, "a tool object");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        snprintf(p, sizeof p, "tools[%d].type", i);
        if (!absent(type) && (!cJSON_IsString(type) || strcmp(type->valuestring, "custom")))
            return oai_fail(e, 400, ERR_INVALID, "invalid_value", p,
                            "tool type '%.64s' is not supported: server tools do not run on this server (only "
                            "client tools with an input_schema)", cJSON_IsString(type) ? type->valuestring : "?");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name"), *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        snprintf(p, sizeof p, "tools[%d].name", i);
        if (!cJSON_IsString(name) || !*name->valuestring) return oai__bad_type(e, p, "a non-empty string");
        snprintf(p, sizeof p, "tools[%d].input_schema", i);
        if (!cJSON_IsObject(schema)) return oai__bad_type(e, p, "a JSON Schema object");
        cJSON *ct = cJSON_CreateObject(), *f;
        cJSON_AddStringToObject(ct, "type", "function");
        f = cJSON_AddObjectToObject(ct, "function");
        cJSON_AddStringToObject(f, "name", name->valuestring);
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        if (cJSON_IsString(desc)) cJSON_AddStringToObject(f, "description", desc->valuestring);
        cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(schema, 1));
        cJSON_AddItemToArray(out, ct);
        i++;
    }
    return 0;
}

static int am_tool_choice(const cJSON *root, cJSON *chat, oai_error *e)
{
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (absent(tc)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(type))
        return oai__bad_type(e, "tool_choice", "an object with a 'type' (auto, any, tool or none)");
    const char *t = type->valuestring;
    if (!strcmp(t, "auto") || !strcmp(t, "none")) {
        cJSON_AddStringToObject(chat, "tool_choice", t);
    } else if (!strcmp(t, "any")) {
        cJSON_AddStringToObject(chat, "tool_choice", "required");
    } else if (!strcmp(t, "tool")) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
        if (!cJSON_IsString(name)) return oai__bad_type(e, "tool_choice.name", "a string");
        cJSON *c = cJSON_AddObjectToObject(chat, "tool_choice");
        cJSON_AddStringToObject(c, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", name->valuestring);
    } else {
        return oai_fail(e, 400, ERR_INVALID, "invalid_value", "tool_choice.type",
                        "'tool_choice.type' must be auto, any, tool or none, not '%.32s'", t);
    }
    int off = 0;
    int rc = oai__get_bool(tc, "disable_parallel_tool_use", &off, e);
    if (rc) return oai__bad_type(e, "tool_choice.disable_parallel_tool_use", "a boolean");
    if (off) cJSON_AddFalseToObject(chat, "parallel_tool_calls");
    return 0;
}

/* thinking {type: enabled, budget_tokens} | {type: disabled} → enable_thinking for the template. */
static int am_thinking(const cJSON *root, cJSON *chat, oai_error *e)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "thinking");
    if (absent(t)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
    if (!cJSON_IsObject(t) || !cJSON_IsString(type)) return oai__bad_type(e, "thinking", "an object with a 'type'");
    int on = !strcmp(type->valuestring, "enabled");
    if (!on && strcmp(type->valuestring, "disabled"))
        return oai_fail(e, 400, ERR_INVALID, "invalid_value", "thinking.type",
                        "'thinking.type' must be enabled or disabled, not '%.32s'", type->valuestring);
    int budget = 0;
    if (oai__get_int(t, "budget_tokens", 1, 1 << 30, &budget, e))
        return oai__bad_value(e, "thinking.budget_tokens", "must be a positive integer");
    cJSON *kw = cJSON_GetObjectItemCaseSensitive(chat, "chat_template_kwargs");
    if (!kw) kw = cJSON_AddObjectToObject(chat, "chat_template_kwargs");
    if (cJSON_IsObject(kw) && !cJSON_GetObjectItemCaseSensitive(kw, "enable_thinking"))
        cJSON_AddBoolToObject(kw, "enable_thinking", on);
    return 0;
}

static int am_translate(const cJSON *root, int count_tokens, cJSON *chat, oai_error *e)
{
    int rc = 0;
    for (size_t i = 0; i < sizeof passed_fields / sizeof passed_fields[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, passed_fields[i]);
        if (v) cJSON_AddItemToObject(chat, passed_fields[i], cJSON_Duplicate(v, 1));
    }
    if (!absent(cJSON_GetObjectItemCaseSensitive(root, "container")))
        return oai__bad_value(e, "container", "is not supported (no code execution on this server)");
    if (!absent(cJSON_GetObjectItemCaseSensitive(root, "mcp_servers")))
        return oai__bad_value(e, "mcp_servers", "is not supported (no MCP connector on this server)");
    int max_tokens = -1;
    if ((rc = oai__get_int(root, "max_tokens", 1, 1 << 30, &max_tokens, e))) return rc;
    if (max_tokens < 0 && !count_tokens)
        return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "max_tokens", "'max_tokens' is required");
    if (max_tokens > 0) cJSON_AddNumberToObject(chat, "max_tokens", max_tokens);
    float temp = 1;
    if ((rc = oai__get_num(root, "temperature", 0, 1, &temp, e))) return rc;
    const cJSON *tv = cJSON_GetObjectItemCaseSensitive(root, "temperature");
    if (!absent(tv)) cJSON_AddNumberToObject(chat, "temperature", tv->valuedouble);
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop_sequences"), *s;
    if (!absent(stop)) {
        if (!cJSON_IsArray(stop)) return oai__bad_type(e, "stop_sequences", "an array of strings");
        cJSON_ArrayForEach(s, stop) if (!cJSON_IsString(s)) return oai__bad_type(e, "stop_sequences", "an array of strings");
        cJSON_AddItemToObject(chat, "stop", cJSON_Duplicate(stop, 1));
    }
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    if (!absent(meta) && !cJSON_IsObject(meta)) return oai__bad_type(e, "metadata", "an object");
    cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
    if ((rc = am_system(root, msgs, e))) return rc;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(root, "messages"), *m;
    if (absent(ms)) return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "messages", "'messages' is required");
    if (!cJSON_IsArray(ms)) return oai__bad_type(e, "messages", "an array of messages");
    if (!cJSON_GetArraySize(ms)) return oai__bad_value(e, "messages", "must not be empty");
    int i = 0;
    cJSON_ArrayForEach(m, ms)
    {
        if ((rc = am_message(m, i++, msgs, e))) return rc;
    }
    if ((rc = am_tools(root, chat, e)) || (rc = am_tool_choice(root, chat, e))) return rc;
    return am_thinking(root, chat, e);
}

int oai_parse_messages(const char *body, size_t len, const oai_limits *lim, int count_tokens, oai_request *out,
                       oai_error *e)
{
    memset(out, 0, sizeof *out);
    if (oai_validate_body(body, len, e)) return -EINVAL;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return oai_fail(e, 400, ERR_INVALID, "invalid_json", NULL, "The request body is not valid JSON");
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return oai_fail(e, 400, ERR_INVALID, "invalid_json", NULL, "The request body must be a JSON object");
    }
    oai_dialect *d = oai__dialect_new(OAI_DIALECT_MESSAGES);
    cJSON *chat = cJSON_CreateObject();
    int rc = d && chat ? 0 : oai__oom(e);
    if (!rc) rc = am_translate(root, count_tokens, chat, e);
    size_t nf;
    const char *const *f = oai__messages_fields(&nf);
    return oai__dialect_finish(root, chat, d, f, nf, rc, lim, out, e);
}

/* ---- the message ------------------------------------------------------------------------------ */

static cJSON *am_usage(const oai_usage *u, int with_output)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", u->prompt_tokens - u->cached_tokens);
    cJSON_AddNumberToObject(o, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(o, "cache_read_input_tokens", u->cached_tokens);
    cJSON_AddNumberToObject(o, "output_tokens", with_output ? u->completion_tokens : 0);
    return o;
}

/* "toolu_…" for a call id "call_…". */
static void am_tool_id(const char *call_id, char *out, size_t n)
{
    snprintf(out, n, "toolu_%s", !strncmp(call_id, "call_", 5) ? call_id + 5 : call_id);
}

/* A tool call's arguments as the input object ({} when they are not one). */
static cJSON *am_input(const char *args, size_t n)
{
    cJSON *o = cJSON_ParseWithLength(args ? args : "", args ? n : 0);
    if (cJSON_IsObject(o)) return o;
    cJSON_Delete(o);
    return cJSON_CreateObject();
}

static cJSON *am_tool_block(const char *call_id, const char *name, cJSON *input)
{
    char id[96];
    am_tool_id(call_id, id, sizeof id);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddItemToObject(b, "name", oai__di_str(name, name ? strlen(name) : 0));
    cJSON_AddItemToObject(b, "input", input);
    return b;
}

static cJSON *am_text_block(const char *type, const char *field, cJSON *text)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", type);
    cJSON_AddItemToObject(b, field, text);
    if (!strcmp(type, "thinking")) cJSON_AddStringToObject(b, "signature", "");
    return b;
}

/* stop_reason and stop_sequence of the answer. */
static void am_stop(cJSON *o, const oai_resp *r, const oai_choice *c, int called)
{
    const char *why = c->finish == ENGINE_FINISH_LENGTH ? "max_tokens"
                      : called                          ? "tool_use"
                      : c->stop_kind == OAI_STOP_STR    ? "stop_sequence"
                                                        : "end_turn";
    cJSON_AddStringToObject(o, "stop_reason", why);
    if (!strcmp(why, "stop_sequence") && r->stop) cJSON_AddStringToObject(o, "stop_sequence", r->stop[c->stop_value]);
    else cJSON_AddNullToObject(o, "stop_sequence");
}

static cJSON *am_message_obj(const oai_resp *r, cJSON *content)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddItemToObject(o, "content", content);
    return o;
}

char *oai__messages_json(oai_dialect *d, const oai_resp *r, const oai_choice *c, const oai_usage *u)
{
    (void)d;
    const tc_call *calls[256];
    oai_di_out o;
    oai__di_out(c, &o, calls, 256);
    cJSON *content = cJSON_CreateArray();
    if (o.reasoning) cJSON_AddItemToArray(content, am_text_block("thinking", "thinking", oai__di_str(o.reasoning, o.reasoning_len)));
    int blank = 1;
    for (size_t i = 0; i < o.content_len && blank; i++) blank = strchr(" \t\r\n", o.content[i]) != NULL;
    if (!o.n_calls || !blank) cJSON_AddItemToArray(content, am_text_block("text", "text", oai__di_str(o.content, o.content_len)));
    for (int i = 0; i < o.n_calls; i++)
        cJSON_AddItemToArray(content, am_tool_block(o.calls[i]->id, o.calls[i]->name, am_input(o.calls[i]->args, o.calls[i]->args_len)));
    cJSON *m = am_message_obj(r, content);
    am_stop(m, r, c, o.n_calls > 0);
    cJSON_AddItemToObject(m, "usage", am_usage(u, 1));
    char *s = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return s;
}

/* ---- streaming --------------------------------------------------------------------------------- */

void oai__messages_open(oai_dialect *d, const oai_resp *r, const oai_usage *u)
{
    cJSON *m = am_message_obj(r, cJSON_CreateArray());
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", am_usage(u, 0));
    cJSON *o = oai__di_new("message_start");
    cJSON_AddItemToObject(o, "message", m);
    oai__di_event(d, o);
    oai__di_event(d, oai__di_new("ping"));
}

static void am_block_event(oai_dialect *d, const char *type, cJSON *member_name_value, const char *member)
{
    cJSON *o = oai__di_new(type);
    cJSON_AddNumberToObject(o, "index", d->n_items - 1);
    if (member) cJSON_AddItemToObject(o, member, member_name_value);
    oai__di_event(d, o);
}

void oai__messages_delta(oai_dialect *d, const oai_resp *r, const tc_delta *t)
{
    (void)r;
    int want = t->kind == TC_D_CONTENT ? DI_TEXT : t->kind == TC_D_REASONING ? DI_REASONING : DI_CALL;
    if (want != d->open || t->kind == TC_D_CALL || (want == DI_CALL && t->index != d->open_call)) {
        oai__messages_close_item(d);
        d->open = want;
        d->open_call = t->index;
        d->acc_len = 0;
        d->n_items++;
        cJSON *block;
        if (want == DI_CALL) {
            free(d->call_name);
            d->call_name = strdup(t->name ? t->name : "");
            snprintf(d->call_id, sizeof d->call_id, "%s", t->id ? t->id : "");
            block = am_tool_block(d->call_id, d->call_name, cJSON_CreateObject());
        } else {
            block = want == DI_TEXT ? am_text_block("text", "text", cJSON_CreateString(""))
                                    : am_text_block("thinking", "thinking", cJSON_CreateString(""));
        }
        am_block_event(d, "content_block_start", block, "content_block");
    }
    if (!t->len) return;
    oai__di_acc(d, t->text, t->len);
    cJSON *delta = cJSON_CreateObject();
    if (want == DI_CALL) {
        cJSON_AddStringToObject(delta, "type", "input_json_delta");
        cJSON_AddItemToObject(delta, "partial_json", oai__di_str(t->text, t->len));
    } else {
        cJSON_AddStringToObject(delta, "type", want == DI_TEXT ? "text_delta" : "thinking_delta");
        cJSON_AddItemToObject(delta, want == DI_TEXT ? "text" : "thinking", oai__di_str(t->text, t->len));
    }
    am_block_event(d, "content_block_delta", delta, "delta");
}

void oai__messages_close_item(oai_dialect *d)
{
    if (d->open == DI_NONE) return;
    cJSON *block;
    if (d->open == DI_CALL) {
        block = am_tool_block(d->call_id, d->call_name, am_input(d->acc, d->acc_len));
    } else if (d->open == DI_TEXT) {
        block = am_text_block("text", "text", oai__di_str(d->acc, d->acc_len));
    } else {
        cJSON *sig = cJSON_CreateObject();
        cJSON_AddStringToObject(sig, "type", "signature_delta");
        cJSON_AddStringToObject(sig, "signature", "");
        am_block_event(d, "content_block_delta", sig, "delta");
        block = am_text_block("thinking", "thinking", oai__di_str(d->acc, d->acc_len));
    }
    cJSON_AddItemToArray(d->done, block);
    am_block_event(d, "content_block_stop", NULL, NULL);
    d->open = DI_NONE;
    d->acc_len = 0;
}

char *oai__messages_close(oai_dialect *d, const oai_resp *r, const oai_choice *c, const oai_usage *u)
{
    int called = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, d->done) called |= !strcmp(cJSON_GetObjectItem(b, "type")->valuestring, "tool_use");
    if (!cJSON_GetArraySize(d->done)) { /* nothing was said: one empty text block, as Anthropic's */
        d->n_items++;
        am_block_event(d, "content_block_start", am_text_block("text", "text", cJSON_CreateString("")), "content_block");
        d->open = DI_TEXT;
        oai__messages_close_item(d);
    }
    cJSON *o = oai__di_new("message_delta"), *delta = cJSON_AddObjectToObject(o, "delta");
    am_stop(delta, r, c, called);
    cJSON_AddItemToObject(o, "usage", am_usage(u, 1));
    oai__di_event(d, o);
    oai__di_event(d, oai__di_new("message_stop"));
    cJSON *m = am_message_obj(r, cJSON_Duplicate(d->done, 1));
    am_stop(m, r, c, called);
    cJSON_AddItemToObject(m, "usage", am_usage(u, 1));
    char *s = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return s;
}
