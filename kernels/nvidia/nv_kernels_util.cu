/* Data-movement kernels around the GEMMs: rewriting A (dense or the
 * canonical 2:4 values) and the canonical metadata into the packed
 * fragment order of nv_layout.h, and transposing 8-bit B.  They run once
 * per resident weight, or once per request for an A that is not resident.
 * nv_batch_cols joins a batched launch's B (and C) and splits its D;
 * nv_copy_spans moves its parts in and out of registered host memory. */
#include <stdint.h>

#include "nv_layout.h"

/* One thread per 16-byte lane fragment of one packed tile. */
extern "C" __global__ void __launch_bounds__(256) nv_pack_a(const nv_pack_params p)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t total = (int64_t)p.strips * p.ktiles * 32;
	if (i >= total)
		return;
	const unsigned lane = (unsigned)(i & 31);
	const int64_t tile = i >> 5, s = tile / p.ktiles, kt = tile % p.ktiles;
	const uint8_t *src = (const uint8_t *)p.src;
	uint32_t w[4];
	for (unsigned q = 0; q < 4; q++) {
		unsigned r, c;
		nv_afrag_pos(lane, 4 * q, &r, &c);
		int64_t row = s * NV_TILE_ROWS + r, col = kt * NV_TILE_KBYTES + c;
		int64_t off = row * p.row_bytes + col;
		/* Whole aligned words where the source allows; the general
		 * byte-wise path covers ragged rows and the padding. */
		if (row < p.rows && col + 4 <= p.row_bytes && (off & 3) == 0)
			w[q] = *(const uint32_t *)(src + off);
		else
			w[q] = nv_pack_a_word(src, p.row_bytes, p.rows, s, kt, lane, q);
	}
	((uint4 *)p.dst)[i] = make_uint4(w[0], w[1], w[2], w[3]);
}

/* One thread per packed metadata word. */
extern "C" __global__ void __launch_bounds__(256) nv_pack_meta(const nv_pack_params p)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t total = (int64_t)p.strips * p.ktiles * 32;
	if (i >= total)
		return;
	const unsigned lane = (unsigned)(i & 31);
	const int64_t tile = i >> 5, s = tile / p.ktiles, mt = tile % p.ktiles;
	((uint32_t *)p.dst)[i] = nv_pack_meta_word((const uint32_t *)p.src_meta, p.meta_words, p.rows,
						   p.kgroups, p.is8, s, mt, lane);
}

/* Bt[n][k] = B[k][n] for k < K, zero for K <= k < ldbt: 32 x 32 byte tiles
 * through shared memory so that both sides are read and written along
 * rows.  Block (32, 8); grid (ldbt / 32, ceil(n / 32)). */
extern "C" __global__ void __launch_bounds__(256) nv_transpose_b8(const nv_transpose_params p)
{
	__shared__ int8_t t[32][33];
	const int k0 = blockIdx.x * 32;
	const int8_t *b = (const int8_t *)p.b;
	int8_t *bt = (int8_t *)p.bt;
	/* The grid's rows stride over N: a grid has at most 65535 of them. */
	for (int64_t n0 = (int64_t)blockIdx.y * 32; n0 < p.n; n0 += (int64_t)gridDim.y * 32) {
		for (int r = threadIdx.y; r < 32; r += 8) {
			int64_t k = k0 + r, n = n0 + threadIdx.x;
			t[r][threadIdx.x] = (k < p.k && n < p.n) ? b[k * p.ldb + n] : 0;
		}
		__syncthreads();
		for (int r = threadIdx.y; r < 32; r += 8) {
			int64_t n = n0 + r, k = k0 + threadIdx.x;
			if (n < p.n && k < p.ldbt)
				bt[n * p.ldbt + k] = t[threadIdx.x][r];
		}
		__syncthreads();
	}
}

__device__ static uint32_t nv_ld_elem(uint64_t base, int64_t e, int es)
{
	switch (es) {
	case 1: return ((const uint8_t *)base)[e];
	case 2: return ((const uint16_t *)base)[e];
	default: return ((const uint32_t *)base)[e];
	}
}

__device__ static void nv_st_elem(uint64_t base, int64_t e, int es, uint32_t v)
{
	switch (es) {
	case 1: ((uint8_t *)base)[e] = (uint8_t)v; break;
	case 2: ((uint16_t *)base)[e] = (uint16_t)v; break;
	default: ((uint32_t *)base)[e] = v; break;
	}
}

/* A batched launch's operand between the parts' own blocks and the joined
 * matrix (nv_batch_params), through a 32 x 32 tile in shared memory: the
 * parts' side is read or written along rows of a column (contiguous for
 * the single-column requests of a decode), the joined side along its
 * rows.  Block (32, 8); grid (ceil(ld / 32), ceil(rows / 32) up to 65535). */
extern "C" __global__ void __launch_bounds__(256) nv_batch_cols(const nv_batch_params p)
{
	__shared__ uint32_t t[32][33]; /* t[column - j0][row - r0] */
	const int j0 = blockIdx.x * 32;
	const int32_t *cs = (const int32_t *)p.col_start, *cn = (const int32_t *)p.col_n;
	/* The grid's rows stride over the rows: a grid has at most 65535. */
	for (int64_t r0 = (int64_t)blockIdx.y * 32; r0 < p.rows; r0 += (int64_t)gridDim.y * 32) {
		if (p.dir == 0) {
			for (int i = threadIdx.y; i < 32; i += 8) {
				int64_t j = j0 + i, r = r0 + threadIdx.x;
				uint32_t v = 0;
				if (j < p.cols && r < p.rows)
					v = nv_ld_elem(p.parts,
						       (int64_t)p.rows * cs[j] + r * cn[j] + (j - cs[j]),
						       p.es);
				t[i][threadIdx.x] = v;
			}
			__syncthreads();
			for (int i = threadIdx.y; i < 32; i += 8) {
				int64_t r = r0 + i, j = j0 + threadIdx.x;
				if (r < p.rows && j < p.ld)
					nv_st_elem(p.joined, r * p.ld + j, p.es, t[threadIdx.x][i]);
			}
		} else {
			for (int i = threadIdx.y; i < 32; i += 8) {
				int64_t r = r0 + i, j = j0 + threadIdx.x;
				t[threadIdx.x][i] = (r < p.rows && j < p.cols)
							    ? nv_ld_elem(p.joined, r * p.ld + j, p.es)
							    : 0;
			}
			__syncthreads();
			for (int i = threadIdx.y; i < 32; i += 8) {
				int64_t j = j0 + i, r = r0 + threadIdx.x;
				if (j < p.cols && r < p.rows)
					nv_st_elem(p.parts,
						   (int64_t)p.rows * cs[j] + r * cn[j] + (j - cs[j]),
						   p.es, t[i][threadIdx.x]);
			}
		}
		__syncthreads();
	}
}

/* One span in units of T (the widest both ends are aligned to): the
 * blocks of its grid row stride over it. */
template <typename T>
__device__ static void nv_copy_units(const nv_copy_span &sp)
{
	const T *src = (const T *)sp.src;
	T *dst = (T *)sp.dst;
	const uint64_t n = sp.bytes / sizeof(T);
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x)
		dst[i] = src[i];
	/* The ragged tail, byte by byte. */
	const uint64_t done = n * sizeof(T);
	const uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (done + t < sp.bytes)
		((uint8_t *)sp.dst)[done + t] = ((const uint8_t *)sp.src)[done + t];
}

/* Span blockIdx.y of p, 16 bytes a thread where both ends allow (reads of
 * host memory cross PCIe: the wider and more of them in flight, the
 * closer to the link's rate).  Block 256; grid (blocks per span, count). */
extern "C" __global__ void __launch_bounds__(256) nv_copy_spans(const nv_copy_params p)
{
	const nv_copy_span sp = ((const nv_copy_span *)p.spans)[blockIdx.y];
	const uint64_t align = sp.src | sp.dst;
	if ((align & 15) == 0)
		nv_copy_units<uint4>(sp);
	else if ((align & 3) == 0)
		nv_copy_units<uint32_t>(sp);
	else if ((align & 1) == 0)
		nv_copy_units<uint16_t>(sp);
	else
		nv_copy_units<uint8_t>(sp);
}
