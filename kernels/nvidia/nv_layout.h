/* Layouts shared by the NVIDIA kernels, the host code that launches them
 * and the host tests that emulate them lane by lane.
 *
 * Everything here is plain index arithmetic, compiled both by nvcc (for
 * the device) and by the C compiler (for the host), so that the mapping a
 * kernel uses is the mapping a test checks.  The instruction layouts come
 * from the PTX ISA and were verified on an H200 (see
 * reference/nvidia-sparse-mma.md); the comments below restate only what
 * the code relies on.
 *
 * Packed A ("fragment order").  Every A operand the kernels read, dense or
 * 2:4, is first rewritten on the device into tiles of 16 rows x 32 bytes
 * of (dense or compressed) K, 512 bytes each, in which lane L of a warp
 * finds its whole A fragment as 16 consecutive bytes at L * 16.  This is
 * the same for all six instructions used here, because in bytes their A
 * fragments coincide: lane (g = L / 4, t = L % 4) holds in register q the
 * 4 bytes of row g + 8 * (q & 1) at byte column 4 * t + 16 * (q >> 1).
 * Tiles are stored strip by strip: tile (s, kt) of 16-row strip s and
 * 32-byte column kt is at ((s * ktiles) + kt) * 512.
 *
 * Packed metadata.  For each strip and each 64 dense K (a "meta tile"),
 * 32 words of 32 bits, word L being what lane L hands to mma.sp:
 *  - f16/bf16 m16n8k32 (selector 0, so lanes t = 0, 1 supply it): a meta
 *    tile covers two k32 steps.  Word L = (g, t) belongs to step
 *    2 * tile + (t >> 1) and to half p = t & 1 of it (chunks 4p .. 4p+3 of
 *    the step); bits 4j..4j+3 hold chunk 4p + j of row g and bits
 *    16 + 4j.. the same chunk of row g + 8.  For the odd step, lanes t = 0,
 *    1 read word L ^ 2.
 *  - s8 m16n8k64 (selector 0, all four lanes supply it): word (g, t) holds
 *    row g + 8 * (t & 1), chunks 8 * (t >> 1) .. + 7, chunk j at bits 4j.
 * A nibble is the canonical i0 | i1 << 2; groups past K (padding) get
 * 0x4 (positions 0 and 1, zero values), which is a legal ordered pair.
 *
 * B in shared memory.  16-bit B stays row-major (k rows, n contiguous) and
 * is read with ldmatrix.trans; 8-bit B is first transposed on the device to
 * Bt (n rows, k contiguous bytes) and read with plain ldmatrix.  Either way
 * a stage is 128 bytes of K per row (64 halves or 128 bytes), and the
 * 16-byte chunks of a row are XOR-swizzled so that the eight row
 * addresses of one 8x8 ldmatrix matrix fall in eight different bank
 * groups. */
#ifndef MFMA_NV_LAYOUT_H
#define MFMA_NV_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define NV_HD static __host__ __device__ __forceinline__
#else
#define NV_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The six instruction families ("kinds"). */
enum nv_kind {
	NV_F16_DENSE = 0,  /* mma m16n8k16 f16, f32 accumulate */
	NV_F16_SPARSE = 1, /* mma.sp::ordered_metadata m16n8k32 f16 */
	NV_BF16_DENSE = 2, /* mma m16n8k16 bf16 */
	NV_BF16_SPARSE = 3,/* mma.sp m16n8k32 bf16 */
	NV_S8_DENSE = 4,   /* mma m16n8k32 s8, s32 accumulate */
	NV_S8_SPARSE = 5,  /* mma.sp m16n8k64 s8 */
	NV_KIND_COUNT = 6
};

#define NV_TILE_ROWS 16
#define NV_TILE_KBYTES 32       /* bytes of (dense or compressed) K per tile */
#define NV_TILE_BYTES 512
#define NV_META_K 64            /* dense K covered by one meta tile */
#define NV_META_TILE_BYTES 128
#define NV_BK_BYTES 128         /* dense K bytes per main-loop iteration */
#define NV_M_ALIGN 256          /* packed A rows are padded to this (largest BM) */

/* Bytes of one pipeline stage, per operand.  Macros so that both C and
 * C++ can use them as constant expressions. */
#define NV_A_STAGE_BYTES(bm, sparse) ((bm) * ((sparse) ? NV_BK_BYTES / 2 : NV_BK_BYTES))
#define NV_META_STAGE_BYTES(bm, esize, sparse) \
	((sparse) ? ((bm) / 16) * (NV_BK_BYTES / (esize) / NV_META_K) * NV_META_TILE_BYTES : 0)
#define NV_B_STAGE_BYTES(bn) ((bn) * NV_BK_BYTES)
#define NV_STAGE_BYTES(bm, bn, esize, sparse) \
	(NV_A_STAGE_BYTES(bm, sparse) + NV_META_STAGE_BYTES(bm, esize, sparse) + NV_B_STAGE_BYTES(bn))

/* The output tile staged in shared memory at the end: BM rows of BN
 * 32-bit words, padded by 4 words so that rows start in different banks
 * and stay 16-byte aligned.  The dynamic shared memory of a kernel is the
 * larger of its stages and this. */
#define NV_EPI_LD(bn) ((bn) + 4)
#define NV_EPI_BYTES(bm, bn) ((bm) * NV_EPI_LD(bn) * 4)

/* Kernel arguments, passed by value.  Device addresses are 64-bit
 * integers so that the C host code and the device code agree on the
 * layout without sharing pointer types. */
struct nv_gemm_params {
	uint64_t a;        /* packed A tiles */
	uint64_t meta;     /* packed metadata words (sparse kinds) */
	uint64_t b;        /* 16-bit: B [k][ldb] row-major; 8-bit: Bt [n][ldb] bytes */
	uint64_t c;        /* C [m][ldc] in out_dtype, 0 when beta == 0 */
	uint64_t d;        /* D [m][ldd] in out_dtype */
	uint64_t ws;       /* split-K partial sums */
	uint64_t counters; /* split-K arrival counters, one per tile, zero between launches */
	int32_t m, n, k;
	int32_t ldb, ldc, ldd;
	int32_t a_ktiles;   /* packed A tiles per strip */
	int32_t meta_tiles; /* meta tiles per strip */
	int32_t k_iters;    /* main-loop iterations over the whole (padded) K */
	int32_t splits, iters_per_split;
	int32_t tiles_m, tiles_n;
	int32_t out_dtype;  /* enum mfma_dtype */
	float alpha, beta;
};

/* Arguments of the packing kernels. */
struct nv_pack_params {
	uint64_t src;       /* dense A [rows][row_bytes], or the canonical values */
	uint64_t src_meta;  /* canonical meta, rows x meta_words (sparse) */
	uint64_t dst;       /* packed A tiles or packed meta words */
	int64_t row_bytes;  /* bytes of one source row */
	int32_t rows;       /* logical M */
	int32_t strips;     /* padded M / 16 */
	int32_t ktiles;     /* packed tiles (or meta tiles) per strip */
	int32_t meta_words; /* canonical meta words per row */
	int32_t kgroups;    /* logical K / 4 */
	int32_t is8;        /* 8-bit kind (s8 metadata order) */
};

/* Arguments of the batched-launch re-layout (nv_batch_cols): the parts'
 * operands one after the other, part p a rows x n_p row-major block
 * starting at element rows * col_start[j] for each of its columns j, and
 * the joined rows x cols matrix, ld elements a row (columns cols..ld-1
 * written as zero).  dir 0 gathers the parts into the joined matrix, 1
 * scatters it back; es is 1, 2 or 4 bytes. */
struct nv_batch_params {
	uint64_t parts, joined;
	uint64_t col_start, col_n; /* int32 per joined column: its part's first column and width */
	int32_t rows, cols, ld, es, dir;
};

/* Arguments of nv_copy_spans: count byte ranges copied at once, one
 * grid row each.  A batched launch moves its parts between the device and
 * host memory the GPU can address (registered regions) with one launch
 * instead of one DMA copy per part, each of which costs microseconds to
 * start. */
struct nv_copy_span {
	uint64_t src, dst, bytes;
};
struct nv_copy_params {
	uint64_t spans; /* count nv_copy_span on the device */
	int32_t count, pad;
};

/* Arguments of the 8-bit B transpose: B [k][ldb] -> Bt [n][ldbt]. */
struct nv_transpose_params {
	uint64_t b, bt;
	int32_t k, n, ldb, ldbt;
};

NV_HD int nv_kind_esize(int kind) { return kind >= NV_S8_DENSE ? 1 : 2; }
NV_HD int nv_kind_sparse(int kind) { return kind & 1; }
/* Dense K of one mma instruction. */
NV_HD int nv_kind_kstep(int kind)
{
	return (nv_kind_esize(kind) == 2 ? 16 : 32) * (nv_kind_sparse(kind) ? 2 : 1);
}

NV_HD int64_t nv_round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

/* Padded K (elements) of every packed A and of the main loop. */
NV_HD int64_t nv_k_pad(int kind, int64_t k) { return nv_round_up(k, NV_BK_BYTES / nv_kind_esize(kind)); }
NV_HD int64_t nv_m_pad(int64_t m) { return nv_round_up(m, NV_M_ALIGN); }
NV_HD int64_t nv_a_ktiles(int kind, int64_t k)
{
	return nv_k_pad(kind, k) * nv_kind_esize(kind) / (nv_kind_sparse(kind) ? 2 : 1) / NV_TILE_KBYTES;
}
NV_HD int64_t nv_meta_tiles(int kind, int64_t k) { return nv_k_pad(kind, k) / NV_META_K; }
NV_HD int64_t nv_packed_a_bytes(int kind, int64_t m, int64_t k)
{
	return nv_m_pad(m) / NV_TILE_ROWS * nv_a_ktiles(kind, k) * NV_TILE_BYTES;
}
NV_HD int64_t nv_packed_meta_bytes(int kind, int64_t m, int64_t k)
{
	return nv_kind_sparse(kind) ? nv_m_pad(m) / NV_TILE_ROWS * nv_meta_tiles(kind, k) * NV_META_TILE_BYTES : 0;
}

/* Row and byte column (inside a 16 x 32-byte tile) of byte j (0..15) of
 * lane L's A fragment. */
NV_HD void nv_afrag_pos(unsigned lane, unsigned j, unsigned *row, unsigned *col)
{
	unsigned g = lane >> 2, t = lane & 3, q = j >> 2;
	*row = g + 8 * (q & 1);
	*col = 4 * t + 16 * (q >> 1) + (j & 3);
}

/* Register q (0..3) of lane L's A fragment in tile (s, kt), read from a
 * source of `rows` rows of `row_bytes` bytes (zero outside). */
NV_HD uint32_t nv_pack_a_word(const uint8_t *src, int64_t row_bytes, int rows, int64_t s,
			      int64_t kt, unsigned lane, unsigned q)
{
	uint32_t w = 0;
	for (unsigned b = 0; b < 4; b++) {
		unsigned r, c;
		nv_afrag_pos(lane, 4 * q + b, &r, &c);
		int64_t row = s * NV_TILE_ROWS + r;
		int64_t col = kt * NV_TILE_KBYTES + c;
		if (row < rows && col < row_bytes)
			w |= (uint32_t)src[row * row_bytes + col] << (8 * b);
	}
	return w;
}

/* Canonical nibble of (row, group), or the padding pair 0x4 outside. */
NV_HD unsigned nv_canon_nibble(const uint32_t *meta, int meta_words, int rows, int kgroups,
			       int64_t row, int64_t group)
{
	if (row >= rows || group >= kgroups)
		return 0x4u;
	return (meta[row * meta_words + group / 8] >> (4 * (group % 8))) & 0xfu;
}

/* Word `lane` of meta tile (s, mt), in the order described above. */
NV_HD uint32_t nv_pack_meta_word(const uint32_t *meta, int meta_words, int rows, int kgroups,
				 int is8, int64_t s, int64_t mt, unsigned lane)
{
	unsigned g = lane >> 2, t = lane & 3;
	int64_t r0 = s * NV_TILE_ROWS + g;
	uint32_t w = 0;
	if (is8) {
		int64_t row = r0 + 8 * (t & 1);
		int64_t grp0 = mt * (NV_META_K / 4) + 8 * (t >> 1);
		for (unsigned j = 0; j < 8; j++)
			w |= (uint32_t)nv_canon_nibble(meta, meta_words, rows, kgroups, row, grp0 + j)
			     << (4 * j);
	} else {
		int64_t step = 2 * mt + (t >> 1);
		int64_t grp0 = step * 8 + 4 * (t & 1);
		for (unsigned j = 0; j < 4; j++) {
			w |= (uint32_t)nv_canon_nibble(meta, meta_words, rows, kgroups, r0, grp0 + j)
			     << (4 * j);
			w |= (uint32_t)nv_canon_nibble(meta, meta_words, rows, kgroups, r0 + 8, grp0 + j)
			     << (16 + 4 * j);
		}
	}
	return w;
}

/* Swizzled byte offset of 16-byte chunk c of row r in a B stage whose
 * rows hold cpr chunks (cpr = 2, 4, or a multiple of 8).  The XOR term
 * spreads eight consecutive rows at one chunk over the eight 16-byte bank
 * groups of a 128-byte line. */
NV_HD unsigned nv_swz(unsigned r, unsigned c, unsigned cpr)
{
	unsigned x = cpr >= 8 ? (r & 7u) : ((r / (8u / cpr)) & (cpr - 1u));
	return (r * cpr + (c ^ x)) * 16u;
}

/* Offset in an A stage of lane L's fragment for strip s (inside the CTA)
 * and k-step ks: each k-step consumes exactly one tile of each strip. */
NV_HD unsigned nv_stage_a_off(int sparse, unsigned s, unsigned ks, unsigned lane)
{
	unsigned tps = (sparse ? NV_BK_BYTES / 2 : NV_BK_BYTES) / NV_TILE_KBYTES;
	return (s * tps + ks) * NV_TILE_BYTES + lane * 16u;
}

/* Offset in a meta stage of the word lane L passes to mma.sp at k-step
 * ks of strip s. */
NV_HD unsigned nv_stage_meta_off(int kind, unsigned s, unsigned ks, unsigned lane)
{
	unsigned mps = NV_BK_BYTES / nv_kind_esize(kind) / NV_META_K; /* meta tiles per stage */
	unsigned mt = ks * nv_kind_kstep(kind) / NV_META_K;
	unsigned word = lane;
	if (nv_kind_esize(kind) == 2 && (ks & 1))
		word ^= 2u; /* odd k32 step: the pair's words sit in lanes t = 2, 3 */
	return (s * mps + mt) * NV_META_TILE_BYTES + word * 4u;
}

/* Chunks per B stage row. */
NV_HD unsigned nv_b_cpr(int kind, unsigned bn) { return nv_kind_esize(kind) == 2 ? bn / 8 : 8; }
/* Rows of a B stage. */
NV_HD unsigned nv_b_rows(int kind, unsigned bn) { return nv_kind_esize(kind) == 2 ? 64 : bn; }

/* n8 blocks covered by one ldmatrix.x4 of B. */
NV_HD int nv_kind_nbl(int kind) { return nv_kind_sparse(kind) ? 1 : 2; }

/* Offset in a B stage of the row that lane L addresses for the
 * ldmatrix.x4 of k-step ks covering n8 block(s) from n_off (inside the
 * tile).  Matrix i = L / 8 of the x4 gets row L % 8 from lanes 8i..8i+7.
 *  - 16-bit sparse (k32, one n8): matrix i = k rows 8i..8i+7, .trans.
 *  - 16-bit dense (k16, two n8): matrix i = k rows 8(i&1).., n + 8(i>>1).
 *  - 8-bit sparse (k64, one n8): matrix i = bytes 16i.. of Bt rows.
 *  - 8-bit dense (k32, two n8): matrix i = bytes 16(i&1).., n + 8(i>>1). */
NV_HD unsigned nv_ldm_b_off(int kind, unsigned bn, unsigned ks, unsigned n_off, unsigned lane)
{
	unsigned i = lane >> 3, r8 = lane & 7, cpr = nv_b_cpr(kind, bn);
	unsigned row, chunk;
	if (nv_kind_esize(kind) == 2) {
		if (nv_kind_sparse(kind)) {
			row = ks * 32 + 8 * i + r8;
			chunk = n_off / 8;
		} else {
			row = ks * 16 + 8 * (i & 1) + r8;
			chunk = n_off / 8 + (i >> 1);
		}
	} else {
		if (nv_kind_sparse(kind)) {
			row = n_off + r8;
			chunk = ks * 4 + i;
		} else {
			row = n_off + r8 + 8 * (i >> 1);
			chunk = ks * 2 + (i & 1);
		}
	}
	return nv_swz(row, chunk, cpr);
}

/* Position in the 16 x 8 output block of accumulator register r of lane L. */
NV_HD void nv_acc_pos(unsigned lane, unsigned r, unsigned *row, unsigned *col)
{
	*row = (lane >> 2) + 8 * (r >> 1);
	*col = 2 * (lane & 3) + (r & 1);
}

/* CTA index -> tile coordinates, in groups of 8 tile rows so that CTAs
 * running at the same time share A strips and B columns in L2. */
NV_HD void nv_raster(int tile, int tiles_m, int tiles_n, int *pm, int *pn)
{
	const int group = 8;
	int width = group * tiles_n;
	int first = tile / width * group;
	int rows = tiles_m - first < group ? tiles_m - first : group;
	int in = tile % width;
	*pm = first + in % rows;
	*pn = in / rows;
}

#ifdef __cplusplus
}
#endif

#endif
