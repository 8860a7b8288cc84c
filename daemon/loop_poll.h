/* limits.loop_poll_us: the loop thread busy-polls for work before it would
 * block in epoll, so that a request (or a worker's completion) that comes
 * soon after the last wake-up is taken without a sleep and a wake-up.
 *
 * libuv has no busy-poll mode.  While the window is open an idle handle is
 * active, which makes every loop iteration poll its epoll set with a
 * timeout of 0 (uv_run's own I/O phase: new watchers are added, timers and
 * signals run as usual); the idle callback keeps the window open while the
 * epoll descriptor reports something ready and closes it once nothing has
 * been for the window's length.  A check handle, which runs after each I/O
 * phase, opens the window again when the loop wakes from a blocking wait,
 * for whatever reason (I/O, a timer, a signal).  Between two looks the
 * thread yields (sched_yield): where another thread waits for this core
 * (the device worker, a local client) it runs at once instead of after the
 * spinner's time slice, which on a 2-core machine turned a 50 us round
 * trip into 650 us (bench/RESULTS.md); with no one waiting the yield
 * returns at once.  Both handles are
 * unreferenced, so they never keep the loop alive, and neither is started
 * while the window is 0: the loop then runs exactly as without them. */
#ifndef MFMAD_LOOP_POLL_H
#define MFMAD_LOOP_POLL_H

#include <stdint.h>

#include <uv.h>

struct loop_poll {
	uv_loop_t *loop;
	uv_idle_t idle;          /* active while the window is open */
	uv_check_t check;        /* active while window_ns > 0 */
	uint64_t window_ns;      /* 0: off */
	uint64_t last_work_ns;   /* the loop's last wake-up or ready descriptor */
};

/* Initialises the handles, stopped; lp must stay in place until the loop
 * has closed them (uv_walk at the end closes every handle).  Returns 0 or
 * a negative errno code (from libuv). */
int loop_poll_init(struct loop_poll *lp, uv_loop_t *loop);

/* Sets the window (0 turns polling off); on the loop thread, at start and
 * on every reload.  A window opens at once when polling is on. */
void loop_poll_set(struct loop_poll *lp, uint64_t window_ns);

#endif
