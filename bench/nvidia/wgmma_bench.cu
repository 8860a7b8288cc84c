/* The sm_90a wgmma.sp kernels on the H200: the metadata-layout probe,
 * correctness against a float64 reference, and timings beside cuBLAS
 * dense in one run.  Built by bench/nvidia/build_wgmma.sh with nvcc
 * (-gencode arch=compute_90a,code=sm_90a); it uses the CUDA runtime (the
 * daemon runs the same kernels through the driver API, nv_wgmma.c).
 *
 *   wgmma_bench probe        the one-warpgroup probe (f16, bf16)
 *   wgmma_bench check        odd shapes, every tile, split and output dtype,
 *                            2:4 and dense, each on every layout its kernels
 *                            read (WG_KIND=sparse|dense: one of them;
 *                            WG_QUICK: the small shapes, for compute-sanitizer;
 *                            WG_CLUSTER=1: the cl2_ kernels, clusters of two
 *                            CTAs multicasting B, at the shapes of even row tiles;
 *                            WG_GROUP=2 or 4: the g2_ or g4_ kernels, two or
 *                            four stages a wgmma group; WG_DEEP=1: the deep_
 *                            ones, one CTA an SM with the deepest ring;
 *                            WG_INFLIGHT=1: the k2_ ones, one wgmma.sp group
 *                            kept in flight across stages; WG_QUEUE=1: the q_
 *                            ones, a persistent grid taking units in turn;
 *                            WG_QUEUE=2: the q2_ ones, two CTAs an SM;
 *                            WG_CSUM=1: the cs_ ones, the split-K sum
 *                            through a cluster's shared memory; WG_W1=1:
 *                            the w1_ ones, one consumer warpgroup over
 *                            128 rows, unsplit; WG_PRODUCERS=1: the p3_
 *                            ones, three producer threads)
 *   wgmma_bench dcheck       the decode kernels: odd shapes, N = 1 .. 64, grids
 *   wgmma_bench raceprobe M  the mbarrier protocol alone, to run under racecheck
 *   wgmma_bench trace MxNxK S  when each CTA of one launch (split-K S) starts and ends
 *   wgmma_bench gate [MxNxK ...]  one request alone, B copied in then the kernel,
 *                            against the kernel launched first and waiting for
 *                            B at its gate (WG_GATE_L2="0 8 16 32": stages of A
 *                            prefetched into L2 meanwhile; WG_GATE_GAP idle us
 *                            between requests, WG_GATE_REPS); then D written
 *                            across the bus by the kernel's epilogue, without
 *                            and with the gate, against the copy out
 *   wgmma_bench streamprobe  how fast bulk copies stream a decode weight
 *                            (chunk, ring depth, grid, order) beside plain loads
 *   wgmma_bench bench [MxNxK ...]   timings (default: the issue's four shapes) of
 *                            the 2:4 kernels on each layout of A (WG_ABBA=1: a
 *                            second pass in the reverse order; WG_NODECODE=1:
 *                            no decode kernels; WG_IMAGES=1: the daemon's
 *                            layout only); WG_KIND=dense times the dense
 *                            kernels instead, on a fully random dense A, beside
 *                            cublasGemmEx: the daemon's on A's dense stage
 *                            images, its dense_rm_ ones on the row-major A; WG_KEEP="0 20 40": the daemon's tile
 *                            on one hot weight with that many MB kept in L2;
 *                            WG_SPREAD=1: grids of at most one CTA per SM launched
 *                            with enough shared memory that no two share an SM;
 *                            WG_VARIANTS="f16_ cs_": only the kernels whose
 *                            names start so
 *
 * Every check draws fresh random data and random 2:4 patterns, poisons D
 * first and compares with float64 (the whole of D for the checks; 32
 * random rows of D for the benchmark shapes) by ||out - ref|| / ||ref||. */
#include <cublas_v2.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

#include "nv_wgmma.cuh"

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/* ---- kernels under test ---- */

/* The kernels the daemon embeds (nv_kernels_wg.cu: every tile of
 * NV_WG_TILES, f16 and bf16, KEEP = 0, A as stage images in the order
 * NV_WG_ORDER), and to compare the same 2:4 kernels reading row-major A
 * by TMA (tma_*: the daemon's before the stage images), the images in
 * the other order (alt_*), and nomath_*: the daemon's kernel with the
 * consumers' wgmma left out (results wrong: the time the pipeline takes
 * to stream the weight alone). */
#include "nv_kernels_wg.cu"
#include "nv_wgmma_plan.h"
#define WG_ALT_ORDER (NV_WG_ORDER == NV_WG_IMG_STAGES ? NV_WG_IMG_TILES : NV_WG_IMG_STAGES)
template <int BF16>
using wg_sp24_alt = nv_wg_sp24<BF16, WG_ALT_ORDER>;
struct wg_nomath : nv_wg_sp24<0, NV_WG_ORDER> {
	template <int BN>
	static __device__ __forceinline__ void meta(const char *, unsigned, unsigned, unsigned, uint32_t e[2])
	{
		e[0] = e[1] = 0;
	}
	template <int BN>
	static __device__ __forceinline__ void issue(float *, uint32_t, unsigned, const uint32_t *)
	{
	}
};
#define WG_TMA_F16(name, bn, st, minb) NV_WG_DEFINE_KERNEL(tma_f16_##name, nv_wg_sp24_tma<0>, bn, st, minb, 0)
#define WG_TMA_BF16(name, bn, st, minb) NV_WG_DEFINE_KERNEL(tma_bf16_##name, nv_wg_sp24_tma<1>, bn, st, minb, 0)
#define WG_ALT_F16(name, bn, st, minb) NV_WG_DEFINE_KERNEL(alt_f16_##name, wg_sp24_alt<0>, bn, st, minb, 0)
#define WG_ALT_BF16(name, bn, st, minb) NV_WG_DEFINE_KERNEL(alt_bf16_##name, wg_sp24_alt<1>, bn, st, minb, 0)
NV_WG_TILES(WG_TMA_F16)
NV_WG_TILES(WG_TMA_BF16)
NV_WG_TILES(WG_ALT_F16)
NV_WG_TILES(WG_ALT_BF16)
NV_WG_DEFINE_KERNEL(nomath_f16_n16, wg_nomath, 16, 9, 2, 0)
NV_WG_DEFINE_KERNEL(nomath_f16_n64, wg_nomath, 64, 6, 2, 0)
/* A kernel nv_wg_<name> running nv_wg_gemm<...>::entry (run, or
 * run_queue; the template's arguments after it; attr: more attributes,
 * such as its cluster's dims). */
#define WG_GEMM_ENTRY(name, attr, minb, entry, ...)                                                         \
	extern "C" __global__ void attr __launch_bounds__(NV_WG_THREADS, minb) nv_wg_##name(                    \
		const __grid_constant__ nv_wg_params p)                                                         \
	{                                                                                                       \
		extern __shared__ __align__(1024) char nv_wg_smem_raw[];                                        \
		nv_wg_gemm<__VA_ARGS__>::entry(p, nv_wg_smem_raw);                                              \
	}
#define WG_GEMM_KERNEL(name, attr, minb, ...) WG_GEMM_ENTRY(name, attr, minb, run, __VA_ARGS__)
/* warp_*: the daemon's kernels with one `empty` arrival per warp (ALL = 0
 * in nv_wgmma.cuh) instead of one per consumer thread. */
#define WG_WARP_KERNEL(name, bn, stages, minb) \
	WG_GEMM_KERNEL(warp_##name, , minb, nv_wg_sp24_img<0>, bn, stages, minb, 0, 0)
WG_WARP_KERNEL(f16_n16, 16, 9, 2)
/* trace_*: the daemon's kernels writing each CTA's start, main-loop end,
 * end and SM (nv_wg_gemm's TRACE; `wgmma_bench trace`). */
#define WG_TRACE_KERNEL(name, bn, stages, minb)                                                             \
	extern "C" __global__ void __launch_bounds__(NV_WG_THREADS, minb) nv_wg_trace_##name(                   \
		const __grid_constant__ nv_wg_params p, unsigned long long *trace)                              \
	{                                                                                                       \
		extern __shared__ __align__(1024) char nv_wg_smem_raw[];                                        \
		nv_wg_gemm<nv_wg_sp24_img<0>, bn, stages, minb, 0, 1, 1>::run(p, nv_wg_smem_raw, trace);        \
	}
WG_TRACE_KERNEL(f16_n16, 16, 9, 2)
WG_TRACE_KERNEL(f16_n64, 64, 6, 2)
WG_WARP_KERNEL(f16_n64, 64, 6, 2)
WG_WARP_KERNEL(f16_n256, 256, 5, 1)
/* cl2_*: the daemon's kernels in clusters of two CTAs along M, B's boxes
 * split between the pair and multicast to both (nv_wg_gemm's CL = 2):
 * half the L2 reads of B.  Only where the tile has an even count of B
 * boxes (n128, n256) and the grid an even count of row tiles. */
#define WG_CL2_KERNEL(name, op, bn, stages, minb, keep)                            \
	WG_GEMM_KERNEL(cl2_##name, __cluster_dims__(2, 1, 1), minb, op, bn, stages, minb, keep, \
		       !op::DENSE, 0, 2)
WG_CL2_KERNEL(f16_n128, nv_wg_sp24_img<0>, 128, 8, 1, 0)
WG_CL2_KERNEL(f16_n256, nv_wg_sp24_img<0>, 256, 5, 1, 0)
WG_CL2_KERNEL(bf16_n128, nv_wg_sp24_img<1>, 128, 8, 1, 0)
WG_CL2_KERNEL(bf16_n256, nv_wg_sp24_img<1>, 256, 5, 1, 0)
WG_CL2_KERNEL(dense_f16_n128, nv_wg_dense_img<0>, 128, 6, 1, 1)
WG_CL2_KERNEL(dense_f16_n256, nv_wg_dense_img<0>, 256, 4, 1, 1)
WG_CL2_KERNEL(dense_bf16_n128, nv_wg_dense_img<1>, 128, 6, 1, 1)
WG_CL2_KERNEL(dense_bf16_n256, nv_wg_dense_img<1>, 256, 4, 1, 1)

/* g2_*, g4_*: the daemon's 2:4 kernels issuing two (four) stages a
 * wgmma group (nv_wg_gemm's GRP): one wait for the wgmma pipeline to
 * drain per two (four) stages. */
#define WG_GRP_KERNEL(name, op, bn, stages, minb, grp) \
	WG_GEMM_KERNEL(g##grp##_##name, , minb, op, bn, stages, minb, 0, 1, 0, 1, grp)
#define WG_G2_F16(name, bn, st, minb) WG_GRP_KERNEL(f16_##name, nv_wg_sp24_img<0>, bn, st, minb, 2)
#define WG_G2_BF16(name, bn, st, minb) WG_GRP_KERNEL(bf16_##name, nv_wg_sp24_img<1>, bn, st, minb, 2)
NV_WG_TILES(WG_G2_F16)
NV_WG_TILES(WG_G2_BF16)
WG_GRP_KERNEL(f16_n128, nv_wg_sp24_img<0>, 128, 8, 1, 4)
WG_GRP_KERNEL(f16_n64, nv_wg_sp24_img<0>, 64, 6, 2, 4)
WG_GRP_KERNEL(f16_n32, nv_wg_sp24_img<0>, 32, 8, 2, 4)
WG_GRP_KERNEL(f16_n16, nv_wg_sp24_img<0>, 16, 9, 2, 4)
/* deep_*: the skinny tiles with one CTA an SM and the ring as deep as
 * its shared memory allows (cuSPARSELt's 128 x 64 kernel at 4096 x 256 x
 * 4096 runs one CTA an SM with 232 KB), against the daemon's two CTAs an
 * SM with rings of 6-9 stages. */
NV_WG_DEFINE_KERNEL(deep_f16_n64, nv_wg_sp24_img<0>, 64, 13, 1, 0)
NV_WG_DEFINE_KERNEL(deep_f16_n32, nv_wg_sp24_img<0>, 32, 17, 1, 0)
NV_WG_DEFINE_KERNEL(deep_f16_n16, nv_wg_sp24_img<0>, 16, 20, 1, 0)

/* k2_*: the daemon's 2:4 kernels with KEEP = 2 (nv_wgmma.cuh): one
 * wgmma.sp group kept in flight across stages, the metadata registers in
 * two sets, each pinned until its group is complete. */
#define WG_K2_F16(name, bn, st, minb) WG_GEMM_KERNEL(k2_f16_##name, , minb, nv_wg_sp24_img<0>, bn, st, minb, 2)
#define WG_K2_BF16(name, bn, st, minb) WG_GEMM_KERNEL(k2_bf16_##name, , minb, nv_wg_sp24_img<1>, bn, st, minb, 2)
NV_WG_TILES(WG_K2_F16)
NV_WG_TILES(WG_K2_BF16)

/* q_*: the daemon's skinny 2:4 kernels run as the queue (nv_wg_gemm's
 * run_queue): one CTA an SM taking the launch's (tile, split) units in
 * turn (q2_: the same kernels, two CTAs an SM). */
#define WG_Q_F16(name, bn, st, minb) \
	WG_GEMM_ENTRY(q_f16_##name, , minb, run_queue, nv_wg_sp24_img<0>, bn, st, minb, 0)
WG_Q_F16(n64, 64, 6, 2)
WG_Q_F16(n32, 32, 8, 2)
WG_Q_F16(n16, 16, 9, 2)

/* cs_*: the daemon's 2:4 kernels with the split-K sum through the
 * cluster's shared memory (nv_wg_gemm's CSUM = 1), launched in clusters
 * of the tile's splits (at most 8); every tile (the widest never splits,
 * so its cs_ kernel runs as the daemon's). */
#define WG_CS_F16(name, bn, st, minb) \
	WG_GEMM_KERNEL(cs_f16_##name, , minb, nv_wg_sp24_img<0>, bn, st, minb, 0, 1, 0, 1, 1, 1)
#define WG_CS_BF16(name, bn, st, minb) \
	WG_GEMM_KERNEL(cs_bf16_##name, , minb, nv_wg_sp24_img<1>, bn, st, minb, 0, 1, 0, 1, 1, 1)
NV_WG_TILES(WG_CS_F16)
NV_WG_TILES(WG_CS_BF16)

/* w1_*: one consumer warpgroup over the tile's 128 rows (nv_wg_gemm's
 * run_w1; 256 threads), unsplit launches only; w1_f16_n64d with one CTA
 * an SM and the deepest ring, as cuSPARSELt's 128 x 64 kernel runs. */
#define WG_W1_KERNEL(name, op, bn, stages, minb)                                                            \
	extern "C" __global__ void __launch_bounds__(256, minb) nv_wg_w1_##name(const __grid_constant__ nv_wg_params p) \
	{                                                                                                       \
		extern __shared__ __align__(1024) char nv_wg_smem_raw[];                                        \
		nv_wg_gemm<op, bn, stages, minb, 0>::run_w1(p, nv_wg_smem_raw);                                 \
	}
WG_W1_KERNEL(f16_n128, nv_wg_sp24_img<0>, 128, 8, 1)
WG_W1_KERNEL(f16_n64, nv_wg_sp24_img<0>, 64, 6, 2)
WG_W1_KERNEL(f16_n64d, nv_wg_sp24_img<0>, 64, 13, 1)
WG_W1_KERNEL(f16_n32, nv_wg_sp24_img<0>, 32, 8, 2)
WG_W1_KERNEL(bf16_n128, nv_wg_sp24_img<1>, 128, 8, 1)
WG_W1_KERNEL(bf16_n64, nv_wg_sp24_img<1>, 64, 6, 2)

/* p3_*: the daemon's 2:4 kernels with three producer threads, one each
 * for A's values, B and the metadata (nv_wg_gemm's PW3), at every tile
 * (the daemon's have them on n128 only). */
#define WG_P3_F16(name, bn, st, minb) \
	WG_GEMM_KERNEL(p3_f16_##name, , minb, nv_wg_sp24_img<0>, bn, st, minb, 0, 1, 0, 1, 1, 0, 1)
#define WG_P3_BF16(name, bn, st, minb) \
	WG_GEMM_KERNEL(p3_bf16_##name, , minb, nv_wg_sp24_img<1>, bn, st, minb, 0, 1, 0, 1, 1, 0, 1)
NV_WG_TILES(WG_P3_F16)
NV_WG_TILES(WG_P3_BF16)

/* keep_f16_n128: KEEP = 1 on a 2:4 kernel (wrong, nv_wgmma.cuh), built
 * only for its SASS (device_round.sh group): where the metadata register
 * of the group in flight is written next.  Never launched. */
NV_WG_DEFINE_KERNEL(keep_f16_n128, nv_wg_sp24_img<0>, 128, 8, 1, 1)

struct variant {
	const char *name;
	int dense, tile, bf16, bn, stages, minb, keep;
	void (*fn)(const nv_wg_params);
	unsigned smem;
	int order; /* A's layout, enum nv_wg_order */
	int cl;    /* 2: a cl2_ kernel (clusters of two along M); 0 otherwise */
	int queue; /* a q_ kernel: a persistent grid of this many CTAs an SM */
	int csum;  /* a cs_ kernel: launched in clusters of the tile's splits */
	int w1;    /* a w1_ kernel: 256 threads, unsplit launches only */
};

static variant variants[] = {
#define WG_ENTRY_F16(name, bn, st, minb) \
	{ "f16_" #name, 0, NV_WG_TILE_##name, 0, bn, st, minb, 0, nv_wg_f16_##name, NV_WG_SMEM_BYTES(bn, st), NV_WG_ORDER },
#define WG_ENTRY_BF16(name, bn, st, minb) \
	{ "bf16_" #name, 0, NV_WG_TILE_##name, 1, bn, st, minb, 0, nv_wg_bf16_##name, NV_WG_SMEM_BYTES(bn, st), NV_WG_ORDER },
#define WG_ENTRY_AF16(name, bn, st, minb) \
	{ "alt_f16_" #name, 0, NV_WG_TILE_##name, 0, bn, st, minb, 0, nv_wg_alt_f16_##name, NV_WG_SMEM_BYTES(bn, st), WG_ALT_ORDER },
#define WG_ENTRY_ABF16(name, bn, st, minb) \
	{ "alt_bf16_" #name, 0, NV_WG_TILE_##name, 1, bn, st, minb, 0, nv_wg_alt_bf16_##name, NV_WG_SMEM_BYTES(bn, st), WG_ALT_ORDER },
#define WG_ENTRY_TF16(name, bn, st, minb) \
	{ "tma_f16_" #name, 0, NV_WG_TILE_##name, 0, bn, st, minb, 0, nv_wg_tma_f16_##name, NV_WG_SMEM_BYTES(bn, st), 0 },
#define WG_ENTRY_TBF16(name, bn, st, minb) \
	{ "tma_bf16_" #name, 0, NV_WG_TILE_##name, 1, bn, st, minb, 0, nv_wg_tma_bf16_##name, NV_WG_SMEM_BYTES(bn, st), 0 },
#define WG_ENTRY_DF16(name, bn, st, minb) \
	{ "dense_f16_" #name, 1, NV_WG_TILE_##name, 0, bn, st, minb, 1, nv_wg_dense_f16_##name, NV_WG_DSMEM_BYTES(bn, st), NV_WG_ORDER },
#define WG_ENTRY_DBF16(name, bn, st, minb) \
	{ "dense_bf16_" #name, 1, NV_WG_TILE_##name, 1, bn, st, minb, 1, nv_wg_dense_bf16_##name, NV_WG_DSMEM_BYTES(bn, st), NV_WG_ORDER },
#define WG_ENTRY_DTF16(name, bn, st, minb) \
	{ "dense_rm_f16_" #name, 1, NV_WG_TILE_##name, 0, bn, st, minb, 1, nv_wg_dense_rm_f16_##name, NV_WG_DSMEM_BYTES(bn, st), 0 },
#define WG_ENTRY_DTBF16(name, bn, st, minb) \
	{ "dense_rm_bf16_" #name, 1, NV_WG_TILE_##name, 1, bn, st, minb, 1, nv_wg_dense_rm_bf16_##name, NV_WG_DSMEM_BYTES(bn, st), 0 },
	NV_WG_TILES(WG_ENTRY_F16) NV_WG_TILES(WG_ENTRY_BF16)
	NV_WG_TILES(WG_ENTRY_TF16) NV_WG_TILES(WG_ENTRY_TBF16)
	NV_WG_TILES(WG_ENTRY_AF16) NV_WG_TILES(WG_ENTRY_ABF16)
	NV_WG_DTILES(WG_ENTRY_DF16) NV_WG_DTILES(WG_ENTRY_DBF16)
	NV_WG_DTILES(WG_ENTRY_DTF16) NV_WG_DTILES(WG_ENTRY_DTBF16)
	{ "nomath_f16_n16", 0, NV_WG_TILE_n16, 0, 16, 9, 2, 0, nv_wg_nomath_f16_n16, NV_WG_SMEM_BYTES(16, 9), NV_WG_ORDER },
	{ "nomath_f16_n64", 0, NV_WG_TILE_n64, 0, 64, 6, 2, 0, nv_wg_nomath_f16_n64, NV_WG_SMEM_BYTES(64, 6), NV_WG_ORDER },
	{ "warp_f16_n16", 0, NV_WG_TILE_n16, 0, 16, 9, 2, 0, nv_wg_warp_f16_n16, NV_WG_SMEM_BYTES(16, 9), NV_WG_ORDER },
	{ "warp_f16_n64", 0, NV_WG_TILE_n64, 0, 64, 6, 2, 0, nv_wg_warp_f16_n64, NV_WG_SMEM_BYTES(64, 6), NV_WG_ORDER },
	{ "warp_f16_n256", 0, NV_WG_TILE_n256, 0, 256, 5, 1, 0, nv_wg_warp_f16_n256, NV_WG_SMEM_BYTES(256, 5), NV_WG_ORDER },
/* The 2:4 kernels of a family fam_ (g2_, k2_, p3_, cs_) at every tile,
 * f16 and bf16; the fields after order, where a family sets them. */
#define WG_FAM_ENTRY(fam, dt, bf16, name, bn, st, minb, ...)                                                  \
	{ #fam "_" #dt "_" #name, 0, NV_WG_TILE_##name, bf16, bn, st, minb, 0, nv_wg_##fam##_##dt##_##name,      \
	  NV_WG_SMEM_BYTES(bn, st), NV_WG_ORDER, __VA_ARGS__ },
#define WG_G2_EF16(name, bn, st, minb) WG_FAM_ENTRY(g2, f16, 0, name, bn, st, minb)
#define WG_G2_EBF16(name, bn, st, minb) WG_FAM_ENTRY(g2, bf16, 1, name, bn, st, minb)
#define WG_K2_EF16(name, bn, st, minb) WG_FAM_ENTRY(k2, f16, 0, name, bn, st, minb)
#define WG_K2_EBF16(name, bn, st, minb) WG_FAM_ENTRY(k2, bf16, 1, name, bn, st, minb)
#define WG_P3_EF16(name, bn, st, minb) WG_FAM_ENTRY(p3, f16, 0, name, bn, st, minb)
#define WG_P3_EBF16(name, bn, st, minb) WG_FAM_ENTRY(p3, bf16, 1, name, bn, st, minb)
/* cl 0, queue 0, csum 1 */
#define WG_CS_EF16(name, bn, st, minb) WG_FAM_ENTRY(cs, f16, 0, name, bn, st, minb, 0, 0, 1)
#define WG_CS_EBF16(name, bn, st, minb) WG_FAM_ENTRY(cs, bf16, 1, name, bn, st, minb, 0, 0, 1)
	NV_WG_TILES(WG_G2_EF16) NV_WG_TILES(WG_G2_EBF16)
	NV_WG_TILES(WG_K2_EF16) NV_WG_TILES(WG_K2_EBF16)
	NV_WG_TILES(WG_P3_EF16) NV_WG_TILES(WG_P3_EBF16)
	NV_WG_TILES(WG_CS_EF16) NV_WG_TILES(WG_CS_EBF16)
#undef WG_G2_EF16
#undef WG_G2_EBF16
#undef WG_K2_EF16
#undef WG_K2_EBF16
#undef WG_P3_EF16
#undef WG_P3_EBF16
#undef WG_CS_EF16
#undef WG_CS_EBF16
#undef WG_FAM_ENTRY
	{ "q_f16_n64", 0, NV_WG_TILE_n64, 0, 64, 6, 2, 0, nv_wg_q_f16_n64, NV_WG_SMEM_BYTES(64, 6), NV_WG_ORDER, 0, 1 },
	{ "q_f16_n32", 0, NV_WG_TILE_n32, 0, 32, 8, 2, 0, nv_wg_q_f16_n32, NV_WG_SMEM_BYTES(32, 8), NV_WG_ORDER, 0, 1 },
	{ "q_f16_n16", 0, NV_WG_TILE_n16, 0, 16, 9, 2, 0, nv_wg_q_f16_n16, NV_WG_SMEM_BYTES(16, 9), NV_WG_ORDER, 0, 1 },
	{ "q2_f16_n64", 0, NV_WG_TILE_n64, 0, 64, 6, 2, 0, nv_wg_q_f16_n64, NV_WG_SMEM_BYTES(64, 6), NV_WG_ORDER, 0, 2 },
	{ "q2_f16_n32", 0, NV_WG_TILE_n32, 0, 32, 8, 2, 0, nv_wg_q_f16_n32, NV_WG_SMEM_BYTES(32, 8), NV_WG_ORDER, 0, 2 },
	{ "q2_f16_n16", 0, NV_WG_TILE_n16, 0, 16, 9, 2, 0, nv_wg_q_f16_n16, NV_WG_SMEM_BYTES(16, 9), NV_WG_ORDER, 0, 2 },
	{ "deep_f16_n64", 0, NV_WG_TILE_n64, 0, 64, 13, 1, 0, nv_wg_deep_f16_n64, NV_WG_SMEM_BYTES(64, 13), NV_WG_ORDER },
	{ "deep_f16_n32", 0, NV_WG_TILE_n32, 0, 32, 17, 1, 0, nv_wg_deep_f16_n32, NV_WG_SMEM_BYTES(32, 17), NV_WG_ORDER },
	{ "deep_f16_n16", 0, NV_WG_TILE_n16, 0, 16, 20, 1, 0, nv_wg_deep_f16_n16, NV_WG_SMEM_BYTES(16, 20), NV_WG_ORDER },
	{ "g4_f16_n128", 0, NV_WG_TILE_n128, 0, 128, 8, 1, 0, nv_wg_g4_f16_n128, NV_WG_SMEM_BYTES(128, 8), NV_WG_ORDER },
	{ "g4_f16_n64", 0, NV_WG_TILE_n64, 0, 64, 6, 2, 0, nv_wg_g4_f16_n64, NV_WG_SMEM_BYTES(64, 6), NV_WG_ORDER },
	{ "g4_f16_n32", 0, NV_WG_TILE_n32, 0, 32, 8, 2, 0, nv_wg_g4_f16_n32, NV_WG_SMEM_BYTES(32, 8), NV_WG_ORDER },
	{ "g4_f16_n16", 0, NV_WG_TILE_n16, 0, 16, 9, 2, 0, nv_wg_g4_f16_n16, NV_WG_SMEM_BYTES(16, 9), NV_WG_ORDER },
#define WG_W1_ENTRY(dt, bf16, name, tile, bn, st, minb)                                                      \
	{ "w1_" #dt "_" #name, 0, NV_WG_TILE_##tile, bf16, bn, st, minb, 0, nv_wg_w1_##dt##_##name,               \
	  NV_WG_SMEM_BYTES(bn, st), NV_WG_ORDER, 0, 0, 0, 1 },
	WG_W1_ENTRY(f16, 0, n128, n128, 128, 8, 1) WG_W1_ENTRY(f16, 0, n64, n64, 64, 6, 2)
	WG_W1_ENTRY(f16, 0, n64d, n64, 64, 13, 1) WG_W1_ENTRY(f16, 0, n32, n32, 32, 8, 2)
	WG_W1_ENTRY(bf16, 1, n128, n128, 128, 8, 1) WG_W1_ENTRY(bf16, 1, n64, n64, 64, 6, 2)
#undef WG_W1_ENTRY
#define WG_CL2_ENTRY(name, dense, tile, bf16, bn, st, keep)                                                 \
	{ "cl2_" #name, dense, NV_WG_TILE_##tile, bf16, bn, st, 1, keep, nv_wg_cl2_##name,                      \
	  dense ? NV_WG_DSMEM_BYTES(bn, st) : NV_WG_SMEM_BYTES(bn, st), NV_WG_ORDER, 2 },
	WG_CL2_ENTRY(f16_n128, 0, n128, 0, 128, 8, 0) WG_CL2_ENTRY(f16_n256, 0, n256, 0, 256, 5, 0)
	WG_CL2_ENTRY(bf16_n128, 0, n128, 1, 128, 8, 0) WG_CL2_ENTRY(bf16_n256, 0, n256, 1, 256, 5, 0)
	WG_CL2_ENTRY(dense_f16_n128, 1, n128, 0, 128, 6, 1) WG_CL2_ENTRY(dense_f16_n256, 1, n256, 0, 256, 4, 1)
	WG_CL2_ENTRY(dense_bf16_n128, 1, n128, 1, 128, 6, 1) WG_CL2_ENTRY(dense_bf16_n256, 1, n256, 1, 256, 4, 1)
#undef WG_CL2_ENTRY
#undef WG_ENTRY_AF16
#undef WG_ENTRY_ABF16
#undef WG_ENTRY_TF16
#undef WG_ENTRY_TBF16
#undef WG_ENTRY_F16
#undef WG_ENTRY_BF16
#undef WG_ENTRY_DF16
#undef WG_ENTRY_DBF16
#undef WG_ENTRY_DTF16
#undef WG_ENTRY_DTBF16
};
static const int nvariants = sizeof(variants) / sizeof(variants[0]);

/* The decode kernels (nv_wgmma_decode.cuh), built here only (the daemon
 * does not embed them: slower than the tiled kernels, bench/RESULTS.md):
 * the tiles of NV_WGD_TILES, then other stage depths and CTA shapes. */
#include "nv_wgmma_decode.cuh"
#define NV_WGD_F16(name, bn, cons, ksub, st, minb) NV_WGD_DEFINE_KERNEL(f16_##name, 0, bn, cons, ksub, st, minb, 1)
#define NV_WGD_BF16(name, bn, cons, ksub, st, minb) NV_WGD_DEFINE_KERNEL(bf16_##name, 1, bn, cons, ksub, st, minb, 1)
NV_WGD_TILES(NV_WGD_F16)
NV_WGD_TILES(NV_WGD_BF16)
/* x_<bn>_c<CONS>k<KSUB>s<STAGES>[f]: f = FENCE (nv_wgmma_decode.cuh). */
#define WGD_XLIST(X)                          \
	X(x_f16_c1k4s4f, 16, 1, 4, 4, 2, 1)   \
	X(x_f16_c2k2s5f, 16, 2, 2, 5, 2, 1)   \
	X(x_f16_c2k1s9, 16, 2, 1, 9, 2, 0)
#define WGD_XDEF(name, bn, cons, ks, st, minb, f) NV_WGD_DEFINE_KERNEL(name, 0, bn, cons, ks, st, minb, f)
WGD_XLIST(WGD_XDEF)

struct dvariant {
	const char *name;
	int tile, bf16, bn, cons, ksub, stages, minb;
	void (*fn)(const nv_wgd_params);
	unsigned smem;
	int occ; /* measured at start */
};

static dvariant dvariants[] = {
#define WGD_ENTRY_F16(name, bn, cons, ks, st, minb) \
	{ "f16_" #name, NV_WGD_TILE_##name, 0, bn, cons, ks, st, minb, nv_wgd_f16_##name, NV_WGD_SMEM_BYTES(bn, cons, ks, st), 0 },
#define WGD_ENTRY_BF16(name, bn, cons, ks, st, minb) \
	{ "bf16_" #name, NV_WGD_TILE_##name, 1, bn, cons, ks, st, minb, nv_wgd_bf16_##name, NV_WGD_SMEM_BYTES(bn, cons, ks, st), 0 },
	NV_WGD_TILES(WGD_ENTRY_F16) NV_WGD_TILES(WGD_ENTRY_BF16)
#undef WGD_ENTRY_F16
#undef WGD_ENTRY_BF16
#define WGD_X(name, bn, cons, ks, st, minb, f) \
	{ #name, -1, 0, bn, cons, ks, st, minb, nv_wgd_##name, NV_WGD_SMEM_BYTES(bn, cons, ks, st), 0 },
	WGD_XLIST(WGD_X)
#undef WGD_X
};
static const int ndvariants = sizeof(dvariants) / sizeof(dvariants[0]);

/* ---- the probe: one warpgroup, one m64n16 tile, K = 64 (two k32 steps),
 * operands in shared memory in the no-swizzle ("interleave") layout,
 * written by plain stores.  mode:
 *  0  canonical words, register nv_wg_meta_reg(W[r], W[r+8], t & 1) in
 *     threads t = 0, 1, selector 0; threads t = 2, 3 hold a legal but
 *     wrong word (0x9999...), so that the test fails if they are read
 *  1  the same register in threads t = 2, 3, selector 1; t = 0, 1 poisoned
 *  2  the packed mma.sp metadata (nv_layout.h): one register per 64 K,
 *     selector 0 for the even k32 step and 1 for the odd one
 *  3  the packed metadata with selector 0 for both steps: expected wrong
 *     (the odd step then reads the even step's pairs), the control that
 *     shows the probe can fail */
template <int BF16>
__global__ void __launch_bounds__(128) probe_kernel(const uint16_t *ac, const uint32_t *canon,
						    const uint32_t *packed, const uint16_t *bt, float *d, int mode)
{
	/* A: 64 rows x 32 compressed values; core matrix (8 rows x 8 values,
	 * 128 bytes) of row group rg and value column kc at kc * 1024 + rg * 128.
	 * Bt: 16 rows (n) x 64 K; core matrix (ng, kc) at kc * 256 + ng * 128. */
	__shared__ __align__(1024) uint16_t sa[64 * 32];
	__shared__ __align__(1024) uint16_t sb[16 * 64];
	const unsigned tid = threadIdx.x, w = tid / 32, lane = tid & 31, g = lane >> 2, t = lane & 3;
	for (int i = tid; i < 64 * 32; i += 128) {
		int r = i / 32, c = i % 32;
		sa[((c / 8) * 1024 + (r / 8) * 128 + (r % 8) * 16 + (c % 8) * 2) / 2] = ac[i];
	}
	for (int i = tid; i < 16 * 64; i += 128) {
		int n = i / 64, k = i % 64;
		sb[((k / 8) * 256 + (n / 8) * 128 + (n % 8) * 16 + (k % 8) * 2) / 2] = bt[i];
	}
	asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
	__syncthreads();
	float acc[8];
	for (int i = 0; i < 8; i++)
		acc[i] = 0.0f;
	const unsigned r = 16 * w + g;
	uint32_t e[2];
	const uint32_t poison = 0x99999999u;
	for (int ks = 0; ks < 2; ks++) {
		uint32_t reg = nv_wg_meta_reg(canon[r * 2 + ks], canon[(r + 8) * 2 + ks], t & 1);
		if (mode == 0)
			e[ks] = t < 2 ? reg : poison;
		else if (mode == 1)
			e[ks] = t >= 2 ? reg : poison;
		else
			e[ks] = packed[w * 32 + lane];
	}
	const uint32_t a0 = nv_wg_smem(sa), b0 = nv_wg_smem(sb);
	nv_wg_fence();
	/* k32 step ks: A values 16ks..16ks+15 = core column pair 2ks, 2ks+1;
	 * B K rows 32ks.. = core columns 4ks..4ks+3. */
	const uint64_t da0 = nv_wg_desc(a0, 1024, 128, 0), da1 = nv_wg_desc(a0 + 2048, 1024, 128, 0);
	const uint64_t db0 = nv_wg_desc(b0, 256, 128, 0), db1 = nv_wg_desc(b0 + 1024, 256, 128, 0);
	if (mode == 1) {
		nv_wgsp<BF16, 16, 1, 0>(acc, da0, db0, e[0]);
		nv_wgsp<BF16, 16, 1, 0>(acc, da1, db1, e[1]);
	} else if (mode == 2) {
		nv_wgsp<BF16, 16, 0, 0>(acc, da0, db0, e[0]);
		nv_wgsp<BF16, 16, 1, 0>(acc, da1, db1, e[0]);
	} else {
		nv_wgsp<BF16, 16, 0, 0>(acc, da0, db0, e[0]);
		nv_wgsp<BF16, 16, 0, 0>(acc, da1, db1, mode == 3 ? e[0] : e[1]);
	}
	nv_wg_commit();
	nv_wg_wait<0>();
	for (int i = 0; i < 8; i++) {
		unsigned row, col;
		nv_wg_acc_pos(w, lane, i, &row, &col);
		d[row * 16 + col] = acc[i];
	}
}

/* ---- host helpers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}
static float rndf(void) { return (float)((rnd() >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; }

static uint16_t to16(float x, int bf16)
{
	if (bf16) {
		__nv_bfloat16 h = __float2bfloat16_rn(x);
		return *(uint16_t *)&h;
	}
	__half h = __float2half_rn(x);
	return *(uint16_t *)&h;
}
static double from16(uint16_t v, int bf16)
{
	if (bf16)
		return (double)__bfloat162float(*(__nv_bfloat16 *)&v);
	return (double)__half2float(*(__half *)&v);
}

/* A random 2:4 matrix in canonical form (sparse24.h): values rows x k/2,
 * meta rows x ceil(k/32) words, ordered pairs; about one group in eight
 * keeps a single non-zero (the other slot a stored zero). */
struct sp24 {
	int rows, k, mw;
	std::vector<uint16_t> val;
	std::vector<uint32_t> meta;
};
static void make_sp24(sp24 &a, int rows, int k, int bf16)
{
	a.rows = rows;
	a.k = k;
	a.mw = (k / 4 + 7) / 8;
	a.val.assign((size_t)rows * (k / 2), 0);
	a.meta.assign((size_t)rows * a.mw, 0);
	static const unsigned pairs[6][2] = { { 0, 1 }, { 0, 2 }, { 0, 3 }, { 1, 2 }, { 1, 3 }, { 2, 3 } };
	for (int r = 0; r < rows; r++)
		for (int gi = 0; gi < k / 4; gi++) {
			const unsigned *pr = pairs[rnd() % 6];
			size_t vi = (size_t)r * (k / 2) + 2 * gi;
			a.val[vi] = to16(rndf(), bf16);
			a.val[vi + 1] = (rnd() & 7) ? to16(rndf(), bf16) : 0;
			a.meta[(size_t)r * a.mw + gi / 8] |= (pr[0] | pr[1] << 2) << (4 * (gi % 8));
		}
}
/* Dense value of A at (r, kk). */
static double sp24_at(const sp24 &a, int r, int kk, int bf16)
{
	int gi = kk / 4, pos = kk % 4;
	unsigned nib = (a.meta[(size_t)r * a.mw + gi / 8] >> (4 * (gi % 8))) & 0xf;
	size_t vi = (size_t)r * (a.k / 2) + 2 * gi;
	if ((nib & 3) == (unsigned)pos)
		return from16(a.val[vi], bf16);
	if ((nib >> 2) == (unsigned)pos)
		return from16(a.val[vi + 1], bf16);
	return 0.0;
}

/* A random dense A, rows x k in rows of lda = nv_wg_dense_lda(k) values;
 * the padding past k holds NaN, so a kernel that read it would fail. */
struct dmat {
	int rows, k, lda;
	std::vector<uint16_t> val;
};
static void make_dense(dmat &a, int rows, int k, int bf16)
{
	a.rows = rows;
	a.k = k;
	a.lda = (int)nv_wg_dense_lda(k);
	a.val.assign((size_t)rows * a.lda, bf16 ? 0x7fc0 : 0x7e00);
	for (int r = 0; r < rows; r++)
		for (int kk = 0; kk < k; kk++)
			a.val[(size_t)r * a.lda + kk] = to16(rndf(), bf16);
}

static double rel_err(const std::vector<double> &ref, const std::vector<double> &out)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < ref.size(); i++) {
		if (!isfinite(out[i]))
			return INFINITY;
		num += (out[i] - ref[i]) * (out[i] - ref[i]);
		den += ref[i] * ref[i];
	}
	return sqrt(num / (den > 0 ? den : 1));
}

/* ---- probe ---- */

static int run_probe(void)
{
	int fails = 0;
	for (int bf16 = 0; bf16 < 2; bf16++) {
		sp24 a;
		make_sp24(a, 64, 64, bf16);
		std::vector<uint16_t> bt(16 * 64);
		for (auto &v : bt)
			v = to16(rndf(), bf16);
		/* The packed mma.sp metadata, strips 0..3, meta tile 0. */
		std::vector<uint32_t> packed(4 * 32);
		for (int s = 0; s < 4; s++)
			for (unsigned l = 0; l < 32; l++)
				packed[s * 32 + l] = nv_pack_meta_word(a.meta.data(), a.mw, 64, 16, 0, s, 0, l);
		std::vector<double> ref(64 * 16);
		for (int r = 0; r < 64; r++)
			for (int n = 0; n < 16; n++) {
				double s = 0;
				for (int kk = 0; kk < 64; kk++)
					s += sp24_at(a, r, kk, bf16) * from16(bt[n * 64 + kk], bf16);
				ref[r * 16 + n] = s;
			}
		uint16_t *dac, *dbt;
		uint32_t *dcanon, *dpacked;
		float *dd;
		CK(cudaMalloc(&dac, a.val.size() * 2));
		CK(cudaMalloc(&dbt, bt.size() * 2));
		CK(cudaMalloc(&dcanon, a.meta.size() * 4));
		CK(cudaMalloc(&dpacked, packed.size() * 4));
		CK(cudaMalloc(&dd, 64 * 16 * 4));
		CK(cudaMemcpy(dac, a.val.data(), a.val.size() * 2, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dbt, bt.data(), bt.size() * 2, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dcanon, a.meta.data(), a.meta.size() * 4, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dpacked, packed.data(), packed.size() * 4, cudaMemcpyHostToDevice));
		static const char *mname[4] = { "canonical, PRMT, sel 0 (t=0,1)", "canonical, PRMT, sel 1 (t=2,3)",
						 "packed mma.sp, sel 0/1 per k32 step", "packed mma.sp, sel 0 twice (control)" };
		for (int mode = 0; mode < 4; mode++) {
			CK(cudaMemset(dd, 0xff, 64 * 16 * 4)); /* NaN poison */
			if (bf16)
				probe_kernel<1><<<1, 128>>>(dac, dcanon, dpacked, dbt, dd, mode);
			else
				probe_kernel<0><<<1, 128>>>(dac, dcanon, dpacked, dbt, dd, mode);
			CK(cudaGetLastError());
			CK(cudaDeviceSynchronize());
			std::vector<float> out(64 * 16);
			CK(cudaMemcpy(out.data(), dd, out.size() * 4, cudaMemcpyDeviceToHost));
			std::vector<double> o(out.begin(), out.end());
			double err = rel_err(ref, o);
			bool ok = err < 1e-5;
			bool want = mode != 3;
			printf("probe %-4s %-40s rel err %.2e  %s\n", bf16 ? "bf16" : "f16", mname[mode], err,
			       ok == want ? (ok ? "PASS" : "PASS (fails as expected)") : "FAIL");
			if (ok != want)
				fails++;
		}
		cudaFree(dac);
		cudaFree(dbt);
		cudaFree(dcanon);
		cudaFree(dpacked);
		cudaFree(dd);
	}
	return fails;
}

/* ---- what compute-sanitizer's racecheck makes of the mbarrier protocol ----
 *
 * The kernels' consumers read a stage's metadata with plain shared loads,
 * arrive on the stage's `empty` mbarrier, and the producer, after waiting
 * on it, refills the stage by a bulk copy.  racecheck reports hazards
 * between those reads and the refill.  This probe runs the protocol alone:
 * warp 0 reads 64 words and arrives (32 arrivals complete the phase);
 * thread 32 waits for the phase and then overwrites the words, by plain
 * stores (mode 0), by a bulk copy completing on a second mbarrier (mode 1),
 * or by plain stores without waiting (mode 2: a real race, the control).
 * Modes 3 and 4 are the kernels' way: one arrival per warp (the barrier
 * counts 1), by lane 0 alone (3) or after __syncwarp (4,
 * nv_mbar_arrive_warp), then a bulk copy.  Run each mode under racecheck:
 * hazards in mode 0 would mean the tool does not order accesses by
 * mbarrier phases at all; in mode 3 and not 4, that the other lanes' reads
 * were unordered before lane 0's release. */
__global__ void race_probe(const uint32_t *src, uint32_t *out, int mode)
{
	__shared__ __align__(128) uint32_t buf[64];
	__shared__ __align__(8) uint64_t bars[2]; /* empty, full */
	const unsigned tid = threadIdx.x;
	const uint32_t empty = nv_wg_smem(&bars[0]), full = nv_wg_smem(&bars[1]);
	if (tid == 0) {
		nv_mbar_init(empty, mode >= 3 ? 1 : 32);
		nv_mbar_init(full, 1);
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	buf[tid] = tid;
	__syncthreads();
	if (tid < 32) {
		const uint32_t v = buf[tid] + buf[tid + 32];
		if (mode == 3 && tid == 0)
			nv_mbar_arrive(empty);
		else if (mode == 4)
			nv_mbar_arrive_warp(empty, tid);
		else if (mode < 3)
			nv_mbar_arrive(empty);
		out[tid] = v;
	} else if (tid == 32) {
		if (mode != 2)
			nv_mbar_wait(empty, 0);
		if (mode == 1 || mode >= 3) {
			nv_mbar_expect_tx(full, sizeof(buf));
			nv_bulk_1d(nv_wg_smem(buf), (uint64_t)src, sizeof(buf), full, NV_WG_EVICT_FIRST);
			nv_mbar_wait(full, 0);
		} else {
			for (int i = 0; i < 64; i++)
				((volatile uint32_t *)buf)[i] = src[i];
		}
		out[32] = buf[5];
	}
}

static int run_race_probe(int mode)
{
	uint32_t *src, *out;
	CK(cudaMalloc(&src, 64 * 4));
	CK(cudaMalloc(&out, 64 * 4));
	CK(cudaMemset(src, 0, 64 * 4));
	race_probe<<<1, 64>>>(src, out, mode);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	static const char *what[] = { "plain stores after the mbarrier wait", "bulk copy after the mbarrier wait",
				      "plain stores without waiting (control)",
				      "lane 0 arrives for the warp, then a bulk copy",
				      "__syncwarp, lane 0 arrives, then a bulk copy" };
	printf("race probe mode %d (%s): ran\n", mode, what[mode < 0 || mode > 4 ? 0 : mode]);
	cudaFree(src);
	cudaFree(out);
	return 0;
}

/* ---- the pipelined kernel: operands, launch ---- */

static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled;

struct wg_weight {
	int dense, m, k, mp, kp, order;
	uint16_t *val; /* stage images (order) or m x kp/2; dense: images, or m x lda */
	uint32_t *meta; /* NULL for a dense A */
};

/* A dense A on the device as the kernels of `order` read it: rows of lda
 * values (NV_WG_ROWMAJOR, the dense_rm_ kernels), or dense stage images made
 * by the daemon's packing kernel from a compact copy. */
static void wg_upload_dense(const dmat &a, wg_weight &w, int order)
{
	w.dense = 1;
	w.order = order;
	w.m = a.rows;
	w.k = a.k;
	w.mp = (int)nv_wg_m_pad(a.rows);
	w.kp = (int)nv_wg_k_pad(a.k);
	w.meta = NULL;
	if (order == NV_WG_ROWMAJOR) {
		CK(cudaMalloc(&w.val, a.val.size() * 2));
		CK(cudaMemcpy(w.val, a.val.data(), a.val.size() * 2, cudaMemcpyHostToDevice));
		return;
	}
	std::vector<uint16_t> compact((size_t)a.rows * a.k);
	for (int r = 0; r < a.rows; r++)
		memcpy(&compact[(size_t)r * a.k], &a.val[(size_t)r * a.lda], (size_t)a.k * 2);
	uint16_t *src;
	CK(cudaMalloc(&src, compact.size() * 2));
	CK(cudaMemcpy(src, compact.data(), compact.size() * 2, cudaMemcpyHostToDevice));
	const int64_t bytes = nv_wg_dimg_bytes(a.rows, a.k, 2);
	CK(cudaMalloc(&w.val, (size_t)bytes));
	nv_wg_pack_params p = { (uint64_t)src, 0, (uint64_t)w.val, 0, a.rows, a.k, 0, order };
	nv_wg_pack_dense<<<(unsigned)((bytes / 16 + 255) / 256), 256>>>(p);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	cudaFree(src);
}

static size_t wg_val_bytes(const wg_weight &w)
{
	return (size_t)(w.order ? nv_wg_img_bytes(w.m, w.k, 2) : nv_wg_values_bytes(w.m, w.k, 2));
}

/* Packs the canonical A on the device with the daemon's kernel, in the
 * order given (enum nv_wg_order). */
static void wg_pack(const sp24 &a, wg_weight &w, int order)
{
	w.dense = 0;
	w.order = order;
	w.m = a.rows;
	w.k = a.k;
	w.mp = (int)nv_wg_m_pad(a.rows);
	w.kp = (int)nv_wg_k_pad(a.k);
	uint16_t *cv;
	uint32_t *cm;
	CK(cudaMalloc(&cv, a.val.size() * 2));
	CK(cudaMalloc(&cm, a.meta.size() * 4));
	CK(cudaMemcpy(cv, a.val.data(), a.val.size() * 2, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(cm, a.meta.data(), a.meta.size() * 4, cudaMemcpyHostToDevice));
	CK(cudaMalloc(&w.val, wg_val_bytes(w)));
	CK(cudaMalloc(&w.meta, (size_t)nv_wg_meta_bytes(w.m, w.k)));
	nv_wg_pack_params p = { (uint64_t)cv, (uint64_t)cm, (uint64_t)w.val, (uint64_t)w.meta, w.m, w.k, a.mw, order };
	int64_t words = ((int64_t)wg_val_bytes(w) + nv_wg_meta_bytes(w.m, w.k)) / 4;
	nv_wg_pack<<<(unsigned)((words + 255) / 256), 256>>>(p);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	cudaFree(cv);
	cudaFree(cm);
}

static bool has_prefix(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

struct wg_launch {
	nv_wg_params p;
	const variant *v;
	dim3 grid;
	void *ws;
	unsigned *counters;
};

/* WGD_PROMO=0/128 (the experiment): the L2 promotion of the decode
 * kernels' weight loads; 256 bytes otherwise, as the daemon does. */
static CUtensorMapL2promotion a_promo(void)
{
	const char *e = getenv("WGD_PROMO");
	if (e && strcmp(e, "0") == 0)
		return CU_TENSOR_MAP_L2_PROMOTION_NONE;
	if (e && strcmp(e, "128") == 0)
		return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
	return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
}

static int tmap_2d(CUtensorMap *tm, void *base, uint64_t d0, uint64_t d1, uint64_t stride_bytes, uint32_t b0,
		   uint32_t b1, CUtensorMapSwizzle swz,
		   CUtensorMapL2promotion promo = CU_TENSOR_MAP_L2_PROMOTION_L2_256B)
{
	cuuint64_t dims[2] = { d0, d1 }, strides[1] = { stride_bytes };
	cuuint32_t box[2] = { b0, b1 }, es[2] = { 1, 1 };
	CUresult r = encode_tiled(tm, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, base, dims, strides, box, es,
				  CU_TENSOR_MAP_INTERLEAVE_NONE, swz, promo,
				  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	return r == CUDA_SUCCESS ? 0 : -(int)r;
}

/* Prepares a launch of variant v on weight w, B [k][ldb], D/C [m][n].
 * splits 0 = choose: enough CTAs for two per SM slot where the tiles
 * alone leave the GPU idle, at least 4 k-iterations each. */
static int wg_prepare(wg_launch &L, const variant *v, const wg_weight &w, const void *b, int n, int ldb, void *c,
		      void *d, int out_dtype, float alpha, float beta, int splits, int sms)
{
	memset(&L, 0, sizeof(L));
	L.v = v;
	nv_wg_params &p = L.p;
	int bnb = v->bn < 64 ? v->bn : 64;
	CUtensorMapSwizzle bs = bnb == 64 ? CU_TENSOR_MAP_SWIZZLE_128B
			       : bnb == 32 ? CU_TENSOR_MAP_SWIZZLE_64B
					   : CU_TENSOR_MAP_SWIZZLE_32B;
	if (v->dense != w.dense || v->order != w.order)
		return -1; /* the weight is not in this variant's layout */
	int r = w.order ? 0
		: w.dense ? tmap_2d(&p.tm_a, w.val, w.k, w.m, (uint64_t)nv_wg_dense_lda(w.k) * 2, NV_WG_BK, NV_WG_BM,
				    CU_TENSOR_MAP_SWIZZLE_128B)
			  : tmap_2d(&p.tm_a, w.val, w.kp / 2, w.m, (uint64_t)w.kp, 32, NV_WG_BM, CU_TENSOR_MAP_SWIZZLE_64B);
	if (r)
		return r;
	p.a = w.order ? (uint64_t)w.val : 0;
	r = tmap_2d(&p.tm_b, (void *)b, n, w.k, (uint64_t)ldb * 2, bnb, NV_WG_BK, bs);
	if (r)
		return r;
	p.meta = (uint64_t)w.meta;
	p.c = (uint64_t)c;
	p.d = (uint64_t)d;
	p.m = w.m;
	p.n = n;
	p.m_pad = w.mp;
	p.ldc = n;
	p.ldd = n;
	p.out_dtype = out_dtype;
	p.alpha = alpha;
	p.beta = beta;
	/* The daemon's plan (nv_wgmma_plan.c) for this tile; splits > 0
	 * overrides its split-K (the sweep). */
	int occ[NV_WG_TILE_COUNT];
	for (int t = 0; t < NV_WG_TILE_COUNT; t++)
		occ[t] = 1;
	struct nv_wg_plan pl;
	/* The plan counts 64-K stages only; K a multiple of 4 is the 2:4
	 * groups' rule, not the dense kernels'. */
	if (nv_wg_plan_make(w.m, n, (w.k + 3) / 4 * 4, sms, occ, v->tile, &pl) < 0)
		return -1;
	if (splits > 0 && v->bn < 256) {
		pl.iters_per_split = (pl.k_iters + splits - 1) / splits;
		pl.splits = (pl.k_iters + pl.iters_per_split - 1) / pl.iters_per_split;
	}
	p.k_iters = pl.k_iters;
	p.tiles_m = pl.tiles_m;
	p.tiles_n = pl.tiles_n;
	p.iters_per_split = pl.iters_per_split;
	splits = pl.splits;
	/* The p3_ family: three producers at every launch; the daemon's
	 * kernels: where the daemon's launch would use them. */
	p.producers = has_prefix(v->name, "p3_") ? 3 : nv_wg_producers(v->dense, &pl, sms, v->minb);
	int tiles = p.tiles_m * p.tiles_n;
	if (v->cl == 2 && p.tiles_m % 2)
		return -1; /* a cluster pairs row tiles */
	if (v->csum && splits > 8)
		return -1; /* a portable cluster holds at most 8 CTAs */
	if (v->w1 && splits > 1)
		return -1; /* one consumer warpgroup: unsplit only */
	L.grid = dim3(tiles, 1, splits);
	/* The queue: at most queue CTAs an SM, and two more counters (the
	 * next unit, the CTAs done). */
	if (v->queue)
		L.grid = dim3(std::min(tiles * splits, sms * v->queue), 1, 1);
	if (splits > 1 || v->queue) {
		const size_t words = (size_t)tiles + (v->queue ? 2 : 0);
		CK(cudaMalloc(&L.ws, (size_t)tiles * splits * (v->bn / 2) * 256 * 4));
		CK(cudaMalloc(&L.counters, words * 4));
		CK(cudaMemset(L.counters, 0, words * 4));
		p.ws = (uint64_t)L.ws;
		p.counters = (uint64_t)L.counters;
	}
	return 0;
}

static void wg_release(wg_launch &L)
{
	if (L.ws)
		cudaFree(L.ws);
	if (L.counters)
		cudaFree(L.counters);
	L.ws = NULL;
	L.counters = NULL;
}

/* WG_SPREAD=1 (the experiment): a grid of at most one CTA per SM asks
 * for more shared memory than two CTAs of an SM may hold together, so
 * that the block scheduler gives every CTA an SM of its own (the skinny
 * tiles are built for two a SM). */
#define WG_SPREAD_SMEM (116u << 10)
static bool g_spread;
static int g_sms;

/* A cs_ launch: a cluster of every split of a tile (rank = split). */
static void cs_config(const wg_launch &L, unsigned smem, cudaStream_t s, cudaLaunchConfig_t *cfg,
		      cudaLaunchAttribute *at)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->gridDim = L.grid;
	cfg->blockDim = dim3(384);
	cfg->dynamicSmemBytes = smem;
	cfg->stream = s;
	at->id = cudaLaunchAttributeClusterDimension;
	at->val.clusterDim.x = 1;
	at->val.clusterDim.y = 1;
	at->val.clusterDim.z = L.grid.z;
	cfg->attrs = at;
	cfg->numAttrs = 1;
}

/* The dynamic shared memory a launch asks for (WG_SPREAD: above). */
static unsigned launch_smem(const wg_launch &L)
{
	if (g_spread && (int)(L.grid.x * L.grid.y * L.grid.z) <= g_sms && L.v->smem < WG_SPREAD_SMEM)
		return WG_SPREAD_SMEM;
	return L.v->smem;
}

static void wg_run(const wg_launch &L, cudaStream_t s)
{
	const unsigned smem = launch_smem(L);
	if (L.v->csum && L.grid.z > 1) {
		cudaLaunchConfig_t cfg;
		cudaLaunchAttribute at;
		cs_config(L, smem, s, &cfg, &at);
		CK(cudaLaunchKernelEx(&cfg, L.v->fn, L.p));
		return;
	}
	L.v->fn<<<L.grid, L.v->w1 ? 256 : 384, smem, s>>>(L.p);
}

/* How many of a cs_ launch's clusters the GPU holds at once
 * (cudaOccupancyMaxActiveClusters); 0 where it is not a cluster launch. */
static int cs_max_clusters(const wg_launch &L)
{
	if (!L.v->csum || L.grid.z < 2)
		return 0;
	cudaLaunchConfig_t cfg;
	cudaLaunchAttribute at;
	cs_config(L, launch_smem(L), 0, &cfg, &at);
	int n = 0;
	return cudaOccupancyMaxActiveClusters(&n, L.v->fn, &cfg) == cudaSuccess ? n : -1;
}

struct wgd_launch {
	nv_wgd_params p;
	const dvariant *v;
	int grid, rows;
	void *ws;
	unsigned *counters;
};

/* A decode launch of v on weight w; grid 0 = every resident CTA slot of
 * the GPU (occupancy x SMs), -1 = one CTA per block, at most one CTA per
 * unit; rows 0 = the variant's 64 x CONS rows a block. */
static int wgd_prepare(wgd_launch &L, const dvariant *v, const wg_weight &w, const void *b, int n, int ldb, void *c,
		       void *d, int out_dtype, float alpha, float beta, int grid, int sms, int rows = 0)
{
	if (rows <= 0 || rows > NV_WGD_BM(v->cons))
		rows = NV_WGD_BM(v->cons);
	memset(&L, 0, sizeof(L));
	/* Stage images: [tile][stage] only, whole 128-row tiles, one 64-K block
	 * a stage. */
	if (w.order != NV_WG_ROWMAJOR && (w.order != NV_WG_IMG_TILES || v->cons != 2 || v->ksub != 1 || rows != 128))
		return -1;
	L.v = v;
	nv_wgd_params &p = L.p;
	if (n > v->bn)
		return -1;
	CUtensorMapSwizzle bs = v->bn == 64 ? CU_TENSOR_MAP_SWIZZLE_128B
				: v->bn == 32 ? CU_TENSOR_MAP_SWIZZLE_64B
					      : CU_TENSOR_MAP_SWIZZLE_32B;
	int r = tmap_2d(&p.tm_a, w.val, w.kp / 2, w.m, (uint64_t)w.kp, 32, rows, CU_TENSOR_MAP_SWIZZLE_64B, a_promo());
	if (r)
		return r;
	r = tmap_2d(&p.tm_b, (void *)b, n, w.k, (uint64_t)ldb * 2, v->bn, NV_WG_BK, bs);
	if (r)
		return r;
	p.a = w.order ? (uint64_t)w.val : 0;
	p.meta = (uint64_t)w.meta;
	p.c = (uint64_t)c;
	p.d = (uint64_t)d;
	p.m = w.m;
	p.n = n;
	p.m_pad = w.mp;
	p.kb = w.kp / NV_WG_BK;
	p.ldc = n;
	p.ldd = n;
	p.out_dtype = out_dtype;
	p.alpha = alpha;
	p.beta = beta;
	p.rows = rows;
	int ki = (p.kb + v->ksub - 1) / v->ksub, blocks = (w.m + rows - 1) / rows;
	int units = ki * blocks;
	if (grid == 0)
		grid = v->occ * sms;
	if (grid < 0)
		grid = blocks;
	L.grid = std::min(grid, units);
	L.rows = rows;
	CK(cudaMalloc(&L.ws, (size_t)L.grid * NV_WGD_WS_BYTES(v->bn, v->cons)));
	CK(cudaMalloc(&L.counters, (size_t)blocks * 4));
	CK(cudaMemset(L.counters, 0, (size_t)blocks * 4));
	p.ws = (uint64_t)L.ws;
	p.counters = (uint64_t)L.counters;
	return 0;
}

static void wgd_release(wgd_launch &L)
{
	cudaFree(L.ws);
	cudaFree(L.counters);
	L.ws = NULL;
	L.counters = NULL;
}

static void wgd_run(const wgd_launch &L, cudaStream_t s)
{
	L.v->fn<<<L.grid, NV_WGD_THREADS(L.v->cons), L.v->smem, s>>>(L.p);
}

static void setup_variants(void)
{
	g_spread = getenv("WG_SPREAD") && atoi(getenv("WG_SPREAD")) > 0;
	for (int i = 0; i < nvariants; i++)
		CK(cudaFuncSetAttribute(variants[i].fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
					g_spread ? std::max(variants[i].smem, WG_SPREAD_SMEM) : variants[i].smem));
	for (int i = 0; i < ndvariants; i++) {
		CK(cudaFuncSetAttribute(dvariants[i].fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
					dvariants[i].smem));
		CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&dvariants[i].occ, dvariants[i].fn,
								NV_WGD_THREADS(dvariants[i].cons), dvariants[i].smem));
		printf("decode %-14s BN %2d CONS %d KSUB %d stages %2d smem %6u: %d CTAs per SM\n", dvariants[i].name,
		       dvariants[i].bn, dvariants[i].cons, dvariants[i].ksub, dvariants[i].stages, dvariants[i].smem,
		       dvariants[i].occ);
	}
}

/* The families of kernels the checks can take instead of the daemon's,
 * each by the name prefix of its variants, and the switch that picks it:
 * var set to value (0: to any positive number); the first that matches. */
static const struct {
	const char *var;
	int value;
	const char *family;
} families[] = {
	{ "WG_CLUSTER", 0, "cl2_" },
	{ "WG_GROUP", 2, "g2_" },
	{ "WG_GROUP", 4, "g4_" },
	{ "WG_DEEP", 0, "deep_" },
	{ "WG_INFLIGHT", 0, "k2_" },
	{ "WG_QUEUE", 2, "q2_" },
	{ "WG_QUEUE", 0, "q_" },
	{ "WG_CSUM", 0, "cs_" },
	{ "WG_W1", 0, "w1_" },
	{ "WG_PRODUCERS", 0, "p3_" },
};

/* The family the checks take: the daemon's ("") or one of families. */
static const char *g_family = "";

static bool in_family(const variant *v)
{
	if (*g_family)
		return has_prefix(v->name, g_family);
	/* The daemon's: none of the families, nor the bench-only nomath_
	 * and warp_ kernels. */
	for (const auto &f : families)
		if (has_prefix(v->name, f.family))
			return false;
	return !has_prefix(v->name, "nomath") && !has_prefix(v->name, "warp");
}

/* order: the kernels reading A in that layout (enum nv_wg_order). */
static const variant *find_variant(int dense, int bf16, int bn, int order)
{
	for (int i = 0; i < nvariants; i++)
		if (variants[i].dense == dense && variants[i].bf16 == bf16 && variants[i].bn == bn &&
		    variants[i].order == order && in_family(&variants[i]))
			return &variants[i];
	return NULL;
}

/* ---- correctness on odd shapes ---- */

static size_t dt_size(int dt) { return dt == MFMA_DT_F32 ? 4 : 2; }
static double dt_get(const void *p, size_t i, int dt)
{
	if (dt == MFMA_DT_F32)
		return ((const float *)p)[i];
	return from16(((const uint16_t *)p)[i], dt == MFMA_DT_BF16);
}

/* dv: a decode variant (grid CTAs, 0 = the default; row-major A) instead
 * of the tile of width bn (2:4: reading A in the layout `order`). */
static int check_one(int dense, int bf16, int m, int n, int k, int bn, int order, int splits, int out_dt, float alpha,
		     float beta, int sms, const dvariant *dv = NULL, int grid = 0, int rows = 0)
{
	const variant *v = dv ? NULL : find_variant(dense, bf16, bn, order);
	if (!v && !dv)
		return 0;
	sp24 a;
	dmat ad;
	wg_weight w;
	if (dense) {
		make_dense(ad, m, k, bf16);
		wg_upload_dense(ad, w, order);
	} else {
		make_sp24(a, m, k, bf16);
		wg_pack(a, w, order);
	}
	int ldb = (n + 7) / 8 * 8;
	std::vector<uint16_t> b((size_t)k * ldb);
	for (auto &x : b)
		x = to16(rndf(), bf16);
	size_t es = dt_size(out_dt);
	std::vector<unsigned char> c((size_t)m * n * es);
	for (size_t i = 0; i < (size_t)m * n; i++) {
		float x = rndf();
		if (out_dt == MFMA_DT_F32)
			((float *)c.data())[i] = x;
		else
			((uint16_t *)c.data())[i] = to16(x, out_dt == MFMA_DT_BF16);
	}
	void *db, *dc, *dd;
	CK(cudaMalloc(&db, b.size() * 2));
	CK(cudaMalloc(&dc, c.size()));
	CK(cudaMalloc(&dd, c.size()));
	CK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dc, c.data(), c.size(), cudaMemcpyHostToDevice));
	CK(cudaMemset(dd, 0xff, c.size()));
	wg_launch L;
	wgd_launch DL;
	int r = dv ? wgd_prepare(DL, dv, w, db, n, ldb, beta != 0 ? dc : NULL, dd, out_dt, alpha, beta, grid, sms, rows)
		   : wg_prepare(L, v, w, db, n, ldb, beta != 0 ? dc : NULL, dd, out_dt, alpha, beta, splits, sms);
	const char *vname = dv ? dv->name : v->name;
	if (r) {
		printf("check %s %dx%dx%d: tensor map failed (%d)\n", vname, m, n, k, r);
		return 1;
	}
	/* Twice: the split-K counters must be back at zero after a launch. */
	for (int rep = 0; rep < 2; rep++) {
		CK(cudaMemset(dd, 0xff, c.size()));
		if (dv)
			wgd_run(DL, 0);
		else
			wg_run(L, 0);
		CK(cudaGetLastError());
	}
	CK(cudaDeviceSynchronize());
	std::vector<unsigned char> out(c.size());
	CK(cudaMemcpy(out.data(), dd, out.size(), cudaMemcpyDeviceToHost));
	std::vector<double> ref((size_t)m * n), o((size_t)m * n);
	std::vector<double> arow(k);
	for (int i = 0; i < m; i++) {
		for (int kk = 0; kk < k; kk++)
			arow[kk] = dense ? from16(ad.val[(size_t)i * ad.lda + kk], bf16) : sp24_at(a, i, kk, bf16);
		for (int j = 0; j < n; j++) {
			double s = 0;
			for (int kk = 0; kk < k; kk++)
				if (arow[kk] != 0)
					s += arow[kk] * from16(b[(size_t)kk * ldb + j], bf16);
			size_t idx = (size_t)i * n + j;
			ref[idx] = alpha * s + (beta != 0 ? beta * dt_get(c.data(), idx, out_dt) : 0);
			o[idx] = dt_get(out.data(), idx, out_dt);
		}
	}
	double err = rel_err(ref, o);
	double tol = out_dt == MFMA_DT_F32 ? 1e-5 : out_dt == MFMA_DT_F16 ? 2e-3 : 1e-2;
	bool ok = err < tol;
	printf("check %-4s %-16s %5dx%-4dx%-5d A %-6s %s %3d rows %3d out %-4s alpha %.2f beta %.2f: rel err %.2e %s\n",
	       bf16 ? "bf16" : "f16", vname, m, n, k,
	       order == NV_WG_IMG_TILES ? "tiles" : order == NV_WG_IMG_STAGES ? "stages" : "rows",
	       dv ? "grid" : "splits", dv ? DL.grid : (int)L.grid.z, dv ? DL.rows : 128,
	       mfma_dtype_name((mfma_dtype)out_dt), alpha, beta, err, ok ? "ok" : "FAIL");
	if (dv)
		wgd_release(DL);
	else
		wg_release(L);
	cudaFree(db);
	cudaFree(dc);
	cudaFree(dd);
	cudaFree(w.val);
	cudaFree(w.meta);
	return ok ? 0 : 1;
}

static int run_checks(int sms)
{
	struct {
		int m, n, k;
	} shapes[] = { { 200, 72, 136 }, { 77, 24, 100 }, { 1000, 264, 520 }, { 129, 257, 1028 }, { 384, 16, 4096 },
		       { 300, 40, 4100 } };
	/* Dense K need not be a multiple of 4 (nor of 8: lda pads it). */
	struct {
		int m, n, k;
	} dshapes[] = { { 200, 72, 136 }, { 77, 24, 101 }, { 1000, 264, 522 }, { 129, 257, 1027 }, { 384, 16, 4096 },
			{ 300, 40, 4099 } };
	static const int bns[] = { 256, 128, 64, 32, 16 };
	const char *kind = getenv("WG_KIND");
	const bool quick = getenv("WG_QUICK") != NULL;
	int fails = 0, checks = 0;
	for (int dense = 0; dense < 2; dense++) {
		if (kind && strcmp(kind, dense ? "dense" : "sparse") != 0)
			continue;
		/* The daemon's kernels, then (not in the quick set) the other
		 * image order (2:4) and the TMA ones (2:4 and dense). */
		static const int orders[] = { NV_WG_ORDER, WG_ALT_ORDER, NV_WG_ROWMAJOR };
		for (int oi = 0; oi < (quick ? 1 : 3); oi++)
			for (int bf16 = 0; bf16 < 2; bf16++)
				for (int si = 0; si < 6; si++) {
					const int m = dense ? dshapes[si].m : shapes[si].m;
					const int n = dense ? dshapes[si].n : shapes[si].n;
					const int k = dense ? dshapes[si].k : shapes[si].k;
					/* The quick set (the sanitizer's) keeps 129 x 1028, whose
					 * 17 stages reuse every tile's ring slots. */
					if (quick && m * k > 200000)
						continue;
					for (int bn : bns) {
						/* Another family: its tiles only (and no
						 * layout without kernels); the cluster kernels:
						 * pairs of row tiles only. */
						if (!find_variant(dense, bf16, bn, orders[oi]))
							continue;
						if (strcmp(g_family, "cl2_") == 0 && (m + NV_WG_BM - 1) / NV_WG_BM % 2)
							continue;
						/* Every output type and beta at every tile, drawn. */
						int out_dt = (rnd() & 1) ? MFMA_DT_F32 : (bf16 ? MFMA_DT_BF16 : MFMA_DT_F16);
						float beta = (rnd() & 1) ? 0.5f : 0.0f;
						int splits = k >= 1000 ? 1 + (int)(rnd() % 4) : 1;
						/* The cluster sum: clusters of 2 to 8, odd ones too. */
						if (strcmp(g_family, "cs_") == 0 && k >= 1000)
							splits = 2 + (int)(rnd() % 7);
						if (strcmp(g_family, "w1_") == 0)
							splits = 1; /* unsplit only */
						fails += check_one(dense, bf16, m, n, k, bn, orders[oi], splits, out_dt, 1.25f, beta,
								   sms);
						checks++;
					}
				}
	}
	printf("checks: %d of %d failed\n", fails, checks);
	return fails;
}

/* The decode kernels: odd M and K (not multiples of the 64-row block or
 * of a stage), N = 1, 7, 16, 33, 64, every output dtype, beta 0 and 0.5,
 * and grids from one CTA to one CTA per unit (every block then shared by
 * all of its CTAs), each variant whose BN covers N. */
static int run_dchecks(int sms)
{
	struct {
		int m, n, k;
	} shapes[] = { { 77, 1, 100 }, { 200, 7, 136 }, { 1000, 16, 520 }, { 129, 33, 1028 }, { 333, 64, 964 },
		       { 64, 16, 64 }, { 4099, 16, 4100 } };
	static const int grids[] = { 0, 1, 3, 7, 100000 };
	/* WG_QUICK (the sanitizer runs): the daemon's tiles only, small shapes. */
	const bool quick = getenv("WG_QUICK") != NULL;
	int fails = 0, gi = 0;
	for (int bf16 = 0; bf16 < 2; bf16++)
		for (auto &s : shapes)
			for (int di = 0; di < ndvariants; di++) {
				const dvariant *dv = &dvariants[di];
				if (dv->bf16 != bf16 || dv->bn < s.n || dv->occ <= 0)
					continue;
				if (quick && ((dv->tile < 0 && !getenv("WG_ONLY")) || s.m * s.k > 1000000))
					continue;
				if (getenv("WG_ONLY") && strcmp(getenv("WG_ONLY"), dv->name) != 0)
					continue;
				for (int od = 0; od < 2; od++) {
					int out_dt = od ? MFMA_DT_F32 : (bf16 ? MFMA_DT_BF16 : MFMA_DT_F16);
					float beta = (rnd() & 1) ? 0.5f : 0.0f;
					int grid = grids[gi % 5];
					int rows = gi % 3 == 0 ? 0 : gi % 3 == 1 ? 40 : 112;
					gi++;
					fails += check_one(0, bf16, s.m, s.n, s.k, 0, NV_WG_ROWMAJOR, 1, out_dt, 1.25f, beta,
							   sms, dv, grid, rows);
					/* The weight as [tile][stage] images (128-row blocks). */
					if (dv->cons == 2 && dv->ksub == 1)
						fails += check_one(0, bf16, s.m, s.n, s.k, 0, NV_WG_IMG_TILES, 1, out_dt,
								   1.25f, beta, sms, dv, grids[(gi + 2) % 5], 0);
				}
			}
	printf("decode checks: %d failed\n", fails);
	return fails;
}

/* ---- benchmark ---- */

/* The numbers of environment variable name ("4", "2,4" or "0 20 40"), in
 * order; empty when it is not set. */
static std::vector<double> env_numbers(const char *name)
{
	std::vector<double> out;
	const char *e = getenv(name);
	char list[256];
	snprintf(list, sizeof(list), "%s", e ? e : "");
	for (char *tok = strtok(list, " ,"); tok; tok = strtok(NULL, " ,"))
		out.push_back(atof(tok));
	return out;
}

static float time_median(void (*fn)(void *, int, cudaStream_t), void *ctx, int copies, cudaStream_t s)
{
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int i = 0; i < 3; i++)
		fn(ctx, i % copies, s);
	CK(cudaStreamSynchronize(s));
	std::vector<float> ts;
	float total = 0;
	for (int i = 0; i < 400 && (total < 60.0f || i < 10); i++) {
		CK(cudaEventRecord(e0, s));
		fn(ctx, i % copies, s);
		CK(cudaEventRecord(e1, s));
		CK(cudaEventSynchronize(e1));
		float ms;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		ts.push_back(ms);
		total += ms;
	}
	CK(cudaGetLastError());
	std::sort(ts.begin(), ts.end());
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return ts[ts.size() / 2] * 1000.0f; /* us */
}

struct wg_ctx {
	wg_launch *L; /* one per copy */
};
static void wg_call(void *ctx, int copy, cudaStream_t s) { wg_run(((wg_ctx *)ctx)->L[copy], s); }
struct wgd_ctx {
	wgd_launch *L; /* one per copy */
};
static void wgd_call(void *ctx, int copy, cudaStream_t s) { wgd_run(((wgd_ctx *)ctx)->L[copy], s); }

struct blas_ctx {
	cublasHandle_t h;
	int m, n, k, ldb, bf16;
	void **a;
	void *b, *d;
};
static void blas_call(void *ctx, int copy, cudaStream_t s)
{
	blas_ctx *c = (blas_ctx *)ctx;
	float one = 1.0f, zero = 0.0f;
	cudaDataType t = c->bf16 ? CUDA_R_16BF : CUDA_R_16F;
	cublasSetStream(c->h, s);
	/* Row-major D = A B is column-major D^T = B^T A^T. */
	cublasStatus_t st = cublasGemmEx(c->h, CUBLAS_OP_N, CUBLAS_OP_N, c->n, c->m, c->k, &one, c->b, t, c->ldb,
					 c->a[copy], t, c->k, &zero, c->d, t, c->n, CUBLAS_COMPUTE_32F,
					 CUBLAS_GEMM_DEFAULT);
	if (st != CUBLAS_STATUS_SUCCESS) {
		fprintf(stderr, "cublasGemmEx: %d\n", (int)st);
		exit(1);
	}
}

/* Dense A on the device from the canonical form (for cuBLAS). */
__global__ void expand_kernel(const uint16_t *val, const uint32_t *meta, int rows, int k, int mw, uint16_t *dense)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= (int64_t)rows * (k / 4))
		return;
	int r = (int)(i / (k / 4)), gi = (int)(i % (k / 4));
	unsigned nib = (meta[(int64_t)r * mw + gi / 8] >> (4 * (gi % 8))) & 0xf;
	uint16_t out[4] = { 0, 0, 0, 0 };
	out[nib & 3] = val[(int64_t)r * (k / 2) + 2 * gi];
	out[nib >> 2] = val[(int64_t)r * (k / 2) + 2 * gi + 1];
	for (int j = 0; j < 4; j++)
		dense[(int64_t)r * k + 4 * gi + j] = out[j];
}

/* The float64 reference of 32 random rows of D (and the last), for the
 * timed shapes: a_at(r, kk) gives A's value, B is [k][ldb]. */
struct sampled_ref {
	int n, bf16;
	std::vector<int> rows;
	std::vector<double> ref;
};
template <class F>
static void make_sampled_ref(sampled_ref &sr, int m, int n, int k, int ldb, const std::vector<uint16_t> &b, int bf16,
			     F a_at)
{
	sr.n = n;
	sr.bf16 = bf16;
	sr.rows.clear();
	for (int i = 0; i < 31; i++)
		sr.rows.push_back((int)(rnd() % m));
	sr.rows.push_back(m - 1);
	sr.ref.assign(sr.rows.size() * n, 0.0);
	std::vector<double> arow(k);
	for (size_t ri = 0; ri < sr.rows.size(); ri++) {
		for (int kk = 0; kk < k; kk++)
			arow[kk] = a_at(sr.rows[ri], kk);
		for (int j = 0; j < n; j++) {
			double sum = 0;
			for (int kk = 0; kk < k; kk++)
				if (arow[kk] != 0)
					sum += arow[kk] * from16(b[(size_t)kk * ldb + j], bf16);
			sr.ref[ri * n + j] = sum;
		}
	}
}

/* ||D - ref|| / ||ref|| over the sampled rows of a 16-bit D [m][n] on the
 * device. */
static double sampled_err(const sampled_ref &sr, const void *dptr)
{
	const int n = sr.n;
	std::vector<uint16_t> row(n);
	std::vector<double> o(sr.rows.size() * n);
	for (size_t ri = 0; ri < sr.rows.size(); ri++) {
		CK(cudaMemcpy(row.data(), (const uint16_t *)dptr + (size_t)sr.rows[ri] * n, (size_t)n * 2,
			      cudaMemcpyDeviceToHost));
		for (int j = 0; j < n; j++)
			o[ri * n + j] = from16(row[j], sr.bf16);
	}
	return rel_err(sr.ref, o);
}

/* Whether name starts with one of the space-separated prefixes of list. */
static bool name_listed(const char *name, const char *list)
{
	for (const char *p = list; *p;) {
		while (*p == ' ')
			p++;
		const size_t n = strcspn(p, " ");
		if (n && strncmp(name, p, n) == 0)
			return true;
		p += n;
	}
	return false;
}

struct tile_best {
	float t;
	const char *name;
	int splits;
};

/* Times every tile of one family (dense or 2:4) and dtype that suits N
 * (not over twice as wide as N, none under 128 columns from N = 512) on
 * weight copies w, each on the plan's split, or on each of skinny_splits
 * where the tiles alone leave SMs idle (the widest tile never splits);
 * each checked on the sampled rows.  Returns the fastest correct one. */
static tile_best time_tiles(int dense, int bf16, int m, int n, int ldb, std::vector<wg_weight> &w, void *db,
			    void *dd, float t_blas, const sampled_ref &sr, const std::vector<int> &skinny_splits,
			    int sms, cudaStream_t s)
{
	const int copies = (int)w.size();
	const double flop = 2.0 * m * n * w[0].k;
	tile_best best = { 1e30f, "-", 0 };
	/* WG_VARIANTS="f16_ cs_": only the variants whose names start so. */
	const char *only = getenv("WG_VARIANTS");
	for (int vi = 0; vi < nvariants; vi++) {
		const variant *v = &variants[vi];
		if (v->bf16 != bf16 || v->dense != dense || v->order != w[0].order)
			continue;
		if (only && !name_listed(v->name, only))
			continue;
		if (v->bn > 2 * ldb && v->bn > 16)
			continue; /* a tile over twice as wide as N is only waste */
		if (n >= 512 && v->bn < 128)
			continue;
		std::vector<int> split_list = { 0 };
		if ((int64_t)((m + 127) / 128) * ((n + v->bn - 1) / v->bn) < sms && v->bn < 256)
			split_list = skinny_splits;
		for (int sp : split_list) {
			std::vector<wg_launch> L(copies);
			bool bad = false;
			for (int i = 0; i < copies; i++)
				if (wg_prepare(L[i], v, w[i], db, n, ldb, NULL, dd, bf16 ? MFMA_DT_BF16 : MFMA_DT_F16, 1.0f,
					       0.0f, sp, sms))
					bad = true;
			if (bad) {
				/* A tensor map refused, or a launch this variant cannot
				 * make (a cluster over 8 CTAs, an odd count of pairs). */
				printf("  %-16s splits %d: not launchable\n", v->name, sp);
				for (auto &l : L)
					wg_release(l);
				continue;
			}
			if (sp > 1 && L[0].p.iters_per_split < 2) {
				for (auto &l : L)
					wg_release(l);
				continue;
			}
			CK(cudaMemset(dd, 0xff, (size_t)m * n * 2));
			wg_ctx ctx = { L.data() };
			float t = time_median(wg_call, &ctx, copies, s);
			CK(cudaStreamSynchronize(s));
			double err = sampled_err(sr, dd);
			bool ok = err < (bf16 ? 1e-2 : 2e-3);
			printf("  %-16s splits %d grid %5d: %8.1f us %6.0f %s  %.2fx cuBLAS time  err %.1e %s", v->name,
			       (int)L[0].grid.z, (int)(L[0].grid.x * L[0].grid.z), t, flop / t * 1e-6, dense ? "TF" : "TF-eq",
			       t / t_blas, err, ok ? "ok" : "WRONG");
			if (v->csum && L[0].grid.z > 1)
				printf("  clusters %d of %d at once", cs_max_clusters(L[0]), (int)L[0].grid.x);
			printf("\n");
			if (ok && t < best.t)
				best = { t, v->name, (int)L[0].grid.z };
			for (auto &l : L)
				wg_release(l);
		}
	}
	return best;
}

static void run_bench_shape(int bf16, int m, int n, int k, int sms, cublasHandle_t h, cudaStream_t s)
{
	sp24 a;
	make_sp24(a, m, k, bf16);
	int ldb = (n + 7) / 8 * 8;
	std::vector<uint16_t> b((size_t)k * ldb);
	for (auto &x : b)
		x = to16(rndf(), bf16);
	/* Enough weight copies to exceed 200 MB, so that the weight comes
	 * from HBM, not from the 50 MB L2. */
	double wbytes = (double)nv_wg_values_bytes(m, k, 2) + (double)nv_wg_meta_bytes(m, k);
	int copies = std::min(8, std::max(1, (int)ceil(200e6 / wbytes)));
	/* The weight as stage images in the daemon's order, in the other
	 * order, and row-major (the TMA kernels and the decode kernels). */
	std::vector<wg_weight> w(copies), wa(copies), wr(copies);
	wg_pack(a, w[0], NV_WG_ORDER);
	wg_pack(a, wa[0], WG_ALT_ORDER);
	wg_pack(a, wr[0], NV_WG_ROWMAJOR);
	for (int i = 1; i < copies; i++)
		for (std::vector<wg_weight> *ws : { &w, &wa, &wr }) {
			std::vector<wg_weight> &x = *ws;
			x[i] = x[0];
			size_t vb = wg_val_bytes(x[0]), mb = (size_t)nv_wg_meta_bytes(m, k);
			CK(cudaMalloc(&x[i].val, vb));
			CK(cudaMalloc(&x[i].meta, mb));
			CK(cudaMemcpy(x[i].val, x[0].val, vb, cudaMemcpyDeviceToDevice));
			CK(cudaMemcpy(x[i].meta, x[0].meta, mb, cudaMemcpyDeviceToDevice));
		}
	void *db, *dd, *dblas;
	CK(cudaMalloc(&db, b.size() * 2));
	CK(cudaMalloc(&dd, (size_t)m * n * 2));
	CK(cudaMalloc(&dblas, (size_t)m * n * 2));
	CK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));

	/* cuBLAS dense on the expanded A (copies to exceed 200 MB too). */
	int dcopies = std::min(8, std::max(1, (int)ceil(200e6 / ((double)m * k * 2))));
	std::vector<void *> da(dcopies);
	{
		uint16_t *cv;
		uint32_t *cm;
		CK(cudaMalloc(&cv, a.val.size() * 2));
		CK(cudaMalloc(&cm, a.meta.size() * 4));
		CK(cudaMemcpy(cv, a.val.data(), a.val.size() * 2, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(cm, a.meta.data(), a.meta.size() * 4, cudaMemcpyHostToDevice));
		for (int i = 0; i < dcopies; i++) {
			CK(cudaMalloc(&da[i], (size_t)m * k * 2));
			int64_t groups = (int64_t)m * (k / 4);
			expand_kernel<<<(unsigned)((groups + 255) / 256), 256>>>(cv, cm, m, k, a.mw, (uint16_t *)da[i]);
			CK(cudaGetLastError());
		}
		CK(cudaDeviceSynchronize());
		cudaFree(cv);
		cudaFree(cm);
	}
	blas_ctx bc = { h, m, n, k, ldb, bf16, da.data(), db, dblas };
	float t_blas = time_median(blas_call, &bc, dcopies, s);

	sampled_ref sr;
	make_sampled_ref(sr, m, n, k, ldb, b, bf16, [&](int r, int kk) { return sp24_at(a, r, kk, bf16); });
	double blas_err = sampled_err(sr, dblas);
	double flop = 2.0 * m * n * k;
	printf("bench %-4s %dx%dx%d  cuBLAS dense %.1f us (%.0f TF)  err %.1e\n", bf16 ? "bf16" : "f16", m, n, k,
	       t_blas, flop / t_blas * 1e-6, blas_err);

	/* Our variants: every tile of this dtype with its default split, and
	 * for the skinny shapes a sweep of splits. */
	/* The three layouts in turn, and with WG_ABBA a second time in the
	 * reverse order, each keeping its faster pass: at the large shapes the
	 * GPU's clock falls as it heats, and the first to run gains. */
	std::vector<int> sp = { 1, 2, 3, 4, 6, 8 };
	if (getenv("WG_SPLITS")) { /* only these (a profile's launches) */
		sp.clear();
		for (double x : env_numbers("WG_SPLITS"))
			sp.push_back((int)x);
	}
	tile_best tb = time_tiles(0, bf16, m, n, ldb, w, db, dd, t_blas, sr, sp, sms, s);
	/* WG_IMAGES=1: the daemon's layout only. */
	const bool others = !getenv("WG_IMAGES");
	tile_best ta = { 1e30f, "-", 0 }, tt = ta;
	if (others) {
		ta = time_tiles(0, bf16, m, n, ldb, wa, db, dd, t_blas, sr, sp, sms, s);
		tt = time_tiles(0, bf16, m, n, ldb, wr, db, dd, t_blas, sr, sp, sms, s);
	}
	if (others && getenv("WG_ABBA")) {
		printf("  (again, in the reverse order)\n");
		const tile_best t2 = time_tiles(0, bf16, m, n, ldb, wr, db, dd, t_blas, sr, sp, sms, s);
		const tile_best a2 = time_tiles(0, bf16, m, n, ldb, wa, db, dd, t_blas, sr, sp, sms, s);
		const tile_best b2 = time_tiles(0, bf16, m, n, ldb, w, db, dd, t_blas, sr, sp, sms, s);
		printf("| %s | %d x %d x %d | first pass: images %.1f, other order %.1f, TMA %.1f us | reverse pass: %.1f, %.1f, %.1f us |\n",
		       bf16 ? "bf16" : "f16", m, n, k, tb.t, ta.t, tt.t, b2.t, a2.t, t2.t);
		tb = b2.t < tb.t ? b2 : tb;
		ta = a2.t < ta.t ? a2 : ta;
		tt = t2.t < tt.t ? t2 : tt;
	}
	const float best = std::min(tb.t, std::min(ta.t, tt.t));
	const double wbytes_img = (double)nv_wg_img_bytes(m, k, 2) + (double)nv_wg_meta_bytes(m, k);
	printf("| %s | %d x %d x %d | images %.1f us (%.0f TF-eq, %.2f TB/s) %s s%d |", bf16 ? "bf16" : "f16", m, n, k,
	       tb.t, flop / tb.t * 1e-6, wbytes_img / tb.t * 1e-6, tb.name, tb.splits);
	if (others)
		printf(" other order %.1f us %s s%d | TMA %.1f us (%.0f TF-eq) %s s%d |", ta.t, ta.name, ta.splits, tt.t,
		       flop / tt.t * 1e-6, tt.name, tt.splits);
	printf(" cuBLAS %.1f us (%.0f TF) |", t_blas, flop / t_blas * 1e-6);
	if (others)
		printf(" %.2fx TMA |", tb.t / tt.t);
	printf(" %.2fx cuBLAS |\n", tb.t / t_blas);

	/* A hot weight (WG_KEEP="0 20 40 ...": MB of it kept, issue 11): the
	 * daemon's tile for N on the daemon's images, its first keep_iters
	 * stages of every tile loaded evict-last, timed on ONE weight back to
	 * back (as a daemon serving one resident weight runs it), then on the
	 * rotating copies (a weight among many, for what the hint costs when
	 * nothing stays), beside cuBLAS on one dense copy. */
	if (getenv("WG_KEEP")) {
		int occ[NV_WG_TILE_COUNT];
		for (int t = 0; t < NV_WG_TILE_COUNT; t++)
			occ[t] = 1;
		struct nv_wg_plan pl;
		struct nv_wg_tile_shape sh;
		const variant *hv = NULL;
		if (nv_wg_plan_make(m, n, k, sms, occ, -1, &pl) == 0) {
			nv_wg_tile_shape(0, pl.tile, &sh);
			hv = find_variant(0, bf16, sh.bn, w[0].order);
		}
		const float blas1 = time_median(blas_call, &bc, 1, s);
		/* A stage of every tile, in bytes (values and metadata). */
		const double per_stage = (double)((m + NV_WG_BM - 1) / NV_WG_BM) * (NV_WG_A_BYTES + NV_WG_E_BYTES);
		for (double mb : hv ? env_numbers("WG_KEEP") : std::vector<double>()) {
			int keep = (int)(mb * 1e6 / per_stage);
			std::vector<wg_launch> L(copies);
			bool bad = false;
			for (int i = 0; i < copies; i++)
				if (wg_prepare(L[i], hv, w[i], db, n, ldb, NULL, dd, bf16 ? MFMA_DT_BF16 : MFMA_DT_F16, 1.0f,
					       0.0f, 0, sms))
					bad = true;
			if (bad) {
				printf("  hot: tensor map failed\n");
				for (auto &l : L)
					wg_release(l);
				break;
			}
			/* More than the weight: all of it, once. */
			const bool all = keep >= L[0].p.k_iters;
			if (all)
				keep = L[0].p.k_iters;
			for (auto &l : L)
				l.p.keep_iters = keep;
			wg_ctx ctx = { L.data() };
			CK(cudaMemset(dd, 0xff, (size_t)m * n * 2));
			const float t1 = time_median(wg_call, &ctx, 1, s);
			CK(cudaStreamSynchronize(s));
			const double err = sampled_err(sr, dd);
			const float tr = time_median(wg_call, &ctx, copies, s);
			const double kept = (double)keep * L[0].p.tiles_m * (NV_WG_A_BYTES + NV_WG_E_BYTES);
			printf("| hot %s | %d x %d x %d | %s splits %d | keep %d of %d stages (%.1f MB evict-last) | one weight %.1f us"
			       " | rotating %d copies %.1f us | cuBLAS one copy %.1f us | %.2fx cuBLAS | err %.1e %s |\n",
			       bf16 ? "bf16" : "f16", m, n, k, hv->name, (int)L[0].grid.z, keep, L[0].p.k_iters, kept * 1e-6,
			       t1, copies, tr, blas1, t1 / blas1, err, err < (bf16 ? 1e-2 : 2e-3) ? "ok" : "WRONG");
			for (auto &l : L)
				wg_release(l);
			if (all)
				break;
		}
	}

	/* The decode kernels (N <= 64): each variant of this dtype whose BN
	 * covers N, on its default grid and on one CTA per SM. */
	float dbest = 1e30f;
	const char *dbest_name = "-";
	int dbest_grid = 0, dbest_rows = 0;
	const bool decode = n <= 64 && !getenv("WG_NODECODE");
	for (int di = 0; decode && di < ndvariants; di++) {
		const dvariant *dv = &dvariants[di];
		if (dv->bf16 != bf16 || dv->bn < n || dv->occ <= 0)
			continue;
		if (dv->bn >= 2 * n && dv->bn > 16)
			continue; /* a narrower tile covers N */
		/* {grid, rows}: stream-K on every CTA slot and on one per SM, then
		 * one block per CTA with blocks of as few rows as fill the SMs
		 * (all CTAs walk K together, as the tiled kernels' do). */
		const int fill = std::min(NV_WGD_BM(dv->cons), (((m + sms - 1) / sms) + 7) / 8 * 8);
		/* And stream-K over the weight as [tile][stage] images (each
		 * CTA's units one contiguous run), 128-row blocks. */
		struct cfg_t {
			int grid, rows, img;
		};
		std::vector<cfg_t> cfgs = { { 0, 0, 0 } };
		if (dv->occ > 1)
			cfgs.push_back({ sms, 0, 0 });
		cfgs.push_back({ -1, fill, 0 });
		if (dv->cons == 2 && dv->ksub == 1) {
			cfgs.push_back({ 0, 128, 1 });
			if (dv->occ > 1)
				cfgs.push_back({ sms, 128, 1 });
		}
		const std::vector<wg_weight> &wt = NV_WG_ORDER == NV_WG_IMG_TILES ? w : wa;
		for (auto cfg : cfgs) {
			std::vector<wgd_launch> L(copies);
			bool bad = false;
			for (int i = 0; i < copies; i++)
				if (wgd_prepare(L[i], dv, cfg.img ? wt[i] : wr[i], db, n, ldb, NULL, dd,
						bf16 ? MFMA_DT_BF16 : MFMA_DT_F16, 1.0f, 0.0f, cfg.grid, sms, cfg.rows))
					bad = true;
			if (bad) {
				printf("  %-14s tensor map failed\n", dv->name);
				continue;
			}
			CK(cudaMemset(dd, 0xff, (size_t)m * n * 2));
			wgd_ctx ctx = { L.data() };
			float t = time_median(wgd_call, &ctx, copies, s);
			CK(cudaStreamSynchronize(s));
			double err = sampled_err(sr, dd);
			bool ok = err < (bf16 ? 1e-2 : 2e-3);
			double bytes = (double)nv_wg_values_bytes(m, k, 2) + (double)nv_wg_meta_bytes(m, k);
			printf("  %-14s grid %5d rows %3d%s: %8.1f us %6.0f TF-eq %5.2f TB/s  %.2fx wgmma  %.2fx cuBLAS  err %.1e %s\n",
			       dv->name, L[0].grid, L[0].rows, cfg.img ? " images" : "", t, flop / t * 1e-6, bytes / t * 1e-6, t / best, t / t_blas, err,
			       ok ? "ok" : "WRONG");
			if (ok && t < dbest) {
				dbest = t;
				dbest_name = dv->name;
				dbest_grid = L[0].grid;
				dbest_rows = L[0].rows;
			}
			for (auto &l : L)
				wgd_release(l);
		}
	}
	if (decode)
		printf("|decode %s | %d x %d x %d | %.1f us %s grid %d rows %d | wgmma %.1f us | cuBLAS %.1f us | %.2fx wgmma |\n",
		       bf16 ? "bf16" : "f16", m, n, k, dbest, dbest_name, dbest_grid, dbest_rows, best, t_blas,
		       dbest / best);
	for (std::vector<wg_weight> *ws : { &w, &wa, &wr })
		for (auto &x : *ws) {
			cudaFree(x.val);
			cudaFree(x.meta);
		}
	for (auto p : da)
		cudaFree(p);
	cudaFree(db);
	cudaFree(dd);
	cudaFree(dblas);
}

/* The dense kernels at one shape: a fully random dense A (zeros would
 * flatter both sides), copies above 200 MB so that A comes from HBM,
 * cublasGemmEx on the row-major copies, then every dense tile this shape
 * can use with its plan's split (and a sweep of splits where the tiles
 * alone leave SMs idle), each checked on 32 sampled rows against float64:
 * the daemon's kernels on A's dense stage images, then its dense_rm_ ones
 * (a request's own A) on the row-major copies. */
static void run_dense_bench_shape(int bf16, int m, int n, int k, int sms, cublasHandle_t h, cudaStream_t s)
{
	dmat a;
	make_dense(a, m, k, bf16);
	int ldb = (n + 7) / 8 * 8;
	std::vector<uint16_t> b((size_t)k * ldb);
	for (auto &x : b)
		x = to16(rndf(), bf16);
	const double abytes = (double)a.val.size() * 2;
	const int copies = std::min(8, std::max(1, (int)ceil(200e6 / abytes)));
	std::vector<wg_weight> w(copies), wi(copies);
	for (int i = 0; i < copies; i++) {
		wg_upload_dense(a, w[i], NV_WG_ROWMAJOR);
		wg_upload_dense(a, wi[i], NV_WG_ORDER);
	}
	void *db, *dd, *dblas;
	CK(cudaMalloc(&db, b.size() * 2));
	CK(cudaMalloc(&dd, (size_t)m * n * 2));
	CK(cudaMalloc(&dblas, (size_t)m * n * 2));
	CK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
	/* cuBLAS reads A with lda = k; ours with lda = nv_wg_dense_lda(k):
	 * the same buffers when k is a multiple of 64 (every timed shape). */
	std::vector<void *> da(copies);
	for (int i = 0; i < copies; i++)
		da[i] = w[i].val;
	float t_blas = -1;
	if (a.lda == k) {
		blas_ctx bc = { h, m, n, k, ldb, bf16, da.data(), db, dblas };
		t_blas = time_median(blas_call, &bc, copies, s);
	}

	sampled_ref sr;
	make_sampled_ref(sr, m, n, k, ldb, b, bf16,
			 [&](int r, int kk) { return from16(a.val[(size_t)r * a.lda + kk], bf16); });
	const double flop = 2.0 * m * n * k;
	const double blas_err = t_blas > 0 ? sampled_err(sr, dblas) : 0;
	printf("dense %-4s %dx%dx%d  cuBLAS GemmEx %.1f us (%.0f TF)  err %.1e\n", bf16 ? "bf16" : "f16", m, n, k,
	       t_blas, flop / t_blas * 1e-6, blas_err);
	const tile_best tb = time_tiles(1, bf16, m, n, ldb, wi, db, dd, t_blas, sr, { 1, 2, 4 }, sms, s);
	const tile_best tt = time_tiles(1, bf16, m, n, ldb, w, db, dd, t_blas, sr, { 1, 2, 4 }, sms, s);
	printf("|dense %s | %d x %d x %d | %.1f us (%.0f TF) %s s%d | row-major by TMA %.1f us %s s%d | %.2fx | "
	       "GemmEx %.1f us (%.0f TF) | %.2fx |\n",
	       bf16 ? "bf16" : "f16", m, n, k, tb.t, flop / tb.t * 1e-6, tb.name, tb.splits, tt.t, tt.name, tt.splits,
	       tb.t / tt.t, t_blas, flop / t_blas * 1e-6, tb.t / t_blas);
	for (auto &x : w)
		cudaFree(x.val);
	for (auto &x : wi)
		cudaFree(x.val);
	cudaFree(db);
	cudaFree(dd);
	cudaFree(dblas);
}

/* ---- the stream probe: how fast can bulk copies stream a weight? ----
 *
 * The decode shapes are bound by streaming the weight (the tiled kernel
 * with its math left out, nomath_*, is as slow as with it), at 2.6-2.8
 * TB/s against cuBLASLt's 3.4 for its dense weight.  This probe streams the
 * same bytes (a 14336 x 4096 2:4 f16 weight: 56 MiB of values and 7 MiB of
 * metadata) through a ring of shared memory with nothing else in the
 * kernel: one thread issues a bulk copy per chunk of values (and one per
 * chunk of metadata, 1 KiB per 8 KiB as the kernels read it, or none), one
 * warp waits for each and releases it.  It varies what the kernels could:
 * the chunk a copy moves, the ring's depth, the grid, and the order of the
 * chunks (each CTA one contiguous run, or the daemon's [stage][tile] order
 * where CTA t reads chunks t, t + grid, t + 2 grid, ...).  A plain
 * vectorised load of the same bytes by every thread gives the ceiling
 * without shared memory. */
template <int CHUNK, int STAGES>
__global__ void __launch_bounds__(64) stream_probe(const char *src, const char *meta, int chunks, int interleave,
						   unsigned *sink)
{
	extern __shared__ char sp_raw[];
	char *ring = (char *)(((uintptr_t)sp_raw + 1023) & ~(uintptr_t)1023);
	const int MB = meta ? CHUNK / 8 : 0; /* metadata bytes per chunk */
	const int STAGE = CHUNK + MB;
	const uint32_t sbase = nv_wg_smem(ring), bars = sbase + STAGES * STAGE;
	const unsigned tid = threadIdx.x, lane = tid & 31;
	const int c = blockIdx.x, grid = gridDim.x;
	const int n = interleave ? chunks / grid : (int)((int64_t)(c + 1) * chunks / grid - (int64_t)c * chunks / grid);
	const int first = interleave ? c : (int)((int64_t)c * chunks / grid);
	if (tid == 0) {
		for (int st = 0; st < STAGES; st++) {
			nv_mbar_init(bars + 8 * st, 1);
			nv_mbar_init(bars + 8 * (STAGES + st), 32);
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();
	if (tid == 32) {
		for (int i = 0; i < n; i++) {
			const int st = i % STAGES;
			const int64_t idx = interleave ? (int64_t)i * grid + first : first + i;
			nv_mbar_wait(bars + 8 * (STAGES + st), ((i / STAGES) & 1) ^ 1);
			const uint32_t full = bars + 8 * st, dst = sbase + st * STAGE;
			nv_mbar_expect_tx(full, STAGE);
			nv_bulk_1d(dst, (uint64_t)(src + idx * CHUNK), CHUNK, full, NV_WG_EVICT_FIRST);
			if (MB)
				nv_bulk_1d(dst + CHUNK, (uint64_t)(meta + idx * MB), MB, full, NV_WG_EVICT_FIRST);
		}
	} else if (tid < 32) {
		unsigned acc = 0;
		for (int i = 0; i < n; i++) {
			const int st = i % STAGES;
			nv_mbar_wait(bars + 8 * st, (i / STAGES) & 1);
			acc += ((const volatile unsigned *)(ring + st * STAGE))[lane * (CHUNK / 128)];
			nv_mbar_arrive(bars + 8 * (STAGES + st));
		}
		sink[c * 32 + lane] = acc;
	}
}

__global__ void __launch_bounds__(512) stream_ldg(const uint4 *src, long n16, unsigned *sink)
{
	unsigned acc = 0;
	const long step = (long)gridDim.x * blockDim.x;
	long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
	for (; i + 3 * step < n16; i += 4 * step) {
		uint4 v[4];
#pragma unroll
		for (int u = 0; u < 4; u++)
			v[u] = __ldcs(src + i + u * step);
#pragma unroll
		for (int u = 0; u < 4; u++)
			acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
	}
	for (; i < n16; i += step) {
		const uint4 v = __ldcs(src + i);
		acc ^= v.x ^ v.y ^ v.z ^ v.w;
	}
	if (acc == 0x9e3779b9u)
		sink[0] = acc; /* never, in practice: keeps the loads */
}

struct sp_ctx {
	void (*k)(const char *, const char *, int, int, unsigned *);
	const std::vector<char *> *bufs, *metas;
	int chunks, interleave, grid, chunk, stages;
	bool meta;
	unsigned *sink;
	size_t smem;
};

static void sp_call(void *ctx, int i, cudaStream_t s)
{
	const sp_ctx *c = (const sp_ctx *)ctx;
	c->k<<<c->grid, 64, c->smem, s>>>((*c->bufs)[i], c->meta ? (*c->metas)[i] : NULL, c->chunks, c->interleave,
					  c->sink);
}

struct ldg_ctx {
	const std::vector<char *> *bufs;
	long n16;
	int grid;
	unsigned *sink;
};

static void ldg_call(void *ctx, int i, cudaStream_t s)
{
	const ldg_ctx *c = (const ldg_ctx *)ctx;
	stream_ldg<<<c->grid, 512, 0, s>>>((const uint4 *)(*c->bufs)[i], c->n16, c->sink);
}

static int run_stream_probe(int sms)
{
	const size_t vbytes = (size_t)14336 * 2048 * 2, mbytes = vbytes / 8;
	const int copies = 3; /* 3 x 63 MiB: no copy is left in the 60 MB L2 */
	std::vector<char *> bufs(copies), metas(copies);
	for (int i = 0; i < copies; i++) {
		CK(cudaMalloc(&bufs[i], vbytes));
		CK(cudaMalloc(&metas[i], mbytes));
		CK(cudaMemset(bufs[i], i + 1, vbytes));
		CK(cudaMemset(metas[i], i + 7, mbytes));
	}
	unsigned *sink;
	CK(cudaMalloc(&sink, (size_t)4 * 32 * 4096));
	cudaStream_t s;
	CK(cudaStreamCreate(&s));
	printf("stream probe: %zu MiB of values + %zu MiB of metadata, %d SMs\n", vbytes >> 20, mbytes >> 20, sms);
	printf("| what reads | chunk KiB | stages | ring KiB | grid | order | us | TB/s |\n|---|---|---|---|---|---|---|---|\n");
	for (int grid : { sms * 4, sms * 8 }) {
		ldg_ctx lc = { &bufs, (long)(vbytes / 16), grid, sink };
		const float t = time_median(ldg_call, &lc, copies, s);
		printf("| ldg (values only) | - | - | - | %d x 512 | grid-stride | %.1f | %.2f |\n", grid, t, vbytes / t * 1e-6);
	}
	struct kcfg {
		void (*k)(const char *, const char *, int, int, unsigned *);
		int chunk, stages;
	};
	const kcfg ks[] = {
		{ stream_probe<8192, 9>, 8192, 9 },    { stream_probe<8192, 12>, 8192, 12 },
		{ stream_probe<8192, 20>, 8192, 20 },  { stream_probe<16384, 6>, 16384, 6 },
		{ stream_probe<16384, 11>, 16384, 11 }, { stream_probe<32768, 3>, 32768, 3 },
		{ stream_probe<32768, 5>, 32768, 5 },
	};
	for (const kcfg &k : ks)
		for (int meta = 1; meta >= 0; meta--) {
			const size_t smem = (size_t)k.stages * (k.chunk + (meta ? k.chunk / 8 : 0)) + 1024 + 16 * k.stages;
			CK(cudaFuncSetAttribute(k.k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
			int occ = 0;
			CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k.k, 64, smem));
			const int chunks = (int)(vbytes / k.chunk);
			/* 112: one CTA per 128-row tile, as the tiled kernel at
			 * 14336 rows; the SMs; every slot the ring leaves. */
			for (int grid : { 112, sms, sms * occ }) {
				for (int inter = 0; inter < 2; inter++) {
					if (inter && (chunks % grid || k.chunk != 8192))
						continue;
					if (grid == sms * occ && occ == 1)
						continue;
					sp_ctx c = { k.k, &bufs, &metas, chunks, inter, grid, k.chunk, k.stages, meta != 0, sink, smem };
					const float t = time_median(sp_call, &c, copies, s);
					const double bytes = (double)vbytes + (meta ? (double)mbytes : 0.0);
					printf("| bulk%s | %d | %d | %zu | %d | %s | %.1f | %.2f |\n", meta ? " + meta" : "",
					       k.chunk >> 10, k.stages, smem >> 10, grid,
					       inter ? "[stage][tile]" : "contiguous", t, bytes / t * 1e-6);
				}
			}
		}
	for (int i = 0; i < copies; i++) {
		cudaFree(bufs[i]);
		cudaFree(metas[i]);
	}
	cudaFree(sink);
	return 0;
}

/* ---- trace: when each CTA of one launch starts and ends ----
 *
 * wgmma_bench trace MxNxK SPLITS: the daemon's f16 2:4 kernel (n16 for N
 * <= 16, else n64) on one weight with that split-K, warmed by five
 * launches, then one more, after L2 is flushed and between two events,
 * whose CTAs write the global timer at their start, at the end of their
 * main loop and at their end, and their SM.
 * Prints, per split z, when its CTAs start, finish their loop and end
 * (from the first CTA's start), and how many SMs ran one CTA or two. */
static int run_trace(int m, int n, int k, int splits, int sms)
{
	const int bn = n <= 16 ? 16 : 64;
	void (*fn)(const nv_wg_params, unsigned long long *) = bn == 16 ? nv_wg_trace_f16_n16 : nv_wg_trace_f16_n64;
	const variant *v = find_variant(0, 0, bn, NV_WG_ORDER);
	if (!v)
		return 1;
	CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, v->smem));
	sp24 a;
	make_sp24(a, m, k, 0);
	wg_weight w;
	wg_pack(a, w, NV_WG_ORDER);
	const int ldb = (n + 7) / 8 * 8;
	std::vector<uint16_t> b((size_t)k * ldb);
	for (auto &x : b)
		x = to16(rndf(), 0);
	void *db, *dd;
	CK(cudaMalloc(&db, b.size() * 2));
	CK(cudaMalloc(&dd, (size_t)m * n * 2));
	CK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
	wg_launch L;
	if (wg_prepare(L, v, w, db, n, ldb, NULL, dd, MFMA_DT_F16, 1.0f, 0.0f, splits, sms)) {
		printf("trace: tensor map failed\n");
		return 1;
	}
	const int ctas = (int)(L.grid.x * L.grid.z);
	unsigned long long *dtr;
	CK(cudaMalloc(&dtr, (size_t)ctas * 4 * 8));
	for (int i = 0; i < 5; i++)
		fn<<<L.grid, 384, v->smem>>>(L.p, dtr);
	/* The traced launch reads its weight from HBM, as the benchmarks'
	 * rotating copies do: L2 is flushed by writing 256 MiB first.  The
	 * events around it give the time a benchmark would report, to set
	 * beside the span its CTAs ran. */
	void *flush;
	const size_t flush_bytes = (size_t)256 << 20;
	CK(cudaMalloc(&flush, flush_bytes));
	CK(cudaMemset(flush, 1, flush_bytes));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaEventRecord(e0));
	fn<<<L.grid, 384, v->smem>>>(L.p, dtr);
	CK(cudaEventRecord(e1));
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	float ev_ms = 0;
	CK(cudaEventElapsedTime(&ev_ms, e0, e1));
	std::vector<unsigned long long> tr((size_t)ctas * 4);
	CK(cudaMemcpy(tr.data(), dtr, tr.size() * 8, cudaMemcpyDeviceToHost));
	unsigned long long t0 = ~0ull, t1 = 0;
	for (int c = 0; c < ctas; c++) {
		t0 = std::min(t0, tr[4 * c]);
		t1 = std::max(t1, tr[4 * c + 2]);
	}
	printf("trace %s %dx%dx%d: grid %d x %d (tiles x splits), k_iters %d, %d each; launch span %.1f us "
	       "(first start to last end), %.1f us between events, L2 flushed\n",
	       v->name, m, n, k, (int)L.grid.x, (int)L.grid.z, L.p.k_iters, L.p.iters_per_split, (t1 - t0) * 1e-3,
	       ev_ms * 1e3);
	printf("| split | CTAs | start min / median / max us | loop end min / median / max | end min / median / max |\n"
	       "|---|---|---|---|---|\n");
	for (int z = 0; z < (int)L.grid.z; z++) {
		std::vector<double> st, le, en;
		for (int x = 0; x < (int)L.grid.x; x++) {
			const unsigned long long *r = &tr[4 * ((size_t)z * L.grid.x + x)];
			st.push_back((r[0] - t0) * 1e-3);
			le.push_back((r[1] - t0) * 1e-3);
			en.push_back((r[2] - t0) * 1e-3);
		}
		for (auto *vv : { &st, &le, &en })
			std::sort(vv->begin(), vv->end());
		const size_t h = st.size() / 2, e = st.size() - 1;
		printf("| %d | %zu | %.1f / %.1f / %.1f | %.1f / %.1f / %.1f | %.1f / %.1f / %.1f |\n", z, st.size(), st[0],
		       st[h], st[e], le[0], le[h], le[e], en[0], en[h], en[e]);
	}
	std::vector<int> per_sm(1024, 0);
	for (int c = 0; c < ctas; c++)
		per_sm[tr[4 * c + 3] & 1023]++;
	int one = 0, two = 0, more = 0;
	for (int x : per_sm)
		one += x == 1, two += x == 2, more += x > 2;
	printf("SMs with one CTA %d, two %d, more %d (of %d)\n", one, two, more, sms);
	wg_release(L);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(flush);
	cudaFree(dtr);
	cudaFree(db);
	cudaFree(dd);
	cudaFree(w.val);
	cudaFree(w.meta);
	return 0;
}

/* ---- the gate: the kernel launched before B is on the device ---- */

typedef CUresult (*write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
static write32_fn stream_write32;

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* One request as the daemon serves it alone, from B in pinned host memory
 * to D in pinned host memory.  l2 < 0: B copied in, then the kernel, on
 * one stream (the daemon today).  l2 >= 0: the kernel launched with the
 * gate on s while B's copy runs on g, which then sets the gate word;
 * l2 stages of A prefetched into L2 during the wait.  out: 0 D copied
 * out after the kernel; 1 the kernel's epilogue writes D straight into the
 * mapped pinned memory; 2 each CTA copies its tile of D there after its
 * epilogue (nv_wg_params.dh).  Returns the wall
 * time from the first enqueue to the end event's synchronize; *gpu the
 * events' time. */
struct gate_req {
	wg_launch L;
	void *hb, *hd, *db, *dd;
	size_t bbytes, dbytes;
	CUdeviceptr gate;
	uint32_t seq;
	cudaEvent_t e0, e1;
	cudaStream_t s, g;
};
static double gate_once(gate_req &r, int l2, float *gpu, int out = 0)
{
	const double t0 = now_us();
	CK(cudaEventRecord(r.e0, r.s));
	nv_wg_params &p = r.L.p;
	if (l2 < 0) {
		p.gate = 0;
		CK(cudaMemcpyAsync(r.db, r.hb, r.bbytes, cudaMemcpyHostToDevice, r.s));
	} else {
		CK(cudaStreamWaitEvent(r.g, r.e0, 0));
		CK(cudaMemcpyAsync(r.db, r.hb, r.bbytes, cudaMemcpyHostToDevice, r.g));
		if (stream_write32((CUstream)r.g, r.gate, ++r.seq, 0) != CUDA_SUCCESS) {
			fprintf(stderr, "cuStreamWriteValue32 failed\n");
			exit(1);
		}
		p.gate = r.gate;
		p.gate_seq = r.seq;
		p.gate_l2 = l2;
	}
	p.d = (CUdeviceptr)(uintptr_t)(out == 1 ? r.hd : r.dd);
	p.dh = out == 2 ? (CUdeviceptr)(uintptr_t)r.hd : 0;
	wg_run(r.L, r.s);
	if (out == 0)
		CK(cudaMemcpyAsync(r.hd, r.dd, r.dbytes, cudaMemcpyDeviceToHost, r.s));
	CK(cudaEventRecord(r.e1, r.s));
	CK(cudaEventSynchronize(r.e1));
	const double wall = now_us() - t0;
	float ms;
	CK(cudaEventElapsedTime(&ms, r.e0, r.e1));
	*gpu = ms * 1000.0f;
	return wall;
}

/* `wgmma_bench gate [MxNxK ...]`: the daemon's tile and split for each
 * shape (f16 2:4, D f16, one weight), each request alone with an idle gap
 * as served one at a time, the settings in turn; first a check that the
 * gated D equals the plain one bit for bit with B changed before every
 * gated launch (a kernel that read B before it landed would read the
 * previous B), and the plain D against float64 on sampled rows. */
static int run_gate(const std::vector<int> &shp, int sms)
{
	cudaDriverEntryPointQueryResult q;
	CK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", (void **)&stream_write32, 12000, cudaEnableDefault,
					     &q));
	if (q != cudaDriverEntryPointSuccess || !stream_write32) {
		printf("cuStreamWriteValue32 not found\n");
		return 1;
	}
	std::vector<int> l2s = { 0, 8, 16, 32 };
	if (getenv("WG_GATE_L2")) {
		l2s.clear();
		for (double x : env_numbers("WG_GATE_L2"))
			l2s.push_back((int)x);
	}
	const int gap_us = getenv("WG_GATE_GAP") ? atoi(getenv("WG_GATE_GAP")) : 50;
	const int reps = getenv("WG_GATE_REPS") ? atoi(getenv("WG_GATE_REPS")) : 300;
	int fails = 0;
	for (size_t si = 0; si < shp.size(); si += 3) {
		const int m = shp[si], n = shp[si + 1], k = shp[si + 2], bf16 = 0;
		int occ[NV_WG_TILE_COUNT];
		for (int t = 0; t < NV_WG_TILE_COUNT; t++)
			occ[t] = 1;
		struct nv_wg_plan pl;
		if (nv_wg_plan_make(m, n, k, sms, occ, -1, &pl) < 0) {
			printf("gate %dx%dx%d: no plan\n", m, n, k);
			fails++;
			continue;
		}
		struct nv_wg_tile_shape ts;
		nv_wg_tile_shape(0, pl.tile, &ts);
		const variant *v = find_variant(0, bf16, ts.bn, NV_WG_ORDER);
		sp24 a;
		make_sp24(a, m, k, bf16);
		wg_weight w;
		wg_pack(a, w, NV_WG_ORDER);
		gate_req r;
		memset(&r, 0, sizeof(r));
		const int ldb = (n + 7) / 8 * 8;
		r.bbytes = (size_t)k * ldb * 2;
		r.dbytes = (size_t)m * n * 2;
		CK(cudaHostAlloc(&r.hb, r.bbytes, cudaHostAllocMapped));
		CK(cudaHostAlloc(&r.hd, r.dbytes, cudaHostAllocMapped));
		CK(cudaMalloc(&r.db, r.bbytes));
		CK(cudaMalloc(&r.dd, r.dbytes));
		CK(cudaMalloc((void **)&r.gate, 4));
		CK(cudaMemset((void *)r.gate, 0, 4));
		CK(cudaEventCreate(&r.e0));
		CK(cudaEventCreate(&r.e1));
		CK(cudaStreamCreateWithFlags(&r.s, cudaStreamNonBlocking));
		CK(cudaStreamCreateWithFlags(&r.g, cudaStreamNonBlocking));
		if (wg_prepare(r.L, v, w, r.db, n, ldb, NULL, r.dd, MFMA_DT_F16, 1.0f, 0.0f, 0, sms) < 0) {
			printf("gate %dx%dx%d: prepare failed\n", m, n, k);
			fails++;
			continue;
		}
		/* The check: fresh B, the gated launch (l2 of the list's
		 * largest), then the plain one, equal bit for bit. */
		std::vector<uint16_t> b((size_t)k * ldb), dg(r.dbytes / 2);
		float gpu;
		double err = 0;
		int diff = 0, ddiff = 0;
		for (int it = 0; it < 6; it++) {
			for (auto &x : b)
				x = to16(rndf(), bf16);
			memcpy(r.hb, b.data(), r.bbytes);
			memset(r.hd, 0xff, r.dbytes);
			gate_once(r, l2s.back(), &gpu);
			memcpy(dg.data(), r.hd, r.dbytes);
			memset(r.hd, 0xff, r.dbytes);
			gate_once(r, -1, &gpu);
			if (memcmp(dg.data(), r.hd, r.dbytes) != 0)
				diff++;
			/* D written across the bus by the kernel (both ways),
			 * with and without the gate, equal to the copy out. */
			memcpy(dg.data(), r.hd, r.dbytes);
			for (int x = 0; x < 4; x++) {
				memset(r.hd, 0xff, r.dbytes);
				gate_once(r, x & 1 ? l2s.back() : -1, &gpu, 1 + x / 2);
				if (memcmp(dg.data(), r.hd, r.dbytes) != 0)
					ddiff++;
			}
			if (it == 0) {
				sampled_ref sr;
				make_sampled_ref(sr, m, n, k, ldb, b, bf16, [&](int rr, int kk) { return sp24_at(a, rr, kk, bf16); });
				err = sampled_err(sr, r.dd);
			}
		}
		const bool ok = diff == 0 && ddiff == 0 && err < 1e-2;
		fails += !ok;
		printf("gate %dx%dx%d %s split %d: gated D equal to plain in %d of 6, D out by the kernel in %d of 24, "
		       "plain err %.1e  %s\n",
		       m, n, k, v->name, r.L.grid.z, 6 - diff, 24 - ddiff, err, ok ? "ok" : "FAILED");
		/* Timing: the settings in turn, each request alone: plain, the
		 * gate at each l2, then D out by the kernel (epilogue, tile
		 * copy) without and with the gate (l2 the list's largest). */
		struct setting {
			int l2, out;
			char name[48];
		};
		std::vector<setting> set = { { -1, 0, "plain" } };
		for (int l2 : l2s) {
			set.push_back({ l2, 0, "" });
			snprintf(set.back().name, sizeof(set.back().name), "gate l2=%d", l2);
		}
		const size_t nl = set.size();
		set.push_back({ -1, 1, "epilogue out" });
		set.push_back({ l2s.back(), 1, "gate + epilogue out" });
		set.push_back({ -1, 2, "tile out" });
		set.push_back({ l2s.back(), 2, "gate + tile out" });
		std::vector<std::vector<double>> wall(set.size()), gt(set.size());
		for (int it = 0; it < reps + 10; it++)
			for (size_t c = 0; c < set.size(); c++) {
				const double t = gate_once(r, set[c].l2, &gpu, set[c].out);
				if (it >= 10) {
					wall[c].push_back(t);
					gt[c].push_back(gpu);
				}
				const double until = now_us() + gap_us;
				while (now_us() < until)
					;
			}
		printf("| %d x %d x %d | %s split %d |", m, n, k, v->name, r.L.grid.z);
		for (size_t c = 0; c < set.size(); c++) {
			std::sort(wall[c].begin(), wall[c].end());
			std::sort(gt[c].begin(), gt[c].end());
			printf(" %s %.1f / %.1f |", set[c].name, wall[c][wall[c].size() / 2], gt[c][gt[c].size() / 2]);
		}
		printf("  (median wall / GPU us of %d; p90 plain %.1f, gate l2=%d %.1f)\n", reps,
		       wall[0][wall[0].size() * 9 / 10], l2s.back(), wall[nl - 1][wall[nl - 1].size() * 9 / 10]);
		wg_release(r.L);
		cudaFreeHost(r.hb);
		cudaFreeHost(r.hd);
		cudaFree(r.db);
		cudaFree(r.dd);
		cudaFree((void *)r.gate);
		cudaFree(w.val);
		cudaFree(w.meta);
		cudaStreamDestroy(r.s);
		cudaStreamDestroy(r.g);
	}
	return fails ? 1 : 0;
}

/* The MxNxK shapes of argv[2..] (K a multiple of 4) as m, n, k triples,
 * or dflt when there are none. */
static std::vector<int> shapes_of(int argc, char **argv, std::vector<int> dflt)
{
	std::vector<int> shp;
	for (int i = 2; i < argc; i++) {
		int m, n, k;
		if (sscanf(argv[i], "%dx%dx%d", &m, &n, &k) == 3 && k % 4 == 0) {
			shp.push_back(m);
			shp.push_back(n);
			shp.push_back(k);
		}
	}
	return shp.empty() ? dflt : shp;
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "probe";
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("device %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
	if (prop.major != 9) {
		printf("not an sm_90 device: the sm_90a kernels do not run here\n");
		return 2;
	}
	cudaDriverEntryPointQueryResult q;
	CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode_tiled, 12000,
					     cudaEnableDefault, &q));
	if (q != cudaDriverEntryPointSuccess || !encode_tiled) {
		printf("cuTensorMapEncodeTiled not found\n");
		return 1;
	}
	g_sms = prop.multiProcessorCount;
	setup_variants();
	for (const auto &f : families) {
		const char *e = getenv(f.var);
		if (e && (f.value ? atoi(e) == f.value : atoi(e) > 0)) {
			g_family = f.family;
			break;
		}
	}
	if (strcmp(what, "probe") == 0)
		return run_probe() ? 1 : 0;
	if (strcmp(what, "check") == 0)
		return run_checks(prop.multiProcessorCount) ? 1 : 0;
	if (strcmp(what, "raceprobe") == 0)
		return run_race_probe(argc > 2 ? atoi(argv[2]) : 0);
	if (strcmp(what, "streamprobe") == 0)
		return run_stream_probe(prop.multiProcessorCount);
	if (strcmp(what, "trace") == 0 && argc > 3) {
		int m, n, k;
		if (sscanf(argv[2], "%dx%dx%d", &m, &n, &k) != 3 || k % 4)
			return 2;
		return run_trace(m, n, k, atoi(argv[3]), prop.multiProcessorCount);
	}
	if (strcmp(what, "dcheck") == 0)
		return run_dchecks(prop.multiProcessorCount) ? 1 : 0;
	if (strcmp(what, "gate") == 0) {
		const std::vector<int> shp =
			shapes_of(argc, argv, { 14336, 16, 4096, 4096, 16, 14336, 14336, 64, 4096, 4096, 64, 14336, 8192, 8, 8192 });
		return run_gate(shp, prop.multiProcessorCount);
	}
	if (strcmp(what, "bench") == 0) {
		cublasHandle_t h;
		if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
			printf("cublasCreate failed\n");
			return 1;
		}
		cudaStream_t s;
		CK(cudaStreamCreate(&s));
		const char *dts = getenv("WG_DTYPES") ? getenv("WG_DTYPES") : "f16,bf16";
		const std::vector<int> shp =
			shapes_of(argc, argv, { 8192, 8192, 8192, 14336, 1024, 4096, 4096, 64, 14336, 14336, 16, 4096 });
		for (int bf16 = 0; bf16 < 2; bf16++) {
			char list[64];
			snprintf(list, sizeof(list), ",%s,", dts);
			if (!strstr(list, bf16 ? ",bf16," : ",f16,"))
				continue;
			const bool dense = getenv("WG_KIND") && strcmp(getenv("WG_KIND"), "dense") == 0;
			for (size_t i = 0; i < shp.size(); i += 3)
				if (dense)
					run_dense_bench_shape(bf16, shp[i], shp[i + 1], shp[i + 2], prop.multiProcessorCount,
							      h, s);
				else
					run_bench_shape(bf16, shp[i], shp[i + 1], shp[i + 2], prop.multiProcessorCount, h,
							s);
		}
		return 0;
	}
	printf("usage: wgmma_bench probe|check|dcheck|raceprobe MODE|streamprobe|trace MxNxK S|bench [MxNxK ...]\n");
	return 2;
}
