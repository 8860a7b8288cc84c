/* The GEMM answer frame laid out around D: decoded by protobuf-c, it is
 * the Response the fields say, D byte for byte, whatever the sizes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "answer.h"
#include "frame.h"

static void check(uint64_t id, uint32_t m, uint32_t n, enum mfma_dtype dt, const char *variant,
		  uint64_t big)
{
	struct answer a;
	assert_int_equal(answer_start(&a, id, m, n, dt), 0);
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
	mfma__v1__response__free_unpacked(r, NULL);
	free(f);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_small_and_large),
		cmocka_unit_test(test_long_variant_grows_the_frame),
		cmocka_unit_test(test_region_answer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
