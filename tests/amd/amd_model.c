/* See amd_model.h.  Each step below names the device function it mirrors
 * in kernels/amd/amd_gemm.hip. */
#include "amd_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amd_kernels.h"
#include "sparse24.h"

struct model {
	struct amd_cfg c;
	const struct emu_instr *ins;
	const struct mfma_gemm *g;
	const uint8_t *a;    /* dense A or 2:4 values */
	const uint8_t *meta; /* SMFMAC: amd meta; expansion: canonical meta */
	uint8_t *lds;
	unsigned seed;
	/* acc[wave][mi][ni][lane][q] */
	uint32_t acc[AMD_THREADS / AMD_WAVE][AMD_TILES][AMD_TILES][EMU_LANES][4];
};

/* load_chunk: the 16 bytes at (row, col), zero outside the matrix. */
static void load_chunk(const uint8_t *base, uint32_t rows, uint32_t cols, uint64_t row,
		       uint64_t col, unsigned es, uint8_t out[AMD_CHUNK])
{
	memset(out, 0, AMD_CHUNK);
	if (row >= rows)
		return;
	for (unsigned e = 0; e < AMD_CHUNK / es; e++)
		if (col + e < cols)
			memcpy(out + e * es, base + (row * cols + col + e) * es, es);
}

static uint32_t elem_get(const uint8_t *p, unsigned e, unsigned es)
{
	return es == 2 ? (uint32_t)(p[2 * e] | p[2 * e + 1] << 8) : p[e];
}

static void elem_put(uint8_t *p, unsigned e, unsigned es, uint32_t x)
{
	p[e * es] = (uint8_t)x;
	if (es == 2)
		p[e * es + 1] = (uint8_t)(x >> 8);
}

/* stage_load + stage_store for every thread of the block, stage t into
 * buffer buf.  The buffer is first filled with junk, as LDS holds stale
 * data on the device: anything read but not written shows up. */
static void stage(struct model *s, uint64_t m0, uint64_t n0, uint32_t t, unsigned buf)
{
	const struct amd_cfg *c = &s->c;
	const struct mfma_gemm *g = s->g;
	uint8_t *base = s->lds + buf * amd_lds_stage_bytes(c);
	for (unsigned i = 0; i < amd_lds_stage_bytes(c); i++) {
		s->seed = s->seed * 1103515245u + 12345u;
		base[i] = (uint8_t)(s->seed >> 16);
	}
	uint32_t a_cols = c->sparse ? g->k / 2 : g->k;
	unsigned a_row = amd_lds_a_row_bytes(c), b_row = amd_lds_b_row_bytes(c);
	for (unsigned tid = 0; tid < AMD_THREADS; tid++) {
		for (unsigned i = 0; i < amd_a_chunks_per_thread(c); i++) {
			unsigned row, col;
			uint8_t ch[AMD_CHUNK];
			amd_a_chunk(c, tid, i, &row, &col);
			uint64_t gcol = (uint64_t)t * amd_stage_a_cols(c) + col;
			load_chunk(s->a, g->m, a_cols, m0 + row, gcol, c->es, ch);
			if (!c->expand) {
				memcpy(base + amd_lds_a_base(c) + amd_lds_swizzle(row, col * c->es, a_row), ch,
				       AMD_CHUNK);
				continue;
			}
			const uint32_t *meta = (const uint32_t *)s->meta;
			uint64_t group = gcol / 2, words = ((uint64_t)g->k / 4 + 7) / 8;
			uint32_t nib = 0x44444444u;
			if (m0 + row < g->m && group < g->k / 4)
				nib = amd_expand_nibbles(c, meta[(m0 + row) * words + group / 8], group);
			/* expand_half, both halves. */
			for (unsigned h = 0; h < 2; h++) {
				uint8_t out[AMD_CHUNK] = { 0 };
				unsigned per = AMD_CHUNK / c->es;
				for (unsigned e = 0; e < per; e++) {
					unsigned d = h * per + e, grp = d / 4;
					int pick = amd_expand_pick((nib >> (4 * grp)) & 0xfu, d % 4);
					uint32_t x = pick < 0 ? 0u : elem_get(ch, 2 * grp + (unsigned)pick, c->es);
					elem_put(out, e, c->es, x);
				}
				memcpy(base + amd_lds_a_base(c) +
					       amd_lds_swizzle(row, 2 * col * c->es + h * AMD_CHUNK, a_row),
				       out, AMD_CHUNK);
			}
		}
		for (unsigned i = 0; i < amd_b_chunks_per_thread(c); i++) {
			unsigned k, col;
			uint8_t ch[AMD_CHUNK];
			amd_b_chunk(c, tid, i, &k, &col);
			load_chunk(g->b, g->k, g->n, (uint64_t)t * c->bk + k, n0 + col, c->es, ch);
			for (unsigned e = 0; e < AMD_CHUNK / c->es; e++)
				memcpy(base + amd_lds_b_base(c) + amd_lds_swizzle(col + e, k * c->es, b_row),
				       ch + e * c->es, c->es);
		}
		if (c->smfmac && tid < amd_meta_words(c)) {
			unsigned block, byte;
			amd_meta_word(c, tid, &block, &byte);
			uint64_t rb = m0 / 16 + block;
			uint32_t w = 0x44444444u;
			if (rb < ((uint64_t)g->m + 15) / 16)
				memcpy(&w, s->meta + amd_meta_offset(c, g->k, rb, t, 0) + byte, 4);
			memcpy(base + amd_lds_meta_word_off(c, block, byte), &w, 4);
		}
	}
}

/* load_a / load_b / load_idx for one lane. */
static void lane_a(const struct model *s, const uint8_t *base, unsigned wrow, unsigned mi,
		   unsigned step, unsigned lane, uint32_t out[EMU_A_REGS])
{
	unsigned bytes;
	unsigned off = amd_lds_frag_a_off(&s->c, wrow, mi, step, lane, &bytes);
	memset(out, 0, EMU_A_REGS * 4);
	memcpy(out, base + off, bytes);
}

static void lane_b(const struct model *s, const uint8_t *base, unsigned wcol, unsigned ni,
		   unsigned step, unsigned lane, uint32_t out[EMU_B_REGS])
{
	const struct amd_cfg *c = &s->c;
	memset(out, 0, EMU_B_REGS * 4);
	for (unsigned j = 0; j < amd_frag_b_runs(c); j++) {
		unsigned word;
		unsigned off = amd_lds_frag_b_off(c, wcol, ni, step, lane, j, &word);
		memcpy(out + word, base + off, c->b_run * c->es);
	}
}

static uint32_t lane_idx(const struct model *s, const uint8_t *base, unsigned wrow, unsigned mi,
			 unsigned lane)
{
	const struct amd_cfg *c = &s->c;
	uint32_t v = 0;
	memcpy(&v, base + amd_lds_frag_idx_off(c, wrow, mi, lane), amd_meta_field_bytes(c));
	return v;
}

/* The compute phase of one stage, every wave. */
static int compute(struct model *s, uint64_t m0, uint64_t n0, unsigned buf, char *err,
		   size_t errlen)
{
	const struct amd_cfg *c = &s->c;
	const uint8_t *base = s->lds + buf * amd_lds_stage_bytes(c);
	static uint32_t fa[AMD_TILES][EMU_LANES][EMU_A_REGS], fb[AMD_TILES][EMU_LANES][EMU_B_REGS];
	static uint32_t idx[AMD_TILES][EMU_LANES];
	for (unsigned wave = 0; wave < AMD_THREADS / AMD_WAVE; wave++) {
		unsigned wrow, wcol;
		amd_wave_origin(wave, &wrow, &wcol);
		for (unsigned step = 0; step < c->bk / c->ki; step++) {
			for (unsigned lane = 0; lane < EMU_LANES; lane++) {
				for (unsigned mi = 0; mi < AMD_TILES; mi++) {
					lane_a(s, base, wrow, mi, step, lane, fa[mi][lane]);
					idx[mi][lane] = c->smfmac ? lane_idx(s, base, wrow, mi, lane) : 0;
				}
				for (unsigned ni = 0; ni < AMD_TILES; ni++)
					lane_b(s, base, wcol, ni, step, lane, fb[ni][lane]);
			}
			for (unsigned mi = 0; mi < AMD_TILES; mi++)
				for (unsigned ni = 0; ni < AMD_TILES; ni++) {
					if (m0 + wrow + 16 * mi >= s->g->m || n0 + wcol + 16 * ni >= s->g->n)
						continue; /* the kernel skips dead tiles */
					int rc = emu_run(s->ins, fa[mi], fb[ni], idx[mi], s->acc[wave][mi][ni],
							 err, errlen);
					if (rc < 0)
						return rc;
				}
		}
	}
	return 0;
}

/* store_d */
static void store(const struct model *s, uint64_t row, uint64_t col, uint32_t bits)
{
	const struct mfma_gemm *g = s->g;
	uint64_t i = row * g->n + col;
	bool has_c = g->beta != 0.0f && g->c;
	if (s->c.elem == AMD_E_I8) {
		uint32_t v = bits;
		if (has_c)
			v += (uint32_t)((const int32_t *)g->c)[i];
		memcpy((int32_t *)g->d + i, &v, 4);
		return;
	}
	float acc;
	memcpy(&acc, &bits, 4);
	float v = g->alpha * acc;
	if (has_c)
		v += g->beta * (float)mfma_load_f64(g->c, g->out_dtype, i);
	switch (g->out_dtype) {
	case MFMA_DT_F16: ((uint16_t *)g->d)[i] = mfma_f32_to_f16(v); break;
	case MFMA_DT_BF16: ((uint16_t *)g->d)[i] = mfma_f32_to_bf16(v); break;
	default: ((float *)g->d)[i] = v; break;
	}
}

int model_gemm(enum amd_arch arch, const struct emu_instr *ins, const struct mfma_gemm *g,
	       char *err, size_t errlen)
{
	enum amd_elem e = g->in_dtype == MFMA_DT_F16 ? AMD_E_F16
			: g->in_dtype == MFMA_DT_BF16 ? AMD_E_BF16
						       : AMD_E_I8;
	struct model *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->c = amd_cfg_get(arch, e, g->a_sparse);
	s->ins = ins;
	s->g = g;
	s->a = g->a;
	s->seed = 12345u;
	int rc = 0;
	uint8_t *conv = NULL;
	if (s->c.smfmac) {
		size_t size = amd_meta_bytes(&s->c, g->m, g->k);
		conv = malloc(size + 1);
		if (!conv || (rc = amd_meta_convert(&s->c, g->a_meta, g->m, g->k, conv, size)) < 0) {
			snprintf(err, errlen, "meta conversion failed");
			rc = rc < 0 ? rc : -ENOMEM;
			goto out;
		}
		s->meta = conv;
	} else if (s->c.expand) {
		s->meta = (const uint8_t *)g->a_meta;
	}
	s->lds = malloc(amd_lds_bytes(&s->c));
	if (!s->lds) {
		rc = -ENOMEM;
		goto out;
	}
	uint32_t nt = (g->k + s->c.bk - 1) / s->c.bk;
	for (uint64_t m0 = 0; m0 < g->m; m0 += AMD_BM)
		for (uint64_t n0 = 0; n0 < g->n; n0 += AMD_BN) {
			memset(s->acc, 0, sizeof(s->acc));
			for (uint32_t t = 0; t < nt; t++) {
				stage(s, m0, n0, t, t & 1);
				if ((rc = compute(s, m0, n0, t & 1, err, errlen)) < 0)
					goto out;
			}
			for (unsigned wave = 0; wave < AMD_THREADS / AMD_WAVE; wave++) {
				unsigned wrow, wcol;
				amd_wave_origin(wave, &wrow, &wcol);
				for (unsigned mi = 0; mi < AMD_TILES; mi++)
					for (unsigned ni = 0; ni < AMD_TILES; ni++)
						for (unsigned lane = 0; lane < EMU_LANES; lane++)
							for (unsigned q = 0; q < 4; q++) {
								unsigned row, col;
								amd_frag_d(lane, q, &row, &col);
								uint64_t gr = m0 + wrow + 16 * mi + row;
								uint64_t gc = n0 + wcol + 16 * ni + col;
								if (gr < g->m && gc < g->n)
									store(s, gr, gc,
									      s->acc[wave][mi][ni][lane][q]);
							}
			}
		}
out:
	free(conv);
	free(s->lds);
	free(s);
	return rc;
}
