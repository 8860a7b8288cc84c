/* A batched launch's operands (mfma_gemm.h): rows gathered from the parts
 * and D scattered back (the CPU backend), and the parts one after the
 * other however the byte ranges are cut (CUDA, whose pinned pool moves
 * them in chunks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mfma_gemm.h"

static uint32_t rnd(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

static void one_case(uint32_t seed, uint32_t nparts, uint32_t m, size_t es)
{
	struct mfma_gemm_part *parts = calloc(nparts, sizeof(*parts));
	uint32_t total = 0;
	for (uint32_t i = 0; i < nparts; i++) {
		parts[i].n = 1 + rnd(&seed) % (i % 3 == 0 ? 1 : 7);
		total += parts[i].n;
		parts[i].b = malloc((size_t)m * parts[i].n * es);
		parts[i].d = calloc((size_t)m * parts[i].n, es);
		unsigned char *b = (unsigned char *)parts[i].b;
		for (size_t x = 0; x < (size_t)m * parts[i].n * es; x++)
			b[x] = (unsigned char)rnd(&seed);
	}
	struct mfma_gemm g = { .m = m, .n = total, .nparts = nparts, .parts = parts };
	/* Gather every row and compare with the parts side by side. */
	size_t row = (size_t)total * es;
	unsigned char *joined = malloc((size_t)m * row);
	for (uint32_t r = 0; r < m; r++)
		mfma_gemm_gather_row(&g, 'b', r, es, joined + r * row);
	for (uint32_t r = 0; r < m; r++) {
		size_t at = 0;
		for (uint32_t i = 0; i < nparts; i++) {
			size_t len = (size_t)parts[i].n * es;
			assert_memory_equal(joined + r * row + at,
					    (const unsigned char *)parts[i].b + r * len, len);
			at += len;
		}
	}
	/* Scatter the joined matrix back row by row: D == B. */
	for (uint32_t r = 0; r < m; r++)
		mfma_gemm_scatter_row(&g, r, es, joined + r * row);
	for (uint32_t i = 0; i < nparts; i++)
		assert_memory_equal(parts[i].d, parts[i].b, (size_t)m * parts[i].n * es);
	/* The parts one after the other, as a device that joins the columns
	 * itself moves them: read in random chunks, it is the parts' B in
	 * order; written back in other chunks into D, D == B again. */
	size_t all = (size_t)m * row, at = 0;
	unsigned char *concat = malloc(all);
	for (size_t off = 0; off < all;) {
		size_t take = 1 + rnd(&seed) % (row * 3 + 7);
		take = take > all - off ? all - off : take;
		mfma_gemm_parts_copy(&g, 'b', m, es, off, concat + off, take, 0);
		off += take;
	}
	for (uint32_t i = 0; i < nparts; i++) {
		size_t len = (size_t)m * parts[i].n * es;
		assert_memory_equal(concat + at, parts[i].b, len);
		memset(parts[i].d, 0, len);
		at += len;
	}
	for (size_t off = 0; off < all;) {
		size_t take = 1 + rnd(&seed) % (row * 5 + 3);
		take = take > all - off ? all - off : take;
		mfma_gemm_parts_copy(&g, 'd', m, es, off, concat + off, take, 1);
		off += take;
	}
	free(concat);
	for (uint32_t i = 0; i < nparts; i++) {
		assert_memory_equal(parts[i].d, parts[i].b, (size_t)m * parts[i].n * es);
		free((void *)parts[i].b);
		free(parts[i].d);
	}
	free(joined);
	free(parts);
}

static void test_gather_and_scatter(void **state)
{
	(void)state;
	for (uint32_t s = 1; s <= 40; s++)
		one_case(s, 1 + s % 37, 1 + s * 13 % 97, s % 3 == 0 ? 4 : s % 3 == 1 ? 2 : 1);
	one_case(99, 256, 64, 2); /* 256 single-column requests */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gather_and_scatter),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
