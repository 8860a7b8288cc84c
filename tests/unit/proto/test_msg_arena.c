/* The decoder's arena: pieces aligned as malloc's, what does not fit in
 * the first block in blocks of its own while small pieces go on filling
 * the first, and a free that leaves nothing behind (ASan in CI); the
 * bounded allocator, which never takes a block of its own. */
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "msg_arena.h"

static unsigned char *take(ProtobufCAllocator *al, size_t n)
{
	unsigned char *p = al->alloc(al->allocator_data, n);
	assert_non_null(p);
	assert_int_equal((uintptr_t)p % alignof(max_align_t), 0);
	memset(p, 0xa5, n); /* ASan: every byte of it is ours */
	return p;
}

static void test_first_block_then_more(void **state)
{
	(void)state;
	const size_t al_n = alignof(max_align_t);
	struct msg_arena *a = msg_arena_new(256);
	assert_non_null(a);
	ProtobufCAllocator al = msg_arena_allocator(a);
	/* Small pieces follow each other in the first block, each rounded to
	 * malloc's alignment (an empty one takes a slot too). */
	unsigned char *p1 = take(&al, 1), *p2 = take(&al, 100), *p3 = take(&al, 0);
	assert_ptr_equal(p2, p1 + al_n);
	assert_ptr_equal(p3, p2 + (100 + al_n - 1) / al_n * al_n);
	/* A piece larger than the first block's rest gets a block of its own,
	 * outside it; the next small piece still comes from the first. */
	const size_t first = msg_arena_bytes(a);
	assert_true(first >= 256);
	unsigned char *big = take(&al, 4096);
	assert_true(big + 4096 <= p1 || big >= p1 + 256);
	/* What the arena holds counts the block of its own. */
	assert_true(msg_arena_bytes(a) >= first + 4096);
	assert_int_equal(msg_arena_bytes(NULL), 0);
	unsigned char *p4 = take(&al, 16);
	assert_ptr_equal(p4, p3 + al_n);
	/* Freeing a piece does nothing (the arena's free is the only one):
	 * what follows still comes after it. */
	al.free(al.allocator_data, p4);
	assert_ptr_equal(take(&al, 1), p4 + al_n);
	msg_arena_free(a);
	msg_arena_free(NULL);
}

/* The bounded allocator: pieces from the first block while they fit,
 * then NULL (no block of its own), and a later piece that fits still
 * comes; SIZE_MAX refused. */
static void test_bounded(void **state)
{
	(void)state;
	const size_t al_n = alignof(max_align_t);
	struct msg_arena *a = msg_arena_new(256);
	assert_non_null(a);
	ProtobufCAllocator al = msg_arena_allocator_bounded(a);
	unsigned char *p1 = take(&al, 100);
	assert_null(al.alloc(al.allocator_data, 4096));
	assert_null(al.alloc(al.allocator_data, SIZE_MAX));
	unsigned char *p2 = take(&al, 256 - (100 + al_n - 1) / al_n * al_n);
	assert_ptr_equal(p2, p1 + (100 + al_n - 1) / al_n * al_n);
	assert_null(al.alloc(al.allocator_data, 1)); /* full */
	msg_arena_free(a);
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
		cmocka_unit_test(test_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
