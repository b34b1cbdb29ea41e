/*
 * test_docs.c — the documentation checked against the code, so that it cannot fall behind:
 *
 *   options   every option `kvserve COMMAND --help` prints, for every command `kvserve --help`
 *             lists, is in docs/configuration.md (the real binary, $KVSERVE_BIN, is asked);
 *   fields    every top-level request field the OpenAI parser reads (oai_request_fields, the
 *             table in server/openai/oai_fields.c) and the parsers of the other routes read
 *             (oai_pool_fields: embeddings, rerank, score; oai_dialect_fields: the Responses and
 *             Messages APIs) is in docs/http-api.md, as `name`;
 *   readme    README.md has at most 300 lines (the details live in docs/);
 *   links     every relative link of README.md and the docs/ pages names an existing file, and a link
 *             into a Markdown file's #anchor names one of its headings.
 *
 * A failure names every missing option, field or link at once. An option counts as documented
 * where it stands as a whole word ("--kv-disk" is not found inside "--kv-disk-dir"). Anchors are
 * GitHub's heading ids: lower-case, ASCII letters, digits, '_' and '-' kept, each space a '-',
 * everything else dropped (non-ASCII too: a heading that is linked to keeps to ASCII letters),
 * and "-1", "-2", … on repeats. Suite docs. The repository root is the parent of tests/data
 * (tu_data_dir), so the test runs from any folder.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "server/openai/oai_dialect.h"
#include "server/openai/oai_pool.h"
#include "server/openai/openai.h"
#include "tests/test_util.h"

/* path of REL (relative to the repository root) in out[0 .. n). */
static void td_path(const char *rel, char *out, size_t n)
{
    snprintf(out, n, "%s/../../%s", tu_data_dir(), rel);
}

/* The text of a repository file (malloc'd); fails the test when it cannot be read. */
static char *td_read(const char *rel)
{
    char p[4096];
    td_path(rel, p, sizeof p);
    char *s = tu_read_file(p, NULL);
    cr_assert_not_null(s, "cannot read %s (looked for %s)", rel, p);
    return s;
}

static int td_word_char(int c)
{
    return isalnum(c) || c == '-' || c == '_';
}

/* 1 when word occurs in text with no word character ([A-Za-z0-9_-]) right before or after it. */
static int td_has_word(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = text; (p = strstr(p, word)); p++)
        if ((p == text || !td_word_char((unsigned char)p[-1])) && !td_word_char((unsigned char)p[n]))
            return 1;
    return 0;
}

/* 1 when `name` (in backticks) occurs in text. */
static int td_has_code(const char *text, const char *name)
{
    char q[256];
    snprintf(q, sizeof q, "`%s`", name);
    return strstr(text, q) != NULL;
}

static const char *td_bin(void)
{
    const char *b = getenv("KVSERVE_BIN");
    if (!b || !*b || access(b, X_OK)) cr_skip_test("KVSERVE_BIN is not set to the kvserve binary");
    return b;
}

/* The commands `kvserve --help` lists (the lines under "commands:" up to the first blank one),
 * as malloc'd names in cmds[0 .. return). */
static int td_commands(const char *bin, char **cmds, int cap)
{
    char cmd[4200];
    int st, n = 0;
    snprintf(cmd, sizeof cmd, "'%s' --help 2>&1", bin);
    char *out = tu_capture(cmd, &st);
    cr_assert_eq(st, 0, "kvserve --help failed: %s", out);
    const char *p = strstr(out, "\ncommands:\n");
    cr_assert_not_null(p, "kvserve --help lists no commands:\n%s", out);
    for (p += strlen("\ncommands:\n"); *p == ' ' && n < cap;) {
        while (*p == ' ') p++;
        size_t k = strcspn(p, " \n");
        cmds[n++] = strndup(p, k);
        p = strchr(p, '\n');
        if (!p) break;
        p++;
    }
    free(out);
    return n;
}

/* Appends to miss each option of `kvserve CMD --help` that docs does not name; returns how many
 * options the help printed. An option line starts with "-X, --name" or "--name". */
static int td_check_options(const char *bin, const char *name, const char *docs, buf *miss)
{
    char cmd[4200];
    int st, n = 0;
    snprintf(cmd, sizeof cmd, "'%s' %s --help 2>&1", bin, name);
    char *out = tu_capture(cmd, &st);
    cr_assert_eq(st, 0, "kvserve %s --help failed: %s", name, out);
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        while (*line == ' ') line++;
        if (line[0] != '-') continue;
        char flag[128];
        for (const char *p = line; p[0] == '-';) {
            size_t k = 1 + strspn(p + 1, "-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
            snprintf(flag, sizeof flag, "%.*s", (int)k, p);
            n++;
            if (!td_has_word(docs, flag)) buf_printf(miss, " %s %s;", name, flag);
            p += k;
            if (p[0] != ',') break;
            p += strspn(p, ", ");
        }
    }
    free(out);
    return n;
}

Test(docs, every_option_in_configuration)
{
    const char *bin = td_bin();
    char *docs = td_read("docs/configuration.md");
    char *cmds[32];
    int n_cmds = td_commands(bin, cmds, 32);
    cr_assert_geq(n_cmds, 2, "kvserve --help listed %d commands", n_cmds);
    buf miss = {0};
    int n_serve = 0;
    for (int i = 0; i < n_cmds; i++) {
        int n = td_check_options(bin, cmds[i], docs, &miss);
        if (!strcmp(cmds[i], "serve")) n_serve = n;
        free(cmds[i]);
    }
    cr_assert_gt(n_serve, 10, "kvserve serve --help printed only %d options", n_serve);
    cr_assert_eq(miss.len, 0, "docs/configuration.md does not document these options (command option):%s",
                 miss.s);
    buf_free(&miss);
    free(docs);
}

Test(docs, every_request_field_in_http_api)
{
    char *docs = td_read("docs/http-api.md");
    size_t n;
    const char *const *f = oai_request_fields(&n);
    cr_assert_gt(n, 10, "the parser reads only %zu fields", n);
    buf miss = {0};
    for (size_t i = 0; i < n; i++)
        if (!td_has_code(docs, f[i])) buf_printf(&miss, " %s", f[i]);
    /* the other routes' parsers: embeddings, rerank, score; the Responses and Messages APIs */
    for (int k = OAI_EMBED; k <= OAI_SCORE + 2; k++) {
        f = k <= OAI_SCORE ? oai_pool_fields(k, &n)
                           : oai_dialect_fields(k == OAI_SCORE + 1 ? OAI_DIALECT_RESPONSES : OAI_DIALECT_MESSAGES, &n);
        cr_assert_gt(n, 3);
        for (size_t i = 0; i < n; i++)
            if (!td_has_code(docs, f[i])) buf_printf(&miss, " %s", f[i]);
    }
    cr_assert_eq(miss.len, 0, "docs/http-api.md does not document these request fields (as `name`):%s",
                 miss.s);
    buf_free(&miss);
    free(docs);
}

Test(docs, readme_is_short)
{
    char *s = td_read("README.md");
    int lines = 0;
    for (const char *p = s; *p; p++) lines += *p == '\n';
    cr_assert_leq(lines, 300, "README.md has %d lines; at most 300 (move details into docs/)", lines);
    free(s);
}

/* ---- links ---------------------------------------------------------------------------------- */

/* GitHub's id of a heading's text (see the top of the file) into out. */
static void td_slug(const char *h, size_t len, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < len && k + 1 < cap; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c >= 0x80) continue;
        if (isalnum(c) || c == '_' || c == '-')
            out[k++] = (char)tolower(c);
        else if (c == ' ')
            out[k++] = '-';
    }
    out[k] = 0;
}

/* 1 at a line that opens or closes a fenced code block. */
static int td_is_fence(const char *line)
{
    while (*line == ' ') line++;
    return !strncmp(line, "```", 3);
}

/* 1 when the Markdown text has a heading whose id is anchor. */
static int td_has_anchor(const char *md, const char *anchor)
{
    static char base[1024][160]; /* ids before the repeat suffix, in order */
    int n = 0, fenced = 0;
    for (const char *line = md; *line && n < 1024;) {
        size_t len = strcspn(line, "\n");
        if (td_is_fence(line)) fenced = !fenced;
        size_t h = strspn(line, "#");
        if (!fenced && h >= 1 && h <= 6 && line[h] == ' ') {
            char id[200];
            td_slug(line + h + 1, len - h - 1, base[n], sizeof base[n]);
            int seen = 0;
            for (int i = 0; i < n; i++) seen += !strcmp(base[i], base[n]);
            if (seen) snprintf(id, sizeof id, "%s-%d", base[n], seen);
            else snprintf(id, sizeof id, "%s", base[n]);
            n++;
            if (!strcmp(id, anchor)) return 1;
        }
        line += len + (line[len] == '\n');
    }
    return 0;
}

/* Checks one link target of the file rel (its folder dir, relative to the root); appends what
 * is wrong to bad. */
static void td_check_target(const char *rel, const char *dir, const char *md, const char *t, size_t len,
                            buf *bad)
{
    char target[1024];
    snprintf(target, sizeof target, "%.*s", (int)len, t);
    if (strstr(target, "://") || !strncmp(target, "mailto:", 7)) return;
    char *hash = strchr(target, '#');
    const char *anchor = hash ? hash + 1 : NULL;
    if (hash) *hash = 0;
    if (!*target) { /* #anchor within the same file */
        if (anchor && !td_has_anchor(md, anchor)) buf_printf(bad, "\n  %s: #%s: no such heading", rel, anchor);
        return;
    }
    char file[2048], path[4096];
    snprintf(file, sizeof file, "%s%s%s", dir, *dir ? "/" : "", target);
    td_path(file, path, sizeof path);
    struct stat st;
    if (stat(path, &st)) {
        buf_printf(bad, "\n  %s: %s: no such file", rel, target);
        return;
    }
    size_t tl = strlen(target);
    if (anchor && tl > 3 && !strcmp(target + tl - 3, ".md")) {
        char *other = tu_read_file(path, NULL);
        cr_assert_not_null(other, "cannot read %s", path);
        if (!td_has_anchor(other, anchor)) buf_printf(bad, "\n  %s: %s#%s: no such heading", rel, target, anchor);
        free(other);
    }
}

/* Checks every link of the Markdown file rel (outside code blocks and code spans). */
static int td_check_links(const char *rel, buf *bad)
{
    char *md = td_read(rel);
    char dir[1024];
    const char *slash = strrchr(rel, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - rel) : 0, rel);
    int n = 0, fenced = 0;
    for (const char *line = md; *line;) {
        size_t len = strcspn(line, "\n");
        if (td_is_fence(line)) fenced = !fenced;
        else if (!fenced) {
            int code = 0;
            for (size_t i = 0; i + 1 < len; i++) {
                if (line[i] == '`') code = !code;
                if (code || line[i] != ']' || line[i + 1] != '(') continue;
                const char *t = line + i + 2;
                size_t tl = strcspn(t, ") \n");
                td_check_target(rel, dir, md, t, tl, bad);
                n++;
            }
        }
        line += len + (line[len] == '\n');
    }
    free(md);
    return n;
}

Test(docs, relative_links_resolve)
{
    buf bad = {0};
    int n = td_check_links("README.md", &bad);
    char d[4096];
    td_path("docs", d, sizeof d);
    DIR *dp = opendir(d);
    cr_assert_not_null(dp, "cannot open %s", d);
    int n_pages = 0;
    for (struct dirent *e; (e = readdir(dp));) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 3, ".md")) continue;
        char rel[600];
        snprintf(rel, sizeof rel, "docs/%s", e->d_name);
        n += td_check_links(rel, &bad);
        n_pages++;
    }
    closedir(dp);
    cr_assert_gt(n_pages, 0, "no pages in docs/");
    cr_assert_gt(n, 10, "only %d links found", n);
    cr_assert_eq(bad.len, 0, "broken links:%s", bad.s);
    buf_free(&bad);
}

/* The checks themselves: a name inside a longer option does not count, and the heading ids. */
Test(docs, checker_self_test)
{
    cr_assert(td_has_word("use `--kv-disk-dir DIR`", "--kv-disk-dir"));
    cr_assert_not(td_has_word("use `--kv-disk-dir DIR`", "--kv-disk"));
    cr_assert_not(td_has_word("use `--kv-disk-dir DIR`", "-dir"));
    cr_assert(td_has_word("`-t`, `--threads`", "-t"));
    cr_assert_not(td_has_word("--threads", "-t"));
    const char *md = "# Title\n\n```\n# not a heading\n```\n## Smaller KV: int8 / fp8 and sinks + window\n"
                     "## `kvserve bench`\n## Notes\n### Notes\n";
    cr_assert(td_has_anchor(md, "title"));
    cr_assert(td_has_anchor(md, "smaller-kv-int8--fp8-and-sinks--window"));
    cr_assert(td_has_anchor(md, "kvserve-bench"));
    cr_assert(td_has_anchor(md, "notes-1"));
    cr_assert_not(td_has_anchor(md, "not-a-heading"));
}

/* The README says that tests needing ../shared or a GPU skip with a message: without --verbose
 * Criterion printed none (31 of 372 skipped silently). Every skip is now listed with its reason
 * (tests/test_util.c's report hooks): run one that skips, as a child, and read its output. */
Test(docs, skipped_tests_say_why)
{
    char self[1024], cmd[1200];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    cr_assert_gt(k, 0);
    self[k] = 0;
    /* (unset BXFI_MAP: the child is a runner of its own, not one of this runner's workers) */
    snprintf(cmd, sizeof cmd, "env -u BXFI_MAP KVSERVE_SHARED=/nonexistent '%s' --filter 'tokenizer/vocab_gpt2' 2>&1", self);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    static char out[16384];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    cr_assert(strstr(out, "[SKIP] tokenizer::vocab_gpt2: "), "no skip line without --verbose:\n%s", out);
    cr_assert(strstr(out, "not found under KVSERVE_SHARED"), "the reason is missing:\n%s", out);
    cr_assert(strstr(out, "Skipped: 1"), "%s", out);
}
