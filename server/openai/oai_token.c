/*
 * oai_token.c — how a token and a finish read in a response: a token's text as the logprobs show
 * it (its bytes with invalid UTF-8 as U+FFFD, or "token_id:N" with return_tokens_as_token_ids),
 * the characters a text or a token adds to a completion's text_offset, and the names of
 * finish_reason. It calls no other file of openai/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/utf8.h"
#include "server/openai/internal.h"

const char *oai_finish_name(int finish)
{
    switch (finish) {
    case ENGINE_FINISH_STOP: return "stop";
    case ENGINE_FINISH_LENGTH: return "length";
    default: return NULL;
    }
}

cJSON *oai__token_string(const oai_resp *r, int32_t id, unsigned char *raw, int *raw_len)
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

size_t oai_text_chars(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

size_t oai_token_chars(const oai_resp *r, int32_t id)
{
    cJSON *t = oai__token_string(r, id, NULL, NULL);
    size_t k = oai_text_chars(t->valuestring, strlen(t->valuestring));
    cJSON_Delete(t);
    return k;
}

size_t oai_lp_chars(const oai_resp *r, const oai_lp *lp)
{
    cJSON *t = oai__token_string(r, lp->r.token, NULL, NULL);
    const char *s = t->valuestring;
    size_t k = oai_text_chars(s, strlen(s));
    if (lp->skip_space && s[0] == ' ' && !r->token_ids) k--;
    cJSON_Delete(t);
    return k;
}
