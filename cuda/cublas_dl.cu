/*
 * cublas_dl.cu — cuBLAS through dlopen (cublas_dl.h): the symbol table, the search, the one
 * process-wide published table.
 *
 * CUDA_BLAS__SYMS is the single list of (table field, cuBLAS name) pairs: it generates both the
 * compile-time check that each field has the header's prototype and the run-time resolution.
 * Invariant: cuda__blas_pub is NULL or points at a table every field of which is resolved; it is
 * written once, under cuda__blas_mu, and read with acquire loads.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <type_traits>

#include "cuda/cublas_dl.h"

#define CUDA_BLAS__SYMS(X)                                                                         \
    X(create, cublasCreate)                                                                        \
    X(destroy, cublasDestroy)                                                                      \
    X(set_stream, cublasSetStream)                                                                 \
    X(set_workspace, cublasSetWorkspace)                                                           \
    X(set_math_mode, cublasSetMathMode)                                                            \
    X(gemm_ex, cublasGemmEx)                                                                       \
    X(get_status_string, cublasGetStatusString)

/* The field's pointer type must be the header's prototype: static_cast to it selects the
 * matching declaration (cublasGemmEx is overloaded in C++) and fails to compile if none is. The
 * operand is unevaluated, so no reference to the symbol reaches the linker. */
#define CUDA_BLAS__CHECK_TYPE(field, fn)                                                           \
    static_assert(std::is_same<decltype(static_cast<decltype(cuda_blas_api::field)>(&fn)),         \
                               decltype(cuda_blas_api::field)>::value,                             \
                  "cuda_blas_api." #field " is not the prototype of " #fn);
CUDA_BLAS__SYMS(CUDA_BLAS__CHECK_TYPE)
#define CUDA_BLAS__ONE(field, fn) +1
enum { CUDA_BLAS__N = 0 CUDA_BLAS__SYMS(CUDA_BLAS__ONE) };
#undef CUDA_BLAS__ONE

static pthread_mutex_t cuda__blas_mu = PTHREAD_MUTEX_INITIALIZER;
static cuda_blas_api cuda__blas_table;
static const cuda_blas_api *cuda__blas_pub;
/* The executable-directory candidate's path (cuda__blas_table.name may point at it). */
static char cuda__blas_exe_lib[4096];

/* Resolves one symbol into *slot; 0, or -ENOSYS with the line in err. */
static int cuda__blas_sym(void *h, const char *lib, const char *sym, void **slot, char *err,
                          size_t err_len)
{
    dlerror();
    void *p = dlsym(h, sym);
    if (!p) {
        const char *why = dlerror();
        snprintf(err, err_len, "CUDA: cuBLAS library %s lacks the symbol %s (%s)", lib, sym,
                 why ? why : "resolved to NULL");
        return -ENOSYS;
    }
    *slot = p;
    return 0;
}

extern "C" int cuda_blas_open(const char *lib, cuda_blas_api *api, char *err, size_t err_len)
{
    dlerror();
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(err, err_len, "CUDA: cannot load cuBLAS library %s (%s)", lib,
                 why ? why : "unknown error");
        return -ENOENT;
    }
    void *p[CUDA_BLAS__N];
    int n = 0, rc = 0;
#define CUDA_BLAS__RESOLVE(field, fn)                                                              \
    if (!rc) rc = cuda__blas_sym(h, lib, CUDA_BLAS__STR(fn), &p[n++], err, err_len);
    CUDA_BLAS__SYMS(CUDA_BLAS__RESOLVE)
#undef CUDA_BLAS__RESOLVE
    if (rc) {
        dlclose(h);
        return rc;
    }
    cuda_blas_api t;
    t.lib = h;
    t.name = lib;
    n = 0;
#define CUDA_BLAS__STORE(field, fn) t.field = reinterpret_cast<decltype(t.field)>(p[n++]);
    CUDA_BLAS__SYMS(CUDA_BLAS__STORE)
#undef CUDA_BLAS__STORE
    *api = t;
    return 0;
}

/* The directory of the running executable + CUDA_BLAS_SONAME into buf; 0, or -ENOENT when the
 * executable's path is unknown or too long. */
static int cuda__blas_exe_candidate(char *buf, size_t len)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -ENOENT;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return -ENOENT;
    *slash = '\0';
    int w = snprintf(buf, len, "%s/%s", exe, CUDA_BLAS_SONAME);
    return w > 0 && (size_t)w < len ? 0 : -ENOENT;
}

/* Tries the candidates in order; 0 with the table in cuda__blas_table, or the first failure's
 * line in err (a missing symbol stops the search: that library is the wrong one, not absent). */
static int cuda__blas_search(char *err, size_t err_len)
{
    int rc = cuda_blas_open(CUDA_BLAS_SONAME, &cuda__blas_table, err, err_len);
    if (rc != -ENOENT) return rc;
    char other[512];
    if (!cuda__blas_exe_candidate(cuda__blas_exe_lib, sizeof cuda__blas_exe_lib)) {
        int r = cuda_blas_open(cuda__blas_exe_lib, &cuda__blas_table, other, sizeof other);
        if (r != -ENOENT) {
            if (r) snprintf(err, err_len, "%s", other);
            return r;
        }
    }
    int r = cuda_blas_open(CUDA_BLAS_FALLBACK, &cuda__blas_table, other, sizeof other);
    if (r == -ENOENT) {
        size_t used = err_len ? strlen(err) : 0;
        if (used + 1 < err_len)
            snprintf(err + used, err_len - used,
                     "; neither next to the executable nor as %s: put the CUDA toolkit's "
                     "library directory on LD_LIBRARY_PATH",
                     CUDA_BLAS_FALLBACK);
    } else if (r) {
        snprintf(err, err_len, "%s", other);
    }
    return r;
}

extern "C" const cuda_blas_api *cuda_blas_load(char *err, size_t err_len)
{
    const cuda_blas_api *t = cuda_blas();
    if (t) return t;
    pthread_mutex_lock(&cuda__blas_mu);
    t = cuda__blas_pub;
    if (!t && !cuda__blas_search(err, err_len)) {
        t = &cuda__blas_table;
        __atomic_store_n(&cuda__blas_pub, t, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&cuda__blas_mu);
    return t;
}

extern "C" const cuda_blas_api *cuda_blas(void)
{
    return __atomic_load_n(&cuda__blas_pub, __ATOMIC_ACQUIRE);
}

extern "C" const char *cuda_blas_status_string(cublasStatus_t status)
{
    const cuda_blas_api *t = cuda_blas();
    const char *s = t ? t->get_status_string(status) : NULL;
    return s ? s : "cuBLAS status (library not loaded)";
}
