#include "choice_cache.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fnv.h"
#include "mfma_dtype.h"

int choice_cache_init(struct choice_cache *c, size_t max)
{
	memset(c, 0, sizeof(*c));
	c->max = max && max < CHOICE_CACHE_MAX ? max : CHOICE_CACHE_MAX;
	c->e = calloc(c->max, sizeof(*c->e));
	return c->e ? 0 : -ENOMEM;
}

void choice_cache_free(struct choice_cache *c)
{
	if (!c)
		return;
	free(c->e);
	c->e = NULL;
	c->n = 0;
}

static int same_shape(const struct backend_choice_key *a, const struct backend_choice_key *b)
{
	return a->m == b->m && a->k == b->k && a->dtype == b->dtype && a->sparse == b->sparse &&
	       a->n_max == b->n_max && a->out == b->out;
}

static int same_key(const struct backend_choice_key *a, const struct backend_choice_key *b)
{
	return strcmp(a->device, b->device) == 0 && same_shape(a, b);
}

static struct choice_entry *find(const struct choice_cache *c,
				 const struct backend_choice_key *key)
{
	for (size_t i = 0; i < c->n; i++)
		if (same_key(&c->e[i].key, key))
			return &c->e[i];
	return NULL;
}

const char *choice_cache_get(const struct choice_cache *c, const struct backend_choice_key *key)
{
	const struct choice_entry *e = find(c, key);
	return e ? e->order : NULL;
}

const char *choice_cache_other_device(const struct choice_cache *c,
				      const struct backend_choice_key *key)
{
	for (size_t i = c->n; i-- > 0;)
		if (same_shape(&c->e[i].key, key) && strcmp(c->e[i].key.device, key->device) != 0)
			return c->e[i].key.device;
	return NULL;
}

/* Whether s fits a field of the file: not empty, shorter than len, no tab,
 * no line break. */
static int field_ok(const char *s, size_t len)
{
	size_t n = strnlen(s, len);
	return n > 0 && n < len && strcspn(s, "\t\n\r") == n;
}

int choice_cache_put(struct choice_cache *c, const struct backend_choice_key *key,
		     const char *order)
{
	if (!c->e || !field_ok(key->device, sizeof(key->device)) ||
	    !field_ok(order, CHOICE_ORDER_MAX) || key->sparse > 1)
		return -EINVAL;
	struct choice_entry *e = find(c, key);
	int dropped = 0;
	if (!e) {
		if (c->n == c->max) {
			/* The oldest goes: a choice measured long ago (another
			 * driver, a weight gone) is the least likely to be asked
			 * for again. */
			memmove(&c->e[0], &c->e[1], (c->n - 1) * sizeof(c->e[0]));
			c->n--;
			dropped = 1;
		}
		e = &c->e[c->n++];
		e->key = *key;
	}
	snprintf(e->order, sizeof(e->order), "%s", order);
	return dropped;
}

static const char *dtype_word(uint32_t t)
{
	return mfma_dtype_name((enum mfma_dtype)t);
}

/* A dtype name back to its value; "none" is MFMA_DT_NONE (an output type
 * not yet known), anything else unknown is -1. */
static int dtype_value(const char *s)
{
	if (strcmp(s, "none") == 0)
		return MFMA_DT_NONE;
	enum mfma_dtype t = mfma_dtype_parse(s);
	return t == MFMA_DT_NONE ? -1 : (int)t;
}

size_t choice_cache_format(const struct choice_cache *c, char *buf, size_t len)
{
	/* The header goes last, once the body's checksum is known: its
	 * length is fixed, so the body is written after room for it. */
	char head[64];
	int hn = snprintf(head, sizeof(head), "mfmad-choices %d %016" PRIx64 "\n",
			  CHOICE_CACHE_VERSION, (uint64_t)0);
	size_t off = (size_t)hn;
	uint64_t sum = FNV64_INIT;
	for (size_t i = 0; i < c->n; i++) {
		const struct choice_entry *e = &c->e[i];
		char line[512];
		int n = snprintf(line, sizeof(line), "%s\t%u\t%u\t%s\t%u\t%u\t%s\t%s\n",
				 e->key.device, e->key.m, e->key.k, dtype_word(e->key.dtype),
				 e->key.sparse, e->key.n_max, dtype_word(e->key.out), e->order);
		if (n < 0 || (size_t)n >= sizeof(line))
			continue; /* cannot happen: the fields are bounded */
		sum = fnv64(sum, line, (size_t)n);
		if (off + (size_t)n < len)
			memcpy(buf + off, line, (size_t)n);
		off += (size_t)n;
	}
	snprintf(head, sizeof(head), "mfmad-choices %d %016" PRIx64 "\n", CHOICE_CACHE_VERSION, sum);
	if (off < len) {
		memcpy(buf, head, (size_t)hn);
		buf[off] = '\0';
	} else if (len) {
		buf[0] = '\0';
	}
	return off;
}

static int parse_fail(struct choice_cache *c, char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int parse_fail(struct choice_cache *c, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	c->n = 0;
	return -EINVAL;
}

/* Parses an unsigned 32-bit decimal field; -1 when it is not one. */
static int u32_of(const char *s, uint32_t *out)
{
	char *end;
	if (!*s || *s == '-')
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end || errno || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

int choice_cache_parse(struct choice_cache *c, const char *text, size_t len, char *err,
		       size_t errlen)
{
	c->n = 0;
	if (!c->e)
		return parse_fail(c, err, errlen, "the cache has no room");
	if (len > CHOICE_FILE_MAX)
		return parse_fail(c, err, errlen, "the file is larger than %u bytes", CHOICE_FILE_MAX);
	const char *nl = memchr(text, '\n', len);
	unsigned version = 0;
	char sumhex[17] = "";
	char head[64];
	size_t hlen = nl ? (size_t)(nl - text) : len;
	if (!nl || hlen >= sizeof(head))
		return parse_fail(c, err, errlen, "no header line 'mfmad-choices %d <checksum>'",
				  CHOICE_CACHE_VERSION);
	memcpy(head, text, hlen);
	head[hlen] = '\0';
	if (sscanf(head, "mfmad-choices %u %16s", &version, sumhex) != 2 || strlen(sumhex) != 16)
		return parse_fail(c, err, errlen, "no header line 'mfmad-choices %d <checksum>'",
				  CHOICE_CACHE_VERSION);
	if (version != CHOICE_CACHE_VERSION)
		return parse_fail(c, err, errlen, "format version %u; this mfmad reads version %d",
				  version, CHOICE_CACHE_VERSION);
	const char *body = nl + 1;
	size_t blen = len - hlen - 1;
	char want[17];
	snprintf(want, sizeof(want), "%016" PRIx64, fnv64(FNV64_INIT, body, blen));
	if (strcmp(want, sumhex) != 0)
		return parse_fail(c, err, errlen, "checksum %s does not match the contents (%s)",
				  sumhex, want);
	unsigned lineno = 1;
	while (blen > 0) {
		lineno++;
		const char *end = memchr(body, '\n', blen);
		if (!end)
			return parse_fail(c, err, errlen, "line %u is not ended", lineno);
		char line[512];
		size_t n = (size_t)(end - body);
		if (n >= sizeof(line))
			return parse_fail(c, err, errlen, "line %u is too long", lineno);
		memcpy(line, body, n);
		line[n] = '\0';
		blen -= n + 1;
		body = end + 1;
		char *f[9];
		size_t nf = 0;
		/* strtok_r would merge empty fields; the split is by hand, and
		 * a ninth field makes the line wrong too. */
		for (char *p = line; p && nf < 9; nf++) {
			f[nf] = p;
			char *t = strchr(p, '\t');
			if (t)
				*t = '\0';
			p = t ? t + 1 : NULL;
		}
		struct backend_choice_key k;
		memset(&k, 0, sizeof(k));
		int dt, out;
		if (nf != 8 || strlen(f[0]) >= sizeof(k.device) || u32_of(f[1], &k.m) < 0 ||
		    u32_of(f[2], &k.k) < 0 || (dt = dtype_value(f[3])) < 0 ||
		    u32_of(f[4], &k.sparse) < 0 || u32_of(f[5], &k.n_max) < 0 ||
		    (out = dtype_value(f[6])) < 0)
			return parse_fail(c, err, errlen, "line %u is not 8 fields "
					  "(device, m, k, dtype, sparse, n_max, out, order)", lineno);
		snprintf(k.device, sizeof(k.device), "%s", f[0]);
		k.dtype = (uint32_t)dt;
		k.out = (uint32_t)out;
		if (choice_cache_put(c, &k, f[7]) < 0)
			return parse_fail(c, err, errlen, "line %u has an empty or too long field",
					  lineno);
	}
	return 0;
}
