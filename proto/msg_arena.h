/* A bump arena behind a protobuf-c allocator (ProtobufCAllocator, which
 * the GEMM decoder, wire_gemm.h, takes as protobuf-c's decoder does):
 * every allocation of one decode comes out of a block or two, and the
 * message is freed by freeing the arena, not field by field.
 *
 * With malloc a decode makes an allocation for every submessage, string
 * and copied bytes field, and protobuf_c_message_free_unpacked walks the
 * message again to free each; for a small GEMM request that was a large
 * part of what the daemon's loop thread spent on it (bench/RESULTS.md).
 * A message decoded into an arena must never go to
 * protobuf_c_message_free_unpacked with another allocator, nor outlive
 * msg_arena_free.  Pure: no I/O. */
#ifndef MFMA_MSG_ARENA_H
#define MFMA_MSG_ARENA_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

struct msg_arena;

/* The first block of a daemon's request (request_msg.c): room for what
 * the GEMM decoder allocates (seven pieces, 528 bytes, for a GEMM on a
 * resident weight with B and D in a region) and a small frame's bytes
 * fields, which it copies; with the arena's header under 1 KiB.  Arenas
 * of this size are kept on their thread's list when freed (up to
 * BLOCK_LIST_KEPT, block_list.h) and reused: the loop makes and frees
 * them in bursts of hundreds. */
#define MSG_ARENA_REQUEST_BYTES 960

/* An arena whose first block holds `bytes` (more blocks come as needed,
 * each its own malloc); NULL when out of memory. */
struct msg_arena *msg_arena_new(size_t bytes);

/* The allocator that decodes into a (its free does nothing: the arena's
 * own is the only one). */
ProtobufCAllocator msg_arena_allocator(struct msg_arena *a);

/* The same, except that what does not fit in the first block fails
 * instead of taking a block of its own: a decode into it declines when
 * its pieces outgrow the block (the client's answers: a large D copied
 * into a block of its own, freed with the answer, left the heap's top
 * to be handed back to the kernel and faulted in again at the next). */
ProtobufCAllocator msg_arena_allocator_bounded(struct msg_arena *a);

/* The memory the arena holds: its first block and every block past it
 * (0 for NULL). */
size_t msg_arena_bytes(const struct msg_arena *a);

/* Frees the arena and everything allocated from it; NULL is fine. */
void msg_arena_free(struct msg_arena *a);

#endif
