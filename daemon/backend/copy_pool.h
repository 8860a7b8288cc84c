/* Host copies split across a few threads.  A copy through the pinned
 * staging pool is one thread's memcpy from or into pageable memory (8 to
 * 10 GB/s on the H200's host) while the bus moves 50 GB/s: a batch's
 * 4 MiB of parts took 450 us to gather, the same to scatter.  A copy that
 * can be cut into slices (a callback given an offset and a length) runs
 * on a team of threads (kernels/cpu/cpu_pool.h, the CPU backend's) and
 * the caller together.  Pure threads and memory: no device, no I/O. */
#ifndef MFMAD_COPY_POOL_H
#define MFMAD_COPY_POOL_H

#include <stddef.h>

#include "cpu_pool.h"

/* Does [off, off + len) of the copy the job describes. */
typedef void (*copy_slice_fn)(void *job, size_t off, size_t len);

/* A copy shorter than this runs on the caller alone; longer ones are cut
 * into slices of COPY_POOL_SLICE, which the team's ids take in turn. */
#define COPY_POOL_MIN (512u * 1024u)
#define COPY_POOL_SLICE (256u * 1024u)

/* Runs fn over [0, len) on the team and the calling thread, each byte
 * once, and returns when every slice is done.  One caller at a time per
 * team.  A NULL team, a team of one, or len under COPY_POOL_MIN calls
 * fn(job, 0, len) here. */
void copy_pool_run(struct cpu_pool *team, copy_slice_fn fn, void *job, size_t len);

/* How many threads (the caller included) a device's copy team gets on a
 * host of `cores`: the caller alone on a small one, where helpers would
 * take the cores the loop and the clients need. */
unsigned copy_pool_threads_for(long cores);

#endif
