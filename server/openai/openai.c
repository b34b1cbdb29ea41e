/*
 * openai.c — JSON ⇄ structs for the OpenAI API (see openai.h).
 *
 * Parsing is strict about types and ranges of the fields kvserve honours and silent about fields
 * it does not know (clients send many). The first problem found becomes an oai_error naming the
 * field in `param`, and the partially built request is freed, so a failed parse owns nothing.
 * Builders produce compact single-line JSON, which is what SSE framing needs.
 */
#include "server/openai/openai.h"

#include <cjson/cJSON.h>

#include "model/utf8.h"
#include "server/openai/oai_chat.h"
#include "server/openai/internal.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ERR_INVALID = "invalid_request_error";

int oai_fail(oai_error *e, int status, const char *type, const char *code, const char *param,
             const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static int bad_type(oai_error *e, const char *param, const char *want)
{
    return oai_fail(e, 400, ERR_INVALID, "invalid_type", param, "'%s' must be %s", param, want);
}

static int bad_value(oai_error *e, const char *param, const char *what)
{
    return oai_fail(e, 400, ERR_INVALID, "invalid_value", param, "'%s' %s", param, what);
}

static int is_absent(const cJSON *v)
{
    return !v || cJSON_IsNull(v);
}

/* Integer field in [lo, hi]; leaves *out alone when absent or null. */
static int get_int(const cJSON *o, const char *name, long long lo, long long hi, long long *out,
                   oai_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (is_absent(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || !isfinite(v->valuedouble))
        return bad_type(e, name, "an integer");
    if (v->valuedouble < (double)lo || v->valuedouble > (double)hi) {
        char what[96];
        snprintf(what, sizeof what, "must be between %lld and %lld", lo, hi);
        return bad_value(e, name, what);
    }
    *out = (long long)v->valuedouble;
    return 0;
}

static int get_intv(const cJSON *o, const char *name, int lo, int hi, int *out, oai_error *e)
{
    long long v = *out;
    int rc = get_int(o, name, lo, hi, &v, e);
    if (!rc) *out = (int)v;
    return rc;
}

static int get_num(const cJSON *o, const char *name, double lo, double hi, float *out, oai_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (is_absent(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return bad_type(e, name, "a number");
    if (v->valuedouble < lo || v->valuedouble > hi) {
        char what[96];
        snprintf(what, sizeof what, "must be between %g and %g", lo, hi);
        return bad_value(e, name, what);
    }
    *out = (float)v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *name, int *out, oai_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (is_absent(v)) return 0;
    if (!cJSON_IsBool(v)) return bad_type(e, name, "a boolean");
    *out = cJSON_IsTrue(v);
    return 0;
}

int oai__get_int(const cJSON *o, const char *name, int lo, int hi, int *out, oai_error *e)
{
    return get_intv(o, name, lo, hi, out, e);
}

int oai__get_bool(const cJSON *o, const char *name, int *out, oai_error *e)
{
    return get_bool(o, name, out, e);
}

int oai__bad_type(oai_error *e, const char *param, const char *want)
{
    return bad_type(e, param, want);
}

int oai__bad_value(oai_error *e, const char *param, const char *what)
{
    return bad_value(e, param, what);
}

int oai__oom(oai_error *e)
{
    return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
}

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
    if (n == 0) return bad_value(e, param, "must not be empty");
    int32_t *ids = malloc(sizeof *ids * (size_t)n);
    if (!ids) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, a)
    {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble)) {
            free(ids);
            return bad_type(e, param, "an array of integer token ids");
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
    if (is_absent(p)) return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "prompt",
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
    if (!cJSON_IsArray(p)) return bad_type(e, "prompt", want);
    int n = cJSON_GetArraySize(p);
    if (n == 0) return bad_value(e, "prompt", "must not be empty");
    const cJSON *first = p->child;
    if (cJSON_IsNumber(first)) {
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        r->n_prompts = 1;
        return parse_ids(p, lim, "prompt", &r->prompts[0].ids, &r->prompts[0].n_ids, e);
    }
    if (n > OAI_MAX_PROMPTS) return bad_value(e, "prompt", "has too many prompts (at most 256)");
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
            return bad_type(e, "prompt", want);
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
    if (is_absent(c)) {
        if (strcmp(role, "assistant"))
            return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", param,
                            "'%s' is required for role '%s'", param, role);
        return dup_str("", out) ? oai_fail(e, 500, "server_error", NULL, NULL, "out of memory") : 0;
    }
    if (cJSON_IsString(c))
        return dup_str(c->valuestring, out) ? oai_fail(e, 500, "server_error", NULL, NULL, "out of memory") : 0;
    if (!cJSON_IsArray(c)) return bad_type(e, param, "a string or an array of content parts");
    size_t len = 0;
    const cJSON *part;
    int j = 0;
    cJSON_ArrayForEach(part, c)
    {
        char pp[96];
        snprintf(pp, sizeof pp, "%s[%d]", param, j++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type)) return bad_type(e, pp, "a content part object with a 'type'");
        const char *field = !strcmp(type->valuestring, "text") ? "text"
                            : !strcmp(type->valuestring, "refusal") && !strcmp(role, "assistant") ? "refusal"
                                                                                                : NULL;
        if (!field)
            return oai_fail(e, 400, ERR_INVALID, "invalid_value", pp,
                            "content part type '%s' in '%s' is not supported: this server is text-only",
                            type->valuestring, pp);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, field);
        if (!cJSON_IsString(t)) return bad_type(e, pp, "a text part with a string 'text'");
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
    if (is_absent(ms)) return oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "messages",
                                       "'messages' is required");
    if (!cJSON_IsArray(ms)) return bad_type(e, "messages", "an array of message objects");
    int n = cJSON_GetArraySize(ms);
    if (n == 0) return bad_value(e, "messages", "must not be empty");
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
        if (!cJSON_IsObject(m)) return bad_type(e, param, "an object");
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        snprintf(param, sizeof param, "messages[%d].role", i);
        if (!cJSON_IsString(role)) return bad_type(e, param, "a string");
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
    if (is_absent(s)) return 0;
    if (!cJSON_IsString(s) && !cJSON_IsArray(s)) return bad_type(e, "stop", "a string or an array of strings");
    int n = cJSON_IsString(s) ? 1 : cJSON_GetArraySize(s);
    if (n > ENGINE_MAX_STOP) return bad_value(e, "stop", "has more than 1024 sequences");
    if (n == 0) return 0;
    r->stop = calloc((size_t)n, sizeof *r->stop);
    if (!r->stop) return oai__oom(e);
    const cJSON *it = cJSON_IsString(s) ? s : s->child;
    for (; it; it = cJSON_IsString(s) ? NULL : it->next) {
        if (!cJSON_IsString(it)) return bad_type(e, "stop", "a string or an array of strings");
        if (!*it->valuestring) continue; /* an empty stop string matches nothing */
        if (dup_str(it->valuestring, &r->stop[r->n_stop++])) return oai__oom(e);
    }
    return 0;
}

static int parse_logit_bias(const cJSON *root, const oai_limits *lim, smp_params *p, oai_error *e)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (is_absent(b)) return 0;
    if (!cJSON_IsObject(b)) return bad_type(e, "logit_bias", "an object mapping token ids to biases");
    int n = cJSON_GetArraySize(b);
    if (n > lim->n_vocab) return bad_value(e, "logit_bias", "has more entries than the vocabulary");
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
            return bad_type(e, "logit_bias", "an object whose values are numbers");
        if (it->valuedouble < -100 || it->valuedouble > 100)
            return bad_value(e, "logit_bias", "values must be between -100 and 100");
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
    if ((rc = get_num(root, "temperature", 0, 2, &p->temperature, e))) return rc;
    if ((rc = get_num(root, "top_p", 0, 1, &p->top_p, e))) return rc;
    if (p->top_p <= 0) return bad_value(e, "top_p", "must be greater than 0");
    if ((rc = get_intv(root, "top_k", -1, 1 << 30, &p->top_k, e))) return rc;
    if ((rc = get_num(root, "min_p", 0, 1, &p->min_p, e))) return rc;
    if ((rc = get_num(root, "presence_penalty", -2, 2, &p->presence_penalty, e))) return rc;
    if ((rc = get_num(root, "frequency_penalty", -2, 2, &p->frequency_penalty, e))) return rc;
    if ((rc = get_num(root, "repetition_penalty", 0, 10, &p->repetition_penalty, e))) return rc;
    if (p->repetition_penalty <= 0) return bad_value(e, "repetition_penalty", "must be greater than 0");
    if ((rc = get_intv(root, "min_tokens", 0, 1 << 30, &p->min_tokens, e))) return rc;
    if ((rc = get_bool(root, "ignore_eos", &p->ignore_eos, e))) return rc;
    if ((rc = get_int(root, "seed", -(1LL << 62), 1LL << 62, &seed, e))) return rc;
    if (!is_absent(sv)) {
        p->seed = (uint64_t)seed;
        p->has_seed = 1;
    }
    if (p->top_k < 0) p->top_k = 0;
    return parse_logit_bias(root, lim, p, e);
}

static int parse_logprobs(const cJSON *root, oai_request *r, oai_error *e)
{
    int rc;
    if ((rc = get_bool(root, "return_tokens_as_token_ids", &r->token_ids, e))) return rc;
    if (r->kind == OAI_COMPLETION) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
        if (cJSON_IsBool(v)) /* some clients send a bool here; true means the sampled token only */
            r->logprobs = cJSON_IsTrue(v) ? 0 : -1;
        else if ((rc = get_intv(root, "logprobs", 0, SMP_MAX_LOGPROBS, &r->logprobs, e)))
            return rc;
        return get_bool(root, "echo", &r->echo, e);
    }
    int want = 0;
    if ((rc = get_bool(root, "logprobs", &want, e))) return rc;
    int top = -1;
    if ((rc = get_intv(root, "top_logprobs", 0, SMP_MAX_LOGPROBS, &top, e))) return rc;
    if (top > 0 && !want)
        return bad_value(e, "top_logprobs", "requires 'logprobs' to be true");
    if (want) r->logprobs = top < 0 ? 0 : top;
    return 0;
}

static int parse_chat_extras(const cJSON *root, const char *body, size_t len, oai_request *r,
                             oai_error *e)
{
    int rc = oai__parse_chat(root, body, len, &r->chat, e);
    if (rc) return rc;
    rc = get_bool(root, "add_generation_prompt", &r->add_generation_prompt, e);
    if (rc) return rc;
    return parse_messages(root, &r->msgs, &r->n_msgs, e);
}

static int parse_model(const cJSON *root, const oai_limits *lim, oai_request *r, oai_error *e)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (is_absent(m)) return 0;
    if (!cJSON_IsString(m)) return bad_type(e, "model", "a string");
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
    if ((rc = get_intv(root, mt, r->kind == OAI_CHAT ? 1 : 0, 1 << 30, &r->max_tokens, e))) return rc;
    if ((rc = get_intv(root, "n", 1, OAI_MAX_N, &r->n, e))) return rc;
    r->best_of = r->n;
    if (r->kind == OAI_COMPLETION && (rc = get_intv(root, "best_of", 1, OAI_MAX_N, &r->best_of, e)))
        return rc;
    if (r->best_of < r->n) return bad_value(e, "best_of", "must be greater than or equal to 'n'");
    if ((rc = get_bool(root, "stream", &r->stream, e))) return rc;
    if (r->stream && r->best_of != r->n)
        return bad_value(e, "best_of", "must equal 'n' when streaming");
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (!is_absent(so)) {
        if (!cJSON_IsObject(so)) return bad_type(e, "stream_options", "an object");
        if ((rc = get_bool(so, "include_usage", &r->include_usage, e))) return rc;
        if (!r->stream) r->include_usage = 0;
    }
    if ((rc = parse_logprobs(root, r, e))) return rc;
    if ((rc = parse_stop(root, r, e))) return rc;
    if ((rc = parse_sampling(root, lim, r, e))) return rc;
    if (r->max_tokens >= 0 && r->sampling.min_tokens > r->max_tokens)
        return bad_value(e, "min_tokens", "must not exceed max_tokens");
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
    } else if (!is_absent(p)) {
        rc = bad_type(e, "prompt", "a string");
    } else if (cJSON_GetObjectItemCaseSensitive(root, "messages")) {
        rc = parse_messages(root, &out->msgs, &out->n_msgs, e);
        if (!rc) rc = oai__parse_chat(root, body, len, &out->chat, e);
    } else {
        rc = oai_fail(e, 400, ERR_INVALID, "missing_required_parameter", "prompt",
                      "either 'prompt' or 'messages' is required");
    }
    if (!rc) rc = get_bool(root, "add_special_tokens", &out->add_special, e);
    if (!rc) rc = get_bool(root, "add_generation_prompt", &out->add_generation_prompt, e);
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
        rc = bad_type(e, "tokens", "an array of integer token ids");
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

/* ---- accumulation ------------------------------------------------------------------------- */

int oai_choice_append_text(oai_choice *c, const char *s, size_t n)
{
    if (c->text_len + n + 1 > c->text_cap) {
        size_t cap = c->text_cap ? c->text_cap * 2 : 256;
        while (cap < c->text_len + n + 1) cap *= 2;
        char *t = realloc(c->text, cap);
        if (!t) return -ENOMEM;
        c->text = t;
        c->text_cap = cap;
    }
    memcpy(c->text + c->text_len, s, n);
    c->text_len += n;
    c->text[c->text_len] = 0;
    return 0;
}

/* Appends one position to a growing oai_lp array. */
static int lp_append(oai_lp **v, int *n, int *cap, const smp_result *r, int has_logprob)
{
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 16;
        oai_lp *l = realloc(*v, sizeof *l * (size_t)c);
        if (!l) return -ENOMEM;
        *v = l;
        *cap = c;
    }
    (*v)[*n].r = *r;
    (*v)[(*n)++].has_logprob = has_logprob;
    return 0;
}

int oai_choice_append_lp(oai_choice *c, const smp_result *r, int has_logprob)
{
    return lp_append(&c->lps, &c->n_lps, &c->lps_cap, r, has_logprob);
}

int oai_choice_append_plp(oai_choice *c, const smp_result *r, int has_logprob)
{
    return lp_append(&c->plps, &c->n_plps, &c->plps_cap, r, has_logprob);
}

void oai_choice_free(oai_choice *c)
{
    free(c->text);
    free(c->lps);
    free(c->plps);
    oai_chat_state_free(c->chat);
    memset(c, 0, sizeof *c);
}

/* ---- builders ------------------------------------------------------------------------------ */

const char *oai_finish_name(int finish)
{
    switch (finish) {
    case ENGINE_FINISH_STOP: return "stop";
    case ENGINE_FINISH_LENGTH: return "length";
    default: return NULL;
    }
}

char *oai_string_json(const char *key, const char *value)
{
    char *v = utf8_sanitize(value, strlen(value));
    if (!v) return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, key, v);
    free(v);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* A token's bytes as a JSON-safe string: invalid UTF-8 bytes become U+FFFD. */
static cJSON *token_string(const oai_resp *r, int32_t id, unsigned char *raw, int *raw_len)
{
    char buf[256];
    int n = r->piece ? r->piece(r->piece_ud, id, buf, (int)sizeof buf) : 0;
    if (n < 0) n = 0;
    if (n > (int)sizeof buf) n = (int)sizeof buf;
    if (raw) {
        memcpy(raw, buf, (size_t)n);
        *raw_len = n;
    }
    if (r->token_ids) { /* return_tokens_as_token_ids: unambiguous even for partial UTF-8 */
        snprintf(buf, sizeof buf, "token_id:%d", (int)id);
        return cJSON_CreateString(buf);
    }
    char *out = utf8_sanitize(buf, (size_t)n);
    cJSON *j = cJSON_CreateString(out ? out : "");
    free(out);
    return j;
}

cJSON *oai__token_string(const oai_resp *r, int32_t id)
{
    return token_string(r, id, NULL, NULL);
}

size_t oai_text_chars(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

size_t oai_token_chars(const oai_resp *r, int32_t id)
{
    cJSON *t = token_string(r, id, NULL, NULL);
    size_t k = oai_text_chars(t->valuestring, strlen(t->valuestring));
    cJSON_Delete(t);
    return k;
}

static cJSON *bytes_array(const unsigned char *raw, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(raw[i]));
    return a;
}

/* One chat TokenLogprob; with_top adds its top_logprobs. */
static cJSON *chat_token_lp(const oai_resp *r, int32_t id, float lp, const oai_lp *top)
{
    unsigned char raw[256];
    int n = 0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "token", token_string(r, id, raw, &n));
    cJSON_AddNumberToObject(o, "logprob", lp);
    cJSON_AddItemToObject(o, "bytes", bytes_array(raw, n));
    if (top) {
        cJSON *a = cJSON_AddArrayToObject(o, "top_logprobs");
        int k = top->r.n_top < r->logprobs ? top->r.n_top : r->logprobs;
        for (int i = 0; i < k; i++)
            cJSON_AddItemToArray(a, chat_token_lp(r, top->r.top_ids[i], top->r.top_logprobs[i], NULL));
    }
    return o;
}

static cJSON *chat_logprobs(const oai_resp *r, const oai_lp *lps, int n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *c = cJSON_AddArrayToObject(o, "content");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(c, chat_token_lp(r, lps[i].r.token, lps[i].r.logprob, &lps[i]));
    cJSON_AddNullToObject(o, "refusal");
    return o;
}

static cJSON *completion_logprobs(const oai_resp *r, const oai_lp *lps, int n, size_t off)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
    cJSON *tlp = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (int i = 0; i < n; i++) {
        const oai_lp *l = &lps[i];
        cJSON *ts = token_string(r, l->r.token, NULL, NULL);
        cJSON_AddItemToArray(toks, ts);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        off += oai_text_chars(ts->valuestring, strlen(ts->valuestring));
        if (!l->has_logprob) {
            cJSON_AddItemToArray(tlp, cJSON_CreateNull());
            cJSON_AddItemToArray(top, cJSON_CreateNull());
            continue;
        }
        cJSON_AddItemToArray(tlp, cJSON_CreateNumber(l->r.logprob));
        cJSON *d = cJSON_CreateObject();
        int k = l->r.n_top < r->logprobs ? l->r.n_top : r->logprobs;
        for (int j = 0; j < k; j++) {
            cJSON *s = token_string(r, l->r.top_ids[j], NULL, NULL);
            if (!cJSON_GetObjectItemCaseSensitive(d, s->valuestring))
                cJSON_AddNumberToObject(d, s->valuestring, l->r.top_logprobs[j]);
            cJSON_Delete(s);
        }
        cJSON *s = token_string(r, l->r.token, NULL, NULL);
        if (!cJSON_GetObjectItemCaseSensitive(d, s->valuestring))
            cJSON_AddNumberToObject(d, s->valuestring, l->r.logprob);
        cJSON_Delete(s);
        cJSON_AddItemToArray(top, d);
    }
    return o;
}

char *oai_logprobs_json(const oai_resp *r, const oai_lp *lps, int n, size_t text_offset)
{
    cJSON *o = r->kind == OAI_CHAT ? chat_logprobs(r, lps, n) : completion_logprobs(r, lps, n, text_offset);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static cJSON *head(const oai_resp *r, const char *object)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", r->model);
    return o;
}

static cJSON *usage_json(const oai_usage *u)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(o, "completion_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    cJSON *d = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", u->cached_tokens);
    return o;
}

static void add_finish(cJSON *o, const oai_choice *c, int finish)
{
    const char *f = c && c->chat ? oai__chat_finish(c, finish) : oai_finish_name(finish);
    if (f) cJSON_AddStringToObject(o, "finish_reason", f);
    else cJSON_AddNullToObject(o, "finish_reason");
}

static cJSON *lp_or_null(const oai_resp *r, const oai_lp *lps, int n, size_t off)
{
    if (r->logprobs < 0) return cJSON_CreateNull();
    return r->kind == OAI_CHAT ? chat_logprobs(r, lps, n) : completion_logprobs(r, lps, n, off);
}

char *oai_response_json(const oai_resp *r, const oai_choice *choices, int n, const oai_usage *u)
{
    int chat = r->kind == OAI_CHAT;
    cJSON *o = head(r, chat ? "chat.completion" : "text_completion");
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < n; i++) {
        const oai_choice *c = &choices[i];
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", c->index);
        if (chat) {
            cJSON *m = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            if (c->chat)
                oai__chat_message(m, c);
            else
                cJSON_AddStringToObject(m, "content", c->text ? c->text : "");
            cJSON_AddNullToObject(m, "refusal");
        } else {
            cJSON_AddStringToObject(ch, "text", c->text ? c->text : "");
        }
        cJSON_AddItemToObject(ch, "logprobs", lp_or_null(r, c->lps, c->n_lps, c->text_offset));
        add_finish(ch, chat ? c : NULL, c->finish);
        oai__add_stop_reason(ch, r, c, c->finish);
        if (!chat && r->prompt_logprobs >= 0)
            cJSON_AddItemToObject(ch, "prompt_logprobs", oai__prompt_logprobs_json(r, c->plps, c->n_plps));
        cJSON_AddItemToArray(arr, ch);
    }
    if (chat && r->prompt_logprobs >= 0 && n > 0)
        cJSON_AddItemToObject(o, "prompt_logprobs", oai__prompt_logprobs_json(r, choices[0].plps, choices[0].n_plps));
    cJSON_AddItemToObject(o, "usage", usage_json(u));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* "data: " + json + "\n\n", consuming json. */
static char *sse_wrap(char *json)
{
    if (!json) return NULL;
    size_t n = strlen(json);
    char *s = malloc(n + 9);
    if (s) {
        memcpy(s, "data: ", 6);
        memcpy(s + 6, json, n);
        memcpy(s + 6 + n, "\n\n", 3);
    }
    free(json);
    return s;
}

char *oai_chunk_sse(const oai_resp *r, const oai_choice *c, int role, const char *text, size_t len,
                    const oai_lp *lps, int n_lps, size_t text_offset, int finish)
{
    int index = c->index;
    int chat = r->kind == OAI_CHAT;
    if (chat) {
        char *t = strndup(text ? text : "", text ? len : 0);
        if (!t) return NULL;
        cJSON *d = cJSON_CreateObject();
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (role || len || n_lps) cJSON_AddStringToObject(d, "content", t);
        free(t);
        return oai__chat_chunk(r, c, d, lps, n_lps, finish);
    }
    cJSON *o = head(r, "text_completion");
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", index);
    char *t = strndup(text ? text : "", text ? len : 0);
    if (!t) {
        cJSON_Delete(o);
        cJSON_Delete(ch);
        return NULL;
    }
    cJSON_AddStringToObject(ch, "text", t);
    cJSON_AddItemToObject(ch, "logprobs",
                          r->logprobs >= 0 ? completion_logprobs(r, lps, n_lps, text_offset) : cJSON_CreateNull());
    free(t);
    add_finish(ch, NULL, finish);
    oai__add_stop_reason(ch, r, c, finish);
    cJSON_AddItemToArray(arr, ch);
    if (r->include_usage) cJSON_AddNullToObject(o, "usage");
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return sse_wrap(json);
}

char *oai__chat_chunk(const oai_resp *r, const oai_choice *c, cJSON *delta, const oai_lp *lps,
                      int n_lps, int finish)
{
    cJSON *o = head(r, "chat.completion.chunk");
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", c->index);
    cJSON_AddItemToObject(ch, "delta", delta);
    cJSON_AddItemToObject(ch, "logprobs", n_lps ? lp_or_null(r, lps, n_lps, 0) : cJSON_CreateNull());
    add_finish(ch, c, finish);
    oai__add_stop_reason(ch, r, c, finish);
    cJSON_AddItemToArray(arr, ch);
    if (r->include_usage) cJSON_AddNullToObject(o, "usage");
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return sse_wrap(json);
}

char *oai_usage_chunk_sse(const oai_resp *r, const oai_usage *u)
{
    cJSON *o = head(r, r->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToObject(o, "usage", usage_json(u));
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return sse_wrap(json);
}

char *oai_error_json(const oai_error *e)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *er = cJSON_AddObjectToObject(o, "error");
    /* Messages quote what the client sent (a route, a value) and may be cut at any byte: the
     * body stays valid UTF-8 whatever they hold. */
    char *m = utf8_sanitize(e->message, strlen(e->message)), *p = utf8_sanitize(e->param, strlen(e->param));
    cJSON_AddStringToObject(er, "message", m ? m : "");
    cJSON_AddStringToObject(er, "type", e->type ? e->type : "server_error");
    if (e->param[0]) cJSON_AddStringToObject(er, "param", p ? p : "");
    else cJSON_AddNullToObject(er, "param");
    free(m);
    free(p);
    if (e->code) cJSON_AddStringToObject(er, "code", e->code);
    else cJSON_AddNullToObject(er, "code");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
