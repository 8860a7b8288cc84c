/* A bump arena for protobuf-c's decoder: every allocation of one decode
 * comes out of a block or two, and the message is freed by freeing the
 * arena, not field by field.
 *
 * protobuf_c_message_unpack with the default allocator makes a malloc for
 * every submessage, string and copied bytes field, and
 * protobuf_c_message_free_unpacked walks the message again to free each;
 * for a small GEMM request that is most of what decoding it costs (the
 * daemon's loop thread, bench/RESULTS.md).  A message decoded into an
 * arena must never go to protobuf_c_message_free_unpacked with another
 * allocator, nor outlive msg_arena_free.  Pure: no I/O. */
#ifndef MFMA_MSG_ARENA_H
#define MFMA_MSG_ARENA_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

struct msg_arena;

/* An arena whose first block holds `bytes` (more blocks come as needed,
 * each its own malloc); NULL when out of memory. */
struct msg_arena *msg_arena_new(size_t bytes);

/* The allocator that decodes into a (its free does nothing: the arena's
 * own is the only one). */
ProtobufCAllocator msg_arena_allocator(struct msg_arena *a);

/* Bytes the arena holds: its blocks' sizes (what a decode made it take). */
size_t msg_arena_bytes(const struct msg_arena *a);

/* Empties the arena (everything allocated from it goes) for another
 * decode. */
void msg_arena_reset(struct msg_arena *a);

/* Frees the arena and everything allocated from it; NULL is fine. */
void msg_arena_free(struct msg_arena *a);

#endif
