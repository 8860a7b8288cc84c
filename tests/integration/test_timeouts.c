/* Connection timeouts and refusals against the real daemon (issue 12,
 * attack 4): a frame that does not complete, a client that says nothing,
 * one that does not take its answers, each closed after its limit with
 * one info line naming it; a flood of refused connections logged at most
 * once a second. */
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "frame.h"
#include "harness.h"
#include "mfma.h"
#include "mfma.pb-c.h"

static struct mfmad_proc D;

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Lines of the daemon's log holding s. */
static int log_count(const char *s)
{
	return harness_log_count(&D, s);
}

/* The time until the daemon closes fd, or -1 after limit_ms. */
static long closed_after(int fd, uint64_t t0, int limit_ms)
{
	if (!harness_wait_closed(fd, limit_ms))
		return -1;
	return (long)(now_ms() - t0);
}

static uint8_t *ping_frame(size_t *len)
{
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Ping ping = MFMA__V1__PING__INIT;
	req.has_id = 1;
	req.id = 1;
	req.body_case = MFMA__V1__REQUEST__BODY_PING;
	req.ping = &ping;
	size_t n = mfma__v1__request__get_packed_size(&req);
	uint8_t *f = malloc(FRAME_HEADER_SIZE + n);
	frame_header_put(f, (uint32_t)n);
	mfma__v1__request__pack(&req, f + FRAME_HEADER_SIZE);
	*len = FRAME_HEADER_SIZE + n;
	return f;
}

/* 2 bytes of a header, then nothing. */
static void test_read_timeout(void **state)
{
	(void)state;
	int fd = harness_connect_raw(&D);
	assert_true(fd >= 0);
	uint64_t t0 = now_ms();
	assert_int_equal(harness_write_all(fd, "\0\0", 2), 0);
	long ms = closed_after(fd, t0, 3000);
	printf("read timeout: a 2-byte partial header closed after %ld ms (limit 400)\n", ms);
	assert_true(ms >= 350 && ms < 1500);
	close(fd);
	assert_true(log_count("(limits.read_timeout_ms)") >= 1);
}

/* A frame sent a byte every 50 ms: never complete within the limit. */
static void test_slow_frame(void **state)
{
	(void)state;
	int fd = harness_connect_raw(&D);
	assert_true(fd >= 0);
	uint8_t f[4 + 200];
	memset(f, 0, sizeof(f));
	frame_header_put(f, 200);
	uint64_t t0 = now_ms();
	long ms = -1;
	for (size_t i = 0; i < sizeof(f); i++) {
		if (write(fd, &f[i], 1) != 1 || harness_wait_closed(fd, 50)) {
			ms = (long)(now_ms() - t0);
			break;
		}
	}
	printf("read timeout: a frame at 1 byte per 50 ms closed after %ld ms (limit 400)\n", ms);
	assert_true(ms >= 350 && ms < 1500);
	close(fd);
}

/* Nothing at all is closed after the idle limit; a client pinging every
 * 200 ms is not. */
static void test_idle_timeout(void **state)
{
	(void)state;
	int idle = harness_connect_raw(&D);
	mfma_client *busy;
	struct mfma_error err;
	assert_int_equal(mfma_connect(D.endpoint, &busy, &err), 0);
	uint64_t t0 = now_ms();
	long ms = -1;
	while (now_ms() - t0 < 2000) {
		assert_int_equal(mfma_ping(busy, "x", 1, NULL, &err), 0);
		if (ms < 0 && harness_wait_closed(idle, 200))
			ms = (long)(now_ms() - t0);
		else if (ms >= 0)
			usleep(200 * 1000);
	}
	printf("idle timeout: a silent connection closed after %ld ms (limit 800); a client pinging "
	       "every 200 ms was served for 2 s\n",
	       ms);
	assert_true(ms >= 750 && ms < 1800);
	assert_int_equal(mfma_ping(busy, "x", 1, NULL, &err), 0);
	mfma_close(busy);
	close(idle);
	assert_true(log_count("(limits.idle_timeout_ms)") >= 1);
}

/* Pings streamed, no answer read: once the socket is full the answers
 * stop moving, and the connection is closed after the write limit. */
static void test_write_timeout(void **state)
{
	(void)state;
	int fd = harness_connect_raw(&D);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	size_t flen;
	uint8_t *one = ping_frame(&flen);
	size_t total = flen * 8192, pos = 0;
	uint8_t *stream = malloc(total);
	for (int i = 0; i < 8192; i++)
		memcpy(stream + (size_t)i * flen, one, flen);
	uint64_t t0 = now_ms();
	long ms = -1;
	while (now_ms() - t0 < 4000) {
		ssize_t n = write(fd, stream + pos, total - pos);
		if (n > 0)
			pos = (pos + (size_t)n) % total;
		if ((n < 0 && errno != EAGAIN) || log_count("(limits.write_timeout_ms)") > 0) {
			ms = (long)(now_ms() - t0);
			break;
		}
		usleep(20 * 1000);
	}
	usleep(50 * 1000);
	assert_int_equal(log_count("(limits.write_timeout_ms)"), 1);
	printf("write timeout: answers not taken, connection closed %ld ms after the flood began "
	       "(limit 600)\n",
	       ms);
	assert_true(ms >= 550 && ms < 3000);
	free(stream);
	free(one);
	close(fd);
}

/* 200 connections over limits.max_connections = 8 in a burst: each is
 * refused with an answer, and the log has at most one line a second. */
static void test_refusals_rate_limited(void **state)
{
	(void)state;
	int before = log_count("refusing connection");
	int fds[200];
	uint64_t t0 = now_ms();
	for (int i = 0; i < 200; i++)
		fds[i] = harness_connect_raw(&D);
	int refused = 0;
	for (int i = 0; i < 200; i++) {
		uint8_t *buf = NULL;
		if (fds[i] >= 0 && harness_read_frame(fds[i], &buf, 200) > 0)
			refused++;
		free(buf);
	}
	uint64_t secs = (now_ms() - t0) / 1000 + 1;
	for (int i = 0; i < 200; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	usleep(100 * 1000);
	int lines = log_count("refusing connection") - before;
	printf("refusals: %d of 200 connections refused in %llu s, %d log line(s)\n", refused,
	       (unsigned long long)secs, lines);
	assert_true(refused >= 150);
	assert_true(lines >= 1 && (uint64_t)lines <= secs + 1);
}

static int setup(void **state)
{
	(void)state;
	return harness_start(&D,
			     "limits = { read_timeout_ms = 400; idle_timeout_ms = 800; "
			     "write_timeout_ms = 600; max_unsent_mb = 1; max_connections = 8; };",
			     NULL);
}

static int teardown(void **state)
{
	(void)state;
	return harness_stop(&D) == 0 ? 0 : -1;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN); /* the daemon closes attackers mid-write */
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_timeout),
		cmocka_unit_test(test_slow_frame),
		cmocka_unit_test(test_idle_timeout),
		cmocka_unit_test(test_write_timeout),
		cmocka_unit_test(test_refusals_rate_limited),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
