/* The AMD kernels' lane arithmetic, checked against the vendor's layout
 * tables without an AMD GPU.
 *
 * Each matrix instruction is emulated from the matrix calculator's CSV
 * tables (tests/amd/layouts/; gfx950 from documentation only, see
 * layouts/gen_cdna4_doc.py).  The policies' host-compiled lane code feeds
 * it (one instruction at a time, then whole GEMMs through a model of the
 * tiled kernel), and the results are compared with the float64 CPU
 * reference: random data, random 2:4 patterns, odd shapes, every dtype. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "amd_emu.h"
#include "amd_kernels.h"
#include "amd_testdata.h"
#include "amd_lanes.h"
#include "amd_model.h"
#include "cpu_gemm.h"
#include "sparse24.h"

/* What the issue asks each arch to run, and the table that describes it.
 * Written from the issue and the reference, not from amd_lanes.h. */
struct expect {
	enum amd_arch arch;
	enum amd_elem elem;
	bool sparse;
	enum amd_instr instr;
	const char *table;
	const char *source; /* NULL: the vendor table of this very arch */
};

static const struct expect expects[] = {
	{ AMD_GFX908, AMD_E_F16, false, AMD_MFMA_F32_16X16X16_F16, "cdna1_v_mfma_f32_16x16x16f16", NULL },
	{ AMD_GFX908, AMD_E_F16, true, AMD_MFMA_F32_16X16X16_F16, "cdna1_v_mfma_f32_16x16x16f16", NULL },
	{ AMD_GFX908, AMD_E_BF16, false, AMD_MFMA_F32_16X16X8_BF16, "cdna1_v_mfma_f32_16x16x8bf16", NULL },
	{ AMD_GFX908, AMD_E_BF16, true, AMD_MFMA_F32_16X16X8_BF16, "cdna1_v_mfma_f32_16x16x8bf16", NULL },
	{ AMD_GFX908, AMD_E_I8, false, AMD_MFMA_I32_16X16X16_I8, "cdna1_v_mfma_i32_16x16x16i8", NULL },
	{ AMD_GFX908, AMD_E_I8, true, AMD_MFMA_I32_16X16X16_I8, "cdna1_v_mfma_i32_16x16x16i8", NULL },
	{ AMD_GFX90A, AMD_E_F16, false, AMD_MFMA_F32_16X16X16_F16, "cdna2_v_mfma_f32_16x16x16f16", NULL },
	{ AMD_GFX90A, AMD_E_F16, true, AMD_MFMA_F32_16X16X16_F16, "cdna2_v_mfma_f32_16x16x16f16", NULL },
	{ AMD_GFX90A, AMD_E_BF16, false, AMD_MFMA_F32_16X16X16_BF16_1K, "cdna2_v_mfma_f32_16x16x16bf16_1k", NULL },
	{ AMD_GFX90A, AMD_E_BF16, true, AMD_MFMA_F32_16X16X16_BF16_1K, "cdna2_v_mfma_f32_16x16x16bf16_1k", NULL },
	{ AMD_GFX90A, AMD_E_I8, false, AMD_MFMA_I32_16X16X16_I8, "cdna2_v_mfma_i32_16x16x16i8", NULL },
	{ AMD_GFX90A, AMD_E_I8, true, AMD_MFMA_I32_16X16X16_I8, "cdna2_v_mfma_i32_16x16x16i8", NULL },
	{ AMD_GFX942, AMD_E_F16, false, AMD_MFMA_F32_16X16X16_F16, "cdna3_v_mfma_f32_16x16x16_f16", NULL },
	{ AMD_GFX942, AMD_E_F16, true, AMD_SMFMAC_F32_16X16X32_F16, "cdna3_v_smfmac_f32_16x16x32_f16", NULL },
	{ AMD_GFX942, AMD_E_BF16, false, AMD_MFMA_F32_16X16X16_BF16_1K, "cdna3_v_mfma_f32_16x16x16_bf16", NULL },
	{ AMD_GFX942, AMD_E_BF16, true, AMD_SMFMAC_F32_16X16X32_BF16, "cdna3_v_smfmac_f32_16x16x32_bf16", NULL },
	{ AMD_GFX942, AMD_E_I8, false, AMD_MFMA_I32_16X16X32_I8, "cdna3_v_mfma_i32_16x16x32_i8", NULL },
	{ AMD_GFX942, AMD_E_I8, true, AMD_SMFMAC_I32_16X16X64_I8, "cdna3_v_smfmac_i32_16x16x64_i8", NULL },
	{ AMD_GFX950, AMD_E_F16, false, AMD_MFMA_F32_16X16X32_F16, "cdna4doc_v_mfma_f32_16x16x32_f16",
	  "documentation only (no vendor table for CDNA4)" },
	{ AMD_GFX950, AMD_E_F16, true, AMD_SMFMAC_F32_16X16X64_F16, "cdna4doc_v_smfmac_f32_16x16x64_f16",
	  "documentation only (no vendor table for CDNA4)" },
	{ AMD_GFX950, AMD_E_BF16, false, AMD_MFMA_F32_16X16X32_BF16, "cdna4doc_v_mfma_f32_16x16x32_bf16",
	  "documentation only (no vendor table for CDNA4)" },
	{ AMD_GFX950, AMD_E_BF16, true, AMD_SMFMAC_F32_16X16X64_BF16, "cdna4doc_v_smfmac_f32_16x16x64_bf16",
	  "documentation only (no vendor table for CDNA4)" },
	{ AMD_GFX950, AMD_E_I8, false, AMD_MFMA_I32_16X16X64_I8, "cdna4doc_v_mfma_i32_16x16x64_i8",
	  "documentation only (no vendor table for CDNA4)" },
	{ AMD_GFX950, AMD_E_I8, true, AMD_SMFMAC_I32_16X16X64_I8, "cdna3_v_smfmac_i32_16x16x64_i8",
	  "the CDNA3 vendor table, assumed unchanged on CDNA4" },
};

#define NEXPECT (sizeof(expects) / sizeof(expects[0]))

static const char *layout_dir(void)
{
	const char *d = getenv("MFMA_AMD_LAYOUTS");
	if (!d)
		fail_msg("MFMA_AMD_LAYOUTS is not set (the meson test sets it to tests/amd/layouts)");
	return d;
}

static void load(const struct expect *x, struct emu_instr *ins)
{
	char err[512];
	/* An expanded 2:4 A meets a dense instruction. */
	bool sparse = x->sparse && amd_instr_is_smfmac(x->instr);
	if (emu_load(ins, layout_dir(), x->table, x->elem, sparse, err, sizeof(err)) < 0)
		fail_msg("%s", err);
}

static const char *elem_name(enum amd_elem e)
{
	return e == AMD_E_F16 ? "f16" : e == AMD_E_BF16 ? "bf16" : "i8";
}

static enum mfma_dtype elem_dtype(enum amd_elem e)
{
	return e == AMD_E_F16 ? MFMA_DT_F16 : e == AMD_E_BF16 ? MFMA_DT_BF16 : MFMA_DT_I8;
}

static void say(const struct expect *x, const char *what)
{
	print_message("  %s %s %s %s: %s%s%s\n", amd_arch_name(x->arch), x->sparse ? "sp24" : "dense",
		      elem_name(x->elem), what, x->table, x->source ? " -- checked against " : "",
		      x->source ? x->source : "");
}

/* ---- Which instruction each (arch, dtype, sparsity) runs ---- */

static void test_instruction_choice(void **state)
{
	(void)state;
	for (size_t i = 0; i < NEXPECT; i++) {
		const struct expect *x = &expects[i];
		struct amd_cfg c = amd_cfg_get(x->arch, x->elem, x->sparse);
		assert_int_equal(c.instr, x->instr);
		/* No SMFMAC before gfx942: 2:4 is expanded there. */
		bool smfmac_arch = x->arch == AMD_GFX942 || x->arch == AMD_GFX950;
		assert_int_equal(c.smfmac, x->sparse && smfmac_arch);
		assert_int_equal(c.expand, x->sparse && !smfmac_arch);
		assert_int_equal(c.bk % c.ki, 0);
		/* What the device code sizes its register arrays by. */
		unsigned row, col;
		assert_true(amd_frag_a(&c, 0, &row, &col) * c.es <= AMD_MAX_A_REGS * 4);
		assert_true(c.ki / 4 * c.es <= AMD_MAX_B_REGS * 4);
		assert_true(amd_a_chunks_per_thread(&c) >= 1);
		assert_true(amd_a_chunks_per_thread(&c) <= AMD_MAX_A_CHUNKS);
		assert_true(amd_b_chunks_per_thread(&c) <= AMD_MAX_B_CHUNKS);
		assert_int_equal(AMD_BM * amd_a_chunks_per_row(&c) % AMD_THREADS, 0);
		assert_int_equal(c.bk * amd_b_chunks_per_row(&c) % AMD_THREADS, 0);
		assert_true(amd_meta_words(&c) <= AMD_THREADS);
	}
}

/* ---- One instruction, fed by the policy's lane code ---- */

/* A 16 x ki tile of A (dense or 2:4), ki x 16 of B, through one
 * emulated instruction; the result read back through amd_frag_d must be
 * the plain product. */
static void one_instruction(const struct expect *x, unsigned *s)
{
	struct amd_cfg c = amd_cfg_get(x->arch, x->elem, x->sparse);
	if (c.expand)
		return; /* the dense policy, checked with the dense entry */
	struct emu_instr ins;
	load(x, &ins);
	assert_int_equal(ins.k, c.ki);
	enum mfma_dtype t = elem_dtype(x->elem);
	unsigned ki = c.ki, es = c.es;
	uint8_t a[16 * 64 * 2], av[16 * 32 * 2], b[64 * 16 * 2];
	uint32_t meta[16 * 2];
	if (c.smfmac) {
		td_random_24(a, t, 16, ki, s);
		assert_int_equal(sparse24_compress(a, t, 16, ki, av, meta, NULL, NULL), 0);
	} else {
		for (unsigned i = 0; i < 16 * ki; i++)
			td_put_random(a, t, i, s);
	}
	for (unsigned i = 0; i < ki * 16; i++)
		td_put_random(b, t, i, s);

	uint32_t ra[EMU_LANES][EMU_A_REGS] = { { 0 } }, rb[EMU_LANES][EMU_B_REGS] = { { 0 } };
	uint32_t idx[EMU_LANES] = { 0 }, acc[EMU_LANES][4] = { { 0 } };
	for (unsigned lane = 0; lane < EMU_LANES; lane++) {
		unsigned row, col;
		unsigned n = amd_frag_a(&c, lane, &row, &col);
		const uint8_t *src = c.smfmac ? av + (row * ki / 2 + col) * es : a + (row * ki + col) * es;
		memcpy(ra[lane], src, n * es);
		for (unsigned j = 0; j < amd_frag_b_runs(&c); j++) {
			unsigned k, bc;
			amd_frag_b(&c, lane, j, &k, &bc);
			for (unsigned e = 0; e < c.b_run; e++)
				memcpy((uint8_t *)rb[lane] + (j * c.b_run + e) * es, b + ((k + e) * 16 + bc) * es,
				       es);
		}
		if (c.smfmac)
			idx[lane] = amd_meta_field(&c, meta, 16, ki, 0, 0, lane);
	}
	char err[512];
	if (emu_run(&ins, ra, rb, idx, acc, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	for (unsigned lane = 0; lane < EMU_LANES; lane++)
		for (unsigned q = 0; q < 4; q++) {
			unsigned row, col;
			amd_frag_d(lane, q, &row, &col);
			double want = 0.0;
			for (unsigned k = 0; k < ki; k++)
				want += mfma_load_f64(a, t, row * ki + k) * mfma_load_f64(b, t, k * 16 + col);
			double got;
			if (x->elem == AMD_E_I8) {
				got = (int32_t)acc[lane][q];
				if (got != want)
					fail_msg("%s: D[%u][%u] = %.0f, want %.0f", ins.name, row, col, got, want);
			} else {
				float f;
				memcpy(&f, &acc[lane][q], 4);
				got = f;
				if (fabs(got - want) > 1e-5 * (1.0 + fabs(want)))
					fail_msg("%s: D[%u][%u] = %g, want %g", ins.name, row, col, got, want);
			}
		}
	say(x, "one instruction");
	emu_free(&ins);
}

static void test_one_instruction(void **state)
{
	(void)state;
	unsigned s = 7;
	for (size_t i = 0; i < NEXPECT; i++)
		for (int rep = 0; rep < 3; rep++)
			one_instruction(&expects[i], &s);
}

/* The index operand is read per lane: a pattern of all positions (0, 2)
 * -- the seeds' fixed 0x88 -- must not pass for data that is not (0, 2). */
static void test_index_not_constant(void **state)
{
	(void)state;
	const struct expect *x = NULL;
	for (size_t i = 0; i < NEXPECT; i++)
		if (expects[i].instr == AMD_SMFMAC_F32_16X16X32_F16)
			x = &expects[i];
	assert_non_null(x);
	struct emu_instr ins;
	load(x, &ins);
	uint32_t ra[EMU_LANES][EMU_A_REGS], rb[EMU_LANES][EMU_B_REGS], idx[EMU_LANES];
	uint32_t acc1[EMU_LANES][4] = { { 0 } }, acc2[EMU_LANES][4] = { { 0 } };
	unsigned s = 99;
	for (unsigned l = 0; l < EMU_LANES; l++) {
		for (unsigned r = 0; r < EMU_A_REGS; r++)
			ra[l][r] = 0x3c003c00u; /* 1.0, 1.0 */
		for (unsigned r = 0; r < EMU_B_REGS; r++)
			rb[l][r] = (td_rand(&s) & 0x03ff03ffu) | 0x38003800u; /* random in [0.5, 1) */
	}
	/* Per-lane pairs (1, 3) versus the constant 0x88 = (0, 2) (0, 2). */
	for (unsigned l = 0; l < EMU_LANES; l++)
		idx[l] = 0xdd;
	char err[256];
	assert_int_equal(emu_run(&ins, ra, rb, idx, acc1, err, sizeof(err)), 0);
	for (unsigned l = 0; l < EMU_LANES; l++)
		idx[l] = 0x88;
	assert_int_equal(emu_run(&ins, ra, rb, idx, acc2, err, sizeof(err)), 0);
	assert_memory_not_equal(acc1, acc2, sizeof(acc1));
	/* And an unordered pair is refused, as the hardware does not define it. */
	idx[5] = 0x0f; /* (3, 3) */
	assert_int_equal(emu_run(&ins, ra, rb, idx, acc2, err, sizeof(err)), -EINVAL);
	emu_free(&ins);
}

/* ---- Whole GEMMs through the model of the tiled kernel ---- */

struct shape {
	uint32_t m, n, k;
};

/* Edge tiles everywhere: partial 128-blocks, partial 16-tiles, K not a
 * whole number of stages, one row, one column. */
static const struct shape shapes[] = {
	{ 1, 1, 4 }, { 17, 5, 36 }, { 64, 130, 100 }, { 133, 129, 68 }, { 3, 250, 260 },
};

static void one_gemm(const struct expect *x, const struct emu_instr *ins, struct shape sh,
		     unsigned *s, int variant)
{
	enum mfma_dtype t = elem_dtype(x->elem);
	if (!x->sparse && variant == 1 && sh.k > 1)
		sh.k -= 1; /* dense K need not be a multiple of 4 */
	size_t es = mfma_dtype_size(t);
	struct mfma_gemm g = { .m = sh.m, .n = sh.n, .k = sh.k, .in_dtype = t, .a_sparse = x->sparse };
	if (t == MFMA_DT_I8) {
		g.out_dtype = MFMA_DT_I32;
		g.alpha = 1.0f;
		g.beta = variant == 1 ? 1.0f : 0.0f;
	} else {
		g.out_dtype = variant == 1 ? t : MFMA_DT_F32;
		g.alpha = variant == 0 ? 1.0f : 0.75f;
		g.beta = variant == 2 ? 0.5f : 0.0f;
	}
	size_t os = mfma_dtype_size(g.out_dtype);
	void *dense = malloc((size_t)sh.m * sh.k * es + 1);
	void *vals = malloc((size_t)sh.m * sh.k / 2 * es + 1);
	uint32_t *meta = malloc((size_t)sh.m * sparse24_meta_words(sh.k) * 4 + 4);
	void *b = malloc((size_t)sh.k * sh.n * es + 1);
	void *c = malloc((size_t)sh.m * sh.n * os + 1);
	void *d = malloc((size_t)sh.m * sh.n * os + 1);
	double *ref = malloc((size_t)sh.m * sh.n * sizeof(double) + 1);
	assert_true(dense && vals && meta && b && c && d && ref);
	if (x->sparse) {
		td_random_24(dense, t, sh.m, sh.k, s);
		assert_int_equal(sparse24_compress(dense, t, sh.m, sh.k, vals, meta, NULL, NULL), 0);
		g.a = vals;
		g.a_meta = meta;
	} else {
		for (size_t i = 0; i < (size_t)sh.m * sh.k; i++)
			td_put_random(dense, t, i, s);
		g.a = dense;
	}
	for (size_t i = 0; i < (size_t)sh.k * sh.n; i++)
		td_put_random(b, t, i, s);
	for (size_t i = 0; i < (size_t)sh.m * sh.n; i++)
		td_put_random(c, g.out_dtype, i, s);
	memset(d, 0xee, (size_t)sh.m * sh.n * os);
	g.b = b;
	g.c = g.beta != 0.0f ? c : NULL;
	g.d = d;

	char err[512];
	if (model_gemm(x->arch, ins, &g, err, sizeof(err)) < 0)
		fail_msg("%s %ux%ux%u: %s", ins->name, sh.m, sh.n, sh.k, err);
	assert_int_equal(cpu_gemm_ref_f64(&g, ref), 0);
	size_t count = (size_t)sh.m * sh.n;
	if (g.out_dtype == MFMA_DT_I32) {
		for (size_t i = 0; i < count; i++)
			if (((int32_t *)d)[i] != (int32_t)ref[i])
				fail_msg("%s %s %ux%ux%u: D[%zu][%zu] = %d, want %.0f", amd_arch_name(x->arch),
					 ins->name, sh.m, sh.n, sh.k, i / sh.n, i % sh.n, ((int32_t *)d)[i], ref[i]);
	} else {
		double tol = g.out_dtype == MFMA_DT_F32 ? 1e-5 : 1e-2;
		double e = cpu_rel_frobenius(d, g.out_dtype, ref, count);
		if (!(e < tol))
			fail_msg("%s %s %ux%ux%u out %s: relative error %g (limit %g)",
				 amd_arch_name(x->arch), ins->name, sh.m, sh.n, sh.k,
				 mfma_dtype_name(g.out_dtype), e, tol);
	}
	free(dense);
	free(vals);
	free(meta);
	free(b);
	free(c);
	free(d);
	free(ref);
}

static void gemms_for_arch(enum amd_arch arch)
{
	unsigned s = 1000u + (unsigned)arch;
	for (size_t i = 0; i < NEXPECT; i++) {
		const struct expect *x = &expects[i];
		if (x->arch != arch)
			continue;
		struct emu_instr ins;
		load(x, &ins);
		for (size_t j = 0; j < sizeof(shapes) / sizeof(shapes[0]); j++)
			one_gemm(x, &ins, shapes[j], &s, (int)(j % 3));
		/* And one random shape. */
		struct shape r = { 1 + td_rand(&s) % 200, 1 + td_rand(&s) % 200, 4 * (1 + td_rand(&s) % 40) };
		one_gemm(x, &ins, r, &s, (int)(td_rand(&s) % 3));
		say(x, "whole GEMMs");
		emu_free(&ins);
	}
}

static void test_gemm_gfx908(void **state)
{
	(void)state;
	gemms_for_arch(AMD_GFX908);
}

static void test_gemm_gfx90a(void **state)
{
	(void)state;
	gemms_for_arch(AMD_GFX90A);
}

static void test_gemm_gfx942(void **state)
{
	(void)state;
	gemms_for_arch(AMD_GFX942);
}

static void test_gemm_gfx950(void **state)
{
	(void)state;
	print_message("  gfx950: checked against documentation only (no vendor layout table)\n");
	gemms_for_arch(AMD_GFX950);
}

/* ---- The host helpers ---- */

static void test_arch_parse(void **state)
{
	(void)state;
	enum amd_arch a;
	assert_int_equal(amd_arch_parse("gfx942:sramecc+:xnack-", &a), 0);
	assert_int_equal(a, AMD_GFX942);
	assert_int_equal(amd_arch_parse("gfx90a", &a), 0);
	assert_int_equal(a, AMD_GFX90A);
	assert_int_equal(amd_arch_parse("gfx908:xnack+", &a), 0);
	assert_int_equal(a, AMD_GFX908);
	assert_int_equal(amd_arch_parse("gfx950", &a), 0);
	assert_int_equal(a, AMD_GFX950);
	assert_int_equal(amd_arch_parse("gfx1100", &a), -ENOENT);
	assert_int_equal(amd_arch_parse("gfx94", &a), -ENOENT);
	assert_int_equal(amd_arch_parse("gfx9420", &a), -ENOENT);
	assert_int_equal(amd_arch_parse("", &a), -ENOENT);
	assert_int_equal(amd_arch_parse(NULL, &a), -EINVAL);
}

static void test_variants(void **state)
{
	(void)state;
	struct amd_variant v, w;
	assert_int_equal(amd_variant_get(AMD_GFX942, MFMA_DT_F32, false, &v), -ENOTSUP);
	assert_int_equal(amd_variant_get(AMD_GFX942, MFMA_DT_I32, true, &v), -ENOTSUP);
	for (int a = 0; a < AMD_NARCH; a++)
		for (size_t i = 0; i < amd_variant_count(); i++) {
			assert_int_equal(amd_variant_at((enum amd_arch)a, i, &v), 0);
			/* The name says the arch, and no two are the same. */
			assert_non_null(strstr(v.name, amd_arch_name((enum amd_arch)a)));
			assert_null(strchr(v.name, ','));
			for (int b2 = 0; b2 < AMD_NARCH; b2++)
				for (size_t j = 0; j < amd_variant_count(); j++) {
					if (b2 == a && j == i)
						continue;
					assert_int_equal(amd_variant_at((enum amd_arch)b2, j, &w), 0);
					assert_string_not_equal(v.name, w.name);
				}
		}
	assert_int_equal(amd_variant_at(AMD_GFX942, amd_variant_count(), &v), -EINVAL);
	assert_int_equal(amd_variant_get(AMD_GFX950, MFMA_DT_BF16, true, &v), 0);
	assert_string_equal(v.kernel, "mfmad_gemm_sp24_bf16");
	assert_int_equal(v.cfg.instr, AMD_SMFMAC_F32_16X16X64_BF16);
}

static void test_meta_convert(void **state)
{
	(void)state;
	struct amd_cfg sp = amd_cfg_get(AMD_GFX942, AMD_E_F16, true);
	struct amd_cfg ex = amd_cfg_get(AMD_GFX90A, AMD_E_F16, true);
	uint32_t canon[4 * 2] = { 0 };
	uint8_t out[4096];
	assert_int_equal(amd_meta_convert(&ex, canon, 4, 64, out, sizeof(out)), -EINVAL);
	assert_int_equal(amd_meta_convert(&sp, canon, 4, 62, out, sizeof(out)), -EINVAL);
	assert_int_equal(amd_meta_convert(&sp, canon, 4, 64, out, 10), -EINVAL);
	/* Row 0 of a 4x64 matrix: groups 0..15 with nibbles 0x1..0xe cycling
	 * through legal pairs; lane g (row 0) of step 0 gets groups 2g, 2g+1. */
	static const unsigned pairs[6] = { 0x4, 0x8, 0xc, 0x9, 0xd, 0xe };
	for (unsigned g = 0; g < 16; g++)
		canon[g / 8] |= pairs[g % 6] << (4 * (g % 8));
	assert_int_equal(amd_meta_convert(&sp, canon, 4, 64, out, sizeof(out)), 0);
	assert_int_equal(amd_meta_bytes(&sp, 4, 64), 2 * 64);
	for (unsigned step = 0; step < 2; step++)
		for (unsigned g = 0; g < 4; g++) {
			unsigned grp = step * 8 + 2 * g;
			unsigned want = pairs[grp % 6] | pairs[(grp + 1) % 6] << 4;
			assert_int_equal(out[amd_meta_offset(&sp, 64, 0, step, 16 * g)], want);
		}
	/* Rows 4..15 of the block do not exist: the legal pair (0, 1). */
	assert_int_equal(out[amd_meta_offset(&sp, 64, 0, 0, 5)], 0x44);
}

static void test_elf_refuses_garbage(void **state)
{
	(void)state;
	uint8_t junk[256];
	memset(junk, 0x5a, sizeof(junk));
	assert_int_equal(amd_elf_has_symbol(junk, sizeof(junk), "x"), -EINVAL);
	assert_int_equal(amd_elf_has_symbol(junk, 10, "x"), -EINVAL);
	assert_int_equal(amd_elf_has_symbol(NULL, 0, "x"), -EINVAL);
	/* An ELF header whose section table points past the end. */
	memset(junk, 0, sizeof(junk));
	memcpy(junk, "\x7f" "ELF\x02\x01", 6);
	junk[58] = 64; /* e_shentsize */
	junk[60] = 3;  /* e_shnum */
	junk[40] = 200; /* e_shoff */
	assert_int_equal(amd_elf_has_symbol(junk, sizeof(junk), "x"), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_instruction_choice),
		cmocka_unit_test(test_one_instruction),
		cmocka_unit_test(test_index_not_constant),
		cmocka_unit_test(test_gemm_gfx908),
		cmocka_unit_test(test_gemm_gfx90a),
		cmocka_unit_test(test_gemm_gfx942),
		cmocka_unit_test(test_gemm_gfx950),
		cmocka_unit_test(test_arch_parse),
		cmocka_unit_test(test_variants),
		cmocka_unit_test(test_meta_convert),
		cmocka_unit_test(test_elf_refuses_garbage),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
