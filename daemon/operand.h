/* The A operand as the backends take it: dense as sent, or canonical 2:4.
 * One preparation for GEMM requests (on the device worker) and weight
 * loads (on the threadpool) alike, so both check, compress and prune the
 * same way and fail with the same sentences.  Pure: allocation only. */
#ifndef MFMAD_OPERAND_H
#define MFMAD_OPERAND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mfma_dtype.h"
#include "validate.h"

struct operand_a {
	bool sparse;
	const void *values;    /* the dense A, or the 2:4 values */
	const uint32_t *meta;  /* canonical meta when sparse */
	void *own_values;      /* what prepare allocated (compress, prune) */
	uint32_t *own_meta;
};

/* Turns an m x k A of the given form into *out: A_DENSE is used as is;
 * A_SPARSE has its meta nibbles checked; A_DENSE_CHECK is compressed
 * (refused unless already 2:4); A_DENSE_PRUNE is pruned.  a and meta point
 * at the client's bytes and must outlive *out.  Returns 0, -EINVAL with a
 * sentence naming the row and group, or -ENOMEM. */
int operand_prepare_a(enum a_form form, enum mfma_dtype t, uint32_t m, uint32_t k, const void *a,
		      const uint32_t *meta, struct operand_a *out, char *err, size_t errlen);

/* Frees what prepare allocated; accepts a zeroed struct. */
void operand_a_free(struct operand_a *a);

#endif
