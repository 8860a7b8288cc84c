/* The request path's defects found while reshaping the daemon, each
 * against the real mfmad (CPU backend) over its real socket:
 *
 * - a failed --replace keeps the old weight (mfmactl, as a user sees it);
 * - a timeout_us too large to be a deadline is refused, not wrapped;
 * - a queued request whose deadline passes is answered then, not when
 *   the device gets to it;
 * - priorities age, so a low priority does not starve;
 * - an answer larger than the socket takes, sent by the device worker to
 *   a client that reads late, arrives whole, and the next answer after it;
 * - more listening sockets than the daemon holds is a clear error. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "frame.h"
#include "harness.h"
#include "mfma.pb-c.h"
#include "mfma_clock.h"
#include "rawwire.h"

/* ---- raw protocol ---- */

static void send_gemm(int fd, uint64_t id, uint32_t m, uint32_t n, uint32_t k, uint32_t prio,
		      uint64_t timeout_us)
{
	rw_send_gemm(fd, id, m, n, k, false, prio, timeout_us);
}

/* The daemon's own 2:4 loop on one thread (cpu.threads = 1, not
 * OpenBLAS, whose threads the config does not hold), 2048^3: long
 * enough that requests queue behind it on any machine. */
static const char one_thread[] = "cpu = { threads = 1; devices = 1; };";
#define LONG_N 2048

static void send_long(int fd, uint64_t id)
{
	rw_send_gemm(fd, id, LONG_N, LONG_N, LONG_N, true, 0, 0);
}

static Mfma__V1__Response *read_response(int fd, int timeout_ms)
{
	return rw_read(fd, timeout_ms);
}

/* ---- mfmactl ---- */

/* A rows x cols f32 .npy file. */
static void write_npy(const char *path, uint32_t rows, uint32_t cols)
{
	char hdr[128];
	int n = snprintf(hdr, sizeof(hdr),
			 "{'descr': '<f4', 'fortran_order': False, 'shape': (%u, %u), }", rows, cols);
	int total = 10 + n + 1;
	int pad = (64 - total % 64) % 64;
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	uint16_t hl = (uint16_t)(n + pad + 1);
	fwrite("\x93NUMPY\x01\x00", 1, 8, f);
	fwrite(&hl, 2, 1, f);
	fwrite(hdr, 1, (size_t)n, f);
	for (int i = 0; i < pad; i++)
		fputc(' ', f);
	fputc('\n', f);
	for (size_t i = 0; i < (size_t)rows * cols; i++) {
		float v = (float)(i % 17) - 8.0f;
		fwrite(&v, 4, 1, f);
	}
	fclose(f);
}

static char out[1 << 16];

static void start(struct mfmad_proc *p, const char *conf)
{
	assert_int_equal(harness_start(p, conf, NULL), 0);
}

static void stop(struct mfmad_proc *p)
{
	assert_int_equal(harness_stop(p), 0);
}

static int ctl(const struct mfmad_proc *p, ...)
{
	const char *argv[32];
	int n = 0;
	argv[n++] = getenv("MFMACTL_BIN");
	assert_non_null(argv[0]);
	argv[n++] = "-e";
	argv[n++] = p->endpoint;
	va_list ap;
	va_start(ap, p);
	const char *a;
	while ((a = va_arg(ap, const char *)) && n < 31)
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	return harness_run(argv, out, sizeof(out));
}

/* A replace that does not fit must leave the old weight serving. */
static void test_failed_replace_keeps_the_old_weight(void **state)
{
	(void)state;
	struct mfmad_proc p;
	start(&p, "weights = { budget_mb = 1; };");
	char w[160];
	snprintf(w, sizeof(w), "%s/W.npy", p.dir);
	write_npy(w, 512, 512); /* 1 MiB of f32: the whole budget */
	assert_int_equal(ctl(&p, "load", "w1", w, NULL), 0);
	assert_int_not_equal(ctl(&p, "load", "w1", w, "--replace", NULL), 0);
	assert_int_equal(ctl(&p, "--json", "weights", NULL), 0);
	assert_non_null(strstr(out, "\"w1\""));
	/* And it still serves. */
	char b[160];
	snprintf(b, sizeof(b), "%s/B.npy", p.dir);
	write_npy(b, 512, 2);
	assert_int_equal(ctl(&p, "submit", "-w", "w1", "-b", b, NULL), 0);
	unlink(w);
	unlink(b);
	stop(&p);
}

/* A replace that fits swaps the weight under the same name. */
static void test_replace_swaps(void **state)
{
	(void)state;
	struct mfmad_proc p;
	start(&p, "weights = { budget_mb = 2; };");
	char w[160], w2[160];
	snprintf(w, sizeof(w), "%s/W.npy", p.dir);
	snprintf(w2, sizeof(w2), "%s/W2.npy", p.dir);
	write_npy(w, 512, 512);
	write_npy(w2, 256, 512);
	assert_int_equal(ctl(&p, "load", "w1", w, NULL), 0);
	assert_int_equal(ctl(&p, "load", "w1", w2, "--replace", NULL), 0);
	assert_int_equal(ctl(&p, "--json", "weights", NULL), 0);
	assert_non_null(strstr(out, "\"rows\": 256"));
	assert_null(strstr(out, "\"rows\": 512"));
	unlink(w);
	unlink(w2);
	stop(&p);
}

/* An unload that comes while a replace of the name loads is refused,
 * saying why: it unloaded the old version and answered OK, and the
 * replacement then became the name, loaded after its unload. */
static void test_unload_during_replace(void **state)
{
	(void)state;
	struct mfmad_proc p;
	start(&p, NULL);
	int fd = harness_connect_raw(&p);
	assert_true(fd >= 0);
	struct rw_mat a1, a2;
	rw_mat_init(&a1, 4, 4, 1);
	rw_mat_init(&a2, 4, 4, 2);
	Mfma__V1__LoadWeight lw;
	Mfma__V1__Request load;
	rw_load_request(&load, &lw, 1, "w", &a1.op);
	rw_send(fd, &load);
	Mfma__V1__Response *r = rw_read(fd, 10000);
	assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
	mfma__v1__response__free_unpacked(r, NULL);
	/* The replace and the unload in one write: the daemon handles both
	 * before the replacement's preparation can end. */
	Mfma__V1__LoadWeight lw2;
	Mfma__V1__Request replace;
	rw_load_request(&replace, &lw2, 2, "w", &a2.op);
	lw2.has_replace = 1;
	lw2.replace = 1;
	Mfma__V1__UnloadWeight uw = MFMA__V1__UNLOAD_WEIGHT__INIT;
	uw.name = "w";
	Mfma__V1__Request unload = MFMA__V1__REQUEST__INIT;
	unload.has_id = 1;
	unload.id = 3;
	unload.body_case = MFMA__V1__REQUEST__BODY_UNLOAD_WEIGHT;
	unload.unload_weight = &uw;
	const Mfma__V1__Request *both[] = { &replace, &unload };
	rw_send_together(fd, both, 2);
	for (int i = 0; i < 2; i++) {
		r = rw_read(fd, 10000);
		print_message("  id %" PRIu64 ": code %d: %s\n", r->id, (int)r->status->code,
			      r->status->message ? r->status->message : "");
		if (r->id == 3) {
			assert_int_equal(r->status->code, MFMA__V1__CODE__UNAVAILABLE);
			assert_non_null(strstr(r->status->message, "weight 'w' is being replaced"));
		} else {
			assert_int_equal(r->id, 2);
			assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
		}
		mfma__v1__response__free_unpacked(r, NULL);
	}
	/* The replacement serves, and now unloads. */
	assert_int_equal(ctl(&p, "unload", "w", NULL), 0);
	assert_int_equal(ctl(&p, "--json", "weights", NULL), 0);
	assert_null(strstr(out, "\"w\""));
	close(fd);
	rw_mat_free(&a1);
	rw_mat_free(&a2);
	stop(&p);
}

/* A frame of 1 MiB or more is decoded off the loop, and its decode is
 * counted as a request in flight until it is routed: it was counted
 * against itself, so with one request allowed in flight (on the
 * connection, or in all) every large load and GEMM was refused "busy: 1
 * requests in flight" on an idle daemon. */
static void test_large_frames_under_a_limit_of_one(void **state)
{
	(void)state;
	struct mfmad_proc p;
	start(&p, "limits = { max_inflight_per_connection = 1; max_inflight = 1; };");
	char w[160], b[160];
	snprintf(w, sizeof(w), "%s/W.npy", p.dir);
	snprintf(b, sizeof(b), "%s/B.npy", p.dir);
	write_npy(w, 1024, 512); /* 2 MiB of f32 */
	write_npy(b, 512, 640);  /* 1.25 MiB */
	if (ctl(&p, "load", "w1", w, NULL) != 0)
		fail_msg("a 2 MiB load on an idle daemon: %s", out);
	if (ctl(&p, "submit", "-w", "w1", "-a", w, "-b", b, "--check", NULL) != 0)
		fail_msg("a GEMM with a 1.25 MiB B on an idle daemon: %s", out);
	unlink(w);
	unlink(b);
	stop(&p);
}

/* weights.max_count bounds how many weights clients make the daemon hold
 * (each costs its own memory and a file in the state directory whatever
 * its size: 1 x 1 weights never reached weights.budget_mb); a replace
 * takes its old weight's place; an unload makes room; SIGHUP raises it. */
static void test_weight_count_limit(void **state)
{
	(void)state;
	struct mfmad_proc p;
	start(&p, "weights = { max_count = 2; };");
	char w[160];
	snprintf(w, sizeof(w), "%s/W.npy", p.dir);
	write_npy(w, 4, 4);
	assert_int_equal(ctl(&p, "load", "w1", w, NULL), 0);
	assert_int_equal(ctl(&p, "load", "w2", w, NULL), 0);
	assert_int_not_equal(ctl(&p, "load", "w3", w, NULL), 0);
	/* The refusal's code and sentence, on the wire. */
	int fd = harness_connect_raw(&p);
	struct rw_mat a;
	rw_mat_init(&a, 4, 4, 1);
	Mfma__V1__LoadWeight lw;
	Mfma__V1__Request req;
	rw_load_request(&req, &lw, 1, "w3", &a.op);
	rw_send(fd, &req);
	Mfma__V1__Response *r = rw_read(fd, 10000);
	assert_int_equal(r->status->code, MFMA__V1__CODE__RESOURCE_EXHAUSTED);
	assert_string_equal(r->status->message, "the daemon holds 2 weights, loaded or loading "
			    "(weights.max_count = 2): unload one first");
	mfma__v1__response__free_unpacked(r, NULL);
	assert_int_equal(ctl(&p, "load", "w1", w, "--replace", NULL), 0);
	assert_int_equal(ctl(&p, "unload", "w2", NULL), 0);
	assert_int_equal(ctl(&p, "load", "w3", w, NULL), 0);
	assert_int_equal(harness_reconfigure(&p, "weights = { max_count = 3; };"), 0);
	assert_int_equal(ctl(&p, "load", "w4", w, NULL), 0);
	lw.name = "w5";
	req.id = 2;
	rw_send(fd, &req);
	r = rw_read(fd, 10000);
	assert_int_equal(r->status->code, MFMA__V1__CODE__RESOURCE_EXHAUSTED);
	assert_non_null(strstr(r->status->message, "(weights.max_count = 3)"));
	mfma__v1__response__free_unpacked(r, NULL);
	close(fd);
	rw_mat_free(&a);
	unlink(w);
	stop(&p);
}

/* timeout_us * 1000 used to wrap into a deadline in the past. */
static void test_huge_timeout_is_refused(void **state)
{
	(void)state;
	struct mfmad_proc p;
	start(&p, NULL);
	int fd = harness_connect_raw(&p);
	assert_true(fd >= 0);
	send_gemm(fd, 7, 4, 4, 4, 0, 18446744073709551ull);
	Mfma__V1__Response *r = read_response(fd, 10000);
	assert_int_equal(r->status->code, MFMA__V1__CODE__INVALID_ARGUMENT);
	assert_non_null(strstr(r->status->message, "timeout_us=18446744073709551"));
	mfma__v1__response__free_unpacked(r, NULL);
	/* One day is still taken. */
	send_gemm(fd, 8, 4, 4, 4, 0, 86400ull * 1000000);
	r = read_response(fd, 10000);
	assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
	mfma__v1__response__free_unpacked(r, NULL);
	close(fd);
	stop(&p);
}

/* A request whose deadline passes while it waits behind a long GEMM is
 * answered at the deadline, before the long GEMM is done. */
static void test_deadline_answered_when_it_passes(void **state)
{
	(void)state;
	struct mfmad_proc p;
	start(&p, one_thread);
	int fd = harness_connect_raw(&p);
	assert_true(fd >= 0);
	send_long(fd, 1);
	uint64_t t0 = mfma_clock_ns();
	send_gemm(fd, 2, 8, 8, 8, 0, 20000); /* 20 ms */
	Mfma__V1__Response *r = read_response(fd, 60000);
	uint64_t waited_ms = (mfma_clock_ns() - t0) / 1000000;
	assert_int_equal(r->id, 2);
	assert_int_equal(r->status->code, MFMA__V1__CODE__DEADLINE_EXCEEDED);
	assert_non_null(strstr(r->status->message, "passed while queued"));
	mfma__v1__response__free_unpacked(r, NULL);
	r = read_response(fd, 120000);
	assert_int_equal(r->id, 1);
	assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
	mfma__v1__response__free_unpacked(r, NULL);
	print_message("deadline answered after %llu ms\n", (unsigned long long)waited_ms);
	close(fd);
	stop(&p);
}

/* Starts a long GEMM, then sends a low-priority request and, 100 ms
 * later, a high-priority one, both queued behind it; returns the id of
 * the one answered first. */
static uint64_t first_of_two(const char *conf, const char *reconf)
{
	struct mfmad_proc p;
	start(&p, conf);
	int busy = harness_connect_raw(&p), fd = harness_connect_raw(&p);
	assert_true(busy >= 0 && fd >= 0);
	/* Long enough for both to be queued behind it (checked below), and
	 * longer with a reload between them. */
	rw_send_gemm(busy, 1, (reconf ? 4 : 2) * LONG_N, LONG_N, LONG_N, true, 0, 0);
	rw_wait_running(fd);
	send_gemm(fd, 2, 8, 8, 8, 50, 0); /* low */
	struct timespec ts = { 0, 100 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	/* The configuration changed with the low one queued. */
	if (reconf)
		assert_int_equal(harness_reconfigure(&p, reconf), 0);
	send_gemm(fd, 3, 8, 8, 8, 1, 0); /* high, 100 ms later */
	uint64_t first = 0, low_queue_ns = 0, high_queue_ns = 0;
	for (int i = 0; i < 2; i++) {
		Mfma__V1__Response *r = read_response(fd, 120000);
		assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
		if (!first)
			first = r->id;
		if (r->id == 2)
			low_queue_ns = r->gemm->timing->queue_ns;
		else
			high_queue_ns = r->gemm->timing->queue_ns;
		mfma__v1__response__free_unpacked(r, NULL);
	}
	Mfma__V1__Response *r = read_response(busy, 120000);
	assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
	mfma__v1__response__free_unpacked(r, NULL);
	/* The low-priority request was still queued when the other came:
	 * the order was the scheduler's choice, not the arrival's. */
	if (low_queue_ns < 100ull * 1000 * 1000)
		fail_msg("request 2 queued only %llu us: the long GEMM was too short to test with",
			 (unsigned long long)(low_queue_ns / 1000));
	/* And both were queued together: the high one came before the long
	 * GEMM ended (else the first is the low one whatever the order). */
	if (first == 2 && high_queue_ns < 20ull * 1000 * 1000)
		fail_msg("request 3 queued only %llu us: the long GEMM ended before it came",
			 (unsigned long long)(high_queue_ns / 1000));
	close(fd);
	close(busy);
	stop(&p);
	return first;
}

/* With aging at 1 ms a level, 100 ms of waiting outweighs 49 levels;
 * without aging, priority wins.  A reload that changes the aging orders
 * the request already queued by the new one (it kept the old: one queued
 * under strict priority came after everything queued after the reload). */
static void test_priorities_age(void **state)
{
	(void)state;
	char aging[256], strict[256];
	snprintf(aging, sizeof(aging), "%s limits = { priority_aging_ms = 1; };", one_thread);
	snprintf(strict, sizeof(strict), "%s limits = { priority_aging_ms = 0; };", one_thread);
	assert_int_equal(first_of_two(aging, NULL), 2);
	assert_int_equal(first_of_two(strict, NULL), 3);
	assert_int_equal(first_of_two(strict, aging), 2);
	assert_int_equal(first_of_two(aging, strict), 3);
}

/* Eight socket-activated listeners and --tcp: one more than mfmad holds.
 * It must refuse to start, saying why (it used to write past its table). */
/* D of the f32 GEMM send_gemm(fd, id, m, n, k) sends, in float64. */
static double *reference_d(uint32_t m, uint32_t n, uint32_t k)
{
	struct rw_mat a, b;
	rw_mat_init(&a, m, k, 1);
	rw_mat_init(&b, k, n, 2);
	double *d = calloc((size_t)m * n, sizeof(*d));
	assert_non_null(d);
	for (uint32_t i = 0; i < m; i++)
		for (uint32_t p = 0; p < k; p++)
			for (uint32_t j = 0; j < n; j++)
				d[(size_t)i * n + j] += (double)a.data[(size_t)i * k + p] *
							b.data[(size_t)p * n + j];
	rw_mat_free(&a);
	rw_mat_free(&b);
	return d;
}

static void expect_d(Mfma__V1__Response *r, uint64_t id, const double *ref, uint32_t m, uint32_t n)
{
	assert_non_null(r);
	assert_int_equal(r->id, id);
	assert_true(!r->status || r->status->code == MFMA__V1__CODE__OK);
	assert_non_null(r->gemm);
	assert_non_null(r->gemm->d);
	assert_int_equal(r->gemm->d->data.len, (size_t)m * n * sizeof(float));
	const float *d = (const float *)(const void *)r->gemm->d->data.data;
	for (size_t i = 0; i < (size_t)m * n; i++)
		if (fabs(d[i] - ref[i]) > 1e-4 * (1.0 + fabs(ref[i])))
			fail_msg("answer %llu: D[%zu] = %g, float64 %g", (unsigned long long)id, i,
				 (double)d[i], ref[i]);
}

/* A 4 MiB answer to a client that does not read for a while: the device
 * worker writes what the socket takes and leaves the rest to the loop;
 * a second request's answer, made while that rest is still unread, must
 * come after it, and both whole. */
static void test_large_answer_read_late(void **state)
{
	(void)state;
	struct mfmad_proc p;
	start(&p, NULL);
	int fd = harness_connect_raw(&p);
	assert_true(fd >= 0);
	const uint32_t m = 1024, n = 1024, k = 16;
	double *ref = reference_d(m, n, k);
	send_gemm(fd, 1, m, n, k, 0, 0);
	struct timespec late = { .tv_sec = 0, .tv_nsec = 300 * 1000000L };
	nanosleep(&late, NULL);
	send_gemm(fd, 2, m, n, k, 0, 0);
	nanosleep(&late, NULL);
	Mfma__V1__Response *r1 = read_response(fd, 10000);
	expect_d(r1, 1, ref, m, n);
	Mfma__V1__Response *r2 = read_response(fd, 10000);
	expect_d(r2, 2, ref, m, n);
	mfma__v1__response__free_unpacked(r1, NULL);
	mfma__v1__response__free_unpacked(r2, NULL);
	free(ref);
	close(fd);
	stop(&p);
}

static void test_too_many_listeners(void **state)
{
	(void)state;
	char dir[] = "/tmp/mfmad-lst-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char log[64];
	snprintf(log, sizeof(log), "%s/log", dir);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (int i = 0; i < 8; i++) {
			int fd = socket(AF_UNIX, SOCK_STREAM, 0);
			struct sockaddr_un sa = { .sun_family = AF_UNIX };
			snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/s%d", dir, i);
			if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
			    listen(fd, 8) < 0 || dup2(fd, 3 + i) < 0)
				_exit(90);
			if (fd != 3 + i)
				close(fd);
		}
		int lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (lf < 0 || dup2(lf, 2) < 0)
			_exit(91);
		char pidbuf[32];
		snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
		setenv("LISTEN_PID", pidbuf, 1);
		setenv("LISTEN_FDS", "8", 1);
		const char *bin = getenv("MFMAD_BIN");
		execl(bin, bin, "--config", "/dev/null", "--tcp", "127.0.0.1:47999", (char *)NULL);
		_exit(92);
	}
	/* It must stop by itself; one that runs on is killed and fails. */
	int st = 0;
	pid_t w = 0;
	for (int i = 0; i < 200 && (w = waitpid(pid, &st, WNOHANG)) == 0; i++) {
		struct timespec ts = { 0, 50 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		print_message("mfmad started with more listeners than it holds\n");
	}
	char text[4096] = "";
	FILE *f = fopen(log, "r");
	if (f) {
		size_t n = fread(text, 1, sizeof(text) - 1, f);
		text[n] = '\0';
		fclose(f);
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || !strstr(text, "too many listening sockets"))
		print_message("mfmad status 0x%x, log:\n%s\n", st, text);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 1);
	assert_non_null(strstr(text, "too many listening sockets"));
	char cmd[96];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_failed_replace_keeps_the_old_weight, harness_stop_leftover),
		cmocka_unit_test_teardown(test_replace_swaps, harness_stop_leftover),
		cmocka_unit_test_teardown(test_unload_during_replace, harness_stop_leftover),
		cmocka_unit_test_teardown(test_large_frames_under_a_limit_of_one, harness_stop_leftover),
		cmocka_unit_test_teardown(test_weight_count_limit, harness_stop_leftover),
		cmocka_unit_test_teardown(test_huge_timeout_is_refused, harness_stop_leftover),
		cmocka_unit_test_teardown(test_deadline_answered_when_it_passes, harness_stop_leftover),
		cmocka_unit_test_teardown(test_priorities_age, harness_stop_leftover),
		cmocka_unit_test_teardown(test_large_answer_read_late, harness_stop_leftover),
		cmocka_unit_test(test_too_many_listeners),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
