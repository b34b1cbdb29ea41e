/*
 * main.c — kvserve's single entry point: argv → subcommand. `serve` is the default.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const struct {
    const char *name;
    int (*run)(cli_opts *o);
    const char *what;
} commands[] = {
    {"serve", cli_serve, "run the OpenAI-compatible HTTP server (default)"},
    {"generate", cli_generate, "generate a completion for one prompt"},
    {"bench", cli_bench, "offline throughput benchmark of the engine"},
    {"info", cli_info, "print a model's architecture, tensors, vocabulary and KV formula"},
    {"tokenize", cli_tokenize, "print the token ids of a text"},
    {"detokenize", cli_detokenize, "print the text of token ids"},
    {"mkmodel", cli_mkmodel, "write a GGUF with random weights of any Llama shape"},
    {"render-chat", cli_render_chat, "render a chat template: JSON on stdin, the exact text on stdout"},
};

static void usage(void)
{
    printf("usage: kvserve [COMMAND] [OPTIONS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        printf("  %-12s %s\n", commands[i].name, commands[i].what);
    printf("\n`kvserve COMMAND --help` lists a command's options; `kvserve --version` prints the version, the\n"
           "commit and the backends built in.\n");
}

int main(int argc, char **argv)
{
    const char *cmd = "serve";
    int first = 1;
    if (argc > 1 && argv[1][0] != '-') {
        cmd = argv[1];
        first = 2;
    } else if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage();
        return 0;
    } else if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) {
        cli_print_version(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(cmd, commands[i].name)) continue;
        cli_opts o;
        cli_opts_default(&o);
        if (cli_parse(cmd, argc, argv, first, &o)) {
            cli_opts_fini(&o);
            return 2;
        }
        int rc = 0;
        if (o.help) cli_print_help(cmd);
        else rc = commands[i].run(&o);
        cli_opts_fini(&o);
        return rc;
    }
    fprintf(stderr, "kvserve: unknown command '%s'\n", cmd);
    usage();
    return 2;
}
