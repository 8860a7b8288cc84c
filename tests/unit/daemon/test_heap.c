/* The scheduler's queue order: the heap hands nodes out by (key, seq),
 * filter and rekey keep the heap a heap, and the order key ages
 * priorities. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "heap.h"
#include "scheduler.h"

#define N 1000

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void test_pops_in_key_then_seq_order(void **state)
{
	(void)state;
	static struct heap_node nodes[N];
	struct heap h = { 0 };
	uint64_t s = 42;
	for (int i = 0; i < N; i++) {
		nodes[i].key = rnd(&s) % 50; /* many equal keys: seq must break ties */
		nodes[i].seq = (uint64_t)i;
		assert_int_equal(heap_push(&h, &nodes[i]), 0);
	}
	const struct heap_node *prev = NULL;
	for (int i = 0; i < N; i++) {
		struct heap_node *n = heap_pop(&h);
		assert_non_null(n);
		if (prev)
			assert_true(prev->key < n->key || (prev->key == n->key && prev->seq < n->seq));
		prev = n;
	}
	assert_null(heap_pop(&h));
	heap_free(&h);
}

static bool keep_even(struct heap_node *n, void *arg)
{
	(void)arg;
	return n->seq % 2 == 0;
}

static void count_dropped(struct heap_node *n, void *arg)
{
	assert_int_equal(n->seq % 2, 1);
	(*(int *)arg)++;
}

static void test_filter_keeps_order(void **state)
{
	(void)state;
	static struct heap_node nodes[N];
	struct heap h = { 0 };
	uint64_t s = 7;
	for (int i = 0; i < N; i++) {
		nodes[i].key = rnd(&s) % 1000;
		nodes[i].seq = (uint64_t)i;
		assert_int_equal(heap_push(&h, &nodes[i]), 0);
	}
	int dropped = 0;
	heap_filter(&h, keep_even, count_dropped, &dropped);
	assert_int_equal(dropped, N / 2);
	assert_int_equal(h.len, N / 2);
	const struct heap_node *prev = NULL;
	for (struct heap_node *n; (n = heap_pop(&h));) {
		assert_int_equal(n->seq % 2, 0);
		if (prev)
			assert_true(prev->key < n->key || (prev->key == n->key && prev->seq < n->seq));
		prev = n;
	}
	heap_free(&h);
}

/* New keys for every node (a reload's new aging): popped in the new
 * order, whatever the old one was. */
static void reverse_key(struct heap_node *n, void *arg)
{
	n->key = *(const uint64_t *)arg - n->key;
}

static void test_rekey_restores_order(void **state)
{
	(void)state;
	static struct heap_node nodes[N];
	struct heap h = { 0 };
	uint64_t s = 9;
	for (int i = 0; i < N; i++) {
		nodes[i].key = rnd(&s) % 1000;
		nodes[i].seq = (uint64_t)i;
		assert_int_equal(heap_push(&h, &nodes[i]), 0);
	}
	uint64_t top = 1000;
	heap_rekey(&h, reverse_key, &top);
	assert_int_equal(h.len, N);
	const struct heap_node *prev = NULL;
	int popped = 0;
	for (struct heap_node *n; (n = heap_pop(&h)); popped++) {
		if (prev)
			assert_true(prev->key < n->key || (prev->key == n->key && prev->seq < n->seq));
		prev = n;
	}
	assert_int_equal(popped, N);
	heap_free(&h);
}

static void test_order_key_ages_priorities(void **state)
{
	(void)state;
	const uint64_t ms = 1000000, t0 = 1000 * ms;
	/* Priority 5 queued at t0 against priority 1 queued later, aging 1 s
	 * a level: priority 1 goes first until it comes 4 s later. */
	uint64_t low = sched_order_key(t0, 5, 1000);
	assert_true(sched_order_key(t0 + 3999 * ms, 1, 1000) < low);
	assert_true(sched_order_key(t0 + 4001 * ms, 1, 1000) > low);
	/* Aging off: priority wins for any wait a daemon sees. */
	assert_true(sched_order_key(t0 + 86400000 * ms, 1, 0) < sched_order_key(t0, 5, 0));
	/* Same priority: arrival order. */
	assert_true(sched_order_key(t0, 3, 10) < sched_order_key(t0 + 1, 3, 10));
	/* Internal work (priority 0) goes before any request queued with it. */
	assert_true(sched_order_key(t0, 0, 1000) < sched_order_key(t0, 1, 1000));
	/* Huge priorities saturate instead of wrapping round to the front. */
	assert_int_equal(sched_order_key(t0, UINT32_MAX, 0), UINT64_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pops_in_key_then_seq_order),
		cmocka_unit_test(test_filter_keeps_order),
		cmocka_unit_test(test_rekey_restores_order),
		cmocka_unit_test(test_order_key_ages_priorities),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
