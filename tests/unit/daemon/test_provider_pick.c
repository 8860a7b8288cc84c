/* providers_pick, the order in which both GPU backends ask their providers
 * for a weight or a GEMM: the pinned provider first, then the table's
 * order, an excluded one never asked, one that does not run on the device
 * passed over in silence, and the first refusal's code and reason kept
 * for the caller's error when no provider takes the shape. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "providers.h"

#define N 4

/* A table of N providers, each answering as told, and the order asked. */
struct table {
	int answer[N]; /* 0 takes, 1 not on this device, < 0 refuses */
	size_t asked[2 * N];
	size_t nasked;
};

static int ask(size_t i, void *ctx, char *err, size_t errlen)
{
	struct table *t = ctx;
	assert_true(i < N);
	assert_true(t->nasked < 2 * N);
	t->asked[t->nasked++] = i;
	if (t->answer[i] < 0)
		snprintf(err, errlen, "provider %zu refuses", i);
	return t->answer[i];
}

static size_t run(const struct provider_policy *p, struct table *t, int *rc, char *err,
		  size_t errlen)
{
	t->nasked = 0;
	snprintf(err, errlen, "no provider");
	return providers_pick(p, N, ask, t, rc, err, errlen);
}

static void test_table_order(void **state)
{
	(void)state;
	struct table t = { .answer = { -ENOTSUP, 1, 0, 0 } };
	const struct provider_policy p = { .exclude = 0, .prefer = -1 };
	char err[64];
	int rc = 1;
	assert_int_equal(run(&p, &t, &rc, err, sizeof(err)), 2);
	assert_int_equal(rc, 0);
	assert_int_equal(t.nasked, 3);
	assert_int_equal(t.asked[0], 0);
	assert_int_equal(t.asked[1], 1);
	assert_int_equal(t.asked[2], 2);
	/* No policy at all is the table's order too. */
	assert_int_equal(run(NULL, &t, &rc, err, sizeof(err)), 2);
	assert_int_equal(rc, 0);
}

static void test_pinned_first_and_asked_once(void **state)
{
	(void)state;
	struct table t = { .answer = { 0, 0, -EINVAL, 0 } };
	const struct provider_policy p = { .exclude = 0, .prefer = 2 };
	char err[64];
	int rc = 1;
	/* The pin refuses: the table's order follows, without the pin. */
	assert_int_equal(run(&p, &t, &rc, err, sizeof(err)), 0);
	assert_int_equal(rc, 0);
	assert_int_equal(t.nasked, 2);
	assert_int_equal(t.asked[0], 2);
	assert_int_equal(t.asked[1], 0);
	/* Everyone refuses: each asked once, the pin first. */
	struct table all = { .answer = { -ENOTSUP, -E2BIG, -EINVAL, -ENOSPC } };
	assert_int_equal(run(&p, &all, &rc, err, sizeof(err)), N);
	assert_int_equal(all.nasked, N);
	const size_t want[N] = { 2, 0, 1, 3 };
	for (size_t k = 0; k < N; k++)
		assert_int_equal(all.asked[k], want[k]);
	assert_int_equal(rc, -EINVAL);
	assert_string_equal(err, "provider 2 refuses");
	/* The pin takes it: nobody else is asked. */
	struct table pin = { .answer = { 0, 0, 0, 0 } };
	assert_int_equal(run(&p, &pin, &rc, err, sizeof(err)), 2);
	assert_int_equal(pin.nasked, 1);
}

static void test_excluded_never_asked(void **state)
{
	(void)state;
	struct table t = { .answer = { 0, -ENOTSUP, 0, 0 } };
	const struct provider_policy p = { .exclude = 1u << 0 | 1u << 2, .prefer = -1 };
	char err[64];
	int rc = 1;
	assert_int_equal(run(&p, &t, &rc, err, sizeof(err)), 3);
	assert_int_equal(rc, 0);
	assert_int_equal(t.nasked, 2);
	assert_int_equal(t.asked[0], 1);
	assert_int_equal(t.asked[1], 3);
}

static void test_first_refusal_kept(void **state)
{
	(void)state;
	struct table t = { .answer = { 1, -E2BIG, 1, -EINVAL } };
	const struct provider_policy p = { .exclude = 0, .prefer = -1 };
	char err[64];
	int rc = 0;
	assert_int_equal(run(&p, &t, &rc, err, sizeof(err)), N);
	assert_int_equal(rc, -E2BIG);
	assert_string_equal(err, "provider 1 refuses");
	assert_int_equal(t.nasked, N);
}

static void test_none_runs_here(void **state)
{
	(void)state;
	/* Nobody refused: not supported, and the caller's sentence stands. */
	struct table t = { .answer = { 1, 1, 1, 1 } };
	const struct provider_policy p = { .exclude = 1u << 1, .prefer = 3 };
	char err[64];
	int rc = 0;
	assert_int_equal(run(&p, &t, &rc, err, sizeof(err)), N);
	assert_int_equal(rc, -ENOTSUP);
	assert_string_equal(err, "no provider");
	assert_int_equal(t.nasked, 3);
	assert_int_equal(t.asked[0], 3);
	/* A pin past the table (a smaller family's table) is no pin. */
	struct table u = { .answer = { -ENOTSUP, 0, 0, 0 } };
	const struct provider_policy far = { .exclude = 0, .prefer = N + 3 };
	assert_int_equal(run(&far, &u, &rc, err, sizeof(err)), 1);
	assert_int_equal(u.asked[0], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_order),
		cmocka_unit_test(test_pinned_first_and_asked_once),
		cmocka_unit_test(test_excluded_never_asked),
		cmocka_unit_test(test_first_refusal_kept),
		cmocka_unit_test(test_none_runs_here),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
