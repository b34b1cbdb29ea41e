/*
 * jinja_tests.c — Jinja's builtin tests (`x is defined`, `x is string`, `x is divisibleby 3`,
 * the comparison aliases eq / equalto / gt / …), with Python's notion of each: `number` takes
 * bools, `sequence` takes strings, dicts and Undefined (they have len and []), `iterable` takes
 * Undefined (it iterates as empty), `sameas` is identity. Called by jinja_expr.c (is) and by
 * the select / reject filters.
 */
#include <string.h>

#include "jinja/jinja_internal.h"

typedef int (*test_fn)(jinja_ctx *c, jinja_value v, const jj_callargs *a);

static int given(jinja_value v)
{
    return v.kind != JINJA__MISSING;
}

/* ---- tests -------------------------------------------------------------------------------- */

static jinja_value one_arg(jinja_ctx *c, const jj_callargs *a, const char *nm)
{
    static const char *const params[] = {"other"};
    jinja_value v;
    jj__bind(c, nm, params, 1, a, &v);
    if (!given(v)) jj__raise(c, JJ_E_TYPE, "test %s() missing 1 required positional argument", nm);
    return v;
}

static int no_args(jinja_ctx *c, const jj_callargs *a, const char *nm)
{
    jj__bind(c, nm, NULL, 0, a, NULL);
    return 0;
}

#define TEST(fn, nm, expr)                                                                         \
    static int fn(jinja_ctx *c, jinja_value v, const jj_callargs *a)                               \
    {                                                                                              \
        no_args(c, a, nm);                                                                         \
        return (expr);                                                                             \
    }

static int is_num(jinja_value v)
{
    return v.kind == JINJA_INT || v.kind == JINJA_FLOAT || v.kind == JINJA_BOOL;
}

static int mod2(jinja_ctx *c, jinja_value v)
{
    jinja_value r = jj__binop(c, JJ_OP_MOD, v, jinja_int(2));
    return jj__equal(r, jinja_int(1));
}

TEST(t_defined, "defined", v.kind != JINJA_UNDEFINED)
TEST(t_undefined, "undefined", v.kind == JINJA_UNDEFINED)
TEST(t_none, "none", v.kind == JINJA_NONE)
TEST(t_boolean, "boolean", v.kind == JINJA_BOOL)
TEST(t_false, "false", v.kind == JINJA_BOOL && !v.b)
TEST(t_true, "true", v.kind == JINJA_BOOL && v.b)
TEST(t_integer, "integer", v.kind == JINJA_INT)
TEST(t_float, "float", v.kind == JINJA_FLOAT)
TEST(t_number, "number", is_num(v))
TEST(t_string, "string", v.kind == JINJA_STR)
TEST(t_mapping, "mapping", v.kind == JINJA_DICT)
TEST(t_escaped, "escaped", v.kind == JINJA_STR && (v.flags & JINJA_F_MARKUP))
TEST(t_callable, "callable",
     v.kind == JINJA_CALLABLE || v.kind == JINJA_UNDEFINED || v.kind == JINJA_LOOP)
TEST(t_odd, "odd", mod2(c, v))
TEST(t_even, "even", !mod2(c, v))
TEST(t_lower, "lower", jj__str_cased(jj__plain_str(c, v), 0))
TEST(t_upper, "upper", jj__str_cased(jj__plain_str(c, v), 1))

static int t_sequence(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    no_args(c, a, "sequence");
    if (v.kind == JINJA_LIST)
        return v.l->type == JJ_L_LIST || v.l->type == JJ_L_TUPLE || v.l->type == JJ_L_RANGE;
    return v.kind == JINJA_STR || v.kind == JINJA_DICT || v.kind == JINJA_UNDEFINED;
}

static int t_iterable(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    no_args(c, a, "iterable");
    return v.kind == JINJA_LIST || v.kind == JINJA_STR || v.kind == JINJA_DICT ||
           v.kind == JINJA_UNDEFINED || v.kind == JINJA_LOOP;
}

static int t_divisibleby(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jinja_value n = one_arg(c, a, "divisibleby");
    return jj__equal(jj__binop(c, JJ_OP_MOD, v, n), jinja_int(0));
}

static int t_sameas(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    jinja_value o = one_arg(c, a, "sameas");
    if (v.kind != o.kind) return 0;
    switch (v.kind) {
    case JINJA_NONE:
    case JINJA_UNDEFINED:
        return v.kind == JINJA_NONE || v.u == o.u;
    case JINJA_BOOL:
        return v.b == o.b;
    case JINJA_INT:
        return v.i == o.i && v.i >= -5 && v.i <= 256;
    case JINJA_FLOAT:
        return 0;
    default:
        return v.s == o.s;
    }
}

static int t_in(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    return jj__contains(c, one_arg(c, a, "in"), v);
}

static int t_filter(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    no_args(c, a, "filter");
    return v.kind == JINJA_STR && jj__filter_index(v.s->s) >= 0;
}

static int t_test(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    no_args(c, a, "test");
    return v.kind == JINJA_STR && jj__test_index(v.s->s) >= 0;
}

#define CMPTEST(fn, nm, op)                                                                        \
    static int fn(jinja_ctx *c, jinja_value v, const jj_callargs *a)                               \
    {                                                                                              \
        jinja_value o = one_arg(c, a, nm);                                                         \
        return jj__compare(c, v, o) op 0;                                                          \
    }
CMPTEST(t_gt, "gt", >)
CMPTEST(t_ge, "ge", >=)
CMPTEST(t_lt, "lt", <)
CMPTEST(t_le, "le", <=)

static int t_eq(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    return jj__equal(v, one_arg(c, a, "eq"));
}

static int t_ne(jinja_ctx *c, jinja_value v, const jj_callargs *a)
{
    return !jj__equal(v, one_arg(c, a, "ne"));
}

#define TEST_ENTRY(nm, fn) {nm, fn},
static const struct {
    const char *name;
    test_fn fn;
} tests[] = {JJ__TESTS(TEST_ENTRY)};

int jj__apply_test(jinja_ctx *c, int idx, jinja_value v, const jj_callargs *a)
{
    return tests[idx].fn(c, v, a);
}
