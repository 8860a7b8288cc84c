/* Endpoints as users write them: "unix:/run/mfmad/mfmad.sock",
 * "tcp:127.0.0.1:7470", "tcp:[::1]:7470", "tls:host:7470" (TCP with TLS,
 * the server's certificate checked against host), or a bare path (Unix
 * socket).
 * Shared by the daemon (listeners) and the client library, so both agree
 * on the default socket. */
#ifndef MFMA_ENDPOINT_H
#define MFMA_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>

#define MFMA_DEFAULT_TCP_PORT 7470

enum endpoint_kind { ENDPOINT_UNIX, ENDPOINT_TCP };

struct endpoint {
	enum endpoint_kind kind;
	char path[108]; /* ENDPOINT_UNIX: sun_path */
	char host[256]; /* ENDPOINT_TCP, without brackets */
	int port;
	bool tls;       /* ENDPOINT_TCP written tls:HOST:PORT */
};

/* 0, or -EINVAL with a sentence in err naming what was wrong. */
int endpoint_parse(const char *s, struct endpoint *ep, char *err, size_t errlen);

/* A list of endpoints, comma-separated ("tcp:a:7470,tcp:b:7470",
 * "unix:/run/a.sock,tcp:b:7470"), for clients that fail over from one
 * daemon to the next.  A single endpoint is a list of one.  Socket paths
 * in a list cannot hold commas.  Fills eps[0..*n-1]; 0, or -EINVAL with a
 * sentence in err naming the entry that was wrong (too many entries,
 * an empty one, or one endpoint_parse refuses). */
#define ENDPOINT_LIST_MAX 16
int endpoint_list_parse(const char *s, struct endpoint *eps, size_t max, size_t *n, char *err,
			size_t errlen);

/* How an endpoint is written back ("unix:PATH", "tcp:HOST:PORT",
 * "tcp:[V6]:PORT"); -ENAMETOOLONG when buf is too small. */
int endpoint_format(const struct endpoint *ep, char *buf, size_t len);

/* The system socket: where mfmad listens when it runs as root or as the
 * systemd service (mfmad.socket), 0660 root:mfmad. */
#define ENDPOINT_SYSTEM_SOCKET "/run/mfmad/mfmad.sock"

/* The default Unix sockets, in the order a client tries them; the first
 * is where the daemon listens by default, so the two always agree.
 *   root:                          /run/mfmad/mfmad.sock
 *   others, XDG_RUNTIME_DIR set:   $XDG_RUNTIME_DIR/mfmad.sock (a daemon of
 *                                  their own), then /run/mfmad/mfmad.sock
 *   others, no XDG_RUNTIME_DIR:    /run/mfmad/mfmad.sock
 * endpoint_default_path_for() is the pure rule (uid and XDG_RUNTIME_DIR
 * given); _at() applies it to this process.  Each writes candidate i to buf
 * and returns 0, -ENOENT when there is no candidate i, or -ENAMETOOLONG. */
int endpoint_default_path_for(unsigned i, unsigned uid, const char *xdg, char *buf, size_t len);
int endpoint_default_path_at(unsigned i, char *buf, size_t len);

/* Candidate 0: the daemon's default socket. */
int endpoint_default_path(char *buf, size_t len);

/* Raises a connected socket's kernel send buffer to at least bytes, so
 * that a frame of up to that size goes out in one write instead of
 * several, each waiting for the reader to drain the last (a Unix socket's
 * default, net.core.wmem_default, is 208 KiB).  Forced past
 * net.core.wmem_max where the caller may (CAP_NET_ADMIN), else capped
 * there by the kernel.  Never lowers it.  0 or -errno. */
int endpoint_send_buffer(int fd, size_t bytes);

#endif
