/*
 * test_cublas_dl.c — the run-time cuBLAS loader (cuda/cublas_dl.h), on the CPU (suite "cublas_dl").
 *
 * No GPU is needed: opening cuBLAS and resolving its symbols does not touch a device. The error
 * paths use a library that does not exist, a file that is not a library and a real library that
 * is not cuBLAS; each must give one line naming the library (and the missing symbol) and leave
 * the caller's table as it was. The default search runs where the toolkit's cuBLAS is installed
 * and is checked to fail cleanly where it is not; the search order (the versioned name, beside
 * the executable, the fallback name) runs with names of its own. Last, the point of the loader: a
 * process that runs on the CPU has no cuBLAS mapped. Compiled in CUDA builds; without CUDA one test
 * says so.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "engine/backend.h"
#include "tests/test_util.h"

#ifdef KVSERVE_CUDA

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include "cli/device.h"
#include "cuda/cublas_dl.h"
#include "cuda/cuda_backend.h"

/* A table filled with a byte pattern, to see that a failed open wrote nothing. */
static void tbd_poison(cuda_blas_api *api)
{
    memset(api, 0xa5, sizeof *api);
}

static int tbd_is_poisoned(const cuda_blas_api *api)
{
    const unsigned char *p = (const unsigned char *)api;
    for (size_t i = 0; i < sizeof *api; i++)
        if (p[i] != 0xa5) return 0;
    return 1;
}

/* Opens lib expecting failure rc; checks the line names every string of want[] and the table. */
static void tbd_expect_fail(const char *lib, int rc_want, const char *const *want, int n_want)
{
    cuda_blas_api api;
    tbd_poison(&api);
    char err[512] = "";
    int rc = cuda_blas_open(lib, &api, err, sizeof err);
    printf("cublas_dl: open %s -> %d: %s\n", lib, rc, err);
    cr_assert_eq(rc, rc_want, "open %s: rc %d, expected %d (%s)", lib, rc, rc_want, err);
    cr_assert(tbd_is_poisoned(&api), "a failed open left the table as it was");
    cr_assert(strchr(err, '\n') == NULL && err[0], "one line: '%s'", err);
    cr_assert(strstr(err, "cuBLAS") != NULL, "names cuBLAS: '%s'", err);
    for (int i = 0; i < n_want; i++)
        cr_assert(strstr(err, want[i]) != NULL, "names '%s': '%s'", want[i], err);
}

Test(cublas_dl, missing_library_is_a_clear_error)
{
    const char *lib = "libkvserve-no-such-cublas.so.99";
    const char *want[] = {lib};
    tbd_expect_fail(lib, -ENOENT, want, 1);
    cr_assert_null(cuda_blas(), "nothing is published by cuda_blas_open");
    cr_assert_not_null(cuda_blas_status_string(CUBLAS_STATUS_SUCCESS),
                       "a text even when nothing is loaded");
}

Test(cublas_dl, file_that_is_not_a_library)
{
    /* an existing file that is no shared object: dlopen refuses it, the line says which */
    char path[1024];
    snprintf(path, sizeof path, "%s/stories260K.gguf", tu_data_dir());
    FILE *f = fopen(path, "rb");
    if (!f) cr_skip_test("%s missing: the not-a-library case is not run", path);
    fclose(f);
    const char *want[] = {path};
    tbd_expect_fail(path, -ENOENT, want, 1);
}

Test(cublas_dl, library_without_the_symbols)
{
    /* libm opens everywhere glibc does, and exports no cuBLAS function: the first one missing is
     * the header's real name of cublasCreate */
    const char *lib = "libm.so.6";
    const char *want[] = {lib, CUDA_BLAS__STR(cublasCreate)};
    tbd_expect_fail(lib, -ENOSYS, want, 2);
    cr_assert_null(cuda_blas());
}

Test(cublas_dl, default_search)
{
    char err[512] = "";
    const cuda_blas_api *t = cuda_blas_load(err, sizeof err);
    if (!t) {
        /* the toolkit's cuBLAS is not installed here: the failure itself must be clean */
        printf("cublas_dl: %s not found here: %s\n", CUDA_BLAS_SONAME, err);
        cr_assert(strstr(err, CUDA_BLAS_SONAME) != NULL, "names the library: '%s'", err);
        cr_assert(strchr(err, '\n') == NULL, "one line: '%s'", err);
        cr_assert_null(cuda_blas(), "nothing published after a failed load");
        return;
    }
    printf("cublas_dl: loaded %s\n", t->name);
    cr_assert_eq(cuda_blas(), t, "the published table");
    cr_assert(t->lib && t->create && t->destroy && t->set_stream && t->set_workspace &&
                  t->set_math_mode && t->gemm_ex && t->get_status_string,
              "every function resolved");
    cr_assert_eq(cuda_blas_load(err, sizeof err), t, "a second load returns the same table");
    const char *s = cuda_blas_status_string(CUBLAS_STATUS_NOT_INITIALIZED);
    cr_assert(s && strcmp(s, cuda_blas_status_string(CUBLAS_STATUS_SUCCESS)) != 0,
              "cuBLAS's own texts");
    /* a failed open afterwards changes neither the caller's table nor the published one */
    cuda_blas_api copy = *t;
    char err2[512];
    cr_assert_eq(cuda_blas_open("libkvserve-no-such-cublas.so.99", &copy, err2, sizeof err2),
                 -ENOENT);
    cr_assert(!memcmp(&copy, t, sizeof copy));
    cr_assert_eq(cuda_blas(), t);
}

/* Nothing found anywhere: -ENOENT, one line naming both names and what to do. */
Test(cublas_dl, search_finds_nothing)
{
    char so[64], fb[64], err[1024] = "";
    snprintf(so, sizeof so, "libkvserve-none-%d.so.1", (int)getpid());
    snprintf(fb, sizeof fb, "libkvserve-none-%d.so", (int)getpid());
    cuda_blas_api api;
    tbd_poison(&api);
    int rc = cuda_blas_search(so, fb, &api, err, sizeof err);
    printf("cublas_dl: search %s, %s -> %d: %s\n", so, fb, rc, err);
    cr_assert_eq(rc, -ENOENT);
    cr_assert(tbd_is_poisoned(&api), "the table is unchanged");
    cr_assert(strchr(err, '\n') == NULL, "one line: '%s'", err);
    cr_assert(strstr(err, so) && strstr(err, fb) && strstr(err, "LD_LIBRARY_PATH"), "'%s'", err);
    cr_assert_null(cuda_blas());
}

/* The fallback name is tried after the versioned one: libm opens, so its missing symbol is the
 * answer (and not the versioned name's "cannot open"). */
Test(cublas_dl, search_tries_the_fallback)
{
    char so[64], err[1024] = "";
    snprintf(so, sizeof so, "libkvserve-none-%d.so.1", (int)getpid());
    cuda_blas_api api;
    tbd_poison(&api);
    int rc = cuda_blas_search(so, "libm.so.6", &api, err, sizeof err);
    cr_assert_eq(rc, -ENOSYS, "rc %d: %s", rc, err);
    cr_assert(tbd_is_poisoned(&api));
    cr_assert(strstr(err, "libm.so.6") && strstr(err, CUDA_BLAS__STR(cublasCreate)), "'%s'", err);
}

/* A library next to the executable (a toolkit's libraries carried beside the binary) is found
 * when the loader's search has none: a link named like the library, in the test binary's
 * directory, to libm. */
Test(cublas_dl, search_looks_next_to_the_executable)
{
    void *m = dlopen("libm.so.6", RTLD_NOW);
    struct link_map *lm = NULL;
    if (!m || dlinfo(m, RTLD_DI_LINKMAP, &lm) || !lm || lm->l_name[0] != '/')
        cr_skip_test("cannot find libm's path here");
    char exe[2048], so[64], link[2304], err[1024] = "";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) cr_skip_test("no /proc/self/exe here");
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0';
    snprintf(so, sizeof so, "libkvserve-test-%d.so.1", (int)getpid());
    snprintf(link, sizeof link, "%s/%s", exe, so);
    if (symlink(lm->l_name, link)) cr_skip_test("cannot write %s: %s", link, strerror(errno));
    cuda_blas_api api;
    tbd_poison(&api);
    int rc = cuda_blas_search(so, "libkvserve-none.so", &api, err, sizeof err);
    unlink(link);
    dlclose(m);
    printf("cublas_dl: search %s -> %d: %s\n", so, rc, err);
    cr_assert_eq(rc, -ENOSYS, "found next to the executable, then no cuBLAS symbol: %d (%s)", rc,
                 err);
    cr_assert(strstr(err, link) != NULL, "names the path beside the executable: '%s'", err);
    cr_assert(tbd_is_poisoned(&api));
}

/* The reason the loader exists: a CPU run maps no cuBLAS (this test binary is linked like
 * kvserve; each test runs in its own process). */
Test(cublas_dl, cpu_run_maps_no_cublas)
{
    char err[256];
    backend *be = be_create("cpu", 1, err, sizeof err);
    cr_assert_not_null(be, "%s", err);
    be_destroy(be);
    char why[256];
    if (!cuda_is_available(why, sizeof why)) {
        be = be_create("auto", 1, err, sizeof err);
        cr_assert_not_null(be, "%s", err);
        cr_assert_str_eq(be->name, "cpu");
        be_destroy(be);
    }
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) cr_skip_test("no /proc/self/maps here");
    char line[4096];
    int mapped = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "libcublas")) mapped = 1, printf("cublas_dl: mapped: %s", line);
    fclose(f);
    cr_assert(!mapped, "a CPU run must not map cuBLAS");
    cr_assert_null(cuda_blas());
}

#else

Test(cublas_dl, needs_cuda_build)
{
    cr_skip_test(
        "built without the CUDA backend (no nvcc, or CUDA=0): the cuBLAS loader is not compiled");
}

#endif
