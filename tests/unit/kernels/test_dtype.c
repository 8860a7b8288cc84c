/* The f16 and bf16 converters of mfma_dtype.h (round to nearest even,
 * subnormals, infinities, NaN) and the block converters of the CPU
 * kernels, which must agree with them. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu_internal.h"
#include "mfma_dtype.h"

static float from_bits(uint32_t b)
{
	float f;
	memcpy(&f, &b, 4);
	return f;
}

static uint32_t to_bits(float f)
{
	uint32_t b;
	memcpy(&b, &f, 4);
	return b;
}

static void test_f16_to_f32_cases(void **state)
{
	(void)state;
	assert_int_equal(to_bits(mfma_f16_to_f32(0x0000)), 0x00000000u);
	assert_int_equal(to_bits(mfma_f16_to_f32(0x8000)), 0x80000000u);
	assert_true(mfma_f16_to_f32(0x3c00) == 1.0f);
	assert_true(mfma_f16_to_f32(0xc000) == -2.0f);
	assert_true(mfma_f16_to_f32(0x3555) == 0x555p-12f); /* 0.333251953125 */
	assert_true(mfma_f16_to_f32(0x0001) == 0x1p-24f);                  /* smallest subnormal */
	assert_true(mfma_f16_to_f32(0x03ff) == 0x3ffp-24f);                /* largest subnormal */
	assert_true(mfma_f16_to_f32(0x8200) == -0x200p-24f);
	assert_true(mfma_f16_to_f32(0x0400) == 0x1p-14f);                  /* smallest normal */
	assert_true(mfma_f16_to_f32(0x7bff) == 65504.0f);
	assert_true(isinf(mfma_f16_to_f32(0x7c00)) && mfma_f16_to_f32(0x7c00) > 0);
	assert_true(isinf(mfma_f16_to_f32(0xfc00)) && mfma_f16_to_f32(0xfc00) < 0);
	assert_true(isnan(mfma_f16_to_f32(0x7e00)));
	assert_true(isnan(mfma_f16_to_f32(0x7c01)));
	assert_true(isnan(mfma_f16_to_f32(0xfe00)));
}

static void test_f32_to_f16_cases(void **state)
{
	(void)state;
	assert_int_equal(mfma_f32_to_f16(0.0f), 0x0000);
	assert_int_equal(mfma_f32_to_f16(-0.0f), 0x8000);
	assert_int_equal(mfma_f32_to_f16(1.0f), 0x3c00);
	/* Halfway between 1 and 1+2^-10: ties to the even mantissa (1). */
	assert_int_equal(mfma_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
	/* Halfway between 1+2^-10 and 1+2^-9: even is 1+2^-9. */
	assert_int_equal(mfma_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
	/* Just above the halfway point rounds up. */
	assert_int_equal(mfma_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
	/* Rounding up carries into the exponent. */
	assert_int_equal(mfma_f32_to_f16(2.0f - 0x1p-12f), 0x4000);
	assert_int_equal(mfma_f32_to_f16(65504.0f), 0x7bff);
	assert_int_equal(mfma_f32_to_f16(65519.0f), 0x7bff);
	assert_int_equal(mfma_f32_to_f16(65520.0f), 0x7c00); /* halfway to 2^16: overflows */
	assert_int_equal(mfma_f32_to_f16(1e10f), 0x7c00);
	assert_int_equal(mfma_f32_to_f16(-1e10f), 0xfc00);
	assert_int_equal(mfma_f32_to_f16(INFINITY), 0x7c00);
	assert_int_equal(mfma_f32_to_f16(-INFINITY), 0xfc00);
	uint16_t n = mfma_f32_to_f16(NAN);
	assert_int_equal(n & 0x7c00, 0x7c00);
	assert_true((n & 0x3ff) != 0);
	/* A signalling NaN whose payload sits in the low bits stays a NaN. */
	n = mfma_f32_to_f16(from_bits(0x7f800001u));
	assert_int_equal(n & 0x7c00, 0x7c00);
	assert_true((n & 0x3ff) != 0);
	/* Subnormal results. */
	assert_int_equal(mfma_f32_to_f16(0x1p-24f), 0x0001);
	assert_int_equal(mfma_f32_to_f16(0x1p-25f), 0x0000);        /* tie to even: 0 */
	assert_int_equal(mfma_f32_to_f16(0x1.8p-25f), 0x0001);
	assert_int_equal(mfma_f32_to_f16(3 * 0x1p-25f), 0x0002);    /* tie between 1 and 2 */
	assert_int_equal(mfma_f32_to_f16(5 * 0x1p-25f), 0x0002);    /* tie between 2 and 3 */
	assert_int_equal(mfma_f32_to_f16(-0x1p-26f), 0x8000);
	assert_int_equal(mfma_f32_to_f16(0x3ffp-24f), 0x03ff);
	assert_int_equal(mfma_f32_to_f16(0x1p-14f - 0x1p-26f), 0x0400); /* rounds up to normal */
	assert_int_equal(mfma_f32_to_f16(1e-30f), 0x0000);
}

static void test_bf16_cases(void **state)
{
	(void)state;
	assert_true(mfma_bf16_to_f32(0x3f80) == 1.0f);
	assert_int_equal(to_bits(mfma_bf16_to_f32(0x8000)), 0x80000000u);
	assert_true(mfma_bf16_to_f32(0x0001) == from_bits(0x00010000u)); /* subnormal */
	assert_true(isinf(mfma_bf16_to_f32(0x7f80)));
	assert_true(isnan(mfma_bf16_to_f32(0x7fc0)));

	assert_int_equal(mfma_f32_to_bf16(1.0f), 0x3f80);
	assert_int_equal(mfma_f32_to_bf16(-0.0f), 0x8000);
	assert_int_equal(mfma_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie: even */
	assert_int_equal(mfma_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie: even */
	assert_int_equal(mfma_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
	assert_int_equal(mfma_f32_to_bf16(from_bits(0x00018000u)), 0x0002); /* subnormal tie */
	assert_int_equal(mfma_f32_to_bf16(from_bits(0x00017fffu)), 0x0001);
	assert_int_equal(mfma_f32_to_bf16(INFINITY), 0x7f80);
	assert_int_equal(mfma_f32_to_bf16(-INFINITY), 0xff80);
	assert_int_equal(mfma_f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX overflows */
	uint16_t n = mfma_f32_to_bf16(from_bits(0x7f800001u));
	assert_int_equal(n & 0x7f80, 0x7f80);
	assert_true((n & 0x7f) != 0);
	n = mfma_f32_to_bf16(from_bits(0xffc00000u));
	assert_int_equal(n, 0xffc0);
}

/* Every finite f16 survives f16 -> f32 -> f16; every f16 NaN stays NaN. */
static void test_f16_round_trip_all(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 0x10000u; h++) {
		float f = mfma_f16_to_f32((uint16_t)h);
		if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) {
			assert_true(isnan(f));
			assert_true(isnan(mfma_f16_to_f32(mfma_f32_to_f16(f))));
			continue;
		}
		assert_int_equal(mfma_f32_to_f16(f), h);
	}
	for (uint32_t h = 0; h < 0x10000u; h++) {
		float f = mfma_bf16_to_f32((uint16_t)h);
		if (isnan(f))
			continue;
		assert_int_equal(mfma_f32_to_bf16(f), h);
	}
}

/* The value of a 16-bit magnitude (no sign) as a double; the pattern
 * just above the largest finite one stands for the next power of two,
 * the point that decides overflow. */
static double val16(uint32_t mag, int bf)
{
	if (bf)
		return mag >= 0x7f80u ? 0x1p128 : (double)mfma_bf16_to_f32((uint16_t)mag);
	return mag >= 0x7c00u ? 0x1p16 : (double)mfma_f16_to_f32((uint16_t)mag);
}

/* For random finite floats: the result is a nearest 16-bit value, ties
 * go to the even pattern, the sign is kept, and results past the largest
 * finite value are infinity exactly when the input is at least halfway
 * to the next power of two. */
static void test_round_nearest_even_random(void **state)
{
	(void)state;
	uint32_t s = 99;
	for (int bf = 0; bf < 2; bf++)
		for (int i = 0; i < 200000; i++) {
			s = s * 1664525u + 1013904223u;
			uint32_t bits = s;
			/* Half the samples near the f16 range, where the cases are. */
			if (!bf && (i & 1))
				bits = (bits & 0x80000000u) | ((0x66u + (bits >> 8) % 0x2bu) << 23) |
				       (bits & 0x7fffffu);
			if (i % 7 == 0) /* exact ties: clear the bits below the halfway bit */
				bits &= bf ? 0xffff8000u : 0xfffff000u;
			float f = from_bits(bits);
			if (!isfinite(f))
				continue;
			uint16_t h = bf ? mfma_f32_to_bf16(f) : mfma_f32_to_f16(f);
			uint32_t inf = bf ? 0x7f80u : 0x7c00u;
			assert_int_equal(h >> 15, bits >> 31);
			uint32_t mag = h & 0x7fffu;
			double a = fabs((double)f);
			assert_true(mag <= inf);
			if (mag == inf) {
				assert_true(a >= (val16(inf - 1, bf) + val16(inf, bf)) / 2);
				continue;
			}
			double v = val16(mag, bf), up = val16(mag + 1, bf);
			double down = mag ? val16(mag - 1, bf) : -v;
			assert_true(fabs(a - v) <= fabs(a - up));
			assert_true(fabs(a - v) <= fabs(a - down));
			if (fabs(a - v) == fabs(a - up) || (mag && fabs(a - v) == fabs(a - down)))
				assert_int_equal(mag & 1u, 0);
		}
}

/* The block converters give the same bits as the scalar ones. */
static void test_block_converters(void **state)
{
	(void)state;
	enum { N = 0x10000 + 5 }; /* every pattern, plus a tail for the vector loops */
	uint16_t *h = malloc(N * sizeof(*h));
	float *f = malloc(N * sizeof(*f));
	uint16_t *back = malloc(N * sizeof(*back));
	for (size_t i = 0; i < N; i++)
		h[i] = (uint16_t)(i * 40503u);
	for (int bf = 0; bf < 2; bf++) {
		enum mfma_dtype t = bf ? MFMA_DT_BF16 : MFMA_DT_F16;
		cpu_cvt_to_f32(h, t, N, f);
		for (size_t i = 0; i < N; i++) {
			float want = bf ? mfma_bf16_to_f32(h[i]) : mfma_f16_to_f32(h[i]);
			if (isnan(want))
				assert_true(isnan(f[i]));
			else
				assert_int_equal(to_bits(f[i]), to_bits(want));
		}
		cpu_cvt_from_f32(f, t, N, back);
		for (size_t i = 0; i < N; i++)
			if (!isnan(f[i]))
				assert_int_equal(back[i], h[i]);
	}
	free(h);
	free(f);
	free(back);
}

/* Narrowing in blocks gives the scalar converters' bits for any f32:
 * random patterns (NaNs, infinities, subnormals included), values near
 * the f16 range and exact ties. */
static void test_block_narrowing(void **state)
{
	(void)state;
	enum { N = 100003 };
	float *f = malloc(N * sizeof(*f));
	uint16_t *h = malloc(N * sizeof(*h));
	uint32_t s = 5;
	for (size_t i = 0; i < N; i++) {
		s = s * 1664525u + 1013904223u;
		uint32_t bits = s;
		if (i % 3 == 1)
			bits = (bits & 0x80000000u) | ((0x60u + (bits >> 8) % 0x34u) << 23) |
			       (bits & 0x7fffffu);
		if (i % 5 == 2)
			bits &= 0xfffff000u;
		if (i % 7 == 3)
			bits &= 0xffff8000u;
		f[i] = from_bits(bits);
	}
	f[17] = NAN;
	f[18] = from_bits(0x7f800001u);
	f[19] = from_bits(0xffc00123u);
	for (int bf = 0; bf < 2; bf++) {
		cpu_cvt_from_f32(f, bf ? MFMA_DT_BF16 : MFMA_DT_F16, N, h);
		for (size_t i = 0; i < N; i++)
			assert_int_equal(h[i], bf ? mfma_f32_to_bf16(f[i]) : mfma_f32_to_f16(f[i]));
	}
	free(f);
	free(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f16_to_f32_cases),
		cmocka_unit_test(test_f32_to_f16_cases),
		cmocka_unit_test(test_bf16_cases),
		cmocka_unit_test(test_f16_round_trip_all),
		cmocka_unit_test(test_round_nearest_even_random),
		cmocka_unit_test(test_block_converters),
		cmocka_unit_test(test_block_narrowing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
