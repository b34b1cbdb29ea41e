/*
 * cmd_serve.c — `kvserve serve`.
 */
#include <stdio.h>

#include "cli/cli.h"

int cli_serve(cli_opts *o)
{
    (void)o;
    fprintf(stderr, "kvserve serve: not built yet\n");
    return 2;
}
