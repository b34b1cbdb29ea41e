/*
 * stall_stat.c — a preloaded library (LD_PRELOAD) for the tests: a mount that stalls, without one.
 * stat() of a path containing $KVSERVE_STALL_PATH never returns once the file $KVSERVE_STALL_WHEN
 * exists, as stat() on a hung NFS or FUSE mount does (and creates $KVSERVE_STALL_WHEN.stalled, so
 * that a test knows a call is stuck); every other call is libc's. Used by
 * tests/test_hardening.c on the server's watch of its model file.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int stalls(const char *path)
{
    const char *mark = getenv("KVSERVE_STALL_PATH"), *when = getenv("KVSERVE_STALL_WHEN");
    if (!(mark && when && *mark && path && strstr(path, mark) && access(when, F_OK) == 0)) return 0;
    char stalled[4096];
    snprintf(stalled, sizeof stalled, "%s.stalled", when);
    int fd = open(stalled, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
    return 1;
}

int stat(const char *restrict path, struct stat *restrict st)
{
    while (stalls(path)) pause();
    int (*real)(const char *, struct stat *) = (int (*)(const char *, struct stat *))dlsym(RTLD_NEXT, "stat");
    return real(path, st);
}

int stat64(const char *restrict path, struct stat64 *restrict st)
{
    while (stalls(path)) pause();
    int (*real)(const char *, struct stat64 *) = (int (*)(const char *, struct stat64 *))dlsym(RTLD_NEXT, "stat64");
    return real(path, st);
}
