/*
 * cmd_bench.c — `kvserve bench`.
 */
#include <stdio.h>

#include "cli/cli.h"

int cli_bench(cli_opts *o)
{
    (void)o;
    fprintf(stderr, "kvserve bench: not built yet\n");
    return 2;
}
