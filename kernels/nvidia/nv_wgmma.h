/* Host side of the sm_90a wgmma.sp and dense wgmma kernels that talks to
 * the driver: loading their cubin into a context, packing a weight into
 * their stage images, the GEMM launch with its tensor map of B.  Library code: 0 or a negative errno (with a
 * sentence in err where given), never logs. */
#ifndef MFMA_NV_WGMMA_H
#define MFMA_NV_WGMMA_H

#include "nv_driver.h"
#include "nv_wgmma_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct nv_wg_module {
	CUmodule mod;
	CUfunction gemm[2][2][NV_WG_TILE_COUNT]; /* [dense][bf16][tile] */
	int occ[2][2][NV_WG_TILE_COUNT];         /* resident CTAs per SM, 0 if unusable */
	CUfunction gemm_rm[2][NV_WG_TILE_COUNT]; /* dense, A row-major: [bf16][tile] */
	int occ_rm[2][NV_WG_TILE_COUNT];
	CUfunction pack, pack_dense;
	int sms;
};

/* -ENOTSUP (with the reason) on a device the kernels do not run on. */
int nv_wg_module_load(struct nv_wg_module *m, CUdevice dev, char *err, size_t errlen);
void nv_wg_module_unload(struct nv_wg_module *m);

/* A in the kernels' layout (nv_wgmma_layout.h): 2:4 (values and meta as
 * stage images) or dense (val: dense stage images, meta 0; or, with lda
 * > 0, row-major [m][lda] read by TMA, lda a multiple of 8 of at least k:
 * the daemon's is nv_wg_dense_lda(k)). */
struct nv_wg_packed {
	int bf16, dense;
	int64_t m, k;
	int64_t lda; /* dense only: 0 for stage images */
	CUdeviceptr val, meta; /* nv_wg_img_bytes / nv_wg_meta_bytes, nv_wg_dimg_bytes, or m x lda */
};

/* Packs A into dst's layout: for a 2:4 dst, canonical values [m][k/2]
 * (src) and meta [m][ceil(k/32)] (src_meta); for a dense one, A [m][k]
 * row-major (src; src_meta unused). */
int nv_wg_launch_pack(const struct nv_wg_module *m, CUstream s, CUdeviceptr src, CUdeviceptr src_meta,
		      const struct nv_wg_packed *dst);

/* Stages of A past the first ring that a kernel launched before its B may
 * be read (the gate, a dependent launch) prefetches into L2 while it
 * waits (nv_wg_args.gate_l2): on the H200 (wgmma_bench gate) 8 was as
 * fast as 16 or 32 at every decode shape and 0-3 us faster than none. */
#define NV_WG_GATE_L2 8

/* The rest of one GEMM: B [k][ldb] 16-bit (ldb a multiple of 8, the
 * address 16-byte aligned: TMA's rules), C and D [m][ldc/ldd]. */
struct nv_wg_args {
	CUdeviceptr b, c, d;
	int32_t n, ldb, ldc, ldd;
	int32_t out_dtype; /* enum mfma_dtype: f32 or the input type */
	float alpha, beta;
	/* 0, or launched before B is on the device: nv_wg_params.gate. */
	CUdeviceptr gate;
	uint32_t gate_seq;
	int32_t gate_l2;
	/* 0, or D's home in mapped host memory, where the kernel copies its
	 * tiles of D (d) itself: nv_wg_params.dh. */
	CUdeviceptr dh;
	/* 1: a programmatic dependent launch (nv_wg_params.pdl) where the
	 * driver has cuLaunchKernelEx, an ordinary one otherwise: the kernel
	 * may start loading A (and gate_l2 stages into L2) while the previous
	 * kernel on the stream still runs, and reads B and C, writes D only
	 * after that kernel has ended.  B, C and D may then be that kernel's
	 * output or input.  For launches that follow a kernel: measured on
	 * the H200 in chains of launches (bench_nv, BENCH_NV_CHAIN), faster on
	 * the tiles of one CTA an SM (128 x 128, 128 x 256) and slower on the
	 * skinny unsplit and dense ones; after a copy or an event it gains
	 * nothing and costs up to 1 us (bench/RESULTS.md).  The daemon does
	 * not ask for it (docs/architecture.md says where it might). */
	int32_t pdl;
};

/* Launches the planned GEMM; ws and counters must hold plan->ws_bytes and
 * plan->counters words (the counters zeroed once when allocated). */
int nv_wg_launch_gemm(const struct nv_wg_module *m, const struct nv_wg_plan *plan, const struct nv_wg_packed *a,
		      const struct nv_wg_args *g, CUdeviceptr ws, CUdeviceptr counters, CUstream s, char *err,
		      size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
