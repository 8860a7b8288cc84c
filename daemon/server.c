/* Listeners, connections and dispatch, all on the loop thread.
 *
 * A connection reads frames into its frame_reader (in place, from libuv's
 * alloc callback), decodes each into a Request, validates it and either
 * answers at once (ping, status, weights) or queues a job on a device.
 * Completions come back through the daemon's completion list.  A
 * connection is reference counted: its socket holds one reference and
 * every request in flight one more, so a client that vanishes with
 * requests queued leaves nothing dangling; their answers are dropped. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"
#include "endpoint.h"
#include "frame.h"
#include "log.h"
#include "mfmad_build.h"
#if MFMAD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

struct conn {
	union {
		uv_pipe_t pipe;
		uv_tcp_t tcp;
		uv_stream_t stream;
		uv_handle_t handle;
	} h;
	struct daemon *d;
	struct conn *prev, *next;
	struct frame_reader rd;
	int refs;
	bool closed;      /* handle closing or closed: drop answers */
	bool paused;      /* reading stopped for write backpressure */
	bool reading;
	bool decoding;    /* a large frame is being decoded off the loop */
	uint32_t inflight;
	size_t write_pending;
	uint64_t cid;
};

struct write_req {
	uv_write_t req;
	struct conn *c;
	size_t len;
	uint8_t *buf;
	bool close_after;
};

enum stats_result stats_result_of(int code)
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
	default: return STATS_INTERNAL;
	}
}

void conn_ref(struct conn *c)
{
	c->refs++;
}

static void conn_free(struct conn *c)
{
	frame_reader_free(&c->rd);
	free(c);
}

void conn_unref(struct conn *c)
{
	if (--c->refs == 0)
		conn_free(c);
}

static void on_conn_closed(uv_handle_t *h)
{
	struct conn *c = h->data;
	struct daemon *d = c->d;
	if (c->prev)
		c->prev->next = c->next;
	else
		d->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	STATS_SUB(d->stats.connections_open, 1);
	conn_unref(c);
	server_check_stopped(d);
}

static void conn_close(struct conn *c)
{
	if (c->closed)
		return;
	c->closed = true;
	if (c->inflight)
		log_debug("connection %" PRIu64 " closed with %u request(s) in flight", c->cid,
			  c->inflight);
	uv_close(&c->h.handle, on_conn_closed);
}

static const size_t write_high_water = 64u << 20;

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

static void conn_resume(struct conn *c)
{
	if (c->closed || !c->paused)
		return;
	c->paused = false;
	if (!c->reading && uv_read_start(&c->h.stream, on_alloc, on_read) == 0)
		c->reading = true;
}

static void on_write(uv_write_t *req, int status)
{
	struct write_req *w = (struct write_req *)req;
	struct conn *c = w->c;
	c->write_pending -= w->len;
	free(w->buf);
	if (status < 0 && status != UV_ECANCELED)
		log_debug("connection %" PRIu64 ": write failed: %s", c->cid, uv_strerror(status));
	if (w->close_after || status < 0)
		conn_close(c);
	else if (c->paused && c->write_pending < write_high_water / 2)
		conn_resume(c);
	else if (c->d->stopping && c->write_pending == 0 && c->d->inflight == 0)
		conn_close(c);
	free(w);
	conn_unref(c);
}

/* Queues one encoded frame (header included) and takes ownership of it. */
static void send_frame(struct conn *c, uint8_t *buf, size_t len, bool close_after)
{
	if (!c || c->closed) {
		free(buf);
		return;
	}
	struct write_req *w = calloc(1, sizeof(*w));
	if (!w) {
		free(buf);
		log_err("connection %" PRIu64 ": out of memory sending a response; closing", c->cid);
		conn_close(c);
		return;
	}
	w->c = c;
	w->buf = buf;
	w->len = len;
	w->close_after = close_after;
	uv_buf_t b = uv_buf_init((char *)buf, (unsigned)w->len);
	int rc = uv_write(&w->req, &c->h.stream, &b, 1, on_write);
	if (rc < 0) {
		free(buf);
		free(w);
		conn_close(c);
		return;
	}
	conn_ref(c);
	c->write_pending += w->len;
	if (c->write_pending > write_high_water)
		c->paused = true; /* on_read stops reading; on_write resumes */
}

/* Packs and queues one response. */
static void send_response(struct conn *c, const Mfma__V1__Response *resp, bool close_after)
{
	if (!c || c->closed)
		return;
	size_t n = mfma__v1__response__get_packed_size(resp);
	uint8_t *buf = n <= UINT32_MAX ? malloc(FRAME_HEADER_SIZE + n) : NULL;
	if (!buf) {
		log_err("connection %" PRIu64 ": cannot allocate a %zu-byte response; closing", c->cid, n);
		conn_close(c);
		return;
	}
	frame_header_put(buf, (uint32_t)n);
	mfma__v1__response__pack(resp, buf + FRAME_HEADER_SIZE);
	send_frame(c, buf, FRAME_HEADER_SIZE + n, close_after);
}

static void count_result(struct daemon *d, enum stats_kind kind, int code, uint64_t arrival)
{
	STATS_ADD(d->stats.requests[kind][stats_result_of(code)], 1);
	if (arrival)
		stats_observe_latency(&d->stats, now_ns() - arrival);
}

void server_reply(struct daemon *d, struct conn *c, Mfma__V1__Response *resp, enum stats_kind kind,
		  uint64_t arrival)
{
	Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
	if (!resp->status) {
		st.has_code = 1;
		st.code = MFMA__V1__CODE__OK;
		resp->status = &st;
	}
	count_result(d, kind, resp->status->code, arrival);
	send_response(c, resp, false);
	if (resp->status == &st)
		resp->status = NULL;
}

void server_reply_status(struct daemon *d, struct conn *c, uint64_t id, int code, const char *msg,
			 enum stats_kind kind, uint64_t arrival)
{
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
	st.has_code = 1;
	st.code = (Mfma__V1__Code)code;
	st.message = (char *)msg;
	resp.has_id = 1;
	resp.id = id;
	resp.status = &st;
	if (code != MFMA__V1__CODE__OK)
		log_debug("request %" PRIu64 " failed: %s", id, msg);
	server_reply(d, c, &resp, kind, arrival);
}

/* The ready weights as wire messages, for status and list replies. */
struct weight_list {
	size_t n;
	Mfma__V1__WeightInfo *info;
	Mfma__V1__WeightInfo **ptrs;
	uint32_t (*devs)[STATS_MAX_DEVICES];
};

static int weight_list_build(const struct daemon *d, struct weight_list *l)
{
	size_t nw = 0;
	for (const struct weight *w = d->weights; w; w = w->next)
		nw += w->state == WEIGHT_READY;
	l->n = 0;
	l->info = calloc(nw ? nw : 1, sizeof(*l->info));
	l->ptrs = calloc(nw ? nw : 1, sizeof(*l->ptrs));
	l->devs = calloc(nw ? nw : 1, sizeof(*l->devs));
	if (!l->info || !l->ptrs || !l->devs)
		return -ENOMEM;
	for (const struct weight *w = d->weights; w; w = w->next) {
		if (w->state != WEIGHT_READY)
			continue;
		weights_fill_info(d, w, &l->info[l->n], l->devs[l->n]);
		l->ptrs[l->n] = &l->info[l->n];
		l->n++;
	}
	return 0;
}

static void weight_list_free(struct weight_list *l)
{
	free(l->info);
	free(l->ptrs);
	free(l->devs);
}

/* ---- requests answered on the loop ---- */

static void reply_status(struct daemon *d, struct conn *c, uint64_t id, uint64_t arrival)
{
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__StatusResult sr = MFMA__V1__STATUS_RESULT__INIT;
	Mfma__V1__Counters ct = MFMA__V1__COUNTERS__INIT;
	Mfma__V1__DeviceInfo di[STATS_MAX_DEVICES];
	Mfma__V1__DeviceInfo *dip[STATS_MAX_DEVICES];
	char *variants[STATS_MAX_DEVICES][64];
	char varbuf[STATS_MAX_DEVICES][sizeof(d->dev[0].info.variants)];
	struct weight_list wl;
	if (weight_list_build(d, &wl) < 0) {
		weight_list_free(&wl);
		server_reply_status(d, c, id, MFMA__V1__CODE__RESOURCE_EXHAUSTED, "out of memory",
				    STATS_STATUS, arrival);
		return;
	}
	for (int i = 0; i < d->ndev; i++) {
		struct device *v = &d->dev[i];
		mfma__v1__device_info__init(&di[i]);
		di[i].has_index = di[i].has_mem_total = di[i].has_mem_used = di[i].has_queue_depth = 1;
		di[i].has_in_flight = di[i].has_completed = di[i].has_failed = 1;
		di[i].index = (uint32_t)i;
		di[i].backend = (char *)v->ops->name;
		di[i].arch = v->info.arch;
		di[i].name = v->info.name;
		di[i].mem_total = v->info.mem_total;
		di[i].mem_used = STATS_GET(v->st->weight_bytes);
		di[i].queue_depth = (uint32_t)STATS_GET(v->st->queued);
		di[i].in_flight = (uint32_t)STATS_GET(v->st->in_flight);
		di[i].completed = STATS_GET(v->st->completed);
		di[i].failed = STATS_GET(v->st->failed);
		/* The variant list is one comma-separated string in the backend. */
		snprintf(varbuf[i], sizeof(varbuf[i]), "%s", v->info.variants);
		size_t nv = 0;
		char *save = NULL;
		for (char *t = strtok_r(varbuf[i], ",", &save); t && nv < 64;
		     t = strtok_r(NULL, ",", &save))
			variants[i][nv++] = t;
		di[i].n_variants = nv;
		di[i].variants = variants[i];
		dip[i] = &di[i];
	}
	uint64_t ok = 0, failed = 0, busy = 0, malformed = 0;
	for (int kd = 0; kd < STATS_NKINDS; kd++) {
		for (int r = 0; r < STATS_NRESULTS; r++) {
			uint64_t n = STATS_GET(d->stats.requests[kd][r]);
			if (r == STATS_OK)
				ok += n;
			else
				failed += n;
			if (r == STATS_BUSY)
				busy += n;
			if (r == STATS_MALFORMED)
				malformed += n;
		}
	}
	ct.has_requests = ct.has_ok = ct.has_failed = ct.has_busy = ct.has_connections_open = 1;
	ct.has_connections_total = ct.has_in_flight = ct.has_malformed = 1;
	ct.requests = ok + failed + 1; /* this one too */
	ct.ok = ok;
	ct.failed = failed;
	ct.busy = busy;
	ct.malformed = malformed;
	ct.connections_open = STATS_GET(d->stats.connections_open);
	ct.connections_total = STATS_GET(d->stats.connections_total);
	ct.in_flight = d->inflight;
	sr.version = (char *)MFMAD_VERSION;
	sr.has_uptime_ns = sr.has_weight_budget = sr.has_weight_bytes = 1;
	sr.uptime_ns = now_ns() - d->stats.start_ns;
	sr.weight_budget = STATS_GET(d->stats.weight_budget);
	sr.weight_bytes = STATS_GET(d->stats.weight_bytes);
	sr.n_devices = (size_t)d->ndev;
	sr.devices = dip;
	sr.n_weights = wl.n;
	sr.weights = wl.ptrs;
	sr.counters = &ct;
	resp.has_id = 1;
	resp.id = id;
	resp.body_case = MFMA__V1__RESPONSE__BODY_STATUS_RESULT;
	resp.status_result = &sr;
	server_reply(d, c, &resp, STATS_STATUS, arrival);
	weight_list_free(&wl);
}

static void reply_list(struct daemon *d, struct conn *c, uint64_t id, uint64_t arrival)
{
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__ListWeightsResult lr = MFMA__V1__LIST_WEIGHTS_RESULT__INIT;
	struct weight_list wl;
	if (weight_list_build(d, &wl) < 0) {
		weight_list_free(&wl);
		server_reply_status(d, c, id, MFMA__V1__CODE__RESOURCE_EXHAUSTED, "out of memory",
				    STATS_LIST, arrival);
		return;
	}
	lr.n_weights = wl.n;
	lr.weights = wl.ptrs;
	resp.has_id = 1;
	resp.id = id;
	resp.body_case = MFMA__V1__RESPONSE__BODY_LIST_WEIGHTS;
	resp.list_weights = &lr;
	server_reply(d, c, &resp, STATS_LIST, arrival);
	weight_list_free(&wl);
}

static void reply_ping(struct daemon *d, struct conn *c, const Mfma__V1__Request *req,
		       uint64_t arrival)
{
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__Pong pong = MFMA__V1__PONG__INIT;
	if (req->ping->has_payload) {
		pong.has_payload = 1;
		pong.payload = req->ping->payload;
	}
	resp.has_id = 1;
	resp.id = req->id;
	resp.body_case = MFMA__V1__RESPONSE__BODY_PONG;
	resp.pong = &pong;
	server_reply(d, c, &resp, STATS_PING, arrival);
}

/* ---- GEMM ---- */

static void handle_gemm(struct daemon *d, struct conn *c, Mfma__V1__Request *req, uint64_t arrival,
			uint64_t decode_ns)
{
	const Mfma__V1__Gemm *g = req->gemm;
	char err[512];
	struct validate_limits lim = { .max_dim = d->cfg.max_dim,
				       .max_out_bytes = d->cfg.max_frame_bytes };
	struct weight *w = NULL;
	struct weight_shape ws;
	int code = MFMA__V1__CODE__INVALID_ARGUMENT;

	if (g->a && g->a->kind_case == MFMA__V1__OPERAND__KIND_WEIGHT && g->a->weight) {
		w = weights_find(d, g->a->weight);
		if (!w) {
			code = MFMA__V1__CODE__NOT_FOUND;
			snprintf(err, sizeof(err), "weight '%s' is not loaded", g->a->weight);
			goto fail;
		}
		if (w->state != WEIGHT_READY) {
			code = MFMA__V1__CODE__UNAVAILABLE;
			snprintf(err, sizeof(err), "weight '%s' is still loading", g->a->weight);
			goto fail;
		}
		ws = (struct weight_shape){ .m = w->m, .k = w->k, .dtype = w->dtype, .sparse = w->sparse };
	}
	struct job *j = calloc(1, sizeof(*j));
	if (!j) {
		code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
		snprintf(err, sizeof(err), "out of memory");
		goto fail;
	}
	if (validate_gemm(g, &lim, w ? &ws : NULL, &j->plan, err, sizeof(err)) < 0) {
		free(j);
		goto fail;
	}
	if (d->inflight_bytes + j->plan.in_bytes + j->plan.d_bytes > d->cfg.max_inflight_bytes &&
	    d->inflight > 0) {
		code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
		snprintf(err, sizeof(err),
			 "busy: %" PRIu64 " bytes of requests in flight; this one needs %zu more "
			 "(limits.max_inflight_mb = %" PRIu64 ")",
			 d->inflight_bytes, j->plan.in_bytes + j->plan.d_bytes,
			 d->cfg.max_inflight_bytes >> 20);
		free(j);
		goto fail;
	}
	bool ok[STATS_MAX_DEVICES];
	int capable = 0;
	for (int i = 0; i < d->ndev; i++) {
		ok[i] = (!w || w->resident[i]) &&
			backend_runs(&d->dev[i].info, j->plan.g.in_dtype, j->plan.g.a_sparse);
		capable += backend_runs(&d->dev[i].info, j->plan.g.in_dtype, j->plan.g.a_sparse);
	}
	if (capable == 0) {
		code = MFMA__V1__CODE__UNAVAILABLE;
		snprintf(err, sizeof(err),
			 "no device here runs %s GEMMs with a %s A (see mfmactl status for each "
			 "device's variants; cpu.enabled = true adds the CPU, which runs every dtype)",
			 mfma_dtype_name(j->plan.g.in_dtype), j->plan.g.a_sparse ? "2:4" : "dense");
		free(j);
		goto fail;
	}
	int dev;
	if (g->has_device && g->device >= 0) {
		if (g->device >= d->ndev) {
			snprintf(err, sizeof(err), "device=%d does not exist (devices 0..%d, or -1 for any)",
				 g->device, d->ndev - 1);
			free(j);
			goto fail;
		}
		if (!ok[g->device]) {
			if (w && !w->resident[g->device])
				snprintf(err, sizeof(err), "weight '%s' is not resident on device %d",
					 w->name, g->device);
			else
				snprintf(err, sizeof(err), "device %d (%s %s) has no kernel for %s GEMMs "
					 "with a %s A", g->device, d->dev[g->device].ops->name,
					 d->dev[g->device].info.arch, mfma_dtype_name(j->plan.g.in_dtype),
					 j->plan.g.a_sparse ? "2:4" : "dense");
			free(j);
			goto fail;
		}
		dev = g->device;
	} else {
		dev = sched_pick(d, ok);
		if (dev < 0) {
			code = MFMA__V1__CODE__UNAVAILABLE;
			snprintf(err, sizeof(err), "no usable device can run this request");
			free(j);
			goto fail;
		}
	}
	j->kind = JOB_GEMM;
	j->conn = c;
	conn_ref(c);
	c->inflight++;
	d->inflight++;
	j->in_bytes = j->plan.in_bytes + j->plan.d_bytes;
	d->inflight_bytes += j->in_bytes;
	STATS_ADD(d->stats.in_flight, 1);
	j->id = req->id;
	j->req = req;
	j->arrival_ns = arrival;
	j->decode_ns = decode_ns;
	uint64_t timeout_us = g->timeout_us ? g->timeout_us : d->cfg.default_timeout_ms * 1000;
	j->deadline_ns = timeout_us ? arrival + timeout_us * 1000 : 0;
	j->prio = g->priority ? g->priority : d->cfg.default_priority;
	j->dev = dev;
	if (w) {
		j->weight = w;
		w->refs++;
	}
	sched_submit(d, j);
	return;
fail:
	server_reply_status(d, c, req->id, code, err, STATS_GEMM, arrival);
	mfma__v1__request__free_unpacked(req, NULL);
}

static void complete_gemm(struct daemon *d, struct job *j)
{
	struct conn *c = j->conn;
	if (j->code == MFMA__V1__CODE__OK) {
		/* The worker encoded the answer (pack_gemm_answer in sched.c). */
		STATS_ADD(d->stats.gemm_queue_ns, j->queue_ns);
		STATS_ADD(d->stats.gemm_h2d_ns, j->t.h2d_ns);
		STATS_ADD(d->stats.gemm_kernel_ns, j->t.kernel_ns);
		STATS_ADD(d->stats.gemm_d2h_ns, j->t.d2h_ns);
		STATS_ADD(d->stats.gemm_total_ns, j->total_ns);
		STATS_ADD(d->stats.gemm_flops, (uint64_t)mfma_gemm_flops(&j->plan.g));
		count_result(d, STATS_GEMM, MFMA__V1__CODE__OK, j->arrival_ns);
		send_frame(c->closed ? NULL : c, j->frame, j->frame_len, false);
		j->frame = NULL;
	} else {
		server_reply_status(d, c->closed ? NULL : c, j->id, j->code, j->msg, STATS_GEMM,
				    j->arrival_ns);
	}
	c->inflight--;
	d->inflight--;
	d->inflight_bytes -= j->in_bytes;
	STATS_SUB(d->stats.in_flight, 1);
	if (j->weight)
		weight_unref(d, j->weight);
	job_free(j);
	conn_unref(c);
	server_check_stopped(d);
}

void server_drain_completions(uv_async_t *a)
{
	struct daemon *d = a->data;
	pthread_mutex_lock(&d->done_mu);
	struct job *list = d->done;
	d->done = NULL;
	pthread_mutex_unlock(&d->done_mu);
	/* The list is newest first; answer in completion order. */
	struct job *rev = NULL;
	while (list) {
		struct job *n = list->next;
		list->next = rev;
		rev = list;
		list = n;
	}
	while (rev) {
		struct job *j = rev;
		rev = j->next;
		switch (j->kind) {
		case JOB_GEMM: complete_gemm(d, j); break;
		case JOB_WEIGHT_LOAD: weights_load_done(d, j); break;
		case JOB_WEIGHT_FREE: weights_free_done(d, j); break;
		}
	}
}

/* ---- frames ---- */

/* Decoding copies every byte of the matrices (protobuf-c owns its bytes
 * fields), which for a 64 MiB frame takes a few hundred milliseconds on a
 * small machine: frames this large are decoded on the threadpool, and the
 * connection takes its next frame only afterwards, so its order holds. */
#define DECODE_OFFLOAD_BYTES (1u << 20)

struct decode_work {
	uv_work_t work;
	struct conn *c;
	uint8_t *base; /* the reader's old buffer, holding the frame */
	const uint8_t *payload;
	size_t len;
	uint64_t arrival, decoded;
	Mfma__V1__Request *req;
};

static void handle_request(struct conn *c, Mfma__V1__Request *req, size_t len, uint64_t arrival,
			   uint64_t decode_ns);
static void process_frames(struct conn *c);

static void decode_run(uv_work_t *w)
{
	struct decode_work *dw = w->data;
	dw->req = mfma__v1__request__unpack(NULL, dw->len, dw->payload);
	dw->decoded = now_ns();
}

static void decode_done(uv_work_t *w, int status)
{
	struct decode_work *dw = w->data;
	struct conn *c = dw->c;
	struct daemon *d = c->d;
	(void)status; /* never cancelled: uv_cancel is not used */
	free(dw->base);
	c->decoding = false;
	d->inflight--;
	if (c->closed) {
		if (dw->req)
			mfma__v1__request__free_unpacked(dw->req, NULL);
	} else {
		handle_request(c, dw->req, dw->len, dw->arrival, dw->decoded - dw->arrival);
		process_frames(c);
		if (!c->closed && !c->decoding && !c->paused && !c->reading &&
		    uv_read_start(&c->h.stream, on_alloc, on_read) == 0)
			c->reading = true;
	}
	free(dw);
	conn_unref(c);
	server_check_stopped(d);
}

/* Starts decoding the frame just returned by the reader on the threadpool.
 * False when that is not possible; the caller decodes it inline. */
static bool decode_offload(struct conn *c, const uint8_t *payload, size_t len, uint64_t arrival)
{
	struct decode_work *dw = calloc(1, sizeof(*dw));
	if (!dw)
		return false;
	dw->base = frame_reader_take(&c->rd);
	if (!dw->base) {
		free(dw);
		return false;
	}
	dw->c = c;
	dw->payload = payload;
	dw->len = len;
	dw->arrival = arrival;
	dw->work.data = dw;
	if (uv_queue_work(c->d->loop, &dw->work, decode_run, decode_done) < 0) {
		/* The frame lives in dw->base now: decode it here after all. */
		handle_request(c, mfma__v1__request__unpack(NULL, len, payload), len, arrival, 0);
		free(dw->base);
		free(dw);
		return true;
	}
	c->decoding = true;
	c->d->inflight++;
	conn_ref(c);
	return true;
}

static void handle_frame(struct conn *c, const uint8_t *data, size_t len)
{
	uint64_t arrival = now_ns();
	handle_request(c, mfma__v1__request__unpack(NULL, len, data), len, arrival, 0);
}

static void handle_request(struct conn *c, Mfma__V1__Request *req, size_t len, uint64_t arrival,
			   uint64_t decode_ns)
{
	struct daemon *d = c->d;
	char err[512];
	if (!req) {
		snprintf(err, sizeof(err),
			 "malformed request: the %zu-byte frame is not a valid mfma.v1.Request", len);
		server_reply_status(d, c, 0, MFMA__V1__CODE__MALFORMED, err, STATS_OTHER, 0);
		return;
	}
	enum stats_kind kind;
	switch (req->body_case) {
	case MFMA__V1__REQUEST__BODY_GEMM: kind = STATS_GEMM; break;
	case MFMA__V1__REQUEST__BODY_LOAD_WEIGHT: kind = STATS_LOAD; break;
	case MFMA__V1__REQUEST__BODY_UNLOAD_WEIGHT: kind = STATS_UNLOAD; break;
	case MFMA__V1__REQUEST__BODY_LIST_WEIGHTS: kind = STATS_LIST; break;
	case MFMA__V1__REQUEST__BODY_STATUS: kind = STATS_STATUS; break;
	case MFMA__V1__REQUEST__BODY_PING: kind = STATS_PING; break;
	default:
		if (req->base.n_unknown_fields > 0)
			snprintf(err, sizeof(err),
				 "unknown request type (field %u); this daemon speaks mfma.v1 %s: gemm, "
				 "load_weight, unload_weight, list_weights, status, ping",
				 req->base.unknown_fields[0].tag, MFMAD_VERSION);
		else
			snprintf(err, sizeof(err), "request %" PRIu64 " has no body", req->id);
		server_reply_status(d, c, req->id, MFMA__V1__CODE__INVALID_ARGUMENT, err, STATS_OTHER,
				    arrival);
		mfma__v1__request__free_unpacked(req, NULL);
		return;
	}
	if (d->stopping) {
		server_reply_status(d, c, req->id, MFMA__V1__CODE__UNAVAILABLE,
				    "shutting down: not taking new requests", kind, arrival);
		mfma__v1__request__free_unpacked(req, NULL);
		return;
	}
	bool queued = kind == STATS_GEMM || kind == STATS_LOAD;
	if (queued && c->inflight >= d->cfg.max_inflight_per_conn) {
		snprintf(err, sizeof(err),
			 "busy: %u requests in flight on this connection "
			 "(limits.max_inflight_per_connection = %u)",
			 c->inflight, d->cfg.max_inflight_per_conn);
		server_reply_status(d, c, req->id, MFMA__V1__CODE__RESOURCE_EXHAUSTED, err, kind, arrival);
		mfma__v1__request__free_unpacked(req, NULL);
		return;
	}
	if (queued && d->inflight >= d->cfg.max_inflight) {
		snprintf(err, sizeof(err), "busy: %" PRIu64 " requests in flight (limits.max_inflight = %u)",
			 d->inflight, d->cfg.max_inflight);
		server_reply_status(d, c, req->id, MFMA__V1__CODE__RESOURCE_EXHAUSTED, err, kind, arrival);
		mfma__v1__request__free_unpacked(req, NULL);
		return;
	}
	switch (kind) {
	case STATS_GEMM: handle_gemm(d, c, req, arrival, decode_ns); return;
	case STATS_LOAD: weights_handle_load(d, c, req, arrival); return;
	case STATS_UNLOAD: weights_handle_unload(d, c, req, arrival); return;
	case STATS_LIST: reply_list(d, c, req->id, arrival); break;
	case STATS_STATUS: reply_status(d, c, req->id, arrival); break;
	case STATS_PING: reply_ping(d, c, req, arrival); break;
	default: break;
	}
	mfma__v1__request__free_unpacked(req, NULL);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct conn *c = h->data;
	uint8_t *p;
	size_t avail;
	(void)suggested;
	if (frame_reader_space(&c->rd, 64 * 1024, &p, &avail) < 0) {
		buf->base = NULL;
		buf->len = 0;
		return;
	}
	buf->base = (char *)p;
	buf->len = avail > UINT32_MAX ? UINT32_MAX : avail;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct conn *c = s->data;
	struct daemon *d = c->d;
	(void)buf;
	if (nread == UV_ENOBUFS) {
		log_warn("connection %" PRIu64 ": out of memory for its read buffer; closing", c->cid);
		conn_close(c);
		return;
	}
	if (nread < 0) {
		if (nread != UV_EOF)
			log_debug("connection %" PRIu64 ": %s", c->cid, uv_strerror((int)nread));
		conn_close(c);
		return;
	}
	frame_reader_commit(&c->rd, (size_t)nread);
	if (!c->decoding) {
		process_frames(c);
	} else if (frame_reader_pending(&c->rd) > d->cfg.max_frame_bytes && c->reading) {
		/* The client sends on while its last frame decodes: hold it to
		 * one frame's worth until the decode is done. */
		uv_read_stop(&c->h.stream);
		c->reading = false;
	}
}

/* Handles every whole frame buffered on the connection, in order, until
 * one goes off to be decoded on the threadpool. */
static void process_frames(struct conn *c)
{
	struct daemon *d = c->d;
	conn_ref(c); /* handling a frame may close it */
	while (!c->decoding) {
		const uint8_t *payload;
		size_t len;
		int rc = frame_reader_next(&c->rd, &payload, &len);
		if (rc == 0 || c->closed)
			break;
		if (rc < 0) {
			char err[256];
			snprintf(err, sizeof(err),
				 "frame of %zu bytes exceeds the limit of %" PRIu64
				 " bytes (limits.max_frame_mb); closing the connection",
				 len, d->cfg.max_frame_bytes);
			log_debug("connection %" PRIu64 ": %s", c->cid, err);
			Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
			Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
			st.has_code = 1;
			st.code = MFMA__V1__CODE__MALFORMED;
			st.message = err;
			resp.status = &st;
			STATS_ADD(d->stats.requests[STATS_OTHER][STATS_MALFORMED], 1);
			uv_read_stop(&c->h.stream);
			send_response(c, &resp, true);
			break;
		}
		if (len >= DECODE_OFFLOAD_BYTES && decode_offload(c, payload, len, now_ns()))
			break;
		handle_frame(c, payload, len);
	}
	if (!c->closed && c->paused && c->reading) {
		/* Write backpressure: the client is not reading its answers, so
		 * stop taking requests from it until they drain. */
		uv_read_stop(&c->h.stream);
		c->reading = false;
	}
	conn_unref(c);
}

static void on_connection(uv_stream_t *server, int status)
{
	struct listener *l = server->data;
	struct daemon *d = l->d;
	if (status < 0) {
		log_warn("%s: accept failed: %s", l->what, uv_strerror(status));
		return;
	}
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		log_err("out of memory accepting a connection");
		return;
	}
	c->d = d;
	c->refs = 1;
	c->cid = ++d->next_conn_id;
	frame_reader_init(&c->rd, d->cfg.max_frame_bytes);
	int rc = server->type == UV_NAMED_PIPE ? uv_pipe_init(d->loop, &c->h.pipe, 0)
					       : uv_tcp_init(d->loop, &c->h.tcp);
	if (rc == 0)
		rc = uv_accept(server, &c->h.stream);
	c->h.handle.data = c;
	c->next = d->conns;
	if (d->conns)
		d->conns->prev = c;
	d->conns = c;
	STATS_ADD(d->stats.connections_open, 1);
	STATS_ADD(d->stats.connections_total, 1);
	if (rc < 0) {
		log_warn("%s: accept failed: %s", l->what, uv_strerror(rc));
		conn_close(c);
		return;
	}
	if (STATS_GET(d->stats.connections_open) > d->cfg.max_connections) {
		log_warn("%s: refusing a connection: %u open (limits.max_connections)", l->what,
			 d->cfg.max_connections);
		char err[160];
		snprintf(err, sizeof(err), "too many connections (limits.max_connections = %u)",
			 d->cfg.max_connections);
		Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
		Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
		st.has_code = 1;
		st.code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
		st.message = err;
		resp.status = &st;
		send_response(c, &resp, true);
		return;
	}
	if (server->type == UV_TCP)
		uv_tcp_nodelay(&c->h.tcp, 1);
	if (uv_read_start(&c->h.stream, on_alloc, on_read) == 0)
		c->reading = true;
}

/* ---- listeners ---- */

static int listen_unix(struct daemon *d, const char *path, char *err, size_t errlen)
{
	struct listener *l = &d->lst[d->nlst];
	memset(l, 0, sizeof(*l));
	l->d = d;
	snprintf(l->what, sizeof(l->what), "unix:%s", path);
	snprintf(l->path, sizeof(l->path), "%s", path);

	/* A socket file left by a crashed daemon is removed; one that still
	 * answers belongs to a live daemon, which we must not steal from. */
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "%s exists and is not a socket", path);
			return -EEXIST;
		}
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(fd);
			snprintf(err, errlen, "%s is in use by another running daemon", path);
			return -EADDRINUSE;
		}
		if (fd >= 0)
			close(fd);
		unlink(path);
	}
	/* /run/mfmad for root outside systemd (which makes it as RuntimeDirectory). */
	char dir[108];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
			snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
			return -errno;
		}
	}
	int rc = uv_pipe_init(d->loop, &l->h.pipe, 0);
	if (rc == 0) {
		l->h.handle.data = l;
		d->nlst++;
		rc = uv_pipe_bind(&l->h.pipe, path);
	}
	if (rc == 0)
		rc = chmod(path, (mode_t)d->cfg.unix_mode) < 0 ? -errno : 0;
	if (rc == 0)
		rc = uv_listen(&l->h.stream, 128, on_connection);
	if (rc < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", path, uv_strerror(rc));
		return rc;
	}
	log_info("listening on unix:%s", path);
	return 0;
}

static int is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return 0;
}

static int listen_tcp(struct daemon *d, char *err, size_t errlen)
{
	struct listener *l = &d->lst[d->nlst];
	memset(l, 0, sizeof(*l));
	l->d = d;
	struct sockaddr_storage ss;
	const char *addr = d->cfg.tcp_address;
	int rc = strchr(addr, ':') ? uv_ip6_addr(addr, d->cfg.tcp_port, (struct sockaddr_in6 *)&ss)
				   : uv_ip4_addr(addr, d->cfg.tcp_port, (struct sockaddr_in *)&ss);
	if (rc < 0) {
		snprintf(err, errlen, "listen.tcp_address = \"%s\" is not an IP address", addr);
		return -EINVAL;
	}
	if (!is_loopback((struct sockaddr *)&ss) && !d->cfg.tcp_allow_remote) {
		snprintf(err, errlen,
			 "listen.tcp_address = \"%s\" is not a loopback address; the protocol has no "
			 "authentication, so set listen.tcp_allow_remote = true to mean it",
			 addr);
		return -EPERM;
	}
	snprintf(l->what, sizeof(l->what), strchr(addr, ':') ? "tcp:[%s]:%d" : "tcp:%s:%d", addr,
		 d->cfg.tcp_port);
	rc = uv_tcp_init(d->loop, &l->h.tcp);
	if (rc == 0) {
		l->h.handle.data = l;
		d->nlst++;
		rc = uv_tcp_bind(&l->h.tcp, (struct sockaddr *)&ss, 0);
	}
	if (rc == 0)
		rc = uv_listen(&l->h.stream, 128, on_connection);
	if (rc < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", l->what, uv_strerror(rc));
		return rc;
	}
	log_info("listening on %s", l->what);
	return 0;
}

/* Sockets passed by systemd (mfmad.socket).  They are the manager's
 * duplicates: we never shutdown(2) or unlink them. */
static int listen_activated(struct daemon *d, char *err, size_t errlen)
{
#if MFMAD_HAVE_SYSTEMD
	int n = sd_listen_fds(1);
	if (n <= 0)
		return n;
	for (int i = 0; i < n && d->nlst < (int)(sizeof(d->lst) / sizeof(d->lst[0])); i++) {
		int fd = SD_LISTEN_FDS_START + i;
		struct listener *l = &d->lst[d->nlst];
		memset(l, 0, sizeof(*l));
		l->d = d;
		l->activated = true;
		int rc;
		if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) > 0) {
			snprintf(l->what, sizeof(l->what), "activated unix socket (fd %d)", fd);
			rc = uv_pipe_init(d->loop, &l->h.pipe, 0);
			if (rc == 0) {
				l->h.handle.data = l;
				d->nlst++;
				rc = uv_pipe_open(&l->h.pipe, fd);
			}
		} else if (sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 1) > 0) {
			snprintf(l->what, sizeof(l->what), "activated tcp socket (fd %d)", fd);
			rc = uv_tcp_init(d->loop, &l->h.tcp);
			if (rc == 0) {
				l->h.handle.data = l;
				d->nlst++;
				rc = uv_tcp_open(&l->h.tcp, fd);
			}
		} else {
			snprintf(err, errlen, "socket-activation fd %d is not a listening stream socket", fd);
			return -EINVAL;
		}
		if (rc == 0)
			rc = uv_listen(&l->h.stream, 128, on_connection);
		if (rc < 0) {
			snprintf(err, errlen, "%s: %s", l->what, uv_strerror(rc));
			return rc;
		}
		log_info("listening on %s", l->what);
	}
	return n;
#else
	(void)d;
	(void)err;
	(void)errlen;
	return 0;
#endif
}

int server_listen(struct daemon *d, char *err, size_t errlen)
{
	int n = listen_activated(d, err, errlen);
	if (n < 0)
		return n;
	if (n == 0) {
		char path[108];
		if (d->cfg.unix_path[0]) {
			snprintf(path, sizeof(path), "%s", d->cfg.unix_path);
		} else if (endpoint_default_path(path, sizeof(path)) < 0) {
			snprintf(err, errlen, "the default socket path is too long; set listen.unix");
			return -ENAMETOOLONG;
		}
		int rc = listen_unix(d, path, err, errlen);
		if (rc < 0)
			return rc;
	}
	if (d->cfg.tcp_enabled) {
		int rc = listen_tcp(d, err, errlen);
		if (rc < 0)
			return rc;
	}
	return 0;
}

void server_close_listeners(struct daemon *d)
{
	for (int i = 0; i < d->nlst; i++) {
		struct listener *l = &d->lst[i];
		if (uv_is_closing(&l->h.handle))
			continue;
		uv_close(&l->h.handle, NULL);
		if (!l->activated && l->path[0])
			unlink(l->path);
	}
}

void server_close_all(struct daemon *d)
{
	for (struct conn *c = d->conns; c; c = c->next)
		conn_close(c);
}

/* Called whenever something finishes: resumes paused readers and, when
 * shutting down with nothing left in flight, ends the loop. */
void server_check_stopped(struct daemon *d)
{
	if (!d->stopping || d->inflight > 0)
		return;
	/* Everything is answered: let the writes flush, then close. */
	for (struct conn *c = d->conns; c; c = c->next) {
		if (c->closed)
			continue;
		/* Once the drain window after the grace period is over, a
		 * client that does not read its answers no longer holds the
		 * daemon up. */
		if (c->write_pending == 0 || d->drain_expired)
			conn_close(c);
	}
	if (!d->conns)
		uv_stop(d->loop);
}

void server_set_frame_limit(struct daemon *d, uint64_t bytes)
{
	for (struct conn *c = d->conns; c; c = c->next)
		c->rd.max_frame = bytes;
}
