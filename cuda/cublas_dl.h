/*
 * cublas_dl.h — cuBLAS loaded at run time: one table of the functions kvserve calls.
 *
 * kvserve does not link cuBLAS. cuBLAS and cuBLAS-Lt are several hundred MiB of code whose
 * relocation and zero-initialised data cost ~145 MiB of resident memory the moment the process
 * starts, also when it runs on the CPU and never calls them. Instead the CUDA backend loads the
 * library when it is first created (cuda_blas_load) and every cuBLAS call goes through the table
 * cuda_blas() returns. The headers are still used for the types and the symbol names, and
 * cublas_dl.cu checks at compile time that each field's type is the header's prototype.
 *
 *   const cuda_blas_api *api = cuda_blas_load(err, sizeof err);   // once, in backend creation
 *   cuda_blas()->gemm_ex(handle, ...);                             // everywhere after that
 *
 * Where the library is looked for, in order (cuda_blas_load): CUDA_BLAS_SONAME through the
 * dynamic loader's search (LD_LIBRARY_PATH, the binary's RUNPATH — the build's CUDA library
 * directory —, the ld.so cache, the system directories); CUDA_BLAS_SONAME in the directory of the
 * running executable (a toolkit's libraries copied next to the binary); then the unversioned
 * libcublas.so through the loader's search. A loaded library is never unloaded.
 *
 * C and CUDA C++. Thread-safe: loading is serialised; the table is read-only once published.
 */
#ifndef KVSERVE_CUDA_CUBLAS_DL_H
#define KVSERVE_CUDA_CUBLAS_DL_H

#include <stddef.h>

#include <cublas_v2.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_BLAS__STR_(x) #x
#define CUDA_BLAS__STR(x) CUDA_BLAS__STR_(x)

/* The shared library of the toolkit the build used: cuBLAS's SONAME is libcublas.so.MAJOR. */
#define CUDA_BLAS_SONAME "libcublas.so." CUDA_BLAS__STR(CUBLAS_VER_MAJOR)
/* The last resort: the development symlink, whatever major version it points at. */
#define CUDA_BLAS_FALLBACK "libcublas.so"

/* The cuBLAS functions kvserve uses, with cublas_v2.h's prototypes (each field is resolved from
 * the symbol the header maps the name to: cublasCreate → cublasCreate_v2, …). */
typedef struct cuda_blas_api {
    void *lib;       /* the dlopen handle (never closed once published) */
    char name[1024]; /* the name or path it was opened by (truncated if longer) */
    cublasStatus_t (*create)(cublasHandle_t *handle);
    cublasStatus_t (*destroy)(cublasHandle_t handle);
    cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream);
    cublasStatus_t (*set_workspace)(cublasHandle_t handle, void *workspace, size_t workspace_bytes);
    cublasStatus_t (*set_math_mode)(cublasHandle_t handle, cublasMath_t mode);
    cublasStatus_t (*gemm_ex)(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const void *alpha,
                              const void *A, cudaDataType Atype, int lda, const void *B,
                              cudaDataType Btype, int ldb, const void *beta, void *C,
                              cudaDataType Ctype, int ldc, cublasComputeType_t compute,
                              cublasGemmAlgo_t algo);
    const char *(*get_status_string)(cublasStatus_t status);
} cuda_blas_api;

/* Opens the library `lib` (a name for the loader's search, or a path) and resolves every function
 * of the table into *api. 0 on success; on failure *api is unchanged, the library is closed again,
 * and err gets one line naming the library and, when it opened, the first missing symbol:
 * -ENOENT (the library cannot be opened) or -ENOSYS (a symbol is missing). `lib` is borrowed.
 * Publishes nothing: see cuda_blas_load. */
int cuda_blas_open(const char *lib, cuda_blas_api *api, char *err, size_t err_len);

/* The search of cuda_blas_load for any pair of names, into *api (nothing published): soname
 * through the loader's search, then soname in the running executable's directory, then
 * fallback through the loader's search. The first library that opens decides (0, or -ENOSYS
 * when it lacks a symbol), and so does a file beside the executable that does not open (-ENOENT
 * with its reason); -ENOENT when none is found, with err naming soname and the places tried.
 * On failure *api is unchanged. cuda_blas_load uses CUDA_BLAS_SONAME and CUDA_BLAS_FALLBACK;
 * other names are for tests. */
int cuda_blas_search(const char *soname, const char *fallback, cuda_blas_api *api, char *err,
                     size_t err_len);

/* Loads cuBLAS for the process (cuda_blas_search of CUDA_BLAS_SONAME, CUDA_BLAS_FALLBACK) and
 * publishes the table;
 * later calls return the same table at once. Returns the table, or NULL with one line in err
 * naming what was tried, with nothing published (a later call tries again). */
const cuda_blas_api *cuda_blas_load(char *err, size_t err_len);

/* The published table, or NULL before a successful cuda_blas_load. */
const cuda_blas_api *cuda_blas(void);

/* cuBLAS's text for a status (the published table's cublasGetStatusString), or a generic text
 * when nothing is loaded yet. Never NULL. */
const char *cuda_blas_status_string(cublasStatus_t status);

#ifdef __cplusplus
}
#endif

#endif
