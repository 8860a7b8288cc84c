#include "ctl_util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

int ctl_parse_u64(const char *what, const char *s, uint64_t min, uint64_t max, uint64_t *out,
		  char *err, size_t errlen)
{
	char *end;
	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return fail(err, errlen, "%s '%s': expected a whole number from %llu to %llu", what,
			    s ? s : "", (unsigned long long)min, (unsigned long long)max);
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return fail(err, errlen, "%s '%s': expected a whole number from %llu to %llu", what,
			    s, (unsigned long long)min, (unsigned long long)max);
	*out = v;
	return 0;
}

int ctl_parse_int(const char *what, const char *s, int min, int max, int *out, char *err,
		  size_t errlen)
{
	char *end;
	if (!s || !*s || *s == ' ')
		return fail(err, errlen, "%s '%s': expected a whole number from %d to %d", what,
			    s ? s : "", min, max);
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return fail(err, errlen, "%s '%s': expected a whole number from %d to %d", what, s,
			    min, max);
	*out = (int)v;
	return 0;
}

int ctl_parse_float(const char *what, const char *s, float *out, char *err, size_t errlen)
{
	char *end;
	if (!s || !*s || *s == ' ')
		return fail(err, errlen, "%s '%s': expected a number", what, s ? s : "");
	errno = 0;
	float v = strtof(s, &end);
	if (errno || *end || !isfinite(v))
		return fail(err, errlen, "%s '%s': expected a finite number", what, s);
	*out = v;
	return 0;
}

int ctl_parse_shape(const char *what, const char *s, uint32_t *rows, uint32_t *cols, char *err,
		    size_t errlen)
{
	const uint64_t max = 1ull << 31;
	char *end;
	if (!s || *s < '1' || *s > '9')
		goto bad;
	errno = 0;
	unsigned long long r = strtoull(s, &end, 10);
	if (errno || (*end != 'x' && *end != 'X' && *end != ',') || end[1] < '1' || end[1] > '9')
		goto bad;
	const char *c = end + 1;
	unsigned long long k = strtoull(c, &end, 10);
	if (errno || *end || r > max || k > max)
		goto bad;
	*rows = (uint32_t)r;
	*cols = (uint32_t)k;
	return 0;
bad:
	return fail(err, errlen, "%s '%s': expected ROWSxCOLS, each 1 to %llu (e.g. 128x256)",
		    what, s ? s : "", (unsigned long long)max);
}

int ctl_parse_dtype(const char *what, const char *s, unsigned allowed, enum mfma_dtype *out,
		    char *err, size_t errlen)
{
	enum mfma_dtype t = s ? mfma_dtype_parse(s) : MFMA_DT_NONE;
	if (t != MFMA_DT_NONE && (allowed & CTL_DT_BIT(t))) {
		*out = t;
		return 0;
	}
	char names[64] = "";
	for (int i = MFMA_DT_F32; i <= MFMA_DT_I32; i++) {
		if (!(allowed & CTL_DT_BIT(i)))
			continue;
		size_t n = strlen(names);
		snprintf(names + n, sizeof(names) - n, "%s%s", n ? ", " : "",
			 mfma_dtype_name((enum mfma_dtype)i));
	}
	return fail(err, errlen, "%s '%s': expected one of %s", what, s ? s : "", names);
}

int ctl_parse_sparse(const char *what, const char *s, enum ctl_sparse *out, char *err,
		     size_t errlen)
{
	static const struct {
		const char *name;
		enum ctl_sparse v;
	} names[] = {
		{ "validate", CTL_SPARSE_VALIDATE },
		{ "prune", CTL_SPARSE_PRUNE },
		{ "packed", CTL_SPARSE_PACKED },
	};
	for (size_t i = 0; s && i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcmp(s, names[i].name)) {
			*out = names[i].v;
			return 0;
		}
	}
	return fail(err, errlen, "%s '%s': expected validate, prune or packed", what, s ? s : "");
}

/* v in `base`, scaled by `step` into units[] while it is that large; three
 * significant digits. */
static void format_scaled(uint64_t v, double step, const char *base, const char *const *units,
			  size_t nunits, char *buf, size_t len)
{
	if ((double)v < step) {
		snprintf(buf, len, "%llu %s", (unsigned long long)v, base);
		return;
	}
	double x = (double)v / step;
	size_t u = 0;
	while (x >= step && u + 1 < nunits) {
		x /= step;
		u++;
	}
	snprintf(buf, len, x < 10 ? "%.2f %s" : x < 100 ? "%.1f %s" : "%.0f %s", x, units[u]);
}

void ctl_format_bytes(uint64_t b, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB" };
	format_scaled(b, 1024.0, "B", units, sizeof(units) / sizeof(units[0]), buf, len);
}

void ctl_format_ns(uint64_t ns, char *buf, size_t len)
{
	static const char *const units[] = { "us", "ms", "s" };
	format_scaled(ns, 1000.0, "ns", units, sizeof(units) / sizeof(units[0]), buf, len);
}

void ctl_format_uptime(uint64_t ns, char *buf, size_t len)
{
	uint64_t s = ns / 1000000000ull;
	unsigned long long d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60, sec = s % 60;
	if (d)
		snprintf(buf, len, "%llud %02lluh %02llum %02llus", d, h, m, sec);
	else if (h)
		snprintf(buf, len, "%lluh %02llum %02llus", h, m, sec);
	else if (m)
		snprintf(buf, len, "%llum %02llus", m, sec);
	else
		snprintf(buf, len, "%llus", sec);
}

uint64_t ctl_percentile(const uint64_t *sorted, size_t n, double p)
{
	if (n == 0)
		return 0;
	if (p <= 0)
		return sorted[0];
	/* Nearest rank: the smallest value with at least p% of the values
	 * at or below it. */
	double rank = ceil(p / 100.0 * (double)n);
	size_t i = rank < 1 ? 0 : (size_t)rank - 1;
	return sorted[i < n ? i : n - 1];
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

void ctl_sort_u64(uint64_t *v, size_t n)
{
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_u64);
}

double ctl_gflops(uint64_t m, uint64_t n, uint64_t k, uint64_t ns)
{
	if (ns == 0)
		return 0.0;
	return 2.0 * (double)m * (double)n * (double)k / (double)ns;
}

static void put(void *data, enum mfma_dtype t, size_t i, uint64_t *st)
{
	uint64_t r = ctl_rand(st);
	if (t == MFMA_DT_I8) {
		/* 1..127 with a random sign. */
		int v = (int)(r % 127) + 1;
		((int8_t *)data)[i] = (int8_t)(r >> 32 & 1 ? -v : v);
		return;
	}
	if (t == MFMA_DT_I32) {
		int v = (int)(r % 1000) + 1;
		((int32_t *)data)[i] = r >> 32 & 1 ? -v : v;
		return;
	}
	/* Magnitude in [1/16, 1]: far from zero in every float format. */
	double mag = 0.0625 + 0.9375 * (double)(r >> 11) / 9007199254740992.0;
	float f = (float)((ctl_rand(st) & 1) ? -mag : mag);
	switch (t) {
	case MFMA_DT_F32: ((float *)data)[i] = f; break;
	case MFMA_DT_F16: ((uint16_t *)data)[i] = mfma_f32_to_f16(f); break;
	case MFMA_DT_BF16: ((uint16_t *)data)[i] = mfma_f32_to_bf16(f); break;
	default: break;
	}
}

int ctl_random_matrix(void *data, enum mfma_dtype t, uint32_t rows, uint32_t cols, bool sparse24,
		      uint64_t seed)
{
	static const uint8_t pairs[6][2] = { { 0, 1 }, { 0, 2 }, { 0, 3 }, { 1, 2 }, { 1, 3 },
					     { 2, 3 } };
	size_t es = mfma_dtype_size(t);
	if (es == 0 || (sparse24 && cols % 4 != 0))
		return -EINVAL;
	uint64_t st = seed;
	size_t count = (size_t)rows * cols;
	if (!sparse24) {
		for (size_t i = 0; i < count; i++)
			put(data, t, i, &st);
		return 0;
	}
	memset(data, 0, count * es);
	for (size_t r = 0; r < rows; r++) {
		for (size_t g = 0; g < cols / 4; g++) {
			const uint8_t *p = pairs[ctl_rand(&st) % 6];
			size_t base = r * cols + g * 4;
			put(data, t, base + p[0], &st);
			put(data, t, base + p[1], &st);
		}
	}
	return 0;
}

static double tol_of(enum mfma_dtype t)
{
	switch (t) {
	case MFMA_DT_F32: return 1e-5;
	case MFMA_DT_F16:
	case MFMA_DT_BF16: return 1e-2;
	default: return 0.0;
	}
}

double ctl_tolerance(enum mfma_dtype in, enum mfma_dtype out)
{
	double a = tol_of(in), b = tol_of(out);
	return a > b ? a : b;
}

bool ctl_within_tolerance(double rel, double tolerance)
{
	return tolerance == 0.0 ? rel == 0.0 : rel <= tolerance;
}

double ctl_worse_error(double worst, double rel)
{
	if (!isfinite(rel))
		rel = INFINITY;
	return rel > worst ? rel : worst;
}

uint64_t ctl_unexplained_ns(uint64_t client_wait_ns, uint64_t server_total_ns)
{
	return client_wait_ns > server_total_ns ? client_wait_ns - server_total_ns : 0;
}

size_t ctl_printable(const char *in, size_t n, char *out)
{
	const unsigned char *s = (const unsigned char *)in;
	for (size_t i = 0; i < n; i++) {
		const unsigned char c = s[i];
		const bool c1 = c == 0xc2 && i + 1 < n && s[i + 1] >= 0x80 && s[i + 1] <= 0x9f;
		if (c1) {
			out[i] = out[i + 1] = '?';
			i++;
		} else {
			out[i] = (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f ? '?' : (char)c;
		}
	}
	out[n] = '\0';
	return n;
}
