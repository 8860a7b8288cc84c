/* The wire checks: a NUL inside a string field is found at any depth and
 * named by its path, bytes fields may hold NUL, and the UTF-8 sanitiser
 * keeps valid text and replaces every other byte. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mfma.pb-c.h"
#include "wire_check.h"

/* Packs req and turns each '#' into a NUL, as a client not using
 * protobuf-c's strlen-based packing can. */
static uint8_t *pack_nul(const Mfma__V1__Request *req, size_t *len)
{
	*len = mfma__v1__request__get_packed_size(req);
	uint8_t *b = malloc(*len);
	mfma__v1__request__pack(req, b);
	for (size_t i = 0; i < *len; i++)
		if (b[i] == '#')
			b[i] = 0;
	return b;
}

static void test_nul_in_nested_string(void **state)
{
	(void)state;
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Gemm g = MFMA__V1__GEMM__INIT;
	Mfma__V1__Operand op = MFMA__V1__OPERAND__INIT;
	op.kind_case = MFMA__V1__OPERAND__KIND_WEIGHT;
	op.weight = "acc.alias#junk";
	g.a = &op;
	req.body_case = MFMA__V1__REQUEST__BODY_GEMM;
	req.gemm = &g;
	size_t len;
	uint8_t *b = pack_nul(&req, &len);
	char err[160];
	assert_int_equal(wire_check_strings(&mfma__v1__request__descriptor, b, len, err, sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "gemm.a.weight has a NUL byte at offset 9");
	/* protobuf-c itself takes it, cut at the NUL. */
	Mfma__V1__Request *r = mfma__v1__request__unpack(NULL, len, b);
	assert_non_null(r);
	assert_string_equal(r->gemm->a->weight, "acc.alias");
	mfma__v1__request__free_unpacked(r, NULL);
	free(b);
}

static void test_nul_in_bytes_is_fine(void **state)
{
	(void)state;
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Ping ping = MFMA__V1__PING__INIT;
	uint8_t payload[4] = { 0, 1, 0, 2 };
	ping.has_payload = 1;
	ping.payload.data = payload;
	ping.payload.len = 4;
	req.body_case = MFMA__V1__REQUEST__BODY_PING;
	req.ping = &ping;
	req.has_id = 1;
	req.id = 35; /* '#': not inside a string, so it stays */
	size_t len = mfma__v1__request__get_packed_size(&req);
	uint8_t b[64];
	mfma__v1__request__pack(&req, b);
	char err[160] = "";
	assert_int_equal(wire_check_strings(&mfma__v1__request__descriptor, b, len, err, sizeof(err)), 0);
	assert_string_equal(err, "");
	/* Truncated or garbage input is not judged here (the decoder does). */
	assert_int_equal(wire_check_strings(&mfma__v1__request__descriptor, b, len - 1, err,
					    sizeof(err)), 0);
	static const uint8_t junk[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	assert_int_equal(wire_check_strings(&mfma__v1__request__descriptor, junk, sizeof(junk), err,
					    sizeof(err)), 0);
}

/* Fields are counted through the sub-messages the decoder unpacks, each
 * occurrence on its own; the count stops just over max. */
static void test_count_fields(void **state)
{
	(void)state;
	const ProtobufCMessageDescriptor *rd = &mfma__v1__request__descriptor;
	/* id, gemm { a { weight } }: four fields. */
	static const uint8_t gemm[] = { 0x08, 0x01, 0x12, 0x05, 0x0a, 0x03, 0x1a, 0x01, 'w' };
	Mfma__V1__Request *r = mfma__v1__request__unpack(NULL, sizeof(gemm), gemm);
	assert_non_null(r);
	assert_string_equal(r->gemm->a->weight, "w");
	mfma__v1__request__free_unpacked(r, NULL);
	assert_int_equal(wire_count_fields(rd, gemm, sizeof(gemm), 100), 4);
	/* Unknown fields at the top: one each. */
	uint8_t many[2 + 2 * 50];
	many[0] = 0x08;
	many[1] = 0x07;
	for (int i = 0; i < 50; i++) {
		many[2 + 2 * i] = 11 << 3;
		many[3 + 2 * i] = 0;
	}
	assert_int_equal(wire_count_fields(rd, many, sizeof(many), 100), 51);
	assert_int_equal(wire_count_fields(rd, many, sizeof(many), 10), 11);
	/* An empty gemm sent over and over: each occurrence counts. */
	uint8_t again[2 * 20];
	for (int i = 0; i < 20; i++) {
		again[2 * i] = 0x12;
		again[2 * i + 1] = 0;
	}
	assert_int_equal(wire_count_fields(rd, again, sizeof(again), 100), 20);
	/* Garbage ends the count where it stops walking. */
	static const uint8_t junk[] = { 0x08, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
					0xff, 0xff, 0xff };
	assert_int_equal(wire_count_fields(rd, junk, sizeof(junk), 100), 1);
	assert_int_equal(wire_count_fields(rd, NULL, 0, 100), 0);
}

static void test_utf8_sanitize(void **state)
{
	(void)state;
	char ok[] = "plain, \xc3\xa9t\xc3\xa9, \xe2\x82\xac, \xf0\x9f\x98\x80";
	char copy[sizeof(ok)];
	memcpy(copy, ok, sizeof(ok));
	wire_utf8_sanitize(copy);
	assert_string_equal(copy, ok);
	char bad[] = "a\xff" "b\xc3" "c\xe2\x82" "d\xc0\xaf" "e\xed\xa0\x80" "f\xf4\x90\x80\x80" "g";
	wire_utf8_sanitize(bad);
	assert_string_equal(bad, "a?b?c??d??e???f????g");
	char cut[] = "x\xe2\x82";
	wire_utf8_sanitize(cut);
	assert_string_equal(cut, "x??");
	wire_utf8_sanitize(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nul_in_nested_string),
		cmocka_unit_test(test_nul_in_bytes_is_fine),
		cmocka_unit_test(test_count_fields),
		cmocka_unit_test(test_utf8_sanitize),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
