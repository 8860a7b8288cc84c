/* Request validation: each rejected field is named with its value. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "sparse24.h"
#include "validate.h"

static const struct validate_limits lim = { .max_dim = 4096, .max_out_bytes = 1u << 24 };

static uint8_t bufa[4096 * 4], bufb[4096 * 4], bufc[4096 * 4], bufm[4096];

struct fixture {
	Mfma__V1__Gemm g;
	Mfma__V1__Operand a;
	Mfma__V1__Matrix ad, b, c;
	Mfma__V1__Sparse24 as;
};

static void set_matrix(Mfma__V1__Matrix *m, uint32_t r, uint32_t c, int dt, uint8_t *buf)
{
	mfma__v1__matrix__init(m);
	m->has_rows = m->has_cols = m->has_dtype = m->has_data = 1;
	m->rows = r;
	m->cols = c;
	m->dtype = (Mfma__V1__DType)dt;
	m->data.data = buf;
	m->data.len = (size_t)r * c * mfma_dtype_size((enum mfma_dtype)dt);
}

/* A valid dense 8x12 (f32) times 12x5 GEMM. */
static void setup_dense(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	mfma__v1__gemm__init(&f->g);
	mfma__v1__operand__init(&f->a);
	set_matrix(&f->ad, 8, 12, MFMA_DT_F32, bufa);
	set_matrix(&f->b, 12, 5, MFMA_DT_F32, bufb);
	f->a.kind_case = MFMA__V1__OPERAND__KIND_DENSE;
	f->a.dense = &f->ad;
	f->g.a = &f->a;
	f->g.b = &f->b;
}

static void setup_sparse(struct fixture *f, uint32_t m, uint32_t k, int dt)
{
	setup_dense(f);
	mfma__v1__sparse24__init(&f->as);
	f->as.has_rows = f->as.has_cols = f->as.has_dtype = 1;
	f->as.rows = m;
	f->as.cols = k;
	f->as.dtype = (Mfma__V1__DType)dt;
	f->as.values.data = bufa;
	f->as.values.len = sparse24_values_bytes(m, k, mfma_dtype_size((enum mfma_dtype)dt));
	f->as.meta.data = bufm;
	f->as.meta.len = sparse24_meta_bytes(m, k);
	f->a.kind_case = MFMA__V1__OPERAND__KIND_SPARSE;
	f->a.sparse = &f->as;
	set_matrix(&f->b, k, 5, dt, bufb);
}

static void expect_error(struct fixture *f, const struct weight_shape *w, const char *want)
{
	struct gemm_plan p;
	char err[512] = "";
	assert_int_equal(validate_gemm(&f->g, &lim, w, &p, err, sizeof(err)), -EINVAL);
	if (!strstr(err, want))
		fail_msg("error \"%s\" lacks \"%s\"", err, want);
}

static void test_valid_dense(void **state)
{
	(void)state;
	struct fixture f;
	struct gemm_plan p;
	char err[512];
	setup_dense(&f);
	assert_int_equal(validate_gemm(&f.g, &lim, NULL, &p, err, sizeof(err)), 0);
	assert_int_equal(p.a_form, A_DENSE);
	assert_int_equal(p.g.m, 8);
	assert_int_equal(p.g.k, 12);
	assert_int_equal(p.g.n, 5);
	assert_int_equal(p.g.out_dtype, MFMA_DT_F32);
	assert_int_equal(p.d_bytes, 8 * 5 * 4);
	assert_ptr_equal(p.g.a, bufa);
	assert_false(p.g.a_sparse);
}

static void test_valid_sparse_and_forms(void **state)
{
	(void)state;
	struct fixture f;
	struct gemm_plan p;
	char err[512];
	setup_sparse(&f, 7, 36, MFMA_DT_F16);
	assert_int_equal(validate_gemm(&f.g, &lim, NULL, &p, err, sizeof(err)), 0);
	assert_int_equal(p.a_form, A_SPARSE);
	assert_true(p.g.a_sparse);
	assert_ptr_equal(p.g.a_meta, (const uint32_t *)(const void *)bufm);

	setup_dense(&f);
	f.a.has_sparsity = 1;
	f.a.sparsity = MFMA__V1__SPARSITY__PRUNE_24;
	assert_int_equal(validate_gemm(&f.g, &lim, NULL, &p, err, sizeof(err)), 0);
	assert_int_equal(p.a_form, A_DENSE_PRUNE);
	f.a.sparsity = MFMA__V1__SPARSITY__VALIDATE_24;
	assert_int_equal(validate_gemm(&f.g, &lim, NULL, &p, err, sizeof(err)), 0);
	assert_int_equal(p.a_form, A_DENSE_CHECK);
}

static void test_shapes(void **state)
{
	(void)state;
	struct fixture f;
	setup_dense(&f);
	f.ad.rows = 0;
	expect_error(&f, NULL, "a has shape 0x12: both dimensions must be at least 1");
	setup_dense(&f);
	f.b.cols = 5000;
	expect_error(&f, NULL, "b has shape 12x5000: the limit is 4096");
	setup_dense(&f);
	f.ad.data.len -= 1;
	expect_error(&f, NULL, "a.data has 383 bytes but 8x12 f32 needs 384");
	setup_dense(&f);
	set_matrix(&f.b, 10, 5, MFMA_DT_F32, bufb);
	expect_error(&f, NULL, "b.rows=10 does not match a.cols=12");
	setup_dense(&f);
	f.g.b = NULL;
	expect_error(&f, NULL, "b is missing");
	setup_dense(&f);
	f.g.a = NULL;
	expect_error(&f, NULL, "a is missing");
	setup_dense(&f);
	f.a.kind_case = MFMA__V1__OPERAND__KIND__NOT_SET;
	expect_error(&f, NULL, "a has neither dense, sparse nor weight set");
}

static void test_sparse_errors(void **state)
{
	(void)state;
	struct fixture f;
	setup_sparse(&f, 4, 10, MFMA_DT_F32);
	f.as.cols = 10;
	expect_error(&f, NULL, "a.sparse.cols=10 is not a multiple of 4");
	setup_sparse(&f, 4, 8, MFMA_DT_F32);
	f.as.meta.len = 4;
	expect_error(&f, NULL, "a.sparse.meta has 4 bytes but 4 rows x 1 words needs 16");
	setup_sparse(&f, 4, 8, MFMA_DT_F32);
	f.as.values.len = 3;
	expect_error(&f, NULL, "a.sparse.values has 3 bytes");
	setup_dense(&f);
	set_matrix(&f.ad, 8, 10, MFMA_DT_F32, bufa);
	set_matrix(&f.b, 10, 5, MFMA_DT_F32, bufb);
	f.a.has_sparsity = 1;
	f.a.sparsity = MFMA__V1__SPARSITY__VALIDATE_24;
	expect_error(&f, NULL, "a.cols=10 is not a multiple of 4");
	setup_dense(&f);
	f.a.sparsity = (Mfma__V1__Sparsity)9;
	expect_error(&f, NULL, "a.sparsity=9");
}

static void test_dtypes(void **state)
{
	(void)state;
	struct fixture f;
	setup_dense(&f);
	f.b.dtype = MFMA__V1__DTYPE__F16;
	f.b.data.len = 12 * 5 * 2;
	expect_error(&f, NULL, "b.dtype=f16 does not match a.dtype=f32");
	setup_dense(&f);
	f.ad.dtype = (Mfma__V1__DType)42;
	expect_error(&f, NULL, "a.dtype=42 is not a known dtype");
	setup_dense(&f);
	f.g.has_out_dtype = 1;
	f.g.out_dtype = MFMA__V1__DTYPE__I32;
	expect_error(&f, NULL, "out_dtype=i32: f32 inputs give an f32 output");
	setup_dense(&f);
	set_matrix(&f.ad, 8, 12, MFMA_DT_F16, bufa);
	set_matrix(&f.b, 12, 5, MFMA_DT_F16, bufb);
	f.g.has_out_dtype = 1;
	f.g.out_dtype = MFMA__V1__DTYPE__BF16;
	expect_error(&f, NULL, "out_dtype=bf16: f16 inputs give f32 or f16");
	setup_dense(&f);
	set_matrix(&f.ad, 8, 12, MFMA_DT_I32, bufa);
	set_matrix(&f.b, 12, 5, MFMA_DT_I32, bufb);
	expect_error(&f, NULL, "a.dtype=i32 is not an input type");
	/* i8 gives i32 by default, and takes only alpha 1, beta 0/1. */
	setup_dense(&f);
	set_matrix(&f.ad, 8, 12, MFMA_DT_I8, bufa);
	set_matrix(&f.b, 12, 5, MFMA_DT_I8, bufb);
	struct gemm_plan p;
	char err[512];
	assert_int_equal(validate_gemm(&f.g, &lim, NULL, &p, err, sizeof(err)), 0);
	assert_int_equal(p.g.out_dtype, MFMA_DT_I32);
	f.g.alpha = 2.0f;
	expect_error(&f, NULL, "integer GEMMs are exact and take alpha 1");
	/* Their sums are i32: exact up to K = 131071, 262142 with a 2:4 A
	 * (half the terms), whatever limits.max_dim allows.  A resident
	 * weight of each K, B one column (131072 rows wrapped to INT32_MIN). */
	static uint8_t bigb[262144];
	const struct validate_limits wide = { .max_dim = 1u << 24, .max_out_bytes = 1u << 24 };
	setup_dense(&f);
	f.a.kind_case = MFMA__V1__OPERAND__KIND_WEIGHT;
	f.a.weight = "w8";
	struct weight_shape w = { .m = 16, .k = 131071, .dtype = MFMA_DT_I8, .sparse = 0 };
	for (int sparse = 0; sparse < 2; sparse++) {
		w.sparse = sparse;
		for (uint32_t k = sparse ? 262142 : 131071; k <= (sparse ? 262144u : 131072u); k++) {
			w.k = k;
			set_matrix(&f.b, k, 1, MFMA_DT_I8, bigb);
			int rc = validate_gemm(&f.g, &wide, &w, &p, err, sizeof(err));
			const bool fits = k <= (sparse ? 262142u : 131071u);
			if (fits ? rc != 0 : rc != -EINVAL || !strstr(err, "sums in i32, exactly only"))
				fail_msg("i8 k=%u %s: %d %s", k, sparse ? "2:4" : "dense", rc, err);
		}
	}
}

static void test_alpha_beta_c(void **state)
{
	(void)state;
	struct fixture f;
	setup_dense(&f);
	f.g.beta = 1.0f;
	expect_error(&f, NULL, "beta=1 needs c, which is missing");
	set_matrix(&f.c, 8, 4, MFMA_DT_F32, bufc);
	f.g.c = &f.c;
	expect_error(&f, NULL, "c has shape 8x4 but the product is 8x5");
	set_matrix(&f.c, 8, 5, MFMA_DT_F16, bufc);
	expect_error(&f, NULL, "c.dtype=f16 does not match the output dtype f32");
	set_matrix(&f.c, 8, 5, MFMA_DT_F32, bufc);
	struct gemm_plan p;
	char err[512];
	assert_int_equal(validate_gemm(&f.g, &lim, NULL, &p, err, sizeof(err)), 0);
	assert_ptr_equal(p.g.c, bufc);
	f.g.beta = 0.0f;
	expect_error(&f, NULL, "c is given but beta is 0");
	setup_dense(&f);
	f.g.alpha = 1.0f / 0.0f;
	expect_error(&f, NULL, "must be finite");
}

static void test_weight_operand(void **state)
{
	(void)state;
	struct fixture f;
	setup_dense(&f);
	f.a.kind_case = MFMA__V1__OPERAND__KIND_WEIGHT;
	f.a.weight = "w1";
	expect_error(&f, NULL, "weight 'w1' is not loaded");
	struct weight_shape w = { .m = 16, .k = 12, .dtype = MFMA_DT_F32, .sparse = 1 };
	struct gemm_plan p;
	char err[512];
	assert_int_equal(validate_gemm(&f.g, &lim, &w, &p, err, sizeof(err)), 0);
	assert_int_equal(p.a_form, A_WEIGHT);
	assert_int_equal(p.g.m, 16);
	assert_true(p.g.a_sparse);
	w.k = 16;
	expect_error(&f, &w, "b.rows=12 does not match a.cols=16");
	/* No weight has a bad name: its own error, not "not loaded". */
	f.a.weight = "bad name";
	expect_error(&f, NULL, "weight name 'bad name' has character 0x20");
}

/* A weight's name: every byte value in every position, against the rule
 * written out (letters, digits and . _ - :), and its length limit. */
static void test_weight_names(void **state)
{
	(void)state;
	static const char allowed[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:";
	char err[256], name[4] = "a?b";
	for (int ch = 1; ch < 256; ch++) {
		for (int at = 0; at < 3; at++) {
			memcpy(name, "abc", 3);
			name[at] = (char)ch;
			bool ok = strchr(allowed, ch) != NULL;
			assert_int_equal(validate_weight_name(name, err, sizeof(err)) == 0, ok);
			if (!ok) {
				char want[64];
				snprintf(want, sizeof(want), "has character 0x%02x at %d;", ch, at);
				assert_non_null(strstr(err, want));
			}
		}
	}
	char longest[129];
	memset(longest, 'w', 128);
	longest[127] = '\0';
	assert_int_equal(validate_weight_name(longest, err, sizeof(err)), 0);
	longest[127] = 'w';
	longest[128] = '\0';
	assert_true(validate_weight_name(longest, err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "128 bytes long; the limit is 127"));
	assert_true(validate_weight_name("", err, sizeof(err)) < 0);
}

static void test_output_limit(void **state)
{
	(void)state;
	struct fixture f;
	struct validate_limits small = { .max_dim = 4096, .max_out_bytes = 4096 };
	setup_dense(&f);
	set_matrix(&f.ad, 64, 4, MFMA_DT_F32, bufa);
	set_matrix(&f.b, 4, 64, MFMA_DT_F32, bufb);
	struct gemm_plan p;
	char err[512];
	assert_int_equal(validate_gemm(&f.g, &small, NULL, &p, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "would not fit in one frame"));
}

/* A region's span: inside, at the very end, past it, wrapping, and a
 * length that disagrees with the matrix. */
static void test_region_span(void **state)
{
	(void)state;
	char err[256];
	assert_int_equal(validate_region_span(4096, 0, 0, 0, 4096, "b", 1, err, sizeof(err)), 0);
	assert_int_equal(validate_region_span(4096, 4000, 1, 96, 96, "b", 1, err, sizeof(err)), 0);
	assert_int_equal(validate_region_span(4096, 4000, 0, 0, 97, "b", 1, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "b.region.offset=4000 with 97 bytes runs past the end of region 1"));
	assert_int_equal(validate_region_span(4096, 4097, 0, 0, 0, "c", 2, err, sizeof(err)), -EINVAL);
	assert_int_equal(validate_region_span(4096, UINT64_MAX - 3, 0, 0, 8, "d", 3, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "d.region.offset=18446744073709551612"));
	assert_int_equal(validate_region_span(4096, 0, 1, 12, 8, "b", 1, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "b.region.length=12 but the matrix needs 8 bytes"));
}

static void test_region_fd(void **state)
{
	(void)state;
	char err[256];
	const int both = F_SEAL_SHRINK | F_SEAL_GROW;
	assert_int_equal(validate_region_fd(S_IFREG | 0600, 8192, both, 0, err, sizeof(err)), 0);
	assert_int_equal(validate_region_fd(S_IFREG | 0600, 8192, both | F_SEAL_SEAL, 8192, err,
					    sizeof(err)), 0);
	assert_int_equal(validate_region_fd(S_IFIFO | 0600, 8192, both, 0, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not a memfd"));
	assert_int_equal(validate_region_fd(S_IFREG | 0600, 8192, -1, 0, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "takes no seals"));
	assert_int_equal(validate_region_fd(S_IFREG | 0600, 8192, F_SEAL_GROW, 0, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "not sealed against resizing (seals 0x4)"));
	/* Sealed against sealing, so it can never be sealed against resizing. */
	assert_int_equal(validate_region_fd(S_IFREG | 0600, 8192, F_SEAL_SEAL, 0, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "takes no more seals (seals 0x1"));
	assert_non_null(strstr(err, "MFD_ALLOW_SEALING"));
	assert_int_equal(validate_region_fd(S_IFREG | 0600, 0, both, 0, err, sizeof(err)), -EINVAL);
	assert_int_equal(validate_region_fd(S_IFREG | 0600, 8192, both, 4096, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "bytes=4096 but the memfd has 8192"));
}

/* b and c may name a region instead of carrying data; a may not, and
 * a region with data is refused. */
static void test_region_operands(void **state)
{
	(void)state;
	struct fixture f;
	setup_dense(&f);
	set_matrix(&f.ad, 8, 16, MFMA_DT_F32, bufa);
	set_matrix(&f.b, 16, 4, MFMA_DT_F32, bufb);
	Mfma__V1__RegionRef rb = MFMA__V1__REGION_REF__INIT, rd = MFMA__V1__REGION_REF__INIT;
	f.b.has_data = 0;
	f.b.data.len = 0;
	f.b.data.data = NULL;
	f.b.region = &rb;
	f.g.d = &rd;
	struct gemm_plan p;
	char err[512];
	assert_int_equal(validate_gemm(&f.g, &lim, NULL, &p, err, sizeof(err)), 0);
	assert_ptr_equal(p.b_region, &rb);
	assert_ptr_equal(p.d_region, &rd);
	assert_null(p.g.b);
	assert_int_equal(p.b_bytes, 16 * 4 * 4);
	assert_int_equal(p.d_bytes, 8 * 4 * 4);
	assert_int_equal(p.in_bytes, 8 * 16 * 4); /* A only: B is the client's memory */
	f.b.data.len = 4;
	f.b.data.data = bufb;
	assert_int_equal(validate_gemm(&f.g, &lim, NULL, &p, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "b has both data (4 bytes) and a region"));
	f.b.data.len = 0;
	f.ad.region = &rb;
	assert_int_equal(validate_gemm(&f.g, &lim, NULL, &p, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "a.region: only b, c and d"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_dense),
		cmocka_unit_test(test_valid_sparse_and_forms),
		cmocka_unit_test(test_shapes),
		cmocka_unit_test(test_sparse_errors),
		cmocka_unit_test(test_dtypes),
		cmocka_unit_test(test_alpha_beta_c),
		cmocka_unit_test(test_weight_operand),
		cmocka_unit_test(test_weight_names),
		cmocka_unit_test(test_output_limit),
		cmocka_unit_test(test_region_span),
		cmocka_unit_test(test_region_fd),
		cmocka_unit_test(test_region_operands),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
