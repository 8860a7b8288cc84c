#include "wire_check.h"
#include "wire_varint.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Nested messages deeper than this are not looked into; the schema has
 * four levels. */
#define MAX_DEPTH 16

/* The field path down to here ("gemm.a.weight"), kept as a chain and
 * written out only for an error: every request walks this, and formatting
 * a path per field cost the loop thread a few microseconds a request. */
struct seg {
	const struct seg *up;
	const char *name;
};

static size_t path_of(const struct seg *s, char *buf, size_t len)
{
	if (!s)
		return 0;
	size_t n = path_of(s->up, buf, len);
	int m = snprintf(buf + n, n < len ? len - n : 0, "%s%s", n ? "." : "", s->name);
	return m < 0 ? n : n + (size_t)m < len ? n + (size_t)m : len - 1;
}

/* The next field of buf (of desc) from *pos: 1 with its descriptor in *f
 * (NULL where desc has no field of that number) and, for a
 * length-delimited one, its bytes in *p and *n (else *p is NULL); 0 at
 * the end, or where the wire stops making sense (the decoder judges
 * that, not these walks). */
static int next_field(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
		      size_t *pos, const ProtobufCFieldDescriptor **f, const uint8_t **p, uint64_t *n)
{
	uint64_t tag;
	if (*pos >= len || wire_varint_get(buf, len, pos, &tag) < 0)
		return 0;
	*p = NULL;
	*f = tag >> 3 <= UINT32_MAX
		     ? protobuf_c_message_descriptor_get_field(desc, (unsigned)(tag >> 3))
		     : NULL;
	switch (tag & 7) {
	case 0:
		return wire_varint_get(buf, len, pos, n) == 0;
	case 1:
		*pos += 8;
		return 1;
	case 5:
		*pos += 4;
		return 1;
	case 2:
		if (wire_varint_get(buf, len, pos, n) < 0 || *n > len - *pos)
			return 0;
		*p = buf + *pos;
		*pos += *n;
		return 1;
	default:
		return 0;
	}
}

static int walk(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
		const struct seg *up, int depth, char *err, size_t errlen)
{
	size_t pos = 0;
	const ProtobufCFieldDescriptor *f;
	const uint8_t *p;
	uint64_t n;
	while (next_field(desc, buf, len, &pos, &f, &p, &n)) {
		if (!f || !p)
			continue;
		const struct seg me = { up, f->name };
		if (f->type == PROTOBUF_C_TYPE_STRING) {
			const uint8_t *nul = memchr(p, 0, n);
			if (nul) {
				char path[160];
				path_of(&me, path, sizeof(path));
				snprintf(err, errlen, "%s has a NUL byte at offset %zu", path,
					 (size_t)(nul - p));
				return -EINVAL;
			}
		} else if (f->type == PROTOBUF_C_TYPE_MESSAGE && depth < MAX_DEPTH) {
			int rc = walk(f->descriptor, p, n, &me, depth + 1, err, errlen);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

int wire_check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
		       char *err, size_t errlen)
{
	if (!desc || (!buf && len))
		return -EINVAL;
	return walk(desc, buf, len, NULL, 0, err, errlen);
}

/* Adds the fields of buf (of desc) and of its sub-messages to *count,
 * stopping once it is over max. */
static void count_walk(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
		       int depth, size_t max, size_t *count)
{
	size_t pos = 0;
	const ProtobufCFieldDescriptor *f;
	const uint8_t *p;
	uint64_t n;
	while (*count <= max && next_field(desc, buf, len, &pos, &f, &p, &n)) {
		(*count)++;
		/* Each occurrence of a sub-message is unpacked on its own. */
		if (p && f && f->type == PROTOBUF_C_TYPE_MESSAGE && depth < MAX_DEPTH)
			count_walk(f->descriptor, p, n, depth + 1, max, count);
	}
}

size_t wire_count_fields(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
			 size_t max)
{
	size_t count = 0;
	if (desc && (buf || !len))
		count_walk(desc, buf, len, 0, max, &count);
	return count;
}

/* The length of the valid UTF-8 sequence at s, or 0. */
static size_t utf8_seq(const unsigned char *s)
{
	unsigned char c = s[0];
	if (c < 0x80)
		return 1;
	size_t n;
	uint32_t cp, min;
	if ((c & 0xe0) == 0xc0) {
		n = 2, cp = c & 0x1f, min = 0x80;
	} else if ((c & 0xf0) == 0xe0) {
		n = 3, cp = c & 0x0f, min = 0x800;
	} else if ((c & 0xf8) == 0xf0) {
		n = 4, cp = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80) /* a NUL ends the string here too */
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

void wire_utf8_sanitize(char *s)
{
	unsigned char *p = (unsigned char *)s;
	while (p && *p) {
		size_t n = utf8_seq(p);
		if (n == 0) {
			*p++ = '?';
			continue;
		}
		p += n;
	}
}
