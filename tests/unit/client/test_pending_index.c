/* The id -> entry hash of a client's requests in flight: against a plain
 * list under random puts, updates and deletions (ids in order as the
 * client makes them, and random ones), every id found where the list has
 * it and no other; growth past its first size; freed and used again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "pending_index.h"

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

enum { MODEL = 600 };

struct model {
	uint64_t id[MODEL];
	uint32_t slot[MODEL];
	size_t n;
};

static long model_find(const struct model *m, uint64_t id)
{
	for (size_t i = 0; i < m->n; i++)
		if (m->id[i] == id)
			return (long)i;
	return -1;
}

/* Every id the model has is found with its slot; ids it lacks are not. */
static void agree(const struct pending_index *x, const struct model *m, uint64_t absent)
{
	assert_int_equal(x->n, m->n);
	for (size_t i = 0; i < m->n; i++) {
		uint32_t s = UINT32_MAX;
		if (!pending_index_get(x, m->id[i], &s))
			fail_msg("id %llu (slot %u) not found", (unsigned long long)m->id[i], m->slot[i]);
		assert_int_equal(s, m->slot[i]);
	}
	uint32_t s;
	if (model_find(m, absent) < 0)
		assert_false(pending_index_get(x, absent, &s));
}

static void run(bool in_order, uint64_t seed)
{
	struct pending_index x = { 0 };
	struct model m = { .n = 0 };
	uint64_t next = 1, s = seed;
	for (int step = 0; step < 20000; step++) {
		const unsigned op = (unsigned)(rnd(&s) % 10);
		if (op < 5 && m.n < MODEL) {
			uint64_t id = in_order ? next++ : rnd(&s);
			if (model_find(&m, id) >= 0)
				continue;
			uint32_t slot = (uint32_t)(rnd(&s) % 100000);
			assert_int_equal(pending_index_put(&x, id, slot), 0);
			m.id[m.n] = id;
			m.slot[m.n++] = slot;
		} else if (op < 7 && m.n) {
			/* A slot moved, as when the table's last entry fills a hole. */
			size_t i = rnd(&s) % m.n;
			m.slot[i] = (uint32_t)(rnd(&s) % 100000);
			size_t before = x.cap;
			assert_int_equal(pending_index_put(&x, m.id[i], m.slot[i]), 0);
			assert_int_equal(x.cap, before);
		} else if (m.n) {
			size_t i = rnd(&s) % m.n;
			pending_index_del(&x, m.id[i]);
			m.id[i] = m.id[--m.n];
			m.slot[i] = m.slot[m.n];
			pending_index_del(&x, in_order ? next + 1000 : rnd(&s)); /* absent: nothing */
		}
		if (step % 97 == 0)
			agree(&x, &m, in_order ? next + 7 : rnd(&s));
	}
	agree(&x, &m, 0);
	assert_true(x.cap >= 64);
	pending_index_free(&x);
	uint32_t slot;
	assert_false(pending_index_get(&x, 1, &slot));
	assert_int_equal(pending_index_put(&x, 1, 5), 0);
	assert_true(pending_index_get(&x, 1, &slot));
	assert_int_equal(slot, 5);
	pending_index_free(&x);
}

static void test_ids_in_order(void **state)
{
	(void)state;
	run(true, 0x9e3779b97f4a7c15ull);
	run(true, 12345);
}

static void test_random_ids(void **state)
{
	(void)state;
	run(false, 0x2545f4914f6cdd1dull);
	run(false, 777);
}

/* Many ids that share a home place: runs wrap around the end, and a
 * deletion in the middle of one leaves the rest found. */
static void test_one_home(void **state)
{
	(void)state;
	struct pending_index x = { 0 };
	assert_int_equal(pending_index_put(&x, 42, 0), 0);
	const size_t cap = x.cap;
	/* Ids with the same home as 42 at this capacity, found by trying. */
	uint64_t same[12];
	size_t n = 0;
	uint32_t probe_slot;
	for (uint64_t id = 43; n < 12; id++) {
		struct pending_index one = { 0 };
		assert_int_equal(pending_index_put(&one, 42, 0), 0);
		assert_int_equal(pending_index_put(&one, id, 1), 0);
		/* Same home when id went to the place right after 42's. */
		size_t at42 = 0, atid = 0;
		for (size_t i = 0; i < one.cap; i++) {
			if (one.slots[i] == 1)
				at42 = i;
			if (one.slots[i] == 2)
				atid = i;
		}
		if (atid == ((at42 + 1) & (one.cap - 1)))
			same[n++] = id;
		pending_index_free(&one);
	}
	for (size_t i = 0; i < n; i++)
		assert_int_equal(pending_index_put(&x, same[i], (uint32_t)i + 1), 0);
	assert_int_equal(x.cap, cap);
	pending_index_del(&x, same[3]);
	pending_index_del(&x, 42);
	for (size_t i = 0; i < n; i++) {
		bool found = pending_index_get(&x, same[i], &probe_slot);
		assert_int_equal(found, i != 3);
		if (found)
			assert_int_equal(probe_slot, i + 1);
	}
	pending_index_free(&x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ids_in_order),
		cmocka_unit_test(test_random_ids),
		cmocka_unit_test(test_one_home),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
