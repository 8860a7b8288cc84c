/* Our kernels as a provider of the CUDA backend (cuda_provider.h): the
 * mma.sp / mma tile families of kernels/nvidia/ (sm_80 and newer), f16,
 * bf16 and i8, dense and 2:4.
 *
 * Each device loads the kernels embedded for its compute capability
 * (nv_gemm.h: the exact cubin, else a compatible one, else the PTX for the
 * JIT).  A operands are rewritten on the device into the packed fragment
 * order of kernels/nvidia/nv_layout.h (and canonical 2:4 metadata into
 * mma.sp metadata words): once at load for a resident weight, per request
 * otherwise (counted in the kernel time).  8-bit B is transposed on the
 * device (also kernel time).  nv_plan.c picks the tile and the split-K. */
#include "mfmad_build.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_provider.h"
#include "nv_gemm.h"
#include "sparse24.h"

/* Per device: the loaded kernels and the buffers only they read. */
struct ours {
	struct nv_module mod;
	struct cuda_buf pack_a, pack_meta, bt, ws, counters;
};

static int ours_usable(int cc)
{
	/* The kernels need mma.sp (sm_80+) and an image that runs on this
	 * arch. */
	if (cc < 80)
		return 0;
	for (int u = 0; u < NV_UNIT_COUNT; u++)
		if (!nv_image_find(nv_images, nv_image_count, nv_unit_name(u), cc))
			return 0;
	return 1;
}

static void ours_describe(int cc, struct backend_device_info *info)
{
	(void)cc;
	/* The tensor-core kernels take f16, bf16 and i8, dense and 2:4; the
	 * scheduler sends f32 elsewhere (the CPU) or refuses it clearly. */
	const uint32_t dt = BACKEND_DTYPE_BIT(MFMA_DT_F16) | BACKEND_DTYPE_BIT(MFMA_DT_BF16) |
			    BACKEND_DTYPE_BIT(MFMA_DT_I8);
	info->dense_dtypes |= dt;
	info->sparse_dtypes |= dt;
	for (int kind = 0; kind < NV_KIND_COUNT; kind++)
		for (int tile = 0; tile < NV_TILE_COUNT; tile++)
			if (!backend_list_add(info->variants, sizeof(info->variants),
					      nv_variant_label(kind, tile)))
				return;
}

static void ours_detach(struct cuda_dev *dev, void *state)
{
	struct ours *o = state;
	(void)dev;
	if (!o)
		return;
	struct cuda_buf *bufs[] = { &o->pack_a, &o->pack_meta, &o->bt, &o->ws, &o->counters };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		cuda_buf_free(bufs[i]);
	nv_module_unload(&o->mod);
	free(o);
}

static int ours_attach(struct cuda_dev *dev, void **state, char *err, size_t errlen)
{
	struct ours *o = calloc(1, sizeof(*o));
	if (!o) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	int rc = nv_module_load(&o->mod, cuda_dev_device(dev), err, errlen);
	if (rc < 0) {
		free(o);
		return rc;
	}
	*state = o;
	return 0;
}

static int ours_supports(const struct cuda_dev *dev, void *state, const struct cuda_shape *s,
			 char *err, size_t errlen)
{
	(void)dev;
	(void)state;
	if (nv_kind_of(s->in, s->sparse) < 0) {
		snprintf(err, errlen,
			 "cuda: in_dtype=%s is not supported on the tensor cores (f16, bf16, i8 are)",
			 mfma_dtype_name(s->in));
		return -ENOTSUP;
	}
	/* The daemon has checked the pair; this keeps a direct caller (the
	 * device tests) from reaching the kernels with one they never take. */
	if (s->out != MFMA_DT_NONE && !mfma_out_dtype_ok(s->in, s->out)) {
		snprintf(err, errlen, "cuda: out_dtype=%s is not produced from in_dtype=%s",
			 mfma_dtype_name(s->out), mfma_dtype_name(s->in));
		return -EINVAL;
	}
	return 0;
}

/* Copies A in (values and canonical meta) to the device's scratch
 * buffers. */
static int upload_a(struct cuda_dev *dev, int kind, size_t m, size_t k, const void *a,
		    const uint32_t *meta, char *err, size_t errlen)
{
	const bool sparse = nv_kind_sparse(kind);
	const size_t es = (size_t)nv_kind_esize(kind);
	struct cuda_buf *raw_a = cuda_dev_scratch(dev, CUDA_SCRATCH_A);
	struct cuda_buf *raw_meta = cuda_dev_scratch(dev, CUDA_SCRATCH_META);
	size_t abytes = sparse ? sparse24_values_bytes(m, k, es) : sparse24_operand_bytes(m, k, es, 0);
	int rc;
	if ((rc = cuda_buf_need(raw_a, abytes, "A", NULL, err, errlen)) < 0 ||
	    (rc = cuda_dev_copy_in(dev, raw_a->p, abytes, a, 1, abytes, err, errlen)) < 0)
		return rc;
	if (sparse) {
		size_t mbytes = sparse24_meta_bytes(m, k);
		if ((rc = cuda_buf_need(raw_meta, mbytes, "A meta", NULL, err, errlen)) < 0 ||
		    (rc = cuda_dev_copy_in(dev, raw_meta->p, mbytes, meta, 1, mbytes, err, errlen)) < 0)
			return rc;
	}
	return 0;
}

/* Packs the A that upload_a copied into dst. */
static int launch_pack(struct cuda_dev *dev, struct ours *o, const struct nv_packed *dst,
		       char *err, size_t errlen)
{
	int rc = nv_launch_pack(&o->mod, cuda_dev_stream(dev),
				cuda_dev_scratch(dev, CUDA_SCRATCH_A)->p,
				nv_kind_sparse(dst->kind) ? cuda_dev_scratch(dev, CUDA_SCRATCH_META)->p
							  : 0,
				dst);
	if (rc < 0)
		snprintf(err, errlen, "cuda: launching the A packing kernel failed (%d)", rc);
	return rc;
}

static void ours_weight_free(struct cuda_dev *dev, void *state, void *packed)
{
	struct nv_packed *pk = packed;
	(void)dev;
	(void)state;
	if (!pk)
		return;
	if (pk->a)
		nv_drv.cuMemFree(pk->a);
	if (pk->meta)
		nv_drv.cuMemFree(pk->meta);
	free(pk);
}

static int ours_weight_pack(struct cuda_dev *dev, void *state, const struct mfma_weight_host *w,
			    void **packed, uint64_t *dev_bytes, char *err, size_t errlen)
{
	struct ours *o = state;
	int kind = nv_kind_of(w->dtype, w->sparse);
	struct nv_packed *pk = calloc(1, sizeof(*pk));
	if (!pk) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	pk->kind = kind;
	pk->m = w->m;
	pk->k = w->k;
	/* What the device holds is the packed layout, padded to whole
	 * fragments: that, not the canonical size, is the weight's cost. */
	uint64_t abytes = nv_packed_a_bytes(kind, w->m, w->k);
	uint64_t mbytes = w->sparse ? nv_packed_meta_bytes(kind, w->m, w->k) : 0;
	int rc;
	CUresult r = nv_drv.cuMemAlloc(&pk->a, (size_t)abytes);
	if (r == CUDA_SUCCESS && mbytes)
		r = nv_drv.cuMemAlloc(&pk->meta, (size_t)mbytes);
	if (r != CUDA_SUCCESS) {
		rc = cuda_fail(r, err, errlen, "allocating the weight");
		goto out;
	}
	if ((rc = upload_a(dev, kind, w->m, w->k, w->a, w->meta, err, errlen)) < 0 ||
	    (rc = launch_pack(dev, o, pk, err, errlen)) < 0)
		goto out;
	*packed = pk;
	*dev_bytes = abytes + mbytes;
	return 0;
out:
	/* Nothing enqueued may still write the weight being freed. */
	cuda_dev_drain(dev);
	ours_weight_free(dev, state, pk);
	return rc;
}

static int ours_launch(struct cuda_dev *dev, void *state, const struct mfma_gemm *g, void *packed,
		       const char **variant, char *err, size_t errlen)
{
	struct ours *o = state;
	const bool sparse = g->a_sparse;
	const int kind = nv_kind_of(g->in_dtype, sparse);
	const uint32_t m = g->m, n = g->n, k = g->k;
	const size_t es = (size_t)nv_kind_esize(kind), os = mfma_dtype_size(g->out_dtype);
	const CUstream stream = cuda_dev_stream(dev);
	int occ[NV_TILE_COUNT];
	nv_module_occ(&o->mod, kind, occ);
	struct nv_plan plan;
	int rc = nv_plan_make(kind, m, n, k, o->mod.sms, occ, -1, &plan);
	if (rc < 0) {
		snprintf(err, errlen, "cuda: no kernel for %ux%ux%u %s on sm_%d (%d)", m, n, k,
			 nv_kind_name(kind), o->mod.cc, rc);
		return rc;
	}

	/* Device buffers. */
	struct nv_packed pk;
	if (packed) {
		pk = *(const struct nv_packed *)packed;
	} else {
		memset(&pk, 0, sizeof(pk));
		pk.kind = kind;
		pk.m = m;
		pk.k = k;
		if ((rc = cuda_buf_need(&o->pack_a, (size_t)nv_packed_a_bytes(kind, m, k), "packed A",
					NULL, err, errlen)) < 0)
			return rc;
		pk.a = o->pack_a.p;
		if (sparse) {
			if ((rc = cuda_buf_need(&o->pack_meta, (size_t)nv_packed_meta_bytes(kind, m, k),
						"packed A meta", NULL, err, errlen)) < 0)
				return rc;
			pk.meta = o->pack_meta.p;
		}
	}
	struct cuda_buf *b = cuda_dev_scratch(dev, CUDA_SCRATCH_B);
	struct cuda_buf *c = cuda_dev_scratch(dev, CUDA_SCRATCH_C);
	CUdeviceptr dp = 0;
	/* 16-bit B keeps its rows 16-byte aligned for cp.async (ldb a
	 * multiple of 8); 8-bit B goes in as is and is transposed. */
	const size_t ldb = es == 2 ? (size_t)nv_round_up(n, 8) : n;
	const size_t ldbt = (size_t)nv_k_pad(kind, k);
	const size_t dbytes = (size_t)m * n * os;
	int grown = 0;
	if ((rc = cuda_buf_need(b, (size_t)k * ldb * es, "B", NULL, err, errlen)) < 0 ||
	    (es == 1 &&
	     (rc = cuda_buf_need(&o->bt, (size_t)n * ldbt, "B transposed", NULL, err, errlen)) < 0) ||
	    (g->beta != 0.0f && (rc = cuda_buf_need(c, dbytes, "C", NULL, err, errlen)) < 0) ||
	    (rc = cuda_dev_out_buffer(dev, g->d, dbytes, &dp, err, errlen)) < 0 ||
	    (rc = cuda_buf_need(&o->ws, plan.ws_bytes, "split-K workspace", NULL, err, errlen)) < 0 ||
	    (rc = cuda_buf_need(&o->counters, plan.counters * 4, "split-K counters", &grown, err,
				errlen)) < 0)
		return rc;
	if (grown) {
		CUresult r = nv_drv.cuMemsetD32Async(o->counters.p, 0, o->counters.cap / 4, stream);
		if (r != CUDA_SUCCESS)
			return cuda_fail(r, err, errlen, "cuMemsetD32Async(counters)");
	}

	/* In.  A without a resident weight is packed on the device, which
	 * counts as kernel time; its copy is part of the copies in. */
	if ((rc = cuda_dev_mark(dev, CUDA_MARK_START, err, errlen)) < 0)
		return rc;
	if (!packed && (rc = upload_a(dev, kind, m, k, g->a, g->a_meta, err, errlen)) < 0)
		return rc;
	if ((rc = cuda_dev_copy_in(dev, b->p, ldb * es, g->b, k, (size_t)n * es, err, errlen)) < 0)
		return rc;
	if ((rc = cuda_dev_copy_in_end(dev, c->p, g->beta != 0.0f ? g->c : NULL, dbytes, err, errlen)) < 0)
		return rc;

	/* Kernels. */
	if (!packed && (rc = launch_pack(dev, o, &pk, err, errlen)) < 0)
		return rc;
	struct nv_gemm_params p;
	memset(&p, 0, sizeof(p));
	p.a = pk.a;
	p.meta = pk.meta;
	p.b = b->p;
	p.ldb = (int32_t)ldb;
	if (es == 1) {
		if ((rc = nv_launch_transpose_b8(&o->mod, stream, b->p, (int)k, (int)n, (int)ldb,
						 o->bt.p, (int)ldbt)) < 0) {
			snprintf(err, errlen, "cuda: launching the B transpose failed (%d)", rc);
			return rc;
		}
		p.b = o->bt.p;
		p.ldb = (int32_t)ldbt;
	}
	p.c = g->beta != 0.0f ? c->p : 0;
	p.d = dp;
	p.m = (int32_t)m;
	p.n = (int32_t)n;
	p.k = (int32_t)k;
	p.ldc = p.ldd = (int32_t)n;
	p.out_dtype = g->out_dtype;
	p.alpha = g->alpha;
	p.beta = g->beta;
	if ((rc = nv_launch_gemm(&o->mod, &plan, &p, o->ws.p, o->counters.p, stream)) < 0) {
		snprintf(err, errlen, "cuda: launching %s failed (%d)", nv_variant_label(kind, plan.tile),
			 rc);
		return rc;
	}
	if ((rc = cuda_dev_mark(dev, CUDA_MARK_KERNEL, err, errlen)) < 0)
		return rc;

	/* Out. */
	if ((rc = cuda_dev_copy_out(dev, g->d, dp, dbytes, err, errlen)) < 0)
		return rc;
	*variant = nv_variant_label(kind, plan.tile);
	return 0;
}

const struct cuda_provider cuda_provider_ours = {
	.name = "ours",
	.usable = ours_usable,
	.describe = ours_describe,
	.attach = ours_attach,
	.detach = ours_detach,
	.supports = ours_supports,
	.weight_pack = ours_weight_pack,
	.weight_free = ours_weight_free,
	.launch = ours_launch,
};
