/* ctl_util.c: option parsing (accepted values and the sentence for a bad
 * one), number formatting, percentiles, the random matrices and the
 * tolerances. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ctl_util.h"
#include "sparse24.h"

static void test_parse_numbers(void **state)
{
	(void)state;
	char err[256];
	uint64_t u;
	int i;
	float f;
	assert_int_equal(ctl_parse_u64("-n", "42", 1, 100, &u, err, sizeof(err)), 0);
	assert_int_equal(u, 42);
	assert_int_equal(ctl_parse_u64("-n", "18446744073709551615", 0, UINT64_MAX, &u, err,
				       sizeof(err)), 0);
	assert_true(u == UINT64_MAX);
	static const char *const bad_u[] = { "", "0", "101", "-1", "+5", " 5", "5x", "1e3",
					     "99999999999999999999" };
	for (size_t k = 0; k < sizeof(bad_u) / sizeof(bad_u[0]); k++) {
		assert_int_equal(ctl_parse_u64("--count", bad_u[k], 1, 100, &u, err, sizeof(err)),
				 -EINVAL);
		char want[128];
		snprintf(want, sizeof(want), "--count '%s': expected a whole number from 1 to 100",
			 bad_u[k]);
		assert_string_equal(err, want);
	}
	assert_int_equal(ctl_parse_int("--device", "-1", -1, 7, &i, err, sizeof(err)), 0);
	assert_int_equal(i, -1);
	assert_int_equal(ctl_parse_int("--device", "8", -1, 7, &i, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "--device '8': expected a whole number from -1 to 7");
	assert_int_equal(ctl_parse_float("--alpha", "-2.5", &f, err, sizeof(err)), 0);
	assert_true(f == -2.5f);
	assert_int_equal(ctl_parse_float("--alpha", "1e3", &f, err, sizeof(err)), 0);
	assert_true(f == 1000.0f);
	assert_int_equal(ctl_parse_float("--beta", "x", &f, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "--beta 'x': expected a finite number");
	assert_int_equal(ctl_parse_float("--beta", "inf", &f, err, sizeof(err)), -EINVAL);
	assert_int_equal(ctl_parse_float("--beta", "1e99", &f, err, sizeof(err)), -EINVAL);
}

static void test_parse_shape(void **state)
{
	(void)state;
	char err[256];
	uint32_t r, c;
	assert_int_equal(ctl_parse_shape("--shape", "128x256", &r, &c, err, sizeof(err)), 0);
	assert_int_equal(r, 128);
	assert_int_equal(c, 256);
	assert_int_equal(ctl_parse_shape("--shape", "3X5", &r, &c, err, sizeof(err)), 0);
	assert_int_equal(ctl_parse_shape("--shape", "7,1", &r, &c, err, sizeof(err)), 0);
	assert_int_equal(r, 7);
	assert_int_equal(c, 1);
	static const char *const bad[] = { "", "128", "0x4", "4x0", "4x", "x4", "4x4x4", "-1x4",
					   "4 x 4", "3000000000x1" };
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		assert_int_equal(ctl_parse_shape("--shape", bad[k], &r, &c, err, sizeof(err)),
				 -EINVAL);
		assert_non_null(strstr(err, "expected ROWSxCOLS"));
		char q[64];
		snprintf(q, sizeof(q), "'%s'", bad[k]);
		assert_non_null(strstr(err, q));
	}
}

static void test_parse_dtype_and_sparse(void **state)
{
	(void)state;
	char err[256];
	enum mfma_dtype t;
	enum ctl_sparse s;
	assert_int_equal(ctl_parse_dtype("--dtype", "bf16", CTL_DT_INPUTS, &t, err, sizeof(err)),
			 0);
	assert_int_equal(t, MFMA_DT_BF16);
	assert_int_equal(ctl_parse_dtype("--dtype", "i32", CTL_DT_INPUTS, &t, err, sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "--dtype 'i32': expected one of f32, f16, bf16, i8");
	assert_int_equal(ctl_parse_dtype("--out-dtype", "i8", CTL_DT_OUTPUTS, &t, err,
					 sizeof(err)), -EINVAL);
	assert_string_equal(err, "--out-dtype 'i8': expected one of f32, f16, bf16, i32");
	assert_int_equal(ctl_parse_sparse("--sparse", "prune", &s, err, sizeof(err)), 0);
	assert_int_equal(s, CTL_SPARSE_PRUNE);
	assert_int_equal(ctl_parse_sparse("--sparse", "validate", &s, err, sizeof(err)), 0);
	assert_int_equal(s, CTL_SPARSE_VALIDATE);
	assert_int_equal(ctl_parse_sparse("--sparse", "packed", &s, err, sizeof(err)), 0);
	assert_int_equal(s, CTL_SPARSE_PACKED);
	assert_int_equal(ctl_parse_sparse("--sparse", "yes", &s, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "--sparse 'yes': expected validate, prune or packed");
}

static void test_format(void **state)
{
	(void)state;
	char b[32];
	ctl_format_bytes(0, b, sizeof(b));
	assert_string_equal(b, "0 B");
	ctl_format_bytes(1023, b, sizeof(b));
	assert_string_equal(b, "1023 B");
	ctl_format_bytes(1536, b, sizeof(b));
	assert_string_equal(b, "1.50 KiB");
	ctl_format_bytes(100ull << 20, b, sizeof(b));
	assert_string_equal(b, "100 MiB");
	ctl_format_bytes(3ull << 40, b, sizeof(b));
	assert_string_equal(b, "3.00 TiB");
	ctl_format_ns(850, b, sizeof(b));
	assert_string_equal(b, "850 ns");
	ctl_format_ns(12345, b, sizeof(b));
	assert_string_equal(b, "12.3 us");
	ctl_format_ns(4560000, b, sizeof(b));
	assert_string_equal(b, "4.56 ms");
	ctl_format_ns(123456789012ull, b, sizeof(b));
	assert_string_equal(b, "123 s");
	ctl_format_uptime(42ull * 1000000000ull, b, sizeof(b));
	assert_string_equal(b, "42s");
	ctl_format_uptime(306ull * 1000000000ull, b, sizeof(b));
	assert_string_equal(b, "5m 06s");
	ctl_format_uptime((3 * 86400ull + 4 * 3600 + 5 * 60 + 6) * 1000000000ull, b, sizeof(b));
	assert_string_equal(b, "3d 04h 05m 06s");
}

static void test_percentile(void **state)
{
	(void)state;
	uint64_t v[100];
	for (int i = 0; i < 100; i++)
		v[i] = (uint64_t)(100 - i) * 10; /* 1000 .. 10, unsorted */
	ctl_sort_u64(v, 100);
	assert_int_equal(v[0], 10);
	assert_int_equal(v[99], 1000);
	assert_int_equal(ctl_percentile(v, 100, 50), 500);
	assert_int_equal(ctl_percentile(v, 100, 90), 900);
	assert_int_equal(ctl_percentile(v, 100, 99), 990);
	assert_int_equal(ctl_percentile(v, 100, 100), 1000);
	assert_int_equal(ctl_percentile(v, 100, 0), 10);
	uint64_t three[] = { 5, 7, 9 };
	assert_int_equal(ctl_percentile(three, 3, 50), 7);
	assert_int_equal(ctl_percentile(three, 3, 99), 9);
	assert_int_equal(ctl_percentile(three, 0, 50), 0);
	assert_true(ctl_gflops(1000, 1000, 1000, 1000000000ull) == 2.0);
	assert_true(ctl_gflops(1, 1, 1, 0) == 0.0);
}

static void test_random_dense_has_no_zeros(void **state)
{
	(void)state;
	static const enum mfma_dtype all[] = { MFMA_DT_F32, MFMA_DT_F16, MFMA_DT_BF16, MFMA_DT_I8,
					       MFMA_DT_I32 };
	for (size_t t = 0; t < sizeof(all) / sizeof(all[0]); t++) {
		size_t n = 37 * 29;
		void *m = malloc(n * 4);
		void *m2 = malloc(n * 4);
		assert_int_equal(ctl_random_matrix(m, all[t], 37, 29, false, 7), 0);
		assert_int_equal(ctl_random_matrix(m2, all[t], 37, 29, false, 7), 0);
		assert_memory_equal(m, m2, n * mfma_dtype_size(all[t]));
		int neg = 0;
		for (size_t i = 0; i < n; i++) {
			double x = mfma_load_f64(m, all[t], i);
			assert_true(x != 0.0);
			if (mfma_dtype_is_float(all[t]))
				assert_true(x >= -1.0 && x <= 1.0 && (x > 0.06 || x < -0.06));
			neg += x < 0;
		}
		assert_true(neg > (int)n / 4 && neg < 3 * (int)n / 4);
		assert_int_equal(ctl_random_matrix(m2, all[t], 37, 29, false, 8), 0);
		assert_memory_not_equal(m, m2, n * mfma_dtype_size(all[t]));
		free(m);
		free(m2);
	}
}

static void test_random_sparse24(void **state)
{
	(void)state;
	const uint32_t rows = 19, cols = 64;
	float *m = malloc(rows * cols * sizeof(float));
	int seen[16] = { 0 };
	assert_int_equal(ctl_random_matrix(m, MFMA_DT_F32, rows, cols, true, 3), 0);
	size_t br, bg;
	assert_int_equal(sparse24_validate(m, MFMA_DT_F32, rows, cols, &br, &bg), 0);
	for (uint32_t r = 0; r < rows; r++) {
		for (uint32_t g = 0; g < cols / 4; g++) {
			int mask = 0, nz = 0;
			for (int i = 0; i < 4; i++)
				if (m[r * cols + g * 4 + i] != 0.0f) {
					mask |= 1 << i;
					nz++;
				}
			assert_int_equal(nz, 2); /* exactly two kept, both non-zero */
			seen[mask]++;
		}
	}
	/* All six position pairs occur, not only 0 and 2. */
	static const int pairs[] = { 0x3, 0x5, 0x9, 0x6, 0xa, 0xc };
	for (size_t i = 0; i < 6; i++)
		assert_true(seen[pairs[i]] > 0);
	assert_int_equal(ctl_random_matrix(m, MFMA_DT_F32, rows, 6, true, 3), -EINVAL);
	assert_int_equal(ctl_random_matrix(m, MFMA_DT_NONE, rows, 8, false, 3), -EINVAL);
	free(m);
}

static void test_tolerance(void **state)
{
	(void)state;
	assert_true(ctl_tolerance(MFMA_DT_F32, MFMA_DT_F32) == 1e-5);
	assert_true(ctl_tolerance(MFMA_DT_F16, MFMA_DT_F32) == 1e-2);
	assert_true(ctl_tolerance(MFMA_DT_F32, MFMA_DT_BF16) == 1e-2);
	assert_true(ctl_tolerance(MFMA_DT_I8, MFMA_DT_I32) == 0.0);
	assert_true(ctl_tolerance(MFMA_DT_I8, MFMA_DT_F32) == 1e-5);
	/* Within a tolerance, or exact where it is 0. */
	assert_true(ctl_within_tolerance(1e-5, 1e-5));
	assert_false(ctl_within_tolerance(2e-5, 1e-5));
	assert_true(ctl_within_tolerance(0.0, 0.0));
	assert_false(ctl_within_tolerance(1e-300, 0.0));
	/* The worst error: a non-finite one counts as infinite and stays. */
	assert_true(ctl_worse_error(0.0, 1e-6) == 1e-6);
	assert_true(ctl_worse_error(1e-3, 1e-6) == 1e-3);
	assert_true(isinf(ctl_worse_error(1e-3, NAN)));
	assert_true(isinf(ctl_worse_error(ctl_worse_error(0.0, NAN), 0.5)));
	assert_true(isinf(ctl_worse_error(0.0, -INFINITY)));
}

/* What the daemon says, made printable for a terminal: every C0 control
 * but newline and tab, DEL, and C1 in UTF-8 become '?'; other UTF-8 and
 * plain text stay as they are. */
static void test_printable(void **state)
{
	(void)state;
	char out[64];
	const char evil[] = "1.0\033[2J\033]0;pwned\007\r\033[Kfake\x7f";
	ctl_printable(evil, strlen(evil), out);
	assert_string_equal(out, "1.0?[2J?]0;pwned???[Kfake?");
	const char ok[] = "NVIDIA H200\tsm_90a\nr\xc3\xa9sum\xc3\xa9 \xe2\x80\x94 ok";
	assert_int_equal(ctl_printable(ok, strlen(ok), out), strlen(ok));
	assert_string_equal(out, ok);
	const char c1[] = "a\xc2\x9b" "31mb\xc2\xa0" "c\xc2";
	ctl_printable(c1, strlen(c1), out);
	assert_string_equal(out, "a??31mb\xc2\xa0" "c\xc2");
	/* NUL inside the bytes given is a control too. */
	ctl_printable("x\0y", 3, out);
	assert_memory_equal(out, "x?y", 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_numbers),
		cmocka_unit_test(test_parse_shape),
		cmocka_unit_test(test_parse_dtype_and_sparse),
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_percentile),
		cmocka_unit_test(test_random_dense_has_no_zeros),
		cmocka_unit_test(test_random_sparse24),
		cmocka_unit_test(test_tolerance),
		cmocka_unit_test(test_printable),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
