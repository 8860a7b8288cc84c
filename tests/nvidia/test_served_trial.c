/* A bucket's served trial (served_trial.c): which candidate each served
 * launch tries (blocks of runs + 1 in the measured order, every candidate
 * a CUDA device has), the untimed first of each block, and the order the
 * trial ends in (by median, ties to the measured order). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "served_trial.h"

static const char *const names[] = { "first", "second", "third", "fourth" };

/* Serves every launch the trial asks for, slot s taking times[s][i] for
 * its i-th timed launch (its untimed first takes 1 ms); returns the number
 * of launches and fills *end. */
static unsigned run_trial(struct served_trial *tr, unsigned measured, uint32_t runs,
			  uint64_t times[][8], struct served_trial_end *end, int *slots)
{
	unsigned launches = 0;
	unsigned timed[SERVED_TRIAL_MAX] = { 0 };
	bool warmed[SERVED_TRIAL_MAX] = { false };
	for (;;) {
		const int s = served_trial_slot(tr, measured, runs);
		if (s < 0)
			return launches;
		assert_true(s < SERVED_TRIAL_MAX);
		slots[launches++] = s;
		uint64_t ns = 1000000;
		if (warmed[s])
			ns = times[s][timed[s]++];
		warmed[s] = true;
		const bool over = served_trial_note(tr, measured, runs, s, ns, names[s], end);
		assert_int_equal(over, served_trial_slot(tr, measured, runs) < 0);
		if (over)
			return launches;
	}
}

static void test_no_trial(void **state)
{
	(void)state;
	struct served_trial tr;
	memset(&tr, 0, sizeof(tr));
	struct served_trial_end end;
	/* One candidate, or no runs: nothing to try, nothing counted. */
	assert_int_equal(served_trial_size(1, 4), 0);
	assert_int_equal(served_trial_size(5, 0), 0);
	assert_int_equal(served_trial_slot(&tr, 1, 4), -1);
	assert_int_equal(served_trial_slot(&tr, 3, 0), -1);
	assert_false(served_trial_note(&tr, 1, 4, 0, 5, "x", &end));
	/* A slot past the trial's size is not counted. */
	assert_false(served_trial_note(&tr, 2, 4, 2, 5, "x", &end));
	for (int s = 0; s < SERVED_TRIAL_MAX; s++)
		assert_false(tr.warmed[s]);
	assert_int_equal(served_trial_size(2, 4), 2);
	assert_int_equal(served_trial_size(3, 4), 3);
	assert_int_equal(served_trial_size(6, 4), SERVED_TRIAL_MAX);
}

/* More runs than a trial keeps count as SERVED_TRIAL_RUNS_MAX: no time
 * is written past its array (ASan would say), and the trial ends. */
static void test_runs_bounded(void **state)
{
	(void)state;
	struct served_trial tr;
	memset(&tr, 0, sizeof(tr));
	struct served_trial_end end;
	unsigned launches = 0;
	bool over = false;
	while (!over) {
		const int s = served_trial_slot(&tr, 2, 1000);
		assert_true(s == 0 || s == 1);
		over = served_trial_note(&tr, 2, 1000, s, (uint64_t)(s + 1), names[s], &end);
		launches++;
	}
	assert_int_equal(launches, 2 * (SERVED_TRIAL_RUNS_MAX + 1));
	assert_int_equal(end.slot[0], 0);
}

/* Three candidates, 4 runs: blocks of 5 in the measured order; the third
 * measured serves fastest and leads; the medians are the upper of an even
 * count, as the measure's. */
static void test_third_leads(void **state)
{
	(void)state;
	struct served_trial tr;
	memset(&tr, 0, sizeof(tr));
	uint64_t times[3][8] = {
		{ 20, 21, 19, 22 }, /* median (upper) 21 */
		{ 30, 10, 31, 29 }, /* 30 */
		{ 12, 11, 14, 13 }, /* 13 */
	};
	struct served_trial_end end;
	int slots[64];
	const unsigned n = run_trial(&tr, 3, 4, times, &end, slots);
	assert_int_equal(n, 15);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(slots[i], (int)(i / 5));
	assert_int_equal(end.n, 3);
	assert_int_equal(end.slot[0], 2);
	assert_int_equal(end.slot[1], 0);
	assert_int_equal(end.slot[2], 1);
	assert_int_equal(end.median_ns[0], 13);
	assert_int_equal(end.median_ns[1], 21);
	assert_int_equal(end.median_ns[2], 30);
	assert_string_equal(tr.variant[end.slot[0]], "third");
	/* Over: nothing more is tried or counted. */
	assert_int_equal(served_trial_slot(&tr, 3, 4), -1);
	assert_false(served_trial_note(&tr, 3, 4, 0, 1, "first", &end));
}

/* Four candidates (every provider of a CUDA device on a 2:4 weight), 3
 * runs: the one measured slowest serves fastest and leads.  (With a trial
 * of the three fastest it was never tried: on an H100 at a 4096x4096 2:4
 * weight, N = 16, our wgmma kernel measured fourth and a library it
 * serves faster than took the lead.) */
static void test_fourth_leads(void **state)
{
	(void)state;
	struct served_trial tr;
	memset(&tr, 0, sizeof(tr));
	uint64_t times[4][8] = { { 20, 20, 20 }, { 21, 21, 21 }, { 22, 22, 22 }, { 15, 16, 14 } };
	struct served_trial_end end;
	int slots[64];
	assert_int_equal(served_trial_size(4, 3), 4);
	const unsigned n = run_trial(&tr, 4, 3, times, &end, slots);
	assert_int_equal(n, 16);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(slots[i], (int)(i / 4));
	assert_int_equal(end.n, 4);
	assert_int_equal(end.slot[0], 3);
	assert_int_equal(end.median_ns[0], 15);
	assert_int_equal(end.slot[1], 0);
	assert_int_equal(end.slot[end.n - 1], 2);
	assert_string_equal(tr.variant[end.slot[0]], "fourth");
	/* More measured than a trial serves (test_third_leads ran 5 with a
	 * trial of three): the first SERVED_TRIAL_MAX, the same blocks and
	 * end, no slot past them. */
	memset(&tr, 0, sizeof(tr));
	assert_int_equal(run_trial(&tr, 6, 3, times, &end, slots), 16);
	for (unsigned i = 0; i < 16; i++)
		assert_int_equal(slots[i], (int)(i / 4));
	assert_int_equal(end.n, 4);
	assert_int_equal(end.slot[0], 3);
}

/* Two candidates, 3 runs (odd: the middle); equal medians keep the
 * measured order. */
static void test_two_and_ties(void **state)
{
	(void)state;
	struct served_trial tr;
	memset(&tr, 0, sizeof(tr));
	uint64_t times[3][8] = { { 9, 7, 8 }, { 8, 100, 1 } };
	struct served_trial_end end;
	int slots[64];
	const unsigned n = run_trial(&tr, 2, 3, times, &end, slots);
	assert_int_equal(n, 8);
	assert_int_equal(end.n, 2);
	assert_int_equal(end.slot[0], 0);
	assert_int_equal(end.slot[1], 1);
	assert_int_equal(end.median_ns[0], 8);
	assert_int_equal(end.median_ns[1], 8);
}

/* The untimed first launch of each block is not counted, however slow. */
static void test_first_untimed(void **state)
{
	(void)state;
	struct served_trial tr;
	memset(&tr, 0, sizeof(tr));
	struct served_trial_end end;
	assert_false(served_trial_note(&tr, 2, 1, 0, 999999, "first", &end));
	assert_int_equal(tr.taken[0], 0);
	assert_int_equal(served_trial_slot(&tr, 2, 1), 0);
	assert_false(served_trial_note(&tr, 2, 1, 0, 50, "first", &end));
	assert_int_equal(served_trial_slot(&tr, 2, 1), 1);
	assert_false(served_trial_note(&tr, 2, 1, 1, 1, "second", &end));
	assert_true(served_trial_note(&tr, 2, 1, 1, 40, "second", &end));
	assert_int_equal(end.slot[0], 1);
	assert_int_equal(end.median_ns[0], 40);
	assert_int_equal(end.median_ns[1], 50);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_trial),
		cmocka_unit_test(test_runs_bounded),
		cmocka_unit_test(test_third_leads),
		cmocka_unit_test(test_fourth_leads),
		cmocka_unit_test(test_two_and_ties),
		cmocka_unit_test(test_first_untimed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
