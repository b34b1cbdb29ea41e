/*
 * cmd_tokenize.c — `kvserve tokenize -m MODEL.gguf [--no-bos] [--special] [TEXT]`.
 *
 * Prints the token ids of TEXT (or of all of standard input, byte for byte, when TEXT is absent)
 * space-separated on one line. Only the file's tokenizer.* metadata is read, so vocabulary-only
 * GGUF files work. --no-bos adds no special tokens; --special matches control tokens written in
 * the text. Exit status: 0, 1 for a bad file or input, 2 for bad usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

/* Reads all of f into a malloc'd buffer; NULL on error. */
static char *read_all(FILE *f, size_t *out_len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = cap < ((size_t)1 << 30) ? realloc(buf, cap * 2) : NULL;
        if (!nb) {
            free(buf);
            return NULL;
        }
        buf = nb;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        free(buf);
        return NULL;
    }
    *out_len = n;
    return buf;
}

/* Opens path and builds its tokenizer; NULL after printing a one-line error. */
static tokenizer *open_tok(const char *path, gguf_file **gf)
{
    char err[512];
    if (gguf_open(path, gf, err, sizeof err)) {
        fprintf(stderr, "kvserve tokenize: %s\n", err);
        return NULL;
    }
    tokenizer *t = tok_create(*gf, err, sizeof err);
    if (!t) {
        fprintf(stderr, "kvserve tokenize: %s: %s\n", path, err);
        gguf_close(*gf);
        *gf = NULL;
    }
    return t;
}

int cli_tokenize(cli_opts *o)
{
    if (!o->model) {
        fprintf(stderr, "kvserve tokenize: -m MODEL.gguf is required\n");
        return 2;
    }
    if (o->n_args > 1) {
        fprintf(stderr, "kvserve tokenize: expected one TEXT argument (quote it), got %d\n",
                o->n_args);
        return 2;
    }
    gguf_file *gf = NULL;
    tokenizer *t = open_tok(o->model, &gf);
    if (!t) return 1;
    size_t len = 0;
    char *owned = NULL;
    const char *text = o->n_args ? o->args[0] : NULL;
    if (text) {
        len = strlen(text);
    } else if (!(text = owned = read_all(stdin, &len))) {
        fprintf(stderr, "kvserve tokenize: cannot read standard input\n");
        tok_destroy(t);
        gguf_close(gf);
        return 1;
    }
    int rc = 1, cap = len < 1000000 ? (int)len + 16 : 1 << 20;
    int32_t *ids = NULL;
    for (;;) {
        int32_t *nids = realloc(ids, (size_t)cap * sizeof *ids);
        if (!nids) break;
        ids = nids;
        int n = tok_encode(t, text, len, !o->no_bos, o->special, ids, cap);
        if (n < 0) {
            fprintf(stderr, "kvserve tokenize: %s\n", strerror(-n));
            break;
        }
        if (n > cap) {
            cap = n;
            continue;
        }
        for (int i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        rc = fflush(stdout) ? 1 : 0;
        break;
    }
    free(ids);
    free(owned);
    tok_destroy(t);
    gguf_close(gf);
    return rc;
}
