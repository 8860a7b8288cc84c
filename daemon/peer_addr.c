/* Peer address keys (see peer_addr.h). */
#include "peer_addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

static const uint8_t v4_mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

/* fe80::/10, whose bits 10-63 are zero: the key keeps the interface in
 * bytes 4-7, beside the rest of the address. */
static bool link_local(const uint8_t *a)
{
	return a[0] == 0xfe && (a[1] & 0xc0) == 0x80;
}

int peer_addr_key(const struct sockaddr *sa, socklen_t len, struct peer_addr *key)
{
	memset(key, 0, sizeof(*key));
	if (!sa || len < (socklen_t)sizeof(sa_family_t))
		return -EINVAL;
	if (sa->sa_family == AF_INET) {
		if (len < (socklen_t)sizeof(struct sockaddr_in))
			return -EINVAL;
		memcpy(key->b, v4_mapped, sizeof(v4_mapped));
		memcpy(key->b + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		if (len < (socklen_t)sizeof(struct sockaddr_in6))
			return -EINVAL;
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		const uint8_t *a = s6->sin6_addr.s6_addr;
		memcpy(key->b, a, 16);
		/* An IPv4 peer on a dual-stack socket is that IPv4 address; a
		 * link-local one its whole address on its interface (every
		 * link's hosts share the prefix fe80::/64); any other its /64. */
		if (link_local(a)) {
			const uint32_t scope = s6->sin6_scope_id;
			memcpy(key->b + 4, &scope, sizeof(scope));
		} else if (memcmp(a, v4_mapped, sizeof(v4_mapped)) != 0) {
			memset(key->b + 8, 0, 8);
		}
		return 0;
	}
	return -EAFNOSUPPORT;
}

bool peer_addr_equal(const struct peer_addr *a, const struct peer_addr *b)
{
	return memcmp(a->b, b->b, sizeof(a->b)) == 0;
}

void peer_addr_format(const struct peer_addr *key, char *out, size_t outlen)
{
	char s[INET6_ADDRSTRLEN] = "?";
	if (outlen == 0)
		return;
	if (memcmp(key->b, v4_mapped, sizeof(v4_mapped)) == 0) {
		inet_ntop(AF_INET, key->b + 12, s, sizeof(s));
		snprintf(out, outlen, "%s", s);
		return;
	}
	if (link_local(key->b)) {
		uint8_t a[16];
		uint32_t scope;
		memcpy(a, key->b, sizeof(a));
		memcpy(&scope, a + 4, sizeof(scope));
		memset(a + 4, 0, 4);
		inet_ntop(AF_INET6, a, s, sizeof(s));
		snprintf(out, outlen, "%s%%%" PRIu32, s, scope);
		return;
	}
	inet_ntop(AF_INET6, key->b, s, sizeof(s));
	snprintf(out, outlen, "%s/64", s);
}
