/* The canonical 2:4 codec (the format is described in sparse24.h).
 *
 * Every function works group by group: a group is 4 consecutive elements
 * of a row, and its two kept slots go to values[row * k/2 + 2g + {0,1}]
 * with their positions in one meta nibble. */
#include "sparse24.h"

#include <errno.h>
#include <string.h>

/* The magnitude of element i as an unsigned key that orders like |x|.
 * For IEEE formats the bits without the sign already order like the
 * magnitude (NaN above infinity), and all-zero-but-sign is zero, which is
 * the header's definition of zero. */
static uint32_t magnitude(const void *p, enum mfma_dtype t, size_t i)
{
	switch (t) {
	case MFMA_DT_F32: {
		uint32_t x;
		memcpy(&x, (const char *)p + 4 * i, 4);
		return x & 0x7fffffffu;
	}
	case MFMA_DT_F16:
	case MFMA_DT_BF16: {
		uint16_t x;
		memcpy(&x, (const char *)p + 2 * i, 2);
		return x & 0x7fffu;
	}
	case MFMA_DT_I8: {
		int v = ((const int8_t *)p)[i];
		return (uint32_t)(v < 0 ? -v : v);
	}
	case MFMA_DT_I32: {
		int32_t v;
		memcpy(&v, (const char *)p + 4 * i, 4);
		return v < 0 ? (uint32_t)0 - (uint32_t)v : (uint32_t)v;
	}
	default:
		return 0;
	}
}

static int check_args(enum mfma_dtype t, size_t k)
{
	if (mfma_dtype_size(t) == 0 || k % 4 != 0)
		return -EINVAL;
	return 0;
}

static void report(size_t *bad_row, size_t *bad_group, size_t r, size_t g)
{
	if (bad_row)
		*bad_row = r;
	if (bad_group)
		*bad_group = g;
}

int sparse24_nibble_check(unsigned nibble)
{
	if (nibble > 0xfu)
		return -EINVAL;
	return (nibble & 3u) < (nibble >> 2) ? 0 : -EINVAL;
}

/* Writes slots (p0, p1) of dense group `src` (or zero for a position
 * whose magnitude is zero, so the stored form never depends on the sign
 * of a zero) to the two value slots at `dst`. */
static void store_pair(const char *src, size_t es, enum mfma_dtype t, unsigned p0, unsigned p1,
		       char *dst)
{
	unsigned pos[2] = { p0, p1 };
	for (int s = 0; s < 2; s++) {
		if (magnitude(src, t, pos[s]) == 0)
			memset(dst + s * es, 0, es);
		else
			memcpy(dst + s * es, src + pos[s] * es, es);
	}
}

static void put_nibble(uint32_t *meta_row, size_t g, unsigned i0, unsigned i1)
{
	meta_row[g / 8] |= (uint32_t)(i0 | i1 << 2) << (4 * (g % 8));
}

/* The positions a group keeps when it already is 2:4: its non-zeros, and
 * for a spare slot the lowest position not kept, so that one dense
 * matrix has exactly one compressed form.  -EINVAL for more than two
 * non-zeros. */
static int pick_nonzeros(const char *grp, enum mfma_dtype t, unsigned *i0, unsigned *i1)
{
	unsigned pos[4], nz = 0;
	for (unsigned i = 0; i < 4; i++)
		if (magnitude(grp, t, i) != 0)
			pos[nz++] = i;
	if (nz > 2)
		return -EINVAL;
	*i0 = nz == 2 ? pos[0] : 0;
	*i1 = nz == 2 ? pos[1] : nz == 1 && pos[0] != 0 ? pos[0] : 1;
	return 0;
}

/* The positions of the two largest magnitudes; strict comparisons while
 * scanning upwards give ties to the lower position. */
static int pick_largest(const char *grp, enum mfma_dtype t, unsigned *i0, unsigned *i1)
{
	unsigned a = 0, b = 1;
	uint32_t ma = magnitude(grp, t, 0), mb = magnitude(grp, t, 1);
	if (mb > ma) {
		a = 1;
		b = 0;
		uint32_t x = ma;
		ma = mb;
		mb = x;
	}
	for (unsigned i = 2; i < 4; i++) {
		uint32_t mi = magnitude(grp, t, i);
		if (mi > ma) {
			b = a;
			mb = ma;
			a = i;
			ma = mi;
		} else if (mi > mb) {
			b = i;
			mb = mi;
		}
	}
	*i0 = a < b ? a : b;
	*i1 = a < b ? b : a;
	return 0;
}

typedef int (*pick_fn)(const char *grp, enum mfma_dtype t, unsigned *i0, unsigned *i1);

/* Compress and prune: the same walk, differing only in which two
 * positions of a group they keep. */
static int encode(const void *dense, enum mfma_dtype t, size_t rows, size_t k, void *values,
		  uint32_t *meta, pick_fn pick, size_t *bad_row, size_t *bad_group)
{
	if (check_args(t, k) < 0 || (rows && k && (!dense || !values || !meta)))
		return -EINVAL;
	const char *d = dense;
	char *v = values;
	size_t es = mfma_dtype_size(t);
	size_t words = sparse24_meta_words(k);
	for (size_t r = 0; r < rows; r++) {
		uint32_t *mrow = meta + r * words;
		memset(mrow, 0, words * sizeof(*mrow));
		for (size_t g = 0; g < k / 4; g++) {
			const char *grp = d + (r * k + 4 * g) * es;
			unsigned i0, i1;
			if (pick(grp, t, &i0, &i1) < 0) {
				report(bad_row, bad_group, r, g);
				return -EINVAL;
			}
			store_pair(grp, es, t, i0, i1, v + (r * k / 2 + 2 * g) * es);
			put_nibble(mrow, g, i0, i1);
		}
	}
	return 0;
}

int sparse24_validate(const void *dense, enum mfma_dtype t, size_t rows, size_t k,
		      size_t *bad_row, size_t *bad_group)
{
	if (check_args(t, k) < 0 || (!dense && rows && k))
		return -EINVAL;
	const char *d = dense;
	size_t es = mfma_dtype_size(t);
	for (size_t r = 0; r < rows; r++)
		for (size_t g = 0; g < k / 4; g++) {
			unsigned i0, i1;
			if (pick_nonzeros(d + (r * k + 4 * g) * es, t, &i0, &i1) < 0) {
				report(bad_row, bad_group, r, g);
				return -EINVAL;
			}
		}
	return 0;
}

int sparse24_compress(const void *dense, enum mfma_dtype t, size_t rows, size_t k,
		      void *values, uint32_t *meta, size_t *bad_row, size_t *bad_group)
{
	return encode(dense, t, rows, k, values, meta, pick_nonzeros, bad_row, bad_group);
}

int sparse24_prune(const void *dense, enum mfma_dtype t, size_t rows, size_t k, void *values,
		   uint32_t *meta)
{
	return encode(dense, t, rows, k, values, meta, pick_largest, NULL, NULL);
}

int sparse24_meta_check(const uint32_t *meta, size_t rows, size_t k, size_t *bad_row,
			size_t *bad_group)
{
	if (k % 4 != 0 || (!meta && rows && k))
		return -EINVAL;
	size_t words = sparse24_meta_words(k);
	for (size_t r = 0; r < rows; r++)
		for (size_t g = 0; g < k / 4; g++)
			if (sparse24_nibble_check(sparse24_nibble(meta + r * words, g)) < 0) {
				report(bad_row, bad_group, r, g);
				return -EINVAL;
			}
	return 0;
}

int sparse24_decompress(const void *values, const uint32_t *meta, enum mfma_dtype t,
			size_t rows, size_t k, void *dense, size_t *bad_row, size_t *bad_group)
{
	if (check_args(t, k) < 0 || (rows && k && (!dense || !values || !meta)))
		return -EINVAL;
	const char *v = values;
	char *d = dense;
	size_t es = mfma_dtype_size(t);
	size_t words = sparse24_meta_words(k);
	for (size_t r = 0; r < rows; r++) {
		for (size_t g = 0; g < k / 4; g++) {
			unsigned nib = sparse24_nibble(meta + r * words, g);
			if (sparse24_nibble_check(nib) < 0) {
				report(bad_row, bad_group, r, g);
				return -EINVAL;
			}
			char *grp = d + (r * k + 4 * g) * es;
			const char *src = v + (r * k / 2 + 2 * g) * es;
			memset(grp, 0, 4 * es);
			memcpy(grp + (nib & 3u) * es, src, es);
			memcpy(grp + (nib >> 2) * es, src + es, es);
		}
	}
	return 0;
}
