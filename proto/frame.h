/* Framing: a 4-byte big-endian length, then that many bytes of one
 * protobuf message.  The reader is pure (bytes in, frames out, no I/O),
 * in the manner of hiredis' reader, so it can be unit tested and fuzzed;
 * both the daemon and the client library sit on it. */
#ifndef MFMA_FRAME_H
#define MFMA_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FRAME_HEADER_SIZE 4u

/* The payload of the first frame on a connection to a listener that asks
 * for a token (mfmad's listen.token_file): this prefix, then the token.  A
 * protobuf message cannot begin with a 0 byte (field number 0 does not
 * exist), so it is never taken for a request. */
#define FRAME_TOKEN_MAGIC "\0mfma-token\0"
#define FRAME_TOKEN_MAGIC_LEN 12u
/* The longest token frame a daemon reads before the token. */
#define FRAME_TOKEN_MAX 4096u

/* Where a reader's larger buffers come from, when not from malloc: the
 * daemon reads request frames into memory its GPUs registered once, so
 * that they copy a matrix straight from the frame.  Such a buffer is never
 * realloc'ed: growing it moves the bytes to a fresh one, and cutting it
 * (frame_reader_take_frame) asks cut.  free releases a buffer of either
 * kind, as the owner of a taken buffer must. */
struct frame_mem {
	/* A buffer of len bytes, or NULL (the reader then uses malloc). */
	void *(*alloc)(void *arg, size_t len);
	void (*free)(void *buf);
	bool (*owns)(const void *buf);
	/* Cuts a buffer from alloc to its first len bytes in place; false
	 * when it is kept whole. */
	bool (*cut)(void *buf, size_t len);
	void *arg;
	size_t min; /* buffers of fewer bytes come from malloc */
};

struct frame_reader {
	uint8_t *buf;
	size_t start; /* first unconsumed byte */
	size_t len;   /* bytes buffered, from 0 */
	size_t cap;
	size_t max_frame;
	const struct frame_mem *mem; /* NULL: malloc alone */
};

void frame_header_put(uint8_t out[FRAME_HEADER_SIZE], uint32_t len);
uint32_t frame_header_get(const uint8_t in[FRAME_HEADER_SIZE]);

void frame_reader_init(struct frame_reader *r, size_t max_frame);
/* Takes buffers of mem->min bytes or more from mem from now on; mem
 * outlives the reader.  NULL: malloc alone. */
void frame_reader_set_mem(struct frame_reader *r, const struct frame_mem *mem);
void frame_reader_free(struct frame_reader *r);

/* Space for at least `want` more bytes at the end of the buffer, for a
 * read to fill in place (libuv's alloc callback); then commit what was
 * written.  -ENOMEM when it cannot grow. */
int frame_reader_space(struct frame_reader *r, size_t want, uint8_t **ptr, size_t *avail);
void frame_reader_commit(struct frame_reader *r, size_t n);

/* The capacity frame_reader_space(r, want) would leave the buffer with
 * (its current capacity when it need not grow), so a caller can check a
 * memory budget before the allocation.  The buffer grows to exactly what
 * is needed: the whole announced frame once its header is buffered
 * (within max_frame), else the bytes held plus want; never doubled. */
size_t frame_reader_capacity_for(const struct frame_reader *r, size_t want);

/* Frees the buffer when every buffered byte has been returned and it is
 * larger than keep (or came from the frame_mem, whatever its size), so an
 * idle connection does not hold the memory of the largest frame it ever
 * sent, nor any of the frame_mem's. */
void frame_reader_shrink(struct frame_reader *r, size_t keep);

/* Copies bytes in (for callers that do not read in place). */
int frame_reader_feed(struct frame_reader *r, const void *data, size_t n);

/* 1 with payload and len set when a whole frame is buffered (the pointer is
 * valid until the next call on the reader), 0 when more bytes are needed,
 * -EMSGSIZE when the announced length exceeds max_frame (*len holds the
 * announced length; the stream cannot be trusted after that). */
int frame_reader_next(struct frame_reader *r, const uint8_t **payload, size_t *len);

/* Hands the reader's whole buffer to the caller (who frees it), so a
 * frame just returned by frame_reader_next() stays valid after the reader
 * moves on; bytes not yet returned are copied to a fresh buffer (the
 * frame_mem's where it is large enough; with none, the reader is left
 * empty, allocating nothing).  NULL (reader unchanged)
 * when that copy cannot be allocated. */
uint8_t *frame_reader_take(struct frame_reader *r);

/* frame_reader_take for a caller that keeps the frame frame_reader_next
 * just returned (payload, len) beyond it: the taken buffer is cut to end
 * with that frame (realloc), so it holds no read space past it; *payload
 * follows it should it move, and *cap is its size.  NULL (reader
 * unchanged) when out of memory. */
uint8_t *frame_reader_take_frame(struct frame_reader *r, const uint8_t **payload, size_t len,
				 size_t *cap);

/* Bytes buffered but not yet returned as frames. */
static inline size_t frame_reader_pending(const struct frame_reader *r)
{
	return r->len - r->start;
}

/* Whether a whole frame is buffered (frame_reader_next would return it,
 * or refuse it as too large). */
static inline bool frame_reader_has_frame(const struct frame_reader *r)
{
	size_t have = frame_reader_pending(r);
	return have >= FRAME_HEADER_SIZE &&
	       (size_t)frame_header_get(r->buf + r->start) <= have - FRAME_HEADER_SIZE;
}

#endif
