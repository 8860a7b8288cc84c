/* The pure frame reader: split and coalesced reads, the exact limit, over it. */
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frame.h"

static size_t make_frame(uint8_t *out, const char *payload, size_t n)
{
	frame_header_put(out, (uint32_t)n);
	memcpy(out + FRAME_HEADER_SIZE, payload, n);
	return FRAME_HEADER_SIZE + n;
}

static void test_header_big_endian(void **state)
{
	(void)state;
	uint8_t h[4];
	frame_header_put(h, 0x01020304u);
	assert_int_equal(h[0], 1);
	assert_int_equal(h[3], 4);
	assert_int_equal(frame_header_get(h), 0x01020304u);
}

static void test_byte_by_byte(void **state)
{
	(void)state;
	struct frame_reader r;
	frame_reader_init(&r, 1024);
	uint8_t buf[64];
	size_t n = make_frame(buf, "hello", 5);
	const uint8_t *p;
	size_t len;
	for (size_t i = 0; i < n - 1; i++) {
		assert_int_equal(frame_reader_feed(&r, buf + i, 1), 0);
		assert_int_equal(frame_reader_next(&r, &p, &len), 0);
	}
	assert_int_equal(frame_reader_feed(&r, buf + n - 1, 1), 0);
	assert_int_equal(frame_reader_next(&r, &p, &len), 1);
	assert_int_equal(len, 5);
	assert_memory_equal(p, "hello", 5);
	assert_int_equal(frame_reader_next(&r, &p, &len), 0);
	assert_int_equal(frame_reader_pending(&r), 0);
	frame_reader_free(&r);
}

static void test_coalesced(void **state)
{
	(void)state;
	struct frame_reader r;
	frame_reader_init(&r, 1024);
	uint8_t buf[256];
	size_t n = make_frame(buf, "one", 3);
	n += make_frame(buf + n, "", 0);
	n += make_frame(buf + n, "three", 5);
	size_t half = make_frame(buf + n, "four", 4);
	/* All of three frames plus half of a fourth in one read. */
	assert_int_equal(frame_reader_feed(&r, buf, n + half / 2), 0);
	const uint8_t *p;
	size_t len;
	assert_int_equal(frame_reader_next(&r, &p, &len), 1);
	assert_int_equal(len, 3);
	assert_memory_equal(p, "one", 3);
	assert_int_equal(frame_reader_next(&r, &p, &len), 1);
	assert_int_equal(len, 0);
	assert_int_equal(frame_reader_next(&r, &p, &len), 1);
	assert_memory_equal(p, "three", 5);
	assert_int_equal(frame_reader_next(&r, &p, &len), 0);
	assert_int_equal(frame_reader_feed(&r, buf + n + half / 2, half - half / 2), 0);
	assert_int_equal(frame_reader_next(&r, &p, &len), 1);
	assert_int_equal(len, 4);
	assert_memory_equal(p, "four", 4);
	frame_reader_free(&r);
}

static void test_exact_limit_and_over(void **state)
{
	(void)state;
	struct frame_reader r;
	frame_reader_init(&r, 16);
	uint8_t buf[64];
	char payload[17];
	memset(payload, 'x', sizeof(payload));
	size_t n = make_frame(buf, payload, 16);
	assert_int_equal(frame_reader_feed(&r, buf, n), 0);
	const uint8_t *p;
	size_t len;
	assert_int_equal(frame_reader_next(&r, &p, &len), 1);
	assert_int_equal(len, 16);
	n = make_frame(buf, payload, 17);
	/* Only the header is needed to refuse: the body may never come. */
	assert_int_equal(frame_reader_feed(&r, buf, FRAME_HEADER_SIZE), 0);
	assert_int_equal(frame_reader_next(&r, &p, &len), -EMSGSIZE);
	assert_int_equal(len, 17);
	frame_reader_free(&r);
}

static void test_in_place_space(void **state)
{
	(void)state;
	struct frame_reader r;
	frame_reader_init(&r, 1 << 20);
	uint8_t hdr[4];
	frame_header_put(hdr, 100000);
	assert_int_equal(frame_reader_feed(&r, hdr, 4), 0);
	uint8_t *p;
	size_t avail;
	/* With the header known the reader makes room for the whole frame. */
	assert_int_equal(frame_reader_space(&r, 1, &p, &avail), 0);
	assert_true(avail >= 100000);
	memset(p, 7, 100000);
	frame_reader_commit(&r, 100000);
	const uint8_t *q;
	size_t len;
	assert_int_equal(frame_reader_next(&r, &q, &len), 1);
	assert_int_equal(len, 100000);
	assert_int_equal(q[99999], 7);
	frame_reader_free(&r);
}

/* A large frame's buffer is the frame's size, not the next power of two
 * (a 1 GiB frame once reserved 2 GiB), and is given back once consumed. */
static void test_exact_growth_and_shrink(void **state)
{
	(void)state;
	struct frame_reader r;
	frame_reader_init(&r, 64u << 20);
	uint8_t hdr[4];
	frame_header_put(hdr, (40u << 20) + 1);
	assert_int_equal(frame_reader_feed(&r, hdr, 4), 0);
	assert_int_equal(frame_reader_capacity_for(&r, 65536), FRAME_HEADER_SIZE + (40u << 20) + 1);
	uint8_t *p;
	size_t avail;
	assert_int_equal(frame_reader_space(&r, 65536, &p, &avail), 0);
	assert_int_equal(r.cap, FRAME_HEADER_SIZE + (40u << 20) + 1);
	assert_int_equal(avail, (40u << 20) + 1);
	/* A full buffer does not grow while the frame is incomplete. */
	assert_int_equal(frame_reader_capacity_for(&r, 1), r.cap);
	memset(p, 1, avail);
	frame_reader_commit(&r, avail);
	const uint8_t *q;
	size_t len;
	frame_reader_shrink(&r, 65536); /* a frame is still buffered: kept */
	assert_non_null(r.buf);
	assert_int_equal(frame_reader_next(&r, &q, &len), 1);
	frame_reader_shrink(&r, 65536);
	assert_null(r.buf);
	assert_int_equal(r.cap, 0);
	/* Without a header the buffer is what was asked for. */
	assert_int_equal(frame_reader_capacity_for(&r, 65536), 65536);
	/* An announced length over the limit reserves nothing for it. */
	frame_header_put(hdr, (64u << 20) + 1);
	assert_int_equal(frame_reader_feed(&r, hdr, 4), 0);
	assert_int_equal(frame_reader_capacity_for(&r, 100), FRAME_HEADER_SIZE + 100);
	frame_reader_free(&r);
}

/* Random split points over many frames give back exactly what was sent. */
static void test_random_splits(void **state)
{
	(void)state;
	srand(7);
	struct frame_reader r;
	frame_reader_init(&r, 4096);
	size_t total = 0, nframes = 200;
	uint8_t *stream = malloc(nframes * (4 + 300));
	size_t lens[200];
	for (size_t i = 0; i < nframes; i++) {
		lens[i] = (size_t)rand() % 300;
		frame_header_put(stream + total, (uint32_t)lens[i]);
		for (size_t b = 0; b < lens[i]; b++)
			stream[total + 4 + b] = (uint8_t)(i + b);
		total += 4 + lens[i];
	}
	size_t off = 0, got = 0;
	while (off < total) {
		size_t chunk = 1 + (size_t)rand() % 700;
		if (chunk > total - off)
			chunk = total - off;
		assert_int_equal(frame_reader_feed(&r, stream + off, chunk), 0);
		off += chunk;
		const uint8_t *p;
		size_t len;
		while (frame_reader_next(&r, &p, &len) == 1) {
			assert_int_equal(len, lens[got]);
			for (size_t b = 0; b < len; b++)
				assert_int_equal(p[b], (uint8_t)(got + b));
			got++;
		}
	}
	assert_int_equal(got, nframes);
	free(stream);
	frame_reader_free(&r);
}

/* Taking a frame kept beyond the reader: the buffer ends with it, the
 * payload is intact wherever the buffer went, and the bytes after it
 * stay the reader's. */
static void test_take_frame(void **state)
{
	(void)state;
	struct frame_reader r;
	frame_reader_init(&r, 1 << 20);
	uint8_t big[9000], buf[20000];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7);
	size_t n = make_frame(buf, "ab", 2);
	n += make_frame(buf + n, (const char *)big, sizeof(big));
	n += make_frame(buf + n, "tail", 4);
	/* Room for much more than the frames: the taken block shrinks. */
	uint8_t *p;
	size_t avail;
	assert_int_equal(frame_reader_space(&r, 200000, &p, &avail), 0);
	memcpy(p, buf, n - 3); /* the last frame not whole yet */
	frame_reader_commit(&r, n - 3);
	const uint8_t *payload;
	size_t len, cap;
	assert_int_equal(frame_reader_next(&r, &payload, &len), 1);
	assert_int_equal(len, 2);
	assert_int_equal(frame_reader_next(&r, &payload, &len), 1);
	assert_int_equal(len, sizeof(big));
	uint8_t *kept = frame_reader_take_frame(&r, &payload, len, &cap);
	assert_non_null(kept);
	assert_int_equal(cap, (size_t)(payload - kept) + len);
	assert_int_equal(cap, 2 * FRAME_HEADER_SIZE + 2 + sizeof(big));
	assert_memory_equal(payload, big, sizeof(big));
	/* The reader goes on with the rest. */
	assert_int_equal(frame_reader_feed(&r, buf + n - 3, 3), 0);
	assert_int_equal(frame_reader_next(&r, &payload, &len), 1);
	assert_int_equal(len, 4);
	assert_memory_equal(payload, "tail", 4);
	free(kept);
	frame_reader_free(&r);
}

/* A frame_mem for the tests: a pool of fixed slots it tags, so the reader
 * can tell its buffers from malloc's; counts what it did. */
#define POOL_SLOTS 4
#define POOL_SLOT (64u * 1024)
static struct pool {
	uint8_t slot[POOL_SLOTS][POOL_SLOT];
	size_t len[POOL_SLOTS]; /* 0: free */
	int allocs, frees, cuts, refusals;
} pool;

static int slot_of(const void *p)
{
	for (int i = 0; i < POOL_SLOTS; i++)
		if ((const uint8_t *)p == pool.slot[i])
			return i;
	return -1;
}

static void *pool_alloc(void *arg, size_t len)
{
	assert_ptr_equal(arg, &pool);
	for (int i = 0; len <= POOL_SLOT && i < POOL_SLOTS; i++)
		if (pool.len[i] == 0) {
			pool.len[i] = len;
			pool.allocs++;
			memset(pool.slot[i], 0xee, POOL_SLOT);
			return pool.slot[i];
		}
	pool.refusals++;
	return NULL;
}

static bool pool_owns(const void *p)
{
	return slot_of(p) >= 0;
}

static void pool_free(void *p)
{
	int i = slot_of(p);
	if (i < 0) {
		free(p);
		return;
	}
	assert_true(pool.len[i] > 0); /* never twice */
	pool.len[i] = 0;
	pool.frees++;
}

static bool pool_cut(void *p, size_t len)
{
	int i = slot_of(p);
	assert_true(i >= 0 && pool.len[i] > 0);
	if (len >= pool.len[i])
		return false;
	pool.len[i] = len;
	pool.cuts++;
	return true;
}

static const struct frame_mem pool_mem = { pool_alloc, pool_free, pool_owns, pool_cut, &pool, 4096 };

/* A reader with a frame_mem: a large frame is read into its memory (moved
 * there, never realloc'ed, once the header announces it), small buffers
 * stay malloc's, a full frame_mem falls back to malloc, a taken frame is
 * cut in place, and every buffer goes back to whoever gave it. */
static void test_frame_mem(void **state)
{
	(void)state;
	memset(&pool, 0, sizeof(pool));
	struct frame_reader r;
	frame_reader_init(&r, 1 << 20);
	frame_reader_set_mem(&r, &pool_mem);
	uint8_t big[20000], buf[3 * sizeof(big)];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 13 + 1);
	/* A small frame: malloc'ed as before. */
	size_t n = make_frame(buf, "hi", 2);
	assert_int_equal(frame_reader_feed(&r, buf, n), 0);
	assert_false(pool_owns(r.buf));
	const uint8_t *payload;
	size_t len, cap;
	assert_int_equal(frame_reader_next(&r, &payload, &len), 1);
	/* A large one, its header and a few bytes first, as a socket may
	 * deliver it: the buffer for the whole frame comes from the pool,
	 * the bytes already in moving with it. */
	n = make_frame(buf, (const char *)big, sizeof(big));
	assert_int_equal(frame_reader_feed(&r, buf, 10), 0);
	uint8_t *p;
	size_t avail;
	assert_int_equal(frame_reader_space(&r, 1, &p, &avail), 0);
	assert_true(pool_owns(r.buf));
	assert_int_equal(avail, n - 10);
	memcpy(p, buf + 10, n - 10);
	frame_reader_commit(&r, n - 10);
	assert_int_equal(frame_reader_next(&r, &payload, &len), 1);
	assert_int_equal(len, sizeof(big));
	uint8_t *kept = frame_reader_take_frame(&r, &payload, len, &cap);
	assert_true(pool_owns(kept));
	assert_int_equal(cap, n);
	assert_memory_equal(payload, big, sizeof(big));
	assert_int_equal(pool.cuts, 0); /* exactly the frame already */
	/* Room for two frames and a half in one pool buffer: the first taken
	 * is cut in place, the rest moves to a fresh pool buffer. */
	size_t two = make_frame(buf, (const char *)big, 9000);
	two += make_frame(buf + two, (const char *)big + 9000, 9000);
	assert_int_equal(frame_reader_space(&r, 3 * 9008, &p, &avail), 0);
	assert_true(pool_owns(r.buf));
	memcpy(p, buf, 9004 + 5); /* the first frame and 5 bytes of the second */
	frame_reader_commit(&r, 9004 + 5);
	assert_int_equal(frame_reader_next(&r, &payload, &len), 1);
	uint8_t *first = frame_reader_take_frame(&r, &payload, len, &cap);
	assert_true(pool_owns(first));
	assert_int_equal(pool.cuts, 1);
	assert_int_equal(cap, 9004);
	assert_memory_equal(payload, big, 9000);
	assert_true(pool_owns(r.buf));
	assert_int_equal(r.cap, 4096);
	assert_int_equal(frame_reader_feed(&r, buf + 9004 + 5, two - 9004 - 5), 0);
	assert_int_equal(frame_reader_next(&r, &payload, &len), 1);
	assert_memory_equal(payload, big + 9000, 9000);
	/* Emptied, a pool buffer goes back whatever keep says. */
	assert_true(pool_owns(r.buf));
	int frees = pool.frees;
	frame_reader_shrink(&r, SIZE_MAX);
	assert_null(r.buf);
	assert_int_equal(pool.frees, frees + 1);
	/* The pool full: the reader falls back to malloc, and a pool buffer
	 * that must grow moves to malloc. */
	void *hold[POOL_SLOTS];
	int held = 0;
	while ((hold[held] = pool_alloc(&pool, 1)))
		held++;
	n = make_frame(buf, (const char *)big, sizeof(big));
	assert_int_equal(frame_reader_feed(&r, buf, n), 0);
	assert_false(pool_owns(r.buf));
	assert_int_equal(frame_reader_next(&r, &payload, &len), 1);
	assert_memory_equal(payload, big, sizeof(big));
	for (int i = 0; i < held; i++)
		pool_free(hold[i]);
	pool_free(kept);
	pool_free(first);
	frame_reader_free(&r);
	for (int i = 0; i < POOL_SLOTS; i++)
		assert_int_equal(pool.len[i], 0);
	assert_true(pool.refusals > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_big_endian),
		cmocka_unit_test(test_byte_by_byte),
		cmocka_unit_test(test_coalesced),
		cmocka_unit_test(test_exact_limit_and_over),
		cmocka_unit_test(test_in_place_space),
		cmocka_unit_test(test_exact_growth_and_shrink),
		cmocka_unit_test(test_random_splits),
		cmocka_unit_test(test_take_frame),
		cmocka_unit_test(test_frame_mem),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
