/* The real mfmad as systemd runs it, without systemd: readiness, watchdog
 * and stop notifications on a test-owned NOTIFY_SOCKET; socket activation
 * through systemd-socket-activate; graceful stop with requests in flight;
 * reload (a changed limit applies, a broken file keeps the old one); and
 * /metrics after a known workload.
 *
 * Environment (set by meson): MFMAD_BIN, SOCKET_ACTIVATE (the path of
 * systemd-socket-activate, empty when absent), PROMTOOL (likewise). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cmocka.h>

#include "mfma.h"
#include "harness.h"
#include "npy.h"
#include "sdtest.h"

/* ---- the daemon under test ---- */

struct svc {
	char dir[64], sock[128], conf[128], log[128];
	pid_t pid;
};

static const char *env_or_empty(const char *name)
{
	const char *v = getenv(name);
	return v != NULL ? v : "";
}

static void write_file(const char *path, const char *text)
{
	/* Written aside and renamed, so a reload never reads half a file. */
	char tmp[160];
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	FILE *f = fopen(tmp, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(rename(tmp, path), 0);
}

static int unix_connect(const char *path)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	return r;
}

/* Starts mfmad with conf_text as its configuration and env added to its
 * environment.  With activate, systemd-socket-activate owns the socket
 * and starts mfmad on the first connection (that call does not wait);
 * otherwise mfmad binds it, and this waits until it accepts. */
static void svc_start(struct svc *s, const char *conf_text, const char *const *env,
		      const char *const *args, bool activate)
{
	memset(s, 0, sizeof(*s));
	strcpy(s->dir, "/tmp/mfmad-svc-XXXXXX");
	assert_non_null(mkdtemp(s->dir));
	snprintf(s->sock, sizeof(s->sock), "%s/mfmad.sock", s->dir);
	snprintf(s->conf, sizeof(s->conf), "%s/mfmad.conf", s->dir);
	snprintf(s->log, sizeof(s->log), "%s/mfmad.log", s->dir);
	write_file(s->conf, conf_text);

	const char *argv[32];
	int n = 0;
	if (activate) {
		argv[n++] = env_or_empty("SOCKET_ACTIVATE");
		argv[n++] = "-l";
		argv[n++] = s->sock;
		/* The activator passes the daemon only LISTEN_* and what -E names,
		 * not its own environment. */
		for (int i = 0; env != NULL && env[i] != NULL && n < 16; i++) {
			argv[n++] = "-E";
			argv[n++] = env[i];
		}
	}
	argv[n++] = env_or_empty("MFMAD_BIN");
	argv[n++] = "--config";
	argv[n++] = s->conf;
	if (!activate) {
		argv[n++] = "--socket";
		argv[n++] = s->sock;
	}
	argv[n++] = "--log-level";
	argv[n++] = "debug";
	for (int i = 0; args != NULL && args[i] != NULL && n < 31; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	s->pid = sdtest_spawn(argv, env, s->log);
	assert_true(s->pid > 0);

	/* A socket file that accepts: mfmad's own, or the activator's. */
	for (int i = 0; i < 600; i++) {
		struct stat st;
		if (stat(s->sock, &st) == 0 && (activate || unix_connect(s->sock) == 0))
			return;
		if (kill(s->pid, 0) != 0)
			break;
		usleep(25000);
	}
	sdtest_print_file(s->log);
	fail_msg("mfmad did not listen on %s", s->sock);
}

/* SIGTERM and the exit status (the log is printed when it is not 0). */
static int svc_stop(struct svc *s)
{
	int st = 0;
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		st = sdtest_wait_exit(s->pid, 30000);
		s->pid = 0;
		if (st != 0)
			sdtest_print_file(s->log);
	}
	return st;
}

static void svc_cleanup(struct svc *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGKILL);
		sdtest_wait_exit(s->pid, 5000);
	}
	unlink(s->sock);
	unlink(s->conf);
	unlink(s->log);
	rmdir(s->dir);
}

static mfma_client *svc_connect(const struct svc *s)
{
	char ep[160];
	snprintf(ep, sizeof(ep), "unix:%s", s->sock);
	mfma_client *c = NULL;
	struct mfma_error err;
	if (mfma_connect(ep, &c, &err) != 0)
		fail_msg("connect %s: %s", ep, err.message);
	mfma_set_timeout(c, 60000);
	return c;
}

/* ---- GEMMs with a float64 reference ---- */

struct gemm {
	uint32_t m, k, n;
	float *a, *b;
	struct mfma_gemm_args args;
};

static float rand_nonzero(void)
{
	/* Magnitudes 1/16..1 with random signs: never zero. */
	float v = (float)(1 + rand() % 16) / 16.0f;
	return rand() % 2 ? v : -v;
}

static void gemm_init(struct gemm *g, uint32_t m, uint32_t k, uint32_t n)
{
	g->m = m;
	g->k = k;
	g->n = n;
	g->a = malloc(sizeof(float) * m * k);
	g->b = malloc(sizeof(float) * k * n);
	assert_non_null(g->a);
	assert_non_null(g->b);
	for (size_t i = 0; i < (size_t)m * k; i++)
		g->a[i] = rand_nonzero();
	for (size_t i = 0; i < (size_t)k * n; i++)
		g->b[i] = rand_nonzero();
	mfma_gemm_args_init(&g->args);
	g->args.a.kind = MFMA_OPERAND_DENSE;
	g->args.a.dense = (struct mfma_matrix){ m, k, MFMA_TYPE_F32, g->a, sizeof(float) * m * k };
	g->args.b = (struct mfma_matrix){ k, n, MFMA_TYPE_F32, g->b, sizeof(float) * k * n };
}

static void gemm_free(struct gemm *g)
{
	free(g->a);
	free(g->b);
}

/* The relative Frobenius error of the result against float64. */
static double gemm_error(const struct gemm *g, const struct mfma_gemm_result *r)
{
	assert_int_equal(r->d.rows, g->m);
	assert_int_equal(r->d.cols, g->n);
	assert_int_equal(r->d.dtype, MFMA_TYPE_F32);
	const float *d = r->d.data;
	double num = 0, den = 0;
	for (uint32_t i = 0; i < g->m; i++)
		for (uint32_t j = 0; j < g->n; j++) {
			double ref = 0;
			for (uint32_t p = 0; p < g->k; p++)
				ref += (double)g->a[(size_t)i * g->k + p] * g->b[(size_t)p * g->n + j];
			double diff = d[(size_t)i * g->n + j] - ref;
			num += diff * diff;
			den += ref * ref;
		}
	return den > 0 ? sqrt(num / den) : 0;
}

/* ---- readiness, watchdog, status, stop ---- */

static void test_readiness_watchdog_stopping(void **state)
{
	(void)state;
	struct sdtest_manager m;
	assert_int_equal(sdtest_manager_start(&m), 0);
	char ns[160];
	snprintf(ns, sizeof(ns), "NOTIFY_SOCKET=%s", m.path);
	/* WatchdogSec=0.3s: a ping every 150 ms.  No WATCHDOG_PID: the pid is
	 * not known before the spawn, and sd_watchdog_enabled() accepts that. */
	const char *env[] = { ns, "WATCHDOG_USEC=300000", NULL };
	struct svc s;
	svc_start(&s, "status_interval_ms = 100;\n", env, NULL, false);

	int from = 0;
	int ready = sdtest_manager_find(&m, "READY=1", &from, 15000);
	if (ready < 0) {
		sdtest_print_file(s.log);
		fail_msg("no READY=1");
	}
	/* READY=1 comes once the socket accepts: a connection made right when
	 * it arrives succeeds. */
	assert_int_equal(unix_connect(s.sock), 0);
	assert_non_null(strstr(m.msg[ready], "STATUS=serving: "));
	assert_int_equal(sdtest_manager_count(&m, "READY=1", 0), 1);

	/* 1.2 s of serving. */
	uint64_t t0 = m.at[ready];
	usleep(1200000);
	int upto = sdtest_manager_wait(&m, 0, 0);
	int pings = 0;
	uint64_t first = 0, last = 0;
	for (int i = 0; i < upto; i++) {
		if (strcmp(m.msg[i], "WATCHDOG=1") != 0 || m.at[i] < t0)
			continue;
		if (pings == 0)
			first = m.at[i];
		last = m.at[i];
		pings++;
	}
	double mean_ms = pings > 1 ? (double)(last - first) / (pings - 1) / 1e6 : 0;
	print_message("%d WATCHDOG=1 in 1.2 s after READY=1, every %.1f ms on average\n", pings,
		      mean_ms);
	assert_true(pings >= 6 && pings <= 10);
	assert_true(mean_ms > 130 && mean_ms < 180);
	/* STATUS= refreshed every 100 ms. */
	assert_true(sdtest_manager_count(&m, "STATUS=serving: 1 device(s), 0 requests, 0 queued, "
					     "0 in flight", ready + 1) >= 8);

	int stop_from = upto;
	assert_int_equal(svc_stop(&s), 0);
	int stopping = sdtest_manager_find(&m, "STOPPING=1", &stop_from, 5000);
	assert_true(stopping >= 0);
	assert_non_null(strstr(m.msg[stopping], "STATUS=stopping: "));
	svc_cleanup(&s);
	sdtest_manager_stop(&m);
}

/* ---- socket activation ---- */

static void test_socket_activation(void **state)
{
	(void)state;
	if (env_or_empty("SOCKET_ACTIVATE")[0] == '\0') {
		print_message("systemd-socket-activate not found; skipped\n");
		skip();
	}
	struct sdtest_manager m;
	assert_int_equal(sdtest_manager_start(&m), 0);
	char ns[160];
	snprintf(ns, sizeof(ns), "NOTIFY_SOCKET=%s", m.path);
	const char *env[] = { ns, NULL };
	struct svc s;
	svc_start(&s, "", env, NULL, true);
	/* The activator made the socket; mfmad has not run yet. */
	assert_int_equal(sdtest_manager_wait(&m, 1, 200), 0);

	/* The first connection starts mfmad, which takes the socket (fd 3) and
	 * answers on this very connection. */
	mfma_client *c = svc_connect(&s);
	struct mfma_error err;
	uint64_t rtt;
	assert_int_equal(mfma_ping(c, "abc", 3, &rtt, &err), 0);
	struct gemm g;
	gemm_init(&g, 33, 20, 17);
	struct mfma_gemm_result r;
	if (mfma_gemm(c, &g.args, &r, &err) != 0)
		fail_msg("gemm through the activated socket: %s", err.message);
	double e = gemm_error(&g, &r);
	print_message("GEMM 33x20x17 f32 through the activated socket: rel. error %.2e\n", e);
	assert_true(e < 1e-5);
	mfma_gemm_result_free(&r);
	gemm_free(&g);
	mfma_close(c);

	int from = 0;
	assert_true(sdtest_manager_find(&m, "READY=1", &from, 5000) >= 0);
	assert_true(sdtest_file_contains(s.log, "activated unix socket (fd 3)"));
	assert_false(sdtest_file_contains(s.log, "listening on unix:"));

	assert_int_equal(svc_stop(&s), 0);
	/* The socket belongs to the manager: mfmad must not remove it. */
	struct stat st;
	assert_int_equal(stat(s.sock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	svc_cleanup(&s);
	sdtest_manager_stop(&m);
}

/* ---- graceful stop ---- */

/* Submits slow GEMMs on one connection until the daemon reports at least
 * two of them waiting in the device queue (so the test does not depend on
 * the machine's speed), sends SIGTERM, and collects every answer.  Returns
 * how many were OK; sets *answered, *unavailable (the "shutting down"
 * answers) and the daemon's exit status. */
static int run_stop(const char *conf, int *submitted, int *unavailable, int *exit_status)
{
	struct svc s;
	const char *args[] = { "--threads", "1", NULL };
	svc_start(&s, conf, NULL, args, false);
	mfma_client *c = svc_connect(&s);
	struct mfma_error err;
	struct gemm g;
	/* A resident 8192x2048 weight times 2048x64: 2.1 GFLOP per request
	 * for 512 KiB on the wire, so the queue builds even where the socket
	 * is slower than the CPU (a loaded CI machine moves ~150 MB/s). */
	gemm_init(&g, 8192, 2048, 64);
	struct mfma_load_args la;
	mfma_load_args_init(&la);
	la.name = "stop-test";
	la.a = g.args.a;
	assert_int_equal(mfma_load_weight(c, &la, NULL, &err), 0);
	g.args.a.kind = MFMA_OPERAND_WEIGHT;
	g.args.a.weight = "stop-test";
	uint32_t queued = 0;
	*submitted = 0;
	while (queued < 2 && *submitted < 64) {
		for (int i = 0; i < 4; i++) {
			uint64_t id;
			assert_int_equal(mfma_gemm_submit(c, &g.args, &id, &err), 0);
			(*submitted)++;
		}
		/* Status is answered by the loop at once, after it has read the
		 * frames before it. */
		struct mfma_status st;
		assert_int_equal(mfma_status(c, &st, &err), 0);
		assert_int_equal(st.n_devices, 1);
		queued = st.devices[0].queue_depth;
		mfma_status_free(&st);
	}
	assert_true(queued >= 2);

	kill(s.pid, SIGTERM);
	int ok = 0;
	*unavailable = 0;
	/* The first answer is checked once all are in: its float64 reference
	 * (1 G multiply-adds) takes a minute under ThreadSanitizer, longer
	 * than the daemon waits for a client to take its answers
	 * (limits.write_timeout_ms). */
	struct mfma_gemm_result first = { 0 };
	for (int i = 0; i < *submitted; i++) {
		uint64_t done;
		struct mfma_gemm_result r;
		int rc = mfma_wait(c, MFMA_ANY, 120000, &done, &r, &err);
		if (rc == 0) {
			if (ok == 0)
				first = r;
			else
				mfma_gemm_result_free(&r);
			ok++;
		} else if (rc == MFMA_EREMOTE(MFMA_CODE_UNAVAILABLE)) {
			if (strstr(err.message, "shutting down") == NULL)
				fail_msg("UNAVAILABLE without \"shutting down\": %s", err.message);
			(*unavailable)++;
		} else {
			sdtest_print_file(s.log);
			fail_msg("request %d of %d not answered: %d %s", i + 1, *submitted, rc,
				 err.message);
		}
		/* New connections are refused once stopping began (by the second
		 * answer SIGTERM has long been handled). */
		if (i == 1)
			assert_true(unix_connect(s.sock) != 0);
	}
	mfma_close(c);
	*exit_status = sdtest_wait_exit(s.pid, 30000);
	if (*exit_status != 0)
		sdtest_print_file(s.log);
	s.pid = 0;
	if (ok) {
		assert_true(gemm_error(&g, &first) < 1e-5);
		mfma_gemm_result_free(&first);
	}
	gemm_free(&g);
	svc_cleanup(&s);
	return ok;
}

static void test_graceful_stop_finishes_in_flight(void **state)
{
	(void)state;
	int n, unavailable, status;
	int ok = run_stop("shutdown_grace_ms = 120000;\n", &n, &unavailable, &status);
	print_message("long grace: %d submitted, %d ok, %d shutting down, exit %d\n", n, ok,
		      unavailable, status);
	assert_int_equal(ok, n);
	assert_int_equal(unavailable, 0);
	assert_int_equal(status, 0);
}

static void test_graceful_stop_grace_expires(void **state)
{
	(void)state;
	int n, unavailable, status;
	/* Batching off: with it the worker takes every queued request of the
	 * weight in one launch the moment the running one ends, and when that
	 * falls within the 1 ms grace none is left to answer "shutting down". */
	int ok = run_stop("shutdown_grace_ms = 1;\nbatching = { enabled = false; };\n", &n,
			  &unavailable, &status);
	print_message("1 ms grace: %d submitted, %d ok, %d shutting down, exit %d\n", n, ok,
		      unavailable, status);
	assert_int_equal(ok + unavailable, n);
	/* At least the two that were waiting when SIGTERM came, less one the
	 * worker may have started meanwhile. */
	assert_true(unavailable >= 1);
	assert_true(ok >= 1);
	assert_int_equal(status, 0);
}

/* ---- reload ---- */

/* A GEMM whose M is `m`: 0, or the daemon's code. */
static int gemm_with_m(mfma_client *c, uint32_t m, char *msg, size_t msglen)
{
	struct gemm g;
	gemm_init(&g, m, 8, 8);
	struct mfma_gemm_result r;
	struct mfma_error err;
	int rc = mfma_gemm(c, &g.args, &r, &err);
	gemm_free(&g);
	if (rc == 0) {
		mfma_gemm_result_free(&r);
		return 0;
	}
	if (msg != NULL)
		snprintf(msg, msglen, "%s", err.message);
	assert_true(MFMA_IS_REMOTE(rc));
	return MFMA_REMOTE_CODE(rc);
}

static void test_reload(void **state)
{
	(void)state;
	struct sdtest_manager m;
	assert_int_equal(sdtest_manager_start(&m), 0);
	char ns[160];
	snprintf(ns, sizeof(ns), "NOTIFY_SOCKET=%s", m.path);
	const char *env[] = { ns, NULL };
	struct svc s;
	svc_start(&s, "limits = { max_dim = 64; };\n", env, NULL, false);
	int from = 0;
	assert_true(sdtest_manager_find(&m, "READY=1", &from, 15000) >= 0);
	mfma_client *c = svc_connect(&s);
	char msg[512];

	assert_int_equal(gemm_with_m(c, 100, msg, sizeof(msg)), MFMA_CODE_INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "64"));

	/* A raised limit applies after SIGHUP, bracketed by RELOADING=1 and
	 * READY=1. */
	write_file(s.conf, "limits = { max_dim = 128; };\n");
	kill(s.pid, SIGHUP);
	assert_true(sdtest_manager_find(&m, "RELOADING=1", &from, 5000) >= 0);
	assert_true(sdtest_manager_find(&m, "READY=1", &from, 5000) >= 0);
	assert_int_equal(gemm_with_m(c, 100, NULL, 0), 0);
	assert_int_equal(gemm_with_m(c, 200, msg, sizeof(msg)), MFMA_CODE_INVALID_ARGUMENT);

	/* A broken file is reported and the running configuration kept. */
	write_file(s.conf, "limits = { max_dim = 32 \n");
	kill(s.pid, SIGHUP);
	assert_true(sdtest_manager_find(&m, "RELOADING=1", &from, 5000) >= 0);
	assert_true(sdtest_manager_find(&m, "READY=1", &from, 5000) >= 0);
	assert_true(sdtest_file_contains(s.log, "reload failed, keeping the old configuration"));
	assert_int_equal(gemm_with_m(c, 100, NULL, 0), 0);
	assert_int_equal(gemm_with_m(c, 200, NULL, 0), MFMA_CODE_INVALID_ARGUMENT);
	/* An out-of-range value is refused the same way. */
	write_file(s.conf, "limits = { max_dim = 0; };\n");
	kill(s.pid, SIGHUP);
	assert_true(sdtest_manager_find(&m, "READY=1", &from, 5000) >= 0);
	assert_int_equal(gemm_with_m(c, 100, NULL, 0), 0);

	mfma_close(c);
	assert_int_equal(svc_stop(&s), 0);
	svc_cleanup(&s);
	sdtest_manager_stop(&m);
}

/* ---- signals while the weights load at start ---- */

/* A daemon of dir whose one declared weight loads for 1.5 s
 * (MFMAD_TEST_CPU_LOAD_MS), started without waiting for its socket. */
static pid_t start_slow(const char *dir, const char *ns, char *sock, char *log)
{
	char conf[160], npy[160], text[400];
	snprintf(sock, 100, "%s/mfmad.sock", dir);
	snprintf(log, 100, "%s/mfmad.log", dir);
	snprintf(conf, sizeof(conf), "%s/mfmad.conf", dir);
	snprintf(npy, sizeof(npy), "%s/w.npy", dir);
	uint8_t hdr[NPY_HEADER_MAX];
	size_t hlen = npy_write_header(NPY_F4, 16, 16, hdr);
	float a[16 * 16] = { 1.0f };
	FILE *f = fopen(npy, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(hdr, 1, hlen, f), hlen);
	assert_int_equal(fwrite(a, 1, sizeof(a), f), sizeof(a));
	assert_int_equal(fclose(f), 0);
	snprintf(text, sizeof(text), "weights = { declare = ( { name = \"w\"; file = \"%s\"; } ); };\n",
		 npy);
	write_file(conf, text);
	const char *argv[] = { env_or_empty("MFMAD_BIN"), "--config", conf, "--socket", sock,
			       "--backends", "cpu", "--log-level", "debug", NULL };
	const char *env[] = { ns, "MFMAD_TEST_CPU_LOAD_MS=1500", NULL };
	pid_t pid = sdtest_spawn(argv, env, log);
	assert_true(pid > 0);
	for (int i = 0; i < 500 && !sdtest_file_contains(log, "declared weight 'w': loading"); i++)
		usleep(10000);
	assert_true(sdtest_file_contains(log, "declared weight 'w': loading"));
	return pid;
}

/* SIGHUP and SIGTERM while the declared weights load, before READY=1,
 * and the start asking systemd for more time meanwhile.
 * SIGHUP is kept for once the daemon is ready: it sent READY=1 at once
 * (its reload's), before any socket, which systemd takes for the start's
 * end.  SIGTERM ends the start once the load under way is over, exit 0,
 * never READY=1: the daemon went on to listen and say READY=1 after its
 * STOPPING=1, and no second SIGTERM stopped it. */
static void test_signals_while_starting(void **state)
{
	(void)state;
	struct sdtest_manager m;
	assert_int_equal(sdtest_manager_start(&m), 0);
	char ns[160], dir[64], sock[100], log[100];
	snprintf(ns, sizeof(ns), "NOTIFY_SOCKET=%s", m.path);

	strcpy(dir, "/tmp/mfmad-svc-XXXXXX");
	assert_non_null(mkdtemp(dir));
	pid_t pid = start_slow(dir, ns, sock, log);
	kill(pid, SIGHUP);
	int from = 0;
	int ready = sdtest_manager_find(&m, "READY=1", &from, 10000);
	assert_true(ready >= 0);
	/* READY=1 once the socket accepts, the weight resident. */
	assert_int_equal(unix_connect(sock), 0);
	assert_true(sdtest_file_contains(log, "declared weight 'w' resident"));
	assert_true(sdtest_file_contains(log, "SIGHUP while starting"));
	/* The slow start asked systemd for more time (EXTEND_TIMEOUT_USEC)
	 * before it was ready. */
	int ext_from = 0;
	int ext = sdtest_manager_find(&m, "EXTEND_TIMEOUT_USEC=120000000", &ext_from, 0);
	assert_true(ext >= 0 && ext < ready);
	assert_non_null(strstr(m.msg[ext], "STATUS=starting: "));
	/* Then the reload that SIGHUP asked for. */
	assert_true(sdtest_manager_find(&m, "RELOADING=1", &from, 5000) > ready);
	assert_true(sdtest_manager_find(&m, "READY=1", &from, 5000) >= 0);
	kill(pid, SIGTERM);
	assert_int_equal(sdtest_wait_exit(pid, 20000), 0);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	(void)!system(cmd);

	strcpy(dir, "/tmp/mfmad-svc-XXXXXX");
	assert_non_null(mkdtemp(dir));
	int before = sdtest_manager_wait(&m, 0, 0);
	pid = start_slow(dir, ns, sock, log);
	uint64_t t0 = sdtest_now_ns();
	kill(pid, SIGTERM);
	int st = sdtest_wait_exit(pid, 10000);
	double s = (double)(sdtest_now_ns() - t0) / 1e9;
	print_message("SIGTERM while a declared weight loads: exit %d after %.2f s\n", st, s);
	if (st != 0)
		sdtest_print_file(log);
	assert_int_equal(st, 0);
	assert_true(s < 5.0);
	from = before;
	assert_true(sdtest_manager_find(&m, "STOPPING=1", &from, 1000) >= 0);
	assert_int_equal(sdtest_manager_count(&m, "READY=1", before), 0);
	assert_false(sdtest_file_contains(log, "ready: "));
	assert_true(sdtest_file_contains(log, "stopped while starting"));
	struct stat sst;
	assert_int_equal(stat(sock, &sst), -1);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	(void)!system(cmd);
	sdtest_manager_stop(&m);
}

/* ---- metrics after a known workload ---- */

/* The value of the sample line `series` in a /metrics page, or -1. */
static double sample(const char *page, const char *series)
{
	size_t n = strlen(series);
	for (const char *p = page; (p = strstr(p, series)) != NULL; p++)
		if ((p == page || p[-1] == '\n') && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

static void scrape(int port, char *page, size_t len)
{
	char head[1024];
	assert_int_equal(sdtest_http(AF_INET, port, "GET", "/metrics", head, sizeof(head), page, len),
			 200);
	assert_non_null(strstr(head, "text/plain; version=0.0.4"));
}

static void test_metrics_after_workload(void **state)
{
	(void)state;
	int port = harness_free_port();
	assert_true(port > 0);
	char conf[256];
	snprintf(conf, sizeof(conf), "metrics = { enabled = true; port = %d; };\n", port);
	struct svc s;
	svc_start(&s, conf, NULL, NULL, false);
	static char before[1 << 18], after[1 << 18];
	char body[64];

	/* The socket accepts a moment before the daemon declares itself ready;
	 * a probe polls, as Kubernetes or a load balancer would. */
	int code = 0;
	for (int i = 0; i < 500 && code != 200; i++) {
		code = sdtest_http(AF_INET, port, "GET", "/readyz", NULL, 0, body, sizeof(body));
		if (code != 200)
			usleep(10000);
	}
	assert_int_equal(code, 200);
	assert_string_equal(body, "ready\n");
	assert_int_equal(sdtest_http(AF_INET, port, "GET", "/healthz", NULL, 0, body, sizeof(body)),
			 200);
	/* svc_start's probe connected before the loop ran; /readyz can say
	 * 200 before the loop has accepted (and counted) it.  Take the "before"
	 * page once it has, or the workload's delta counts the probe. */
	scrape(port, before, sizeof(before));
	for (int i = 0; i < 200 && sample(before, "mfmad_connections_total") < 1; i++) {
		usleep(10000);
		scrape(port, before, sizeof(before));
	}

	/* 5 pings, 3 good GEMMs, 2 bad ones (B's rows do not match A's columns),
	 * 1 status, on 2 connections. */
	mfma_client *c = svc_connect(&s);
	mfma_client *c2 = svc_connect(&s);
	struct mfma_error err;
	for (int i = 0; i < 5; i++)
		assert_int_equal(mfma_ping(i % 2 ? c2 : c, "x", 1, NULL, &err), 0);
	struct gemm g;
	gemm_init(&g, 16, 24, 8);
	for (int i = 0; i < 3; i++) {
		struct mfma_gemm_result r;
		assert_int_equal(mfma_gemm(c, &g.args, &r, &err), 0);
		mfma_gemm_result_free(&r);
	}
	g.args.b.rows = 12;
	g.args.b.bytes = sizeof(float) * 12 * 8;
	for (int i = 0; i < 2; i++) {
		struct mfma_gemm_result r;
		assert_int_equal(mfma_gemm(c2, &g.args, &r, &err),
				 MFMA_EREMOTE(MFMA_CODE_INVALID_ARGUMENT));
	}
	struct mfma_status st;
	assert_int_equal(mfma_status(c, &st, &err), 0);
	mfma_status_free(&st);

	scrape(port, after, sizeof(after));
#define DELTA(series) (sample(after, series) - sample(before, series))
	assert_true(DELTA("mfmad_requests_total{kind=\"ping\",result=\"ok\"}") == 5);
	assert_true(DELTA("mfmad_requests_total{kind=\"gemm\",result=\"ok\"}") == 3);
	assert_true(DELTA("mfmad_requests_total{kind=\"gemm\",result=\"invalid\"}") == 2);
	assert_true(DELTA("mfmad_requests_total{kind=\"status\",result=\"ok\"}") == 1);
	assert_true(DELTA("mfmad_request_duration_seconds_count") == 11);
	assert_true(DELTA("mfmad_request_duration_seconds_bucket{le=\"+Inf\"}") == 11);
	assert_true(DELTA("mfmad_request_duration_seconds_sum") > 0);
	assert_true(DELTA("mfmad_gemm_flops_total") == 3 * 2.0 * 16 * 24 * 8);
	assert_true(DELTA("mfmad_gemm_kernel_seconds_total") > 0);
	assert_true(DELTA("mfmad_gemm_server_seconds_total") >=
		    DELTA("mfmad_gemm_kernel_seconds_total"));
	assert_true(DELTA("mfmad_device_completed_total{device=\"0\"}") == 3);
	assert_true(DELTA("mfmad_connections_total") == 2);
	assert_true(sample(after, "mfmad_connections_open") == 2);
	assert_true(sample(after, "mfmad_in_flight_requests") == 0);
	assert_true(sample(after, "mfmad_ready") == 1);
	assert_true(sample(after, "mfmad_devices") == 1);
	assert_non_null(strstr(after, "mfmad_device_info{device=\"0\",backend=\"cpu\""));
	assert_true(sample(after, "mfmad_device_memory_total_bytes{device=\"0\"}") > 0);
	gemm_free(&g);
	mfma_close(c2);
	mfma_close(c);

	/* Prometheus's own checker on the live page. */
	const char *promtool = env_or_empty("PROMTOOL");
	if (promtool[0] != '\0') {
		char path[] = "/tmp/mfmad-scrape-XXXXXX";
		int fd = mkstemp(path);
		assert_true(fd >= 0);
		size_t len = strlen(after);
		assert_int_equal(write(fd, after, len), (ssize_t)len);
		close(fd);
		char cmd[512], out[2048];
		snprintf(cmd, sizeof(cmd), "'%s' check metrics < '%s' 2>&1", promtool, path);
		FILE *p = popen(cmd, "r");
		size_t got = fread(out, 1, sizeof(out) - 1, p);
		out[got] = '\0';
		int rc = pclose(p);
		unlink(path);
		if (rc != 0 || got != 0)
			fail_msg("promtool check metrics: %s", out);
	}

	/* The HTTP server goes with the daemon. */
	kill(s.pid, SIGTERM);
	int status = sdtest_wait_exit(s.pid, 30000);
	s.pid = 0;
	assert_int_equal(status, 0);
	assert_true(sdtest_http(AF_INET, port, "GET", "/healthz", NULL, 0, body, sizeof(body)) < 0);
	svc_cleanup(&s);
}

int main(void)
{
	if (env_or_empty("MFMAD_BIN")[0] == '\0') {
		fprintf(stderr, "MFMAD_BIN is not set\n");
		return 1;
	}
	srand(12345);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_readiness_watchdog_stopping),
		cmocka_unit_test(test_socket_activation),
		cmocka_unit_test(test_graceful_stop_finishes_in_flight),
		cmocka_unit_test(test_graceful_stop_grace_expires),
		cmocka_unit_test(test_reload),
		cmocka_unit_test(test_signals_while_starting),
		cmocka_unit_test(test_metrics_after_workload),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
