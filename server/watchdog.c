/*
 * watchdog.c — systemd's notifications (sd_notify(3)'s datagrams: READY=1, STOPPING=1, and the
 * watchdog's pings, sd_watchdog_enabled(3)'s protocol), without libsystemd.
 *
 * With WatchdogSec= in the unit, systemd sets WATCHDOG_USEC (and WATCHDOG_PID) and kills the
 * service when no "WATCHDOG=1" arrives for that long. The pings come from a loop timer every
 * WATCHDOG_USEC / 2, but only while the engine proves it is alive: its thread refreshes
 * heartbeat_us after every step and at least every ENGINE_HEARTBEAT_MS while idle, so a step
 * stuck in the backend (or a failed engine) stops the pings and systemd restarts the service.
 * While the model loads there is no engine yet and the loop's own liveness is what counts
 * (TimeoutStartSec= bounds the load).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "server/internal.h"

/* sd_notify(3)'s datagram protocol, without libsystemd. Silent when NOTIFY_SOCKET is unset. */
void srv__notify(const char *msg)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path) return;
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n >= sizeof a.sun_path) return;
    memcpy(a.sun_path, path, n);
    if (a.sun_path[0] == '@') a.sun_path[0] = 0; /* abstract namespace */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&a,
               (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) < 0)
        fprintf(stderr, "kvserve: sd_notify: %s\n", strerror(errno));
    close(fd);
}

int64_t srv__watchdog_usec(void)
{
    const char *u = getenv("WATCHDOG_USEC"), *p = getenv("WATCHDOG_PID");
    if (!u || !*u) return 0;
    if (p && *p && strtol(p, NULL, 10) != (long)getpid()) return 0; /* meant for another process */
    char *end;
    long long v = strtoll(u, &end, 10);
    return *end || v <= 0 ? 0 : (int64_t)v;
}

int srv__watchdog_ok(const engine_stats *st, int64_t now_us, int64_t usec)
{
    if (!st) return 1;                /* loading: no engine to ask */
    if (!st->alive) return 0;         /* failed: let systemd restart us */
    /* An idle engine beats every ENGINE_HEARTBEAT_MS: a shorter watchdog period than a few of
     * those must not read an idle engine as a stuck one. */
    int64_t stale = usec > 4 * ENGINE_HEARTBEAT_MS * 1000LL ? usec : 4 * ENGINE_HEARTBEAT_MS * 1000LL;
    return now_us - st->heartbeat_us < stale;
}

static void on_watchdog(uv_timer_t *t)
{
    srv *s = t->data;
    engine_stats st;
    if (s->e) engine_get_stats(s->e, &st);
    if (srv__watchdog_ok(s->e ? &st : NULL, clk_now_us(), s->watchdog_usec)) srv__notify("WATCHDOG=1");
    else if (!s->watchdog_missed++)
        fprintf(stderr, "kvserve: engine heartbeat %s: watchdog pings stopped\n",
                s->e && !st.alive ? "lost (engine failed)" : "stale (a step is stuck)");
}

void srv__watchdog_start(srv *s)
{
    s->watchdog_usec = srv__watchdog_usec();
    if (!s->watchdog_usec) return;
    uint64_t ms = (uint64_t)(s->watchdog_usec / 2000);
    if (ms < 1) ms = 1;
    uv_timer_init(&s->loop, &s->watchdog_timer);
    s->watchdog_timer.data = s;
    s->watchdog_on = 1;
    uv_timer_start(&s->watchdog_timer, on_watchdog, ms, ms);
}
