/* Buffers for the D of answers that bring it in their bytes with no place
 * of the caller's to go (mfma_gemm_args.d unset): a client's freed ones
 * kept for its next answers.
 *
 * A pipelined client with 128 KiB answers, each D in a malloc of its own
 * freed with its result, took some 20 page faults an answer: glibc handed
 * the heap's top back to the kernel between answers, and the next copy
 * faulted it in again (3.5x slower than with a D of the caller's on a
 * 2-core host, bench/RESULTS.md).  A pool keeps up to D_POOL_KEPT buffers
 * and D_POOL_BYTES; a buffer is taken for a D of at least half its size.
 *
 * The pool belongs to its client and to every buffer out of it: a result
 * may be freed on any thread, and after its client is closed
 * (d_pool_close drops the client's share; the last buffer given back
 * frees the pool).  Under AddressSanitizer nothing is kept (as
 * block_list.h), so that a use after free is still caught.  No I/O. */
#ifndef MFMA_D_POOL_H
#define MFMA_D_POOL_H

#include <stddef.h>

#define D_POOL_KEPT 16
#define D_POOL_BYTES (4u << 20)

struct d_pool;

/* A pool with nothing kept; NULL when out of memory. */
struct d_pool *d_pool_new(void);

/* A buffer of at least len bytes (its size in *cap), kept or new; NULL
 * when out of memory. */
void *d_pool_take(struct d_pool *p, size_t len, size_t *cap);

/* Gives back buf (of cap bytes, from d_pool_take): kept while the pool
 * has room and its client is open, else freed. */
void d_pool_give(struct d_pool *p, void *buf, size_t cap);

/* The client lets go: what is kept is freed now, the pool itself with the
 * last buffer given back (now, when none is out).  NULL is fine. */
void d_pool_close(struct d_pool *p);

/* How many buffers are kept, and their bytes (for tests). */
size_t d_pool_kept(struct d_pool *p, size_t *bytes);

#endif
