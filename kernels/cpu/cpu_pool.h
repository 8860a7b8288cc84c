/* A fixed team of threads that runs one parallel job at a time: the CPU
 * backend keeps one per device, created when the device opens, so that a
 * GEMM wakes threads that already exist instead of creating and joining
 * its own.
 *
 * A job is fn(arg, id) for every id in [0, n): id 0 runs on the caller,
 * ids 1..n-1 each on their own pool thread, all at the same time, so the
 * ids may wait for each other (the blocked GEMM has a barrier between
 * column blocks).  cpu_pool_run returns when every id has returned.
 *
 * One caller at a time per pool (the device's worker thread); the pool
 * itself takes no lock the job can see.  Library code: no logging. */
#ifndef MFMA_CPU_POOL_H
#define MFMA_CPU_POOL_H

#ifdef __cplusplus
extern "C" {
#endif

struct cpu_pool;

typedef void (*cpu_pool_fn)(void *arg, unsigned id);

/* A pool for jobs of up to `threads` ids (the caller counts as one, so
 * threads - 1 threads are started; threads <= 1 starts none).  If the
 * system refuses a thread the pool keeps those it got: cpu_pool_size
 * says how many ids a job can have.  NULL when out of memory. */
struct cpu_pool *cpu_pool_create(unsigned threads);

/* Stops and joins the threads.  Accepts NULL.  No job may be running. */
void cpu_pool_destroy(struct cpu_pool *pool);

/* The most ids a job can have: the started threads plus the caller.  1
 * for a NULL pool. */
unsigned cpu_pool_size(const struct cpu_pool *pool);

/* Runs fn(arg, id) for id in [0, n) and waits for all of them.  The job
 * is planned for its n (buffers per id, a barrier of n), so n is never
 * cut: -EINVAL when n is 0 or above cpu_pool_size (nothing runs), else 0.
 * A NULL pool runs n = 1 on the caller. */
int cpu_pool_run(struct cpu_pool *pool, unsigned n, cpu_pool_fn fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif
