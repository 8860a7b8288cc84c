/* TLS over memory buffers (OpenSSL 3): a session turns the bytes received
 * from the peer into plaintext and plaintext into the bytes to send, and
 * never touches a socket.  The daemon drives it from libuv callbacks, the
 * client library from its poll() loop; the unit tests join two sessions
 * back to back in memory.
 *
 * Contexts hold what is read from files (certificates, key, CAs).  A
 * session keeps its own reference to the context it was made from, so a
 * context can be replaced (SIGHUP) and freed while old sessions go on.
 *
 * Every function returns 0 (or a count) or a negative errno-style code;
 * where it fails for a reason a person must read, err receives a
 * sentence.  Nothing here logs. */
#ifndef MFMA_TLS_H
#define MFMA_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct tls_ctx;
struct tls_session;

/* A server context: certificate chain and key in PEM files (TLS 1.2 and
 * 1.3, AEAD ciphers only).  With client_ca (a PEM file of CAs), a client
 * must present a certificate that one of them signed; NULL or "" takes
 * any client (the daemon then asks for its token). */
int tls_ctx_server(const char *cert_file, const char *key_file, const char *client_ca,
		   struct tls_ctx **out, char *err, size_t errlen);

/* A client context: the server's certificate is verified against ca_file
 * (NULL or "": the system's CAs); cert_file/key_file (both or neither)
 * are the client's own certificate. */
int tls_ctx_client(const char *ca_file, const char *cert_file, const char *key_file,
		   struct tls_ctx **out, char *err, size_t errlen);

/* Accepts NULL. */
void tls_ctx_free(struct tls_ctx *ctx);

/* A session.  peer_name is the server's name for a client session (a DNS
 * name or an IP address; checked against the certificate, and sent as
 * SNI when it is a name), NULL for a server session. */
int tls_session_new(struct tls_ctx *ctx, const char *peer_name, struct tls_session **out);
/* Accepts NULL. */
void tls_session_free(struct tls_session *s);

/* Bytes received from the peer. */
int tls_session_feed(struct tls_session *s, const void *buf, size_t len);

/* Plaintext out of what was fed (driving the handshake first): the number
 * of bytes, 0 when more must be received first, TLS_CLOSED when the peer
 * closed the session cleanly, or a negative errno (-EPROTO for a failed
 * handshake or a damaged record, err saying why). */
#define TLS_CLOSED (-ESHUTDOWN)
ssize_t tls_session_read(struct tls_session *s, void *buf, size_t len, char *err, size_t errlen);

/* Advances the handshake without reading plaintext: 1 when it is done,
 * 0 when more must be received (send what tls_session_out has first),
 * or a negative errno with err saying why. */
int tls_session_handshake(struct tls_session *s, char *err, size_t errlen);

/* Encrypts len bytes of plaintext into the output. */
int tls_session_write(struct tls_session *s, const void *buf, size_t len, char *err,
		      size_t errlen);

/* Bytes waiting to be sent to the peer, and taking them (up to len). */
size_t tls_session_out_pending(const struct tls_session *s);
size_t tls_session_out_take(struct tls_session *s, void *buf, size_t len);

/* The most bytes tls_session_write(len) adds to the output: records of
 * at most 16 KiB, each with its header, tag and padding (AEAD only). */
size_t tls_sealed_bound(size_t len);

/* Bytes received and not yet turned into plaintext (the session holds
 * them); with TLS_SESSION_OVERHEAD, what a session costs in memory. */
size_t tls_session_in_pending(const struct tls_session *s);
/* OpenSSL's own record buffers and state for one session, about. */
#define TLS_SESSION_OVERHEAD (40u * 1024)

bool tls_session_ready(const struct tls_session *s);
/* "TLSv1.3 TLS_AES_256_GCM_SHA384, peer CN=client" for logs. */
void tls_session_describe(const struct tls_session *s, char *buf, size_t len);

/* Whether the first bytes a peer sent can be a TLS handshake (a record of
 * type 22); used to tell a plaintext client on a TLS listener apart. */
bool tls_looks_like_handshake(const void *buf, size_t len);

#endif
