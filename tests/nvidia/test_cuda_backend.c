/* The CUDA backend on a real GPU, driven directly through backend_cuda
 * (no daemon): every kind (f16, bf16, i8 x dense, 2:4) and output type,
 * random shapes including ones that fill no tile, random 2:4 patterns,
 * resident weights, every tile variant and split-K, compared with the
 * float64 CPU reference at the dtype tolerances.  Without a driver or a
 * GPU it exits 77, which meson counts as skipped.
 *
 * Each kernel provider (ours, cuBLASLt, cuSPARSELt where their libraries
 * load) is also driven on its own, on every shape it claims, and the
 * measured choice among them for a resident weight is checked to pick and
 * name one.
 *
 * Answers in pinned frames (cuda.pinned_answers_mb) are checked on a
 * second open of the device with a small arena (test_pooled_answers).
 * The device is opened with cuda.gate and cuda.tile_out on, as the
 * daemon's defaults: resident wgmma GEMMs whose B is registered launch
 * before B is in, and lone ones whose D is mapped copy D out from the
 * kernel (test_gate and test_tile_out drive those paths directly).
 *
 * MFMA_TEST_DEVICE=i picks the device (default 0); MFMA_TEST_ALL_DEVICES=1
 * runs the quick check on every device too. */
#include "mfmad_build.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend.h"
#include "cpu_gemm.h"
#include "cuda_batch.h"
#include "cuda_provider.h"
#include "cuda_widths.h"
#include "frame_arena.h"
#include "mfma_clock.h"
#include "providers.h"
#include "nv_plan.h"
#include "nv_testdata.h"
#include "nv_wgmma.h"
#include "sparse24.h"

/* The configuration main opens the device with, and every test that
 * opens or reopens one starts from: a small pinned pool (so that the
 * staging chunks and double-buffers), the daemon's cuda.graphs,
 * cuda.gate and cuda.tile_out. */
#define TEST_BASE_CFG                                                                         \
	.pinned_bytes = 8u << 20, .cuda_graphs = true, .cuda_gate = true, .cuda_tile_out = true, \
	.cuda_out_stream = true

static void *dev;
static int ndev;
static int dev_index;
/* MFMA_TEST_QUICK=1: fewer and smaller cases (compute-sanitizer memcheck);
 * 2: a minimal set (racecheck, which tracks every shared-memory access). */
static int quick;
static uint64_t seed = 0x5eedf00d1234567ull;
static int checks;

#define RC_OK(call, err)                                                  \
	do {                                                              \
		int rc_ = (call);                                         \
		if (rc_ != 0)                                             \
			fail_msg("%s failed (%d): %s", #call, rc_, err);  \
	} while (0)

struct operands {
	struct mfma_gemm g;
	void *a, *b, *c, *d;
	uint32_t *meta;
};

static void ops_free(struct operands *o)
{
	free(o->a);
	free(o->b);
	free(o->c);
	free(o->d);
	free(o->meta);
	memset(o, 0, sizeof(*o));
}

static void ops_make(struct operands *o, enum mfma_dtype in, enum mfma_dtype out, bool sparse,
		     uint32_t m, uint32_t n, uint32_t k, float alpha, float beta)
{
	memset(o, 0, sizeof(*o));
	size_t es = mfma_dtype_size(in), os = mfma_dtype_size(out);
	if (sparse) {
		o->a = malloc(sparse24_values_bytes(m, k, es) + 1);
		o->meta = malloc(sparse24_meta_bytes(m, k) + 4);
		assert_int_equal(nvt_sparse(in, m, k, o->a, o->meta, NULL, &seed), 0);
	} else {
		o->a = malloc((size_t)m * k * es + 1);
		nvt_fill(o->a, in, (size_t)m * k, &seed);
	}
	o->b = malloc((size_t)k * n * es + 1);
	nvt_fill(o->b, in, (size_t)k * n, &seed);
	if (beta != 0.0f) {
		o->c = malloc((size_t)m * n * os + 1);
		nvt_fill(o->c, out, (size_t)m * n, &seed);
	}
	o->d = malloc((size_t)m * n * os + 1);
	/* Poison: an element the kernel does not write fails the check. */
	memset(o->d, 0xff, (size_t)m * n * os);
	o->g = (struct mfma_gemm){
		.m = m, .n = n, .k = k, .in_dtype = in, .out_dtype = out, .alpha = alpha, .beta = beta,
		.a_sparse = sparse, .a = o->a, .a_meta = o->meta, .b = o->b, .c = o->c, .d = o->d,
	};
}

/* Relative error of rows [0, rows) of D (sampled: rows listed in idx when
 * not NULL) against the reference. */
static double rel_error(const struct operands *o, const uint32_t *idx, uint32_t rows)
{
	const struct mfma_gemm *g = &o->g;
	size_t es = mfma_dtype_size(g->in_dtype), os = mfma_dtype_size(g->out_dtype);
	struct mfma_gemm sub = *g;
	void *a = NULL, *c = NULL, *d = NULL;
	uint32_t *meta = NULL;
	if (idx) {
		/* A sub-problem of the chosen rows, so that the reference
		 * stays cheap on large shapes. */
		size_t arow = (g->a_sparse ? g->k / 2 : g->k) * es, mrow = sparse24_meta_bytes(1, g->k);
		a = malloc(rows * arow + 1);
		d = malloc((size_t)rows * g->n * os + 1);
		if (g->a_sparse)
			meta = malloc(rows * mrow + 4);
		if (g->c)
			c = malloc((size_t)rows * g->n * os + 1);
		for (uint32_t i = 0; i < rows; i++) {
			memcpy((char *)a + i * arow, (const char *)g->a + idx[i] * arow, arow);
			if (meta)
				memcpy((char *)meta + i * mrow, (const char *)g->a_meta + idx[i] * mrow, mrow);
			if (c)
				memcpy((char *)c + (size_t)i * g->n * os,
				       (const char *)g->c + (size_t)idx[i] * g->n * os, g->n * os);
			memcpy((char *)d + (size_t)i * g->n * os, (const char *)g->d + (size_t)idx[i] * g->n * os,
			       g->n * os);
		}
		sub.m = rows;
		sub.a = a;
		sub.a_meta = meta;
		sub.c = c;
		sub.d = d;
	}
	double *ref = malloc((size_t)sub.m * sub.n * sizeof(double) + 8);
	assert_int_equal(cpu_gemm_ref_f64(&sub, ref), 0);
	double rel = cpu_rel_frobenius(sub.d, sub.out_dtype, ref, (size_t)sub.m * sub.n);
	free(ref);
	free(a);
	free(c);
	free(d);
	free(meta);
	return rel;
}

static void expect_ok(const struct operands *o, void *weight, const char *what, uint32_t sample_rows)
{
	char err[512] = "";
	struct backend_timing t = { 0 };
	int rc = backend_cuda.gemm(dev, &o->g, weight, &t, err, sizeof(err));
	if (rc != 0)
		fail_msg("%s: gemm failed (%d): %s", what, rc, err);
	uint32_t *idx = NULL, rows = o->g.m;
	if (sample_rows && sample_rows < o->g.m) {
		idx = malloc(sample_rows * sizeof(*idx));
		for (uint32_t i = 0; i < sample_rows; i++)
			idx[i] = i == 0 ? 0 : i == 1 ? o->g.m - 1 : nvt_rand(&seed) % o->g.m;
		rows = sample_rows;
	}
	double rel = rel_error(o, idx, rows);
	double tol = nvt_tolerance(o->g.out_dtype);
	free(idx);
	checks++;
	printf("  %-44s %-22s rel %.3g  h2d %7.1f us  kernel %8.1f us  d2h %7.1f us\n", what,
	       t.variant ? t.variant : "?", rel, t.h2d_ns / 1e3, t.kernel_ns / 1e3, t.d2h_ns / 1e3);
	if (!(rel <= tol))
		fail_msg("%s: relative error %g above %g", what, rel, tol);
	if (!t.variant || !t.kernel_ns)
		fail_msg("%s: no timing or variant reported", what);
}

static const enum mfma_dtype in_types[] = { MFMA_DT_F16, MFMA_DT_BF16, MFMA_DT_I8 };

static enum mfma_dtype out_for(enum mfma_dtype in, int variant)
{
	if (in == MFMA_DT_I8)
		return MFMA_DT_I32;
	return variant % 2 ? in : MFMA_DT_F32;
}

static void run_case(enum mfma_dtype in, enum mfma_dtype out, bool sparse, uint32_t m, uint32_t n,
		     uint32_t k, float alpha, float beta, uint32_t sample_rows)
{
	struct operands o;
	ops_make(&o, in, out, sparse, m, n, k, alpha, beta);
	char what[128];
	snprintf(what, sizeof(what), "%s->%s %s %ux%ux%u a=%g b=%g", mfma_dtype_name(in),
		 mfma_dtype_name(out), sparse ? "2:4" : "dense", m, n, k, alpha, beta);
	expect_ok(&o, NULL, what, sample_rows);
	ops_free(&o);
}

static void test_random_shapes(void **state)
{
	(void)state;
	for (int it = 0; it < (quick == 2 ? 1 : quick ? 2 : 8); it++)
		for (size_t ti = 0; ti < 3; ti++)
			for (int sp = 0; sp < 2; sp++) {
				enum mfma_dtype in = in_types[ti];
				uint32_t m = 1 + nvt_rand(&seed) % 200;
				uint32_t n = 1 + nvt_rand(&seed) % 200;
				uint32_t k = sp ? 4 * (1 + nvt_rand(&seed) % 125) : 1 + nvt_rand(&seed) % 500;
				float alpha = in == MFMA_DT_I8 ? 1.0f : 0.5f + (float)(nvt_rand(&seed) % 100) / 64.0f;
				float beta = it % 2 ? (in == MFMA_DT_I8 ? 1.0f : -0.75f) : 0.0f;
				run_case(in, out_for(in, it / 2), sp, m, n, k, alpha, beta, 0);
			}
}

/* Every tile variant (N picks it) with split-K (small M, long K), edges in
 * every direction. */
static void test_tiles_and_split_k(void **state)
{
	(void)state;
	/* 130, 259, 192: tiles with B boxes wholly past N (not loaded). */
	const uint32_t ns[] = { 16, 9, 32, 27, 64, 50, 130, 259, 192 };
	for (size_t ti = 0; ti < 3; ti++)
		for (int sp = 0; sp < 2; sp++)
			for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
				enum mfma_dtype in = in_types[ti];
				uint32_t k = quick == 2 ? (sp ? 260 : 259) : quick ? (sp ? 516 : 515) : (sp ? 2052 : 2051);
				run_case(in, out_for(in, (int)i), sp, 100 + (uint32_t)i * 37, ns[i], k,
					 1.0f, i % 3 == 0 ? 1.0f : 0.0f, 48);
			}
}

/* Large shapes: many big tiles, rasterised; reference on sampled rows. */
static void test_large(void **state)
{
	(void)state;
	if (quick)
		return;
	for (size_t ti = 0; ti < 3; ti++)
		for (int sp = 0; sp < 2; sp++)
			run_case(in_types[ti], out_for(in_types[ti], sp), sp, 2048, 2048 + 8, 2048, 1.0f, 0.0f, 24);
	run_case(MFMA_DT_F16, MFMA_DT_F16, true, 4096, 1024, 4096, 1.0f, 0.0f, 16);
}

static void test_resident_weight(void **state)
{
	(void)state;
	if (quick == 2)
		return;
	const uint32_t ns[] = { 16, 64, 256, 5 };
	for (size_t ti = 0; ti < 3; ti++)
		for (int sp = 0; sp < 2; sp++) {
			enum mfma_dtype in = in_types[ti];
			uint32_t m = 1000 + 3 * (uint32_t)ti, k = sp ? 1028 : 1030;
			struct operands o;
			ops_make(&o, in, out_for(in, sp), sp, m, 16, k, 1.0f, 0.0f);
			struct mfma_weight_host wh = { .m = m, .k = k, .dtype = in, .sparse = sp, .a = o.a, .meta = o.meta };
			void *w = NULL;
			uint64_t wbytes = 0;
			char err[512] = "";
			int rc = backend_cuda.weight_load(dev, &wh, &w, &wbytes, err, sizeof(err));
			if (rc != 0)
				fail_msg("weight_load: %d: %s", rc, err);
			/* The weight is charged what the device holds: the packed
			 * layout, at least the canonical form. */
			int kind = nv_kind_of(in, sp);
			uint64_t packed = (uint64_t)nv_packed_a_bytes(kind, m, k) +
					  (sp ? (uint64_t)nv_packed_meta_bytes(kind, m, k) : 0);
			if (wbytes < packed || wbytes < sparse24_operand_bytes(m, k, mfma_dtype_size(in), sp))
				fail_msg("weight_load: dev_bytes %llu, the packed weight is %llu bytes",
					 (unsigned long long)wbytes, (unsigned long long)packed);
			for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
				struct operands r;
				ops_make(&r, in, out_for(in, (int)i), false, m, ns[i], k, 1.0f, 0.0f);
				/* The weight replaces A; the request's A (the same host
				 * matrix) is only what the reference reads. */
				r.g.a_sparse = sp;
				free(r.a);
				r.a = NULL;
				r.g.a = o.a;
				r.g.a_meta = o.meta;
				char what[128];
				snprintf(what, sizeof(what), "resident %s %s %ux%u x N=%u", mfma_dtype_name(in),
					 sp ? "2:4" : "dense", m, k, ns[i]);
				expect_ok(&r, w, what, 0);
				r.g.a = NULL;
				r.g.a_meta = NULL;
				ops_free(&r);
			}
			/* A mismatched request is refused with a message. */
			struct operands bad;
			ops_make(&bad, in, out_for(in, 0), false, m + 1, 16, k, 1.0f, 0.0f);
			rc = backend_cuda.gemm(dev, &bad.g, w, NULL, err, sizeof(err));
			assert_int_equal(rc, -EINVAL);
			assert_non_null(strstr(err, "weight"));
			ops_free(&bad);
			backend_cuda.weight_free(dev, w);
			ops_free(&o);
		}
}

/* A region as a client makes one: a memfd of len bytes, mapped, and
 * registered with the test's device (as a client's region, or with
 * region_make_as as the daemon's frames). */
struct test_region {
	unsigned char *p;
	size_t len;
	int fd;
	void *handle; /* NULL once unregistered */
};

static void region_make_as(struct test_region *rg, const char *name, size_t len,
			   enum backend_host_use use)
{
	rg->len = len;
	rg->fd = memfd_create(name, MFD_CLOEXEC);
	assert_true(rg->fd >= 0);
	assert_int_equal(ftruncate(rg->fd, (off_t)len), 0);
	rg->p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, rg->fd, 0);
	assert_true(rg->p != MAP_FAILED);
	char err[512] = "";
	rg->handle = NULL;
	RC_OK(backend_cuda.host_register(dev, rg->p, len, use, &rg->handle, err, sizeof(err)), err);
}

static void region_make(struct test_region *rg, const char *name, size_t len)
{
	region_make_as(rg, name, len, BACKEND_HOST_REGION);
}

static void region_unregister(struct test_region *rg)
{
	if (rg->handle)
		backend_cuda.host_unregister(dev, rg->handle);
	rg->handle = NULL;
}

static void region_free(struct test_region *rg)
{
	region_unregister(rg);
	munmap(rg->p, rg->len);
	close(rg->fd);
}

/* len bytes at *at, from src or, with src NULL, poisoned (an element a
 * kernel does not write fails the check); *at moves past them and a gap
 * of 16 bytes, so that the operands fall at odd alignments. */
static unsigned char *region_put(unsigned char **at, const void *src, size_t len)
{
	unsigned char *p = *at;
	if (src)
		memcpy(p, src, len);
	else
		memset(p, 0xff, len);
	*at += len + 16;
	return p;
}

/* The same split-K problem gives the same bits every time, whichever CTA
 * of a tile finishes last; a result that moves would be a race or an
 * order-dependent reduction.  Several shapes and tiles, ten runs each. */
/* A batched launch (mfma_gemm.nparts) on a resident weight: three
 * requests' B side by side, odd widths, with and without C, each D
 * against its own float64 reference. */
/* The same batch with every part's B, C and D in a registered region
 * (one kernel copies every part's block across the bus, nv_copy_spans;
 * the parts sit at 16-, 4-, 2- and 1-byte alignments as the shapes fall):
 * D equal, bit for bit, to the staged batch's in r[i].d.  Then left
 * running (backend_timing.may_leave, gemm_end): the batch twice into two
 * more copies of D, the second started before the first is finished,
 * each D again bit for bit; until a pair was left running one behind the
 * other (a launch that measures its bucket's choice runs to its end). */
static void batched_registered(const struct mfma_gemm *g, void *w, const struct operands *r,
			       uint32_t m, uint32_t k)
{
	size_t es = mfma_dtype_size(g->in_dtype), os = mfma_dtype_size(g->out_dtype);
	size_t len = 4096;
	for (uint32_t i = 0; i < g->nparts; i++)
		len += ((size_t)k * g->parts[i].n * es + 4 * (size_t)m * g->parts[i].n * os) + 96;
	struct test_region rg;
	region_make(&rg, "test-batch-region", len);
	char err[512] = "";
	struct mfma_gemm_part parts[3];
	unsigned char *at = rg.p + 16;
	for (uint32_t i = 0; i < g->nparts; i++) {
		size_t bb = (size_t)k * g->parts[i].n * es, db = (size_t)m * g->parts[i].n * os;
		parts[i] = g->parts[i];
		parts[i].b = region_put(&at, g->parts[i].b, bb);
		if (g->parts[i].c)
			parts[i].c = region_put(&at, g->parts[i].c, db);
		parts[i].d = region_put(&at, NULL, db);
	}
	struct mfma_gemm rg_g = *g;
	rg_g.parts = parts;
	RC_OK(backend_cuda.gemm(dev, &rg_g, w, NULL, err, sizeof(err)), err);
	for (uint32_t i = 0; i < g->nparts; i++)
		assert_memory_equal(parts[i].d, r[i].d, (size_t)m * g->parts[i].n * os);

	struct mfma_gemm_part lp[2][3];
	struct mfma_gemm lg[2];
	for (int c = 0; c < 2; c++) {
		for (uint32_t i = 0; i < g->nparts; i++) {
			lp[c][i] = parts[i];
			lp[c][i].d = at;
			at += (size_t)m * g->parts[i].n * os + 16;
		}
		lg[c] = rg_g;
		lg[c].parts = lp[c];
	}
	assert_true(at <= rg.p + len);
	int pairs = 0;
	for (int it = 0; it < 8 && pairs == 0; it++) {
		struct backend_timing t[2] = { { .may_leave = true }, { .may_leave = true } };
		for (int c = 0; c < 2; c++) {
			for (uint32_t i = 0; i < g->nparts; i++)
				memset(lp[c][i].d, 0xff, (size_t)m * g->parts[i].n * os);
			RC_OK(backend_cuda.gemm(dev, &lg[c], w, &t[c], err, sizeof(err)), err);
		}
		pairs += t[0].left && t[1].left;
		for (int c = 0; c < 2; c++) {
			if (t[c].left)
				RC_OK(backend_cuda.gemm_end(dev, &t[c], err, sizeof(err)), err);
			assert_int_equal(t[c].left, 0);
			assert_true(t[c].kernel_ns > 0);
			for (uint32_t i = 0; i < g->nparts; i++)
				assert_memory_equal(lp[c][i].d, r[i].d, (size_t)m * g->parts[i].n * os);
		}
	}
	if (pairs == 0)
		fail_msg("no two batched launches were left running one behind the other");
	region_free(&rg);
}

/* The parts r[0..n) (each made by ops_make with its own N) as one batched
 * GEMM over their columns side by side on a resident weight of sparsity
 * sp: fills parts and returns the joined GEMM, whose operands are the
 * parts' (their GEMMs' b, c and d, wherever those point; its own a, b, c
 * and d are NULL). */
static struct mfma_gemm join_parts(const struct operands *r, struct mfma_gemm_part *parts, int n,
				   bool sp)
{
	struct mfma_gemm g = r[0].g;
	g.n = 0;
	for (int i = 0; i < n; i++) {
		parts[i] = (struct mfma_gemm_part){ .b = r[i].g.b, .c = r[i].g.c, .d = r[i].g.d,
						    .n = r[i].g.n };
		g.n += r[i].g.n;
	}
	g.nparts = (uint32_t)n;
	g.parts = parts;
	g.a = g.b = g.c = NULL;
	g.d = NULL;
	g.a_meta = NULL;
	g.a_sparse = sp;
	return g;
}

/* One batch of three parts on a resident weight (m x k): each part's D
 * against the float64 reference, and the same batch through a
 * registered region bit for bit. */
static void batched_case(enum mfma_dtype in, enum mfma_dtype out, int sp, uint32_t m, uint32_t k,
			 const uint32_t ns[3], float alpha, float beta)
{
	struct operands o, r[3];
	ops_make(&o, in, out, sp, m, 1, k, 1.0f, 0.0f);
	struct mfma_weight_host wh = { .m = m, .k = k, .dtype = in, .sparse = sp, .a = o.a,
				       .meta = o.meta };
	void *w = NULL;
	uint64_t wbytes = 0;
	char err[512] = "";
	if (backend_cuda.weight_load(dev, &wh, &w, &wbytes, err, sizeof(err)) != 0)
		fail_msg("weight_load: %s", err);
	struct mfma_gemm_part parts[3];
	for (int i = 0; i < 3; i++)
		ops_make(&r[i], in, out, false, m, ns[i], k, alpha, beta);
	struct mfma_gemm g = join_parts(r, parts, 3, sp);
	const uint32_t total = g.n;
	struct backend_timing t = { 0 };
	if (backend_cuda.gemm(dev, &g, w, &t, err, sizeof(err)) != 0)
		fail_msg("batched gemm: %s", err);
	/* The staged batch against float64 first: it is the reference the
	 * registered runs are held to, bit for bit. */
	for (int i = 0; i < 3; i++) {
		r[i].g.a_sparse = sp;
		r[i].g.a = o.a;
		r[i].g.a_meta = o.meta;
		double rel = rel_error(&r[i], NULL, m);
		printf("  batched %s %s %ux%u part %d of 3 (N=%u of %u) %-20s rel %.3g\n",
		       mfma_dtype_name(in), sp ? "2:4" : "dense", m, k, i, ns[i], total,
		       t.variant ? t.variant : "?", rel);
		fflush(stdout);
		checks++;
		if (!(rel <= nvt_tolerance(out)))
			fail_msg("batched part %d: relative error %g", i, rel);
		r[i].g.a = NULL;
		r[i].g.a_meta = NULL;
	}
	batched_registered(&g, w, r, m, k);
	for (int i = 0; i < 3; i++)
		ops_free(&r[i]);
	backend_cuda.weight_free(dev, w);
	ops_free(&o);
}

static void test_batched_launch(void **state)
{
	(void)state;
	const uint32_t ns[3] = { 5, 16, 1 };
	for (size_t ti = 0; ti < 3; ti++)
		for (int sp = 0; sp < 2; sp++) {
			enum mfma_dtype in = in_types[ti], out = out_for(in, sp);
			float beta = ti == 0 ? 1.0f : 0.0f, alpha = in == MFMA_DT_I8 ? 1.0f : 0.75f;
			batched_case(in, out, sp, 517, sp ? 260 : 258, ns, alpha, beta);
		}
	/* Larger parts, several blocks of the copy kernel each. */
	const uint32_t wide[3] = { 8, 24, 16 };
	batched_case(MFMA_DT_F16, MFMA_DT_F32, 1, 2048, 4096, wide, 1.0f, 0.5f);
}

static void test_repeatable(void **state)
{
	(void)state;
	if (quick == 2)
		return;
	const uint32_t shapes[][3] = { { 512, 16, 8192 }, { 1000, 33, 4096 }, { 300, 64, 6144 },
				       { 700, 200, 4096 } };
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		struct operands o;
		ops_make(&o, MFMA_DT_F16, MFMA_DT_F32, s % 2 == 0, shapes[s][0], shapes[s][1],
			 shapes[s][2], 1.0f, 0.0f);
		char err[512];
		assert_int_equal(backend_cuda.gemm(dev, &o.g, NULL, NULL, err, sizeof(err)), 0);
		size_t bytes = (size_t)shapes[s][0] * shapes[s][1] * 4;
		void *first = malloc(bytes);
		memcpy(first, o.d, bytes);
		for (int i = 0; i < 10; i++) {
			memset(o.d, 0xff, bytes);
			assert_int_equal(backend_cuda.gemm(dev, &o.g, NULL, NULL, err, sizeof(err)), 0);
			assert_memory_equal(first, o.d, bytes);
		}
		free(first);
		ops_free(&o);
	}
}

/* A client's region (memfd, mapped shared) registered with the device:
 * B and C are copied from it and D into it directly (a 2-D copy when B's
 * rows are padded on the device).  Results equal the staged path's, bit
 * for bit, and stay right after the region is unregistered. */
static void test_registered_host(void **state)
{
	(void)state;
	/* 200 and 130 columns: on sm_90 B's rows land with gaps between them
	 * (nv_wg_ldb), one 2-D copy straight from the region. */
	const uint32_t shapes[][3] = { { 300, 17, 516 }, { 129, 64, 260 }, { 1000, 33, 2048 }, { 333, 200, 1028 },
				       { 257, 130, 516 } };
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		enum mfma_dtype in = in_types[s % 3], out = out_for(in, (int)s);
		uint32_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
		float beta = in == MFMA_DT_I8 ? 0.0f : 0.5f;
		struct operands o;
		ops_make(&o, in, out, s % 2 == 0, m, n, k, 1.0f, beta);
		char err[512] = "", what[96];
		snprintf(what, sizeof(what), "staged %s->%s %ux%ux%u", mfma_dtype_name(in), mfma_dtype_name(out), m, n, k);
		expect_ok(&o, NULL, what, 0);
		size_t es = mfma_dtype_size(in), os = mfma_dtype_size(out);
		size_t bb = (size_t)k * n * es, cb = (size_t)m * n * os;
		struct test_region rg;
		region_make(&rg, "test-region", bb + 2 * cb + 4096);
		/* Odd offsets inside the region, as a client may choose. */
		unsigned char *b = rg.p + 64, *c = b + bb + 2 * os, *d = c + cb + os;
		memcpy(b, o.b, bb);
		if (o.c)
			memcpy(c, o.c, cb);
		memset(d, 0xff, cb);
		struct mfma_gemm g = o.g;
		g.b = b;
		g.c = o.c ? c : NULL;
		g.d = d;
		struct backend_timing t = { 0 };
		RC_OK(backend_cuda.gemm(dev, &g, NULL, &t, err, sizeof(err)), err);
		assert_memory_equal(d, o.d, cb);
		printf("  registered %s->%s %ux%ux%u: equal to the staged result; h2d %.1f us d2h %.1f us\n",
		       mfma_dtype_name(in), mfma_dtype_name(out), m, n, k, t.h2d_ns / 1e3, t.d2h_ns / 1e3);
		region_unregister(&rg);
		memset(d, 0xff, cb);
		RC_OK(backend_cuda.gemm(dev, &g, NULL, NULL, err, sizeof(err)), err);
		assert_memory_equal(d, o.d, cb);
		checks++;
		region_free(&rg);
		ops_free(&o);
	}
}

static void test_refusals(void **state)
{
	(void)state;
	char err[512] = "";
	struct operands o;
	ops_make(&o, MFMA_DT_F32, MFMA_DT_F32, false, 8, 8, 8, 1.0f, 0.0f);
	assert_int_equal(backend_cuda.gemm(dev, &o.g, NULL, NULL, err, sizeof(err)), -ENOTSUP);
	assert_non_null(strstr(err, "f32"));
	ops_free(&o);
	ops_make(&o, MFMA_DT_F16, MFMA_DT_I32, false, 8, 8, 8, 1.0f, 0.0f);
	assert_int_equal(backend_cuda.gemm(dev, &o.g, NULL, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "out_dtype"));
	ops_free(&o);
	/* A D no device can hold (2^21 x 2^19 f32, 4 TiB): refused, nothing
	 * written to the 4-byte host D, and the stream left empty.  Not under
	 * compute-sanitizer (quick runs): it reports the refused cuMemAlloc as
	 * an API error, which here is the point; the full run covers it. */
	if (quick)
		return;
	const uint32_t big_m = 1u << 21, big_n = 1u << 19, big_k = 4;
	uint16_t *ba = calloc((size_t)big_m * big_k, 2), *bb = calloc((size_t)big_k * big_n, 2);
	float small_d = 42.0f;
	assert_true(ba && bb);
	struct mfma_gemm huge = { .m = big_m, .n = big_n, .k = big_k, .in_dtype = MFMA_DT_F16,
				  .out_dtype = MFMA_DT_F32, .alpha = 1.0f, .a = ba, .b = bb,
				  .d = &small_d };
	int rc = backend_cuda.gemm(dev, &huge, NULL, NULL, err, sizeof(err));
	assert_true(rc < 0);
	printf("  a 4 TiB D: %d, %s\n", rc, err);
	assert_true(small_d == 42.0f);
	free(ba);
	free(bb);
	/* And the device still works afterwards. */
	run_case(MFMA_DT_F16, MFMA_DT_F32, true, 33, 17, 68, 1.0f, 0.0f, 0);
}

/* ---- Each provider on its own ---- */

static const struct cuda_provider *const all_providers[] = {
	&cuda_provider_ours,
	&cuda_provider_wgmma,
	&cuda_provider_cublaslt,
	&cuda_provider_cusparselt,
};

/* One GEMM on provider p, directly: its A resident (weight_pack) or sent
 * with the request.  1 if it ran and matched the reference, 0 if the
 * provider does not take the shape (supports() says no, or, for a library,
 * it finds no kernel for it at launch: -ENOTSUP), a failure otherwise. */
static int provider_case(struct cuda_dev *cd, const struct cuda_provider *p, void *pstate,
			 enum mfma_dtype in, enum mfma_dtype out, bool sparse, bool resident,
			 uint32_t m, uint32_t n, uint32_t k, float alpha, float beta)
{
	const struct cuda_shape sh = { .m = m, .n = n, .k = k, .in = in, .out = out,
				       .sparse = sparse, .resident = resident };
	char err[512] = "";
	if (p->supports(cd, pstate, &sh, err, sizeof(err)) != 0)
		return 0;
	struct operands o;
	ops_make(&o, in, out, sparse, m, n, k, alpha, beta);
	void *packed = NULL;
	uint64_t bytes = 0;
	char what[160];
	snprintf(what, sizeof(what), "%s %s->%s %s%s %ux%ux%u a=%g b=%g", p->name,
		 mfma_dtype_name(in), mfma_dtype_name(out), sparse ? "2:4" : "dense",
		 resident ? " resident" : "", m, n, k, alpha, beta);
	if (resident) {
		struct mfma_weight_host wh = { .m = m, .k = k, .dtype = in, .sparse = sparse,
					       .a = o.a, .meta = o.meta };
		int rc = p->weight_pack(cd, pstate, &wh, &packed, &bytes, err, sizeof(err));
		if (rc == 0)
			rc = cuda_dev_sync(cd, "packing", err, sizeof(err));
		if (rc != 0)
			fail_msg("%s: weight_pack failed (%d): %s", what, rc, err);
		if (!bytes)
			fail_msg("%s: weight_pack reports no device bytes", what);
	}
	const char *variant = NULL;
	int rc = p->launch(cd, pstate, &o.g, packed, &variant, err, sizeof(err));
	if (rc == -ENOTSUP && p != &cuda_provider_ours) {
		cuda_dev_drain(cd);
		printf("  %-58s refused at launch: %s\n", what, err);
		if (packed)
			p->weight_free(cd, pstate, packed);
		ops_free(&o);
		return 0;
	}
	if (rc != 0)
		fail_msg("%s: launch failed (%d): %s", what, rc, err);
	struct backend_timing t;
	cuda_dev_timing(cd, &t);
	double rel = rel_error(&o, NULL, m);
	checks++;
	printf("  %-58s %-24s rel %.3g  kernel %8.1f us\n", what, variant ? variant : "?", rel,
	       t.kernel_ns / 1e3);
	if (!(rel <= nvt_tolerance(out)))
		fail_msg("%s: relative error %g above %g", what, rel, nvt_tolerance(out));
	if (!variant || strncmp(variant, p->name, strlen(p->name)) != 0) {
		/* Ours name their tile ("f16.sparse.128x16"); the libraries
		 * start with their own name. */
		if (p != &cuda_provider_ours || !variant)
			fail_msg("%s: variant %s does not name the provider", what, variant ? variant : "?");
	}
	if (packed)
		p->weight_free(cd, pstate, packed);
	ops_free(&o);
	return 1;
}

/* One batched launch of three parts (5, 16 and 3 columns: a joined width
 * of 32 with 8 zero columns) on a weight packed by p: each part's D
 * against its own float64 reference.  0 when p does not take the shape. */
static int provider_batched_case(struct cuda_dev *cd, const struct cuda_provider *p, void *pstate,
				 struct cuda_batch *batch, enum mfma_dtype in, enum mfma_dtype out,
				 bool sparse, uint32_t m, uint32_t k, float beta)
{
	static const uint32_t ns[3] = { 5, 16, 3 };
	const float alpha = in == MFMA_DT_I8 ? 1.0f : 0.75f;
	const struct cuda_shape sh = { .m = m, .n = cuda_batch_width(24), .k = k, .in = in,
				       .out = out, .sparse = sparse, .resident = true };
	char err[512] = "";
	if (p->supports(cd, pstate, &sh, err, sizeof(err)) != 0)
		return 0;
	struct operands o, r[3];
	ops_make(&o, in, out, sparse, m, 1, k, 1.0f, 0.0f);
	struct mfma_weight_host wh = { .m = m, .k = k, .dtype = in, .sparse = sparse, .a = o.a,
				       .meta = o.meta };
	void *packed = NULL;
	uint64_t bytes = 0;
	int rc = p->weight_pack(cd, pstate, &wh, &packed, &bytes, err, sizeof(err));
	if (rc == 0)
		rc = cuda_dev_sync(cd, "packing", err, sizeof(err));
	if (rc != 0)
		fail_msg("%s batched: weight_pack failed (%d): %s", p->name, rc, err);
	struct mfma_gemm_part parts[3];
	for (int i = 0; i < 3; i++)
		ops_make(&r[i], in, out, false, m, ns[i], k, alpha, beta);
	struct mfma_gemm g = join_parts(r, parts, 3, sparse);
	struct mfma_gemm one;
	const char *variant = NULL;
	int left = 0; /* waited for */
	if ((rc = cuda_batch_in(batch, cd, &g, &one, err, sizeof(err))) == 0 &&
	    (rc = p->launch(cd, pstate, &one, packed, &variant, err, sizeof(err))) == 0)
		rc = cuda_batch_out(batch, cd, &g, &left, err, sizeof(err));
	if (rc != 0) {
		cuda_batch_abort(batch, cd);
		cuda_dev_drain(cd);
		fail_msg("%s batched %s %s: %s (%d)", p->name, mfma_dtype_name(in),
			 sparse ? "2:4" : "dense", err, rc);
	}
	for (int i = 0; i < 3; i++) {
		r[i].g.a_sparse = sparse;
		r[i].g.a = o.a;
		r[i].g.a_meta = o.meta;
		double rel = rel_error(&r[i], NULL, m);
		checks++;
		printf("  %s batched %s->%s %s %ux%u part %d (N=%u of 24, width %u) %-24s rel %.3g\n",
		       p->name, mfma_dtype_name(in), mfma_dtype_name(out), sparse ? "2:4" : "dense", m,
		       k, i, ns[i], one.n, variant ? variant : "?", rel);
		if (!(rel <= nvt_tolerance(out)))
			fail_msg("%s batched part %d: relative error %g", p->name, i, rel);
		r[i].g.a = NULL;
		r[i].g.a_meta = NULL;
		ops_free(&r[i]);
	}
	p->weight_free(cd, pstate, packed);
	ops_free(&o);
	return 1;
}

static void test_providers(void **state)
{
	(void)state;
	if (quick == 2)
		return;
	char err[512] = "";
	struct cuda_dev *cd = NULL;
	struct backend_config cfg = { TEST_BASE_CFG };
	if (cuda_dev_open(dev_index, &cfg, &cd, err, sizeof(err)) != 0)
		fail_msg("cuda_dev_open: %s", err);
	struct cuda_batch *batch = NULL;
	if (cuda_batch_open(cd, &(struct cuda_batch_cfg){ 0 }, &batch, err, sizeof(err)) != 0)
		fail_msg("cuda_batch_open: %s", err);
	/* Odd shapes and decode-like ones; the quick run takes the first
	 * three (one the cuSPARSELt path takes: N a multiple of 8). */
	const uint32_t shapes[][3] = { { 37, 29, 100 }, { 129, 200, 260 }, { 96, 16, 4096 },
				       { 300, 17, 516 }, { 1000, 64, 2048 }, { 520, 40, 1028 } };
	const size_t nshapes = quick ? 3 : sizeof(shapes) / sizeof(shapes[0]);
	for (size_t pi = 0; pi < sizeof(all_providers) / sizeof(all_providers[0]); pi++) {
		const struct cuda_provider *p = all_providers[pi];
		if (!p->usable(cuda_dev_cc(cd))) {
			printf("  provider %s: not usable here (library absent)\n", p->name);
			continue;
		}
		void *pstate = NULL;
		if (p->attach(cd, &pstate, err, sizeof(err)) != 0)
			fail_msg("%s: attach: %s", p->name, err);
		int ran = 0, ran_dense = 0;
		for (size_t ti = 0; ti < 3; ti++)
			for (int sp = 0; sp < 2; sp++)
				for (int res = 0; res < 2; res++)
					for (size_t si = 0; si < nshapes; si++) {
						enum mfma_dtype in = in_types[ti];
						uint32_t m = shapes[si][0], n = shapes[si][1];
						uint32_t k = shapes[si][2] + (sp ? 0 : (uint32_t)si % 3);
						float beta = si % 2 ? (in == MFMA_DT_I8 ? 1.0f : -0.5f) : 0.0f;
						float alpha = in == MFMA_DT_I8 ? 1.0f : si % 3 ? 1.25f : 1.0f;
						const int r = provider_case(cd, p, pstate, in,
									    out_for(in, (int)si + res), sp, res,
									    m, n, k, alpha, beta);
						ran += r;
						ran_dense += sp ? 0 : r;
					}
		printf("  provider %s: %d GEMMs checked, %d of them dense\n", p->name, ran, ran_dense);
		/* The wgmma family runs dense f16/bf16 as well as 2:4 (odd K
		 * included: the dense shapes above have K % 4 = 1, 2). */
		if (p == &cuda_provider_wgmma && ran_dense < 2 * 2 * (int)nshapes)
			fail_msg("provider wgmma ran %d dense GEMMs, not every f16/bf16 case (%d)", ran_dense,
				 2 * 2 * (int)nshapes);
		/* A library that loaded must have run something it claims. */
		if (ran == 0)
			fail_msg("provider %s is usable but ran no GEMM", p->name);
		/* Batched launches: the parts joined on the device, then this
		 * provider's GEMM over them (cuda_batch.h). */
		int nb = 0;
		for (size_t ti = 0; ti < 2; ti++)
			for (int sp = 0; sp < 2; sp++)
				nb += provider_batched_case(cd, p, pstate, batch, in_types[ti],
							    out_for(in_types[ti], sp), sp, 517,
							    sp ? 260 : 258, sp ? 0.5f : 0.0f);
		printf("  provider %s: %d batched launches checked\n", p->name, nb);
		cuda_dev_drain(cd);
		p->detach(cd, pstate);
	}
	cuda_batch_close(batch);
	cuda_dev_close(cd);
}

/* The measured choice: a resident weight at a shape where the libraries
 * are known to beat our mma.sp kernels (2x at N=256, bench/RESULTS.md) is
 * served by one of them once they are present (or, for 2:4 on sm_90, by
 * the wgmma.sp family, which is not 2x slower), and says so; the choice
 * holds for the bucket, and every answer matches the reference. */
static void test_choice(void **state)
{
	(void)state;
	if (quick == 2)
		return;
	struct backend_device_info info;
	assert_int_equal(backend_cuda.describe(dev_index, &info), 0);
	const bool have_lt = strstr(info.variants, "cublaslt.") != NULL;
	const bool have_slt = strstr(info.variants, "cusparselt.") != NULL;
	printf("  libraries: cuBLASLt %s, cuSPARSELt %s\n", have_lt ? "present" : "absent",
	       have_slt ? "present" : "absent");
	/* Smaller under compute-sanitizer, where cuSPARSELt's search alone
	 * runs its kernels hundreds of times. */
	const uint32_t m = quick ? 1024 : 4096, k = quick ? 1024 : 4096;
	for (int sp = 0; sp < 2; sp++) {
		struct operands o;
		ops_make(&o, MFMA_DT_F16, MFMA_DT_F16, sp, m, 16, k, 1.0f, 0.0f);
		struct mfma_weight_host wh = { .m = m, .k = k, .dtype = MFMA_DT_F16, .sparse = sp,
					       .a = o.a, .meta = o.meta };
		void *w = NULL;
		uint64_t wbytes = 0;
		char err[512] = "";
		if (backend_cuda.weight_load(dev, &wh, &w, &wbytes, err, sizeof(err)) != 0)
			fail_msg("weight_load: %s", err);
		printf("  %s weight %ux%u: %.1f MiB on the device (every candidate's copy)\n",
		       sp ? "2:4" : "dense", m, k, wbytes / 1048576.0);
		const uint32_t ns[] = { 256, 200, 16, 256 };
		const char *first = NULL;
		for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
			struct operands r;
			ops_make(&r, MFMA_DT_F16, MFMA_DT_F16, false, m, ns[i], k, 1.0f, 0.0f);
			r.g.a_sparse = sp;
			free(r.a);
			r.a = NULL;
			r.g.a = o.a;
			r.g.a_meta = o.meta;
			struct backend_timing t = { 0 };
			if (backend_cuda.gemm(dev, &r.g, w, &t, err, sizeof(err)) != 0)
				fail_msg("gemm: %s", err);
			uint32_t idx[32];
			for (uint32_t j = 0; j < 32; j++)
				idx[j] = j == 0 ? 0 : j == 1 ? m - 1 : nvt_rand(&seed) % m;
			double rel = rel_error(&r, idx, 32);
			checks++;
			printf("  choice %s %ux%u x N=%-4u %-24s rel %.3g  kernel %8.1f us\n",
			       sp ? "2:4" : "dense", m, k, ns[i], t.variant ? t.variant : "?", rel,
			       t.kernel_ns / 1e3);
			if (!(rel <= nvt_tolerance(MFMA_DT_F16)))
				fail_msg("choice: relative error %g", rel);
			if (!t.variant)
				fail_msg("choice: no variant named");
			if (ns[i] > 64) {
				/* One bucket (193-256): one provider serves it. */
				if (!first)
					first = t.variant;
				else if (strcmp(first, t.variant) != 0)
					fail_msg("choice: N=%u ran %s, the bucket chose %s", ns[i],
						 t.variant, first);
				/* Not under compute-sanitizer (quick), whose
				 * instrumentation distorts the times. */
				if (!quick && (have_lt || (sp && have_slt)) &&
				    strncmp(t.variant, "cu", 2) != 0 && strncmp(t.variant, "wgmma", 5) != 0)
					fail_msg("choice: N=%u ran %s although a library is 2x faster there",
						 ns[i], t.variant);
			}
			r.g.a = NULL;
			r.g.a_meta = NULL;
			ops_free(&r);
		}
		backend_cuda.weight_free(dev, w);
		ops_free(&o);
	}
}

/* One batched GEMM of two parts (width - 1 columns and 1) on the resident
 * weight w (A in o): a joined width of exactly width.  Each part checked
 * on 16 rows against the float64 reference; the timing returned. */
static struct backend_timing warm_batch(void *w, const struct operands *o, enum mfma_dtype in,
					enum mfma_dtype out, bool sp, uint32_t m, uint32_t k,
					uint32_t width)
{
	const uint32_t ns[2] = { width - 1, 1 };
	struct operands r[2];
	struct mfma_gemm_part parts[2];
	for (int i = 0; i < 2; i++)
		ops_make(&r[i], in, out, false, m, ns[i], k, 1.0f, 0.0f); /* beta 0: no C */
	struct mfma_gemm g = join_parts(r, parts, 2, sp);
	struct backend_timing t = { 0 };
	char err[512] = "";
	if (backend_cuda.gemm(dev, &g, w, &t, err, sizeof(err)) != 0)
		fail_msg("warmed batch of width %u: %s", width, err);
	uint32_t idx[16];
	for (uint32_t j = 0; j < 16; j++)
		idx[j] = j == 0 ? 0 : j == 1 ? m - 1 : nvt_rand(&seed) % m;
	for (int i = 0; i < 2; i++) {
		r[i].g.a_sparse = sp;
		r[i].g.a = o->a;
		r[i].g.a_meta = o->meta;
		double rel = rel_error(&r[i], idx, 16);
		checks++;
		if (!(rel <= nvt_tolerance(out)))
			fail_msg("warmed batch of width %u part %d (%s): relative error %g", width, i,
				 t.variant ? t.variant : "?", rel);
		r[i].g.a = NULL;
		r[i].g.a_meta = NULL;
		ops_free(&r[i]);
	}
	return t;
}

/* One single GEMM at N on the resident weight w (A in o), checked on 16
 * rows against the float64 reference; its timing. */
/* o's A (f16, an m x k weight, 2:4 when sp) loaded as a resident weight
 * on device d; the handle. */
static void *load_f16_weight(void *d, const struct operands *o, bool sp, uint32_t m, uint32_t k)
{
	struct mfma_weight_host wh = { .m = m, .k = k, .dtype = MFMA_DT_F16, .sparse = sp,
				       .a = o->a, .meta = o->meta };
	void *w = NULL;
	uint64_t wbytes = 0;
	char err[512] = "";
	if (backend_cuda.weight_load(d, &wh, &w, &wbytes, err, sizeof(err)) != 0)
		fail_msg("weight_load: %s", err);
	return w;
}

static struct backend_timing resident_gemm(void *w, const struct operands *o, enum mfma_dtype in,
					   enum mfma_dtype out, bool sp, uint32_t m, uint32_t k,
					   uint32_t n)
{
	struct operands r;
	ops_make(&r, in, out, false, m, n, k, 1.0f, 0.0f);
	free(r.a);
	r.a = NULL;
	r.g.a_sparse = sp;
	r.g.a = o->a;
	r.g.a_meta = o->meta;
	struct backend_timing t = { 0 };
	char err[512] = "";
	if (backend_cuda.gemm(dev, &r.g, w, &t, err, sizeof(err)) != 0)
		fail_msg("single GEMM N=%u: %s", n, err);
	uint32_t idx[16];
	for (uint32_t j = 0; j < 16; j++)
		idx[j] = j == 0 ? 0 : j == 1 ? m - 1 : nvt_rand(&seed) % m;
	double rel = rel_error(&r, idx, 16);
	checks++;
	if (!(rel <= nvt_tolerance(out)))
		fail_msg("single GEMM N=%u (%s): relative error %g", n, t.variant ? t.variant : "?",
			 rel);
	r.g.a = NULL;
	r.g.a_meta = NULL;
	ops_free(&r);
	return t;
}

static void reopen(const struct backend_config *cfg);

/* Warming at load (issues 9 and 11): after weight_warm for batching up to
 * 512 columns (64 when quick), no batched GEMM of any width a batch can
 * take, and no single GEMM at any warmed width (a bucket's representative,
 * a decode width such as N = 8), makes a plan or measures a choice on the
 * serving path, for either output type.  The
 * counters are shown to count by the warming's own report (cuSPARSELt's
 * plans for every width and output type); what the same weight's first
 * batch pays without warming is printed (on the H200 the probe's shapes
 * ran our wgmma kernels alone: nothing to plan or measure).  That the
 * warmed plans outlive later ones is test_cusparselt_keeps_warmed_plans. */
static void test_warmup(void **state)
{
	(void)state;
	if (quick == 2)
		return;
	struct backend_device_info info;
	assert_int_equal(backend_cuda.describe(dev_index, &info), 0);
	if (!info.batches) {
		printf("  (this device does not batch: nothing to warm for batches)\n");
		return;
	}
	const bool have_slt = strstr(info.variants, "cusparselt.") != NULL;
	const uint32_t m = quick ? 512 : 2048, k = quick ? 512 : 2048;
	/* Under compute-sanitizer (quick) fewer widths: each cuSPARSELt
	 * search runs its kernels hundreds of times there. */
	const struct backend_warm warm = { .batching = true, .max_columns = quick ? 64 : 512 };
	uint32_t widths[CUDA_WARM_MAX_WIDTHS];
	const size_t nw = cuda_warm_widths(true, warm.max_columns, widths, CUDA_WARM_MAX_WIDTHS);
	const enum mfma_dtype outs[2] = { MFMA_DT_F16, MFMA_DT_F32 };
	/* Dense, 2:4, then (with cuSPARSELt, not under compute-sanitizer) 2:4
	 * with cuSPARSELt pinned, so that the single GEMMs at the decode widths
	 * run on the provider that plans per N whatever the choice picks. */
	struct backend_config cfg = { TEST_BASE_CFG };
	const bool pin_pass = have_slt && !quick;
	for (int pass = 0; pass < (pin_pass ? 3 : 2); pass++) {
		const bool sp = pass > 0;
		if (pass == 2) {
			cfg.cuda_providers.prefer = providers_index(PROVIDERS_CUDA, "cusparselt");
			reopen(&cfg);
			printf("  cuSPARSELt pinned:\n");
		}
		struct operands o;
		ops_make(&o, MFMA_DT_F16, MFMA_DT_F16, sp, m, 16, k, 1.0f, 0.0f);
		struct mfma_weight_host wh = { .m = m, .k = k, .dtype = MFMA_DT_F16, .sparse = sp,
					       .a = o.a, .meta = o.meta };
		char err[512] = "";
		void *w = NULL;
		uint64_t wbytes = 0;

		/* Without warming the first batch pays: the counters count. */
		if (backend_cuda.weight_load(dev, &wh, &w, &wbytes, err, sizeof(err)) != 0)
			fail_msg("weight_load: %s", err);
		/* f16 out: cuSPARSELt and cuBLASLt run it beside our kernels
		 * (f16 -> f32 has one candidate on the H200, wgmma alone). */
		struct backend_timing t = warm_batch(w, &o, MFMA_DT_F16, MFMA_DT_F16, sp, m, k, 16);
		printf("  %s, not warmed: first batch of width 16 ran %s, %u plans, %u measures\n",
		       sp ? "2:4" : "dense", t.variant ? t.variant : "?", t.plans, t.measures);
		/* How many candidates a shape has depends on the machine (on
		 * the H200 these ran wgmma alone, nothing to measure), so the
		 * probe only shows what the first batch paid; that the counters
		 * count is shown by the warming's own report below (a library's
		 * plans) and the later checks that nothing more is made. */
		if (t.measures > 1)
			fail_msg("the first batch of a weight not warmed measured %u choices", t.measures);
		backend_cuda.weight_free(dev, w);

		/* Warmed: every width, both output types, pays nothing. */
		if (backend_cuda.weight_load(dev, &wh, &w, &wbytes, err, sizeof(err)) != 0)
			fail_msg("weight_load: %s", err);
		struct backend_warm_report rep;
		uint64_t t0 = mfma_clock_ns();
		if (backend_cuda.weight_warm(dev, w, &warm, &rep, err, sizeof(err)) != 0)
			fail_msg("weight_warm: %s", err);
		printf("  %s %ux%u warmed in %.1f ms: %u widths, %u plans, %u measures\n",
		       sp ? "2:4" : "dense", m, k, (mfma_clock_ns() - t0) / 1e6, rep.widths,
		       rep.plans, rep.measures);
		assert_int_equal(rep.widths, nw);
		assert_int_equal(rep.widths_left, 0);
		/* At most one measuring per bucket and output type. */
		assert_true(rep.measures <= 2 * CUDA_NBUCKETS);
		if (sp && have_slt && rep.plans < 2 * nw)
			fail_msg("warming made %u plans, fewer than cuSPARSELt's %zu widths x 2 outputs",
				 rep.plans, nw);
		for (size_t oi = 0; oi < 2; oi++) {
			for (size_t i = 0; i < nw; i++) {
				t = warm_batch(w, &o, MFMA_DT_F16, outs[oi], sp, m, k, widths[i]);
				if (t.plans || t.measures)
					fail_msg("%s warmed: a batch of width %u -> %s made %u plans and "
						 "measured %u choices on the serving path (%s)",
						 sp ? "2:4" : "dense", widths[i], mfma_dtype_name(outs[oi]),
						 t.plans, t.measures, t.variant ? t.variant : "?");
			}
			/* A lone request runs at its own N: every warmed
			 * width alone (the buckets' and the decode widths 8,
			 * 24, 40, 48 and 56 among them). */
			for (size_t i = 0; i < nw; i++) {
				t = resident_gemm(w, &o, MFMA_DT_F16, outs[oi], sp, m, k, widths[i]);
				if (t.plans || t.measures)
					fail_msg("warmed: a single GEMM at N=%u made %u plans, measured %u (%s)",
						 widths[i], t.plans, t.measures, t.variant ? t.variant : "?");
			}
		}
		printf("  %s warmed: %zu widths x 2 outputs, batched and single, no plan and no "
		       "measuring on the serving path\n", sp ? "2:4" : "dense", nw);
		backend_cuda.weight_free(dev, w);
		ops_free(&o);
	}
	if (pin_pass) {
		cfg.cuda_providers.prefer = -1;
		reopen(&cfg);
	}
}

/* A device of its own with library provider p attached, driven directly
 * by a test: false (and a line saying so) where the library is absent. */
static bool provider_open(const struct cuda_provider *p, struct cuda_dev **cd, void **st)
{
	char err[512] = "";
	struct backend_config cfg = { TEST_BASE_CFG };
	*cd = NULL;
	*st = NULL;
	if (cuda_dev_open(dev_index, &cfg, cd, err, sizeof(err)) != 0)
		fail_msg("cuda_dev_open: %s", err);
	if (!p->usable(cuda_dev_cc(*cd)) || p->attach(*cd, st, err, sizeof(err)) != 0) {
		printf("  (%s absent: nothing to check)\n", p->name);
		cuda_dev_close(*cd);
		return false;
	}
	return true;
}

static void provider_close(const struct cuda_provider *p, struct cuda_dev *cd, void *st)
{
	cuda_dev_drain(cd);
	p->detach(cd, st);
	cuda_dev_close(cd);
}

/* wh packed by provider p on cd, the packing waited for; the handle. */
static void *provider_pack(const struct cuda_provider *p, struct cuda_dev *cd, void *st,
			   const struct mfma_weight_host *wh)
{
	char err[512] = "";
	void *packed = NULL;
	uint64_t bytes = 0;
	if (p->weight_pack(cd, st, wh, &packed, &bytes, err, sizeof(err)) != 0 ||
	    cuda_dev_sync(cd, "packing", err, sizeof(err)) != 0)
		fail_msg("%s weight_pack: %s", p->name, err);
	return packed;
}

/* Grids whose rows would pass gridDim.y's 65535: a B of more than 65535
 * x 32 columns through ours' i8 transpose, and a batch whose K passes
 * 65535 x 32 rows through the join of its parts (each kernel's rows then
 * stride over the rest).  A launch past the limit fails outright. */
static void test_grid_rows(void **state)
{
	(void)state;
	if (quick)
		return;
	const struct cuda_provider *p = &cuda_provider_ours;
	struct cuda_dev *cd;
	void *st;
	if (!provider_open(p, &cd, &st))
		fail_msg("ours: attach failed");
	const uint32_t past = 65535u * 32 + 1024;
	if (provider_case(cd, p, st, MFMA_DT_I8, MFMA_DT_I32, false, false, 8, past, 32, 1.0f,
			  0.0f) != 1)
		fail_msg("ours did not take i8 8x%ux32", past);
	char err[512] = "";
	struct cuda_batch *batch = NULL;
	if (cuda_batch_open(cd, &(struct cuda_batch_cfg){ 0 }, &batch, err, sizeof(err)) != 0)
		fail_msg("cuda_batch_open: %s", err);
	if (provider_batched_case(cd, p, st, batch, MFMA_DT_F16, MFMA_DT_F16, true, 16, past, 0.0f) != 1)
		fail_msg("ours did not take a batch on a 16x%u 2:4 weight", past);
	cuda_batch_close(batch);
	provider_close(p, cd, st);
}

/* One GEMM on cuSPARSELt directly (a 2:4 weight it packed), N columns to
 * out.  A shape the library has no kernel for (-ENOTSUP) still leaves its
 * plan, marked failed, in the weight's table: it counts like any other. */
static void cs_run(struct cuda_dev *cd, void *st, void *packed, uint32_t m, uint32_t k, uint32_t n,
		   enum mfma_dtype out)
{
	struct operands r;
	ops_make(&r, MFMA_DT_F16, out, false, m, n, k, 1.0f, 0.0f);
	r.g.a_sparse = true;
	const char *variant = NULL;
	char err[512] = "";
	int rc = cuda_provider_cusparselt.launch(cd, st, &r.g, packed, &variant, err, sizeof(err));
	if (rc != 0)
		cuda_dev_drain(cd);
	if (rc != 0 && rc != -ENOTSUP)
		fail_msg("cuSPARSELt N=%u -> %s: %s (%d)", n, mfma_dtype_name(out), err, rc);
	ops_free(&r);
}

/* cuSPARSELt keeps the plans made while a weight is warmed (up to two
 * output types of CUDA_WARM_MAX_WIDTHS widths) whatever comes after, and
 * replaces the others oldest first: driven directly, so that the library
 * serves every N. */
static void test_cusparselt_keeps_warmed_plans(void **state)
{
	(void)state;
	if (quick)
		return;
	const struct cuda_provider *p = &cuda_provider_cusparselt;
	struct cuda_dev *cd;
	void *st;
	if (!provider_open(p, &cd, &st))
		return;
	const uint32_t m = 256, k = 256;
	struct operands o;
	ops_make(&o, MFMA_DT_F16, MFMA_DT_F32, true, m, 16, k, 1.0f, 0.0f);
	struct mfma_weight_host wh = { .m = m, .k = k, .dtype = MFMA_DT_F16, .sparse = true,
				       .a = o.a, .meta = o.meta };
	void *packed = provider_pack(p, cd, st, &wh);
	const enum mfma_dtype outs[2] = { MFMA_DT_F32, MFMA_DT_F16 };
	/* Warmed: 16 widths (multiples of 16) x 2 output types, all kept. */
	const uint64_t p0 = cuda_dev_plans(cd);
	cuda_dev_set_warming(cd, true);
	for (int oi = 0; oi < 2; oi++)
		for (uint32_t i = 1; i <= CUDA_WARM_MAX_WIDTHS; i++)
			cs_run(cd, st, packed, m, k, 16 * i, outs[oi]);
	cuda_dev_set_warming(cd, false);
	assert_int_equal(cuda_dev_plans(cd) - p0, 2 * CUDA_WARM_MAX_WIDTHS);
	/* 40 other N (odd multiples of 8) in the 32 slots not kept. */
	for (uint32_t j = 0; j < 40; j++)
		cs_run(cd, st, packed, m, k, 8 + 16 * j, MFMA_DT_F32);
	const uint64_t p1 = cuda_dev_plans(cd);
	assert_int_equal(p1 - p0, 2 * CUDA_WARM_MAX_WIDTHS + 40);
	/* Every warmed plan is still there; the first of the others was
	 * replaced and is made again. */
	for (int oi = 0; oi < 2; oi++)
		for (uint32_t i = 1; i <= CUDA_WARM_MAX_WIDTHS; i++)
			cs_run(cd, st, packed, m, k, 16 * i, outs[oi]);
	const uint64_t p2 = cuda_dev_plans(cd);
	cs_run(cd, st, packed, m, k, 8, MFMA_DT_F32);
	printf("  cuSPARSELt: %u warmed plans, 40 others; warmed again: %" PRIu64 " new plans; the "
	       "oldest other again: %" PRIu64 "\n", 2 * CUDA_WARM_MAX_WIDTHS, p2 - p1,
	       cuda_dev_plans(cd) - p2);
	assert_int_equal(p2, p1);
	assert_int_equal(cuda_dev_plans(cd) - p2, 1);
	p->weight_free(cd, st, packed);
	ops_free(&o);
	provider_close(p, cd, st);
}

/* One GEMM on cuBLASLt directly: N columns of B against the weight
 * packed from wo (NULL: wo's A sent with the GEMM, as on no resident
 * weight), checked on 16 sampled rows against float64. */
static void lt_run_ab(struct cuda_dev *cd, void *st, void *packed, const struct operands *wo,
		      uint32_t m, uint32_t k, uint32_t n, enum mfma_dtype out, float alpha, float beta)
{
	struct operands r;
	ops_make(&r, MFMA_DT_F16, out, false, m, n, k, alpha, beta);
	free(r.a);
	r.a = NULL;
	r.g.a = wo->a;
	const char *variant = NULL;
	char err[512] = "";
	if (cuda_provider_cublaslt.launch(cd, st, &r.g, packed, &variant, err, sizeof(err)) != 0)
		fail_msg("cuBLASLt %ux%ux%u -> %s: %s", m, n, k, mfma_dtype_name(out), err);
	struct backend_timing t;
	cuda_dev_timing(cd, &t); /* reads the events only: the copy out into host memory waited for D */
	uint32_t idx[16];
	for (uint32_t j = 0; j < 16; j++)
		idx[j] = j == 0 ? 0 : j == 1 ? m - 1 : nvt_rand(&seed) % m;
	const double rel = rel_error(&r, idx, 16);
	checks++;
	if (!(rel <= nvt_tolerance(out)))
		fail_msg("cuBLASLt %ux%ux%u -> %s: relative error %g", m, n, k, mfma_dtype_name(out),
			 rel);
	r.g.a = NULL;
	ops_free(&r);
}

static void lt_run(struct cuda_dev *cd, void *st, void *packed, const struct operands *wo,
		   uint32_t m, uint32_t k, uint32_t n, enum mfma_dtype out)
{
	lt_run_ab(cd, st, packed, wo, m, k, n, out, 1.0f, 0.0f);
}

/* A cuBLASLt plan made while its weight is warmed times the heuristic's
 * first algorithms on the warming GEMM's operands and keeps the fastest
 * (cuda_dev_time, one timing each); a plan made on the serving path times
 * nothing.  The timing runs write D again and again: with alpha 2, beta
 * 0.5 and a C the answer must still be alpha A B + beta C, each against
 * the float64 reference, warmed and not. */
static void test_cublaslt_times_warmed_plans(void **state)
{
	(void)state;
	const struct cuda_provider *p = &cuda_provider_cublaslt;
	struct cuda_dev *cd;
	void *st;
	if (!provider_open(p, &cd, &st))
		return;
	const uint32_t m = quick ? 512 : 2048, k = quick ? 512 : 2048;
	struct operands o;
	ops_make(&o, MFMA_DT_F16, MFMA_DT_F16, false, m, 16, k, 1.0f, 0.0f);
	struct mfma_weight_host wh = { .m = m, .k = k, .dtype = MFMA_DT_F16, .a = o.a };
	void *packed = provider_pack(p, cd, st, &wh);
	const uint64_t t0 = cuda_dev_timings(cd);
	cuda_dev_set_warming(cd, true);
	lt_run_ab(cd, st, packed, &o, m, k, 64, MFMA_DT_F16, 2.0f, 0.5f);
	lt_run_ab(cd, st, packed, &o, m, k, 40, MFMA_DT_F32, 2.0f, 0.5f);
	cuda_dev_set_warming(cd, false);
	const uint64_t t1 = cuda_dev_timings(cd);
	/* The warmed shapes and a new one, on the serving path. */
	lt_run_ab(cd, st, packed, &o, m, k, 64, MFMA_DT_F16, 2.0f, 0.5f);
	lt_run_ab(cd, st, packed, &o, m, k, 40, MFMA_DT_F32, -1.0f, 0.25f);
	lt_run_ab(cd, st, packed, &o, m, k, 24, MFMA_DT_F16, 2.0f, 0.5f);
	const uint64_t t2 = cuda_dev_timings(cd);
	printf("  cuBLASLt %ux%u: 2 plans made warming timed %" PRIu64 " algorithms; 3 GEMMs "
	       "served after, %" PRIu64 " timings\n", m, k, t1 - t0, t2 - t1);
	/* On sm_90 the heuristic offers several algorithms at these shapes;
	 * elsewhere one may be all it has, which is nothing to time. */
	if (cuda_dev_cc(cd) >= 90 && t1 - t0 < 4)
		fail_msg("warming timed %" PRIu64 " cuBLASLt algorithms for 2 plans, fewer than 2 each",
			 t1 - t0);
	assert_int_equal(t2, t1);
	p->weight_free(cd, st, packed);
	ops_free(&o);
	provider_close(p, cd, st);
}

/* cuBLASLt keeps a resident weight's plans with the weight, those made
 * while it is warmed for good: a second weight warmed after the first,
 * and 40 other widths after both, replace none of the warmed (a cache of
 * the device's, as before, held 32 plans of every weight together, fewer
 * than one weight's warming makes with max_columns past 1024).  GEMMs on
 * no resident weight have a cache of their own. */
static void test_cublaslt_keeps_warmed_plans(void **state)
{
	(void)state;
	if (quick)
		return;
	const struct cuda_provider *p = &cuda_provider_cublaslt;
	struct cuda_dev *cd;
	void *st;
	if (!provider_open(p, &cd, &st))
		return;
	const uint32_t k = 256, ms[2] = { 256, 384 };
	struct operands o[2];
	void *packed[2] = { NULL, NULL };
	for (int wi = 0; wi < 2; wi++) {
		ops_make(&o[wi], MFMA_DT_F16, MFMA_DT_F32, false, ms[wi], 16, k, 1.0f, 0.0f);
		struct mfma_weight_host wh = { .m = ms[wi], .k = k, .dtype = MFMA_DT_F16,
					       .a = o[wi].a };
		packed[wi] = provider_pack(p, cd, st, &wh);
	}
	const enum mfma_dtype outs[2] = { MFMA_DT_F32, MFMA_DT_F16 };
	/* Each weight warmed at CUDA_WARM_MAX_WIDTHS widths x 2 output types,
	 * the second after the first. */
	const uint64_t p0 = cuda_dev_plans(cd);
	cuda_dev_set_warming(cd, true);
	for (int wi = 0; wi < 2; wi++)
		for (int oi = 0; oi < 2; oi++)
			for (uint32_t i = 1; i <= CUDA_WARM_MAX_WIDTHS; i++)
				lt_run(cd, st, packed[wi], &o[wi], ms[wi], k, 16 * i, outs[oi]);
	cuda_dev_set_warming(cd, false);
	assert_int_equal(cuda_dev_plans(cd) - p0, 4 * CUDA_WARM_MAX_WIDTHS);
	/* 40 other N (odd multiples of 8) on the first weight, in its 32
	 * slots not kept; two GEMMs of one shape on no resident weight. */
	for (uint32_t j = 0; j < 40; j++)
		lt_run(cd, st, packed[0], &o[0], ms[0], k, 8 + 16 * j, MFMA_DT_F32);
	lt_run(cd, st, NULL, &o[1], ms[1], k, 24, MFMA_DT_F16);
	lt_run(cd, st, NULL, &o[1], ms[1], k, 24, MFMA_DT_F16);
	const uint64_t p1 = cuda_dev_plans(cd);
	assert_int_equal(p1 - p0, 4 * CUDA_WARM_MAX_WIDTHS + 40 + 1);
	/* Every warmed plan of both weights is still there; the first of the
	 * others was replaced and is made again. */
	for (int wi = 0; wi < 2; wi++)
		for (int oi = 0; oi < 2; oi++)
			for (uint32_t i = 1; i <= CUDA_WARM_MAX_WIDTHS; i++)
				lt_run(cd, st, packed[wi], &o[wi], ms[wi], k, 16 * i, outs[oi]);
	const uint64_t p2 = cuda_dev_plans(cd);
	lt_run(cd, st, packed[0], &o[0], ms[0], k, 8, MFMA_DT_F32);
	printf("  cuBLASLt: 2 weights x %u warmed plans, 40 others; warmed again: %" PRIu64
	       " new plans; the oldest other again: %" PRIu64 "\n", 2 * CUDA_WARM_MAX_WIDTHS,
	       p2 - p1, cuda_dev_plans(cd) - p2);
	assert_int_equal(p2, p1);
	assert_int_equal(cuda_dev_plans(cd) - p2, 1);
	for (int wi = 0; wi < 2; wi++) {
		p->weight_free(cd, st, packed[wi]);
		ops_free(&o[wi]);
	}
	provider_close(p, cd, st);
}

/* The libraries' launches are replayed from a CUDA graph made per plan
 * and operands (cuda_dev_graph_run): the same call again replays it, a
 * call with other scalars or another C makes another, going back finds or
 * makes it again.  cuSPARSELt on a 2:4 weight, cuBLASLt on a dense one;
 * each answer against the float64 reference. */
static void graph_replay(const struct cuda_provider *p, bool sparse)
{
	char err[512] = "";
	struct cuda_dev *cd;
	void *st;
	if (!provider_open(p, &cd, &st))
		return;
	const uint32_t m = 384, k = 512, n = 16;
	struct operands o;
	ops_make(&o, MFMA_DT_F16, MFMA_DT_F16, sparse, m, n, k, 1.0f, 0.0f);
	struct mfma_weight_host wh = { .m = m, .k = k, .dtype = MFMA_DT_F16, .sparse = sparse,
				       .a = o.a, .meta = o.meta };
	void *packed = provider_pack(p, cd, st, &wh);
	static const float ab[][2] = { { 1.0f, 0.0f }, { 1.0f, 0.0f }, { 2.5f, 0.5f },
				       { 2.5f, 0.5f }, { -1.0f, 0.0f }, { 1.0f, 0.0f } };
	for (size_t i = 0; i < sizeof(ab) / sizeof(ab[0]); i++) {
		struct operands r;
		ops_make(&r, MFMA_DT_F16, MFMA_DT_F16, false, m, n, k, ab[i][0], ab[i][1]);
		free(r.a);
		r.a = NULL;
		r.g.a_sparse = sparse;
		r.g.a = o.a;
		r.g.a_meta = o.meta;
		const char *variant = NULL;
		if (p->launch(cd, st, &r.g, packed, &variant, err, sizeof(err)) != 0)
			fail_msg("%s call %zu (alpha %g, beta %g): %s", p->name, i, ab[i][0], ab[i][1],
				 err);
		double rel = rel_error(&r, NULL, m);
		checks++;
		printf("  %s from its graph, call %zu alpha %4.1f beta %3.1f %-28s rel %.3g\n", p->name,
		       i, ab[i][0], ab[i][1], variant ? variant : "?", rel);
		if (!(rel <= nvt_tolerance(MFMA_DT_F16)))
			fail_msg("%s call %zu: relative error %g", p->name, i, rel);
		r.g.a = NULL;
		r.g.a_meta = NULL;
		ops_free(&r);
	}
	p->weight_free(cd, st, packed);
	ops_free(&o);
	provider_close(p, cd, st);
}

static void test_library_graph_replay(void **state)
{
	(void)state;
	graph_replay(&cuda_provider_cusparselt, true);
	graph_replay(&cuda_provider_cublaslt, false);
}

/* The provider a variant names: the libraries' and wgmma's start with
 * their name, our mma.sp kernels' with the dtype. */
static const char *provider_of(const char *variant)
{
	static const char *const named[] = { "wgmma.", "cublaslt.", "cusparselt." };
	static const char *const names[] = { "wgmma", "cublaslt", "cusparselt" };
	for (size_t i = 0; variant && i < 3; i++)
		if (strncmp(variant, named[i], strlen(named[i])) == 0)
			return names[i];
	return "ours";
}

/* A cache of choices for the test: one entry, the calls counted. */
static struct test_cache {
	int gets, puts;
	bool have;
	struct backend_choice_key key;
	char order[128];
} tc;

static int tc_get(void *arg, const struct backend_choice_key *k, char *order, size_t len)
{
	(void)arg;
	tc.gets++;
	if (!tc.have || memcmp(k, &tc.key, sizeof(*k)) != 0)
		return -ENOENT;
	snprintf(order, len, "%s", tc.order);
	return 0;
}

static void tc_put(void *arg, const struct backend_choice_key *k, const char *order)
{
	(void)arg;
	tc.puts++;
	tc.have = true;
	tc.key = *k;
	snprintf(tc.order, sizeof(tc.order), "%s", order);
}

static const struct backend_choices tc_hook = { .get = tc_get, .put = tc_put, .arg = NULL };

/* Re-probes and opens the test's device under cfg (the backend reads its
 * provider policy at probe). */
static void reopen(const struct backend_config *cfg)
{
	char err[512] = "";
	backend_cuda.close(dev);
	dev = NULL;
	if (backend_cuda.probe(cfg, err, sizeof(err)) != ndev)
		fail_msg("probe again: %s", err);
	if (backend_cuda.open(dev_index, cfg, &dev, err, sizeof(err)) != 0)
		fail_msg("open again: %s", err);
}

/* A test's teardown where it reopens the device with settings of its
 * own: back to main's configuration even when the test failed half way,
 * so that the tests after it run as they would alone. */
static int reopen_base(void **state)
{
	(void)state;
	const struct backend_config cfg = { TEST_BASE_CFG };
	reopen(&cfg);
	return 0;
}

/* One resident f16 weight (2:4 or dense) loaded, one GEMM at N on it,
 * checked against the reference, freed; the variant that ran. */
static const char *resident_once(bool sp, uint32_t m, uint32_t k, uint32_t n)
{
	struct operands o;
	ops_make(&o, MFMA_DT_F16, MFMA_DT_F16, sp, m, 16, k, 1.0f, 0.0f);
	void *w = load_f16_weight(dev, &o, sp, m, k);
	const char *v = resident_gemm(w, &o, MFMA_DT_F16, MFMA_DT_F16, sp, m, k, n).variant;
	backend_cuda.weight_free(dev, w);
	ops_free(&o);
	return v;
}

/* cuda.providers and the cache of choices (issue 11): an excluded
 * provider is listed as excluded, adds no variant and never runs; a pin
 * runs whatever it can; a measured order is handed to the cache, and an
 * order found there is used as it is, without timing the candidates. */
static void test_policy_and_cache(void **state)
{
	(void)state;
	if (quick == 2)
		return;
	const uint32_t m = quick ? 1024 : 4096, k = quick ? 1024 : 4096;
	struct backend_device_info info;
	struct backend_config cfg = { TEST_BASE_CFG };

	/* Exclusion: both libraries.  test_choice shows a library serving
	 * dense N=256 when present; excluded, ours must. */
	cfg.cuda_providers.prefer = -1;
	cfg.cuda_providers.exclude = 1u << providers_index(PROVIDERS_CUDA, "cublaslt") |
				     1u << providers_index(PROVIDERS_CUDA, "cusparselt");
	reopen(&cfg);
	assert_int_equal(backend_cuda.describe(dev_index, &info), 0);
	printf("  excluded: providers %s\n", info.providers);
	assert_non_null(strstr(info.providers, "cublaslt:excluded"));
	assert_non_null(strstr(info.providers, "cusparselt:excluded"));
	assert_null(strstr(info.variants, "cublaslt."));
	assert_null(strstr(info.variants, "cusparselt."));
	for (int sp = 0; sp < 2; sp++) {
		const char *v = resident_once(sp, m, k, 256);
		printf("  excluded: %s N=256 ran %s\n", sp ? "2:4" : "dense", v);
		assert_true(strncmp(v, "cu", 2) != 0);
	}

	/* A pin: ours, on 2:4 where wgmma is otherwise measured against it. */
	cfg.cuda_providers.exclude = 0;
	cfg.cuda_providers.prefer = providers_index(PROVIDERS_CUDA, "ours");
	reopen(&cfg);
	assert_int_equal(backend_cuda.describe(dev_index, &info), 0);
	assert_non_null(strstr(info.providers, "ours:pinned"));
	for (uint32_t n = 16; n <= 256; n *= 16) {
		const char *v = resident_once(true, m, k, n);
		printf("  pinned ours: 2:4 N=%u ran %s\n", n, v);
		assert_string_equal(provider_of(v), "ours");
	}

	/* The cache: the first GEMM measures and hands the order over; a
	 * weight loaded again finds it and runs its first (here the order
	 * reversed, the slowest first, which no measurement would choose). */
	cfg.cuda_providers.prefer = -1;
	cfg.choices = &tc_hook;
	reopen(&cfg);
	memset(&tc, 0, sizeof(tc));
	const char *v = resident_once(true, m, k, 16);
	printf("  measured: 2:4 N=16 ran %s; cached order %s (gets %d, puts %d)\n", v, tc.order,
	       tc.gets, tc.puts);
	assert_int_equal(tc.puts, 1);
	assert_true(tc.have);
	assert_int_equal(tc.key.m, m);
	assert_int_equal(tc.key.n_max, 16);
	/* The key names the build of our kernels and each library's version,
	 * so that a rebuild or an upgrade measures again. */
	printf("  the choice's device key: %s\n", tc.key.device);
	char stamp[32];
	snprintf(stamp, sizeof(stamp), " kernels %s:", nv_images_stamp);
	assert_non_null(strstr(tc.key.device, stamp));
	if (strstr(tc.key.device, " cublaslt"))
		assert_non_null(strstr(tc.key.device, " cublaslt@"));
	if (strstr(tc.key.device, " cusparselt"))
		assert_non_null(strstr(tc.key.device, " cusparselt@"));
	char rev[128] = "", copy[128];
	snprintf(copy, sizeof(copy), "%s", tc.order);
	assert_int_equal(strncmp(tc.order, provider_of(v), strlen(provider_of(v))), 0);
	const char *parts[8];
	int np = 0;
	for (char *t = strtok(copy, ","); t && np < 8; t = strtok(NULL, ","))
		parts[np++] = t;
	if (np < 2) {
		printf("  (one candidate: nothing to reorder)\n");
	} else {
		for (int i = np - 1; i >= 0; i--)
			snprintf(rev + strlen(rev), sizeof(rev) - strlen(rev), "%s%s",
				 i == np - 1 ? "" : ",", parts[i]);
		snprintf(tc.order, sizeof(tc.order), "%s", rev);
		uint64_t t0 = mfma_clock_ns();
		v = resident_once(true, m, k, 16);
		uint64_t dt = mfma_clock_ns() - t0;
		printf("  cached %s: 2:4 N=16 ran %s, no timing (puts %d), %.1f ms with the load\n",
		       rev, v, tc.puts, dt / 1e6);
		assert_int_equal(tc.puts, 1);
		assert_string_equal(provider_of(v), parts[np - 1]);
	}
	/* A cached order naming a provider that is not a candidate is not
	 * used: measured again. */
	if (np >= 2) {
		snprintf(tc.order, sizeof(tc.order), "cublaslt");
		v = resident_once(true, m, k, 16);
		assert_int_equal(tc.puts, 2);
	}

	cfg.choices = NULL;
	cfg.cuda_providers = (struct provider_policy){ .exclude = 0, .prefer = -1 };
	reopen(&cfg);
}

/* The served-trial tests' device: reopened under cfg with
 * cuda.served_trial = runs, the test's cache of choices (emptied), no
 * provider pinned and those of `exclude` left out; trial_close reopens it
 * with the trial, the cache and the exclusions off. */
static void trial_open(struct backend_config *cfg, uint32_t runs, uint32_t exclude)
{
	*cfg = (struct backend_config){ TEST_BASE_CFG, .cuda_served_trial = runs,
					.choices = &tc_hook };
	cfg->cuda_providers.prefer = -1;
	cfg->cuda_providers.exclude = exclude;
	reopen(cfg);
	memset(&tc, 0, sizeof(tc));
}

static void trial_close(struct backend_config *cfg)
{
	cfg->choices = NULL;
	cfg->cuda_served_trial = 0;
	cfg->cuda_providers.exclude = 0;
	reopen(cfg);
}

/* The providers of the test cache's order (tc.order: variants, fastest
 * first) in cand, each cleared first: how many (none measured: 0). */
_Static_assert(BACKEND_TRIAL_CANDIDATES == 4, "order_names reads four names");
static int order_names(char cand[BACKEND_TRIAL_CANDIDATES][32])
{
	memset(cand, 0, BACKEND_TRIAL_CANDIDATES * sizeof(cand[0]));
	const int n = sscanf(tc.order, "%31[^,],%31[^,],%31[^,],%31[^,]", cand[0], cand[1],
			     cand[2], cand[3]);
	return n > 0 ? n : 0;
}

/* cuda.served_trial: after a resident weight's first GEMM of a bucket
 * measured the order, the next k x (RUNS + 1) served GEMMs run its k
 * candidates (every one measured: four on a 2:4 weight) in a block each,
 * in the measured order; the last of them ends the trial (naming the k
 * and their medians, fastest first), and from then on the one with the
 * shortest median kernel time runs, and is the first of the order the
 * cache holds.  Every answer checked against the reference.  Which one
 * wins is the GPU's to say: the test prints it. */
static void test_served_trial(void **state)
{
	(void)state;
	enum { RUNS = 4 };
	const uint32_t m = quick ? 1024 : 4096, k = quick ? 1024 : 4096;
	struct backend_config cfg;
	trial_open(&cfg, RUNS, 0);
	for (int sp = 1; sp >= 0; sp--) {
		struct operands o;
		ops_make(&o, MFMA_DT_F16, MFMA_DT_F16, sp, m, 16, k, 1.0f, 0.0f);
		void *w = load_f16_weight(dev, &o, sp, m, k);
		const int puts0 = tc.puts;
		struct backend_timing t = resident_gemm(w, &o, MFMA_DT_F16, MFMA_DT_F16, sp, m, k, 16);
		assert_int_equal(t.trial_end, 0);
		char order[128], cand[BACKEND_TRIAL_CANDIDATES][32];
		snprintf(order, sizeof(order), "%s", tc.order);
		const int nk = order_names(cand);
		if (tc.puts != puts0 + 1 || nk < 2) {
			printf("  trial %s: order %s, one candidate or not measured: no trial\n",
			       sp ? "2:4" : "dense", order);
			backend_cuda.weight_free(dev, w);
			ops_free(&o);
			continue;
		}
		/* A block of each, in the measured order: RUNS + 1 launches
		 * (the first not timed); the last ends the trial. */
		for (int j = 0; j < nk * (RUNS + 1); j++) {
			t = resident_gemm(w, &o, MFMA_DT_F16, MFMA_DT_F16, sp, m, k, 16);
			assert_string_equal(provider_of(t.variant), cand[j / (RUNS + 1)]);
			assert_int_equal(t.trial_end != 0, j == nk * (RUNS + 1) - 1);
		}
		const bool changed = t.trial_end == BACKEND_TRIAL_CHANGED;
		assert_int_equal(t.trial_n, nk);
		char winner[32];
		snprintf(winner, sizeof(winner), "%s", provider_of(t.trial_variant[0]));
		printf("  trial %s N=16: measured %s; served in blocks of %d: %s leads%s (medians",
		       sp ? "2:4" : "dense", order, RUNS, winner, changed ? " (order changed)" : "");
		for (int j = 0; j < nk; j++)
			printf(" %s %.1f", provider_of(t.trial_variant[j]), t.trial_median_ns[j] / 1e3);
		printf(" us)\n");
		/* The end names each candidate once, fastest first; the leader
		 * changed exactly when it is not the measured one. */
		for (int j = 0; j < nk; j++) {
			assert_non_null(t.trial_variant[j]);
			int seen = 0;
			for (int c = 0; c < nk; c++)
				seen += strcmp(provider_of(t.trial_variant[j]), cand[c]) == 0;
			assert_int_equal(seen, 1);
			assert_true(t.trial_median_ns[j] > 0);
			if (j > 0)
				assert_true(t.trial_median_ns[j - 1] <= t.trial_median_ns[j]);
		}
		assert_int_equal(changed, strcmp(winner, cand[0]) != 0);
		/* The cache learns the order when the trial moved any of it. */
		assert_true(tc.puts == puts0 + 1 || tc.puts == puts0 + 2);
		if (changed)
			assert_int_equal(tc.puts, puts0 + 2);
		assert_int_equal(strncmp(tc.order, winner, strlen(winner)), 0);
		for (int j = 0; j < 3; j++) {
			t = resident_gemm(w, &o, MFMA_DT_F16, MFMA_DT_F16, sp, m, k, 16);
			assert_string_equal(provider_of(t.variant), winner);
			assert_int_equal(t.trial_end, 0);
		}
		backend_cuda.weight_free(dev, w);
		ops_free(&o);
	}
	trial_close(&cfg);
}

/* cuda.served_trial where a trial candidate cannot make a shape of its
 * bucket: a 2:4 weight served by wgmma and cuSPARSELt alone (ours and
 * cuBLASLt excluded) measures bucket 0 at N = 16; at N = 12, which
 * cuSPARSELt refuses (N a multiple of 8), the trial ends with the measured
 * order kept, whichever slot cuSPARSELt holds: no answer ends a trial
 * after that, and N = 16 runs the measured leader.  (The trial used to
 * wait on cuSPARSELt at N = 12 and end later at N = 16.) */
static void test_served_trial_refused_width(void **state)
{
	(void)state;
	enum { RUNS = 4 };
	const uint32_t m = quick ? 1024 : 4096, k = quick ? 1024 : 4096;
	struct backend_config cfg;
	trial_open(&cfg, RUNS,
		   1u << providers_index(PROVIDERS_CUDA, "cublaslt") |
			   1u << providers_index(PROVIDERS_CUDA, "ours"));
	struct operands o;
	ops_make(&o, MFMA_DT_F16, MFMA_DT_F16, true, m, 16, k, 1.0f, 0.0f);
	void *w = load_f16_weight(dev, &o, true, m, k);
	struct backend_timing t = resident_gemm(w, &o, MFMA_DT_F16, MFMA_DT_F16, true, m, k, 16);
	char cand[BACKEND_TRIAL_CANDIDATES][32];
	const int nk = order_names(cand);
	const char *lead = cand[0];
	printf("  trial, a width refused: measured %s at N=16\n", tc.order);
	if (tc.puts != 1 || nk < 2) {
		printf("  trial, a width refused: one candidate: nothing to test\n");
	} else {
		for (int j = 0; j < 2 * (RUNS + 1) + 1; j++) {
			t = resident_gemm(w, &o, MFMA_DT_F16, MFMA_DT_F16, true, m, k, 12);
			assert_string_equal(provider_of(t.variant), "wgmma");
			assert_int_equal(t.trial_end, 0);
		}
		for (int j = 0; j < 2 * (RUNS + 1) + 1; j++) {
			t = resident_gemm(w, &o, MFMA_DT_F16, MFMA_DT_F16, true, m, k, 16);
			assert_string_equal(provider_of(t.variant), lead);
			assert_int_equal(t.trial_end, 0);
		}
		assert_int_equal(tc.puts, 1);
	}
	backend_cuda.weight_free(dev, w);
	ops_free(&o);
	trial_close(&cfg);
}

/* One batch of two requests of N = 8 (bucket 0, as N = 16) on resident
 * weight w (o's A): each part's D against float64; its timing. */
static struct backend_timing batch_of_two(void *w, const struct operands *o, bool sp, uint32_t m,
					  uint32_t k)
{
	struct operands r[2];
	struct mfma_gemm_part parts[2];
	for (int i = 0; i < 2; i++)
		ops_make(&r[i], MFMA_DT_F16, MFMA_DT_F16, false, m, 8, k, 1.0f, 0.0f);
	struct mfma_gemm g = join_parts(r, parts, 2, sp);
	struct backend_timing t = { 0 };
	char err[512] = "";
	if (backend_cuda.gemm(dev, &g, w, &t, err, sizeof(err)) != 0)
		fail_msg("batch of two: %s", err);
	for (int i = 0; i < 2; i++) {
		r[i].g.a_sparse = sp;
		r[i].g.a = o->a;
		r[i].g.a_meta = o->meta;
		const double rel = rel_error(&r[i], NULL, m);
		checks++;
		if (!(rel <= nvt_tolerance(MFMA_DT_F16)))
			fail_msg("batch of two, part %d (%s): relative error %g", i,
				 t.variant ? t.variant : "?", rel);
		r[i].g.a = NULL;
		r[i].g.a_meta = NULL;
		ops_free(&r[i]);
	}
	return t;
}

/* cuda.served_trial with batches among the lone GEMMs: a batch (two
 * requests joined) is no part of a trial.  A batch before each lone GEMM
 * of the trial runs the measured leader and ends nothing; the lone GEMMs
 * run their blocks in the measured order as without the batches, and the
 * last ends the trial; after it, a batch runs the trial's winner. */
static void test_served_trial_batches(void **state)
{
	(void)state;
	enum { RUNS = 4 };
	const uint32_t m = quick ? 1024 : 4096, k = quick ? 1024 : 4096;
	struct backend_config cfg;
	trial_open(&cfg, RUNS, 0);
	struct operands o;
	ops_make(&o, MFMA_DT_F16, MFMA_DT_F16, true, m, 16, k, 1.0f, 0.0f);
	void *w = load_f16_weight(dev, &o, true, m, k);
	struct backend_timing t = resident_gemm(w, &o, MFMA_DT_F16, MFMA_DT_F16, true, m, k, 16);
	char cand[BACKEND_TRIAL_CANDIDATES][32];
	const int nk = order_names(cand);
	printf("  trial with batches: measured %s at N=16\n", tc.order);
	if (tc.puts != 1 || nk < 2) {
		printf("  trial with batches: one candidate or not measured: nothing to test\n");
	} else {
		for (int j = 0; j < nk * (RUNS + 1); j++) {
			t = batch_of_two(w, &o, true, m, k);
			if (strcmp(provider_of(t.variant), cand[0]) != 0 || t.trial_end != 0)
				fail_msg("batch before trial launch %d ran %s (trial end %d), not the "
					 "measured leader %s", j, t.variant ? t.variant : "?",
					 (int)t.trial_end, cand[0]);
			t = resident_gemm(w, &o, MFMA_DT_F16, MFMA_DT_F16, true, m, k, 16);
			assert_string_equal(provider_of(t.variant), cand[j / (RUNS + 1)]);
			assert_int_equal(t.trial_end != 0, j == nk * (RUNS + 1) - 1);
		}
		const char *winner = provider_of(t.trial_variant[0]);
		printf("  trial with batches: %s leads after the trial\n", winner);
		t = batch_of_two(w, &o, true, m, k);
		assert_string_equal(provider_of(t.variant), winner);
		assert_int_equal(t.trial_end, 0);
	}
	backend_cuda.weight_free(dev, w);
	ops_free(&o);
	trial_close(&cfg);
}

/* A lone GEMM on a resident weight started to be left running
 * (backend_timing.leave_only, as the daemon's loop starts one on an idle
 * device): with D in registered host memory and its N bucket's choice
 * made, it is left running (t.left), gemm_end fills its times, and D is
 * the same GEMM's waited for, bit for bit, with B staged or registered;
 * CUDA_EVENT_SETS are left at once and end in order, one more is refused.
 * Refused with -EAGAIN and D untouched wherever it would have to be
 * waited for: D on the heap, a bucket whose choice is not made yet, no
 * resident weight. */
static void test_lone_left_running(void **state)
{
	enum { NL = CUDA_EVENT_SETS };
	(void)state;
	const uint32_t m = quick ? 1024 : 4096, k = quick ? 1024 : 4096, n = 16;
	struct backend_config cfg = { TEST_BASE_CFG };
	cfg.cuda_providers.prefer = -1;
	reopen(&cfg);
	for (int sp = 1; sp >= 0; sp--) {
		struct operands o;
		ops_make(&o, MFMA_DT_F16, MFMA_DT_F16, sp, m, n, k, 1.0f, 0.0f);
		void *w = load_f16_weight(dev, &o, sp, m, k);
		const size_t db = (size_t)m * n * 2, bb = (size_t)k * n * 2;
		struct test_region rg;
		region_make(&rg, "test-lone", (NL + 1) * db + bb + 4096);
		unsigned char *d[NL + 1], *b = rg.p + (NL + 1) * db;
		for (int i = 0; i <= NL; i++)
			d[i] = rg.p + i * db;
		memcpy(b, o.b, bb);
		memset(rg.p, 0xff, (NL + 1) * db);
		char err[512] = "";
		struct mfma_gemm g = o.g;
		g.d = d[0];
		struct backend_timing t = { .may_leave = true, .leave_only = true };
		/* The bucket's choice is not made yet: measuring is waited for. */
		assert_int_equal(backend_cuda.gemm(dev, &g, w, &t, err, sizeof(err)), -EAGAIN);
		assert_int_equal(t.left, 0);
		/* Waited for, into the heap: the choice is made, D checked. */
		struct backend_timing tw = { 0 };
		RC_OK(backend_cuda.gemm(dev, &o.g, w, &tw, err, sizeof(err)), err);
		uint32_t idx[16];
		for (uint32_t j = 0; j < 16; j++)
			idx[j] = j == 0 ? 0 : j == 1 ? m - 1 : nvt_rand(&seed) % m;
		double rel = rel_error(&o, idx, 16);
		if (!(rel <= nvt_tolerance(MFMA_DT_F16)))
			fail_msg("lone GEMM waited for (%s): relative error %g", tw.variant, rel);
		/* D on the heap cannot be left: refused, nothing written. */
		struct mfma_gemm gh = o.g;
		unsigned char *heap_d = malloc(db);
		assert_non_null(heap_d);
		memset(heap_d, 0xff, db);
		gh.d = heap_d;
		t = (struct backend_timing){ .may_leave = true, .leave_only = true };
		assert_int_equal(backend_cuda.gemm(dev, &gh, w, &t, err, sizeof(err)), -EAGAIN);
		for (size_t i = 0; i < db; i++)
			if (heap_d[i] != 0xff)
				fail_msg("a refused start wrote D at byte %zu", i);
		free(heap_d);
		/* No resident weight: refused. */
		t = (struct backend_timing){ .may_leave = true, .leave_only = true };
		assert_int_equal(backend_cuda.gemm(dev, &g, NULL, &t, err, sizeof(err)), -EAGAIN);
		assert_true(d[0][0] == 0xff && d[0][db - 1] == 0xff);
		/* Left running: B staged into d[0], d[2], ..., registered into
		 * d[1], d[3], ...; one more start is refused while they run. */
		struct backend_timing tl[NL];
		for (int i = 0; i < NL; i++) {
			struct mfma_gemm gl = o.g;
			gl.d = d[i];
			gl.b = i % 2 ? b : o.b;
			tl[i] = (struct backend_timing){ .may_leave = true, .leave_only = true };
			RC_OK(backend_cuda.gemm(dev, &gl, w, &tl[i], err, sizeof(err)), err);
			assert_true(tl[i].left > 0);
		}
		struct mfma_gemm gm = o.g;
		gm.d = d[NL];
		t = (struct backend_timing){ .may_leave = true, .leave_only = true };
		assert_int_equal(backend_cuda.gemm(dev, &gm, w, &t, err, sizeof(err)), -EAGAIN);
		for (int i = 0; i < NL; i++) {
			RC_OK(backend_cuda.gemm_end(dev, &tl[i], err, sizeof(err)), err);
			assert_int_equal(tl[i].left, 0);
			assert_true(tl[i].kernel_ns > 0);
			assert_memory_equal(d[i], o.d, db);
		}
		assert_true(d[NL][0] == 0xff && d[NL][db - 1] == 0xff);
		printf("  lone %s %ux%ux%u left running (%s): h2d %.1f kernel %.1f d2h %.1f us, "
		       "equal to the waited result\n",
		       sp ? "2:4" : "dense", m, n, k, tl[1].variant, tl[1].h2d_ns / 1e3,
		       tl[1].kernel_ns / 1e3, tl[1].d2h_ns / 1e3);
		checks += NL + 1;
		region_free(&rg);
		backend_cuda.weight_free(dev, w);
		ops_free(&o);
	}
	reopen(&cfg);
}

/* ---- a kernel launched before its B (cuda.gate) ---- */

/* The device opened with the base configuration and the wgmma provider
 * attached (*st): false, the device closed again, where it has none. */
static bool wg_open(struct cuda_dev **cd, void **st, const char *what)
{
	char err[512] = "";
	struct backend_config cfg = { TEST_BASE_CFG };
	RC_OK(cuda_dev_open(dev_index, &cfg, cd, err, sizeof(err)), err);
	if (!cuda_provider_wgmma.usable(cuda_dev_cc(*cd))) {
		printf("  %s: no wgmma kernels on this device\n", what);
		cuda_dev_close(*cd);
		return false;
	}
	RC_OK(cuda_provider_wgmma.attach(*cd, st, err, sizeof(err)), err);
	return true;
}

/* What wg_open opened, closed. */
static void wg_close(struct cuda_dev *cd, void *st)
{
	cuda_provider_wgmma.detach(cd, st);
	cuda_dev_close(cd);
}

/* The cases of test_gate and test_tile_out: odd shapes, each with 2:4
 * f16, 2:4 bf16 and dense f16 (kind 0, 1, 2), D f32 or the input type
 * in turn (N = 100 takes the 128 x 128 tile, whose 2:4 kernels have three
 * producer threads).  Quick: two shapes; racecheck (quick 2): one, 2:4
 * and dense. */
struct wg_case {
	int kind;
	bool sp;
	enum mfma_dtype in, out;
	uint32_t m, n, k;
	size_t bb, db;   /* bytes of B and of D */
	char label[64];  /* "2:4 f16->f32 300x17x516" */
};
static const uint32_t wg_shapes[][3] = { { 300, 17, 516 }, { 1000, 64, 2048 }, { 129, 8, 260 }, { 4096, 16, 4096 },
					  { 333, 100, 1028 } };

static size_t wg_ncases(void)
{
	return quick == 2 ? 2 : 3 * (quick ? 2 : sizeof(wg_shapes) / sizeof(wg_shapes[0]));
}

static struct wg_case wg_case_of(size_t i)
{
	const size_t si = quick == 2 ? 0 : i / 3;
	const int kind = quick == 2 ? 2 * (int)i : (int)(i % 3);
	struct wg_case c = { .kind = kind, .sp = kind < 2, .in = kind == 1 ? MFMA_DT_BF16 : MFMA_DT_F16 };
	c.out = (si + (size_t)kind) % 2 ? MFMA_DT_F32 : c.in;
	c.m = wg_shapes[si][0];
	c.n = wg_shapes[si][1];
	c.k = wg_shapes[si][2];
	c.bb = (size_t)c.k * c.n * 2;
	c.db = (size_t)c.m * c.n * mfma_dtype_size(c.out);
	snprintf(c.label, sizeof(c.label), "%s %s->%s %ux%ux%u", c.sp ? "2:4" : "dense", mfma_dtype_name(c.in),
		 mfma_dtype_name(c.out), c.m, c.n, c.k);
	return c;
}

/* Case c's weight made (*w: A, and the operands' shape) and packed on the
 * device: the provider's packed weight. */
static void *wg_weight(struct cuda_dev *cd, void *st, const struct wg_case *c, struct operands *w)
{
	char err[512] = "";
	ops_make(w, c->in, c->out, c->sp, c->m, c->n, c->k, 1.0f, 0.0f);
	struct mfma_weight_host wh = { .m = c->m, .k = c->k, .dtype = c->in, .sparse = c->sp, .a = w->a,
				       .meta = w->meta };
	void *pk = NULL;
	uint64_t bytes = 0;
	RC_OK(cuda_provider_wgmma.weight_pack(cd, st, &wh, &pk, &bytes, err, sizeof(err)), err);
	RC_OK(cuda_dev_sync(cd, "packing", err, sizeof(err)), err);
	return pk;
}

/* A request of case c on weight w (its A, for the launch and the
 * reference): B, C when beta != 0, D poisoned; alpha 0.75. */
static void wg_request(struct operands *o, const struct wg_case *c, const struct operands *w, float beta)
{
	ops_make(o, c->in, c->out, false, c->m, c->n, c->k, 0.75f, beta);
	free(o->a);
	o->a = NULL;
	o->g.a_sparse = c->sp;
	o->g.a = w->a;
	o->g.a_meta = w->meta;
}

/* Frees a wg_request's operands (the weight's A stays). */
static void wg_request_free(struct operands *o)
{
	o->g.a = NULL;
	o->g.a_meta = NULL;
	ops_free(o);
}

/* len bytes of anonymous memory registered with the device as a
 * client's region is (mapped). */
static unsigned char *wg_region(struct cuda_dev *cd, size_t len)
{
	char err[512] = "";
	unsigned char *rg = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(rg != MAP_FAILED);
	RC_OK(cuda_dev_host_register(cd, rg, len, true, err, sizeof(err)), err);
	return rg;
}

static void wg_region_free(struct cuda_dev *cd, unsigned char *rg, size_t len)
{
	cuda_dev_host_unregister(cd, rg);
	munmap(rg, len);
}

/* One GEMM of the wgmma provider on packed weight pk (A of o), with B
 * and D at b and d in registered memory; the launch only (D left
 * running when the device is between cuda_dev_lone_begin and _end). */
static void gate_launch(struct cuda_dev *cd, void *st, void *pk, const struct operands *o, void *b, void *d,
			const char *what)
{
	struct mfma_gemm g = o->g;
	g.b = b;
	g.d = d;
	const char *variant = NULL;
	char err[512] = "";
	int rc = cuda_provider_wgmma.launch(cd, st, &g, pk, &variant, err, sizeof(err));
	if (rc != 0)
		fail_msg("%s: launch failed (%d): %s", what, rc, err);
}

/* D of o (the answer copied into o->d from d) against float64. */
static void gate_check(struct operands *o, const void *d, const char *what)
{
	memcpy(o->d, d, (size_t)o->g.m * o->g.n * mfma_dtype_size(o->g.out_dtype));
	const double rel = rel_error(o, NULL, o->g.m);
	checks++;
	printf("  %-52s rel %.3g\n", what, rel);
	if (!(rel <= nvt_tolerance(o->g.out_dtype)))
		fail_msg("%s: relative error %g above %g", what, rel, nvt_tolerance(o->g.out_dtype));
}

/* cuda.gate: a resident weight's wgmma GEMM whose B lies in registered
 * memory is launched before B is on the device (cuda_dev_copy_in_gated,
 * the kernel waiting at its gate).  Odd shapes, 2:4 and dense, f16 and
 * bf16, D f32 and 16-bit, alpha != 1: every D against float64, each GEMM
 * with a B that the device's B buffer did not hold before (a kernel that
 * read B before it landed would compute with the previous one).  Then
 * two launches left running one behind the other: the second one's copy
 * of B must wait for the first kernel, which reads the same buffer; both
 * D right.  Each launch's timing says it was gated (backend_timing.gated);
 * with B on the heap it is not. */
static void test_gate(void **state)
{
	(void)state;
	char err[512] = "";
	struct cuda_dev *cd = NULL;
	void *st = NULL;
	const struct cuda_provider *p = &cuda_provider_wgmma;
	if (!wg_open(&cd, &st, "gate"))
		return;
	for (size_t ci = 0; ci < wg_ncases(); ci++) {
		const struct wg_case c = wg_case_of(ci);
		const size_t bb = c.bb, db = c.db;
		struct operands w;
		void *pk = wg_weight(cd, st, &c, &w);
		/* Three requests on the weight: B and D of each in a
		 * region (B at an odd 16-byte offset). */
		const size_t len = 3 * (bb + db) + 4096;
		unsigned char *rg = wg_region(cd, len);
		struct operands o[3];
		unsigned char *b[3], *d[3];
		for (int i = 0; i < 3; i++) {
			wg_request(&o[i], &c, &w, 0.0f);
			b[i] = rg + 16 + (size_t)i * (bb + db);
			d[i] = b[i] + bb;
			memcpy(b[i], o[i].b, bb);
			memset(d[i], 0xff, db);
		}
		char what[160];
		snprintf(what, sizeof(what), "gate %s", c.label);
		/* Waited for, each in turn. */
		for (int i = 0; i < 3; i++) {
			gate_launch(cd, st, pk, &o[i], b[i], d[i], what);
			struct backend_timing t = { 0 };
			cuda_dev_timing(cd, &t);
			if (!t.gated)
				fail_msg("%s: launch %d not gated", what, i);
			gate_check(&o[i], d[i], what);
		}
		/* Left running, the second behind the first. */
		int set[2];
		for (int i = 0; i < 2; i++) {
			memset(d[i], 0xff, db);
			cuda_dev_lone_begin(cd);
			gate_launch(cd, st, pk, &o[i], b[i], d[i], what);
			set[i] = cuda_dev_lone_end(cd);
			if (set[i] < 0)
				fail_msg("%s: launch %d not left running", what, i);
		}
		char left[200];
		snprintf(left, sizeof(left), "%s (left running)", what);
		for (int i = 0; i < 2; i++) {
			struct backend_timing t = { 0 };
			RC_OK(cuda_dev_finish(cd, set[i], &t, err, sizeof(err)), err);
			if (!t.gated)
				fail_msg("%s: launch %d not gated", left, i);
			gate_check(&o[i], d[i], left);
		}
		/* B on the heap: no gate. */
		memset(d[2], 0xff, db);
		gate_launch(cd, st, pk, &o[2], o[2].b, d[2], what);
		struct backend_timing th = { .gated = true };
		cuda_dev_timing(cd, &th);
		if (th.gated)
			fail_msg("%s: B on the heap went through the gate", what);
		gate_check(&o[2], d[2], "  the same with B on the heap");
		wg_region_free(cd, rg, len);
		for (int i = 0; i < 3; i++)
			wg_request_free(&o[i]);
		p->weight_free(cd, st, pk);
		ops_free(&w);
	}
	wg_close(cd, st);
}

/* The driver's calls that test_gate_setup_fails makes fail or counts. */
static CUresult (*real_stream_create)(CUstream *, unsigned int);
static CUresult (*real_event_create)(CUevent *, unsigned int);
static int streams_refused, events_made;

static CUresult refusing_stream_create(CUstream *s, unsigned int flags)
{
	(void)s;
	(void)flags;
	streams_refused++;
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult counting_event_create(CUevent *e, unsigned int flags)
{
	events_made++;
	return real_event_create(e, flags);
}

/* test_gate_setup_fails' teardown: the driver's calls as they were, even
 * when the test failed with them swapped. */
static int restore_driver(void **state)
{
	(void)state;
	if (real_stream_create)
		nv_drv.cuStreamCreate = real_stream_create;
	if (real_event_create)
		nv_drv.cuEventCreate = real_event_create;
	return 0;
}

/* The gate's stream cannot be made (the driver's call made to fail, as
 * when it is out of resources): each request whose B lies in a region is
 * served ungated and right, the stream is tried again by each, and the
 * gate's event is made once however often that fails (it was made again,
 * and the last one lost, on every try).  Once the stream can be made,
 * the next request goes through the gate. */
static void test_gate_setup_fails(void **state)
{
	(void)state;
	struct cuda_dev *cd = NULL;
	void *st = NULL;
	const struct cuda_provider *p = &cuda_provider_wgmma;
	if (!wg_open(&cd, &st, "gate setup"))
		return;
	const struct wg_case c = wg_case_of(0);
	struct operands w, o;
	void *pk = wg_weight(cd, st, &c, &w);
	const size_t len = c.bb + c.db + 4096;
	unsigned char *rg = wg_region(cd, len);
	wg_request(&o, &c, &w, 0.0f);
	unsigned char *b = rg + 16, *d = b + c.bb;
	memcpy(b, o.b, c.bb);
	real_stream_create = nv_drv.cuStreamCreate;
	real_event_create = nv_drv.cuEventCreate;
	nv_drv.cuStreamCreate = refusing_stream_create;
	nv_drv.cuEventCreate = counting_event_create;
	streams_refused = events_made = 0;
	for (int i = 0; i < 3; i++) {
		memset(d, 0xff, c.db);
		gate_launch(cd, st, pk, &o, b, d, "gate's stream refused");
		struct backend_timing t = { .gated = true };
		cuda_dev_timing(cd, &t);
		if (t.gated)
			fail_msg("gate's stream refused: request %d went through a gate", i);
		gate_check(&o, d, "gate's stream refused: served ungated");
	}
	nv_drv.cuStreamCreate = real_stream_create;
	nv_drv.cuEventCreate = real_event_create;
	if (streams_refused != 3)
		fail_msg("gate's stream tried %d times by 3 requests", streams_refused);
	if (events_made != 1)
		fail_msg("gate's event made %d times over 3 refused streams", events_made);
	memset(d, 0xff, c.db);
	gate_launch(cd, st, pk, &o, b, d, "gate's stream made again");
	struct backend_timing t = { 0 };
	cuda_dev_timing(cd, &t);
	if (!t.gated)
		fail_msg("gate's stream made again: request not gated");
	gate_check(&o, d, "gate's stream made again: gated");
	wg_region_free(cd, rg, len);
	wg_request_free(&o);
	p->weight_free(cd, st, pk);
	ops_free(&w);
	wg_close(cd, st);
}

/* ---- programmatic dependent launches of the wgmma kernels ---- */

#define CU_OK(call)                                                                  \
	do {                                                                         \
		CUresult r_ = (call);                                                \
		if (r_ != CUDA_SUCCESS)                                              \
			fail_msg("%s failed: %s", #call, nv_result_str(r_));         \
	} while (0)

/* An f16 weight for the kernels directly, 2:4 or dense: canonical on the
 * host (for the reference), in the kernels' layout on the device. */
struct pdl_weight {
	void *vals;
	uint32_t *meta;
	struct nv_wg_packed pk;
};

static void pdl_weight_make(const struct nv_wg_module *mod, CUstream s, uint32_t m, uint32_t k, int dense,
			    struct pdl_weight *w)
{
	w->pk = (struct nv_wg_packed){ .m = m, .k = k, .dense = dense };
	const size_t vb = dense ? (size_t)m * k * 2 : sparse24_values_bytes(m, k, 2);
	const size_t mb = dense ? 0 : sparse24_meta_bytes(m, k);
	w->vals = malloc(vb + 1);
	w->meta = dense ? NULL : malloc(mb + 4);
	if (dense)
		nvt_fill(w->vals, MFMA_DT_F16, (size_t)m * k, &seed);
	else
		assert_int_equal(nvt_sparse(MFMA_DT_F16, m, k, w->vals, w->meta, NULL, &seed), 0);
	CUdeviceptr sv = 0, sm = 0;
	CU_OK(nv_drv.cuMemAlloc(&sv, vb));
	CU_OK(nv_drv.cuMemcpyHtoDAsync(sv, w->vals, vb, s));
	if (!dense) {
		CU_OK(nv_drv.cuMemAlloc(&sm, mb));
		CU_OK(nv_drv.cuMemcpyHtoDAsync(sm, w->meta, mb, s));
		CU_OK(nv_drv.cuMemAlloc(&w->pk.meta, (size_t)nv_wg_meta_bytes(m, k)));
	}
	CU_OK(nv_drv.cuMemAlloc(&w->pk.val, dense ? (size_t)nv_wg_dimg_bytes(m, k, 2) : (size_t)nv_wg_img_bytes(m, k, 2)));
	assert_int_equal(nv_wg_launch_pack(mod, s, sv, sm, &w->pk), 0);
	CU_OK(nv_drv.cuStreamSynchronize(s));
	nv_drv.cuMemFree(sv);
	if (sm)
		nv_drv.cuMemFree(sm);
}

static void pdl_weight_free(struct pdl_weight *w)
{
	nv_drv.cuMemFree(w->pk.val);
	if (w->pk.meta)
		nv_drv.cuMemFree(w->pk.meta);
	free(w->vals);
	free(w->meta);
	memset(w, 0, sizeof(*w));
}

/* One launch of D = alpha A B (f16 in and out, N columns) on the shared
 * workspace, as a dependent launch. */
static void pdl_launch(const struct nv_wg_module *mod, CUstream s, const struct pdl_weight *w, uint32_t n,
		       CUdeviceptr b, CUdeviceptr d, float alpha, CUdeviceptr ws, size_t ws_bytes,
		       CUdeviceptr counters, size_t counter_words)
{
	struct nv_wg_plan plan;
	/* A dense K goes to the plan rounded up to 4, as the daemon hands it. */
	const int64_t pk_k = w->pk.dense ? nv_round_up(w->pk.k, 4) : w->pk.k;
	assert_int_equal(nv_wg_plan_make(w->pk.m, n, pk_k, mod->sms, mod->occ[w->pk.dense][0], -1, &plan), 0);
	if (plan.ws_bytes > ws_bytes || plan.counters > counter_words)
		fail_msg("dependent launch: %" PRId64 "x%ux%" PRId64 " needs more workspace than the test holds",
			 w->pk.m, n, w->pk.k);
	const struct nv_wg_args g = { .b = b, .d = d, .n = (int32_t)n, .ldb = (int32_t)n, .ldc = (int32_t)n,
				      .ldd = (int32_t)n, .out_dtype = MFMA_DT_F16, .alpha = alpha,
				      .gate_l2 = NV_WG_GATE_L2, .pdl = 1 };
	char err[256] = "";
	if (nv_wg_launch_gemm(mod, &plan, &w->pk, &g, ws, counters, s, err, sizeof(err)) != 0)
		fail_msg("dependent launch failed: %s", err);
}

/* D (m x n f16, read back from d) against float64 of alpha A B, B being
 * the host copy of what the launch was given. */
static void pdl_check(const struct pdl_weight *w, uint32_t n, const void *b, CUdeviceptr d, CUstream s, float alpha,
		      const char *what)
{
	const uint32_t m = (uint32_t)w->pk.m, k = (uint32_t)w->pk.k;
	struct operands o;
	memset(&o, 0, sizeof(o));
	o.d = malloc((size_t)m * n * 2 + 1);
	CU_OK(nv_drv.cuMemcpyDtoHAsync(o.d, d, (size_t)m * n * 2, s));
	CU_OK(nv_drv.cuStreamSynchronize(s));
	o.g = (struct mfma_gemm){ .m = m, .n = n, .k = k, .in_dtype = MFMA_DT_F16, .out_dtype = MFMA_DT_F16,
				  .alpha = alpha, .a_sparse = !w->pk.dense, .a = w->vals, .a_meta = w->meta, .b = b,
				  .d = o.d };
	const double rel = rel_error(&o, NULL, m);
	checks++;
	printf("  %-60s rel %.3g\n", what, rel);
	if (!(rel <= nvt_tolerance(MFMA_DT_F16)))
		fail_msg("%s: relative error %g above %g", what, rel, nvt_tolerance(MFMA_DT_F16));
	free(o.d);
}

/* The layers of test_dependent_launch: `layers` GEMMs of mm x mm weights
 * (2:4, or dense) on n columns, each one's B the D of the one before, launched
 * back to back on one split-K workspace, twice; each D against float64
 * of the B it was given (read back once the chain is done). */
static void pdl_layers(const struct nv_wg_module *mod, CUstream s, uint32_t n, uint32_t mm, uint32_t layers,
		       int dense, CUdeviceptr ws, size_t ws_bytes, CUdeviceptr counters, size_t counter_words)
{
	const float alpha = 1.0f / 32; /* keeps each layer's D of the order of its B */
	struct pdl_weight w[5];
	CUdeviceptr x[6];
	void *hx[6];
	assert_true(layers <= 5);
	for (uint32_t i = 0; i < layers; i++)
		pdl_weight_make(mod, s, mm, mm, dense, &w[i]);
	for (uint32_t i = 0; i <= layers; i++) {
		CU_OK(nv_drv.cuMemAlloc(&x[i], (size_t)mm * n * 2));
		hx[i] = malloc((size_t)mm * n * 2 + 1);
	}
	nvt_fill(hx[0], MFMA_DT_F16, (size_t)mm * n, &seed);
	for (int round = 0; round < 2; round++) {
		CU_OK(nv_drv.cuMemcpyHtoDAsync(x[0], hx[0], (size_t)mm * n * 2, s));
		for (uint32_t i = 1; i <= layers; i++)
			CU_OK(nv_drv.cuMemsetD8Async(x[i], 0xff, (size_t)mm * n * 2, s));
		for (uint32_t i = 0; i < layers; i++)
			pdl_launch(mod, s, &w[i], n, x[i], x[i + 1], alpha, ws, ws_bytes, counters, counter_words);
		for (uint32_t i = 1; i <= layers; i++)
			CU_OK(nv_drv.cuMemcpyDtoHAsync(hx[i], x[i], (size_t)mm * n * 2, s));
		CU_OK(nv_drv.cuStreamSynchronize(s));
		for (uint32_t i = 0; i < layers; i++) {
			char what[128];
			snprintf(what, sizeof(what), "dependent launch: %s layer %u of %u, %ux%ux%u",
				 dense ? "dense" : "2:4", i + 1, layers, mm, n, mm);
			pdl_check(&w[i], n, hx[i], x[i + 1], s, alpha, what);
		}
	}
	for (uint32_t i = 0; i < layers; i++)
		pdl_weight_free(&w[i]);
	for (uint32_t i = 0; i <= layers; i++) {
		nv_drv.cuMemFree(x[i]);
		free(hx[i]);
	}
}

/* nv_wg_args.pdl: a wgmma launch that may start while the launch before
 * it on the stream still runs, loading its weight meanwhile, and must
 * read B and write D and the split-K workspace only after that one has
 * ended.  Launched back to back with nothing between them:
 *  - layers (pdl_layers): a launch that read B before the one before it
 *    had written it, or used the workspace while that one still did,
 *    fails; N = 16 (the 128 x 16 tile, two CTAs an SM, so a launch's
 *    CTAs can run beside the previous launch's) and N = 128 (one CTA an
 *    SM, three producer threads), 2:4 weights and dense ones;
 *  - a long GEMM (K = 8192) then a short one (K = 64) into the same D:
 *    the short one's D must be what is left, which a launch writing D
 *    before the one before it ended would not leave.
 * What this proves is the waits; that the launches do overlap is what
 * bench_nv's chained timings show (the wgmma pdl line). */
static void test_dependent_launch(void **state)
{
	(void)state;
	struct cuda_dev *cd = NULL;
	void *st = NULL;
	if (!wg_open(&cd, &st, "dependent launch"))
		return;
	cuda_provider_wgmma.detach(cd, st);
	if (!nv_drv.cuLaunchKernelEx) {
		printf("  dependent launch: the driver has no cuLaunchKernelEx\n");
		cuda_dev_close(cd);
		return;
	}
	char err[512] = "";
	struct nv_wg_module mod;
	RC_OK(nv_wg_module_load(&mod, cuda_dev_device(cd), err, sizeof(err)), err);
	const CUstream s = cuda_dev_stream(cd);
	const size_t ws_bytes = 64u << 20, counter_words = 1u << 16;
	CUdeviceptr ws = 0, counters = 0;
	CU_OK(nv_drv.cuMemAlloc(&ws, ws_bytes));
	CU_OK(nv_drv.cuMemAlloc(&counters, counter_words * 4));
	CU_OK(nv_drv.cuMemsetD32Async(counters, 0, counter_words, s));
	const uint32_t mm = quick ? 1024 : 1536, layers = quick == 2 ? 2 : 5;
	for (int dense = 0; dense < 2; dense++) {
		pdl_layers(&mod, s, 16, mm, layers, dense, ws, ws_bytes, counters, counter_words);
		pdl_layers(&mod, s, 128, mm, layers, dense, ws, ws_bytes, counters, counter_words);
	}

	/* A long launch, then a short one into the same D. */
	const uint32_t n = 16, lm = quick ? 2048 : 4096;
	struct pdl_weight lw, sw;
	pdl_weight_make(&mod, s, lm, quick ? 2048 : 8192, 0, &lw);
	pdl_weight_make(&mod, s, lm, 64, 0, &sw);
	CUdeviceptr lb = 0, sb = 0, d = 0;
	void *hlb = malloc((size_t)lw.pk.k * n * 2 + 1), *hsb = malloc((size_t)64 * n * 2 + 1);
	nvt_fill(hlb, MFMA_DT_F16, (size_t)lw.pk.k * n, &seed);
	nvt_fill(hsb, MFMA_DT_F16, (size_t)64 * n, &seed);
	CU_OK(nv_drv.cuMemAlloc(&lb, (size_t)lw.pk.k * n * 2));
	CU_OK(nv_drv.cuMemAlloc(&sb, (size_t)64 * n * 2));
	CU_OK(nv_drv.cuMemAlloc(&d, (size_t)lm * n * 2));
	CU_OK(nv_drv.cuMemcpyHtoDAsync(lb, hlb, (size_t)lw.pk.k * n * 2, s));
	CU_OK(nv_drv.cuMemcpyHtoDAsync(sb, hsb, (size_t)64 * n * 2, s));
	for (int round = 0; round < 2; round++) {
		CU_OK(nv_drv.cuMemsetD8Async(d, 0xff, (size_t)lm * n * 2, s));
		pdl_launch(&mod, s, &lw, n, lb, d, 1.0f / 32, ws, ws_bytes, counters, counter_words);
		pdl_launch(&mod, s, &sw, n, sb, d, 1.0f, ws, ws_bytes, counters, counter_words);
		char what[128];
		snprintf(what, sizeof(what), "dependent launch: %ux%ux%u after %ux%ux%" PRId64 " into one D", lm, n, 64,
			 lm, n, lw.pk.k);
		pdl_check(&sw, n, hsb, d, s, 1.0f, what);
	}
	free(hlb);
	free(hsb);
	nv_drv.cuMemFree(lb);
	nv_drv.cuMemFree(sb);
	nv_drv.cuMemFree(d);
	pdl_weight_free(&lw);
	pdl_weight_free(&sw);
	nv_drv.cuMemFree(ws);
	nv_drv.cuMemFree(counters);
	nv_wg_module_unload(&mod);
	cuda_dev_close(cd);
}

/* ---- D copied out by the kernel (cuda.tile_out) ---- */

/* cuda.tile_out: a lone wgmma launch (cuda_dev_lone_begin) whose D lies
 * in mapped registered memory has each CTA copy its tile of D there
 * (nv_wg_params.dh), with no copy after the kernel.  Odd shapes, 2:4 and
 * dense, f16 and bf16, D f32 and 16-bit, with and without C; D at a
 * 16-byte-aligned place and at one 2 bytes past it (the kernel's 16-, 4-
 * and 2-byte pieces).  Every D left running with tile out equal bit for
 * bit to the same GEMM waited for (D by DMA) and right against float64,
 * and its timing saying so (backend_timing.tile_out); a launch that is
 * not lone, or whose D is on the heap or at an odd address (a client's
 * region offset: the kernel's smallest store is 2 bytes, and a misaligned
 * one faults the context), does not. */
static void test_tile_out(void **state)
{
	(void)state;
	char err[512] = "";
	struct cuda_dev *cd = NULL;
	void *st = NULL;
	const struct cuda_provider *p = &cuda_provider_wgmma;
	if (!wg_open(&cd, &st, "tile out"))
		return;
	for (size_t ci = 0; ci < wg_ncases(); ci++) {
		const struct wg_case c = wg_case_of(ci);
		const float beta = c.kind == 1 ? 0.5f : 0.0f;
		const size_t bb = c.bb, db = c.db;
		struct operands w, o;
		void *pk = wg_weight(cd, st, &c, &w);
		wg_request(&o, &c, &w, beta);
		/* B, then D three times: 16-byte aligned, 2 bytes past, odd. */
		const size_t len = bb + 3 * db + 4096;
		unsigned char *rg = wg_region(cd, len);
		unsigned char *b = rg + 16, *d16 = rg + (16 + bb + 15) / 16 * 16 + 16;
		unsigned char *d2 = d16 + db + 16 + 2;
		unsigned char *d1 = d2 + db + 16 + 1;
		memcpy(b, o.b, bb);
		char what[160];
		snprintf(what, sizeof(what), "tile out %s%s", c.label, beta != 0.0f ? " with C" : "");
		/* Waited for: D by DMA, the reference. */
		memset(d16, 0xff, db);
		gate_launch(cd, st, pk, &o, b, d16, what);
		struct backend_timing t = { .tile_out = true };
		cuda_dev_timing(cd, &t);
		if (t.tile_out)
			fail_msg("%s: a launch that is not lone copied D out itself", what);
		unsigned char *ref = malloc(db);
		memcpy(ref, d16, db);
		gate_check(&o, d16, what);
		/* Lone, left running: the kernel copies D out. */
		for (int at = 0; at < 2; at++) {
			unsigned char *d = at ? d2 : d16;
			memset(d, 0xff, db);
			cuda_dev_lone_begin(cd);
			gate_launch(cd, st, pk, &o, b, d, what);
			const int set = cuda_dev_lone_end(cd);
			if (set < 0)
				fail_msg("%s: not left running", what);
			struct backend_timing tl = { 0 };
			RC_OK(cuda_dev_finish(cd, set, &tl, err, sizeof(err)), err);
			if (!tl.tile_out)
				fail_msg("%s: D at +%d not copied out by the kernel", what, at ? 2 : 0);
			if (memcmp(d, ref, db) != 0)
				fail_msg("%s: D at +%d not equal to the waited result", what, at ? 2 : 0);
			char lone[200];
			snprintf(lone, sizeof(lone), "  lone, D %s", at ? "2 bytes past 16" : "16-byte aligned");
			gate_check(&o, d, lone);
		}
		/* Lone with D at an odd address: no tile out, D by DMA. */
		memset(d1, 0xff, db);
		cuda_dev_lone_begin(cd);
		gate_launch(cd, st, pk, &o, b, d1, what);
		const int set1 = cuda_dev_lone_end(cd);
		struct backend_timing t1 = { .tile_out = true };
		if (set1 >= 0)
			RC_OK(cuda_dev_finish(cd, set1, &t1, err, sizeof(err)), err);
		else
			cuda_dev_timing(cd, &t1);
		if (t1.tile_out)
			fail_msg("%s: D at an odd address copied out by the kernel", what);
		if (memcmp(d1, ref, db) != 0)
			fail_msg("%s: D at an odd address not equal to the waited result", what);
		/* Lone with D on the heap: not mapped, no tile out. */
		memset(o.d, 0xff, db);
		cuda_dev_lone_begin(cd);
		gate_launch(cd, st, pk, &o, b, o.d, what);
		if (cuda_dev_lone_end(cd) >= 0)
			fail_msg("%s: D on the heap left running", what);
		struct backend_timing th = { .tile_out = true };
		cuda_dev_timing(cd, &th);
		if (th.tile_out)
			fail_msg("%s: D on the heap copied out by the kernel", what);
		if (memcmp(o.d, ref, db) != 0)
			fail_msg("%s: D on the heap not equal to the waited result", what);
		free(ref);
		wg_region_free(cd, rg, len);
		wg_request_free(&o);
		p->weight_free(cd, st, pk);
		ops_free(&w);
	}
	wg_close(cd, st);
}

/* ---- answers in pinned frames (cuda.pinned_answers_mb) ---- */

/* A frame from the device's arena with D's place `at` bytes in, as the
 * daemon lays an answer out (answer.c): NULL when the arena has no room. */
static unsigned char *pinned_frame(void *d, size_t dbytes, size_t at)
{
	unsigned char *f = backend_cuda.frame_alloc(d, at + dbytes + 1024, at);
	if (f) {
		if (!frame_arena_owns(f))
			fail_msg("frame_alloc gave memory outside the arena");
		if ((uintptr_t)(f + at) % FRAME_ARENA_ALIGN)
			fail_msg("D's place in a pinned frame is not aligned: %p", (void *)(f + at));
		memset(f + at, 0xff, dbytes); /* poison, as ops_make does */
	}
	return f;
}

/* A device opened with an arena of answer frames (1 MiB, so that it runs
 * out): a single GEMM's D and a batch's parts land in pinned frames, by DMA
 * and by the batch's copy kernel, equal to the staged results bit for bit
 * and right against the float64 reference; a batch with one part on the
 * heap goes through the staging pool and is right too; a full arena says
 * NULL at once (the daemon then mallocs); frames outlive the device. */
static void test_pooled_answers(void **state)
{
	(void)state;
	char err[512] = "";
	void *pd = NULL;
	struct backend_config cfg = { TEST_BASE_CFG,
				      .cuda_pinned_answer_bytes = 1u << 20 };
	RC_OK(backend_cuda.open(dev_index, &cfg, &pd, err, sizeof(err)), err);
	if (backend_cuda.frame_alloc(dev, 4096, 40))
		fail_msg("a device opened without cuda.pinned_answers_mb carved a frame");
	const size_t at = 37; /* D's offset in a frame: any, as the layout falls */

	/* One GEMM with its own A, D into a pinned frame (one DMA). */
	const uint32_t m = 1000, n = 33, k = 516;
	struct operands o;
	ops_make(&o, MFMA_DT_F16, MFMA_DT_F32, true, m, n, k, 1.0f, 0.5f);
	const size_t db = (size_t)m * n * 4;
	struct backend_timing ts = { 0 }, tp = { 0 };
	RC_OK(backend_cuda.gemm(pd, &o.g, NULL, &ts, err, sizeof(err)), err); /* staged, heap D */
	unsigned char *f = pinned_frame(pd, db, at);
	assert_non_null(f);
	struct mfma_gemm g = o.g;
	g.d = f + at;
	RC_OK(backend_cuda.gemm(pd, &g, NULL, &tp, err, sizeof(err)), err);
	assert_memory_equal(f + at, o.d, db);
	o.g.d = f + at;
	double rel = rel_error(&o, NULL, m);
	o.g.d = o.d;
	printf("  pinned answer f16 2:4 %ux%ux%u: rel %.3g, equal to the staged D; d2h %.1f us "
	       "(staged %.1f us)\n",
	       m, n, k, rel, tp.d2h_ns / 1e3, ts.d2h_ns / 1e3);
	checks++;
	if (!(rel <= nvt_tolerance(MFMA_DT_F32)))
		fail_msg("pinned single answer: relative error %g", rel);
	frame_arena_free(f);
	ops_free(&o);

	/* A batch on a resident weight, every part's D in a pinned frame:
	 * the split kernel writes them across the bus. */
	const uint32_t bm = 2048, bk = 1024, ns[4] = { 8, 8, 5, 8 };
	struct operands w0, r[4];
	ops_make(&w0, MFMA_DT_F16, MFMA_DT_F16, true, bm, 1, bk, 1.0f, 0.0f);
	void *w = load_f16_weight(pd, &w0, true, bm, bk);
	struct mfma_gemm_part parts[4];
	for (int i = 0; i < 4; i++)
		ops_make(&r[i], MFMA_DT_F16, MFMA_DT_F16, false, bm, ns[i], bk, 1.0f, 0.0f);
	struct mfma_gemm bg = join_parts(r, parts, 4, true);
	struct backend_timing bs = { 0 }, bp = { 0 };
	RC_OK(backend_cuda.gemm(pd, &bg, w, &bs, err, sizeof(err)), err); /* staged: r[i].d */
	unsigned char *pf[4];
	for (int round = 0; round < 2; round++) {
		/* Round 0: all four pinned; round 1: part 2 on the heap, so
		 * the whole batch goes through the staging pool. */
		for (int i = 0; i < 4; i++) {
			size_t pb = (size_t)bm * ns[i] * 2;
			pf[i] = round == 1 && i == 2 ? malloc(at + pb) : pinned_frame(pd, pb, at);
			assert_non_null(pf[i]);
			memset(pf[i] + at, 0xff, pb);
			parts[i].d = pf[i] + at;
		}
		RC_OK(backend_cuda.gemm(pd, &bg, w, &bp, err, sizeof(err)), err);
		for (int i = 0; i < 4; i++) {
			size_t pb = (size_t)bm * ns[i] * 2;
			assert_memory_equal(pf[i] + at, r[i].d, pb);
			r[i].g.a = w0.a;
			r[i].g.a_meta = w0.meta;
			r[i].g.a_sparse = true;
			r[i].g.d = pf[i] + at;
			double re = rel_error(&r[i], NULL, bm);
			r[i].g.d = r[i].d;
			r[i].g.a = NULL;
			r[i].g.a_meta = NULL;
			checks++;
			if (!(re <= nvt_tolerance(MFMA_DT_F16)))
				fail_msg("pinned batch part %d (round %d): relative error %g", i, round, re);
			printf("  pinned batch %s part %d (N=%u of %u) %-24s rel %.3g\n",
			       round ? "(one part on the heap)" : "(all pinned)", i, ns[i], bg.n,
			       bp.variant ? bp.variant : "?", re);
			frame_arena_free(pf[i]);
		}
		printf("  pinned batch round %d: d2h %.1f us (staged %.1f us)\n", round, bp.d2h_ns / 1e3,
		       bs.d2h_ns / 1e3);
	}
	for (int i = 0; i < 4; i++)
		ops_free(&r[i]);
	backend_cuda.weight_free(pd, w);
	ops_free(&w0);

	/* Exhaustion: frames of 132 KiB until the 1 MiB arena says no, at
	 * once; a D larger than the arena never fits; one freed frame makes
	 * room again. */
	unsigned char *held[16];
	int nheld = 0;
	uint64_t t0 = mfma_clock_ns();
	while (nheld < 16 && (held[nheld] = pinned_frame(pd, db, at)) != NULL)
		nheld++;
	uint64_t waited = mfma_clock_ns() - t0;
	printf("  pinned arena of 1 MiB: %d frames of %zu bytes, then NULL (%.1f us for all)\n", nheld,
	       db + at + 1024, waited / 1e3);
	if (nheld < 6 || nheld == 16)
		fail_msg("a 1 MiB arena held %d frames of %zu bytes", nheld, db);
	assert_null(backend_cuda.frame_alloc(pd, 2u << 20, at));
	frame_arena_free(held[--nheld]);
	assert_non_null(held[nheld] = pinned_frame(pd, db, at));
	nheld++;

	/* The device closes with frames out: they stay readable and
	 * writable, and the arena goes with the last one. */
	struct operands z;
	ops_make(&z, MFMA_DT_F16, MFMA_DT_F32, false, 300, 16, 256, 1.0f, 0.0f);
	g = z.g;
	g.d = held[0] + at;
	RC_OK(backend_cuda.gemm(pd, &g, NULL, NULL, err, sizeof(err)), err);
	backend_cuda.close(pd);
	z.g.d = held[0] + at;
	double rz = rel_error(&z, NULL, 300);
	z.g.d = z.d;
	checks++;
	if (!(rz <= nvt_tolerance(MFMA_DT_F32)))
		fail_msg("a pinned answer read after the device closed: relative error %g", rz);
	for (int i = 0; i < nheld; i++) {
		memset(held[i], 0x5a, 4096);
		frame_arena_free(held[i]);
	}
	if (frame_arena_owns(held[0]))
		fail_msg("the arena outlived its last frame");
	printf("  device closed with %d pinned frames out: still valid, arena gone with the last\n",
	       nheld);
	ops_free(&z);
}

static void test_other_devices(void **state)
{
	(void)state;
	const char *all = getenv("MFMA_TEST_ALL_DEVICES");
	if (!all || strcmp(all, "1") != 0 || ndev < 2) {
		printf("  (one device checked; MFMA_TEST_ALL_DEVICES=1 with several GPUs checks all)\n");
		return;
	}
	void *keep = dev;
	for (int i = 0; i < ndev; i++) {
		char err[512];
		void *d = NULL;
		if (backend_cuda.open(i, NULL, &d, err, sizeof(err)) != 0)
			fail_msg("open(%d): %s", i, err);
		dev = d;
		run_case(MFMA_DT_F16, MFMA_DT_F32, true, 300, 16, 1024, 1.0f, 0.0f, 0);
		run_case(MFMA_DT_I8, MFMA_DT_I32, false, 300, 100, 1000, 1.0f, 1.0f, 0);
		backend_cuda.close(d);
	}
	dev = keep;
}

/* The device reopened with cfg (what: its settings, for the messages):
 * the batched cases (staged, registered, pairs left running) as with the
 * defaults; then NB batches in a row, every part's B its own (so that a
 * gather that overwrote a set still in use, or a GEMM that did not wait
 * for its gather, shows as a wrong D), each launched while the one before
 * is left running, as the daemon's worker does, every part's D against
 * the float64 reference; then the defaults again. */
static void chained_batches(void **state, struct backend_config cfg, enum backend_host_use use,
			    const char *what)
{
	reopen(&cfg);
	test_batched_launch(state);
	enum { NB = 8, NP = 3 };
	const uint32_t m = quick ? 260 : 1536, k = quick ? 256 : 2048;
	const uint32_t ns[NP] = { 5, 16, 3 };
	const enum mfma_dtype in = MFMA_DT_F16, out = MFMA_DT_F32;
	struct operands o, r[NB][NP];
	ops_make(&o, in, out, true, m, 1, k, 1.0f, 0.0f);
	void *w = load_f16_weight(dev, &o, true, m, k);
	size_t len = 4096;
	for (int b = 0; b < NB; b++)
		for (int i = 0; i < NP; i++) {
			/* Every other batch with C (a batch's scalars are its
			 * parts'). */
			ops_make(&r[b][i], in, out, false, m, ns[i] + (uint32_t)b % 3, k, 0.75f,
				 b % 2 ? 0.0f : 0.5f);
			len += (size_t)k * r[b][i].g.n * 2 + 2 * (size_t)m * r[b][i].g.n * 4 + 64;
		}
	struct test_region rg;
	region_make_as(&rg, "test-copy-stream", len, use);
	char err[512] = "";
	/* Every operand moved into the region; the operands' GEMMs point
	 * there. */
	unsigned char *at = rg.p + 16;
	struct mfma_gemm_part parts[NB][NP];
	struct mfma_gemm g[NB];
	for (int b = 0; b < NB; b++) {
		for (int i = 0; i < NP; i++) {
			struct operands *x = &r[b][i];
			size_t bb = (size_t)k * x->g.n * 2, db = (size_t)m * x->g.n * 4;
			x->g.b = region_put(&at, x->b, bb);
			if (x->c)
				x->g.c = region_put(&at, x->c, db);
			x->g.d = region_put(&at, NULL, db);
		}
		g[b] = join_parts(r[b], parts[b], NP, true);
	}
	assert_true(at <= rg.p + len);
	/* As the daemon's worker runs them: each batch started behind the
	 * BACKEND_MAX_LEFT - 1 before it, still left running, and the oldest
	 * ended after it (the two sets of batch buffers are then each in use
	 * by a batch left running when the next batch fills them). */
	enum { BEHIND = BACKEND_MAX_LEFT - 1 };
	struct backend_timing t[NB];
	int left = 0;
	for (int b = 0; b < NB; b++) {
		t[b] = (struct backend_timing){ .may_leave = true };
		RC_OK(backend_cuda.gemm(dev, &g[b], w, &t[b], err, sizeof(err)), err);
		if (b >= BEHIND && t[b - BEHIND].left)
			RC_OK(backend_cuda.gemm_end(dev, &t[b - BEHIND], err, sizeof(err)), err);
		left += t[b].left != 0;
	}
	for (int b = NB - BEHIND; b < NB; b++)
		if (t[b].left)
			RC_OK(backend_cuda.gemm_end(dev, &t[b], err, sizeof(err)), err);
	printf("  %s: %d of %d batches left running, %d behind each\n", what, left, NB, BEHIND);
	for (int b = 0; b < NB; b++)
		for (int i = 0; i < NP; i++) {
			struct operands *x = &r[b][i];
			x->g.a_sparse = true;
			x->g.a = o.a;
			x->g.a_meta = o.meta;
			double rel = rel_error(x, NULL, m);
			checks++;
			if (!(rel <= nvt_tolerance(out)))
				fail_msg("%s: batch %d part %d: relative error %g", what, b, i, rel);
			x->g.a = NULL;
			x->g.a_meta = NULL;
			ops_free(x);
		}
	region_free(&rg);
	backend_cuda.weight_free(dev, w);
	ops_free(&o);
	assert_true(left > 0);
}

/* cuda.copy_stream: a batch whose B and C lie in mapped memory is gathered
 * on a stream of its own into the other of two sets of buffers, beside the
 * previous batch's GEMM and copy out (with cuda.out_stream, the daemon's
 * default and TEST_BASE_CFG's, its copy out on a third stream). */
static void test_copy_stream(void **state)
{
	chained_batches(state,
			(struct backend_config){ TEST_BASE_CFG,
						 .cuda_copy_stream = true },
			BACKEND_HOST_REGION, "copy stream");
}

/* cuda.dma_parts_kb: the mapped parts move by the copy engines (one
 * batched copy per operand), every part (no bound), on the device's stream
 * and on the copy stream; then a bound that B's parts (k x n f16) pass and
 * D's (m x n f32, larger) do not, so that one batch takes both paths. */
static void test_dma_copies(void **state)
{
	if (!cuda_batch_dma_usable()) {
		printf("  dma copies: the driver has no cuMemcpyBatchAsync; the copy kernel alone\n");
		skip();
	}
	const struct backend_config cfg = { TEST_BASE_CFG,
					    .cuda_dma_part_bytes = UINT64_MAX };
	chained_batches(state, cfg, BACKEND_HOST_REGION, "dma copies");
	struct backend_config both = cfg;
	both.cuda_copy_stream = true;
	chained_batches(state, both, BACKEND_HOST_REGION, "dma copies on the copy stream");
	struct backend_config mixed = cfg;
	mixed.cuda_dma_part_bytes = quick ? 256 * 2 * 18 : 2048 * 2 * 18;
	chained_batches(state, mixed, BACKEND_HOST_REGION, "dma copies of B, the kernel's of D");
}

/* cuda.region_copies (the daemon's default): chained batches with their
 * parts in a client's region (moved by the copy engines, the copy in on
 * the copy stream), then in the same memory registered as the daemon's
 * frames (the copy kernel on the device's stream, the two sets of buffers
 * still taken in turn), every D against float64.  Which path a batch took
 * is not observable here: this checks that both give right answers. */
static void test_region_copies(void **state)
{
	if (!cuda_batch_dma_usable()) {
		printf("  region copies: the driver has no cuMemcpyBatchAsync; the copy kernel "
		       "alone\n");
		skip();
	}
	const struct backend_config cfg = { TEST_BASE_CFG,
					    .cuda_region_copies = true };
	chained_batches(state, cfg, BACKEND_HOST_REGION, "region copies");
	chained_batches(state, cfg, BACKEND_HOST_FRAMES, "region copies on, parts in frames");
}

/* cuda.out_stream off: with the copy stream (region copies, then
 * cuda.copy_stream) a batch's D is split and copied out on the device's
 * stream again, between one GEMM and the next; every D against float64.
 * (On, the tests above: the parts in a region have D copied out on the
 * out stream after a gather on the copy stream, those in frames after a
 * gather on the device's stream, which waits for the set's last copy out
 * before it fills the set again.) */
static void test_out_stream_off(void **state)
{
	struct backend_config cfg = { TEST_BASE_CFG };
	cfg.cuda_out_stream = false;
	cfg.cuda_region_copies = cuda_batch_dma_usable();
	cfg.cuda_copy_stream = !cfg.cuda_region_copies;
	chained_batches(state, cfg, BACKEND_HOST_REGION, "out stream off");
	chained_batches(state, cfg, BACKEND_HOST_FRAMES, "out stream off, parts in frames");
}

int main(void)
{
	char err[512] = "";
	struct backend_config cfg = { TEST_BASE_CFG };
	ndev = backend_cuda.probe(&cfg, err, sizeof(err));
	if (ndev < 0) {
		fprintf(stderr, "cuda probe failed: %s\n", err);
		return 1;
	}
	if (ndev == 0) {
		printf("SKIP: no CUDA device (%s)\n", err[0] ? err : "none found");
		return 77;
	}
	int index = 0;
	const char *q = getenv("MFMA_TEST_QUICK");
	quick = q ? atoi(q) : 0;
	const char *env = getenv("MFMA_TEST_DEVICE");
	if (env)
		index = atoi(env);
	dev_index = index;
	for (int i = 0; i < ndev; i++) {
		struct backend_device_info info;
		if (backend_cuda.describe(i, &info) == 0)
			printf("device %d: %s %s, %.1f GiB, variants %s\n", i, info.name, info.arch,
			       info.mem_total / 1073741824.0, info.variants);
	}
	if (backend_cuda.open(index, &cfg, &dev, err, sizeof(err)) != 0) {
		fprintf(stderr, "cuda open(%d) failed: %s\n", index, err);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_shapes),
		cmocka_unit_test(test_tiles_and_split_k),
		cmocka_unit_test(test_resident_weight),
		cmocka_unit_test(test_batched_launch),
		cmocka_unit_test_teardown(test_copy_stream, reopen_base),
		cmocka_unit_test_teardown(test_dma_copies, reopen_base),
		cmocka_unit_test_teardown(test_region_copies, reopen_base),
		cmocka_unit_test_teardown(test_out_stream_off, reopen_base),
		cmocka_unit_test(test_gate),
		cmocka_unit_test_teardown(test_gate_setup_fails, restore_driver),
		cmocka_unit_test(test_tile_out),
		cmocka_unit_test(test_dependent_launch),
		cmocka_unit_test(test_repeatable),
		cmocka_unit_test(test_registered_host),
		cmocka_unit_test(test_pooled_answers),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_large),
		cmocka_unit_test(test_providers),
		cmocka_unit_test(test_grid_rows),
		cmocka_unit_test(test_choice),
		cmocka_unit_test(test_warmup),
		cmocka_unit_test(test_cusparselt_keeps_warmed_plans),
		cmocka_unit_test(test_cublaslt_keeps_warmed_plans),
		cmocka_unit_test(test_cublaslt_times_warmed_plans),
		cmocka_unit_test(test_library_graph_replay),
		cmocka_unit_test(test_policy_and_cache),
		cmocka_unit_test(test_served_trial),
		cmocka_unit_test(test_served_trial_refused_width),
		cmocka_unit_test(test_served_trial_batches),
		cmocka_unit_test(test_lone_left_running),
		cmocka_unit_test(test_other_devices),
	};
	/* MFMA_TEST_FILTER: only the tests whose names match (cmocka's
	 * pattern: * and ? wildcards). */
	const char *filter = getenv("MFMA_TEST_FILTER");
	if (filter && filter[0])
		cmocka_set_test_filter(filter);
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	printf("%d GEMMs checked against the float64 reference\n", checks);
	backend_cuda.close(dev);
	return rc;
}
