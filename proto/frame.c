#include "frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void frame_header_put(uint8_t out[FRAME_HEADER_SIZE], uint32_t len)
{
	out[0] = (uint8_t)(len >> 24);
	out[1] = (uint8_t)(len >> 16);
	out[2] = (uint8_t)(len >> 8);
	out[3] = (uint8_t)len;
}

uint32_t frame_header_get(const uint8_t in[FRAME_HEADER_SIZE])
{
	return (uint32_t)in[0] << 24 | (uint32_t)in[1] << 16 | (uint32_t)in[2] << 8 | in[3];
}

void frame_reader_init(struct frame_reader *r, size_t max_frame)
{
	memset(r, 0, sizeof(*r));
	r->max_frame = max_frame;
}

void frame_reader_set_mem(struct frame_reader *r, const struct frame_mem *mem)
{
	r->mem = mem;
}

/* Whether buf came from the reader's frame_mem. */
static bool from_mem(const struct frame_reader *r, const void *buf)
{
	return r->mem && buf && r->mem->owns(buf);
}

/* A buffer of len bytes from the frame_mem, when the reader has one and
 * len is large enough for it; NULL otherwise (the caller's malloc). */
static uint8_t *mem_alloc(const struct frame_reader *r, size_t len)
{
	return r->mem && len >= r->mem->min ? r->mem->alloc(r->mem->arg, len) : NULL;
}

static void buf_free(const struct frame_reader *r, void *buf)
{
	if (from_mem(r, buf))
		r->mem->free(buf);
	else
		free(buf);
}

void frame_reader_free(struct frame_reader *r)
{
	if (!r)
		return;
	buf_free(r, r->buf);
	memset(r, 0, sizeof(*r));
}

size_t frame_reader_capacity_for(const struct frame_reader *r, size_t want)
{
	size_t have = r->len - r->start;
	if (want == 0)
		want = 1;
	/* When a frame header is buffered, reserve room for the whole frame
	 * (within the limit) so a large frame is read in one allocation. */
	if (have >= FRAME_HEADER_SIZE) {
		size_t flen = frame_header_get(r->buf + r->start);
		if (flen <= r->max_frame && FRAME_HEADER_SIZE + flen > have + want)
			want = FRAME_HEADER_SIZE + flen - have;
	}
	if (want > SIZE_MAX - have)
		return SIZE_MAX;
	return have + want <= r->cap ? r->cap : have + want;
}

void frame_reader_shrink(struct frame_reader *r, size_t keep)
{
	/* A frame_mem's buffer goes back whatever its size: that memory is
	 * for frames being read and kept, not for idle readers. */
	if (r->start != r->len || (r->cap <= keep && !from_mem(r, r->buf)))
		return;
	buf_free(r, r->buf);
	r->buf = NULL;
	r->cap = r->len = r->start = 0;
}

/* The buffer grows to ncap bytes, keeping the len bytes it holds: from
 * the frame_mem where it is large enough and has room, else realloc (a
 * buffer from the frame_mem is moved, never realloc'ed). */
static int grow(struct frame_reader *r, size_t ncap)
{
	uint8_t *nb = mem_alloc(r, ncap);
	if (!nb && from_mem(r, r->buf) && !(nb = malloc(ncap)))
		return -ENOMEM; /* never realloc'ed */
	if (nb) {
		if (r->len)
			memcpy(nb, r->buf, r->len);
		buf_free(r, r->buf);
	} else {
		nb = realloc(r->buf, ncap);
		if (!nb)
			return -ENOMEM;
	}
	r->buf = nb;
	r->cap = ncap;
	return 0;
}

int frame_reader_space(struct frame_reader *r, size_t want, uint8_t **ptr, size_t *avail)
{
	size_t ncap = frame_reader_capacity_for(r, want);
	if (ncap == SIZE_MAX)
		return -ENOMEM;
	/* Drop consumed bytes first so a long-lived connection does not grow. */
	if (r->start > 0) {
		memmove(r->buf, r->buf + r->start, r->len - r->start);
		r->len -= r->start;
		r->start = 0;
	}
	if (ncap > r->cap) {
		int rc = grow(r, ncap);
		if (rc < 0)
			return rc;
	}
	*ptr = r->buf + r->len;
	*avail = r->cap - r->len;
	return 0;
}

void frame_reader_commit(struct frame_reader *r, size_t n)
{
	r->len += n;
}

int frame_reader_feed(struct frame_reader *r, const void *data, size_t n)
{
	uint8_t *p;
	size_t avail;
	int rc = frame_reader_space(r, n, &p, &avail);
	if (rc < 0)
		return rc;
	memcpy(p, data, n);
	frame_reader_commit(r, n);
	return 0;
}

int frame_reader_next(struct frame_reader *r, const uint8_t **payload, size_t *len)
{
	size_t have = r->len - r->start;
	if (have < FRAME_HEADER_SIZE)
		return 0;
	size_t flen = frame_header_get(r->buf + r->start);
	if (flen > r->max_frame) {
		*len = flen;
		return -EMSGSIZE;
	}
	if (have - FRAME_HEADER_SIZE < flen)
		return 0;
	*payload = r->buf + r->start + FRAME_HEADER_SIZE;
	*len = flen;
	r->start += FRAME_HEADER_SIZE + flen;
	return 1;
}

uint8_t *frame_reader_take(struct frame_reader *r)
{
	size_t rest = r->len - r->start;
	if (rest == 0) {
		/* Nothing to keep: the reader starts empty, and a caller that
		 * takes the buffer off the loop need not allocate. */
		uint8_t *old = r->buf;
		r->buf = NULL;
		r->cap = r->len = r->start = 0;
		return old;
	}
	size_t ncap = rest > 4096 ? rest : 4096;
	uint8_t *nb = mem_alloc(r, ncap);
	if (!nb)
		nb = malloc(ncap);
	if (!nb)
		return NULL;
	memcpy(nb, r->buf + r->start, rest);
	uint8_t *old = r->buf;
	r->buf = nb;
	r->cap = ncap;
	r->len = rest;
	r->start = 0;
	return old;
}

uint8_t *frame_reader_take_frame(struct frame_reader *r, const uint8_t **payload, size_t len,
				 size_t *cap)
{
	size_t off = (size_t)(*payload - r->buf), end = off + len, had = r->cap;
	uint8_t *base = frame_reader_take(r);
	if (!base)
		return NULL;
	if (from_mem(r, base)) {
		/* Cut in place, or kept whole: it never moves. */
		*cap = end && r->mem->cut(base, end) ? end : had;
		return base;
	}
	/* Shrinking: the allocator keeps the block in place (or moves it);
	 * should it fail, the larger block is still good. */
	uint8_t *nb = realloc(base, end ? end : 1);
	if (nb)
		base = nb;
	*payload = base + off;
	*cap = nb ? end : had;
	return base;
}
