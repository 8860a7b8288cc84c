/* The canonical 2:4 codec: layout, spare slots, validation, pruning and
 * the meta checks, for every element type. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sparse24.h"

static const enum mfma_dtype all_types[] = { MFMA_DT_F32, MFMA_DT_F16, MFMA_DT_BF16, MFMA_DT_I8 };

static unsigned rnd(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return (*s >> 8) & 0xffffffu;
}

/* A non-zero value of type t from a small integer v (v != 0), so ties and
 * exact comparisons are easy to set up. */
static void put(void *p, enum mfma_dtype t, size_t i, int v)
{
	switch (t) {
	case MFMA_DT_F32: ((float *)p)[i] = (float)v * 0.25f; break;
	case MFMA_DT_F16: ((uint16_t *)p)[i] = mfma_f32_to_f16((float)v * 0.25f); break;
	case MFMA_DT_BF16: ((uint16_t *)p)[i] = mfma_f32_to_bf16((float)v * 0.25f); break;
	case MFMA_DT_I8: ((int8_t *)p)[i] = (int8_t)v; break;
	default: break;
	}
}

/* A negative zero (floats) or plain zero (i8): all bits zero but the sign. */
static void put_neg_zero(void *p, enum mfma_dtype t, size_t i)
{
	switch (t) {
	case MFMA_DT_F32: ((float *)p)[i] = -0.0f; break;
	case MFMA_DT_F16:
	case MFMA_DT_BF16: ((uint16_t *)p)[i] = 0x8000u; break;
	default: ((int8_t *)p)[i] = 0; break;
	}
}

static int small_nonzero(unsigned *s)
{
	int v = (int)(rnd(s) % 99) - 49;
	return v ? v : 50;
}

/* Fills a rows x k matrix with a random 2:4 pattern: each group keeps 0,
 * 1 or 2 random positions (mostly 2); the others are zero, sometimes a
 * negative zero. */
static void random_24(void *d, enum mfma_dtype t, size_t rows, size_t k, unsigned *s)
{
	size_t es = mfma_dtype_size(t);
	memset(d, 0, rows * k * es);
	for (size_t r = 0; r < rows; r++)
		for (size_t g = 0; g < k / 4; g++) {
			unsigned kind = rnd(s) % 8;
			unsigned keep = kind == 0 ? 0 : kind == 1 ? 1 : 2;
			unsigned p0 = rnd(s) % 4, p1 = (p0 + 1 + rnd(s) % 3) % 4;
			size_t base = r * k + 4 * g;
			for (unsigned i = 0; i < 4; i++)
				if (rnd(s) % 3 == 0)
					put_neg_zero(d, t, base + i);
			if (keep >= 1)
				put(d, t, base + p0, small_nonzero(s));
			if (keep >= 2)
				put(d, t, base + p1, small_nonzero(s));
		}
}

static int is_zero(const void *p, enum mfma_dtype t, size_t i)
{
	return mfma_load_f64(p, t, i) == 0.0;
}

static void test_meta_words(void **state)
{
	(void)state;
	assert_int_equal(sparse24_meta_words(0), 0);
	assert_int_equal(sparse24_meta_words(4), 1);
	assert_int_equal(sparse24_meta_words(32), 1);
	assert_int_equal(sparse24_meta_words(36), 2);
	assert_int_equal(sparse24_meta_words(64), 2);
	assert_int_equal(sparse24_meta_words(68), 3);
}

static void test_nibble_check(void **state)
{
	(void)state;
	/* Legal: i0 < i1, nibble i0 | i1 << 2. */
	for (unsigned nib = 0; nib < 16; nib++) {
		unsigned i0 = nib & 3u, i1 = nib >> 2;
		assert_int_equal(sparse24_nibble_check(nib), i0 < i1 ? 0 : -EINVAL);
	}
	assert_int_equal(sparse24_nibble_check(0x4), 0);  /* (0,1) */
	assert_int_equal(sparse24_nibble_check(0xe), 0);  /* (2,3) */
	assert_int_equal(sparse24_nibble_check(0x1), -EINVAL);
	assert_int_equal(sparse24_nibble_check(0x5), -EINVAL);
	assert_int_equal(sparse24_nibble_check(0x10), -EINVAL);
}

/* Compress then decompress gives the matrix back, with every zero a
 * positive zero, for random patterns and a k that is not a multiple of 32. */
static void test_round_trip(void **state)
{
	(void)state;
	unsigned s = 1;
	const size_t rows = 7, ks[] = { 4, 12, 32, 36, 100 };
	for (size_t ti = 0; ti < 4; ti++)
		for (size_t ki = 0; ki < 5; ki++) {
			enum mfma_dtype t = all_types[ti];
			size_t k = ks[ki], es = mfma_dtype_size(t), words = sparse24_meta_words(k);
			char *d = malloc(rows * k * es), *back = malloc(rows * k * es);
			char *v = malloc(rows * k / 2 * es);
			uint32_t *meta = malloc(rows * words * 4);
			random_24(d, t, rows, k, &s);
			assert_int_equal(sparse24_validate(d, t, rows, k, NULL, NULL), 0);
			assert_int_equal(sparse24_compress(d, t, rows, k, v, meta, NULL, NULL), 0);
			assert_int_equal(sparse24_meta_check(meta, rows, k, NULL, NULL), 0);
			memset(back, 0x5a, rows * k * es);
			assert_int_equal(sparse24_decompress(v, meta, t, rows, k, back, NULL, NULL), 0);
			for (size_t i = 0; i < rows * k; i++) {
				if (is_zero(d, t, i)) {
					for (size_t b = 0; b < es; b++)
						assert_int_equal(back[i * es + b], 0);
				} else {
					assert_memory_equal(back + i * es, d + i * es, es);
				}
			}
			free(d);
			free(back);
			free(v);
			free(meta);
		}
}

/* Each row starts a new word; group g sits at bits 4*(g%8) of word g/8;
 * unused nibbles of a row's last word are zero. */
static void test_meta_layout(void **state)
{
	(void)state;
	const size_t rows = 3, k = 40; /* 10 groups: two words per row */
	float d[3 * 40] = { 0 };
	/* Row r, group g keeps positions (g % 3, 3) and value r*100+g+1. */
	for (size_t r = 0; r < rows; r++)
		for (size_t g = 0; g < k / 4; g++) {
			d[r * k + 4 * g + g % 3] = (float)(r * 100 + g + 1);
			d[r * k + 4 * g + 3] = -(float)(r * 100 + g + 1);
		}
	float v[3 * 20];
	uint32_t meta[3 * 2];
	assert_int_equal(sparse24_compress(d, MFMA_DT_F32, rows, k, v, meta, NULL, NULL), 0);
	for (size_t r = 0; r < rows; r++) {
		uint32_t want0 = 0, want1 = 0;
		for (size_t g = 0; g < 8; g++)
			want0 |= (uint32_t)((g % 3) | 3u << 2) << (4 * g);
		for (size_t g = 8; g < 10; g++)
			want1 |= (uint32_t)((g % 3) | 3u << 2) << (4 * (g - 8));
		assert_int_equal(meta[r * 2], want0);
		assert_int_equal(meta[r * 2 + 1], want1);
		for (size_t g = 0; g < 10; g++) {
			assert_true(v[r * 20 + 2 * g] == (float)(r * 100 + g + 1));
			assert_true(v[r * 20 + 2 * g + 1] == -(float)(r * 100 + g + 1));
			assert_int_equal(sparse24_nibble(meta + r * 2, g), (g % 3) | 3u << 2);
		}
	}
}

/* A group with fewer than two non-zeros stores a zero in the spare slot
 * and takes the lowest unused position, keeping i0 < i1. */
static void test_spare_slots(void **state)
{
	(void)state;
	/* Groups: one non-zero at 0, 1, 2, 3; then all zero; then a -0.0 and one value. */
	float d[24] = { 5, 0, 0, 0, 0, 6, 0, 0, 0, 0, 7, 0, 0, 0, 0, 8, 0, 0, 0, 0, -0.0f, 0, 9, -0.0f };
	float v[12];
	uint32_t meta[1];
	assert_int_equal(sparse24_compress(d, MFMA_DT_F32, 1, 24, v, meta, NULL, NULL), 0);
	const unsigned want_nib[6] = { 0 | 1 << 2, 0 | 1 << 2, 0 | 2 << 2, 0 | 3 << 2, 0 | 1 << 2,
				       0 | 2 << 2 };
	const float want_v[12] = { 5, 0, 0, 6, 0, 7, 0, 8, 0, 0, 0, 9 };
	for (unsigned g = 0; g < 6; g++) {
		assert_int_equal(sparse24_nibble(meta, g), want_nib[g]);
		for (unsigned s = 0; s < 2; s++) {
			uint32_t bits;
			memcpy(&bits, &v[2 * g + s], 4);
			assert_true(v[2 * g + s] == want_v[2 * g + s]);
			if (want_v[2 * g + s] == 0.0f)
				assert_int_equal(bits, 0); /* +0, never -0 */
		}
	}
	assert_int_equal(meta[0] >> 24, 0);
}

static void test_validate_rejects(void **state)
{
	(void)state;
	for (size_t ti = 0; ti < 4; ti++) {
		enum mfma_dtype t = all_types[ti];
		const size_t rows = 5, k = 44;
		size_t es = mfma_dtype_size(t);
		char *d = calloc(rows * k, es);
		char *v = malloc(rows * k / 2 * es);
		uint32_t meta[5 * 2];
		/* Two non-zeros plus negative zeros is still 2:4. */
		put(d, t, 2 * k + 4 * 5 + 0, 3);
		put(d, t, 2 * k + 4 * 5 + 3, -3);
		put_neg_zero(d, t, 2 * k + 4 * 5 + 1);
		assert_int_equal(sparse24_validate(d, t, rows, k, NULL, NULL), 0);
		/* A third non-zero in row 2, group 5, and a later one in row 4, group 0. */
		put(d, t, 2 * k + 4 * 5 + 2, 1);
		put(d, t, 4 * k + 0, 1);
		put(d, t, 4 * k + 1, 1);
		put(d, t, 4 * k + 2, 1);
		size_t br = 99, bg = 99;
		assert_int_equal(sparse24_validate(d, t, rows, k, &br, &bg), -EINVAL);
		assert_int_equal(br, 2);
		assert_int_equal(bg, 5);
		br = bg = 99;
		assert_int_equal(sparse24_compress(d, t, rows, k, v, meta, &br, &bg), -EINVAL);
		assert_int_equal(br, 2);
		assert_int_equal(bg, 5);
		/* NULL report pointers are allowed. */
		assert_int_equal(sparse24_validate(d, t, rows, k, NULL, NULL), -EINVAL);
		free(d);
		free(v);
	}
}

static void test_bad_sizes(void **state)
{
	(void)state;
	float d[8] = { 1, 0, 0, 0, 1, 0, 0, 0 }, v[4];
	uint32_t meta[1] = { 0x44 };
	assert_int_equal(sparse24_validate(d, MFMA_DT_F32, 1, 6, NULL, NULL), -EINVAL);
	assert_int_equal(sparse24_compress(d, MFMA_DT_F32, 1, 6, v, meta, NULL, NULL), -EINVAL);
	assert_int_equal(sparse24_prune(d, MFMA_DT_F32, 1, 6, v, meta), -EINVAL);
	assert_int_equal(sparse24_decompress(v, meta, MFMA_DT_F32, 1, 6, d, NULL, NULL), -EINVAL);
	assert_int_equal(sparse24_meta_check(meta, 1, 6, NULL, NULL), -EINVAL);
	assert_int_equal(sparse24_validate(d, MFMA_DT_NONE, 1, 8, NULL, NULL), -EINVAL);
}

/* The brute-force definition of pruning: order a group's positions by
 * magnitude, largest first, the lower position first among equals, and
 * keep the first two. */
static void brute_keep(const double *mag, unsigned *i0, unsigned *i1)
{
	unsigned order[4] = { 0, 1, 2, 3 };
	for (unsigned a = 0; a < 4; a++)
		for (unsigned b = a + 1; b < 4; b++) {
			unsigned x = order[a], y = order[b];
			if (mag[y] > mag[x] || (mag[y] == mag[x] && y < x)) {
				order[a] = y;
				order[b] = x;
			}
		}
	*i0 = order[0] < order[1] ? order[0] : order[1];
	*i1 = order[0] < order[1] ? order[1] : order[0];
}

static void test_prune_brute_force(void **state)
{
	(void)state;
	unsigned s = 7;
	const size_t rows = 9, k = 52;
	for (size_t ti = 0; ti < 4; ti++) {
		enum mfma_dtype t = all_types[ti];
		size_t es = mfma_dtype_size(t), words = sparse24_meta_words(k);
		char *d = malloc(rows * k * es), *back = malloc(rows * k * es);
		char *v = malloc(rows * k / 2 * es);
		uint32_t *meta = malloc(rows * words * 4);
		/* Values from a small set so that equal magnitudes (3 and -3)
		 * are common; a few zeros too. */
		for (size_t i = 0; i < rows * k; i++) {
			int x = (int)(rnd(&s) % 9) - 4;
			if (x == 0 && rnd(&s) % 2)
				x = 4;
			if (x == 0)
				put_neg_zero(d, t, i);
			else
				put(d, t, i, x);
		}
		assert_int_equal(sparse24_prune(d, t, rows, k, v, meta), 0);
		assert_int_equal(sparse24_meta_check(meta, rows, k, NULL, NULL), 0);
		assert_int_equal(sparse24_decompress(v, meta, t, rows, k, back, NULL, NULL), 0);
		for (size_t r = 0; r < rows; r++)
			for (size_t g = 0; g < k / 4; g++) {
				double mag[4];
				for (unsigned i = 0; i < 4; i++) {
					double x = mfma_load_f64(d, t, r * k + 4 * g + i);
					mag[i] = x < 0 ? -x : x;
				}
				unsigned i0, i1;
				brute_keep(mag, &i0, &i1);
				assert_int_equal(sparse24_nibble(meta + r * words, g), i0 | i1 << 2);
				for (unsigned i = 0; i < 4; i++) {
					size_t at = r * k + 4 * g + i;
					double want = (i == i0 || i == i1) ? mfma_load_f64(d, t, at) : 0.0;
					assert_true(mfma_load_f64(back, t, at) == want);
				}
			}
		free(d);
		free(back);
		free(v);
		free(meta);
	}
}

/* Pruning a matrix that already is 2:4 gives exactly what compress gives. */
static void test_prune_of_24_is_compress(void **state)
{
	(void)state;
	unsigned s = 11;
	const size_t rows = 6, k = 68;
	for (size_t ti = 0; ti < 4; ti++) {
		enum mfma_dtype t = all_types[ti];
		size_t es = mfma_dtype_size(t), words = sparse24_meta_words(k);
		char *d = malloc(rows * k * es);
		char *v1 = malloc(rows * k / 2 * es), *v2 = malloc(rows * k / 2 * es);
		uint32_t *m1 = malloc(rows * words * 4), *m2 = malloc(rows * words * 4);
		random_24(d, t, rows, k, &s);
		assert_int_equal(sparse24_compress(d, t, rows, k, v1, m1, NULL, NULL), 0);
		assert_int_equal(sparse24_prune(d, t, rows, k, v2, m2), 0);
		assert_memory_equal(v1, v2, rows * k / 2 * es);
		assert_memory_equal(m1, m2, rows * words * 4);
		free(d);
		free(v1);
		free(v2);
		free(m1);
		free(m2);
	}
}

static void test_meta_check_rejects(void **state)
{
	(void)state;
	const size_t rows = 3, k = 48; /* 12 groups, 2 words per row */
	uint32_t meta[6];
	for (size_t i = 0; i < 6; i++)
		meta[i] = i % 2 ? 0x0000e4d8u : 0x9c8e4d84u; /* all legal nibbles */
	size_t br = 99, bg = 99;
	assert_int_equal(sparse24_meta_check(meta, rows, k, &br, &bg), 0);
	/* Row 1, group 9 (word 1, bits 4..7) becomes (1,1): illegal. */
	meta[1 * 2 + 1] = (meta[1 * 2 + 1] & ~0xf0u) | 0x50u;
	/* Row 2, group 0 becomes (2,1): illegal, but later. */
	meta[2 * 2] = (meta[2 * 2] & ~0xfu) | 0x6u;
	assert_int_equal(sparse24_meta_check(meta, rows, k, &br, &bg), -EINVAL);
	assert_int_equal(br, 1);
	assert_int_equal(bg, 9);
	float v[3 * 24] = { 0 }, d[3 * 48];
	br = bg = 99;
	assert_int_equal(sparse24_decompress(v, meta, MFMA_DT_F32, rows, k, d, &br, &bg), -EINVAL);
	assert_int_equal(br, 1);
	assert_int_equal(bg, 9);
	/* Nibbles past the last group of a row are not groups and are not checked. */
	meta[1 * 2 + 1] = 0xffffe4d8u;
	meta[2 * 2] = 0x9c8e4d84u;
	meta[2 * 2 + 1] = 0x1111e4d8u;
	meta[0 * 2 + 1] = 0x0000e4d8u;
	assert_int_equal(sparse24_meta_check(meta, rows, k, NULL, NULL), 0);
	/* (0,0) in group 0 of row 0. */
	meta[0] &= ~0xfu;
	assert_int_equal(sparse24_meta_check(meta, rows, k, &br, &bg), -EINVAL);
	assert_int_equal(br, 0);
	assert_int_equal(bg, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_meta_words),
		cmocka_unit_test(test_nibble_check),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_meta_layout),
		cmocka_unit_test(test_spare_slots),
		cmocka_unit_test(test_validate_rejects),
		cmocka_unit_test(test_bad_sizes),
		cmocka_unit_test(test_prune_brute_force),
		cmocka_unit_test(test_prune_of_24_is_compress),
		cmocka_unit_test(test_meta_check_rejects),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
