/* The decoder's arena: pieces aligned as malloc's, what does not fit in
 * the first block in blocks of its own (counted), a reset that gives
 * those back, and a free that leaves nothing behind (ASan in CI). */
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "msg_arena.h"

static void *take(ProtobufCAllocator *al, size_t n)
{
	void *p = al->alloc(al->allocator_data, n);
	assert_non_null(p);
	assert_int_equal((uintptr_t)p % alignof(max_align_t), 0);
	memset(p, 0xa5, n); /* ASan: every byte of it is ours */
	return p;
}

static void test_first_block_then_more(void **state)
{
	(void)state;
	struct msg_arena *a = msg_arena_new(256);
	assert_non_null(a);
	ProtobufCAllocator al = msg_arena_allocator(a);
	const size_t first = msg_arena_bytes(a);
	assert_true(first >= 256);
	/* Small pieces share the first block: nothing more is held. */
	unsigned char *p1 = take(&al, 1), *p2 = take(&al, 100), *p3 = take(&al, 0);
	assert_true(p2 >= p1 + 1 && p3 >= p2 + 100);
	assert_int_equal(msg_arena_bytes(a), first);
	/* A piece that does not fit gets a block of its own; small ones
	 * still fit in the first block's rest. */
	take(&al, 4096);
	const size_t with_large = msg_arena_bytes(a);
	assert_true(with_large >= first + 4096);
	take(&al, 16);
	assert_int_equal(msg_arena_bytes(a), with_large);
	/* Freeing a piece does nothing (the arena's free is the only one). */
	al.free(al.allocator_data, p2);
	assert_int_equal(msg_arena_bytes(a), with_large);
	msg_arena_reset(a);
	assert_int_equal(msg_arena_bytes(a), first);
	/* After a reset the first block is whole again. */
	take(&al, 200);
	assert_int_equal(msg_arena_bytes(a), first);
	msg_arena_free(a);
	msg_arena_free(NULL);
	assert_int_equal(msg_arena_bytes(NULL), 0);
}

/* A size that would overflow the rounding is refused, not wrapped. */
static void test_huge_refused(void **state)
{
	(void)state;
	struct msg_arena *a = msg_arena_new(64);
	assert_non_null(a);
	ProtobufCAllocator al = msg_arena_allocator(a);
	assert_null(al.alloc(al.allocator_data, SIZE_MAX));
	assert_null(al.alloc(al.allocator_data, SIZE_MAX - 8));
	msg_arena_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_block_then_more),
		cmocka_unit_test(test_huge_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
