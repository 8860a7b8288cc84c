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
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mfma_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One request of a batched launch: its n columns of B, C and D.  The
 * batch's B is the parts' B side by side (k x sum of n), and so C and D
 * (m x sum of n); every part has its own row-major buffers. */
struct mfma_gemm_part {
	const void *b;
	const void *c; /* NULL when beta == 0 */
	void *d;
	uint32_t n;
};

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
	/* A batched launch (nparts >= 2): n is the sum of the parts' n, and
	 * b, c, d are unused; the parts hold them.  0: a single request. */
	uint32_t nparts;
	const struct mfma_gemm_part *parts;
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

/* Copies the few bytes a part has in one row of a batch: single-column
 * parts (token-at-a-time decode) have 2 or 4, where a memcpy call would
 * cost more than the copy; wider ones go to memcpy. */
static inline void mfma_copy_part(unsigned char *dst, const unsigned char *src, size_t len)
{
	switch (len) {
	case 1: dst[0] = src[0]; return;
	case 2: memcpy(dst, src, 2); return;
	case 4: memcpy(dst, src, 4); return;
	case 8: memcpy(dst, src, 8); return;
	case 16: memcpy(dst, src, 16); return;
	default: memcpy(dst, src, len); return;
	}
}

/* Row r of the batch's joined B (which = 'b', k rows) or C ('c', m
 * rows) into dst: the parts' rows side by side, es bytes an element. */
static inline void mfma_gemm_gather_row(const struct mfma_gemm *g, char which, size_t r, size_t es,
					void *dst)
{
	unsigned char *p = (unsigned char *)dst;
	for (uint32_t i = 0; i < g->nparts; i++) {
		const struct mfma_gemm_part *pt = &g->parts[i];
		size_t len = (size_t)pt->n * es;
		const unsigned char *src = (const unsigned char *)(which == 'b' ? pt->b : pt->c);
		mfma_copy_part(p, src + r * len, len);
		p += len;
	}
}

/* Row r of the batch's joined D (os bytes an element) from src into the
 * parts' own D: the inverse of mfma_gemm_gather_row. */
static inline void mfma_gemm_scatter_row(const struct mfma_gemm *g, size_t r, size_t os,
					 const void *src)
{
	const unsigned char *p = (const unsigned char *)src;
	for (uint32_t i = 0; i < g->nparts; i++) {
		const struct mfma_gemm_part *pt = &g->parts[i];
		size_t len = (size_t)pt->n * os;
		mfma_copy_part((unsigned char *)pt->d + r * len, p, len);
		p += len;
	}
}

/* The parts' own blocks of B ('b', k rows), C ('c') or D ('d', m rows)
 * one after the other, as one byte range: bytes [off, off + len) of it
 * copied from the parts into buf, or from buf into the parts (to_parts).
 * A device that joins the columns itself moves operands this way: few,
 * large copies. */
static inline void mfma_gemm_parts_copy(const struct mfma_gemm *g, char which, size_t rows,
					size_t es, size_t off, void *buf, size_t len, int to_parts)
{
	unsigned char *p = (unsigned char *)buf;
	size_t start = 0;
	for (uint32_t i = 0; i < g->nparts && len > 0; i++) {
		const struct mfma_gemm_part *pt = &g->parts[i];
		size_t size = rows * pt->n * es;
		if (off >= start + size) {
			start += size;
			continue;
		}
		size_t in = off - start, take = size - in < len ? size - in : len;
		unsigned char *mine = (unsigned char *)(which == 'b' ? (void *)(uintptr_t)pt->b
					: which == 'c' ? (void *)(uintptr_t)pt->c : pt->d) + in;
		if (to_parts)
			memcpy(mine, p, take);
		else
			memcpy(p, mine, take);
		p += take;
		off += take;
		len -= take;
		start += size;
	}
}

/* Dense-equivalent floating point operations of a GEMM: 2*m*n*k. */
static inline double mfma_gemm_flops(const struct mfma_gemm *g)
{
	return 2.0 * g->m * g->n * g->k;
}

#ifdef __cplusplus
}
#endif

#endif
