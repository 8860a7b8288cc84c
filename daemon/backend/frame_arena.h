/* Answer frames carved from an arena: one block of anonymous memory that a
 * device registers once with its runtime (pinned), so that the device
 * copies a GEMM's D straight into the answer frame the socket is written
 * from, with no staging copy.  A backend makes one per device and hands
 * out frames from it (backend_ops.frame_alloc); the daemon frees every
 * frame, the arena's and the heap's alike, with frame_arena_free, which
 * knows which allocator owns it by the arenas' address ranges.
 *
 * Threading: frames are carved on a device's worker and freed on the loop
 * or a post thread; every call is safe from any thread.  Nothing waits:
 * a frame that does not fit is NULL at once and the caller uses malloc.
 *
 * Lifetime: the arena's owner (the device) closes it; the memory is
 * unmapped when the last frame carved from it is freed, so answers still
 * queued on sockets outlive the device.  The owner unregisters the memory
 * from its runtime before closing (once nothing copies into it). */
#ifndef MFMAD_FRAME_ARENA_H
#define MFMAD_FRAME_ARENA_H

#include <stdbool.h>
#include <stddef.h>

/* Blocks are whole grains, so that a frame's grain is its block's first
 * (the frame starts less than FRAME_ARENA_ALIGN into its block) and the
 * block's length is found from the frame's address alone. */
#define FRAME_ARENA_GRAIN 1024u
/* Where the caller asks, a frame's byte lies on this boundary: D's first
 * byte, so that the device's copies move whole 16-byte words (the batch's
 * copy kernel falls back to bytes on an unaligned address). */
#define FRAME_ARENA_ALIGN 128u
/* The largest arena: its bookkeeping is 8 bytes per grain, allocated
 * with it (4 GiB: 32 MiB). */
#define FRAME_ARENA_MAX_BYTES (4ull << 30)
/* Arenas alive at once (devices, and closed arenas with frames out). */
#define FRAME_ARENA_MAX 128

struct frame_arena;

/* What an arena holds now, for tests and counters. */
struct frame_arena_usage {
	size_t bytes;    /* the arena's size */
	size_t used;     /* bytes in blocks handed out */
	size_t frames;   /* blocks handed out */
	size_t extents;  /* free extents: 1 when nothing is fragmented */
	size_t largest;  /* the largest free extent, bytes */
};

/* Maps an arena of len bytes (rounded up to whole grains, at most
 * FRAME_ARENA_MAX_BYTES) and makes its frames known to frame_arena_free.
 * 0, -EINVAL (len 0 or too large), -ENOMEM, or -ENOSPC (FRAME_ARENA_MAX
 * arenas already). */
int frame_arena_create(size_t len, struct frame_arena **out);
void *frame_arena_base(const struct frame_arena *a);
size_t frame_arena_bytes(const struct frame_arena *a);
void frame_arena_usage(struct frame_arena *a, struct frame_arena_usage *u);

/* A frame of len bytes whose byte at offset `at` lies on a
 * FRAME_ARENA_ALIGN boundary; NULL when no free extent holds it, when len
 * is 0, or after frame_arena_close.  First fit, lowest address. */
void *frame_arena_alloc(struct frame_arena *a, size_t len, size_t at);

/* Cuts a frame to its first len bytes (len > 0), giving the grains
 * after them back: true, or false when the frame is not an arena's or is
 * no longer than that already.  The frame stays where it is. */
bool frame_arena_cut(void *frame, size_t len);

/* The owner is done with the arena: no frame is carved from it again,
 * and its memory goes once the frames out are freed (now if none).
 * Accepts NULL. */
void frame_arena_close(struct frame_arena *a);

/* Frees any answer frame: into the arena it was carved from, else with
 * free() (a malloc'ed frame).  Accepts NULL. */
void frame_arena_free(void *frame);
/* The bytes a frame holds: its block in an arena, else
 * malloc_usable_size (what the connection's memory caps count). */
size_t frame_arena_size(const void *frame);
/* Whether the frame was carved from an arena. */
bool frame_arena_owns(const void *frame);

#endif
