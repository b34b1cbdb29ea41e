/*
 * cmd_generate.c — `kvserve generate`.
 */
#include <stdio.h>

#include "cli/cli.h"

int cli_generate(cli_opts *o)
{
    (void)o;
    fprintf(stderr, "kvserve generate: not built yet\n");
    return 2;
}
