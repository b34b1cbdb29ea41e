/*
 * model_internal.h — what model/model.c (tensor binding) and model/model_hparams.c
 * (hyperparameters per architecture) share: the loading context and its error helper.
 * Nothing outside those two files includes it.
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

#endif
