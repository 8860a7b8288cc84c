/* CPU GEMMs: the float64 reference every backend is tested against, and
 * the serving paths of the CPU backend.  All take a validated struct
 * mfma_gemm (kernels/common/mfma_gemm.h). */
#ifndef MFMA_CPU_GEMM_H
#define MFMA_CPU_GEMM_H

#include <stddef.h>

#include "cpu_pool.h"
#include "mfma_gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Float64 reference: writes m x n doubles to out (alpha, beta and C
 * applied, no rounding to out_dtype).  Each element is the sum a plain
 * triple loop makes, in its order; the operands are widened to float64
 * first, B in blocks of 64 columns (3.4-8.4x the plain loop's speed:
 * bench/RESULTS.md).  Handles sparse A by decompressing.  Returns 0 or
 * -ENOMEM/-EINVAL. */
int cpu_gemm_ref_f64(const struct mfma_gemm *g, double *out);

/* Relative Frobenius error ||D - R|| / ||R|| of D (m x n in out_dtype)
 * against a float64 reference R (0 when both are zero). */
double cpu_rel_frobenius(const void *d, enum mfma_dtype t, const double *ref, size_t count);

/* The serving path: dense float through OpenBLAS sgemm (f16/bf16
 * converted to f32 in blocks), dense i8 and every 2:4 A through our own
 * blocked multi-threaded loops.  threads <= 0 means all cores; small
 * problems use fewer.  The threads are started for the call and joined
 * before it returns (tests, benchmarks; the daemon uses
 * cpu_gemm_run_pool).  variant, when not NULL, receives a static string
 * naming the path that ran ("cpu.sgemm.f16", "cpu.sp24.f32", "cpu.i8",
 * ...).  Returns 0, -EINVAL for a GEMM that breaks the rules of
 * mfma_gemm.h (including alpha != 1 or beta not 0/1 for i8), -ENOMEM.
 *
 * The meta of a 2:4 A is not re-checked here (the daemon checks a weight
 * once, with sparse24_meta_check): a bad nibble gives wrong numbers, never
 * an access outside A, B or D.  Safe to call from several threads at
 * once; each calling thread keeps up to 32 MiB of scratch between calls. */
int cpu_gemm_run(const struct mfma_gemm *g, int threads, const char **variant);

/* The threads OpenBLAS gives one sgemm (the dense float path), for the
 * whole process: threads <= 0 is every core.  OpenBLAS otherwise uses
 * every core whatever the pool's size; the CPU backend sets it to its
 * devices' share. */
void cpu_gemm_set_blas_threads(int threads);

/* The same on a persistent pool (cpu_pool.h), as the CPU backend runs
 * it: the threads are the pool's, never created per call; small problems
 * use fewer of them, the smallest only the caller.  A NULL pool runs on
 * the caller alone.  One call at a time per pool. */
int cpu_gemm_run_pool(const struct mfma_gemm *g, struct cpu_pool *pool, const char **variant);

#ifdef __cplusplus
}
#endif

#endif
