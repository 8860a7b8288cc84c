/* Peer address keys: IPv4 as itself, an IPv4-mapped IPv6 peer as the same
 * IPv4 key, IPv6 by its /64 but link-local by its whole address and
 * interface, and the words a refusal names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/un.h>

#include "peer_addr.h"

static struct sockaddr_in v4(const char *s, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	assert_int_equal(inet_pton(AF_INET, s, &a.sin_addr), 1);
	return a;
}

static struct sockaddr_in6 v6(const char *s, int port)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port) };
	assert_int_equal(inet_pton(AF_INET6, s, &a.sin6_addr), 1);
	return a;
}

/* The key of an IPv4 or IPv6 (scope: the interface's index) peer. */
static struct peer_addr key4(const char *s, int port)
{
	struct sockaddr_in a = v4(s, port);
	struct peer_addr k;
	assert_int_equal(peer_addr_key((const struct sockaddr *)&a, sizeof(a), &k), 0);
	return k;
}

static struct peer_addr key6(const char *s, int port, uint32_t scope)
{
	struct sockaddr_in6 a = v6(s, port);
	a.sin6_scope_id = scope;
	struct peer_addr k;
	assert_int_equal(peer_addr_key((const struct sockaddr *)&a, sizeof(a), &k), 0);
	return k;
}

/* k's words, into buf (PEER_ADDR_STRLEN bytes). */
static const char *words(struct peer_addr k, char *buf)
{
	peer_addr_format(&k, buf, PEER_ADDR_STRLEN);
	return buf;
}

static void test_ipv4(void **state)
{
	(void)state;
	const struct peer_addr ka = key4("127.0.0.1", 4000), kb = key4("127.0.0.1", 4001),
			       kc = key4("127.0.0.2", 4000);
	char s[PEER_ADDR_STRLEN];
	/* The port is not part of the peer. */
	assert_true(peer_addr_equal(&ka, &kb));
	assert_false(peer_addr_equal(&ka, &kc));
	assert_string_equal(words(kc, s), "127.0.0.2");
	/* The same peer through a dual-stack socket is the same key. */
	const struct peer_addr km = key6("::ffff:127.0.0.2", 9, 0);
	assert_true(peer_addr_equal(&km, &kc));
	assert_string_equal(words(km, s), "127.0.0.2");
}

static void test_ipv6_by_prefix(void **state)
{
	(void)state;
	const struct peer_addr ka = key6("2001:db8:1:2::7", 1, 0), kb = key6("2001:db8:1:2:ffff:1:2:3", 1, 0),
			       kc = key6("2001:db8:1:3::7", 1, 0);
	char s[PEER_ADDR_STRLEN];
	/* One /64, one peer: its host part is the host's to choose. */
	assert_true(peer_addr_equal(&ka, &kb));
	assert_false(peer_addr_equal(&ka, &kc));
	assert_string_equal(words(ka, s), "2001:db8:1:2::/64");
	assert_string_equal(words(key6("::1", 1, 0), s), "::/64");
	/* Long enough for the longest prefix. */
	const struct peer_addr kw = key6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1, 0);
	assert_string_equal(words(kw, s), "ffff:ffff:ffff:ffff::/64");
	/* A short buffer is cut, still terminated. */
	char t[5];
	peer_addr_format(&kw, t, sizeof(t));
	assert_string_equal(t, "ffff");
}

/* Link-local peers share the prefix fe80::/64 on every link: each is its
 * whole address on its interface, and the refusal names both. */
static void test_ipv6_link_local(void **state)
{
	(void)state;
	const struct peer_addr ka = key6("fe80::7", 1, 2), kb = key6("fe80::8", 1, 2), kc = key6("fe80::7", 2, 3),
			       kd = key6("febf::7", 1, 2);
	char s[PEER_ADDR_STRLEN];
	/* Two hosts of one link, one host's address on two links. */
	assert_false(peer_addr_equal(&ka, &kb));
	assert_false(peer_addr_equal(&ka, &kc));
	/* The same host again (another port) is the same peer. */
	const struct peer_addr ka2 = key6("fe80::7", 9, 2);
	assert_true(peer_addr_equal(&ka, &ka2));
	assert_string_equal(words(ka, s), "fe80::7%2");
	assert_string_equal(words(kc, s), "fe80::7%3");
	/* The top of fe80::/10 is link-local too, another address. */
	assert_false(peer_addr_equal(&ka, &kd));
	assert_string_equal(words(kd, s), "febf::7%2");
	/* fec0:: (site-local, deprecated) is no link-local: by its /64. */
	const struct peer_addr ke = key6("fec0::7", 1, 0), kf = key6("fec0::8", 1, 0);
	assert_true(peer_addr_equal(&ke, &kf));
	/* The longest form fits. */
	assert_string_equal(words(key6("fe80::ffff:ffff:ffff:ffff", 1, UINT32_MAX), s),
			    "fe80::ffff:ffff:ffff:ffff%4294967295");
}

static void test_refused(void **state)
{
	(void)state;
	struct peer_addr k;
	struct sockaddr_un u = { .sun_family = AF_UNIX };
	assert_int_equal(peer_addr_key((const struct sockaddr *)&u, sizeof(u), &k), -EAFNOSUPPORT);
	struct sockaddr_in a = v4("10.0.0.1", 1);
	assert_int_equal(peer_addr_key((const struct sockaddr *)&a, sizeof(a) - 1, &k), -EINVAL);
	struct sockaddr_in6 b = v6("2001:db8::1", 1);
	assert_int_equal(peer_addr_key((const struct sockaddr *)&b, sizeof(struct sockaddr_in), &k), -EINVAL);
	assert_int_equal(peer_addr_key(NULL, 0, &k), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ipv4),
		cmocka_unit_test(test_ipv6_by_prefix),
		cmocka_unit_test(test_ipv6_link_local),
		cmocka_unit_test(test_refused),
	};
	return cmocka_run_group_tests_name("peer_addr", tests, NULL, NULL);
}
