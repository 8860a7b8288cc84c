#include "operand.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparse24.h"

int operand_prepare_a(enum a_form form, enum mfma_dtype t, uint32_t m, uint32_t k, const void *a,
		      const uint32_t *meta, struct operand_a *out, char *err, size_t errlen)
{
	size_t row, grp;
	memset(out, 0, sizeof(*out));
	switch (form) {
	case A_DENSE:
		out->values = a;
		return 0;
	case A_SPARSE:
		if (sparse24_meta_check(meta, m, k, &row, &grp) < 0) {
			unsigned nib = sparse24_nibble(meta + row * sparse24_meta_words(k), grp);
			snprintf(err, errlen,
				 "a.sparse.meta: row %zu group %zu has index nibble 0x%x, which is not "
				 "an ordered pair i0 < i1",
				 row, grp, nib);
			return -EINVAL;
		}
		out->sparse = true;
		out->values = a;
		out->meta = meta;
		return 0;
	case A_DENSE_CHECK:
	case A_DENSE_PRUNE:
		break;
	default:
		snprintf(err, errlen, "a: form %d has no operand to prepare", (int)form);
		return -EINVAL;
	}
	out->own_values = malloc(sparse24_values_bytes(m, k, mfma_dtype_size(t)));
	out->own_meta = malloc(sparse24_meta_bytes(m, k));
	if (!out->own_values || !out->own_meta) {
		operand_a_free(out);
		snprintf(err, errlen, "out of host memory compressing a %ux%u A", m, k);
		return -ENOMEM;
	}
	if (form == A_DENSE_PRUNE) {
		sparse24_prune(a, t, m, k, out->own_values, out->own_meta);
	} else if (sparse24_compress(a, t, m, k, out->own_values, out->own_meta, &row, &grp) < 0) {
		operand_a_free(out);
		snprintf(err, errlen,
			 "a is not 2:4 (VALIDATE_24): row %zu, columns %zu..%zu have more than two "
			 "non-zeros",
			 row, grp * 4, grp * 4 + 3);
		return -EINVAL;
	}
	out->sparse = true;
	out->values = out->own_values;
	out->meta = out->own_meta;
	return 0;
}

void operand_a_free(struct operand_a *a)
{
	free(a->own_values);
	free(a->own_meta);
	memset(a, 0, sizeof(*a));
}
