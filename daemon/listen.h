/* The listening sockets: the ones systemd passed (socket activation),
 * else the Unix socket; and loopback TCP when configured.  Each accepted
 * connection gets the callbacks given to listen_start. */
#ifndef MFMAD_LISTEN_H
#define MFMAD_LISTEN_H

#include <stddef.h>

#include "conn.h"
#include "daemon.h"

/* At most this many listeners (activated sockets plus TCP). */
#define LISTEN_MAX 8

int listen_start(struct daemon *d, const struct conn_events *ev, char *err, size_t errlen);
/* SIGHUP: reads listen.token_file and the TLS certificate, key and client
 * CAs of nc again; new connections use them, open ones keep theirs.  A
 * file that cannot be used leaves the old ones in place: -errno, with err
 * naming the file and why. */
int listen_reload(struct daemon *d, const struct mfmad_config *nc, char *err, size_t errlen);
/* Raises the soft descriptor limit to what limits.max_connections needs
 * (at start, and when a reload changes it), or caps the connections
 * below the hard limit, saying so. */
void listen_fit_fd_limit(struct daemon *d);
/* Stops accepting; removes the Unix socket file this daemon made. */
void listen_close(struct daemon *d);
void listen_free(struct daemon *d);

#endif
