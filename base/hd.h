/*
 * hd.h — BASE_HD marks a small inline function of base/ that CUDA device code calls too
 * (__host__ __device__ under nvcc, nothing in C or in the CPU emulation of cuda/check). Headers
 * of the floors above have their own markers (engine/backend.h's BE_HOST_DEVICE); this one is for
 * base/, which every floor may include.
 */
#ifndef KVSERVE_HD_H
#define KVSERVE_HD_H

#ifdef __CUDACC__
#define BASE_HD __host__ __device__
#else
#define BASE_HD
#endif

#endif
