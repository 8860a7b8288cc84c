#include "conn.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "log.h"

struct conn {
	union {
		uv_pipe_t pipe;
		uv_tcp_t tcp;
		uv_stream_t stream;
		uv_handle_t handle;
	} h;
	struct daemon *d;
	const struct conn_events *ev;
	struct conn *prev, *next;
	struct frame_reader rd;
	int refs;
	bool closed;      /* handle closing or closed: drop answers */
	bool paused;      /* reading stopped for write backpressure */
	bool reading;
	bool suspended;   /* a frame is being decoded off the loop */
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

/* A client that does not read its answers is not read from either once
 * this much waits to be written to it. */
static const size_t write_high_water = 64u << 20;

void conn_ref(struct conn *c)
{
	c->refs++;
}

void conn_unref(struct conn *c)
{
	if (--c->refs > 0)
		return;
	frame_reader_free(&c->rd);
	free(c);
}

void conn_hold(struct conn *c)
{
	conn_ref(c);
	c->inflight++;
}

void conn_release(struct conn *c)
{
	c->inflight--;
	conn_unref(c);
}

uint32_t conn_inflight(const struct conn *c)
{
	return c->inflight;
}

uint64_t conn_id(const struct conn *c)
{
	return c->cid;
}

struct daemon *conn_daemon(const struct conn *c)
{
	return c->d;
}

bool conn_is_closed(const struct conn *c)
{
	return c->closed;
}

static void on_closed(uv_handle_t *h)
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
	conn_check_drained(d);
}

void conn_close(struct conn *c)
{
	if (c->closed)
		return;
	c->closed = true;
	if (c->inflight)
		log_debug("connection %" PRIu64 " closed with %u request(s) in flight", c->cid,
			  c->inflight);
	uv_close(&c->h.handle, on_closed);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

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

static void start_reading(struct conn *c)
{
	if (!c->closed && !c->reading && uv_read_start(&c->h.stream, on_alloc, on_read) == 0)
		c->reading = true;
}

static void stop_reading(struct conn *c)
{
	if (c->reading) {
		uv_read_stop(&c->h.stream);
		c->reading = false;
	}
}

static void on_write(uv_write_t *req, int status)
{
	struct write_req *w = (struct write_req *)req;
	struct conn *c = w->c;
	c->write_pending -= w->len;
	free(w->buf);
	if (status < 0 && status != UV_ECANCELED)
		log_debug("connection %" PRIu64 ": write failed: %s", c->cid, uv_strerror(status));
	if (w->close_after || status < 0) {
		conn_close(c);
	} else if (c->paused && c->write_pending < write_high_water / 2) {
		c->paused = false;
		if (!c->suspended)
			start_reading(c);
	} else if (c->d->stopping && c->write_pending == 0 && c->d->inflight == 0) {
		conn_close(c);
	}
	free(w);
	conn_unref(c);
}

void conn_send(struct conn *c, uint8_t *buf, size_t len, bool close_after)
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
		c->paused = true; /* process_frames stops reading; on_write resumes */
}

/* Hands every whole frame buffered on the connection over, in order,
 * until one is kept for an off-loop decode. */
static void process_frames(struct conn *c)
{
	conn_ref(c); /* handling a frame may close it */
	while (!c->suspended && !c->closed) {
		const uint8_t *payload;
		size_t len;
		int rc = frame_reader_next(&c->rd, &payload, &len);
		if (rc == 0)
			break;
		if (rc < 0) {
			stop_reading(c);
			c->ev->on_oversize(c, len);
			break;
		}
		c->ev->on_frame(c, payload, len);
	}
	if (c->paused)
		stop_reading(c);
	conn_unref(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct conn *c = s->data;
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
	if (!c->suspended)
		process_frames(c);
	else if (frame_reader_pending(&c->rd) > c->d->cfg.max_frame_bytes)
		/* The client sends on while its last frame decodes: hold it to
		 * one frame's worth until the decode is done. */
		stop_reading(c);
}

uint8_t *conn_frames_suspend(struct conn *c)
{
	uint8_t *base = frame_reader_take(&c->rd);
	if (base)
		c->suspended = true;
	return base;
}

void conn_frames_resume(struct conn *c)
{
	c->suspended = false;
	if (c->closed)
		return;
	process_frames(c);
	if (!c->suspended && !c->paused)
		start_reading(c);
}

void conn_accept(struct daemon *d, uv_stream_t *server, const struct conn_events *ev,
		 const char *what)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		log_err("%s: out of memory accepting a connection", what);
		return;
	}
	int rc = server->type == UV_NAMED_PIPE ? uv_pipe_init(d->loop, &c->h.pipe, 0)
					       : uv_tcp_init(d->loop, &c->h.tcp);
	if (rc < 0) {
		/* The handle never existed: nothing to close, only to free. */
		log_warn("%s: cannot take a connection: %s", what, uv_strerror(rc));
		free(c);
		return;
	}
	c->d = d;
	c->ev = ev;
	c->refs = 1;
	c->cid = ++d->next_conn_id;
	c->h.handle.data = c;
	frame_reader_init(&c->rd, d->cfg.max_frame_bytes);
	c->next = d->conns;
	if (d->conns)
		d->conns->prev = c;
	d->conns = c;
	STATS_ADD(d->stats.connections_open, 1);
	STATS_ADD(d->stats.connections_total, 1);
	rc = uv_accept(server, &c->h.stream);
	if (rc < 0) {
		log_warn("%s: accept failed: %s", what, uv_strerror(rc));
		conn_close(c);
		return;
	}
	if (server->type == UV_TCP)
		uv_tcp_nodelay(&c->h.tcp, 1);
	if (ev->on_open(c))
		start_reading(c);
}

void conn_close_all(struct daemon *d)
{
	for (struct conn *c = d->conns; c; c = c->next)
		conn_close(c);
}

void conn_check_drained(struct daemon *d)
{
	if (!d->stopping || d->inflight > 0)
		return;
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

void conn_set_frame_limit(struct daemon *d, uint64_t bytes)
{
	for (struct conn *c = d->conns; c; c = c->next)
		c->rd.max_frame = bytes;
}
