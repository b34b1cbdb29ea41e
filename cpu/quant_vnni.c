/*
 * quant_vnni.c — the AVX-512 VNNI kernels of the quantised weight types other than Q8_0:
 * quant_x86.h with vpdpbusd dot products and a 16-output, 8-row GEMM microkernel. Built with the
 * vnni flags; runs only through the table of an avx512 backend whose CPU has VNNI.
 */
#define QX_VNNI 1
#include "cpu/quant_x86.h"

QX_KERNELS(vnni, CPU_ISA_AVX512)
