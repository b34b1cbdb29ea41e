/*
 * mkmodel_internal.h — what the files of the synthetic-model writer share (model/mkmodel.c, the
 * GGUF writer, weights and per-architecture tensors; model/mkmodel_vocab.c, the vocabularies).
 */
#ifndef KVSERVE_MKMODEL_INTERNAL_H
#define KVSERVE_MKMODEL_INTERNAL_H

#include <stddef.h>

#include "model/mkmodel.h"

/* Builds the vocabulary of p and writes the tokenizer.* keys into w. 0, or -EINVAL (bad
 * parameters) / -ENOMEM with a one-line message in err. */
int mkm__write_vocab(mkm_writer *w, const mkm_params *p, char *err, size_t err_len);

#endif
