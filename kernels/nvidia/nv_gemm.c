/* Host side of the NVIDIA kernels that talks to the driver (see nv_gemm.h). */
#include "nv_gemm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define NV_CHECK(call, what)                                                              \
	do {                                                                              \
		CUresult r_ = (call);                                                     \
		if (r_ != CUDA_SUCCESS) {                                                 \
			if (err && errlen)                                                \
				snprintf(err, errlen, "%s failed: %s", what, nv_result_str(r_)); \
			return nv_result_errno(r_);                                       \
		}                                                                         \
	} while (0)

static int load_unit(struct nv_module *m, int unit, char *err, size_t errlen)
{
	const struct nv_image *im = nv_image_find(nv_images, nv_image_count, nv_unit_name(unit), m->cc);
	if (!im) {
		snprintf(err, errlen,
			 "no %s kernels for sm_%d: built for other architectures (nvidia_archs)",
			 nv_unit_name(unit), m->cc);
		return -ENOEXEC;
	}
	m->image[unit] = im;
	char what[64];
	snprintf(what, sizeof(what), "cuModuleLoadData(%s, %s_%d)", nv_unit_name(unit),
		 im->is_ptx ? "compute" : "sm", im->arch);
	NV_CHECK(nv_drv.cuModuleLoadData(&m->mod[unit], im->data), what);
	return 0;
}

static int get_fn(struct nv_module *m, int unit, const char *name, CUfunction *fn, char *err,
		  size_t errlen)
{
	char what[96];
	snprintf(what, sizeof(what), "cuModuleGetFunction(%s)", name);
	NV_CHECK(nv_drv.cuModuleGetFunction(fn, m->mod[unit], name), what);
	return 0;
}

static int unit_of_kind(int kind)
{
	return kind <= NV_F16_SPARSE ? NV_UNIT_F16 : kind <= NV_BF16_SPARSE ? NV_UNIT_BF16 : NV_UNIT_S8;
}

int nv_module_load(struct nv_module *m, CUdevice dev, char *err, size_t errlen)
{
	struct nv_device_attrs at;
	int rc;
	memset(m, 0, sizeof(*m));
	if ((rc = nv_device_attrs(dev, &at, err, errlen)) < 0)
		return rc;
	const int smem_optin = at.smem_optin;
	m->cc = at.cc;
	m->sms = at.sms;
	if (m->cc < 80) {
		snprintf(err, errlen, "sm_%d has no mma.sp (sm_80 or newer needed)", m->cc);
		return -ENOTSUP;
	}
	for (int u = 0; u < NV_UNIT_COUNT; u++)
		if ((rc = load_unit(m, u, err, errlen)) < 0)
			goto fail;
	if ((rc = get_fn(m, NV_UNIT_UTIL, "nv_pack_a", &m->pack_a, err, errlen)) < 0 ||
	    (rc = get_fn(m, NV_UNIT_UTIL, "nv_pack_meta", &m->pack_meta, err, errlen)) < 0 ||
	    (rc = get_fn(m, NV_UNIT_UTIL, "nv_transpose_b8", &m->transpose_b8, err, errlen)) < 0)
		goto fail;
	for (int kind = 0; kind < NV_KIND_COUNT; kind++) {
		for (int tile = 0; tile < NV_TILE_COUNT; tile++) {
			struct nv_kernel *k = &m->gemm[kind][tile];
			char name[64];
			snprintf(name, sizeof(name), "nv_gemm_%s_%s", nv_kind_name(kind), nv_tile_name(tile));
			if ((rc = get_fn(m, unit_of_kind(kind), name, &k->fn, err, errlen)) < 0)
				goto fail;
			nv_tile_shape(kind, tile, &k->shape);
			/* A variant that needs more shared memory than this GPU
			 * gives a block stays unused (occ = 0). */
			if ((int)k->shape.smem > smem_optin)
				continue;
			CUresult r = nv_drv.cuFuncSetAttribute(k->fn,
							       CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
							       (int)k->shape.smem);
			if (r == CUDA_SUCCESS)
				r = nv_drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(&k->occ, k->fn,
										      k->shape.threads,
										      k->shape.smem);
			if (r != CUDA_SUCCESS) {
				snprintf(err, errlen, "setting up %s failed: %s", name, nv_result_str(r));
				rc = nv_result_errno(r);
				goto fail;
			}
		}
	}
	return 0;
fail:
	nv_module_unload(m);
	return rc;
}

void nv_module_unload(struct nv_module *m)
{
	if (!m)
		return;
	for (int u = 0; u < NV_UNIT_COUNT; u++)
		if (m->mod[u])
			nv_drv.cuModuleUnload(m->mod[u]);
	memset(m, 0, sizeof(*m));
}

int nv_util_load(struct nv_util *u, CUdevice dev, char *err, size_t errlen)
{
	struct nv_device_attrs at;
	memset(u, 0, sizeof(*u));
	int rc = nv_device_attrs(dev, &at, err, errlen);
	if (rc < 0)
		return rc;
	const int cc = at.cc;
	u->sms = at.sms;
	const struct nv_image *im = nv_image_find(nv_images, nv_image_count, nv_unit_name(NV_UNIT_UTIL), cc);
	if (!im) {
		snprintf(err, errlen, "no util kernels for sm_%d: built for other architectures "
			 "(nvidia_archs)", cc);
		return -ENOEXEC;
	}
	NV_CHECK(nv_drv.cuModuleLoadData(&u->mod, im->data), "cuModuleLoadData(util)");
	CUresult r = nv_drv.cuModuleGetFunction(&u->batch_cols, u->mod, "nv_batch_cols");
	if (r == CUDA_SUCCESS)
		r = nv_drv.cuModuleGetFunction(&u->copy_spans, u->mod, "nv_copy_spans");
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuModuleGetFunction(util) failed: %s", nv_result_str(r));
		nv_util_unload(u);
		return nv_result_errno(r);
	}
	return 0;
}

void nv_util_unload(struct nv_util *u)
{
	if (u && u->mod)
		nv_drv.cuModuleUnload(u->mod);
	if (u)
		memset(u, 0, sizeof(*u));
}

void nv_module_occ(const struct nv_module *m, int kind, int occ[NV_TILE_COUNT])
{
	for (int t = 0; t < NV_TILE_COUNT; t++)
		occ[t] = (kind >= 0 && kind < NV_KIND_COUNT) ? m->gemm[kind][t].occ : 0;
}

/* A grid's rows for count items, per items a row: at most 65535 (the
 * limit of gridDim.y); the kernels that take it stride over the rest. */
static unsigned grid_rows(int64_t count, int64_t per)
{
	int64_t rows = (count + per - 1) / per;
	return (unsigned)(rows < 65535 ? rows : 65535);
}

static int launch(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		  unsigned smem, CUstream s, void *arg)
{
	void *args[] = { arg };
	CUresult r = nv_drv.cuLaunchKernel(fn, gx, gy, gz, bx, by, 1, smem, s, args, NULL);
	return nv_result_errno(r);
}

int nv_launch_pack(const struct nv_module *m, CUstream s, CUdeviceptr src, CUdeviceptr src_meta,
		   const struct nv_packed *dst)
{
	if (!m || !dst || dst->kind < 0 || dst->kind >= NV_KIND_COUNT || dst->m <= 0 || dst->k <= 0)
		return -EINVAL;
	const int kind = dst->kind, sparse = nv_kind_sparse(kind), es = nv_kind_esize(kind);
	if (sparse && (dst->k % 4 != 0 || !src_meta || !dst->meta))
		return -EINVAL;
	struct nv_pack_params p;
	memset(&p, 0, sizeof(p));
	p.src = src;
	p.src_meta = src_meta;
	p.dst = dst->a;
	p.row_bytes = (sparse ? dst->k / 2 : dst->k) * es;
	p.rows = (int32_t)dst->m;
	p.strips = (int32_t)(nv_m_pad(dst->m) / NV_TILE_ROWS);
	p.ktiles = (int32_t)nv_a_ktiles(kind, dst->k);
	p.meta_words = (int32_t)((dst->k / 4 + 7) / 8);
	p.kgroups = (int32_t)(dst->k / 4);
	p.is8 = es == 1;
	int64_t n = (int64_t)p.strips * p.ktiles * 32;
	int rc = launch(m->pack_a, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 0, s, &p);
	if (rc < 0 || !sparse)
		return rc;
	p.dst = dst->meta;
	p.ktiles = (int32_t)nv_meta_tiles(kind, dst->k);
	n = (int64_t)p.strips * p.ktiles * 32;
	return launch(m->pack_meta, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 0, s, &p);
}

int nv_launch_transpose_b8(const struct nv_module *m, CUstream s, CUdeviceptr b, int k, int n,
			   int ldb, CUdeviceptr bt, int ldbt)
{
	if (!m || k <= 0 || n <= 0 || ldb < n || ldbt % 32 != 0 || ldbt < nv_k_pad(NV_S8_DENSE, k))
		return -EINVAL;
	struct nv_transpose_params p = { .b = b, .bt = bt, .k = k, .n = n, .ldb = ldb, .ldbt = ldbt };
	return launch(m->transpose_b8, (unsigned)(ldbt / 32), grid_rows(n, 32), 1, 32, 8, 0, s, &p);
}

int nv_launch_batch_cols(const struct nv_util *m, CUstream s, const struct nv_batch_params *p)
{
	if (!m || !p || p->rows <= 0 || p->cols <= 0 || p->ld < p->cols ||
	    (p->es != 1 && p->es != 2 && p->es != 4) || (p->dir != 0 && p->dir != 1))
		return -EINVAL;
	struct nv_batch_params q = *p;
	int width = q.dir == 0 ? q.ld : q.cols;
	return launch(m->batch_cols, (unsigned)((width + 31) / 32), grid_rows(q.rows, 32), 1, 32, 8, 0,
		      s, &q);
}

int nv_launch_copy_spans(const struct nv_util *m, CUstream s, const struct nv_copy_params *p,
			 uint64_t max_bytes)
{
	if (!m || !p || !p->spans || p->count <= 0 || p->count > 65535)
		return -EINVAL;
	/* Enough blocks a span that every multiprocessor has a few, and no
	 * more than its 16-byte units need. */
	uint64_t units = (max_bytes + 16 * 256 - 1) / (16 * 256);
	uint64_t want = (uint64_t)(m->sms > 0 ? m->sms : 1) * 4 / (uint64_t)p->count + 1;
	unsigned gx = (unsigned)(units < want ? (units ? units : 1) : want);
	struct nv_copy_params q = *p;
	return launch(m->copy_spans, gx, (unsigned)q.count, 1, 256, 1, 0, s, &q);
}

int nv_launch_gemm(const struct nv_module *m, const struct nv_plan *plan,
		   const struct nv_gemm_params *p, CUdeviceptr ws, CUdeviceptr counters, CUstream s)
{
	if (!m || !plan || !p || plan->kind < 0 || plan->kind >= NV_KIND_COUNT || plan->tile < 0 ||
	    plan->tile >= NV_TILE_COUNT)
		return -EINVAL;
	const struct nv_kernel *k = &m->gemm[plan->kind][plan->tile];
	if (k->occ <= 0)
		return -ENOTSUP;
	if (plan->splits > 1 && (!ws || !counters))
		return -EINVAL;
	struct nv_gemm_params q = *p;
	q.a_ktiles = (int32_t)nv_a_ktiles(plan->kind, p->k);
	q.meta_tiles = (int32_t)nv_meta_tiles(plan->kind, p->k);
	q.k_iters = plan->k_iters;
	q.splits = plan->splits;
	q.iters_per_split = plan->iters_per_split;
	q.tiles_m = plan->tiles_m;
	q.tiles_n = plan->tiles_n;
	q.ws = ws;
	q.counters = counters;
	return launch(k->fn, (unsigned)(plan->tiles_m * plan->tiles_n), 1, (unsigned)plan->splits,
		      (unsigned)k->shape.threads, 1, k->shape.smem, s, &q);
}
