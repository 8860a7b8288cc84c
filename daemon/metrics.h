/* Metrics and health over HTTP for the daemon: /metrics in the Prometheus
 * text exposition format (0.0.4), /healthz (the process answers) and /readyz
 * (200 only while ready and not stopping).  Served by libmicrohttpd on its own
 * thread, reading the counters of struct mfmad_stats; off unless the daemon is
 * configured to start it, and bound to a loopback address unless the caller
 * explicitly allows another one (the endpoint has no authentication).
 *
 * The rendering is a pure function so it can be tested on a known struct. */
#ifndef MFMAD_METRICS_H
#define MFMAD_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stats.h"

struct metrics;

/* Content-Type of /metrics, as the text format specifies it. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* The HTTP server's connections, in all and from one address. */
#define METRICS_CONNECTIONS 32
#define METRICS_CONNECTIONS_PER_ADDRESS 4

/* Renders every metric family into a malloc'd NUL-terminated buffer (*out,
 * *len without the NUL; the caller frees it).  now_ns is CLOCK_MONOTONIC, for
 * mfmad_uptime_seconds against s->start_ns.  Reads the atomics with relaxed
 * loads; the plain fields (ndevices, dev[].backend/arch/name/mem_total) must
 * have been filled in before any concurrent call.  Returns 0, -EINVAL or
 * -ENOMEM. */
int metrics_render_at(const struct mfmad_stats *s, uint64_t now_ns, char **out, size_t *len);

/* metrics_render_at() at the current CLOCK_MONOTONIC time. */
int metrics_render(const struct mfmad_stats *s, char **out, size_t *len);

/* Whether address (an IPv4 or IPv6 literal, optionally in brackets, or
 * "localhost") is a loopback address: 127.0.0.0/8, ::1 or ::ffff:127.x.x.x.
 * Returns 1, 0, or -EINVAL when address is not one of those forms. */
int metrics_address_is_loopback(const char *address);

/* Listens on address:port (port 0 picks a free port, see metrics_port()) and
 * serves the endpoints from a libmicrohttpd thread until metrics_stop().
 * A non-loopback address is refused with -EACCES unless allow_remote is true
 * (config key metrics.allow_remote).  On error returns a negative errno code
 * and writes a sentence naming the field and the value to err. */
int metrics_start(const char *address, int port, bool allow_remote, const struct mfmad_stats *s,
		  struct metrics **out, char *err, size_t errlen);

/* The port actually bound (useful after asking for port 0). */
int metrics_port(const struct metrics *m);

/* Stops the server thread, closes the socket and frees m.  Accepts NULL. */
void metrics_stop(struct metrics *m);

#endif
