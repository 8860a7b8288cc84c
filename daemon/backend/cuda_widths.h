/* The N widths the CUDA backend plans for: the joined width of a batched
 * launch, the N buckets of the measured choice among providers, and the
 * list of widths a resident weight is warmed at when it loads (the widths
 * the serving path would otherwise plan for on its first GEMM of each).
 *
 * Pure: no CUDA, unit-tested on any machine (tests/nvidia/
 * test_cuda_widths.c). */
#ifndef MFMAD_CUDA_WIDTHS_H
#define MFMAD_CUDA_WIDTHS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The width of the joined matrices for n columns of parts: rounded up, so
 * that the batches of a load (any total from 2 to thousands of columns)
 * come in a few widths, and a provider that plans per N (cuSPARSELt
 * searches its algorithms for each N it sees, some 100 ms on the H200)
 * plans once per width.  The padding columns are zero and never copied
 * out. */
uint32_t cuda_batch_width(uint32_t n);

/* N buckets of the measured choice: decode-sized N apart, then one per
 * batch width (cuda_batch_width) up to 512, then the rest.  Upper bounds,
 * inclusive; the last is UINT32_MAX.  A bucket spanning several batch
 * widths was measured at its widest while most batches ran narrower
 * (65-256 timed at 256 served batches of 128 and 192), and which provider
 * won there could differ from the one fastest at the width that ran. */
#define CUDA_NBUCKETS 9
extern const uint32_t cuda_bucket_max[CUDA_NBUCKETS];
/* The bucket of n. */
size_t cuda_bucket_of(uint32_t n);
/* The N a bucket is measured at when a weight is warmed: its upper bound,
 * and for the open last bucket twice the bound below it (1024), a batch
 * width. */
uint32_t cuda_bucket_rep(size_t b);

/* A lone request runs at its own N, not a batch's width.  Up to this N
 * (the decode widths) every multiple of 8 is warmed too: the widths
 * cuSPARSELt runs (it takes N a multiple of 8) and plans for one by one,
 * each plan's search some 25-60 ms on the H200, which the first request
 * of that width would otherwise wait for. */
#define CUDA_WARM_DECODE_N 64
#define CUDA_WARM_DECODE_STEP 8

/* The most widths one weight is warmed at.  With batching.max_columns =
 * 8192 they are 21: the 16 batch widths (cuda_batch_width: 16 .. 8192)
 * and the decode widths 8, 24, 40, 48 and 56; wider limits leave their
 * largest widths to be planned on first use. */
#define CUDA_WARM_MAX_WIDTHS 24

/* The widths to warm a weight at, ascending, into out (at most cap): the
 * representative of every bucket (cuda_bucket_rep), every multiple of
 * CUDA_WARM_DECODE_STEP up to CUDA_WARM_DECODE_N, and, when batching,
 * every width cuda_batch_width gives for a batch of 2 to max_columns
 * columns.  Returns how many there are in all, which may exceed cap (then
 * out holds the cap smallest, the widths the most requests take). */
size_t cuda_warm_widths(bool batching, uint32_t max_columns, uint32_t *out, size_t cap);

#endif
