#include "npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t npy_magic[6] = { 0x93, 'N', 'U', 'M', 'P', 'Y' };

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

const char *npy_type_descr(enum npy_type t)
{
	switch (t) {
	case NPY_F4: return "<f4";
	case NPY_F2: return "<f2";
	case NPY_I1: return "|i1";
	case NPY_I4: return "<i4";
	case NPY_U2: return "<u2";
	default: return NULL;
	}
}

size_t npy_type_size(enum npy_type t)
{
	switch (t) {
	case NPY_F4: return 4;
	case NPY_F2: return 2;
	case NPY_I1: return 1;
	case NPY_I4: return 4;
	case NPY_U2: return 2;
	default: return 0;
	}
}

enum npy_type npy_type_of(enum mfma_dtype t)
{
	switch (t) {
	case MFMA_DT_F32: return NPY_F4;
	case MFMA_DT_F16: return NPY_F2;
	case MFMA_DT_BF16: return NPY_U2;
	case MFMA_DT_I8: return NPY_I1;
	case MFMA_DT_I32: return NPY_I4;
	default: return NPY_NONE;
	}
}

int npy_resolve(enum npy_type t, enum mfma_dtype hint, enum mfma_dtype *out, char *err,
		size_t errlen)
{
	switch (t) {
	case NPY_F4: *out = MFMA_DT_F32; return 0;
	case NPY_F2: *out = MFMA_DT_F16; return 0;
	case NPY_I1: *out = MFMA_DT_I8; return 0;
	case NPY_I4: *out = MFMA_DT_I32; return 0;
	case NPY_U2:
		if (hint == MFMA_DT_BF16) {
			*out = MFMA_DT_BF16;
			return 0;
		}
		if (hint == MFMA_DT_NONE)
			return fail(err, errlen, -EINVAL,
				    "the data is <u2, which is how bf16 is stored: say --dtype bf16");
		return fail(err, errlen, -EINVAL, "the data is <u2, which can only be read as bf16, "
			    "not %s", mfma_dtype_name(hint));
	default:
		return fail(err, errlen, -EINVAL, "no element type");
	}
}

/* ---- the header dictionary, a Python literal ---- */

struct cursor {
	const char *p, *end;
};

static void skip_ws(struct cursor *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

static bool eat(struct cursor *c, char ch)
{
	skip_ws(c);
	if (c->p < c->end && *c->p == ch) {
		c->p++;
		return true;
	}
	return false;
}

/* A quoted string ('x' or "x", no escapes: NumPy never writes any). */
static bool parse_str(struct cursor *c, char *out, size_t cap)
{
	skip_ws(c);
	if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
		return false;
	char q = *c->p++;
	size_t n = 0;
	while (c->p < c->end && *c->p != q) {
		if (n + 1 >= cap)
			return false;
		out[n++] = *c->p++;
	}
	if (c->p >= c->end)
		return false;
	c->p++;
	out[n] = '\0';
	return true;
}

static bool parse_word(struct cursor *c, const char *w)
{
	size_t n = strlen(w);
	skip_ws(c);
	if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
		c->p += n;
		return true;
	}
	return false;
}

/* A non-negative integer, with Python 2's optional L suffix. */
static bool parse_dim(struct cursor *c, uint64_t *out)
{
	skip_ws(c);
	if (c->p >= c->end || *c->p < '0' || *c->p > '9')
		return false;
	uint64_t v = 0;
	while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
		if (v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(*c->p++ - '0');
	}
	if (c->p < c->end && *c->p == 'L')
		c->p++;
	*out = v;
	return true;
}

static enum npy_type descr_type(const char *d)
{
	/* One-byte types have no byte order: NumPy writes '|', others may
	 * write '<', '=' or nothing. */
	if (!strcmp(d, "|i1") || !strcmp(d, "<i1") || !strcmp(d, "=i1") || !strcmp(d, "i1"))
		return NPY_I1;
	if (!strcmp(d, "<f4"))
		return NPY_F4;
	if (!strcmp(d, "<f2"))
		return NPY_F2;
	if (!strcmp(d, "<i4"))
		return NPY_I4;
	if (!strcmp(d, "<u2"))
		return NPY_U2;
	return NPY_NONE;
}

#define MAX_DIMS 8

int npy_parse(const void *file, size_t len, struct npy_info *info, char *err, size_t errlen)
{
	return npy_parse_head(file, len, len, info, err, errlen);
}

int npy_parse_head(const void *head, size_t len, uint64_t file_len, struct npy_info *info,
		   char *err, size_t errlen)
{
	const uint8_t *b = head;
	memset(info, 0, sizeof(*info));
	if (file_len < len)
		return fail(err, errlen, -EINVAL, "the file is shorter than what was read of it");
	if (len < 10 || memcmp(b, npy_magic, sizeof(npy_magic)) != 0)
		return fail(err, errlen, -EINVAL, "not a .npy file (no \\x93NUMPY magic at the "
			    "start)");
	int major = b[6];
	size_t hstart, hlen;
	if (major == 1) {
		hstart = 10;
		hlen = (size_t)b[8] | (size_t)b[9] << 8;
	} else if (major == 2 || major == 3) {
		if (len < 12)
			return fail(err, errlen, -EINVAL, "truncated .npy header (%zu bytes)", len);
		hstart = 12;
		hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
	} else {
		return fail(err, errlen, -ENOTSUP, ".npy format version %d.%d is not supported "
			    "(1.0, 2.0 and 3.0 are)", major, b[7]);
	}
	if (hlen > len - hstart)
		return fail(err, errlen, -EINVAL, "truncated .npy file: the header announces %zu "
			    "bytes, only %zu follow", hlen, len - hstart);

	struct cursor c = { (const char *)b + hstart, (const char *)b + hstart + hlen };
	char descr[32] = "", key[32];
	bool have_descr = false, have_order = false, have_shape = false, fortran = false;
	uint64_t dims[MAX_DIMS];
	int ndim = 0;

	if (!eat(&c, '{'))
		return fail(err, errlen, -EINVAL, "bad .npy header: it does not start with '{'");
	while (!eat(&c, '}')) {
		if (!parse_str(&c, key, sizeof(key)) || !eat(&c, ':'))
			return fail(err, errlen, -EINVAL, "bad .npy header: expected 'key': at "
				    "offset %zu", (size_t)(c.p - (const char *)b));
		if (!strcmp(key, "descr")) {
			skip_ws(&c);
			if (c.p < c.end && *c.p == '[')
				return fail(err, errlen, -ENOTSUP, "structured .npy dtypes are not "
					    "supported; save a plain 2-D array");
			if (!parse_str(&c, descr, sizeof(descr)))
				return fail(err, errlen, -EINVAL, "bad .npy header: descr is not "
					    "a string");
			have_descr = true;
		} else if (!strcmp(key, "fortran_order")) {
			if (parse_word(&c, "True"))
				fortran = true;
			else if (parse_word(&c, "False"))
				fortran = false;
			else
				return fail(err, errlen, -EINVAL, "bad .npy header: fortran_order "
					    "is neither True nor False");
			have_order = true;
		} else if (!strcmp(key, "shape")) {
			if (!eat(&c, '('))
				return fail(err, errlen, -EINVAL, "bad .npy header: shape is not "
					    "a tuple");
			while (!eat(&c, ')')) {
				if (ndim == MAX_DIMS || !parse_dim(&c, &dims[ndim]))
					return fail(err, errlen, -EINVAL, "bad .npy header: shape "
						    "is not a tuple of at most %d integers", MAX_DIMS);
				ndim++;
				if (!eat(&c, ',')) {
					if (!eat(&c, ')'))
						return fail(err, errlen, -EINVAL, "bad .npy header: "
							    "shape is not closed by ')'");
					break;
				}
			}
			have_shape = true;
		} else {
			return fail(err, errlen, -EINVAL, "bad .npy header: unknown key '%s'", key);
		}
		if (!eat(&c, ',')) {
			if (!eat(&c, '}'))
				return fail(err, errlen, -EINVAL, "bad .npy header: expected ',' or "
					    "'}' after '%s'", key);
			break;
		}
	}
	if (!have_descr || !have_order || !have_shape)
		return fail(err, errlen, -EINVAL, "bad .npy header: missing '%s'",
			    !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");

	info->type = descr_type(descr);
	if (info->type == NPY_NONE) {
		if (descr[0] == '>')
			return fail(err, errlen, -ENOTSUP, "big-endian .npy data ('%s') is not "
				    "supported; convert with a.astype('<%s')", descr, descr + 1);
		return fail(err, errlen, -ENOTSUP, ".npy dtype '%s' is not supported; use <f4 "
			    "(f32), <f2 (f16), <u2 (bf16 bits), |i1 (i8) or <i4 (i32)", descr);
	}
	if (fortran)
		return fail(err, errlen, -ENOTSUP, ".npy array is in Fortran order; only C order "
			    "is supported (save np.ascontiguousarray(a))");
	if (ndim == 0 || ndim > 2)
		return fail(err, errlen, -ENOTSUP, ".npy array has %d dimensions; only 1-D (read "
			    "as 1 x N) and 2-D arrays are supported", ndim);
	uint64_t rows = ndim == 2 ? dims[0] : 1, cols = ndim == 2 ? dims[1] : dims[0];
	if (rows > UINT32_MAX || cols > UINT32_MAX)
		return fail(err, errlen, -ENOTSUP, ".npy shape (%llu, %llu) exceeds 2^32-1 per "
			    "dimension", (unsigned long long)rows, (unsigned long long)cols);
	size_t es = npy_type_size(info->type);
	if (file_len - hstart - hlen > SIZE_MAX)
		return fail(err, errlen, -EINVAL, ".npy data of %llu bytes is more than memory can "
			    "address", (unsigned long long)(file_len - hstart - hlen));
	size_t have = (size_t)(file_len - hstart - hlen);
	/* Each dimension is below 2^32, so their product fits in 64 bits. */
	uint64_t count = rows * cols;
	char shape[64];
	if (ndim == 2)
		snprintf(shape, sizeof(shape), "(%llu, %llu)", (unsigned long long)rows,
			 (unsigned long long)cols);
	else
		snprintf(shape, sizeof(shape), "(%llu,)", (unsigned long long)cols);
	if (count > SIZE_MAX / es)
		return fail(err, errlen, -EINVAL, ".npy shape %s of %s needs more bytes than "
			    "memory can address; the file has %zu", shape, descr, have);
	if (count * es != have)
		return fail(err, errlen, -EINVAL, ".npy shape %s of %s needs %llu data bytes, the "
			    "file has %zu", shape, descr, (unsigned long long)(count * es), have);
	info->version = major;
	info->ndim = ndim;
	info->rows = (uint32_t)rows;
	info->cols = (uint32_t)cols;
	info->data_offset = hstart + hlen;
	info->data_bytes = have;
	return 0;
}

size_t npy_write_header(enum npy_type t, uint32_t rows, uint32_t cols, uint8_t *out)
{
	const char *descr = npy_type_descr(t);
	char dict[NPY_HEADER_MAX];
	if (!descr)
		return 0;
	int n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, "
			 "'shape': (%u, %u), }", descr, rows, cols);
	/* magic + version + 2-byte length = 10, then the dict, spaces and a
	 * newline up to a multiple of 64 so the data is aligned. */
	size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
	memcpy(out, npy_magic, sizeof(npy_magic));
	out[6] = 1;
	out[7] = 0;
	size_t hlen = total - 10;
	out[8] = (uint8_t)hlen;
	out[9] = (uint8_t)(hlen >> 8);
	memcpy(out + 10, dict, (size_t)n);
	memset(out + 10 + n, ' ', hlen - (size_t)n - 1);
	out[total - 1] = '\n';
	return total;
}

void npy_matrix_free(struct npy_matrix *m)
{
	if (!m)
		return;
	free(m->alloc);
	memset(m, 0, sizeof(*m));
}

int npy_decode(void *file, size_t len, enum mfma_dtype want, bool convert, struct npy_matrix *m,
	       char *err, size_t errlen)
{
	struct npy_info info;
	enum mfma_dtype have;
	uint8_t *buf = file;

	memset(m, 0, sizeof(*m));
	int rc = npy_parse(buf, len, &info, err, errlen);
	if (rc == 0)
		rc = npy_resolve(info.type, want, &have, err, errlen);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	m->rows = info.rows;
	m->cols = info.cols;
	if (want == MFMA_DT_NONE || want == have) {
		/* Keep the file's buffer; move the data to its start, where the
		 * header may have left it misaligned for the element type. */
		memmove(buf, buf + info.data_offset, info.data_bytes);
		m->alloc = buf;
		m->data = buf;
		m->bytes = info.data_bytes;
		m->dtype = have;
		return 0;
	}
	if (!convert || have != MFMA_DT_F32 || (want != MFMA_DT_F16 && want != MFMA_DT_BF16)) {
		rc = fail(err, errlen, -EINVAL, "the data is %s (%s), which cannot be used as %s%s",
			  mfma_dtype_name(have), npy_type_descr(info.type), mfma_dtype_name(want),
			  have == MFMA_DT_F32 && !convert ? " (use --dtype to convert)" : "");
		free(buf);
		return rc;
	}
	/* rows * cols * 4 fitted in the file, so half of it fits too. */
	size_t count = (size_t)info.rows * info.cols;
	uint16_t *out = malloc(count * 2 + 1);
	if (!out) {
		free(buf);
		return fail(err, errlen, -ENOMEM, "out of memory converting %zu elements", count);
	}
	for (size_t i = 0; i < count; i++) {
		float f;
		memcpy(&f, buf + info.data_offset + 4 * i, sizeof(f));
		out[i] = want == MFMA_DT_F16 ? mfma_f32_to_f16(f) : mfma_f32_to_bf16(f);
	}
	free(buf);
	m->alloc = out;
	m->data = out;
	m->bytes = count * 2;
	m->dtype = want;
	return 0;
}
