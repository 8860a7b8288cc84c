/* The sm_90a wgmma kernels as a provider of the CUDA backend
 * (cuda_provider.h): 2:4 (wgmma.sp) and dense (wgmma) f16 and bf16 on
 * sm_90 (H100, H200), TMA-fed and warp-specialised
 * (kernels/nvidia/nv_wgmma.cuh).  On sm_90 it comes before our mma.sp
 * family in the table, so an f16/bf16 A sent with a request runs here; the
 * mma.sp kernels stay the family for sm_80/86/89, for i8, for batched
 * launches, and the fallback.  A resident weight is packed by both (and by
 * the libraries), and the measured choice per N bucket picks among them.
 *
 * A is rewritten on the device into the kernels' layout
 * (nv_wgmma_layout.h: stage images, each the swizzled tile one pipeline
 * stage holds, values padded to whole stages; a 2:4 A's metadata grouped
 * per stage): the canonical A crosses the bus into scratch buffers and a
 * packing kernel writes the images, once at load for a resident weight,
 * per request for a 2:4 A sent with it (then counted in the kernel time,
 * as our mma.sp provider counts its packing).  A dense A sent with a
 * request is not packed: it crosses into rows nv_wg_dense_lda(k) apart
 * and the row-major kernels read it by TMA (packing 117 MB cost 82 us on
 * an H100, where the images gain 1-2 us a launch: bench/RESULTS.md). */
#include "mfmad_build.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_provider.h"
#include "nv_wgmma.h"
#include "sparse24.h"

struct wg {
	struct nv_wg_module mod;
	struct cuda_buf val, meta, ws, counters;
};

static int wg_usable(int cc)
{
	return nv_wg_usable(nv_images, nv_image_count, cc);
}

static void wg_describe(int cc, struct backend_device_info *info)
{
	(void)cc;
	info->sparse_dtypes |= BACKEND_DTYPE_BIT(MFMA_DT_F16) | BACKEND_DTYPE_BIT(MFMA_DT_BF16);
	info->dense_dtypes |= BACKEND_DTYPE_BIT(MFMA_DT_F16) | BACKEND_DTYPE_BIT(MFMA_DT_BF16);
	for (int dense = 0; dense < 2; dense++)
		for (int bf16 = 0; bf16 < 2; bf16++)
			for (int t = 0; t < NV_WG_TILE_COUNT; t++)
				if (!backend_list_add(info->variants, sizeof(info->variants),
						      nv_wg_variant_label(dense, bf16, t)))
					return;
}

static void wg_detach(struct cuda_dev *dev, void *state)
{
	struct wg *o = state;
	(void)dev;
	if (!o)
		return;
	cuda_buf_free(&o->val);
	cuda_buf_free(&o->meta);
	cuda_buf_free(&o->ws);
	cuda_buf_free(&o->counters);
	nv_wg_module_unload(&o->mod);
	free(o);
}

static int wg_attach(struct cuda_dev *dev, void **state, char *err, size_t errlen)
{
	struct wg *o = calloc(1, sizeof(*o));
	if (!o) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	int rc = nv_wg_module_load(&o->mod, cuda_dev_device(dev), err, errlen);
	if (rc < 0) {
		free(o);
		return rc;
	}
	*state = o;
	return 0;
}

static int wg_supports(const struct cuda_dev *dev, void *state, const struct cuda_shape *s, char *err,
		       size_t errlen)
{
	(void)dev;
	(void)state;
	/* A request no kernel could run is said so first: the backend reports
	 * the first provider's refusal, and this one comes first. */
	if (s->out != MFMA_DT_NONE && !mfma_out_dtype_ok(s->in, s->out)) {
		snprintf(err, errlen, "cuda: out_dtype=%s is not produced from in_dtype=%s",
			 mfma_dtype_name(s->out), mfma_dtype_name(s->in));
		return -EINVAL;
	}
	if (s->in != MFMA_DT_F16 && s->in != MFMA_DT_BF16) {
		snprintf(err, errlen, "cuda: the wgmma kernels run f16 and bf16 only, not %s %s",
			 s->sparse ? "2:4" : "dense", mfma_dtype_name(s->in));
		return -ENOTSUP;
	}
	if (s->sparse && s->k % 4 != 0) {
		snprintf(err, errlen, "cuda: k=%u is not a multiple of 4 (2:4 groups)", s->k);
		return -EINVAL;
	}
	return 0;
}

/* Copies the canonical A (values and meta) to the device's scratch
 * buffers. */
static int upload_a(struct cuda_dev *dev, size_t m, size_t k, const void *a, const uint32_t *meta, char *err,
		    size_t errlen)
{
	struct cuda_buf *raw_a = cuda_dev_scratch(dev, CUDA_SCRATCH_A);
	struct cuda_buf *raw_meta = cuda_dev_scratch(dev, CUDA_SCRATCH_META);
	const size_t abytes = sparse24_values_bytes(m, k, 2), mbytes = sparse24_meta_bytes(m, k);
	int rc;
	if ((rc = cuda_buf_need(raw_a, abytes, "A", NULL, err, errlen)) < 0 ||
	    (rc = cuda_dev_copy_in(dev, raw_a->p, abytes, a, 1, abytes, err, errlen)) < 0 ||
	    (rc = cuda_buf_need(raw_meta, mbytes, "A meta", NULL, err, errlen)) < 0 ||
	    (rc = cuda_dev_copy_in(dev, raw_meta->p, mbytes, meta, 1, mbytes, err, errlen)) < 0)
		return rc;
	return 0;
}

/* Copies a dense A [m][k] to the device: into the scratch buffer for
 * packing (dst->lda = 0), or straight into dst's rows, lda apart (the gaps
 * are left as they are: the tensor map's width is k). */
static int upload_dense(struct cuda_dev *dev, const struct nv_wg_packed *dst, const void *a, char *err,
			size_t errlen)
{
	const size_t m = (size_t)dst->m, row = (size_t)dst->k * 2;
	if (dst->lda)
		return cuda_dev_copy_rows_in(dev, dst->val, (size_t)dst->lda * 2, a, m, row, err, errlen);
	struct cuda_buf *raw_a = cuda_dev_scratch(dev, CUDA_SCRATCH_A);
	int rc;
	if ((rc = cuda_buf_need(raw_a, m * row, "A", NULL, err, errlen)) < 0)
		return rc;
	return cuda_dev_copy_in(dev, raw_a->p, m * row, a, 1, m * row, err, errlen);
}

/* Copies A (2:4 or dense, as dst is) to the device. */
static int upload(struct cuda_dev *dev, const struct nv_wg_packed *dst, const void *a, const uint32_t *meta,
		  char *err, size_t errlen)
{
	return dst->dense ? upload_dense(dev, dst, a, err, errlen)
			  : upload_a(dev, (size_t)dst->m, (size_t)dst->k, a, meta, err, errlen);
}

/* Packs the A that upload copied into dst (none for a row-major one). */
static int launch_pack(struct cuda_dev *dev, struct wg *o, const struct nv_wg_packed *dst, char *err,
		       size_t errlen)
{
	if (dst->lda)
		return 0;
	int rc = nv_wg_launch_pack(&o->mod, cuda_dev_stream(dev), cuda_dev_scratch(dev, CUDA_SCRATCH_A)->p,
				   cuda_dev_scratch(dev, CUDA_SCRATCH_META)->p, dst);
	if (rc < 0)
		snprintf(err, errlen, "cuda: launching the wgmma A packing kernel failed (%d)", rc);
	return rc;
}

static void wg_weight_free(struct cuda_dev *dev, void *state, void *packed)
{
	struct nv_wg_packed *pk = packed;
	(void)dev;
	(void)state;
	if (!pk)
		return;
	if (pk->val)
		nv_drv.cuMemFree(pk->val);
	if (pk->meta)
		nv_drv.cuMemFree(pk->meta);
	free(pk);
}

/* A's shape as the kernels take it, its memory not yet given: stage
 * images, or (rm, dense only) rows nv_wg_dense_lda(k) apart. */
static struct nv_wg_packed wg_shape(int bf16, int dense, int rm, int64_t m, int64_t k)
{
	return (struct nv_wg_packed){
		.bf16 = bf16, .dense = dense, .m = m, .k = k, .lda = dense && rm ? nv_wg_dense_lda(k) : 0,
	};
}

/* Bytes of the device memory A's layout takes: values (or dense
 * values), then the 2:4 metadata. */
static uint64_t wg_val_bytes(const struct nv_wg_packed *pk)
{
	if (pk->dense)
		return pk->lda ? (uint64_t)(pk->m * pk->lda * 2) : (uint64_t)nv_wg_dimg_bytes(pk->m, pk->k, 2);
	return (uint64_t)nv_wg_img_bytes(pk->m, pk->k, 2);
}
static uint64_t wg_meta_bytes(const struct nv_wg_packed *pk)
{
	return pk->dense ? 0 : (uint64_t)nv_wg_meta_bytes(pk->m, pk->k);
}

static int wg_weight_pack(struct cuda_dev *dev, void *state, const struct mfma_weight_host *w, void **packed,
			  uint64_t *dev_bytes, char *err, size_t errlen)
{
	struct wg *o = state;
	struct nv_wg_packed *pk = calloc(1, sizeof(*pk));
	if (!pk) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	*pk = wg_shape(w->dtype == MFMA_DT_BF16, !w->sparse, 0, w->m, w->k);
	/* The padded layout is what the device holds: that is the cost. */
	const uint64_t vbytes = wg_val_bytes(pk), mbytes = wg_meta_bytes(pk);
	int rc;
	CUresult r = nv_drv.cuMemAlloc(&pk->val, (size_t)vbytes);
	if (r == CUDA_SUCCESS && mbytes)
		r = nv_drv.cuMemAlloc(&pk->meta, (size_t)mbytes);
	if (r != CUDA_SUCCESS) {
		rc = cuda_fail(r, err, errlen, "allocating the wgmma weight");
		goto out;
	}
	if ((rc = upload(dev, pk, w->a, w->meta, err, errlen)) == 0)
		rc = launch_pack(dev, o, pk, err, errlen);
	if (rc < 0)
		goto out;
	*packed = pk;
	*dev_bytes = vbytes + mbytes;
	return 0;
out:
	/* Nothing enqueued may still write the weight being freed. */
	cuda_dev_drain(dev);
	wg_weight_free(dev, state, pk);
	return rc;
}

static int wg_launch(struct cuda_dev *dev, void *state, const struct mfma_gemm *g, void *packed,
		     const char **variant, char *err, size_t errlen)
{
	struct wg *o = state;
	const int bf16 = g->in_dtype == MFMA_DT_BF16;
	const uint32_t m = g->m, n = g->n, k = g->k;
	const size_t os = mfma_dtype_size(g->out_dtype);
	const CUstream stream = cuda_dev_stream(dev);
	const int dense = packed ? ((const struct nv_wg_packed *)packed)->dense : !g->a_sparse;
	struct nv_wg_plan plan;
	/* The plan counts 64-K stages; its K-multiple-of-4 rule is the 2:4
	 * groups', so a dense K is handed to it rounded up (the same stages). */
	/* A dense A sent with the request is read row-major. */
	const int *occ = dense && !packed ? o->mod.occ_rm[bf16] : o->mod.occ[dense][bf16];
	int rc = nv_wg_plan_make(m, n, dense ? nv_round_up(k, 4) : k, o->mod.sms, occ, -1, &plan);
	if (rc < 0) {
		snprintf(err, errlen, "cuda: no wgmma kernel for %ux%ux%u %s %s (%d)", m, n, k,
			 dense ? "dense" : "2:4", mfma_dtype_name(g->in_dtype), rc);
		return rc;
	}
	struct nv_wg_packed pk;
	if (packed) {
		pk = *(const struct nv_wg_packed *)packed;
	} else {
		pk = wg_shape(bf16, dense, 1, m, k);
		if ((rc = cuda_buf_need(&o->val, (size_t)wg_val_bytes(&pk), "wgmma A", NULL, err, errlen)) < 0 ||
		    (!dense && (rc = cuda_buf_need(&o->meta, (size_t)wg_meta_bytes(&pk), "wgmma A meta", NULL, err,
						   errlen)) < 0))
			return rc;
		pk.val = o->val.p;
		pk.meta = dense ? 0 : o->meta.p;
	}
	struct cuda_buf *b = cuda_dev_scratch(dev, CUDA_SCRATCH_B);
	struct cuda_buf *c = cuda_dev_scratch(dev, CUDA_SCRATCH_C);
	CUdeviceptr dp = 0;
	const size_t ldb = (size_t)nv_wg_ldb(n);
	const size_t dbytes = (size_t)m * n * os;
	int grown = 0;
	if ((rc = cuda_buf_need(b, (size_t)k * ldb * 2, "B", NULL, err, errlen)) < 0 ||
	    (g->beta != 0.0f && (rc = cuda_buf_need(c, dbytes, "C", NULL, err, errlen)) < 0) ||
	    (rc = cuda_dev_out_buffer(dev, g->d, dbytes, &dp, err, errlen)) < 0 ||
	    (rc = cuda_buf_need(&o->ws, plan.ws_bytes, "split-K workspace", NULL, err, errlen)) < 0 ||
	    (rc = cuda_buf_need(&o->counters, plan.counters * 4, "split-K counters", &grown, err, errlen)) < 0)
		return rc;
	if (grown) {
		CUresult r = nv_drv.cuMemsetD32Async(o->counters.p, 0, o->counters.cap / 4, stream);
		if (r != CUDA_SUCCESS)
			return cuda_fail(r, err, errlen, "cuMemsetD32Async(counters)");
	}

	/* In.  A without a resident weight is uploaded here (copies in) and
	 * packed below (kernel time). */
	if ((rc = cuda_dev_mark(dev, CUDA_MARK_START, err, errlen)) < 0)
		return rc;
	if (!packed && (rc = upload(dev, &pk, g->a, g->a_meta, err, errlen)) < 0)
		return rc;
	/* A resident weight's GEMM without C launches before B is in: B's
	 * copy on the gate stream, the kernel loading its first stages of A
	 * meanwhile (cuda_dev_copy_in_gated; the IN mark is the copy's). */
	CUdeviceptr gate = 0;
	uint32_t gate_seq = 0;
	rc = packed && g->beta == 0.0f
		     ? cuda_dev_copy_in_gated(dev, b->p, ldb * 2, g->b, k, (size_t)n * 2, &gate, &gate_seq, err, errlen)
		     : -EAGAIN;
	if (rc < 0 && rc != -EAGAIN)
		return rc;
	if (rc == -EAGAIN) {
		if ((rc = cuda_dev_copy_rows_in(dev, b->p, ldb * 2, g->b, k, (size_t)n * 2, err, errlen)) < 0)
			return rc;
		if ((rc = cuda_dev_copy_in_end(dev, c->p, g->beta != 0.0f ? g->c : NULL, dbytes, err, errlen)) < 0)
			return rc;
	}

	/* Kernels. */
	if (!packed && (rc = launch_pack(dev, o, &pk, err, errlen)) < 0)
		return rc;
	/* A lone launch copies its tiles of D into a mapped region or
	 * frame itself (cuda.tile_out): no copy after the kernel. */
	const CUdeviceptr dh = cuda_dev_tile_out(dev, g->d, dbytes);
	const struct nv_wg_args args = {
		.b = b->p, .c = g->beta != 0.0f ? c->p : 0, .d = dp,
		.n = (int32_t)n, .ldb = (int32_t)ldb, .ldc = (int32_t)n, .ldd = (int32_t)n,
		.out_dtype = g->out_dtype, .alpha = g->alpha, .beta = g->beta,
		.gate = gate, .gate_seq = gate_seq, .gate_l2 = gate ? NV_WG_GATE_L2 : 0, .dh = dh,
	};
	char why[160] = "";
	if ((rc = nv_wg_launch_gemm(&o->mod, &plan, &pk, &args, o->ws.p, o->counters.p, stream, why,
				    sizeof(why))) < 0) {
		snprintf(err, errlen, "cuda: launching %s failed (%d)%s%s", nv_wg_variant_label(dense, bf16, plan.tile), rc,
			 why[0] ? ": " : "", why);
		return rc;
	}
	if ((rc = cuda_dev_mark(dev, CUDA_MARK_KERNEL, err, errlen)) < 0)
		return rc;
	if ((rc = cuda_dev_copy_out(dev, g->d, dp, dbytes, err, errlen)) < 0)
		return rc;
	*variant = nv_wg_variant_label(dense, bf16, plan.tile);
	return 0;
}

const struct cuda_provider cuda_provider_wgmma = {
	.name = "wgmma",
	.usable = wg_usable,
	.describe = wg_describe,
	.attach = wg_attach,
	.detach = wg_detach,
	.supports = wg_supports,
	.weight_pack = wg_weight_pack,
	.weight_free = wg_weight_free,
	.launch = wg_launch,
};
