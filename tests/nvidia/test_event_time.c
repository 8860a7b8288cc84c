/* The one conversion of GPU event times (daemon/backend/backend_time.h),
 * used by the CUDA and the HIP device layers.  The CUDA backend used to
 * convert cuEventElapsedTime's float to uint64_t directly: a negative
 * time, which the driver can report, is undefined behaviour there (on
 * x86-64 it read as about 1.8e19 ns).  Host-only: runs everywhere. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backend_time.h"

static void test_ordinary_times(void **state)
{
	(void)state;
	assert_int_equal(backend_event_ns(0.0f), 0);
	assert_int_equal(backend_event_ns(1.0f), 1000000);
	assert_int_equal(backend_event_ns(0.5f), 500000);
	/* A float millisecond is not exact: within a nanosecond. */
	uint64_t ns = backend_event_ns(0.001f);
	assert_true(ns >= 999 && ns <= 1000);
}

static void test_negative_and_nan_read_zero(void **state)
{
	(void)state;
	assert_int_equal(backend_event_ns(-0.001f), 0);
	assert_int_equal(backend_event_ns(-1.0f), 0);
	assert_int_equal(backend_event_ns(-INFINITY), 0);
	assert_int_equal(backend_event_ns(NAN), 0);
	assert_int_equal(backend_event_ns(-0.0f), 0);
}

static void test_huge_saturates(void **state)
{
	(void)state;
	assert_true(backend_event_ns(INFINITY) == UINT64_MAX);
	assert_true(backend_event_ns(3.0e38f) == UINT64_MAX);
	/* 2^64 ns is about 1.8e13 ms; 2^43 ms (exact in a float) is below. */
	assert_true(backend_event_ns(8796093022208.0f) == UINT64_C(8796093022208) * 1000000u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ordinary_times),
		cmocka_unit_test(test_negative_and_nan_read_zero),
		cmocka_unit_test(test_huge_saturates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
