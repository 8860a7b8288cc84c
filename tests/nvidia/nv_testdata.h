/* Random operands for the NVIDIA tests and the kernel benchmark: never
 * zero, 2:4 patterns drawn from all six position pairs. */
#ifndef MFMA_NV_TESTDATA_H
#define MFMA_NV_TESTDATA_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "mfma_dtype.h"
#include "sparse24.h"

static inline uint32_t nvt_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (uint32_t)(*s >> 16);
}

/* One random non-zero element: integers in [-127, 127], floats in
 * (-2, 2) with 16 random bits (then rounded to the type), so that sums
 * of products round in f32 as real data does. */
static inline void nvt_put(void *p, enum mfma_dtype t, size_t i, uint64_t *s)
{
	if (t == MFMA_DT_I8 || t == MFMA_DT_I32) {
		int v;
		do
			v = (int)(nvt_rand(s) % 255) - 127;
		while (v == 0);
		if (t == MFMA_DT_I8)
			((int8_t *)p)[i] = (int8_t)v;
		else
			((int32_t *)p)[i] = v * 1000;
		return;
	}
	float f;
	do
		f = (float)((int)(nvt_rand(s) & 0xffffu) - 0x8000) / 16384.0f;
	while (f == 0.0f);
	if (t == MFMA_DT_F32)
		((float *)p)[i] = f;
	else
		((uint16_t *)p)[i] = t == MFMA_DT_BF16 ? mfma_f32_to_bf16(f) : mfma_f32_to_f16(f);
}

static inline void nvt_fill(void *p, enum mfma_dtype t, size_t count, uint64_t *s)
{
	for (size_t i = 0; i < count; i++)
		nvt_put(p, t, i, s);
}

/* A random 2:4 m x k matrix (k a multiple of 4) in canonical form; when
 * dense is not NULL the uncompressed matrix too.  0 or -ENOMEM. */
static inline int nvt_sparse(enum mfma_dtype t, size_t m, size_t k, void *values, uint32_t *meta,
			     void *dense, uint64_t *s)
{
	size_t es = mfma_dtype_size(t);
	void *d = dense ? dense : malloc(m * k * es + 1);
	if (!d)
		return -ENOMEM;
	memset(d, 0, m * k * es);
	for (size_t r = 0; r < m; r++)
		for (size_t g = 0; g < k / 4; g++) {
			unsigned i0 = nvt_rand(s) % 4, i1;
			do
				i1 = nvt_rand(s) % 4;
			while (i1 == i0);
			nvt_put(d, t, r * k + 4 * g + i0, s);
			nvt_put(d, t, r * k + 4 * g + i1, s);
		}
	int rc = sparse24_compress(d, t, m, k, values, meta, NULL, NULL);
	if (!dense)
		free(d);
	return rc;
}

/* Relative Frobenius error allowed for an output type (STYLE: f32 1e-5,
 * f16/bf16 1e-2, integers exact). */
static inline double nvt_tolerance(enum mfma_dtype out)
{
	switch (out) {
	case MFMA_DT_F32: return 1e-5;
	case MFMA_DT_F16:
	case MFMA_DT_BF16: return 1e-2;
	default: return 0.0;
	}
}

#endif
