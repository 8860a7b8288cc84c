/* The HIP backend against the real HIP runtime (libamdhip64).
 *
 * Everywhere: the embedded code objects are there for every arch built,
 * with every kernel; probe() reports the devices (zero, without error, on
 * a machine with no AMD GPU or no amdgpu driver).
 *
 * On a machine with AMD GPUs of a supported arch, the last test also runs
 * every variant on every device against the float64 CPU reference (odd
 * shapes, random 2:4 patterns, every dtype, resident weights, batched
 * launches on a resident weight); without
 * one it is skipped, and says so.  It has NOT run on hardware yet. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "amd_kernels.h"
#include "amd_testdata.h"
#include "backend.h"
#include "cpu_gemm.h"
#include "sparse24.h"

static const char *built_archs(void)
{
	const char *a = getenv("MFMA_AMD_ARCHS");
	if (!a)
		fail_msg("MFMA_AMD_ARCHS is not set (the meson test sets it to amd_archs)");
	return a;
}

static void test_code_objects(void **state)
{
	(void)state;
	char archs[256];
	snprintf(archs, sizeof(archs), "%s", built_archs());
	int n = 0;
	for (char *save = NULL, *a = strtok_r(archs, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
		const void *co;
		size_t size;
		enum amd_arch arch;
		assert_int_equal(amd_arch_parse(a, &arch), 0);
		assert_int_equal(amd_code_object(a, &co, &size), 0);
		assert_true(size > 1024);
		for (size_t i = 0; i < amd_variant_count(); i++) {
			struct amd_variant v;
			assert_int_equal(amd_variant_at(arch, i, &v), 0);
			if (amd_elf_has_symbol(co, size, v.kernel) != 1)
				fail_msg("%s: kernel %s is not in the code object", a, v.kernel);
		}
		assert_int_equal(amd_elf_has_symbol(co, size, "mfmad_gemm_no_such_kernel"), 0);
		/* A truncated object is refused, not read past its end. */
		assert_int_equal(amd_elf_has_symbol(co, 40, "mfmad_gemm_dense_f16"), -EINVAL);
		n++;
	}
	assert_true(n > 0);
	const void *co;
	size_t size;
	assert_int_equal(amd_code_object("gfx1100", &co, &size), -ENOENT);
}

static int ndev = -1;

static void test_probe(void **state)
{
	(void)state;
	struct backend_config cfg = { 0 };
	char err[256] = "";
	ndev = backend_hip.probe(&cfg, err, sizeof(err));
	if (ndev < 0)
		fail_msg("probe failed: %s", err);
	print_message("  hip probe: %d device(s)%s\n", ndev,
		      ndev == 0 ? " (no AMD GPU or no driver here: that is not an error)" : "");
	assert_string_equal(backend_hip.name, "hip");
	struct backend_device_info info;
	assert_int_equal(backend_hip.describe(ndev, &info), -EINVAL);
	assert_int_equal(backend_hip.describe(-1, &info), -EINVAL);
	for (int i = 0; i < ndev; i++) {
		enum amd_arch arch;
		assert_int_equal(backend_hip.describe(i, &info), 0);
		assert_int_equal(amd_arch_parse(info.arch, &arch), 0);
		assert_true(info.variants[0] != '\0');
		print_message("  device %d: %s %s, %llu MiB, %s\n", i, info.arch, info.name,
			      (unsigned long long)(info.mem_total >> 20), info.variants);
	}
	void *dev = NULL;
	assert_int_equal(backend_hip.open(ndev, &cfg, &dev, err, sizeof(err)), -EINVAL);
	assert_null(dev);
}

/* ---- On a real device ---- */

static enum amd_arch cur_arch; /* of the device under test */

/* A random m x k A of dtype t into dense, and for a 2:4 A its canonical
 * form into vals and meta: the A a GEMM names (vals or dense). */
static const void *random_a(enum mfma_dtype t, bool sparse, uint32_t m, uint32_t k, unsigned *s,
			    void *dense, void *vals, uint32_t *meta)
{
	if (sparse) {
		td_random_24(dense, t, m, k, s);
		assert_int_equal(sparse24_compress(dense, t, m, k, vals, meta, NULL, NULL), 0);
		return vals;
	}
	for (size_t i = 0; i < (size_t)m * k; i++)
		td_put_random(dense, t, i, s);
	return dense;
}

static void device_gemm(void *dev, enum mfma_dtype t, bool sparse, bool resident, uint32_t m,
			uint32_t n, uint32_t k, unsigned *s)
{
	size_t es = mfma_dtype_size(t);
	enum mfma_dtype out = t == MFMA_DT_I8 ? MFMA_DT_I32 : (td_rand(s) % 2 ? t : MFMA_DT_F32);
	size_t os = mfma_dtype_size(out);
	void *dense = malloc((size_t)m * k * es + 1), *vals = malloc((size_t)m * k * es + 1);
	uint32_t *meta = malloc(sparse24_meta_bytes(m, k) + 4);
	void *b = malloc((size_t)k * n * es + 1), *c = malloc((size_t)m * n * os + 1);
	void *d = malloc((size_t)m * n * os + 1);
	double *ref = malloc((size_t)m * n * sizeof(double) + 1);
	assert_true(dense && vals && meta && b && c && d && ref);
	struct mfma_gemm g = { .m = m, .n = n, .k = k, .in_dtype = t, .out_dtype = out,
			       .alpha = t == MFMA_DT_I8 ? 1.0f : 1.5f,
			       .beta = td_rand(s) % 2 ? 1.0f : 0.0f, .a_sparse = sparse };
	g.a = random_a(t, sparse, m, k, s, dense, vals, meta);
	g.a_meta = sparse ? meta : NULL;
	for (size_t i = 0; i < (size_t)k * n; i++)
		td_put_random(b, t, i, s);
	for (size_t i = 0; i < (size_t)m * n; i++)
		td_put_random(c, out, i, s);
	g.b = b;
	g.c = g.beta != 0.0f ? c : NULL;
	g.d = d;
	assert_int_equal(cpu_gemm_ref_f64(&g, ref), 0);

	char err[512] = "";
	void *w = NULL;
	uint64_t wbytes = 0;
	if (resident) {
		struct mfma_weight_host wh = { .m = m, .k = k, .dtype = t, .sparse = sparse, .a = g.a,
					       .meta = g.a_meta };
		if (backend_hip.weight_load(dev, &wh, &w, &wbytes, err, sizeof(err)) < 0)
			fail_msg("weight_load: %s", err);
		/* The weight is charged what the device holds: the values and
		 * the meta in the kernel's form, at least the canonical size. */
		uint64_t held = sparse ? sparse24_values_bytes(m, k, es) : (uint64_t)m * k * es;
		if (sparse) {
			struct amd_variant v;
			assert_int_equal(amd_variant_get(cur_arch, t, true, &v), 0);
			held += v.cfg.smfmac ? amd_meta_bytes(&v.cfg, m, k) : sparse24_meta_bytes(m, k);
		}
		if (wbytes < held || wbytes < sparse24_operand_bytes(m, k, es, sparse))
			fail_msg("weight_load: dev_bytes %llu, the weight holds %llu bytes",
				 (unsigned long long)wbytes, (unsigned long long)held);
	}
	struct backend_timing tm;
	memset(d, 0xee, (size_t)m * n * os);
	if (backend_hip.gemm(dev, &g, w, &tm, err, sizeof(err)) < 0)
		fail_msg("%s %s %ux%ux%u: %s", mfma_dtype_name(t), sparse ? "sp24" : "dense", m, n, k, err);
	size_t count = (size_t)m * n;
	if (out == MFMA_DT_I32) {
		for (size_t i = 0; i < count; i++)
			if (((int32_t *)d)[i] != (int32_t)ref[i])
				fail_msg("%s %ux%ux%u: D[%zu] = %d, want %.0f", tm.variant, m, n, k, i,
					 ((int32_t *)d)[i], ref[i]);
	} else {
		double tol = out == MFMA_DT_F32 ? 1e-5 : 1e-2;
		double e = cpu_rel_frobenius(d, out, ref, count);
		if (!(e < tol))
			fail_msg("%s %ux%ux%u: relative error %g (limit %g)", tm.variant, m, n, k, e, tol);
	}
	print_message("    %-44s %5ux%5ux%5u%s  h2d %8.1f us  kernel %8.1f us  d2h %8.1f us\n",
		      tm.variant, m, n, k, resident ? " (resident)" : "", tm.h2d_ns / 1e3,
		      tm.kernel_ns / 1e3, tm.d2h_ns / 1e3);
	if (w)
		backend_hip.weight_free(dev, w);
	free(dense);
	free(vals);
	free(meta);
	free(b);
	free(c);
	free(d);
	free(ref);
}

/* A batched launch (three requests on one resident weight, 5, 1 and 3
 * columns, each with its own C): one backend call, joined in host memory
 * (host_join.h), each part's D against its own float64 reference. */
static void device_batched(void *dev, enum mfma_dtype t, bool sparse, uint32_t m, uint32_t k,
			   unsigned *s)
{
	enum { NP = 3 };
	static const uint32_t ns[NP] = { 5, 1, 3 };
	const size_t es = mfma_dtype_size(t);
	const enum mfma_dtype out = t == MFMA_DT_I8 ? MFMA_DT_I32 : MFMA_DT_F32;
	const size_t os = mfma_dtype_size(out);
	void *dense = malloc((size_t)m * k * es + 1), *vals = malloc((size_t)m * k * es + 1);
	uint32_t *meta = malloc(sparse24_meta_bytes(m, k) + 4);
	assert_true(dense && vals && meta);
	struct mfma_weight_host wh = { .m = m, .k = k, .dtype = t, .sparse = sparse,
				       .a = random_a(t, sparse, m, k, s, dense, vals, meta),
				       .meta = sparse ? meta : NULL };
	char err[512] = "";
	void *w = NULL;
	uint64_t wbytes = 0;
	if (backend_hip.weight_load(dev, &wh, &w, &wbytes, err, sizeof(err)) < 0)
		fail_msg("batched: weight_load: %s", err);
	struct mfma_gemm one[NP];
	struct mfma_gemm_part parts[NP];
	double *ref[NP];
	uint32_t total = 0;
	for (int i = 0; i < NP; i++) {
		void *b = malloc((size_t)k * ns[i] * es), *c = malloc((size_t)m * ns[i] * os);
		void *d = malloc((size_t)m * ns[i] * os);
		ref[i] = malloc((size_t)m * ns[i] * sizeof(double));
		assert_true(b && c && d && ref[i]);
		for (size_t x = 0; x < (size_t)k * ns[i]; x++)
			td_put_random(b, t, x, s);
		for (size_t x = 0; x < (size_t)m * ns[i]; x++)
			td_put_random(c, out, x, s);
		memset(d, 0xee, (size_t)m * ns[i] * os);
		one[i] = (struct mfma_gemm){ .m = m, .n = ns[i], .k = k, .in_dtype = t, .out_dtype = out,
					     .alpha = 1.0f, .beta = 1.0f, .a_sparse = sparse,
					     .a = wh.a, .a_meta = wh.meta, .b = b, .c = c, .d = d };
		assert_int_equal(cpu_gemm_ref_f64(&one[i], ref[i]), 0);
		parts[i] = (struct mfma_gemm_part){ .b = b, .c = c, .d = d, .n = ns[i] };
		total += ns[i];
	}
	struct mfma_gemm g = one[0];
	g.n = total;
	g.b = g.c = g.d = NULL;
	g.nparts = NP;
	g.parts = parts;
	struct backend_timing tm = { 0 };
	if (backend_hip.gemm(dev, &g, w, &tm, err, sizeof(err)) < 0)
		fail_msg("batched %s %s %ux%ux%u: %s", mfma_dtype_name(t), sparse ? "sp24" : "dense", m,
			 total, k, err);
	for (int i = 0; i < NP; i++) {
		const size_t count = (size_t)m * ns[i];
		if (out == MFMA_DT_I32) {
			for (size_t x = 0; x < count; x++)
				if (((int32_t *)one[i].d)[x] != (int32_t)ref[i][x])
					fail_msg("batched %s part %d: D[%zu] = %d, want %.0f", tm.variant, i, x,
						 ((int32_t *)one[i].d)[x], ref[i][x]);
		} else {
			double e = cpu_rel_frobenius(one[i].d, out, ref[i], count);
			if (!(e < 1e-5))
				fail_msg("batched %s part %d: relative error %g", tm.variant, i, e);
		}
		free((void *)one[i].b);
		free((void *)one[i].c);
		free(one[i].d);
		free(ref[i]);
	}
	print_message("    %-44s %5ux%5ux%5u  batched, 3 parts\n", tm.variant, m, total, k);
	backend_hip.weight_free(dev, w);
	free(dense);
	free(vals);
	free(meta);
}

static void test_gemm_on_devices(void **state)
{
	(void)state;
	if (ndev <= 0) {
		print_message("  no AMD GPU: the on-device GEMM checks did not run\n");
		skip();
	}
	static const enum mfma_dtype types[] = { MFMA_DT_F16, MFMA_DT_BF16, MFMA_DT_I8 };
	static const uint32_t shapes[][3] = { { 1, 1, 4 }, { 37, 19, 52 }, { 130, 257, 200 },
					      { 512, 512, 1024 } };
	unsigned s = 42;
	for (int i = 0; i < ndev; i++) {
		struct backend_config cfg = { 0 };
		char err[512];
		void *dev;
		if (backend_hip.open(i, &cfg, &dev, err, sizeof(err)) < 0)
			fail_msg("open(%d): %s", i, err);
		struct backend_device_info info;
		assert_int_equal(backend_hip.describe(i, &info), 0);
		assert_int_equal(amd_arch_parse(info.arch, &cur_arch), 0);
		assert_true(info.batches);
		for (size_t t = 0; t < 3; t++)
			for (int sp = 0; sp < 2; sp++)
				device_batched(dev, types[t], sp, 37, 64, &s);
		for (size_t t = 0; t < 3; t++)
			for (int sp = 0; sp < 2; sp++)
				for (size_t j = 0; j < sizeof(shapes) / sizeof(shapes[0]); j++)
					device_gemm(dev, types[t], sp, j % 2 == 1, shapes[j][0], shapes[j][1],
						    shapes[j][2], &s);
		/* f32 inputs have no matrix-core kernel: refused, clearly. */
		float one = 1.0f, outv;
		struct mfma_gemm g = { .m = 1, .n = 1, .k = 1, .in_dtype = MFMA_DT_F32,
				       .out_dtype = MFMA_DT_F32, .alpha = 1, .a = &one, .b = &one,
				       .d = &outv };
		struct backend_timing tm;
		assert_int_equal(backend_hip.gemm(dev, &g, NULL, &tm, err, sizeof(err)), -ENOTSUP);
		assert_non_null(strstr(err, "in_dtype=f32"));
		/* A D no device can hold (2^21 x 2^19 f32, 4 TiB) fails after
		 * A and B are on the stream: the backend must wait for those
		 * copies before it returns, so the host operands can be freed
		 * at once (they are, below) and the device serves the next
		 * request. */
		const uint32_t big_m = 1u << 21, big_n = 1u << 19, big_k = 4;
		uint16_t *ba = calloc((size_t)big_m * big_k, 2), *bb = calloc((size_t)big_k * big_n, 2);
		float small_d = 42.0f;
		assert_true(ba && bb);
		struct mfma_gemm huge = { .m = big_m, .n = big_n, .k = big_k, .in_dtype = MFMA_DT_F16,
					  .out_dtype = MFMA_DT_F32, .alpha = 1, .a = ba, .b = bb,
					  .d = &small_d };
		assert_true(backend_hip.gemm(dev, &huge, NULL, &tm, err, sizeof(err)) < 0);
		assert_non_null(strstr(err, "D"));
		free(ba);
		free(bb);
		assert_true(small_d == 42.0f);
		device_gemm(dev, MFMA_DT_F16, true, false, 37, 19, 52, &s);
		backend_hip.close(dev);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_code_objects),
		cmocka_unit_test(test_probe),
		cmocka_unit_test(test_gemm_on_devices),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
