/* The frame reader on arbitrary bytes, fed in pieces whose sizes the
 * input chooses, with the in-place read path (capacity_for, space,
 * commit), take, take_frame and shrink mixed in as the daemon uses them,
 * and, when the input says so, its buffers carved from an arena as the
 * daemon's request frames are (limits.pinned_reads_mb: moved, cut in
 * place, falling back to malloc when the arena is full).  Every frame
 * that comes out must lie inside the bytes that went in, a taken frame
 * keeps its bytes, a buffer never grows past the announced frame (no
 * doubling), and once the reader is freed no arena block is left out. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "frame_arena.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One arena for every input (each leaves it empty): small, so that it
 * fills and the reader falls back to malloc. */
static struct frame_arena *arena;

static void *carve(void *arg, size_t len)
{
	return frame_arena_alloc(arg, len, 0);
}

/* A frame the reader handed over, its payload checked against a copy made
 * before, then freed as the daemon frees it. */
static void take_one(struct frame_reader *r, const uint8_t *payload, size_t len, bool whole)
{
	uint8_t *copy = len ? malloc(len) : NULL;
	if (len && !copy)
		return;
	if (len)
		memcpy(copy, payload, len);
	uint8_t *buf;
	size_t cap = 0;
	if (whole) {
		buf = frame_reader_take_frame(r, &payload, len, &cap);
		if (buf && (payload < buf || payload + len > buf + cap))
			__builtin_trap();
	} else {
		buf = frame_reader_take(r);
	}
	if (buf && whole && len && memcmp(payload, copy, len) != 0)
		__builtin_trap();
	free(copy);
	frame_arena_free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	if (!arena && frame_arena_create(256u << 10, &arena) < 0)
		__builtin_trap();
	struct frame_reader r;
	/* The limit is the input's to choose, within 1 MiB. */
	frame_reader_init(&r, ((size_t)data[0] << 12) + 1);
	size_t step = (size_t)(data[1] % 64) + 1;
	/* Bit 0: buffers from the arena, from (data[2] >> 1) * 32 bytes on. */
	const struct frame_mem mem = { .alloc = carve, .free = frame_arena_free,
				       .owns = frame_arena_owns, .cut = frame_arena_cut,
				       .arg = arena, .min = (size_t)(data[2] >> 1) * 32 };
	if (data[2] & 1)
		frame_reader_set_mem(&r, &mem);
	data += 3;
	size -= 3;
	size_t off = 0;
	unsigned round = 0;
	while (off < size) {
		size_t n = size - off < step ? size - off : step;
		size_t want = 1 + (data[off] & 0x3f);
		size_t cap = frame_reader_capacity_for(&r, want);
		uint8_t *p;
		size_t avail;
		if (frame_reader_space(&r, want, &p, &avail) < 0)
			break;
		if (r.cap != cap || avail < want)
			__builtin_trap();
		if (n > avail)
			n = avail;
		memcpy(p, data + off, n);
		frame_reader_commit(&r, n);
		off += n;
		const uint8_t *payload;
		size_t len;
		int rc;
		while ((rc = frame_reader_next(&r, &payload, &len)) == 1) {
			if (payload < r.buf || payload + len > r.buf + r.len)
				__builtin_trap();
			volatile uint8_t sink = len ? payload[len - 1] : 0;
			(void)sink;
			++round;
			if (round % 3 == 0)
				take_one(&r, payload, len, false);
			else if (round % 5 == 0)
				take_one(&r, payload, len, true);
		}
		if (rc < 0)
			break;
		frame_reader_shrink(&r, 64);
	}
	frame_reader_free(&r);
	struct frame_arena_usage u;
	frame_arena_usage(arena, &u);
	if (u.frames != 0 || u.used != 0)
		__builtin_trap();
	return 0;
}
