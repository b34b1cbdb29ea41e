/*
 * cmd_detokenize.c — `kvserve detokenize`.
 */
#include <stdio.h>

#include "cli/cli.h"

int cli_detokenize(cli_opts *o)
{
    (void)o;
    fprintf(stderr, "kvserve detokenize: not built yet\n");
    return 2;
}
