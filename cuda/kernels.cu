/*
 * kernels.cu — the CUDA backend's non-attention ops: embedding gather, RMSNorm (and its fused
 * residual-add variant), RoPE (adjacent-pair and NEOX layouts, partial rotation, linear / YaRN
 * scaling and frequency factors; fused with the K/V store as an extra), K/V store by slot,
 * SiLU × up, GELU(tanh) × up, scale, soft-cap, add, logit-row gather, weight conversion, cuBLAS
 * GEMMs, and greedy argmax on the device.
 *
 * Every op follows engine/backend.h: activations are f32 row-major, the batch metadata comes
 * from begin() (cuda__meta offsets), every launch is on cb->stream and is checked.
 * Element formats are converted with the helpers of cuda/formats.h (unit-tested on the CPU) or
 * the CUDA intrinsics they agree with.
 */
#include "cuda/internal.h"
#include "cuda/kv_kernels.h"
#include "cuda/quant_formats.h"

extern "C" {
#include "cuda/cuda_backend.h"
}

/* ---- element loads and stores ------------------------------------------------------------ */

static __device__ __forceinline__ float cuda__ld(float v)
{
    return v;
}
static __device__ __forceinline__ float cuda__ld(__half v)
{
    return __half2float(v);
}
static __device__ __forceinline__ float cuda__ld(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

template <typename T> static __device__ __forceinline__ T cuda__st(float f);
template <> __device__ __forceinline__ float cuda__st<float>(float f)
{
    return f;
}
template <> __device__ __forceinline__ __half cuda__st<__half>(float f)
{
    return __float2half_rn(f);
}
template <> __device__ __forceinline__ __nv_bfloat16 cuda__st<__nv_bfloat16>(float f)
{
    return __float2bfloat16_rn(f);
}

/* Block-wide sum (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result. */
static __device__ float cuda__block_sum(float v)
{
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    int nw = blockDim.x >> 5;
    v = lane < nw ? part[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- embedding --------------------------------------------------------------------------- */

template <typename T>
static __global__ void cuda__embed_k(const T *emb, int64_t dim, const int32_t *tokens, float *out)
{
    int t = blockIdx.x;
    const T *row = emb + (int64_t)tokens[t] * dim;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) out[(int64_t)t * dim + i] = cuda__ld(row[i]);
}

void cuda__op_embed(backend *be, const be_weight *emb, float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    int n = cb->meta.n_tokens;
    if (n <= 0) return;
    const int32_t *tok = cuda__meta(cb, cb->meta.tokens);
    int64_t dim = emb->n_in;
    if (cuda_q_is_quant(emb->type))
        cuda__q_embed(cb, emb, n, tok, out);
    else if (emb->type == DT_F32)
        cuda__embed_k<<<n, CUDA_EW_THREADS, 0, cb->stream>>>((const float *)emb->data, dim, tok, out);
    else if (emb->type == DT_F16)
        cuda__embed_k<<<n, CUDA_EW_THREADS, 0, cb->stream>>>((const __half *)emb->data, dim, tok, out);
    else
        cuda__embed_k<<<n, CUDA_EW_THREADS, 0, cb->stream>>>((const __nv_bfloat16 *)emb->data, dim, tok, out);
    CB_CHECK_LAUNCH(cb);
}

/* ---- RMSNorm ----------------------------------------------------------------------------- */

/* One block per row. With res != NULL, x[r] += res[r] first (written back), then the norm of the
 * sum goes to out. Sum of squares in f32 across the block, as the CPU reference does per row. */
static __global__ void cuda__rmsnorm_k(float *x, const float *res, const float *w, float eps, int dim, float *out)
{
    int64_t r = blockIdx.x;
    float *xr = x + r * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xr[i];
        if (res) {
            v += res[r * dim + i];
            xr[i] = v;
        }
        ss += v * v;
    }
    ss = cuda__block_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) out[r * dim + i] = xr[i] * inv * w[i];
}

void cuda__op_rmsnorm(backend *be, const float *x, const be_weight *w, float eps, int n_rows, int dim,
                      float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    if (n_rows <= 0) return;
    cuda__rmsnorm_k<<<n_rows, CUDA_EW_THREADS, 0, cb->stream>>>((float *)x, NULL, (const float *)w->data, eps,
                                                                  dim, out);
    CB_CHECK_LAUNCH(cb);
}

extern "C" void cuda_add_rmsnorm(backend *be, float *x, const float *y, const be_weight *w, float eps, int n_rows,
                                 int dim, float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (n_rows <= 0) return;
    cuda__rmsnorm_k<<<n_rows, CUDA_EW_THREADS, 0, cb->stream>>>(x, y, (const float *)w->data, eps, dim, out);
    CB_CHECK_LAUNCH(cb);
}

/* ---- RoPE and the K/V store --------------------------------------------------------------- */

#define CUDA_ROPE_MAX_PAIRS 512

/* Rotates the rope_dims leading dims of every head of token row x at position pos (r: the layer's
 * rope with n_heads heads; ff: its frequency factors in device memory, or NULL); the whole block
 * calls it. Angles are computed once per pair in double (as on the CPU, through the same
 * be_rope_freq), then applied to every head in f32. */
static __device__ void cuda__rope_row(float *x, int pos, const be_rope &r, const float *ff)
{
    __shared__ float cs[CUDA_ROPE_MAX_PAIRS], sn[CUDA_ROPE_MAX_PAIRS];
    int half = r.rope_dims / 2;
    if (half > CUDA_ROPE_MAX_PAIRS) half = CUDA_ROPE_MAX_PAIRS; /* head_dim > 1024 is not a real model */
    float ms = be_rope_mscale(&r);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double s, c;
        sincos((double)pos * be_rope_freq(&r, i, ff ? ff[i] : 1.0f), &s, &c);
        cs[i] = (float)c * ms;
        sn[i] = (float)s * ms;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < r.n_heads * half; idx += blockDim.x) {
        int h = idx / half, i = idx % half, a, b;
        cuda_rope_pair(r.neox, r.rope_dims, i, &a, &b);
        float *xh = x + (int64_t)h * r.head_dim;
        float x0 = xh[a], x1 = xh[b];
        xh[a] = x0 * cs[i] - x1 * sn[i];
        xh[b] = x0 * sn[i] + x1 * cs[i];
    }
}

static __global__ void cuda__rope_k(float *x, const int32_t *pos, be_rope r, const float *ff)
{
    int t = blockIdx.x;
    cuda__rope_row(x + (int64_t)t * r.n_heads * r.head_dim, pos[t], r, ff);
}

/* The frequency factors of r in device memory (a CUDA weight's data), or NULL. */
static const float *cuda__rope_ff(const be_rope *r)
{
    return r->freq_factors ? (const float *)r->freq_factors->data : NULL;
}

void cuda__op_rope(backend *be, float *x, const be_rope *r)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    int n = cb->meta.n_tokens;
    if (n <= 0) return;
    be_rope rv = *r;
    rv.freq_factors = NULL; /* a host pointer: the kernel gets the factors' device data instead */
    cuda__rope_k<<<n, 128, 0, cb->stream>>>(x, cuda__meta(cb, cb->meta.positions), rv, cuda__rope_ff(r));
    CB_CHECK_LAUNCH(cb);
}

/* out row t = x row t rotated by −shift of its sequence (sinks NULL: 0), a pure rotation (r's
 * mscale is 1). The sequence of token t: the last s with q_start[s] ≤ t. */
static __global__ void cuda__rope_shift_k(const float *x, float *out, const int32_t *q_start, int n_seqs,
                                          const int32_t *sinks, const int32_t *shift, be_rope r, const float *ff)
{
    int t = blockIdx.x, lo = 0, hi = n_seqs - 1;
    while (lo < hi) { /* binary search: q_start is increasing */
        int mid = (lo + hi + 1) / 2;
        if (q_start[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    int64_t row = (int64_t)r.n_heads * r.head_dim;
    const float *xs = x + t * row;
    float *o = out + t * row;
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) o[i] = xs[i];
    __syncthreads();
    int sh = sinks ? shift[lo] : 0;
    if (sh) cuda__rope_row(o, -sh, r, ff);
}

void cuda__op_rope_shift(backend *be, const float *x, float *out, const be_rope *r, int group)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    int n = cb->meta.n_tokens;
    if (n <= 0) return;
    const cuda_meta_kv *mk = &cb->meta.kv[cb->meta.n_kv > 1 ? group : 0];
    be_rope rv = *r;
    rv.freq_factors = NULL;
    rv.mscale = 1.0f; /* the queries are scaled already */
    const int32_t *sinks = mk->sinks >= 0 ? cuda__meta(cb, mk->sinks) : NULL;
    const int32_t *shift = mk->sinks >= 0 ? cuda__meta(cb, mk->sink_shift) : NULL;
    cuda__rope_shift_k<<<n, 128, 0, cb->stream>>>(x, out, cuda__meta(cb, cb->meta.q_start), cb->meta.n_seqs, sinks,
                                                  shift, rv, cuda__rope_ff(r));
    CB_CHECK_LAUNCH(cb);
}

/* Writes token t's k and v rows into the arena planes of one layer at its slot; with rope
 * (r.rope_dims > 0) k is rotated first, in place, and the rotated values are stored. */
template <typename T>
static __global__ void cuda__store_kv_k(float *k, const float *v, T *kp, T *vp, const int32_t *slots,
                                        const int32_t *pos, cuda_kv_layout l, be_rope r, const float *ff)
{
    int t = blockIdx.x;
    int kv_dim = l.n_kv_heads * l.head_dim;
    float *kt = k + (int64_t)t * kv_dim;
    if (r.rope_dims > 0) {
        cuda__rope_row(kt, pos[t], r, ff);
        __syncthreads();
    }
    int32_t slot = slots[t];
    if (slot < 0) return;
    for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
        int h = i / l.head_dim, d = i % l.head_dim;
        int64_t o = cuda_kv_slot_index(&l, 0, 0, slot, h, d);
        kp[o] = cuda__st<T>(kt[i]);
        vp[o] = cuda__st<T>(v[(int64_t)t * kv_dim + i]);
    }
}

/* The same for a quantised arena (T = int8_t or uint8_t codes, see cuda__store_q_row). */
template <typename T>
static __global__ void cuda__store_kv_q_k(float *k, const float *v, T *kp, T *vp, const int32_t *slots,
                                          const int32_t *pos, cuda_kv_layout l, be_rope r, const float *ff)
{
    int t = blockIdx.x;
    int kv_dim = l.n_kv_heads * l.head_dim;
    float *kt = k + (int64_t)t * kv_dim;
    if (r.rope_dims > 0) {
        cuda__rope_row(kt, pos[t], r, ff);
        __syncthreads();
    }
    int32_t slot = slots[t];
    if (slot < 0) return;
    cuda__store_q_row(kt, kp, l, slot);
    cuda__store_q_row(v + (int64_t)t * kv_dim, vp, l, slot);
}

static void cuda__store_kv(cuda_backend *cb, int layer, float *k, const float *v, const be_rope *rope)
{
    be_rope r;
    memset(&r, 0, sizeof r); /* rope_dims 0: no rotation */
    if (rope) {
        r = *rope;
        r.n_heads = cb->kv.n_kv_heads;
        r.head_dim = cb->kv.head_dim;
        r.freq_factors = NULL;
    }
    const float *ff = rope ? cuda__rope_ff(rope) : NULL;
    int n = cb->meta.n_tokens;
    if (n <= 0) return;
    const cuda_kv_layout *l;
    char *kb = cuda__kv_plane(cb, layer, 0, &l), *vb = cuda__kv_plane(cb, layer, 1, &l);
    const cuda_meta_kv *mk = &cb->meta.kv[cb->meta.n_kv > 1 ? cb->kv_group[layer] : 0];
    const int32_t *slots = cuda__meta(cb, mk->slots), *pos = cuda__meta(cb, cb->meta.positions);
    if (cb->kv_dtype == KV_F32)
        cuda__store_kv_k<<<n, 128, 0, cb->stream>>>(k, v, (float *)kb, (float *)vb, slots, pos, *l, r, ff);
    else if (cb->kv_dtype == KV_I8)
        cuda__store_kv_q_k<<<n, 128, 0, cb->stream>>>(k, v, (int8_t *)kb, (int8_t *)vb, slots, pos, *l, r, ff);
    else if (cb->kv_dtype == KV_FP8)
        cuda__store_kv_q_k<<<n, 128, 0, cb->stream>>>(k, v, (uint8_t *)kb, (uint8_t *)vb, slots, pos, *l, r, ff);
    else if (cb->kv_dtype == KV_BF16)
        cuda__store_kv_k<<<n, 128, 0, cb->stream>>>(k, v, (__nv_bfloat16 *)kb, (__nv_bfloat16 *)vb, slots, pos, *l, r, ff);
    else
        cuda__store_kv_k<<<n, 128, 0, cb->stream>>>(k, v, (__half *)kb, (__half *)vb, slots, pos, *l, r, ff);
    CB_CHECK_LAUNCH(cb);
}

void cuda__op_store_kv(backend *be, int layer, const float *k, const float *v)
{
    if (cuda__graph_skip(cuda__cb(be))) return;
    cuda__store_kv(cuda__cb(be), layer, (float *)k, v, NULL);
}

extern "C" void cuda_rope_store_kv(backend *be, int layer, float *k, const float *v, const be_rope *r)
{
    cuda__store_kv(cuda__cb(be), layer, k, v, r);
}

/* ---- elementwise ------------------------------------------------------------------------- */

/* The element-wise ops share one grid-stride kernel: the op is uniform across the grid, so the
 * switch costs no divergence. */
enum { CUDA_EW_SILU_MUL, CUDA_EW_GELU_MUL, CUDA_EW_ADD, CUDA_EW_SCALE, CUDA_EW_SOFTCAP };

static __global__ void cuda__ew_k(int op, float *x, const float *y, float s, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        switch (op) {
        case CUDA_EW_SILU_MUL: x[i] = cuda_silu_mul(x[i], y[i]); break;
        case CUDA_EW_GELU_MUL: x[i] = be_gelu_tanh(x[i]) * y[i]; break;
        case CUDA_EW_ADD: x[i] += y[i]; break;
        case CUDA_EW_SCALE: x[i] *= s; break;
        default: x[i] = be_softcap(x[i], s); break;
        }
    }
}

/* x[i] = op(x[i], y[i] or s) for n elements. */
static void cuda__ew(backend *be, int op, float *x, const float *y, float s, int64_t n)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    if (n <= 0) return;
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__ew_k<<<g, CUDA_EW_THREADS, 0, cb->stream>>>(op, x, y, s, n);
    CB_CHECK_LAUNCH(cb);
}

void cuda__op_silu_mul(backend *be, float *gate, const float *up, int64_t n)
{
    cuda__ew(be, CUDA_EW_SILU_MUL, gate, up, 0.0f, n);
}

void cuda__op_gelu_mul(backend *be, float *gate, const float *up, int64_t n)
{
    cuda__ew(be, CUDA_EW_GELU_MUL, gate, up, 0.0f, n);
}

void cuda__op_scale(backend *be, float *x, float s, int64_t n)
{
    cuda__ew(be, CUDA_EW_SCALE, x, NULL, s, n);
}

void cuda__op_softcap(backend *be, float *x, float cap, int64_t n)
{
    cuda__ew(be, CUDA_EW_SOFTCAP, x, NULL, cap, n);
}

void cuda__op_add(backend *be, float *x, const float *y, int64_t n)
{
    cuda__ew(be, CUDA_EW_ADD, x, y, 0.0f, n);
}

static __global__ void cuda__gather_k(const float *x, int dim, const int32_t *rows, float *out)
{
    int j = blockIdx.x;
    const float *src = x + (int64_t)rows[j] * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) out[(int64_t)j * dim + i] = src[i];
}

void cuda__op_gather_rows(backend *be, const float *x, int dim, float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    int n = cb->meta.n_logits;
    if (n <= 0) return;
    cuda__gather_k<<<n, CUDA_EW_THREADS, 0, cb->stream>>>(x, dim, cuda__meta(cb, cb->meta.logit_rows), out);
    CB_CHECK_LAUNCH(cb);
}

/* ---- weight conversion ------------------------------------------------------------------- */

/* Element (r, i) of a raw float tensor of type src_type (rows row_bytes apart). */
static __device__ float cuda__raw_value(const uint8_t *src, int src_type, size_t row_bytes, int64_t r, int64_t i)
{
    const uint8_t *row = src + (size_t)r * row_bytes;
    switch (src_type) {
    case DT_F32: return ((const float *)row)[i];
    case DT_F16: return cuda_f16_to_f32(((const uint16_t *)row)[i]);
    default: return cuda_bf16_to_f32(((const uint16_t *)row)[i]);
    }
}

static __device__ void cuda__store_as(void *dst, int dst_type, int64_t e, float v)
{
    if (dst_type == DT_F32) ((float *)dst)[e] = v;
    else if (dst_type == DT_BF16) ((uint16_t *)dst)[e] = cuda_f32_to_bf16(v);
    else ((uint16_t *)dst)[e] = cuda_f32_to_f16(v);
}

static __global__ void cuda__convert_k(const uint8_t *src, int src_type, size_t row_bytes, int64_t n_in,
                                       int64_t n, void *dst, int dst_type)
{
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
        cuda__store_as(dst, dst_type, e, cuda__raw_value(src, src_type, row_bytes, e / n_in, e % n_in));
}

int cuda__convert_rows(cuda_backend *cb, const void *src, int src_type, size_t row_bytes, int64_t n_in,
                       int64_t n_rows, void *dst, int dst_type)
{
    if (src_type != DT_F32 && src_type != DT_F16 && src_type != DT_BF16) return -EINVAL;
    int64_t n = n_in * n_rows;
    if (n <= 0) return 0;
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__convert_k<<<g, CUDA_EW_THREADS, 0, cb->stream>>>((const uint8_t *)src, src_type, row_bytes, n_in, n, dst,
                                                           dst_type);
    return CB_CHECK_LAUNCH(cb);
}

/* ---- matmul (cuBLAS) --------------------------------------------------------------------- */

template <typename T> static __global__ void cuda__to16_k(const float *x, T *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = cuda__st<T>(x[i]);
}

static __global__ void cuda__bias_k(float *out, const float *bias, int64_t n_out, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] += bias[i % n_out];
}

int cuda__to_f16(cuda_backend *cb, const float *x, uint16_t *dst, int64_t n)
{
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__to16_k<<<g, CUDA_EW_THREADS, 0, cb->stream>>>(x, (__half *)dst, n);
    return CB_CHECK_LAUNCH(cb);
}

void cuda__add_bias(cuda_backend *cb, float *out, const float *bias, int64_t n_out, int64_t n)
{
    unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
    cuda__bias_k<<<g, CUDA_EW_THREADS, 0, cb->stream>>>(out, bias, n_out, n);
    CB_CHECK_LAUNCH(cb);
}

/* out[r][o] = Σ_i x[r][i] W[o][i]. Row-major W [n_out][n_in] is the column-major n_in × n_out
 * matrix, so in cuBLAS terms out (n_out × n_rows, column-major) = Wᵀ · x. 16-bit weights get the
 * activations converted to the same type (cuBLAS wants A and B alike); accumulation is FP32.
 * Quantised weights go to quant.cu. */
void cuda__op_matmul(backend *be, const float *x, int n_rows, const be_weight *w, const be_weight *bias, float *out)
{
    cuda_backend *cb = cuda__cb(be);
    if (cuda__graph_skip(cb)) return;
    if (n_rows <= 0) return;
    int m = (int)w->n_out, k = (int)w->n_in;
    if (w->n_in > cb->max_n_in) cb->max_n_in = w->n_in;
    if (cuda_q_is_quant(w->type)) {
        cuda__q_matmul(cb, x, n_rows, w, bias && bias->data ? (const float *)bias->data : NULL, out);
        return;
    }
    float alpha = 1.0f, beta = 0.0f;
    const void *B = x;
    cudaDataType_t t = CUDA_R_32F;
    if (w->type != DT_F32) {
        int64_t n = (int64_t)n_rows * k;
        if (cuda__fail(cb, cuda__grow(cb, &cb->conv, &cb->conv_bytes, (size_t)n * 2))) return;
        unsigned g = cuda_grid_1d(n, CUDA_EW_THREADS, CUDA_EW_MAX_BLOCKS);
        if (w->type == DT_BF16) {
            t = CUDA_R_16BF;
            cuda__to16_k<<<g, CUDA_EW_THREADS, 0, cb->stream>>>(x, (__nv_bfloat16 *)cb->conv, n);
        } else {
            t = CUDA_R_16F;
            cuda__to16_k<<<g, CUDA_EW_THREADS, 0, cb->stream>>>(x, (__half *)cb->conv, n);
        }
        if (CB_CHECK_LAUNCH(cb)) return;
        B = cb->conv;
    }
    if (CB_CHECK_BLAS(cb, cuda_blas()->gemm_ex(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n_rows, k, &alpha, w->data, t,
                                               k, B, t, k, &beta, out, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                                               CUBLAS_GEMM_DEFAULT)))
        return;
    if (bias && bias->data) cuda__add_bias(cb, out, (const float *)bias->data, m, (int64_t)n_rows * m);
}

/* ---- greedy sampling --------------------------------------------------------------------- */

/* One block per row: the (value, index) maximum, lowest index on ties. */
static __global__ void cuda__argmax_k(const float *x, int dim, int32_t *ids)
{
    const float *row = x + (int64_t)blockIdx.x * dim;
    float best = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = row[i];
        if (v > best || (v == best && i < bi)) {
            best = v;
            bi = i;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > best || (ov == best && oi < bi)) {
            best = ov;
            bi = oi;
        }
    }
    __shared__ float sv[32];
    __shared__ int si[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sv[warp] = best;
        si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++)
            if (sv[w] > best || (sv[w] == best && si[w] < bi)) {
                best = sv[w];
                bi = si[w];
            }
        ids[blockIdx.x] = bi == 0x7fffffff ? 0 : bi; /* an all-NaN row yields 0 */
    }
}

extern "C" int cuda_argmax_rows(backend *be, const float *x, int n_rows, int dim, int32_t *ids)
{
    cuda_backend *cb = cuda__cb(be);
    if (n_rows <= 0) return cb->error;
    int32_t *d = NULL;
    if (CB_CHECK(cb, cudaMallocAsync((void **)&d, (size_t)n_rows * sizeof(int32_t), cb->stream))) return -EIO;
    cuda__argmax_k<<<n_rows, 1024, 0, cb->stream>>>(x, dim, d);
    CB_CHECK_LAUNCH(cb);
    CB_CHECK(cb, cudaMemcpyAsync(ids, d, (size_t)n_rows * sizeof(int32_t), cudaMemcpyDeviceToHost, cb->stream));
    CB_CHECK(cb, cudaFreeAsync(d, cb->stream));
    if (CB_CHECK(cb, cudaStreamSynchronize(cb->stream))) return -EIO;
    return cb->error;
}
