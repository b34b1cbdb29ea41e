/*
 * mkmodel_internal.h — what the files of the synthetic-model writer share (model/mkmodel.c,
 * weights and per-architecture tensors; model/mkmodel_vocab.c, the vocabularies). Both write
 * through the GGUF writer (gguf_write.h); mkmodel.c calls mkmodel_vocab.c, never the reverse.
 */
#ifndef KVSERVE_MKMODEL_INTERNAL_H
#define KVSERVE_MKMODEL_INTERNAL_H

#include <stddef.h>

#include "model/gguf_write.h"
#include "model/mkmodel.h"

/* Builds the vocabulary of p and writes the tokenizer.* keys into w. 0, or -EINVAL (bad
 * parameters) / -ENOMEM with a one-line message in err. */
int mkm__write_vocab(gguf_writer *w, const mkm_params *p, char *err, size_t err_len);

/* How a tensor's values are made (mkmodel.c's generator). */
enum { MKM_RANDOM = 0, MKM_ONES = 1, MKM_ROPE_FREQS = 2, MKM_ROUTER = 3, MKM_SINKS = 4, MKM_QUIET = 5 };

/* The writer, the fill kind of every tensor and the first error, as the tensor adders share
 * them. */
typedef struct mkm__out {
    gguf_writer *w;
    uint8_t *kind; /* [max tensors] */
    int rc;        /* 0 or the first negative errno */
    char *err;
    size_t err_len;
} mkm__out;

/* Adds tensor `name` of `type` and shape [ne0], [ne0, ne1] or [ne0, ne1, ne2] (a 0 ends the
 * shape), filled as `kind`; after a failure does nothing (o->rc and o->err keep the first). */
void mkm__tensor(mkm__out *o, const char *name, int kind, int type, int64_t ne0, int64_t ne1, int64_t ne2);

/* mkmodel_moe.c: the experts' and MLA's resolved shape of p. */
typedef struct mkm__moe {
    int experts, used, ff;           /* experts, k, each expert's width (0 experts: dense) */
    int mla, kv_lora, q_lora, nope, rope, v_head, shared, dense_lead;
} mkm__moe;

/* mkmodel_moe.c: resolves p's experts and MLA shape (hd: the head size, rope: the rope dims,
 * ffn: the FFN width); NULL, or why they do not fit. */
const char *mkm__moe_shape(const mkm_params *p, int hd, int rope, int ffn, mkm__moe *m);
/* mkmodel_moe.c: the keys of the experts and of MLA. */
void mkm__moe_keys(gguf_writer *w, const mkm_params *p, const mkm__moe *m);
/* mkmodel_moe.c: layer l's MLA attention tensors (deepseek2). */
void mkm__mla_tensors(mkm__out *o, const mkm_params *p, const mkm__moe *m, int l);
/* mkmodel_moe.c: layer l's FFN tensors when it is a MoE layer (returns 1), else 0. */
int mkm__moe_tensors(mkm__out *o, const mkm_params *p, const mkm__moe *m, int l);

#endif
