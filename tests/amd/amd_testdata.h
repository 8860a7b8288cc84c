/* Random test data for the AMD tests: never-zero elements of every dtype
 * and random 2:4 patterns (all six position pairs, some groups with one
 * or no non-zero).  Deterministic for a given seed. */
#ifndef MFMA_TEST_AMD_TESTDATA_H
#define MFMA_TEST_AMD_TESTDATA_H

#include <stddef.h>

#include "mfma_dtype.h"

unsigned td_rand(unsigned *seed);

/* A random non-zero element of dtype t at p[i]: floats in [-1, 1] on a
 * 1/1000 grid (then rounded to t), i8 over its whole range, i32 within
 * +-10000. */
void td_put_random(void *p, enum mfma_dtype t, size_t i, unsigned *seed);

/* A dense rows x k matrix (k a multiple of 4) whose groups of 4 keep two
 * random positions, one in ten groups one, one in ten none. */
void td_random_24(void *d, enum mfma_dtype t, size_t rows, size_t k, unsigned *seed);

#endif
