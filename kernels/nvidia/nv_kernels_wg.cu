/* sm_90a only: the wgmma.sp kernels (nv_wgmma.cuh), 2:4 f16 and bf16,
 * every tile of NV_WG_TILES, reading A as stage images; the dense wgmma
 * kernels (every tile of NV_WG_DTILES), reading A as dense stage images
 * or, for a request's own A, row-major by TMA;
 * and the packing of a canonical 2:4 A and of a dense A into those
 * layouts (nv_wgmma_layout.h).  Built for compute_90a / sm_90a when
 * nvidia_archs names 90; an sm_90a cubin runs on sm_90 only. */
#include "nv_wgmma.cuh"

/* KEEP = 0 for 2:4: see nv_wgmma.cuh for why each wgmma.sp group is
 * waited for in its stage; the dense kernels keep one in flight (KEEP = 1).
 * Three producer threads (PW3) on the 2:4 tiles NV_WG_SP_PW3 names. */
#define NV_WG_F16(name, bn, st, minb) \
	NV_WG_DEFINE_KERNEL_PW(f16_##name, nv_wg_sp24_img<0>, bn, st, minb, 0, NV_WG_SP_PW3(bn))
#define NV_WG_BF16(name, bn, st, minb) \
	NV_WG_DEFINE_KERNEL_PW(bf16_##name, nv_wg_sp24_img<1>, bn, st, minb, 0, NV_WG_SP_PW3(bn))
NV_WG_TILES(NV_WG_F16)
NV_WG_TILES(NV_WG_BF16)
#define NV_WG_DENSE_F16(name, bn, st, minb) \
	NV_WG_DEFINE_KERNEL(dense_f16_##name, nv_wg_dense_img<0>, bn, st, minb, 1)
#define NV_WG_DENSE_BF16(name, bn, st, minb) \
	NV_WG_DEFINE_KERNEL(dense_bf16_##name, nv_wg_dense_img<1>, bn, st, minb, 1)
NV_WG_DTILES(NV_WG_DENSE_F16)
NV_WG_DTILES(NV_WG_DENSE_BF16)
/* The same dense kernels reading a row-major A by TMA boxes: a request's
 * own A, which a packing pass would cost more than it gains (the images
 * pay off for a resident weight, read at every request). */
#define NV_WG_DENSE_RM_F16(name, bn, st, minb) \
	NV_WG_DEFINE_KERNEL(dense_rm_f16_##name, nv_wg_dense_tma<0>, bn, st, minb, 1)
#define NV_WG_DENSE_RM_BF16(name, bn, st, minb) \
	NV_WG_DEFINE_KERNEL(dense_rm_bf16_##name, nv_wg_dense_tma<1>, bn, st, minb, 1)
NV_WG_DTILES(NV_WG_DENSE_RM_F16)
NV_WG_DTILES(NV_WG_DENSE_RM_BF16)

/* One thread per 32-bit word of the output: the values (two 16-bit
 * values a word, from the canonical row; zeros past K and past the last
 * row) first, then the metadata words. */
extern "C" __global__ void __launch_bounds__(256) nv_wg_pack(const nv_wg_pack_params p)
{
	const struct nv_wg_img g = nv_wg_img_of(p.rows, p.k, p.order);
	const int64_t kp = nv_wg_k_pad(p.k), mp = nv_wg_m_pad(p.rows);
	const int64_t vwords = (p.order ? mp : (int64_t)p.rows) * (kp / 4), mwords = g.k_iters * mp * 2;
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < vwords) {
		int64_t r, c; /* row and value column of the word's first value */
		if (p.order) {
			nv_wg_img_position(g, i * 4, &r, &c);
		} else {
			r = i / (kp / 4);
			c = 2 * (i % (kp / 4));
		}
		const uint16_t *src = (const uint16_t *)p.src + r * (p.k / 2);
		const bool row = r < p.rows;
		uint32_t lo = row && c < p.k / 2 ? src[c] : 0, hi = row && c + 1 < p.k / 2 ? src[c + 1] : 0;
		((uint32_t *)p.dst)[i] = lo | hi << 16;
	} else if (i < vwords + mwords) {
		const int64_t j = i - vwords;
		int64_t kb, r;
		nv_wg_img_meta_position(g, j, &r, &kb);
		((uint32_t *)p.dst_meta)[j] = nv_wg_meta_word((const uint32_t *)p.src_meta, p.meta_words,
							      p.rows, p.k / 4, kb, r, (int)(j & 1));
	}
}

/* One thread per 16-byte chunk of the dense stage images: the chunk's 8
 * values from row r of the row-major A [rows][k] (zeros past K and past
 * the last row), by one 16-byte load where the row's start allows. */
extern "C" __global__ void __launch_bounds__(256) nv_wg_pack_dense(const nv_wg_pack_params p)
{
	const struct nv_wg_img g = nv_wg_img_of(p.rows, p.k, p.order);
	const int64_t chunks = nv_wg_dimg_bytes(p.rows, p.k, 2) / 16;
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= chunks)
		return;
	int64_t r, v;
	nv_wg_dimg_position(g, i * 16, &r, &v);
	const uint16_t *src = (const uint16_t *)p.src + r * p.k;
	uint4 out = make_uint4(0, 0, 0, 0);
	if (r < p.rows && v + 8 <= p.k && p.k % 8 == 0) {
		out = *(const uint4 *)(src + v);
	} else if (r < p.rows) {
		uint16_t h[8];
		for (int j = 0; j < 8; j++)
			h[j] = v + j < p.k ? src[v + j] : 0;
		out.x = h[0] | (uint32_t)h[1] << 16;
		out.y = h[2] | (uint32_t)h[3] << 16;
		out.z = h[4] | (uint32_t)h[5] << 16;
		out.w = h[6] | (uint32_t)h[7] << 16;
	}
	((uint4 *)p.dst)[i] = out;
}
