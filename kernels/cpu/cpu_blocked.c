/* Our blocked, multi-threaded GEMM loops: every 2:4 A (f32, f16, bf16,
 * i8) and dense i8.  Dense float goes to OpenBLAS instead (cpu_gemm.c).
 *
 * The loop nest:
 *
 *   for jc over N in blocks of nc
 *     pack B[:, jc..] as panels of NR columns over all of K, widened to
 *     f32 or i32, the threads sharing the work; one barrier
 *     for ic over this thread's rows in blocks of mc
 *       W = beta*C[ic.., jc..]              (an mc x nc f32/i32 tile, in L2)
 *       for pc over K in blocks of kc       (kc*NR*4 bytes: one panel slice fits L1)
 *         for each panel of NR columns
 *           for each MR rows: the micro-kernel adds alpha * A.B into W
 *       D[ic.., jc..] = W, rounded to the output type
 *
 * The tile W takes every partial sum, so D is written once; an earlier
 * order that accumulated into D for each K block was bound by memory
 * traffic on D.  Threads split M, so each owns whole rows of D and only
 * the packed B is shared.  B is packed into two alternating buffers, so
 * one barrier per column block is enough: a thread that packs block j+1
 * early writes the buffer that block j does not read, and it cannot reach
 * block j+2 before everyone has passed barrier j+1, i.e. finished block j.
 *
 * Since W is a private tile that is read (beta*C) before D is written,
 * C may be D itself.  With a single thread, or a single column block, one
 * B buffer does. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "cpu_pool.h"
#include "sparse24.h"

/* Rows of A per block and the widest column block: W is BLK_MC x BLK_NC
 * 4-byte elements (256 KiB), inside L2 with room for the A rows.  Each
 * block of rows streams the packed B once from L3, so taller blocks mean
 * less of that traffic. */
#define BLK_MC 128
#define BLK_NC 512
/* Cap on one packed B buffer (K x nc elements), in elements. */
#define BLK_B_MAX ((size_t)4 << 20)

enum blk_kind { BLK_SP_F32, BLK_SP_I8, BLK_DN_I8 };

struct blk_plan {
	const struct mfma_gemm *g;
	enum blk_kind kind;
	const struct cpu_kcfg *cfg;
	size_t m, n, k;
	size_t nr, mr, kc, mc, nc;
	size_t lda; /* A elements per row: k/2 values when sparse, else k */
	size_t ldm; /* meta words per row */
	void *bpack[2];
	size_t bpack_stride; /* elements per packed panel: k * nr */
	void *wbuf;          /* per thread: the mc x round_up(nc, nr) tile */
	size_t wstride;      /* elements per thread tile */
	void *abuf;          /* per thread mc x kc_a: a block of A (f32, or i8 for i8) */
	size_t kc_a;         /* A elements per row of a block: kc/2 when sparse, else kc */
	uint32_t *mbuf;      /* per thread mc x kc/32: the block's meta words */
	unsigned nt;
	pthread_barrier_t barrier;
};

static size_t min_sz(size_t a, size_t b)
{
	return a < b ? a : b;
}

static size_t round_up(size_t x, size_t to)
{
	return (x + to - 1) / to * to;
}

/* Packs all K rows x columns [jc + jp*nr, +nr) of B as one panel of
 * k rows of nr elements, columns past N zero. */
static void pack_panel(const struct blk_plan *p, size_t jc, size_t jp, void *dst)
{
	const struct mfma_gemm *g = p->g;
	size_t col = jc + jp * p->nr;
	size_t cnt = min_sz(p->nr, p->n - col);
	size_t es = mfma_dtype_size(g->in_dtype);
	for (size_t r = 0; r < p->k; r++) {
		const char *src = (const char *)g->b + (r * p->n + col) * es;
		if (p->kind == BLK_SP_F32) {
			float *d = (float *)dst + r * p->nr;
			cpu_cvt_to_f32(src, g->in_dtype, cnt, d);
			memset(d + cnt, 0, (p->nr - cnt) * sizeof(float));
		} else {
			int32_t *d = (int32_t *)dst + r * p->nr;
			const int8_t *s = (const int8_t *)src;
			for (size_t j = 0; j < cnt; j++)
				d[j] = s[j];
			memset(d + cnt, 0, (p->nr - cnt) * sizeof(int32_t));
		}
	}
}

/* W (mcb x ncb of the tile, row stride ldw) starts as beta*C; with beta
 * 0 the first K block overwrites it, unless there is no K block. */
static void init_w(const struct blk_plan *p, void *wt, size_t ldw, size_t i0, size_t mcb,
		   size_t jc, size_t ncb)
{
	const struct mfma_gemm *g = p->g;
	bool zero = g->beta == 0.0f;
	if (zero && p->k > 0)
		return;
	size_t es = mfma_dtype_size(g->out_dtype);
	for (size_t r = 0; r < mcb; r++) {
		const void *c = zero ? NULL : (const char *)g->c + ((i0 + r) * p->n + jc) * es;
		if (p->kind != BLK_SP_F32) {
			int32_t *w = (int32_t *)wt + r * ldw;
			if (zero)
				memset(w, 0, ncb * sizeof(*w));
			else
				memcpy(w, c, ncb * sizeof(*w)); /* beta is 1 for integers */
			continue;
		}
		float *w = (float *)wt + r * ldw;
		if (zero) {
			memset(w, 0, ncb * sizeof(*w));
			continue;
		}
		cpu_cvt_to_f32(c, g->out_dtype, ncb, w);
		for (size_t j = 0; j < ncb; j++)
			w[j] *= g->beta;
	}
}

static void store_w(const struct blk_plan *p, const void *wt, size_t ldw, size_t i0, size_t mcb,
		    size_t jc, size_t ncb)
{
	const struct mfma_gemm *g = p->g;
	size_t es = mfma_dtype_size(g->out_dtype);
	for (size_t r = 0; r < mcb; r++) {
		void *d = (char *)g->d + ((i0 + r) * p->n + jc) * es;
		if (p->kind != BLK_SP_F32)
			memcpy(d, (const int32_t *)wt + r * ldw, ncb * sizeof(int32_t));
		else
			cpu_cvt_from_f32((const float *)wt + r * ldw, g->out_dtype, ncb, d);
	}
}

/* Copies rows [i0, i0+mcb), K rows [pc, pc+kcb) of A (2:4 values and
 * meta, or dense i8) into compact per-thread blocks, float values widened
 * to f32.  In place, the rows of a block are a whole row of A apart: for
 * k = 4096 and f32 values that is 8 KiB, so the 128 rows of a block fall
 * into the same few cache sets and form 128 streams no prefetcher
 * follows.  Compact, the block is reused from L1/L2 by every panel; and
 * the row's next K block is prefetched here, so it is on its way while
 * this one computes. */
static void pack_a(const struct blk_plan *p, size_t i0, size_t mcb, size_t pc, size_t kcb,
		   void *abuf, uint32_t *mbuf)
{
	const struct mfma_gemm *g = p->g;
	bool sp = g->a_sparse;
	size_t es = mfma_dtype_size(g->in_dtype);
	size_t off = sp ? pc / 2 : pc, cnt = sp ? kcb / 2 : kcb;
	size_t ldm = p->kc / 32, words = (kcb / 4 + 7) / 8;
	size_t next = pc + p->kc < p->k ? min_sz(p->kc, p->k - pc - p->kc) : 0;
	size_t next_bytes = (sp ? next / 2 : next) * es;
	for (size_t r = 0; r < mcb; r++) {
		const char *src = (const char *)g->a + ((i0 + r) * p->lda + off) * es;
		for (size_t b = 0; b < next_bytes; b += 64)
			__builtin_prefetch(src + p->kc_a * es + b, 0, 2);
		if (p->kind == BLK_SP_F32)
			cpu_cvt_to_f32(src, g->in_dtype, cnt, (float *)abuf + r * p->kc_a);
		else
			memcpy((int8_t *)abuf + r * p->kc_a, src, cnt);
		if (!sp)
			continue;
		const uint32_t *msrc = g->a_meta + (i0 + r) * p->ldm + pc / 32;
		if (next)
			__builtin_prefetch(msrc + ldm, 0, 2);
		memcpy(mbuf + r * ldm, msrc, words * sizeof(*mbuf));
	}
}

/* The kernel calls for the mcb rows packed in abuf/mbuf and K rows
 * [pc, pc+kcb) against every panel of the column block, into the tile wt. */
static void compute_block(const struct blk_plan *p, size_t mcb, size_t pc, size_t kcb,
			  size_t npan, const void *bbuf, const void *abuf,
			  const uint32_t *mbuf, void *wt, size_t ldw, bool overwrite)
{
	const struct mfma_gemm *g = p->g;
	const struct cpu_kcfg *cfg = p->cfg;
	bool sp = p->kind != BLK_DN_I8;
	for (size_t jp = 0; jp < npan; jp++) {
		size_t col = jp * p->nr;
		for (size_t ir = 0; ir < mcb;) {
			size_t rows = mcb - ir >= p->mr ? p->mr : 1;
			if (p->kind == BLK_SP_F32) {
				struct cpu_kf_args ka = {
					.ngroups = kcb / 4,
					.a = (const float *)abuf + ir * p->kc_a,
					.lda = p->kc_a,
					.meta = mbuf + ir * (p->kc / 32),
					.ldm = p->kc / 32,
					.bp = (const float *)bbuf + jp * p->bpack_stride + pc * p->nr,
					.w = (float *)wt + ir * ldw + col,
					.ldw = ldw,
					.alpha = g->alpha,
					.overwrite = overwrite,
				};
				(rows == p->mr ? cfg->sp_f32 : cfg->sp_f32_one)(&ka);
			} else {
				struct cpu_ki_args ka = {
					.ngroups = sp ? kcb / 4 : kcb,
					.a = (const int8_t *)abuf + ir * p->kc_a,
					.lda = p->kc_a,
					.meta = sp ? mbuf + ir * (p->kc / 32) : NULL,
					.ldm = p->kc / 32,
					.bp = (const int32_t *)bbuf + jp * p->bpack_stride + pc * p->nr,
					.w = (int32_t *)wt + ir * ldw + col,
					.ldw = ldw,
					.overwrite = overwrite,
				};
				if (sp)
					(rows == p->mr ? cfg->sp_i8 : cfg->sp_i8_one)(&ka);
				else
					(rows == p->mr ? cfg->dn_i8 : cfg->dn_i8_one)(&ka);
			}
			ir += rows;
		}
	}
}

static void run_thread(struct blk_plan *p, unsigned id)
{
	const struct mfma_gemm *g = p->g;
	size_t chunk = round_up((p->m + p->nt - 1) / p->nt, p->mr);
	size_t r0 = min_sz(p->m, id * chunk), r1 = min_sz(p->m, r0 + chunk);
	size_t es_abuf = p->kind == BLK_SP_F32 ? sizeof(float) : 1;
	void *abuf = (char *)p->abuf + (size_t)id * p->mc * p->kc_a * es_abuf;
	uint32_t *mbuf = p->mbuf ? p->mbuf + (size_t)id * p->mc * (p->kc / 32) : NULL;
	void *wt = (char *)p->wbuf + (size_t)id * p->wstride * 4;
	unsigned step = 0;

	for (size_t jc = 0; jc < p->n; jc += p->nc, step++) {
		size_t ncb = min_sz(p->nc, p->n - jc);
		size_t npan = (ncb + p->nr - 1) / p->nr;
		size_t ldw = npan * p->nr;
		char *bbuf = p->bpack[step % 2];
		for (size_t jp = id; jp < npan; jp += p->nt)
			pack_panel(p, jc, jp, bbuf + jp * p->bpack_stride * 4);
		if (p->nt > 1)
			pthread_barrier_wait(&p->barrier);
		for (size_t ic = r0; ic < r1; ic += p->mc) {
			size_t mcb = min_sz(p->mc, r1 - ic);
			init_w(p, wt, ldw, ic, mcb, jc, ncb);
			for (size_t pc = 0; pc < p->k; pc += p->kc) {
				size_t kcb = min_sz(p->kc, p->k - pc);
				pack_a(p, ic, mcb, pc, kcb, abuf, mbuf);
				compute_block(p, mcb, pc, kcb, npan, bbuf, abuf, mbuf, wt, ldw,
					      pc == 0 && g->beta == 0.0f);
			}
			store_w(p, wt, ldw, ic, mcb, jc, ncb);
		}
	}
}

static void pool_job(void *arg, unsigned id)
{
	run_thread(arg, id);
}

/* Picks the tile shape: the widest panel that N fills, else the narrowest. */
static const struct cpu_kcfg *pick_cfg(const struct cpu_kfamily *fam, size_t n)
{
	for (unsigned i = 0; i < fam->ncfg; i++)
		if (fam->cfg[i].nr <= n)
			return &fam->cfg[i];
	return &fam->cfg[fam->ncfg - 1];
}

static int plan_init(struct blk_plan *p, const struct mfma_gemm *g, int threads,
		     const struct cpu_kfamily *fam)
{
	memset(p, 0, sizeof(*p));
	p->g = g;
	p->m = g->m;
	p->n = g->n;
	p->k = g->k;
	p->kind = g->in_dtype == MFMA_DT_I8 ? (g->a_sparse ? BLK_SP_I8 : BLK_DN_I8) : BLK_SP_F32;
	p->cfg = pick_cfg(fam, p->n);
	p->nr = p->cfg->nr;
	p->mr = p->cfg->mr;
	/* One panel slice (kc rows of nr 4-byte elements) in 32 KiB of L1;
	 * kc a multiple of 32 so a K block starts on a meta word. */
	p->kc = min_sz(512, 32768 / (p->nr * 4)) / 32 * 32;
	if (p->kc < 32)
		p->kc = 32;
	p->mc = round_up(BLK_MC, p->mr);
	p->lda = g->a_sparse ? p->k / 2 : p->k;
	p->ldm = sparse24_meta_words(p->k);
	p->nc = round_up(min_sz(p->n, BLK_NC), p->nr);
	while (p->nc > p->nr && p->k * p->nc > BLK_B_MAX)
		p->nc -= p->nr;

	unsigned nt = threads > 0 ? (unsigned)threads : 1;
	size_t row_tiles = (p->m + p->mr - 1) / p->mr;
	if (nt > row_tiles)
		nt = row_tiles ? (unsigned)row_tiles : 1;
	p->nt = nt;

	/* The scratch blocks, carved from this thread's workspace: one
	 * packed B buffer, or two when threads alternate between column
	 * blocks; a W tile per thread; a block of A (and meta) per thread. */
	p->bpack_stride = p->k * p->nr;
	size_t bbytes = round_up(p->nc / p->nr * p->bpack_stride * 4, 64);
	unsigned nbuf = nt > 1 && p->n > p->nc ? 2 : 1;
	p->wstride = round_up(p->mc * p->nc, 16);
	size_t wbytes = (size_t)nt * p->wstride * 4;
	p->kc_a = g->a_sparse ? p->kc / 2 : p->kc;
	size_t abytes = round_up((size_t)nt * p->mc * p->kc_a * (p->kind == BLK_SP_F32 ? 4 : 1), 64);
	size_t mbytes = g->a_sparse ? round_up((size_t)nt * p->mc * (p->kc / 32) * 4, 64) : 0;
	char *ws = cpu_workspace(nbuf * bbytes + wbytes + abytes + mbytes);
	if (!ws)
		return -ENOMEM;
	p->bpack[0] = ws;
	p->bpack[1] = ws + (nbuf - 1) * bbytes;
	p->wbuf = ws + nbuf * bbytes;
	p->abuf = ws + nbuf * bbytes + wbytes;
	p->mbuf = g->a_sparse ? (uint32_t *)(void *)(ws + nbuf * bbytes + wbytes + abytes) : NULL;
	return 0;
}

int cpu_blocked_run(const struct mfma_gemm *g, struct cpu_pool *pool, int threads,
		    const struct cpu_kfamily *fam)
{
	unsigned most = cpu_pool_size(pool);
	if (threads <= 0 || (unsigned)threads > most)
		threads = (int)most;
	struct blk_plan p;
	int rc = plan_init(&p, g, threads, fam);
	if (rc < 0)
		return rc;
	if (p.nt > 1 && pthread_barrier_init(&p.barrier, NULL, p.nt) != 0)
		p.nt = 1; /* no barrier: do it all on the caller */
	rc = cpu_pool_run(pool, p.nt, pool_job, &p);
	if (p.nt > 1)
		pthread_barrier_destroy(&p.barrier);
	return rc;
}
