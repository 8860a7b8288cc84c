/* The tile shapes the NVIDIA kernels are built with, shared by the device
 * code (which instantiates one kernel per kind and tile) and the host code
 * (which selects among them and sizes their shared memory).
 *
 * X(name, BM, BN, WARPS_M, WARPS_N, STAGES_DENSE, STAGES_SPARSE, MIN_CTAS_PER_SM)
 *
 * Stage counts keep every variant within the 163 KiB of shared memory an
 * sm_80 block may have (sm_90 allows 227 KiB).
 *  - big: square-ish and large problems; 8 warps, each a 64 x 64 warp tile.
 *  - n64/n32/n16: skinny N (decode shapes), where streaming the weight is
 *    the whole cost; 4 warps stacked along M, each 32 rows x BN, and a
 *    deep pipeline to keep many bytes in flight. */
#ifndef MFMA_NV_VARIANTS_H
#define MFMA_NV_VARIANTS_H

#define NV_TILES(X)                      \
	X(big, 256, 128, 4, 2, 3, 4, 1)  \
	X(n64, 128, 64, 4, 1, 5, 6, 2)   \
	X(n32, 128, 32, 4, 1, 6, 6, 2)   \
	X(n16, 128, 16, 4, 1, 6, 6, 3)

enum nv_tile {
#define NV_TILE_ENUM(name, bm, bn, wm, wn, std, sts, minb) NV_TILE_##name,
	NV_TILES(NV_TILE_ENUM)
#undef NV_TILE_ENUM
	NV_TILE_COUNT
};

/* Kernel symbol: nv_gemm_<kind>_<tile>, kinds f16d f16s bf16d bf16s s8d s8s. */
#define NV_KIND_NAMES(X) X(f16d) X(f16s) X(bf16d) X(bf16s) X(s8d) X(s8s)

#endif
