/* The sd_notify wrapper against a test-owned NOTIFY_SOCKET: what each call
 * sends, that the watchdog pings at half of WATCHDOG_USEC from the loop, and
 * that a stalled loop stops the pings. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/socket.h>
#include <sys/un.h>

#include <cmocka.h>
#include <uv.h>

#include "mfmad_build.h"
#include "notify.h"
#include "sdtest.h"

/* ---- the status line ---- */

static void test_format_status(void **state)
{
	(void)state;
	struct mfmad_stats *s = calloc(1, sizeof(*s));
	char buf[256];

	assert_int_equal(notify_format_status(s, buf, sizeof(buf)),
			 (int)strlen("starting: 0 device(s), 0 requests, 0 queued, 0 in flight"));
	assert_string_equal(buf, "starting: 0 device(s), 0 requests, 0 queued, 0 in flight");

	s->ready = 1;
	s->ndevices = 2;
	s->requests[STATS_GEMM][STATS_OK] = 1200;
	s->requests[STATS_GEMM][STATS_INVALID] = 30;
	s->requests[STATS_PING][STATS_OK] = 4;
	s->dev[0].queued = 1;
	s->dev[1].queued = 2;
	s->dev[0].in_flight = 1;
	s->dev[1].in_flight = 1;
	/* Beyond ndevices: not counted. */
	s->dev[2].queued = 100;
	notify_format_status(s, buf, sizeof(buf));
	assert_string_equal(buf, "serving: 2 device(s), 1234 requests, 3 queued, 2 in flight");

	s->stopping = 1;
	notify_format_status(s, buf, sizeof(buf));
	assert_string_equal(buf, "stopping: 2 device(s), 1234 requests, 3 queued, 2 in flight");

	/* Truncation still terminates the string and reports the full length. */
	char small[8];
	assert_int_equal(notify_format_status(s, small, sizeof(small)),
			 (int)strlen("stopping: 2 device(s), 1234 requests, 3 queued, 2 in flight"));
	assert_string_equal(small, "stoppin");

	assert_int_equal(notify_format_status(NULL, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(notify_format_status(s, buf, 0), -EINVAL);
	free(s);
}

/* ---- against a fake service manager ---- */

static int manager_setup(void **state)
{
	struct sdtest_manager *m = calloc(1, sizeof(*m));
	assert_non_null(m);
	assert_int_equal(sdtest_manager_start(m), 0);
	setenv("NOTIFY_SOCKET", m->path, 1);
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	*state = m;
	return 0;
}

static int manager_teardown(void **state)
{
	struct sdtest_manager *m = *state;
	sdtest_manager_stop(m);
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	free(m);
	return 0;
}

static void run_loop_for(uv_loop_t *loop, uint64_t ms);

#if MFMAD_HAVE_SYSTEMD

static void test_messages(void **state)
{
	struct sdtest_manager *m = *state;
	struct mfmad_stats *s = calloc(1, sizeof(*s));
	struct notify n;
	uv_loop_t loop;
	uv_loop_init(&loop);

	assert_true(notify_enabled());
	assert_int_equal(notify_start(&n, &loop, s, 0), 0);
	/* No WATCHDOG_USEC: no watchdog. */
	assert_int_equal(n.watchdog_usec, 0);

	s->ndevices = 1;
	s->ready = 1;
	s->requests[STATS_GEMM][STATS_OK] = 5;
	assert_int_equal(notify_ready(&n), 0);
	assert_int_equal(notify_status("loading weights\nfrom disk"), 0);
	assert_int_equal(notify_reloading(), 0);
	s->stopping = 1;
	s->dev[0].in_flight = 2;
	assert_int_equal(notify_stopping(&n), 0);
	assert_int_equal(notify_status_stats(s), 0);
	assert_int_equal(sdtest_manager_wait(m, 5, 1000), 5);

	assert_string_equal(m->msg[0],
			    "READY=1\nSTATUS=serving: 1 device(s), 5 requests, 0 queued, 0 in flight");
	/* A newline would start another assignment; it becomes a space. */
	assert_string_equal(m->msg[1], "STATUS=loading weights from disk");
	assert_string_equal(m->msg[2], "RELOADING=1\nSTATUS=reloading the configuration");
	assert_string_equal(m->msg[3], "STOPPING=1\nSTATUS=stopping: 1 device(s), 5 requests, "
				       "0 queued, 2 in flight");
	assert_string_equal(m->msg[4],
			    "STATUS=stopping: 1 device(s), 5 requests, 0 queued, 2 in flight");

	notify_close(&n);
	assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
	assert_int_equal(uv_loop_close(&loop), 0);
	free(s);
}

struct stall {
	uv_timer_t timer;
	uint64_t ms;
};

static void on_stall(uv_timer_t *t)
{
	struct stall *st = t->data;
	/* Blocks the loop as a runaway callback would. */
	usleep((useconds_t)(st->ms * 1000));
}

static void test_watchdog_rate_and_stall(void **state)
{
	struct sdtest_manager *m = *state;
	struct mfmad_stats *s = calloc(1, sizeof(*s));
	struct notify n;
	uv_loop_t loop;
	uv_loop_init(&loop);

	/* systemd's WatchdogSec=0.2s: pings every 100 ms. */
	setenv("WATCHDOG_USEC", "200000", 1);
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	setenv("WATCHDOG_PID", pid, 1);
	assert_int_equal(notify_start(&n, &loop, s, 0), 0);
	assert_int_equal(n.watchdog_usec, 200000);

	/* 1 s of a healthy loop, then a 600 ms stall, then 300 ms more. */
	struct stall st = { .ms = 600 };
	uv_timer_init(&loop, &st.timer);
	st.timer.data = &st;
	uv_timer_start(&st.timer, on_stall, 1000, 0);
	uint64_t t0 = sdtest_now_ns();
	run_loop_for(&loop, 1900);
	uint64_t t1 = sdtest_now_ns();
	uv_close((uv_handle_t *)&st.timer, NULL);
	notify_close(&n);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
	usleep(50000);

	pthread_mutex_lock(&m->lock);
	int pings = 0;
	uint64_t prev = t0, max_gap = 0, gaps_healthy = 0;
	int healthy = 0;
	for (int i = 0; i < m->n; i++) {
		assert_string_equal(m->msg[i], "WATCHDOG=1");
		uint64_t gap = m->at[i] - prev;
		if (gap > max_gap)
			max_gap = gap;
		/* Pings well inside the first healthy second. */
		if (i > 0 && m->at[i] < t0 + 950000000ull) {
			gaps_healthy += gap;
			healthy++;
		}
		prev = m->at[i];
		pings++;
	}
	pthread_mutex_unlock(&m->lock);

	print_message("%d pings in %.3f s; mean healthy gap %.1f ms; longest gap %.1f ms\n",
		      pings, (double)(t1 - t0) / 1e9,
		      healthy ? (double)gaps_healthy / healthy / 1e6 : 0.0, (double)max_gap / 1e6);
	/* First ping at once, then every 100 ms for 1 s: about 10. */
	assert_true(healthy >= 7);
	double mean_ms = (double)gaps_healthy / healthy / 1e6;
	assert_true(mean_ms > 90.0 && mean_ms < 130.0);
	/* The stall shows as a gap of at least its length: the pings come from
	 * the loop, not from a thread that would keep pinging a dead loop. */
	assert_true(max_gap >= 550000000ull);
	/* And the pings resumed after it. */
	assert_true(m->at[m->n - 1] > t0 + 1650000000ull);
	free(s);
}

static void test_watchdog_other_pid(void **state)
{
	(void)state;
	struct mfmad_stats *s = calloc(1, sizeof(*s));
	struct notify n;
	uv_loop_t loop;
	uv_loop_init(&loop);

	/* The watchdog belongs to another process (a wrapper's child). */
	setenv("WATCHDOG_USEC", "200000", 1);
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)getpid() + 1);
	setenv("WATCHDOG_PID", pid, 1);
	assert_int_equal(notify_start(&n, &loop, s, 0), 0);
	assert_int_equal(n.watchdog_usec, 0);
	notify_close(&n);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
	free(s);
}

static void test_status_timer(void **state)
{
	struct sdtest_manager *m = *state;
	struct mfmad_stats *s = calloc(1, sizeof(*s));
	struct notify n;
	uv_loop_t loop;
	uv_loop_init(&loop);

	s->ready = 1;
	s->ndevices = 1;
	assert_int_equal(notify_start(&n, &loop, s, 100), 0);
	run_loop_for(&loop, 250);
	s->requests[STATS_GEMM][STATS_OK] = 9;
	run_loop_for(&loop, 200);
	int before = sdtest_manager_wait(m, 4, 1000);

	/* A reload turns the refresh off, then back on at a new rate. */
	assert_int_equal(notify_set_status_interval(&n, 0), 0);
	s->requests[STATS_GEMM][STATS_OK] = 10;
	run_loop_for(&loop, 250);
	usleep(20000);
	assert_int_equal(sdtest_manager_wait(m, 0, 0), before);
	assert_int_equal(notify_set_status_interval(&n, 50), 0);
	run_loop_for(&loop, 180);
	notify_close(&n);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);

	assert_true(sdtest_manager_wait(m, 4, 1000) >= 4);
	assert_true(sdtest_manager_count(m, "STATUS=serving: 1 device(s), 0 requests, 0 queued, "
				     "0 in flight", 0) >= 2);
	assert_true(sdtest_manager_count(m, "STATUS=serving: 1 device(s), 9 requests, 0 queued, "
				     "0 in flight", 0) >= 1);
	assert_true(sdtest_manager_count(m, "STATUS=serving: 1 device(s), 10 requests, 0 queued, "
				     "0 in flight", 0) >= 2);
	assert_int_equal(notify_set_status_interval(NULL, 5), -EINVAL);
	free(s);
}

#endif /* MFMAD_HAVE_SYSTEMD */

/* Without NOTIFY_SOCKET nothing is sent, nothing fails, no timer runs. */
static void test_without_manager(void **state)
{
	(void)state;
	struct mfmad_stats *s = calloc(1, sizeof(*s));
	struct notify n;
	uv_loop_t loop;
	uv_loop_init(&loop);

	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	assert_false(notify_enabled());
	assert_int_equal(notify_start(&n, &loop, s, 100), 0);
	assert_false(n.watchdog_started);
	assert_false(n.status_started);
	assert_int_equal(notify_ready(&n), 0);
	assert_int_equal(notify_ready(NULL), 0);
	assert_int_equal(notify_status("x"), 0);
	assert_int_equal(notify_status_stats(s), 0);
	assert_int_equal(notify_stopping(&n), 0);
	assert_int_equal(notify_reloading(), 0);
	/* The unreferenced timers (none here) never keep the loop alive. */
	assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
	notify_close(&n);
	notify_close(NULL);
	assert_int_equal(notify_start(NULL, &loop, s, 0), -EINVAL);
	assert_int_equal(notify_start(&n, &loop, NULL, 0), -EINVAL);
	assert_int_equal(uv_loop_close(&loop), 0);
	free(s);
}

static void on_deadline(uv_timer_t *t)
{
	uv_stop(t->loop);
}

/* The notify timers are unreferenced, so the loop needs a timer of its own
 * to keep running for a while. */
static void run_loop_for(uv_loop_t *loop, uint64_t ms)
{
	uv_timer_t deadline;
	uv_timer_init(loop, &deadline);
	uv_timer_start(&deadline, on_deadline, ms, 0);
	uv_run(loop, UV_RUN_DEFAULT);
	uv_close((uv_handle_t *)&deadline, NULL);
	uv_run(loop, UV_RUN_NOWAIT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_status),
#if MFMAD_HAVE_SYSTEMD
		cmocka_unit_test_setup_teardown(test_messages, manager_setup, manager_teardown),
		cmocka_unit_test_setup_teardown(test_watchdog_rate_and_stall, manager_setup,
						manager_teardown),
		cmocka_unit_test_setup_teardown(test_watchdog_other_pid, manager_setup,
						manager_teardown),
		cmocka_unit_test_setup_teardown(test_status_timer, manager_setup, manager_teardown),
#endif
		cmocka_unit_test(test_without_manager),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
