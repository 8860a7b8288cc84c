/* The loop's busy-poll (limits.loop_poll_us); loop_poll.h says how. */
#include "loop_poll.h"

#include <poll.h>
#include <sched.h>
#include <stddef.h>

#include "mfma_clock.h"

/* Whether something in the loop's epoll set is ready: the epoll descriptor
 * is readable exactly then (sockets, the workers' uv_async eventfd, the
 * signal pipe).  A watcher started since the last I/O phase is not in the
 * set yet; the next phase (timeout 0 while polling) adds it and still
 * takes its events, it just does not extend the window. */
static int backend_ready(uv_loop_t *loop)
{
	struct pollfd pfd = { .fd = uv_backend_fd(loop), .events = POLLIN };
	return poll(&pfd, 1, 0) > 0;
}

/* Runs before each I/O phase while the window is open; stopping here makes
 * this very phase block with the loop's own timeout.  While it stays open
 * the thread yields between looks (loop_poll.h says why). */
static void on_idle(uv_idle_t *h)
{
	struct loop_poll *lp = h->data;
	uint64_t now = mfma_clock_ns();
	if (lp->window_ns && backend_ready(lp->loop)) {
		lp->last_work_ns = now;
		return;
	}
	if (lp->window_ns == 0 || now - lp->last_work_ns >= lp->window_ns)
		uv_idle_stop(&lp->idle);
	else
		sched_yield();
}

/* Runs after each I/O phase: with the idle handle stopped, that phase was
 * a blocking wait that has just ended, so a new window opens. */
static void on_check(uv_check_t *h)
{
	struct loop_poll *lp = h->data;
	if (lp->window_ns == 0 || uv_is_active((uv_handle_t *)&lp->idle))
		return;
	lp->last_work_ns = mfma_clock_ns();
	uv_idle_start(&lp->idle, on_idle);
}

int loop_poll_init(struct loop_poll *lp, uv_loop_t *loop)
{
	lp->loop = loop;
	lp->window_ns = 0;
	lp->last_work_ns = 0;
	int rc = uv_idle_init(loop, &lp->idle);
	if (rc < 0)
		return rc;
	rc = uv_check_init(loop, &lp->check);
	if (rc < 0) {
		uv_close((uv_handle_t *)&lp->idle, NULL);
		return rc;
	}
	lp->idle.data = lp;
	lp->check.data = lp;
	/* Polling never keeps the loop alive: it stops when the rest does. */
	uv_unref((uv_handle_t *)&lp->idle);
	uv_unref((uv_handle_t *)&lp->check);
	return 0;
}

void loop_poll_set(struct loop_poll *lp, uint64_t window_ns)
{
	lp->window_ns = window_ns;
	if (window_ns == 0) {
		uv_idle_stop(&lp->idle);
		uv_check_stop(&lp->check);
		return;
	}
	uv_check_start(&lp->check, on_check);
	if (!uv_is_active((uv_handle_t *)&lp->idle)) {
		lp->last_work_ns = mfma_clock_ns();
		uv_idle_start(&lp->idle, on_idle);
	}
}
