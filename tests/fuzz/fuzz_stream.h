/* A fuzz input read as a byte stream arrives on a socket: fed to a frame
 * reader in two pieces split where the input's first byte says, each
 * frame that comes out handed to each(); then the whole input handed to
 * each() as one payload.  For the targets that decode what a peer sends
 * (fuzz_request: the daemon's side; fuzz_answer: the client's). */
#ifndef MFMA_FUZZ_STREAM_H
#define MFMA_FUZZ_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"

static inline void fuzz_stream(const uint8_t *data, size_t size,
			       void (*each)(const uint8_t *p, size_t n))
{
	struct frame_reader r;
	frame_reader_init(&r, 1 << 20);
	size_t split = size ? data[0] % (size + 1) : 0;
	const uint8_t *p;
	size_t len;
	if (frame_reader_feed(&r, data, split) == 0) {
		while (frame_reader_next(&r, &p, &len) == 1)
			each(p, len);
	}
	if (frame_reader_feed(&r, data + split, size - split) == 0) {
		while (frame_reader_next(&r, &p, &len) == 1)
			each(p, len);
	}
	frame_reader_free(&r);
	each(data, size);
}

#endif
