/* A decoded request and the frame its matrices stay in.
 *
 * A GEMM's matrices are not copied out of the frame by the decode
 * (proto/wire_split.h): the message's bytes fields point into the frame's
 * buffer, which the message then owns, so the buffer lives exactly as
 * long as the request does and is freed with it.  A GEMM in the plain
 * form a client sends is decoded by its own decoder into an arena, freed
 * in one piece.  Pure: no I/O. */
#ifndef MFMAD_REQUEST_MSG_H
#define MFMAD_REQUEST_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mfma.pb-c.h"

struct msg_arena;

/* The most fields (through every sub-message) a request protobuf-c
 * decodes may have: a request has a few dozen, and each costs the decoder
 * some hundred bytes (wire_count_fields), so a frame of a million
 * two-byte fields cost 50 times its size, which no memory limit counted.
 * A frame over it is not decoded. */
#define REQUEST_FIELDS_MAX 1024u

struct request_msg {
	Mfma__V1__Request *req; /* NULL: the frame did not decode */
	/* Set when the GEMM decoder took the frame (proto/wire_gemm.h: a
	 * GEMM in its plain form, no NUL byte in its strings): the message
	 * lives in this arena, freed whole.  NULL: protobuf-c decoded it,
	 * with malloc. */
	struct msg_arena *arena;
	uint8_t *frame;         /* the buffer holding payload, owned; NULL: not ours */
	size_t frame_cap;       /* its size, which the holder of the message counts */
	const uint8_t *payload;
	size_t len;
	/* A GEMM's matrices of WIRE_SPLIT_MIN_BYTES or more: how many, and how
	 * many of them stayed in the frame. */
	size_t large, in_place;
	/* Over REQUEST_FIELDS_MAX: the frame was not decoded (req NULL). */
	bool too_many_fields;
};

/* Decodes the len bytes at payload, unless a request protobuf-c would
 * decode has more than REQUEST_FIELDS_MAX fields (too_many_fields).  With frame (the buffer payload lies
 * in, cap bytes, which m then owns whatever happens), a GEMM's matrices
 * of WIRE_SPLIT_MIN_BYTES or more stay in it; without, every field is
 * copied, as protobuf-c does, and payload may go once this returns. */
void request_msg_decode(struct request_msg *m, const uint8_t *payload, size_t len, uint8_t *frame,
			size_t cap);

/* Frees the message and its frame; NULL, or an empty one, is fine. */
void request_msg_free(struct request_msg *m);

/* The bytes the message makes the daemon hold with a frame: the frame's
 * buffer and whatever the decode copied out of it besides (a matrix that
 * could not stay in place, unknown fields, strings), through every
 * sub-message.  0 without a frame (the decode copied everything: its
 * matrices' sizes are the count). */
size_t request_msg_held_bytes(const struct request_msg *m);

#endif
