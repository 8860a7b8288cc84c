#include "json.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when the bytes
 * there are not one (overlong forms and surrogates are invalid too). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	if (c < 0x80)
		return 1;
	size_t len;
	unsigned char lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
	} else
		return 0;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

void json_write_escaped(FILE *f, const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	fputc('"', f);
	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		switch (c) {
		case '"': fputs("\\\"", f); i++; continue;
		case '\\': fputs("\\\\", f); i++; continue;
		case '\b': fputs("\\b", f); i++; continue;
		case '\f': fputs("\\f", f); i++; continue;
		case '\n': fputs("\\n", f); i++; continue;
		case '\r': fputs("\\r", f); i++; continue;
		case '\t': fputs("\\t", f); i++; continue;
		default: break;
		}
		if (c < 0x20) {
			fprintf(f, "\\u%04x", c);
			i++;
			continue;
		}
		size_t l = utf8_len(s + i, n - i);
		if (l == 0) {
			fputs("\\ufffd", f);
			i++;
			continue;
		}
		fwrite(s + i, 1, l, f);
		i += l;
	}
	fputc('"', f);
}

/* ---- writer ---- */

void json_init(struct json *j, FILE *f, int indent)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
	j->indent = indent;
	j->first[0] = true;
}

static void newline(struct json *j)
{
	if (j->indent <= 0)
		return;
	fputc('\n', j->f);
	for (int i = 0; i < j->depth * j->indent; i++)
		fputc(' ', j->f);
}

/* Before any value or key: the comma and the line break it needs. */
static void before(struct json *j)
{
	if (j->after_key) {
		j->after_key = false;
		return;
	}
	if (j->depth == 0)
		return;
	if (!j->first[j->depth])
		fputc(',', j->f);
	j->first[j->depth] = false;
	newline(j);
}

static void open_(struct json *j, char ch)
{
	before(j);
	fputc(ch, j->f);
	if (j->depth + 1 < JSON_MAX_DEPTH)
		j->depth++;
	j->first[j->depth] = true;
}

static void close_(struct json *j, char ch)
{
	bool empty = j->first[j->depth];
	if (j->depth > 0)
		j->depth--;
	if (!empty)
		newline(j);
	fputc(ch, j->f);
	if (j->depth == 0 && j->indent > 0)
		fputc('\n', j->f);
}

void json_object_begin(struct json *j) { open_(j, '{'); }
void json_object_end(struct json *j) { close_(j, '}'); }
void json_array_begin(struct json *j) { open_(j, '['); }
void json_array_end(struct json *j) { close_(j, ']'); }

void json_key(struct json *j, const char *key)
{
	before(j);
	json_write_escaped(j->f, key, strlen(key));
	fputs(j->indent > 0 ? ": " : ":", j->f);
	j->after_key = true;
}

void json_string_n(struct json *j, const char *s, size_t n)
{
	before(j);
	json_write_escaped(j->f, s ? s : "", s ? n : 0);
}

void json_string(struct json *j, const char *s)
{
	json_string_n(j, s, s ? strlen(s) : 0);
}

void json_uint(struct json *j, uint64_t v)
{
	before(j);
	fprintf(j->f, "%" PRIu64, v);
}

void json_int(struct json *j, int64_t v)
{
	before(j);
	fprintf(j->f, "%" PRId64, v);
}

void json_double(struct json *j, double v)
{
	before(j);
	if (!isfinite(v))
		fputs("null", j->f);
	else
		fprintf(j->f, "%.9g", v);
}

void json_bool(struct json *j, bool v)
{
	before(j);
	fputs(v ? "true" : "false", j->f);
}

void json_null(struct json *j)
{
	before(j);
	fputs("null", j->f);
}

void json_kv_string(struct json *j, const char *key, const char *v)
{
	json_key(j, key);
	json_string(j, v);
}

void json_kv_uint(struct json *j, const char *key, uint64_t v)
{
	json_key(j, key);
	json_uint(j, v);
}

void json_kv_int(struct json *j, const char *key, int64_t v)
{
	json_key(j, key);
	json_int(j, v);
}

void json_kv_double(struct json *j, const char *key, double v)
{
	json_key(j, key);
	json_double(j, v);
}

void json_kv_bool(struct json *j, const char *key, bool v)
{
	json_key(j, key);
	json_bool(j, v);
}

/* ---- validator (RFC 8259) ---- */

struct vstate {
	const unsigned char *p, *start, *end;
	char *err;
	size_t errlen;
};

static int vfail(struct vstate *v, const char *what)
{
	if (v->err && v->errlen)
		snprintf(v->err, v->errlen, "invalid JSON at offset %zu: %s",
			 (size_t)(v->p - v->start), what);
	return -EINVAL;
}

static void vws(struct vstate *v)
{
	while (v->p < v->end && (*v->p == ' ' || *v->p == '\t' || *v->p == '\n' || *v->p == '\r'))
		v->p++;
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int vstring(struct vstate *v)
{
	v->p++; /* the opening quote */
	while (v->p < v->end) {
		unsigned char c = *v->p;
		if (c == '"') {
			v->p++;
			return 0;
		}
		if (c < 0x20)
			return vfail(v, "control character inside a string");
		if (c == '\\') {
			if (v->end - v->p < 2)
				return vfail(v, "unterminated escape");
			unsigned char e = v->p[1];
			if (e == 'u') {
				if (v->end - v->p < 6)
					return vfail(v, "short \\u escape");
				for (int i = 2; i < 6; i++)
					if (hexval(v->p[i]) < 0)
						return vfail(v, "bad hex digit in \\u escape");
				v->p += 6;
				continue;
			}
			if (!strchr("\"\\/bfnrt", e) || e == '\0')
				return vfail(v, "unknown escape");
			v->p += 2;
			continue;
		}
		size_t l = utf8_len(v->p, (size_t)(v->end - v->p));
		if (l == 0)
			return vfail(v, "invalid UTF-8 in a string");
		v->p += l;
	}
	return vfail(v, "unterminated string");
}

static bool vdigits(struct vstate *v)
{
	const unsigned char *s = v->p;
	while (v->p < v->end && *v->p >= '0' && *v->p <= '9')
		v->p++;
	return v->p > s;
}

static int vnumber(struct vstate *v)
{
	if (*v->p == '-')
		v->p++;
	if (v->p < v->end && *v->p == '0')
		v->p++;
	else if (!vdigits(v))
		return vfail(v, "bad number");
	if (v->p < v->end && *v->p == '.') {
		v->p++;
		if (!vdigits(v))
			return vfail(v, "no digits after the decimal point");
	}
	if (v->p < v->end && (*v->p == 'e' || *v->p == 'E')) {
		v->p++;
		if (v->p < v->end && (*v->p == '+' || *v->p == '-'))
			v->p++;
		if (!vdigits(v))
			return vfail(v, "no digits in the exponent");
	}
	return 0;
}

static int vlit(struct vstate *v, const char *w)
{
	size_t n = strlen(w);
	if ((size_t)(v->end - v->p) < n || memcmp(v->p, w, n) != 0)
		return vfail(v, "unexpected character");
	v->p += n;
	return 0;
}

static int vvalue(struct vstate *v, int depth)
{
	int rc;
	if (depth > 512)
		return vfail(v, "nested too deeply");
	vws(v);
	if (v->p >= v->end)
		return vfail(v, "expected a value");
	switch (*v->p) {
	case '{':
		v->p++;
		vws(v);
		if (v->p < v->end && *v->p == '}') {
			v->p++;
			return 0;
		}
		for (;;) {
			vws(v);
			if (v->p >= v->end || *v->p != '"')
				return vfail(v, "expected a string key");
			if ((rc = vstring(v)) < 0)
				return rc;
			vws(v);
			if (v->p >= v->end || *v->p != ':')
				return vfail(v, "expected ':'");
			v->p++;
			if ((rc = vvalue(v, depth + 1)) < 0)
				return rc;
			vws(v);
			if (v->p < v->end && *v->p == ',') {
				v->p++;
				continue;
			}
			if (v->p < v->end && *v->p == '}') {
				v->p++;
				return 0;
			}
			return vfail(v, "expected ',' or '}'");
		}
	case '[':
		v->p++;
		vws(v);
		if (v->p < v->end && *v->p == ']') {
			v->p++;
			return 0;
		}
		for (;;) {
			if ((rc = vvalue(v, depth + 1)) < 0)
				return rc;
			vws(v);
			if (v->p < v->end && *v->p == ',') {
				v->p++;
				continue;
			}
			if (v->p < v->end && *v->p == ']') {
				v->p++;
				return 0;
			}
			return vfail(v, "expected ',' or ']'");
		}
	case '"':
		return vstring(v);
	case 't':
		return vlit(v, "true");
	case 'f':
		return vlit(v, "false");
	case 'n':
		return vlit(v, "null");
	default:
		if (*v->p == '-' || (*v->p >= '0' && *v->p <= '9'))
			return vnumber(v);
		return vfail(v, "unexpected character");
	}
}

int json_validate(const char *text, size_t n, char *err, size_t errlen)
{
	struct vstate v = { (const unsigned char *)text, (const unsigned char *)text,
			    (const unsigned char *)text + n, err, errlen };
	int rc = vvalue(&v, 0);
	if (rc < 0)
		return rc;
	vws(&v);
	if (v.p != v.end)
		return vfail(&v, "text after the value");
	return 0;
}
