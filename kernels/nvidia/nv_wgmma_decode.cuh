/* sm_90a 2:4 decode GEMM (skinny N, one column tile of BN >= N) with
 * wgmma.mma_async.sp, TMA and mbarriers: D (M x N) = alpha * A (M x K,
 * 2:4, the packed layout of nv_wgmma_layout.h) x B (K x N) + beta * C.
 *
 * An experiment of issue 11, measured on the H200 and NOT faster than the
 * tiled kernels of nv_wgmma.cuh at any decode shape (bench/RESULTS.md), so
 * only bench/nvidia/wgmma_bench.cu builds it.  What it tried:
 *  - row blocks of 64 x CONS rows (CONS consumer warpgroups of 64 rows,
 *    m64nBNk32 each, one producer warp), a ring of about 100 KiB;
 *  - stream-K: the (row block, stage of K) units cut evenly over a
 *    persistent grid (nv_wgd_unit_begin), each CTA walking its range in
 *    order, so that every SM streams the same bytes.  Measured 1.3-1.5x
 *    the tiled kernels' time (1.8 TB/s at 14336 x 16 x 4096), worse with
 *    two CTAs per SM;
 *  - or (p.rows < 64 x CONS) blocks of as few rows as give each SM one,
 *    one CTA per block walking all of K as the tiled kernels' CTAs do:
 *    as fast as the tiled kernels at 14336 x 16 (2.2-2.4 TB/s), so the
 *    20 idle SMs there were not what limits them;
 *  - the weight's TMA copies evict-first, B's evict-last;
 *  - (p.a) the weight as stage images in [tile][stage] order, 128-row
 *    blocks and one 64-K block a stage, so that a CTA's units are one
 *    contiguous run of the weight, read by bulk copies;
 *  - a row block shared by several CTAs finished without a second
 *    kernel: each writes its f32 partial (in register order) to its slot
 *    of the workspace, and the last to arrive (a counter per block, reset
 *    by that CTA) adds them in CTA order, so the sum does not depend on
 *    timing, and runs the epilogue (nv_wg_store).
 * The consumer waits for its wgmma group every stage (as nv_wgmma.cuh
 * does, see KEEP there). */
#ifndef MFMA_NV_WGMMA_DECODE_CUH
#define MFMA_NV_WGMMA_DECODE_CUH

#include "nv_wgmma.cuh"

template <int BF16, int BN, int CONS, int KSUB, int STAGES, int FENCE>
struct nv_wgd_gemm {
	enum {
		NACC = BN / 2,
		BM = NV_WGD_BM(CONS),
		NCONS = 128 * CONS, /* consumer threads */
		B_SWZ_BYTES = BN * 2, /* 32, 64 or 128: the B box is one swizzle span wide */
		B_SWZ_CODE = B_SWZ_BYTES == 128 ? 1 : B_SWZ_BYTES == 64 ? 2 : 3,
		A_BYTES = NV_WGD_A_BYTES(CONS),
		B_BYTES = NV_WG_BK * BN * 2,
		E_BYTES = NV_WGD_E_BYTES(CONS),
		/* A boxes, then B boxes, then metadata: every A and B box on a
		 * 1024-byte boundary (B_BYTES is a multiple of 2048). */
		B_OFF = KSUB * A_BYTES,
		E_OFF = KSUB * (A_BYTES + B_BYTES),
		STAGE = NV_WGD_STAGE_BYTES(BN, CONS, KSUB),
	};
	static_assert(BN == 16 || BN == 32 || BN == 64, "BN");
	static_assert(CONS == 1 || CONS == 2, "CONS");
	static_assert(STAGES > 1, "STAGES");

	static __device__ __forceinline__ void run(const nv_wgd_params &p, char *smem_raw)
	{
		char *smem = (char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
		const uint32_t sbase = nv_wg_smem(smem);
		const uint32_t bars = sbase + STAGES * STAGE; /* full[s] then empty[s] */
		const unsigned tid = threadIdx.x;
		/* Units fit an int (the host checks blocks x ki < 2^31). */
		const int ki = (p.kb + KSUB - 1) / KSUB; /* stages per row block */
		const int rows = p.rows; /* of a block: BM, or fewer so that the blocks fill the GPU */
		const int blocks = (p.m + rows - 1) / rows, units = blocks * ki;
		const int c = blockIdx.x, grid = gridDim.x;
		const int u0 = (int)nv_wgd_unit_begin(c, units, grid), u1 = (int)nv_wgd_unit_begin(c + 1, units, grid);

		if (tid == 0) {
			for (int s = 0; s < STAGES; s++) {
				nv_mbar_init(bars + 8 * s, 1);
				nv_mbar_init(bars + 8 * (STAGES + s), 4 * CONS); /* one arrival per consumer warp */
			}
			asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
		}
		if (tid == NCONS) {
			asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&p.tm_a) : "memory");
			asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&p.tm_b) : "memory");
		}
		__syncthreads();

		if (tid >= NCONS) {
			if (tid != NCONS)
				return;
			/* The producer: one thread, the CTA's units in order. */
			int s = 0;
			uint32_t ph = 0;
			for (int u = u0; u < u1; u++) {
				const int b = u / ki, k0 = (u - b * ki) * KSUB;
				const int nsub = min(KSUB, p.kb - k0);
				nv_mbar_wait(bars + 8 * (STAGES + s), ph ^ 1);
				const uint32_t full = bars + 8 * s, st = sbase + s * STAGE;
				nv_mbar_expect_tx(full, nsub * (rows * (NV_WG_BK / 2 * 2 + 8) + B_BYTES));
				for (int j = 0; j < nsub; j++) {
					const int kb = k0 + j;
					nv_tma_2d(st + B_OFF + j * B_BYTES, &p.tm_b, 0, kb * NV_WG_BK, full,
						  NV_WG_EVICT_LAST);
					if (p.a) {
						/* Stage images, [tile][stage]: unit u is image u. */
						nv_bulk_1d(st, p.a + (int64_t)u * A_BYTES, A_BYTES, full, NV_WG_EVICT_FIRST);
						nv_bulk_1d(st + E_OFF, p.meta + (int64_t)u * E_BYTES, E_BYTES, full,
							   NV_WG_EVICT_FIRST);
						continue;
					}
					nv_tma_2d(st + j * A_BYTES, &p.tm_a, kb * (NV_WG_BK / 2), b * rows, full,
						  NV_WG_EVICT_FIRST);
					nv_bulk_1d(st + E_OFF + j * E_BYTES,
						   p.meta + ((int64_t)kb * p.m_pad + (int64_t)b * rows) * 8, rows * 8,
						   full, NV_WG_EVICT_FIRST);
				}
				if (++s == STAGES) {
					s = 0;
					ph ^= 1;
				}
			}
			return;
		}

		/* The consumer warpgroups: wg owns rows 64 wg .. 64 wg + 63 of the
		 * block. */
		const unsigned wg = tid / 128, w = (tid / 32) % 4, lane = tid & 31, q = lane & 1u;
		const unsigned mrow = 64 * wg + 16 * w + (lane >> 2);
		const uint32_t aoff = wg * 64 * 64; /* 64 rows of 64 bytes per warpgroup */
		float acc[NACC];
		int s = 0;
		uint32_t ph = 0;
		for (int u = u0; u < u1;) {
			const int b = u / ki, ks0 = u - b * ki, ks1 = min(ki, ks0 + (u1 - u));
#pragma unroll
			for (int j = 0; j < NACC; j++)
				acc[j] = 0.0f;
			for (int ks = ks0; ks < ks1; ks++) {
				const int nsub = min(KSUB, p.kb - ks * KSUB);
				nv_mbar_wait(bars + 8 * s, ph);
				const uint32_t st = sbase + s * STAGE;
				const char *e = smem + s * STAGE + E_OFF;
				if (nsub == KSUB) {
					uint32_t e0[KSUB], e1[KSUB];
#pragma unroll
					for (int j = 0; j < KSUB; j++)
						meta_regs(e + j * E_BYTES, mrow, q, &e0[j], &e1[j]);
					nv_wg_fence();
#pragma unroll
					for (int j = 0; j < KSUB; j++)
						mma_sub(acc, st + aoff, st, j, e0[j], e1[j]);
					nv_wg_commit();
					nv_wg_wait<0>();
				} else {
					/* The last stage of a K that is not a multiple of
					 * KSUB blocks. */
					for (int j = 0; j < nsub; j++) {
						uint32_t e0, e1;
						meta_regs(e + j * E_BYTES, mrow, q, &e0, &e1);
						nv_wg_fence();
						mma_sub(acc, st + aoff, st, j, e0, e1);
						nv_wg_commit();
						nv_wg_wait<0>();
					}
				}
				/* FENCE: order this thread's generic-proxy reads of the
				 * stage (the metadata) before the async-proxy writes that
				 * refill it (an experiment: see bench/RESULTS.md). */
				if (FENCE)
					asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
				nv_mbar_arrive_warp(bars + 8 * (STAGES + s), lane);
				if (++s == STAGES) {
					s = 0;
					ph ^= 1;
				}
			}
			const bool whole = ks0 == 0 && ks1 == ki;
			if (whole || finish_block(p, acc, b, ki, units, c, grid, u == u0 ? 0 : 1, tid))
				nv_wg_store<NACC>(p, acc, b * rows + 64 * (int)wg, min(p.m, (b + 1) * rows), 0, w, lane);
			u += ks1 - ks0;
		}
	}

	/* The wgmma.sp registers of one 64-K block (nv_wgmma_layout.h). */
	static __device__ __forceinline__ void meta_regs(const char *e, unsigned mrow, unsigned q, uint32_t *e0,
							 uint32_t *e1)
	{
		const uint2 lo = *(const uint2 *)(e + mrow * 8), hi = *(const uint2 *)(e + (mrow + 8) * 8);
		*e0 = __byte_perm(lo.x, hi.x, q ? 0x7632 : 0x5410);
		*e1 = __byte_perm(lo.y, hi.y, q ? 0x7632 : 0x5410);
	}

	/* The two k32 steps of 64-K block j of the stage at st (sta: where this
	 * warpgroup's rows of A start). */
	static __device__ __forceinline__ void mma_sub(float *acc, uint32_t sta, uint32_t st, int j, uint32_t e0,
						       uint32_t e1)
	{
		const uint32_t a0 = sta + j * A_BYTES, b0 = st + B_OFF + j * B_BYTES;
		nv_wgsp<BF16, BN, 0, 1>(acc, nv_wg_desc(a0, 16, 512, 2),
					nv_wg_desc(b0, B_BYTES, 8 * B_SWZ_BYTES, B_SWZ_CODE), e0);
		nv_wgsp<BF16, BN, 0, 1>(acc, nv_wg_desc(a0 + 32, 16, 512, 2),
					nv_wg_desc(b0 + 32 * B_SWZ_BYTES, B_BYTES, 8 * B_SWZ_BYTES, B_SWZ_CODE), e1);
	}

	/* A row block shared with other CTAs: leaves this CTA's partial in
	 * its slot; true in the last of the block's CTAs to arrive, with the
	 * sum of all of them (in CTA order) in acc. */
	static __device__ __forceinline__ bool finish_block(const nv_wgd_params &p, float *acc, int b, int ki,
							    int units, int c, int grid, int slot, unsigned tid)
	{
		__shared__ unsigned s_last;
		float *ws = (float *)p.ws;
		int64_t c0, c1;
		nv_wgd_block_ctas(b, ki, units, grid, &c0, &c1);
#pragma unroll
		for (int j = 0; j < NACC; j++)
			__stcg(&ws[(((int64_t)c * 2 + slot) * NACC + j) * NCONS + tid], acc[j]);
		__threadfence();
		asm volatile("bar.sync 1, %0;\n" ::"n"((int)NCONS) : "memory");
		if (tid == 0) {
			unsigned *cnt = (unsigned *)p.counters + b;
			const unsigned prev = atomicAdd(cnt, 1u);
			s_last = prev == (unsigned)(c1 - c0);
			if (s_last)
				*cnt = 0; /* ready for the next launch */
		}
		asm volatile("bar.sync 1, %0;\n" ::"n"((int)NCONS) : "memory");
		/* The next shared block's tid 0 writes s_last only after a
		 * barrier that every thread reaches after this read. */
		if (!s_last)
			return false;
		__threadfence();
		/* CTA by CTA, each one's NACC loads issued together: the same
		 * sums in the same order as adding each accumulator's CTAs in
		 * turn, which waited out an L2 round trip per load. */
		float v[NACC];
#pragma unroll
		for (int j = 0; j < NACC; j++)
			v[j] = 0.0f;
		for (int cc = (int)c0; cc <= (int)c1; cc++) {
			/* A block's first CTA holds it as its last block (slot 1)
			 * unless the block is also where that CTA begins. */
			const int sl = nv_wgd_unit_begin(cc, units, grid) / ki == b ? 0 : 1;
			float part[NACC];
#pragma unroll
			for (int j = 0; j < NACC; j++)
				part[j] = cc == c ? acc[j] : __ldcg(&ws[(((int64_t)cc * 2 + sl) * NACC + j) * NCONS + tid]);
#pragma unroll
			for (int j = 0; j < NACC; j++)
				v[j] += part[j];
		}
#pragma unroll
		for (int j = 0; j < NACC; j++)
			acc[j] = v[j];
		return true;
	}
};

#define NV_WGD_DEFINE_KERNEL(name, bf16, bn, cons, ksub, stages, minb, fence)                    \
	extern "C" __global__ void __launch_bounds__(NV_WGD_THREADS(cons), minb)                   \
		nv_wgd_##name(const __grid_constant__ nv_wgd_params p)                             \
	{                                                                                          \
		extern __shared__ __align__(1024) char nv_wgd_smem_raw[];                          \
		nv_wgd_gemm<bf16, bn, cons, ksub, stages, fence>::run(p, nv_wgd_smem_raw);         \
	}

#endif
