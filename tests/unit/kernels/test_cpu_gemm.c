/* The CPU GEMMs against the float64 reference: every dtype, dense and
 * 2:4, alpha/beta/C, output f32 and the input type, odd shapes, one and
 * two threads, every micro-kernel family this CPU runs.  The reference
 * itself is checked against a hand-computed product first. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cmocka.h>

#include "cpu_gemm.h"
#include "cpu_internal.h"
#include "sparse24.h"

static uint32_t rnd(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

/* Random, never zero: floats uniform in +-[1/64, 1), i8 in +-[1, 127]
 * (the full i8 range, but not -128, keeps products symmetric), i32 in
 * +-[1, 1000]. */
static void fill(void *p, enum mfma_dtype t, size_t count, uint32_t *s)
{
	for (size_t i = 0; i < count; i++) {
		uint32_t r = rnd(s);
		float f = (float)(r % 63 + 1) / 64.0f + (float)(r >> 12 & 0xff) / 16384.0f;
		if (r & 0x40000)
			f = -f;
		switch (t) {
		case MFMA_DT_F32: ((float *)p)[i] = f; break;
		case MFMA_DT_F16: ((uint16_t *)p)[i] = mfma_f32_to_f16(f); break;
		case MFMA_DT_BF16: ((uint16_t *)p)[i] = mfma_f32_to_bf16(f); break;
		case MFMA_DT_I8: ((int8_t *)p)[i] = (int8_t)((r % 127 + 1) * (r & 0x40000 ? -1 : 1)); break;
		case MFMA_DT_I32: ((int32_t *)p)[i] = (int32_t)(r % 1000 + 1) * (r & 0x40000 ? -1 : 1); break;
		default: break;
		}
	}
}

/* The relative Frobenius error a right D of type `out` may have with
 * inner dimension k: libmfmaclient's rule (mfma_check_tolerance, which
 * this test does not link), 2*u_out + (k + 2) * 2^-24.  By the output
 * type and K, not the input type: f16 and bf16 products are exact in f32
 * and summed in f32, so an f32 D of f16 inputs is held to f32 accuracy.
 * (By the input type, 1e-2, an f32 D rounded to f16 on its way out
 * passed.) */
static double tolerance(enum mfma_dtype out, uint32_t k)
{
	const double u32 = ldexp(1.0, -24);
	double u_out;
	switch (out) {
	case MFMA_DT_F32: u_out = u32; break;
	case MFMA_DT_F16: u_out = ldexp(1.0, -11); break;
	case MFMA_DT_BF16: u_out = ldexp(1.0, -8); break;
	default: return 0.0; /* integers are exact */
	}
	return 2.0 * u_out + ((double)k + 2.0) * u32;
}

/* One problem: random A (and its 2:4 form), B and C, and the float64
 * reference for the chosen alpha/beta/out type. */
struct problem {
	struct mfma_gemm g;
	void *a, *vals, *b, *c, *d;
	uint32_t *meta;
	double *ref;
};

static void problem_init(struct problem *pr, unsigned m, unsigned n, unsigned k,
			 enum mfma_dtype in, enum mfma_dtype out, bool sparse, float alpha,
			 float beta, uint32_t seed)
{
	size_t ei = mfma_dtype_size(in), eo = mfma_dtype_size(out);
	memset(pr, 0, sizeof(*pr));
	pr->a = malloc((size_t)m * k * ei + 1);
	pr->vals = malloc((size_t)m * k / 2 * ei + 1);
	pr->meta = malloc(sparse24_meta_bytes(m, k) + 4);
	pr->b = malloc((size_t)k * n * ei + 1);
	pr->c = malloc((size_t)m * n * eo + 1);
	pr->d = malloc((size_t)m * n * eo + 1);
	pr->ref = malloc((size_t)m * n * sizeof(double) + 1);
	assert_non_null(pr->a);
	assert_non_null(pr->vals);
	assert_non_null(pr->meta);
	assert_non_null(pr->b);
	assert_non_null(pr->c);
	assert_non_null(pr->d);
	assert_non_null(pr->ref);
	fill(pr->a, in, (size_t)m * k, &seed);
	fill(pr->b, in, (size_t)k * n, &seed);
	fill(pr->c, out, (size_t)m * n, &seed);
	/* Random magnitudes make random 2:4 patterns; zeroing a few kept
	 * values makes groups with a spare slot. */
	assert_int_equal(sparse24_prune(pr->a, in, m, k, pr->vals, pr->meta), 0);
	for (size_t i = 0; i < (size_t)m * k / 2; i++)
		if (rnd(&seed) % 16 == 0)
			memset((char *)pr->vals + i * ei, 0, ei);
	pr->g = (struct mfma_gemm){
		.m = m, .n = n, .k = k, .in_dtype = in, .out_dtype = out, .alpha = alpha,
		.beta = beta, .a_sparse = sparse, .a = sparse ? pr->vals : pr->a,
		.a_meta = sparse ? pr->meta : NULL, .b = pr->b, .c = beta != 0.0f ? pr->c : NULL,
		.d = pr->d,
	};
	assert_int_equal(cpu_gemm_ref_f64(&pr->g, pr->ref), 0);
}

static void problem_free(struct problem *pr)
{
	free(pr->a);
	free(pr->vals);
	free(pr->meta);
	free(pr->b);
	free(pr->c);
	free(pr->d);
	free(pr->ref);
}

/* Runs the problem with `fam` on a pool of `threads` (fam NULL: the
 * serving entry point, with its own threads, or on a pool when
 * `on_pool`) and checks it. */
static void run_once(struct problem *pr, int threads, const struct cpu_kfamily *fam, bool on_pool)
{
	const struct mfma_gemm *g = &pr->g;
	size_t count = (size_t)g->m * g->n;
	memset(pr->d, 0xa5, count * mfma_dtype_size(g->out_dtype)); /* no stale results */
	int rc;
	if (fam || on_pool) {
		struct cpu_pool *pool = cpu_pool_create((unsigned)threads);
		assert_non_null(pool);
		rc = fam ? cpu_blocked_run(g, pool, threads, fam) : cpu_gemm_run_pool(g, pool, NULL);
		cpu_pool_destroy(pool);
	} else {
		rc = cpu_gemm_run(g, threads, NULL);
	}
	assert_int_equal(rc, 0);
	double err = cpu_rel_frobenius(pr->d, g->out_dtype, pr->ref, count);
	double tol = tolerance(g->out_dtype, g->k);
	if (!(err <= tol))
		print_error("%ux%ux%u in %s out %s %s alpha %g beta %g threads %d family %s: "
			    "rel err %g > %g\n",
			    g->m, g->n, g->k, mfma_dtype_name(g->in_dtype),
			    mfma_dtype_name(g->out_dtype), g->a_sparse ? "2:4" : "dense",
			    (double)g->alpha, (double)g->beta, threads, fam ? fam->isa : "serving",
			    err, tol);
	assert_true(err <= tol);
}

static void run_and_check(struct problem *pr, int threads, const struct cpu_kfamily *fam)
{
	run_once(pr, threads, fam, false);
	if (!fam)
		run_once(pr, threads, NULL, true);
}

static const enum mfma_dtype in_types[] = { MFMA_DT_F32, MFMA_DT_F16, MFMA_DT_BF16, MFMA_DT_I8 };

/* Every combination on one shape: dtypes, dense and 2:4, both output
 * types, beta zero and not, 1 and 2 threads, the serving entry point and
 * (for our own loops) each kernel family. */
static void check_shape(unsigned m, unsigned n, unsigned k, bool all_families, bool both_betas)
{
	const struct cpu_kfamily *fams[4];
	unsigned nfam = all_families ? cpu_kfamily_all(fams, 4) : 0;
	uint32_t seed = m * 7919u + n * 131u + k;
	for (size_t ti = 0; ti < 4; ti++) {
		enum mfma_dtype in = in_types[ti];
		bool integer = in == MFMA_DT_I8;
		for (int sparse = 0; sparse < 2; sparse++)
			for (int oi = 0; oi < (integer ? 1 : 2); oi++)
				for (int bi = both_betas ? 0 : 1; bi < 2; bi++) {
					enum mfma_dtype out = integer ? MFMA_DT_I32
								      : oi ? in : MFMA_DT_F32;
					float alpha = integer ? 1.0f : 1.5f;
					float beta = bi == 0 ? 0.0f : integer ? 1.0f : -0.75f;
					struct problem pr;
					problem_init(&pr, m, n, k, in, out, sparse, alpha, beta, seed++);
					for (int threads = 1; threads <= 2; threads++) {
						run_and_check(&pr, threads, NULL);
						if (sparse || integer)
							for (unsigned f = 0; f < nfam; f++)
								run_and_check(&pr, threads, fams[f]);
					}
					problem_free(&pr);
				}
	}
}

/* A = [1 2 3 4; 5 6 7 8], B = [1 0; 0 1; 1 1; 2 -1], C = [1 2; 3 4]:
 * A.B = [12 1; 28 5], and 2*A.B + 0.5*C = [24.5 3; 57.5 12]. */
static void test_ref_by_hand(void **state)
{
	(void)state;
	const float a[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	const float b[8] = { 1, 0, 0, 1, 1, 1, 2, -1 };
	const float c[4] = { 1, 2, 3, 4 };
	float d[4];
	double out[4];
	struct mfma_gemm g = { .m = 2, .n = 2, .k = 4, .in_dtype = MFMA_DT_F32,
			       .out_dtype = MFMA_DT_F32, .alpha = 2.0f, .beta = 0.5f,
			       .a = a, .b = b, .c = c, .d = d };
	assert_int_equal(cpu_gemm_ref_f64(&g, out), 0);
	assert_true(out[0] == 24.5 && out[1] == 3.0 && out[2] == 57.5 && out[3] == 12.0);

	/* 2:4: rows [1 0 3 0] and [0 6 0 8], i.e. values {1,3} at (0,2) and
	 * {6,8} at (1,3): A.B = [4 3; 16 -2]. */
	const float vals[4] = { 1, 3, 6, 8 };
	const uint32_t meta[2] = { 0 | 2 << 2, 1 | 3 << 2 };
	g = (struct mfma_gemm){ .m = 2, .n = 2, .k = 4, .in_dtype = MFMA_DT_F32,
				.out_dtype = MFMA_DT_F32, .alpha = 1.0f, .a_sparse = true,
				.a = vals, .a_meta = meta, .b = b, .d = d };
	assert_int_equal(cpu_gemm_ref_f64(&g, out), 0);
	assert_true(out[0] == 4.0 && out[1] == 3.0 && out[2] == 16.0 && out[3] == -2.0);
	assert_int_equal(cpu_gemm_run(&g, 1, NULL), 0);
	assert_true(d[0] == 4.0f && d[1] == 3.0f && d[2] == 16.0f && d[3] == -2.0f);

	/* i8: the same numbers, exact in i32. */
	const int8_t ai[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, bi[8] = { 1, 0, 0, 1, 1, 1, 2, -1 };
	const int32_t ci[4] = { 1, 2, 3, 4 };
	int32_t di[4];
	g = (struct mfma_gemm){ .m = 2, .n = 2, .k = 4, .in_dtype = MFMA_DT_I8,
				.out_dtype = MFMA_DT_I32, .alpha = 1.0f, .beta = 1.0f,
				.a = ai, .b = bi, .c = ci, .d = di };
	assert_int_equal(cpu_gemm_ref_f64(&g, out), 0);
	assert_true(out[0] == 13.0 && out[1] == 3.0 && out[2] == 31.0 && out[3] == 9.0);
	assert_int_equal(cpu_gemm_run(&g, 2, NULL), 0);
	assert_true(di[0] == 13 && di[1] == 3 && di[2] == 31 && di[3] == 9);
}

/* Floats of a full 24-bit mantissa, exponents 2^-8 .. 2^7, either sign. */
static void wide_fill(float *p, size_t count, uint32_t *s)
{
	for (size_t i = 0; i < count; i++) {
		const uint32_t r = rnd(s), e = rnd(s);
		const float f = ldexpf((float)((r & 0xffffff) | 0x800000), (int)(e % 16) - 8 - 24);
		p[i] = e & 0x100 ? -f : f;
	}
}

/* The reference widens B in blocks of 64 columns (in squares of 64 x 64)
 * and sums four columns at a time; each sum must still be the plain
 * triple loop's, bit for bit (the same products added in the same order):
 * N on both sides of the block edge, K within one square and past it,
 * every input type, 2:4 and dense, with and without C. */
static void test_ref_is_the_plain_loop(void **state)
{
	(void)state;
	const enum mfma_dtype ins[] = { MFMA_DT_F32, MFMA_DT_F16, MFMA_DT_BF16, MFMA_DT_I8 };
	const unsigned ns[] = { 1, 3, 63, 64, 65, 130, 257 };
	for (size_t t = 0; t < sizeof(ins) / sizeof(ins[0]); t++)
		for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
			for (int sp = 0; sp < 2; sp++) {
				const enum mfma_dtype in = ins[t], out = mfma_out_dtype_default(in);
				const unsigned m = 7 + (unsigned)ni, n = ns[ni];
				const unsigned k = 36 + 4 * (unsigned)t + (ni % 2 ? 64 : 0);
				const float beta = in == MFMA_DT_I8 ? (float)sp : sp ? 0.0f : -0.75f;
				struct problem pr;
				uint32_t seed = 60 + (uint32_t)(t * 31 + ni * 2 + (unsigned)sp);
				problem_init(&pr, m, n, k, in, out, sp, in == MFMA_DT_I8 ? 1.0f : 1.25f, beta, seed);
				if (in == MFMA_DT_F32) {
					/* fill's values have so few bits that any order of
					 * adding them is exact: for f32, values of 24 bits
					 * and exponents 2^-8 .. 2^7, whose sums round, so
					 * that another order shows. */
					wide_fill(pr.a, (size_t)m * k, &seed);
					wide_fill(pr.b, (size_t)k * n, &seed);
					wide_fill(pr.c, (size_t)m * n, &seed);
					assert_int_equal(sparse24_prune(pr.a, in, m, k, pr.vals, pr.meta), 0);
					assert_int_equal(cpu_gemm_ref_f64(&pr.g, pr.ref), 0);
				}
				/* The plain loop over A as the reference sees it. */
				const void *a = pr.a;
				void *dense = NULL;
				if (sp) {
					dense = malloc((size_t)m * k * mfma_dtype_size(in) + 1);
					assert_int_equal(sparse24_decompress(pr.vals, pr.meta, in, m, k, dense, NULL,
									     NULL),
							 0);
					a = dense;
				}
				for (size_t i = 0; i < m; i++)
					for (size_t j = 0; j < n; j++) {
						double acc = 0.0;
						for (size_t p = 0; p < k; p++)
							acc += mfma_load_f64(a, in, i * k + p) *
							       mfma_load_f64(pr.b, in, p * n + j);
						double r = (double)pr.g.alpha * acc;
						if (beta != 0.0f)
							r += (double)beta * mfma_load_f64(pr.c, out, i * n + j);
						if (memcmp(&r, &pr.ref[i * n + j], sizeof(r)) != 0)
							fail_msg("%s %ux%ux%u%s (%zu, %zu): %.17g, the plain loop %.17g",
								 mfma_dtype_name(in), m, n, k, sp ? " 2:4" : "", i, j,
								 pr.ref[i * n + j], r);
					}
				free(dense);
				problem_free(&pr);
			}
}

static void test_rel_frobenius(void **state)
{
	(void)state;
	const float d[2] = { 1.0f, 2.0f }, z[2] = { 0, 0 };
	const double ref[2] = { 1.0, 1.0 }, zr[2] = { 0, 0 };
	assert_true(fabs(cpu_rel_frobenius(d, MFMA_DT_F32, ref, 2) - sqrt(0.5)) < 1e-15);
	assert_true(cpu_rel_frobenius(z, MFMA_DT_F32, zr, 2) == 0.0);
	assert_true(isinf(cpu_rel_frobenius(d, MFMA_DT_F32, zr, 2)));
	assert_true(cpu_rel_frobenius(d, MFMA_DT_F32, ref, 1) == 0.0);
}

static void test_tiny_shapes(void **state)
{
	(void)state;
	check_shape(1, 1, 4, true, true);
	check_shape(3, 5, 4, true, true);
	check_shape(17, 33, 12, true, true);
	check_shape(65, 7, 36, true, true);
}

/* Shapes that cross the blocking: a partial 64-wide panel and two K
 * blocks of the widest tiles (kc 128); two K blocks of the 16-wide tiles
 * (kc 512); more than one column block (nc 512). */
static void test_blocking_shapes(void **state)
{
	(void)state;
	check_shape(5, 70, 132, true, true);
	check_shape(21, 16, 520, true, false);
	check_shape(9, 600, 8, true, false);
}

/* The dense f16/bf16 path with tiny bounds on its temporaries, so that it
 * widens A and B in several K and N blocks and keeps D in f32 blocks. */
static void test_dense_blocks(void **state)
{
	(void)state;
	const enum mfma_dtype types[] = { MFMA_DT_F16, MFMA_DT_BF16 };
	for (size_t ti = 0; ti < 2; ti++)
		for (int oi = 0; oi < 2; oi++)
			for (int bi = 0; bi < 2; bi++) {
				enum mfma_dtype out = oi ? types[ti] : MFMA_DT_F32;
				struct problem pr;
				problem_init(&pr, 23, 75, 92, types[ti], out, false, 1.5f,
					     bi ? -0.75f : 0.0f, 40 + (uint32_t)(ti * 4 + oi * 2 + bi));
				memset(pr.d, 0xa5, 23 * 75 * mfma_dtype_size(out));
				/* nb = 1000/92 = 10, raised to 16 columns; kb = 1000/23 = 43 K rows. */
				assert_int_equal(cpu_sgemm_run(&pr.g, 1000, 600), 0);
				double err = cpu_rel_frobenius(pr.d, out, pr.ref, 23 * 75);
				assert_true(err <= tolerance(out, 92));
				problem_free(&pr);
			}
}

/* Tall A, 16-bit output: the temporaries stay within their bounds
 * however many rows M has (the blocks are at least 16 wide in N and K,
 * so M gives way).  Run on a thread of its own, whose workspace starts
 * empty; cmocka's checks stay on the test's thread. */
struct tall_run {
	struct problem pr[4];
	int rc[4];
	size_t held;
};

static void *tall_dense_run(void *arg)
{
	struct tall_run *r = arg;
	for (int i = 0; i < 4; i++)
		r->rc[i] = cpu_sgemm_run(&r->pr[i].g, 1000, 600);
	r->held = cpu_workspace_size();
	return NULL;
}

static void test_dense_blocks_tall(void **state)
{
	(void)state;
	const enum mfma_dtype types[] = { MFMA_DT_F16, MFMA_DT_BF16 };
	struct tall_run r;
	for (int i = 0; i < 4; i++)
		problem_init(&r.pr[i], 2003, 21, 72, types[i / 2], types[i / 2], false, 1.5f,
			     i % 2 ? -0.75f : 0.0f, 60 + (uint32_t)i);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, tall_dense_run, &r), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(r.rc[i], 0);
		assert_true(cpu_rel_frobenius(r.pr[i].d, types[i / 2], r.pr[i].ref, 2003 * 21) <=
			    tolerance(types[i / 2], 72));
		problem_free(&r.pr[i]);
	}
	/* W (600 floats), A's and B's widened blocks (1000 each), rounding,
	 * and the workspace's growth by half again. */
	printf("  tall dense f16/bf16 2003x21x72: workspace %zu bytes\n", r.held);
	assert_true(r.held > 0);
	assert_true(r.held <= (600 + 2 * 1000 + 32) * sizeof(float) * 3 / 2 + 64);
}

static void test_larger_shape(void **state)
{
	(void)state;
	check_shape(130, 257, 132, false, false);
}

/* C and D the same buffer (in-place accumulate), for each path. */
static void test_c_is_d(void **state)
{
	(void)state;
	for (size_t ti = 0; ti < 4; ti++)
		for (int sparse = 0; sparse < 2; sparse++) {
			enum mfma_dtype in = in_types[ti];
			enum mfma_dtype out = in == MFMA_DT_I8 ? MFMA_DT_I32 : in;
			float alpha = in == MFMA_DT_I8 ? 1.0f : 0.5f;
			float beta = in == MFMA_DT_I8 ? 1.0f : 2.0f;
			struct problem pr;
			problem_init(&pr, 37, 70, 44, in, out, sparse, alpha, beta, 5 + (uint32_t)ti);
			size_t bytes = 37 * 70 * mfma_dtype_size(out);
			memcpy(pr.d, pr.c, bytes);
			pr.g.c = pr.d;
			assert_int_equal(cpu_gemm_run(&pr.g, 2, NULL), 0);
			double err = cpu_rel_frobenius(pr.d, out, pr.ref, 37 * 70);
			assert_true(err <= tolerance(out, 44));
			problem_free(&pr);
		}
}

/* K = 0: D = beta * C (and zero when beta is 0). */
static void test_k_zero(void **state)
{
	(void)state;
	const float c[6] = { 1, 2, 3, 4, 5, 6 }, dummy[1] = { 0 };
	const uint32_t meta[3] = { 0 };
	float d[6];
	for (int sparse = 0; sparse < 2; sparse++) {
		struct mfma_gemm g = { .m = 3, .n = 2, .k = 0, .in_dtype = MFMA_DT_F32,
				       .out_dtype = MFMA_DT_F32, .alpha = 1.0f, .beta = 2.0f,
				       .a_sparse = sparse, .a = dummy, .a_meta = meta,
				       .b = dummy, .c = c, .d = d };
		memset(d, 0xff, sizeof(d));
		assert_int_equal(cpu_gemm_run(&g, 1, NULL), 0);
		for (int i = 0; i < 6; i++)
			assert_true(d[i] == 2.0f * c[i]);
		g.beta = 0.0f;
		g.c = NULL;
		memset(d, 0xff, sizeof(d));
		assert_int_equal(cpu_gemm_run(&g, 1, NULL), 0);
		for (int i = 0; i < 6; i++)
			assert_true(d[i] == 0.0f);
	}
	const int8_t di8[1] = { 0 };
	const int32_t ci[6] = { 1, -2, 3, -4, 5, -6 };
	int32_t dd[6];
	struct mfma_gemm g = { .m = 3, .n = 2, .k = 0, .in_dtype = MFMA_DT_I8,
			       .out_dtype = MFMA_DT_I32, .alpha = 1.0f, .beta = 1.0f,
			       .a = di8, .b = di8, .c = ci, .d = dd };
	assert_int_equal(cpu_gemm_run(&g, 1, NULL), 0);
	assert_memory_equal(dd, ci, sizeof(ci));
}

static void test_variants_and_errors(void **state)
{
	(void)state;
	struct problem pr;
	problem_init(&pr, 4, 8, 8, MFMA_DT_F16, MFMA_DT_F32, true, 1.0f, 0.0f, 3);
	const char *v = NULL;
	assert_int_equal(cpu_gemm_run(&pr.g, 0, &v), 0); /* threads 0: all cores */
	assert_string_equal(v, "cpu.sp24.f16");
	assert_true(cpu_rel_frobenius(pr.d, MFMA_DT_F32, pr.ref, 32) <= tolerance(MFMA_DT_F32, 8));
	pr.g.a_sparse = false;
	pr.g.a = pr.a;
	assert_int_equal(cpu_gemm_run(&pr.g, 1, &v), 0);
	assert_string_equal(v, "cpu.sgemm.f16");

	struct mfma_gemm bad = pr.g;
	bad.out_dtype = MFMA_DT_BF16; /* neither f32 nor the input type */
	v = NULL;
	assert_int_equal(cpu_gemm_run(&bad, 1, &v), -EINVAL);
	assert_null(v);
	bad = pr.g;
	bad.beta = 1.0f; /* beta without C */
	bad.c = NULL;
	assert_int_equal(cpu_gemm_run(&bad, 1, NULL), -EINVAL);
	bad = pr.g;
	bad.a_sparse = true;
	bad.a_meta = NULL;
	assert_int_equal(cpu_gemm_run(&bad, 1, NULL), -EINVAL);
	bad.a_meta = pr.meta;
	bad.k = 6;
	assert_int_equal(cpu_gemm_run(&bad, 1, NULL), -EINVAL);
	assert_int_equal(cpu_gemm_ref_f64(&bad, pr.ref), -EINVAL);
	problem_free(&pr);

	problem_init(&pr, 4, 8, 8, MFMA_DT_I8, MFMA_DT_I32, false, 1.0f, 0.0f, 4);
	assert_int_equal(cpu_gemm_run(&pr.g, 1, &v), 0);
	assert_string_equal(v, "cpu.i8");
	bad = pr.g;
	bad.alpha = 2.0f; /* integer GEMMs have alpha 1 */
	assert_int_equal(cpu_gemm_run(&bad, 1, NULL), -EINVAL);
	bad = pr.g;
	bad.out_dtype = MFMA_DT_F32;
	assert_int_equal(cpu_gemm_run(&bad, 1, NULL), -EINVAL);
	problem_free(&pr);
}

/* The per-thread scratch: aligned, reused while big enough, writable to
 * the size asked for (AddressSanitizer checks the bounds), dropped by a
 * trim only when it is large. */
static void test_workspace(void **state)
{
	(void)state;
	char *p = cpu_workspace(1000);
	assert_non_null(p);
	assert_int_equal((uintptr_t)p % 64, 0);
	memset(p, 1, 1000);
	assert_ptr_equal(cpu_workspace(500), p);
	cpu_workspace_trim(); /* small: kept */
	assert_ptr_equal(cpu_workspace(1000), p);
	size_t big = (size_t)40 << 20;
	char *q = cpu_workspace(big);
	assert_non_null(q);
	assert_int_equal((uintptr_t)q % 64, 0);
	q[0] = 1;
	q[big - 1] = 1;
	cpu_workspace_trim(); /* large: freed, and a later call gets a fresh block */
	p = cpu_workspace(64);
	assert_non_null(p);
	memset(p, 2, 64);
	cpu_workspace_trim();
	/* 22 MiB fits what a trim keeps (32 MiB): its block is kept, though
	 * it was grown by half again, and writing it again faults in no page.
	 * It was grown to 33 MiB, then freed by every trim and faulted in
	 * again by every call (5633 pages a call). */
	size_t mid = (size_t)22 << 20;
	memset(cpu_workspace(mid), 1, mid);
	cpu_workspace_trim();
	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	memset(cpu_workspace(mid), 2, mid);
	getrusage(RUSAGE_SELF, &r1);
	print_message("22 MiB of scratch again after a trim: %ld page faults\n",
		      r1.ru_minflt - r0.ru_minflt);
	assert_true(r1.ru_minflt - r0.ru_minflt < 100);
	cpu_workspace_trim();
}

/* Callers at once (several devices' worker threads) share no state; the
 * dense ones also call OpenBLAS concurrently. */
static void *concurrent_main(void *arg)
{
	struct problem *pr = arg;
	for (int i = 0; i < 3; i++)
		if (cpu_gemm_run(&pr->g, 2, NULL) != 0)
			return (void *)1;
	return NULL;
}

static void test_concurrent_callers(void **state)
{
	(void)state;
	enum { NJ = 4 };
	struct problem pr[NJ];
	problem_init(&pr[0], 96, 80, 256, MFMA_DT_F32, MFMA_DT_F32, true, 1.0f, 0.5f, 21);
	problem_init(&pr[1], 64, 40, 512, MFMA_DT_BF16, MFMA_DT_BF16, true, 2.0f, 0.0f, 22);
	problem_init(&pr[2], 70, 90, 128, MFMA_DT_F32, MFMA_DT_F32, false, 1.0f, 0.5f, 23);
	problem_init(&pr[3], 50, 60, 96, MFMA_DT_F16, MFMA_DT_F16, false, 1.0f, 0.0f, 24);
	pthread_t t[NJ];
	for (int i = 0; i < NJ; i++)
		assert_int_equal(pthread_create(&t[i], NULL, concurrent_main, &pr[i]), 0);
	for (int i = 0; i < NJ; i++) {
		void *ret;
		assert_int_equal(pthread_join(t[i], &ret), 0);
		assert_null(ret);
		size_t count = (size_t)pr[i].g.m * pr[i].g.n;
		assert_true(cpu_rel_frobenius(pr[i].d, pr[i].g.out_dtype, pr[i].ref, count) <=
			    tolerance(pr[i].g.out_dtype, pr[i].g.k));
		problem_free(&pr[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ref_by_hand),
		cmocka_unit_test(test_ref_is_the_plain_loop),
		cmocka_unit_test(test_rel_frobenius),
		cmocka_unit_test(test_tiny_shapes),
		cmocka_unit_test(test_blocking_shapes),
		cmocka_unit_test(test_dense_blocks),
		cmocka_unit_test(test_dense_blocks_tall),
		cmocka_unit_test(test_larger_shape),
		cmocka_unit_test(test_c_is_d),
		cmocka_unit_test(test_k_zero),
		cmocka_unit_test(test_variants_and_errors),
		cmocka_unit_test(test_workspace),
		cmocka_unit_test(test_concurrent_callers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
