/* The AMD matrix-core GEMM kernels: one tiled skeleton, one compute policy
 * per matrix instruction, compiled once per gfx arch into a raw code
 * object (kernels/amd/meson.build) that mfmad embeds and loads with
 * hipModuleLoadData.
 *
 * C-like HIP on purpose: no HIP headers (clang builtins and attributes
 * only, so the code does not depend on the HIP version installed), static
 * always-inline functions, no templates.  The policy is a constant
 * struct amd_cfg; after inlining every switch on it folds away, so each
 * kernel is straight code for its instruction.
 *
 * All index arithmetic (who loads what, where it sits in LDS, which lane
 * feeds which element to which instruction) comes from amd_lanes.h, the
 * same functions the host lane emulator (tests/amd) runs. */
#pragma clang force_cuda_host_device begin
#include "amd_lanes.h"
#include "mfma_dtype.h"
#pragma clang force_cuda_host_device end

#if defined(__gfx908__)
#define ARCH AMD_GFX908
#elif defined(__gfx90a__)
#define ARCH AMD_GFX90A
#elif defined(__gfx942__)
#define ARCH AMD_GFX942
#elif defined(__gfx950__)
#define ARCH AMD_GFX950
#else
#error "amd_gemm.hip is built for gfx908, gfx90a, gfx942 or gfx950 only"
#endif

#define DEVICE static __attribute__((device)) __attribute__((always_inline)) inline
#define KERNEL                                                                            \
	extern "C" __attribute__((global))                                                \
	__attribute__((amdgpu_flat_work_group_size(AMD_THREADS, AMD_THREADS)))

typedef uint32_t u32x2 __attribute__((ext_vector_type(2)));
typedef uint32_t u32x4 __attribute__((ext_vector_type(4)));
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef int i32x2 __attribute__((ext_vector_type(2)));
typedef int i32x4 __attribute__((ext_vector_type(4)));
typedef short s16x2 __attribute__((ext_vector_type(2)));
typedef short s16x4 __attribute__((ext_vector_type(4)));
typedef short s16x8 __attribute__((ext_vector_type(8)));
typedef _Float16 h16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 h16x8 __attribute__((ext_vector_type(8)));
typedef _Float16 h16x16 __attribute__((ext_vector_type(16)));
#if defined(__gfx950__)
typedef __bf16 bf16x8 __attribute__((ext_vector_type(8)));
typedef __bf16 bf16x16 __attribute__((ext_vector_type(16)));
#endif

/* Global memory, said so: a plain pointer made from an integer is a flat
 * pointer, and flat loads cost more than global ones. */
#define GLOBAL __attribute__((address_space(1)))
typedef GLOBAL const uint8_t gcbyte;
typedef GLOBAL const uint16_t gcu16;
typedef GLOBAL const uint32_t gcu32;
typedef GLOBAL const u32x4 gcu32x4;

/* Dynamic LDS: the launch passes amd_lds_bytes(cfg).  Every access is
 * aligned to its size (at most 16 bytes), which ds_read_b128 needs. */
extern __attribute__((shared)) __attribute__((aligned(16))) uint8_t lds[];

/* One lane's operand registers (A uses up to 4, B up to 8). */
struct frag {
	uint32_t w[AMD_MAX_B_REGS];
};

DEVICE void barrier(void)
{
	__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
	__builtin_amdgcn_s_barrier();
	__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

/* ---- Global -> registers ---- */

/* Element e (of size es) of a 16-byte chunk. */
DEVICE uint32_t chunk_get(u32x4 v, unsigned e, unsigned es)
{
	uint32_t w = v[e * es / 4];
	return es == 2 ? (w >> (e % 2 * 16)) & 0xffffu : (w >> (e % 4 * 8)) & 0xffu;
}

DEVICE u32x4 chunk_set(u32x4 v, unsigned e, unsigned es, uint32_t x)
{
	unsigned sh = es == 2 ? e % 2 * 16 : e % 4 * 8;
	v[e * es / 4] |= x << sh;
	return v;
}

/* The 16-byte chunk at (row, col) of a rows x cols row-major matrix,
 * zero outside it.  vec says every row starts 16-byte aligned, so a chunk
 * wholly inside is one vector load; edges go element by element. */
DEVICE u32x4 load_chunk(gcbyte *base, uint32_t rows, uint32_t cols, uint64_t row,
			uint64_t col, unsigned es, bool vec)
{
	u32x4 v = { 0, 0, 0, 0 };
	if (row >= rows || col >= cols)
		return v;
	gcbyte *p = base + (row * cols + col) * es;
	unsigned n = AMD_CHUNK / es;
	if (vec && col + n <= cols)
		return *(gcu32x4 *)p;
	#pragma unroll
	for (unsigned e = 0; e < n; e++) {
		if (col + e < cols) {
			uint32_t x = es == 2 ? *(gcu16 *)(p + 2 * e) : p[e];
			v = chunk_set(v, e, es, x);
		}
	}
	return v;
}

/* What one thread carries from global memory to LDS per stage. */
struct stage_regs {
	u32x4 a[AMD_MAX_A_CHUNKS];
	u32x4 b[AMD_MAX_B_CHUNKS];
	uint32_t a_nib[AMD_MAX_A_CHUNKS]; /* expansion: the nibbles of each A chunk */
	uint32_t meta;
};

DEVICE void stage_load(const struct amd_cfg *c, const struct amd_gemm_args *g, unsigned tid,
		       uint64_t m0, uint64_t n0, uint32_t t, struct stage_regs *r)
{
	gcbyte *a = (gcbyte *)g->a;
	gcbyte *b = (gcbyte *)g->b;
	uint32_t a_cols = c->sparse ? g->k / 2 : g->k;
	#pragma unroll
	for (unsigned i = 0; i < amd_a_chunks_per_thread(c); i++) {
		unsigned row, col;
		amd_a_chunk(c, tid, i, &row, &col);
		uint64_t gcol = (uint64_t)t * amd_stage_a_cols(c) + col;
		r->a[i] = load_chunk(a, g->m, a_cols, m0 + row, gcol, c->es,
				     g->flags & AMD_ARG_A_VEC);
		if (c->expand) {
			gcu32 *meta = (gcu32 *)g->a_meta;
			uint64_t group = gcol / 2, words = ((uint64_t)g->k / 4 + 7) / 8;
			uint32_t nib = 0x44444444u;
			if (m0 + row < g->m && group < g->k / 4)
				nib = amd_expand_nibbles(c, meta[(m0 + row) * words + group / 8], group);
			r->a_nib[i] = nib;
		}
	}
	#pragma unroll
	for (unsigned i = 0; i < amd_b_chunks_per_thread(c); i++) {
		unsigned k, col;
		amd_b_chunk(c, tid, i, &k, &col);
		r->b[i] = load_chunk(b, g->k, g->n, (uint64_t)t * c->bk + k, n0 + col, c->es,
				     g->flags & AMD_ARG_B_VEC);
	}
	if (c->smfmac && tid < amd_meta_words(c)) {
		unsigned block, byte;
		amd_meta_word(c, tid, &block, &byte);
		uint64_t rb = m0 / 16 + block;
		r->meta = 0x44444444u;
		if (rb < ((uint64_t)g->m + 15) / 16)
			r->meta = *(gcu32 *)((gcbyte *)g->a_meta +
					     amd_meta_offset(c, g->k, rb, t, 0) + byte);
	}
}

/* ---- Registers -> LDS ---- */

DEVICE void lds_store16(unsigned off, u32x4 v)
{
	*(u32x4 *)(lds + off) = v;
}

/* A 16-byte chunk of 2:4 values expands to 32 dense bytes; this builds
 * the h-th (0 or 1) 16 of them.  The position tests become selects, so
 * nothing is indexed at run time (which would spill to scratch). */
DEVICE u32x4 expand_half(const struct amd_cfg *c, u32x4 src, uint32_t nib, unsigned h)
{
	u32x4 out = { 0, 0, 0, 0 };
	unsigned per = AMD_CHUNK / c->es; /* dense elements per output chunk */
	#pragma unroll
	for (unsigned e = 0; e < per; e++) {
		unsigned d = h * per + e;      /* dense element within the chunk's run */
		unsigned grp = d / 4, p = d % 4;
		unsigned gn = (nib >> (4 * grp)) & 0xfu;
		int pick = amd_expand_pick(gn, p);
		uint32_t v0 = chunk_get(src, 2 * grp, c->es);
		uint32_t v1 = chunk_get(src, 2 * grp + 1, c->es);
		uint32_t x = pick == 0 ? v0 : pick == 1 ? v1 : 0u;
		out = chunk_set(out, e, c->es, x);
	}
	return out;
}

DEVICE void stage_store(const struct amd_cfg *c, unsigned tid, unsigned buf,
			const struct stage_regs *r)
{
	unsigned base = buf * amd_lds_stage_bytes(c);
	unsigned a_row = amd_lds_a_row_bytes(c), b_row = amd_lds_b_row_bytes(c);
	#pragma unroll
	for (unsigned i = 0; i < amd_a_chunks_per_thread(c); i++) {
		unsigned row, col;
		amd_a_chunk(c, tid, i, &row, &col);
		if (c->expand) {
			#pragma unroll
			for (unsigned h = 0; h < 2; h++)
				lds_store16(base + amd_lds_a_base(c) +
						    amd_lds_swizzle(row, (2 * col * c->es) + h * AMD_CHUNK, a_row),
					    expand_half(c, r->a[i], r->a_nib[i], h));
		} else {
			lds_store16(base + amd_lds_a_base(c) + amd_lds_swizzle(row, col * c->es, a_row),
				    r->a[i]);
		}
	}
	#pragma unroll
	for (unsigned i = 0; i < amd_b_chunks_per_thread(c); i++) {
		unsigned k, col;
		amd_b_chunk(c, tid, i, &k, &col);
		#pragma unroll
		for (unsigned e = 0; e < AMD_CHUNK / c->es; e++) {
			unsigned off = base + amd_lds_b_base(c) + amd_lds_swizzle(col + e, k * c->es, b_row);
			uint32_t x = chunk_get(r->b[i], e, c->es);
			if (c->es == 2)
				*(uint16_t *)(lds + off) = (uint16_t)x;
			else
				lds[off] = (uint8_t)x;
		}
	}
	if (c->smfmac && tid < amd_meta_words(c)) {
		unsigned block, byte;
		amd_meta_word(c, tid, &block, &byte);
		*(uint32_t *)(lds + base + amd_lds_meta_word_off(c, block, byte)) = r->meta;
	}
}

/* ---- LDS -> operand registers (the policy's load_a / load_b) ---- */

/* bytes is 4, 8 or 16, aligned to itself; lands at w[word..]. */
DEVICE void lds_read(struct frag *f, unsigned word, unsigned off, unsigned bytes)
{
	if (bytes == 16) {
		u32x4 v = *(const u32x4 *)(lds + off);
		#pragma unroll
		for (unsigned j = 0; j < 4; j++)
			f->w[word + j] = v[j];
	} else if (bytes == 8) {
		u32x2 v = *(const u32x2 *)(lds + off);
		f->w[word] = v[0];
		f->w[word + 1] = v[1];
	} else {
		f->w[word] = *(const uint32_t *)(lds + off);
	}
}

DEVICE void load_a(const struct amd_cfg *c, unsigned base, unsigned wrow, unsigned mi,
		   unsigned step, unsigned lane, struct frag *f)
{
	unsigned bytes;
	unsigned off = amd_lds_frag_a_off(c, wrow, mi, step, lane, &bytes);
	lds_read(f, 0, base + off, bytes);
}

DEVICE void load_b(const struct amd_cfg *c, unsigned base, unsigned wcol, unsigned ni,
		   unsigned step, unsigned lane, struct frag *f)
{
	#pragma unroll
	for (unsigned j = 0; j < amd_frag_b_runs(c); j++) {
		unsigned word;
		unsigned off = amd_lds_frag_b_off(c, wcol, ni, step, lane, j, &word);
		lds_read(f, word, base + off, c->b_run * c->es);
	}
}

DEVICE uint32_t load_idx(const struct amd_cfg *c, unsigned base, unsigned wrow, unsigned mi,
			 unsigned lane)
{
	unsigned off = base + amd_lds_frag_idx_off(c, wrow, mi, lane);
	return amd_meta_field_bytes(c) == 2 ? *(const uint16_t *)(lds + off) : lds[off];
}

/* ---- The instruction (the policy's mma) ---- */

#define A2 ((u32x2){ a->w[0], a->w[1] })
#define A4 ((u32x4){ a->w[0], a->w[1], a->w[2], a->w[3] })
#define B2 ((u32x2){ b->w[0], b->w[1] })
#define B4 ((u32x4){ b->w[0], b->w[1], b->w[2], b->w[3] })
#define B8 ((struct frag8){ { b->w[0], b->w[1], b->w[2], b->w[3], b->w[4], b->w[5], b->w[6], b->w[7] } })
#define AS_I(x) __builtin_bit_cast(i32x4, x)
#define AS_F(x) __builtin_bit_cast(f32x4, x)

struct frag8 {
	uint32_t w[8];
};

/* Each builtin exists only on some arches (and on gfx908/gfx90a SMFMAC
 * compiles in the front end, then fails in the back end), so each is
 * guarded by the arch macros, never by __has_builtin.  amd_pick_instr
 * never selects an instruction outside its guard. */
DEVICE void mma(const struct amd_cfg *c, f32x4 *acc, const struct frag *a, const struct frag *b,
		uint32_t idx)
{
	(void)idx;
	switch (c->instr) {
	case AMD_MFMA_F32_16X16X16_F16:
		*acc = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(h16x4, A2),
							     __builtin_bit_cast(h16x4, B2), *acc, 0, 0, 0);
		return;
#if defined(__gfx908__)
	case AMD_MFMA_F32_16X16X8_BF16:
		*acc = __builtin_amdgcn_mfma_f32_16x16x8bf16(__builtin_bit_cast(s16x2, a->w[0]),
							     __builtin_bit_cast(s16x2, b->w[0]), *acc, 0, 0, 0);
		return;
#endif
#if defined(__gfx90a__) || defined(__gfx942__) || defined(__gfx950__)
	case AMD_MFMA_F32_16X16X16_BF16_1K:
		*acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(s16x4, A2),
								 __builtin_bit_cast(s16x4, B2), *acc, 0, 0, 0);
		return;
#endif
#if defined(__gfx908__) || defined(__gfx90a__)
	case AMD_MFMA_I32_16X16X16_I8:
		*acc = AS_F(__builtin_amdgcn_mfma_i32_16x16x16i8((int)a->w[0], (int)b->w[0], AS_I(*acc), 0, 0, 0));
		return;
#endif
#if defined(__gfx942__) || defined(__gfx950__)
	case AMD_MFMA_I32_16X16X32_I8:
		*acc = AS_F(__builtin_amdgcn_mfma_i32_16x16x32_i8(__builtin_bit_cast(long, A2),
								  __builtin_bit_cast(long, B2), AS_I(*acc), 0, 0, 0));
		return;
	case AMD_SMFMAC_F32_16X16X32_F16:
		*acc = __builtin_amdgcn_smfmac_f32_16x16x32_f16(__builtin_bit_cast(h16x4, A2),
								__builtin_bit_cast(h16x8, B4), *acc, (int)idx, 0, 0);
		return;
	case AMD_SMFMAC_F32_16X16X32_BF16:
		*acc = __builtin_amdgcn_smfmac_f32_16x16x32_bf16(__builtin_bit_cast(s16x4, A2),
								 __builtin_bit_cast(s16x8, B4), *acc, (int)idx, 0, 0);
		return;
	case AMD_SMFMAC_I32_16X16X64_I8:
		*acc = AS_F(__builtin_amdgcn_smfmac_i32_16x16x64_i8(__builtin_bit_cast(i32x2, A2),
								    __builtin_bit_cast(i32x4, B4), AS_I(*acc),
								    (int)idx, 0, 0));
		return;
#endif
#if defined(__gfx950__)
	case AMD_MFMA_F32_16X16X32_F16:
		*acc = __builtin_amdgcn_mfma_f32_16x16x32_f16(__builtin_bit_cast(h16x8, A4),
							      __builtin_bit_cast(h16x8, B4), *acc, 0, 0, 0);
		return;
	case AMD_MFMA_F32_16X16X32_BF16:
		*acc = __builtin_amdgcn_mfma_f32_16x16x32_bf16(__builtin_bit_cast(bf16x8, A4),
							       __builtin_bit_cast(bf16x8, B4), *acc, 0, 0, 0);
		return;
	case AMD_MFMA_I32_16X16X64_I8:
		*acc = AS_F(__builtin_amdgcn_mfma_i32_16x16x64_i8(__builtin_bit_cast(i32x4, A4),
								  __builtin_bit_cast(i32x4, B4), AS_I(*acc), 0, 0, 0));
		return;
	case AMD_SMFMAC_F32_16X16X64_F16:
		*acc = __builtin_amdgcn_smfmac_f32_16x16x64_f16(__builtin_bit_cast(h16x8, A4),
								__builtin_bit_cast(h16x16, B8), *acc, (int)idx, 0, 0);
		return;
	case AMD_SMFMAC_F32_16X16X64_BF16:
		*acc = __builtin_amdgcn_smfmac_f32_16x16x64_bf16(__builtin_bit_cast(bf16x8, A4),
								 __builtin_bit_cast(bf16x16, B8), *acc, (int)idx, 0, 0);
		return;
#endif
	default:
		__builtin_trap();
	}
}

/* ---- The epilogue (the policy's store_c) ---- */

DEVICE float load_c_float(const struct amd_gemm_args *g, uint64_t i)
{
	switch (g->out_dtype) {
	case MFMA_DT_F16: return (float)__builtin_bit_cast(_Float16, ((gcu16 *)g->c)[i]);
	case MFMA_DT_BF16: return mfma_bf16_to_f32(((gcu16 *)g->c)[i]);
	default: return ((GLOBAL const float *)g->c)[i];
	}
}

DEVICE void store_d(const struct amd_cfg *c, const struct amd_gemm_args *g, uint64_t row,
		    uint64_t col, float facc)
{
	uint64_t i = row * g->n + col;
	if (c->elem == AMD_E_I8) {
		int32_t v = __builtin_bit_cast(int32_t, facc);
		if (g->flags & AMD_ARG_HAS_C)
			v = (int32_t)((uint32_t)v + ((gcu32 *)g->c)[i]);
		((GLOBAL int32_t *)g->d)[i] = v;
		return;
	}
	float v = g->alpha * facc;
	if (g->flags & AMD_ARG_HAS_C)
		v += g->beta * load_c_float(g, i);
	switch (g->out_dtype) {
	case MFMA_DT_F16: ((GLOBAL uint16_t *)g->d)[i] = __builtin_bit_cast(uint16_t, (_Float16)v); break;
	case MFMA_DT_BF16: ((GLOBAL uint16_t *)g->d)[i] = mfma_f32_to_bf16(v); break;
	default: ((GLOBAL float *)g->d)[i] = v; break;
	}
}

/* ---- The skeleton ---- */

DEVICE void gemm(const struct amd_cfg *c, const struct amd_gemm_args *g)
{
	unsigned tid = __builtin_amdgcn_workitem_id_x();
	unsigned lane = tid % AMD_WAVE;
	/* The wave number is uniform; readfirstlane tells the compiler so. */
	unsigned wave = __builtin_amdgcn_readfirstlane(tid / AMD_WAVE);
	uint64_t n0 = (uint64_t)__builtin_amdgcn_workgroup_id_x() * AMD_BN;
	uint64_t m0 = (uint64_t)__builtin_amdgcn_workgroup_id_y() * AMD_BM;
	unsigned wrow, wcol;
	amd_wave_origin(wave, &wrow, &wcol);

	f32x4 acc[AMD_TILES][AMD_TILES];
	#pragma unroll
	for (unsigned mi = 0; mi < AMD_TILES; mi++)
		#pragma unroll
		for (unsigned ni = 0; ni < AMD_TILES; ni++)
			acc[mi][ni] = (f32x4){ 0, 0, 0, 0 }; /* zero: also integer 0 */

	/* Tiles wholly past the edge are skipped (uniform per wave): a
	 * 16-column activation then costs 1/8 of the MFMAs, not all. */
	bool live_m[AMD_TILES], live_n[AMD_TILES];
	#pragma unroll
	for (unsigned i = 0; i < AMD_TILES; i++) {
		live_m[i] = m0 + wrow + 16 * i < g->m;
		live_n[i] = n0 + wcol + 16 * i < g->n;
	}

	uint32_t nt = (g->k + c->bk - 1) / c->bk;
	struct stage_regs r;
	if (nt > 0) {
		stage_load(c, g, tid, m0, n0, 0, &r);
		stage_store(c, tid, 0, &r);
		barrier();
	}
	for (uint32_t t = 0; t < nt; t++) {
		/* Issue the next stage's global loads first; they are in
		 * flight while this stage's instructions run. */
		if (t + 1 < nt)
			stage_load(c, g, tid, m0, n0, t + 1, &r);
		unsigned base = (t & 1) * amd_lds_stage_bytes(c);
		#pragma unroll
		for (unsigned step = 0; step < c->bk / c->ki; step++) {
			struct frag fa[AMD_TILES], fb[AMD_TILES];
			uint32_t idx[AMD_TILES];
			#pragma unroll
			for (unsigned mi = 0; mi < AMD_TILES; mi++) {
				load_a(c, base, wrow, mi, step, lane, &fa[mi]);
				idx[mi] = c->smfmac ? load_idx(c, base, wrow, mi, lane) : 0;
			}
			#pragma unroll
			for (unsigned ni = 0; ni < AMD_TILES; ni++)
				load_b(c, base, wcol, ni, step, lane, &fb[ni]);
			#pragma unroll
			for (unsigned mi = 0; mi < AMD_TILES; mi++)
				#pragma unroll
				for (unsigned ni = 0; ni < AMD_TILES; ni++)
					if (live_m[mi] && live_n[ni])
						mma(c, &acc[mi][ni], &fa[mi], &fb[ni], idx[mi]);
		}
		if (t + 1 < nt)
			stage_store(c, tid, (t + 1) & 1, &r);
		barrier();
	}

	#pragma unroll
	for (unsigned mi = 0; mi < AMD_TILES; mi++)
		#pragma unroll
		for (unsigned ni = 0; ni < AMD_TILES; ni++)
			#pragma unroll
			for (unsigned q = 0; q < 4; q++) {
				unsigned row, col;
				amd_frag_d(lane, q, &row, &col);
				uint64_t gr = m0 + wrow + 16 * mi + row;
				uint64_t gc = n0 + wcol + 16 * ni + col;
				if (gr < g->m && gc < g->n)
					store_d(c, g, gr, gc, acc[mi][ni][q]);
			}
}

/* One kernel per (element, sparsity); the same names in every arch's
 * code object, each running that arch's instruction. */
#define GEMM_KERNEL(name, elem, sparse)                                 \
	KERNEL void name(struct amd_gemm_args args)                     \
	{                                                               \
		const struct amd_cfg c = amd_cfg_get(ARCH, elem, sparse); \
		gemm(&c, &args);                                        \
	}

GEMM_KERNEL(mfmad_gemm_dense_f16, AMD_E_F16, false)
GEMM_KERNEL(mfmad_gemm_dense_bf16, AMD_E_BF16, false)
GEMM_KERNEL(mfmad_gemm_dense_i8, AMD_E_I8, false)
GEMM_KERNEL(mfmad_gemm_sp24_f16, AMD_E_F16, true)
GEMM_KERNEL(mfmad_gemm_sp24_bf16, AMD_E_BF16, true)
GEMM_KERNEL(mfmad_gemm_sp24_i8, AMD_E_I8, true)
