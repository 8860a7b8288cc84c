/* Where a client's request of a given id is in its table of requests in
 * flight (client.c): a hash from id to the entry's index, so that finding
 * the request an answer is for costs the same with 256 in flight as with
 * one.  The table was searched from the start for each answer, twice
 * (placing D, then filing the answer): a tenth of a client's time with
 * 256 requests in flight on one connection (bench/RESULTS.md).
 *
 * Open addressing with linear probing, at most half full, deletion by
 * shifting back (no tombstones).  Any 64-bit id.  Pure: no I/O. */
#ifndef MFMA_PENDING_INDEX_H
#define MFMA_PENDING_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pending_index {
	uint64_t *ids;
	uint32_t *slots; /* the entry's index + 1; 0: an empty place */
	size_t cap;      /* a power of two, or 0 before the first put */
	size_t n;
};

/* Maps id to slot, replacing what it mapped to.  0, or -ENOMEM (the index
 * unchanged); a put of an id already there never allocates. */
int pending_index_put(struct pending_index *x, uint64_t id, uint32_t slot);

/* The slot of id, in *slot; false when id is not there. */
bool pending_index_get(const struct pending_index *x, uint64_t id, uint32_t *slot);

/* Forgets id (nothing when it is not there). */
void pending_index_del(struct pending_index *x, uint64_t id);

/* Frees the index, which is then empty and usable again. */
void pending_index_free(struct pending_index *x);

#endif
