/*
 * toolcall_tagged.c — the tagged call syntaxes of the output parsers (toolcall.c): calls
 * written between special-token markers, with the name before a separator and the arguments
 * after it.
 *
 *   deepseek_v3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
 *                ```json
 *                {…}
 *                ```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>        (DeepSeek V3, R1)
 *                <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>  (V3.1)
 *   kimi_k2      <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
 *                <|tool_call_argument_begin|>{…}<|tool_call_end|>…<|tool_calls_section_end|>
 *
 * Only the marker table and the reading of one complete call body live here; the stage that
 * finds the markers in streamed text is toolcall.c's.
 */
#include <string.h>

#include "server/toolcall/internal.h"

static const tc_tags deepseek = {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
                                 "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"};
static const tc_tags kimi = {"<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                             "<|tool_call_argument_begin|>", "<|tool_call_end|>",
                             "<|tool_calls_section_end|>"};

const tc_tags *tc__tags(int syntax)
{
    return syntax == TC_DEEPSEEK ? &deepseek : syntax == TC_KIMI ? &kimi : NULL;
}

/* s[*a..*b) without surrounding white space. */
static void trim(const char *s, size_t *a, size_t *b)
{
    while (*a < *b && tc__is_ws(s[*a]))
        (*a)++;
    while (*b > *a && tc__is_ws(s[*b - 1]))
        (*b)--;
}

/* s[*a..*b) without a ``` fence around it (its language word included). */
static void unfence(const char *s, size_t *a, size_t *b)
{
    if (*b - *a < 6 || memcmp(s + *a, "```", 3)) return;
    const char *nl = memchr(s + *a, '\n', *b - *a);
    if (!nl) return;
    size_t e = *b;
    if (!memcmp(s + e - 3, "```", 3)) e -= 3;
    *a = (size_t)(nl - s) + 1;
    *b = e;
    trim(s, a, b);
}

int tc__tagged_body(const char *s, size_t n, const tc_tags *t, size_t *na, size_t *nb,
                    size_t *aa, size_t *ab)
{
    const char *sep = tc__find(s, n, t->sep);
    if (!sep) return 0;
    size_t a = 0, b = (size_t)(sep - s);
    *aa = b + strlen(t->sep);
    *ab = n;
    trim(s, &a, &b);
    if (b - a == 8 && !memcmp(s + a, "function", 8)) { /* V3: the name is on the line after */
        size_t x = *aa;
        while (x < n && (s[x] == ' ' || s[x] == '\t'))
            x++;
        const char *nl = memchr(s + x, '\n', n - x);
        a = x;
        b = nl ? (size_t)(nl - s) : n;
        *aa = b;
        trim(s, &a, &b);
    }
    /* Kimi: functions.NAME:INDEX */
    if (b - a > 10 && !memcmp(s + a, "functions.", 10)) a += 10;
    size_t c = b;
    while (c > a && s[c - 1] >= '0' && s[c - 1] <= '9')
        c--;
    if (c < b && c > a + 1 && s[c - 1] == ':') b = c - 1;
    for (size_t i = a; i < b; i++)
        if (tc__is_ws(s[i]) || s[i] == '<' || s[i] == '{') return 0;
    if (a == b) return 0;
    *na = a;
    *nb = b;
    trim(s, aa, ab);
    unfence(s, aa, ab);
    return 1;
}
