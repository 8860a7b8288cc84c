/* Pure host side of the wgmma.sp kernels (see nv_wgmma_plan.h). */
#include "nv_wgmma_plan.h"

#include <errno.h>
#include <string.h>

int nv_wg_usable(const struct nv_image *images, size_t count, int cc)
{
	const struct nv_image *im = nv_image_find(images, count, NV_WG_UNIT, cc);
	return im && !im->is_ptx && im->arch == NV_WG_ARCH && cc == NV_WG_ARCH;
}

static const struct {
	int bn, stages, minb;
} tiles[2][NV_WG_TILE_COUNT] = {
#define NV_WG_ROW(name, bn, st, minb) { bn, st, minb },
	{ NV_WG_TILES(NV_WG_ROW) },
	{ NV_WG_DTILES(NV_WG_ROW) },
#undef NV_WG_ROW
};

/* The plan below serves both families with one tile numbering: the dense
 * list must name the same tiles, in the same order, as wide. */
enum {
#define NV_WG_BN_OF(name, bn, st, minb) NV_WG_BN_##name = (bn),
	NV_WG_TILES(NV_WG_BN_OF)
#undef NV_WG_BN_OF
};
enum {
#define NV_WG_DENSE_INDEX(name, bn, st, minb) NV_WG_DTILE_##name,
	NV_WG_DTILES(NV_WG_DENSE_INDEX)
#undef NV_WG_DENSE_INDEX
	NV_WG_DTILE_COUNT
};
#define NV_WG_SAME_TILE(name, bn, st, minb)                                                     \
	_Static_assert((int)NV_WG_DTILE_##name == (int)NV_WG_TILE_##name && NV_WG_BN_##name == (bn),      \
		       "dense tile " #name " is not the 2:4 tile of that name");
NV_WG_DTILES(NV_WG_SAME_TILE)
#undef NV_WG_SAME_TILE
_Static_assert((int)NV_WG_DTILE_COUNT == (int)NV_WG_TILE_COUNT, "dense and 2:4 tile lists differ");

void nv_wg_tile_shape(int dense, int tile, struct nv_wg_tile_shape *s)
{
	memset(s, 0, sizeof(*s));
	if (tile < 0 || tile >= NV_WG_TILE_COUNT)
		return;
	dense = !!dense;
	s->bn = tiles[dense][tile].bn;
	s->stages = tiles[dense][tile].stages;
	s->min_ctas = tiles[dense][tile].minb;
	s->smem = dense ? (unsigned)NV_WG_DSMEM_BYTES(s->bn, s->stages)
			: (unsigned)NV_WG_SMEM_BYTES(s->bn, s->stages);
}

static const char *const kernel_names[2][2][NV_WG_TILE_COUNT] = {
#define NV_WG_KNAME_F16(name, bn, st, minb) "nv_wg_f16_" #name,
#define NV_WG_KNAME_BF16(name, bn, st, minb) "nv_wg_bf16_" #name,
#define NV_WG_KNAME_DF16(name, bn, st, minb) "nv_wg_dense_f16_" #name,
#define NV_WG_KNAME_DBF16(name, bn, st, minb) "nv_wg_dense_bf16_" #name,
	{ { NV_WG_TILES(NV_WG_KNAME_F16) }, { NV_WG_TILES(NV_WG_KNAME_BF16) } },
	{ { NV_WG_DTILES(NV_WG_KNAME_DF16) }, { NV_WG_DTILES(NV_WG_KNAME_DBF16) } },
#undef NV_WG_KNAME_F16
#undef NV_WG_KNAME_BF16
#undef NV_WG_KNAME_DF16
#undef NV_WG_KNAME_DBF16
};

static const char *const labels[2][2][NV_WG_TILE_COUNT] = {
#define NV_WG_LABEL_F16(name, bn, st, minb) "wgmma.f16.sparse.128x" #bn,
#define NV_WG_LABEL_BF16(name, bn, st, minb) "wgmma.bf16.sparse.128x" #bn,
#define NV_WG_LABEL_DF16(name, bn, st, minb) "wgmma.f16.dense.128x" #bn,
#define NV_WG_LABEL_DBF16(name, bn, st, minb) "wgmma.bf16.dense.128x" #bn,
	{ { NV_WG_TILES(NV_WG_LABEL_F16) }, { NV_WG_TILES(NV_WG_LABEL_BF16) } },
	{ { NV_WG_DTILES(NV_WG_LABEL_DF16) }, { NV_WG_DTILES(NV_WG_LABEL_DBF16) } },
#undef NV_WG_LABEL_F16
#undef NV_WG_LABEL_BF16
#undef NV_WG_LABEL_DF16
#undef NV_WG_LABEL_DBF16
};

const char *nv_wg_kernel_name(int dense, int bf16, int tile)
{
	return tile >= 0 && tile < NV_WG_TILE_COUNT ? kernel_names[!!dense][!!bf16][tile] : "?";
}

static const char *const rm_kernel_names[2][NV_WG_TILE_COUNT] = {
#define NV_WG_KNAME_RF16(name, bn, st, minb) "nv_wg_dense_rm_f16_" #name,
#define NV_WG_KNAME_RBF16(name, bn, st, minb) "nv_wg_dense_rm_bf16_" #name,
	{ NV_WG_DTILES(NV_WG_KNAME_RF16) }, { NV_WG_DTILES(NV_WG_KNAME_RBF16) },
#undef NV_WG_KNAME_RF16
#undef NV_WG_KNAME_RBF16
};

const char *nv_wg_rm_kernel_name(int bf16, int tile)
{
	return tile >= 0 && tile < NV_WG_TILE_COUNT ? rm_kernel_names[!!bf16][tile] : "?";
}

const char *nv_wg_variant_label(int dense, int bf16, int tile)
{
	return tile >= 0 && tile < NV_WG_TILE_COUNT ? labels[!!dense][!!bf16][tile] : "?";
}

static int pick_tile(int64_t n, const int occ[NV_WG_TILE_COUNT])
{
	/* Tiles are listed widest first: the narrowest that covers N is the
	 * last one with bn >= n. */
	int want = 0;
	for (int t = 0; t < NV_WG_TILE_COUNT; t++)
		if (tiles[0][t].bn >= n)
			want = t;
	for (int t = want; t >= 0; t--)
		if (occ[t] > 0)
			return t;
	for (int t = want + 1; t < NV_WG_TILE_COUNT; t++)
		if (occ[t] > 0)
			return t;
	return -1;
}

int nv_wg_plan_make(int64_t m, int64_t n, int64_t k, int sms, const int occ[NV_WG_TILE_COUNT],
		    int force_tile, struct nv_wg_plan *plan)
{
	if (!plan || !occ || m <= 0 || n <= 0 || k <= 0 || k % 4 != 0 || sms <= 0)
		return -EINVAL;
	/* TMA coordinates and the kernel's indices are 32-bit. */
	if (m > INT32_MAX || n > INT32_MAX || nv_wg_k_pad(k) > INT32_MAX || nv_wg_m_pad(m) > INT32_MAX)
		return -EINVAL;
	if (force_tile >= NV_WG_TILE_COUNT)
		return -EINVAL;
	int tile = force_tile >= 0 ? force_tile : pick_tile(n, occ);
	if (tile < 0 || occ[tile] <= 0)
		return -ENOTSUP;
	/* Wide N on few rows: the widest tile would leave most SMs idle and
	 * cannot split K, so the 128-column tile, which can, trades a re-read
	 * of A from L2 for CTAs, and split-K below gives it more (4096 x 256
	 * x 14336 on the H200: 32 CTAs of 256 columns 110 us; 128 of 64
	 * columns 68.9 us; 64 of 128 columns in two splits 48.4 us, once the
	 * split-K sum issued each split's loads together: bench/RESULTS.md). */
	const int64_t tiles_m = nv_wg_m_pad(m) / NV_WG_BM;
	if (force_tile < 0 && n > tiles[0][NV_WG_TILE_n128].bn)
		while (tile < NV_WG_TILE_n128 && occ[tile + 1] > 0 &&
		       tiles_m * ((n + tiles[0][tile].bn - 1) / tiles[0][tile].bn) * 2 < sms)
			tile++;
	memset(plan, 0, sizeof(*plan));
	plan->tile = tile;
	plan->tiles_m = (int)tiles_m;
	plan->tiles_n = (int)((n + tiles[0][tile].bn - 1) / tiles[0][tile].bn);
	plan->k_iters = (int)(nv_wg_k_pad(k) / NV_WG_BK);
	const int64_t ntiles = (int64_t)plan->tiles_m * plan->tiles_n;
	if (ntiles > INT32_MAX)
		return -EINVAL;
	/* Measured on the H200 (bench/RESULTS.md): more CTAs than SMs, even
	 * where two fit on one SM, lost to the extra partial-sum traffic and
	 * the second wave at the decode shapes. */
	int64_t splits = 1;
	if (tiles[0][tile].bn < 256)
		while (ntiles * splits * 2 <= sms && plan->k_iters / (splits * 2) >= 4)
			splits *= 2;
	plan->iters_per_split = (int)((plan->k_iters + splits - 1) / splits);
	plan->splits = (plan->k_iters + plan->iters_per_split - 1) / plan->iters_per_split;
	plan->counters = (size_t)ntiles;
	plan->ws_bytes = plan->splits > 1 ? (size_t)ntiles * plan->splits * (tiles[0][tile].bn / 2) * 256 * 4 : 0;
	return 0;
}

int nv_wg_producers(int dense, const struct nv_wg_plan *plan, int sms, int occ)
{
	if (dense || !plan || plan->tile < 0 || plan->tile >= NV_WG_TILE_COUNT || !NV_WG_SP_PW3(tiles[0][plan->tile].bn))
		return 1;
	const int64_t ctas = (int64_t)plan->tiles_m * plan->tiles_n * plan->splits;
	return ctas <= (int64_t)sms * occ ? 3 : 1;
}
