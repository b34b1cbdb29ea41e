/*
 * quant_vnni.c — the AVX-512 VNNI kernels of the quantised weight types other than Q8_0:
 * quant_x86.h (blocks of 32: vpdpbusd dot products) and quantk_x86.h (super-blocks: maddubs +
 * vpdpwssd GEMV, vpdpbusd + vpmulld GEMM), with 16-output, 8-row GEMM microkernels. Built with
 * the vnni flags; runs only through the table of an avx512 backend whose CPU has VNNI.
 */
#define QX_VNNI 1
#include "cpu/quantk_x86.h"

QX_KERNELS(vnni, CPU_ISA_AVX512)
