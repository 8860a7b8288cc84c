/* /metrics rendering on a known set of counters (exact lines, Prometheus's
 * own checker) and the HTTP endpoints served by libmicrohttpd. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "metrics.h"
#include "mfma_clock.h"
#include "mfmad_build.h"
#include "sdtest.h"

static struct mfmad_stats *known_stats(void)
{
	struct mfmad_stats *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	s->start_ns = 5000000000ull;
	s->ready = 1;
	s->requests[STATS_GEMM][STATS_OK] = 1234;
	s->requests[STATS_GEMM][STATS_INVALID] = 7;
	s->requests[STATS_GEMM][STATS_DEADLINE] = 2;
	s->requests[STATS_LOAD][STATS_OK] = 3;
	s->requests[STATS_PING][STATS_OK] = 11;
	s->requests[STATS_STATUS][STATS_MALFORMED] = 1;
	s->matrices_in_place = 40;
	s->matrices_copied = 2;
	s->reader_frames = 5;
	s->answer_frames[STATS_FRAME_PINNED] = 30;
	s->answer_frames[STATS_FRAME_HEAP] = 4;
	s->request_frames[STATS_FRAME_PINNED] = 21;
	s->request_frames[STATS_FRAME_HEAP] = 9;
	s->batches_left = 17;
	s->batches_retried = 2;
	s->gemm_queue_ns = 1500000000ull;   /* 1.5 s */
	s->gemm_h2d_ns = 25000;              /* 25 µs */
	s->gemm_kernel_ns = 3000000001ull;   /* 3 s + 1 ns */
	s->gemm_d2h_ns = 0;
	s->gemm_total_ns = 12000000000ull;  /* 12 s */
	s->gemm_flops = 987654321;
	stats_observe_batch(s, 1);
	stats_observe_batch(s, 5);
	stats_observe_batch(s, 300);
	/* Warming made 16 plans and 10 choices at load; two GEMMs made 3
	 * plans, one measured, on the serving path. */
	s->plans_load = 16;
	s->measures_load = 10;
	stats_observe_planning(s, 2, 1);
	stats_observe_planning(s, 1, 0);
	stats_observe_trial(s, false);
	stats_observe_trial(s, true);
	stats_observe_trial(s, false);
	/* 4 requests <= 10 µs, 2 in (25, 50] µs, 1 above the last bound. */
	stats_observe_latency(s, 9000);
	stats_observe_latency(s, 10000);
	stats_observe_latency(s, 1);
	stats_observe_latency(s, 5000);
	stats_observe_latency(s, 30000);
	stats_observe_latency(s, 50000);
	stats_observe_latency(s, 20000000000ull);
	s->connections_open = 2;
	s->connections_total = 40;
	s->tls_handshakes_ok = 9;
	s->tls_handshakes_failed = 4;
	s->in_flight = 5;
	s->weights = 2;
	s->weight_bytes = 3u << 20;
	s->weight_budget = 1ull << 34;
	s->ndevices = 2;
	strcpy(s->dev[0].backend, "cuda");
	strcpy(s->dev[0].arch, "sm_90");
	strcpy(s->dev[0].name, "NVIDIA H200");
	s->dev[0].mem_total = 150000000000ull;
	s->dev[0].queued = 3;
	s->dev[0].in_flight = 2;
	s->dev[0].completed = 1000;
	s->dev[0].failed = 1;
	s->dev[0].up = 1; /* device 1 lost its context */
	s->dev[0].weight_bytes = 2u << 20;
	s->dev[0].kernel_ns = 2500000000ull;
	s->dev[0].launch_ns = 125000000ull;
	s->dev[0].worker_ns[STATS_WORKER_IDLE] = 1500000000ull;
	s->dev[0].worker_ns[STATS_WORKER_PREPARE] = 5000ull;
	s->dev[0].worker_ns[STATS_WORKER_LAUNCH] = 250000000ull;
	s->dev[0].worker_ns[STATS_WORKER_WAIT] = 2000000000ull;
	s->dev[0].worker_ns[STATS_WORKER_ANSWERS] = 750000ull;
	/* Device 1's worker has waited since 0.25 s before the render: the
	 * running phase counts up to it. */
	s->dev[1].worker_ns[STATS_WORKER_WAIT] = 1000000000ull;
	s->dev[1].worker_phase = STATS_WORKER_WAIT;
	s->dev[1].worker_since_ns = 12000000000ull;
	s->dev[0].gather_ns = 30000000ull;
	s->dev[1].split_ns = 7ull;
	strcpy(s->dev[1].backend, "cpu");
	strcpy(s->dev[1].arch, "x86-64");
	/* A name needing every escape, filling the whole field (no NUL). */
	memset(s->dev[1].name, 'x', sizeof(s->dev[1].name));
	memcpy(s->dev[1].name, "a\"b\\c\nd", 7);
	s->dev[1].mem_total = 1ull << 36;
	s->dev[1].completed = 234;
	s->dev[1].inline_runs = 200;
	s->dev[0].loop_starts = 40;
	s->dev[0].gated = 12;
	s->dev[0].tile_out = 7;
	s->dev[1].weight_bytes = 1u << 20;
	s->dev[1].kernel_ns = 500000000ull;
	return s;
}

static char *render_known(struct mfmad_stats *s, size_t *len)
{
	char *out = NULL;
	/* 7.25 s after start_ns. */
	assert_int_equal(metrics_render_at(s, 12250000000ull, &out, len), 0);
	assert_non_null(out);
	assert_int_equal(strlen(out), *len);
	return out;
}

/* Whether text holds line as a whole line. */
static int has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return 1;
	return 0;
}

#define assert_line(text, line)                                                    \
	do {                                                                       \
		if (!has_line((text), (line)))                                     \
			fail_msg("missing line: %s", (line));                      \
	} while (0)

static void test_render_exact_lines(void **state)
{
	(void)state;
	size_t len;
	struct mfmad_stats *s = known_stats();
	s->loop_beat_ns = 12100000000ull; /* 0.15 s before the render */
	char *out = render_known(s, &len);

	assert_line(out, "mfmad_build_info{version=\"" MFMAD_VERSION "\"} 1");
	assert_line(out, "mfmad_up 1");
	assert_line(out, "mfmad_ready 1");
	assert_line(out, "mfmad_stopping 0");
	assert_line(out, "mfmad_uptime_seconds 7.25");
	assert_line(out, "mfmad_event_loop_tick_age_seconds 0.15");
	assert_line(out, "mfmad_device_up{device=\"0\"} 1");
	assert_line(out, "mfmad_device_up{device=\"1\"} 0");

	assert_line(out, "# TYPE mfmad_requests_total counter");
	assert_line(out, "mfmad_requests_total{kind=\"gemm\",result=\"ok\"} 1234");
	assert_line(out, "mfmad_requests_total{kind=\"gemm\",result=\"invalid\"} 7");
	assert_line(out, "mfmad_requests_total{kind=\"gemm\",result=\"deadline\"} 2");
	assert_line(out, "mfmad_requests_total{kind=\"gemm\",result=\"busy\"} 0");
	assert_line(out, "mfmad_requests_total{kind=\"load_weight\",result=\"ok\"} 3");
	assert_line(out, "mfmad_requests_total{kind=\"ping\",result=\"ok\"} 11");
	assert_line(out, "mfmad_requests_total{kind=\"status\",result=\"malformed\"} 1");
	assert_line(out, "mfmad_requests_total{kind=\"unload_weight\",result=\"not_found\"} 0");
	assert_line(out, "# TYPE mfmad_gemm_matrices_total counter");
	assert_line(out, "mfmad_gemm_matrices_total{placement=\"in_place\"} 40");
	assert_line(out, "mfmad_gemm_matrices_total{placement=\"copied\"} 2");
	assert_line(out, "# TYPE mfmad_reader_frames_total counter");
	assert_line(out, "mfmad_reader_frames_total 5");
	assert_line(out, "# TYPE mfmad_gemm_answer_frames_total counter");
	assert_line(out, "mfmad_gemm_answer_frames_total{memory=\"pinned\"} 30");
	assert_line(out, "mfmad_gemm_answer_frames_total{memory=\"heap\"} 4");
	assert_line(out, "# TYPE mfmad_gemm_batches_left_running_total counter");
	assert_line(out, "mfmad_gemm_batches_left_running_total 17");
	assert_line(out, "# TYPE mfmad_gemm_batches_retried_total counter");
	assert_line(out, "mfmad_gemm_batches_retried_total 2");
	assert_line(out, "# TYPE mfmad_gemm_request_frames_total counter");
	assert_line(out, "mfmad_gemm_request_frames_total{memory=\"pinned\"} 21");
	assert_line(out, "mfmad_gemm_request_frames_total{memory=\"heap\"} 9");
	assert_line(out, "mfmad_requests_total{kind=\"list_weights\",result=\"internal\"} 0");
	/* Frames that were not a request of a known kind. */
	assert_line(out, "mfmad_requests_total{kind=\"other\",result=\"malformed\"} 0");

	assert_line(out, "# TYPE mfmad_gemm_queue_seconds_total counter");
	assert_line(out, "mfmad_gemm_queue_seconds_total 1.5");
	assert_line(out, "mfmad_gemm_h2d_seconds_total 0.000025");
	assert_line(out, "mfmad_gemm_kernel_seconds_total 3.000000001");
	assert_line(out, "mfmad_gemm_d2h_seconds_total 0");
	assert_line(out, "mfmad_gemm_server_seconds_total 12");
	assert_line(out, "mfmad_gemm_flops_total 987654321");
	assert_line(out, "mfmad_gemm_executions_total 3");
	assert_line(out, "mfmad_gemm_batch_size_bucket{le=\"1\"} 1");
	assert_line(out, "mfmad_gemm_batch_size_bucket{le=\"8\"} 2");
	assert_line(out, "mfmad_gemm_batch_size_bucket{le=\"+Inf\"} 3");
	assert_line(out, "mfmad_gemm_batch_size_sum 306");
	assert_line(out, "mfmad_gemm_batch_size_count 3");
	assert_line(out, "# TYPE mfmad_gemm_plans_total counter");
	assert_line(out, "mfmad_gemm_plans_total{when=\"load\"} 16");
	assert_line(out, "mfmad_gemm_plans_total{when=\"serving\"} 3");
	assert_line(out, "# TYPE mfmad_gemm_choice_measurements_total counter");
	assert_line(out, "mfmad_gemm_choice_measurements_total{when=\"load\"} 10");
	assert_line(out, "mfmad_gemm_choice_measurements_total{when=\"serving\"} 1");
	assert_line(out, "# TYPE mfmad_gemm_choice_trials_total counter");
	assert_line(out, "mfmad_gemm_choice_trials_total{outcome=\"kept\"} 2");
	assert_line(out, "mfmad_gemm_choice_trials_total{outcome=\"changed\"} 1");

	/* Cumulative buckets, with bounds in seconds. */
	assert_line(out, "# TYPE mfmad_request_duration_seconds histogram");
	assert_line(out, "mfmad_request_duration_seconds_bucket{le=\"0.00001\"} 4");
	assert_line(out, "mfmad_request_duration_seconds_bucket{le=\"0.000025\"} 4");
	assert_line(out, "mfmad_request_duration_seconds_bucket{le=\"0.00005\"} 6");
	assert_line(out, "mfmad_request_duration_seconds_bucket{le=\"0.0001\"} 6");
	assert_line(out, "mfmad_request_duration_seconds_bucket{le=\"1\"} 6");
	assert_line(out, "mfmad_request_duration_seconds_bucket{le=\"10\"} 6");
	assert_line(out, "mfmad_request_duration_seconds_bucket{le=\"+Inf\"} 7");
	assert_line(out, "mfmad_request_duration_seconds_sum 20.000104001");
	assert_line(out, "mfmad_request_duration_seconds_count 7");

	assert_line(out, "mfmad_connections_open 2");
	assert_line(out, "mfmad_connections_total 40");
	assert_line(out, "mfmad_tls_handshakes_total{result=\"ok\"} 9");
	assert_line(out, "mfmad_tls_handshakes_total{result=\"failed\"} 4");
	assert_line(out, "mfmad_in_flight_requests 5");
	assert_line(out, "mfmad_resident_weights 2");
	assert_line(out, "mfmad_weight_bytes 3145728");
	assert_line(out, "mfmad_weight_budget_bytes 17179869184");

	assert_line(out, "mfmad_devices 2");
	assert_line(out, "mfmad_device_info{device=\"0\",backend=\"cuda\",arch=\"sm_90\","
			 "name=\"NVIDIA H200\"} 1");
	assert_line(out, "mfmad_device_memory_total_bytes{device=\"0\"} 150000000000");
	assert_line(out, "mfmad_device_memory_total_bytes{device=\"1\"} 68719476736");
	assert_line(out, "mfmad_device_weight_bytes{device=\"0\"} 2097152");
	assert_line(out, "mfmad_device_weight_bytes{device=\"1\"} 1048576");
	assert_line(out, "mfmad_device_queued_requests{device=\"0\"} 3");
	assert_line(out, "mfmad_device_queued_requests{device=\"1\"} 0");
	assert_line(out, "mfmad_device_in_flight_requests{device=\"0\"} 2");
	assert_line(out, "mfmad_device_completed_total{device=\"0\"} 1000");
	assert_line(out, "mfmad_device_completed_total{device=\"1\"} 234");
	assert_line(out, "mfmad_device_inline_total{device=\"0\"} 0");
	assert_line(out, "mfmad_device_inline_total{device=\"1\"} 200");
	assert_line(out, "mfmad_device_loop_starts_total{device=\"0\"} 40");
	assert_line(out, "mfmad_device_loop_starts_total{device=\"1\"} 0");
	assert_line(out, "mfmad_device_gated_total{device=\"0\"} 12");
	assert_line(out, "mfmad_device_gated_total{device=\"1\"} 0");
	assert_line(out, "mfmad_device_tile_out_total{device=\"0\"} 7");
	assert_line(out, "mfmad_device_tile_out_total{device=\"1\"} 0");
	assert_line(out, "mfmad_device_failed_total{device=\"0\"} 1");
	assert_line(out, "mfmad_device_kernel_seconds_total{device=\"0\"} 2.5");
	assert_line(out, "mfmad_device_kernel_seconds_total{device=\"1\"} 0.5");
	assert_line(out, "mfmad_device_launch_seconds_total{device=\"0\"} 0.125");
	assert_line(out, "mfmad_device_launch_seconds_total{device=\"1\"} 0");
	assert_line(out, "mfmad_device_worker_seconds_total{device=\"0\",phase=\"idle\"} 1.5");
	assert_line(out, "mfmad_device_worker_seconds_total{device=\"0\",phase=\"prepare\"} 0.000005");
	assert_line(out, "mfmad_device_worker_seconds_total{device=\"0\",phase=\"launch\"} 0.25");
	assert_line(out, "mfmad_device_worker_seconds_total{device=\"0\",phase=\"wait\"} 2");
	assert_line(out, "mfmad_device_worker_seconds_total{device=\"0\",phase=\"answers\"} 0.00075");
	assert_line(out, "mfmad_device_worker_seconds_total{device=\"1\",phase=\"wait\"} 1.25");
	assert_line(out, "mfmad_device_worker_seconds_total{device=\"1\",phase=\"idle\"} 0");
	assert_line(out, "mfmad_device_batch_host_seconds_total{device=\"0\",step=\"gather\"} 0.03");
	assert_line(out, "mfmad_device_batch_host_seconds_total{device=\"0\",step=\"split\"} 0");
	assert_line(out, "mfmad_device_batch_host_seconds_total{device=\"1\",step=\"split\"} 0.000000007");
	assert_null(strstr(out, "device=\"2\""));

	/* Each series appears once (a kind or result the renderer does not name
	 * would collide as "other" or show as "unknown"). */
	static char series[512][256];
	int samples = 0;
	for (char *p = out; *p; p = strchr(p, '\n') + 1) {
		char *eol = strchr(p, '\n');
		assert_non_null(eol);
		if (*p == '#')
			continue;
		char *sp = memchr(p, ' ', (size_t)(eol - p));
		assert_non_null(sp);
		assert_true(samples < 512);
		snprintf(series[samples], sizeof(series[0]), "%.*s", (int)(sp - p), p);
		for (int i = 0; i < samples; i++)
			if (strcmp(series[i], series[samples]) == 0)
				fail_msg("series %s appears twice", series[i]);
		samples++;
	}
	assert_null(strstr(out, "result=\"unknown\""));
	/* 6 status (with the declared weights pending) + the loop's tick age + requests + 6 gemm + 17
	 * histogram + 1 executions + 12 batch histogram + 2 plans + 2 measurements
	 * + 2 trials + 2 matrices + 1 reader frames + 2 answer frames + 1 left
	 * running + 1 retried + 2 request frames + 6 + 2 TLS + 1 + 2 info + 11 x 2
	 * per-device + 2 kernel + 2 launch + 5 x 2 worker phases + 2 x 2 batch host steps. */
	assert_int_equal(samples, 6 + 1 + STATS_NKINDS * STATS_NRESULTS + 6 + 17 + 1 + 12 + 2 + 2 + 2 + 2 +
					  1 + 2 + 1 + 1 + 2 + 6 + 2 + 1 + 2 + 22 + 2 + 2 + 10 + 4);
	assert_int_equal(out[len - 1], '\n');
	free(out);
	free(s);
}

static void test_render_escapes_labels(void **state)
{
	(void)state;
	size_t len;
	struct mfmad_stats *s = known_stats();
	char *out = render_known(s, &len);
	char want[512];
	int n = snprintf(want, sizeof(want),
			 "mfmad_device_info{device=\"1\",backend=\"cpu\",arch=\"x86-64\","
			 "name=\"a\\\"b\\\\c\\nd");
	for (size_t i = 7; i < sizeof(s->dev[1].name); i++)
		want[n++] = 'x';
	strcpy(want + n, "\"} 1");
	assert_line(out, want);
	free(out);
	free(s);
}

static void test_render_states(void **state)
{
	(void)state;
	size_t len;
	struct mfmad_stats *s = calloc(1, sizeof(*s));
	char *out;

	/* Starting: not ready, no devices, and no start time yet. */
	assert_int_equal(metrics_render_at(s, 1000, &out, &len), 0);
	assert_line(out, "mfmad_ready 0");
	assert_line(out, "mfmad_uptime_seconds 0");
	assert_line(out, "mfmad_devices 0");
	assert_line(out, "# TYPE mfmad_device_info gauge");
	assert_null(strstr(out, "{device="));
	assert_line(out, "mfmad_request_duration_seconds_bucket{le=\"+Inf\"} 0");
	free(out);

	/* Stopping wins over ready. */
	s->ready = 1;
	s->stopping = 1;
	assert_int_equal(metrics_render_at(s, 1000, &out, &len), 0);
	assert_line(out, "mfmad_ready 0");
	assert_line(out, "mfmad_stopping 1");
	free(out);

	assert_int_equal(metrics_render_at(NULL, 0, &out, &len), -EINVAL);
	assert_int_equal(metrics_render_at(s, 0, NULL, &len), -EINVAL);
	free(s);
}

/* promtool (Debian package prometheus) lints the whole page: names, types,
 * HELP text, counter suffixes and histogram consistency. */
static void test_render_passes_promtool(void **state)
{
	(void)state;
	const char *promtool = getenv("PROMTOOL");
	if (promtool == NULL || promtool[0] == '\0') {
		print_message("PROMTOOL not set (prometheus not installed); skipped\n");
		skip();
	}
	size_t len;
	struct mfmad_stats *s = known_stats();
	char *out = render_known(s, &len);

	char path[] = "/tmp/mfmad-metrics-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, out, len), (ssize_t)len);
	close(fd);

	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "'%s' check metrics < '%s' 2>&1", promtool, path);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	char msg[4096];
	size_t got = fread(msg, 1, sizeof(msg) - 1, p);
	msg[got] = '\0';
	int rc = pclose(p);
	unlink(path);
	if (rc != 0 || got != 0)
		fail_msg("promtool check metrics (rc %d): %s", rc, msg);
	free(out);
	free(s);
}

static void test_loopback_check(void **state)
{
	(void)state;
	assert_int_equal(metrics_address_is_loopback("127.0.0.1"), 1);
	assert_int_equal(metrics_address_is_loopback("127.3.2.1"), 1);
	assert_int_equal(metrics_address_is_loopback("localhost"), 1);
	assert_int_equal(metrics_address_is_loopback("::1"), 1);
	assert_int_equal(metrics_address_is_loopback("[::1]"), 1);
	assert_int_equal(metrics_address_is_loopback("::ffff:127.0.0.1"), 1);
	assert_int_equal(metrics_address_is_loopback("0.0.0.0"), 0);
	assert_int_equal(metrics_address_is_loopback("::"), 0);
	assert_int_equal(metrics_address_is_loopback("192.0.2.7"), 0);
	assert_int_equal(metrics_address_is_loopback("2001:db8::1"), 0);
	assert_int_equal(metrics_address_is_loopback("::ffff:10.0.0.1"), 0);
	assert_int_equal(metrics_address_is_loopback("example.org"), -EINVAL);
	assert_int_equal(metrics_address_is_loopback("[127.0.0.1]"), -EINVAL);
	assert_int_equal(metrics_address_is_loopback(""), -EINVAL);
	assert_int_equal(metrics_address_is_loopback(NULL), -EINVAL);
}

#if MFMAD_HAVE_MICROHTTPD

static int http_get(int family, int port, const char *method, const char *path, char *body,
		    size_t bodylen, char *head, size_t headlen)
{
	int code = sdtest_http(family, port, method, path, head, headlen, body, bodylen);
	assert_true(code > 0);
	return code;
}

/* A TCP connection to 127.0.0.1:port from the address src (any of
 * 127/8 is this machine's); -1 when it cannot be made. */
static int connect_from(const char *src, int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET };
	inet_pton(AF_INET, src, &a.sin_addr);
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Clients that send a header line now and then, never the request's end,
 * hold their connections past the inactivity timeout; from one address
 * they take METRICS_CONNECTIONS_PER_ADDRESS of the slots, not all, and a
 * probe from elsewhere is answered (they had taken all 32, and a
 * liveness probe got nothing). */
static void test_http_slow_clients(void **state)
{
	(void)state;
	struct mfmad_stats *s = known_stats();
	struct metrics *m = NULL;
	char err[256];
	assert_int_equal(metrics_start("127.0.0.1", 0, false, s, &m, err, sizeof(err)), 0);
	const int port = metrics_port(m);
	int slow[METRICS_CONNECTIONS];
	const char partial[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
	for (int i = 0; i < METRICS_CONNECTIONS; i++) {
		slow[i] = connect_from("127.0.0.1", port);
		assert_true(slow[i] >= 0);
		(void)!write(slow[i], partial, sizeof(partial) - 1);
	}
	usleep(200 * 1000);
	int probe = connect_from("127.0.0.2", port);
	assert_true(probe >= 0);
	const char req[] = "GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n";
	assert_int_equal(write(probe, req, sizeof(req) - 1), (ssize_t)(sizeof(req) - 1));
	char resp[512] = "";
	size_t got = 0;
	struct pollfd p = { .fd = probe, .events = POLLIN };
	while (got < sizeof(resp) - 1 && poll(&p, 1, 5000) == 1) {
		ssize_t n = read(probe, resp + got, sizeof(resp) - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	resp[got] = '\0';
	print_message("  probe from 127.0.0.2 with %d slow clients: %.30s\n", METRICS_CONNECTIONS,
		      resp);
	assert_non_null(strstr(resp, " 200 "));
	close(probe);
	for (int i = 0; i < METRICS_CONNECTIONS; i++)
		close(slow[i]);
	metrics_stop(m);
	free(s);
}

static void test_http_endpoints(void **state)
{
	(void)state;
	struct mfmad_stats *s = known_stats();
	struct metrics *m = NULL;
	char err[256];
	static char body[1 << 20];
	char head[2048];

	s->ready = 0;
	assert_int_equal(metrics_start("127.0.0.1", 0, false, s, &m, err, sizeof(err)), 0);
	int port = metrics_port(m);
	assert_true(port > 0 && port < 65536);

	assert_int_equal(http_get(AF_INET, port, "GET", "/healthz", body, sizeof(body), NULL, 0),
			 200);
	assert_string_equal(body, "ok\n");
	assert_int_equal(http_get(AF_INET, port, "GET", "/readyz", body, sizeof(body), NULL, 0),
			 503);
	assert_string_equal(body, "not ready\n");
	/* An event loop that has not ticked for over 10 s: neither healthy
	 * nor ready, though this thread answers; fresh again, both are. */
	uint64_t beat = STATS_GET(s->loop_beat_ns);
	s->loop_beat_ns = mfma_clock_ns() - 11000000000ull;
	assert_int_equal(http_get(AF_INET, port, "GET", "/healthz", body, sizeof(body), NULL, 0),
			 503);
	assert_non_null(strstr(body, "event loop stalled: no tick for 11."));
	STATS_ADD(s->ready, 1);
	assert_int_equal(http_get(AF_INET, port, "GET", "/readyz", body, sizeof(body), NULL, 0),
			 503);
	assert_string_equal(body, "not ready: the event loop has stalled (/healthz)\n");
	STATS_SUB(s->ready, 1);
	s->loop_beat_ns = mfma_clock_ns();
	assert_int_equal(http_get(AF_INET, port, "GET", "/healthz", body, sizeof(body), NULL, 0),
			 200);
	s->loop_beat_ns = beat;
	STATS_ADD(s->ready, 1);
	assert_int_equal(http_get(AF_INET, port, "GET", "/readyz", body, sizeof(body), NULL, 0),
			 200);
	assert_string_equal(body, "ready\n");
	/* Every device down (failed to open, or lost since): not ready. */
	STATS_SUB(s->dev[0].up, 1);
	assert_int_equal(http_get(AF_INET, port, "GET", "/readyz", body, sizeof(body), NULL, 0),
			 503);
	assert_string_equal(body, "not ready: no device takes work (mfmactl status)\n");
	STATS_ADD(s->dev[0].up, 1);
	STATS_ADD(s->stopping, 1);
	assert_int_equal(http_get(AF_INET, port, "GET", "/readyz", body, sizeof(body), NULL, 0),
			 503);
	assert_string_equal(body, "stopping\n");
	assert_int_equal(http_get(AF_INET, port, "GET", "/healthz", body, sizeof(body), NULL, 0),
			 200);
	STATS_SUB(s->stopping, 1);

	/* /metrics is the rendered page (uptime aside), with its content type,
	 * and follows the counters live. */
	assert_int_equal(http_get(AF_INET, port, "GET", "/metrics", body, sizeof(body), head,
				  sizeof(head)),
			 200);
	assert_non_null(strstr(head, "Content-Type: " METRICS_CONTENT_TYPE));
	assert_line(body, "mfmad_requests_total{kind=\"gemm\",result=\"ok\"} 1234");
	assert_line(body, "mfmad_ready 1");
	STATS_ADD(s->requests[STATS_GEMM][STATS_OK], 1);
	assert_int_equal(http_get(AF_INET, port, "GET", "/metrics", body, sizeof(body), NULL, 0),
			 200);
	assert_line(body, "mfmad_requests_total{kind=\"gemm\",result=\"ok\"} 1235");

	/* HEAD gets headers only; other methods and paths are refused. */
	assert_int_equal(http_get(AF_INET, port, "HEAD", "/metrics", body, sizeof(body), NULL, 0),
			 200);
	assert_string_equal(body, "");
	assert_int_equal(http_get(AF_INET, port, "POST", "/metrics", body, sizeof(body), head,
				  sizeof(head)),
			 405);
	assert_non_null(strstr(head, "Allow: GET, HEAD"));
	assert_int_equal(http_get(AF_INET, port, "GET", "/", body, sizeof(body), NULL, 0), 404);
	assert_int_equal(http_get(AF_INET, port, "GET", "/metricsx", body, sizeof(body), NULL, 0),
			 404);

	/* The same port cannot be taken twice; the error names it. */
	struct metrics *m2 = NULL;
	assert_int_equal(metrics_start("127.0.0.1", port, false, s, &m2, err, sizeof(err)),
			 -EADDRINUSE);
	assert_null(m2);
	char want[64];
	snprintf(want, sizeof(want), "port %d", port);
	assert_non_null(strstr(err, want));

	metrics_stop(m);
	metrics_stop(NULL);
	free(s);
}

static void test_http_ipv6(void **state)
{
	(void)state;
	struct mfmad_stats *s = known_stats();
	struct metrics *m = NULL;
	char err[256], body[64];
	int r = metrics_start("[::1]", 0, false, s, &m, err, sizeof(err));
	if (r == -EADDRNOTAVAIL || r == -EAFNOSUPPORT) {
		print_message("no IPv6 loopback here (%s); skipped\n", err);
		free(s);
		skip();
	}
	assert_int_equal(r, 0);
	assert_int_equal(http_get(AF_INET6, metrics_port(m), "GET", "/readyz", body, sizeof(body),
				  NULL, 0),
			 200);
	metrics_stop(m);
	free(s);
}

static void test_start_refusals(void **state)
{
	(void)state;
	struct mfmad_stats *s = known_stats();
	struct metrics *m = NULL;
	char err[256];

	assert_int_equal(metrics_start("0.0.0.0", 0, false, s, &m, err, sizeof(err)), -EACCES);
	assert_non_null(strstr(err, "metrics.address=\"0.0.0.0\""));
	assert_non_null(strstr(err, "allow_remote"));
	assert_null(m);
	assert_int_equal(metrics_start("192.0.2.7", 9100, false, s, &m, err, sizeof(err)), -EACCES);

	assert_int_equal(metrics_start("metrics.example", 0, false, s, &m, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "metrics.address=\"metrics.example\""));
	assert_int_equal(metrics_start("127.0.0.1", 70000, false, s, &m, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "metrics.port=70000"));
	assert_int_equal(metrics_start("127.0.0.1", -1, false, s, &m, err, sizeof(err)), -EINVAL);
	assert_int_equal(metrics_start("127.0.0.1", 0, false, NULL, &m, err, sizeof(err)), -EINVAL);

	/* With the flag, any address is allowed: the wildcard serves loopback. */
	char body[64];
	assert_int_equal(metrics_start("0.0.0.0", 0, true, s, &m, err, sizeof(err)), 0);
	assert_int_equal(http_get(AF_INET, metrics_port(m), "GET", "/healthz", body, sizeof(body),
				  NULL, 0),
			 200);
	metrics_stop(m);
	free(s);
}

#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_render_exact_lines),
		cmocka_unit_test(test_render_escapes_labels),
		cmocka_unit_test(test_render_states),
		cmocka_unit_test(test_render_passes_promtool),
		cmocka_unit_test(test_http_slow_clients),
		cmocka_unit_test(test_loopback_check),
#if MFMAD_HAVE_MICROHTTPD
		cmocka_unit_test(test_http_endpoints),
		cmocka_unit_test(test_http_ipv6),
		cmocka_unit_test(test_start_refusals),
#endif
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
