/* The AMD GEMM kernels' index arithmetic, shared by the device code
 * (kernels/amd/amd_gemm.hip, compiled per gfx arch) and the host (the HIP
 * backend and the lane emulator test).
 *
 * Everything here is plain C: no HIP attributes, no libc beyond the
 * compiler's own stdint/stdbool.  The device source includes it between
 * `#pragma clang force_cuda_host_device begin/end`, so the very functions
 * the test runs on the host are the ones the kernels run.
 *
 * The kernel is one tiled skeleton: a workgroup of 256 threads (4 waves of
 * 64) computes a 128x128 block of D; each wave a 64x64 quarter as 4x4
 * tiles of 16x16, one matrix instruction per tile and K step.  Per stage of
 * `bk` dense K, every thread copies 16-byte chunks of A, B (and, for
 * SMFMAC, the index) from global memory into LDS, double buffered; the
 * waves then read their per-lane operands from LDS.
 *
 * A "policy" is one matrix instruction: which elements each lane feeds it
 * (amd_frag_a / amd_frag_b / amd_frag_idx) and where each accumulator
 * register lands (amd_frag_d).  The lane numbering is l = 16*g + r, with
 * g = l / 16 the lane group and r = l % 16. */
#ifndef MFMA_AMD_LANES_H
#define MFMA_AMD_LANES_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AMD_WAVE 64
#define AMD_THREADS 256
#define AMD_BM 128 /* rows of D per workgroup */
#define AMD_BN 128 /* columns of D per workgroup */
#define AMD_WAVES_N 2
#define AMD_WAVE_M 64 /* rows of D per wave */
#define AMD_WAVE_N 64
#define AMD_TILES 4  /* 16x16 tiles per wave along M and along N */
#define AMD_CHUNK 16 /* bytes per global load, and the LDS swizzle unit */
#define AMD_MAX_A_REGS 4   /* 32-bit registers of a lane's A operand */
#define AMD_MAX_B_REGS 8
#define AMD_MAX_A_CHUNKS 2 /* 16-byte A chunks one thread copies per stage */
#define AMD_MAX_B_CHUNKS 4

enum amd_arch { AMD_GFX908, AMD_GFX90A, AMD_GFX942, AMD_GFX950, AMD_NARCH };

/* Input element of a kernel (A and B share it). */
enum amd_elem { AMD_E_F16, AMD_E_BF16, AMD_E_I8, AMD_NELEM };

/* Every matrix instruction a kernel uses.  One builtin each; on gfx942
 * the 16x16x16 bf16_1k builtin assembles to v_mfma_f32_16x16x16_bf16. */
enum amd_instr {
	AMD_MFMA_F32_16X16X16_F16,
	AMD_MFMA_F32_16X16X8_BF16,
	AMD_MFMA_F32_16X16X16_BF16_1K,
	AMD_MFMA_I32_16X16X16_I8,
	AMD_MFMA_I32_16X16X32_I8,
	AMD_MFMA_F32_16X16X32_F16,
	AMD_MFMA_F32_16X16X32_BF16,
	AMD_MFMA_I32_16X16X64_I8,
	AMD_SMFMAC_F32_16X16X32_F16,
	AMD_SMFMAC_F32_16X16X32_BF16,
	AMD_SMFMAC_I32_16X16X64_I8,
	AMD_SMFMAC_F32_16X16X64_F16,
	AMD_SMFMAC_F32_16X16X64_BF16,
	AMD_NINSTR
};

/* One kernel variant: an arch, an element type, dense or 2:4 A. */
struct amd_cfg {
	enum amd_arch arch;
	enum amd_elem elem;
	bool sparse; /* A arrives 2:4 compressed */
	bool expand; /* ... and is expanded to dense in LDS (no SMFMAC on the arch) */
	bool smfmac; /* the instruction itself takes compressed A and an index */
	enum amd_instr instr;
	unsigned es;    /* bytes per input element */
	unsigned ki;    /* dense K of one instruction */
	unsigned bk;    /* dense K per LDS stage, a multiple of ki */
	unsigned b_run; /* consecutive K values per run in a lane's B operand */
};

/* Which instruction each (arch, element, sparsity) runs.  gfx908/gfx90a
 * have no SMFMAC: 2:4 A is expanded in LDS and fed to dense MFMA.  gfx950
 * uses the K-doubled opcodes (full rate there); its 2:4 i8 uses the
 * CDNA3-shaped v_smfmac_i32_16x16x64_i8, whose layout the vendor table
 * gives, because no layout source for the K-doubled 16x16x128 i8 agrees
 * with another (see kernels/amd/README.md). */
static inline enum amd_instr amd_pick_instr(enum amd_arch a, enum amd_elem e, bool sparse)
{
	switch (a) {
	case AMD_GFX908:
		return e == AMD_E_F16 ? AMD_MFMA_F32_16X16X16_F16
		     : e == AMD_E_BF16 ? AMD_MFMA_F32_16X16X8_BF16
				       : AMD_MFMA_I32_16X16X16_I8;
	case AMD_GFX90A:
		return e == AMD_E_F16 ? AMD_MFMA_F32_16X16X16_F16
		     : e == AMD_E_BF16 ? AMD_MFMA_F32_16X16X16_BF16_1K
				       : AMD_MFMA_I32_16X16X16_I8;
	case AMD_GFX942:
		if (sparse)
			return e == AMD_E_F16 ? AMD_SMFMAC_F32_16X16X32_F16
			     : e == AMD_E_BF16 ? AMD_SMFMAC_F32_16X16X32_BF16
					       : AMD_SMFMAC_I32_16X16X64_I8;
		return e == AMD_E_F16 ? AMD_MFMA_F32_16X16X16_F16
		     : e == AMD_E_BF16 ? AMD_MFMA_F32_16X16X16_BF16_1K
				       : AMD_MFMA_I32_16X16X32_I8;
	case AMD_GFX950:
	default:
		if (sparse)
			return e == AMD_E_F16 ? AMD_SMFMAC_F32_16X16X64_F16
			     : e == AMD_E_BF16 ? AMD_SMFMAC_F32_16X16X64_BF16
					       : AMD_SMFMAC_I32_16X16X64_I8;
		return e == AMD_E_F16 ? AMD_MFMA_F32_16X16X32_F16
		     : e == AMD_E_BF16 ? AMD_MFMA_F32_16X16X32_BF16
				       : AMD_MFMA_I32_16X16X64_I8;
	}
}

static inline unsigned amd_instr_k(enum amd_instr i)
{
	switch (i) {
	case AMD_MFMA_F32_16X16X8_BF16: return 8;
	case AMD_MFMA_F32_16X16X16_F16:
	case AMD_MFMA_F32_16X16X16_BF16_1K:
	case AMD_MFMA_I32_16X16X16_I8: return 16;
	case AMD_MFMA_I32_16X16X32_I8:
	case AMD_MFMA_F32_16X16X32_F16:
	case AMD_MFMA_F32_16X16X32_BF16:
	case AMD_SMFMAC_F32_16X16X32_F16:
	case AMD_SMFMAC_F32_16X16X32_BF16: return 32;
	default: return 64;
	}
}

static inline bool amd_instr_is_smfmac(enum amd_instr i)
{
	return i >= AMD_SMFMAC_F32_16X16X32_F16;
}

static inline struct amd_cfg amd_cfg_get(enum amd_arch a, enum amd_elem e, bool sparse)
{
	struct amd_cfg c;
	c.arch = a;
	c.elem = e;
	c.sparse = sparse;
	c.instr = amd_pick_instr(a, e, sparse);
	c.smfmac = amd_instr_is_smfmac(c.instr);
	c.expand = sparse && !c.smfmac;
	c.es = e == AMD_E_I8 ? 1u : 2u;
	c.ki = amd_instr_k(c.instr);
	/* 64 bytes of dense K per stage keeps a dense stage at 16 KiB
	 * (two stages fit twice in 64 KiB of LDS); SMFMAC stages hold exactly
	 * one instruction's K so that one index field per lane serves it. */
	c.bk = c.smfmac ? c.ki : (64u / c.es > c.ki ? 64u / c.es : c.ki);
	/* The gfx950 16-bit SMFMAC takes B as two runs of 8: lane group g
	 * holds K 8g..8g+7 and 32+8g..32+8g+7.  Every other instruction
	 * takes one run of ki/4. */
	c.b_run = (c.instr == AMD_SMFMAC_F32_16X16X64_F16 || c.instr == AMD_SMFMAC_F32_16X16X64_BF16)
			  ? 8u
			  : c.ki / 4;
	return c;
}

/* ---- The per-lane operands of one instruction (the "policy"). ---- */

/* Dense A: lane l holds row r and ki/4 consecutive K from (ki/4)*g.
 * 2:4 A (SMFMAC): lane l holds ki/8 consecutive compressed values of row
 * r from (ki/8)*g, i.e. the dense K window [(ki/4)*g, (ki/4)*(g+1)).
 * Returns the number of elements; *row and *col are within the 16-row
 * tile and within this instruction's K (dense, or compressed). */
static inline unsigned amd_frag_a(const struct amd_cfg *c, unsigned lane, unsigned *row,
				  unsigned *col)
{
	unsigned n = c->smfmac ? c->ki / 8 : c->ki / 4;
	*row = lane % 16;
	*col = n * (lane / 16);
	return n;
}

/* B: lane l holds column r; its ki/4 values come as runs of b_run
 * consecutive K.  Run j starts at K = 4*b_run*j + b_run*g. */
static inline unsigned amd_frag_b_runs(const struct amd_cfg *c)
{
	return c->ki / 4 / c->b_run;
}

static inline void amd_frag_b(const struct amd_cfg *c, unsigned lane, unsigned run, unsigned *k,
			      unsigned *col)
{
	*col = lane % 16;
	*k = 4 * c->b_run * run + c->b_run * (lane / 16);
}

/* The SMFMAC index of lane l: one 2-bit position per stored value, the
 * nibble (i0 | i1 << 2) of each group of 4 its A values come from, lowest
 * group in the lowest bits.  Lane l covers dense K [(ki/4)*g, (ki/4)*(g+1))
 * of row r, i.e. ki/16 groups from group (ki/16)*g: 8 or 16 bits, used
 * with CBSZ = ABID = 0 (bits from 0). */
static inline unsigned amd_idx_bits(const struct amd_cfg *c)
{
	return c->ki / 4;
}

static inline unsigned amd_frag_idx_group(const struct amd_cfg *c, unsigned lane)
{
	return c->ki / 16 * (lane / 16);
}

/* Accumulator register q (0..3) of lane l holds D[4g + q][r]. */
static inline void amd_frag_d(unsigned lane, unsigned q, unsigned *row, unsigned *col)
{
	*row = 4 * (lane / 16) + q;
	*col = lane % 16;
}

/* ---- The device format of the SMFMAC index ("amd meta"). ----
 *
 * For each block of 16 rows, each instruction K step (ki dense K) and each
 * lane: that lane's index field, amd_idx_bits() wide (1 or 2 bytes).  The
 * HIP backend converts the canonical meta once at weight load (see
 * amd_meta_convert in kernels/amd/amd_kernels.h); a stage then copies 16
 * rows' indices as one contiguous run, and each lane reads its own. */
static inline unsigned amd_meta_field_bytes(const struct amd_cfg *c)
{
	return amd_idx_bits(c) / 8;
}

static inline uint64_t amd_meta_steps(const struct amd_cfg *c, uint32_t k)
{
	return ((uint64_t)k + c->ki - 1) / c->ki;
}

static inline uint64_t amd_meta_bytes(const struct amd_cfg *c, uint32_t m, uint32_t k)
{
	return ((uint64_t)m + 15) / 16 * amd_meta_steps(c, k) * AMD_WAVE * amd_meta_field_bytes(c);
}

/* Byte offset of (16-row block rb, K step s, lane l)'s field. */
static inline uint64_t amd_meta_offset(const struct amd_cfg *c, uint32_t k, uint64_t rb,
				       uint64_t s, unsigned lane)
{
	return ((rb * amd_meta_steps(c, k) + s) * AMD_WAVE + lane) * amd_meta_field_bytes(c);
}

/* The field of (rb, s, lane) from a canonical meta row-major array
 * (sparse24.h).  Groups past k, and rows past m, get the legal pair
 * (0, 1): their values are zero there, so the positions do not matter,
 * but the hardware sees only ordered pairs. */
static inline uint32_t amd_meta_field(const struct amd_cfg *c, const uint32_t *canon, uint32_t m,
				      uint32_t k, uint64_t rb, uint64_t s, unsigned lane)
{
	uint64_t row = rb * 16 + lane % 16;
	uint64_t words = ((uint64_t)k / 4 + 7) / 8;
	uint64_t g0 = s * (c->ki / 4) + amd_frag_idx_group(c, lane);
	uint32_t v = 0;
	for (unsigned j = 0; j < c->ki / 16; j++) {
		uint64_t g = g0 + j;
		uint32_t nib = 0x4u;
		if (row < m && g < k / 4)
			nib = (canon[row * words + g / 8] >> (4 * (g % 8))) & 0xfu;
		v |= nib << (4 * j);
	}
	return v;
}

/* ---- The tiled skeleton: stages, chunks, LDS layout. ---- */

/* A's source columns per stage row: dense K, or compressed values. */
static inline unsigned amd_stage_a_cols(const struct amd_cfg *c)
{
	return c->sparse ? c->bk / 2 : c->bk;
}

/* A's LDS row: dense K after expansion, compressed values for SMFMAC. */
static inline unsigned amd_lds_a_row_bytes(const struct amd_cfg *c)
{
	return (c->smfmac ? c->bk / 2 : c->bk) * c->es;
}

static inline unsigned amd_lds_b_row_bytes(const struct amd_cfg *c)
{
	return c->bk * c->es;
}

static inline unsigned amd_lds_meta_bytes(const struct amd_cfg *c)
{
	return c->smfmac ? AMD_BM / 16 * AMD_WAVE * amd_meta_field_bytes(c) : 0;
}

/* Byte offsets of the regions of one stage buffer, and its size. */
static inline unsigned amd_lds_a_base(const struct amd_cfg *c)
{
	(void)c;
	return 0;
}

static inline unsigned amd_lds_b_base(const struct amd_cfg *c)
{
	return AMD_BM * amd_lds_a_row_bytes(c);
}

static inline unsigned amd_lds_meta_base(const struct amd_cfg *c)
{
	return amd_lds_b_base(c) + AMD_BN * amd_lds_b_row_bytes(c);
}

static inline unsigned amd_lds_stage_bytes(const struct amd_cfg *c)
{
	return amd_lds_meta_base(c) + amd_lds_meta_bytes(c);
}

/* The kernel's LDS: two stage buffers (double buffering), passed as the
 * launch's dynamic LDS size so each variant takes only what it uses. */
static inline unsigned amd_lds_bytes(const struct amd_cfg *c)
{
	return 2 * amd_lds_stage_bytes(c);
}

/* Byte offset of (row, byte) inside a region of rows of row_bytes.  The
 * 16-byte chunks of a row are XOR-swizzled by the row's 128-byte bank
 * line (32 banks of 4 bytes): the 16 rows one instruction reads then land
 * in different banks without padding, where unswizzled rows 128/row_bytes
 * apart would all hit the same ones.  A lane's read never crosses a chunk
 * (runs are at most 16 bytes and aligned to their size), so it stays one
 * contiguous read. */
static inline unsigned amd_lds_swizzle(unsigned row, unsigned byte, unsigned row_bytes)
{
	unsigned chunks = row_bytes / AMD_CHUNK;
	unsigned key = row * row_bytes / 128 % chunks;
	unsigned chunk = (byte / AMD_CHUNK) ^ key;
	return row * row_bytes + chunk * AMD_CHUNK + byte % AMD_CHUNK;
}

/* Global -> LDS copies.  Chunk i of thread t (i < amd_*_chunks_per_thread)
 * is chunk number i*256 + t of the stage tile, numbered row by row, so
 * neighbouring threads read neighbouring bytes. */
static inline unsigned amd_a_chunks_per_row(const struct amd_cfg *c)
{
	return amd_stage_a_cols(c) * c->es / AMD_CHUNK;
}

static inline unsigned amd_a_chunks_per_thread(const struct amd_cfg *c)
{
	return AMD_BM * amd_a_chunks_per_row(c) / AMD_THREADS;
}

/* Row in the block and source column (element) within the stage. */
static inline void amd_a_chunk(const struct amd_cfg *c, unsigned tid, unsigned i, unsigned *row,
			       unsigned *col)
{
	unsigned n = i * AMD_THREADS + tid;
	*row = n / amd_a_chunks_per_row(c);
	*col = n % amd_a_chunks_per_row(c) * (AMD_CHUNK / c->es);
}

/* B is stored transposed in LDS (one row per column n, K contiguous), so
 * every lane's operand is a contiguous read.  The copy is element by
 * element, and its chunks are handed out K first: the lanes of a wave then
 * write one element of 32 or 64 consecutive K of the same column, i.e.
 * neighbouring bytes of one LDS row.  Handed out along N, they would write
 * rows 8 apart, which share their banks: a 32-way conflict on every store.
 * The global loads pay instead, 16 bytes per row, which the cache joins
 * across the workgroup. */
static inline unsigned amd_b_chunks_per_row(const struct amd_cfg *c)
{
	return AMD_BN * c->es / AMD_CHUNK;
}

static inline unsigned amd_b_chunks_per_thread(const struct amd_cfg *c)
{
	return c->bk * amd_b_chunks_per_row(c) / AMD_THREADS;
}

static inline void amd_b_chunk(const struct amd_cfg *c, unsigned tid, unsigned i, unsigned *k,
			       unsigned *col)
{
	unsigned n = i * AMD_THREADS + tid;
	*k = n % c->bk;
	*col = n / c->bk * (AMD_CHUNK / c->es);
}

/* The index of a stage: 8 blocks of 16 rows, each one contiguous run of
 * 64 fields in global memory; thread t < amd_meta_words() copies word t. */
static inline unsigned amd_meta_words(const struct amd_cfg *c)
{
	return amd_lds_meta_bytes(c) / 4;
}

static inline void amd_meta_word(const struct amd_cfg *c, unsigned tid, unsigned *block,
				 unsigned *byte)
{
	unsigned per_block = AMD_WAVE * amd_meta_field_bytes(c) / 4;
	*block = tid / per_block;
	*byte = tid % per_block * 4;
}

/* Where, in a stage's LDS (offsets from the stage's start), the copy
 * writes and each lane reads: the kernel and the lane emulator both take
 * their offsets from here, so that a wrong one is the test's too. */

/* Meta word (block, byte) of amd_meta_word. */
static inline unsigned amd_lds_meta_word_off(const struct amd_cfg *c, unsigned block,
					     unsigned byte)
{
	return amd_lds_meta_base(c) + block * AMD_WAVE * amd_meta_field_bytes(c) + byte;
}

/* Lane's A operand of tile mi at K step `step`, in the wave whose first
 * row is wrow: one run of *bytes bytes, landing at the operand's word 0. */
static inline unsigned amd_lds_frag_a_off(const struct amd_cfg *c, unsigned wrow, unsigned mi,
					  unsigned step, unsigned lane, unsigned *bytes)
{
	unsigned row, col;
	*bytes = amd_frag_a(c, lane, &row, &col) * c->es;
	row += wrow + 16 * mi;
	col += step * (c->smfmac ? c->ki / 2 : c->ki);
	return amd_lds_a_base(c) + amd_lds_swizzle(row, col * c->es, amd_lds_a_row_bytes(c));
}

/* Run j (of amd_frag_b_runs) of lane's B operand of tile ni at K step
 * `step`, in the wave whose first column is wcol: c->b_run elements,
 * landing at the operand's word *word. */
static inline unsigned amd_lds_frag_b_off(const struct amd_cfg *c, unsigned wcol, unsigned ni,
					  unsigned step, unsigned lane, unsigned j, unsigned *word)
{
	unsigned k, col;
	amd_frag_b(c, lane, j, &k, &col);
	col += wcol + 16 * ni;
	k += step * c->ki;
	*word = j * c->b_run * c->es / 4;
	return amd_lds_b_base(c) + amd_lds_swizzle(col, k * c->es, amd_lds_b_row_bytes(c));
}

/* Lane's index field (amd_meta_field_bytes) of tile mi, in the wave whose
 * first row is wrow. */
static inline unsigned amd_lds_frag_idx_off(const struct amd_cfg *c, unsigned wrow, unsigned mi,
					    unsigned lane)
{
	return amd_lds_meta_base(c) + ((wrow / 16 + mi) * AMD_WAVE + lane) * amd_meta_field_bytes(c);
}

/* Expansion of a 2:4 group (gfx908/gfx90a): dense position p of a group
 * whose nibble is nib takes stored value 0, stored value 1, or zero. */
static inline int amd_expand_pick(unsigned nib, unsigned p)
{
	if ((nib & 3u) == p)
		return 0;
	if ((nib >> 2) == p)
		return 1;
	return -1;
}

/* Expansion: the nibbles of the groups one staged chunk of 2:4 values
 * covers (4 groups for 16-bit, 8 for i8), from the canonical meta word
 * that holds them.  The chunk's first group is a multiple of 4 (or 8), so
 * they are one aligned field of that word. */
static inline uint32_t amd_expand_nibbles(const struct amd_cfg *c, uint32_t word, uint64_t group)
{
	return c->es == 2 ? (word >> (group % 8 * 4)) & 0xffffu : word;
}

/* Where wave w sits in the block. */
static inline void amd_wave_origin(unsigned wave, unsigned *row, unsigned *col)
{
	*row = wave / AMD_WAVES_N * AMD_WAVE_M;
	*col = wave % AMD_WAVES_N * AMD_WAVE_N;
}

/* ---- Kernel arguments, passed by value through hipModuleLaunchKernel's
 * `extra` buffer; host and device see this one struct. ---- */

#define AMD_ARG_HAS_C 1u   /* beta != 0: read C */
#define AMD_ARG_A_VEC 2u   /* A's rows start 16-byte aligned: chunk loads may be vectors */
#define AMD_ARG_B_VEC 4u

struct amd_gemm_args {
	uint64_t a;      /* dense A (m x k), or the 2:4 values (m x k/2) */
	uint64_t a_meta; /* SMFMAC: amd meta; expansion: canonical meta; else 0 */
	uint64_t b;      /* k x n */
	uint64_t c;      /* m x n in out_dtype, or 0 */
	uint64_t d;      /* m x n in out_dtype */
	uint32_t m, n, k;
	uint32_t out_dtype; /* enum mfma_dtype: F32, F16, BF16 or I32 */
	float alpha, beta;
	uint32_t flags;
	uint32_t reserved;
};

#ifdef __cplusplus
}
#endif

#endif
