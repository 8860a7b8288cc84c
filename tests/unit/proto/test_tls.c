/* proto/tls.c: two sessions joined back to back in memory, with
 * certificates made for this run by tests/tls/make_certs.sh (its path is
 * the first argument). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tls.h"

static char dir[64];

static const char *f(const char *name)
{
	static char bufs[8][128];
	static int i;
	char *b = bufs[i++ % 8];
	snprintf(b, 128, "%s/%s", dir, name);
	return b;
}

/* Moves what each side has to send to the other until neither has
 * anything; the result of the last read of each side in *rc_c, *rc_s. */
static void pump(struct tls_session *c, struct tls_session *s, char *err_c, char *err_s,
		 int *rc_c, int *rc_s)
{
	uint8_t buf[65536];
	*rc_c = tls_session_handshake(c, err_c, 256); /* the ClientHello */
	for (int round = 0; round < 20 && *rc_c >= 0; round++) {
		size_t moved = 0, n;
		while ((n = tls_session_out_take(c, buf, sizeof(buf))) > 0) {
			assert_int_equal(tls_session_feed(s, buf, n), 0);
			moved += n;
		}
		*rc_s = tls_session_ready(s) ? 0 : tls_session_handshake(s, err_s, 256);
		while ((n = tls_session_out_take(s, buf, sizeof(buf))) > 0) {
			assert_int_equal(tls_session_feed(c, buf, n), 0);
			moved += n;
		}
		*rc_c = tls_session_ready(c) ? 0 : tls_session_handshake(c, err_c, 256);
		if (moved == 0 || *rc_c < 0 || *rc_s < 0)
			return;
	}
}

struct pair {
	struct tls_ctx *sc, *cc;
	struct tls_session *s, *c;
	char err_c[256], err_s[256];
	int rc_c, rc_s;
};

static void pair_open(struct pair *p, const char *client_ca, const char *ca, const char *cert,
		      const char *key, const char *name)
{
	char err[256];
	memset(p, 0, sizeof(*p));
	assert_int_equal(tls_ctx_server(f("server.pem"), f("server.key"), client_ca, &p->sc, err,
					sizeof(err)),
			 0);
	assert_int_equal(tls_ctx_client(ca, cert, key, &p->cc, err, sizeof(err)), 0);
	assert_int_equal(tls_session_new(p->sc, NULL, &p->s), 0);
	assert_int_equal(tls_session_new(p->cc, name, &p->c), 0);
	/* Sessions keep their contexts: freeing them now is what a reload does. */
	tls_ctx_free(p->sc);
	tls_ctx_free(p->cc);
	p->sc = p->cc = NULL;
	pump(p->c, p->s, p->err_c, p->err_s, &p->rc_c, &p->rc_s);
}

static void pair_close(struct pair *p)
{
	tls_session_free(p->c);
	tls_session_free(p->s);
}

/* What the server reads after the client sends len bytes. */
static ssize_t send_and_read(struct tls_session *from, struct tls_session *to, const uint8_t *data,
			     size_t len, uint8_t *got, size_t cap, char *err)
{
	assert_int_equal(tls_session_write(from, data, len, err, 256), 0);
	size_t pend = tls_session_out_pending(from);
	assert_true(pend <= tls_sealed_bound(len));
	uint8_t *wire = malloc(pend);
	assert_int_equal(tls_session_out_take(from, wire, pend), pend);
	assert_int_equal(tls_session_feed(to, wire, pend), 0);
	free(wire);
	size_t total = 0;
	for (;;) {
		ssize_t n = tls_session_read(to, got + total, cap - total, err, 256);
		if (n <= 0)
			return n < 0 ? n : (ssize_t)total;
		total += (size_t)n;
	}
}

static void test_mutual(void **state)
{
	(void)state;
	struct pair p;
	pair_open(&p, f("ca.pem"), f("ca.pem"), f("client.pem"), f("client.key"), "localhost");
	assert_int_equal(p.rc_c, 0);
	assert_true(tls_session_ready(p.c));
	char desc[256];
	/* The server finishes once the client's certificate has been read. */
	uint8_t got[4096];
	char err[256];
	ssize_t n = send_and_read(p.c, p.s, (const uint8_t *)"ping", 4, got, sizeof(got), err);
	assert_int_equal(n, 4);
	assert_memory_equal(got, "ping", 4);
	assert_true(tls_session_ready(p.s));
	tls_session_describe(p.s, desc, sizeof(desc));
	assert_non_null(strstr(desc, "TLSv1.3"));
	assert_non_null(strstr(desc, "CN=mfma-client"));

	/* A 1 MiB answer the other way, within the bound the daemon counts. */
	size_t big = 1u << 20;
	uint8_t *data = malloc(big), *back = malloc(big + 1);
	for (size_t i = 0; i < big; i++)
		data[i] = (uint8_t)(i * 131 + 7);
	n = send_and_read(p.s, p.c, data, big, back, big + 1, err);
	assert_int_equal(n, (ssize_t)big);
	assert_memory_equal(back, data, big);
	assert_int_equal(tls_session_in_pending(p.c), 0);
	free(data);
	free(back);
	pair_close(&p);
}

/* A server that asks for client certificates refuses a client without. */
static void test_no_client_cert(void **state)
{
	(void)state;
	struct pair p;
	pair_open(&p, f("ca.pem"), f("ca.pem"), NULL, NULL, "localhost");
	uint8_t got[64];
	char err[256] = "";
	/* TLS 1.3: the client is done before the server has judged it. */
	ssize_t n = p.rc_s < 0 ? p.rc_s
			       : send_and_read(p.c, p.s, (const uint8_t *)"x", 1, got, sizeof(got), err);
	assert_int_equal(n, -EPROTO);
	assert_non_null(strstr(p.rc_s < 0 ? p.err_s : err, "certificate"));
	pair_close(&p);
}

/* A client certificate from a CA the server does not trust. */
static void test_wrong_client_ca(void **state)
{
	(void)state;
	struct pair p;
	pair_open(&p, f("ca.pem"), f("ca.pem"), f("other-client.pem"), f("other-client.key"),
		  "localhost");
	uint8_t got[64];
	char err[256] = "";
	ssize_t n = p.rc_s < 0 ? p.rc_s
			       : send_and_read(p.c, p.s, (const uint8_t *)"x", 1, got, sizeof(got), err);
	assert_int_equal(n, -EPROTO);
	assert_non_null(strstr(p.rc_s < 0 ? p.err_s : err, "certificate verify failed"));
	pair_close(&p);
}

/* The client checks the server against its CA and the name it dialled. */
static void test_server_checked(void **state)
{
	(void)state;
	struct pair p;
	pair_open(&p, NULL, f("other-ca.pem"), NULL, NULL, "localhost");
	assert_int_equal(p.rc_c, -EPROTO);
	assert_non_null(strstr(p.err_c, "certificate verify failed"));
	pair_close(&p);
	pair_open(&p, NULL, f("ca.pem"), NULL, NULL, "mfmad.example");
	assert_int_equal(p.rc_c, -EPROTO);
	assert_non_null(strstr(p.err_c, "hostname mismatch"));
	pair_close(&p);
	pair_open(&p, NULL, f("ca.pem"), NULL, NULL, "127.0.0.1");
	assert_int_equal(p.rc_c, 0);
	pair_close(&p);
	pair_open(&p, NULL, f("ca.pem"), NULL, NULL, "127.0.0.2");
	assert_int_equal(p.rc_c, -EPROTO);
	assert_non_null(strstr(p.err_c, "IP address mismatch"));
	pair_close(&p);
}

static void test_ctx_errors(void **state)
{
	(void)state;
	struct tls_ctx *t;
	char err[256];
	assert_int_equal(tls_ctx_server(f("missing.pem"), f("server.key"), NULL, &t, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "missing.pem"));
	assert_int_equal(tls_ctx_server(f("server.pem"), f("client.key"), NULL, &t, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "client.key"));
	assert_int_equal(tls_ctx_server(f("server.pem"), f("server.key"), f("nope.pem"), &t, err,
					sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "nope.pem"));
	assert_int_equal(tls_ctx_client(NULL, f("client.pem"), NULL, &t, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "needs its key"));
	assert_null(t);
}

static void test_plaintext_detect(void **state)
{
	(void)state;
	const uint8_t hello[] = { 22, 3, 1, 0, 200 }, frame[] = { 0, 0, 0, 12 };
	assert_true(tls_looks_like_handshake(hello, sizeof(hello)));
	assert_false(tls_looks_like_handshake(frame, sizeof(frame)));
	assert_false(tls_looks_like_handshake("GET /", 5));
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_tls MAKE_CERTS_SH\n");
		return 2;
	}
	snprintf(dir, sizeof(dir), "/tmp/mfma-tls-unit-XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "bash '%s' '%s'", argv[1], dir);
	if (system(cmd) != 0)
		return 1;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mutual),
		cmocka_unit_test(test_no_client_cert),
		cmocka_unit_test(test_wrong_client_ca),
		cmocka_unit_test(test_server_checked),
		cmocka_unit_test(test_ctx_errors),
		cmocka_unit_test(test_plaintext_detect),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		rc = 1;
	return rc;
}
