/*
 * panel.c — the packed panel layout of F32/F16/BF16 matrices that the AVX2, AVX-512 and NEON
 * GEMMs (gemm_avx2.c, gemm_avx512.c, gemm_neon.c) share: tiles of CPU__PANEL_NR outputs, each
 * [n_in][NR] elements of the weight's own type, zero past n_out. Packed once at upload
 * (be_weight.extra). Built for the baseline target: it is plain data movement, which the level
 * files put into their tables' packed entries (bytes, pack).
 */
#include <stdint.h>

#include "cpu/internal.h"
#include "model/dtype.h"

size_t cpu__panel_bytes_f32(int64_t n_in, int64_t n_out)
{
    return (size_t)((n_out + CPU__PANEL_NR - 1) / CPU__PANEL_NR) * (size_t)n_in * CPU__PANEL_NR * 4;
}

size_t cpu__panel_bytes_16(int64_t n_in, int64_t n_out)
{
    return cpu__panel_bytes_f32(n_in, n_out) / 2;
}

void cpu__panel_pack(const be_weight *w, void *dst)
{
    enum { NR = CPU__PANEL_NR };
    size_t es = dt_row_bytes(w->type, 1), rb = dt_row_bytes(w->type, w->n_in);
    size_t tb = (size_t)w->n_in * NR * es;
    for (int64_t o0 = 0; o0 < w->n_out; o0 += NR) {
        char *tile = (char *)dst + (size_t)(o0 / NR) * tb;
        for (int64_t k0 = 0; k0 < w->n_in; k0 += 64) { /* 64 inputs of 32 rows: cache-sized steps */
            int64_t ke = k0 + 64 < w->n_in ? k0 + 64 : w->n_in;
            for (int j = 0; j < NR; j++) {
                const char *row = (const char *)w->data + (size_t)(o0 + j) * rb;
                int live = o0 + j < w->n_out;
                if (es == 4) {
                    float *d = (float *)tile + j;
                    for (int64_t k = k0; k < ke; k++) d[k * NR] = live ? ((const float *)row)[k] : 0.0f;
                } else {
                    uint16_t *d = (uint16_t *)tile + j;
                    for (int64_t k = k0; k < ke; k++) d[k * NR] = live ? ((const uint16_t *)row)[k] : 0;
                }
            }
        }
    }
}
