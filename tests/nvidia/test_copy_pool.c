/* copy_pool: a copy cut into slices across a team's threads and the
 * caller's does every byte exactly once, for lengths around the slice
 * size and the threshold, job after job; with no team, a team of one or
 * under the threshold it runs in one call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "copy_pool.h"

struct job {
	const unsigned char *src;
	unsigned char *dst;
	_Atomic unsigned *touched; /* per byte: how many slices covered it */
	_Atomic unsigned calls;
};

static void slice(void *arg, size_t off, size_t len)
{
	struct job *j = arg;
	memcpy(j->dst + off, j->src + off, len);
	for (size_t i = off; i < off + len; i++)
		atomic_fetch_add_explicit(&j->touched[i], 1, memory_order_relaxed);
	atomic_fetch_add(&j->calls, 1);
}

/* Runs one copy of len bytes and checks it; returns the slices called. */
static unsigned copy_once(struct cpu_pool *p, size_t len, unsigned seed)
{
	unsigned char *src = malloc(len + 1), *dst = calloc(1, len + 1);
	_Atomic unsigned *touched = calloc(len + 1, sizeof(*touched));
	assert_non_null(src);
	assert_non_null(dst);
	assert_non_null(touched);
	for (size_t i = 0; i < len; i++)
		src[i] = (unsigned char)(i * 131 + seed);
	struct job j = { .src = src, .dst = dst, .touched = touched };
	copy_pool_run(p, slice, &j, len);
	assert_memory_equal(dst, src, len);
	for (size_t i = 0; i < len; i++)
		if (touched[i] != 1)
			fail_msg("byte %zu of %zu copied %u times", i, len, touched[i]);
	assert_int_equal(touched[len], 0);
	unsigned calls = j.calls;
	free(src);
	free(dst);
	free(touched);
	return calls;
}

static void test_every_byte_once(void **state)
{
	(void)state;
	struct cpu_pool *p = cpu_pool_create(4);
	assert_non_null(p);
	assert_int_equal(cpu_pool_size(p), 4);
	static const size_t lens[] = { 0, 1, 4096, COPY_POOL_MIN - 1, COPY_POOL_MIN,
				       COPY_POOL_MIN + 1, 3 * COPY_POOL_SLICE + 7,
				       4u << 20, (4u << 20) + 12345 };
	for (unsigned round = 0; round < 20; round++)
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			unsigned calls = copy_once(p, lens[i], round);
			if (lens[i] >= COPY_POOL_MIN)
				assert_int_equal(calls,
						 (lens[i] + COPY_POOL_SLICE - 1) / COPY_POOL_SLICE);
			else
				assert_int_equal(calls, lens[i] ? 1 : 0);
		}
	cpu_pool_destroy(p);
}

/* No team, or a team of one: one call, on the caller. */
static void test_without_helpers(void **state)
{
	(void)state;
	assert_int_equal(copy_once(NULL, 4u << 20, 1), 1);
	struct cpu_pool *p = cpu_pool_create(1);
	assert_non_null(p);
	assert_int_equal(copy_once(p, 4u << 20, 2), 1);
	cpu_pool_destroy(p);
	assert_int_equal(copy_pool_threads_for(2), 1);
	assert_true(copy_pool_threads_for(16) > 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_byte_once),
		cmocka_unit_test(test_without_helpers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
