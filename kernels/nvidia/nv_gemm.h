/* Host side of the NVIDIA kernels that talks to the driver: loading the
 * embedded images into a context, and the launches.  Used by the CUDA
 * backend, the device tests and the kernel benchmark.  Library code:
 * returns 0 or a negative errno (with a sentence in err where given),
 * never logs. */
#ifndef MFMA_NV_GEMM_H
#define MFMA_NV_GEMM_H

#include "nv_driver.h"
#include "nv_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct nv_kernel {
	CUfunction fn;
	struct nv_tile_shape shape;
	int occ; /* resident CTAs per SM, 0 if the variant cannot run here */
};

/* The kernels of one device, loaded in its (current) context. */
struct nv_module {
	CUmodule mod[NV_UNIT_COUNT];
	const struct nv_image *image[NV_UNIT_COUNT];
	struct nv_kernel gemm[NV_KIND_COUNT][NV_TILE_COUNT];
	CUfunction pack_a, pack_meta, transpose_b8;
	int cc, sms;
};

int nv_module_load(struct nv_module *m, CUdevice dev, char *err, size_t errlen);
void nv_module_unload(struct nv_module *m);

/* Occupancy table of one kind, for nv_plan_make. */
void nv_module_occ(const struct nv_module *m, int kind, int occ[NV_TILE_COUNT]);

/* A on the device in packed form (nv_layout.h). */
struct nv_packed {
	int kind;
	int64_t m, k;
	CUdeviceptr a, meta; /* meta is 0 for dense kinds */
};

/* Packs a dense A [m][k] (src) or canonical 2:4 values [m][k/2] (src)
 * and meta [m][ceil(k/32)] (src_meta) into dst->a / dst->meta, which
 * must hold nv_packed_a_bytes / nv_packed_meta_bytes. */
int nv_launch_pack(const struct nv_module *m, CUstream s, CUdeviceptr src, CUdeviceptr src_meta,
		   const struct nv_packed *dst);

/* Bt [n][ldbt] = B [k][ldb] (8-bit), zero for k <= j < ldbt; ldbt must be
 * a multiple of 32 and at least nv_k_pad(k). */
int nv_launch_transpose_b8(const struct nv_module *m, CUstream s, CUdeviceptr b, int k, int n,
			   int ldb, CUdeviceptr bt, int ldbt);

/* The data-movement kernels of a batched launch, whichever provider runs
 * its GEMM: loaded alone (the util image only) in the current context. */
struct nv_util {
	CUmodule mod;
	CUfunction batch_cols, copy_spans;
	int sms;
};
int nv_util_load(struct nv_util *u, CUdevice dev, char *err, size_t errlen);
void nv_util_unload(struct nv_util *u);

/* A batched launch's operand joined from its parts or split back into
 * them (nv_batch_params in nv_layout.h). */
int nv_launch_batch_cols(const struct nv_util *u, CUstream s, const struct nv_batch_params *p);

/* Copies p->count spans (nv_copy_params in nv_layout.h) of at most
 * max_bytes each: the spans' table must be on the device already. */
int nv_launch_copy_spans(const struct nv_util *u, CUstream s, const struct nv_copy_params *p,
			 uint64_t max_bytes);

/* Launches the planned GEMM.  p holds the operands (p->a / p->meta from a
 * struct nv_packed, p->b as described in nv_layout.h, c, d), m, n, k,
 * ldb/ldc/ldd, out_dtype, alpha, beta; the rest is filled in from the plan.
 * ws and counters must hold plan->ws_bytes and plan->counters words (the
 * counters zeroed once when allocated). */
int nv_launch_gemm(const struct nv_module *m, const struct nv_plan *plan,
		   const struct nv_gemm_params *p, CUdeviceptr ws, CUdeviceptr counters, CUstream s);

#ifdef __cplusplus
}
#endif

#endif
