/*
 * structured.c — `--json-schema FILE` and `--grammar FILE` for `kvserve generate` and `kvserve
 * bench`: the file is read, a schema turned into GBNF (server/openai/oai_schema.c), and compiled,
 * with the compile time measured as CPU time of the compiling thread (the figure the
 * structured-output benchmark reports).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "server/openai/oai_schema.h"

/* CPU time of this thread: what compiling costs, whatever else shares the machine. */
static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    for (size_t k; b && (k = fread(b + n, 1, cap - n - 1, fp)) > 0;) {
        n += k;
        if (n + 1 == cap) {
            char *c = realloc(b, cap *= 2);
            if (!c) free(b);
            b = c;
        }
    }
    fclose(fp);
    if (b) b[n] = 0;
    return b;
}

int cli_grammar(const cli_opts *o, const char *cmd, gr_grammar **out, double *compile_ms)
{
    *out = NULL;
    *compile_ms = 0;
    if (o->json_schema && o->grammar_file) {
        fprintf(stderr, "kvserve %s: --json-schema and --grammar exclude each other\n", cmd);
        return -1;
    }
    const char *path = o->json_schema ? o->json_schema : o->grammar_file;
    if (!path) return 0;
    char *text = slurp(path);
    if (!text) {
        fprintf(stderr, "kvserve %s: cannot read %s\n", cmd, path);
        return -1;
    }
    double t0 = now_ms();
    char *gbnf = text, err[384];
    if (o->json_schema) {
        cJSON *s = cJSON_Parse(text);
        if (!s) {
            fprintf(stderr, "kvserve %s: %s is not valid JSON\n", cmd, path);
            free(text);
            return -1;
        }
        gbnf = oai_schema_gbnf(s, "", err, sizeof err);
        cJSON_Delete(s);
        if (!gbnf) {
            fprintf(stderr, "kvserve %s: %s: %s\n", cmd, path, err);
            free(text);
            return -1;
        }
    }
    gr_error ge;
    *out = gr_compile_gbnf(gbnf, strlen(gbnf), "root", &ge);
    *compile_ms = now_ms() - t0;
    if (gbnf != text) free(gbnf);
    free(text);
    if (!*out) {
        if (ge.line) fprintf(stderr, "kvserve %s: %s:%d:%d: %s\n", cmd, path, ge.line, ge.col, ge.msg);
        else fprintf(stderr, "kvserve %s: %s: %s\n", cmd, path, ge.msg);
        return -1;
    }
    return 0;
}
