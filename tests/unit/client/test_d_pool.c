/* The client's pool of buffers for answers' D (client/lib/d_pool.c):
 * a buffer given back is taken again for a D of the same size or up to
 * half smaller, not for one less than half its size; the pool holds at
 * most D_POOL_KEPT buffers and D_POOL_BYTES, letting the oldest go; and
 * closed, it frees what it keeps at once and itself with the last buffer
 * given back, on any thread (ASan and LSan in CI: nothing leaks, nothing
 * is used after its free).  Under ASan the pool keeps nothing, so the
 * reuse checks are the normal build's. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "block_list.h"
#include "d_pool.h"

static void *take(struct d_pool *p, size_t len, size_t *cap)
{
	void *b = d_pool_take(p, len, cap);
	assert_non_null(b);
	assert_true(*cap >= len);
	memset(b, 0x5a, len); /* ASan: every byte of it is ours */
	return b;
}

static void test_reuse_by_size(void **state)
{
	(void)state;
	struct d_pool *p = d_pool_new();
	assert_non_null(p);
	size_t cap, cap2;
	void *b = take(p, 131072, &cap);
	assert_int_equal(cap, 131072);
	d_pool_give(p, b, cap);
	if (block_list_keeps()) {
		size_t bytes;
		assert_int_equal(d_pool_kept(p, &bytes), 1);
		assert_int_equal(bytes, 131072);
		/* The same size and a little smaller take it; far smaller not. */
		assert_ptr_equal(take(p, 131072, &cap2), b);
		d_pool_give(p, b, cap2);
		assert_ptr_equal(take(p, 70000, &cap2), b);
		assert_int_equal(cap2, 131072);
		d_pool_give(p, b, cap2);
		void *small = take(p, 60000, &cap2);
		assert_ptr_not_equal(small, b);
		assert_int_equal(cap2, 61440); /* whole pages */
		d_pool_give(p, small, cap2);
		assert_int_equal(d_pool_kept(p, NULL), 2);
	} else {
		assert_int_equal(d_pool_kept(p, NULL), 0);
	}
	d_pool_close(p);
}

static void test_bounds(void **state)
{
	(void)state;
	struct d_pool *p = d_pool_new();
	assert_non_null(p);
	void *b[D_POOL_KEPT + 4];
	size_t cap[D_POOL_KEPT + 4], bytes;
	for (int i = 0; i < D_POOL_KEPT + 4; i++)
		b[i] = take(p, 8192, &cap[i]);
	for (int i = 0; i < D_POOL_KEPT + 4; i++)
		d_pool_give(p, b[i], cap[i]);
	assert_true(d_pool_kept(p, &bytes) <= D_POOL_KEPT);
	assert_true(bytes <= D_POOL_BYTES);
	/* Five buffers of a quarter of the bytes each, out at once, given
	 * back: four fit, the oldest go (the 8 KiB ones, then the first
	 * quarter). */
	size_t quarter = D_POOL_BYTES / 4, qc[5];
	void *q[5];
	for (int i = 0; i < 5; i++)
		q[i] = take(p, quarter, &qc[i]);
	for (int i = 0; i < 5; i++) {
		d_pool_give(p, q[i], qc[i]);
		assert_true(d_pool_kept(p, &bytes) <= D_POOL_KEPT);
		assert_true(bytes <= D_POOL_BYTES);
	}
	if (block_list_keeps()) {
		assert_int_equal(d_pool_kept(p, &bytes), 4);
		assert_int_equal(bytes, D_POOL_BYTES);
	}
	/* Larger than the pool holds: freed, not kept. */
	size_t hc;
	void *huge = take(p, D_POOL_BYTES + 1, &hc);
	d_pool_give(p, huge, hc);
	assert_true(d_pool_kept(p, &bytes) <= D_POOL_KEPT && bytes <= D_POOL_BYTES);
	d_pool_close(p);
	d_pool_close(NULL);
}

struct giver {
	struct d_pool *p;
	void *b;
	size_t cap;
};

static void *give_later(void *arg)
{
	struct giver *g = arg;
	memset(g->b, 0, g->cap);
	d_pool_give(g->p, g->b, g->cap);
	return NULL;
}

/* Closed with buffers out: each stays valid until given back (here on
 * other threads), the last one frees the pool; nothing is kept after
 * the close. */
static void test_close_with_buffers_out(void **state)
{
	(void)state;
	struct d_pool *p = d_pool_new();
	assert_non_null(p);
	struct giver g[3];
	for (int i = 0; i < 3; i++)
		g[i] = (struct giver){ .p = p, .b = take(p, 40000 + (size_t)i, &g[i].cap) };
	void *kept;
	size_t kc;
	kept = take(p, 40000, &kc);
	d_pool_give(p, kept, kc);
	d_pool_close(p);
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, give_later, &g[i]), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reuse_by_size),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_close_with_buffers_out),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
