/* One GEMM as the device backends and the CPU kernels see it, after the
 * daemon has validated it: D = alpha * A.B + beta * C.
 *
 * A is m x k (dense, row-major) or its canonical 2:4 form (values m x k/2,
 * meta m x sparse24_meta_words(k)); B is k x n row-major; C and D are m x n
 * row-major in out_dtype.  All host pointers are host memory.  For integer
 * inputs (i8) the output is i32, alpha is 1 and beta is 0 or 1. */
#ifndef MFMA_GEMM_H
#define MFMA_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "mfma_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mfma_gemm {
	uint32_t m, n, k;
	enum mfma_dtype in_dtype;  /* A and B */
	enum mfma_dtype out_dtype; /* C and D */
	float alpha, beta;
	bool a_sparse;
	const void *a;        /* dense A, or the 2:4 values */
	const uint32_t *a_meta; /* canonical meta when a_sparse */
	const void *b;
	const void *c;        /* NULL when beta == 0 */
	void *d;
};

/* A weight as the registry hands it to a backend to make resident: m x k,
 * dense (a) or canonical 2:4 (a = values, meta). */
struct mfma_weight_host {
	uint32_t m, k;
	enum mfma_dtype dtype;
	bool sparse;
	const void *a;
	const uint32_t *meta;
};

/* Dense-equivalent floating point operations of a GEMM: 2*m*n*k. */
static inline double mfma_gemm_flops(const struct mfma_gemm *g)
{
	return 2.0 * g->m * g->n * g->k;
}

#ifdef __cplusplus
}
#endif

#endif
