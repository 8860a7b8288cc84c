/* Dynamic batching against the real mfmad on the CPU backend: concurrent
 * GEMMs on one resident weight share launches (the counters say so), and
 * every answer is still its own and correct against a float64 reference,
 * also when requests with different scalars, output dtypes or C are mixed
 * in the same queue. */
#include <dirent.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "mfma_clock.h"
#include "rawwire.h"

#define M 768
#define K 512
#define NREQ 32
#define LONG_N 4096 /* keeps the one worker busy while the others queue */

static void load_weight(int fd, const struct rw_mat *w)
{
	Mfma__V1__LoadWeight lw = MFMA__V1__LOAD_WEIGHT__INIT;
	lw.name = "w";
	lw.a = (Mfma__V1__Operand *)&w->op;
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	req.has_id = 1;
	req.id = 999;
	req.body_case = MFMA__V1__REQUEST__BODY_LOAD_WEIGHT;
	req.load_weight = &lw;
	rw_send(fd, &req);
	Mfma__V1__Response *r = rw_read(fd, 60000);
	assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
	mfma__v1__response__free_unpacked(r, NULL);
}

/* What request i asks for: its columns, scalars, output and C. */
struct want {
	uint32_t n;
	float alpha, beta;
	struct rw_mat b, c;
	uint32_t priority;   /* 0: the default */
	uint64_t timeout_us; /* 0: none */
};

static void send_gemm(int fd, uint64_t id, struct want *q)
{
	Mfma__V1__Operand a = MFMA__V1__OPERAND__INIT;
	a.kind_case = MFMA__V1__OPERAND__KIND_WEIGHT;
	a.weight = "w";
	Mfma__V1__Gemm g = MFMA__V1__GEMM__INIT;
	g.a = &a;
	g.b = &q->b.m;
	g.has_alpha = 1;
	g.alpha = q->alpha;
	g.has_priority = q->priority != 0;
	g.priority = q->priority;
	g.has_timeout_us = q->timeout_us != 0;
	g.timeout_us = q->timeout_us;
	if (q->beta != 0.0f) {
		g.has_beta = 1;
		g.beta = q->beta;
		g.c = &q->c.m;
	}
	rw_send_gemm_request(fd, id, &g);
}

/* D against alpha * W.B + beta * C in float64, each element within what
 * f32 accumulation over K can lose (a lost partial sum is far larger). */
static void check_d(const struct rw_mat *w, const struct want *q, const Mfma__V1__Matrix *d)
{
	assert_int_equal(d->rows, M);
	assert_int_equal(d->cols, q->n);
	assert_int_equal(d->data.len, (size_t)M * q->n * 4);
	const float *out = (const float *)(const void *)d->data.data;
	for (uint32_t i = 0; i < M; i++)
		for (uint32_t j = 0; j < q->n; j++) {
			double ref = 0, mag = 0;
			for (uint32_t p = 0; p < K; p++) {
				double t = (double)w->data[i * K + p] * q->b.data[p * q->n + j];
				ref += t;
				mag += fabs(t);
			}
			ref *= q->alpha;
			mag *= fabs(q->alpha);
			if (q->beta != 0.0f) {
				ref += (double)q->beta * q->c.data[i * q->n + j];
				mag += fabs((double)q->beta * q->c.data[i * q->n + j]);
			}
			double got = out[i * q->n + j];
			if (fabs(got - ref) > 1e-5 * mag + 1e-6)
				fail_msg("D[%u][%u] = %.9g, float64 reference %.9g", i, j, got, ref);
		}
}

/* Status: the weight's GEMMs and launches. */
static void weight_counts(int fd, uint64_t *requests, uint64_t *launches)
{
	Mfma__V1__GetStatus s = MFMA__V1__GET_STATUS__INIT;
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	req.has_id = 1;
	req.id = 7777;
	req.body_case = MFMA__V1__REQUEST__BODY_STATUS;
	req.status = &s;
	rw_send(fd, &req);
	Mfma__V1__Response *r = rw_read(fd, 10000);
	assert_int_equal(r->body_case, MFMA__V1__RESPONSE__BODY_STATUS_RESULT);
	assert_int_equal(r->status_result->n_weights, 1);
	*requests = r->status_result->weights[0]->requests;
	*launches = r->status_result->weights[0]->launches;
	mfma__v1__response__free_unpacked(r, NULL);
}

/* One long GEMM, then NREQ narrow ones behind it in one burst, on weight
 * w already loaded; mixed says whether scalars and C vary.  Returns the
 * most requests any answer says its launch had. */
static uint32_t burst(int fd, const struct rw_mat *wm, bool mixed)
{
	const struct rw_mat *w = wm;
	static struct want q[NREQ + 1];
	q[0] = (struct want){ .n = LONG_N, .alpha = 1.0f };
	for (int i = 1; i <= NREQ; i++) {
		q[i] = (struct want){ .n = 1 + (uint32_t)(i % 3 == 0) * 2, .alpha = 1.0f };
		if (mixed && i % 4 == 1)
			q[i].alpha = 2.0f;
		if (mixed && i % 4 == 2)
			q[i].beta = 1.0f;
	}
	for (int i = 0; i <= NREQ; i++) {
		rw_mat_init(&q[i].b, K, q[i].n, 10 + (uint32_t)i);
		if (q[i].beta != 0.0f)
			rw_mat_init(&q[i].c, M, q[i].n, 100 + (uint32_t)i);
		send_gemm(fd, (uint64_t)i, &q[i]);
	}
	uint32_t widest = 0;
	bool seen[NREQ + 1] = { false };
	for (int i = 0; i <= NREQ; i++) {
		Mfma__V1__Response *r = rw_read(fd, 120000);
		assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
		assert_true(r->id <= NREQ && !seen[r->id]);
		seen[r->id] = true;
		if (r->id > 0)
			check_d(w, &q[r->id], r->gemm->d);
		uint32_t br = r->gemm->timing->batch_requests;
		assert_true(br >= 1);
		assert_true(r->gemm->timing->batch_columns >= q[r->id].n);
		if (br > widest)
			widest = br;
		mfma__v1__response__free_unpacked(r, NULL);
	}
	for (int i = 0; i <= NREQ; i++) {
		rw_mat_free(&q[i].b);
		rw_mat_free(&q[i].c);
	}
	return widest;
}

/* A daemon with conf, a connection to it and the weight w loaded. */
static int start(struct mfmad_proc *p, const char *conf, struct rw_mat *w)
{
	assert_int_equal(harness_start(p, conf, NULL), 0);
	int fd = harness_connect_raw(p);
	assert_true(fd >= 0);
	rw_mat_init(w, M, K, 3);
	load_weight(fd, w);
	return fd;
}

static void stop(struct mfmad_proc *p, int fd, struct rw_mat *w)
{
	rw_mat_free(w);
	close(fd);
	assert_int_equal(harness_stop(p), 0);
}

/* A daemon with conf, one burst, its counters. */
static uint32_t run(const char *conf, bool mixed, uint64_t *requests, uint64_t *launches)
{
	struct mfmad_proc p;
	struct rw_mat w;
	int fd = start(&p, conf, &w);
	uint32_t widest = burst(fd, &w, mixed);
	weight_counts(fd, requests, launches);
	stop(&p, fd, &w);
	return widest;
}

static const char conf_on[] = "cpu = { threads = 1; devices = 1; };";

static void test_concurrent_requests_share_launches(void **state)
{
	(void)state;
	uint64_t requests, launches;
	uint32_t widest = run(conf_on, false, &requests, &launches);
	print_message("%llu requests in %llu launches, widest batch %u requests\n",
		      (unsigned long long)requests, (unsigned long long)launches, widest);
	assert_int_equal(requests, NREQ + 1);
	assert_true(launches < requests);
	assert_true(widest > 1);
}

static void test_different_scalars_never_share(void **state)
{
	(void)state;
	uint64_t requests, launches;
	uint32_t widest = run(conf_on, true, &requests, &launches);
	print_message("mixed: %llu requests in %llu launches, widest batch %u requests\n",
		      (unsigned long long)requests, (unsigned long long)launches, widest);
	assert_int_equal(requests, NREQ + 1);
	/* Three kinds (alpha 1, alpha 2, beta 1 with C): at least three
	 * launches besides the long one, and every answer checked above. */
	assert_true(launches >= 4 && launches < requests);
}

static void test_batching_off(void **state)
{
	(void)state;
	uint64_t requests, launches;
	uint32_t widest = run("cpu = { threads = 1; devices = 1; }; batching = { enabled = false; };",
			      false, &requests, &launches);
	assert_int_equal(widest, 1);
	assert_int_equal(launches, requests);
}

/* A worker that polls for its next job (limits.worker_poll_us) takes the
 * same burst, every answer checked, and still batches what it finds. */
static void test_polling_worker(void **state)
{
	(void)state;
	uint64_t requests, launches;
	uint32_t widest = run("cpu = { threads = 1; devices = 1; }; limits = { worker_poll_us = 2000; };",
			      false, &requests, &launches);
	print_message("polling: %llu requests in %llu launches, widest batch %u requests\n",
		      (unsigned long long)requests, (unsigned long long)launches, widest);
	assert_int_equal(requests, NREQ + 1);
	assert_true(launches <= requests);
}

/* Three requests 30 ms apart on an idle daemon: with a queue delay the
 * first waits for the others and one launch answers all three; without,
 * each runs as it comes. */
static uint32_t staggered(const char *conf, uint64_t *first_ms)
{
	struct mfmad_proc p;
	struct rw_mat w;
	int fd = start(&p, conf, &w);
	static struct want q[3];
	uint64_t t0 = 0;
	for (int i = 0; i < 3; i++) {
		q[i] = (struct want){ .n = 1, .alpha = 1.0f };
		rw_mat_init(&q[i].b, K, 1, 50 + (uint32_t)i);
		if (i == 0) {
			t0 = mfma_clock_ns();
		} else {
			struct timespec ts = { 0, 30 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
		send_gemm(fd, (uint64_t)i, &q[i]);
	}
	uint32_t widest = 0;
	for (int i = 0; i < 3; i++) {
		Mfma__V1__Response *r = rw_read(fd, 30000);
		assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
		check_d(&w, &q[r->id], r->gemm->d);
		if (r->id == 0)
			*first_ms = (mfma_clock_ns() - t0) / 1000000;
		if (r->gemm->timing->batch_requests > widest)
			widest = r->gemm->timing->batch_requests;
		mfma__v1__response__free_unpacked(r, NULL);
	}
	for (int i = 0; i < 3; i++)
		rw_mat_free(&q[i].b);
	stop(&p, fd, &w);
	return widest;
}

static void test_queue_delay_gathers_a_batch(void **state)
{
	(void)state;
	uint64_t first_ms = 0;
	uint32_t widest = staggered("cpu = { threads = 1; devices = 1; }; "
				    "batching = { max_queue_delay_us = 400000; };",
				    &first_ms);
	print_message("with a 400 ms delay: widest batch %u, first answer after %llu ms\n", widest,
		      (unsigned long long)first_ms);
	assert_int_equal(widest, 3);
	assert_true(first_ms >= 350); /* it waited, up to the delay past its arrival */
	widest = staggered(conf_on, &first_ms);
	print_message("without: widest batch %u, first answer after %llu ms\n", widest,
		      (unsigned long long)first_ms);
	assert_int_equal(widest, 1);
	assert_true(first_ms < 350);
}

/* The answer to request id on fd: its code, and the ms since t0. */
static int answer_ms(int fd, uint64_t id, uint64_t t0, uint64_t *ms)
{
	Mfma__V1__Response *r = rw_read(fd, 30000);
	assert_int_equal(r->id, id);
	int code = (int)r->status->code;
	*ms = (mfma_clock_ns() - t0) / 1000000;
	mfma__v1__response__free_unpacked(r, NULL);
	return code;
}

/* The worker waits out batching.max_queue_delay_us for companions only
 * while that costs nothing: a job whose deadline comes first runs at once
 * (it expired in the wait, answered at the delay's end, not at its
 * deadline); other work queued ends the wait (the device idled in it
 * while a request of another key, more urgent, waited behind it; that one
 * then waits for companions of its own, up to the delay from its own
 * arrival); and a reload that turns batching off ends it too (it was read
 * once, before the wait). */
static void test_queue_delay_gives_way(void **state)
{
	(void)state;
	struct mfmad_proc p;
	struct rw_mat w;
	int fd = start(&p, "cpu = { threads = 1; devices = 1; }; "
			   "batching = { max_queue_delay_us = 400000; };", &w);
	struct want q[2] = { { .n = 1, .alpha = 1.0f, .timeout_us = 100000 },
			     { .n = 1, .alpha = 2.0f, .priority = 1 } };
	rw_mat_init(&q[0].b, K, 1, 60);
	rw_mat_init(&q[1].b, K, 1, 61);
	/* A deadline before the delay's end. */
	uint64_t t0 = mfma_clock_ns(), ms;
	send_gemm(fd, 0, &q[0]);
	int code = answer_ms(fd, 0, t0, &ms);
	print_message("  a 100 ms deadline under a 400 ms delay: code %d after %llu ms\n", code,
		      (unsigned long long)ms);
	assert_int_equal(code, MFMA__V1__CODE__OK);
	assert_true(ms < 100);
	/* Another key's request, more urgent, 50 ms into the wait. */
	q[0].timeout_us = 0;
	q[0].priority = 9;
	t0 = mfma_clock_ns();
	send_gemm(fd, 1, &q[0]);
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	send_gemm(fd, 2, &q[1]);
	uint64_t got[3] = { 0 };
	for (int i = 0; i < 2; i++) {
		Mfma__V1__Response *r = rw_read(fd, 30000);
		assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
		assert_true(r->id == 1 || r->id == 2);
		got[r->id] = (mfma_clock_ns() - t0) / 1000000;
		mfma__v1__response__free_unpacked(r, NULL);
	}
	print_message("  priority 9 then, 50 ms later, priority 1 of another key: answered after "
		      "%llu and %llu ms\n", (unsigned long long)got[1], (unsigned long long)got[2]);
	assert_true(got[1] < 300);
	assert_true(got[2] >= 350);
	/* A reload that turns batching off, 50 ms into the wait. */
	t0 = mfma_clock_ns();
	send_gemm(fd, 3, &q[0]);
	nanosleep(&ts, NULL);
	assert_int_equal(harness_reconfigure(&p, "cpu = { threads = 1; devices = 1; }; "
						 "batching = { enabled = false; };"), 0);
	code = answer_ms(fd, 3, t0, &ms);
	print_message("  batching turned off 50 ms into the wait: answered after %llu ms\n",
		      (unsigned long long)ms);
	assert_int_equal(code, MFMA__V1__CODE__OK);
	assert_true(ms < 300);
	rw_mat_free(&q[0].b);
	rw_mat_free(&q[1].b);
	stop(&p, fd, &w);
}

/* With batching.overlap, a batch left running is finished before the
 * next job waits out its delay for companions: its answers waited that
 * delay (the next job's, another key's, from its own arrival) behind it.
 * MFMAD_TEST_CPU_LEAVE reports the CPU's launches left running, as a
 * GPU's are. */
static void test_held_batch_not_kept_waiting(void **state)
{
	(void)state;
	struct mfmad_proc p;
	assert_true(harness_start_metrics(&p, "cpu = { threads = 1; devices = 1; }; "
					  "batching = { max_queue_delay_us = 300000; overlap = true; }; "
					  "limits = { loop_start = false; };",
					  "MFMAD_TEST_CPU_LEAVE", "1") > 0);
	int fd = harness_connect_raw(&p);
	assert_true(fd >= 0);
	struct rw_mat w;
	rw_mat_init(&w, M, K, 3);
	load_weight(fd, &w);
	struct want q[3] = { { .n = 1, .alpha = 1.0f }, { .n = 1, .alpha = 1.0f },
			     { .n = 1, .alpha = 2.0f } };
	for (int i = 0; i < 3; i++)
		rw_mat_init(&q[i].b, K, 1, 70 + (uint32_t)i);
	uint64_t t0 = mfma_clock_ns(), at[3] = { 0 };
	send_gemm(fd, 0, &q[0]);
	send_gemm(fd, 1, &q[1]);
	struct timespec ts = { 0, 250 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	send_gemm(fd, 2, &q[2]);
	for (int i = 0; i < 3; i++) {
		Mfma__V1__Response *r = rw_read(fd, 30000);
		assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
		assert_true(r->id < 3);
		check_d(&w, &q[r->id], r->gemm->d);
		at[r->id] = (mfma_clock_ns() - t0) / 1000000;
		mfma__v1__response__free_unpacked(r, NULL);
	}
	print_message("  a batch of two waiting 300 ms, a third request at 250 ms: answered after "
		      "%llu, %llu and %llu ms\n", (unsigned long long)at[0],
		      (unsigned long long)at[1], (unsigned long long)at[2]);
	assert_true(at[0] >= 250 && at[0] < 450);
	assert_true(at[1] >= 250 && at[1] < 450);
	for (int i = 0; i < 3; i++)
		rw_mat_free(&q[i].b);
	rw_mat_free(&w);
	close(fd);
	assert_int_equal(harness_stop(&p), 0);
}

/* batching.enabled changes on SIGHUP, without a restart. */
static void test_enabled_live_on_sighup(void **state)
{
	(void)state;
	struct mfmad_proc p;
	struct rw_mat w;
	int fd = start(&p, "cpu = { threads = 1; devices = 1; }; batching = { enabled = false; };",
		       &w);
	uint64_t req0, launch0, req1, launch1;
	assert_int_equal(burst(fd, &w, false), 1);
	weight_counts(fd, &req0, &launch0);
	assert_int_equal(launch0, req0);
	FILE *f = fopen(p.conf, "w");
	assert_non_null(f);
	fprintf(f, "cpu = { threads = 1; devices = 1; };\nbatching = { enabled = true; };\n");
	fclose(f);
	assert_int_equal(kill(p.pid, SIGHUP), 0);
	/* A reload has no answer to wait for; the loop takes the signal at
	 * once, 300 ms is ample even under the sanitizers. */
	struct timespec ts = { 0, 300 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	assert_true(burst(fd, &w, false) > 1);
	weight_counts(fd, &req1, &launch1);
	print_message("after SIGHUP: %llu requests in %llu launches\n",
		      (unsigned long long)(req1 - req0), (unsigned long long)(launch1 - launch0));
	assert_true(launch1 - launch0 < req1 - req0);
	stop(&p, fd, &w);
}

/* Starts mfmad with conf and /metrics on a free port (its number
 * returned), its CPU devices carving answer frames from an arena of
 * arena_mb MiB (MFMAD_TEST_CPU_ANSWER_ARENA_MB), or from the heap when
 * arena_mb is NULL, whatever the environment this runs in says. */
static int start_with_metrics(struct mfmad_proc *p, const char *conf, const char *arena_mb)
{
	unsetenv("MFMAD_TEST_CPU_ANSWER_ARENA_MB");
	int port = harness_start_metrics(p, conf, arena_mb ? "MFMAD_TEST_CPU_ANSWER_ARENA_MB" : NULL,
					 arena_mb);
	assert_true(port > 0);
	return port;
}

/* The device's kernel time counts a batched launch once; the daemon's
 * per-request kernel time counts it for each request in it.  The device's
 * counted it per request too, so that "kernel time a launch" came out
 * the mean batch times too large. */
static void test_device_kernel_time_per_launch(void **state)
{
	(void)state;
	struct mfmad_proc p;
	int port = start_with_metrics(&p, conf_on, NULL);
	int fd = harness_connect_raw(&p);
	assert_true(fd >= 0);
	struct rw_mat w;
	rw_mat_init(&w, M, K, 3);
	load_weight(fd, &w);
	uint64_t requests, launches;
	assert_true(burst(fd, &w, false) > 1);
	weight_counts(fd, &requests, &launches);
	double dev = harness_metric_value(port, "mfmad_device_kernel_seconds_total{device=\"0\"}");
	double per_request = harness_metric_value(port, "mfmad_gemm_kernel_seconds_total");
	print_message("  %llu requests in %llu launches: kernel %.4f s on the device, %.4f s summed "
		      "over requests\n", (unsigned long long)requests, (unsigned long long)launches,
		      dev, per_request);
	assert_true(launches < requests);
	assert_true(dev > 0 && dev < per_request);
	rw_mat_free(&w);
	close(fd);
	assert_int_equal(harness_stop(&p), 0);
}

/* A client that sends NREQ GEMMs of 64 columns (B seeded from seed, ids
 * from id0) and closes its connection without reading an answer. */
static void leave_with_answers_queued(const struct mfmad_proc *p, uint32_t seed, uint64_t id0)
{
	int gone = harness_connect_raw(p);
	assert_true(gone >= 0);
	static struct want q[NREQ];
	for (int i = 0; i < NREQ; i++) {
		q[i] = (struct want){ .n = 64, .alpha = 1.0f };
		rw_mat_init(&q[i].b, K, q[i].n, seed + (uint32_t)i);
		send_gemm(gone, id0 + (uint64_t)i, &q[i]);
	}
	close(gone);
	for (int i = 0; i < NREQ; i++)
		rw_mat_free(&q[i].b);
}

/* One burst on a daemon with conf (and MFMAD_TEST_CPU_ANSWER_ARENA_MB =
 * arena_mb, NULL: none), every answer checked, the answer frames with D
 * counted by where they were laid out; then a client that sends a burst
 * (seed, ids from id0) and goes away without reading its answers, the
 * first served on, and the daemon exiting 0 (under ASan: every answer
 * frame freed, an arena's too after its device closed). */
static void answer_frames_case(const char *conf, const char *arena_mb, bool mixed,
			       long long pinned, long long heap, uint32_t seed, uint64_t id0)
{
	struct mfmad_proc p;
	const int port = start_with_metrics(&p, conf, arena_mb);
	int fd = harness_connect_raw(&p);
	assert_true(fd >= 0);
	struct rw_mat w;
	rw_mat_init(&w, M, K, 3);
	load_weight(fd, &w);
	assert_true(burst(fd, &w, mixed) > 1);
	assert_int_equal(harness_metric(port, "mfmad_gemm_answer_frames_total{memory=\"pinned\"}"),
			 pinned);
	assert_int_equal(harness_metric(port, "mfmad_gemm_answer_frames_total{memory=\"heap\"}"),
			 heap);
	leave_with_answers_queued(&p, seed, id0);
	assert_true(burst(fd, &w, false) >= 1);
	rw_mat_free(&w);
	close(fd);
	assert_int_equal(harness_stop(&p), 0);
}

/* With cuda.pinned_answers_mb set (the CUDA devices' arena of pinned
 * answer frames, nothing the CPU has) every answer with D is laid out on
 * the heap, batched or alone. */
static void test_answer_frames_on_the_heap(void **state)
{
	(void)state;
	answer_frames_case("cpu = { threads = 1; devices = 1; };\n"
			   "cuda = { pinned_answers_mb = 16; };\n",
			   NULL, false, 0, NREQ + 1, 200, 1000);
}

/* With frames carved from an arena, as a CUDA device's are
 * (MFMAD_TEST_CPU_ANSWER_ARENA_MB gives each CPU device one): the narrow
 * answers fit its 1 MiB and are counted pinned, the long one (12 MiB of
 * D) falls back to the heap. */
static void test_answer_frames_from_an_arena(void **state)
{
	(void)state;
	answer_frames_case("cpu = { threads = 1; devices = 1; };", "1", true, NREQ, 1, 300, 2000);
}

/* The worker's time by phase (mfmad_device_worker_seconds_total) after
 * bursts: it prepared and launched GEMMs and finished answers, waited for
 * launches left running only when it left some (overlap), and its phases,
 * each counted once, add up to no more than the daemon has been up. */
static void worker_phases(int port, bool left_running)
{
	static const char *const phases[] = { "idle", "prepare", "launch", "wait", "answers" };
	double v[5], sum = 0;
	for (int i = 0; i < 5; i++) {
		char name[96];
		snprintf(name, sizeof(name), "mfmad_device_worker_seconds_total{device=\"0\",phase=\"%s\"}",
			 phases[i]);
		v[i] = harness_metric_value(port, name);
		assert_true(v[i] >= 0);
		sum += v[i];
	}
	double up = harness_metric_value(port, "mfmad_uptime_seconds");
	print_message("worker: idle %.6f prepare %.6f launch %.6f wait %.6f answers %.6f s of %.3f s "
		      "up\n",
		      v[0], v[1], v[2], v[3], v[4], up);
	assert_true(v[1] > 0 && v[2] > 0 && v[4] > 0);
	/* The CPU joins a batch's columns in host memory (host_join.c): its
	 * gather and split are timed, inside the launch phase. */
	const double gather = harness_metric_value(
		port, "mfmad_device_batch_host_seconds_total{device=\"0\",step=\"gather\"}");
	const double split = harness_metric_value(
		port, "mfmad_device_batch_host_seconds_total{device=\"0\",step=\"split\"}");
	print_message("batched launches' host join: gather %.6f s, split %.6f s\n", gather, split);
	assert_true(gather > 0 && split > 0);
	assert_true(gather + split <= v[2] + 1e-6);
	if (left_running)
		assert_true(v[3] > 0);
	else
		assert_true(v[3] == 0);
	assert_true(sum <= up);
}

/* batching.overlap with a backend that leaves its batched launches
 * running (the CPU's testing aid MFMAD_TEST_CPU_LEAVE, which reports them
 * so): the worker starts the next batch before it finishes one, and every
 * answer is still its own request's, right, and written once, across
 * bursts on two connections and a client that leaves with answers queued;
 * with overlap off (and limits.loop_start off, whose lone launches are
 * left running for the worker too) no launch is left running. */
static void test_overlap(void **state)
{
	(void)state;
	struct mfmad_proc p;
	const char *confs[] = {
		"cpu = { threads = 1; devices = 1; };\nbatching = { overlap = true; };",
		"cpu = { threads = 1; devices = 1; };\nbatching = { overlap = false; };\n"
		"limits = { loop_start = false; };",
	};
	for (int k = 0; k < 2; k++) {
		int port = harness_start_metrics(&p, confs[k], "MFMAD_TEST_CPU_LEAVE", "1");
		assert_true(port > 0);
		int fd[2];
		for (int i = 0; i < 2; i++) {
			fd[i] = harness_connect_raw(&p);
			assert_true(fd[i] >= 0);
		}
		struct rw_mat w;
		rw_mat_init(&w, M, K, 3);
		load_weight(fd[0], &w);
		uint32_t widest = 0;
		for (int round = 0; round < 3; round++)
			for (int i = 0; i < 2; i++) {
				uint32_t b = burst(fd[i], &w, round == 1);
				widest = b > widest ? b : widest;
			}
		leave_with_answers_queued(&p, 500, 4000);
		assert_true(burst(fd[1], &w, false) >= 1);
		assert_true(widest > 1);
		long long left = harness_metric(port, "mfmad_gemm_batches_left_running_total");
		print_message("overlap %s: %lld launches left running, widest batch %u\n",
			      k == 0 ? "on" : "off", left, widest);
		if (k == 0)
			assert_true(left > 0);
		else
			assert_int_equal(left, 0);
		/* The worker kept to the backend's bound (BACKEND_MAX_LEFT left
		 * running at once: two held and a third started behind them, as
		 * the mixed burst's three batches are): the CPU backend refuses
		 * one more, and the batch would then be retried alone. */
		assert_int_equal(harness_metric(port, "mfmad_gemm_batches_retried_total"), 0);
		worker_phases(port, k == 0);
		rw_mat_free(&w);
		close(fd[1]);
		close(fd[0]);
		assert_int_equal(harness_stop(&p), 0);
	}
}

/* Batched launches that fail once they have run and written D (the CPU's
 * testing aid MFMAD_TEST_CPU_FAIL_BATCHES), at their start or, left
 * running (MFMAD_TEST_CPU_LEAVE), at their end: each request runs alone,
 * every answer is its own, right, sent once and counted once (answer
 * frames, requests, the weight's launches), and the retried batches are
 * counted. */
static void test_failed_batches_run_alone(void **state)
{
	(void)state;
	for (int leave = 0; leave < 2; leave++) {
		struct mfmad_proc p;
		/* Every answer frame on the heap, whatever the environment. */
		unsetenv("MFMAD_TEST_CPU_ANSWER_ARENA_MB");
		setenv("MFMAD_TEST_CPU_LEAVE", leave ? "1" : "0", 1);
		int port = harness_start_metrics(&p, conf_on, "MFMAD_TEST_CPU_FAIL_BATCHES", "1");
		unsetenv("MFMAD_TEST_CPU_LEAVE");
		assert_true(port > 0);
		int fd = harness_connect_raw(&p);
		assert_true(fd >= 0);
		struct rw_mat w;
		rw_mat_init(&w, M, K, 3);
		load_weight(fd, &w);
		/* Every answer made alone: none says it shared a launch. */
		assert_int_equal(burst(fd, &w, true), 1);
		long long retried = harness_metric(port, "mfmad_gemm_batches_retried_total");
		long long left = harness_metric(port, "mfmad_gemm_batches_left_running_total");
		print_message("left running %s: %lld batches retried alone, %lld left running\n",
			      leave ? "on" : "off", retried, left);
		assert_true(retried > 0);
		if (leave)
			assert_true(left > 0);
		assert_int_equal(
			harness_metric(port, "mfmad_gemm_answer_frames_total{memory=\"heap\"}"),
			NREQ + 1);
		assert_int_equal(
			harness_metric(port, "mfmad_requests_total{kind=\"gemm\",result=\"ok\"}"),
			NREQ + 1);
		uint64_t requests, launches;
		weight_counts(fd, &requests, &launches);
		assert_int_equal(requests, NREQ + 1);
		assert_int_equal(launches, NREQ + 1);
		rw_mat_free(&w);
		close(fd);
		assert_int_equal(harness_stop(&p), 0);
	}
}

/* Whether the daemon has a thread of this name. */
static bool has_thread(pid_t pid, const char *name)
{
	char path[300], comm[32];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *dir = opendir(path);
	assert_non_null(dir);
	bool found = false;
	for (struct dirent *e; !found && (e = readdir(dir));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid, e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		found = fgets(comm, sizeof(comm), f) && strncmp(comm, name, strlen(name)) == 0 &&
			(comm[strlen(name)] == '\n' || comm[strlen(name)] == '\0');
		fclose(f);
	}
	closedir(dir);
	return found;
}

/* limits.post_threads = 3: the device's answers are written by three
 * threads, each connection's by one of them; bursts on three connections
 * (ids apart, so every thread writes some), every answer checked, while a
 * client leaves with its answers queued. */
static void test_several_post_threads(void **state)
{
	(void)state;
	struct mfmad_proc p;
	struct rw_mat w;
	int fd[3];
	fd[0] = start(&p, "cpu = { threads = 1; devices = 1; };\nlimits = { post_threads = 3; };", &w);
	assert_true(has_thread(p.pid, "mfmad-post0"));
	assert_true(has_thread(p.pid, "mfmad-post0.1"));
	assert_true(has_thread(p.pid, "mfmad-post0.2"));
	assert_false(has_thread(p.pid, "mfmad-post0.3"));
	for (int i = 1; i < 3; i++) {
		fd[i] = harness_connect_raw(&p);
		assert_true(fd[i] >= 0);
	}
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < 3; i++)
			assert_true(burst(fd[i], &w, i == 1) >= 1);
	leave_with_answers_queued(&p, 400, 3000);
	for (int i = 0; i < 3; i++)
		assert_true(burst(fd[i], &w, false) >= 1);
	uint64_t requests, launches;
	weight_counts(fd[0], &requests, &launches);
	assert_true(requests >= 9 * (NREQ + 1));
	assert_true(launches < requests);
	for (int i = 1; i < 3; i++)
		close(fd[i]);
	stop(&p, fd[0], &w);
}

/* A post thread writes each connection's answers of a batch in one call.
 * A client that sends a burst and reads nothing for a while fills its
 * socket (the system's send buffer, limits.send_buffer_kb = 0) in the
 * middle of such a call: the frame cut there and those after it go out
 * from the loop.  A long GEMM from another connection keeps the worker
 * busy while the burst queues, so that the burst runs as one batch.
 * Every answer must still arrive once, whole and right. */
static void test_answers_fill_the_socket(void **state)
{
	(void)state;
	enum { NFILL = 48, FILL_N = 4 };
	struct mfmad_proc p;
	struct rw_mat w;
	int fd = start(&p, "cpu = { threads = 1; devices = 1; };\n"
			   "limits = { send_buffer_kb = 0; post_threads = 1; };", &w);
	int other = harness_connect_raw(&p);
	assert_true(other >= 0);
	static struct want q[NFILL + 1];
	q[0] = (struct want){ .n = LONG_N, .alpha = 1.0f };
	for (int i = 1; i <= NFILL; i++)
		q[i] = (struct want){ .n = FILL_N, .alpha = 1.0f };
	for (int i = 0; i <= NFILL; i++) {
		rw_mat_init(&q[i].b, K, q[i].n, 40 + (uint32_t)i);
		send_gemm(i ? fd : other, (uint64_t)i, &q[i]);
	}
	Mfma__V1__Response *r = rw_read(other, 120000);
	assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
	mfma__v1__response__free_unpacked(r, NULL);
	/* 48 answers of 12 KiB, some 570 KiB, wait unread. */
	struct timespec late = { .tv_sec = 0, .tv_nsec = 500 * 1000000L };
	nanosleep(&late, NULL);
	uint32_t widest = 0;
	bool seen[NFILL + 1] = { false };
	for (int i = 1; i <= NFILL; i++) {
		r = rw_read(fd, 120000);
		assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
		assert_true(r->id >= 1 && r->id <= NFILL && !seen[r->id]);
		seen[r->id] = true;
		check_d(&w, &q[r->id], r->gemm->d);
		if (r->gemm->timing->batch_requests > widest)
			widest = r->gemm->timing->batch_requests;
		mfma__v1__response__free_unpacked(r, NULL);
	}
	assert_true(widest >= 2);
	for (int i = 0; i <= NFILL; i++)
		rw_mat_free(&q[i].b);
	close(other);
	stop(&p, fd, &w);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_concurrent_requests_share_launches, harness_stop_leftover),
		cmocka_unit_test_teardown(test_different_scalars_never_share, harness_stop_leftover),
		cmocka_unit_test_teardown(test_batching_off, harness_stop_leftover),
		cmocka_unit_test_teardown(test_polling_worker, harness_stop_leftover),
		cmocka_unit_test_teardown(test_queue_delay_gathers_a_batch, harness_stop_leftover),
		cmocka_unit_test_teardown(test_enabled_live_on_sighup, harness_stop_leftover),
		cmocka_unit_test_teardown(test_queue_delay_gives_way, harness_stop_leftover),
		cmocka_unit_test_teardown(test_held_batch_not_kept_waiting, harness_stop_leftover),
		cmocka_unit_test_teardown(test_device_kernel_time_per_launch, harness_stop_leftover),
		cmocka_unit_test_teardown(test_answer_frames_on_the_heap, harness_stop_leftover),
		cmocka_unit_test_teardown(test_answer_frames_from_an_arena, harness_stop_leftover),
		cmocka_unit_test_teardown(test_several_post_threads, harness_stop_leftover),
		cmocka_unit_test_teardown(test_answers_fill_the_socket, harness_stop_leftover),
		cmocka_unit_test_teardown(test_overlap, harness_stop_leftover),
		cmocka_unit_test_teardown(test_failed_batches_run_alone, harness_stop_leftover),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
