/* Batched launches joined in host memory (host_join.c), the way the CPU
 * and HIP backends batch: each part's B and C land in their own columns
 * of the joined matrices, and a joined D goes back to each part's own D,
 * for element sizes 1, 2 and 4 and parts of 1 to 7 columns; buffers are
 * kept and grown between batches. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "host_join.h"

/* A byte that says which part, row and column it belongs to (and which
 * operand), so that a misplaced one is seen. */
static unsigned char tag(int op, uint32_t part, size_t row, size_t col, size_t byte)
{
	return (unsigned char)(op * 97 + part * 31 + row * 7 + col * 3 + byte * 11 + 1);
}

static void fill(unsigned char *p, int op, uint32_t part, size_t rows, uint32_t n, size_t es)
{
	for (size_t r = 0; r < rows; r++)
		for (size_t c = 0; c < n; c++)
			for (size_t b = 0; b < es; b++)
				p[(r * n + c) * es + b] = tag(op, part, r, c, b);
}

/* One batch of nparts parts of widths ns, m x k, in/out dtypes: gathered,
 * the joined operands checked column by column, a joined D made from
 * tags, scattered, and each part's D checked. */
static void one_batch(struct host_join *j, enum mfma_dtype in, enum mfma_dtype out, uint32_t m,
		      uint32_t k, const uint32_t *ns, uint32_t nparts, float beta)
{
	const size_t es = mfma_dtype_size(in), os = mfma_dtype_size(out);
	struct mfma_gemm_part parts[8];
	uint32_t total = 0;
	assert_true(nparts <= 8);
	for (uint32_t i = 0; i < nparts; i++) {
		unsigned char *b = malloc((size_t)k * ns[i] * es), *c = NULL;
		fill(b, 0, i, k, ns[i], es);
		if (beta != 0.0f) {
			c = malloc((size_t)m * ns[i] * os);
			fill(c, 1, i, m, ns[i], os);
		}
		parts[i] = (struct mfma_gemm_part){ .b = b, .c = c, .d = calloc((size_t)m * ns[i], os),
						    .n = ns[i] };
		total += ns[i];
	}
	const struct mfma_gemm g = { .m = m, .n = total, .k = k, .in_dtype = in, .out_dtype = out,
				     .alpha = 1.0f, .beta = beta, .nparts = nparts, .parts = parts };
	/* The caller's copy: host_join_gather replaces its operands only. */
	struct mfma_gemm run = g;
	run.a_sparse = true;
	char err[128] = "";
	assert_int_equal(host_join_gather(j, &g, &run, err, sizeof(err)), 0);
	assert_true(run.a_sparse);
	assert_int_equal(run.nparts, 0);
	assert_null(run.parts);
	assert_int_equal(run.n, total);
	assert_non_null(run.b);
	assert_non_null(run.d);
	assert_true(beta != 0.0f ? run.c != NULL : run.c == NULL);
	/* The joined B (k x total) and C (m x total): part i's column c at
	 * joined column off_i + c. */
	for (uint32_t i = 0, off = 0; i < nparts; off += ns[i], i++)
		for (size_t r = 0; r < k; r++)
			for (size_t c = 0; c < ns[i]; c++)
				for (size_t b = 0; b < es; b++)
					assert_int_equal(((const unsigned char *)run.b)[(r * total + off + c) * es + b],
							 tag(0, i, r, c, b));
	for (uint32_t i = 0, off = 0; run.c && i < nparts; off += ns[i], i++)
		for (size_t r = 0; r < m; r++)
			for (size_t c = 0; c < ns[i]; c++)
				for (size_t b = 0; b < os; b++)
					assert_int_equal(((const unsigned char *)run.c)[(r * total + off + c) * os + b],
							 tag(1, i, r, c, b));
	/* The "GEMM": a joined D whose every element names its part. */
	for (uint32_t i = 0, off = 0; i < nparts; off += ns[i], i++)
		for (size_t r = 0; r < m; r++)
			for (size_t c = 0; c < ns[i]; c++)
				for (size_t b = 0; b < os; b++)
					((unsigned char *)run.d)[(r * total + off + c) * os + b] = tag(2, i, r, c, b);
	host_join_scatter(&g, &run);
	for (uint32_t i = 0; i < nparts; i++) {
		const unsigned char *d = parts[i].d;
		for (size_t r = 0; r < m; r++)
			for (size_t c = 0; c < ns[i]; c++)
				for (size_t b = 0; b < os; b++)
					assert_int_equal(d[(r * ns[i] + c) * os + b], tag(2, i, r, c, b));
		free((void *)parts[i].b);
		free((void *)parts[i].c);
		free(parts[i].d);
	}
}

static void test_dtypes_and_widths(void **state)
{
	(void)state;
	struct host_join j = { 0 };
	const uint32_t single[] = { 1, 1, 1, 1, 1 }, mixed[] = { 5, 1, 7, 2 }, two[] = { 3, 3 };
	one_batch(&j, MFMA_DT_F16, MFMA_DT_F16, 13, 20, single, 5, 0.0f);
	one_batch(&j, MFMA_DT_F16, MFMA_DT_F32, 9, 17, mixed, 4, 0.5f);
	one_batch(&j, MFMA_DT_BF16, MFMA_DT_BF16, 3, 4, two, 2, 1.0f);
	one_batch(&j, MFMA_DT_I8, MFMA_DT_I32, 11, 32, mixed, 4, 1.0f);
	one_batch(&j, MFMA_DT_F32, MFMA_DT_F32, 6, 5, single, 3, 0.0f);
	host_join_free(&j);
}

/* The buffers are kept between batches and grown when a batch needs more;
 * a smaller batch after a larger one reuses them. */
static void test_buffers_kept_and_grown(void **state)
{
	(void)state;
	struct host_join j = { 0 };
	const uint32_t small[] = { 1, 2 }, big[] = { 7, 7, 7, 7, 7, 7, 7, 7 };
	one_batch(&j, MFMA_DT_F16, MFMA_DT_F16, 8, 8, small, 2, 1.0f);
	void *b0 = j.buf[0];
	size_t cap0 = j.cap[0];
	assert_true(cap0 >= 8 * 3 * 2);
	one_batch(&j, MFMA_DT_F16, MFMA_DT_F16, 4, 4, small, 2, 1.0f);
	assert_ptr_equal(j.buf[0], b0); /* smaller: kept */
	one_batch(&j, MFMA_DT_F16, MFMA_DT_F16, 64, 256, big, 8, 1.0f);
	assert_true(j.cap[0] >= (size_t)256 * 56 * 2);
	assert_true(j.cap[2] >= (size_t)64 * 56 * 2);
	host_join_free(&j);
	assert_null(j.buf[0]);
	assert_int_equal(j.cap[2], 0);
	host_join_free(&j); /* twice is harmless */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dtypes_and_widths),
		cmocka_unit_test(test_buffers_kept_and_grown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
