/* Endpoints as users write them: "unix:/run/mfmad/mfmad.sock",
 * "tcp:127.0.0.1:7470", "tcp:[::1]:7470", or a bare path (Unix socket).
 * Shared by the daemon (listeners) and the client library, so both agree
 * on the default socket. */
#ifndef MFMA_ENDPOINT_H
#define MFMA_ENDPOINT_H

#include <stddef.h>

#define MFMA_DEFAULT_TCP_PORT 7470

enum endpoint_kind { ENDPOINT_UNIX, ENDPOINT_TCP };

struct endpoint {
	enum endpoint_kind kind;
	char path[108]; /* ENDPOINT_UNIX: sun_path */
	char host[256]; /* ENDPOINT_TCP, without brackets */
	int port;
};

/* 0, or -EINVAL with a sentence in err naming what was wrong. */
int endpoint_parse(const char *s, struct endpoint *ep, char *err, size_t errlen);

/* The default Unix socket: /run/mfmad/mfmad.sock for root (and for the
 * systemd service), $XDG_RUNTIME_DIR/mfmad.sock for other users, else
 * /tmp/mfmad-UID.sock.  Returns 0 or -ENAMETOOLONG. */
int endpoint_default_path(char *buf, size_t len);

#endif
