/* The two busy-poll knobs against the real daemon: limits.loop_poll_us (the
 * loop polls its epoll set before it blocks) and the client library's spin
 * window (mfma_set_spin_us, MFMA_SPIN_US).  Answers stay right with both
 * on; a SIGHUP turns the loop's poll off and on again (seen in the CPU time
 * the loop thread burns between requests); SIGTERM still stops a polling
 * daemon at once; a spinning client's wait still ends at its deadline. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpu_gemm.h"
#include "ctl_util.h"
#include "harness.h"
#include "harness_gemm.h"
#include "mfma.h"
#include "mfma_clock.h"

static uint64_t ms_since(uint64_t t0)
{
	return (mfma_clock_ns() - t0) / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static mfma_client *connect_spin(const struct mfmad_proc *p, uint32_t spin_us)
{
	mfma_client *c = harness_client(p);
	assert_int_equal(mfma_set_spin_us(c, spin_us), 0);
	assert_int_equal(mfma_spin_us(c), spin_us);
	return c;
}

/* Both knobs on: blocking GEMMs of odd shapes and a pipeline of submits
 * waited for with MFMA_ANY, every answer checked. */
static void test_answers_with_both_polls(void **state)
{
	(void)state;
	struct mfmad_proc p;
	assert_int_equal(harness_start(&p, "cpu = { threads = 1; devices = 1; };\n"
				       "limits = { loop_poll_us = 2000; worker_poll_us = 200; };",
				       NULL),
			 0);
	mfma_client *c = connect_spin(&p, 500);
	for (uint32_t i = 0; i < 40; i++)
		harness_gemm_checked(c, 5 + i % 7, 1 + i % 5, 3 + i % 11, 100 + i);

	enum { K = 24, N = 3, M = 9, DEPTH = 8 };
	float a[M * K], b[DEPTH][K * N];
	assert_int_equal(ctl_random_matrix(a, MFMA_DT_F32, M, K, false, 7), 0);
	struct mfma_gemm_args ga[DEPTH];
	uint64_t ids[DEPTH];
	struct mfma_error err;
	for (int i = 0; i < DEPTH; i++) {
		assert_int_equal(ctl_random_matrix(b[i], MFMA_DT_F32, K, N, false, 20 + i), 0);
		harness_dense_f32_args(&ga[i], a, b[i], M, K, N);
		assert_int_equal(mfma_gemm_submit(c, &ga[i], &ids[i], &err), 0);
	}
	for (int n = 0; n < DEPTH; n++) {
		uint64_t id;
		struct mfma_gemm_result r;
		if (mfma_wait(c, MFMA_ANY, 60000, &id, &r, &err) != 0)
			fail_msg("wait: %s", err.message);
		int i = 0;
		while (i < DEPTH && ids[i] != id)
			i++;
		assert_true(i < DEPTH);
		double ref[M * N];
		struct mfma_gemm g = {
			.m = M, .n = N, .k = K, .in_dtype = MFMA_DT_F32, .out_dtype = MFMA_DT_F32,
			.alpha = 1.0f, .a = a, .b = b[i], .d = (void *)(uintptr_t)r.d.data,
		};
		assert_int_equal(cpu_gemm_ref_f64(&g, ref), 0);
		assert_true(cpu_rel_frobenius(r.d.data, MFMA_DT_F32, ref, M * N) <
			    ctl_tolerance(MFMA_DT_F32, MFMA_DT_F32));
		ids[i] = 0;
		mfma_gemm_result_free(&r);
	}
	mfma_close(c);
	assert_int_equal(harness_stop(&p), 0);
}

/* CPU time (user + system) of the daemon's loop thread, the main thread,
 * in milliseconds (clock ticks of 10 ms on Linux). */
static uint64_t loop_cpu_ms(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* Fields after the command name, which may hold spaces: state is 3,
	 * utime 14, stime 15. */
	char *s = strrchr(buf, ')');
	assert_non_null(s);
	unsigned long long ut = 0, st = 0;
	assert_int_equal(sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
				&ut, &st),
			 2);
	return (ut + st) * 1000 / (unsigned long long)sysconf(_SC_CLK_TCK);
}

/* Pings 20 ms apart, so that each wakes an idle loop: the loop thread's
 * CPU time over them.  With a 10 ms window the loop polls about half the
 * time; without, it sleeps between pings. */
static uint64_t cpu_over_pings(const struct mfmad_proc *p, mfma_client *c)
{
	struct mfma_error err;
	uint64_t before = loop_cpu_ms(p->pid);
	for (int i = 0; i < 30; i++) {
		if (mfma_ping(c, "x", 1, NULL, &err) != 0)
			fail_msg("ping: %s", err.message);
		sleep_ms(20);
	}
	return loop_cpu_ms(p->pid) - before;
}

/* limits.loop_poll_us changes on SIGHUP, both ways.  The thresholds leave
 * room for a loaded machine: on, the window alone could burn ~300 ms over
 * the 30 pings (and 10 ms per 100 ms timer tick); off, a ping costs the
 * loop microseconds. */
static void test_sighup_turns_loop_poll_off_and_on(void **state)
{
	(void)state;
	static const char on[] = "cpu = { threads = 1; devices = 1; };\n"
				 "limits = { loop_poll_us = 10000; };";
	static const char off[] = "cpu = { threads = 1; devices = 1; };\n"
				  "limits = { loop_poll_us = 0; };";
	struct mfmad_proc p;
	assert_int_equal(harness_start(&p, on, NULL), 0);
	mfma_client *c = connect_spin(&p, 0);
	uint64_t first = cpu_over_pings(&p, c);
	assert_int_equal(harness_reconfigure(&p, off), 0);
	uint64_t none = cpu_over_pings(&p, c);
	assert_int_equal(harness_reconfigure(&p, on), 0);
	uint64_t again = cpu_over_pings(&p, c);
	print_message("loop thread CPU over 30 pings: %llu ms polling, %llu ms after SIGHUP "
		      "to 0, %llu ms after SIGHUP back to 10000 us\n",
		      (unsigned long long)first, (unsigned long long)none,
		      (unsigned long long)again);
	assert_true(first >= 60);
	assert_true(none <= 30);
	assert_true(again >= 60);
	mfma_close(c);
	assert_int_equal(harness_stop(&p), 0);
}

struct pinger {
	const struct mfmad_proc *p;
	atomic_int stop;
	atomic_int pings;
};

/* Pings on its own spinning connection until told to stop or the daemon
 * goes (an error ends it). */
static void *pinger_main(void *arg)
{
	struct pinger *g = arg;
	mfma_client *c;
	struct mfma_error err;
	if (mfma_connect(g->p->endpoint, &c, &err) != 0)
		return NULL;
	mfma_set_timeout(c, 5000);
	(void)mfma_set_spin_us(c, 1000);
	while (!atomic_load(&g->stop) && mfma_ping(c, "y", 1, NULL, &err) == 0)
		atomic_fetch_add(&g->pings, 1);
	mfma_close(c);
	return NULL;
}

/* SIGTERM reaches a loop that polls with the longest window while a
 * spinning client keeps it busy: the daemon exits 0, and at once. */
static void test_sigterm_stops_a_polling_daemon(void **state)
{
	(void)state;
	struct mfmad_proc p;
	assert_int_equal(harness_start(&p, "cpu = { threads = 1; devices = 1; };\n"
				       "limits = { loop_poll_us = 10000; worker_poll_us = 10000; };",
				       NULL),
			 0);
	struct pinger g = { .p = &p };
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, pinger_main, &g), 0);
	for (int i = 0; i < 200 && atomic_load(&g.pings) < 50; i++)
		sleep_ms(10);
	assert_true(atomic_load(&g.pings) >= 50);
	uint64_t t0 = mfma_clock_ns();
	int rc = harness_stop(&p);
	uint64_t took = ms_since(t0);
	atomic_store(&g.stop, 1);
	pthread_join(th, NULL);
	print_message("SIGTERM to exit with the loop polling: %llu ms (%d pings before)\n",
		      (unsigned long long)took, atomic_load(&g.pings));
	assert_int_equal(rc, 0);
	/* harness_stop polls every 50 ms; a sanitizer build tears down slower. */
	assert_true(took < 3000);
}

/* A spinning client's wait ends at its deadline, not at the end of its
 * spin: against a stopped daemon (SIGSTOP), a blocking call with a 150 ms
 * timeout and a 1 s spin fails with -ETIMEDOUT after about 150 ms; a wait
 * with timeout 0 only looks; the connection serves again once the daemon
 * runs. */
static void test_spin_keeps_deadlines(void **state)
{
	(void)state;
	struct mfmad_proc p;
	assert_int_equal(harness_start(&p, "cpu = { threads = 1; devices = 1; };", NULL), 0);
	mfma_client *c = connect_spin(&p, MFMA_SPIN_US_MAX);
	struct mfma_error err;
	assert_int_equal(mfma_ping(c, "z", 1, NULL, &err), 0);
	assert_int_equal(mfma_set_spin_us(c, MFMA_SPIN_US_MAX + 1), -EINVAL);
	assert_int_equal(mfma_spin_us(c), MFMA_SPIN_US_MAX);

	assert_int_equal(kill(p.pid, SIGSTOP), 0);
	mfma_set_timeout(c, 150);
	uint64_t t0 = mfma_clock_ns();
	int rc = mfma_ping(c, "z", 1, NULL, &err);
	uint64_t took = ms_since(t0);
	print_message("ping to a stopped daemon, timeout 150 ms, spin 1 s: %d after %llu ms\n",
		      rc, (unsigned long long)took);
	assert_int_equal(rc, -ETIMEDOUT);
	assert_true(took >= 140 && took < 700);

	float a[16], b[16];
	assert_int_equal(ctl_random_matrix(a, MFMA_DT_F32, 4, 4, false, 3), 0);
	assert_int_equal(ctl_random_matrix(b, MFMA_DT_F32, 4, 4, false, 4), 0);
	struct mfma_gemm_args ga;
	harness_dense_f32_args(&ga, a, b, 4, 4, 4);
	uint64_t id, done;
	struct mfma_gemm_result r;
	assert_int_equal(mfma_gemm_submit(c, &ga, &id, &err), 0);
	t0 = mfma_clock_ns();
	assert_int_equal(mfma_wait(c, id, 0, &done, &r, &err), -ETIMEDOUT);
	assert_true(ms_since(t0) < 100);
	t0 = mfma_clock_ns();
	assert_int_equal(mfma_wait(c, id, 120, &done, &r, &err), -ETIMEDOUT);
	took = ms_since(t0);
	assert_true(took >= 110 && took < 700);

	assert_int_equal(kill(p.pid, SIGCONT), 0);
	mfma_set_timeout(c, 60000);
	if (mfma_wait(c, id, 60000, &done, &r, &err) != 0)
		fail_msg("wait after SIGCONT: %s", err.message);
	assert_int_equal(done, id);
	mfma_gemm_result_free(&r);
	assert_int_equal(mfma_ping(c, "z", 1, NULL, &err), 0);
	mfma_close(c);
	assert_int_equal(harness_stop(&p), 0);
}

/* MFMA_SPIN_US sets the window at connect; a bad value fails the connect
 * with the variable's name and value. */
static void test_spin_from_environment(void **state)
{
	(void)state;
	struct mfmad_proc p;
	assert_int_equal(harness_start(&p, "cpu = { threads = 1; devices = 1; };", NULL), 0);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(setenv("MFMA_SPIN_US", "250", 1), 0);
	assert_int_equal(mfma_connect(p.endpoint, &c, &err), 0);
	assert_int_equal(mfma_spin_us(c), 250);
	assert_int_equal(mfma_ping(c, NULL, 0, NULL, &err), 0);
	mfma_close(c);
	static const char *const bad[] = { "fast", "-1", "1000001", " 5", "12us" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(setenv("MFMA_SPIN_US", bad[i], 1), 0);
		assert_int_equal(mfma_connect(p.endpoint, &c, &err), -EINVAL);
		assert_non_null(strstr(err.message, "MFMA_SPIN_US"));
		assert_non_null(strstr(err.message, bad[i]));
	}
	unsetenv("MFMA_SPIN_US");
	assert_int_equal(mfma_connect(p.endpoint, &c, &err), 0);
	assert_int_equal(mfma_spin_us(c), 0);
	mfma_close(c);
	assert_int_equal(harness_stop(&p), 0);
}

int main(void)
{
	/* The library's default comes from here: start from none. */
	unsetenv("MFMA_SPIN_US");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_answers_with_both_polls),
		cmocka_unit_test(test_sighup_turns_loop_poll_off_and_on),
		cmocka_unit_test(test_sigterm_stops_a_polling_daemon),
		cmocka_unit_test(test_spin_keeps_deadlines),
		cmocka_unit_test(test_spin_from_environment),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
