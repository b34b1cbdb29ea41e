/*
 * cmd_detokenize.c — `kvserve detokenize -m MODEL.gguf ID...`.
 *
 * Writes the text of the ids to standard output as raw bytes, exactly, with no newline added.
 * SentencePiece's rule applies: the one leading space of the first piece (after BOS) is dropped;
 * control tokens such as BOS and EOS produce no text. Only the tokenizer.* metadata is read.
 * Exit status: 0, 1 for a bad file or id, 2 for bad usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

int cli_detokenize(cli_opts *o)
{
    char err[512];
    if (!o->model) {
        fprintf(stderr, "kvserve detokenize: -m MODEL.gguf is required\n");
        return 2;
    }
    gguf_file *gf = NULL;
    if (gguf_open(o->model, &gf, err, sizeof err)) {
        fprintf(stderr, "kvserve detokenize: %s\n", err);
        return 1;
    }
    tokenizer *t = tok_create(gf, err, sizeof err);
    if (!t) {
        fprintf(stderr, "kvserve detokenize: %s: %s\n", o->model, err);
        gguf_close(gf);
        return 1;
    }
    int rc = 1, n = o->n_args;
    int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    char *text = NULL;
    if (!ids) goto out;
    for (int i = 0; i < n; i++) {
        char *end;
        errno = 0;
        long v = strtol(o->args[i], &end, 10);
        if (end == o->args[i] || *end || errno || v < 0 || v >= tok_n_vocab(t)) {
            fprintf(stderr, "kvserve detokenize: bad token id '%s' (the vocabulary has %d)\n",
                    o->args[i], tok_n_vocab(t));
            goto out;
        }
        ids[i] = (int32_t)v;
    }
    int len = tok_decode(t, ids, n, 1, NULL, 0);
    text = malloc((size_t)len + 1);
    if (!text) goto out;
    tok_decode(t, ids, n, 1, text, len);
    rc = fwrite(text, 1, (size_t)len, stdout) == (size_t)len && !fflush(stdout) ? 0 : 1;
out:
    free(text);
    free(ids);
    tok_destroy(t);
    gguf_close(gf);
    return rc;
}
