/*
 * gate_admit.c — the gate's admission bookkeeping (see gate.h's gate_limits): connections per
 * client address, the evictable connections oldest first (globally and per address), which
 * connection to evict for a new one, what the reserve serves, and the map from libmicrohttpd's
 * descriptors back to connections. Pure bookkeeping: nothing here reads, writes or closes a
 * socket (gate.c does, and calls this file). Loop thread only.
 *
 * Invariants: a connection is in the evictable lists iff `evictable` is set, and then in both
 * (the relay's and its client's), at the tail when it became evictable, so heads are oldest; a
 * retired connection is in neither and no longer counted in n_live, n_reserved or its client's
 * n_conns; a client entry exists while it has a counted connection.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>

#include "server/http/gate_internal.h"

/* ---- client addresses ------------------------------------------------------------------------ */

/* The address of sa as 16 bytes and a family (IPv4-mapped IPv6 counts as IPv4). */
static void addr_key(const struct sockaddr *sa, unsigned char out[16], int *family)
{
    memset(out, 0, 16);
    if (sa->sa_family == AF_INET6) {
        const unsigned char *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(a, mapped, 12)) {
            memcpy(out, a + 12, 4);
            *family = 4;
        } else {
            memcpy(out, a, 16);
            *family = 6;
        }
        return;
    }
    if (sa->sa_family == AF_INET) memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    *family = 4;
}

static unsigned bucket_of(const unsigned char a[16])
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 16; i++) h = (h ^ a[i]) * 0x100000001b3ull;
    return (unsigned)(h ^ (h >> 29)) % GATE_CLIENT_BUCKETS;
}

gate_client *gate__client_join(gate_relay *g, const struct sockaddr *sa)
{
    if (!g->clients && !(g->clients = calloc(GATE_CLIENT_BUCKETS, sizeof *g->clients))) return NULL;
    unsigned char a[16];
    int fam;
    addr_key(sa, a, &fam);
    gate_client **b = &g->clients[bucket_of(a)];
    gate_client *cl = *b;
    while (cl && (cl->family != fam || memcmp(cl->addr, a, 16))) cl = cl->next;
    if (!cl) {
        if (!(cl = calloc(1, sizeof *cl))) return NULL;
        memcpy(cl->addr, a, 16);
        cl->family = fam;
        cl->next = *b;
        *b = cl;
    }
    cl->n_conns++;
    return cl;
}

static void client_leave(gate_relay *g, gate_client *cl)
{
    if (--cl->n_conns > 0) return;
    gate_client **b = &g->clients[bucket_of(cl->addr)];
    while (*b != cl) b = &(*b)->next;
    *b = cl->next;
    free(cl);
}

void gate__clients_free(gate_relay *g)
{
    for (int i = 0; g->clients && i < GATE_CLIENT_BUCKETS; i++)
        while (g->clients[i]) {
            gate_client *cl = g->clients[i];
            g->clients[i] = cl->next;
            free(cl);
        }
    free(g->clients);
    g->clients = NULL;
    free(g->by_fd);
    g->by_fd = NULL;
    g->cap_fd = 0;
}

/* ---- the evictable lists --------------------------------------------------------------------- */

static void ev_unlink(gate_conn *c)
{
    gate_relay *g = c->g;
    if (!c->evictable) return;
    c->evictable = 0;
    if (c->ev_prev) c->ev_prev->ev_next = c->ev_next;
    else g->ev_head = c->ev_next;
    if (c->ev_next) c->ev_next->ev_prev = c->ev_prev;
    else g->ev_tail = c->ev_prev;
    c->ev_prev = c->ev_next = NULL;
    gate_client *cl = c->cl;
    if (c->cev_prev) c->cev_prev->cev_next = c->cev_next;
    else cl->ev_head = c->cev_next;
    if (c->cev_next) c->cev_next->cev_prev = c->cev_prev;
    else cl->ev_tail = c->cev_prev;
    c->cev_prev = c->cev_next = NULL;
}

static void ev_push(gate_conn *c)
{
    gate_relay *g = c->g;
    gate_client *cl = c->cl;
    c->evictable = 1;
    c->ev_prev = g->ev_tail;
    c->ev_next = NULL;
    if (g->ev_tail) g->ev_tail->ev_next = c;
    else g->ev_head = c;
    g->ev_tail = c;
    c->cev_prev = cl->ev_tail;
    c->cev_next = NULL;
    if (cl->ev_tail) cl->ev_tail->cev_next = c;
    else cl->ev_head = c;
    cl->ev_tail = c;
}

void gate__evict_update(gate_conn *c)
{
    int want = !c->retired && c->cl && !c->closing && !c->pending_status &&
               (!c->attached || (c->p.n_forwarded == c->n_completed && c->p.state == GATE_HEAD));
    if (want && !c->evictable) ev_push(c);
    else if (!want && c->evictable) ev_unlink(c);
}

void gate__retire(gate_conn *c)
{
    if (c->retired) return;
    ev_unlink(c);
    c->retired = 1;
    gate_relay *g = c->g;
    g->n_live--;
    if (c->reserved) g->n_reserved--;
    if (c->cl) client_leave(g, c->cl);
    c->cl = NULL;
}

gate_conn *gate__victim(gate_relay *g, const gate_client *cl, int client_over)
{
    return client_over ? cl->ev_head : g->ev_head;
}

/* ---- the reserve ---------------------------------------------------------------------------- */

static int path_is(const char *path, const char *want)
{
    size_t n = strlen(want);
    return !strncmp(path, want, n) && (path[n] == 0 || path[n] == '?');
}

int gate__reserved_path(const gate_parser *p)
{
    return (!strcmp(p->method, "GET") || !strcmp(p->method, "HEAD")) &&
           (path_is(p->path, "/health") || path_is(p->path, "/metrics"));
}

/* ---- libmicrohttpd's descriptors ------------------------------------------------------------- */

int gate__map_fd(gate_relay *g, int fd, gate_conn *c)
{
    if (fd < 0) return 0;
    if (fd >= g->cap_fd) {
        if (!c) return 0;
        int cap = g->cap_fd ? g->cap_fd : 1024;
        while (cap <= fd) cap *= 2;
        gate_conn **v = realloc(g->by_fd, (size_t)cap * sizeof *v);
        if (!v) return -ENOMEM;
        memset(v + g->cap_fd, 0, (size_t)(cap - g->cap_fd) * sizeof *v);
        g->by_fd = v;
        g->cap_fd = cap;
    }
    g->by_fd[fd] = c;
    return 0;
}

gate_conn *gate__by_fd(const gate_relay *g, int fd)
{
    return fd >= 0 && fd < g->cap_fd ? g->by_fd[fd] : NULL;
}
