/* Host checks of the NVIDIA kernels' layouts, lane by lane (no GPU).
 *
 * An emulator of the six tensor-core instructions and of ldmatrix, written
 * from the layout tables of reference/nvidia-sparse-mma.md (not from
 * nv_layout.h), runs the kernels' data path on the host: A and its 2:4
 * metadata packed by nv_layout.h, pipeline stages filled the way the kernel
 * fills them (swizzled B chunks, zero-filled edges), fragments gathered
 * with the kernel's lane address functions, and the accumulators scattered
 * with its output mapping.  The result must equal the float64 reference on
 * random data, random 2:4 patterns and shapes that do not fill a tile.
 * Also: the swizzle is bank-conflict free for every ldmatrix the kernels
 * issue, the CTA rasterisation is a bijection, kernel selection and the
 * image lookup behave as documented. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu_gemm.h"
#include "nv_layout.h"
#include "nv_plan.h"
#include "sparse24.h"

/* ---- random data ---------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 16);
}

/* A random non-zero element of type t, stored at p[i]. */
static void put_random(void *p, enum mfma_dtype t, size_t i)
{
	if (t == MFMA_DT_I8) {
		int v;
		do
			v = (int)(rnd() % 255) - 127;
		while (v == 0);
		((int8_t *)p)[i] = (int8_t)v;
		return;
	}
	float f;
	do
		f = (float)((int)(rnd() % 2001) - 1000) / 512.0f;
	while (f == 0.0f);
	uint16_t h = t == MFMA_DT_BF16 ? mfma_f32_to_bf16(f) : mfma_f32_to_f16(f);
	((uint16_t *)p)[i] = h;
}

static enum mfma_dtype kind_dtype(int kind)
{
	return kind <= NV_F16_SPARSE ? MFMA_DT_F16 : kind <= NV_BF16_SPARSE ? MFMA_DT_BF16 : MFMA_DT_I8;
}

/* ---- instruction emulator (from the reference tables) ---------------- */

static double elem16(int kind, uint32_t reg, int hi)
{
	uint16_t h = (uint16_t)(hi ? reg >> 16 : reg & 0xffffu);
	return kind_dtype(kind) == MFMA_DT_BF16 ? mfma_bf16_to_f32(h) : mfma_f16_to_f32(h);
}

static double elem8(uint32_t reg, int byte)
{
	return (double)(int8_t)(uint8_t)(reg >> (8 * byte));
}

/* Expands row r of a compressed A (two kept values per chunk) with the
 * chunk's nibble into the dense row. */
static void expand(double *dense, const double *comp, int chunks, const unsigned *nib)
{
	for (int c = 0; c < chunks; c++) {
		unsigned i0 = nib[c] & 3u, i1 = nib[c] >> 2;
		assert_true(i0 < i1); /* ::ordered_metadata needs ordered pairs */
		for (int j = 0; j < 4; j++)
			dense[4 * c + j] = 0.0;
		dense[4 * c + i0] = comp[2 * c];
		dense[4 * c + i1] = comp[2 * c + 1];
	}
}

/* d[lane][r] += A.B for one m16n8 instruction of the given kind. */
static void emu_mma(int kind, uint32_t a[32][4], uint32_t b[32][4], const uint32_t e[32],
		    double d[32][4])
{
	static double A[16][64], B[64][8];
	const int sparse = nv_kind_sparse(kind), kk = nv_kind_kstep(kind);
	memset(A, 0, sizeof(A));
	memset(B, 0, sizeof(B));
	if (nv_kind_esize(kind) == 2) {
		double Ac[16][16];
		for (int lane = 0; lane < 32; lane++) {
			int g = lane >> 2, t = lane & 3;
			/* A (or compressed A): a0 row g, a1 row g+8, a2/a3 the
			 * same rows 8 columns on. */
			for (int h = 0; h < 2; h++) {
				Ac[g][2 * t + h] = elem16(kind, a[lane][0], h);
				Ac[g + 8][2 * t + h] = elem16(kind, a[lane][1], h);
				Ac[g][2 * t + 8 + h] = elem16(kind, a[lane][2], h);
				Ac[g + 8][2 * t + 8 + h] = elem16(kind, a[lane][3], h);
			}
			int nb = sparse ? 4 : 2;
			for (int j = 0; j < nb; j++)
				for (int h = 0; h < 2; h++)
					B[2 * t + 8 * j + h][g] = elem16(kind, b[lane][j], h);
		}
		if (!sparse) {
			for (int r = 0; r < 16; r++)
				for (int c = 0; c < 16; c++)
					A[r][c] = Ac[r][c];
		} else {
			/* Selector 0: lanes (g,0) and (g,1) hand chunks 0-3 and 4-7;
			 * low half row g, high half row g+8. */
			for (int g = 0; g < 8; g++) {
				unsigned nib_g[8], nib_g8[8];
				for (int c = 0; c < 8; c++) {
					uint32_t w = e[4 * g + (c >> 2)];
					nib_g[c] = (w >> (4 * (c & 3))) & 0xfu;
					nib_g8[c] = (w >> (16 + 4 * (c & 3))) & 0xfu;
				}
				expand(A[g], Ac[g], 8, nib_g);
				expand(A[g + 8], Ac[g + 8], 8, nib_g8);
			}
		}
	} else {
		double Ac[16][32];
		for (int lane = 0; lane < 32; lane++) {
			int g = lane >> 2, t = lane & 3;
			for (int q = 0; q < 4; q++)
				for (int y = 0; y < 4; y++)
					Ac[g + 8 * (q & 1)][4 * t + 16 * (q >> 1) + y] = elem8(a[lane][q], y);
			int nb = sparse ? 4 : 2;
			for (int j = 0; j < nb; j++)
				for (int y = 0; y < 4; y++)
					B[16 * j + 4 * t + y][g] = elem8(b[lane][j], y);
		}
		if (!sparse) {
			for (int r = 0; r < 16; r++)
				for (int c = 0; c < 32; c++)
					A[r][c] = Ac[r][c];
		} else {
			/* All four lanes: T0 row g chunks 0-7, T1 row g+8 chunks
			 * 0-7, T2 row g chunks 8-15, T3 row g+8 chunks 8-15. */
			for (int g = 0; g < 8; g++) {
				unsigned nib_g[16], nib_g8[16];
				for (int c = 0; c < 16; c++) {
					int hi = c >> 3;
					nib_g[c] = (e[4 * g + 2 * hi] >> (4 * (c & 7))) & 0xfu;
					nib_g8[c] = (e[4 * g + 2 * hi + 1] >> (4 * (c & 7))) & 0xfu;
				}
				expand(A[g], Ac[g], 16, nib_g);
				expand(A[g + 8], Ac[g + 8], 16, nib_g8);
			}
		}
	}
	for (int lane = 0; lane < 32; lane++) {
		int g = lane >> 2, t = lane & 3;
		for (int r = 0; r < 4; r++) {
			int row = g + 8 * (r >> 1), col = 2 * t + (r & 1);
			double s = 0.0;
			for (int x = 0; x < kk; x++)
				s += A[row][x] * B[x][col];
			d[lane][r] += s;
		}
	}
}

/* ldmatrix.x4: matrix i's row j comes from the address of lane 8i + j;
 * a row is 8 b16 elements. */
static void emu_ldsm_x4(const uint8_t *smem, const unsigned addr[32], int trans, uint32_t out[32][4])
{
	for (int T = 0; T < 32; T++)
		for (int i = 0; i < 4; i++) {
			uint16_t e0, e1;
			if (!trans) {
				const uint8_t *row = smem + addr[8 * i + T / 4];
				memcpy(&e0, row + 4 * (T % 4), 2);
				memcpy(&e1, row + 4 * (T % 4) + 2, 2);
			} else {
				memcpy(&e0, smem + addr[8 * i + 2 * (T % 4)] + 2 * (T / 4), 2);
				memcpy(&e1, smem + addr[8 * i + 2 * (T % 4) + 1] + 2 * (T / 4), 2);
			}
			out[T][i] = (uint32_t)e0 | (uint32_t)e1 << 16;
		}
}

/* ---- the kernel's data path, emulated -------------------------------- */

struct problem {
	int kind;
	int m, n, k;
	void *a;        /* dense A, or canonical values */
	uint32_t *meta; /* canonical meta */
	void *b;        /* B [k][n] */
};

static void make_problem(struct problem *p, int kind, int m, int n, int k)
{
	enum mfma_dtype t = kind_dtype(kind);
	size_t es = mfma_dtype_size(t);
	p->kind = kind;
	p->m = m;
	p->n = n;
	p->k = k;
	p->b = malloc((size_t)k * n * es);
	for (size_t i = 0; i < (size_t)k * n; i++)
		put_random(p->b, t, i);
	if (!nv_kind_sparse(kind)) {
		p->a = malloc((size_t)m * k * es);
		p->meta = NULL;
		for (size_t i = 0; i < (size_t)m * k; i++)
			put_random(p->a, t, i);
		return;
	}
	/* A random 2:4 pattern: any of the six ordered pairs per group. */
	void *dense = calloc((size_t)m * k, es);
	for (int r = 0; r < m; r++)
		for (int g = 0; g < k / 4; g++) {
			int i0 = (int)(rnd() % 4), i1;
			do
				i1 = (int)(rnd() % 4);
			while (i1 == i0);
			put_random(dense, t, (size_t)r * k + 4 * g + i0);
			put_random(dense, t, (size_t)r * k + 4 * g + i1);
		}
	p->a = malloc(sparse24_values_bytes(m, k, es));
	p->meta = malloc(sparse24_meta_bytes(m, k));
	assert_int_equal(sparse24_compress(dense, t, m, k, p->a, p->meta, NULL, NULL), 0);
	free(dense);
}

static void free_problem(struct problem *p)
{
	free(p->a);
	free(p->meta);
	free(p->b);
}

/* Runs the whole GEMM through the emulated kernel with the given tile and
 * returns D (m x n doubles, alpha = 1, beta = 0). */
static double *emulate(const struct problem *p, int tile)
{
	const int kind = p->kind, es = nv_kind_esize(kind), sparse = nv_kind_sparse(kind);
	struct nv_tile_shape sh;
	nv_tile_shape(kind, tile, &sh);
	const int64_t ktiles = nv_a_ktiles(kind, p->k), mtiles = nv_meta_tiles(kind, p->k);
	const int64_t strips = nv_m_pad(p->m) / 16;
	const int64_t kpad = nv_k_pad(kind, p->k);

	/* Packed A and meta, as nv_pack_a / nv_pack_meta write them. */
	uint8_t *pa = malloc((size_t)nv_packed_a_bytes(kind, p->m, p->k));
	int64_t row_bytes = (int64_t)(sparse ? p->k / 2 : p->k) * es;
	for (int64_t s = 0; s < strips; s++)
		for (int64_t kt = 0; kt < ktiles; kt++)
			for (unsigned lane = 0; lane < 32; lane++)
				for (unsigned q = 0; q < 4; q++) {
					uint32_t w = nv_pack_a_word(p->a, row_bytes, p->m, s, kt, lane, q);
					memcpy(pa + ((s * ktiles + kt) * 32 + lane) * 16 + 4 * q, &w, 4);
				}
	uint32_t *pm = NULL;
	if (sparse) {
		pm = malloc((size_t)nv_packed_meta_bytes(kind, p->m, p->k));
		for (int64_t s = 0; s < strips; s++)
			for (int64_t mt = 0; mt < mtiles; mt++)
				for (unsigned lane = 0; lane < 32; lane++)
					pm[(s * mtiles + mt) * 32 + lane] =
						nv_pack_meta_word(p->meta, (int)sparse24_meta_words(p->k), p->m,
								  p->k / 4, es == 1, s, mt, lane);
	}
	/* B as the kernel reads it: 16-bit row-major with ldb a multiple of
	 * 8; 8-bit transposed to [n][kpad] with zeros past k. */
	int ldb;
	uint8_t *b;
	if (es == 2) {
		ldb = (int)nv_round_up(p->n, 8);
		b = calloc((size_t)p->k * ldb, 2);
		for (int r = 0; r < p->k; r++)
			memcpy(b + (size_t)r * ldb * 2, (uint8_t *)p->b + (size_t)r * p->n * 2, (size_t)p->n * 2);
	} else {
		ldb = (int)kpad;
		b = calloc((size_t)p->n * ldb, 1);
		for (int r = 0; r < p->k; r++)
			for (int c = 0; c < p->n; c++)
				b[(size_t)c * ldb + r] = ((uint8_t *)p->b)[(size_t)r * p->n + c];
	}

	const int a_st = NV_A_STAGE_BYTES(sh.bm, sparse);
	const int m_st = NV_META_STAGE_BYTES(sh.bm, es, sparse);
	const int b_st = NV_B_STAGE_BYTES(sh.bn);
	const int tps = a_st / (sh.bm / 16) / NV_TILE_BYTES;
	const int mps = sparse ? m_st / (sh.bm / 16) / NV_META_TILE_BYTES : 0;
	const unsigned cpr = nv_b_cpr(kind, (unsigned)sh.bn), brows = nv_b_rows(kind, (unsigned)sh.bn);
	uint8_t *stage = malloc((size_t)(a_st + m_st + b_st));
	const int tiles_m = (p->m + sh.bm - 1) / sh.bm, tiles_n = (p->n + sh.bn - 1) / sh.bn;
	const int k_iters = (int)(kpad / (NV_BK_BYTES / es));
	const int wm_ = sh.bm / sh.warps_m, wn_ = sh.bn / sh.warps_n, mtn = wm_ / 16, ntn = wn_ / 8;
	const int nbl = nv_kind_nbl(kind);
	const int nwarps = sh.warps_m * sh.warps_n;
	double *acc = calloc((size_t)nwarps * mtn * ntn * 32 * 4, sizeof(double));
	double *out = calloc((size_t)p->m * p->n, sizeof(double));

	for (int tile_id = 0; tile_id < tiles_m * tiles_n; tile_id++) {
		int tm, tn;
		nv_raster(tile_id, tiles_m, tiles_n, &tm, &tn);
		const int m0 = tm * sh.bm, n0 = tn * sh.bn;
		memset(acc, 0, (size_t)nwarps * mtn * ntn * 32 * 4 * sizeof(double));
		for (int it = 0; it < k_iters; it++) {
			memset(stage, 0xcd, (size_t)(a_st + m_st + b_st)); /* poison */
			for (int s = 0; s < sh.bm / 16; s++)
				memcpy(stage + s * tps * NV_TILE_BYTES,
				       pa + (((int64_t)m0 / 16 + s) * ktiles + (int64_t)it * tps) * NV_TILE_BYTES,
				       (size_t)tps * NV_TILE_BYTES);
			for (int s = 0; s < sh.bm / 16 && sparse; s++)
				memcpy(stage + a_st + s * mps * NV_META_TILE_BYTES,
				       (uint8_t *)pm + (((int64_t)m0 / 16 + s) * mtiles + (int64_t)it * mps) *
							       NV_META_TILE_BYTES,
				       (size_t)mps * NV_META_TILE_BYTES);
			uint8_t *sb = stage + a_st + m_st;
			for (unsigned r = 0; r < brows; r++)
				for (unsigned c = 0; c < cpr; c++) {
					uint8_t *dst = sb + nv_swz(r, c, cpr);
					const uint8_t *src;
					int ok;
					if (es == 2) {
						int kk = it * 64 + (int)r, nn = n0 + 8 * (int)c;
						ok = kk < p->k && nn < p->n;
						src = b + ((size_t)kk * ldb + nn) * 2;
					} else {
						int nn = n0 + (int)r;
						ok = nn < p->n;
						src = b + (size_t)nn * ldb + (size_t)it * NV_BK_BYTES + 16 * c;
					}
					if (ok)
						memcpy(dst, src, 16);
					else
						memset(dst, 0, 16);
				}
			for (int warp = 0; warp < nwarps; warp++) {
				int wm = warp / sh.warps_n, wn = warp % sh.warps_n;
				for (int ks = 0; ks < tps; ks++) {
					for (int mt = 0; mt < mtn; mt++) {
						uint32_t afr[32][4], efr[32];
						for (unsigned lane = 0; lane < 32; lane++) {
							memcpy(afr[lane],
							       stage + nv_stage_a_off(sparse, (unsigned)(wm * mtn + mt),
										      (unsigned)ks, lane),
							       16);
							efr[lane] = 0;
							if (sparse)
								memcpy(&efr[lane],
								       stage + a_st +
									       nv_stage_meta_off(kind, (unsigned)(wm * mtn + mt),
												 (unsigned)ks, lane),
								       4);
						}
						for (int nb = 0; nb < ntn / nbl; nb++) {
							unsigned addr[32];
							uint32_t bfr[32][4];
							for (unsigned lane = 0; lane < 32; lane++)
								addr[lane] = nv_ldm_b_off(kind, (unsigned)sh.bn, (unsigned)ks,
											  (unsigned)(wn * wn_ + nb * 8 * nbl),
											  lane);
							emu_ldsm_x4(sb, addr, es == 2, bfr);
							for (int sub = 0; sub < nbl; sub++) {
								uint32_t bsub[32][4];
								for (int lane = 0; lane < 32; lane++)
									for (int j = 0; j < 4; j++)
										bsub[lane][j] = sparse ? bfr[lane][j]
												       : bfr[lane][(2 * sub + j) & 3];
								double(*d)[4] = (double(*)[4])(acc + ((((size_t)warp * mtn + mt) * ntn +
												       (size_t)(nb * nbl + sub)) *
												      32 * 4));
								emu_mma(kind, afr, bsub, efr, d);
							}
						}
					}
				}
			}
		}
		for (int warp = 0; warp < nwarps; warp++) {
			int wm = warp / sh.warps_n, wn = warp % sh.warps_n;
			for (int mt = 0; mt < mtn; mt++)
				for (int nt = 0; nt < ntn; nt++)
					for (unsigned lane = 0; lane < 32; lane++)
						for (unsigned r = 0; r < 4; r++) {
							unsigned rr, cc;
							nv_acc_pos(lane, r, &rr, &cc);
							int row = m0 + wm * wm_ + mt * 16 + (int)rr;
							int col = n0 + wn * wn_ + nt * 8 + (int)cc;
							if (row < p->m && col < p->n)
								out[(size_t)row * p->n + col] =
									acc[((((size_t)warp * mtn + mt) * ntn + nt) * 32 + lane) * 4 + r];
						}
		}
	}
	free(acc);
	free(stage);
	free(b);
	free(pa);
	free(pm);
	return out;
}

static void check_emulated(int kind, int tile, int m, int n, int k)
{
	struct problem p;
	make_problem(&p, kind, m, n, k);
	enum mfma_dtype t = kind_dtype(kind);
	struct mfma_gemm g = {
		.m = (uint32_t)m, .n = (uint32_t)n, .k = (uint32_t)k,
		.in_dtype = t, .out_dtype = t == MFMA_DT_I8 ? MFMA_DT_I32 : MFMA_DT_F32,
		.alpha = 1.0f, .beta = 0.0f, .a_sparse = nv_kind_sparse(kind),
		.a = p.a, .a_meta = p.meta, .b = p.b,
	};
	double *ref = malloc((size_t)m * n * sizeof(double));
	void *dummy = malloc((size_t)m * n * 4); /* D: the reference only checks it is there */
	g.d = dummy;
	assert_int_equal(cpu_gemm_ref_f64(&g, ref), 0);
	free(dummy);
	double *got = emulate(&p, tile);
	double num = 0.0, den = 0.0;
	for (size_t i = 0; i < (size_t)m * n; i++) {
		double e = got[i] - ref[i];
		num += e * e;
		den += ref[i] * ref[i];
	}
	double rel = sqrt(num / den);
	if (!(rel < 1e-12))
		fail_msg("%s tile %s %dx%dx%d: relative error %g", nv_kind_name(kind), nv_tile_name(tile), m,
			 n, k, rel);
	free(got);
	free(ref);
	free_problem(&p);
}

static void test_emulated_all_kinds(void **state)
{
	(void)state;
	for (int kind = 0; kind < NV_KIND_COUNT; kind++) {
		int sparse = nv_kind_sparse(kind);
		/* Odd shapes: nothing fills a tile; K not a multiple of BK
		 * (sparse K a multiple of 4 only, dense K odd). */
		int k1 = sparse ? 100 : 77, k2 = sparse ? 196 : 131;
		check_emulated(kind, NV_TILE_n16, 37, 13, k1);
		check_emulated(kind, NV_TILE_n32, 19, 29, k2);
		check_emulated(kind, NV_TILE_n64, 133, 61, k1);
		check_emulated(kind, NV_TILE_big, 37, 21, k2);
		/* Several tiles both ways, and more than one K iteration. */
		check_emulated(kind, NV_TILE_big, 300, 150, sparse ? 260 : 261);
		check_emulated(kind, NV_TILE_n16, 261, 40, sparse ? 268 : 270);
	}
}

/* Every ldmatrix the kernels issue reads, for each of its four 8x8
 * matrices, eight rows in eight different 16-byte bank groups. */
static void test_swizzle_conflict_free(void **state)
{
	(void)state;
	for (int kind = 0; kind < NV_KIND_COUNT; kind++)
		for (int tile = 0; tile < NV_TILE_COUNT; tile++) {
			struct nv_tile_shape sh;
			nv_tile_shape(kind, tile, &sh);
			const int ksteps = NV_BK_BYTES / nv_kind_esize(kind) / nv_kind_kstep(kind);
			const int wn = sh.bn / sh.warps_n, nbl = nv_kind_nbl(kind);
			for (int ks = 0; ks < ksteps; ks++)
				for (int n_off = 0; n_off < sh.bn; n_off += 8 * nbl) {
					(void)wn;
					for (int i = 0; i < 4; i++) {
						unsigned seen = 0;
						for (unsigned j = 0; j < 8; j++) {
							unsigned a = nv_ldm_b_off(kind, (unsigned)sh.bn, (unsigned)ks,
										  (unsigned)n_off, 8u * (unsigned)i + j);
							assert_int_equal(a % 16, 0);
							seen |= 1u << ((a / 16) % 8);
						}
						if (seen != 0xffu)
							fail_msg("%s %s ks %d n %d matrix %d: bank groups 0x%x",
								 nv_kind_name(kind), nv_tile_name(tile), ks, n_off, i, seen);
					}
				}
		}
}

static void test_swizzle_is_permutation(void **state)
{
	(void)state;
	const unsigned cprs[] = { 2, 4, 8, 16 };
	for (size_t x = 0; x < sizeof(cprs) / sizeof(cprs[0]); x++) {
		unsigned cpr = cprs[x], rows = 64;
		uint8_t *hit = calloc(rows * cpr, 1);
		for (unsigned r = 0; r < rows; r++)
			for (unsigned c = 0; c < cpr; c++) {
				unsigned o = nv_swz(r, c, cpr) / 16;
				assert_true(o < rows * cpr);
				assert_int_equal(o / cpr, r); /* stays in its row */
				hit[o]++;
			}
		for (unsigned i = 0; i < rows * cpr; i++)
			assert_int_equal(hit[i], 1);
		free(hit);
	}
}

static void test_raster_bijection(void **state)
{
	(void)state;
	const int shapes[][2] = { { 1, 1 }, { 3, 5 }, { 8, 8 }, { 17, 3 }, { 32, 64 }, { 9, 1 } };
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		int tm = shapes[s][0], tn = shapes[s][1];
		uint8_t *hit = calloc((size_t)tm * tn, 1);
		for (int t = 0; t < tm * tn; t++) {
			int pm, pn;
			nv_raster(t, tm, tn, &pm, &pn);
			assert_true(pm >= 0 && pm < tm && pn >= 0 && pn < tn);
			hit[pm * tn + pn]++;
		}
		for (int i = 0; i < tm * tn; i++)
			assert_int_equal(hit[i], 1);
		free(hit);
	}
}

static void test_plan(void **state)
{
	(void)state;
	const int occ_all[NV_TILE_COUNT] = { 1, 1, 2, 3 };
	struct nv_plan p;
	/* Large square: big tiles, no split. */
	assert_int_equal(nv_plan_make(NV_F16_SPARSE, 8192, 8192, 8192, 132, occ_all, -1, &p), 0);
	assert_int_equal(p.tile, NV_TILE_big);
	assert_int_equal(p.splits, 1);
	assert_int_equal(p.k_iters, 128);
	assert_int_equal(p.ws_bytes, 0);
	/* Decode: skinny tile by N, K split to fill the GPU, every split
	 * non-empty and the splits covering K. */
	const int ns[] = { 1, 16, 17, 32, 33, 64, 65 };
	const int want[] = { NV_TILE_n16, NV_TILE_n16, NV_TILE_n32, NV_TILE_n32,
			     NV_TILE_n64, NV_TILE_n64, NV_TILE_big };
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		assert_int_equal(nv_plan_make(NV_F16_SPARSE, 4096, ns[i], 14336, 132, occ_all, -1, &p), 0);
		assert_int_equal(p.tile, want[i]);
		assert_true(p.splits >= 1);
		assert_true((int64_t)p.splits * p.iters_per_split >= p.k_iters);
		assert_true((int64_t)(p.splits - 1) * p.iters_per_split < p.k_iters);
		if (p.splits > 1)
			assert_true(p.ws_bytes > 0);
	}
	assert_int_equal(nv_plan_make(NV_F16_SPARSE, 14336, 16, 4096, 132, occ_all, -1, &p), 0);
	assert_true(p.splits > 1 && p.iters_per_split >= 4);
	/* s8: BK is 128 elements. */
	assert_int_equal(nv_plan_make(NV_S8_SPARSE, 100, 100, 260, 132, occ_all, -1, &p), 0);
	assert_int_equal(p.k_iters, 3);
	/* An unusable variant is replaced; none usable is -ENOTSUP. */
	const int occ_nobig[NV_TILE_COUNT] = { 0, 1, 1, 1 };
	assert_int_equal(nv_plan_make(NV_F16_DENSE, 4096, 4096, 4096, 132, occ_nobig, -1, &p), 0);
	assert_int_equal(p.tile, NV_TILE_n64);
	const int occ_none[NV_TILE_COUNT] = { 0, 0, 0, 0 };
	assert_int_equal(nv_plan_make(NV_F16_DENSE, 64, 64, 64, 132, occ_none, -1, &p), -ENOTSUP);
	/* Bad arguments. */
	assert_int_equal(nv_plan_make(NV_F16_SPARSE, 64, 64, 66, 132, occ_all, -1, &p), -EINVAL);
	assert_int_equal(nv_plan_make(NV_F16_DENSE, 0, 64, 64, 132, occ_all, -1, &p), -EINVAL);
	assert_int_equal(nv_plan_make(7, 64, 64, 64, 132, occ_all, -1, &p), -EINVAL);
	assert_int_equal(nv_plan_make(NV_F16_DENSE, 64, 64, 64, 132, occ_all, 9, &p), -EINVAL);
}

static void test_image_find(void **state)
{
	(void)state;
	static const unsigned char x[1];
	const struct nv_image imgs[] = {
		{ "f16", 80, 0, x, x }, { "f16", 90, 0, x, x }, { "f16", 90, 1, x, x },
		{ "util", 80, 0, x, x },
	};
	const size_t n = sizeof(imgs) / sizeof(imgs[0]);
	assert_ptr_equal(nv_image_find(imgs, n, "f16", 90), &imgs[1]);  /* exact cubin */
	assert_ptr_equal(nv_image_find(imgs, n, "f16", 80), &imgs[0]);
	assert_ptr_equal(nv_image_find(imgs, n, "f16", 86), &imgs[0]);  /* same major */
	assert_ptr_equal(nv_image_find(imgs, n, "f16", 100), &imgs[2]); /* PTX for the JIT */
	assert_ptr_equal(nv_image_find(imgs, n, "f16", 75), NULL);
	assert_ptr_equal(nv_image_find(imgs, n, "util", 90), NULL);     /* no PTX, other major */
	assert_ptr_equal(nv_image_find(imgs, n, "s8", 90), NULL);
}

static void test_built_images(void **state)
{
	(void)state;
	/* The build embedded every unit for sm_80 and sm_90 or for whatever
	 * nvidia_archs named: at least one image per unit, none empty, PTX
	 * NUL-terminated. */
	for (int u = 0; u < NV_UNIT_COUNT; u++) {
		int found = 0;
		for (size_t i = 0; i < nv_image_count; i++) {
			const struct nv_image *im = &nv_images[i];
			if (strcmp(im->unit, nv_unit_name(u)) != 0)
				continue;
			found++;
			assert_true(im->end - im->data > 1);
			if (im->is_ptx) {
				assert_int_equal(im->end[-1], 0);
				assert_non_null(strstr((const char *)im->data, ".target"));
			}
		}
		assert_true(found > 0);
	}
}

static void test_pack_pads(void **state)
{
	(void)state;
	/* Padding rows and groups of packed meta are the legal pair 0x4
	 * (positions 0, 1) and padding values are zero. */
	uint32_t meta[2] = { 0xeu, 0xeu }; /* one row, k = 4: group 0 = (2,3) */
	for (unsigned lane = 0; lane < 32; lane++) {
		uint32_t w16 = nv_pack_meta_word(meta, 1, 1, 1, 0, 0, 0, lane);
		uint32_t w8 = nv_pack_meta_word(meta, 1, 1, 1, 1, 0, 0, lane);
		for (int j = 0; j < 8; j++) {
			unsigned n16 = (w16 >> (4 * j)) & 0xfu, n8 = (w8 >> (4 * j)) & 0xfu;
			int first16 = lane == 0 && j == 0; /* row 0, group 0 */
			int first8 = lane == 0 && j == 0;
			assert_int_equal(n16, first16 ? 0xeu : 0x4u);
			assert_int_equal(n8, first8 ? 0xeu : 0x4u);
		}
	}
	uint8_t src[3] = { 1, 2, 3 };
	for (unsigned lane = 0; lane < 32; lane++)
		for (unsigned q = 0; q < 4; q++) {
			uint32_t w = nv_pack_a_word(src, 3, 1, 0, 0, lane, q);
			uint32_t want = (lane == 0 && q == 0) ? 0x030201u : 0u;
			assert_int_equal(w, want);
		}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_swizzle_is_permutation),
		cmocka_unit_test(test_swizzle_conflict_free),
		cmocka_unit_test(test_raster_bijection),
		cmocka_unit_test(test_plan),
		cmocka_unit_test(test_image_find),
		cmocka_unit_test(test_built_images),
		cmocka_unit_test(test_pack_pads),
		cmocka_unit_test(test_emulated_all_kinds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
