/* Operand layouts of the sm_90a wgmma.sp kernels (nv_wgmma.cuh), plain
 * index arithmetic compiled for the host (packing, tests) and the device.
 *
 * The 2:4 weight is kept in two arrays, made once from the canonical form
 * (sparse24.h) by nv_wg_pack, in one of two layouts (kp = K padded to
 * NV_WG_BK, the padding zero values):
 *
 * Stage images (the daemon's): the 8 KiB one stage (NV_WG_BK dense K) of
 * one tile (NV_WG_BM rows) holds in shared memory, read by a plain bulk
 * copy, one image after another in the order enum nv_wg_order names:
 * [stage][tile] for the daemon (NV_WG_ORDER: the CTAs walking K together
 * read one run of memory), [tile][stage] in wgmma_bench (each CTA's
 * weight one run); measured in bench/RESULTS.md.
 *  - values: in an image, row r of the tile at r * 64 bytes (its 32
 *    compressed values of the stage), the 16-byte chunk c of the row at
 *    chunk c ^ ((r >> 1) & 3): the 64-byte swizzle (bits 4-5 of the
 *    address XOR bits 7-8) that TMA would apply and the wgmma.sp
 *    descriptor expects.  Rows past M are zeros: nv_wg_img_bytes, rows
 *    padded to NV_WG_BM.
 *  - meta: in the same order, 1 KiB an image: [row of the tile][2
 *    words], each word the row's canonical meta nibbles of one k32 step
 *    (words 2kb and 2kb+1 of the row).
 *
 * Row-major (wgmma_bench's TMA kernels and decode kernels only):
 *  - values: rows x kp/2 elements, row-major: the canonical `values`
 *    rows, padded, loaded with TMA (64-byte swizzle) as a K-major tile of
 *    width kp/2.
 *  - meta: [stage][row, padded to NV_WG_BM][2 words], so one tile's
 *    metadata for one stage is a contiguous 1 KiB.
 *
 * Nibbles past K or past the last row are the padding pair 0x4
 * (positions 0 and 1), never 0x0, which the PTX lists as invalid
 * metadata.
 *
 * The register a thread hands to wgmma.sp (m64nNk32, f16/bf16, selector
 * 0), measured on the H200 by the probe in bench/nvidia/wgmma_bench.cu:
 * thread (warp w of the warpgroup, g = lane / 4, t = lane % 4) passes
 * rows 16w+g (low half) and 16w+g+8 (high half), chunks 4q..4q+3 of the
 * k32 step, q = t & 1.  With canonical words W (chunk c of a row at bits
 * 4c) that is nv_wg_meta_reg(W[16w+g], W[16w+g+8], q): the low 16 bits
 * of both words for q = 0, the high 16 bits for q = 1.  Threads t = 2, 3
 * are not read with selector 0 (they compute the same word anyway). */
#ifndef MFMA_NV_WGMMA_LAYOUT_H
#define MFMA_NV_WGMMA_LAYOUT_H

#include <cuda.h>
#include <stdint.h>

#include "nv_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NV_WG_BM 128  /* rows of a CTA tile: two consumer warpgroups x 64 */
#define NV_WG_BK 64   /* dense K of one pipeline stage (two k32 steps) */
#define NV_WG_THREADS 384 /* one producer and two consumer warpgroups */

/* The tiles the kernels are built with, shared by the device code (one
 * kernel per dtype and tile) and the host (selection, shared memory).
 * X(name, BN, STAGES, MIN_CTAS_PER_SM): the wide tiles run one CTA per SM
 * and move the producer's registers to the consumers (setmaxnreg); the
 * skinny ones (decode shapes, where streaming the weight is the whole
 * cost) run two CTAs per SM with a ring of about 100 KiB each.  Stage
 * counts fill the 227 KiB an sm_90 block may have. */
#define NV_WG_TILES(X)          \
	X(n256, 256, 5, 1)      \
	X(n128, 128, 8, 1)      \
	X(n64, 64, 6, 2)        \
	X(n32, 32, 8, 2)        \
	X(n16, 16, 9, 2)

/* The 2:4 tiles whose kernels have three producer threads (nv_wgmma.cuh's
 * PW3), used by a launch whose CTAs are all resident at once
 * (nv_wg_producers, nv_wgmma_plan.h): the 128 x 128 one, the one tile
 * measured faster with them on the H200 (bench/RESULTS.md). */
#define NV_WG_SP_PW3(bn) ((bn) == 128)

enum nv_wg_tile {
#define NV_WG_TILE_ENUM(name, bn, st, minb) NV_WG_TILE_##name,
	NV_WG_TILES(NV_WG_TILE_ENUM)
#undef NV_WG_TILE_ENUM
	NV_WG_TILE_COUNT
};

/* The dense kernels (wgmma.mma_async without .sp, nv_wgmma.cuh): the
 * same tiles, names and widths (nv_wgmma_plan.c plans both with one
 * table), their own stage counts: a stage holds 64 dense K of A (16 KiB)
 * against 8 KiB of compressed A and 1 KiB of metadata in the 2:4 one. */
#define NV_WG_DTILES(X)         \
	X(n256, 256, 4, 1)      \
	X(n128, 128, 6, 1)      \
	X(n64, 64, 4, 2)        \
	X(n32, 32, 5, 2)        \
	X(n16, 16, 5, 2)

/* Bytes of one stage (A, B and the metadata, each 1024-byte aligned so
 * that every swizzle atom starts on its boundary) and of a kernel's
 * dynamic shared memory (the ring, alignment slack, the mbarriers). */
#define NV_WG_A_BYTES (NV_WG_BM * NV_WG_BK / 2 * 2)
#define NV_WG_E_BYTES (NV_WG_BM * 8)
#define NV_WG_STAGE_BYTES(bn) (NV_WG_A_BYTES + NV_WG_BK * (bn) * 2 + (NV_WG_E_BYTES + 1023) / 1024 * 1024)
#define NV_WG_SMEM_BYTES(bn, stages) ((stages) * NV_WG_STAGE_BYTES(bn) + 1024 + 2 * (stages) * 8)

/* A dense stage: A (128 rows x 64 K, one 128-byte swizzle row each) then
 * B; no metadata. */
#define NV_WG_DA_BYTES (NV_WG_BM * NV_WG_BK * 2)
#define NV_WG_DSTAGE_BYTES(bn) (NV_WG_DA_BYTES + NV_WG_BK * (bn) * 2)
#define NV_WG_DSMEM_BYTES(bn, stages) ((stages) * NV_WG_DSTAGE_BYTES(bn) + 1024 + 2 * (stages) * 8)

NV_HD int64_t nv_wg_k_pad(int64_t k) { return nv_round_up(k, NV_WG_BK); }
NV_HD int64_t nv_wg_m_pad(int64_t m) { return nv_round_up(m, NV_WG_BM); }
NV_HD int64_t nv_wg_values_bytes(int64_t m, int64_t k, int esize) { return m * (nv_wg_k_pad(k) / 2) * esize; }
NV_HD int64_t nv_wg_meta_bytes(int64_t m, int64_t k) { return nv_wg_k_pad(k) / NV_WG_BK * nv_wg_m_pad(m) * 8; }
NV_HD int64_t nv_wg_img_bytes(int64_t m, int64_t k, int esize) { return nv_wg_m_pad(m) * (nv_wg_k_pad(k) / 2) * esize; }

/* The order of the stage images: [tile][stage] (a CTA's whole weight is
 * one run) or [stage][tile] (the CTAs walking K together read one run).
 * Row-major is wgmma_bench's layout for its TMA kernels. */
enum nv_wg_order { NV_WG_ROWMAJOR = 0, NV_WG_IMG_TILES = 1, NV_WG_IMG_STAGES = 2 };
/* The daemon's order (its packing and its kernels). */
#define NV_WG_ORDER NV_WG_IMG_STAGES

/* The shape of an image layout: stages (kp / NV_WG_BK) and tiles
 * (m_pad / NV_WG_BM) of the weight, and the order. */
struct nv_wg_img {
	int64_t k_iters, tiles_m;
	int order;
};
NV_HD struct nv_wg_img nv_wg_img_of(int64_t m, int64_t k, int order)
{
	struct nv_wg_img g = { nv_wg_k_pad(k) / NV_WG_BK, nv_wg_m_pad(m) / NV_WG_BM, order };
	return g;
}

/* Index of the image of stage `it` of tile `tile` (row-major: of the
 * stage's 1 KiB of meta, which is stage-major). */
NV_HD int64_t nv_wg_img_index(struct nv_wg_img g, int64_t tile, int64_t it)
{
	return g.order == NV_WG_IMG_TILES ? tile * g.k_iters + it : it * g.tiles_m + tile;
}

/* Byte offset in the stage images of compressed value column v (0 to
 * kp/2 - 1) of row r, 16-bit values. */
NV_HD int64_t nv_wg_img_offset(struct nv_wg_img g, int64_t r, int64_t v)
{
	const int64_t rr = r % NV_WG_BM, chunk = (v % 32) / 8;
	return nv_wg_img_index(g, r / NV_WG_BM, v / 32) * NV_WG_A_BYTES + rr * 64 +
	       ((chunk ^ ((rr >> 1) & 3)) * 16) + (v % 8) * 2;
}

/* The inverse: the row and value column held at byte `at` (even). */
NV_HD void nv_wg_img_position(struct nv_wg_img g, int64_t at, int64_t *r, int64_t *v)
{
	const int64_t ts = at / NV_WG_A_BYTES, in = at % NV_WG_A_BYTES, rr = in / 64;
	const int64_t chunk = ((in % 64) / 16) ^ ((rr >> 1) & 3);
	const int64_t tile = g.order == NV_WG_IMG_TILES ? ts / g.k_iters : ts % g.tiles_m;
	const int64_t it = g.order == NV_WG_IMG_TILES ? ts % g.k_iters : ts / g.tiles_m;
	*r = tile * NV_WG_BM + rr;
	*v = it * 32 + chunk * 8 + (in % 16) / 2;
}

/* Index of meta word j (0, 1) of stage kb of row r in the meta array of
 * an image layout (row-major's is that of [stage][tile]), and the
 * inverse (the packing kernel's). */
NV_HD int64_t nv_wg_img_meta_index(struct nv_wg_img g, int64_t r, int64_t kb, int j)
{
	return (nv_wg_img_index(g, r / NV_WG_BM, kb) * NV_WG_BM + r % NV_WG_BM) * 2 + j;
}
NV_HD void nv_wg_img_meta_position(struct nv_wg_img g, int64_t i, int64_t *r, int64_t *kb)
{
	const int64_t ts = i / (NV_WG_BM * 2);
	const int64_t tile = g.order == NV_WG_IMG_TILES ? ts / g.k_iters : ts % g.tiles_m;
	*kb = g.order == NV_WG_IMG_TILES ? ts % g.k_iters : ts / g.tiles_m;
	*r = tile * NV_WG_BM + (i / 2) % NV_WG_BM;
}

/* How far apart rows of `width` 16-bit values lie on the device for the
 * kernels' tensor maps: a multiple of 8 values (TMA's 16-byte row
 * stride), and past 64 values a multiple of 64 (128 bytes, the width of a
 * box).  Rows not 128 bytes apart cost the tiles that load 64-value boxes
 * up to half their time again on the H200 (B at 8192 x 200 x 8192 2:4:
 * 65.2 us, 43.6 with rows 256 apart; a dense A at 8192 x 256 x 8200: 79.5,
 * 60.0 with rows 8256 apart), while a copy in that leaves gaps between
 * the rows costs 0-5 us more than a whole one; at 64 values or fewer
 * padding gained less than that.  The kernels never read the gaps (a
 * tensor map's width is the rows' own). */
NV_HD int64_t nv_wg_pitch(int64_t width) { return width > 64 ? nv_round_up(width, 64) : nv_round_up(width, 8); }

/* A dense A sent with a request is kept row-major with its rows
 * nv_wg_pitch(K) apart, read by the dense_rm kernels' TMA boxes; TMA
 * fills past K with zeros.  A resident dense weight is packed into stage
 * images (below). */
NV_HD int64_t nv_wg_dense_lda(int64_t k) { return nv_wg_pitch(k); }

/* A dense A as stage images (the daemon's dense kernels): the 16 KiB one
 * stage (NV_WG_BK values) of one tile (NV_WG_BM rows) holds in shared
 * memory, one image after another in the order of the 2:4 images
 * (nv_wg_img_index), read by one bulk copy.  Row r of the tile at r x 128
 * bytes, its 16-byte chunk c (8 values) at chunk c ^ (r & 7): the
 * 128-byte swizzle (address bits 4-6 XOR bits 7-9) that TMA would apply
 * to a box of 64 values by 128 rows and the wgmma descriptor expects.
 * Values past K and rows past M are zeros.  Against the row-major A read
 * by TMA boxes (128 bytes from each of 128 rows) a CTA's stage is one run
 * of memory, as the 2:4 images made it for wgmma.sp. */
NV_HD int64_t nv_wg_dimg_bytes(int64_t m, int64_t k, int esize)
{
	return nv_wg_m_pad(m) * nv_wg_k_pad(k) * esize;
}

/* Byte offset in the dense stage images of value column v (0 to kp - 1)
 * of row r, 16-bit values. */
NV_HD int64_t nv_wg_dimg_offset(struct nv_wg_img g, int64_t r, int64_t v)
{
	const int64_t rr = r % NV_WG_BM, chunk = (v % NV_WG_BK) / 8;
	return nv_wg_img_index(g, r / NV_WG_BM, v / NV_WG_BK) * NV_WG_DA_BYTES + rr * 128 + ((chunk ^ (rr & 7)) * 16) +
	       (v % 8) * 2;
}

/* The inverse: the row and value column held at byte `at` (even). */
NV_HD void nv_wg_dimg_position(struct nv_wg_img g, int64_t at, int64_t *r, int64_t *v)
{
	const int64_t ts = at / NV_WG_DA_BYTES, in = at % NV_WG_DA_BYTES, rr = in / 128;
	const int64_t chunk = ((in % 128) / 16) ^ (rr & 7);
	const int64_t tile = g.order == NV_WG_IMG_TILES ? ts / g.k_iters : ts % g.tiles_m;
	const int64_t it = g.order == NV_WG_IMG_TILES ? ts % g.k_iters : ts / g.tiles_m;
	*r = tile * NV_WG_BM + rr;
	*v = it * NV_WG_BK + chunk * 8 + (in % 16) / 2;
}

/* B is row-major on the device with its rows nv_wg_pitch(N) apart. */
NV_HD int64_t nv_wg_ldb(int64_t n) { return nv_wg_pitch(n); }

/* Word j (0, 1) of k block kb of row r in the kernel's meta array, from
 * the canonical meta (rows x meta_words, kgroups = K / 4 groups). */
NV_HD uint32_t nv_wg_meta_word(const uint32_t *meta, int meta_words, int rows, int kgroups, int64_t kb,
			       int64_t r, int j)
{
	uint32_t w = 0;
	int64_t g0 = (kb * 2 + j) * 8;
	for (int c = 0; c < 8; c++)
		w |= (uint32_t)nv_canon_nibble(meta, meta_words, rows, kgroups, r, g0 + c) << (4 * c);
	return w;
}

/* Kernel arguments, passed by value (the tensor maps must be kernel
 * parameters: TMA reads them from the parameter space). */
struct nv_wg_params {
	CUtensorMap tm_a; /* row-major values: dims {kp/2, M}, 64-byte swizzle, box {32, 128};
			   * row-major dense A: dims {K, M}, 128-byte swizzle, box {64, 128};
			   * unused with stage images */
	CUtensorMap tm_b; /* B: dims {N, K} (row-major K x ldb), box {min(BN, 64), 64} */
	uint64_t a;       /* the values as stage images (0 with a tensor map) */
	uint64_t meta;    /* the meta array of A's layout (unused by the dense kernels) */
	uint64_t c, d;    /* C, D [m][ldc/ldd] in out_dtype (c = 0 when beta = 0) */
	uint64_t ws;      /* split-K partials */
	uint64_t counters;/* split-K arrival counters, one per tile, zero between launches */
	int32_t m, n, m_pad;
	int32_t k_iters, iters_per_split;
	int32_t ldc, ldd;
	int32_t tiles_m, tiles_n;
	int32_t out_dtype; /* enum mfma_dtype */
	/* Stages of A (it < keep_iters; with the metadata) loaded evict-last
	 * instead of evict-first, so that a hot weight's first stages stay in
	 * L2 from one launch to the next: wgmma_bench's WG_KEEP experiment
	 * (8-11% off the N=16 shapes on one weight, up to 40% slower at
	 * 4096x64x14336: bench/RESULTS.md).  The daemon leaves it 0: the
	 * whole weight evict-first, read once a launch. */
	int32_t keep_iters;
	float alpha, beta;
	/* A launch made before B is on the device (nv_wgmma.cuh, "the
	 * gate"): gate != 0 is a word in device memory that the stream
	 * copying B in sets to gate_seq (or later: compared as a wrapping
	 * 32-bit count) once B is there.  The producer loads A's first ring
	 * of stages, prefetches gate_l2 more stages of A into L2, waits for
	 * the word, then loads B.  gate = 0: B is there at launch. */
	uint64_t gate;
	uint32_t gate_seq;
	int32_t gate_l2;
	/* D's home in mapped host memory (0: none): each CTA, once its
	 * epilogue has written its tile of D (d, on the device), copies the
	 * tile there itself, whole rows in 16-byte pieces where alignment
	 * allows, so that D crosses the bus as the tiles end instead of in a
	 * copy after the kernel. */
	uint64_t dh;
	/* 3: the kernel's three producer threads (built with PW3, see
	 * NV_WG_SP_PW3) issue the stages' copies; 1 (or a kernel built
	 * without them): one thread issues all of them. */
	int32_t producers;
	/* 1: launched as a programmatic dependent launch (nv_wgmma.cuh): A's
	 * first ring and gate_l2 more stages load while the previous kernel
	 * on the stream may still run; B, C, D and the workspace wait for its
	 * end.  0: an ordinary launch. */
	int32_t pdl;
};

/* The decode kernels (nv_wgmma_decode.cuh): skinny N (one tile of BN >= N
 * columns), row blocks of up to 64 x CONS rows of the same packed weight
 * (CONS consumer warpgroups of 64 rows each), stream-K over (row block,
 * stage of K) units across a persistent grid.  A stage holds KSUB 64-K
 * blocks: for each, the A box (rows x 32 values, 64-byte swizzle), the B
 * box (64 K x BN) and the rows' metadata (8 bytes a row).
 * X(name, BN, CONS, KSUB, STAGES, MIN_CTAS_PER_SM); each ring is about
 * 100 KiB, so that two CTAs fit an SM.  Built by bench/nvidia/wgmma_bench.cu
 * only: measured slower than the tiled kernels above at every decode
 * shape (bench/RESULTS.md), so the daemon does not embed them. */
#define NV_WGD_TILES(X)            \
	X(d16, 16, 2, 1, 9, 2)     \
	X(d32, 32, 2, 1, 8, 2)     \
	X(d64, 64, 2, 1, 12, 1)

enum nv_wgd_tile {
#define NV_WGD_TILE_ENUM(name, bn, cons, ksub, st, minb) NV_WGD_TILE_##name,
	NV_WGD_TILES(NV_WGD_TILE_ENUM)
#undef NV_WGD_TILE_ENUM
	NV_WGD_TILE_COUNT
};

#define NV_WGD_BM(cons) (64 * (cons))
#define NV_WGD_THREADS(cons) (128 * (cons) + 32) /* consumer warpgroups, then the producer warp */
#define NV_WGD_A_BYTES(cons) (NV_WGD_BM(cons) * NV_WG_BK / 2 * 2)
#define NV_WGD_E_BYTES(cons) (NV_WGD_BM(cons) * 8)
#define NV_WGD_SUB_BYTES(bn, cons) (NV_WGD_A_BYTES(cons) + NV_WG_BK * (bn) * 2 + NV_WGD_E_BYTES(cons))
#define NV_WGD_STAGE_BYTES(bn, cons, ksub) (((ksub) * NV_WGD_SUB_BYTES(bn, cons) + 1023) / 1024 * 1024)
#define NV_WGD_SMEM_BYTES(bn, cons, ksub, stages) \
	((stages) * NV_WGD_STAGE_BYTES(bn, cons, ksub) + 1024 + 2 * (stages) * 8)
/* Partials of one CTA: 2 slots of BN x 64 x CONS f32. */
#define NV_WGD_WS_BYTES(bn, cons) (2 * (bn) * NV_WGD_BM(cons) * 4)

/* The stream-K split of a decode GEMM: units = row blocks x stages of K,
 * CTA c of `grid` takes units [c * units / grid, (c + 1) * units / grid)
 * (grid <= units, so none is empty).  A CTA's first and last row block
 * may be shared with its neighbours: it leaves a partial there (slot 0
 * for its first block, 1 for its last) and the last of a block's CTAs to
 * finish adds them in CTA order. */
NV_HD int64_t nv_wgd_unit_begin(int64_t c, int64_t units, int64_t grid) { return c * units / grid; }
/* The first and last CTA that hold units of row block b (ki stages each). */
NV_HD void nv_wgd_block_ctas(int64_t b, int64_t ki, int64_t units, int64_t grid, int64_t *c0, int64_t *c1)
{
	*c0 = ((b * ki + 1) * grid - 1) / units;
	*c1 = ((b + 1) * ki * grid - 1) / units;
}

struct nv_wgd_params {
	CUtensorMap tm_a; /* values: dims {kp/2, M}, 64-byte swizzle, box {32, 64 x CONS} */
	CUtensorMap tm_b; /* B: dims {N, K} (row-major K x ldb), box {BN, 64} */
	uint64_t a;       /* or the values as stage images in [tile][stage] order
			   * (0: by tm_a); then CONS = 2, KSUB = 1, rows = 128 */
	uint64_t meta;    /* the meta array of A's layout (rows padded to NV_WG_BM) */
	uint64_t c, d;    /* C, D [m][ldc/ldd] in out_dtype (c = 0 when beta = 0) */
	uint64_t ws;      /* partials: grid x NV_WGD_WS_BYTES */
	uint64_t counters;/* arrivals per row block, zero between launches */
	int32_t m, n, m_pad, kb; /* kb: 64-K blocks, kp / 64 */
	int32_t rows;     /* rows of a block: 64 x CONS, or fewer (a multiple of 8, the
			   * A box's height) so that the blocks fill the GPU; the
			   * block's rows past it are stale shared memory, computed
			   * and never stored */
	int32_t ldc, ldd;
	int32_t out_dtype; /* enum mfma_dtype */
	float alpha, beta;
};

/* Arguments of the packing kernels: nv_wg_pack, canonical values
 * [rows][k/2] and meta [rows][meta_words] into the two arrays above, in
 * the order (enum nv_wg_order) given; nv_wg_pack_dense, a dense A
 * [rows][k] (src; src_meta, dst_meta and meta_words unused) into dense
 * stage images (dst) in that order. */
struct nv_wg_pack_params {
	uint64_t src, src_meta, dst, dst_meta;
	int32_t rows, k, meta_words, order;
};

/* The wgmma.sp metadata register from the words of rows g and g + 8. */
NV_HD uint32_t nv_wg_meta_reg(uint32_t w_lo, uint32_t w_hi, unsigned q)
{
	return q ? (w_lo >> 16) | (w_hi & 0xffff0000u) : (w_lo & 0xffffu) | (w_hi << 16);
}

/* Position of f32 accumulator register i of thread (warp w of the
 * warpgroup, lane) in the 64 x N tile of one wgmma m64nN. */
NV_HD void nv_wg_acc_pos(unsigned w, unsigned lane, unsigned i, unsigned *row, unsigned *col)
{
	*row = 16 * w + (lane >> 2) + 8 * ((i >> 1) & 1);
	*col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
}

#ifdef __cplusplus
}
#endif

#endif
