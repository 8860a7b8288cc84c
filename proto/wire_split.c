#include "wire_split.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "wire_varint.h"

/* Request.gemm (2) .a (1) .dense (1) / .sparse (2); .b (2), .c (3);
 * Matrix.data (4); Sparse24.values (4), .meta (5).  test_wire_split
 * checks each against the descriptors by name, so a schema change that
 * moves one fails there. */
const struct wire_split_path wire_split_gemm_paths[] = {
	{ 3, { 2, 2, 4 } },       /* gemm.b.data */
	{ 3, { 2, 3, 4 } },       /* gemm.c.data */
	{ 4, { 2, 1, 1, 4 } },    /* gemm.a.dense.data */
	{ 4, { 2, 1, 2, 4 } },    /* gemm.a.sparse.values */
	{ 4, { 2, 1, 2, 5 } },    /* gemm.a.sparse.meta */
};
const size_t wire_split_gemm_npaths =
	sizeof(wire_split_gemm_paths) / sizeof(wire_split_gemm_paths[0]);

/* Response.gemm (3) .d (1) .data (4). */
const struct wire_split_path wire_split_response_paths[] = {
	{ 3, { 3, 1, 4 } },
};
const size_t wire_split_response_npaths =
	sizeof(wire_split_response_paths) / sizeof(wire_split_response_paths[0]);

struct walker {
	const uint8_t *base; /* the whole payload, for the fields' offsets */
	const struct wire_split_path *paths;
	size_t min_len;
	struct wire_split_field *fields; /* NULL: sizing only */
	unsigned nfields;
};

/* Walks the message [p, p + n) at depth d, where the paths in mask have
 * matched every level above; writes the message without the fields taken
 * out to out (NULL: sizes it only) and its length to *outlen. */
static int walk(struct walker *w, const uint8_t *p, size_t n, unsigned d, uint32_t mask,
		uint8_t *out, size_t *outlen)
{
	size_t pos = 0, o = 0;
	uint32_t seen = 0;
	while (pos < n) {
		size_t start = pos;
		uint64_t key, v;
		if (wire_varint_get(p, n, &pos, &key) < 0)
			return -EINVAL;
		uint32_t hit = 0, term = 0;
		for (uint32_t m = mask; m; m &= m - 1) {
			unsigned i = (unsigned)__builtin_ctz(m);
			if (w->paths[i].field[d] == key >> 3) {
				hit |= 1u << i;
				if (w->paths[i].depth == d + 1)
					term |= 1u << i;
			}
		}
		/* protobuf merges a message field sent twice and keeps the last
		 * of a scalar: on a path, either would need the walk to merge
		 * too.  The caller decodes it whole instead. */
		if (hit & seen)
			return -EINVAL;
		seen |= hit;
		size_t vat = pos; /* the value (for wire type 2, its length) */
		switch (key & 7) {
		case 0:
			if (wire_varint_get(p, n, &pos, &v) < 0)
				return -EINVAL;
			break;
		case 1:
		case 5:
			v = (key & 7) == 1 ? 8 : 4;
			if (v > n - pos)
				return -EINVAL;
			pos += v;
			break;
		case 2:
			if (wire_varint_get(p, n, &pos, &v) < 0 || v > n - pos)
				return -EINVAL;
			pos += v;
			break;
		default: /* groups: not in this schema, and not walked */
			return -EINVAL;
		}
		if (!hit || (key & 7) != 2) {
			if (out)
				memcpy(out + o, p + start, pos - start);
			o += pos - start;
			continue;
		}
		const uint8_t *val = p + pos - v;
		if (term && term != hit)
			return -EINVAL; /* a field both bytes and message: bad paths */
		if (term) {
			/* A field whose bytes do not start on an element boundary
			 * stays in the small copy: protobuf-c's copy of it is
			 * aligned, and its readers take it as f32 or u32. */
			if (v < w->min_len || v == 0 ||
			    ((uintptr_t)val & (WIRE_SPLIT_ALIGN - 1)) != 0) {
				if (out)
					memcpy(out + o, p + start, pos - start);
				o += pos - start;
			} else if (out) {
				w->fields[w->nfields++] = (struct wire_split_field){
					.offset = (size_t)(val - w->base),
					.len = (size_t)v,
					.path = (unsigned)__builtin_ctz(term),
				};
			}
			continue;
		}
		if (d + 1 >= WIRE_SPLIT_MAX_DEPTH)
			return -EINVAL;
		size_t inner;
		int rc = walk(w, val, (size_t)v, d + 1, hit, NULL, &inner);
		if (rc < 0)
			return rc;
		size_t head = vat - start; /* the key as it came */
		if (out) {
			memcpy(out + o, p + start, head);
			wire_varint_put(out + o + head, inner);
		}
		o += head + wire_varint_put(NULL, inner);
		if (out && inner == v) {
			memcpy(out + o, val, v); /* nothing taken out below */
		} else if (out) {
			size_t got;
			rc = walk(w, val, (size_t)v, d + 1, hit, out + o, &got);
			if (rc < 0)
				return rc;
		}
		o += inner;
	}
	*outlen = o;
	return 0;
}

int wire_split(const uint8_t *buf, size_t len, const struct wire_split_path *paths, size_t npaths,
	       size_t min_len, uint8_t *small, size_t *small_len, struct wire_split_field *fields)
{
	if ((!buf && len) || !paths || npaths == 0 || npaths > WIRE_SPLIT_MAX_PATHS || !small_len ||
	    (small && !fields))
		return -EINVAL;
	for (size_t i = 0; i < npaths; i++)
		if (paths[i].depth == 0 || paths[i].depth > WIRE_SPLIT_MAX_DEPTH)
			return -EINVAL;
	struct walker w = { .base = buf, .paths = paths, .min_len = min_len ? min_len : 1 };
	uint32_t all = (1u << npaths) - 1;
	size_t need;
	int rc = walk(&w, buf, len, 0, all, NULL, &need);
	if (rc < 0)
		return rc;
	if (!small) {
		*small_len = need;
		return 0;
	}
	if (need > *small_len)
		return -ENOSPC;
	w.fields = fields;
	rc = walk(&w, buf, len, 0, all, small, small_len);
	return rc < 0 ? rc : (int)w.nfields;
}

/* The bytes field at path in the decoded message m (and its has_ flag,
 * NULL for a field without one), or NULL when the message does not have
 * it: an enclosing message absent, or a oneof holding another member. */
static ProtobufCBinaryData *locate(ProtobufCMessage *m, const struct wire_split_path *path,
				   protobuf_c_boolean **has)
{
	for (unsigned i = 0; m && i < path->depth; i++) {
		const ProtobufCFieldDescriptor *f =
			protobuf_c_message_descriptor_get_field(m->descriptor, path->field[i]);
		if (!f || f->label == PROTOBUF_C_LABEL_REPEATED)
			return NULL;
		char *at = (char *)m;
		bool oneof = f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF;
		if (oneof && *(uint32_t *)(void *)(at + f->quantifier_offset) != f->id)
			return NULL;
		if (i + 1 < path->depth) {
			if (f->type != PROTOBUF_C_TYPE_MESSAGE)
				return NULL;
			m = *(ProtobufCMessage **)(void *)(at + f->offset);
			continue;
		}
		if (f->type != PROTOBUF_C_TYPE_BYTES)
			return NULL;
		if (has)
			*has = !oneof && f->label == PROTOBUF_C_LABEL_OPTIONAL
				       ? (protobuf_c_boolean *)(void *)(at + f->quantifier_offset)
				       : NULL;
		return (ProtobufCBinaryData *)(void *)(at + f->offset);
	}
	return NULL;
}

/* Small copies up to this size are made on the stack: a request's fields
 * other than its matrices take a few dozen bytes. */
#define SMALL_ON_STACK 2048

ProtobufCMessage *wire_split_unpack(const ProtobufCMessageDescriptor *desc,
				    const struct wire_split_path *paths, size_t npaths,
				    size_t min_len, const uint8_t *buf, size_t len, size_t *in_place)
{
	struct wire_split_field f[WIRE_SPLIT_MAX_PATHS];
	uint8_t stack[SMALL_ON_STACK];
	size_t need = 0, none;
	if (!in_place)
		in_place = &none;
	*in_place = 0;
	if (!desc || len < (min_len ? min_len : 1) ||
	    wire_split(buf, len, paths, npaths, min_len, NULL, &need, NULL) < 0 || need == len)
		return protobuf_c_message_unpack(desc, NULL, len, buf);
	uint8_t *small = need <= sizeof(stack) ? stack : malloc(need);
	ProtobufCMessage *m = NULL;
	int n = small ? wire_split(buf, len, paths, npaths, min_len, small, &need, f) : -ENOMEM;
	if (n > 0)
		m = protobuf_c_message_unpack(desc, NULL, need, small);
	if (small != stack)
		free(small);
	ProtobufCBinaryData *bd[WIRE_SPLIT_MAX_PATHS];
	protobuf_c_boolean *has[WIRE_SPLIT_MAX_PATHS];
	for (int i = 0; m && i < n; i++) {
		bd[i] = locate(m, &paths[f[i].path], &has[i]);
		/* Taken out of the small copy, the field must be there and
		 * empty; when it is not (the losing member of a oneof sent
		 * twice), only the whole decode says what protobuf makes of it. */
		if (!bd[i] || bd[i]->data || bd[i]->len) {
			protobuf_c_message_free_unpacked(m, NULL);
			m = NULL;
		}
	}
	if (!m)
		return protobuf_c_message_unpack(desc, NULL, len, buf);
	for (int i = 0; i < n; i++) {
		bd[i]->data = (uint8_t *)(uintptr_t)(buf + f[i].offset);
		bd[i]->len = f[i].len;
		if (has[i])
			*has[i] = 1;
	}
	*in_place = (size_t)n;
	return m;
}

void wire_split_free(ProtobufCMessage *m, const struct wire_split_path *paths, size_t npaths,
		     const uint8_t *buf, size_t len)
{
	if (!m)
		return;
	uintptr_t lo = (uintptr_t)buf, hi = lo + len;
	for (size_t i = 0; i < npaths; i++) {
		ProtobufCBinaryData *bd = locate(m, &paths[i], NULL);
		if (bd && bd->data && (uintptr_t)bd->data >= lo && (uintptr_t)bd->data < hi) {
			bd->data = NULL;
			bd->len = 0;
		}
	}
	protobuf_c_message_free_unpacked(m, NULL);
}

size_t wire_pad(size_t at, uint8_t out[WIRE_PAD_FIELD_MAX])
{
	size_t n = (WIRE_PAD_ALIGN - at % WIRE_PAD_ALIGN) % WIRE_PAD_ALIGN;
	if (n == 0)
		return 0;
	/* The field is a key and a length byte at least: one byte short of
	 * the boundary takes the one after. */
	if (n < 2)
		n += WIRE_PAD_ALIGN;
	out[0] = (15u << 3) | 2u; /* Request.pad, length-delimited */
	out[1] = (uint8_t)(n - 2);
	memset(out + 2, 0, n - 2);
	return n;
}
