/*
 * openai.c — request JSON → owned structs for the OpenAI API (see openai.h): completions, chat
 * completions, /tokenize and /detokenize bodies. The top of openai/: the chat fields, vLLM's
 * extensions and the structured outputs are read by their own files, which it calls.
 *
 * Parsing is strict about types and ranges of the fields kvserve honours and silent about fields
 * it does not know (clients send many). The first problem found becomes an oai_error naming the
 * field in `param`, and the partially built request is freed, so a failed parse owns nothing.
 * The responses are built in oai_response.c.
 */
#include "server/openai/openai.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai/oai_chat.h"
#include "server/openai/oai_dialect.h"
#include "server/openai/internal.h"

static const char *const ERR_INVALID = "invalid_request_error";

static int dup_str(const char *s, char **out)
{
    *out = strdup(s);
    return *out ? 0 : -ENOMEM;
}

/* One token-id array into ids[]; every id in [0, n_vocab). */
static int parse_ids(const cJSON *a, const oai_limits *lim, const char *param, int32_t **out,
                     int *n_out, oai_error *e)
{
    int n = cJSON_GetArraySize(a);
    if (n == 0) return oai__bad_value(e, param, "must not be empty");
    int32_t *ids = malloc(sizeof *ids * (size_t)n);
    if (!ids) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, a)
    {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble)) {
            free(ids);
            return oai__bad_type(e, param, "an array of integer token ids");
        }
        if (t->valuedouble < 0 || t->valuedouble >= lim->n_vocab) {
            free(ids);
            return oai_fail(e, 400, ERR_INVALID, "invalid_value", param,
                            "token id %.0f is outside the vocabulary [0, %d)", t->valuedouble,
                            lim->n_vocab);
        }
        ids[i++] = (int32_t)t->valuedouble;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

#define OAI_MAX_PROMPTS 256

static int parse_prompt(const cJSON *root, const oai_limits *lim, oai_request *r, oai_error *e)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (oai__is_absent(p))
        return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "prompt",
                        "'prompt' is required");
    if (cJSON_IsString(p)) {
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts || dup_str(p->valuestring, &r->prompts[0].text))
            return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        r->n_prompts = 1;
        return 0;
    }
    const char *want = "a string, an array of strings, an array of token ids or an array of "
                       "token-id arrays";
    if (!cJSON_IsArray(p)) return oai__bad_type(e, "prompt", want);
    int n = cJSON_GetArraySize(p);
    if (n == 0) return oai__bad_value(e, "prompt", "must not be empty");
    const cJSON *first = p->child;
    if (cJSON_IsNumber(first)) {
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        r->n_prompts = 1;
        return parse_ids(p, lim, "prompt", &r->prompts[0].ids, &r->prompts[0].n_ids, e);
    }
    if (n > OAI_MAX_PROMPTS)
        return oai__bad_value(e, "prompt", "has too many prompts (at most 256)");
    r->prompts = calloc((size_t)n, sizeof *r->prompts);
    if (!r->prompts) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    r->n_prompts = n;
    int i = 0, strings = cJSON_IsString(first);
    const cJSON *it;
    cJSON_ArrayForEach(it, p)
    {
        char param[48];
        snprintf(param, sizeof param, "prompt[%d]", i);
        if (strings && cJSON_IsString(it)) {
            if (dup_str(it->valuestring, &r->prompts[i].text))
                return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        } else if (!strings && cJSON_IsArray(it)) {
            int rc = parse_ids(it, lim, param, &r->prompts[i].ids, &r->prompts[i].n_ids, e);
            if (rc) return rc;
        } else {
            return oai__bad_type(e, "prompt", want);
        }
        i++;
    }
    return 0;
}

/* A message's content: a string, null (assistant only), or text parts concatenated. */
static int parse_content(const cJSON *m, int idx, const char *role, char **out, oai_error *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", idx);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (oai__is_absent(c)) {
        if (strcmp(role, "assistant"))
            return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", param,
                            "'%s' is required for role '%s'", param, role);
        return dup_str("", out) ? oai_fail(e, 500, "server_error", NULL, NULL, "out of memory") : 0;
    }
    if (cJSON_IsString(c))
        return dup_str(c->valuestring, out) ? oai_fail(e, 500, "server_error", NULL, NULL, "out of memory") : 0;
    if (!cJSON_IsArray(c)) return oai__bad_type(e, param, "a string or an array of content parts");
    size_t len = 0;
    const cJSON *part;
    int j = 0;
    cJSON_ArrayForEach(part, c)
    {
        char pp[96];
        snprintf(pp, sizeof pp, "%s[%d]", param, j++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type))
            return oai__bad_type(e, pp, "a content part object with a 'type'");
        const char *field = !strcmp(type->valuestring, "text") ? "text"
                            : !strcmp(type->valuestring, "refusal") && !strcmp(role, "assistant") ? "refusal"
                                                                                                : NULL;
        if (!field)
            return oai_fail(e, 400, ERR_INVALID, "invalid_value", pp,
                            "content part type '%s' in '%s' is not supported: this server is text-only",
                            type->valuestring, pp);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, field);
        if (!cJSON_IsString(t)) return oai__bad_type(e, pp, "a text part with a string 'text'");
        len += strlen(t->valuestring);
    }
    char *s = malloc(len + 1);
    if (!s) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    size_t off = 0;
    cJSON_ArrayForEach(part, c)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!t) t = cJSON_GetObjectItemCaseSensitive(part, "refusal");
        size_t l = strlen(t->valuestring);
        memcpy(s + off, t->valuestring, l);
        off += l;
    }
    s[off] = 0;
    *out = s;
    return 0;
}

static int parse_messages(const cJSON *root, oai_msg **out, int *n_out, oai_error *e)
{
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (oai__is_absent(ms))
        return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "messages",
                        "'messages' is required");
    if (!cJSON_IsArray(ms)) return oai__bad_type(e, "messages", "an array of message objects");
    int n = cJSON_GetArraySize(ms);
    if (n == 0) return oai__bad_value(e, "messages", "must not be empty");
    oai_msg *msgs = calloc((size_t)n, sizeof *msgs);
    if (!msgs) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    *out = msgs;
    *n_out = n;
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool", "function"};
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms)
    {
        char param[48];
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(m)) return oai__bad_type(e, param, "an object");
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        snprintf(param, sizeof param, "messages[%d].role", i);
        if (!cJSON_IsString(role)) return oai__bad_type(e, param, "a string");
        int known = 0;
        for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++) known |= !strcmp(role->valuestring, roles[k]);
        if (!known)
            return oai_fail(e, 400, ERR_INVALID, "invalid_value", param, "unknown role '%s'",
                            role->valuestring);
        if (dup_str(role->valuestring, &msgs[i].role))
            return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        int rc = parse_content(m, i, role->valuestring, &msgs[i].content, e);
        if (rc) return rc;
        i++;
    }
    return 0;
}

static int parse_stop(const cJSON *root, oai_request *r, oai_error *e)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (oai__is_absent(s)) return 0;
    if (!cJSON_IsString(s) && !cJSON_IsArray(s))
        return oai__bad_type(e, "stop", "a string or an array of strings");
    int n = cJSON_IsString(s) ? 1 : cJSON_GetArraySize(s);
    if (n > ENGINE_MAX_STOP) return oai__bad_value(e, "stop", "has more than 1024 sequences");
    if (n == 0) return 0;
    r->stop = calloc((size_t)n, sizeof *r->stop);
    if (!r->stop) return oai__oom(e);
    const cJSON *it = cJSON_IsString(s) ? s : s->child;
    for (; it; it = cJSON_IsString(s) ? NULL : it->next) {
        if (!cJSON_IsString(it)) return oai__bad_type(e, "stop", "a string or an array of strings");
        if (!*it->valuestring) continue; /* an empty stop string matches nothing */
        if (dup_str(it->valuestring, &r->stop[r->n_stop++])) return oai__oom(e);
    }
    return 0;
}

static int parse_logit_bias(const cJSON *root, const oai_limits *lim, smp_params *p, oai_error *e)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (oai__is_absent(b)) return 0;
    if (!cJSON_IsObject(b))
        return oai__bad_type(e, "logit_bias", "an object mapping token ids to biases");
    int n = cJSON_GetArraySize(b);
    if (n > lim->n_vocab)
        return oai__bad_value(e, "logit_bias", "has more entries than the vocabulary");
    if (n == 0) return 0;
    p->bias_ids = malloc(sizeof *p->bias_ids * (size_t)n);
    p->bias_vals = malloc(sizeof *p->bias_vals * (size_t)n);
    if (!p->bias_ids || !p->bias_vals) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, b)
    {
        char *end;
        errno = 0;
        long id = strtol(it->string, &end, 10);
        if (end == it->string || *end || errno || id < 0 || id >= lim->n_vocab)
            return oai_fail(e, 400, ERR_INVALID, "invalid_value", "logit_bias",
                            "logit_bias key '%s' is not a token id in [0, %d)", it->string, lim->n_vocab);
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
            return oai__bad_type(e, "logit_bias", "an object whose values are numbers");
        if (it->valuedouble < -100 || it->valuedouble > 100)
            return oai__bad_value(e, "logit_bias", "values must be between -100 and 100");
        p->bias_ids[p->n_logit_bias] = (int32_t)id;
        p->bias_vals[p->n_logit_bias++] = (float)it->valuedouble;
    }
    return 0;
}

static void sampling_defaults(smp_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
    p->n_logprobs = -1;
}

static int parse_sampling(const cJSON *root, const oai_limits *lim, oai_request *r, oai_error *e)
{
    smp_params *p = &r->sampling;
    int rc;
    long long seed = 0;
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(root, "seed");
    if ((rc = oai__get_num(root, "temperature", 0, 2, &p->temperature, e))) return rc;
    if ((rc = oai__get_num(root, "top_p", 0, 1, &p->top_p, e))) return rc;
    if (p->top_p <= 0) return oai__bad_value(e, "top_p", "must be greater than 0");
    if ((rc = oai__get_int(root, "top_k", -1, 1 << 30, &p->top_k, e))) return rc;
    if ((rc = oai__get_num(root, "min_p", 0, 1, &p->min_p, e))) return rc;
    if ((rc = oai__get_num(root, "presence_penalty", -2, 2, &p->presence_penalty, e))) return rc;
    if ((rc = oai__get_num(root, "frequency_penalty", -2, 2, &p->frequency_penalty, e))) return rc;
    if ((rc = oai__get_num(root, "repetition_penalty", 0, 10, &p->repetition_penalty, e)))
        return rc;
    if (p->repetition_penalty <= 0)
        return oai__bad_value(e, "repetition_penalty", "must be greater than 0");
    if ((rc = oai__get_int(root, "min_tokens", 0, 1 << 30, &p->min_tokens, e))) return rc;
    if ((rc = oai__get_bool(root, "ignore_eos", &p->ignore_eos, e))) return rc;
    if ((rc = oai__get_ll(root, "seed", -(1LL << 62), 1LL << 62, &seed, e))) return rc;
    if (!oai__is_absent(sv)) {
        p->seed = (uint64_t)seed;
        p->has_seed = 1;
    }
    if (p->top_k < 0) p->top_k = 0;
    return parse_logit_bias(root, lim, p, e);
}

static int parse_logprobs(const cJSON *root, oai_request *r, oai_error *e)
{
    int rc;
    if ((rc = oai__get_bool(root, "return_tokens_as_token_ids", &r->token_ids, e))) return rc;
    if (r->kind == OAI_COMPLETION) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
        if (cJSON_IsBool(v)) /* some clients send a bool here; true means the sampled token only */
            r->logprobs = cJSON_IsTrue(v) ? 0 : -1;
        else if ((rc = oai__get_int(root, "logprobs", 0, SMP_MAX_LOGPROBS, &r->logprobs, e)))
            return rc;
        return oai__get_bool(root, "echo", &r->echo, e);
    }
    int want = 0;
    if ((rc = oai__get_bool(root, "logprobs", &want, e))) return rc;
    int top = -1;
    if ((rc = oai__get_int(root, "top_logprobs", 0, SMP_MAX_LOGPROBS, &top, e))) return rc;
    if (top > 0 && !want)
        return oai__bad_value(e, "top_logprobs", "requires 'logprobs' to be true");
    if (want) r->logprobs = top < 0 ? 0 : top;
    return 0;
}

static int parse_chat_extras(const cJSON *root, const char *body, size_t len, oai_request *r,
                             oai_error *e)
{
    int rc = oai__parse_chat(root, body, len, &r->chat, e);
    if (rc) return rc;
    rc = oai__get_bool(root, "add_generation_prompt", &r->add_generation_prompt, e);
    if (rc) return rc;
    return parse_messages(root, &r->msgs, &r->n_msgs, e);
}

static int parse_model(const cJSON *root, const oai_limits *lim, oai_request *r, oai_error *e)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (oai__is_absent(m)) return 0;
    if (!cJSON_IsString(m)) return oai__bad_type(e, "model", "a string");
    if (!*m->valuestring) return 0;
    if (lim->model_name && strcmp(m->valuestring, lim->model_name))
        return oai_fail(e, 404, ERR_INVALID, "model_not_found", "model",
                        "The model '%s' does not exist (this server serves '%s')", m->valuestring,
                        lim->model_name);
    return dup_str(m->valuestring, &r->model) ? oai_fail(e, 500, "server_error", NULL, NULL, "out of memory") : 0;
}

static int parse_common(const cJSON *root, const oai_limits *lim, oai_request *r, oai_error *e)
{
    int rc;
    if ((rc = parse_model(root, lim, r, e))) return rc;
    const char *mt = r->kind == OAI_CHAT && cJSON_GetObjectItemCaseSensitive(root, "max_completion_tokens")
                         ? "max_completion_tokens"
                         : "max_tokens";
    if ((rc = oai__get_int(root, mt, r->kind == OAI_CHAT ? 1 : 0, 1 << 30, &r->max_tokens, e)))
        return rc;
    if ((rc = oai__get_int(root, "n", 1, OAI_MAX_N, &r->n, e))) return rc;
    r->best_of = r->n;
    if (r->kind == OAI_COMPLETION &&
        (rc = oai__get_int(root, "best_of", 1, OAI_MAX_N, &r->best_of, e)))
        return rc;
    if (r->best_of < r->n)
        return oai__bad_value(e, "best_of", "must be greater than or equal to 'n'");
    if ((rc = oai__get_bool(root, "stream", &r->stream, e))) return rc;
    if (r->stream && r->best_of != r->n)
        return oai__bad_value(e, "best_of", "must equal 'n' when streaming");
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (!oai__is_absent(so)) {
        if (!cJSON_IsObject(so)) return oai__bad_type(e, "stream_options", "an object");
        if ((rc = oai__get_bool(so, "include_usage", &r->include_usage, e))) return rc;
        if (!r->stream) r->include_usage = 0;
    }
    if ((rc = parse_logprobs(root, r, e))) return rc;
    if ((rc = parse_stop(root, r, e))) return rc;
    if ((rc = parse_sampling(root, lim, r, e))) return rc;
    if (r->max_tokens >= 0 && r->sampling.min_tokens > r->max_tokens)
        return oai__bad_value(e, "min_tokens", "must not exceed max_tokens");
    r->sampling.n_logprobs = r->logprobs;
    return oai__parse_vllm(root, lim, r, e);
}

int oai_parse(int kind, const char *body, size_t len, const oai_limits *lim, oai_request *out,
              oai_error *err)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->max_tokens = -1;
    out->n = 1;
    out->logprobs = -1;
    out->add_generation_prompt = 1;
    out->prompt_logprobs = -1;
    sampling_defaults(&out->sampling);
    if (oai_validate_body(body, len, err)) return -EINVAL;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root)
        return oai_fail(err, 400, ERR_INVALID, "invalid_json", NULL,
                        "The request body is not valid JSON");
    int rc;
    if (!cJSON_IsObject(root)) {
        rc = oai_fail(err, 400, ERR_INVALID, "invalid_json", NULL, "The request body must be a JSON object");
    } else {
        rc = parse_common(root, lim, out, err);
        if (!rc) rc = kind == OAI_CHAT ? parse_chat_extras(root, body, len, out, err) : parse_prompt(root, lim, out, err);
        if (!rc) rc = oai__parse_structured(root, lim, out, err); /* last: they may compile */
        if (!rc && kind == OAI_CHAT) rc = oai__chat_grammar(lim, out, err);
    }
    cJSON_Delete(root);
    if (rc) oai_request_free(out);
    return rc;
}

static void free_msgs(oai_msg *m, int n)
{
    for (int i = 0; m && i < n; i++) {
        free(m[i].role);
        free(m[i].content);
    }
    free(m);
}

void oai_request_free(oai_request *r)
{
    free(r->model);
    for (int i = 0; r->prompts && i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    free(r->prompts);
    free_msgs(r->msgs, r->n_msgs);
    for (int i = 0; r->stop && i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    smp_params_free_arrays(&r->sampling);
    oai__free_vllm(r);
    gr_unref(r->grammar);
    oai_chat_free(r->chat);
    oai_dialect_free(r->dialect);
    memset(r, 0, sizeof *r);
}

int oai_parse_tokenize(const char *body, size_t len, oai_tok_request *out, oai_error *e)
{
    memset(out, 0, sizeof *out);
    out->add_special = 1;
    out->add_generation_prompt = 1;
    if (oai_validate_body(body, len, e)) return -EINVAL;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return oai_fail(e, 400, ERR_INVALID, "invalid_json", NULL, "The request body is not valid JSON");
    int rc = 0;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!cJSON_IsObject(root)) {
        rc = oai_fail(e, 400, ERR_INVALID, "invalid_json", NULL, "The request body must be a JSON object");
    } else if (cJSON_IsString(p)) {
        rc = dup_str(p->valuestring, &out->prompt);
    } else if (!oai__is_absent(p)) {
        rc = oai__bad_type(e, "prompt", "a string");
    } else if (cJSON_GetObjectItemCaseSensitive(root, "messages")) {
        rc = parse_messages(root, &out->msgs, &out->n_msgs, e);
        if (!rc) rc = oai__parse_chat(root, body, len, &out->chat, e);
    } else {
        rc = oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "prompt",
                      "either 'prompt' or 'messages' is required");
    }
    if (!rc) rc = oai__get_bool(root, "add_special_tokens", &out->add_special, e);
    if (!rc) rc = oai__get_bool(root, "add_generation_prompt", &out->add_generation_prompt, e);
    if (rc == -ENOMEM) oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    cJSON_Delete(root);
    if (rc) oai_tok_request_free(out);
    return rc;
}

int oai_parse_detokenize(const char *body, size_t len, const oai_limits *lim, oai_tok_request *out,
                         oai_error *e)
{
    memset(out, 0, sizeof *out);
    if (oai_validate_body(body, len, e)) return -EINVAL;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return oai_fail(e, 400, ERR_INVALID, "invalid_json", NULL, "The request body is not valid JSON");
    int rc;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!cJSON_IsArray(t))
        rc = oai__bad_type(e, "tokens", "an array of integer token ids");
    else if (cJSON_GetArraySize(t) == 0)
        rc = 0;
    else
        rc = parse_ids(t, lim, "tokens", &out->tokens, &out->n_tokens, e);
    cJSON_Delete(root);
    if (rc) oai_tok_request_free(out);
    return rc;
}

void oai_tok_request_free(oai_tok_request *r)
{
    free(r->prompt);
    free_msgs(r->msgs, r->n_msgs);
    free(r->tokens);
    oai_chat_free(r->chat);
    memset(r, 0, sizeof *r);
}

int oai__parse_ids(const cJSON *a, const oai_limits *lim, const char *param, int32_t **out, int *n_out,
                   oai_error *e)
{
    return parse_ids(a, lim, param, out, n_out, e);
}
