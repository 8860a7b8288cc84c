/* A thread's list of freed blocks: kept blocks come back last in, first
 * out, the list never holds more than its bound, and under
 * AddressSanitizer nothing is kept; the arena of a daemon's request reuses
 * a freed one of its size, and no other; the blocks a thread kept are
 * freed when it exits, and a thread keeps on at most BLOCK_LIST_LISTS
 * lists. */
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "block_list.h"
#include "msg_arena.h"

/* Under AddressSanitizer lists keep nothing. */
#define ASAN (!block_list_keeps())

/* Lists live as long as their thread, as their owners declare them. */
static _Thread_local struct block_list l;

static void test_keep_and_take(void **state)
{
	(void)state;
	assert_null(block_list_take(&l));
	void *b[5];
	for (int i = 0; i < 5; i++) {
		b[i] = malloc(64);
		assert_non_null(b[i]);
	}
	/* Three fit under a bound of three; the rest are the caller's. */
	for (int i = 0; i < 5; i++) {
		bool kept = block_list_keep(&l, b[i], 3);
		assert_int_equal(kept, !ASAN && i < 3);
		if (!kept)
			free(b[i]);
	}
	assert_int_equal(l.n, ASAN ? 0 : 3);
	assert_false(block_list_keep(&l, NULL, 3));
	if (!ASAN) {
		/* Last in, first out, then empty. */
		for (int i = 2; i >= 0; i--) {
			void *p = block_list_take(&l);
			assert_ptr_equal(p, b[i]);
			memset(p, 0x5a, 64);
			free(p);
		}
	}
	assert_null(block_list_take(&l));
	assert_int_equal(l.n, 0);
}

/* A freed request-sized arena is the next one made on this thread; an
 * arena of another size is not kept. */
static void test_request_arenas_reused(void **state)
{
	(void)state;
	struct msg_arena *a = msg_arena_new(MSG_ARENA_REQUEST_BYTES);
	assert_non_null(a);
	ProtobufCAllocator al = msg_arena_allocator(a);
	/* A piece in a block of its own too: freed, not kept. */
	memset(al.alloc(al.allocator_data, 5000), 1, 5000);
	memset(al.alloc(al.allocator_data, 100), 2, 100);
	msg_arena_free(a);
	struct msg_arena *b = msg_arena_new(MSG_ARENA_REQUEST_BYTES);
	assert_non_null(b);
	if (!ASAN)
		assert_ptr_equal(b, a);
	/* Reused, it starts empty: its first piece is where a fresh one's is. */
	ProtobufCAllocator bl = msg_arena_allocator(b);
	unsigned char *p = bl.alloc(bl.allocator_data, MSG_ARENA_REQUEST_BYTES);
	assert_non_null(p);
	memset(p, 3, MSG_ARENA_REQUEST_BYTES);
	msg_arena_free(b);
	struct msg_arena *c = msg_arena_new(64);
	assert_non_null(c);
	msg_arena_free(c);
	struct msg_arena *d = msg_arena_new(MSG_ARENA_REQUEST_BYTES);
	assert_non_null(d);
	if (!ASAN)
		assert_ptr_equal(d, b); /* c was not kept in its place */
	msg_arena_free(d);
}

enum { EXIT_BLOCKS = 200, EXIT_BLOCK_BYTES = 4000 };

static _Thread_local struct block_list exit_list;
static _Thread_local struct block_list more_lists[BLOCK_LIST_LISTS];

/* Keeps EXIT_BLOCKS blocks on exit_list and one on each of more_lists
 * (the last declined: the thread's table is full); returns the bytes
 * malloc had in use before the keeps and after. */
static void *keep_and_exit(void *arg)
{
	size_t *used = arg;
	used[0] = mallinfo2().uordblks;
	for (int i = 0; i < EXIT_BLOCKS; i++) {
		void *p = malloc(EXIT_BLOCK_BYTES);
		memset(p, 0x33, EXIT_BLOCK_BYTES);
		if (!block_list_keep(&exit_list, p, 1024)) {
			free(p);
			used[2]++;
		}
	}
	for (int i = 0; i < BLOCK_LIST_LISTS; i++) {
		void *p = malloc(64);
		if (!block_list_keep(&more_lists[i], p, 4)) {
			free(p);
			used[3]++;
		}
	}
	used[1] = mallinfo2().uordblks;
	return NULL;
}

/* A thread that exits with blocks kept leaves none behind: malloc's bytes
 * in use fall back to where they were before it kept them.  (Every thread
 * on malloc's main arena, M_ARENA_MAX 1, so that mallinfo2 sees them.) */
static void test_freed_at_thread_exit(void **state)
{
	(void)state;
	if (ASAN)
		return; /* nothing kept: nothing to free */
	size_t used[4] = { 0 };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, keep_and_exit, used), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	const size_t after = mallinfo2().uordblks;
	/* All kept on exit_list; one of more_lists declined (exit_list
	 * took the first of the thread's BLOCK_LIST_LISTS places). */
	assert_int_equal(used[2], 0);
	assert_int_equal(used[3], 1);
	if (used[1] < used[0] + (size_t)EXIT_BLOCKS * EXIT_BLOCK_BYTES) {
		/* ThreadSanitizer's allocator: glibc's counts do not see it. */
		printf("  (malloc's counts did not see the blocks: not checked)\n");
		return;
	}
	if (after > used[0] + EXIT_BLOCK_BYTES)
		fail_msg("%zu bytes in use after the thread exited, %zu before it kept %d blocks",
			 after, used[0], EXIT_BLOCKS);
}

int main(void)
{
	mallopt(M_ARENA_MAX, 1);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keep_and_take),
		cmocka_unit_test(test_request_arenas_reused),
		cmocka_unit_test(test_freed_at_thread_exit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
