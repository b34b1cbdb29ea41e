/*
 * oai_error.c — the OpenAI error object of a request error (oai_error, openai.h): oai_fail fills
 * it, the shorthands give the 400s and the 500 every parser of openai/ writes, and
 * oai_error_json renders it as the response body. The bottom of openai/: it calls no other file
 * of the folder.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/utf8.h"
#include "server/openai/internal.h"

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

int oai__bad_type(oai_error *e, const char *param, const char *want)
{
    return oai_fail(e, 400, ERR_INVALID, "invalid_type", param, "'%s' must be %s", param, want);
}

int oai__bad_value(oai_error *e, const char *param, const char *what)
{
    return oai_fail(e, 400, ERR_INVALID, "invalid_value", param, "'%s' %s", param, what);
}

int oai__oom(oai_error *e)
{
    return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
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
