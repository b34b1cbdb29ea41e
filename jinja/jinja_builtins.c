/*
 * jinja_builtins.c — the names of the builtin filters and tests (JJ__FILTERS, JJ__TESTS in
 * jinja_internal.h), looked up by the parser, which resolves a filter or test to its index
 * once, and by the `filter` and `test` tests. It holds names only, so those callers need
 * neither the filters nor the tests: select and reject apply tests (jinja_filters.c calls
 * jinja_tests.c), and the `filter` test must not call back into the filters.
 */
#include <string.h>

#include "jinja/jinja_internal.h"

#define NAME(nm, fn) nm,
static const char *const filter_names[] = {JJ__FILTERS(NAME)};
static const char *const test_names[] = {JJ__TESTS(NAME)};
#undef NAME

int jj__filter_index(const char *name)
{
    for (size_t i = 0; i < sizeof filter_names / sizeof filter_names[0]; i++)
        if (!strcmp(filter_names[i], name)) return (int)i;
    return -1;
}

int jj__test_index(const char *name)
{
    for (size_t i = 0; i < sizeof test_names / sizeof test_names[0]; i++)
        if (!strcmp(test_names[i], name)) return (int)i;
    return -1;
}
