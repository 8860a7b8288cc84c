/* npy.c and npy_file.c: headers as NumPy writes them (bytes fixed here, not produced by
 * our own writer), the writer's output read back for every type, and the
 * refusals with the sentence they give. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "npy.h"

/* Builds a file: magic, version, header length (2 or 4 bytes), the dict
 * text padded with spaces and '\n' to a multiple of 64 (as NumPy does),
 * then `data_bytes` bytes of a pattern. */
static uint8_t *make_file(int major, const char *dict, size_t data_bytes, size_t *len)
{
	size_t pre = major == 1 ? 10 : 12;
	size_t total_hdr = (pre + strlen(dict) + 1 + 63) / 64 * 64;
	size_t hlen = total_hdr - pre;
	uint8_t *b = malloc(total_hdr + data_bytes + 1);
	assert_non_null(b);
	memcpy(b, "\x93NUMPY", 6);
	b[6] = (uint8_t)major;
	b[7] = 0;
	b[8] = (uint8_t)hlen;
	b[9] = (uint8_t)(hlen >> 8);
	if (major != 1) {
		b[10] = (uint8_t)(hlen >> 16);
		b[11] = (uint8_t)(hlen >> 24);
	}
	memset(b + pre, ' ', hlen);
	memcpy(b + pre, dict, strlen(dict));
	b[total_hdr - 1] = '\n';
	for (size_t i = 0; i < data_bytes; i++)
		b[total_hdr + i] = (uint8_t)(i * 7 + 1);
	*len = total_hdr + data_bytes;
	return b;
}

static void expect_error(const uint8_t *f, size_t len, int code, const char *needle)
{
	struct npy_info info;
	char err[256] = "";
	assert_int_equal(npy_parse(f, len, &info, err, sizeof(err)), code);
	if (!strstr(err, needle))
		fail_msg("error '%s' does not mention '%s'", err, needle);
}

static void test_numpy_v1_f32(void **state)
{
	(void)state;
	size_t len;
	/* Exactly what numpy.save writes for np.zeros((3, 5), '<f4'). */
	uint8_t *f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }",
			       60, &len);
	struct npy_info info;
	char err[256];
	assert_int_equal(len, 128 + 60);
	assert_int_equal(npy_parse(f, len, &info, err, sizeof(err)), 0);
	assert_int_equal(info.type, NPY_F4);
	assert_int_equal(info.version, 1);
	assert_int_equal(info.ndim, 2);
	assert_int_equal(info.rows, 3);
	assert_int_equal(info.cols, 5);
	assert_int_equal(info.data_offset, 128);
	assert_int_equal(info.data_bytes, 60);
	free(f);
}

static void test_v2_and_v3_headers(void **state)
{
	(void)state;
	for (int major = 2; major <= 3; major++) {
		size_t len;
		uint8_t *f = make_file(major, "{'descr': '<i4', 'fortran_order': False, "
					      "'shape': (2, 3), }", 24, &len);
		struct npy_info info;
		char err[256];
		assert_int_equal(npy_parse(f, len, &info, err, sizeof(err)), 0);
		assert_int_equal(info.version, major);
		assert_int_equal(info.type, NPY_I4);
		assert_int_equal(info.rows, 2);
		assert_int_equal(info.cols, 3);
		/* 12 bytes of prefix + 60 of dict + '\n', padded to 64. */
		assert_int_equal(info.data_offset, 128);
		free(f);
	}
}

static void test_every_descr(void **state)
{
	(void)state;
	static const struct {
		const char *descr;
		enum npy_type t;
		size_t size;
	} cases[] = {
		{ "<f4", NPY_F4, 4 }, { "<f2", NPY_F2, 2 }, { "|i1", NPY_I1, 1 },
		{ "<i1", NPY_I1, 1 }, { "<i4", NPY_I4, 4 }, { "<u2", NPY_U2, 2 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char dict[128];
		size_t len;
		snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': "
			 "(7, 3), }", cases[i].descr);
		uint8_t *f = make_file(1, dict, 21 * cases[i].size, &len);
		struct npy_info info;
		char err[256];
		assert_int_equal(npy_parse(f, len, &info, err, sizeof(err)), 0);
		assert_int_equal(info.type, cases[i].t);
		assert_int_equal(info.data_bytes, 21 * cases[i].size);
		free(f);
	}
}

static void test_key_order_quotes_and_spacing(void **state)
{
	(void)state;
	size_t len;
	/* Keys in another order, double quotes, no trailing comma, a Python 2
	 * long suffix: all legal Python literals NumPy can read. */
	uint8_t *f = make_file(1, "{\"shape\":(4L,2L),\"fortran_order\":False,\"descr\":\"<f2\"}",
			       16, &len);
	struct npy_info info;
	char err[256];
	assert_int_equal(npy_parse(f, len, &info, err, sizeof(err)), 0);
	assert_int_equal(info.rows, 4);
	assert_int_equal(info.cols, 2);
	assert_int_equal(info.type, NPY_F2);
	free(f);
}

static void test_one_dimension_is_a_row(void **state)
{
	(void)state;
	size_t len;
	uint8_t *f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (9,), }",
			       36, &len);
	struct npy_info info;
	char err[256];
	assert_int_equal(npy_parse(f, len, &info, err, sizeof(err)), 0);
	assert_int_equal(info.ndim, 1);
	assert_int_equal(info.rows, 1);
	assert_int_equal(info.cols, 9);
	free(f);
}

static void test_refusals(void **state)
{
	(void)state;
	size_t len;
	uint8_t *f;

	f = make_file(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16, &len);
	expect_error(f, len, -ENOTSUP, "Fortran order");
	free(f);

	f = make_file(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", 32, &len);
	expect_error(f, len, -ENOTSUP, "'<f8' is not supported");
	free(f);

	f = make_file(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", 16, &len);
	expect_error(f, len, -ENOTSUP, "big-endian");
	free(f);

	f = make_file(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8,
		      &len);
	expect_error(f, len, -ENOTSUP, "structured");
	free(f);

	f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2), }", 32,
		      &len);
	expect_error(f, len, -ENOTSUP, "3 dimensions");
	free(f);

	f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4, &len);
	expect_error(f, len, -ENOTSUP, "0 dimensions");
	free(f);

	/* The shape says 48 bytes, 40 follow (a truncated file) and 52. */
	f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 40, &len);
	expect_error(f, len, -EINVAL, "needs 48 data bytes, the file has 40");
	free(f);
	f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 52, &len);
	expect_error(f, len, -EINVAL, "needs 48 data bytes, the file has 52");
	free(f);

	f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 48, &len);
	expect_error(f, 60, -EINVAL, "truncated .npy file");
	expect_error(f, 9, -EINVAL, "not a .npy file");
	f[6] = 4;
	expect_error(f, len, -ENOTSUP, "version 4.0");
	f[6] = 1;
	f[0] = 'x';
	expect_error(f, len, -EINVAL, "not a .npy file");
	free(f);

	f = make_file(1, "{'descr': '<f4', 'shape': (3, 4), }", 48, &len);
	expect_error(f, len, -EINVAL, "missing 'fortran_order'");
	free(f);

	f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), 'x': 1}", 48,
		      &len);
	expect_error(f, len, -EINVAL, "unknown key 'x'");
	free(f);

	f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, -4), }", 48, &len);
	expect_error(f, len, -EINVAL, "shape");
	free(f);

	f = make_file(1, "['descr', '<f4']", 48, &len);
	expect_error(f, len, -EINVAL, "does not start with '{'");
	free(f);

	f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 1), }", 0,
		      &len);
	expect_error(f, len, -ENOTSUP, "exceeds 2^32-1");
	free(f);
}

static void test_resolve(void **state)
{
	(void)state;
	enum mfma_dtype t;
	char err[256];
	assert_int_equal(npy_resolve(NPY_F4, MFMA_DT_NONE, &t, err, sizeof(err)), 0);
	assert_int_equal(t, MFMA_DT_F32);
	assert_int_equal(npy_resolve(NPY_F4, MFMA_DT_BF16, &t, err, sizeof(err)), 0);
	assert_int_equal(t, MFMA_DT_F32); /* the caller converts */
	assert_int_equal(npy_resolve(NPY_F2, MFMA_DT_NONE, &t, err, sizeof(err)), 0);
	assert_int_equal(t, MFMA_DT_F16);
	assert_int_equal(npy_resolve(NPY_I1, MFMA_DT_NONE, &t, err, sizeof(err)), 0);
	assert_int_equal(t, MFMA_DT_I8);
	assert_int_equal(npy_resolve(NPY_I4, MFMA_DT_NONE, &t, err, sizeof(err)), 0);
	assert_int_equal(t, MFMA_DT_I32);
	assert_int_equal(npy_resolve(NPY_U2, MFMA_DT_BF16, &t, err, sizeof(err)), 0);
	assert_int_equal(t, MFMA_DT_BF16);
	assert_int_equal(npy_resolve(NPY_U2, MFMA_DT_NONE, &t, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "--dtype bf16"));
	assert_int_equal(npy_resolve(NPY_U2, MFMA_DT_F16, &t, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not f16"));
}

/* The writer's header, with data appended, parses back to the same shape
 * and type for every dtype, and keeps the data 64-byte aligned. */
static void test_write_round_trip(void **state)
{
	(void)state;
	static const enum mfma_dtype all[] = { MFMA_DT_F32, MFMA_DT_F16, MFMA_DT_BF16, MFMA_DT_I8,
					       MFMA_DT_I32 };
	static const uint32_t shapes[][2] = { { 1, 1 }, { 3, 5 }, { 17, 33 },
					      { 4294967295u, 4294967295u } };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
			uint32_t r = shapes[s][0], c = shapes[s][1];
			uint8_t hdr[NPY_HEADER_MAX];
			size_t hlen = npy_write_header(npy_type_of(all[i]), r, c, hdr);
			assert_true(hlen > 0 && hlen <= NPY_HEADER_MAX);
			assert_int_equal(hlen % 64, 0);
			assert_int_equal(hdr[hlen - 1], '\n');
			size_t es = mfma_dtype_size(all[i]);
			struct npy_info info;
			char err[256];
			if ((uint64_t)r * c > 10000) {
				/* Too big to hold: the parser must say so by the
				 * byte count, having read the shape right. */
				assert_int_equal(npy_parse(hdr, hlen, &info, err, sizeof(err)),
						 -EINVAL);
				assert_non_null(strstr(err, "(4294967295, 4294967295)"));
				continue;
			}
			size_t n = (size_t)r * c * es;
			uint8_t *f = malloc(hlen + n);
			assert_non_null(f);
			memcpy(f, hdr, hlen);
			for (size_t k = 0; k < n; k++)
				f[hlen + k] = (uint8_t)(k * 13 + i);
			assert_int_equal(npy_parse(f, hlen + n, &info, err, sizeof(err)), 0);
			assert_int_equal(info.rows, r);
			assert_int_equal(info.cols, c);
			assert_int_equal(info.ndim, 2);
			assert_int_equal(info.type, npy_type_of(all[i]));
			assert_int_equal(info.data_offset, hlen);
			enum mfma_dtype back;
			assert_int_equal(npy_resolve(info.type, all[i], &back, err, sizeof(err)), 0);
			assert_int_equal(back, all[i]);
			assert_memory_equal(f + info.data_offset, f + hlen, n);
			free(f);
		}
	}
	uint8_t hdr[NPY_HEADER_MAX];
	assert_int_equal(npy_write_header(NPY_NONE, 1, 1, hdr), 0);
}

/* Byte for byte what NumPy 1.x writes for np.save(f, np.ones((2, 3), '<f2')). */
static void test_writer_matches_numpy(void **state)
{
	(void)state;
	const char *want = "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }";
	uint8_t hdr[NPY_HEADER_MAX];
	size_t hlen = npy_write_header(NPY_F2, 2, 3, hdr);
	assert_int_equal(hlen, 128);
	assert_memory_equal(hdr, "\x93NUMPY\x01\x00\x76\x00", 10);
	assert_memory_equal(hdr + 10, want, strlen(want));
	for (size_t i = 10 + strlen(want); i < 127; i++)
		assert_int_equal(hdr[i], ' ');
}

/* npy_decode: the file's own type kept in its buffer, data moved to the
 * start; f32 converted to f16 only when allowed; other types refused. */
static void test_decode(void **state)
{
	(void)state;
	size_t len;
	struct npy_matrix m;
	char err[256] = "";
	float vals[6] = { 1.0f, -2.0f, 0.5f, 3.0f, 0.0f, -0.25f };
	uint8_t *f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
			       sizeof(vals), &len);
	memcpy(f + len - sizeof(vals), vals, sizeof(vals));
	assert_int_equal(npy_decode(f, len, MFMA_DT_NONE, false, &m, err, sizeof(err)), 0);
	assert_int_equal(m.rows, 2);
	assert_int_equal(m.cols, 3);
	assert_int_equal(m.dtype, MFMA_DT_F32);
	assert_int_equal(m.bytes, sizeof(vals));
	assert_memory_equal(m.data, vals, sizeof(vals));
	npy_matrix_free(&m);

	f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", sizeof(vals),
		      &len);
	memcpy(f + len - sizeof(vals), vals, sizeof(vals));
	assert_int_equal(npy_decode(f, len, MFMA_DT_F16, false, &m, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "cannot be used as f16"));

	f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", sizeof(vals),
		      &len);
	memcpy(f + len - sizeof(vals), vals, sizeof(vals));
	assert_int_equal(npy_decode(f, len, MFMA_DT_F16, true, &m, err, sizeof(err)), 0);
	assert_int_equal(m.dtype, MFMA_DT_F16);
	assert_int_equal(m.bytes, 12);
	const uint16_t *h = m.data;
	for (int i = 0; i < 6; i++)
		assert_int_equal(h[i], mfma_f32_to_f16(vals[i]));
	npy_matrix_free(&m);

	f = make_file(1, "{'descr': '|i1', 'fortran_order': False, 'shape': (2, 3), }", 6, &len);
	assert_int_equal(npy_decode(f, len, MFMA_DT_F16, true, &m, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "i8"));
	npy_matrix_free(&m); /* nothing to free: safe */
}

/* npy_read: a file over the limit is refused from its size, naming both. */
static void test_read_limit(void **state)
{
	(void)state;
	size_t len;
	char path[] = "/tmp/test-npy-XXXXXX", err[256] = "";
	struct npy_matrix m;
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	uint8_t *f = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }", 64,
			       &len);
	assert_int_equal(write(fd, f, len), (ssize_t)len);
	close(fd);
	free(f);
	assert_int_equal(npy_read(path, MFMA_DT_NONE, false, len - 1, &m, err, sizeof(err)), -EFBIG);
	char want[64];
	snprintf(want, sizeof(want), "%zu bytes, over the limit of %zu", len, len - 1);
	if (!strstr(err, want) || !strstr(err, path))
		fail_msg("'%s' does not say '%s' with the path", err, want);
	assert_int_equal(npy_read(path, MFMA_DT_NONE, false, len, &m, err, sizeof(err)), 0);
	assert_int_equal(m.rows, 4);
	assert_int_equal(m.bytes, 64);
	npy_matrix_free(&m);
	unlink(path);
	assert_int_equal(npy_read(path, MFMA_DT_NONE, false, 0, &m, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, path));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_numpy_v1_f32),
		cmocka_unit_test(test_v2_and_v3_headers),
		cmocka_unit_test(test_every_descr),
		cmocka_unit_test(test_key_order_quotes_and_spacing),
		cmocka_unit_test(test_one_dimension_is_a_row),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_resolve),
		cmocka_unit_test(test_write_round_trip),
		cmocka_unit_test(test_writer_matches_numpy),
		cmocka_unit_test(test_decode),
		cmocka_unit_test(test_read_limit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
