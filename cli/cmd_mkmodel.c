/*
 * cmd_mkmodel.c — `kvserve mkmodel`.
 */
#include <stdio.h>

#include "cli/cli.h"

int cli_mkmodel(cli_opts *o)
{
    (void)o;
    fprintf(stderr, "kvserve mkmodel: not built yet\n");
    return 2;
}
