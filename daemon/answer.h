/* The frame of a GEMM's answer, laid out before the GEMM runs so that the
 * device writes D straight into it: no copy of D into an encoded message,
 * whatever its size.  Protobuf allows a message's fields in any order, so
 * the fields known only afterwards (timing, device, variant, status) go
 * after D, and the one length that covers them (the GemmResult's) is
 * written as a five-byte varint, a valid if not the shortest encoding.
 * Pure: no I/O. */
#ifndef MFMAD_ANSWER_H
#define MFMAD_ANSWER_H

#include <stddef.h>
#include <stdint.h>

#include "mfma.pb-c.h"
#include "mfma_dtype.h"

struct answer {
	uint8_t *frame;     /* the frame header first */
	size_t cap;
	size_t d_at;        /* D's first byte */
	size_t d_bytes;
	size_t gemm_len_at; /* the GemmResult's five-byte length */
	size_t len;         /* the whole frame, once finished */
};

/* Lays out the answer to request id with an m x n D of dtype dt: D goes at
 * a->frame + a->d_at.  0 or -ENOMEM. */
int answer_start(struct answer *a, uint64_t id, uint32_t m, uint32_t n, enum mfma_dtype dt);
/* The same for a D written into a client's region: the answer's D names
 * the region (id, offset, length) and carries no bytes (a->d_bytes is 0). */
int answer_start_region(struct answer *a, uint64_t id, uint32_t m, uint32_t n,
			enum mfma_dtype dt, uint64_t region, uint64_t offset);

/* Writes what follows D and the lengths: the frame (a->frame, a->len) is
 * then an OK Response.  0, -ENOMEM, or -E2BIG past 4 GiB. */
int answer_finish(struct answer *a, const Mfma__V1__Timing *t, const Mfma__V1__DeviceRef *dev,
		  const char *variant);

/* Hands the frame over (the caller frees it) and forgets it. */
uint8_t *answer_take(struct answer *a);
void answer_free(struct answer *a);

#endif
