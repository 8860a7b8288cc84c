/* Which network peer a TCP connection is, for limits that count
 * connections per peer (limits.max_connections_per_address): a 16-byte
 * key, an IPv4 peer as its IPv4-mapped IPv6 address, an IPv6 peer as its
 * /64 prefix: one host may take any address of its /64 (privacy
 * addresses), so counting whole addresses would not bound it; the cost is
 * that the hosts of one IPv6 subnet (a LAN's /64) share one count.  A
 * link-local peer (fe80::/10) is its whole address on its interface: all
 * links share the prefix fe80::/64, so a /64 key would make every
 * link-local host one peer.  Pure: no sockets are touched. */
#ifndef MFMAD_PEER_ADDR_H
#define MFMAD_PEER_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct peer_addr {
	uint8_t b[16];
};

/* The key of the address in sa (len bytes of it): 0, or -EAFNOSUPPORT
 * for a family other than IPv4 and IPv6, -EINVAL for a short one. */
int peer_addr_key(const struct sockaddr *sa, socklen_t len, struct peer_addr *key);
bool peer_addr_equal(const struct peer_addr *a, const struct peer_addr *b);
/* "192.0.2.7", "2001:db8:1:2::/64" for an IPv6 key, "fe80::7%2" for a
 * link-local one (the interface's index after the %): the words a log
 * line and an error use (out of at least PEER_ADDR_STRLEN bytes). */
#define PEER_ADDR_STRLEN 48
void peer_addr_format(const struct peer_addr *key, char *out, size_t outlen);

#endif
