/* The pure host side of the sm_90a wgmma.sp kernels (nv_wgmma.cuh):
 * names, tile shapes and the choice of tile and split-K.  No driver
 * calls, so unit tests run it anywhere. */
#ifndef MFMA_NV_WGMMA_PLAN_H
#define MFMA_NV_WGMMA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "nv_plan.h"
#include "nv_wgmma_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The embedded unit and the one arch its sm_90a cubin runs on. */
#define NV_WG_UNIT "wg"
#define NV_WG_ARCH 90

/* Whether the images hold the wgmma kernels for compute capability cc:
 * an sm_90a cubin, which runs on sm_90 and nowhere else. */
int nv_wg_usable(const struct nv_image *images, size_t count, int cc);

/* In every function below, dense = 0 names the 2:4 kernels (wgmma.sp,
 * NV_WG_TILES), dense = 1 the dense ones (wgmma, NV_WG_DTILES): the same
 * tiles and widths, their own stage counts. */
struct nv_wg_tile_shape {
	int bn, stages, min_ctas; /* min_ctas: CTAs per SM the kernel is built for */
	unsigned smem;            /* dynamic shared memory, bytes */
};
void nv_wg_tile_shape(int dense, int tile, struct nv_wg_tile_shape *s);

/* Kernel symbol "nv_wg_<f16|bf16>_<tile>", dense "nv_wg_dense_<f16|bf16>_<tile>"
 * (static string). */
const char *nv_wg_kernel_name(int dense, int bf16, int tile);
/* The dense kernel of the same tile reading a row-major A by TMA (a
 * request's own A): "nv_wg_dense_rm_<f16|bf16>_<tile>" (static string). */
const char *nv_wg_rm_kernel_name(int bf16, int tile);
/* "wgmma.f16.sparse.128x256" / "wgmma.f16.dense.128x256" style label
 * (static string). */
const char *nv_wg_variant_label(int dense, int bf16, int tile);

struct nv_wg_plan {
	int tile;
	int tiles_m, tiles_n, k_iters, splits, iters_per_split;
	size_t ws_bytes; /* split-K partials (0 when splits == 1) */
	size_t counters; /* split-K arrival counters (uint32), one per tile */
};

/* The narrowest tile that covers N (n16 .. n128, then n256 for wider N,
 * or narrower tiles down to n128 while the tiles would not occupy half the
 * SMs; occ[t] = 0 marks a tile this device cannot run, replaced by the
 * next wider one, else the next narrower), then split-K: the largest power of
 * two that keeps tiles x splits within one CTA per SM and at least 4
 * stages per split (the widest tile never splits, see nv_wgmma.cuh).
 * force_tile >= 0 pins the tile.  -EINVAL for bad sizes (K must be a
 * multiple of 4), -ENOTSUP when no tile can run. */
int nv_wg_plan_make(int64_t m, int64_t n, int64_t k, int sms, const int occ[NV_WG_TILE_COUNT],
		    int force_tile, struct nv_wg_plan *plan);

/* The producer threads of plan's launch (nv_wg_params.producers): 3 on a
 * 2:4 tile built with three (NV_WG_SP_PW3) when every CTA of the launch
 * is resident at once (at most sms x occ, occ the tile's CTAs per SM),
 * else 1.  Measured on the H200: three gain 1-6% in one wave and lose
 * up to 9% over two (nv_wgmma.cuh, PW3). */
int nv_wg_producers(int dense, const struct nv_wg_plan *plan, int sms, int occ);

#ifdef __cplusplus
}
#endif

#endif
