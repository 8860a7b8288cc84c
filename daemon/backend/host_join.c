/* Batched launches joined in host memory (host_join.h). */
#include "host_join.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static void *grow(struct host_join *j, int i, size_t bytes)
{
	if (bytes > j->cap[i]) {
		free(j->buf[i]);
		j->buf[i] = malloc(bytes);
		j->cap[i] = j->buf[i] ? bytes : 0;
	}
	return j->buf[i];
}

int host_join_gather(struct host_join *j, const struct mfma_gemm *g, struct mfma_gemm *run,
		     char *err, size_t errlen)
{
	size_t es = mfma_dtype_size(g->in_dtype), os = mfma_dtype_size(g->out_dtype);
	void *b = grow(j, 0, (size_t)g->k * g->n * es);
	void *c = g->beta != 0.0f ? grow(j, 1, (size_t)g->m * g->n * os) : NULL;
	void *d = grow(j, 2, (size_t)g->m * g->n * os);
	if (!b || !d || (g->beta != 0.0f && !c)) {
		snprintf(err, errlen, "out of host memory joining a batch of %u requests", g->nparts);
		return -ENOMEM;
	}
	for (size_t r = 0; r < g->k; r++)
		mfma_gemm_gather_row(g, 'b', r, es, (unsigned char *)b + r * g->n * es);
	for (size_t r = 0; c && r < g->m; r++)
		mfma_gemm_gather_row(g, 'c', r, os, (unsigned char *)c + r * g->n * os);
	run->b = b;
	run->c = c;
	run->d = d;
	run->nparts = 0;
	run->parts = NULL;
	return 0;
}

void host_join_scatter(const struct mfma_gemm *g, const struct mfma_gemm *run)
{
	const size_t os = mfma_dtype_size(g->out_dtype);
	for (size_t r = 0; r < g->m; r++)
		mfma_gemm_scatter_row(g, r, os, (const unsigned char *)run->d + r * g->n * os);
}

void host_join_free(struct host_join *j)
{
	for (int i = 0; i < 3; i++) {
		free(j->buf[i]);
		j->buf[i] = NULL;
		j->cap[i] = 0;
	}
}
