#include "conn.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "endpoint.h"
#include "frame.h"
#include "frame_arena.h"
#include "log.h"
#include "mfma_clock.h"
#include "read_arena.h"
#include "readers.h"
#include "tls.h"

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
	bool paused;      /* not read: over its share of unsent answers */
	bool starved;     /* not read: its next read buffer is over a memory cap */
	bool reading;
	bool suspended;   /* a frame is being decoded off the loop, or read there */
	bool in_reader;   /* a reader thread owns the socket's reading and rd */
	bool gave_back;   /* the frame being read came back from its reader: the loop ends it */
	bool broken;      /* an oversized frame or a refused peer: never read again */
	bool need_token;  /* the first frame must carry the listener's token */
	bool tls_fed;     /* TLS: the first bytes have been looked at */
	struct tls_session *tls; /* NULL: plaintext */
	size_t tls_counted; /* what the TLS session holds, as counted in buffered_bytes */
	const struct conn_policy *pol;
	uint32_t inflight;
	size_t unsent;    /* answers queued, at their real cost */
	size_t rd_counted; /* the reader's capacity, as counted in buffered_bytes */
	size_t taken;     /* a read buffer handed to an off-loop decode */
	size_t last_frame; /* the last frame's size, header included, for the next read */
	uint64_t cid;
	uint64_t active_ns;  /* the last frame, or the accept */
	uint64_t frame_ns;   /* since when a started frame waits for its bytes; 0: none */
	uint64_t write_ns;   /* the last write completed, or the first queued */
	bool ipc;         /* a Unix socket: descriptors may come with frames */
	bool has_uid;     /* a Unix peer whose credentials were read: uid */
	uint32_t uid;
	bool has_addr;    /* a TCP peer whose address was read: addr */
	struct peer_addr addr;
	int fds[CONN_MAX_FDS]; /* received and not yet claimed (conn_take_fd), oldest first */
	unsigned nfds;
	struct region *regions; /* regions.c's, for this connection */
	/* The socket's write side, shared with the device workers'
	 * conn_send_direct: under wmu, the writes libuv has not finished
	 * (wqueued), whether it may still be written (not wclosed), and the
	 * tail a direct send left (rest, from rest_off), which goes out
	 * before anything the loop queues. */
	pthread_mutex_t wmu;
	_Atomic uint32_t later; /* answers a worker left to the loop, not yet queued */
	_Atomic uint32_t posted; /* answers handed to a post thread, not yet sent or left */
	_Atomic uint32_t early;  /* answers written off the loop, their requests not yet released */
	int fd;           /* -1: no direct sends (TLS, or no descriptor) */
	uint32_t wqueued;
	bool wclosed;
	uint8_t *rest;
	size_t rest_off, rest_len;
	/* The frame a reader thread reads (readers.h), and what its decode
	 * made of it. */
	struct reader_job job;
	void *decoded;
};

struct write_req {
	uv_write_t req;
	struct conn *c;
	size_t len;
	size_t cost;      /* what the answer holds: frame, request, allocator */
	uint8_t *buf;
	bool close_after;
};

/* A read buffer this small is always granted (limits.max_connections of
 * them at most), so a connection over a memory cap can still be answered
 * small requests once it is read again. */
#define READ_CHUNK (64u * 1024)
/* A client that sends large frames one after another: the next read goes
 * into a buffer the size of the last frame, up to this, so that the frame
 * is not read into READ_CHUNK and then copied into a larger buffer once
 * its header is known (on the loop, a quarter of its time at 128 KiB
 * frames). */
#define READ_HINT_MAX (4u << 20)

static void update_reading(struct conn *c);

/* How often the timer looks at every connection. */
#define TICK_MS 100

uint64_t conn_held_bytes(const struct daemon *d)
{
	return d->buffered_bytes + d->unsent_bytes + d->inflight_bytes;
}

static void note_held(struct daemon *d)
{
	uint64_t h = conn_held_bytes(d);
	if (h > d->held_peak)
		d->held_peak = h;
}

/* What a read buffer of cap bytes counts in buffered_bytes: what it holds
 * past the READ_CHUNK (and a length) every connection is granted, whose
 * sum limits.max_connections bounds.  Counted whole, the idle buffers of
 * other connections kept a frame near the limit from ever fitting: its
 * connection waited for memory no one would give back. */
static size_t counted_cap(size_t cap)
{
	const size_t granted = FRAME_HEADER_SIZE + READ_CHUNK;
	return cap > granted ? cap - granted : 0;
}

/* Counts the reader's capacity in buffered_bytes after it changed. */
static void count_reader(struct conn *c)
{
	struct daemon *d = c->d;
	size_t counted = counted_cap(c->rd.cap);
	d->buffered_bytes = d->buffered_bytes - c->rd_counted + counted;
	c->rd_counted = counted;
	note_held(d);
}

/* Whether a read buffer may grow by `more` counted bytes now. */
static bool may_buffer(const struct daemon *d, size_t more)
{
	return d->buffered_bytes + more <= d->cfg.max_buffered_bytes &&
	       conn_held_bytes(d) + more <= d->cfg.max_memory_bytes;
}

/* Whether c's read buffer may grow to ncap bytes now. */
static bool may_grow(const struct conn *c, size_t ncap)
{
	size_t now = counted_cap(c->rd.cap), then = counted_cap(ncap);
	return then <= now || may_buffer(c->d, then - now);
}

/* Over its share of answers not yet taken: its own cap, or any unsent
 * answer at all while the daemon is over its memory ceiling. */
static bool over_share(const struct conn *c)
{
	const struct daemon *d = c->d;
	return c->unsent > d->cfg.max_unsent_bytes ||
	       (c->unsent > 0 && conn_held_bytes(d) > d->cfg.max_memory_bytes);
}

static bool under_share(const struct conn *c)
{
	const struct daemon *d = c->d;
	return c->unsent <= d->cfg.max_unsent_bytes / 2 &&
	       (c->unsent == 0 || conn_held_bytes(d) <= d->cfg.max_memory_bytes);
}

static const char *const refusal_name[] = {
	[CONN_REFUSE_LIMIT] = "max_connections",
	[CONN_REFUSE_FD] = "fd limit",
	[CONN_REFUSE_PEER] = "peer",
	[CONN_REFUSE_MEMORY] = "memory",
	[CONN_REFUSE_TLS] = "TLS",
};
_Static_assert(sizeof(((struct daemon *)0)->refused) / sizeof(uint64_t) == CONN_REFUSE_N,
	       "daemon.h's refusal counters have one slot per enum conn_refusal");

void conn_refused(struct daemon *d, enum conn_refusal cause, const char *fmt, ...)
{
	d->refused[cause]++;
	uint64_t now = mfma_clock_ns();
	if (d->refused_logged_ns[cause] && now - d->refused_logged_ns[cause] < 1000000000ull) {
		d->refused_unlogged[cause]++;
		return;
	}
	char msg[320];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (d->refused_unlogged[cause])
		log_warn("%s (%" PRIu64 " more refused for %s in the last second, %" PRIu64
			 " in all)",
			 msg, d->refused_unlogged[cause], refusal_name[cause], d->refused[cause]);
	else
		log_warn("%s", msg);
	d->refused_logged_ns[cause] = now;
	d->refused_unlogged[cause] = 0;
}

/* A client can be closed as fast as it connects (a descriptor sent with
 * a ping: some 15,000 times a second from one process): closes are
 * logged at most this many a second (log_limited). */
#define CONN_CLOSE_LOG_BURST 10

#define log_closed(d, ...)                                                                    \
	log_limited(&(d)->close_log, CONN_CLOSE_LOG_BURST, LOG_LVL_INFO, DAEMON_CLOSE_LOG_WHAT, \
		    __VA_ARGS__)

void conn_ref(struct conn *c)
{
	c->refs++;
}

/* Closes the descriptors nobody claimed. */
static void close_fds(struct conn *c)
{
	while (c->nfds > 0)
		close(c->fds[--c->nfds]);
}

void conn_unref(struct conn *c)
{
	if (--c->refs > 0)
		return;
	close_fds(c);
	c->d->buffered_bytes -= c->rd_counted + c->taken + c->tls_counted;
	tls_session_free(c->tls);
	frame_reader_free(&c->rd);
	frame_arena_free(c->rest);
	pthread_mutex_destroy(&c->wmu);
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

uint32_t conn_inflight_unanswered(const struct conn *c)
{
	uint32_t early = atomic_load(&c->early);
	return c->inflight > early ? c->inflight - early : 0;
}

uint64_t conn_daemon_unanswered(const struct daemon *d)
{
	uint64_t early = atomic_load(&d->answered_early);
	return d->inflight > early ? d->inflight - early : 0;
}

/* Counted before the write, so that a client that has the answer finds
 * its next request admitted; taken back when the write did not happen. */
static void early_add(struct conn *c, int delta)
{
	atomic_fetch_add(&c->early, (uint32_t)delta);
	atomic_fetch_add(&c->d->answered_early, (uint64_t)(int64_t)delta);
}

void conn_early_released(struct conn *c)
{
	if (c)
		early_add(c, -1);
}

uint64_t conn_id(const struct conn *c)
{
	return c->cid;
}

bool conn_peer_uid(const struct conn *c, uint32_t *uid)
{
	*uid = c->uid;
	return c->has_uid;
}

uint32_t conn_count_uid(const struct daemon *d, uint32_t uid)
{
	uint32_t n = 0;
	for (const struct conn *c = d->conns; c; c = c->next)
		n += !c->closed && c->has_uid && c->uid == uid;
	return n;
}

bool conn_peer_addr(const struct conn *c, struct peer_addr *addr)
{
	*addr = c->addr;
	return c->has_addr;
}

uint32_t conn_count_addr(const struct daemon *d, const struct peer_addr *addr)
{
	uint32_t n = 0;
	for (const struct conn *c = d->conns; c; c = c->next)
		n += !c->closed && c->has_addr && peer_addr_equal(&c->addr, addr);
	return n;
}

struct daemon *conn_daemon(const struct conn *c)
{
	return c->d;
}

bool conn_is_closed(const struct conn *c)
{
	return c->closed;
}

bool conn_is_unix(const struct conn *c)
{
	return c->ipc;
}

struct region **conn_regions(struct conn *c)
{
	return &c->regions;
}

int conn_take_fd(struct conn *c)
{
	if (c->nfds == 0)
		return -ENOENT;
	int fd = c->fds[0];
	c->nfds--;
	memmove(c->fds, c->fds + 1, c->nfds * sizeof(c->fds[0]));
	return fd;
}

static void free_handle(uv_handle_t *h)
{
	free(h);
}

/* Moves the descriptors libuv received with the last read into the
 * connection's own queue.  libuv hands a received descriptor out only
 * through uv_accept into a handle, so each goes through a scratch pipe
 * whose descriptor is duplicated before the pipe is closed.  This runs
 * in on_read, while the connection reads: uv_accept re-arms the
 * watcher's POLLIN when its queue empties, which is harmless only then
 * (uv_read_stop would not undo it for a connection that is not reading).
 * libuv's own queue is unbounded; ours holds CONN_MAX_FDS: a client
 * that sends more before they are claimed is in the wrong (-E2BIG).
 * -EMFILE, -ENOMEM: the daemon could not take one (the client's
 * descriptor is lost, so its connection cannot go on either). */
static int take_received_fds(struct conn *c)
{
	int rc = 0;
	while (uv_pipe_pending_count(&c->h.pipe) > 0) {
		uv_pipe_t *tmp = malloc(sizeof(*tmp));
		if (!tmp || uv_pipe_init(c->d->loop, tmp, 0) < 0) {
			free(tmp);
			return -ENOMEM; /* the close below closes libuv's queue */
		}
		int fd = -1, e = EBADF;
		uv_os_fd_t ufd;
		if (uv_accept(&c->h.stream, (uv_stream_t *)tmp) == 0 &&
		    uv_fileno((uv_handle_t *)tmp, &ufd) == 0) {
			fd = fcntl(ufd, F_DUPFD_CLOEXEC, 3);
			e = errno;
		}
		uv_close((uv_handle_t *)tmp, free_handle);
		if (fd < 0 || c->nfds == CONN_MAX_FDS) {
			if (fd >= 0)
				close(fd);
			if (rc == 0)
				rc = fd >= 0 ? -E2BIG : e == EMFILE || e == ENFILE ? -EMFILE : -ENOMEM;
			continue;
		}
		c->fds[c->nfds++] = fd;
	}
	return rc;
}

/* A connection that broke the descriptor rules: it is answered why and
 * closed, and never read again. */
static void fd_violation(struct conn *c, const char *why)
{
	log_closed(c->d, "connection %" PRIu64 " closed: %s", c->cid, why);
	close_fds(c);
	c->broken = true;
	update_reading(c);
	c->ev->on_denied(c, why);
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
	close_fds(c);
	/* No direct send after this: libuv closes the descriptor. */
	pthread_mutex_lock(&c->wmu);
	c->wclosed = true;
	pthread_mutex_unlock(&c->wmu);
	/* Before the handle goes: what the connection owns elsewhere (its
	 * regions) is let go now, while the device workers still run. */
	if (c->ev->on_close)
		c->ev->on_close(c);
	/* A reader still reads from the socket: the handle, and with it the
	 * descriptor, closes once the reader is done (reader_done), which it
	 * is told to be soon. */
	if (c->in_reader)
		readers_cancel(&c->job);
	else
		uv_close(&c->h.handle, on_closed);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* Whether a large frame on c may go to a reader thread now: a plaintext
 * connection past its token, the frame not one a reader gave back, no
 * descriptor waiting (it came with the frame's first bytes, and a frame
 * that carries one is claimed on the loop), and with
 * limits.reader_when_busy, other work going on (another connection's
 * requests in flight, or a frame with a reader).  A lone request keeps
 * the loop's path, which has no hand-off to wait for. */
static bool readers_usable(const struct conn *c)
{
	const struct daemon *d = c->d;
	if (!d->readers || !c->ev->decode_frame || c->tls || c->fd < 0 || c->need_token ||
	    c->gave_back || c->nfds > 0)
		return false;
	return !d->cfg.reader_when_busy || d->inflight > c->inflight ||
	       readers_pending(d->readers) > 0;
}

/* Whether the next frame, not yet begun, is likely to go to a reader: the
 * last one was large enough, and the readers may have it. */
static bool readers_take_next(const struct conn *c)
{
	return c->last_frame >= FRAME_HEADER_SIZE + c->d->cfg.reader_min_bytes &&
	       readers_usable(c);
}

/* Room in the read buffer for the next bytes, where the memory caps allow
 * it: 0, -ENOBUFS (the connection is then starved: the timer reads on once
 * the memory is there) or -ENOMEM. */
static int read_space(struct conn *c, uint8_t **p, size_t *avail)
{
	size_t want = READ_CHUNK;
	if (frame_reader_pending(&c->rd) == 0 && c->last_frame > want &&
	    c->last_frame <= READ_HINT_MAX &&
	    may_grow(c, c->last_frame))
		want = c->last_frame;
	size_t ncap = frame_reader_capacity_for(&c->rd, want);
	if (!may_grow(c, ncap)) {
		c->starved = true;
		return -ENOBUFS;
	}
	if (frame_reader_space(&c->rd, want, p, avail) < 0)
		return -ENOMEM;
	count_reader(c);
	return 0;
}

/* TLS: received bytes land here and go into the session at once; the
 * loop is one thread and libuv calls on_read right after on_alloc. */
static uint8_t tls_inbuf[READ_CHUNK];

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct conn *c = h->data;
	uint8_t *p;
	size_t avail;
	(void)suggested;
	buf->base = NULL;
	buf->len = 0;
	if (c->tls) {
		buf->base = (char *)tls_inbuf;
		buf->len = sizeof(tls_inbuf);
		return;
	}
	/* Failing, on_read gets UV_ENOBUFS and stops reading. */
	if (read_space(c, &p, &avail) < 0)
		return;
	buf->base = (char *)p;
	buf->len = avail > UINT32_MAX ? UINT32_MAX : avail;
	/* A client that sends large frames, while readers take them: the loop
	 * reads no more than the next header, and a reader all the rest, so
	 * the copy of the body out of the socket is off the loop too. */
	size_t have = frame_reader_pending(&c->rd);
	if (have < FRAME_HEADER_SIZE && readers_take_next(c))
		buf->len = FRAME_HEADER_SIZE - have;
}

/* TLS: received bytes the session holds beyond this stop the reading
 * until they have become frames (a client sending on while its last frame
 * decodes, or while it is over its share). */
#define TLS_IN_MAX (2 * READ_CHUNK)

static bool may_read(const struct conn *c)
{
	return !c->closed && !c->suspended && !c->paused && !c->starved && !c->broken &&
	       !(c->tls && tls_session_in_pending(c->tls) > TLS_IN_MAX);
}

/* Starts or stops reading as the connection's state says. */
static void update_reading(struct conn *c)
{
	if (may_read(c) && !c->reading) {
		if (uv_read_start(&c->h.stream, on_alloc, on_read) == 0) {
			c->reading = true;
			/* A started frame's time runs from now: it was not the
			 * client that held it up. */
			if (c->frame_ns)
				c->frame_ns = mfma_clock_ns();
		}
	} else if (!may_read(c) && c->reading) {
		uv_read_stop(&c->h.stream);
		c->reading = false;
	}
}

static void process_frames(struct conn *c);
static void tls_pull(struct conn *c);
static void reader_hand_off(struct conn *c);

/* Reading resumes when what stopped it has gone: frames already buffered
 * are handed over first. */
static void resume(struct conn *c)
{
	if (c->closed || c->suspended || c->broken)
		return;
	if (c->paused && under_share(c))
		c->paused = false;
	if (!c->paused && c->tls)
		tls_pull(c);
	else if (!c->paused)
		process_frames(c);
	update_reading(c);
}

static void on_write(uv_write_t *req, int status)
{
	struct write_req *w = (struct write_req *)req;
	struct conn *c = w->c;
	struct daemon *d = c->d;
	pthread_mutex_lock(&c->wmu);
	c->wqueued--;
	pthread_mutex_unlock(&c->wmu);
	c->unsent -= w->cost;
	d->unsent_bytes -= w->cost;
	c->write_ns = mfma_clock_ns();
	frame_arena_free(w->buf);
	if (status < 0 && status != UV_ECANCELED)
		log_debug("connection %" PRIu64 ": write failed: %s", c->cid, uv_strerror(status));
	if (w->close_after || status < 0)
		conn_close(c);
	else if (c->paused)
		resume(c);
	else if (d->stopping && c->unsent == 0 && d->inflight == 0)
		conn_close(c);
	free(w);
	conn_unref(c);
}

static uint8_t *tls_seal(struct conn *c, uint8_t *plain, size_t *len);

/* Queues len bytes of buf from off for the socket (ciphertext on TLS);
 * under wmu, after what a direct send left. */
static bool queue_locked(struct conn *c, uint8_t *buf, size_t off, size_t len, bool close_after);

/* Queues what a direct send left unsent, then buf (NULL: nothing more). */
static void queue_write(struct conn *c, uint8_t *buf, size_t len, bool close_after)
{
	bool ok = true;
	pthread_mutex_lock(&c->wmu);
	if (c->rest) {
		uint8_t *rest = c->rest;
		c->rest = NULL;
		ok = queue_locked(c, rest, c->rest_off, c->rest_len, false);
	}
	if (buf && ok)
		ok = queue_locked(c, buf, 0, len, close_after);
	else
		frame_arena_free(buf);
	pthread_mutex_unlock(&c->wmu);
	if (!ok)
		conn_close(c);
}

void conn_answer_later(struct conn *c)
{
	atomic_fetch_add(&c->later, 1);
}

void conn_answer_sent(struct conn *c)
{
	if (c)
		atomic_fetch_sub(&c->later, 1);
}

void conn_flush_direct(struct conn *c)
{
	if (c && !c->closed)
		queue_write(c, NULL, 0, false);
}

/* Under wmu: writes frames[0..n) to the socket in one call when nothing
 * is queued ahead of them and no answer was left to the loop; how many
 * are taken (sent, the last of them perhaps in part: its tail is kept
 * for the loop), in order.  The caller sends the others with conn_send. */
static size_t send_locked(struct conn *c, uint8_t **frames, size_t *lens, size_t n)
{
	if (c->fd < 0 || c->wclosed || c->wqueued != 0 || c->rest || atomic_load(&c->later) != 0)
		return 0;
	struct iovec iov[CONN_SEND_MANY];
	n = n < CONN_SEND_MANY ? n : CONN_SEND_MANY;
	for (size_t i = 0; i < n; i++)
		iov[i] = (struct iovec){ .iov_base = frames[i], .iov_len = lens[i] };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = n };
	ssize_t sent = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	/* Nothing written (full, or an error the loop's own write will meet
	 * and report): the loop sends them all. */
	if (sent <= 0)
		return 0;
	size_t left = (size_t)sent, i = 0;
	for (; i < n && left >= lens[i]; i++) {
		left -= lens[i];
		frame_arena_free(frames[i]);
	}
	if (i < n && left > 0) {
		/* The socket is full: the loop sends this frame's tail first. */
		c->rest = frames[i];
		c->rest_off = left;
		c->rest_len = lens[i] - left;
		i++;
	}
	return i;
}

bool conn_send_direct(struct conn *c, uint8_t *frame, size_t len)
{
	if (!c || c->fd < 0)
		return false;
	pthread_mutex_lock(&c->wmu);
	early_add(c, 1);
	/* An answer still with a post thread goes first. */
	bool taken = atomic_load(&c->posted) == 0 && send_locked(c, &frame, &len, 1) == 1;
	if (!taken)
		early_add(c, -1);
	pthread_mutex_unlock(&c->wmu);
	return taken;
}

void conn_answer_posted(struct conn *c)
{
	atomic_fetch_add(&c->posted, 1);
}

size_t conn_send_posted(struct conn *c, uint8_t **frames, size_t *lens, size_t n)
{
	pthread_mutex_lock(&c->wmu);
	early_add(c, (int)n);
	size_t taken = send_locked(c, frames, lens, n);
	/* Left to the loop: counted there before it stops counting here, so
	 * that no direct send finds both counts at zero in between. */
	if (taken < n) {
		early_add(c, -(int)(n - taken));
		atomic_fetch_add(&c->later, (uint32_t)(n - taken));
	}
	atomic_fetch_sub(&c->posted, (uint32_t)n);
	pthread_mutex_unlock(&c->wmu);
	return taken;
}

void conn_posted_later(struct conn *c)
{
	pthread_mutex_lock(&c->wmu);
	atomic_fetch_add(&c->later, 1);
	atomic_fetch_sub(&c->posted, 1);
	pthread_mutex_unlock(&c->wmu);
}

/* false: the connection must close (out of memory, or libuv refused the
 * write); the caller closes it once it has let go of wmu. */
static bool queue_locked(struct conn *c, uint8_t *buf, size_t off, size_t len, bool close_after)
{
	struct write_req *w = calloc(1, sizeof(*w));
	if (!w) {
		frame_arena_free(buf);
		log_err("connection %" PRIu64 ": out of memory sending a response; closing", c->cid);
		return false;
	}
	w->c = c;
	w->buf = buf;
	w->len = len;
	/* The real cost of a queued answer: a ping's 10-byte frame holds
	 * some 300 bytes with its request and the allocator's headers (a
	 * frame in a device's arena, its block there). */
	w->cost = frame_arena_size(buf) + malloc_usable_size(w) + 2 * sizeof(size_t);
	w->close_after = close_after;
	uv_buf_t b = uv_buf_init((char *)buf + off, (unsigned)w->len);
	if (uv_write(&w->req, &c->h.stream, &b, 1, on_write) < 0) {
		frame_arena_free(buf);
		free(w);
		return false;
	}
	c->wqueued++;
	conn_ref(c);
	if (c->unsent == 0)
		c->write_ns = mfma_clock_ns();
	c->unsent += w->cost;
	c->d->unsent_bytes += w->cost;
	note_held(c->d);
	if (over_share(c))
		c->paused = true; /* process_frames stops; on_write or the timer resume */
	return true;
}

void conn_send(struct conn *c, uint8_t *buf, size_t len, bool close_after)
{
	if (!c || c->closed) {
		frame_arena_free(buf);
		return;
	}
	if (c->tls && !(buf = tls_seal(c, buf, &len)))
		return;
	queue_write(c, buf, len, close_after);
}


static void deny(struct conn *c, enum conn_refusal cause, const char *why)
{
	conn_refused(c->d, cause, "connection %" PRIu64 " refused: %s", c->cid, why);
	c->broken = true;
	update_reading(c);
	c->ev->on_denied(c, why);
}

/* Whether payload is the token frame with the listener's token.  The
 * comparison takes the same time wherever the first difference is. */
static bool token_ok(const struct conn_policy *pol, const uint8_t *payload, size_t len)
{
	if (len < FRAME_TOKEN_MAGIC_LEN || memcmp(payload, FRAME_TOKEN_MAGIC, FRAME_TOKEN_MAGIC_LEN) != 0)
		return false;
	payload += FRAME_TOKEN_MAGIC_LEN;
	len -= FRAME_TOKEN_MAGIC_LEN;
	volatile uint8_t diff = len != pol->token_len;
	for (size_t i = 0; i < pol->token_len; i++)
		diff |= pol->token[i] ^ (len ? payload[i % len] : 0);
	return diff == 0;
}

/* The Unix peer's credentials against listen.unix_users/unix_group; root
 * and the daemon's own user always pass. */
static bool peer_ok(const struct conn *c, char *why, size_t whylen)
{
	const struct conn_policy *pol = c->pol;
	uv_os_fd_t fd;
	struct ucred cr;
	socklen_t l = sizeof(cr);
	if (uv_fileno(&c->h.handle, &fd) < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0) {
		snprintf(why, whylen, "the peer's credentials cannot be read");
		return false;
	}
	if (cr.uid == 0 || cr.uid == geteuid())
		return true;
	for (size_t i = 0; i < pol->nuids; i++)
		if (pol->uids[i] == cr.uid)
			return true;
	if (pol->has_gid) {
		if (cr.gid == pol->gid)
			return true;
		gid_t groups[256];
		socklen_t gl = sizeof(groups);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &gl) == 0)
			for (size_t i = 0; i < gl / sizeof(gid_t); i++)
				if (groups[i] == pol->gid)
					return true;
	}
	snprintf(why, whylen,
		 "uid %u (pid %d) is not allowed on this socket (listen.unix_users, listen.unix_group)",
		 (unsigned)cr.uid, (int)cr.pid);
	return false;
}

/* Hands every whole frame buffered on the connection over, in order,
 * until one is kept for an off-loop decode or the client is over its
 * share of unsent answers. */
static void process_frames(struct conn *c)
{
	conn_ref(c); /* handling a frame may close it */
	bool took = false;
	while (!c->suspended && !c->closed && !c->paused) {
		const uint8_t *payload;
		size_t len;
		int rc = frame_reader_next(&c->rd, &payload, &len);
		if (rc == 0)
			break;
		if (rc < 0 && c->need_token) {
			deny(c, CONN_REFUSE_PEER,
			     "this listener takes a token first (listen.token_file), and the first "
			     "frame was too long to carry it");
			break;
		}
		if (rc < 0) {
			c->broken = true;
			update_reading(c);
			c->ev->on_oversize(c, len);
			break;
		}
		took = true;
		c->gave_back = false;
		c->last_frame = FRAME_HEADER_SIZE + len;
		c->active_ns = mfma_clock_ns();
		if (c->need_token) {
			if (!token_ok(c->pol, payload, len)) {
				deny(c, CONN_REFUSE_PEER,
				     "this listener takes a token first (listen.token_file), and the "
				     "first frame did not carry it");
				break;
			}
			c->need_token = false;
			c->rd.max_frame = config_read_frame_limit(&c->d->cfg, NULL);
			continue;
		}
		c->ev->on_frame(c, payload, len);
	}
	if (frame_reader_pending(&c->rd) == 0) {
		c->frame_ns = 0;
		if (!c->suspended) {
			frame_reader_shrink(&c->rd, FRAME_HEADER_SIZE + READ_CHUNK);
			count_reader(c);
		}
	} else if (took || !c->frame_ns) {
		c->frame_ns = mfma_clock_ns();
	}
	reader_hand_off(c);
	update_reading(c);
	conn_unref(c);
}

/* ---- large frames read off the loop (readers.h).  While a reader holds
 * the connection's frame, the loop reads nothing from it and leaves rd
 * alone (suspended); the reader reads into rd's buffer, and decodes the
 * frame there once it is whole (reader_run); the loop takes it back in
 * reader_done. ---- */

/* Reader thread: the job's bytes are in, and end the frame. */
static void reader_run(struct reader_job *j)
{
	struct conn *c = (struct conn *)((char *)j - offsetof(struct conn, job));
	const uint8_t *payload;
	size_t len;
	frame_reader_commit(&c->rd, j->got);
	c->decoded = NULL;
	/* Whole by construction: the job read what the frame lacked. */
	if (frame_reader_next(&c->rd, &payload, &len) != 1)
		return;
	c->last_frame = FRAME_HEADER_SIZE + len;
	size_t cap = c->rd.cap;
	uint8_t *base = frame_reader_take(&c->rd);
	if (base)
		c->decoded = c->ev->decode_frame(payload, len, base, cap);
}

/* Why a reader gave a frame back, on the loop: the client stalled (the
 * loop reads the rest), went away, or sent a descriptor with it. */
static void reader_failed(struct conn *c, int status)
{
	const struct reader_job *j = &c->job;
	size_t want = FRAME_HEADER_SIZE + frame_header_get(c->rd.buf + c->rd.start);
	switch (status) {
	case -EAGAIN:
		log_debug("connection %" PRIu64 ": its %zu-byte frame lacked bytes for %d ms on a "
			  "reader thread; the loop reads the rest (%zu bytes in)",
			  c->cid, want, READERS_WAIT_MS, frame_reader_pending(&c->rd));
		c->gave_back = true;
		c->frame_ns = mfma_clock_ns();
		break;
	case -EPIPE:
		log_closed(c->d, "connection %" PRIu64 " closed: the client went away %zu bytes "
			   "into a %zu-byte frame", c->cid, frame_reader_pending(&c->rd), want);
		conn_close(c);
		break;
	case -EPROTO:
		fd_violation(c, "a file descriptor came with the body of a large frame");
		break;
	case -ECANCELED:
		conn_close(c); /* the daemon is stopping */
		break;
	default:
		log_debug("connection %" PRIu64 ": reading a %zu-byte frame: %s (%zu of %zu bytes "
			  "read off the loop)", c->cid, want, strerror(-status), j->got, j->need);
		conn_close(c);
		break;
	}
}

/* Loop: the reader is done with the connection's frame. */
static void reader_done(struct reader_job *j)
{
	struct conn *c = (struct conn *)((char *)j - offsetof(struct conn, job));
	struct daemon *d = c->d;
	bool was_closed = c->closed;
	c->in_reader = false;
	c->suspended = false;
	if (!c->need_token)
		c->rd.max_frame = config_read_frame_limit(&d->cfg, NULL); /* a reload may change it */
	if (j->status == 0) {
		STATS_ADD(d->stats.reader_frames, 1);
		c->active_ns = mfma_clock_ns();
		c->frame_ns = 0;
		c->gave_back = false;
		void *decoded = c->decoded;
		c->decoded = NULL;
		if (decoded) {
			c->ev->on_decoded(c, decoded);
		} else if (!was_closed) {
			log_warn("connection %" PRIu64 ": out of memory decoding a frame; closing",
				 c->cid);
			conn_close(c);
		}
		/* The buffer is the request's now: on_decoded counted it where
		 * it keeps it. */
		count_reader(c);
	} else {
		frame_reader_commit(&c->rd, j->got);
		if (!was_closed)
			reader_failed(c, j->status);
	}
	if (was_closed)
		uv_close(&c->h.handle, on_closed);
	else
		resume(c);
	conn_unref(c);
}

/* Hands the rest of the frame being read to a reader thread, when it is
 * large enough and the readers may have it: the read buffer is made
 * ready for all of it (within the memory caps, as a read on the loop
 * would), and the connection reads nothing more until reader_done. */
static void reader_hand_off(struct conn *c)
{
	struct daemon *d = c->d;
	size_t have = frame_reader_pending(&c->rd);
	if (c->closed || c->suspended || c->paused || c->broken || c->starved ||
	    have < FRAME_HEADER_SIZE || !readers_usable(c))
		return;
	size_t flen = frame_header_get(c->rd.buf + c->rd.start);
	if (flen < d->cfg.reader_min_bytes || flen > c->rd.max_frame ||
	    have >= FRAME_HEADER_SIZE + flen)
		return;
	size_t need = FRAME_HEADER_SIZE + flen - have;
	size_t ncap = frame_reader_capacity_for(&c->rd, need);
	if (!may_grow(c, ncap))
		return; /* the loop reads it, and waits for the memory as it must */
	uint8_t *p;
	size_t avail;
	if (frame_reader_space(&c->rd, need, &p, &avail) < 0)
		return;
	count_reader(c);
	c->job = (struct reader_job){ .fd = c->fd, .unix_fds = c->ipc, .dst = p, .need = need,
				      .run = reader_run, .done = reader_done };
	c->suspended = true;
	c->in_reader = true;
	update_reading(c);
	conn_ref(c);
	readers_submit(d->readers, &c->job);
}

/* ---- TLS (listen.tls_cert): the session between the socket and the
 * frames.  Received bytes go into it (tls_received), plaintext comes out
 * into the read buffer under the same caps as a plaintext read
 * (tls_pull), answers are sealed whole before they are queued
 * (tls_seal), so every limit counts ciphertext and the session's own
 * buffers like any other byte a client makes the daemon hold. ---- */

/* Counts what the session holds in buffered_bytes after it changed. */
static void count_tls(struct conn *c)
{
	size_t held = c->tls ? TLS_SESSION_OVERHEAD + tls_session_in_pending(c->tls) : 0;
	c->d->buffered_bytes = c->d->buffered_bytes - c->tls_counted + held;
	c->tls_counted = held;
	note_held(c->d);
}

/* Sends what the session wrote (handshake messages, an alert). */
static void tls_flush(struct conn *c, bool close_after)
{
	size_t n = tls_session_out_pending(c->tls);
	uint8_t *buf = n ? malloc(n) : NULL;
	if (!buf) {
		if (n)
			log_warn("connection %" PRIu64 ": out of memory sending TLS data; closing",
				 c->cid);
		if (n || close_after)
			conn_close(c);
		return;
	}
	queue_write(c, buf, tls_session_out_take(c->tls, buf, n), close_after);
}

/* The session failed or ended: says why (a failed handshake counted and
 * logged at most once a second, with the others), sends the alert that
 * tells the client why, then closes. */
static void tls_failed(struct conn *c, ssize_t rc, const char *why)
{
	c->broken = true;
	if (rc == TLS_CLOSED) {
		log_debug("connection %" PRIu64 ": the client closed its TLS session", c->cid);
	} else if (!tls_session_ready(c->tls)) {
		STATS_ADD(c->d->stats.tls_handshakes_failed, 1);
		conn_refused(c->d, CONN_REFUSE_TLS, "connection %" PRIu64 ": TLS handshake failed: %s",
			     c->cid, why);
	} else {
		log_closed(c->d, "connection %" PRIu64 ": TLS error: %s; closing", c->cid, why);
	}
	tls_flush(c, true);
}

static void tls_pull(struct conn *c)
{
	char why[256] = "";
	conn_ref(c); /* handling a frame may close it */
	bool was_ready = tls_session_ready(c->tls);
	process_frames(c); /* what is already plaintext goes first */
	while (!c->closed && !c->suspended && !c->paused && !c->broken && !c->starved) {
		uint8_t *p;
		size_t avail;
		int rc = read_space(c, &p, &avail);
		if (rc == -ENOBUFS)
			break;
		if (rc < 0) {
			log_warn("connection %" PRIu64 ": out of memory for its read buffer; closing",
				 c->cid);
			conn_close(c);
			break;
		}
		ssize_t n = tls_session_read(c->tls, p, avail, why, sizeof(why));
		if (n < 0)
			tls_failed(c, n, why);
		if (n <= 0)
			break;
		frame_reader_commit(&c->rd, (size_t)n);
		process_frames(c);
	}
	if (c->tls && !was_ready && tls_session_ready(c->tls)) {
		STATS_ADD(c->d->stats.tls_handshakes_ok, 1);
		if (log_get_level() >= LOG_LVL_DEBUG) {
			tls_session_describe(c->tls, why, sizeof(why));
			log_debug("connection %" PRIu64 ": TLS: %s", c->cid, why);
		}
	}
	if (!c->closed && !c->broken)
		tls_flush(c, false);
	count_tls(c);
	update_reading(c);
	conn_unref(c);
}

static void tls_received(struct conn *c, const uint8_t *buf, size_t n)
{
	if (n == 0)
		return;
	if (!c->tls_fed) {
		c->tls_fed = true;
		if (!tls_looks_like_handshake(buf, n)) {
			/* A plaintext client: answer in plaintext, which is what
			 * it reads, and say what it should have dialled. */
			STATS_ADD(c->d->stats.tls_handshakes_failed, 1);
			tls_session_free(c->tls);
			c->tls = NULL;
			count_tls(c);
			deny(c, CONN_REFUSE_TLS,
			     "this listener speaks TLS (listen.tls_cert) and the client sent "
			     "plaintext: connect with tls:HOST:PORT");
			return;
		}
	}
	if (tls_session_feed(c->tls, buf, n) < 0) {
		log_warn("connection %" PRIu64 ": out of memory for TLS input; closing", c->cid);
		conn_close(c);
		return;
	}
	count_tls(c);
	tls_pull(c);
}

/* Plaintext bytes sealed per call: the output grows by at most this much
 * plus records' overhead before it is taken out of the session. */
#define SEAL_CHUNK (256u * 1024)

/* Seals a whole answer: returns the ciphertext (taking plain) with its
 * length in *len, or NULL when the connection was closed instead. */
static uint8_t *tls_seal(struct conn *c, uint8_t *plain, size_t *len)
{
	char why[256] = "the session wrote more than its bound";
	if (!tls_session_ready(c->tls)) {
		/* An answer before the handshake ended (a refusal at accept):
		 * TLS has no way to carry it, so the client sees a close. */
		log_debug("connection %" PRIu64 ": answer before the TLS handshake ended; closing",
			  c->cid);
		frame_arena_free(plain);
		conn_close(c);
		return NULL;
	}
	size_t have = tls_session_out_pending(c->tls);
	size_t cap = have + tls_sealed_bound(*len);
	uint8_t *out = malloc(cap);
	if (!out)
		log_warn("connection %" PRIu64 ": out of memory sealing a %zu-byte answer; closing",
			 c->cid, *len);
	size_t got = out ? tls_session_out_take(c->tls, out, have) : 0;
	for (size_t off = 0; out && off < *len;) {
		size_t chunk = *len - off < SEAL_CHUNK ? *len - off : SEAL_CHUNK;
		if (tls_session_write(c->tls, plain + off, chunk, why, sizeof(why)) < 0 ||
		    tls_session_out_pending(c->tls) > cap - got) {
			log_err("connection %" PRIu64 ": cannot seal a %zu-byte answer: %s", c->cid,
				*len, why);
			free(out);
			out = NULL;
			break;
		}
		got += tls_session_out_take(c->tls, out + got, cap - got);
		off += chunk;
	}
	frame_arena_free(plain);
	if (!out) {
		conn_close(c);
		return NULL;
	}
	*len = got;
	return out;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct conn *c = s->data;
	if (nread == UV_ENOBUFS && c->starved) {
		log_debug("connection %" PRIu64 ": not read until memory is available "
			  "(limits.max_buffered_mb, limits.max_memory_mb)", c->cid);
		update_reading(c);
		return;
	}
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
	if (c->tls) {
		tls_received(c, (const uint8_t *)buf->base, (size_t)nread);
		return;
	}
	frame_reader_commit(&c->rd, (size_t)nread);
	int fdrc = c->ipc ? take_received_fds(c) : 0;
	if (fdrc < 0) {
		char why[160];
		if (fdrc == -E2BIG)
			snprintf(why, sizeof(why),
				 "more than %d file descriptors were sent before register_region "
				 "frames claimed them", CONN_MAX_FDS);
		else
			snprintf(why, sizeof(why),
				 "a file descriptor sent with a frame could not be received: %s",
				 fdrc == -EMFILE ? "the daemon is out of file descriptors (LimitNOFILE=)"
						 : "out of memory");
		fd_violation(c, why);
		return;
	}
	if (!c->suspended) {
		process_frames(c);
		/* A descriptor comes with the bytes of the frame it belongs to,
		 * and the kernel ends a read with the message that carried it:
		 * once every received byte is a handled frame, one still
		 * unclaimed came with something else. */
		if (c->nfds > 0 && !c->closed && !c->suspended && !c->broken &&
		    frame_reader_pending(&c->rd) == 0)
			fd_violation(c, "a file descriptor came with a frame that is not "
					"register_region");
	} else if (frame_reader_pending(&c->rd) > config_read_frame_limit(&c->d->cfg, NULL)) {
		/* The client sends on while its last frame decodes: hold it to
		 * one frame's worth until the decode is done. */
		c->paused = true;
		update_reading(c);
	}
}

uint8_t *conn_frames_suspend(struct conn *c, size_t *cap)
{
	*cap = c->rd.cap;
	uint8_t *base = frame_reader_take(&c->rd);
	if (!base)
		return NULL;
	/* The taken buffer stays counted, whole (it is no longer the
	 * connection's granted one), until the decode is done. */
	c->suspended = true;
	c->d->buffered_bytes += *cap - c->rd_counted;
	c->taken += *cap;
	c->rd_counted = 0;
	count_reader(c);
	return base;
}

uint8_t *conn_frame_take(struct conn *c, const uint8_t **payload, size_t len, size_t *cap)
{
	/* The bytes after the frame move to a fresh buffer: usually at most
	 * one read's worth (the reader sizes its buffer to the frame it
	 * reads); more means several frames came in one read, and moving
	 * them again for each would cost more than the copy it saves.  The
	 * taken buffer is cut at the frame's end, so a small frame read
	 * into a 64 KiB buffer does not keep (and count) all of it. */
	if (frame_reader_pending(&c->rd) > READ_CHUNK)
		return NULL;
	uint8_t *base = frame_reader_take_frame(&c->rd, payload, len, cap);
	if (base)
		count_reader(c); /* from now on the caller counts it */
	return base;
}

void conn_frames_resume(struct conn *c)
{
	c->d->buffered_bytes -= c->taken;
	c->taken = 0;
	c->suspended = false;
	if (c->closed)
		return;
	resume(c);
}

/* Closes a connection that has run out of time, saying why once. */
static void time_out(struct conn *c, const char *what, const char *key, uint64_t ms)
{
	log_closed(c->d, "connection %" PRIu64 " closed: %s for %" PRIu64 " ms (limits.%s)", c->cid,
		   what, ms, key);
	conn_close(c);
}

static void on_tick(uv_timer_t *t)
{
	struct daemon *d = t->data;
	const struct mfmad_config *cf = &d->cfg;
	uint64_t now = mfma_clock_ns();
	atomic_store_explicit(&d->stats.loop_beat_ns, now, memory_order_relaxed);
	log_limit_flush(&d->close_log, DAEMON_CLOSE_LOG_WHAT);
	log_limit_flush(&d->weight_log, DAEMON_WEIGHT_LOG_WHAT);
	for (struct conn *c = d->conns, *next; c; c = next) {
		next = c->next;
		if (c->closed)
			continue;
		if (cf->read_timeout_ms && c->tls && !tls_session_ready(c->tls) && !c->broken &&
		    now - c->active_ns > cf->read_timeout_ms * 1000000) {
			/* A handshake failure like the others: counted, and
			 * logged at most once a second however many stall. */
			STATS_ADD(d->stats.tls_handshakes_failed, 1);
			conn_refused(d, CONN_REFUSE_TLS,
				     "connection %" PRIu64 " closed: the TLS handshake did not "
				     "complete in %" PRIu64 " ms (limits.read_timeout_ms)",
				     c->cid, cf->read_timeout_ms);
			conn_close(c);
		} else if (cf->read_timeout_ms && c->need_token && !c->broken &&
			   now - c->active_ns > cf->read_timeout_ms * 1000000) {
			/* Unauthenticated, it holds one of limits.max_connections,
			 * which every listener shares: the token comes within
			 * read_timeout_ms of the accept (a TLS handshake
			 * included), not idle_timeout_ms. */
			char why[200];
			snprintf(why, sizeof(why),
				 "this listener takes a token first (listen.token_file), and none came "
				 "within %" PRIu64 " ms (limits.read_timeout_ms)", cf->read_timeout_ms);
			deny(c, CONN_REFUSE_PEER, why);
		} else if (cf->read_timeout_ms && c->reading && c->frame_ns &&
		    now - c->frame_ns > cf->read_timeout_ms * 1000000) {
			time_out(c, "a started frame did not complete", "read_timeout_ms",
				 cf->read_timeout_ms);
		} else if (cf->write_timeout_ms && c->unsent &&
			   now - c->write_ns > cf->write_timeout_ms * 1000000) {
			time_out(c, "its answers were not taken", "write_timeout_ms",
				 cf->write_timeout_ms);
		} else if (cf->idle_timeout_ms && !d->stopping && !c->inflight && !c->unsent &&
			   !c->suspended && frame_reader_pending(&c->rd) == 0 &&
			   now - c->active_ns > cf->idle_timeout_ms * 1000000) {
			time_out(c, "no request", "idle_timeout_ms", cf->idle_timeout_ms);
		} else if (c->starved) {
			size_t ncap = frame_reader_capacity_for(&c->rd, READ_CHUNK);
			if (may_grow(c, ncap)) {
				c->starved = false;
				if (c->tls)
					tls_pull(c);
				update_reading(c);
			}
		} else if (c->paused && !c->suspended) {
			resume(c);
		}
	}
	/* Memory returns to the system after a burst: glibc keeps freed
	 * heap (and raises its mmap threshold after large frees), so RSS
	 * would stay at the burst's peak. */
	uint64_t held = conn_held_bytes(d);
	if (d->held_peak > held + (16u << 20)) {
		malloc_trim(0);
		log_debug("returned memory to the system: %" PRIu64 " MiB held, %" PRIu64
			  " MiB at the peak", held >> 20, d->held_peak >> 20);
		d->held_peak = held;
	}
}

int conn_start(struct daemon *d)
{
	int rc = uv_timer_init(d->loop, &d->conn_timer);
	if (rc < 0)
		return rc;
	d->conn_timer.data = d;
	rc = uv_timer_start(&d->conn_timer, on_tick, TICK_MS, TICK_MS);
	uv_unref((uv_handle_t *)&d->conn_timer);
	return rc;
}

void conn_accept(struct daemon *d, uv_stream_t *server, const struct conn_events *ev,
		 const struct conn_policy *pol, const char *what)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		log_err("%s: out of memory accepting a connection", what);
		return;
	}
	/* Unix connections are IPC pipes so that libuv receives the memfd
	 * of a region (SCM_RIGHTS) instead of dropping it. */
	c->ipc = server->type == UV_NAMED_PIPE;
	int rc = c->ipc ? uv_pipe_init(d->loop, &c->h.pipe, 1) : uv_tcp_init(d->loop, &c->h.tcp);
	if (rc < 0) {
		/* The handle never existed: nothing to close, only to free. */
		log_warn("%s: cannot take a connection: %s", what, uv_strerror(rc));
		free(c);
		return;
	}
	c->d = d;
	c->ev = ev;
	c->refs = 1;
	c->fd = -1;
	pthread_mutex_init(&c->wmu, NULL);
	c->cid = ++d->next_conn_id;
	c->active_ns = mfma_clock_ns();
	c->h.handle.data = c;
	frame_reader_init(&c->rd, config_read_frame_limit(&d->cfg, NULL));
	frame_reader_set_mem(&c->rd, read_arena_mem(d));
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
	c->pol = pol;
	char why[160];
	if (pol && pol->check_peer && !peer_ok(c, why, sizeof(why))) {
		deny(c, CONN_REFUSE_PEER, why);
		return;
	}
	if (pol && pol->tls) {
		if (tls_session_new(pol->tls, NULL, &c->tls) < 0) {
			log_warn("%s: out of memory for a TLS session", what);
			conn_close(c);
			return;
		}
		count_tls(c);
	}
	uv_os_fd_t fd;
	if (uv_fileno(&c->h.handle, &fd) == 0) {
		/* Whose it is, for limits.max_connections_per_user, or
		 * where from, for limits.max_connections_per_address. */
		struct ucred cr;
		socklen_t crl = sizeof(cr);
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		if (c->ipc && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) == 0) {
			c->has_uid = true;
			c->uid = (uint32_t)cr.uid;
		} else if (!c->ipc && getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
			c->has_addr = peer_addr_key((const struct sockaddr *)&ss, sl, &c->addr) == 0;
		}
		/* Plaintext answers may go straight from a device worker. */
		if (!c->tls)
			c->fd = fd;
		/* A local client's answer of up to limits.send_buffer_kb goes
		 * out in one write (over TCP the kernel sizes the buffer
		 * itself); failing, the system's default stays, and answers
		 * take more writes. */
		if (c->ipc && d->cfg.send_buffer_bytes &&
		    endpoint_send_buffer(fd, d->cfg.send_buffer_bytes) < 0)
			log_debug("connection %" PRIu64 ": cannot raise its send buffer to %" PRIu64
				  " KiB (limits.send_buffer_kb)", c->cid,
				  d->cfg.send_buffer_bytes >> 10);
	}
	if (pol && pol->token) {
		c->need_token = true;
		c->rd.max_frame = FRAME_TOKEN_MAX;
	}
	if (ev->on_open(c))
		update_reading(c);
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
		if (c->unsent == 0 || d->drain_expired)
			conn_close(c);
	}
	if (!d->conns)
		uv_stop(d->loop);
}

void conn_set_frame_limit(struct daemon *d, uint64_t bytes)
{
	/* A connection whose frame is with a reader takes it back in
	 * reader_done. */
	for (struct conn *c = d->conns; c; c = c->next)
		if (!c->need_token && !c->in_reader)
			c->rd.max_frame = bytes;
}
