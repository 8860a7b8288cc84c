/* sd_notify(3) for the daemon: readiness, status line and a watchdog driven
 * by the event loop.  See notify.h. */
#include "notify.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mfmad_build.h"

#if MFMAD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

/* Longest STATUS= payload we build; systemctl shows one line anyway. */
#define NOTIFY_STATUS_MAX 256

static int notify_send(const char *msg)
{
#if MFMAD_HAVE_SYSTEMD
	/* sd_notify() returns 0 when NOTIFY_SOCKET is unset, > 0 once sent.  The
	 * environment is kept: reload and stop notify again later. */
	int r = sd_notify(0, msg);
	return r < 0 ? r : 0;
#else
	(void)msg;
	return 0;
#endif
}

bool notify_enabled(void)
{
#if MFMAD_HAVE_SYSTEMD
	const char *e = getenv("NOTIFY_SOCKET");
	return e != NULL && e[0] != '\0';
#else
	return false;
#endif
}

/* systemd's watchdog interval in µs, or 0 when it asked for none (or asked
 * another process: WATCHDOG_PID names the main process). */
static uint64_t notify_watchdog_interval(void)
{
#if MFMAD_HAVE_SYSTEMD
	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) > 0)
		return usec;
#endif
	return 0;
}

static uint64_t stats_sum_devices(const struct mfmad_stats *s, int in_flight)
{
	uint64_t sum = 0;
	int n = s->ndevices < 0 ? 0 : s->ndevices;
	if (n > STATS_MAX_DEVICES)
		n = STATS_MAX_DEVICES;
	for (int d = 0; d < n; d++)
		sum += in_flight ? STATS_GET(s->dev[d].in_flight) : STATS_GET(s->dev[d].queued);
	return sum;
}

int notify_format_status(const struct mfmad_stats *s, char *buf, size_t len)
{
	if (s == NULL || buf == NULL || len == 0)
		return -EINVAL;

	uint64_t requests = 0;
	for (int k = 0; k < STATS_NKINDS; k++)
		for (int r = 0; r < STATS_NRESULTS; r++)
			requests += STATS_GET(s->requests[k][r]);
	uint64_t queued = stats_sum_devices(s, 0);
	uint64_t running = stats_sum_devices(s, 1);
	const char *state = STATS_GET(s->stopping) ? "stopping"
			    : STATS_GET(s->ready)  ? "serving"
						   : "starting";

	int r = snprintf(buf, len,
			 "%s: %d device(s), %" PRIu64 " requests, %" PRIu64 " queued, %" PRIu64
			 " in flight",
			 state, s->ndevices, requests, queued, running);
	return r < 0 ? -EINVAL : r;
}

int notify_status(const char *text)
{
	if (text == NULL)
		return -EINVAL;
	if (!notify_enabled())
		return 0;
	char msg[NOTIFY_STATUS_MAX + 8];
	/* A newline would end the assignment and start another one. */
	size_t i = 0, o = snprintf(msg, sizeof(msg), "STATUS=");
	while (text[i] != '\0' && o + 1 < sizeof(msg)) {
		msg[o++] = text[i] == '\n' ? ' ' : text[i];
		i++;
	}
	msg[o] = '\0';
	return notify_send(msg);
}

int notify_extend_start(uint64_t usec, const char *text)
{
	if (!notify_enabled())
		return 0;
	char msg[NOTIFY_STATUS_MAX + 64];
	snprintf(msg, sizeof(msg), "EXTEND_TIMEOUT_USEC=%" PRIu64 "\nSTATUS=%s", usec,
		 text ? text : "starting");
	for (char *p = strchr(msg, '\n') + 1; *p; p++)
		if (*p == '\n')
			*p = ' ';
	return notify_send(msg);
}

int notify_status_stats(const struct mfmad_stats *s)
{
	if (s == NULL)
		return -EINVAL;
	if (!notify_enabled())
		return 0;
	char line[NOTIFY_STATUS_MAX];
	int r = notify_format_status(s, line, sizeof(line));
	if (r < 0)
		return r;
	return notify_status(line);
}

int notify_ready(const struct notify *n)
{
	if (!notify_enabled())
		return 0;
	char msg[NOTIFY_STATUS_MAX + 32] = "READY=1\nSTATUS=";
	if (n != NULL && n->stats != NULL)
		notify_format_status(n->stats, msg + strlen(msg), sizeof(msg) - strlen(msg));
	else
		strcat(msg, "serving");
	return notify_send(msg);
}

int notify_reloading(void)
{
	return notify_send("RELOADING=1\nSTATUS=reloading the configuration");
}

int notify_stopping(const struct notify *n)
{
	if (!notify_enabled())
		return 0;
	char msg[NOTIFY_STATUS_MAX + 32] = "STOPPING=1\nSTATUS=";
	if (n != NULL && n->stats != NULL)
		notify_format_status(n->stats, msg + strlen(msg), sizeof(msg) - strlen(msg));
	else
		strcat(msg, "stopping");
	return notify_send(msg);
}

static void notify_on_watchdog(uv_timer_t *t)
{
	(void)t;
	/* Nothing to do on failure: the next tick tries again, and a manager
	 * that stopped listening will not restart us anyway. */
	(void)notify_send("WATCHDOG=1");
}

static void notify_on_status(uv_timer_t *t)
{
	struct notify *n = t->data;
	(void)notify_status_stats(n->stats);
}

int notify_start(struct notify *n, uv_loop_t *loop, const struct mfmad_stats *stats,
		 uint64_t status_interval_ms)
{
	if (n == NULL || loop == NULL || stats == NULL)
		return -EINVAL;

	memset(n, 0, sizeof(*n));
	n->loop = loop;
	n->stats = stats;
	n->status_interval_ms = status_interval_ms;
	n->watchdog_usec = notify_watchdog_interval();

	if (n->watchdog_usec > 0) {
		/* Half the interval, as sd_watchdog_enabled(3) recommends, so one
		 * late tick does not get the service killed. */
		uint64_t ms = n->watchdog_usec / 2000;
		if (ms == 0)
			ms = 1;
		int r = uv_timer_init(loop, &n->watchdog);
		if (r < 0)
			return r;
		n->watchdog.data = n;
		n->watchdog_started = true;
		/* The first ping goes out on the loop's first iteration, so the
		 * manager hears from the loop as soon as it runs. */
		r = uv_timer_start(&n->watchdog, notify_on_watchdog, 0, ms);
		if (r < 0) {
			notify_close(n);
			return r;
		}
		uv_unref((uv_handle_t *)&n->watchdog);
	}

	int r = notify_set_status_interval(n, status_interval_ms);
	if (r < 0) {
		notify_close(n);
		return r;
	}
	return 0;
}

int notify_set_status_interval(struct notify *n, uint64_t status_interval_ms)
{
	if (n == NULL || n->loop == NULL)
		return -EINVAL;
	n->status_interval_ms = status_interval_ms;
	if (status_interval_ms == 0 || !notify_enabled()) {
		if (n->status_started)
			uv_timer_stop(&n->status);
		return 0;
	}
	if (!n->status_started) {
		int r = uv_timer_init(n->loop, &n->status);
		if (r < 0)
			return r;
		n->status.data = n;
		n->status_started = true;
		uv_unref((uv_handle_t *)&n->status);
	}
	return uv_timer_start(&n->status, notify_on_status, status_interval_ms, status_interval_ms);
}

void notify_close(struct notify *n)
{
	if (n == NULL)
		return;
	if (n->watchdog_started) {
		uv_timer_stop(&n->watchdog);
		uv_close((uv_handle_t *)&n->watchdog, NULL);
		n->watchdog_started = false;
	}
	if (n->status_started) {
		uv_timer_stop(&n->status);
		uv_close((uv_handle_t *)&n->status, NULL);
		n->status_started = false;
	}
}
