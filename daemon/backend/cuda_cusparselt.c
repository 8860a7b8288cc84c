/* cuSPARSELt as a provider of the CUDA backend (cuda_provider.h): a 2:4
 * f16 or bf16 resident weight times a dense B, f32 accumulation.
 *
 * libcusparseLt.so.0 is opened with dlopen: first by its plain name (the
 * loader's path), else from MFMAD_CUSPARSELT, a file or the folder that
 * holds it (on a machine with PyTorch: the lib folder of the
 * nvidia.cusparselt package).  Its header is C++ and rarely installed, so
 * the few types used are declared here, with the values of cuSPARSELt 0.7
 * and later (checked with cusparseLtGetVersion when a device attaches).
 *
 * Only resident weights run here: cuSPARSELt wants its own compressed form
 * of A, made on the device from the dense matrix, and making it per request
 * would cost more than the GEMM (PyTorch's wrapper pays 0.4-0.9 ms per call
 * for that).  So weight_pack expands our canonical 2:4 weight on the host,
 * copies it in once, and compresses it there; a GEMM with a new N makes
 * the plan for it once (descriptors, plan, cusparseLtMatmulSearch, which
 * is worth up to 2x on skinny N) and keeps it with the weight; a weight
 * warmed at load (cuda.c) makes those of every width it will meet then,
 * and keeps them for good (plan_table).  The weight
 * is padded with zero rows and columns to multiples of 32: the sizes the
 * library's kernels take in every version seen. */
#include "mfmad_build.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_provider.h"
#include "plan_table.h"
#include "sparse24.h"

/* ---- The part of the cuSPARSELt API used ---- */

typedef int cs_status; /* cusparseStatus_t; 0 is success */
/* The library's objects are caller-allocated, 512 bytes in 0.7-0.10:
 * twice that leaves room for a later growth. */
typedef struct {
	_Alignas(16) uint8_t data[1024];
} cs_obj;

enum { CS_R_32F = 0, CS_R_16F = 2, CS_R_16BF = 14 };  /* cudaDataType */
enum { CS_ORDER_ROW = 2 };                             /* CUSPARSE_ORDER_ROW */
enum { CS_OP_N = 0 };                                  /* CUSPARSE_OPERATION_NON_TRANSPOSE */
enum { CS_COMPUTE_32F = 2 };                           /* CUSPARSE_COMPUTE_32F (0.7+) */
enum { CS_SPARSITY_50 = 0 };                           /* CUSPARSELT_SPARSITY_50_PERCENT */
enum { CS_ALG_DEFAULT = 0 };                           /* CUSPARSELT_MATMUL_ALG_DEFAULT */
/* cusparseLtMatmulAlgAttribute_t: the configuration a search chose, and
 * its split of K (1: none) and how the parts are summed (2: a second
 * kernel). */
enum { CS_ALG_CONFIG_ID = 0, CS_ALG_SPLIT_K = 3, CS_ALG_SPLIT_K_MODE = 4 };
/* cusparseStatus_t: the library could not have memory or resources. */
enum { CS_STATUS_ALLOC_FAILED = 2, CS_STATUS_INSUFFICIENT_RESOURCES = 11 };
#define CS_MIN_VERSION 700                             /* 0.7.0 */
/* Rows and columns of the structured A are padded to this. */
#define CS_PAD 32
/* Workspace offered to cusparseLtMatmulSearch (what bench_nv gives it). */
#define CS_SEARCH_WORKSPACE ((size_t)64 << 20)

static struct {
	cs_status (*init)(cs_obj *h);
	cs_status (*destroy)(const cs_obj *h);
	cs_status (*get_version)(const cs_obj *h, int *version);
	cs_status (*dense_init)(const cs_obj *h, cs_obj *mat, int64_t rows, int64_t cols,
				int64_t ld, uint32_t align, int type, int order);
	cs_status (*structured_init)(const cs_obj *h, cs_obj *mat, int64_t rows, int64_t cols,
				     int64_t ld, uint32_t align, int type, int order, int sparsity);
	cs_status (*mat_destroy)(const cs_obj *mat);
	cs_status (*matmul_init)(const cs_obj *h, cs_obj *mm, int op_a, int op_b, const cs_obj *a,
				 const cs_obj *b, const cs_obj *c, const cs_obj *d, int compute);
	cs_status (*sel_init)(const cs_obj *h, cs_obj *sel, const cs_obj *mm, int alg);
	cs_status (*plan_init)(const cs_obj *h, cs_obj *plan, const cs_obj *mm, const cs_obj *sel);
	cs_status (*plan_destroy)(const cs_obj *plan);
	cs_status (*workspace)(const cs_obj *h, const cs_obj *plan, size_t *bytes);
	cs_status (*compressed_size2)(const cs_obj *h, const cs_obj *mat, size_t *bytes,
				      size_t *buffer_bytes);
	cs_status (*compress2)(const cs_obj *h, const cs_obj *mat, int is_sparse_a, int op,
			       const void *dense, void *compressed, void *buffer, CUstream stream);
	cs_status (*matmul)(const cs_obj *h, const cs_obj *plan, const void *alpha, const void *a,
			    const void *b, const void *beta, const void *c, void *d, void *ws,
			    CUstream *streams, int32_t nstreams);
	cs_status (*search)(const cs_obj *h, cs_obj *plan, const void *alpha, const void *a,
			    const void *b, const void *beta, const void *c, void *d, void *ws,
			    CUstream *streams, int32_t nstreams);
	cs_status (*alg_get)(const cs_obj *h, const cs_obj *sel, int attr, void *data,
			     size_t bytes);
} cs;

static pthread_once_t cs_once = PTHREAD_ONCE_INIT;
static int cs_rc;
static char cs_err[256], cs_path[256];

static void cs_open(void)
{
	static const char *const names[] = { "libcusparseLt.so.0" };
	const struct cuda_lib_sym syms[] = {
		{ "cusparseLtInit", &cs.init },
		{ "cusparseLtDestroy", &cs.destroy },
		{ "cusparseLtGetVersion", &cs.get_version },
		{ "cusparseLtDenseDescriptorInit", &cs.dense_init },
		{ "cusparseLtStructuredDescriptorInit", &cs.structured_init },
		{ "cusparseLtMatDescriptorDestroy", &cs.mat_destroy },
		{ "cusparseLtMatmulDescriptorInit", &cs.matmul_init },
		{ "cusparseLtMatmulAlgSelectionInit", &cs.sel_init },
		{ "cusparseLtMatmulPlanInit", &cs.plan_init },
		{ "cusparseLtMatmulPlanDestroy", &cs.plan_destroy },
		{ "cusparseLtMatmulGetWorkspace", &cs.workspace },
		{ "cusparseLtSpMMACompressedSize2", &cs.compressed_size2 },
		{ "cusparseLtSpMMACompress2", &cs.compress2 },
		{ "cusparseLtMatmul", &cs.matmul },
		{ "cusparseLtMatmulSearch", &cs.search },
		{ "cusparseLtMatmulAlgGetAttribute", &cs.alg_get },
	};
	cs_rc = cuda_lib_open(names, 1, "MFMAD_CUSPARSELT", syms, sizeof(syms) / sizeof(syms[0]),
			      cs_path, sizeof(cs_path), cs_err, sizeof(cs_err));
}

static int cs_loaded(void)
{
	pthread_once(&cs_once, cs_open);
	return cs_rc == 0;
}

/* ---- Per device, per weight, per N ---- */

struct cs_state {
	cs_obj h;
	bool have_handle;
	int version;
	struct cuda_buf ws;
};

/* The plan for one N and output type, kept with the weight.  The library
 * may keep pointers to the descriptors, so a plan never moves. */
struct cs_plan {
	uint32_t n;
	enum mfma_dtype out;
	bool failed; /* the library refused this shape: do not ask again */
	/* Made while memory was short (the search's workspace could not be
	 * had, or the library ran out): the default configuration or a
	 * refusal that may not last. */
	bool short_of_memory;
	bool have_b, have_c, have_mm, have_plan;
	cs_obj mb, mc, mm, sel, plan;
	size_t ws_bytes;
	const char *variant; /* names the searched configuration (variant_of) */
	struct cuda_graph graph; /* the launch, replayed (cuda_dev_graph_run) */
};

/* Plans kept per weight (plan_table).  Those made when the weight is
 * warmed at load (cuda_dev_warming) stay; the others (an exact N of a
 * single request, a width past the warmed ones) replace each other oldest
 * first, and a plan replaced and needed again costs its search again
 * (some 100 ms on the H200).  A plan is a few descriptors on the host: 80
 * of them are some 375 KiB per weight. */
struct cs_weight {
	uint32_t m, k, mp, kp;
	enum mfma_dtype dtype;
	cs_obj ma;
	CUdeviceptr comp;
	struct plan_table plans; /* of struct cs_plan */
};

static uint32_t pad_to(uint32_t x, uint32_t to)
{
	return (x + to - 1) / to * to;
}

static int cs_type(enum mfma_dtype t)
{
	switch (t) {
	case MFMA_DT_F16: return CS_R_16F;
	case MFMA_DT_BF16: return CS_R_16BF;
	case MFMA_DT_F32: return CS_R_32F;
	default: return -1;
	}
}

static int cs_usable(int cc)
{
	return cc >= 80 && cs_loaded();
}

static void cs_describe(int cc, struct backend_device_info *info)
{
	(void)cc;
	info->sparse_dtypes |= BACKEND_DTYPE_BIT(MFMA_DT_F16) | BACKEND_DTYPE_BIT(MFMA_DT_BF16);
	if (backend_list_add(info->variants, sizeof(info->variants), "cusparselt.f16.sparse"))
		backend_list_add(info->variants, sizeof(info->variants), "cusparselt.bf16.sparse");
}

static void cs_detach(struct cuda_dev *dev, void *state)
{
	struct cs_state *s = state;
	(void)dev;
	if (!s)
		return;
	if (s->have_handle)
		cs.destroy(&s->h);
	cuda_buf_free(&s->ws);
	free(s);
}

static int cs_attach(struct cuda_dev *dev, void **state, char *err, size_t errlen)
{
	(void)dev;
	struct cs_state *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	/* A library that does not start, or is older than the declarations
	 * above, leaves the provider without a handle: it supports nothing. */
	if (cs.init(&s->h) == 0) {
		s->have_handle = true;
		if (cs.get_version(&s->h, &s->version) != 0 || s->version < CS_MIN_VERSION) {
			cs.destroy(&s->h);
			s->have_handle = false;
		}
	}
	*state = s;
	return 0;
}

static int cs_supports(const struct cuda_dev *dev, void *state, const struct cuda_shape *s,
		       char *err, size_t errlen)
{
	(void)dev;
	const struct cs_state *st = state;
	if (!st || !st->have_handle) {
		snprintf(err, errlen, "cuda: cuSPARSELt (%s, version %d) did not start on this device",
			 cs_path, st ? st->version : 0);
		return -ENOTSUP;
	}
	if (!s->sparse || (s->in != MFMA_DT_F16 && s->in != MFMA_DT_BF16)) {
		snprintf(err, errlen, "cuda: cuSPARSELt runs 2:4 f16 and bf16, not %s %s",
			 s->sparse ? "2:4" : "dense", mfma_dtype_name(s->in));
		return -ENOTSUP;
	}
	if (!s->resident) {
		snprintf(err, errlen,
			 "cuda: cuSPARSELt runs resident weights only: an A sent with each request "
			 "would need compressing on every call");
		return -ENOTSUP;
	}
	if (s->out != MFMA_DT_NONE && !mfma_out_dtype_ok(s->in, s->out)) {
		snprintf(err, errlen, "cuda: out_dtype=%s is not produced from in_dtype=%s",
			 mfma_dtype_name(s->out), mfma_dtype_name(s->in));
		return -EINVAL;
	}
	if (s->n % 8 != 0) {
		snprintf(err, errlen, "cuda: cuSPARSELt wants n a multiple of 8, not %u", s->n);
		return -ENOTSUP;
	}
	return 0;
}

static void plan_free(struct cs_plan *p)
{
	if (!p)
		return;
	cuda_graph_free(&p->graph);
	if (p->have_plan)
		cs.plan_destroy(&p->plan);
	if (p->have_b)
		cs.mat_destroy(&p->mb);
	if (p->have_c)
		cs.mat_destroy(&p->mc);
	free(p);
}

static void cs_weight_free(struct cuda_dev *dev, void *state, void *packed)
{
	struct cs_weight *w = packed;
	(void)dev;
	(void)state;
	if (!w)
		return;
	for (size_t i = 0; i < PLAN_TABLE_SLOTS; i++)
		plan_free(w->plans.plan[i]);
	cs.mat_destroy(&w->ma);
	if (w->comp)
		nv_drv.cuMemFree(w->comp);
	free(w);
}

static int cs_weight_pack(struct cuda_dev *dev, void *state, const struct mfma_weight_host *wh,
			  void **packed, uint64_t *dev_bytes, char *err, size_t errlen)
{
	struct cs_state *s = state;
	const size_t es = mfma_dtype_size(wh->dtype);
	struct cs_weight *w = calloc(1, sizeof(*w));
	void *dense = NULL;
	CUdeviceptr buf = 0;
	bool have_ma = false;
	int rc;
	if (!w) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	plan_table_init(&w->plans, PLAN_TABLE_KEPT_MAX);
	w->m = wh->m;
	w->k = wh->k;
	w->mp = pad_to(wh->m, CS_PAD);
	w->kp = pad_to(wh->k, CS_PAD);
	w->dtype = wh->dtype;
	if (cs.structured_init(&s->h, &w->ma, w->mp, w->kp, w->kp, 16, cs_type(wh->dtype),
			       CS_ORDER_ROW, CS_SPARSITY_50) != 0) {
		rc = -ENOTSUP;
		snprintf(err, errlen, "cuda: cuSPARSELt refused a %ux%u %s weight", w->mp, w->kp,
			 mfma_dtype_name(wh->dtype));
		goto fail;
	}
	have_ma = true;
	size_t comp_bytes = 0, buf_bytes = 0;
	if (cs.compressed_size2(&s->h, &w->ma, &comp_bytes, &buf_bytes) != 0) {
		rc = -EIO;
		snprintf(err, errlen, "cuda: cusparseLtSpMMACompressedSize2 failed");
		goto fail;
	}

	/* The dense weight, padded with zeros, into the device's A scratch. */
	const size_t rows_bytes = (size_t)wh->k * es, padded = (size_t)w->mp * w->kp * es;
	if (!(dense = malloc((size_t)wh->m * rows_bytes))) {
		rc = -ENOMEM;
		snprintf(err, errlen, "cuda: out of host memory expanding a %ux%u weight", wh->m,
			 wh->k);
		goto fail;
	}
	size_t bad_row = 0, bad_group = 0;
	if (sparse24_decompress(wh->a, wh->meta, wh->dtype, wh->m, wh->k, dense, &bad_row,
				&bad_group) < 0) {
		rc = -EINVAL;
		snprintf(err, errlen, "cuda: weight meta row %zu group %zu is no 2:4 pair", bad_row,
			 bad_group);
		goto fail;
	}
	struct cuda_buf *a = cuda_dev_scratch(dev, CUDA_SCRATCH_A);
	const CUstream stream = cuda_dev_stream(dev);
	CUresult r;
	if ((rc = cuda_buf_need(a, padded, "the weight to compress", NULL, err, errlen)) < 0)
		goto fail;
	if (w->mp > w->m &&
	    (r = nv_drv.cuMemsetD8Async(a->p + (size_t)w->m * w->kp * es, 0,
					(size_t)(w->mp - w->m) * w->kp * es, stream)) != CUDA_SUCCESS) {
		rc = cuda_fail(r, err, errlen, "cuMemsetD8Async(weight padding)");
		goto fail;
	}
	if ((rc = cuda_dev_copy_in(dev, a->p, (size_t)w->kp * es, dense, wh->m, rows_bytes, err,
				   errlen)) < 0)
		goto fail;
	/* A failed allocation leaves its pointer 0, which the failure path
	 * does not free. */
	if ((r = nv_drv.cuMemAlloc(&w->comp, comp_bytes)) != CUDA_SUCCESS)
		w->comp = 0;
	else if (buf_bytes && (r = nv_drv.cuMemAlloc(&buf, buf_bytes)) != CUDA_SUCCESS)
		buf = 0;
	if (r != CUDA_SUCCESS) {
		rc = cuda_fail(r, err, errlen, "allocating the compressed weight");
		goto fail;
	}
	if (cs.compress2(&s->h, &w->ma, 1, CS_OP_N, (const void *)(uintptr_t)a->p,
			 (void *)(uintptr_t)w->comp, (void *)(uintptr_t)buf, stream) != 0) {
		rc = -EIO;
		snprintf(err, errlen, "cuda: cusparseLtSpMMACompress2 failed");
		goto fail;
	}
	/* The host copy and the compression buffer go once it is done. */
	if ((rc = cuda_dev_sync(dev, "compressing the weight", err, errlen)) < 0)
		goto fail;
	if (buf)
		nv_drv.cuMemFree(buf);
	free(dense);
	*packed = w;
	*dev_bytes = comp_bytes;
	return 0;
fail:
	cuda_dev_drain(dev);
	if (buf)
		nv_drv.cuMemFree(buf);
	free(dense);
	if (!have_ma) {
		free(w);
		return rc;
	}
	cs_weight_free(dev, state, w);
	return rc;
}

/* The variant names of searched plans, "cusparselt.f16.sparse.c29" (the
 * library's configuration 29) with ".k4" (K split in four, the parts
 * summed in the kernel) or ".k4x2" (summed by a second kernel): kept for
 * the process's life, so that an answer may point at one after its plan
 * is gone.  Distinct names are few (configurations x splits x two input
 * types); past VARIANTS_MAX a plan is named by its input type alone. */
#define VARIANTS_MAX 256
static pthread_mutex_t variants_lock = PTHREAD_MUTEX_INITIALIZER;
static char variants[VARIANTS_MAX][48];
static size_t nvariants;

static const char *cs_variant(enum mfma_dtype in)
{
	return in == MFMA_DT_BF16 ? "cusparselt.bf16.sparse" : "cusparselt.f16.sparse";
}

static const char *variant_of(const struct cs_state *s, const struct cs_plan *p,
			      enum mfma_dtype in)
{
	int config = -1, split = 1, mode = 0;
	if (cs.alg_get(&s->h, &p->sel, CS_ALG_CONFIG_ID, &config, sizeof(config)) != 0 || config < 0)
		return cs_variant(in);
	(void)cs.alg_get(&s->h, &p->sel, CS_ALG_SPLIT_K, &split, sizeof(split));
	(void)cs.alg_get(&s->h, &p->sel, CS_ALG_SPLIT_K_MODE, &mode, sizeof(mode));
	char name[48];
	int len = snprintf(name, sizeof(name), "%s.c%d", cs_variant(in), config);
	if (split > 1)
		snprintf(name + len, sizeof(name) - (size_t)len, ".k%d%s", split,
			 mode == 2 ? "x2" : "");
	const char *v = cs_variant(in);
	pthread_mutex_lock(&variants_lock);
	size_t i = 0;
	while (i < nvariants && strcmp(variants[i], name) != 0)
		i++;
	if (i == nvariants && nvariants < VARIANTS_MAX)
		snprintf(variants[nvariants++], sizeof(variants[0]), "%s", name);
	if (i < nvariants)
		v = variants[i];
	pthread_mutex_unlock(&variants_lock);
	return v;
}

static bool short_of(cs_status st)
{
	return st == CS_STATUS_ALLOC_FAILED || st == CS_STATUS_INSUFFICIENT_RESOURCES;
}

/* Makes a plan for n columns of B and output type out: descriptors, plan,
 * then the search over the library's kernels with the device buffers of
 * this call (their contents do not matter to the search; it writes D).
 * A refusal is kept as a failed plan. */
static struct cs_plan *plan_make(struct cs_state *s, struct cs_weight *w, uint32_t n,
				 enum mfma_dtype out, CUdeviceptr b, CUdeviceptr d, CUstream stream)
{
	struct cs_plan *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->n = n;
	p->out = out;
	const int in = cs_type(w->dtype), o = cs_type(out);
	cs_status st;
	p->have_b = (st = cs.dense_init(&s->h, &p->mb, w->kp, n, n, 16, in, CS_ORDER_ROW)) == 0;
	p->have_c = p->have_b &&
		    (st = cs.dense_init(&s->h, &p->mc, w->mp, n, n, 16, o, CS_ORDER_ROW)) == 0;
	p->have_mm = p->have_c && (st = cs.matmul_init(&s->h, &p->mm, CS_OP_N, CS_OP_N, &w->ma,
						       &p->mb, &p->mc, &p->mc, CS_COMPUTE_32F)) == 0;
	p->have_plan = p->have_mm && (st = cs.sel_init(&s->h, &p->sel, &p->mm, CS_ALG_DEFAULT)) == 0 &&
		       (st = cs.plan_init(&s->h, &p->plan, &p->mm, &p->sel)) == 0;
	size_t ws = 0;
	if (p->have_plan)
		st = cs.workspace(&s->h, &p->plan, &ws);
	if (st != 0) {
		p->failed = true;
		p->short_of_memory = short_of(st);
		return p;
	}
	char err[8];
	float alpha = 1.0f, beta = 0.0f;
	const void *dp = (const void *)(uintptr_t)d;
	/* The search tries split-K configurations, which need more workspace
	 * than the default plan: without it they fail and the search with
	 * them (measured on the H200: the default plan then ran, 1.4x slower
	 * than the searched one at N = 16).  A search that fails otherwise
	 * (it does at some small shapes) is the library's answer: the
	 * default configuration is kept as it was chosen. */
	if (cuda_buf_need(&s->ws, ws > CS_SEARCH_WORKSPACE ? ws : CS_SEARCH_WORKSPACE,
			  "cuSPARSELt workspace", NULL, err, sizeof(err)) < 0) {
		p->short_of_memory = true;
	} else if ((st = cs.search(&s->h, &p->plan, &alpha, (const void *)(uintptr_t)w->comp,
				   (const void *)(uintptr_t)b, &beta, dp, (void *)(uintptr_t)d,
				   (void *)(uintptr_t)s->ws.p, &stream, 1)) != 0 ||
		   (st = cs.workspace(&s->h, &p->plan, &p->ws_bytes)) != 0) {
		p->short_of_memory = short_of(st);
	}
	if (st != 0 || p->short_of_memory)
		p->ws_bytes = ws; /* the search may have failed half-way */
	p->variant = variant_of(s, p, w->dtype);
	return p;
}

/* One cusparseLtMatmul: what cuda_dev_graph_run captures or enqueues. */
struct cs_call {
	const struct cs_state *s;
	const struct cs_plan *p;
	float alpha, beta;
	CUdeviceptr a, b, c, d, ws;
	uint32_t m, n, k;
};

static int cs_enqueue(void *arg, CUstream stream, char *err, size_t errlen)
{
	const struct cs_call *x = arg;
	CUstream st = stream;
	if (cs.matmul(&x->s->h, &x->p->plan, &x->alpha, (const void *)(uintptr_t)x->a,
		      (const void *)(uintptr_t)x->b, &x->beta, (const void *)(uintptr_t)x->c,
		      (void *)(uintptr_t)x->d, (void *)(uintptr_t)x->ws, &st, 1) != 0) {
		snprintf(err, errlen, "cuda: cusparseLtMatmul %ux%ux%u failed", x->m, x->n, x->k);
		return -EIO;
	}
	return 0;
}

static int cs_launch(struct cuda_dev *dev, void *state, const struct mfma_gemm *g, void *packed,
		     const char **variant, char *err, size_t errlen)
{
	struct cs_state *s = state;
	struct cs_weight *w = packed;
	if (!w) {
		snprintf(err, errlen, "cuda: cuSPARSELt runs resident weights only");
		return -ENOTSUP;
	}
	const size_t es = mfma_dtype_size(g->in_dtype), os = mfma_dtype_size(g->out_dtype);
	const CUstream stream = cuda_dev_stream(dev);
	const size_t bbytes = (size_t)g->n * es, cdbytes = (size_t)w->mp * g->n * os;
	const size_t dbytes = (size_t)g->m * g->n * os;
	struct cuda_buf *b = cuda_dev_scratch(dev, CUDA_SCRATCH_B);
	struct cuda_buf *c = cuda_dev_scratch(dev, CUDA_SCRATCH_C);
	struct cuda_buf *d = cuda_dev_scratch(dev, CUDA_SCRATCH_D);
	int rc;
	if ((rc = cuda_buf_need(b, w->kp * bbytes, "B", NULL, err, errlen)) < 0 ||
	    (g->beta != 0.0f && (rc = cuda_buf_need(c, cdbytes, "C", NULL, err, errlen)) < 0) ||
	    (rc = cuda_buf_need(d, cdbytes, "D", NULL, err, errlen)) < 0)
		return rc;

	struct cs_plan *p = NULL;
	for (size_t i = 0; i < PLAN_TABLE_SLOTS && !p; i++) {
		struct cs_plan *q = w->plans.plan[i];
		if (q && q->n == g->n && q->out == g->out_dtype)
			p = q;
	}
	if (!p) {
		/* Before the timing marks: the search is not this GEMM's time. */
		if (!(p = plan_make(s, w, g->n, g->out_dtype, b->p, d->p, stream))) {
			snprintf(err, errlen, "cuda: out of host memory");
			return -ENOMEM;
		}
		cuda_dev_count_plan(dev);
		/* A plan made while memory was short is not kept for the
		 * weight's life: once replaced, it is made again. */
		plan_free(plan_table_put(&w->plans, p,
					 cuda_dev_warming(dev) && !p->short_of_memory));
	}
	if (p->failed) {
		snprintf(err, errlen, "cuda: cuSPARSELt has no plan for %ux%ux%u %s->%s", g->m, g->n,
			 g->k, mfma_dtype_name(g->in_dtype), mfma_dtype_name(g->out_dtype));
		return -ENOTSUP;
	}
	if ((rc = cuda_buf_need(&s->ws, p->ws_bytes, "cuSPARSELt workspace", NULL, err, errlen)) < 0)
		return rc;
	/* D straight into the caller's memory where the device reaches it,
	 * when the library's rows are the request's (no padding rows). */
	CUdeviceptr dp = d->p;
	if (w->mp == g->m && (rc = cuda_dev_out_buffer(dev, g->d, dbytes, &dp, err, errlen)) < 0)
		return rc;

	if ((rc = cuda_dev_mark(dev, CUDA_MARK_START, err, errlen)) < 0)
		return rc;
	/* B's padding rows meet A's zero columns: they must be zeros too,
	 * not whatever the scratch held (0 x NaN is NaN). */
	CUresult r;
	if (w->kp > g->k && (r = nv_drv.cuMemsetD8Async(b->p + (size_t)g->k * bbytes, 0,
							(size_t)(w->kp - g->k) * bbytes, stream)) !=
				    CUDA_SUCCESS)
		return cuda_fail(r, err, errlen, "cuMemsetD8Async(B padding)");
	if ((rc = cuda_dev_copy_in(dev, b->p, g->k * bbytes, g->b, 1, g->k * bbytes, err,
				   errlen)) < 0)
		return rc;
	if ((rc = cuda_dev_copy_in_end(dev, c->p, g->beta != 0.0f ? g->c : NULL, dbytes, err, errlen)) < 0)
		return rc;
	/* From the plan's graph: the library's launch call costs the host
	 * 8-35 us, the graph's 2-3 (cuda_graph). */
	struct cs_call x = { .s = s, .p = p, .alpha = g->alpha, .beta = g->beta, .a = w->comp,
			     .b = b->p, .c = g->beta != 0.0f ? c->p : dp, .d = dp, .ws = s->ws.p,
			     .m = g->m, .n = g->n, .k = g->k };
	uint32_t ab[2];
	memcpy(&ab[0], &x.alpha, sizeof(ab[0]));
	memcpy(&ab[1], &x.beta, sizeof(ab[1]));
	const uint64_t key[] = { x.a, x.b, x.c, x.d, x.ws, (uint64_t)ab[0] << 32 | ab[1] };
	if ((rc = cuda_dev_graph_run(dev, &p->graph, key, sizeof(key) / sizeof(key[0]), cs_enqueue, &x,
				     err, errlen)) < 0)
		return rc;
	if ((rc = cuda_dev_mark(dev, CUDA_MARK_KERNEL, err, errlen)) < 0)
		return rc;
	/* D's padding rows, if any, come after the m rows copied out. */
	if ((rc = cuda_dev_copy_out(dev, g->d, dp, dbytes, err, errlen)) < 0)
		return rc;
	*variant = p->variant;
	return 0;
}

static long cs_version(void *state)
{
	const struct cs_state *s = state;
	return s ? s->version : 0;
}

static bool cs_planned(void *state, const struct mfma_gemm *g, void *packed)
{
	(void)state;
	const struct cs_weight *w = packed;
	for (size_t i = 0; w && i < PLAN_TABLE_SLOTS; i++) {
		const struct cs_plan *q = w->plans.plan[i];
		if (q && q->n == g->n && q->out == g->out_dtype)
			return true;
	}
	return false;
}

const struct cuda_provider cuda_provider_cusparselt = {
	.name = "cusparselt",
	.usable = cs_usable,
	.describe = cs_describe,
	.attach = cs_attach,
	.detach = cs_detach,
	.version = cs_version,
	.supports = cs_supports,
	.weight_pack = cs_weight_pack,
	.weight_free = cs_weight_free,
	.launch = cs_launch,
	.planned = cs_planned,
};
