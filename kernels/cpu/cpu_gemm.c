/* CPU GEMMs: the float64 reference and the serving paths.
 *
 * First version: correct and simple.  The serving paths are replaced by
 * blocked, threaded loops in later commits; `threads` is accepted and not
 * used yet. */
#include "cpu_gemm.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sparse24.h"

static int check_gemm(const struct mfma_gemm *g)
{
	if (!g || !g->a || !g->b || !g->d)
		return -EINVAL;
	if (g->a_sparse && (!g->a_meta || g->k % 4 != 0))
		return -EINVAL;
	if (mfma_dtype_is_float(g->in_dtype)) {
		if (g->out_dtype != MFMA_DT_F32 && g->out_dtype != g->in_dtype)
			return -EINVAL;
	} else if (g->in_dtype == MFMA_DT_I8) {
		if (g->out_dtype != MFMA_DT_I32)
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	if (g->beta != 0.0f && !g->c)
		return -EINVAL;
	return 0;
}

int cpu_gemm_ref_f64(const struct mfma_gemm *g, double *out)
{
	int rc = check_gemm(g);
	if (rc < 0 || !out)
		return rc < 0 ? rc : -EINVAL;
	size_t m = g->m, n = g->n, k = g->k;
	size_t es = mfma_dtype_size(g->in_dtype);
	const void *a = g->a;
	void *dense = NULL;
	if (g->a_sparse) {
		dense = malloc(m * k * es + 1);
		if (!dense)
			return -ENOMEM;
		rc = sparse24_decompress(g->a, g->a_meta, g->in_dtype, m, k, dense, NULL, NULL);
		if (rc < 0) {
			free(dense);
			return rc;
		}
		a = dense;
	}
	for (size_t i = 0; i < m; i++) {
		for (size_t j = 0; j < n; j++) {
			double acc = 0.0;
			for (size_t p = 0; p < k; p++)
				acc += mfma_load_f64(a, g->in_dtype, i * k + p) *
				       mfma_load_f64(g->b, g->in_dtype, p * n + j);
			double r = (double)g->alpha * acc;
			if (g->beta != 0.0f)
				r += (double)g->beta * mfma_load_f64(g->c, g->out_dtype, i * n + j);
			out[i * n + j] = r;
		}
	}
	free(dense);
	return 0;
}

double cpu_rel_frobenius(const void *d, enum mfma_dtype t, const double *ref, size_t count)
{
	double num = 0.0, den = 0.0;
	for (size_t i = 0; i < count; i++) {
		double e = mfma_load_f64(d, t, i) - ref[i];
		num += e * e;
		den += ref[i] * ref[i];
	}
	if (den == 0.0)
		return num == 0.0 ? 0.0 : INFINITY;
	return sqrt(num / den);
}

static void to_f32(const void *src, enum mfma_dtype t, size_t count, float *dst)
{
	for (size_t i = 0; i < count; i++)
		dst[i] = (float)mfma_load_f64(src, t, i);
}

static void store_out(void *d, enum mfma_dtype t, size_t i, float v)
{
	switch (t) {
	case MFMA_DT_F32: ((float *)d)[i] = v; break;
	case MFMA_DT_F16: ((uint16_t *)d)[i] = mfma_f32_to_f16(v); break;
	case MFMA_DT_BF16: ((uint16_t *)d)[i] = mfma_f32_to_bf16(v); break;
	default: break;
	}
}

/* acc holds A.B in f32; applies alpha, beta, C and rounds into D. */
static void finish_float(const struct mfma_gemm *g, const float *acc)
{
	size_t count = (size_t)g->m * g->n;
	for (size_t i = 0; i < count; i++) {
		float v = g->alpha * acc[i];
		if (g->beta != 0.0f)
			v += g->beta * (float)mfma_load_f64(g->c, g->out_dtype, i);
		store_out(g->d, g->out_dtype, i, v);
	}
}

static int run_dense_float(const struct mfma_gemm *g)
{
	size_t m = g->m, n = g->n, k = g->k;
	float *a = malloc(m * k * sizeof(float) + 1);
	float *b = malloc(k * n * sizeof(float) + 1);
	float *acc = malloc(m * n * sizeof(float) + 1);
	int rc = -ENOMEM;
	if (!a || !b || !acc)
		goto out;
	to_f32(g->a, g->in_dtype, m * k, a);
	to_f32(g->b, g->in_dtype, k * n, b);
	if (m && n)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f,
			    a, (int)(k ? k : 1), b, (int)n, 0.0f, acc, (int)n);
	if (k == 0)
		memset(acc, 0, m * n * sizeof(float));
	finish_float(g, acc);
	rc = 0;
out:
	free(a);
	free(b);
	free(acc);
	return rc;
}

static int run_sparse_float(const struct mfma_gemm *g)
{
	size_t m = g->m, n = g->n, k = g->k;
	size_t words = sparse24_meta_words(k);
	float *b = malloc(k * n * sizeof(float) + 1);
	float *acc = calloc(m * n + 1, sizeof(float));
	int rc = -ENOMEM;
	if (!b || !acc)
		goto out;
	to_f32(g->b, g->in_dtype, k * n, b);
	for (size_t i = 0; i < m; i++) {
		for (size_t grp = 0; grp < k / 4; grp++) {
			unsigned nib = sparse24_nibble(g->a_meta + i * words, grp);
			for (unsigned s = 0; s < 2; s++) {
				size_t p = 4 * grp + (s ? nib >> 2 : nib & 3u);
				float av = (float)mfma_load_f64(g->a, g->in_dtype,
								i * (k / 2) + 2 * grp + s);
				for (size_t j = 0; j < n; j++)
					acc[i * n + j] += av * b[p * n + j];
			}
		}
	}
	finish_float(g, acc);
	rc = 0;
out:
	free(b);
	free(acc);
	return rc;
}

static int run_i8(const struct mfma_gemm *g)
{
	size_t m = g->m, n = g->n, k = g->k;
	size_t words = sparse24_meta_words(k);
	const int8_t *a = g->a, *b = g->b;
	int32_t *d = g->d;
	const int32_t *c = g->c;
	for (size_t i = 0; i < m; i++) {
		for (size_t j = 0; j < n; j++) {
			int32_t acc = 0;
			if (g->a_sparse) {
				for (size_t grp = 0; grp < k / 4; grp++) {
					unsigned nib = sparse24_nibble(g->a_meta + i * words, grp);
					acc += a[i * (k / 2) + 2 * grp] * b[(4 * grp + (nib & 3u)) * n + j];
					acc += a[i * (k / 2) + 2 * grp + 1] *
					       b[(4 * grp + (nib >> 2)) * n + j];
				}
			} else {
				for (size_t p = 0; p < k; p++)
					acc += a[i * k + p] * b[p * n + j];
			}
			d[i * n + j] = acc + (g->beta != 0.0f ? c[i * n + j] : 0);
		}
	}
	return 0;
}

int cpu_gemm_run(const struct mfma_gemm *g, int threads, const char **variant)
{
	(void)threads;
	int rc = check_gemm(g);
	if (rc < 0)
		return rc;
	if (g->a_sparse) {
		rc = sparse24_meta_check(g->a_meta, g->m, g->k, NULL, NULL);
		if (rc < 0)
			return rc;
	}
	const char *name;
	if (g->in_dtype == MFMA_DT_I8) {
		name = g->a_sparse ? "cpu.sp24.i8" : "cpu.i8";
		rc = run_i8(g);
	} else if (g->a_sparse) {
		name = "cpu.sp24.f32";
		rc = run_sparse_float(g);
	} else {
		name = "cpu.sgemm.f32";
		rc = run_dense_float(g);
	}
	if (rc == 0 && variant)
		*variant = name;
	return rc;
}
