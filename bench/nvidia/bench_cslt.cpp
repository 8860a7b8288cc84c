// cuSPARSELt for the kernel benchmark (see bench_cslt.h).  C-like C++:
// only because cusparseLt.h is a C++ header.
#include "bench_cslt.h"

#include <cusparseLt.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cslt {
	cusparseLtHandle_t h;
	cusparseLtMatDescriptor_t ma, mb, mc;
	cusparseLtMatmulDescriptor_t mm;
	cusparseLtMatmulAlgSelection_t sel;
	cusparseLtMatmulPlan_t plan;
	int have_handle, have_plan, have_desc;
	CUdeviceptr comp[8], ws, d, b;
	int ncomp;
	size_t ws_bytes;
	const char *out_name;
	char note[48];
	int out_same;
};

static CUdeviceptr dalloc(size_t bytes)
{
	CUdeviceptr p = 0;
	if (nv_drv.cuMemAlloc(&p, bytes ? bytes : 256) != CUDA_SUCCESS)
		return 0;
	return p;
}

static void *ptr(CUdeviceptr p)
{
	return (void *)(uintptr_t)p;
}

int cslt_create(struct cslt **out, int dtype, int m, int n, int k, const CUdeviceptr *dense,
		int ndense, CUdeviceptr b, CUdeviceptr bt, int ldbt, CUstream s, char *why, size_t whylen)
{
	struct cslt *c = (struct cslt *)calloc(1, sizeof(*c));
	*out = c;
	if (!c) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	c->b = b;
	cudaStream_t st_ = (cudaStream_t)s;
	cudaDataType ab = dtype == 0 ? CUDA_R_16F : dtype == 1 ? CUDA_R_16BF : CUDA_R_8I;
	cusparseComputeType ct = dtype == 2 ? CUSPARSE_COMPUTE_32I : CUSPARSE_COMPUTE_32F;
	// Output types to try: the one our kernels write first.
	cudaDataType outs[2] = { dtype == 2 ? CUDA_R_32I : ab, CUDA_R_16F };
	const char *names[2] = { dtype == 2 ? "i32" : "same", "f16" };
	size_t osize[2] = { dtype == 2 ? 4u : 2u, 2u };
	cusparseStatus_t st = cusparseLtInit(&c->h);
	if (st != CUSPARSE_STATUS_SUCCESS) {
		snprintf(why, whylen, "cusparseLtInit: %d", (int)st);
		return -EIO;
	}
	c->have_handle = 1;
	int version = 0;
	cusparseLtGetVersion(&c->h, &version);
	// Configurations to try, ours first: B row-major or (transposed,
	// as Bt) column-major, D in our output type or f16.
	int chosen = -1, bcol = 0;
	for (int cfg = 0; cfg < 4 && chosen < 0; cfg++) {
		int o = cfg & 1, col = cfg >> 1;
		if (col && !bt)
			continue;
		if (c->have_desc) {
			cusparseLtMatDescriptorDestroy(&c->ma);
			cusparseLtMatDescriptorDestroy(&c->mb);
			cusparseLtMatDescriptorDestroy(&c->mc);
			c->have_desc = 0;
		}
		cusparseStatus_t r1 = cusparseLtStructuredDescriptorInit(&c->h, &c->ma, m, k, k, 16, ab,
									 CUSPARSE_ORDER_ROW,
									 CUSPARSELT_SPARSITY_50_PERCENT);
		cusparseStatus_t r2 = col ? cusparseLtDenseDescriptorInit(&c->h, &c->mb, k, n, ldbt, 16, ab,
									  CUSPARSE_ORDER_COL)
					  : cusparseLtDenseDescriptorInit(&c->h, &c->mb, k, n, n, 16, ab,
									  CUSPARSE_ORDER_ROW);
		cusparseStatus_t r3 = cusparseLtDenseDescriptorInit(&c->h, &c->mc, m, n, n, 16, outs[o],
								    CUSPARSE_ORDER_ROW);
		if (r1 != CUSPARSE_STATUS_SUCCESS || r2 != CUSPARSE_STATUS_SUCCESS ||
		    r3 != CUSPARSE_STATUS_SUCCESS)
			continue;
		c->have_desc = 1;
		if (cusparseLtMatmulDescriptorInit(&c->h, &c->mm, CUSPARSE_OPERATION_NON_TRANSPOSE,
						   CUSPARSE_OPERATION_NON_TRANSPOSE, &c->ma, &c->mb, &c->mc,
						   &c->mc, ct) != CUSPARSE_STATUS_SUCCESS)
			continue;
		if (cusparseLtMatmulAlgSelectionInit(&c->h, &c->sel, &c->mm, CUSPARSELT_MATMUL_ALG_DEFAULT) !=
			    CUSPARSE_STATUS_SUCCESS ||
		    cusparseLtMatmulPlanInit(&c->h, &c->plan, &c->mm, &c->sel) != CUSPARSE_STATUS_SUCCESS)
			continue;
		c->have_plan = 1;
		chosen = o;
		bcol = col;
	}
	if (chosen < 0) {
		snprintf(why, whylen, "no supported configuration (cuSPARSELt %d)", version);
		return -ENOTSUP;
	}
	if (bcol) {
		c->b = bt;
		b = bt;
	}
	snprintf(c->note, sizeof(c->note), "%s%s", names[chosen], bcol ? ", B col-major" : "");
	c->out_name = c->note;
	c->out_same = chosen == 0;
	size_t csize = 0, cbuf = 0;
	if ((st = cusparseLtSpMMACompressedSize(&c->h, &c->plan, &csize, &cbuf)) != CUSPARSE_STATUS_SUCCESS) {
		snprintf(why, whylen, "cusparseLtSpMMACompressedSize: %d", (int)st);
		return -EIO;
	}
	// As many compressed copies as the caller has dense copies: the
	// same L2 rotation as the other columns.
	c->ncomp = ndense < 1 ? 1 : ndense > 8 ? 8 : ndense;
	CUdeviceptr buf = dalloc(cbuf);
	for (int i = 0; i < c->ncomp; i++) {
		c->comp[i] = dalloc(csize);
		if (!c->comp[i] || (cbuf && !buf)) {
			snprintf(why, whylen, "out of device memory");
			return -ENOMEM;
		}
		st = cusparseLtSpMMACompress(&c->h, &c->plan, ptr(dense[i]), ptr(c->comp[i]), ptr(buf), st_);
		if (st != CUSPARSE_STATUS_SUCCESS) {
			snprintf(why, whylen, "cusparseLtSpMMACompress: %d", (int)st);
			return -EIO;
		}
	}
	nv_drv.cuStreamSynchronize(s);
	if (buf)
		nv_drv.cuMemFree(buf);
	c->d = dalloc((size_t)m * n * osize[chosen]);
	c->ws_bytes = (size_t)64 << 20;
	size_t need = 0;
	if (cusparseLtMatmulGetWorkspace(&c->h, &c->plan, &need) == CUSPARSE_STATUS_SUCCESS &&
	    need > c->ws_bytes)
		c->ws_bytes = need;
	c->ws = dalloc(c->ws_bytes);
	// alpha and beta are floats for every compute type in cuSPARSELt.
	float alpha = 1.0f, beta = 0.0f;
	st = cusparseLtMatmulSearch(&c->h, &c->plan, &alpha, ptr(c->comp[0]), ptr(b), &beta, ptr(c->d),
				    ptr(c->d), ptr(c->ws), &st_, 1);
	if (st != CUSPARSE_STATUS_SUCCESS) {
		snprintf(why, whylen, "cusparseLtMatmulSearch: %d", (int)st);
		return -EIO;
	}
	// The search may pick a configuration that needs more workspace.
	if (cusparseLtMatmulGetWorkspace(&c->h, &c->plan, &need) == CUSPARSE_STATUS_SUCCESS &&
	    need > c->ws_bytes) {
		nv_drv.cuMemFree(c->ws);
		c->ws_bytes = need;
		c->ws = dalloc(need);
	}
	int alg = -1;
	cusparseLtMatmulAlgGetAttribute(&c->h, &c->sel, CUSPARSELT_MATMUL_ALG_CONFIG_ID, &alg, sizeof(alg));
	fprintf(stderr, "  cuSPARSELt %d: %dx%dx%d out %s, searched config %d, workspace %zu\n", version,
		m, n, k, c->out_name, alg, c->ws_bytes);
	return 0;
}

int cslt_run(struct cslt *c, int copy, CUstream s)
{
	float alpha = 1.0f, beta = 0.0f;
	cudaStream_t st_ = (cudaStream_t)s;
	cusparseStatus_t st = cusparseLtMatmul(&c->h, &c->plan, &alpha, ptr(c->comp[copy % c->ncomp]),
					       ptr(c->b), &beta, ptr(c->d), ptr(c->d), ptr(c->ws), &st_, 1);
	return st == CUSPARSE_STATUS_SUCCESS ? 0 : -EIO;
}

int cslt_copies(const struct cslt *c)
{
	return c->ncomp;
}

CUdeviceptr cslt_d(const struct cslt *c)
{
	return c->d;
}

const char *cslt_out_name(const struct cslt *c)
{
	return c->out_name;
}

int cslt_out_same(const struct cslt *c)
{
	return c->out_same;
}

void cslt_destroy(struct cslt *c)
{
	if (!c)
		return;
	if (c->have_plan)
		cusparseLtMatmulPlanDestroy(&c->plan);
	if (c->have_desc) {
		cusparseLtMatDescriptorDestroy(&c->ma);
		cusparseLtMatDescriptorDestroy(&c->mb);
		cusparseLtMatDescriptorDestroy(&c->mc);
	}
	if (c->have_handle)
		cusparseLtDestroy(&c->h);
	for (int i = 0; i < c->ncomp; i++)
		if (c->comp[i])
			nv_drv.cuMemFree(c->comp[i]);
	if (c->ws)
		nv_drv.cuMemFree(c->ws);
	if (c->d)
		nv_drv.cuMemFree(c->d);
	free(c);
}
