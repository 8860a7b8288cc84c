/* Reader threads (limits.reader_threads) against the real mfmad on the
 * CPU backend: many connections sending large GEMMs, dense and on a
 * resident weight, pipelined, every answer checked against a float64
 * reference and matched by its id; /metrics showing that readers took
 * frames (and none with reader_threads = 0, or for a lone request with
 * reader_when_busy); a region's descriptor between large frames; clients
 * that stall or vanish mid-frame given back or
 * closed while others are served; SIGTERM with frames in the readers. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpu_gemm.h"
#include "ctl_util.h"
#include "frame.h"
#include "harness.h"
#include "harness_gemm.h"
#include "mfma.h"
#include "mfma_clock.h"

/* The shapes: a dense GEMM of 64 KiB A and 64 KiB B (a 128 KiB frame), and
 * one on the resident weight W (WM x K) with 16 KiB of B. */
enum { M = 16, K = 1024, N = 16, WM = 64, WN = 4 };

static float weight[WM * K];

/* The answer r to D = A.B (m x n, A m x k) against the float64 reference;
 * 0 or -1 with why. */
static int check(const struct mfma_gemm_result *r, const float *a, const float *b, uint32_t m,
		 uint32_t n, char *why, size_t len)
{
	if (r->d.rows != m || r->d.cols != n) {
		snprintf(why, len, "D is %ux%u, not %ux%u", r->d.rows, r->d.cols, m, n);
		return -1;
	}
	double *ref = malloc((size_t)m * n * sizeof(double));
	struct mfma_gemm g = {
		.m = m, .n = n, .k = K, .in_dtype = MFMA_DT_F32, .out_dtype = MFMA_DT_F32,
		.alpha = 1.0f, .a = a, .b = b, .d = (void *)(uintptr_t)r->d.data,
	};
	int rc = ref ? cpu_gemm_ref_f64(&g, ref) : -1;
	double e = rc == 0 ? cpu_rel_frobenius(r->d.data, MFMA_DT_F32, ref, (size_t)m * n) : 1;
	free(ref);
	if (!(e < ctl_tolerance(MFMA_DT_F32, MFMA_DT_F32))) {
		snprintf(why, len, "relative error %g", e);
		return -1;
	}
	return 0;
}

struct load {
	const struct mfmad_proc *p;
	unsigned seed;
	unsigned rounds, depth;
	unsigned answered;
	char failed[256]; /* "" while all is well */
};

/* One connection: rounds of depth pipelined GEMMs, dense and on the
 * weight alternating, each waited for by its id and checked. */
static void *client_main(void *arg)
{
	struct load *l = arg;
	mfma_client *c;
	struct mfma_error err;
	if (mfma_connect(l->p->endpoint, &c, &err) != 0) {
		snprintf(l->failed, sizeof(l->failed), "connect: %.160s", err.message);
		return NULL;
	}
	mfma_set_timeout(c, 60000);
	enum { MAXD = 8 };
	float *a = malloc(sizeof(float) * M * K);
	float *b = malloc(sizeof(float) * MAXD * K * N);
	ctl_random_matrix(a, MFMA_DT_F32, M, K, false, l->seed);
	for (unsigned r = 0; r < l->rounds && !l->failed[0]; r++) {
		uint64_t ids[MAXD];
		for (unsigned i = 0; i < l->depth; i++) {
			bool on_weight = (i + r) % 2;
			uint32_t n = on_weight ? WN : N;
			float *bi = b + (size_t)i * K * N;
			ctl_random_matrix(bi, MFMA_DT_F32, K, n, false, l->seed * 1000 + r * 16 + i);
			struct mfma_gemm_args g;
			mfma_gemm_args_init(&g);
			if (on_weight) {
				g.a.kind = MFMA_OPERAND_WEIGHT;
				g.a.weight = "w";
			} else {
				g.a.kind = MFMA_OPERAND_DENSE;
				g.a.dense = (struct mfma_matrix){ M, K, MFMA_TYPE_F32, a,
								  sizeof(float) * M * K };
			}
			g.b = (struct mfma_matrix){ K, n, MFMA_TYPE_F32, bi, sizeof(float) * K * n };
			if (mfma_gemm_submit(c, &g, &ids[i], &err) != 0) {
				snprintf(l->failed, sizeof(l->failed), "submit: %.160s", err.message);
				break;
			}
		}
		for (unsigned i = 0; i < l->depth && !l->failed[0]; i++) {
			bool on_weight = (i + r) % 2;
			uint64_t done;
			struct mfma_gemm_result res;
			if (mfma_wait(c, ids[i], 60000, &done, &res, &err) != 0) {
				snprintf(l->failed, sizeof(l->failed), "wait %" PRIu64 ": %.160s", ids[i],
					 err.message);
				break;
			}
			char why[128];
			if (done != ids[i])
				snprintf(l->failed, sizeof(l->failed), "waited for %" PRIu64 ", got %" PRIu64,
					 ids[i], done);
			else if (check(&res, on_weight ? weight : a, b + (size_t)i * K * N,
				       on_weight ? WM : M, on_weight ? WN : N, why, sizeof(why)) < 0)
				snprintf(l->failed, sizeof(l->failed), "request %" PRIu64 " (%s): %s",
					 ids[i], on_weight ? "weight" : "dense", why);
			else
				l->answered++;
			mfma_gemm_result_free(&res);
		}
	}
	free(a);
	free(b);
	mfma_close(c);
	return NULL;
}

static void load_weight(const struct mfmad_proc *p)
{
	mfma_client *c = harness_client(p);
	struct mfma_error err;
	assert_int_equal(ctl_random_matrix(weight, MFMA_DT_F32, WM, K, false, 99), 0);
	struct mfma_load_args la;
	mfma_load_args_init(&la);
	la.name = "w";
	la.a.kind = MFMA_OPERAND_DENSE;
	la.a.dense = (struct mfma_matrix){ WM, K, MFMA_TYPE_F32, weight, sizeof(weight) };
	if (mfma_load_weight(c, &la, NULL, &err) != 0)
		fail_msg("load: %s", err.message);
	mfma_close(c);
}

/* nconn connections at once, each rounds x depth requests. */
static void run_load(const struct mfmad_proc *p, unsigned nconn, unsigned rounds, unsigned depth)
{
	struct load l[16];
	pthread_t t[16];
	assert_true(nconn <= 16);
	for (unsigned i = 0; i < nconn; i++) {
		l[i] = (struct load){ .p = p, .seed = 7 + i, .rounds = rounds, .depth = depth };
		assert_int_equal(pthread_create(&t[i], NULL, client_main, &l[i]), 0);
	}
	for (unsigned i = 0; i < nconn; i++)
		pthread_join(t[i], NULL);
	for (unsigned i = 0; i < nconn; i++) {
		if (l[i].failed[0])
			fail_msg("connection %u: %s", i, l[i].failed);
		assert_int_equal(l[i].answered, rounds * depth);
	}
}

static struct mfmad_proc *start(struct mfmad_proc *p, const char *limits, int port)
{
	char conf[512], port_s[16];
	snprintf(conf, sizeof(conf), "cpu = { threads = 1; devices = 1; };\nlimits = { %s };\n",
		 limits);
	snprintf(port_s, sizeof(port_s), "%d", port);
	const char *args[] = { "--backends", "cpu", "--metrics", port_s, NULL };
	assert_int_equal(harness_start(p, conf, args), 0);
	return p;
}

/* Eight connections of pipelined large GEMMs through two readers taking
 * every frame of 1 KiB and more: all answered right, and the readers took
 * them. */
static void test_readers_answer(void **state)
{
	(void)state;
	struct mfmad_proc p;
	int port = harness_free_port();
	start(&p, "reader_threads = 2; reader_min_kb = 1; reader_when_busy = false;", port);
	assert_int_equal(harness_metric(port, "mfmad_reader_frames_total"), 0);
	load_weight(&p);
	run_load(&p, 8, 4, 4);
	long long taken = harness_metric(port, "mfmad_reader_frames_total");
	print_message("frames read by the readers: %lld of %d\n", taken, 8 * 4 * 4 + 1);
	/* The weight's load and every GEMM are over 1 KiB; the first frame
	 * of a connection may be read whole on the loop (nothing said yet
	 * that frames are large). */
	assert_true(taken > 8 * 4 * 4 / 2);
	assert_int_equal(harness_log_count(&p, "2 reader thread(s)"), 1);
	assert_int_equal(harness_stop(&p), 0);
}

/* reader_threads = 0: the same load, all on the loop, the counter 0. */
static void test_readers_off(void **state)
{
	(void)state;
	struct mfmad_proc p;
	int port = harness_free_port();
	start(&p, "reader_threads = 0; reader_min_kb = 1; reader_when_busy = false;", port);
	load_weight(&p);
	run_load(&p, 4, 2, 4);
	assert_int_equal(harness_metric(port, "mfmad_reader_frames_total"), 0);
	assert_int_equal(harness_log_count(&p, "reader thread(s)"), 0);
	assert_int_equal(harness_stop(&p), 0);
}

/* reader_when_busy (the default): one connection with one request at a
 * time is never handed to a reader, however large its frames. */
static void test_lone_request_stays_on_loop(void **state)
{
	(void)state;
	struct mfmad_proc p;
	int port = harness_free_port();
	start(&p, "reader_threads = 2; reader_min_kb = 1;", port);
	load_weight(&p);
	run_load(&p, 1, 12, 1);
	assert_int_equal(harness_metric(port, "mfmad_reader_frames_total"), 0);
	assert_int_equal(harness_stop(&p), 0);
}

/* A shared-memory region registered between large frames on one
 * connection (its descriptor comes with the register_region frame, which
 * stays on the loop), then GEMMs whose B and D lie in it, with A in the
 * frame (which a reader takes): all answered right. */
static void test_region_between_large_frames(void **state)
{
	(void)state;
	struct mfmad_proc p;
	int port = harness_free_port();
	start(&p, "reader_threads = 2; reader_min_kb = 1; reader_when_busy = false;", port);
	mfma_client *c = harness_client(&p);
	struct mfma_error err;
	float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
	assert_true(a && b);
	assert_int_equal(ctl_random_matrix(a, MFMA_DT_F32, M, K, false, 3), 0);
	assert_int_equal(ctl_random_matrix(b, MFMA_DT_F32, K, N, false, 4), 0);
	struct mfma_gemm_args g;
	mfma_gemm_args_init(&g);
	g.a.kind = MFMA_OPERAND_DENSE;
	g.a.dense = (struct mfma_matrix){ M, K, MFMA_TYPE_F32, a, sizeof(float) * M * K };
	g.b = (struct mfma_matrix){ K, N, MFMA_TYPE_F32, b, sizeof(float) * K * N };
	struct mfma_gemm_result r;
	char why[128];
	for (int round = 0; round < 3; round++) {
		/* Bytes in the frame: the connection's frames are large. */
		if (mfma_gemm(c, &g, &r, &err) != 0)
			fail_msg("gemm: %s", err.message);
		if (check(&r, a, b, M, N, why, sizeof(why)) < 0)
			fail_msg("in the frame: %s", why);
		mfma_gemm_result_free(&r);
		mfma_region *rg;
		if (mfma_region_create(c, sizeof(float) * (K * N + M * N), &rg, &err) != 0)
			fail_msg("region: %s", err.message);
		float *rb = mfma_region_data(rg), *rd = rb + K * N;
		memcpy(rb, b, sizeof(float) * K * N);
		struct mfma_gemm_args gr = g;
		gr.b.data = rb;
		gr.d = rd;
		gr.d_bytes = sizeof(float) * M * N;
		if (mfma_gemm(c, &gr, &r, &err) != 0)
			fail_msg("gemm in the region: %s", err.message);
		assert_ptr_equal(r.d.data, rd);
		if (check(&r, a, b, M, N, why, sizeof(why)) < 0)
			fail_msg("in the region: %s", why);
		mfma_gemm_result_free(&r);
		assert_int_equal(mfma_region_destroy(c, rg, &err), 0);
	}
	mfma_close(c);
	free(a);
	free(b);
	assert_true(harness_metric(port, "mfmad_reader_frames_total") >= 3);
	assert_int_equal(harness_log_count(&p, "file descriptor"), 0);
	assert_int_equal(harness_stop(&p), 0);
}

/* A raw connection that sends the header of a frame of `total` bytes and
 * `part` bytes of its body. */
static int partial_frame(const struct mfmad_proc *p, uint32_t total, size_t part)
{
	int fd = harness_connect_raw(p);
	assert_true(fd >= 0);
	uint8_t *buf = calloc(1, FRAME_HEADER_SIZE + part);
	assert_non_null(buf);
	frame_header_put(buf, total);
	memset(buf + FRAME_HEADER_SIZE, 0x0a, part);
	assert_int_equal(harness_write_all(fd, buf, FRAME_HEADER_SIZE + part), 0);
	free(buf);
	return fd;
}

/* Four clients stall mid-frame (more than there are readers), one goes
 * away mid-frame: the readers give the stalled frames back within their
 * wait and the loop's read timeout closes those connections; the one that
 * went away is closed with a log line; a client sending large frames
 * meanwhile is answered, well before the stalled ones time out. */
static void test_stall_and_vanish(void **state)
{
	(void)state;
	struct mfmad_proc p;
	int port = harness_free_port();
	start(&p, "reader_threads = 2; reader_min_kb = 1; reader_when_busy = false; "
		  "read_timeout_ms = 3000;", port);
	load_weight(&p);
	int stalled[4];
	for (int i = 0; i < 4; i++)
		stalled[i] = partial_frame(&p, 200000, 10000);
	/* Gone at once: its reader meets the end of the stream. */
	close(partial_frame(&p, 200000, 20000));
	uint64_t t0 = mfma_clock_ns();
	run_load(&p, 2, 3, 2);
	uint64_t served_ms = (mfma_clock_ns() - t0) / 1000000;
	print_message("served in %" PRIu64 " ms while 4 clients stalled\n", served_ms);
	assert_true(served_ms < 2500);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(harness_wait_closed(stalled[i], 10000), 1);
		close(stalled[i]);
	}
	assert_true(harness_log_count(&p, "on a reader thread; the loop reads the rest") >= 4);
	assert_int_equal(harness_log_count(&p, "a started frame did not complete"), 4);
	assert_int_equal(harness_log_count(&p, "the client went away 20004 bytes into a "
					       "200004-byte frame"), 1);
	assert_true(harness_metric(port, "mfmad_reader_frames_total") > 0);
	assert_int_equal(harness_stop(&p), 0);
}

/* A descriptor sent in the middle of a large frame's body (the library
 * sends one only with a register_region frame's first bytes): the
 * connection is closed, saying why, whether the reader or the loop meets
 * it; another client is served. */
static void test_descriptor_mid_frame(void **state)
{
	(void)state;
	struct mfmad_proc p;
	int port = harness_free_port();
	start(&p, "reader_threads = 2; reader_min_kb = 1; reader_when_busy = false;", port);
	int fd = partial_frame(&p, 100000, 30000);
	usleep(2 * 1000);
	static uint8_t body[10000];
	int passed = STDIN_FILENO;
	assert_int_equal(harness_send_fds(fd, body, sizeof(body), &passed, 1), (long)sizeof(body));
	assert_int_equal(harness_wait_closed(fd, 5000), 1);
	close(fd);
	int by_reader = harness_log_count(&p, "a file descriptor came with the body of a large "
					      "frame");
	int by_loop = harness_log_count(&p, "a file descriptor came with a frame that is not "
					    "register_region");
	print_message("closed by the %s\n", by_reader ? "reader" : "loop");
	assert_int_equal(by_reader + by_loop, 1);
	load_weight(&p);
	run_load(&p, 1, 1, 2);
	assert_int_equal(harness_stop(&p), 0);
}

/* SIGTERM while readers hold frames (clients mid-frame, and clients
 * sending whole large frames): the daemon exits 0 (under ASan: nothing
 * leaked) and promptly. */
static void test_sigterm_with_frames_in_readers(void **state)
{
	(void)state;
	struct mfmad_proc p;
	int port = harness_free_port();
	start(&p, "reader_threads = 2; reader_min_kb = 1; reader_when_busy = false;", port);
	int fds[6];
	for (int i = 0; i < 6; i++)
		fds[i] = partial_frame(&p, 300000, 50000 + 10000 * (size_t)i);
	usleep(2 * 1000);
	uint64_t t0 = mfma_clock_ns();
	assert_int_equal(harness_stop(&p), 0);
	uint64_t ms = (mfma_clock_ns() - t0) / 1000000;
	print_message("stopped in %" PRIu64 " ms\n", ms);
	assert_true(ms < 5000);
	for (int i = 0; i < 6; i++)
		close(fds[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_readers_answer, harness_stop_leftover),
		cmocka_unit_test_teardown(test_readers_off, harness_stop_leftover),
		cmocka_unit_test_teardown(test_lone_request_stays_on_loop, harness_stop_leftover),
		cmocka_unit_test_teardown(test_region_between_large_frames, harness_stop_leftover),
		cmocka_unit_test_teardown(test_stall_and_vanish, harness_stop_leftover),
		cmocka_unit_test_teardown(test_descriptor_mid_frame, harness_stop_leftover),
		cmocka_unit_test_teardown(test_sigterm_with_frames_in_readers, harness_stop_leftover),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
