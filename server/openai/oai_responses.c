/*
 * oai_responses.c — OpenAI's Responses API (POST /v1/responses; see oai_dialect.h).
 *
 * Request: instructions become a system message; input (a string, or a list of items: messages
 * whose content is a string or text parts, function_call and function_call_output items,
 * reasoning items) becomes chat messages after the stored conversation of previous_response_id;
 * function tools are flattened ({"type": "function", "name", "parameters"}) into chat tools;
 * text.format becomes response_format; max_output_tokens, temperature, top_p, tool_choice and
 * parallel_tool_calls map one to one. The chat parser then checks and compiles all of it.
 * Hosted tools, files, images, background runs and the other services of OpenAI's platform
 * are refused with a 400 naming the field.
 *
 * Answer: a Response object whose output holds a reasoning item (with a reasoning parser), a
 * message with an output_text part, and function_call items; streamed as response.created,
 * response.in_progress, then per item output_item.added, content_part.added, *.delta, *.done,
 * content_part.done, output_item.done, and response.completed (response.incomplete when
 * max_output_tokens cut the answer), every event with its sequence_number.
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

static const char *const responses_fields[] = {
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice",
    "parallel_tool_calls", "text", "reasoning", "stream", "stream_options", "store", "previous_response_id",
    "metadata", "user", "include", "top_logprobs", "truncation", "background", "service_tier", "max_tool_calls",
    "conversation", "prompt", "safety_identifier", "prompt_cache_key",
    /* vLLM's sampling extensions, passed to the chat request as they are */
    "seed", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "stop",
    "logit_bias", "min_tokens", "ignore_eos", "chat_template", "chat_template_kwargs", "skip_special_tokens",
    "request_id",
};

/* Fields copied into the chat request unchanged (the chat parser checks them). */
static const char *const passed_fields[] = {
    "model", "temperature", "top_p", "parallel_tool_calls", "stream", "seed", "top_k", "min_p",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "stop", "logit_bias", "min_tokens",
    "ignore_eos", "chat_template", "chat_template_kwargs", "skip_special_tokens", "request_id",
};

const char *const *oai__responses_fields(size_t *n)
{
    *n = sizeof responses_fields / sizeof responses_fields[0];
    return responses_fields;
}

static int absent(const cJSON *v)
{
    return !v || cJSON_IsNull(v);
}

/* ---- input items → chat messages ------------------------------------------------------------ */

/* A conversion of input items in progress. */
typedef struct ri_conv {
    cJSON *msgs;          /* the chat messages so far (borrowed) */
    char *reasoning;      /* a reasoning item's text waiting for its assistant message (owned) */
    oai_error *e;
} ri_conv;

/* Text parts (input_text, output_text, refusal) of a content list joined into *out. */
static int ri_parts(const cJSON *parts, const char *param, char **out, oai_error *e)
{
    size_t len = 0;
    const cJSON *p;
    int j = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t o = 0;
        j = 0;
        cJSON_ArrayForEach(p, parts)
        {
            char pp[96];
            snprintf(pp, sizeof pp, "%s[%d]", param, j++);
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
            if (!cJSON_IsObject(p) || !cJSON_IsString(type)) return oai__bad_type(e, pp, "a content part object with a 'type'");
            const char *t = type->valuestring;
            const char *field = !strcmp(t, "input_text") || !strcmp(t, "output_text") || !strcmp(t, "text") ? "text"
                                : !strcmp(t, "refusal")                                                         ? "refusal"
                                                                                                                : NULL;
            if (!field)
                return oai_fail(e, 400, ERR_INVALID, "invalid_value", pp,
                                "content part type '%.64s' in '%s' is not supported: this server is text-only", t, pp);
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, field);
            if (!cJSON_IsString(s)) return oai__bad_type(e, pp, "a part with a string 'text'");
            size_t n = strlen(s->valuestring);
            if (pass) memcpy(*out + o, s->valuestring, n);
            o += n;
        }
        if (!pass) {
            len = o;
            if (!(*out = malloc(len + 1))) return oai__oom(e);
        } else {
            (*out)[o] = 0;
        }
    }
    return 0;
}

/* A content field (a string or a list of text parts) into *out (malloc'd). */
static int ri_content(const cJSON *c, const char *param, char **out, oai_error *e)
{
    if (cJSON_IsString(c)) return (*out = strdup(c->valuestring)) ? 0 : oai__oom(e);
    if (cJSON_IsArray(c)) return ri_parts(c, param, out, e);
    return oai__bad_type(e, param, "a string or an array of content parts");
}

/* The last message when it is an assistant's, else NULL. */
static cJSON *ri_last_assistant(const ri_conv *k)
{
    int n = cJSON_GetArraySize(k->msgs);
    cJSON *m = n ? cJSON_GetArrayItem(k->msgs, n - 1) : NULL;
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    return cJSON_IsString(role) && !strcmp(role->valuestring, "assistant") ? m : NULL;
}

/* Appends a message of role with content text (NULL: null), taking a waiting reasoning text
 * into an assistant's. */
static cJSON *ri_push(ri_conv *k, const char *role, const char *text)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    if (text) cJSON_AddStringToObject(m, "content", text);
    else cJSON_AddNullToObject(m, "content");
    if (!strcmp(role, "assistant") && k->reasoning) {
        cJSON_AddStringToObject(m, "reasoning_content", k->reasoning);
        free(k->reasoning);
        k->reasoning = NULL;
    }
    cJSON_AddItemToArray(k->msgs, m);
    return m;
}

static int ri_message(ri_conv *k, const cJSON *it, const char *param)
{
    char p[96];
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
    snprintf(p, sizeof p, "%s.role", param);
    if (!cJSON_IsString(role)) return oai__bad_type(k->e, p, "a string");
    static const char *const roles[] = {"user", "assistant", "system", "developer"};
    int known = 0;
    for (size_t i = 0; i < 4; i++) known |= !strcmp(role->valuestring, roles[i]);
    if (!known)
        return oai_fail(k->e, 400, ERR_INVALID, "invalid_value", p,
                        "'%s' must be user, assistant, system or developer, not '%.32s'", p, role->valuestring);
    snprintf(p, sizeof p, "%s.content", param);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
    if (absent(c)) return oai_fail(k->e, 400, ERR_INVALID, "missing_required_parameter", p, "'%s' is required", p);
    char *text;
    int rc = ri_content(c, p, &text, k->e);
    if (rc) return rc;
    ri_push(k, role->valuestring, text);
    free(text);
    return 0;
}

/* A string field of an item (required). */
static int ri_string(const cJSON *it, const char *name, const char *param, const char **out, oai_error *e)
{
    char p[96];
    snprintf(p, sizeof p, "%s.%s", param, name);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, name);
    if (absent(v)) return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", p, "'%s' is required", p);
    if (!cJSON_IsString(v)) return oai__bad_type(e, p, "a string");
    *out = v->valuestring;
    return 0;
}

/* function_call: a tool call of the assistant message it continues (or of a new one). */
static int ri_call(ri_conv *k, const cJSON *it, const char *param)
{
    const char *id, *name, *args;
    int rc = ri_string(it, "call_id", param, &id, k->e);
    if (!rc) rc = ri_string(it, "name", param, &name, k->e);
    if (!rc) rc = ri_string(it, "arguments", param, &args, k->e);
    if (rc) return rc;
    cJSON *m = k->reasoning ? NULL : ri_last_assistant(k);
    if (!m) m = ri_push(k, "assistant", NULL);
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!calls) calls = cJSON_AddArrayToObject(m, "tool_calls");
    cJSON *c = cJSON_CreateObject(), *f;
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    f = cJSON_AddObjectToObject(c, "function");
    cJSON_AddStringToObject(f, "name", name);
    cJSON_AddStringToObject(f, "arguments", args);
    cJSON_AddItemToArray(calls, c);
    return 0;
}

/* function_call_output: the tool's answer. */
static int ri_output(ri_conv *k, const cJSON *it, const char *param)
{
    const char *id;
    int rc = ri_string(it, "call_id", param, &id, k->e);
    if (rc) return rc;
    char p[96], *text;
    snprintf(p, sizeof p, "%s.output", param);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(it, "output");
    if (absent(o)) return oai_fail(k->e, 400, ERR_INVALID, "missing_required_parameter", p, "'%s' is required", p);
    if ((rc = ri_content(o, p, &text, k->e))) return rc;
    cJSON *m = ri_push(k, "tool", text);
    free(text);
    cJSON_AddStringToObject(m, "tool_call_id", id);
    return 0;
}

/* reasoning: its text (content's reasoning_text, else the summary) for the next assistant turn. */
static int ri_reasoning(ri_conv *k, const cJSON *it, const char *param)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
    if (absent(c)) c = cJSON_GetObjectItemCaseSensitive(it, "summary");
    char p[96], *text = NULL;
    snprintf(p, sizeof p, "%s.content", param);
    if (!absent(c) && !cJSON_IsArray(c)) return oai__bad_type(k->e, p, "an array of reasoning_text parts");
    size_t len = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(t)) return oai__bad_type(k->e, p, "an array of parts with a string 'text'");
        size_t n = strlen(t->valuestring);
        char *x = realloc(text, len + n + 1);
        if (!x) {
            free(text);
            return oai__oom(k->e);
        }
        text = x;
        memcpy(text + len, t->valuestring, n + 1);
        len += n;
    }
    free(k->reasoning);
    k->reasoning = text;
    return 0;
}

static int ri_item(ri_conv *k, const cJSON *it, int i)
{
    char param[48], p[64];
    snprintf(param, sizeof param, "input[%d]", i);
    if (!cJSON_IsObject(it)) return oai__bad_type(k->e, param, "an input item object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
    if (absent(type) && cJSON_GetObjectItemCaseSensitive(it, "role")) return ri_message(k, it, param);
    snprintf(p, sizeof p, "%s.type", param);
    if (!cJSON_IsString(type)) return oai__bad_type(k->e, p, "a string");
    const char *t = type->valuestring;
    if (!strcmp(t, "message")) return ri_message(k, it, param);
    if (!strcmp(t, "function_call")) return ri_call(k, it, param);
    if (!strcmp(t, "function_call_output")) return ri_output(k, it, param);
    if (!strcmp(t, "reasoning")) return ri_reasoning(k, it, param);
    return oai_fail(k->e, 400, ERR_INVALID, "invalid_value", p,
                    "input item type '%.64s' is not supported (this server takes message, function_call, "
                    "function_call_output and reasoning items; hosted tools and item references are not served)",
                    t);
}

/* input → chat messages appended to msgs. */
static int ri_input(const cJSON *root, cJSON *msgs, oai_error *e)
{
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "input");
    if (absent(in)) return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "input", "'input' is required");
    if (cJSON_IsString(in)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", in->valuestring);
        cJSON_AddItemToArray(msgs, m);
        return 0;
    }
    if (!cJSON_IsArray(in)) return oai__bad_type(e, "input", "a string or an array of input items");
    ri_conv k = {msgs, NULL, e};
    int i = 0, rc = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, in)
    {
        if ((rc = ri_item(&k, it, i++))) break;
    }
    free(k.reasoning);
    return rc;
}

/* ---- the other fields -------------------------------------------------------------------------- */

static const char *const hosted_tools[] = {
    "web_search", "web_search_preview", "web_search_preview_2025_03_11", "file_search", "computer_use_preview",
    "code_interpreter", "image_generation", "mcp", "local_shell", "custom", "shell", "apply_patch",
};

/* Function tools {type, name, description, parameters, strict} → chat tools. */
static int rf_tools(const cJSON *root, cJSON *chat, oai_error *e)
{
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (absent(tools)) return 0;
    if (!cJSON_IsArray(tools)) return oai__bad_type(e, "tools", "an array of tools");
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        char p[64];
        snprintf(p, sizeof p, "tools[%d]", i);
        if (!cJSON_IsObject(t)) return oai__bad_type(e, p, "a tool object");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        snprintf(p, sizeof p, "tools[%d].type", i);
        if (!cJSON_IsString(type)) return oai__bad_type(e, p, "a string");
        if (strcmp(type->valuestring, "function")) {
            int hosted = 0;
            for (size_t h = 0; h < sizeof hosted_tools / sizeof hosted_tools[0]; h++)
                hosted |= !strcmp(type->valuestring, hosted_tools[h]);
            return oai_fail(e, 400, ERR_INVALID, "invalid_value", p,
                            "tool type '%.64s' is not supported: %s", type->valuestring,
                            hosted ? "hosted tools do not run on this server (only function tools)" : "only function tools are");
        }
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        snprintf(p, sizeof p, "tools[%d].name", i);
        if (!cJSON_IsString(name) || !*name->valuestring) return oai__bad_type(e, p, "a non-empty string");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(t, "parameters");
        snprintf(p, sizeof p, "tools[%d].parameters", i);
        if (!absent(params) && !cJSON_IsObject(params)) return oai__bad_type(e, p, "a JSON Schema object");
        cJSON *ct = cJSON_CreateObject(), *f;
        cJSON_AddStringToObject(ct, "type", "function");
        f = cJSON_AddObjectToObject(ct, "function");
        cJSON_AddStringToObject(f, "name", name->valuestring);
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        if (cJSON_IsString(desc)) cJSON_AddStringToObject(f, "description", desc->valuestring);
        if (!absent(params)) cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(params, 1));
        const cJSON *strict = cJSON_GetObjectItemCaseSensitive(t, "strict");
        if (cJSON_IsBool(strict)) cJSON_AddBoolToObject(f, "strict", cJSON_IsTrue(strict));
        cJSON_AddItemToArray(out, ct);
        i++;
    }
    return 0;
}

/* tool_choice: none / auto / required, or {"type": "function", "name": …}. */
static int rf_tool_choice(const cJSON *root, cJSON *chat, oai_error *e)
{
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (absent(tc)) return 0;
    if (cJSON_IsString(tc)) {
        cJSON_AddItemToObject(chat, "tool_choice", cJSON_Duplicate(tc, 1));
        return 0;
    }
    if (!cJSON_IsObject(tc)) return oai__bad_type(e, "tool_choice", "a string or a tool choice object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type"), *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
        return oai_fail(e, 400, ERR_INVALID, "invalid_value", "tool_choice",
                        "tool_choice of type '%.64s' is not supported: only function tools run on this server",
                        cJSON_IsString(type) ? type->valuestring : "?");
    if (!cJSON_IsString(name)) return oai__bad_type(e, "tool_choice", "{\"type\": \"function\", \"name\": …}");
    cJSON *c = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", name->valuestring);
    return 0;
}

/* text.format → response_format. */
static int rf_text(const cJSON *root, cJSON *chat, oai_error *e)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "text");
    if (absent(t)) return 0;
    if (!cJSON_IsObject(t)) return oai__bad_type(e, "text", "an object");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "format");
    if (absent(f)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(f, "type");
    if (!cJSON_IsObject(f) || !cJSON_IsString(type)) return oai__bad_type(e, "text.format", "an object with a 'type'");
    if (!strcmp(type->valuestring, "text")) return 0;
    if (!strcmp(type->valuestring, "json_object")) {
        cJSON_AddStringToObject(cJSON_AddObjectToObject(chat, "response_format"), "type", "json_object");
        return 0;
    }
    if (strcmp(type->valuestring, "json_schema"))
        return oai_fail(e, 400, ERR_INVALID, "invalid_value", "text.format.type",
                        "'text.format.type' must be text, json_object or json_schema, not '%.64s'", type->valuestring);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(f, "schema"), *name = cJSON_GetObjectItemCaseSensitive(f, "name");
    if (!cJSON_IsObject(schema))
        return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "text.format.schema",
                        "'text.format.schema' (a JSON Schema object) is required");
    if (!absent(name) && !cJSON_IsString(name)) return oai__bad_type(e, "text.format.name", "a string");
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format"), *js;
    cJSON_AddStringToObject(rf, "type", "json_schema");
    js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON_AddStringToObject(js, "name", cJSON_IsString(name) ? name->valuestring : "response");
    cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(schema, 1));
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(f, "strict");
    if (cJSON_IsBool(strict)) cJSON_AddBoolToObject(js, "strict", cJSON_IsTrue(strict));
    return 0;
}

/* What the platform offers and this server does not: a 400 naming the field. */
static int rf_refusals(const cJSON *root, oai_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "background");
    if (cJSON_IsTrue(v))
        return oai__bad_value(e, "background", "is not supported: responses are answered while the request waits");
    if (!absent(v) && !cJSON_IsBool(v)) return oai__bad_type(e, "background", "a boolean");
    if (!absent(cJSON_GetObjectItemCaseSensitive(root, "conversation")))
        return oai__bad_value(e, "conversation", "is not supported (the Conversations API is not served): use previous_response_id");
    if (!absent(cJSON_GetObjectItemCaseSensitive(root, "prompt")))
        return oai__bad_value(e, "prompt", "is not supported (stored prompt templates are not served)");
    v = cJSON_GetObjectItemCaseSensitive(root, "truncation");
    if (!absent(v) && (!cJSON_IsString(v) || strcmp(v->valuestring, "disabled")))
        return oai__bad_value(e, "truncation", "must be 'disabled' (a conversation longer than the context is a 400)");
    return 0;
}

/* include: only output_text log-probs; returns 1 when they are asked for. */
static int rf_include(const cJSON *root, oai_error *e, int *lp)
{
    const cJSON *inc = cJSON_GetObjectItemCaseSensitive(root, "include"), *it;
    *lp = 0;
    if (absent(inc)) return 0;
    if (!cJSON_IsArray(inc)) return oai__bad_type(e, "include", "an array of strings");
    cJSON_ArrayForEach(it, inc)
    {
        if (!cJSON_IsString(it)) return oai__bad_type(e, "include", "an array of strings");
        if (!strcmp(it->valuestring, "message.output_text.logprobs")) *lp = 1;
        else
            return oai_fail(e, 400, ERR_INVALID, "invalid_value", "include",
                            "include '%.64s' is not supported (only message.output_text.logprobs)", it->valuestring);
    }
    return 0;
}

/* The Response object's echo of the request (defaults as OpenAI's). */
static cJSON *rf_echo(const cJSON *root)
{
    static const char *const keys[] = {"instructions", "max_output_tokens", "max_tool_calls", "metadata",
                                       "parallel_tool_calls", "previous_response_id", "reasoning", "service_tier",
                                       "store", "temperature", "text", "tool_choice", "tools", "top_logprobs",
                                       "top_p", "truncation", "user"};
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; o && i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
        if (!absent(v)) cJSON_AddItemToObject(o, keys[i], cJSON_Duplicate(v, 1));
    }
    return o;
}

/* The chat request the Responses body means, and the dialect's history. */
static int rf_translate(const cJSON *root, oai_history_fn history, void *ud, oai_dialect *d, cJSON *chat,
                        oai_error *e)
{
    int rc = rf_refusals(root, e), lp = 0;
    for (size_t i = 0; !rc && i < sizeof passed_fields / sizeof passed_fields[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, passed_fields[i]);
        if (v) cJSON_AddItemToObject(chat, passed_fields[i], cJSON_Duplicate(v, 1));
    }
    cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(root, "instructions");
    if (!rc && !absent(ins) && !cJSON_IsString(ins)) rc = oai__bad_type(e, "instructions", "a string");
    if (!rc && cJSON_IsString(ins)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", ins->valuestring);
        cJSON_AddItemToArray(msgs, m);
    }
    const cJSON *prev = cJSON_GetObjectItemCaseSensitive(root, "previous_response_id");
    if (!rc && !absent(prev) && !cJSON_IsString(prev)) rc = oai__bad_type(e, "previous_response_id", "a string");
    if (!rc && cJSON_IsString(prev)) {
        char *h = history ? history(ud, prev->valuestring) : NULL;
        cJSON *old = h ? cJSON_Parse(h) : NULL, *m;
        free(h);
        if (!cJSON_IsArray(old)) {
            cJSON_Delete(old);
            return oai_fail(e, 400, ERR_INVALID, "previous_response_not_found", "previous_response_id",
                            "Previous response with id '%.100s' not found.", prev->valuestring);
        }
        cJSON_ArrayForEach(m, old) cJSON_AddItemToArray(d->history, cJSON_Duplicate(m, 1));
        cJSON_Delete(old);
    }
    cJSON *in = cJSON_CreateArray(), *m;
    if (!rc) rc = in ? ri_input(root, in, e) : oai__oom(e);
    if (!rc) { /* after the stored conversation, which follows the instructions */
        cJSON_ArrayForEach(m, d->history) cJSON_AddItemToArray(msgs, cJSON_Duplicate(m, 1));
        cJSON_ArrayForEach(m, in)
        {
            cJSON_AddItemToArray(msgs, cJSON_Duplicate(m, 1));
            cJSON_AddItemToArray(d->history, cJSON_Duplicate(m, 1));
        }
    }
    cJSON_Delete(in);
    if (!rc) rc = oai__get_int(root, "max_output_tokens", 1, 1 << 30, &d->max_output, e);
    if (!rc && d->max_output > 0) cJSON_AddNumberToObject(chat, "max_completion_tokens", d->max_output);
    if (!rc) rc = rf_tools(root, chat, e);
    if (!rc) rc = rf_tool_choice(root, chat, e);
    if (!rc) rc = rf_text(root, chat, e);
    if (!rc) rc = rf_include(root, e, &lp);
    int top = 0;
    if (!rc) rc = oai__get_int(root, "top_logprobs", 0, SMP_MAX_LOGPROBS, &top, e);
    if (!rc && lp) {
        cJSON_AddTrueToObject(chat, "logprobs");
        cJSON_AddNumberToObject(chat, "top_logprobs", top);
        d->logprobs = top;
    }
    d->store = 1;
    if (!rc) rc = oai__get_bool(root, "store", &d->store, e);
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    if (!rc && !absent(meta) && !cJSON_IsObject(meta)) rc = oai__bad_type(e, "metadata", "an object of strings");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "reasoning");
    if (!rc && !absent(r) && !cJSON_IsObject(r)) rc = oai__bad_type(e, "reasoning", "an object");
    const cJSON *effort = cJSON_IsObject(r) ? cJSON_GetObjectItemCaseSensitive(r, "effort") : NULL;
    if (!rc && cJSON_IsString(effort)) { /* templates of reasoning models read reasoning_effort */
        cJSON *kw = cJSON_GetObjectItemCaseSensitive(chat, "chat_template_kwargs");
        if (!kw) kw = cJSON_AddObjectToObject(chat, "chat_template_kwargs");
        if (cJSON_IsObject(kw) && !cJSON_GetObjectItemCaseSensitive(kw, "reasoning_effort"))
            cJSON_AddStringToObject(kw, "reasoning_effort", effort->valuestring);
    }
    return rc;
}

int oai_parse_responses(const char *body, size_t len, const oai_limits *lim, oai_history_fn history, void *ud,
                        oai_request *out, oai_error *e)
{
    memset(out, 0, sizeof *out);
    if (oai_validate_body(body, len, e)) return -EINVAL;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return oai_fail(e, 400, ERR_INVALID, "invalid_json", NULL, "The request body is not valid JSON");
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return oai_fail(e, 400, ERR_INVALID, "invalid_json", NULL, "The request body must be a JSON object");
    }
    oai_dialect *d = oai__dialect_new(OAI_DIALECT_RESPONSES);
    cJSON *chat = cJSON_CreateObject();
    int rc = d && chat ? 0 : oai__oom(e);
    if (!rc) rc = rf_translate(root, history, ud, d, chat, e);
    if (!rc && !(d->echo = rf_echo(root))) rc = oai__oom(e);
    size_t nf;
    const char *const *f = oai__responses_fields(&nf);
    return oai__dialect_finish(root, chat, d, f, nf, rc, lim, out, e);
}

/* ---- the Response object ------------------------------------------------------------------------ */

/* An echoed field, or the default. */
static void rs_echo(cJSON *o, const oai_dialect *d, const char *key, cJSON *def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->echo, key);
    if (v) {
        cJSON_AddItemToObject(o, key, cJSON_Duplicate(v, 1));
        cJSON_Delete(def);
    } else {
        cJSON_AddItemToObject(o, key, def);
    }
}

static cJSON *rs_usage(const oai_usage *u)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "input_tokens_details"), "cached_tokens", u->cached_tokens);
    cJSON_AddNumberToObject(o, "output_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "output_tokens_details"), "reasoning_tokens", 0);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    return o;
}

/* A Response object: status, output (consumed), usage (NULL: null), error (NULL: null). */
static cJSON *rs_object(const oai_dialect *d, const oai_resp *r, const char *status, cJSON *output,
                        const oai_usage *u, cJSON *error)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)r->created);
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddFalseToObject(o, "background");
    cJSON_AddItemToObject(o, "error", error ? error : cJSON_CreateNull());
    if (!strcmp(status, "incomplete"))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", "max_output_tokens");
    else
        cJSON_AddNullToObject(o, "incomplete_details");
    rs_echo(o, d, "instructions", cJSON_CreateNull());
    rs_echo(o, d, "max_output_tokens", cJSON_CreateNull());
    rs_echo(o, d, "max_tool_calls", cJSON_CreateNull());
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddItemToObject(o, "output", output);
    rs_echo(o, d, "parallel_tool_calls", cJSON_CreateTrue());
    rs_echo(o, d, "previous_response_id", cJSON_CreateNull());
    cJSON *reasoning = cJSON_CreateObject();
    cJSON_AddNullToObject(reasoning, "effort");
    cJSON_AddNullToObject(reasoning, "summary");
    rs_echo(o, d, "reasoning", reasoning);
    cJSON_AddStringToObject(o, "service_tier", "default");
    cJSON_AddBoolToObject(o, "store", d->store);
    rs_echo(o, d, "temperature", cJSON_CreateNumber(1));
    cJSON *text = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(text, "format"), "type", "text");
    rs_echo(o, d, "text", text);
    rs_echo(o, d, "tool_choice", cJSON_CreateString("auto"));
    rs_echo(o, d, "tools", cJSON_CreateArray());
    rs_echo(o, d, "top_logprobs", cJSON_CreateNumber(0));
    rs_echo(o, d, "top_p", cJSON_CreateNumber(1));
    cJSON_AddStringToObject(o, "truncation", "disabled");
    cJSON_AddItemToObject(o, "usage", u ? rs_usage(u) : cJSON_CreateNull());
    rs_echo(o, d, "user", cJSON_CreateNull());
    rs_echo(o, d, "metadata", cJSON_CreateObject());
    return o;
}

/* The log-probs of positions lps[0..n) in the output_text shape, or an empty list. */
static cJSON *rs_logprobs(const oai_dialect *d, const oai_resp *r, const oai_lp *lps, int n)
{
    if (d->logprobs < 0 || !n) return cJSON_CreateArray();
    char *s = oai_logprobs_json(r, lps, n, 0);
    cJSON *o = s ? cJSON_Parse(s) : NULL, *c = cJSON_DetachItemFromObject(o, "content");
    free(s);
    cJSON_Delete(o);
    return c ? c : cJSON_CreateArray();
}

static cJSON *rs_text_part(const char *type, cJSON *text, cJSON *logprobs)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", type);
    cJSON_AddItemToObject(p, "text", text);
    if (!strcmp(type, "output_text")) {
        cJSON_AddArrayToObject(p, "annotations");
        cJSON_AddItemToObject(p, "logprobs", logprobs ? logprobs : cJSON_CreateArray());
    } else {
        cJSON_Delete(logprobs);
    }
    return p;
}

static cJSON *rs_message_item(const char *id, const char *status, cJSON *part)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "status", status);
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON *c = cJSON_AddArrayToObject(m, "content");
    if (part) cJSON_AddItemToArray(c, part);
    return m;
}

static cJSON *rs_reasoning_item(const char *id, cJSON *part)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "type", "reasoning");
    cJSON_AddArrayToObject(m, "summary");
    cJSON *c = cJSON_AddArrayToObject(m, "content");
    if (part) cJSON_AddItemToArray(c, part);
    return m;
}

static cJSON *rs_call_item(const char *id, const char *status, const char *call_id, const char *name, cJSON *args)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "type", "function_call");
    cJSON_AddStringToObject(m, "status", status);
    cJSON_AddItemToObject(m, "arguments", args);
    cJSON_AddStringToObject(m, "call_id", call_id);
    cJSON_AddItemToObject(m, "name", oai__di_str(name, name ? strlen(name) : 0));
    return m;
}

char *oai__responses_json(oai_dialect *d, const oai_resp *r, const oai_choice *c, const oai_usage *u)
{
    const tc_call *calls[256];
    oai_di_out o;
    oai__di_out(c, &o, calls, 256);
    cJSON *out = cJSON_CreateArray();
    char id[64];
    int k = 0, cut = c->finish == ENGINE_FINISH_LENGTH;
    if (o.reasoning) {
        oai__di_item_id(r, "rs_", k++, id, sizeof id);
        cJSON_AddItemToArray(out, rs_reasoning_item(id, rs_text_part("reasoning_text", oai__di_str(o.reasoning, o.reasoning_len), NULL)));
    }
    int blank = 1;
    for (size_t i = 0; i < o.content_len && blank; i++) blank = strchr(" \t\r\n", o.content[i]) != NULL;
    if (!o.n_calls || !blank) {
        oai__di_item_id(r, "msg_", k++, id, sizeof id);
        cJSON *part = rs_text_part("output_text", oai__di_str(o.content, o.content_len), rs_logprobs(d, r, c->lps, c->n_lps));
        cJSON_AddItemToArray(out, rs_message_item(id, cut ? "incomplete" : "completed", part));
    }
    for (int i = 0; i < o.n_calls; i++) {
        oai__di_item_id(r, "fc_", k++, id, sizeof id);
        cJSON_AddItemToArray(out, rs_call_item(id, "completed", o.calls[i]->id, o.calls[i]->name,
                                               oai__di_str(o.calls[i]->args, o.calls[i]->args_len)));
    }
    cJSON *resp = rs_object(d, r, cut ? "incomplete" : "completed", out, u, NULL);
    char *s = cJSON_PrintUnformatted(resp);
    cJSON_Delete(resp);
    return s;
}

/* ---- streaming ---------------------------------------------------------------------------------- */

/* An event {type, item_id, output_index, …} of the open item. */
static cJSON *rs_ev(const oai_dialect *d, const char *type, int content_index)
{
    cJSON *o = oai__di_new(type);
    cJSON_AddStringToObject(o, "item_id", d->open_id);
    cJSON_AddNumberToObject(o, "output_index", d->n_items - 1);
    if (content_index >= 0) cJSON_AddNumberToObject(o, "content_index", content_index);
    return o;
}

static void rs_item_event(oai_dialect *d, const char *type, cJSON *item)
{
    cJSON *o = oai__di_new(type);
    cJSON_AddNumberToObject(o, "output_index", d->n_items - 1);
    cJSON_AddItemToObject(o, "item", item);
    oai__di_event(d, o);
}

void oai__responses_open(oai_dialect *d, const oai_resp *r)
{
    cJSON *o = oai__di_new("response.created");
    cJSON_AddItemToObject(o, "response", rs_object(d, r, "in_progress", cJSON_CreateArray(), NULL, NULL));
    oai__di_event(d, o);
    o = oai__di_new("response.in_progress");
    cJSON_AddItemToObject(o, "response", rs_object(d, r, "in_progress", cJSON_CreateArray(), NULL, NULL));
    oai__di_event(d, o);
}

/* Opens an item for delta t (text, reasoning or a call). */
static void rs_open_item(oai_dialect *d, const oai_resp *r, const tc_delta *t)
{
    d->open = t->kind == TC_D_CONTENT ? DI_TEXT : t->kind == TC_D_REASONING ? DI_REASONING : DI_CALL;
    d->open_call = t->index;
    d->acc_len = 0;
    oai__di_item_id(r, d->open == DI_TEXT ? "msg_" : d->open == DI_REASONING ? "rs_" : "fc_", d->n_items++,
                    d->open_id, sizeof d->open_id);
    if (d->open == DI_CALL) {
        free(d->call_name);
        d->call_name = strdup(t->name ? t->name : "");
        snprintf(d->call_id, sizeof d->call_id, "%s", t->id ? t->id : "");
        rs_item_event(d, "response.output_item.added",
                      rs_call_item(d->open_id, "in_progress", d->call_id, d->call_name, cJSON_CreateString("")));
        return;
    }
    int text = d->open == DI_TEXT;
    rs_item_event(d, "response.output_item.added",
                  text ? rs_message_item(d->open_id, "in_progress", NULL) : rs_reasoning_item(d->open_id, NULL));
    cJSON *o = rs_ev(d, "response.content_part.added", 0);
    cJSON_AddItemToObject(o, "part", rs_text_part(text ? "output_text" : "reasoning_text", cJSON_CreateString(""), NULL));
    oai__di_event(d, o);
}

void oai__responses_delta(oai_dialect *d, const oai_resp *r, const tc_delta *t, const oai_lp *lps, int n_lps)
{
    int want = t->kind == TC_D_CONTENT ? DI_TEXT : t->kind == TC_D_REASONING ? DI_REASONING : DI_CALL;
    if (want != d->open || t->kind == TC_D_CALL || (want == DI_CALL && t->index != d->open_call)) {
        oai__responses_close_item(d, r);
        rs_open_item(d, r, t);
    }
    if (!t->len && !(want == DI_TEXT && n_lps)) return;
    oai__di_acc(d, t->text, t->len);
    cJSON *o = rs_ev(d, want == DI_TEXT ? "response.output_text.delta" : want == DI_REASONING ? "response.reasoning_text.delta"
                                                                                               : "response.function_call_arguments.delta",
                     want == DI_CALL ? -1 : 0);
    cJSON_AddItemToObject(o, "delta", oai__di_str(t->text, t->len));
    if (want == DI_TEXT) cJSON_AddItemToObject(o, "logprobs", rs_logprobs(d, r, lps, n_lps));
    oai__di_event(d, o);
}

void oai__responses_close_item(oai_dialect *d, const oai_resp *r)
{
    (void)r;
    if (d->open == DI_NONE) return;
    cJSON *text = oai__di_str(d->acc, d->acc_len), *item, *o;
    if (d->open == DI_CALL) {
        o = rs_ev(d, "response.function_call_arguments.done", -1);
        cJSON_AddItemToObject(o, "name", cJSON_CreateString(d->call_name ? d->call_name : ""));
        cJSON_AddItemToObject(o, "arguments", cJSON_Duplicate(text, 1));
        oai__di_event(d, o);
        item = rs_call_item(d->open_id, "completed", d->call_id, d->call_name, text);
    } else {
        int msg = d->open == DI_TEXT;
        const char *pt = msg ? "output_text" : "reasoning_text";
        o = rs_ev(d, msg ? "response.output_text.done" : "response.reasoning_text.done", 0);
        cJSON_AddItemToObject(o, "text", cJSON_Duplicate(text, 1));
        if (msg) cJSON_AddArrayToObject(o, "logprobs");
        oai__di_event(d, o);
        o = rs_ev(d, "response.content_part.done", 0);
        cJSON_AddItemToObject(o, "part", rs_text_part(pt, cJSON_Duplicate(text, 1), NULL));
        oai__di_event(d, o);
        cJSON *part = rs_text_part(pt, text, NULL);
        item = msg ? rs_message_item(d->open_id, "completed", part) : rs_reasoning_item(d->open_id, part);
    }
    cJSON_AddItemToArray(d->done, cJSON_Duplicate(item, 1));
    rs_item_event(d, "response.output_item.done", item);
    d->open = DI_NONE;
    d->acc_len = 0;
}

char *oai__responses_close(oai_dialect *d, const oai_resp *r, const oai_choice *c, const oai_usage *u)
{
    int cut = c->finish == ENGINE_FINISH_LENGTH;
    if (!d->n_items) { /* nothing was said: an empty message, as the whole answer has */
        tc_delta t = {TC_D_CONTENT, 0, "", 0, NULL, NULL};
        rs_open_item(d, r, &t);
        oai__responses_close_item(d, r);
    }
    cJSON *resp = rs_object(d, r, cut ? "incomplete" : "completed", cJSON_Duplicate(d->done, 1), u, NULL);
    char *s = resp ? cJSON_PrintUnformatted(resp) : NULL;
    cJSON *o = oai__di_new(cut ? "response.incomplete" : "response.completed");
    cJSON_AddItemToObject(o, "response", resp);
    oai__di_event(d, o);
    return s;
}

void oai__responses_error(oai_dialect *d, const oai_resp *r, const oai_error *e)
{
    cJSON *o = oai__di_new("error");
    cJSON_AddStringToObject(o, "code", e->code ? e->code : "server_error");
    cJSON_AddItemToObject(o, "message", oai__di_str(e->message, strlen(e->message)));
    cJSON_AddNullToObject(o, "param");
    oai__di_event(d, o);
    cJSON *err = cJSON_CreateObject();
    cJSON_AddStringToObject(err, "code", "server_error");
    cJSON_AddItemToObject(err, "message", oai__di_str(e->message, strlen(e->message)));
    o = oai__di_new("response.failed");
    cJSON_AddItemToObject(o, "response", rs_object(d, r, "failed", cJSON_Duplicate(d->done, 1), NULL, err));
    oai__di_event(d, o);
}
