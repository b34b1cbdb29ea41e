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
    memset(&t, 0, sizeof t);
    t.lib = h;
    snprintf(t.name, sizeof t.name, "%s", lib);
    n = 0;
#define CUDA_BLAS__STORE(field, fn) t.field = reinterpret_cast<decltype(t.field)>(p[n++]);
    CUDA_BLAS__SYMS(CUDA_BLAS__STORE)
#undef CUDA_BLAS__STORE
    *api = t;
    return 0;
}

/* The directory of the running executable + soname into buf; 0, or -ENOENT when the
 * executable's path is unknown or too long. */
static int cuda__blas_exe_candidate(const char *soname, char *buf, size_t len)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -ENOENT;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return -ENOENT;
    *slash = '\0';
    int w = snprintf(buf, len, "%s/%s", exe, soname);
    return w > 0 && (size_t)w < len ? 0 : -ENOENT;
}

extern "C" int cuda_blas_search(const char *soname, const char *fallback, cuda_blas_api *api,
                                char *err, size_t err_len)
{
    int rc = cuda_blas_open(soname, api, err, err_len);
    if (rc != -ENOENT) return rc;
    /* the first attempt's line stays in err unless a later library opens and fails otherwise */
    char other[512], path[4096 + 256];
    /* a file beside the executable decides, also when it does not open (its libcublasLt missing,
     * say): its reason is the one worth reading */
    if (!cuda__blas_exe_candidate(soname, path, sizeof path) && !access(path, F_OK)) {
        rc = cuda_blas_open(path, api, other, sizeof other);
        if (rc) snprintf(err, err_len, "%s", other);
        return rc;
    }
    rc = cuda_blas_open(fallback, api, other, sizeof other);
    if (rc == -ENOENT) {
        size_t used = err_len ? strlen(err) : 0;
        if (used + 1 < err_len)
            snprintf(err + used, err_len - used,
                     "; neither next to the executable nor as %s: put the CUDA toolkit's "
                     "library directory on LD_LIBRARY_PATH",
                     fallback);
    } else if (rc) {
        snprintf(err, err_len, "%s", other);
    }
    return rc;
}

extern "C" const cuda_blas_api *cuda_blas_load(char *err, size_t err_len)
{
    const cuda_blas_api *t = cuda_blas();
    if (t) return t;
    pthread_mutex_lock(&cuda__blas_mu);
    t = cuda__blas_pub;
    if (!t &&
        !cuda_blas_search(CUDA_BLAS_SONAME, CUDA_BLAS_FALLBACK, &cuda__blas_table, err, err_len)) {
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
