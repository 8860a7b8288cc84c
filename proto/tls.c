#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct tls_ctx {
	SSL_CTX *ctx;
};

struct tls_session {
	SSL *ssl;
	BIO *in;  /* bytes received, read by OpenSSL */
	BIO *out; /* bytes OpenSSL wrote, for the caller to send */
};

/* TLS 1.2 is kept for peers that have no 1.3 (HAProxy built against an
 * older OpenSSL, say), with forward-secret AEAD suites only; 1.3 has
 * nothing else. */
#define TLS12_CIPHERS "ECDHE+AESGCM:ECDHE+CHACHA20"

/* The reason OpenSSL gives for its last error, or what is left. */
static const char *last_reason(void)
{
	unsigned long e = ERR_peek_last_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;
	return r ? r : "unknown error";
}

static int ctx_fail(SSL_CTX *c, int code, char *err, size_t errlen, const char *what,
		    const char *file)
{
	if (err && errlen)
		snprintf(err, errlen, "%s \"%s\": %s", what, file, last_reason());
	SSL_CTX_free(c);
	ERR_clear_error();
	return code;
}

/* A context of this method with what every mfma context has: NULL with
 * the reason in err. */
static SSL_CTX *ctx_new(const SSL_METHOD *method, char *err, size_t errlen)
{
	ERR_clear_error();
	SSL_CTX *c = SSL_CTX_new(method);
	if (!c || !SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) ||
	    !SSL_CTX_set_cipher_list(c, TLS12_CIPHERS)) {
		if (err && errlen)
			snprintf(err, errlen, "cannot make a TLS context: %s", last_reason());
		SSL_CTX_free(c);
		ERR_clear_error();
		return NULL;
	}
	/* Idle sessions give their record buffers back: a daemon may hold
	 * hundreds of connections that mostly wait. */
	SSL_CTX_set_mode(c, SSL_MODE_RELEASE_BUFFERS);
	return c;
}

static int use_cert_key(SSL_CTX *c, const char *cert, const char *key, char *err, size_t errlen)
{
	if (SSL_CTX_use_certificate_chain_file(c, cert) != 1)
		return ctx_fail(c, -EINVAL, err, errlen, "certificate", cert);
	if (SSL_CTX_use_PrivateKey_file(c, key, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(c) != 1)
		return ctx_fail(c, -EINVAL, err, errlen, "private key", key);
	return 0;
}

static int wrap(SSL_CTX *c, struct tls_ctx **out, char *err, size_t errlen)
{
	struct tls_ctx *t = calloc(1, sizeof(*t));
	if (!t) {
		SSL_CTX_free(c);
		if (err && errlen)
			snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	t->ctx = c;
	*out = t;
	return 0;
}

int tls_ctx_server(const char *cert_file, const char *key_file, const char *client_ca,
		   struct tls_ctx **out, char *err, size_t errlen)
{
	*out = NULL;
	if (!cert_file || !*cert_file || !key_file || !*key_file) {
		if (err && errlen)
			snprintf(err, errlen, "a TLS server needs a certificate and a key file");
		return -EINVAL;
	}
	SSL_CTX *c = ctx_new(TLS_server_method(), err, errlen);
	int rc;
	if (!c)
		return -ENOMEM;
	if ((rc = use_cert_key(c, cert_file, key_file, err, errlen)) < 0)
		return rc;
	/* Clients do not resume sessions: tickets would only cost a
	 * message and a key per connection.  TLS 1.3's are off by count,
	 * TLS 1.2's by SSL_OP_NO_TICKET (the cache being off does not stop
	 * stateless tickets).  The context names the sessions, so that a
	 * client offering one (HAProxy does) gets a full handshake: with
	 * client certificates and none set, OpenSSL failed the handshake
	 * ("session id context uninitialized"). */
	SSL_CTX_set_num_tickets(c, 0);
	SSL_CTX_set_options(c, SSL_OP_NO_TICKET);
	SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
	static const unsigned char sid_ctx[] = "mfmad";
	SSL_CTX_set_session_id_context(c, sid_ctx, sizeof(sid_ctx) - 1);
	if (client_ca && *client_ca) {
		STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(client_ca);
		if (!names || SSL_CTX_load_verify_locations(c, client_ca, NULL) != 1) {
			sk_X509_NAME_pop_free(names, X509_NAME_free);
			return ctx_fail(c, -EINVAL, err, errlen, "client CA file", client_ca);
		}
		SSL_CTX_set_client_CA_list(c, names);
		SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	}
	return wrap(c, out, err, errlen);
}

int tls_ctx_client(const char *ca_file, const char *cert_file, const char *key_file,
		   struct tls_ctx **out, char *err, size_t errlen)
{
	*out = NULL;
	bool has_cert = cert_file && *cert_file, has_key = key_file && *key_file;
	if (has_cert != has_key) {
		if (err && errlen)
			snprintf(err, errlen, "a TLS client certificate needs its key, and a key its "
					      "certificate (MFMA_TLS_CERT and MFMA_TLS_KEY)");
		return -EINVAL;
	}
	SSL_CTX *c = ctx_new(TLS_client_method(), err, errlen);
	int rc;
	if (!c)
		return -ENOMEM;
	if (ca_file && *ca_file) {
		if (SSL_CTX_load_verify_locations(c, ca_file, NULL) != 1)
			return ctx_fail(c, -EINVAL, err, errlen, "CA file", ca_file);
	} else if (SSL_CTX_set_default_verify_paths(c) != 1) {
		return ctx_fail(c, -EINVAL, err, errlen, "the system's CAs", "(default paths)");
	}
	if (has_cert && (rc = use_cert_key(c, cert_file, key_file, err, errlen)) < 0)
		return rc;
	SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
	return wrap(c, out, err, errlen);
}

void tls_ctx_free(struct tls_ctx *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	free(t);
}

int tls_session_new(struct tls_ctx *t, const char *peer_name, struct tls_session **out)
{
	*out = NULL;
	struct tls_session *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->ssl = SSL_new(t->ctx); /* holds its own reference to the context */
	s->in = BIO_new(BIO_s_mem());
	s->out = BIO_new(BIO_s_mem());
	if (!s->ssl || !s->in || !s->out) {
		BIO_free(s->in);
		BIO_free(s->out);
		SSL_free(s->ssl);
		free(s);
		return -ENOMEM;
	}
	/* An empty input is "more to come", not the end of the stream. */
	BIO_set_mem_eof_return(s->in, -1);
	BIO_set_mem_eof_return(s->out, -1);
	SSL_set_bio(s->ssl, s->in, s->out);
	if (!peer_name) {
		SSL_set_accept_state(s->ssl);
		*out = s;
		return 0;
	}
	SSL_set_connect_state(s->ssl);
	unsigned char addr[16];
	bool is_ip = inet_pton(AF_INET, peer_name, addr) == 1 || inet_pton(AF_INET6, peer_name, addr) == 1;
	int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s->ssl), peer_name)
		       : SSL_set1_host(s->ssl, peer_name) && SSL_set_tlsext_host_name(s->ssl, peer_name);
	if (!ok) {
		tls_session_free(s);
		return -EINVAL;
	}
	*out = s;
	return 0;
}

void tls_session_free(struct tls_session *s)
{
	if (!s)
		return;
	SSL_free(s->ssl); /* frees both BIOs */
	free(s);
}

int tls_session_feed(struct tls_session *s, const void *buf, size_t len)
{
	size_t done = 0;
	if (len == 0)
		return 0;
	if (BIO_write_ex(s->in, buf, len, &done) != 1 || done != len)
		return -ENOMEM;
	return 0;
}

/* The error of an SSL call that returned ret: 0 for "wants more input",
 * TLS_CLOSED, or -EPROTO with the reason in err. */
static int ssl_result(struct tls_session *s, int ret, char *err, size_t errlen)
{
	int e = SSL_get_error(s->ssl, ret);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
		ERR_clear_error();
		return 0;
	}
	if (e == SSL_ERROR_ZERO_RETURN) {
		ERR_clear_error();
		return TLS_CLOSED;
	}
	if (err && errlen) {
		long v = SSL_get_verify_result(s->ssl);
		if (v != X509_V_OK)
			snprintf(err, errlen, "certificate verify failed: %s",
				 X509_verify_cert_error_string(v));
		else if (e == SSL_ERROR_SSL)
			snprintf(err, errlen, "%s", last_reason());
		else
			snprintf(err, errlen, "TLS error %d", e);
	}
	ERR_clear_error();
	return -EPROTO;
}

ssize_t tls_session_read(struct tls_session *s, void *buf, size_t len, char *err, size_t errlen)
{
	size_t got = 0;
	ERR_clear_error();
	int ret = SSL_read_ex(s->ssl, buf, len, &got);
	if (ret == 1)
		return (ssize_t)got;
	return ssl_result(s, ret, err, errlen);
}

int tls_session_handshake(struct tls_session *s, char *err, size_t errlen)
{
	ERR_clear_error();
	int ret = SSL_do_handshake(s->ssl);
	if (ret == 1)
		return 1;
	int rc = ssl_result(s, ret, err, errlen);
	if (rc == TLS_CLOSED) {
		if (err && errlen)
			snprintf(err, errlen, "the peer closed the session during the handshake");
		return -EPROTO;
	}
	return rc;
}

int tls_session_write(struct tls_session *s, const void *buf, size_t len, char *err,
		      size_t errlen)
{
	const unsigned char *p = buf;
	ERR_clear_error();
	while (len > 0) {
		size_t done = 0;
		int ret = SSL_write_ex(s->ssl, p, len, &done);
		if (ret != 1) {
			int rc = ssl_result(s, ret, err, errlen);
			if (rc == 0 && err && errlen)
				snprintf(err, errlen, "the TLS handshake is not complete");
			return rc == 0 ? -EAGAIN : rc;
		}
		p += done;
		len -= done;
	}
	return 0;
}

size_t tls_session_out_pending(const struct tls_session *s)
{
	return BIO_ctrl_pending(s->out);
}

size_t tls_session_out_take(struct tls_session *s, void *buf, size_t len)
{
	size_t got = 0;
	if (len == 0 || BIO_read_ex(s->out, buf, len, &got) != 1)
		return 0;
	return got;
}

size_t tls_sealed_bound(size_t len)
{
	/* TLS 1.3: 5-byte header, content type, 16-byte tag; TLS 1.2 GCM: 5 +
	 * 8-byte nonce + 16-byte tag.  64 per record covers both. */
	return len + (len / 16384 + 1) * 64;
}

size_t tls_session_in_pending(const struct tls_session *s)
{
	return BIO_ctrl_pending(s->in) + (size_t)SSL_pending(s->ssl);
}

bool tls_session_ready(const struct tls_session *s)
{
	return SSL_is_init_finished(s->ssl);
}

void tls_session_describe(const struct tls_session *s, char *buf, size_t len)
{
	char peer[128] = "no certificate";
	X509 *cert = SSL_get1_peer_certificate(s->ssl);
	if (cert) {
		char cn[96] = "";
		X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
		snprintf(peer, sizeof(peer), "CN=%s", cn[0] ? cn : "(none)");
		X509_free(cert);
	}
	snprintf(buf, len, "%s %s, peer %s", SSL_get_version(s->ssl),
		 SSL_CIPHER_get_name(SSL_get_current_cipher(s->ssl)), peer);
}

bool tls_looks_like_handshake(const void *buf, size_t len)
{
	/* A TLS record of type handshake (22), major version 3. */
	const unsigned char *p = buf;
	return len >= 1 && p[0] == 22 && (len < 2 || p[1] == 3);
}
