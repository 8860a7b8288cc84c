#include "copy_pool.h"

#include <stdatomic.h>

struct sliced {
	copy_slice_fn fn;
	void *job;
	size_t len, nslices;
	_Atomic size_t next;
};

/* One id of the team: takes slices until none is left. */
static void take_slices(void *arg, unsigned id)
{
	struct sliced *s = arg;
	(void)id;
	for (;;) {
		size_t i = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
		if (i >= s->nslices)
			return;
		size_t off = i * COPY_POOL_SLICE;
		s->fn(s->job, off, s->len - off < COPY_POOL_SLICE ? s->len - off : COPY_POOL_SLICE);
	}
}

void copy_pool_run(struct cpu_pool *team, copy_slice_fn fn, void *job, size_t len)
{
	unsigned ids = cpu_pool_size(team);
	if (ids <= 1 || len < COPY_POOL_MIN) {
		if (len)
			fn(job, 0, len);
		return;
	}
	struct sliced s = { .fn = fn, .job = job, .len = len,
			    .nslices = (len + COPY_POOL_SLICE - 1) / COPY_POOL_SLICE };
	atomic_init(&s.next, 0);
	if (ids > s.nslices)
		ids = (unsigned)s.nslices;
	/* ids <= the team's size: cpu_pool_run cannot refuse it. */
	(void)cpu_pool_run(team, ids, take_slices, &s);
}

unsigned copy_pool_threads_for(long cores)
{
	return cores >= 8 ? 4 : 1;
}
