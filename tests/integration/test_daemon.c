/* The daemon's own behaviour through the real client library: listeners,
 * start-up errors, weight budget and names, deadlines, device choice,
 * connection limits. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpu_gemm.h"
#include "harness.h"
#include "harness_gemm.h"
#include "mfma.h"
#include "mfma_clock.h"

static float *rand_f32(size_t n, unsigned seed)
{
	float *p = malloc(n * sizeof(*p));
	srand(seed);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(rand() % 2001) / 1000.0f - 1.0f;
	return p;
}

static void check_result(const struct mfma_gemm_result *r, const float *A, const float *B,
			 uint32_t m, uint32_t k, uint32_t n)
{
	struct mfma_gemm g = { .m = m, .n = n, .k = k, .in_dtype = MFMA_DT_F32,
			       .out_dtype = MFMA_DT_F32, .alpha = 1, .a = A, .b = B,
			       .d = (void *)r->d.data };
	double *ref = malloc((size_t)m * n * sizeof(*ref));
	assert_int_equal(cpu_gemm_ref_f64(&g, ref), 0);
	assert_true(cpu_rel_frobenius(r->d.data, MFMA_DT_F32, ref, (size_t)m * n) < 1e-5);
	free(ref);
}

static void test_tcp_listener(void **state)
{
	(void)state;
	struct mfmad_proc d;
	char tcp[32], ep[64];
	int port = harness_free_port();
	snprintf(tcp, sizeof(tcp), "127.0.0.1:%d", port);
	const char *args[] = { "--tcp", tcp, NULL };
	assert_int_equal(harness_start(&d, NULL, args), 0);
	snprintf(ep, sizeof(ep), "tcp:127.0.0.1:%d", port);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(ep, &c, &err), 0);
	float *A = rand_f32(33 * 20, 1), *B = rand_f32(20 * 7, 2);
	struct mfma_gemm_args ga;
	harness_dense_f32_args(&ga, A, B, 33, 20, 7);
	struct mfma_gemm_result r;
	assert_int_equal(mfma_gemm(c, &ga, &r, &err), 0);
	check_result(&r, A, B, 33, 20, 7);
	assert_string_equal(r.device.backend, "cpu");
	mfma_gemm_result_free(&r);
	mfma_close(c);
	free(A);
	free(B);
	assert_int_equal(harness_stop(&d), 0);
}

/* Runs mfmad with arguments and no socket, expecting it to exit at once. */
static int run_expect_exit(const char *conf, const char *const *args, char *log, size_t loglen)
{
	struct mfmad_proc d;
	int rc = harness_start(&d, conf, args);
	/* harness_start fails (and prints the log) when mfmad exits early. */
	int status = rc == 0 ? harness_stop(&d) : -1;
	FILE *f = fopen(d.log, "r");
	size_t n = f ? fread(log, 1, loglen - 1, f) : 0;
	log[n] = '\0';
	if (f)
		fclose(f);
	harness_remove(&d);
	return rc == 0 ? status : -1;
}

static void test_startup_errors(void **state)
{
	(void)state;
	char log[8192];
	const char *args[] = { "--tcp", "0.0.0.0:7999", NULL };
	assert_int_equal(run_expect_exit(NULL, args, log, sizeof(log)), -1);
	assert_non_null(strstr(log, "is not a loopback address"));
	assert_int_equal(run_expect_exit("limits = { max_inflight = -3; };", NULL, log, sizeof(log)), -1);
	assert_non_null(strstr(log, "mfmad.conf:1: limits.max_inflight = -3 is out of range"));
}

static void test_check_config(void **state)
{
	(void)state;
	const char *bin = getenv("MFMAD_BIN");
	char out[8192];
	const char *ok[] = { bin, "--check-config", "--config", CONF_FILE, NULL };
	assert_int_equal(harness_run(ok, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "max_inflight_per_connection = 64;"));
	const char *usage[] = { bin, "--threads", "lots", NULL };
	assert_int_equal(harness_run(usage, out, sizeof(out)), 2);
	const char *help[] = { bin, "--help", NULL };
	assert_int_equal(harness_run(help, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "--check-config"));
	/* --version: the version, the backends, a CUDA build's kernel digest. */
	const char *ver[] = { bin, "--version", NULL };
	assert_int_equal(harness_run(ver, out, sizeof(out)), 0);
	assert_int_equal(strncmp(out, "mfmad ", 6), 0);
	assert_non_null(strstr(out, "\nbackends: cpu"));
	const char *cuda = strstr(out, ", cuda"), *with = ", cuda (kernels ";
	if (cuda) {
		assert_int_equal(strncmp(cuda, with, strlen(with)), 0);
		assert_int_equal(strspn(cuda + strlen(with), "0123456789abcdef"), 12);
		assert_int_equal(cuda[strlen(with) + 12], ')');
	}
}

static void test_weights_budget_and_names(void **state)
{
	(void)state;
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, "weights = { budget_mb = 1; };", NULL), 0);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	float *W = rand_f32(512 * 512, 3); /* 1 MiB dense: fits exactly */
	struct mfma_load_args la;
	mfma_load_args_init(&la);
	la.name = "w1";
	la.a.kind = MFMA_OPERAND_DENSE;
	la.a.dense = (struct mfma_matrix){ 512, 512, MFMA_TYPE_F32, W, 512 * 512 * 4 };
	assert_int_equal(mfma_load_weight(c, &la, NULL, &err), 0);
	struct mfma_status st;
	assert_int_equal(mfma_status(c, &st, &err), 0);
	assert_int_equal(st.weight_budget, 1u << 20);
	assert_int_equal(st.weight_bytes, 1u << 20);
	mfma_status_free(&st);
	la.name = "w2";
	int rc = mfma_load_weight(c, &la, NULL, &err);
	assert_int_equal(rc, MFMA_EREMOTE(MFMA_CODE_RESOURCE_EXHAUSTED));
	assert_non_null(strstr(err.message, "weight 'w2' needs 1048576 bytes on device 0"));
	/* Pruned to 2:4 it takes about half and fits next to... nothing: still full. */
	la.name = "w1";
	rc = mfma_load_weight(c, &la, NULL, &err);
	assert_int_equal(rc, MFMA_EREMOTE(MFMA_CODE_ALREADY_EXISTS));
	la.name = "bad name!";
	rc = mfma_load_weight(c, &la, NULL, &err);
	assert_int_equal(rc, MFMA_EREMOTE(MFMA_CODE_INVALID_ARGUMENT));
	assert_non_null(strstr(err.message, "has character 0x20"));
	/* Unload frees the budget: a 2:4 replacement then loads. */
	assert_int_equal(mfma_unload_weight(c, "w1", &err), 0);
	la.name = "w1";
	la.a.sparsity = MFMA_SPARSITY_PRUNE_24;
	struct mfma_load_result lr;
	assert_int_equal(mfma_load_weight(c, &la, &lr, &err), 0);
	assert_true(lr.weight.sparse);
	/* values: 512 x 256 f32; meta: 512 rows x 16 words. */
	assert_int_equal(lr.weight.bytes, 512 * 256 * 4 + 512 * 16 * 4);
	mfma_load_result_free(&lr);
	mfma_close(c);
	free(W);
	assert_int_equal(harness_stop(&d), 0);
}

/* A request that waits behind a long one past its deadline is answered
 * DEADLINE_EXCEEDED; the long one still succeeds. */
static void test_deadline(void **state)
{
	(void)state;
	struct mfmad_proc d;
	const char *args[] = { "--threads", "1", NULL };
	assert_int_equal(harness_start(&d, NULL, args), 0);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	uint32_t n = 512;
	float *A = rand_f32((size_t)n * n, 4), *B = rand_f32((size_t)n * n, 5);
	struct mfma_gemm_args big, small;
	harness_dense_f32_args(&big, A, B, n, n, n);
	harness_dense_f32_args(&small, A, B, 4, 4, 4);
	small.a.dense.bytes = 16 * 4;
	small.b = (struct mfma_matrix){ 4, 4, MFMA_TYPE_F32, B, 16 * 4 };
	small.timeout_us = 1;
	uint64_t id_big[3], id_small;
	for (int i = 0; i < 3; i++)
		assert_int_equal(mfma_gemm_submit(c, &big, &id_big[i], &err), 0);
	assert_int_equal(mfma_gemm_submit(c, &small, &id_small, &err), 0);
	struct mfma_gemm_result r;
	uint64_t done;
	int rc = mfma_wait(c, id_small, 60000, &done, &r, &err);
	assert_int_equal(rc, MFMA_EREMOTE(MFMA_CODE_DEADLINE_EXCEEDED));
	assert_non_null(strstr(err.message, "timeout of 1 us passed while queued"));
	for (int i = 0; i < 3; i++) {
		assert_int_equal(mfma_wait(c, id_big[i], 60000, &done, &r, &err), 0);
		check_result(&r, A, B, n, n, n);
		mfma_gemm_result_free(&r);
	}
	/* A device that does not exist. */
	big.device = 3;
	rc = mfma_gemm(c, &big, &r, &err);
	assert_int_equal(rc, MFMA_EREMOTE(MFMA_CODE_INVALID_ARGUMENT));
	assert_non_null(strstr(err.message, "device=3 does not exist"));
	mfma_close(c);
	free(A);
	free(B);
	assert_int_equal(harness_stop(&d), 0);
}

static void test_connection_limit(void **state)
{
	(void)state;
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, "limits = { max_connections = 2; };", NULL), 0);
	mfma_client *c1, *c2, *c3;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c1, &err), 0);
	/* Wait until the harness' readiness probe is gone from the count. */
	for (int i = 0; i < 100; i++) {
		struct mfma_status st;
		assert_int_equal(mfma_status(c1, &st, &err), 0);
		uint64_t open = st.counters.connections_open;
		mfma_status_free(&st);
		if (open == 1)
			break;
		usleep(10000);
	}
	assert_int_equal(mfma_connect(d.endpoint, &c2, &err), 0);
	assert_int_equal(mfma_ping(c2, NULL, 0, NULL, &err), 0);
	int rc = mfma_connect(d.endpoint, &c3, &err);
	if (rc == 0) {
		/* Refused after the accept: the first answer says why. */
		rc = mfma_ping(c3, NULL, 0, NULL, &err);
		mfma_close(c3);
	}
	assert_true(rc < 0);
	if (!strstr(err.message, "too many connections"))
		fail_msg("refused with \"%s\"", err.message);
	assert_int_equal(mfma_ping(c1, NULL, 0, NULL, &err), 0);
	mfma_close(c1);
	mfma_close(c2);
	assert_int_equal(harness_stop(&d), 0);
}

/* A device that loses its context (a GPU fault, after which every call
 * fails: MFMAD_TEST_CPU_LOSE has CPU device 0 do so after two GEMMs).  The
 * request that finds it fails UNAVAILABLE naming the fault, and device 1
 * serves every later one; a request pinned to device 0 is refused saying
 * why, status shows the fault, /metrics says the device is down, and
 * /readyz stays 200 while device 1 serves.  Device 0 went on taking work
 * (its queue always the shortest), failing each request with INTERNAL. */
static void test_lost_device(void **state)
{
	(void)state;
	struct mfmad_proc d;
	int port = harness_start_metrics(&d, "cpu = { devices = 2; threads = 1; };",
					 "MFMAD_TEST_CPU_LOSE", "0:2");
	assert_true(port > 0);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	uint32_t n = 32;
	float *A = rand_f32((size_t)n * n, 8), *B = rand_f32((size_t)n * n, 9);
	struct mfma_gemm_args ga;
	harness_dense_f32_args(&ga, A, B, n, n, n);
	int on[2] = { 0, 0 }, failed = 0;
	for (int i = 0; i < 24; i++) {
		struct mfma_gemm_result r;
		int rc = mfma_gemm(c, &ga, &r, &err);
		if (rc < 0) {
			failed++;
			assert_int_equal(rc, MFMA_EREMOTE(MFMA_CODE_UNAVAILABLE));
			if (!strstr(err.message, "device 0 (cpu") ||
			    !strstr(err.message, "lost its context") ||
			    !strstr(err.message, "MFMAD_TEST_CPU_LOSE"))
				fail_msg("the failed request says: %s", err.message);
			continue;
		}
		check_result(&r, A, B, n, n, n);
		on[r.device.index]++;
		mfma_gemm_result_free(&r);
	}
	printf("24 requests: %d on device 0, %d on device 1, %d failed\n", on[0], on[1], failed);
	assert_int_equal(on[0], 2);
	assert_int_equal(failed, 1);
	assert_int_equal(on[1], 21);
	ga.device = 0;
	struct mfma_gemm_result r0;
	assert_int_equal(mfma_gemm(c, &ga, &r0, &err), MFMA_EREMOTE(MFMA_CODE_UNAVAILABLE));
	assert_non_null(strstr(err.message, "lost its context"));
	struct mfma_status st;
	assert_int_equal(mfma_status(c, &st, &err), 0);
	assert_non_null(strstr(st.devices[0].fault, "lost its context"));
	assert_string_equal(st.devices[1].fault, "");
	mfma_status_free(&st);
	assert_int_equal(harness_metric(port, "mfmad_device_up{device=\"0\"}"), 0);
	assert_int_equal(harness_metric(port, "mfmad_device_up{device=\"1\"}"), 1);
	char body[512];
	assert_int_equal(harness_http_get(port, "/readyz", body, sizeof(body)), 200);
	assert_int_equal(harness_log_count(&d, "it takes no more work"), 1);
	free(A);
	free(B);
	mfma_close(c);
	assert_int_equal(harness_stop(&d), 0);
}

/* Two CPU queues: requests spread over both; each device's counters show it. */
static void test_two_devices(void **state)
{
	(void)state;
	struct mfmad_proc d;
	const char *args[] = { "--cpu-devices", "2", "--threads", "1", NULL };
	assert_int_equal(harness_start(&d, "weights = { budget_mb = 3; };", args), 0);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	uint32_t n = 256;
	float *A = rand_f32((size_t)n * n, 6), *B = rand_f32((size_t)n * n, 7);
	struct mfma_gemm_args ga;
	harness_dense_f32_args(&ga, A, B, n, n, n);
	uint64_t ids[8];
	for (int i = 0; i < 8; i++)
		assert_int_equal(mfma_gemm_submit(c, &ga, &ids[i], &err), 0);
	int on[2] = { 0, 0 };
	for (int i = 0; i < 8; i++) {
		struct mfma_gemm_result r;
		uint64_t done;
		assert_int_equal(mfma_wait(c, MFMA_ANY, 60000, &done, &r, &err), 0);
		check_result(&r, A, B, n, n, n);
		assert_true(r.device.index < 2);
		on[r.device.index]++;
		mfma_gemm_result_free(&r);
	}
	assert_true(on[0] > 0 && on[1] > 0);
	struct mfma_status st;
	assert_int_equal(mfma_status(c, &st, &err), 0);
	assert_int_equal(st.n_devices, 2);
	assert_int_equal(st.devices[0].completed + st.devices[1].completed, 8);
	assert_int_equal(st.weight_budget, 2 * (3u << 20)); /* per device, summed */
	/* Each worker that ran GEMMs spent time launching them and finishing
	 * their answers; no worker's phases add up to more than the uptime. */
	for (size_t i = 0; i < 2; i++) {
		const struct mfma_device_status *ds = &st.devices[i];
		uint64_t sum = ds->worker_idle_ns + ds->worker_prepare_ns + ds->worker_launch_ns +
			       ds->worker_wait_ns + ds->worker_answers_ns;
		assert_true(ds->worker_launch_ns > 0 && ds->worker_answers_ns > 0);
		assert_true(sum <= st.uptime_ns);
	}
	mfma_status_free(&st);
	mfma_close(c);
	free(A);
	free(B);
	assert_int_equal(harness_stop(&d), 0);
}

/* The daemon's CPU time (user and system), seconds, from /proc. */
static double cpu_seconds(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char buf[1024];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* Fields 14 and 15, counted after the command's closing parenthesis. */
	const char *p = strrchr(buf, ')');
	assert_non_null(p);
	unsigned long long ut = 0, st = 0;
	assert_int_equal(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
				&st),
			 2);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The daemon's CPU seconds per wall second over eight 1024^3 f32 GEMMs,
 * started with args. */
static double dense_cpu_share(const char *const *args, const char *how)
{
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, NULL, args), 0);
	mfma_client *c = harness_client(&d);
	uint32_t n = 1024;
	float *A = rand_f32((size_t)n * n, 8), *B = rand_f32((size_t)n * n, 9);
	struct mfma_gemm_args ga;
	harness_dense_f32_args(&ga, A, B, n, n, n);
	struct mfma_error err;
	struct mfma_gemm_result r;
	assert_int_equal(mfma_gemm(c, &ga, &r, &err), 0); /* warm */
	mfma_gemm_result_free(&r);
	double c0 = cpu_seconds(d.pid);
	uint64_t t0 = mfma_clock_ns();
	for (int i = 0; i < 8; i++) {
		assert_int_equal(mfma_gemm(c, &ga, &r, &err), 0);
		mfma_gemm_result_free(&r);
	}
	double wall = (double)(mfma_clock_ns() - t0) / 1e9, cpu = cpu_seconds(d.pid) - c0;
	printf("eight 1024^3 f32 GEMMs %s: %.2f s of CPU in %.2f s (%.2f)\n", how, cpu, wall,
	       cpu / wall);
	mfma_close(c);
	free(A);
	free(B);
	assert_int_equal(harness_stop(&d), 0);
	return cpu / wall;
}

/* cpu.threads (--threads) bounds a dense float GEMM too: OpenBLAS, which
 * runs those, took every core whatever the setting (on two cores, 1.3-1.5
 * seconds of CPU a second with --threads 1).  Left at 0, it takes
 * OPENBLAS_NUM_THREADS where that is set, as OpenBLAS itself does (the
 * daemon had set every core over it). */
static void test_threads_bound_dense(void **state)
{
	(void)state;
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		print_message("  (one core: nothing to bound)\n");
		skip();
	}
	const char *args[] = { "--threads", "1", NULL };
	assert_true(dense_cpu_share(args, "with --threads 1") < 1.15);
	/* OPENBLAS_NUM_THREADS=1 against 2, cpu.threads left at 0: OpenBLAS
	 * starts one thread of its own fewer (the daemon's share of every
	 * core had started the second one in both). */
	const char *old = getenv("OPENBLAS_NUM_THREADS");
	char *keep = old ? strdup(old) : NULL;
	int threads[2];
	for (int i = 0; i < 2; i++) {
		setenv("OPENBLAS_NUM_THREADS", i ? "2" : "1", 1);
		struct mfmad_proc d;
		assert_int_equal(harness_start(&d, NULL, NULL), 0);
		threads[i] = (int)harness_proc_status(d.pid, "Threads");
		assert_int_equal(harness_stop(&d), 0);
	}
	if (keep)
		setenv("OPENBLAS_NUM_THREADS", keep, 1);
	else
		unsetenv("OPENBLAS_NUM_THREADS");
	free(keep);
	printf("the daemon's threads with OPENBLAS_NUM_THREADS 1 and 2: %d, %d\n", threads[0],
	       threads[1]);
	assert_int_equal(threads[0] + 1, threads[1]);
}

/* A worker that has done nothing since it opened its device is idle, and
 * its idle time grows from one status to the next while it still waits
 * (the running phase counts up to the moment asked, not only once it
 * ends), never past the uptime. */
static void test_idle_worker_counts_while_idle(void **state)
{
	(void)state;
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, "cpu = { threads = 1; devices = 1; };", NULL), 0);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	struct mfma_status st[2];
	for (int i = 0; i < 2; i++) {
		if (i)
			usleep(300 * 1000);
		assert_int_equal(mfma_status(c, &st[i], &err), 0);
		const struct mfma_device_status *ds = &st[i].devices[0];
		assert_true(ds->worker_idle_ns + ds->worker_prepare_ns <= st[i].uptime_ns);
		assert_int_equal(ds->worker_launch_ns + ds->worker_wait_ns + ds->worker_answers_ns, 0);
	}
	uint64_t grew = st[1].devices[0].worker_idle_ns - st[0].devices[0].worker_idle_ns;
	print_message("idle %.3f s, then %.3f s (%.3f s up)\n", st[0].devices[0].worker_idle_ns / 1e9,
		      st[1].devices[0].worker_idle_ns / 1e9, st[1].uptime_ns / 1e9);
	assert_true(st[1].devices[0].worker_idle_ns >= st[0].devices[0].worker_idle_ns);
	assert_true(grew >= 250ull * 1000 * 1000);
	for (int i = 0; i < 2; i++)
		mfma_status_free(&st[i]);
	mfma_close(c);
	assert_int_equal(harness_stop(&d), 0);
}

/* Frames over 1 MiB are decoded off the loop; pipelined with small ones on
 * the same connection, every answer is still right and all come back. */
static void test_large_frames_pipelined(void **state)
{
	(void)state;
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, NULL, NULL), 0);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	float *A = rand_f32(1024 * 512, 8), *B = rand_f32(512 * 9, 9);
	struct mfma_gemm_args big, small;
	harness_dense_f32_args(&big, A, B, 1024, 512, 9); /* a 2 MiB A */
	harness_dense_f32_args(&small, A, B, 3, 4, 9);
	small.b = (struct mfma_matrix){ 4, 9, MFMA_TYPE_F32, B, 4 * 9 * 4 };
	uint64_t ids[6];
	for (int i = 0; i < 6; i++)
		assert_int_equal(mfma_gemm_submit(c, i % 2 ? &small : &big, &ids[i], &err), 0);
	for (int i = 0; i < 6; i++) {
		struct mfma_gemm_result r;
		uint64_t done;
		assert_int_equal(mfma_wait(c, ids[i], 60000, &done, &r, &err), 0);
		if (i % 2) {
			check_result(&r, A, B, 3, 4, 9);
		} else {
			check_result(&r, A, B, 1024, 512, 9);
			assert_true(r.timing.prep_ns > 0); /* the decode is reported */
		}
		mfma_gemm_result_free(&r);
	}
	mfma_close(c);
	free(A);
	free(B);
	assert_int_equal(harness_stop(&d), 0);
}

/* A client that stops reading its (large) answers does not keep the
 * daemon from exiting on SIGTERM: it is cut off after the grace period
 * plus the 5 s drain window, and the daemon still exits 0. */
static void test_stop_with_stalled_reader(void **state)
{
	(void)state;
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, "shutdown_grace_ms = 100;", NULL), 0);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	/* 1024x4 times 4x1024: 32 KiB in, a 4 MiB answer out. */
	float *A = rand_f32(1024 * 4, 10), *B = rand_f32(4 * 1024, 11);
	struct mfma_gemm_args ga;
	harness_dense_f32_args(&ga, A, B, 1024, 4, 1024);
	for (int i = 0; i < 16; i++) {
		uint64_t id;
		assert_int_equal(mfma_gemm_submit(c, &ga, &id, &err), 0);
	}
	usleep(500 * 1000); /* the answers pile up; nobody reads them */
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(harness_stop(&d), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	print_message("stopped %.1f s after SIGTERM with an unread backlog\n", secs);
	assert_true(secs < 15.0);
	mfma_close(c);
	free(A);
	free(B);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcp_listener),
		cmocka_unit_test(test_startup_errors),
		cmocka_unit_test(test_check_config),
		cmocka_unit_test(test_weights_budget_and_names),
		cmocka_unit_test(test_deadline),
		cmocka_unit_test(test_connection_limit),
		cmocka_unit_test(test_two_devices),
		cmocka_unit_test(test_lost_device),
		cmocka_unit_test(test_threads_bound_dense),
		cmocka_unit_test(test_idle_worker_counts_while_idle),
		cmocka_unit_test(test_large_frames_pipelined),
		cmocka_unit_test(test_stop_with_stalled_reader),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
