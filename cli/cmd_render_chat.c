/*
 * cmd_render_chat.c — `kvserve render-chat`: one JSON object on stdin (template, messages,
 * tools, add_generation_prompt, bos_token, eos_token, date, and any other keys as template
 * variables) → the exact rendering on stdout, with no newline added; or one line
 * `error: KIND: message` on stdout and exit status 1 when the template raises or fails (exit 2
 * for unreadable input). For debugging templates, and the tests drive the reference cases
 * through it. The rendering is model/chat.c's chat_render_json.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "model/chat.h"

#define RC_MAX_INPUT ((size_t)256 << 20)

/* All of stdin in a malloc'd buffer; NULL when it cannot be read or exceeds the limit. */
static char *read_stdin(size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, stdin);
        n += r;
        if (r == 0) break;
        if (n == cap) {
            char *nb = cap < RC_MAX_INPUT ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (buf && ferror(stdin)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int cli_render_chat(cli_opts *o)
{
    if (o->n_args) {
        fprintf(stderr,
                "kvserve render-chat: unexpected argument '%s' (the input is read from stdin)\n",
                o->args[0]);
        return 2;
    }
    size_t len = 0;
    char *in = read_stdin(&len);
    if (!in) {
        fprintf(stderr, "kvserve render-chat: cannot read the input from stdin\n");
        return 2;
    }
    char *out = NULL, err[1024];
    size_t out_len = 0;
    int rc = chat_render_json(in, len, &out, &out_len, err, sizeof err);
    free(in);
    if (rc) {
        printf("error: %s\n", err);
        return 1;
    }
    fwrite(out, 1, out_len, stdout);
    free(out);
    return fflush(stdout) ? 1 : 0;
}
