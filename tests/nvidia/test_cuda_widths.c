/* The widths a resident weight is warmed at (cuda_widths.h): every width a
 * batched launch of up to max_columns columns can take is in the list,
 * with every bucket's representative and every decode width a lone
 * request can have (multiples of 8 up to 64), and nothing else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "cuda_widths.h"

static bool listed(const uint32_t *w, size_t n, uint32_t x)
{
	for (size_t i = 0; i < n; i++)
		if (w[i] == x)
			return true;
	return false;
}

static bool decode_width(uint32_t w)
{
	return w % CUDA_WARM_DECODE_STEP == 0 && w <= CUDA_WARM_DECODE_N;
}

/* max_columns: every batch total 2..max has its width listed, and every
 * decode width; every listed width is a bucket's representative, a decode
 * width or some batch's width; ascending. */
static void check_limit(bool batching, uint32_t max)
{
	uint32_t w[128];
	size_t n = cuda_warm_widths(batching, max, w, 128);
	assert_true(n <= 128);
	for (size_t i = 1; i < n; i++)
		assert_true(w[i - 1] < w[i]);
	for (size_t b = 0; b < CUDA_NBUCKETS; b++) {
		assert_true(listed(w, n, cuda_bucket_rep(b)));
		assert_int_equal(cuda_bucket_of(cuda_bucket_rep(b)), b);
	}
	for (uint32_t d = 1; d <= CUDA_WARM_DECODE_N; d++)
		if (decode_width(d) && !listed(w, n, d))
			fail_msg("max_columns=%u: the decode width %u is not warmed", max, d);
	for (uint32_t cols = 2; batching && cols <= max; cols++)
		if (!listed(w, n, cuda_batch_width(cols)))
			fail_msg("max_columns=%u: a batch of %u columns (width %u) is not warmed", max,
				 cols, cuda_batch_width(cols));
	for (size_t i = 0; i < n; i++) {
		bool rep = false, batch = false;
		for (size_t b = 0; b < CUDA_NBUCKETS; b++)
			rep = rep || w[i] == cuda_bucket_rep(b);
		/* A width is some batch's when the batch of exactly that many
		 * columns, or of the fewest columns it takes, is within max. */
		for (uint32_t cols = 2; batching && cols <= max && !batch; cols++)
			batch = cuda_batch_width(cols) == w[i];
		if (!rep && !batch && !decode_width(w[i]))
			fail_msg("max_columns=%u%s: width %u is no bucket's, decode width or batch's", max,
				 batching ? "" : " (batching off)", w[i]);
	}
}

static void test_every_width_and_no_other(void **state)
{
	(void)state;
	const uint32_t limits[] = { 1, 2, 15, 16, 17, 100, 128, 129, 192, 193, 500, 512, 513,
				    1000, 1536, 4096, 8192, 10000 };
	for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		check_limit(true, limits[i]);
		check_limit(false, limits[i]);
	}
}

static void test_defaults(void **state)
{
	(void)state;
	/* batching.max_columns = 512, the default: the decode widths 8 .. 64,
	 * the buckets' 16 .. 512, which are the batches' widths, and the open
	 * bucket's 1024. */
	const uint32_t want[] = { 8, 16, 24, 32, 40, 48, 56, 64, 128, 192, 256, 384, 512, 1024 };
	const size_t nwant = sizeof(want) / sizeof(want[0]);
	uint32_t w[CUDA_WARM_MAX_WIDTHS];
	assert_int_equal(cuda_warm_widths(true, 512, w, CUDA_WARM_MAX_WIDTHS), nwant);
	for (size_t i = 0; i < nwant; i++)
		assert_int_equal(w[i], want[i]);
	/* Without batching the same: the buckets and the decode widths. */
	assert_int_equal(cuda_warm_widths(false, 512, w, CUDA_WARM_MAX_WIDTHS), nwant);
	assert_int_equal(w[nwant - 1], 1024);
	/* 8192 columns fit the cap (21 widths, the last 8192); more widths
	 * are counted, and the smallest kept. */
	const size_t n8k = cuda_warm_widths(true, 8192, w, CUDA_WARM_MAX_WIDTHS);
	assert_int_equal(n8k, 21);
	assert_true(n8k <= CUDA_WARM_MAX_WIDTHS);
	assert_int_equal(w[n8k - 1], 8192);
	size_t n = cuda_warm_widths(true, 1u << 20, w, 4);
	assert_true(n > CUDA_WARM_MAX_WIDTHS);
	assert_int_equal(w[0], 8);
	assert_int_equal(w[3], 32);
	/* The largest limit there can be ends. */
	assert_true(cuda_warm_widths(true, UINT32_MAX, w, 4) <= 96);
}

/* Up to 512 columns a batch's width is its bucket's representative, and
 * a request of n columns falls in the bucket of the width it is batched
 * at: the choice that serves a batch was measured at the batch's width. */
static void test_buckets_are_batch_widths(void **state)
{
	(void)state;
	for (uint32_t n = 1; n <= 512; n++) {
		const uint32_t w = cuda_batch_width(n);
		const size_t b = cuda_bucket_of(n);
		if (cuda_bucket_of(w) != b || cuda_bucket_rep(b) != w)
			fail_msg("n=%u: batch width %u, bucket %zu (measured at %u), the width's bucket %zu", n, w,
				 b, cuda_bucket_rep(b), cuda_bucket_of(w));
	}
	assert_int_equal(cuda_bucket_of(513), CUDA_NBUCKETS - 1);
	assert_int_equal(cuda_bucket_of(UINT32_MAX), CUDA_NBUCKETS - 1);
	assert_int_equal(cuda_bucket_rep(CUDA_NBUCKETS - 1), 1024);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_width_and_no_other),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_buckets_are_batch_widths),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
