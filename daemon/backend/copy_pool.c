#include "copy_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

struct copy_pool {
	pthread_mutex_t mu;
	pthread_cond_t go, idle;
	pthread_t *th;
	unsigned n;
	bool stop;
	uint64_t gen;     /* the job's number: every helper joins each one */
	unsigned left;    /* helpers done with the current job */
	/* The current job; set under mu, before gen moves. */
	copy_slice_fn fn;
	void *job;
	size_t len, nslices;
	_Atomic size_t next; /* the next slice to take */
};

/* Takes slices until none is left. */
static void work(struct copy_pool *p, copy_slice_fn fn, void *job, size_t len, size_t nslices)
{
	for (;;) {
		size_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
		if (i >= nslices)
			return;
		size_t off = i * COPY_POOL_SLICE;
		fn(job, off, len - off < COPY_POOL_SLICE ? len - off : COPY_POOL_SLICE);
	}
}

static void *helper_main(void *arg)
{
	struct copy_pool *p = arg;
	uint64_t seen = 0;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->stop)
			break;
		seen = p->gen;
		copy_slice_fn fn = p->fn;
		void *job = p->job;
		size_t len = p->len, nslices = p->nslices;
		pthread_mutex_unlock(&p->mu);
		work(p, fn, job, len, nslices);
		pthread_mutex_lock(&p->mu);
		if (++p->left == p->n)
			pthread_cond_signal(&p->idle);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int copy_pool_start(struct copy_pool **pool, unsigned threads)
{
	*pool = NULL;
	struct copy_pool *p = calloc(1, sizeof(*p));
	if (!p || !(p->th = calloc(threads ? threads : 1, sizeof(*p->th)))) {
		free(p);
		return -ENOMEM;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->idle, NULL);
	for (; p->n < threads; p->n++)
		if (pthread_create(&p->th[p->n], NULL, helper_main, p) != 0) {
			copy_pool_stop(p);
			return -EAGAIN;
		}
	*pool = p;
	return 0;
}

void copy_pool_stop(struct copy_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->n; i++)
		pthread_join(p->th[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->idle);
	free(p->th);
	free(p);
}

void copy_pool_run(struct copy_pool *p, copy_slice_fn fn, void *job, size_t len)
{
	if (!p || p->n == 0 || len < COPY_POOL_MIN) {
		if (len)
			fn(job, 0, len);
		return;
	}
	size_t nslices = (len + COPY_POOL_SLICE - 1) / COPY_POOL_SLICE;
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->job = job;
	p->len = len;
	p->nslices = nslices;
	atomic_store_explicit(&p->next, 0, memory_order_relaxed);
	p->left = 0;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	work(p, fn, job, len, nslices);
	/* Every slice is taken; those a helper took are done when it leaves
	 * the job.  Every helper joins every job, one that wakes late finding
	 * nothing left: waiting for all of them keeps a late one from taking
	 * a slice of the next job with this one's callback. */
	pthread_mutex_lock(&p->mu);
	while (p->left < p->n)
		pthread_cond_wait(&p->idle, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

unsigned copy_pool_helpers_for(long cores)
{
	return cores >= 8 ? 3 : 0;
}
