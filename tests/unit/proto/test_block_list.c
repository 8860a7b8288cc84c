/* A thread's list of freed blocks: kept blocks come back last in, first
 * out, the list never holds more than its bound, and under
 * AddressSanitizer nothing is kept; the arena of a daemon's request reuses
 * a freed one of its size, and no other. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "block_list.h"
#include "msg_arena.h"

/* Under AddressSanitizer lists keep nothing. */
#define ASAN (!block_list_keeps())

static void test_keep_and_take(void **state)
{
	(void)state;
	struct block_list l = { 0 };
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keep_and_take),
		cmocka_unit_test(test_request_arenas_reused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
