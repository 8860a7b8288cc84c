#include "validate.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "sparse24.h"

static int bad(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int check_dtype(int dt, const char *what, char *err, size_t errlen)
{
	if (dt < MFMA_DT_F32 || dt > MFMA_DT_I32)
		return bad(err, errlen, "%s.dtype=%d is not a known dtype (f32, f16, bf16, i8, i32)",
			   what, dt);
	return 0;
}

static int check_dims(uint32_t rows, uint32_t cols, const struct validate_limits *lim,
		      const char *what, char *err, size_t errlen)
{
	if (rows == 0 || cols == 0)
		return bad(err, errlen, "%s has shape %ux%u: both dimensions must be at least 1",
			   what, rows, cols);
	if (rows > lim->max_dim || cols > lim->max_dim)
		return bad(err, errlen,
			   "%s has shape %ux%u: the limit is %u per dimension (limits.max_dim)",
			   what, rows, cols, lim->max_dim);
	return 0;
}

/* A dense matrix: present, sane shape, known dtype, bytes = rows*cols*size.
 * With in_region (b and c of a Gemm), its bytes may be in a region
 * instead: the span is checked against the region later. */
static int check_matrix_in(const Mfma__V1__Matrix *m, const struct validate_limits *lim,
			   const char *what, bool may_region, char *err, size_t errlen)
{
	if (!m)
		return bad(err, errlen, "%s is missing", what);
	int rc = check_dims(m->rows, m->cols, lim, what, err, errlen);
	if (rc == 0)
		rc = check_dtype(m->dtype, what, err, errlen);
	if (rc)
		return rc;
	uint64_t want = (uint64_t)m->rows * m->cols * mfma_dtype_size((enum mfma_dtype)m->dtype);
	if (m->region) {
		if (!may_region)
			return bad(err, errlen, "%s.region: only b, c and d of a gemm may be in a "
				   "region", what);
		if (m->data.len)
			return bad(err, errlen, "%s has both data (%zu bytes) and a region; send one",
				   what, m->data.len);
		return 0;
	}
	if (m->data.len != want)
		return bad(err, errlen,
			   "%s.data has %zu bytes but %ux%u %s needs %llu", what, m->data.len,
			   m->rows, m->cols, mfma_dtype_name((enum mfma_dtype)m->dtype),
			   (unsigned long long)want);
	return 0;
}

static int check_matrix(const Mfma__V1__Matrix *m, const struct validate_limits *lim,
			const char *what, char *err, size_t errlen)
{
	return check_matrix_in(m, lim, what, false, err, errlen);
}

int validate_region_span(uint64_t region_len, uint64_t off, int has_length, uint64_t length,
			 uint64_t need, const char *field, uint64_t id, char *err, size_t errlen)
{
	if (has_length && length != need)
		return bad(err, errlen, "%s.region.length=%" PRIu64 " but the matrix needs %" PRIu64
			   " bytes", field, length, need);
	/* off + need may wrap: compare without adding. */
	if (off > region_len || need > region_len - off)
		return bad(err, errlen,
			   "%s.region.offset=%" PRIu64 " with %" PRIu64 " bytes runs past the end of "
			   "region %" PRIu64 " (%" PRIu64 " bytes)",
			   field, off, need, id, region_len);
	return 0;
}

int validate_region_fd(uint32_t mode, uint64_t size, int seals, uint64_t want, char *err,
		       size_t errlen)
{
	if (!S_ISREG(mode))
		return bad(err, errlen,
			   "register_region: the descriptor is not a memfd (not a regular file: "
			   "mode 0%o); create one with memfd_create(2)", (unsigned)mode);
	if (seals < 0)
		return bad(err, errlen,
			   "register_region: the descriptor's file takes no seals; it must be a "
			   "memfd created with MFD_ALLOW_SEALING");
	if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) &&
	    (seals & F_SEAL_SEAL))
		return bad(err, errlen,
			   "register_region: the descriptor's file takes no more seals (seals 0x%x: "
			   "F_SEAL_SEAL without F_SEAL_SHRINK | F_SEAL_GROW, as a file in /dev/shm or "
			   "a memfd made without MFD_ALLOW_SEALING has); create it with memfd_create(2) "
			   "and MFD_ALLOW_SEALING, then seal it", (unsigned)seals);
	if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
		return bad(err, errlen,
			   "register_region: the memfd is not sealed against resizing (seals 0x%x); "
			   "add F_SEAL_SHRINK | F_SEAL_GROW with fcntl(F_ADD_SEALS)", (unsigned)seals);
	if (size == 0)
		return bad(err, errlen, "register_region: the memfd is empty (0 bytes)");
	if (want && want != size)
		return bad(err, errlen, "register_region: bytes=%" PRIu64 " but the memfd has %" PRIu64,
			   want, size);
	return 0;
}

static int check_input_dtype(enum mfma_dtype in, const char *what, char *err, size_t errlen)
{
	if (in != MFMA_DT_F32 && in != MFMA_DT_F16 && in != MFMA_DT_BF16 && in != MFMA_DT_I8)
		return bad(err, errlen, "%s.dtype=%s is not an input type (f32, f16, bf16, i8)", what,
			   mfma_dtype_name(in));
	return 0;
}

int validate_operand(const Mfma__V1__Operand *op, const struct validate_limits *lim,
		     const char *what, enum a_form *form, uint32_t *rows, uint32_t *cols,
		     enum mfma_dtype *dtype, char *err, size_t errlen)
{
	char name[64];
	if (!op)
		return bad(err, errlen, "%s is missing", what);
	switch (op->kind_case) {
	case MFMA__V1__OPERAND__KIND_DENSE: {
		const Mfma__V1__Matrix *m = op->dense;
		snprintf(name, sizeof(name), "%s", what);
		int rc = check_matrix(m, lim, name, err, errlen);
		if (rc)
			return rc;
		switch (op->sparsity) {
		case MFMA__V1__SPARSITY__DENSE: *form = A_DENSE; break;
		case MFMA__V1__SPARSITY__VALIDATE_24: *form = A_DENSE_CHECK; break;
		case MFMA__V1__SPARSITY__PRUNE_24: *form = A_DENSE_PRUNE; break;
		default:
			return bad(err, errlen, "%s.sparsity=%d is not DENSE, VALIDATE_24 or PRUNE_24",
				   what, (int)op->sparsity);
		}
		if (*form != A_DENSE && m->cols % 4 != 0)
			return bad(err, errlen,
				   "%s.cols=%u is not a multiple of 4: 2:4 sparsity needs whole groups "
				   "of 4 along K (pad A's columns and B's rows with zeros)",
				   what, m->cols);
		*rows = m->rows;
		*cols = m->cols;
		*dtype = (enum mfma_dtype)m->dtype;
		return check_input_dtype(*dtype, what, err, errlen);
	}
	case MFMA__V1__OPERAND__KIND_SPARSE: {
		const Mfma__V1__Sparse24 *s = op->sparse;
		if (!s)
			return bad(err, errlen, "%s.sparse is missing", what);
		snprintf(name, sizeof(name), "%s.sparse", what);
		int rc = check_dims(s->rows, s->cols, lim, name, err, errlen);
		if (rc == 0)
			rc = check_dtype(s->dtype, name, err, errlen);
		if (rc)
			return rc;
		if (s->cols % 4 != 0)
			return bad(err, errlen,
				   "%s.cols=%u is not a multiple of 4: the 2:4 format stores whole groups "
				   "of 4 along K (pad with zero groups)",
				   name, s->cols);
		if (op->sparsity != MFMA__V1__SPARSITY__DENSE)
			return bad(err, errlen,
				   "%s.sparsity applies to a dense operand only; a sparse one is 2:4 already",
				   what);
		uint64_t vbytes = sparse24_values_bytes(s->rows, s->cols,
							mfma_dtype_size((enum mfma_dtype)s->dtype));
		uint64_t mbytes = sparse24_meta_bytes(s->rows, s->cols);
		if (s->values.len != vbytes)
			return bad(err, errlen, "%s.values has %zu bytes but %ux%u %s needs %llu "
				   "(rows x cols/2 elements)", name, s->values.len, s->rows, s->cols,
				   mfma_dtype_name((enum mfma_dtype)s->dtype), (unsigned long long)vbytes);
		if (s->meta.len != mbytes)
			return bad(err, errlen, "%s.meta has %zu bytes but %u rows x %zu words needs %llu",
				   name, s->meta.len, s->rows, sparse24_meta_words(s->cols),
				   (unsigned long long)mbytes);
		*form = A_SPARSE;
		*rows = s->rows;
		*cols = s->cols;
		*dtype = (enum mfma_dtype)s->dtype;
		return check_input_dtype(*dtype, what, err, errlen);
	}
	case MFMA__V1__OPERAND__KIND_WEIGHT:
		return bad(err, errlen, "%s cannot name a weight here", what);
	default:
		return bad(err, errlen, "%s has neither dense, sparse nor weight set", what);
	}
}

int validate_weight_name(const char *name, char *err, size_t errlen)
{
	if (!name || !*name)
		return bad(err, errlen, "weight name is empty");
	size_t n = strlen(name);
	if (n > 127)
		return bad(err, errlen, "weight name is %zu bytes long; the limit is 127", n);
	for (size_t i = 0; i < n; i++) {
		char ch = name[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		      ch == '.' || ch == '_' || ch == '-' || ch == ':'))
			return bad(err, errlen,
				   "weight name '%s' has character 0x%02x at %zu; use letters, digits and . _ - :",
				   name, (unsigned char)ch, i);
	}
	return 0;
}

/* The largest K whose i8 sums (each term at most 2^14) fit an i32. */
#define I8_K_MAX ((uint32_t)(INT32_MAX / (128 * 128)))

int validate_gemm(const Mfma__V1__Gemm *g, const struct validate_limits *lim,
		  const struct weight_shape *w, struct gemm_plan *plan, char *err, size_t errlen)
{
	memset(plan, 0, sizeof(*plan));
	if (!g->a)
		return bad(err, errlen, "a is missing");
	uint32_t m, k;
	enum mfma_dtype in;
	int rc;
	if (g->a->kind_case == MFMA__V1__OPERAND__KIND_WEIGHT) {
		/* A weight found by its name has a valid one (the registry
		 * checked it at load): the name is looked at only when none
		 * was, so that a bad name is not "not loaded". */
		if (!w) {
			rc = validate_weight_name(g->a->weight, err, errlen);
			return rc ? rc : bad(err, errlen, "weight '%s' is not loaded", g->a->weight);
		}
		if (g->a->sparsity != MFMA__V1__SPARSITY__DENSE)
			return bad(err, errlen, "a.sparsity does not apply to a resident weight");
		plan->a_form = A_WEIGHT;
		plan->weight = g->a->weight;
		m = w->m;
		k = w->k;
		in = w->dtype;
		plan->g.a_sparse = w->sparse;
	} else {
		rc = validate_operand(g->a, lim, "a", &plan->a_form, &m, &k, &in, err, errlen);
		if (rc)
			return rc;
		if (plan->a_form == A_SPARSE) {
			plan->g.a = g->a->sparse->values.data;
			plan->g.a_meta = (const uint32_t *)(const void *)g->a->sparse->meta.data;
			plan->g.a_sparse = true;
			plan->in_bytes += g->a->sparse->values.len + g->a->sparse->meta.len;
		} else {
			plan->g.a = g->a->dense->data.data;
			plan->g.a_sparse = plan->a_form != A_DENSE;
			plan->in_bytes += g->a->dense->data.len;
		}
	}
	rc = check_matrix_in(g->b, lim, "b", true, err, errlen);
	if (rc)
		return rc;
	if (g->b->rows != k)
		return bad(err, errlen, "b.rows=%u does not match a.cols=%u", g->b->rows, k);
	if ((enum mfma_dtype)g->b->dtype != in)
		return bad(err, errlen, "b.dtype=%s does not match a.dtype=%s",
			   mfma_dtype_name((enum mfma_dtype)g->b->dtype), mfma_dtype_name(in));
	uint32_t n = g->b->cols;

	enum mfma_dtype out;
	if (!g->has_out_dtype || g->out_dtype == MFMA__V1__DTYPE__DTYPE_UNSPECIFIED) {
		out = mfma_out_dtype_default(in);
	} else {
		rc = check_dtype(g->out_dtype, "out", err, errlen);
		if (rc)
			return rc;
		out = (enum mfma_dtype)g->out_dtype;
	}
	if (!mfma_out_dtype_ok(in, out)) {
		if (in == MFMA_DT_I8 || in == MFMA_DT_F32)
			return bad(err, errlen, "out_dtype=%s: %s inputs give an %s output",
				   mfma_dtype_name(out), mfma_dtype_name(in),
				   mfma_dtype_name(mfma_out_dtype_default(in)));
		return bad(err, errlen, "out_dtype=%s: %s inputs give f32 or %s", mfma_dtype_name(out),
			   mfma_dtype_name(in), mfma_dtype_name(in));
	}

	if (!isfinite(g->alpha) || !isfinite(g->beta))
		return bad(err, errlen, "alpha=%g and beta=%g must be finite", (double)g->alpha,
			   (double)g->beta);
	if (in == MFMA_DT_I8 && (g->alpha != 1.0f || (g->beta != 0.0f && g->beta != 1.0f)))
		return bad(err, errlen,
			   "alpha=%g beta=%g: integer GEMMs are exact and take alpha 1 and beta 0 or 1",
			   (double)g->alpha, (double)g->beta);
	/* i8 sums are kept in i32: each product is at most 128 x 128 = 2^14,
	 * so K of them (K/2 for a 2:4 A) are exact up to 2^31 - 1. */
	const uint32_t i8_k_max = plan->g.a_sparse ? I8_K_MAX * 2 : I8_K_MAX;
	if (in == MFMA_DT_I8 && k > i8_k_max)
		return bad(err, errlen,
			   "k=%u: an i8 GEMM sums in i32, exactly only up to k=%u%s; split K", k,
			   i8_k_max, plan->g.a_sparse ? " with a 2:4 A" : " (double with a 2:4 A)");
	if (g->beta != 0.0f) {
		if (!g->c)
			return bad(err, errlen, "beta=%g needs c, which is missing", (double)g->beta);
		rc = check_matrix_in(g->c, lim, "c", true, err, errlen);
		if (rc)
			return rc;
		if (g->c->rows != m || g->c->cols != n)
			return bad(err, errlen, "c has shape %ux%u but the product is %ux%u", g->c->rows,
				   g->c->cols, m, n);
		if ((enum mfma_dtype)g->c->dtype != out)
			return bad(err, errlen, "c.dtype=%s does not match the output dtype %s",
				   mfma_dtype_name((enum mfma_dtype)g->c->dtype), mfma_dtype_name(out));
		plan->c_bytes = (size_t)m * n * mfma_dtype_size(out);
		plan->c_region = g->c->region;
		plan->g.c = plan->c_region ? NULL : g->c->data.data;
		plan->in_bytes += g->c->data.len;
	} else if (g->c) {
		return bad(err, errlen, "c is given but beta is 0; set beta (1 to add c)");
	}
	if (g->has_device && g->device < -1)
		return bad(err, errlen, "device=%d: use -1 for any device or a device index", g->device);
	if (g->timeout_us > VALIDATE_MAX_TIMEOUT_US)
		return bad(err, errlen,
			   "timeout_us=%llu is longer than the limit of %llu (one day); use 0 for "
			   "no timeout",
			   (unsigned long long)g->timeout_us,
			   (unsigned long long)VALIDATE_MAX_TIMEOUT_US);

	plan->g.m = m;
	plan->g.n = n;
	plan->g.k = k;
	plan->g.in_dtype = in;
	plan->g.out_dtype = out;
	plan->g.alpha = g->alpha;
	plan->g.beta = g->beta;
	plan->b_region = g->b->region;
	plan->b_bytes = (size_t)k * n * mfma_dtype_size(in);
	plan->g.b = plan->b_region ? NULL : g->b->data.data;
	plan->in_bytes += g->b->data.len;
	plan->d_bytes = (size_t)m * n * mfma_dtype_size(out);
	plan->d_region = g->d;
	/* A D written into a region is bounded by the region, not the frame. */
	if (!plan->d_region && plan->d_bytes + 4096 > lim->max_out_bytes)
		return bad(err, errlen,
			   "the %ux%u %s result (%zu bytes) would not fit in one frame (limit %llu bytes)",
			   m, n, mfma_dtype_name(out), plan->d_bytes,
			   (unsigned long long)lim->max_out_bytes);
	return 0;
}

int validate_load_weight(const Mfma__V1__LoadWeight *lw, const struct validate_limits *lim,
			 int ndev, enum a_form *form, uint32_t *rows, uint32_t *cols,
			 enum mfma_dtype *dtype, char *err, size_t errlen)
{
	int rc = validate_weight_name(lw->name, err, errlen);
	if (rc == 0)
		rc = validate_operand(lw->a, lim, "a", form, rows, cols, dtype, err, errlen);
	if (rc)
		return rc;
	if (lw->has_device && (lw->device < -1 || lw->device >= ndev))
		return bad(err, errlen, "device=%d does not exist (devices 0..%d, or -1 for all)",
			   lw->device, ndev - 1);
	return 0;
}
