/* The GEMM answer frame laid out around D: decoded by protobuf-c, it is
 * the Response the fields say, D byte for byte, whatever the sizes, and
 * the same message protobuf-c's own encoder makes of those fields, whether
 * the frame was malloc'ed or carved from an arena (a device's pinned
 * answers) with D aligned for the device's copies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "answer.h"
#include "frame.h"
#include "frame_arena.h"

/* answer_alloc_fn over an arena, as the CUDA backend's frame_alloc. */
static void *carve(void *arg, size_t len, size_t at)
{
	return frame_arena_alloc(arg, len, at);
}

/* protobuf-c's packing of the Response the decoded frame r is, against
 * its packing of the message built from the same fields: equal bytes,
 * so the frame means exactly what the normal encoder would have sent. */
static void same_as_encoder(const Mfma__V1__Response *r, uint64_t id, uint32_t m, uint32_t n,
			    enum mfma_dtype dt, const uint8_t *d, const Mfma__V1__Timing *t,
			    const Mfma__V1__DeviceRef *dev, const char *variant)
{
	Mfma__V1__Matrix mat = MFMA__V1__MATRIX__INIT;
	mat.has_rows = mat.has_cols = mat.has_dtype = mat.has_data = 1;
	mat.rows = m;
	mat.cols = n;
	mat.dtype = (Mfma__V1__DType)dt;
	mat.data.len = (size_t)m * n * mfma_dtype_size(dt);
	mat.data.data = (uint8_t *)(uintptr_t)d;
	Mfma__V1__GemmResult g = MFMA__V1__GEMM_RESULT__INIT;
	g.d = &mat;
	g.timing = (Mfma__V1__Timing *)(uintptr_t)t;
	g.device = (Mfma__V1__DeviceRef *)(uintptr_t)dev;
	g.variant = (char *)(uintptr_t)variant;
	Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
	st.has_code = 1;
	st.code = MFMA__V1__CODE__OK;
	Mfma__V1__Response want = MFMA__V1__RESPONSE__INIT;
	want.has_id = 1;
	want.id = id;
	want.status = &st;
	want.body_case = MFMA__V1__RESPONSE__BODY_GEMM;
	want.gemm = &g;
	size_t wl = mfma__v1__response__get_packed_size(&want);
	size_t gl = mfma__v1__response__get_packed_size(r);
	assert_int_equal(gl, wl);
	uint8_t *wb = malloc(wl + 1), *gb = malloc(gl + 1);
	assert_non_null(wb);
	assert_non_null(gb);
	mfma__v1__response__pack(&want, wb);
	mfma__v1__response__pack(r, gb);
	assert_memory_equal(gb, wb, wl);
	free(wb);
	free(gb);
}

static void check_with(struct frame_arena *arena, uint64_t id, uint32_t m, uint32_t n,
		       enum mfma_dtype dt, const char *variant, uint64_t big)
{
	struct answer a;
	assert_int_equal(answer_start(&a, id, m, n, dt, arena ? carve : NULL, arena), 0);
	if (arena) {
		assert_true(a.carved);
		assert_true(frame_arena_owns(a.frame));
		assert_int_equal((uintptr_t)(a.frame + a.d_at) % FRAME_ARENA_ALIGN, 0);
	}
	if (!arena)
		assert_false(a.carved);
	size_t dbytes = (size_t)m * n * mfma_dtype_size(dt);
	assert_int_equal(a.d_bytes, dbytes);
	for (size_t i = 0; i < dbytes; i++)
		a.frame[a.d_at + i] = (uint8_t)(i * 31 + 7);
	Mfma__V1__Timing t = MFMA__V1__TIMING__INIT;
	t.has_queue_ns = t.has_kernel_ns = t.has_total_ns = t.has_batch_requests = 1;
	t.queue_ns = big;
	t.kernel_ns = 12345;
	t.total_ns = big * 3;
	t.batch_requests = 17;
	Mfma__V1__DeviceRef dev = MFMA__V1__DEVICE_REF__INIT;
	dev.has_index = 1;
	dev.index = 3;
	dev.backend = "cuda";
	dev.arch = "sm_90";
	assert_int_equal(answer_finish(&a, &t, &dev, variant), 0);
	uint8_t *f = answer_take(&a);
	assert_null(a.frame);
	uint32_t len = (uint32_t)f[0] << 24 | (uint32_t)f[1] << 16 | (uint32_t)f[2] << 8 | f[3];
	assert_int_equal((size_t)len + FRAME_HEADER_SIZE, a.len);
	Mfma__V1__Response *r = mfma__v1__response__unpack(NULL, len, f + FRAME_HEADER_SIZE);
	assert_non_null(r);
	assert_true(r->has_id);
	assert_int_equal(r->id, id);
	assert_non_null(r->status);
	assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
	assert_int_equal(r->body_case, MFMA__V1__RESPONSE__BODY_GEMM);
	const Mfma__V1__GemmResult *g = r->gemm;
	assert_int_equal(g->d->rows, m);
	assert_int_equal(g->d->cols, n);
	assert_int_equal(g->d->dtype, (int)dt);
	assert_int_equal(g->d->data.len, dbytes);
	for (size_t i = 0; i < dbytes; i++)
		if (g->d->data.data[i] != (uint8_t)(i * 31 + 7))
			fail_msg("D byte %zu differs", i);
	assert_int_equal(g->timing->queue_ns, big);
	assert_int_equal(g->timing->kernel_ns, 12345);
	assert_int_equal(g->timing->total_ns, big * 3);
	assert_int_equal(g->timing->batch_requests, 17);
	assert_int_equal(g->device->index, 3);
	assert_string_equal(g->device->backend, "cuda");
	assert_string_equal(g->device->arch, "sm_90");
	assert_string_equal(g->variant, variant);
	same_as_encoder(r, id, m, n, dt, g->d->data.data, &t, &dev, variant);
	mfma__v1__response__free_unpacked(r, NULL);
	frame_arena_free(f);
}

static void check(uint64_t id, uint32_t m, uint32_t n, enum mfma_dtype dt, const char *variant,
		  uint64_t big)
{
	check_with(NULL, id, m, n, dt, variant, big);
}

static void test_small_and_large(void **state)
{
	(void)state;
	check(0, 1, 1, MFMA_DT_F32, "", 0);
	check(7, 16, 16, MFMA_DT_F16, "cpu.sgemm.f16", 1);
	check(UINT64_MAX, 517, 33, MFMA_DT_I32, "f16.sparse.128x64", UINT64_MAX / 4);
	check(1ull << 40, 2048, 300, MFMA_DT_BF16, "cusparselt.f16.sparse", 1ull << 50);
}

static void test_long_variant_grows_the_frame(void **state)
{
	(void)state;
	char v[3000];
	memset(v, 'x', sizeof(v) - 1);
	v[sizeof(v) - 1] = '\0';
	check(5, 64, 64, MFMA_DT_F32, v, 99);
}

/* Frames carved from an arena, D's first byte aligned: the same
 * messages; a frame larger than the arena holds comes from the heap; a
 * carved frame that must grow (a long variant) moves to the heap and
 * gives its block back. */
static void test_carved_frames(void **state)
{
	(void)state;
	struct frame_arena *arena;
	assert_int_equal(frame_arena_create(4u << 20, &arena), 0);
	check_with(arena, 0, 1, 1, MFMA_DT_F32, "", 0);
	check_with(arena, 7, 16, 16, MFMA_DT_F16, "cpu.sgemm.f16", 1);
	check_with(arena, UINT64_MAX, 517, 33, MFMA_DT_I32, "f16.sparse.128x64", UINT64_MAX / 4);
	check_with(arena, 1ull << 40, 8192, 8, MFMA_DT_F16, "cusparselt.f16.sparse.c29", 1ull << 50);
	struct answer a;
	assert_int_equal(answer_start(&a, 1, 8192, 8, MFMA_DT_F16, carve, arena), 0);
	assert_true(a.carved);
	/* 4 MiB of D does not fit beside the frame above: the heap. */
	struct answer b;
	assert_int_equal(answer_start(&b, 2, 1024, 1024, MFMA_DT_F32, carve, arena), 0);
	assert_false(b.carved);
	assert_false(frame_arena_owns(b.frame));
	answer_free(&b);
	answer_free(&a);
	struct frame_arena_usage u;
	frame_arena_usage(arena, &u);
	assert_int_equal(u.frames, 0);
	char v[3000];
	memset(v, 'x', sizeof(v) - 1);
	v[sizeof(v) - 1] = '\0';
	check_with(arena, 5, 64, 64, MFMA_DT_F32, v, 99);
	frame_arena_usage(arena, &u);
	assert_int_equal(u.frames, 0);
	assert_int_equal(u.extents, 1);
	frame_arena_close(arena);
}

/* D in a client's region: the answer names it and carries no bytes. */
static void test_region_answer(void **state)
{
	(void)state;
	struct answer a;
	assert_int_equal(answer_start_region(&a, 42, 300, 17, MFMA_DT_F32, 9, 1ull << 33), 0);
	assert_int_equal(a.d_bytes, 0);
	Mfma__V1__Timing t = MFMA__V1__TIMING__INIT;
	Mfma__V1__DeviceRef dev = MFMA__V1__DEVICE_REF__INIT;
	assert_int_equal(answer_finish(&a, &t, &dev, "cpu"), 0);
	uint8_t *f = answer_take(&a);
	Mfma__V1__Response *r = mfma__v1__response__unpack(NULL, a.len - FRAME_HEADER_SIZE,
							   f + FRAME_HEADER_SIZE);
	assert_non_null(r);
	assert_int_equal(r->id, 42);
	const Mfma__V1__Matrix *d = r->gemm->d;
	assert_int_equal(d->rows, 300);
	assert_int_equal(d->cols, 17);
	assert_int_equal(d->data.len, 0);
	assert_non_null(d->region);
	assert_int_equal(d->region->region, 9);
	assert_int_equal(d->region->offset, 1ull << 33);
	assert_int_equal(d->region->length, 300 * 17 * 4);
	assert_string_equal(r->gemm->variant, "cpu");
	mfma__v1__response__free_unpacked(r, NULL);
	free(f);
}

/* One answer with these fields after D, decoded: every field present
 * exactly when it was set, with its value, and the same message as
 * protobuf-c's encoder makes of them. */
static void check_tail(const Mfma__V1__Timing *t, const Mfma__V1__DeviceRef *dev,
		       const char *variant)
{
	struct answer a;
	assert_int_equal(answer_start(&a, 77, 3, 2, MFMA_DT_F16, NULL, NULL), 0);
	memset(a.frame + a.d_at, 0x5a, a.d_bytes);
	assert_int_equal(answer_finish(&a, t, dev, variant), 0);
	uint8_t *f = answer_take(&a);
	Mfma__V1__Response *r = mfma__v1__response__unpack(NULL, a.len - FRAME_HEADER_SIZE,
							   f + FRAME_HEADER_SIZE);
	assert_non_null(r);
	const Mfma__V1__Timing *rt = r->gemm->timing;
	const Mfma__V1__DeviceRef *rd = r->gemm->device;
	assert_non_null(rt);
	assert_non_null(rd);
#define SAME(field)                                                                  \
	do {                                                                         \
		assert_int_equal(rt->has_##field, t->has_##field);                   \
		if (t->has_##field)                                                  \
			assert_true(rt->field == t->field);                          \
	} while (0)
	SAME(queue_ns);
	SAME(h2d_ns);
	SAME(kernel_ns);
	SAME(d2h_ns);
	SAME(total_ns);
	SAME(prep_ns);
	SAME(batch_requests);
	SAME(batch_columns);
#undef SAME
	assert_int_equal(rd->has_index, dev->has_index);
	if (dev->has_index)
		assert_int_equal(rd->index, dev->index);
	if (dev->backend)
		assert_string_equal(rd->backend, dev->backend);
	else
		assert_null(rd->backend);
	if (dev->arch)
		assert_string_equal(rd->arch, dev->arch);
	else
		assert_null(rd->arch);
	assert_string_equal(r->gemm->variant, variant);
	same_as_encoder(r, 77, 3, 2, MFMA_DT_F16, r->gemm->d->data.data, t, dev, variant);
	mfma__v1__response__free_unpacked(r, NULL);
	free(f);
}

/* A value of every varint length, the ends included. */
static uint64_t any_u64(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	unsigned bits = (unsigned)(*x >> 58); /* 0..63 */
	uint64_t v = *x ^ (*x >> 29);
	if ((*x >> 40) % 9 == 0)
		return (*x >> 41) % 2 ? UINT64_MAX : 0;
	return bits ? v >> (64 - bits) : 0;
}

static char *any_str(uint64_t *x, char *buf, size_t cap)
{
	uint64_t k = any_u64(x) % 5;
	if (k == 0)
		return NULL;
	size_t len = k == 1 ? 0 : (size_t)(any_u64(x) % (cap - 1));
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)(' ' + any_u64(x) % 95);
	buf[len] = '\0';
	return buf;
}

/* The fields after D written by hand (answer.c): random presence and
 * values of every Timing and DeviceRef field, random strings. */
static void test_random_tails(void **state)
{
	(void)state;
	uint64_t x = 12345;
	for (int i = 0; i < 3000; i++) {
		Mfma__V1__Timing t = MFMA__V1__TIMING__INIT;
		Mfma__V1__DeviceRef dev = MFMA__V1__DEVICE_REF__INIT;
		t.has_queue_ns = any_u64(&x) % 2;
		t.queue_ns = any_u64(&x);
		t.has_h2d_ns = any_u64(&x) % 2;
		t.h2d_ns = any_u64(&x);
		t.has_kernel_ns = any_u64(&x) % 2;
		t.kernel_ns = any_u64(&x);
		t.has_d2h_ns = any_u64(&x) % 2;
		t.d2h_ns = any_u64(&x);
		t.has_total_ns = any_u64(&x) % 2;
		t.total_ns = any_u64(&x);
		t.has_prep_ns = any_u64(&x) % 2;
		t.prep_ns = any_u64(&x);
		t.has_batch_requests = any_u64(&x) % 2;
		t.batch_requests = (uint32_t)any_u64(&x);
		t.has_batch_columns = any_u64(&x) % 2;
		t.batch_columns = (uint32_t)any_u64(&x);
		dev.has_index = any_u64(&x) % 2;
		dev.index = (uint32_t)any_u64(&x);
		char backend[40], arch[200], variant[300];
		dev.backend = any_str(&x, backend, sizeof(backend));
		dev.arch = any_str(&x, arch, sizeof(arch));
		const char *v = any_str(&x, variant, sizeof(variant));
		check_tail(&t, &dev, v ? v : "");
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_small_and_large),
		cmocka_unit_test(test_long_variant_grows_the_frame),
		cmocka_unit_test(test_region_answer),
		cmocka_unit_test(test_carved_frames),
		cmocka_unit_test(test_random_tails),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
