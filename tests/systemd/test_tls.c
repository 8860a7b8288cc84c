/* TLS on TCP listeners (issue 12), against the real daemon and the real
 * client library on loopback, with certificates made for this run by
 * tests/tls/make_certs.sh (MAKE_CERTS): a client with a certificate is
 * served correct results, one without, or signed by another CA, is
 * refused, and so is a client that does not trust the daemon; a plaintext
 * client is told so while others go on; a client stalling mid-handshake is
 * closed at the read timeout; a remote listener without a credential is
 * refused at start (socket-activated too); SIGHUP swaps the certificate
 * and keeps the old one when the new file is broken; endpoint lists fail
 * over between tls: endpoints; a reconnection is bounded by its calls'
 * deadlines, not by the handshake's or an expired request's. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness_gemm.h"
#include "mfma.h"
#include "mfma_clock.h"
#include "harness.h"
#include "sdtest.h"

struct run {
	char dir[64], conf[96], log[96], sock[96], certs[96];
	pid_t pid;
	int port, mport;
};

static const char *env_or_empty(const char *name)
{
	const char *v = getenv(name);
	return v ? v : "";
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* A file of the run's certificate directory. */
static const char *cf(const struct run *r, const char *name)
{
	static char bufs[12][160];
	static int i;
	char *b = bufs[i++ % 12];
	snprintf(b, 160, "%s/%s", r->certs, name);
	return b;
}

static void run_init(struct run *r)
{
	memset(r, 0, sizeof(*r));
	strcpy(r->dir, "/tmp/mfmad-tls-XXXXXX");
	assert_non_null(mkdtemp(r->dir));
	snprintf(r->conf, sizeof(r->conf), "%s/mfmad.conf", r->dir);
	snprintf(r->log, sizeof(r->log), "%s/mfmad.log", r->dir);
	snprintf(r->sock, sizeof(r->sock), "%s/mfmad.sock", r->dir);
	snprintf(r->certs, sizeof(r->certs), "%s/certs", r->dir);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "bash '%s' '%s'", env_or_empty("MAKE_CERTS"), r->certs);
	assert_int_equal(system(cmd), 0);
	r->port = harness_free_port();
	r->mport = harness_free_port();
}

/* The config of a TLS listener on r->port: cert is "server" or
 * "other-server"; client_ca NULL: none; extra: more libconfig text. */
static void write_conf(struct run *r, const char *cert, const char *client_ca, const char *extra)
{
	char conf[1024];
	snprintf(conf, sizeof(conf),
		 "listen = { tcp = true; tcp_port = %d; tls_cert = \"%s/%s.pem\"; "
		 "tls_key = \"%s/%s.key\"; tls_client_ca = \"%s\"; };\n"
		 "metrics = { enabled = true; port = %d; };\n%s\n",
		 r->port, r->certs, cert, r->certs, cert, client_ca ? client_ca : "", r->mport,
		 extra ? extra : "");
	write_file(r->conf, conf);
}

static pid_t spawn(struct run *r)
{
	const char *argv[] = { env_or_empty("MFMAD_BIN"), "--config", r->conf, "--socket", r->sock,
			       "--log-level", "debug", NULL };
	return sdtest_spawn(argv, NULL, r->log);
}

/* Waits until the daemon answers on its Unix socket. */
static void wait_ready(const struct run *r)
{
	char ep[128];
	snprintf(ep, sizeof(ep), "unix:%s", r->sock);
	mfma_client *c = NULL;
	struct mfma_error err;
	for (int i = 0; i < 400 && mfma_connect(ep, &c, &err) < 0; i++)
		usleep(25000);
	assert_non_null(c);
	mfma_close(c);
}

static void run_stop(struct run *r)
{
	if (r->pid > 0) {
		kill(r->pid, SIGTERM);
		int st = sdtest_wait_exit(r->pid, 30000);
		if (st != 0)
			sdtest_print_file(r->log);
		assert_int_equal(st, 0);
	}
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", r->dir);
	(void)!system(cmd);
}

/* Connects to tls:HOST:port with these files; 0 or the library's error. */
static int connect_tls(const struct run *r, const char *host, const char *ca, const char *cert,
		       const char *key, mfma_client **c, struct mfma_error *err)
{
	char ep[128];
	snprintf(ep, sizeof(ep), "tls:%s:%d", host, r->port);
	struct mfma_tls t = { .ca_file = ca, .cert_file = cert, .key_file = key };
	*c = NULL;
	int rc = mfma_connect_tls(ep, &t, c, err);
	if (rc == 0)
		mfma_set_timeout(*c, 10000);
	return rc;
}

/* A daemon with the server certificate, asking clients for one of the
 * run's CA, up and answering. */
static void start_server(struct run *r)
{
	run_init(r);
	write_conf(r, "server", cf(r, "ca.pem"), NULL);
	r->pid = spawn(r);
	wait_ready(r);
}

static mfma_client *good_client(const struct run *r)
{
	mfma_client *c;
	struct mfma_error err;
	if (connect_tls(r, "localhost", cf(r, "ca.pem"), cf(r, "client.pem"), cf(r, "client.key"), &c,
			&err) < 0)
		fail_msg("TLS client with a certificate: %s", err.message);
	return c;
}

/* One f32 GEMM of m x k x n through c, checked against float64. */
static void gemm_checked(mfma_client *c, uint32_t m, uint32_t k, uint32_t n)
{
	float *a = malloc((size_t)m * k * 4), *b = malloc((size_t)k * n * 4);
	for (size_t i = 0; i < (size_t)m * k; i++)
		a[i] = (float)((i * 37 + 11) % 19) / 8.0f - 1.0f;
	for (size_t i = 0; i < (size_t)k * n; i++)
		b[i] = (float)((i * 53 + 5) % 23) / 8.0f - 1.5f;
	struct mfma_gemm_args args;
	harness_dense_f32_args(&args, a, b, m, k, n);
	struct mfma_gemm_result res;
	struct mfma_error err;
	if (mfma_gemm(c, &args, &res, &err) < 0)
		fail_msg("gemm %ux%ux%u over TLS: %s", m, k, n, err.message);
	assert_int_equal(res.d.rows, m);
	assert_int_equal(res.d.cols, n);
	double worst = harness_worst_error(res.d.data, a, b, NULL, 1, 0, m, k, n);
	printf("gemm %ux%ux%u over TLS: worst relative error %.2e\n", m, k, n, worst);
	assert_true(worst < 1e-4);
	mfma_gemm_result_free(&res);
	free(a);
	free(b);
}

/* Twenty GEMMs held by a corked client (mfma_cork) and written in one
 * call: some 160 KiB sealed as many records; each answer checked. */
static void corked_checked(mfma_client *c)
{
	enum { NR = 20, M = 16, K = 64, N = 16 };
	static float a[M * K], b[NR][K * N];
	for (size_t i = 0; i < M * K; i++)
		a[i] = (float)((i * 37 + 11) % 19) / 8.0f - 1.0f;
	struct mfma_error err;
	uint64_t ids[NR];
	mfma_cork(c);
	for (int r = 0; r < NR; r++) {
		for (size_t i = 0; i < K * N; i++)
			b[r][i] = (float)((i * 53 + 5 + (size_t)r * 7) % 23) / 8.0f - 1.5f;
		struct mfma_gemm_args args;
		harness_dense_f32_args(&args, a, b[r], M, K, N);
		if (mfma_gemm_submit(c, &args, &ids[r], &err) < 0)
			fail_msg("corked submit %d over TLS: %s", r, err.message);
	}
	assert_int_equal(mfma_uncork(c, &err), 0);
	for (int r = 0; r < NR; r++) {
		struct mfma_gemm_result res;
		uint64_t done;
		if (mfma_wait(c, ids[r], 30000, &done, &res, &err) < 0)
			fail_msg("corked answer %d over TLS: %s", r, err.message);
		double worst = harness_worst_error(res.d.data, a, b[r], NULL, 1, 0, M, K, N);
		if (!(worst < 1e-4))
			fail_msg("corked answer %d over TLS: worst relative error %.2e", r, worst);
		mfma_gemm_result_free(&res);
	}
	printf("%d corked GEMMs over TLS: every answer right\n", NR);
}

/* A counter of /metrics, or -1. */
static long metric(const struct run *r, const char *name)
{
	static char body[1 << 16];
	char head[1024];
	if (sdtest_http(AF_INET, r->mport, "GET", "/metrics", head, sizeof(head), body,
			sizeof(body)) != 200)
		return -1;
	const char *p = strstr(body, name);
	return p ? atol(p + strlen(name)) : -1;
}

/* openssl s_client with a client certificate over TLS 1.2, saving the
 * session to sess (out) or offering it (in); its output in log.  Its exit
 * status. */
static int s_client(const struct run *r, bool offer, const char *sess, const char *log)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
		 "openssl s_client -connect 127.0.0.1:%d -servername localhost -tls1_2 "
		 "-CAfile %s -cert %s -key %s -sess_%s %s </dev/null",
		 r->port, cf(r, "ca.pem"), cf(r, "client.pem"), cf(r, "client.key"),
		 offer ? "in" : "out", sess);
	const char *argv[] = { "/bin/sh", "-c", cmd, NULL };
	pid_t pid = sdtest_spawn(argv, NULL, log);
	assert_true(pid > 0);
	return sdtest_wait_exit(pid, 10000);
}

static void test_client_certificates(void **state)
{
	(void)state;
	struct run r;
	run_init(&r);
	write_conf(&r, "server", cf(&r, "ca.pem"), "limits = { read_timeout_ms = 2000; };");
	r.pid = spawn(&r);
	wait_ready(&r);
	struct mfma_error err;

	/* No TLS 1.2 ticket is given (one was, and offered back, as HAProxy
	 * does when it reconnects, it was refused with an internal error
	 * alert: no session id context with client certificates).  Without a
	 * ticket or a cache the session is not resumable and s_client keeps
	 * none; if it did, offering it must end in a full handshake. */
	char sess[160], log1[160], log2[160];
	snprintf(sess, sizeof(sess), "%s/session.pem", r.certs);
	snprintf(log1, sizeof(log1), "%s/s_client1.log", r.certs);
	snprintf(log2, sizeof(log2), "%s/s_client2.log", r.certs);
	assert_int_equal(s_client(&r, false, sess, log1), 0);
	assert_true(sdtest_file_contains(log1, "New, TLSv1.2"));
	assert_false(sdtest_file_contains(log1, "session ticket lifetime hint"));
	if (access(sess, F_OK) == 0) {
		assert_int_equal(s_client(&r, true, sess, log2), 0);
		assert_true(sdtest_file_contains(log2, "New, TLSv1.2"));
		assert_false(sdtest_file_contains(log2, "alert"));
	}
	assert_false(sdtest_file_contains(r.log, "session id context uninitialized"));

	/* With a certificate: small and ~1 MiB requests, results checked. */
	mfma_client *c = good_client(&r);
	assert_int_equal(mfma_ping(c, "abc", 3, NULL, &err), 0);
	gemm_checked(c, 16, 16, 16);
	gemm_checked(c, 128, 1024, 256); /* A 512 KiB + B 1 MiB: many records each way */
	corked_checked(c);
	mfma_close(c);

	/* By IP address: the certificate names 127.0.0.1 too. */
	assert_int_equal(connect_tls(&r, "127.0.0.1", cf(&r, "ca.pem"), cf(&r, "client.pem"),
				     cf(&r, "client.key"), &c, &err),
			 0);
	assert_int_equal(mfma_ping(c, "x", 1, NULL, &err), 0);
	mfma_close(c);

	/* No client certificate: TLS 1.3 lets the client finish first; the
	 * first call carries the daemon's alert. */
	int rc = connect_tls(&r, "localhost", cf(&r, "ca.pem"), NULL, NULL, &c, &err);
	if (rc == 0)
		rc = mfma_ping(c, "x", 1, NULL, &err);
	printf("no client certificate: %d \"%s\"\n", rc, err.message);
	assert_true(rc < 0);
	assert_non_null(strstr(err.message, "certificate required"));
	mfma_close(c);

	/* A certificate from a CA the daemon does not trust. */
	rc = connect_tls(&r, "localhost", cf(&r, "ca.pem"), cf(&r, "other-client.pem"),
			 cf(&r, "other-client.key"), &c, &err);
	if (rc == 0)
		rc = mfma_ping(c, "x", 1, NULL, &err);
	printf("client certificate of another CA: %d \"%s\"\n", rc, err.message);
	assert_true(rc < 0);
	assert_non_null(strstr(err.message, "unknown ca"));
	mfma_close(c);

	/* The client does not trust the daemon's CA, or dialled another name. */
	rc = connect_tls(&r, "localhost", cf(&r, "other-ca.pem"), cf(&r, "client.pem"),
			 cf(&r, "client.key"), &c, &err);
	printf("daemon of an untrusted CA: %d \"%s\"\n", rc, err.message);
	assert_true(rc < 0);
	assert_non_null(strstr(err.message, "certificate verify failed"));
	assert_null(c);
	struct mfma_tls named = { cf(&r, "ca.pem"), cf(&r, "client.pem"), cf(&r, "client.key"),
				  "mfmad.example" };
	char ep[64];
	snprintf(ep, sizeof(ep), "tls:127.0.0.1:%d", r.port);
	rc = mfma_connect_tls(ep, &named, &c, &err);
	printf("another server name: %d \"%s\"\n", rc, err.message);
	assert_true(rc < 0);
	assert_non_null(strstr(err.message, "mismatch"));

	/* A plaintext client is told what to dial; the others go on. */
	snprintf(ep, sizeof(ep), "tcp:127.0.0.1:%d", r.port);
	assert_int_equal(mfma_connect(ep, &c, &err), 0);
	mfma_set_timeout(c, 5000);
	rc = mfma_ping(c, "x", 1, NULL, &err);
	printf("plaintext client: %d \"%s\"\n", rc, err.message);
	assert_true(rc < 0);
	assert_non_null(strstr(err.message, "speaks TLS"));
	mfma_close(c);
	c = good_client(&r);
	gemm_checked(c, 16, 16, 16);
	mfma_close(c);
	usleep(1100000); /* past the rate limit: the next refusal is logged */
	assert_int_equal(mfma_connect(ep, &c, &err), 0);
	(void)mfma_ping(c, "x", 1, NULL, &err);
	mfma_close(c);
	assert_true(sdtest_file_wait(r.log, "TLS handshake failed: peer did not return a certificate",
				     5000));
	assert_true(sdtest_file_wait(r.log, "the client sent plaintext", 5000));

	/* mfmactl: the options, and the environment. */
	const char *ctl = env_or_empty("MFMACTL_BIN");
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
		 "%s -e tls:localhost:%d --tls-ca %s --tls-cert %s --tls-key %s ping >/dev/null", ctl,
		 r.port, cf(&r, "ca.pem"), cf(&r, "client.pem"), cf(&r, "client.key"));
	assert_int_equal(system(cmd), 0);
	snprintf(cmd, sizeof(cmd),
		 "MFMA_TLS_CA=%s MFMA_TLS_CERT=%s MFMA_TLS_KEY=%s %s -e tls:localhost:%d status "
		 ">/dev/null",
		 cf(&r, "ca.pem"), cf(&r, "client.pem"), cf(&r, "client.key"), ctl, r.port);
	assert_int_equal(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "%s -e tls:localhost:%d --tls-ca %s ping >/dev/null 2>&1", ctl,
		 r.port, cf(&r, "ca.pem"));
	assert_int_not_equal(system(cmd), 0);

	long ok = metric(&r, "mfmad_tls_handshakes_total{result=\"ok\"} ");
	long failed = metric(&r, "mfmad_tls_handshakes_total{result=\"failed\"} ");
	printf("/metrics: %ld handshakes ok, %ld failed\n", ok, failed);
	assert_true(ok >= 5); /* three clients and two mfmactl runs */
	assert_true(failed >= 5);
	run_stop(&r);
}

/* A client that sends half a ClientHello and stops is closed at
 * limits.read_timeout_ms, while another is served meanwhile. */
static void test_handshake_stall(void **state)
{
	(void)state;
	struct run r;
	run_init(&r);
	write_conf(&r, "server", cf(&r, "ca.pem"), "limits = { read_timeout_ms = 600; };");
	r.pid = spawn(&r);
	wait_ready(&r);
	int fd = sdtest_connect_tcp(r.port, 0);
	assert_true(fd >= 0);
	const uint8_t half_hello[] = { 22, 3, 1, 0x02, 0x00, 1, 0, 1, 0xfc, 3, 3 };
	assert_int_equal(write(fd, half_hello, sizeof(half_hello)), (ssize_t)sizeof(half_hello));
	uint64_t t0 = mfma_clock_ns();
	mfma_client *c = good_client(&r);
	gemm_checked(c, 16, 16, 16);
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char buf[64];
	ssize_t n = 1;
	while (n > 0 && poll(&p, 1, 5000) == 1)
		n = read(fd, buf, sizeof(buf));
	double ms = (double)(mfma_clock_ns() - t0) / 1e6;
	printf("stalled handshake closed after %.0f ms (read_timeout_ms = 600)\n", ms);
	assert_true(n <= 0);
	assert_true(ms >= 550 && ms < 2500);
	close(fd);
	/* The good client's connection outlives it. */
	struct mfma_error err;
	assert_int_equal(mfma_ping(c, "x", 1, NULL, &err), 0);
	mfma_close(c);
	assert_true(sdtest_file_contains(r.log, "the TLS handshake did not complete"));
	run_stop(&r);
}

/* The daemon exits 1 at start, saying why. */
static void expect_refused_start(struct run *r, pid_t pid, const char *want)
{
	assert_true(sdtest_exits_saying(pid, 1, r->log, want));
}

static void test_remote_needs_credential(void **state)
{
	(void)state;
	struct run r;
	run_init(&r);
	/* TLS without client certificates hides the traffic, but is no
	 * credential: without a token a remote listener is refused. */
	char conf[1024];
	snprintf(conf, sizeof(conf),
		 "listen = { tcp = true; tcp_address = \"0.0.0.0\"; tcp_port = %d; "
		 "tcp_allow_remote = true; tls_cert = \"%s\"; tls_key = \"%s\"; };",
		 r.port, cf(&r, "server.pem"), cf(&r, "server.key"));
	write_file(r.conf, conf);
	expect_refused_start(&r, spawn(&r), "without a credential");
	/* With client certificates it starts. */
	snprintf(conf, sizeof(conf),
		 "listen = { tcp = true; tcp_address = \"0.0.0.0\"; tcp_port = %d; "
		 "tcp_allow_remote = true; tls_cert = \"%s\"; tls_key = \"%s\"; "
		 "tls_client_ca = \"%s\"; };",
		 r.port, cf(&r, "server.pem"), cf(&r, "server.key"), cf(&r, "ca.pem"));
	write_file(r.conf, conf);
	r.pid = spawn(&r);
	wait_ready(&r);
	mfma_client *c = good_client(&r);
	gemm_checked(c, 16, 16, 16);
	mfma_close(c);
	run_stop(&r);

	/* Socket activation hands over 0.0.0.0: the same rule. */
	const char *act = env_or_empty("SOCKET_ACTIVATE");
	if (!act[0]) {
		print_message("systemd-socket-activate not found; activation part skipped\n");
		return;
	}
	run_init(&r);
	snprintf(conf, sizeof(conf), "listen = { tls_cert = \"%s\"; tls_key = \"%s\"; };",
		 cf(&r, "server.pem"), cf(&r, "server.key"));
	write_file(r.conf, conf);
	char listen[32];
	snprintf(listen, sizeof(listen), "0.0.0.0:%d", r.port);
	const char *argv[] = { act, "-l", listen, env_or_empty("MFMAD_BIN"), "--config", r.conf,
			       NULL };
	pid_t pid = sdtest_spawn(argv, NULL, r.log);
	int fd = sdtest_connect_tcp(r.port, 5000);
	assert_true(fd >= 0);
	expect_refused_start(&r, pid, "socket activation: activated tcp socket (fd 3) listens on "
				      "0.0.0.0, which other hosts can reach, without a credential");
	close(fd);
	run_stop(&r);
}

static void test_sighup_swaps_certificate(void **state)
{
	(void)state;
	struct run r;
	start_server(&r);
	mfma_client *old = good_client(&r);
	struct mfma_error err;

	write_conf(&r, "other-server", cf(&r, "ca.pem"), NULL);
	assert_int_equal(harness_reload(r.pid, r.log, 10000), 0);
	mfma_client *c;
	int rc = connect_tls(&r, "localhost", cf(&r, "ca.pem"), cf(&r, "client.pem"),
			     cf(&r, "client.key"), &c, &err);
	printf("after SIGHUP, trusting the old CA: %d \"%s\"\n", rc, err.message);
	assert_true(rc < 0);
	assert_non_null(strstr(err.message, "certificate verify failed"));
	assert_int_equal(connect_tls(&r, "localhost", cf(&r, "other-ca.pem"), cf(&r, "client.pem"),
				     cf(&r, "client.key"), &c, &err),
			 0);
	gemm_checked(c, 16, 16, 16);
	mfma_close(c);
	/* The connection made before keeps its session. */
	gemm_checked(old, 16, 16, 16);
	mfma_close(old);

	/* A broken file: the daemon says so and keeps the certificate it has. */
	char bad[160];
	snprintf(bad, sizeof(bad), "%s/broken.pem", r.certs);
	write_file(bad, "-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n");
	char conf[1024];
	snprintf(conf, sizeof(conf),
		 "listen = { tcp = true; tcp_port = %d; tls_cert = \"%s\"; tls_key = \"%s\"; "
		 "tls_client_ca = \"%s\"; };\nmetrics = { enabled = true; port = %d; };\n",
		 r.port, bad, cf(&r, "server.key"), cf(&r, "ca.pem"), r.mport);
	write_file(r.conf, conf);
	assert_int_equal(harness_reload(r.pid, r.log, 10000), 0);
	assert_true(sdtest_file_contains(r.log, "broken.pem"));
	assert_int_equal(connect_tls(&r, "localhost", cf(&r, "other-ca.pem"), cf(&r, "client.pem"),
				     cf(&r, "client.key"), &c, &err),
			 0);
	assert_int_equal(mfma_ping(c, "x", 1, NULL, &err), 0);
	mfma_close(c);
	run_stop(&r);
}

/* Whether a TLS client with a certificate, authenticating with token,
 * is served. */
static bool token_served(const struct run *r, const char *token)
{
	mfma_client *c = good_client(r);
	struct mfma_error err;
	bool ok = mfma_authenticate(c, token, strlen(token), &err) == 0 &&
		  mfma_ping(c, "x", 1, NULL, &err) == 0;
	mfma_close(c);
	return ok;
}

/* A SIGHUP whose TLS files fail to load keeps the token too, as its log
 * line says: the new token was taken before the certificate failed. */
static void test_sighup_all_or_nothing(void **state)
{
	(void)state;
	struct run r;
	run_init(&r);
	char token[160], conf[1024];
	snprintf(token, sizeof(token), "%s/token", r.dir);
	write_file(token, "the-first-token-of-this-test\n");
	assert_int_equal(chmod(token, 0600), 0);
	const char *fmt = "listen = { tcp = true; tcp_port = %d; tls_cert = \"%s\"; "
			  "tls_key = \"%s\"; tls_client_ca = \"%s\"; token_file = \"%s\"; };\n";
	snprintf(conf, sizeof(conf), fmt, r.port, cf(&r, "server.pem"), cf(&r, "server.key"),
		 cf(&r, "ca.pem"), token);
	write_file(r.conf, conf);
	r.pid = spawn(&r);
	wait_ready(&r);
	assert_true(token_served(&r, "the-first-token-of-this-test"));
	write_file(token, "the-second-token-of-this-test\n");
	snprintf(conf, sizeof(conf), fmt, r.port, cf(&r, "server.pem"), cf(&r, "missing.key"),
		 cf(&r, "ca.pem"), token);
	write_file(r.conf, conf);
	assert_int_equal(harness_reload(r.pid, r.log, 10000), 0);
	assert_true(sdtest_file_contains(r.log, "new connections keep the token and certificates"));
	assert_true(token_served(&r, "the-first-token-of-this-test"));
	assert_false(token_served(&r, "the-second-token-of-this-test"));
	run_stop(&r);
}

/* An endpoint list of tls: endpoints: a dead first entry is passed over,
 * and a lost connection fails over to the next. */
static void test_failover(void **state)
{
	(void)state;
	struct run a, b;
	run_init(&a);
	run_init(&b);
	write_conf(&a, "server", cf(&a, "ca.pem"), NULL);
	/* Both daemons use a's certificates: one CA for the fleet. */
	snprintf(b.certs, sizeof(b.certs), "%s", a.certs);
	write_conf(&b, "server", cf(&b, "ca.pem"), NULL);
	int dead = harness_free_port();
	a.pid = spawn(&a);
	b.pid = spawn(&b);
	wait_ready(&a);
	wait_ready(&b);
	char ep[256];
	snprintf(ep, sizeof(ep), "tls:localhost:%d,tls:localhost:%d,tls:localhost:%d", dead, a.port,
		 b.port);
	struct mfma_tls t = { cf(&a, "ca.pem"), cf(&a, "client.pem"), cf(&a, "client.key"), NULL };
	mfma_client *c;
	struct mfma_error err;
	if (mfma_connect_tls(ep, &t, &c, &err) < 0)
		fail_msg("endpoint list: %s", err.message);
	mfma_set_timeout(c, 10000);
	char want[64];
	snprintf(want, sizeof(want), "tls:localhost:%d", a.port);
	assert_string_equal(mfma_endpoint(c), want);
	gemm_checked(c, 16, 16, 16);
	kill(a.pid, SIGTERM);
	assert_int_equal(sdtest_wait_exit(a.pid, 30000), 0);
	a.pid = 0;
	/* The call that finds the connection gone is resent on the next. */
	gemm_checked(c, 16, 16, 16);
	snprintf(want, sizeof(want), "tls:localhost:%d", b.port);
	assert_string_equal(mfma_endpoint(c), want);
	mfma_close(c);
	run_stop(&b);
	run_stop(&a);
}

/* A socket listening on 127.0.0.1:port that no one accepts from: the
 * kernel completes connections into its queue, and nothing answers them
 * until the caller does. */
static int listen_loopback(int port)
{
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	assert_int_equal(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(l, 64), 0);
	return l;
}

/* A lost connection whose new one stalls in the TLS handshake (a port
 * that takes the connection and says nothing, as a hung daemon's would):
 * the call gives up at its own timeout.  The handshake of a reconnection
 * was bounded by a fixed 30 s whatever the caller's timeout. */
static void test_reconnect_keeps_timeout(void **state)
{
	(void)state;
	struct run r;
	start_server(&r);
	mfma_client *c = good_client(&r);
	gemm_checked(c, 16, 16, 16);
	kill(r.pid, SIGTERM);
	assert_int_equal(sdtest_wait_exit(r.pid, 30000), 0);
	r.pid = 0;
	/* The port now takes connections (the kernel completes them into the
	 * queue) and never answers a ClientHello. */
	int l = listen_loopback(r.port);
	mfma_set_timeout(c, 500);
	struct mfma_error err;
	uint64_t t0 = mfma_clock_ns();
	int rc = mfma_ping(c, "x", 1, NULL, &err);
	double s = (double)(mfma_clock_ns() - t0) / 1e9;
	printf("a call whose reconnection stalls in the handshake: %d after %.2f s: %s\n", rc, s,
	       rc ? err.message : "");
	assert_true(rc < 0);
	assert_true(s < 3.0);
	assert_non_null(strstr(err.message, "not re-established in time"));
	mfma_close(c);
	close(l);
	run_stop(&r);
}

/* A first connection to a TLS port that takes it and never answers (a
 * hung daemon's): mfma_connect_timeout gives up at its timeout, and so
 * does mfmactl at --timeout.  The handshake had 30 s whatever the caller
 * said. */
static void test_connect_keeps_timeout(void **state)
{
	(void)state;
	struct run r;
	run_init(&r);
	int l = listen_loopback(r.port);
	char ep[64];
	snprintf(ep, sizeof(ep), "tls:localhost:%d", r.port);
	struct mfma_tls t = { .ca_file = cf(&r, "ca.pem"), .cert_file = cf(&r, "client.pem"),
			      .key_file = cf(&r, "client.key") };
	mfma_client *c = NULL;
	struct mfma_error err;
	uint64_t t0 = mfma_clock_ns();
	int rc = mfma_connect_timeout(ep, &t, 500, &c, &err);
	double s = (double)(mfma_clock_ns() - t0) / 1e9;
	printf("connect to a silent TLS port with 500 ms: %d after %.2f s: %s\n", rc, s,
	       rc ? err.message : "");
	assert_true(rc < 0);
	assert_null(c);
	assert_true(s < 2.0);
	const char *ctl_bin = env_or_empty("MFMACTL_BIN");
	if (ctl_bin[0]) {
		char cmd[512];
		snprintf(cmd, sizeof(cmd), "%s -e %s --tls-ca %s --timeout 500 ping >/dev/null 2>&1",
			 ctl_bin, ep, cf(&r, "ca.pem"));
		t0 = mfma_clock_ns();
		int st = system(cmd);
		s = (double)(mfma_clock_ns() - t0) / 1e9;
		printf("mfmactl --timeout 500 ping there: status %d after %.2f s\n", st, s);
		assert_true(st != 0);
		assert_true(s < 2.5);
	}
	close(l);
	run_stop(&r);
}

/* ---- a loopback proxy whose connections are slow to start ---- */

/* One connection at a time: each waits delay_ms before it connects to
 * the daemon's port (a TLS handshake through it takes that long more),
 * then relays both ways until either side closes or drop is set. */
struct slow_proxy {
	int lfd, port, up_port, delay_ms;
	_Atomic bool drop, stop;
	pthread_t thread;
};

static void relay(struct slow_proxy *px, int a)
{
	usleep((useconds_t)px->delay_ms * 1000);
	int b = sdtest_connect_tcp(px->up_port, 5000);
	if (b < 0)
		return;
	char buf[65536];
	while (!atomic_load(&px->drop) && !atomic_load(&px->stop)) {
		struct pollfd p[2] = { { a, POLLIN, 0 }, { b, POLLIN, 0 } };
		if (poll(p, 2, 20) <= 0)
			continue;
		int from = p[0].revents ? a : b, to = from == a ? b : a;
		ssize_t n = read(from, buf, sizeof(buf));
		if (n <= 0 || write(to, buf, (size_t)n) != n)
			break;
	}
	close(b);
}

static void *proxy_run(void *arg)
{
	struct slow_proxy *px = arg;
	while (!atomic_load(&px->stop)) {
		struct pollfd p = { px->lfd, POLLIN, 0 };
		if (poll(&p, 1, 20) <= 0)
			continue;
		int a = accept(px->lfd, NULL, NULL);
		if (a < 0)
			continue;
		relay(px, a);
		close(a);
		atomic_store(&px->drop, false);
	}
	return NULL;
}

static void proxy_start(struct slow_proxy *px, int up_port, int delay_ms)
{
	memset(px, 0, sizeof(*px));
	px->up_port = up_port;
	px->delay_ms = delay_ms;
	px->port = harness_free_port();
	px->lfd = listen_loopback(px->port);
	assert_int_equal(pthread_create(&px->thread, NULL, proxy_run, px), 0);
}

/* Closes the connection the proxy relays now, both sides. */
static void proxy_drop(struct slow_proxy *px)
{
	atomic_store(&px->drop, true);
	for (int i = 0; i < 200 && atomic_load(&px->drop); i++)
		usleep(5000);
	assert_false(atomic_load(&px->drop));
}

static void proxy_stop(struct slow_proxy *px)
{
	atomic_store(&px->stop, true);
	pthread_join(px->thread, NULL);
	close(px->lfd);
}

/* A connection lost with two GEMMs on it to resend: one whose own
 * deadline (timeout_us) passes before the wait, and one with 10 s.  The
 * new connection's TLS handshake takes 300 ms (a slow proxy): the live
 * GEMM is answered, the expired one fails DEADLINE_EXCEEDED.  The
 * reconnection was bounded by the expired GEMM's past deadline (each step
 * given 100 ms), and the live one failed with it. */
static void test_reconnect_bounded_by_live_requests(void **state)
{
	(void)state;
	struct run r;
	start_server(&r);
	struct slow_proxy px;
	proxy_start(&px, r.port, 300);
	char ep[64];
	snprintf(ep, sizeof(ep), "tls:localhost:%d", px.port);
	struct mfma_tls t = { .ca_file = cf(&r, "ca.pem"), .cert_file = cf(&r, "client.pem"),
			      .key_file = cf(&r, "client.key") };
	mfma_client *c;
	struct mfma_error err;
	if (mfma_connect_tls(ep, &t, &c, &err) < 0)
		fail_msg("through the proxy: %s", err.message);
	mfma_set_timeout(c, 10000);
	gemm_checked(c, 16, 16, 16);

	enum { M = 16, K = 16, N = 16 };
	static float a[M * K], b[K * N];
	for (size_t i = 0; i < M * K; i++)
		a[i] = (float)(i % 7) - 3.0f;
	for (size_t i = 0; i < K * N; i++)
		b[i] = (float)(i % 5) - 2.0f;
	struct mfma_gemm_args live, expired;
	harness_dense_f32_args(&live, a, b, M, K, N);
	harness_dense_f32_args(&expired, a, b, M, K, N);
	expired.timeout_us = 20000;
	uint64_t live_id, expired_id;
	/* Both written at once, after the proxy closed the connection. */
	mfma_cork(c);
	assert_int_equal(mfma_gemm_submit(c, &live, &live_id, &err), 0);
	assert_int_equal(mfma_gemm_submit(c, &expired, &expired_id, &err), 0);
	proxy_drop(&px);
	usleep(50000);
	(void)mfma_uncork(c, &err);
	usleep(100000); /* past the expired one's 20 ms */
	struct mfma_gemm_result res;
	uint64_t done;
	uint64_t t0 = mfma_clock_ns();
	int rc = mfma_wait(c, live_id, 10000, &done, &res, &err);
	double s = (double)(mfma_clock_ns() - t0) / 1e9;
	printf("the live GEMM after the reconnection: %d after %.2f s%s%s\n", rc, s, rc ? ": " : "",
	       rc ? err.message : "");
	assert_int_equal(rc, 0);
	assert_int_equal(done, live_id);
	assert_true(harness_worst_error(res.d.data, a, b, NULL, 1, 0, M, K, N) < 1e-5);
	mfma_gemm_result_free(&res);
	rc = mfma_wait(c, expired_id, 10000, &done, &res, &err);
	assert_int_equal(rc, MFMA_EREMOTE(MFMA_CODE_DEADLINE_EXCEEDED));
	mfma_close(c);
	proxy_stop(&px);
	run_stop(&r);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_client_certificates),
		cmocka_unit_test(test_handshake_stall),
		cmocka_unit_test(test_remote_needs_credential),
		cmocka_unit_test(test_sighup_swaps_certificate),
		cmocka_unit_test(test_sighup_all_or_nothing),
		cmocka_unit_test(test_failover),
		cmocka_unit_test(test_reconnect_keeps_timeout),
		cmocka_unit_test(test_reconnect_bounded_by_live_requests),
		cmocka_unit_test(test_connect_keeps_timeout),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
