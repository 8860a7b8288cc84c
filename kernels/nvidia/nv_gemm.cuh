/* The tiled GEMM skeleton, parameterised by a compute policy (one per
 * instruction, nv_policy.cuh) and a tile shape (nv_variants.h).
 *
 * One CTA computes a BM x BN tile of D over a range of K iterations
 * (all of K, or one split of it).  Operands travel global -> shared with
 * cp.async in a STAGES-deep ring: packed A tiles and metadata are copied
 * as contiguous runs, B row by row into swizzled 16-byte chunks, with
 * zero-fill where a B row or column lies outside the matrix.  Shared ->
 * registers: A with one 16-byte load per fragment (the packed layout is
 * already in lane order), B with ldmatrix.  At the end the accumulators
 * go through shared memory (the stages are free by then), so that D is
 * written with coalesced stores (16 bytes a thread where D is aligned for
 * it) and the epilogue code is the same small loop for every tile.  With split-K, each CTA writes its partial tile to
 * a workspace, and the last CTA of a tile to arrive (an atomic counter)
 * adds the others and runs the epilogue, so a split GEMM is still one
 * launch. */
#ifndef MFMA_NV_GEMM_CUH
#define MFMA_NV_GEMM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "mfma_dtype.h"
#include "nv_policy.cuh"

extern __shared__ __align__(128) char nv_smem[];

static __device__ __forceinline__ void nv_cp_async16(unsigned dst, const void *src, unsigned bytes)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

static __device__ __forceinline__ void nv_cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
static __device__ __forceinline__ void nv_cp_async_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <class P, int BM, int BN, int WARPS_M, int WARPS_N, int STAGES>
struct nv_gemm_tile {
	enum {
		THREADS = WARPS_M * WARPS_N * 32,
		WM = BM / WARPS_M,
		WN = BN / WARPS_N,
		MT = WM / 16,
		NT = WN / 8,
		A_ST = NV_A_STAGE_BYTES(BM, P::SPARSE),
		M_ST = NV_META_STAGE_BYTES(BM, P::ESIZE, P::SPARSE),
		B_ST = NV_B_STAGE_BYTES(BN),
		STAGE = A_ST + M_ST + B_ST,
		TPS = A_ST / (BM / 16) / NV_TILE_BYTES, /* A tiles per strip per stage */
		MPS = M_ST / (BM / 16) / NV_META_TILE_BYTES,
		MPS1 = MPS > 0 ? MPS : 1, /* divisor for the (dead) meta loop of dense kinds */
		KSTEPS = TPS,
		CPR = P::ESIZE == 2 ? BN / 8 : 8,
		B_ROWS = P::ESIZE == 2 ? 64 : BN,
		EPI_LD = NV_EPI_LD(BN),
		/* Split-K's sum: a thread's uint4 elements of the tile, and how
		 * many of them it loads at once (bounded for the registers). */
		PER_THREAD = BM * BN / 4 / THREADS,
		GROUP = PER_THREAD < 8 ? PER_THREAD : 8,
	};
	static_assert(WM % 16 == 0 && WN % (8 * P::NBL) == 0, "warp tile");
	static_assert(NV_BK_BYTES / P::ESIZE / P::KSTEP == KSTEPS, "k-steps per stage");
	static_assert(PER_THREAD * THREADS == BM * BN / 4 && PER_THREAD % GROUP == 0, "split-K sum");

	/* Issues the cp.async copies of K iteration `it` into stage `slot`. */
	static __device__ __forceinline__ void load_stage(const nv_gemm_params &p, const char *ga,
							  const char *gm, int n0, int slot, int it,
							  unsigned tid)
	{
		unsigned base = (unsigned)__cvta_generic_to_shared(nv_smem) + slot * STAGE;
		for (int i = tid; i < (BM / 16) * TPS * 32; i += THREADS) {
			int s = i / (TPS * 32), c = i % (TPS * 32);
			const char *src = ga + ((int64_t)s * p.a_ktiles + (int64_t)it * TPS) * NV_TILE_BYTES + c * 16;
			nv_cp_async16(base + s * TPS * NV_TILE_BYTES + c * 16, src, 16);
		}
		if (P::SPARSE) {
			for (int i = tid; i < (BM / 16) * MPS * 8; i += THREADS) {
				int s = i / (MPS1 * 8), c = i % (MPS1 * 8);
				const char *src = gm + ((int64_t)s * p.meta_tiles + (int64_t)it * MPS) * NV_META_TILE_BYTES + c * 16;
				nv_cp_async16(base + A_ST + s * MPS * NV_META_TILE_BYTES + c * 16, src, 16);
			}
		}
		const char *gb = (const char *)p.b;
		for (int i = tid; i < B_ROWS * CPR; i += THREADS) {
			int r = i / CPR, c = i % CPR;
			const char *src;
			bool ok;
			if (P::ESIZE == 2) {
				int k = it * 64 + r, n = n0 + 8 * c;
				ok = k < p.k && n < p.n;
				src = gb + ((int64_t)k * p.ldb + n) * 2;
			} else {
				int n = n0 + r;
				ok = n < p.n;
				src = gb + (int64_t)n * p.ldb + (int64_t)it * NV_BK_BYTES + 16 * c;
			}
			nv_cp_async16(base + A_ST + M_ST + nv_swz(r, c, CPR), ok ? src : gb, ok ? 16 : 0);
		}
	}

	static __device__ __forceinline__ void run(const nv_gemm_params &p)
	{
		const unsigned tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
		const unsigned wm = warp / WARPS_N, wn = warp % WARPS_N;
		const int tile = blockIdx.x, z = blockIdx.z;
		int pm, pn;
		nv_raster(tile, p.tiles_m, p.tiles_n, &pm, &pn);
		const int m0 = pm * BM, n0 = pn * BN;
		const int it0 = z * p.iters_per_split;
		const int it1 = min(p.k_iters, it0 + p.iters_per_split);
		const int n_it = it1 - it0;
		const char *ga = (const char *)p.a + (int64_t)(m0 / 16) * p.a_ktiles * NV_TILE_BYTES;
		const char *gm = (const char *)p.meta + (int64_t)(m0 / 16) * p.meta_tiles * NV_META_TILE_BYTES;

		typename P::acc acc[MT][NT];
#pragma unroll
		for (int i = 0; i < MT; i++)
#pragma unroll
			for (int j = 0; j < NT; j++)
				P::zero(acc[i][j]);

#pragma unroll
		for (int s = 0; s < STAGES - 1; s++) {
			if (s < n_it)
				load_stage(p, ga, gm, n0, s, it0 + s, tid);
			nv_cp_async_commit();
		}

		for (int i = 0; i < n_it; i++) {
			nv_cp_async_wait<STAGES - 2>();
			__syncthreads();
			/* The slot refilled here was consumed in iteration i - 1,
			 * which every thread has finished (barrier above). */
			int nx = i + STAGES - 1;
			if (nx < n_it)
				load_stage(p, ga, gm, n0, nx % STAGES, it0 + nx, tid);
			nv_cp_async_commit();

			const int slot = i % STAGES;
			const char *sa = nv_smem + slot * STAGE;
			const char *sm = sa + A_ST;
			const unsigned sb = (unsigned)__cvta_generic_to_shared(nv_smem) + slot * STAGE + A_ST + M_ST;
#pragma unroll
			for (int ks = 0; ks < KSTEPS; ks++) {
				nv_afrag af[MT];
#pragma unroll
				for (int mt = 0; mt < MT; mt++)
					P::load_a(sa, sm, wm * MT + mt, ks, lane, af[mt]);
				/* B fragments double-buffered: the ldmatrix of the next
				 * n block is issued before the mma of this one. */
				nv_bfrag bf[2];
				P::load_b(sb, BN, ks, wn * WN, lane, bf[0]);
#pragma unroll
				for (int nb = 0; nb < NT / P::NBL; nb++) {
					if (nb + 1 < NT / P::NBL)
						P::load_b(sb, BN, ks, wn * WN + (nb + 1) * 8 * P::NBL, lane,
							  bf[(nb + 1) & 1]);
#pragma unroll
					for (int mt = 0; mt < MT; mt++)
#pragma unroll
						for (int sub = 0; sub < P::NBL; sub++)
							P::mma(acc[mt][nb * P::NBL + sub], af[mt], bf[nb & 1], sub);
				}
			}
		}
		nv_cp_async_wait<0>();
		/* Every warp is done with the stages: the shared memory now
		 * holds the CTA's output tile. */
		__syncthreads();
		uint32_t *out = (uint32_t *)nv_smem;
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int nt = 0; nt < NT; nt++)
				P::store_c(out, EPI_LD, acc[mt][nt], wm * WM + mt * 16, wn * WN + nt * 8, lane);
		__syncthreads();

		if (p.splits > 1 && !reduce_splits(p, out, tile, z, tid))
			return;
		epilogue(p, out, m0, n0, tid);
	}

	/* Split-K: publishes this CTA's partial tile; returns true in the last
	 * CTA of the tile to arrive, with the sum of all partials in `out`. */
	static __device__ __forceinline__ bool reduce_splits(const nv_gemm_params &p, uint32_t *out,
							     int tile, int z, unsigned tid)
	{
		__shared__ unsigned s_last;
		uint4 *ws = (uint4 *)p.ws + (int64_t)tile * p.splits * (BM * BN / 4);
		for (int i = tid; i < BM * BN / 4; i += THREADS) {
			int r = i / (BN / 4), c = 4 * (i % (BN / 4));
			ws[(int64_t)z * (BM * BN / 4) + i] = *(const uint4 *)&out[r * EPI_LD + c];
		}
		__threadfence();
		__syncthreads();
		if (tid == 0) {
			unsigned *cnt = (unsigned *)p.counters + tile;
			unsigned prev = atomicAdd(cnt, 1u);
			s_last = prev == (unsigned)p.splits - 1;
			if (s_last)
				*cnt = 0; /* ready for the next launch */
		}
		__syncthreads();
		if (!s_last)
			return false;
		__threadfence();
		/* The partials are added in split order whichever CTA came last,
		 * so that the result does not depend on timing, and each split's
		 * loads of a group of a thread's elements are issued together
		 * (this CTA's own partial read back like the others): adding one
		 * element's splits in turn waited out an L2 round trip per load,
		 * as the wgmma kernels' sum did (bench/RESULTS.md). */
#pragma unroll 1
		for (int g = 0; g < PER_THREAD; g += GROUP) {
			uint4 v[GROUP];
#pragma unroll
			for (int e = 0; e < GROUP; e++)
				v[e] = __ldcg(&ws[tid + (g + e) * THREADS]);
			for (int zz = 1; zz < p.splits; zz++) {
				uint4 part[GROUP];
#pragma unroll
				for (int e = 0; e < GROUP; e++)
					part[e] = __ldcg(&ws[(int64_t)zz * (BM * BN / 4) + tid + (g + e) * THREADS]);
#pragma unroll
				for (int e = 0; e < GROUP; e++)
					v[e] = add4(v[e], part[e]);
			}
#pragma unroll
			for (int e = 0; e < GROUP; e++) {
				const int i = tid + (g + e) * THREADS, r = i / (BN / 4), c = 4 * (i % (BN / 4));
				*(uint4 *)&out[r * EPI_LD + c] = v[e];
			}
		}
		__syncthreads();
		return true;
	}

	static __device__ __forceinline__ uint32_t add1(uint32_t a, uint32_t b)
	{
		if (P::INT)
			return (uint32_t)((int)a + (int)b);
		return __float_as_uint(__uint_as_float(a) + __uint_as_float(b));
	}

	static __device__ __forceinline__ uint4 add4(uint4 a, uint4 b)
	{
		return make_uint4(add1(a.x, b.x), add1(a.y, b.y), add1(a.z, b.z), add1(a.w, b.w));
	}

	/* Bytes of one element of D: 2 (f16, bf16) or 4 (f32, i32). */
	static __device__ __forceinline__ size_t out_size(const nv_gemm_params &p)
	{
		return p.out_dtype == MFMA_DT_F16 || p.out_dtype == MFMA_DT_BF16 ? 2 : 4;
	}

	/* D = alpha * acc + beta * C from the staging tile.  Where D (and C)
	 * and their row strides allow, 16 bytes a thread a step (8 columns of
	 * a 16-bit D, 4 of a 32-bit one): a quarter to an eighth of the store
	 * instructions of one element a thread; otherwise one element a
	 * thread a step along rows, so that a warp's stores are contiguous. */
	static __device__ __forceinline__ void epilogue(const nv_gemm_params &p, const uint32_t *out, int m0,
							int n0, unsigned tid)
	{
		const size_t os = out_size(p);
		const bool vec = (uintptr_t)p.d % 16 == 0 && (size_t)p.ldd * os % 16 == 0 &&
				 (p.beta == 0.0f || ((uintptr_t)p.c % 16 == 0 && (size_t)p.ldc * os % 16 == 0));
		if (!vec) {
			epilogue_elems(p, out, m0, n0, tid);
			return;
		}
		if (os == 2)
			epilogue_vec<8>(p, out, m0, n0, tid);
		else
			epilogue_vec<4>(p, out, m0, n0, tid);
	}

	/* One element of D from its accumulator word (f32 bits, or an i32
	 * for the integer kinds, which take no alpha): alpha * acc, plus
	 * beta * C[ci] where beta is not 0 and with_c (C read only where D's
	 * element is written), in D's dtype; a 16-bit D in the low half. */
	static __device__ __forceinline__ uint32_t out_elem(const nv_gemm_params &p, uint32_t acc,
							     int64_t ci, bool with_c)
	{
		const bool c = with_c && p.beta != 0.0f;
		if (P::INT)
			return (uint32_t)((int)acc + (c ? ((const int *)p.c)[ci] : 0));
		float x = p.alpha * __uint_as_float(acc);
		switch (p.out_dtype) {
		case MFMA_DT_F16:
			if (c)
				x += p.beta * __half2float(((const __half *)p.c)[ci]);
			return __half_as_ushort(__float2half_rn(x));
		case MFMA_DT_BF16:
			if (c)
				x += p.beta * __bfloat162float(((const __nv_bfloat16 *)p.c)[ci]);
			return __bfloat16_as_ushort(__float2bfloat16_rn(x));
		default:
			if (c)
				x += p.beta * ((const float *)p.c)[ci];
			return __float_as_uint(x);
		}
	}

	/* V columns a thread a step (V x the element size = 16 bytes); a row's
	 * last columns past N element by element. */
	template <int V>
	static __device__ __forceinline__ void epilogue_vec(const nv_gemm_params &p, const uint32_t *out, int m0,
							    int n0, unsigned tid)
	{
		static_assert(BN % V == 0 && EPI_LD % 4 == 0, "16-byte steps of the tile");
		for (int i = tid; i < BM * BN / V; i += THREADS) {
			const int r = i / (BN / V), c = V * (i % (BN / V)), row = m0 + r, col = n0 + c;
			if (row >= p.m || col >= p.n)
				continue;
			const uint32_t *src = &out[r * EPI_LD + c];
			const int64_t di = (int64_t)row * p.ldd + col, ci = (int64_t)row * p.ldc + col;
			const int take = p.n - col < V ? p.n - col : V;
			uint32_t o[V];
#pragma unroll
			for (int e = 0; e < V; e++)
				o[e] = out_elem(p, src[e], ci + e, e < take);
			if (V == 4) {
				/* 32-bit D: f32, or i32 for the integer kinds. */
				if (take == 4) {
					*(uint4 *)((uint32_t *)p.d + di) = make_uint4(o[0], o[1], o[2], o[3]);
					continue;
				}
#pragma unroll
				for (int e = 0; e < V; e++)
					if (e < take)
						((uint32_t *)p.d)[di + e] = o[e];
				continue;
			}
			/* 16-bit D: f16 or bf16 (never for the integer kinds). */
			if (take == V) {
				*(uint4 *)((uint16_t *)p.d + di) =
					make_uint4(o[0] | o[1] << 16, o[2] | o[3] << 16, o[4] | o[5] << 16,
						   o[6] | o[7] << 16);
				continue;
			}
#pragma unroll
			for (int e = 0; e < V; e++)
				if (e < take)
					((uint16_t *)p.d)[di + e] = (uint16_t)o[e];
		}
	}

	static __device__ __forceinline__ void epilogue_elems(const nv_gemm_params &p, const uint32_t *out, int m0,
							int n0, unsigned tid)
	{
		const bool wide = out_size(p) == 4;
		for (int i = tid; i < BM * BN; i += THREADS) {
			const int r = i / BN, c = i % BN, row = m0 + r, col = n0 + c;
			if (row >= p.m || col >= p.n)
				continue;
			const int64_t di = (int64_t)row * p.ldd + col, ci = (int64_t)row * p.ldc + col;
			const uint32_t x = out_elem(p, out[r * EPI_LD + c], ci, true);
			if (wide)
				((uint32_t *)p.d)[di] = x;
			else
				((uint16_t *)p.d)[di] = (uint16_t)x;
		}
	}
};

/* One extern "C" kernel per (policy, tile) so that the host finds it by
 * name with cuModuleGetFunction. */
#define NV_DEFINE_KERNEL(kname, pol, name, bm, bn, wm, wn, st, minb)                        \
	extern "C" __global__ void __launch_bounds__((wm) * (wn) * 32, minb)                 \
		nv_gemm_##kname##_##name(const nv_gemm_params p)                              \
	{                                                                                     \
		nv_gemm_tile<pol, bm, bn, wm, wn, st>::run(p);                                \
	}

#endif
