/*
 * gate_parse.c — the request-framing state machine of the gate (see gate.h for the rules).
 *
 * Invariants: every byte handed to gate_feed is either forwarded (possibly rewritten: the
 * head's framing headers are replaced by one Content-Length, a chunked body by its decoded
 * bytes), kept for later in head/body/line, or, after a framing error, dropped with the
 * connection. The result never depends on how the input was split across calls. Bounded
 * memory: the head and the lines by their constants, a chunked body by max_body.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/http/gate.h"

int gate_parser_init(gate_parser *p, size_t max_body, gate_sink_fn sink, void *ud)
{
    memset(p, 0, sizeof *p);
    p->max_body = max_body;
    p->sink = sink;
    p->sink_ud = ud;
    p->head_cap = 1024;
    p->head = malloc(p->head_cap);
    return p->head ? 0 : -ENOMEM;
}

void gate_parser_fini(gate_parser *p)
{
    free(p->head);
    free(p->body);
    memset(p, 0, sizeof *p);
}

int gate_is_idle(const gate_parser *p)
{
    return p->state == GATE_HEAD && p->head_len == 0;
}

static int fail(gate_parser *p, int status, const char *msg)
{
    p->state = GATE_FAILED;
    p->status = status;
    snprintf(p->message, sizeof p->message, "%s", msg);
    return -EPROTO;
}

/* RFC 9110 token characters. */
static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* One line of the head: [s, e) without its CRLF. */
typedef struct gate_line {
    const char *s, *e;
} gate_line;

/* Splits a field value list at commas into trimmed elements; calls f on each non-empty one.
 * Returns the first non-zero result of f. */
static int each_element(const char *s, const char *e, int (*f)(void *, const char *, size_t), void *ud)
{
    while (s <= e) {
        const char *c = memchr(s, ',', (size_t)(e - s));
        const char *end = c ? c : e;
        const char *a = s, *b = end;
        while (a < b && is_ows(*a)) a++;
        while (b > a && is_ows(b[-1])) b--;
        if (b > a) {
            int rc = f(ud, a, (size_t)(b - a));
            if (rc) return rc;
        }
        if (!c) break;
        s = c + 1;
    }
    return 0;
}

/* What the framing headers of one head said. */
typedef struct gate_frame {
    int has_cl;            /* a Content-Length was given */
    int n_cl;              /* its list elements */
    int cl_conflict;       /* two values disagree */
    int cl_bad;            /* not digits */
    int cl_huge;           /* more than fits in 64 bits */
    uint64_t cl;
    int n_te;              /* Transfer-Encoding elements */
    int te_chunked_only;   /* exactly one element, "chunked" */
    int n_host;
    int expect_continue;
} gate_frame;

static int cl_element(void *ud, const char *v, size_t n)
{
    gate_frame *f = ud;
    uint64_t x = 0;
    int huge = 0;
    f->n_cl++;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9') {
            f->cl_bad = 1;
            return 0;
        }
        if (x > (UINT64_MAX - 9) / 10) huge = 1;
        x = huge ? x : x * 10 + (uint64_t)(v[i] - '0');
    }
    if (f->has_cl && (huge != f->cl_huge || x != f->cl)) f->cl_conflict = 1;
    f->has_cl = 1;
    f->cl_huge = huge;
    f->cl = x;
    return 0;
}

static int te_element(void *ud, const char *v, size_t n)
{
    gate_frame *f = ud;
    f->n_te++;
    f->te_chunked_only = f->n_te == 1 && n == 7 && !strncasecmp(v, "chunked", 7);
    return 0;
}

static int name_is(const gate_line *l, size_t name_len, const char *want)
{
    return name_len == strlen(want) && !strncasecmp(l->s, want, name_len);
}

/* Checks one header line and records the framing fields. 0 or the failure. */
static int header_line(gate_parser *p, const gate_line *l, gate_frame *f)
{
    if (l->s < l->e && is_ows(*l->s)) return fail(p, 400, "obsolete line folding in a header");
    const char *c = l->s;
    while (c < l->e && is_tchar((unsigned char)*c)) c++;
    if (c == l->s || c == l->e || *c != ':')
        return fail(p, 400, "malformed header line (a token name, then ':' with no space before it)");
    size_t nl = (size_t)(c - l->s);
    for (const char *v = c + 1; v < l->e; v++) {
        unsigned char b = (unsigned char)*v;
        if (b < 0x20 && b != '\t') return fail(p, 400, "control character in a header value");
        if (b == 0x7f) return fail(p, 400, "control character in a header value");
    }
    const char *v = c + 1, *ve = l->e;
    if (name_is(l, nl, "Content-Length")) {
        int before = f->n_cl;
        each_element(v, ve, cl_element, f);
        if (f->n_cl == before) f->cl_bad = 1; /* an empty value */
    } else if (name_is(l, nl, "Transfer-Encoding")) {
        int before = f->n_te;
        each_element(v, ve, te_element, f);
        if (f->n_te == before) { /* an empty value */
            f->n_te++;
            f->te_chunked_only = 0;
        }
    } else if (name_is(l, nl, "Host")) {
        f->n_host++;
    } else if (name_is(l, nl, "Expect")) {
        while (v < ve && is_ows(*v)) v++;
        while (ve > v && is_ows(ve[-1])) ve--;
        f->expect_continue = (size_t)(ve - v) == 12 && !strncasecmp(v, "100-continue", 12);
    }
    return 0;
}

/* The request line: method, target and version. 0, or the failure. Sets *http10. */
static int request_line(gate_parser *p, const gate_line *l, int *http10)
{
    const char *s = l->s, *m = s;
    while (m < l->e && is_tchar((unsigned char)*m)) m++;
    if (m == s || m == l->e || *m != ' ') return fail(p, 400, "malformed request line");
    const char *t = m + 1, *te = t;
    while (te < l->e && (unsigned char)*te > 0x20 && (unsigned char)*te < 0x7f) te++;
    if (te == t || te == l->e || *te != ' ') return fail(p, 400, "malformed request target");
    snprintf(p->method, sizeof p->method, "%.*s", (int)(m - s), s);
    /* Absolute form (RFC 9112 §3.2.2: "http://host/path?q"), which a server must accept: the
     * scheme and authority are dropped on the way to libmicrohttpd, which routes origin-form
     * paths only. */
    p->abs_from = p->abs_to = 0;
    p->abs_slash = 0;
    size_t sl = te - t > 8 && !strncasecmp(t, "https://", 8) ? 8 : te - t > 7 && !strncasecmp(t, "http://", 7) ? 7 : 0;
    if (sl) {
        const char *a = t + sl;
        while (a < te && *a != '/' && *a != '?') a++;
        p->abs_from = (size_t)(t - p->head);
        p->abs_to = (size_t)(a - p->head);
        p->abs_slash = a == te || *a == '?';
        snprintf(p->path, sizeof p->path, "%s%.*s", p->abs_slash ? "/" : "", (int)(te - a), a);
    } else {
        snprintf(p->path, sizeof p->path, "%.*s", (int)(te - t), t);
    }
    const char *v = te + 1;
    size_t vl = (size_t)(l->e - v);
    if (vl != 8 || strncmp(v, "HTTP/", 5) || v[5] < '0' || v[5] > '9' || v[6] != '.' || v[7] < '0' ||
        v[7] > '9')
        return fail(p, 400, "malformed HTTP version");
    if (v[5] != '1' || (v[7] != '0' && v[7] != '1')) return fail(p, 505, "HTTP version not supported");
    *http10 = v[7] == '0';
    return 0;
}

/* Splits the head into lines; a lone CR or LF anywhere is an error. Returns the line count, or
 * -1 after fail(). */
static int split_lines(gate_parser *p, gate_line *lines, int max)
{
    int n = 0;
    const char *s = p->head, *end = p->head + p->head_len - 2; /* the final empty line's CRLF */
    while (s < end) {
        const char *cr = s;
        while (cr < end && *cr != '\r' && *cr != '\n') cr++;
        if (cr >= end || *cr == '\n' || cr[1] != '\n') return fail(p, 400, "bare CR or LF in the request head"), -1;
        if (n == max) return fail(p, 431, "too many header lines"), -1;
        lines[n++] = (gate_line){s, cr};
        s = cr + 2;
    }
    return n;
}

/* Writes the head without its framing headers (and without Expect when answered here), plus
 * one Content-Length when there is a body or one was given. */
static void forward_head(gate_parser *p, const gate_line *lines, int n, int with_cl, uint64_t cl,
                         int drop_expect)
{
    p->n_forwarded++;
    for (int i = 0; i < n; i++) {
        const gate_line *l = &lines[i];
        if (i == 0 && p->abs_to > p->abs_from) { /* absolute form: the request line without the authority */
            const char *a = p->head + p->abs_from, *b = p->head + p->abs_to;
            p->sink(p->sink_ud, l->s, (size_t)(a - l->s));
            if (p->abs_slash) p->sink(p->sink_ud, "/", 1);
            p->sink(p->sink_ud, b, (size_t)(l->e - b) + 2);
            continue;
        }
        const char *c = i ? memchr(l->s, ':', (size_t)(l->e - l->s)) : NULL;
        size_t nl = c ? (size_t)(c - l->s) : 0;
        if (i && (name_is(l, nl, "Content-Length") || name_is(l, nl, "Transfer-Encoding") ||
                  (drop_expect && name_is(l, nl, "Expect"))))
            continue;
        p->sink(p->sink_ud, l->s, (size_t)(l->e - l->s) + 2);
    }
    if (with_cl) {
        char b[48];
        int k = snprintf(b, sizeof b, "Content-Length: %llu\r\n", (unsigned long long)cl);
        p->sink(p->sink_ud, b, (size_t)k);
    }
    p->sink(p->sink_ud, "\r\n", 2);
}

static void request_done(gate_parser *p)
{
    p->method_ok = 0;
    p->n_requests++;
    p->state = GATE_HEAD;
    p->head_len = 0;
    p->body_len = 0;
    p->trailer_bytes = 0;
    p->line_len = 0;
}

#define GATE_MAX_LINES 256

/* The owner's say on a valid head: 0 forward it, else refused (p failed with the status and the
 * message the owner left in p->message). */
static int admitted(gate_parser *p)
{
    p->message[0] = 0;
    int status = p->admit ? p->admit(p->sink_ud, p) : 0;
    if (!status) return 0;
    char msg[sizeof p->message];
    snprintf(msg, sizeof msg, "%s", p->message[0] ? p->message : "request refused");
    fail(p, status, msg);
    return -1;
}

/* A complete head is in p->head: validate it and start the body. */
static int head_done(gate_parser *p)
{
    gate_line lines[GATE_MAX_LINES];
    int n = split_lines(p, lines, GATE_MAX_LINES);
    if (n < 0) return -EPROTO;
    int http10 = 0;
    gate_frame f = {0};
    if (request_line(p, &lines[0], &http10)) return -EPROTO;
    for (int i = 1; i < n; i++)
        if (header_line(p, &lines[i], &f)) return -EPROTO;
    if (!http10 && f.n_host != 1) return fail(p, 400, "an HTTP/1.1 request needs exactly one Host header");
    if (f.n_te) {
        if (http10) return fail(p, 400, "Transfer-Encoding in an HTTP/1.0 request");
        if (f.has_cl || f.cl_bad) return fail(p, 400, "both Transfer-Encoding and Content-Length");
        if (!f.te_chunked_only) return fail(p, 400, "unsupported Transfer-Encoding (only 'chunked' is)");
        if (admitted(p)) return -EPROTO;
        p->want_continue = f.expect_continue;
        p->state = GATE_CHUNK_SIZE;
        p->line_len = 0;
        return 0; /* the head is forwarded with the decoded body's length at the end */
    }
    if (f.cl_bad) return fail(p, 400, "invalid Content-Length");
    if (f.cl_conflict) return fail(p, 400, "conflicting Content-Length values");
    if (f.has_cl && (f.cl_huge || f.cl > p->max_body)) return fail(p, 413, "request body too large");
    if (admitted(p)) return -EPROTO;
    forward_head(p, lines, n, f.has_cl, f.cl, 0);
    if (f.has_cl && f.cl > 0) {
        p->state = GATE_BODY_LENGTH;
        p->left = f.cl;
    } else {
        request_done(p);
    }
    return 0;
}

/* GATE_HEAD: takes bytes until the empty line; returns how many were consumed, or -1. */
static long feed_head(gate_parser *p, const char *d, size_t n)
{
    size_t i = 0;
    while (p->head_len == 0 && i < n && (d[i] == '\r' || d[i] == '\n')) i++; /* empty lines first */
    if (i == n) return (long)i;
    size_t take = n - i, room = GATE_MAX_HEAD - p->head_len;
    if (take > room) take = room;
    if (p->head_len + take > p->head_cap) {
        size_t cap = p->head_cap;
        while (cap < p->head_len + take) cap *= 2;
        char *h = realloc(p->head, cap);
        if (!h) return fail(p, 500, "out of memory"), -1;
        p->head = h;
        p->head_cap = cap;
    }
    size_t from = p->head_len > 3 ? p->head_len - 3 : 0;
    memcpy(p->head + p->head_len, d + i, take);
    /* The method is a token: anything else there (a TLS handshake, binary junk) is refused at
     * its first byte instead of waiting for a line end that never comes. */
    for (size_t k = p->head_len; k < p->head_len + take && p->method_ok < 2; k++) {
        unsigned char c = (unsigned char)p->head[k];
        if (c == ' ' && p->method_ok == 1) p->method_ok = 2;
        else if (is_tchar(c)) p->method_ok = 1;
        else return fail(p, 400, "malformed request line"), -1;
    }
    p->head_len += take;
    for (size_t k = from; k + 4 <= p->head_len; k++)
        if (!memcmp(p->head + k, "\r\n\r\n", 4)) {
            size_t used = k + 4 - (p->head_len - take); /* of the bytes just copied */
            p->head_len = k + 4;
            if (head_done(p)) return -1;
            return (long)(i + used);
        }
    if (p->head_len >= GATE_MAX_HEAD) return fail(p, 431, "request head too large"), -1;
    return (long)(i + take);
}

/* Collects one CRLF-terminated line into p->line; returns bytes consumed, sets *done. */
static long feed_line(gate_parser *p, const char *d, size_t n, int *done)
{
    size_t i = 0;
    *done = 0;
    while (i < n) {
        char c = d[i++];
        if (p->line_len >= GATE_MAX_LINE) return fail(p, 400, "chunked framing line too long"), -1;
        p->line[p->line_len++] = c;
        if (c == '\n') {
            if (p->line_len < 2 || p->line[p->line_len - 2] != '\r')
                return fail(p, 400, "bare LF in chunked framing"), -1;
            p->line_len -= 2;
            *done = 1;
            return (long)i;
        }
    }
    return (long)i;
}

/* A complete chunk-size line: hex size, then optional ";extensions". */
static int chunk_size_line(gate_parser *p)
{
    uint64_t v = 0;
    size_t i = 0;
    while (i < p->line_len) {
        char c = p->line[i];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) break;
        if (v >> 60) return fail(p, 413, "request body too large");
        v = v * 16 + (uint64_t)h;
        i++;
    }
    if (i == 0) return fail(p, 400, "invalid chunk size");
    while (i < p->line_len && is_ows(p->line[i])) i++;
    if (i < p->line_len && p->line[i] != ';') return fail(p, 400, "invalid chunk size");
    for (; i < p->line_len; i++)
        if ((unsigned char)p->line[i] < 0x20 && p->line[i] != '\t') return fail(p, 400, "control character in a chunk extension");
    p->line_len = 0;
    if (v == 0) {
        p->state = GATE_TRAILER;
        return 0;
    }
    if (v > p->max_body - p->body_len) return fail(p, 413, "request body too large");
    if (p->body_len + v > p->body_cap) {
        size_t cap = p->body_cap ? p->body_cap : 4096;
        while (cap < p->body_len + v) cap *= 2;
        char *b = realloc(p->body, cap);
        if (!b) return fail(p, 500, "out of memory");
        p->body = b;
        p->body_cap = cap;
    }
    p->left = v;
    p->state = GATE_CHUNK_DATA;
    return 0;
}

/* The end of a chunked request: its head with the decoded length, then the body. */
static int chunked_done(gate_parser *p)
{
    gate_line lines[GATE_MAX_LINES];
    int n = split_lines(p, lines, GATE_MAX_LINES);
    if (n < 0) return -EPROTO;
    forward_head(p, lines, n, 1, p->body_len, 1);
    if (p->body_len) p->sink(p->sink_ud, p->body, p->body_len);
    request_done(p);
    return 0;
}

/* The chunked states: returns bytes consumed, or -1 after fail(). */
static long feed_chunked(gate_parser *p, const char *d, size_t n)
{
    int done;
    long k;
    switch (p->state) {
    case GATE_CHUNK_SIZE:
        if ((k = feed_line(p, d, n, &done)) < 0) return -1;
        if (done && chunk_size_line(p)) return -1;
        return k;
    case GATE_CHUNK_DATA: {
        size_t take = n < p->left ? n : (size_t)p->left;
        memcpy(p->body + p->body_len, d, take);
        p->body_len += take;
        p->left -= take;
        if (!p->left) p->state = GATE_CHUNK_CRLF;
        return (long)take;
    }
    case GATE_CHUNK_CRLF:
        if ((k = feed_line(p, d, n, &done)) < 0) return -1;
        if (done && p->line_len) return fail(p, 400, "chunk data longer than its size"), -1;
        if (done) p->state = GATE_CHUNK_SIZE;
        return k;
    default: /* GATE_TRAILER */
        if ((k = feed_line(p, d, n, &done)) < 0) return -1;
        p->trailer_bytes += (size_t)k;
        if (p->trailer_bytes > GATE_MAX_TRAILERS) return fail(p, 431, "chunked trailers too large"), -1;
        if (!done) return k;
        if (p->line_len == 0) return chunked_done(p) ? -1 : k;
        gate_line l = {p->line, p->line + p->line_len};
        gate_frame f = {0};
        if (header_line(p, &l, &f)) return -1; /* trailers are checked, then dropped */
        p->line_len = 0;
        return k;
    }
}

int gate_feed(gate_parser *p, const char *data, size_t n)
{
    size_t i = 0;
    while (p->state != GATE_FAILED && i < n) {
        long k;
        if (p->state == GATE_HEAD) {
            k = feed_head(p, data + i, n - i);
        } else if (p->state == GATE_BODY_LENGTH) {
            size_t take = n - i < p->left ? n - i : (size_t)p->left;
            p->sink(p->sink_ud, data + i, take);
            p->left -= take;
            if (!p->left) request_done(p);
            k = (long)take;
        } else {
            k = feed_chunked(p, data + i, n - i);
        }
        if (k < 0) break;
        i += (size_t)k;
    }
    return p->state == GATE_FAILED ? -EPROTO : 0;
}
