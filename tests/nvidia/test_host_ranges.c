/* The registered host ranges (host_ranges.c): sorted whatever the order
 * they come in, found by any pointer and length inside one and by nothing
 * that crosses an edge, overlaps refused, removal by base; against a
 * linear search over the same ranges on random queries. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "host_ranges.h"

static struct host_range range(uintptr_t base, size_t len)
{
	return (struct host_range){ .base = base, .len = len, .mapped = true, .dev_off = base ^ 1 };
}

static const void *at(uintptr_t a)
{
	return (const void *)a;
}

static void test_find_edges(void **state)
{
	(void)state;
	struct host_ranges r = { 0 };
	/* Out of order: 3000, 1000, 2000 (1000 and 2000 touch). */
	struct host_range x[] = { range(3000, 500), range(1000, 1000), range(2000, 100) };
	for (int i = 0; i < 3; i++)
		assert_int_equal(host_ranges_add(&r, &x[i]), 0);
	assert_int_equal(r.n, 3);
	for (size_t i = 1; i < r.n; i++)
		assert_true(r.v[i - 1].base < r.v[i].base);
	assert_null(host_ranges_find(&r, at(999), 1));
	assert_int_equal(host_ranges_find(&r, at(1000), 1000)->base, 1000);
	assert_null(host_ranges_find(&r, at(1000), 1001)); /* crosses into the next */
	assert_int_equal(host_ranges_find(&r, at(1999), 1)->base, 1000);
	assert_int_equal(host_ranges_find(&r, at(2000), 100)->base, 2000);
	assert_null(host_ranges_find(&r, at(2050), 51));
	assert_null(host_ranges_find(&r, at(2100), 1)); /* the gap */
	assert_null(host_ranges_find(&r, at(2999), 2));
	assert_int_equal(host_ranges_find(&r, at(3499), 1)->base, 3000);
	assert_null(host_ranges_find(&r, at(3500), 1));
	assert_null(host_ranges_find(&r, at(UINTPTR_MAX), 1));
	assert_true(host_ranges_find(&r, at(3000), 500)->mapped);
	assert_int_equal(host_ranges_find(&r, at(3000), 500)->dev_off, 3000 ^ 1);
	host_ranges_free(&r);
}

static void test_overlaps_refused(void **state)
{
	(void)state;
	struct host_ranges r = { 0 };
	struct host_range a = range(1000, 1000);
	assert_int_equal(host_ranges_add(&r, &a), 0);
	struct host_range bad[] = { range(1000, 1000), range(500, 501), range(1999, 10),
				    range(1200, 10), range(0, 5000) };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_true(host_ranges_overlap(&r, bad[i].base, bad[i].len));
		assert_int_equal(host_ranges_add(&r, &bad[i]), -EEXIST);
	}
	struct host_range ok[] = { range(500, 500), range(2000, 10) };
	for (size_t i = 0; i < 2; i++) {
		assert_false(host_ranges_overlap(&r, ok[i].base, ok[i].len));
		assert_int_equal(host_ranges_add(&r, &ok[i]), 0);
	}
	struct host_range empty = range(9000, 0), wraps = range(UINTPTR_MAX - 4, 10);
	assert_int_equal(host_ranges_add(&r, &empty), -EINVAL);
	assert_int_equal(host_ranges_add(&r, &wraps), -EINVAL);
	assert_int_equal(r.n, 3);
	host_ranges_free(&r);
}

static void test_remove(void **state)
{
	(void)state;
	struct host_ranges r = { 0 };
	for (uintptr_t b = 1; b <= 40; b++) {
		struct host_range x = range(b * 100, 50);
		assert_int_equal(host_ranges_add(&r, &x), 0);
	}
	struct host_range out;
	assert_false(host_ranges_remove(&r, 150, &out)); /* not a base */
	assert_true(host_ranges_remove(&r, 1700, &out));
	assert_int_equal(out.base, 1700);
	assert_int_equal(out.len, 50);
	assert_false(host_ranges_remove(&r, 1700, NULL));
	assert_null(host_ranges_find(&r, at(1710), 1));
	assert_int_equal(host_ranges_find(&r, at(1810), 1)->base, 1800);
	assert_int_equal(r.n, 39);
	while (r.n)
		assert_true(host_ranges_remove(&r, r.v[r.n / 2].base, NULL));
	assert_null(host_ranges_find(&r, at(100), 1));
	host_ranges_free(&r);
}

/* Random disjoint ranges added in random order, some removed, and random
 * queries: the sorted search answers as a walk over every range does. */
static void test_against_linear_search(void **state)
{
	(void)state;
	srand(12345);
	enum { N = 600 };
	struct host_range all[N];
	bool live[N];
	for (int i = 0; i < N; i++) {
		all[i] = range((uintptr_t)i * 4096 + 64 + (uintptr_t)(rand() % 512),
			       (size_t)(1 + rand() % 3000));
		live[i] = true;
	}
	for (int i = N - 1; i > 0; i--) { /* shuffle the order of adding */
		int j = rand() % (i + 1);
		struct host_range t = all[i];
		all[i] = all[j];
		all[j] = t;
	}
	struct host_ranges r = { 0 };
	for (int i = 0; i < N; i++)
		assert_int_equal(host_ranges_add(&r, &all[i]), 0);
	for (int i = 0; i < N; i += 3) {
		assert_true(host_ranges_remove(&r, all[i].base, NULL));
		live[i] = false;
	}
	for (int q = 0; q < 200000; q++) {
		uintptr_t a = (uintptr_t)(rand() % (N * 4096 + 8192));
		size_t len = (size_t)(rand() % 4) == 0 ? 0 : (size_t)(rand() % 4000);
		const struct host_range *want = NULL;
		for (int i = 0; i < N && !want; i++)
			if (live[i] && a >= all[i].base && len <= all[i].len &&
			    a - all[i].base <= all[i].len - len)
				want = &all[i];
		const struct host_range *got = host_ranges_find(&r, at(a), len);
		if (!want)
			assert_null(got);
		else
			assert_true(got && got->base == want->base && got->len == want->len);
	}
	host_ranges_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_find_edges),
		cmocka_unit_test(test_overlaps_refused),
		cmocka_unit_test(test_remove),
		cmocka_unit_test(test_against_linear_search),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
