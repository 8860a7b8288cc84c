#include "dispatch.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "frame_arena.h"
#include "gemm.h"
#include "info.h"
#include "log.h"
#include "mfma.pb-c.h"
#include "mfma_clock.h"
#include "mfmad_build.h"
#include "regions.h"
#include "reply.h"
#include "request_msg.h"
#include "validate.h"
#include "weights.h"
#include "wire_check.h"
#include "wire_split.h"

/* Decoding a LoadWeight copies every byte of its matrix (protobuf-c owns
 * its bytes fields), which for a 64 MiB frame takes a few hundred
 * milliseconds on a small machine: frames this large are decoded on the
 * threadpool, and the connection hands over its next frame only
 * afterwards, so its order holds.  (A GEMM's matrices are no longer
 * copied by the decode: they stay in the frame, request_msg.h.)  Smaller
 * frames stay on the loop: the hand-off to the threadpool costs more
 * than their decode (bench/RESULTS.md, "decoding 128 KiB requests off the
 * loop"). */
#define DECODE_OFFLOAD_BYTES (1u << 20)

static enum stats_kind kind_of(const Mfma__V1__Request *req)
{
	switch (req->body_case) {
	case MFMA__V1__REQUEST__BODY_GEMM: return STATS_GEMM;
	case MFMA__V1__REQUEST__BODY_LOAD_WEIGHT: return STATS_LOAD;
	case MFMA__V1__REQUEST__BODY_UNLOAD_WEIGHT: return STATS_UNLOAD;
	case MFMA__V1__REQUEST__BODY_LIST_WEIGHTS: return STATS_LIST;
	case MFMA__V1__REQUEST__BODY_STATUS: return STATS_STATUS;
	case MFMA__V1__REQUEST__BODY_PING: return STATS_PING;
	case MFMA__V1__REQUEST__BODY_REGISTER_REGION:
	case MFMA__V1__REQUEST__BODY_UNREGISTER_REGION: return STATS_REGION;
	default: return STATS_OTHER;
	}
}

/* Refuses what the daemon cannot take now; true when it answered. */
static bool refuse(struct daemon *d, struct conn *c, const struct request *r)
{
	if (d->stopping) {
		reply_status(d, r, MFMA__V1__CODE__UNAVAILABLE, "shutting down: not taking new requests");
		return true;
	}
	/* Requests that stay in flight count against the limits. */
	if (r->kind != STATS_GEMM && r->kind != STATS_LOAD)
		return false;
	if (conn_held_bytes(d) > d->cfg.max_memory_bytes) {
		reply_status(d, r, MFMA__V1__CODE__RESOURCE_EXHAUSTED,
			     "busy: clients hold %" PRIu64 " MiB of the daemon's memory "
			     "(limits.max_memory_mb = %" PRIu64 ")",
			     conn_held_bytes(d) >> 20, d->cfg.max_memory_bytes >> 20);
		return true;
	}
	/* Read once: an answer sent by a worker or post thread changes it
	 * meanwhile, and the message says the count that refused.  A frame
	 * decoded off the loop is not counted against itself. */
	const uint32_t own = r->own_hold;
	const uint32_t on_conn_all = conn_inflight_unanswered(c);
	const uint32_t on_conn = on_conn_all > own ? on_conn_all - own : 0;
	if (on_conn >= d->cfg.max_inflight_per_conn) {
		reply_status(d, r, MFMA__V1__CODE__RESOURCE_EXHAUSTED,
			     "busy: %u requests in flight on this connection "
			     "(limits.max_inflight_per_connection = %u)",
			     on_conn, d->cfg.max_inflight_per_conn);
		return true;
	}
	const uint64_t unanswered_all = conn_daemon_unanswered(d);
	const uint64_t unanswered = unanswered_all > own ? unanswered_all - own : 0;
	if (unanswered >= d->cfg.max_inflight) {
		reply_status(d, r, MFMA__V1__CODE__RESOURCE_EXHAUSTED,
			     "busy: %" PRIu64 " requests in flight (limits.max_inflight = %u)",
			     unanswered, d->cfg.max_inflight);
		return true;
	}
	return false;
}

/* Decodes a frame (its matrices left in frame, which m then owns, when
 * frame is given) and checks what the decoder lets through: a string
 * with a NUL byte (bad[0] is then set).  m->req NULL: it does not
 * decode. */
static void decode(struct request_msg *m, const uint8_t *payload, size_t len, uint8_t *frame,
		   size_t cap, char *bad, size_t badlen)
{
	bad[0] = '\0';
	request_msg_decode(m, payload, len, frame, cap);
	/* The GEMM decoder (m->arena set) has seen to its strings. */
	if (m->req && !m->arena)
		wire_check_strings(&mfma__v1__request__descriptor, payload, len, bad, badlen);
}

/* route's body: what it does not hand on stays in m. */
static void route_msg(struct conn *c, struct request_msg *m, uint64_t arrival, uint64_t decode_ns,
		      const char *bad, uint32_t own_hold)
{
	struct daemon *d = conn_daemon(c);
	struct request r;
	Mfma__V1__Request *req = m->req;
	if (!req && m->too_many_fields) {
		request_init(&r, c, 0, 0, STATS_OTHER);
		reply_status(d, &r, MFMA__V1__CODE__MALFORMED,
			     "malformed request: the %zu-byte frame has more than %u fields (a request "
			     "has a few dozen); not decoded",
			     m->len, REQUEST_FIELDS_MAX);
		return;
	}
	if (!req) {
		request_init(&r, c, 0, 0, STATS_OTHER);
		reply_status(d, &r, MFMA__V1__CODE__MALFORMED,
			     "malformed request: the %zu-byte frame is not a valid mfma.v1.Request",
			     m->len);
		return;
	}
	request_init(&r, c, req->id, arrival, kind_of(req));
	r.own_hold = own_hold;
	STATS_ADD(d->stats.matrices_in_place, m->in_place);
	STATS_ADD(d->stats.matrices_copied, m->large - m->in_place);
	if (m->in_place)
		STATS_ADD(d->stats.request_frames[frame_arena_owns(m->frame) ? STATS_FRAME_PINNED
									       : STATS_FRAME_HEAP],
			  1);
	/* Before any refusal: the registration takes the descriptor that
	 * came with the frame, also to close it when it refuses. */
	if (req->body_case == MFMA__V1__REQUEST__BODY_REGISTER_REGION) {
		regions_handle_register(d, &r, req->register_region);
		return;
	}
	if (req->body_case == MFMA__V1__REQUEST__BODY_DRAIN) {
		/* The answer is queued before the signal is handled, so the
		 * caller sees OK; the stop itself is main.c's one graceful path
		 * (SIGUSR1), not a second one here. */
		if (!d->stopping)
			log_notice("drain requested by a client");
		reply_status(d, &r, MFMA__V1__CODE__OK, "draining");
		if (!d->stopping)
			uv_kill(getpid(), SIGUSR1);
		return;
	}
	if (r.kind == STATS_OTHER) {
		if (req->base.n_unknown_fields > 0)
			reply_status(d, &r, MFMA__V1__CODE__INVALID_ARGUMENT,
				     "unknown request type (field %u); this daemon speaks mfma.v1 %s: "
				     "gemm, load_weight, unload_weight, list_weights, status, ping, drain, "
				     "register_region, unregister_region",
				     req->base.unknown_fields[0].tag, MFMAD_VERSION);
		else
			reply_status(d, &r, MFMA__V1__CODE__INVALID_ARGUMENT,
				     "request %" PRIu64 " has no body", req->id);
		return;
	}
	char err[256];
	if (bad[0]) {
		reply_status(d, &r, MFMA__V1__CODE__INVALID_ARGUMENT, "%s; strings in a request cannot hold NUL bytes", bad);
		return;
	}
	if (req->has_pad && req->pad.len > WIRE_PAD_MAX) {
		reply_status(d, &r, MFMA__V1__CODE__INVALID_ARGUMENT,
			     "pad of %zu bytes; at most %u (it only aligns the matrix after it)",
			     req->pad.len, WIRE_PAD_MAX);
		return;
	}
	/* The name's own error before the lookup, as for a load (a name of
	 * 200 bytes is not "not found"). */
	if (r.kind == STATS_GEMM && req->gemm->a &&
	    req->gemm->a->kind_case == MFMA__V1__OPERAND__KIND_WEIGHT &&
	    validate_weight_name(req->gemm->a->weight, err, sizeof(err)) < 0) {
		reply_status(d, &r, MFMA__V1__CODE__INVALID_ARGUMENT, "%s", err);
		return;
	}
	if (refuse(d, c, &r))
		return;
	switch (r.kind) {
	case STATS_GEMM: gemm_handle(d, &r, m, decode_ns); return;
	/* The registry takes the message itself: nothing of it is in the
	 * frame (only a GEMM's fields stay there). */
	case STATS_LOAD: m->req = NULL; weights_handle_load(d, &r, req); return;
	case STATS_UNLOAD: m->req = NULL; weights_handle_unload(d, &r, req); return;
	case STATS_LIST: info_list(d, &r); break;
	case STATS_STATUS: info_status(d, &r); break;
	case STATS_PING: info_ping(d, &r, req->ping); break;
	case STATS_REGION: regions_handle_unregister(d, &r, req->unregister_region); break;
	default: break;
	}
}

/* Takes the decoded request and its frame (m->req NULL: the frame did not
 * decode); bad is decode's verdict on its strings; own_hold, 1 when the
 * frame's decode off the loop is counted in flight (struct request).  A
 * GEMM goes on with its frame; every other request is done with it on
 * return. */
static void route(struct conn *c, struct request_msg *m, uint64_t arrival, uint64_t decode_ns,
		  const char *bad, uint32_t own_hold)
{
	route_msg(c, m, arrival, decode_ns, bad, own_hold);
	request_msg_free(m);
}

/* ---- off-loop decode ---- */

struct decode_work {
	uv_work_t work;
	struct conn *c;
	struct request hold; /* the decode counts as a request in flight */
	uint8_t *base;       /* the reader's buffer, holding the frame */
	size_t cap;
	const uint8_t *payload;
	size_t len;
	uint64_t arrival, decoded;
	struct request_msg m;
	char bad[160];
};

static void decode_run(uv_work_t *w)
{
	struct decode_work *dw = w->data;
	decode(&dw->m, dw->payload, dw->len, dw->base, dw->cap, dw->bad, sizeof(dw->bad));
	dw->decoded = mfma_clock_ns();
}

static void decode_done(uv_work_t *w, int status)
{
	struct decode_work *dw = w->data;
	struct conn *c = dw->c;
	struct daemon *d = conn_daemon(c);
	(void)status; /* never cancelled: uv_cancel is not used */
	conn_ref(c);
	/* The buffer is the message's now; still counted as the
	 * connection's (taken) until the resume below, and by a GEMM that
	 * keeps it from its admission on. */
	if (conn_is_closed(c)) {
		request_msg_free(&dw->m);
	} else {
		route(c, &dw->m, dw->arrival, dw->decoded - dw->arrival, dw->bad, 1);
	}
	request_release(d, &dw->hold);
	conn_frames_resume(c);
	conn_unref(c);
	free(dw);
}

/* Starts decoding the current frame on the threadpool; false when that
 * is not possible (the caller decodes it inline). */
static bool decode_offload(struct conn *c, const uint8_t *payload, size_t len, uint64_t arrival)
{
	struct daemon *d = conn_daemon(c);
	struct decode_work *dw = calloc(1, sizeof(*dw));
	if (!dw)
		return false;
	dw->base = conn_frames_suspend(c, &dw->cap);
	if (!dw->base) {
		free(dw);
		return false;
	}
	dw->c = c;
	dw->payload = payload;
	dw->len = len;
	dw->arrival = arrival;
	dw->work.data = dw;
	request_init(&dw->hold, c, 0, 0, STATS_OTHER);
	request_hold(d, &dw->hold);
	if (uv_queue_work(d->loop, &dw->work, decode_run, decode_done) < 0) {
		/* The frame lives in dw->base now: decode it here after all. */
		decode_run(&dw->work);
		decode_done(&dw->work, 0);
	}
	return true;
}

/* ---- frames read by a reader thread (conn.c, readers.h) ---- */

/* A frame decoded where it was read, as decode_run does on the
 * threadpool. */
struct read_frame {
	struct request_msg m;
	uint64_t arrival, decoded;
	char bad[160];
};

static void *decode_frame(const uint8_t *payload, size_t len, uint8_t *base, size_t cap)
{
	struct read_frame *f = malloc(sizeof(*f));
	if (!f) {
		frame_arena_free(base);
		return NULL;
	}
	f->arrival = mfma_clock_ns();
	decode(&f->m, payload, len, base, cap, f->bad, sizeof(f->bad));
	f->decoded = mfma_clock_ns();
	return f;
}

static void on_decoded(struct conn *c, void *decoded)
{
	struct read_frame *f = decoded;
	if (conn_is_closed(c))
		request_msg_free(&f->m);
	else
		route(c, &f->m, f->arrival, f->decoded - f->arrival, f->bad, 0);
	free(f);
}

/* ---- the connection's callbacks ---- */

static void on_frame(struct conn *c, const uint8_t *payload, size_t len)
{
	uint64_t arrival = mfma_clock_ns();
	if (len >= DECODE_OFFLOAD_BYTES && decode_offload(c, payload, len, arrival))
		return;
	/* A frame that may carry a matrix worth leaving in place is taken
	 * from the reader, so a GEMM can keep it; a smaller one (or one the
	 * reader cannot give) is copied from as before. */
	size_t cap = 0;
	uint8_t *frame = len >= WIRE_SPLIT_MIN_BYTES ? conn_frame_take(c, &payload, len, &cap) : NULL;
	char bad[160];
	struct request_msg m;
	decode(&m, payload, len, frame, cap, bad, sizeof(bad));
	route(c, &m, arrival, 0, bad, 0);
}

static void on_oversize(struct conn *c, size_t len)
{
	struct daemon *d = conn_daemon(c);
	char err[256];
	const char *key;
	uint64_t limit = config_read_frame_limit(&d->cfg, &key);
	snprintf(err, sizeof(err),
		 "frame of %zu bytes exceeds the limit of %" PRIu64 " bytes (%s); closing the "
		 "connection",
		 len, limit, key);
	log_debug("connection %" PRIu64 ": %s", conn_id(c), err);
	STATS_ADD(d->stats.requests[STATS_OTHER][STATS_MALFORMED], 1);
	reply_and_close(c, MFMA__V1__CODE__MALFORMED, err);
}

/* Refuses c, one of `who`'s connections over limits.KEY = max: counted
 * and logged as a refusal, answered RESOURCE_EXHAUSTED naming both. */
static bool refuse_over(struct conn *c, const char *who, uint32_t max, const char *key)
{
	conn_refused(conn_daemon(c), CONN_REFUSE_LIMIT, "refusing connection %" PRIu64 ": %s has %u open (limits.%s)",
		     conn_id(c), who, max, key);
	char err[192];
	snprintf(err, sizeof(err), "too many connections: %s has %u open (limits.%s)", who, max, key);
	reply_and_close(c, MFMA__V1__CODE__RESOURCE_EXHAUSTED, err);
	return false;
}

/* limits.max_connections_per_user: one local user cannot take every
 * connection from the others.  Root and the daemon's own user, who could
 * stop it anyway, are not counted against it. */
static bool per_user_ok(struct conn *c)
{
	struct daemon *d = conn_daemon(c);
	uint32_t uid, max = d->cfg.max_connections_per_user;
	if (!max || !conn_peer_uid(c, &uid) || uid == 0 || uid == (uint32_t)geteuid() ||
	    conn_count_uid(d, uid) <= max)
		return true;
	char who[32];
	snprintf(who, sizeof(who), "uid %u", (unsigned)uid);
	return refuse_over(c, who, max, "max_connections_per_user");
}

/* limits.max_connections_per_address (0, off, by default: behind a proxy
 * every client has the proxy's address): one network peer (an IPv4
 * address, an IPv6 /64) cannot take every connection from the others,
 * the Unix socket's clients included.  Loopback is counted too: a local
 * user's TCP connections are not under max_connections_per_user. */
static bool per_address_ok(struct conn *c)
{
	struct daemon *d = conn_daemon(c);
	uint32_t max = d->cfg.max_connections_per_address;
	struct peer_addr a;
	if (!max || !conn_peer_addr(c, &a) || conn_count_addr(d, &a) <= max)
		return true;
	char who[PEER_ADDR_STRLEN];
	peer_addr_format(&a, who, sizeof(who));
	return refuse_over(c, who, max, "max_connections_per_address");
}

static bool on_open(struct conn *c)
{
	struct daemon *d = conn_daemon(c);
	uint32_t max = d->cfg.max_connections;
	if (d->fd_conn_cap && d->fd_conn_cap < max)
		max = d->fd_conn_cap;
	if (STATS_GET(d->stats.connections_open) <= max)
		return per_user_ok(c) && per_address_ok(c);
	const char *why = max < d->cfg.max_connections ? "the descriptor limit (LimitNOFILE=)"
						      : "limits.max_connections";
	conn_refused(d, max < d->cfg.max_connections ? CONN_REFUSE_FD : CONN_REFUSE_LIMIT,
		     "refusing connection %" PRIu64 ": %u open (%s)", conn_id(c), max, why);
	char err[160];
	snprintf(err, sizeof(err), "too many connections: %u open (%s)", max, why);
	reply_and_close(c, MFMA__V1__CODE__RESOURCE_EXHAUSTED, err);
	return false;
}

static void on_denied(struct conn *c, const char *why)
{
	reply_and_close(c, MFMA__V1__CODE__UNAVAILABLE, why);
}

static void on_close(struct conn *c)
{
	regions_conn_closed(conn_daemon(c), c);
}

const struct conn_events dispatch_events = {
	.on_open = on_open,
	.on_frame = on_frame,
	.on_oversize = on_oversize,
	.on_denied = on_denied,
	.on_close = on_close,
	.decode_frame = decode_frame,
	.on_decoded = on_decoded,
};
