/* Pieces of the CPU GEMMs shared between cpu_gemm.c (the public entry
 * points), cpu_blocked.c (our blocked, threaded loops), cpu_convert.c
 * (element conversions) and cpu_kernels.c (the register-blocked
 * micro-kernels, one family per instruction set).  Not installed. */
#ifndef MFMA_CPU_INTERNAL_H
#define MFMA_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_pool.h"
#include "mfma_gemm.h"

/* One call of a float micro-kernel: MR rows of A (2:4, canonical values
 * already in f32) times one packed panel of B (kc rows of NR floats)
 * into MR x NR elements of w, scaled by alpha and either overwriting or
 * added to what w holds. */
struct cpu_kf_args {
	size_t ngroups;        /* kc / 4 */
	const float *a;        /* values of the first row at this block */
	size_t lda;            /* values per row */
	const uint32_t *meta;  /* meta of the first row, first word of this block */
	size_t ldm;            /* meta words per row */
	const float *bp;       /* packed panel: kc rows of NR floats */
	float *w;
	size_t ldw;
	float alpha;
	int overwrite;
};

/* The same for i8 inputs with i32 accumulation.  meta is NULL for dense
 * A; then ngroups counts rows of the panel (kc), not groups. */
struct cpu_ki_args {
	size_t ngroups;
	const int8_t *a;
	size_t lda;
	const uint32_t *meta;
	size_t ldm;
	const int32_t *bp;
	int32_t *w;
	size_t ldw;
	int overwrite;
};

typedef void (*cpu_kf_fn)(const struct cpu_kf_args *ka);
typedef void (*cpu_ki_fn)(const struct cpu_ki_args *ka);

/* A register tile shape and its kernels: `full` handles mr rows, `one` a
 * single row (for the rows left over at the end of a block). */
struct cpu_kcfg {
	unsigned nr, mr;
	cpu_kf_fn sp_f32, sp_f32_one;
	cpu_ki_fn sp_i8, sp_i8_one;
	cpu_ki_fn dn_i8, dn_i8_one;
};

#define CPU_KCFG_MAX 3
#define CPU_NR_MAX 64
#define CPU_MR_MAX 8

struct cpu_kfamily {
	const char *isa;
	unsigned ncfg;
	struct cpu_kcfg cfg[CPU_KCFG_MAX]; /* widest panel first */
};

/* The best family this CPU runs (AVX-512, AVX2+FMA or portable C). */
const struct cpu_kfamily *cpu_kfamily_best(void);
/* Every family this CPU can run, for tests: fills up to max, returns the count. */
unsigned cpu_kfamily_all(const struct cpu_kfamily **out, unsigned max);

/* Element conversions.  Input side: exact (f16 and bf16 are subsets of
 * f32).  Output side: round to nearest even through mfma_dtype.h. */
void cpu_cvt_to_f32(const void *src, enum mfma_dtype t, size_t count, float *dst);
void cpu_cvt_from_f32(const float *src, enum mfma_dtype t, size_t count, void *dst);

/* Scratch memory of at least `bytes`, 64-byte aligned, owned by the
 * calling thread and kept for its next call (contents not kept when it
 * grows).  NULL when out of memory. */
void *cpu_workspace(size_t bytes);
/* Frees this thread's workspace if it is larger than what is worth
 * keeping between calls. */
void cpu_workspace_trim(void);
/* The bytes this thread's workspace holds now. */
size_t cpu_workspace_size(void);

/* Dense float through OpenBLAS; cvt_max and w_max bound (in floats) the
 * widened input blocks and the f32 accumulator of a 16-bit D. */
int cpu_sgemm_run(const struct mfma_gemm *g, size_t cvt_max, size_t w_max);

/* Our blocked loops: 2:4 A of any dtype, and dense i8, on up to
 * `threads` ids of the pool (<= 0 or more than the pool has: all of it;
 * fewer when M has fewer row tiles; a NULL pool runs on the caller
 * alone).  The caller decides whether a problem is worth several threads. */
int cpu_blocked_run(const struct mfma_gemm *g, struct cpu_pool *pool, int threads,
		    const struct cpu_kfamily *fam);

#endif
