/*
 * qemu_exec.c — lets the Criterion runner start its test processes under qemu-user.
 *
 * Linked only into the cross-compiled test binary of `make test-arm64`. Criterion runs every
 * test in a child it creates by re-executing its own binary; under qemu-user that execve would
 * hand an aarch64 ELF to the host kernel, which cannot run it (no binfmt_misc registration is
 * assumed). With KVSERVE_QEMU naming the emulator, this execve (which the executable's symbol
 * interposes for the Criterion library) runs the target through it instead, keeping argv[0];
 * the emulator's settings (QEMU_LD_PREFIX, QEMU_CPU) pass on in the environment. Without
 * KVSERVE_QEMU it is the plain system call.
 */
#include <limits.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int execve(const char *path, char *const argv[], char *const envp[]);

int execve(const char *path, char *const argv[], char *const envp[])
{
    const char *qemu = getenv("KVSERVE_QEMU");
    if (!qemu || !*qemu) return (int)syscall(SYS_execve, path, argv, envp);
    int n = 0;
    while (argv[n]) n++;
    char **nv = malloc((size_t)(n + 5) * sizeof *nv);
    if (!nv) return -1;
    static char self[PATH_MAX];
    ssize_t len = readlink(path, self, sizeof self - 1); /* /proc/self/exe → the target binary */
    if (len > 0) self[len] = 0;
    nv[0] = (char *)qemu;
    nv[1] = "-0";
    nv[2] = n > 0 ? argv[0] : (char *)path;
    nv[3] = len > 0 ? self : (char *)path;
    for (int i = 1; i <= n; i++) nv[3 + i] = argv[i];
    int rc = (int)syscall(SYS_execve, qemu, nv, envp);
    free(nv);
    return rc;
}
