/* libmfmaclient: what a client does without the daemon.  The 2:4 codec is
 * the canonical one (kernels/common/sparse24.c, linked in), so a matrix
 * compressed here is exactly what the daemon and every backend read; the
 * check tolerance is the one rule mfmactl --check and the Python package
 * apply. */
#include "client_internal.h"

#include <errno.h>
#include <math.h>

#include "mfma_dtype.h"
#include "sparse24.h"

static int sparse_args(enum mfma_type t, uint32_t rows, uint32_t cols, const void *in,
		       const void *out, struct mfma_error *err)
{
	if (!in || !out)
		return client_fail(err, -EINVAL, "2:4: a matrix pointer is NULL");
	if (mfma_type_size(t) == 0 || t == MFMA_TYPE_I32)
		return client_fail(err, -EINVAL, "2:4: dtype %d is not f32, f16, bf16 or i8", (int)t);
	if (cols % 4 != 0)
		return client_fail(err, -EINVAL, "2:4: cols=%u is not a multiple of 4", cols);
	(void)rows;
	return 0;
}

int mfma_sparse24_prune(const void *dense, enum mfma_type t, uint32_t rows, uint32_t cols,
			void *values, uint32_t *meta, struct mfma_error *err)
{
	int rc = sparse_args(t, rows, cols, dense, values, err);
	if (rc == 0 && !meta)
		rc = client_fail(err, -EINVAL, "2:4: meta is NULL");
	if (rc < 0)
		return rc;
	rc = sparse24_prune(dense, (enum mfma_dtype)t, rows, cols, values, meta);
	if (rc < 0)
		return client_fail(err, rc, "2:4: cannot prune a %ux%u matrix", rows, cols);
	client_ok(err);
	return 0;
}

int mfma_sparse24_compress(const void *dense, enum mfma_type t, uint32_t rows, uint32_t cols,
			   void *values, uint32_t *meta, struct mfma_error *err)
{
	size_t row = 0, group = 0;
	int rc = sparse_args(t, rows, cols, dense, values, err);
	if (rc == 0 && !meta)
		rc = client_fail(err, -EINVAL, "2:4: meta is NULL");
	if (rc < 0)
		return rc;
	rc = sparse24_compress(dense, (enum mfma_dtype)t, rows, cols, values, meta, &row, &group);
	if (rc < 0)
		return client_fail(err, rc,
				   "2:4: row %zu, group %zu (columns %zu..%zu) has more than two "
				   "non-zeros; prune it instead",
				   row, group, group * 4, group * 4 + 3);
	client_ok(err);
	return 0;
}

int mfma_sparse24_decompress(const void *values, const uint32_t *meta, enum mfma_type t,
			     uint32_t rows, uint32_t cols, void *dense, struct mfma_error *err)
{
	size_t row = 0, group = 0;
	int rc = sparse_args(t, rows, cols, values, dense, err);
	if (rc == 0 && !meta)
		rc = client_fail(err, -EINVAL, "2:4: meta is NULL");
	if (rc < 0)
		return rc;
	rc = sparse24_decompress(values, meta, (enum mfma_dtype)t, rows, cols, dense, &row, &group);
	if (rc < 0)
		return client_fail(err, rc,
				   "2:4: meta of row %zu, group %zu is not an ordered pair i0 < i1",
				   row, group);
	client_ok(err);
	return 0;
}

/* The daemon multiplies exact products (f16 and bf16 products fit an f32
 * mantissa; f32 inputs are multiplied in f32) and sums them in f32, then
 * rounds once to the output type.  The classic bound for a sum of k terms
 * is k * u32 relative to the sum of magnitudes; for random data the error
 * seen is about sqrt(k) * u32, so k * u32 leaves room for any summation
 * order (blocked, split-K, atomics) while a lost partial sum — a relative
 * error of about sqrt(block / k), 1.6e-2 for 16 of 65536 terms — stays
 * far above it.  The output rounding adds u_out (twice: C and alpha, beta
 * round too). */
double mfma_check_tolerance(enum mfma_type out, uint32_t k)
{
	const double u32 = ldexp(1.0, -24);
	double u_out;
	switch (out) {
	case MFMA_TYPE_F32: u_out = u32; break;
	case MFMA_TYPE_F16: u_out = ldexp(1.0, -11); break;
	case MFMA_TYPE_BF16: u_out = ldexp(1.0, -8); break;
	default: return 0.0; /* i32: integer sums are exact */
	}
	return 2.0 * u_out + ((double)k + 2.0) * u32;
}

int mfma_fileno(const mfma_client *client)
{
	return client && !client->dead ? client->fd : -1;
}
