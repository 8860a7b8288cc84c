/* The CPU thread pool: every id of a job runs once, on its own thread, all
 * at the same time; the same threads serve job after job; jobs smaller
 * than the pool and refusals of impossible sizes; and a GEMM on a pool
 * gives the reference's numbers. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu_gemm.h"
#include "cpu_pool.h"

#define MAXID 8

struct record {
	unsigned runs[MAXID];
	pthread_t who[MAXID];
	pthread_barrier_t *barrier; /* when set, every id waits for all the others */
};

static void note(void *arg, unsigned id)
{
	struct record *r = arg;
	if (r->barrier)
		pthread_barrier_wait(r->barrier);
	/* Each id writes only its own slots: no lock needed. */
	r->runs[id]++;
	r->who[id] = pthread_self();
}

static void test_sizes_and_refusals(void **state)
{
	(void)state;
	struct record r;
	memset(&r, 0, sizeof(r));
	cpu_pool_destroy(NULL);
	assert_int_equal(cpu_pool_size(NULL), 1);
	/* No pool: the caller alone. */
	assert_int_equal(cpu_pool_run(NULL, 1, note, &r), 0);
	assert_int_equal(r.runs[0], 1);
	assert_true(pthread_equal(r.who[0], pthread_self()));
	assert_int_equal(cpu_pool_run(NULL, 2, note, &r), -EINVAL);
	for (unsigned t = 0; t <= 1; t++) {
		struct cpu_pool *p = cpu_pool_create(t);
		assert_non_null(p);
		assert_int_equal(cpu_pool_size(p), 1);
		cpu_pool_destroy(p);
	}
	struct cpu_pool *p = cpu_pool_create(3);
	assert_non_null(p);
	assert_int_equal(cpu_pool_size(p), 3);
	memset(&r, 0, sizeof(r));
	/* A job is never cut to fit: it was planned for its n. */
	assert_int_equal(cpu_pool_run(p, 4, note, &r), -EINVAL);
	assert_int_equal(cpu_pool_run(p, 0, note, &r), -EINVAL);
	assert_int_equal(cpu_pool_run(p, 2, NULL, &r), -EINVAL);
	for (unsigned i = 0; i < MAXID; i++)
		assert_int_equal(r.runs[i], 0);
	cpu_pool_destroy(p);
}

/* Every id once, id 0 on the caller, the others each on a thread of its
 * own; the next job finds the same threads (none is created per job). */
static void test_ids_threads_and_reuse(void **state)
{
	(void)state;
	struct cpu_pool *p = cpu_pool_create(4);
	assert_non_null(p);
	assert_int_equal(cpu_pool_size(p), 4);
	struct record first, r;
	memset(&first, 0, sizeof(first));
	assert_int_equal(cpu_pool_run(p, 4, note, &first), 0);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(first.runs[i], 1);
	assert_true(pthread_equal(first.who[0], pthread_self()));
	for (unsigned i = 1; i < 4; i++) {
		assert_false(pthread_equal(first.who[i], pthread_self()));
		for (unsigned j = 1; j < i; j++)
			assert_false(pthread_equal(first.who[i], first.who[j]));
	}
	for (int round = 0; round < 3; round++) {
		memset(&r, 0, sizeof(r));
		assert_int_equal(cpu_pool_run(p, 4, note, &r), 0);
		for (unsigned i = 0; i < 4; i++) {
			assert_int_equal(r.runs[i], 1);
			assert_true(pthread_equal(r.who[i], first.who[i]));
		}
	}
	/* A smaller job runs only its ids; the whole pool serves the next. */
	memset(&r, 0, sizeof(r));
	assert_int_equal(cpu_pool_run(p, 2, note, &r), 0);
	assert_int_equal(r.runs[0], 1);
	assert_int_equal(r.runs[1], 1);
	assert_int_equal(r.runs[2], 0);
	assert_int_equal(r.runs[3], 0);
	memset(&r, 0, sizeof(r));
	assert_int_equal(cpu_pool_run(p, 4, note, &r), 0);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(r.runs[i], 1);
	cpu_pool_destroy(p);
}

/* The ids run at the same time: a barrier of n inside the job completes
 * (a pool that ran them one after another would hang here, and meson's
 * timeout would fail the test). */
static void test_ids_run_together(void **state)
{
	(void)state;
	struct cpu_pool *p = cpu_pool_create(MAXID);
	assert_non_null(p);
	for (unsigned n = 1; n <= MAXID; n++) {
		pthread_barrier_t b;
		assert_int_equal(pthread_barrier_init(&b, NULL, n), 0);
		struct record r;
		memset(&r, 0, sizeof(r));
		r.barrier = &b;
		assert_int_equal(cpu_pool_run(p, n, note, &r), 0);
		for (unsigned i = 0; i < MAXID; i++)
			assert_int_equal(r.runs[i], i < n ? 1u : 0u);
		pthread_barrier_destroy(&b);
	}
	cpu_pool_destroy(p);
}

static void count(void *arg, unsigned id)
{
	unsigned *c = arg;
	c[id]++;
}

/* Many short jobs of changing sizes back to back: no wake-up is lost
 * and no id runs twice or for a job it is not part of. */
static void test_many_jobs(void **state)
{
	(void)state;
	struct cpu_pool *p = cpu_pool_create(5);
	assert_non_null(p);
	unsigned c[5] = { 0 }, want[5] = { 0 };
	for (unsigned j = 0; j < 20000; j++) {
		unsigned n = 1 + j % 5;
		assert_int_equal(cpu_pool_run(p, n, count, c), 0);
		for (unsigned i = 0; i < n; i++)
			want[i]++;
	}
	assert_memory_equal(c, want, sizeof(c));
	cpu_pool_destroy(p);
}

/* A 2:4 GEMM large enough to use several ids, on a pool, twice: the
 * numbers of the float64 reference both times. */
static void test_gemm_on_pool(void **state)
{
	(void)state;
	const uint32_t m = 256, n = 96, k = 512;
	float *vals = malloc(sizeof(float) * m * k / 2), *b = malloc(sizeof(float) * k * n);
	float *d = malloc(sizeof(float) * m * n);
	uint32_t *meta = calloc((size_t)m * ((k / 4 + 7) / 8), sizeof(uint32_t));
	double *ref = malloc(sizeof(double) * m * n);
	assert_true(vals && b && d && meta && ref);
	uint32_t s = 7;
	for (size_t i = 0; i < (size_t)m * k / 2; i++) {
		s = s * 1664525u + 1013904223u;
		vals[i] = (float)((int)(s >> 24) - 128) / 64.0f;
	}
	for (size_t i = 0; i < (size_t)k * n; i++) {
		s = s * 1664525u + 1013904223u;
		b[i] = (float)((int)(s >> 24) - 128) / 64.0f;
	}
	/* Positions (0,1), (1,3), (0,2) ... in turn: every group valid. */
	static const unsigned pairs[3] = { 0 | 1 << 2, 1 | 3 << 2, 0 | 2 << 2 };
	size_t words = (k / 4 + 7) / 8;
	for (size_t r = 0; r < m; r++)
		for (size_t g = 0; g < k / 4; g++)
			meta[r * words + g / 8] |= (uint32_t)pairs[(r + g) % 3] << (4 * (g % 8));
	struct mfma_gemm g = { .m = m, .n = n, .k = k, .in_dtype = MFMA_DT_F32,
			       .out_dtype = MFMA_DT_F32, .alpha = 1.0f, .a_sparse = true,
			       .a = vals, .a_meta = meta, .b = b, .d = d };
	assert_int_equal(cpu_gemm_ref_f64(&g, ref), 0);
	struct cpu_pool *p = cpu_pool_create(3);
	assert_non_null(p);
	for (int round = 0; round < 2; round++) {
		const char *v = NULL;
		memset(d, 0xa5, sizeof(float) * m * n);
		assert_int_equal(cpu_gemm_run_pool(&g, p, &v), 0);
		assert_string_equal(v, "cpu.sp24.f32");
		assert_true(cpu_rel_frobenius(d, MFMA_DT_F32, ref, (size_t)m * n) <= 1e-5);
	}
	/* No pool: the caller alone, the same numbers. */
	memset(d, 0xa5, sizeof(float) * m * n);
	assert_int_equal(cpu_gemm_run_pool(&g, NULL, NULL), 0);
	assert_true(cpu_rel_frobenius(d, MFMA_DT_F32, ref, (size_t)m * n) <= 1e-5);
	cpu_pool_destroy(p);
	free(vals);
	free(b);
	free(d);
	free(meta);
	free(ref);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_and_refusals),
		cmocka_unit_test(test_ids_threads_and_reuse),
		cmocka_unit_test(test_ids_run_together),
		cmocka_unit_test(test_many_jobs),
		cmocka_unit_test(test_gemm_on_pool),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
