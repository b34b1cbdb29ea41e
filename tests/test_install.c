/*
 * test_install.c — the build's own targets: make install (PREFIX, DESTDIR, the unit's paths,
 * an edited config kept), the unit and the Debian package through systemd-analyze verify, make
 * deb installed into a throw-away root (the kvserve user, the unit enabled and not started,
 * the config a conffile), and the Makefile asking pkg-config nothing while it is only parsed (on
 * a fresh machine the packages are installed by `deps` first) nor needing the compiler then.
 *
 * They run make from the repository root with BUILD set to the tested binary's folder and that
 * binary marked old (-o): nothing is rebuilt, even when a source changed since (a rebuild there
 * with the default flags would relink a sanitizer build's objects without the sanitizer). systemd-analyze, dpkg and systemd-sysusers checks skip, with a message,
 * where the machine lacks them.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/server_harness.h"
#include "tests/test_util.h"

static char ti_dir[256];
static char ti_build[512];

static void ti_setup(void)
{
    if (access("Makefile", R_OK) || access("config/kvserve.service", R_OK)) cr_skip_test("run from the repository root");
    const char *bin = th_bin();
    if (access(bin, X_OK)) cr_skip_test("kvserve binary not found (set KVSERVE_BIN)");
    char *abs = realpath(bin, NULL);
    cr_assert_not_null(abs);
    snprintf(ti_build, sizeof ti_build, "%s", abs);
    free(abs);
    *strrchr(ti_build, '/') = 0;
    snprintf(ti_dir, sizeof ti_dir, "%s/kvserve-inst-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    cr_assert(mkdtemp(ti_dir));
}

static void ti_teardown(void)
{
    if (!ti_dir[0]) return;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ti_dir);
    cr_assert_eq(system(cmd), 0);
    ti_dir[0] = 0;
}

TestSuite(install, .init = ti_setup, .fini = ti_teardown, .timeout = 180);

/* Runs a shell command; returns its exit status (or -1). */
static int ti_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int ti_sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *ti_read(const char *dir, const char *rel)
{
    char p[1024];
    snprintf(p, sizeof p, "%s%s", dir, rel);
    char *t = tu_read_file(p, NULL);
    cr_assert_not_null(t, "%s was not installed", p);
    return t;
}

/* systemd-analyze verify of unit (a path inside root), with the host's system units copied in. */
static void ti_verify(const char *root, const char *unit)
{
    if (ti_sh("command -v systemd-analyze >/dev/null 2>&1")) {
        printf("install: systemd-analyze not installed: %s not verified\n", unit);
        return;
    }
    cr_assert_eq(ti_sh("mkdir -p '%s/usr/lib/systemd' && cp -a /usr/lib/systemd/system '%s/usr/lib/systemd/' 2>/dev/null", root, root), 0);
    cr_assert_eq(ti_sh("cd '%s' && systemd-analyze --root='%s' verify '.%s' >'%s/verify.log' 2>&1", root, root, unit, ti_dir), 0,
                 "systemd-analyze verify %s:\n%s", unit, tu_read_file(strcat(strcpy((char[600]){0}, ti_dir), "/verify.log"), NULL));
}

/* `make` alone builds the binary: no rule placed above `all` becomes the default goal. */
Test(install, make_alone_builds)
{
    cr_assert_eq(ti_sh("make -pn BUILD='%s' 2>/dev/null | grep -qx '.DEFAULT_GOAL := all'", ti_build), 0,
                 "the Makefile's default goal is not `all`");
}

Test(install, make_install_prefix_destdir)
{
    char dest[400];
    snprintf(dest, sizeof dest, "%s/dest", ti_dir);
    cr_assert_eq(ti_sh("make -s install -o '%s/kvserve' BUILD='%s' PREFIX=/opt/kv DESTDIR='%s' >/dev/null", ti_build, ti_build, dest), 0);
    struct stat st;
    char p[600];
    snprintf(p, sizeof p, "%s/opt/kv/bin/kvserve", dest);
    cr_assert(stat(p, &st) == 0 && (st.st_mode & 0111), "%s is not an executable", p);
    char *unit = ti_read(dest, "/opt/kv/lib/systemd/system/kvserve.service");
    cr_assert(strstr(unit, "ExecStart=/opt/kv/bin/kvserve serve --config /etc/kvserve/kvserve.conf"), "%s", unit);
    cr_assert(strstr(unit, "\nWatchdogSec="), "the unit sets the watchdog");
    cr_assert(strstr(unit, "\nDynamicUser=yes"));
    char *conf = ti_read(dest, "/etc/kvserve/kvserve.conf"), *orig = tu_read_file("config/kvserve.conf", NULL);
    cr_assert_str_eq(conf, orig, "the documented config");
    /* an edited config survives a second install */
    cr_assert_eq(ti_sh("echo 'port = 9999' >>'%s/etc/kvserve/kvserve.conf'", dest), 0);
    cr_assert_eq(ti_sh("make -s install -o '%s/kvserve' BUILD='%s' PREFIX=/opt/kv DESTDIR='%s' >/dev/null", ti_build, ti_build, dest), 0);
    char *kept = ti_read(dest, "/etc/kvserve/kvserve.conf");
    cr_assert(strstr(kept, "port = 9999"), "the edited config was overwritten");
    free(unit);
    free(conf);
    free(orig);
    free(kept);
    /* the default PREFIX puts the unit where systemd looks (/usr/local/lib/systemd/system) */
    snprintf(dest, sizeof dest, "%s/dest-default", ti_dir);
    cr_assert_eq(ti_sh("make -s install -o '%s/kvserve' BUILD='%s' DESTDIR='%s' >/dev/null", ti_build, ti_build, dest), 0);
    ti_verify(dest, "/usr/local/lib/systemd/system/kvserve.service");
}

Test(install, make_deb_installs_and_verifies)
{
    if (ti_sh("command -v dpkg-deb >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1"))
        cr_skip_test("dpkg / dpkg-deb not installed: no Debian package built");
    char out[600];
    snprintf(out, sizeof out, "%s/deb.txt", ti_dir);
    cr_assert_eq(ti_sh("scripts/mkdeb.sh '%s' '%s' >'%s' 2>/dev/null", ti_build, ti_dir, out), 0, "mkdeb.sh failed");
    char *deb = tu_read_file(out, NULL);
    deb[strcspn(deb, "\n")] = 0;
    cr_assert(strstr(deb, "/kvserve_") && strstr(deb, ".deb"), "%s", deb);
    cr_assert_eq(ti_sh("dpkg-deb -f '%s' Package | grep -qx kvserve", deb), 0);
    cr_assert_eq(ti_sh("dpkg-deb -f '%s' Depends | grep -q libmicrohttpd12", deb), 0, "Depends names the runtime libraries");
    cr_assert_eq(ti_sh("dpkg-deb -I '%s' conffiles | grep -qx /etc/kvserve/kvserve.conf", deb), 0, "the config is a conffile");
    cr_assert_eq(ti_sh("dpkg-deb -I '%s' postinst | grep -Ev '^[[:space:]]*(#|echo)' | grep -Eq 'systemctl.*[[:space:]]start([[:space:]]|$)'", deb), 1,
                 "the postinst must not start the service");
    /* install into a throw-away root: maintainer scripts run outside a chroot with DPKG_ROOT */
    char root[400];
    snprintf(root, sizeof root, "%s/root", ti_dir);
    cr_assert_eq(ti_sh("mkdir -p '%s/var/lib/dpkg/updates' '%s/var/lib/dpkg/info' && touch '%s/var/lib/dpkg/status'", root, root, root), 0);
    cr_assert_eq(ti_sh("dpkg --root='%s' --force-script-chrootless --force-depends --force-not-root --log=/dev/null "
                       "-i '%s' >'%s/dpkg.log' 2>&1", root, deb, ti_dir), 0, "dpkg -i failed:\n%s",
                 tu_read_file(strcat(strcpy((char[600]){0}, ti_dir), "/dpkg.log"), NULL));
    char *unit = ti_read(root, "/lib/systemd/system/kvserve.service");
    cr_assert(strstr(unit, "ExecStart=/usr/bin/kvserve serve --config /etc/kvserve/kvserve.conf"), "%s", unit);
    cr_assert(strstr(unit, "\nUser=kvserve\nGroup=kvserve\n"), "the package runs as the kvserve user: %s", unit);
    free(ti_read(root, "/etc/kvserve/kvserve.conf"));
    if (!ti_sh("command -v systemd-sysusers >/dev/null 2>&1")) {
        char *pw = ti_read(root, "/etc/passwd");
        cr_assert(strstr(pw, "\nkvserve:") || !strncmp(pw, "kvserve:", 8), "no kvserve user:\n%s", pw);
        free(pw);
    } else {
        printf("install: systemd-sysusers not installed: the kvserve user is made by adduser on a real install\n");
    }
    if (!ti_sh("command -v systemctl >/dev/null 2>&1")) {
        char p[600];
        snprintf(p, sizeof p, "%s/etc/systemd/system/multi-user.target.wants/kvserve.service", root);
        struct stat st;
        cr_assert_eq(lstat(p, &st), 0, "kvserve.service is not enabled");
    }
    ti_verify(root, "/lib/systemd/system/kvserve.service");
    free(unit);
    free(deb);
}

/* Parsing the Makefile runs no pkg-config (a fresh machine has none yet): make -n deps. */
Test(install, makefile_parse_runs_no_pkg_config)
{
    char shim[600];
    snprintf(shim, sizeof shim, "%s/bin", ti_dir);
    cr_assert_eq(ti_sh("mkdir -p '%s' && printf '#!/bin/sh\\necho called >>%s/pkg-config.log\\nexit 1\\n' >'%s/pkg-config' && "
                       "chmod +x '%s/pkg-config'", shim, ti_dir, shim, shim), 0);
    cr_assert_eq(ti_sh("PATH='%s':\"$PATH\" make -n -s BUILD='%s' deps >/dev/null 2>&1", shim, ti_build), 0);
    char p[600];
    snprintf(p, sizeof p, "%s/pkg-config.log", ti_dir);
    cr_assert(access(p, F_OK) != 0, "pkg-config ran while the Makefile was parsed");
    /* it runs when a compile recipe needs the flags (by then deps.sh has installed it) */
    cr_assert_eq(ti_sh("PATH='%s':\"$PATH\" make -n -s BUILD='%s/b' '%s/b/model/utf8.o' >/dev/null 2>&1", shim, ti_dir, ti_dir), 0);
    cr_assert(access(p, F_OK) == 0, "pkg-config did not run for the compile");
}

/* Without a compiler yet (deps installs it) the Makefile still plans the SIMD kernel files of
 * the host's architecture (x86-64: the AVX2 ones), not a build without them. */
Test(install, makefile_parse_without_a_compiler)
{
    if (ti_sh("uname -m | grep -qx x86_64")) cr_skip_test("not an x86-64 host");
    cr_assert_eq(ti_sh("make -n -s BUILD='%s/b' CC=/nonexistent/cc '%s/b/libkvserve.a' 2>/dev/null | "
                       "grep -Eq 'cpu/[a-z_0-9]+_avx2\\.c'", ti_dir, ti_dir), 0,
                 "no SIMD kernel file is planned when the compiler is missing at parse time");
}
