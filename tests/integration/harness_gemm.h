/* A GEMM through the real client library, checked: for integration tests
 * that need a daemon to have answered one right.  Apart from harness.c,
 * which needs no client library. */
#ifndef MFMA_HARNESS_GEMM_H
#define MFMA_HARNESS_GEMM_H

#include <stdint.h>

#include "harness.h"
#include "mfma.h"

/* A client connected to the daemon p started, with a 60 s timeout on its
 * calls (so that a hung daemon fails the test instead of hanging it); a
 * cmocka failure when it cannot connect. */
mfma_client *harness_client(const struct mfmad_proc *p);

/* g for D = A B, A (m x k) dense f32 in the request, B (k x n) f32: the
 * arguments most tests start from. */
void harness_dense_f32_args(struct mfma_gemm_args *g, const float *a, const float *b, uint32_t m,
			    uint32_t k, uint32_t n);

/* The worst relative error, element by element (|got - want| / (|want|
 * + 1)), of d (m x n) against alpha A.B + beta C in float64; C may be
 * NULL.  A, B, C, D f32, row-major. */
double harness_worst_error(const float *d, const float *a, const float *b, const float *c,
			   float alpha, float beta, uint32_t m, uint32_t k, uint32_t n);

/* One f32 GEMM of random A (m x k) and B (k x n) from seed on c, its D
 * against the float64 reference within the f32 tolerance; a cmocka
 * failure naming the shape otherwise. */
void harness_gemm_checked(mfma_client *c, uint32_t m, uint32_t n, uint32_t k, uint64_t seed);

#endif
