/* A GEMM request, and its answer, decoded by walkers made for their schema
 * instead of protobuf-c's generic, descriptor-driven decoder, which costs
 * some 5,000 instructions for an 80-byte request (most of what the daemon's
 * loop thread spent on one: bench/RESULTS.md) and 7,000 for its answer.
 *
 * It takes only the plain form: a Request of id, pad and gemm, each
 * field at most once in its message, every field one that the schema
 * names with its own wire type, no NUL byte in a string (what
 * wire_check_strings would then find).
 * Anything else (another body, an unknown or repeated field, a malformed
 * one) it leaves to protobuf-c by returning NULL, so that what protobuf
 * makes of such a frame (merging, the last member of a oneof winning,
 * unknown fields kept, the error) stays protobuf-c's.  What it returns is
 * what protobuf_c_message_unpack would have made of the same bytes
 * (test_wire_split holds both decoders to that, and the request fuzz
 * target the request's), allocated with alloc
 * (NULL: malloc), and freed as protobuf-c's are: with
 * protobuf_c_message_free_unpacked and the same allocator, or with the
 * arena (msg_arena.h).
 *
 * With keep_from (0: off), a matrix (the bytes at wire_split_gemm_paths:
 * A's data, values or meta, B's and C's data) of at least keep_from bytes
 * whose bytes start at a multiple of WIRE_SPLIT_ALIGN in memory points
 * into buf instead of being copied, as wire_split_unpack would leave it;
 * *in_place (may be NULL) says how many do.  buf must then outlive the
 * message, which is freed only with its arena: protobuf-c's free would
 * free buf's bytes.  Pure: no I/O. */
#ifndef MFMA_WIRE_GEMM_H
#define MFMA_WIRE_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "mfma.pb-c.h"

Mfma__V1__Request *wire_gemm_decode(const uint8_t *buf, size_t len, size_t keep_from,
				    size_t *in_place, ProtobufCAllocator *alloc);

/* Where an answer's D may be copied instead of into a piece of its own:
 * fn(ctx, id, len) gives room for D's len bytes of the answer to request
 * id, or NULL for a piece of the allocator's. */
struct wire_answer_place {
	void *(*fn)(void *ctx, uint64_t id, size_t len);
	void *ctx;
};

/* The same for an answer, as the client library decodes it: a Response of
 * id, status and gemm (or of id and status alone: an error's answer),
 * each field at most once, under the same rules: a GEMM's answer, or one
 * with no body (an error's); an answer with another body is declined.
 *
 * With place (NULL: none) and an allocator, D's bytes of an answer whose
 * id comes before its gemm (as the daemon writes them) go where place
 * says, and the message's D points there.  The allocator must then free
 * nothing piece by piece (msg_arena's): that memory is the caller's.  A
 * declined answer may have written there already. */
Mfma__V1__Response *wire_gemm_answer_decode(const uint8_t *buf, size_t len,
					    ProtobufCAllocator *alloc,
					    const struct wire_answer_place *place);

#endif
