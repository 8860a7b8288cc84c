/* cuBLASLt as a provider of the CUDA backend (cuda_provider.h): dense f16
 * and bf16 GEMMs with f32 accumulation, f32 or same-type output.
 *
 * The library is opened with dlopen (libcublasLt.so.13, .12, then the
 * plain name), so mfmad neither links it nor needs its headers: the few
 * types, enums and prototypes used are declared below with the values of
 * cublasLt.h / cublas_api.h / library_types.h (CUDA 12 and 13 agree on
 * them).  Without the library the provider is not usable and the device
 * runs on our kernels alone.
 *
 * cuBLASLt is column-major; our operands are row-major.  A row-major
 * X (r x c) is the column-major X^T, so D = A.B is computed as
 * D^T (n x m) = B^T (n x k) . A^T (k x m) with no transposition: the
 * library's A is our B, its B is our A.  i8 is not offered: cuBLASLt's
 * integer kernels want the "TN" layout, which would need B transposed on
 * the device first.
 *
 * A 2:4 A runs here only as a resident weight, expanded to dense on the
 * host once at load (a per-request expansion would cost more than the
 * GEMM saves).  The descriptors and the heuristic's algorithm of each
 * shape are kept (plan_table): a resident weight's with the weight, those
 * made while it is warmed at load for good, and the rest in a cache of the
 * device's, so a repeated shape pays neither.  A plan made while a weight
 * is warmed runs the heuristic's first LT_TRIED algorithms and keeps the
 * fastest, as cuSPARSELt's plan keeps its search's; one made on the
 * serving path keeps the heuristic's first, which costs a request no
 * timing. */
#include "mfmad_build.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_provider.h"
#include "plan_table.h"
#include "sparse24.h"

/* ---- The part of the cuBLASLt API used ---- */

typedef int lt_status; /* cublasStatus_t; 0 is success */
typedef void *lt_handle, *lt_desc, *lt_layout, *lt_pref;
typedef struct {
	uint64_t data[8];
} lt_algo;
typedef struct {
	lt_algo algo;
	size_t workspace_size;
	lt_status state;
	float waves;
	int reserved[4];
} lt_heuristic;

enum {
	LT_R_32F = 0,  /* CUDA_R_32F */
	LT_R_16F = 2,  /* CUDA_R_16F */
	LT_R_16BF = 14 /* CUDA_R_16BF */
};
enum { LT_COMPUTE_32F = 68 };                                 /* CUBLAS_COMPUTE_32F */
enum { LT_OP_N = 0 };                                         /* CUBLAS_OP_N */
enum { LT_DESC_TRANSA = 3, LT_DESC_TRANSB = 4 };              /* CUBLASLT_MATMUL_DESC_TRANS* */
enum { LT_PREF_MAX_WORKSPACE_BYTES = 1 };                     /* CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES */

static struct {
	lt_status (*create)(lt_handle *h);
	lt_status (*destroy)(lt_handle h);
	size_t (*get_version)(void);
	lt_status (*desc_create)(lt_desc *d, int compute, int scale);
	lt_status (*desc_destroy)(lt_desc d);
	lt_status (*desc_set)(lt_desc d, int attr, const void *buf, size_t size);
	lt_status (*layout_create)(lt_layout *l, int type, uint64_t rows, uint64_t cols, int64_t ld);
	lt_status (*layout_destroy)(lt_layout l);
	lt_status (*pref_create)(lt_pref *p);
	lt_status (*pref_destroy)(lt_pref p);
	lt_status (*pref_set)(lt_pref p, int attr, const void *buf, size_t size);
	lt_status (*heuristic)(lt_handle h, lt_desc d, lt_layout a, lt_layout b, lt_layout c,
			       lt_layout dl, lt_pref p, int requested, lt_heuristic *results,
			       int *returned);
	lt_status (*matmul)(lt_handle h, lt_desc d, const void *alpha, const void *a, lt_layout al,
			    const void *b, lt_layout bl, const void *beta, const void *c,
			    lt_layout cl, void *dd, lt_layout dl, const lt_algo *algo, void *ws,
			    size_t ws_bytes, CUstream stream);
} lt;

static pthread_once_t lt_once = PTHREAD_ONCE_INIT;
static int lt_rc;
static char lt_err[256], lt_path[256];

static void lt_open(void)
{
	static const char *const names[] = { "libcublasLt.so.13", "libcublasLt.so.12",
					     "libcublasLt.so" };
	const struct cuda_lib_sym syms[] = {
		{ "cublasLtCreate", &lt.create },
		{ "cublasLtDestroy", &lt.destroy },
		{ "cublasLtGetVersion", &lt.get_version },
		{ "cublasLtMatmulDescCreate", &lt.desc_create },
		{ "cublasLtMatmulDescDestroy", &lt.desc_destroy },
		{ "cublasLtMatmulDescSetAttribute", &lt.desc_set },
		{ "cublasLtMatrixLayoutCreate", &lt.layout_create },
		{ "cublasLtMatrixLayoutDestroy", &lt.layout_destroy },
		{ "cublasLtMatmulPreferenceCreate", &lt.pref_create },
		{ "cublasLtMatmulPreferenceDestroy", &lt.pref_destroy },
		{ "cublasLtMatmulPreferenceSetAttribute", &lt.pref_set },
		{ "cublasLtMatmulAlgoGetHeuristic", &lt.heuristic },
		{ "cublasLtMatmul", &lt.matmul },
	};
	lt_rc = cuda_lib_open(names, sizeof(names) / sizeof(names[0]), NULL, syms,
			      sizeof(syms) / sizeof(syms[0]), lt_path, sizeof(lt_path), lt_err,
			      sizeof(lt_err));
}

static int lt_loaded(void)
{
	pthread_once(&lt_once, lt_open);
	return lt_rc == 0;
}

/* ---- Per device ---- */

/* The heuristic's algorithms a plan made while a weight is warmed times
 * (plan_time), and the runs of each: cuBLASLt's first choice is not
 * always its fastest (at 8192^3 on the H200 it ran at 643 TF where
 * cublasGemmEx ran at 738; bench/RESULTS.md). */
#define LT_TRIED 8
#define LT_TIMED_RUNS 4

/* What one shape needs: descriptors and an algorithm (the heuristic's
 * first, or the fastest of its first LT_TRIED when timed); made on its
 * own, held by a plan_table slot, freed when replaced. */
struct lt_plan {
	uint32_t m, n, k;
	enum mfma_dtype in, out;
	lt_desc desc;
	lt_layout la, lb, lcd;
	lt_algo algo;
	size_t ws_bytes;
	/* The heuristic's usable algorithms, its order; when the plan first
	 * runs while its weight is warmed they are timed, and the fastest is
	 * left alone (ntried 1: nothing more to time). */
	lt_heuristic tried[LT_TRIED];
	int ntried;
	struct cuda_graph graph; /* the launch, replayed (cuda_dev_graph_run) */
};

/* Workspace offered to the heuristic: what NVIDIA recommends on Hopper. */
#define LT_MAX_WORKSPACE ((size_t)32 << 20)

struct lt_state {
	lt_handle h;
	lt_pref pref;
	struct cuda_buf ws;
	/* The plans of GEMMs on no resident weight (struct lt_plan), none
	 * kept: the oldest replaced. */
	struct plan_table plans;
};

/* A resident weight: A dense on the device, m x k row-major, and the
 * plans of its shapes (struct lt_plan), those made while it was warmed
 * at load kept.  Per weight, so that a second weight's warming does not
 * replace the first's plans (a weight is warmed at up to 2 x
 * CUDA_WARM_MAX_WIDTHS shapes). */
struct lt_weight {
	CUdeviceptr a;
	struct plan_table plans;
};

static int lt_type(enum mfma_dtype t)
{
	switch (t) {
	case MFMA_DT_F16: return LT_R_16F;
	case MFMA_DT_BF16: return LT_R_16BF;
	case MFMA_DT_F32: return LT_R_32F;
	default: return -1;
	}
}

static int lt_usable(int cc)
{
	return cc >= 80 && lt_loaded();
}

static void lt_describe(int cc, struct backend_device_info *info)
{
	(void)cc;
	info->dense_dtypes |= BACKEND_DTYPE_BIT(MFMA_DT_F16) | BACKEND_DTYPE_BIT(MFMA_DT_BF16);
	if (backend_list_add(info->variants, sizeof(info->variants), "cublaslt.f16.dense"))
		backend_list_add(info->variants, sizeof(info->variants), "cublaslt.bf16.dense");
}

/* Destroys what exists of a plan (each part may be missing after a
 * failure half-way) and frees it. */
static void plan_free(struct lt_plan *p)
{
	if (!p)
		return;
	cuda_graph_free(&p->graph);
	if (p->la)
		lt.layout_destroy(p->la);
	if (p->lb)
		lt.layout_destroy(p->lb);
	if (p->lcd)
		lt.layout_destroy(p->lcd);
	if (p->desc)
		lt.desc_destroy(p->desc);
	free(p);
}

static void plans_free(struct plan_table *t)
{
	for (size_t i = 0; i < PLAN_TABLE_SLOTS; i++)
		plan_free(t->plan[i]);
	plan_table_init(t, t->kept_max);
}

static void lt_detach(struct cuda_dev *dev, void *state)
{
	struct lt_state *s = state;
	(void)dev;
	if (!s)
		return;
	plans_free(&s->plans);
	if (s->pref)
		lt.pref_destroy(s->pref);
	if (s->h)
		lt.destroy(s->h);
	cuda_buf_free(&s->ws);
	free(s);
}

static int lt_attach(struct cuda_dev *dev, void **state, char *err, size_t errlen)
{
	(void)dev;
	struct lt_state *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	plan_table_init(&s->plans, 0);
	/* A library that cannot start leaves the provider without a handle,
	 * so that it supports nothing, rather than failing the device. */
	size_t max_ws = LT_MAX_WORKSPACE;
	if (lt.create(&s->h) != 0) {
		s->h = NULL;
	} else if (lt.pref_create(&s->pref) != 0 ||
		   lt.pref_set(s->pref, LT_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)) != 0) {
		if (s->pref)
			lt.pref_destroy(s->pref);
		s->pref = NULL;
		lt.destroy(s->h);
		s->h = NULL;
	}
	*state = s;
	return 0;
}

static int lt_supports(const struct cuda_dev *dev, void *state, const struct cuda_shape *s,
		       char *err, size_t errlen)
{
	(void)dev;
	const struct lt_state *st = state;
	if (!st || !st->h) {
		snprintf(err, errlen, "cuda: cuBLASLt (%s) did not start on this device", lt_path);
		return -ENOTSUP;
	}
	if (s->in != MFMA_DT_F16 && s->in != MFMA_DT_BF16) {
		snprintf(err, errlen, "cuda: cuBLASLt runs f16 and bf16, not in_dtype=%s",
			 mfma_dtype_name(s->in));
		return -ENOTSUP;
	}
	if (s->out != MFMA_DT_NONE && !mfma_out_dtype_ok(s->in, s->out)) {
		snprintf(err, errlen, "cuda: out_dtype=%s is not produced from in_dtype=%s",
			 mfma_dtype_name(s->out), mfma_dtype_name(s->in));
		return -EINVAL;
	}
	if (s->sparse && !s->resident) {
		snprintf(err, errlen,
			 "cuda: cuBLASLt runs a 2:4 A only as a resident weight (expanded once at load)");
		return -ENOTSUP;
	}
	return 0;
}

/* The leading dimension of B on the device, in elements: rows padded to
 * 16 bytes, which cuBLASLt's fastest kernels want. */
static size_t lt_ldb(uint32_t n)
{
	return ((size_t)n + 7) / 8 * 8;
}

/* The plan of g's shape in t (a weight's or the device's), made
 * (descriptors and heuristic) on first use, kept when the device is
 * warming a weight, and counted on the device (cuda_dev_count_plan). */
static int plan_get(struct cuda_dev *dev, struct lt_state *s, struct plan_table *t,
		    const struct mfma_gemm *g, struct lt_plan **out, char *err, size_t errlen)
{
	for (size_t i = 0; i < PLAN_TABLE_SLOTS; i++) {
		struct lt_plan *p = t->plan[i];
		if (p && p->m == g->m && p->n == g->n && p->k == g->k &&
		    p->in == g->in_dtype && p->out == g->out_dtype) {
			*out = p;
			return 0;
		}
	}
	struct lt_plan *p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	const int in = lt_type(g->in_dtype), o = lt_type(g->out_dtype);
	const int32_t op = LT_OP_N;
	lt_status st;
	/* The library's A is our B (n x k column-major, ld = our row pitch),
	 * its B our A (k x m column-major), its C and D ours (n x m). */
	if (lt.desc_create(&p->desc, LT_COMPUTE_32F, LT_R_32F) != 0 ||
	    lt.desc_set(p->desc, LT_DESC_TRANSA, &op, sizeof(op)) != 0 ||
	    lt.desc_set(p->desc, LT_DESC_TRANSB, &op, sizeof(op)) != 0 ||
	    lt.layout_create(&p->la, in, g->n, g->k, (int64_t)lt_ldb(g->n)) != 0 ||
	    lt.layout_create(&p->lb, in, g->k, g->m, g->k) != 0 ||
	    lt.layout_create(&p->lcd, o, g->n, g->m, g->n) != 0) {
		snprintf(err, errlen, "cuda: cuBLASLt refused the descriptors of %ux%ux%u %s->%s",
			 g->m, g->n, g->k, mfma_dtype_name(g->in_dtype), mfma_dtype_name(g->out_dtype));
		plan_free(p);
		return -ENOTSUP;
	}
	/* Only a plan made while warming is timed: the serving path asks
	 * for the first alone. */
	lt_heuristic h[LT_TRIED];
	int got = 0;
	memset(h, 0, sizeof(h));
	st = lt.heuristic(s->h, p->desc, p->la, p->lb, p->lcd, p->lcd, s->pref,
			  cuda_dev_warming(dev) ? LT_TRIED : 1, h, &got);
	for (int i = 0; st == 0 && i < got && i < LT_TRIED; i++)
		if (h[i].state == 0)
			p->tried[p->ntried++] = h[i];
	if (st != 0 || p->ntried < 1) {
		/* The library's status, or the first algorithm's. */
		snprintf(err, errlen, "cuda: cuBLASLt has no algorithm for %ux%ux%u %s->%s (%d)", g->m,
			 g->n, g->k, mfma_dtype_name(g->in_dtype), mfma_dtype_name(g->out_dtype),
			 st != 0 ? st : h[0].state);
		plan_free(p);
		return -ENOTSUP;
	}
	p->m = g->m;
	p->n = g->n;
	p->k = g->k;
	p->in = g->in_dtype;
	p->out = g->out_dtype;
	p->algo = p->tried[0].algo;
	p->ws_bytes = p->tried[0].workspace_size;
	plan_free(plan_table_put(t, p, cuda_dev_warming(dev)));
	cuda_dev_count_plan(dev);
	*out = p;
	return 0;
}

static void lt_weight_free(struct cuda_dev *dev, void *state, void *packed)
{
	struct lt_weight *w = packed;
	(void)dev;
	(void)state;
	if (!w)
		return;
	plans_free(&w->plans);
	if (w->a)
		nv_drv.cuMemFree(w->a);
	free(w);
}

static int lt_weight_pack(struct cuda_dev *dev, void *state, const struct mfma_weight_host *wh,
			  void **packed, uint64_t *dev_bytes, char *err, size_t errlen)
{
	(void)state;
	const size_t es = mfma_dtype_size(wh->dtype);
	const size_t bytes = (size_t)wh->m * wh->k * es;
	struct lt_weight *w = calloc(1, sizeof(*w));
	void *dense = NULL;
	int rc;
	if (!w) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	plan_table_init(&w->plans, PLAN_TABLE_KEPT_MAX);
	const void *src = wh->a;
	if (wh->sparse) {
		if (!(dense = malloc(bytes))) {
			rc = -ENOMEM;
			snprintf(err, errlen, "cuda: out of host memory expanding a %ux%u weight", wh->m,
				 wh->k);
			goto fail;
		}
		size_t bad_row = 0, bad_group = 0;
		if (sparse24_decompress(wh->a, wh->meta, wh->dtype, wh->m, wh->k, dense, &bad_row,
					&bad_group) < 0) {
			rc = -EINVAL;
			snprintf(err, errlen, "cuda: weight meta row %zu group %zu is no 2:4 pair",
				 bad_row, bad_group);
			goto fail;
		}
		src = dense;
	}
	CUresult r = nv_drv.cuMemAlloc(&w->a, bytes);
	if (r != CUDA_SUCCESS) {
		w->a = 0;
		rc = cuda_fail(r, err, errlen, "allocating the weight");
		goto fail;
	}
	if ((rc = cuda_dev_copy_in(dev, w->a, bytes, src, 1, bytes, err, errlen)) < 0)
		goto fail;
	/* The host copy must outlive the copy in, which reads it through
	 * the pinned pool: wait for it before freeing. */
	if (dense && (rc = cuda_dev_sync(dev, "copying the weight", err, errlen)) < 0)
		goto fail;
	free(dense);
	*packed = w;
	*dev_bytes = bytes;
	return 0;
fail:
	cuda_dev_drain(dev);
	free(dense);
	lt_weight_free(dev, state, w);
	return rc;
}

static const char *lt_variant(enum mfma_dtype in)
{
	return in == MFMA_DT_BF16 ? "cublaslt.bf16.dense" : "cublaslt.f16.dense";
}

/* One cublasLtMatmul: what cuda_dev_graph_run captures or enqueues. */
struct lt_call {
	const struct lt_state *s;
	const struct lt_plan *p;
	float alpha, beta;
	CUdeviceptr a, b, c, d;
};

static int lt_enqueue(void *arg, CUstream stream, char *err, size_t errlen)
{
	const struct lt_call *x = arg;
	const struct lt_plan *p = x->p;
	/* The library's A is our B, its B our A (plan_get). */
	lt_status st = lt.matmul(x->s->h, p->desc, &x->alpha, (const void *)(uintptr_t)x->b, p->la,
				 (const void *)(uintptr_t)x->a, p->lb, &x->beta,
				 (const void *)(uintptr_t)x->c, p->lcd, (void *)(uintptr_t)x->d, p->lcd,
				 &p->algo, (void *)(uintptr_t)x->s->ws.p, p->ws_bytes, stream);
	if (st != 0) {
		snprintf(err, errlen, "cuda: cublasLtMatmul %ux%ux%u failed (%d)", p->m, p->n, p->k, st);
		return -EIO;
	}
	return 0;
}

/* Times each of the heuristic's algorithms on x's operands (cuda_dev_time)
 * and keeps the fastest in p.  An algorithm that fails to run is passed
 * over; with none run, the first one's error.  x's workspace is
 * the device's, grown to the largest an algorithm asks; short of memory
 * for that, only the algorithms that fit the first's workspace are timed
 * (the launch needs no more than it did untimed).  The plan keeps the
 * one it runs alone, so it is not timed again. */
static int plan_time(struct cuda_dev *dev, struct lt_state *s, struct lt_plan *p,
		     struct lt_call *x, char *err, size_t errlen)
{
	size_t ws = 0;
	for (int i = 0; i < p->ntried; i++)
		if (p->tried[i].workspace_size > ws)
			ws = p->tried[i].workspace_size;
	/* A failed cuda_buf_need has freed the workspace: the first's again. */
	int rc = cuda_buf_need(&s->ws, ws, "cuBLASLt workspace", NULL, err, errlen);
	if (rc < 0 && (rc = cuda_buf_need(&s->ws, p->tried[0].workspace_size, "cuBLASLt workspace",
					  NULL, err, errlen)) < 0)
		return rc;
	int best = -1, first_rc = 0;
	uint64_t best_ns = UINT64_MAX;
	for (int i = 0; i < p->ntried; i++) {
		char why[256];
		uint64_t ns = 0;
		if (p->tried[i].workspace_size > s->ws.cap)
			continue;
		p->algo = p->tried[i].algo;
		p->ws_bytes = p->tried[i].workspace_size;
		rc = cuda_dev_time(dev, lt_enqueue, x, LT_TIMED_RUNS, &ns, first_rc ? why : err,
				   first_rc ? sizeof(why) : errlen);
		if (rc < 0 && !first_rc)
			first_rc = rc;
		if (rc == 0 && ns < best_ns) {
			best = i;
			best_ns = ns;
		}
	}
	p->tried[0] = p->tried[best < 0 ? 0 : best];
	p->ntried = 1;
	p->algo = p->tried[0].algo;
	p->ws_bytes = p->tried[0].workspace_size;
	cuda_graph_free(&p->graph);
	if (best < 0)
		return first_rc;
	err[0] = '\0';
	return 0;
}

static int lt_launch(struct cuda_dev *dev, void *state, const struct mfma_gemm *g, void *packed,
		     const char **variant, char *err, size_t errlen)
{
	struct lt_state *s = state;
	struct lt_weight *w = packed;
	const size_t es = mfma_dtype_size(g->in_dtype), os = mfma_dtype_size(g->out_dtype);
	const size_t ldb = lt_ldb(g->n), abytes = (size_t)g->m * g->k * es;
	const size_t dbytes = (size_t)g->m * g->n * os;
	struct lt_plan *p;
	int rc = plan_get(dev, s, w ? &w->plans : &s->plans, g, &p, err, errlen);
	if (rc < 0)
		return rc;
	struct cuda_buf *a = cuda_dev_scratch(dev, CUDA_SCRATCH_A);
	struct cuda_buf *b = cuda_dev_scratch(dev, CUDA_SCRATCH_B);
	struct cuda_buf *c = cuda_dev_scratch(dev, CUDA_SCRATCH_C);
	CUdeviceptr dp = 0;
	if ((!w && (rc = cuda_buf_need(a, abytes, "A", NULL, err, errlen)) < 0) ||
	    (rc = cuda_buf_need(b, (size_t)g->k * ldb * es, "B", NULL, err, errlen)) < 0 ||
	    (g->beta != 0.0f && (rc = cuda_buf_need(c, dbytes, "C", NULL, err, errlen)) < 0) ||
	    (rc = cuda_dev_out_buffer(dev, g->d, dbytes, &dp, err, errlen)) < 0 ||
	    (rc = cuda_buf_need(&s->ws, p->ws_bytes, "cuBLASLt workspace", NULL, err, errlen)) < 0)
		return rc;

	if ((rc = cuda_dev_mark(dev, CUDA_MARK_START, err, errlen)) < 0)
		return rc;
	if (!w && (rc = cuda_dev_copy_in(dev, a->p, abytes, g->a, 1, abytes, err, errlen)) < 0)
		return rc;
	if ((rc = cuda_dev_copy_in(dev, b->p, ldb * es, g->b, g->k, (size_t)g->n * es, err,
				   errlen)) < 0)
		return rc;
	if ((rc = cuda_dev_copy_in_end(dev, c->p, g->beta != 0.0f ? g->c : NULL, dbytes, err, errlen)) < 0)
		return rc;

	/* With beta = 0 the library does not read C: D stands in for it.
	 * From the plan's graph, as cuSPARSELt's (cuda_graph): the library's
	 * call costs the daemon's worker 20-60 us of host time. */
	struct lt_call x = { .s = s, .p = p, .alpha = g->alpha, .beta = g->beta,
			     .a = w ? w->a : a->p, .b = b->p, .c = g->beta != 0.0f ? c->p : dp,
			     .d = dp };
	uint32_t ab[2];
	memcpy(&ab[0], &x.alpha, sizeof(ab[0]));
	memcpy(&ab[1], &x.beta, sizeof(ab[1]));
	if (p->ntried > 1 && cuda_dev_warming(dev) &&
	    (rc = plan_time(dev, s, p, &x, err, errlen)) < 0)
		return rc;
	const uint64_t key[] = { x.a, x.b, x.c, x.d, s->ws.p, (uint64_t)ab[0] << 32 | ab[1] };
	if ((rc = cuda_dev_graph_run(dev, &p->graph, key, sizeof(key) / sizeof(key[0]), lt_enqueue, &x,
				     err, errlen)) < 0)
		return rc;
	if ((rc = cuda_dev_mark(dev, CUDA_MARK_KERNEL, err, errlen)) < 0)
		return rc;
	if ((rc = cuda_dev_copy_out(dev, g->d, dp, dbytes, err, errlen)) < 0)
		return rc;
	*variant = lt_variant(g->in_dtype);
	return 0;
}

static long lt_version(void *state)
{
	(void)state;
	return lt.get_version ? (long)lt.get_version() : 0;
}

static bool lt_planned(void *state, const struct mfma_gemm *g, void *packed)
{
	const struct lt_state *s = state;
	const struct lt_weight *w = packed;
	const struct plan_table *t = w ? &w->plans : s ? &s->plans : NULL;
	for (size_t i = 0; t && i < PLAN_TABLE_SLOTS; i++) {
		const struct lt_plan *p = t->plan[i];
		if (p && p->m == g->m && p->n == g->n && p->k == g->k && p->in == g->in_dtype &&
		    p->out == g->out_dtype)
			return true;
	}
	return false;
}

const struct cuda_provider cuda_provider_cublaslt = {
	.name = "cublaslt",
	.usable = lt_usable,
	.describe = lt_describe,
	.attach = lt_attach,
	.detach = lt_detach,
	.version = lt_version,
	.supports = lt_supports,
	.weight_pack = lt_weight_pack,
	.weight_free = lt_weight_free,
	.launch = lt_launch,
	.planned = lt_planned,
};
