/*
 * oai_body.c — the checks a request body passes before cJSON reads it: valid UTF-8 throughout,
 * no raw control character inside a string (RFC 8259 wants them escaped), and no NUL at all,
 * raw or as the escape \u0000. cJSON keeps strings NUL-terminated, so a NUL would silently cut a
 * prompt, a message or a stop string where it stands; refusing it is the only honest answer.
 * Linear in the body, one pass after the UTF-8 check; called by every parser in openai.c.
 */
#include <stddef.h>

#include "model/utf8.h"
#include "server/openai/openai.h"

static int hex4(const char *p, const char *end, unsigned *out)
{
    if (end - p < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

int oai_validate_body(const char *body, size_t len, oai_error *e)
{
    if (!utf8_is_valid(body, len))
        return oai_fail(e, 400, "invalid_request_error", "invalid_json", NULL,
                        "The request body is not valid UTF-8");
    const char *p = body, *end = body + len;
    int in_str = 0, depth = 0, closed = 0; /* closed: the top-level object or array ended */
    for (; p < end; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == 0)
            return oai_fail(e, 400, "invalid_request_error", "invalid_json", NULL,
                            "The request body contains a NUL byte");
        if (!in_str) {
            /* One JSON value and nothing after it but white space ({...}xyz, {...}{...}: 400,
             * where the parser would read the first value and ignore the rest). */
            if (closed && c != ' ' && c != '\t' && c != '\n' && c != '\r')
                return oai_fail(e, 400, "invalid_request_error", "invalid_json", NULL,
                                "The request body has data after its JSON value");
            if (c == '{' || c == '[') depth++;
            else if ((c == '}' || c == ']') && depth > 0 && --depth == 0) closed = 1;
            in_str = c == '"';
            continue;
        }
        if (c == '"') {
            in_str = 0;
        } else if (c < 0x20) {
            return oai_fail(e, 400, "invalid_request_error", "invalid_json", NULL,
                            "The request body has an unescaped control character in a string");
        } else if (c == '\\' && p + 1 < end) {
            unsigned v;
            if (p[1] == 'u' && !hex4(p + 2, end, &v) && v == 0)
                return oai_fail(e, 400, "invalid_request_error", "invalid_value", NULL,
                                "Strings must not contain NUL characters (\\u0000)");
            p++; /* the escaped character */
        }
    }
    return 0;
}
