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
 *   gemv.cu          dense matrix-vector kernels: decode matmuls of up to 8 rows on F32 / F16 /
 *                    BF16 weights, with the GLU and soft-capped LM-head epilogues
 *   fused.cu         the fused ops: add + RMSNorm, QKV + biases + norms + RoPE + KV store, gate/up
 *                    + activation, final norm + LM head
 *   qmatvec.cu       quantised weights: activations quantised to 8-bit blocks, the integer
 *                    matrix-vector mmvq for decode rows, routing to mmq for more
 *   qgemm.cu         quantised weights, prefill rows: the integer GEMM mmq (and F16 tiles for
 *                    cuBLAS, kept to compare against)
 *   attn.cu          attention over the paged KV cache: the dispatcher and the reference kernel
 *   attn_mma.cu      the tensor-core prefill / mixed-step kernel; attn_decode.cu the decode one
 *   norm_rope.cu     RMSNorm (and the fused residual add), RoPE and the sink shift
 *   kv.cu            the KV arena (init, block copies, the second tier's transfers, reads) and
 *                    the K/V store (fused with RoPE as an extra)
 *   elementwise.cu   SiLU × up, GELU × up, add, scale, soft-cap
 *   gather.cu        embedding rows (dense and quantised tables) and the logit rows
 *   sample.cu        sampling on the device (the sample op), token references, greedy argmax
 *   moe.cu           mixtures of experts: routing, rows grouped by expert, the grouped matvec
 *                    (also MLA's per-head projections), MXFP4's 8-bit activations
 *   mla.cu           multi-head latent attention: the latent query and key, attention over the
 *                    latent KV layout
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
 * Activations are bf16 between ops (engine/backend.h: act_type; cuda_backend_create_act makes a
 * backend with f32 ones, for checks), the residual stream and logits f32. Q/K/V and gate/up are
 * stacked into one matrix at upload (weight_upload_cat) for the fused ops.
 *
 * Step protocol: begin() packs the batch into a pinned buffer and uploads it with one
 * asynchronous copy (two pinned buffers alternate, so that the next step can be packed while
 * this one runs); the ops queue kernels on one stream; the sample op queues the sampler and the
 * copy of its tokens into a pinned slot, and sample_wait is the step's one wait (to_host()/sync()
 * serve callers that want the logits). Only token ids, the requested log-probs and batch metadata
 * cross the bus. A pure-decode step is padded to a captured shape and, with CUDA graphs on (the
 * default), replays the graph of that shape (graph.cu). Works on a machine with the CUDA toolkit
 * but no driver or GPU: cuda_is_available then says so, and nothing else is called.
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
    if (cb->graph_mode == 1) { /* a captured kernel would keep the old address */
        fprintf(stderr, "kvserve: CUDA: a %zu-byte buffer would grow inside a graph capture\n", bytes);
        return -EIO;
    }
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

void *cuda__scratch(cuda_backend *cb, cuda_scratch *s, size_t bytes)
{
    if (cuda__fail(cb, cuda__grow(cb, &s->p, &s->bytes, bytes))) return NULL;
    return s->p;
}

/* n activations (be_act_bytes each), 256-byte aligned as cudaMalloc's are. */
static void *cuda__alloc(backend *be, size_t n)
{
    void *p = NULL;
    if (cuda__use(cuda__cb(be))) return NULL;
    size_t bytes = n * be_act_bytes(be);
    if (CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 4))) {
        cudaGetLastError();
        return NULL;
    }
    return p;
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
    if (cuda_q_is_block(t->type)) return t->ne[0] % cuda_q_block_elems(t->type) ? -1 : t->type;
    switch (t->type) {
    case DT_F32: return DT_F32;
    case DT_F16: return DT_F16;
    case DT_BF16: return DT_BF16;
    default: return -1;
    }
}

/* Copies (or converts to type) the tensor src into device memory at dst, waiting for the copy.
 * The tensor may be in host memory (the model's mapping) or on this device. 0 or -EIO. */
static int cuda__upload_into(cuda_backend *cb, const model_tensor *src, int type, void *dst)
{
    size_t raw = src->row_bytes * (size_t)src->ne[1];
    int rc = 0;
    if (type == src->type) {
        rc = CUDA_CHECK(cudaMemcpyAsync(dst, src->data, raw, cudaMemcpyDefault, cb->stream));
        if (!rc) rc = CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    } else {
        void *stage = NULL;
        rc = CUDA_CHECK(cudaMalloc(&stage, raw));
        if (!rc) rc = CUDA_CHECK(cudaMemcpyAsync(stage, src->data, raw, cudaMemcpyDefault, cb->stream));
        if (!rc) rc = cuda__convert_rows(cb, stage, src->type, src->row_bytes, src->ne[0], src->ne[1], dst, type);
        if (!rc) rc = CUDA_CHECK(cudaStreamSynchronize(cb->stream));
        if (stage) cudaFree(stage);
    }
    if (rc) cudaGetLastError();
    return rc ? -EIO : 0;
}

/* Records the scratch a quantised matrix of this shape needs: the integer path's
 * (cuda__qmm_note_weight) and the F16-tile prefill's tile (qgemm.cu). */
static void cuda__note_tile(cuda_backend *cb, const be_weight *w)
{
    if (!cuda_q_is_quant(w->type)) return;
    size_t tile = (size_t)cuda_q_tile_rows(w->n_in, w->n_out, CUDA_Q_TILE_BYTES) * (size_t)w->n_in * 2;
    if (tile > cb->qtile_need) cb->qtile_need = tile;
    cuda__qmm_note_weight(cb, w);
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
    if (cuda__upload_into(cb, src, w.type, w.data)) {
        cudaFree(w.data);
        return -EIO;
    }
    cuda__note_tile(cb, &w);
    *dst = w;
    return 0;
}

/* n ≥ 2 tensors as one: matrices of one device type and width stacked by rows (a quantised
 * matrix's rows are whole blocks, so this is a byte concatenation), or vectors (biases)
 * concatenated into one f32 vector. */
static int cuda__weight_upload_cat(backend *be, const model_tensor *const *src, int n, be_weight *dst)
{
    cuda_backend *cb = cuda__cb(be);
    if (n < 2) return -EINVAL;
    const int vec = src[0]->ne[1] == 1, type = cuda__weight_type(src[0]);
    be_weight w;
    memset(&w, 0, sizeof w);
    w.type = type;
    w.n_in = vec ? 0 : src[0]->ne[0];
    w.n_out = vec ? 1 : 0;
    for (int i = 0; i < n; i++) {
        if (!src[i]->data || cuda__weight_type(src[i]) != type || (src[i]->ne[1] == 1) != vec ||
            (!vec && src[i]->ne[0] != w.n_in) || type < 0)
            return -EINVAL;
        if (vec) w.n_in += src[i]->ne[0];
        else w.n_out += src[i]->ne[1];
    }
    if (cuda__use(cb)) return -EIO;
    size_t row = dt_row_bytes(w.type, w.n_in), bytes = vec ? row : row * (size_t)w.n_out, off = 0;
    if (CUDA_CHECK(cudaMalloc(&w.data, bytes))) {
        cudaGetLastError();
        return -ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        if (cuda__upload_into(cb, src[i], type, (char *)w.data + off)) {
            cudaFree(w.data);
            return -EIO;
        }
        off += vec ? dt_row_bytes(type, src[i]->ne[0]) : dt_row_bytes(type, w.n_in) * (size_t)src[i]->ne[1];
    }
    cuda__note_tile(cb, &w);
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
    if (cb->meta_host_alt) cudaFreeHost(cb->meta_host_alt);
    if (cb->meta_done_alt) cudaEventDestroy(cb->meta_done_alt);
    cuda__smp_free(cb);
    if (cb->meta_dev) cudaFree(cb->meta_dev);
    if (cb->attn_scratch) cudaFree(cb->attn_scratch);
    if (cb->attn_sem) cudaFree(cb->attn_sem);
    if (cb->conv) cudaFree(cb->conv);
    if (cb->qtile) cudaFree(cb->qtile);
    if (cb->moe_buf) cudaFree(cb->moe_buf);
    if (cb->qact) cudaFree(cb->qact);
    if (cb->qpart) cudaFree(cb->qpart);
    if (cb->qticket) cudaFree(cb->qticket);
    cuda_scratch *scratch[] = {&cb->mm32, &cb->qkv32, &cb->glu, &cb->lmx, &cb->moe32};
    for (size_t i = 0; i < sizeof scratch / sizeof scratch[0]; i++)
        if (scratch[i]->p) cudaFree(scratch[i]->p);
    free(cb->pad_buf);
    if (cb->meta_done) cudaEventDestroy(cb->meta_done);
    if (cb->blas) cuda_blas()->destroy(cb->blas);
    if (cb->blas_ws) cudaFree(cb->blas_ws);
    if (cb->stream) cudaStreamDestroy(cb->stream);
    free(cb);
}

/* Designated, so that an entry cannot land in the wrong slot when be_ops changes; the ops not
 * listed (embed_upload: weight_upload serves; matmul_multi: the fused ops take the stacks) are
 * NULL. */
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
    .matmul_f32 = cuda__op_matmul_f32,
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
    .sample = cuda__op_sample,
    .sample_wait = cuda__op_sample_wait,
    .weight_upload_cat = cuda__weight_upload_cat,
    .add_rmsnorm = cuda__op_add_rmsnorm,
    .qkv = cuda__op_qkv,
    .glu = cuda__op_glu,
    .lm_head = cuda__op_lm_head,
    .moe_prepare = cuda__op_moe_prepare,
    .moe_release = cuda__op_moe_release,
    .moe_ffn = cuda__op_moe_ffn,
    .mla_prepare = cuda__op_mla_prepare,
    .mla_release = cuda__op_mla_release,
    .mla_qk = cuda__op_mla_qk,
    .mla_out = cuda__op_mla_out,
};

extern "C" backend *cuda_backend_create_act(int device_index, int act_type, char *err, size_t err_len)
{
    if (act_type != DT_BF16 && act_type != DT_F32) {
        snprintf(err, err_len, "CUDA: activations must be bf16 or f32");
        return NULL;
    }
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
    cb->base.act_type = act_type;
    cb->act = act_type;
    cb->device = device_index;
    cudaDeviceProp prop;
    int rc = CUDA_CHECK(cudaSetDevice(device_index));
    if (!rc) rc = CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
    if (!rc) rc = CUDA_CHECK(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking));
    if (!rc) rc = CUDA_CHECK(cudaEventCreateWithFlags(&cb->meta_done, cudaEventDisableTiming));
    if (!rc) rc = CUDA_CHECK(cudaEventCreateWithFlags(&cb->meta_done_alt, cudaEventDisableTiming));
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
    cb->graphs_on = 1;
    int cc = prop.major * 10 + prop.minor;
    const char *cap = getenv("KVSERVE_CUDA_CC"); /* run an older capability's kernels (kern.h) */
    if (cap && atoi(cap) > 0 && atoi(cap) < cc) cc = atoi(cap);
    cuda__kern_init(&cb->k, cc);
    assert(!cuda__kern_missing(&cb->k));
    cb->n_sm = prop.multiProcessorCount;
    cb->smem_optin = prop.sharedMemPerBlockOptin;
    cb->l2_bytes = (size_t)prop.l2CacheSize;
    snprintf(cb->base.desc, sizeof cb->base.desc, "%.60s (sm_%d%d, %d SMs, %.0f GiB%.20s)", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount, (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024),
             cc < prop.major * 10 + prop.minor ? ", KVSERVE_CUDA_CC" : "");
    return &cb->base;
}

extern "C" backend *cuda_backend_create(int device_index, char *err, size_t err_len)
{
    return cuda_backend_create_act(device_index, DT_BF16, err, err_len);
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

extern "C" int cuda_upload_act(backend *be, void *dst, const float *src, size_t n)
{
    cuda_backend *cb = cuda__cb(be);
    if (cb->act == DT_F32) return cuda_upload_f32(be, (float *)dst, src, n);
    uint16_t *h = (uint16_t *)malloc(n * 2 + 2);
    if (!h) return -ENOMEM;
    for (size_t i = 0; i < n; i++) h[i] = cuda_f32_to_bf16(src[i]);
    int rc = CB_CHECK(cb, cudaMemcpyAsync(dst, h, n * 2, cudaMemcpyHostToDevice, cb->stream));
    if (!rc) rc = CB_CHECK(cb, cudaStreamSynchronize(cb->stream));
    free(h);
    return rc ? -EIO : cb->error;
}

extern "C" int cuda_download_act(backend *be, const void *src, size_t n, float *dst)
{
    cuda_backend *cb = cuda__cb(be);
    if (cb->act == DT_F32) return be->ops->to_host(be, (const float *)src, n, dst);
    uint16_t *h = (uint16_t *)malloc(n * 2 + 2);
    if (!h) return -ENOMEM;
    int rc = CB_CHECK(cb, cudaMemcpyAsync(h, src, n * 2, cudaMemcpyDeviceToHost, cb->stream));
    if (!rc) rc = CB_CHECK(cb, cudaStreamSynchronize(cb->stream));
    for (size_t i = 0; !rc && i < n; i++) dst[i] = cuda_bf16_to_f32(h[i]);
    free(h);
    return rc ? -EIO : cb->error;
}

/* The median of 5 timed copies of 256 MiB after a warm-up, bytes read + written; measured once. */
extern "C" double cuda_copy_gbps(backend *be)
{
    static double gbps = -1; /* one device per process is what the wiring makes */
    cuda_backend *cb = cuda__cb(be);
    if (gbps >= 0) return gbps;
    const size_t bytes = (size_t)256 << 20;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms[5];
    int rc = cuda__use(cb) || CUDA_CHECK(cudaMalloc(&a, bytes)) || CUDA_CHECK(cudaMalloc(&b, bytes)) ||
             CUDA_CHECK(cudaEventCreate(&e0)) || CUDA_CHECK(cudaEventCreate(&e1)) ||
             CUDA_CHECK(cudaMemsetAsync(a, 0x5a, bytes, cb->stream));
    for (int r = -1; !rc && r < 5; r++) {
        rc = CUDA_CHECK(cudaEventRecord(e0, cb->stream)) ||
             CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, cb->stream)) ||
             CUDA_CHECK(cudaEventRecord(e1, cb->stream)) || CUDA_CHECK(cudaEventSynchronize(e1));
        if (!rc && r >= 0) rc = CUDA_CHECK(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    if (a) cudaFree(a);
    if (b) cudaFree(b);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (rc) {
        cudaGetLastError();
        return 0.0;
    }
    for (int i = 0; i < 5; i++) /* sort the five: the median is the middle one */
        for (int j = i + 1; j < 5; j++)
            if (ms[j] < ms[i]) {
                float t = ms[i];
                ms[i] = ms[j], ms[j] = t;
            }
    gbps = ms[2] > 0 ? 2.0 * (double)bytes / (ms[2] * 1e-3) / 1e9 : 0.0;
    return gbps;
}
