/*
 * model_internal.h — what model/model.c (tensor binding), model/model_hparams.c
 * (hyperparameters per architecture) and model/model_moe.c (the experts and latent attention of
 * the MoE architectures) share: the loading context, its error helper, the key readers and the
 * tensor binders. Nothing outside those files includes it.
 */
#ifndef KVSERVE_MODEL_INTERNAL_H
#define KVSERVE_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

#define MODEL__MAX_DIM (1 << 24) /* bound on any one hyperparameter, to keep products in int64 */

/* Loading context: the file, its name for messages, and the error buffer. */
typedef struct model__ld {
    const gguf_file *f;
    const char *path;
    char *err;
    size_t err_len;
    char *names;          /* storage for tensor names, MODEL__NAME_BYTES each */
    int n_names, cap_names;
    uint8_t *used;        /* [gguf_n_tensors] 1 for every file tensor a binding took */
} model__ld;

/* Writes "path: <message>" into ld->err and returns rc. */
int model__fail(model__ld *ld, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Reads general.architecture and every hyperparameter of that architecture into hp, with
 * llama.cpp's defaults; refuses keys of the architecture that kvserve does not implement.
 * 0 or -EINVAL with the message in ld->err. */
int model__read_hparams(model__ld *ld, model_hparams *hp);

/* Reads "<arch>.<suffix>" as an int in [min, MODEL__MAX_DIM] into *out; absent: def, or an
 * error when def < 0 (required). 0 or -EINVAL with the message. */
int model__ld_int(model__ld *ld, const char *arch, const char *suffix, int def, int min, int *out);
/* Reads "<arch>.<suffix>" as a finite number, > 0 (≥ 0 with zero_ok); absent: def, or an error
 * when def is NAN. */
int model__ld_float(model__ld *ld, const char *arch, const char *suffix, float def, int zero_ok, float *out);

/* Binds tensor `name` with the expected shape [ne0] (ne1 == 0), [ne0, ne1] or, with ne2 > 1,
 * [ne0, ne1, ne2] (seen as ne1 × ne2 rows of ne0). matrix: any supported weight type, else F32
 * only. Absent and optional: t->data = NULL, returns 0. */
int model__bind(model__ld *ld, model_tensor *t, const char *name, int64_t ne0, int64_t ne1, int64_t ne2, int matrix,
                int optional);
/* A view of rows [r0, r0 + n) of matrix m (or elements [r0, r0 + n) of vector m when m is 1-D). */
model_tensor model__view_rows(const model_tensor *m, int64_t r0, int64_t n);

/* model_moe.c: the experts' keys of any architecture that has them (counts, widths, routing),
 * MLA's keys and q·k scale (deepseek2), gpt-oss's window, sinks and activation. 0 or -EINVAL. */
int model__read_moe(model__ld *ld, const char *arch, model_hparams *hp);
int model__read_mla(model__ld *ld, const char *arch, model_hparams *hp);
int model__read_gpt_oss(model__ld *ld, const char *arch, model_hparams *hp);

/* model_moe.c: views per layer at most (experts' weights and biases, MLA's per-head matrices). */
size_t model__views_per_layer(const model_hparams *hp);
/* model_moe.c: binds layer i's router, experts (views taken from *views, which advances) and
 * shared expert; its MLA projections; its sinks. 0 or -EINVAL. */
int model__bind_moe(model__ld *ld, model_hparams *hp, int i, model_layer *l, model_tensor **views);
int model__bind_mla(model__ld *ld, model_hparams *hp, int i, model_layer *l, model_tensor **views);

#endif
