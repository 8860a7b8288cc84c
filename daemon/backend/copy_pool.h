/* Host copies split across a few threads.  A copy through the pinned
 * staging pool is one thread's memcpy from or into pageable memory (8 to
 * 10 GB/s on the H200's host) while the bus moves 50 GB/s: a batch's
 * 4 MiB of parts took 450 us to gather, the same to scatter.  The pool
 * runs a copy that can be cut into slices (a callback given an offset
 * and a length) on its threads and the caller's together.  Pure threads
 * and memory: no device, no I/O. */
#ifndef MFMAD_COPY_POOL_H
#define MFMAD_COPY_POOL_H

#include <stddef.h>

struct copy_pool;

/* Does [off, off + len) of the copy the job describes. */
typedef void (*copy_slice_fn)(void *job, size_t off, size_t len);

/* A copy shorter than this runs on the caller alone; longer ones are cut
 * into slices of COPY_POOL_SLICE. */
#define COPY_POOL_MIN (512u * 1024u)
#define COPY_POOL_SLICE (256u * 1024u)

/* Starts threads helpers (beside the caller's own).  0, or -ENOMEM /
 * -EAGAIN with nothing started. */
int copy_pool_start(struct copy_pool **pool, unsigned threads);
/* Stops and joins them; NULL is fine. */
void copy_pool_stop(struct copy_pool *pool);
/* Runs fn over [0, len) in slices on the pool and the calling thread,
 * each byte once, and returns when every slice is done.  One caller at a
 * time.  A NULL pool, or len under COPY_POOL_MIN, calls fn(job, 0, len)
 * here. */
void copy_pool_run(struct copy_pool *pool, copy_slice_fn fn, void *job, size_t len);
/* How many helpers a device's pool gets on this host: none on a small
 * one, where they would take the cores the loop and the clients need. */
unsigned copy_pool_helpers_for(long cores);

#endif
