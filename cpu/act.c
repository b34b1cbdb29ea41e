/*
 * act.c — the scalar definitions of the quantised activation formats (cpu__q8x, cpu__q8s,
 * cpu__q8k in internal.h) that the matmul driver (matmul.c) converts activations into and the
 * kernels of the quantised types (quant.c) read. Every level's quantisers give exactly these
 * results (internal.h, quantise_q8 and quantise_q8k).
 */
#include <math.h>
#include <string.h>

#include "cpu/internal.h"
#include "model/dtype.h"

float cpu__quantise_block(const float *x, int n, int8_t *q)
{
    float amax = 0;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i++) q[i] = (int8_t)lrintf(x[i] * id);
    return d;
}

void cpu__q8s_quantise(const cpu__kern *k, const float *x, cpu__q8s *out, int64_t n)
{
    cpu__q8x tmp[16];
    for (int64_t b0 = 0; b0 < n / 32; b0 += 16) {
        int nb = n / 32 - b0 < 16 ? (int)(n / 32 - b0) : 16;
        k->quantise_q8(x + b0 * 32, tmp, (int64_t)nb * 32);
        for (int b = 0; b < nb; b++) {
            cpu__q8s *o = &out[b0 + b];
            int32_t s0 = 0, s1 = 0;
            for (int i = 0; i < 16; i++) s0 += tmp[b].q[i], s1 += tmp[b].q[16 + i];
            memcpy(o->q, tmp[b].q, 32);
            o->d = tmp[b].d;
            o->xs[0] = o->d * (float)s0;
            o->xs[1] = o->d * (float)s1;
            o->xs[2] = o->d * (float)(s0 + s1);
            o->s32 = s0 + s1;
        }
    }
}

void cpu__q8s_quantise_h(const cpu__kern *k, const float *x, cpu__q8s *out, int64_t n)
{
    cpu__q8s_quantise(k, x, out, n);
    for (int64_t b = 0; b < n / 32; b++) {
        cpu__q8s *o = &out[b];
        int32_t s0 = 0;
        for (int i = 0; i < 16; i++) s0 += o->q[i];
        o->d = dt_f16_to_f32(dt_f32_to_f16(o->d));
        o->xs[0] = o->d * (float)s0;
        o->xs[1] = o->d * (float)(o->s32 - s0);
        o->xs[2] = o->d * (float)o->s32;
    }
}
