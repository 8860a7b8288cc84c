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
	assert_false(ep.tls);
}

/* tls:HOST:PORT is TCP with TLS, and is written back the same way. */
static void test_tls(void **state)
{
	(void)state;
	struct endpoint ep;
	char err[256], out[300];
	assert_int_equal(endpoint_parse("tls:mfmad.example:7471", &ep, err, sizeof(err)), 0);
	assert_int_equal(ep.kind, ENDPOINT_TCP);
	assert_true(ep.tls);
	assert_string_equal(ep.host, "mfmad.example");
	assert_int_equal(ep.port, 7471);
	assert_int_equal(endpoint_format(&ep, out, sizeof(out)), 0);
	assert_string_equal(out, "tls:mfmad.example:7471");
	assert_int_equal(endpoint_parse("tls:[::1]:9", &ep, err, sizeof(err)), 0);
	assert_int_equal(endpoint_format(&ep, out, sizeof(out)), 0);
	assert_string_equal(out, "tls:[::1]:9");
	assert_int_equal(endpoint_parse("tls:host", &ep, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "expected tls:HOST:PORT"));
	struct endpoint eps[4];
	size_t n;
	assert_int_equal(endpoint_list_parse("tls:a:1,tcp:b:2", eps, 4, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 2);
	assert_true(eps[0].tls);
	assert_false(eps[1].tls);
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

static void test_list(void **state)
{
	(void)state;
	struct endpoint eps[4];
	size_t n;
	char err[256], out[400];
	assert_int_equal(endpoint_list_parse("tcp:a:7070,tcp:[::1]:7071,unix:/run/m.sock,/x.sock",
					     eps, 4, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 4);
	assert_int_equal(eps[0].kind, ENDPOINT_TCP);
	assert_string_equal(eps[0].host, "a");
	assert_int_equal(eps[0].port, 7070);
	assert_string_equal(eps[1].host, "::1");
	assert_int_equal(eps[2].kind, ENDPOINT_UNIX);
	assert_string_equal(eps[3].path, "/x.sock");
	assert_int_equal(endpoint_format(&eps[1], out, sizeof(out)), 0);
	assert_string_equal(out, "tcp:[::1]:7071");
	assert_int_equal(endpoint_format(&eps[2], out, sizeof(out)), 0);
	assert_string_equal(out, "unix:/run/m.sock");
	assert_int_equal(endpoint_format(&eps[0], out, 4), -ENAMETOOLONG);
	/* A single endpoint is a list of one. */
	assert_int_equal(endpoint_list_parse("tcp:h:1", eps, 4, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 1);
}

static void test_list_errors(void **state)
{
	(void)state;
	struct endpoint eps[2];
	size_t n;
	char err[256];
	assert_int_equal(endpoint_list_parse("tcp:a:1,,tcp:b:2", eps, 2, &n, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "entry 2 is empty"));
	assert_int_equal(endpoint_list_parse("tcp:a:1,", eps, 2, &n, err, sizeof(err)), -EINVAL);
	assert_int_equal(endpoint_list_parse("tcp:a:1,tcp:b:2,tcp:c:3", eps, 2, &n, err,
					     sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "more than 2"));
	assert_int_equal(endpoint_list_parse("tcp:a:1,tcp:b:0", eps, 2, &n, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "tcp:b:0"));
	assert_int_equal(endpoint_list_parse("", eps, 2, &n, err, sizeof(err)), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forms),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_tls),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_list_errors),
		cmocka_unit_test(test_default_path),
		cmocka_unit_test(test_default_root),
		cmocka_unit_test(test_default_user),
		cmocka_unit_test(test_default_no_xdg),
		cmocka_unit_test(test_default_too_long),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
