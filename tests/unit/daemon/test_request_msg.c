/* request_msg_held_bytes: what a decoded GEMM holds with its frame.  A
 * matrix left in the frame is the frame's bytes; one the decode had to
 * copy out (it does not start 4-byte aligned), and an unknown field
 * (which protobuf-c copies), are held besides and counted.  They were
 * not: the count was the larger of the frame and the matrices, half of
 * what such a request holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "request_msg.h"

enum { K = 64, N = 256 }; /* B: 64 KiB of f32 */

/* A GEMM of 1 x K x N f32, packed at frame + at (frame of cap bytes,
 * malloc'd, as the daemon's read buffer is); unknown: bytes of an unknown
 * field 99 appended to the Request.  Returns the payload's length. */
static size_t pack_gemm(uint8_t **frame, size_t *cap, size_t at, size_t unknown)
{
	static float a[K], b[K * N];
	Mfma__V1__Matrix ma = MFMA__V1__MATRIX__INIT, mb = MFMA__V1__MATRIX__INIT;
	ma.has_rows = ma.has_cols = ma.has_dtype = ma.has_data = 1;
	ma.rows = 1;
	ma.cols = K;
	ma.dtype = MFMA__V1__DTYPE__F32;
	ma.data = (ProtobufCBinaryData){ sizeof(a), (uint8_t *)a };
	mb = ma;
	mb.rows = K;
	mb.cols = N;
	mb.data = (ProtobufCBinaryData){ sizeof(b), (uint8_t *)b };
	Mfma__V1__Operand op = MFMA__V1__OPERAND__INIT;
	op.kind_case = MFMA__V1__OPERAND__KIND_DENSE;
	op.dense = &ma;
	Mfma__V1__Gemm g = MFMA__V1__GEMM__INIT;
	g.a = &op;
	g.b = &mb;
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	req.has_id = 1;
	req.id = 7;
	req.body_case = MFMA__V1__REQUEST__BODY_GEMM;
	req.gemm = &g;
	size_t len = mfma__v1__request__get_packed_size(&req);
	size_t extra = unknown ? 2 + 3 + unknown : 0; /* tag, a 3-byte length, the bytes */
	*cap = at + len + extra;
	*frame = calloc(1, *cap);
	assert_non_null(*frame);
	mfma__v1__request__pack(&req, *frame + at);
	if (unknown) {
		uint8_t *p = *frame + at + len;
		const unsigned tag = 99u << 3 | 2u; /* field 99, length-delimited */
		*p++ = (uint8_t)((tag & 0x7f) | 0x80);
		*p++ = (uint8_t)(tag >> 7);
		*p++ = (uint8_t)(unknown | 0x80);
		*p++ = (uint8_t)((unknown >> 7) | 0x80);
		*p++ = (uint8_t)(unknown >> 14);
	}
	return len + extra;
}

static size_t held(size_t at, size_t unknown, size_t *cap)
{
	uint8_t *frame;
	size_t len = pack_gemm(&frame, cap, at, unknown);
	struct request_msg m;
	request_msg_decode(&m, frame + at, len, frame, *cap);
	assert_non_null(m.req);
	assert_non_null(m.req->gemm);
	size_t n = request_msg_held_bytes(&m);
	request_msg_free(&m);
	return n;
}

static void test_held_bytes(void **state)
{
	(void)state;
	const size_t bbytes = K * N * sizeof(float);
	size_t cap;
	/* Each offset puts B's bytes at another alignment: those at a 4-byte
	 * boundary stay in the frame, the others are copied. */
	int stayed = 0, copied = 0;
	for (size_t at = 0; at < 4; at++) {
		size_t n = held(at, 0, &cap);
		assert_true(n >= cap);
		if (n < cap + bbytes) {
			stayed++;
			assert_true(n < cap + 1024); /* the sub-messages, a few hundred bytes */
		} else {
			copied++;
		}
	}
	print_message("  B stayed in the frame at %d of 4 offsets, copied at %d\n", stayed, copied);
	assert_int_equal(stayed, 1);
	assert_int_equal(copied, 3);
	/* An unknown field of 32 KiB: protobuf-c's copy of it is held too. */
	size_t n = 0;
	for (size_t at = 0; at < 4; at++) {
		size_t h = held(at, 32u << 10, &cap);
		if (h < cap + bbytes)
			n = h;
	}
	assert_true(n >= cap + (32u << 10));
	/* Without a frame, the decode copied everything: nothing counted here. */
	uint8_t *frame;
	size_t len = pack_gemm(&frame, &cap, 0, 0);
	struct request_msg m;
	request_msg_decode(&m, frame, len, NULL, 0);
	assert_int_equal(request_msg_held_bytes(&m), 0);
	request_msg_free(&m);
	free(frame);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_held_bytes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
