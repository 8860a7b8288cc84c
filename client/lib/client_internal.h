/* What client.c (connection, I/O, requests in flight) and requests.c
 * (building and decoding messages) share.  Not installed. */
#ifndef MFMA_CLIENT_INTERNAL_H
#define MFMA_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "endpoint.h"
#include "frame.h"
#include "mfma.h"
#include "mfma_clock.h"
#include "mfma.pb-c.h"
#include "tls.h"

/* One request sent and not yet handed back to the caller. */
struct client_pending {
	uint64_t id;
	bool user;       /* submitted with mfma_gemm_submit (mfma_wait may return it) */
	bool abandoned;  /* its blocking caller timed out: drop the answer */
	uint64_t t_send_ns;
	uint64_t t_recv_ns;
	uint64_t seq;    /* arrival order, for MFMA_ANY */
	Mfma__V1__Response *resp; /* NULL until the answer arrives */
};

struct mfma_client {
	int fd;
	int timeout_ms; /* < 0: forever */
	uint64_t next_id;
	uint64_t arrivals;
	struct frame_reader rd;
	struct client_pending *pend;
	size_t npend, cap;
	mfma_progress_fn progress;
	void *progress_user;
	int dead; /* 0, or the negative errno that broke the connection */
	char dead_msg[MFMA_ERROR_MAX];
	char conn_msg[MFMA_ERROR_MAX / 2]; /* last error the daemon sent with no id */
	char endpoint[400];
	/* An endpoint list of two or more: after a connection is lost, the
	 * next call reconnects, starting with the endpoint after cur. */
	struct endpoint eps[ENDPOINT_LIST_MAX];
	size_t neps, cur;
	uint8_t token[FRAME_TOKEN_MAX]; /* resent on each reconnect */
	size_t token_len;
	/* tls: endpoints.  The context lives as long as the client (each
	 * reconnect makes a session from it); a session's ciphertext that is
	 * sealed and not yet sent waits in tls_out. */
	struct tls_ctx *tls_ctx;
	char tls_name[256];         /* the name to verify; "" = each endpoint's host */
	struct tls_session *tls;    /* NULL: plaintext */
	uint8_t *tls_in;            /* CLIENT_TLS_CHUNK bytes for recv() */
	uint8_t *tls_out;
	size_t tls_out_len, tls_out_off, tls_out_cap;
};

int client_fail(struct mfma_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void client_ok(struct mfma_error *err);
int client_check_alive(mfma_client *c, struct mfma_error *err);
/* When the connection is dead and the client has an endpoint list:
 * connects to the next endpoint that answers (in list order, wrapping),
 * drops every request that was in flight on the old connection and
 * resends the token.  1 when it reconnected, 0 when there was nothing
 * to do, or the error of the last endpoint tried. */
int client_reconnect(mfma_client *c, struct mfma_error *err);
/* Sends the token frame (len checked by the caller); a right token is not
 * answered. */
int client_send_token(mfma_client *c, const void *token, size_t len, struct mfma_error *err);
/* Marks the connection lost so that the next call reconnects (a daemon
 * that answered "shutting down" is draining). */
void client_abandon(mfma_client *c, int code, const char *why);

struct client_pending *client_pending_find(mfma_client *c, uint64_t id);
int client_pending_add(mfma_client *c, uint64_t id, bool user);
/* Frees the response it holds and drops the entry (pointers into the
 * table are invalid afterwards). */
void client_pending_remove(mfma_client *c, struct client_pending *p);

/* Writes one whole frame, reading answers while the socket is full.
 * *t_first (may be NULL) receives the time the first byte left. */
int client_send_frame(mfma_client *c, const uint8_t *buf, size_t len, uint64_t *t_first,
		      struct mfma_error *err);

/* Waits until the request `id` (or, with MFMA_ANY, any submitted request)
 * has its answer; timeout_ms < 0 waits forever. */
int client_wait(mfma_client *c, uint64_t id, int timeout_ms, struct client_pending **out,
		struct mfma_error *err);

#endif
