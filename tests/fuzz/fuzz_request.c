/* The daemon's decode path on arbitrary bytes: frame reader, protobuf
 * decode (as the daemon does it, daemon/request_msg.c: a GEMM's matrices
 * left in the frame, a plain GEMM by its own decoder, with a frame and
 * without; each must mean exactly what protobuf-c's own decode makes of
 * the bytes), request validation.  Built two ways: as a libFuzzer target
 * (clang -fsanitize=fuzzer, see meson.build) and linked into
 * fuzz_smoke, a deterministic mutation run that CI executes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_stream.h"
#include "mfma.pb-c.h"
#include "request_msg.h"
#include "validate.h"
#include "wire_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The split decode against protobuf-c's: the same verdict, and messages
 * that pack to the same bytes. */
static void check_same(const Mfma__V1__Request *split, const uint8_t *p, size_t n)
{
	Mfma__V1__Request *plain = mfma__v1__request__unpack(NULL, n, p);
	if ((plain == NULL) != (split == NULL))
		__builtin_trap();
	if (!plain)
		return;
	size_t l1 = mfma__v1__request__get_packed_size(plain);
	size_t l2 = mfma__v1__request__get_packed_size(split);
	uint8_t *b1 = malloc(l1 + 1), *b2 = malloc(l2 + 1);
	if (b1 && b2) {
		if (l1 != l2 || mfma__v1__request__pack(plain, b1) != l1 ||
		    mfma__v1__request__pack(split, b2) != l2 || memcmp(b1, b2, l1) != 0)
			__builtin_trap();
	}
	free(b1);
	free(b2);
	mfma__v1__request__free_unpacked(plain, NULL);
}

static void check_request(const uint8_t *p, size_t n)
{
	uint8_t *frame = malloc(n ? n : 1);
	if (!frame)
		return;
	memcpy(frame, p, n);
	struct request_msg m;
	/* Without a frame to keep matrices in, as the daemon decodes the
	 * frames it does not own (a GEMM's decoder then copies every
	 * matrix). */
	request_msg_decode(&m, p, n, NULL, 0);
	check_same(m.req, p, n);
	request_msg_free(&m);
	request_msg_decode(&m, frame, n, frame, n);
	check_same(m.req, p, n);
	Mfma__V1__Request *req = m.req;
	if (!req) {
		request_msg_free(&m);
		return;
	}
	char err[512];
	/* The daemon's checks after a decode: strings without NUL, and the
	 * messages that echo them made valid UTF-8. */
	if (wire_check_strings(&mfma__v1__request__descriptor, p, n, err, sizeof(err)) < 0)
		wire_utf8_sanitize(err);
	const struct validate_limits lim = { .max_dim = 65536, .max_out_bytes = 1u << 28 };
	if (req->body_case == MFMA__V1__REQUEST__BODY_GEMM) {
		struct gemm_plan plan;
		struct weight_shape w = { .m = 8, .k = 16, .dtype = MFMA_DT_F16, .sparse = 1 };
		/* As in the daemon, a weight is found only by a valid name. */
		const Mfma__V1__Operand *a = req->gemm->a;
		bool found = a && a->kind_case == MFMA__V1__OPERAND__KIND_WEIGHT &&
			     validate_weight_name(a->weight, err, sizeof(err)) == 0;
		if (validate_gemm(req->gemm, &lim, found ? &w : NULL, &plan, err, sizeof(err)) == 0) {
			/* A plan that passed must describe buffers as large as it says. */
			if (plan.a_form == A_DENSE && plan.g.a == NULL)
				__builtin_trap();
			volatile uint8_t sink = 0;
			if (plan.g.b && plan.g.k && plan.g.n)
				sink ^= ((const uint8_t *)plan.g.b)[(size_t)plan.g.k * plan.g.n *
									mfma_dtype_size(plan.g.in_dtype) - 1];
			(void)sink;
		}
	} else if (req->body_case == MFMA__V1__REQUEST__BODY_LOAD_WEIGHT) {
		enum a_form form;
		uint32_t r, c;
		enum mfma_dtype dt;
		if (validate_weight_name(req->load_weight->name, err, sizeof(err)) < 0)
			wire_utf8_sanitize(err);
		validate_operand(req->load_weight->a, &lim, "a", &form, &r, &c, &dt, err, sizeof(err));
	}
	request_msg_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_stream(data, size, check_request);
	return 0;
}
