/* Data-movement kernels around the GEMMs: rewriting A (dense or the
 * canonical 2:4 values) and the canonical metadata into the packed
 * fragment order of nv_layout.h, and transposing 8-bit B.  They run once
 * per resident weight, or once per request for an A that is not resident. */
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
	const int k0 = blockIdx.x * 32, n0 = blockIdx.y * 32;
	const int8_t *b = (const int8_t *)p.b;
	int8_t *bt = (int8_t *)p.bt;
	for (int r = threadIdx.y; r < 32; r += 8) {
		int k = k0 + r, n = n0 + threadIdx.x;
		t[r][threadIdx.x] = (k < p.k && n < p.n) ? b[(int64_t)k * p.ldb + n] : 0;
	}
	__syncthreads();
	for (int r = threadIdx.y; r < 32; r += 8) {
		int n = n0 + r, k = k0 + threadIdx.x;
		if (n < p.n && k < p.ldbt)
			bt[(int64_t)n * p.ldbt + k] = t[threadIdx.x][r];
	}
}
