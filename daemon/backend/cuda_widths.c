/* The N widths the CUDA backend plans for (cuda_widths.h). */
#include "cuda_widths.h"

/* Up to 512 the bounds are cuda_batch_width's widths, so that every batch
 * of the default batching.max_columns runs on the choice measured at its
 * own width. */
const uint32_t cuda_bucket_max[CUDA_NBUCKETS] = { 16, 32, 64, 128, 192, 256, 384, 512, UINT32_MAX };

uint32_t cuda_batch_width(uint32_t n)
{
	/* 16, 32, 64, 128, 192, 256, 384, 512, 768, ...: powers of two and
	 * one and a half times them, so at most a third of the columns are
	 * padding, and ten widths cover up to 1536 columns. */
	uint32_t w = 16;
	while (w < n && w <= UINT32_MAX / 2) {
		uint32_t half = w + w / 2;
		if (w >= 128 && n <= half)
			return half;
		w *= 2;
	}
	return w < n ? n : w;
}

size_t cuda_bucket_of(uint32_t n)
{
	size_t b = 0;
	while (n > cuda_bucket_max[b])
		b++;
	return b;
}

uint32_t cuda_bucket_rep(size_t b)
{
	if (b >= CUDA_NBUCKETS)
		b = CUDA_NBUCKETS - 1;
	return cuda_bucket_max[b] != UINT32_MAX ? cuda_bucket_max[b] : 2 * cuda_bucket_max[b - 1];
}

/* Every width there can be: the buckets', the decode widths and, from 16
 * to 2^32, two per doubling (cuda_batch_width). */
#define ALL_WIDTHS 96

/* Adds w to the ascending set all[0..*n). */
static void add_width(uint32_t w, uint32_t *all, size_t *n)
{
	size_t at = 0;
	while (at < *n && all[at] < w)
		at++;
	if ((at < *n && all[at] == w) || *n >= ALL_WIDTHS)
		return;
	for (size_t i = *n; i > at; i--)
		all[i] = all[i - 1];
	all[at] = w;
	(*n)++;
}

size_t cuda_warm_widths(bool batching, uint32_t max_columns, uint32_t *out, size_t cap)
{
	uint32_t all[ALL_WIDTHS];
	size_t n = 0;
	for (size_t b = 0; b < CUDA_NBUCKETS; b++)
		add_width(cuda_bucket_rep(b), all, &n);
	for (uint32_t w = CUDA_WARM_DECODE_STEP; w <= CUDA_WARM_DECODE_N; w += CUDA_WARM_DECODE_STEP)
		add_width(w, all, &n);
	/* The widths are a step function of the columns: walk from one width
	 * to the next instead of over every column count. */
	for (uint32_t cols = 2; batching && cols <= max_columns;) {
		uint32_t w = cuda_batch_width(cols);
		add_width(w, all, &n);
		/* Past 2^31 a batch's width is its own column count. */
		if (w >= max_columns || w >= (UINT32_C(1) << 31))
			break;
		cols = w + 1;
	}
	for (size_t i = 0; i < n && i < cap; i++)
		out[i] = all[i];
	return n;
}
