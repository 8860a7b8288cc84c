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

static void key_of(const void *sa, socklen_t len, struct peer_addr *k)
{
	assert_int_equal(peer_addr_key(sa, len, k), 0);
}

static void test_ipv4(void **state)
{
	(void)state;
	struct sockaddr_in a = v4("127.0.0.1", 4000), b = v4("127.0.0.1", 4001), c = v4("127.0.0.2", 4000);
	struct peer_addr ka, kb, kc;
	key_of(&a, sizeof(a), &ka);
	key_of(&b, sizeof(b), &kb);
	key_of(&c, sizeof(c), &kc);
	/* The port is not part of the peer. */
	assert_true(peer_addr_equal(&ka, &kb));
	assert_false(peer_addr_equal(&ka, &kc));
	char s[PEER_ADDR_STRLEN];
	peer_addr_format(&kc, s, sizeof(s));
	assert_string_equal(s, "127.0.0.2");
	/* The same peer through a dual-stack socket is the same key. */
	struct sockaddr_in6 m = v6("::ffff:127.0.0.2", 9);
	struct peer_addr km;
	key_of(&m, sizeof(m), &km);
	assert_true(peer_addr_equal(&km, &kc));
	peer_addr_format(&km, s, sizeof(s));
	assert_string_equal(s, "127.0.0.2");
}

static void test_ipv6_by_prefix(void **state)
{
	(void)state;
	struct sockaddr_in6 a = v6("2001:db8:1:2::7", 1), b = v6("2001:db8:1:2:ffff:1:2:3", 1),
			    c = v6("2001:db8:1:3::7", 1), l = v6("::1", 1);
	struct peer_addr ka, kb, kc, kl;
	key_of(&a, sizeof(a), &ka);
	key_of(&b, sizeof(b), &kb);
	key_of(&c, sizeof(c), &kc);
	key_of(&l, sizeof(l), &kl);
	/* One /64, one peer: its host part is the host's to choose. */
	assert_true(peer_addr_equal(&ka, &kb));
	assert_false(peer_addr_equal(&ka, &kc));
	char s[PEER_ADDR_STRLEN];
	peer_addr_format(&ka, s, sizeof(s));
	assert_string_equal(s, "2001:db8:1:2::/64");
	peer_addr_format(&kl, s, sizeof(s));
	assert_string_equal(s, "::/64");
	/* Long enough for the longest prefix. */
	struct sockaddr_in6 w = v6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1);
	struct peer_addr kw;
	key_of(&w, sizeof(w), &kw);
	peer_addr_format(&kw, s, sizeof(s));
	assert_string_equal(s, "ffff:ffff:ffff:ffff::/64");
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
	struct sockaddr_in6 a = v6("fe80::7", 1), b = v6("fe80::8", 1), c = v6("fe80::7", 2),
			    d = v6("febf::7", 1);
	a.sin6_scope_id = 2;
	b.sin6_scope_id = 2;
	c.sin6_scope_id = 3;
	d.sin6_scope_id = 2;
	struct peer_addr ka, kb, kc, kd, ka2;
	key_of(&a, sizeof(a), &ka);
	key_of(&b, sizeof(b), &kb);
	key_of(&c, sizeof(c), &kc);
	key_of(&d, sizeof(d), &kd);
	/* Two hosts of one link, one host's address on two links. */
	assert_false(peer_addr_equal(&ka, &kb));
	assert_false(peer_addr_equal(&ka, &kc));
	/* The same host again (another port) is the same peer. */
	struct sockaddr_in6 a2 = v6("fe80::7", 9);
	a2.sin6_scope_id = 2;
	key_of(&a2, sizeof(a2), &ka2);
	assert_true(peer_addr_equal(&ka, &ka2));
	char s[PEER_ADDR_STRLEN];
	peer_addr_format(&ka, s, sizeof(s));
	assert_string_equal(s, "fe80::7%2");
	peer_addr_format(&kc, s, sizeof(s));
	assert_string_equal(s, "fe80::7%3");
	/* The top of fe80::/10 is link-local too, another address. */
	assert_false(peer_addr_equal(&ka, &kd));
	peer_addr_format(&kd, s, sizeof(s));
	assert_string_equal(s, "febf::7%2");
	/* fec0:: (site-local, deprecated) is no link-local: by its /64. */
	struct sockaddr_in6 e = v6("fec0::7", 1), f = v6("fec0::8", 1);
	struct peer_addr ke, kf;
	key_of(&e, sizeof(e), &ke);
	key_of(&f, sizeof(f), &kf);
	assert_true(peer_addr_equal(&ke, &kf));
	/* The longest form fits. */
	struct sockaddr_in6 w = v6("fe80::ffff:ffff:ffff:ffff", 1);
	w.sin6_scope_id = UINT32_MAX;
	struct peer_addr kw;
	key_of(&w, sizeof(w), &kw);
	peer_addr_format(&kw, s, sizeof(s));
	assert_string_equal(s, "fe80::ffff:ffff:ffff:ffff%4294967295");
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
