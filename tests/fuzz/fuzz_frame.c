/* The frame reader on arbitrary bytes, fed in pieces whose sizes the
 * input chooses, with the in-place read path (capacity_for, space,
 * commit), take and shrink mixed in as the daemon uses them.  Every frame
 * that comes out must lie inside the bytes that went in, and a buffer
 * never grows past the announced frame (no doubling). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	struct frame_reader r;
	/* The limit is the input's to choose, within 1 MiB. */
	frame_reader_init(&r, ((size_t)data[0] << 12) + 1);
	size_t step = (size_t)(data[1] % 64) + 1;
	data += 2;
	size -= 2;
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
			if (++round % 3 == 0) {
				uint8_t *old = frame_reader_take(&r);
				free(old);
			}
		}
		if (rc < 0)
			break;
		frame_reader_shrink(&r, 64);
	}
	frame_reader_free(&r);
	return 0;
}
