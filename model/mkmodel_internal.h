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

#endif
