/* CPU GEMMs: the float64 reference, and the serving entry point that
 * sends dense float to OpenBLAS and everything else to our blocked loops
 * (cpu_blocked.c). */
#include "cpu_gemm.h"

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_internal.h"
#include "cpu_pool.h"
#include "sparse24.h"

/* Bounds, in floats, on the temporaries of the dense f16/bf16 path: the
 * widened blocks of A and of B, and the f32 accumulator for a 16-bit D. */
#define DENSE_CVT_MAX ((size_t)4 << 20)
#define DENSE_W_MAX ((size_t)8 << 20)
/* Below this many multiply-adds per thread, starting another thread costs
 * more than it saves. */
#define MIN_MACS_PER_THREAD ((double)(1 << 21))

/* The shape rules of mfma_gemm.h, the output type by the one rule of
 * mfma_dtype.h.  `serving` adds what the serving paths rely on: integer
 * GEMMs have alpha 1 and beta 0 or 1. */
static int check_gemm(const struct mfma_gemm *g, bool serving)
{
	if (!g || !g->b || !g->d || !g->a)
		return -EINVAL;
	if (g->a_sparse && (!g->a_meta || g->k % 4 != 0))
		return -EINVAL;
	if (!mfma_out_dtype_ok(g->in_dtype, g->out_dtype))
		return -EINVAL;
	if (serving && g->in_dtype == MFMA_DT_I8 &&
	    (g->alpha != 1.0f || (g->beta != 0.0f && g->beta != 1.0f)))
		return -EINVAL;
	if (g->beta != 0.0f && !g->c)
		return -EINVAL;
	return 0;
}

static size_t min_sz(size_t a, size_t b)
{
	return a < b ? a : b;
}

/* Columns of B the reference widens to float64 at a time: a block of
 * REF_NB x k doubles, each column's k values in a row, so that the inner
 * products run over consecutive doubles. */
#define REF_NB 64

/* out[j] = alpha * sum_p a[p] * bt[j * k + p] (+ beta * C), for nb
 * columns; four columns at a time, each summed over p in order, as a
 * plain triple loop sums it. */
static void ref_row(const struct mfma_gemm *g, const double *a, const double *bt, size_t k, size_t nb,
		    size_t c0, size_t i, double *out)
{
	size_t j = 0;
	for (; j + 4 <= nb; j += 4) {
		const double *b0 = bt + j * k, *b1 = b0 + k, *b2 = b1 + k, *b3 = b2 + k;
		double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
		for (size_t p = 0; p < k; p++) {
			s0 += a[p] * b0[p];
			s1 += a[p] * b1[p];
			s2 += a[p] * b2[p];
			s3 += a[p] * b3[p];
		}
		out[j] = s0;
		out[j + 1] = s1;
		out[j + 2] = s2;
		out[j + 3] = s3;
	}
	for (; j < nb; j++) {
		const double *b0 = bt + j * k;
		double s0 = 0.0;
		for (size_t p = 0; p < k; p++)
			s0 += a[p] * b0[p];
		out[j] = s0;
	}
	for (j = 0; j < nb; j++) {
		double r = (double)g->alpha * out[j];
		if (g->beta != 0.0f)
			r += (double)g->beta * mfma_load_f64(g->c, g->out_dtype, i * g->n + c0 + j);
		out[j] = r;
	}
}

int cpu_gemm_ref_f64(const struct mfma_gemm *g, double *out)
{
	int rc = check_gemm(g, false);
	if (rc < 0)
		return rc;
	if (!out)
		return -EINVAL;
	size_t m = g->m, n = g->n, k = g->k;
	const void *a = g->a;
	void *dense = NULL;
	if (g->a_sparse) {
		dense = malloc(m * k * mfma_dtype_size(g->in_dtype) + 1);
		if (!dense)
			return -ENOMEM;
		rc = sparse24_decompress(g->a, g->a_meta, g->in_dtype, m, k, dense, NULL, NULL);
		if (rc < 0) {
			free(dense);
			return rc;
		}
		a = dense;
	}
	double *arow = malloc(k * sizeof(double) + 8), *bt = malloc(min_sz(n, REF_NB) * k * sizeof(double) + 8);
	if (!arow || !bt) {
		free(arow);
		free(bt);
		free(dense);
		return -ENOMEM;
	}
	for (size_t c0 = 0; c0 < n; c0 += REF_NB) {
		const size_t nb = min_sz(REF_NB, n - c0);
		/* In squares of REF_NB x REF_NB, so that neither the reads of
		 * B's rows nor the writes along K stride over more memory at a
		 * time than a square. */
		for (size_t p0 = 0; p0 < k; p0 += REF_NB)
			for (size_t j = 0; j < nb; j++)
				for (size_t p = p0; p < min_sz(k, p0 + REF_NB); p++)
					bt[j * k + p] = mfma_load_f64(g->b, g->in_dtype, p * n + c0 + j);
		for (size_t i = 0; i < m; i++) {
			for (size_t p = 0; p < k; p++)
				arow[p] = mfma_load_f64(a, g->in_dtype, i * k + p);
			ref_row(g, arow, bt, k, nb, c0, i, out + i * n + c0);
		}
	}
	free(arow);
	free(bt);
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

void cpu_gemm_set_blas_threads(int threads)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	openblas_set_num_threads(threads > 0 ? threads : n > 0 ? (int)n : 1);
}

/* Dense f32/f16/bf16 through cblas_sgemm.  f32 in and out is one sgemm
 * call on the caller's buffers.  Otherwise the inputs are widened block by
 * block (mb rows of M, kb rows of K, nb columns of N) and a 16-bit D
 * accumulates in an f32 block of mb x nb, so no temporary grows past the
 * bounds (in floats) cvt_max and w_max, whatever the shape: a block is
 * at least 16 wide in N and K (narrower ones make sgemm crawl), and M
 * gives way first. */
int cpu_sgemm_run(const struct mfma_gemm *g, size_t cvt_max, size_t w_max)
{
	size_t m = g->m, n = g->n, k = g->k;
	if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
		return -EOVERFLOW;
	if (m == 0 || n == 0)
		return 0;
	bool in32 = g->in_dtype == MFMA_DT_F32;
	bool w_is_d = g->out_dtype == MFMA_DT_F32;
	size_t es_out = mfma_dtype_size(g->out_dtype);
	const size_t least = 16;
	size_t mb = m;
	if (!w_is_d && mb * least > w_max)
		mb = w_max / least;
	if (!in32 && mb * least > cvt_max)
		mb = cvt_max / least;
	mb = mb ? min_sz(mb, m) : 1;
	size_t nb = n;
	if (!w_is_d && mb * n > w_max)
		nb = w_max / mb < least ? least : w_max / mb;
	if (!in32 && k * nb > cvt_max)
		nb = cvt_max / k < least ? least : cvt_max / k;
	nb = min_sz(nb, n);
	size_t kb = k;
	if (!in32 && (mb > nb ? mb : nb) * k > cvt_max) {
		kb = cvt_max / (mb > nb ? mb : nb);
		kb = kb < least ? least : kb;
	}

	/* Temporaries from this thread's workspace (cpu_workspace.c). */
	size_t wn = w_is_d ? 0 : (mb * nb + 15) / 16 * 16;
	size_t an = in32 ? 0 : (mb * min_sz(kb, k) + 15) / 16 * 16;
	size_t bn = in32 ? 0 : min_sz(kb, k) * nb;
	float *ws = NULL;
	if (wn + an + bn > 0) {
		ws = cpu_workspace((wn + an + bn) * sizeof(float));
		if (!ws)
			return -ENOMEM;
	}
	float *abuf = ws ? ws + wn : NULL, *bbuf = ws ? ws + wn + an : NULL;
	size_t ldw = w_is_d ? n : nb;
	for (size_t ic = 0; ic < m; ic += mb) {
		size_t mbb = min_sz(mb, m - ic);
		for (size_t jc = 0; jc < n; jc += nb) {
			size_t nbb = min_sz(nb, n - jc);
			float *wb = w_is_d ? (float *)g->d + ic * n + jc : ws;
			/* W starts as C, which the first sgemm scales by beta. */
			for (size_t i = 0; i < mbb; i++) {
				float *wr = wb + i * ldw;
				if (g->beta == 0.0f) {
					if (k == 0)
						memset(wr, 0, nbb * sizeof(float));
					continue;
				}
				const void *cr = (const char *)g->c + ((ic + i) * n + jc) * es_out;
				if ((const void *)wr != cr)
					cpu_cvt_to_f32(cr, g->out_dtype, nbb, wr);
				if (k == 0)
					for (size_t j = 0; j < nbb; j++)
						wr[j] *= g->beta;
			}
			for (size_t pc = 0; pc < k; pc += kb) {
				size_t kbb = min_sz(kb, k - pc);
				const float *ab = (const float *)g->a + ic * k + pc;
				const float *bb = (const float *)g->b + pc * n + jc;
				size_t lda = k, ldb = n;
				if (!in32) {
					size_t es = mfma_dtype_size(g->in_dtype);
					for (size_t i = 0; i < mbb; i++)
						cpu_cvt_to_f32((const char *)g->a + ((ic + i) * k + pc) * es,
							       g->in_dtype, kbb, abuf + i * kbb);
					for (size_t p = 0; p < kbb; p++)
						cpu_cvt_to_f32((const char *)g->b + ((pc + p) * n + jc) * es,
							       g->in_dtype, nbb, bbuf + p * nbb);
					ab = abuf;
					bb = bbuf;
					lda = kbb;
					ldb = nbb;
				}
				float beta = pc == 0 ? g->beta : 1.0f;
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)mbb, (int)nbb,
					    (int)kbb, g->alpha, ab, (int)lda, bb, (int)ldb, beta, wb,
					    (int)ldw);
			}
			if (!w_is_d)
				for (size_t i = 0; i < mbb; i++)
					cpu_cvt_from_f32(wb + i * ldw, g->out_dtype, nbb,
							 (char *)g->d + ((ic + i) * n + jc) * es_out);
		}
	}
	return 0;
}

static const char *variant_name(const struct mfma_gemm *g)
{
	if (g->in_dtype == MFMA_DT_I8)
		return g->a_sparse ? "cpu.sp24.i8" : "cpu.i8";
	switch (g->in_dtype) {
	case MFMA_DT_F16: return g->a_sparse ? "cpu.sp24.f16" : "cpu.sgemm.f16";
	case MFMA_DT_BF16: return g->a_sparse ? "cpu.sp24.bf16" : "cpu.sgemm.bf16";
	default: return g->a_sparse ? "cpu.sp24.f32" : "cpu.sgemm.f32";
	}
}

/* How many threads a GEMM is worth: at most `threads`, and none that
 * would get less than MIN_MACS_PER_THREAD, so tiny work stays on the
 * caller and wakes no other thread. */
static unsigned threads_for(const struct mfma_gemm *g, unsigned threads)
{
	double macs = (double)g->m * g->n * g->k;
	while (threads > 1 && macs / threads < MIN_MACS_PER_THREAD)
		threads--;
	return threads ? threads : 1;
}

static bool takes_blocked(const struct mfma_gemm *g)
{
	return g->a_sparse || g->in_dtype == MFMA_DT_I8;
}

/* Nibbles are not re-checked here: the daemon checks a weight's meta once
 * when it arrives, and the kernels only ever use the two low bits of each
 * position, so a bad nibble gives a wrong product, never a stray access. */
static int run_checked(const struct mfma_gemm *g, struct cpu_pool *pool, unsigned threads,
		       const char **variant)
{
	int rc;
	if (takes_blocked(g))
		rc = cpu_blocked_run(g, pool, (int)threads, cpu_kfamily_best());
	else
		rc = cpu_sgemm_run(g, DENSE_CVT_MAX, DENSE_W_MAX);
	cpu_workspace_trim();
	if (rc == 0 && variant)
		*variant = variant_name(g);
	return rc;
}

int cpu_gemm_run_pool(const struct mfma_gemm *g, struct cpu_pool *pool, const char **variant)
{
	int rc = check_gemm(g, true);
	if (rc < 0)
		return rc;
	return run_checked(g, pool, threads_for(g, cpu_pool_size(pool)), variant);
}

int cpu_gemm_run(const struct mfma_gemm *g, int threads, const char **variant)
{
	int rc = check_gemm(g, true);
	if (rc < 0)
		return rc;
	if (threads <= 0) {
		long nproc = sysconf(_SC_NPROCESSORS_ONLN);
		threads = nproc > 0 ? (int)(nproc < 256 ? nproc : 256) : 1;
	}
	unsigned nt = threads_for(g, (unsigned)threads);
	/* A pool for this call only, and only when it will use it. */
	struct cpu_pool *pool = NULL;
	if (nt > 1 && takes_blocked(g)) {
		pool = cpu_pool_create(nt);
		if (!pool)
			return -ENOMEM;
	}
	rc = run_checked(g, pool, nt, variant);
	cpu_pool_destroy(pool);
	return rc;
}
