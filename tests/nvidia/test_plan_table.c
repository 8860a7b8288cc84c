/* A provider's plan table (plan_table.c): warmed plans are never replaced
 * however many others come, no more are kept than the limit, the others
 * are replaced oldest first and only once the table is full; against a
 * model of the same rules on a random sequence of puts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "plan_table.h"

/* Plans are tokens 1, 2, ...: their addresses are never dereferenced. */
static void *tok(uintptr_t i)
{
	return (void *)i;
}

static unsigned count(const struct plan_table *t, void *p)
{
	unsigned n = 0;
	for (unsigned i = 0; i < PLAN_TABLE_SLOTS; i++)
		n += t->plan[i] == p;
	return n;
}

static void test_fills_before_replacing(void **state)
{
	(void)state;
	struct plan_table t;
	plan_table_init(&t, PLAN_TABLE_KEPT_MAX);
	for (uintptr_t i = 1; i <= PLAN_TABLE_SLOTS; i++)
		assert_null(plan_table_put(&t, tok(i), false));
	for (uintptr_t i = 1; i <= PLAN_TABLE_SLOTS; i++)
		assert_int_equal(count(&t, tok(i)), 1);
	/* Full: the oldest goes first, in the order they came. */
	for (uintptr_t i = 1; i <= PLAN_TABLE_SLOTS; i++)
		assert_ptr_equal(plan_table_put(&t, tok(1000 + i), false), tok(i));
}

static void test_warmed_stay(void **state)
{
	(void)state;
	struct plan_table t;
	plan_table_init(&t, PLAN_TABLE_KEPT_MAX);
	for (uintptr_t i = 1; i <= PLAN_TABLE_KEPT_MAX; i++)
		assert_null(plan_table_put(&t, tok(i), true));
	assert_int_equal(t.nkept, PLAN_TABLE_KEPT_MAX);
	/* Many times the table's size of others: the warmed all stay, the
	 * others replace each other oldest first. */
	const uintptr_t others = 10 * PLAN_TABLE_SLOTS;
	const uintptr_t room = PLAN_TABLE_SLOTS - PLAN_TABLE_KEPT_MAX;
	for (uintptr_t j = 0; j < others; j++) {
		void *old = plan_table_put(&t, tok(1000 + j), false);
		if (j < room)
			assert_null(old);
		else
			assert_ptr_equal(old, tok(1000 + j - room));
	}
	for (uintptr_t i = 1; i <= PLAN_TABLE_KEPT_MAX; i++)
		assert_int_equal(count(&t, tok(i)), 1);
	/* Past the limit a warmed plan is kept no more: it is replaced like
	 * any other. */
	assert_ptr_equal(plan_table_put(&t, tok(5000), true), tok(1000 + others - room));
	assert_int_equal(t.nkept, PLAN_TABLE_KEPT_MAX);
	for (uintptr_t j = 1; j < room; j++)
		plan_table_put(&t, tok(6000 + j), false);
	assert_int_equal(count(&t, tok(5000)), 1);
	assert_ptr_equal(plan_table_put(&t, tok(7000), false), tok(5000));
}

/* A table keeping none (a device's cache for GEMMs on no resident weight)
 * is a ring; a limit past the most is clamped. */
static void test_kept_max(void **state)
{
	(void)state;
	struct plan_table t;
	plan_table_init(&t, 0);
	for (uintptr_t i = 1; i <= PLAN_TABLE_SLOTS; i++)
		plan_table_put(&t, tok(i), true);
	assert_int_equal(t.nkept, 0);
	assert_ptr_equal(plan_table_put(&t, tok(500), true), tok(1));
	plan_table_init(&t, 10 * PLAN_TABLE_SLOTS);
	assert_int_equal(t.kept_max, PLAN_TABLE_KEPT_MAX);
}

/* Random puts, warmed or not, against a model: a list of the plans not
 * kept in the order they came, and the set of the kept. */
static void test_random_against_model(void **state)
{
	(void)state;
	srand(7);
	for (int round = 0; round < 50; round++) {
		const unsigned kmax = (unsigned)rand() % (PLAN_TABLE_KEPT_MAX + 1);
		struct plan_table t;
		plan_table_init(&t, kmax);
		uintptr_t fifo[4096];
		size_t head = 0, tail = 0, nkept = 0;
		for (uintptr_t i = 1; i <= 1000; i++) {
			const bool keep = rand() % 3 == 0;
			const bool kept = keep && nkept < kmax;
			void *old = plan_table_put(&t, tok(i), keep);
			const size_t held = nkept + (tail - head);
			if (held < PLAN_TABLE_SLOTS) {
				assert_null(old);
			} else {
				assert_true(tail > head);
				assert_ptr_equal(old, tok(fifo[head]));
				head++;
			}
			if (kept)
				nkept++;
			else
				fifo[tail++] = i;
			assert_int_equal(t.nkept, nkept);
			assert_true(tail < sizeof(fifo) / sizeof(fifo[0]));
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fills_before_replacing),
		cmocka_unit_test(test_warmed_stay),
		cmocka_unit_test(test_kept_max),
		cmocka_unit_test(test_random_against_model),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
