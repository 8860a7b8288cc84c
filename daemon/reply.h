/* A request's identity (who asked, its id, when it arrived, what kind it
 * is) and the replies to it.  Every module that answers a client does so
 * here, so none of them needs the transport: a reply to a connection that
 * has gone is counted and dropped, and an internal request (conn NULL)
 * is answered into the counters only. */
#ifndef MFMAD_REPLY_H
#define MFMAD_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "mfma.pb-c.h"
#include "stats.h"

struct conn;

struct request {
	struct conn *conn;   /* NULL: an internal request */
	uint64_t id;         /* the client's request id */
	uint64_t arrival_ns;
	enum stats_kind kind;
	bool held;           /* counted in flight (request_hold) */
	/* 1 when one request counted in flight is this one itself (the
	 * decode off the loop of its frame, dispatch.c): admission does not
	 * count it against itself. */
	uint32_t own_hold;
};

void request_init(struct request *r, struct conn *c, uint64_t id, uint64_t arrival_ns,
		  enum stats_kind kind);
/* The request stays in flight past the call that received it (queued
 * work, a load, an unload waiting for its frees): it holds its
 * connection and counts against the in-flight limits until released. */
void request_hold(struct daemon *d, struct request *r);
/* Whether r, taking bytes more in flight, is refused by
 * limits.max_inflight_mb (answers not yet taken count too; the first
 * request in flight is always let in); err then says so, naming the limit
 * and what (the GEMM's "one", a "load"). */
bool request_over_inflight(const struct daemon *d, const struct request *r, uint64_t bytes,
			   const char *what, char *err, size_t errlen);
/* After its answer: lets go of the connection and, when the daemon is
 * stopping and this was the last request, lets it finish. */
void request_release(struct daemon *d, struct request *r);

/* Sends resp with the request's id (status OK unless resp has one). */
void reply(struct daemon *d, const struct request *r, Mfma__V1__Response *resp);
/* A reply without a body: a code and a message. */
void reply_status(struct daemon *d, const struct request *r, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Counts an OK answer made off the loop (a device worker's), before it is
 * sent: a client that has the answer then finds it in the status and
 * /metrics it asks for next.  Safe on any thread. */
void reply_count_ok(struct daemon *d, const struct request *r);
/* An OK answer encoded beforehand (reply_encode) and counted
 * (reply_count_ok), e.g. on a device worker. */
void reply_encoded(const struct request *r, uint8_t *frame, size_t len);
/* An OK answer, counted, that the device worker or a post thread sent
 * itself (conn_send_direct): the tail it left queued. */
void reply_sent(const struct request *r);
/* The last answer on a connection (no request id: the frame was not a
 * request, or the connection is refused), then the connection closes.
 * Not counted: the caller knows what it was. */
void reply_and_close(struct conn *c, int code, const char *msg);

/* The frame of a response, header included, in a buffer the caller
 * frees; NULL when out of memory or over 4 GiB. */
uint8_t *reply_encode(const Mfma__V1__Response *resp, size_t *len);

enum stats_result reply_result_of(int code);

#endif
