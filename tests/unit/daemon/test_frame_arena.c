/* The arena answer frames are carved from (daemon/backend/frame_arena.c):
 * alignment, first fit and merging, a full or fragmented arena answering
 * NULL at once (the caller's malloc fallback), the one free for arena and
 * heap frames, the arena outliving its close while frames are out, and
 * carving and freeing from several threads at once. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frame_arena.h"

#define G FRAME_ARENA_GRAIN

static struct frame_arena_usage usage(struct frame_arena *a)
{
	struct frame_arena_usage u;
	frame_arena_usage(a, &u);
	return u;
}

static void test_create_refuses(void **state)
{
	(void)state;
	struct frame_arena *a = (void *)1;
	assert_int_equal(frame_arena_create(0, &a), -EINVAL);
	assert_null(a);
	assert_int_equal(frame_arena_create(FRAME_ARENA_MAX_BYTES + 1, &a), -EINVAL);
	/* A length is rounded up to whole grains. */
	assert_int_equal(frame_arena_create(G + 1, &a), 0);
	assert_int_equal(frame_arena_bytes(a), 2 * G);
	struct frame_arena_usage u = usage(a);
	assert_int_equal(u.used, 0);
	assert_int_equal(u.extents, 1);
	assert_int_equal(u.largest, 2 * G);
	frame_arena_close(a);
}

/* The byte at `at` lies on FRAME_ARENA_ALIGN, the frame inside the
 * arena, its size whole grains covering it. */
static void test_alignment_and_size(void **state)
{
	(void)state;
	struct frame_arena *a;
	assert_int_equal(frame_arena_create(1 << 20, &a), 0);
	const unsigned char *base = frame_arena_base(a);
	static const size_t ats[] = { 0, 1, 37, 127, 128, 129, 1000 };
	for (size_t i = 0; i < sizeof(ats) / sizeof(ats[0]); i++) {
		size_t len = 4096 + ats[i];
		unsigned char *p = frame_arena_alloc(a, len, ats[i]);
		assert_non_null(p);
		assert_int_equal((uintptr_t)(p + ats[i]) % FRAME_ARENA_ALIGN, 0);
		assert_true(p >= base && p + len <= base + frame_arena_bytes(a));
		assert_true(frame_arena_owns(p));
		size_t sz = frame_arena_size(p);
		assert_int_equal(sz % G, 0);
		assert_true(sz >= len);
		memset(p, 0xab, len); /* the whole frame is ours to write */
		frame_arena_free(p);
	}
	assert_int_equal(usage(a).used, 0);
	/* Nothing to carve: an empty frame, D past the frame, larger than
	 * the arena. */
	assert_null(frame_arena_alloc(a, 0, 0));
	assert_null(frame_arena_alloc(a, 10, 10));
	assert_null(frame_arena_alloc(a, (1 << 20) + 1, 0));
	assert_null(frame_arena_alloc(NULL, 10, 0));
	frame_arena_close(a);
}

/* Filled to the last grain, a full arena answers NULL at once; freed in
 * any order, its extents merge back into one. */
static void test_full_then_merged(void **state)
{
	(void)state;
	struct frame_arena *a;
	enum { N = 16 };
	assert_int_equal(frame_arena_create(N * 4 * G, &a), 0);
	void *p[N];
	for (int i = 0; i < N; i++)
		assert_non_null(p[i] = frame_arena_alloc(a, 4 * G, 0));
	/* First fit from the lowest address: in order. */
	for (int i = 1; i < N; i++)
		assert_ptr_equal(p[i], (unsigned char *)p[i - 1] + 4 * G);
	assert_null(frame_arena_alloc(a, 1, 0));
	struct frame_arena_usage u = usage(a);
	assert_int_equal(u.used, N * 4 * G);
	assert_int_equal(u.frames, N);
	assert_int_equal(u.extents, 0);
	/* Freed as: a lone block, one joining the previous, one joining
	 * the next, one joining both. */
	static const int order[N] = { 5, 6, 3, 4, 0, 15, 1, 14, 2, 7, 12, 9, 8, 10, 11, 13 };
	for (int i = 0; i < N; i++) {
		frame_arena_free(p[order[i]]);
		assert_int_equal(usage(a).frames, N - 1 - i);
	}
	u = usage(a);
	assert_int_equal(u.used, 0);
	assert_int_equal(u.extents, 1);
	assert_int_equal(u.largest, N * 4 * G);
	frame_arena_close(a);
}

/* Every other block freed: half the arena is free, yet a frame of two
 * blocks does not fit (NULL: the caller falls back to the heap), and a
 * frame of one does, in the lowest hole. */
static void test_fragmentation(void **state)
{
	(void)state;
	struct frame_arena *a;
	enum { N = 32 };
	assert_int_equal(frame_arena_create(N * 2 * G, &a), 0);
	void *p[N];
	for (int i = 0; i < N; i++)
		assert_non_null(p[i] = frame_arena_alloc(a, 2 * G, 0));
	for (int i = 0; i < N; i += 2)
		frame_arena_free(p[i]);
	struct frame_arena_usage u = usage(a);
	assert_int_equal(u.extents, N / 2);
	assert_int_equal(u.largest, 2 * G);
	assert_int_equal(u.used, N * G);
	assert_null(frame_arena_alloc(a, 3 * G, 0));
	void *q = frame_arena_alloc(a, 2 * G, 0);
	assert_ptr_equal(q, p[0]);
	frame_arena_free(q);
	for (int i = 1; i < N; i += 2)
		frame_arena_free(p[i]);
	u = usage(a);
	assert_int_equal(u.extents, 1);
	assert_int_equal(u.largest, N * 2 * G);
	assert_non_null(q = frame_arena_alloc(a, 3 * G, 0));
	frame_arena_free(q);
	frame_arena_close(a);
}

/* Heap frames go through the same free; NULL is accepted. */
static void test_heap_frames(void **state)
{
	(void)state;
	struct frame_arena *a;
	assert_int_equal(frame_arena_create(64 * G, &a), 0);
	uint8_t *h = malloc(1000);
	assert_non_null(h);
	assert_false(frame_arena_owns(h));
	assert_int_equal(frame_arena_size(h), malloc_usable_size(h));
	frame_arena_free(h);
	frame_arena_free(NULL);
	assert_int_equal(frame_arena_size(NULL), 0);
	frame_arena_close(a);
	/* Without any arena too. */
	h = malloc(10);
	assert_false(frame_arena_owns(h));
	frame_arena_free(h);
}

/* A closed arena carves nothing, and its frames out stay valid until
 * freed: answers still queued on sockets outlive their device. */
static void test_close_with_frames_out(void **state)
{
	(void)state;
	struct frame_arena *a;
	assert_int_equal(frame_arena_create(64 * G, &a), 0);
	unsigned char *p = frame_arena_alloc(a, 5000, 40);
	unsigned char *q = frame_arena_alloc(a, 3000, 0);
	assert_non_null(p);
	assert_non_null(q);
	frame_arena_close(a);
	assert_null(frame_arena_alloc(a, 10, 0));
	memset(p, 1, 5000);
	memset(q, 2, 3000);
	assert_true(frame_arena_owns(p));
	assert_int_equal(frame_arena_size(q), 3 * G);
	frame_arena_free(p);
	assert_true(frame_arena_owns(q));
	assert_int_equal(q[2999], 2);
	frame_arena_free(q); /* the last: the arena goes */
	/* Its table slot is free again: as many arenas as fit can be made. */
	struct frame_arena *many[FRAME_ARENA_MAX];
	size_t n = 0;
	while (n < FRAME_ARENA_MAX && frame_arena_create(G, &many[n]) == 0)
		n++;
	assert_int_equal(n, FRAME_ARENA_MAX);
	struct frame_arena *extra;
	assert_int_equal(frame_arena_create(G, &extra), -ENOSPC);
	while (n > 0)
		frame_arena_close(many[--n]);
}

/* Random carving and freeing against a model: live frames never
 * overlap (each holds its own byte pattern, checked before its free),
 * and the usage adds up. */
static void test_random_against_model(void **state)
{
	(void)state;
	struct frame_arena *a;
	assert_int_equal(frame_arena_create(256 * G, &a), 0);
	enum { LIVE = 64 };
	unsigned char *p[LIVE] = { 0 };
	size_t len[LIVE] = { 0 };
	unsigned seed = 12345;
	size_t nulls = 0;
	for (int step = 0; step < 20000; step++) {
		seed = seed * 1103515245u + 12345u;
		size_t i = (seed >> 8) % LIVE;
		if (p[i]) {
			for (size_t k = 0; k < len[i]; k += 97)
				if (p[i][k] != (unsigned char)i)
					fail_msg("frame %zu byte %zu overwritten at step %d", i, k, step);
			frame_arena_free(p[i]);
			p[i] = NULL;
			continue;
		}
		len[i] = 1 + (seed >> 12) % (12 * G);
		size_t at = (seed >> 4) % len[i];
		p[i] = frame_arena_alloc(a, len[i], at);
		if (!p[i]) {
			nulls++;
			continue;
		}
		assert_int_equal((uintptr_t)(p[i] + at) % FRAME_ARENA_ALIGN, 0);
		memset(p[i], (int)i, len[i]);
	}
	size_t used = 0, frames = 0;
	for (size_t i = 0; i < LIVE; i++)
		if (p[i]) {
			used += frame_arena_size(p[i]);
			frames++;
		}
	struct frame_arena_usage u = usage(a);
	assert_int_equal(u.used, used);
	assert_int_equal(u.frames, frames);
	assert_true(nulls > 0); /* it did run full at times */
	for (size_t i = 0; i < LIVE; i++)
		frame_arena_free(p[i]);
	u = usage(a);
	assert_int_equal(u.used, 0);
	assert_int_equal(u.extents, 1);
	frame_arena_close(a);
}

/* Carved on one thread (a device's worker), freed on others (the loop,
 * a post thread), while more threads carve and free their own, with heap
 * frames mixed in. */
enum { HANDED = 4096, RING = 64 };
/* cmocka's assertions belong to the main thread: the others count what
 * went wrong. */
static struct frame_arena *shared_arena;
static _Atomic unsigned thread_errors;
struct ring {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned char *slot[RING];
	size_t head, tail;
	bool done;
};

static void *producer(void *arg)
{
	struct ring *r = arg;
	for (size_t i = 0; i < HANDED; i++) {
		size_t len = 100 + (i * 7919) % (6 * G);
		unsigned char *p = frame_arena_alloc(shared_arena, len, 50 % len);
		if (!p)
			p = malloc(len); /* the fallback, as answer.c does */
		if (!p) {
			thread_errors++;
			continue;
		}
		p[0] = (unsigned char)i;
		pthread_mutex_lock(&r->mu);
		while (r->head - r->tail == RING)
			pthread_cond_wait(&r->cv, &r->mu);
		r->slot[r->head++ % RING] = p;
		pthread_cond_broadcast(&r->cv);
		pthread_mutex_unlock(&r->mu);
	}
	pthread_mutex_lock(&r->mu);
	r->done = true;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

static void *consumer(void *arg)
{
	struct ring *r = arg;
	for (;;) {
		pthread_mutex_lock(&r->mu);
		while (r->head == r->tail && !r->done)
			pthread_cond_wait(&r->cv, &r->mu);
		if (r->head == r->tail) {
			pthread_mutex_unlock(&r->mu);
			return NULL;
		}
		unsigned char *p = r->slot[r->tail++ % RING];
		pthread_cond_broadcast(&r->cv);
		pthread_mutex_unlock(&r->mu);
		frame_arena_free(p);
	}
}

static void *churn(void *arg)
{
	uintptr_t id = (uintptr_t)arg;
	unsigned char *mine[8] = { 0 };
	for (size_t i = 0; i < 20000; i++) {
		size_t k = i % 8;
		if (mine[k]) {
			if (mine[k][0] != (unsigned char)id)
				thread_errors++; /* another frame overlapped it */
			frame_arena_free(mine[k]);
		}
		mine[k] = frame_arena_alloc(shared_arena, 1 + (i * 31) % (3 * G), 0);
		if (mine[k])
			memset(mine[k], (int)id, 1 + (i * 31) % (3 * G));
	}
	for (size_t k = 0; k < 8; k++)
		frame_arena_free(mine[k]);
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	assert_int_equal(frame_arena_create(128 * G, &shared_arena), 0);
	struct ring r = { .head = 0 };
	pthread_mutex_init(&r.mu, NULL);
	pthread_cond_init(&r.cv, NULL);
	pthread_t prod, cons[2], ch[3];
	assert_int_equal(pthread_create(&prod, NULL, producer, &r), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&cons[i], NULL, consumer, &r), 0);
	for (uintptr_t i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&ch[i], NULL, churn, (void *)(i + 1)), 0);
	pthread_join(prod, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(cons[i], NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(ch[i], NULL);
	assert_int_equal(thread_errors, 0);
	struct frame_arena_usage u = usage(shared_arena);
	assert_int_equal(u.used, 0);
	assert_int_equal(u.frames, 0);
	assert_int_equal(u.extents, 1);
	frame_arena_close(shared_arena);
	pthread_mutex_destroy(&r.mu);
	pthread_cond_destroy(&r.cv);
}

/* A frame cut to its first bytes gives the grains after them back (they
 * merge with the free space beside them), stays where it is, and frees
 * as a whole frame of its new size. */
static void test_cut(void **state)
{
	(void)state;
	struct frame_arena *a;
	assert_int_equal(frame_arena_create(16 * G, &a), 0);
	unsigned char *p = frame_arena_alloc(a, 8 * G, 0);
	unsigned char *q = frame_arena_alloc(a, 2 * G, 0);
	assert_non_null(p);
	assert_non_null(q);
	memset(p, 1, 8 * G);
	assert_true(frame_arena_cut(p, 3 * G - 5));
	assert_int_equal(frame_arena_size(p), 3 * G);
	assert_int_equal(usage(a).used, 5 * G);
	assert_int_equal(usage(a).extents, 2); /* the cut tail, and after q */
	/* No longer than it is, or not an arena's: nothing to do. */
	assert_false(frame_arena_cut(p, 3 * G));
	assert_false(frame_arena_cut(p, 0));
	void *h = malloc(100);
	assert_false(frame_arena_cut(h, 10));
	free(h);
	/* The tail is carved again, right after the cut frame. */
	unsigned char *t = frame_arena_alloc(a, 5 * G, 0);
	assert_ptr_equal(t, p + 3 * G);
	frame_arena_free(t);
	frame_arena_free(q);
	assert_int_equal(usage(a).extents, 1);
	/* A frame that starts past its block's first byte (aligned D). */
	unsigned char *r = frame_arena_alloc(a, 4 * G, 100);
	assert_true(frame_arena_cut(r, G));
	assert_int_equal(frame_arena_size(r), 2 * G); /* the pad and G bytes span two grains */
	frame_arena_free(r);
	frame_arena_free(p);
	assert_int_equal(usage(a).used, 0);
	assert_int_equal(usage(a).extents, 1);
	assert_int_equal(usage(a).largest, 16 * G);
	frame_arena_close(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_refuses),
		cmocka_unit_test(test_alignment_and_size),
		cmocka_unit_test(test_full_then_merged),
		cmocka_unit_test(test_fragmentation),
		cmocka_unit_test(test_heap_frames),
		cmocka_unit_test(test_close_with_frames_out),
		cmocka_unit_test(test_random_against_model),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_cut),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
