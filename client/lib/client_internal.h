/* What client.c (connection, I/O, requests in flight) and requests.c
 * (building and decoding messages) share.  Not installed. */
#ifndef MFMA_CLIENT_INTERNAL_H
#define MFMA_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "endpoint.h"
#include "frame.h"
#include "mfma.h"
#include "mfma_clock.h"
#include "mfma.pb-c.h"
#include "pending_index.h"
#include "tls.h"

/* The receive buffer an answer's D was left in (proto/wire_split.h):
 * whoever holds the answer owns it, and frees it with the answer
 * (client_response_free).  All NULL/0: the answer owns its bytes. */
struct client_rx {
	uint8_t *frame;
	const uint8_t *payload;
	size_t len;
	/* A small GEMM answer's arena (msg_arena.h): resp lives in it. */
	struct msg_arena *arena;
	/* Its D's buffer, when it came from the client's pool (d_pool.h). */
	struct d_pool *pool;
	void *pooled;
	size_t pooled_cap;
};

/* Frees an answer (NULL is fine) and the receive buffer its D is in. */
void client_response_free(Mfma__V1__Response *resp, struct client_rx *rx);

/* One request sent and not yet handed back to the caller. */
struct client_pending {
	uint64_t id;
	bool user;       /* submitted with mfma_gemm_submit (mfma_wait may return it) */
	bool abandoned;  /* its blocking caller timed out: drop the answer */
	uint64_t t_send_ns;  /* the first byte went */
	uint64_t t_sent_ns;  /* the last byte went */
	uint64_t t_recv_ns;  /* the answer's last bytes were read */
	uint64_t encode_ns;  /* building and packing the request */
	uint64_t unpack_ns;  /* unpacking the answer */
	uint64_t seq;    /* arrival order, for MFMA_ANY */
	void *d_dst;     /* where the caller wants D (mfma_gemm_args.d), or NULL */
	size_t d_bytes;  /* and how many bytes it holds (mfma_gemm_args.d_bytes) */
	uint32_t d_rows, d_cols; /* the D asked for (rows 0: a resident weight's, any) */
	uint64_t max_resp; /* the largest answer it can get, bytes (client_response_limit) */
	Mfma__V1__Response *resp; /* NULL until the answer arrives */
	struct client_rx rx;      /* where resp's D is, when not in resp */
	/* A request that changes nothing (a GEMM, a ping, status, the list)
	 * keeps its frame until answered: after a lost connection it is sent
	 * again, with the same id, on the next one (client_reconnect), until
	 * deadline_ns passes. */
	uint8_t *frame;
	size_t frame_len;
	/* A blocking call's frame, kept as it was sent: its pieces, the
	 * large ones the caller's own matrices (valid until the call returns,
	 * which drops them: client_pending_drop_frame), the small ones in
	 * frame.  NULL: frame is the whole frame. */
	struct iovec *iov;
	size_t niov;
	uint64_t deadline_ns;
	/* A draining daemon's "shutting down", kept while the request goes
	 * to another connection: its answer if no other daemon takes it;
	 * refused_rx, where it was decoded (an arena, a frame), as rx for
	 * resp. */
	Mfma__V1__Response *refused;
	struct client_rx refused_rx;
};

/* How long a resendable request may wait for a connection when neither
 * it (timeout_us) nor the client (mfma_set_timeout) says. */
#define CLIENT_RESEND_WINDOW_MS 60000

/* A region (mfma.h): the memfd, its mapping and the daemon's id. */
struct mfma_region {
	struct mfma_region *next;
	int fd;
	void *base;
	size_t size;
	uint64_t id;   /* 0: not registered on the current connection */
};

struct mfma_client {
	int fd;
	/* Buffers for answers' D with no place of the caller's (made at the
	 * first such answer). */
	struct d_pool *pool;
	int timeout_ms; /* < 0: forever */
	uint64_t spin_ns; /* mfma_set_spin_us: poll without blocking this long first */
	uint64_t next_id;
	uint64_t arrivals;
	struct frame_reader rd;
	struct client_pending *pend;
	size_t npend, cap;
	struct pending_index pend_at; /* id -> index in pend */
	size_t nuser;                 /* entries with user set (mfma_in_flight) */
	/* The submitted requests' answers in the order they arrived (id and
	 * seq), for mfma_wait(MFMA_ANY): a ring, stale entries (taken, or
	 * answered again since) skipped as they come to its front. */
	struct client_arrival {
		uint64_t id, seq;
	} *arr;
	size_t arr_head, arr_n, arr_cap; /* arr_cap a power of two */
	bool arr_lost; /* out of memory once: MFMA_ANY searches the table */
	mfma_progress_fn progress;
	void *progress_user;
	int dead; /* 0, or the negative errno that broke the connection */
	char dead_msg[MFMA_ERROR_MAX];
	char conn_msg[MFMA_ERROR_MAX / 2]; /* last error the daemon sent with no id */
	/* The daemon closed the connection with a verdict on it (conn_msg:
	 * no token, an oversized frame), or the protocol failed (a TLS
	 * alert): the same frames are not resent. */
	bool verdict;
	char endpoint[400];
	/* The endpoint list (one entry for a single endpoint or the default
	 * socket): after a connection is lost, the next call reconnects,
	 * starting with the endpoint after cur (the same one when alone). */
	struct endpoint eps[ENDPOINT_LIST_MAX];
	size_t neps, cur;
	uint8_t token[FRAME_TOKEN_MAX]; /* resent on each reconnect */
	size_t token_len;
	struct mfma_region *regions;
	bool is_unix;
	uint64_t encode_t0; /* when the GEMM being sent began to be built; 0: none */
	struct mfma_client_timing last; /* of the answer take() handed out last */
	/* tls: endpoints.  The context lives as long as the client (each
	 * reconnect makes a session from it); a session's ciphertext that is
	 * sealed and not yet sent waits in tls_out. */
	struct tls_ctx *tls_ctx;
	char tls_name[256];         /* the name to verify; "" = each endpoint's host */
	struct tls_session *tls;    /* NULL: plaintext */
	uint8_t *tls_in;            /* CLIENT_TLS_CHUNK bytes for recv() */
	uint8_t *tls_out;
	size_t tls_out_len, tls_out_off, tls_out_cap;
	/* mfma_cork: submitted frames held here, in order, and written in
	 * one call (client_flush_held), with the ids of their requests. */
	bool corked;
	uint8_t *held;
	size_t held_len, held_cap;
	uint64_t *held_ids;
	size_t nheld, held_ids_cap;
};

int client_fail(struct mfma_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void client_ok(struct mfma_error *err);
int client_check_alive(mfma_client *c, struct mfma_error *err);
/* When the connection is dead: connects to the next endpoint that
 * answers (in list order, wrapping; a single endpoint is tried again),
 * resends the token, then every resendable request whose answer has not
 * come (same ids: each is answered once), and drops the others that were
 * in flight.  Retries with short pauses, a bounded number of times and
 * not past `deadline` (0: none); requests whose own deadline passes are
 * answered DEADLINE_EXCEEDED here.  0 when connected, or the last error. */
int client_reconnect(mfma_client *c, uint64_t deadline, struct mfma_error *err);
/* Sends the token frame (len checked by the caller); a right token is not
 * answered. */
int client_send_token(mfma_client *c, const void *token, size_t len, struct mfma_error *err);

struct client_pending *client_pending_find(mfma_client *c, uint64_t id);

/* Whether code is one of enum mfma_code (the names mfma_code_name has). */
bool client_code_known(int code);

int client_pending_add(mfma_client *c, uint64_t id, bool user);
/* Frees the response it holds and drops the entry (pointers into the
 * table are invalid afterwards). */
void client_pending_remove(mfma_client *c, struct client_pending *p);
/* Forgets the frame kept for a resend (the request is not sent again). */
void client_pending_drop_frame(struct client_pending *p);

/* Writes one whole frame, reading answers while the socket is full.
 * *t_first (may be NULL) receives the time the first byte left. */
int client_send_frame(mfma_client *c, const uint8_t *buf, size_t len, uint64_t *t_first,
		      struct mfma_error *err);
/* The same with a descriptor passed (SCM_RIGHTS) on the frame's first
 * bytes; fd < 0: none. */
int client_send_frame_fd(mfma_client *c, const uint8_t *buf, size_t len, int fd,
			 uint64_t *t_first, struct mfma_error *err);
/* The same for a frame in pieces (writev: no piece is copied, except
 * into TLS records); len is their sum. */
int client_send_iov(mfma_client *c, const struct iovec *iov, size_t niov, size_t len, int fd,
		    uint64_t *t_first, struct mfma_error *err);

/* Corked (mfma_cork): keeps a copy of request id's whole frame to be
 * written with the others held (past CLIENT_HOLD_MAX bytes held, they
 * are written at once).  0, or a negative errno (out of memory, or the
 * write's). */
int client_hold(mfma_client *c, uint64_t id, const uint8_t *frame, size_t len,
		struct mfma_error *err);
/* Writes the held frames in one call (none: nothing) and stamps their
 * requests' send times.  On an error the connection is dead and the
 * frames are gone with it: a resendable request goes again from its own
 * copy on the next connection, as one in flight does. */
int client_flush_held(mfma_client *c, struct mfma_error *err);

/* The region of this client (registered on the current connection)
 * holding [p, p + len), or NULL. */
struct mfma_region *client_region_of(mfma_client *c, const void *p, size_t len);
/* Forgets every region's id (the connection they belonged to is gone). */
void client_regions_lost(mfma_client *c);
/* Whether p lies in a region of the client that went with a lost
 * connection (still mapped until mfma_region_destroy). */
bool client_region_lost_at(mfma_client *c, const void *p);
/* Unmaps and frees one region, or every region of the client (mfma_close). */
void client_region_free(struct mfma_region *rg);
void client_regions_free(mfma_client *c);
/* The RegisterRegion round trip, the memfd passed with the frame. */
int client_region_register(mfma_client *c, int fd, uint64_t bytes, uint64_t *region,
			   struct mfma_error *err);
int client_region_unregister(mfma_client *c, uint64_t region, struct mfma_error *err);

/* Waits until the request `id` (or, with MFMA_ANY, any submitted request)
 * has its answer; timeout_ms < 0 waits forever. */
int client_wait(mfma_client *c, uint64_t id, int timeout_ms, struct client_pending **out,
		struct mfma_error *err);

#endif
