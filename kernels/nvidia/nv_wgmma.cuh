/* sm_90a 2:4 GEMM with wgmma.mma_async.sp, TMA and mbarriers, warp
 * specialised: D (M x N) = alpha * A (M x K, 2:4) x B (K x N) + beta * C.
 *
 * A CTA of 384 threads computes a 128 x BN tile of D.  Warpgroup 0 is the
 * producer: one thread issues, per stage of NV_WG_BK = 64 dense K, a
 * bulk copy of the compressed A slab (128 rows x 32 values, stored in
 * global memory as the 64-byte-swizzled image the stage needs; a TMA
 * load from row-major values in wgmma_bench's variants), a bulk copy of
 * the stage's metadata (1 KiB, nv_wgmma_layout.h) and TMA
 * loads of B (64 K rows x BN columns, in boxes of up to 64 columns with
 * the swizzle that matches their row width), all completing on the
 * stage's `full` mbarrier.  Warpgroups 1 and 2 are the consumers, each
 * owning 64 rows: they wait on `full`, build their metadata registers
 * from the stage's words (two 8-byte shared loads and one byte permute
 * per k32 step), issue two wgmma.sp m64nBNk32 and release the stage on its
 * `empty` mbarrier once the instructions that read it are complete.  The
 * ring is STAGES deep.  With setmaxnreg the producer gives its registers
 * to the consumers (one CTA per SM, wide tiles); the skinny tiles run two
 * CTAs per SM instead and keep the compiler's allocation.
 *
 * KEEP = 1 keeps one wgmma group in flight: the stage of iteration i - 1
 * is released after `wgmma.wait_group 1` in iteration i, and the
 * metadata registers of the group in flight are kept alive until that
 * wait (an empty asm that reads them).  Measured on the H200 it is WRONG
 * (relative error 0.5-0.7 with the 64 x 256 tiles every time, 1e-2
 * intermittently with the others): the PTX says nothing about when
 * wgmma.sp reads sp-meta, and ptxas is free to give the next stage's
 * words the registers of the group in flight (an empty asm does not pin a
 * physical register: it reaches ptxas as no instruction at all, so the
 * metadata's last use ptxas sees is the wgmma's issue; and a real use
 * placed after the wait cannot be ordered there by anything but an
 * accumulator, whose read would serialise the groups).  Built with
 * KEEP = 1, the 64 x 256 tile also gets ptxas's C7515 (wgmma serialised),
 * the 64 x 128 and 64 x 64 ones do not.  The SASS of KEEP = 1 at 64 x 128
 * (wgmma_bench's keep_f16_n128, cuobjdump on the H200) shows it: the two
 * PRMTs at the top of each iteration write the same two registers the
 * HGMMA.SP group still in flight (WARPGROUP.DEPBAR.LE gsb0, 0x1) was
 * given.  KEEP = 2 (wgmma_bench's k2_ kernels) does it right: the
 * stages use two sets of metadata registers in turn, and each set is
 * pinned by a shared store under a predicate false at run time, placed
 * after the wait that completes its group (nv_wg_pin_meta), so ptxas
 * cannot give the next stage's words those registers (the SASS on the
 * H200: HGMMA.SP on R58/R59 and R56/R57 in turn, WARPGROUP.DEPBAR.LE
 * gsb0, 0x1 after each, as cuSPARSELt's kernel has it).  Correct, and
 * measured within the noise of KEEP = 0 at every tile and split
 * (bench/RESULTS.md), as GRP (below) foretold: the daemon's kernels wait
 * for every group each stage (KEEP = 0), as CUTLASS's sparse mainloop
 * does.
 *
 * The dense kernels (nv_wg_dense below) are the same kernel with another
 * compute policy: A (128 rows x 64 K a stage, 128-byte swizzle) comes by
 * TMA like B, no metadata, four wgmma m64nBNk16 per stage.  They keep one
 * wgmma group in flight (KEEP = 1): with no metadata registers the only
 * thing the group in flight reads is shared memory, whose stage is
 * released after `wgmma.wait_group 1` in the next iteration, as CUTLASS's
 * dense mainloop does.
 *
 * Split-K (gridDim.z > 1): every CTA of a tile writes its f32 partial
 * tile to the workspace, in its threads' register order; the last CTA of
 * the tile to arrive (an atomic counter, reset by that CTA) adds the
 * partials in split order, so the result does not depend on timing, and
 * runs the epilogue.  The epilogue writes D straight from the
 * accumulator registers (alpha, beta * C, conversion to the output
 * dtype), a pair of adjacent columns a store where D is aligned for it;
 * it is not overlapped with the next tile (no persistence yet).
 *
 * CL = 2 (wgmma_bench's cl2_ kernels only, launched in clusters of two
 * CTAs along M, which share n0): each CTA loads every other box of B's
 * stage and multicasts it to both, so that B is read from L2 once a pair;
 * a stage's `empty` barrier then also counts one arrival per consumer
 * warp of the other CTA (made remotely), since both producers write it,
 * and the pair meets at a cluster barrier after the barriers' init and
 * again after the main loop, past which neither writes into the other.
 * Correct, and measured on the H200 no faster than CL = 1 (-4% to +18%,
 * bench/RESULTS.md): halving B's L2 reads does not speed the kernels
 * up (nor, GRP below found, does waiting for the wgmma pipeline less
 * often).  The daemon's kernels are built with CL = 1.
 *
 * GRP > 1 (wgmma_bench's g2_/g4_ kernels only, 2:4): the consumers wait
 * for GRP stages, build all their metadata registers, then issue the GRP
 * stages' wgmma.sp as one group, wait for it and release the GRP stages:
 * one drain of the wgmma pipeline per GRP stages instead of one a stage,
 * while no metadata register is written with a group in flight (the
 * hazard of KEEP = 1).  A K range of a count not a multiple of GRP ends
 * with single stages.  Correct, and measured on the H200 within 2% of
 * GRP = 1 at the tile and split the plan picks (16% slower at 8192^3 on
 * 64 x 256, where the group waits for its second stage before issuing
 * the first): the per-stage wait is not what bounds these kernels.  The
 * daemon's kernels are built with GRP = 1.
 *
 * CSUM = 1 (wgmma_bench's cs_ kernels only, launched in clusters of all
 * of a tile's splits): the split-K sum through the cluster's shared
 * memory instead of the workspace and the counter (cluster_sum below).
 * Correct (checks at splits 2-8, memcheck and racecheck clean), and
 * measured on the H200 no faster at any split (within about 1 us at 2
 * and 3 splits; 3-13 us slower at 4 and 8, mostly where the GPU cannot
 * hold every cluster at once, and much slower on the one-CTA-an-SM n128
 * tile; bench/RESULTS.md): the workspace's sum is not what the skinny
 * tiles' tail waits on.  The daemon's kernels are built with CSUM = 0.
 *
 * The gate (nv_wg_params.gate): a launch made before B is on the device.
 * The producer issues the first ring of stages' A (each stage's barrier
 * expecting A and B from the start), prefetches gate_l2 more stages of A
 * into L2, waits for the gate word to reach its count, then issues those
 * stages' B and goes on as usual; the consumers see nothing different.
 *
 * Programmatic dependent launch (nv_wg_params.pdl): the same first ring
 * and prefetch while the previous kernel on the stream may still run
 * (A and its metadata are a resident weight that no kernel writes); the
 * producer of B and the consumers wait for that kernel's end
 * (griddepcontrol.wait) before B, C, D or the split-K workspace. */
#ifndef MFMA_NV_WGMMA_CUH
#define MFMA_NV_WGMMA_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "mfma_dtype.h"
#include "nv_wgmma_layout.h"
#include "nv_wgmma_ops.cuh"

/* ---- PTX wrappers ---- */

static __device__ __forceinline__ uint32_t nv_wg_smem(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void nv_mbar_init(uint32_t bar, uint32_t count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

static __device__ __forceinline__ void nv_mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
		     : "memory");
}

static __device__ __forceinline__ void nv_mbar_arrive(uint32_t bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* One arrival for the whole warp: __syncwarp orders every lane's reads
 * of the stage before lane 0's release, so the refill that waits on the
 * barrier cannot overtake them (without it the PTX model orders only
 * lane 0's own reads).  compute-sanitizer's racecheck reports the other
 * lanes' reads against the refill even so (wgmma_bench raceprobe, modes 3
 * and 4): kernels whose threads read a stage with plain loads have every
 * thread arrive instead (nv_wg_gemm's ALL). */
static __device__ __forceinline__ void nv_mbar_arrive_warp(uint32_t bar, unsigned lane)
{
	__syncwarp();
	if (lane == 0)
		nv_mbar_arrive(bar);
}

static __device__ __forceinline__ void nv_mbar_wait(uint32_t bar, uint32_t parity)
{
	uint32_t ok;
	do {
		asm volatile("{\n.reg .pred p;\n"
			     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
			     "selp.u32 %0, 1, 0, p;\n}\n"
			     : "=r"(ok)
			     : "r"(bar), "r"(parity)
			     : "memory");
	} while (!ok);
}

/* The GPU's global timer (ns) and the SM this thread runs on: the trace
 * of nv_wg_gemm's TRACE kernels. */
static __device__ __forceinline__ uint64_t nv_globaltimer(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

static __device__ __forceinline__ unsigned nv_smid(void)
{
	unsigned sm;
	asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
	return sm;
}

/* Cache hints (CUTLASS CacheHintSm90): the weight is read once per
 * column of tiles, B by every row of tiles. */
#define NV_WG_EVICT_FIRST 0x12F0000000000000ull
#define NV_WG_EVICT_LAST 0x14F0000000000000ull

/* The weight's hint at stage it: evict-last for the stages a hot weight
 * keeps in L2 (nv_wg_params.keep_iters), else evict-first. */
static __device__ __forceinline__ uint64_t nv_wg_a_policy(const nv_wg_params &p, int it)
{
	return it < p.keep_iters ? NV_WG_EVICT_LAST : NV_WG_EVICT_FIRST;
}

static __device__ __forceinline__ void nv_tma_2d(uint32_t dst, const CUtensorMap *tm, int c0, int c1,
						 uint32_t bar, uint64_t policy)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
		     " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
		     "l"((uint64_t)tm), "r"(c0), "r"(c1), "r"(bar), "l"(policy)
		     : "memory");
}

/* The same load multicast: the box lands at offset dst of every CTA of
 * the cluster in mask, each CTA's barrier at offset bar counting its
 * bytes. */
static __device__ __forceinline__ void nv_tma_2d_mc(uint32_t dst, const CUtensorMap *tm, int c0, int c1,
						    uint32_t bar, uint16_t mask, uint64_t policy)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
		     ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5, %6;\n" ::"r"(dst),
		     "l"((uint64_t)tm), "r"(c0), "r"(c1), "r"(bar), "h"(mask), "l"(policy)
		     : "memory");
}

/* This CTA's rank in its cluster. */
static __device__ __forceinline__ unsigned nv_cluster_rank(void)
{
	unsigned r;
	asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
	return r;
}

/* The count of CTAs in this CTA's cluster (1 when not launched as one). */
static __device__ __forceinline__ unsigned nv_cluster_size(void)
{
	unsigned n;
	asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
	return n;
}

/* The shared address addr of this CTA as the address of the same offset
 * in CTA rank's shared memory. */
static __device__ __forceinline__ uint32_t nv_mapa(uint32_t addr, unsigned rank)
{
	uint32_t r;
	asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
	return r;
}

/* An arrival on the barrier at offset bar of CTA rank's shared memory,
 * with the default semantics (release at CTA scope), as CUTLASS's
 * ClusterBarrier::arrive: what the arrival announces, that this warp's
 * wgmma reads of the stage are over, wgmma.wait_group has already made
 * true.  A release at cluster scope made every consumer wait out a
 * cluster-wide fence each stage (the first build: 1.7-2.3x slower). */
static __device__ __forceinline__ void nv_mbar_arrive_remote(uint32_t bar, unsigned rank)
{
	asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(nv_mapa(bar, rank)) : "memory");
}

/* The cluster-wide barrier in two halves: the arrival (release: this
 * thread's shared stores before it are seen by the cluster's loads after
 * the wait), and the wait (acquire), with work between them; every
 * thread of the cluster that has not exited takes part. */
static __device__ __forceinline__ void nv_cluster_arrive(void)
{
	asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
}

static __device__ __forceinline__ void nv_cluster_wait(void)
{
	asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}

/* The whole barrier: arrive and wait. */
static __device__ __forceinline__ void nv_cluster_sync(void)
{
	nv_cluster_arrive();
	nv_cluster_wait();
}

/* Two floats from a cluster shared address (nv_mapa).  Volatile, with
 * the memory clobber: the compiler may move neither it above the barrier
 * that made the memory ready nor below the arrival that lets its owner
 * go (ptxas still overlaps loads that do not depend on each other). */
static __device__ __forceinline__ float2 nv_ld_cluster_f2(uint32_t addr)
{
	float2 v;
	asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
	return v;
}

static __device__ __forceinline__ void nv_st_shared_f2(uint32_t addr, float x, float y)
{
	asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

static __device__ __forceinline__ void nv_bulk_1d(uint32_t dst, uint64_t src, uint32_t bytes, uint32_t bar,
						  uint64_t policy)
{
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
		     " [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
		     "l"(src), "r"(bytes), "r"(bar), "l"(policy)
		     : "memory");
}

/* Into L2 only, no shared memory, no barrier: a 1-D range (a multiple
 * of 16 bytes) and a 2-D box of a tensor map. */
static __device__ __forceinline__ void nv_l2_prefetch(uint64_t src, uint32_t bytes)
{
	asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void nv_l2_prefetch_2d(const CUtensorMap *tm, int c0, int c1)
{
	asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global [%0, {%1, %2}];\n" ::"l"((uint64_t)tm), "r"(c0),
		     "r"(c1)
		     : "memory");
}

/* The gate of nv_wg_params: waits until the word at gate reaches seq
 * (a wrapping count), then orders the TMA loads that follow (async
 * proxy) after what the acquire saw.  The word is set by a stream
 * memory operation after B's copy; if it never comes (the copy faulted,
 * the context is lost anyway) the kernel traps after two seconds
 * rather than hang the device. */
static __device__ __forceinline__ void nv_gate_wait(uint64_t gate, uint32_t seq)
{
	const uint64_t t0 = nv_globaltimer();
	for (;;) {
		uint32_t v;
		asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(gate) : "memory");
		if ((int32_t)(v - seq) >= 0)
			break;
		if (nv_globaltimer() - t0 > 2000000000ull)
			__trap();
		__nanosleep(32);
	}
	asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

/* Programmatic dependent launch (nv_wg_params.pdl): the kernel may start
 * while the previous kernel on its stream still runs.  The wait returns
 * once that kernel has ended and its writes are visible (at once without
 * one); what follows it may read B and C and write D, the workspace and
 * the counters.  The trigger lets the next launch on the stream start
 * once every CTA of this one has issued it (one thread's is the CTA's):
 * the kernels issue it when a CTA's producer has issued its last load of
 * A, so that the next launch streams its weight during this one's tail
 * (the ring's last stages, the split-K sum, the epilogue) rather than
 * beside its main loop (a trigger at the kernel's start measured within
 * about 1 us of this, either way, on the H200: bench/RESULTS.md). */
static __device__ __forceinline__ void nv_pdl_wait(void)
{
	asm volatile("griddepcontrol.wait;\n" ::: "memory");
	asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
static __device__ __forceinline__ void nv_pdl_trigger(void)
{
	asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

static __device__ __forceinline__ void nv_wg_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void nv_wg_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
static __device__ __forceinline__ void nv_wg_wait(void)
{
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

static __device__ __forceinline__ uint2 nv_lds_v2(uint32_t addr)
{
	uint2 v;
	asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
	return v;
}

/* A use of a wgmma.sp group's metadata registers that ptxas can neither
 * drop nor move above the wgmma.wait_group before it (KEEP = 2): a shared
 * store under a predicate false at run time (never = p.m < 0, which no
 * launch has, but ptxas cannot know), so the registers hold those values,
 * and no later stage's, until the group is complete.  An empty asm that
 * names them reaches ptxas as no instruction at all (KEEP = 1). */
static __device__ __forceinline__ void nv_wg_pin_meta(const uint32_t e[2], int never, uint32_t dst)
{
	asm volatile("{\n\t.reg .pred q;\n\tsetp.lt.s32 q, %2, 0;\n\t@q st.shared.v2.b32 [%3], {%0, %1};\n}\n" ::"r"(e[0]),
		     "r"(e[1]), "r"(never), "r"(dst)
		     : "memory");
}

/* Shared-memory matrix descriptor (PTX 9.7.15.5.1.2.2): start, LBO and
 * SBO in 16-byte units, swizzle code 1 = 128B, 2 = 64B, 3 = 32B (the
 * reverse of CUtensorMapSwizzle's numbering). */
static __device__ __forceinline__ uint64_t nv_wg_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo, uint32_t swz)
{
	return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)((lbo & 0x3FFFF) >> 4) << 16 |
	       (uint64_t)((sbo & 0x3FFFF) >> 4) << 32 | (uint64_t)swz << 62;
}

template <int BF16, int N, int SEL, int TB>
static __device__ __forceinline__ void nv_wgsp(float *d, uint64_t da, uint64_t db, uint32_t e)
{
#define NV_WGSP_CASE(n)                                            \
	if constexpr (N == n) {                                    \
		if constexpr (BF16)                                \
			nv_wgsp_bf16_n##n<SEL, TB>(d, da, db, e);  \
		else                                               \
			nv_wgsp_f16_n##n<SEL, TB>(d, da, db, e);   \
	}
	NV_WGSP_CASE(16)
	NV_WGSP_CASE(32)
	NV_WGSP_CASE(64)
	NV_WGSP_CASE(128)
	NV_WGSP_CASE(256)
#undef NV_WGSP_CASE
}

template <int BF16, int N, int TB>
static __device__ __forceinline__ void nv_wgmma(float *d, uint64_t da, uint64_t db)
{
#define NV_WGMMA_CASE(n)                                   \
	if constexpr (N == n) {                            \
		if constexpr (BF16)                        \
			nv_wgmma_bf16_n##n<TB>(d, da, db); \
		else                                       \
			nv_wgmma_f16_n##n<TB>(d, da, db);  \
	}
	NV_WGMMA_CASE(16)
	NV_WGMMA_CASE(32)
	NV_WGMMA_CASE(64)
	NV_WGMMA_CASE(128)
	NV_WGMMA_CASE(256)
#undef NV_WGMMA_CASE
}

/* Two adjacent output elements as one store (and C's as one load): the
 * pair type of each output type, converted as the scalar casts do (round
 * to nearest even). */
template <class T>
struct nv_wg_pair;
template <>
struct nv_wg_pair<__half> {
	typedef __half2 V;
	static __device__ __forceinline__ V make(float a, float b) { return __floats2half2_rn(a, b); }
	static __device__ __forceinline__ float2 load(const __half *p) { return __half22float2(*(const V *)p); }
};
template <>
struct nv_wg_pair<__nv_bfloat16> {
	typedef __nv_bfloat162 V;
	static __device__ __forceinline__ V make(float a, float b) { return __floats2bfloat162_rn(a, b); }
	static __device__ __forceinline__ float2 load(const __nv_bfloat16 *p)
	{
		return __bfloat1622float2(*(const V *)p);
	}
};
template <>
struct nv_wg_pair<float> {
	typedef float2 V;
	static __device__ __forceinline__ V make(float a, float b) { return make_float2(a, b); }
	static __device__ __forceinline__ float2 load(const float *p) { return *(const V *)p; }
};

/* D = alpha * acc + beta * C from the accumulator registers of one
 * m64nN wgmma (each thread holds pairs of adjacent columns, the first at
 * an even column), rows from row0 up to (not including) row_end, columns
 * from n0; T is the output element type.  Where D (and C) and their row
 * strides keep every pair aligned, a pair is one store (one load of C):
 * half the store instructions of element by element, which a warp's 8
 * rows x 8 columns per accumulator pair made many and narrow.  P is any of
 * the kernels' parameter structs (they share the output fields). */
template <class T, int NACC, class P>
static __device__ __forceinline__ void nv_wg_store_t(const P &p, const float *acc, int row0, int row_end, int n0,
						      unsigned w, unsigned lane, unsigned pair0, unsigned pairs)
{
	typedef nv_wg_pair<T> pair;
	T *d = (T *)p.d;
	const T *cc = (const T *)p.c;
	const bool beta = p.beta != 0.0f;
	const bool vec = (uintptr_t)d % sizeof(typename pair::V) == 0 && p.ldd % 2 == 0 &&
			 (!beta || ((uintptr_t)cc % sizeof(typename pair::V) == 0 && p.ldc % 2 == 0));
#pragma unroll
	for (int i = 0; i < NACC; i += 2) {
		if ((unsigned)i / 2 % pairs != pair0)
			continue;
		unsigned r, col;
		nv_wg_acc_pos(w, lane, i, &r, &col);
		const int row = row0 + (int)r, cn = n0 + (int)col;
		if (row >= row_end || cn >= p.n)
			continue;
		const int64_t di = (int64_t)row * p.ldd + cn, ci = (int64_t)row * p.ldc + cn;
		float x0 = p.alpha * acc[i], x1 = p.alpha * acc[i + 1];
		if (vec && cn + 1 < p.n) {
			if (beta) {
				const float2 c2 = pair::load(cc + ci);
				x0 += p.beta * c2.x;
				x1 += p.beta * c2.y;
			}
			*(typename pair::V *)(d + di) = pair::make(x0, x1);
			continue;
		}
		if (beta)
			x0 += p.beta * (float)cc[ci];
		d[di] = (T)x0;
		if (cn + 1 < p.n) {
			if (beta)
				x1 += p.beta * (float)cc[ci + 1];
			d[di + 1] = (T)x1;
		}
	}
}

/* pair0, pairs: only the accumulator pairs j (acc[2j], acc[2j + 1]) with
 * j % pairs == pair0 (a cluster's share of the tile; 0, 1: all). */
template <int NACC, class P>
static __device__ __forceinline__ void nv_wg_store(const P &p, const float *acc, int row0, int row_end, int n0,
						    unsigned w, unsigned lane, unsigned pair0 = 0, unsigned pairs = 1)
{
	if (p.out_dtype == MFMA_DT_F16)
		nv_wg_store_t<__half, NACC>(p, acc, row0, row_end, n0, w, lane, pair0, pairs);
	else if (p.out_dtype == MFMA_DT_BF16)
		nv_wg_store_t<__nv_bfloat16, NACC>(p, acc, row0, row_end, n0, w, lane, pair0, pairs);
	else
		nv_wg_store_t<float, NACC>(p, acc, row0, row_end, n0, w, lane, pair0, pairs);
}

/* runs runs of run bytes each, ld bytes apart, from src to dst in pieces
 * of U (run and every address a multiple of its size) by nthr threads,
 * thread t of them, consecutive threads on consecutive pieces so that a
 * warp writes one stretch of bytes; src read from L2. */
template <class U>
static __device__ __forceinline__ void nv_copy_runs(uint64_t dst, uint64_t src, uint64_t run, uint64_t runs,
						    uint64_t ld, unsigned t, unsigned nthr)
{
	const uint64_t u = run / sizeof(U);
	for (uint64_t i = t; i < u * runs; i += nthr) {
		const uint64_t o = i / u * ld + i % u * sizeof(U);
		*(U *)(dst + o) = __ldcg((const U *)(src + o));
	}
}

/* The tile of D at (row0, n0), bm x bn clipped to m x n, copied from d
 * (on the device, just written by this CTA) to dh (mapped host memory) by
 * nthr threads, thread t of them: in 16-byte pieces where D's rows and
 * the tile's columns allow, else 4- or 2-byte ones. */
template <class P>
static __device__ __forceinline__ void nv_wg_tile_out(const P &p, int row0, int bm, int n0, int bn, unsigned t,
						      unsigned nthr)
{
	const int os = p.out_dtype == MFMA_DT_F32 ? 4 : 2;
	const int rows = min(bm, p.m - row0), cols = min(bn, p.n - n0);
	if (rows <= 0 || cols <= 0)
		return;
	const uint64_t rb = (uint64_t)cols * os, ld = (uint64_t)p.ldd * os;
	const uint64_t src = p.d + (uint64_t)row0 * ld + (uint64_t)n0 * os;
	const uint64_t dst = p.dh + (uint64_t)row0 * ld + (uint64_t)n0 * os;
	const uint64_t any = src | dst | rb | ld;
	/* Whole rows that follow each other (the tile spans D's width): one
	 * run of rows x rb bytes. */
	const bool one = rb == ld;
	const uint64_t run = one ? rb * rows : rb, runs = one ? 1 : rows;
	if (any % 16 == 0)
		nv_copy_runs<uint4>(dst, src, run, runs, ld, t, nthr);
	else if (any % 4 == 0)
		nv_copy_runs<unsigned int>(dst, src, run, runs, ld, t, nthr);
	else
		nv_copy_runs<unsigned short>(dst, src, run, runs, ld, t, nthr);
}

/* ---- compute policies: one per instruction ---- */

/* What of a stage a load issues: A's values, A's metadata (2:4), B; a
 * policy's load_a takes the first two. */
enum { NV_WG_LOAD_VALUES = 1, NV_WG_LOAD_META = 2, NV_WG_LOAD_A = 3, NV_WG_LOAD_B = 4, NV_WG_LOAD_ALL = 7 };

/* B's shared-memory tile of a BN-column kernel: 64 K rows in boxes of up
 * to 64 columns, each with the swizzle that matches its row width. */
template <int BN>
struct nv_wg_bsmem {
	enum {
		BNB = BN < 64 ? BN : 64,          /* B box width (columns) */
		SWZ_BYTES = BNB * 2,              /* 32, 64 or 128 */
		SWZ_CODE = SWZ_BYTES == 128 ? 1 : SWZ_BYTES == 64 ? 2 : 3,
		BOX_BYTES = NV_WG_BK * SWZ_BYTES,
		BYTES = NV_WG_BK * BN * 2,
	};
	/* The descriptor of B from K row `row` of the stage (a multiple of 8). */
	static __device__ __forceinline__ uint64_t desc(uint32_t b0, int row)
	{
		return nv_wg_desc(b0 + row * SWZ_BYTES, BOX_BYTES, 8 * SWZ_BYTES, SWZ_CODE);
	}
};

/* 2:4 A (wgmma.mma_async.sp m64nNk32).  ORDER (enum nv_wg_order) an
 * image order: A's stage images (nv_wgmma_layout.h) by one bulk copy of
 * 8 KiB; NV_WG_ROWMAJOR: the row-major values by TMA (64-byte swizzle),
 * 64 bytes of each of 128 rows.  Either way the stage's metadata (1 KiB)
 * by one bulk copy after B. */
template <int BF16, int ORDER>
struct nv_wg_sp24 {
	enum { DENSE = 0, A_BYTES = NV_WG_A_BYTES, E_BYTES = NV_WG_E_BYTES };
	static constexpr unsigned stage_bytes(int bn) { return NV_WG_STAGE_BYTES(bn); }

	/* parts: NV_WG_LOAD_VALUES, NV_WG_LOAD_META or both (the default). */
	static __device__ __forceinline__ void load_a(const nv_wg_params &p, uint32_t st, uint32_t full, int it,
						      int m0, uint32_t b_bytes, unsigned parts = NV_WG_LOAD_A)
	{
		const struct nv_wg_img g = { p.k_iters, p.m_pad / NV_WG_BM, ORDER };
		const int64_t ts = nv_wg_img_index(g, m0 / NV_WG_BM, it);
		const uint64_t pol = nv_wg_a_policy(p, it);
		if (parts & NV_WG_LOAD_VALUES) {
			if (ORDER)
				nv_bulk_1d(st, p.a + ts * A_BYTES, A_BYTES, full, pol);
			else
				nv_tma_2d(st, &p.tm_a, it * (NV_WG_BK / 2), m0, full, pol);
		}
		if (parts & NV_WG_LOAD_META)
			nv_bulk_1d(st + A_BYTES + b_bytes, p.meta + ts * E_BYTES, E_BYTES, full, pol);
	}

	/* Stage it's A and metadata into L2 (the gate's wait). */
	static __device__ __forceinline__ void prefetch_a(const nv_wg_params &p, int it, int m0)
	{
		const struct nv_wg_img g = { p.k_iters, p.m_pad / NV_WG_BM, ORDER };
		const int64_t ts = nv_wg_img_index(g, m0 / NV_WG_BM, it);
		if (ORDER)
			nv_l2_prefetch(p.a + ts * A_BYTES, A_BYTES);
		else
			nv_l2_prefetch_2d(&p.tm_a, it * (NV_WG_BK / 2), m0);
		nv_l2_prefetch(p.meta + ts * E_BYTES, E_BYTES);
	}

	/* Consumer warpgroup c's (rows 64c..64c+63 of the tile) metadata
	 * registers of one stage, e[j] for its k32 step j: two 8-byte
	 * shared loads and one byte permute each. */
	template <int BN>
	static __device__ __forceinline__ void meta(const char *stage, unsigned c, unsigned w, unsigned lane,
						    uint32_t e[2])
	{
		typedef nv_wg_bsmem<BN> B;
		const unsigned q = lane & 1u, mrow = 64 * c + 16 * w + (lane >> 2);
		/* Shared loads by the shared address: through the generic
		 * pointer ptxas made them generic loads (LD.E.64). */
		const uint32_t ew = nv_wg_smem(stage) + A_BYTES + B::BYTES;
		const uint2 lo = nv_lds_v2(ew + mrow * 8), hi = nv_lds_v2(ew + (mrow + 8) * 8);
		e[0] = __byte_perm(lo.x, hi.x, q ? 0x7632 : 0x5410);
		e[1] = __byte_perm(lo.y, hi.y, q ? 0x7632 : 0x5410);
	}

	/* Warpgroup c's two wgmma.sp of the stage at st (the caller fences
	 * before and commits after). */
	template <int BN>
	static __device__ __forceinline__ void issue(float *acc, uint32_t st, unsigned c, const uint32_t e[2])
	{
		typedef nv_wg_bsmem<BN> B;
		const uint32_t a0 = st + c * 64 * 64; /* 64 rows of 64 bytes per warpgroup */
		const uint32_t b0 = st + A_BYTES;
		nv_wgsp<BF16, BN, 0, 1>(acc, nv_wg_desc(a0, 16, 512, 2), B::desc(b0, 0), e[0]);
		nv_wgsp<BF16, BN, 0, 1>(acc, nv_wg_desc(a0 + 32, 16, 512, 2), B::desc(b0, 32), e[1]);
	}
};

template <int BF16>
using nv_wg_sp24_img = nv_wg_sp24<BF16, NV_WG_ORDER>;
template <int BF16>
using nv_wg_sp24_tma = nv_wg_sp24<BF16, NV_WG_ROWMAJOR>;

/* Dense A (wgmma.mma_async m64nNk16), a stage of 64 K (128 bytes a row,
 * 128-byte swizzle) by 128 rows.  ORDER (enum nv_wg_order) an image
 * order: A's dense stage images (nv_wgmma_layout.h) by one bulk copy of
 * 16 KiB; NV_WG_ROWMAJOR: A [M][lda] by a TMA box of 64 K by 128 rows.
 * Four k16 steps a stage, each 32 bytes further along the swizzled rows
 * (the swizzle is a function of the address, so the K offset goes into
 * the descriptor's start address, the atoms staying 1024-byte aligned). */
template <int BF16, int ORDER>
struct nv_wg_dense {
	enum { DENSE = 1, A_BYTES = NV_WG_DA_BYTES, E_BYTES = 0 };
	static constexpr unsigned stage_bytes(int bn) { return NV_WG_DSTAGE_BYTES(bn); }

	static __device__ __forceinline__ void load_a(const nv_wg_params &p, uint32_t st, uint32_t full, int it,
						      int m0, uint32_t b_bytes, unsigned parts = NV_WG_LOAD_A)
	{
		(void)b_bytes;
		if (!(parts & NV_WG_LOAD_VALUES))
			return;
		if (ORDER) {
			const struct nv_wg_img g = { p.k_iters, p.m_pad / NV_WG_BM, ORDER };
			nv_bulk_1d(st, p.a + nv_wg_img_index(g, m0 / NV_WG_BM, it) * A_BYTES, A_BYTES, full,
				   nv_wg_a_policy(p, it));
		} else {
			nv_tma_2d(st, &p.tm_a, it * NV_WG_BK, m0, full, nv_wg_a_policy(p, it));
		}
	}

	static __device__ __forceinline__ void prefetch_a(const nv_wg_params &p, int it, int m0)
	{
		if (ORDER) {
			const struct nv_wg_img g = { p.k_iters, p.m_pad / NV_WG_BM, ORDER };
			nv_l2_prefetch(p.a + nv_wg_img_index(g, m0 / NV_WG_BM, it) * A_BYTES, A_BYTES);
		} else {
			nv_l2_prefetch_2d(&p.tm_a, it * NV_WG_BK, m0);
		}
	}

	/* No metadata: e is only zeroed. */
	template <int BN>
	static __device__ __forceinline__ void meta(const char *, unsigned, unsigned, unsigned, uint32_t e[2])
	{
		e[0] = e[1] = 0;
	}

	template <int BN>
	static __device__ __forceinline__ void issue(float *acc, uint32_t st, unsigned c, const uint32_t *)
	{
		typedef nv_wg_bsmem<BN> B;
		const uint32_t a0 = st + c * 64 * 128; /* 64 rows of 128 bytes per warpgroup */
		const uint32_t b0 = st + A_BYTES;
#pragma unroll
		for (int j = 0; j < NV_WG_BK / 16; j++)
			nv_wgmma<BF16, BN, 1>(acc, nv_wg_desc(a0 + 32 * j, 16, 1024, 1), B::desc(b0, 16 * j));
	}
};

template <int BF16>
using nv_wg_dense_img = nv_wg_dense<BF16, NV_WG_ORDER>;
template <int BF16>
using nv_wg_dense_tma = nv_wg_dense<BF16, NV_WG_ROWMAJOR>;

/* ---- the pipelined kernel ---- */

/* ALL = 1 (2:4, whose consumers read the stage's metadata with plain
 * loads): every consumer thread arrives on a stage's `empty` barrier (256
 * arrivals), so each thread's reads are ordered before the refill by its
 * own release.  ALL = 0 (dense: only wgmma reads the stage): one arrival
 * per warp after __syncwarp (8), which the PTX model orders just as well
 * but compute-sanitizer's racecheck reports as hazards against the refill
 * (wgmma_bench raceprobe, bench/RESULTS.md).
 *
 * TRACE = 1 (wgmma_bench's trace mode only): each CTA writes the global
 * timer at its start, at the end of its main loop and at its end, and its
 * SM, to trace[4 x CTA ..]. */
template <class OP, int BN, int STAGES, int MINB, int KEEP, int ALL = !OP::DENSE, int TRACE = 0, int CL = 1,
	  int GRP = 1, int CSUM = 0, int PW3 = 0>
struct nv_wg_gemm {
	typedef nv_wg_bsmem<BN> B;
	enum {
		NACC = BN / 2,
		A_BYTES = OP::A_BYTES,
		B_BYTES = B::BYTES,
		E_BYTES = OP::E_BYTES,
		/* A and each B box start on 1024-byte boundaries, so that every
		 * swizzle atom is aligned and the descriptors' base offset is 0. */
		STAGE = OP::stage_bytes(BN),
		/* The 64 x 256 tiles hold 128 accumulators per thread: the
		 * split-K reduction on top of them spills at the 168 registers a
		 * 384-thread CTA may start with, so those run with one split (the
		 * wide tiles are for large N, where the tiles fill the GPU). */
		SPLIT_K = BN < 256,
	};
	static_assert(BN % 16 == 0 && BN <= 256, "BN");
	/* CL = 2: B's boxes split between the pair, each multicast to both. */
	static_assert(CL == 1 || (CL == 2 && BN / B::BNB % 2 == 0), "a cluster of two needs an even count of B boxes");
	static_assert(A_BYTES % 1024 == 0 && B_BYTES % 1024 == 0 && STAGE % 1024 == 0, "stage alignment");
	static_assert(GRP >= 1 && GRP <= STAGES && (GRP == 1 || !KEEP), "GRP");
	static_assert(KEEP != 2 || (!OP::DENSE && CL == 1 && GRP == 1), "KEEP = 2: 2:4, no cluster, no group");
	static_assert(!PW3 || CL == 1, "PW3: no cluster");

	static __device__ __forceinline__ void run(const nv_wg_params &p, char *smem_raw,
						   unsigned long long *trace = nullptr)
	{
		char *smem = (char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
		const uint32_t sbase = nv_wg_smem(smem);
		const uint32_t bars = sbase + STAGES * STAGE; /* full[s] then empty[s] */
		const unsigned tid = threadIdx.x, wg = tid / 128;
		unsigned long long *tr = TRACE ? trace + 4 * ((int64_t)blockIdx.z * gridDim.x + blockIdx.x) : nullptr;
		const int tile = blockIdx.x, z = blockIdx.z;
		int pm, pn;
		nv_raster(tile, p.tiles_m, p.tiles_n, &pm, &pn);
		const int m0 = pm * NV_WG_BM, n0 = pn * BN;
		const int it0 = z * p.iters_per_split;
		const int it1 = min(p.k_iters, it0 + p.iters_per_split);
		const int n_it = it1 - it0;

		const bool pw3 = PW3 && p.producers == 3;
		if (tid == 0)
			init_ring(p, bars, 2, pw3 ? (OP::DENSE ? 2 : 3) : 1);
		/* With a cluster, no multicast or remote arrival may reach a
		 * barrier before it is initialised: the pair starts together. */
		if (CL == 2)
			nv_cluster_sync();
		else
			__syncthreads();
		if (TRACE && tid == 0) {
			tr[0] = nv_globaltimer();
			tr[3] = nv_smid();
		}

		if (wg == 0) {
			if (MINB == 1)
				asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
			if (pw3) {
				produce3(p, sbase, bars, it0, n_it, m0, n0);
				return;
			}
			if (tid != 0)
				return;
			/* The gate: the first ring's A while B is still on its
			 * way, then B into those stages (each stage's barrier
			 * expects A and B from the start: it completes when both
			 * are in). */
			const int pre = gate_ring(p, n_it);
			for (int i = 0; i < pre; i++) {
				nv_mbar_expect_tx(bars + 8 * i, A_BYTES + b_bytes(p, n0) + E_BYTES);
				OP::load_a(p, sbase + i * STAGE, bars + 8 * i, it0 + i, m0, B_BYTES);
			}
			if (pre) {
				gate_prefetch(p, it0, pre, n_it, m0);
				b_wait(p);
				for (int i = 0; i < pre; i++)
					load_b(p, sbase + i * STAGE, bars + 8 * i, it0 + i, n0);
			}
			produce(p, sbase, bars, it0, pre, n_it, m0, n0);
			if (p.pdl)
				nv_pdl_trigger(); /* its last load issued: see nv_pdl_trigger */
			if (CL == 2)
				nv_cluster_sync(); /* see the consumers' */
			return;
		}

		if (MINB == 1)
			asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
		if (p.pdl)
			nv_pdl_wait(); /* before the epilogue's C, D and workspace */
		const unsigned ctid = tid - 128, c = wg - 1, w = (tid / 32) % 4, lane = tid & 31;
		float acc[NACC];
#pragma unroll
		for (int i = 0; i < NACC; i++)
			acc[i] = 0.0f;
		uint32_t prev0 = 0, prev1 = 0;

		/* GRP stages a wgmma group (see GRP above): each stage's
		 * metadata registers are all written before the group's first
		 * wgmma and none after it until its wait. */
		int i = 0;
		if (GRP > 1) {
			for (; i + GRP <= n_it; i += GRP) {
				uint32_t e[GRP][2];
#pragma unroll
				for (int j = 0; j < GRP; j++) {
					const int s = (i + j) % STAGES;
					nv_mbar_wait(bars + 8 * s, ((i + j) / STAGES) & 1);
					OP::template meta<BN>(smem + s * STAGE, c, w, lane, e[j]);
				}
				nv_wg_fence();
#pragma unroll
				for (int j = 0; j < GRP; j++)
					OP::template issue<BN>(acc, sbase + (i + j) % STAGES * STAGE, c, e[j]);
				nv_wg_commit();
				nv_wg_wait<0>();
#pragma unroll
				for (int j = 0; j < GRP; j++)
					release(bars + 8 * (STAGES + (i + j) % STAGES), lane);
			}
		}
		if (KEEP == 2) {
			/* Two sets of metadata registers, stage by stage in turn:
			 * each set pinned (nv_wg_pin_meta) until the wait that
			 * completes its group, so the next stage's set, written
			 * while that group is in flight, is another one. */
			uint32_t e0[2] = { 0, 0 }, e1[2] = { 0, 0 };
			for (; i + 1 < n_it; i += 2) {
				keep2_stage(p, i, smem, sbase, bars, c, w, lane, acc, e0, e1);
				keep2_stage(p, i + 1, smem, sbase, bars, c, w, lane, acc, e1, e0);
			}
			if (i < n_it)
				keep2_stage(p, i++, smem, sbase, bars, c, w, lane, acc, e0, e1);
			nv_wg_wait<0>();
			nv_wg_pin_meta(e0, p.m, sbase);
			nv_wg_pin_meta(e1, p.m, sbase);
		}
		for (; KEEP < 2 && i < n_it; i++) {
			const int s = i % STAGES;
			nv_mbar_wait(bars + 8 * s, (i / STAGES) & 1);
			uint32_t e[2];
			issue_stage(smem, sbase, s, c, w, lane, acc, e);
			if (KEEP) {
				nv_wg_wait<1>();
				/* The previous group's metadata registers stay live until
				 * it is complete (see the file comment; the dense
				 * policy has none). */
				asm volatile("" ::"r"(prev0), "r"(prev1));
				prev0 = e[0];
				prev1 = e[1];
				if (i > 0)
					release(bars + 8 * (STAGES + (i - 1) % STAGES), lane);
			} else {
				nv_wg_wait<0>();
				release(bars + 8 * (STAGES + s), lane);
			}
		}
		if (KEEP == 1) {
			nv_wg_wait<0>();
			asm volatile("" ::"r"(prev0), "r"(prev1));
		}
		if (TRACE && tid == 128)
			tr[1] = nv_globaltimer();
		/* Neither CTA of a pair leaves while the other's producer may
		 * still write into it or its consumers still arrive on its
		 * barriers: past this, every stage has landed in both and
		 * every release has been made (the producer's thread joins). */
		if (CL == 2)
			nv_cluster_sync();

		if (CSUM && SPLIT_K && gridDim.z > 1 && !p.dh && nv_cluster_size() == gridDim.z) {
			cluster_sum(p, acc, sbase, m0 + 64 * c, n0, w, lane, ctid);
			if (TRACE && tid == 128)
				tr[2] = nv_globaltimer();
			return;
		}
		if (SPLIT_K && gridDim.z > 1 && !reduce_splits(p, acc, tile, z, (int)gridDim.z, ctid)) {
			if (TRACE && tid == 128)
				tr[2] = nv_globaltimer();
			return;
		}
		epilogue(p, acc, m0 + 64 * c, n0, w, lane);
		if (p.dh) {
			/* Both consumer warpgroups' stores of the tile are
			 * visible to each other past the barrier. */
			asm volatile("bar.sync 1, 256;\n" ::: "memory");
			nv_wg_tile_out(p, m0, NV_WG_BM, n0, BN, ctid, 256);
		}
		if (TRACE && tid == 128)
			tr[2] = nv_globaltimer();
	}

	/* The queue (wgmma_bench's q_ kernels, an experiment): a persistent
	 * grid of at most one CTA an SM takes the (tile, split) units of the
	 * launch in turn from a counter (counters[tiles], counters[tiles + 1]
	 * the CTAs done, the last of which resets both), so that an SM whose
	 * weight bytes arrive faster takes more units than one whose arrive
	 * slower (the trace: equal units end up to 4 us apart).  Every unit
	 * covers the K range of its split whichever CTA runs it, and the
	 * partials are added in split order as in run, so the result does
	 * not depend on which CTA took what.  The producer keeps loading the
	 * next unit's stages while the consumers sum and store the last one;
	 * a stage's unit travels in s_unit, -1 ends the consumers' loop.
	 * Correct, and measured on the H200 no faster where there is one
	 * unit a CTA and slower with every unit more (16384 x 16 x 4096:
	 * 29.2 us against 28.3 at one split, 32.9 against 29.4 at two, 64.5
	 * against 50.1 at sixteen), and still so with each unit's successor
	 * taken as it starts (below) and with two CTAs an SM (wgmma_bench's
	 * q2_: 41.1 us against 27.7 at two splits, one unit a CTA, which is
	 * not explained yet; bench/RESULTS.md).  The daemon does not use it. */
	static __device__ __forceinline__ void run_queue(const nv_wg_params &p, char *smem_raw)
	{
		static_assert(KEEP == 0 && CL == 1 && GRP == 1 && !TRACE && SPLIT_K, "the queue: the skinny plain kernel");
		__shared__ int s_unit[STAGES];
		char *smem = (char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
		const uint32_t sbase = nv_wg_smem(smem);
		const uint32_t bars = sbase + STAGES * STAGE;
		const unsigned tid = threadIdx.x, wg = tid / 128;
		const int ntiles = p.tiles_m * p.tiles_n;
		const int splits = (p.k_iters + p.iters_per_split - 1) / p.iters_per_split;
		const int units = ntiles * splits;
		unsigned *q = (unsigned *)p.counters + ntiles;

		if (tid == 0)
			init_ring(p, bars);
		__syncthreads();

		if (wg == 0) {
			if (MINB == 1)
				asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
			if (tid != 0)
				return;
			/* Each unit's successor is taken as it starts, so that the
			 * counter's round trip is behind its loads. */
			int u = (int)atomicAdd(&q[0], 1u);
			for (int g = 0;;) {
				if (u >= units) {
					const int s = g % STAGES;
					nv_mbar_wait(bars + 8 * (STAGES + s), ((g / STAGES) & 1) ^ 1);
					s_unit[s] = -1;
					nv_mbar_arrive(bars + 8 * s);
					if (atomicAdd(&q[1], 1u) == gridDim.x - 1) {
						q[0] = 0;
						q[1] = 0;
					}
					return;
				}
				const int next = (int)atomicAdd(&q[0], 1u);
				int pm, pn;
				nv_raster(u % ntiles, p.tiles_m, p.tiles_n, &pm, &pn);
				const int m0 = pm * NV_WG_BM, n0 = pn * BN, z = u / ntiles;
				const int it0 = z * p.iters_per_split, it1 = min(p.k_iters, it0 + p.iters_per_split);
				for (int it = it0; it < it1; it++, g++) {
					const int s = g % STAGES;
					nv_mbar_wait(bars + 8 * (STAGES + s), ((g / STAGES) & 1) ^ 1);
					if (it == it0)
						s_unit[s] = u;
					load_stage(p, sbase, bars, s, it, m0, n0);
				}
				u = next;
			}
		}

		if (MINB == 1)
			asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
		const unsigned ctid = tid - 128, c = wg - 1, w = (tid / 32) % 4, lane = tid & 31;
		for (int g = 0;;) {
			nv_mbar_wait(bars + 8 * (g % STAGES), (g / STAGES) & 1);
			const int u = *(volatile int *)&s_unit[g % STAGES];
			if (u < 0)
				break;
			const int tile = u % ntiles, z = u / ntiles;
			int pm, pn;
			nv_raster(tile, p.tiles_m, p.tiles_n, &pm, &pn);
			const int m0 = pm * NV_WG_BM, n0 = pn * BN;
			const int it0 = z * p.iters_per_split, n_it = min(p.k_iters, it0 + p.iters_per_split) - it0;
			float acc[NACC];
#pragma unroll
			for (int i = 0; i < NACC; i++)
				acc[i] = 0.0f;
			for (int j = 0; j < n_it; j++, g++) {
				const int s = g % STAGES;
				if (j > 0)
					nv_mbar_wait(bars + 8 * s, (g / STAGES) & 1);
				uint32_t e[2];
				issue_stage(smem, sbase, s, c, w, lane, acc, e);
				nv_wg_wait<0>();
				release(bars + 8 * (STAGES + s), lane);
			}
			if (splits > 1 && !reduce_splits(p, acc, tile, z, splits, ctid))
				continue;
			epilogue(p, acc, m0 + 64 * c, n0, w, lane);
		}
	}

	/* One consumer warpgroup over the tile's 128 rows (wgmma_bench's w1_
	 * kernels, launched with 256 threads; an experiment): what
	 * cuSPARSELt's 128 x 64 kernel does (bench/RESULTS.md, its SASS).  The
	 * producer warpgroup as in run; the one consumer warpgroup builds both
	 * row halves' metadata registers each stage, issues their four
	 * wgmma.sp as one group into two accumulator sets, waits for it and
	 * releases the stage (128 arrivals).  Unsplit launches only, no gate,
	 * no tile out: the shape it is for (4096 x 256 x 4096 on 128 CTAs of
	 * 128 x 64) needs none of them.  Correct, and measured on the H200
	 * slower than two consumer warpgroups at the same tile and split
	 * (4096 x 256 x 4096, 128 x 64 unsplit: 26.8 us against 25.4; 128 x
	 * 128: 32.7 against 28.4) but at 8192 x 256 x 8192 on 128 x 64 (53.4
	 * against 55.2, both behind the 128 x 128 tile's 48.1;
	 * bench/RESULTS.md): the consumers' structure is not what separates
	 * us from cuSPARSELt there either. */
	static __device__ __forceinline__ void run_w1(const nv_wg_params &p, char *smem_raw)
	{
		static_assert(KEEP == 0 && CL == 1 && GRP == 1 && !TRACE && !CSUM, "w1: the plain kernel");
		char *smem = (char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
		const uint32_t sbase = nv_wg_smem(smem);
		const uint32_t bars = sbase + STAGES * STAGE;
		const unsigned tid = threadIdx.x, wg = tid / 128;
		if (gridDim.z != 1 || p.gate || p.dh)
			__trap(); /* the bench launches none of these */
		int pm, pn;
		nv_raster(blockIdx.x, p.tiles_m, p.tiles_n, &pm, &pn);
		const int m0 = pm * NV_WG_BM, n0 = pn * BN, n_it = p.k_iters;
		if (tid == 0)
			init_ring(p, bars, 1);
		__syncthreads();
		if (wg == 0) {
			if (tid == 0)
				produce(p, sbase, bars, 0, 0, n_it, m0, n0);
			return;
		}
		const unsigned w = (tid / 32) % 4, lane = tid & 31;
		float acc0[NACC], acc1[NACC];
#pragma unroll
		for (int i = 0; i < NACC; i++)
			acc0[i] = acc1[i] = 0.0f;
		for (int i = 0; i < n_it; i++) {
			const int s = i % STAGES;
			nv_mbar_wait(bars + 8 * s, (i / STAGES) & 1);
			uint32_t e0[2], e1[2];
			OP::template meta<BN>(smem + s * STAGE, 0, w, lane, e0);
			OP::template meta<BN>(smem + s * STAGE, 1, w, lane, e1);
			nv_wg_fence();
			OP::template issue<BN>(acc0, sbase + s * STAGE, 0, e0);
			OP::template issue<BN>(acc1, sbase + s * STAGE, 1, e1);
			nv_wg_commit();
			nv_wg_wait<0>();
			release(bars + 8 * (STAGES + s), lane);
		}
		epilogue(p, acc0, m0, n0, w, lane);
		epilogue(p, acc1, m0 + 64, n0, w, lane);
	}

	/* PW3 = 1 with nv_wg_params.producers 3: three producer threads, lane
	 * 0 of warps 0, 1 and 2, one for A's values, one for B and one for the
	 * metadata (cuSPARSELt's 128 x 64 kernel has a producer warp for
	 * each), each waiting for a slot to be empty and arriving on its
	 * `full` barrier with the bytes of its own copies (the barrier counts
	 * three arrivals; two for dense A, which has no metadata).  With the
	 * gate, B's thread waits for it while A's and the metadata's fill the
	 * first ring and A's prefetches gate_l2 more stages into L2, as the one
	 * producer does.  Measured on the H200 1-6% faster on the
	 * one-CTA-an-SM 128 x 128 tile where the launch's CTAs are all
	 * resident at once (4096 x 256 x 8192 in two splits: 32.3 against
	 * 33.5 us; 8192 x 128 x 8192 unsplit: 42.4 against 45.1), 3-9% slower
	 * in f16 (bf16: -2% to +8%) over two waves of it (32768 x 128 x 8192),
	 * 10-18% slower on the 128 x 256 tile over two to four waves, and not
	 * faster on the skinny two-CTA-an-SM tiles (within 0.8 us either way;
	 * bench/RESULTS.md): NV_WG_SP_PW3 names the tiles built with it and
	 * nv_wg_producers the launches that use it. */
	static __device__ __forceinline__ void produce3(const nv_wg_params &p, uint32_t sbase, uint32_t bars, int it0,
							int n_it, int m0, int n0)
	{
		const unsigned tid = threadIdx.x, role = tid / 32;
		if (tid % 32 != 0 || role > 2 || (OP::DENSE && role == 2))
			return;
		if (role == 1) {
			b_wait(p);
			produce<NV_WG_LOAD_B>(p, sbase, bars, it0, 0, n_it, m0, n0);
		} else if (role == 2) {
			produce<NV_WG_LOAD_META>(p, sbase, bars, it0, 0, n_it, m0, n0);
		} else {
			const int pre = gate_ring(p, n_it);
			produce<NV_WG_LOAD_VALUES>(p, sbase, bars, it0, 0, pre, m0, n0);
			if (pre)
				gate_prefetch(p, it0, pre, n_it, m0);
			produce<NV_WG_LOAD_VALUES>(p, sbase, bars, it0, pre, n_it, m0, n0);
			if (p.pdl)
				nv_pdl_trigger();
		}
	}

	/* The gate's first ring: how many of the n_it stages have their A
	 * loaded before B may be read (B on the device, the previous kernel
	 * ended); 0 without a gate or a dependent launch. */
	static __device__ __forceinline__ int gate_ring(const nv_wg_params &p, int n_it)
	{
		return p.gate || p.pdl ? min(n_it, STAGES) : 0;
	}

	/* What B's producer waits for: the previous kernel's end with a
	 * dependent launch, then the gate word. */
	static __device__ __forceinline__ void b_wait(const nv_wg_params &p)
	{
		if (p.pdl)
			nv_pdl_wait();
		if (p.gate)
			nv_gate_wait(p.gate, p.gate_seq);
	}

	/* While B may not be read yet (the gate closed, the previous kernel
	 * running): gate_l2 more stages of A and its metadata, past the first
	 * ring's pre, into L2. */
	static __device__ __forceinline__ void gate_prefetch(const nv_wg_params &p, int it0, int pre, int n_it, int m0)
	{
		for (int i = pre; i < min(n_it, pre + p.gate_l2); i++)
			OP::prefetch_a(p, it0 + i, m0);
	}

	/* The producer's loop: stages it0 + first .. it0 + n_it - 1 of the
	 * tile at (m0, n0), each into its ring slot once the slot is empty,
	 * the PARTS of each that this thread issues. */
	template <unsigned PARTS = NV_WG_LOAD_ALL>
	static __device__ __forceinline__ void produce(const nv_wg_params &p, uint32_t sbase, uint32_t bars, int it0,
						       int first, int n_it, int m0, int n0)
	{
		for (int i = first; i < n_it; i++) {
			const int s = i % STAGES, it = it0 + i;
			nv_mbar_wait(bars + 8 * (STAGES + s), ((i / STAGES) & 1) ^ 1);
			load_stage<PARTS>(p, sbase, bars, s, it, m0, n0);
		}
	}

	/* Thread 0's set-up of the ring: each slot's `full` barrier (one
	 * arrival, with the bytes its copies bring) and `empty` one (see ALL:
	 * per consumer warpgroup of cwg; with CL = 2 also one arrival per
	 * consumer warp of the other CTA, whose B this CTA's producer writes
	 * too), and the tensor maps. */
	static __device__ __forceinline__ void init_ring(const nv_wg_params &p, uint32_t bars, unsigned cwg = 2,
							 unsigned producers = 1)
	{
		for (int s = 0; s < STAGES; s++) {
			nv_mbar_init(bars + 8 * s, producers);
			nv_mbar_init(bars + 8 * (STAGES + s), (ALL ? 128 : 4) * cwg + (CL == 2 ? 8 : 0));
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
		asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&p.tm_a) : "memory");
		asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&p.tm_b) : "memory");
	}

	/* Stage it of the tile at (m0, n0) into ring slot s, once the slot is
	 * empty: A, its metadata and B (or the parts of them named), all
	 * completing on the slot's `full` barrier with the bytes announced. */
	template <unsigned PARTS = NV_WG_LOAD_ALL>
	static __device__ __forceinline__ void load_stage(const nv_wg_params &p, uint32_t sbase, uint32_t bars, int s,
							  int it, int m0, int n0)
	{
		const uint32_t full = bars + 8 * s, st = sbase + s * STAGE;
		nv_mbar_expect_tx(full, (PARTS & NV_WG_LOAD_VALUES ? A_BYTES : 0) +
						(PARTS & NV_WG_LOAD_B ? b_bytes(p, n0) : 0) +
						(PARTS & NV_WG_LOAD_META ? E_BYTES : 0));
		if (PARTS & NV_WG_LOAD_A)
			OP::load_a(p, st, full, it, m0, B_BYTES, PARTS & NV_WG_LOAD_A);
		if (PARTS & NV_WG_LOAD_B)
			load_b(p, st, full, it, n0);
	}

	/* Ring slot s's metadata into e, its wgmma.sp group issued and
	 * committed (the caller waits for the slot's barrier before and for
	 * the group after). */
	static __device__ __forceinline__ void issue_stage(const char *smem, uint32_t sbase, int s, unsigned c,
							   unsigned w, unsigned lane, float *acc, uint32_t e[2])
	{
		OP::template meta<BN>(smem + s * STAGE, c, w, lane, e);
		nv_wg_fence();
		OP::template issue<BN>(acc, sbase + s * STAGE, c, e);
		nv_wg_commit();
	}

	/* Stage i of KEEP = 2: its metadata into e, its group issued with
	 * the previous stage's (whose registers are other) still in flight,
	 * then that one waited for, its registers pinned up to here, and its
	 * stage released. */
	static __device__ __forceinline__ void keep2_stage(const nv_wg_params &p, int i, const char *smem,
							   uint32_t sbase, uint32_t bars, unsigned c, unsigned w,
							   unsigned lane, float *acc, uint32_t e[2], const uint32_t other[2])
	{
		const int s = i % STAGES;
		nv_mbar_wait(bars + 8 * s, (i / STAGES) & 1);
		issue_stage(smem, sbase, s, c, w, lane, acc, e);
		nv_wg_wait<1>();
		nv_wg_pin_meta(other, p.m, sbase);
		if (i > 0)
			release(bars + 8 * (STAGES + (i - 1) % STAGES), lane);
	}

	/* The boxes of B a tile at n0 loads: those that hold a column below
	 * N.  A box wholly past B's edge would only bring zeros for D's
	 * columns past N, which are never written, and TMA is slow at it: on
	 * the H200 8192 x 192 x 8192 on the 128 x 128 tile took 56.4 us with
	 * the last box of every second tile past the edge, 42.3 with it read
	 * from memory, 43.1 with it left out (bench/RESULTS.md).  The slots of
	 * the boxes left out keep what they held (at the start whatever shared
	 * memory held), which again reaches only those columns of D: of the
	 * accumulators, the split-K partials and the epilogue, only columns
	 * below N are stored. */
	static __device__ __forceinline__ int b_boxes(const nv_wg_params &p, int n0)
	{
		return min(BN / B::BNB, (p.n - n0 + B::BNB - 1) / B::BNB);
	}
	static __device__ __forceinline__ uint32_t b_bytes(const nv_wg_params &p, int n0)
	{
		return (uint32_t)b_boxes(p, n0) * B::BOX_BYTES;
	}

	/* B's boxes of stage it (b_boxes of them) into the stage at st. */
	static __device__ __forceinline__ void load_b(const nv_wg_params &p, uint32_t st, uint32_t full, int it,
						      int n0)
	{
		const int boxes = b_boxes(p, n0);
		if (CL == 2) {
			/* Every other box, multicast to the pair (which shares n0). */
			const unsigned r = nv_cluster_rank();
#pragma unroll
			for (int nb = 0; nb < BN / B::BNB; nb += 2)
				if (nb + (int)r < boxes)
					nv_tma_2d_mc(st + A_BYTES + (nb + r) * B::BOX_BYTES, &p.tm_b,
						     n0 + (nb + (int)r) * B::BNB, it * NV_WG_BK, full, 3, NV_WG_EVICT_LAST);
			return;
		}
#pragma unroll
		for (int nb = 0; nb < BN / B::BNB; nb++)
			if (nb < boxes)
				nv_tma_2d(st + A_BYTES + nb * B::BOX_BYTES, &p.tm_b, n0 + nb * B::BNB, it * NV_WG_BK,
					  full, NV_WG_EVICT_LAST);
	}

	static __device__ __forceinline__ void release(uint32_t empty, unsigned lane)
	{
		if (ALL)
			nv_mbar_arrive(empty);
		else
			nv_mbar_arrive_warp(empty, lane);
		if (CL == 2) {
			/* The other CTA's producer writes half of this stage's B
			 * here: it waits for this warp's reads too. */
			__syncwarp();
			if (lane == 0)
				nv_mbar_arrive_remote(empty, nv_cluster_rank() ^ 1u);
		}
	}

	/* Returns true in the last CTA of the tile to arrive, with the sum of
	 * every split's partial in acc. */
	static __device__ __forceinline__ bool reduce_splits(const nv_wg_params &p, float *acc, int tile, int z,
							     int splits, unsigned ctid)
	{
		__shared__ unsigned s_last;
		float *ws = (float *)p.ws + (int64_t)tile * splits * NACC * 256;
#pragma unroll
		for (int i = 0; i < NACC; i++)
			__stcg(&ws[((int64_t)z * NACC + i) * 256 + ctid], acc[i]);
		__threadfence();
		asm volatile("bar.sync 1, 256;\n" ::: "memory");
		if (ctid == 0) {
			unsigned *cnt = (unsigned *)p.counters + tile;
			unsigned prev = atomicAdd(cnt, 1u);
			s_last = prev == (unsigned)splits - 1;
			if (s_last)
				*cnt = 0; /* ready for the next launch */
		}
		asm volatile("bar.sync 1, 256;\n" ::: "memory");
		if (!s_last)
			return false;
		__threadfence();
		/* Split by split, each split's NACC loads issued together (this
		 * CTA's own partial read back like the others): the same sum in
		 * the same order as adding each accumulator's splits in turn,
		 * which waited out one L2 round trip per load (NACC x splits of
		 * them, some 20 us at n64 with 4 splits: bench/RESULTS.md).
		 * Loading every split's partials at once at the skinny tiles
		 * measured no faster (bench/RESULTS.md). */
#pragma unroll
		for (int i = 0; i < NACC; i++)
			acc[i] = __ldcg(&ws[(int64_t)i * 256 + ctid]);
		for (int zz = 1; zz < splits; zz++) {
#pragma unroll
			for (int i = 0; i < NACC; i++)
				acc[i] += __ldcg(&ws[((int64_t)zz * NACC + i) * 256 + ctid]);
		}
		return true;
	}

	/* CSUM = 1, launched in clusters of the tile's splits (cluster dims 1,
	 * 1, splits; rank = split): the split-K sum through the cluster's
	 * shared memory instead of the workspace.  Every CTA puts its partial
	 * in its own ring (free past the main loop), the cluster meets, and
	 * each CTA adds, for its share of the accumulator pairs (pair j goes
	 * to rank j % splits), every rank's partial in split order (the same
	 * sum, bit for bit, as reduce_splits) and stores that share of D.  No
	 * CTA leaves while another may still read its ring. */
	static __device__ __forceinline__ void cluster_sum(const nv_wg_params &p, float *acc, uint32_t sbase, int row0,
							   int n0, unsigned w, unsigned lane, unsigned ctid)
	{
		const unsigned splits = gridDim.z, me = nv_cluster_rank();
		/* Both consumer warpgroups are past their last wgmma. */
		asm volatile("bar.sync 1, 256;\n" ::: "memory");
#pragma unroll
		for (int i = 0; i < NACC; i += 2)
			nv_st_shared_f2(sbase + ((i / 2) * 256 + ctid) * 8, acc[i], acc[i + 1]);
		nv_cluster_arrive();
		nv_cluster_wait();
#pragma unroll
		for (int i = 0; i < NACC; i += 2) {
			if ((unsigned)i / 2 % splits != me)
				continue;
			const uint32_t at = sbase + ((i / 2) * 256 + ctid) * 8;
			float x = 0.0f, y = 0.0f;
			for (unsigned q = 0; q < splits; q++) {
				const float2 v = q == me ? make_float2(acc[i], acc[i + 1]) : nv_ld_cluster_f2(nv_mapa(at, q));
				x = q ? x + v.x : v.x;
				y = q ? y + v.y : v.y;
			}
			acc[i] = x;
			acc[i + 1] = y;
		}
		nv_cluster_arrive();
		nv_wg_store<NACC>(p, acc, row0, p.m, n0, w, lane, me, splits);
		nv_cluster_wait();
	}

	static __device__ __forceinline__ void epilogue(const nv_wg_params &p, const float *acc, int row0, int n0,
							unsigned w, unsigned lane)
	{
		nv_wg_store<NACC>(p, acc, row0, p.m, n0, w, lane);
	}
};

/* op: the compute policy, nv_wg_sp24<BF16, ORDER> or nv_wg_dense<BF16, ORDER>; pw3:
 * PW3 above (three producer threads), 0 or 1. */
#define NV_WG_DEFINE_KERNEL_PW(name, op, bn, stages, minb, keep, pw3)                             \
	extern "C" __global__ void __launch_bounds__(NV_WG_THREADS, minb)                           \
		nv_wg_##name(const __grid_constant__ nv_wg_params p)                                \
	{                                                                                           \
		extern __shared__ __align__(1024) char nv_wg_smem_raw[];                            \
		nv_wg_gemm<op, bn, stages, minb, keep, !op::DENSE, 0, 1, 1, 0, pw3>::run(p, nv_wg_smem_raw); \
	}
#define NV_WG_DEFINE_KERNEL(name, op, bn, stages, minb, keep) \
	NV_WG_DEFINE_KERNEL_PW(name, op, bn, stages, minb, keep, 0)

#endif
