/*
 * cuda_backend.h — C entry points of the CUDA backend beyond engine/backend.h.
 *
 * cuda_backend_create and cuda_is_available make the backend (the wiring's factory, cli/device.c,
 * calls them; without CUDA in the build it defines both to say so). The other functions here
 * are extras for tests, the GPU check program and future engine paths (fused ops, sampling on the
 * device). They exist only when kvserve is built with CUDA (KVSERVE_CUDA); `be` must come from
 * cuda_backend_create. Like the ops, they queue work on the backend's stream; the ones returning
 * int wait for it and return 0 or -EIO after a device error.
 */
#ifndef KVSERVE_CUDA_BACKEND_H
#define KVSERVE_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA backend on GPU device_index, or NULL with a one-line message in err. Its activations
 * are bf16 (engine/backend.h). */
backend *cuda_backend_create(int device_index, char *err, size_t err_len);
/* The same with activations of act_type: DT_BF16 (what serving uses), or DT_F32 (every kernel's
 * f32 instantiation: results within f32 rounding of the CPU backend's, for checks). */
backend *cuda_backend_create_act(int device_index, int act_type, char *err, size_t err_len);
/* 1 when a CUDA device is usable (built with CUDA, driver present, at least one GPU); else 0
 * with the reason in why. */
int cuda_is_available(char *why, size_t why_len);

/* Copies n floats from host src into backend memory dst (from be->ops->alloc). 0 or -EIO. */
int cuda_upload_f32(backend *be, float *dst, const float *src, size_t n);
/* Activations to and from the host as f32: n values of src converted to the backend's
 * act_type (round to nearest even) into dst; n activations of src as f32 into host dst. 0 or
 * -EIO. */
int cuda_upload_act(backend *be, void *dst, const float *src, size_t n);
int cuda_download_act(backend *be, const void *src, size_t n, float *dst);

/* Reads the K (kind 0) or V (kind 1) entry of one slot of a layer back as f32:
 * dst[n_kv_heads * head_dim]. 0, -EINVAL (out of range) or -EIO. */
int cuda_kv_read(backend *be, int layer, int kind, int32_t slot, float *dst);

/* Fused residual add + RMSNorm: x[r] += y[r] (x the f32 residual, y activations), then out[r] =
 * rmsnorm(x[r]) * w as activations (out may not alias x or y): the add_rmsnorm op without the
 * graph bookkeeping. */
void cuda_add_rmsnorm(backend *be, float *x, const void *y, const be_weight *w, float eps, int n_rows, int dim,
                      void *out);

/* Fused RoPE on k + K/V store: rotates k [n_tokens][kv_dim] (activations) in place at the
 * batch's positions (r describes k) and writes k and v into the KV arena of layer at the batch's
 * slots. */
void cuda_rope_store_kv(backend *be, int layer, void *k, const void *v, const be_rope *r);

/* Greedy sampling on the device: ids[j] = argmax of row j of x [n_rows][dim] (lowest index on
 * ties). ids is host memory. 0 or -EIO. */
int cuda_argmax_rows(backend *be, const float *x, int n_rows, int dim, int32_t *ids);

/* Turns CUDA graphs for decode steps on (the default) or off (--cuda-graphs): each padded decode
 * shape is captured once and replayed after that; any other step runs eagerly. */
void cuda_set_graphs(backend *be, int on);
/* Nodes (kernel launches, cuBLAS's included, and copies) of the graph the last captured decode
 * step made: the launches of one decode step. 0 before any capture. */
size_t cuda_graph_nodes(backend *be);
/* The device's copy bandwidth in GB/s (bytes read + written per second of a device-to-device
 * copy of 256 MiB, measured at the first call and kept), or 0 on an error: the rate a decode
 * step's bytes are bounded by. */
double cuda_copy_gbps(backend *be);

/* For the GPU check: fills dst (device memory of n elements of type DT_F32, DT_F16 or DT_BF16)
 * with uniform values in [-scale, scale) from a hash of (seed, index) (cuda_random_value), so
 * that large random weights are made on the device. 0, -EINVAL or -EIO. */
int cuda_fill_random(backend *be, void *dst, size_t n, int type, uint64_t seed, float scale);
/* The backend's stream (a cudaStream_t), on which every op queues its work: the GPU check
 * captures ops into its own graphs to time them without launch gaps. */
void *cuda_stream_of(backend *be);

/* Selects how matmuls of more rows than a decode batch run on quantised weights: 0 (the
 * default) the integer tensor-core GEMM mmq on activations quantised to 8-bit blocks, 1 the
 * weights decoded into F16 tiles that cuBLAS multiplies (kept to compare the two). */
void cuda_set_quant_prefill(backend *be, int f16_tiles);

/* Queues the activation quantiser of the quantised matmuls alone: x [n_rows][n_in] (f32, backend
 * memory) into the backend's scratch in blocks of `block` values (32 or 256), as a matmul on a
 * quantised matrix of that block size starts. For benchmarks that separate its time from the
 * matmul's. */
void cuda_quantise_activations(backend *be, const float *x, int n_rows, int64_t n_in, int block);

/* For the GPU check: the expert projections of a MoE step (quantisation, the grouped matvecs,
 * the activation) reusing the routing and grouped rows of the last moe_ffn of n_rows rows (on
 * any of the layers), queued reps times into one graph, repetition i on layer ms[i % n_layers]
 * (layers of one shape: copies whose weights together pass the L2, so that every repetition
 * reads memory), and replayed; *us gets one repetition's device time (the median of five
 * replays, over reps). 0, -EINVAL (another shape, or no such step ran) or -EIO. */
int cuda_moe_bench_experts(backend *be, const be_moe *ms, int n_layers, int n_rows, int reps, double *us);

/* The backend's CUDA stream (a cudaStream_t), on which every op is queued: for benchmarks that
 * capture ops into a graph of their own or time them with events. */
void *cuda_backend_stream(backend *be);

/* Number of attention splits (split-K partitions) the last attention launch used, for tests. */
int cuda_last_attn_splits(backend *be);

/* Which attention kernels serve the next steps, for tests and checks: 0 the dispatcher's choice
 * (the tensor-core kernels where they fit; the environment's KVSERVE_CUDA_ATTN=ref forces the
 * reference kernel), 1 the reference kernel, 2 the tensor-core kernels where they fit. */
void cuda_set_attn_kernels(backend *be, int which);
/* The kernels of the last planned attention step: "ref", "mma decode", "mma prefill" or
 * "mma decode+prefill". */
const char *cuda_last_attn_kernels(backend *be);

/* For tests, and needs no GPU: fills the kernel table a device of compute capability cc
 * (major × 10 + minor) would get and returns the name of an entry it leaves empty, or NULL when
 * every entry is set. */
const char *cuda_kern_missing(int cc);

#ifdef __cplusplus
}
#endif

#endif
