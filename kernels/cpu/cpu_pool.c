/* A fixed team of threads for the CPU GEMMs (cpu_pool.h).
 *
 * One mutex and two condition variables: `go` wakes the threads for a new
 * job (a generation number tells a new job from a spurious wake-up),
 * `done` wakes the caller when the last id of the job has returned.  A
 * thread whose id is not part of the job (n smaller than the pool) only
 * notes the generation and sleeps again.  The caller waits for every id
 * before it returns, so the next job can never start while a thread is
 * still inside the previous one. */
#include "cpu_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

struct pool_thread {
	struct cpu_pool *pool;
	unsigned id;
	pthread_t tid;
};

struct cpu_pool {
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	uint64_t gen;     /* counts jobs; a thread runs each generation once */
	unsigned n;       /* ids of the current job */
	unsigned pending; /* pool threads of the current job still running */
	cpu_pool_fn fn;
	void *arg;
	bool quit;
	unsigned nthreads; /* started */
	struct pool_thread *threads;
};

static void *pool_main(void *p)
{
	struct pool_thread *t = p;
	struct cpu_pool *pool = t->pool;
	/* Generation 0 is "no job yet": a thread that is slow to start must
	 * still run the first job, which may already have been posted. */
	uint64_t seen = 0;
	pthread_mutex_lock(&pool->mu);
	for (;;) {
		while (!pool->quit && pool->gen == seen)
			pthread_cond_wait(&pool->go, &pool->mu);
		if (pool->quit)
			break;
		seen = pool->gen;
		if (t->id >= pool->n)
			continue;
		cpu_pool_fn fn = pool->fn;
		void *arg = pool->arg;
		pthread_mutex_unlock(&pool->mu);
		fn(arg, t->id);
		pthread_mutex_lock(&pool->mu);
		if (--pool->pending == 0)
			pthread_cond_signal(&pool->done);
	}
	pthread_mutex_unlock(&pool->mu);
	return NULL;
}

struct cpu_pool *cpu_pool_create(unsigned threads)
{
	struct cpu_pool *pool = calloc(1, sizeof(*pool));
	if (!pool)
		return NULL;
	unsigned want = threads > 1 ? threads - 1 : 0;
	if (want) {
		pool->threads = calloc(want, sizeof(*pool->threads));
		if (!pool->threads) {
			free(pool);
			return NULL;
		}
	}
	pthread_mutex_init(&pool->mu, NULL);
	pthread_cond_init(&pool->go, NULL);
	pthread_cond_init(&pool->done, NULL);
	for (unsigned i = 0; i < want; i++) {
		struct pool_thread *t = &pool->threads[i];
		t->pool = pool;
		t->id = i + 1;
		/* A refused thread shrinks the pool; jobs are planned for
		 * cpu_pool_size, so fewer threads only means less parallelism. */
		if (pthread_create(&t->tid, NULL, pool_main, t) != 0)
			break;
		pool->nthreads++;
	}
	return pool;
}

void cpu_pool_destroy(struct cpu_pool *pool)
{
	if (!pool)
		return;
	pthread_mutex_lock(&pool->mu);
	pool->quit = true;
	pthread_cond_broadcast(&pool->go);
	pthread_mutex_unlock(&pool->mu);
	for (unsigned i = 0; i < pool->nthreads; i++)
		pthread_join(pool->threads[i].tid, NULL);
	pthread_cond_destroy(&pool->done);
	pthread_cond_destroy(&pool->go);
	pthread_mutex_destroy(&pool->mu);
	free(pool->threads);
	free(pool);
}

unsigned cpu_pool_size(const struct cpu_pool *pool)
{
	return pool ? pool->nthreads + 1 : 1;
}

int cpu_pool_run(struct cpu_pool *pool, unsigned n, cpu_pool_fn fn, void *arg)
{
	if (!fn || n == 0 || n > cpu_pool_size(pool))
		return -EINVAL;
	if (n == 1) {
		fn(arg, 0);
		return 0;
	}
	pthread_mutex_lock(&pool->mu);
	pool->fn = fn;
	pool->arg = arg;
	pool->n = n;
	pool->pending = n - 1;
	pool->gen++;
	pthread_cond_broadcast(&pool->go);
	pthread_mutex_unlock(&pool->mu);
	fn(arg, 0);
	pthread_mutex_lock(&pool->mu);
	while (pool->pending > 0)
		pthread_cond_wait(&pool->done, &pool->mu);
	pthread_mutex_unlock(&pool->mu);
	return 0;
}
