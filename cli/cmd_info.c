/*
 * cmd_info.c — `kvserve info`.
 */
#include <stdio.h>

#include "cli/cli.h"

int cli_info(cli_opts *o)
{
    (void)o;
    fprintf(stderr, "kvserve info: not built yet\n");
    return 2;
}
