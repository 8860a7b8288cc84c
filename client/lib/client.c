/* libmfmaclient: the connection, the frame I/O and the table of requests
 * in flight.  The message building and decoding live in requests.c.
 *
 * The socket is non-blocking from the start.  Every wait is a poll() on
 * it: while a frame is being written we also read whatever the daemon
 * sends, so a client that submits faster than it collects answers never
 * deadlocks against a daemon that is blocked writing those answers. */
#include "client_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "d_pool.h"
#include "endpoint.h"
#include "msg_arena.h"
#include "wire_gemm.h"
#include "wire_split.h"

/* Frames are limited by their 32-bit length only: the daemon decides
 * what it is willing to send. */
#define CLIENT_MAX_FRAME UINT32_MAX
#define CLIENT_READ_CHUNK (256u * 1024u)
/* What one look at the socket reads at most before the frames it holds
 * are filed (and the caller's deadline looked at again): it stops sooner,
 * once a whole frame is in.  A daemon that streams without end cannot
 * keep a call past its timeout. */
#define CLIENT_READ_MAX (8u << 20)
/* Frames one look files at most before the caller's deadline is looked at
 * again (read_available): a read of a few MiB of tiny frames from a
 * hostile daemon would otherwise hold the call a second or more past it.
 * What is left is filed by the next looks, before anything more is read. */
#define CLIENT_FILE_MAX 4096u
/* No response frame is refused below this; a longer one is taken when a
 * request in flight can be answered with it (client_response_limit). */
#define CLIENT_RESPONSE_FLOOR ((size_t)64 << 20)
/* An answer at least this large keeps the buffer it was read into
 * (decode_response); smaller ones are unpacked with a copy. */
#define CLIENT_KEEP_MIN_BYTES (1u << 20)
/* A GEMM answer's arena, beside the bytes of a D too small for the pool
 * (decode_response): room for the answer's pieces with D in a region or
 * placed where its request asked (place_d).  An answer small enough takes
 * msg_arena's request size instead, which each thread keeps for reuse. */
#define CLIENT_ANSWER_ARENA_BYTES 1024
/* What a GEMM answer decodes into besides D's bytes (its messages, the
 * variant and device strings): about 500 bytes. */
#define CLIENT_ANSWER_PIECES_BYTES 512
/* From this size of answer frame a D with no place of the caller's goes
 * into a buffer of the client's pool (d_pool.h); a smaller one is decoded
 * into the answer's arena. */
#define CLIENT_POOL_MIN_BYTES 4096
/* Held frames (mfma_cork) past this many bytes are written at once. */
#define CLIENT_HOLD_MAX (256u * 1024u)
/* The kernel send buffer of a Unix-socket connection (the daemon's side
 * has limits.send_buffer_kb for the answers). */
#define CLIENT_SEND_BUFFER (1u << 20)
/* TLS: ciphertext read per recv(), and plaintext sealed per chunk of a
 * frame (so a large frame is never held twice over). */
#define CLIENT_TLS_CHUNK (64u * 1024u)
#define CLIENT_TLS_HANDSHAKE_MS 30000

int client_fail(struct mfma_error *err, int code, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		err->code = code;
		vsnprintf(err->message, sizeof(err->message), fmt, ap);
		va_end(ap);
	}
	return code;
}

void client_ok(struct mfma_error *err)
{
	if (err) {
		err->code = 0;
		err->message[0] = '\0';
	}
}

static const char *const code_names[] = {
	"OK", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "RESOURCE_EXHAUSTED",
	"UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "MALFORMED", "FAILED_PRECONDITION",
};

bool client_code_known(int code)
{
	return code >= 0 && (size_t)code < sizeof(code_names) / sizeof(code_names[0]);
}

const char *mfma_code_name(int code)
{
	return client_code_known(code) ? code_names[code] : "UNKNOWN";
}

const char *mfma_version(void)
{
	return MFMA_CLIENT_VERSION;
}

/* ---- connecting ---- */

/* How long one connect() may take: a host that drops the SYN, or a
 * listener whose queue is full, otherwise holds a blocking connect for
 * minutes (the kernel's retries), whatever the caller's timeout, and a
 * list of endpoints never reaches the next. */
#define CLIENT_CONNECT_MS 3000

/* A reconnection made for a call with a deadline gives each step (the
 * connect, the TLS handshake) at least this long, so that a call at its
 * deadline still reaches a daemon that answers at once. */
#define CLIENT_DIAL_MIN_MS 100

/* How long a step of making a connection may wait: its own bound (own_ms),
 * or less where the caller's deadline (0: none) comes sooner, never below
 * CLIENT_DIAL_MIN_MS. */
static int dial_ms(uint64_t deadline, int own_ms)
{
	if (deadline == 0)
		return own_ms;
	uint64_t now = mfma_clock_ns();
	uint64_t left = deadline > now ? (deadline - now) / 1000000 : 0;
	if (left < CLIENT_DIAL_MIN_MS)
		left = CLIENT_DIAL_MIN_MS;
	return left < (uint64_t)own_ms ? (int)left : own_ms;
}

/* connect() of fd to sa, given dial_ms(deadline, CLIENT_CONNECT_MS): 0,
 * or -1 with errno set (ETIMEDOUT when it did not complete in time; EAGAIN
 * from a Unix listener whose queue is full).  fd is blocking again on
 * return. */
static int connect_bounded(int fd, const struct sockaddr *sa, socklen_t len, uint64_t deadline)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return connect(fd, sa, len);
	int rc = connect(fd, sa, len);
	if (rc < 0 && errno == EINPROGRESS) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		int pr;
		const int ms = dial_ms(deadline, CLIENT_CONNECT_MS);
		while ((pr = poll(&p, 1, ms)) < 0 && errno == EINTR)
			;
		int e = 0;
		socklen_t el = sizeof(e);
		if (pr == 0)
			e = ETIMEDOUT;
		else if (pr < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
			e = errno;
		rc = e ? -1 : 0;
		errno = e;
	}
	int saved = errno;
	(void)fcntl(fd, F_SETFL, fl);
	errno = saved;
	return rc;
}

static int connect_unix(const struct endpoint *ep, uint64_t deadline, int *fdp,
			struct mfma_error *err)
{
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, ep->path, strlen(ep->path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return client_fail(err, -errno, "socket(AF_UNIX): %s", strerror(errno));
	if (connect_bounded(fd, (struct sockaddr *)&sa, sizeof(sa), deadline) < 0) {
		int e = errno;
		close(fd);
		/* The one sentence a user needs: what to do, not only what failed. */
		const char *hint = "";
		if (e == ENOENT || e == ECONNREFUSED)
			hint = " (is mfmad running?)";
		else if (e == EAGAIN)
			hint = " (its queue of connections is full: is mfmad stopped or hung?)";
		else if (e == EACCES || e == EPERM)
			hint = " (the socket is for root and the mfmad group: join it with "
			       "`sudo usermod -aG mfmad $USER`, then log in again)";
		return client_fail(err, -e, "cannot connect to unix:%s: %s%s", ep->path, strerror(e),
				   hint);
	}
	/* A large request goes out in one write where the system allows
	 * (best effort: the default only makes more writes). */
	(void)endpoint_send_buffer(fd, CLIENT_SEND_BUFFER);
	*fdp = fd;
	return 0;
}

static int connect_tcp(const struct endpoint *ep, uint64_t deadline, int *fdp,
		       struct mfma_error *err)
{
	char port[16];
	snprintf(port, sizeof(port), "%d", ep->port);
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int g = getaddrinfo(ep->host, port, &hints, &res);
	if (g != 0)
		return client_fail(err, -EHOSTUNREACH, "cannot resolve tcp host '%s': %s", ep->host,
				   gai_strerror(g));
	int last = ECONNREFUSED;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			last = errno;
			continue;
		}
		if (connect_bounded(fd, ai->ai_addr, ai->ai_addrlen, deadline) == 0) {
			/* Small frames (pings, status) must not wait for Nagle. */
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			freeaddrinfo(res);
			*fdp = fd;
			return 0;
		}
		last = errno;
		close(fd);
	}
	freeaddrinfo(res);
	return client_fail(err, -last, "cannot connect to tcp:%s:%d: %s%s", ep->host, ep->port,
			   strerror(last), last == ECONNREFUSED ? " (is mfmad running?)" : "");
}

/* No endpoint given: the default sockets in order (endpoint.h).  A per-user
 * socket that is absent or dead is passed over for the system one; the
 * error reported is the last socket's, naming the one tried before it. */
static int connect_default(struct endpoint *ep, int *fdp, struct mfma_error *err)
{
	char tried[sizeof(ep->path)] = ""; /* the first candidate that failed */
	int rc = -ENOENT;
	for (unsigned i = 0;; i++) {
		char path[sizeof(ep->path)];
		int prc = endpoint_default_path_at(i, path, sizeof(path));
		if (prc == -ENOENT)
			break;
		if (prc < 0)
			continue; /* too long: a later candidate may still do */
		memset(ep, 0, sizeof(*ep));
		ep->kind = ENDPOINT_UNIX;
		memcpy(ep->path, path, sizeof(path));
		rc = connect_unix(ep, 0, fdp, err);
		if (rc == 0)
			return 0;
		if (rc != -ENOENT && rc != -ECONNREFUSED)
			break;
		if (!tried[0])
			snprintf(tried, sizeof(tried), "%s", path);
	}
	if (rc == -ENOENT && !tried[0])
		return client_fail(err, -ENAMETOOLONG, "the default socket path is too long");
	if (err && tried[0] && strcmp(tried, ep->path) != 0) {
		size_t n = strlen(err->message);
		snprintf(err->message + n, sizeof(err->message) - n, "; also tried unix:%s", tried);
	}
	return rc;
}

/* Closes fd when it fails. */
static int set_nonblock(int fd, struct mfma_error *err)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		int rc = client_fail(err, -errno, "fcntl(O_NONBLOCK): %s", strerror(errno));
		close(fd);
		return rc;
	}
	return 0;
}

/* Sends every byte the session has for the peer, waiting for room
 * until the deadline. */
static int tls_send_out(int fd, struct tls_session *s, uint64_t deadline, const char *name,
			struct mfma_error *err)
{
	uint8_t buf[16384];
	size_t n;
	while ((n = tls_session_out_take(s, buf, sizeof(buf))) > 0) {
		for (size_t off = 0; off < n;) {
			ssize_t w = send(fd, buf + off, n - off, MSG_NOSIGNAL);
			if (w > 0) {
				off += (size_t)w;
				continue;
			}
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
				return client_fail(err, -errno, "TLS handshake with %s: %s", name,
						   strerror(errno));
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };
			uint64_t now = mfma_clock_ns();
			if (now >= deadline || poll(&pfd, 1, (int)((deadline - now) / 1000000 + 1)) == 0)
				return client_fail(err, -ETIMEDOUT, "TLS handshake with %s timed out",
						   name);
		}
	}
	return 0;
}

/* The TLS handshake on a connected non-blocking socket: the daemon's
 * certificate checked against the CAs and the name. */
static int tls_handshake(int fd, struct tls_session *s, const char *name, uint64_t until,
			 struct mfma_error *err)
{
	uint64_t deadline = mfma_clock_ns() + (uint64_t)dial_ms(until, CLIENT_TLS_HANDSHAKE_MS) * 1000000u;
	uint8_t buf[16384];
	char why[256];
	for (;;) {
		int hs = tls_session_handshake(s, why, sizeof(why));
		int rc = tls_send_out(fd, s, deadline, name, err);
		if (hs == 1 || (hs >= 0 && rc < 0))
			return rc;
		if (hs < 0) {
			/* A daemon without TLS on this port answers the
			 * ClientHello with a plaintext frame. */
			bool plain = strstr(why, "wrong version number") || strstr(why, "packet length");
			return client_fail(err, -EPROTO, "TLS handshake with %s failed: %s%s", name, why,
					   plain ? " (does this port speak TLS? tcp: is plaintext)"
						 : "");
		}
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t now = mfma_clock_ns();
		int pr = now >= deadline ? 0 : poll(&pfd, 1, (int)((deadline - now) / 1000000 + 1));
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return client_fail(err, pr == 0 ? -ETIMEDOUT : -errno,
					   "TLS handshake with %s: %s", name,
					   pr == 0 ? "timed out" : strerror(errno));
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (n <= 0)
			return client_fail(err, n == 0 ? -ECONNRESET : -errno,
					   "%s closed the connection during the TLS handshake%s%s", name,
					   n == 0 ? "" : ": ", n == 0 ? "" : strerror(errno));
		if (tls_session_feed(s, buf, (size_t)n) < 0)
			return client_fail(err, -ENOMEM, "out of memory");
	}
}

/* How a connection is made: TLS (NULL ctx: plaintext only), and the
 * deadline of the call that makes it (0: none; each step then has its
 * own bound, CLIENT_CONNECT_MS and CLIENT_TLS_HANDSHAKE_MS). */
struct client_dial {
	struct tls_ctx *ctx;
	const char *name; /* "" = each endpoint's host */
	uint64_t deadline;
};

static int connect_one(const struct endpoint *ep, const struct client_dial *t, int *fdp,
		       struct tls_session **sp, struct mfma_error *err)
{
	const uint64_t until = t ? t->deadline : 0;
	int rc = ep->kind == ENDPOINT_UNIX ? connect_unix(ep, until, fdp, err)
					   : connect_tcp(ep, until, fdp, err);
	if (rc < 0 || (rc = set_nonblock(*fdp, err)) < 0 || !ep->tls)
		return rc;
	char what[300];
	(void)endpoint_format(ep, what, sizeof(what));
	const char *name = t && t->name[0] ? t->name : ep->host;
	rc = !t || !t->ctx ? client_fail(err, -EINVAL, "%s: no TLS settings", what)
	     : tls_session_new(t->ctx, name, sp) < 0
		     ? client_fail(err, -ENOMEM, "%s: cannot make a TLS session for \"%s\"", what, name)
		     : tls_handshake(*fdp, *sp, what, until, err);
	if (rc < 0) {
		tls_session_free(*sp);
		*sp = NULL;
		close(*fdp);
	}
	return rc;
}

/* Tries eps[first], eps[first+1], ... (wrapping) once each; the index
 * that answered goes to *which. */
static int connect_list(const struct endpoint *eps, size_t n, size_t first, size_t *which,
			const struct client_dial *t, int *fdp, struct tls_session **sp,
			struct mfma_error *err)
{
	int rc = -ENOENT;
	for (size_t k = 0; k < n; k++) {
		size_t i = (first + k) % n;
		rc = connect_one(&eps[i], t, fdp, sp, err);
		if (rc == 0) {
			*which = i;
			return 0;
		}
	}
	return rc;
}

/* Whether the arrival a (from the ring) is still p's answer, waiting. */
static bool arrival_waits(const struct client_pending *p, const struct client_arrival *a)
{
	return p && p->resp && p->user && p->seq == a->seq;
}

/* Keeps only the ring's arrivals whose answers still wait, in order: when
 * stale ones outnumber the table (a caller who waits by id, never for
 * MFMA_ANY, leaves every arrival behind). */
static void arrivals_compact(mfma_client *c)
{
	size_t kept = 0;
	const size_t mask = c->arr_cap - 1;
	for (size_t i = 0; i < c->arr_n; i++) {
		struct client_arrival a = c->arr[(c->arr_head + i) & mask];
		if (arrival_waits(client_pending_find(c, a.id), &a))
			c->arr[(c->arr_head + kept++) & mask] = a;
	}
	c->arr_n = kept;
}

/* p's answer has come: its place in the order of arrivals (seq) and, for
 * a submitted request, in the ring mfma_wait(MFMA_ANY) takes from.  Out of
 * memory for the ring, ready searches the table from then on. */
static void arrived(mfma_client *c, struct client_pending *p)
{
	p->seq = ++c->arrivals;
	if (!p->user)
		return;
	if (c->arr_n > 2 * c->npend + 64)
		arrivals_compact(c);
	if (c->arr_n == c->arr_cap) {
		const size_t cap = c->arr_cap ? c->arr_cap * 2 : 64;
		struct client_arrival *na = malloc(cap * sizeof(*na));
		if (!na) {
			c->arr_lost = true;
			return;
		}
		for (size_t i = 0; i < c->arr_n; i++)
			na[i] = c->arr[(c->arr_head + i) & (c->arr_cap - 1)];
		free(c->arr);
		c->arr = na;
		c->arr_cap = cap;
		c->arr_head = 0;
	}
	c->arr[(c->arr_head + c->arr_n++) & (c->arr_cap - 1)] = (struct client_arrival){ p->id, p->seq };
}

/* Answers a request that can no longer be sent, as the daemon would have:
 * the caller of mfma_wait gets it like any other error answer. */
static void answer_locally(mfma_client *c, struct client_pending *p, int code, const char *msg)
{
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
	uint8_t buf[MFMA_ERROR_MAX + 64]; /* the message is shorter than MFMA_ERROR_MAX */
	st.has_code = 1;
	st.code = (Mfma__V1__Code)code;
	st.message = (char *)msg;
	resp.has_id = 1;
	resp.id = p->id;
	resp.status = &st;
	size_t n = mfma__v1__response__pack(&resp, buf);
	p->resp = mfma__v1__response__unpack(NULL, n, buf);
	if (!p->resp)
		return; /* out of memory: it stays unanswered, and is retried */
	p->t_recv_ns = mfma_clock_ns();
	arrived(c, p);
}

/* The requests that wait for a connection past their deadline end here. */
static void expire(mfma_client *c, uint64_t now)
{
	for (size_t i = 0; i < c->npend; i++) {
		struct client_pending *p = &c->pend[i];
		if (p->frame && !p->resp && p->deadline_ns && now >= p->deadline_ns) {
			char msg[MFMA_ERROR_MAX];
			snprintf(msg, sizeof(msg), "no answer within the request's deadline: the "
				 "connection was lost (%.300s) and not re-established in time",
				 c->dead_msg);
			answer_locally(c, p, MFMA__V1__CODE__DEADLINE_EXCEEDED, msg);
		}
	}
}

/* Makes the client's session buffers for a new TLS session (s may be NULL). */
static int client_take_tls(mfma_client *c, struct tls_session *s)
{
	tls_session_free(c->tls);
	c->tls = s;
	c->tls_out_len = c->tls_out_off = 0;
	if (s && !c->tls_in && !(c->tls_in = malloc(CLIENT_TLS_CHUNK)))
		return -ENOMEM;
	return 0;
}

/* One reconnection: the new socket, the token, the resends.  0, or the
 * error (the connection is then dead again, or was never made).  The new
 * connection is made by deadline (0: none) where it can be. */
static int reconnect_once(mfma_client *c, uint64_t deadline, struct mfma_error *err)
{
	size_t which = 0;
	int fd;
	struct tls_session *ts = NULL;
	struct client_dial t = { c->tls_ctx, c->tls_name, deadline };
	int rc = connect_list(c->eps, c->neps, c->cur + 1, &which, &t, &fd, &ts, err);
	if (rc < 0)
		return rc;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = fd;
	if (client_take_tls(c, ts) < 0)
		return client_fail(err, -ENOMEM, "out of memory");
	/* The daemon closed the last connection over something this client
	 * sent (a frame over its limit, a TLS alert), and which request it
	 * was is not known: sending them all again would bring the same
	 * verdict on every new connection.  They end here instead. */
	char verdict[MFMA_ERROR_MAX] = "";
	if (c->verdict)
		snprintf(verdict, sizeof(verdict),
			 "not sent again: %.100s closed the connection over what this client sent "
			 "(%.300s)", c->endpoint, c->dead_msg);
	c->cur = which;
	c->dead = 0;
	c->verdict = false;
	c->dead_msg[0] = c->conn_msg[0] = '\0';
	(void)endpoint_format(&c->eps[which], c->endpoint, sizeof(c->endpoint));
	/* Whatever was half-read belonged to the old stream; of the requests
	 * in flight, those that cannot be resent are lost with it (their
	 * callers have been told), answers already here stay. */
	frame_reader_free(&c->rd);
	frame_reader_init(&c->rd, CLIENT_RESPONSE_FLOOR);
	c->is_unix = c->eps[which].kind == ENDPOINT_UNIX;
	client_regions_lost(c);
	for (size_t i = c->npend; i-- > 0;) {
		struct client_pending *p = &c->pend[i];
		if (!p->resp && p->user && !p->frame)
			/* Submitted, but not to be sent again (its D or B lies in a
			 * region of the lost connection): its wait is told. */
			answer_locally(c, p, MFMA__V1__CODE__UNAVAILABLE,
				       "the connection was lost, and a request naming a region is not "
				       "sent again (the region went with the connection)");
		else if (!p->resp && (!p->frame || p->abandoned))
			client_pending_remove(c, p);
		else if (!p->resp && verdict[0])
			answer_locally(c, p, MFMA__V1__CODE__FAILED_PRECONDITION, verdict);
	}
	if (c->token_len > 0 && (rc = client_send_token(c, c->token, c->token_len, err)) < 0)
		return rc;
	/* Sending may read answers, which moves entries: go by id, in the
	 * order they were first sent. */
	size_t n = c->npend;
	uint64_t *ids = malloc((n ? n : 1) * sizeof(*ids));
	if (!ids)
		return client_fail(err, -ENOMEM, "out of memory");
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (c->pend[i].frame && !c->pend[i].resp)
			ids[k++] = c->pend[i].id;
	for (size_t a = 1; a < k; a++)
		for (size_t b2 = a; b2 > 0 && ids[b2 - 1] > ids[b2]; b2--) {
			uint64_t t = ids[b2];
			ids[b2] = ids[b2 - 1];
			ids[b2 - 1] = t;
		}
	rc = 0;
	for (size_t i = 0; i < k && rc == 0; i++) {
		struct client_pending *p = client_pending_find(c, ids[i]);
		if (!p || p->resp || !p->frame)
			continue;
		uint8_t *frame = p->frame;
		size_t len = p->frame_len;
		uint64_t t = mfma_clock_ns();
		rc = p->iov ? client_send_iov(c, p->iov, p->niov, len, -1, &t, err)
			    : client_send_frame(c, frame, len, &t, err);
		if (rc == 0 && (p = client_pending_find(c, ids[i])) != NULL)
			p->t_send_ns = t;
	}
	free(ids);
	return rc;
}

/* Reconnects a dead client a bounded number of times: every endpoint a
 * few times over, with the pauses below, is a few seconds. */
#define RECONNECT_ATTEMPTS(neps) (4 * (neps) + 4)

/* The error of a reconnection that did not succeed: the loss first (what
 * the daemon said before it closed, say), then why no new connection. */
static int give_up(mfma_client *c, int rc, struct mfma_error *err)
{
	if (!c->dead)
		return rc;
	if (rc < 0 && err && rc != c->dead) {
		char why[MFMA_ERROR_MAX];
		snprintf(why, sizeof(why), "%s", err->message);
		return client_fail(err, c->dead, "%.300s; reconnecting failed: %.200s", c->dead_msg,
				   why);
	}
	return client_check_alive(c, err);
}

int client_reconnect(mfma_client *c, uint64_t deadline, struct mfma_error *err)
{
	int rc = 0;
	if (!c->dead)
		return 0;
	if (c->neps == 0)
		return client_check_alive(c, err);
	for (unsigned attempt = 0;; attempt++) {
		uint64_t now = mfma_clock_ns();
		expire(c, now);
		rc = reconnect_once(c, deadline, err);
		if (rc == 0 && !c->dead)
			return 0;
		if (attempt + 1 >= RECONNECT_ATTEMPTS(c->neps) ||
		    (deadline && mfma_clock_ns() >= deadline))
			return give_up(c, rc, err);
		/* Every endpoint refused: give a restarting daemon a moment. */
		struct timespec ts = { 0, 20000000L * (attempt < 10 ? attempt + 1 : 10) };
		nanosleep(&ts, NULL);
	}
}

int client_send_token(mfma_client *c, const void *token, size_t len, struct mfma_error *err)
{
	uint8_t buf[FRAME_HEADER_SIZE + FRAME_TOKEN_MAX];
	size_t n = FRAME_TOKEN_MAGIC_LEN + len;
	frame_header_put(buf, (uint32_t)n);
	memcpy(buf + FRAME_HEADER_SIZE, FRAME_TOKEN_MAGIC, FRAME_TOKEN_MAGIC_LEN);
	memcpy(buf + FRAME_HEADER_SIZE + FRAME_TOKEN_MAGIC_LEN, token, len);
	int rc = client_send_frame(c, buf, FRAME_HEADER_SIZE + n, NULL, err);
	explicit_bzero(buf, sizeof(buf));
	return rc;
}

int mfma_connect(const char *endpoint, mfma_client **client, struct mfma_error *err)
{
	return mfma_connect_tls(endpoint, NULL, client, err);
}

/* A setting of struct mfma_tls, else its environment variable, else NULL. */
static const char *tls_setting(const char *v, const char *env)
{
	if (v && *v)
		return v;
	v = getenv(env);
	return v && *v ? v : NULL;
}

static int make_tls_ctx(const struct mfma_tls *o, struct tls_ctx **ctx, struct mfma_error *err)
{
	char why[400];
	const struct mfma_tls none = { 0 };
	if (!o)
		o = &none;
	int rc = tls_ctx_client(tls_setting(o->ca_file, "MFMA_TLS_CA"),
				tls_setting(o->cert_file, "MFMA_TLS_CERT"),
				tls_setting(o->key_file, "MFMA_TLS_KEY"), ctx, why, sizeof(why));
	return rc < 0 ? client_fail(err, rc, "TLS: %s", why) : 0;
}

/* MFMA_SPIN_US, when set: the spin window in microseconds. */
static int spin_from_env(uint32_t *us, struct mfma_error *err)
{
	const char *v = getenv("MFMA_SPIN_US");
	*us = 0;
	if (!v || !*v)
		return 0;
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (*v < '0' || *v > '9' || *end != '\0' || errno || n > MFMA_SPIN_US_MAX)
		return client_fail(err, -EINVAL, "MFMA_SPIN_US=\"%.64s\" is not a number of "
				   "microseconds from 0 to %u", v, MFMA_SPIN_US_MAX);
	*us = (uint32_t)n;
	return 0;
}

int mfma_connect_tls(const char *endpoint, const struct mfma_tls *tls, mfma_client **client,
		     struct mfma_error *err)
{
	return mfma_connect_timeout(endpoint, tls, -1, client, err);
}

int mfma_connect_timeout(const char *endpoint, const struct mfma_tls *tls, int timeout_ms,
			 mfma_client **client, struct mfma_error *err)
{
	char perr[256];
	struct endpoint ep;
	struct endpoint *eps = NULL;
	size_t neps = 0, which = 0;
	int rc, fd = -1;
	const uint64_t deadline =
		timeout_ms >= 0 ? mfma_clock_ns() + (uint64_t)timeout_ms * 1000000u : 0;
	struct client_dial t = { NULL, tls && tls->server_name ? tls->server_name : "", deadline };
	struct tls_session *ts = NULL;

	if (!client)
		return client_fail(err, -EINVAL, "mfma_connect: client must not be NULL");
	*client = NULL;
	uint32_t spin_us;
	if ((rc = spin_from_env(&spin_us, err)) < 0)
		return rc;
	if (strlen(t.name) >= sizeof(((mfma_client *)0)->tls_name))
		return client_fail(err, -EINVAL, "mfma_tls.server_name is longer than %zu bytes",
				   sizeof(((mfma_client *)0)->tls_name) - 1);
	if (!endpoint || !*endpoint)
		endpoint = getenv("MFMA_ENDPOINT");
	if (!endpoint || !*endpoint) {
		rc = connect_default(&ep, &fd, err);
		if (rc == 0)
			rc = set_nonblock(fd, err);
	} else {
		eps = calloc(ENDPOINT_LIST_MAX, sizeof(*eps));
		if (!eps)
			return client_fail(err, -ENOMEM, "out of memory");
		rc = endpoint_list_parse(endpoint, eps, ENDPOINT_LIST_MAX, &neps, perr, sizeof(perr));
		if (rc < 0) {
			free(eps);
			return client_fail(err, rc, "%s", perr);
		}
		bool any_tls = false;
		for (size_t i = 0; i < neps; i++)
			any_tls |= eps[i].tls;
		if (any_tls && (rc = make_tls_ctx(tls, &t.ctx, err)) < 0) {
			free(eps);
			return rc;
		}
		rc = connect_list(eps, neps, 0, &which, &t, &fd, &ts, err);
		ep = eps[which];
	}
	if (rc < 0) {
		tls_ctx_free(t.ctx);
		free(eps);
		return rc;
	}
	mfma_client *c = calloc(1, sizeof(*c));
	if (!c || client_take_tls(c, ts) < 0) {
		if (c) {
			c->fd = -1;
			mfma_close(c);
		}
		else
			tls_session_free(ts);
		close(fd);
		tls_ctx_free(t.ctx);
		free(eps);
		return client_fail(err, -ENOMEM, "out of memory");
	}
	c->tls_ctx = t.ctx;
	snprintf(c->tls_name, sizeof(c->tls_name), "%s", t.name);
	c->fd = fd;
	c->timeout_ms = -1;
	c->spin_ns = (uint64_t)spin_us * 1000;
	c->next_id = 1;
	if (neps > 0) {
		memcpy(c->eps, eps, neps * sizeof(*eps));
		c->neps = neps;
		c->cur = which;
	} else {
		/* The default socket that answered is the one to come back to. */
		c->eps[0] = ep;
		c->neps = 1;
	}
	free(eps);
	(void)endpoint_format(&ep, c->endpoint, sizeof(c->endpoint));
	c->is_unix = ep.kind == ENDPOINT_UNIX;
	frame_reader_init(&c->rd, CLIENT_RESPONSE_FLOOR);
	*client = c;
	client_ok(err);
	return 0;
}

/* Frees p's kept refusal (a draining daemon's "shutting down"), if any,
 * where it was decoded. */
static void refused_free(struct client_pending *p)
{
	if (p->refused)
		client_response_free(p->refused, &p->refused_rx);
	p->refused = NULL;
	p->refused_rx = (struct client_rx){ 0 };
}

void mfma_close(mfma_client *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	tls_session_free(c->tls);
	tls_ctx_free(c->tls_ctx);
	free(c->tls_in);
	free(c->tls_out);
	for (size_t i = 0; i < c->npend; i++) {
		client_response_free(c->pend[i].resp, &c->pend[i].rx);
		refused_free(&c->pend[i]);
		client_pending_drop_frame(&c->pend[i]);
	}
	free(c->pend);
	pending_index_free(&c->pend_at);
	free(c->arr);
	d_pool_close(c->pool); /* results still out keep it until freed */
	free(c->held);
	free(c->held_ids);
	client_regions_free(c);
	frame_reader_free(&c->rd);
	explicit_bzero(c->token, sizeof(c->token));
	free(c);
}

void mfma_set_timeout(mfma_client *c, int timeout_ms)
{
	if (c)
		c->timeout_ms = timeout_ms < 0 ? -1 : timeout_ms;
}

int mfma_set_spin_us(mfma_client *c, uint32_t us)
{
	if (!c || us > MFMA_SPIN_US_MAX)
		return -EINVAL;
	c->spin_ns = (uint64_t)us * 1000;
	return 0;
}

uint32_t mfma_spin_us(const mfma_client *c)
{
	return c ? (uint32_t)(c->spin_ns / 1000) : 0;
}

void mfma_set_progress(mfma_client *c, mfma_progress_fn fn, void *user)
{
	if (!c)
		return;
	c->progress = fn;
	c->progress_user = user;
}

const char *mfma_endpoint(const mfma_client *c)
{
	return c ? c->endpoint : "";
}

/* ---- the table of requests in flight ---- */

struct client_pending *client_pending_find(mfma_client *c, uint64_t id)
{
	uint32_t at;
	return pending_index_get(&c->pend_at, id, &at) && at < c->npend && c->pend[at].id == id
		       ? &c->pend[at]
		       : NULL;
}

/* The largest response frame the connection may get now: the largest
 * any request in flight can be answered with, and at least
 * CLIENT_RESPONSE_FLOOR (a status, a late answer, a connection's error). */
static size_t client_response_limit(const mfma_client *c)
{
	uint64_t most = CLIENT_RESPONSE_FLOOR;
	for (size_t i = 0; i < c->npend; i++)
		if (c->pend[i].max_resp > most)
			most = c->pend[i].max_resp;
	return most < CLIENT_MAX_FRAME ? (size_t)most : CLIENT_MAX_FRAME;
}

int client_pending_add(mfma_client *c, uint64_t id, bool user)
{
	if (c->npend == c->cap) {
		size_t ncap = c->cap ? c->cap * 2 : 16;
		struct client_pending *np = realloc(c->pend, ncap * sizeof(*np));
		if (!np)
			return -ENOMEM;
		c->pend = np;
		c->cap = ncap;
	}
	if (c->npend >= UINT32_MAX || pending_index_put(&c->pend_at, id, (uint32_t)c->npend) < 0)
		return -ENOMEM;
	struct client_pending *p = &c->pend[c->npend++];
	memset(p, 0, sizeof(*p));
	p->id = id;
	p->user = user;
	c->nuser += user;
	return 0;
}

void client_pending_remove(mfma_client *c, struct client_pending *p)
{
	client_response_free(p->resp, &p->rx);
	refused_free(p);
	client_pending_drop_frame(p);
	pending_index_del(&c->pend_at, p->id);
	c->nuser -= p->user;
	*p = c->pend[--c->npend];
	/* The last entry moved into p's place (or p was the last). */
	if (p != &c->pend[c->npend])
		(void)pending_index_put(&c->pend_at, p->id, (uint32_t)(p - c->pend));
}

void client_pending_drop_frame(struct client_pending *p)
{
	free(p->frame);
	free(p->iov);
	p->frame = NULL;
	p->iov = NULL;
	p->frame_len = p->niov = 0;
}

void client_response_free(Mfma__V1__Response *resp, struct client_rx *rx)
{
	if (rx && rx->frame) {
		wire_split_free(resp ? &resp->base : NULL, wire_split_response_paths,
				wire_split_response_npaths, rx->payload, rx->len);
		free(rx->frame);
		*rx = (struct client_rx){ 0 };
	} else if (rx && rx->arena) {
		msg_arena_free(rx->arena);
		if (rx->pooled)
			d_pool_give(rx->pool, rx->pooled, rx->pooled_cap);
		*rx = (struct client_rx){ 0 };
	} else if (resp) {
		mfma__v1__response__free_unpacked(resp, NULL);
	}
}

size_t mfma_in_flight(const mfma_client *c)
{
	return c ? c->nuser : 0;
}

/* ---- I/O ---- */

/* Marks the connection broken; every later call fails with this error. */
static int client_die(mfma_client *c, int code, struct mfma_error *err, const char *fmt, ...)
{
	if (!c->dead) {
		va_list ap;
		va_start(ap, fmt);
		c->dead = code;
		/* Held frames were for this connection: a resendable request
		 * goes again from its own copy on the next. */
		c->held_len = c->nheld = 0;
		vsnprintf(c->dead_msg, sizeof(c->dead_msg), fmt, ap);
		va_end(ap);
		/* A protocol failure (a TLS alert such as "certificate
		 * required", a frame over the limit) comes again on resending. */
		if (code == -EPROTO)
			c->verdict = true;
		/* A verdict the daemon sent just before closing (an oversized
		 * frame, say) says more than "connection closed". */
		if (c->conn_msg[0]) {
			c->verdict = true;
			size_t n = strlen(c->dead_msg);
			snprintf(c->dead_msg + n, sizeof(c->dead_msg) - n, "; the daemon said: %s",
				 c->conn_msg);
		}
	}
	return client_fail(err, c->dead, "%s", c->dead_msg);
}

int client_check_alive(mfma_client *c, struct mfma_error *err)
{
	if (c->dead)
		return client_fail(err, c->dead, "%s", c->dead_msg);
	return 0;
}

/* Files an answer (and the receive buffer its D is in: rx) with its
 * request. */
static void dispatch(mfma_client *c, Mfma__V1__Response *resp, struct client_rx *rx, uint64_t now,
		     uint64_t unpack_ns)
{
	uint64_t id = resp->has_id ? resp->id : 0;
	struct client_pending *p = id ? client_pending_find(c, id) : NULL;
	if (!p || p->resp) {
		/* No request of ours has this id: the daemon answers a frame
		 * it could not attribute (id 0).  Keep its message for the
		 * error the caller will see when the connection ends. */
		if (resp->status && resp->status->has_code && resp->status->code != 0)
			snprintf(c->conn_msg, sizeof(c->conn_msg), "%s (%s)",
				 resp->status->message ? resp->status->message : "",
				 mfma_code_name((int)resp->status->code));
		client_response_free(resp, rx);
		return;
	}
	if (p->abandoned) {
		client_response_free(resp, rx);
		client_pending_remove(c, p);
		return;
	}
	/* A draining daemon refuses new work "shutting down": a request that
	 * can be resent goes to the next connection instead, once this one
	 * ends (the daemon closes it when it has answered what it runs: those
	 * answers are read first). */
	const Mfma__V1__Status *st = resp->status;
	if (p->frame && st && st->has_code && st->code == MFMA__V1__CODE__UNAVAILABLE &&
	    st->message && strncmp(st->message, "shutting down", 13) == 0) {
		refused_free(p);
		p->refused = resp;
		p->refused_rx = *rx;
		return;
	}
	refused_free(p);
	p->resp = resp;
	p->rx = *rx;
	p->t_recv_ns = now;
	p->unpack_ns = unpack_ns;
	arrived(c, p);
}

/* TLS: reads everything the socket has now through the session into
 * the frame reader.  The session is drained of plaintext each time, so
 * nothing waits inside it that poll() would not announce.  -1 at the
 * end of the stream (*eof), or a negative errno. */
static int read_tls(mfma_client *c, bool *eof, struct mfma_error *err)
{
	char why[256];
	size_t got = 0;
	for (;;) {
		ssize_t n = recv(c->fd, c->tls_in, CLIENT_TLS_CHUNK, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return client_die(c, -errno, err, "reading from %s: %s", c->endpoint,
					  strerror(errno));
		if (n == 0)
			*eof = true;
		if (n > 0 && tls_session_feed(c->tls, c->tls_in, (size_t)n) < 0)
			return client_die(c, -ENOMEM, err, "out of memory buffering a response");
		for (;;) {
			uint8_t *ptr;
			size_t avail;
			if (frame_reader_space(&c->rd, CLIENT_READ_CHUNK, &ptr, &avail) < 0)
				return client_die(c, -ENOMEM, err, "out of memory buffering a response");
			ssize_t got = tls_session_read(c->tls, ptr, avail, why, sizeof(why));
			if (got == TLS_CLOSED) {
				*eof = true;
				break;
			}
			if (got < 0)
				return client_die(c, -EPROTO, err, "TLS error with %s: %s", c->endpoint,
						  why);
			if (got == 0)
				break;
			frame_reader_commit(&c->rd, (size_t)got);
		}
		if (n <= 0 || (size_t)n < CLIENT_TLS_CHUNK || frame_reader_has_frame(&c->rd) ||
		    (got += (size_t)n) >= CLIENT_READ_MAX)
			return 0;
	}
}

/* One answer's decode: its client, whether its D may take a buffer of the
 * pool (a frame of CLIENT_POOL_MIN_BYTES or more), and the one it took. */
struct placing {
	mfma_client *c;
	bool pool_ok;
	void *pooled;
	size_t pooled_cap;
};

/* Where the answer to request id puts D's len bytes as it is decoded,
 * while the request still waits for it: where its submitter asked for D
 * (mfma_gemm_args.d), when D fits there; with no such place, a buffer of
 * the client's pool (frames from CLIENT_POOL_MIN_BYTES); else NULL, a
 * piece of the answer's own.  One copy instead of two, and none into memory
 * freshly handed out: with 128 KiB answers, freeing each answer's copy
 * handed its pages back to the kernel and the next copy faulted them in
 * again (mfmactl bench, bench/RESULTS.md). */
static void *place_d(void *ctx, uint64_t id, size_t len)
{
	struct placing *pl = ctx;
	mfma_client *c = pl->c;
	struct client_pending *p = client_pending_find(c, id);
	if (!p || p->abandoned || p->resp)
		return NULL;
	if (p->d_dst)
		return len <= p->d_bytes ? p->d_dst : NULL;
	if (!pl->pool_ok || pl->pooled || (!c->pool && !(c->pool = d_pool_new())))
		return NULL;
	pl->pooled = d_pool_take(c->pool, len, &pl->pooled_cap);
	return pl->pooled;
}

/* Decodes the answer at payload, which frame_reader_next just returned.
 * A large one's D is left where it was received: the reader's buffer
 * becomes the answer's (rx), and the caller's copy of D (or its pointer
 * into it) comes from there, never from a copy protobuf-c made first.
 * Only from CLIENT_KEEP_MIN_BYTES: below, handing the buffer over costs
 * the reader a fresh one for every answer, which measured slower than
 * the copy (mfmactl bench, 64 connections, 32 KiB answers: 5.8-6.1k ->
 * 3.0-3.9k requests a second). */
static Mfma__V1__Response *decode_response(mfma_client *c, const uint8_t *payload, size_t len,
					   struct client_rx *rx)
{
	/* The bytes after the frame move to a fresh buffer: at most a read's
	 * worth usually; more (many answers in one read) would be moved
	 * again for each, costing more than the copy it saves.  What the
	 * buffer holds beyond the answer goes when the result is made
	 * (requests.c, gemm_result_from). */
	if (len < CLIENT_KEEP_MIN_BYTES || frame_reader_pending(&c->rd) > CLIENT_READ_CHUNK ||
	    !(rx->frame = frame_reader_take(&c->rd))) {
		/* A GEMM's answer by the walker made for them, into one block
		 * freed whole (rx->arena: decoding with malloc and freeing
		 * field by field took a quarter of a pipelined client's
		 * instructions, bench/RESULTS.md), its D where the request
		 * asked for it; one that outgrows the block (a large D with
		 * nowhere to go), an error's, or what the walker declines,
		 * with malloc as protobuf-c does, so that it may be freed as
		 * any other message (proto/wire_gemm.h). */
		/* A frame under the pool's size has room for its D in the
		 * block too, so that no D is decoded twice (declined by a
		 * block too small, then with malloc); a larger frame's D goes
		 * where place_d puts it. */
		const bool pool_ok = len >= CLIENT_POOL_MIN_BYTES;
		size_t room = CLIENT_ANSWER_ARENA_BYTES + (pool_ok ? 0 : len);
		/* A small answer in an arena of the size each thread keeps
		 * freed ones of for reuse (msg_arena.h), not a malloc of its
		 * own: with 256 answers in flight glibc handed the heap's top
		 * back between them and grew it again (sysmalloc, 6-8% of the
		 * client's time on a 2-core host). */
		if (len + CLIENT_ANSWER_PIECES_BYTES <= MSG_ARENA_REQUEST_BYTES)
			room = MSG_ARENA_REQUEST_BYTES;
		struct msg_arena *a = msg_arena_new(room);
		if (a) {
			ProtobufCAllocator al = msg_arena_allocator_bounded(a);
			struct placing pl = { .c = c, .pool_ok = pool_ok };
			struct wire_answer_place place = { .fn = place_d, .ctx = &pl };
			Mfma__V1__Response *resp = wire_gemm_answer_decode(payload, len, &al, &place);
			if (resp && resp->body_case == MFMA__V1__RESPONSE__BODY_GEMM) {
				*rx = (struct client_rx){ .arena = a, .pool = c->pool, .pooled = pl.pooled,
							  .pooled_cap = pl.pooled_cap };
				return resp;
			}
			msg_arena_free(a);
			if (pl.pooled)
				d_pool_give(c->pool, pl.pooled, pl.pooled_cap);
		}
		Mfma__V1__Response *resp = wire_gemm_answer_decode(payload, len, NULL, NULL);
		return resp ? resp : mfma__v1__response__unpack(NULL, len, payload);
	}
	size_t kept = 0;
	Mfma__V1__Response *resp = (Mfma__V1__Response *)wire_split_unpack(
		&mfma__v1__response__descriptor, wire_split_response_paths,
		wire_split_response_npaths, WIRE_SPLIT_MIN_BYTES, payload, len, &kept);
	if (kept == 0) {
		free(rx->frame);
		rx->frame = NULL;
		return resp;
	}
	rx->payload = payload;
	rx->len = len;
	return resp;
}

/* Reads what the socket has now and files the complete frames, at most
 * CLIENT_FILE_MAX of them; frames an earlier look read and did not file
 * go first, and nothing more is read until they are filed (the caller
 * looks again without waiting on the socket while frame_reader_has_frame).
 * 0, or a negative errno when the connection broke (it is then dead);
 * answers that arrived before the end are filed first. */
static int read_available(mfma_client *c, struct mfma_error *err)
{
	bool eof = false;
	const bool held = frame_reader_has_frame(&c->rd);
	int trc = c->tls && !held ? read_tls(c, &eof, err) : 0;
	if (trc < 0)
		return trc;
	for (size_t got = 0; !c->tls && !held;) {
		uint8_t *ptr;
		size_t avail;
		if (frame_reader_space(&c->rd, CLIENT_READ_CHUNK, &ptr, &avail) < 0)
			return client_die(c, -ENOMEM, err, "out of memory buffering a response");
		ssize_t n = recv(c->fd, ptr, avail, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return client_die(c, -errno, err, "reading from %s: %s", c->endpoint,
					  strerror(errno));
		}
		if (n == 0) {
			eof = true;
			break;
		}
		frame_reader_commit(&c->rd, (size_t)n);
		if ((size_t)n < avail || frame_reader_has_frame(&c->rd) ||
		    (got += (size_t)n) >= CLIENT_READ_MAX)
			break;
	}
	uint64_t now = mfma_clock_ns();
	/* At the end of the stream every frame left is filed: no more come. */
	for (unsigned filed = 0; eof || filed < CLIENT_FILE_MAX; filed++) {
		const uint8_t *payload;
		size_t len;
		int r = frame_reader_next(&c->rd, &payload, &len);
		if (r == 0)
			break;
		/* Frames up to CLIENT_RESPONSE_FLOOR are read as they come; a
		 * longer one only when an answer in flight can be that long
		 * (looked at then, off the common path): else it is a broken
		 * or hostile daemon's, refused at its header, not buffered. */
		if (r < 0 && len <= client_response_limit(c)) {
			c->rd.max_frame = len;
			continue;
		}
		if (r < 0)
			return client_die(c, -EPROTO, err, "response frame of %zu bytes is too large",
					  len);
		c->rd.max_frame = CLIENT_RESPONSE_FLOOR; /* raised for that frame alone */
		uint64_t t0 = mfma_clock_ns();
		struct client_rx rx = { 0 };
		Mfma__V1__Response *resp = decode_response(c, payload, len, &rx);
		if (!resp)
			return client_die(c, -EPROTO, err,
					  "could not decode a response frame of %zu bytes from %s",
					  len, c->endpoint);
		dispatch(c, resp, &rx, now, mfma_clock_ns() - t0);
	}
	if (!eof)
		return 0;
	if (frame_reader_pending(&c->rd) > 0)
		return client_die(c, -ECONNRESET, err,
				  "%s closed the connection in the middle of a response", c->endpoint);
	return client_die(c, -ECONNRESET, err, "%s closed the connection", c->endpoint);
}

/* Milliseconds left until deadline (0 = none: -1, forever), rounded up. */
static int poll_ms(uint64_t deadline)
{
	if (deadline == 0)
		return -1;
	uint64_t now = mfma_clock_ns();
	if (now >= deadline)
		return 0;
	uint64_t ms = (deadline - now + 999999) / 1000000;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

static uint64_t client_deadline(int timeout_ms)
{
	if (timeout_ms < 0)
		return 0;
	return mfma_clock_ns() + (uint64_t)timeout_ms * 1000000ull + 1;
}

/* Waits for `events` on the socket until the deadline: 1 when one came
 * (revents in *revents), 0 at the deadline, or a negative errno (the
 * connection is then dead). */
static int wait_socket(mfma_client *c, short events, uint64_t deadline, short *revents,
		       struct mfma_error *err)
{
	if (c->spin_ns) {
		/* mfma_set_spin_us: look without blocking first, so that an
		 * answer that is about to come costs no sleep and wake-up;
		 * never past the deadline, which the blocking poll below then
		 * finds passed.  Between looks the thread yields: where the
		 * daemon's thread waits for this core it runs now, not after
		 * our time slice (on 2 cores, 650 us round trips instead of 30
		 * without the yield); with no one waiting it returns at once. */
		uint64_t now = mfma_clock_ns();
		uint64_t until = now + c->spin_ns;
		if (deadline && deadline < until)
			until = deadline;
		while (now < until) {
			struct pollfd pfd = { .fd = c->fd, .events = events };
			int pr = poll(&pfd, 1, 0);
			if (pr > 0) {
				*revents = pfd.revents;
				return pr;
			}
			if (pr < 0 && errno != EINTR)
				return client_die(c, -errno, err, "poll: %s", strerror(errno));
			sched_yield();
			now = mfma_clock_ns();
		}
	}
	for (;;) {
		struct pollfd pfd = { .fd = c->fd, .events = events };
		int to = poll_ms(deadline);
		int pr = to == 0 ? 0 : poll(&pfd, 1, to);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return client_die(c, -errno, err, "poll: %s", strerror(errno));
		*revents = pfd.revents;
		return pr;
	}
}

/* Pieces one sendmsg takes at most (a frame has a few: the matrices and
 * the fields between them). */
#define SEND_IOV_MAX 16

/* One send of the pieces from piece i, byte off on; with fd >= 0 the
 * descriptor rides on these bytes. */
static ssize_t send_some(int sock, const struct iovec *iov, size_t niov, size_t i, size_t off,
			 int fd)
{
	struct iovec v[SEND_IOV_MAX];
	size_t n = 0;
	for (; i < niov && n < SEND_IOV_MAX; i++, off = 0) {
		if (iov[i].iov_len == off)
			continue;
		v[n].iov_base = (uint8_t *)iov[i].iov_base + off;
		v[n].iov_len = iov[i].iov_len - off;
		n++;
	}
	struct msghdr msg = { .msg_iov = v, .msg_iovlen = n };
	if (fd < 0)
		return sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int))];
	} u;
	memset(&u, 0, sizeof(u));
	msg.msg_control = u.space;
	msg.msg_controllen = sizeof(u.space);
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* TLS: seals the next n bytes of a frame into tls_out (with whatever the
 * session had to send before). */
static int seal_chunk(mfma_client *c, const uint8_t *p, size_t n, struct mfma_error *err)
{
	char why[256];
	size_t need = tls_session_out_pending(c->tls) + tls_sealed_bound(n);
	if (c->tls_out_cap < need) {
		uint8_t *nb = realloc(c->tls_out, need);
		if (!nb)
			return client_die(c, -ENOMEM, err, "out of memory sealing a request");
		c->tls_out = nb;
		c->tls_out_cap = need;
	}
	if (tls_session_write(c->tls, p, n, why, sizeof(why)) < 0)
		return client_die(c, -EPROTO, err, "TLS error with %s: %s", c->endpoint, why);
	c->tls_out_off = 0;
	c->tls_out_len = tls_session_out_take(c->tls, c->tls_out, c->tls_out_cap);
	return 0;
}

static bool socket_writable(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	return poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLOUT);
}

int client_send_frame(mfma_client *c, const uint8_t *buf, size_t len, uint64_t *t_first,
		      struct mfma_error *err)
{
	return client_send_frame_fd(c, buf, len, -1, t_first, err);
}

int client_send_frame_fd(mfma_client *c, const uint8_t *buf, size_t len, int fd,
			 uint64_t *t_first, struct mfma_error *err)
{
	struct iovec one = { .iov_base = (void *)(uintptr_t)buf, .iov_len = len };
	return client_send_iov(c, &one, 1, len, fd, t_first, err);
}

int client_hold(mfma_client *c, uint64_t id, const uint8_t *frame, size_t len,
		struct mfma_error *err)
{
	if (len > c->held_cap - c->held_len) {
		size_t cap = c->held_cap ? c->held_cap : 16384;
		while (cap < c->held_len + len)
			cap *= 2;
		uint8_t *b = realloc(c->held, cap);
		if (!b)
			return client_fail(err, -ENOMEM, "out of memory holding a request");
		c->held = b;
		c->held_cap = cap;
	}
	if (c->nheld == c->held_ids_cap) {
		size_t cap = c->held_ids_cap ? 2 * c->held_ids_cap : 64;
		uint64_t *ids = realloc(c->held_ids, cap * sizeof(*ids));
		if (!ids)
			return client_fail(err, -ENOMEM, "out of memory holding a request");
		c->held_ids = ids;
		c->held_ids_cap = cap;
	}
	memcpy(c->held + c->held_len, frame, len);
	c->held_len += len;
	c->held_ids[c->nheld++] = id;
	return c->held_len > CLIENT_HOLD_MAX ? client_flush_held(c, err) : 0;
}

int client_flush_held(mfma_client *c, struct mfma_error *err)
{
	if (c->held_len == 0)
		return 0;
	/* Emptied first: the write may read answers, never hold more. */
	size_t len = c->held_len, n = c->nheld;
	c->held_len = c->nheld = 0;
	uint64_t t_first = mfma_clock_ns();
	int rc = client_send_frame(c, c->held, len, &t_first, err);
	if (rc < 0) {
		/* Timed out before a byte went (the socket stayed full): the
		 * connection lives, so they stay held for the next flush.  Had
		 * it died, each goes again from its own copy on the next. */
		if (!c->dead) {
			c->held_len = len;
			c->nheld = n;
		}
		return rc;
	}
	uint64_t t_sent = mfma_clock_ns();
	for (size_t i = 0; i < n; i++) {
		struct client_pending *p = client_pending_find(c, c->held_ids[i]);
		if (p) {
			p->t_send_ns = t_first;
			p->t_sent_ns = t_sent;
		}
	}
	return 0;
}

void mfma_cork(mfma_client *c)
{
	if (c)
		c->corked = true;
}

int mfma_uncork(mfma_client *c, struct mfma_error *err)
{
	if (!c)
		return client_fail(err, -EINVAL, "mfma_uncork: client must not be NULL");
	c->corked = false;
	int rc = client_flush_held(c, err);
	if (rc == 0)
		client_ok(err);
	return rc;
}

/* Moves the cursor (piece *i, byte *at) n bytes on, past empty pieces. */
static void iov_advance(const struct iovec *iov, size_t niov, size_t *i, size_t *at, size_t n)
{
	*at += n;
	while (*i < niov && *at >= iov[*i].iov_len) {
		*at -= iov[*i].iov_len;
		(*i)++;
	}
}

int client_send_iov(mfma_client *c, const struct iovec *iov, size_t niov, size_t len, int fd,
		    uint64_t *t_first, struct mfma_error *err)
{
	uint64_t deadline = client_deadline(c->timeout_ms);
	size_t off = 0;     /* bytes of the frame sent (TLS: sealed) */
	size_t pi = 0, pat = 0; /* the same as piece, byte in it */
	bool wire = false;  /* a byte of this frame went out (TLS: was sealed) */
	iov_advance(iov, niov, &pi, &pat, 0);
	int rc = client_check_alive(c, err);
	if (rc < 0)
		return rc;
	while (off < len || (c->tls && c->tls_out_off < c->tls_out_len)) {
		/* The round trip starts when the first byte goes: stamp before
		 * the call, so time spent descheduled inside it counts. */
		uint64_t t = !wire ? mfma_clock_ns() : 0;
		ssize_t n;
		if (c->tls && !wire && !socket_writable(c->fd)) {
			/* Sealing commits the session's record numbers: it waits
			 * until the bytes can go, so a timeout before them still
			 * leaves the connection usable. */
			n = -1;
			errno = EAGAIN;
		} else if (c->tls) {
			if (c->tls_out_off == c->tls_out_len) {
				/* A record per piece at most: the pieces are few. */
				size_t left = iov[pi].iov_len - pat;
				size_t chunk = left < CLIENT_TLS_CHUNK ? left : CLIENT_TLS_CHUNK;
				if ((rc = seal_chunk(c, (const uint8_t *)iov[pi].iov_base + pat, chunk,
						     err)) < 0)
					return rc;
				off += chunk;
				iov_advance(iov, niov, &pi, &pat, chunk);
				if (!wire && t_first)
					*t_first = t;
				wire = true;
			}
			n = send(c->fd, c->tls_out + c->tls_out_off, c->tls_out_len - c->tls_out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		} else {
			/* The descriptor goes with the first bytes that leave. */
			n = send_some(c->fd, iov, niov, pi, pat, !wire ? fd : -1);
		}
		if (n > 0) {
			if (!wire && t_first)
				*t_first = t;
			wire = true;
			if (c->tls) {
				c->tls_out_off += (size_t)n;
			} else {
				off += (size_t)n;
				iov_advance(iov, niov, &pi, &pat, (size_t)n);
			}
			if (c->progress && (!c->tls || c->tls_out_off == c->tls_out_len))
				c->progress(c->progress_user, off, len);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			int e = errno;
			/* The daemon may have said why before it closed (too many
			 * connections, say): file that first so the error carries it. */
			if (e == EPIPE || e == ECONNRESET)
				(void)read_available(c, NULL);
			return client_die(c, -e, err, "writing to %s: %s", c->endpoint, strerror(e));
		}
		/* The socket is full: wait for room, and drain answers meanwhile
		 * so that the daemon, which may be blocked writing them, goes on
		 * reading our frame. */
		short revents = 0;
		int pr = wait_socket(c, POLLIN | POLLOUT, deadline, &revents, err);
		if (pr < 0)
			return pr;
		if (pr == 0) {
			if (!wire)
				return client_fail(err, -ETIMEDOUT,
						   "timed out after %d ms waiting to send to %s",
						   c->timeout_ms, c->endpoint);
			/* Half a frame is on the wire: the stream cannot be
			 * resynchronised. */
			return client_die(c, -ETIMEDOUT, err,
					  "timed out after %d ms in the middle of sending a %zu-byte "
					  "request to %s; connection abandoned",
					  c->timeout_ms, len, c->endpoint);
		}
		if (revents & (POLLIN | POLLHUP | POLLERR)) {
			rc = read_available(c, err);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* Finds a pending request that is ready: `id`, or the oldest arrival of a
 * submitted one for MFMA_ANY (blocking calls' answers are theirs). */
static struct client_pending *ready(mfma_client *c, uint64_t id)
{
	struct client_pending *best = NULL;
	if (id != MFMA_ANY) {
		struct client_pending *p = client_pending_find(c, id);
		return p && p->resp ? p : NULL;
	}
	/* The oldest arrival still waiting: the ring's front, once the stale
	 * are dropped (the same answer the table's lowest seq names). */
	while (!c->arr_lost && c->arr_n) {
		const struct client_arrival *a = &c->arr[c->arr_head];
		struct client_pending *p = client_pending_find(c, a->id);
		if (arrival_waits(p, a))
			return p;
		c->arr_head = (c->arr_head + 1) & (c->arr_cap - 1);
		c->arr_n--;
	}
	if (!c->arr_lost)
		return NULL;
	for (size_t i = 0; i < c->npend; i++) {
		struct client_pending *p = &c->pend[i];
		if (p->resp && p->user && (!best || p->seq < best->seq))
			best = p;
	}
	return best;
}

/* No other connection took the requests a draining daemon refused: its
 * "shutting down" becomes their answer, and that of the requests left
 * with it when the client moved on (their answers were not read). */
static void answer_refused(mfma_client *c, const struct mfma_error *why)
{
	bool drained = false;
	for (size_t i = 0; i < c->npend;) {
		struct client_pending *p = &c->pend[i];
		if (p->refused && p->abandoned && !p->resp) {
			/* Its call returned: no one takes this answer.  The last
			 * entry moves into slot i. */
			client_pending_remove(c, p);
			continue;
		}
		if (p->refused && !p->resp) {
			p->resp = p->refused;
			p->rx = p->refused_rx;
			p->refused = NULL;
			p->refused_rx = (struct client_rx){ 0 };
			p->t_recv_ns = mfma_clock_ns();
			arrived(c, p);
			drained = true;
		}
		i++;
	}
	if (!drained)
		return;
	char msg[MFMA_ERROR_MAX];
	snprintf(msg, sizeof(msg), "shutting down: the daemon was draining and no endpoint took "
		 "the request again (%.300s)", why ? why->message : "");
	for (size_t i = 0; i < c->npend; i++) {
		struct client_pending *p = &c->pend[i];
		if (p->frame && !p->resp && !p->abandoned)
			answer_locally(c, p, MFMA__V1__CODE__UNAVAILABLE, msg);
	}
}

/* Whether a lost connection should be made again for this wait: the
 * request waited for (or, for MFMA_ANY, some submitted one) can be resent,
 * and the daemon did not close the connection with a verdict on it. */
static bool waits_for_resend(mfma_client *c, uint64_t id)
{
	if (c->verdict)
		return false;
	for (size_t i = 0; i < c->npend; i++) {
		const struct client_pending *p = &c->pend[i];
		if ((id == MFMA_ANY ? p->user : p->id == id) && p->frame && !p->resp)
			return true;
	}
	return false;
}

int client_wait(mfma_client *c, uint64_t id, int timeout_ms, struct client_pending **out,
		struct mfma_error *err)
{
	uint64_t deadline = client_deadline(timeout_ms);
	bool timed_out = false;
	/* Never wait for an answer to a request still held (mfma_cork); a
	 * failed write leaves the connection dead, which the loop handles. */
	(void)client_flush_held(c, err);
	for (;;) {
		/* Answers first: one that came just before the connection
		 * ended is still delivered. */
		struct client_pending *p = ready(c, id);
		if (p) {
			*out = p;
			return 0;
		}
		int rc = client_check_alive(c, err);
		if (rc < 0 && waits_for_resend(c, id)) {
			/* Requests already past their deadline end here, so that
			 * the reconnection is bounded by the live ones' (each
			 * step of it given at least CLIENT_DIAL_MIN_MS). */
			expire(c, mfma_clock_ns());
			if (ready(c, id))
				continue;
			uint64_t until = deadline;
			for (size_t i = 0; i < c->npend; i++) {
				const struct client_pending *q = &c->pend[i];
				if (q->frame && !q->resp && q->deadline_ns &&
				    (until == 0 || q->deadline_ns < until))
					until = q->deadline_ns;
			}
			rc = client_reconnect(c, until, err);
			if (rc < 0)
				answer_refused(c, err);
			expire(c, mfma_clock_ns());
			if (rc == 0 || ready(c, id))
				continue;
			if (deadline == 0 || mfma_clock_ns() < deadline)
				return rc;
			timed_out = true;
		}
		if (rc < 0)
			return rc;
		if (timed_out)
			return client_fail(err, -ETIMEDOUT, "no response from %s within %d ms",
					   c->endpoint, timeout_ms);
		/* Frames already read and not yet filed need no wait. */
		short revents;
		int pr = frame_reader_has_frame(&c->rd) ? 1
							: wait_socket(c, POLLIN, deadline, &revents, err);
		if (pr < 0)
			return pr;
		/* At the deadline, one last non-blocking look: a timeout of 0
		 * means "whatever has arrived already".  A socket that always
		 * has more (a daemon streaming without end) times out too. */
		timed_out = pr == 0 || (deadline && mfma_clock_ns() >= deadline);
		read_available(c, err);
	}
}
