/* A checked GEMM for integration tests (harness_gemm.h). */
#include "harness_gemm.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cpu_gemm.h"
#include "ctl_util.h"

mfma_client *harness_client(const struct mfmad_proc *p)
{
	mfma_client *c;
	struct mfma_error err;
	if (mfma_connect(p->endpoint, &c, &err) != 0)
		fail_msg("connect to %s: %s", p->endpoint, err.message);
	mfma_set_timeout(c, 60000);
	return c;
}

void harness_dense_f32_args(struct mfma_gemm_args *g, const float *a, const float *b, uint32_t m,
			    uint32_t k, uint32_t n)
{
	mfma_gemm_args_init(g);
	g->a.kind = MFMA_OPERAND_DENSE;
	g->a.dense = (struct mfma_matrix){ m, k, MFMA_TYPE_F32, a, (size_t)m * k * 4 };
	g->b = (struct mfma_matrix){ k, n, MFMA_TYPE_F32, b, (size_t)k * n * 4 };
}

double harness_worst_error(const float *d, const float *a, const float *b, const float *c,
			   float alpha, float beta, uint32_t m, uint32_t k, uint32_t n)
{
	const struct mfma_gemm g = {
		.m = m, .n = n, .k = k, .in_dtype = MFMA_DT_F32, .out_dtype = MFMA_DT_F32,
		.alpha = alpha, .beta = c ? beta : 0.0f, .a = a, .b = b, .c = c,
		.d = (void *)(uintptr_t)d,
	};
	double *ref = malloc((size_t)m * n * sizeof(double) + sizeof(double));
	assert_non_null(ref);
	assert_int_equal(cpu_gemm_ref_f64(&g, ref), 0);
	double worst = 0;
	for (size_t i = 0; i < (size_t)m * n; i++) {
		double e = fabs(d[i] - ref[i]) / (fabs(ref[i]) + 1.0);
		worst = e > worst ? e : worst;
	}
	free(ref);
	return worst;
}

void harness_gemm_checked(mfma_client *c, uint32_t m, uint32_t n, uint32_t k, uint64_t seed)
{
	float *a = malloc((size_t)m * k * 4), *b = malloc((size_t)k * n * 4);
	double *ref = malloc((size_t)m * n * sizeof(double));
	assert_true(a && b && ref);
	assert_int_equal(ctl_random_matrix(a, MFMA_DT_F32, m, k, false, seed), 0);
	assert_int_equal(ctl_random_matrix(b, MFMA_DT_F32, k, n, false, seed + 1), 0);
	struct mfma_gemm_args ga;
	harness_dense_f32_args(&ga, a, b, m, k, n);
	struct mfma_gemm_result r;
	struct mfma_error err;
	if (mfma_gemm(c, &ga, &r, &err) != 0)
		fail_msg("gemm %ux%ux%u: %s", m, n, k, err.message);
	assert_int_equal(r.d.rows, m);
	assert_int_equal(r.d.cols, n);
	struct mfma_gemm g = {
		.m = m, .n = n, .k = k, .in_dtype = MFMA_DT_F32, .out_dtype = MFMA_DT_F32,
		.alpha = 1.0f, .a = a, .b = b, .d = (void *)(uintptr_t)r.d.data,
	};
	assert_int_equal(cpu_gemm_ref_f64(&g, ref), 0);
	double e = cpu_rel_frobenius(r.d.data, MFMA_DT_F32, ref, (size_t)m * n);
	if (!(e < ctl_tolerance(MFMA_DT_F32, MFMA_DT_F32)))
		fail_msg("gemm %ux%ux%u: relative error %g", m, n, k, e);
	mfma_gemm_result_free(&r);
	free(a);
	free(b);
	free(ref);
}
