#include "reply.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "conn.h"
#include "frame.h"
#include "log.h"
#include "mfma_clock.h"
#include "wire_check.h"

enum stats_result reply_result_of(int code)
{
	switch (code) {
	case MFMA__V1__CODE__OK: return STATS_OK;
	case MFMA__V1__CODE__INVALID_ARGUMENT: return STATS_INVALID;
	case MFMA__V1__CODE__NOT_FOUND: return STATS_NOT_FOUND;
	case MFMA__V1__CODE__ALREADY_EXISTS: return STATS_EXISTS;
	case MFMA__V1__CODE__RESOURCE_EXHAUSTED: return STATS_BUSY;
	case MFMA__V1__CODE__UNAVAILABLE: return STATS_UNAVAILABLE;
	case MFMA__V1__CODE__DEADLINE_EXCEEDED: return STATS_DEADLINE;
	case MFMA__V1__CODE__MALFORMED: return STATS_MALFORMED;
	case MFMA__V1__CODE__FAILED_PRECONDITION: return STATS_INVALID;
	default: return STATS_INTERNAL;
	}
}

void request_init(struct request *r, struct conn *c, uint64_t id, uint64_t arrival_ns,
		  enum stats_kind kind)
{
	*r = (struct request){ .conn = c, .id = id, .arrival_ns = arrival_ns, .kind = kind };
}

void request_hold(struct daemon *d, struct request *r)
{
	if (r->held)
		return;
	r->held = true;
	d->inflight++;
	if (r->conn)
		conn_hold(r->conn);
}

bool request_over_inflight(const struct daemon *d, const struct request *r, uint64_t bytes,
			   const char *what, char *err, size_t errlen)
{
	const uint64_t held = d->inflight_bytes + d->unsent_bytes;
	if (held + bytes <= d->cfg.max_inflight_bytes || d->inflight - r->own_hold + d->unsent_bytes == 0)
		return false;
	snprintf(err, errlen,
		 "busy: %" PRIu64 " bytes of requests in flight or answers not yet taken; this %s "
		 "needs %" PRIu64 " more (limits.max_inflight_mb = %" PRIu64 ")",
		 held, what, bytes, d->cfg.max_inflight_bytes >> 20);
	return true;
}

void request_release(struct daemon *d, struct request *r)
{
	if (!r->held)
		return;
	r->held = false;
	d->inflight--;
	if (r->conn)
		conn_release(r->conn);
	r->conn = NULL;
	conn_check_drained(d);
}

uint8_t *reply_encode(const Mfma__V1__Response *resp, size_t *len)
{
	size_t n = mfma__v1__response__get_packed_size(resp);
	uint8_t *buf = n <= UINT32_MAX ? malloc(FRAME_HEADER_SIZE + n) : NULL;
	if (!buf)
		return NULL;
	frame_header_put(buf, (uint32_t)n);
	mfma__v1__response__pack(resp, buf + FRAME_HEADER_SIZE);
	*len = FRAME_HEADER_SIZE + n;
	return buf;
}

static void count(struct daemon *d, const struct request *r, int code)
{
	STATS_ADD(d->stats.requests[r->kind][reply_result_of(code)], 1);
	if (r->arrival_ns)
		stats_observe_latency(&d->stats, mfma_clock_ns() - r->arrival_ns);
}

static void send_response(struct conn *c, const Mfma__V1__Response *resp, bool close_after)
{
	if (!c || conn_is_closed(c))
		return;
	size_t len;
	uint8_t *buf = reply_encode(resp, &len);
	if (!buf) {
		log_err("connection %" PRIu64 ": cannot allocate a response; closing", conn_id(c));
		conn_close(c);
		return;
	}
	conn_send(c, buf, len, close_after);
}

void reply(struct daemon *d, const struct request *r, Mfma__V1__Response *resp)
{
	Mfma__V1__Status ok = MFMA__V1__STATUS__INIT;
	Mfma__V1__Status *given = resp->status;
	if (!given) {
		ok.has_code = 1;
		ok.code = MFMA__V1__CODE__OK;
		resp->status = &ok;
	}
	resp->has_id = 1;
	resp->id = r->id;
	count(d, r, resp->status->code);
	send_response(r->conn, resp, false);
	resp->status = given;
}

void reply_status(struct daemon *d, const struct request *r, int code, const char *fmt, ...)
{
	char msg[640];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* Messages echo client bytes (names); a string field must be UTF-8. */
	wire_utf8_sanitize(msg);
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
	st.has_code = 1;
	st.code = (Mfma__V1__Code)code;
	st.message = msg;
	resp.status = &st;
	if (code != MFMA__V1__CODE__OK)
		log_debug("request %" PRIu64 " failed: %s", r->id, msg);
	reply(d, r, &resp);
}

void reply_count_ok(struct daemon *d, const struct request *r)
{
	count(d, r, MFMA__V1__CODE__OK);
}

void reply_encoded(const struct request *r, uint8_t *frame, size_t len)
{
	conn_send(r->conn, frame, len, false);
}

void reply_sent(const struct request *r)
{
	conn_flush_direct(r->conn);
}

void reply_and_close(struct conn *c, int code, const char *msg)
{
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
	st.has_code = 1;
	st.code = (Mfma__V1__Code)code;
	char clean[640];
	snprintf(clean, sizeof(clean), "%s", msg);
	wire_utf8_sanitize(clean);
	st.message = clean;
	resp.status = &st;
	send_response(c, &resp, true);
}
