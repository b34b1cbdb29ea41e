/*
 * test_jinja.c — the Jinja interpreter (jinja/) on its own: constructs rendered
 * against outputs Python's Jinja2 (3.1, transformers' sandboxed environment) gave for them,
 * errors of the right class, syntax errors with their line, the sandbox's refusals, the bounds
 * on output / steps / depth / memory, dicts driven by random operations against a brute-force
 * model, JSON round trips of random values, and one template rendered from several threads.
 * (The 54 shared templates and their 1080 cases run in test_chat.c, through render-chat.)
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja/jinja.h"
#include "jinja/jinja_internal.h"
#include "base/rng.h"

typedef struct tj_case {
    const char *tmpl;
    const char *expected; /* NULL: an error of class error_kind */
    const char *error_kind;
} tj_case;

/* Expected outputs recorded from Python's Jinja2 with transformers' environment. */
static const char tj_ctx[] =
    "{\"l\": [3, 1, 2], \"d\": {\"b\": 2, \"a\": 1}, \"s\": \"  Hello World, foo-bar  \", \"n\": "
    "7, \"u\": \"\\u00fcn\\u00ef \\u65e5\\u672c\", \"people\": [{\"name\": \"bob\", \"age\": 30}, "
    "{\"name\": \"Al\", \"age\": 25}, {\"name\": \"cy\", \"age\": 30}], \"msgs\": [{\"role\": "
    "\"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
    "[{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1.0, \"b\": [true, null]}}}]}]}";
static const tj_case tj_cases[] = {
    {"a\n  {% if true %}\n    b\n  {% endif %}\nc\n", "a\n    b\nc", NULL},
    {"a  {% if true %}b{% endif %}  \n  {{ 1 }}  {% if 1 %}x{% endif %}\n", "a  b  \n  1  x", NULL},
    {"  {%+ if true %}x{% endif %}\n{%- if true -%}  y  {%- endif -%}\n z", "  xyz", NULL},
    {"{# c #}\n  {# c2 #}\nA {#- c3 -#} B\n{#+ c4 +#}\nC", "AB\n\nC", NULL},
    {"x\r\ny\rz\r\n", "x\ny\nz", NULL},
    {"{% set x = 1 %}\n{{ x }}\n{% raw %}\n  {{ y }}\n{% endraw %}\nz", "1\n\n  {{ y }}\nz", NULL},
    {"{{ d }}|{{ d|dictsort }}|{{ d.items()|list }}|{{ d|tojson }}|{{ "
     "msgs[1].tool_calls[0].function.arguments|tojson }}",
     "{'b': 2, 'a': 1}|[('a', 1), ('b', 2)]|[('b', 2), ('a', 1)]|{\"b\": 2, \"a\": 1}|{\"a\": 1.0, "
     "\"b\": [true, null]}",
     NULL},
    {"{{ [1,'a',none,true,1.0,{'k':[()]},(1,)] }}|{{ 1e20 }}|{{ 1.5e-7 }}|{{ 0.1+0.2 }}|{{ 1e16 "
     "}}|{{ ['it\\'s', \"q\\\"\", 'both\\'\"'] }}",
     "[1, 'a', None, True, 1.0, {'k': [()]}, "
     "(1,)]|1e+20|1.5e-07|0.30000000000000004|1e+16|[\"it's\", 'q\"', 'both\\'\"']",
     NULL},
    {"{{ s.split() }}|{{ s.split(',') }}|{{ s.split(None, 1) }}|{{ s.rsplit(None, 1) }}|{{ "
     "s.strip().title() }}|{{ s|title }}|{{ s|trim|capitalize }}",
     "['Hello', 'World,', 'foo-bar']|['  Hello World', ' foo-bar  ']|['Hello', 'World, foo-bar  "
     "']|['  Hello World,', 'foo-bar']|Hello World, Foo-Bar|  Hello World, Foo-Bar  |Hello world, "
     "foo-bar",
     NULL},
    {"{{ u|length }}|{{ u[1] }}|{{ u[-2:] }}|{{ u[::-1] }}|{{ u.upper() }}|{{ u|tojson }}|{{ "
     "u|tojson(ensure_ascii=true) }}",
     "6|n|\346\227\245\346\234\254|\346\234\254\346\227\245 \303\257n\303\274|\303\234N\303\217 "
     "\346\227\245\346\234\254|\"\303\274n\303\257 \346\227\245\346\234\254\"|\"\\u00fcn\\u00ef "
     "\\u65e5\\u672c\"",
     NULL},
    {"{{ n // 2 }} {{ -n // 2 }} {{ -n % 3 }} {{ n / 2 }} {{ n ** 2 }} {{ 2 ** -1 }} {{ 1 < 2 < 3 "
     "}} {{ 'a' in 'cat' }} {{ 9 not in l }}",
     "3 -4 2 3.5 49 0.5 True True True", NULL},
    {"{{ people|selectattr('age','equalto',30)|map(attribute='name')|join('/') }}|{{ "
     "people|sort(attribute='age,name')|map(attribute='name')|list }}|{{ l|select('odd')|list "
     "}}|{{ [1,1,2,'a','A']|unique|list }}",
     "bob/cy|['Al', 'bob', 'cy']|[3, 1]|[1, 2, 'a']", NULL},
    {"{% set ns = namespace(x=0) %}{% for i in range(5) %}{% set ns.x = ns.x + i %}{% endfor %}{{ "
     "ns.x }}|{% set y = 1 %}{% for i in [1,2] %}{% set y = y + i %}{{ y }}{% endfor %}{{ y }}",
     "10|231", NULL},
    {"{% macro m(a, b=2) %}[{{ a }}{{ b }}{{ varargs }}{{ kwargs }}]{% endmacro %}{{ m(1) }}{{ "
     "m(1, 3, 4) }}{{ m(1, q=9) }}{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% "
     "endcall %}",
     "[12(){}][13(4,){}][12(){'q': 9}]<in>", NULL},
    {"{% filter upper %}up{% endfilter %}|{% set blk %} b {% endset %}[{{ blk }}]|{% for x in [] "
     "%}x{% else %}empty{% endfor %}|{% for x in l if x > 1 %}{{ loop.index }}/{{ loop.length }}{% "
     "endfor %}",
     "UP|[ b ]|empty|1/22/2", NULL},
    {"{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.revindex }}-{{ "
     "loop.cycle('a','b') }};{% if x == 1 %}{% break %}{% endif %}{% endfor %}",
     "-1-3-a;3-2-2-b;", NULL},
    {"{{ 'y' if n > 30 }}|{{ (n > 3) and 'a' or 'b' }}|{{ x|default('D') }}{{ ''|default('E', "
     "true) }}|{{ 3.7|int }}{{ '42'|int }}{{ 'x'|int(5) }}{{ 2.5|round }}{{ 2.567|round(2) }}",
     "|a|DE|34252.02.57", NULL},
    {"{{ '%s|%5.1f|%-4d|%x' % ('a', 3.14159, 42, 255) }}|{{ '{}-{:>5}-{:.2f}'.format('a', 'b', "
     "2.5) }}|{{ \"a\\nb\"|indent(2, first=true) }}",
     "a|  3.1|42  |ff|a-    b-2.50|  a\n  b", NULL},
    {"{{ ('<'|safe) + '<' }}|{{ '<' + ('&'|safe) }}|{{ ('a'|safe) ~ '<' }}|{{ ('%s'|safe) % '<' "
     "}}|{{ '<a>'|escape }}",
     "<&lt;|&lt;&|a<|&lt;|&lt;a&gt;", NULL},
    {"{{ strftime_now('%Y-%m-%d %d %b %Y') }}|{{ range(1,10,3)|list }}|{{ dict(a=1) }}|{% "
     "generation %}g{% endgeneration %}",
     "2026-01-15 15 Jan 2026|[1, 4, 7]|{'a': 1}|g", NULL},
    {"{{ messages[0] }}", NULL, "UndefinedError"},
    {"{{ x.y }}", NULL, "UndefinedError"},
    {"{{ 'a' + none }}", NULL, "TypeError"},
    {"{{ 'a' + [1] }}", NULL, "TypeError"},
    {"{% for x in none %}{% endfor %}", NULL, "TypeError"},
    {"{{ msgs.append(1) }}", NULL, "SecurityError"},
    {"{{ l|map(attribute='x')|tojson }}", NULL, "TypeError"},
    {"{{ l|select|length }}", NULL, "TypeError"},
    {"{{ d|items|list }}{{ s|items|list }}", NULL, "TypeError"},
    {"{{ raise_exception('stop: ' ~ n) }}", NULL, "raise_exception"},
    {"{% if x %}", NULL, "TemplateSyntaxError"},
    {"{% endfor %}", NULL, "TemplateSyntaxError"},
    {"{{ x | nosuchfilter }}", NULL, "TemplateAssertionError"},
    {"{% if false %}{{ x | nosuchfilter }}{% endif %}ok", "ok", NULL},
    {"{% if true %}{{ x | nosuchfilter }}{% endif %}ok", NULL, "TemplateRuntimeError"},
    {"{{ 1 / 0 }}", NULL, "ZeroDivisionError"},
    {"{% set a, b = [1] %}", NULL, "ValueError"},
    {"{% set d.z = 1 %}", NULL, "TemplateRuntimeError"},
    {"{{ none.x }}{{ none.x.y }}", NULL, "UndefinedError"},
    {"{{ l[10] }}|{{ l[10:] }}|{{ d.zz }}|{{ d.get('zz', 'dflt') }}|{{ x is defined }}{{ x is "
     "sequence }}{{ x|length }}",
     "|[]||dflt|FalseTrue0", NULL},
    {"{% set x = 2.5 %}{{ x[:2] }}", NULL, "TypeError"},
    {"{{ 2.5[:2] }}|{{ (0[:2]|join)|string }}|{{ 2.5[:2] is not eq 3 }}", "||True", NULL},
    {"{{ s|reject('even')|map(attribute='name') is not integer }}|{{ []|truncate(9)|first }}|{{ "
     "'%s' % [1, 2] }}{{ 'abc' % [1] }}",
     "True||[1, 2]abc", NULL},
    {"{{ {'a': 1, 'b': 'x y&'}|urlencode }}|{{ 'a b/c'|urlencode }}|{% for i in range(2) %}{% set "
     "y = [1, 2, 3] %}{{ y.pop() }}{{ y|length }}{% endfor %}",
     "a=1&b=x+y%26|a%20b/c|3232", NULL},
    {"{{ n|unique|reverse }}", NULL, "FilterArgumentError"},
};

/* Renders tmpl with the variables of ctx_json (and the clock at 2026-01-15). Returns the
 * result code; *out is malloc'd on success. */
static int tj_render(const char *tmpl, const char *ctx_json, const jinja_limits *lim, char **out,
                     jinja_error *err)
{
    jinja_tmpl *t = jinja_compile(tmpl, strlen(tmpl), err);
    *out = NULL;
    if (!t) return -EINVAL;
    jinja_ctx *c = jinja_ctx_create(lim);
    cr_assert_not_null(c);
    jinja_value root;
    cr_assert_eq(jinja_json_parse(c, ctx_json, strlen(ctx_json), &root, err), 0, "%s",
                 err->message);
    for (size_t i = 0; i < jinja_len(root); i++)
        cr_assert_eq(jinja_ctx_set(c, jinja_str_bytes(jinja_dict_key_at(root, i), NULL),
                                   jinja_dict_value_at(root, i)),
                     0);
    struct tm now = {.tm_year = 126, .tm_mon = 0, .tm_mday = 15};
    mktime(&now);
    jinja_ctx_set_time(c, &now);
    int rc = jinja_render(t, c, out, NULL, err);
    jinja_ctx_destroy(c);
    jinja_tmpl_destroy(t);
    return rc;
}

Test(jinja, constructs_match_python)
{
    for (size_t i = 0; i < sizeof tj_cases / sizeof tj_cases[0]; i++) {
        const tj_case *k = &tj_cases[i];
        char *out;
        jinja_error err;
        int rc = tj_render(k->tmpl, tj_ctx, NULL, &out, &err);
        if (k->expected) {
            cr_assert_eq(rc, 0, "case %zu %s: %s: %s (line %d)", i, k->tmpl, err.kind, err.message,
                         err.line);
            cr_expect_str_eq(out, k->expected, "case %zu: %s", i, k->tmpl);
        } else {
            cr_assert_neq(rc, 0, "case %zu %s rendered '%s', expected %s", i, k->tmpl,
                          out ? out : "", k->error_kind);
            if (!strcmp(k->error_kind, "TemplateAssertionError"))
                cr_expect(!strcmp(err.kind, k->error_kind) ||
                          !strcmp(err.kind, "TemplateSyntaxError"));
            else
                cr_expect_str_eq(err.kind, k->error_kind, "case %zu %s: %s", i, k->tmpl,
                                 err.message);
        }
        free(out);
    }
}

Test(jinja, syntax_errors_name_their_line)
{
    static const struct {
        const char *tmpl;
        int line;
    } cases[] = {
        {"a\nb\n{% if x %}\nc", 4},
        {"{{ 1 +  }}", 1},
        {"x\n{% for a in %}{% endfor %}", 2},
        {"\n\n{% endif %}", 3},
        {"{{ 'unterminated }}", 1},
        {"{% set 1 = 2 %}", 1},
        {"{% macro m(a=1, b) %}{% endmacro %}", 1},
        {"{{ (1 }}", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jinja_error err;
        jinja_tmpl *t = jinja_compile(cases[i].tmpl, strlen(cases[i].tmpl), &err);
        cr_assert_null(t, "%s compiled", cases[i].tmpl);
        cr_expect_str_eq(err.kind, "TemplateSyntaxError", "%s", cases[i].tmpl);
        cr_expect_eq(err.line, cases[i].line, "%s: line %d, expected %d (%s)", cases[i].tmpl,
                     err.line, cases[i].line, err.message);
        char line[600];
        jinja_error_format(&err, line, sizeof line);
        cr_expect(strstr(line, "line") != NULL, "%s", line);
    }
}

Test(jinja, render_errors_name_line_and_construct)
{
    char *out;
    jinja_error err;
    int rc = tj_render("ok\n{{ 'a' }}\n{{ 'a' + l }}", tj_ctx, NULL, &out, &err);
    cr_assert_eq(rc, -EINVAL);
    cr_expect_str_eq(err.kind, "TypeError");
    cr_expect_eq(err.line, 3);
    cr_expect(strstr(err.message, "concatenate") != NULL, "%s", err.message);
    rc = tj_render("{{ raise_exception('Only user and assistant') }}", tj_ctx, NULL, &out, &err);
    cr_assert_eq(rc, -EINVAL);
    cr_expect_str_eq(err.kind, "raise_exception");
    cr_expect_str_eq(err.message, "Only user and assistant");
    /* what is not implemented names itself and its line */
    static const char *const unsupported[][2] = {
        {"a\n{{ l | groupby('x') }}", "'groupby'"},
        {"a\n{% filter wordwrap %}x{% endfilter %}", "'wordwrap'"},
        {"a\n{{ 'x'.encode() }}", "'encode'"},
        {"a\n{{ cycler(1, 2) }}", "'cycler'"},
        {"a\n{% include 'other' %}", "'include'"},
    };
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        rc = tj_render(unsupported[i][0], tj_ctx, NULL, &out, &err);
        cr_assert_eq(rc, -EINVAL, "%s rendered", unsupported[i][0]);
        cr_expect_eq(err.line, 2, "%s: line %d", unsupported[i][0], err.line);
        cr_expect(strstr(err.message, unsupported[i][1]) != NULL, "%s: %s", unsupported[i][0],
                  err.message);
    }
}

Test(jinja, limits_bound_untrusted_templates)
{
    jinja_limits lim = {.max_output_bytes = 1 << 16,
                        .max_steps = 100000,
                        .max_depth = 20,
                        .max_memory_bytes = 8 << 20};
    static const char *const tmpls[] = {
        "{% for i in range(100000) %}{{ 'xxxxxxxxxx' }}{% endfor %}",                   /* output */
        "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", /* steps */
        "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}",                       /* depth */
        "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s[:60000] "
        "%}{% endfor %}",
        "{{ 'x' * 100000000 }}",
        "{{ range(1000000) | list }}",
    };
    for (size_t i = 0; i < sizeof tmpls / sizeof tmpls[0]; i++) {
        char *out;
        jinja_error err;
        int rc = tj_render(tmpls[i], tj_ctx, &lim, &out, &err);
        cr_expect(rc == -E2BIG || (rc == -EINVAL && !strcmp(err.kind, "OverflowError")),
                  "template %zu: rc %d %s: %s", i, rc, err.kind, err.message);
        cr_expect_null(out);
    }
}

/* ---- dicts against a brute-force model ---------------------------------------------------- */

static jinja_value tj_random_key(jinja_ctx *c, uint64_t *rng)
{
    uint64_t r = rng_splitmix64(rng);
    switch (r % 4) {
    case 0:
        return jinja_int((int64_t)(r >> 8) % 40 - 20);
    case 1:
        return jinja_float((double)((int64_t)(r >> 8) % 40 - 20) / ((r >> 40) % 2 ? 1 : 2));
    case 2:
        return jinja_bool((int)((r >> 8) & 1));
    default: {
        char k[8];
        snprintf(k, sizeof k, "k%u", (unsigned)((r >> 8) % 50));
        return jj__str_cstr(c, k);
    }
    }
}

Test(jinja, dict_random_operations_match_a_model)
{
    uint64_t seed = (uint64_t)time(NULL), rng = seed;
    fprintf(stderr, "jinja dict_random_operations seed %llu\n", (unsigned long long)seed);
    jinja_ctx *c = jinja_ctx_create(NULL);
    jj_catch k = {0};
    c->catch = &k;
    if (setjmp(k.jb)) cr_assert_fail("seed %llu: the interpreter raised", (unsigned long long)seed);
    jinja_value d = jj__dict_new(c, 0);
    jinja_value keys[256], vals[256];
    int n = 0;
    for (int op = 0; op < 3000; op++) {
        jinja_value key = tj_random_key(c, &rng), val = jinja_int(op);
        if (rng_splitmix64(&rng) % 3) {
            jj__dict_set(c, d, key, val);
            int i = 0;
            while (i < n && !jj__equal(keys[i], key))
                i++;
            if (i == n) keys[n++] = key;
            vals[i] = val;
        }
        jj_entry *e = jj__dict_find(c, d, key);
        int i = 0;
        while (i < n && !jj__equal(keys[i], key))
            i++;
        cr_assert_eq(e != NULL, i < n, "seed %llu op %d", (unsigned long long)seed, op);
        if (e) cr_assert_eq(e->v.i, vals[i].i, "seed %llu op %d", (unsigned long long)seed, op);
        jj__dict_check(d);
        cr_assert_eq(jinja_len(d), (size_t)n);
        for (int j = 0; j < n; j++)
            cr_assert(jj__equal(jinja_dict_key_at(d, (size_t)j), keys[j]), "insertion order");
    }
    c->catch = NULL;
    jinja_ctx_destroy(c);
}

/* ---- JSON ------------------------------------------------------------------------------- */

static jinja_value tj_random_value(jinja_ctx *c, uint64_t *rng, int depth)
{
    uint64_t r = rng_splitmix64(rng);
    int kind = (int)(r % (depth > 3 ? 6 : 8));
    jinja_value v;
    switch (kind) {
    case 0:
        return jinja_none();
    case 1:
        return jinja_bool((int)((r >> 8) & 1));
    case 2:
        return jinja_int((int64_t)(r >> 3) - (int64_t)(r >> 2));
    case 3:
        return jinja_float(((double)(int64_t)(r >> 11) - 4e15) / (double)(1 + (r >> 60)) * 1e-3);
    case 4:
    case 5: {
        static const char *const pieces[] = {"a",    "\"", "\\",   "\n", "\t", "é",
                                             "日本", "😀",  "\x01", "/",  " "};
        char text[64] = "";
        for (int i = 0; i < (int)((r >> 8) % 6); i++)
            strcat(text, pieces[(r >> (12 + 4 * i)) % (sizeof pieces / sizeof pieces[0])]);
        cr_assert_eq(jinja_str(c, text, strlen(text), &v), 0);
        return v;
    }
    case 6:
        cr_assert_eq(jinja_list(c, &v), 0);
        for (int i = 0; i < (int)((r >> 8) % 4); i++)
            cr_assert_eq(jinja_list_push(c, v, tj_random_value(c, rng, depth + 1)), 0);
        return v;
    default:
        cr_assert_eq(jinja_dict(c, &v), 0);
        for (int i = 0; i < (int)((r >> 8) % 4); i++) {
            char key[16];
            snprintf(key, sizeof key, "k%d\"%d", i, (int)((r >> 20) % 5));
            cr_assert_eq(jinja_dict_set(c, v, key, tj_random_value(c, rng, depth + 1)), 0);
        }
        return v;
    }
}

Test(jinja, json_round_trips_random_values)
{
    uint64_t seed = (uint64_t)time(NULL) ^ 0x5eed, rng = seed;
    fprintf(stderr, "jinja json_round_trips seed %llu\n", (unsigned long long)seed);
    for (int it = 0; it < 300; it++) {
        jinja_ctx *c = jinja_ctx_create(NULL);
        jinja_value v = tj_random_value(c, &rng, 0), back;
        char *a = jinja_json_dump(v, it & 1);
        cr_assert_not_null(a);
        jinja_error err;
        cr_assert_eq(jinja_json_parse(c, a, strlen(a), &back, &err), 0, "seed %llu: %s: %s",
                     (unsigned long long)seed, a, err.message);
        char *b = jinja_json_dump(back, it & 1);
        cr_assert_str_eq(a, b, "seed %llu", (unsigned long long)seed);
        free(a);
        free(b);
        jinja_ctx_destroy(c);
    }
}

Test(jinja, json_reader_keeps_order_and_int_float)
{
    static const char in[] =
        "{\"z\": 1, \"a\": 1.0, \"m\": [1e3, -0, 2.50], \"z\": \"\\u00e9\\ud83d\\ude00\"}";
    jinja_ctx *c = jinja_ctx_create(NULL);
    jinja_value v;
    jinja_error err;
    cr_assert_eq(jinja_json_parse(c, in, strlen(in), &v, &err), 0, "%s", err.message);
    char *out = jinja_json_dump(v, 0);
    cr_expect_str_eq(out, "{\"z\": \"é😀\", \"a\": 1.0, \"m\": [1000.0, 0, 2.5]}");
    free(out);
    static const char *const bad[] = {"{", "[1,]", "{\"a\" 1}", "tru", "\"x", "1 2", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(jinja_json_parse(c, bad[i], strlen(bad[i]), &v, &err), -EINVAL, "%s", bad[i]);
        cr_expect_str_eq(err.kind, "ValueError");
    }
    jinja_ctx_destroy(c);
}

/* ---- threads ------------------------------------------------------------------------------ */

typedef struct tj_thread {
    const jinja_tmpl *t;
    char *out;
} tj_thread;

static void *tj_thread_main(void *arg)
{
    tj_thread *th = arg;
    for (int i = 0; i < 50; i++) {
        jinja_ctx *c = jinja_ctx_create(NULL);
        jinja_value v;
        jinja_error err;
        jinja_json_parse(c, tj_ctx, strlen(tj_ctx), &v, &err);
        jinja_ctx_set(c, "people", jinja_dict_get(v, "people"));
        free(th->out);
        th->out = NULL;
        jinja_render(th->t, c, &th->out, NULL, &err);
        jinja_ctx_destroy(c);
    }
    return NULL;
}

Test(jinja, one_template_renders_from_many_threads)
{
    const char *src =
        "{% for p in people|sort(attribute='name') %}{{ p.name }}:{{ p.age }};{% endfor %}";
    jinja_error err;
    jinja_tmpl *t = jinja_compile(src, strlen(src), &err);
    cr_assert_not_null(t);
    pthread_t th[4];
    tj_thread a[4] = {{t, NULL}, {t, NULL}, {t, NULL}, {t, NULL}};
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, tj_thread_main, &a[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_expect_str_eq(a[i].out, "Al:25;bob:30;cy:30;");
        free(a[i].out);
    }
    jinja_tmpl_destroy(t);
}
