/*
 * oai_fields.c — vLLM's extensions of the OpenAI request (sampling fields both endpoints take)
 * and of the response (stop_reason, prompt_logprobs), parsed and built as vLLM does:
 *
 *   stop_token_ids        ids that end a choice (finish_reason "stop", stop_reason = the id;
 *                         the token's text is cut unless include_stop_str_in_output)
 *   include_stop_str_in_output   keep the matched stop string (or stop token's text)
 *   allowed_token_ids     only these ids may be sampled (non-empty, in the vocabulary)
 *   bad_words             words that must not be generated (tokenized later, with the prompt)
 *   prompt_logprobs       log-probs of every prompt token with N alternatives (not streamed)
 *   truncate_prompt_tokens   keep only the last N prompt tokens (N ≥ 1)
 *   skip_special_tokens   false: control tokens' text is in the output
 *   spaces_between_special_tokens   accepted: pieces are joined as they are, never spaced
 *   request_id            the response's id is the kind's prefix and it (an X-Request-Id
 *                         header wins over it, as in vLLM)
 *   suffix                refused (vLLM: "suffix is not currently supported")
 *   use_beam_search: true, logits_processors, priority ≠ 0   refused: kvserve has no beam
 *                         search, no loadable logits processors, no priority scheduling
 *                         (vLLM without --scheduling-policy priority refuses a priority too);
 *                         length_penalty (beam search only) is accepted
 *
 * Every other top-level key that no parser reads is collected into r->ignored, so the access
 * log can name what a client sent in vain (fields are ignored, not refused, as vLLM does).
 * Called by openai.c's parser; the response helpers by the builders of oai_response.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai/internal.h"

/* Top-level keys some parser reads. A new request field goes here too, or the access log at -v
 * calls it ignored. */
static const char *const known_fields[] = {
    "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "n", "best_of",
    "stream", "stream_options", "logprobs", "top_logprobs", "echo", "return_tokens_as_token_ids",
    "stop", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "min_tokens", "ignore_eos", "seed", "logit_bias", "response_format",
    "tools", "add_generation_prompt", "stop_token_ids", "include_stop_str_in_output",
    "allowed_token_ids", "bad_words", "prompt_logprobs", "truncate_prompt_tokens", "suffix",
    "guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs",
    "grammar", "json_schema",
    "tool_choice", "parallel_tool_calls", "functions", "function_call", "chat_template",
    "chat_template_kwargs", "add_special_tokens", "skip_special_tokens",
    "spaces_between_special_tokens", "use_beam_search", "length_penalty", "priority",
    "logits_processors", "request_id",
};

const char *const *oai_request_fields(size_t *n)
{
    *n = sizeof known_fields / sizeof known_fields[0];
    return known_fields;
}

/* An array of token ids below n_vocab into a malloc'd list. Absent/null leaves *ids NULL. */
static int ids_field(const cJSON *root, const char *name, int n_vocab, int allow_empty,
                     int32_t **ids, int *n, oai_error *e)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!a || cJSON_IsNull(a)) return 0;
    if (!cJSON_IsArray(a)) return oai__bad_type(e, name, "an array of integer token ids");
    int k = cJSON_GetArraySize(a);
    if (k == 0) return allow_empty ? 0 : oai__bad_value(e, name, "must not be empty");
    int32_t *v = malloc(sizeof *v * (size_t)k);
    if (!v) return oai__oom(e);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, a)
    {
        if (!cJSON_IsNumber(t) || t->valuedouble != (double)(long long)t->valuedouble) {
            free(v);
            return oai__bad_type(e, name, "an array of integer token ids");
        }
        if (t->valuedouble < 0 || t->valuedouble >= n_vocab) {
            free(v);
            return oai_fail(e, 400, "invalid_request_error", "invalid_value", name,
                            "'%s' has token id %.0f outside the vocabulary [0, %d)", name,
                            t->valuedouble, n_vocab);
        }
        v[i++] = (int32_t)t->valuedouble;
    }
    *ids = v;
    *n = k;
    return 0;
}

static int bad_words_field(const cJSON *root, oai_request *r, oai_error *e)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "bad_words");
    if (!a || cJSON_IsNull(a)) return 0;
    if (!cJSON_IsArray(a)) return oai__bad_type(e, "bad_words", "an array of strings");
    int k = cJSON_GetArraySize(a);
    if (k == 0) return 0;
    r->bad_words = calloc((size_t)k, sizeof *r->bad_words);
    if (!r->bad_words) return oai__oom(e);
    const cJSON *t;
    cJSON_ArrayForEach(t, a)
    {
        if (!cJSON_IsString(t)) return oai__bad_type(e, "bad_words", "an array of strings");
        if (!(r->bad_words[r->n_bad_words++] = strdup(t->valuestring))) return oai__oom(e);
    }
    return 0;
}

int oai__unknown_keys(const cJSON *root, const char *const *fields, size_t n_fields, char **out, oai_error *e)
{
    size_t len = 0;
    const cJSON *it;
    for (int pass = 0; pass < 2; pass++) {
        size_t o = 0;
        cJSON_ArrayForEach(it, root)
        {
            int known = 0;
            for (size_t k = 0; k < n_fields && !known; k++) known = !strcmp(it->string, fields[k]);
            if (known) continue;
            size_t n = strlen(it->string);
            if (pass) {
                if (o) (*out)[o++] = ',';
                memcpy(*out + o, it->string, n);
            }
            o += n + (pass ? 0 : 1);
        }
        if (!pass) {
            len = o;
            if (!len) return 0;
            if (!(*out = malloc(len))) return oai__oom(e);
        } else {
            (*out)[o] = 0;
        }
    }
    return 0;
}

int oai__dialect_finish(cJSON *root, cJSON *chat, oai_dialect *d, const char *const *fields, size_t n_fields, int rc,
                        const oai_limits *lim, oai_request *out, oai_error *e)
{
    char *ignored = NULL, *text = NULL;
    if (!rc) rc = oai__unknown_keys(root, fields, n_fields, &ignored, e);
    if (!rc && !(text = cJSON_PrintUnformatted(chat))) rc = oai__oom(e);
    cJSON_Delete(chat);
    cJSON_Delete(root);
    if (!rc) rc = oai_parse(OAI_CHAT, text, strlen(text), lim, out, e);
    free(text);
    if (rc) {
        free(ignored);
        oai_dialect_free(d);
        return rc;
    }
    free(out->ignored);
    out->ignored = ignored;
    out->dialect = d;
    return 0;
}

/* The names of unread top-level keys, comma-separated, into r->ignored (NULL when none). */
static int note_ignored(const cJSON *root, oai_request *r, oai_error *e)
{
    return oai__unknown_keys(root, known_fields, sizeof known_fields / sizeof known_fields[0], &r->ignored, e);
}

/* vLLM fields asking for what kvserve does not have: a 400 naming it, never a silent default. */
static int unsupported_fields(const cJSON *root, int kind, oai_error *e)
{
    int rc, beam = 0, spaces = 1, priority = 0;
    const cJSON *sfx = cJSON_GetObjectItemCaseSensitive(root, "suffix");
    if (kind == OAI_COMPLETION && sfx && !cJSON_IsNull(sfx))
        return oai_fail(e, 400, "invalid_request_error", "invalid_value", "suffix",
                        "suffix is not currently supported");
    if ((rc = oai__get_bool(root, "use_beam_search", &beam, e))) return rc;
    if (beam)
        return oai_fail(e, 400, "invalid_request_error", "invalid_value", "use_beam_search",
                        "beam search is not supported by this server");
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "length_penalty");
    if (lp && !cJSON_IsNull(lp) && !cJSON_IsNumber(lp)) return oai__bad_type(e, "length_penalty", "a number");
    if ((rc = oai__get_bool(root, "spaces_between_special_tokens", &spaces, e))) return rc;
    if ((rc = oai__get_int(root, "priority", -(1 << 30), 1 << 30, &priority, e))) return rc;
    if (priority)
        return oai_fail(e, 400, "invalid_request_error", "invalid_value", "priority",
                        "Got priority %d but Priority scheduling is not enabled.", priority);
    const cJSON *lps = cJSON_GetObjectItemCaseSensitive(root, "logits_processors");
    if (lps && !cJSON_IsNull(lps) && (!cJSON_IsArray(lps) || cJSON_GetArraySize(lps) > 0))
        return oai_fail(e, 400, "invalid_request_error", "invalid_value", "logits_processors",
                        "logits processors are not supported by this server");
    return 0;
}

int oai__parse_vllm(const cJSON *root, const oai_limits *lim, oai_request *r, oai_error *e)
{
    int rc;
    smp_params *p = &r->sampling;
    if ((rc = unsupported_fields(root, r->kind, e))) return rc;
    r->skip_special = 1;
    if ((rc = oai__get_bool(root, "skip_special_tokens", &r->skip_special, e))) return rc;
    const cJSON *rid = cJSON_GetObjectItemCaseSensitive(root, "request_id");
    if (rid && !cJSON_IsNull(rid)) {
        if (!cJSON_IsString(rid)) return oai__bad_type(e, "request_id", "a string");
        size_t n = strlen(rid->valuestring);
        if (n == 0 || n > OAI_MAX_REQUEST_ID)
            return oai_fail(e, 400, "invalid_request_error", "invalid_value", "request_id",
                            "'request_id' must have 1 to %d bytes", OAI_MAX_REQUEST_ID);
        if (!(r->request_id = strdup(rid->valuestring))) return oai__oom(e);
    }
    if ((rc = oai__get_bool(root, "include_stop_str_in_output", &r->include_stop_str, e))) return rc;
    if ((rc = ids_field(root, "stop_token_ids", lim->n_vocab, 1, &p->stop_ids, &p->n_stop_ids, e)))
        return rc;
    if ((rc = ids_field(root, "allowed_token_ids", lim->n_vocab, 0, &p->allowed_ids, &p->n_allowed, e)))
        return rc;
    if ((rc = bad_words_field(root, r, e))) return rc;
    if ((rc = oai__get_int(root, "prompt_logprobs", 0, SMP_MAX_LOGPROBS, &r->prompt_logprobs, e)))
        return rc;
    if (r->prompt_logprobs > 0 && r->stream)
        return oai__bad_value(e, "prompt_logprobs", "is not available when 'stream' is true");
    if ((rc = oai__get_int(root, "truncate_prompt_tokens", 1, 1 << 30, &r->truncate_prompt_tokens, e)))
        return rc;
    return note_ignored(root, r, e);
}

void oai__free_vllm(oai_request *r)
{
    for (int i = 0; r->bad_words && i < r->n_bad_words; i++) free(r->bad_words[i]);
    free(r->bad_words);
    free(r->ignored);
    free(r->request_id);
    r->bad_words = NULL;
    r->ignored = NULL;
    r->request_id = NULL;
    r->n_bad_words = 0;
}

/* ---- response fields ----------------------------------------------------------------------- */

void oai__add_stop_reason(cJSON *choice, const oai_resp *r, const oai_choice *c, int finish)
{
    if (finish == ENGINE_FINISH_STOP && c->stop_kind == OAI_STOP_STR && r->stop)
        cJSON_AddStringToObject(choice, "stop_reason", r->stop[c->stop_value]);
    else if (finish == ENGINE_FINISH_STOP && c->stop_kind == OAI_STOP_TOKEN)
        cJSON_AddNumberToObject(choice, "stop_reason", c->stop_value);
    else
        cJSON_AddNullToObject(choice, "stop_reason");
}

static void add_entry(cJSON *d, const oai_resp *r, int32_t id, float lp, int rank)
{
    char key[16];
    snprintf(key, sizeof key, "%d", (int)id);
    if (cJSON_GetObjectItemCaseSensitive(d, key)) return;
    cJSON *o = cJSON_AddObjectToObject(d, key);
    cJSON_AddNumberToObject(o, "logprob", lp);
    cJSON_AddNumberToObject(o, "rank", rank);
    cJSON_AddItemToObject(o, "decoded_token", oai__token_string(r, id, NULL, NULL));
}

cJSON *oai__prompt_logprobs_json(const oai_resp *r, const oai_lp *lps, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        const oai_lp *l = &lps[i];
        if (!l->has_logprob) {
            cJSON_AddItemToArray(a, cJSON_CreateNull());
            continue;
        }
        cJSON *d = cJSON_CreateObject();
        add_entry(d, r, l->r.token, l->r.logprob, l->r.rank);
        int k = l->r.n_top < r->prompt_logprobs ? l->r.n_top : r->prompt_logprobs;
        for (int j = 0; j < k; j++) add_entry(d, r, l->r.top_ids[j], l->r.top_logprobs[j], j + 1);
        cJSON_AddItemToArray(a, d);
    }
    return a;
}
