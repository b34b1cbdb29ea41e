/*
 * mla.c — the CPU backend's multi-head latent attention projections (be_ops.mla_qk, mla_out):
 * the absorbed key up-projection that turns each head's query into the latent space, the
 * latent's norm, the RoPE of the decoupled query and key parts, and the value up-projection of
 * the latent attention's output.
 *
 * The heads' projections are one grouped matmul (cpu__matmul_grouped): head h's rows (every
 * token's part of head h, gathered head-major so that they are contiguous) times head h's
 * matrix, all heads in one parallel for. RoPE runs through cpu__rope on the gathered RoPE parts
 * (a head of rope dims each), the norm through cpu__rmsnorm on the gathered latents, so both are
 * the very arithmetic of the dense models' ops. Scratch: the backend's mla buffer.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/internal.h"

/* Carves n buffers of sizes[i] floats from c->mla; 0 or -ENOMEM. */
static int mla_scratch(cpu__backend *c, int n, const size_t *sizes, float **out)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (sizes[i] * sizeof(float) + 63) & ~(size_t)63;
    if (cpu__scratch_reserve(&c->mla, total)) return -ENOMEM;
    char *at = c->mla.p;
    for (int i = 0; i < n; i++) {
        out[i] = (float *)at;
        at += (sizes[i] * sizeof(float) + 63) & ~(size_t)63;
    }
    return 0;
}

/* dst[r][0 .. n) = src[r · stride + off ..] for rows r < rows (and back with put). */
static void take(float *dst, const float *src, int rows, size_t stride, size_t off, int n)
{
    for (int r = 0; r < rows; r++) memcpy(dst + (size_t)r * n, src + (size_t)r * stride + off, (size_t)n * sizeof(float));
}

static void put(float *dst, const float *src, int rows, size_t stride, size_t off, int n)
{
    for (int r = 0; r < rows; r++) memcpy(dst + (size_t)r * stride + off, src + (size_t)r * n, (size_t)n * sizeof(float));
}

/* y [H][T][n_out of w[h]] = w[h] · x [H][T][n_in], head by head as one grouped matmul. */
static int heads_matmul(cpu__backend *c, const float *x, int T, int H, const be_weight *w, float *y)
{
    cpu__mm_group g[1024];
    if (H > 1024) return -EINVAL;
    for (int h = 0; h < H; h++)
        g[h] = (cpu__mm_group){.w = &w[h], .row0 = h * T, .n_rows = T, .out = y + (size_t)h * T * w[h].n_out};
    return cpu__matmul_grouped(c, x, T * H, H, g);
}

static void poison(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

void cpu__mla_qk(cpu__backend *c, const float *q, const float *kv, const be_mla *m, float *q_lat, float *k_lat)
{
    int T = c->batch.n_tokens, H = m->n_heads, nope = m->qk_nope, rp = m->rope, r = m->kv_lora;
    size_t hq = (size_t)nope + rp, hl = (size_t)r + rp;
    size_t sizes[] = {(size_t)T * r, (size_t)T * rp, (size_t)T * H * rp, (size_t)T * H * nope, (size_t)T * H * r};
    float *b[5];
    if (mla_scratch(c, 5, sizes, b)) {
        poison(q_lat, (size_t)T * H * hl), poison(k_lat, (size_t)T * hl);
        return;
    }
    float *lat = b[0], *kpe = b[1], *qpe = b[2], *qn = b[3], *ql = b[4];
    /* the key: the normed latent and the rotated shared key */
    take(lat, kv, T, hl, 0, r);
    cpu__rmsnorm(c, lat, m->kv_norm, m->eps, T, r, lat);
    put(k_lat, lat, T, hl, 0, r);
    take(kpe, kv, T, hl, (size_t)r, rp);
    cpu__rope(c, kpe, &m->rope_k);
    put(k_lat, kpe, T, hl, (size_t)r, rp);
    /* the query: every head's RoPE part rotated, its other part absorbed into the latent */
    take(qpe, q, T * H, hq, (size_t)nope, rp);
    cpu__rope(c, qpe, &m->rope_q);
    put(q_lat, qpe, T * H, hl, (size_t)r, rp);
    for (int h = 0; h < H; h++) /* head-major: head h's rows contiguous */
        for (int t = 0; t < T; t++)
            memcpy(qn + ((size_t)h * T + t) * nope, q + ((size_t)t * H + h) * hq, (size_t)nope * sizeof(float));
    if (heads_matmul(c, qn, T, H, m->k_b, ql)) {
        poison(q_lat, (size_t)T * H * hl);
        return;
    }
    for (int h = 0; h < H; h++)
        for (int t = 0; t < T; t++)
            memcpy(q_lat + ((size_t)t * H + h) * hl, ql + ((size_t)h * T + t) * r, (size_t)r * sizeof(float));
}

void cpu__mla_out(cpu__backend *c, const float *o, const be_mla *m, float *out)
{
    int T = c->batch.n_tokens, H = m->n_heads, r = m->kv_lora, v = m->v_head;
    size_t hl = (size_t)r + m->rope;
    size_t sizes[] = {(size_t)T * H * r, (size_t)T * H * v};
    float *b[2];
    if (mla_scratch(c, 2, sizes, b)) {
        poison(out, (size_t)T * H * v);
        return;
    }
    for (int h = 0; h < H; h++)
        for (int t = 0; t < T; t++)
            memcpy(b[0] + ((size_t)h * T + t) * r, o + ((size_t)t * H + h) * hl, (size_t)r * sizeof(float));
    if (heads_matmul(c, b[0], T, H, m->v_b, b[1])) {
        poison(out, (size_t)T * H * v);
        return;
    }
    for (int h = 0; h < H; h++)
        for (int t = 0; t < T; t++)
            memcpy(out + ((size_t)t * H + h) * v, b[1] + ((size_t)h * T + t) * v, (size_t)v * sizeof(float));
}
