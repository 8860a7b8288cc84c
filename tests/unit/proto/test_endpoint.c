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
	assert_true(strstr(buf, "mfmad.sock") != NULL);
	assert_int_equal(endpoint_default_path(buf, 4), -ENAMETOOLONG);
}

/* Root (and the service) use the system socket only. */
static void test_default_root(void **state)
{
	(void)state;
	char buf[108];
	assert_int_equal(endpoint_default_path_for(0, 0, "/run/user/0", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "/run/mfmad/mfmad.sock");
	assert_int_equal(endpoint_default_path_for(1, 0, "/run/user/0", buf, sizeof(buf)), -ENOENT);
}

/* A user with a runtime directory: a daemon of their own first, then the
 * system socket. */
static void test_default_user(void **state)
{
	(void)state;
	char buf[108];
	assert_int_equal(endpoint_default_path_for(0, 1000, "/run/user/1000", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "/run/user/1000/mfmad.sock");
	assert_int_equal(endpoint_default_path_for(1, 1000, "/run/user/1000", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "/run/mfmad/mfmad.sock");
	assert_int_equal(endpoint_default_path_for(2, 1000, "/run/user/1000", buf, sizeof(buf)),
			 -ENOENT);
}

/* No (or a relative, hence invalid) XDG_RUNTIME_DIR: the system socket,
 * never a guessable name in /tmp. */
static void test_default_no_xdg(void **state)
{
	(void)state;
	const char *xdgs[] = { NULL, "", "run/user/1000" };
	char buf[108];
	for (size_t i = 0; i < sizeof(xdgs) / sizeof(xdgs[0]); i++) {
		assert_int_equal(endpoint_default_path_for(0, 65534, xdgs[i], buf, sizeof(buf)), 0);
		assert_string_equal(buf, "/run/mfmad/mfmad.sock");
		assert_int_equal(endpoint_default_path_for(1, 65534, xdgs[i], buf, sizeof(buf)),
				 -ENOENT);
	}
}

static void test_default_too_long(void **state)
{
	(void)state;
	char xdg[120], buf[108];
	memset(xdg, 'x', sizeof(xdg) - 1);
	xdg[0] = '/';
	xdg[sizeof(xdg) - 1] = '\0';
	assert_int_equal(endpoint_default_path_for(0, 1000, xdg, buf, sizeof(buf)), -ENAMETOOLONG);
	/* The system socket is still offered after a per-user one too long. */
	assert_int_equal(endpoint_default_path_for(1, 1000, xdg, buf, sizeof(buf)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forms),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_default_path),
		cmocka_unit_test(test_default_root),
		cmocka_unit_test(test_default_user),
		cmocka_unit_test(test_default_no_xdg),
		cmocka_unit_test(test_default_too_long),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
