/* The canonical 2:4 format, described here once: the wire's Sparse24
 * (proto/mfma.proto), mfma.h and every backend use it as it is.
 *
 * A is rows x k, k a multiple of 4.  For each row and each group g of 4
 * along k, the two kept values in ascending position order are stored in
 * `values` (rows x k/2 elements) and their positions i0 < i1 go to `meta`
 * as the nibble i0 | i1 << 2, 8 nibbles per little-endian uint32, group g
 * of a row at bits 4*(g%8) of word g/8.  Each row starts a new word, so a
 * row has sparse24_meta_words(k) words.  A group with fewer than two
 * non-zeros still stores two slots: the spare slot holds 0 and an unused
 * position, keeping i0 < i1.
 *
 * Pure functions: no allocation, no I/O.  Element size is passed in bytes
 * (1, 2 or 4) since the codec only moves bits around, except for pruning,
 * which needs the dtype to compare magnitudes. */
#ifndef MFMA_SPARSE24_H
#define MFMA_SPARSE24_H

#include <stddef.h>
#include <stdint.h>

#include "mfma_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

static inline size_t sparse24_meta_words(size_t k) { return (k / 4 + 7) / 8; }

/* Byte sizes of the canonical form of a rows x k matrix with elements of
 * esize bytes.  Every place that sizes a 2:4 operand uses these.  The
 * callers bound rows and k (validation caps each dimension), so the
 * products fit in size_t on the 64-bit hosts the daemon runs on. */
static inline size_t sparse24_values_bytes(size_t rows, size_t k, size_t esize)
{
	return rows * (k / 2) * esize;
}

static inline size_t sparse24_meta_bytes(size_t rows, size_t k)
{
	return rows * sparse24_meta_words(k) * sizeof(uint32_t);
}

/* An A operand as held on the host: the canonical 2:4 form (values and
 * meta) when sparse, else the dense rows x k matrix. */
static inline size_t sparse24_operand_bytes(size_t rows, size_t k, size_t esize, int sparse)
{
	return sparse ? sparse24_values_bytes(rows, k, esize) + sparse24_meta_bytes(rows, k)
		      : rows * k * esize;
}

static inline unsigned sparse24_nibble(const uint32_t *meta_row, size_t g)
{
	return (meta_row[g / 8] >> (4 * (g % 8))) & 0xfu;
}

/* 0 when the nibble is a legal ordered pair (i0 < i1), -EINVAL otherwise. */
int sparse24_nibble_check(unsigned nibble);

/* 0 if every group of 4 along k of the dense rows x k matrix has at most
 * two non-zero elements; otherwise -EINVAL and, when bad_row/bad_group are
 * not NULL, the first offending row and group.  Zero means all bits zero
 * apart from the sign (so -0.0 counts as zero). */
int sparse24_validate(const void *dense, enum mfma_dtype t, size_t rows, size_t k,
		      size_t *bad_row, size_t *bad_group);

/* Compresses a dense matrix that already is 2:4 (see sparse24_validate).
 * Returns -EINVAL (with the first bad row/group) if it is not; values and
 * meta are then unspecified. */
int sparse24_compress(const void *dense, enum mfma_dtype t, size_t rows, size_t k,
		      void *values, uint32_t *meta, size_t *bad_row, size_t *bad_group);

/* Keeps the two largest magnitudes of every group of 4 (ties go to the
 * lower position) and compresses.  Never fails for valid sizes. */
int sparse24_prune(const void *dense, enum mfma_dtype t, size_t rows, size_t k,
		   void *values, uint32_t *meta);

/* Expands to a dense rows x k matrix (zeros where nothing was kept).
 * Returns -EINVAL if a nibble is not a legal ordered pair; bad_row and
 * bad_group (may be NULL) then name the first one. */
int sparse24_decompress(const void *values, const uint32_t *meta, enum mfma_dtype t,
			size_t rows, size_t k, void *dense, size_t *bad_row, size_t *bad_group);

/* Checks every nibble of a canonical meta array; same reporting. */
int sparse24_meta_check(const uint32_t *meta, size_t rows, size_t k, size_t *bad_row,
			size_t *bad_group);

#ifdef __cplusplus
}
#endif

#endif
