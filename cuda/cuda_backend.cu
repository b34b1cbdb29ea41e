/*
 * cuda_backend.cu — the CUDA backend of engine/backend.h: the device, its memory, the weights and
 * the vtable. The ops live with their op family, one launcher file each (cuda/NAME.cu), whose
 * kernels are in an emulable header (cuda/NAME_kernels.h) where there are any:
 *
 *   cuda_backend.cu  device selection, memory, weights, pinned host buffers, synchronisation,
 *                    lifetime and the vtable (this file)
 *   graph.cu         CUDA graphs: decode steps captured once per shape and replayed
 *   meta.cu          begin(): the batch packed and uploaded; the attention work list of the step
 *   gemm.cu          matmul routing; dense GEMMs through cuBLAS; f32 / f16 / bf16 conversions
 *   qmatvec.cu       quantised weights: activations quantised to 8-bit blocks, the integer
 *                    matrix-vector mmvq for decode rows, routing to mmq for more
 *   qgemm.cu         quantised weights, prefill rows: the integer GEMM mmq (and F16 tiles for
 *                    cuBLAS, kept to compare against)
 *   attn.cu          attention over the paged KV cache (one kernel family, split-K)
 *   norm_rope.cu     RMSNorm (and the fused residual add), RoPE and the sink shift
 *   kv.cu            the KV arena (init, block copies, the second tier's transfers, reads) and
 *                    the K/V store (fused with RoPE as an extra)
 *   elementwise.cu   SiLU × up, GELU × up, add, scale, soft-cap
 *   gather.cu        embedding rows (dense and quantised tables) and the logit rows
 *   sample.cu        greedy argmax on the device
 *   kern.cu          the kernel table of a compute capability (kern.h)
 *   cublas_dl.cu     cuBLAS, loaded when the first backend is created
 *
 * The kernel table (cuda/kern.h, kern.cu): the ops reach every kernel through cb->k, a table of
 * launchers filled once here, when the backend is created, for the device's compute capability:
 * attention and its split-K merge; the dense GEMM and the conversions around it; the activation
 * quantiser and, per quantised type, the integer matvec and GEMM, the dequantisation and the
 * embedding; RMSNorm, RoPE
 * and the sink shift; the K/V store; the element-wise ops; the row gathers; argmax. Today every
 * capability gets the sm_80 baseline; kern.h says how a kernel for a newer GPU is added.
 *
 * Headers host and device share are listed in cuda/launch.h; device code several families share
 * is in cuda/device.h; the backend's state and the functions between files are in
 * cuda/internal.h; the checking of every CUDA and cuBLAS call in cuda/errors.h. The check
 * programs are in cuda/check/: the kernel headers run on the CPU under an emulation of the CUDA
 * built-ins (emu_cuda.h; attn_emu.cc, quant_emu.cc, ops_emu.cc, run by make test), and every op
 * is compared with the CPU backend on a GPU (kernel_checks.c, in make test-cuda and in the GPU
 * check program gpu_check.c of scripts/gpu-check.sh).
 *
 * Weights: every matrix keeps its type on the device: F32, F16 and BF16 for cuBLAS, and the
 * quantised types (Q8_0, the legacy and K-quants, IQ4_NL, IQ4_XS) as the file's blocks, which
 * the integer kernels multiply with activations quantised to 8-bit blocks on the tensor cores
 * (mmvq for decode, mmq for prefill), so GPU memory and decode bandwidth are those of the file.
 * Vectors (norms, biases) become F32.
 *
 * Step protocol: begin() packs the batch into a pinned buffer and uploads it with one
 * asynchronous copy; the ops queue kernels on one stream; to_host()/sync() wait. Only logits
 * and batch metadata cross the bus. With CUDA graphs on (opt-in), a pure-decode step of a shape
 * seen before replays a captured graph instead (graph.cu). Works on a machine with the CUDA
 * toolkit but no driver or GPU: cuda_is_available then says so, and nothing else is called.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/internal.h"
#include "cuda/quant_formats.h"

extern "C" {
#include "cuda/cuda_backend.h"
}

/* cuBLAS workspace: 32 MiB, what cuBLAS recommends for Hopper. */
#define CUDA_BLAS_WORKSPACE ((size_t)32 << 20)

/* ---- availability ------------------------------------------------------------------------ */

extern "C" int cuda_is_available(char *why, size_t why_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        const char *what = e == cudaErrorInsufficientDriver ? "no NVIDIA driver found (or it is older than this CUDA runtime)"
                           : e == cudaErrorNoDevice         ? "no NVIDIA GPU visible"
                                                            : "the NVIDIA driver or GPU is unusable";
        if (why && why_len) snprintf(why, why_len, "CUDA: %s (cudaGetDeviceCount: %s)", what, cudaGetErrorName(e));
        cudaGetLastError(); /* clear the non-sticky error so later calls start clean */
        return 0;
    }
    if (n < 1) {
        if (why && why_len) snprintf(why, why_len, "CUDA: the driver reports no GPU");
        return 0;
    }
    if (why && why_len) snprintf(why, why_len, "CUDA: %d device(s)", n);
    return 1;
}

/* ---- memory ------------------------------------------------------------------------------ */

int cuda__grow(cuda_backend *cb, void **p, size_t *cap_bytes, size_t bytes)
{
    if (bytes <= *cap_bytes) return 0;
    size_t want = bytes + bytes / 4;
    void *q = NULL;
    if (CUDA_CHECK(cudaMalloc(&q, want))) {
        cudaGetLastError();
        return -ENOMEM;
    }
    if (*p) CB_CHECK(cb, cudaFree(*p)); /* cudaFree waits for queued work that may use it */
    *p = q;
    cuda__graphs_reset(cb);
    *cap_bytes = want;
    return 0;
}

static float *cuda__alloc(backend *be, size_t n_floats)
{
    void *p = NULL;
    if (cuda__use(cuda__cb(be))) return NULL;
    if (CUDA_CHECK(cudaMalloc(&p, n_floats ? n_floats * sizeof(float) : 4))) {
        cudaGetLastError();
        return NULL;
    }
    return (float *)p;
}

static void cuda__free(backend *be, void *p)
{
    if (!p) return;
    cuda__graphs_reset(cuda__cb(be));
    CB_CHECK(cuda__cb(be), cudaFree(p));
}

static size_t cuda__mem_available(backend *be)
{
    size_t free_b = 0, total_b = 0;
    if (cuda__use(cuda__cb(be)) || CB_CHECK(cuda__cb(be), cudaMemGetInfo(&free_b, &total_b))) return 0;
    return free_b;
}

/* ---- weights ----------------------------------------------------------------------------- */

/* Device type of a model tensor: vectors become F32; matrices keep their type (the quantised
 * ones their blocks). -1 if the type is not supported. */
static int cuda__weight_type(const model_tensor *t)
{
    if (t->ne[1] == 1) return DT_F32;
    if (cuda_q_is_quant(t->type)) return t->ne[0] % cuda_q_block_elems(t->type) ? -1 : t->type;
    switch (t->type) {
    case DT_F32: return DT_F32;
    case DT_F16: return DT_F16;
    case DT_BF16: return DT_BF16;
    default: return -1;
    }
}

static int cuda__weight_upload(backend *be, const model_tensor *src, be_weight *dst)
{
    cuda_backend *cb = cuda__cb(be);
    be_weight w;
    memset(&w, 0, sizeof w);
    w.n_in = src->ne[0];
    w.n_out = src->ne[1];
    w.type = cuda__weight_type(src);
    if (!src->data) {
        w.type = src->type;
        *dst = w;
        return 0;
    }
    if (w.type < 0) return -EINVAL;
    if (cuda__use(cb)) return -EIO;
    size_t bytes = dt_row_bytes(w.type, w.n_in) * (size_t)w.n_out;
    if (CUDA_CHECK(cudaMalloc(&w.data, bytes))) {
        cudaGetLastError();
        return -ENOMEM;
    }
    size_t raw = src->row_bytes * (size_t)w.n_out;
    int rc = 0;
    if (w.type == src->type) {
        rc = CUDA_CHECK(cudaMemcpyAsync(w.data, src->data, raw, cudaMemcpyHostToDevice, cb->stream));
        if (!rc) rc = CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    } else {
        void *stage = NULL;
        rc = CUDA_CHECK(cudaMalloc(&stage, raw));
        if (!rc) rc = CUDA_CHECK(cudaMemcpyAsync(stage, src->data, raw, cudaMemcpyHostToDevice, cb->stream));
        if (!rc) rc = cuda__convert_rows(cb, stage, src->type, src->row_bytes, w.n_in, w.n_out, w.data, w.type);
        if (!rc) rc = CUDA_CHECK(cudaStreamSynchronize(cb->stream));
        if (stage) cudaFree(stage);
    }
    if (rc) {
        cudaFree(w.data);
        cudaGetLastError();
        return -EIO;
    }
    if (cuda_q_is_quant(w.type)) {
        size_t tile = (size_t)cuda_q_tile_rows(w.n_in, w.n_out, CUDA_Q_TILE_BYTES) * (size_t)w.n_in * 2;
        if (tile > cb->qtile_need) cb->qtile_need = tile;
        cuda__qmm_note_weight(cb, &w);
    }
    *dst = w;
    return 0;
}

static void cuda__weight_free(backend *be, be_weight *w)
{
    if (w->data) {
        cuda__graphs_reset(cuda__cb(be));
        CB_CHECK(cuda__cb(be), cudaFree(w->data));
    }
    w->data = NULL;
}

/* ---- pinned host memory ------------------------------------------------------------------ */

/* Pinned host memory: asynchronous copies need it (pageable memory makes them synchronous). */
static void *cuda__host_alloc(backend *be, size_t bytes)
{
    void *p = NULL;
    if (CUDA_CHECK(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault))) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda__host_free(backend *be, void *p)
{
    if (p) CB_CHECK(cuda__cb(be), cudaFreeHost(p));
}

/* ---- synchronisation --------------------------------------------------------------------- */

static int cuda__to_host(backend *be, const float *src, size_t n, float *dst)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_end(cb) || cb->error) return -EIO;
    if (CB_CHECK(cb, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, cb->stream)))
        return -EIO;
    if (CB_CHECK(cb, cudaStreamSynchronize(cb->stream))) return -EIO;
    return cb->error;
}

static int cuda__sync(backend *be)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_end(cb)) return -EIO;
    if (CB_CHECK(cb, cudaStreamSynchronize(cb->stream))) return -EIO;
    return cb->error;
}

/* ---- lifetime ---------------------------------------------------------------------------- */

static void cuda__destroy(backend *be)
{
    cuda_backend *cb = cuda__cb(be);
    if (cb->graph_mode == 1) {
        cudaGraph_t graph = NULL;
        cudaStreamEndCapture(cb->stream, &graph);
        if (graph) cudaGraphDestroy(graph);
    }
    cuda__graphs_reset(cb);
    if (cb->stream) cudaStreamSynchronize(cb->stream);
    for (int k = 0; k < KV_MAX_GROUPS; k++)
        if (cb->kv_arena[k]) cudaFree(cb->kv_arena[k]);
    if (cb->meta_host) cudaFreeHost(cb->meta_host);
    if (cb->meta_dev) cudaFree(cb->meta_dev);
    if (cb->attn_scratch) cudaFree(cb->attn_scratch);
    if (cb->conv) cudaFree(cb->conv);
    if (cb->qtile) cudaFree(cb->qtile);
    if (cb->qact) cudaFree(cb->qact);
    if (cb->qpart) cudaFree(cb->qpart);
    if (cb->qticket) cudaFree(cb->qticket);
    if (cb->meta_done) cudaEventDestroy(cb->meta_done);
    if (cb->blas) cuda_blas()->destroy(cb->blas);
    if (cb->blas_ws) cudaFree(cb->blas_ws);
    if (cb->stream) cudaStreamDestroy(cb->stream);
    free(cb);
}

/* Designated, so that an entry cannot land in the wrong slot when be_ops changes; the ops not
 * listed (embed_upload: weight_upload serves) are NULL. */
static const be_ops cuda__ops = {
    .destroy = cuda__destroy,
    .weight_upload = cuda__weight_upload,
    .weight_free = cuda__weight_free,
    .mem_available = cuda__mem_available,
    .kv_init = cuda__op_kv_init,
    .kv_copy_block = cuda__op_kv_copy_block,
    .kv_block_out = cuda__op_kv_block_out,
    .kv_block_in = cuda__op_kv_block_in,
    .host_alloc = cuda__host_alloc,
    .host_free = cuda__host_free,
    .alloc = cuda__alloc,
    .free = cuda__free,
    .begin = cuda__op_begin,
    .embed = cuda__op_embed,
    .rmsnorm = cuda__op_rmsnorm,
    .matmul = cuda__op_matmul,
    .matmul_multi = cuda__op_matmul_multi,
    .rope = cuda__op_rope,
    .rope_shift = cuda__op_rope_shift,
    .store_kv = cuda__op_store_kv,
    .attention = cuda__op_attention,
    .silu_mul = cuda__op_silu_mul,
    .gelu_mul = cuda__op_gelu_mul,
    .scale = cuda__op_scale,
    .softcap = cuda__op_softcap,
    .add = cuda__op_add,
    .gather_rows = cuda__op_gather_rows,
    .to_host = cuda__to_host,
    .sync = cuda__sync,
};

extern "C" backend *cuda_backend_create(int device_index, char *err, size_t err_len)
{
    char why[256];
    if (!cuda_is_available(why, sizeof why)) {
        snprintf(err, err_len, "%s", why);
        return NULL;
    }
    int n = 0;
    cudaGetDeviceCount(&n);
    if (device_index < 0 || device_index >= n) {
        snprintf(err, err_len, "CUDA: no device %d (%d visible)", device_index, n);
        return NULL;
    }
    /* cuBLAS is loaded here, by the first backend, never by a process that runs on the CPU. */
    const cuda_blas_api *blas = cuda_blas_load(err, err_len);
    if (!blas) return NULL;
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!cb) {
        snprintf(err, err_len, "CUDA: out of host memory");
        return NULL;
    }
    cb->base.ops = &cuda__ops;
    cb->base.name = "cuda";
    cb->device = device_index;
    cudaDeviceProp prop;
    int rc = CUDA_CHECK(cudaSetDevice(device_index));
    if (!rc) rc = CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
    if (!rc) rc = CUDA_CHECK(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking));
    if (!rc) rc = CUDA_CHECK(cudaEventCreateWithFlags(&cb->meta_done, cudaEventDisableTiming));
    if (!rc) rc = CUBLAS_CHECK(blas->create(&cb->blas));
    if (!rc) rc = CUBLAS_CHECK(blas->set_stream(cb->blas, cb->stream));
    if (!rc) rc = CUDA_CHECK(cudaMalloc(&cb->blas_ws, CUDA_BLAS_WORKSPACE));
    if (!rc) rc = CUBLAS_CHECK(blas->set_workspace(cb->blas, cb->blas_ws, CUDA_BLAS_WORKSPACE));
    /* FP32 GEMMs stay true FP32 (no TF32), so F32 models match the CPU reference. */
    if (!rc) rc = CUBLAS_CHECK(blas->set_math_mode(cb->blas, CUBLAS_DEFAULT_MATH));
    if (!rc) rc = CUDA_CHECK(cudaEventRecord(cb->meta_done, cb->stream));
    if (rc) {
        snprintf(err, err_len, "CUDA: could not initialise device %d (see the error above)", device_index);
        cudaGetLastError();
        cuda__destroy(&cb->base);
        return NULL;
    }
    const char *g = getenv("KVSERVE_CUDA_GRAPHS");
    cb->graphs_on = g && g[0] == '1';
    cuda__kern_init(&cb->k, prop.major * 10 + prop.minor);
    assert(!cuda__kern_missing(&cb->k));
    cb->n_sm = prop.multiProcessorCount;
    cb->smem_optin = prop.sharedMemPerBlockOptin;
    snprintf(cb->base.desc, sizeof cb->base.desc, "%.80s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount, (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024));
    return &cb->base;
}

/* ---- extras (cuda_backend.h) ------------------------------------------------------------- */

extern "C" int cuda_upload_f32(backend *be, float *dst, const float *src, size_t n)
{
    cuda_backend *cb = cuda__cb(be);
    if (CB_CHECK(cb, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, cb->stream)))
        return -EIO;
    if (CB_CHECK(cb, cudaStreamSynchronize(cb->stream))) return -EIO;
    return cb->error;
}

extern "C" void cuda_set_quant_prefill(backend *be, int f16_tiles)
{
    cuda__cb(be)->qprefill_f16 = f16_tiles != 0;
}

extern "C" void *cuda_backend_stream(backend *be)
{
    return (void *)cuda__cb(be)->stream;
}

extern "C" int cuda_last_attn_splits(backend *be)
{
    return cuda__cb(be)->attn_splits;
}
