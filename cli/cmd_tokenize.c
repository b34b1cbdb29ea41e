/*
 * cmd_tokenize.c — `kvserve tokenize`.
 */
#include <stdio.h>

#include "cli/cli.h"

int cli_tokenize(cli_opts *o)
{
    (void)o;
    fprintf(stderr, "kvserve tokenize: not built yet\n");
    return 2;
}
