/*
 * quant_avx2.c — the AVX2 (+FMA, F16C) kernels of the quantised weight types other than Q8_0:
 * quant_x86.h with maddubs/madd dot products. Built with the avx2 flags; runs only through the
 * table of a backend at level avx2 or above.
 */
#define QX_VNNI 0
#include "cpu/quant_x86.h"

QX_KERNELS(avx2, CPU_ISA_AVX2)
