/* Compute policies: one per tensor-core instruction.  Each has the five
 * functions of the kernel skeleton (zero, load_a, load_b, mma, store_c);
 * the lane <-> element mappings they use are the host-testable functions
 * of nv_layout.h.
 *
 * store_c puts a fragment into the CTA's staging tile in shared memory;
 * the epilogue (nv_gemm.cuh) adds split-K partials, applies alpha, beta
 * and C, converts and writes D with coalesced stores.
 *
 * load_a reads a lane's A fragment (and, for 2:4, its metadata word) from
 * the packed A stage with one 16-byte shared load; load_b reads B with
 * one ldmatrix.x4 (.trans for row-major 16-bit B, plain for the
 * transposed 8-bit B). */
#ifndef MFMA_NV_POLICY_CUH
#define MFMA_NV_POLICY_CUH

#include <stdint.h>

#include "nv_layout.h"

struct nv_afrag {
	uint4 v;    /* registers a0..a3 */
	uint32_t e; /* metadata word (2:4 kinds) */
};

struct nv_bfrag {
	uint32_t r[4];
};

struct nv_accf {
	float x[4];
};

struct nv_acci {
	int x[4];
};

static __device__ __forceinline__ void nv_ldsm_x4(unsigned addr, uint32_t r[4])
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

static __device__ __forceinline__ void nv_ldsm_x4_trans(unsigned addr, uint32_t r[4])
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

static __device__ __forceinline__ void nv_load_a_common(int kind, const char *sa, const char *smeta,
							 unsigned s, unsigned ks, unsigned lane,
							 nv_afrag &a)
{
	a.v = *(const uint4 *)(sa + nv_stage_a_off(nv_kind_sparse(kind), s, ks, lane));
	if (nv_kind_sparse(kind))
		a.e = *(const uint32_t *)(smeta + nv_stage_meta_off(kind, s, ks, lane));
	else
		a.e = 0;
}

/* Writes one m16n8 accumulator fragment into the CTA's staging tile
 * (row-major, ld words per row, 32-bit float or int bits); the shared
 * epilogue takes it from there. */
static __device__ __forceinline__ void nv_stage_acc(uint32_t *tile, int ld, int row0, int col0,
						    unsigned lane, uint32_t x0, uint32_t x1, uint32_t x2,
						    uint32_t x3)
{
	unsigned r, c;
	nv_acc_pos(lane, 0, &r, &c);
	*(uint2 *)&tile[(row0 + (int)r) * ld + col0 + (int)c] = make_uint2(x0, x1);
	nv_acc_pos(lane, 2, &r, &c);
	*(uint2 *)&tile[(row0 + (int)r) * ld + col0 + (int)c] = make_uint2(x2, x3);
}

static __device__ __forceinline__ void nv_stage_accf(uint32_t *tile, int ld, int row0, int col0,
						     unsigned lane, const nv_accf &d)
{
	nv_stage_acc(tile, ld, row0, col0, lane, __float_as_uint(d.x[0]), __float_as_uint(d.x[1]),
		     __float_as_uint(d.x[2]), __float_as_uint(d.x[3]));
}

static __device__ __forceinline__ void nv_stage_acci(uint32_t *tile, int ld, int row0, int col0,
						     unsigned lane, const nv_acci &d)
{
	nv_stage_acc(tile, ld, row0, col0, lane, (uint32_t)d.x[0], (uint32_t)d.x[1], (uint32_t)d.x[2],
		     (uint32_t)d.x[3]);
}

#define NV_MMA_F32(instr)                                                                      \
	asm volatile(instr " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"          \
		     : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3])                  \
		     : "r"(a.v.x), "r"(a.v.y), "r"(a.v.z), "r"(a.v.w), "r"(b.r[2 * sub]),       \
		       "r"(b.r[2 * sub + 1]))

#define NV_MMA_SP_F32(instr)                                                                   \
	asm volatile(instr " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;\n" \
		     : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3])                  \
		     : "r"(a.v.x), "r"(a.v.y), "r"(a.v.z), "r"(a.v.w), "r"(b.r[0]), "r"(b.r[1]), \
		       "r"(b.r[2]), "r"(b.r[3]), "r"(a.e))

struct nv_pol_f16_dense {
	enum { KIND = NV_F16_DENSE, ESIZE = 2, SPARSE = 0, KSTEP = 16, NBL = 2, INT = 0 };
	typedef nv_accf acc;
	static __device__ __forceinline__ void zero(acc &d) { d.x[0] = d.x[1] = d.x[2] = d.x[3] = 0.0f; }
	static __device__ __forceinline__ void load_a(const char *sa, const char *sm, unsigned s,
						      unsigned ks, unsigned lane, nv_afrag &a)
	{
		nv_load_a_common(KIND, sa, sm, s, ks, lane, a);
	}
	static __device__ __forceinline__ void load_b(unsigned sb, unsigned bn, unsigned ks,
						      unsigned n_off, unsigned lane, nv_bfrag &b)
	{
		nv_ldsm_x4_trans(sb + nv_ldm_b_off(KIND, bn, ks, n_off, lane), b.r);
	}
	static __device__ __forceinline__ void mma(acc &d, const nv_afrag &a, const nv_bfrag &b, int sub)
	{
		NV_MMA_F32("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32");
	}
	static __device__ __forceinline__ void store_c(uint32_t *tile, int ld, const acc &d, int row0,
						       int col0, unsigned lane)
	{
		nv_stage_accf(tile, ld, row0, col0, lane, d);
	}
};

struct nv_pol_bf16_dense {
	enum { KIND = NV_BF16_DENSE, ESIZE = 2, SPARSE = 0, KSTEP = 16, NBL = 2, INT = 0 };
	typedef nv_accf acc;
	static __device__ __forceinline__ void zero(acc &d) { d.x[0] = d.x[1] = d.x[2] = d.x[3] = 0.0f; }
	static __device__ __forceinline__ void load_a(const char *sa, const char *sm, unsigned s,
						      unsigned ks, unsigned lane, nv_afrag &a)
	{
		nv_load_a_common(KIND, sa, sm, s, ks, lane, a);
	}
	static __device__ __forceinline__ void load_b(unsigned sb, unsigned bn, unsigned ks,
						      unsigned n_off, unsigned lane, nv_bfrag &b)
	{
		nv_ldsm_x4_trans(sb + nv_ldm_b_off(KIND, bn, ks, n_off, lane), b.r);
	}
	static __device__ __forceinline__ void mma(acc &d, const nv_afrag &a, const nv_bfrag &b, int sub)
	{
		NV_MMA_F32("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
	}
	static __device__ __forceinline__ void store_c(uint32_t *tile, int ld, const acc &d, int row0,
						       int col0, unsigned lane)
	{
		nv_stage_accf(tile, ld, row0, col0, lane, d);
	}
};

struct nv_pol_f16_sparse {
	enum { KIND = NV_F16_SPARSE, ESIZE = 2, SPARSE = 1, KSTEP = 32, NBL = 1, INT = 0 };
	typedef nv_accf acc;
	static __device__ __forceinline__ void zero(acc &d) { d.x[0] = d.x[1] = d.x[2] = d.x[3] = 0.0f; }
	static __device__ __forceinline__ void load_a(const char *sa, const char *sm, unsigned s,
						      unsigned ks, unsigned lane, nv_afrag &a)
	{
		nv_load_a_common(KIND, sa, sm, s, ks, lane, a);
	}
	static __device__ __forceinline__ void load_b(unsigned sb, unsigned bn, unsigned ks,
						      unsigned n_off, unsigned lane, nv_bfrag &b)
	{
		nv_ldsm_x4_trans(sb + nv_ldm_b_off(KIND, bn, ks, n_off, lane), b.r);
	}
	static __device__ __forceinline__ void mma(acc &d, const nv_afrag &a, const nv_bfrag &b, int sub)
	{
		(void)sub;
		NV_MMA_SP_F32("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32");
	}
	static __device__ __forceinline__ void store_c(uint32_t *tile, int ld, const acc &d, int row0,
						       int col0, unsigned lane)
	{
		nv_stage_accf(tile, ld, row0, col0, lane, d);
	}
};

struct nv_pol_bf16_sparse {
	enum { KIND = NV_BF16_SPARSE, ESIZE = 2, SPARSE = 1, KSTEP = 32, NBL = 1, INT = 0 };
	typedef nv_accf acc;
	static __device__ __forceinline__ void zero(acc &d) { d.x[0] = d.x[1] = d.x[2] = d.x[3] = 0.0f; }
	static __device__ __forceinline__ void load_a(const char *sa, const char *sm, unsigned s,
						      unsigned ks, unsigned lane, nv_afrag &a)
	{
		nv_load_a_common(KIND, sa, sm, s, ks, lane, a);
	}
	static __device__ __forceinline__ void load_b(unsigned sb, unsigned bn, unsigned ks,
						      unsigned n_off, unsigned lane, nv_bfrag &b)
	{
		nv_ldsm_x4_trans(sb + nv_ldm_b_off(KIND, bn, ks, n_off, lane), b.r);
	}
	static __device__ __forceinline__ void mma(acc &d, const nv_afrag &a, const nv_bfrag &b, int sub)
	{
		(void)sub;
		NV_MMA_SP_F32("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32");
	}
	static __device__ __forceinline__ void store_c(uint32_t *tile, int ld, const acc &d, int row0,
						       int col0, unsigned lane)
	{
		nv_stage_accf(tile, ld, row0, col0, lane, d);
	}
};

struct nv_pol_s8_dense {
	enum { KIND = NV_S8_DENSE, ESIZE = 1, SPARSE = 0, KSTEP = 32, NBL = 2, INT = 1 };
	typedef nv_acci acc;
	static __device__ __forceinline__ void zero(acc &d) { d.x[0] = d.x[1] = d.x[2] = d.x[3] = 0; }
	static __device__ __forceinline__ void load_a(const char *sa, const char *sm, unsigned s,
						      unsigned ks, unsigned lane, nv_afrag &a)
	{
		nv_load_a_common(KIND, sa, sm, s, ks, lane, a);
	}
	static __device__ __forceinline__ void load_b(unsigned sb, unsigned bn, unsigned ks,
						      unsigned n_off, unsigned lane, nv_bfrag &b)
	{
		nv_ldsm_x4(sb + nv_ldm_b_off(KIND, bn, ks, n_off, lane), b.r);
	}
	static __device__ __forceinline__ void mma(acc &d, const nv_afrag &a, const nv_bfrag &b, int sub)
	{
		asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
			     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
			     : "+r"(d.x[0]), "+r"(d.x[1]), "+r"(d.x[2]), "+r"(d.x[3])
			     : "r"(a.v.x), "r"(a.v.y), "r"(a.v.z), "r"(a.v.w), "r"(b.r[2 * sub]),
			       "r"(b.r[2 * sub + 1]));
	}
	static __device__ __forceinline__ void store_c(uint32_t *tile, int ld, const acc &d, int row0,
						       int col0, unsigned lane)
	{
		nv_stage_acci(tile, ld, row0, col0, lane, d);
	}
};

struct nv_pol_s8_sparse {
	enum { KIND = NV_S8_SPARSE, ESIZE = 1, SPARSE = 1, KSTEP = 64, NBL = 1, INT = 1 };
	typedef nv_acci acc;
	static __device__ __forceinline__ void zero(acc &d) { d.x[0] = d.x[1] = d.x[2] = d.x[3] = 0; }
	static __device__ __forceinline__ void load_a(const char *sa, const char *sm, unsigned s,
						      unsigned ks, unsigned lane, nv_afrag &a)
	{
		nv_load_a_common(KIND, sa, sm, s, ks, lane, a);
	}
	static __device__ __forceinline__ void load_b(unsigned sb, unsigned bn, unsigned ks,
						      unsigned n_off, unsigned lane, nv_bfrag &b)
	{
		nv_ldsm_x4(sb + nv_ldm_b_off(KIND, bn, ks, n_off, lane), b.r);
	}
	static __device__ __forceinline__ void mma(acc &d, const nv_afrag &a, const nv_bfrag &b, int sub)
	{
		(void)sub;
		asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.s32.s8.s8.s32 "
			     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;\n"
			     : "+r"(d.x[0]), "+r"(d.x[1]), "+r"(d.x[2]), "+r"(d.x[3])
			     : "r"(a.v.x), "r"(a.v.y), "r"(a.v.z), "r"(a.v.w), "r"(b.r[0]), "r"(b.r[1]),
			       "r"(b.r[2]), "r"(b.r[3]), "r"(a.e));
	}
	static __device__ __forceinline__ void store_c(uint32_t *tile, int ld, const acc &d, int row0,
						       int col0, unsigned lane)
	{
		nv_stage_acci(tile, ld, row0, col0, lane, d);
	}
};

#endif
