/* One client connection: bytes in (frames, read in place into its
 * frame_reader), bytes out (queued frames, write backpressure), and its
 * lifetime.  It knows nothing of what a frame means: each whole frame
 * goes to the on_frame callback its listener was given.
 *
 * A connection is reference counted: the socket holds one reference and
 * every request in flight one more (conn_hold), so a client that
 * vanishes with requests queued leaves nothing dangling; what is sent to
 * a closed connection is dropped.
 *
 * A large frame on a plaintext connection may be read off the loop
 * (limits.reader_threads): once its header is in, a reader thread reads
 * the rest and decodes it (decode_frame) while the connection reads
 * nothing else, and the loop routes it (on_decoded) before it reads on. */
#ifndef MFMAD_CONN_H
#define MFMAD_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon.h"
#include "peer_addr.h"

struct conn;
struct region;

/* Descriptors a connection may have received and not yet claimed. */
#define CONN_MAX_FDS 8

struct conn_events {
	/* A connection was accepted (and counted in connections_open).  False
	 * refuses it: the callback has sent its last answer with close_after,
	 * and nothing is read from it. */
	bool (*on_open)(struct conn *c);
	/* One whole frame; payload is valid until on_frame returns (or, after
	 * conn_frames_suspend, until the caller frees the buffer it got). */
	void (*on_frame)(struct conn *c, const uint8_t *payload, size_t len);
	/* The next frame announces len bytes, over limits.max_frame_mb.  The
	 * connection no longer reads; the callback answers and closes. */
	void (*on_oversize)(struct conn *c, size_t len);
	/* The peer failed its listener's check (credentials, token); why
	 * says so.  The callback answers with close_after. */
	void (*on_denied)(struct conn *c, const char *why);
	/* The connection is closing (once); requests in flight still hold
	 * it.  May be NULL. */
	void (*on_close)(struct conn *c);
	/* A reader thread (readers.h), for a frame whose body it read: decodes
	 * it as on_frame would, taking the buffer it lies in (base, cap
	 * bytes), and returns what on_decoded gets; NULL when out of memory
	 * (base freed).  NULL: frames are never read off the loop. */
	void *(*decode_frame)(const uint8_t *payload, size_t len, uint8_t *base, size_t cap);
	/* On the loop, in the frame's place among the connection's frames:
	 * what decode_frame returned, to route (or to free, on a connection
	 * that has closed meanwhile). */
	void (*on_decoded)(struct conn *c, void *decoded);
};

/* What a listener asks of its peers (listen.c fills it in).  With a
 * token, the first frame must be frame.h's token frame carrying it;
 * nothing else is taken before, and it is answered only when wrong.
 * With tls, the connection speaks TLS (proto/tls.h) from its first byte:
 * frames, the token frame included, travel inside it. */
struct tls_ctx;
struct conn_policy {
	struct tls_ctx *tls;  /* NULL: plaintext; replaced on SIGHUP (listen.c) */
	const uint8_t *token; /* the first frame must carry it; NULL: none */
	size_t token_len;
	bool check_peer;      /* Unix socket: SO_PEERCRED against uids/gid */
	const uint32_t *uids;
	size_t nuids;
	bool has_gid;
	uint32_t gid;
};

/* Why a connection was refused, for conn_refused. */
enum conn_refusal {
	CONN_REFUSE_LIMIT,  /* limits.max_connections */
	CONN_REFUSE_FD,     /* the process is out of file descriptors */
	CONN_REFUSE_PEER,   /* a credential or peer check failed */
	CONN_REFUSE_MEMORY, /* limits.max_memory_mb */
	CONN_REFUSE_TLS,    /* a TLS handshake failed, or a plaintext client on TLS */
	CONN_REFUSE_N
};

/* Starts the connections' timer: read, idle and write timeouts, reading
 * resumed once memory is available again, malloc_trim after a burst. */
int conn_start(struct daemon *d);

/* Counts a refusal and logs it, at most once a second per cause (with the
 * number left unlogged since), so a flood cannot flood the journal. */
void conn_refused(struct daemon *d, enum conn_refusal cause, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Every byte clients make the daemon hold now: read buffers, answers not
 * yet written, and GEMMs in flight; against limits.max_memory_mb. */
uint64_t conn_held_bytes(const struct daemon *d);

/* Accepts one connection on a listening socket. */
void conn_accept(struct daemon *d, uv_stream_t *server, const struct conn_events *ev,
		 const struct conn_policy *pol, const char *what);

void conn_ref(struct conn *c);
void conn_unref(struct conn *c);
/* A request in flight: a reference and a count against
 * limits.max_inflight_per_connection. */
void conn_hold(struct conn *c);
void conn_release(struct conn *c);
uint32_t conn_inflight(const struct conn *c);
/* Those whose answer has not been written yet: what admission counts
 * (conn_send_direct and conn_send_posted count an answer they write as
 * early until its request is released, conn_early_released). */
uint32_t conn_inflight_unanswered(const struct conn *c);
/* The same for the whole daemon: requests held whose answer is not yet
 * written (limits.max_inflight's count, status's in_flight). */
uint64_t conn_daemon_unanswered(const struct daemon *d);
void conn_early_released(struct conn *c);
uint64_t conn_id(const struct conn *c);
struct daemon *conn_daemon(const struct conn *c);
/* A Unix peer's uid (SO_PEERCRED at accept); false for TCP, or where the
 * credentials could not be read. */
bool conn_peer_uid(const struct conn *c, uint32_t *uid);
/* The open connections of Unix peers with this uid. */
uint32_t conn_count_uid(const struct daemon *d, uint32_t uid);
/* A TCP peer's address key (peer_addr.h, read at accept); false for a
 * Unix peer, or where the address could not be read. */
bool conn_peer_addr(const struct conn *c, struct peer_addr *addr);
/* The open connections of TCP peers with this key. */
uint32_t conn_count_addr(const struct daemon *d, const struct peer_addr *addr);

/* Queues one encoded frame (header included) and takes the buffer.  A
 * NULL or closed connection drops it.  Every frame the connection takes,
 * here or below, it frees with frame_arena_free: a GEMM's answer may lie
 * in a device's arena of pinned frames, anything else is malloc'ed. */
void conn_send(struct conn *c, uint8_t *buf, size_t len, bool close_after);
/* Any thread (a device worker, for the answer it just made): writes a
 * whole frame straight to the socket of a plaintext connection when no
 * write is queued ahead of it, sparing the loop's wake-up on the way out.
 * true: the frame is taken (sent, or its unsent tail kept for the loop,
 * which sends it before anything else: conn_flush_direct); false: send
 * it with conn_send.  The caller holds the connection. */
bool conn_send_direct(struct conn *c, uint8_t *frame, size_t len);
/* Worker: an answer handed to a post thread (no direct send may overtake
 * it until conn_send_posted has run). */
void conn_answer_posted(struct conn *c);
/* The most frames conn_send_posted writes in one call. */
#define CONN_SEND_MANY 64
/* Post thread, in the order the answers were posted: conn_send_direct
 * for n posted answers at once (one write for them all, up to
 * CONN_SEND_MANY).  Returns how many of frames, from the first, it took;
 * each of the others is left to the loop, counted as by
 * conn_answer_later. */
size_t conn_send_posted(struct conn *c, uint8_t **frames, size_t *lens, size_t n);
/* Post thread: a posted answer it has nothing to send for after all (its
 * encoding failed: the loop answers the failure), counted as by
 * conn_answer_later. */
void conn_posted_later(struct conn *c);
/* Loop: queues the tail a direct send left, if any. */
void conn_flush_direct(struct conn *c);
/* Any thread: an answer finished on a worker is left for the loop to send
 * (no direct send may overtake it) / the loop has queued it. */
void conn_answer_later(struct conn *c);
void conn_answer_sent(struct conn *c);
void conn_close(struct conn *c);
bool conn_is_closed(const struct conn *c);
/* A Unix-socket connection (descriptors can come with its frames). */
bool conn_is_unix(const struct conn *c);
/* The oldest descriptor received on the connection and not yet claimed;
 * the caller owns it.  -ENOENT when there is none.  A descriptor that no
 * frame claims closes the connection (conn.c says when). */
int conn_take_fd(struct conn *c);
/* The connection's list of regions, kept by regions.c. */
struct region **conn_regions(struct conn *c);

/* Called from on_frame: keeps the current frame for an off-loop decode.
 * Returns the read buffer holding it (the caller frees it; *cap bytes,
 * counted against the connection's read buffers until
 * conn_frames_resume) and hands no further frame over until then; NULL
 * when that is not possible (decode inline then). */
uint8_t *conn_frames_suspend(struct conn *c, size_t *cap);
/* Called from on_frame with its payload and len: hands the read buffer
 * holding that frame, cut at its end (*cap bytes; *payload follows it
 * should it move), to the caller, who frees it and counts it from now on
 * against the daemon's limits (the connection no longer does); frames go
 * on in a fresh buffer.  NULL when the buffer holds too much after the
 * frame to move it cheaply, or out of memory (the frame stays the
 * reader's: copy what is needed of it). */
uint8_t *conn_frame_take(struct conn *c, const uint8_t **payload, size_t len, size_t *cap);
void conn_frames_resume(struct conn *c);

void conn_close_all(struct daemon *d);
/* When stopping with nothing in flight: closes each connection whose
 * answers are written (every one, once the drain window is over) and
 * stops the loop when none is left. */
void conn_check_drained(struct daemon *d);
/* Applies a new limits.max_frame_mb to every open connection. */
void conn_set_frame_limit(struct daemon *d, uint64_t bytes);

#endif
