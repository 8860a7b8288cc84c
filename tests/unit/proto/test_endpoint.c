#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "endpoint.h"

static void test_forms(void **state)
{
	(void)state;
	struct endpoint ep;
	char err[256];
	assert_int_equal(endpoint_parse("unix:/run/x.sock", &ep, err, sizeof(err)), 0);
	assert_int_equal(ep.kind, ENDPOINT_UNIX);
	assert_string_equal(ep.path, "/run/x.sock");
	assert_int_equal(endpoint_parse("/tmp/y.sock", &ep, err, sizeof(err)), 0);
	assert_string_equal(ep.path, "/tmp/y.sock");
	assert_int_equal(endpoint_parse("tcp:127.0.0.1:7470", &ep, err, sizeof(err)), 0);
	assert_int_equal(ep.kind, ENDPOINT_TCP);
	assert_string_equal(ep.host, "127.0.0.1");
	assert_int_equal(ep.port, 7470);
	assert_int_equal(endpoint_parse("tcp:[::1]:80", &ep, err, sizeof(err)), 0);
	assert_string_equal(ep.host, "::1");
	assert_int_equal(ep.port, 80);
}

static void test_errors(void **state)
{
	(void)state;
	struct endpoint ep;
	char err[256];
	const char *bad[] = { "", "unix:", "tcp:host", "tcp:host:0", "tcp:host:70000", "tcp::80",
			      "tcp:[::1]80", "tcp:h:12x" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(endpoint_parse(bad[i], &ep, err, sizeof(err)), -EINVAL);
		assert_true(strlen(err) > 0);
	}
	char longp[200];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = '\0';
	assert_int_equal(endpoint_parse(longp, &ep, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "107"));
}

static void test_default_path(void **state)
{
	(void)state;
	char buf[108];
	assert_int_equal(endpoint_default_path(buf, sizeof(buf)), 0);
	assert_true(strstr(buf, "mfmad") != NULL);
	assert_int_equal(endpoint_default_path(buf, 4), -ENAMETOOLONG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forms),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_default_path),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
