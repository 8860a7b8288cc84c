/* The micro-kernels, written once and included by cpu_kernels.c once per
 * instruction set.  The includer defines:
 *
 *   KFAM         name prefix of the family (avx512, avx2, generic)
 *   KTARGET      function attribute selecting the instruction set
 *   KVL          lanes of one vector
 *   kvf, kvi     the float and the 32-bit integer vector types
 *   VF_ZERO() VF_SET1(x) VF_LOAD(p) VF_STORE(p, v) VF_FMA(a, b, c) (a*b+c)
 *   VF_MUL(a, b) VF_ADD(a, b)
 *   VI_ZERO() VI_SET1(x) VI_LOAD(p) VI_STORE(p, v) VI_MADD(a, b, c) (a*b+c,
 *   wrapping) VI_ADD(a, b)
 *   KSHAPES(X)   X(MR, NV) for each tile shape, widest panel first, each
 *                with a different NV
 *
 * and gets the kernels and `static const struct cpu_kfamily KFAM_family`;
 * this file undefines all of the above at its end, ready for the next.
 *
 * Every kernel keeps an MR x NV block of vector accumulators in registers
 * for the whole panel; the loops over MR and NV have constant trip counts
 * once the body is inlined into its fixed-shape wrapper, so they unroll
 * and the accumulators never touch memory.
 *
 * The 2:4 kernels do only the kept multiply-adds: for row r and group g
 * the two kept values multiply the B rows 4g+i0 and 4g+i1 that the meta
 * nibble names, so each row reads its own B rows and nothing is shared
 * across rows except the panel, which sits in L1.
 *
 * The float and the integer kernels are written out separately: their
 * element types differ and only the float one scales by alpha, and a
 * further macro layer to share the loop would cost more clarity than the
 * twenty lines it saves. */

#define KCAT3(a, b) a##_##b
#define KCAT2(a, b) KCAT3(a, b)
#define KNAME(x) KCAT2(KFAM, x)

static inline __attribute__((always_inline)) KTARGET void
KNAME(sp_f32_body)(const struct cpu_kf_args *ka, const int MR, const int NV)
{
	const size_t NR = (size_t)NV * KVL;
	const size_t ng = ka->ngroups;
	const float *ar[CPU_MR_MAX];
	const uint32_t *mr[CPU_MR_MAX];
	kvf acc[CPU_MR_MAX][CPU_NR_MAX / KVL];

#pragma GCC unroll 8
	for (int r = 0; r < MR; r++) {
		ar[r] = ka->a + (size_t)r * ka->lda;
		mr[r] = ka->meta + (size_t)r * ka->ldm;
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			acc[r][v] = VF_ZERO();
	}
	for (size_t g0 = 0; g0 < ng; g0 += 8) {
		uint32_t mw[CPU_MR_MAX];
#pragma GCC unroll 8
		for (int r = 0; r < MR; r++)
			mw[r] = mr[r][g0 / 8];
		const size_t gn = ng - g0 < 8 ? ng - g0 : 8;
		for (size_t g = g0; g < g0 + gn; g++) {
			const float *bg = ka->bp + 4 * g * NR;
#pragma GCC unroll 8
			for (int r = 0; r < MR; r++) {
				const unsigned nib = mw[r] & 0xfu;
				mw[r] >>= 4;
				const float *b0 = bg + (nib & 3u) * NR;
				const float *b1 = bg + (nib >> 2) * NR;
				const kvf a0 = VF_SET1(ar[r][2 * g]);
				const kvf a1 = VF_SET1(ar[r][2 * g + 1]);
#pragma GCC unroll 8
				for (int v = 0; v < NV; v++)
					acc[r][v] = VF_FMA(a0, VF_LOAD(b0 + v * KVL), acc[r][v]);
#pragma GCC unroll 8
				for (int v = 0; v < NV; v++)
					acc[r][v] = VF_FMA(a1, VF_LOAD(b1 + v * KVL), acc[r][v]);
			}
		}
	}
	const kvf al = VF_SET1(ka->alpha);
	const int overwrite = ka->overwrite;
	float *const w0 = ka->w;
	const size_t ldw = ka->ldw;
#pragma GCC unroll 8
	for (int r = 0; r < MR; r++) {
		float *w = w0 + (size_t)r * ldw;
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++) {
			kvf x = VF_MUL(acc[r][v], al);
			if (!overwrite)
				x = VF_ADD(x, VF_LOAD(w + v * KVL));
			VF_STORE(w + v * KVL, x);
		}
	}
}

/* i8 A (2:4 when ka->meta, dense otherwise) times a panel of B already
 * widened to i32.  Integer products of i8 fit easily; the sums wrap like
 * the device backends' i32 accumulators. */
static inline __attribute__((always_inline)) KTARGET void
KNAME(i8_body)(const struct cpu_ki_args *ka, const int MR, const int NV, const int sparse)
{
	const size_t NR = (size_t)NV * KVL;
	const size_t ng = ka->ngroups;
	const int8_t *ar[CPU_MR_MAX];
	const uint32_t *mr[CPU_MR_MAX];
	kvi acc[CPU_MR_MAX][CPU_NR_MAX / KVL];

#pragma GCC unroll 8
	for (int r = 0; r < MR; r++) {
		ar[r] = ka->a + (size_t)r * ka->lda;
		mr[r] = sparse ? ka->meta + (size_t)r * ka->ldm : NULL;
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			acc[r][v] = VI_ZERO();
	}
	if (sparse) {
		for (size_t g0 = 0; g0 < ng; g0 += 8) {
			uint32_t mw[CPU_MR_MAX];
#pragma GCC unroll 8
			for (int r = 0; r < MR; r++)
				mw[r] = mr[r][g0 / 8];
			const size_t gn = ng - g0 < 8 ? ng - g0 : 8;
			for (size_t g = g0; g < g0 + gn; g++) {
				const int32_t *bg = ka->bp + 4 * g * NR;
#pragma GCC unroll 8
				for (int r = 0; r < MR; r++) {
					const unsigned nib = mw[r] & 0xfu;
					mw[r] >>= 4;
					const int32_t *b0 = bg + (nib & 3u) * NR;
					const int32_t *b1 = bg + (nib >> 2) * NR;
					const kvi a0 = VI_SET1(ar[r][2 * g]);
					const kvi a1 = VI_SET1(ar[r][2 * g + 1]);
#pragma GCC unroll 8
					for (int v = 0; v < NV; v++)
						acc[r][v] = VI_MADD(a0, VI_LOAD(b0 + v * KVL), acc[r][v]);
#pragma GCC unroll 8
					for (int v = 0; v < NV; v++)
						acc[r][v] = VI_MADD(a1, VI_LOAD(b1 + v * KVL), acc[r][v]);
				}
			}
		}
	} else {
		for (size_t p = 0; p < ng; p++) {
			const int32_t *bq = ka->bp + p * NR;
#pragma GCC unroll 8
			for (int r = 0; r < MR; r++) {
				const kvi a0 = VI_SET1(ar[r][p]);
#pragma GCC unroll 8
				for (int v = 0; v < NV; v++)
					acc[r][v] = VI_MADD(a0, VI_LOAD(bq + v * KVL), acc[r][v]);
			}
		}
	}
	const int overwrite = ka->overwrite;
	int32_t *const w0 = ka->w;
	const size_t ldw = ka->ldw;
#pragma GCC unroll 8
	for (int r = 0; r < MR; r++) {
		int32_t *w = w0 + (size_t)r * ldw;
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++) {
			kvi x = acc[r][v];
			if (!overwrite)
				x = VI_ADD(x, VI_LOAD(w + v * KVL));
			VI_STORE(w + v * KVL, x);
		}
	}
}

/* Fixed shapes: MR rows x NV vectors, and the single-row companions. */
#define KDEF1(MR, NV)                                                                       \
	static KTARGET void KNAME(sp_f32_##MR##x##NV)(const struct cpu_kf_args *ka)         \
	{                                                                                   \
		KNAME(sp_f32_body)(ka, MR, NV);                                             \
	}                                                                                   \
	static KTARGET void KNAME(sp_i8_##MR##x##NV)(const struct cpu_ki_args *ka)          \
	{                                                                                   \
		KNAME(i8_body)(ka, MR, NV, 1);                                              \
	}                                                                                   \
	static KTARGET void KNAME(dn_i8_##MR##x##NV)(const struct cpu_ki_args *ka)          \
	{                                                                                   \
		KNAME(i8_body)(ka, MR, NV, 0);                                              \
	}
#define KDEF(MR, NV) KDEF1(MR, NV) KDEF1(1, NV)
#define KCFG(MR, NV)                                                                        \
	{                                                                                   \
		.nr = (NV) * KVL, .mr = (MR), .sp_f32 = KNAME(sp_f32_##MR##x##NV),          \
		.sp_f32_one = KNAME(sp_f32_1x##NV), .sp_i8 = KNAME(sp_i8_##MR##x##NV),      \
		.sp_i8_one = KNAME(sp_i8_1x##NV), .dn_i8 = KNAME(dn_i8_##MR##x##NV),        \
		.dn_i8_one = KNAME(dn_i8_1x##NV),                                           \
	},
#define KCOUNT(MR, NV) +1
#define KSTR2(x) #x
#define KSTR(x) KSTR2(x)

KSHAPES(KDEF)

static const struct cpu_kfamily KNAME(family) = {
	.isa = KSTR(KFAM),
	.ncfg = 0 KSHAPES(KCOUNT),
	.cfg = { KSHAPES(KCFG) },
};

#undef KDEF1
#undef KDEF
#undef KCFG
#undef KCOUNT
#undef KSTR2
#undef KSTR
#undef KCAT3
#undef KCAT2
#undef KNAME
#undef KFAM
#undef KTARGET
#undef KVL
#undef kvf
#undef kvi
#undef VF_ZERO
#undef VF_SET1
#undef VF_LOAD
#undef VF_STORE
#undef VF_FMA
#undef VF_MUL
#undef VF_ADD
#undef VI_ZERO
#undef VI_SET1
#undef VI_LOAD
#undef VI_STORE
#undef VI_MADD
#undef VI_ADD
#undef KSHAPES
