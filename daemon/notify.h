/* The daemon's side of the systemd service protocol (sd_notify(3)):
 * READY=1, STATUS=, RELOADING=1, STOPPING=1 and the WATCHDOG=1 keep-alive.
 *
 * The watchdog is pinged from a timer on the daemon's own event loop, at half
 * the interval systemd asks for (WatchdogSec=), so a loop that stalls stops
 * the pings and systemd restarts the service.  Every call is a harmless no-op
 * when NOTIFY_SOCKET is unset (not started by systemd) or when the daemon was
 * built without libsystemd. */
#ifndef MFMAD_NOTIFY_H
#define MFMAD_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "stats.h"

struct notify {
	uv_loop_t *loop;
	const struct mfmad_stats *stats;
	uv_timer_t watchdog;
	uv_timer_t status;
	uint64_t watchdog_usec;        /* systemd's interval; 0 = no watchdog */
	uint64_t status_interval_ms;   /* 0 = STATUS= only on state changes */
	bool watchdog_started, status_started;
};

/* Whether a service manager listens (NOTIFY_SOCKET is set and libsystemd is
 * built in). */
bool notify_enabled(void);

/* Starts the watchdog timer when systemd asked for one (WATCHDOG_USEC, and
 * WATCHDOG_PID unset or ours) and, when status_interval_ms > 0 and a service
 * manager listens, a timer that refreshes STATUS= from stats.  Both timers are
 * unreferenced, so they never keep the loop alive on their own.  stats must
 * outlive n; n must stay in place until notify_close() has finished.
 * Returns 0 or a negative errno code (from libuv). */
int notify_start(struct notify *n, uv_loop_t *loop, const struct mfmad_stats *stats,
		 uint64_t status_interval_ms);

/* Changes how often STATUS= is refreshed (0: only on state changes), as a
 * reload of status_interval_ms asks.  Returns 0 or a negative errno code. */
int notify_set_status_interval(struct notify *n, uint64_t status_interval_ms);

/* Stops and closes the timers; the loop must run once more to finish closing
 * them (as with any libuv handle).  Accepts NULL, a zeroed struct, or one whose
 * notify_start() failed. */
void notify_close(struct notify *n);

/* READY=1 with a fresh STATUS= line: call once the sockets accept and the
 * devices are up, and again after a reload has been applied. */
int notify_ready(const struct notify *n);

/* RELOADING=1 (and STATUS=reloading): call on SIGHUP before re-reading the
 * configuration; notify_ready() afterwards ends the reload. */
int notify_reloading(void);

/* STOPPING=1 with a STATUS= line saying how much work is left. */
int notify_stopping(const struct notify *n);

/* EXTEND_TIMEOUT_USEC=usec with STATUS=text: the start (TimeoutStartSec=)
 * may take usec more from now; send again before that passes. */
int notify_extend_start(uint64_t usec, const char *text);

/* STATUS=text, shown by `systemctl status mfmad`. */
int notify_status(const char *text);

/* STATUS= built from the counters by notify_format_status(). */
int notify_status_stats(const struct mfmad_stats *s);

/* The status line, e.g. "serving: 1 device(s), 1234 requests, 3 queued,
 * 2 in flight".  Requests count every finished request of every kind and
 * result; queued and in flight are summed over the devices.  Pure; always
 * NUL-terminates buf.  Returns the length it needed (as snprintf) or -EINVAL. */
int notify_format_status(const struct mfmad_stats *s, char *buf, size_t len);

#endif
