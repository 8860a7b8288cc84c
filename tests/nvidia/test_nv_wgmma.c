/* Host-only tests of the sm_90a wgmma.sp kernels' pure parts: the
 * metadata layout (and its agreement with the mma.sp packing, which the
 * H200 probe of bench/nvidia/wgmma_bench.cu showed feeds wgmma.sp with the
 * selector alternating per k32 step), the accumulator map, the plan and
 * the embedded image.  The kernels themselves run in test_cuda_backend on
 * an H200. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nv_wgmma.h"
#include "nv_wgmma_plan.h"
#include "sparse24.h"

static uint64_t seed = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void)
{
	seed ^= seed << 13;
	seed ^= seed >> 7;
	seed ^= seed << 17;
	return (uint32_t)(seed >> 32);
}

/* Random canonical meta of a rows x k matrix (legal ordered pairs; the
 * unused nibbles of a row's last word left 0, as sparse24 writes them). */
static uint32_t *random_meta(int rows, int k, int *mw)
{
	static const unsigned pairs[6] = { 0x4, 0x8, 0xc, 0x9, 0xd, 0xe };
	*mw = (int)sparse24_meta_words((size_t)k);
	uint32_t *m = calloc((size_t)rows * *mw, sizeof(*m));
	assert_non_null(m);
	for (int r = 0; r < rows; r++)
		for (int g = 0; g < k / 4; g++)
			m[r * *mw + g / 8] |= pairs[rnd() % 6] << (4 * (g % 8));
	return m;
}

/* The wgmma.sp register built from canonical words is, for the lanes that
 * supply it, the word the mma.sp packing gives that lane: selector 0
 * reads lanes t = 0, 1 of the even k32 step, selector 1 lanes t = 2, 3 of
 * the odd one, from the same packed word. */
static void test_meta_reg_matches_mma_sp_packing(void **state)
{
	(void)state;
	const int rows = 70, k = 200, kg = k / 4;
	int mw;
	uint32_t *meta = random_meta(rows, k, &mw);
	for (int64_t s = 0; s < nv_m_pad(rows) / 16; s++)
		for (int64_t mt = 0; mt < nv_k_pad(NV_F16_SPARSE, k) / NV_META_K; mt++)
			for (unsigned lane = 0; lane < 32; lane++) {
				const unsigned g = lane >> 2, t = lane & 3;
				const int64_t r = s * 16 + g, kb = mt; /* NV_META_K == NV_WG_BK */
				const int j = (int)(t >> 1);
				uint32_t lo = nv_wg_meta_word(meta, mw, rows, kg, kb, r, j);
				uint32_t hi = nv_wg_meta_word(meta, mw, rows, kg, kb, r + 8, j);
				assert_int_equal(nv_wg_meta_reg(lo, hi, t & 1),
						 nv_pack_meta_word(meta, mw, rows, kg, 0, s, mt, lane));
			}
	free(meta);
}

/* Past K and past the last row the words hold the padding pair 0x4,
 * never the invalid 0x0; inside, the canonical nibbles. */
static void test_meta_word_pads(void **state)
{
	(void)state;
	const int rows = 5, k = 36; /* 9 groups: word 1 holds one, kp = 64 */
	int mw;
	uint32_t *meta = random_meta(rows, k, &mw);
	assert_int_equal(nv_wg_k_pad(k), 64);
	for (int r = 0; r < (int)nv_wg_m_pad(rows); r++)
		for (int j = 0; j < 2; j++) {
			uint32_t w = nv_wg_meta_word(meta, mw, rows, k / 4, 0, r, j);
			for (int c = 0; c < 8; c++) {
				int grp = 8 * j + c;
				unsigned nib = (w >> (4 * c)) & 0xf;
				if (r >= rows || grp >= k / 4)
					assert_int_equal(nib, 0x4);
				else
					assert_int_equal(nib, sparse24_nibble(meta + r * mw, (size_t)grp));
			}
		}
	free(meta);
}

/* Each 64 x N tile position is held by exactly one (warp, lane, register). */
static void test_acc_pos_bijection(void **state)
{
	(void)state;
	const unsigned n = 256;
	unsigned char *seen = calloc(64 * n, 1);
	assert_non_null(seen);
	for (unsigned w = 0; w < 4; w++)
		for (unsigned lane = 0; lane < 32; lane++)
			for (unsigned i = 0; i < n / 2; i++) {
				unsigned r, c;
				nv_wg_acc_pos(w, lane, i, &r, &c);
				assert_true(r < 64 && c < n);
				assert_int_equal(seen[r * n + c]++, 0);
			}
	free(seen);
}

/* The stage images, in both orders: every (row, value column) of a padded
 * 2:4 weight at its own 2-byte slot of nv_wg_img_bytes, inside its
 * tile's stage, at the row-major position of the stage (row * 64 +
 * column * 2) with the 64-byte swizzle TMA applies (address bits 4-5 XOR
 * bits 7-8), and nv_wg_img_position (the packing kernel's) its inverse.
 * The meta words: one slot each, in the stage's 1 KiB. */
static void test_stage_images(void **state)
{
	(void)state;
	const int64_t m = 300, k = 4100, kp = nv_wg_k_pad(k), k_iters = kp / NV_WG_BK;
	const int64_t bytes = nv_wg_img_bytes(m, k, 2), mp = nv_wg_m_pad(m), tiles = mp / NV_WG_BM;
	assert_int_equal(bytes, mp * kp);
	assert_int_equal(bytes, tiles * k_iters * NV_WG_A_BYTES);
	for (int order = NV_WG_IMG_TILES; order <= NV_WG_IMG_STAGES; order++) {
		const struct nv_wg_img g = nv_wg_img_of(m, k, order);
		assert_int_equal(g.k_iters, k_iters);
		assert_int_equal(g.tiles_m, tiles);
		/* Tile-major: a tile's stages one after another; stage-major:
		 * a stage's tiles. */
		assert_int_equal(nv_wg_img_index(g, 1, 0), order == NV_WG_IMG_TILES ? k_iters : 1);
		assert_int_equal(nv_wg_img_index(g, 0, 1), order == NV_WG_IMG_TILES ? 1 : tiles);
		unsigned char *seen = calloc((size_t)bytes / 2, 1);
		assert_non_null(seen);
		for (int64_t r = 0; r < mp; r++)
			for (int64_t v = 0; v < kp / 2; v++) {
				const int64_t at = nv_wg_img_offset(g, r, v);
				assert_true(at >= 0 && at < bytes && at % 2 == 0);
				assert_int_equal(seen[at / 2]++, 0);
				const int64_t stage = nv_wg_img_index(g, r / NV_WG_BM, v / 32) * NV_WG_A_BYTES;
				const int64_t plain = r % NV_WG_BM * 64 + v % 32 * 2;
				assert_int_equal(at - stage, plain ^ (((plain >> 7) & 3) << 4));
				int64_t r2, v2;
				nv_wg_img_position(g, at, &r2, &v2);
				assert_int_equal(r2, r);
				assert_int_equal(v2, v);
			}
		free(seen);
		const int64_t words = nv_wg_meta_bytes(m, k) / 4;
		unsigned char *mseen = calloc((size_t)words, 1);
		assert_non_null(mseen);
		for (int64_t r = 0; r < mp; r++)
			for (int64_t kb = 0; kb < k_iters; kb++)
				for (int j = 0; j < 2; j++) {
					const int64_t i = nv_wg_img_meta_index(g, r, kb, j);
					assert_true(i >= 0 && i < words);
					assert_int_equal(mseen[i]++, 0);
					assert_int_equal(i * 4 / NV_WG_E_BYTES, nv_wg_img_index(g, r / NV_WG_BM, kb));
					int64_t r2, kb2;
					nv_wg_img_meta_position(g, i, &r2, &kb2);
					assert_int_equal(r2, r);
					assert_int_equal(kb2, kb);
					assert_int_equal(i & 1, j);
				}
		free(mseen);
	}
	/* The row-major layout's meta (wgmma_bench's TMA kernels) is that of
	 * the stage-major images: [stage][row, padded]. */
	const struct nv_wg_img rm = nv_wg_img_of(m, k, NV_WG_ROWMAJOR);
	assert_int_equal(nv_wg_img_meta_index(rm, 130, 3, 1), (3 * mp + 130) * 2 + 1);
}

/* The dense stage images: every value of the padded A in one slot, at
 * the row-major place within its 16 KiB image XOR the 128-byte swizzle
 * (address bits 4-6 XOR bits 7-9), in both orders, and the packing
 * kernel's inverse map the inverse. */
static void test_dense_stage_images(void **state)
{
	(void)state;
	const int64_t m = 300, k = 4099, kp = nv_wg_k_pad(k), k_iters = kp / NV_WG_BK;
	const int64_t bytes = nv_wg_dimg_bytes(m, k, 2), mp = nv_wg_m_pad(m), tiles = mp / NV_WG_BM;
	assert_int_equal(bytes, mp * kp * 2);
	assert_int_equal(bytes, tiles * k_iters * NV_WG_DA_BYTES);
	for (int order = NV_WG_IMG_TILES; order <= NV_WG_IMG_STAGES; order++) {
		const struct nv_wg_img g = nv_wg_img_of(m, k, order);
		unsigned char *seen = calloc((size_t)bytes / 2, 1);
		assert_non_null(seen);
		for (int64_t r = 0; r < mp; r++)
			for (int64_t v = 0; v < kp; v++) {
				const int64_t at = nv_wg_dimg_offset(g, r, v);
				assert_true(at >= 0 && at < bytes && at % 2 == 0);
				assert_int_equal(seen[at / 2]++, 0);
				const int64_t image = nv_wg_img_index(g, r / NV_WG_BM, v / NV_WG_BK) * NV_WG_DA_BYTES;
				const int64_t plain = r % NV_WG_BM * 128 + v % NV_WG_BK * 2;
				assert_int_equal(at - image, plain ^ (((plain >> 7) & 7) << 4));
				int64_t r2, v2;
				nv_wg_dimg_position(g, at, &r2, &v2);
				assert_int_equal(r2, r);
				assert_int_equal(v2, v);
			}
		free(seen);
	}
	/* Stage-major (the daemon's): tile 1 of stage 0 follows tile 0. */
	const struct nv_wg_img st = nv_wg_img_of(m, k, NV_WG_IMG_STAGES);
	assert_int_equal(nv_wg_dimg_offset(st, 128, 0), NV_WG_DA_BYTES);
	assert_int_equal(nv_wg_dimg_offset(st, 0, 64), tiles * NV_WG_DA_BYTES);
	/* Row 1's chunk 0 lands in slot 1 of its row, row 9's chunk 1 in slot 0. */
	assert_int_equal(nv_wg_dimg_offset(st, 1, 0), 128 + 16);
	assert_int_equal(nv_wg_dimg_offset(st, 9, 8), 9 * 128 + 0);
}

static void test_plan(void **state)
{
	(void)state;
	int occ[NV_WG_TILE_COUNT] = { 1, 1, 2, 2, 2 };
	struct nv_wg_plan p;
	/* The narrowest tile covering N. */
	const struct {
		int64_t n;
		int tile;
	} pick[] = { { 1, NV_WG_TILE_n16 },   { 16, NV_WG_TILE_n16 },   { 17, NV_WG_TILE_n32 },
		     { 64, NV_WG_TILE_n64 },  { 65, NV_WG_TILE_n128 }, { 128, NV_WG_TILE_n128 },
		     { 129, NV_WG_TILE_n256 }, { 8192, NV_WG_TILE_n256 } };
	for (size_t i = 0; i < sizeof(pick) / sizeof(pick[0]); i++) {
		assert_int_equal(nv_wg_plan_make(16384, pick[i].n, 4096, 132, occ, -1, &p), 0);
		assert_int_equal(p.tile, pick[i].tile);
	}
	/* Wide N on few rows: the 128-column tile and split-K for CTAs
	 * (measured faster than 256 columns, and than 64 without a split). */
	assert_int_equal(nv_wg_plan_make(4096, 256, 14336, 132, occ, -1, &p), 0);
	assert_int_equal(p.tile, NV_WG_TILE_n128);
	assert_int_equal(p.tiles_m * p.tiles_n, 64);
	assert_int_equal(p.splits, 2);
	assert_int_equal(p.iters_per_split, 112);
	/* Fewer rows still: 128 columns, and more splits (never below). */
	assert_int_equal(nv_wg_plan_make(1024, 512, 8192, 132, occ, -1, &p), 0);
	assert_int_equal(p.tile, NV_WG_TILE_n128);
	assert_int_equal(p.tiles_m * p.tiles_n, 32);
	assert_int_equal(p.splits, 4);
	assert_int_equal(nv_wg_plan_make(14336, 256, 4096, 132, occ, -1, &p), 0);
	assert_int_equal(p.tile, NV_WG_TILE_n256);
	assert_int_equal(nv_wg_plan_make(4096, 256, 14336, 132, occ, NV_WG_TILE_n256, &p), 0);
	assert_int_equal(p.tile, NV_WG_TILE_n256); /* a pinned tile stays */
	/* Decode 14336 x 16 x 4096: 112 tiles fill 132 SMs, no split. */
	assert_int_equal(nv_wg_plan_make(14336, 16, 4096, 132, occ, -1, &p), 0);
	assert_int_equal(p.tiles_m * p.tiles_n, 112);
	assert_int_equal(p.splits, 1);
	assert_int_equal(p.ws_bytes, 0);
	/* 4096 x 64 x 14336: 32 tiles, four splits of 56 stages. */
	assert_int_equal(nv_wg_plan_make(4096, 64, 14336, 132, occ, -1, &p), 0);
	assert_int_equal(p.splits, 4);
	assert_int_equal(p.iters_per_split, 56);
	assert_int_equal(p.ws_bytes, (size_t)32 * 4 * 32 * 256 * 4);
	assert_int_equal(p.counters, 32);
	/* Short K keeps 4 stages a split; the widest tile never splits. */
	assert_int_equal(nv_wg_plan_make(128, 16, 256, 132, occ, -1, &p), 0);
	assert_int_equal(p.splits, 1);
	assert_int_equal(nv_wg_plan_make(128, 300, 65536, 132, occ, NV_WG_TILE_n256, &p), 0);
	assert_int_equal(p.tile, NV_WG_TILE_n256);
	assert_int_equal(p.splits, 1);
	/* Odd K: padded to whole stages, every split non-empty. */
	assert_int_equal(nv_wg_plan_make(200, 40, 1028, 132, occ, -1, &p), 0);
	assert_int_equal(p.k_iters, 17);
	assert_true((p.splits - 1) * p.iters_per_split < p.k_iters);
	/* A tile the device cannot run is replaced by a wider one. */
	occ[NV_WG_TILE_n16] = 0;
	assert_int_equal(nv_wg_plan_make(4096, 16, 4096, 132, occ, -1, &p), 0);
	assert_int_equal(p.tile, NV_WG_TILE_n32);
	memset(occ, 0, sizeof(occ));
	assert_int_equal(nv_wg_plan_make(4096, 16, 4096, 132, occ, -1, &p), -ENOTSUP);
	occ[0] = 1;
	assert_int_equal(nv_wg_plan_make(4096, 16, 4098, 132, occ, -1, &p), -EINVAL);
	assert_int_equal(nv_wg_plan_make(0, 16, 4096, 132, occ, -1, &p), -EINVAL);
	assert_int_equal(nv_wg_plan_make(4096, 16, 4096, 132, occ, NV_WG_TILE_COUNT, &p), -EINVAL);
}

/* Three producer threads on the 2:4 128 x 128 tile when the launch is one
 * wave, one otherwise (and on every other tile, and dense). */
static void test_producers(void **state)
{
	(void)state;
	const int occ[NV_WG_TILE_COUNT] = { 1, 1, 2, 2, 2 };
	struct nv_wg_plan p;
	/* 4096 x 256 x 8192: 64 tiles of 128 columns in two splits. */
	assert_int_equal(nv_wg_plan_make(4096, 256, 8192, 132, occ, -1, &p), 0);
	assert_int_equal(p.tile, NV_WG_TILE_n128);
	assert_int_equal(p.tiles_m * p.tiles_n * p.splits, 128);
	assert_int_equal(nv_wg_producers(0, &p, 132, 1), 3);
	assert_int_equal(nv_wg_producers(1, &p, 132, 1), 1); /* dense */
	assert_int_equal(nv_wg_producers(0, &p, 127, 1), 1); /* a second wave */
	/* 132 CTAs on 132 SMs: still one wave; 133: not. */
	assert_int_equal(nv_wg_plan_make(132 * 128, 100, 1024, 132, occ, -1, &p), 0);
	assert_int_equal(p.tile, NV_WG_TILE_n128);
	assert_int_equal(p.tiles_m * p.tiles_n * p.splits, 132);
	assert_int_equal(nv_wg_producers(0, &p, 132, 1), 3);
	assert_int_equal(nv_wg_plan_make(133 * 128, 100, 1024, 132, occ, -1, &p), 0);
	assert_int_equal(p.tiles_m * p.tiles_n * p.splits, 133);
	assert_int_equal(nv_wg_producers(0, &p, 132, 1), 1);
	/* 32768 x 128 x 8192: two waves of 128 x 128. */
	assert_int_equal(nv_wg_plan_make(32768, 128, 8192, 132, occ, -1, &p), 0);
	assert_int_equal(nv_wg_producers(0, &p, 132, 1), 1);
	/* The other tiles: one producer in any wave. */
	assert_int_equal(nv_wg_plan_make(4096, 1024, 4096, 132, occ, -1, &p), 0);
	assert_int_equal(p.tile, NV_WG_TILE_n256);
	assert_int_equal(nv_wg_producers(0, &p, 132, 1), 1);
	assert_int_equal(nv_wg_plan_make(4096, 16, 4096, 132, occ, -1, &p), 0);
	assert_int_equal(nv_wg_producers(0, &p, 132, 2), 1);
	assert_int_equal(nv_wg_producers(0, NULL, 132, 1), 1);
}

/* The decode kernels' stream-K split: every unit in exactly one CTA, no
 * CTA empty, and nv_wgd_block_ctas names exactly the CTAs holding units
 * of a block (brute force over many sizes and grids). */
static void test_decode_split(void **state)
{
	(void)state;
	for (int trial = 0; trial < 3000; trial++) {
		const int64_t blocks = 1 + rnd() % 300, ki = 1 + rnd() % 120, units = blocks * ki;
		int64_t grid = 1 + rnd() % 600;
		if (grid > units)
			grid = units;
		int64_t prev = 0;
		for (int64_t c = 0; c < grid; c++) {
			const int64_t b0 = nv_wgd_unit_begin(c, units, grid), b1 = nv_wgd_unit_begin(c + 1, units, grid);
			assert_int_equal(b0, prev);
			assert_true(b1 > b0);
			prev = b1;
		}
		assert_int_equal(prev, units);
		for (int64_t b = 0; b < blocks; b += 1 + rnd() % 7) {
			int64_t c0, c1, want0 = -1, want1 = -1;
			nv_wgd_block_ctas(b, ki, units, grid, &c0, &c1);
			for (int64_t c = 0; c < grid; c++) {
				const int64_t u0 = nv_wgd_unit_begin(c, units, grid), u1 = nv_wgd_unit_begin(c + 1, units, grid);
				if (u0 < (b + 1) * ki && u1 > b * ki) {
					if (want0 < 0)
						want0 = c;
					want1 = c;
				}
			}
			assert_int_equal(c0, want0);
			assert_int_equal(c1, want1);
		}
	}
}

/* A launch whose operands TMA could not map, or would map wrongly, is
 * refused before any driver call (none is made here: no GPU): a
 * row-major dense A whose rows are closer than K or not 16 bytes apart, a
 * 2:4 A said to be row-major, B's rows not 16 bytes apart or B not
 * 16-byte aligned. */
static void test_launch_refuses_bad_pitches(void **state)
{
	(void)state;
	struct nv_wg_module mod;
	memset(&mod, 0, sizeof(mod));
	mod.sms = 132;
	for (int t = 0; t < NV_WG_TILE_COUNT; t++) {
		for (int dense = 0; dense < 2; dense++)
			mod.occ[dense][0][t] = 1;
		mod.occ_rm[0][t] = 1;
	}
	struct nv_wg_plan plan;
	assert_int_equal(nv_wg_plan_make(300, 200, 4100, mod.sms, mod.occ[1][0], -1, &plan), 0);
	const struct nv_wg_packed good = { .dense = 1, .m = 300, .k = 4100, .val = 0x100000 };
	const struct nv_wg_args args = { .b = 0x200000, .d = 0x300000, .n = 200, .ldb = (int32_t)nv_wg_ldb(200),
					 .ldc = 200, .ldd = 200 };
	struct nv_wg_packed a = good;
	a.lda = 4096; /* rows closer than K */
	assert_int_equal(nv_wg_launch_gemm(&mod, &plan, &a, &args, 1, 1, NULL, NULL, 0), -EINVAL);
	a.lda = 4100; /* rows 8200 bytes apart: not a multiple of 16 */
	assert_int_equal(nv_wg_launch_gemm(&mod, &plan, &a, &args, 1, 1, NULL, NULL, 0), -EINVAL);
	a = good;
	a.dense = 0;
	a.lda = nv_wg_dense_lda(4100); /* 2:4 is only stage images */
	assert_int_equal(nv_wg_launch_gemm(&mod, &plan, &a, &args, 1, 1, NULL, NULL, 0), -EINVAL);
	a = good;
	struct nv_wg_args b = args;
	b.ldb = 204;
	assert_int_equal(nv_wg_launch_gemm(&mod, &plan, &a, &b, 1, 1, NULL, NULL, 0), -EINVAL);
	b = args;
	b.b += 8;
	assert_int_equal(nv_wg_launch_gemm(&mod, &plan, &a, &b, 1, 1, NULL, NULL, 0), -EINVAL);
	/* A tile this GPU cannot run is said so, for the layout asked: each
	 * time the other layout's table still has the tile, so a launch
	 * that looked in the wrong table would go on to the driver. */
	mod.occ[1][0][plan.tile] = 0;
	assert_int_equal(nv_wg_launch_gemm(&mod, &plan, &good, &args, 1, 1, NULL, NULL, 0), -ENOTSUP);
	mod.occ[1][0][plan.tile] = 1;
	a = good;
	a.lda = nv_wg_dense_lda(4100);
	mod.occ_rm[0][plan.tile] = 0;
	assert_int_equal(nv_wg_launch_gemm(&mod, &plan, &a, &args, 1, 1, NULL, NULL, 0), -ENOTSUP);
	/* The packing kernel writes stage images only: refused for a
	 * row-major A though the kernel is there (a stand-in: it is never
	 * launched). */
	mod.pack_dense = (CUfunction)(uintptr_t)0x1;
	assert_int_equal(nv_wg_launch_pack(&mod, NULL, 0x100000, 0, &a), -EINVAL);
}

static void test_names_and_images(void **state)
{
	(void)state;
	assert_string_equal(nv_wg_variant_label(0, 0, NV_WG_TILE_n256), "wgmma.f16.sparse.128x256");
	assert_string_equal(nv_wg_variant_label(0, 1, NV_WG_TILE_n16), "wgmma.bf16.sparse.128x16");
	assert_string_equal(nv_wg_kernel_name(0, 1, NV_WG_TILE_n64), "nv_wg_bf16_n64");
	assert_string_equal(nv_wg_variant_label(1, 0, NV_WG_TILE_n256), "wgmma.f16.dense.128x256");
	assert_string_equal(nv_wg_variant_label(1, 1, NV_WG_TILE_n32), "wgmma.bf16.dense.128x32");
	assert_string_equal(nv_wg_kernel_name(1, 0, NV_WG_TILE_n128), "nv_wg_dense_f16_n128");
	assert_string_equal(nv_wg_rm_kernel_name(1, NV_WG_TILE_n16), "nv_wg_dense_rm_bf16_n16");
	assert_string_equal(nv_wg_rm_kernel_name(0, NV_WG_TILE_COUNT), "?");
	assert_string_equal(nv_wg_variant_label(1, 0, NV_WG_TILE_COUNT), "?");
	/* Every tile of both families fits an sm_90 block's shared memory,
	 * and two CTAs fit an SM (228 KiB, 1 KiB each reserved) where the
	 * tile is built for two; the dense tiles are as wide as the 2:4 ones. */
	for (int dense = 0; dense < 2; dense++)
		for (int t = 0; t < NV_WG_TILE_COUNT; t++) {
			struct nv_wg_tile_shape sh, sp;
			nv_wg_tile_shape(dense, t, &sh);
			nv_wg_tile_shape(0, t, &sp);
			assert_true(sh.smem <= 232448);
			assert_true(sh.min_ctas * (sh.smem + 1024) <= 233472);
			assert_int_equal(sh.bn, sp.bn);
			assert_true(sh.stages >= 3);
		}
	/* Rows: 8 values apart up to 64 values, 64 past them; a dense A's
	 * and B's alike. */
	assert_int_equal(nv_wg_pitch(9), 16);
	assert_int_equal(nv_wg_pitch(36), 40);
	assert_int_equal(nv_wg_pitch(60), 64);
	assert_int_equal(nv_wg_pitch(64), 64);
	assert_int_equal(nv_wg_pitch(65), 128);
	assert_int_equal(nv_wg_pitch(100), 128);
	assert_int_equal(nv_wg_pitch(200), 256);
	assert_int_equal(nv_wg_pitch(256), 256);
	assert_int_equal(nv_wg_pitch(4104), 4160);
	assert_int_equal(nv_wg_pitch(4096), 4096);
	for (int64_t x = 1; x < 300; x++) {
		assert_int_equal(nv_wg_dense_lda(x), nv_wg_pitch(x));
		assert_int_equal(nv_wg_ldb(x), nv_wg_pitch(x));
	}
	assert_int_equal(nv_wg_dimg_bytes(3, 1, 2), 128 * 64 * 2);
	assert_int_equal(nv_wg_dimg_bytes(129, 65, 2), 256 * 128 * 2);
	/* An sm_90a cubin is for sm_90 alone. */
	static const unsigned char x[1];
	const struct nv_image imgs[] = { { "wg", 90, 0, x, x }, { "f16", 90, 1, x, x } };
	assert_true(nv_wg_usable(imgs, 2, 90));
	assert_false(nv_wg_usable(imgs, 2, 89));
	assert_false(nv_wg_usable(imgs, 2, 100));
	assert_false(nv_wg_usable(imgs + 1, 1, 90));
	/* The build's stamp (embed.py): 12 lowercase hex digits. */
	assert_int_equal(strlen(nv_images_stamp), 12);
	assert_int_equal(strspn(nv_images_stamp, "0123456789abcdef"), 12);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_meta_reg_matches_mma_sp_packing),
		cmocka_unit_test(test_meta_word_pads),
		cmocka_unit_test(test_acc_pos_bijection),
		cmocka_unit_test(test_stage_images),
		cmocka_unit_test(test_dense_stage_images),
		cmocka_unit_test(test_plan),
		cmocka_unit_test(test_producers),
		cmocka_unit_test(test_decode_split),
		cmocka_unit_test(test_launch_refuses_bad_pitches),
		cmocka_unit_test(test_names_and_images),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
