/* Runs the fuzz target on seeded mutations of valid requests: a bounded,
 * deterministic stand-in for a fuzzing campaign that CI can afford.  Under
 * the sanitizer build any out-of-bounds read or leak fails it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "mfma.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t s = 88172645463325252ull;
static uint32_t rnd(void)
{
	s ^= s << 13;
	s ^= s >> 7;
	s ^= s << 17;
	return (uint32_t)s;
}

/* A valid framed request: a GEMM or a weight load with a small 2:4 A. */
static size_t seed(uint8_t *out, size_t cap, int kind)
{
	static uint16_t vals[8 * 8], bb[16 * 4];
	static uint32_t meta[8];
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Gemm g = MFMA__V1__GEMM__INIT;
	Mfma__V1__LoadWeight lw = MFMA__V1__LOAD_WEIGHT__INIT;
	Mfma__V1__Operand op = MFMA__V1__OPERAND__INIT;
	Mfma__V1__Sparse24 sp = MFMA__V1__SPARSE24__INIT;
	Mfma__V1__Matrix b = MFMA__V1__MATRIX__INIT;
	sp.has_rows = sp.has_cols = sp.has_dtype = sp.has_values = sp.has_meta = 1;
	sp.rows = 8;
	sp.cols = 16;
	sp.dtype = MFMA__V1__DTYPE__F16;
	sp.values.data = (uint8_t *)vals;
	sp.values.len = sizeof(vals);
	sp.meta.data = (uint8_t *)meta;
	sp.meta.len = sizeof(meta);
	b.has_rows = b.has_cols = b.has_dtype = b.has_data = 1;
	b.rows = 16;
	b.cols = 4;
	b.dtype = MFMA__V1__DTYPE__F16;
	b.data.data = (uint8_t *)bb;
	b.data.len = sizeof(bb);
	req.has_id = 1;
	req.id = rnd();
	if (kind == 0) {
		op.kind_case = MFMA__V1__OPERAND__KIND_SPARSE;
		op.sparse = &sp;
		g.a = &op;
		g.b = &b;
		req.body_case = MFMA__V1__REQUEST__BODY_GEMM;
		req.gemm = &g;
	} else if (kind == 1) {
		op.kind_case = MFMA__V1__OPERAND__KIND_WEIGHT;
		op.weight = "w";
		g.a = &op;
		g.b = &b;
		req.body_case = MFMA__V1__REQUEST__BODY_GEMM;
		req.gemm = &g;
	} else {
		op.kind_case = MFMA__V1__OPERAND__KIND_SPARSE;
		op.sparse = &sp;
		lw.name = "weight-1";
		lw.a = &op;
		req.body_case = MFMA__V1__REQUEST__BODY_LOAD_WEIGHT;
		req.load_weight = &lw;
	}
	size_t n = mfma__v1__request__get_packed_size(&req);
	if (n + 4 > cap)
		return 0;
	frame_header_put(out, (uint32_t)n);
	mfma__v1__request__pack(&req, out + 4);
	return n + 4;
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 30000;
	uint8_t base[2048], buf[4096];
	for (long i = 0; i < iters; i++) {
		size_t n = seed(base, sizeof(base), (int)(i % 3));
		memcpy(buf, base, n);
		int muts = 1 + (int)(rnd() % 8);
		for (int m = 0; m < muts; m++) {
			switch (rnd() % 4) {
			case 0: /* flip a bit */
				buf[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
				break;
			case 1: /* overwrite a byte */
				buf[rnd() % n] = (uint8_t)rnd();
				break;
			case 2: /* truncate */
				n = 1 + rnd() % n;
				break;
			case 3: /* duplicate a run */
				if (n < sizeof(buf) / 2) {
					size_t at = rnd() % n, len = 1 + rnd() % 32;
					if (at + len > n)
						len = n - at;
					memmove(buf + at + len, buf + at, n - at);
					n += len;
				}
				break;
			}
		}
		LLVMFuzzerTestOneInput(buf, n);
	}
	printf("fuzz_smoke: %ld mutated inputs, no crash\n", iters);
	return 0;
}
