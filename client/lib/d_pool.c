/* A client's buffers for answers' D (d_pool.h). */
#include "d_pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "block_list.h"

/* Buffers are whole pages: a D of a few bytes more than the last reuses
 * its buffer. */
#define PAGE 4096u

struct d_pool {
	pthread_mutex_t mu;
	size_t out;   /* buffers taken and not given back */
	bool closed;  /* the client let go */
	size_t n, bytes;
	void *buf[D_POOL_KEPT];
	size_t cap[D_POOL_KEPT];
};

struct d_pool *d_pool_new(void)
{
	struct d_pool *p = calloc(1, sizeof(*p));
	if (p && pthread_mutex_init(&p->mu, NULL) != 0) {
		free(p);
		return NULL;
	}
	return p;
}

static void destroy(struct d_pool *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->buf[i]);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

/* Takes kept buffer at out of the pool (the rest stay oldest first). */
static void *drop(struct d_pool *p, size_t at)
{
	void *b = p->buf[at];
	p->bytes -= p->cap[at];
	p->n--;
	for (size_t i = at; i < p->n; i++) {
		p->buf[i] = p->buf[i + 1];
		p->cap[i] = p->cap[i + 1];
	}
	return b;
}

void *d_pool_take(struct d_pool *p, size_t len, size_t *cap)
{
	pthread_mutex_lock(&p->mu);
	/* The smallest kept buffer that holds len and is not twice as big. */
	size_t best = p->n;
	for (size_t i = 0; i < p->n; i++)
		if (p->cap[i] >= len && p->cap[i] / 2 <= len &&
		    (best == p->n || p->cap[i] < p->cap[best]))
			best = i;
	void *b = NULL;
	if (best < p->n) {
		*cap = p->cap[best];
		b = drop(p, best);
	} else if (len <= SIZE_MAX - PAGE) {
		*cap = (len + PAGE - 1) / PAGE * PAGE;
		b = malloc(*cap ? *cap : PAGE);
	}
	if (b)
		p->out++;
	pthread_mutex_unlock(&p->mu);
	return b;
}

void d_pool_give(struct d_pool *p, void *buf, size_t cap)
{
	if (!buf)
		return;
	void *evicted[D_POOL_KEPT];
	size_t nev = 0;
	pthread_mutex_lock(&p->mu);
	p->out--;
	if (!p->closed && block_list_keeps() && cap <= D_POOL_BYTES) {
		/* Room made by letting the oldest go: the pool follows the
		 * sizes the client gets now. */
		while (p->n == D_POOL_KEPT || cap > D_POOL_BYTES - p->bytes)
			evicted[nev++] = drop(p, 0);
		p->buf[p->n] = buf;
		p->cap[p->n++] = cap;
		p->bytes += cap;
		buf = NULL;
	}
	bool last = p->closed && p->out == 0;
	pthread_mutex_unlock(&p->mu);
	free(buf);
	for (size_t i = 0; i < nev; i++)
		free(evicted[i]);
	if (last)
		destroy(p);
}

void d_pool_close(struct d_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->closed = true;
	for (size_t i = 0; i < p->n; i++)
		free(p->buf[i]);
	p->n = p->bytes = 0;
	bool last = p->out == 0;
	pthread_mutex_unlock(&p->mu);
	if (last)
		destroy(p);
}

size_t d_pool_kept(struct d_pool *p, size_t *bytes)
{
	pthread_mutex_lock(&p->mu);
	size_t n = p->n;
	if (bytes)
		*bytes = p->bytes;
	pthread_mutex_unlock(&p->mu);
	return n;
}
