/* The 2:4 codec on arbitrary matrices and meta: decompress whatever meta
 * the input holds (refused or expanded, never read out of bounds), prune
 * and compress dense input, and check that compress(decompress(x)) gives
 * back x whenever the meta was legal. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mfma_dtype.h"
#include "sparse24.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	static const enum mfma_dtype types[] = { MFMA_DT_F32, MFMA_DT_F16, MFMA_DT_BF16,
						 MFMA_DT_I8 };
	enum mfma_dtype t = types[data[0] % 4];
	size_t es = mfma_dtype_size(t);
	size_t rows = (size_t)(data[1] % 8) + 1, k = ((size_t)(data[2] % 16) + 1) * 4;
	data += 3;
	size -= 3;
	size_t dense_b = rows * k * es, vals_b = sparse24_values_bytes(rows, k, es);
	size_t meta_b = sparse24_meta_bytes(rows, k);
	uint8_t *dense = calloc(1, dense_b), *vals = calloc(1, vals_b), *back = calloc(1, dense_b);
	uint32_t *meta = calloc(1, meta_b), *meta2 = calloc(1, meta_b);
	uint8_t *vals2 = calloc(1, vals_b);
	if (!dense || !vals || !back || !meta || !meta2 || !vals2)
		goto out;
	memcpy(dense, data, size < dense_b ? size : dense_b);
	if (size > dense_b)
		memcpy(meta, data + dense_b, size - dense_b < meta_b ? size - dense_b : meta_b);
	memcpy(vals, dense, vals_b);

	size_t br, bg;
	if (sparse24_decompress(vals, meta, t, rows, k, back, &br, &bg) == 0) {
		if (sparse24_meta_check(meta, rows, k, &br, &bg) != 0)
			__builtin_trap();
		if (sparse24_validate(back, t, rows, k, &br, &bg) != 0)
			__builtin_trap();
		if (sparse24_compress(back, t, rows, k, vals2, meta2, &br, &bg) != 0)
			__builtin_trap();
	} else if (sparse24_meta_check(meta, rows, k, &br, &bg) == 0) {
		__builtin_trap();
	}
	if (sparse24_prune(dense, t, rows, k, vals2, meta2) != 0)
		__builtin_trap();
	if (sparse24_decompress(vals2, meta2, t, rows, k, back, &br, &bg) != 0)
		__builtin_trap();
	if (sparse24_validate(back, t, rows, k, &br, &bg) != 0)
		__builtin_trap();
	if (sparse24_validate(dense, t, rows, k, &br, &bg) == 0 &&
	    sparse24_compress(dense, t, rows, k, vals2, meta2, &br, &bg) != 0)
		__builtin_trap();
out:
	free(dense);
	free(vals);
	free(back);
	free(meta);
	free(meta2);
	free(vals2);
	return 0;
}
