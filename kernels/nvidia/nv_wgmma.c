/* Host side of the wgmma.sp and wgmma kernels that talks to the driver
 * (see nv_wgmma.h). */
#include "nv_wgmma.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "mfma_dtype.h"

#define NV_WG_CHECK(call, what)                                                           \
	do {                                                                              \
		CUresult r_ = (call);                                                     \
		if (r_ != CUDA_SUCCESS) {                                                 \
			if (err && errlen)                                                \
				snprintf(err, errlen, "%s failed: %s", what, nv_result_str(r_)); \
			return nv_result_errno(r_);                                       \
		}                                                                         \
	} while (0)

/* Finds kernel `name` and sets it up for `smem` bytes of dynamic shared
 * memory, its occupancy in *occ; a tile that needs more shared memory
 * than this GPU gives a block stays unused (*occ = 0). */
static int setup_kernel(const struct nv_wg_module *m, const char *name, unsigned smem, int smem_optin,
			CUfunction *fn, int *occ, char *err, size_t errlen)
{
	CUresult r = nv_drv.cuModuleGetFunction(fn, m->mod, name);
	if (r == CUDA_SUCCESS && (int)smem > smem_optin)
		return 0;
	if (r == CUDA_SUCCESS)
		r = nv_drv.cuFuncSetAttribute(*fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem);
	if (r == CUDA_SUCCESS)
		r = nv_drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(occ, *fn, NV_WG_THREADS, smem);
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "setting up %s failed: %s", name, nv_result_str(r));
		return nv_result_errno(r);
	}
	return 0;
}

int nv_wg_module_load(struct nv_wg_module *m, CUdevice dev, char *err, size_t errlen)
{
	struct nv_device_attrs at;
	int rc;
	memset(m, 0, sizeof(*m));
	if ((rc = nv_device_attrs(dev, &at, err, errlen)) < 0)
		return rc;
	const int smem_optin = at.smem_optin, cc = at.cc;
	m->sms = at.sms;
	if (!nv_wg_usable(nv_images, nv_image_count, cc)) {
		snprintf(err, errlen, "no wgmma kernels for sm_%d (they are built for sm_90a only)", cc);
		return -ENOTSUP;
	}
	const struct nv_image *im = nv_image_find(nv_images, nv_image_count, NV_WG_UNIT, cc);
	NV_WG_CHECK(nv_drv.cuModuleLoadData(&m->mod, im->data), "cuModuleLoadData(wg, sm_90a)");
	CUresult r = nv_drv.cuModuleGetFunction(&m->pack, m->mod, "nv_wg_pack");
	if (r == CUDA_SUCCESS)
		r = nv_drv.cuModuleGetFunction(&m->pack_dense, m->mod, "nv_wg_pack_dense");
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuModuleGetFunction(nv_wg_pack%s) failed: %s", m->pack ? "_dense" : "",
			 nv_result_str(r));
		rc = nv_result_errno(r);
		goto fail;
	}
	for (int bf16 = 0; bf16 < 2; bf16++)
		for (int t = 0; t < NV_WG_TILE_COUNT; t++)
			for (int dense = 0; dense < 2; dense++) {
				struct nv_wg_tile_shape sh;
				nv_wg_tile_shape(dense, t, &sh);
				if ((rc = setup_kernel(m, nv_wg_kernel_name(dense, bf16, t), sh.smem, smem_optin,
						       &m->gemm[dense][bf16][t], &m->occ[dense][bf16][t], err, errlen)) < 0)
					goto fail;
				/* The row-major dense kernel: the dense tile's ring. */
				if (dense && (rc = setup_kernel(m, nv_wg_rm_kernel_name(bf16, t), sh.smem, smem_optin,
								&m->gemm_rm[bf16][t], &m->occ_rm[bf16][t], err, errlen)) < 0)
					goto fail;
			}
	return 0;
fail:
	nv_wg_module_unload(m);
	return rc;
}

void nv_wg_module_unload(struct nv_wg_module *m)
{
	if (!m)
		return;
	if (m->mod)
		nv_drv.cuModuleUnload(m->mod);
	memset(m, 0, sizeof(*m));
}

int nv_wg_launch_pack(const struct nv_wg_module *m, CUstream s, CUdeviceptr src, CUdeviceptr src_meta,
		      const struct nv_wg_packed *dst)
{
	if (!m || !dst || dst->m <= 0 || dst->k <= 0 || !src || !dst->val || dst->lda != 0)
		return -EINVAL;
	if (dst->m > INT32_MAX || dst->k > INT32_MAX)
		return -EINVAL;
	struct nv_wg_pack_params p = {
		.src = src, .dst = dst->val, .rows = (int32_t)dst->m, .k = (int32_t)dst->k, .order = NV_WG_ORDER,
	};
	void *args[] = { &p };
	if (dst->dense) {
		if (!m->pack_dense)
			return -EINVAL;
		const int64_t chunks = nv_wg_dimg_bytes(dst->m, dst->k, 2) / 16;
		return nv_result_errno(nv_drv.cuLaunchKernel(m->pack_dense, (unsigned)((chunks + 255) / 256), 1, 1,
							     256, 1, 1, 0, s, args, NULL));
	}
	if (!m->pack || dst->k % 4 != 0 || !src_meta || !dst->meta)
		return -EINVAL;
	p.src_meta = src_meta;
	p.dst_meta = dst->meta;
	p.meta_words = (int32_t)((dst->k / 4 + 7) / 8);
	int64_t words = (nv_wg_img_bytes(dst->m, dst->k, 2) + nv_wg_meta_bytes(dst->m, dst->k)) / 4;
	return nv_result_errno(nv_drv.cuLaunchKernel(m->pack, (unsigned)((words + 255) / 256), 1, 1, 256, 1, 1, 0,
						     s, args, NULL));
}

/* A 2D map of 16-bit elements: d0 contiguous, rows of stride bytes. */
static CUresult tmap_2d(CUtensorMap *tm, CUdeviceptr base, uint64_t d0, uint64_t d1, uint64_t stride,
			uint32_t b0, uint32_t b1, CUtensorMapSwizzle swz)
{
	const cuuint64_t dims[2] = { d0, d1 }, strides[1] = { stride };
	const cuuint32_t box[2] = { b0, b1 }, es[2] = { 1, 1 };
	return nv_drv.cuTensorMapEncodeTiled(tm, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, (void *)(uintptr_t)base, dims,
					     strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, swz,
					     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

int nv_wg_launch_gemm(const struct nv_wg_module *m, const struct nv_wg_plan *plan, const struct nv_wg_packed *a,
		      const struct nv_wg_args *g, CUdeviceptr ws, CUdeviceptr counters, CUstream s, char *err,
		      size_t errlen)
{
	if (!m || !plan || !a || !g || plan->tile < 0 || plan->tile >= NV_WG_TILE_COUNT)
		return -EINVAL;
	const int bf16 = !!a->bf16, dense = !!a->dense, rm = dense && a->lda != 0;
	const int occ = rm ? m->occ_rm[bf16][plan->tile] : m->occ[dense][bf16][plan->tile];
	if (occ <= 0)
		return -ENOTSUP;
	if ((plan->splits > 1 && (!ws || !counters)) || g->ldb % 8 != 0 || g->b % 16 != 0 || g->n <= 0 ||
	    (rm && (a->lda < a->k || a->lda % 8 != 0)) || (!dense && a->lda != 0))
		return -EINVAL;
	struct nv_wg_tile_shape sh;
	nv_wg_tile_shape(dense, plan->tile, &sh);
	const int bnb = sh.bn < 64 ? sh.bn : 64;
	const CUtensorMapSwizzle bswz = bnb == 64   ? CU_TENSOR_MAP_SWIZZLE_128B
					: bnb == 32 ? CU_TENSOR_MAP_SWIZZLE_64B
						    : CU_TENSOR_MAP_SWIZZLE_32B;
	struct nv_wg_params p;
	memset(&p, 0, sizeof(p));
	/* A's stage images, 2:4 or dense, are read by bulk copies (no map).
	 * A row-major dense A: rows of K values (lda apart), 64 of them (128
	 * bytes) and 128 rows a box, zeros past K.  B's box is one stage of
	 * K by up to 64 columns. */
	if (rm)
		NV_WG_CHECK(tmap_2d(&p.tm_a, a->val, (uint64_t)a->k, (uint64_t)a->m, (uint64_t)a->lda * 2, NV_WG_BK,
				    NV_WG_BM, CU_TENSOR_MAP_SWIZZLE_128B),
			    "cuTensorMapEncodeTiled(A)");
	else
		p.a = a->val;
	NV_WG_CHECK(tmap_2d(&p.tm_b, g->b, (uint64_t)g->n, (uint64_t)a->k, (uint64_t)g->ldb * 2, (uint32_t)bnb,
			    NV_WG_BK, bswz),
		    "cuTensorMapEncodeTiled(B)");
	p.meta = a->meta;
	p.c = g->c;
	p.d = g->d;
	p.ws = ws;
	p.counters = counters;
	p.m = (int32_t)a->m;
	p.n = g->n;
	p.m_pad = (int32_t)nv_wg_m_pad(a->m);
	p.k_iters = plan->k_iters;
	p.iters_per_split = plan->iters_per_split;
	p.ldc = g->ldc;
	p.ldd = g->ldd;
	p.tiles_m = plan->tiles_m;
	p.tiles_n = plan->tiles_n;
	p.out_dtype = g->out_dtype;
	p.alpha = g->alpha;
	p.beta = g->beta;
	p.gate = g->gate;
	p.gate_seq = g->gate_seq;
	p.gate_l2 = g->gate_l2;
	p.dh = g->dh;
	p.producers = nv_wg_producers(dense, plan, m->sms, occ);
	p.pdl = g->pdl && nv_drv.cuLaunchKernelEx;
	void *args[] = { &p };
	const CUfunction fn = rm ? m->gemm_rm[bf16][plan->tile] : m->gemm[dense][bf16][plan->tile];
	const char *name = rm ? nv_wg_rm_kernel_name(bf16, plan->tile) : nv_wg_kernel_name(dense, bf16, plan->tile);
	const unsigned grid = (unsigned)(plan->tiles_m * plan->tiles_n);
	if (p.pdl) {
		CUlaunchAttribute at;
		memset(&at, 0, sizeof(at));
		at.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
		at.value.programmaticStreamSerializationAllowed = 1;
		const CUlaunchConfig cfg = { .gridDimX = grid, .gridDimY = 1, .gridDimZ = (unsigned)plan->splits,
					     .blockDimX = NV_WG_THREADS, .blockDimY = 1, .blockDimZ = 1,
					     .sharedMemBytes = sh.smem, .hStream = s, .attrs = &at, .numAttrs = 1 };
		NV_WG_CHECK(nv_drv.cuLaunchKernelEx(&cfg, fn, args, NULL), name);
		return 0;
	}
	NV_WG_CHECK(nv_drv.cuLaunchKernel(fn, grid, 1, (unsigned)plan->splits, NV_WG_THREADS, 1, 1, sh.smem, s, args,
					  NULL),
		    name);
	return 0;
}
