/* The pure host side of the NVIDIA kernels: the embedded images and their
 * lookup by compute capability, names, tile shapes and kernel selection.
 * No driver calls, so unit tests run it anywhere. */
#ifndef MFMA_NV_PLAN_H
#define MFMA_NV_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mfma_dtype.h"
#include "nv_layout.h"
#include "nv_variants.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One embedded cubin (is_ptx = 0) or NUL-terminated PTX text, compiled
 * from one source unit for one architecture (major * 10 + minor). */
struct nv_image {
	const char *unit; /* "f16", "bf16", "s8", "util" */
	int arch;
	int is_ptx;
	const unsigned char *data;
	const unsigned char *end;
};

/* Generated at build time (nv_images.c). */
extern const struct nv_image nv_images[];
extern const size_t nv_image_count;
/* 12 hex digits of a digest of every image embedded: the kernels' part
 * of a cached measurement's key (a rebuild of them measures again). */
extern const char nv_images_stamp[];

enum nv_unit { NV_UNIT_F16, NV_UNIT_BF16, NV_UNIT_S8, NV_UNIT_UTIL, NV_UNIT_COUNT };

/* The image of `unit` to load on a device of compute capability cc
 * (e.g. 90): the cubin built for exactly cc; else a cubin of the same
 * major version and a lower minor (binary compatible); else the newest
 * PTX of an arch <= cc, which the driver compiles; else NULL. */
const struct nv_image *nv_image_find(const struct nv_image *images, size_t count, const char *unit,
				     int cc);

const char *nv_unit_name(int unit);
const char *nv_kind_name(int kind);  /* "f16d", "f16s", ... */
const char *nv_tile_name(int tile);  /* "big", "n64", ... */
/* "f16.sparse.256x128" style label of a kernel variant (static string). */
const char *nv_variant_label(int kind, int tile);

/* The kind for an input dtype, or -1 if the tensor-core kernels do not
 * take it (f32, i32). */
int nv_kind_of(enum mfma_dtype in, bool sparse);

struct nv_tile_shape {
	int bm, bn, warps_m, warps_n, stages, threads;
	unsigned smem; /* dynamic shared memory, bytes */
};
void nv_tile_shape(int kind, int tile, struct nv_tile_shape *s);

/* How one GEMM runs: which kernel, and how K is split. */
struct nv_plan {
	int kind, tile;
	int tiles_m, tiles_n, k_iters, splits, iters_per_split;
	size_t ws_bytes;     /* split-K workspace (0 when splits == 1) */
	size_t counters;     /* split-K counters (uint32), one per tile */
};

/* Chooses the tile for the problem's N (skinny variants up to 64), then
 * splits K when the tiles alone would leave the GPU's sms * occ[tile]
 * CTA slots idle.  occ[t] = 0 marks a variant this device cannot run; it
 * is then replaced by the nearest one that it can.  force_tile >= 0 pins
 * the tile (tests, benchmarks).  Pure.  -EINVAL for bad sizes, -ENOTSUP
 * when no variant fits. */
int nv_plan_make(int kind, int64_t m, int64_t n, int64_t k, int sms, const int occ[NV_TILE_COUNT],
		 int force_tile, struct nv_plan *plan);

#ifdef __cplusplus
}
#endif

#endif
