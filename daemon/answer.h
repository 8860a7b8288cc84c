/* The frame of a GEMM's answer, laid out before the GEMM runs so that the
 * device writes D straight into it: no copy of D into an encoded message,
 * whatever its size.  Protobuf allows a message's fields in any order, so
 * the fields known only afterwards (timing, device, variant, status) go
 * after D, and the one length that covers them (the GemmResult's) is
 * written as a five-byte varint, a valid if not the shortest encoding.
 * The frame may be carved from a device's pinned arena (the device then
 * copies D into it directly), else malloc'ed; either way it is freed with
 * frame_arena_free.  Pure: no I/O. */
#ifndef MFMAD_ANSWER_H
#define MFMAD_ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mfma.pb-c.h"
#include "mfma_dtype.h"

struct answer {
	uint8_t *frame;     /* the frame header first */
	bool carved;        /* frame came from the allocator answer_start was given */
	size_t cap;
	size_t d_at;        /* D's first byte */
	size_t d_bytes;
	size_t gemm_len_at; /* the GemmResult's five-byte length */
	size_t len;         /* the whole frame, once finished */
};

/* Memory for a frame of len bytes whose byte at offset `at` (D's first)
 * the allocator may align for its device's copies; NULL when it has none
 * now (backend_ops.frame_alloc). */
typedef void *(*answer_alloc_fn)(void *arg, size_t len, size_t at);

/* Lays out the answer to request id with an m x n D of dtype dt: D goes at
 * a->frame + a->d_at.  The frame comes from alloc(arg, ...) when alloc is
 * not NULL and has room, else from malloc.  0 or -ENOMEM. */
int answer_start(struct answer *a, uint64_t id, uint32_t m, uint32_t n, enum mfma_dtype dt,
		 answer_alloc_fn alloc, void *arg);
/* The same for a D written into a client's region: the answer's D names
 * the region (id, offset, length) and carries no bytes (a->d_bytes is 0). */
int answer_start_region(struct answer *a, uint64_t id, uint32_t m, uint32_t n,
			enum mfma_dtype dt, uint64_t region, uint64_t offset);

/* Writes what follows D and the lengths: the frame (a->frame, a->len) is
 * then an OK Response.  0, -ENOMEM, or -E2BIG past 4 GiB. */
int answer_finish(struct answer *a, const Mfma__V1__Timing *t, const Mfma__V1__DeviceRef *dev,
		  const char *variant);

/* Hands the frame over (the caller frees it with frame_arena_free) and
 * forgets it. */
uint8_t *answer_take(struct answer *a);
void answer_free(struct answer *a);

#endif
