/* The client library's decode of an answer on arbitrary bytes, the way
 * client/lib/client.c takes one: a GEMM's or an error's answer by its own
 * walker (wire_gemm_answer_decode), a large one with D left in the frame
 * (wire_split_unpack over the response's paths), anything else by
 * protobuf-c; a GEMM's answer decoded into one arena as the client keeps
 * it, and with malloc.  Each must mean exactly what protobuf-c's own decode makes
 * of the bytes: the same verdict where it decodes, and a message that
 * packs to the same bytes.  A daemon is the client's peer, not its
 * servant: an answer that a broken or hostile one sends must fail
 * cleanly, never be misread. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_stream.h"
#include "mfma.pb-c.h"
#include "msg_arena.h"
#include "wire_gemm.h"
#include "wire_split.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* m packs to the bytes plain packs to. */
static void same_bytes(const ProtobufCMessage *plain, const ProtobufCMessage *m)
{
	size_t l1 = protobuf_c_message_get_packed_size(plain);
	size_t l2 = protobuf_c_message_get_packed_size(m);
	if (l1 != l2)
		__builtin_trap();
	uint8_t *b1 = malloc(l1 + 1), *b2 = malloc(l2 + 1);
	if (b1 && b2) {
		if (protobuf_c_message_pack(plain, b1) != l1 || protobuf_c_message_pack(m, b2) != l2 ||
		    memcmp(b1, b2, l1) != 0)
			__builtin_trap();
	}
	free(b1);
	free(b2);
}

/* The caller's room for a placed D. */
static uint8_t room[4096];

static void *place_even(void *ctx, uint64_t id, size_t len)
{
	(void)ctx;
	return (id & 1) == 0 && len <= sizeof(room) ? room : NULL;
}

static void check_answer(const uint8_t *p, size_t n)
{
	Mfma__V1__Response *plain = mfma__v1__response__unpack(NULL, n, p);
	/* The walker takes a GEMM's answer or an error's and declines the
	 * rest; what it takes, protobuf-c must read the same. */
	Mfma__V1__Response *walked = wire_gemm_answer_decode(p, n, NULL, NULL);
	bool took = walked != NULL;
	if (walked) {
		if (!plain)
			__builtin_trap();
		if (walked->body_case != MFMA__V1__RESPONSE__BODY_GEMM &&
		    walked->body_case != MFMA__V1__RESPONSE__BODY__NOT_SET)
			__builtin_trap();
		same_bytes(&plain->base, &walked->base);
		mfma__v1__response__free_unpacked(walked, NULL);
	}
	/* The same walk into an arena of the client's size (more blocks as
	 * needed), D placed in the caller's room for even ids (as the client
	 * places it where the request asked): the same verdict and message,
	 * D in that room only where it was offered, freed with the arena. */
	struct msg_arena *a = msg_arena_new(1024);
	if (a) {
		ProtobufCAllocator al = msg_arena_allocator(a);
		struct wire_answer_place place = { .fn = place_even };
		Mfma__V1__Response *in_arena = wire_gemm_answer_decode(p, n, &al, &place);
		if ((in_arena != NULL) != took)
			__builtin_trap();
		if (in_arena) {
			same_bytes(&plain->base, &in_arena->base);
			const Mfma__V1__Matrix *d = in_arena->gemm ? in_arena->gemm->d : NULL;
			if (d && d->data.data == room &&
			    (!in_arena->has_id || (in_arena->id & 1) || d->data.len > sizeof(room)))
				__builtin_trap();
		}
		msg_arena_free(a);
	}
	/* The large answer's path: D's bytes left where they lie, in a
	 * buffer of the frame's own (as the client keeps it). */
	uint8_t *frame = malloc(n ? n : 1);
	if (frame) {
		memcpy(frame, p, n);
		size_t kept = 0;
		ProtobufCMessage *split = wire_split_unpack(
			&mfma__v1__response__descriptor, wire_split_response_paths,
			wire_split_response_npaths, WIRE_SPLIT_MIN_BYTES, frame, n, &kept);
		if ((split == NULL) != (plain == NULL))
			__builtin_trap();
		if (split)
			same_bytes(&plain->base, split);
		wire_split_free(split, wire_split_response_paths, wire_split_response_npaths, frame,
				n);
		free(frame);
	}
	if (plain)
		mfma__v1__response__free_unpacked(plain, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_stream(data, size, check_answer);
	return 0;
}
