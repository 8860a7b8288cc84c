/* Pure host side of the NVIDIA kernels (see nv_plan.h). */
#include "nv_plan.h"

#include <errno.h>
#include <string.h>

static const char *const unit_names[NV_UNIT_COUNT] = { "f16", "bf16", "s8", "util" };

const char *nv_unit_name(int unit)
{
	return unit >= 0 && unit < NV_UNIT_COUNT ? unit_names[unit] : "?";
}

const struct nv_image *nv_image_find(const struct nv_image *images, size_t count, const char *unit,
				     int cc)
{
	const struct nv_image *exact = NULL, *compat = NULL, *ptx = NULL;
	for (size_t i = 0; i < count; i++) {
		const struct nv_image *im = &images[i];
		if (strcmp(im->unit, unit) != 0 || im->arch > cc)
			continue;
		if (im->is_ptx) {
			if (!ptx || im->arch > ptx->arch)
				ptx = im;
		} else if (im->arch == cc) {
			exact = im;
		} else if (im->arch / 10 == cc / 10 && (!compat || im->arch > compat->arch)) {
			compat = im;
		}
	}
	return exact ? exact : compat ? compat : ptx;
}

static const char *const kind_names[NV_KIND_COUNT] = {
#define NV_KIND_STR(k) #k,
	NV_KIND_NAMES(NV_KIND_STR)
#undef NV_KIND_STR
};

static const char *const tile_names[NV_TILE_COUNT] = {
#define NV_TILE_STR(name, bm, bn, wm, wn, std, sts, minb) #name,
	NV_TILES(NV_TILE_STR)
#undef NV_TILE_STR
};

const char *nv_kind_name(int kind)
{
	return kind >= 0 && kind < NV_KIND_COUNT ? kind_names[kind] : "?";
}

const char *nv_tile_name(int tile)
{
	return tile >= 0 && tile < NV_TILE_COUNT ? tile_names[tile] : "?";
}

#define NV_LABEL(name, bm, bn, wm, wn, std, sts, minb) NV_LABEL_PREFIX #bm "x" #bn,
static const char *const variant_labels[NV_KIND_COUNT][NV_TILE_COUNT] = {
#define NV_LABEL_PREFIX "f16.dense."
	{ NV_TILES(NV_LABEL) },
#undef NV_LABEL_PREFIX
#define NV_LABEL_PREFIX "f16.sparse."
	{ NV_TILES(NV_LABEL) },
#undef NV_LABEL_PREFIX
#define NV_LABEL_PREFIX "bf16.dense."
	{ NV_TILES(NV_LABEL) },
#undef NV_LABEL_PREFIX
#define NV_LABEL_PREFIX "bf16.sparse."
	{ NV_TILES(NV_LABEL) },
#undef NV_LABEL_PREFIX
#define NV_LABEL_PREFIX "i8.dense."
	{ NV_TILES(NV_LABEL) },
#undef NV_LABEL_PREFIX
#define NV_LABEL_PREFIX "i8.sparse."
	{ NV_TILES(NV_LABEL) },
#undef NV_LABEL_PREFIX
};
#undef NV_LABEL

const char *nv_variant_label(int kind, int tile)
{
	if (kind < 0 || kind >= NV_KIND_COUNT || tile < 0 || tile >= NV_TILE_COUNT)
		return "?";
	return variant_labels[kind][tile];
}

int nv_kind_of(enum mfma_dtype in, bool sparse)
{
	switch (in) {
	case MFMA_DT_F16: return sparse ? NV_F16_SPARSE : NV_F16_DENSE;
	case MFMA_DT_BF16: return sparse ? NV_BF16_SPARSE : NV_BF16_DENSE;
	case MFMA_DT_I8: return sparse ? NV_S8_SPARSE : NV_S8_DENSE;
	default: return -1;
	}
}

void nv_tile_shape(int kind, int tile, struct nv_tile_shape *s)
{
	static const struct {
		int bm, bn, wm, wn, std, sts;
	} t[NV_TILE_COUNT] = {
#define NV_TILE_ROW(name, bm, bn, wm, wn, std, sts, minb) { bm, bn, wm, wn, std, sts },
		NV_TILES(NV_TILE_ROW)
#undef NV_TILE_ROW
	};
	memset(s, 0, sizeof(*s));
	if (kind < 0 || kind >= NV_KIND_COUNT || tile < 0 || tile >= NV_TILE_COUNT)
		return;
	int sparse = nv_kind_sparse(kind), es = nv_kind_esize(kind);
	s->bm = t[tile].bm;
	s->bn = t[tile].bn;
	s->warps_m = t[tile].wm;
	s->warps_n = t[tile].wn;
	s->stages = sparse ? t[tile].sts : t[tile].std;
	s->threads = s->warps_m * s->warps_n * 32;
	unsigned stages = (unsigned)(s->stages * NV_STAGE_BYTES(s->bm, s->bn, es, sparse));
	unsigned epi = (unsigned)NV_EPI_BYTES(s->bm, s->bn);
	s->smem = stages > epi ? stages : epi;
}

static int pick_tile(int64_t n, const int occ[NV_TILE_COUNT])
{
	/* Preferred first: the narrowest skinny tile that covers N, then the
	 * wider ones, then big; for N > 64 big first. */
	static const int order16[] = { NV_TILE_n16, NV_TILE_n32, NV_TILE_n64, NV_TILE_big };
	static const int order32[] = { NV_TILE_n32, NV_TILE_n64, NV_TILE_big, NV_TILE_n16 };
	static const int order64[] = { NV_TILE_n64, NV_TILE_big, NV_TILE_n32, NV_TILE_n16 };
	static const int orderbig[] = { NV_TILE_big, NV_TILE_n64, NV_TILE_n32, NV_TILE_n16 };
	const int *order = n <= 16 ? order16 : n <= 32 ? order32 : n <= 64 ? order64 : orderbig;
	for (int i = 0; i < NV_TILE_COUNT; i++)
		if (occ[order[i]] > 0)
			return order[i];
	return -1;
}

int nv_plan_make(int kind, int64_t m, int64_t n, int64_t k, int sms, const int occ[NV_TILE_COUNT],
		 int force_tile, struct nv_plan *plan)
{
	if (!plan || kind < 0 || kind >= NV_KIND_COUNT || m <= 0 || n <= 0 || k <= 0 || sms <= 0)
		return -EINVAL;
	if (nv_kind_sparse(kind) && k % 4 != 0)
		return -EINVAL;
	if (m > INT32_MAX || n > INT32_MAX || nv_k_pad(kind, k) > INT32_MAX)
		return -EINVAL;
	int tile = force_tile;
	if (tile >= NV_TILE_COUNT)
		return -EINVAL;
	if (tile < 0)
		tile = pick_tile(n, occ);
	if (tile < 0 || occ[tile] <= 0)
		return -ENOTSUP;
	struct nv_tile_shape sh;
	nv_tile_shape(kind, tile, &sh);

	memset(plan, 0, sizeof(*plan));
	plan->kind = kind;
	plan->tile = tile;
	plan->tiles_m = (int)((m + sh.bm - 1) / sh.bm);
	plan->tiles_n = (int)((n + sh.bn - 1) / sh.bn);
	plan->k_iters = (int)(nv_k_pad(kind, k) / (NV_BK_BYTES / nv_kind_esize(kind)));
	int64_t tiles = (int64_t)plan->tiles_m * plan->tiles_n;
	int64_t slots = (int64_t)sms * occ[tile];
	int64_t splits = 1;
	if (tiles < slots) {
		/* Each split keeps at least 4 iterations, so that the pipeline
		 * fills and the partial-sum traffic stays small next to the
		 * operand traffic. */
		splits = slots / tiles;
		if (splits > plan->k_iters / 4)
			splits = plan->k_iters / 4;
		if (splits > 32)
			splits = 32;
		if (splits < 1)
			splits = 1;
	}
	plan->iters_per_split = (int)((plan->k_iters + splits - 1) / splits);
	/* No empty split: recount with the rounded-up share. */
	plan->splits = (plan->k_iters + plan->iters_per_split - 1) / plan->iters_per_split;
	if (tiles > INT32_MAX)
		return -EINVAL;
	plan->counters = (size_t)tiles;
	plan->ws_bytes = plan->splits > 1 ? (size_t)tiles * plan->splits * sh.bm * sh.bn * 4 : 0;
	return 0;
}
